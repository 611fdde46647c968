#!/usr/bin/env python3
"""The crate's modules import one way: no two modules (siblings under one parent, at any
depth) import each other through any path, the top-level modules import only those before
them in the data flow, and no file grows past its size (src/analysis/ 400 lines, elsewhere
600: a longer file usually holds two concerns). Run from the repository root."""
import os
import re
import sys

# The data flow, first to last: a top-level module may import only those before it.
LAYERS = ["config", "snapshot", "source", "analysis", "exposition", "report", "sampler", "web",
          "daemon", "diagnose", "top"]
LIMITS = [("src/analysis/", 400), ("src/", 600)]


def module_of(path):
    """src/analysis/kinds/data_io.rs -> ("analysis", "kinds", "data_io"); mod.rs is its folder."""
    parts = path[len("src/"):-len(".rs")].split("/")
    if parts[-1] == "mod" or parts == ["lib"]:
        parts = parts[:-1]
    return tuple(parts)


def strip_noise(text):
    """The code without comments and string literals (a path named in prose is no import)."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def expand(tree):
    """The full paths of a `use` tree: `a::{b, c::{d, self}}` -> a::b, a::c::d, a::c."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        return [tree.split(" as ")[0].strip()]
    prefix, body = tree[:brace].rstrip(":").strip(), tree[brace + 1:tree.rindex("}")]
    members, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            members.append(body[start:i])
            start = i + 1
    members.append(body[start:])
    paths = []
    for member in filter(str.strip, members):
        for sub in expand(member):
            paths.append(prefix if sub == "self" else f"{prefix}::{sub}")
    return paths


def references(module, text):
    """The absolute paths (tuples below the crate root) a module's code names."""
    code = strip_noise(text)
    paths = [p for tree in re.findall(r"\buse\s+([^;]+);", code) for p in expand(tree)]
    paths += re.findall(r"\b(?:crate|super|self)(?:::\w+)+", code)
    found = []
    for path in paths:
        parts = path.split("::")
        base = list(module)
        if parts[0] == "crate":
            base, parts = [], parts[1:]
        elif parts[0] in ("super", "self"):
            while parts and parts[0] in ("super", "self"):
                if parts.pop(0) == "super":
                    base = base[:-1]
        else:
            continue  # another crate
        found.append(tuple(base + parts))
    return found


def main():
    files = [os.path.join(d, f) for d, _, fs in os.walk("src") for f in fs if f.endswith(".rs")]
    modules = {module_of(f): f for f in files}
    edges = set()
    problems = []
    for module, path in sorted(modules.items()):
        text = open(path).read()
        lines = text.count("\n")
        limit = next(n for prefix, n in LIMITS if path.startswith(prefix))
        if lines > limit:
            problems.append(f"{path}: {lines} lines, past {limit}: split it by concern")
        for target in references(module, text):
            # The longest prefix that is a module of this crate.
            while target and target not in modules:
                target = target[:-1]
            if not target or target == module:
                continue
            # Below their common parent, the edge joins two of its children.
            common = 0
            while common < min(len(module), len(target)) and module[common] == target[common]:
                common += 1
            if common == len(target) or common == len(module):
                continue  # a module and its own ancestor or descendant
            edges.add((module[:common + 1], target[:common + 1]))
    for a, b in sorted(edges):
        if (b, a) in edges and a < b:
            problems.append(f"import cycle: {'::'.join(a)} <-> {'::'.join(b)}")
        if len(a) == 1 and a[0] in LAYERS and b[0] in LAYERS and LAYERS.index(b[0]) > LAYERS.index(a[0]):
            problems.append(f"{a[0]} imports {b[0]}, which comes after it in the data flow")
    # Longer cycles among siblings.
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start and len(trail) > 2:
                    return trail
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + [nxt]))
        return None

    reported = set()
    for node in sorted(graph):
        trail = cycle_from(node)
        if trail and frozenset(trail) not in reported:
            reported.add(frozenset(trail))
            problems.append("import cycle: " + " -> ".join("::".join(m) for m in trail + [node]))
    if problems:
        sys.exit("\n".join(problems))
    print(f"{len(modules)} modules, {len(edges)} imports between siblings: no cycle, the data flow one way, every file within its size")


if __name__ == "__main__":
    main()
