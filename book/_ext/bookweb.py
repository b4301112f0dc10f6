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
  lets long identifiers and signatures break.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STATIC = Path(__file__).resolve().parent / "static"


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


def _static_path(app) -> None:
    app.config.html_static_path.append(str(STATIC))


def setup(app) -> dict[str, Any]:
    app.connect("builder-inited", _static_path)
    app.add_css_file("bookweb.css")
    app.connect("html-page-context", _page_context, priority=900)  # after the themes have filled the context
    return {"parallel_read_safe": True, "parallel_write_safe": True}
