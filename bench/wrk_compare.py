#!/usr/bin/env python3
"""Scrape throughput and latency under wrk: this exporter next to node_exporter, same run.

The exporter serves a node of eight fake GPUs (the workspace's fake NVML library) running 16
real processes each, plus the real host; node_exporter serves the host with its defaults. For
1 and 64 connections, each target gets `wrk --latency` for --seconds (targets alternate, so
background noise hits both), and the table shows p50/p99 latency, requests per second, CPU
seconds per 1,000 scrapes (the process's user+system time over the run, its sampling
included) and peak RSS (VmHWM).

Usage: bench/wrk_compare.py EXPORTER_BINARY [--seconds 10]
Needs wrk and node_exporter (bench/run.sh installs both), and the fake library beside the
binary (cargo build --release --workspace).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from procstats import cpu_seconds, free_port, memory_mib, wait_for_url

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def wait_for(url, name):
    page = wait_for_url(url, 20, interval=0.2)
    if page is None:
        sys.exit(f"{name} did not answer at {url}")
    return len(page.encode())


# What Prometheus sends when it scrapes (2.x and 3.x): OpenMetrics preferred, gzip accepted.
PROMETHEUS_HEADERS = [
    "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding: gzip",
]


def wrk(url, connections, seconds, headers=()):
    """Requests, requests per second, p50 and p99 in ms, and errors of one wrk run."""
    threads = min(connections, 2)
    extra = [arg for header in headers for arg in ("-H", header)]
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", *extra, url],
        capture_output=True, text=True, check=True,
    ).stdout

    def latency(percent):
        found = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s|m)$", out, re.M)
        if not found:
            print(out, file=sys.stderr)
            return float("nan")
        value, unit = found.groups()
        return float(value) * UNITS[unit]

    requests = int(re.search(r"^\s+(\d+) requests in", out, re.M).group(1))
    rate = float(re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    problems = (errors.group(0) if errors else "") + (socket_errors.group(0) if socket_errors else "")
    return requests, rate, latency(50), latency(99), problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("exporter")
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    library = os.path.join(os.path.dirname(os.path.abspath(args.exporter)), "libfake_nvml.so")
    node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    for needed, hint in ((os.path.exists(library), f"{library}: cargo build --release --workspace"),
                         (shutil.which("wrk"), "wrk: apt-get install wrk"),
                         (node_exporter, "node_exporter: apt-get install prometheus-node-exporter")):
        if not needed:
            sys.exit(f"missing {hint}")

    gpu_processes = [subprocess.Popen(["sleep", "3600"]) for _ in range(8 * 16)]
    work = tempfile.mkdtemp()
    scenario = os.path.join(work, "scenario.yaml")
    with open(scenario, "w") as f:
        f.write("devices:\n")
        for gpu in range(8):
            f.write(f"  - uuid: GPU-{gpu:08}\n    utilization_gpu: 60\n    processes:\n")
            for p in gpu_processes[gpu * 16:(gpu + 1) * 16]:
                f.write(f"      - {{pid: {p.pid}, used_memory: 1000000000, sm: 5}}\n")
    config = os.path.join(work, "config.yaml")
    with open(config, "w") as f:
        # Every process gets its own series (the default keeps the top 10 per GPU).
        f.write(f"sources:\n  gpu:\n    nvml_library: {library}\n    max_processes_per_gpu: 16\n")
    ours, node = free_port(), free_port()
    targets = [
        ("gpu-bottleneck-exporter", f"http://127.0.0.1:{ours}/metrics",
         subprocess.Popen([args.exporter, "--config", config, "--listen", f"127.0.0.1:{ours}"],
                          env=dict(os.environ, FAKE_NVML_SCENARIO=scenario), stderr=subprocess.DEVNULL)),
        ("node_exporter (Debian)", f"http://127.0.0.1:{node}/metrics",
         subprocess.Popen([node_exporter, f"--web.listen-address=127.0.0.1:{node}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)),
    ]
    try:
        sizes = {name: wait_for(url, name) for name, url, _ in targets}
        time.sleep(3)  # a few ticks, so the process context of every GPU process is filled in
        sizes = {name: wait_for(url, name) for name, url, _ in targets}
        page = urllib.request.urlopen(targets[0][1]).read().decode()
        series = len(re.findall(r'^gpu_process_memory_used_bytes\{', page, re.M))
        print(f"exporter page: 8 fake GPUs, {series} GPU-process series, {sizes[targets[0][0]] / 1024:.1f} KiB; "
              f"node_exporter page {sizes[targets[1][0]] / 1024:.1f} KiB; wrk {args.seconds} s per cell")
        request = urllib.request.Request(targets[0][1], headers=dict(h.split(": ", 1) for h in PROMETHEUS_HEADERS))
        compressed = len(urllib.request.urlopen(request).read())
        print(f"exporter page as Prometheus fetches it (OpenMetrics, gzip): {compressed / 1024:.1f} KiB")
        rows = []
        cells = [(1, ()), (64, ())]
        for connections, headers in cells:
            for name, url, process in targets:
                cpu_before = cpu_seconds(process.pid)
                requests, rate, p50, p99, problems = wrk(url, connections, args.seconds, headers)
                cpu = (cpu_seconds(process.pid) - cpu_before) / requests * 1000
                rows.append((name, connections, p50, p99, rate, cpu, problems))
        # Prometheus' own headers, and past the connection cap (256 by default): 512 connections.
        for label, connections, headers in (("gzip, Prometheus' headers", 1, PROMETHEUS_HEADERS),
                                            ("512 conns past a cap of 256", 512, ())):
            name, url, process = targets[0]
            cpu_before = cpu_seconds(process.pid)
            requests, rate, p50, p99, problems = wrk(url, connections, args.seconds, headers)
            cpu = (cpu_seconds(process.pid) - cpu_before) / requests * 1000
            rows.append((f"{name} ({label})", connections, p50, p99, rate, cpu, problems))
        print(f"{'target':<60}{'conns':>6}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>10}{'CPU s/1k':>10}{'peak RSS MiB':>14}")
        for name, connections, p50, p99, rate, cpu, problems in rows:
            process = next(p for n, _, p in targets if name.startswith(n))
            print(f"{name:<60}{connections:>6}{p50:>9.3f}{p99:>9.3f}{rate:>10.0f}{cpu:>10.3f}{memory_mib(process.pid, 'VmHWM'):>14.1f}"
                  + (f"  {problems}" if problems else ""))
        for connections in (1, 64):
            ours_row = next(r for r in rows if r[0] == targets[0][0] and r[1] == connections)
            node_row = next(r for r in rows if r[0] == targets[1][0] and r[1] == connections)
            print(f"{connections} connection(s): exporter p99 {node_row[3] / ours_row[3]:.1f}x lower, "
                  f"{ours_row[4] / node_row[4]:.1f}x the requests per second")
    finally:
        for _, _, process in targets:
            process.terminate()
            process.wait(timeout=10)
        for p in gpu_processes:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
