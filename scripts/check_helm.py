#!/usr/bin/env python3
"""Checks the Helm chart with real Helm (helm-python-sdk embeds Helm v4) and the deploy/
manifests:

- strict lint; offline render of the default values and of every ci/*-values.yaml;
- every rendered object and every file in deploy/kubernetes against the Kubernetes schemas
  (kubernetes-validate --strict) or, for ServiceMonitor, PodMonitor and PrometheusRule, the
  shapes the Prometheus Operator's CRDs require;
- values.schema.json rejecting bad values; the rendered exporter config accepted by the
  exporter itself; the rendered PrometheusRule equal to deploy/rules;
- the rendered DaemonSet matching deploy/kubernetes/daemonset.yaml in every field that
  matters (privileges, host access, scheduling, probes, ports, environment).

Usage: scripts/check_helm.py EXPORTER_BINARY
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

import helm_python as helm
import yaml

CHART = "helm/gpu-bottleneck-exporter"
CORE_KINDS = {"ServiceAccount", "ConfigMap", "DaemonSet", "Service"}
DURATION = re.compile(r"^[0-9]+(ms|s|m|h)$")


def objects(chart, values=None):
    rendered = chart.render(values or {}, name="gbe", namespace="gpu-monitoring")
    found = []
    for text in rendered.values():
        found.extend(d for d in yaml.safe_load_all(text) if d)
    return found


def monitoring_shape(o):
    """The fields the monitoring.coreos.com/v1 CRDs require, with their types."""
    problems = []
    kind, spec, where = o["kind"], o.get("spec", {}), f"{o['kind']} {o['metadata'].get('name')}"
    if o.get("apiVersion") != "monitoring.coreos.com/v1":
        problems.append(f"{where}: apiVersion {o.get('apiVersion')}")
    if kind in ("ServiceMonitor", "PodMonitor"):
        if not isinstance(spec.get("selector", {}).get("matchLabels"), dict):
            problems.append(f"{where}: spec.selector.matchLabels missing")
        endpoints = spec.get("endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints")
        if not isinstance(endpoints, list) or not endpoints:
            problems.append(f"{where}: no endpoints")
        for e in endpoints or []:
            if not isinstance(e.get("port"), str):
                problems.append(f"{where}: endpoint port must be a port name")
            for key in ("interval", "scrapeTimeout"):
                if key in e and not DURATION.match(str(e[key])):
                    problems.append(f"{where}: {key} {e[key]!r} is not a duration")
            for r in e.get("relabelings", []):
                if not isinstance(r.get("sourceLabels", []), list) or "targetLabel" not in r:
                    problems.append(f"{where}: malformed relabeling {r}")
    elif kind == "PrometheusRule":
        for group in spec.get("groups", []):
            if not group.get("name") or not group.get("rules"):
                problems.append(f"{where}: group without name or rules")
            for rule in group.get("rules", []):
                if not isinstance(rule.get("expr"), str) or ("record" in rule) == ("alert" in rule):
                    problems.append(f"{where}: malformed rule {rule.get('record') or rule.get('alert')}")
                if "for" in rule and not DURATION.match(str(rule["for"])):
                    problems.append(f"{where}: for {rule['for']!r}")
    return problems


def validate(found, work, label):
    problems = []
    paths = []
    for i, o in enumerate(found):
        if o["kind"] in CORE_KINDS:
            path = os.path.join(work, f"{label}-{i}-{o['kind']}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(o, f)
            paths.append(path)
        else:
            problems.extend(f"{label}: {p}" for p in monitoring_shape(o))
    result = subprocess.run(["kubernetes-validate", "--strict", "--quiet", *paths], capture_output=True, text=True)
    if result.returncode != 0:
        problems.append(f"{label}: kubernetes-validate: {result.stdout}{result.stderr}")
    return problems


def pod_spec_essentials(daemonset):
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    return {
        "hostPID": pod.get("hostPID"),
        "runtimeClassName": pod.get("runtimeClassName"),
        "priorityClassName": pod.get("priorityClassName"),
        "automountServiceAccountToken": pod.get("automountServiceAccountToken"),
        "tolerations": pod.get("tolerations"),
        "affinity": pod.get("affinity"),
        "podSecurityContext": pod.get("securityContext"),
        "securityContext": container.get("securityContext"),
        "resources": container.get("resources"),
        "ports": container.get("ports"),
        "readinessProbe": container.get("readinessProbe"),
        "livenessProbe": container.get("livenessProbe"),
        "env": container.get("env"),
        "hostPaths": sorted((v["hostPath"]["path"], v["hostPath"].get("type")) for v in pod["volumes"] if "hostPath" in v),
        "readOnlyMounts": sorted((m["mountPath"], m.get("readOnly")) for m in container["volumeMounts"] if m["mountPath"].startswith(("/host", "/var/lib/kubelet"))),
    }


def main():
    binary = sys.argv[1]
    problems = []
    lint = helm.lint(CHART, strict=True)
    if lint["errors"] or any(m["severity"] >= 2 for m in lint["messages"]):
        problems.append(f"helm lint --strict: {lint}")
    chart = helm.Chart.load(CHART)
    found = objects(chart)
    kinds = sorted(o["kind"] for o in found)
    expected = ["ConfigMap", "ConfigMap", "DaemonSet", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"]
    if kinds != expected:
        problems.append(f"default render has {kinds}, expected {expected}")

    with tempfile.TemporaryDirectory() as work:
        problems.extend(validate(found, work, "defaults"))
        variants = sorted(glob.glob(f"{CHART}/ci/*-values.yaml"))
        for path in variants:
            with open(path) as f:
                values = yaml.safe_load(f)
            chart.validate_schema(values)
            problems.extend(validate(objects(chart, values), work, os.path.basename(path)))
        deploy = []
        for path in sorted(glob.glob("deploy/kubernetes/*.yaml")):
            if path.endswith("kustomization.yaml"):
                continue
            with open(path) as f:
                deploy.extend(d for d in yaml.safe_load_all(f) if d)
        problems.extend(validate(deploy, work, "deploy"))

        config = next(o for o in found if o["kind"] == "ConfigMap" and "config.yaml" in o["data"])["data"]["config.yaml"]
        config_path = os.path.join(work, "config.yaml")
        with open(config_path, "w") as f:
            f.write(config)
        run = subprocess.run([binary, "diagnose", "--config", config_path, "--duration", "50ms", "--json"], capture_output=True, text=True)
        if run.returncode not in (0, 3):
            problems.append(f"the exporter refused the chart's config ({run.returncode}): {run.stderr}")

    groups = []
    for path in sorted(glob.glob("deploy/rules/*.yml")):
        with open(path) as f:
            groups.extend(yaml.safe_load(f)["groups"])
    if next(o for o in found if o["kind"] == "PrometheusRule")["spec"]["groups"] != groups:
        problems.append("the chart's PrometheusRule differs from deploy/rules")

    rendered = pod_spec_essentials(next(o for o in found if o["kind"] == "DaemonSet"))
    with open("deploy/kubernetes/daemonset.yaml") as f:
        manifest = pod_spec_essentials(yaml.safe_load(f))
    for field, value in manifest.items():
        if rendered[field] != value:
            problems.append(f"DaemonSet {field} differs: chart {rendered[field]!r} vs deploy {value!r}")

    changed = objects(chart, {"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True}, "rules": {"enabled": False},
                              "dashboards": {"enabled": False}, "extraLabels": {"team": "ml-platform"}, "nodeSelector": {"pool": "gpu"}})
    if sorted(o["kind"] for o in changed) != ["ConfigMap", "DaemonSet", "PodMonitor", "Service", "ServiceAccount"]:
        problems.append(f"toggles not honoured: {sorted(o['kind'] for o in changed)}")
    daemonset = next(o for o in changed if o["kind"] == "DaemonSet")
    if daemonset["metadata"]["labels"].get("team") != "ml-platform" or daemonset["spec"]["template"]["spec"].get("nodeSelector") != {"pool": "gpu"}:
        problems.append("extraLabels or nodeSelector not applied to the DaemonSet")

    with open(f"{CHART}/ci/tls-values.yaml") as f:
        tls = objects(chart, yaml.safe_load(f))
    pod = next(o for o in tls if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    monitor = next(o for o in tls if o["kind"] == "ServiceMonitor")["spec"]["endpoints"][0]
    if ("--web.config.file=/etc/gpu-bottleneck-exporter/web/web.yml" not in container["args"]
            or container["readinessProbe"]["httpGet"].get("scheme") != "HTTPS"
            or container["livenessProbe"]["httpGet"].get("scheme") != "HTTPS"
            or not any(v.get("secret", {}).get("secretName") == "gpu-bottleneck-exporter-web" for v in pod["volumes"])
            or monitor.get("scheme") != "https" or "basicAuth" not in monitor or "tlsConfig" not in monitor
            or container["securityContext"] != next(o for o in found if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["securityContext"]):
        problems.append("web.configSecret/scheme not applied as expected (args, probes, Secret volume, monitor, unchanged securityContext)")

    # CAP_SYS_PTRACE (the stacks) and CAP_BPF + CAP_PERFMON (the CUDA probes) are on by default,
    # in the chart and in deploy/, and are the only capabilities added; `ptrace: false` with
    # `cudaProbes: false` and the deploy/kubernetes/restricted overlay drop every one, and each
    # toggle alone drops its own. CAP_SYS_ADMIN (NCCL's RAS inside a job's network namespace)
    # is added only with `ncclRas: true`.
    def capabilities(daemonset):
        return daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]

    default_caps = capabilities(next(o for o in found if o["kind"] == "DaemonSet"))
    def caps_with(values):
        return capabilities(next(o for o in objects(chart, values) if o["kind"] == "DaemonSet"))

    restricted_caps = caps_with({"ptrace": False, "cudaProbes": False})
    if (default_caps != {"drop": ["ALL"], "add": ["SYS_PTRACE", "BPF", "PERFMON"]}
            or restricted_caps != {"drop": ["ALL"]}
            or caps_with({"ptrace": False}) != {"drop": ["ALL"], "add": ["BPF", "PERFMON"]}
            or caps_with({"cudaProbes": False}) != {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
            or caps_with({"ncclRas": True}) != {"drop": ["ALL"], "add": ["SYS_PTRACE", "BPF", "PERFMON", "SYS_ADMIN"]}):
        problems.append(f"capabilities: default {default_caps}, with ptrace and cudaProbes false {restricted_caps}")
    with open("deploy/kubernetes/restricted/kustomization.yaml") as f:
        overlay = yaml.safe_load(f)
    with open("deploy/kubernetes/daemonset.yaml") as f:
        patched = yaml.safe_load(f)
    if capabilities(patched) != default_caps:
        problems.append(f"deploy/kubernetes gives {capabilities(patched)}, the chart {default_caps}")
    for patch in overlay["patches"]:
        for op in yaml.safe_load(patch["patch"]):
            *parents, leaf = [int(k) if k.isdigit() else k for k in op["path"].strip("/").split("/")]
            node = patched
            for key in parents:
                node = node[key]
            if op["op"] == "remove":
                del node[leaf]
            else:
                node[leaf] = op["value"]
    if overlay["resources"] != [".."] or capabilities(patched) != restricted_caps:
        problems.append(f"deploy/kubernetes/restricted gives {capabilities(patched)}, the chart's ptrace: false {restricted_caps}")

    for bad in ({"service": {"port": "http"}}, {"ptrace": "yes"}, {"web": {"scheme": "tls"}}, {"serviceMonitor": {"interval": "often"}}, {"unknownKey": 1}, {"image": {"pullPolicy": "Sometimes"}}):
        try:
            chart.validate_schema(bad)
            problems.append(f"values.schema.json accepted {bad}")
        except helm.HelmValuesError:
            pass

    if problems:
        sys.exit("\n".join(problems))
    print(f"chart lints strictly; defaults and {len(variants)} ci variants render objects that pass the Kubernetes schemas and CRD shapes, "
          f"as do deploy/'s {len(deploy)} objects; the DaemonSets agree; toggles, SYS_PTRACE, BPF and PERFMON by default and the restricted variants honoured; bad values rejected")


if __name__ == "__main__":
    main()
