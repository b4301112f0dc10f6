"""The book as a reader's browser shows it: a smoke-profile build, rendered into a temporary
folder and opened page by page in headless Chromium with every non-local request blocked (a copy
of the book read offline).

On every page: no console error and no uncaught script error; no request that had to leave the
book (each one is blocked, so it would show as failed); every formula typeset by the bundled
MathJax (no raw TeX, no MathJax error node); nothing cut off at the right edge on a phone
(390 px: long formulas and wide tables scroll in their own box); no ``mailto:`` or ``file:`` link
and no link to a path outside the book; every internal link and its anchor resolve; every figure has
a number, a caption and alt text; every glued value and table cell reads as a formatted number (no
``nan``, no unformatted long float, no pandas index column); the parameters cells are collapsed;
each chapter offers its executed notebook and its jupytext source for download, and no launch
button while no repository is configured. At 1280 px no scrollbar shows where nothing needs
scrolling: no element of a page's text is wider inside than its box by more than a pixel unless it
is a code block, a table or a display formula (inline formulas included). Every row of every
chapter's claims table is on the findings page with the same verdict and a link to that row, and
the findings page's menus keep one paper's or one verdict's rows. At 1280 px every column of every table is on screen (its header cell inside the box that shows the table), and on a phone (390 px) every verdict of every claims table and check table, labelled; the check tables typeset their formulas; every glossary link of a chapter lands on a term the glossary defines. The built-in search finds a term offline. Screenshots of the home page and of one chapter at 1280 and 390 px are written to
``<build>/screenshots/`` for a person to look at, and checked for what they show (the title and
the first paragraph drawn inside the picture, the navigation shown on a wide screen and folded
away on a phone).

The browser is Debian's ``chromium`` driven by Playwright's Python API (``executable_path``:
nothing is downloaded). Without it the suite skips with the install command, except under CI
(``CI`` set), where a missing browser is a failure: ``.ci/run`` installs it first.
"""

from __future__ import annotations

import html.parser
import importlib.util
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import require_browser

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("book_build", ROOT / "book" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

INSTALL = "apt-get install -y chromium && pip install -r requirements.txt"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTHS = {"wide": (1280, 900), "phone": (390, 844)}

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the pinned requirements install it
    sync_playwright = None

require_browser("browser", "Debian's chromium" if CHROMIUM is None else "playwright" if sync_playwright is None else None,
                INSTALL)

pytestmark = pytest.mark.browser


SITE = "FEDLIB_BOOK_SITE"
"""Set to a rendered book's HTML folder (``book/_build/html``) to check that build instead of a
fresh smoke build: ``make browser-book`` checks the book-profile build this way."""


@pytest.fixture(scope="module")
def site(smoke_out) -> Path:
    """The rendered smoke-profile book (the chapters execute once per session, see conftest), or
    the build that ``FEDLIB_BOOK_SITE`` names."""
    if os.environ.get(SITE):
        given = Path(os.environ[SITE]).resolve()
        if not (given / "intro.html").exists():
            pytest.fail(f"{SITE}={given} holds no rendered book (no intro.html); run make book first", pytrace=False)
        return given
    assert build.build("smoke", None, {}, render=True, force=False, out=smoke_out) == 0
    return smoke_out / "_build" / "html"


def _pages(site: Path, redirects: bool = True) -> list[Path]:
    """The book's HTML pages; ``redirects=False`` leaves out the ones that only redirect (``index.html``)."""
    pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)
    if not redirects:
        pages = [p for p in pages if 'http-equiv="Refresh"' not in p.read_text(encoding="utf-8")[:2000]]
    return pages


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _context(browser, width: str = "wide"):
    w, h = WIDTHS[width]
    ctx = browser.new_context(viewport={"width": w, "height": h})
    # offline: anything that is not a file of the book is refused (and then counts as failed)
    ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    return ctx


