"""What every workload shares: a JPEG dataset on disk, a data loader shaped like PyTorch's,
CPU work, and the training loop on the GPU of emugpu.py (emulated, or real with --real).

The loader is torch.utils.data.DataLoader when torch can be imported, else the same shape
built from multiprocessing: worker processes forked from the main one, each with its own index
queue and a feeder thread, results on one queue the main thread drains, two batches prefetched
per worker. Samples are read from disk and decoded with Pillow for real.
"""

import argparse
import io
import mmap
import multiprocessing
import os
import random
import struct
import sys
import time

from PIL import Image, ImageFilter

import emugpu

BLOCK = 4096
DEFAULT_DATA = os.environ.get("WORKLOAD_DATA", "/var/tmp/gpu-bottleneck-workloads")


def arguments(description, argv=None, extra=()):
    """The options every workload takes, and `extra` ones: (flag, type)."""
    parser = argparse.ArgumentParser(description=description)
    for flag, kind in extra:
        parser.add_argument(flag, type=kind)
    parser.add_argument("--real", action="store_true", help="train on a real GPU with CUDA PyTorch")
    parser.add_argument("--gpu", type=int, default=0, help="GPU index")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to train")
    parser.add_argument("--data", default=DEFAULT_DATA, help="dataset cache directory (on disk, not tmpfs)")
    return parser.parse_args(argv)


# -- ground truth -----------------------------------------------------------------------------

# What each process of a workload was doing, written as it happens so that the runner can
# compare the exporter's attribution with it: one file per process, records of (start and end
# on CLOCK_MONOTONIC in ns, as the emulated GPU's timeline; what; CPU ns the thread used).
TRUTH_RECORD = struct.Struct("<QQBQ")
LOADER, SYNC, PYTHON, COLLECTIVE, READ, DECODE = 1, 2, 3, 4, 5, 6
# The main thread waiting while the autograd engine's thread runs the backward pass (written by
# the emulated torch with that thread's CPU time): the host's own work, as PYTHON is.
BACKWARD = 7


class Truth:
    """The calling process's record of where its time went (a no-op without EMUGPU_DIR)."""

    _mine = None

    def __init__(self):
        directory = os.environ.get("EMUGPU_DIR")
        self.file = None
        if directory:
            name = f"truth-{os.getpid()}-{os.getppid()}.bin"
            self.file = open(os.path.join(directory, name), "ab", buffering=1 << 16)
        self.flushed = time.monotonic()

    @classmethod
    def mine(cls):
        """This process's recorder (a forked worker gets its own)."""
        if cls._mine is None or cls._mine[0] != os.getpid():
            cls._mine = (os.getpid(), cls())
        return cls._mine[1]

    def record(self, what, start, end, cpu=0):
        if self.file is None:
            return
        self.file.write(TRUTH_RECORD.pack(start, end, what, cpu))
        if time.monotonic() - self.flushed > 0.5:
            self.file.flush()
            self.flushed = time.monotonic()

    def timed(self, what, call, *args):
        """Runs call(*args), recording it as `what` with the CPU time the thread used."""
        start, cpu = time.monotonic_ns(), time.thread_time_ns()
        try:
            return call(*args)
        finally:
            self.record(what, start, time.monotonic_ns(), time.thread_time_ns() - cpu)


# -- the dataset ------------------------------------------------------------------------------


def dataset(root, name, count, width, height, quality=90):
    """`count` JPEG files of `width` x `height` under root/name, made once and kept: photo-like
    content (smooth colour fields with grain) so that decoding costs what a photo's does."""
    directory = os.path.join(root, name)
    done = os.path.join(directory, ".complete")
    files = [os.path.join(directory, f"{i:06d}.jpg") for i in range(count)]
    if os.path.exists(done):
        return files
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(7)
    grain = Image.effect_noise((width, height), 24).convert("RGB")
    for path in files:
        seed = bytes(rng.getrandbits(8) for _ in range(8 * 8 * 3))
        base = Image.frombytes("RGB", (8, 8), seed).resize((width, height), Image.BICUBIC)
        Image.blend(base, grain, 0.25).save(path, quality=quality)
    open(done, "w").close()
    return files


