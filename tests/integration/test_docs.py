"""The documentation builds with warnings as errors, and the README stays short and clean.

The build is the check of the issue that asked for the site: every page parses, every
cross-reference between pages resolves, every API page's docstring renders (Sphinx's dummy
builder: everything but writing the HTML). It takes about half a minute (the notebooks are rendered from their stored outputs, not executed), and
is skipped only where Sphinx is not installed (``pip install -e ".[docs]"``;
``scripts/setup.sh`` installs it).
"""

import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS_TOOLS = ("sphinx", "myst_nb", "numpydoc", "pydata_sphinx_theme", "sphinx_design", "sphinx-mathjax-offline")
MISSING = [m for m in DOCS_TOOLS if importlib.util.find_spec(m) is None]


# The Sphinx build under -n -W (nitpicky, warnings as errors) is the `site` fixture of
# test_docs_site.py: one HTML build serves it and the browser check.


def test_every_public_name_has_an_api_page():
    import pymc_gpc

    api = (ROOT / "docs" / "api.rst").read_text()
    listed = set(re.findall(r"^   ([\w.]+)$", api, flags=re.M))
    names = [n for n in pymc_gpc.__all__ if not inspect.ismodule(getattr(pymc_gpc, n))]
    names += [f"likelihoods.{n}" for n in pymc_gpc.likelihoods.__all__  # once: top level or here
              if not n.isupper() and n not in pymc_gpc.__all__]
    assert not [n for n in names if n not in listed]


def test_readme_is_short_and_carries_no_run_log():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date in the README"
    assert not re.search(r"\b[0-9a-f]{7,40}\b", text), "a commit hash in the README"
    assert "fresh clone" not in text.lower() and not re.search(r"\bissue \d+", text, flags=re.I)
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)", text):  # relative links point to files
        assert (ROOT / target).exists(), target


# The API pages' examples that run in a second or two (no model compilation); the others
# build PyMC models or sample and are marked ``# doctest: +SKIP`` or left to the README test.
QUICK_EXAMPLES = [
    "pymc_gpc.approximations.ep.ep", "pymc_gpc.approximations.laplace.laplace",
    "pymc_gpc.approximations.meanfield.meanfield", "pymc_gpc.approximations.adf.adf",
    "pymc_gpc.approximations.softmax_laplace.softmax_laplace",
    "pymc_gpc.approximations.multinomial_probit_ep.multinomial_probit_ep",
    "pymc_gpc.structures.dense.DensePrior", "pymc_gpc.structures.fitc.FITCPrior",
    "pymc_gpc.likelihoods.base.Likelihood", "pymc_gpc.likelihoods.binary.Probit",
    "pymc_gpc.likelihoods.binary.ProbitBias", "pymc_gpc.likelihoods.binary.ProbitNoise",
    "pymc_gpc.likelihoods.binary.StepLabelNoise", "pymc_gpc.likelihoods.binary.Logistic",
    "pymc_gpc.likelihoods.multiclass.Softmax", "pymc_gpc.likelihoods.multiclass.MultinomialProbit",
    "pymc_gpc.likelihoods.multiclass.MulticlassLikelihood", "pymc_gpc.kernels.MixedARD",
    "pymc_gpc.datasets.load", "pymc_gpc.datasets.load_fgl", "pymc_gpc.datasets.load_tissue_gene_expression",
    "pymc_gpc.datasets.load_diamonds", "pymc_gpc.datasets.load_penguins", "pymc_gpc.datasets.ordinal.load_ordinal",
    "pymc_gpc.datasets.ordinal.ordinal_split", "pymc_gpc.datasets.ordinal.equal_frequency_bins",
    "pymc_gpc.datasets.ordinal.equal_length_bins",
]


@pytest.mark.parametrize("name", QUICK_EXAMPLES)
def test_docstring_examples_run(name):
    import doctest
    import importlib

    module, _, attr = name.rpartition(".")
    obj = getattr(importlib.import_module(module), attr)
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    assert tests and tests[0].examples, f"{name} has no Examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
