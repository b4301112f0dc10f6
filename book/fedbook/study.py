"""One study runner: a chapter's experiments as data.

A :class:`Study` says what an experiment runs: a function of one **cell** (one setting of the
grid and one seed) that returns tidy frames, the grid of settings (each name's values, crossed)
and the seeds. :func:`run_study` runs every cell, in parallel over worker processes or the
machines of a Ray cluster (:func:`fedbook.parallel.map_cells`: each cell derives every random
stream from its own seed, so the bits do not depend on the process that runs it, on machines of
the same CPU kind and library builds: torch picks its kernels by instruction set), caches each cell's frames on disk under a
key of everything they depend on, and returns one tidy frame per table, the setting and the seed
as its first columns::

    TABLE = Study("table", table_cell, grid={"dataset": ["mnist5k", "uci"], "fraction": [0.02, 0.1]},
                  seeds=range(5))
    frames = run_study(TABLE, workers=2, cache="runs/cache")
    frames["table"]        # dataset, fraction, seed, method, f1, ...

A teacher who wants to change one setting of one table changes the study's grid or seeds in the
notebook; the procedure behind a cell is a function of a module (the chapter's study in
``fedbook.studies``), called with the cell's settings as keyword arguments.

The cache key covers the study's name, the cell function (its qualified name and, for a
``functools.partial``, its bound arguments, tensors by a digest of their bytes:
:func:`fedlib.loop.algorithm_configuration`), the setting, the seed, the torch threads, the
versions of the numerical libraries, and the source of every module of fedlib and fedbook the
cell function's module executes (:func:`fedbook.sources.module_files`). A change anywhere a cell
can reach runs it again; a change elsewhere (a notebook's prose, another chapter's module) does
not. Only functions of fedlib and fedbook are cached (a function defined in a notebook has no
source the key could cover: it runs, uncached). The frames are stored as JSON, whose numbers
read back bit for bit (Python's ``repr`` of a float round-trips), written atomically: an
interrupted run resumes from the cells it finished.

**Where the cells run** (``executor``, :func:`fedbook.parallel.map_cells`). By default in this
process (``workers=1``) or in ``workers`` forked processes. ``executor="ray"`` runs each cell as a
task of a local Ray instance of ``workers`` CPUs, started by the call and stopped after (a script
running several studies can hold one for all: :func:`fedbook.parallel.local_ray`). On a cluster,
start Ray on one machine, ``ray start --head --port=6379``, and on each other
``ray start --address=HEAD:6379``, every machine with this repository, its environment (the
same versions: a worker of other numerical libraries' versions, or of another
:data:`CPU_CAPABILITY`, is refused) and the data sets the
cells read at the same paths (a file a cell writes itself lands on the machine that ran it; the
frames come back to the caller, who caches them), then run the
studies with ``executor="HEAD:6379"`` (or ``"auto"`` on a machine of the cluster, or
``"ray://HEAD:10001"`` through Ray Client); a chapter takes it as a parameter,
``python book/build.py --only <chapter> -p executor=HEAD:6379``. Ray's servers accept whoever
reaches their ports (a local instance's too: they listen on every interface of the machine), so
run them on a private network. Whatever the executor:

- the same frames bit for bit on machines of the same CPU kind and library builds (each cell
  derives every random stream from its own seed and runs with ``threads`` torch threads; torch
  picks its kernels by instruction set, :data:`CPU_CAPABILITY`, which a Ray worker must share with
  the caller; the executor is not part of a cell's key, so a cell cached by one executor is read
  back by another);
- a cell that raises is run once more, a fresh attempt (on Ray, a new task; a pool whose worker
  died is replaced, and the cells that were in flight there run again one at a time, each alone,
  so that only the cell whose run kills its worker uses up an attempt): if the second attempt
  succeeds the study goes on and ``StudyFrames.retried`` names the cell and its first error; if
  it fails too, the study raises that error, noted with the cell and the first error (the cells
  in flight in the pool finish first and are cached);
- each finished cell is cached at once by this process, so a study interrupted, killed or
  stopped by a failing cell resumes from the cells it finished;
- ``progress`` (a file, or a function) is told of each finished cell, with how many are done and
  an estimate of the time left (:func:`read_progress`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import itertools
import contextlib
import datetime
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedbook.parallel import check_executor, describe_error, map_cells, runs_here
from fedbook.sources import PACKAGES, digest, module_files
from fedlib.io import atomic_write_text, json_default
from fedlib.loop import algorithm_configuration
from fedlib.validation import is_int

Frames = pd.DataFrame | Mapping[str, pd.DataFrame]
"""What a cell returns: one tidy frame (named after its study), or several by name."""


class StudyFrames(dict):
    """What :func:`run_study` returns: each table's frame by name (a ``dict``), and what the cells
    cost: ``seconds``, the sum of every cell's own compute time, measured when it ran (now, or when
    it was cached: a time read back from the cache is the time the cell took then, never the time
    of reading it); ``cached``, how many of the ``cells`` were read from the cache; ``retried``,
    the cells that failed once and succeeded on their second attempt, each as
    ``{"cell": its settings and seed, "error": what the first attempt raised}``."""

    seconds: float = 0.0
    cached: int = 0
    cells: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retried: list[dict[str, Any]] = []


CACHE_FORMAT = "fedbook-study-2"
"""The format of a cached cell (and part of its key: a new format runs every cell again)."""

LIBRARIES = ("torch", "numpy", "scipy", "pandas", "scikit-learn")
"""The numerical libraries whose versions a cell's key covers."""
CPU_CAPABILITY = "torch CPU capability"
"""The instruction set torch picks its CPU kernels for (``torch.backends.cpu.get_cpu_capability()``,
e.g. ``"AVX2"``, ``"AVX512"``): a Ray worker on another machine must report the caller's, since
kernels of another instruction set may sum in another order."""


