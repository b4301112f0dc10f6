"""fedlib's docstrings render as the API page shows them: a doctest block inside a numpydoc
section such as Parameters or Attributes is read by napoleon as more entries of that section
(junk "attributes" named ``>>> head = ...``); the examples need their own ``Examples`` header."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted((ROOT / "fedlib").rglob("*.py"))
ENTRY_SECTIONS = {"Parameters", "Other Parameters", "Attributes", "Returns", "Yields", "Raises", "Warns", "See Also"}


def misplaced_examples(source: str) -> list[str]:
    """The objects whose first doctest line follows an entry section without an Examples header."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc:
            continue
        lines, section = doc.split("\n"), None
        for i, line in enumerate(lines):
            if i + 1 < len(lines) and line.strip() and not line.startswith(" ") \
                    and re.fullmatch(r"-{3,}", lines[i + 1].strip()):
                section = line.strip()
            if line.lstrip().startswith(">>>"):
                if section in ENTRY_SECTIONS:
                    found.append(getattr(node, "name", "<module>"))
                break
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_doctest_examples_sit_under_an_examples_header(path):
    bad = misplaced_examples(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.name}: add an 'Examples' header before the doctests of {bad}"


def test_the_check_finds_examples_inside_a_section_and_accepts_a_header():
    body = "def f():\n    {q}F.\n\n    {sec}\n    --------\n    x : int\n\n    >>> f()\n    {q}\n"
    q = '"' * 3
    assert misplaced_examples(body.format(q=q, sec="Parameters")) == ["f"]
    assert misplaced_examples(body.format(q=q, sec="Attributes")) == ["f"]
    assert misplaced_examples(body.format(q=q, sec="Examples")) == []
    assert misplaced_examples(body.format(q=q, sec="Notes")) == []
