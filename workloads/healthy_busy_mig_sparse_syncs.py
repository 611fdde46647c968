"""A GPU-bound loop on a MIG slice of an A100 that reads its loss every ten steps: each step's
Python (45 ms before its first kernel) runs while the GPU works through the steps queued
before it (60 ms each), so the GPU never runs dry and the loop waits in `.item()` only for the
backlog, a fifth of the time. NVML answers no utilization there; the samples in which the loop
waits say the GPU was busy a fifth of the time and leave the Python's 75 % to the host, while
the sync's timing (it waits longer than a step, so the GPU was more than a step behind) says it
worked throughout. Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
DEVICE = "mig"
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "busy"}
SPEC = {"sync": "item", "sync_every": 10, "step_seconds": 0.06, "host_seconds": 0.045}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
