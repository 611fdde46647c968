#!/usr/bin/env python3
"""Builds the key reference of docs/configuration.md from config.example.yaml (every key with its
default and the comment above it), between the markers in that file. `--check` fails when the
committed reference is out of date (scripts/check_docs.py runs it so)."""
import re
import sys

BEGIN, END = "<!-- keys: built by scripts/build_config_reference.py -->", "<!-- end of keys -->"


def rows(path="config.example.yaml"):
    """(section, dotted key, default, comment) for every key of the example."""
    out, comment, stack = [], [], []
    for line in open(path):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("# ").rstrip())
            continue
        match = re.match(r"([A-Za-z_]+):\s*(.*)$", stripped)
        if not match or stripped.startswith("- "):
            continue
        key, value = match.groups()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        if value and not value.startswith("#"):
            section = stack[0][1] if stack else "top level"
            out.append((section, dotted, value.split(" #")[0].strip(), " ".join(comment)))
        else:
            stack.append((indent, key))
        comment = []
    return out


def reference():
    sections = {}
    for sect, key, default, comment in rows():
        sections.setdefault(sect, []).append(f"| `{key}` | `{default}` | {comment.replace('|', '/')} |")
    text = []
    for sect, table in sections.items():
        text += ["", f"### `{sect}`" if sect != "top level" else "### Top level", "", "| key | default | meaning |", "|---|---|---|", *table]
    return "\n".join(text).strip() + "\n"


def main():
    path = "docs/configuration.md"
    doc = open(path).read()
    begin, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    built = doc[:begin] + "\n" + reference() + doc[end:]
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        if built != doc:
            sys.exit(f"{path} is out of date: run scripts/build_config_reference.py")
        return
    open(path, "w").write(built)


if __name__ == "__main__":
    main()
