r"""Claims a careful reviewer would accept: declarations, paired intervals, fixed decision rules.

A claim of a paper is checked in the book as a **declaration made before the numbers exist**:
the paper's sentence quoted verbatim with its section, the quantity it is about, the claimed
direction of the difference (ours − baseline), the **smallest effect of interest** :math:`m`
(declared by one rule for every chapter, :func:`effect`), the smallest difference the quantity
can show at all (its resolution: one test image of 1,000 is 0.1 points,
:func:`~fedbook.intervals.resolution_of`), the comparator (one named baseline, or every baseline
of a list), the **regime checks** the setting must pass for the claim to be testable at all
(:class:`RegimeCheck`) and the substitution of our small scale that affects it. The numbers then
enter as one value per seed (or per test sample / client) for each side, paired, and the verdict
is *computed* from the interval of the paired difference by the declared rule:

- ``"untestable at this resolution"`` when the quantity cannot resolve :math:`m` (its resolution
  is above :data:`RESOLUTION_SHARE` of :math:`m`), and ``"untestable in this setting"`` when a
  regime check fails: both read before the interval;
- ``"holds"`` when the interval lies beyond :math:`+m` in the claimed direction;
- ``"does not hold"`` when it lies short of :math:`+m`: the data exclude an effect of the claimed
  size, of one of two kinds, *smaller than claimed* (the interval reaches the claimed side of 0)
  or *the opposite direction* (it lies wholly on the other side of 0);
- ``"inconclusive at this scale"`` only while the interval straddles :math:`m`: more seeds
  decide it unless the true effect sits exactly on :math:`m`.

There is no "partly": a claim with several parts is several claims (several rows). At a true
effect equal to :math:`m`, each wrong verdict is at most the one-sided 2.5 % of a 95 % interval,
for one comparator and for every baseline of a tuple (``tests/test_claims.py`` simulates it at
3, 5 and 10 seeds).

The interval comes from :mod:`fedbook.intervals`: Student's t of the mean paired difference
over seeds, floored by the test noise inside each seed (:func:`fedbook.intervals.paired_interval`),
or the paired bootstrap over the units of one run (:func:`fedbook.intervals.paired_bootstrap`).
A claim names where its two sides are (:class:`Read`: a frame of the chapter's results, its rows
and its column), and :meth:`Claim.read` pairs them unit by unit. Beside the mean difference, a
result carries the **probability of improvement** (:class:`Improvement`): the share of seeds in
which ours beats the comparator in the claimed direction, with its Wilson interval.

Given an :class:`~fedbook.intervals.Interval`, :func:`decide` applies a :class:`Claim`'s rule to it,
:func:`evaluate` does both, :func:`claims_table` renders the book's table (each row's rule
rendered from its declaration, and how many seeds would decide it: :func:`seeds_to_decide`) and
:func:`tally` counts the verdicts.

The comparator is fixed before the runs, in one of two forms (never a per-seed maximum over
baselines, which is biased toward "does not hold": where ours beats six tied baselines by exactly
:math:`m` it says so in about 42 % of experiments of 5 seeds, see :func:`strongest_baseline`):

- a named baseline chosen by a declared rule on data the claim does not use
  (:func:`strongest_baseline`, a :class:`Comparator`), declared ``versus=comparator.name``;
- every baseline of a list, ``versus=("FedAvg", "Ditto", ...)``: an intersection-union test
  (:func:`decide`), one interval per baseline.

Examples
--------
>>> claim = Claim("gain", "Method X improves accuracy.", "Section 5, Table 2",
...               "global accuracy, X − FedAvg, points", "greater", effect("points", paper=1.8), resolution=0.1)
>>> claim.min_effect  # half the paper's +1.8
0.9
>>> result = evaluate(claim, [91.9, 92.4, 92.1, 91.7, 92.3], [90.1, 90.6, 90.2, 90.0, 90.4])
>>> print(result.interval)
+1.82 [+1.72, +1.92], 5 seeds
>>> result.verdict, str(result.improvement)
('holds', '100 % [57, 100] of 5 seeds')
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats

from fedbook.intervals import (_MINUS, Interval, _check_level, _check_resolution, _paired_differences, _t,
                               paired_bootstrap, paired_interval)
from fedbook.tables import Html
from fedlib.validation import is_real

HOLDS = "holds"
"""The verdict when the interval lies beyond the smallest effect of interest in the claimed direction."""
DOES_NOT_HOLD = "does not hold"
"""The verdict when the interval lies short of the smallest effect of interest (:data:`SHORTFALLS` says how)."""
INCONCLUSIVE = "inconclusive at this scale"
"""The verdict while the interval straddles the smallest effect of interest (it includes one run's infinite interval)."""
UNTESTABLE_RESOLUTION = "untestable at this resolution"
"""The verdict when the quantity's resolution is above :data:`RESOLUTION_SHARE` of the smallest effect of interest."""
UNTESTABLE_SETTING = "untestable in this setting"
"""The verdict when a regime check of the claim fails (:class:`RegimeCheck`): the setting cannot test it."""
VERDICTS = (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING)
"""Every verdict, in the order of :func:`tally` and of the book's tallies."""
UNTESTABLE = (UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING)
"""The verdicts read before the interval: counted apart from "inconclusive"."""
SMALLER = "smaller than claimed"
"""A "does not hold" whose interval excludes the claimed size but not the claimed sign."""
OPPOSITE = "the opposite direction"
"""A "does not hold" whose interval lies wholly on the other side of 0 (of the tolerance, for non-inferiority)."""
SHORTFALLS = (SMALLER, OPPOSITE)
"""The two kinds of "does not hold"."""
DIRECTIONS = ("greater", "less", "at least", "at most")
"""The claim about the difference ours − baseline: a sign ("greater", "less"), or non-inferiority
within a tolerance ("at least": ours is no worse than the baseline by more than ``min_effect``;
"at most": ours exceeds it by no more than ``min_effect``)."""
OVER = ("seeds", "test samples", "clients")
"""What :func:`evaluate` pairs over: seeds (t interval) or the units of one run (paired bootstrap)."""
TABLE_COLUMNS = ("claim", "quantity", "ours", "how often", "rule", "verdict", "seeds to decide", "substitution")
"""The columns of :func:`claims_table`."""
KINDS = ("claim", "control")
"""A paper's claim (counted by :func:`tally`), or a control the book adds to read a claim (not counted)."""
ABOUTS = ("method", "problem")
"""What a paper's claim is about: its **method** (what the method does better), or the **problem** the
paper addresses (a baseline's failure that motivates the method: the frozen prototype degrades, FedAvg
misses the rare class). A summary says the two apart (:func:`summary_html`): a problem that is real is
not a method that works."""

MAX_SEEDS = 10_000
"""The largest number of seeds :func:`seeds_to_decide` looks for."""
NOT_AT_THIS_MEAN = "not at this mean"
"""What :func:`seeds_to_decide` answers when no number of seeds decides at the observed mean (it sits on a threshold)."""

EFFECT_SHARE = 0.5
"""The smallest effect of interest, where the paper reports the gain of the comparison: this share of it.

Half the reported gain: a replication at our scale that finds half the paper's effect has found
the effect (a smaller scale, fewer rounds and stand-in backbones shrink gains), and one that
excludes half of it has shown that the claimed size does not carry over."""
RESOLUTION_SHARE = 0.25
"""A claim is testable at its quantity's resolution when the resolution is at most this share of
:math:`m`: an effect of interest of fewer than four units of resolution (four test images) is
read off the quantization, not measured."""


@dataclass(frozen=True)
class EffectKind:
    """A kind of quantity and its default smallest effect of interest (where the paper reports no gain).

    Parameters
    ----------
    name : str
        The kind's name, a key of :data:`EFFECT_KINDS`.
    default : float
        The default smallest effect of interest, in the kind's units.
    unit : str
        What the kind measures.
    why : str
        Why the default is the smallest effect worth a sentence.
    """

    name: str
    default: float
    unit: str
    why: str


EFFECT_KINDS = {k.name: k for k in (
    EffectKind("points", 1.0, "an accuracy, F1 or share in percentage points",
               "one point: ten images of a 1,000-image test set, the smallest gain the papers' tables discuss"),
    EffectKind("score", 0.01, "an F1, accuracy or rate on the 0–1 scale", "the same one point on the 0–1 scale"),
    EffectKind("correlation", 0.1, "a correlation, an AUROC, an average precision, a silhouette or a cosine",
               "a tenth of the unit scale, Cohen's 'small' correlation"),
    EffectKind("relative", 0.1, "a relative difference (a ratio − 1, a share of the quantity's own size)",
               "10 % of the quantity's own size"),
    EffectKind("log10 ratio", 0.05, "a difference of base-10 logarithms of a ratio", "a factor of 10^0.05, about 1.12"),
    EffectKind("standardized", 0.2, "a difference in within-class standard deviations (a Mahalanobis distance, an "
               "effect size)", "Cohen's 'small' standardized effect"),
)}
"""The declared default smallest effect of interest of each kind of quantity (:func:`effect`)."""


@dataclass(frozen=True)
class Effect:
    """A smallest effect of interest :math:`m`, declared by the book's one rule (:func:`effect`).

    Parameters
    ----------
    m : float
        The effect, in the quantity's units (> 0).
    kind : str
        The kind of quantity (a key of :data:`EFFECT_KINDS`).
    paper : float or None
        The gain the paper reports for the comparison, in the same units, when it reports one.
    share : float
        The share of ``paper`` that :math:`m` is.
    """

    m: float
    kind: str
    paper: float | None
    share: float

    def describe(self) -> str:
        """Where :math:`m` comes from, in a phrase for the rule column.

        Examples
        --------
        >>> effect("points", paper=1.44).describe()
        'm = 0.72: 0.5 of the paper’s +1.44'
        >>> effect("points").describe()
        'm = 1: the default for points'
        """
        if self.paper is None:
            return f"m = {_effect(self.m)}: the default for {self.kind}"
        return f"m = {_effect(self.m)}: {self.share:g} of the paper\N{RIGHT SINGLE QUOTATION MARK}s {_signed_effect(self.paper)}"


def effect(kind: str, paper: float | None = None, *, share: float = EFFECT_SHARE) -> Effect:
    r"""The smallest effect of interest of a claim, by the book's one rule.

    .. math:: m = \begin{cases} \text{share} \times |g| & \text{where the paper reports the gain } g,\\
              \text{the default of the kind} & \text{otherwise (:data:`EFFECT_KINDS`)}.\end{cases}

    Parameters
    ----------
    kind : str
        The kind of quantity, a key of :data:`EFFECT_KINDS` (``"points"``, ``"score"``, ...).
    paper : float, optional
        The gain (or the difference) the paper reports for this comparison, in the quantity's units.
    share : float, default :data:`EFFECT_SHARE`
        The share of ``paper`` that counts (in (0, 1]).

    Raises
    ------
    ValueError
        On an unknown kind, a ``paper`` that is not a finite non-zero number, or a share outside (0, 1].

    Examples
    --------
    >>> effect("points", paper=-2.13).m, effect("score").m, effect("correlation").m
    (1.065, 0.01, 0.1)
    >>> effect("percent")
    Traceback (most recent call last):
    ...
    ValueError: unknown effect kind 'percent'; valid: 'points', 'score', 'correlation', 'relative', 'log10 ratio', 'standardized'
    """
    if kind not in EFFECT_KINDS:
        raise ValueError(f"unknown effect kind {kind!r}; valid: {', '.join(map(repr, EFFECT_KINDS))}")
    if not is_real(share) or not 0 < share <= 1:
        raise ValueError(f"share must be a number in (0, 1], got {share!r}")
    if paper is None:
        return Effect(EFFECT_KINDS[kind].default, kind, None, float(share))
    if not is_real(paper) or not math.isfinite(paper) or paper == 0:
        raise ValueError(f"paper must be the gain the paper reports, a finite non-zero number, got {paper!r}")
    return Effect(round(float(share) * abs(float(paper)), 12), kind, float(paper), float(share))


def _effect(x: float) -> str:
    """A minimum effect as declared, in its shortest form to three significant digits: ``0.5``,
    ``2.17``, ``0.714`` (one image of 140 in points, 0.714285...)."""
    return f"{x:.3g}".replace("-", _MINUS)


def _check_texts(owner: str, obj: Any, names: Sequence[str]) -> None:
    """Refuse an empty or non-string field of a declaration, naming it (``Claim.quote``, ...)."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{owner}.{name} must be a non-empty string, got {value!r}")


def smallest_resolvable(resolution: float) -> float:
    """The smallest effect of interest a quantity of this resolution can test:
    ``resolution / RESOLUTION_SHARE`` (four units of resolution).

    Examples
    --------
    >>> smallest_resolvable(0.1)  # one test image of 1,000, in points
    0.4
    """
    return _check_resolution(resolution) / RESOLUTION_SHARE


def _signed_effect(x: float) -> str:
    return ("+" if x > 0 else "") + _effect(x)


def _percent(level: float) -> str:
    return f"{round(level * 100, 6):g} %"


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
    claim and its numbers in one place. Called with the results (``read(results)``), it returns the values as a Series whose
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
                rows = frame[name].isna() if value is None else frame[name] == value
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
        if not values.index.is_unique:  # two values of one unit would be pooled as two units: refused
            units = values.index.to_frame(index=False)
            key = list(units.columns)
            rest = frame.reset_index(drop=True).drop(columns=[self.column, *[c for c in key if c in frame.columns]],
                                                     errors="ignore")
            grouped = rest.assign(_unit=units.astype(str).agg("/".join, axis=1).to_numpy()).groupby("_unit")
            varying = sorted(c for c in rest.columns if (grouped[c].nunique(dropna=False) > 1).any())
            raise ValueError(f"{self!r} selects {len(values)} rows for {values.index.nunique()} units "
                             f"({', '.join(map(str, key))}): several values of one unit would count as several units; "
                             f"filter the columns that still vary with where= (here: {varying or 'none named'})")
        return values.astype(np.float64)


REGIME_OPS = ("at least", "at most")
"""How a regime check compares its value with its threshold."""
REGIME_SUMMARIES = ("mean", "min", "max")
"""How a regime check makes one number of its units' values (every seed, domain or client)."""


@dataclass(frozen=True)
class RegimeCheck:
    """A condition the setting must meet for a claim to be testable, declared before the runs.

    A claim can be false in a setting only if the setting can show it: a backbone that is still
    reshaping its features when a client departs, a domain whose embeddings carry no signal, a
    score read on a handful of images, or a baseline already at its ceiling makes the verdict a
    finding about the setting, not about the paper. A regime check names a quantity computed from
    the same runs (:class:`Read`), the threshold it must meet and why; a claim that fails one
    reads ``"untestable in this setting"`` and names it (:class:`ClaimResult`).

    Parameters
    ----------
    key : str
        A short name, shown in the verdict (``"backbone stable at departure"``).
    quantity : str
        What is measured, with its units.
    read : Read
        Where its values are (one per seed, domain or client).
    op : {"at least", "at most"}
        The condition on the summary of the values.
    threshold : float
        The threshold, fixed before the runs.
    why : str
        Why a setting outside it cannot test the claim.
    summary : {"mean", "min", "max"}, default "mean"
        How the values become one number: over the seeds, the mean; with ``by``, over the groups
        of their means (``"min"`` where *every* domain must pass).
    by : str, optional
        A column or index level of the read's units (``"domain"``): the values are first averaged
        over the seeds within each of its groups, then summarized over the groups. The book's
        policy: a check reads the mean over seeds of each thing that must pass (each domain, each
        data set), then the worst of them, so that adding seeds sharpens the check rather than
        drawing a lower minimum from more noise.

    A value that cannot be computed (NaN: a run that ends at the departure round, say) fails the
    check, and the verdict says so.

    Examples
    --------
    >>> import pandas as pd
    >>> probe = RegimeCheck("signal in every domain", "linear-probe accuracy of the worst domain, %",
    ...                     Read("probe", "acc"), "at least", 50.0, "a domain without signal cannot show a gain",
    ...                     summary="min")
    >>> reading = probe.check({"probe": pd.DataFrame({"domain": ["a", "b"], "acc": [91.0, 31.0]})})
    >>> reading.passes, reading.text()
    (False, 'signal in every domain: linear-probe accuracy of the worst domain, % = 31 (needs at least 50)')
    >>> import dataclasses
    >>> seeds = pd.DataFrame({"seed": [0, 0, 1, 1], "domain": ["a", "b", "a", "b"], "acc": [91.0, 48.0, 89.0, 56.0]})
    >>> by_unit = {"probe": seeds.set_index(["seed", "domain"])}  # the units: a seed and a domain
    >>> dataclasses.replace(probe, by="domain").check(by_unit).value  # domain b: the mean of 48 and 56
    52.0
    """

    key: str
    quantity: str
    read: Read
    op: str
    threshold: float
    why: str
    summary: str = "mean"
    by: str | None = None

    def __post_init__(self) -> None:
        if self.by is not None and (not isinstance(self.by, str) or not self.by):
            raise ValueError(f"RegimeCheck.by must be a column or index level's name or None, got {self.by!r}")
        _check_texts("RegimeCheck", self, ("key", "quantity", "why"))
        if not isinstance(self.read, Read):
            raise ValueError(f"RegimeCheck {self.key!r}: read must be a Read (where the values are), got {self.read!r}")
        if self.op not in REGIME_OPS:
            raise ValueError(f"RegimeCheck {self.key!r}: unknown op {self.op!r}; valid: {', '.join(map(repr, REGIME_OPS))}")
        if not is_real(self.threshold) or not math.isfinite(self.threshold):
            raise ValueError(f"RegimeCheck {self.key!r}: threshold must be a finite number, got {self.threshold!r}")
        if self.summary not in REGIME_SUMMARIES:
            raise ValueError(f"RegimeCheck {self.key!r}: unknown summary {self.summary!r}; valid: "
                             f"{', '.join(map(repr, REGIME_SUMMARIES))}")
        object.__setattr__(self, "threshold", float(self.threshold))

    def check(self, results: Mapping[str, pd.DataFrame]) -> RegimeReading | None:
        """The check read from ``results``; ``None`` when its frame was not computed at this profile."""
        values = self.read(results)
        if values is None:
            return None
        if len(values) == 0:
            raise ValueError(f"RegimeCheck {self.key!r}: {self.read!r} selects no value")
        if self.by is not None:
            levels = [n for n in values.index.names if n is not None]
            if self.by not in levels:
                raise ValueError(f"RegimeCheck {self.key!r}: by={self.by!r} is not a unit of {self.read!r}; valid: {levels}")
            values = values.groupby(level=self.by, sort=False).mean()  # each group's mean over the seeds
        x = values.to_numpy(dtype=np.float64)
        if np.isinf(x).any() or np.isnan(x).any():  # not computed in this setting: the check fails, and says so
            return RegimeReading(self, math.nan)
        return RegimeReading(self, float(getattr(np, self.summary)(x)))

    def describe(self) -> str:
        """The declaration in a phrase: ``"<key>: <quantity> at least <threshold>"``."""
        return f"{self.key}: {self.quantity} {self.op} {_score(self.threshold)}"


@dataclass(frozen=True)
class RegimeReading:
    """A :class:`RegimeCheck` and the value the runs gave it."""

    check: RegimeCheck
    value: float

    @property
    def passes(self) -> bool:
        """Whether the value meets the threshold (a value on the threshold passes; NaN, a value
        the setting could not compute, fails)."""
        c = self.check
        return self.value >= c.threshold if c.op == "at least" else self.value <= c.threshold

    def text(self) -> str:
        """``"<key>: <quantity> = <value> (needs at least <threshold>)"``."""
        c = self.check
        value = "not computable in this setting" if math.isnan(self.value) else f"= {_score(self.value)}"
        return f"{c.key}: {c.quantity} {value} (needs {c.op} {_score(c.threshold)})"


@dataclass(frozen=True)
class Improvement:
    r"""The probability of improvement over paired units: how often ours beats the comparator.

    The share of units (seeds) in which the difference lies in the claimed direction, beyond 0
    (for a non-inferiority claim too: "how often is ours ahead", beside its tolerance), a tie
    counting one half; against every baseline of a tuple, a unit counts when ours beats all of
    them. With its Wilson score interval at the claim's level: the count a reader asks for beside
    the mean ("in how many seeds?"). It is the paired analogue of rliable's probability of
    improvement, which compares unpaired runs (:math:`P(X > Y)` over all pairs of runs); our
    seeds are paired (both sides share a seed's partition and test sets), so the sign of each
    seed's difference is the natural count.

    .. math:: \hat p = w / n, \qquad \frac{\hat p + z^2/2n \pm z\sqrt{\hat p(1-\hat p)/n + z^2/4n^2}}{1 + z^2/n}

    Examples
    --------
    >>> print(Improvement.of([[1.0, 2.0, -0.5, 0.0, 3.0]], "greater"))
    70 % [30, 93] of 5 seeds
    """

    wins: float
    n: int
    low: float
    high: float
    unit: str = "seeds"

    @classmethod
    def of(cls, differences: Sequence[ArrayLike], direction: str, level: float = 0.95,
           unit: str = "seeds") -> Improvement:
        """From the per-unit differences ours − baseline (one array per baseline)."""
        d = np.asarray(differences, dtype=np.float64)
        sign = 1.0 if direction in ("greater", "at least") else -1.0
        s = sign * d  # of shape (n_baselines, n)
        wins = float(np.sum(np.where((s > 0).all(axis=0), 1.0, np.where((s >= 0).all(axis=0), 0.5, 0.0))))
        n = d.shape[1]
        z = float(stats.norm.ppf((1 + level) / 2))
        p = wins / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return cls(wins, n, max(0.0, centre - half), min(1.0, centre + half), unit)

    @property
    def share(self) -> float:
        """``wins / n``."""
        return self.wins / self.n

    def __str__(self) -> str:
        unit = self.unit[:-1] if self.n == 1 and self.unit.endswith("s") else self.unit
        return f"{100 * self.share:.0f} % [{100 * self.low:.0f}, {100 * self.high:.0f}] of {self.n} {unit}"


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
    min_effect : Effect or float, optional
        The smallest effect of interest :math:`m`, in the quantity's units: an :class:`Effect`
        of the book's one rule (:func:`effect`: a share of the paper's reported gain, else the
        default of the quantity's kind); a bare number is a hand-made declaration, which the
        book's chapters do not use (:func:`fedbook.page.claims_report` refuses it). For "at
        least" / "at most", the tolerance. Default (``None``): the smallest effect the resolution
        resolves, ``resolution / RESOLUTION_SHARE``. When the resolution is above
        :data:`RESOLUTION_SHARE` of :math:`m`, the claim is ``"untestable at this resolution"``.
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
        1,000-image test set in points is 0.1 (:func:`~fedbook.intervals.resolution_of`), one client of 20 in a client
        count is 1. It floors the interval over seeds (:func:`~fedbook.intervals.paired_interval`) when the per-seed
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
        :func:`~fedbook.intervals.paired_interval`; default: the floor of ``resolution``).
    regimes : tuple of RegimeCheck, keyword-only, default ()
        The conditions the setting must meet for the claim to be testable, declared before the
        runs and read from the same results (:class:`RegimeCheck`).
    effect : Effect, keyword-only, optional
        Set from ``min_effect`` when that is an :class:`Effect` (``min_effect`` then holds its
        :math:`m`); kept by ``dataclasses.replace`` while ``min_effect`` stays its :math:`m`.
    about : {"method", "problem"}, keyword-only, default "method"
        What the paper's sentence is about (:data:`ABOUTS`): its method, or the problem it
        addresses (a baseline's failure); a control is about the method's reading ("method").

    Raises
    ------
    ValueError
        On an empty text, an unknown direction or kind, a ``resolution`` that is not a finite
        number > 0, a ``min_effect`` that is not an :class:`Effect` or a finite number > 0, a
        ``versus`` that is neither a name, a tuple of distinct names nor ``None``, or a regime
        that is not a :class:`RegimeCheck`.

    Notes
    -----
    The decision rule, with :math:`[L, U]` the interval of the paired difference and
    :math:`m` the smallest effect of interest:

    .. math::

        \text{greater: holds} \iff L > m, \quad \text{does not hold} \iff U < m;
        \qquad \text{less: holds} \iff U < -m, \quad \text{does not hold} \iff L > -m;

    otherwise "inconclusive at this scale" (the interval straddles the claimed size). A "does
    not hold" is *the opposite direction* when the interval lies wholly on the other side of 0
    (:math:`U < 0` for "greater"), *smaller than claimed* otherwise. Both thresholds sit on the
    same :math:`m`, so as seeds accrue the interval leaves it on one side, and at a true effect
    equal to :math:`m` each wrong verdict has the one-sided rate :math:`(1 - \text{level})/2`.
    Non-inferiority reads one threshold on both sides:

    .. math::

        \text{at least: holds} \iff L > -m, \quad \text{does not hold} \iff U < -m;
        \qquad \text{at most: holds} \iff U < m, \quad \text{does not hold} \iff L > m.

    Against every baseline of a tuple, the same rule per baseline (:func:`decide`). Before the
    interval is read, a claim whose resolution is above :data:`RESOLUTION_SHARE` of :math:`m` is
    "untestable at this resolution", and one whose regime check fails "untestable in this setting".

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1)
    >>> print(c.rule())
    claimed greater than +1 (m = 1: the default for points): holds if the whole 95 % interval of the paired
    difference lies above +1; does not hold if it lies below +1; otherwise inconclusive at this scale
    >>> Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", effect("points", paper=0.4),
    ...       resolution=0.1).testable
    False
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
    regimes: tuple[RegimeCheck, ...] = field(default=(), kw_only=True)
    effect: Effect | None = field(default=None, kw_only=True, compare=False, repr=False)
    about: str = field(default="method", kw_only=True)

    def __post_init__(self) -> None:
        _check_texts("Claim", self, ("key", "quote", "source", "quantity"))
        if self.about not in ABOUTS:
            raise ValueError(f"claim {self.key!r}: unknown about {self.about!r}; valid: {', '.join(map(repr, ABOUTS))}")
        if self.about == "problem" and self.kind == "control":
            raise ValueError(f"claim {self.key!r}: a control is the book's question, not a paper's claim about its "
                             "problem (about='problem', kind='control')")
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
        m = self.min_effect
        if isinstance(m, Effect):
            object.__setattr__(self, "effect", m)
            m = m.m
        elif m is None:
            m = smallest_resolvable(r)
        if self.effect is not None and not isinstance(self.effect, Effect):
            raise ValueError(f"claim {self.key!r}: effect must be an Effect (fedbook.claims.effect) or None, got {self.effect!r}")
        if self.effect is not None and (not is_real(m) or self.effect.m != m):
            object.__setattr__(self, "effect", None)  # replaced by a number that is not the rule's: declared by hand
        if not is_real(m) or not (math.isfinite(m) and m > 0):
            raise ValueError(f"claim {self.key!r}: min_effect must be an Effect (fedbook.claims.effect) or a finite "
                             f"number > 0 (None: the resolution / {RESOLUTION_SHARE:g}), got {m!r}")
        regimes = tuple(self.regimes) if isinstance(self.regimes, (tuple, list)) else self.regimes
        if not isinstance(regimes, tuple) or not all(isinstance(g, RegimeCheck) for g in regimes):
            raise ValueError(f"claim {self.key!r}: regimes must be a tuple of RegimeCheck, got {self.regimes!r}")
        object.__setattr__(self, "regimes", regimes)
        object.__setattr__(self, "min_effect", float(m))
        object.__setattr__(self, "resolution", r)
        object.__setattr__(self, "level", _check_level(self.level))
        object.__setattr__(self, "versus", _check_versus(self.versus))
        self._check_reads()

    @property
    def reads(self) -> list[Read]:
        """Every :class:`Read` of the claim (ours, the baselines, ``within``, then its regime checks'), in that order."""
        sides = [self.ours, self.baseline, self.within]
        own = [r for s in sides for r in (s.values() if isinstance(s, Mapping) else [s]) if isinstance(r, Read)]
        return own + [g.read for g in self.regimes]

    @property
    def testable(self) -> bool:
        """Whether the quantity resolves the smallest effect of interest: ``resolution <=
        RESOLUTION_SHARE * min_effect`` (else the claim is ``"untestable at this resolution"``)."""
        return self.resolution <= self.coarsest_resolution * (1 + 1e-9)

    @property
    def coarsest_resolution(self) -> float:
        """The coarsest resolution that resolves the claim's :math:`m`: ``RESOLUTION_SHARE * min_effect``."""
        return RESOLUTION_SHARE * self.min_effect

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
                if len(values) != len(ours) or set(values.index) != set(ours.index):  # Read refuses repeated units
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

        It says where :math:`m` comes from (:meth:`Effect.describe`), the resolution check when
        the quantity cannot resolve :math:`m`, and the regime checks. Against every baseline of a
        tuple, the rule names them and the Bonferroni level of the "does not hold" side (:func:`decide`).

        Examples
        --------
        >>> c = Claim("gain", "X beats all.", "Table 2", "accuracy, X − best baseline, points", "greater",
        ...           effect("points", paper=1.2), resolution=0.1, versus=("A", "B"))
        >>> print(c.rule())
        claimed greater than +0.6 (m = 0.6: 0.5 of the paper’s +1.2) against each of A, B: holds if the whole 95 %
        interval of every paired difference lies above +0.6; does not hold if, for any one, the whole 97.5 %
        interval (Bonferroni over 2) lies below +0.6; otherwise inconclusive at this scale
        """
        m = self.min_effect
        (_, hold_at), (_, not_at) = _sides(self)
        bound, other = _signed_effect(hold_at), _signed_effect(not_at)
        toward, away = ("above", "below") if self.direction in ("greater", "at least") else ("below", "above")
        source = self.effect.describe() if self.effect is not None else f"m = {_effect(m)}: declared by hand"
        if self.direction in ("at least", "at most"):
            claimed = f"claimed {self.direction} {bound} (within {_effect(m)} of the baseline; {source})"
        else:
            claimed = f"claimed {self.direction} than {bound} ({source})"
        if self.every:
            k = len(self.versus)
            text = (
                f"{claimed} against each of {', '.join(self.versus)}: holds if the whole {_percent(self.level)} "
                f"interval of every paired difference lies {toward} {bound}; does not hold if, for any one, the "
                f"whole {_percent(_bonferroni(self.level, k))} interval (Bonferroni over {k}) lies {away} {other}; "
                f"otherwise {INCONCLUSIVE}"
            )
        else:
            text = (f"{claimed}: holds if the whole {_percent(self.level)} interval of the paired difference lies "
                    f"{toward} {bound}; does not hold if it lies {away} {other}; otherwise {INCONCLUSIVE}")
        if not self.testable:
            text += (f"; {UNTESTABLE_RESOLUTION}: the resolution {_effect(self.resolution)} is above "
                     f"{RESOLUTION_SHARE:g} × m = {_effect(self.coarsest_resolution)}")
        for g in self.regimes:
            text += f"; testable only with {g.describe()} ({g.why})"
        return text


def _bonferroni(level: float, k: int) -> float:
    """The level of each of ``k`` intervals whose union errs at most as often as one at ``level``."""
    return 1 - (1 - level) / k


def _sides(claim: Claim) -> tuple[tuple[str, float], tuple[str, float]]:
    """(side, threshold) an interval must clear to hold, and to not hold: ``"above"`` is ``L >
    threshold``, ``"below"`` is ``U < threshold`` (the rule of :class:`Claim`)."""
    m = claim.min_effect
    return {
        "greater": (("above", m), ("below", m)),
        "less": (("below", -m), ("above", -m)),
        "at least": (("above", -m), ("below", -m)),
        "at most": (("below", m), ("above", m)),
    }[claim.direction]


def _shortfall(claim: Claim, interval: Interval) -> str:
    """The kind of a "does not hold" on ``interval`` (which clears the "does not hold" side)."""
    if claim.direction in ("at least", "at most"):
        return OPPOSITE
    return OPPOSITE if _clears(interval, "below" if claim.direction == "greater" else "above", 0.0) else SMALLER


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
      :math:`1 - (1 - \text{level}) / k` (the same Student's t interval, widened) lies short of
      :math:`m`. This side is a union: at a true effect of exactly :math:`m` over each of six
      tied baselines (per-seed SD 3 points, pairwise correlation 0.5, 5 seeds), the wrong "does
      not hold" comes in 12.1 % of 2,000 simulated experiments without the correction and in
      2.1 % with it (at most :math:`(1 - \text{level})/2` by Bonferroni's inequality;
      ``tests/test_claims.py`` also simulates both sides at 3, 5 and 10 seeds).
    - otherwise inconclusive at this scale.

    A claim whose quantity cannot resolve :math:`m` (:attr:`Claim.testable`) is
    ``"untestable at this resolution"`` whatever the interval. Regime checks are read by
    :class:`ClaimResult`, which holds their values.

    Raises
    ------
    ValueError
        When an interval's level is not the level the claim declared; when a claim against a
        tuple of baselines gets one interval, or a dict with other names; when a single-comparator
        claim gets a dict.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1)
    >>> [decide(c, Interval(0.0, lo, hi, 5, 0.95, "t")) for lo, hi in [(1.1, 2), (-0.4, 0.4), (0.5, 1.5)]]
    ['holds', 'does not hold', 'inconclusive at this scale']
    >>> every = Claim("all", "X beats all.", "Table 2", "accuracy, X − baseline, points", "greater", effect("points"),
    ...               resolution=0.1, versus=("A", "B"))
    >>> decide(every, {"A": Interval(2.0, 1.5, 2.5, 5, 0.95, "t"), "B": Interval(1.0, 0.2, 1.8, 5, 0.95, "t")})
    'inconclusive at this scale'
    """
    if not isinstance(claim, Claim):
        raise ValueError(f"decide needs a Claim, got {type(claim).__name__}")
    if claim.every:
        intervals = _check_intervals(claim, interval, "decide")
        for iv in intervals.values():
            _check_level_of(claim, iv)
        if not claim.testable:
            return UNTESTABLE_RESOLUTION
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
    return _decide_one(claim, interval) if claim.testable else UNTESTABLE_RESOLUTION