@dataclass(frozen=True)
class Study:
    """An experiment as data: the cells to run and the function that runs one.

    Parameters
    ----------
    name : str
        Names the study: its frame (when a cell returns one), its folder in the cache, errors.
    run : callable
        ``run(seed=s, **setting)``: one cell's frames (a DataFrame, or a dict of them by name),
        tidy, one row per measured value or per unit. A function of a module (or a
        ``functools.partial`` of one) to be cached.
    grid : mapping of str to sequence, optional
        Each setting's values; the cells are their product, in the order given, the last
        setting varying fastest.
    seeds : sequence of int
        The run seeds, innermost: every setting runs every seed.

    Examples
    --------
    >>> import pandas as pd
    >>> study = Study("toy", run=lambda seed, n: pd.DataFrame({"x": [seed * n]}), grid={"n": [1, 2]}, seeds=[0, 3])
    >>> study.cells()
    [{'n': 1, 'seed': 0}, {'n': 1, 'seed': 3}, {'n': 2, 'seed': 0}, {'n': 2, 'seed': 3}]
    """

    name: str
    run: Callable[..., Frames]
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    seeds: Sequence[int] = (0,)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.replace("-", "_").isidentifier():
            raise ValueError(f"a study's name must be a short identifier (letters, digits, _ or -), got {self.name!r}")
        if not callable(self.run):
            raise ValueError(f"study {self.name!r}: run must be a function of (seed, **setting), got {self.run!r}")
        if isinstance(self.grid, Mapping):
            strings = [k for k, v in self.grid.items() if isinstance(v, (str, bytes))]
            if strings:
                raise ValueError(f"study {self.name!r}: setting {strings[0]!r} must be a list of values, got the string "
                                 f"{self.grid[strings[0]]!r}; for one value write [{self.grid[strings[0]]!r}]")
            object.__setattr__(self, "grid", {k: list(v) for k, v in self.grid.items()})
        else:
            raise ValueError(f"study {self.name!r}: grid must be a mapping of setting -> values, got {self.grid!r}")
        for key, values in self.grid.items():
            if key == "seed" or not values:
                raise ValueError(f"study {self.name!r}: setting {key!r} must be a name other than 'seed' with at least "
                                 f"one value, got {values!r}")
            if len({repr(v) for v in values}) != len(values):
                raise ValueError(f"study {self.name!r}: setting {key!r} must hold distinct values (a value twice would "
                                 f"run its cells twice), got {values!r}")
        seeds = list(self.seeds)
        bad = [s for s in seeds if not (is_int(s) and 0 <= s < 2**32)]
        if not seeds or bad or len(set(seeds)) != len(seeds):
            raise ValueError(f"study {self.name!r}: seeds must be distinct integers in [0, 2**32), at least one; got {seeds!r}")
        object.__setattr__(self, "seeds", tuple(int(s) for s in seeds))

    def cells(self) -> list[dict[str, Any]]:
        """Every cell's keyword arguments (the setting, then ``seed``), in the study's order."""
        keys = list(self.grid)
        return [{**dict(zip(keys, values)), "seed": seed}
                for values in itertools.product(*self.grid.values()) for seed in self.seeds]


