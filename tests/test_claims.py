"""fedbook.claims: the smallest effect of interest comes from one rule (a share of the paper's gain,
else the default of the quantity's kind); the decision rule finds planted effects in the claimed
direction, refutes a tie (smaller than claimed) and an opposite effect, mirrors under the other
direction, and at a true effect of m keeps each wrong verdict at the one-sided level (3, 5, 10 seeds,
one comparator and a tuple); a quantity that cannot resolve m and a failed regime check make a row
untestable; the probability of improvement is the Wilson interval of scipy; the intervals equal hand-computed and
scipy's ones and cover at their nominal level by simulation (the floor of the test noise included);
the comparators fixed before the runs (the strongest baseline on independent data, every baseline of
a tuple) keep the wrong "does not hold" at its level where the per-seed maximum does not; the number of
seeds that would decide equals a hand computation; bad declarations are refused; the table renders
each row's rule from its declaration."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fedbook.claims import (DOES_NOT_HOLD, EFFECT_KINDS, HOLDS, INCONCLUSIVE, NOT_AT_THIS_MEAN, OPPOSITE,
                            RESOLUTION_SHARE, SMALLER, TABLE_COLUMNS, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING,
                            VERDICTS, Claim, ClaimResult, Comparator, Improvement, Read, RegimeCheck, claims_table,
                            decide, effect, evaluate, regime_reading, regime_table, says, seeds_to_decide, show, strongest_baseline,
                            tally)
from fedbook.intervals import (METHODS, Interval, SeedValues, defined_pairs, interval_text, mean_interval,
                               bootstrap_means, paired_bootstrap, seed_band, paired_interval, resolution_of,
                               seed_table, simulate_coverage)


ZERO = 1e-9  # a resolution far below every difference of these tests: the rule read at (practically) zero


def _claim(direction="greater", min_effect=0.0, key="c", level=0.95, substitution="", resolution=None, versus=None,
           regimes=()):
    m = min_effect or ZERO  # 0.0: the rule at practically zero
    if resolution is None:  # the finest resolution that resolves m
        resolution = RESOLUTION_SHARE * m
    return Claim(key, "X improves accuracy.", "Section 5, Table 2", "accuracy, X − Y, points",
                 direction, m, substitution, level, resolution=resolution, versus=versus, regimes=regimes)


def _paired(mean_diff, sd_diff, n, seed):
    """(ours, baseline) over n seeds whose differences are N(mean_diff, sd_diff)."""
    rng = np.random.default_rng(seed)
    baseline = rng.normal(80.0, 3.0, n)  # the seeds move both sides; the pairing removes it
    return baseline + rng.normal(mean_diff, sd_diff, n), baseline


# --- the decision rule on planted effects ---------------------------------------------------

PLANTED = {  # name: (mean difference, sd, seeds), and the verdict for "greater" / "less"
    "positive": ((2.0, 0.3, 5), HOLDS, DOES_NOT_HOLD),
    "opposite": ((-2.0, 0.3, 5), DOES_NOT_HOLD, HOLDS),
    "tie": ((0.0, 0.3, 5), DOES_NOT_HOLD, DOES_NOT_HOLD),  # a tie excludes the claimed size either way
    "wide": ((0.78, 1.0, 3), INCONCLUSIVE, INCONCLUSIVE),  # this draw straddles +m and −m: either direction open
}


@pytest.mark.parametrize("name", PLANTED)
@pytest.mark.parametrize("direction", ["greater", "less"])
def test_planted_effects_are_found_and_mirror_under_the_other_direction(name, direction):
    (mean, sd, n), if_greater, if_less = PLANTED[name]
    ours, baseline = _paired(mean, sd, n, seed=7)
    result = evaluate(_claim(direction, min_effect=0.5), ours, baseline)
    assert result.verdict == (if_greater if direction == "greater" else if_less)
    assert result.interval.n == n and result.interval.method == "t"


def test_at_a_zero_m_a_null_effect_is_rarely_decided_either_way():
    # with m (practically) 0, a null effect sits on m: on 3 seeds it is decided (either way) in about 5 % of experiments
    rng = np.random.default_rng(3)
    counts = tally([evaluate(_claim(), rng.normal(0.0, 1.0, 3)) for _ in range(1000)])
    assert 0.03 <= (counts[HOLDS] + counts[DOES_NOT_HOLD]) / 1000 <= 0.07, counts
    assert counts[HOLDS] > 0 and counts[DOES_NOT_HOLD] > 0


def test_a_small_real_gain_excluded_from_the_claimed_size_does_not_hold_smaller_than_claimed():
    ours, baseline = _paired(0.4, 0.05, 5, seed=1)  # clearly positive, but below the declared 0.5
    assert evaluate(_claim(min_effect=0.0), ours, baseline).verdict == HOLDS
    small = evaluate(_claim(min_effect=0.5), ours, baseline)
    assert (small.verdict, small.shortfall) == (DOES_NOT_HOLD, SMALLER)
    assert small.verdict_text() == "does not hold: smaller than claimed"
    worse = evaluate(_claim(min_effect=0.5), *_paired(-0.4, 0.05, 5, seed=1))
    assert (worse.verdict, worse.shortfall) == (DOES_NOT_HOLD, OPPOSITE)
    assert evaluate(_claim(min_effect=0.5), *_paired(1.4, 0.05, 5, seed=1)).shortfall is None


@pytest.mark.parametrize("direction", ["greater", "less"])
@pytest.mark.parametrize("min_effect", [0.0, 0.5, 3.0])
def test_one_seed_is_always_inconclusive(direction, min_effect):
    for ours, baseline in [([100.0], [0.0]), ([0.0], [100.0]), ([1.0], 0.0)]:
        result = evaluate(_claim(direction, min_effect), ours, baseline)
        assert result.verdict == INCONCLUSIVE
        assert result.interval.low == -math.inf and result.interval.high == math.inf
    boot = paired_bootstrap([1.0], [0.0], seed=0)
    assert math.isinf(boot.width) and decide(_claim(direction, min_effect), boot) == INCONCLUSIVE


def test_the_rule_is_strict_at_its_threshold_and_symmetric():
    c = _claim("greater", 0.5)
    iv = lambda lo, hi: Interval((lo + hi) / 2, lo, hi, 5, 0.95, "t")  # noqa: E731
    assert decide(c, iv(0.5, 1.0)) == INCONCLUSIVE  # touching the threshold does not clear it
    assert decide(c, iv(0.5000001, 1.0)) == HOLDS
    assert decide(c, iv(0.2, 0.5)) == INCONCLUSIVE  # touching it from below does not either
    assert decide(c, iv(0.2, 0.4999999)) == DOES_NOT_HOLD
    assert decide(c, iv(-0.4, 0.4)) == DOES_NOT_HOLD  # a tie excludes the claimed size: refuted
    assert decide(c, iv(-1.0, -0.5)) == DOES_NOT_HOLD
    assert decide(c, iv(-0.4, 0.6)) == INCONCLUSIVE  # straddles m
    # mirror: "less" on [L, U] is "greater" on [-U, -L]
    rng = np.random.default_rng(0)
    for lo, hi, m in zip(rng.normal(0, 2, 300), rng.exponential(2, 300), rng.exponential(1, 300)):
        g = decide(_claim("greater", m), iv(lo, lo + hi))
        assert decide(_claim("less", m), iv(-lo - hi, -lo)) == g
        rg = ClaimResult(_claim("greater", m), iv(lo, lo + hi))
        assert ClaimResult(_claim("less", m), iv(-lo - hi, -lo)).shortfall == rg.shortfall


# --- the intervals ---------------------------------------------------------------------------


def test_t_interval_equals_a_hand_computed_one():
    # d = (1, 2, 3): mean 2, s = 1, t_{0.975, 2} = 4.302653 (tables), half-width 4.302653 / sqrt(3)
    iv = paired_interval([3.0, 5.0, 7.0], [2.0, 3.0, 4.0])
    assert iv.mean == 2.0 and iv.n == 3 and iv.level == 0.95
    assert iv.low == pytest.approx(2 - 4.302653 / math.sqrt(3), abs=1e-6)
    assert iv.high == pytest.approx(2 + 4.302653 / math.sqrt(3), abs=1e-6)
    # d = (0, 1, 0, 1, 3) at 90 %: mean 1, s = sqrt(1.5), t_{0.95, 4} = 2.131847
    iv = paired_interval([0.0, 1.0, 0.0, 1.0, 3.0], level=0.90)
    assert iv.high - iv.mean == pytest.approx(2.131847 * math.sqrt(1.5 / 5), abs=1e-6)


@pytest.mark.parametrize("n, level", [(2, 0.95), (3, 0.95), (5, 0.9), (10, 0.99)])
def test_t_interval_equals_scipy_ttest_rel(n, level):
    a, b = _paired(1.0, 2.0, n, seed=n)
    iv = paired_interval(a, b, level=level)
    ref = stats.ttest_rel(a, b).confidence_interval(confidence_level=level)
    assert iv.low == pytest.approx(ref.low, rel=1e-12, abs=1e-12)
    assert iv.high == pytest.approx(ref.high, rel=1e-12, abs=1e-12)
    assert iv.mean == pytest.approx(np.mean(a - b), abs=1e-12)


def test_a_number_as_baseline_is_a_constant_on_every_seed():
    d = [0.3, 0.7, 1.1, 0.2]
    assert paired_interval(d) == paired_interval(d, np.zeros(4))
    shifted = paired_interval(np.add(d, 5.0), 5.0)
    assert (shifted.low, shifted.high) == pytest.approx((paired_interval(d).low, paired_interval(d).high))


def test_t_interval_covers_the_true_mean_at_its_level():
    # 2000 simulated experiments of 5 seeds: coverage 95 % ± 1.5 % (about 3 standard errors)
    rng = np.random.default_rng(2024)
    true_mean = 1.3
    diffs = rng.normal(true_mean, 2.0, size=(2000, 5))
    covered = [(iv := paired_interval(d)).low <= true_mean <= iv.high for d in diffs]
    assert abs(np.mean(covered) - 0.95) <= 0.015, np.mean(covered)


def test_bootstrap_hand_made_cases():
    # equal differences on every unit: the resampled means are all that difference
    iv = paired_bootstrap([3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0], seed=0)
    assert (iv.mean, iv.low, iv.high) == (2.0, 2.0, 2.0)
    # d = (0, 1): resampled means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4 -> the 95 % interval is [0, 1]
    iv = paired_bootstrap([0.0, 1.0], [0.0, 0.0], seed=1, n_boot=4000)
    assert (iv.mean, iv.low, iv.high, iv.method) == (0.5, 0.0, 1.0, "bootstrap")
    # pairing: two classifiers that agree on most samples give a narrow interval of their difference
    rng = np.random.default_rng(5)
    base = (rng.random(400) < 0.7).astype(float)
    ours = base.copy()
    ours[rng.choice(np.flatnonzero(base == 0), 12, replace=False)] = 1.0  # 12 more samples right
    paired = paired_bootstrap(ours, base, seed=0)
    unpaired_width = 2 * 1.96 * math.sqrt(ours.var() / 400 + base.var() / 400)
    assert paired.mean == pytest.approx(0.03) and paired.low > 0 and paired.width < unpaired_width / 3


def test_bootstrap_is_reproducible_from_its_seed_and_takes_a_generator():
    rng = np.random.default_rng(0)
    a, b = (rng.random(300) < 0.8).astype(float), (rng.random(300) < 0.75).astype(float)
    assert paired_bootstrap(a, b, seed=11) == paired_bootstrap(a, b, seed=11)
    assert paired_bootstrap(a, b, seed=np.random.default_rng(11)) == paired_bootstrap(a, b, seed=11)
    assert paired_bootstrap(a, b, seed=11) != paired_bootstrap(a, b, seed=12)


def _chunked_means(d, n_boot, seed):
    """paired_bootstrap's resampling as it was written out before bootstrap_means (chunks of ~4M indices)."""
    rng, n = np.random.default_rng(seed), len(d)
    means, rows = np.empty(n_boot), max(1, 2**22 // n)
    for start in range(0, n_boot, rows):
        stop = min(start + rows, n_boot)
        means[start:stop] = d[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def test_bootstrap_means_is_the_one_resampling_and_keeps_columns_paired():
    d = np.random.default_rng(2).normal(size=50_000)  # 83 resamples per chunk: several chunks
    assert np.array_equal(bootstrap_means(d, 300, seed=4), _chunked_means(d, 300, 4))
    low, high = np.quantile(_chunked_means(d, 300, 4), [(1 - 0.95) / 2, (1 + 0.95) / 2])
    iv = paired_bootstrap(d, 0.0, seed=4, n_boot=300)
    assert (iv.low, iv.high) == (float(low), float(high))  # paired_bootstrap reads the same resamples
    # a 2-D array: every column resampled with the same indices, one generator draw per resample
    values = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    means = bootstrap_means(values, 500, np.random.default_rng(0))
    idx = np.random.default_rng(0).integers(0, 3, size=(500, 3))
    assert means.shape == (500, 2) and np.array_equal(means, values[idx].mean(axis=1))
    assert np.allclose(means[:, 1], 10 * means[:, 0])
    for bad in (dict(values=np.zeros((0, 2)), n_boot=5, seed=0), dict(values=values, n_boot=0, seed=0),
                dict(values=values, n_boot=5, seed=None), dict(values=np.zeros((2, 2, 2)), n_boot=5, seed=0)):
        with pytest.raises(ValueError):
            bootstrap_means(**bad)


def test_bootstrap_agrees_with_scipy_paired_percentile_bootstrap():
    rng = np.random.default_rng(9)
    a = (rng.random(200) < 0.8).astype(float)
    b = np.where(rng.random(200) < 0.8, a, 1 - a)  # correlated with a: pairing matters
    ours = paired_bootstrap(a, b, seed=0, n_boot=20000)
    ref = stats.bootstrap((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), paired=True,
                          method="percentile", n_resamples=20000, vectorized=True, rng=1).confidence_interval
    # different resamples: the ends agree up to Monte-Carlo error (one resampled mean step is 1/200)
    assert ours.low == pytest.approx(ref.low, abs=0.0101)
    assert ours.high == pytest.approx(ref.high, abs=0.0101)


def test_bootstrap_covers_the_true_difference_at_about_its_level():
    # 1000 simulated runs of 200 paired 0/1 scores (joint law below, true difference 0.05),
    # 500 resamples each: coverage within 3 standard errors of 95 % (the percentile bootstrap
    # covers slightly less than nominal at n = 200)
    p = {(1, 1): 0.65, (1, 0): 0.15, (0, 1): 0.10, (0, 0): 0.10}
    outcomes, probs = np.array(list(p)), np.array(list(p.values()))
    true_diff = p[(1, 0)] - p[(0, 1)]
    rng = np.random.default_rng(77)
    covered = []
    for run in range(1000):
        pairs = outcomes[rng.choice(4, size=200, p=probs)]  # (200, 2)
        iv = paired_bootstrap(pairs[:, 0], pairs[:, 1], seed=run, n_boot=500, unit="test samples")
        covered.append(iv.low <= true_diff <= iv.high)
    se = math.sqrt(0.95 * 0.05 / 1000)
    assert abs(np.mean(covered) - 0.95) <= 3 * se, np.mean(covered)


def test_evaluate_over_units_is_the_paired_bootstrap_at_the_claims_level():
    rng = np.random.default_rng(4)
    a, b = (rng.random(500) < 0.85).astype(float), (rng.random(500) < 0.75).astype(float)
    c = _claim(level=0.9)
    result = evaluate(c, a, b, over="test samples", seed=3, n_boot=1000)
    assert result.interval == paired_bootstrap(a, b, seed=3, n_boot=1000, level=0.9, unit="test samples")
    assert result.interval.format().endswith(", 500 test samples")
    assert result.verdict == HOLDS


# --- bad inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: paired_interval([1.0, 2.0, 3.0], [1.0, 2.0]), ["(3,)", "(2,)", "same length"]),
        (lambda: paired_interval([1.0, float("nan"), 3.0], [0.0, 0.0, 0.0]), ["nan", "[1]", "ours"]),
        (lambda: paired_interval([1.0, 2.0], [0.0, float("inf")]), ["inf", "[1]", "baseline"]),
        (lambda: paired_interval([]), ["non-empty", "(0,)"]),
        (lambda: paired_interval([[1.0, 2.0]]), ["1-D", "(1, 2)"]),
        (lambda: paired_bootstrap([1.0, 2.0], [1.0], seed=0), ["(2,)", "(1,)"]),
        (lambda: paired_bootstrap([1.0, float("nan")], seed=0), ["nan"]),
        (lambda: paired_bootstrap([1.0, 2.0], seed=None), ["None", "int or a numpy Generator"]),
        (lambda: paired_bootstrap([1.0, 2.0], seed=0, n_boot=10), ["10", ">= 100"]),
        (lambda: evaluate(_claim(), [1.0, 2.0], over="units"), ["'units'", "'seeds'", "'test samples'", "'clients'"]),
        (lambda: evaluate(_claim(), [1.0, 2.0], over="clients"), ["clients", "seed="]),
        (lambda: _claim(direction="higher"), ["'higher'", "'greater'", "'less'"]),
        (lambda: _claim(min_effect=-0.5, resolution=0.1), ["-0.5", "Effect", "> 0"]),
        (lambda: _claim(min_effect=float("nan"), resolution=0.1), ["nan", "Effect", "> 0"]),
        (lambda: effect("percent"), ["'percent'", "'points'", "'correlation'"]),
        (lambda: effect("points", paper=0.0), ["0.0", "non-zero"]),
        (lambda: effect("points", paper=1.0, share=1.5), ["1.5", "(0, 1]"]),
        (lambda: _claim(regimes=("growth",)), ["regimes", "RegimeCheck", "growth"]),
        (lambda: RegimeCheck("k", "q", Read("f", "x"), "below", 1.0, "why"), ["'below'", "'at least'", "'at most'"]),
        (lambda: RegimeCheck("k", "q", Read("f", "x"), "at most", 1.0, "why", summary="median"),
         ["'median'", "'mean'", "'min'"]),
        (lambda: RegimeCheck("k", "q", "f.x", "at most", 1.0, "why"), ["Read", "'f.x'"]),
        (lambda: _claim(key=""), ["key", "non-empty"]),
        (lambda: decide(_claim(level=0.9), paired_interval([1.0, 2.0, 3.0])), ["90 %", "95 %", "level=0.9"]),
        (lambda: Interval(0.0, 1.0, -1.0, 3, 0.95, "t"), ["low=1.0", "high=-1.0"]),
        (lambda: Interval(0.0, -1.0, 1.0, 3, 0.95, "z"), ["'z'", "'t'", "'bootstrap'"]),
        (lambda: claims_table([evaluate(_claim(), [1.0, 2.0])] * 2), ["duplicates", "'c'"]),
        (lambda: claims_table(["holds"]), ["str", "ClaimResult"]),
    ],
)
def test_bad_inputs_are_refused_naming_the_value_and_the_valid_ones(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, 95, float("nan"), True, "0.95"])
def test_a_level_outside_zero_one_is_refused(level):
    for call in (lambda: paired_interval([1.0, 2.0], level=level),
                 lambda: paired_bootstrap([1.0, 2.0], seed=0, level=level),
                 lambda: _claim(level=level)):
        with pytest.raises(ValueError) as info:
            call()
        assert "(0, 1)" in str(info.value) and repr(level) in str(info.value)


