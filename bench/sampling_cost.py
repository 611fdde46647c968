#!/usr/bin/env python3
"""Sampling cost per tick on a crowded node: the exporter's own figures with N extra processes.

Usage: bench/sampling_cost.py EXPORTER_BINARY [--extra 2000] [--seconds 30]

Starts N idle `sleep` processes (the crowd), eight "training" process trees (a parent with
eight worker children each), and the exporter at a 1 s interval against the fake NVML library
with eight GPUs, each running one of the trees (so the process source reads 72 processes per
tick). Then for --seconds it records, every second, the per-source durations the exporter
reports, and at the end the exporter's CPU time. Prints a table: mean and p95 milliseconds per
tick per source, and the exporter's CPU as a share of one core. Cleans everything up.
Needs the workspace built (cargo build --release --workspace).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from procstats import cpu_seconds, free_port

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("exporter")
    parser.add_argument("--extra", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()
    library = os.path.join(os.path.dirname(os.path.abspath(args.exporter)), "libfake_nvml.so")
    if not os.path.exists(library):
        sys.exit(f"{library} missing: cargo build --release --workspace")

    crowd = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.extra)]
    trees = [subprocess.Popen(["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 3600 & done; wait"], start_new_session=True) for _ in range(8)]
    work = tempfile.mkdtemp()
    scenario = os.path.join(work, "scenario.yaml")
    with open(scenario, "w") as f:
        f.write("devices:\n")
        for i, tree in enumerate(trees):
            f.write(f"  - uuid: GPU-{i:08}\n    utilization_gpu: 50\n    processes:\n      - {{pid: {tree.pid}, used_memory: 1000000, sm: 40}}\n")
    config = os.path.join(work, "config.yaml")
    with open(config, "w") as f:
        f.write(f"sample_interval: 1s\nsources:\n  gpu:\n    nvml_library: {library}\n")
    port = free_port()
    env = dict(os.environ, FAKE_NVML_SCENARIO=scenario)
    exporter = subprocess.Popen([args.exporter, "--config", config, "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # first discovery and a couple of ticks
        processes = len([p for p in os.listdir("/proc") if p.isdigit()])
        durations = {}
        cpu_before, wall_before = cpu_seconds(exporter.pid), time.monotonic()
        last_tick = None
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            tick = re.search(r"^gpu_exporter_samples_total (\S+)$", page, re.M).group(1)
            if tick != last_tick:
                last_tick = tick
                for source, value in re.findall(r'^gpu_exporter_source_duration_seconds\{source="(\w+)"\} (\S+)$', page, re.M):
                    durations.setdefault(source, []).append(float(value) * 1000)
                whole = re.search(r"^gpu_exporter_sample_duration_seconds (\S+)$", page, re.M).group(1)
                durations.setdefault("whole tick", []).append(float(whole) * 1000)
            time.sleep(1)
        cpu = (cpu_seconds(exporter.pid) - cpu_before) / (time.monotonic() - wall_before)
        workers = re.findall(r'^gpu_process_workers\{[^}]*\} (\S+)$', page, re.M)
        print(f"{processes} processes on the host ({args.extra} extra), 8 GPU process trees of 9, workers seen: {workers}")
        print(f"{'source':<12}{'ticks':>7}{'mean ms':>10}{'p95 ms':>10}")
        for source, values in durations.items():
            values.sort()
            print(f"{source:<12}{len(values):>7}{statistics.mean(values):>10.3f}{values[int(0.95 * (len(values) - 1))]:>10.3f}")
        print(f"exporter CPU over {args.seconds} s (sampling and these scrapes): {cpu * 100:.2f} % of one core")
    finally:
        exporter.terminate()
        exporter.wait()
        for tree in trees:
            os.killpg(tree.pid, 9)
        for p in crowd:
            p.kill()
        for p in crowd + trees:
            p.wait()


if __name__ == "__main__":
    main()
