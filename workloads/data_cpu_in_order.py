"""Delivery in order (torch's DataLoader default) with one heavy batch in four: four workers,
every fourth batch costs ten times the others; the loop waits for it while the other workers,
their prefetch slots full, idle on their index queues (back-pressure, not remote input).
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
EXPECT = {0: "data_cpu"}
SPEC = {"sync": "item", "loader": "decode", "blur": 1.0, "workers": 4, "heavy_every": 4, "heavy": 10, "batch": 8, "step_seconds": 0.04}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
