"""Build the book: execute every chapter with papermill, then render it with Jupyter Book.

    python book/build.py                       # every chapter at the default ("book") profile
    python book/build.py --profile smoke       # seconds: the tests' parameters, into book/_smoke/
    python book/build.py --only setting -p seed=1 -p alphas='[0.5]' --out runs/x   # one chapter, own parameters
    python book/build.py --no-render           # execute only
    python book/build.py --out /tmp/x --force  # execute into another folder (leaves the book alone)
    python book/build.py --compare runs/mine   # which glued values of runs/mine differ from the book's
    python book/build.py --compare runs/mine --against https://<owner>.github.io/<repository>/  # the published book's

Pipeline (the book's page *Inside fedlib*): ``notebooks/<name>.py`` (jupytext percent format) ->
``jupytext.read`` -> ``papermill.execute_notebook`` with parameters -> ``<out>/chapters/<name>.ipynb``
-> ``jupyter-book build`` with execution off, warnings as errors and references checked.

Where it writes: the ``book`` profile into ``book/`` itself (``book/chapters``, ``book/results``,
HTML in ``book/_build/html``); any other profile into its own folder ``book/_<profile>/``, which
holds a copy of the book's own pages next to its executed chapters and renders to
``book/_<profile>/_build/html``, so a smoke build never leaves its numbers in the book or
invalidates the book's cache. ``--out DIR`` executes into ``DIR`` instead and does not render (``--render`` renders it too).

Parameters: ``-p key=value`` goes to every selected chapter whose ``parameters`` cell declares
``key``; a key that no selected chapter declares, or a value of another kind than the one it
replaces (:func:`check_parameters`: ``-p alphas=0.5`` for a list, ``-p seed=1.5``), stops the build
in a second, before any kernel starts. Values are Python literals (``-p seed=1``,
``-p 'alphas=[0.5]'`` or ``-p alphas=0.5,0.1``, ``-p dataset=uci8``). The build prints where each
executed notebook, record and rendered page went.

Execution cache: a chapter is re-executed only when its key changes; the key hashes the
notebook's source, the fedlib and fedbook modules it imports (transitively: :func:`chapter_modules`), the
parameters and ``requirements.txt`` (Jupyter Book's own cache only sees code cells, so a change in
fedlib would not re-run anything; a change to a module no chapter code reaches re-runs nothing). Every
write is atomic (a temporary file and ``os.replace``), so an interrupted build resumes: finished
chapters are kept, the interrupted one runs again.

Parallel: ``--jobs`` chapters (default: the number of cores) execute at once, each in a worker
process, the longest (by its last build) first; every kernel runs ``--threads`` torch threads
(default 1), so a chapter computes the same bits alone or beside others.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from fedbook.sources import source_modules

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
NOTEBOOKS = ROOT / "notebooks"
TOC = BOOK / "_toc.yml"
EXERCISES = BOOK / "exercises"
DATA = BOOK / "data"
"""Saved measurements a chapter may read (``make bench`` writes them); a chapter's cache key covers
each file of it whose name the chapter's source mentions."""
PROFILES = ("smoke", "book", "paper")
DEFAULT_PROFILE = "book"
CLAIMS_RECORDS = "claims_records"
"""The glued key of a chapter's claims, copied into its record: :data:`fedbook.page.CLAIMS_RECORDS`
(the same text, checked by ``tests/test_commands.py``; not imported, so that the build checks its
arguments without importing torch)."""


def toc_files(toc: Path = TOC) -> list[str]:
    """Every file the table of contents names (the root first), in reading order."""
    files: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if "file" in node:
                files.append(str(node["file"]))
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or ():
                    walk(child)

    data = yaml.safe_load(toc.read_text())
    files.append(str(data["root"]))
    walk(data)
    return files


def chapter_names(toc: Path = TOC) -> list[str]:
    """The executed chapters the toc lists (entries ``chapters/<name>``), in toc order."""
    return [f.split("/", 1)[1] for f in toc_files(toc) if f.startswith("chapters/")]


def output_dir(profile: str) -> Path:
    """Where a profile's executed chapters, results and HTML go: ``book/`` or ``book/_<profile>/``."""
    return BOOK if profile == DEFAULT_PROFILE else BOOK / f"_{profile}"


def notebook_parameters(name: str) -> list[str]:
    """The names the chapter's cell tagged ``parameters`` assigns."""
    import jupytext

    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", ()):
            tree = ast.parse(cell.source)
            return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                    if isinstance(t, ast.Name)]
    raise SystemExit(f"notebooks/{name}.py has no cell tagged 'parameters'")


CACHE = "cache_dir"
"""A chapter whose parameters cell declares ``cache_dir`` runs its studies through
:func:`fedbook.study.run_study` with a cache: it gets ``<out>/cache`` (relative to ``notebooks/``),
where each cell's frames are kept under a key of what they depend on, so a re-execution (a change
of prose, a new seed) runs only the cells that changed. The folder is the profile's own."""

RECORDS = "records"
"""A chapter whose parameters cell declares ``records`` reads the build's own records (the
findings page: every chapter's claims; the teaching page: every chapter's run time and
exercises). It gets ``{profile: folder of that profile's chapter records}`` (relative to
``notebooks/``) and runs after the other chapters; such readers run one at a time in the order of
the table of contents, and a reader's cache key also covers every notebook's source and the
records of the other chapters and of the readers before it (not those after it: two readers
would otherwise invalidate each other on every build)."""

CONFIRM = BOOK / "_confirm"
"""Where confirmatory runs go (:func:`confirm`): ``_confirm/<profile>/`` holds ``plan.json``, the
executed ``chapters/`` with their records, the studies' ``cache/`` and each chapter's ``progress/`` log."""
CONFIRM_RECORDS = "confirm_records"
"""A chapter whose parameters cell declares ``confirm_records`` (the findings page) gets the folder of
the profile's confirmatory records, ``_confirm/<profile>/chapters`` (relative to ``notebooks/``),
whether or not one exists; its cache key covers the records there."""

SET_BY_BUILD = {"profile": "--profile", "results_dir": "--out (each chapter saves under <out>/results/<chapter>)",
                CACHE: "--out (the cells are kept under <out>/cache)", RECORDS: "--profile and --out (the records read are "
                "those of the build's chapters)", CONFIRM_RECORDS: "--profile (the confirmatory run of that profile)"}
"""The parameters the build gives a chapter itself (``-p`` may not: it would be silently overridden),
and the options that set them."""


def chapter_modules(name: str) -> list[Path]:
    """The files of fedlib and fedbook a chapter executes: the modules its code cells import and,
    transitively, everything they import (:func:`fedbook.sources.source_modules`)."""
    import jupytext

    cells = [c.source for c in jupytext.read(NOTEBOOKS / f"{name}.py").cells if c.cell_type == "code"]
    return source_modules("\n".join(cells), ROOT)


