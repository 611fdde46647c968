#!/usr/bin/env python3
"""The README and docs/ hold together: every relative link (and #anchor) in README.md and
docs/*.md resolves, every configuration key src/config/ accepts appears in
docs/configuration.md, that file's key reference is in step with config.example.yaml, and
docs/verdicts.md's "Each kind" section is the doc comment of each file in
src/analysis/kinds/ (one description of each kind, kept by the code). `--write` rewrites
that section."""
import glob
import os
import re
import subprocess
import sys


def anchors(path):
    """The heading anchors of a Markdown file, as GitHub makes them."""
    found = set()
    for line in open(path):
        match = re.match(r"#+\s+(.*)", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower().replace("`", ""))
            found.add(slug.replace(" ", "-"))
    return found


def broken_links(paths):
    broken = []
    for path in paths:
        text = re.sub(r"```.*?```", "", open(path).read(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^(https?|mailto):", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(resolved):
                broken.append(f"{path}: {target} (no {resolved})")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                broken.append(f"{path}: {target} (no heading #{anchor} in {resolved})")
    return broken


def config_keys(paths=("src/config/mod.rs", "src/config/sources.rs", "src/config/analysis.rs")):
    """The field names of every struct the configuration file deserializes into."""
    keys, text = set(), "".join(open(path).read() for path in paths)
    for block in re.findall(r"#\[derive\([^)]*Deserialize[^)]*\)\][^{]*?pub struct \w+ \{(.*?)\n\}", text, flags=re.S):
        keys.update(re.findall(r"^\s*pub (\w+):", block, flags=re.M))
    return keys


KINDS_BEGIN = "<!-- each kind: written by scripts/check_docs.py --write from src/analysis/kinds/*.rs -->"
KINDS_END = "<!-- end of each kind -->"


def kinds_section():
    """Each kind's file doc comment, in Kind::spec's order, as Markdown."""
    spec = open("src/analysis/kinds/mod.rs").read()
    parts = []
    for module in re.findall(r"Kind::\w+ => &(\w+)::SPEC", spec):
        path = f"src/analysis/kinds/{module}.rs"
        lines = [line[3:].strip() if line.startswith("//! ") else "" for line in open(path) if line.startswith("//!")]
        text = "\n".join(lines).strip()
        parts.append(f"{text}\n\n(`{path}`)")
    return "\n\n".join(parts)


def kinds_in_step(write):
    path = "docs/verdicts.md"
    doc = open(path).read()
    if KINDS_BEGIN not in doc or KINDS_END not in doc:
        return [f"{path}: no '{KINDS_BEGIN}' ... '{KINDS_END}' section"]
    head, rest = doc.split(KINDS_BEGIN, 1)
    current, tail = rest.split(KINDS_END, 1)
    wanted = f"\n{kinds_section()}\n"
    if current == wanted:
        return []
    if write:
        open(path, "w").write(head + KINDS_BEGIN + wanted + KINDS_END + tail)
        return []
    return [f"{path}: the kinds section is not the kinds' doc comments (run scripts/check_docs.py --write)"]


def main():
    problems = kinds_in_step("--write" in sys.argv[1:])
    problems += broken_links(["README.md", *sorted(glob.glob("docs/*.md"))])
    reference = open("docs/configuration.md").read()
    documented = {part for key in re.findall(r"`([\w.]+)`", reference) for part in key.split(".")}
    problems += [f"config key {k} (src/config/) missing from docs/configuration.md" for k in sorted(config_keys() - documented)]
    build = subprocess.run([sys.executable, "scripts/build_config_reference.py", "--check"], capture_output=True, text=True)
    if build.returncode:
        problems.append(build.stderr.strip())
    if problems:
        sys.exit("\n".join(problems))
    print(f"every link in README.md and docs/ resolves; {len(config_keys())} config keys documented")


if __name__ == "__main__":
    main()
