r"""Claims a careful reviewer would accept: declarations, paired intervals, fixed decision rules.

A claim of a paper is checked in the book as a **declaration made before the numbers exist**:
the paper's sentence quoted verbatim with its section, the
quantity it is about, the claimed direction of the difference (ours − baseline), the smallest
difference that counts, the smallest difference the quantity can show at all (its resolution:
one test image of 1,000 is 0.1 points, :func:`resolution_of`), the comparator (one named baseline,
or every baseline of a list) and the substitution of our small scale that affects it. The numbers
then enter as one value per seed (or per test sample / client) for each side, paired, and the
verdict is *computed* from the interval of the paired difference by the declared rule:

- ``"holds"`` when the interval clears the minimum effect in the claimed direction;
- ``"does not hold"`` when it clears it in the other direction;
- ``"inconclusive at this scale"`` otherwise: an honest answer, not a failure.

There is no "partly": a claim with several parts is several claims (several rows).

Two intervals, both of the mean paired difference ours − baseline:

- :func:`paired_interval`: Student's t interval of the mean paired difference over seeds
  (the seeds vary the partition, the initialization and the data subset, so it covers all of
  them at once; every seed draws its own test sets, so their noise is in it too), its variance
  floored by the smallest value the test noise inside each seed makes plausible (``within``, or
  the quantization noise of the resolution): equal differences on every seed no longer give a
  zero-width interval read as certain, and the coverage stays nominal. One seed gives the infinite interval: a single run cannot
  decide a claim. :func:`simulate_coverage` checks its coverage by simulation.
- :func:`paired_bootstrap`: the paired percentile bootstrap (Efron & Tibshirani, *An
  Introduction to the Bootstrap*, 1993, ch. 13) of the mean difference over units of one run
  (test samples scored 0/1, or clients' accuracies): it measures how much the test set alone
  moves the difference. It needs many units (hundreds of test samples; a handful of clients is
  too few, use seeds there), and its randomness is an argument (``seed``).

Both return an :class:`Interval`; :func:`decide` applies a :class:`Claim`'s rule to it,
:func:`evaluate` does both, :func:`claims_table` renders the book's table (each row's rule
rendered from its declaration, and how many seeds would decide it: :func:`seeds_to_decide`) and
:func:`tally` counts the verdicts.

The comparator is fixed before the runs, in one of two forms (never a per-seed maximum over
baselines, which is biased toward "does not hold": under a tie of six baselines it says so in
about 40 % of experiments of 5 seeds, see :func:`strongest_baseline`):

- a named baseline chosen by a declared rule on data the claim does not use
  (:func:`strongest_baseline`, a :class:`Comparator`), declared ``versus=comparator.name``;
- every baseline of a list, ``versus=("FedAvg", "Ditto", ...)``: an intersection-union test
  (:func:`decide`), one interval per baseline.

Examples
--------
>>> claim = Claim("gain", "Method X improves accuracy.", "Section 5, Table 2",
...               "global accuracy, X − FedAvg, points", "greater", min_effect=0.5, resolution=0.1)
>>> result = evaluate(claim, [91.9, 92.4, 92.1, 91.7, 92.3], [90.1, 90.6, 90.2, 90.0, 90.4])
>>> print(result.interval)
+1.82 [+1.72, +1.92], 5 seeds
>>> result.verdict
'holds'
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats

from fedbook.tables import table_of
from fedlib.validation import is_int, is_real

HOLDS = "holds"
"""The verdict when the interval clears the minimum effect in the claimed direction."""
DOES_NOT_HOLD = "does not hold"
"""The verdict when the interval clears the minimum effect in the other direction."""
INCONCLUSIVE = "inconclusive at this scale"
"""The verdict when the interval clears neither side (it includes one run's infinite interval)."""
VERDICTS = (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE)
"""Every verdict, in the order of :func:`tally` and of the book's tallies."""
DIRECTIONS = ("greater", "less", "at least", "at most")
"""The claim about the difference ours − baseline: a sign ("greater", "less"), or non-inferiority
within a tolerance ("at least": ours is no worse than the baseline by more than ``min_effect``;
"at most": ours exceeds it by no more than ``min_effect``)."""
METHODS = ("t", "t+floor", "bootstrap")
"""How an :class:`Interval` was computed: Student's t over seeds with the seeds' own variance
(``"t"``), Student's t over seeds whose variance was raised to the floor of the test noise inside
each seed (``"t+floor"``, :func:`paired_interval`), or a paired bootstrap over units."""
OVER = ("seeds", "test samples", "clients")
"""What :func:`evaluate` pairs over: seeds (t interval) or the units of one run (paired bootstrap)."""
TABLE_COLUMNS = ("claim", "quantity", "ours", "rule", "verdict", "seeds to decide", "substitution")
"""The columns of :func:`claims_table`."""
KINDS = ("claim", "control")
"""A paper's claim (counted by :func:`tally`), or a control the book adds to read a claim (not counted)."""

MAX_SEEDS = 10_000
"""The largest number of seeds :func:`seeds_to_decide` looks for."""
NOT_AT_THIS_MEAN = "not at this mean"
"""What :func:`seeds_to_decide` answers when no number of seeds decides at the observed mean."""

_MINUS = "\N{MINUS SIGN}"


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1) (e.g. 0.95), got {level!r}")
    return float(level)


def _signed(x: float, digits: int) -> str:
    """``+1.23`` / ``−0.40`` / ``+∞`` with a typographic minus."""
    if math.isinf(x):
        return ("+" if x > 0 else _MINUS) + "\N{INFINITY}"
    return f"{x:+.{digits}f}".replace("-", _MINUS)


def _effect(x: float) -> str:
    """A minimum effect as declared, in its shortest form to three significant digits: ``0.5``,
    ``2.17``, ``0.714`` (one image of 140 in points, 0.714285...)."""
    return f"{x:.3g}".replace("-", _MINUS)


def _percent(level: float) -> str:
    return f"{round(level * 100, 6):g} %"


def _check_seed(seed) -> None:
    if seed is None or not (is_int(seed) or isinstance(seed, np.random.Generator)):
        raise ValueError(f"seed must be an int or a numpy Generator (randomness is an argument), got {seed!r}")


def _check_resolution(resolution, name: str = "resolution") -> float:
    if not is_real(resolution) or not (math.isfinite(resolution) and resolution > 0):
        raise ValueError(
            f"{name} must be a finite number > 0, the smallest difference the quantity can show in its units "
            f"(e.g. 0.1: one test image of 1,000 in points; resolution_of(n_units)), got {resolution!r}"
        )
    return float(resolution)


def resolution_of(n_units: int, scale: float = 100.0) -> float:
    """The resolution of a share of ``n_units`` units: one unit, ``scale / n_units``.

    Parameters
    ----------
    n_units : int
        How many units the share is counted over (test images, clients), >= 1.
    scale : float, default 100
        The unit of the share: 100 for points (percent), 1 for a fraction, ``n_units`` for a count.

    Raises
    ------
    ValueError
        On ``n_units`` that is not a positive integer, or ``scale`` that is not a finite number > 0.

    Examples
    --------
    >>> resolution_of(1000)  # one test image of 1,000, in points
    0.1
    >>> resolution_of(20, scale=20)  # one client of 20, in a client count
    1.0
    """
    if not is_int(n_units) or n_units < 1:
        raise ValueError(f"n_units must be a positive integer (the units the share counts), got {n_units!r}")
    if not is_real(scale) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0 (100 for points, 1 for a fraction), got {scale!r}")
    return float(scale) / int(n_units)


def _check_versus(versus) -> str | tuple[str, ...] | None:
    if versus is None:
        return None
    if isinstance(versus, str):
        if not versus.strip():
            raise ValueError("Claim.versus must be a non-empty name, a tuple of names, or None; got ''")
        return versus
    if isinstance(versus, (tuple, list)) and versus and all(isinstance(v, str) and v.strip() for v in versus):
        dupes = sorted({v for v in versus if list(versus).count(v) > 1})
        if dupes:
            raise ValueError(f"Claim.versus names each baseline once, got duplicates {dupes}")
        return tuple(versus)
    raise ValueError(
        "Claim.versus must be one baseline's name (a str), a tuple of >= 1 names (the claim beats every one), "
        f"or None; got {versus!r}"
    )


@dataclass(frozen=True, init=False)
class Read:
    """Where a claim's numbers are: one column of a named frame of the chapter's results, on the
    rows whose columns (or index levels) hold the given values.

    A claim reads its sides through :class:`Read` objects (``ours``, ``baseline``, ``within``), so
    the declaration names the frame, the rows and the column it compares, and a reader sees the
    claim and its numbers in one place. :meth:`__call__` returns the values as a Series whose
    index is the unit they are paired over (the seed, or the frame's remaining keys): two sides
    are paired unit by unit (:meth:`Claim.read`).

    Parameters
    ----------
    frame : str
        The frame's name in the results mapping (a chapter's ``run_study`` frames, or any frame
        the chapter computed).
    column : str
        The column of values.
    **where
        ``name=value``: keep the rows whose column (or index level) ``name`` holds ``value``; a
        filter on an index level drops the level. The remaining index (a default index becomes
        the ``seed`` column when there is one) is the pairing unit.

    Examples
    --------
    >>> import pandas as pd
    >>> table = pd.DataFrame({"method": ["a", "b", "a", "b"], "seed": [0, 0, 1, 1], "acc": [90.0, 88.0, 91.0, 87.5]})
    >>> Read("table", "acc", method="a")({"table": table}).tolist()
    [90.0, 91.0]
    >>> Read("missing", "acc")({"table": table}) is None  # not run at this profile
    True
    """

    frame: str
    column: str
    where: tuple[tuple[str, Any], ...]

    def __init__(self, frame: str, column: str, **where: Any) -> None:
        for name, value in (("frame", frame), ("column", column)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"Read.{name} must be a non-empty string, got {value!r}")
        object.__setattr__(self, "frame", frame)
        object.__setattr__(self, "column", column)
        object.__setattr__(self, "where", tuple(where.items()))

    def __repr__(self) -> str:
        where = "".join(f", {k}={v!r}" for k, v in self.where)
        return f"Read({self.frame!r}, {self.column!r}{where})"

    def __call__(self, results: Mapping[str, pd.DataFrame]) -> pd.Series | None:
        """The values, indexed by their unit; ``None`` when ``results`` has no such frame (the
        chapter did not run it at this profile)."""
        if self.frame not in results:
            return None
        frame = results[self.frame]
        if not isinstance(frame, pd.DataFrame):
            raise ValueError(f"{self!r}: results[{self.frame!r}] is a {type(frame).__name__}, not a DataFrame")
        for name, value in self.where:
            if name in (frame.index.names or ()) and name is not None:
                if value not in frame.index.get_level_values(name):
                    valid = sorted(set(frame.index.get_level_values(name)), key=str)
                    raise ValueError(f"{self!r}: no row with {name} = {value!r}; valid: {valid}")
                frame = frame.xs(value, level=name)
            elif name in frame.columns:
                rows = frame[name] == value
                if not rows.any():
                    valid = sorted(set(frame[name]), key=str)
                    raise ValueError(f"{self!r}: no row with {name} = {value!r}; valid: {valid}")
                frame = frame[rows].drop(columns=name)
            else:
                raise ValueError(f"{self!r}: frame {self.frame!r} has no column or index level {name!r}; valid: "
                                 f"{[n for n in frame.index.names if n is not None] + list(frame.columns)}")
        if self.column not in frame.columns:
            raise ValueError(f"{self!r}: frame {self.frame!r} has no column {self.column!r}; valid: {list(frame.columns)}")
        values = frame[self.column]
        if isinstance(results[self.frame].index, pd.RangeIndex):  # a tidy frame: its rows' seeds, or their order
            seeds = frame["seed"] if "seed" in frame.columns and self.column != "seed" else None
            values = values.set_axis(pd.RangeIndex(len(values)) if seeds is None else pd.Index(seeds, name="seed"))
        return values.astype(np.float64)