def cache_key(name: str, params: dict, threads: int = 1, later: frozenset[str] = frozenset()) -> str:
    """sha256 of the notebook source, the fedlib and fedbook modules it executes (:func:`chapter_modules`),
    the parameters, the kernel's torch ``threads`` (they can change the bits), the
    requirements, the files of :data:`DATA` the notebook names (and, for a chapter that reads the
    build's :data:`RECORDS`, every notebook, the exercises' files, this pipeline and every other
    chapter's record but those of ``later``: the readers that run after it)."""
    h = hashlib.sha256()
    h.update(f"threads={int(threads)}".encode())
    h.update((NOTEBOOKS / f"{name}.py").read_bytes())
    for path in chapter_modules(name):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    h.update(json.dumps(params, sort_keys=True).encode())
    h.update((ROOT / "requirements.txt").read_bytes())
    source = (NOTEBOOKS / f"{name}.py").read_text()
    for path in sorted(DATA.glob("*")):  # saved measurements the chapter reads (book/data/<file>, named in its source)
        if path.name in source:
            h.update(path.name.encode())
            h.update(path.read_bytes())
    if RECORDS in params:
        for path in [*sorted(NOTEBOOKS.glob("*.py")), *sorted(EXERCISES.glob("*.py")), Path(__file__).resolve()]:
            h.update(path.read_bytes())
        for folder in params[RECORDS].values():
            for path in sorted((NOTEBOOKS / folder).glob("*.json")):
                if path.stem != name and path.stem not in later:
                    h.update(path.name.encode())
                    h.update(path.read_bytes())
    if CONFIRM_RECORDS in params:  # the confirmatory records the page reads
        for path in sorted((NOTEBOOKS / params[CONFIRM_RECORDS]).glob("*.json")):
            h.update(b"confirm/" + path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def claims_of(notebook: Path) -> list[dict] | None:
    """The claims an executed chapter glued (:data:`CLAIMS_RECORDS`: one record per row of its
    claims table, in order), or ``None`` for a chapter without a claims table."""
    found = [v for k, v in glued_values(notebook).items() if k.endswith(CLAIMS_RECORDS)]
    if not found:
        return None
    return [row for text in found for row in _claims_rows(text)]


def _claims_rows(text: str) -> list[dict]:
    """The rows of a glued :data:`CLAIMS_RECORDS` value (its text is the repr of a JSON string)."""
    return json.loads(ast.literal_eval(text))


def parse_value(text: str):
    """``-p key=value`` values: Python literals where they parse (numbers, lists, None, True), else
    strings; values apart by commas are a list (``-p alphas=0.5,0.1`` is ``[0.5, 0.1]``)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return list(value) if isinstance(value, tuple) else value


UNKNOWN = type("Unknown", (), {"__repr__": lambda self: "<not a literal>"})()
"""What :func:`parameter_defaults` reads where the source holds no literal (a name, a call)."""


def _literal(node: ast.AST, names: dict):
    """The value of a node of a notebook's source where it is a literal, a ``{...}`` or
    ``dict(...)`` of literals or a name assigned one earlier; :data:`UNKNOWN` otherwise."""
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        pass
    if isinstance(node, ast.Name):
        return names.get(node.id, UNKNOWN)
    if isinstance(node, ast.Dict):
        keys = [_literal(k, names) if k is not None else None for k in node.keys]
        out = {}
        for key, value in zip(keys, node.values):
            if key is None:  # {**other}
                other = _literal(value, names)
                out.update(other if isinstance(other, dict) else {})
            elif key is not UNKNOWN:
                out[key] = _literal(value, names)
        return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        out = {}
        for arg in node.args:
            other = _literal(arg, names)
            out.update(other if isinstance(other, dict) else {})
        for kw in node.keywords:
            if kw.arg is None:
                other = _literal(kw.value, names)
                out.update(other if isinstance(other, dict) else {})
            else:
                out[kw.arg] = _literal(kw.value, names)
        return out
    return UNKNOWN


def parameter_defaults(name: str, profile: str) -> dict:
    """What each parameter of a chapter stands for at ``profile``, read from its source without
    running it: the parameters cell's value where it is not ``None``, else the value of the
    chapter's ``PROFILES[profile]`` that ``setup(PROFILES, profile, key=parameter)`` fills in;
    ``None`` (anything goes) where neither is a literal. The kinds :func:`check_parameters`
    holds a ``-p`` value to are these values' (as :func:`fedbook.page.setup` does in the kernel)."""
    tree = ast.parse((NOTEBOOKS / f"{name}.py").read_text())  # a percent-format notebook is Python
    names: dict = {}
    for node in tree.body:  # top-level NAME = literal, in order
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = _literal(node.value, names)
    declared = notebook_parameters(name)
    from_profile: dict = {}
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if (isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", None)) == "setup"
                and node.args and isinstance(node.args[0], ast.Name)):
            profiles = names.get(node.args[0].id)
            values = profiles.get(profile) if isinstance(profiles, dict) else None
            for kw in node.keywords if isinstance(values, dict) else ():
                if isinstance(kw.value, ast.Name) and kw.arg in values:
                    from_profile[kw.value.id] = values[kw.arg]
    out = {}
    for key in declared:
        value = names.get(key, UNKNOWN)
        if value is None:
            value = from_profile.get(key)
        out[key] = None if value is UNKNOWN else value
    return out


def _kind(value) -> str | None:
    """The kind a ``-p`` value must be of, by the value it replaces (``None``: any), in the words
    of :func:`fedbook.page.resolve`."""
    import numbers

    if value is None:
        return None
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, numbers.Integral):
        return "an integer"
    if isinstance(value, numbers.Real):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a dict"
    return None


def _kind_error(key: str, value, default) -> str | None:
    """Why ``value`` cannot replace ``default`` (the rules of :func:`fedbook.page.resolve`: an
    integer is a number, a list takes items of its items' kind, ``None`` keeps the default), or ``None``."""
    import math
    import numbers

    kind = _kind(default)
    if value is None or kind is None:
        return None
    integer = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    ok = {"true or false": isinstance(value, bool), "an integer": integer,
          "a number": integer or (isinstance(value, numbers.Real) and not isinstance(value, bool)),
          "a string": isinstance(value, str), "a list": isinstance(value, (list, tuple)),
          "a dict": isinstance(value, dict)}[kind]
    if not ok:
        return f"must be {kind} (like {default!r}), got {value!r}"
    if kind in ("an integer", "a number"):
        if not math.isfinite(value):
            return f"must be a finite number (like {default!r}), got {value!r}"
        if default >= 0 and value < 0:
            return f"must be >= 0 (like {default!r}), got {value!r}"
    if kind == "a list" and len(default) and len({_kind(d) for d in default}) == 1 and _kind(default[0]):
        for i, item in enumerate(value):
            why = _kind_error(key, item, default[0])
            if why:
                return f"item {i} {why}: every item must be like {default[0]!r}"
    return None


PARAMETER_SYNTAX = ("values are Python literals: -p seed=1, -p 'alphas=[0.5]' or -p alphas=0.5,0.1, "
                    "-p dataset=uci8, -p n_clients=None (the profile's)")
"""How ``-p`` values are written (the message of a refused one ends with it)."""


def check_parameters(names: list[str], profile: str, overrides: dict) -> None:
    """Refuse, before any kernel starts, a ``-p`` value of another kind than the value it replaces
    in a chapter that declares it (:func:`parameter_defaults` at ``profile``): one line naming the
    chapter, the parameter, the bad value, the kind expected and how to write it.

    A list where one value was given (``-p alphas=0.5``) says how to write the list; a parameter
    named ``*_root`` (a folder of data sets: ``cifar_root``) must name a folder that exists.
    """
    for key, value in overrides.items():  # a data folder the chapters would read (cifar_root=...)
        if key.endswith("_root") and isinstance(value, str) and not Path(value).expanduser().is_dir():
            raise SystemExit(f"-p {key}: no folder {value} (it must hold the data sets' folders, "
                             "e.g. cifar-10-batches-py/)")
    for name in names:
        defaults = parameter_defaults(name, profile)
        for key, value in overrides.items():
            if key not in defaults:
                continue
            why = _kind_error(key, value, defaults[key])
            if why:
                hint = (f"; for one value write -p '{key}=[{value!r}]'" if _kind(defaults[key]) == "a list"
                        and _kind(value) not in ("a list", None) else "")
                raise SystemExit(f"-p {key}: chapter {name} (profile {profile}) {why}{hint} ({PARAMETER_SYNTAX})")


