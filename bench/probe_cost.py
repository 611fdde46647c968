#!/usr/bin/env python3
"""What the CUDA probes cost the training process: its step time with and without them.

Usage: bench/probe_cost.py [EXPORTER_BINARY] [--seconds 10] [--rounds 2] [--real]

Three loops on the emulated torch (workloads/emutorch, over the stub CUDA driver the probes
attach to), each a step after another for --seconds per run:
  launch-heavy  50 kernels per op call, 8 calls a step, a scalar read back every 20 steps:
                tens of thousands of cuLaunchKernel calls a second, each probed;
  sync-heavy    10 kernels of 0.2 ms and a loss.item() every step: a timed wait each;
  collective-heavy  a DDP-shaped step of a one-rank communicator through the stub libnccl:
                25 bucket all-reduces of 1 MiB between kernels, the batch uploaded and the
                loss read back: each all-reduce counted and marked, the step timed.
Each loop runs alone, beside the exporter with `sources.cuda` off, and beside it with the
probes on, the three in turn --rounds times (the VM is shared: interleaving spreads its
drift over all three). The probes' cost is the step time with them against the step time
with the exporter without them; the exporter alone against nothing is its sampling's cost to
the job. On a noisy VM a 1 % cost hides in the runs' spread, so the launch-heavy loop also
measures its launch windows apart, from inside: while a window's probes are attached every
launch is about tenfold slower, a run of slow steps no stall of the machine makes; the time
those runs took beyond as many typical steps, as a share of the run, is "in launch windows"
(near 0 without the probes). Run as root (the probes need CAP_BPF and CAP_PERFMON); needs
`cargo build --release --workspace`.

With --real, the same loops on a real GPU with CUDA PyTorch and the real NVML: an op call's
kernels are 4096-square bf16 matmuls (about 0.2 ms on an H100 or H200) or, for the
launch-heavy loop's, 4096-element adds; the collective-heavy loop all-reduces through
torch.distributed over NCCL (one rank).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from procstats import free_port, wait_for_url

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "workloads"))
import emugpu  # noqa: E402

# The collective-heavy loop's steps, after its communicator's setup: ALL_REDUCE is the call.
COLLECTIVE_LOOP = """steps, collectives = 0, 0
deadline = time.monotonic() + SECONDS
started = time.monotonic()
while time.monotonic() < deadline:
    batch = torch.empty(4096).to("cuda")
    torch._C._launch(1e-4, sm=0.8, count=10)
    for _ in range(25):
        torch._C._launch(2e-5, sm=0.8, count=4)
        ALL_REDUCE
    collectives += 25
    x.sum().item()
    steps += 1
elapsed = time.monotonic() - started
print(elapsed / steps * 1e3, collectives / elapsed, 0)
"""

LOOPS = {
    "launch-heavy": """
import statistics, time, torch
torch.cuda.set_device(0)
x = torch.empty(4096).to("cuda")
steps, launches, ends = 0, 0, []
deadline = time.monotonic() + SECONDS
started = time.monotonic()
while time.monotonic() < deadline:
    for _ in range(8):
        torch._C._launch(2e-7, sm=0.3, count=50)
    launches += 400
    steps += 1
    if steps % 20 == 0:
        x.sum().item()
    ends.append(time.monotonic())
elapsed = ends[-1] - started
# A launch window slows every launch tenfold while its probes are attached: a run of slow
# steps lasting 10 ms or more. The time those runs took beyond as many typical steps is what
# the windows cost; a step the machine stalled alone (the VM's noise) is not a run.
durations = [b - a for a, b in zip([started] + ends, ends)]
typical = statistics.median(durations)
lost, run = 0.0, []
for d in durations + [0.0]:
    if d > 4 * typical:
        run.append(d)
        continue
    if sum(run) >= 0.01:
        lost += sum(run) - len(run) * typical
    run = []
print(elapsed / steps * 1e3, launches / elapsed, lost / elapsed)
""",
    "sync-heavy": """
import time, torch
torch.cuda.set_device(0)
x = torch.empty(4096).to("cuda")
steps = 0
deadline = time.monotonic() + SECONDS
started = time.monotonic()
while time.monotonic() < deadline:
    torch._C._launch(2e-4, sm=0.9, count=10)
    x.sum().item()
    steps += 1
elapsed = time.monotonic() - started
print(elapsed / steps * 1e3, steps / elapsed, 0)
""",
    "collective-heavy": """
