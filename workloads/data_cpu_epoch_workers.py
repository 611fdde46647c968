"""A decode-bound loader whose workers are not persistent (DataLoader's default,
persistent_workers=False): four workers (pt_data_worker) decode a small data set, an epoch of
25 batches, and are replaced at every epoch, every two or three seconds; each new set starts with
its prefetch empty, and the loop waits for it. Found only every few seconds, the workers were
seen seconds late or not at all, and their short lives went uncounted: the loop's wait read as
workers that mostly sleep (remote input), and their waits for a CPU as others'.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
EXPECT = {0: "data_cpu"}
SPEC = {"sync": "item", "loader": "decode", "blur": 1.5, "workers": 4, "batch": 16, "persistent": False, "step_seconds": 0.03}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