@dataclass(frozen=True)
class ClaimResult:
    """A claim and what it was decided on; the verdict is computed from them, never stored.

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
    regimes : tuple of RegimeReading, optional
        The values of the claim's regime checks, one per ``Claim.regimes``, in their order
        (required when the claim declares any).
    improvement : Improvement, optional
        How often ours beats the comparator (:func:`evaluate` fills it in).

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> ClaimResult(c, paired_interval([2.0, 3.0, 2.5])).verdict
    'holds'
    """

    claim: Claim
    interval: Interval
    intervals: Mapping[str, Interval] = field(default_factory=dict, hash=False)
    regimes: tuple[RegimeReading, ...] = ()
    improvement: Improvement | None = None

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
        regimes = tuple(self.regimes)
        if tuple(r.check for r in regimes if isinstance(r, RegimeReading)) != c.regimes or len(regimes) != len(c.regimes):
            raise ValueError(f"claim {c.key!r} declares the regime checks {[g.key for g in c.regimes]}: regimes must "
                             f"be one RegimeReading of each, in that order; got {regimes!r}")
        object.__setattr__(self, "regimes", regimes)
        if self.improvement is not None and not isinstance(self.improvement, Improvement):
            raise ValueError(f"claim {c.key!r}: improvement must be an Improvement or None, got {self.improvement!r}")
        _ = self.verdict  # validates the levels once

    @property
    def failed(self) -> tuple[RegimeReading, ...]:
        """The regime checks that failed, in the declaration's order."""
        return tuple(r for r in self.regimes if not r.passes)

    @property
    def verdict(self) -> str:
        """One of :data:`VERDICTS`: ``"untestable at this resolution"`` when the claim's quantity
        cannot resolve its :math:`m`, ``"untestable in this setting"`` when a regime check fails,
        else ``decide(claim, ...)``."""
        verdict = decide(self.claim, self.intervals if self.claim.every else self.interval)
        if verdict != UNTESTABLE_RESOLUTION and self.failed:
            return UNTESTABLE_SETTING
        return verdict

    @property
    def shortfall(self) -> str | None:
        """For a "does not hold", its kind (:data:`SMALLER` or :data:`OPPOSITE`); else ``None``.
        Against every baseline of a tuple, the opposite direction when any baseline that fails
        the claim shows it (at the Bonferroni level of the rule)."""
        if self.verdict != DOES_NOT_HOLD:
            return None
        c = self.claim
        if not c.every:
            return _shortfall(c, self.interval)
        level = _bonferroni(c.level, len(self.intervals))
        failing = [_at_level(iv, level) for iv in self.intervals.values() if _decide_one(c, iv, level) == DOES_NOT_HOLD]
        return OPPOSITE if any(_shortfall(c, iv) == OPPOSITE for iv in failing) else SMALLER

    def verdict_text(self) -> str:
        """The verdict as the table shows it: with its kind (``"does not hold: smaller than
        claimed"``), or what makes it untestable (both numbers, or the failed check and its value).

        Examples
        --------
        >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater",
        ...           effect("points", paper=1.44), resolution=2.04)
        >>> evaluate(c, [2.0, 3.0, 2.5]).verdict_text()
        'untestable at this resolution: the resolution 2.04 is above 0.25 × m = 0.18'
        """
        v, c = self.verdict, self.claim
        if v == DOES_NOT_HOLD:
            return f"{v}: {self.shortfall}"
        if v == UNTESTABLE_RESOLUTION:
            return (f"{v}: the resolution {_effect(c.resolution)} is above {RESOLUTION_SHARE:g} × m = "
                    f"{_effect(c.coarsest_resolution)}")
        if v == UNTESTABLE_SETTING:
            return f"{v}: " + "; ".join(r.text() for r in self.failed)
        return v

    @property
    def outcome(self) -> str:
        """The verdict, with a "does not hold" replaced by its kind (:data:`SMALLER` or
        :data:`OPPOSITE`): one of six outcomes a chapter can word a sentence for."""
        return self.shortfall or self.verdict

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
    regimes: Sequence[RegimeReading] = (),
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
        :func:`~fedbook.intervals.paired_interval`. Against a tuple, a dict with the same names, or one array for
        every baseline. When not given, the floor is that of ``claim.resolution``.
    over : {"seeds", "test samples", "clients"}, default "seeds"
        ``"seeds"``: :func:`~fedbook.intervals.paired_interval` (Student's t over seeds). Otherwise the values are
        the units of one run and the interval is :func:`~fedbook.intervals.paired_bootstrap` over them (one
        comparator only, no ``within``).
    seed : int or numpy.random.Generator, optional
        The bootstrap's randomness; required unless ``over="seeds"`` (where it is not used).
    n_boot : int, default 2000
        The bootstrap's resamples.
    regimes : sequence of RegimeReading, default ()
        The values of the claim's regime checks (:meth:`RegimeCheck.check` on the same results),
        one per ``Claim.regimes``.

    Returns
    -------
    ClaimResult
        The intervals, the regime readings and the probability of improvement (:class:`Improvement`).

    Raises
    ------
    ValueError
        As :func:`~fedbook.intervals.paired_interval` and :func:`~fedbook.intervals.paired_bootstrap` do; on a dict of baselines for a
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
        improvement = Improvement.of([_paired_differences(ours, baseline[name]) for name in claim.versus],
                                     claim.direction, claim.level)
        return ClaimResult(claim, _binding(claim, intervals)[1], intervals, tuple(regimes), improvement)
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
    improvement = Improvement.of([_paired_differences(ours, baseline)], claim.direction, claim.level, interval.unit)
    return ClaimResult(claim, interval, regimes=tuple(regimes), improvement=improvement)


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
    (the floored one of :func:`~fedbook.intervals.paired_interval`, recovered
    from its half-width: :math:`\sigma = (U - \bar d) \sqrt{n} / t_{(1+\text{level})/2, n-1}`),
    the smallest :math:`n \le` :data:`MAX_SEEDS` at which

    .. math:: \bar d \pm t_{(1+\lambda)/2,\, n-1}\, \sigma / \sqrt{n}

    would clear a threshold of the rule (:class:`Claim`): the "holds" one at
    :math:`\lambda = \text{level}`, or the "does not hold" one at :math:`\lambda` = the level
    of that side (the claim's; against a tuple of :math:`k` baselines, the Bonferroni
    :math:`1 - (1 - \text{level})/k` of :func:`decide`). A threshold :math:`a` on the side
    "above" needs :math:`\bar d - a > t\sigma/\sqrt n`, so it can be reached only when
    :math:`\bar d > a` (and "below" only when :math:`\bar d < a`). Both sides of the rule sit on
    one threshold (:math:`+m` for "greater", :math:`-m` for "less" and "at least", :math:`+m` for
    "at most"), so some n decides every claim unless :math:`\bar d` equals it exactly. Where the floor bound at
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
        ``"untestable"`` (the claim is untestable at this resolution, or, given its result, in
        this setting: seeds do not help), :data:`NOT_AT_THIS_MEAN` (``"not at this mean"``: the
        mean sits on the threshold), ``"not from one seed"`` (no spread to extrapolate from),
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
    >>> seeds_to_decide(c, iv)  # the smallest n with t_{0.975, n-1} * 2 / sqrt(n) < 1 - 0.4 (m = 4 x 0.1)
    46
    >>> seeds_to_decide(Claim("big", "X beats Y by 2.", "Table 2", "accuracy, X − Y, points", "greater",
    ...                       effect("points", paper=4.0), resolution=0.1), iv)  # the mean is not 2: some n shows it
    18
    >>> seeds_to_decide(Claim("fine", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater",
    ...                       effect("points", paper=0.2), resolution=0.1), iv)
    'untestable'
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
    if isinstance(interval_or_result, ClaimResult):
        verdict = interval_or_result.verdict
    else:
        verdict = decide(claim, intervals[None])
    n = next(iter(intervals.values())).n
    if verdict in UNTESTABLE:
        return "untestable"
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
    upward: where ours beats each of six tied baselines by exactly the smallest effect of interest
    (per-seed SD 3 points, pairwise correlation 0.5, 5 seeds, 2,000 simulated experiments), the
    per-seed maximum gives the wrong "does not hold" in 42 % of experiments, the baseline chosen
    here on 2 independent pilot seeds in 2.3 % (``tests/test_claims.py``).

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
    if result.verdict in UNTESTABLE:
        return "untestable"
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
    ``"vs A +1.23 [+0.40, +2.06]; vs B ..., 5 seeds"``), ``how often`` (the probability of
    improvement, :class:`Improvement`: ``"80 % [38, 96] of 5 seeds"``), ``rule``
    (:meth:`Claim.rule`), ``verdict`` (:meth:`ClaimResult.verdict_text`: the verdict, with the
    kind of a "does not hold" or what makes a row untestable), ``seeds to decide``
    (``"decided"``, ``"n = 12"`` from :func:`seeds_to_decide`, or its reason, e.g.
    ``"untestable"``) and ``substitution``.

    Raises
    ------
    ValueError
        On an element that is not a :class:`ClaimResult`, or two rows with the same key.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1)
    >>> table = claims_table([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])])
    >>> table.loc[0, "claim"], table.loc[0, "ours"], table.loc[0, "verdict"], table.loc[0, "seeds to decide"]
    ('“X beats Y.” (Table 2)', '+2.00 [+1.34, +2.66], 3 seeds', 'holds', 'decided')
    >>> every = Claim("all", "X beats all.", "Table 2", "accuracy, X − baseline, points", "greater",
    ...               effect("points", paper=1.0), resolution=0.1, versus=("A", "B"))
    >>> row = claims_table([evaluate(every, [2.1, 1.8, 2.4], {"A": [0.0, 0.1, 0.2], "B": [1.0, 1.5, 1.2]})]).loc[0]
    >>> row["quantity"], row["ours"], row["how often"], row["seeds to decide"]
    ('accuracy, X − baseline, points (vs A, B)', 'vs A +2.00 [+1.34, +2.66]; vs B +0.87 [−0.36, +2.09], 3 seeds', '100 % [44, 100] of 3 seeds', 'n = 10')
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
            "how often": "" if r.improvement is None else str(r.improvement),
            "rule": r.claim.rule(),
            "verdict": r.verdict_text(),
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
    >>> tally([evaluate(c, [2.0, 3.0, 2.5]), evaluate(c, [1.0])])  # doctest: +NORMALIZE_WHITESPACE
    {'holds': 1, 'does not hold': 0, 'inconclusive at this scale': 1, 'untestable at this resolution': 0,
     'untestable in this setting': 0}
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
        "decided": sum(r.verdict in (HOLDS, DOES_NOT_HOLD) for r in head),
        "half_width": float(np.median(widths)) if widths else float("nan"),
    }


