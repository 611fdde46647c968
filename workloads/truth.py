"""Ground truth by construction: where an emulated GPU's time went, from what the GPU did (its
timeline file: every kernel with its process, SM share and whether it was a collective's) and
what the workload's processes did (their truth files, common.Truth: the main thread's loader
waits, syncs, Python and collectives; the workers' reads and decodes with their CPU time; and
for loops on the emulated torch, the syncs and backward passes its C side records where they
happen, which no Python line names).

The attribution follows the causes, not the exporter's arithmetic:

- Busy time: other processes' kernels → contention; the main process's collective kernels →
  communication; its other kernels' empty SMs (1 − SM share) → kernel_efficiency.
- Idle time while a copy of the main process takes longer than a healthy PCIe link would
  (the stub driver notes that excess: emugpu.LINK_WAIT) → communication (the link).
- Idle time, by what the main thread was doing at that moment: waiting for its loader → the
  loader's causes in proportion to the workers' time over the window (reading → data_io;
  decoding, on a CPU or waiting for one → data_cpu, except the wait for a CPU that the
  workload's CPU hogs caused → contention); without
  workers the loop loads its own samples, which is Python; synchronizing → sync_stall; in a
  collective → communication; Python (or a backward pass, the engine thread's host work, the
  main thread asleep meanwhile) → sync_stall if the GPU ran dry while the thread was
  synchronizing (the sync drained the queue), for as long as the thread was held in that sync
  while the GPU worked (without the sync the thread would have been that far ahead, the queue
  that full: the counterfactual), else host_bound (its wait for a CPU that the hogs caused →
  contention); anything else → unexplained. `hogs` is how many CPU hogs the workload runs.

The wait the hogs caused is a counterfactual too: the wait beyond what the job's own threads
would have made each other wait on its CPUs alone. Its threads wanted D cores over the window
(the main thread while it ran Python or a backward pass, runnable throughout, else its CPU
time; the workers while decoding, else their CPU time); on C CPUs alone each would have waited
max(0, 1 - C / D) of its runnable time, and any wait beyond that is the hogs'. A job that wants
no more CPUs than it has would not have waited at all.

Standard library only; time in 1 ms bins.
"""

import glob
import os
import struct

import common
import emugpu

CAUSES = [
    "data_io",
    "data_cpu",
    "host_bound",
    "sync_stall",
    "communication",
    "contention",
    "kernel_efficiency",
    "throttling",
    "unexplained",
]
BIN_NS = 1_000_000


def kernels(path):
    """Every kernel the timeline file still holds: (start, end, pid, sm share, flags)."""
    with open(path, "rb") as f:
        data = f.read()
    _, capacity, slots, head, _ = emugpu.HEADER.unpack_from(data, 0)
    ring = emugpu.HEADER_BYTES + slots * emugpu.SLOT.size
    found = []
    for n in range(max(0, head - capacity), head):
        start, end, pid, sm, _, _, _, flags = emugpu.RECORD.unpack_from(data, ring + (n % capacity) * emugpu.RECORD.size)
        found.append((start, end, pid, sm / 1000.0, flags))
    return found


def main_pid(path):
    """The process holding the most device memory (the exporter's main process)."""
    with open(path, "rb") as f:
        data = f.read()
    _, _, slots, _, _ = emugpu.HEADER.unpack_from(data, 0)
    held = [emugpu.SLOT.unpack_from(data, emugpu.HEADER_BYTES + i * emugpu.SLOT.size) for i in range(slots)]
    live = [(memory, pid) for pid, _, memory in held if pid and os.path.exists(f"/proc/{pid}")]
    return max(live)[1] if live else None


