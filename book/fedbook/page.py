"""A chapter's page: its settings, its tables and figures, its claims report, its glued numbers.

A chapter (``notebooks/<name>.py``) opens with a cell tagged ``parameters`` holding ``profile``,
``seed`` and overrides that default to ``None``; papermill injects the caller's values after it.
The next cell turns them into the chapter's settings in one call, :func:`setup`: it refuses a
misspelled papermill parameter, applies the overrides to the profile's values, sets the torch
threads and starts the chapter's clock::

    P = setup(PROFILES, profile, threads=1, rounds=rounds, alphas=alphas)
    frames = run_study(Study("runs", cell, grid={"alpha": P.alphas}, seeds=SEEDS), cache=cache_dir)
    ...
    glue_all(numbers(frames, P))   # every number the prose quotes, from one mapping

The experiments run as studies (:mod:`fedbook.study`). A *derivations* chapter records every
numerical or symbolic check in a :class:`fedbook.checks.CheckTable` and shows it at the end. An
*experiments* chapter declares each claim of its paper with :class:`fedbook.claims.Claim` before
anything is trained, naming the frame, rows and column each side reads
(:class:`fedbook.claims.Read`), and closes with one call, :func:`claims_report`: every claim
decided from an interval over seeds, the counts glued, the table shown. Every verdict is
computed, never typed. Tables for reading (:func:`show_table`, :func:`format_bytes`,
:func:`format_value`), figures' error bars and point labels (:func:`clipped_error`,
:func:`place_labels`) complete the page.

Profiles (:data:`PROFILE_NAMES`): ``smoke`` (seconds; the tests), ``book`` (the default; minutes
on 2 CPU cores) and ``paper`` (the paper's own scale; needs the data and ideally a GPU).

What the findings and teaching pages read, the build's records and the book's own index (its
chapters, their titles, their exercises), is :mod:`fedbook.catalog`. This module belongs to
fedbook, the book's machinery: it may import any module of fedlib, and no module of fedlib imports
it (the book's page *Inside fedlib*).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import numbers
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import torch
from IPython import get_ipython
from matplotlib.transforms import Bbox
from IPython.display import display as ipython_display
from myst_nb import glue as myst_glue

from fedbook.claims import (DOES_NOT_HOLD, FINDINGS, HOLDS, INCONCLUSIVE, OPPOSITE, SMALLER, UNTESTABLE, Claim,
                            ClaimResult, claims_records, evaluate, headline_html, headline_summary, show, summary_html,
                            tally)
from fedbook.tables import Html, format_small, table_of
from fedlib.io import atomic_write_bytes
from fedlib.validation import is_int, is_real

PROFILE_NAMES = ("smoke", "book", "paper")
"""The parameter profiles every chapter defines."""

BEST_KINDS = ("max", "min")
"""Which value of a column :func:`show_table` marks as the best."""

MISSING = "\N{EM DASH}"
"""How :func:`show_table` shows an undefined value (NaN, None): a dash, never ``nan``."""

REPORT_KEYS = ("n_claims", "n_holds", "n_not", "n_inconclusive", "n_untestable", "n_not_smaller", "n_not_opposite")
"""The counts :func:`claims_report` glues (after the chapter's prefix): the claims decided (the
controls are not counted), how many of them hold, do not hold, are inconclusive and are
untestable (at this resolution or in this setting), and how many of those that do not hold are
smaller than claimed or go the opposite direction."""


CLAIMS_RECORDS = "claims_records"
"""The key (after the chapter's prefix) under which :func:`claims_report` glues its rows as JSON
(:func:`fedbook.claims.claims_records`); ``book/build.py`` copies them into the chapter's build
record, which the findings page reads (:func:`fedbook.catalog.read_findings`)."""


CLAIMS_SUMMARY = "claims_summary"
"""The key (after the chapter's prefix) under which :func:`claims_report` glues the chapter's
opening (:func:`claims_opening`); the chapter pastes it under its title with
``{glue} claims_summary`` (a glued value can be pasted above the cell that glues it)."""


def claims_opening(records: Sequence[Mapping[str, Any]], table_id: str) -> Html:
    """A chapter's opening, from its claims records (:func:`fedbook.claims.claims_records`): what it
    found in a few sentences (:func:`fedbook.claims.summary_html`, the sentences the findings page
    shows for the paper), its headline claims' table (:func:`fedbook.claims.headline_html`) and
    links to the whole claims table (``table_id``) and to the findings page.

    Examples
    --------
    >>> from fedbook.claims import claims_records, evaluate, effect
    >>> c = Claim("gain", "X beats Y.", "Abstract", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1, headline=True)
    >>> o = claims_opening(claims_records([evaluate(c, [2.1, 1.8, 2.4])]), "claims-0")
    >>> 'href="#claims-0"' in o._repr_html_(), repr(o).splitlines()[0]
    (True, 'What this chapter found: the paper’s 1 headline claim about its method (those of its abstract or conclusion): gain holds. No other claim is tested.')
    """
    summary, head = summary_html(records), headline_html(records)
    text = summary.text[0].lower() + summary.text[1:]
    html = summary.html.replace('<p class="claims-summary">', '<p class="claims-summary"><strong>What this chapter '
                                'found:</strong> ', 1)
    first = html.index("</strong> ") + len("</strong> ")
    html = html[:first] + html[first].lower() + html[first + 1:]
    links = (f'<p class="claims-links">Every claim, with its rule and substitution: <a href="#{table_id}">the claims '
             f'table</a> at the end of this chapter; every paper: <a href="{FINDINGS}">the findings page</a>.</p>')
    return Html(f'<div class="claims-opening">{html}{head.html}{links}</div>',
                f"What this chapter found: {text}\n{head.text}")


class Settings(SimpleNamespace):
    """A chapter's settings (:func:`setup`): the profile's values with the overrides applied, as
    attributes, plus ``profile``; and the chapter's clock, started by :func:`setup`.

    Examples
    --------
    >>> P = setup({"book": {"rounds": 20}}, "book", history=[])
    >>> P.rounds, P.elapsed() >= 0
    (20, True)
    """

    __slots__ = ("_started",)  # the clock is not a setting: not in the namespace, its repr or equality

    def elapsed(self) -> float:
        """Seconds since :func:`setup` returned these settings (``time.perf_counter``)."""
        return time.perf_counter() - self._started


def notebook_history() -> list[str] | None:
    """The cells the running IPython kernel has executed so far, in order (IPython's ``In``, read
    through ``IPython.get_ipython()``); ``None`` outside IPython.

    Examples
    --------
    >>> notebook_history() is None  # a doctest runs outside IPython
    True
    """
    shell = get_ipython()
    history = shell.user_ns.get("In") if shell is not None else None
    return history if isinstance(history, list) else None


def setup(
    profiles: Mapping[str, Mapping[str, Any]],
    profile: str,
    *,
    threads: int | None = None,
    history: Sequence[str] | None = None,
    **overrides: Any,
) -> Settings:
    """A chapter's settings, in the one call that follows its parameters cell.

    In order: refuse a parameter that papermill injected but the parameters cell does not declare
    (:func:`check_injected` on the notebook's executed cells), resolve the profile and the
    overrides (:func:`resolve`), set torch's CPU threads, and start the chapter's clock
    (:meth:`Settings.elapsed`, for the glued total time).

    Parameters
    ----------
    profiles : mapping of str to mapping
        The chapter's ``PROFILES``: per profile name, every setting the chapter reads.
    profile : str
        The ``profile`` parameter.
    threads : int, optional
        ``torch.set_num_threads(threads)``; ``None`` leaves torch's threads as they are.
    history : sequence of str, optional
        The notebook's executed cell sources in order; ``None`` reads them from the running
        IPython kernel (:func:`notebook_history`; outside IPython there is nothing to check).
    **overrides
        The chapter's override parameters (``None`` keeps the profile's value).

    Returns
    -------
    Settings

    Raises
    ------
    ValueError
        As :func:`check_injected` and :func:`resolve` do (the message names the valid values), and
        on ``threads`` that is not a positive integer or a profile setting named ``elapsed``.

    Examples
    --------
    >>> PROFILES = {"smoke": {"rounds": 2, "alphas": [0.3]}, "book": {"rounds": 20, "alphas": [0.3, 0.1]}}
    >>> P = setup(PROFILES, "smoke", rounds=None, alphas=[0.5], history=[])
    >>> P
    Settings(profile='smoke', rounds=2, alphas=[0.5])
    >>> setup(PROFILES, "book", rounds=None, history=["", "profile = 'book'\\nrounds = None", "# Parameters\\nround = 5\\n"])
    Traceback (most recent call last):
    ...
    ValueError: unknown parameter(s) round; valid: profile, rounds
    """
    check_injected(notebook_history() if history is None else history)
    reserved = [k for k in profiles.get(profile, {}) if k in dir(Settings) and not k.startswith("__")]
    if reserved:
        raise ValueError(f"profile settings may not be named {', '.join(reserved)} (a method of the settings)")
    if threads is not None and (not is_int(threads) or threads < 1):
        raise ValueError(f"threads must be None (torch's own) or an integer >= 1, got {threads!r}")
    settings = Settings(**vars(resolve(profiles, profile, **overrides)))
    if threads is not None:
        torch.set_num_threads(int(threads))
    settings._started = time.perf_counter()
    return settings


def resolve(profiles: Mapping[str, Mapping[str, Any]], profile: str, **overrides: Any) -> SimpleNamespace:
    """The values of ``profiles[profile]`` with the non-``None`` ``overrides`` applied.

    A chapter calls :func:`setup`, which calls this after checking papermill's parameters.

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

    Raises
    ------
    ValueError
        On an unknown profile, an override that is not a setting of the profile, or one of
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
    names: set[str] = set()

    def collect(target) -> None:  # a name, or names unpacked from a tuple or list (``profile, seed = 'book', 0``)
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                collect(t.value if isinstance(t, ast.Starred) else t)

    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            collect(t)
    return names


def check_injected(history: Sequence[str] | None) -> None:
    r"""Refuse a parameter that papermill injected but the chapter's parameters cell does not declare.

    Papermill writes the caller's parameters into a cell headed ``# Parameters`` right after the
    cell tagged ``parameters`` and runs it, even for a name the notebook never reads (it only
    logs a warning): ``-p sede 1`` would run the defaults silently. ``history`` is the
    notebook's executed cell sources in order (IPython's ``In``: :func:`notebook_history`);
    nothing happens outside papermill (no such cell) or without a history (``None``).

    Raises
    ------
    ValueError
        Naming the unknown parameters and the declared ones.

    Examples
    --------
    >>> check_injected(["", "profile = 'book'  # ...\nseed = 0", "# Parameters\nseed = 1\n"])
    >>> check_injected(["", "profile, seed = 'book', 0", "# Parameters\nprofile, seed = 'smoke', 1\n"])
    >>> check_injected(["", "profile = 'book'\nseed = 0", "# Parameters\nsede = 1\n"])
    Traceback (most recent call last):
    ...
    ValueError: unknown parameter(s) sede; valid: profile, seed
    """
    for i, source in enumerate(history or ()):
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
        "an integer": is_int(value),
        "a number": is_real(value),
        "a string": isinstance(value, str),
        "a list": isinstance(value, (list, tuple)),
        "a dict": isinstance(value, Mapping),
    }[kind]
    if not ok:
        raise ValueError(
            f"parameter {key!r} must be {kind} (profile {profile!r} has {default!r}), got {value!r}"
            + (f"; for one value write [{value!r}]" if kind == "a list" else "")
        )
    if kind in ("an integer", "a number"):
        if not math.isfinite(value):
            raise ValueError(f"parameter {key!r} must be a finite number (profile {profile!r} has {default!r}), got {value!r}")
        if default >= 0 and value < 0:
            raise ValueError(f"parameter {key!r} must be >= 0 (profile {profile!r} has {default!r}), got {value!r}")
    if kind == "a list" and len(default) and value is not default:
        kinds = {_kind(d) for d in default}
        if len(kinds) == 1 and None not in kinds:  # a list of one kind: every item is checked against the first
            for i, item in enumerate(value):
                try:
                    _check_kind(f"{key}[{i}]", item, default[0], profile)
                except ValueError as err:
                    raise ValueError(f"{err}; every item of {key!r} must be like the profile's items") from None


def claims_report(
    claims: Iterable[Claim],
    results: Mapping[str, pd.DataFrame],
    *,
    prefix: str = "",
    digits: int = 2,
    total_seconds: float | None = None,
    glue: Callable[..., Any] = myst_glue,
    display: Callable[[Any], Any] = ipython_display,
    evidence: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, ClaimResult]:
    """Decide every declared claim and control, glue the counts, show the table: an experiments
    chapter's closing call.

    Each claim reads its numbers from ``results`` (:meth:`fedbook.claims.Claim.read`: the frames
    its :class:`~fedbook.claims.Read` objects name), in the given order; a claim whose frame is
    not in ``results`` (the chapter did not run what it needs at this profile) is left out of the
    table and the counts, and a line shown under the table names them and the frames they lack
    (so a misspelled frame cannot pass for one this profile does not run). The others are decided
    by :func:`fedbook.claims.evaluate` over seeds, with their regime checks read from the same
    ``results`` (:meth:`fedbook.claims.RegimeCheck.check`). Every declaration must take its
    smallest effect of interest from the book's rule (an :class:`~fedbook.claims.Effect` of
    :func:`fedbook.claims.effect`), never a number typed for the row.
    Then, with ``prefix`` before each key, it glues :data:`REPORT_KEYS` (the counts of
    :func:`fedbook.claims.tally`: controls are not counted; ``n_untestable`` counts both kinds of
    untestable rows, ``n_not_smaller`` and ``n_not_opposite`` the two kinds of "does not hold"), where some claims are headline claims
    ``n_headline``, ``headline_decided`` and ``headline_half_width``
    (:func:`fedbook.claims.headline_summary`), ``total_seconds`` when given, and the rows as JSON
    under :data:`CLAIMS_RECORDS` (:func:`fedbook.claims.claims_records`: the findings page gathers
    them) and, under :data:`CLAIMS_SUMMARY`, the chapter's opening (:func:`claims_opening`: what it
    found in a few sentences and its headline claims, which the chapter pastes under its title),
    and displays :func:`fedbook.claims.show` of the results.

    Parameters
    ----------
    claims : iterable of Claim
        The chapter's declarations, claims and controls, in the table's order, each with ``ours``.
    results : mapping of str to DataFrame
        The frames the claims read, by name.
    prefix : str, default ""
        Put before every glued key (``"fge_"`` glues ``fge_n_claims``, ...).
    digits : int, default 2
        Decimals of the table's intervals.
    total_seconds : float, optional
        Also glued, as ``<prefix>total_seconds`` (e.g. ``P.elapsed()``: the chapter's time).
    glue, display : callable
        What glues (``glue(key, value, display=False)``; default ``myst_nb.glue``) and what shows
        the table (default IPython's ``display``); a test passes its own.
    evidence : mapping of str to (str, str), optional
        By a frame's name, the id of the table or figure of the page that shows it and its name
        in words: each row links to the evidence it reads (:func:`fedbook.claims.show`).

    Returns
    -------
    dict of str to ClaimResult
        The decided rows by key, in the table's order.

    Raises
    ------
    ValueError
        On a declaration that is not a Claim or reads nothing, two with the same key, and as
        :meth:`fedbook.claims.Claim.read` and :func:`fedbook.claims.evaluate` do.

    Examples
    --------
    >>> from fedbook.claims import Read
    >>> runs = pd.DataFrame({"seed": [0, 1, 2] * 2, "method": ["x"] * 3 + ["y"] * 3,
    ...                      "acc": [92.1, 91.8, 92.4, 90.0, 90.1, 90.2]})
    >>> from fedbook.claims import effect
    >>> gain = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", effect("points"),
    ...              resolution=0.1, ours=Read("runs", "acc", method="x"), baseline=Read("runs", "acc", method="y"))
    >>> wide = Claim("wide", "X beats Z.", "Table 3", "accuracy, X − Z, points", "greater", effect("points"),
    ...              resolution=0.1, ours=Read("wide_runs", "acc"))  # not run at this profile: left out
    >>> glued = {}
    >>> R = claims_report([gain, wide], {"runs": runs}, glue=lambda k, v, display: glued.update({k: v}),
    ...                   display=lambda t: None)
    Not decided at this profile, because it does not compute 'wide_runs': wide.
    >>> R["gain"].verdict, list(R), {k: v for k, v in glued.items() if k not in (CLAIMS_RECORDS, CLAIMS_SUMMARY)}
    ('holds', ['gain'], {'n_claims': 1, 'n_holds': 1, 'n_not': 0, 'n_inconclusive': 0, 'n_untestable': 0, 'n_not_smaller': 0, 'n_not_opposite': 0})
    >>> [(r["key"], r["verdict"]) for r in json.loads(glued[CLAIMS_RECORDS])]
    [('gain', 'holds')]
    """
    claims = list(claims)
    for c in claims:
        if not isinstance(c, Claim):
            raise ValueError(f"claims_report takes Claims, got a {type(c).__name__}")
    by_hand = [c.key for c in claims if c.effect is None]
    if by_hand:
        raise ValueError(f"claims {by_hand} declare min_effect by hand: declare it by the book's rule, "
                         "fedbook.claims.effect(kind, paper=the paper's reported gain)")
    missing = [c.key for c in claims if c.ours is None]
    if missing:
        raise ValueError(f"claims {missing} read nothing: declare ours=Read(frame, column, ...) (and baseline=)")
    keys = [c.key for c in claims]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ValueError(f"claim keys must be unique in a report, got duplicates {dupes}")
    out, absent = [], []
    for c in claims:
        try:
            read = c.read(results)
            regimes = [g.check(results) for g in c.regimes]
            if read is None or None in regimes:  # a frame it reads was not run at this profile: said below the table
                absent.append(c.key)
                continue
            out.append(evaluate(c, *read, regimes=regimes))  # within, else the floor of c.resolution
        except ValueError as err:
            err.add_note(f"(deciding claim {c.key!r})")
            raise
    counts = tally(out)
    kinds = [r.shortfall for r in out if r.claim.kind == "claim"]
    glued = dict(zip(REPORT_KEYS, (sum(counts.values()), counts[HOLDS], counts[DOES_NOT_HOLD], counts[INCONCLUSIVE],
                                   sum(counts[v] for v in UNTESTABLE), kinds.count(SMALLER), kinds.count(OPPOSITE))))
    head = headline_summary(out)
    if head["n"]:
        glued.update(n_headline=head["n"], headline_decided=head["decided"], headline_half_width=head["half_width"])
    if total_seconds is not None:
        glued["total_seconds"] = total_seconds
    records = claims_records(out, digits)
    glued[CLAIMS_RECORDS] = json.dumps(records, ensure_ascii=False)
    table = show(out, digits, evidence=evidence)
    glued[CLAIMS_SUMMARY] = claims_opening(records, table.id)
    for key, value in glued.items():
        glue(f"{prefix}{key}", value, display=False)
    display(table)
    if absent:
        frames = sorted({r.frame for c in claims if c.key in absent for r in c.reads} - set(results))
        print(f"Not decided at this profile, because it does not compute {', '.join(map(repr, frames))}: "
              f"{', '.join(absent)}.")
    return {r.claim.key: r for r in out}


def save_frames(frames: Mapping[str, pd.DataFrame], folder: str | os.PathLike | None) -> list[Path]:
    """Each frame as ``<folder>/<name>.csv``, written atomically (:func:`fedlib.io.atomic_write_bytes`):
    a chapter's tidy results in its ``results_dir``; nothing when ``folder`` is ``None`` (the
    parameter not set). Returns the files written.

    Examples
    --------
    >>> import tempfile
    >>> [p.name for p in save_frames({"runs": pd.DataFrame({"seed": [0], "acc": [91.5]})}, tempfile.mkdtemp())]
    ['runs.csv']
    >>> save_frames({"runs": pd.DataFrame()}, None)
    []
    """
    if folder is None:
        return []
    return [atomic_write_bytes(Path(folder) / f"{name}.csv", frame.to_csv(index=False).encode())
            for name, frame in frames.items()]


def glue_all(values: Mapping[str, Any], *, prefix: str = "", glue: Callable[..., Any] = myst_glue) -> None:
    """Glue every value of ``values`` under its key (with ``prefix`` before it), for the prose:
    a chapter computes its numbers into one mapping and publishes it in one call.

    Examples
    --------
    >>> glued = {}
    >>> glue_all({"rounds": 20, "acc": 91.25}, prefix="s_", glue=lambda k, v, display: glued.update({k: v}))
    >>> glued
    {'s_rounds': 20, 's_acc': 91.25}
    """
    for key, value in values.items():
        glue(f"{prefix}{key}", value, display=False)


_LEADING_NUMBER = re.compile(r"^\s*([+-]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")


def format_number(value: float | None, spec: str = ".3f") -> str:
    """A number for prose and tables in ``spec``, with the limits in words: ``"∞"`` for an
    infinity or ``None`` (a bound that does not exist, a ratio that cannot be fitted), ``"not
    defined"`` for NaN.

    Examples
    --------
    >>> format_number(0.12345), format_number(2.5, ".2f"), format_number(math.inf), format_number(None), format_number(math.nan)
    ('0.123', '2.50', '∞', '∞', 'not defined')
    """
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "\N{INFINITY}"
    if isinstance(value, float) and math.isnan(value):
        return "not defined"
    return format(value, spec)


def _leading_number(value: Any) -> float:
    """The number a cell starts with (``"91.0 ± 2.5"`` -> 91.0), NaN for none: what ``best`` compares."""
    if is_real(value):
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


def sign_word(change: float, up: str, down: str, same: str = "does not change", tol: float = 0.05) -> str:
    """The word for the sign of a computed change: ``up`` above ``tol``, ``down`` below
    ``-tol``, ``same`` within it (and for NaN).

    Examples
    --------
    >>> sign_word(0.3, "grows", "shrinks"), sign_word(-0.3, "grows", "shrinks"), sign_word(0.01, "grows", "shrinks")
    ('grows', 'shrinks', 'does not change')
    >>> sign_word(0.003, "larger", "smaller", "the same", tol=0.005)
    'the same'
    """
    if not is_real(tol) or not tol >= 0:
        raise ValueError(f"tol must be a number >= 0, got {tol!r}")
    return up if change > tol else down if change < -tol else same


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_value(x: float) -> str:
    """A value of a parameter grid for prose and tables: ``0.1``, ``10``, ``∞``, and a power of
    ten written as one (``10⁻⁴``, ``2 × 10⁵``) when it is very small or very large.

    Examples
    --------
    >>> format_value(0.1), format_value(10.0), format_value(float("inf")), format_value(1e-4), format_value(2e5)
    ('0.1', '10', '∞', '10⁻⁴', '2 × 10⁵')
    """
    if not math.isfinite(x):
        return "∞"
    if x == 0 or 1e-2 <= abs(x) < 1e4:
        return f"{x:g}"
    if float(f"{x:.0e}") != x:  # not a digit times a power of ten: no rounding to one digit
        return f"{x:.3g}"
    mantissa, exponent = f"{x:.0e}".split("e")
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    return power if mantissa == "1" else f"{mantissa} × {power}"


_NUMBER_TEXT = re.compile(r"[-−+]?(\d[\d,.]*|∞)( × 10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)?( ?%| [kMGT]?i?B)?( ± (\d[\d,.]*|∞))?( \[[-−+\d,.∞ ]*\])?( ?%)?"
                          r"|n/a|" + MISSING)
"""A cell that reads as one number (with its interval or unit): kept on one line by :func:`show_table`."""


def _together(text: str) -> str:
    """A number with its interval, the interval's spaces made no-break: a line may break only
    between the number and its interval (``"93.2"`` / ``"± 1.6"``, never ``"93.2 ±"`` / ``"1.6"``).

    Examples
    --------
    >>> _together("93.2 ± 1.6"), _together("0.306 [0.000, 1.000]"), _together("15.2 kB")
    ('93.2 ±\xa01.6', '0.306 [0.000,\xa01.000]', '15.2 kB')
    """
    for mark in (" ± ", " ["):
        if mark in text:
            head, tail = text.split(mark, 1)
            return f"{head} {(mark[1:] + tail).replace(' ', chr(0xA0))}"
    return text


def _format_cell(value: Any, spec: Any) -> str:
    """One cell as text: ``spec`` a format spec (``".2f"``), a callable, or ``None`` (the default rule)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT:
        return MISSING
    if callable(spec):
        return str(spec(value))
    if isinstance(spec, str) and re.fullmatch(r"\.\d+e", spec) and isinstance(value, numbers.Real):
        return format_small(float(value), int(spec[1:-1]))  # 0 as 0, 3.0 × 10⁻¹⁶: never 0.0e+00
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
        Per column: a format spec (``".1%"``; ``".1e"`` writes a power of ten as a reader reads it,
        ``3.0 × 10⁻¹⁶`` and zero as ``0``: :func:`fedbook.tables.format_small`) or a callable (e.g.
        :func:`format_bytes`).
    best : dict, optional
        Per column: ``"max"`` or ``"min"``; the best value (ties: every one) is shown in bold.
        Cells that are text (``"91.0 ± 2.5"``) compare by the number they start with.
    index : bool, default True
        Show the frame's index as its first column(s), named after it (``False``: drop it).
    wrap : bool, default False
        Wrap long text in its cell (statement columns) instead of widening the table.

    Returns
    -------
    fedbook.tables.Table
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
    styler = table_of(table).set_uuid(f"table-{uuid}").hide(axis="index")
    # a number and its interval ("93.2 ± 1.6", "0.306 [0.000, 1.000]") may wrap only between the two,
    # never inside either: a table of many such columns still fits its box
    texts = {c: [_format_cell(v, formats.get(c, per_column.get(c, default_digits))) for v in table[c]]
             for c in table.columns}
    number_text = [c for c in table.columns if all(_NUMBER_TEXT.fullmatch(t) for t in texts[c])]
    with_interval = {c for c in number_text if any(" ± " in t or " [" in t for t in texts[c])}
    for column in table.columns:
        spec = formats.get(column, per_column.get(column, default_digits))
        shown = (lambda v, spec=spec: _together(_format_cell(v, spec))) if column in with_interval else \
            (lambda v, spec=spec: _format_cell(v, spec))
        styler = styler.format(shown, subset=[column])
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
    # numbers never wrap inside a value: numeric columns and the ones whose every cell reads as a
    # number (a size "15.2 kB"; one with its interval wraps only before it, _together)
    numeric = [c for i, c in enumerate(table.columns) if ((i > 0 and pd.api.types.is_numeric_dtype(table[c]))
                                                          or c in number_text) and c not in with_interval]
    styler = styler.set_properties(subset=numeric, **{"white-space": "nowrap"}) if numeric else styler
    return styler.set_properties(**dict(props)).set_table_styles(styles)


def clipped_error(center: float, half: float, low: float = 0.0, high: float = 100.0) -> list[list[float]] | None:
    """Asymmetric error-bar lengths of ``center ± half`` cut at ``[low, high]`` (an accuracy in %
    stays in 0-100), as matplotlib's ``errorbar`` takes them (``xerr``/``yerr``); ``None`` when
    ``half`` is not finite (one seed: no bar).

    Examples
    --------
    >>> clipped_error(98.0, 5.0), clipped_error(50.0, float("inf"))
    ([[5.0], [2.0]], None)
    """
    if not np.isfinite(half):
        return None
    return [[center - max(low, center - half)], [min(high, center + half) - center]]


def place_labels(ax, labels: Sequence[tuple[str, tuple[float, float]]], points: Sequence[tuple[float, float]],
                 fontsize: float = 7) -> None:
    """Write each label next to its point where it overlaps no other label and no point and stays
    inside the axes: the first free spot among offsets in eight directions, at growing distances
    (a thin leader line from the third distance on). A label with no free spot goes at the first
    offset, so it is still there.

    Call it after the figure's layout is final (``fig.tight_layout()``, ``fig.canvas.draw()``): it
    measures the labels in display coordinates.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    labels : sequence of (str, (x, y))
        The text and the data point it names, placed in this order (the first gets the best spot).
    points : sequence of (x, y)
        Every point drawn (labelled or not): no label covers one.
    fontsize : float, default 7

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> _ = ax.plot([0, 1], [0, 1], "o")
    >>> place_labels(ax, [("A", (0, 0)), ("B", (1, 1))], [(0, 0), (1, 1)])
    >>> [t.get_text() for t in ax.texts]
    ['A', 'B']
    >>> plt.close(fig)
    """
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = []
    for px, py in ax.transData.transform(np.asarray(points, dtype=float)):
        taken.append(Bbox.from_extents(px - 4, py - 4, px + 4, py + 4))
    directions = [(1, 1, "left", "bottom"), (1, -1, "left", "top"), (-1, 1, "right", "bottom"),
                  (-1, -1, "right", "top"), (1, 0, "left", "center"), (-1, 0, "right", "center"),
                  (0, 1, "center", "bottom"), (0, -1, "center", "top")]
    for text, xy in labels:
        placed = None
        for dist in (4, 9, 15, 22):
            for dx, dy, ha, va in directions:
                t = ax.annotate(text, xy, xytext=(dx * dist, dy * dist), textcoords="offset points", ha=ha, va=va,
                                fontsize=fontsize, arrowprops=dict(arrowstyle="-", lw=0.5, color="0.4") if dist > 9 else None)
                box = t.get_window_extent(renderer)
                inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                if inside and not any(box.overlaps(o) for o in taken):
                    placed = box
                    break
                t.remove()
            if placed is not None:
                break
        if placed is None:  # no free spot: the first offset, so the label is still there
            placed = ax.annotate(text, xy, xytext=(4, 4), textcoords="offset points", fontsize=fontsize).get_window_extent(renderer)
        taken.append(placed)


__all__ = ["BEST_KINDS", "CLAIMS_RECORDS", "CLAIMS_SUMMARY", "MISSING", "PROFILE_NAMES", "REPORT_KEYS", "check_injected", "claims_opening", "claims_report",
           "clipped_error", "format_bytes", "format_number", "format_value", "glue_all", "notebook_history", "save_frames",
           "place_labels", "resolve", "Settings", "setup", "show_table", "sign_word"]