def says(result: ClaimResult, digits: int = 1) -> str:
    """A decided row in a sentence: ``"<key> holds (<interval>)"``, ``"<key> does not hold
    (...)"``, ``"<key> is inconclusive at this scale (...)"`` or ``"<key> is untestable in this
    setting (...)"``, the interval with ``digits``
    decimals (:meth:`fedbook.intervals.Interval.format`); against every baseline of a tuple, the binding one's,
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
    return f"{result.claim.key} {'' if v in (HOLDS, DOES_NOT_HOLD) else 'is '}{v} ({vs}{result.interval.format(digits)})"



def claims_records(results: Sequence[ClaimResult], digits: int = 2) -> list[dict]:
    """One record per row of the claims table, for a page that gathers every chapter's claims (the
    book's findings page): plain JSON values, in the table's order.

    ``key``, ``kind`` (claim or control), ``headline``, ``quote`` (whole), ``source`` and
    ``quantity`` come from the declaration, with ``m`` (the smallest effect of interest),
    ``m_rule`` (where it comes from, :meth:`Effect.describe`) and ``resolution``; ``ours``,
    ``how_often`` and ``seeds_to_decide`` are the table's cells (:func:`claims_table`);
    ``verdict`` is one of :data:`VERDICTS`, ``shortfall`` the kind of a "does not hold"
    (:data:`SHORTFALLS`, else ``None``), ``verdict_text`` the table's cell, ``regimes`` each
    regime check's key, value, threshold and whether it passed, ``improvement`` the share of
    units in which ours beats the comparator (``None`` when not computed); ``mean``, ``low``,
    ``high``, ``n`` and ``unit`` are the
    interval the verdict reads (against every baseline of a tuple, the binding one); ``anchor`` is
    the id of the row in the table :func:`show` renders (:func:`claim_anchor`: from the key alone),
    so a page can link to the row; ``about`` what the claim is about (:data:`ABOUTS`);
    ``direction``, ``level`` and ``versus`` (a name, a list of names, or ``None``) are the
    declaration's, ``method`` the interval's (``"t"`` over seeds, ``"bootstrap"`` over units) and
    ``intervals`` each named baseline's interval (``mean``, ``low``, ``high``, ``n``, ``level``,
    ``method``; empty when the claim names none): what a confirmatory plan needs to size each
    side of the rule (:func:`fedbook.confirm.plan`).

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1)
    >>> (r,) = claims_records([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])])
    >>> r["verdict"], r["ours"], r["n"], r["anchor"] in show([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])]).to_html()
    ('holds', '+2.00 [+1.34, +2.66], 3 seeds', 3, True)
    """
    results = list(results)
    table = claims_table(results, digits)
    anchors = _anchors([r.claim.key for r in results])

    def number(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None  # JSON has no infinity (one seed: an unbounded interval)

    return [
        {
            "key": r.claim.key, "kind": r.claim.kind, "headline": bool(r.claim.headline), "quote": r.claim.quote,
            "source": r.claim.source, "quantity": table.loc[i, "quantity"], "ours": table.loc[i, "ours"],
            "mean": number(r.interval.mean), "low": number(r.interval.low), "high": number(r.interval.high),
            "n": int(r.interval.n), "unit": r.interval.unit, "verdict": r.verdict, "shortfall": r.shortfall,
            "verdict_text": table.loc[i, "verdict"], "m": r.claim.min_effect,
            "m_rule": r.claim.effect.describe() if r.claim.effect is not None else "declared by hand",
            "resolution": r.claim.resolution, "how_often": table.loc[i, "how often"],
            "improvement": None if r.improvement is None else r.improvement.share,
            "regimes": [{"key": g.check.key, "value": g.value, "op": g.check.op, "threshold": g.check.threshold,
                         "passes": g.passes} for g in r.regimes],
            "seeds_to_decide": table.loc[i, "seeds to decide"], "anchor": anchors[i], "about": r.claim.about,
            "direction": r.claim.direction, "level": r.claim.level, "method": r.interval.method,
            "versus": list(r.claim.versus) if r.claim.every else r.claim.versus,
            "intervals": {name: {"mean": number(iv.mean), "low": number(iv.low), "high": number(iv.high),
                                 "n": int(iv.n), "level": iv.level, "method": iv.method}
                          for name, iv in r.intervals.items()},
        }
        for i, r in enumerate(results)
    ]


VERDICT_COLOURS = {HOLDS: "#d9f2d9", DOES_NOT_HOLD: "#f8d7d7", INCONCLUSIVE: "#eeeeee",
                   UNTESTABLE_RESOLUTION: "#fbedc8", UNTESTABLE_SETTING: "#fbedc8"}
"""The shade of each verdict in the book's tables (green, red, grey, and sand for the untestable)."""