# --- declarations, results and the table -------------------------------------------------------


def test_a_claim_is_frozen_and_a_result_stores_no_verdict():
    c = _claim()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.min_effect = 1.0
    assert [f.name for f in dataclasses.fields(ClaimResult)] == ["claim", "interval", "intervals", "regimes",
                                                                 "improvement"]
    assert VERDICTS == (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING)


def test_the_rule_renders_the_declaration():
    assert _claim("greater", 0.5).rule() == (
        "claimed greater than +0.5 (m = 0.5: declared by hand): holds if the whole 95 % interval of the paired "
        "difference lies above +0.5; does not hold if it lies below +0.5; otherwise inconclusive at this scale"
    )
    assert _claim("less", 2.17, level=0.9).rule() == (
        "claimed less than −2.17 (m = 2.17: declared by hand): holds if the whole 90 % interval of the paired "
        "difference lies below −2.17; does not hold if it lies above −2.17; otherwise inconclusive at this scale"
    )
    default = Claim("k", "q", "s", "x", "greater", resolution=0.1)  # the smallest m the resolution resolves
    assert default.min_effect == pytest.approx(0.4) and "greater than +0.4 " in default.rule()
    ruled = Claim("k", "q", "s", "x", "greater", effect("points", paper=1.44), resolution=2.04)
    assert ruled.min_effect == 0.72 and not ruled.testable
    assert ruled.rule().endswith("; untestable at this resolution: the resolution 2.04 is above 0.25 × m = 0.18")
    assert "(m = 0.72: 0.5 of the paper’s +1.44)" in ruled.rule()


