r"""Claims a careful reviewer would accept: declarations, paired intervals, fixed decision rules.

A claim of a paper is checked in the book as a **declaration made before the numbers exist**:
the paper's sentence quoted verbatim with its section, the
quantity it is about, the claimed direction of the difference (ours − baseline), the smallest
difference that counts, and the substitution of our small scale that affects it. The numbers
then enter as one value per seed (or per test sample / client) for each side, paired, and the
verdict is *computed* from the interval of the paired difference by the declared rule:

- ``"holds"`` when the interval clears the minimum effect in the claimed direction;
- ``"does not hold"`` when it clears it in the other direction;
- ``"inconclusive at this scale"`` otherwise: an honest answer, not a failure.

There is no "partly": a claim with several parts is several claims (several rows).

Two intervals, both of the mean paired difference ours − baseline:

- :func:`paired_interval`: Student's t interval of the mean paired difference over seeds
  (the seeds vary the partition, the initialization and the data subset, so it covers all of
  them at once). One seed gives the infinite interval: a single run cannot decide a claim.
- :func:`paired_bootstrap`: the paired percentile bootstrap (Efron & Tibshirani, *An
  Introduction to the Bootstrap*, 1993, ch. 13) of the mean difference over units of one run
  (test samples scored 0/1, or clients' accuracies): it measures how much the test set alone
  moves the difference. It needs many units (hundreds of test samples; a handful of clients is
  too few, use seeds there), and its randomness is an argument (``seed``).

Both return an :class:`Interval`; :func:`decide` applies a :class:`Claim`'s rule to it,
:func:`evaluate` does both, :func:`claims_table` renders the book's table (each row's rule
rendered from its declaration) and :func:`tally` counts the verdicts.

Examples
--------
>>> claim = Claim("gain", "Method X improves accuracy.", "Section 5, Table 2",
...               "global accuracy, X − FedAvg, points", "greater", min_effect=0.5)
>>> result = evaluate(claim, [91.9, 92.4, 92.1, 91.7, 92.3], [90.1, 90.6, 90.2, 90.0, 90.4])
>>> print(result.interval)
+1.82 [+1.72, +1.92], 5 seeds
>>> result.verdict
'holds'
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats

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
METHODS = ("t", "bootstrap")
"""How an :class:`Interval` was computed: Student's t over seeds, or a paired bootstrap over units."""
OVER = ("seeds", "test samples", "clients")
"""What :func:`evaluate` pairs over: seeds (t interval) or the units of one run (paired bootstrap)."""
TABLE_COLUMNS = ("claim", "quantity", "ours", "rule", "verdict", "substitution")
"""The columns of :func:`claims_table`."""
KINDS = ("claim", "control")
"""A paper's claim (counted by :func:`tally`), or a control the book adds to read a claim (not counted)."""

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
    """A minimum effect as declared (shortest form): ``0.5``, ``2.17``."""
    return f"{x:g}".replace("-", _MINUS)


