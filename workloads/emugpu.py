"""The GPU a workload trains on: an emulated one where no GPU exists, a real one with --real.

Both offer the few things a training loop does to a GPU:

    gpu = open_gpu(index, real=False, sync="spin")
    gpu.launch(seconds, sm=1.0)    # enqueue a kernel, return at once (asynchronous)
    gpu.synchronize()              # block until this process's queue drains
    gpu.item()                     # a scalar copied back to the host: a synchronize
    gpu.alloc(n) / gpu.free(n)     # device memory

The emulated GPU books each kernel on a timeline file per GPU (the layout is documented in
crates/fake-nvml/src/timeline.rs), which the fake libnvidia-ml.so.1 reads to answer the
exporter: utilization samples, per-process utilization, GPM SM activity, memory and processes
all follow what the workload's kernels did. Kernels of every process share one queue per GPU,
as contexts time-share a real GPU without MPS.

Waiting is CUDA's: "spin" (the default for a process with one context, cudaDeviceScheduleAuto
when contexts <= cores) burns the waiting thread's CPU; "blocking"
(cudaDeviceScheduleBlockingSync) sleeps. Launches block once 1024 kernels are queued, as
CUDA's launch queue does. Standard library only.
"""

import collections
import contextlib
import fcntl
import mmap
import os
import struct
import time

MAGIC = b"EMUGPU01"
CAPACITY = 65536
SLOTS = 64
HEADER = struct.Struct("<8sIIQQ")  # magic, capacity, slots, head, end of the device queue
HEADER_BYTES = 64
SLOT = struct.Struct("<IIQ")  # pid, 0, device memory held
RECORD = struct.Struct("<QQIHHHHI")  # start, end, pid, sm, occupancy, tensor, dram (per mille), flags
COLLECTIVE_KERNEL = 1  # flags: the kernel of a collective (ground truth; the driver ignores it)
RING = HEADER_BYTES + SLOTS * SLOT.size
FILE_BYTES = RING + CAPACITY * RECORD.size

# What a CUDA context holds before the first tensor (cuBLAS workspace, module images).
CONTEXT_BYTES = 512 << 20
# CUDA's launch queue: a launch past this many pending kernels blocks.
QUEUE_DEPTH = 1024
# An H100 80GB's memory, as the fake NVML's default device reports it.
DEFAULT_MEMORY = 85_899_345_920


class OutOfMemory(MemoryError):
    """What torch raises as torch.cuda.OutOfMemoryError."""


def _permille(share):
    return max(0, min(1000, round(share * 1000)))


class Peers:
    """The ranks of one job on this node, for collectives: made before the ranks are forked."""

    def __init__(self, ranks, context):
        self.barrier = context.Barrier(ranks)
        self.ends = context.Array("Q", ranks)  # when each rank's gradients are ready (ns)