def test_claims_table_renders_each_rule_from_its_declaration_and_computes_each_verdict():
    rng = np.random.default_rng(8)
    declared = [
        (_claim("greater", 0.5, key="gain", substitution="CGRL backbone for FedYoYo"), 2.0, 0.3, 5),
        (_claim("less", 0.1, key="cost"), 2.0, 0.3, 5),  # the opposite direction
        (_claim("greater", 2.17, key="size"), 1.0, 1.0, 3),
        (_claim("less", 1.5, key="one-seed", level=0.9), -3.0, 1.0, 1),
    ]
    results = [evaluate(c, *_paired(m, s, n, seed=int(rng.integers(1000)))) for c, m, s, n in declared]
    table = claims_table(results)
    assert tuple(table.columns) == TABLE_COLUMNS
    assert isinstance(table.index, pd.RangeIndex) and len(table) == len(declared)
    for (_, row), r in zip(table.iterrows(), results):
        c = r.claim
        assert row["rule"] == c.rule()
        assert f"{c.min_effect:g}" in row["rule"] and c.direction in row["rule"]
        assert row["verdict"].split(":")[0] == decide(c, r.interval) == r.verdict
        assert row["how often"] == str(r.improvement)
        assert c.quote in row["claim"] and c.source in row["claim"]
        assert row["quantity"] == c.quantity and row["substitution"] == c.substitution
        assert row["ours"] == r.interval.format(2)
    assert table["verdict"].tolist() == [HOLDS, f"{DOES_NOT_HOLD}: {OPPOSITE}", f"{DOES_NOT_HOLD}: {SMALLER}",
                                         INCONCLUSIVE]
    assert table.loc[3, "ours"].endswith("[−∞, +∞], 1 seed")
    assert tally(results) == {**dict.fromkeys(VERDICTS, 0), HOLDS: 1, DOES_NOT_HOLD: 2, INCONCLUSIVE: 1}
    assert tally([]) == dict.fromkeys(VERDICTS, 0)


def test_interval_format():
    iv = Interval(1.234, 0.4, 2.06, 5, 0.95, "t")
    assert iv.format() == str(iv) == "+1.23 [+0.40, +2.06], 5 seeds"
    iv = Interval(-0.5, -1.25, 0.25, 200, 0.95, "bootstrap", "clients")
    assert iv.format(1) == "−0.5 [−1.2, +0.2], 200 clients"


# --- controls, the rendered table and the seed tables ---------------------------------------


def test_a_control_is_decided_by_the_same_rule_rendered_as_a_question_and_not_tallied():
    control = Claim("ms", "Does GGEUR still lead with as many local steps?", "the gain claim",
                    "accuracy, GGEUR − FedAvg (matched steps), points", "greater", kind="control", resolution=0.1)
    claim = _claim()
    results = [evaluate(claim, [2.0, 2.5, 2.2]), evaluate(control, [2.0, 2.5, 2.2])]
    table = claims_table(results)
    assert table.loc[1, "claim"] == "Control: Does GGEUR still lead with as many local steps? (for the gain claim)"
    assert table.loc[0, "claim"].startswith("\N{LEFT DOUBLE QUOTATION MARK}X improves")
    assert table["verdict"].tolist() == [HOLDS, HOLDS]
    assert tally(results) == {**dict.fromkeys(VERDICTS, 0), HOLDS: 1}
    with pytest.raises(ValueError, match=r"unknown kind 'check'; valid: 'claim', 'control'"):
        Claim("k", "q", "s", "x", "greater", kind="check", resolution=0.1)


def test_show_keeps_every_cell_whole_and_shades_each_verdict():
    long_quote = "a sentence of the paper " * 12  # far beyond pandas' 50-character cut
    c = Claim("long", long_quote.strip(), "Section IV", "accuracy, X − Y, points", "greater", 0.5,
              substitution="an MLP for ResNet-18 " * 4, resolution=0.1)
    results = [evaluate(c, [2.1, 1.8, 2.4]), evaluate(_claim(key="b"), [-2.0, -2.5, -2.2])]
    html = show(results).to_html()
    assert long_quote.strip() in html and c.rule() in html and ("an MLP for ResNet-18 " * 4).strip() in html
    assert "#d9f2d9" in html and "#f8d7d7" in html  # holds / does not hold (with its kind) shaded
    assert ">0<" not in html  # the index is hidden
    assert show(results).to_html() == html  # the same rows, the same markup
    with pytest.raises(ValueError, match="has lost the keys"):
        show(claims_table(results))


def test_show_states_each_rule_and_substitution_once_and_folds_a_row_against_many_baselines():
    sub = "an MLP for ResNet-18"
    rows = [Claim(k, "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, substitution=s, resolution=0.1)
            for k, s in (("a", sub), ("b", sub), ("c", sub + "; two rounds"), ("d", ""))]
    names = tuple(f"B{i}" for i in range(6))  # more than FOLD_BASELINES
    every = Claim("every", "X beats all.", "Table 3", "accuracy, X − each baseline, points", "greater", 0.5,
                  resolution=0.1, versus=names)
    results = [evaluate(c, [2.1, 1.8, 2.4]) for c in rows]
    results.append(evaluate(every, [2.0, 2.2, 2.1], {n: [0.1 * i, 0.1 * i, 0.2 * i] for i, n in enumerate(names)}))
    html = show(results).to_html()
    assert html.count(rows[0].rule()) == 1  # four rows, one rule: stated once, in the notes
    assert html.count(sub) == 1 and ">S1</a>; two rounds</dd>" in html  # the longer substitution cites the shorter
    assert html.count(">R1</a>") == 4 and html.count(">S1</a>") == 3  # rows a, b and the note of c's S2, which extends S1
    # against six baselines: the binding one's interval (B5, the highest baseline), the six folded under it
    row = html[html.index('<tr id="claim-every"'):]
    assert "vs B5 " in row and "<details><summary>all 6</summary>vs B0 " in row and "(vs each of 6 baselines)" in row
    assert ['claim-a', 'claim-b', 'claim-c', 'claim-d', 'claim-every'] == re.findall(r'<tr id="([^"]+)"', html)


def test_mean_interval_is_the_one_sample_t_interval():
    x = np.array([90.0, 91.0, 92.0])
    iv = mean_interval(x)
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)  # sd 1
    assert iv.mean == 91.0 and math.isclose(iv.low, 91 - half) and math.isclose(iv.high, 91 + half)
    lo, hi = stats.ttest_1samp(x, 0).confidence_interval(0.95)
    assert math.isclose(iv.low, lo) and math.isclose(iv.high, hi)


def test_seed_table_cells_are_mean_and_half_width_over_paired_seeds():
    half = stats.t.ppf(0.975, 2) / math.sqrt(3)  # sd 1 over 3 seeds
    tidy = pd.DataFrame({
        "seed": [0, 1, 2] * 4,
        "method": ["A"] * 6 + ["B"] * 6,
        "alpha": ([0.1] * 3 + [0.3] * 3) * 2,
        "acc": [90, 91, 92, 80, 80, 80, 70, 71, 72, 60, 62, 64],
    })
    wide = seed_table(tidy, "method", "alpha", "acc", digits=2)
    assert wide.loc["A", 0.1] == f"91.00 ± {half:.2f}" and wide.loc["A", 0.3] == "80.00 ± 0.00"
    assert wide.loc["B", 0.3] == f"62.00 ± {2 * half:.2f}"
    one = seed_table(tidy[tidy["seed"] == 0], "method", "alpha", "acc")
    assert one.loc["A", 0.1] == "90.0 ± ∞"
    with pytest.raises(ValueError, match="different seeds"):
        seed_table(tidy.drop(index=0), "method", "alpha", "acc")
    with pytest.raises(ValueError, match=r"columns \['acc2'\] are not in the frame"):
        seed_table(tidy, "method", "alpha", "acc2")
    with pytest.raises(ValueError, match="same 'seed' twice"):
        seed_table(pd.concat([tidy, tidy.iloc[:1]]), "method", "alpha", "acc")
    with pytest.raises(ValueError, match="NaN"):
        seed_table(tidy.assign(acc=tidy["acc"].where(tidy.index > 0)), "method", "alpha", "acc")


