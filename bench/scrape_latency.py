#!/usr/bin/env python3
"""Scrape latency of this exporter next to node_exporter, same machine, same run.

Starts both on free loopback ports, warms each up, then sends N sequential GET /metrics over
one keep-alive connection to each (alternating in blocks so background noise hits both) and
prints a table: median, p90, p99 latency, body size, CPU seconds per 1,000 scrapes (process
user+system time over the run, sampling included) and peak RSS.

Usage: bench/scrape_latency.py EXPORTER_BINARY [--requests N]
node_exporter is Debian's `prometheus-node-exporter` (apt-get install prometheus-node-exporter).
"""
import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Target:
    def __init__(self, name, argv, port):
        self.name, self.port = name, port
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.latencies, self.size = [], 0
        deadline = time.monotonic() + 15
        while True:
            try:
                self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                self.scrape()
                break
            except (OSError, http.client.HTTPException, AssertionError):
                if time.monotonic() > deadline:
                    sys.exit(f"{name} did not answer on port {port}")
                time.sleep(0.1)

    def scrape(self):
        self.connection.request("GET", "/metrics")
        response = self.connection.getresponse()
        body = response.read()
        assert response.status == 200, response.status
        self.size = len(body)

    def timed(self, count):
        for _ in range(count):
            start = time.perf_counter()
            self.scrape()
            self.latencies.append(time.perf_counter() - start)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("exporter")
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if not node_exporter:
        sys.exit("node_exporter not found: apt-get install prometheus-node-exporter")

    ours_port, node_port = free_port(), free_port()
    targets = [
        Target("gpu-bottleneck-exporter", [args.exporter, "serve", "--listen", f"127.0.0.1:{ours_port}"], ours_port),
        Target("node_exporter 1.5 (Debian)", [node_exporter, f"--web.listen-address=127.0.0.1:{node_port}"], node_port),
    ]
    try:
        time.sleep(1.5)  # let our sampler take a second tick so the page is complete
        for t in targets:
            t.timed(50)  # warm-up, discarded
            t.latencies.clear()
        cpu_before = {t.name: cpu_seconds(t.process.pid) for t in targets}
        wall_before = time.monotonic()
        block = 50
        for _ in range(args.requests // block):
            for t in targets:
                t.timed(block)
        wall = time.monotonic() - wall_before
        print(f"{args.requests} sequential keep-alive scrapes each, interleaved in blocks of {block}; {wall:.1f} s wall")
        print(f"{'target':<28} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'body KiB':>9} {'CPU s/1k scrapes':>17} {'peak RSS MiB':>13}")
        for t in targets:
            cpu = (cpu_seconds(t.process.pid) - cpu_before[t.name]) / len(t.latencies) * 1000
            print(
                f"{t.name:<28} {statistics.median(t.latencies)*1e3:>8.3f} {percentile(t.latencies, 0.9)*1e3:>8.3f}"
                f" {percentile(t.latencies, 0.99)*1e3:>8.3f} {t.size/1024:>9.1f} {cpu:>17.3f} {peak_rss_mib(t.process.pid):>13.1f}"
            )
    finally:
        for t in targets:
            t.stop()


if __name__ == "__main__":
    main()