def _open(ctx, path: Path, query: str = ""):
    """Open a page; return it with the console errors and failed requests it produced."""
    page = ctx.new_page()
    errors, failed = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.goto(path.as_uri() + query, wait_until="load")
    # the bundled MathJax (a deferred script) typesets after loading: wait for it to finish
    page.evaluate("async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise)"
                  " await MathJax.startup.promise; }")
    return page, errors, failed


def _read(browser, paths: list[Path], width: str, queries: dict[str, str]) -> dict[Path, dict]:
    """Open each page once at ``width`` (one context, as a reader going from page to page) and run
    every query of ``queries`` (read-only scripts: they look, they change nothing) on it:
    ``{path: {query name: its result, "errors": console errors, "failed": requests that failed}}``.
    The checks of one width share these readings, so a page loads (and MathJax typesets it) once
    per width, not once per check."""
    ctx = _context(browser, width)
    out = {}
    try:
        for path in paths:
            page, errors, failed = _open(ctx, path)
            out[path] = {name: page.evaluate(query) for name, query in queries.items()}
            page.close()
            out[path].update(errors=errors, failed=failed)
    finally:
        ctx.close()
    return out


def _pages_and_chapters(site: Path) -> list[Path]:
    """The pages the checks of a width read: every page but the redirects, and every chapter."""
    return sorted(set(_pages(site, redirects=False)) | set((site / "chapters").glob("*.html")))


@pytest.fixture(scope="module")
def wide(site, browser) -> dict[Path, dict]:
    """Every page read once at 1280 px with the queries of the wide checks (:func:`_read`)."""
    return _read(browser, _pages_and_chapters(site), "wide", {
        # sphinx wraps every formula in .math; MathJax puts an mjx-container inside each one it typeset
        "raw": "() => [...document.querySelectorAll('span.math, div.math')]"
               ".filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60))",
        "merror": "() => document.querySelectorAll('mjx-merror').length",
        "n_math": "() => document.querySelectorAll('mjx-container').length",
        "figures": _FIGURES, "glued": _GLUED_AND_TABLES, "overflowing": _OVERFLOWING,
        "hidden_columns": _HIDDEN_COLUMNS, "n_tables": "() => document.querySelectorAll('.bd-article table').length",
        "check_tables": "() => [...document.querySelectorAll('table.check-table')].map(t => "
                        "({math: t.querySelectorAll('mjx-container').length, text: t.innerText}))",
        "glossary_terms": "() => [...document.querySelectorAll('dl.glossary dt[id]')].map(d => d.id)",
        "glossary_links": "() => [...document.querySelectorAll('a[href*=\"glossary.html#\"]')].map(a => a.getAttribute('href'))",
    })


@pytest.fixture(scope="module")
def phone(site, browser) -> dict[Path, dict]:
    """Every page read once at 390 px with the queries of the phone checks (:func:`_read`)."""
    return _read(browser, _pages_and_chapters(site), "phone", {"cut": _CUT_OFF, "verdicts": _VERDICTS_ON_A_PHONE})


def test_every_page_loads_offline_without_errors_and_its_math_is_typeset(site, wide):
    pages = _pages(site, redirects=False)
    assert len(pages) >= len(build.toc_files()), f"missing pages in {site}"
    problems, n_math = [], 0
    for path in pages:
        seen, name = wide[path], path.relative_to(site).as_posix()
        n_math += seen["n_math"]
        problems += [f"{name}: console: {e}" for e in seen["errors"]]
        problems += [f"{name}: request left the book: {u}" for u in seen["failed"]]
        problems += [f"{name}: raw TeX: {t!r}" for t in seen["raw"][:3]]
        if seen["merror"]:
            problems.append(f"{name}: {seen['merror']} MathJax error node(s)")
    assert not problems, "\n".join(problems)
    assert n_math > 100, f"only {n_math} typeset formulas in the whole book: is MathJax loading?"