@dataclass(frozen=True)
class Claim:
    r"""One claim of a paper, declared before the numbers exist.

    Parameters
    ----------
    key : str
        A short id, unique within a table (e.g. ``"gain-global-0.1"``).
    quote : str
        The paper's sentence, verbatim.
    source : str
        Where the sentence is, e.g. ``"Section V-C, Table IV"``.
    quantity : str
        What is measured and in which units, the difference written as ours − baseline, e.g.
        ``"global accuracy, FedGRC − FedAvg, points"``.
    direction : {"greater", "less", "at least", "at most"}
        The claimed sign of the difference; or, for a claim of *closeness* ("competitive with",
        "closely tracks"), non-inferiority: "at least" (the difference is above
        ``-min_effect``) or "at most" (below ``+min_effect``).
    min_effect : float, optional
        The smallest difference that counts, in the quantity's units, at least ``resolution``
        (a smaller one, 0 included, is refused: a difference below one unit of resolution cannot
        be measured, and with 0 a one-image difference could hold); for "at least" / "at most",
        the tolerance. Default (``None``): the resolution.
    substitution : str, default ""
        What our scale substitutes that affects this claim (a backbone, a baseline, a data set).
    level : float, default 0.95
        The level of the interval the rule reads.
    kind : {"claim", "control"}, default "claim"
        ``"control"`` for a question the book asks to read a claim (a matched-steps or a
        rebalancing-only control, say): decided by the same rule, rendered with the book's
        question instead of a quotation (``quote`` holds the question, ``source`` names the claim
        it serves) and left out of :func:`tally`.
    resolution : float, keyword-only, required
        The smallest difference the quantity can show, in its units (> 0): one test image of a
        1,000-image test set in points is 0.1 (:func:`resolution_of`), one client of 20 in a client
        count is 1. It floors the interval over seeds (:func:`paired_interval`) when the per-seed
        test noise is not given.
    versus : str or tuple of str, keyword-only, optional
        The comparator, fixed before the runs: one baseline's name (e.g. the
        ``name`` of the :class:`Comparator` of :func:`strongest_baseline`), or a tuple of names when the claim
        is that ours beats *every* one of them (decided by the intersection-union rule of
        :func:`decide`); ``None`` where the quantity names its comparison itself (``"ours − 0"``).
    headline : bool, keyword-only, default False
        Whether the paper's abstract or conclusion makes the claim (a *headline* claim): the table
        marks it, and :func:`fedbook.page.claims_report` glues the median half-width of the
        headline claims' intervals. A control cannot be a headline claim.
    ours : Read, keyword-only, optional
        Where our side's values are (:class:`Read`: a frame of the chapter's results, its rows and
        column); the claim is decided on them by :func:`fedbook.page.claims_report`.
    baseline : Read, number or dict of str to Read, keyword-only, default 0.0
        The other side, paired with ``ours`` unit by unit (:meth:`read`): a :class:`Read`, a
        number (``0.0`` for a per-seed difference), or, for a claim ``versus`` a tuple, a dict of
        each named baseline's :class:`Read`.
    within : Read or dict of str to Read, keyword-only, optional
        The per-unit variance of the difference from the test sample alone (the floor of
        :func:`paired_interval`; default: the floor of ``resolution``).

    Raises
    ------
    ValueError
        On an empty text, an unknown direction or kind, a ``resolution`` that is not a finite
        number > 0, a ``min_effect`` below the resolution (0 included), or a
        ``versus`` that is neither a name, a tuple of distinct names nor ``None``.

    Notes
    -----
    The decision rule, with :math:`[L, U]` the interval of the paired difference and
    :math:`m` the minimum effect:

    .. math::

        \text{greater: holds} \iff L > m, \quad \text{does not hold} \iff U < -m;
        \qquad \text{less: holds} \iff U < -m, \quad \text{does not hold} \iff L > m;

    otherwise "inconclusive at this scale". The rule is symmetric: "does not hold" asserts the
    *opposite* direction with the same margin, so an interval that reaches into
    :math:`[-m, +m]` (for instance one that lies inside it: the difference is smaller than the
    claimed size, but not shown to go the other way) is inconclusive, not a failure. Declare
    ``min_effect`` with that in mind. Non-inferiority reads one threshold on both sides:

    .. math::

        \text{at least: holds} \iff L > -m, \quad \text{does not hold} \iff U < -m;
        \qquad \text{at most: holds} \iff U < m, \quad \text{does not hold} \iff L > m.

    Against every baseline of a tuple, the same rule per baseline (:func:`decide`).

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, resolution=0.1)
    >>> print(c.rule())
    claimed greater than +0.5: holds if the whole 95 % interval of the paired difference lies
    above +0.5; does not hold if it lies below −0.5; otherwise inconclusive at this scale
    >>> Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.05, resolution=0.1)
    Traceback (most recent call last):
    ...
    ValueError: claim 'gain': min_effect 0.05 is below the resolution 0.1; declare min_effect >= resolution: a difference below one unit of resolution (0.1) cannot be measured
    """

    key: str
    quote: str
    source: str
    quantity: str
    direction: str
    min_effect: float | None = None
    substitution: str = ""
    level: float = 0.95
    kind: str = "claim"
    resolution: float = field(kw_only=True)
    versus: str | tuple[str, ...] | None = field(default=None, kw_only=True)
    headline: bool = field(default=False, kw_only=True)
    ours: Read | None = field(default=None, kw_only=True)
    baseline: Read | float | Mapping[str, Read] = field(default=0.0, kw_only=True)
    within: Read | Mapping[str, Read] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        for name in ("key", "quote", "source", "quantity"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Claim.{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.substitution, str):
            raise ValueError(f"Claim.substitution must be a string ('' for none), got {self.substitution!r}")
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; valid: {', '.join(map(repr, KINDS))}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {self.direction!r}; valid: {', '.join(map(repr, DIRECTIONS))}")
        if not isinstance(self.headline, bool):
            raise ValueError(f"Claim.headline must be True or False, got {self.headline!r}")
        if self.headline and self.kind == "control":
            raise ValueError(f"claim {self.key!r}: a control cannot be a headline claim (headline=True, kind='control')")
        r = _check_resolution(self.resolution, "Claim.resolution")
        m = r if self.min_effect is None else self.min_effect
        if not is_real(m) or not (math.isfinite(m) and m >= 0):
            raise ValueError(f"claim {self.key!r}: min_effect must be a finite number >= the resolution (None: the resolution), got {m!r}")
        if m < r and not math.isclose(m, r):
            raise ValueError(
                f"claim {self.key!r}: min_effect {m:g} is below the resolution {r:g}; declare min_effect >= "
                f"resolution: a difference below one unit of resolution ({r:g}) cannot be measured"
            )
        object.__setattr__(self, "min_effect", float(m))
        object.__setattr__(self, "resolution", r)
        object.__setattr__(self, "level", _check_level(self.level))
        object.__setattr__(self, "versus", _check_versus(self.versus))
        self._check_reads()

    def _check_reads(self) -> None:
        if self.ours is not None and not isinstance(self.ours, Read):
            raise ValueError(f"claim {self.key!r}: ours must be a Read (where the values are), got {self.ours!r}")
        sides = {"baseline": self.baseline, "within": self.within}
        for name, side in sides.items():
            if isinstance(side, Mapping):
                if not self.every or set(side) != set(self.versus):
                    raise ValueError(f"claim {self.key!r}: a dict {name} must name exactly the baselines of versus "
                                     f"({self.versus!r}), got {sorted(side)}")
                bad = [k for k, v in side.items() if not isinstance(v, Read)]
                if bad:
                    raise ValueError(f"claim {self.key!r}: {name}[{bad[0]!r}] must be a Read, got {side[bad[0]]!r}")
            elif side is not None and not isinstance(side, Read) and not (name == "baseline" and is_real(side)):
                raise ValueError(f"claim {self.key!r}: {name} must be a Read{', a number' * (name == 'baseline')} or a "
                                 f"dict of Reads, got {side!r}")
        if self.ours is not None and self.every and not isinstance(self.baseline, Mapping):
            raise ValueError(f"claim {self.key!r} is against every one of {list(self.versus)}: baseline must be a dict "
                             "{name: Read}")

    def read(self, results: Mapping[str, pd.DataFrame]) -> tuple | None:
        """``(ours, baseline, within)`` as :func:`evaluate` takes them, read from ``results``
        through the claim's :class:`Read` objects and paired unit by unit (the other sides in the
        order of ``ours``); ``None`` when a frame it reads is not in ``results``.

        Raises
        ------
        ValueError
            When the claim declares no ``ours``, or two sides do not hold the same units.

        Examples
        --------
        >>> import pandas as pd
        >>> runs = pd.DataFrame({"seed": [0, 1, 0, 1], "method": ["x", "x", "y", "y"], "acc": [92.0, 93.0, 90.0, 90.5]})
        >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, resolution=0.1,
        ...           ours=Read("runs", "acc", method="x"), baseline=Read("runs", "acc", method="y"))
        >>> ours, baseline, within = c.read({"runs": runs})
        >>> ours.tolist(), baseline.tolist(), within
        ([92.0, 93.0], [90.0, 90.5], None)
        """
        if self.ours is None:
            raise ValueError(f"claim {self.key!r} declares no values: pass ours=Read(...) (and baseline=)")
        ours = self.ours(results)
        if ours is None:
            return None

        def side(x, what: str):
            if isinstance(x, Mapping):
                out = {name: side(r, f"{what}[{name!r}]") for name, r in x.items()}
                return None if any(v is None for v in out.values()) else out
            if not isinstance(x, Read):
                return x
            values = x(results)
            if values is None:
                return None
            if not values.index.equals(ours.index):
                if len(values) != len(ours) or set(values.index) != set(ours.index) or not ours.index.is_unique:
                    raise ValueError(f"claim {self.key!r}: {what} ({x!r}) holds the units {list(values.index)}, ours "
                                     f"({self.ours!r}) {list(ours.index)}; the two sides must be paired unit by unit")
                values = values.reindex(ours.index)
            return values.to_numpy()

        baseline, within = side(self.baseline, "baseline"), side(self.within, "within")
        if baseline is None or (self.within is not None and within is None):
            return None
        return ours.to_numpy(), baseline, within

    @property
    def every(self) -> bool:
        """Whether the claim is against every baseline of a tuple (``versus`` a tuple)."""
        return isinstance(self.versus, tuple)

    def rule(self) -> str:
        """The decision rule as a sentence, rendered from the declaration (the table's rule column).

        Against every baseline of a tuple, the rule names them and the Bonferroni level of the
        "does not hold" side (:func:`decide`).

        Examples
        --------
        >>> c = Claim("gain", "X beats all.", "Table 2", "accuracy, X − best baseline, points", "greater", 0.5,
        ...           resolution=0.1, versus=("A", "B"))
        >>> print(c.rule())
        claimed greater than +0.5 against each of A, B: holds if the whole 95 % interval of every paired
        difference lies above +0.5; does not hold if, for any one, the whole 97.5 % interval (Bonferroni over 2)
        lies below −0.5; otherwise inconclusive at this scale
        """
        m = self.min_effect
        if self.direction in ("at least", "at most"):
            bound = (f"{_MINUS}{_effect(m)}" if self.direction == "at least" else f"+{_effect(m)}") if m > 0 else "0"
            toward, away = ("above", "below") if self.direction == "at least" else ("below", "above")
            claimed = f"claimed {self.direction} {bound} (within {_effect(m)} of the baseline)"
            other = bound
        else:
            plus = f"+{_effect(m)}" if m > 0 else "0"
            minus = f"{_MINUS}{_effect(m)}" if m > 0 else "0"
            bound, other = (plus, minus) if self.direction == "greater" else (minus, plus)
            toward, away = ("above", "below") if self.direction == "greater" else ("below", "above")
            claimed = f"claimed {self.direction} than {bound}"
        if self.every:
            k = len(self.versus)
            return (
                f"{claimed} against each of {', '.join(self.versus)}: holds if the whole {_percent(self.level)} "
                f"interval of every paired difference lies {toward} {bound}; does not hold if, for any one, the "
                f"whole {_percent(_bonferroni(self.level, k))} interval (Bonferroni over {k}) lies {away} {other}; "
                f"otherwise {INCONCLUSIVE}"
            )
        return (
            f"{claimed}: holds if the whole {_percent(self.level)} interval of the paired difference lies "
            f"{toward} {bound}; does not hold if it lies {away} {other}; otherwise {INCONCLUSIVE}"
        )


def _bonferroni(level: float, k: int) -> float:
    """The level of each of ``k`` intervals whose union errs at most as often as one at ``level``."""
    return 1 - (1 - level) / k


@dataclass(frozen=True)
class Interval:
    """The interval of a mean paired difference (ours − baseline).

    Parameters
    ----------
    mean : float
        The observed mean difference.
    low, high : float
        The interval's ends; infinite when the data cannot bound the difference (one seed).
    n : int
        How many pairs (seeds or units) it rests on.
    level : float
        Its nominal coverage, in (0, 1).
    method : {"t", "t+floor", "bootstrap"}
        Student's t over seeds (``"t+floor"`` when the floor of the test noise inside each seed
        set its width, :func:`paired_interval`), or a paired percentile bootstrap over units.
    unit : str, default "seeds"
        What the pairs are, plural (``"seeds"``, ``"test samples"``, ``"clients"``).

    Examples
    --------
    >>> print(Interval(1.234, 0.4, 2.06, 5, 0.95, "t"))
    +1.23 [+0.40, +2.06], 5 seeds
    >>> print(Interval(0.5, -math.inf, math.inf, 1, 0.95, "t").format(1))
    +0.5 [−∞, +∞], 1 seed
    """

    mean: float
    low: float
    high: float
    n: int
    level: float
    method: str
    unit: str = "seeds"

    def __post_init__(self) -> None:
        values = (self.mean, self.low, self.high)
        if any(math.isnan(float(v)) for v in values) or math.isinf(float(self.mean)):
            raise ValueError(f"an interval needs a finite mean and non-NaN ends, got {values!r}")
        if not self.low <= self.high:
            raise ValueError(f"an interval needs low <= high, got low={self.low!r}, high={self.high!r}")
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise ValueError(f"n must be a positive integer, got {self.n!r}")
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; valid: {', '.join(map(repr, METHODS))}")
        if not isinstance(self.unit, str) or not self.unit.strip():
            raise ValueError(f"unit must be a non-empty string, got {self.unit!r}")
        object.__setattr__(self, "level", _check_level(self.level))
        for name, v in zip(("mean", "low", "high"), values):
            object.__setattr__(self, name, float(v))
        object.__setattr__(self, "n", int(self.n))

    @property
    def width(self) -> float:
        """``high − low`` (infinite for one seed)."""
        return self.high - self.low

    @property
    def half_width(self) -> float:
        """``high − mean``: the ± of a table cell or an error bar (infinite for one seed).

        Examples
        --------
        >>> round(mean_interval([90.0, 91.0, 92.0]).half_width, 4)  # t_{0.975, 2} * 1 / sqrt(3)
        2.4841
        """
        return self.high - self.mean

    def format(self, digits: int = 2) -> str:
        """``"+1.23 [+0.40, +2.06], 5 seeds"``: the mean, the interval and what it rests on."""
        unit = self.unit[:-1] if self.n == 1 and self.unit.endswith("s") else self.unit
        return (
            f"{_signed(self.mean, digits)} [{_signed(self.low, digits)}, {_signed(self.high, digits)}], "
            f"{self.n} {unit}"
        )

    def __str__(self) -> str:
        return self.format()


def _paired_differences(a: ArrayLike, b: ArrayLike | float) -> np.ndarray:
    """``a − b`` as float64 of shape (n,), validated (the public edge of both intervals)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or len(a) == 0:
        raise ValueError(f"ours must be a non-empty 1-D array (one value per seed or unit), got shape {a.shape}")
    if b.ndim == 0:
        b = np.full_like(a, b)
    if b.shape != a.shape:
        raise ValueError(
            f"ours and baseline must be paired (same length), got shapes {a.shape} and {b.shape}; "
            "valid: two arrays of shape (n,), or a number for the baseline"
        )
    for name, x in (("ours", a), ("baseline", b)):
        bad = np.flatnonzero(~np.isfinite(x))
        if len(bad):
            raise ValueError(
                f"{name} has non-finite values {x[bad].tolist()} at positions {bad.tolist()}; "
                "a missing run must be re-run or its seed dropped from both sides"
            )
    return a - b


@functools.lru_cache(maxsize=4096)
def _t(level: float, df: int) -> float:
    """Student's t quantile of a two-sided ``level`` interval with ``df`` degrees of freedom (cached:
    the simulations of the tests ask for the same few thousands of times)."""
    return float(stats.t.ppf((1 + level) / 2, df))


def _check_within(within: ArrayLike, n: int) -> np.ndarray:
    w = np.asarray(within, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(
            f"within must hold one variance per seed, of shape ({n},) like the differences, got shape {w.shape}"
        )
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if len(bad):
        raise ValueError(
            f"within must be finite variances >= 0, got {w[bad].tolist()} at positions {bad.tolist()}"
        )
    return w


def _t_half(d: np.ndarray, floor: float | np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, half-width and whether the floor bound, over the last axis of ``d`` (n >= 2 seeds).

    ``d`` of shape (..., n); ``floor`` broadcastable to (...,). The one computation of both
    :func:`paired_interval` and :func:`simulate_coverage`.
    """
    n = d.shape[-1]
    s2 = d.var(axis=-1, ddof=1)
    # the smallest sample variance the test noise alone makes plausible: with Var(d_s) >= w,
    # (n - 1) s^2 / Var(d_s) ~ chi^2_{n-1}, so s^2 falls below w chi^2_{n-1, 1-level} / (n - 1)
    # in at most a share 1 - level of experiments; flooring there keeps the coverage nominal
    floor = np.asarray(floor, dtype=np.float64) * _floor_factor(level, n)
    floored = floor > s2
    half = _t(level, n - 1) * np.sqrt(np.maximum(s2, floor) / n)
    return d.mean(axis=-1), half, floored


