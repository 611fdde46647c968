"""In-order delivery with one heavy batch in four (data_cpu_in_order) on a MIG slice: no
utilization, no samples; the loop waits for its loader, which the stacks see, and the workers'
CPU says why.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop
from data_cpu_in_order import SPEC

GPUS = 1
DEVICE = "mig"
EXPECT = {0: "data_cpu"}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
