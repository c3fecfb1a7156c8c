"""Check the built documentation site in a real headless browser (Playwright + Chromium).

Usage::

    python scripts/check_site.py [SITE] [--screenshots DIR] [--all] [--only GLOB]

``SITE`` is the built HTML (default ``docs/_build/html``; ``bash scripts/docs.sh`` builds
it). The index, the user-guide pages and the API pages (``--all``: every page) are loaded
from disk, with the network cut off, at a desktop width (1,400 px) and a phone's
(390 px), and the check fails on

* horizontal overflow: the page is wider than the window (``document.scrollWidth``), or,
  at desktop width, a formula, table or "On this page" entry is wider than its box (cut
  off, or hidden behind a scroll bar; the many-column tables of the benchmark and example
  pages, which ``--all`` adds, may scroll);
* a formula MathJax did not render: raw ``\\(`` ``\\[`` ``$$`` left in the visible text
  outside code, a ``.math`` element with no rendered formula in it, a MathJax error;
* an internal link (``href``, ``src``) whose file or ``#anchor`` does not exist;
* a request that leaves the machine (a script, style sheet or font from a CDN: the site
  must render offline) or a JavaScript error.

The browser: Playwright's own Chromium where ``playwright install chromium`` has put one,
else a system Chromium (Debian's ``apt-get install chromium``) through ``executable_path``;
``PYMC_GPC_CHROMIUM`` names another executable. Exit status 0 when every page passes, 1
with the problems listed, 2 when no browser can be started.
"""

import argparse
import fnmatch
import os
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
VIEWPORTS = {"desktop": {"width": 1400, "height": 900}, "phone": {"width": 390, "height": 844}}
# Pages of measurements whose many-column tables scroll in their own box by design (custom.css).
DATA_PAGES = ("benchmarks/", "examples/")
SYSTEM_CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


class BrowserUnavailable(RuntimeError):
    """No Chromium could be started (the reason is the message)."""


def launch(playwright):
    """A headless Chromium: Playwright's own, else a system one; ``BrowserUnavailable`` if none."""
    reasons = []
    explicit = os.environ.get("PYMC_GPC_CHROMIUM")
    candidates = [explicit] if explicit else [None] + [p for c in SYSTEM_CHROMIUM if (p := shutil.which(c))]
    for exe in dict.fromkeys(candidates):  # None: Playwright's own
        try:
            return playwright.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        except Exception as err:  # Playwright raises its own Error for a missing or broken browser
            reasons.append(f"{exe or 'playwright chromium'}: {str(err).splitlines()[0]}")
    raise BrowserUnavailable("no Chromium could be started (" + "; ".join(reasons)
                             + "); install one with `apt-get install chromium` or `playwright install chromium`")


def pages_to_check(site, everything=False):
    """The pages' paths relative to ``site``: index, user guide, API (or every page)."""
    if everything:
        skip = {"genindex.html", "search.html", "py-modindex.html"}
        return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                      if not p.relative_to(site).parts[0].startswith("_") and p.name not in skip)
    pages = ["index.html", "api.html"]
    pages += sorted(p.relative_to(site).as_posix() for p in (site / "user_guide").glob("*.html"))
    pages += sorted(p.relative_to(site).as_posix() for p in (site / "generated").glob("*.html"))
    return [p for p in pages if (site / p).exists()]


