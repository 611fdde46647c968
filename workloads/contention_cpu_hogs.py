"""A loop whose two loader workers keep up with the GPU until, 10 s in, three CPU-bound
processes outside the job (adopted by init: a batch job, a compaction, a runaway script) take
the node's CPUs: the workers wait for a CPU, the loop waits for its loader."""
import subprocess
import time

import common
import emugpu

GPUS = 1
EXPECT = {0: "contention"}
# CPU-bound processes outside the job running beside it (the ground truth gives them their
# share of the loader's CPU side).
CPU_HOGS = 3
HOGS_AFTER = 10.0


def hogs(seconds):
    """Three CPU-bound processes outside the job's tree (a shell that exits at once leaves them
    to init)."""
    burn = f"import time; end = time.time() + {seconds}\nwhile time.time() < end: pass"
    for _ in range(3):
        subprocess.Popen(["sh", "-c", f"nohup python3 -c '{burn}' >/dev/null 2>&1 &"]).wait()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "medium", 400, 512, 384)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    # Sized so that two workers keep up with a 90 ms step at about two thirds of a core each,
    # and fall behind once three hogs share the two CPUs with them.
    loader = common.Loader(common.Images(files), batch_size=48, workers=2)
    started = time.monotonic()

    def on_step(_):
        nonlocal started
        if started and time.monotonic() - started > HOGS_AFTER:
            hogs(args.seconds - HOGS_AFTER)
            started = None

    common.train(gpu, loader, args.seconds, step_seconds=0.09, on_step=on_step)


if __name__ == "__main__":
    main()