def read_direct(path, chunk=BLOCK):
    """Reads a file with O_DIRECT in `chunk`-byte reads: every read goes to the device, none to
    the page cache (as a dataset far larger than memory, or on network storage, behaves)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        # A filesystem without direct I/O (tmpfs): drop the cached pages and read.
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    try:
        size = os.fstat(fd).st_size
        buffer = mmap.mmap(-1, max(BLOCK, -(-size // BLOCK) * BLOCK))  # page-aligned
        view = memoryview(buffer)
        offset = 0
        while offset < size:
            got = os.preadv(fd, [view[offset : offset + chunk]], offset)
            if got <= 0:
                break
            offset += got
        data = bytes(view[:size])
        view.release()
        buffer.close()
        return data
    finally:
        os.close(fd)


class Images:
    """A map-style dataset: sample i is file i read, decoded and augmented."""

    def __init__(self, files, out=112, direct=False, blur=0.0, chunk=BLOCK):
        self.files, self.out, self.direct, self.blur, self.chunk = files, out, direct, blur, chunk

    def __len__(self):
        return len(self.files)

    def read(self, i):
        """The encoded bytes of sample i."""
        if self.direct:
            return read_direct(self.files[i], self.chunk)
        with open(self.files[i], "rb") as f:
            return f.read()

    def __getitem__(self, i):
        truth = Truth.mine()
        data = truth.timed(READ, self.read, i)
        return truth.timed(DECODE, self.decode, data)

    def decode(self, data):
        """Decoded and augmented, as torchvision's ImageNet recipe."""
        image = Image.open(io.BytesIO(data)).convert("RGB")
        # RandomResizedCrop + RandomHorizontalFlip, as torchvision's ImageNet recipe.
        w, h = image.size
        side = int(min(w, h) * random.uniform(0.5, 1.0))
        x, y = random.randint(0, w - side), random.randint(0, h - side)
        image = image.crop((x, y, x + side, y + side))
        if self.blur:
            image = image.filter(ImageFilter.GaussianBlur(self.blur))
        image = image.resize((self.out, self.out), Image.BILINEAR)
        if random.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return image.tobytes()


def seconds_per_sample(images, rounds=3, count=40):
    """Wall seconds this machine takes to read and decode one of `images`: the fastest of
    `rounds` means over `count` samples, after a round to warm up (the exporter starting beside
    it, a cold cache would make a loader sized by them lighter than meant), outside the ground
    truth: a calibration, not training."""
    means = []
    for _ in range(rounds + 1):
        picks = random.sample(range(len(images)), min(count, len(images)))
        started = time.perf_counter()
        for i in picks:
            images.decode(images.read(i))
        means.append((time.perf_counter() - started) / len(picks))
    return min(means[1:])


def batch_for(images, workers, step_seconds, busy):
    """The batch size at which `workers` keep up with a `step_seconds` step while busy `busy`
    of the time on this machine. A workload that must sit at a given distance from its
    bottleneck is sized by it, not by a batch size that suits one CPU."""
    return max(1, round(busy * workers * step_seconds / seconds_per_sample(images)))


def hogs_to_starve(cpus, workers, busy, delivered=0.5):
    """How many always-runnable CPU hogs sharing `cpus` CPUs with `workers` loader workers, each
    needing `busy` of a core, leave the workers `delivered` of what they need: the scheduler
    gives every runnable task an equal share, cpus / (hogs + workers)."""
    return max(1, round(cpus / (delivered * busy)) - workers)


