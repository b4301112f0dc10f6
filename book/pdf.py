"""Print the rendered book to PDF: one file per page of the table of contents and the whole book.

    python book/pdf.py                     # the book's build, book/_build/html (make pdf)
    python book/pdf.py --site /tmp/x/_build/html    # another rendered build (a smoke build)

Writes ``<site>/pdf/<page>.pdf`` for every page of the toc (``chapters/setting`` ->
``pdf/setting.pdf``) and ``<site>/pdf/book.pdf``, the reader's book: every page but the API
reference (:data:`REFERENCE_PAGES`; about half the sheets), which is its own ``pdf/api.pdf``.
Then it links them from the landing page (the toc's
root, ``intro.html``): a paragraph under its title, replaced on every run (idempotent), written
only once every PDF exists.

How: Debian's ``chromium`` driven by Playwright's Python API (``executable_path``: nothing is
downloaded, as in ``tests/test_browser.py``), every request that is not a file of the book refused
(the site is printed offline). The pages are the ones the site's own navigation lists, in its
order (:func:`toc_pages`). Each is opened from its ``file://`` URL, laid out at the width of the
A4 text column in print media; the script waits for its images, its fonts and the bundled
MathJax 3 (``MathJax.startup.promise``, then ``MathJax.typesetPromise``), hides the site's chrome
and every collapsed or removed cell (:data:`PRINT_CSS`), shrinks a formula or a table wider than
the column to fit, and prints it once with ``page.pdf`` (A4, two browsers at a time).

The book is those PDFs but the reference's merged with pypdf in reading order, one bookmark per
page (its title). Page numbers are drawn afterwards, so that each page's PDF reads ``i / n`` and the book
``k / N`` continuously from one printing: Chromium prints one blank sheet per label (the number
in the bottom margin, :func:`page_number_stamps`) and :func:`stamp` lays each sheet over its page
as a form XObject. A link to another local file (another page, a notebook download) loses its
address in print: a PDF must not point into the machine that built it; links inside a page stay.

Every file is written atomically (a temporary file and ``os.replace``).
"""

from __future__ import annotations

import argparse
import html
import html.parser
import io
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
SITE = BOOK / "_build" / "html"
PDF_DIR = "pdf"
BOOK_PDF = "book.pdf"
PAGE_TIMEOUT_MS = 300_000
"""How long a page may take to load, typeset and print: the API reference is several MB of HTML
that Chromium needs more than Playwright's default 30 s for on a busy 2-core machine."""
REFERENCE_PAGES = ("api",)
"""Pages printed on their own but left out of ``book.pdf``: the API reference (``pdf/api.pdf``),
about half the book's sheets, which a reader looks up on the site rather than prints."""
INSTALL = "apt-get install -y chromium && pip install -r requirements.txt"

LINKS_START, LINKS_END = "<!-- pdf-links -->", "<!-- /pdf-links -->"
"""The markers around the landing page's PDF paragraph: a second run replaces what is between them."""

PAPER = {"format": "A4", "margin": {"top": "16mm", "bottom": "18mm", "left": "14mm", "right": "14mm"}}
CONTENT_WIDTH_PX = round((210 - 14 - 14) / 25.4 * 96)
"""The A4 text column in CSS pixels: the viewport the pages are laid out at before printing, so that
what is measured as too wide on screen is too wide on paper."""

STAMP_CSS = """
@page { size: A4; margin: 0; }
html, body { margin: 0; }
.s { width: 210mm; height: 297mm; position: relative; overflow: hidden; break-after: page; }
.s span { position: absolute; left: 0; right: 0; bottom: 8mm; text-align: center;
          font: 8pt sans-serif; color: #555; }
"""
"""The page-number sheets (:func:`page_number_stamps`): the number centred in the bottom margin."""

