"""The book as PDF (``book/pdf.py``, ``make pdf``): the rendered smoke-profile book printed by
Debian's ``chromium`` into a temporary copy of the site, then read back with pypdf.

Checked: one PDF per page of the navigation and ``book.pdf``, which has more pages than the book
has pages of HTML, is numbered continuously and holds no API page (the reference is ``api.pdf``, linked apart); each page's title is in its PDF and on the book's page where that page starts;
each page's PDF shows the first value its prose glued, as the page shows it; no raw TeX
(``\\frac``, ``\\mathbf``, ``\\sum``, ``$$``) is left anywhere (MathJax typeset every formula) and no
collapsed cell prints; the landing page links ``pdf/book.pdf`` exactly once, also after a second
linking. The rendered smoke site is the browser tests' (one build a session, see conftest).

Without chromium the module skips with the install command, except under CI (``CI`` set), where it
fails: ``.ci/run`` installs chromium first.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import sys
import unicodedata
from pathlib import Path

import pytest
from conftest import require_browser

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


build = _load("book_build", ROOT / "book" / "build.py")
pdf = _load("book_pdf", ROOT / "book" / "pdf.py")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import playwright.sync_api  # noqa: F401
    from pypdf import PdfReader
except ImportError:  # pragma: no cover - the pinned requirements install them
    PdfReader = None

require_browser("PDF", "Debian's chromium" if CHROMIUM is None else "playwright and pypdf" if PdfReader is None else None,
                pdf.INSTALL)

pytestmark = pytest.mark.browser

RAW_TEX = ("\\frac", "\\mathbf", "\\sum", "$$")


def _normal(text: str) -> str:
    """Text as compared: ligatures unfolded (NFKC), typographic minus and quotes plain, whitespace single."""
    text = unicodedata.normalize("NFKC", text).replace("\u2212", "-").replace("\u2019", "'")
    return re.sub(r"\s+", " ", text)


def _text(path: Path) -> str:
    return _normal(" ".join(page.extract_text() or "" for page in PdfReader(path).pages))


def _title(page: Path) -> str:
    found = re.search(r"<h1[^>]*>(.*?)</h1>", page.read_text(encoding="utf-8"), flags=re.S)
    assert found, f"no title in {page}"
    return _normal(html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).rstrip("#").strip())


@pytest.fixture(scope="module")
def site(smoke_out) -> Path:
    """The rendered smoke book: the browser tests' build when it ran this session, else built here."""
    if os.environ.get("FEDLIB_BOOK_SITE"):
        return Path(os.environ["FEDLIB_BOOK_SITE"]).resolve()
    rendered = smoke_out / "_build" / "html"
    if not (rendered / "intro.html").exists():
        assert build.build("smoke", None, {}, render=True, force=False, out=smoke_out) == 0
    return rendered


@pytest.fixture(scope="module")
def exported(site, tmp_path_factory):
    """The PDF export run on a copy of the site (the site itself stays as the browser tests saw it)."""
    copy = tmp_path_factory.mktemp("pdf_site") / "html"
    shutil.copytree(site, copy, ignore=shutil.ignore_patterns("pdf"))
    result = pdf.export(copy, chromium=CHROMIUM, log=lambda *a: None)
    texts = {name: _text(path) for name, path in result.pages.items()}
    # the book is the pages' PDFs merged: read the page where each one starts (its title is there)
    book, starts, at = PdfReader(result.book), {}, 0
    for name, path in result.pages.items():
        if name in pdf.REFERENCE_PAGES:  # printed on its own, not in the reader's book
            continue
        starts[name] = _normal(book.pages[at].extract_text())
        at += len(PdfReader(path).pages)
    return result, texts, starts


