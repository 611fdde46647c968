"""Two FSDP ranks (FullyShardedDataParallel over NCCL: each unit's parameters all-gathered
before its forward on the main thread, all-gathered again and its gradients reduce-scattered in
backward on the engine's thread), rank 1 starved by its decode-bound loader: rank 0's GPU spins
in the all-gathers and reduce-scatters waiting for rank 1 while its host waits in the step's
loss.item(). Rank 0 is communication, rank 1 its own cause. The same reading as the DDP
straggler, from collectives issued on two threads and met on the GPU before and after the
forward. Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = {0: "communication", 1: "data_cpu"}
# Rank 0's host waits in loss.item(): only the CUDA probes tie the wait to the collectives.
SKIP = torch_loop.probes_unavailable
# The DDP straggler's loop, under FSDP instead.
SPEC = {**communication_ddp_straggler.SPEC, "ddp": False, "fsdp": True}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
