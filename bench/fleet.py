#!/usr/bin/env python3
"""The fleet on Prometheus' distributed path, measured (a benchmark, not a test).

Usage: bench/fleet.py EXPORTER_BINARY [--nodes 200] [--agents 2] [--seconds 300]
                      [--variants default,lean]

Per variant: --nodes demo exporters (`serve --demo --demo-node i`, twelve GPUs each), each on
its own loopback address (127.0.x.y:9842, as a fleet of nodes would be), scraped every 15 s by
--agents Prometheus servers in agent mode (the targets split between them, a `node` label
added as the ServiceMonitor does) that remote-write to one central Prometheus with the
remote-write receiver on and deploy/rules loaded. After a warm-up of two minutes it measures
for --seconds: the centre's head series, samples appended per second, resident memory and
CPU; each rule group's evaluation time; each dashboard panel's query latency through the HTTP
API (a range query over the measured window at a 15 s step, the median of three); the agents'
CPU and memory per node; the exporters' own CPU per node. Then a capacity table per 1,000 GPUs.

Variants: `default` (every family) and `lean` (`metrics.exclude` of the per-process families,
the host disk families and the top processes: per-GPU figures and verdicts only, the detail
left on the node's /metrics and /api/v1/diagnosis).

Needs `prometheus` (Debian 2.42 or newer: agent mode, remote-write receiver). All traffic stays
on 127.0.0.0/8; every process started is stopped.
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

from procstats import cpu_seconds, free_port, get, memory_mib, wait_for_url

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GPUS_PER_NODE = 12
VARIANTS = {
    "default": [],
    "lean": ["gpu_process_.*", "gpu_host_disk_.*", "gpu_host_top_process_.*"],
}


def wait_for(url, seconds=60):
    page = wait_for_url(url, seconds, interval=0.5)
    if page is None:
        sys.exit(f"{url} did not answer")
    return page


def metric(page, name):
    found = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", page, re.M)
    return float(found.group(1)) if found else None


def address(i):
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


def dashboard_queries(window_start, window_end):
    """Every panel query of every dashboard, its variables set to `.*` (all nodes, all GPUs:
    the heaviest a user can ask for)."""
    queries = []
    for path in sorted(glob.glob(os.path.join(ROOT, "dashboards", "*.json"))):
        with open(path) as f:
            board = json.load(f)
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = re.sub(r"\$__rate_interval", "1m", target["expr"])
                expr = re.sub(r"\$(\w+)", ".*", expr)
                queries.append((os.path.basename(path), panel["title"], expr))
    return queries


def run_variant(exporter, name, exclude, args, work):
    processes = {"exporters": [], "agents": [], "central": None}
    try:
        config = os.path.join(work, f"exporter-{name}.yaml")
        with open(config, "w") as f:
            yaml.safe_dump({"sources": {"kubernetes": {"enabled": False}}, "metrics": {"exclude": exclude}}, f)
        for i in range(args.nodes):
            processes["exporters"].append(subprocess.Popen(
                [exporter, "serve", "--demo", "--demo-node", str(i), "--config", config,
                 "--listen", f"{address(i)}:9842", "--log-level", "error"],
                env={k: v for k, v in os.environ.items() if k != "NODE_NAME"},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for i in range(args.nodes):
            wait_for(f"http://{address(i)}:9842/healthz")

        central_port = free_port()
        central_dir = os.path.join(work, f"central-{name}")
        central_config = os.path.join(work, f"central-{name}.yml")
        with open(central_config, "w") as f:
            yaml.safe_dump({"global": {"evaluation_interval": "15s"},
                            "rule_files": sorted(glob.glob(os.path.join(ROOT, "deploy", "rules", "*.yml")))}, f)
        processes["central"] = subprocess.Popen(
            ["prometheus", f"--config.file={central_config}", f"--storage.tsdb.path={central_dir}",
             f"--web.listen-address=127.0.0.1:{central_port}", "--web.enable-remote-write-receiver",
             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        central = f"http://127.0.0.1:{central_port}"
        wait_for(f"{central}/-/ready")

        for a in range(args.agents):
            targets = [{"targets": [f"{address(i)}:9842"], "labels": {"node": f"gpu-demo-{i}"}}
                       for i in range(a, args.nodes, args.agents)]
            agent_config = os.path.join(work, f"agent-{name}-{a}.yml")
            with open(agent_config, "w") as f:
                yaml.safe_dump({
                    "global": {"scrape_interval": "15s"},
                    "scrape_configs": [{"job_name": "gpu-bottleneck-exporter", "static_configs": targets}],
                    "remote_write": [{"url": f"{central}/api/v1/write"}],
                }, f)
            processes["agents"].append(subprocess.Popen(
                ["prometheus", "--enable-feature=agent", f"--config.file={agent_config}",
                 f"--storage.agent.path={work}/agent-{name}-{a}", f"--web.listen-address=127.0.0.1:{free_port()}",
                 "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        time.sleep(args.warmup)
        everyone = [processes["central"], *processes["agents"], *processes["exporters"]]
        cpu_before = {p.pid: cpu_seconds(p.pid) for p in everyone}
        page = get(f"{central}/metrics")
        appended_before = metric(page, "prometheus_tsdb_head_samples_appended_total")
        start_wall, start_unix = time.monotonic(), time.time()
        rule_seconds = {}
        while time.monotonic() - start_wall < args.seconds:
            time.sleep(15)
            for group in json.loads(get(f"{central}/api/v1/rules"))["data"]["groups"]:
                rule_seconds.setdefault(group["name"], []).append(group["evaluationTime"])
        elapsed = time.monotonic() - start_wall
        cpu = {p.pid: (cpu_seconds(p.pid) - cpu_before[p.pid]) / elapsed * 100 for p in everyone}
        page = get(f"{central}/metrics")
        result = {
            "variant": name,
            "nodes": args.nodes,
            "gpus": args.nodes * GPUS_PER_NODE,
            "head_series": metric(page, "prometheus_tsdb_head_series"),
            "samples_per_second": (metric(page, "prometheus_tsdb_head_samples_appended_total") - appended_before) / elapsed,
            "central_rss_mib": memory_mib(processes["central"].pid, "VmRSS"),
            "central_cpu": cpu[processes["central"].pid],
            "agents_cpu_per_node": sum(cpu[p.pid] for p in processes["agents"]) / args.nodes,
            "agents_rss_mib_per_node": sum(memory_mib(p.pid, "VmRSS") for p in processes["agents"]) / args.nodes,
            "exporter_cpu_per_node": statistics.mean(cpu[p.pid] for p in processes["exporters"]),
            "exporter_rss_mib": statistics.mean(memory_mib(p.pid, "VmRSS") for p in processes["exporters"]),
            "rule_groups": {g: (statistics.mean(v) * 1000, max(v) * 1000) for g, v in rule_seconds.items()},
        }
        panels = []
        for board, title, expr in dashboard_queries(start_unix, time.time()):
            query = urllib.parse.urlencode({"query": expr, "start": start_unix, "end": time.time(), "step": 15})
            took = []
            for _ in range(3):
                begin = time.monotonic()
                body = json.loads(get(f"{central}/api/v1/query_range?{query}"))
                took.append((time.monotonic() - begin) * 1000)
            panels.append((board, title, statistics.median(took), len(body["data"]["result"])))
        result["panels"] = panels
        return result
    finally:
        for p in [*processes["exporters"], *processes["agents"], processes["central"]]:
            if p is not None:
                p.terminate()
        for p in [*processes["exporters"], *processes["agents"], processes["central"]]:
            if p is not None:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("exporter")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=120)
    parser.add_argument("--variants", default="default,lean")
    args = parser.parse_args()
    if not shutil.which("prometheus"):
        sys.exit("needs `prometheus` on PATH (Debian: apt-get install prometheus)")
    exporter = os.path.abspath(args.exporter)
    work = tempfile.mkdtemp()
    results = []
    try:
        for name in args.variants.split(","):
            results.append(run_variant(exporter, name, VARIANTS[name], args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for r in results:
        print(f"\n## {r['variant']}: {r['nodes']} nodes, {r['gpus']} GPUs, {args.agents} agents, {args.seconds} s")
        print(f"centre: {r['head_series']:.0f} head series, {r['samples_per_second']:.0f} samples/s, "
              f"RSS {r['central_rss_mib']:.0f} MiB, CPU {r['central_cpu']:.1f} % of a core")
        print(f"agents per node: CPU {r['agents_cpu_per_node']:.3f} % of a core, RSS {r['agents_rss_mib_per_node']:.2f} MiB; "
              f"each exporter: CPU {r['exporter_cpu_per_node']:.2f} %, RSS {r['exporter_rss_mib']:.1f} MiB")
        print("| rule group | mean ms | max ms |\n|---|---|---|")
        for group, (mean, peak) in sorted(r["rule_groups"].items()):
            print(f"| {group} | {mean:.1f} | {peak:.1f} |")
        print("| dashboard | panel | median ms | series |\n|---|---|---|---|")
        for board, title, ms, count in r["panels"]:
            print(f"| {board} | {title} | {ms:.1f} | {count} |")
    print("\n| per 1,000 GPUs | series | samples/s | centre memory MiB (linear) |\n|---|---|---|---|")
    for r in results:
        scale = 1000 / r["gpus"]
        print(f"| {r['variant']} | {r['head_series'] * scale:,.0f} | {r['samples_per_second'] * scale:,.0f} | {r['central_rss_mib'] * scale:,.0f} |")


if __name__ == "__main__":
    main()
