#!/usr/bin/env python3
"""No file imports a file that imports it back, in any crate of the workspace.

A module's file may use what its parent module (`mod.rs`, or `x.rs` for `x/`)
declares, and a parent may re-export its children: that is the facade a
directory is. Any other circle of files (a imports b, b imports a, or a
longer ring) is a circle a newcomer cannot read top-down, and fails CI
(`cargo xtask test` runs this; issue 32 found three).

Edges come from `use crate::...`, `use super::...` and `crate::...` paths in
code, each resolved to the longest module path that is a file.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["analyzer", "probe", "inproc", "recording", "fixtures", "xtask"]


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def files(src):
    out = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs") and "tests" not in name.split("."):
                path = os.path.join(dirpath, name)
                out.setdefault(module_of(src, path), path)
    return out


USE = re.compile(r"\buse\s+((?:crate|super)(?:::\w+)*)(?:::\{([^;]*)\})?")
INLINE = re.compile(r"\b((?:crate|super)(?:::\w+)+)")


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def targets(module, text, modules):
    found = set()
    paths = []
    for m in USE.finditer(text):
        base, group = m.group(1), m.group(2)
        if group:
            for item in re.split(r",(?![^{]*\})", group):
                item = item.strip().split(" as ")[0].split("::{")[0]
                if item:
                    paths.append(base + "::" + item)
        else:
            paths.append(base)
    paths += [m.group(1) for m in INLINE.finditer(text)]
    for p in paths:
        parts = p.split("::")
        if parts[0] == "crate":
            resolved = list(parts[1:])
        else:
            here = list(module)
            while parts and parts[0] == "super":
                here = here[:-1]
                parts = parts[1:]
            resolved = here + parts
        # The longest prefix that is a module of this crate.
        for n in range(len(resolved), -1, -1):
            key = tuple(resolved[:n])
            if key in modules:
                if key != module:
                    found.add(key)
                break
    return found


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    circles = []
    for crate in CRATES:
        src = os.path.join(ROOT, crate, "src")
        if not os.path.isdir(src):
            continue
        modules = files(src)
        graph = {}
        for module, path in modules.items():
            text = strip_comments(open(path, encoding="utf-8").read())
            edges = targets(module, text, modules)
            # A parent declaring or re-exporting its own descendants is the facade.
            graph[module] = {t for t in edges if t[: len(module)] != module}
        for comp in sccs(graph):
            if len(comp) > 1:
                names = sorted(os.path.relpath(modules[m], ROOT) for m in comp)
                circles.append(names)
    for names in circles:
        print("import circle: " + " <-> ".join(names))
    if circles:
        print(f"{len(circles)} import circle(s): each file above imports another that imports it back")
        sys.exit(1)
    print("no import circles")


if __name__ == "__main__":
    main()
