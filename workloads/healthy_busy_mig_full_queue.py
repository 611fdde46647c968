"""A GPU-bound loop on a MIG slice of an A100 that never syncs (its loss is logged elsewhere,
its batches uploaded from pinned memory): each step's 30 ms of Python launches 32 kernels
that take the GPU 60 ms, so the host runs ahead until CUDA's launch queue is full (a thousand
kernels, about two seconds in) and from then on waits in the launches for room, the model's
line as its Python frame and the thread running — half its time, while the other half's
Python runs as the GPU works through the queue. NVML answers no utilization there and the
samples never see the loop wait for the GPU: it reads as its own Python, host-bound, unless
the launches are timed (the CUDA probes' launch windows), which show the queue full and the
GPU working throughout. Only one launch window in three times the launches (the second first,
about 16 s in at the default period): the verdict needs that reading to fill the analysis
window, hence the longer run. Written as PyTorch code (workloads/torch_loop.py) on the emulated
torch."""
import torch_loop

GPUS = 1
DEVICE = "mig"
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "busy"}
MIN_SECONDS = 75
SPEC = {"sync": "none", "kernels": 32, "step_seconds": 0.06, "host_seconds": 0.03}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
