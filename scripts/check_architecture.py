"""Check the package's seams: no import cycle among pymc_gpc's modules, and the prior
structure chosen in one place.

    python scripts/check_architecture.py

Reads the source with ``ast`` (imports nothing from the package). Every ``import`` and
``from ... import`` counts, at module level or inside a function (a deferred import that
closes a cycle is still a cycle of the design). An import of a package's name that is one
of its submodules (``from . import registry``) is an edge to that submodule; the implicit
import of a module's parent package is not counted. Exits 1, listing what it found, on:

* a cycle in the import graph (each strongly connected component is printed);
* a comparison of ``approx`` with ``==`` or ``!=`` outside ``structures/select.py``, the
  one place that chooses the prior structure (``select_structure``).
"""

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "pymc_gpc"
SELECTOR = pathlib.Path(PACKAGE, "structures", "select.py")
APPROX_BRANCH = re.compile(r"\bapprox\s*(==|!=)")


def module_name(path):
    """'pymc_gpc.ops.marginal' for pymc_gpc/ops/marginal.py, 'pymc_gpc.ops' for its __init__."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules():
    """{module name: path} of every module of the package."""
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _resolve(node, name, is_package):
    """The absolute module a ``from`` import names (None outside the package)."""
    if node.level == 0:
        return node.module
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name, path, known):
    """The package modules that module ``name`` imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, name, is_package)
            if target is None:
                continue
            subs = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(target)
    return {m for m in found if m in known and m != name}


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), or with a self-loop."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def approx_branches(paths):
    """(path, line number, line) of every ``approx ==`` / ``approx !=`` outside the selector."""
    hits = []
    for path in paths:
        if path.relative_to(ROOT) == SELECTOR:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if APPROX_BRANCH.search(line):
                hits.append((path.relative_to(ROOT), number, line.strip()))
    return hits


def main():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    problems = []
    for component in cycles(graph):
        edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component]
        problems.append("import cycle among " + ", ".join(component) + ":\n    " + "\n    ".join(edges))
    for path, number, line in approx_branches(known.values()):
        problems.append(f"{path}:{number}: a prior-structure branch outside {SELECTOR}: {line}")
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{len(known)} modules, {sum(map(len, graph.values()))} imports: no cycle; "
              f"the prior structure is chosen in {SELECTOR} only")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
