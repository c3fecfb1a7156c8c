"""The API pages' docstrings render as written: numpydoc sections hold what they should,
and the public classes write their mathematics with ``:math:``.

Two mistakes the rendered site showed (issue 64):

* a paragraph left under ``Parameters`` after the last parameter is read by numpydoc as one
  more parameter, and renders as a bold term broken over several lines (``MarginalEP``'s
  "The potential is EP's approximation ..."): every name in a Parameters, Other Parameters
  or Attributes section must be a name list (``a``, ``a, b``, ``**kwargs``);
* mathematics written as plain text (``Phi((b_{k+1} - f)/sigma)``) where ``:math:`` would
  render it: in the public classes' docstrings (the API page of each class listed in
  ``docs/api.rst``, with the members that page shows), text outside code, ``:math:`` and
  ``.. math::`` blocks may not hold TeX (``\\Phi``, ``b_{k+1}``, ``^{-1}``) nor a plain-text
  formula such as ``p(y | f) =``.
"""

import importlib
import inspect
import re
from pathlib import Path

import pytest
from numpydoc.docscrape import NumpyDocString

ROOT = Path(__file__).resolve().parents[1]
NAME_LIST = re.compile(r"^\*{0,2}[A-Za-z_]\w*(\s*,\s*\*{0,2}[A-Za-z_]\w*)*$")
# TeX commands, braced sub/superscripts and transposes, and plain-text densities.
PLAIN_MATH = re.compile(r"\\[A-Za-z]+|\w_\{|\^\{|\w\^T\b|\bp\([\w*]+ ?(=[^)]*)?\|[^)]*\) ?=|\bPhi\(")


def api_objects():
    """(dotted name, object) for every name in docs/api.rst (the pages _generate writes)."""
    names = re.findall(r"^   ([A-Za-z_][\w.]*)$", (ROOT / "docs" / "api.rst").read_text(), flags=re.M)
    out = []
    for name in names:
        module, _, attr = f"pymc_gpc.{name}".rpartition(".")
        out.append((f"pymc_gpc.{name}", getattr(importlib.import_module(module), attr)))
    return out


def documented(name, obj):
    """(name, docstring) of ``obj`` and, for a class, of the public members its page shows."""
    out = [(name, inspect.getdoc(obj) or "")]
    if isinstance(obj, type):
        for attr, member in vars(obj).items():
            if attr.startswith("_"):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if (inspect.isfunction(member) or isinstance(member, property)) and member.__doc__:
                out.append((f"{name}.{attr}", inspect.getdoc(member)))
    return out


def bad_parameter_names(doc):
    parsed = NumpyDocString(doc)
    return [p.name for section in ("Parameters", "Other Parameters", "Attributes")
            for p in parsed[section] if not NAME_LIST.match(p.name.strip())]


def plain_math(doc):
    """Snippets of ``doc`` that look like mathematics written as plain text."""
    doc = doc.split("\nExamples\n--------\n")[0]
    doc = re.sub(r"^( *)\.\. math::\n(\n|\1 +.*\n)*", "", doc + "\n", flags=re.M)  # display maths
    doc = re.sub(r":math:`[^`]*`|``[^`]*``|`[^`]*`", "", doc)  # inline maths, code, references
    return [doc[max(0, m.start() - 25):m.end() + 25].replace("\n", " ") for m in PLAIN_MATH.finditer(doc)]


def test_the_checks_catch_the_docstrings_issue_64_found():
    old_ep = ("Summary.\n\nParameters\n----------\njitter : added to K.\n\n"
              "The potential is EP's approximation of the log marginal likelihood (Rasmussen &\n"
              "Williams eq. 3.65), with the gradient at the\n"
              "fixed point, dlog Z / dK = (b b^T - (K + S~^-1)^-1) / 2.\n")
    bad = bad_parameter_names(old_ep)  # each line of the paragraph read as one more parameter
    assert len(bad) == 3 and bad[0].startswith("The potential is EP's approximation")
    assert bad_parameter_names("S.\n\nParameters\n----------\na, b : int\n**kwargs : x\n") == []
    assert plain_math(r"p(y = k | f) = \Phi((b_{k+1} - f)/\sigma), b_0 = -inf")
    assert plain_math("p(y | f) = Phi(y f) (Tan eq. 5).")
    assert not plain_math(r"Probit, :math:`p(y \mid f) = \Phi(y f)`, ``x_{k}``." "\n\n.. math::\n\n    \\Phi(f)\n\nok")


@pytest.mark.parametrize("name, obj", api_objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_parameter_sections_hold_only_parameters(name, obj):
    bad = {n: names for n, doc in documented(name, obj) if (names := bad_parameter_names(doc))}
    assert not bad, f"paragraphs read as parameters (move them to Notes or the summary): {bad}"


@pytest.mark.parametrize("name, obj", [(n, o) for n, o in api_objects() if isinstance(o, type)],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_public_classes_write_mathematics_with_math_role(name, obj):
    bad = {n: hits for n, doc in documented(name, obj) if (hits := plain_math(doc))}
    assert not bad, f"mathematics as plain text (use :math:): {bad}"