def test_every_page_has_its_pdf_and_the_book_numbers_its_pages_continuously(exported):
    result, _, _ = exported
    pages = pdf.toc_pages(result.site)
    assert list(result.pages) == [name for name, _ in pages]
    for name, path in result.pages.items():
        assert path == result.site / "pdf" / f"{name}.pdf" and path.stat().st_size > 0
    book = PdfReader(result.book)
    assert len(book.pages) == result.book_pages == sum(len(PdfReader(p).pages) for n, p in result.pages.items()
                                                       if n not in pdf.REFERENCE_PAGES)
    assert len(book.pages) > len(pages)
    n = len(book.pages)
    for k in (1, n // 2, n):  # the stamped number at the foot of the page
        assert f"{k} / {n}" in _normal(book.pages[k - 1].extract_text()), f"page {k} of the book is not numbered"
    first = PdfReader(result.pages["setting"])
    assert f"1 / {len(first.pages)}" in _normal(first.pages[0].extract_text())
    assert [_normal(o.title) for o in book.outline if hasattr(o, "title")][:2] == [_title(p) for _, p in pages[:2]]
    # the reader's book has no API page: the reference is its own PDF, linked apart
    assert pdf.REFERENCE_PAGES == ("api",) and "api" in result.pages
    outline = [_normal(o.title) for o in book.outline if hasattr(o, "title")]  # typographic quotes plain, as _title's
    assert outline == [_title(p) for n, p in pages if n != "api"] and _title(dict(pages)["api"]) not in outline
    api_first = _normal(PdfReader(result.pages["api"]).pages[0].extract_text())
    assert all(_normal(page.extract_text()) != api_first for page in book.pages[-3:])
    assert not list(result.site.rglob("*.tmp")), "a temporary file was left behind"
    # readable as the rest of the site (an atomic write's temporary file is private)
    for path in [result.book, *result.pages.values(), pages[0][1]]:
        assert path.stat().st_mode & 0o044 == 0o044, f"{path.name} is not readable by others: {oct(path.stat().st_mode)}"


def test_each_page_title_is_in_its_pdf_and_where_it_starts_in_the_book(exported):
    result, texts, starts = exported
    for name, page in pdf.toc_pages(result.site):
        title = _title(page)
        assert title in texts[name], f"{name}.pdf lacks its title {title!r}"
        if name not in pdf.REFERENCE_PAGES:
            assert title in starts[name], f"book.pdf lacks the title {title!r} where {name} starts"


_PASTED = re.compile(r'<span class="pasted-text">(.*?)</span>', re.S)


def test_each_chapter_pdf_shows_the_first_value_its_prose_glued(exported):
    """The first glued value in a page's prose (MyST-NB's ``pasted-text``: before any folded
    dropdown) reads in its PDF exactly as on the page: the PDF prints the executed page, numbers
    and all."""
    result, texts, _ = exported
    checked = 0
    for name, page in pdf.toc_pages(result.site):
        pasted = [_normal(html.unescape(re.sub(r"<[^>]+>", "", v))).strip()
                  for v in _PASTED.findall(page.read_text(encoding="utf-8"))]
        pasted = [v for v in pasted if len(v) >= 3 and re.search(r"\w", v)]
        if not pasted:
            continue
        assert pasted[0] in texts[name], f"{name}.pdf lacks {pasted[0]!r}, the first value its prose glued"
        checked += 1
    assert checked >= 8, f"only {checked} pages with glued values in their prose"


def test_no_raw_tex_and_no_collapsed_cell_in_any_pdf(exported):
    result, texts, starts = exported  # the book's pages are these PDFs' pages
    for name, text in [*texts.items(), *((f"book.pdf at {n}", t) for n, t in starts.items())]:
        found = [t for t in RAW_TEX if t in text]
        assert not found, f"{name}.pdf holds raw TeX {found}: a formula was not typeset"
        assert "Hide code cell" not in text, f"{name}.pdf prints a collapsed cell's toggle"


def test_the_landing_page_links_the_book_once_even_when_linked_again(exported):
    result, _, _ = exported
    root = pdf.root_page(result.site)
    pdf.link_landing(result.site, root, result.book, result.pages, result.book_pages)  # a second run
    text = root.read_text(encoding="utf-8")
    assert text.count('href="pdf/book.pdf"') == 1
    assert f"({result.book_pages} pages; the API reference apart: " in text  # the reader's book, the reference apart
    assert text.count(pdf.LINKS_START) == 1 and text.count(pdf.LINKS_END) == 1
    for path in result.pages.values():
        assert f'href="pdf/{path.name}"' in text


def test_missing_site_or_chromium_says_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match=re.escape(str(tmp_path)) + ".*make book"):
        pdf.check_site(tmp_path)
    monkeypatch.setattr(pdf.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="apt-get install -y chromium"):
        pdf.find_chromium()
