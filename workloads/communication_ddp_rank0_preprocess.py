"""Rank 0 prepares the dataset on its host for 40 s before its first collective (Hugging
Face's `with training_args.main_process_first(): dataset.map(...)`), while rank 1, its model
loaded, waits for it in NCCL's creation of the communicator (DDP's first broadcast), its GPU
idle; then the two train as communication_ddp_straggler. On one node the exporter sees rank 0
work and says rank 1 waits for it, no hang; on two (workloads/two_nodes.py --startup-wait)
rank 1's exporter cannot see rank 0 and reads hung, and the fleet's rules hold the hang alerts
while rank 0's `gpu_rank_working` is 1. Written as PyTorch code (workloads/torch_loop.py) on
the emulated torch."""
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = communication_ddp_straggler.EXPECT
SKIP = torch_loop.probes_unavailable
PREPROCESS_SECONDS = 40.0
# The wait, then time enough to judge the training that follows.
MIN_SECONDS = PREPROCESS_SECONDS + 40
SPEC = {
    **communication_ddp_straggler.SPEC,
    "load_seconds": 3.0,
    "rank_specs": {
        **communication_ddp_straggler.SPEC["rank_specs"],
        "0": {"load_seconds": PREPROCESS_SECONDS},
    },
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
