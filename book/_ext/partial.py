"""Sphinx extension for a render of some chapters of the book only (``book/build.py --render`` of a
folder where not every chapter was executed, e.g. ``--only setting --out runs/x --render``).

``book/build.py`` leaves the chapters that were not executed out of the staged table of contents
and loads this extension with ``fedbook_absent``: for each chapter left out, its page name
(``chapters/<name>``), its title and the labels its source declares. A reference to one of those
pages or labels (the landing page's ``{doc}`` links to every chapter, *Inside fedlib*'s ``{ref}``
to a section of another chapter) is then printed as its text, the chapter's title where the
reference names none, without a link, instead of a warning that would fail the render (warnings
are errors). Every other reference is resolved, and checked, as in the whole book.
"""

from __future__ import annotations

import posixpath
from typing import Any

from docutils import nodes


def _target_page(node) -> str:
    """The page a ``{doc}`` reference names, relative to the source folder."""
    target = node.get("reftarget", "")
    if target.startswith("/"):
        return target.lstrip("/")
    return posixpath.normpath(posixpath.join(posixpath.dirname(node.get("refdoc", "")), target))


def absent_reference(app, env, node, contnode):
    """Sphinx's ``missing-reference`` event: the text of a reference to a page or a label of a
    chapter this render left out (``None`` for any other, which Sphinx then reports)."""
    absent: dict[str, dict[str, Any]] = app.config.fedbook_absent or {}
    reftype = node.get("reftype")
    page = None
    if reftype == "doc":
        page = _target_page(node)
        page = page if page in absent else None
    elif reftype in ("ref", "numref"):
        label = node.get("reftarget", "").lower()
        page = next((p for p, info in absent.items() if label in info.get("labels", ())), None)
    if page is None:
        return None
    text = contnode.astext() if node.get("refexplicit") else absent[page]["title"]
    return nodes.inline(text, text, classes=["absent-page"])


def setup(app) -> dict[str, Any]:
    app.add_config_value("fedbook_absent", {}, "env")
    app.connect("missing-reference", absent_reference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
