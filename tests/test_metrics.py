"""Tests for fedlib.metrics: hand-computed fixtures, sklearn references, merge properties."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import balanced_accuracy_score, f1_score
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from fedlib.metrics import (
    ABILITIES,
    RARE_RATIO,
    Confusion,
    client_abilities,
    client_floor,
    client_predictions_abilities,
    confusion_matrix,
    format_metric,
    pooled_accuracy,
    pooled_effective_size,
    pooled_standard_error,
    protocol_summary,
    rare_classes,
    rescore,
    summarize,
    tail_mean,
    unseen_classes,
)

NAN = float("nan")
HYP = settings(max_examples=50, deadline=None)

# --------------------------------------------------------------------------- hand-computed fixture
#
# 3 classes, one client with train_counts [10, 1, 0]:
#   n = 11, uniform share 1/3, rare threshold 0.5 / 3 = 1/6
#   class 0: 10/11 >= 1/6 -> frequent; class 1: 1/11 < 1/6 -> rare; class 2: 0 -> unseen
#
# Global test confusion (rows = true):       recall
#   [[4, 0, 0],    class 0: 4/4             = 1
#    [1, 2, 1],    class 1: 2/4             = 1/2
#    [2, 1, 1]]    class 2: 1/4             = 1/4
#   accuracy = (4 + 2 + 1) / 12 = 7/12
#   balanced ("global") = (1 + 1/2 + 1/4) / 3 = 7/12   (coincides: 4 samples per class)
#   unseen = recall_2 = 1/4 ; rare = recall_1 = 1/2
#   column sums: [7, 3, 2]
#   F1_0: tp 4, fp 3, fn 0 -> 8 / 11
#   F1_1: tp 2, fp 1, fn 2 -> 4 / 7
#   F1_2: tp 1, fp 1, fn 3 -> 2 / 6 = 1/3
#
# Local test confusion (class 2 absent locally):
#   [[5, 0, 0], [1, 1, 0], [0, 0, 0]] -> accuracy 6/7 ; recall [1, 1/2, NaN]
#   floor F = min(local 6/7, unseen 1/4, rare 1/2) = 1/4

GLOBAL_M = np.array([[4, 0, 0], [1, 2, 1], [2, 1, 1]])
LOCAL_M = np.array([[5, 0, 0], [1, 1, 0], [0, 0, 0]])
COUNTS = [10, 1, 0]


def test_hand_fixture_confusion_metrics():
    g = Confusion(GLOBAL_M)
    assert g.n_classes == 3 and g.n_samples == 12
    assert g.accuracy() == pytest.approx(7 / 12)
    np.testing.assert_allclose(g.per_class_recall(), [1, 0.5, 0.25])
    assert g.balanced_accuracy() == pytest.approx(7 / 12)
    assert g.balanced_accuracy([1, 2]) == pytest.approx(3 / 8)  # (1/2 + 1/4) / 2
    assert g.f1(0) == pytest.approx(8 / 11)
    assert g.f1(1) == pytest.approx(4 / 7)
    assert g.f1(2) == pytest.approx(1 / 3)

    loc = Confusion(LOCAL_M)
    assert loc.accuracy() == pytest.approx(6 / 7)
    recall = loc.per_class_recall()
    np.testing.assert_allclose(recall[:2], [1, 0.5])
    assert np.isnan(recall[2])
    # balanced accuracy skips the class with no samples: (1 + 1/2) / 2
    assert loc.balanced_accuracy() == pytest.approx(3 / 4)
    assert math.isnan(loc.balanced_accuracy([2]))


def test_balanced_accuracy_differs_from_accuracy_when_unbalanced():
    # class 0: 8/8 correct, class 1: 0/2 correct -> acc 8/10, balanced (1 + 0)/2
    c = Confusion(np.array([[8, 0], [2, 0]]))
    assert c.accuracy() == pytest.approx(0.8)
    assert c.balanced_accuracy() == pytest.approx(0.5)


def test_hand_fixture_class_groups():
    assert unseen_classes(COUNTS).tolist() == [False, False, True]
    assert rare_classes(COUNTS).tolist() == [False, True, False]
    # rare_ratio 3: threshold 3/3 = 1 -> both observed classes are below it? 10/11 < 1 yes
    assert rare_classes(COUNTS, rare_ratio=3.0).tolist() == [True, True, False]


def test_rare_boundary_is_strict():
    # n = 6, C = 3, rho = 0.5 -> threshold 1/6; class 0 has exactly 1/6 -> not rare
    assert rare_classes([1, 3, 2]).tolist() == [False, False, False]
    # rho = 1 -> threshold 1/3: 1/6 rare, 3/6 not, 2/6 = 1/3 not (strict)
    assert rare_classes([1, 3, 2], rare_ratio=1.0).tolist() == [True, False, False]
    # n = 4, rho = 1: shares [1/2, 1/4, 1/4] -> classes 1, 2 rare
    assert rare_classes([2, 1, 1], rare_ratio=1.0).tolist() == [False, True, True]


def test_class_groups_edge_cases():
    # a client with no training data: all unseen, none rare
    assert unseen_classes([0, 0, 0]).all()
    assert not rare_classes([0, 0, 0]).any()
    # balanced client: nothing unseen or rare
    assert not unseen_classes([5, 5, 5]).any()
    assert not rare_classes([5, 5, 5]).any()
    assert RARE_RATIO == 0.5


def test_hand_fixture_client_abilities_and_floor():
    ab = client_abilities(Confusion(LOCAL_M), Confusion(GLOBAL_M), COUNTS, f1_class=1)
    assert list(ab) == ["local", "pooled", "global", "unseen", "rare", "f1"]
    assert ab["local"] == pytest.approx(6 / 7)
    # no own pool: the global test set is the pool; pi = (10, 1, 0) / 11, recalls (1, 1/2, 1/4)
    assert ab["pooled"] == pytest.approx((10 * 1 + 1 * 0.5) / 11)
    assert ab["global"] == pytest.approx(7 / 12)
    assert ab["unseen"] == pytest.approx(1 / 4)
    assert ab["rare"] == pytest.approx(1 / 2)
    assert ab["f1"] == pytest.approx(4 / 7)
    assert client_floor(ab) == pytest.approx(1 / 4)
    # without f1_class there is no f1 key
    assert "f1" not in client_abilities(Confusion(LOCAL_M), Confusion(GLOBAL_M), COUNTS)


def test_client_abilities_nan_when_group_empty():
    # balanced client: no unseen, no rare -> NaN, and the floor is the local accuracy
    ab = client_abilities(Confusion(LOCAL_M), Confusion(GLOBAL_M), [5, 5, 5])
    assert math.isnan(ab["unseen"]) and math.isnan(ab["rare"])
    assert client_floor(ab) == pytest.approx(6 / 7)
    # unseen class 1 and 2 (counts [4, 0, 0]): unseen = (1/2 + 1/4) / 2 = 3/8, no rare
    ab = client_abilities(Confusion(LOCAL_M), Confusion(GLOBAL_M), [4, 0, 0])
    assert ab["unseen"] == pytest.approx(3 / 8)
    assert math.isnan(ab["rare"])
    assert client_floor(ab) == pytest.approx(3 / 8)


def test_client_floor_ignores_global_and_f1():
    ab = {"local": 0.9, "global": 0.05, "unseen": NAN, "rare": 0.6, "f1": 0.0}
    assert client_floor(ab) == pytest.approx(0.6)
    assert math.isnan(client_floor({"local": NAN, "unseen": NAN, "rare": NAN}))
    with pytest.raises(ValueError, match="at least one of"):
        client_floor({"global": 0.5})
    # a pandas row works as the mapping
    assert client_floor(pd.Series({"local": 0.7, "rare": 0.4})) == pytest.approx(0.4)


# --------------------------------------------------------------------------- F1 corner cases


def test_f1_zero_division_is_zero():
    # class 2 neither present nor predicted -> 0/0 -> 0
    c = Confusion(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0]]))
    assert c.f1(2) == 0.0
    # class 1 present but never predicted -> precision 0/0 -> 0, recall 0 -> F1 0
    c = Confusion(np.array([[2, 0], [3, 0]]))
    assert c.f1(1) == 0.0
    assert c.f1(0) == pytest.approx(4 / 7)  # tp 2, fp 3, fn 0


# --------------------------------------------------------------------------- sklearn references


def _labels(n_classes_max=5, max_size=40):
    return st.integers(1, n_classes_max).flatmap(
        lambda c: st.tuples(
            st.just(c),
            st.integers(0, max_size).flatmap(
                lambda n: st.tuples(
                    st.lists(st.integers(0, c - 1), min_size=n, max_size=n),
                    st.lists(st.integers(0, c - 1), min_size=n, max_size=n),
                )
            ),
        )
    )


@HYP
@given(_labels())
def test_confusion_matches_sklearn(data):
    c, (y_true, y_pred) = data
    got = confusion_matrix(y_true, y_pred, c)
    assert got.shape == (c, c) and got.dtype == np.int64
    if y_true:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "A single label was found"
            ref = sk_confusion_matrix(y_true, y_pred, labels=list(range(c)))
        np.testing.assert_array_equal(got, ref)
    else:
        assert got.sum() == 0


@HYP
@given(_labels())
def test_f1_matches_sklearn(data):
    c, (y_true, y_pred) = data
    if not y_true:
        return
    conf = Confusion.from_predictions(y_true, y_pred, c)
    ref = f1_score(y_true, y_pred, labels=list(range(c)), average=None, zero_division=0)
    np.testing.assert_allclose([conf.f1(k) for k in range(c)], ref)


@HYP
@given(_labels())
def test_balanced_accuracy_matches_sklearn(data):
    c, (y_true, y_pred) = data
    if not y_true:
        return
    conf = Confusion.from_predictions(y_true, y_pred, c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "y_pred contains classes not in y_true"
        ref = balanced_accuracy_score(y_true, y_pred)
    assert conf.balanced_accuracy() == pytest.approx(ref)
    assert conf.accuracy() == pytest.approx(np.mean(np.array(y_true) == np.array(y_pred)))


def test_balanced_accuracy_sklearn_fixed():
    y_true = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    y_pred = [0, 0, 0, 0, 0, 1, 1, 2, 0, 0, 1, 2]  # the GLOBAL_M fixture as predictions
    conf = Confusion.from_predictions(y_true, y_pred, 3)
    np.testing.assert_array_equal(conf.matrix, GLOBAL_M)
    assert conf.balanced_accuracy() == pytest.approx(balanced_accuracy_score(y_true, y_pred))


# --------------------------------------------------------------------------- merge = pooled


@HYP
@given(_labels(), _labels())
def test_merge_equals_confusion_of_concatenation(a, b):
    c = max(a[0], b[0])
    (t1, p1), (t2, p2) = a[1], b[1]
    merged = Confusion.from_predictions(t1, p1, c).merge(Confusion.from_predictions(t2, p2, c))
    pooled = Confusion.from_predictions(t1 + t2, p1 + p2, c)
    np.testing.assert_array_equal(merged.matrix, pooled.matrix)
    np.testing.assert_array_equal((Confusion.from_predictions(t1, p1, c)
                                   + Confusion.from_predictions(t2, p2, c)).matrix, pooled.matrix)


@HYP
@given(_labels(max_size=60), st.integers(1, 5))
def test_federated_sum_equals_pooled(data, n_shards):
    c, (y_true, y_pred) = data
    cuts = np.array_split(np.arange(len(y_true)), n_shards)
    shards = [Confusion.from_predictions(np.array(y_true)[i], np.array(y_pred)[i], c) for i in cuts]
    pooled = Confusion.from_predictions(y_true, y_pred, c)
    np.testing.assert_array_equal(sum(shards).matrix, pooled.matrix)  # sum() starts at 0
    np.testing.assert_array_equal(
        sum(shards, Confusion.zeros(c)).matrix, pooled.matrix
    )


def test_confusion_is_immutable_and_copies():
    m = GLOBAL_M.copy()
    conf = Confusion(m)
    m[0, 0] = 99
    assert conf.matrix[0, 0] == 4
    with pytest.raises(ValueError):
        conf.matrix[0, 0] = 1


# --------------------------------------------------------------------------- tails


def test_tail_mean_ceil_rounding_20_clients():
    values = np.random.default_rng(0).permutation(np.arange(20)) / 20.0
    # bottom 20 %: ceil(0.2 * 20) = 4 lowest -> (0 + 1 + 2 + 3) / 4 / 20 = 0.075
    assert tail_mean(values, 0.2) == pytest.approx(0.075)
    # @25: ceil(0.25 * 20) = 5 lowest -> (0 + ... + 4) / 5 / 20 = 0.1
    assert tail_mean(values, 0.25) == pytest.approx(0.1)
    assert tail_mean(values, 1.0) == pytest.approx(np.mean(values))


def test_tail_mean_ceil_rounding_7_clients_and_nan():
    values = [0.9, 0.1, 0.5, 0.7, 0.3, 0.8, 0.6]
    # ceil(0.25 * 7) = ceil(1.75) = 2 -> (0.1 + 0.3) / 2
    assert tail_mean(values, 0.25) == pytest.approx(0.2)
    # ceil(0.2 * 7) = ceil(1.4) = 2 as well
    assert tail_mean(values, 0.2) == pytest.approx(0.2)
    # NaN clients do not count: 4 defined -> ceil(1.0) = 1 -> 0.3
    assert tail_mean([NAN, 0.9, 0.3, NAN, 0.5, 0.7], 0.25) == pytest.approx(0.3)
    assert math.isnan(tail_mean([NAN, NAN], 0.25))
    assert math.isnan(tail_mean([], 0.25))


def test_tail_mean_no_float_overshoot():
    # 0.07 * 100 == 7.000000000000001 in floating point; the tail must still use 7 values
    values = np.arange(100, dtype=float) / 100
    assert tail_mean(values, 0.07) == pytest.approx(np.mean(values[:7]))


@HYP
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30), st.floats(0.01, 1))
def test_tail_mean_matches_sorted_slice(values, q):
    k = math.ceil(round(q * len(values), 9))
    expected = np.mean(np.sort(values)[:k])
    got = tail_mean(values, q)
    assert got == pytest.approx(expected)
    assert min(values) - 1e-12 <= got <= np.mean(values) + 1e-12


# --------------------------------------------------------------------------- summaries

# 8 clients whose weakest ability differs (hand-computed):
#   client  local  unseen  rare   F = min of assessed
#   A       .90    .10     .80    .10   (weak on unseen)
#   B       .90    .80     .20    .20   (weak on rare)
#   C       .85    .70     .70    .70
#   D       .80    .90     .90    .80
#   E       .95    .60     .60    .60
#   F       .90    n/a     .50    .50   (no unseen class: contributes via local, rare)
#   G       .70    .75     n/a    .70
#   H       .75    n/a     n/a    .75
# L@25: m = 8, ceil(2) = 2 lowest of local: .70, .75 -> .725
# U@25: m = 6, ceil(1.5) = 2 lowest of unseen: .10, .60 -> .35
# R@25: m = 6, ceil(1.5) = 2 lowest of rare: .20, .50 -> .35
# F@25: m = 8, 2 lowest of F: .10, .20 -> .15  !=  min(L@25, U@25, R@25) = .35
PER_CLIENT = pd.DataFrame(
    {
        "local": [0.90, 0.90, 0.85, 0.80, 0.95, 0.90, 0.70, 0.75],
        "global": [0.50, 0.60, 0.70, 0.80, 0.40, 0.55, 0.65, 0.75],
        "unseen": [0.10, 0.80, 0.70, 0.90, 0.60, NAN, 0.75, NAN],
        "rare": [0.80, 0.20, 0.70, 0.90, 0.60, 0.50, NAN, NAN],
    },
    index=pd.Index(list("ABCDEFGH"), name="client"),
)


def test_protocol_summary_floors_hand_computed():
    s = protocol_summary(PER_CLIENT)
    assert s["L@25"] == pytest.approx(0.725)
    assert s["U@25"] == pytest.approx(0.35)
    assert s["R@25"] == pytest.approx(0.35)
    assert s["F@25"] == pytest.approx(0.15)
    assert s["F@25"] < min(s["L@25"], s["U@25"], s["R@25"])
    # means over the clients where defined
    assert s["local"] == pytest.approx(6.75 / 8)
    assert s["unseen"] == pytest.approx(3.85 / 6)
    assert s["rare"] == pytest.approx(3.70 / 6)
    assert s["global"] == pytest.approx(4.95 / 8)
    # local: worst .70, bottom-20 % = ceil(1.6) = 2 lowest = .725, gap .95 - .70
    assert s["worst_local"] == pytest.approx(0.70)
    assert s["bottom20_local"] == pytest.approx(0.725)
    assert s["gap_local"] == pytest.approx(0.25)
    # global: sorted .40 .50 .55 ... .80 -> worst .40, bottom-20 % (.40 + .50) / 2, gap .40
    assert s["worst_global"] == pytest.approx(0.40)
    assert s["bottom20_global"] == pytest.approx(0.45)
    assert s["gap_global"] == pytest.approx(0.40)
    assert "f1" not in s
    # the per-client floors agree with client_floor row by row
    floors = [client_floor(row) for _, row in PER_CLIENT.iterrows()]
    np.testing.assert_allclose(floors, [0.1, 0.2, 0.7, 0.8, 0.6, 0.5, 0.7, 0.75])


def test_summarize_table():
    t = summarize(PER_CLIENT.assign(f1=[0.0, 0.5, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5]))
    assert list(t.index) == ["local", "global", "unseen", "rare", "f1"]  # in ABILITIES order, pooled absent
    assert list(t.columns) == ["mean", "worst", "bottom20", "gap", "at25", "n_clients"]
    assert t["n_clients"].tolist() == [8, 8, 6, 6, 8]
    # unseen (6 defined): sorted .10 .60 .70 .75 .80 .90
    u = t.loc["unseen"]
    assert u["worst"] == pytest.approx(0.10)
    assert u["gap"] == pytest.approx(0.80)
    assert u["bottom20"] == pytest.approx(0.35)  # ceil(1.2) = 2 lowest
    assert u["at25"] == pytest.approx(0.35)  # ceil(1.5) = 2 lowest
    assert t.loc["f1", "mean"] == pytest.approx(4.0 / 8)
    assert protocol_summary(PER_CLIENT.assign(f1=0.25))["f1"] == pytest.approx(0.25)


def test_twenty_clients_bottom20_uses_4_and_at25_uses_5():
    local = np.arange(20) / 20.0
    s = protocol_summary(pd.DataFrame({a: local for a in ("local", "global", "unseen", "rare")}))
    assert s["bottom20_local"] == pytest.approx(0.075)  # 4 lowest
    assert s["L@25"] == pytest.approx(0.1)  # 5 lowest
    assert s["F@25"] == pytest.approx(0.1)
    assert math.isnan(s["P@25"])  # no pooled column
    pooled = protocol_summary(pd.DataFrame({a: local for a in ("local", "global", "unseen", "rare")}).assign(pooled=local[::-1]))
    assert pooled["P@25"] == pytest.approx(0.1) and pooled["bottom20_pooled"] == pytest.approx(0.075)  # the same 5 and 4 lowest


def test_no_client_with_unseen_classes_is_na_not_zero():
    df = PER_CLIENT.assign(unseen=NAN)
    s = protocol_summary(df)
    assert math.isnan(s["unseen"]) and math.isnan(s["U@25"])
    assert format_metric(s["U@25"]) == "n/a"
    # F@25 is still defined through local and rare: F = [.8, .2, .7, .8, .6, .5, .7, .75]
    # 2 lowest -> (.2 + .5) / 2
    assert s["F@25"] == pytest.approx(0.35)
    t = summarize(df)
    assert t.loc["unseen", "n_clients"] == 0
    assert t.loc["unseen", ["mean", "worst", "bottom20", "gap", "at25"]].isna().all()


def test_client_abilities_to_protocol_end_to_end():
    # two clients built from the hand fixture: the [10, 1, 0] client and a balanced one
    g, loc = Confusion(GLOBAL_M), Confusion(LOCAL_M)
    rows = {
        "k0": client_abilities(loc, g, [10, 1, 0], f1_class=1),
        "k1": client_abilities(loc, g, [5, 5, 5], f1_class=1),
    }
    s = protocol_summary(pd.DataFrame.from_dict(rows, orient="index"))
    assert s["unseen"] == pytest.approx(0.25)  # only k0 has an unseen class
    assert s["rare"] == pytest.approx(0.5)
    # F = [1/4, 6/7]; ceil(0.25 * 2) = 1 -> 1/4
    assert s["F@25"] == pytest.approx(0.25)
    assert s["f1"] == pytest.approx(4 / 7)


# --------------------------------------------------------------------------- formatting


def test_format_metric():
    assert format_metric(0.875) == "87.5"
    assert format_metric(np.float64(0.12345), digits=2) == "12.35"
    assert format_metric(0.5, digits=3, percent=False) == "0.500"
    assert format_metric(1) == "100.0"
    assert format_metric(NAN) == "n/a"
    assert format_metric(np.nan) == "n/a"
    assert format_metric(None) == "n/a"
    assert format_metric(pd.NA) == "n/a"
    with pytest.raises(TypeError, match="real number"):
        format_metric("0.5")
    with pytest.raises(ValueError, match="digits"):
        format_metric(0.5, digits=-1)


# --------------------------------------------------------------------------- validation


def test_labels_out_of_range_name_value_and_range():
    with pytest.raises(ValueError, match=r"label 3 outside the valid range \[0, 3\)"):
        confusion_matrix([0, 3], [0, 1], 3)
    with pytest.raises(ValueError, match=r"y_pred holds label -1"):
        Confusion.from_predictions([0, 1], [0, -1], 3)
    with pytest.raises(ValueError, match="same shape"):
        confusion_matrix([0, 1], [0], 3)
    with pytest.raises(ValueError, match="n_classes"):
        confusion_matrix([0], [0], 0)
    with pytest.raises(ValueError, match="integer class labels"):
        confusion_matrix([0.5], [0], 2)
    # integral floats are fine
    np.testing.assert_array_equal(confusion_matrix([0.0, 1.0], [1, 1], 2), [[0, 1], [0, 1]])


def test_confusion_validation():
    with pytest.raises(ValueError, match="square"):
        Confusion(np.zeros((2, 3), dtype=int))
    with pytest.raises(ValueError, match=">= 0"):
        Confusion(np.array([[1, -1], [0, 0]]))
    with pytest.raises(ValueError, match=r"shapes \(2, 2\) and \(3, 3\)"):
        Confusion.zeros(2).merge(Confusion.zeros(3))
    with pytest.raises(ValueError, match=r"c must be a class index in \[0, 3\).*got 3"):
        Confusion(GLOBAL_M).f1(3)
    with pytest.raises(ValueError, match="class index 5"):
        Confusion(GLOBAL_M).balanced_accuracy([0, 5])
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        Confusion(GLOBAL_M).balanced_accuracy(np.array([True, False]))


def test_rare_ratio_and_fraction_validation():
    for bad in (0, -0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"rare_ratio must be .*got {bad}"):
            rare_classes(COUNTS, rare_ratio=bad)
    with pytest.raises(ValueError, match="rare_ratio"):
        client_abilities(Confusion(LOCAL_M), Confusion(GLOBAL_M), COUNTS, rare_ratio=0)
    for bad in (0, -0.1, 1.5):
        with pytest.raises(ValueError, match=rf"fraction must be in \(0, 1\], got {bad}"):
            tail_mean([0.5], bad)
    with pytest.raises(ValueError, match="finite or NaN"):
        tail_mean([0.5, float("-inf")], 0.25)


def test_train_counts_validation():
    with pytest.raises(ValueError, match=r"got -1.0 at class 1"):
        unseen_classes([3, -1, 0])
    with pytest.raises(ValueError, match="1-D"):
        rare_classes([[1, 2]])
    with pytest.raises(ValueError, match="local has 3 classes but train_counts has 2"):
        client_abilities(Confusion(LOCAL_M), Confusion(GLOBAL_M), [1, 2])
    with pytest.raises(ValueError, match=r"f1_class must be a class index in \[0, 3\).*got 7"):
        client_abilities(Confusion(LOCAL_M), Confusion(GLOBAL_M), COUNTS, f1_class=7)


def test_per_client_table_validation():
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['acc'\]"):
        summarize(PER_CLIENT.assign(acc=0.5))
    with pytest.raises(ValueError, match=r"'local' holds 87.5.*\[0, 1\]"):
        summarize(PER_CLIENT.assign(local=87.5))
    with pytest.raises(ValueError, match=r"lacks required column\(s\) \['rare'\]"):
        protocol_summary(PER_CLIENT.drop(columns="rare"))
    with pytest.raises(TypeError, match="DataFrame"):
        summarize({"local": [0.5]})


# --------------------------------------------------------------------------- pooled accuracy
#
# One client with train_counts [6, 3, 1, 0]: n = 10, pi = (0.6, 0.3, 0.1, 0).
# Its own pool (class-balanced, 10 per class), confusion rows = true class:
#   [[9, 1, 0, 0],   r_0 = 9/10 = 0.9
#    [2, 6, 2, 0],   r_1 = 6/10 = 0.6
#    [0, 5, 5, 0],   r_2 = 5/10 = 0.5
#    [0, 0, 0, 10]]  r_3 = 1 (weight 0)
#   pooled = 0.6 * 0.9 + 0.3 * 0.6 + 0.1 * 0.5 = 0.54 + 0.18 + 0.05 = 0.77
#   SE^2 = 0.36 * 0.9 * 0.1 / 10 + 0.09 * 0.6 * 0.4 / 10 + 0.01 * 0.5 * 0.5 / 10
#        = 0.00324 + 0.00216 + 0.00025 = 0.00565 ;  SE = sqrt(0.00565)
#   n_eff = 1 / ((0.36 + 0.09 + 0.01) / 10) = 10 / 0.46 = 21.739...
# Its (tiny) local test split: [[2, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]] -> 3/4.

POOL_M = np.array([[9, 1, 0, 0], [2, 6, 2, 0], [0, 5, 5, 0], [0, 0, 0, 10]])
POOL_COUNTS = [6, 3, 1, 0]


def test_pooled_hand_computed():
    pool = Confusion(POOL_M)
    assert pooled_accuracy(pool, POOL_COUNTS) == pytest.approx(0.77)
    assert pooled_standard_error(pool, POOL_COUNTS) == pytest.approx(math.sqrt(0.00565))
    assert pooled_effective_size(pool.support(), POOL_COUNTS) == pytest.approx(10 / 0.46)
    local = Confusion(np.array([[2, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]))
    glob = Confusion(np.diag([10, 10, 10, 10]))  # a perfect global test score: the pool is not the global test
    ab = client_abilities(local, glob, POOL_COUNTS, pool=pool)
    assert ab["pooled"] == pytest.approx(0.77) and ab["local"] == pytest.approx(0.75) and ab["global"] == 1.0
    # without the pool, the pooled score is read off the global test set
    assert client_abilities(local, glob, POOL_COUNTS)["pooled"] == pytest.approx(1.0)


def test_pooled_from_label_arrays_and_rescore_match():
    # the pool of POOL_M as label arrays: pooled from predictions equals pooled from the confusion
    y_true = np.repeat(np.arange(4), POOL_M.sum(axis=1))
    y_pred = np.concatenate([np.repeat(np.arange(4), row) for row in POOL_M])
    ab = client_predictions_abilities([0], [0], [0, 1, 2, 3], [0, 1, 2, 3], POOL_COUNTS, pool_true=y_true, pool_pred=y_pred)
    assert ab["pooled"] == pytest.approx(0.77)
    with pytest.raises(ValueError, match="pool_true is given but pool_pred is None"):
        client_predictions_abilities([0], [0], [0], [0], POOL_COUNTS, pool_true=y_true)
    with pytest.raises(ValueError, match="pool_pred is given but pool_true is None"):
        client_predictions_abilities([0], [0], [0], [0], POOL_COUNTS, pool_pred=y_pred)


def test_pooled_effective_size_uniform_and_one_class():
    # uniform mix over a pool of N / C per class: all N images count
    assert pooled_effective_size([25, 25, 25, 25], [1, 1, 1, 1]) == pytest.approx(100)
    # pi proportional to N_c: the whole pool as well (Cauchy-Schwarz's equality case)
    assert pooled_effective_size([10, 30, 60], [1, 3, 6]) == pytest.approx(100)
    # one class: that class's images only
    assert pooled_effective_size([25, 25, 25, 25], [0, 7, 0, 0]) == pytest.approx(25)
    # never above the pool images of the client's classes
    rng = np.random.default_rng(0)
    for _ in range(20):
        n_pool, counts = rng.integers(1, 50, size=5), rng.integers(0, 20, size=5)
        if counts.sum() == 0:
            continue
        assert pooled_effective_size(n_pool, counts) <= n_pool[counts > 0].sum() + 1e-9


def test_pooled_standard_error_and_effective_size_against_simulation():
    # binomial draws of the pool's per-class hits at known recalls r_c: the pooled score's spread
    # matches the standard error; with equal recalls its variance is r (1 - r) / n_eff
    rng = np.random.default_rng(1)
    n_pool = np.array([40, 40, 40, 40, 40])
    counts = np.array([50, 20, 20, 10, 0])
    pi = counts / counts.sum()
    r = np.array([0.9, 0.7, 0.5, 0.3, 0.8])
    hits = rng.binomial(n_pool, r, size=(40_000, 5))  # (draws, C)
    scores = (hits / n_pool) @ pi  # (draws,)
    # a pool confusion with exactly these recalls (40 r_c = 36, 28, 20, 12, 32 hits; misses go to the next class)
    m = np.diag((n_pool * r).round().astype(int))
    m[np.arange(5), (np.arange(5) + 1) % 5] = n_pool - np.diag(m)
    expected_confusion = Confusion(m)
    np.testing.assert_allclose(expected_confusion.per_class_recall(), r)
    se = pooled_standard_error(expected_confusion, counts)
    assert se == pytest.approx(math.sqrt(np.sum(pi ** 2 * r * (1 - r) / n_pool)))
    assert scores.std() == pytest.approx(se, rel=0.02)
    assert scores.mean() == pytest.approx(pooled_accuracy(expected_confusion, counts), abs=3 * se / 200)
    # equal recalls: Var = r (1 - r) / n_eff
    hits = rng.binomial(n_pool, 0.6, size=(40_000, 5))
    n_eff = pooled_effective_size(n_pool, counts)
    assert ((hits / n_pool) @ pi).var() == pytest.approx(0.6 * 0.4 / n_eff, rel=0.03)


def test_pooled_renormalises_over_classes_the_pool_holds():
    # class 1 (pi = 0.5) has no pool sample: pi renormalised over classes 0 and 2 -> (0.6, 0.4)
    pool = Confusion(np.array([[4, 1, 0], [0, 0, 0], [0, 3, 2]]))  # r = (0.8, NaN, 0.4)
    counts = [3, 5, 2]
    assert pooled_accuracy(pool, counts) == pytest.approx(0.6 * 0.8 + 0.4 * 0.4)
    assert pooled_standard_error(pool, counts) == pytest.approx(math.sqrt(0.36 * 0.16 / 5 + 0.16 * 0.24 / 5))
    assert pooled_effective_size(pool.support(), counts) == pytest.approx(1 / (0.36 / 5 + 0.16 / 5))


def test_pooled_is_nan_safe():
    pool = Confusion(POOL_M)
    # no training sample: NaN, not 0
    for f in (pooled_accuracy, pooled_standard_error):
        assert math.isnan(f(pool, [0, 0, 0, 0]))
    assert math.isnan(pooled_effective_size([10, 10, 10, 10], [0, 0, 0, 0]))
    # the pool holds none of the client's classes: NaN
    only3 = Confusion(np.diag([0, 0, 0, 10]))
    assert math.isnan(pooled_accuracy(only3, [1, 2, 0, 0]))
    assert math.isnan(pooled_effective_size([0, 0, 0, 10], [1, 2, 0, 0]))
    # an empty pool: NaN
    assert math.isnan(pooled_accuracy(Confusion.zeros(4), POOL_COUNTS))
    ab = client_abilities(Confusion.zeros(4), Confusion.zeros(4), [0, 0, 0, 0])
    assert math.isnan(ab["pooled"])
    # a NaN pooled score is "not defined" in the summaries, never 0
    per_client = pd.DataFrame({"local": [0.5, 0.7], "pooled": [NAN, 0.6], "global": [0.4, 0.4],
                               "unseen": [0.1, 0.2], "rare": [NAN, NAN]})
    s = protocol_summary(per_client)
    assert s["pooled"] == pytest.approx(0.6) and s["worst_pooled"] == pytest.approx(0.6) and s["gap_pooled"] == 0.0
    assert summarize(per_client).loc["pooled", "n_clients"] == 1


def test_pooled_refuses_bad_input():
    pool = Confusion(POOL_M)
    with pytest.raises(TypeError, match="pool must be a Confusion, got ndarray"):
        pooled_accuracy(POOL_M, POOL_COUNTS)
    with pytest.raises(TypeError, match="pool must be a Confusion, got list"):
        client_abilities(Confusion(POOL_M), Confusion(POOL_M), POOL_COUNTS, pool=[1])
    with pytest.raises(ValueError, match="pool has 4 classes but train_counts has 3"):
        pooled_standard_error(pool, [1, 2, 3])
    with pytest.raises(ValueError, match="pool has 4 classes but train_counts has 3"):
        client_abilities(Confusion(GLOBAL_M), Confusion(GLOBAL_M), COUNTS, pool=pool)
    with pytest.raises(ValueError, match=r"train_counts must be finite and >= 0, got -1.0 at class 1"):
        pooled_accuracy(pool, [1, -1, 0, 0])
    with pytest.raises(ValueError, match=r"pool_class_counts must be finite and >= 0, got nan at class 2"):
        pooled_effective_size([10, 10, NAN, 10], POOL_COUNTS)
    with pytest.raises(ValueError, match="pool_class_counts has 3 classes but train_counts has 4"):
        pooled_effective_size([10, 10, 10], POOL_COUNTS)
    with pytest.raises(ValueError, match=r"pool_class_counts must be a non-empty 1-D array of shape \(n_classes,\)"):
        pooled_effective_size([[10, 10]], [1, 1])
    with pytest.raises(ValueError, match="pool_true holds label 7 outside the valid range"):
        client_predictions_abilities([0], [0], [0], [0], POOL_COUNTS, pool_true=[7], pool_pred=[0])
    with pytest.raises(ValueError, match=r"pool_true and pool_pred must have the same shape, got \(2,\) and \(1,\)"):
        client_predictions_abilities([0], [0], [0], [0], POOL_COUNTS, pool_true=[0, 1], pool_pred=[0])


def test_abilities_order_and_protocol_summary_pooled_keys():
    assert ABILITIES == ("local", "pooled", "global", "unseen", "rare", "f1")
    s = protocol_summary(PER_CLIENT.assign(pooled=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]))
    assert s["pooled"] == pytest.approx(0.55)
    assert s["worst_pooled"] == pytest.approx(0.2)
    assert s["bottom20_pooled"] == pytest.approx(0.25)  # ceil(1.6) = 2 lowest
    assert s["gap_pooled"] == pytest.approx(0.7)
    assert s["P@25"] == pytest.approx(0.25)  # ceil(8 / 4) = 2 lowest
    assert list(s)[:5] == ["local", "pooled", "global", "unseen", "rare"]
    # a table without the pooled column (made before it existed): the pooled keys are n/a
    old = protocol_summary(PER_CLIENT)
    pooled_keys = ("pooled", "worst_pooled", "bottom20_pooled", "gap_pooled", "P@25")
    assert all(math.isnan(old[k]) for k in pooled_keys)
    assert {k: v for k, v in old.items() if k not in pooled_keys} == pytest.approx(
        {k: v for k, v in s.items() if k not in pooled_keys}, nan_ok=True)


def test_rescore_scores_pooled_on_the_right_pool():
    from types import SimpleNamespace

    from fedlib.data import ArrayDataset
    import torch

    def ds(labels):
        return ArrayDataset(torch.zeros(len(labels), 1), torch.tensor(labels), 2, "toy")

    glob = ds([0, 0, 1, 1])
    own = ds([0, 1, 0, 1])
    clients = [SimpleNamespace(train=ds([0, 0, 0, 1]), test=ds([0]), pool=None,
                               train_counts=lambda C: np.array([3, 1])),
               SimpleNamespace(train=ds([0, 0, 0, 1]), test=ds([0]), pool=own,
                               train_counts=lambda C: np.array([3, 1]))]
    fed = SimpleNamespace(clients=clients, global_test=glob, n_classes=2)
    g_pred = np.array([0, 1, 1, 1])  # recalls (1/2, 1) on the global test
    table = rescore(fed, {0: (np.array([0]), g_pred), 1: (np.array([0]), g_pred, np.array([0, 1, 0, 0]))})
    assert table.loc[0, "pooled"] == pytest.approx(0.75 * 0.5 + 0.25 * 1)
    assert table.loc[1, "pooled"] == pytest.approx(0.75 * 1 + 0.25 * 0.5)  # recalls (1, 1/2) on its own pool
    # kept predictions without the pool's: n/a, never the global test's score
    assert math.isnan(rescore(fed, {1: (np.array([0]), g_pred)}).loc[1, "pooled"])
    with pytest.raises(ValueError, match=r"predictions\[0\] must be \(local, global\) or \(local, global, pool\)"):
        rescore(fed, {0: (np.array([0]),)})


def test_pooled_largest_step_by_hand():
    from fedlib.metrics import pooled_largest_step

    # mix (0.5, 0.5, 0) over a pool of (10, 40, 5) images: the steps are 0.05, 0.0125 (class 2 holds no weight)
    assert pooled_largest_step([10, 40, 5], [3, 3, 0]) == pytest.approx(0.05)
    # a class the pool lacks is dropped and the mix renormalised: (0.25, 0.75) over (10, 40) -> 0.025 vs 0.01875
    assert pooled_largest_step([10, 40, 0], [1, 3, 4]) == pytest.approx(0.025)
    assert math.isnan(pooled_largest_step([10, 40, 5], [0, 0, 0]))
    with pytest.raises(ValueError, match="pool_class_counts has 2 classes but train_counts has 3"):
        pooled_largest_step([10, 40], [1, 1, 1])


# --------------------------------------------------------------------------- floor_at25 (FedGRC, issue 38)


def test_floor_at25_default_is_protocol_F25_and_pooled_replaces_local():
    from fedlib.metrics import floor_at25

    nan = float("nan")
    t = pd.DataFrame({"local": [1.0, 0.25, 0.5, 0.75, 0.9, 0.6, 0.95, 0.8],
                      "pooled": [0.9, 0.85, 0.7, 0.95, 0.8, 0.9, 0.88, 0.99],
                      "global": [0.5] * 8,
                      "unseen": [0.6, nan, 0.8, 0.9, 0.3, nan, 0.7, 0.65],
                      "rare": [nan, 0.55, nan, nan, nan, 0.45, nan, nan]})
    # local floors: 0.6, 0.25, 0.5, 0.75, 0.3, 0.45, 0.7, 0.65 -> the 2 lowest of 8: (0.25 + 0.3) / 2
    assert floor_at25(t) == pytest.approx(0.275)
    assert floor_at25(t) == pytest.approx(protocol_summary(t)["F@25"])
    # pooled floors: 0.6, 0.55, 0.7, 0.9, 0.3, 0.45, 0.7, 0.65 -> (0.3 + 0.45) / 2
    assert floor_at25(t, ("pooled", "unseen", "rare")) == pytest.approx(0.375)
    # a mutation that takes the mean of the abilities instead of their minimum gives another value
    mutated = t[["pooled", "unseen", "rare"]].mean(axis=1).nsmallest(2).mean()
    assert mutated != pytest.approx(0.375)


def test_floor_at25_refuses_unknown_abilities_and_missing_columns():
    from fedlib.metrics import floor_at25

    t = pd.DataFrame({"local": [1.0], "global": [0.5], "unseen": [0.5], "rare": [0.5]})
    with pytest.raises(ValueError, match="abilities must be"):
        floor_at25(t, ("loocal",))
    with pytest.raises(ValueError, match="abilities must be"):
        floor_at25(t, ["local"])
    with pytest.raises(ValueError, match="lacks required column"):
        floor_at25(t, ("pooled", "unseen"))
    assert math.isnan(floor_at25(t.assign(unseen=float("nan"), rare=float("nan")), ("unseen", "rare")))


def test_tail_count_and_lowest_tail_are_what_tail_mean_averages():
    from fedlib.metrics import FLOOR_FRACTION, _FLOOR_FRACTION, _tail_count, lowest_tail, tail_count

    assert (tail_count(0.25, 5), tail_count(0.07, 100), tail_count(0.25, 1), tail_count(0.25, 8)) == (2, 7, 1, 2)
    assert _tail_count is tail_count and _FLOOR_FRACTION == FLOOR_FRACTION == 0.25
    v = np.array([4.0, np.nan, 1.0, 3.0, 2.0, 9.0])  # 5 defined: ceil(1.25) = 2
    assert lowest_tail(v).tolist() == [1.0, 2.0]
    assert float(lowest_tail(v, 0.5).mean()) == tail_mean(v, 0.5) == 2.0  # ceil(2.5) = 3: 1, 2, 3
    assert lowest_tail(np.array([np.nan])).size == 0
    # a floor without the ceiling (floor(q m), or q m unrounded) would take 1 of 5 here, and 8 of 100 at 0.07
    assert tail_count(0.25, 5) != int(0.25 * 5) and tail_count(0.07, 100) != math.ceil(0.07 * 100)