def kernel_config():
    """The kernel manager's configuration for every chapter's kernel: CurveZMQ transport
    encryption where the kernel declares it (``transport_encryption = "auto"``; ipykernel's
    ``python3`` does), so that the kernel's messages on 127.0.0.1 are encrypted and it does not
    warn that they are not ("Kernel is running over TCP without encryption")."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport_encryption": "auto"}})


class Seconds(float):
    """A chapter's wall-clock seconds (the float), with ``cpu``: the CPU seconds its kernel and the
    kernel's own worker processes spent (user + system, from ``getrusage(RUSAGE_CHILDREN)`` around
    the execution: the kernel is this process's child and is reaped before the call returns).
    Wall time counts waiting (the Flower appendix polls its runtimes) and the other chapters of a
    parallel build sharing the cores; CPU time counts the work."""

    cpu: float = float("nan")


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def execute_chapter(name: str, params: dict, output: Path, *, cwd: Path = NOTEBOOKS) -> Seconds:
    """Execute ``notebooks/<name>.py`` with ``params`` into ``output`` (atomically); return its
    seconds (:class:`Seconds`: wall clock, and the CPU in ``.cpu``)."""
    import jupytext
    import papermill

    from fedlib.io import remove_stale_temporaries, temporary_sibling

    source = NOTEBOOKS / f"{name}.py"
    if not source.exists():
        valid = ", ".join(sorted(p.stem for p in NOTEBOOKS.glob("*.py")))
        raise SystemExit(f"no notebook {source}; valid chapters: {valid}")
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(output.parent)  # the notebooks an interrupted build left half written
    fd, tmp = temporary_sibling(output, suffix=".ipynb")  # named by this process: removed once it is gone
    os.close(fd)
    tmp = str(tmp)
    t0, cpu0 = time.perf_counter(), _children_cpu()
    try:
        papermill.execute_notebook(
            nb, tmp, parameters=params, kernel_name="python3", cwd=str(cwd), progress_bar=False,
            config=kernel_config(),
        )
    except BaseException:
        failed = output.with_suffix(".failed.ipynb")
        if Path(tmp).exists():
            os.replace(tmp, failed)
            print(f"chapter {name} failed; the partly executed notebook is {failed}", file=sys.stderr)
        raise
    collapse_injected(Path(tmp))
    os.replace(tmp, output)
    seconds = Seconds(time.perf_counter() - t0)
    seconds.cpu = _children_cpu() - cpu0
    return seconds


def handout(names: list[str], profile: str, overrides: dict, folder: Path, *, hints: bool = False) -> list[Path]:
    """A course's notebooks for a student and for the teacher (:func:`fedbook.course.write_handout`):
    each chapter with ``profile`` and ``overrides`` injected (papermill's ``prepare_only``: nothing
    executed, no output, no local path), to run in Jupyter from the repository's ``notebooks/``
    folder; ``<folder>/student/`` without the worked solutions and hints (with the hints where
    ``hints``), ``<folder>/teacher/`` with them and the graders. Returns the files written."""
    import jupytext
    import nbformat
    import papermill

    from fedbook.course import build_values, write_handout

    folder.mkdir(parents=True, exist_ok=True)
    prepared, params, values = {}, {}, {}
    for name in names:
        nb = jupytext.read(NOTEBOOKS / f"{name}.py")
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        declared = notebook_parameters(name)
        params[name] = {"profile": profile, **{k: v for k, v in overrides.items() if k in declared}}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.ipynb"
            papermill.execute_notebook(nb, str(path), parameters=params[name], prepare_only=True, kernel_name="python3",
                                       progress_bar=False, log_output=False)
            scrub_paths(path)
            prepared[name] = nbformat.read(path, as_version=4)
        values[name] = build_values(output_dir(profile) / "chapters" / f"{name}.ipynb", params[name],
                                    parameter_defaults(name, profile))
    written = write_handout(prepared, params, folder, ROOT, hints=hints, values=values)
    return written["student"] + written["teacher"]


def scrub_paths(path: Path) -> None:
    """Take what names the machine out of a notebook someone else will open: papermill's record of
    its input and output files (temporary paths of this machine, and the whole notebook again)
    and the ``results_dir`` and ``cache_dir`` it injected (the injected cell's line and the
    recorded parameter)."""
    import re

    import nbformat

    nb = nbformat.read(path, as_version=4)
    record = nb.metadata.get("papermill", {})
    for key in ("input_path", "output_path"):
        record.pop(key, None)
    for key in ("results_dir", CACHE):
        record.get("parameters", {}).pop(key, None)
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", ()):
            cell.source = re.sub(r"^(results_dir|cache_dir) = .*\n?", "", cell.source, flags=re.M)
    nbformat.write(nb, path)


def collapse_injected(path: Path) -> None:
    """Collapse papermill's injected-parameters cell on the page (``hide-input``, like the
    parameters cell it overrides): the values stay one click away, the reader starts at the text."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "hide-input" not in tags:
            tags.append("hide-input")
            changed = True
    if changed:
        nbformat.write(nb, path)


def stage_pages(out: Path) -> None:
    """Copy the book's own pages and the toc into ``out`` (next to its executed chapters) for rendering."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == BOOK
        exercises = Path(folder).is_relative_to(EXERCISES)  # their .py files are pages' downloads
        return {n for n in names if n == "__pycache__" or (n.endswith(".py") and not exercises)
                or (top and (n in ("chapters", "results", "cache", "fedbook") or (n.startswith("_") and (BOOK / n).is_dir())))}

    shutil.copytree(BOOK, out, ignore=ignore, dirs_exist_ok=True)


def _chapter_labels(name: str) -> tuple[str, list[str]]:
    """A chapter's title (its first ``# Title`` in markdown) and the labels (``(label)=``) its source declares."""
    import re

    source = (NOTEBOOKS / f"{name}.py").read_text(encoding="utf-8")
    title = re.search(r"^# # (.+)$", source, flags=re.M)
    return (title.group(1).strip() if title else name), re.findall(r"^# \(([\w.:-]+)\)=\s*$", source, flags=re.M)


def partial_toc(toc: dict, keep: set[str]) -> dict:
    """The table of contents ``toc`` (as read from ``_toc.yml``) without the chapters
    (``chapters/<name>`` entries) not in ``keep``, and without a part left empty by that; a kept
    section of a chapter left out takes that chapter's place."""
    import copy

    toc = copy.deepcopy(toc)

    def kept(entries: list) -> list:
        out = []
        for entry in entries:
            file = str(entry.get("file", ""))
            for key in ("chapters", "sections"):
                if entry.get(key):
                    entry[key] = kept(entry[key])
            if file.startswith("chapters/") and file.split("/", 1)[1] not in keep:
                out += [*(entry.get("sections") or ()), *(entry.get("chapters") or ())]
                continue
            out.append(entry)
        return out

    for key in ("chapters", "sections"):
        if toc.get(key):
            toc[key] = kept(toc[key])
    if toc.get("parts"):
        toc["parts"] = [part for part in toc["parts"] if kept(part.get("chapters") or [])]
        for part in toc["parts"]:
            part["chapters"] = kept(part["chapters"])
    return toc


