"""The per-step NaN check (sync_stall_nan_check) on a MIG slice of an A100: NVML answers no
utilization, no samples and no per-process utilization there, so the busy fraction is taken
from the loop's own waits in the driver (a lower bound), and the split from the stacks.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop
from sync_stall_nan_check import SPEC

GPUS = 1
DEVICE = "mig"
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "sync_stall"}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
