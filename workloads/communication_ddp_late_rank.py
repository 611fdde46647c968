"""The near miss of communication_ddp_init_hang: rank 1 reaches its first collective 6 s after
rank 0 (a slower start: its data prepared on the spot), under hang_after, then trains as the
straggler of communication_ddp_straggler. Rank 0 waits for it in ncclCommInitRank meanwhile,
which is no hang; afterwards each rank is judged as in that workload. Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_hang
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = communication_ddp_straggler.EXPECT
SKIP = torch_loop.probes_unavailable
MIN_SECONDS = communication_ddp_hang.MIN_SECONDS
SPEC = {
    **communication_ddp_straggler.SPEC,
    "load_seconds": 3.0,
    "rank_specs": {"1": {**communication_ddp_straggler.SPEC["rank_specs"]["1"], "late_by": 6.0}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
