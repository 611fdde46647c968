"""The training function on a thread of its own while the main thread joins it (Ray Train's
worker runs it so): the per-step NaN check waits for the GPU inside the driver on that thread,
and the main thread, asleep in `threading.join`, shows nothing of it. The CUDA probes see which
thread drives the GPU; the stacks follow it.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "sync_stall"}
SPEC = {"sync": "nan_check", "host_seconds": 0.025, "off_main": True}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