class _Anchors(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key == "id" or (key == "name" and tag == "a"):
                self.ids.add(value)


_anchor_cache = {}


def anchors(path):
    """The ids (and ``<a name>``) of the HTML file ``path``."""
    if path not in _anchor_cache:
        parser = _Anchors()
        parser.feed(path.read_text(errors="replace"))
        _anchor_cache[path] = parser.ids
    return _anchor_cache[path]


def broken_link(site, page, url):
    """Why the link ``url`` on ``page`` (both relative to ``site``) does not resolve, or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("", "file") or url.startswith(("mailto:", "javascript:", "data:")):
        return None
    path, fragment = unquote(parts.path), parts.fragment  # a ?v= query names the same file
    if parts.scheme == "file":
        target = Path(path)
    elif path:
        target = (site / page).parent / path
    else:
        target = site / page
    target = target.resolve()
    if target.is_dir():
        target = target / "index.html"
    if not target.exists():
        return f"{url}: no file {target}"
    if fragment and target.suffix == ".html" and unquote(fragment) not in anchors(target):
        return f"{url}: no anchor #{fragment} in {target.name}"
    return None


# Measured in the page once MathJax has finished: overflow, unrendered formulas, links.
_PROBE = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const doc = document.documentElement;
  const wide = (el) => el.scrollWidth > el.clientWidth + 1;
  const describe = (el) => {
    const text = Array.from((el.innerText || el.textContent || '').trim().replace(/\s+/g, ' ')).slice(0, 60).join('');
    return el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
      ? '.' + el.className.trim().split(/\s+/).join('.') : '') + ' "' + text + '"';
  };
  const visible = (el) => el.getClientRects().length > 0;
  // The page wider than the window, or one of the theme's columns wider than itself (the
  // article then scrolls sideways in its own box, which document.scrollWidth does not
  // show): the deepest elements reaching past it say what overflows. Content inside a
  // box that scrolls by design (a table, code, a formula) is that box's business.
  const SCROLLERS = 'table, pre, mjx-container, div.math, div.highlight, div.output, div.cell_output';
  const overflow = [];
  const columns = [[doc, window.innerWidth, 0, 'the page']];
  for (const c of document.querySelectorAll('.bd-article-container, .bd-sidebar-secondary, .bd-header')) {
    if (visible(c) && getComputedStyle(c).overflowX !== 'visible') {
      columns.push([c, c.clientWidth, c.getBoundingClientRect().left + c.clientLeft, c.className.split(' ')[0]]);
    }
  }
  for (const [col, width, left, name] of columns) {
    if (col.scrollWidth <= width + 1) continue;
    const stick = [];
    for (const el of (col === doc ? document.body : col).querySelectorAll('*')) {
      if (!visible(el) || (el.parentElement && el.parentElement.closest(SCROLLERS))) continue;
      const out = (e) => e.getBoundingClientRect().right > left + width + 1;
      if (out(el) && ![...el.children].some(out)) stick.push(describe(el));
      if (stick.length >= 4) break;
    }
    overflow.push(name + ' is ' + col.scrollWidth + ' px wide in ' + Math.round(width) + ' px: ' + stick.join('; '));
  }
  // Formulas, tables and navigation entries wider than their box: scrolled inside it, or
  // cut off by an ancestor that hides what overflows (the "On this page" column).
  const boxes = [];
  const clipper = (el) => {
    const right = el.getBoundingClientRect().right;
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX === 'visible') continue;
      const limit = p.getBoundingClientRect().left + p.clientLeft + p.clientWidth;
      if (right > limit + 1) return p;
    }
    return null;
  };
  for (const el of document.querySelectorAll(
      'div.math, mjx-container[display="true"], .bd-article table, .bd-sidebar-secondary .nav-link, '
      + '.bd-sidebar-primary .nav-link, .bd-article dt, .bd-article div.highlight > pre')) {
    if (!visible(el)) continue;
    if (wide(el) && getComputedStyle(el).overflowX !== 'visible') {
      boxes.push(describe(el) + ' scrolls (' + el.scrollWidth + ' > ' + el.clientWidth + ' px)');
      continue;
    }
    const p = clipper(el);
    if (p) boxes.push(describe(el) + ' cut off by ' + describe(p).slice(0, 60));
  }
  // Visible text outside code: raw TeX delimiters mean a formula was not rendered.
  const clone = document.querySelector('.bd-main') || document.body;
  let text = '';
  const walker = document.createTreeWalker(clone, NodeFilter.SHOW_TEXT, {
    acceptNode: (n) => (n.parentElement.closest('pre, code, script, style, .highlight, mjx-assistive-mml')
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT)});
  while (walker.nextNode()) { if (visible(walker.currentNode.parentElement)) text += walker.currentNode.nodeValue + '\n'; }
  const raw = [];
  for (const delim of ['\\(', '\\[', '$$']) {
    const at = text.indexOf(delim);
    if (at >= 0) raw.push(JSON.stringify(Array.from(text.slice(Math.max(0, at - 20), at + 40)).join('')));
  }
  const unrendered = [...document.querySelectorAll('.math')].filter(
    (el) => !el.querySelector('mjx-container') && el.tagName.toLowerCase() !== 'mjx-container').map(describe);
  const errors = [...document.querySelectorAll('mjx-merror')].map(describe);
  const links = [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href'))
    .concat([...document.querySelectorAll('img[src], script[src]')].map((e) => e.getAttribute('src')))
    .concat([...document.querySelectorAll('link[rel="stylesheet"][href]')].map((e) => e.getAttribute('href')));
  return {overflow, boxes, raw, unrendered, errors,
          links, formulas: document.querySelectorAll('mjx-container').length};
}
"""


class Tab:
    """One browser tab at one viewport, reused for every page (``goto`` only): the network cut
    off for the whole context, the requests that tried to leave the machine and the
    JavaScript errors collected per page. Only the requests to other hosts go through
    Python (``route`` with a pattern that leaves ``file:`` alone): intercepting every file
    the site loads costs a round trip per request, three times the page's own load time."""

    def __init__(self, browser, viewport):
        self.context = browser.new_context(viewport=VIEWPORTS[viewport])
        self.external, self.js_errors = [], []
        self.context.route(_OTHER_HOSTS, self._abort)
        self.tab = self.context.new_page()
        self.tab.on("pageerror", lambda err: self.js_errors.append(str(err).splitlines()[0]))

    def _abort(self, route):
        self.external.append(f"{route.request.resource_type} {route.request.url}")
        route.abort()

    def close(self):
        self.context.close()


# Every URL but a local file's: the requests that leave the machine.
_OTHER_HOSTS = re.compile(r"^(?!file:)")


def load(tab, site, page, viewport, screenshots=None):
    """Load ``page`` in ``tab`` (a ``Tab``); the probe's findings, with the requests that
    tried to leave the machine (``external``) and the JavaScript errors (``js_errors``)."""
    tab.external.clear()
    tab.js_errors.clear()
    tab.tab.goto((site / page).resolve().as_uri(), wait_until="load")
    found = tab.tab.evaluate(_PROBE)
    if screenshots is not None:
        tab.tab.screenshot(path=str(Path(screenshots) / f"{page.replace('/', '__')[:-5]}.{viewport}.png"))
    return dict(found, external=list(dict.fromkeys(tab.external)), js_errors=list(tab.js_errors))


def judge(found, site, page, viewport):
    """(problems, notes) from ``load``'s findings. Notes: code lines wider than their block
    at desktop width (they scroll, as code blocks do; worth shortening, not a failure)."""
    where = f"{page} [{viewport}]"
    problems, notes = [], []
    problems += [f"{where}: horizontal overflow: {o}" for o in found["overflow"]]
    if viewport == "desktop":
        for box in found["boxes"]:
            if box.startswith("pre") or (box.startswith("table") and page.startswith(DATA_PAGES)):
                notes.append(f"{where}: scrolls: {box}")
            else:
                problems.append(f"{where}: cut off or scrolled: {box}")
        problems += [f"{where}: broken link {why}" for why in dict.fromkeys(
            broken_link(site, page, url) for url in found["links"]) if why]
    problems += [f"{where}: raw TeX in the text: {r}" for r in found["raw"]]
    problems += [f"{where}: formula not rendered: {u}" for u in found["unrendered"]]
    problems += [f"{where}: MathJax error: {e}" for e in found["errors"]]
    problems += [f"{where}: request leaving the machine: {e}" for e in found["external"]]
    problems += [f"{where}: JavaScript error: {e}" for e in found["js_errors"]]
    return problems, notes


def check_site(site, pages, screenshots=None, log=print):
    """Every problem found on ``pages`` of ``site`` at both viewports (the notes go to
    ``log``); raises ``BrowserUnavailable`` when no Chromium starts."""
    from playwright.sync_api import sync_playwright

    problems, notes, formulas = [], [], 0
    with sync_playwright() as p:
        browser = launch(p)
        try:
            for name in VIEWPORTS:
                tab = Tab(browser, name)
                for page in pages:
                    found = load(tab, site, page, name, screenshots)
                    page_problems, page_notes = judge(found, site, page, name)
                    problems, notes, formulas = problems + page_problems, notes + page_notes, formulas + found["formulas"]
                tab.close()
        finally:
            browser.close()
    for note in notes:
        log("note: " + note)
    log(f"checked {len(pages)} pages at {', '.join(f'{v['width']} px' for v in VIEWPORTS.values())}: "
        f"{formulas} formulas rendered, {len(problems)} problems, {len(notes)} notes")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("site", nargs="?", default=str(ROOT / "docs" / "_build" / "html"),
                        help="the built HTML site")
    parser.add_argument("--screenshots", metavar="DIR", help="save a screenshot of every page here")
    parser.add_argument("--all", action="store_true", help="every page, not only index, user guide and API")
    parser.add_argument("--only", metavar="GLOB", action="append",
                        help="only the pages matching this pattern (e.g. 'user_guide/*'); repeatable")
    args = parser.parse_args(argv)
    site = Path(args.site).resolve()
    if not (site / "index.html").exists():
        parser.error(f"{site} has no index.html: build the site first (bash scripts/docs.sh)")
    if args.screenshots:
        Path(args.screenshots).mkdir(parents=True, exist_ok=True)
    try:
        pages = pages_to_check(site, args.all or bool(args.only))
        if args.only:
            pages = [p for p in pages if any(fnmatch.fnmatch(p, pattern) for pattern in args.only)]
        problems = check_site(site, pages, args.screenshots)
    except BrowserUnavailable as err:
        print(err, file=sys.stderr)
        return 2
    for problem in problems:
        print(problem.encode("utf-8", "replace").decode("utf-8"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
