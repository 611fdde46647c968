#!/usr/bin/env python3
"""Sampling cost on a crowded GPU node, next to the peers, same run.

Usage: bench/sampling_cost.py EXPORTER_BINARY [--extra 2000] [--seconds 60] [--shapes training,idle] [--no-caps]

Starts --extra idle `sleep` processes (the rest of the node) and, per shape, eight GPU
processes on eight fake GPUs (the workspace's fake NVML library):
  training  each a rank shaped like PyTorch's (bench/rank.py): 128 threads and 8 loader
            workers of 4 threads each, so 1,280 threads in the GPU process trees;
  idle      each a single-threaded shell with 8 sleeping children (the old stand-in).
Then, one target at a time, it runs each exporter for --seconds at a 1 s collection interval
with one scrape every 15 s (Prometheus' default), and reports its CPU as a share of one core,
its peak RSS and the scraped page's size and series. This exporter is measured five times:
without the Python stacks or the CUDA probes, with the stacks (`+stacks`: each rank's main
thread sampled twice a second; run the bench as root for the ptrace access that needs), with
the probes too (`+probes`, the default with the stacks: the training ranks map the stub CUDA
driver and call it, 1,000 launches and 10 syncs a second each; needs CAP_BPF and CAP_PERFMON),
with the defaults at a 2 s tick (`sample_interval: 2s`: the stacks and the probes keep their
own rates), and with the culprit pass over every process on every 5 s as well (`+culprits`:
by default it runs only while a GPU scores data_io, data_cpu or contention); with --no-caps,
the stacks-and-probes configuration once more as uid 0 without capabilities (both refused,
reported unsupported: what a DaemonSet that grants none pays). It then runs once
more for --seconds, scraped every second, to report the per-source duration of every tick
(kept out of the CPU figure: every scrape of a new snapshot renders the page).

Peers, each measured only where installed (bench/run.sh installs them):
  all-smi          `all-smi api` (crates.io); it looks for NVML only when `nvidia-smi -L` lists
                   a GPU, so a stand-in nvidia-smi answering -L is put first on its PATH;
  nvitop-exporter  (PyPI) loads libnvidia-ml.so.1 through LD_LIBRARY_PATH: a link to the fake;
  node_exporter    (Debian prometheus-node-exporter) with its default collectors.
Everything started is stopped at the end. Needs `cargo build --release --workspace`.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from procstats import cpu_seconds, cpu_seconds_by_thread, free_port, get, memory_mib
from procstats import wait_for_url as wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
SCRAPE_EVERY = 15.0
# This exporter's configurations: (name suffix, stacks, CUDA probes, culprits always, tick).
# The defaults once more at a 2 s tick: what the 1 s tick's per-tick work costs, against the
# stacks' and probes' own threads, which keep their rates.
VARIANTS = (
    ("", "false", "false", "false", "1s"),
    (" +stacks", "true", "false", "false", "1s"),
    (" +stacks +probes", "true", "true", "false", "1s"),
    (" +stacks +probes, 2 s tick", "true", "true", "false", "2s"),
    (" +stacks +probes +culprits", "true", "true", "true", "1s"),
)


# uid 0 with every capability dropped, as a DaemonSet that grants none runs (util-linux setpriv).
NO_CAPS = ["setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]


def series(page):
    return sum(1 for line in page.splitlines() if line and not line.startswith("#"))


def start_ranks(shape, cuda):
    """Eight GPU processes of the shape; returns the Popen objects once all are up. Training
    ranks map the stub CUDA driver in `cuda` and call it, so that the probes attach and fire."""
    ranks = []
    for _ in range(8):
        if shape == "training":
            cmd = [sys.executable, os.path.join(HERE, "rank.py"), "--threads", "128", "--workers", "8", "--worker-threads", "4", "--cuda", cuda]
            rank = subprocess.Popen(cmd, stdout=subprocess.PIPE, start_new_session=True, text=True)
            assert rank.stdout.readline().strip() == "ready"
        else:
            rank = subprocess.Popen(["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 3600 & done; wait"], start_new_session=True)
        ranks.append(rank)
    return ranks


def threads_in_trees(ranks):
    total = 0
    for rank in ranks:
        pids = [rank.pid] + [int(p) for p in subprocess.run(["pgrep", "-P", str(rank.pid)], capture_output=True, text=True).stdout.split()]
        for pid in pids:
            try:
                total += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    return total


def write_scenario(path, ranks):
    with open(path, "w") as f:
        f.write("devices:\n")
        for i, rank in enumerate(ranks):
            f.write(f"  - uuid: GPU-{i:08}-0000-4000-8000-000000000000\n    utilization_gpu: 50\n"
                    f"    processes:\n      - {{pid: {rank.pid}, used_memory: 1000000000, sm: 40}}\n")


def peers(work, library):
    """(name, command, env, metrics path) of each installed peer; the port is filled in later."""
    found = []
    nvml_dir = os.path.join(work, "nvml")
    os.makedirs(nvml_dir, exist_ok=True)
    link = os.path.join(nvml_dir, "libnvidia-ml.so.1")
    if not os.path.exists(link):
        os.symlink(library, link)
    all_smi = shutil.which("all-smi")
    if all_smi:
        bindir = os.path.join(work, "bin")
        os.makedirs(bindir, exist_ok=True)
        stand_in = os.path.join(bindir, "nvidia-smi")
        with open(stand_in, "w") as f:
            f.write("#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo \"GPU $i: NVIDIA H100 (UUID: GPU-$i)\"; done\n")
        os.chmod(stand_in, 0o755)
        env = {"PATH": bindir + ":" + os.environ["PATH"], "LD_LIBRARY_PATH": nvml_dir}
        found.append(("all-smi", lambda port: [all_smi, "api", "--port", str(port), "--interval", "1", "--processes"], env, "/metrics"))
    nvitop = shutil.which("nvitop-exporter")
    if nvitop:
        found.append(("nvitop-exporter", lambda port: [nvitop, "--bind-address", "127.0.0.1", "--port", str(port), "--interval", "1.0"],
                      {"LD_LIBRARY_PATH": nvml_dir}, "/metrics"))
    node = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if node:
        found.append(("node_exporter", lambda port: [node, f"--web.listen-address=127.0.0.1:{port}"], {}, "/metrics"))
    return found


def measure(name, command, env, path, seconds, durations_only=False):
    port = free_port()
    process = subprocess.Popen(command(port), env=dict(os.environ, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}{path}"
    try:
        page = wait_for(url)
        if page is None:
            return {"name": name, "error": "did not answer"}
        time.sleep(15)  # warm-up: the first discoveries walk every thread of each rank (10 s)
        durations = {}
        cpu_before, wall_before = cpu_seconds(process.pid), time.monotonic()
        threads_before = cpu_seconds_by_thread(process.pid)
        next_scrape = wall_before
        last_tick = None
        end = wall_before + seconds
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_scrape and not durations_only:
                page = get(url)
                next_scrape += SCRAPE_EVERY
            if durations_only:
                self_page = get(url)
                tick = re.search(r"^gpu_exporter_samples_total (\S+)$", self_page, re.M).group(1)
                if tick != last_tick:
                    last_tick = tick
                    for source, value in re.findall(r'^gpu_exporter_source_duration_seconds\{source="(\w+)"\} (\S+)$', self_page, re.M):
                        durations.setdefault(source, []).append(float(value) * 1000)
                    whole = re.search(r"^gpu_exporter_sample_duration_seconds (\S+)$", self_page, re.M).group(1)
                    durations.setdefault("whole tick", []).append(float(whole) * 1000)
            time.sleep(1)
        wall = time.monotonic() - wall_before
        cpu = (cpu_seconds(process.pid) - cpu_before) / wall
        threads = {n: (s - threads_before.get(n, 0.0)) / wall * 100 for n, s in cpu_seconds_by_thread(process.pid).items()}
        return {"name": name, "cpu": cpu * 100, "by_thread": threads, "rss": memory_mib(process.pid, "VmHWM"),
                "bytes": len(page.encode()), "series": series(page), "durations": durations}
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("exporter")
    parser.add_argument("--extra", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--shapes", default="training,idle")
    parser.add_argument("--only-exporter", action="store_true", help="skip the peers")
    parser.add_argument("--no-caps", action="store_true", help="also run the stacks-and-probes configuration as uid 0 without capabilities (needs root and setpriv)")
    parser.add_argument("--variants", default="", help="this exporter's configurations to run, by position in VARIANTS (0,2): all by default")
    args = parser.parse_args()
    exporter = os.path.abspath(args.exporter)
    library = os.path.join(os.path.dirname(exporter), "libfake_nvml.so")
    if not os.path.exists(library):
        sys.exit(f"{library} missing: cargo build --release --workspace")

    work = tempfile.mkdtemp()
    # The stub driver under the real name, which the probes look for in each rank's maps.
    cuda = os.path.join(work, "cuda")
    os.makedirs(cuda)
    shutil.copy(os.path.join(os.path.dirname(exporter), "libfake_cuda.so"), os.path.join(cuda, "libcuda.so.1"))
    crowd = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.extra)]
    rows, tick_tables = [], []
    try:
        for shape in args.shapes.split(","):
            ranks = start_ranks(shape, cuda)
            try:
                scenario = os.path.join(work, "scenario.yaml")
                write_scenario(scenario, ranks)
                targets = []
                chosen = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else VARIANTS
                for variant, stacks, cuda, culprits, tick in chosen:
                    config = os.path.join(work, f"config-{stacks}-{cuda}-{culprits}-{tick}.yaml")
                    with open(config, "w") as f:
                        f.write(f"sample_interval: {tick}\nsources:\n  gpu:\n    nvml_library: {library}\n  stacks:\n    enabled: {stacks}\n"
                                f"  cuda:\n    enabled: {cuda}\n  culprits:\n    always: {culprits}\n")
                    targets.append(("gpu-bottleneck-exporter" + variant, lambda port, config=config: [exporter, "--config", config, "--listen", f"127.0.0.1:{port}"], {}, "/metrics"))
                    if args.no_caps and stacks == cuda == "true" and culprits == "false" and tick == "1s":
                        # The same configuration as uid 0 with every capability dropped: the
                        # stacks and the probes refused (reported unsupported), the rest as is.
                        targets.append(("gpu-bottleneck-exporter" + variant + ", no caps", lambda port, config=config: [*NO_CAPS, exporter, "--config", config, "--listen", f"127.0.0.1:{port}"], {}, "/metrics"))
                if not args.only_exporter:
                    targets += peers(work, library)
                threads = threads_in_trees(ranks)
                processes = len([p for p in os.listdir("/proc") if p.isdigit()])
                for name, command, env, path in targets:
                    env = dict(env, FAKE_NVML_SCENARIO=scenario)
                    result = measure(name, command, env, path, args.seconds)
                    result.update(shape=shape, threads=threads, processes=processes)
                    rows.append(result)
                    if name.endswith("+culprits"):
                        timed = measure(name, command, env, path, args.seconds, durations_only=True)
                        tick_tables.append((shape, timed.get("durations", {})))
            finally:
                for rank in ranks:
                    try:
                        os.killpg(rank.pid, 9)
                    except ProcessLookupError:
                        pass
                    rank.wait()
    finally:
        for p in crowd:
            p.kill()
        for p in crowd:
            p.wait()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'GPU processes':<38}{'target':<50}{'CPU % of a core':>16}{'peak RSS MiB':>14}{'page KiB':>10}{'series':>8}")
    for r in rows:
        shape = f"{r['shape']} ({r['threads']} threads, {r['processes']} procs)"
        if "error" in r:
            print(f"{shape:<38}{r['name']:<50}{r['error']:>16}")
            continue
        print(f"{shape:<38}{r['name']:<50}{r['cpu']:>16.2f}{r['rss']:>14.1f}{r['bytes'] / 1024:>10.1f}{r['series']:>8}")
    # Where this exporter's CPU goes, by thread name (threads that end every tick, such as
    # the per-GPU NVML readers, are in "the rest").
    for r in rows:
        if r["name"].startswith("gpu-bottleneck-exporter") and "by_thread" in r:
            named = sorted(((cpu, n) for n, cpu in r["by_thread"].items() if cpu >= 0.005), reverse=True)
            parts = ", ".join(f"{n} {cpu:.2f}" for cpu, n in named)
            print(f"  {r['name']} by thread (% of a core): {parts}, the rest {r['cpu'] - sum(r['by_thread'].values()):.2f}")
    for shape, durations in tick_tables:
        print(f"\nthis exporter, {shape} ranks: per-source duration of a tick")
        print(f"{'source':<12}{'ticks':>7}{'mean ms':>10}{'p95 ms':>10}{'max ms':>10}")
        for source, values in durations.items():
            values.sort()
            print(f"{source:<12}{len(values):>7}{statistics.mean(values):>10.3f}{values[int(0.95 * (len(values) - 1))]:>10.3f}{values[-1]:>10.3f}")


if __name__ == "__main__":
    main()
