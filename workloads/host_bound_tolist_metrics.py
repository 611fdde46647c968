"""Metric code calls .tolist() on a host array of a few million floats every step: a line that reads like a GPU sync, which is host Python (no GPU involved).
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "host_bound"}
SPEC = {"sync": "none", "metrics": "tolist", "step_seconds": 0.03}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
