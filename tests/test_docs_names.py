"""Every ``pymc_gpc`` name that README.md and the docs write down resolves.

Sphinx's nitpicky build (``-n``, tests/integration/test_docs.py) checks the names written as
cross-references; it does not see a name in prose written as plain code (```...```) or in a
code block, which is how the user guide names most things. This test reads README.md and
the docs' own sources (Markdown, reStructuredText, Python; not the pages generated at build
time) and resolves each

* dotted name ``pymc_gpc.a.b.c``: the longest importable module prefix, then ``getattr``
  for the rest (``pymc_gpc.ops.rewrites.sampling_tolerance``, ``pymc_gpc.sample``);
* ``from pymc_gpc.x import a, b``: module ``pymc_gpc.x`` and its attributes ``a``, ``b``.

A name that does not resolve is listed with its file and line.
"""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The docs' sources; docs/generated, docs/examples/*.ipynb and docs/benchmarks/<area>.md are
# written by the build from the API listing, notebooks/ and benchmarks/results/.
GENERATED = ("docs/generated/", "docs/_build/", "docs/jupyter_execute/")
DOTTED = re.compile(r"(?<![\w.])pymc_gpc(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"^\s*from\s+(pymc_gpc(?:\.\w+)*)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:#.*)?$", re.M)


INCLUDE = re.compile(r"^```\{include\}\s+(\S+)", re.M)


def doc_sources():
    """README.md, the docs' own sources, and the files they ``{include}`` (CONTRIBUTING.md),
    but not CHANGELOG.md, whose released entries name things as they were then."""
    files = [ROOT / "README.md"]
    for path in sorted((ROOT / "docs").rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix in (".md", ".rst", ".py") and not rel.startswith(GENERATED):
            if rel.startswith("docs/benchmarks/") and path.name != "index.md":
                continue  # generated from benchmarks/results
            files.append(path)
            for target in INCLUDE.findall(path.read_text()) if path.suffix == ".md" else ():
                included = (path.parent / target).resolve()
                if included.name != "CHANGELOG.md" and included not in files:
                    files.append(included)
    return files


def resolve(dotted):
    """The object ``dotted`` names, or raise ``LookupError`` saying which part is missing."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            if err.name is None or not ".".join(parts[:cut]).startswith(err.name):
                raise  # a module that exists but fails to import is a real error
            continue
        for i, attr in enumerate(parts[cut:], start=cut):
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                raise LookupError(f"{'.'.join(parts[:i])} has no attribute {attr!r}") from None
        return obj
    raise LookupError(f"no module {parts[0]!r}")


def names_in(text):
    """(line number, dotted name) for every ``pymc_gpc`` name written in ``text``."""
    found = []
    for m in DOTTED.finditer(text):
        found.append((text.count("\n", 0, m.start()) + 1, m.group(0)))
    for m in FROM_IMPORT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for attr in re.split(r"[\s,]+", m.group(2).strip()):
            if attr and attr != "as":
                found.append((line, f"{m.group(1)}.{attr}"))
    return found


def unresolved(files):
    bad = []
    for path in files:
        for line, name in names_in(path.read_text()):
            try:
                resolve(name)
            except LookupError as err:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name} ({err})")
    return bad


def test_the_scan_sees_names_in_prose_code_and_imports():
    text = ("Within `pymc_gpc.ops.marginal.sampling_tolerance()`, see pymc_gpc.sample.\n"
            "```python\nfrom pymc_gpc.datasets import load, load_fgl  # data\nimport pymc_gpc\n```\n")
    assert names_in(text) == [(1, "pymc_gpc.ops.marginal.sampling_tolerance"), (1, "pymc_gpc.sample"),
                              (3, "pymc_gpc.datasets"), (3, "pymc_gpc.datasets.load"),
                              (3, "pymc_gpc.datasets.load_fgl")]


def test_resolve_imports_modules_and_follows_attributes():
    import pymc_gpc
    from pymc_gpc.ops import rewrites

    assert resolve("pymc_gpc.ops.rewrites.sampling_tolerance") is rewrites.sampling_tolerance
    assert resolve("pymc_gpc.MarginalEP") is pymc_gpc.MarginalEP
    with pytest.raises(LookupError, match="has no attribute 'sampling_tolerance'"):
        resolve("pymc_gpc.ops.marginal.sampling_tolerance")  # the name issue 64 found
    with pytest.raises(LookupError, match="has no attribute 'no_such_module'"):
        resolve("pymc_gpc.no_such_module.thing")


def test_the_sources_include_readme_user_guide_and_api():
    rel = {p.relative_to(ROOT).as_posix() for p in doc_sources()}
    assert {"README.md", "docs/api.rst", "docs/user_guide/diagnostics.md", "docs/conf.py", "CONTRIBUTING.md"} <= rel
    assert "CHANGELOG.md" not in rel
    assert not [r for r in rel if r.startswith(GENERATED)]


def test_every_pymc_gpc_name_in_readme_and_docs_resolves():
    files = doc_sources()
    assert sum(len(names_in(p.read_text())) for p in files) > 50  # the scan sees the docs' names
    bad = unresolved(files)
    assert not bad, "names in the docs that do not resolve:\n" + "\n".join(bad)
