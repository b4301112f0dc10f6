r"""Intervals over seeds: the paired difference of two sides, a mean with its interval, per-seed tables.

The evidence of the book's claims (:mod:`fedbook.claims` decides them) rests on these:

- :func:`paired_interval`: Student's t interval of the mean paired difference over seeds (the
  seeds vary the partition, the initialization and the data subset, so it covers all of them at
  once; every seed draws its own test sets, so their noise is in it too), its variance floored by
  the smallest value the test noise inside each seed makes plausible (``within``, or the
  quantization noise of the resolution, :func:`resolution_of`): equal differences on every seed no
  longer give a zero-width interval read as certain, and the coverage stays nominal
  (:func:`simulate_coverage`). One seed gives the infinite interval: a single run cannot decide a
  claim. The quantiles are scipy's (``scipy.stats.t``, ``scipy.stats.chi2``); without a floor the
  interval is that of ``scipy.stats.ttest_rel(a, b).confidence_interval(level)``, and the floor is
  what scipy lacks.
- :func:`paired_bootstrap`: the paired percentile bootstrap (Efron & Tibshirani, *An
  Introduction to the Bootstrap*, 1993, ch. 13) of the mean difference over units of one run
  (test samples scored 0/1, or clients' accuracies), on the one resampler of the book
  (:func:`bootstrap_means`, which the leaderboard's ranks use too); its randomness is an argument.
- Per-seed summaries for tables and figures: :func:`mean_interval`, :func:`interval_band`,
  :func:`seed_band`, :func:`interval_text`, :func:`plus_minus`, :func:`seed_table`, and the
  pairing of seeds where a value is undefined (:func:`defined_pairs`, :class:`SeedValues`).

Every function returns an :class:`Interval` or numbers; none decides anything.

Examples
--------
>>> print(paired_interval([3.0, 4.0, 5.0], [1.0, 2.0, 2.0]))
+2.33 [+0.90, +3.77], 3 seeds
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats

from fedlib.validation import is_int, is_real

METHODS = ("t", "t+floor", "bootstrap")
"""How an :class:`Interval` was computed: Student's t over seeds with the seeds' own variance
(``"t"``), Student's t over seeds whose variance was raised to the floor of the test noise inside
each seed (``"t+floor"``, :func:`paired_interval`), or a paired bootstrap over units."""
_MINUS = "\N{MINUS SIGN}"


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1) (e.g. 0.95), got {level!r}")
    return float(level)


def signed(x: float, digits: int) -> str:
    """``+1.23`` / ``−0.40`` / ``+∞`` with a typographic minus.

    Examples
    --------
    >>> signed(1.234, 2), signed(-0.4, 2), signed(float("-inf"), 1)
    ('+1.23', '−0.40', '−∞')
    """
    if math.isinf(x):
        return ("+" if x > 0 else _MINUS) + "\N{INFINITY}"
    return f"{x:+.{digits}f}".replace("-", _MINUS)


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
            f"{signed(self.mean, digits)} [{signed(self.low, digits)}, {signed(self.high, digits)}], "
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
    interval). What a chapter's claim frames hold where a metric can be undefined.

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


def plus_minus(mean: float, half_width: float, digits: int = 1,
               bounds: tuple[float | None, float | None] | None = None) -> str:
    """A mean over seeds with the half-width of its interval, as a table cell shows it:
    ``"91.2 ± 1.3"``; an infinite part as ``∞`` (one seed: ``"91.2 ± ∞"``), a NaN mean as ``"n/a"``.

    ``bounds`` is the metric's range (``(0, 1)`` for an F1, ``(0, 100)`` for an accuracy in
    percent, ``(0, None)`` for a distance): an interval that would leave it is shown clipped to
    it, as its ends, ``"0.306 [0.000, 1.000]"`` (never ``"0.306 ± 1.030"`` for an F1); a page that
    passes bounds says so next to its table.

    Examples
    --------
    >>> plus_minus(91.234, 1.25), plus_minus(50.0, math.inf), plus_minus(math.nan, math.nan)
    ('91.2 ± 1.2', '50.0 ± ∞', 'n/a')
    >>> plus_minus(0.306, 1.030, 3, bounds=(0, 1)), plus_minus(0.5, 0.2, 3, bounds=(0, 1))
    ('0.306 [0.000, 1.000]', '0.500 ± 0.200')
    >>> plus_minus(2.0, 3.0, 2, bounds=(0, None)), plus_minus(99.0, 2.5, bounds=(0, 100))
    ('2.00 [0.00, 5.00]', '99.0 [96.5, 100.0]')
    """
    if math.isnan(mean):
        return "n/a"
    if bounds is not None:
        low, high = bounds
        if low is not None and high is not None and not low < high:
            raise ValueError(f"bounds must be (low, high) with low < high (None: unbounded), got {bounds!r}")
        if math.isfinite(half_width) and ((low is not None and mean - half_width < low)
                                          or (high is not None and mean + half_width > high)):
            ends = (mean - half_width if low is None else max(low, mean - half_width),
                    mean + half_width if high is None else min(high, mean + half_width))
            return f"{mean:.{digits}f} [{ends[0]:.{digits}f}, {ends[1]:.{digits}f}]".replace("-", _MINUS)
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
    bounds: tuple[float | None, float | None] | None = None,
) -> pd.DataFrame:
    """A results table over seeds: each cell ``"mean ± half-width"`` of the t interval (clipped to
    the metric's range ``bounds`` where it would leave it: :func:`plus_minus`).

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
    bounds : (low, high), optional
        The metric's range (either end ``None``: unbounded); see :func:`plus_minus`.

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
        return plus_minus(iv.mean, iv.half_width, digits, bounds)

    out = frame.groupby(keys, sort=False)[values].apply(cell)
    if not cols:
        return out.to_frame(values).rename_axis(index if len(index) > 1 else index[0])
    return out.unstack(cols)


__all__ = ["METHODS", "Interval", "SeedValues", "bootstrap_means", "defined_pairs", "interval_band", "interval_text",
           "mean_interval", "paired_bootstrap", "paired_interval", "plus_minus", "resolution_of", "seed_band", "seed_table", "signed",
           "simulate_coverage"]