PRINT_CSS = """
/* the site's chrome: navigation, header buttons, search, previous/next, footer, launch buttons */
.bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer,
.bd-footer-article, .bd-footer-content, .prev-next-footer, .prev-next-area, .search-button,
.search-button-field, .bd-search, .article-header-buttons, .header-article-items, .headerlink,
.skip-link, #pst-back-to-top, .copybtn, .launch-buttons, .dropdown-launch-buttons,
.dropdown-download-buttons, .theme-switch-button, .findings-filter, .pdf-links,
.pst-async-banner-revealer, .sidebar-toggle, .toggle-button, button.toggle-button {
  display: none !important;
}
/* collapsed or removed cells: a hide-input/-output/-cell toggle prints nothing, removed parts neither */
.cell details.hide, .tag_hide-cell, .tag_remove-cell, .tag_remove-input .cell_input,
.tag_remove-output .cell_output, .tag_hide-input > .cell_input, .tag_hide-output > .cell_output,
.toggle-hidden {
  display: none !important;
}
/* the article takes the whole column */
html, body { background: white !important; }
.bd-container, .bd-container__inner, .bd-main, .bd-content, .bd-article-container, .bd-article,
.bd-page-width {
  max-width: none !important; width: auto !important; margin: 0 !important; padding: 0 !important;
  display: block !important; overflow: visible !important;
}
/* in print nothing scrolls: what the screen CSS lets scroll sideways is shrunk to fit instead */
mjx-container, div.math, table, .pst-scrollable-table-container, .output, .cell_output,
.table-wrapper, .bd-article table.table, .bd-article .output table {
  overflow: visible !important; max-width: none !important;
}
/* a table is a table again (the screen CSS makes it a scrolling block) and a text table spans the column */
.bd-article table { display: table !important; font-size: 0.9em; }
.bd-article table.table { width: 100% !important; }
pre { white-space: pre-wrap !important; overflow-wrap: anywhere; }
h1, h2, h3, h4 { break-after: avoid; }
figure, img, tr, mjx-container[display="true"] { break-inside: avoid; }
img { max-width: 100% !important; height: auto; }
a { color: inherit; }
"""

_READY_JS = """
async () => {
  for (const img of document.images) img.loading = "eager";
  await Promise.all([...document.images].map(img => img.complete ? null :
      new Promise(done => { img.addEventListener("load", done); img.addEventListener("error", done); })));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
    if (MathJax.typesetPromise) await MathJax.typesetPromise();
  }
  await document.fonts.ready;
}
"""

_FIT_JS = """
() => {
  // shrink what is wider than its column (a long formula, a wide table) instead of cutting it off
  const wide = document.querySelectorAll(
      'mjx-container[display="true"], .bd-article table, .cell_output pre, div.math');
  for (const el of wide) {
    const box = el.parentElement.getBoundingClientRect().width;
    const need = el.scrollWidth;
    if (box > 0 && need > box + 1) el.style.zoom = Math.max(0.4, box / need).toFixed(3);
  }
}
"""

_LOCAL_LINKS_JS = """
() => {
  // a link to another local file (a page, a download) would print as this machine's path: drop it;
  // a link inside the page stays an internal link of the PDF
  const here = location.href.split("#")[0];
  for (const a of document.querySelectorAll("a[href]")) {
    const url = new URL(a.getAttribute("href"), location.href);
    if (url.protocol !== "file:") continue;
    if (url.href.split("#")[0] === here && url.hash) a.setAttribute("href", url.hash);
    else a.removeAttribute("href");
  }
}
"""

@dataclass
class Export:
    """What :func:`export` wrote: the per-page PDFs (toc order), the whole book and its page count."""

    site: Path
    pages: dict[str, Path] = field(default_factory=dict)
    book: Path | None = None
    book_pages: int = 0
    seconds: float = 0.0


class _Navigation(html.parser.HTMLParser):
    """The pages the site's main navigation (``nav.bd-docs-nav``) links, in its order."""

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.hrefs = 0, []

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if tag == "nav":
            self.depth += 1 if (self.depth or "bd-docs-nav" in (attrs.get("class") or "").split()) else 0
        elif tag == "a" and self.depth and "internal" in (attrs.get("class") or "").split():
            href = attrs.get("href") or ""
            if href and not href.startswith("#") and "#" not in href and href not in self.hrefs:
                self.hrefs.append(href)

    def handle_endtag(self, tag) -> None:
        if tag == "nav" and self.depth:
            self.depth -= 1


def root_page(site: Path) -> Path:
    """The landing page: the page ``index.html`` redirects to (the toc's root), or ``index.html`` itself."""
    index = Path(site) / "index.html"
    found = re.search(r'http-equiv="Refresh"\s+content="0;\s*url=([^"]+)"', index.read_text(encoding="utf-8")[:2000])
    return (index.parent / found.group(1)).resolve() if found else index


