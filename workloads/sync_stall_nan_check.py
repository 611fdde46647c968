"""HF Trainer's per-step check, `if torch.isnan(loss).any() or torch.isinf(loss).any():`: the host waits for the GPU inside the driver every step (CUDA's spin: the thread runs), with no .item() on the line, then prepares the next step while the GPU idles.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "sync_stall"}
SPEC = {"sync": "nan_check", "host_seconds": 0.025}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
