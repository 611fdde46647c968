"""`batch.to("cuda")` from pageable memory (non_blocking=False, Accelerate's send_to_device default): a copy and a stream sync that waits for the previous step's kernels, then the step's Python while the GPU idles.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "sync_stall"}
SPEC = {"sync": "to", "upload": "pageable", "host_seconds": 0.025}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