# elements right of the viewport that the reader cannot scroll to: not inside a box that
# scrolls or clips, not in the theme's off-canvas drawers (the sidebars slide in on a phone)
_CUT_OFF = """() => {
  const W = document.documentElement.clientWidth, out = [];
  const boxed = e => {
    if (e.closest('.bd-sidebar-primary, .bd-sidebar-secondary, mjx-assistive-mml')) return true;
    for (let a = e.parentElement; a && a !== document.documentElement; a = a.parentElement)
      if (getComputedStyle(a).overflowX !== 'visible') return true;
    return false;
  };
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > W + 2 && !boxed(e))
      out.push(`${e.tagName.toLowerCase()}: ${(e.textContent || '').trim().slice(0, 50)}`);
  }
  return out;
}"""


def test_nothing_is_cut_off_at_phone_width(site, phone):
    problems = []
    for path in _pages(site, redirects=False):
        problems += [f"{path.relative_to(site).as_posix()}: {c}" for c in phone[path]["cut"][:3]]
    assert not problems, "\n".join(problems)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href") is not None:
            self.hrefs.append(a["href"])


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_every_link_stays_in_the_book_and_resolves(site):
    parsed = {path: _parse(path) for path in _pages(site)}
    problems = []
    for path, links in parsed.items():
        name = path.relative_to(site).as_posix()
        for href in links.hrefs:
            parts = urlsplit(href)
            if parts.scheme in ("mailto", "file"):
                problems.append(f"{name}: {parts.scheme}: link {href!r}")
                continue
            if parts.scheme or parts.netloc or href.startswith("javascript:"):
                continue  # an external page (a paper, a documentation site) is a plain link, not an asset
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if not target.is_relative_to(site.resolve()):
                problems.append(f"{name}: link outside the book {href!r}")
                continue
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{name}: broken link {href!r}")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{name}: missing anchor {href!r}")
    assert not problems, "\n".join(sorted(set(problems))[:40])


def test_search_finds_a_term_offline(site, browser):
    ctx = _context(browser)
    page, errors, failed = _open(ctx, site / "search.html", "?q=Dirichlet")
    page.wait_for_selector("#search-results li", timeout=20_000)
    hits = page.evaluate("() => document.querySelectorAll('#search-results li').length")
    ctx.close()
    # from file:// the browser refuses the search's fetches of page summaries (its file-origin rule,
    # a console error); the hits come from the bundled index, and nothing may leave the book
    left = [u for u in failed if not u.startswith("file:")]
    assert hits >= 1 and not left, (hits, left)


_SEEN = """() => { const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
    return [r.left, r.top, r.width, r.height]; };
  const side = document.querySelector('.bd-sidebar-primary');
  return {title: box(document.querySelector('article h1')), text: box(document.querySelector('article p')),
          sidebar: box(side), sidebar_visible: !!side && getComputedStyle(side).visibility !== 'hidden'}; }"""


