"""Build the book: execute every chapter with papermill, then render it with Jupyter Book.

    python book/build.py                       # every chapter at the default ("book") profile
    python book/build.py --profile smoke       # seconds: the tests' parameters, into book/_smoke/
    python book/build.py --only setting -p seed=1 -p alphas='[0.5]'   # one chapter, own parameters
    python book/build.py --no-render           # execute only
    python book/build.py --out /tmp/x --force  # execute into another folder (leaves the book alone)
    python book/build.py --compare runs/mine   # which glued values of runs/mine differ from the book's

Pipeline (the book's page *Inside fedlib*): ``notebooks/<name>.py`` (jupytext percent format) ->
``jupytext.read`` -> ``papermill.execute_notebook`` with parameters -> ``<out>/chapters/<name>.ipynb``
-> ``jupyter-book build`` with execution off, warnings as errors and references checked.

Where it writes: the ``book`` profile into ``book/`` itself (``book/chapters``, ``book/results``,
HTML in ``book/_build/html``); any other profile into its own folder ``book/_<profile>/``, which
holds a copy of the book's own pages next to its executed chapters and renders to
``book/_<profile>/_build/html``, so a smoke build never leaves its numbers in the book or
invalidates the book's cache. ``--out DIR`` executes into ``DIR`` instead and does not render (``--render`` renders it too).

Parameters: ``-p key=value`` goes to every selected chapter whose ``parameters`` cell declares
``key``; a key that no selected chapter declares stops the build before anything runs.

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

from fedbook.page import CLAIMS_RECORDS  # the glued key of a chapter's claims, copied into its record
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
    """``-p key=value`` values: Python literals where they parse (numbers, lists, None), else strings."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def execute_chapter(name: str, params: dict, output: Path, *, cwd: Path = NOTEBOOKS) -> float:
    """Execute ``notebooks/<name>.py`` with ``params`` into ``output`` (atomically); return seconds."""
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
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(
            nb, tmp, parameters=params, kernel_name="python3", cwd=str(cwd), progress_bar=False
        )
    except BaseException:
        failed = output.with_suffix(".failed.ipynb")
        if Path(tmp).exists():
            os.replace(tmp, failed)
            print(f"chapter {name} failed; the partly executed notebook is {failed}", file=sys.stderr)
        raise
    collapse_injected(Path(tmp))
    os.replace(tmp, output)
    return time.perf_counter() - t0


def handout(names: list[str], profile: str, overrides: dict, folder: Path, *, hints: bool = False) -> list[Path]:
    """A course's notebooks for a student and for the teacher (:func:`fedbook.course.write_handout`):
    each chapter with ``profile`` and ``overrides`` injected (papermill's ``prepare_only``: nothing
    executed, no output, no local path), to run in Jupyter from the repository's ``notebooks/``
    folder; ``<folder>/student/`` without the worked solutions and hints (with the hints where
    ``hints``), ``<folder>/teacher/`` with them and the graders. Returns the files written."""
    import jupytext
    import nbformat
    import papermill

    from fedbook.course import build_values, parameter_defaults, write_handout

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
                                    parameter_defaults(nb))
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