def records(directory):
    """Truth records per process: pid -> (parent pid, [(start, end, what, cpu ns)]): the
    loop's own (truth-<pid>-<ppid>.bin, common.Truth), then those the emulated torch's C side
    wrote of its syncs and backward passes (native-<pid>-<ppid>.bin), which land inside the
    loop's Python intervals and so come after them: a bin takes the last record covering it."""
    found = {}
    for prefix in ("truth", "native"):
        for path in sorted(glob.glob(os.path.join(directory, f"{prefix}-*-*.bin"))):
            pid, ppid = (int(x) for x in os.path.basename(path)[len(prefix) + 1 : -4].split("-"))
            with open(path, "rb") as f:
                data = f.read()
            usable = len(data) - len(data) % common.TRUTH_RECORD.size
            entries = found.setdefault(pid, (ppid, []))[1]
            entries.extend(common.TRUTH_RECORD.iter_unpack(data[:usable]))
    return found


def step_seconds(timeline, directory, start_ns, end_ns):
    """The main process's mean step over [start_ns, end_ns): the time between the starts of
    its batch fetches (one a step in the loops that record them), None with fewer than four."""
    main = main_pid(timeline)
    entries = records(directory).get(main, (None, []))[1]
    starts = sorted(s for s, _, what, _ in entries if what == common.LOADER and start_ns <= s < end_ns)
    if len(starts) < 4:
        return None
    return (starts[-1] - starts[0]) / (len(starts) - 1) / 1e9


