"""A loop whose two loader workers keep up with the GPU until, 10 s in, CPU-bound processes
outside the job (adopted by init: a batch job, a compaction, a runaway script) take the node's
CPUs: the workers wait for a CPU, the loop waits for its loader."""
import os
import subprocess
import time

import common
import emugpu

GPUS = 1
EXPECT = {0: "contention"}
WORKERS = 2
# Each worker is busy two thirds of the time keeping up with the step, on any machine (the
# batch is sized to it); the hogs leave it half of that.
WORKER_BUSY = 2 / 3
STEP_SECONDS = 0.09
# CPU-bound processes outside the job running beside it (the ground truth gives them their
# share of the loader's CPU side): 4 on two CPUs, more on more.
CPU_HOGS = common.hogs_to_starve(len(os.sched_getaffinity(0)), WORKERS, WORKER_BUSY)
HOGS_AFTER = 10.0


def hogs(seconds, count=CPU_HOGS):
    """`count` CPU-bound processes outside the job's tree (a shell that exits at once leaves
    them to init)."""
    burn = f"import time; end = time.time() + {seconds}\nwhile time.time() < end: pass"
    for _ in range(count):
        subprocess.Popen(["sh", "-c", f"nohup python3 -c '{burn}' >/dev/null 2>&1 &"]).wait()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "medium", 400, 512, 384)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    images = common.Images(files)
    batch = common.batch_for(images, WORKERS, STEP_SECONDS, WORKER_BUSY)
    loader = common.Loader(images, batch_size=batch, workers=WORKERS)
    started = time.monotonic()

    def on_step(_):
        nonlocal started
        if started and time.monotonic() - started > HOGS_AFTER:
            hogs(args.seconds - HOGS_AFTER)
            started = None

    common.train(gpu, loader, args.seconds, step_seconds=STEP_SECONDS, on_step=on_step)


if __name__ == "__main__":
    main()