def _floor_factor(level: float, n: int) -> float:
    """``chi2.ppf(1 - level, n - 1) / (n - 1)``: the share of the test-noise variance below which
    a sample variance over ``n`` seeds is implausible at ``level`` (0.18 at 95 % and 5 seeds)."""
    return float(stats.chi2.ppf(1 - level, n - 1) / (n - 1))


def paired_interval(
    ours: ArrayLike,
    baseline: ArrayLike | float = 0.0,
    level: float = 0.95,
    *,
    within: ArrayLike | None = None,
    resolution: float | None = None,
) -> Interval:
    r"""Student's t interval of the mean paired difference over seeds, floored by the test noise.

    With :math:`d_s = a_s - b_s` over :math:`n` seeds, :math:`\bar d` their mean, :math:`s^2`
    their variance (``ddof=1``) and :math:`w` the variance of one seed's difference from the
    test sample alone:

    .. math:: \bar d \pm t_{(1+\text{level})/2,\; n-1} \, \sqrt{\max\big(s^2,\;
              w\,\chi^2_{n-1,\,1-\text{level}} / (n-1)\big) / n}

    where :math:`w` is the larger of the mean of ``within`` (the per-seed variances of the
    difference over the test sample, e.g. :func:`fedlib.metrics.pooled_standard_error` squared,
    or the binomial variance of the disagreements) and :math:`2 h^2 / 12 = h^2 / 6` for
    ``resolution`` :math:`h` (the quantization noise of a difference of two values read at that
    resolution), each where given, else 0. Without a floor it is the
    interval of ``scipy.stats.ttest_rel(a, b).confidence_interval(level)``. Every seed draws its
    own test set, so the seeds' variance :math:`s^2` already holds the test noise: it estimates
    :math:`\operatorname{Var}(d_s) \ge w`, and :math:`(n-1) s^2 / \operatorname{Var}(d_s)` is
    :math:`\chi^2_{n-1}`. The floor is the smallest :math:`s^2` that the test noise alone makes
    plausible at the interval's level, :math:`w\,\chi^2_{n-1,\,1-\text{level}}/(n-1)` (0.18
    :math:`w` at 95 % and 5 seeds): it binds in at most a share :math:`1-\text{level}` of
    experiments, so the coverage stays nominal (a floor at :math:`w` itself would raise it to
    about 98 %, :func:`simulate_coverage`), and it keeps a difference that happens to be equal on
    every seed from giving a zero-width interval read as certain. The interval's ``method`` is
    ``"t+floor"`` when the floor binds, ``"t"`` otherwise. One seed gives :math:`(-\infty, +\infty)`: a single run cannot bound the
    difference. Its coverage is checked by :func:`simulate_coverage`.

    Parameters
    ----------
    ours, baseline : array-like of shape (n_seeds,)
        One value per seed, paired by seed (same partition, initialization and data subset).
        ``baseline`` may be a number (e.g. 0 when ``ours`` already is a per-seed difference).
    level : float in (0, 1), default 0.95
    within : array-like of shape (n_seeds,), optional
        Per seed, the variance of the difference from the test sample alone (finite, >= 0).
    resolution : float, optional
        The quantity's resolution (> 0), for the floor :math:`h^2/6` when ``within`` is not given.

    Raises
    ------
    ValueError
        On unpaired shapes, a NaN or infinite value, a level outside (0, 1), ``within`` of
        another shape or with a negative or non-finite value, or a resolution that is not a
        finite number > 0.

    Examples
    --------
    >>> print(paired_interval([3.0, 4.0, 5.0], [1.0, 2.0, 2.0]))
    +2.33 [+0.90, +3.77], 3 seeds
    >>> paired_interval([3.0], [1.0]).width
    inf
    >>> paired_interval([2.0, 2.0, 2.0]).width  # the seeds agree exactly, and nothing else is known
    0.0
    >>> iv = paired_interval([2.0, 2.0, 2.0], resolution=0.1)  # read at 0.1: w = 0.1**2 / 6, floored at 0.05 w
    >>> print(iv.format(3), iv.method)
    +2.000 [+1.977, +2.023], 3 seeds t+floor
    """
    level = _check_level(level)
    d = _paired_differences(ours, baseline)
    n, mean = len(d), float(d.mean())
    floor = 0.0
    if within is not None:
        floor = float(_check_within(within, n).mean())
    if resolution is not None:  # 2 h^2 / 12: two readings, each uniform within h; the larger of the two floors
        floor = max(floor, _check_resolution(resolution) ** 2 / 6)
    if n == 1:
        return Interval(mean, -math.inf, math.inf, 1, level, "t")
    _, half, floored = _t_half(d, floor, level)
    half = float(half)
    return Interval(mean, mean - half, mean + half, n, level, "t+floor" if floored else "t")


