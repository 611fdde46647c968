#!/usr/bin/env python3
"""End to end: the exporter on its demo node, scraped by a real Prometheus server on loopback
that evaluates deploy/rules (with kube-state-metrics-shaped pod labels making the demo's vision
pods one JobSet, for the job dashboard); then every query of every dashboard (with its variables filled
from the data) must return data, every rule must evaluate without error, and the demo's
starving GPU must bring GPUDataStarvation to pending.

Usage: scripts/check_dashboards.py EXPORTER_BINARY   (needs `prometheus` on PATH)
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import kube_state_metrics
from loopback import free_port, get_json as get

SETTLE_SECONDS = 25  # verdicts need 10 s of evidence; rules and rates a few evaluations more


def wait_ready(url, deadline):
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{url} not ready")


def main():
    binary = sys.argv[1]
    prometheus = shutil.which("prometheus")
    if not prometheus:
        sys.exit("prometheus not found: apt-get install prometheus")
    work = tempfile.mkdtemp()
    exporter_port, prometheus_port = free_port(), free_port()
    rules = [os.path.abspath(p) for p in glob.glob("deploy/rules/*.yml")]
    # The demo node's vision pods (GPUs 0-5) are the ranks of one JobSet, for the job dashboard.
    state_metrics = kube_state_metrics.serve(
        [("vision", f"train-{gpu}", {"jobset.sigs.k8s.io/jobset-name": "vision-train"}) for gpu in range(6)])
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        json.dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": rules,
            "scrape_configs": [
                {"job_name": "gpu-bottleneck-exporter", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]},
                kube_state_metrics.scrape_config(state_metrics),
            ],
        }, f)
    exporter = subprocess.Popen([binary, "serve", "--demo", "--listen", f"127.0.0.1:{exporter_port}"], stderr=subprocess.DEVNULL)
    server = subprocess.Popen(
        [prometheus, f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/data", f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{prometheus_port}/api/v1"
    try:
        deadline = time.monotonic() + 60
        wait_ready(f"http://127.0.0.1:{exporter_port}/readyz", deadline)
        wait_ready(f"http://127.0.0.1:{prometheus_port}/-/ready", deadline)
        time.sleep(SETTLE_SECONDS)

        def query(expr):
            return get(f"{api}/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]

        def label_values(expr):
            match = re.match(r"label_values\((.*),\s*(\w+)\)$", expr)
            selector, label = match.group(1), match.group(2)
            return sorted({s["metric"][label] for s in query(selector) if label in s["metric"]})

        failures, checked = [], 0
        for path in sorted(glob.glob("dashboards/*.json")):
            with open(path) as f:
                board = json.load(f)
            values = {}
            for var in board["templating"]["list"]:
                if var["type"] != "query":
                    continue
                options = label_values(re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), ".*"), var["query"]["query"]))
                if not options:
                    failures.append(f"{path}: variable {var['name']} has no values")
                values[var["name"]] = options[0] if options else ".*"
            for panel in board["panels"]:
                for target in panel["targets"]:
                    expr = re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), ".*"), target["expr"])
                    checked += 1
                    if not query(expr):
                        failures.append(f"{path}: panel {panel['title']!r} query {expr!r} returned nothing")
        groups = get(f"{api}/rules")["data"]["groups"]
        bad_rules = [r["name"] for g in groups for r in g["rules"] if r.get("health") != "ok"]
        if bad_rules:
            failures.append(f"rules not evaluating cleanly: {bad_rules}")
        alerts = get(f"{api}/alerts")["data"]["alerts"]
        starving = [a for a in alerts if a["labels"]["alertname"] == "GPUDataStarvation" and a["labels"].get("gpu") == "0"]
        if not starving or starving[0]["state"] != "pending":
            failures.append(f"GPUDataStarvation for the demo's GPU 0 should be pending, got {starving}")
        if failures:
            sys.exit("\n".join(failures))
        rule_count = sum(len(g["rules"]) for g in groups)
        print(f"{checked} dashboard queries returned data; {rule_count} rules healthy; GPUDataStarvation pending on the demo's starving GPU")
    finally:
        for process in (server, exporter):
            process.terminate()
            process.wait(timeout=20)
        state_metrics.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
