"""Mask indexing of the loss every step (`losses[losses > 0]`): the output's size comes back to the host, a sync no line names.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "sync_stall"}
SPEC = {"sync": "mask", "host_seconds": 0.025}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