def render_book(out: Path) -> int:
    """Render the book whose source folder is ``out`` (``book/`` or a staged copy) with warnings as errors."""
    if out != BOOK:
        stage_pages(out)
    cmd = [
        str(Path(sys.executable).parent / "jupyter-book"), "build", str(out),
        "--config", str(ROOT / "_config.yml"), "--toc", str(out / "_toc.yml"), "--path-output", str(out),
        "-W", "-n", "--keep-going", "--all",
    ]
    print("[render]  ", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc == 0:
        print(f"\nThe book is at {out / '_build' / 'html' / 'index.html'}")
    return rc


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Set for every chapter's kernel to the build's ``threads`` (1 by default), so that a chapter
computes the same bits whether the build runs it alone or next to others."""


def _with_threads(threads: int):
    """Context: the thread variables of :data:`THREAD_VARIABLES` set for kernels started inside it."""
    import contextlib

    @contextlib.contextmanager
    def scope():
        saved = {k: os.environ.get(k) for k in THREAD_VARIABLES}
        os.environ.update({k: str(threads) for k in THREAD_VARIABLES})
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    return scope()


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


def _run(todo: list[tuple], jobs: int, threads: int, t0: float, hints: dict[str, float] | None = None) -> None:
    """Execute the planned chapters, ``jobs`` at a time (the longest last build first; a chapter
    this profile never built is placed by ``hints``, its seconds at another profile), writing
    each record as its chapter finishes; after a failure the waiting chapters are cancelled, the
    running ones finish, and the first failure is raised."""
    from fedlib.io import atomic_write_json

    def finished(name: str, params: dict, key: str, meta: Path, seconds: float) -> None:
        record = {"key": key, "params": params, "seconds": round(seconds, 2)}
        claims = claims_of(meta.with_suffix(".ipynb"))
        if claims is not None:
            record["claims"] = claims
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
    unknown = sorted(set(overrides) - {p for ps in declared.values() for p in ps})
    if unknown:
        valid = sorted({p for ps in declared.values() for p in ps})
        raise SystemExit(f"unknown parameter(s) {', '.join(unknown)} for {', '.join(names)}; valid: {', '.join(valid)}")
    out = Path(out) if out is not None else output_dir(profile)
    chapters, results = out / "chapters", out / "results"

    records = {p: os.path.relpath(chapters if p == profile else output_dir(p) / "chapters", NOTEBOOKS)
               for p in PROFILES}

    hints: dict[str, float] = {}

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
            later = frozenset(all_readers[all_readers.index(name) + 1:]) if name in all_readers else frozenset()
            key = cache_key(name, params, threads, later)
            output, meta = chapters / f"{name}.ipynb", chapters / f"{name}.json"
            last = json.loads(meta.read_text()) if meta.exists() else {}
            if not force and output.exists() and last.get("key") == key:
                print(f"[cached]   {name}")
                continue
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
        _run(todo, jobs, threads, t0, hints)
    print(f"[built]    {len(names)} chapter(s) in {_minutes(time.perf_counter() - t0)}", flush=True)
    return render_book(out) if render else 0


def glued_values(path: Path) -> dict[str, str]:
    """The values an executed chapter glued (``myst_nb.glue``), as the text the page shows: key -> text."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    values = {}
    for cell in nb.cells:
        for output in cell.get("outputs", ()) if cell.cell_type == "code" else ():
            record = output.get("metadata", {}).get("scrapbook")
            if record:
                prefix = record.get("mime_prefix", "")
                values[record["name"]] = str(output.get("data", {}).get(prefix + "text/plain", ""))
    return values


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


def compare(reference: Path, other: Path, rtol: float = 0.0, skip: str | None = MEASURED_KEYS
            ) -> tuple[list[dict], int]:
    """The glued values of the chapters executed in both folders (``<folder>/chapters/*.ipynb``):
    one row per value that differs (numbers beyond ``rtol``, relative) or that only one side has,
    and how many values were compared (the keys of either side, less those matching the regular
    expression ``skip``, by default :data:`MEASURED_KEYS`)."""
    import re

    skipped = re.compile(skip) if skip else None
    compared = 0
    rows = []
    theirs = {p.stem: p for p in (other / "chapters").glob("*.ipynb") if not p.name.endswith(".failed.ipynb")}
    if not theirs:
        raise SystemExit(f"no executed chapter in {other / 'chapters'}; run book/build.py --out {other} first")
    for name, path in sorted(theirs.items()):
        ours_path = reference / "chapters" / f"{name}.ipynb"
        if not ours_path.exists():
            raise SystemExit(f"{name} is not executed in {reference / 'chapters'}; build it there first")
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
                        "the profile's own build; prints what differs, executes nothing")
    parser.add_argument("--rtol", type=float, default=0.0,
                        help="with --compare: relative tolerance for numbers (default 0: bit for bit)")
    parser.add_argument("--timings", action="store_true",
                        help="with --compare: compare the glued measurements (times, memory) too (left out by default: they differ by machine)")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.param:
        if "=" not in item:
            raise SystemExit(f"parameters are KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        overrides[k.strip()] = parse_value(v)
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
        for path in handout(names, args.profile, overrides, Path(args.handout).resolve(), hints=args.hints):
            print(f"[handout]  {path}")
        return 0
    if args.compare:
        other = Path(args.compare).resolve()
        rows, total = compare(output_dir(args.profile), other, args.rtol, None if args.timings else MEASURED_KEYS)
        for r in rows:
            print(f"{r['chapter']}: {r['key']}: the book has {r['reference']}, yours {r['yours']}")
        print(f"{total - len(rows)} of {total} glued values agree with the {args.profile} build"
              + (f" (numbers within a relative {args.rtol:g})" if args.rtol else " (bit for bit)")
              + ("" if args.timings else "; measured times and memory left out (--timings compares them too)"))
        return 0
    out = Path(args.out).resolve() if args.out else None
    render = not args.no_render and (args.render or not args.out)
    return build(args.profile, args.only, overrides, render, args.force, out, jobs=args.jobs, threads=args.threads)


if __name__ == "__main__":
    sys.exit(main())
