"""Near miss of a hang: two DDP ranks; every 30 steps rank 0 writes a checkpoint for 20 s
(torch.save: its host serializes, its GPU idles) while rank 1 waits for it in dist.barrier():
rank 1's host sits in the CUDA driver since the barrier's all-reduce, its GPU spinning in the
NCCL kernel, longer than hang_after (10 s here). That is the sign of a hang, but its peer on
this node works: rank 1 waits for rank 0 (communication), and rank 0 is host-bound. Written as
PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = {0: "host_bound", 1: "communication"}
# Rank 1's host waits in the driver: only the CUDA probes see where.
SKIP = torch_loop.probes_unavailable
SPEC = {
    **communication_ddp_straggler.SPEC,
    "rank_specs": {},
    "checkpoint_every": 30,
    "checkpoint_seconds": 20.0,
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
