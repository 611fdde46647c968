#!/usr/bin/env python3
"""One job on two nodes, as the fleet rules see it: the two DDP ranks of
communication_ddp_straggler (rank 1 starved by its loader, rank 0 spinning in NCCL's all-reduce
for it) in one Slurm job, each rank's GPU watched by an exporter of its own (node-0, node-1:
one emulated GPU each, as two nodes of one GPU), a real Prometheus scraping both and evaluating
a copy of deploy/rules (time shortened). Asserts that each exporter names its own GPU's cause
(node-0 communication, node-1 data_cpu), that the rules group the two GPUs into the job, and
that GPUJobStraggler fires for node-1's GPU only, named with the job and its verdict.

Each rank's environment says what torchrun's says on two nodes of one GPU (WORLD_SIZE 2,
LOCAL_WORLD_SIZE 1): node-0's exporter, with no rank of the job beside its own, takes the time
its host waits in the driver after issuing all-reduces, its SMs empty, for waiting on ranks
elsewhere. The Slurm job is the ranks' cgroup (`.../job_4242/step_0/...`, as slurmstepd makes it, in the
v1 cpu hierarchy where the host uses one, else in cgroup v2): it needs root and a writable
cgroup filesystem, and says "skipped" without them.

With --slow-link, the job is communication_slow_ib_link instead: two balanced ranks whose
all-reduces cross each node's InfiniBand port, node-1's at 10 Gb/s, node-0's at 200 (each
node's sysfs a copy of the host's with its own HCA, the stub NCCL moving the data at its
rank's port's rate and counting it there). Asserts both GPUs communication, node-1's naming its
slow port, node-0's not, and no straggler alert (every rank waits for the same wire).

With --startup-wait, the job is communication_ddp_rank0_preprocess: rank 0 prepares its
dataset on its host for 40 s while rank 1 waits for it at its first collective (in NCCL's
creation of the communicator). node-1's exporter cannot see rank 0 and reads its GPU hung
after hang_after; node-0's serves its rank as working (gpu_rank_working 1). Asserts node-1 read
hung long enough for the alerts' `for:`, and that neither GPUCollectiveHang nor GPUJobHung
fired: the rules hold them while a rank of the job works.

Usage: workloads/two_nodes.py [--slow-link | --startup-wait] [--exporter BIN] [--nvml-library LIB] [--seconds N]
"""
import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import contention_slow_rank  # noqa: E402
import emugpu  # noqa: E402
import run  # noqa: E402
import truth  # noqa: E402
from loopback import free_port, query, short_rules, start_prometheus  # noqa: E402

SLURM_JOB = "4242"
STRAGGLER_NODE = "node-1"
HOLD_S = 10
# A reading this long after the one before: the host stalled. This project's VMs stop every
# process for seconds at times, for up to two minutes while the kernel logs "workqueue
# lockup" (seen in this check's slow-link run, 2026-12-07): the ranks froze mid-collective,
# and node-1 read hung once they ran again, as a real node's exporter would.
STALL_S = 8
# The share of the readings after settling that must be as expected.
HELD_SHARE = 0.8
# What each node's exporter must name for the slow link (SlowLink's detail), and each node's
# port: (signalling rate, what `rate` reads).
SLOW_LINK_DETAIL = "mlx5_0 port 1 runs at 10 Gb/s"
# Seconds node-1 must read hung in the startup wait for the check to mean anything: the
# shortened rules' `for:` (3 s) and a scrape and an evaluation (1 s each), twice over.
HANG_HELD_MIN = 10
PORTS = {0: "200 Gb/sec (4X HDR)", 1: "10 Gb/sec (4X SDR)"}


def truth_communication(timelines, gpu, seconds=20):
    """What GPU `gpu` spent in collectives by its ground truth over its timeline's last
    `seconds` (its rank is the process with the most kernels on it; the run has ended)."""
    path = os.path.join(timelines, f"gpu{gpu}.timeline")
    found = truth.kernels(path)
    if not found:
        return float("nan")
    rank = max(set(k[2] for k in found), key=lambda pid: sum(k[1] - k[0] for k in found if k[2] == pid))
    end = max(k[1] for k in found)
    shares, _ = truth.split(path, timelines, end - seconds * 1_000_000_000, end, main=rank)
    return shares["communication"]