def simulate_coverage(
    n_seeds: int,
    seed_sd: float,
    within_sd: float,
    effect: float,
    *,
    n_experiments: int,
    seed: int | np.random.Generator,
    level: float = 0.95,
) -> float:
    r"""The share of simulated experiments whose :func:`paired_interval` (with ``within``) covers
    the true effect.

    Each experiment draws, per seed, :math:`d_s = \text{effect} + \varepsilon_s + \eta_s` with
    :math:`\varepsilon_s \sim N(0, \text{seed\_sd}^2)` (what training changes from seed to seed)
    and :math:`\eta_s \sim N(0, \text{within\_sd}^2)` (the test sample's noise), passes
    ``within = within_sd**2`` for every seed, and checks :math:`L \le \text{effect} \le U`. The
    intervals are computed by the same code as :func:`paired_interval`, vectorised.

    :math:`s^2` alone already estimates the whole variance of :math:`d_s` (seed and test noise
    together), so the floor is set where :math:`s^2` is implausibly small given the test noise,
    :math:`w\,\chi^2_{n-1,\,1-\text{level}}/(n-1)` (:func:`paired_interval`): it binds in at most a
    share :math:`1 - \text{level}` of experiments and keeps the coverage at its level, whatever
    the test noise's share of the variance (the tests of this module pin it within 93–97 % at
    95 % for several shares). A floor at :math:`w` itself would be conservative: about 98 % when
    the test noise is half the variance, over 99 % when it is all of it.

    Parameters
    ----------
    n_seeds : int
        Seeds per experiment (>= 2).
    seed_sd, within_sd : float
        The standard deviations of the two noises (finite, >= 0).
    effect : float
        The true mean difference.
    n_experiments : int
        How many experiments (>= 1).
    seed : int or numpy.random.Generator
        The simulation's randomness.
    level : float in (0, 1), default 0.95

    Returns
    -------
    float
        The share of intervals that contain ``effect``.

    Raises
    ------
    ValueError
        On a count that is not a positive integer (``n_seeds`` >= 2), a negative or non-finite
        standard deviation or effect, a missing seed, or a level outside (0, 1).

    Examples
    --------
    >>> round(simulate_coverage(5, 2.0, 1.0, 0.5, n_experiments=4000, seed=0), 3)
    0.949
    """
    level = _check_level(level)
    if not is_int(n_seeds) or n_seeds < 2:
        raise ValueError(f"n_seeds must be an integer >= 2 (one seed gives an infinite interval), got {n_seeds!r}")
    if not is_int(n_experiments) or n_experiments < 1:
        raise ValueError(f"n_experiments must be a positive integer, got {n_experiments!r}")
    for name, x in (("seed_sd", seed_sd), ("within_sd", within_sd)):
        if not is_real(x) or not (math.isfinite(x) and x >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {x!r}")
    if not is_real(effect) or not math.isfinite(effect):
        raise ValueError(f"effect must be a finite number, got {effect!r}")
    _check_seed(seed)
    rng = np.random.default_rng(seed)
    shape = (int(n_experiments), int(n_seeds))
    d = effect + rng.normal(0.0, seed_sd, shape) + rng.normal(0.0, within_sd, shape)  # (experiments, seeds)
    mean, half, _ = _t_half(d, float(within_sd) ** 2, level)  # within = within_sd**2 on every seed
    return float(np.mean(np.abs(mean - effect) <= half))


def paired_bootstrap(
    ours: ArrayLike,
    baseline: ArrayLike | float = 0.0,
    *,
    seed: int | np.random.Generator,
    n_boot: int = 2000,
    level: float = 0.95,
    unit: str = "units",
) -> Interval:
    r"""Paired percentile bootstrap of the mean difference over the units of one run.

    The units (test samples scored 0/1, or clients' accuracies) are resampled with replacement,
    the *same* indices for both sides (that is the pairing), ``n_boot`` times; the interval is
    the :math:`(1-\text{level})/2` and :math:`(1+\text{level})/2` quantiles of the resampled
    mean differences:

    .. math:: \bar d^{*}_{b} = \frac{1}{n} \sum_{i=1}^{n} d_{I_{b,i}}, \quad
              I_{b,i} \sim \mathcal U\{1..n\}, \quad
              [L, U] = \big[q_{(1-\text{level})/2}(\bar d^{*}),\ q_{(1+\text{level})/2}(\bar d^{*})\big]

    It measures how much the finite test set moves the difference, not how much training
    does (that is :func:`paired_interval` over seeds). Use it with many units; one unit gives
    the infinite interval.

    Parameters
    ----------
    ours, baseline : array-like of shape (n_units,)
        One value per unit, the same units on both sides; ``baseline`` may be a number.
    seed : int or numpy.random.Generator
        The resamples' randomness (required: results are reproducible from it).
    n_boot : int, default 2000
        Number of resamples (>= 100).
    level : float in (0, 1), default 0.95
    unit : str, default "units"
        What the units are, plural, for the table (``"test samples"``, ``"clients"``).

    Raises
    ------
    ValueError
        On unpaired shapes, a NaN or infinite value, a level outside (0, 1), fewer than 100
        resamples, or a missing seed.

    Examples
    --------
    >>> correct_ours = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1]
    >>> correct_base = [1, 0, 1, 0, 1, 0, 0, 1, 1, 0]
    >>> print(paired_bootstrap(correct_ours, correct_base, seed=0, unit="test samples"))
    +0.30 [+0.00, +0.60], 10 test samples
    """
    level = _check_level(level)
    d = _paired_differences(ours, baseline)
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 100:
        raise ValueError(f"n_boot must be an integer >= 100 (e.g. 2000), got {n_boot!r}")
    _check_seed(seed)
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"unit must be a non-empty string, got {unit!r}")
    n, mean = len(d), float(d.mean())
    if n == 1:
        return Interval(mean, -math.inf, math.inf, 1, level, "bootstrap", unit)
    means = bootstrap_means(d, int(n_boot), seed)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Interval(mean, float(low), float(high), n, level, "bootstrap", unit)


def bootstrap_means(values: ArrayLike, n_boot: int, seed: int | np.random.Generator) -> np.ndarray:
    """The means of ``n_boot`` resamples (with replacement) of the units of ``values``' first
    axis: the one resampling of the book's bootstraps (:func:`paired_bootstrap`; a leaderboard's
    ranks over seeds). Every column of a 2-D ``values`` is resampled with the *same* indices, so
    columns measured on the same units (methods run on the same seeds) stay paired.

    Parameters
    ----------
    values : array-like of shape (n_units,) or (n_units, n_columns)
    n_boot : int
        Number of resamples, >= 1.
    seed : int or numpy.random.Generator
        The resamples' randomness (``numpy.random.default_rng(seed)``: a Generator is used, and
        advanced, as it is). The indices are drawn in chunks of at most about 4M (32 MiB),
        ``rng.integers(0, n_units, size=(rows, n_units))`` each.

    Returns
    -------
    ndarray of shape (n_boot,) or (n_boot, n_columns)

    Raises
    ------
    ValueError
        On ``values`` that are not 1-D or 2-D or have no unit, ``n_boot`` < 1, or a missing seed.

    Examples
    --------
    >>> v = np.array([[1.0, 10.0], [3.0, 30.0]])
    >>> m = bootstrap_means(v, 4, seed=0)
    >>> m.shape, bool(np.all(m[:, 1] == 10 * m[:, 0])), set(m[:, 0].tolist()) <= {1.0, 2.0, 3.0}
    ((4, 2), True, True)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim not in (1, 2) or values.shape[0] < 1:
        raise ValueError(f"values must be of shape (n_units,) or (n_units, n_columns) with n_units >= 1, got {values.shape}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    _check_seed(seed)
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    means = np.empty((int(n_boot), *values.shape[1:]))
    rows = max(1, 2**22 // values.size)  # resamples per chunk: at most ~4M indices (32 MiB) at a time
    for start in range(0, int(n_boot), rows):
        stop = min(start + rows, int(n_boot))
        idx = rng.integers(0, n, size=(stop - start, n))  # (rows, n): resampled unit indices
        means[start:stop] = values[idx].mean(axis=1)
    return means


def _sides(claim: Claim) -> tuple[tuple[str, float], tuple[str, float]]:
    """(side, threshold) an interval must clear to hold, and to not hold: ``"above"`` is ``L >
    threshold``, ``"below"`` is ``U < threshold`` (the rule of :class:`Claim`)."""
    m = claim.min_effect
    return {
        "greater": (("above", m), ("below", -m)),
        "less": (("below", -m), ("above", m)),
        "at least": (("above", -m), ("below", -m)),
        "at most": (("below", m), ("above", m)),
    }[claim.direction]


def _clears(interval: Interval, side: str, threshold: float) -> bool:
    return interval.low > threshold if side == "above" else interval.high < threshold


def _t_ratio(interval: Interval, level: float) -> float:
    """How much wider the same t interval is at ``level`` than at its own."""
    return _t(level, interval.n - 1) / _t(interval.level, interval.n - 1)


def _at_level(interval: Interval, level: float) -> Interval:
    """The same Student's t interval (same mean and floored variance) at another level. The floor
    keeps the share of the test noise of the interval's own level (a higher level would floor
    lower): at the Bonferroni level the interval is, if anything, a little wider than it needs."""
    if interval.method == "bootstrap":
        raise ValueError(
            "a claim against every baseline of a tuple widens each interval to the Bonferroni level, which "
            "needs Student's t intervals over seeds; got a bootstrap interval (evaluate it over='seeds')"
        )
    if interval.n == 1 or math.isclose(level, interval.level):
        return Interval(interval.mean, interval.low, interval.high, interval.n, level, interval.method, interval.unit)
    half = interval.half_width * _t_ratio(interval, level)
    return Interval(interval.mean, interval.mean - half, interval.mean + half, interval.n, level, interval.method,
                    interval.unit)


def _binding(claim: Claim, intervals: Mapping[str, Interval]) -> tuple[str, Interval]:
    """The baseline whose interval is nearest to failing the claimed direction (ties: the first)."""
    (side, _), _ = _sides(claim)
    items = list(intervals.items())
    if side == "above":
        return min(items, key=lambda kv: kv[1].low)
    return max(items, key=lambda kv: kv[1].high)


def _check_intervals(claim: Claim, intervals, where: str) -> dict[str, Interval]:
    if not isinstance(intervals, Mapping):
        raise ValueError(
            f"claim {claim.key!r} is against every one of {', '.join(claim.versus)}: {where} needs their intervals "
            f"by name (a dict), got a {type(intervals).__name__}"
        )
    _check_names(claim, intervals, "intervals")
    out = {}
    for name in claim.versus:
        iv = intervals[name]
        if not isinstance(iv, Interval):
            raise ValueError(f"the interval versus {name!r} is a {type(iv).__name__}, not an Interval")
        out[name] = iv
    return out


def _check_names(claim: Claim, given: Mapping, what: str) -> None:
    missing = [v for v in claim.versus if v not in given]
    extra = [k for k in given if k not in claim.versus]
    if missing or extra:
        raise ValueError(
            f"claim {claim.key!r} is against every one of {list(claim.versus)}: the {what} must have exactly those "
            f"names; missing {missing}, extra {extra}"
        )


def _check_level_of(claim: Claim, interval: Interval) -> None:
    if not math.isclose(interval.level, claim.level):
        raise ValueError(
            f"claim {claim.key!r} declared a {_percent(claim.level)} interval but got a "
            f"{_percent(interval.level)} one; compute the interval with level={claim.level}"
        )


def _decide_one(claim: Claim, interval: Interval, level_not: float | None = None) -> str:
    """One interval's verdict; ``level_not``: read the "does not hold" side at that level."""
    (hold_side, hold_at), (not_side, not_at) = _sides(claim)
    if _clears(interval, hold_side, hold_at):
        return HOLDS
    against = interval if level_not is None else _at_level(interval, level_not)
    return DOES_NOT_HOLD if _clears(against, not_side, not_at) else INCONCLUSIVE


