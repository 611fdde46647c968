#!/usr/bin/env python3
"""Runs the workload suite against the release exporter and prints a confusion table.

Each workload (a script in this directory declaring GPUS and EXPECT) trains for --seconds on
the emulated GPUs of the fake NVML (or, with --real, on the node's GPUs through the real NVML)
while the exporter samples every second; the runner reads /api/v1/diagnosis every second and
reports, per expected GPU: the primary verdict at the end, seconds until the expected verdict
first came out, how often the primary verdict changed once it was reached, and the evidence.

    python3 workloads/run.py                       # the whole suite (a benchmark: ~20 min)
    python3 workloads/run.py --fast                # the subset the test command runs; each
                                                   # ends once its verdict held for a window
    python3 workloads/run.py --only host_bound_no_workers,healthy_busy --seconds 40
    python3 workloads/run.py --real                # on a node with NVIDIA GPUs and CUDA PyTorch
    python3 workloads/run.py --random 100 --seed 1 # loops drawn at random (random_loop.py)

On the emulated GPUs every run is also compared with its ground truth (truth.py: what the GPU
and the workload's processes did over the last analysis window): the truth's primary cause and
the mean absolute error of the exporter's lost-time shares (`gpu_lost_time_ratio`) over the
nine causes. A random loop has no declared verdict: its expectation is the truth's primary.

Exit status: 1 when a workload's verdict differs from its expectation and --strict is given.
"""

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import emugpu  # noqa: E402
import random_loop  # noqa: E402
import truth  # noqa: E402
from loopback import free_port  # noqa: E402

# The subset the test command runs: one per family of signal (the GPU timeline's shape and
# SM activity, the main thread, CUDA's blocking wait, a sync no Python line names (seen at the
# CUDA driver), the process table, a loader waiting on a socket over a real link and on a FUSE
# mount, a hang and a straggler seen at NCCL), each decided well inside its time. Variants of
# these (a remote store on loopback, a hang in a host-blocking collective) run in the full
# suite only: the test command has 15 minutes.
FAST = [
    "idle_holder",
    "host_bound_no_workers",
    "sync_stall_item_blocking",
    "sync_stall_nan_check",
    "kernel_efficiency_tiny_kernels",
    "contention_two_jobs",
    "data_io_remote_http",
    "data_io_fuse_mount",
    "communication_ddp_hang",
    "communication_ddp_straggler",
]


def workloads():
    """Every workload script: name -> module (imported for GPUS and EXPECT, not run)."""
    found = {}
    for file in sorted(os.listdir(HERE)):
        name, ext = os.path.splitext(file)
        if ext != ".py" or name in ("run", "common", "emugpu", "truth", "random_loop", "netpath"):
            continue
        module = importlib.import_module(name)
        if hasattr(module, "EXPECT"):
            found[name] = module
    return found


# The device families the loops run on, as the fake NVML answers for them: Hopper (GPM: SM
# activity, occupancy, tensor and DRAM), Ampere (no GPM: A100, A10, L4, L40S have none), an
# A100 in MIG mode (no utilization, no samples, no per-process utilization at all) and a
# Hopper in MIG mode (none of those either, but GPM per GPU instance: its busy time and SM
# activity).
MIG_SLICE = [
    "    mig_mode: true",
    "    mig:",
    "      - {{uuid: MIG-e0000000-0000-4000-8000-00000000000{i}, gpu_instance_id: 1, memory_total: 42949672960}}",
]
FAMILIES = {
    "hopper": [],
    "ampere": ["    name: NVIDIA A100-SXM4-80GB", "    architecture: 7"],
    "mig": ["    name: NVIDIA A100-SXM4-80GB", "    architecture: 7"] + MIG_SLICE,
    "hopper_mig": MIG_SLICE,
}
# Links trained below their maximum, by family: (generation, width, max generation, max width),
# as NVML reports them; the stub driver's copies cross the link at that speed. A Hopper in a
# gen 5 x16 slot whose link came up at gen 2 x4 (a riser or slot gone bad).
PCIE_LINKS = {"degraded_link": (2, 4, 5, 16)}
FAMILIES["degraded_link"] = [f"    pcie_generation: {PCIE_LINKS['degraded_link'][0]}", f"    pcie_width: {PCIE_LINKS['degraded_link'][1]}"]
# The families whose devices have GPM (SM activity): Hopper's.
GPM_FAMILIES = ("hopper", "degraded_link", "hopper_mig")


