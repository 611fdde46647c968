"""Two ranks of one job on two GPUs, each rank and its loader workers pinned to half of the
CPUs, and an unrelated CPU hog on the second half: rank 1's loader starves, its GPU runs at a
fraction of rank 0's, and rank 0's GPU spins in the all-reduce waiting for it (the checklist's
"GPU 3 at 40 % while the others run at 95 %"). Rank 1's verdict must name the hog's contention,
not only the imbalance."""
import multiprocessing
import os
import subprocess
import threading
import time

import common
import emugpu

GPUS = 2
EXPECT = {1: "contention"}
WORKERS = 2
# Each rank's two workers share its half of the CPUs, each busy a third of the time keeping up
# with the step on any machine (the batch is sized to it); the hogs leave them half of that.
WORKER_BUSY = 0.35
STEP_SECONDS = 0.09


def halves():
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    return [set(cpus[:half]), set(cpus[half:]) or set(cpus[:half])]


# CPU-bound processes outside the job running beside the slow rank (the ground truth gives
# them their share of the loader's CPU side): 4 on one CPU, more on more.
CPU_HOGS = common.hogs_to_starve(len(halves()[1]), WORKERS, WORKER_BUSY)


def hog(cpus, seconds, count=CPU_HOGS):
    """`count` CPU-bound processes outside the job's tree (a shell that exits at once leaves
    them to init), pinned to the slow rank's CPUs."""
    cpu_list = ",".join(str(c) for c in sorted(cpus))
    burn = f"import time; end = time.time() + {seconds}\nwhile time.time() < end: pass"
    for _ in range(count):
        command = f"nohup taskset -c {cpu_list} python3 -c '{burn}' >/dev/null 2>&1 &"
        subprocess.Popen(["sh", "-c", command]).wait()


def rank(number, args, peers, batch):
    os.sched_setaffinity(0, halves()[number])
    if args.real:
        import torch.distributed as dist

        store = os.path.join(args.data, "slow_rank.store")
        dist.init_process_group("nccl", init_method=f"file://{store}", rank=number, world_size=2)
    files = common.dataset(args.data, "medium", 400, 512, 384)
    gpu = emugpu.open_gpu(number, args.real)
    common.model(gpu)
    loader = common.Loader(common.Images(files), batch_size=batch, workers=WORKERS)
    try:
        common.train(
            gpu,
            loader,
            args.seconds,
            step_seconds=STEP_SECONDS,
            collective=lambda: gpu.all_reduce(peers, number),
        )
    except threading.BrokenBarrierError:
        pass  # the other rank finished first
    peers.barrier.abort()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "medium", 400, 512, 384)
    # Sized once, for both ranks, before they start.
    batch = common.batch_for(common.Images(files), WORKERS, STEP_SECONDS, WORKER_BUSY)
    context = multiprocessing.get_context("fork")
    peers = emugpu.Peers(2, context)
    ranks = [context.Process(target=rank, args=(n, args, peers, batch)) for n in range(2)]
    for p in ranks:
        p.start()
    time.sleep(3)
    hog(halves()[1], args.seconds)
    for p in ranks:
        p.join()


if __name__ == "__main__":
    main()