def images_for(loader, data, seconds, latency=0.02, blur=0.0):
    """The images a loader of kind `loader` reads: "local" (large files read with O_DIRECT),
    "remote" (a store answering after `latency`, up for `seconds` + 30), "decode" (large JPEGs,
    blurred by `blur`), or "light" (small ones)."""
    if loader == "local":
        return Images(dataset(data, "io", 4000, 320, 240, quality=97), out=64, direct=True, chunk=16 << 10)
    if loader == "remote":
        import data_io_remote_store

        files = dataset(data, "small", 2000, 96, 96)
        port = data_io_remote_store.start_store(os.path.dirname(files[0]), seconds + 30, latency)
        return data_io_remote_store.RemoteImages(port, len(files))
    if loader == "decode":
        return Images(dataset(data, "medium", 400, 512, 384), blur=blur)
    return Images(dataset(data, "small", 2000, 96, 96))


# -- the loader -------------------------------------------------------------------------------


def _as_list(batch):
    return batch


def name_process(name):
    """Sets the calling thread's name (the process's comm when called on its main thread), as
    PyTorch names its loader workers and threads."""
    import ctypes

    ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def _worker(images, indices, results, named, heavy):
    random.seed(os.getpid())
    if named:
        name_process("pt_data_worker")
    while True:
        job = indices.get()
        if job is None:
            # Told to stop, as DataLoader's workers are at shutdown: leave without flushing the
            # batches nobody will read (the loop that stops early, an evaluation's last ones),
            # as they do (cancel_join_thread), instead of blocking on a full pipe.
            results.cancel_join_thread()
            return
        number, chosen, rounds = job
        for _ in range(rounds):
            batch = [images[i] for i in chosen]
        results.put((number, batch))


class Loader:
    """Endless batches of `images`, shaped like DataLoader(num_workers=workers,
    prefetch_factor=2, shuffle=True). By default the classic stand-in: persistent workers,
    batches delivered as they come. As torch's DataLoader does: `named` workers
    (pt_data_worker), delivery `in_order` (round-robin, at most prefetch_factor × workers
    outstanding: one slow batch holds the loop while the other workers, their slots full,
    idle), workers replaced every epoch unless `persistent`; `heavy_every` N makes every Nth
    batch cost `heavy` times the others (a long clip, a large image)."""

    def __init__(
        self,
        images,
        batch_size,
        workers,
        use_torch=None,
        named=False,
        in_order=False,
        persistent=True,
        heavy_every=0,
        heavy=4,
    ):
        self.images, self.batch_size, self.workers = images, batch_size, workers
        self.named, self.in_order, self.persistent = named, in_order, persistent
        self.heavy_every, self.heavy = heavy_every, heavy
        if use_torch is None:
            try:
                import torch.utils.data  # noqa: F401

                use_torch = True
            except ImportError:
                use_torch = False
        self.use_torch = use_torch

    def __iter__(self):
        if self.workers == 0:
            while True:
                chosen = random.sample(range(len(self.images)), self.batch_size)
                yield [self.images[i] for i in chosen]
        elif self.use_torch:
            yield from self._torch()
        else:
            while True:
                # An epoch; persistent workers never end one.
                yield from self._processes(None if self.persistent else len(self.images) // self.batch_size)

    def _torch(self):
        import torch.utils.data

        loader = torch.utils.data.DataLoader(
            self.images,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.workers,
            collate_fn=_as_list,
            persistent_workers=self.persistent,
            prefetch_factor=2,
            multiprocessing_context="fork",
        )
        while True:
            yield from loader

    def _processes(self, batches):
        """`batches` batches (endless with None) from workers started for them."""
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        queues = [context.Queue() for _ in range(self.workers)]
        workers = [
            context.Process(target=_worker, args=(self.images, q, results, self.named, self.heavy), daemon=True)
            for q in queues
        ]
        for w in workers:
            w.start()
        sent = 0

        def send():
            nonlocal sent
            if batches is not None and sent >= batches:
                return
            chosen = random.sample(range(len(self.images)), self.batch_size)
            rounds = self.heavy if self.heavy_every and sent % self.heavy_every == 0 else 1
            queues[sent % self.workers].put((sent, chosen, rounds))
            sent += 1

        arrived = {}
        try:
            for _ in range(2 * self.workers):
                send()
            delivered = 0
            while batches is None or delivered < batches:
                if self.in_order:
                    while delivered not in arrived:
                        number, batch = results.get()
                        arrived[number] = batch
                    batch = arrived.pop(delivered)
                else:
                    _, batch = results.get()
                delivered += 1
                send()
                yield batch
        finally:
            for q in queues:
                q.put(None)
            for w in workers:
                w.join(timeout=1)
                if w.is_alive():
                    w.terminate()


def sidecars(work, compile_workers=2):
    """Starts the children a real training process has beside its loader, all idle: wandb-core
    (its own executable), the torch.compile sidecar with its pool of `compile_workers`, and
    multiprocessing's forkserver with its resource_tracker. Returns the processes started
    directly (the forkserver lives as long as this process)."""
    import shutil
    import subprocess

    wandb = os.path.join(work, "wandb", "bin")
    os.makedirs(wandb, exist_ok=True)
    core = os.path.join(wandb, "wandb-core")
    shutil.copy(shutil.which("sleep"), core)
    started = [subprocess.Popen([core, "100000"])]
    sidecar = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emutorch", "torch", "_inductor", "compile_worker", "__main__.py")
    started.append(subprocess.Popen([sys.executable, sidecar, f"--workers={compile_workers}", f"--parent={os.getpid()}"]))
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload([])
    helper = forkserver.Process(target=time.sleep, args=(0,))
    helper.start()
    helper.join()
    return started


# -- the host and the GPU ---------------------------------------------------------------------


def in_processes(target, args, count):
    """Runs target(args) in `count` forked processes (siblings of this one's children) and
    leaves once they end, without the interpreter's exit handlers (the loaders' own)."""
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=target, args=(args,)) for _ in range(count)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    os._exit(0)