def node_sysfs(root, rate):
    """A node's sysfs at `root`: the host's, entry by entry (symlinks), but for
    class/infiniband, which holds one HCA, mlx5_0, whose port 1 signals at `rate` with its data
    counters at zero (the stub NCCL adds to them)."""
    os.makedirs(os.path.join(root, "class"))
    for entry in os.listdir("/sys"):
        if entry != "class":
            os.symlink(os.path.join("/sys", entry), os.path.join(root, entry))
    for entry in os.listdir("/sys/class"):
        if entry != "infiniband":
            os.symlink(os.path.join("/sys/class", entry), os.path.join(root, "class", entry))
    port = os.path.join(root, "class", "infiniband", "mlx5_0", "ports", "1")
    os.makedirs(os.path.join(port, "counters"))
    for name, text in (("rate", rate), ("state", "4: ACTIVE"), ("link_layer", "InfiniBand"),
                       ("counters/port_xmit_data", "0"), ("counters/port_rcv_data", "0"),
                       ("counters/port_xmit_wait", "0")):
        with open(os.path.join(port, name), "w") as f:
            f.write(text + "\n")


def cgroup_mount(controller):
    """Where the cgroup hierarchy of `controller` ("" for cgroup v2) is mounted, if it is."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            after = fields[fields.index("-") + 1:]
            if controller == "" and after[0] == "cgroup2":
                return fields[4]
            if controller and after[0] == "cgroup" and controller in after[2].split(","):
                return fields[4]
    return None


def slurm_cgroup():
    """A cgroup named as slurmstepd names a job step's: in the hierarchy the exporter reads a
    process's owner from (the v1 cpu controller's where the host has one, else v2)."""
    with open("/proc/self/cgroup") as f:
        v1_cpu = any("cpu" in line.split(":")[1].split(",") for line in f if line.count(":") >= 2)
    if v1_cpu and cgroup_mount("cpu"):
        path = os.path.join(cgroup_mount("cpu"), "slurm", "uid_0", f"job_{SLURM_JOB}", "step_0", "task_0")
    elif cgroup_mount(""):
        path = os.path.join(cgroup_mount(""), "system.slice", "slurmstepd.scope", f"job_{SLURM_JOB}", "step_0", "user", "task_0")
    else:
        return None
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "cgroup.procs"), "a"):
            pass
    except OSError:
        return None
    return path


def remove_cgroup(path):
    """The step's cgroups, innermost first (a cgroup is removed with rmdir once empty)."""
    while os.path.basename(path) != "slurm" and os.path.basename(path) != "slurmstepd.scope":
        try:
            os.rmdir(path)
        except OSError:
            return
        path = os.path.dirname(path)
    try:
        os.rmdir(path)
    except OSError:
        pass


def watch_startup(ports, prometheus_port, seconds, work):
    """Each second until rank 0 has arrived (node-1 read hung, then no longer) or `seconds`:
    each node's verdict, node-0's gpu_rank_working and the hang alerts in any state, written to
    progress.jsonl. What was seen: seconds node-1 read hung, of them with node-0 working, and
    the hang alerts seen pending or firing."""
    seen = {"hung": 0, "hung_with_working": 0, "alerts": set(), "took": 0.0}
    started = time.monotonic()
    verdicts, working = {}, None
    with open(os.path.join(work, "progress.jsonl"), "w") as progress:
        while time.monotonic() - started < seconds:
            time.sleep(1)
            for gpu, port in ports.items():
                try:
                    answer = run.diagnosis(port)
                    verdicts[gpu] = answer["gpus"][0]["primary"] if answer["gpus"] else "none"
                    # Each node's answers in full, for the logs.
                    with open(os.path.join(work, f"node-{gpu}", "diagnosis.jsonl"), "a") as f:
                        f.write(json.dumps(answer) + "\n")
                except OSError:
                    pass
            try:
                working = {m.get("node"): v for m, v in query(prometheus_port, "gpu_rank_working")}.get("node-0")
                alerts = query(prometheus_port, 'ALERTS{alertname=~"GPUCollectiveHang|GPUJobHung"}')
            except OSError:
                continue
            seen["alerts"] |= {f"{m['alertname']} {m['alertstate']}" for m, _ in alerts}
            if verdicts.get(1) == "hung":
                seen["hung"] += 1
                seen["hung_with_working"] += working == 1
            progress.write(json.dumps({"at": time.monotonic() - started, "verdicts": verdicts, "working": working,
                                       "alerts": [m for m, _ in alerts]}) + "\n")
            progress.flush()
            if seen["hung"] and verdicts.get(1) != "hung":
                break
    seen["took"] = time.monotonic() - started
    return seen


