"""Near miss of the collectives: a model under FullyShardedDataParallel that runs more Python in
its forward than the GPU needs for the step (a model of many small ops). FSDP1's forward wraps
the model's, so the main thread computes under a frame of torch/distributed/; the exporter read
any such frame as a collective. It is the loop's own Python: host_bound. One rank, so that
what is measured is the reading of the frames (two ranks on this 2-core VM drift apart: the
one ahead then spins for the other, and that is communication). Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
EXPECT = {0: "host_bound"}
SPEC = {
    "fsdp": True,
    "forward_host_seconds": 0.08,
    "sync": "none",
    "step_seconds": 0.06,
    "loader": "light",
    "workers": 2,
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