def scenario(gpus, timelines, family="hopper", only=None):
    """A node of emulated GPUs of one family, each answering from its timeline file (`only`:
    the indices of the GPUs this node has, of the `gpus` the workload uses)."""
    devices = []
    for i in range(gpus) if only is None else only:
        devices.append(
            "\n".join(
                [
                    f"  - uuid: GPU-e0000000-0000-0000-0000-00000000000{i}",
                    f"    pci_bus_id: '00000000:{0x17 + i:02X}:00.0'",
                    f"    timeline: {os.path.join(timelines, f'gpu{i}.timeline')}",
                ]
                + [line.format(i=i) for line in FAMILIES[family]]
            )
        )
    return "devices:\n" + "\n".join(devices) + "\n"


def config(port, library, window, min_duration, probes=True, interval=1.0):
    return (
        f"listen_address: 127.0.0.1:{port}\n"
        f"sample_interval: {interval:g}s\n"
        # Info: the probes' attachments and every source's losses, for a failed run's report.
        "log_level: info\n"
        "sources:\n"
        f"  gpu: {{nvml_library: {library}}}\n"
        "  kubernetes: {enabled: false}\n"
        f"  cuda: {{enabled: {'true' if probes else 'false'}}}\n"
        f"  stacks: {{window: {window}s}}\n"
        "analysis:\n"
        f"  window: {window}s\n"
        f"  min_duration: {min_duration}s\n"
        # A hang is minutes in a real job; a workload run lasts seconds.
        "  hang_after: 10s\n"
    )


