"""A GPU-bound loop on a MIG slice of a Hopper GPU whose metric code turns a host array into a
list every step (`.tolist()`, 60-80 ms of Python) while the GPU works through the step's
kernels (120 ms), then uploads the next batch from pageable memory (`.to("cuda")`: a copy and
a stream sync) and waits there for the rest. The GPU never runs dry. NVML answers no
utilization on a MIG slice; on an A100 nothing else shows the GPU's busy time, and the
samples (the loop waits in a third of them, the rest is its own Python) read as host-bound at
most two thirds of the time. A Hopper's GPM answers per GPU instance: its graphics activity
is the slice's busy time. Written as PyTorch code (workloads/torch_loop.py) on the emulated
torch."""
import torch_loop

GPUS = 1
DEVICE = "hopper_mig"
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "busy"}
SPEC = {"sync": "to", "metrics": "tolist", "kernels": 8, "step_seconds": 0.12}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