def verdict_colour(text: str) -> str:
    """The shade of a verdict cell (:data:`VERDICT_COLOURS`; a cell may add the verdict's kind after a colon)."""
    return VERDICT_COLOURS.get(str(text).split(":", 1)[0], "transparent")


GLOSSARY = "../glossary.html"
"""The glossary page, as a chapter's page (``chapters/<name>.html``) links to it; its terms'
anchors are Sphinx's: ``term-<the term>``, in ASCII, each run of characters other than letters,
digits, ``.`` and ``_`` a hyphen."""

FINDINGS = "findings.html"
"""The findings page, as a chapter's page links to it."""

FOLD_BASELINES = 4
"""Against more baselines than this, a row's "ours" shows the binding baseline's interval and
folds every baseline's under it (a row against 18 baselines would fill a screen)."""


def glossary_link(term: str, text: str | None = None, glossary: str = GLOSSARY) -> str:
    """An HTML link to ``term`` of the book's glossary (``book/glossary.md``), showing ``text``.

    Examples
    --------
    >>> glossary_link("seeds to decide")
    '<a class="claims-term" href="../glossary.html#term-seeds-to-decide">seeds to decide</a>'
    >>> glossary_link("F@25", "F@25", glossary="glossary.html")
    '<a class="claims-term" href="glossary.html#term-F-25">F@25</a>'
    """
    from html import escape

    anchor = unicodedata.normalize("NFKD", f"term-{term}").encode("ascii", "ignore").decode("ascii")
    anchor = re.sub(r"^[-0-9._]+|-+$", "", re.sub(r"[^a-zA-Z0-9._]+", "-", " ".join(anchor.split())))  # as Sphinx
    return f'<a class="claims-term" href="{glossary}#{anchor}">{escape(text if text is not None else term)}</a>'