class EmulatedGPU:
    """One GPU of the fake NVML, driven through its timeline file."""

    def __init__(self, index=0, sync="spin", directory=None, memory_total=None):
        if sync not in ("spin", "blocking"):
            raise ValueError(f"sync must be spin or blocking, not {sync!r}")
        directory = directory or os.environ.get("EMUGPU_DIR")
        if not directory:
            raise RuntimeError("EMUGPU_DIR names the directory of the emulated GPUs' timelines")
        self.sync_mode = sync
        self.memory_total = memory_total or int(os.environ.get("EMUGPU_MEMORY_BYTES", DEFAULT_MEMORY))
        self.path = os.path.join(directory, f"gpu{index}.timeline")
        self.pid = os.getpid()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        self._pending = collections.deque()  # end times of this process's queued kernels
        self._last_end = 0
        with self._locked():
            if os.fstat(self._fd).st_size < FILE_BYTES:
                os.ftruncate(self._fd, FILE_BYTES)
            self._map = mmap.mmap(self._fd, FILE_BYTES)
            if self._map[:8] != MAGIC:
                self._map[:HEADER.size] = HEADER.pack(MAGIC, CAPACITY, SLOTS, 0, 0)
            self._slot = self._claim_slot()
            self._set_memory(CONTEXT_BYTES)

    # -- the file ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self):
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _claim_slot(self):
        """A free process slot: unused, or left by a process that exited (its context is gone)."""
        for slot in range(SLOTS):
            pid, _, _ = SLOT.unpack_from(self._map, HEADER_BYTES + slot * SLOT.size)
            if pid == 0 or pid == self.pid or not os.path.exists(f"/proc/{pid}"):
                return slot
        raise RuntimeError(f"{self.path}: more than {SLOTS} processes on one emulated GPU")

    def _set_memory(self, held):
        SLOT.pack_into(self._map, HEADER_BYTES + self._slot * SLOT.size, self.pid, 0, held)

    def _held(self):
        return SLOT.unpack_from(self._map, HEADER_BYTES + self._slot * SLOT.size)[2]

    def _used_by_all(self):
        total = 0
        for slot in range(SLOTS):
            pid, _, held = SLOT.unpack_from(self._map, HEADER_BYTES + slot * SLOT.size)
            if pid and (pid == self.pid or os.path.exists(f"/proc/{pid}")):
                total += held
        return total

    # -- the interface ----------------------------------------------------------------------

    def launch(self, seconds, sm=1.0, occupancy=None, tensor=0.0, dram=0.3):
        """Enqueues a kernel that runs `seconds` on the device, keeping the share `sm` of its
        SMs busy (tiny kernels: a small share), and returns at once."""
        self._launch(None, seconds, sm, occupancy, tensor, dram)

    def _launch(self, until_ns, seconds=0.0, sm=1.0, occupancy=None, tensor=0.0, dram=0.3, flags=0):
        """Books a kernel that runs `seconds`, or until `until_ns` (a kernel that waits on the
        GPU for something outside it, as a collective does)."""
        if len(self._pending) >= QUEUE_DEPTH:
            self._wait_until(self._pending[0])
        now = time.monotonic_ns()
        while self._pending and self._pending[0] <= now:
            self._pending.popleft()
        shares = (
            _permille(sm),
            _permille(sm * 0.5 if occupancy is None else occupancy),
            _permille(tensor),
            _permille(dram),
        )
        with self._locked():
            _, _, _, head, queue_end = HEADER.unpack_from(self._map, 0)
            start = max(now, queue_end)
            end = start + max(1, int(seconds * 1e9)) if until_ns is None else max(start + 1, until_ns)
            merged = False
            if head > 0:
                at = RING + ((head - 1) % CAPACITY) * RECORD.size
                last = RECORD.unpack_from(self._map, at)
                # Back-to-back identical kernels of one process are one record.
                if last[1] == start and last[2] == self.pid and last[3:7] == shares and last[7] == flags:
                    RECORD.pack_into(self._map, at, last[0], end, self.pid, *shares, flags)
                    merged = True
            if not merged:
                at = RING + (head % CAPACITY) * RECORD.size
                RECORD.pack_into(self._map, at, start, end, self.pid, *shares, flags)
                head += 1
            HEADER.pack_into(self._map, 0, MAGIC, CAPACITY, SLOTS, head, end)
        self._pending.append(end)
        self._last_end = end

    def all_reduce(self, peers, rank, seconds=0.002):
        """A gradient all-reduce among the ranks of `peers`: each rank's gradients are ready
        when its queued step ends, the collective ends `seconds` after the slowest rank's are,
        and a faster rank's GPU spins in it until then (NCCL kernels wait on the GPU)."""
        peers.ends[rank] = max(self._last_end, time.monotonic_ns())
        peers.barrier.wait()
        self._launch(max(peers.ends[:]) + int(seconds * 1e9), sm=0.2, dram=0.3, flags=COLLECTIVE_KERNEL)
        peers.barrier.wait()

    def synchronize(self):
        """Blocks until every kernel this process queued has run."""
        self._wait_until(self._last_end)
        self._pending.clear()

    def item(self):
        """A scalar read back to the host (loss.item()): a tiny copy, then a synchronize."""
        self.launch(10e-6, sm=0.01, dram=0.01)
        self.synchronize()
        return 0.0

    def alloc(self, nbytes):
        """Takes `nbytes` of device memory; raises OutOfMemory past the device's total."""
        with self._locked():
            if self._used_by_all() + nbytes > self.memory_total:
                raise OutOfMemory(f"emulated GPU out of memory allocating {nbytes} bytes")
            self._set_memory(self._held() + nbytes)

    def free(self, nbytes):
        with self._locked():
            self._set_memory(max(CONTEXT_BYTES, self._held() - nbytes))

    def memory_used(self):
        """Device memory in use by every process, as NVML reports it."""
        with self._locked():
            return self._used_by_all()

    def close(self):
        """Destroys the context: the driver forgets the process and its memory."""
        with self._locked():
            SLOT.pack_into(self._map, HEADER_BYTES + self._slot * SLOT.size, 0, 0, 0)

    def _wait_until(self, deadline_ns):
        if self.sync_mode == "spin":
            # CUDA's spin wait: the thread stays on its core, polling.
            while time.monotonic_ns() < deadline_ns:
                pass
        else:
            remaining = deadline_ns - time.monotonic_ns()
            if remaining > 0:
                time.sleep(remaining / 1e9)


