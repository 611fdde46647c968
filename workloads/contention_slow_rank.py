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
# CPU-bound processes outside the job running beside it (the ground truth gives them their
# share of the loader's CPU side).
CPU_HOGS = 3


def halves():
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    return [set(cpus[:half]), set(cpus[half:]) or set(cpus[:half])]


def hog(cpus, seconds):
    """Three CPU-bound processes per CPU outside the job's tree (a shell that exits at once leaves it
    to init), pinned to the slow rank's CPUs."""
    cpu_list = ",".join(str(c) for c in sorted(cpus))
    burn = f"import time; end = time.time() + {seconds}\nwhile time.time() < end: pass"
    for _ in range(3 * len(cpus)):
        command = f"nohup taskset -c {cpu_list} python3 -c '{burn}' >/dev/null 2>&1 &"
        subprocess.Popen(["sh", "-c", command]).wait()


def rank(number, args, peers):
    os.sched_setaffinity(0, halves()[number])
    if args.real:
        import torch.distributed as dist

        store = os.path.join(args.data, "slow_rank.store")
        dist.init_process_group("nccl", init_method=f"file://{store}", rank=number, world_size=2)
    files = common.dataset(args.data, "medium", 400, 512, 384)
    gpu = emugpu.open_gpu(number, args.real)
    common.model(gpu)
    # Sized so that the loader on half the CPUs keeps up with a 90 ms step, without the hog.
    loader = common.Loader(common.Images(files), batch_size=20, workers=2)
    try:
        common.train(
            gpu,
            loader,
            args.seconds,
            step_seconds=0.09,
            collective=lambda: gpu.all_reduce(peers, number),
        )
    except threading.BrokenBarrierError:
        pass  # the other rank finished first
    peers.barrier.abort()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    common.dataset(args.data, "medium", 400, 512, 384)
    context = multiprocessing.get_context("fork")
    peers = emugpu.Peers(2, context)
    ranks = [context.Process(target=rank, args=(n, args, peers)) for n in range(2)]
    for p in ranks:
        p.start()
    time.sleep(3)
    hog(halves()[1], args.seconds)
    for p in ranks:
        p.join()


if __name__ == "__main__":
    main()
