"""The GPU a workload trains on: an emulated one where no GPU exists, a real one with --real.

Both offer the few things a training loop does to a GPU:

    gpu = open_gpu(index, real=False, sync="spin")
    gpu.launch(seconds, sm=1.0)    # enqueue a kernel, return at once (asynchronous)
    gpu.synchronize()              # block until this process's queue drains
    gpu.item()                     # a scalar copied back to the host: a synchronize
    gpu.alloc(n) / gpu.free(n)     # device memory

The emulated GPU is driven through the workspace's stub CUDA runtime and driver
(crates/fake-cudart, crates/fake-cuda: libcudart.so.12 over libcuda.so.1, loaded with ctypes
from EMUCUDA_DIR), as PyTorch drives a real one: a launch is `cudaLaunchKernel`, `item()` a
`cudaMemcpyAsync` to the host and a `cudaStreamSynchronize`, and the thread waits inside the
driver. The driver books each kernel on a timeline file per GPU (the layout is documented in
crates/emu-timeline), which the fake libnvidia-ml.so.1 reads to answer the exporter:
utilization samples, per-process utilization, GPM SM activity, memory and processes all follow
what the workload's kernels did. Kernels of every process share one queue per GPU, as contexts
time-share a real GPU without MPS.

Waiting is CUDA's: "spin" (the default for a process with one context, cudaDeviceScheduleAuto
when contexts <= cores) burns the waiting thread's CPU inside libcuda; "blocking"
(cudaDeviceScheduleBlockingSync) sleeps there. Launches block once 1024 kernels are queued, as
CUDA's launch queue does. Standard library only.
"""

import ctypes
import glob
import os
import shutil
import struct
import time

# The timeline file's layout (crates/emu-timeline), for the ground truth that reads it.
HEADER = struct.Struct("<8sIIQQ")  # magic, capacity, slots, head, end of the device queue
HEADER_BYTES = 64
SLOT = struct.Struct("<IIQ")  # pid, 0, device memory held
RECORD = struct.Struct("<QQIHHHHI")  # start, end, pid, sm, occupancy, tensor, dram (per mille), flags
COLLECTIVE_KERNEL = 1  # flags: the kernel of a collective (ground truth; the driver ignores it)
LINK_WAIT = 2  # flags: no kernel; the time a copy took beyond a healthy PCIe link's (ground truth)

HERE = os.path.dirname(os.path.abspath(__file__))
# The stub libraries' cargo names, and the names a real node's processes map them under.
LIBRARIES = {"libfake_cuda.so": "libcuda.so.1", "libfake_cudart.so": "libcudart.so.12", "libfake_nccl.so": "libnccl.so.2"}
MEMCPY_DEVICE_TO_HOST = 2
SCHEDULE_BLOCKING_SYNC = 4
ERROR_MEMORY_ALLOCATION = 2


class OutOfMemory(MemoryError):
    """What torch raises as torch.cuda.OutOfMemoryError."""


class Peers:
    """The ranks of one job on this node, for collectives: made before the ranks are forked."""

    def __init__(self, ranks, context):
        self.barrier = context.Barrier(ranks)
        self.ends = context.Array("Q", ranks)  # when each rank's gradients are ready (ns)


class _Cost(ctypes.Structure):
    """The stub kernel's cost argument (crates/fake-cuda: KernelCost)."""

    _fields_ = [
        ("seconds", ctypes.c_double),
        ("sm", ctypes.c_double),
        ("occupancy", ctypes.c_double),
        ("tensor", ctypes.c_double),
        ("dram", ctypes.c_double),
        ("flags", ctypes.c_uint32),
        ("until_ns", ctypes.c_uint64),
    ]


class _Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def install_libraries(build, directory):
    """Copies the stub libraries of the cargo output `build` into `directory` under their real
    names (copies, not links: /proc/<pid>/maps shows the file's own name), atomically, so that
    processes starting together never load half a file."""
    os.makedirs(directory, exist_ok=True)
    for cargo_name, real_name in LIBRARIES.items():
        target = os.path.join(directory, real_name)
        if not os.path.exists(target):
            partial = f"{target}.{os.getpid()}"
            shutil.copyfile(os.path.join(build, cargo_name), partial)
            os.replace(partial, target)
    return directory