def toc_pages(site: Path) -> list[tuple[str, Path]]:
    """The rendered pages in reading order, the landing page (the toc's root) first, as ``(name, html path)``.

    The order is the one the site's own navigation shows (the table of contents it was rendered
    from), read from the landing page. ``name`` is the page's file name without its folder
    (``chapters/setting.html`` -> ``setting``): the name of its PDF.
    """
    root = root_page(site)
    nav = _Navigation()
    nav.feed(root.read_text(encoding="utf-8"))
    pages = [root] + [(root.parent / href).resolve() for href in nav.hrefs]
    missing = [str(p) for p in pages if not p.exists()]
    if missing or len(pages) < 2:
        raise SystemExit(f"the rendered book in {site} is incomplete: its navigation links "
                         f"{len(pages) - 1} page(s), missing {', '.join(missing[:3]) or 'none'}; run make book")
    names = [p.stem for p in pages]
    if len(set(names)) != len(names):
        raise SystemExit(f"two pages of the book share a file name: {names}")
    return list(zip(names, pages))


def check_site(site: Path) -> Path:
    """The rendered site's folder, resolved; a clear error naming it when it holds no rendered book."""
    site = Path(site).resolve()
    if not (site / "index.html").exists():
        raise SystemExit(f"no rendered book in {site} (no index.html): run make book first "
                         "(or give --site the html folder of another build)")
    return site


def find_chromium() -> str:
    """The system Chromium's executable (Debian's ``chromium``); a clear error with the install command."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit(f"the PDF export needs Debian's chromium, which is not installed; install: {INSTALL}")
    return found


def _context(browser):
    ctx = browser.new_context(viewport={"width": CONTENT_WIDTH_PX, "height": 1100})
    # offline: anything that is not a file of the book is refused
    ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    return ctx


def render_page(ctx, path: Path) -> tuple[str, bytes]:
    """One rendered page printed (no page numbers yet): its title and its PDF.

    Offline, its images loaded, its math typeset, its chrome and collapsed cells hidden, anything
    wider than the column shrunk to fit, links to other local files dropped.
    """
    page = ctx.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        page.emulate_media(media="print")
        page.goto(path.as_uri(), wait_until="load")
        page.add_style_tag(content=PRINT_CSS)
        page.evaluate(_READY_JS)
        page.evaluate(_FIT_JS)
        page.evaluate(_LOCAL_LINKS_JS)
        title = page.evaluate("() => { const h = document.querySelector('article.bd-article h1');"
                              " return h ? h.textContent.replace(/#$/, '').trim() : document.title; }")
        return title, page.pdf(**PAPER, print_background=True)
    finally:
        page.close()


def _render_all(chromium: str, paths: list[Path]) -> dict[Path, tuple[str, bytes]]:
    """:func:`render_page` for each path, in a browser of this thread's own (Playwright's sync API
    belongs to the thread that started it)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            ctx = _context(browser)
            return {path: render_page(ctx, path) for path in paths}
        finally:
            browser.close()


def render_pages(chromium: str, paths: list[Path], jobs: int = 2) -> dict[Path, tuple[str, bytes]]:
    """Print the pages in ``jobs`` browsers at once, the largest pages first spread over them."""
    groups: list[list[Path]] = [[] for _ in range(max(1, min(jobs, len(paths))))]
    sizes = [0] * len(groups)
    for path in sorted(paths, key=lambda p: -p.stat().st_size):  # greedy: to the least loaded browser
        i = sizes.index(min(sizes))
        groups[i].append(path)
        sizes[i] += path.stat().st_size
    with ThreadPoolExecutor(len(groups)) as pool:
        done = list(pool.map(lambda g: _render_all(chromium, g), groups))
    return {path: got for part in done for path, got in part.items()}