def decide(claim: Claim, interval: Interval | Mapping[str, Interval]) -> str:
    r"""The verdict of ``claim`` on ``interval`` by the declared rule (see :class:`Claim`).

    Against every baseline of a tuple (``claim.versus`` a tuple of :math:`k` names),
    ``interval`` is a dict of each baseline's interval at the claim's level, and the rule is an
    intersection-union test:

    - **holds** when *every* interval clears the minimum effect in the claimed direction. No
      multiplicity correction: to hold, each of the :math:`k` one-sided tests must reject, so
      the chance of a wrong "holds" is at most that of one of them (Berger, *Statistical Science*
      1982; Berger & Hsu, *Statistical Science* 1996): the intersection-union test is level-α as is.
    - **does not hold** when *any one* baseline's interval at the Bonferroni level
      :math:`1 - (1 - \text{level}) / k` (the same Student's t interval, widened) clears it in
      the other direction. This side is a union: without the correction, a tie of ours and six
      baselines (per-seed SD 3 points, pairwise correlation 0.5, 5 seeds) gives "does not hold"
      in 10.9 % of 2,000 simulated experiments; with it, in 2.0 % (at most 2.5 % by Bonferroni's
      inequality).
    - otherwise inconclusive at this scale.

    Raises
    ------
    ValueError
        When an interval's level is not the level the claim declared; when a claim against a
        tuple of baselines gets one interval, or a dict with other names; when a single-comparator
        claim gets a dict.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, resolution=0.1)
    >>> [decide(c, Interval(0.0, lo, hi, 5, 0.95, "t")) for lo, hi in [(0.6, 2), (-2, -0.6), (-0.4, 0.4)]]
    ['holds', 'does not hold', 'inconclusive at this scale']
    >>> every = Claim("all", "X beats all.", "Table 2", "accuracy, X − baseline, points", "greater", 0.5,
    ...               resolution=0.1, versus=("A", "B"))
    >>> decide(every, {"A": Interval(2.0, 1.0, 3.0, 5, 0.95, "t"), "B": Interval(1.0, 0.2, 1.8, 5, 0.95, "t")})
    'inconclusive at this scale'
    """
    if not isinstance(claim, Claim):
        raise ValueError(f"decide needs a Claim, got {type(claim).__name__}")
    if claim.every:
        intervals = _check_intervals(claim, interval, "decide")
        for iv in intervals.values():
            _check_level_of(claim, iv)
        verdicts = [_decide_one(claim, iv) for iv in intervals.values()]
        if all(v == HOLDS for v in verdicts):
            return HOLDS
        level_not = _bonferroni(claim.level, len(intervals))
        if any(_decide_one(claim, iv, level_not) == DOES_NOT_HOLD for iv in intervals.values()):
            return DOES_NOT_HOLD
        return INCONCLUSIVE
    if not isinstance(interval, Interval):
        raise ValueError(
            f"decide needs a Claim and an Interval, got {type(claim).__name__} and {type(interval).__name__}"
            + (f"; claim {claim.key!r} has one comparator (versus={claim.versus!r}): declare versus=(...) to "
               "claim it beats every baseline of a dict" if isinstance(interval, Mapping) else "")
        )
    _check_level_of(claim, interval)
    return _decide_one(claim, interval)


@dataclass(frozen=True)
class ClaimResult:
    """A claim and the intervals it was decided on; the verdict is computed from them, never stored.

    Parameters
    ----------
    claim : Claim
    interval : Interval
        The interval the verdict reads: against every baseline of a tuple, the *binding* one (the
        interval nearest to failing the claimed direction: the smallest low end for "greater" and
        "at least", the largest high end for "less" and "at most"; ties: the first named).
    intervals : dict of str to Interval, optional
        Each baseline's interval, in the order of ``claim.versus``: one per name for a tuple;
        ``{versus: interval}`` for a single named comparator (filled in when not given); empty
        when the claim names none.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> ClaimResult(c, paired_interval([2.0, 3.0, 2.5])).verdict
    'holds'
    """

    claim: Claim
    interval: Interval
    intervals: Mapping[str, Interval] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.claim, Claim) or not isinstance(self.interval, Interval):
            raise ValueError(
                f"a ClaimResult needs a Claim and an Interval, got {type(self.claim).__name__} and "
                f"{type(self.interval).__name__}"
            )
        c = self.claim
        if c.every:
            intervals = _check_intervals(c, self.intervals, "a ClaimResult")
            name, binding = _binding(c, intervals)
            if self.interval != binding:
                raise ValueError(
                    f"claim {c.key!r}: interval must be the binding one of intervals (versus {name!r}: {binding}), "
                    f"got {self.interval}"
                )
        else:
            expected = {} if c.versus is None else {c.versus: self.interval}
            given = dict(self.intervals)
            if given and given != expected:
                raise ValueError(
                    f"claim {c.key!r} has one comparator (versus={c.versus!r}): intervals must be {expected} or "
                    f"empty, got {given}"
                )
            intervals = expected
        object.__setattr__(self, "intervals", intervals)
        _ = self.verdict  # validates the levels once

    @property
    def verdict(self) -> str:
        """``decide(claim, ...)``: one of :data:`VERDICTS`."""
        return decide(self.claim, self.intervals if self.claim.every else self.interval)

    @property
    def binding(self) -> str | None:
        """The name of the baseline whose interval ``interval`` is (``None`` when the claim names none)."""
        if self.claim.every:
            return _binding(self.claim, self.intervals)[0]
        return self.claim.versus


def evaluate(
    claim: Claim,
    ours: ArrayLike,
    baseline: ArrayLike | float | Mapping[str, ArrayLike] = 0.0,
    within: ArrayLike | Mapping[str, ArrayLike] | None = None,
    *,
    over: str = "seeds",
    seed: int | np.random.Generator | None = None,
    n_boot: int = 2000,
) -> ClaimResult:
    """Decide ``claim`` on paired values: the intervals at the claim's level, and the verdict.

    Parameters
    ----------
    claim : Claim
    ours : array-like of shape (n,)
    baseline : array-like of shape (n,), number, or dict of str to array-like
        Paired values (a number, e.g. 0 for a per-seed difference). For a claim against every
        baseline of a tuple (``claim.versus`` a tuple), a dict with exactly those names.
    within : array-like of shape (n,), or dict of str to array-like, optional
        Per seed, the variance of the difference from the test sample alone: the floor of
        :func:`paired_interval`. Against a tuple, a dict with the same names, or one array for
        every baseline. When not given, the floor is that of ``claim.resolution``.
    over : {"seeds", "test samples", "clients"}, default "seeds"
        ``"seeds"``: :func:`paired_interval` (Student's t over seeds). Otherwise the values are
        the units of one run and the interval is :func:`paired_bootstrap` over them (one
        comparator only, no ``within``).
    seed : int or numpy.random.Generator, optional
        The bootstrap's randomness; required unless ``over="seeds"`` (where it is not used).
    n_boot : int, default 2000
        The bootstrap's resamples.

    Raises
    ------
    ValueError
        As :func:`paired_interval` and :func:`paired_bootstrap` do; on a dict of baselines for a
        claim with one comparator, an array for a claim against a tuple, names other than the
        declared ones, or ``within`` / a tuple with a bootstrap.

    Examples
    --------
    >>> c = Claim("less-cost", "X is cheaper.", "Table 5", "seconds, X − Y", "less", resolution=0.01)
    >>> evaluate(c, [9.0, 9.5, 9.2], [10.0, 10.4, 10.1]).verdict
    'holds'
    >>> every = Claim("all", "X beats all.", "Table 2", "accuracy, X − baseline, points", "greater", 0.5,
    ...               resolution=0.1, versus=("A", "B"))
    >>> r = evaluate(every, [92.0, 93.0, 92.5], {"A": [90.0, 90.5, 90.1], "B": [91.5, 92.1, 91.2]})
    >>> r.verdict, r.binding, list(r.intervals)
    ('inconclusive at this scale', 'B', ['A', 'B'])
    """
    if not isinstance(claim, Claim):
        raise ValueError(f"evaluate needs a Claim, got {type(claim).__name__}")
    if over not in OVER:
        raise ValueError(f"unknown over={over!r}; valid: {', '.join(map(repr, OVER))}")
    if claim.every:
        if not isinstance(baseline, Mapping):
            raise ValueError(
                f"claim {claim.key!r} is against every one of {list(claim.versus)}: pass the baselines as a dict "
                f"{{name: values}}, got a {type(baseline).__name__}"
            )
        _check_names(claim, baseline, "baselines")
        if over != "seeds":
            raise ValueError(
                f"claim {claim.key!r} is against every baseline of a tuple: it is decided over seeds, not over {over}"
            )
        if isinstance(within, Mapping):
            _check_names(claim, within, "within variances")
            withins = dict(within)
        else:
            withins = dict.fromkeys(claim.versus, within)
        intervals = {
            name: paired_interval(ours, baseline[name], claim.level, within=withins[name], resolution=claim.resolution)
            for name in claim.versus
        }
        return ClaimResult(claim, _binding(claim, intervals)[1], intervals)
    for what, x in (("baseline", baseline), ("within", within)):
        if isinstance(x, Mapping):
            raise ValueError(
                f"claim {claim.key!r} has one comparator (versus={claim.versus!r}) but its {what} is a dict of "
                f"{list(x)}; declare versus=(...) with those names to claim it beats every one"
            )
    if over == "seeds":
        interval = paired_interval(ours, baseline, claim.level, within=within, resolution=claim.resolution)
    else:
        if seed is None:
            raise ValueError(
                f"a paired bootstrap over {over} draws resamples: pass seed= (an int or a numpy Generator)"
            )
        if within is not None:
            raise ValueError(f"within is the floor of an interval over seeds; a bootstrap over {over} takes none")
        interval = paired_bootstrap(ours, baseline, seed=seed, n_boot=n_boot, level=claim.level, unit=over)
    return ClaimResult(claim, interval)