def diagnosis(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/diagnosis", timeout=5) as r:
        return json.load(r)


def evidence(gpu):
    """The evidence of the primary verdict, strongest first: `name=value`; for busy, idle and
    undetermined (no bottleneck, no evidence) the GPU's busy fraction and SM activity."""
    for kind in gpu["kinds"]:
        if kind["kind"] == gpu["primary"]:
            items = sorted(kind["evidence"], key=lambda e: -e["strength"])
            return ", ".join(
                f"{e['input']}={e['value']:.2f}" + (f" ({e['detail']})" if e.get("detail") else "")
                for e in items
                if e["strength"] >= 0.5
            )
    inputs = {e["input"]: e["value"] for k in gpu["kinds"] for e in k["evidence"]}
    return ", ".join(f"{name}={inputs[name]:.2f}" for name in ("gpu_busy", "sm_activity") if name in inputs)


def stop(process):
    """Stops a process and everything in its session (loader workers, hogs, storms)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def real_gpus():
    """GPUs on this node, as `nvidia-smi -L` lists them (0 without a driver)."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def skipped(name, module, why):
    return [
        {
            "workload": name,
            "gpu": gpu,
            "expected": expected,
            "primary": f"skipped: {why}",
            "ok": True,
            "seconds_to_verdict": None,
            "flips": 0,
            "evidence": "",
        }
        for gpu, expected in module.EXPECT.items()
    ]


def lost_shares(gpu):
    """The exporter's lost-time split of a GPU, per cause (zeros where it has none)."""
    causes = gpu.get("lost_time", {}).get("causes", {})
    return {cause: causes.get(cause, 0.0) for cause in truth.CAUSES}


def held_for(history, expected, seconds):
    """Whether every GPU's declared verdict has been the primary for the last `seconds`: the
    fast subset ends a workload once its verdict has held for twice the latch's min_duration
    (a verdict that stands, not a passing one) instead of at its full time. A GPU whose
    expectation is the truth's (a random loop) is known only at the end, so never ends one
    early."""
    if not all(expected.values()):
        return False
    for gpu, verdict in expected.items():
        seen = history[gpu]
        since = len(seen)
        while since > 0 and seen[since - 1][1] == verdict:
            since -= 1
        if since == len(seen) or seen[-1][0] - seen[since][0] < seconds:
            return False
    return True


def run_one(name, module, args, extra=(), hogs=None, gpus=None, family=None, ranks=None):
    """Runs one workload; returns a result row per expected GPU. `extra` are more arguments
    for the workload; `hogs` overrides the module's CPU_HOGS (how many CPU hogs it runs) for
    the ground truth, `gpus` its GPUS (how many GPUs it uses), `family` its DEVICE (the
    device family it runs on, hopper by default; --device overrides both), `ranks` its SPEC's
    (how many ranks of one job it starts)."""
    gpus = gpus or module.GPUS
    ranks = ranks or getattr(module, "SPEC", {}).get("ranks", 1)
    family = args.device or family or getattr(module, "DEVICE", "hopper")
    if args.real and gpus > args.real_gpus:
        return skipped(name, module, f"needs {gpus} GPUs, this node has {args.real_gpus}")
    # A real node is the family it is: the emulated one's workloads are for the emulator.
    if args.real and getattr(module, "DEVICE", "hopper") != "hopper":
        return skipped(name, module, f"emulates a {module.DEVICE} device; the real node's GPUs are what they are")
    # A workload that builds a real network path says what it needs that is missing.
    why = getattr(module, "SKIP", lambda: "")()
    if why:
        return skipped(name, module, why)
    # Short: the stub NCCL's unique id (128 bytes, as NCCL's) holds a path under it.
    work = tempfile.mkdtemp(prefix="workload-" + "".join(c if c.isalnum() else "_" for c in name)[:40] + "-")
    timelines = os.path.join(work, "timelines")
    os.makedirs(timelines)
    port = free_port()
    env = dict(os.environ)
    if args.real:
        library = "libnvidia-ml.so.1"
    else:
        library = args.nvml_library
        with open(os.path.join(work, "scenario.yaml"), "w") as f:
            f.write(scenario(gpus, timelines, family))
        env["FAKE_NVML_SCENARIO"] = os.path.join(work, "scenario.yaml")
        # The stub CUDA runtime and driver of the same build, under their real names.
        env["EMUCUDA_DIR"] = emugpu.install_libraries(os.path.dirname(library), os.path.join(work, "cuda"))
    with open(os.path.join(work, "config.yaml"), "w") as f:
        f.write(config(port, library, args.window, args.min_duration, not args.without_probes, args.sample_interval))
    env["EMUGPU_DIR"] = timelines
    if ranks > 1:
        # What torchrun tells the ranks of a job on one node (the exporter reads it).
        env.update(WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks))
    if family in PCIE_LINKS:
        env["EMUGPU_PCIE_LINK"] = ",".join(str(n) for n in PCIE_LINKS[family])
    # Each job's NCCL RAS service on a port of its own, as two jobs sharing a node's network
    # must (every process binds it with SO_REUSEPORT: one port would mix the jobs' answers).
    env["NCCL_RAS_ADDR"] = f"127.0.0.1:{free_port()}"
    log = open(os.path.join(work, "exporter.log"), "w")
    # Restricted: uid 0 with every capability dropped, as the restricted DaemonSet runs it (no
    # ptrace of the job: no stacks, no worker waits; no BPF: no CUDA probes).
    restricted = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"] if args.restricted else []
    exporter = subprocess.Popen(
        [*restricted, args.exporter, "--config", os.path.join(work, "config.yaml")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # A workload whose verdict needs longer than the run says so (MIN_SECONDS); it still ends
    # once its verdict has held. It would train longer: the verdict at the end is read while
    # it still runs.
    seconds = max(args.seconds, getattr(module, "MIN_SECONDS", 0))
    script = os.path.join(HERE, f"{module.__name__}.py")
    command = [sys.executable, script, "--seconds", str(seconds + 30), *extra]
    command += ["--data", args.data] + (["--real"] if args.real else [])
    workload_log = open(os.path.join(work, "workload.log"), "w")
    # A loop without declared verdicts (a random one) is judged on every GPU against its truth.
    expected = getattr(module, "EXPECT", None) or {gpu: None for gpu in range(gpus)}
    history = {gpu: [] for gpu in expected}
    last = {}
    truths = {}
    steps = {}
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                diagnosis(port)
                break
            except OSError:
                if time.monotonic() > deadline or exporter.poll() is not None:
                    raise RuntimeError(f"exporter did not start; see {log.name}")
                time.sleep(0.2)
        started = time.monotonic()
        workload = subprocess.Popen(
            command, env=env, stdout=workload_log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            trace = open(os.path.join(work, "diagnosis.jsonl"), "w")
            read_at = time.monotonic_ns()
            while workload.poll() is None and time.monotonic() - started < seconds:
                time.sleep(1)
                at = time.monotonic() - started
                try:
                    answer = diagnosis(port)
                except OSError as error:
                    # A stalled machine (this project's VMs stop every process for seconds at
                    # times, probes or not) delays an answer: a gap in the history, not a
                    # failed run. An exporter that stops answering ends with no verdict.
                    print(f"  {name}: no diagnosis at {at:.0f} s ({error})", file=sys.stderr)
                    continue
                read_at = time.monotonic_ns()
                trace.write(json.dumps({"at": at, **answer}) + "\n")
                for gpu in answer["gpus"]:
                    if gpu["gpu"] in history:
                        history[gpu["gpu"]].append((at, gpu["primary"]))
                        last[gpu["gpu"]] = gpu
                if args.fast and held_for(history, expected, 2 * args.min_duration):
                    break
            # The last page beside the verdicts: what the workers, probes and devices showed.
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
                    with open(os.path.join(work, "metrics.txt"), "wb") as f:
                        f.write(page.read())
            except OSError as error:
                print(f"  {name}: no last /metrics page ({error})", file=sys.stderr)
            if not args.real:
                # The truth files are flushed every half second: wait for the window's end.
                time.sleep(1)
                window = (read_at - args.window * 1_000_000_000, read_at)
                cpu_hogs = getattr(module, "CPU_HOGS", 0) if hogs is None else hogs
                for gpu in expected:
                    timeline = os.path.join(timelines, f"gpu{gpu}.timeline")
                    if os.path.exists(timeline):
                        truths[gpu] = truth.split(timeline, timelines, *window, hogs=cpu_hogs)
                        # The exporter's step is the mean of its last minute.
                        minute = (read_at - 60_000_000_000, read_at)
                        steps[gpu] = truth.step_seconds(timeline, timelines, *minute)
        finally:
            stop(workload)
    finally:
        stop(exporter)
    # Stopped as asked: by the signal, or by a handler that cleans up and exits 128 + its number
    # (netpath.on_exit) as a shell reports a death by signal.
    if workload.returncode not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
        print(f"  {name}: workload exited {workload.returncode}; see {workload_log.name}", file=sys.stderr)
    print(f"  {name}: logs and the verdicts of every second in {work}", file=sys.stderr)
    rows = []
    for gpu, declared in expected.items():
        seen = history[gpu]
        final = seen[-1][1] if seen else "none"
        row = {"workload": name, "gpu": gpu, "primary": final, "evidence": evidence(last[gpu]) if gpu in last else ""}
        row.update(work=work, seen=seen)
        if gpu in truths:
            full, busy = truths[gpu]
            # Kernel efficiency is unobservable without GPM: compared as the device shows it.
            shares = truth.observable(full, sm_activity=family in GPM_FAMILIES)
            if shares != full:
                row["unobservable"] = {"kernel_efficiency": full["kernel_efficiency"]}
            estimated = lost_shares(last.get(gpu, {}))
            errors = [abs(estimated[c] - shares[c]) for c in truth.CAUSES]
            row.update(
                truth=truth.primary(shares, busy),
                truth_shares=shares,
                shares=estimated,
                mae=sum(errors) / len(errors),
                worst_error=max(zip(errors, truth.CAUSES)),
            )
        measured_step = last.get(gpu, {}).get("step", {}).get("seconds")
        if steps.get(gpu) and measured_step:
            row.update(step=measured_step, truth_step=steps[gpu])
        # What the verdict must name (a mount, the job's ingress), in its evidence or reasons.
        detail = getattr(module, "EXPECT_DETAIL", {}).get(gpu)
        details = [detail] if isinstance(detail, str) else list(detail or [])
        named = all(gpu in last and d in json.dumps(last[gpu]) for d in details)
        if not named:
            row["evidence"] += f" (does not name {detail!r})"
        # What it must not say (a near miss of another rule's reading).
        absent = getattr(module, "EXPECT_ABSENT", {}).get(gpu)
        said = absent is not None and absent in json.dumps(last.get(gpu, {}))
        if said:
            row["evidence"] += f" (says {absent!r})"
        expected_primary = declared or row.get("truth", "none")
        reached = next((at for at, primary in seen if primary == expected_primary), None)
        # Flips: changes of the primary verdict once it reached the expected one (or, where it
        # never did, once it left undetermined): flapping, not the latches' entry delay.
        start = next(
            (i for i, (_, p) in enumerate(seen) if p == expected_primary),
            next((i for i, (_, p) in enumerate(seen) if p != "undetermined"), len(seen)),
        )
        settled = [p for _, p in seen[start:]]
        row.update(
            declared=declared,
            expected=expected_primary,
            ok=final == expected_primary and named and not said,
            seconds_to_verdict=reached,
            flips=sum(1 for a, b in zip(settled, settled[1:]) if a != b),
        )
        rows.append(row)
    return rows


def failure_report(rows):
    """What a missed run saw: its primary verdict second by second (runs of one verdict), and
    the tails of the exporter's and the workload's logs."""
    lines = []
    for r in rows:
        if r["ok"]:
            continue
        spans = []
        for at, primary in r["seen"]:
            if spans and spans[-1][2] == primary:
                spans[-1][1] = at
            else:
                spans.append([at, at, primary])
        timeline = ", ".join(f"{a:.0f}-{b:.0f} s {p}" for a, b, p in spans)
        lines.append(f"  MISS {r['workload']} GPU {r['gpu']}: expected {r['expected']}, {timeline}")
        lines.append(f"    evidence at the end: {r['evidence']}")
    for log in ("exporter.log", "workload.log"):
        path = os.path.join(rows[0]["work"], log)
        try:
            with open(path, errors="replace") as f:
                tail = f.readlines()[-15:]
        except OSError as error:
            tail = [f"(unreadable: {error})\n"]
        lines.append(f"  last lines of {path}:")
        lines += [f"    {line.rstrip()}" for line in tail]
    return "\n".join(lines)


def table(rows):
    lines = [
        "| workload | GPU | expected | primary at the end | s to verdict | flips | truth | MAE | evidence |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "" if r["ok"] else " ✗"
        seconds = "-" if r["seconds_to_verdict"] is None else f"{r['seconds_to_verdict']:.0f}"
        mae = f"{r['mae']:.3f}" if "mae" in r else "-"
        lines.append(
            f"| {r['workload']} | {r['gpu']} | {r['expected']} | {r['primary']}{mark} | {seconds} "
            f"| {r['flips']} | {r.get('truth', '-')} | {mae} | {r['evidence']} |"
        )
    return "\n".join(lines)


# Verdicts that are no claim about time (nothing to compare with the truth's time split); a
# hung job loses all of it, whatever the split of the rank's waiting says.
UNTIMED = ("memory_pressure", "hardware", "hung")


def judged(rows):
    """The rows with a ground truth whose verdict is a claim about time."""
    return [r for r in rows if "truth" in r and r["primary"] not in UNTIMED]


# How close two of the truth's causes must be to be a tie: its shares move more than this
# between two runs of the same loop.
TIE = 0.02


def names_a_tie(r):
    """Whether the verdict is a cause the truth itself has within TIE of its primary."""
    shares = r["truth_shares"]
    return {r["primary"], r["truth"]} <= shares.keys() and shares[r["truth"]] - shares[r["primary"]] <= TIE


def summary(rows):
    """Agreement with the truth's primary cause and the lost-time error, over the rows that
    have a truth (memory pressure and hardware verdicts cost no measurable time: left out);
    the worst cases."""
    judged_rows = judged(rows)
    if not judged_rows:
        return ""
    agree = sum(1 for r in judged_rows if r["primary"] == r["truth"])
    mae = sum(r["mae"] for r in judged_rows) / len(judged_rows)
    worst = sorted(judged_rows, key=lambda r: -r["mae"])[:3]
    lines = [
        "",
        f"against the ground truth: {len(judged_rows)} runs, primary agrees on {agree} "
        f"({100 * agree / len(judged_rows):.0f} %), mean absolute error of the lost-time shares {mae:.3f}",
    ]
    # A truth whose top two causes cost the same within a run's noise names either: said apart,
    # never counted as agreement.
    ties = [r for r in judged_rows if r["primary"] != r["truth"] and names_a_tie(r)]
    if ties:
        names = ", ".join(f"{r['workload'].split(' (')[0]} GPU {r['gpu']}" for r in ties)
        lines.append(
            f"  {len(ties)} of the others name a cause the truth itself has within {TIE} of its "
            f"primary (a tie in the loop's own record): {names}"
        )
    hidden = [r for r in judged_rows if r.get("unobservable", {}).get("kernel_efficiency", 0) >= 0.1]
    if hidden:
        lines.append(
            f"  {len(hidden)} of them on a device without SM activity (no GPM) whose kernels leave "
            "10 % or more of its time empty SMs: compared with the truth less that part, which "
            "no counter there shows"
        )
    for r in worst:
        error, cause = r["worst_error"]
        lines.append(
            f"  worst: {r['workload']} GPU {r['gpu']}: MAE {r['mae']:.3f}, {cause} off by {error:.2f} "
            f"(exporter {r['primary']}, truth {r['truth']})"
        )
    # A hung loop's step is the one in progress (its truth: the steps before the hang).
    timed = [r for r in rows if "truth_step" in r and r["primary"] != "hung"]
    if timed:
        errors = sorted((abs(r["step"] / r["truth_step"] - 1), r) for r in timed)
        close = [e for e, _ in errors if e <= 0.05]
        error, r = errors[-1]
        lines.append(
            f"step time against the loops' own (mean of the last minute): {len(timed)} runs, "
            f"{len(close)} within 5 %, median error {100 * errors[len(errors) // 2][0]:.1f} %, "
            f"worst {100 * error:.1f} % ({r['workload']} GPU {r['gpu']}: {r['step']:.3f} s, "
            f"truth {r['truth_step']:.3f} s)"
        )
        # A loop that crosses the library boundary less than once a step (no batch upload,
        # a sync every N steps) shows the period of its calls: N steps.
        several = [f"{r['workload']} x{r['step'] / r['truth_step']:.1f}" for e, r in errors if e > 0.05]
        if several:
            lines.append(f"  read as a period of several steps: {', '.join(several)}")
    # A workload sized for another machine may not produce the bottleneck it is named for:
    # then a wrong verdict is the workload's failure, not (only) the exporter's.
    for r in judged_rows:
        if r.get("declared") and r["declared"] not in UNTIMED and r["truth"] != r["declared"]:
            lines.append(
                f"  not produced: {r['workload']} GPU {r['gpu']} is named for {r['declared']}, "
                f"but its truth is {r['truth']} on this machine"
            )
    return "\n".join(lines)


def save(rows, path):
    """Writes the rows so far (a long run stopped early keeps what it measured)."""
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(path + ".tmp", path)


def wide_options(loop):
    """What a loop of the wide family sets beyond the torch family's draw, for its name."""
    if loop.get("family") != "wide":
        return ""
    shown = [
        ("epochs", not loop["persistent"]),
        ("unnamed", not loop["named"]),
        ("unordered", not loop["in_order"]),
        (f"heavy 1/{loop['heavy_every']}", loop["heavy_every"]),
        ("sidecars", loop["sidecars"]),
        ("prefetcher", loop["prefetcher"]),
        ("off main", loop["off_main"]),
        ("forward Python", loop["forward_host_seconds"]),
        ("checkpoints", loop.get("checkpoint_every")),
        (f"eval 1/{loop.get('eval_every')}", loop.get("eval_every")),
    ]
    return "".join(f", {label}" for label, on in shown if on)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", action="store_true", help="real GPUs, real NVML, CUDA PyTorch")
    parser.add_argument("--fast", action="store_true", help="the subset the test command runs, with a 12 s window; a workload ends once its verdict held for 8 s (twice min_duration)")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--seconds", type=float, help="training time per workload (default 60, --fast 25, --random 40)")
    parser.add_argument("--window", type=int, help="analysis window in seconds (default 30, --fast 12, --random 20)")
    parser.add_argument("--min-duration", type=int, help="analysis min_duration in seconds (default 10, --fast 4, --random 6)")
    parser.add_argument("--sample-interval", type=float, default=1.0, help="the exporter's sample_interval in seconds (default 1)")
    parser.add_argument("--exporter", default=os.path.join(ROOT, "target/release/gpu-bottleneck-exporter"))
    parser.add_argument("--nvml-library", default=os.path.join(ROOT, "target/release/libfake_nvml.so"))
    parser.add_argument("--data", default=os.environ.get("WORKLOAD_DATA", "/var/tmp/gpu-bottleneck-workloads"))
    parser.add_argument("--device", choices=sorted(FAMILIES), help="run every workload on this device family (default: each its own, hopper)")
    parser.add_argument("--random", type=int, default=0, help="run N loops drawn at random (random_loop.py)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random loops")
    parser.add_argument("--family", default="classic", choices=sorted(random_loop.LOOP_FAMILIES),
                        help="with --random: the loops of random_loop.draw (classic), of draw_torch (written as PyTorch "
                             "code) or of draw_wide (those, with the loader, thread and checkpoint options real jobs set)")
    parser.add_argument("--without-probes", action="store_true",
                        help="run the exporter with sources.cuda off (its verdicts as before the CUDA probes)")
    parser.add_argument("--restricted", action="store_true",
                        help="run the exporter as uid 0 with every capability dropped (restricted mode: no stacks, no probes)")
    parser.add_argument("--loops", default="", help="with --random: only these of the N loops (comma-separated numbers, 0..N-1)")
    parser.add_argument("--json", help="also write the rows here (after every run)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a verdict is not the expected one")
    parser.add_argument("--min-agreement", type=float, help="exit 1 when fewer runs agree with the truth's primary")
    parser.add_argument("--max-mae", type=float, help="exit 1 when the mean absolute error of the lost-time shares is larger")
    args = parser.parse_args()
    # Random loops are many: 40 s each with a 20 s window (the truth is taken over it too).
    args.seconds = args.seconds or (25.0 if args.fast else 40.0 if args.random else 60.0)
    args.window = args.window or (12 if args.fast else 20 if args.random else 30)
    args.min_duration = args.min_duration or (4 if args.fast else 6 if args.random else 10)

    args.real_gpus = real_gpus() if args.real else 0
    rows = []
    if args.random:
        if args.real:
            parser.error("--random needs the emulated GPUs (its ground truth is theirs)")
        chosen = [int(n) for n in args.loops.split(",") if n] or range(args.random)
        for n in chosen:
            loop_seed = args.seed * 100_000 + n
            torch = args.family != "classic"
            loop = random_loop.LOOP_FAMILIES[args.family](loop_seed)
            ranks = f", {loop['ranks']} ranks" if loop["ranks"] > 1 else ""
            if torch and loop["ranks"] > 1:
                wrapper = next(w for w in ("ddp", "fsdp", "pipeline", "moe") if loop.get(w))
                ranks += f" {wrapper}, straggler {loop['straggler']}"
            form = f"{loop['sync']}, " if torch else ""
            on = f", {loop['device']}" if loop["device"] != "hopper" else ""
            name = f"random {loop_seed} ({form}{loop['loader']}, {loop['disturbance']}{ranks}{on}{wide_options(loop)})"
            print(f"{name} ...", file=sys.stderr, flush=True)
            hogs = random_loop.HOGS if loop["disturbance"] == "hogs" else 0
            extra = ["--loop-seed", str(loop_seed), "--family", args.family]
            rows += run_one(name, random_loop, args, extra, hogs=hogs, gpus=loop["ranks"], family=loop["device"], ranks=loop["ranks"])
            save(rows, args.json)
    else:
        suite = workloads()
        chosen = [n for n in args.only.split(",") if n] or (FAST if args.fast else list(suite))
        unknown = [n for n in chosen if n not in suite]
        if unknown:
            parser.error(f"no such workload: {', '.join(unknown)} (have: {', '.join(suite)})")
        for name in chosen:
            print(f"{name} ...", file=sys.stderr, flush=True)
            result = run_one(name, suite[name], args)
            # The test command's run on a shared machine: a miss is reported with what the
            # exporter saw, and the workload runs once more; it passes only if the rerun agrees
            # (a machine's hiccup passes, an exporter that misses one run in two rarely does).
            if args.strict and args.fast and not all(r["ok"] for r in result):
                print(failure_report(result), file=sys.stderr, flush=True)
                print(f"{name} (rerun after a miss) ...", file=sys.stderr, flush=True)
                result = run_one(name, suite[name], args)
                for r in result:
                    r["workload"] += " (rerun)"
            rows += result
            save(rows, args.json)
    print(table(rows))
    print(summary(rows))
    if args.strict and not all(r["ok"] for r in rows):
        sys.exit(1)
    compared = judged(rows)
    if compared and args.min_agreement is not None:
        # The gate (not the reported agreement) lets a tie in the loop's own record pass: the
        # test command runs one loop a seed, and a truth whose top two causes are within its
        # run-to-run noise names either (seed 2's decode loop under hogs: data_cpu against
        # kernel_efficiency 0.02 apart, one fresh-clone run in several). MAE still gates it.
        agreeing = sum(r["primary"] == r["truth"] or names_a_tie(r) for r in compared)
        if agreeing < args.min_agreement * len(compared):
            sys.exit(f"agreement with the truth below {args.min_agreement}")
    if compared and args.max_mae is not None:
        if sum(r["mae"] for r in compared) / len(compared) > args.max_mae:
            sys.exit(f"mean absolute error above {args.max_mae}")


if __name__ == "__main__":
    main()
