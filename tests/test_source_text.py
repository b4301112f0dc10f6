"""The project's text files hold no control characters.

A docstring or a notebook's Markdown written through a tool that interprets escapes turns
``\\top`` into a tab and ``op``, ``\\alpha`` into a bell and ``lpha``, ``\\frac`` into a form feed:
the source still runs, and the rendered maths is silently wrong. Every text file of the
repository must hold printable characters and newlines only.
"""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"_build", "cache", "chapters", "results", "_smoke", "_paper", "__pycache__", ".ipynb_checkpoints"}
SUFFIXES = {".py", ".md", ".yml", ".toml", ".txt", ".bib", ".cfg"}
CONTROL = {chr(c) for c in range(32)} - {"\n"}


def text_files() -> list[Path]:
    files = []
    for top in ("fedlib", "book", "notebooks", "tests"):
        for p in (ROOT / top).rglob("*"):
            if p.is_file() and p.suffix in SUFFIXES and not SKIP & set(p.relative_to(ROOT).parts):
                files.append(p)
    return sorted(files)


def control_characters(text: str) -> list[tuple[int, str]]:
    """The (line, character's escape) of every control character but the newline."""
    return [(n, repr(ch)) for n, line in enumerate(text.split("\n"), 1) for ch in line if ch in CONTROL]


def test_control_characters_found():
    assert control_characters("a\n:math:`M^\top`") == [(2, "'\\t'")]
    assert control_characters(r"$\alpha \frac{1}{2}$") == []


@pytest.mark.parametrize("path", text_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_control_characters(path):
    found = control_characters(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)}: control characters (line, char): {found[:5]}"
