"""The book pipeline: every chapter executes through papermill at the smoke profile; the execution
cache re-runs nothing when nothing changed and re-runs when the parameters or fedlib change."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("book_build", ROOT / "book" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

CHAPTERS = build.chapter_names()


def test_toc_lists_every_notebook_once():
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.py"))
    assert sorted(CHAPTERS) == notebooks


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(build, "RESULTS", tmp_path / "results")
    return tmp_path


def _glued_keys(nb) -> set[str]:
    keys = set()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            key = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if key:
                keys.add(key)
    return keys


@pytest.mark.notebook
@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_executes_at_smoke_profile_and_is_cached(name, sandbox, capsys):
    assert build.build("smoke", [name], {}, render=False, force=False) == 0
    out = sandbox / "chapters" / f"{name}.ipynb"
    nb = nbformat.read(out, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    referenced = set()
    for piece in source.split("{glue:text}`")[1:]:
        referenced.add(piece.split("`", 1)[0].split(":", 1)[0])
    assert referenced <= _glued_keys(nb), f"prose references keys that were not glued: {referenced - _glued_keys(nb)}"
    meta = json.loads((sandbox / "chapters" / f"{name}.json").read_text())
    assert meta["params"]["profile"] == "smoke"
    capsys.readouterr()
    assert build.build("smoke", [name], {}, render=False, force=False) == 0
    assert f"[cached]   {name}" in capsys.readouterr().out
    assert not list((sandbox / "chapters").glob(".*.ipynb")), "a temporary file was left behind"


def test_unknown_profile_is_refused_before_executing(sandbox):
    with pytest.raises(SystemExit, match="unknown profile 'fast'; valid: smoke, book, paper"):
        build.build("fast", None, {}, render=False, force=False)
    with pytest.raises(SystemExit, match="unknown chapter"):
        build.build("smoke", ["nope"], {}, render=False, force=False)


@pytest.mark.notebook
def test_unknown_parameter_value_stops_the_notebook_with_a_clear_message(sandbox):
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match="unknown profile 'fast'"):
        build.execute_chapter(CHAPTERS[0], {"profile": "fast"}, sandbox / "x.ipynb")
    assert (sandbox / "x.failed.ipynb").exists() and not (sandbox / "x.ipynb").exists()


def test_cache_key_covers_parameters_fedlib_and_requirements(tmp_path, monkeypatch):
    for part in ("notebooks", "fedlib"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "requirements.txt", tmp_path / "requirements.txt")
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(build, "NOTEBOOKS", tmp_path / "notebooks")
    name = CHAPTERS[0]
    key = build.cache_key(name, {"profile": "book"})
    assert build.cache_key(name, {"profile": "book"}) == key
    assert build.cache_key(name, {"profile": "smoke"}) != key
    with open(tmp_path / "fedlib" / "metrics.py", "a") as f:
        f.write("\n# a change in the library\n")
    key2 = build.cache_key(name, {"profile": "book"})
    assert key2 != key
    with open(tmp_path / "requirements.txt", "a") as f:
        f.write("\n")
    assert build.cache_key(name, {"profile": "book"}) != key2


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("0.3", 0.3), ("[0.3, 0.1]", [0.3, 0.1]), ("None", None), ("cnn", "cnn")])
def test_parameter_values_parse_as_literals(text, value):
    assert build.parse_value(text) == value