def burn(seconds):
    """Python work on the calling thread for `seconds` (metrics, logging, a CPU-side op)."""
    deadline = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < deadline:
        for i in range(200):
            x += i * i
    return x


def blocking_sync(index, real):
    """cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) for device `index` before its context
    exists: PyTorch has no switch for it, the CUDA runtime it loads does."""
    if real:
        emugpu._set_blocking_sync(index)
        return
    import ctypes

    runtime = ctypes.CDLL("libcudart.so.12")  # already loaded by the emulated torch
    if runtime.cudaSetDevice(index) or runtime.cudaSetDeviceFlags(4):
        raise RuntimeError("could not set cudaDeviceScheduleBlockingSync")


def model(gpu, share=0.3):
    """Weights, gradients, optimizer state and activations: `share` of the device's memory."""
    gpu.alloc(max(0, int(share * gpu.memory_total) - gpu.memory_used()))


def train(
    gpu,
    loader,
    seconds,
    step_seconds,
    kernels=8,
    sm=0.9,
    dram=0.4,
    item_every=10,
    host_seconds=0.0,
    on_step=None,
    collective=None,
):
    """The training loop: per batch, a host-to-device copy, the step's kernels (forward,
    backward, optimizer: `kernels` of `step_seconds` in all), `collective()` (an all-reduce)
    when given, `host_seconds` of Python work, and loss.item() every `item_every` steps (0:
    never); `on_step(steps)` after each. Where the main thread is goes to the ground truth.
    Returns the steps done."""
    truth = Truth.mine()
    deadline = time.monotonic() + seconds
    steps = 0
    batches = iter(loader)

    def launch_step():
        gpu.launch(step_seconds * 0.02, sm=0.05, dram=0.6)  # the batch's host-to-device copy
        for _ in range(kernels):
            gpu.launch(step_seconds / kernels, sm=sm, tensor=sm * 0.6, dram=dram)

    while time.monotonic() < deadline:
        truth.timed(LOADER, next, batches)
        truth.timed(PYTHON, launch_step)
        if collective:
            truth.timed(COLLECTIVE, collective)
        steps += 1
        if item_every and steps % item_every == 0:
            truth.timed(SYNC, gpu.item)
        if host_seconds:
            truth.timed(PYTHON, burn, host_seconds)
        if on_step:
            on_step(steps)
    truth.timed(SYNC, gpu.synchronize)
    return steps