def _percent(level: float) -> str:
    return f"{round(level * 100, 6):g} %"


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
        ``"global accuracy, FedGRC − best baseline, points"``.
    direction : {"greater", "less", "at least", "at most"}
        The claimed sign of the difference; or, for a claim of *closeness* ("competitive with",
        "closely tracks"), non-inferiority: "at least" (the difference is above
        ``-min_effect``) or "at most" (below ``+min_effect``).
    min_effect : float, default 0
        The smallest difference that counts, in the quantity's units (>= 0); for "at least" /
        "at most", the tolerance.
    substitution : str, default ""
        What our scale substitutes that affects this claim (a backbone, a baseline, a data set).
    level : float, default 0.95
        The level of the interval the rule reads.
    kind : {"claim", "control"}, default "claim"
        ``"control"`` for a question the book asks to read a claim (a matched-steps or a
        rebalancing-only control, say): decided by the same rule, rendered with the book's
        question instead of a quotation (``quote`` holds the question, ``source`` names the claim
        it serves) and left out of :func:`tally`.
    values : callable, optional
        How the claim's numbers are read: a function of no argument returning ``(ours,
        baseline)``, the paired per-seed values :func:`evaluate` takes (``baseline`` may be a
        number), or ``None`` where the chapter did not run what the claim needs (at a smaller
        profile, say). It is called only when the claim is decided (the book's claims report,
        :func:`fedlib.book.claims_report`), so it may read results computed after the
        declaration. Not part of the declaration's identity (equality, ``repr``).

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

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5)
    >>> print(c.rule())
    claimed greater than +0.5: holds if the whole 95 % interval of the paired difference lies
    above +0.5; does not hold if it lies below −0.5; otherwise inconclusive at this scale
    """

    key: str
    quote: str
    source: str
    quantity: str
    direction: str
    min_effect: float = 0.0
    substitution: str = ""
    level: float = 0.95
    kind: str = "claim"
    values: Callable[[], tuple[ArrayLike, ArrayLike | float] | None] | None = field(
        default=None, compare=False, repr=False)

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
        if self.values is not None and not callable(self.values):
            raise ValueError(
                f"Claim.values must be a function of no argument returning (ours, baseline), or None; "
                f"got {self.values!r}"
            )
        m = self.min_effect
        if isinstance(m, bool) or not isinstance(m, (int, float, np.integer, np.floating)) or not (
            math.isfinite(m) and m >= 0
        ):
            raise ValueError(f"min_effect must be a finite number >= 0 (0 means: clears zero), got {m!r}")
        object.__setattr__(self, "min_effect", float(m))
        object.__setattr__(self, "level", _check_level(self.level))

    def rule(self) -> str:
        """The decision rule as a sentence, rendered from the declaration (the table's rule column)."""
        m = self.min_effect
        if self.direction in ("at least", "at most"):
            bound = (f"{_MINUS}{_effect(m)}" if self.direction == "at least" else f"+{_effect(m)}") if m > 0 else "0"
            toward, away = ("above", "below") if self.direction == "at least" else ("below", "above")
            return (
                f"claimed {self.direction} {bound} (within {_effect(m)} of the baseline): holds if the whole "
                f"{_percent(self.level)} interval of the paired difference lies {toward} {bound}; does not hold "
                f"if it lies {away} {bound}; otherwise {INCONCLUSIVE}"
            )
        plus = f"+{_effect(m)}" if m > 0 else "0"
        minus = f"{_MINUS}{_effect(m)}" if m > 0 else "0"
        claimed, other = (plus, minus) if self.direction == "greater" else (minus, plus)
        toward, away = ("above", "below") if self.direction == "greater" else ("below", "above")
        return (
            f"claimed {self.direction} than {claimed}: holds if the whole {_percent(self.level)} interval "
            f"of the paired difference lies {toward} {claimed}; does not hold if it lies {away} {other}; "
            f"otherwise {INCONCLUSIVE}"
        )


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
    method : {"t", "bootstrap"}
        Student's t over seeds, or a paired percentile bootstrap over units.
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


def paired_interval(ours: ArrayLike, baseline: ArrayLike | float = 0.0, level: float = 0.95) -> Interval:
    r"""Student's t interval of the mean paired difference over seeds.

    With :math:`d_s = a_s - b_s` over :math:`n` seeds, :math:`\bar d` their mean and
    :math:`s` their standard deviation (``ddof=1``):

    .. math:: \bar d \pm t_{(1+\text{level})/2,\; n-1} \, s / \sqrt{n}

    (the interval of ``scipy.stats.ttest_rel(a, b).confidence_interval(level)``). One seed
    gives :math:`(-\infty, +\infty)`: a single run cannot bound the difference. Equal
    differences on every seed give a zero-width interval (the seeds agreed exactly).

    Parameters
    ----------
    ours, baseline : array-like of shape (n_seeds,)
        One value per seed, paired by seed (same partition, initialization and data subset).
        ``baseline`` may be a number (e.g. 0 when ``ours`` already is a per-seed difference).
    level : float in (0, 1), default 0.95

    Raises
    ------
    ValueError
        On unpaired shapes, a NaN or infinite value, or a level outside (0, 1).

    Examples
    --------
    >>> print(paired_interval([3.0, 4.0, 5.0], [1.0, 2.0, 2.0]))
    +2.33 [+0.90, +3.77], 3 seeds
    >>> paired_interval([3.0], [1.0]).width
    inf
    """
    level = _check_level(level)
    d = _paired_differences(ours, baseline)
    n, mean = len(d), float(d.mean())
    if n == 1:
        return Interval(mean, -math.inf, math.inf, 1, level, "t")
    half = float(stats.t.ppf((1 + level) / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    return Interval(mean, mean - half, mean + half, n, level, "t")


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
    if seed is None or isinstance(seed, bool) or not isinstance(seed, (int, np.integer, np.random.Generator)):
        raise ValueError(f"seed must be an int or a numpy Generator (randomness is an argument), got {seed!r}")
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"unit must be a non-empty string, got {unit!r}")
    n, mean = len(d), float(d.mean())
    if n == 1:
        return Interval(mean, -math.inf, math.inf, 1, level, "bootstrap", unit)
    rng = np.random.default_rng(seed)
    means = np.empty(int(n_boot))
    rows = max(1, 2**22 // n)  # resamples per chunk: at most ~4M indices (32 MiB) at a time
    for start in range(0, int(n_boot), rows):
        stop = min(start + rows, int(n_boot))
        idx = rng.integers(0, n, size=(stop - start, n))  # (rows, n): resampled unit indices
        means[start:stop] = d[idx].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Interval(mean, float(low), float(high), n, level, "bootstrap", unit)


def decide(claim: Claim, interval: Interval) -> str:
    """The verdict of ``claim`` on ``interval`` by the declared rule (see :class:`Claim`).

    Raises
    ------
    ValueError
        When the interval's level is not the level the claim declared.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5)
    >>> [decide(c, Interval(0.0, lo, hi, 5, 0.95, "t")) for lo, hi in [(0.6, 2), (-2, -0.6), (-0.4, 0.4)]]
    ['holds', 'does not hold', 'inconclusive at this scale']
    """
    if not isinstance(claim, Claim) or not isinstance(interval, Interval):
        raise ValueError(
            f"decide needs a Claim and an Interval, got {type(claim).__name__} and {type(interval).__name__}"
        )
    if not math.isclose(interval.level, claim.level):
        raise ValueError(
            f"claim {claim.key!r} declared a {_percent(claim.level)} interval but got a "
            f"{_percent(interval.level)} one; compute the interval with level={claim.level}"
        )
    m = claim.min_effect
    if claim.direction == "at least":
        return HOLDS if interval.low > -m else DOES_NOT_HOLD if interval.high < -m else INCONCLUSIVE
    if claim.direction == "at most":
        return HOLDS if interval.high < m else DOES_NOT_HOLD if interval.low > m else INCONCLUSIVE
    above, below = interval.low > m, interval.high < -m
    if claim.direction == "greater":
        return HOLDS if above else DOES_NOT_HOLD if below else INCONCLUSIVE
    return HOLDS if below else DOES_NOT_HOLD if above else INCONCLUSIVE


@dataclass(frozen=True)
class ClaimResult:
    """A claim and the interval it was decided on; the verdict is computed from them, never stored.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater")
    >>> ClaimResult(c, paired_interval([2.0, 3.0, 2.5])).verdict
    'holds'
    """

    claim: Claim
    interval: Interval

    def __post_init__(self) -> None:
        decide(self.claim, self.interval)  # validates the types and the level once

    @property
    def verdict(self) -> str:
        """``decide(claim, interval)``: one of :data:`VERDICTS`."""
        return decide(self.claim, self.interval)


def evaluate(
    claim: Claim,
    ours: ArrayLike,
    baseline: ArrayLike | float = 0.0,
    *,
    over: str = "seeds",
    seed: int | np.random.Generator | None = None,
    n_boot: int = 2000,
) -> ClaimResult:
    """Decide ``claim`` on paired values: the interval at the claim's level, and the verdict.

    Parameters
    ----------
    claim : Claim
    ours, baseline : array-like of shape (n,)
        Paired values (``baseline`` may be a number, e.g. 0 for a per-seed difference).
    over : {"seeds", "test samples", "clients"}, default "seeds"
        ``"seeds"``: :func:`paired_interval` (Student's t over seeds). Otherwise the values are
        the units of one run and the interval is :func:`paired_bootstrap` over them.
    seed : int or numpy.random.Generator, optional
        The bootstrap's randomness; required unless ``over="seeds"`` (where it is not used).
    n_boot : int, default 2000
        The bootstrap's resamples.

    Examples
    --------
    >>> c = Claim("less-cost", "X is cheaper.", "Table 5", "seconds, X − Y", "less")
    >>> evaluate(c, [9.0, 9.5, 9.2], [10.0, 10.4, 10.1]).verdict
    'holds'
    """
    if not isinstance(claim, Claim):
        raise ValueError(f"evaluate needs a Claim, got {type(claim).__name__}")
    if over not in OVER:
        raise ValueError(f"unknown over={over!r}; valid: {', '.join(map(repr, OVER))}")
    if over == "seeds":
        interval = paired_interval(ours, baseline, level=claim.level)
    else:
        if seed is None:
            raise ValueError(
                f"a paired bootstrap over {over} draws resamples: pass seed= (an int or a numpy Generator)"
            )
        interval = paired_bootstrap(ours, baseline, seed=seed, n_boot=n_boot, level=claim.level, unit=over)
    return ClaimResult(claim, interval)


def _claim_text(claim: Claim) -> str:
    if claim.kind == "control":
        return f"Control: {claim.quote} (for {claim.source})"
    return f"\N{LEFT DOUBLE QUOTATION MARK}{claim.quote}\N{RIGHT DOUBLE QUOTATION MARK} ({claim.source})"


def claims_table(results: Sequence[ClaimResult], digits: int = 2) -> pd.DataFrame:
    """The book's claims table: one row per claim, in the given order.

    Columns (:data:`TABLE_COLUMNS`): ``claim`` (the quote and its source; for a control,
    ``"Control: <question> (for <claim>)"``), ``quantity``,
    ``ours`` (the mean paired difference, its interval and what it rests on, e.g.
    ``"+1.23 [+0.40, +2.06], 5 seeds"``), ``rule`` (:meth:`Claim.rule`), ``verdict``
    (:func:`decide`) and ``substitution``.

    Raises
    ------
    ValueError
        On an element that is not a :class:`ClaimResult`, or two rows with the same key.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5)
    >>> table = claims_table([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])])
    >>> table.loc[0, "claim"], table.loc[0, "ours"], table.loc[0, "verdict"]
    ('“X beats Y.” (Table 2)', '+2.00 [+1.34, +2.66], 3 seeds', 'holds')
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
            "quantity": r.claim.quantity,
            "ours": r.interval.format(digits),
            "rule": r.claim.rule(),
            "verdict": r.verdict,
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
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater")
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


def says(result: ClaimResult, digits: int = 1) -> str:
    """A decided row in a sentence: ``"<key> holds (<interval>)"``, ``"<key> does not hold
    (...)"`` or ``"<key> is inconclusive at this scale (...)"``, the interval with ``digits``
    decimals (:meth:`Interval.format`).

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater")
    >>> says(evaluate(c, [2.0, 3.0, 2.5])).split(" (")[0], says(evaluate(c, [1.0])).split(" (")[0]
    ('gain holds', 'gain is inconclusive at this scale')
    """
    if not isinstance(result, ClaimResult):
        raise ValueError(f"says reads a ClaimResult, got a {type(result).__name__}")
    v = result.verdict
    return f"{result.claim.key} {'is ' if v == INCONCLUSIVE else ''}{v} ({result.interval.format(digits)})"


_VERDICT_COLOURS = {HOLDS: "#d9f2d9", DOES_NOT_HOLD: "#f8d7d7", INCONCLUSIVE: "#eeeeee"}


def show(results: Sequence[ClaimResult] | pd.DataFrame, digits: int = 2):
    """The claims table for a notebook page: every cell in full (pandas cuts text at 50
    characters by default), text wrapped and top-aligned, the index hidden, each verdict shaded.

    Takes the results (rendered by :func:`claims_table`) or a table already rendered.

    Returns
    -------
    pandas.io.formats.style.Styler
        The notebook displays it as an HTML table; ``.to_html()`` gives the markup, the same
        for the same table (its id is derived from the content).

    Examples
    --------
    >>> c = Claim("gain", "X beats Y by a margin worth quoting in full, longer than fifty characters.",
    ...           "Table 2", "accuracy, X − Y, points", "greater")
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
        table.style.set_uuid(f"claims-{uuid}")
        .hide(axis="index")
        .map(lambda v: f"background-color: {_VERDICT_COLOURS.get(v, 'transparent')}", subset=["verdict"])
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


def defined_pairs(ours: ArrayLike, baseline: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (one per seed) where both sides are defined: a seed where either side is NaN
    (an undefined metric, e.g. no client holds a rare class) is dropped from both. With no pair
    left, one pair of zeros (an inconclusive one-seed interval). What a claim's ``values`` returns.

    Raises
    ------
    ValueError
        On sides of different shapes.

    Examples
    --------
    >>> defined_pairs([1.0, float("nan"), 3.0], [0.5, 1.0, float("nan")])
    (array([1.]), array([0.5]))
    """
    ours, baseline = np.asarray(ours, dtype=float), np.asarray(baseline, dtype=float)
    if ours.shape != baseline.shape:
        raise ValueError(f"ours and baseline must be paired (same shape), got {ours.shape} and {baseline.shape}")
    ok = ~(np.isnan(ours) | np.isnan(baseline))
    return (ours[ok], baseline[ok]) if ok.any() else (np.zeros(1), np.zeros(1))


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
        half = iv.half_width
        return f"{iv.mean:.{digits}f} ± {half:.{digits}f}".replace("inf", "\N{INFINITY}")

    out = frame.groupby(keys, sort=False)[values].apply(cell)
    if not cols:
        return out.to_frame(values).rename_axis(index if len(index) > 1 else index[0])
    return out.unstack(cols)


__all__ = [
    "DIRECTIONS",
    "DOES_NOT_HOLD",
    "HOLDS",
    "INCONCLUSIVE",
    "KINDS",
    "METHODS",
    "OVER",
    "TABLE_COLUMNS",
    "VERDICTS",
    "interval_band",
    "Claim",
    "ClaimResult",
    "Interval",
    "SeedValues",
    "claims_table",
    "decide",
    "defined_pairs",
    "evaluate",
    "interval_text",
    "paired_bootstrap",
    "mean_interval",
    "paired_interval",
    "seed_band",
    "says",
    "seed_table",
    "show",
    "tally",
]
