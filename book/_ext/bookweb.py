"""Sphinx extension of this book: what a reader's browser needs, offline and without errors.

Loaded by ``_config.yml`` (``sphinx.local_extensions``). Two fixes of the stock Jupyter Book 1.x
page, each checked by ``tests/test_browser.py``:

- the Thebe configuration script is inlined twice on every page (``const THEBE_JS_URL`` declared
  twice: a console error); with Thebe off (``launch_buttons.thebe: false``) its scripts and style
  are dropped altogether, which also leaves no address outside the book in the page;
- the theme's colour mode reaches the page empty ("Got invalid theme mode"): it is set to
  ``auto`` (the reader's system setting) unless configured;
- on a phone (390 px) nothing may run off the right edge of the page: ``static/bookweb.css``
  makes display equations, long inline formulas and wide tables scroll in their own box and
  lets long identifiers and signatures break;
- no scrollbar where nothing needs scrolling: on a wider screen an inline formula never scrolls
  (a one-pixel overflow of a scrolling box draws a bar under it) and its box clips a little
  outside itself, so the overhang of an accent or an italic letter is drawn, not cut.

The findings page's table is filtered by paper and verdict in the reader's browser by
``static/findings.js`` (loaded on every page, it acts only on a ``.findings`` block).

Every column of every table on screen at 1280 px, and every claims table's verdict on a phone:
``static/bookweb.css`` sets the chapters' tables smaller and lets a header break inside a word;
below 576 px a claims table (and a derivations chapter's check table) becomes one card per row,
its verdict first, each cell labelled with its column's header by ``static/tables.js``.

And three additions for readers who take a chapter away:

- each executed chapter's download menu offers its jupytext source (``notebooks/<name>.py``,
  copied into the build) next to the executed notebook;
- the executed notebook offered for download carries no path of the machine that built it:
  the ``results_dir`` papermill injected and its record of file paths are removed from that copy
  (the page keeps the injected cell);
- with a repository configured (``repository.url`` in ``_config.yml``), the header links to it
  and each chapter gets a Binder button that opens its jupytext source (Binder builds the
  environment from the repository's ``binder/`` folder: the pinned requirements, fedlib, and
  JupyterLab opening ``.py`` chapters as notebooks; Binder cannot be reached from the machines
  that test this book, so that path is not tested here); with none, no such button appears.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

STATIC = Path(__file__).resolve().parent / "static"
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"  # book/_ext/ -> the repository's notebooks/
SOURCES = "_sources"
BINDER = "https://mybinder.org"


def _chapter(pagename: str) -> str | None:
    """``chapters/<name>`` -> ``<name>`` where ``notebooks/<name>.py`` exists, else None."""
    if pagename.startswith("chapters/") and (NOTEBOOKS / f"{pagename.split('/', 1)[1]}.py").exists():
        return pagename.split("/", 1)[1]
    return None


def _repository(app) -> tuple[str, str]:
    """The configured repository's URL (empty if none) and branch."""
    opts = app.config.html_theme_options or {}
    return str(opts.get("repository_url") or "").rstrip("/"), str(opts.get("repository_branch") or "main")


def _binder_url(app, repo: str, branch: str, name: str) -> str | None:
    """Binder's address for a chapter's jupytext source, for a GitHub repository; None otherwise."""
    match = re.match(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?$", repo)
    if not match:
        return None
    hub = str(((app.config.html_theme_options or {}).get("launch_buttons") or {}).get("binderhub_url") or BINDER)
    path = quote(f"lab/tree/notebooks/{name}.py", safe="")
    return f"{hub.rstrip('/')}/v2/gh/{match.group(1)}/{match.group(2)}/{branch}?urlpath={path}"


def _thebe_on(app) -> bool:
    launch = (app.config.html_theme_options or {}).get("launch_buttons", {}) or {}
    return bool(launch.get("thebe"))


def _is_thebe(asset: Any) -> bool:
    name = str(getattr(asset, "filename", asset) or "")
    body = str(getattr(asset, "attributes", {}).get("body", "") or "")
    return "thebe" in name or "THEBE_JS_URL" in body


def _page_context(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    scripts = context.get("script_files")
    if scripts is not None:
        seen, kept = set(), []
        for s in scripts:
            key = (str(getattr(s, "filename", s)), str(getattr(s, "attributes", {}).get("body", "")))
            if key in seen or (not _thebe_on(app) and _is_thebe(s)):
                continue
            seen.add(key)
            kept.append(s)
        scripts[:] = kept
    if not _thebe_on(app) and context.get("css_files") is not None:
        context["css_files"][:] = [c for c in context["css_files"] if not _is_thebe(c)]
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    name = _chapter(pagename)
    buttons = context.get("header_buttons")
    if name is None or buttons is None:
        return
    pathto = context["pathto"]
    for group in buttons:
        if group.get("label") == "download-buttons":
            group["buttons"].insert(1, {
                "type": "link", "url": f"{pathto(SOURCES, 1)}/chapters/{name}.py", "text": ".py (jupytext)",
                "tooltip": "Download the chapter's jupytext source", "icon": "fas fa-file-code",
                "label": "download-jupytext-button",
            })
    repo, branch = _repository(app)
    binder = _binder_url(app, repo, branch, name) if repo else None
    if binder:
        buttons.append({
            "type": "group", "tooltip": "Launch this chapter", "icon": "fas fa-rocket", "label": "launch-buttons",
            "buttons": [{"type": "link", "url": binder, "text": "Binder", "tooltip": "Open the chapter on Binder",
                         "icon": "fas fa-rocket", "label": "binder-button"}],
        })


def _config(app, config) -> None:
    """A configured repository turns its header button on; without one, none is shown."""
    opts = dict(config.html_theme_options or {})
    opts["use_repository_button"] = bool(str(opts.get("repository_url") or "").strip())
    config.html_theme_options = opts


def _build_module():
    """``book/build.py`` (the pipeline), whose :func:`scrub_paths` cleans a notebook for download."""
    spec = importlib.util.spec_from_file_location("book_build", Path(__file__).resolve().parents[1] / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _finished(app, exception) -> None:
    """Copy each chapter's jupytext source beside its executed notebook in ``_sources``, and take
    what names the building machine (the injected ``results_dir``, papermill's file paths) out of
    the notebook's copy (``book/build.py``'s ``scrub_paths``)."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / SOURCES / "chapters"
    notebooks = sorted(out.glob("*.ipynb")) if out.exists() else []
    scrub = _build_module().scrub_paths if notebooks else None
    for notebook in notebooks:
        if (NOTEBOOKS / f"{notebook.stem}.py").exists():
            shutil.copyfile(NOTEBOOKS / f"{notebook.stem}.py", out / f"{notebook.stem}.py")
        scrub(notebook)


def _static_path(app) -> None:
    app.config.html_static_path.append(str(STATIC))


def setup(app) -> dict[str, Any]:
    app.connect("config-inited", _config)
    app.connect("builder-inited", _static_path)
    app.connect("build-finished", _finished)
    app.add_css_file("bookweb.css")
    app.add_js_file("findings.js")
    app.add_js_file("tables.js")
    app.connect("html-page-context", _page_context, priority=900)  # after the themes have filled the context
    return {"parallel_read_safe": True, "parallel_write_safe": True}