import ctypes, os, time, torch, emugpu
torch.cuda.set_device(0)
x = torch.empty(4096).to("cuda")
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]
nccl = ctypes.CDLL(os.path.join(emugpu._libraries(), "libnccl.so.2"))
nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
nccl.ncclAllReduce.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_size_t, ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 2
uid, comm = UniqueId(), ctypes.c_void_p()
assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
buffer = 0x7e0000000000
""" + COLLECTIVE_LOOP.replace(
        "ALL_REDUCE", "assert nccl.ncclAllReduce(buffer, buffer, 1 << 18, 7, 0, comm, None) == 0"
    ),
}


# --real: the emulated torch's `_launch` on a real GPU, so that the loops above run unchanged.
REAL_LAUNCH = """
import torch
torch.cuda.set_device(0)
_a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
_x = torch.zeros(4096, device="cuda")
def _launch(seconds, sm=1.0, count=1):
    for _ in range(count):
        if sm >= 0.5:
            _a @ _a
        else:
            _x.add_(1.0)
torch._C._launch = _launch
"""

# --real: the collective-heavy loop through torch.distributed (NCCL, one rank).
REAL_COLLECTIVES = """
import os, time, torch
import torch.distributed as dist
dist.init_process_group("nccl", init_method=f"file:///tmp/probe-cost-{os.getpid()}", rank=0, world_size=1)
x = torch.empty(4096).to("cuda")
bucket = torch.zeros(1 << 18, device="cuda")
""" + COLLECTIVE_LOOP.replace("ALL_REDUCE", "dist.all_reduce(bucket)")


def exporter(binary, work, probes, real=False):
    """The exporter on the emulated GPU of `work` (with `real`, on the node's GPUs through the
    real NVML), with or without the CUDA probes."""
    port = free_port()
    scenario = os.path.join(work, "scenario.yaml")
    with open(scenario, "w") as f:
        f.write(f"devices:\n  - uuid: GPU-bench\n    timeline: {work}/timelines/gpu0.timeline\n")
    config = os.path.join(work, "config.yaml")
    library = "" if real else f"  gpu:\n    nvml_library: {ROOT}/target/release/libfake_nvml.so\n"
    with open(config, "w") as f:
        f.write(
            f"listen_address: 127.0.0.1:{port}\nsample_interval: 1s\nsources:\n{library}"
            f"  cuda:\n    enabled: {'true' if probes else 'false'}\n"
        )
    process = subprocess.Popen(
        [binary, "--config", config],
        env={**os.environ} if real else {**os.environ, "FAKE_NVML_SCENARIO": scenario},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_url(f"http://127.0.0.1:{port}/metrics", 20)
    return process


def run_loop(body, work, seconds, real=False):
    """(ms per step, rate, share of the run lost in launch windows) of one run of a loop."""
    env = {
        **os.environ,
        "EMUGPU_DIR": os.path.join(work, "timelines"),
        "EMUCUDA_DIR": os.path.join(work, "cuda"),
        "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "workloads", "emutorch"), os.path.join(ROOT, "workloads")]),
    }
    if real:
        env["PYTHONPATH"] = os.path.join(ROOT, "workloads")
    out = subprocess.run(
        [sys.executable, "-c", body.replace("SECONDS", str(seconds))],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    step_ms, rate, in_windows = (float(v) for v in out.stdout.split())
    return step_ms, rate, in_windows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("exporter", nargs="?", default=os.path.join(ROOT, "target/release/gpu-bottleneck-exporter"))
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--real", action="store_true", help="a real GPU with CUDA PyTorch and the real NVML")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="probe-cost-")
    os.makedirs(os.path.join(work, "timelines"))
    if args.real:
        loops = {name: REAL_LAUNCH + body for name, body in LOOPS.items()}
        loops["collective-heavy"] = REAL_LAUNCH + REAL_COLLECTIVES
    else:
        loops = LOOPS
        emugpu.install_libraries(os.path.join(ROOT, "target", "release"), os.path.join(work, "cuda"))
    setups = [("alone", None), ("exporter, probes off", False), ("exporter, probes on", True)]
    results = {(loop, name): [] for loop in LOOPS for name, _ in setups}
    try:
        for _ in range(args.rounds):
            for loop, body in loops.items():
                for name, probes in setups:
                    process = exporter(args.exporter, work, probes, args.real) if probes is not None else None
                    try:
                        time.sleep(2 if process else 0)  # past the exporter's start and first attach
                        results[(loop, name)].append(run_loop(body, work, args.seconds, args.real))
                    finally:
                        if process:
                            process.terminate()
                            process.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'loop':16} {'setup':22} {'ms per step':>12} {'rate /s':>10} {'vs probes off':>14} {'in launch windows':>18}")
    for loop in LOOPS:
        off = statistics.mean(s for s, _, _ in results[(loop, "exporter, probes off")])
        for name, _ in setups:
            runs = results[(loop, name)]
            step = statistics.mean(s for s, _, _ in runs)
            rate = statistics.mean(r for _, r, _ in runs)
            # Measured on the launch-heavy loop only (the others' launches are too few to slow).
            windows = f"{100 * statistics.mean(w for _, _, w in runs):17.2f}%" if loop == "launch-heavy" else ""
            print(f"{loop:16} {name:22} {step:12.3f} {rate:10.0f} {100 * (step / off - 1):+13.2f}% {windows}")


if __name__ == "__main__":
    main()