def partial_config(out: Path, absent: list[str]) -> tuple[Path, Path]:
    """The configuration and table of contents of a render of only the chapters executed in
    ``out`` (written under ``out/_build/partial/``): the chapters in ``absent`` left out of the
    toc, and the extension ``book/_ext/partial.py`` told their pages, titles and labels, so that a
    reference to them prints as text instead of failing the render."""
    folder = out / "_build" / "partial"
    folder.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    sphinx = config.setdefault("sphinx", {})
    extensions = {k: str((ROOT / v).resolve()) for k, v in (sphinx.get("local_extensions") or {}).items()}
    sphinx["local_extensions"] = {**extensions, "partial": str(BOOK / "_ext")}
    labels = {f"chapters/{n}": dict(zip(("title", "labels"), _chapter_labels(n))) for n in absent}
    sphinx.setdefault("config", {})["fedbook_absent"] = labels
    toc = partial_toc(yaml.safe_load(TOC.read_text()), set(chapter_names()) - set(absent))
    (folder / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (folder / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    return folder / "_config.yml", folder / "_toc.yml"


def render_book(out: Path) -> int:
    """Render the book whose source folder is ``out`` (``book/`` or a staged copy) with warnings as errors.

    Where only some chapters are executed in ``out`` (``--only setting --out runs/x --render``),
    it renders those with the book's own pages (:func:`partial_config`): the other chapters are
    left out of the toc and the references to them print as text. Returns the exit status.
    """
    if out != BOOK:
        stage_pages(out)
    names = chapter_names()
    absent = [n for n in names if not (out / "chapters" / f"{n}.ipynb").exists()]
    if len(absent) == len(names):
        raise SystemExit(f"no executed chapter in {out / 'chapters'} to render")
    config, toc = ROOT / "_config.yml", out / "_toc.yml"
    if absent:
        config, toc = partial_config(out, absent)
        print(f"[render]   {len(names) - len(absent)} of {len(names)} chapters executed in {out / 'chapters'}: "
              f"rendering those and the book's own pages; references to the other {len(absent)} print as text",
              flush=True)
    cmd = [
        str(Path(sys.executable).parent / "jupyter-book"), "build", str(out),
        "--config", str(config), "--toc", str(toc), "--path-output", str(out),
        "-W", "-n", "--keep-going", "--all",
    ]
    print("[render]  ", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    html = out / "_build" / "html"
    if rc == 0:
        print(f"\nThe book is at {html / 'index.html'}")
        for name in names:
            if name not in absent and (html / "chapters" / f"{name}.html").exists():
                print(f"[page]     {name}: {html / 'chapters' / f'{name}.html'}")
    return rc


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Set for every chapter's kernel to the build's ``threads`` (1 by default), so that a chapter
computes the same bits whether the build runs it alone or next to others."""


def _with_threads(threads: int):
    """Context: the thread variables of :data:`THREAD_VARIABLES` set for kernels started inside it."""
    from fedbook.parallel import _environ  # imports torch: here, where executing a chapter does (fedlib.io) anyway

    return _environ(**{k: str(threads) for k in THREAD_VARIABLES})


def _started(i: int, n: int, name: str, params: dict, last_seconds, elapsed: float) -> None:
    before = f", last build {_minutes(last_seconds)}" if last_seconds is not None else ""
    print(f"[execute]  {name}  ({i} of {n}, {_minutes(elapsed)} elapsed{before})  {json.dumps(params)}", flush=True)


def _execute_in_worker(i: int, n: int, name: str, params: dict, output: Path, threads: int, last_seconds,
                       t0_wall: float) -> float:
    """One chapter in a worker process of a parallel build (its kernel gets ``threads``); it says
    when it starts."""
    _started(i, n, name, params, last_seconds, time.time() - t0_wall)
    with _with_threads(threads):
        return execute_chapter(name, params, output)


def _reason(err: BaseException) -> str:
    """The first non-empty line of an error (papermill's start with a blank line)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


def longest_first(todo: list[tuple], hints: dict[str, float]) -> list[tuple]:
    """The planned chapters ``(name, ..., last seconds)``, the longest expected first: by this
    profile's last build, else by ``hints`` (the chapter's seconds at another profile), and a
    chapter with neither first (it may be the longest)."""
    def expected(t) -> float:
        return t[-1] if t[-1] is not None else hints.get(t[0], float("inf"))

    return sorted(todo, key=lambda t: -expected(t))


def _run(todo: list[tuple], jobs: int, threads: int, t0: float, hints: dict[str, float] | None = None,
         own_logs: dict[str, str] | None = None) -> None:
    """Execute the planned chapters, ``jobs`` at a time (the longest last build first; a chapter
    this profile never built is placed by ``hints``, its seconds at another profile), writing
    each record as its chapter finishes; after a failure the waiting chapters are cancelled, the
    running ones finish, and the first failure is raised. ``own_logs``: the progress log the
    build set for a chapter (its ``progress`` parameter), the only log a record's ``"studies"``
    are read from (a user's ``-p progress=FILE`` is shared by every chapter and not emptied)."""
    from fedlib.io import atomic_write_json

    def finished(name: str, params: dict, key: str, meta: Path, seconds: float) -> None:
        record = {"key": key, "params": {k: v for k, v in params.items() if k != PROGRESS}, "seconds": round(seconds, 2)}
        if getattr(seconds, "cpu", None) is not None and seconds.cpu == seconds.cpu:
            record["cpu_seconds"] = round(seconds.cpu, 2)  # the work, without the waiting (Seconds)
            escapes = cpu_escapes(name, params)
            if escapes:
                record["cpu_escapes"] = escapes
        if params.get(PROGRESS) and (own_logs or {}).get(name) == params[PROGRESS]:
            studies = studies_of(NOTEBOOKS / params[PROGRESS])
            if studies:
                record["studies"] = studies
        claims = claims_of(meta.with_suffix(".ipynb"))
        if claims is not None:
            record["claims"] = claims
            seeds = pilot_seeds(name, params)
            if seeds:
                record["seeds"] = seeds  # what sizes a confirmatory run of this build (fedbook.confirm.plan)
        atomic_write_json(meta, record)
        print(f"[done]     {name}  {seconds:.1f} s", flush=True)

    if jobs <= 1 or len(todo) <= 1:
        for i, (name, params, key, output, meta, last_seconds) in enumerate(todo, 1):
            _started(i, len(todo), name, params, last_seconds, time.perf_counter() - t0)
            with _with_threads(threads):
                seconds = execute_chapter(name, params, output)
            finished(name, params, key, meta, seconds)
        return
    import concurrent.futures
    import multiprocessing

    order = longest_first(todo, hints or {})
    errors = []
    t0_wall = time.time() - (time.perf_counter() - t0)
    with concurrent.futures.ProcessPoolExecutor(min(jobs, len(todo)), mp_context=multiprocessing.get_context("spawn")) as pool:
        running = {}
        for i, (name, params, key, output, meta, last_seconds) in enumerate(order, 1):
            future = pool.submit(_execute_in_worker, i, len(todo), name, params, output, threads, last_seconds, t0_wall)
            running[future] = (name, params, key, meta)
        for future in concurrent.futures.as_completed(running):
            name, params, key, meta = running[future]
            if future.cancelled():
                continue
            try:
                finished(name, params, key, meta, future.result())
            except BaseException as err:  # the running ones finish, the waiting ones are cancelled
                print(f"[failed]   {name}: {_reason(err)}", file=sys.stderr, flush=True)
                errors.append(err)
                for other in running:
                    other.cancel()
    if errors:
        raise errors[0]


def build(profile: str, only: list[str] | None, overrides: dict, render: bool, force: bool,
          out: Path | None = None, *, jobs: int = 1, threads: int = 1) -> int:
    """Execute the chapters (``only``, or every chapter of the toc) into ``out``, then render if asked.

    ``out`` defaults to :func:`output_dir` of the profile; ``overrides`` are the ``-p`` parameters.
    ``jobs`` chapters execute at once (each in a worker process of its own; the chapters that read
    the build's records after the others), each kernel with ``threads`` torch threads.
    """
    if int(jobs) < 1 or int(threads) < 1:
        raise SystemExit(f"jobs and threads must be >= 1, got jobs={jobs}, threads={threads}")
    if profile not in PROFILES:
        raise SystemExit(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    names = chapter_names()
    if only:
        bad = [n for n in only if n not in names]
        if bad:
            raise SystemExit(f"unknown chapter(s) {', '.join(bad)}; valid: {', '.join(names)}")
        names = only
    declared = {name: notebook_parameters(name) for name in names}
    clash = sorted(set(overrides) & set(SET_BY_BUILD))  # the build sets these itself, after the -p parameters
    if clash:
        raise SystemExit(f"-p {clash[0]}=... is set by the build, not by -p: give {SET_BY_BUILD[clash[0]]}")
    unknown = sorted(set(overrides) - {p for ps in declared.values() for p in ps})
    if unknown:
        valid = sorted({p for ps in declared.values() for p in ps})
        raise SystemExit(f"unknown parameter(s) {', '.join(unknown)} for {', '.join(names)}; valid: {', '.join(valid)}")
    check_parameters(names, profile, overrides)  # the kinds too, before any kernel starts
    out = Path(out) if out is not None else output_dir(profile)
    chapters, results = out / "chapters", out / "results"

    records = {p: os.path.relpath(chapters if p == profile else output_dir(p) / "chapters", NOTEBOOKS)
               for p in PROFILES}

    hints: dict[str, float] = {}
    own_logs: dict[str, str] = {}  # the progress logs the build set itself: the records' "studies"

    # the chapters that read the build's records run last, once the others' records are written,
    # one at a time in the toc's order: each reads the records of the readers before it
    all_readers = [n for n in chapter_names() if RECORDS in notebook_parameters(n)]
    readers = [n for n in all_readers if n in names]

    def plan(group: list[str]) -> list[tuple]:
        todo = []
        for name in group:
            params = {"profile": profile, **{k: v for k, v in overrides.items() if k in declared[name]}}
            if "results_dir" in declared[name]:  # a chapter that saves results declares where
                # relative to the notebooks' working directory, so no local path shows in the book
                params["results_dir"] = os.path.relpath(results / name, NOTEBOOKS)
            if CACHE in declared[name]:  # a chapter whose studies keep their cells (fedbook.study)
                params[CACHE] = os.path.relpath(out / "cache", NOTEBOOKS)
            if RECORDS in declared[name]:
                params[RECORDS] = records
            if CONFIRM_RECORDS in declared[name]:
                params[CONFIRM_RECORDS] = os.path.relpath(CONFIRM / profile / "chapters", NOTEBOOKS)
            later = frozenset(all_readers[all_readers.index(name) + 1:]) if name in all_readers else frozenset()
            key = cache_key(name, params, threads, later)
            output, meta = chapters / f"{name}.ipynb", chapters / f"{name}.json"
            last = json.loads(meta.read_text()) if meta.exists() else {}
            if not force and output.exists() and last.get("key") == key:
                print(f"[cached]   {name}")
                continue
            if PROGRESS in declared[name] and PROGRESS not in params:  # its studies' log: the record's "studies"
                log = out / "progress" / f"{name}.log"  # (not in the key: where a log goes changes no number)
                log.parent.mkdir(parents=True, exist_ok=True)
                log.unlink(missing_ok=True)
                params = {**params, PROGRESS: os.path.relpath(log, NOTEBOOKS)}
                own_logs[name] = params[PROGRESS]
            todo.append((name, params, key, output, meta, last.get("seconds")))
            for p in PROFILES:  # a cold build orders by the other profiles' times (the smoke build runs first)
                other = (chapters if p == profile else output_dir(p) / "chapters") / f"{name}.json"
                if name not in hints and other.exists() and "seconds" in json.loads(other.read_text()):
                    hints[name] = float(json.loads(other.read_text())["seconds"])
        return todo

    t0 = None
    for group in ([n for n in names if n not in readers], *([r] for r in readers)):
        todo = plan(group)
        t0 = time.perf_counter() if t0 is None else t0  # elapsed: from the first execution on
        known = [t[-1] for t in todo if t[-1] is not None]
        if todo:
            estimate = f"; the last builds took {_minutes(sum(known))}" if len(known) == len(todo) else ""
            workers = f", {min(jobs, len(todo))} at a time" if jobs > 1 and len(todo) > 1 else ""
            print(f"[plan]     {len(todo)} chapter(s) to execute{workers}{estimate}", flush=True)
        _run(todo, jobs, threads, t0, hints, own_logs)
    print(f"[built]    {len(names)} chapter(s) in {_minutes(time.perf_counter() - t0)}", flush=True)
    where(out, names)
    return render_book(out) if render else 0


CPU_ESCAPES = {
    "flower": "Flower starts each ClientApp as a process that no process waits for, so their CPU reaches no "
              "parent's count: cpu_seconds counts a fraction of the appendix's work",
}
"""The chapters whose work runs partly in processes the build cannot count (:class:`Seconds`):
their record says why (``cpu_escapes``), and a cost reads their wall seconds instead
(:func:`fedbook.confirm.chapter_seconds`)."""

EXECUTORS_COUNTED = (None, "process")
"""The ``executor`` parameters whose study workers the build's CPU count sees: none (this kernel)
and the kernel's own pool of forked processes. A Ray instance's workers are no child of the
kernel (:func:`cpu_escapes`)."""


def cpu_escapes(name: str, params: dict) -> str | None:
    """Why the CPU count (:class:`Seconds`) misses part of chapter ``name``'s work with ``params``,
    or ``None``: a chapter of :data:`CPU_ESCAPES`, or studies run on Ray (an ``executor`` other
    than those of :data:`EXECUTORS_COUNTED`), whose workers ``getrusage`` does not see.

    Examples
    --------
    >>> cpu_escapes("setting", {"executor": None}) is None, cpu_escapes("setting", {"executor": "process"}) is None
    (True, True)
    >>> cpu_escapes("setting", {"executor": "ray"})[:42]
    "the chapter's studies ran on Ray (executor"
    >>> cpu_escapes("flower", {}) == CPU_ESCAPES["flower"]
    True
    """
    reasons = [CPU_ESCAPES[name]] if name in CPU_ESCAPES else []
    if params.get("executor") not in EXECUTORS_COUNTED:
        reasons.append(f"the chapter's studies ran on Ray (executor={params['executor']!r}), whose worker processes "
                       f"are no children of the kernel, so getrusage does not see them: cpu_seconds counts a "
                       f"fraction of the chapter's work")
    return "; ".join(reasons) or None

PROGRESS = "progress"
"""The parameter by which a chapter's studies log each finished cell (:func:`fedbook.study.run_study`)."""


def studies_of(log: Path, start: int = 0) -> list[dict]:
    r"""What a chapter's studies cost and ran, from their progress log (the JSON events of
    :func:`fedbook.study.run_study`), one entry per study run in the order they ran: ``study``,
    ``cells``, ``cached`` (cells read from the cache), ``cached_seconds`` (what those took when
    they were computed), ``computed_seconds`` (the cells computed in this execution) and ``seeds``.
    A chapter's record keeps them (``"studies"``), so its cost counts the cells a warm cache
    served, and its seeds are every seed its studies ran (a confirmatory plan's fresh seeds
    must avoid them all). ``start``: the byte of the log where this execution's lines begin (a
    confirmatory run appends to the log of the run it resumes).

    Examples
    --------
    >>> import tempfile
    >>> log = Path(tempfile.mkdtemp()) / "x.log"
    >>> _ = log.write_text('{"event": "start", "study": "main", "total": 3, "cached": 1, "seeds": [0, 1, 2], '
    ...                    '"cached_seconds": 4.0}\n{"event": "cell", "study": "main", "seconds": 2.5}\n'
    ...                    '{"event": "cell", "study": "main", "seconds": 3.5}\n{"event": "cell", "stu')
    >>> studies_of(log)
    [{'study': 'main', 'cells': 3, 'cached': 1, 'cached_seconds': 4.0, 'computed_seconds': 6.0, 'seeds': [0, 1, 2]}]
    """
    out: list[dict] = []
    if not log.exists():
        return out
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", errors="replace")
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a line cut short
            continue
        if event.get("event") == "start":
            out.append({"study": event["study"], "cells": int(event.get("total", 0)), "cached": int(event.get("cached", 0)),
                        "cached_seconds": float(event.get("cached_seconds") or 0.0), "computed_seconds": 0.0,
                        "seeds": sorted(int(s) for s in event.get("seeds", []))})
        elif event.get("event") == "cell" and out and out[-1]["study"] == event.get("study"):
            out[-1]["computed_seconds"] += float(event.get("seconds") or 0.0)
    for entry in out:
        entry["cached_seconds"], entry["computed_seconds"] = (round(entry["cached_seconds"], 2),
                                                              round(entry["computed_seconds"], 2))
    return out


def pilot_seeds(name: str, params: dict) -> dict:
    """The run seeds a chapter executed with ``params`` used: its ``seed`` and its seed parameters
    (:func:`fedbook.confirm.seed_parameters`: ``n_seeds``, ``side_seeds``, ...), each the value
    passed or else the profile's (:func:`parameter_defaults`); ``{}`` for a chapter without them."""
    from fedbook.confirm import seed_parameters

    tiers = seed_parameters(notebook_parameters(name))
    if not tiers or "seed" not in notebook_parameters(name):
        return {}
    defaults = parameter_defaults(name, params.get("profile", DEFAULT_PROFILE))
    return {k: params[k] if params.get(k) is not None else defaults.get(k) for k in ["seed", *tiers]}


def _show_plan(plan, profile: str) -> None:
    """Print a confirmatory plan: one line per open claim, then per chapter its seeds and estimated time."""
    print(f"[confirm]  plan from the {profile} build's records: power {plan.power:g}, at most {plan.cap} seeds a claim, "
          f"fresh seeds from {plan.first_seed}", flush=True)
    for r in plan.to_dict()["claims"]:
        planned = f"{r['planned_n']} fresh seeds" if r["planned_n"] is not None else f"not planned: {r['reason']}"
        head = " (headline)" if r["headline"] else ""
        print(f"[claim]    {r['chapter']}  {r['key']}{head}  pilot: {r['pilot_verdict']}, {r['pilot_n']} seeds  ->  {planned}",
              flush=True)
    for c in plan.chapters.to_dict("records"):
        estimate = (f", about {_minutes(c['estimated_seconds'])} of CPU (fedbook.confirm.estimate_seconds: the pilot's "
                    "fixed part and its studies' seconds per seed times the planned seeds)"
                    if c["estimated_seconds"] is not None else "")
        print(f"[chapter]  {c['chapter']}: {c['seeds']} fresh seeds ({c['first_seed']}..{c['first_seed'] + c['seeds'] - 1}) "
              f"for {c['claims']} open claim(s){estimate}; parameters {json.dumps(c['parameters'])}", flush=True)
    if plan.chapters.empty:
        print("[confirm]  no open claim can be planned: nothing to run", flush=True)


def progress_line(text: str) -> str:
    """A line of a study's progress log (:func:`fedbook.study.run_study`'s JSON events) as the
    command prints it: the study, the cells done of its total, those read from the cache, the time
    left; a line that is not such an event as it is.

    Examples
    --------
    >>> progress_line('{"event": "cell", "study": "main", "done": 3, "total": 6, "cached": 1, "eta": 65.2}')
    'main: 3 of 6 cells (1 from the cache, about 1 min 05 s left)'
    >>> progress_line('{"event": "retry", "study": "main", "done": 3, "total": 6, "cached": 0, "error": "Killed"}')
    'main: 3 of 6 cells (retry: Killed)'
    """
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        return text
    if not isinstance(event, dict) or "study" not in event:
        return text
    said = []
    if event.get("cached"):
        said.append(f"{event['cached']} from the cache")
    if event.get("event") in ("retry", "failed"):
        said.append(f"{event['event']}: {event.get('error', '')}")
    elif event.get("event") == "cell" and isinstance(event.get("eta"), (int, float)) and event.get("done") != event.get("total"):
        said.append(f"about {_minutes(event['eta'])} left")
    return (f"{event['study']}: {event.get('done', '?')} of {event.get('total', '?')} cells"
            + (f" ({', '.join(said)})" if said else ""))


def _execute_showing(name: str, params: dict, output: Path, progress: Path | None, threads: int) -> float:
    """:func:`execute_chapter` in a thread, printing the new lines of its progress log as they come."""
    import threading

    done: dict = {}

    def run() -> None:
        try:
            with _with_threads(threads):
                done["seconds"] = execute_chapter(name, params, output)
        except BaseException as err:  # re-raised in the caller's thread
            done["error"] = err

    offset = progress.stat().st_size if progress is not None and progress.exists() else 0  # the new lines only
    worker = threading.Thread(target=run, daemon=True)
    worker.start()

    def show() -> None:
        nonlocal offset
        if progress is not None and progress.exists():
            with open(progress, encoding="utf-8") as f:
                f.seek(offset)
                text = f.read()
            complete = text[: text.rfind("\n") + 1]
            offset += len(complete.encode("utf-8"))
            for line in complete.splitlines():
                print(f"[progress] {name}: {progress_line(line)}", flush=True)

    while worker.is_alive():
        worker.join(1.0)
        show()
    show()
    if "error" in done:
        raise done["error"]
    return done["seconds"]


def confirm(profile: str, only: list[str] | None, overrides: dict, *, power: float, cap: int, first_seed: int,
            threads: int = 1, plan_only: bool = False, plan_file: Path | None = None, out: Path | None = None) -> int:
    """A confirmatory run (:mod:`fedbook.confirm`): plan it from the ``profile`` build's records,
    print and save the plan (``_confirm/<profile>/plan.json``), then execute each planned chapter
    (``only``: those of them) on the plan's fresh seeds into ``_confirm/<profile>/chapters/``,
    writing its record with ``"claims"``, ``"confirmatory"`` (the plan's rows, the seeds and the
    pilot record's key it was planned from), ``"cpu_seconds"`` and ``"studies"`` (:func:`studies_of`,
    this execution's lines of the chapter's progress log). A chapter's key leaves out
    ``executor``, ``workers`` and ``progress``: a finished chapter is not executed again when the
    same plan resumes on another executor. It covers the ``"confirmatory"`` block (the pilot
    record's key, the planned rows): a plan from another pilot build executes the chapter again.

    The studies keep their cells in ``_confirm/<profile>/cache`` (so a killed run, run again with the
    same plan, reads the cells it finished) and append a line per finished cell to
    ``_confirm/<profile>/progress/<chapter>.log``, which the command prints as it comes. ``overrides``
    are the ``-p`` parameters that the plan does not set (``executor``, ``workers``, ``threads``).
    ``plan_file``: execute that plan (a ``plan.json`` of an earlier run, or one made by hand)
    instead of planning, checked as a plan is (:func:`fedbook.confirm.check_plan`: its settings,
    its fresh seeds against every seed the pilot ran, the pilot build it was made from; here its
    profile against ``profile`` and its parameters against each chapter's seed parameters);
    ``out``: the folder instead of ``_confirm/<profile>``.
    """
    from fedbook.confirm import ConfirmPlan, check_plan, seed_parameters
    from fedbook.confirm import plan as make_plan
    from fedlib.io import atomic_write_json

    if profile not in PROFILES:
        raise SystemExit(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    pilot = output_dir(profile) / "chapters"
    names = [n for n in chapter_names() if (pilot / f"{n}.json").exists()]
    given = {}
    for name in names:
        record = json.loads((pilot / f"{name}.json").read_text())
        if record.get("claims") and "seeds" not in record:  # a record of a build before the seeds were recorded
            given[name] = pilot_seeds(name, record.get("params", {"profile": profile}))
    unchecked = []
    try:
        if plan_file is None:
            plan = make_plan(pilot, power=power, cap=cap, first_seed=first_seed, pilot_seeds=given)
        else:
            data = json.loads(Path(plan_file).read_text())
            if data.get("profile", profile) != profile:
                raise ValueError(f"the plan {plan_file} is of the {data['profile']!r} build, not of --profile {profile}")
            plan = ConfirmPlan.from_dict(data)
            for c in plan.chapters.to_dict("records"):
                if c["chapter"] not in chapter_names():
                    raise ValueError(f"the plan names chapter {c['chapter']!r}; valid: {', '.join(chapter_names())}")
                tiers = {"seed", *seed_parameters(notebook_parameters(c["chapter"]))}
                if not isinstance(c["parameters"], dict) or set(c["parameters"]) != tiers:
                    raise ValueError(f"chapter {c['chapter']}: the plan's parameters must be its seed and seed parameters "
                                     f"{sorted(tiers)}, got {c['parameters']!r}")
            unchecked = check_plan(plan, pilot, pilot_seeds=given)
    except (ValueError, KeyError, TypeError, OSError) as err:
        raise SystemExit(f"--confirm: {err}")
    for name in unchecked:
        print(f"[confirm]  {name}: no record of the {profile} build to check the plan's fresh seeds against", flush=True)
    if only:
        bad = [n for n in only if n not in set(plan.chapters["chapter"])]
        if bad:
            raise SystemExit(f"--only {', '.join(bad)}: no planned claim in that chapter; planned: "
                             f"{', '.join(plan.chapters['chapter']) or 'none'}")
        plan = type(plan)(plan.claims[plan.claims["chapter"].isin(only)].reset_index(drop=True),
                          plan.chapters[plan.chapters["chapter"].isin(only)].reset_index(drop=True),
                          plan.power, plan.cap, plan.first_seed)
    _show_plan(plan, profile)
    out = Path(out) if out is not None else CONFIRM / profile
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "plan.json", {"profile": profile, **plan.to_dict()})
    print(f"[output]   the plan: {out / 'plan.json'}", flush=True)
    if plan_only or plan.chapters.empty:
        return 0
    todo = []
    for c in plan.chapters.to_dict("records"):
        name = c["chapter"]
        declared = notebook_parameters(name)
        set_by_plan = sorted(set(overrides) & {"seed", *seed_parameters(declared)})
        if set_by_plan:
            raise SystemExit(f"-p {set_by_plan[0]}: the confirmatory plan sets the seeds itself (--first-seed, --power, --cap)")
        missing = sorted(k for k in overrides if k not in declared)
        if missing:
            raise SystemExit(f"-p {missing[0]}: chapter {name} declares no such parameter (valid: {', '.join(declared)})")
        params = {"profile": profile, **overrides, **c["parameters"]}
        if CACHE in declared:
            params[CACHE] = os.path.relpath(out / "cache", NOTEBOOKS)
        if "results_dir" in declared:
            params["results_dir"] = os.path.relpath(out / "results" / name, NOTEBOOKS)
        progress = None
        if "progress" in declared:
            progress = out / "progress" / f"{name}.log"
            progress.parent.mkdir(parents=True, exist_ok=True)
            params["progress"] = os.path.relpath(progress, NOTEBOOKS)
        todo.append((name, params, progress, c))
    check_parameters([t[0] for t in todo], profile, overrides)
    t0 = time.perf_counter()
    for i, (name, params, progress, c) in enumerate(todo, 1):
        output, meta = out / "chapters" / f"{name}.ipynb", out / "chapters" / f"{name}.json"
        planned_from = c.get("pilot_key")
        if planned_from is None and (pilot / f"{name}.json").exists():  # a plan made by hand: checked against this pilot
            planned_from = json.loads((pilot / f"{name}.json").read_text()).get("key")
        first = int(c["parameters"]["seed"])
        confirmatory = {"profile": profile, "power": plan.power, "cap": plan.cap, "first_seed": plan.first_seed,
                        "pilot_key": planned_from, "seeds": list(range(first, first + int(c["seeds"]))),
                        "rows": plan.rows(name)}
        # the key covers the record's confirmatory block (its pilot and planned rows): a plan from another pilot
        # executes the chapter again rather than keep a record that names the earlier one
        key = cache_key(name, {**{k: v for k, v in params.items() if k not in ("progress", "executor", "workers")},
                               "(confirmatory)": json.loads(json.dumps(confirmatory, default=str))}, threads)
        last = json.loads(meta.read_text()) if meta.exists() else {}
        if output.exists() and last.get("key") == key:
            print(f"[cached]   {name}", flush=True)
            continue
        _started(i, len(todo), name, params, None, time.perf_counter() - t0)
        start = progress.stat().st_size if progress is not None and progress.exists() else 0  # this run's lines
        seconds = _execute_showing(name, params, output, progress, threads)
        record = {"key": key, "params": params, "seconds": round(seconds, 2)}
        if getattr(seconds, "cpu", None) is not None and seconds.cpu == seconds.cpu:
            record["cpu_seconds"] = round(seconds.cpu, 2)
            escapes = cpu_escapes(name, params)
            if escapes:
                record["cpu_escapes"] = escapes
        if progress is not None:
            record["studies"] = studies_of(progress, start)
        record.update({"claims": claims_of(output) or [], "seeds": pilot_seeds(name, params),
                       "confirmatory": confirmatory})
        atomic_write_json(meta, record)
        print(f"[done]     {name}  {seconds:.1f} s", flush=True)
    print(f"[built]    {len(todo)} confirmatory chapter(s) in {_minutes(time.perf_counter() - t0)}", flush=True)
    where(out, [t[0] for t in todo])
    return 0


def where(out: Path, names: list[str]) -> None:
    """Say where the build's output is: each chapter's executed notebook and record, its saved
    results and the study cache (those that exist)."""
    for name in names:
        notebook = out / "chapters" / f"{name}.ipynb"
        if notebook.exists():
            results = out / "results" / name
            also = f"; results {results}" if results.is_dir() else ""
            print(f"[output]   {name}: {notebook} (record {notebook.with_suffix('.json').name}{also})", flush=True)
    if (out / "cache").is_dir():
        print(f"[output]   the studies' cells: {out / 'cache'}", flush=True)


def glued_values(path: Path) -> dict[str, str]:
    """The values an executed chapter glued (``myst_nb.glue``), as the text the page shows: key -> text
    (:func:`fedbook.course.glued_values`, imported when needed: the build's argument checks stay light)."""
    from fedbook.course import glued_values as read

    return read(path)


def _as_number(text: str) -> float | None:
    try:
        return float(text.strip().strip("'\""))
    except ValueError:
        return None


MEASURED_KEYS = r"seconds|minutes|time|measured"
"""Glued keys that hold a measurement of the machine (a time, a memory peak): they differ from
machine to machine and run to run, and their key says so (``seconds``, ``minutes``, ``time`` or
``measured`` in it). :func:`compare` leaves them out unless told otherwise."""


CLAIMS_FIELDS = ("verdict", "mean", "low", "high", "n")
"""What :func:`compare` reads of a claims record: its verdict and its interval (not the anchor of
its row on the page, which names the table and changes with any of its numbers)."""


def claims_rows_apart(values: dict[str, str]) -> dict[str, str]:
    """Glued values with each :data:`CLAIMS_RECORDS` value split into one value per claim and field
    of :data:`CLAIMS_FIELDS` (key ``<glued key>[<claim key>].<field>``), so that :func:`compare`
    reports the one claim whose interval moved (a claim about time is then a measurement by its
    key, left out with the others) instead of the whole table."""
    out = {}
    for key, text in values.items():
        if not key.endswith(CLAIMS_RECORDS):
            out[key] = text
            continue
        for row in _claims_rows(text):
            for field in CLAIMS_FIELDS:
                out[f"{key}[{row['key']}].{field}"] = str(row.get(field))
    return out


SITE_NOTEBOOKS = "_sources/chapters"
"""Where a rendered site keeps each chapter's executed notebook (the page's download,
``<site>/_sources/chapters/<name>.ipynb``): what :func:`compare` reads of a published book."""


def reference_notebook(reference: str | Path, name: str):
    """The executed notebook of chapter ``name`` in ``reference``, as ``nbformat`` reads it (a path
    or an open file), or ``None`` where it has none: ``reference`` is a build's folder
    (``<folder>/chapters/<name>.ipynb``), a rendered site's html folder
    (``<site>/_sources/chapters/<name>.ipynb``) or the URL of a rendered site (``https://...``,
    ``file://...``; the same ``_sources`` path under it)."""
    import io
    import urllib.error
    import urllib.request

    text = str(reference)
    if "://" in text:
        url = f"{text.rstrip('/')}/{SITE_NOTEBOOKS}/{name}.ipynb"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return io.StringIO(response.read().decode("utf-8"))
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise SystemExit(f"cannot read {url}: {err}") from None
        except (urllib.error.URLError, OSError) as err:
            if isinstance(getattr(err, "reason", None), FileNotFoundError) or isinstance(err, FileNotFoundError):
                return None
            raise SystemExit(f"cannot read {url}: {getattr(err, 'reason', err)}") from None
    for path in (Path(reference) / "chapters" / f"{name}.ipynb", Path(reference) / SITE_NOTEBOOKS / f"{name}.ipynb"):
        if path.exists():
            return path
    return None


def compare(reference: str | Path, other: Path, rtol: float = 0.0, skip: str | None = MEASURED_KEYS
            ) -> tuple[list[dict], int]:
    """The glued values of the chapters executed in ``other`` (``<other>/chapters/*.ipynb``) against
    the same chapters in ``reference`` (a build's folder, a rendered site's html folder or its URL:
    :func:`reference_notebook`): one row per value that differs (numbers beyond ``rtol``, relative)
    or that only one side has, and how many values were compared (the keys of either side, less
    those matching the regular expression ``skip``, by default :data:`MEASURED_KEYS`)."""
    import re

    skipped = re.compile(skip) if skip else None
    compared = 0
    rows = []
    theirs = {p.stem: p for p in (other / "chapters").glob("*.ipynb") if not p.name.endswith(".failed.ipynb")}
    if not theirs:
        raise SystemExit(f"no executed chapter in {other / 'chapters'}; run book/build.py --out {other} first")
    for name, path in sorted(theirs.items()):
        ours_path = reference_notebook(reference, name)
        if ours_path is None:
            raise SystemExit(f"{name} is not executed in {reference}: build it there (make book), or compare "
                             "with the published book: --against https://<owner>.github.io/<repository>/ "
                             "(or a rendered site's html folder)")
        a, b = claims_rows_apart(glued_values(ours_path)), claims_rows_apart(glued_values(path))
        for key in sorted(set(a) | set(b)):
            if skipped is not None and skipped.search(key):
                continue
            compared += 1
            x, y = a.get(key), b.get(key)
            nx, ny = _as_number(x or ""), _as_number(y or "")
            if x is not None and y is not None and nx is not None and ny is not None:
                same = nx == ny or abs(nx - ny) <= rtol * max(abs(nx), abs(ny)) or (nx != nx and ny != ny)
            else:
                same = x == y
            if not same:
                rows.append({"chapter": name, "key": key, "reference": x, "yours": y})
    return rows, compared


def shown(x: str | None, y: str | None) -> tuple[str, str]:
    """Two glued values as :func:`compare`'s report prints them: numbers with the fewest
    significant digits (at least 4) that tell them apart, not a float's 17
    (``25.999999999999996`` -> ``26``), a missing value as ``(none)``.

    >>> shown("25.999999999999996", "26.5")
    ('26', '26.5')
    >>> shown("0.1234567", "0.1234599")
    ('0.123457', '0.12346')
    >>> shown("'FedAvg'", None)
    ("'FedAvg'", '(none)')
    """
    nx, ny = _as_number(x or ""), _as_number(y or "")
    if x is None or y is None or nx is None or ny is None:
        return tuple("(none)" if v is None else (f"{n:.6g}" if n is not None else v) for v, n in ((x, nx), (y, ny)))
    for digits in range(4, 18):
        a, b = f"{nx:.{digits}g}", f"{ny:.{digits}g}"
        if a != b:
            return a, b
    return a, b


def _minutes(seconds: float) -> str:
    """``"4 min 05 s"`` / ``"38 s"``: a duration for the progress lines."""
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=DEFAULT_PROFILE,
                        help=f"one of {', '.join(PROFILES)} (default: {DEFAULT_PROFILE}; the others build into book/_<profile>/)")
    parser.add_argument("--only", nargs="*", help="execute only these chapters (default: all in the toc)")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a notebook parameter, e.g. -p seed=1 -p alphas='[0.5, 0.1]'")
    parser.add_argument("--no-render", action="store_true", help="execute the chapters, do not render HTML")
    parser.add_argument("--force", action="store_true", help="re-execute even where the cache is valid")
    parser.add_argument("--out", help="write executed chapters and results under this folder instead "
                        "(implies --no-render unless --render; for experiments that must not touch the book)")
    parser.add_argument("--render", action="store_true",
                        help="with --out: render the HTML there too (every chapter of the toc must be executed there)")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                        help="chapters executed at once, each in its own process (default: the number of cores)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of each chapter's kernel (default 1: the same bits however many run at once)")
    parser.add_argument("--handout", metavar="DIR",
                        help="write each chosen chapter (--only) with --profile and -p injected, not executed: "
                        "DIR/student/ without the worked solutions and hints (the notebooks to hand out), "
                        "DIR/teacher/ with them and the graders (book/grade.py)")
    parser.add_argument("--hints", action="store_true",
                        help="with --handout: keep the hints in the student's notebooks (never the worked solutions)")
    parser.add_argument("--compare", metavar="DIR",
                        help="compare the glued values of the chapters executed in DIR (a --out folder) with "
                        "the profile's own build (or --against); prints what differs, executes nothing")
    parser.add_argument("--against", metavar="FOLDER_OR_URL",
                        help="with --compare: the build to compare with instead of the profile's own: a build's "
                        "folder, a rendered site's html folder or the URL of the published book "
                        "(https://<owner>.github.io/<repository>/), whose pages offer each executed chapter")
    parser.add_argument("--rtol", type=float, default=0.0,
                        help="with --compare: relative tolerance for numbers (default 0: bit for bit)")
    parser.add_argument("--timings", action="store_true",
                        help="with --compare: compare the glued measurements (times, memory) too (left out by default: they differ by machine)")
    parser.add_argument("--confirm", action="store_true",
                        help="a confirmatory run: plan fresh seeds for the open claims of the --profile build's records, "
                        "then execute the planned chapters (--only: some of them) into book/_confirm/<profile>/")
    # the defaults are fedbook.confirm's (POWER, CAP, FIRST_SEED), read once --confirm is given: importing it
    # (scipy, pandas) would slow every other command
    parser.add_argument("--power", type=float,
                        help="with --confirm: the power each open claim is planned for (default: fedbook.confirm.POWER)")
    parser.add_argument("--cap", type=int,
                        help="with --confirm: the most fresh seeds one claim may get (default: fedbook.confirm.CAP)")
    parser.add_argument("--first-seed", type=int,
                        help="with --confirm: the first fresh seed (default: fedbook.confirm.FIRST_SEED; none of the "
                        "fresh seeds may be one the build's chapters or their studies ran)")
    parser.add_argument("--workers", type=int,
                        help="with --confirm: processes (or Ray CPUs, -p executor=ray) each chapter's studies run on")
    parser.add_argument("--plan-only", action="store_true", help="with --confirm: print and save the plan, execute nothing")
    parser.add_argument("--plan", metavar="FILE",
                        help="with --confirm: execute this plan (the plan.json of an earlier run, or one made by hand) "
                        "instead of planning from the records")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.param:
        if "=" not in item:
            raise SystemExit(f"parameters are KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        overrides[k.strip()] = parse_value(v)
    if args.confirm:
        if args.workers is not None:
            overrides["workers"] = args.workers
        from fedbook.confirm import CAP, FIRST_SEED, POWER, _check_settings

        args.power = POWER if args.power is None else args.power
        args.cap = CAP if args.cap is None else args.cap
        args.first_seed = FIRST_SEED if args.first_seed is None else args.first_seed
        try:
            _check_settings(args.power, args.cap, args.first_seed)
        except ValueError as err:
            raise SystemExit(f"--confirm: {err}")
        return confirm(args.profile, args.only, overrides, power=args.power, cap=args.cap, first_seed=args.first_seed,
                       threads=args.threads, plan_only=args.plan_only, plan_file=args.plan,
                       out=Path(args.out).resolve() if args.out else None)
    if args.handout:
        if args.profile not in PROFILES:
            raise SystemExit(f"unknown profile {args.profile!r}; valid: {', '.join(PROFILES)}")
        names = args.only or chapter_names()
        valid = chapter_names()
        bad = [n for n in names if n not in valid]
        if bad:
            raise SystemExit(f"unknown chapter(s) {', '.join(bad)}; valid: {', '.join(valid)}")
        declared = {p for n in names for p in notebook_parameters(n)}
        unknown = sorted(set(overrides) - declared)
        if unknown:
            raise SystemExit(f"unknown parameter(s) {', '.join(unknown)} for {', '.join(names)}; "
                             f"valid: {', '.join(sorted(declared))}")
        check_parameters(names, args.profile, overrides)
        for path in handout(names, args.profile, overrides, Path(args.handout).resolve(), hints=args.hints):
            print(f"[handout]  {path}")
        return 0
    if args.compare:
        other = Path(args.compare).resolve()
        against = args.against or output_dir(args.profile)
        rows, total = compare(against, other, args.rtol, None if args.timings else MEASURED_KEYS)
        for r in rows:
            ours, yours = shown(r["reference"], r["yours"])
            nx, ny = _as_number(r["reference"] or ""), _as_number(r["yours"] or "")
            change = f" ({(ny - nx) / abs(nx):+.2%})" if nx and ny is not None and r["yours"] is not None else ""
            print(f"{r['chapter']}: {r['key']}: the book has {ours}, yours {yours}{change}")
        print(f"{total - len(rows)} of {total} glued values agree with the {args.profile} build"
              + (f" ({args.against})" if args.against else "")
              + (f" (numbers within a relative {args.rtol:g})" if args.rtol else " (bit for bit)")
              + ("" if args.timings else "; measured times and memory left out (--timings compares them too)"))
        return 0
    out = Path(args.out).resolve() if args.out else None
    render = not args.no_render and (args.render or not args.out)
    return build(args.profile, args.only, overrides, render, args.force, out, jobs=args.jobs, threads=args.threads)


if __name__ == "__main__":
    sys.exit(main())