def split(timeline, directory, start_ns, end_ns, hogs=0, main=None):
    """Shares of the window [start_ns, end_ns) per cause, and the busy fraction."""
    bins = max(1, (end_ns - start_ns) // BIN_NS)
    main = main or main_pid(timeline)
    shares = dict.fromkeys(CAUSES, 0.0)
    busy = bytearray(bins)
    link = bytearray(bins)  # bins the main process's copies waited for a degraded link
    for start, end, pid, sm, flags in kernels(timeline):
        first, last = max(0, (start - start_ns) // BIN_NS), min(bins, (end - start_ns) // BIN_NS)
        if last <= first:
            continue
        if flags & emugpu.LINK_WAIT:
            for b in range(first, last) if pid == main else ():
                link[b] = 1
            continue
        for b in range(first, last):
            busy[b] = 1
        share = (last - first) / bins
        if pid != main:
            shares["contention"] += share
        elif flags & emugpu.COLLECTIVE_KERNEL:
            shares["communication"] += share
        else:
            shares["kernel_efficiency"] += share * (1.0 - sm)
    processes = records(directory)
    phase = bytearray(bins)
    python_wait = {}  # bin -> share of a Python interval spent waiting for a CPU
    main_runnable = [0.0] * bins  # bin -> share of it the main thread wanted a CPU
    for start, end, what, cpu in processes.get(main, (0, []))[1]:
        first, last = max(0, (start - start_ns) // BIN_NS), min(bins, (end - start_ns) // BIN_NS)
        waiting = 1.0 - min(1.0, cpu / max(1, end - start))
        for b in range(first, last):
            phase[b] = what
            if what in (common.PYTHON, common.BACKWARD):
                python_wait[b] = waiting
                main_runnable[b] = 1.0
            else:
                main_runnable[b] = 1.0 - waiting
    # The share of its runnable time a thread of the job would have waited without the hogs.
    alone = None
    if hogs:
        demand = sum(main_runnable) / bins + workers_demand(processes, main, start_ns, end_ns)
        alone = wait_alone(demand, cpus_of(main))
    loader = loader_causes(processes, main, start_ns, end_ns, alone)
    # Bins the last sync held the thread while the GPU worked: the idle time after it that
    # the sync, not the host, cost (a host slower than its GPU would idle it anyway).
    sync_credit = 0
    for b in range(bins):
        if busy[b]:
            sync_credit = sync_credit + 1 if phase[b] == common.SYNC else 0
            continue
        what, unit = phase[b], 1.0 / bins
        if link[b]:
            # The GPU waits for a copy that a healthy link would have finished: the link's.
            shares["communication"] += unit
            continue
        own_work = what in (common.PYTHON, common.BACKWARD) or (what == common.LOADER and loader is None)
        drained_by_sync = sync_credit > 0 and own_work
        if drained_by_sync:
            sync_credit -= 1
        if what == common.LOADER and loader is None and drained_by_sync:
            shares["sync_stall"] += unit
        elif what == common.LOADER and loader is None:
            shares["host_bound"] += unit
        elif what == common.LOADER:
            for cause, weight in loader.items():
                shares[cause] += unit * weight
        elif what == common.SYNC:
            shares["sync_stall"] += unit
        elif what == common.COLLECTIVE:
            shares["communication"] += unit
        elif what in (common.PYTHON, common.BACKWARD) and drained_by_sync:
            shares["sync_stall"] += unit
        elif what in (common.PYTHON, common.BACKWARD):
            caused = 0.0 if alone is None else max(0.0, python_wait.get(b, 0.0) - alone)
            shares["contention"] += unit * caused
            shares["host_bound"] += unit * (1.0 - caused)
        else:
            shares["unexplained"] += unit
    return shares, sum(busy) / bins


def workers(processes, main):
    """The workers' records: those of the main process's children."""
    return [entries for pid, (ppid, entries) in processes.items() if ppid == main]


def overlaps(entries, start_ns, end_ns):
    """Each record's part inside the window: (what, wall ns inside it, CPU ns inside it)."""
    for start, end, what, cpu in entries:
        overlap = min(end, end_ns) - max(start, start_ns)
        if overlap > 0:
            yield what, overlap, cpu * overlap / max(1, end - start)


def workers_demand(processes, main, start_ns, end_ns):
    """The cores the workers wanted over the window: decoding, runnable throughout; otherwise
    their CPU time."""
    wanted = 0.0
    for entries in workers(processes, main):
        for what, wall, cpu in overlaps(entries, start_ns, end_ns):
            wanted += wall if what == common.DECODE else cpu
    return wanted / max(1, end_ns - start_ns)


def cpus_of(pid):
    """How many CPUs the process may run on."""
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return os.cpu_count() or 1


def wait_alone(demand, cpus):
    """The share of its runnable time a thread of a job wanting `demand` cores would wait on
    `cpus` CPUs with nobody else there (the CPUs shared fairly)."""
    return max(0.0, 1.0 - cpus / demand) if demand > 0 else 0.0


def loader_causes(processes, main, start_ns, end_ns, alone):
    """How the workers' (the main process's children's) time in the window went, as weights
    per cause summing to 1; `None` without workers (the loop loads its own samples). Where CPU
    hogs run, `alone` is the share of its runnable time a worker would have waited for a CPU
    without them: the wait beyond it is the hogs' (contention)."""
    found = workers(processes, main)
    if not found:
        return None
    read = compute = wait = caused = 0.0
    for entries in found:
        for what, wall, cpu in overlaps(entries, start_ns, end_ns):
            if what == common.READ:
                read += wall
            elif what == common.DECODE:
                compute += cpu
                wait += max(0.0, wall - cpu)
                if alone is not None:
                    caused += max(0.0, wall - cpu - wall * alone)
    total = read + compute + wait
    if total <= 0:
        return {"data_io": 1.0}
    return {
        "data_io": read / total,
        "data_cpu": (compute + wait - caused) / total,
        "contention": caused / total,
    }


def observable(shares, sm_activity=True):
    """The shares as the device can show them: without SM activity (no GPM: an A100, a MIG
    slice) no counter sees kernels leave the SMs empty, so that busy time is busy, not lost
    (the verdict can be no more than `busy` there). The shares themselves where it can."""
    if sm_activity:
        return shares
    return {**shares, "kernel_efficiency": 0.0}


def primary(shares, busy, floor=0.1):
    """The cause that cost the most, where it cost at least `floor` of the time; `idle` for a
    GPU that ran nothing, `busy` otherwise. Kernel efficiency is a cause only as the kind is
    defined (a GPU that looks busy, at least 80 %, with its SMs empty at least half that time:
    DCGM's line); below that, empty SMs are how kernels run, not a bottleneck."""
    if busy < 0.02:
        return "idle"
    candidates = {c: v for c, v in shares.items() if c != "unexplained"}
    if busy < 0.8 or candidates["kernel_efficiency"] < 0.5 * busy:
        del candidates["kernel_efficiency"]
    cause, share = max(candidates.items(), key=lambda x: x[1])
    return cause if share >= floor else "busy"
