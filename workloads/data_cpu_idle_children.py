"""A decode-bound loader (one worker, pt_data_worker, decoding flat out) in a process that also
has idle children that are no loaders: wandb-core, the torch.compile sidecar and its pool, a
forkserver with its resource_tracker. Counted as workers, the sidecars made the one busy worker
look like workers that mostly sleep (read as remote input).
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
EXPECT = {0: "data_cpu"}
SPEC = {"sync": "item", "loader": "decode", "blur": 2.0, "workers": 1, "sidecars": True, "step_seconds": 0.04}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