def report_startup(seen, work):
    """The startup wait's table and verdict: node-1 must have read hung long enough for the
    alerts' shortened `for:` (HANG_HELD_MIN), node-0's rank working meanwhile, and no hang
    alert in any state."""
    print("| seconds node-1 read hung | of them node-0's rank working | hang alerts seen |")
    print("|---|---|---|")
    print(f"| {seen['hung']} | {seen['hung_with_working']} | {', '.join(sorted(seen['alerts'])) or '-'} |")
    print(f"two nodes, startup wait: {seen['took']:.0f} s; logs in {work}")
    problems = []
    if seen["hung"] < HANG_HELD_MIN:
        problems.append(f"node-1 read hung for {seen['hung']} s, fewer than {HANG_HELD_MIN}: the alerts had no chance to fire")
    if seen["hung_with_working"] < seen["hung"] - 2:
        problems.append(f"node-0's rank was working in only {seen['hung_with_working']} of those seconds")
    if seen["alerts"]:
        problems.append(f"hang alerts while rank 0 worked: {sorted(seen['alerts'])}")
    if problems:
        sys.exit("two nodes: " + "; ".join(problems))
    print("two nodes: no hang alert while rank 0 preprocesses on the other node")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporter", default=os.path.join(ROOT, "target/release/gpu-bottleneck-exporter"))
    parser.add_argument("--nvml-library", default=os.path.join(ROOT, "target/release/libfake_nvml.so"))
    parser.add_argument("--seconds", type=float, default=90, help="the longest to wait for the alert")
    parser.add_argument("--slow-link", action="store_true", help="the job whose node-1 has a slow InfiniBand port")
    parser.add_argument("--startup-wait", action="store_true", help="the job whose rank 0 preprocesses before its first collective")
    args = parser.parse_args()
    if args.startup_wait:
        workload, expect = "communication_ddp_rank0_preprocess", {0: "working", 1: "hung"}
    elif args.slow_link:
        workload, expect = "communication_slow_ib_link", {0: "communication", 1: "communication"}
    else:
        workload, expect = "communication_ddp_straggler", {0: "communication", 1: "data_cpu"}
    if os.geteuid() != 0 or not shutil.which("prometheus"):
        print("two nodes: skipped (needs root for the job's cgroup, and prometheus)")
        return
    cgroup = slurm_cgroup()
    if not cgroup:
        print("two nodes: skipped (no writable cgroup hierarchy for the Slurm job's cgroup)")
        return
    work = tempfile.mkdtemp(prefix="two-nodes-")
    timelines = os.path.join(work, "timelines")
    os.makedirs(timelines)
    # As torchrun --nnodes 2 --nproc-per-node 1 tells each rank: two ranks, one per node.
    env = dict(os.environ, EMUGPU_DIR=timelines, NCCL_RAS_ADDR=f"127.0.0.1:{free_port()}",
               WORLD_SIZE="2", LOCAL_WORLD_SIZE="1")
    env["EMUCUDA_DIR"] = emugpu.install_libraries(os.path.dirname(os.path.abspath(args.nvml_library)), os.path.join(work, "cuda"))
    processes = []
    try:
        # Two nodes do not share CPUs: each node's rank and its loader workers run on a half of
        # this host's, so that neither node's exporter sees the other node's rank (spinning in
        # the driver) take its job's CPUs, which it rightly reads as contention. The exporters
        # stay unpinned: pinned beside a rank on a 2-CPU host, attaching the probes took a minute.
        node_cpus = contention_slow_rank.halves()
        # One exporter per rank's GPU: node-<n> sees GPU n alone.
        ports = {}
        for gpu in expect:
            node = os.path.join(work, f"node-{gpu}")
            os.makedirs(node)
            with open(os.path.join(node, "scenario.yaml"), "w") as f:
                f.write(run.scenario(len(expect), timelines, only=[gpu]))
            ports[gpu] = free_port()
            with open(os.path.join(node, "config.yaml"), "w") as f:
                f.write(run.config(ports[gpu], os.path.abspath(args.nvml_library), 12, 4))
                if args.slow_link:
                    # The node's sysfs, where the rank on it finds its HCA too.
                    sysfs = os.path.join(timelines, f"node-{gpu}", "sys")
                    node_sysfs(sysfs, PORTS[gpu])
                    f.write(f"paths: {{sysfs: {sysfs}}}\n")
            node_env = dict(env, NODE_NAME=f"node-{gpu}", FAKE_NVML_SCENARIO=os.path.join(node, "scenario.yaml"))
            processes.append(subprocess.Popen(
                [args.exporter, "--config", os.path.join(node, "config.yaml")], env=node_env,
                stdout=open(os.path.join(node, "exporter.log"), "w"), stderr=subprocess.STDOUT, start_new_session=True))
        targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"node": f"node-{gpu}"}} for gpu, port in ports.items()]
        prometheus, prometheus_port = start_prometheus(
            work, [{"job_name": "gpu-bottleneck-exporter", "static_configs": targets}], [short_rules(work)])
        # The job, in its Slurm step's cgroup from its first instruction.
        def enter_job():
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write("0")
        ranks = importlib.import_module(workload).SPEC.get("rank_specs", {})
        on_nodes = {"rank_specs": {str(gpu): {**ranks.get(str(gpu), {}), "cpus": sorted(node_cpus[gpu])} for gpu in expect}}
        workload = subprocess.Popen(
            [sys.executable, os.path.join(HERE, f"{workload}.py"), "--seconds", str(args.seconds + 30),
             "--spec", json.dumps(on_nodes)],
            env=env, stdout=open(os.path.join(work, "workload.log"), "w"), stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=enter_job)
        processes.append(workload)
        if args.startup_wait:
            startup = watch_startup(ports, prometheus_port, args.seconds, work)
        else:
            started = time.monotonic()
            progress = open(os.path.join(work, "progress.jsonl"), "w")
            firing, verdicts, score, seen_elsewhere, named, causes = [], {}, {}, set(), {}, {}
            # Once it fires as expected, it is watched a while longer: node-0 must not follow.
            settled_at = None
            held, judged = [], None
            last_reading = time.monotonic()
            while time.monotonic() - started < args.seconds and (settled_at is None or time.monotonic() - settled_at < HOLD_S):
                time.sleep(1)
                for gpu, port in ports.items():
                    try:
                        answer = run.diagnosis(port)
                        # Each node's answers in full, for the logs.
                        with open(os.path.join(work, f"node-{gpu}", "diagnosis.jsonl"), "a") as f:
                            f.write(json.dumps(answer) + "\n")
                        verdicts[gpu] = answer["gpus"][0]["primary"] if answer["gpus"] else "none"
                        named[gpu] = SLOW_LINK_DETAIL in json.dumps(answer["gpus"])
                        lost = (answer["gpus"][0].get("lost_time") or {}).get("causes", {}) if answer["gpus"] else {}
                        causes[gpu] = {cause: round(share, 3) for cause, share in lost.items() if share}
                    except OSError:
                        pass
                try:
                    firing = query(prometheus_port, 'ALERTS{alertname="GPUJobStraggler",alertstate="firing"}')
                    score = {m.get("node"): v for m, v in query(prometheus_port, "gpu:job_straggler_score:ratio")}
                except OSError:
                    continue
                # After a stall the run's time is the stall's longer, and the hold starts again:
                # what the verdicts show right after it is the stall's.
                stalled, last_reading = time.monotonic() - last_reading, time.monotonic()
                if stalled > STALL_S:
                    print(f"two nodes: the host stalled for {stalled:.0f} s; the watch goes on as long again")
                    started += stalled
                    settled_at, held, judged = None, [], None
                seen_elsewhere |= {m.get("node") for m, _ in firing if m.get("node") != STRAGGLER_NODE}
                progress.write(json.dumps({"at": time.monotonic() - started, "verdicts": verdicts, "causes": causes, "score": score,
                                           "firing": [m for m, _ in firing]}) + "\n")
                progress.flush()
                # Done once each node's verdict is its rank's and the alert fired on the straggler
                # with its own verdict (with the slow link: node-1 names its port).
                expected = all(verdicts.get(g) == v for g, v in expect.items())
                if args.slow_link:
                    expected = expected and named.get(1)
                else:
                    expected = expected and any(m.get("node") == STRAGGLER_NODE and m.get("verdict") == expect[1] for m, _ in firing)
                if settled_at is None and expected:
                    settled_at = time.monotonic()
                # Judged on the hold: a near tie may flip the straggler's own cause for a reading
                # or two under load (its alert resolves with it); most of the hold must be right.
                if settled_at is not None:
                    held.append(bool(expected))
                    if expected:
                        judged = (dict(verdicts), list(firing), dict(named))
            took = time.monotonic() - started
            if held and sum(held) >= HELD_SHARE * len(held):
                verdicts, firing, named = judged
    finally:
        prometheus.terminate()
        for process in reversed(processes):
            run.stop(process)
        prometheus.wait()
        remove_cgroup(cgroup)
    if args.startup_wait:
        report_startup(startup, work)
        return
    spun = {gpu: truth_communication(timelines, gpu) for gpu in expect}
    print("| node | GPU's verdict | expected | communication | truth: communication | names the slow port | straggler score | GPUJobStraggler |")
    print("|---|---|---|---|---|---|---|---|")
    for gpu, expected in expect.items():
        node = f"node-{gpu}"
        fired = [m for m, _ in firing if m.get("node") == node]
        print(f"| {node} | {verdicts.get(gpu, 'none')} | {expected} | {causes.get(gpu, {}).get('communication', 0.0):.2f} | "
              f"{spun[gpu]:.2f} | {'yes' if named.get(gpu) else 'no'} | "
              f"{score.get(node, float('nan')):.2f} | "
              f"{'firing (' + fired[0].get('job_name', '?') + ', ' + fired[0].get('verdict', '?') + ')' if fired else '-'} |")
    if not args.slow_link:
        # The rule's score (deploy/rules) on the truth's shares: what node-1 costs node-0.
        print(f"straggler score by the truth: {1 - (1 - spun[0]) / (1 - spun[1]):.2f}")
    print(f"two nodes: {took:.0f} s ({HOLD_S} s after the verdicts settled, {sum(held)} of "
          f"{len(held)} readings since as expected); logs in {work}")
    problems = []
    for gpu, expected in expect.items():
        if verdicts.get(gpu) != expected:
            problems.append(f"node-{gpu}'s GPU reads {verdicts.get(gpu)}, expected {expected}")
    straggler = [m for m, _ in firing if m.get("node") == STRAGGLER_NODE]
    if args.slow_link:
        if not named.get(1) or named.get(0):
            problems.append(f"the slow port named by node-1: {named.get(1)}, by node-0: {named.get(0)}")
        if firing:
            problems.append(f"GPUJobStraggler fired on {sorted(m.get('node') for m, _ in firing)}")
    elif not straggler:
        problems.append("GPUJobStraggler never fired for node-1's GPU")
    elif straggler[0].get("job_name") != f"slurm-{SLURM_JOB}" or straggler[0].get("verdict") != expect[1]:
        problems.append(f"GPUJobStraggler's labels: {json.dumps(straggler[0])}")
    if seen_elsewhere and not args.slow_link:
        problems.append(f"GPUJobStraggler fired on {sorted(seen_elsewhere)} too")
    if problems:
        sys.exit("two nodes: " + "; ".join(problems))
    print("two nodes: " + ("node-1 names its slow port, both GPUs wait for it" if args.slow_link
                           else "GPUJobStraggler fires for the straggler's node only"))


if __name__ == "__main__":
    main()
