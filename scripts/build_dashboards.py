#!/usr/bin/env python3
"""Writes the Grafana dashboards in dashboards/ from the panel lists below (one place to read
every query). `--check` fails instead when a committed dashboard differs; scripts/test.sh runs
it that way and then runs every query against a real Prometheus (scripts/check_dashboards.py).

Every dashboard has a datasource variable; node, GPU and pod variables come from the
exporter's own series."""
import json
import sys

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def variable_datasource():
    return {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source", "current": {}, "hide": 0}


def variable(name, label, query, multi=True):
    return {
        "name": name, "label": label, "type": "query", "datasource": DATASOURCE,
        "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
        "includeAll": multi, "multi": multi, "allValue": ".*", "current": {}, "hide": 0, "sort": 1,
    }


def panel(title, kind, exprs, x, y, w=12, h=8, unit=None, description="", legend=None, stack=False, extra=None):
    targets = [{"refId": chr(65 + i), "expr": e, "legendFormat": (legend[i] if legend else ""), "datasource": DATASOURCE} for i, e in enumerate(exprs)]
    p = {
        "type": kind, "title": title, "description": description, "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets,
        "fieldConfig": {"defaults": {}, "overrides": []}, "options": {},
    }
    if unit:
        p["fieldConfig"]["defaults"]["unit"] = unit
    if stack:
        p["fieldConfig"]["defaults"]["custom"] = {"stacking": {"mode": "normal"}, "fillOpacity": 60}
    if kind == "table":
        for t in targets:
            t["format"] = "table"
            t["instant"] = True
    p.update(extra or {})
    return p


def dashboard(uid, title, description, variables, panels):
    for i, p in enumerate(panels):
        p["id"] = i + 1
    return {
        "uid": uid, "title": title, "description": description, "tags": ["gpu", "gpu-bottleneck-exporter"],
        "timezone": "browser", "schemaVersion": 39, "version": 1, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "editable": True, "graphTooltip": 1,
        "templating": {"list": [variable_datasource(), *variables]}, "panels": panels,
        "links": [{"title": "GPU dashboards", "type": "dashboards", "tags": ["gpu-bottleneck-exporter"], "asDropdown": True}],
    }


# A GPU can hold processes of several pods (contention), so joins keep the pod side as the "many"
# side and take one series per GPU from the other.
POD_JOIN = 'on (instance, gpu, uuid, pid) group_left (pod_uid) gpu_process_cgroup_info{pod_uid=~"$pod"}'
GPU_POD = 'max by (instance, gpu, uuid, pod_uid) (gpu_process_cgroup_info{pod_uid!=""})'
POD_GPUS = 'max by (instance, gpu, uuid, pod_uid) (gpu_process_cgroup_info{pod_uid=~"$pod"})'
NODE = 'instance=~"$node", gpu=~"$gpu"'
JOB = 'namespace=~"$namespace", job_name=~"$job"'

DASHBOARDS = {
    "cluster-overview.json": dashboard(
        "gbe-cluster", "GPU fleet: why GPUs wait",
        "Fleet busy fraction, verdicts over time, GPU-hours lost per cause and who loses them.",
        [],
        [
            panel("Fleet busy fraction", "stat", ["cluster:gpu_busy:avg"], 0, 0, w=6, h=5, unit="percentunit",
                  description="Mean busy fraction (NVML utilization samples) over every GPU."),
            panel("Allocated but idle GPUs", "stat", ["cluster:gpu_allocated_idle:count"], 6, 0, w=6, h=5,
                  description="GPUs a pod holds without using them (kubelet assignment, no process or no activity for 10 minutes)."),
            panel("GPUs with a bottleneck", "stat", ['count(gpu_verdict{verdict!~"busy|idle|undetermined"} == 1) or vector(0)'], 12, 0, w=6, h=5),
            panel("Exporter sources failing", "stat", ["count(gpu_exporter_source_up == 0 and gpu_exporter_source_supported == 1) or vector(0)"], 18, 0, w=6, h=5),
            panel("Busy fraction over time", "timeseries", ["cluster:gpu_busy:avg", "instance:gpu_busy:avg"], 0, 5, unit="percentunit", legend=["fleet", "{{instance}}"]),
            panel("GPUs by primary verdict", "timeseries", ["sum by (verdict) (gpu_verdict == 1)"], 12, 5, legend=["{{verdict}}"], stack=True,
                  description="How many GPUs have each primary verdict: the picture of where the fleet's time goes."),
            panel("GPU-hours lost per hour, by cause", "timeseries", ["cluster_cause:gpu_hours_lost:rate1h"], 0, 13, legend=["{{cause}}"], stack=True,
                  description="GPU time that did no useful work over the last hour, split by cause as each exporter attributes it (gpu_lost_time_ratio: idle time by what the job was doing, busy time wasted or taken by others)."),
            panel("Top pods by lost GPU time", "table", [f"topk(10, sum by (pod_uid) ({GPU_POD} * on (instance, gpu, uuid) group_left () gpu:lost:ratio))"], 12, 13,
                  description="GPUs' worth of capacity each pod loses right now (pod UID from the process cgroup)."),
            panel("Top namespaces by lost GPU-hours", "table", ["topk(10, sum by (namespace) (namespace_cause:gpu_hours_lost:rate1h))"], 0, 21,
                  description="GPU-hours lost per hour in each namespace (kubelet pod assignment), all causes."),
            panel("Top nodes by lost GPU time", "table", ["topk(10, sum by (instance) (gpu:lost:ratio))"], 0, 29),
            panel("Idle GPUs", "stat", ["cluster:gpu_idle:count"], 12, 29, w=6, h=5, description="GPUs with no process."),
            panel("Verdict per GPU", "table", ['gpu_verdict == 1'], 12, 21),
        ],
    ),
    "node-drilldown.json": dashboard(
        "gbe-node", "GPU node: where the time goes",
        "Per GPU: busy fraction against SM activity, the verdict timeline, and the host evidence side by side.",
        [variable("node", "Node", "label_values(gpu_info, instance)", multi=False), variable("gpu", "GPU", 'label_values(gpu_info{instance=~"$node"}, gpu)')],
        [
            panel("Busy fraction vs SM activity", "timeseries", [f"gpu_busy_mean_ratio{{{NODE}}}", f"gpu_sm_activity_ratio{{{NODE}}}"], 0, 0, unit="percentunit",
                  legend=["GPU {{gpu}} busy", "GPU {{gpu}} SM activity"],
                  description="Busy (a kernel ran) against SM activity (SMs had work, GPM): a wide gap is kernel inefficiency."),
            panel("Primary verdict", "state-timeline", [f"max by (gpu, verdict) (gpu_verdict{{{NODE}}} == 1)"], 12, 0, legend=["GPU {{gpu}}: {{verdict}}"]),
            panel("Bottleneck scores", "timeseries", [f"gpu_bottleneck_score{{{NODE}}}"], 0, 8, legend=["GPU {{gpu}} {{kind}}"],
                  description="0.5 is each rule's threshold; active after 10 s above 0.5, inactive after 10 s below 0.3."),
            panel("Idle share of samples", "timeseries", [f"gpu_busy_idle_share_ratio{{{NODE}}}"], 12, 8, unit="percentunit", legend=["GPU {{gpu}}"]),
            panel("Disk utilization and await", "timeseries", ['gpu_host_disk_utilization_ratio{instance=~"$node"}', 'gpu_host_disk_read_await_seconds{instance=~"$node"}'], 0, 16,
                  legend=["{{device}} util", "{{device}} r_await (s)"]),
            panel("iowait and I/O pressure", "timeseries", ['gpu_host_cpu_iowait_ratio{instance=~"$node"}', 'gpu_host_pressure_stalled_ratio{instance=~"$node", resource="io", kind="some"}'], 12, 16,
                  unit="percentunit", legend=["iowait", "PSI io some"]),
            panel("Loader workers and main thread", "timeseries", [f"gpu_process_workers_cpu_cores{{{NODE}}}", f"gpu_process_busiest_thread_cpu_ratio{{{NODE}}}"], 0, 24,
                  legend=["GPU {{gpu}} pid {{pid}} workers (cores)", "GPU {{gpu}} pid {{pid}} busiest thread"]),
            panel("Workers waiting on I/O", "timeseries", [f'gpu_process_workers_in_state{{{NODE}, state="disk_wait"}}'], 12, 24, legend=["GPU {{gpu}} pid {{pid}}"]),
            panel("Temperature and power", "timeseries", [f"gpu_temperature_celsius{{{NODE}}}", f"gpu_power_watts{{{NODE}}}"], 0, 32, legend=["GPU {{gpu}} °C", "GPU {{gpu}} W"]),
            panel("Device memory used", "timeseries", [f"gpu_memory_used_bytes{{{NODE}}} / gpu_memory_total_bytes{{{NODE}}}"], 12, 32, unit="percentunit", legend=["GPU {{gpu}}"]),
            panel("Lost GPU time by cause", "timeseries", [f"gpu_lost_time_ratio{{{NODE}}} > 0"], 0, 40, w=24, unit="percentunit", legend=["GPU {{gpu}} {{cause}} ({{basis}})"], stack=True,
                  description="Share of each GPU's analysis window that did no useful work, by cause: idle time split by what the job's main thread was doing (observed in its Python stacks, or inferred from counters), busy time with empty SMs, at held-down clocks or taken by other processes."),
        ],
    ),
    "pod-processes.json": dashboard(
        "gbe-pod", "GPU pods and processes",
        "The GPU processes of a pod: GPU use, CPU, loader workers, throttling.",
        [variable("namespace", "Namespace", "label_values(gpu_pod_info, namespace)"), variable("pod", "Pod UID", 'label_values(gpu_process_cgroup_info{pod_uid!=""}, pod_uid)')],
        [
            panel("GPUs assigned in the namespace", "table", ['gpu_pod_info{namespace=~"$namespace"}'], 0, 30, w=12, h=6,
                  description="The kubelet's assignment of GPUs to pods and containers."),
            panel("Primary verdicts in the namespace", "table", ['gpu_verdict{namespace=~"$namespace"} == 1'], 12, 30, w=12, h=6),
            panel("Processes", "table", ['gpu_process_cgroup_info{pod_uid=~"$pod"}'], 0, 0, w=24, h=6),
            panel("GPU memory per process", "timeseries", [f"gpu_process_memory_used_bytes * {POD_JOIN}"], 0, 6, unit="bytes", legend=["GPU {{gpu}} pid {{pid}}"]),
            panel("SM utilization per process", "timeseries", [f"gpu_process_sm_utilization_ratio * {POD_JOIN}"], 12, 6, unit="percentunit", legend=["GPU {{gpu}} pid {{pid}}"]),
            panel("Process CPU and busiest thread", "timeseries", [f"gpu_process_cpu_cores * {POD_JOIN}", f"gpu_process_busiest_thread_cpu_ratio * {POD_JOIN}"], 0, 14,
                  legend=["pid {{pid}} cores", "pid {{pid}} busiest thread"]),
            panel("Loader workers by state", "timeseries", [f"gpu_process_workers_in_state * on (instance, gpu, uuid, pid) group_left (pod_uid) gpu_process_cgroup_info{{pod_uid=~\"$pod\"}}"], 12, 14,
                  legend=["pid {{pid}} {{state}}"], stack=True),
            panel("CPU quota throttling", "timeseries", [f"gpu_process_cgroup_cpu_throttled_ratio * {POD_JOIN}"], 0, 22, unit="percentunit", legend=["pid {{pid}}"]),
            panel("Verdicts of the pod's GPUs", "table", [f"{POD_GPUS} * on (instance, gpu, uuid) group_left (verdict) gpu_verdict"], 12, 22),
        ],
    ),
    "job-ranks.json": dashboard(
        "gbe-job", "GPU job: its ranks side by side",
        "A training job's GPUs across the nodes it runs on (pods grouped by their job label or owner from kube-state-metrics, or a Slurm job): who lags, why, and whether it is hung.",
        [variable("namespace", "Namespace", "label_values(job:gpu:count, namespace)", multi=False),
         variable("job", "Job", 'label_values(job:gpu:count{namespace=~"$namespace"}, job_name)', multi=False)],
        [
            panel("GPUs", "stat", [f"job:gpu:count{{{JOB}}}"], 0, 0, w=6, h=5),
            panel("Nodes", "stat", [f"job:gpu_nodes:count{{{JOB}}}"], 6, 0, w=6, h=5),
            panel("Median busy fraction", "stat", [f"job:gpu_busy:median{{{JOB}}}"], 12, 0, w=6, h=5, unit="percentunit"),
            panel("Hung and working GPUs", "stat", [f"sum(job:gpu_hung:count{{{JOB}}}) or vector(0)", f"sum(job:gpu_working:count{{{JOB}}}) or vector(0)"], 18, 0, w=6, h=5,
                  legend=["hung", "working"],
                  description="Hung: GPUs of the job whose main thread has sat in one collective for minutes while the GPU spins or idles (verdict hung). Working: GPUs whose rank works now (gpu_rank_working: its GPU computing, or its main process on a CPU outside any collective). Hung GPUs beside a working one wait for it (rank 0 preprocessing on another node): the hang alerts hold."),
            panel("Busy fraction of each GPU", "timeseries", [f"gpu:job_busy:ratio{{{JOB}}}", f"job:gpu_busy:median{{{JOB}}}"], 0, 5, unit="percentunit",
                  legend=["{{instance}} GPU {{gpu}} ({{pod}})", "job median"],
                  description="In synchronous training the job runs at its slowest rank's pace: a line far below the median is the straggler the others wait for."),
            panel("Straggler score of each GPU", "bargauge", [f"gpu:job_straggler_score:ratio{{{JOB}}}"], 12, 5, unit="percentunit", legend=["{{instance}} GPU {{gpu}}"],
                  description="The share of every step the job's other ranks spend waiting for this one (1 - the least own work of a rank / this rank's, own work being the time not lost waiting for peers in collectives; where no rank's waits are measured, how far its busy fraction is below the job's median). GPUJobStraggler fires past 30 % for 10 minutes."),
            panel("Verdict of each GPU", "table", [f"gpu:gpu_job:info{{{JOB}}} * on (instance, gpu, uuid) group_left (verdict) (gpu_verdict == 1)"], 0, 13, w=24,
                  description="The straggler's own verdict is the job's cause."),
            panel("The job's lost GPU time by cause", "timeseries", [f"sum by (cause) (gpu_lost_time_ratio * on (instance, gpu, uuid) group_left (job_name) gpu:gpu_job:info{{{JOB}}})"], 0, 19,
                  legend=["{{cause}}"], stack=True, description="GPUs' worth of time the job loses, by cause, summed over its GPUs."),
            panel("Network links of the job's nodes", "timeseries",
                  [f"max by (instance, interface) (gpu_host_network_utilization_ratio * on (instance) group_left () group by (instance) (gpu:gpu_job:info{{{JOB}}}))",
                   f"max by (instance, device, port) (gpu_host_infiniband_utilization_ratio * on (instance) group_left () group by (instance) (gpu:gpu_job:info{{{JOB}}}))"],
                  12, 19, unit="percentunit", legend=["{{instance}} {{interface}}", "{{instance}} {{device}} port {{port}}"],
                  description="The busier direction of each NIC and InfiniBand port on the nodes the job runs on: collectives crossing a saturated link make every rank wait."),
            panel("Step time of each rank", "timeseries",
                  [f"gpu_process_step_seconds * on (instance, gpu, uuid) group_left (job_name) gpu:gpu_job:info{{{JOB}}}",
                   f"gpu_process_step_best_seconds * on (instance, gpu, uuid) group_left (job_name) gpu:gpu_job:info{{{JOB}}}"],
                  0, 27, unit="s", legend=["{{instance}} GPU {{gpu}} pid {{pid}}", "{{instance}} GPU {{gpu}} pid {{pid}} best"],
                  description="Each rank's training step, timed from outside the job by the cadence of its CUDA and NCCL calls (needs the CUDA probes). Ranks step together: the whole job slows when one rank does, and the straggler score says which."),
            panel("Behind its own best pace", "timeseries", [f"gpu_straggler_score_ratio{{against=\"own_best\"}} * on (instance, gpu, uuid) group_left (job_name) gpu:gpu_job:info{{{JOB}}}"],
                  12, 27, unit="percentunit", legend=["{{instance}} GPU {{gpu}}"],
                  description="1 - best step / current step of each rank's process: how much slower the job steps than it has."),
        ],
    ),
}


def main():
    check = len(sys.argv) > 1 and sys.argv[1] == "--check"
    stale = []
    for name, board in DASHBOARDS.items():
        text = json.dumps(board, indent=2, ensure_ascii=False) + "\n"
        path = f"dashboards/{name}"
        if check:
            with open(path) as f:
                if f.read() != text:
                    stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        sys.exit(f"out of date (run scripts/build_dashboards.py): {', '.join(stale)}")
    print(("checked " if check else "wrote ") + ", ".join(DASHBOARDS))


if __name__ == "__main__":
    main()
