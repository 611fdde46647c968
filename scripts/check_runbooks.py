#!/usr/bin/env python3
"""Checks that every alert has severity, summary, description and a runbook_url whose anchor
is a section of docs/runbooks.md. Usage: scripts/check_runbooks.py RULE_FILE..."""
import re
import sys

import yaml


def anchors(path):
    with open(path) as f:
        return {re.sub(r"[^a-z0-9-]", "", line[3:].strip().lower().replace(" ", "-")) for line in f if line.startswith("## ")}


def main():
    known = anchors("docs/runbooks.md")
    problems = []
    alerts = 0
    for path in sys.argv[1:]:
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                for rule in group["rules"]:
                    if "alert" not in rule:
                        continue
                    alerts += 1
                    name = rule["alert"]
                    if rule.get("labels", {}).get("severity") not in {"info", "warning", "critical"}:
                        problems.append(f"{name}: severity missing or unknown")
                    notes = rule.get("annotations", {})
                    for key in ("summary", "description", "runbook_url"):
                        if not notes.get(key):
                            problems.append(f"{name}: no {key}")
                    anchor = notes.get("runbook_url", "").partition("#")[2]
                    if not notes.get("runbook_url", "").startswith("docs/runbooks.md#") or anchor not in known:
                        problems.append(f"{name}: runbook_url {notes.get('runbook_url')!r} is not a section of docs/runbooks.md")
    if problems:
        sys.exit("\n".join(problems))
    print(f"{alerts} alerts: severity, summary, description and runbook sections present")


if __name__ == "__main__":
    main()
