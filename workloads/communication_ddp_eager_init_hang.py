"""communication_ddp_init_hang with the communicator created in init_process_group (given its
device_id, as recent PyTorch recommends) and no model to load first: rank 0 calls
ncclCommInitRank within milliseconds of its first allocation, before the exporter can have
attached its probes to NCCL, so the probes never see the call begin. Its stacks still show the
main thread held in init_process_group (a frame of torch/distributed/), asleep, its GPU idle:
hung all the same, from the stacks. Written as PyTorch code (workloads/torch_loop.py) on the
emulated torch."""
import communication_ddp_hang
import communication_ddp_init_hang
import torch_loop

GPUS = 2
EXPECT = {0: "hung"}
# The stacks tell this one (the probes missed the call's start): its frame, and the advice for
# a rank that never came.
EXPECT_DETAIL = {0: ["init_process_group", "creation of its NCCL communicator"]}
MIN_SECONDS = communication_ddp_hang.MIN_SECONDS
SPEC = {**communication_ddp_init_hang.SPEC, "load_seconds": 0.0, "eager_init": True}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