def _libraries():
    """The directory of libcuda.so.1 and libcudart.so.12: EMUCUDA_DIR, else the stubs of the
    workspace's newest build copied beside the timelines."""
    directory = os.environ.get("EMUCUDA_DIR")
    if directory:
        return directory
    builds = glob.glob(os.path.join(HERE, "..", "target", "*", "libfake_cudart.so"))
    if not builds:
        raise RuntimeError("no stub CUDA libraries: cargo build --workspace first, or set EMUCUDA_DIR")
    newest = os.path.dirname(max(builds, key=os.path.getmtime))
    return install_libraries(newest, os.path.join(os.environ["EMUGPU_DIR"], "cuda"))


_RUNTIME = None


def _runtime():
    """(libcudart, libcuda) of this process, loaded once: the driver first, under its SONAME,
    where the runtime's dlopen("libcuda.so.1") finds it."""
    global _RUNTIME
    if _RUNTIME is None or _RUNTIME[2] != os.getpid():
        directory = _libraries()
        driver = ctypes.CDLL(os.path.join(directory, "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
        runtime = ctypes.CDLL(os.path.join(directory, "libcudart.so.12"))
        runtime.cudaGetErrorString.restype = ctypes.c_char_p
        runtime.cudaLaunchKernel.argtypes = [
            ctypes.c_void_p,
            _Dim3,
            _Dim3,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        runtime.cudaMemcpyAsync.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_void_p,
        ]
        runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        runtime.cudaFree.argtypes = [ctypes.c_void_p]
        runtime.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        _RUNTIME = (runtime, driver, os.getpid())
    return _RUNTIME[0], _RUNTIME[1]


class EmulatedGPU:
    """One GPU of the fake NVML, driven through the stub CUDA runtime."""

    def __init__(self, index=0, sync="spin"):
        if sync not in ("spin", "blocking"):
            raise ValueError(f"sync must be spin or blocking, not {sync!r}")
        if not os.environ.get("EMUGPU_DIR"):
            raise RuntimeError("EMUGPU_DIR names the directory of the emulated GPUs' timelines")
        self.index = index
        self.sync_mode = sync
        self._cuda, self._driver = _runtime()
        self._check(self._cuda.cudaSetDevice(index), "cudaSetDevice")
        if sync == "blocking":
            self._check(self._cuda.cudaSetDeviceFlags(SCHEDULE_BLOCKING_SYNC), "cudaSetDeviceFlags")
        # The first allocation creates the context; this one holds the scalars read back.
        self._scalar = self._malloc(512)
        self._host = ctypes.create_string_buffer(8)
        self._held = []  # (pointer, bytes) of the model's allocations
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self._cuda.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)), "cudaMemGetInfo")
        self.memory_total = total.value
        self._one = _Dim3(1, 1, 1)
        self._grid = _Dim3(132, 1, 1)

    def _check(self, code, call):
        if code:
            if code == ERROR_MEMORY_ALLOCATION:
                raise OutOfMemory(f"emulated GPU out of memory ({call})")
            raise RuntimeError(f"{call}: {self._cuda.cudaGetErrorString(code).decode()} ({code})")

    def _malloc(self, nbytes):
        pointer = ctypes.c_void_p()
        self._check(self._cuda.cudaMalloc(ctypes.byref(pointer), nbytes), "cudaMalloc")
        return pointer

    # -- the interface ----------------------------------------------------------------------

    def launch(self, seconds, sm=1.0, occupancy=None, tensor=0.0, dram=0.3):
        """Enqueues a kernel that runs `seconds` on the device, keeping the share `sm` of its
        SMs busy (tiny kernels: a small share), and returns at once."""
        self._launch(None, seconds, sm, occupancy, tensor, dram)

    def _launch(self, until_ns, seconds=0.0, sm=1.0, occupancy=None, tensor=0.0, dram=0.3, flags=0):
        """Launches a kernel that runs `seconds`, or until `until_ns` (a kernel that waits on
        the GPU for something outside it, as a collective does)."""
        occupancy = sm * 0.5 if occupancy is None else occupancy
        cost = _Cost(seconds, sm, occupancy, tensor, dram, flags, until_ns or 0)
        args = (ctypes.c_void_p * 1)(ctypes.addressof(cost))
        self._check(self._cuda.cudaLaunchKernel(None, self._grid, self._one, args, 0, None), "cudaLaunchKernel")

    @property
    def _last_end(self):
        """When this process's queued work ends (CLOCK_MONOTONIC ns), from the stub driver."""
        end = ctypes.c_uint64()
        self._check(self._driver.emuDeviceQueueEnd(self.index, ctypes.byref(end)), "emuDeviceQueueEnd")
        return end.value

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
        self._check(self._cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def item(self):
        """A scalar read back to the host (loss.item()): ATen's copy to the host on the
        current stream, then a sync of that stream."""
        self.launch(10e-6, sm=0.01, dram=0.01)
        self._check(
            self._cuda.cudaMemcpyAsync(self._host, self._scalar, 4, MEMCPY_DEVICE_TO_HOST, None), "cudaMemcpyAsync"
        )
        self._check(self._cuda.cudaStreamSynchronize(None), "cudaStreamSynchronize")
        return 0.0

    def alloc(self, nbytes):
        """Takes `nbytes` of device memory; raises OutOfMemory past the device's total."""
        if nbytes > 0:
            self._held.append((self._malloc(nbytes), nbytes))

    def free(self, nbytes):
        while nbytes > 0 and self._held:
            pointer, size = self._held.pop()
            self._check(self._cuda.cudaFree(pointer), "cudaFree")
            nbytes -= size

    def memory_used(self):
        """Device memory in use by every process, as NVML reports it."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self._cuda.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)), "cudaMemGetInfo")
        return total.value - free.value

    def close(self):
        """Destroys the context: the driver forgets the process and its memory."""
        self._check(self._cuda.cudaDeviceReset(), "cudaDeviceReset")


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


class RealKernels:
    """The emulated torch's two kernel calls (`torch._C._forward`, `torch._C._launch`) with CUDA
    PyTorch, so that torch_loop's loops run on a real GPU: kernels sized to the durations asked
    (RealGPU's calibrated matmuls, or tiny kernels where few SMs are asked), and a loss whose
    backward is a real autograd Function, so that it runs on the engine's device thread with its
    hook before each backward kernel, as the emulated one does."""

    def __init__(self, torch, index):
        self.gpu = gpu = RealGPU(index)
        # A parameter, so that the loss has a backward for the engine to run.
        self.weight = torch.zeros(1, device=gpu.device, requires_grad=True)

        class Step(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, weight, cost, backward):
                ctx.backward = backward
                for _ in range(cost["count"]):
                    gpu.launch(cost["seconds"], sm=cost["sm"])
                # Not from x's values: a batch of torch.empty may hold NaNs, and the NaN check
                # would stop the loop.
                return weight.sum() + 1.0

            @staticmethod
            def backward(ctx, grad):
                seconds, count, sm, hook = ctx.backward
                for _ in range(count):
                    if hook is not None:
                        hook()
                    gpu.launch(seconds, sm=sm)
                return None, grad.expand(1), None, None

        self._step = Step

    def _forward(self, x, seconds, sm=1.0, tensor=0.0, dram=0.3, count=1, backward_seconds=0.0, backward_count=0, backward_hook=None):
        cost = {"seconds": seconds, "sm": sm, "count": count}
        return self._step.apply(x, self.weight, cost, (backward_seconds, backward_count, sm, backward_hook))

    def _launch(self, seconds, sm=1.0, dram=0.3):
        self.gpu.launch(seconds, sm=sm, dram=dram)


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
