#!/usr/bin/env python3
"""`cargo test --workspace --all-targets`, with the test binaries run a few at a time.

cargo runs its test binaries one after the other. Most of their time here is waiting (live
processes sampled for seconds, a real server's timeouts, Python loops starting), not CPU: 74 s
of wall time for 31 s of CPU on the 2-core VM, 27 s three at a time (2026-12-02). This builds them with cargo, then runs them
`--jobs` at a time, each in its package's directory as cargo would, and prints each one's
output whole once it ends, and the slowest at the end. Exits non-zero if any failed.

    python3 scripts/run_tests.py [--jobs 3]
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time


def test_binaries():
    """(name, executable, package directory) of every test target, built by cargo."""
    build = subprocess.run(
        ["cargo", "test", "--workspace", "--all-targets", "--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE,
        text=True,
    )
    if build.returncode != 0:
        sys.exit(build.returncode)
    found = []
    for line in build.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        target = message["target"]
        # "path+file:///repo/crates/fake-nvml#fake-nvml@0.1.0" (or "...#0.1.0" where the
        # directory is the package's name).
        source, _, version = message["package_id"].partition("#")
        package = version.split("@")[0] if "@" in version else source.rsplit("/", 1)[-1]
        name = f"{package} {target['kind'][0]} {target['name']}"
        found.append((name, message["executable"], os.path.dirname(message["manifest_path"])))
    return found


def run(binary):
    name, executable, directory = binary
    started = time.monotonic()
    done = subprocess.run([executable], cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return name, done.returncode, done.stdout, time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, help="test binaries run at once")
    args = parser.parse_args()
    binaries = test_binaries()
    failed, took = [], []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for name, code, output, seconds in pool.map(run, binaries):
            print(f"\n--- {name} ({seconds:.1f} s)\n{output}", end="", flush=True)
            took.append((seconds, name))
            if code != 0:
                failed.append(name)
    print(f"\n{len(binaries)} test binaries, {args.jobs} at a time; the slowest:")
    for seconds, name in sorted(took, reverse=True)[:5]:
        print(f"  {seconds:5.1f} s  {name}")
    if failed:
        print("FAILED: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