def run_study(study: Study, *, workers: int = 1, threads: int = 1, cache: str | os.PathLike | None = None,
              executor: str | None = None, progress: str | os.PathLike | Callable[[dict], Any] | None = None
              ) -> StudyFrames:
    """Every cell of ``study``: one tidy frame per table, the setting's columns and ``seed`` first.

    Parameters
    ----------
    study : Study
    workers : int, default 1
        Processes the cells are spread over (1: in this process), or the CPUs of a local Ray
        instance (``executor="ray"``). The frames are the same bits whatever the number.
    threads : int, default 1
        Torch threads each cell runs with (in this process: the caller's own).
    cache : path, optional
        The folder of the cells' cache (``None``: no cache). A cell whose key (see the module's
        docstring) is there is read back instead of run; a cell that runs is written there as
        soon as it is done (by this process, whichever executor ran it).
    executor : str, optional
        Where the cells run (:func:`fedbook.parallel.map_cells`): ``None`` or ``"process"``, this
        process or the pool of ``workers`` forked processes; ``"ray"``, a local Ray instance of
        ``workers`` CPUs (started and stopped by the call, unless this process joined a Ray
        already); ``"auto"``, ``"ray://HOST:PORT"`` or ``"HOST:PORT"``, an existing Ray cluster.
        The executor is not part of a cell's key: it changes no bit.
    progress : path or callable, optional
        Told when the study starts (with its cells read from the cache counted done) and after
        each cell: a file gets one JSON line appended per event (:func:`read_progress` reads it
        back), a callable gets each event as a dict: ``event`` (``"start"``, ``"cell"``,
        ``"retry"`` or ``"failed"``), ``study``, ``done``, ``total``, ``cached``, ``cell`` (its
        settings and seed), ``seconds`` (the cell's), ``elapsed`` (since the call began),
        ``eta`` (seconds left, at the pace of the cells run so far), ``error`` and ``at`` (UTC,
        ISO 8601). ``None``: nothing.

    Returns
    -------
    StudyFrames
        Each table the cells return, by name (a cell that returns one frame: the study's name),
        the cells' frames concatenated in the study's order, with the cell's settings and seed as
        leading columns (a column a cell returns itself must agree with them); and what the cells
        cost (``seconds``, ``cached``, ``cells``) and the cells retried (``retried``).

    Raises
    ------
    ValueError
        When a cell returns something else than a DataFrame or a dict of them, or the cells do
        not all return the same tables; an unknown ``executor``; a cell function that cannot
        travel to Ray's workers; Ray workers of other numerical libraries' versions or another
        :data:`CPU_CAPABILITY` than this process's.
    Exception
        What a cell raised on its second attempt (a failed cell is run once more, a fresh
        attempt), noted with the cell and the first attempt's error; the cells finished before
        stay in the cache, so a rerun resumes.

    Examples
    --------
    >>> import pandas as pd
    >>> frames = run_study(Study("toy", run=lambda seed, n: pd.DataFrame({"x": [seed * n]}), grid={"n": [1, 2]}, seeds=[0, 3]))
    >>> frames["toy"]
       n  seed  x
    0  1     0  0
    1  1     3  3
    2  2     0  0
    3  2     3  6
    """
    if not isinstance(study, Study):
        raise ValueError(f"run_study takes a Study, got {type(study).__name__}")
    address = check_executor(executor)
    tell = _progress_sink(progress)
    started = time.perf_counter()
    cells = study.cells()
    folder = None if cache is None else Path(cache) / study.name
    common = _key_parts(study) if folder is not None else None  # once per study: every cell runs the same function
    here = runs_here(executor, workers)
    keys = [cell_key(study, cell, torch.get_num_threads() if here else threads, common=common)
            if common is not None else None for cell in cells]
    found: dict[int, dict[str, pd.DataFrame]] = {}
    seconds: dict[int, float] = {}
    for i, key in enumerate(keys):  # each cell on its own: one cell bound to foreign code leaves the others cached
        if key is not None and (folder / f"{key}.json").exists():
            found[i], seconds[i] = _read(folder / f"{key}.json")
    cached = len(found)
    todo = [i for i in range(len(cells)) if i not in found]
    out = StudyFrames()

    def event(kind: str, i: int | None = None, took: float | None = None, error: str | None = None) -> None:
        if tell is None:
            return
        done, elapsed = len(found), time.perf_counter() - started
        ran = done - cached
        tell({"event": kind, "study": study.name, "done": done, "total": len(cells), "cached": cached,
              "cell": None if i is None else dict(cells[i]), "seconds": took, "elapsed": elapsed,
              "eta": elapsed / ran * (len(cells) - done) if ran else (0.0 if done == len(cells) else None),
              "error": error, "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              **({"seeds": list(study.seeds), "cached_seconds": float(sum(seconds.values()))} if kind == "start" else {})})

    libraries = None if address is None else _environment()  # another machine's, checked
    finished = map_cells(functools.partial(_run_cell, study, libraries=libraries), [cells[i] for i in todo], workers,
                         threads=threads, executor=executor, retries=1,
                         on_retry=lambda j, error: event("retry", todo[j], error=error))  # checks workers, threads
    event("start")
    try:
        with contextlib.closing(finished):
            for one in finished:
                i = todo[one.index]
                raw, took = one.value
                frames = _frames(study, cells[i], raw)
                if folder is not None and keys[i] is not None:  # kept as soon as it is done: an interrupted study resumes
                    _write(folder / f"{keys[i]}.json", study, cells[i], frames, took)
                found[i], seconds[i] = frames, took
                if one.errors:
                    out.retried.append({"cell": dict(cells[i]), "error": one.errors[0]})
                event("cell", i, took)
    except Exception as err:
        err.add_note(f"(study {study.name!r}: {len(found)} of {len(cells)} cells done"
                     f"{', kept in the cache: a rerun resumes from them' if folder is not None and found else ''})")
        event("failed", error=describe_error(err))
        raise
    names = list(found[0])
    for i in range(len(cells)):
        if list(found[i]) != names:
            raise ValueError(f"study {study.name!r}: the cell {cells[i]} returned tables {list(found[i])}, the first "
                             f"cell {names}; every cell must return the same tables")
    out.update({name: pd.concat([found[i][name] for i in range(len(cells))], ignore_index=True) for name in names})
    out.seconds, out.cached, out.cells = float(sum(seconds.values())), cached, len(cells)
    return out


def _progress_sink(progress: str | os.PathLike | Callable[[dict], Any] | None) -> Callable[[dict], Any] | None:
    """What :func:`run_study` tells its events to: ``progress`` itself (a callable), a function that
    appends each as a JSON line to the file ``progress`` names, or ``None``."""
    if progress is None or callable(progress):
        return progress
    if not isinstance(progress, (str, os.PathLike)):
        raise ValueError(f"progress must be None, a file's path or a function of one dict, got {progress!r}")
    path = Path(progress)
    path.parent.mkdir(parents=True, exist_ok=True)

    def append(event: dict) -> None:
        with open(path, "a", encoding="utf-8") as f:  # one write per line: a reader sees whole lines
            f.write(json.dumps(event, default=_plain) + "\n")
            f.flush()
    return append


def _plain(value: Any) -> Any:
    """A progress line's value that JSON cannot hold: numpy's scalars as numbers, the rest as ``repr``."""
    return value.item() if isinstance(value, np.generic) else repr(value)


def read_progress(path: str | os.PathLike) -> pd.DataFrame:
    """The events a :func:`run_study` with ``progress=path`` appended (every study that wrote
    there, in order), one row each, with the columns the events have (``event``, ``study``,
    ``done``, ``total``, ``cached``, ``cell``, ``seconds``, ``elapsed``, ``eta``, ``error``, ``at``;
    a ``start`` event also has ``seeds``, the study's seeds, and ``cached_seconds``, what its cached
    cells took when they ran); a line still being written (a run killed mid-line) is left out; no
    file: no rows.

    Examples
    --------
    >>> import tempfile, pandas as pd
    >>> log = Path(tempfile.mkdtemp()) / "progress.jsonl"
    >>> _ = run_study(Study("toy", run=lambda seed: pd.DataFrame({"x": [seed]}), seeds=[0, 1]), progress=log)
    >>> read_progress(log)[["event", "study", "done", "total", "cached"]]
       event study  done  total  cached
    0  start   toy     0      2       0
    1   cell   toy     1      2       0
    2   cell   toy     2      2       0
    >>> read_progress(log).groupby("study").tail(1)[["study", "done", "total", "eta"]]  # where each study stands
      study  done  total  eta
    2   toy     2      2  0.0
    """
    path = Path(path)
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    columns = ["event", "study", "done", "total", "cached", "cell", "seconds", "elapsed", "eta", "error", "at"]
    return pd.DataFrame(rows, columns=list(dict.fromkeys([*columns, *(k for r in rows for k in r)])))


def _run_cell(study: Study, cell: Mapping[str, Any], libraries: Mapping[str, str] | None = None) -> tuple[Any, float]:
    """One cell run, wherever it runs: what the study's function returns and the seconds it took.
    ``libraries``: the versions the caller's key names and its :data:`CPU_CAPABILITY`
    (:func:`_environment`), which this process must have (a Ray worker on another machine)."""
    if libraries is not None:
        here = _environment()
        if here != dict(libraries):
            other = [f"{name} {here[name]} (the caller's: {libraries.get(name)})" for name in here
                     if here[name] != libraries.get(name)]
            raise ValueError(f"study {study.name!r}: this worker runs {', '.join(other)}; every machine must run "
                             "the same versions on the same CPU kind (the cells' keys name the caller's versions)")
    t0 = time.perf_counter()
    out = study.run(**cell)
    return out, time.perf_counter() - t0


def _frames(study: Study, cell: Mapping[str, Any], out: Any) -> dict[str, pd.DataFrame]:
    """A cell's frames by name (from what its function returned, ``out``), each with the cell's
    settings and seed in front."""
    frames = {study.name: out} if isinstance(out, pd.DataFrame) else out
    if not isinstance(frames, Mapping) or not all(isinstance(f, pd.DataFrame) for f in frames.values()):
        raise ValueError(f"study {study.name!r}: a cell must return a DataFrame or a dict of DataFrames, got "
                         f"{type(out).__name__} for {dict(cell)}")
    return {name: _with_cell(name, frame, cell) for name, frame in frames.items()}


def _with_cell(name: str, frame: pd.DataFrame, cell: Mapping[str, Any]) -> pd.DataFrame:
    """``frame`` with the cell's settings and seed as leading columns; a named index becomes columns,
    an unnamed one (a default index, or the row labels left by a filter) is dropped."""
    frame = frame.reset_index(drop=all(n is None for n in frame.index.names))
    for key, value in cell.items():
        if key in frame.columns:
            if len(frame) and not (frame[key] == value).all():
                raise ValueError(f"table {name!r} has a column {key!r} that disagrees with its cell ({key} = {value!r})")
            frame = frame.drop(columns=key)
    lead = pd.DataFrame({key: [value] * len(frame) for key, value in cell.items()}, index=frame.index)
    return pd.concat([lead, frame], axis=1)


def _covered_module(study: Study) -> str | None:
    """The module of the study's cell function, ``None`` when the cache cannot cover it: not a
    function of fedlib or fedbook, or bound to code of another package (:func:`_foreign`)."""
    fn = study.run.func if isinstance(study.run, functools.partial) else study.run
    module = getattr(fn, "__module__", None) or ""
    if module.split(".")[0] not in PACKAGES or not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        return None
    if _foreign(study.run) is not None:
        return None
    return module


_DATA = (str, bytes, bool, int, float, complex, type(None), np.generic, np.ndarray, torch.Tensor, torch.dtype,
         torch.device, pd.DataFrame, pd.Series, pd.Index, Enum, PurePath)
"""What a key covers by its value alone (the bytes of arrays and tensors by a digest)."""


def _foreign(obj: Any, depth: int = 0) -> str | None:
    """The first piece of code bound into ``obj`` whose source no key covers: a function, a class, or
    an instance of a class defined outside fedlib and fedbook (a notebook's own, an exercise's
    method), searched through partials, bound methods, containers and public attributes; ``None``
    when there is none. Such a cell runs uncached: its key would miss a change to that code.

    Examples
    --------
    >>> import functools
    >>> from collections import OrderedDict
    >>> from fedlib.training import TrainConfig
    >>> _foreign(functools.partial(_foreign, depth=0)) is None, _foreign({"cfg": TrainConfig(), "n": [1, 2]}) is None
    (True, True)
    >>> _foreign([OrderedDict])  # a class of another package: its code is not in the digest
    "a class of module 'collections' (OrderedDict)"
    """
    if depth > 16 or isinstance(obj, _DATA):
        return None
    if isinstance(obj, functools.partial):
        return next((f for f in (_foreign(x, depth + 1) for x in (obj.func, *obj.args, *obj.keywords.values()))
                     if f is not None), None)
    if isinstance(obj, Mapping):
        return next((f for f in (_foreign(v, depth + 1) for v in obj.values()) if f is not None), None)
    if isinstance(obj, (list, tuple, set, frozenset)):
        return next((f for f in (_foreign(v, depth + 1) for v in obj) if f is not None), None)
    if inspect.ismethod(obj):
        return _foreign(obj.__func__, depth + 1) or _foreign(obj.__self__, depth + 1)
    if inspect.isfunction(obj) or isinstance(obj, type):
        module = getattr(obj, "__module__", "") or ""
        if module.split(".")[0] not in PACKAGES:
            return f"{'a class' if isinstance(obj, type) else 'a function'} of module {module!r} ({obj.__qualname__})"
        if isinstance(obj, type):
            return None  # its source is in the digest
        # its source is in the digest; what it closes over and its defaults may be code of another package
        bound = [c.cell_contents for c in obj.__closure__ or ()
                 if c.cell_contents is not obj]  # a closure's cells are filled once the function can be called
        return _foreign([*bound, *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()], depth + 1)
    if inspect.isroutine(obj) or isinstance(obj, torch.nn.Module) and type(obj).__module__.startswith("torch."):
        return None  # a builtin, or a layer of torch itself (its weights are in the key)
    module = type(obj).__module__ or ""
    if module.split(".")[0] not in PACKAGES:
        return f"an instance of {type(obj).__qualname__} (module {module!r})"
    public = {k: v for k, v in vars(obj).items() if not k.startswith("_")} if hasattr(obj, "__dict__") else {}
    return next((f for f in (_foreign(v, depth + 1) for v in public.values()) if f is not None), None)


def cell_key(study: Study, cell: Mapping[str, Any], threads: int, *, common: Mapping[str, Any] | None = None) -> str | None:
    """The cache key of one cell (a hex digest), or ``None`` when the cell's function cannot be
    covered: one that is not a function of fedlib or fedbook (a notebook's own), or a cell bound
    to code of another package. ``common``: what every cell of the study shares (``_key_parts``),
    when the caller has it (:func:`run_study` computes it once for all its cells; the same key)."""
    common = _key_parts(study) if common is None else common
    if common is None or _foreign(dict(cell)) is not None:
        return None
    described = {**common, "cell": algorithm_configuration(dict(cell)), "threads": int(threads)}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=json_default).encode()).hexdigest()[:40]


