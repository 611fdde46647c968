"""Two ranks of one job on two GPUs, training in step with an all-reduce every step, until
rank 1 stops arriving (its process stuck elsewhere, as a rank whose node fails or whose loader
deadlocks): rank 0's NCCL kernel is queued and spins on GPU 0 waiting for the peer's data, and
its main thread waits in the collective for ever. GPU 0 reads 100 % busy; it is hung, not
busy."""
import multiprocessing
import os
import threading
import time

import common
import emugpu

GPUS = 2
EXPECT = {0: "hung"}
EXPECT_DETAIL = {0: "all_reduce"}
# When rank 1 stops arriving.
HEALTHY_SECONDS = 3.0
# The verdict needs the window's busy mean past its line, then hang_after (10 s), then
# min_duration: about 20 s after the hang begins, close to the fast run's 25 s on a loaded
# machine (a CI-like run read it too late once).
MIN_SECONDS = 40


def all_reduce(gpu, peers, rank):
    """As NCCL does it: the kernel is queued at once and spins on the GPU until every rank's
    data are there; the host then waits for it. A peer that never arrives leaves both
    spinning (the emulated kernel is booked an hour ahead, and ends when the rank does)."""
    peers.ends[rank] = max(gpu._last_end, time.monotonic_ns())
    try:
        peers.barrier.wait(timeout=2.0)
    except threading.BrokenBarrierError:
        gpu._launch(time.monotonic_ns() + int(3600e9), sm=0.2, dram=0.3, flags=emugpu.COLLECTIVE_KERNEL)
        threading.Event().wait()
    gpu._launch(max(peers.ends[:]) + 2_000_000, sm=0.2, dram=0.3, flags=emugpu.COLLECTIVE_KERNEL)
    peers.barrier.wait()


def rank(number, args, peers):
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(number, args.real)
    common.model(gpu)
    loader = common.Loader(common.Images(files), batch_size=8, workers=1)
    seconds = args.seconds if number == 0 else HEALTHY_SECONDS
    try:
        common.train(gpu, loader, seconds, step_seconds=0.05, collective=lambda: all_reduce(gpu, peers, number))
    except threading.BrokenBarrierError:
        pass
    if number == 1:
        # Stuck outside the job's collectives: alive, holding its GPU, never arriving.
        time.sleep(args.seconds + 30)
    os._exit(0)


def main(argv=None):
    args = common.arguments(__doc__, argv)
    common.dataset(args.data, "small", 2000, 96, 96)
    context = multiprocessing.get_context("fork")
    peers = emugpu.Peers(2, context)
    ranks = [context.Process(target=rank, args=(n, args, peers)) for n in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()


if __name__ == "__main__":
    main()