class RealGPU:
    """The same interface on an NVIDIA GPU with CUDA PyTorch: kernels sized to the durations
    asked for, real synchronizes and .item() calls, real allocations."""

    def __init__(self, index=0, sync="spin"):
        import torch  # only here: the emulated path needs no torch

        if sync == "blocking":
            _set_blocking_sync(index)
        self.torch = torch
        self.device = torch.device("cuda", index)
        torch.cuda.set_device(self.device)
        self.memory_total = torch.cuda.get_device_properties(self.device).total_memory
        self._held = []
        # A full-chip kernel (a bf16 matmul) and a tiny one (an add on 256 elements, timed
        # back to back inside a CUDA graph, as launch() runs them).
        self._a = torch.randn(4096, 4096, device=self.device, dtype=torch.bfloat16)
        self._tiny = torch.zeros(256, device=self.device)
        self._matmul_seconds = self._time(lambda: self._a @ self._a, 50)
        self._graphs = {}
        self._tiny_seconds = self._time(self._tiny_graph(1000).replay, 20) / 1000

    def _time(self, kernel, repeats):
        torch = self.torch
        kernel()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            kernel()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / repeats

    def _tiny_graph(self, count):
        """`count` tiny kernels captured in a CUDA graph, so they run back to back on the GPU
        (few SMs busy) without Python's launch cost between them."""
        torch = self.torch
        if count not in self._graphs:
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                self._tiny.add_(1.0)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                for _ in range(count):
                    self._tiny.add_(1.0)
            self._graphs[count] = graph
        return self._graphs[count]

    def launch(self, seconds, sm=1.0, occupancy=None, tensor=0.0, dram=0.3):
        if sm >= 0.5:
            for _ in range(max(1, round(seconds / self._matmul_seconds))):
                self._a @ self._a
        else:
            self._tiny_graph(max(1, min(10000, round(seconds / self._tiny_seconds)))).replay()

    def all_reduce(self, peers, rank, seconds=0.002):
        """NCCL's all-reduce when torch.distributed is initialised (one GPU per rank), else the
        ranks meet on the host after draining their queues."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.all_reduce(self._tiny)
        else:
            self.synchronize()
            peers.barrier.wait()

    def synchronize(self):
        self.torch.cuda.synchronize()

    def item(self):
        return self._tiny.sum().item()

    def alloc(self, nbytes):
        try:
            self._held.append(self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device))
        except self.torch.cuda.OutOfMemoryError as e:
            raise OutOfMemory(str(e)) from e

    def free(self, nbytes):
        while nbytes > 0 and self._held:
            nbytes -= self._held.pop().numel()
        self.torch.cuda.empty_cache()

    def memory_used(self):
        free, total = self.torch.cuda.mem_get_info(self.device)
        return total - free

    def close(self):
        self._held.clear()


def _set_blocking_sync(index):
    """cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) before the context exists: PyTorch has
    no switch for it, the CUDA runtime it loads does."""
    import ctypes
    import glob

    import torch

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    candidates = glob.glob(os.path.join(torch_lib, "libcudart*.so*"))
    nvidia = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia")
    candidates += glob.glob(os.path.join(nvidia, "cuda_runtime", "lib", "libcudart.so*"))
    candidates.append("libcudart.so")
    for name in candidates:
        try:
            cudart = ctypes.CDLL(name)
        except OSError:
            continue
        cudart.cudaSetDevice(index)
        if cudart.cudaSetDeviceFlags(0x04) == 0:  # cudaDeviceScheduleBlockingSync
            return
    raise RuntimeError("could not set cudaDeviceScheduleBlockingSync: no usable libcudart")


def open_gpu(index=0, real=False, sync="spin"):
    """The GPU `index`: real with CUDA PyTorch, else the emulated one of the fake NVML."""
    return RealGPU(index, sync) if real else EmulatedGPU(index, sync)
