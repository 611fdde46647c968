"""The backward pass runs on the autograd engine's thread with more Python than kernels (a hook per node, as DDP's or a custom Function's): the main thread sleeps under torch/autograd/graph.py while the engine's thread keeps the GPU waiting.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
SKIP = torch_loop.probes_unavailable
EXPECT = {0: "host_bound"}
SPEC = {"sync": "item", "sync_every": 10, "hook_seconds": 0.012, "kernels": 12, "step_seconds": 0.04}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
