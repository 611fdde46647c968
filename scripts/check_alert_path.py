#!/usr/bin/env python3
"""The alert path end to end, on loopback: four demo exporters (`--demo-node 0..3`, cases
rotating every 40 s), kube-state-metrics-shaped series in this script (`kube_pod_labels` of a
JobSet whose four ranks run on the four nodes, the rank on node 3 lagging: its GPU is the one
whose case is a sync stall), a real Prometheus (Debian `prometheus`) evaluating a copy of deploy/rules,
a real Alertmanager (Debian `prometheus-alertmanager`) with a copy of
deploy/alertmanager/alertmanager.yml, and a webhook receiver in this script. The copies only
shorten time (`for:` to 3 s, range windows to 20 s, Alertmanager's group timers to 1 s) and
point the receivers at the webhook; routing, grouping and inhibition are the shipped ones.

Asserts that GPUJobStraggler reaches `gpu-team` for node 3's rank only, named with its job, pod
and own verdict; that GPUDataStarvation reaches the `gpu-team` receiver with node, namespace, pod,
verdict and the summary, description and runbook annotations, grouped by alertname, node and
namespace; that GPUIdle and the idle GPUs' GPULowUtilization never arrive while
GPUAllocatedIdle fires for the same GPU (and that Alertmanager holds them as inhibited, so the
check is not vacuous); and that a resolved notification follows when the case rotates away.
Every process started is stopped.

Usage: scripts/check_alert_path.py EXPORTER_BINARY
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import yaml

import kube_state_metrics
from loopback import free_port, get_json, short_rules, start_prometheus

ROTATION_S = 40
NODES = 4
ROLES = 12  # GPUs of a demo node, one case each; the idle case is the last


class Webhook(http.server.BaseHTTPRequestHandler):
    received = []
    lock = threading.Lock()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Webhook.lock:
            Webhook.received.append((self.path.strip("/"), time.monotonic(), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def alerts(name=None, status=None, before=float("inf")):
    """Every alert of every notification received before `before` (monotonic):
    (receiver, notification, alert)."""
    with Webhook.lock:
        found = []
        for receiver, at, body in Webhook.received:
            for alert in body["alerts"]:
                if at < before and (name is None or alert["labels"]["alertname"] == name) and (status is None or alert["status"] == status):
                    found.append((receiver, body, alert))
        return found


def wait_for(what, condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.5)
    sys.exit(f"timed out after {seconds} s waiting for {what}; notifications: {json.dumps([(r, a['labels'].get('alertname'), a['status']) for r, _, a in alerts()])}")


def uuid(node, gpu):
    return f"GPU-de300000-{node:04x}-4000-8000-{gpu:012}"


# The JobSet "llm-fsdp" of namespace vision: one rank on each node, on the GPU whose first case
# is kernel efficiency (busy 96 %) on nodes 0-2 and a sync stall (busy 30 %) on node 3. Node n's
# GPU i starts with case (i + n) mod 12; the vision pods are train-<i> (-n<node> past node 0).
JOB_GPUS = {0: 4, 1: 3, 2: 2, 3: 0}
LAGGING_NODE = 3


def job_pod(node, gpu):
    return f"train-{gpu}" + (f"-n{node}" if node else "")


def main():
    exporter = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp()
    processes = []
    webhook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    threading.Thread(target=webhook.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{webhook.server_address[1]}"
    state_metrics = kube_state_metrics.serve(
        [("vision", job_pod(node, gpu), {"jobset.sigs.k8s.io/jobset-name": "llm-fsdp"}) for node, gpu in JOB_GPUS.items()])
    try:
        rules = short_rules(work)
        # Alertmanager: the shipped routes and inhibitions, timers shortened, receivers here.
        with open("deploy/alertmanager/alertmanager.yml") as f:
            manager = yaml.safe_load(f)
        for route in [manager["route"], *manager["route"].get("routes", [])]:
            route.update(group_wait="1s", group_interval="1s", repeat_interval="1h")
        for receiver in manager["receivers"]:
            for hook_config in receiver["webhook_configs"]:
                hook_config["url"] = f"{hook}/{receiver['name']}"
        with open(os.path.join(work, "alertmanager.yml"), "w") as f:
            yaml.safe_dump(manager, f)

        exporter_ports = [free_port() for _ in range(NODES)]
        env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
        for node, port in enumerate(exporter_ports):
            processes.append(subprocess.Popen(
                [exporter, "serve", "--demo", "--demo-node", str(node), "--demo-rotation", f"{ROTATION_S}s",
                 "--listen", f"127.0.0.1:{port}", "--log-level", "error"], env=env))
        started = time.monotonic()
        am_port = free_port()
        processes.append(subprocess.Popen(
            ["prometheus-alertmanager", f"--config.file={work}/alertmanager.yml", f"--storage.path={work}/am",
             f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address=", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"node": f"gpu-demo-{node}"}}
                   for node, port in enumerate(exporter_ports)]
        scrape_configs = [
            {"job_name": "gpu-bottleneck-exporter", "static_configs": targets},
            kube_state_metrics.scrape_config(state_metrics),
        ]
        prometheus, _ = start_prometheus(work, scrape_configs, [rules], am_port)
        processes.append(prometheus)

        # Node 0's GPU 0 starts with the data_io case.
        starving = uuid(0, 0)

        def starvation_of_gpu0():
            return [x for x in alerts("GPUDataStarvation", "firing")
                    if x[2]["labels"].get("uuid") == starving]
        receiver, notification, alert = wait_for("GPUDataStarvation on node 0's GPU 0", starvation_of_gpu0, ROTATION_S)[0]
        arrived = time.monotonic() - started
        labels, annotations = alert["labels"], alert["annotations"]
        problems = []
        if receiver != "gpu-team":
            problems.append(f"GPUDataStarvation went to {receiver}")
        for key, value in {"node": "gpu-demo-0", "namespace": "vision", "pod": "train-0", "verdict": "data_io", "severity": "warning"}.items():
            if labels.get(key) != value:
                problems.append(f"label {key}={labels.get(key)!r}, expected {value!r}")
        for key in ("summary", "description", "runbook_url"):
            if not annotations.get(key):
                problems.append(f"annotation {key} missing")
        if "data_io" not in annotations.get("description", ""):
            problems.append(f"description does not quote the verdict: {annotations.get('description')}")
        if set(notification["groupLabels"]) != {"alertname", "node", "namespace"}:
            problems.append(f"grouped by {notification['groupLabels']}")

        # The job's rank on node 3 lags the other three: a straggler there, and only there.
        def straggler():
            return [x for x in alerts("GPUJobStraggler", "firing") if x[2]["labels"].get("job_name") == "llm-fsdp"]
        # The alert carries the straggler's verdict as it stands: until the exporter's latches
        # settle (min_duration) that is `undetermined`, then the stall's own.
        wait_for("GPUJobStraggler for the llm-fsdp job, with its verdict",
                 lambda: [x for x in straggler() if x[2]["labels"].get("verdict") == "sync_stall"], ROTATION_S)
        for receiver, _, a in straggler():
            expected = {"node": f"gpu-demo-{LAGGING_NODE}", "uuid": uuid(LAGGING_NODE, JOB_GPUS[LAGGING_NODE]),
                        "pod": job_pod(LAGGING_NODE, JOB_GPUS[LAGGING_NODE]), "namespace": "vision",
                        "severity": "warning"}
            for key, value in expected.items():
                if a["labels"].get(key) != value:
                    problems.append(f"GPUJobStraggler label {key}={a['labels'].get(key)!r}, expected {value!r}")
            if receiver != "gpu-team":
                problems.append(f"GPUJobStraggler went to {receiver}")
        stragglers = sorted({a["labels"].get("node", "?") for _, _, a in straggler()})

        # The idle GPU of every node is allocated to a pod: GPUAllocatedIdle fires and holds
        # back GPUIdle and GPULowUtilization for that GPU.
        idle = {uuid(node, (ROLES - 1 - node) % ROLES) for node in range(NODES)}
        wait_for("GPUAllocatedIdle for every node's idle GPU",
                 lambda: idle <= {a["labels"].get("uuid") for _, _, a in alerts("GPUAllocatedIdle", "firing")}, 30)

        def inhibited():
            held = get_json(f"http://127.0.0.1:{am_port}/api/v2/alerts?inhibited=true&active=false&silenced=false")
            return [a for a in held if a["status"]["inhibitedBy"]]
        held = wait_for("inhibited alerts in Alertmanager", lambda: [a for a in inhibited() if a["labels"]["alertname"] == "GPUIdle"], 30)
        held_names = sorted({a["labels"]["alertname"] for a in inhibited()})

        # The case rotates away from GPU 0 at 40 s: its alert resolves.
        wait_for("the resolved GPUDataStarvation of node 0's GPU 0",
                 lambda: [x for x in alerts("GPUDataStarvation", "resolved") if x[2]["labels"].get("uuid") == starving],
                 ROTATION_S + 60 - (time.monotonic() - started))
        resolved = time.monotonic() - started

        # Until the rotation: after it the idle GPUs take other cases, GPUAllocatedIdle resolves
        # at once and GPULowUtilization, over its window, may rightly follow.
        rotation = started + ROTATION_S
        for _, _, a in alerts("GPUIdle", before=rotation):
            if a["labels"].get("uuid") in idle:
                problems.append(f"GPUIdle of allocated-idle GPU {a['labels']['uuid']} was notified (should be inhibited)")
        for _, _, a in alerts("GPULowUtilization", before=rotation):
            if a["labels"].get("uuid") in idle:
                problems.append(f"GPULowUtilization of allocated-idle GPU {a['labels']['uuid']} was notified (should be inhibited)")
        if problems:
            sys.exit("\n".join(problems))
        receivers = sorted({(r, a["labels"]["alertname"]) for r, _, a in alerts()})
        print(f"GPUJobStraggler notified for {', '.join(stragglers)} only (job llm-fsdp over {NODES} nodes); "
              f"GPUDataStarvation notified {arrived:.0f} s after start with node, namespace, pod, verdict and its annotations; "
              f"resolved at {resolved:.0f} s after its case rotated away; held back as inhibited: {', '.join(held_names)}; "
              f"notified: {', '.join(f'{n} -> {r}' for r, n in receivers)}")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        webhook.shutdown()
        state_metrics.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
