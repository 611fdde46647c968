#!/usr/bin/env python3
"""Checks the Helm chart with real Helm (helm-python-sdk embeds it): lint, offline render with
default and changed values, Kubernetes schemas of the rendered objects, values.schema.json
rejecting bad values, the rendered PrometheusRule equal to deploy/rules, and the rendered
exporter config accepted by the exporter itself.

Usage: scripts/check_helm.py EXPORTER_BINARY
"""
import glob
import os
import subprocess
import sys
import tempfile

import helm_python as helm
import yaml

CHART = "helm/gpu-bottleneck-exporter"
CORE_KINDS = {"ServiceAccount", "ConfigMap", "DaemonSet", "Service"}


def objects(chart, values=None):
    rendered = chart.render(values or {}, name="gbe", namespace="gpu-monitoring")
    found = []
    for text in rendered.values():
        found.extend(d for d in yaml.safe_load_all(text) if d)
    return found


def by_kind(found, kind):
    return [o for o in found if o["kind"] == kind]


def main():
    binary = sys.argv[1]
    problems = []
    lint = helm.lint(CHART)
    if lint["errors"] or any(m["severity"] >= 3 for m in lint["messages"]):
        problems.append(f"helm lint: {lint}")
    chart = helm.Chart.load(CHART)
    found = objects(chart)
    kinds = sorted(o["kind"] for o in found)
    expected = ["ConfigMap", "ConfigMap", "DaemonSet", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"]
    if kinds != expected:
        problems.append(f"default render has {kinds}, expected {expected}")

    with tempfile.TemporaryDirectory() as work:
        paths = []
        for i, o in enumerate(o for o in found if o["kind"] in CORE_KINDS):
            path = os.path.join(work, f"{i}-{o['kind']}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(o, f)
            paths.append(path)
        result = subprocess.run(["kubernetes-validate", "--strict", "--quiet", *paths], capture_output=True, text=True)
        if result.returncode != 0:
            problems.append(f"kubernetes-validate: {result.stdout}{result.stderr}")
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
    rendered_groups = by_kind(found, "PrometheusRule")[0]["spec"]["groups"]
    if rendered_groups != groups:
        problems.append("the chart's PrometheusRule differs from deploy/rules")

    changed = objects(chart, {"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True}, "rules": {"enabled": False},
                              "dashboards": {"enabled": False}, "extraLabels": {"team": "ml-platform"}, "nodeSelector": {"pool": "gpu"}})
    changed_kinds = sorted(o["kind"] for o in changed)
    if changed_kinds != ["ConfigMap", "DaemonSet", "PodMonitor", "Service", "ServiceAccount"]:
        problems.append(f"toggles not honoured: {changed_kinds}")
    daemonset = by_kind(changed, "DaemonSet")[0]
    if daemonset["metadata"]["labels"].get("team") != "ml-platform" or daemonset["spec"]["template"]["spec"].get("nodeSelector") != {"pool": "gpu"}:
        problems.append("extraLabels or nodeSelector not applied to the DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    if not (pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"] and container["securityContext"]["capabilities"]["drop"] == ["ALL"]):
        problems.append("least-privilege security context lost")

    for bad in ({"service": {"port": "http"}}, {"serviceMonitor": {"interval": "often"}}, {"unknownKey": 1}, {"image": {"pullPolicy": "Sometimes"}}):
        try:
            chart.validate_schema(bad)
            problems.append(f"values.schema.json accepted {bad}")
        except helm.HelmValuesError:
            pass

    if problems:
        sys.exit("\n".join(problems))
    print(f"chart lints, renders {len(found)} objects that pass their schemas, honours its toggles and rejects bad values")


if __name__ == "__main__":
    main()
