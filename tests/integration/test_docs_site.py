"""The built HTML site works offline and reads well in a real browser.

One HTML build (a few minutes: the notebooks are rendered from their stored outputs) into a
temporary folder, then

* without a browser: no page loads a script, style sheet or font from another host (MathJax
  is served from ``_static/mathjax``, ``sphinx-mathjax-offline``), so formulas render
  offline;
* with headless Chromium (``scripts/check_site.py``): on the index, the user guide and the
  API pages, at 1,400 px and at a phone's 390 px, no horizontal overflow, no cut-off
  formula, table or "On this page" entry, every formula rendered by MathJax, every internal
  link and anchor resolving, no request leaving the machine.

Skipped where the docs extra is not installed (``pip install -e ".[docs]"``), and the
browser check where no Chromium can be started (Playwright's browser download needs its
CDN: ``apt-get install chromium`` gives one Playwright can drive).
"""

import importlib.util
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import check_site  # noqa: E402  (scripts/check_site.py)

DOCS_TOOLS = ("sphinx", "myst_nb", "numpydoc", "pydata_sphinx_theme", "sphinx_design", "sphinx-mathjax-offline")
MISSING = [m for m in DOCS_TOOLS if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"the docs extra is not installed (missing: {', '.join(MISSING)})")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    # -n (nitpicky) makes an unresolved Python reference a warning (conf.py's
    # nitpick_ignore_regex lists what cannot resolve without intersphinx); -W makes every
    # warning fail the build. Generated sources go to the git-ignored docs/examples,
    # docs/benchmarks and docs/generated, as every build does.
    cmd = [sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    return out, proc


@pytest.fixture(scope="module")
def site(built):
    out, proc = built
    assert proc.returncode == 0, "the Sphinx build failed or warned:\n" + proc.stdout[-4000:] + proc.stderr[-8000:]
    return out / "html"


def test_sphinx_build_has_no_warnings(built):
    out, proc = built
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    for page in ("index", "api", "user_guide/binary", "user_guide/multiclass", "benchmarks/sampling",
                 "examples/pima_ep_nuts", "design", "generated/pymc_gpc.MarginalEP"):
        assert (out / "doctrees" / f"{page}.doctree").exists(), page


class _Loads(HTMLParser):
    """What a page makes the browser fetch: scripts, style sheets, icons, images."""

    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "img") and a.get("src"):
            self.urls.append(a["src"])
        elif tag == "link" and a.get("href") and set((a.get("rel") or "").split()) & {"stylesheet", "preload", "icon"}:
            self.urls.append(a["href"])


def remote_loads(html):
    parser = _Loads()
    parser.feed(html)
    return [u for u in parser.urls if re.match(r"(https?:)?//", u)]


def test_remote_loads_are_found():
    page = ('<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'
            '<script src="_static/mathjax/tex-chtml.js"></script><link rel="stylesheet" href="//x.org/a.css">'
            '<a href="https://pymc.io">PyMC</a>')
    assert remote_loads(page) == ["https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js", "//x.org/a.css"]


def test_broken_links_are_found(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "index.html").write_text('<h2 id="top">x</h2>')
    (tmp_path / "guide" / "a.html").write_text('<p id="here">a</p>')
    page = "guide/a.html"
    assert check_site.broken_link(tmp_path, page, "../index.html?v=1#top") is None
    assert check_site.broken_link(tmp_path, page, "#here") is None
    assert check_site.broken_link(tmp_path, page, "https://example.org/missing") is None  # not internal
    assert "no anchor #gone" in check_site.broken_link(tmp_path, page, "../index.html#gone")
    assert "no file" in check_site.broken_link(tmp_path, page, "b.html")


def test_site_loads_nothing_from_other_hosts(site):
    pages = sorted(site.rglob("*.html"))
    remote = {p.relative_to(site).as_posix(): r for p in pages if (r := remote_loads(p.read_text()))}
    assert not remote, remote
    ordinal = (site / "user_guide" / "ordinal.html").read_text()
    assert re.search(r'<script[^>]+src="\.\./_static/mathjax/tex-chtml\.js"', ordinal)
    assert (site / "_static" / "mathjax" / "tex-chtml.js").stat().st_size > 100_000
    assert list((site / "_static" / "mathjax" / "output" / "chtml" / "fonts").rglob("*.woff"))


def test_site_in_headless_chromium(site):
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright is not installed (pip install -e '.[docs]')")
    pages = check_site.pages_to_check(site)
    assert "index.html" in pages and "user_guide/ordinal.html" in pages and "generated/pymc_gpc.MarginalEP.html" in pages
    try:  # one Chromium start: where none can start, the check is skipped
        problems = check_site.check_site(site, pages, log=lambda *_: None)
    except check_site.BrowserUnavailable as err:
        pytest.skip(str(err))
    assert not problems, "\n".join(problems[:40])
