"""Two DDP ranks (DistributedDataParallel over NCCL), each rank and its loader workers pinned to
half of the CPUs, and CPU-bound processes outside the job on the second half from 3 s on: rank
1's loader workers wait for a CPU the hogs took, its GPU idles, and rank 0's GPU spins in the
all-reduce kernels for rank 1's gradients while its host waits in the step's loss.item(). Rank
0 is communication, rank 1 contention (the hogs named), not only "behind". The workers are
sized to keep up with the step busy a fifth of the time on this machine, and the ranks wait
for their GPU in blocking mode: on a half of a two-core machine a spinning host would take the
CPU its own workers need, and the job would starve itself before the hogs came. Written as
PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import threading

import common
import contention_slow_rank
import torch_loop

GPUS = 2
EXPECT = {0: "communication", 1: "contention"}
# Rank 0's host waits in loss.item(): only the CUDA probes tie the wait to the collectives.
SKIP = torch_loop.probes_unavailable
HALVES = contention_slow_rank.halves()
# Each rank's two workers need a fifth of a core keeping up with the step; the hogs leave them
# half of it (the ground truth gives the hogs their share).
WORKERS = 2
WORKER_BUSY = 0.2
STEP_SECONDS = 0.09
CPU_HOGS = common.hogs_to_starve(len(HALVES[1]), WORKERS, WORKER_BUSY)
SPEC = {
    "ranks": 2,
    "ddp": True,
    "sync": "item",
    "loader": "decode",
    "workers": WORKERS,
    "blocking": True,
    "step_seconds": STEP_SECONDS,
    "rank_specs": {str(n): {"cpus": sorted(cpus)} for n, cpus in enumerate(HALVES)},
}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    images = common.images_for("decode", args.data, args.seconds)
    SPEC["batch"] = common.batch_for(images, WORKERS, STEP_SECONDS, WORKER_BUSY)
    threading.Timer(3.0, contention_slow_rank.hog, (HALVES[1], args.seconds, CPU_HOGS)).start()
    torch_loop.train(SPEC, args)


if __name__ == "__main__":
    main()
