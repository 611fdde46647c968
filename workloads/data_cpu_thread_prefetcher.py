"""A thread prefetcher (a thread and a queue.Queue(2)) in front of a starved one-worker loader:
the loop's main thread waits in the standard library's queue, fed by a thread of its own, not
in the DataLoader; what it waits for is the worker decoding.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
EXPECT = {0: "data_cpu"}
SPEC = {"sync": "item", "loader": "decode", "blur": 1.0, "workers": 1, "prefetcher": True, "step_seconds": 0.04}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
