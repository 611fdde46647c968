#!/usr/bin/env python3
"""Checks expositions with parsers that are not ours.

--openmetrics FILE...  parse each file with prometheus_client's strict OpenMetrics parser.
--live BINARY [ARGS]   start BINARY on a free loopback port with no config (plus ARGS, e.g.
                       --demo), wait until ready, and check /metrics in both formats: classic
                       text through `promtool check metrics`, OpenMetrics through the strict
                       parser.
"""
import socket
import subprocess
import sys
import time
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def check_openmetrics(text, origin):
    families = list(text_string_to_metric_families(text))
    print(f"{origin}: {len(families)} families parse as OpenMetrics")


def check_text(text, origin):
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
    if result.returncode != 0:
        sys.exit(f"{origin}: promtool check metrics failed:\n{result.stdout.decode()}{result.stderr.decode()}")
    print(f"{origin}: promtool check metrics passed")


def fetch(url, accept=None):
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.read().decode()


def live(binary, extra):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}", *extra], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if fetch(base + "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                sys.exit("exporter not ready within 10 s")
            time.sleep(0.05)
        time.sleep(1.2)  # a second tick, so interval rates are present too
        label = " ".join(["live /metrics", *extra])
        check_text(fetch(base + "/metrics")[1], f"{label} (text)")
        check_openmetrics(fetch(base + "/metrics", "application/openmetrics-text")[1], f"{label} (OpenMetrics)")
    finally:
        process.terminate()
        process.wait(timeout=10)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--openmetrics":
        for path in sys.argv[2:]:
            with open(path) as f:
                check_openmetrics(f.read(), path)
    elif len(sys.argv) >= 3 and sys.argv[1] == "--live":
        live(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
