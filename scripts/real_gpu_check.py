#!/usr/bin/env python3
"""Real-GPU check: the exporter's NVML path against nvidia-smi on a machine with a GPU.

Usage: scripts/real_gpu_check.py [EXPORTER_BINARY [EXPORTER_ARGS...]]
       (default target/release/gpu-bottleneck-exporter; extra arguments go to `serve`)

Starts the exporter on a free loopback port, runs a small load on GPU 0 for a few seconds
(a PyTorch matmul loop when torch is importable; otherwise the GPUs stay idle and the check
still compares idle readings), scrapes /metrics twice a few seconds apart and, at the moment of
each scrape, reads `nvidia-smi --query-gpu`. Prints one table per scrape: each key metric next
to nvidia-smi's figure, with the tolerance it is checked against. Exits 1 if any comparison
falls outside its tolerance. It reads only: it never changes clocks, power limits or modes.
"""
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

QUERY = [
    "index", "uuid", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu",
    "power.draw", "enforced.power.limit", "clocks.sm", "clocks.mem", "pcie.link.gen.current",
    "pcie.link.width.current",
]

# (label, exporter metric, scale to nvidia-smi's unit, nvidia-smi field, absolute tolerance, relative tolerance)
ROWS = [
    ("GPU-Util %", "gpu_utilization_ratio", 100, "utilization.gpu", 20, 0),
    ("memory used MiB", "gpu_memory_used_bytes", 1 / 2**20, "memory.used", 64, 0.05),
    ("memory total MiB", "gpu_memory_total_bytes", 1 / 2**20, "memory.total", 1, 0.01),
    ("temperature C", "gpu_temperature_celsius", 1, "temperature.gpu", 3, 0),
    ("power W", "gpu_power_watts", 1, "power.draw", 10, 0.2),
    ("power limit W", "gpu_power_limit_watts", 1, "enforced.power.limit", 1, 0.01),
    ("SM clock MHz", "gpu_clock_hertz{domain=sm}", 1e-6, "clocks.sm", 50, 0.1),
    ("memory clock MHz", "gpu_clock_hertz{domain=memory}", 1e-6, "clocks.mem", 50, 0.05),
    ("PCIe generation", "gpu_pcie_link_generation", 1, "pcie.link.gen.current", 0, 0),
    ("PCIe width", "gpu_pcie_link_width", 1, "pcie.link.width.current", 0, 0),
]
# Exporter-only figures, shown for the record.
EXTRA = [
    "gpu_busy_mean_ratio", "gpu_busy_idle_share_ratio", "gpu_busy_samples", "gpu_sm_activity_ratio",
    "gpu_sm_occupancy_ratio", "gpu_tensor_activity_ratio", "gpu_dram_bandwidth_utilization_ratio",
    "gpu_energy_joules_total", "gpu_pcie_tx_bytes_per_second", "gpu_pcie_rx_bytes_per_second",
]

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device='cuda'); b = torch.randn(8192, 8192, device='cuda')
end = time.time() + float(__import__('sys').argv[1])
while time.time() < end:
    c = a @ b
torch.cuda.synchronize()
"""


def parse(text):
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples.setdefault(m.group(1), []).append((labels, float(m.group(4))))
    return samples


def lookup(samples, spec, gpu):
    name, _, selector = spec.partition("{")
    wanted = dict(kv.split("=") for kv in selector.rstrip("}").split(",") if kv)
    for labels, value in samples.get(name, []):
        if labels.get("gpu") == gpu and all(labels.get(k) == v for k, v in wanted.items()):
            return value
    return None


def smi():
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True,
    ).stdout
    return {row[0]: dict(zip(QUERY, row)) for row in (
        [c.strip() for c in line.split(",")] for line in out.strip().splitlines())}


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def report(samples, reference, title):
    failures = 0
    print(f"\n== {title}")
    print(f"{'gpu':<4}{'metric':<18}{'exporter':>14}{'nvidia-smi':>14}{'tolerance':>16}  ok")
    for gpu, smi_row in sorted(reference.items()):
        for label, metric, scale, field, absolute, relative in ROWS:
            ours = lookup(samples, metric, gpu)
            theirs = number(smi_row[field])
            if ours is None or theirs is None:
                print(f"{gpu:<4}{label:<18}{'absent' if ours is None else f'{ours * scale:.1f}':>14}{smi_row[field]:>14}{'-':>16}  (not compared)")
                continue
            ours *= scale
            allowed = max(absolute, relative * abs(theirs))
            ok = abs(ours - theirs) <= allowed
            failures += not ok
            print(f"{gpu:<4}{label:<18}{ours:>14.1f}{theirs:>14.1f}{f'±{allowed:.1f}':>16}  {'yes' if ok else 'NO'}")
        for metric in EXTRA:
            value = lookup(samples, metric, gpu)
            print(f"{gpu:<4}{metric:<42}{'absent' if value is None else f'{value:.4g}':>14}")
        verdicts = [labels["verdict"] for labels, value in samples.get("gpu_verdict", []) if labels.get("gpu") == gpu and value == 1]
        active = [labels["kind"] for labels, value in samples.get("gpu_bottleneck", []) if labels.get("gpu") == gpu and value == 1]
        print(f"{gpu:<4}{'verdict':<42}{','.join(verdicts) or 'absent':>14}  active: {','.join(active) or 'none'}")
    return failures


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/gpu-bottleneck-exporter"
    if not shutil.which("nvidia-smi"):
        sys.exit("nvidia-smi not found: run this on a machine with an NVIDIA driver")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [binary, "serve", "--listen", f"127.0.0.1:{port}", *sys.argv[2:]]
    exporter = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    load = None
    try:
        try:
            import torch  # noqa: F401
            load = subprocess.Popen([sys.executable, "-c", LOAD, "12"])
            print("load: PyTorch 8192x8192 matmul loop on GPU 0 for 12 s")
        except ImportError:
            print("load: none (torch not importable); comparing idle readings")
        time.sleep(4)
        failures = 0
        for round_ in (1, 2):
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            failures += report(parse(page), smi(), f"scrape {round_}")
            up = lookup(parse(page), "gpu_exporter_nvml_up", None)
            time.sleep(3)
        print(f"\nNVML up: {up}; comparisons outside tolerance: {failures}")
        return 1 if failures else 0
    finally:
        if load:
            load.wait(timeout=30)
        exporter.terminate()
        _, errors = exporter.communicate(timeout=10)
        warnings = [l for l in errors.splitlines() if "WARN" in l or "ERROR" in l]
        if warnings:
            print("exporter warnings:\n  " + "\n  ".join(warnings[:20]))


if __name__ == "__main__":
    sys.exit(main())
