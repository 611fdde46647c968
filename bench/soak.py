#!/usr/bin/env python3
"""Soak: the exporter on its demo node, scraped once a second for a long time; prints the
resident memory over time and the scrape latencies, to show memory stays flat.

Usage: bench/soak.py EXPORTER_BINARY [--minutes 10]
"""
import argparse
import http.client
import statistics
import subprocess
import time

from procstats import free_port, memory_mib


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("exporter")
    parser.add_argument("--minutes", type=float, default=10)
    args = parser.parse_args()
    port = free_port()
    process = subprocess.Popen([args.exporter, "serve", "--demo", "--listen", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        start = time.monotonic()
        latencies, memory, scrapes, failures = [], [], 0, 0
        next_memory = start
        while time.monotonic() - start < args.minutes * 60:
            began = time.perf_counter()
            try:
                connection.request("GET", "/metrics")
                response = connection.getresponse()
                response.read()
                failures += response.status != 200
            except (OSError, http.client.HTTPException):
                failures += 1
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            latencies.append(time.perf_counter() - began)
            scrapes += 1
            if time.monotonic() >= next_memory:
                memory.append((time.monotonic() - start, memory_mib(process.pid, "VmRSS")))
                next_memory += 60
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - began)))
        memory.append((time.monotonic() - start, memory_mib(process.pid, "VmRSS")))
        print(f"{scrapes} scrapes over {args.minutes:g} min, {failures} failed; latency p50 {statistics.median(latencies) * 1e3:.3f} ms, "
              f"p99 {sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1e3:.3f} ms")
        print("minute  RSS MiB")
        for at, rss in memory:
            print(f"{at / 60:6.1f}  {rss:7.2f}")
        values = [rss for _, rss in memory]
        print(f"RSS first {values[0]:.2f} MiB, last {values[-1]:.2f} MiB, max {max(values):.2f} MiB, growth {values[-1] - values[0]:+.2f} MiB")
    finally:
        process.terminate()
        process.wait(timeout=10)


if __name__ == "__main__":
    main()