@pytest.mark.parametrize("direction, interval, verdict", [
    ("at least", (-0.04, 0.10), HOLDS),  # within 0.05 below the baseline, or above it
    ("at least", (-0.30, -0.06), DOES_NOT_HOLD),  # worse by more than the tolerance
    ("at least", (-0.30, 0.10), INCONCLUSIVE),
    ("at most", (-0.50, 0.04), HOLDS),
    ("at most", (0.06, 0.20), DOES_NOT_HOLD),
    ("at most", (-0.10, 0.20), INCONCLUSIVE),
])
def test_non_inferiority_reads_one_tolerance_on_both_sides(direction, interval, verdict):
    c = Claim("close", "X closely tracks the oracle.", "Section VII", "F1, X − oracle", direction, 0.05, resolution=0.001)
    assert decide(c, Interval(sum(interval) / 2, *interval, 5, 0.95, "t")) == verdict
    bound = "−0.05" if direction == "at least" else "+0.05"
    assert c.rule() == (
        f"claimed {direction} {bound} (within 0.05 of the baseline; m = 0.05: declared by hand): holds if the whole 95 % interval of the "
        f"paired difference lies {'above' if direction == 'at least' else 'below'} {bound}; does not hold if it lies "
        f"{'below' if direction == 'at least' else 'above'} {bound}; otherwise inconclusive at this scale"
    )


def test_a_planted_small_deficit_is_non_inferior_and_a_large_one_is_not():
    close = Claim("close", "X is competitive with Y.", "Section V-C", "F1, X − Y", "at least", 0.05, resolution=0.001)
    assert evaluate(close, *_paired(-0.01, 0.01, 5, seed=3)).verdict == HOLDS
    assert evaluate(close, *_paired(-0.30, 0.01, 5, seed=4)).verdict == DOES_NOT_HOLD


def test_a_claim_reads_its_sides_from_named_frames_paired_by_seed():
    runs = pd.DataFrame({"seed": [2, 0, 1, 0, 1, 2], "method": ["x", "x", "x", "y", "y", "y"],
                         "acc": [92.5, 92.0, 93.0, 90.0, 90.5, 91.0]})
    c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, resolution=0.1,
              ours=Read("runs", "acc", method="x"), baseline=Read("runs", "acc", method="y"))
    ours, baseline, within = c.read({"runs": runs})
    assert ours.tolist() == [92.5, 92.0, 93.0] and baseline.tolist() == [91.0, 90.0, 90.5]  # paired by seed, ours' order
    assert within is None and evaluate(c, ours, baseline).verdict == HOLDS
    assert c.read({}) is None  # the frame was not run at this profile: the claim is left out
    constant = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1,
                     ours=Read("runs", "acc", method="x"), baseline=89.0)
    assert constant.read({"runs": runs})[1] == 89.0
    indexed = runs.set_index(["method", "seed"])  # an index level filters too
    assert Read("runs", "acc", method="y")({"runs": indexed}).tolist() == [90.0, 90.5, 91.0]
    with pytest.raises(ValueError, match=r"no row with method = 'z'; valid: \['x', 'y'\]"):
        Read("runs", "acc", method="z")({"runs": runs})
    with pytest.raises(ValueError, match=r"has no column or index level 'arm'"):
        Read("runs", "acc", arm="x")({"runs": runs})
    with pytest.raises(ValueError, match=r"has no column 'f1'; valid: \['seed', 'method', 'acc'\]"):
        Read("runs", "f1")({"runs": runs})
    with pytest.raises(ValueError, match=r"selects 6 rows for 3 units \(seed\): .* \(here: \['method'\]\)"):
        Read("runs", "acc")({"runs": runs})  # both methods' rows for each seed: refused, never pooled
    iid = runs.assign(alpha=[None, None, None, 0.1, 0.1, 0.1])  # None (the IID partition) is a value a row can hold
    assert Read("runs", "acc", alpha=None)({"runs": iid}).tolist() == [92.5, 92.0, 93.0]
    with pytest.raises(ValueError, match="declares no values: pass ours=Read"):
        Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1).read({"runs": runs})


def test_a_claims_reads_are_checked_when_it_is_declared():
    with pytest.raises(ValueError, match="ours must be a Read"):
        Claim("g", "q", "s", "x", "greater", resolution=0.1, ours=[1.0, 2.0])
    with pytest.raises(ValueError, match="baseline must be a Read, a number or a dict of Reads"):
        Claim("g", "q", "s", "x", "greater", resolution=0.1, ours=Read("r", "a"), baseline="y")
    with pytest.raises(ValueError, match=r"a dict baseline must name exactly the baselines of versus"):
        Claim("g", "q", "s", "x", "greater", resolution=0.1, versus=("A", "B"), ours=Read("r", "a"),
              baseline={"A": Read("r", "b")})
    with pytest.raises(ValueError, match=r"is against every one of \['A', 'B'\]: baseline must be a dict"):
        Claim("g", "q", "s", "x", "greater", resolution=0.1, versus=("A", "B"), ours=Read("r", "a"), baseline=Read("r", "b"))
    with pytest.raises(ValueError, match="Read.column must be a non-empty string"):
        Read("r", "")


# ---------------------------------------------------------------- reading values per seed, quoting intervals
def test_half_width_is_the_plus_minus_of_a_table_cell():
    iv = mean_interval([90.0, 91.0, 92.0])
    assert iv.half_width == pytest.approx(stats.t.ppf(0.975, 2) / math.sqrt(3), rel=1e-12)
    assert iv.half_width == iv.high - iv.mean and mean_interval([1.0]).half_width == math.inf
    assert seed_table(pd.DataFrame({"seed": [0, 1, 2], "m": "A", "v": [90.0, 91.0, 92.0]}), "m", None, "v").iloc[0, 0] \
        == f"91.0 ± {iv.half_width:.1f}"


def test_interval_text_leaves_undefined_seeds_out():
    assert interval_text([1.0, 2.0, float("nan"), 3.0]) == mean_interval([1.0, 2.0, 3.0]).format(1)
    assert interval_text([1.25, 1.75], 2) == mean_interval([1.25, 1.75]).format(2)
    assert interval_text([float("nan"), float("nan")]) == "+0.0 [−∞, +∞], 1 seed"


def test_defined_pairs_drops_a_seed_undefined_on_either_side():
    ours, base = defined_pairs([1.0, np.nan, 3.0, 4.0], [0.0, 1.0, np.nan, 2.0])
    assert ours.tolist() == [1.0, 4.0] and base.tolist() == [0.0, 2.0]
    ours, base = defined_pairs([np.nan], [1.0])
    assert ours.tolist() == [0.0] and base.tolist() == [0.0]  # nothing left: an inconclusive zero
    with pytest.raises(ValueError, match="paired"):
        defined_pairs([1.0, 2.0], [1.0])
    # against every baseline of a mapping: a seed is kept where ours and every baseline are defined
    ours, every = defined_pairs([1.0, 2.0, np.nan, 4.0], {"A": [0.0, np.nan, 0.0, 1.0], "B": [5.0, 5.0, 5.0, 6.0]})
    assert ours.tolist() == [1.0, 4.0] and {k: v.tolist() for k, v in every.items()} == {"A": [0.0, 1.0], "B": [5.0, 6.0]}
    ours, every = defined_pairs([np.nan], {"A": [1.0]})
    assert ours.tolist() == [0.0] and every["A"].tolist() == [0.0]
    with pytest.raises(ValueError, match="baseline 'B' must be paired"):
        defined_pairs([1.0, 2.0], {"A": [1.0, 1.0], "B": [1.0]})


def test_seed_values_read_a_tidy_frame_per_seed_in_the_given_order():
    tidy = pd.DataFrame({"seed": [2, 0, 1, 0], "alpha": 0.1, "method": ["A", "A", "A", "B"], "value": [3.0, 1.0, 2.0, 5.0]})
    v = SeedValues(tidy, ["alpha", "method"], seeds=[0, 1, 2])
    assert v(0.1, "A").tolist() == [1.0, 2.0, 3.0]
    assert np.array_equal(v(0.1, "B"), [5.0, np.nan, np.nan], equal_nan=True)  # seeds without a row: NaN
    assert SeedValues(tidy, ["alpha", "method"], seeds=[2, 0])(0.1, "A").tolist() == [3.0, 1.0]
    with pytest.raises(KeyError):
        v(0.1, "C")
    with pytest.raises(ValueError, match="'metric'"):
        SeedValues(tidy, ["metric"], seeds=[0])