@functools.lru_cache(maxsize=64)
def _t_over_root_n(level: float) -> np.ndarray:
    """t_{(1+level)/2, n-1} / sqrt(n) for n = 2 .. MAX_SEEDS, of shape (MAX_SEEDS - 1,) (decreasing in n)."""
    ns = np.arange(2, MAX_SEEDS + 1)
    curve = stats.t.ppf((1 + level) / 2, ns - 1) / np.sqrt(ns)
    curve.flags.writeable = False
    return curve


def _smallest_n(gap: float, sd: float, level: float) -> float:
    """The smallest n in [2, MAX_SEEDS] with t_{(1+level)/2, n-1} sd / sqrt(n) < gap; inf when gap <= 0,
    MAX_SEEDS + 1 when none is."""
    if gap <= 0:
        return math.inf
    ok = np.flatnonzero(_t_over_root_n(level) * sd < gap)
    return int(ok[0]) + 2 if len(ok) else MAX_SEEDS + 1


def seeds_to_decide(claim: Claim, interval_or_result: Interval | ClaimResult) -> int | str:
    r"""How many seeds would decide ``claim``, if the mean and the spread stayed as observed.

    From each interval's mean :math:`\bar d` and effective standard deviation :math:`\sigma`
    (the floored one of :func:`paired_interval`, recovered
    from its half-width: :math:`\sigma = (U - \bar d) \sqrt{n} / t_{(1+\text{level})/2, n-1}`),
    the smallest :math:`n \le` :data:`MAX_SEEDS` at which

    .. math:: \bar d \pm t_{(1+\lambda)/2,\, n-1}\, \sigma / \sqrt{n}

    would clear a threshold of the rule (:class:`Claim`): the "holds" one at
    :math:`\lambda = \text{level}`, or the "does not hold" one at :math:`\lambda` = the level
    of that side (the claim's; against a tuple of :math:`k` baselines, the Bonferroni
    :math:`1 - (1 - \text{level})/k` of :func:`decide`). A threshold :math:`a` on the side
    "above" needs :math:`\bar d - a > t\sigma/\sqrt n`, so it can be reached only when
    :math:`\bar d > a` (and "below" only when :math:`\bar d < a`). For "greater" and "less",
    no n decides when :math:`|\bar d| \le m` (``min_effect``); for "at least" / "at most", only
    when :math:`\bar d` equals the threshold :math:`\mp m` exactly. Where the floor bound at
    the observed :math:`n`, :math:`\sigma` is kept as it is although the floor's share of the test
    noise grows with :math:`n`: the number is then a lower bound, an estimate of the order of
    magnitude that would settle the claim, not a promise.

    Against every baseline of a tuple: holding needs every baseline, so it takes the *largest*
    of the baselines' numbers for the "holds" side; not holding needs any one, so the
    *smallest* of theirs for the "does not hold" side; the answer is the smaller of the two.

    Parameters
    ----------
    claim : Claim
    interval_or_result : Interval or ClaimResult
        The claim's interval (one comparator), or its result (required against a tuple).

    Returns
    -------
    int or str
        The observed number of seeds when the claim is already decided; otherwise the smallest
        number that would decide it (greater than the observed one); or a reason, when none can:
        :data:`NOT_AT_THIS_MEAN` (``"not at this mean"``: the mean lies where no threshold can be
        cleared), ``"not from one seed"`` (no spread to extrapolate from),
        ``"not over seeds"`` (a bootstrap interval over the units of one run), or
        ``"more than 10,000"``.

    Raises
    ------
    ValueError
        On a result of another claim, a claim against a tuple given one interval, or an
        interval at another level than the claim's.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> iv = paired_interval([1.0 - 2.0, 1.0, 1.0 + 2.0])  # mean 1, sd 2 over 3 seeds
    >>> seeds_to_decide(c, iv)  # the smallest n with t_{0.975, n-1} * 2 / sqrt(n) < 1 - 0.1 (the minimum effect)
    22
    >>> seeds_to_decide(Claim("big", "X beats Y by 2.", "Table 2", "accuracy, X − Y, points", "greater", 2.0,
    ...                       resolution=0.1), iv)
    'not at this mean'
    """
    if not isinstance(claim, Claim):
        raise ValueError(f"seeds_to_decide needs a Claim, got {type(claim).__name__}")
    if isinstance(interval_or_result, ClaimResult):
        if interval_or_result.claim != claim:
            raise ValueError(
                f"seeds_to_decide got the result of claim {interval_or_result.claim.key!r} for claim {claim.key!r}"
            )
        intervals = dict(interval_or_result.intervals) if claim.every else {None: interval_or_result.interval}
    elif isinstance(interval_or_result, Interval):
        if claim.every:
            raise ValueError(
                f"claim {claim.key!r} is against every one of {list(claim.versus)}: pass its ClaimResult (all its "
                "intervals), not one interval"
            )
        intervals = {None: interval_or_result}
    else:
        raise ValueError(
            f"seeds_to_decide reads an Interval or a ClaimResult, got a {type(interval_or_result).__name__}"
        )
    verdict = decide(claim, intervals if claim.every else intervals[None])
    n = next(iter(intervals.values())).n
    if verdict != INCONCLUSIVE:
        return n
    if any(iv.method == "bootstrap" for iv in intervals.values()):
        return "not over seeds"
    if n == 1:
        return "not from one seed"
    (hold_side, hold_at), (not_side, not_at) = _sides(claim)
    level_not = _bonferroni(claim.level, len(intervals)) if claim.every else claim.level

    def gap(iv: Interval, side: str, at: float) -> float:
        return iv.mean - at if side == "above" else at - iv.mean

    def sd(iv: Interval) -> float:
        return iv.half_width * math.sqrt(iv.n) / _t(iv.level, iv.n - 1)

    hold = max(_smallest_n(gap(iv, hold_side, hold_at), sd(iv), claim.level) for iv in intervals.values())
    fail = min(_smallest_n(gap(iv, not_side, not_at), sd(iv), level_not) for iv in intervals.values())
    best = min(hold, fail)
    if math.isinf(best):
        return NOT_AT_THIS_MEAN
    if best > MAX_SEEDS:
        return f"more than {MAX_SEEDS:,}"
    return int(best)


@dataclass(frozen=True)
class Comparator:
    """A baseline chosen before the runs by a declared rule, on data the claim does not use.

    Made by :func:`strongest_baseline`; a claim against it declares ``versus=comparator.name``.

    Parameters
    ----------
    name : str
        The chosen baseline.
    rule : str
        How it was chosen, with every candidate's score, as a sentence.
    on : str
        The selection data (e.g. ``"pilot seeds 100–101"``, ``"the validation split"``).
    scores : dict of str to float
        Every candidate's mean on the selection data, in the candidates' order.
    """

    name: str
    rule: str
    on: str
    scores: Mapping[str, float] = field(hash=False)

    def describe(self) -> str:
        """The choice in a sentence, for the chapter's text.

        Examples
        --------
        >>> print(strongest_baseline({"FedAvg": [91.0, 91.4], "Ditto": [90.8]}, on="the validation split").describe())
        FedAvg, fixed before the runs as the highest mean on the validation split: FedAvg 91.2, Ditto 90.8
        """
        return f"{self.name}, fixed before the runs as {self.rule}"


def strongest_baseline(
    selection: Mapping[str, ArrayLike], *, on: str, higher_is_better: bool = True
) -> Comparator:
    """The baseline with the best mean on selection data the claim does not use: a comparator
    fixed before the claim's runs.

    A paper's "ours beats the baselines" is read either against *every* baseline (a claim with
    ``versus`` a tuple, :func:`decide`) or against the *strongest* one, chosen here by a declared
    rule on data independent of the claim's seeds: pilot seeds not among them, or a validation
    split. Choosing the strongest on the claim's own seeds, or taking the best baseline *per
    seed* (``np.max`` over the baselines), compares ours to the maximum of noisy values, biased
    upward: under a true tie of ours and six baselines (per-seed SD 3 points, pairwise
    correlation 0.5, 5 seeds, 2,000 simulated experiments), the per-seed maximum gives "does not hold"
    in 40 % of experiments, the baseline chosen here on 2 independent pilot seeds in 1.9 %
    (``tests/test_claims.py``).

    Parameters
    ----------
    selection : mapping of str to array-like of shape (n,)
        Each candidate's values on the selection data (finite; at least one value each).
    on : str
        What the selection data is, for the rule's sentence (``"pilot seeds 100–101"``).
    higher_is_better : bool, default True
        Pick the highest mean (accuracy), or the lowest (a loss, a cost).

    Returns
    -------
    Comparator
        The chosen name (ties: the first in the mapping's order), the rule as a sentence,
        ``on`` and every candidate's mean.

    Raises
    ------
    ValueError
        On an empty mapping, a name that is not a non-empty string, values that are not a
        non-empty 1-D finite array, or an empty ``on``.

    Examples
    --------
    >>> best = strongest_baseline({"FedAvg": [91.0, 91.4], "Ditto": [90.8, 90.8], "FedProx": [91.2, 91.2]},
    ...                           on="the validation split")
    >>> best.name
    'FedAvg'
    >>> print(best.rule)
    the highest mean on the validation split: FedAvg 91.2, Ditto 90.8, FedProx 91.2
    """
    if not isinstance(selection, Mapping) or not selection:
        raise ValueError(f"selection must be a non-empty mapping of baseline name to values, got {selection!r}")
    if not isinstance(on, str) or not on.strip():
        raise ValueError(f"on must name the selection data (e.g. 'the validation split'), got {on!r}")
    if not isinstance(higher_is_better, (bool, np.bool_)):
        raise ValueError(f"higher_is_better must be True or False, got {higher_is_better!r}")
    scores = {}
    for name, values in selection.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a baseline's name must be a non-empty string, got {name!r}")
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 1 or len(x) == 0 or not np.isfinite(x).all():
            raise ValueError(
                f"the selection values of {name!r} must be a non-empty 1-D array of finite numbers, got {values!r}"
            )
        scores[name] = float(x.mean())
    names, means = list(scores), np.array(list(scores.values()))
    chosen = names[int(np.argmax(means) if higher_is_better else np.argmin(means))]  # the first of a tie
    listed = ", ".join(f"{k} {_score(v)}" for k, v in scores.items())
    rule = f"the {'highest' if higher_is_better else 'lowest'} mean on {on}: {listed}"
    return Comparator(chosen, rule, on, scores)


def _score(x: float) -> str:
    return f"{x:.4g}".replace("-", _MINUS)