def claim_anchor(key: str) -> str:
    """The id of a claim's row in its chapter's claims table, from the claim's key alone (so a
    link to the row survives any change of its numbers): ``claim-<key>``, every run of
    characters other than letters, digits, ``_``, ``.`` and ``-`` made one hyphen.

    Examples
    --------
    >>> claim_anchor("lead-F@25-0.3"), claim_anchor("se-mean-label subsets")
    ('claim-lead-F-25-0.3', 'claim-se-mean-label-subsets')
    """
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"a claim's key must be a non-empty string, got {key!r}")
    return "claim-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", key).strip("-")


def table_anchor(keys: Sequence[str]) -> str:
    """The id of a chapter's claims table, from its rows' keys alone: ``claims-<8 hex digits>``.

    Examples
    --------
    >>> table_anchor(["gain", "loss"])
    'claims-4aa84f4d'
    """
    return "claims-" + hashlib.sha1("|".join(keys).encode()).hexdigest()[:8]


def _anchors(keys: Sequence[str]) -> list[str]:
    anchors = [claim_anchor(k) for k in keys]
    clash = sorted({a for a in anchors if anchors.count(a) > 1})
    if clash:
        raise ValueError(f"two claim keys give the same row anchor {clash}: rename one "
                         f"(keys: {[k for k, a in zip(keys, anchors) if a in clash]})")
    return anchors