def _key_parts(study: Study) -> dict[str, Any] | None:
    """What every cell's key of ``study`` shares: the format, the study's name, its function with its
    bound arguments (:func:`fedlib.loop.algorithm_configuration`), the libraries' versions and the
    digest of the sources the function executes (:func:`fedbook.sources.module_files`); ``None``
    when the cache cannot cover the function (:func:`_covered_module`)."""
    module = _covered_module(study)
    if module is None:
        return None
    return {"format": CACHE_FORMAT, "study": study.name, "run": algorithm_configuration(study.run),
            "libraries": {name: _version(name) for name in LIBRARIES}, "sources": digest(module_files(module))}


def _environment() -> dict[str, str]:
    """What a cell's bits depend on beyond its key's arguments and sources: the versions of
    :data:`LIBRARIES` and the :data:`CPU_CAPABILITY` torch's kernels were picked for."""
    return {**{name: _version(name) for name in LIBRARIES}, CPU_CAPABILITY: torch.backends.cpu.get_cpu_capability()}


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _write(path: Path, study: Study, cell: Mapping[str, Any], frames: Mapping[str, pd.DataFrame],
           seconds: float) -> None:
    """A cell's frames as JSON (column names, dtypes, rows; floats as ``repr``, so bit for bit) and
    the seconds it took to compute them."""
    record = {"format": CACHE_FORMAT, "study": study.name, "cell": algorithm_configuration(dict(cell)), "seconds": seconds,
              "frames": {name: {"columns": [str(c) for c in f.columns], "dtypes": [str(d) for d in f.dtypes],
                                "rows": _rows(f)} for name, f in frames.items()}}
    atomic_write_text(path, json.dumps(record, default=json_default, allow_nan=True))


def _rows(frame: pd.DataFrame) -> list[list[Any]]:
    """Rows keeping a float column's NaN as NaN (JSON's ``NaN``) and an object column's missing as null."""
    columns = []
    for c in frame.columns:
        s = frame[c]
        columns.append(s.tolist() if s.dtype.kind == "f" else s.astype(object).where(s.notna(), None).tolist())
    return [list(row) for row in zip(*columns)]


def _read(path: Path) -> tuple[dict[str, pd.DataFrame], float]:
    """A cached cell's frames and the seconds it took when it ran."""
    record = json.loads(path.read_text())
    if record.get("format") != CACHE_FORMAT:
        raise ValueError(f"{path} is not a cached study cell of format {CACHE_FORMAT!r}")
    out = {}
    for name, f in record["frames"].items():
        frame = pd.DataFrame(f["rows"], columns=f["columns"])
        for column, dtype in zip(f["columns"], f["dtypes"]):
            frame[column] = frame[column].astype(dtype)
        out[name] = frame
    return out, float(record["seconds"])


__all__ = ["CACHE_FORMAT", "CPU_CAPABILITY", "Frames", "LIBRARIES", "Study", "StudyFrames", "cell_key", "read_progress", "run_study"]
