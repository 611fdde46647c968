#!/usr/bin/env python3
"""Checks deploy/alertmanager/alertmanager.yml with Alertmanager's own amtool: the file is
valid (`amtool check-config`), and every alert of deploy/rules routes to the receiver its
severity calls for (`amtool config routes test --verify.receivers`), so that a new alert or
severity cannot fall through to the default route unnoticed. Inhibition needs a running
Alertmanager: the end-to-end test covers it.

Usage: scripts/check_alertmanager.py
"""
import glob
import subprocess
import sys

import yaml

CONFIG = "deploy/alertmanager/alertmanager.yml"
RECEIVER_OF = {"critical": "gpu-oncall", "warning": "gpu-team", "info": "gpu-digest"}


def amtool(*args):
    return subprocess.run(["amtool", *args], capture_output=True, text=True)


def main():
    problems = []
    check = amtool("check-config", CONFIG)
    if check.returncode != 0:
        problems.append(f"amtool check-config: {check.stdout}{check.stderr}")
    alerts = []
    for path in sorted(glob.glob("deploy/rules/*.yml")):
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                alerts.extend(r for r in group["rules"] if "alert" in r)
    for alert in alerts:
        severity = alert.get("labels", {}).get("severity")
        receiver = RECEIVER_OF.get(severity)
        if receiver is None:
            problems.append(f"{alert['alert']}: severity {severity!r} has no receiver")
            continue
        routed = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                        f"--verify.receivers={receiver}", f"alertname={alert['alert']}",
                        f"severity={severity}", "node=gpu-node-1", "namespace=ml")
        if routed.returncode != 0:
            problems.append(f"{alert['alert']} ({severity}) routed to {routed.stdout.strip()}, expected {receiver}")
    if problems:
        sys.exit("\n".join(problems))
    print(f"{CONFIG} is valid; all {len(alerts)} alerts route by severity ({', '.join(f'{s} -> {r}' for s, r in RECEIVER_OF.items())})")


if __name__ == "__main__":
    main()
