"""`batch.to("cuda")` of a pageable batch (sync_stall_to_pageable) on an A100, which has no GPM:
no SM activity, occupancy or tensor counters; the busy fraction and the stacks decide.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop
from sync_stall_to_pageable import SPEC

GPUS = 1
DEVICE = "ampere"
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "sync_stall"}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