def _ink(image, box) -> float:
    """The share of the pixels of ``box`` (left, top, width, height in CSS pixels, clipped to the
    picture) whose luminance differs from the box's median by more than a quarter: about 0 for an
    empty area, a few to a few tens of percent where text is drawn."""
    h, w = image.shape[:2]
    left, top, width, height = box
    x0, y0, x1, y1 = max(0, int(left)), max(0, int(top)), min(w, int(left + width)), min(h, int(top + height))
    if x1 <= x0 or y1 <= y0:
        return 0.0
    rgb = image[y0:y1, x0:x1, :3].astype(float)
    luminance = rgb @ [0.2126, 0.7152, 0.0722]
    return float((abs(luminance - float(sorted(luminance.ravel())[luminance.size // 2])) > 0.25).mean())


def test_screenshots_show_the_title_the_text_and_the_navigation(site, browser):
    """The screenshots (kept for a person to look at) are checked for what they show: a picture of
    the viewport's size whose title and first paragraph are drawn inside it (text: some dark
    pixels on the background, neither an empty box nor a filled one), with the navigation shown at
    1280 px and folded away at 390 px, where the text keeps the width."""
    from matplotlib.image import imread

    shots = site / "screenshots"
    shots.mkdir(exist_ok=True)
    chapter = site / "chapters" / "setting.html"
    for width, (w, h) in WIDTHS.items():
        ctx = _context(browser, width)
        for path in (site / "intro.html", chapter):
            page, _, _ = _open(ctx, path)
            seen = page.evaluate(_SEEN)
            out = shots / f"{path.stem}-{width}.png"
            page.screenshot(path=str(out), full_page=False)
            page.close()
            image = imread(out)
            where = f"{out.name}"
            assert image.shape[:2] == (h, w), f"{where}: {image.shape[:2]} is not the viewport {(h, w)}"
            assert _ink(image, (0, 0, w, h)) > 0.01, f"{where}: the picture is blank"
            title, text = seen["title"], seen["text"]
            assert title and 0 <= title[0] and title[0] + title[2] <= w + 1 and 0 <= title[1] < h / 2, \
                f"{where}: the title is not in the upper half of the picture: {title}"
            for name, box in (("title", title), ("first paragraph", text)):
                assert 0.02 < _ink(image, box) < 0.6, f"{where}: no text is drawn where the {name} is ({_ink(image, box):.3f})"
            if width == "wide":
                assert seen["sidebar_visible"] and seen["sidebar"][0] >= 0, f"{where}: the navigation is not shown"
                assert _ink(image, seen["sidebar"]) > 0.005, f"{where}: the navigation area is empty"
            else:
                side = seen["sidebar"]
                assert not seen["sidebar_visible"] or side is None or side[0] + side[2] <= 0, \
                    f"{where}: the navigation covers the page on a phone: {side}"
                assert text[2] >= 0.8 * w, f"{where}: the text does not take the phone's width ({text[2]:.0f} of {w} px)"
        ctx.close()


def test_the_picture_check_tells_text_from_an_empty_area():
    import numpy as np

    blank = np.ones((40, 100, 3))
    assert _ink(blank, (0, 0, 100, 40)) == 0.0
    written = blank.copy()
    written[10:30:4, 10:90] = 0.0  # five dark lines, as letters would be
    assert 0.02 < _ink(written, (0, 0, 100, 40)) < 0.6
    assert _ink(written, (200, 0, 50, 40)) == 0.0  # a box outside the picture shows nothing


_FIGURES = """() => [...document.querySelectorAll('article img, main img')]
  .filter(i => !i.closest('.navbar-brand') && !i.classList.contains('toggler'))  // not the module index's +/- icons
  .map(i => { const f = i.closest('figure'); const c = f && f.querySelector('figcaption');
    return {alt: i.getAttribute('alt') || '', src: i.getAttribute('src') || '',
            caption: c ? c.textContent.trim() : '', number: c ? !!c.querySelector('.caption-number') : false}; })"""


def test_every_figure_has_a_number_a_caption_and_alt_text(site, wide):
    problems, n = [], 0
    for path in _pages(site, redirects=False):
        name = path.relative_to(site).as_posix()
        for fig in wide[path]["figures"]:
            n += 1
            src = fig["src"].rsplit("/", 1)[-1]
            if not fig["caption"] or not fig["number"]:
                problems.append(f"{name}: {src}: no numbered caption")
            alt = fig["alt"].strip()
            if len(alt) < 15 or re.fullmatch(r"[0-9a-f]{16,}(\.\w+)?", alt) or alt == src:
                problems.append(f"{name}: {src}: alt text {alt!r} does not describe the figure")
    assert n >= 10 and not problems, f"{n} figures\n" + "\n".join(problems[:30])


# a float nobody formatted (six decimals or more, or a mantissa of four digits and more), an undefined value
_UNFORMATTED = re.compile(r"(?<![\w.])[-+]?\d+\.\d{6,}|\d\.\d{4,}e[-+]?\d+|^\s*(nan|NaN|None|<NA>)\s*$")

_GLUED_AND_TABLES = """() => {
  const visible = e => !e.closest('pre, code, .highlight, details:not([open])');
  return {
    glued: [...document.querySelectorAll('.pasted-text, .pasted-inline')].filter(visible).map(e => e.textContent),
    cells: [...document.querySelectorAll('table td, table th')].filter(visible).map(e => e.textContent),
    index: [...document.querySelectorAll('table th.row_heading, table th.index_name, table th.blank')]
      .filter(visible).length,
  };
}"""


def test_glued_values_and_table_cells_read_as_formatted_numbers(site, wide):
    problems, n_glued = [], 0
    for path in _pages(site, redirects=False):
        name = path.relative_to(site).as_posix()
        found = wide[path]["glued"]
        n_glued += len(found["glued"])
        for kind in ("glued", "cells"):
            for text in found[kind]:
                if _UNFORMATTED.search(text) or (kind == "glued" and re.search(r"\bnan\b", text, re.I)):
                    problems.append(f"{name}: {kind[:-1] if kind == 'cells' else 'glued value'}: {text.strip()[:60]!r}")
        if found["index"]:
            problems.append(f"{name}: {found['index']} pandas index header cell(s): show tables with show_table")
    assert n_glued > 100 and not problems, f"{n_glued} glued values\n" + "\n".join(problems[:30])


def test_setup_cells_are_collapsed_and_chapters_offer_their_sources(site):
    import json

    problems = []
    for path in sorted((site / "chapters").glob("*.html")):
        text = path.read_text(encoding="utf-8")
        name = path.stem
        for tag in ("tag_parameters", "tag_injected-parameters"):
            cells = re.findall(rf'<div class="cell ([^"]*{tag}[^"]*)"', text)
            if len(cells) != 1 or "tag_hide-input" not in cells[0]:
                problems.append(f"{name}: the {tag[4:]} cell is not collapsed ({cells})")
        for suffix in (".ipynb", ".py"):
            if f'href="../_sources/chapters/{name}{suffix}"' not in text:
                problems.append(f"{name}: no download of {name}{suffix}")
        if "launch-buttons" in text or "mybinder" in text or "colab.research" in text:
            problems.append(f"{name}: a launch button although no repository is configured")
        notebook = json.loads((site / "_sources" / "chapters" / f"{name}.ipynb").read_text(encoding="utf-8"))
        injected = ["".join(c["source"]) for c in notebook["cells"]
                    if "injected-parameters" in c.get("metadata", {}).get("tags", ())]
        if any("results_dir" in s for s in injected):
            problems.append(f"{name}: the downloadable notebook carries the build's results_dir")
    assert not problems, "\n".join(problems)


_CLAIMS_TABLE = re.compile(r'<table id="(claims-[0-9a-f]+)" class="claims-table">.*?</table>', re.S)


def _claims_rows(text: str) -> dict[str, str]:
    """Every row of every claims table of a chapter's HTML (fedbook.claims.show): the row's id
    (claim-<key>) -> its verdict (the cell of class claims-verdict)."""
    rows = {}
    for table in _CLAIMS_TABLE.finditer(text):
        for anchor, verdict in re.findall(r'<tr id="(claim-[^"]+)"[^>]*>.*?<td class="claims-verdict"[^>]*>(.*?)</td>',
                                          table.group(0), re.S):
            rows[anchor] = html.unescape(verdict.strip())
    return rows


def test_every_claim_row_of_every_chapter_is_on_the_findings_page_with_its_verdict(site):
    """The findings page reads the build's records; every row of every chapter's claims table
    (controls included) is on it once, with the same verdict, and its link opens that row."""
    findings = (site / "chapters" / "findings.html").read_text(encoding="utf-8")
    listed = {}
    for verdict, chapter, anchor, said in re.findall(
            r'<tr data-paper="[^"]*" data-verdict="([^"]*)"[^>]*><td>[^<]*</td><td><a href="([\w-]+)\.html#([^"]+)"'
            r'.*?</td><td style="[^"]*">(.*?)</td>', findings, re.S):
        assert (chapter, anchor) not in listed, f"{chapter}#{anchor} listed twice"
        said = html.unescape(said.strip())  # the verdict with its kind or reason, as the chapter's table says it
        assert said.split(":")[0] == html.unescape(verdict), (said, verdict)  # the filter reads the verdict itself
        listed[(chapter, anchor)] = said
    in_chapters = {}
    for path in sorted((site / "chapters").glob("*.html")):
        if path.stem != "findings":
            in_chapters.update({(path.stem, a): v for a, v in _claims_rows(path.read_text(encoding="utf-8")).items()})
    assert len(in_chapters) > 20, f"only {len(in_chapters)} claims rows found in the chapters"
    missing = sorted(set(in_chapters) - set(listed))
    extra = sorted(set(listed) - set(in_chapters))
    differ = sorted(k for k in set(in_chapters) & set(listed) if in_chapters[k] != listed[k])
    assert not (missing or extra or differ), (f"not on the findings page: {missing[:5]}; not in a chapter: {extra[:5]}; "
                                              f"verdict differs: {[(k, in_chapters[k], listed[k]) for k in differ[:5]]}")


def test_the_findings_filter_shows_one_papers_rows_then_one_verdicts(site, browser):
    ctx = _context(browser)
    page, errors, _ = _open(ctx, site / "chapters" / "findings.html")
    assert page.is_visible("form.findings-filter"), "the filter menus are hidden although scripts run"
    total = page.locator("table.findings-table tbody tr").count()
    paper = page.locator('select[data-column="paper"] option').nth(1).get_attribute("value")
    page.select_option('select[data-column="paper"]', paper)
    shown = page.evaluate("() => [...document.querySelectorAll('table.findings-table tbody tr')]"
                          ".filter(r => r.offsetParent !== null).map(r => r.dataset.paper)")
    assert shown and set(shown) == {paper} and len(shown) < total, (paper, len(shown), total)
    assert f"{len(shown)} of {total}" in page.inner_text("output.findings-shown")
    page.select_option('select[data-column="paper"]', "")
    verdict = page.locator('select[data-column="verdict"] option').nth(1).get_attribute("value")
    page.select_option('select[data-column="verdict"]', verdict)
    verdicts = page.evaluate("() => [...document.querySelectorAll('table.findings-table tbody tr')]"
                             ".filter(r => r.offsetParent !== null).map(r => r.dataset.verdict)")
    assert verdicts and set(verdicts) == {verdict}
    ctx.close()
    assert not errors, errors


# elements whose content is wider than their box (by more than a pixel) and that are not allowed
# to be: a code block, a table, a display formula may scroll in their own box; anything else that
# overflows draws a needless scrollbar (a scrolling box), cuts its content (a clipping box) or
# spills over its neighbours. MathJax's own glyph boxes inside a formula overlap by design (an
# italic letter's overhang): a formula counts by its outer box (span.math, which clips a little
# outside itself, and the mjx-container where it scrolls or clips)
_OVERFLOWING = """() => {
  const allowed = e => e.closest('pre, div.highlight, table, .cell_output, mjx-container[display="true"], div.math, '
                                 + '.bd-sidebar-primary, .bd-sidebar-secondary, mjx-assistive-mml, .bd-header, .search-button-field');
  const out = [];
  for (const e of document.querySelectorAll('.bd-article *')) {
    if (allowed(e)) continue;
    const s = getComputedStyle(e);
    const glyphs = e.tagName.startsWith('MJX-') && (e.tagName !== 'MJX-CONTAINER' || s.overflowX === 'visible');
    if (glyphs) continue;
    if (s.display === 'inline' || s.display === 'contents' || s.visibility === 'hidden') continue;
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    // a box that clips with a margin (a formula's span.math: overflow-clip-margin) draws that far out
    const margin = s.overflowX === 'clip' ? parseFloat(s.overflowClipMargin) || 0 : 0;
    if (e.scrollWidth > e.clientWidth + margin + 1 && e.clientWidth > 0)
      out.push(`${e.tagName.toLowerCase()}${e.className && typeof e.className === 'string' ? '.' + e.className.split(' ')[0] : ''}`
               + ` (${e.scrollWidth} > ${e.clientWidth} px, overflow ${s.overflowX}): ${(e.textContent || '').trim().slice(0, 50)}`);
  }
  return out;
}"""


def test_no_scrollbar_where_nothing_needs_scrolling(site, wide):
    """At 1280 px no element of a page's text is wider inside than its box (inline formulas
    included: a one-pixel overflow of a scrolling box draws a scrollbar with arrows), except code
    blocks, tables and display formulas, which scroll in their own box when they are wide."""
    problems = []
    for path in _pages(site, redirects=False):
        problems += [f"{path.relative_to(site).as_posix()}: {p}" for p in wide[path]["overflowing"][:3]]
    assert not problems, "\n".join(problems[:40])


# every column of every table on screen at 1280 px: a table fits the box that shows it, or (a wide
# one scrolls in its own box) every cell of its header row lies inside the part of that box a
# reader sees without scrolling sideways
_HIDDEN_COLUMNS = """() => {
  const W = document.documentElement.clientWidth, out = [];
  for (const t of document.querySelectorAll('.bd-article table')) {
    if (t.closest('details:not([open])') || t.getClientRects().length === 0) continue;
    let box = t;  // the box that shows the table: itself or the nearest ancestor that clips or scrolls
    while (box.parentElement && getComputedStyle(box).overflowX === 'visible' && !box.classList.contains('bd-article'))
      box = box.parentElement;
    const b = box.getBoundingClientRect(), left = Math.max(b.left, 0), right = Math.min(b.right, W);
    const head = t.querySelector(':scope > thead > tr:last-child') || t.querySelector('tr');
    const hidden = [...(head ? head.children : [])].filter(c => {
      const r = c.getBoundingClientRect(); return r.width > 0 && (r.right > right + 1 || r.left < left - 1); });
    if (hidden.length)
      out.push(`${t.id || t.className || 'a table'} (${t.scrollWidth} px in ${Math.round(right - left)}): `
               + hidden.map(c => (c.textContent || '').trim().slice(0, 30)).join(' | '));
  }
  return out;
}"""


def test_no_table_hides_a_column_at_1280_px(site, wide):
    """At 1280 px every column of every table of every page is on screen: its header cell lies
    inside the box that shows the table, so no reader has to scroll a table sideways to find a
    column (the leaderboard's "ranked first (%)", a check table's verdict, a claims table's notes)."""
    problems, n_tables = [], 0
    for path in _pages(site, redirects=False):
        n_tables += wide[path]["n_tables"]
        problems += [f"{path.relative_to(site).as_posix()}: {p}" for p in wide[path]["hidden_columns"]]
    assert n_tables > 30 and not problems, f"{n_tables} tables\n" + "\n".join(problems[:40])


# a claims table's verdict (and a check table's) on a phone: inside the viewport and inside every
# box around it that clips or scrolls, labelled with its column's name (static/tables.js)
_VERDICTS_ON_A_PHONE = """() => {
  const W = document.documentElement.clientWidth, out = [];
  const cells = [...document.querySelectorAll('table.claims-table td.claims-verdict, table.check-table td:last-child')];
  for (const c of cells) {
    if (c.closest('details:not([open])')) continue;
    const r = c.getBoundingClientRect();
    let off = r.width === 0 || r.left < -1 || r.right > W + 1;
    for (let a = c.parentElement; a && !off && a !== document.body; a = a.parentElement) {
      if (getComputedStyle(a).overflowX === 'visible') continue;
      const b = a.getBoundingClientRect();
      off = r.left < b.left - 1 || r.right > b.right + 1;
    }
    const label = getComputedStyle(c, '::before').content;
    if (off || !/verdict/.test(label)) out.push(`${(c.closest('tr') || {}).id || ''} ${c.textContent.trim().slice(0, 30)} (${label})`);
  }
  return {n: cells.length, out};
}"""


def test_every_verdict_is_on_screen_on_a_phone(site, phone):
    """At 390 px every verdict of every claims table (and of every derivations chapter's check
    table) is on screen without scrolling sideways, labelled: the table is one card per row, its
    verdict first."""
    problems, n = [], 0
    for path in sorted((site / "chapters").glob("*.html")):
        found = phone[path]["verdicts"]
        n += found["n"]
        problems += [f"{path.stem}: {p}" for p in found["out"][:3]]
    assert n > 20 and not problems, f"{n} verdicts\n" + "\n".join(problems[:30])


def test_check_tables_typeset_their_formulas(site, wide):
    """A derivations chapter's check table writes its formulas in TeX (fedbook.checks.with_math):
    the FedGRC chapters' tables hold typeset formulas and no formula written in ASCII."""
    found = {name: wide[site / "chapters" / f"{name}.html"]["check_tables"] for name in ("fedgrc_cgrl", "fedgrc_statistics")}
    tables = [t for ts in found.values() for t in ts]
    assert tables and sum(t["math"] for t in tables) >= 10, found
    assert not any(re.search(r"Sigma_|sum_[a-z]|\^-1|<=", t["text"]) for t in tables), "ASCII formula in a check table"


def test_the_findings_page_and_every_experiments_chapter_open_with_their_summary(site):
    """A reader's answer in one minute: right under each experiments chapter's title, what it found
    (fedbook.page.claims_opening: its sentences and its headline claims), and on the findings page,
    one such summary per paper (fedbook.catalog.paper_summaries); every claim named in them links to
    its row, which exists (the row's id comes from the claim's key), and the chapter links back to
    the findings page."""
    problems = []
    findings = (site / "chapters" / "findings.html").read_text(encoding="utf-8")
    article = findings[findings.index('<article'):]
    title, summaries = article.find("<h1"), article.find('class="paper-summaries"')
    if not title < summaries < article.find("<h2", title) or "Show code cell" in article[title:summaries]:
        problems.append("findings: the paper summaries are not the first thing under the title")
    chapters = sorted((site / "chapters").glob("*_experiments.html"))
    assert chapters, "no experiments chapter rendered"
    for path in chapters:
        text = path.read_text(encoding="utf-8")
        body = text[text.index('<article'):]
        title, opening = body.find("<h1"), body.find('class="claims-opening"')
        if not title < opening < body.find("<h2", title):
            problems.append(f"{path.stem}: its summary is not the first thing under the title")
            continue
        if f'href="{path.stem}.html#' not in findings:
            problems.append(f"{path.stem}: the findings page has no summary linking to it")
        block = body[opening:body.index("</div>", body.index('class="claims-links"'))]
        ids = set(re.findall(r'<tr id="(claim-[^"]+)"', text))
        for anchor in re.findall(r'href="#(claim-[^"]+)"', block):
            if anchor not in ids:
                problems.append(f"{path.stem}: the summary links to {anchor!r}, which is no row of its claims table")
        if 'href="findings.html"' not in block or not re.search(r'href="#claims-[0-9a-f]+"', block):
            problems.append(f"{path.stem}: the opening links neither to its claims table nor to the findings page")
    assert not problems, "\n".join(problems)


def test_the_glossary_defines_the_terms_the_claims_tables_link_to(site, wide):
    """The glossary page holds the terms (each with its anchor), and every glossary link of a
    claims table or a chapter's opening lands on a defined term."""
    assert site / "glossary.html" in wide, f"no glossary page in {site}"
    terms = set(wide[site / "glossary.html"]["glossary_terms"])
    assert len(terms) >= 15, sorted(terms)
    linked, problems = 0, []
    for path in sorted((site / "chapters").glob("*.html")):
        for href in wide[path]["glossary_links"]:
            linked += 1
            if href.split("#", 1)[1] not in terms:
                problems.append(f"{path.stem}: {href}")
    assert linked >= 20 and not problems, f"{linked} links\n" + "\n".join(sorted(set(problems))[:20])