def _labels(texts: Sequence[str], prefix: str) -> dict[str, str]:
    """A short label (``R1``, ``R2``, ...) for each distinct non-empty text, in order of first use."""
    distinct = list(dict.fromkeys(t for t in texts if t))
    return {t: f"{prefix}{i + 1}" for i, t in enumerate(distinct)}


def _factored(text: str, labels: Mapping[str, str]) -> tuple[str | None, str]:
    """A text as the longest other labelled text it extends (``"<base>; <rest>"``) and the rest."""
    bases = [b for b in labels if b != text and text.startswith(b + "; ")]
    if not bases:
        return None, text
    base = max(bases, key=len)
    return base, text[len(base) + 2:]


class ClaimsTable(Html):
    """The claims table of a chapter (:func:`show`): its markup, its text form, the frame of
    :func:`claims_table` it renders (``frame``) and the table's id (``id``, from its rows' keys)."""

    def __init__(self, html: str, text: str, frame: pd.DataFrame, id: str) -> None:
        super().__init__(html, text)
        self.frame, self.id = frame, id

    def to_html(self) -> str:
        """The table's markup (as a notebook shows it)."""
        return self.html


def show(results: Sequence[ClaimResult], digits: int = 2, *, evidence: Mapping[str, tuple[str, str]] | None = None,
         findings: str = FINDINGS, glossary: str = GLOSSARY) -> ClaimsTable:
    """The claims table for a chapter's page: one row per claim, in the given order, built to be read.

    Each row carries the cells of :func:`claims_table` but states the **rule** and the
    **substitution** once for the rows that share them: the row shows a short label (``R1``,
    ``S2``, linked) and the notes under the table state each once (a substitution that extends
    another is written as that one's label and what it adds). A row against more than
    :data:`FOLD_BASELINES` baselines shows the binding baseline's interval (the one its verdict
    reads) and folds every baseline's under it. A row's id comes from its claim's key
    (:func:`claim_anchor`), so links to it survive any change of its numbers; a control's row
    has the class ``claims-control`` (shaded apart from the papers' claims), a headline claim's
    ``claims-headline``; each verdict is shaded (:data:`VERDICT_COLOURS`). The column heads link
    to the book's glossary, a line above the table to the findings page, and, where ``evidence``
    names them, each row to the table or figure it reads.

    Parameters
    ----------
    results : sequence of ClaimResult
        The decided rows (:func:`evaluate`), in the table's order.
    digits : int, default 2
        Decimals of the intervals.
    evidence : mapping of str to (str, str), optional
        By a frame's name (the frame a row's ``ours`` reads), or ``"<frame>.<column>"`` where one
        frame feeds several figures, the id of the table or figure on the page that shows it and
        its name in words (``{"by_seed": ("mpt-table", "the F1 table")}``).
    findings, glossary : str
        Where the findings page and the glossary are, from the chapter's page.

    Returns
    -------
    ClaimsTable
        Shown as HTML in a notebook; ``.to_html()`` gives the markup (the same for the same
        rows), its text form lists each row's key, claim, verdict and interval.

    Raises
    ------
    ValueError
        On an element that is not a :class:`ClaimResult` (a rendered table has lost the keys
        and kinds the rows need), or two keys with one anchor.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y by a margin worth quoting in full, longer than fifty characters.",
    ...           "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1, substitution="an MLP")
    >>> html = show([evaluate(c, [2.1, 1.8, 2.4])]).to_html()
    >>> "longer than fifty characters." in html, 'id="claim-gain"' in html, ">R1</a>" in html, ">S1</a>" in html
    (True, True, True, True)
    """
    from html import escape

    if isinstance(results, pd.DataFrame):
        raise ValueError("show renders the ClaimResults themselves (evaluate, claims_report): a rendered table "
                         "(claims_table) has lost the keys, kinds and baselines its rows need")
    results = list(results)
    frame = claims_table(results, digits)
    anchors = _anchors([r.claim.key for r in results])
    evidence = dict(evidence or {})
    rules = _labels([r.claim.rule() for r in results], "R")
    subs = _labels([r.claim.substitution for r in results], "S")
    table_id = table_anchor([r.claim.key for r in results])

    def note_link(text: str, labels: Mapping[str, str], kind: str) -> str:
        if not text:
            return "none"
        label = labels[text]
        return f'<a href="#{table_id}-{kind}-{label[1:]}">{label}</a>'

    def ours_cell(r: ClaimResult, i: int) -> str:
        c = r.claim
        if not c.every or len(c.versus) <= FOLD_BASELINES:
            return escape(frame.loc[i, "ours"])
        n, unit = r.interval.n, r.interval.unit
        seeds = f"{n} {unit[:-1] if n == 1 and unit.endswith('s') else unit}"
        binding = f"vs {r.binding} {r.interval.format(digits).rsplit(', ', 1)[0]}, {seeds}"
        every = "; ".join(f"vs {name} {iv.format(digits).rsplit(', ', 1)[0]}" for name, iv in r.intervals.items())
        return (f"{escape(binding)}<br><small>the nearest to failing the claim of its {len(c.versus)} baselines"
                f"</small><details><summary>all {len(c.versus)}</summary>{escape(every)}</details>")

    def quantity_cell(r: ClaimResult, i: int) -> str:
        c = r.claim
        if c.every and len(c.versus) > FOLD_BASELINES and frame.loc[i, "quantity"] != c.quantity:
            return escape(f"{c.quantity} (vs each of {len(c.versus)} baselines)")
        return escape(frame.loc[i, "quantity"])

    heads = [("claim", None), ("quantity", None), ("ours [95 % interval]", "interval"), ("verdict", "verdict"),
             ("seeds to decide", "seeds to decide")]
    head = "".join(f"<th>{glossary_link(term, text, glossary) if term else escape(text)}</th>" for text, term in heads)
    head = head.replace("</a></th><th>" + glossary_link("verdict", "verdict", glossary),
                        f"</a>, {glossary_link('how often', 'how often', glossary)}</th><th>"
                        + glossary_link("verdict", "verdict", glossary), 1)
    head += (f"<th>{glossary_link('smallest effect of interest m', 'm', glossary)}, "
             f"{glossary_link('rule', 'rule', glossary)}, {glossary_link('substitution', 'substitution', glossary)}</th>")
    body, lines = [], []
    for i, (r, anchor) in enumerate(zip(results, anchors)):
        c = r.claim
        classes = ["claims-row", f"claims-{c.kind}"] + (["claims-headline"] if c.headline else [])
        claim = escape(frame.loc[i, "claim"]) + f'<br><small><code>{escape(c.key)}</code>'
        where = None if c.ours is None else evidence.get(f"{c.ours.frame}.{c.ours.column}", evidence.get(c.ours.frame))
        if where is not None:
            target, words = where
            claim += f' · reads <a href="#{escape(target)}">{escape(words)}</a>'
        claim += "</small>"
        m = f"m = {_effect(c.min_effect)}"
        body.append(
            f'<tr id="{anchor}" class="{" ".join(classes)}" data-verdict="{escape(r.verdict)}">'
            f'<td class="claims-text">{claim}</td><td>{quantity_cell(r, i)}</td><td>{ours_cell(r, i)}'
            + (f"<br><small>ahead in {escape(frame.loc[i, 'how often'])}</small>" if frame.loc[i, "how often"] else "")
            + "</td>"
            f'<td class="claims-verdict" style="background-color: {verdict_colour(r.verdict)}">'
            f"{escape(frame.loc[i, 'verdict'])}</td><td>{escape(frame.loc[i, 'seeds to decide'])}</td>"
            f'<td class="claims-note">{escape(m)}<br>{note_link(c.rule(), rules, "rule")} · '
            f'{note_link(c.substitution, subs, "sub")}</td></tr>')
        lines.append(f"{c.key}: {frame.loc[i, 'claim']} | {frame.loc[i, 'verdict']} | {frame.loc[i, 'ours']}")

    def notes(labels: Mapping[str, str], kind: str) -> str:
        items = []
        for text, label in labels.items():
            base, rest = _factored(text, labels) if kind == "sub" else (None, text)
            said = escape(rest) if base is None else f"{note_link(base, labels, kind)}; {escape(rest)}"
            items.append(f'<dt id="{table_id}-{kind}-{label[1:]}">{label}</dt><dd>{said}</dd>')
        return "".join(items)

    controls = sum(r.claim.kind == "control" for r in results)
    legend = (f'<p>Each row links its rule and substitution to the notes under the table, where each is stated once. '
              f'{"Rows shaded blue are " + glossary_link("control", "controls", glossary) + ": the book’s own questions, not the paper’s claims, and not counted. " if controls else ""}'
              f'Every paper’s verdicts: <a href="{findings}">the findings page</a>.</p>')
    html = (
        f'<div class="claims">{legend}<table id="{table_id}" class="claims-table">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f'<div class="claims-notes"><p><strong>Rules</strong> (how each row is decided from its 95 % interval and its '
        f'{glossary_link("smallest effect of interest m", "smallest effect of interest m", glossary)})</p>'
        f'<dl class="claims-rules">{notes(rules, "rule")}</dl>'
        + (f'<p><strong>Substitutions</strong> (what our scale changes that affects the rows)</p>'
           f'<dl class="claims-subs">{notes(subs, "sub")}</dl>' if subs else "")
        + "</div></div>"
    )
    return ClaimsTable(html, "\n".join(lines), frame, table_id)


def _seeds_words(text: str) -> str:
    """A record's "seeds to decide" in words for a sentence: ``"n = 33"`` -> ``"33 seeds"``."""
    return text[4:] + " seeds" if text.startswith("n = ") else text


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _join(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def summary_html(records: Sequence[Mapping[str, Any]], paper: str | None = None, href: str = "") -> Html:
    """What a chapter found, in two to four sentences, from its claims records
    (:func:`claims_records`): the paper's **headline** claims about its **method** (those of its
    abstract and conclusion, ``Claim.headline``) named by verdict, what would decide those
    still open (the seeds the observed spread needs, :func:`seeds_to_decide`; the regime check
    that fails; a finer quantity), then the headline claims about the **problem** the paper
    addresses (:data:`ABOUTS`: a baseline's failure is not the method working), then the other
    claims counted (controls apart). Each claim is named by its key, linked to its row.

    Parameters
    ----------
    records : sequence of dict
        One chapter's claims records, in its table's order.
    paper : str, optional
        The paper's name (the findings page); ``None``: "the paper" (its own chapter).
    href : str, default ""
        Put before each row's anchor: ``""`` on the chapter's own page, ``"<chapter>.html"`` elsewhere.

    Returns
    -------
    Html
        The sentences as a paragraph (links to the rows), and as plain text.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Abstract", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1, headline=True)
    >>> bad = Claim("lead", "X leads.", "Abstract", "accuracy, X − Z, points", "greater", effect("points"),
    ...             resolution=0.1, headline=True)
    >>> fail = Claim("fails", "Y fails.", "Abstract", "accuracy, Y − X, points", "less", effect("points"),
    ...              resolution=0.1, headline=True, about="problem")
    >>> rows = claims_records([evaluate(c, [2.1, 1.8, 2.4]), evaluate(bad, [-2.0, -2.5, -2.1]),
    ...                        evaluate(fail, [-2.1, -1.8, -2.4])])
    >>> print(repr(summary_html(rows, "X")))
    X’s 2 headline claims about its method (those of its abstract or conclusion): gain holds; lead does not hold (the opposite direction). About the problem the paper addresses (not its method), its headline claim: fails holds. No other claim is tested.
    """
    from html import escape

    rows = [r for r in records if r["kind"] == "claim"]
    head = [r for r in rows if r["headline"] and r.get("about", "method") == "method"]
    problem = [r for r in rows if r["headline"] and r.get("about", "method") == "problem"]
    others = [r for r in rows if not r["headline"]]
    controls = sum(r["kind"] == "control" for r in records)
    name = paper if paper else "the paper"
    Name = name[0].upper() + name[1:]

    def link(r: Mapping[str, Any]) -> tuple[str, str]:
        anchor = r.get("anchor") or claim_anchor(r["key"])
        return f'<a href="{escape(href)}#{escape(anchor)}"><code>{escape(r["key"])}</code></a>', r["key"]

    def named(group: Sequence[Mapping[str, Any]], note=None) -> tuple[str, str]:
        parts = [link(r) for r in group]
        notes = [note(r) if note else "" for r in group]
        return (_join([h + (f" ({escape(n)})" if n else "") for (h, _), n in zip(parts, notes)]),
                _join([t + (f" ({n})" if n else "") for (_, t), n in zip(parts, notes)]))

    def verdicts(group: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
        html, text = [], []
        said = [(HOLDS, None, "holds", "hold"),
                (DOES_NOT_HOLD, SMALLER, f"does not hold ({SMALLER})", f"do not hold ({SMALLER})"),
                (DOES_NOT_HOLD, OPPOSITE, f"does not hold ({OPPOSITE})", f"do not hold ({OPPOSITE})"),
                (INCONCLUSIVE, None, "is inconclusive at this scale", "are inconclusive at this scale"),
                (UNTESTABLE_RESOLUTION, None, "is untestable at this resolution", "are untestable at this resolution"),
                (UNTESTABLE_SETTING, None, "is untestable in this setting", "are untestable in this setting")]
        for verdict, kind, one, many in said:
            these = [r for r in group if r["verdict"] == verdict and (kind is None or r.get("shortfall") == kind)]
            if these:
                h, t = named(these)
                html.append(f"{h} {escape(one if len(these) == 1 else many)}")
                text.append(f"{t} {one if len(these) == 1 else many}")
        return html, text

    html, text = [], []
    if head:
        h, t = verdicts(head)
        decided = sum(r["verdict"] in (HOLDS, DOES_NOT_HOLD) for r in head)
        lead = (f"{escape(Name)}’s {_count(len(head), 'headline claim', 'headline claims')} about its method "
                "(those of its abstract or conclusion): " + ("none is decided at this scale; " if not decided else ""))
        html.append(lead + "; ".join(h) + ".")
        text.append(lead + "; ".join(t) + ".")
        decide = []
        seeds = [r for r in head if r["verdict"] == INCONCLUSIVE]
        if seeds:
            decide.append(("more seeds would decide ", named(seeds, lambda r: _seeds_words(r["seeds_to_decide"]))))
        fine = [r for r in head if r["verdict"] == UNTESTABLE_RESOLUTION]
        if fine:
            decide.append(("a finer quantity, one that resolves the row’s m (for an accuracy or an F1: more test "
                           "images), would test ", named(fine)))
        setting = [r for r in head if r["verdict"] == UNTESTABLE_SETTING]
        checks: dict[str, list] = {}
        for r in setting:
            failed = [g["key"] for g in r.get("regimes", ()) if not g["passes"]]
            checks.setdefault("”, “".join(failed), []).append(r)
        for check, these in checks.items():
            where = f"a setting that passes the check “{check}”" if check else "another setting"
            decide.append((f"{where} would test ", named(these)))
        if decide:
            html.append("What would decide the open ones: " + "; ".join(w + h for w, (h, _) in decide) + ".")
            text.append("What would decide the open ones: " + "; ".join(w + t for w, (_, t) in decide) + ".")
    else:
        html.append(f"{escape(Name)} has no headline claim tested here.")
        text.append(f"{Name} has no headline claim tested here.")
    if problem:
        h, t = verdicts(problem)
        lead = (f"About the problem the paper addresses (not its method), "
                f"{'its headline claim' if len(problem) == 1 else 'of its headline claims'}: ")
        html.append(lead + "; ".join(h) + ".")
        text.append(lead + "; ".join(t) + ".")
    if others:
        verbs = {HOLDS: ("holds", "hold"), DOES_NOT_HOLD: ("does not hold", "do not hold"),
                 INCONCLUSIVE: (f"is {INCONCLUSIVE}", f"are {INCONCLUSIVE}"),
                 UNTESTABLE_RESOLUTION: (f"is {UNTESTABLE_RESOLUTION}", f"are {UNTESTABLE_RESOLUTION}"),
                 UNTESTABLE_SETTING: (f"is {UNTESTABLE_SETTING}", f"are {UNTESTABLE_SETTING}")}
        counts = [(sum(r["verdict"] == v for r in others), v) for v in VERDICTS]
        problem_holds = sum(r["verdict"] == HOLDS and r.get("about", "method") == "problem" for r in others)
        said = _join([f"{k} {verbs[v][k != 1]}" + (f" ({problem_holds} of them about the problem, not the method)"
                                                   if v == HOLDS and problem_holds else "") for k, v in counts if k])
        tail = (f"; the book’s {_count(controls, 'control', 'controls')} {'is' if controls == 1 else 'are'} not counted"
                if controls else "")
        sentence = f"Of its {_count(len(others), 'other claim', 'other claims')}, {said}{tail}."
        html.append(escape(sentence))
        text.append(sentence)
    else:
        html.append("No other claim is tested.")
        text.append("No other claim is tested.")
    return Html(f'<p class="claims-summary">{" ".join(html)}</p>', " ".join(text))


def headline_html(records: Sequence[Mapping[str, Any]], href: str = "") -> Html:
    """The headline claims of a chapter as a short table: each claim's key (linked to its row),
    its quotation's source, the quantity, ours with its 95 % interval, the verdict (shaded) and the
    seeds to decide; the claims about the problem marked so.

    Examples
    --------
    >>> c = Claim("gain", "X beats Y.", "Abstract", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1, headline=True)
    >>> h = headline_html(claims_records([evaluate(c, [2.1, 1.8, 2.4])]))
    >>> 'href="#claim-gain"' in h._repr_html_(), repr(h)
    (True, 'gain | holds | +2.10 [+1.35, +2.85], 3 seeds')
    """
    from html import escape

    head = [r for r in records if r["kind"] == "claim" and r["headline"]]
    body, lines = [], []
    for r in head:
        anchor = r.get("anchor") or claim_anchor(r["key"])
        about = " <small>(the problem)</small>" if r.get("about", "method") == "problem" else ""
        body.append(
            f'<tr data-verdict="{escape(r["verdict"])}"><td><a href="{escape(href)}#{escape(anchor)}">'
            f'<code>{escape(r["key"])}</code></a>{about}<br><small>{escape(r["source"])}</small></td>'
            f"<td>{escape(r['quantity'])}</td><td>{escape(r['ours'])}</td>"
            f'<td class="claims-verdict" style="background-color: {verdict_colour(r["verdict"])}">'
            f"{escape(r['verdict_text'])}</td><td>{escape(r['seeds_to_decide'])}</td></tr>")
        lines.append(f"{r['key']} | {r['verdict_text']} | {r['ours']}")
    if not head:
        return Html('<p class="claims-headline-none">No headline claim is tested here.</p>', "no headline claim")
    thead = "".join(f"<th>{h}</th>" for h in ("headline claim", "quantity", "ours [95 % interval]", "verdict",
                                              "seeds to decide"))
    return Html(f'<table class="claims-headlines"><thead><tr>{thead}</tr></thead><tbody>{"".join(body)}</tbody></table>',
                "\n".join(lines))


def regime_table(results: Mapping[str, ClaimResult]) -> pd.DataFrame:
    """Every regime check of ``results`` once (by its key, quantity, threshold and the value read, so two
    readings that differ are two rows, never one showing the first's value), with its value, whether it
    passes and the rows it guards, each marked "(also untestable at this resolution)" where the
    row's resolution already decides it.

    >>> chk = RegimeCheck("support", "median count", Read("r", "n"), "at least", 10.0, "too few")
    >>> c = lambda k, r: Claim(k, "q", "s", "x, points", "greater", effect("points", paper=2.0), resolution=r, regimes=(chk,))
    >>> reading = chk.check({"r": pd.DataFrame({"n": [1.0, 2.0]})})
    >>> t = regime_table({k: evaluate(c(k, r), [3.0, 4.0], regimes=(reading,)) for k, r in (("a", 0.1), ("b", 3.0))})
    >>> t[["check", "value", "threshold", "passes"]].values.tolist()
    [['support', 1.5, 'at least 10', 'no']]
    >>> t["rows"].item()
    'a; b (also untestable at this resolution)'
    """
    rows: dict[tuple, dict] = {}
    for r in results.values():
        for reading in r.regimes:
            c = reading.check
            row = rows.setdefault((c.key, c.quantity, c.threshold, str(float(reading.value)), reading.passes), {
                "check": c.key, "quantity": c.quantity, "value": reading.value,
                "threshold": f"{c.op} {c.threshold:.4g}", "passes": "yes" if reading.passes else "no", "why": c.why,
                "rows": []})
            row["rows"].append(r.claim.key + (" (also untestable at this resolution)"
                                              if r.verdict == UNTESTABLE_RESOLUTION and not reading.passes else ""))
    table = pd.DataFrame(list(rows.values()), columns=["check", "quantity", "value", "threshold", "passes", "why", "rows"])
    table["rows"] = table["rows"].map("; ".join)
    return table


def regime_reading(results: Mapping[str, ClaimResult], testable_if: Mapping[str, str] | None = None) -> str:
    """The failing regime checks of ``results`` in words: each failing reading, grouped by the check's
    key **and** the value read (two readings of one check that differ are two sentences, never one
    showing the first's value), with its value and threshold, the rows it makes untestable in this
    setting and what would make them testable (``testable_if``, by the check's key: the chapter's
    own sentence, said at the check's first failing reading, "as above" at the next; "another
    setting" where it has none); or that every check passes.

    Parameters
    ----------
    results : mapping of str to ClaimResult
        The claims report, by row key.
    testable_if : mapping of str to str, optional
        By a check's key, what would make the rows it fails testable.

    Returns
    -------
    str
        The sentences, one per failing (check, value).

    Examples
    --------
    >>> chk = RegimeCheck("fit", "fit, %", Read("m", "fit"), "at least", 95.0, "why")
    >>> c = lambda k: Claim(k, "q", "s", "x, points", "greater", effect("points"), resolution=0.1, regimes=(chk,))
    >>> low, lower = (chk.check({"m": pd.DataFrame({"fit": [v]})}) for v in (90.0, 80.0))
    >>> text = regime_reading({"a": evaluate(c("a"), [3.0, 4.0], regimes=(low,)),
    ...                        "b": evaluate(c("b"), [3.0, 4.0], regimes=(lower,))}, {"fit": "a larger server"})
    >>> print(text.replace(". ", ".\\n"))
    The check “fit” fails (fit, % = 90, needs at least 95) and makes “a” untestable in this setting; what would make it testable: a larger server.
    The check “fit” fails (fit, % = 80, needs at least 95) and makes “b” untestable in this setting; what would make it testable: as above.
    >>> regime_reading({})
    'Every regime check passes, so every row can test its sentence in this setting.'
    """
    testable_if = {} if testable_if is None else testable_if
    failing: dict[tuple, dict] = {}
    for key, r in results.items():
        for reading in r.regimes:
            if not reading.passes:
                c = reading.check
                f = failing.setdefault((c.key, c.quantity, c.op, c.threshold, str(float(reading.value))),
                                       {"reading": reading, "rows": []})
                f["rows"].append(key)
    if not failing:
        return "Every regime check passes, so every row can test its sentence in this setting."
    out, said = [], set()
    for f in failing.values():
        rd, rows = f["reading"], ", ".join(f"“{k}”" for k in f["rows"])
        remedy = ("as above" if rd.check.key in said  # a check's remedy is said once, at its first failing reading
                  else testable_if.get(rd.check.key, "another setting"))
        said.add(rd.check.key)
        out.append(f"The check “{rd.check.key}” fails ({rd.check.quantity} = {rd.value:.3g}, needs {rd.check.op} "
                   f"{rd.check.threshold:g}) and makes {rows} untestable in this setting; what would make "
                   f"{'it' if len(f['rows']) == 1 else 'them'} testable: {remedy}.")
    return " ".join(out)


def check_reach_text(results: Mapping[str, ClaimResult], key: str) -> str:
    """What the regime check ``key`` did to the verdicts of ``results``, in words from its readings:
    the rows it guards, those it fails, how many of those a resolution already leaves untestable
    (a row untestable at this resolution is counted there, so the check changes no verdict on it)
    and, of its passing readings, the closest one's distance to the threshold (in the check's units).

    >>> chk = RegimeCheck("support", "median count", Read("r", "n"), "at least", 10.0, "too few")
    >>> c = lambda k, r: Claim(k, "q", "s", "x, points", "greater", effect("points", paper=2.0), resolution=r, regimes=(chk,))
    >>> low, high = (chk.check({"r": pd.DataFrame({"n": v})}) for v in ([1.0, 2.0], [12.0, 13.0]))
    >>> res = {"a": evaluate(c("a", 3.0), [3.0, 4.0], regimes=(low,)), "b": evaluate(c("b", 0.1), [3.0, 4.0], regimes=(high,))}
    >>> check_reach_text(res, "support")
    'guards 2 rows and fails on 1, every one of them already untestable at this resolution, so it changes no verdict here; its closest passing reading is 2.5 from its threshold'
    >>> check_reach_text({"b": res["b"]}, "support")
    'guards 1 row and fails on none; its closest passing reading is 2.5 from its threshold'
    >>> res["a"] = evaluate(c("a", 0.1), [3.0, 4.0], regimes=(low,))
    >>> check_reach_text(res, "support").split("; ")[0]
    'guards 2 rows and fails on 1, 1 of them not already untestable at this resolution: it makes those untestable in this setting'
    """
    guarded, failing, margins = 0, [], []
    for r in results.values():
        for reading in r.regimes:
            if reading.check.key != key:
                continue
            guarded += 1
            if not reading.passes:
                failing.append(r)
            else:
                c = reading.check
                margins.append(reading.value - c.threshold if c.op == "at least" else c.threshold - reading.value)
    if not guarded:
        return "guards no row"
    text = f"guards {guarded} row{'s' if guarded > 1 else ''} and fails on {len(failing) or 'none'}"
    decided = sum(r.verdict != UNTESTABLE_RESOLUTION for r in failing)
    if failing and not decided:
        text += ", every one of them already untestable at this resolution, so it changes no verdict here"
    elif failing:
        text += f", {decided} of them not already untestable at this resolution: it makes those untestable in this setting"
    if margins:
        text += f"; its closest passing reading is {min(margins):.3g} from its threshold"
    return text


OUTCOMES = (HOLDS, SMALLER, OPPOSITE, INCONCLUSIVE, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING)
"""Every :attr:`ClaimResult.outcome`: the verdicts, with "does not hold" split by its kind."""


__all__ = ["ABOUTS", "FINDINGS", "FOLD_BASELINES", "GLOSSARY", "ClaimsTable", "claim_anchor", "glossary_link",
           "headline_html", "summary_html", "table_anchor", "DIRECTIONS", "OUTCOMES", "DOES_NOT_HOLD", "EFFECT_KINDS", "EFFECT_SHARE", "HOLDS", "INCONCLUSIVE", "KINDS",
           "MAX_SEEDS", "NOT_AT_THIS_MEAN", "OPPOSITE", "OVER", "REGIME_OPS", "REGIME_SUMMARIES", "RESOLUTION_SHARE",
           "SHORTFALLS", "SMALLER", "TABLE_COLUMNS", "UNTESTABLE", "UNTESTABLE_RESOLUTION", "UNTESTABLE_SETTING",
           "VERDICTS", "VERDICT_COLOURS", "Claim", "ClaimResult", "Comparator", "Effect", "EffectKind", "Improvement",
           "Read", "RegimeCheck", "RegimeReading", "check_reach_text", "claims_records", "claims_table", "decide", "effect",
           "evaluate", "headline_summary", "regime_reading", "regime_table", "says", "seeds_to_decide", "show", "smallest_resolvable",
           "strongest_baseline", "tally", "verdict_colour"]
