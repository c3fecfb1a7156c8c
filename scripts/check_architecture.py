"""Check the package's seams: no import cycle among pymc_gpc's modules, imports only down the
layer table, no reach into another package's private names, the prior structure chosen in
one place and approximations named in one place.

    python scripts/check_architecture.py

Reads the source with ``ast`` (imports nothing from the package). Every ``import`` and
``from ... import`` counts, at module level or inside a function (a deferred import that
closes a cycle is still a cycle of the design). An import of a package's name that is one
of its submodules (``from . import registry``) is an edge to that submodule; the implicit
import of a module's parent package is not counted. Exits 1, listing what it found, on:

* a cycle in the import graph (each strongly connected component is printed);
* a comparison of ``approx`` with ``==`` or ``!=`` outside ``structures/select.py``, the
  one place that chooses the prior structure (``select_structure``);
* a comparison with an approximation's name as a string (``x == "ep"``, ``x != "adf"``,
  ``x in ("laplace", ...)``) outside ``approximations/registry.py``, where the names are
  defined (read from its ``Approximation("name", ...)`` entries): code asks the registry's
  entry (``registry.get(name).has_gradient``, ...) instead. A lookup by name in a table or a
  declared collection (``SOLVERS[name]``, ``"ep" in likelihood.approximations``) is not a
  branch and passes;
* ``from x import _y`` where ``_y`` is a private name (not a module) of a module in another
  package (``pymc_gpc.a.b`` imports ``pymc_gpc.c.d._y``; within one package it is allowed);
* an import that goes up ``LAYERS`` (a module may import its own layer and those below), or
  a module that no layer holds.

``ALLOWED`` lists, with a reason, the violations in modules that other work is changing
now; it is meant to be emptied, not grown (an entry that no longer fires is an error).
"""

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "pymc_gpc"
SELECTOR = pathlib.Path(PACKAGE, "structures", "select.py")
APPROX_BRANCH = re.compile(r"\bapprox\s*(==|!=)")
REGISTRY = pathlib.Path(PACKAGE, "approximations", "registry.py")

# The layers, lowest first: a module may import from its own layer and the ones below
# (DESIGN.md's "Shape of the package"). A name covers the module or package of that name
# (``pymc_gpc``: its ``__init__`` only).
LAYERS = (
    ("foundation", ("pymc_gpc._numba_cache", "pymc_gpc.numerics", "pymc_gpc.validation", "pymc_gpc.progress",
                    "pymc_gpc.contracts")),
    ("kernels", ("pymc_gpc.kernels",)),
    ("likelihoods", ("pymc_gpc.likelihoods",)),
    ("structures", ("pymc_gpc.structures",)),
    ("approximations", ("pymc_gpc.approximations", "pymc_gpc.solvers")),
    # the Ops and each backend's implementation of them, registered from ops/__init__ (as
    # PyTensor's funcify dispatch): one layer
    ("ops", ("pymc_gpc.ops", "pymc_gpc.backends")),
    ("gp", ("pymc_gpc.gp",)),
    ("estimation", ("pymc_gpc.estimation", "pymc_gpc.idata")),
    ("edge", ("pymc_gpc.plots", "pymc_gpc.cli", "pymc_gpc.datasets", "pymc_gpc.sklearn", "pymc_gpc")),
)

# Known violations in modules other work is changing now, (rule, path) -> reason. The lead
# empties this after merging: fix the module, then delete its line.
ALLOWED = {}


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


def approximation_names():
    """The names of the registry's entries: the first argument of each ``Approximation(...)``."""
    path = ROOT / REGISTRY
    if not path.exists():
        return set()
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Approximation" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return names


def _named(node, names):
    """Whether ``node`` is one of ``names`` as a string, or a tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
    return False


def name_comparisons(paths, names):
    """(path, line number, line) of every comparison with an approximation name outside the registry."""
    hits = []
    for path in paths:
        if path.relative_to(ROOT) == REGISTRY:
            continue
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:]):
                equal = isinstance(op, (ast.Eq, ast.NotEq)) and (_named(left, names) or _named(right, names))
                member = isinstance(op, (ast.In, ast.NotIn)) and not isinstance(right, ast.Constant) and _named(right, names)
                if equal or member:
                    hits.append((path.relative_to(ROOT), node.lineno, lines[node.lineno - 1].strip()))
                    break
    return hits


def package_of(name, path):
    """The package a module belongs to (a package's ``__init__``: the package itself)."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def private_imports(known):
    """(path, line number, imported) of ``from x import _y``: ``_y`` a private name of module x
    of another package."""
    hits = []
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(node, name, is_package)
            if target not in known:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if (private and f"{target}.{alias.name}" not in known
                        and package_of(target, known[target]) != package_of(name, path)):
                    hits.append((path.relative_to(ROOT), node.lineno, f"{target}.{alias.name}"))
    return hits


def layer_of(module):
    """The index of the layer holding ``module`` (the longest matching name), or None."""
    best, index = "", None
    for i, (_, names) in enumerate(LAYERS):
        for prefix in names:
            covers = module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
            if covers and len(prefix) > len(best):
                best, index = prefix, i
    return index


def layer_violations(graph, known):
    """(path, message) of each module outside the table and each import up the table."""
    hits = []
    for name in sorted(graph):
        path = known[name].relative_to(ROOT)
        mine = layer_of(name)
        if mine is None:
            hits.append((path, f"{name} is in no layer of LAYERS (scripts/check_architecture.py)"))
            continue
        for target in sorted(graph[name]):
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                hits.append((path, f"{name} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]}), "
                                   "a higher layer"))
    return hits


def main():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    problems, allowed = [], []

    used = set()

    def report(rule, path, message):
        key = (rule, path.as_posix())
        if key in ALLOWED:
            used.add(key)
            allowed.append(message)
        else:
            problems.append(message)

    for component in cycles(graph):
        edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component]
        problems.append("import cycle among " + ", ".join(component) + ":\n    " + "\n    ".join(edges))
    for path, number, line in approx_branches(known.values()):
        problems.append(f"{path}:{number}: a prior-structure branch outside {SELECTOR}: {line}")
    for path, number, line in name_comparisons(known.values(), approximation_names()):
        report("approximation name", path, f"{path}:{number}: an approximation name compared outside {REGISTRY}: {line}")
    for path, number, imported in private_imports(known):
        report("private import", path, f"{path}:{number}: imports {imported}, private to another package")
    for path, message in layer_violations(graph, known):
        report("layer", path, f"{path}: {message}")
    for rule, path in sorted(set(ALLOWED) - used):
        problems.append(f"{path}: ALLOWED lists a violation ({rule}) that is gone: delete its line")
    for problem in problems:
        print(problem)
    if allowed:
        print(f"{len(allowed)} known violation(s) in ALLOWED (to be emptied):")
        for message in allowed:
            print("    " + message)
    if not problems:
        print(f"{len(known)} modules, {sum(map(len, graph.values()))} imports: no cycle; imports follow the "
              f"layers; the prior structure is chosen in {SELECTOR} only and approximations are named in "
              f"{REGISTRY} only")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
