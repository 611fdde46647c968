"""Two DDP ranks, rank 1 never reaching its first collective (its data still being prepared, a
loader stuck before the loop: as a rank whose pod is pending or whose start failed looks to the
others). PyTorch creates the NCCL communicator at the first collective, DDP's broadcast of rank
0's parameters: rank 0 sits in ncclCommInitRank, which returns once every rank has called it,
its host asleep inside NCCL and its GPU idle: nothing was issued to spin. GPU 0 is hung, not
idle: seen by the probe on NCCL's communicator creation (entered after the exporter attached:
rank 0 loads its model for a few seconds first, as real jobs do). Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_hang
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = {0: "hung"}
# The host sleeps in a frame of DDP's constructor: only the probe on NCCL's communicator
# creation tells where.
SKIP = torch_loop.probes_unavailable
EXPECT_DETAIL = {0: ["ncclCommInitRank", "creation of its NCCL communicator"]}
MIN_SECONDS = communication_ddp_hang.MIN_SECONDS
SPEC = {
    **communication_ddp_straggler.SPEC,
    "load_seconds": 3.0,
    "rank_specs": {"1": {"late_by": 3600.0}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
