"""Which of the CUDA driver's exported entry points known PyTorch calls reach, on a real node:
a uprobe on each (the kernel's tracefs, no BPF), its hits read from `uprobe_profile` after
each step of a fixed sequence (a thousand matmuls, a thousand tiny kernels, graph replays,
`.item()`s, pageable uploads, a spin wait, NCCL all-reduces). The exporter probes a few of
these entry points and counts what they see; this says whether a real driver's callers pass
through them, and how often.

    python3 workloads/cuda_census.py          # root, a GPU, CUDA PyTorch

Prints one row per entry point that was hit: its hits in each step. Needs root (tracefs).
"""

import os
import struct
import sys
import time

TRACING = "/sys/kernel/tracing"
GROUP = "census"
# The families of entry points counted: launches, graphs, copies, syncs, the driver's table.
FAMILIES = {
    "/libcuda.so": ("cuLaunch", "cuGraphLaunch", "cuMemcpy", "cuStreamSynchronize", "cuCtxSynchronize",
                    "cuEventSynchronize", "cuStreamQuery", "cuEventQuery", "cuGetProcAddress"),
    "/libcudart.so": ("cudaLaunch", "cudaGraphLaunch", "cudaMemcpy", "cudaStreamSynchronize",
                      "cudaDeviceSynchronize", "cudaEventSynchronize"),
}


def exported(path):
    """The file offset of each function the ELF file at `path` exports, by name."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError(f"{path}: not a 64-bit ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = []
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if kind == 1:  # PT_LOAD
            loads.append((vaddr, offset, filesz))
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found = {}
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 11:  # SHT_DYNSYM
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name_at, info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, at)
            if info & 0xF != 2 or shndx == 0:  # defined functions only
                continue
            end = data.index(b"\0", strings + name_at)
            name = data[strings + name_at:end].decode()
            for vaddr, file_offset, filesz in loads:
                if vaddr <= value < vaddr + filesz:
                    found[name] = value - vaddr + file_offset
    return found


def mapped(fragment):
    """The path of the library this process maps whose name holds `fragment`, else None."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if fragment in path:
                return path
    return None


def hits():
    """Hits of each uprobe defined (every line: the file, the event's name, its hits)."""
    counts = {}
    with open(os.path.join(TRACING, "uprobe_profile")) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3:
                counts[fields[-2]] = int(fields[-1])
    return counts


def write(name, *lines, append=False):
    """Each line a write(2) of its own, as tracefs parses one command a write (Python's append
    mode seeks, which tracefs refuses)."""
    fd = os.open(os.path.join(TRACING, name), os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
    try:
        for line in lines:
            os.write(fd, line.encode())
    finally:
        os.close(fd)


def main():
    import torch
    import torch.distributed as dist

    if not os.path.exists(os.path.join(TRACING, "uprobe_events")):
        os.system(f"mount -t tracefs nodev {TRACING}")
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    probes = []
    for fragment, families in FAMILIES.items():
        library = mapped(fragment)
        if library is None:
            print(f"no {fragment} mapped")
            continue
        offsets = exported(library)
        names = sorted(n for n in offsets if n.startswith(families))
        print(f"{library}: {len(names)} entry points probed")
        probes += [f"p:{GROUP}/{n} {library}:0x{offsets[n]:x}\n" for n in names]
    with open(os.path.join(TRACING, "tracing_on")) as f:
        tracing_was = f.read().strip()
    write("tracing_on", "0")  # hits are counted without tracing a single event
    write("uprobe_events")
    write("uprobe_events", *probes, append=True)
    write(f"events/{GROUP}/enable", "1")

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    tiny = torch.zeros(256, device="cuda")
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tiny.add_(1.0)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for _ in range(10):
            tiny.add_(1.0)
    host = torch.ones(1 << 20)
    dist.init_process_group("nccl", init_method=f"file:///tmp/census-store-{os.getpid()}", rank=0, world_size=1)
    dist.all_reduce(tiny)
    torch.cuda.synchronize()

    def repeat(count, call):
        for _ in range(count):
            call()
        torch.cuda.synchronize()

    def spin():
        torch.cuda._sleep(2_000_000_000)  # about a second of a spinning kernel
        torch.cuda.synchronize()

    steps = [
        ("idle 1 s", lambda: time.sleep(1)),
        ("1000 matmuls", lambda: repeat(1000, lambda: a @ a)),
        ("1000 tiny adds", lambda: repeat(1000, lambda: tiny.add_(1.0))),
        ("100 graph replays", lambda: repeat(100, graph.replay)),
        ("100 .item()", lambda: repeat(100, lambda: tiny.sum().item())),
        ("100 pageable .to()", lambda: repeat(100, lambda: host.to("cuda"))),
        ("100 all_reduce", lambda: repeat(100, lambda: dist.all_reduce(tiny))),
        ("spin wait ~1 s", spin),
    ]
    table = {}
    try:
        for label, step in steps:
            before = hits()
            started = time.perf_counter()
            step()
            torch.cuda.synchronize()
            after = hits()
            table[label] = ({n: after.get(n, 0) - before.get(n, 0) for n in after}, time.perf_counter() - started)
    finally:
        write(f"events/{GROUP}/enable", "0")
        write("uprobe_events")
        write("tracing_on", tracing_was)
        dist.destroy_process_group()
    hit = sorted({n for counts, _ in table.values() for n, c in counts.items() if c})
    print("step".ljust(20) + " seconds  " + "  ".join(hit))
    for label, (counts, seconds) in table.items():
        print(label.ljust(20) + f" {seconds:7.2f}  " + "  ".join(str(counts.get(n, 0)).rjust(len(n)) for n in hit))


if __name__ == "__main__":
    sys.exit(main())