def _claim_text(claim: Claim) -> str:
    if claim.kind == "control":
        return f"Control: {claim.quote} (for {claim.source})"
    where = f"{claim.source}; headline" if claim.headline else claim.source
    return f"\N{LEFT DOUBLE QUOTATION MARK}{claim.quote}\N{RIGHT DOUBLE QUOTATION MARK} ({where})"


def _quantity_text(claim: Claim) -> str:
    names = () if claim.versus is None else (claim.versus,) if isinstance(claim.versus, str) else claim.versus
    if all(name in claim.quantity for name in names):
        return claim.quantity
    return f"{claim.quantity} (vs {', '.join(names)})"


def _ours_text(result: ClaimResult, digits: int) -> str:
    if not result.claim.every:
        return result.interval.format(digits)
    parts = [f"vs {name} {iv.format(digits).rsplit(', ', 1)[0]}" for name, iv in result.intervals.items()]
    n, unit = result.interval.n, result.interval.unit
    return f"{'; '.join(parts)}, {n} {unit[:-1] if n == 1 and unit.endswith('s') else unit}"


def _seeds_text(result: ClaimResult) -> str:
    if result.verdict != INCONCLUSIVE:
        return "decided"
    n = seeds_to_decide(result.claim, result)
    return f"n = {n:,}" if isinstance(n, int) else n


def claims_table(results: Sequence[ClaimResult], digits: int = 2) -> pd.DataFrame:
    """The book's claims table: one row per claim, in the given order.

    Columns (:data:`TABLE_COLUMNS`): ``claim`` (the quote and its source, ``"; headline"`` after
    the source of a headline claim; for a control,
    ``"Control: <question> (for <claim>)"``), ``quantity`` (with ``" (vs <name>)"`` appended
    when the declaration names a comparator the text does not, ``" (vs A, B, C)"`` for a tuple),
    ``ours`` (the mean paired difference, its interval and what it rests on, e.g.
    ``"+1.23 [+0.40, +2.06], 5 seeds"``; against a tuple, every baseline's:
    ``"vs A +1.23 [+0.40, +2.06]; vs B ..., 5 seeds"``), ``rule`` (:meth:`Claim.rule`),
    ``verdict`` (:func:`decide`), ``seeds to decide`` (``"decided"``, ``"n = 12"`` from
    :func:`seeds_to_decide`, or its reason, e.g. ``"not at this mean"``) and ``substitution``.

    Raises
    ------
    ValueError
        On an element that is not a :class:`ClaimResult`, or two rows with the same key.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, resolution=0.1)
    >>> table = claims_table([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])])
    >>> table.loc[0, "claim"], table.loc[0, "ours"], table.loc[0, "verdict"], table.loc[0, "seeds to decide"]
    ('“X beats Y.” (Table 2)', '+2.00 [+1.34, +2.66], 3 seeds', 'holds', 'decided')
    >>> every = Claim("all", "X beats all.", "Table 2", "accuracy, X − baseline, points", "greater", 0.5,
    ...               resolution=0.1, versus=("A", "B"))
    >>> row = claims_table([evaluate(every, [2.1, 1.8, 2.4], {"A": [0.0, 0.1, 0.2], "B": [1.0, 1.5, 1.2]})]).loc[0]
    >>> row["quantity"], row["ours"], row["seeds to decide"]
    ('accuracy, X − baseline, points (vs A, B)', 'vs A +2.00 [+1.34, +2.66]; vs B +0.87 [−0.36, +2.09], 3 seeds', 'n = 10')
    """
    results = list(results)
    for i, r in enumerate(results):
        if not isinstance(r, ClaimResult):
            raise ValueError(f"row {i} is a {type(r).__name__}, not a ClaimResult (see evaluate)")
    keys = [r.claim.key for r in results]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ValueError(f"claim keys must be unique in a table, got duplicates {dupes}")
    rows = [
        {
            "claim": _claim_text(r.claim),
            "quantity": _quantity_text(r.claim),
            "ours": _ours_text(r, digits),
            "rule": r.claim.rule(),
            "verdict": r.verdict,
            "seeds to decide": _seeds_text(r),
            "substitution": r.claim.substitution,
        }
        for r in results
    ]
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def tally(results: Sequence[ClaimResult]) -> dict[str, int]:
    """How many claims have each verdict, every verdict listed (in :data:`VERDICTS` order).

    Controls (``kind="control"``) are the book's own questions, not the paper's claims: they are
    not counted.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> tally([evaluate(c, [2.0, 3.0, 2.5]), evaluate(c, [1.0])])
    {'holds': 1, 'does not hold': 0, 'inconclusive at this scale': 1}
    """
    counts = dict.fromkeys(VERDICTS, 0)
    for r in results:
        if not isinstance(r, ClaimResult):
            raise ValueError(f"tally counts ClaimResults, got a {type(r).__name__}")
        if r.claim.kind == "claim":
            counts[r.verdict] += 1
    return counts


def headline_summary(results: Sequence[ClaimResult]) -> dict[str, float]:
    """The headline claims (``Claim.headline``) in three numbers: how many (``n``), how many are
    decided (``decided``: holds or does not hold) and the median half-width of their 95 %
    intervals (``half_width``; against every baseline of a tuple, the binding interval's; NaN
    when there is none). Controls are never headline claims.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Abstract", "accuracy, X − Y, points", "greater", resolution=0.1, headline=True)
    >>> s = headline_summary([evaluate(c, [2.0, 3.0, 2.5]), evaluate(c, [1.0, 1.2, 3.0])])
    >>> s["n"], s["decided"], round(s["half_width"], 2)
    (2, 1, 1.99)
    """
    for r in results:
        if not isinstance(r, ClaimResult):
            raise ValueError(f"headline_summary reads ClaimResults, got a {type(r).__name__}")
    head = [r for r in results if r.claim.headline]
    widths = [r.interval.half_width for r in head]
    return {
        "n": len(head),
        "decided": sum(r.verdict != INCONCLUSIVE for r in head),
        "half_width": float(np.median(widths)) if widths else float("nan"),
    }


def says(result: ClaimResult, digits: int = 1) -> str:
    """A decided row in a sentence: ``"<key> holds (<interval>)"``, ``"<key> does not hold
    (...)"`` or ``"<key> is inconclusive at this scale (...)"``, the interval with ``digits``
    decimals (:meth:`Interval.format`); against every baseline of a tuple, the binding one's,
    named: ``"<key> holds (vs Ditto <interval>)"``.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> says(evaluate(c, [2.0, 3.0, 2.5])).split(" (")[0], says(evaluate(c, [1.0])).split(" (")[0]
    ('gain holds', 'gain is inconclusive at this scale')
    """
    if not isinstance(result, ClaimResult):
        raise ValueError(f"says reads a ClaimResult, got a {type(result).__name__}")
    v = result.verdict
    vs = f"vs {result.binding} " if result.claim.every else ""
    return f"{result.claim.key} {'is ' if v == INCONCLUSIVE else ''}{v} ({vs}{result.interval.format(digits)})"


RECORD_FIELDS = ("key", "kind", "headline", "quote", "source", "quantity", "ours", "mean", "low", "high", "n",
                 "unit", "verdict", "seeds_to_decide", "anchor")
"""The fields of a claim's record (:func:`claims_records`), in order."""