def test_seed_band_is_the_mean_and_half_width_at_each_x():
    curve = pd.DataFrame({"seed": [0, 1, 2, 0, 1, 2], "x": [1.0] * 3 + [2.0] * 3, "value": [1.0, 2.0, 3.0, 5.0, 5.0, 5.0]})
    means, halves = seed_band(curve, "x", [2.0, 1.0])
    assert means.tolist() == [5.0, 2.0]
    assert halves.tolist() == [0.0, pytest.approx(stats.t.ppf(0.975, 2) / math.sqrt(3))]
    assert np.isinf(seed_band(curve[curve["seed"] == 0], "x", [1.0])[1]).all()  # one seed: no band
    with pytest.raises(ValueError, match="no row has x = 3.0"):
        seed_band(curve, "x", [3.0])
    with pytest.raises(ValueError, match="'y'"):
        seed_band(curve, "y", [1.0])


# ---------------------------------------------------------------- resolution: declared, and a floor of the interval
def test_a_claim_declares_its_resolution_and_is_untestable_where_it_cannot_resolve_m():
    with pytest.raises(TypeError, match="resolution"):
        Claim("k", "q", "s", "x", "greater")  # required, keyword-only
    assert _claim(min_effect=0.4, resolution=resolution_of(1000)).testable  # 0.1 <= 0.25 x 0.4
    assert Claim("k", "q", "s", "x", "greater", resolution=0.1).min_effect == pytest.approx(0.4)  # the default
    with pytest.raises(ValueError, match="min_effect must be an Effect"):
        Claim("k", "q", "s", "x", "greater", 0.0, resolution=0.1)  # 0: a one-image difference could hold
    coarse = _claim(min_effect=0.2, resolution=0.1)  # m of two units of resolution: read off the quantization
    assert not coarse.testable
    for values in ([5.0, 5.1, 4.9], [-5.0, -5.1, -4.9], [0.1, 0.2, 0.15]):  # whatever the interval says
        r = evaluate(coarse, values)
        assert r.verdict == UNTESTABLE_RESOLUTION and seeds_to_decide(coarse, r) == "untestable"
        assert r.verdict_text() == "untestable at this resolution: the resolution 0.1 is above 0.25 × m = 0.05"
    for bad in (0, -0.1, float("nan"), float("inf"), True, "0.1", None):
        with pytest.raises(ValueError, match=r"resolution must be a finite number > 0.*got " + re.escape(repr(bad))):
            Claim("k", "q", "s", "x", "greater", 1.0, resolution=bad)
    assert _claim(min_effect=0.2, resolution=0.1) != _claim(min_effect=0.2, resolution=0.2)  # part of the declaration


def test_resolution_of_is_one_unit_of_the_share():
    assert resolution_of(1000) == 0.1 and resolution_of(20, scale=20) == 1.0 and resolution_of(4, scale=1) == 0.25
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=r"n_units must be a positive integer .*, got " + re.escape(repr(bad))):
            resolution_of(bad)
    with pytest.raises(ValueError, match=r"scale must be a finite number > 0 .* got -1"):
        resolution_of(10, scale=-1)


def test_the_floor_is_the_mean_within_variance_else_the_quantization_of_the_resolution():
    d = np.array([2.0, 2.1, 1.9, 2.0, 2.0])  # s^2 = 0.005
    t4 = stats.t.ppf(0.975, 4)
    f = stats.chi2.ppf(0.05, 4) / 4  # 0.178: the share of w below which s^2 over 5 seeds is implausible
    plain = paired_interval(d)
    assert plain.method == "t" and plain.half_width == pytest.approx(t4 * math.sqrt(0.005 / 5))
    floored = paired_interval(d, within=[0.01, 0.02, 0.03, 0.04, 0.05])  # w = 0.03: 0.03 f > s^2
    assert floored.method == "t+floor" and floored.half_width == pytest.approx(t4 * math.sqrt(0.03 * f / 5))
    assert paired_interval(d, within=np.full(5, 0.001)) == plain  # w < s^2: the seeds' own variance, "t"
    quantized = paired_interval(d, resolution=1.0)  # w = h^2 / 6: f / 6 > s^2
    assert quantized.method == "t+floor" and quantized.half_width == pytest.approx(t4 * math.sqrt(f / 6 / 5))
    # both given: the larger floor (a test noise of zero does not remove the resolution's)
    assert paired_interval(d, within=np.zeros(5), resolution=1.0) == quantized
    assert paired_interval(d, within=[0.01, 0.02, 0.03, 0.04, 0.05], resolution=0.1) == floored
    assert paired_interval(d, resolution=0.1) == plain  # 0.1^2 / 6 < 0.005: the floor does not bind
    constant = paired_interval([3.0, 3.0, 3.0], [1.0, 1.0, 1.0], resolution=0.1)
    assert constant.width > 0 and constant.method == "t+floor" and decide(_claim(), constant) == HOLDS
    assert paired_interval([3.0], within=[1.0]).width == math.inf and "t+floor" in METHODS
    with pytest.raises(ValueError, match=r"within must hold one variance per seed, of shape \(5,\).*\(3,\)"):
        paired_interval(d, within=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"within must be finite variances >= 0, got \[-1.0, nan\] at positions \[1, 3"):
        paired_interval(d, within=[0.0, -1.0, 0.0, float("nan"), 0.0])
    with pytest.raises(ValueError, match="resolution must be a finite number > 0"):
        paired_interval(d, resolution=0.0)


@pytest.mark.parametrize("seed_sd, within_sd", [
    (2.0, 1.0),  # measured 0.949 (seed 0)
    (1.0, 1.0),  # measured 0.947 (seeds 0, 1, 2: 0.947, 0.955, 0.945); a floor at w itself gave 0.980
    (0.0, 1.0),  # only test noise: measured 0.950 (a floor at w itself gave 0.996)
    (1.0, 0.3),  # mostly seed noise: measured 0.954
])
def test_the_floored_interval_has_its_nominal_coverage(seed_sd, within_sd):
    coverage = simulate_coverage(5, seed_sd, within_sd, 1.3, n_experiments=4000, seed=0)
    assert 0.93 <= coverage <= 0.97, coverage


def test_the_floored_interval_has_its_nominal_coverage_at_three_seeds():
    assert 0.93 <= simulate_coverage(3, 1.0, 1.0, 0.7, n_experiments=4000, seed=1) <= 0.97


def test_simulate_coverage_counts_what_paired_interval_covers():
    rng = np.random.default_rng(12)  # the same draws as simulate_coverage(..., seed=12)
    shape = (300, 4)
    d = 0.7 + rng.normal(0.0, 1.0, shape) + rng.normal(0.0, 0.5, shape)
    ivs = [paired_interval(row, within=np.full(4, 0.25)) for row in d]
    assert simulate_coverage(4, 1.0, 0.5, 0.7, n_experiments=300, seed=12) == np.mean(
        [iv.low <= 0.7 <= iv.high for iv in ivs])
    with pytest.raises(ValueError, match="n_seeds must be an integer >= 2"):
        simulate_coverage(1, 1.0, 1.0, 0.0, n_experiments=10, seed=0)
    with pytest.raises(ValueError, match="within_sd must be a finite number >= 0, got -1"):
        simulate_coverage(5, 1.0, -1, 0.0, n_experiments=10, seed=0)
    with pytest.raises(ValueError, match="seed must be an int or a numpy Generator"):
        simulate_coverage(5, 1.0, 1.0, 0.0, n_experiments=10, seed=None)


