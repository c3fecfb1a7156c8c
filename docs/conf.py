"""Sphinx configuration for the pymc-gpc documentation.

Built with ``sphinx-build -W docs docs/_build/html`` (``bash scripts/docs.sh``). Two kinds
of pages are generated at build time, into folders that git ignores:

* ``examples/*.ipynb``: copies of ``notebooks/*.ipynb``, rendered from their stored
  outputs (myst-nb with execution off; ``tests/integration/test_notebook.py`` executes them);
* ``benchmarks/<area>.md``: one page per area, from ``benchmarks/results/*.md``.
"""

import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))
sys.path.insert(0, str(ROOT))

import _generate  # noqa: E402  (docs/_generate.py)

import pymc_gpc  # noqa: E402

project = "pymc-gpc"
author = "pymc-gpc contributors"
copyright = "pymc-gpc contributors"
release = version = pymc_gpc.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 served from _static/mathjax: formulas render offline
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",
    "sphinx_design",
]

# -- sources --------------------------------------------------------------------------
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "_templates"]

# -- MyST / notebooks ------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# The notebooks are rendered from their stored outputs: executing them here would make
# the docs build take the tens of minutes of sampling they contain; tests/integration/test_notebook.py
# runs them (with few draws) so their code cannot rot.
nb_execution_mode = "off"
nb_merge_streams = True
nb_output_stderr = "remove"  # the stored runs' warnings (progress-bar widgets, paths) are noise here

# -- API reference ------------------------------------------------------------------------
autosummary_generate = False  # the pages are written by _generate.api_pages
autosummary_imported_members = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks = set()

# -- HTML ---------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = "pymc-gpc"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
# "On this page" names a class's members without the class ("predict()", not
# "MarginalEP.predict()"): the page's title already says whose they are.
toc_object_entries_show_parents = "hide"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"index": [], "design": [], "changelog": [], "contributing": []}
html_show_sourcelink = False

# No intersphinx: these machines cannot fetch inventories.

# For nitpicky builds (``-n``, as tests/integration/test_docs.py runs): references that cannot resolve
# without intersphinx (PyTensor's and PyMC's names, the inherited Op docstrings' ``Op.*``
# and ``node.*``), and the package's modules, which have no API pages of their own. Any
# other unresolved reference (a misspelt ``pymc_gpc`` function, class, method) is an error.
nitpick_ignore_regex = [
    (r"py:.*", r"(pytensor|pymc)\..*"),
    (r"py:.*", r"(Op|node)\..*"),
    (r"py:mod", r"pymc_gpc(\..*)?"),
]

# Headings inside included results files and notebooks do not always step one level at a
# time; that is their content, not a broken cross-reference.
suppress_warnings = ["myst.header"]


def _setup_generated(app):
    """Copy the notebooks and write the benchmark pages before Sphinx reads sources."""
    examples = DOCS / "examples"
    examples.mkdir(exist_ok=True)
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        target = examples / nb.name
        if not target.exists() or target.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, target)
    _generate.benchmark_pages(ROOT / "benchmarks" / "results", DOCS / "benchmarks")
    _generate.api_pages(DOCS / "api.rst", DOCS / "generated")


_SECTION_RULE = re.compile(r"^\s*-{3,}\s*$")
_ITEM = re.compile(r"^(\s*)(\*{0,2}[A-Za-z_][\w, *]*?) : (.+)$")
_ITEM_SECTIONS = {"Parameters", "Other Parameters", "Attributes", "Returns", "Yields", "Raises", "Warns"}


def _description_in_type_slot(text):
    """Whether ``text`` after ``name :`` is a description rather than a type (the package's
    docstrings often write ``name : what it is.`` on one line)."""
    text = text.strip()
    return len(text) > 40 or text.endswith((".", ";", ":", ",")) or "``" in text


def _split_descriptions(app, what, name, obj, options, lines):
    """Move a description written in numpydoc's type slot to the line below, so that it is
    rendered as a description, not as a bold italic type (runs before numpydoc)."""
    section, out = None, []
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and _SECTION_RULE.match(lines[i + 1]) and line.strip():
            section = line.strip()
        m = _ITEM.match(line) if section in _ITEM_SECTIONS else None
        if m and _description_in_type_slot(m.group(3)):
            indent, names, text = m.groups()
            out += [indent + names, indent + "    " + text]
        else:
            out.append(line)
    lines[:] = out


def setup(app):
    app.connect("builder-inited", _setup_generated)
    app.connect("autodoc-process-docstring", _split_descriptions, priority=100)
