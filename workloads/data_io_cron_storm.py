"""An hourly-cron-style I/O storm: a loop that keeps up with its GPU from direct-I/O reads until
an unrelated process (a backup, updatedb, a log shipper) starts writing the same disk flat out."""
import os
import subprocess
import time

import common
import emugpu

GPUS = 1
EXPECT = {0: "data_io"}
# The storm starts this long after the workload.
STORM_AFTER = 10.0
# Writers keeping the disk's queue full: on a virtio disk four of them make a 16 KiB direct
# read 10-15x slower (two: 8x, which two loader workers half busy still absorb).
WRITERS = 4
LOADER_WORKERS = 2
# The loader is busy half of the time keeping up with the step, on any machine (the batch is
# sized to this machine's read and decode); with the storm a read takes several times longer.
LOADER_BUSY = 0.5
STEP_SECONDS = 0.03


def storm(directory, seconds, writers=WRITERS):
    """`writers` loops of direct 1 MiB writes, rewriting a file each, from processes outside the
    job's tree (started through a shell that exits at once, so init adopts them)."""
    target = os.path.join(directory, f"storm-{os.getpid()}-{time.monotonic_ns()}")
    for n in range(writers):
        # Stopped early (the runner ends the session), a writer still removes its file.
        script = (
            f'trap "rm -f {target}-{n}.bin; exit" TERM INT; '
            f"end=$(( $(date +%s) + {int(seconds)} )); "
            f"while [ $(date +%s) -lt $end ]; do "
            f"dd if=/dev/zero of={target}-{n}.bin bs=1M count=256 oflag=direct conv=notrunc status=none; done; "
            f"rm -f {target}-{n}.bin"
        )
        subprocess.Popen(["sh", "-c", f"nohup sh -c '{script}' >/dev/null 2>&1 &"]).wait()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "io", 4000, 320, 240, quality=97)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    images = common.Images(files, out=64, direct=True, chunk=16 << 10)
    batch = common.batch_for(images, LOADER_WORKERS, STEP_SECONDS, LOADER_BUSY)
    loader = common.Loader(images, batch_size=batch, workers=LOADER_WORKERS)
    started = time.monotonic()

    def on_step(_):
        nonlocal started
        if started and time.monotonic() - started > STORM_AFTER:
            storm(args.data, args.seconds - STORM_AFTER)
            started = None

    common.train(gpu, loader, args.seconds, step_seconds=STEP_SECONDS, on_step=on_step)


if __name__ == "__main__":
    main()