# ---------------------------------------------------------------- comparators fixed before the runs
def test_strongest_baseline_picks_the_best_mean_on_the_selection_data_and_says_how():
    best = strongest_baseline({"FedAvg": [91.0, 91.4], "Ditto": [90.8], "FedProx": [91.2, 91.2]},
                              on="pilot seeds 100–101")
    assert isinstance(best, Comparator) and best.name == "FedAvg"  # a tie with FedProx: the first
    assert best.rule == "the highest mean on pilot seeds 100–101: FedAvg 91.2, Ditto 90.8, FedProx 91.2"
    assert best.scores == {"FedAvg": 91.2, "Ditto": 90.8, "FedProx": 91.2} and best.on == "pilot seeds 100–101"
    assert best.describe() == f"FedAvg, fixed before the runs as {best.rule}"
    cheapest = strongest_baseline({"A": [3.0], "B": [-1.0]}, on="the validation split", higher_is_better=False)
    assert cheapest.name == "B" and cheapest.rule == "the lowest mean on the validation split: A 3, B −1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        best.name = "Ditto"
    for call, words in [
        (lambda: strongest_baseline({}, on="x"), "non-empty mapping"),
        (lambda: strongest_baseline({"A": [1.0]}, on=""), "on must name the selection data"),
        (lambda: strongest_baseline({"A": [1.0, float("nan")]}, on="x"), "values of 'A' must be a non-empty 1-D"),
        (lambda: strongest_baseline({"A": []}, on="x"), "values of 'A'"),
        (lambda: strongest_baseline({"": [1.0]}, on="x"), "non-empty string, got ''"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            call()
    c = _claim(versus=best.name)
    assert c.versus == "FedAvg" and evaluate(c, [2.0, 2.5, 2.2], [0.0, 0.1, 0.0]).intervals.keys() == {"FedAvg"}


def test_versus_is_a_name_a_tuple_of_names_or_none():
    assert _claim(versus=["A", "B"]).versus == ("A", "B")  # a list is kept as a tuple: the claim stays hashable
    for bad, words in [("", "non-empty"), ((), "tuple of >= 1 names"), (("A", "A"), "duplicates ['A']"),
                       (("A", 3), "tuple of >= 1 names"), (3, "got 3")]:
        with pytest.raises(ValueError, match=re.escape(words)):
            _claim(versus=bad)


def test_every_baseline_holds_only_if_every_interval_clears_and_fails_on_one_at_the_bonferroni_level():
    c = _claim("greater", 0.5, versus=("A", "B", "C"))
    iv = lambda m, h: Interval(m, m - h, m + h, 5, 0.95, "t")  # noqa: E731
    clear = {"A": iv(2.0, 1.0), "B": iv(3.0, 1.0), "C": iv(1.6, 1.0)}
    assert decide(c, clear) == HOLDS
    assert decide(c, {**clear, "C": iv(1.4, 1.0)}) == INCONCLUSIVE  # one does not clear +0.5
    # the Bonferroni interval at 1 − 0.05 / 3 is wider by t_{1 − 0.05/6, 4} / t_{0.975, 4}
    ratio = stats.t.ppf(1 - 0.05 / 6, 4) / stats.t.ppf(0.975, 4)
    below = {**clear, "B": iv(0.5 - 1.01 * ratio, 1.0)}  # lies below +0.5 even widened
    assert decide(c, below) == DOES_NOT_HOLD
    assert ClaimResult(c, below["B"], below).shortfall == SMALLER  # the widened interval reaches above 0
    opposite = {**clear, "B": iv(-1.01 * ratio, 1.0)}
    assert ClaimResult(c, opposite["B"], opposite).shortfall == OPPOSITE
    just = {**clear, "B": iv(0.5 - 1.01, 1.0)}  # below +0.5 at 95 %, not at the Bonferroni level
    assert decide(_claim("greater", 0.5), just["B"]) == DOES_NOT_HOLD and decide(c, just) == INCONCLUSIVE
    mirrored = {k: Interval(-v.mean, -v.high, -v.low, 5, 0.95, "t") for k, v in below.items()}
    assert decide(_claim("less", 0.5, versus=("A", "B", "C")), mirrored) == DOES_NOT_HOLD
    at_most = {k: Interval(-v.mean, -v.high, -v.low, 5, 0.95, "t") for k, v in
               {**clear, "B": iv(-0.5 - 1.01 * ratio, 1.0)}.items()}  # beyond the tolerance the other way
    assert decide(_claim("at most", 0.5, versus=("A", "B", "C")), at_most) == DOES_NOT_HOLD
    with pytest.raises(ValueError, match=r"missing \['C'\], extra \['D'\]"):
        decide(c, {"A": clear["A"], "B": clear["B"], "D": clear["C"]})
    with pytest.raises(ValueError, match="needs their intervals by name"):
        decide(c, clear["A"])
    with pytest.raises(ValueError, match="one comparator"):
        decide(_claim(), clear)


@pytest.mark.parametrize("direction, binding", [("greater", "B"), ("at least", "B"), ("less", "A"), ("at most", "A")])
def test_the_binding_interval_is_the_one_nearest_to_failing_the_claimed_direction(direction, binding):
    c = _claim(direction, 0.5, versus=("A", "B"))
    r = evaluate(c, [5.0, 5.2, 5.1], {"A": [4.0, 4.0, 4.0], "B": [4.5, 4.4, 4.8]})
    assert r.binding == binding and r.interval == r.intervals[binding]
    assert list(r.intervals) == ["A", "B"]
    assert r.intervals["A"] == paired_interval([5.0, 5.2, 5.1], [4.0] * 3, resolution=0.1)


def test_evaluate_reads_every_baseline_by_name_and_refuses_the_wrong_shape():
    c = _claim(versus=("A", "B"))
    ours, base = [2.0, 2.5, 2.2], {"A": [0.0, 0.1, 0.0], "B": [1.0, 1.0, 1.2]}
    within = [0.5, 0.5, 0.5]
    r = evaluate(c, ours, base, within)
    assert r.intervals["B"] == paired_interval(ours, base["B"], within=within)
    r2 = evaluate(c, ours, base, {"A": within, "B": [0.0] * 3})
    assert r2.intervals["B"] == paired_interval(ours, base["B"], within=[0.0] * 3)
    for call, words in [
        (lambda: evaluate(c, ours, [0.0, 0.0, 0.0]), "pass the baselines as a dict"),
        (lambda: evaluate(c, ours, {"A": [0.0] * 3}), "missing ['B'], extra []"),
        (lambda: evaluate(c, ours, {**base, "C": [0.0] * 3}), "missing [], extra ['C']"),
        (lambda: evaluate(c, ours, base, {"A": within}), "within variances must have exactly those names"),
        (lambda: evaluate(c, ours, base, over="test samples", seed=0), "decided over seeds"),
        (lambda: evaluate(_claim(versus="A"), ours, base), "versus='A') but its baseline is a dict of ['A', 'B']"),
        (lambda: evaluate(_claim(), ours, 0.0, {"A": within}), "but its within is a dict"),
        (lambda: evaluate(_claim(), ours, 0.0, within, over="clients", seed=0), "a bootstrap over clients takes none"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            call()
    with pytest.raises(ValueError, match="interval must be the binding one"):
        ClaimResult(c, r.intervals["A"], r.intervals)
    with pytest.raises(ValueError, match=re.escape("the intervals must have exactly those names; missing ['A', 'B']")):
        ClaimResult(c, r.interval)


# simulated experiments of ours and six baselines: per-seed SD 3 points, pairwise correlation 0.5 between all seven
BASELINES = ("A", "B", "C", "D", "E", "F")


def _methods(rng, n_experiments, n_seeds, shift=0.0):
    """(ours, baselines) of shapes (experiments, seeds) and (experiments, seeds, 6): a common part and an own part,
    each of variance 4.5 (SD 3 in all, correlation 0.5); ``shift`` added to the baselines."""
    common = rng.normal(0.0, 3 * math.sqrt(0.5), (n_experiments, n_seeds, 1))
    x = 80.0 + common + rng.normal(0.0, 3 * math.sqrt(0.5), (n_experiments, n_seeds, 7))
    return x[..., 0], x[..., 1:] + shift


def _rate(results, verdict):
    return float(np.mean([r.verdict == verdict for r in results]))


def test_at_an_effect_of_m_the_comparators_fixed_before_the_runs_keep_each_wrong_verdict_at_its_level():
    # ours beats each of six tied baselines by exactly m = 1: "holds" and "does not hold" are both wrong
    m = 1.0
    rng = np.random.default_rng(2026)
    ours, baselines = _methods(rng, 2000, 5, shift=-m)
    _, pilot = _methods(rng, 2000, 2, shift=-m)  # two pilot seeds, independent of the claim's five
    # (i) the strongest baseline on the pilot seeds, then one paired interval on the claim's seeds
    strongest = []
    for o, b, p in zip(ours, baselines, pilot):
        best = strongest_baseline(dict(zip(BASELINES, p.T)), on="pilot seeds 100–101")
        strongest.append(evaluate(_claim(versus=best.name, min_effect=m), o, b[:, BASELINES.index(best.name)]))
    assert _rate(strongest, DOES_NOT_HOLD) <= 0.035 and _rate(strongest, HOLDS) <= 0.035  # measured 0.023, 0.032
    # (ii) every baseline: intersection-union, Bonferroni on the "does not hold" side
    every = _claim(versus=BASELINES, min_effect=m)
    results = [evaluate(every, o, dict(zip(BASELINES, b.T))) for o, b in zip(ours, baselines)]
    assert _rate(results, DOES_NOT_HOLD) <= 0.035  # measured 0.021
    assert _rate(results, HOLDS) <= 0.035  # measured 0.000
    # contrast: the union side without the correction says "does not hold" several times the level
    uncorrected = np.mean([any(decide(_claim(min_effect=m), iv) == DOES_NOT_HOLD for iv in r.intervals.values())
                           for r in results])
    assert uncorrected > 0.06, uncorrected  # measured 0.121
    # contrast: the old per-seed maximum over the baselines is biased against ours
    per_seed_max = [evaluate(_claim(min_effect=m), o, b.max(axis=1)) for o, b in zip(ours, baselines)]
    assert _rate(per_seed_max, DOES_NOT_HOLD) > 0.3  # measured 0.424


@pytest.mark.parametrize("n_seeds", [3, 5, 10])
@pytest.mark.parametrize("direction", ["greater", "less"])
def test_at_a_true_effect_of_m_each_wrong_verdict_is_at_most_the_one_sided_level(n_seeds, direction):
    """The issue's error rates: at a true effect equal to m, "holds" and "does not hold" are both
    wrong, and each happens in at most 2.5 % of experiments (one side of a 95 % interval), for one
    comparator and for every baseline of a tuple (three baselines, correlated through ours), at 3, 5
    and 10 seeds. 4,000 experiments each: a Monte Carlo standard error of 0.25 points, so the bound
    checked is 2.5 % + 3 standard errors."""
    m, sign, n_exp = 1.0, (1.0 if direction == "greater" else -1.0), 4000
    rng = np.random.default_rng(100 + n_seeds)
    bound = 0.025 + 3 * math.sqrt(0.025 * 0.975 / n_exp)
    single = _claim(direction, m)
    d = sign * m + rng.normal(0.0, 2.0, (n_exp, n_seeds))
    one = [evaluate(single, x) for x in d]
    assert _rate(one, HOLDS) <= bound and _rate(one, DOES_NOT_HOLD) <= bound
    assert _rate(one, HOLDS) > 0.01 and _rate(one, DOES_NOT_HOLD) > 0.01  # the level is used, not wasted
    names = ("A", "B", "C")
    every = _claim(direction, m, versus=names)
    ours, base = _methods(rng, n_exp, n_seeds, shift=-sign * m)
    tuple_results = [evaluate(every, o, dict(zip(names, b[:, :3].T))) for o, b in zip(ours, base)]
    assert _rate(tuple_results, HOLDS) <= bound and _rate(tuple_results, DOES_NOT_HOLD) <= bound


def test_beating_every_baseline_needs_every_one():
    rng = np.random.default_rng(7)
    every = _claim(versus=BASELINES, min_effect=0.1)
    decide_all = lambda ours, baselines: [evaluate(every, o, dict(zip(BASELINES, b.T)))  # noqa: E731
                                          for o, b in zip(ours, baselines)]
    # (iii) +5 points against only the weakest baseline, a tie with the five others: rarely "holds"
    only_weakest = decide_all(*_methods(rng, 2000, 5, shift=np.array([-5.0, 0, 0, 0, 0, 0])))
    assert _rate(only_weakest, HOLDS) <= 0.05  # measured 0.000 (bounded by 0.025, one of the tied five)
    # (iv) +5 points against every baseline. At 5 seeds each interval clears in about 78 % of experiments but all
    # six at once (they share ours) in only about 40 %: "most experiments" needs more seeds (8: about 89 %)
    five_seeds = decide_all(*_methods(rng, 2000, 5, shift=-5.0))
    assert 0.3 < _rate(five_seeds, HOLDS) < 0.5  # measured 0.388
    assert _rate(five_seeds, DOES_NOT_HOLD) == 0.0
    eight_seeds = decide_all(*_methods(rng, 2000, 8, shift=-5.0))
    assert _rate(eight_seeds, HOLDS) > 0.5  # measured 0.886


# ---------------------------------------------------------------- how far from a decision
def _smallest(gap, sd, level):
    """The smallest n >= 2 with t_{(1+level)/2, n-1} sd / sqrt(n) < gap, by counting."""
    n = 2
    while stats.t.ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n) >= gap:
        n += 1
    return n


def _iv(mean, sd, n=5, level=0.95):
    half = stats.t.ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, level, "t")


@pytest.mark.parametrize("direction, m, mean, gap", [
    ("greater", 0.0, 1.0, 1.0),  # holds side: mean − 0
    ("greater", 0.5, 1.0, 0.5),
    ("greater", 0.0, -1.0, 1.0),  # does-not-hold side: 0 − mean
    ("greater", 0.5, 0.0, 0.5),  # does-not-hold side: 0.5 − mean (a tie is refuted by enough seeds)
    ("less", 0.5, 1.0, 1.5),  # does-not-hold side: mean − (−0.5)
    ("at least", 0.5, 0.0, 0.5),  # holds side: mean − (−0.5)
    ("at most", 0.5, 1.5, 1.0),  # does-not-hold side: mean − 0.5
])
def test_seeds_to_decide_is_the_smallest_n_whose_interval_would_clear(direction, m, mean, gap):
    assert _smallest(1.0, 2.0, 0.95) == 18  # t_{0.975, 17} * 2 / sqrt(18) = 0.995 < 1 <= 1.028 at n = 17
    c = _claim(direction, m)
    iv = _iv(mean, 2.0)
    assert decide(c, iv) == INCONCLUSIVE
    assert seeds_to_decide(c, iv) == _smallest(gap, 2.0, 0.95) == seeds_to_decide(c, ClaimResult(c, iv))


def test_seeds_to_decide_when_decided_or_when_nothing_can_decide():
    c = _claim("greater", 0.5)
    assert seeds_to_decide(c, _iv(3.0, 1.0)) == 5  # decided: the observed number
    assert seeds_to_decide(c, _iv(0.5, 1.0)) == NOT_AT_THIS_MEAN  # the mean sits on m: only there
    assert seeds_to_decide(c, _iv(-0.2, 1.0)) == _smallest(0.7, 1.0, 0.95)
    assert seeds_to_decide(_claim("at least", 0.5), _iv(-0.5, 1.0)) == NOT_AT_THIS_MEAN
    assert seeds_to_decide(c, paired_interval([1.0])) == "not from one seed"
    boot = paired_bootstrap([1.0, 0.0, 1.0, 0.0], seed=0)
    assert seeds_to_decide(_claim("greater", 0.5), boot) == "not over seeds"
    assert seeds_to_decide(c, _iv(0.51, 10.0)) == "more than 10,000"
    # the floor is kept: a difference equal on every seed, read at the resolution 0.1, has a width, and the
    # seeds it needs are extrapolated from the floored spread
    floored = paired_interval([0.51, 0.51, 0.51], resolution=0.1)
    assert floored.method == "t+floor" and decide(c, floored) == INCONCLUSIVE
    sigma = floored.half_width * math.sqrt(3) / stats.t.ppf(0.975, 2)
    assert sigma == pytest.approx(math.sqrt(0.1**2 / 6 * stats.chi2.ppf(0.05, 2) / 2))
    assert seeds_to_decide(c, floored) == _smallest(0.01, sigma, 0.95)
    with pytest.raises(ValueError, match="got the result of claim 'other' for claim 'c'"):
        seeds_to_decide(c, evaluate(_claim(key="other"), [1.0, 2.0]))
    with pytest.raises(ValueError, match="pass its ClaimResult"):
        seeds_to_decide(_claim(versus=("A", "B")), _iv(1.0, 1.0))


def test_seeds_to_decide_against_every_baseline_takes_the_largest_to_hold_and_the_smallest_to_fail():
    c = _claim("greater", 0.0, versus=("A", "B"))
    both_ahead = ClaimResult(c, _iv(1.0, 2.0), {"A": _iv(1.0, 2.0), "B": _iv(2.0, 2.0)})
    assert seeds_to_decide(c, both_ahead) == max(_smallest(1.0, 2.0, 0.95), _smallest(2.0, 2.0, 0.95)) == 18
    one_behind = ClaimResult(c, _iv(-1.0, 2.0), {"A": _iv(-1.0, 2.0), "B": _iv(2.0, 2.0)})
    assert seeds_to_decide(c, one_behind) == _smallest(1.0, 2.0, 1 - 0.05 / 2)  # the Bonferroni level
    assert _smallest(1.0, 2.0, 0.975) > 18


def test_the_table_names_the_comparators_and_how_many_seeds_would_decide():
    named = _claim("greater", 0.5, key="named", versus="FedAvg")  # the quantity text names X − Y only
    said = Claim("said", "q", "s", "accuracy, X − FedAvg, points", "greater", resolution=0.1, versus="FedAvg")
    every = _claim("greater", 0.5, key="every", versus=("A", "B"))
    results = [
        evaluate(named, [1.0, 3.0, 1.5], [0.0, 0.0, 0.0]),
        evaluate(said, [2.0, 2.5, 2.2]),
        evaluate(every, [2.0, 2.5, 2.2], {"A": [0.0, 0.1, 0.0], "B": [1.0, 1.0, 1.2]}),
        evaluate(_claim(key="one"), [1.0]),
    ]
    table = claims_table(results)
    assert table["quantity"].tolist() == ["accuracy, X − Y, points (vs FedAvg)", "accuracy, X − FedAvg, points",
                                          "accuracy, X − Y, points (vs A, B)", "accuracy, X − Y, points"]
    r = results[2]
    assert table.loc[2, "ours"] == (f"vs A {r.intervals['A'].format().rsplit(', ', 1)[0]}; "
                                    f"vs B {r.intervals['B'].format().rsplit(', ', 1)[0]}, 3 seeds")
    assert table["seeds to decide"].tolist() == [f"n = {seeds_to_decide(named, results[0])}", "decided",
                                                 f"n = {seeds_to_decide(every, r)}", "not from one seed"]
    assert table["verdict"].tolist() == [INCONCLUSIVE, HOLDS, INCONCLUSIVE, INCONCLUSIVE]
    assert says(r).startswith(f"every is inconclusive at this scale (vs {r.binding} ")
    assert "seeds to decide" in show(results).to_html()


def test_a_claim_lists_the_reads_of_its_sides_in_order():
    ours, a, b, within = Read("runs", "acc", method="x"), Read("runs", "acc", method="a"), Read("runs", "acc", method="b"), \
        Read("noise", "step")
    c = Claim("every", "X beats A and B.", "Table 1", "accuracy, points", "greater", resolution=0.1, versus=("a", "b"),
              ours=ours, baseline={"a": a, "b": b}, within=within)
    assert c.reads == [ours, a, b, within]
    assert Claim("n", "X beats 50.", "Table 1", "accuracy, points", "greater", resolution=0.1, ours=ours,
                 baseline=50.0).reads == [ours]


# ---------------------------------------------------------------- the smallest effect of interest, by one rule
def test_the_smallest_effect_is_a_share_of_the_papers_gain_else_the_default_of_its_kind():
    assert effect("points", paper=1.44).m == 0.72 and effect("points", paper=-2.13).m == 1.065  # the size, not the sign
    assert effect("points", paper=2.0, share=0.25).m == 0.5
    for kind, info in EFFECT_KINDS.items():
        e = effect(kind)
        assert (e.m, e.paper, e.kind) == (info.default, None, kind) and info.why
        assert e.describe() == f"m = {info.default:g}: the default for {kind}"
    c = Claim("k", "q", "s", "x", "greater", effect("points", paper=3.0), resolution=0.1)
    assert c.min_effect == 1.5 and c.effect == effect("points", paper=3.0) and c.testable
    assert "(m = 1.5: 0.5 of the paper’s +3)" in c.rule()
    assert Claim("k", "q", "s", "x", "greater", 1.5, resolution=0.1).effect is None  # by hand: the book refuses it


# ---------------------------------------------------------------- regime checks
def _runs():
    return {"runs": pd.DataFrame({"seed": [0, 1, 2], "acc": [3.0, 2.5, 2.8]}),
            "stability": pd.DataFrame({"seed": [0, 1, 2], "growth": [1.2, 6.6, 1.4]}),
            "probe": pd.DataFrame({"domain": ["a", "b", "c"], "acc": [95.0, 88.0, 31.0]})}


def test_a_regime_check_reads_its_quantity_from_the_same_results_and_summarizes_it_as_declared():
    growth = RegimeCheck("backbone stable", "spread growth, ×", Read("stability", "growth"), "at most", 2.0, "why")
    assert growth.check(_runs()).value == pytest.approx((1.2 + 6.6 + 1.4) / 3)
    worst = RegimeCheck("signal", "probe accuracy, %", Read("probe", "acc"), "at least", 50.0, "why", summary="min")
    best = dataclasses.replace(worst, summary="max")
    assert (worst.check(_runs()).value, worst.check(_runs()).passes) == (31.0, False)
    assert (best.check(_runs()).value, best.check(_runs()).passes) == (95.0, True)
    assert dataclasses.replace(worst, threshold=31.0).check(_runs()).passes  # on the threshold: passes
    assert growth.check({"runs": _runs()["runs"]}) is None  # not computed at this profile


def test_a_failed_regime_check_makes_the_row_untestable_in_this_setting_and_names_the_check():
    runs = _runs()
    ok = RegimeCheck("signal", "probe accuracy of the worst domain, %", Read("probe", "acc"), "at least", 30.0,
                     "a domain without signal cannot show a gain", summary="min")
    bad = RegimeCheck("backbone stable", "spread growth in the round after the departure, ×",
                      Read("stability", "growth"), "at most", 2.0, "a backbone still reshaping cannot test tracking")
    c = _claim("greater", 0.5, regimes=(ok, bad))
    assert c.reads[-2:] == [ok.read, bad.read]
    r = evaluate(c, runs["runs"]["acc"], regimes=[g.check(runs) for g in c.regimes])
    assert decide(c, r.interval) == HOLDS  # the interval alone would hold
    assert r.verdict == UNTESTABLE_SETTING and r.failed == (r.regimes[1],)
    assert r.verdict_text() == ("untestable in this setting: backbone stable: spread growth in the round after the "
                                "departure, × = 3.067 (needs at most 2)")
    assert seeds_to_decide(c, r) == "untestable" and r.shortfall is None
    assert "testable only with backbone stable: spread growth in the round after the departure, × at most 2 (a " \
           "backbone still reshaping cannot test tracking)" in c.rule()
    assert tally([r]) == {**dict.fromkeys(VERDICTS, 0), UNTESTABLE_SETTING: 1}
    passing = evaluate(c, runs["runs"]["acc"], regimes=[ok.check(runs), dataclasses.replace(
        r.regimes[1], value=1.5)])
    assert passing.verdict == HOLDS
    with pytest.raises(ValueError, match=r"declares the regime checks \['signal', 'backbone stable'\]"):
        evaluate(c, runs["runs"]["acc"])  # the readings must come with the claim


# ---------------------------------------------------------------- the probability of improvement
@pytest.mark.parametrize("wins, n", [(0, 3), (2, 3), (5, 5), (7, 10), (1, 1)])
def test_the_probability_of_improvement_is_the_wilson_interval_of_scipy(wins, n):
    d = np.r_[np.ones(wins), -np.ones(n - wins)]
    imp = Improvement.of([d], "greater")
    ref = stats.binomtest(wins, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert (imp.wins, imp.n, imp.share) == (wins, n, wins / n)
    assert imp.low == pytest.approx(ref.low, abs=1e-12) and imp.high == pytest.approx(ref.high, abs=1e-12)
    assert Improvement.of([-d], "less") == imp  # "less" wins when the difference is negative


def test_a_tie_counts_half_and_against_a_tuple_a_seed_counts_when_ours_beats_every_baseline():
    assert Improvement.of([[1.0, 0.0, -1.0, 2.0]], "greater").wins == 2.5
    assert Improvement.of([[1.0, 1.0, 1.0], [1.0, -1.0, 0.0]], "greater").wins == 1.5
    assert str(Improvement.of([[1.0, 2.0, 3.0, -1.0, 0.5]], "at least")) == "80 % [38, 96] of 5 seeds"
    every = _claim("greater", 0.5, versus=("A", "B"))
    r = evaluate(every, [2.0, 2.5, 2.2], {"A": [0.0, 3.0, 0.0], "B": [1.0, 1.0, 1.2]})
    assert r.improvement.wins == 2 and r.improvement.n == 3
    boot = evaluate(_claim(), [1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0], over="test samples", seed=0)
    assert str(boot.improvement).endswith("of 4 test samples") and boot.improvement.wins == 3.0


def test_a_regime_check_that_cannot_be_computed_fails_and_says_so():
    stable = RegimeCheck("backbone stable", "spread change, ×", Read("stability", "change"), "at most", 1.5, "why")
    reading = stable.check({"stability": pd.DataFrame({"seed": [0, 1], "change": [1.1, float("nan")]})})
    assert math.isnan(reading.value) and not reading.passes  # a run that ends at the departure round, say
    assert reading.text() == "backbone stable: spread change, × not computable in this setting (needs at most 1.5)"
    r = evaluate(_claim(regimes=(stable,)), [1.0, 2.0, 3.0], regimes=[reading])
    assert r.verdict == UNTESTABLE_SETTING and "not computable" in r.verdict_text()
    frame = pd.DataFrame({"seed": [0, 0, 1, 1], "domain": ["a", "b"] * 2, "acc": [90.0, 40.0, 92.0, 70.0]})
    probe = RegimeCheck("signal", "probe, %", Read("probe", "acc"), "at least", 50.0, "why", summary="min", by="domain")
    assert probe.check({"probe": frame.set_index(["seed", "domain"])}).value == 55.0  # b's mean, not its worst seed
    with pytest.raises(ValueError, match=r"by='dataset' is not a unit of Read\('probe', 'acc'\); valid: \['seed', 'domain'\]"):
        dataclasses.replace(probe, by="dataset").check({"probe": frame.set_index(["seed", "domain"])})
    with pytest.raises(ValueError, match="effect must be an Effect"):
        Claim("k", "q", "s", "x", "greater", 1.0, resolution=0.1, effect=1.0)


def test_the_outcome_splits_does_not_hold_by_its_kind():
    from fedbook.claims import OUTCOMES
    c = _claim("greater", 0.5)
    outcomes = [evaluate(c, v).outcome for v in ([2.0, 3.0, 2.5], [0.2, 0.3, 0.25], [-2.0, -3.0, -2.5], [1.0])]
    assert outcomes == [HOLDS, SMALLER, OPPOSITE, INCONCLUSIVE] and set(outcomes) <= set(OUTCOMES)


def test_regime_reading_groups_failing_readings_by_check_and_value():
    chk = RegimeCheck("support", "median count", Read("r", "n"), "at least", 10.0, "too few")
    c = lambda k: Claim(k, "q", "s", "x, points", "greater", effect("points", paper=2.0), resolution=0.1,  # noqa: E731
                        regimes=(chk,))
    read = lambda v: chk.check({"r": pd.DataFrame({"n": [v]})})  # noqa: E731
    low, lower, high = read(1.0), read(2.0), read(20.0)
    text = regime_reading({"a": evaluate(c("a"), [3.0, 4.0], regimes=(low,)),
                           "b": evaluate(c("b"), [3.0, 4.0], regimes=(lower,)),
                           "c": evaluate(c("c"), [3.0, 4.0], regimes=(low,)),
                           "d": evaluate(c("d"), [3.0, 4.0], regimes=(high,))}, {"support": "more data"})
    # two values of one check: two sentences, each naming its own rows; the passing reading names none
    assert text.count("The check “support” fails") == 2
    assert "(median count = 1, needs at least 10) and makes “a”, “c” untestable in this setting" in text
    assert "(median count = 2, needs at least 10) and makes “b” untestable in this setting" in text
    assert "“d”" not in text and "what would make them testable: more data." in text  # the remedy, at the first reading
    assert text.count("more data") == 1 and text.endswith("what would make it testable: as above.")  # said once
    assert "another setting" in regime_reading({"a": evaluate(c("a"), [3.0, 4.0], regimes=(low,))})
    assert regime_reading({"d": evaluate(c("d"), [3.0, 4.0], regimes=(high,))}).startswith("Every regime check passes")


def test_regime_table_keeps_two_readings_that_differ_as_two_rows():
    chk = RegimeCheck("support", "median count", Read("r", "n"), "at least", 10.0, "too few")
    c = lambda k: Claim(k, "q", "s", "x, points", "greater", effect("points", paper=2.0), resolution=0.1,  # noqa: E731
                        regimes=(chk,))
    low, high = chk.check({"r": pd.DataFrame({"n": [1.0, 2.0]})}), chk.check({"r": pd.DataFrame({"n": [20.0, 30.0]})})
    t = regime_table({"a": evaluate(c("a"), [3.0, 4.0], regimes=(low,)),
                      "b": evaluate(c("b"), [3.0, 4.0], regimes=(high,))})
    assert t[["value", "passes", "rows"]].values.tolist() == [[1.5, "no", "a"], [25.0, "yes", "b"]]
    # the same reading twice is one row guarding both
    t = regime_table({k: evaluate(c(k), [3.0, 4.0], regimes=(low,)) for k in ("a", "b")})
    assert t["rows"].tolist() == ["a; b"]
