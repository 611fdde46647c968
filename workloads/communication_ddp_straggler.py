"""Two DDP ranks (DistributedDataParallel over NCCL, the bucketed all-reduces issued from the
engine's thread during backward), rank 1 starved by its decode-bound loader: its GPU idles
waiting for batches, and rank 0's GPU spins in the all-reduce kernels waiting for rank 1's
gradients — busy to NVML, a few SMs, while its host waits in the step's loss.item(). Rank 0 is
communication (its straggler's wait), rank 1 its own cause. Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 2
EXPECT = {0: "communication", 1: "data_cpu"}
# Rank 0's host waits in loss.item(), not in a collective frame: only the CUDA probes (its
# driver waits while it issues all-reduces) tie the wait to the collectives.
SKIP = torch_loop.probes_unavailable
SPEC = {
    "ranks": 2,
    "ddp": True,
    "sync": "item",
    "loader": "light",
    "workers": 2,
    "step_seconds": 0.04,
    "rank_specs": {"1": {"loader": "decode", "workers": 1, "blur": 2.0}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
