#!/usr/bin/env python3
"""Lists import loops between the files of each crate: a.rs names `crate::b` (or `super::b`)
while b.rs names `crate::a`, or a longer cycle. Items re-exported by lib.rs count as their own
module's; comments and `#[cfg(test)] mod tests` are ignored. Exits 1 when a loop is found.

Usage: scripts/import-loops.py [CRATE_DIR ...]   (default: every crate under crates/)
"""

import pathlib
import re
import sys

PATH = r"((?:\w+::)*\w+)"


def modules(src):
    """Module path ("a::b") -> file, for every .rs file under src."""
    found = {}
    for f in src.rglob("*.rs"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("lib", "main", "mod"):
            parts = parts[:-1]
        found["::".join(parts)] = f
    return found


def code(f):
    """The file's text without comments and without its unit tests."""
    text = f.read_text()
    tests = text.find("#[cfg(test)]\nmod tests")
    text = text if tests < 0 else text[:tests]
    return re.sub(r"//.*", "", text)


def reexports(src):
    """Name -> module for lib.rs's `pub use module::{...}` lines."""
    lib = src / "lib.rs"
    names = {}
    if not lib.exists():
        return names
    text = lib.read_text()
    for module, body in re.findall(r"pub use (\w+)::\{([^}]*)\};", text):
        for name in re.split(r"[,\s]+", body):
            if name:
                names[name] = module
    for module, name in re.findall(r"pub use (\w+)::(\w+);", text):
        names[name] = module
    return names


def edges(src):
    mods = modules(src)
    reexported = reexports(src)
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        text = code(f)
        here = m.split("::") if m else []
        # A path followed by `::{…}` names a module: keep the `::` so it is resolved as one.
        paths = [m.group(1) + ("::" if text.startswith("::", m.end()) else "")
                 for m in re.finditer(r"crate::" + PATH, text)]
        for group in re.findall(r"crate::\{([^}]*)\}", text):
            paths += [p for p in re.split(r"[,\s]+", group) if p]
        for rest in re.findall(r"(?<![\w:])super::" + PATH, text):
            paths.append("::".join(here[:-1] + [rest]))  # `super` of a::b (a/b.rs, a/b/mod.rs) is a
        for path in paths:
            parts = [p for p in path.split("::") if p]
            module_path = path.endswith("::")
            # `crate::a::b` goes through the module `a` (the type namespace) even when lib.rs
            # also re-exports a function named `a` (the value namespace): journal's `format`.
            is_module_path = (len(parts) > 1 or module_path) and parts[0] in mods
            if parts[0] in reexported and not is_module_path:
                parts = [reexported[parts[0]]] + parts
            for n in range(len(parts), 0, -1):
                target = "::".join(parts[:n])
                if target in mods:
                    if target not in (m, ""):
                        graph[m].add(target)
                    break
    return graph


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    crates = [pathlib.Path(a) for a in sys.argv[1:]] or sorted((root / "crates").iterdir())
    loops = 0
    for crate in crates:
        graph = edges(crate / "src")
        pairs = sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph[b])
        found = cycles(graph)
        loops += len(found)
        for a, b in pairs:
            print(f"{crate.name}: {a} <-> {b}")
        for component in found:
            print(f"{crate.name}: cycle: {' '.join(component)}")
    if loops:
        print(f"import loops: {loops} found (listed above): each file of a loop names another "
              "(`crate::x`, `super::x`) that names it back, directly or through the others; "
              "move the code so one of them no longer does (docs/DESIGN.md, \"Layers and crates\")",
              file=sys.stderr)
    sys.exit(1 if loops else 0)


if __name__ == "__main__":
    main()