def page_number_stamps(chromium: str, labels: list[str]) -> list:
    """One A4 page per label, blank but for the label centred in the bottom margin (pypdf pages)."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader

    sheets = "".join(f'<div class="s"><span>{html.escape(label)}</span></div>' for label in labels)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.set_content(f"<style>{STAMP_CSS}</style>{sheets}")
            data = page.pdf(prefer_css_page_size=True)
        finally:
            browser.close()
    stamps = PdfReader(io.BytesIO(data)).pages
    if len(stamps) != len(labels):
        raise RuntimeError(f"page-number sheets: {len(stamps)} pages printed for {len(labels)} labels")
    return list(stamps)


def stamp(writer, stamps: list) -> None:
    """Draw ``stamps[i]`` over page ``i`` of ``writer``, as a form XObject in the page's default
    coordinates (the page's own drawing is wrapped in ``q``/``Q``, so its transformations stay its own)."""
    from pypdf.generic import DecodedStreamObject, NameObject, RectangleObject
    from pypdf.generic import ArrayObject, DictionaryObject

    if len(stamps) != len(writer.pages):
        raise ValueError(f"{len(stamps)} page numbers for {len(writer.pages)} pages")
    for i, (page, sheet) in enumerate(zip(writer.pages, stamps)):
        form = DecodedStreamObject()
        form.set_data(sheet.get_contents().get_data())
        form[NameObject("/Type")] = NameObject("/XObject")
        form[NameObject("/Subtype")] = NameObject("/Form")
        form[NameObject("/BBox")] = RectangleObject(sheet.mediabox)
        form[NameObject("/Resources")] = sheet["/Resources"].clone(writer)
        ref = writer._add_object(form)  # a stream must be an indirect object: pypdf's own helper
        name = NameObject(f"/PageNumber{i}")  # unique: Chromium may share one resource dict across pages
        resources = page[NameObject("/Resources")].get_object()
        if "/XObject" not in resources:
            resources[NameObject("/XObject")] = DictionaryObject()
        resources["/XObject"].get_object()[name] = ref
        before, after = DecodedStreamObject(), DecodedStreamObject()
        before.set_data(b"q\n")
        after.set_data(b"\nQ q " + name.encode() + b" Do Q\n")
        contents = page.get("/Contents")
        old = list(contents.get_object()) if isinstance(contents.get_object(), ArrayObject) else [contents]
        page[NameObject("/Contents")] = ArrayObject([writer._add_object(before), *old, writer._add_object(after)])


def _write(writer, path: Path) -> Path:
    from fedlib.io import atomic_write_bytes  # the umask's mode, as open gives (a web server can read it)

    buffer = io.BytesIO()
    writer.write(buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def pdf_page_count(path: Path) -> int:
    """The number of pages of a PDF (read with pypdf)."""
    from pypdf import PdfReader

    return len(PdfReader(path).pages)


def link_landing(site: Path, root: Path, book: Path, pages: dict[str, Path], n_pages: int,
                 reference: dict[str, int] | None = None) -> Path:
    """Put (or replace) the paragraph that links the PDFs under the landing page's title.

    ``reference``: the pages left out of the book (:data:`REFERENCE_PAGES`) and their number of
    pages, linked as their own PDFs. Every link is relative to the landing page; the PDFs must
    exist (checked). Running it twice leaves one paragraph.
    """
    missing = [str(p) for p in [book, *pages.values()] if not p.exists()]
    if missing:
        raise SystemExit(f"not linking the landing page: missing PDF(s) {', '.join(missing[:3])}")
    rel = lambda p: p.relative_to(root.parent).as_posix()  # noqa: E731
    chapters = ", ".join(f'<a class="reference external" href="{html.escape(rel(p))}">{html.escape(n)}</a>'
                         for n, p in pages.items())
    if reference is None:  # the pages of the book left out of it, as export found them
        reference = {n: pdf_page_count(pages[n]) for n in REFERENCE_PAGES if n in pages}
    apart = "".join(f'; the API reference apart: <a class="reference external" href="{html.escape(rel(pages[n]))}">'
                    f'{html.escape(pages[n].name)}</a> ({k} pages)' for n, k in (reference or {}).items() if n in pages)
    block = (f'{LINKS_START}<div class="pdf-links"><p>The book as PDF: '
             f'<a class="reference external" href="{html.escape(rel(book))}">{BOOK_PDF}</a> '
             f'({n_pages} pages{apart}).</p><details><summary>One PDF per page</summary><p>{chapters}</p>'
             f'</details></div>{LINKS_END}')
    text = root.read_text(encoding="utf-8")
    text = re.sub(re.escape(LINKS_START) + ".*?" + re.escape(LINKS_END), "", text, flags=re.S)
    heading = re.search(r"<article[^>]*>.*?</h1>", text, flags=re.S)
    if heading is None:
        raise SystemExit(f"no title (h1) in the landing page {root}: cannot link the PDFs")
    text = text[:heading.end()] + "\n" + block + text[heading.end():]
    from fedlib.io import atomic_write_text

    return atomic_write_text(root, text)  # the umask's mode, as the site's other files


def export(site: Path = SITE, *, chromium: str | None = None, jobs: int = 2, link: bool = True,
           log=print) -> Export:
    """Print every page of ``site`` into ``<site>/pdf/<page>.pdf`` and the whole book into
    ``<site>/pdf/book.pdf``, then link them from the landing page (``link``).

    Each page is printed once (``jobs`` browsers at a time); a page's PDF is numbered ``i / n``, the
    book (the pages' PDFs merged in reading order, a bookmark per page) ``k / N`` continuously.
    """
    import logging

    from pypdf import PdfReader, PdfWriter

    # pypdf warns that Chromium's PDFs count one object more than their trailer says; it reads them
    # correctly, and the warning would read as a fault in make pdf's output
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:  # pragma: no cover - the pinned requirements install it
        raise SystemExit(f"the PDF export needs playwright; install: {INSTALL}") from None
    site = check_site(site)
    pages = toc_pages(site)
    chromium = chromium or find_chromium()
    t0 = time.perf_counter()
    printed = render_pages(chromium, [path for _, path in pages], jobs)
    counts = {name: len(PdfReader(io.BytesIO(printed[path][1])).pages) for name, path in pages}
    in_book = [(name, path) for name, path in pages if name not in REFERENCE_PAGES]
    total = sum(counts[name] for name, _ in in_book)
    labels = [f"{i} / {n}" for n in counts.values() for i in range(1, n + 1)]
    labels += [f"{k} / {total}" for k in range(1, total + 1)]
    stamps = page_number_stamps(chromium, labels)
    log(f"[pdf]      {len(pages)} pages printed ({sum(counts.values())} sheets) in {time.perf_counter() - t0:.0f} s")

    result = Export(site=site)
    folder, at = site / PDF_DIR, 0
    for name, path in pages:
        writer = PdfWriter(clone_from=io.BytesIO(printed[path][1]))
        stamp(writer, stamps[at:at + counts[name]])
        writer.add_metadata({"/Title": printed[path][0]})
        result.pages[name] = _write(writer, folder / f"{name}.pdf")
        at += counts[name]
    book = PdfWriter()
    for name, path in in_book:  # the reader's book: every page but the reference
        book.append(io.BytesIO(printed[path][1]), outline_item=printed[path][0])
    stamp(book, stamps[at:])
    book.add_metadata({"/Title": printed[pages[0][1]][0]})
    result.book, result.book_pages = _write(book, folder / BOOK_PDF), total
    # a page that left the book (renamed, removed from the toc) leaves no PDF behind to be published
    for stale in sorted(set(folder.glob("*.pdf")) - {result.book, *result.pages.values()}):
        stale.unlink()
        log(f"[pdf]      removed {stale.relative_to(site)} (no longer a page of the book)")
    left = ", ".join(f"{result.pages[n].relative_to(site)} ({counts[n]} pages)" for n in REFERENCE_PAGES if n in result.pages)
    log(f"[pdf]      {result.book.relative_to(site)}: {total} pages" + (f" without the API reference: {left}" if left else "")
        + f"; one PDF per page in {folder.relative_to(site)}/")
    if link:
        root = link_landing(site, pages[0][1], result.book, result.pages, total,
                            {n: counts[n] for n in REFERENCE_PAGES if n in result.pages})
        log(f"[pdf]      linked from {root.relative_to(site)}")
    result.seconds = time.perf_counter() - t0
    log(f"[pdf]      done in {result.seconds:.0f} s")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default=str(SITE),
                        help=f"the rendered book's html folder (default: {SITE.relative_to(ROOT)})")
    parser.add_argument("--no-link", action="store_true", help="do not link the PDFs from the landing page")
    parser.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="browsers printing at once (default: 2, or 1 on one core)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    export(Path(args.site), jobs=args.jobs, link=not args.no_link)
    return 0


if __name__ == "__main__":
    sys.exit(main())