def claims_records(results: Sequence[ClaimResult], digits: int = 2) -> list[dict]:
    """One record per row of the claims table, for a page that gathers every chapter's claims (the
    book's findings page): plain JSON values, in the table's order.

    ``key``, ``kind`` (claim or control), ``headline``, ``quote`` (whole), ``source`` and
    ``quantity`` come from the declaration; ``ours``, ``verdict`` and ``seeds_to_decide`` are the
    table's cells (:func:`claims_table`); ``mean``, ``low``, ``high``, ``n`` and ``unit`` are the
    interval the verdict reads (against every baseline of a tuple, the binding one); ``anchor`` is
    the id of the row's first cell in the table :func:`show` renders, so a page can link to the row.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, resolution=0.1)
    >>> (r,) = claims_records([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])])
    >>> r["verdict"], r["ours"], r["n"], r["anchor"] in show([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])]).to_html()
    ('holds', '+2.00 [+1.34, +2.66], 3 seeds', 3, True)
    """
    results = list(results)
    table = claims_table(results, digits)
    uuid = show(table).uuid

    def number(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None  # JSON has no infinity (one seed: an unbounded interval)

    return [
        {
            "key": r.claim.key, "kind": r.claim.kind, "headline": bool(r.claim.headline), "quote": r.claim.quote,
            "source": r.claim.source, "quantity": table.loc[i, "quantity"], "ours": table.loc[i, "ours"],
            "mean": number(r.interval.mean), "low": number(r.interval.low), "high": number(r.interval.high),
            "n": int(r.interval.n), "unit": r.interval.unit, "verdict": r.verdict,
            "seeds_to_decide": table.loc[i, "seeds to decide"], "anchor": f"T_{uuid}_row{i}_col0",
        }
        for i, r in enumerate(results)
    ]


VERDICT_COLOURS = {HOLDS: "#d9f2d9", DOES_NOT_HOLD: "#f8d7d7", INCONCLUSIVE: "#eeeeee"}
"""The shade of each verdict in the book's tables (green, red, grey)."""


def show(results: Sequence[ClaimResult] | pd.DataFrame, digits: int = 2):
    """The claims table for a notebook page: every cell in full (pandas cuts text at 50
    characters by default), text wrapped and top-aligned, the index hidden, each verdict shaded.

    Takes the results (rendered by :func:`claims_table`) or a table already rendered.

    Returns
    -------
    fedbook.tables.Table
        The notebook displays it as an HTML table; ``.to_html()`` gives the markup, the same
        for the same table (its id is derived from the content).

    Examples
    --------
    >>> c = Claim("gain", "X beats Y by a margin worth quoting in full, longer than fifty characters.",
    ...           "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> html = show([evaluate(c, [2.1, 1.8, 2.4])]).to_html()
    >>> "longer than fifty characters." in html, "holds" in html
    (True, True)
    """
    table = results if isinstance(results, pd.DataFrame) else claims_table(results, digits)
    missing = [c for c in ("verdict",) if c not in table.columns]
    if missing:
        raise ValueError(f"show needs a claims table with a 'verdict' column, got columns {list(table.columns)}")
    # a stable id from the content (pandas draws a random one): the same table, the same page
    uuid = hashlib.sha1(table.to_json().encode()).hexdigest()[:8]
    return (
        table_of(table).set_uuid(f"claims-{uuid}")
        .hide(axis="index")
        .map(lambda v: f"background-color: {VERDICT_COLOURS.get(v, 'transparent')}", subset=["verdict"])
        .set_properties(**{"text-align": "left", "vertical-align": "top", "white-space": "normal"})
        .set_table_styles([{"selector": "th", "props": [("text-align", "left")]}])
    )


def interval_band(values: ArrayLike, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A figure's line and band over seeds: :func:`mean_interval` of every column of ``values``.

    Parameters
    ----------
    values : array-like of shape (n_seeds, n_points)
        One row per seed, one column per point of the curve (e.g. a round).
    level : float in (0, 1), default 0.95

    Returns
    -------
    (ndarray, ndarray, ndarray)
        The means, the lows and the highs, each of shape (n_points,); with one seed the ends are
        infinite (draw no band).

    Raises
    ------
    ValueError
        On ``values`` that is not 2-D, and as :func:`mean_interval` does (a NaN, a level outside (0, 1)).

    Examples
    --------
    >>> mean, low, high = interval_band([[90.0, 1.0], [91.0, 1.0], [92.0, 1.0]])
    >>> mean.tolist(), round(float(low[0]), 2), float(high[1])
    ([91.0, 1.0], 88.52, 1.0)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values must be 2-D (n_seeds, n_points), got shape {values.shape}")
    ivs = [mean_interval(values[:, j], level) for j in range(values.shape[1])]
    return np.array([i.mean for i in ivs]), np.array([i.low for i in ivs]), np.array([i.high for i in ivs])


def mean_interval(values: ArrayLike, level: float = 0.95) -> Interval:
    """The mean over seeds of one quantity and its Student's t interval (:func:`paired_interval`
    against 0): what a results table shows in each cell.

    Examples
    --------
    >>> print(mean_interval([90.0, 91.0, 92.0]).format(1))
    +91.0 [+88.5, +93.5], 3 seeds
    """
    return paired_interval(values, 0.0, level)


def seed_band(frame: pd.DataFrame, x: str, xs: Sequence, *, value: str = "value",
              level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """A figure's line and band over seeds: at each ``x`` of ``xs``, the mean of ``value`` over the
    rows where ``frame[x]`` equals it (one per seed) and the half-width of its interval
    (:func:`mean_interval`, :attr:`Interval.half_width`).

    Returns
    -------
    (ndarray, ndarray)
        The means and the half-widths, of shape (len(xs),).

    Raises
    ------
    ValueError
        On a missing column, or an ``x`` of ``xs`` without rows.

    Examples
    --------
    >>> curve = pd.DataFrame({"seed": [0, 1, 0, 1], "m0": [1.0, 1.0, 10.0, 10.0], "value": [90.0, 92.0, 80.0, 80.0]})
    >>> means, halves = seed_band(curve, "m0", [1.0, 10.0])
    >>> means.tolist(), float(halves[1])
    ([91.0, 80.0], 0.0)
    """
    missing = [c for c in (x, value) if c not in frame.columns]
    if missing:
        raise ValueError(f"seed_band: columns {missing} are not in the frame; valid: {list(frame.columns)}")
    columns = []
    for at in xs:
        rows = frame[frame[x] == at]
        if len(rows) == 0:
            raise ValueError(f"seed_band: no row has {x} = {at!r}; valid: {sorted(set(frame[x]))}")
        columns.append(np.asarray(rows[value], dtype=float))
    if len({len(c) for c in columns}) > 1:
        raise ValueError(f"seed_band: the points of {x} have different numbers of seeds ({[len(c) for c in columns]})")
    mean, _, high = interval_band(np.stack(columns, axis=1), level)  # one seed per row
    return mean, high - mean  # Interval.half_width


def interval_text(values: ArrayLike, digits: int = 1, level: float = 0.95) -> str:
    """The mean over the defined values (NaN left out: a seed where the metric is undefined) and
    its interval, as the prose quotes it (:meth:`Interval.format` of :func:`mean_interval`).

    With no defined value, the text of a zero over one seed (an infinite interval), so that a
    sentence still reads when a metric is undefined at some profile.

    Examples
    --------
    >>> interval_text([90.0, float("nan"), 92.0])
    '+91.0 [+78.3, +103.7], 2 seeds'
    >>> interval_text([float("nan")])
    '+0.0 [−∞, +∞], 1 seed'
    """
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return mean_interval(values if len(values) else np.zeros(1), level).format(digits)


def defined_pairs(ours: ArrayLike, baseline: ArrayLike | Mapping[str, ArrayLike]
                  ) -> tuple[np.ndarray, np.ndarray | dict[str, np.ndarray]]:
    """The pairs (one per seed) where both sides are defined: a seed where either side is NaN
    (an undefined metric, e.g. no client holds a rare class) is dropped from both. Against every
    baseline of a mapping (a claim with a tuple ``versus``), a seed is kept where ours and every
    baseline are defined. With no pair left, zeros for one seed (an inconclusive one-seed
    interval). What a claim's ``values`` returns.

    Raises
    ------
    ValueError
        On sides of different shapes.

    Examples
    --------
    >>> defined_pairs([1.0, float("nan"), 3.0], [0.5, 1.0, float("nan")])
    (array([1.]), array([0.5]))
    >>> defined_pairs([1.0, 2.0, 3.0], {"A": [0.0, float("nan"), 0.0], "B": [1.0, 1.0, float("nan")]})
    (array([1.]), {'A': array([0.]), 'B': array([1.])})
    """
    ours = np.asarray(ours, dtype=float)
    sides = {k: np.asarray(v, dtype=float) for k, v in baseline.items()} if isinstance(baseline, Mapping) else \
        {None: np.asarray(baseline, dtype=float)}
    for k, b in sides.items():
        if ours.shape != b.shape:
            raise ValueError(f"ours and baseline{'' if k is None else f' {k!r}'} must be paired (same shape), "
                             f"got {ours.shape} and {b.shape}")
    ok = ~np.isnan(ours)
    for b in sides.values():
        ok &= ~np.isnan(b)
    if not ok.any():
        ours, ok = np.zeros(1), np.zeros(1, dtype=bool)
        sides = {k: np.zeros(1) for k in sides}
        ok[0] = True
    out = {k: b[ok] for k, b in sides.items()}
    return ours[ok], (out if isinstance(baseline, Mapping) else out[None])


class SeedValues:
    """One value per seed of each cell of a tidy results frame, the seeds in a fixed order:
    ``values(*cell)`` is an array of shape (n_seeds,), NaN where a seed has no row.

    Parameters
    ----------
    frame : DataFrame
        Tidy results: one row per cell and seed.
    keys : list of str
        The columns naming a cell, in the order the call gives them.
    seeds : sequence
        The seeds, in the order of the returned arrays (the pairing of every claim).
    value, seed : str
        The columns of the numbers and of the seeds.

    Raises
    ------
    ValueError
        On a column the frame lacks.

    Examples
    --------
    >>> tidy = pd.DataFrame({"seed": [1, 0, 0], "method": ["A", "A", "B"], "acc": [91.0, 90.0, 80.0]})
    >>> v = SeedValues(tidy, ["method"], seeds=[0, 1], value="acc")
    >>> v("A"), v("B")
    (array([90., 91.]), array([80., nan]))
    """

    def __init__(self, frame: pd.DataFrame, keys: Sequence[str], seeds: Sequence, *, value: str = "value",
                 seed: str = "seed") -> None:
        missing = [c for c in [*keys, seed, value] if c not in frame.columns]
        if missing:
            raise ValueError(f"SeedValues: columns {missing} are not in the frame; valid: {list(frame.columns)}")
        self.series = frame.set_index([*keys, seed])[value].sort_index()
        self.seeds = list(seeds)

    def __call__(self, *cell) -> np.ndarray:
        """The values of ``cell`` (one key per column of ``keys``), one per seed; a ``KeyError`` for a cell with no row."""
        return self.series.loc[cell].reindex(self.seeds).to_numpy(dtype=float)


def plus_minus(mean: float, half_width: float, digits: int = 1) -> str:
    """A mean over seeds with the half-width of its interval, as a table cell shows it:
    ``"91.2 ± 1.3"``; an infinite part as ``∞`` (one seed: ``"91.2 ± ∞"``), a NaN mean as ``"n/a"``.

    Examples
    --------
    >>> plus_minus(91.234, 1.25), plus_minus(50.0, math.inf), plus_minus(math.nan, math.nan)
    ('91.2 ± 1.2', '50.0 ± ∞', 'n/a')
    """
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {half_width:.{digits}f}".replace("inf", "\N{INFINITY}")


def seed_table(
    frame: pd.DataFrame,
    index: str | list[str],
    columns: str | list[str] | None,
    values: str,
    *,
    seed: str = "seed",
    digits: int = 1,
    level: float = 0.95,
) -> pd.DataFrame:
    """A results table over seeds: each cell ``"mean ± half-width"`` of the t interval.

    Parameters
    ----------
    frame : DataFrame
        Tidy results: one row per seed and cell.
    index, columns : str or list of str
        The table's rows and columns (``columns=None``: one column, named after ``values``).
    values : str
        The column holding the numbers.
    seed : str, default "seed"
        The column naming the seed; every cell must have the same seeds.
    digits : int, default 1
    level : float, default 0.95

    Raises
    ------
    ValueError
        On a missing column, a NaN, a cell with duplicated seeds, or cells with different seeds.

    Examples
    --------
    >>> tidy = pd.DataFrame({"seed": [0, 1, 2, 0, 1, 2], "method": ["A"] * 3 + ["B"] * 3,
    ...                      "acc": [90.0, 91.0, 92.0, 80.0, 80.0, 80.0]})
    >>> seed_table(tidy, "method", None, "acc").to_dict()
    {'acc': {'A': '91.0 ± 2.5', 'B': '80.0 ± 0.0'}}
    """
    level = _check_level(level)
    index = [index] if isinstance(index, str) else list(index)
    cols = [] if columns is None else ([columns] if isinstance(columns, str) else list(columns))
    needed = [*index, *cols, values, seed]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ValueError(f"seed_table: columns {missing} are not in the frame; valid: {list(frame.columns)}")
    keys = [*index, *cols]
    if frame[values].isna().any():
        raise ValueError(f"seed_table: {values!r} has NaN values; re-run those seeds or drop them from every cell")
    if frame.duplicated([*keys, seed]).any():
        raise ValueError(f"seed_table: a cell has the same {seed!r} twice; one row per seed and cell")
    seed_sets = frame.groupby(keys)[seed].apply(lambda s: tuple(sorted(s)))
    if seed_sets.nunique() > 1:
        raise ValueError(f"seed_table: cells have different seeds ({sorted(set(seed_sets))}); pair them")

    def cell(x: pd.Series) -> str:
        iv = mean_interval(x.to_numpy(), level)
        return plus_minus(iv.mean, iv.half_width, digits)

    out = frame.groupby(keys, sort=False)[values].apply(cell)
    if not cols:
        return out.to_frame(values).rename_axis(index if len(index) > 1 else index[0])
    return out.unstack(cols)


__all__ = [
    "plus_minus",
    "DIRECTIONS",
    "DOES_NOT_HOLD",
    "HOLDS",
    "INCONCLUSIVE",
    "KINDS",
    "METHODS",
    "OVER",
    "TABLE_COLUMNS",
    "VERDICTS",
    "VERDICT_COLOURS",
    "MAX_SEEDS",
    "NOT_AT_THIS_MEAN",
    "interval_band",
    "Claim",
    "headline_summary",
    "ClaimResult",
    "Comparator",
    "Interval",
    "SeedValues",
    "RECORD_FIELDS",
    "claims_records",
    "claims_table",
    "decide",
    "defined_pairs",
    "evaluate",
    "interval_text",
    "paired_bootstrap",
    "bootstrap_means",
    "mean_interval",
    "paired_interval",
    "resolution_of",
    "seed_band",
    "seeds_to_decide",
    "simulate_coverage",
    "strongest_baseline",
    "says",
    "seed_table",
    "show",
    "tally",
]
