"""Tests for fedlib.data.partition: hand-computed fixtures and hypothesis properties."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fedlib.data import (  # noqa: E402
    PARTITIONS,
    client_class_counts,
    dirichlet_partition,
    global_test_split,
    group_partition,
    grouped_dirichlet_partition,
    iid_partition,
    label_subset_partition,
    make_partition,
    partition_summary,
    plot_partition,
    powerlaw_partition,
    split_train_test,
)

SETTINGS = settings(max_examples=30, deadline=None)


def assert_valid_partition(parts: list[np.ndarray], n: int, cover: bool = True) -> None:
    """Sorted int64 arrays, pairwise disjoint, covering range(n)."""
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0)  # sorted, no repeats
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert len(np.unique(flat)) == len(flat)  # disjoint
    if cover:
        assert np.array_equal(np.sort(flat), np.arange(n))


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


@st.composite
def labelled(draw, max_classes: int = 6, max_n: int = 150):
    """(labels, n_clients, seed) with 1 <= n_clients <= n."""
    n_classes = draw(st.integers(1, max_classes))
    labels = np.array(draw(st.lists(st.integers(0, n_classes - 1), min_size=1, max_size=max_n)))
    n_clients = draw(st.integers(1, min(len(labels), 12)))
    seed = draw(st.integers(0, 2**32 - 1))
    return labels, n_clients, seed


BIG_LABELS = np.repeat(np.arange(10), 50)  # 500 samples, 10 balanced classes


# --------------------------------------------------------------------------------------------
# iid
# --------------------------------------------------------------------------------------------


def test_iid_hand_sizes():
    parts = iid_partition(np.zeros(10, dtype=int), n_clients=3, seed=0)
    assert [len(p) for p in parts] == [4, 3, 3]
    assert_valid_partition(parts, 10)


@SETTINGS
@given(labelled())
def test_iid_properties(case):
    labels, n_clients, seed = case
    parts = iid_partition(labels, n_clients, seed)
    assert len(parts) == n_clients
    assert_valid_partition(parts, len(labels))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert same(parts, iid_partition(labels, n_clients, seed))


# --------------------------------------------------------------------------------------------
# Dirichlet
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(
    labelled(),
    st.sampled_from([0.01, 0.1, 0.5, 1.0, 10.0, 1000.0]),
    st.integers(0, 4),
)
def test_dirichlet_properties(case, alpha, min_size):
    labels, n_clients, seed = case
    min_size = min(min_size, len(labels) // n_clients)
    parts = dirichlet_partition(labels, n_clients, alpha, min_size=min_size, seed=seed)
    assert len(parts) == n_clients
    assert_valid_partition(parts, len(labels))
    assert min(len(p) for p in parts) >= min_size
    assert same(parts, dirichlet_partition(labels, n_clients, alpha, min_size=min_size, seed=seed))


def test_dirichlet_seeds_differ_and_alpha_controls_skew():
    a = dirichlet_partition(BIG_LABELS, 5, 0.5, seed=0)
    b = dirichlet_partition(BIG_LABELS, 5, 0.5, seed=1)
    assert not same(a, b)
    # huge alpha: every client gets ~1/5 of every class (50 / 5 = 10 each)
    counts = client_class_counts(BIG_LABELS, dirichlet_partition(BIG_LABELS, 5, 1e6, seed=0), 10)
    assert np.abs(counts - 10).max() <= 1
    # tiny alpha without repair: most (client, class) cells are empty
    skewed = client_class_counts(
        BIG_LABELS, dirichlet_partition(BIG_LABELS, 5, 0.01, min_size=0, seed=0), 10
    )
    assert (skewed > 0).sum() <= 15


def test_dirichlet_1000_clients_tiny_alpha_with_min_size():
    labels = np.random.default_rng(0).integers(0, 10, size=60_000)
    parts = dirichlet_partition(labels, 1000, 0.01, min_size=10, seed=3)
    assert len(parts) == 1000
    assert min(len(p) for p in parts) >= 10
    assert_valid_partition(parts, 60_000)


@pytest.mark.parametrize("alpha", [0, 0.0, -1.0, math.nan, math.inf])
def test_dirichlet_bad_alpha(alpha):
    with pytest.raises(ValueError, match=f"alpha must be a finite number > 0, got alpha={alpha!r}"):
        dirichlet_partition(BIG_LABELS, 5, alpha, seed=0)


def test_dirichlet_more_clients_than_samples():
    with pytest.raises(ValueError, match="more clients than samples.*n_clients=11.*n_samples=10"):
        dirichlet_partition(np.zeros(10, dtype=int), 11, 1.0, seed=0)
    with pytest.raises(ValueError, match="n_clients=4 x min_size=3 = 12 > n_samples=10"):
        dirichlet_partition(np.zeros(10, dtype=int), 4, 1.0, min_size=3, seed=0)
    with pytest.raises(ValueError, match="n_clients must be an int >= 1, got 0"):
        dirichlet_partition(np.zeros(10, dtype=int), 0, 1.0, seed=0)
    with pytest.raises(ValueError, match="n_clients=11"):
        iid_partition(np.zeros(10, dtype=int), 11, seed=0)


# --------------------------------------------------------------------------------------------
# Label subsets
# --------------------------------------------------------------------------------------------


def test_label_subset_hand_four_classes():
    labels = np.repeat(np.arange(4), 10)  # 4 classes x 10 samples
    parts = label_subset_partition(labels, n_clients=4, class_fraction=0.5, seed=0)
    assert_valid_partition(parts, 40)
    counts = client_class_counts(labels, parts, 4)  # (4 clients, 4 classes)
    # k = 2 classes per client; cyclic assignment: every class has exactly 2 owners, 5 each
    assert np.all((counts > 0).sum(axis=1) == 2)
    assert np.all((counts > 0).sum(axis=0) == 2)
    assert set(np.unique(counts)) == {0, 5}
    # class_fraction = 1: everyone owns everything, each class split 3/3/2/2 over 4 clients
    full = client_class_counts(labels, label_subset_partition(labels, 4, 1.0, seed=0), 4)
    assert np.array_equal(np.sort(full, axis=0), np.tile([[2], [2], [3], [3]], (1, 4)))


@SETTINGS
@given(labelled(), st.sampled_from([0.1, 0.25, 0.5, 0.75, 1.0]))
def test_label_subset_properties(case, class_fraction):
    labels, n_clients, seed = case
    n_cls = len(np.unique(labels))
    k = max(1, math.floor(class_fraction * n_cls + 0.5))
    if n_clients * k < n_cls:
        with pytest.raises(ValueError, match=f"n_clients={n_clients}"):
            label_subset_partition(labels, n_clients, class_fraction, seed)
        return
    parts = label_subset_partition(labels, n_clients, class_fraction, seed)
    assert_valid_partition(parts, len(labels))
    assert all(len(np.unique(labels[p])) <= k for p in parts)
    assert same(parts, label_subset_partition(labels, n_clients, class_fraction, seed))


@pytest.mark.parametrize("bad", [0, 0.0, 1.5, -0.2, math.nan])
def test_label_subset_bad_fraction(bad):
    with pytest.raises(ValueError, match=f"class_fraction must be in \\(0, 1\\], got {bad!r}"):
        label_subset_partition(BIG_LABELS, 5, bad, seed=0)


def test_label_subset_seeds_differ():
    a = label_subset_partition(BIG_LABELS, 5, 0.3, seed=0)
    assert not same(a, label_subset_partition(BIG_LABELS, 5, 0.3, seed=1))


# --------------------------------------------------------------------------------------------
# Groups (domains / rotations)
# --------------------------------------------------------------------------------------------


def test_group_hand():
    groups = np.array([0] * 6 + [1] * 4)
    parts, client_group = group_partition(groups, n_clients=3, seed=0)
    assert client_group.tolist() == [0, 0, 1]  # contiguous blocks
    assert [len(p) for p in parts] == [3, 3, 4]
    assert_valid_partition(parts, 10)
    assert all(np.all(groups[p] == g) for p, g in zip(parts, client_group))
    with pytest.raises(ValueError, match="n_clients=1.*G=2"):
        group_partition(groups, 1, seed=0)


@SETTINGS
@given(labelled(max_classes=4))
def test_group_properties(case):
    groups, n_clients, seed = case
    ids, sizes = np.unique(groups, return_counts=True)
    blocks = np.array_split(np.arange(n_clients), len(ids))
    if n_clients < len(ids) or any(s < len(b) for s, b in zip(sizes, blocks)):
        with pytest.raises(ValueError):
            group_partition(groups, n_clients, seed)
        return
    parts, client_group = group_partition(groups, n_clients, seed)
    assert_valid_partition(parts, len(groups))
    assert client_group.shape == (n_clients,)
    for g in ids:
        mine = [len(p) for p, cg in zip(parts, client_group) if cg == g]
        assert max(mine) - min(mine) <= 1 and sum(mine) == int(np.sum(groups == g))
    assert all(np.all(groups[p] == g) for p, g in zip(parts, client_group))
    again, cg2 = group_partition(groups, n_clients, seed)
    assert same(parts, again) and np.array_equal(client_group, cg2)


# --------------------------------------------------------------------------------------------
# Grouped Dirichlet (COSMOS)
# --------------------------------------------------------------------------------------------


def test_grouped_dirichlet_no_pool_keeps_label_groups_apart():
    parts = grouped_dirichlet_partition(BIG_LABELS, 10, n_groups=5, alpha=5.0, pool_fraction=0.0)
    assert_valid_partition(parts, 500)
    seen = [set(np.unique(BIG_LABELS[p]).tolist()) for p in parts]
    blocks = np.array_split(np.arange(10), 5)
    for b, block in enumerate(blocks):
        group_classes = set().union(*(seen[j] for j in block))
        assert len(group_classes) == 2  # 10 classes / 5 groups
        for other in blocks[b + 1 :]:
            assert group_classes.isdisjoint(set().union(*(seen[j] for j in other)))


def test_grouped_dirichlet_pool_mixes_groups():
    parts = grouped_dirichlet_partition(BIG_LABELS, 10, n_groups=5, pool_fraction=0.5, seed=1)
    assert_valid_partition(parts, 500)
    assert np.mean([len(np.unique(BIG_LABELS[p])) for p in parts]) > 4


@SETTINGS
@given(labelled(), st.integers(1, 4), st.sampled_from([0.0, 0.1, 0.5, 1.0]))
def test_grouped_dirichlet_properties(case, n_groups, pool_fraction):
    labels, n_clients, seed = case
    if n_groups > min(len(np.unique(labels)), n_clients):
        with pytest.raises(ValueError, match=f"n_groups={n_groups}"):
            grouped_dirichlet_partition(labels, n_clients, n_groups, 1.0, pool_fraction, seed)
        return
    parts = grouped_dirichlet_partition(labels, n_clients, n_groups, 1.0, pool_fraction, seed)
    assert len(parts) == n_clients
    assert_valid_partition(parts, len(labels))
    assert same(parts, grouped_dirichlet_partition(labels, n_clients, n_groups, 1.0, pool_fraction, seed))


def test_grouped_dirichlet_bad_inputs():
    with pytest.raises(ValueError, match="pool_fraction must be in \\[0, 1\\], got 1.5"):
        grouped_dirichlet_partition(BIG_LABELS, 10, pool_fraction=1.5)
    with pytest.raises(ValueError, match="n_groups=11"):
        grouped_dirichlet_partition(BIG_LABELS, 20, n_groups=11)
    with pytest.raises(ValueError, match="alpha=0"):
        grouped_dirichlet_partition(BIG_LABELS, 10, alpha=0)


# --------------------------------------------------------------------------------------------
# Train/test splits
# --------------------------------------------------------------------------------------------


def test_split_train_test_hand():
    labels = np.array([0, 0, 0, 0, 1, 2, 2])
    train, test = split_train_test(labels, [np.arange(7)], test_fraction=0.25, seed=0)
    # class 0: round(1.0) = 1 test; class 1 (singleton) stays in train; class 2: round(0.5) = 1
    assert np.bincount(labels[test[0]], minlength=3).tolist() == [1, 0, 1]
    assert np.bincount(labels[train[0]], minlength=3).tolist() == [3, 1, 1]
    tr0, te0 = split_train_test(labels, [np.arange(7)], test_fraction=0.0)
    assert tr0[0].tolist() == list(range(7)) and te0[0].size == 0
    with pytest.raises(ValueError, match="test_fraction must be in \\[0, 1\\), got 1.0"):
        split_train_test(labels, [np.arange(7)], test_fraction=1.0)


@SETTINGS
@given(labelled(), st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]))
def test_split_train_test_properties(case, test_fraction):
    labels, n_clients, seed = case
    parts = iid_partition(labels, n_clients, seed)
    train, test = split_train_test(labels, parts, test_fraction, seed)
    for p, tr, te in zip(parts, train, test):
        assert_valid_partition([tr, te], 0, cover=False)
        assert np.array_equal(np.sort(np.concatenate([tr, te])), p)
        assert set(np.unique(labels[tr])) == set(np.unique(labels[p]))
        for c in np.unique(labels[p]):
            n_c = int(np.sum(labels[p] == c))
            assert int(np.sum(labels[te] == c)) == min(math.floor(test_fraction * n_c + 0.5), n_c - 1)
    tr2, te2 = split_train_test(labels, parts, test_fraction, seed)
    assert same(train, tr2) and same(test, te2)


@SETTINGS
@given(labelled(), st.integers(1, 5))
def test_global_test_split_properties(case, n_per_class):
    labels, _, seed = case
    classes, counts = np.unique(labels, return_counts=True)
    if counts.min() < n_per_class:
        c = classes[np.argmax(counts < n_per_class)]
        with pytest.raises(ValueError, match=f"class {c} has"):
            global_test_split(labels, n_per_class, seed)
        return
    test_idx, rest_idx = global_test_split(labels, n_per_class, seed)
    assert_valid_partition([test_idx, rest_idx], len(labels))
    assert np.all(np.bincount(labels[test_idx])[classes] == n_per_class)
    t2, r2 = global_test_split(labels, n_per_class, seed)
    assert np.array_equal(test_idx, t2) and np.array_equal(rest_idx, r2)


def test_global_test_split_message_names_class_and_counts():
    labels = np.array([0] * 5 + [1] * 2 + [2] * 5)
    with pytest.raises(ValueError, match="class 1 has 2 samples, fewer than n_per_class=3"):
        global_test_split(labels, 3, seed=0)
    a, _ = global_test_split(BIG_LABELS, 5, seed=0)
    b, _ = global_test_split(BIG_LABELS, 5, seed=1)
    assert len(a) == 50 and not np.array_equal(a, b)


# --------------------------------------------------------------------------------------------
# Summaries and plots
# --------------------------------------------------------------------------------------------


def test_counts_and_summary_hand():
    labels = np.array([0, 0, 1, 2])
    parts = [np.array([0, 1]), np.array([2, 3]), np.array([], dtype=np.int64)]
    counts = client_class_counts(labels, parts, 3)
    assert counts.tolist() == [[2, 0, 0], [0, 1, 1], [0, 0, 0]]
    df = partition_summary(labels, parts, 3)
    assert df.index.name == "client" and df.index.tolist() == [0, 1, 2]
    assert df["n_samples"].tolist() == [2, 2, 0]
    assert df["n_classes_seen"].tolist() == [1, 2, 0]
    assert df["largest_class_share"].iloc[:2].tolist() == [1.0, 0.5]
    assert math.isnan(df["largest_class_share"].iloc[2])
    assert df[["class_0", "class_1", "class_2"]].to_numpy().tolist() == counts.tolist()
    with pytest.raises(ValueError, match="n_classes=2.*maximum 2"):
        client_class_counts(labels, parts, 2)


def test_plot_partition_returns_axes():
    counts = np.array([[2, 0, 0], [0, 1, 1]])
    ax = plot_partition(counts, title="toy")
    assert ax.get_title() == "toy" and len(ax.texts) == 6
    fig, ax2 = plt.subplots()
    assert plot_partition(np.zeros((50, 10), dtype=int), ax=ax2) is ax2
    assert len(ax2.texts) == 0  # 500 cells: too many to annotate
    plt.close("all")


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def test_make_partition_registry():
    assert PARTITIONS == ("iid", "dirichlet", "label_subset", "group", "grouped_dirichlet", "departure", "powerlaw")
    assert same(make_partition("powerlaw", BIG_LABELS, 4, 3, exponent=1.2),
                powerlaw_partition(BIG_LABELS, 4, exponent=1.2, seed=3))
    assert same(make_partition("iid", BIG_LABELS, 4, 0), iid_partition(BIG_LABELS, 4, 0))
    assert same(
        make_partition("dirichlet", BIG_LABELS, 4, 0, alpha=0.3),
        dirichlet_partition(BIG_LABELS, 4, 0.3, seed=0),
    )
    assert same(
        make_partition("label_subset", BIG_LABELS, 4, 2, class_fraction=0.3),
        label_subset_partition(BIG_LABELS, 4, 0.3, 2),
    )
    assert same(
        make_partition("grouped_dirichlet", BIG_LABELS, 10, 1),
        grouped_dirichlet_partition(BIG_LABELS, 10, seed=1),
    )
    groups = BIG_LABELS % 3
    assert same(make_partition("group", BIG_LABELS, 6, 0, groups=groups), group_partition(groups, 6, 0)[0])
    with pytest.raises(ValueError, match="groups="):
        make_partition("group", BIG_LABELS, 6, 0)
    with pytest.raises(ValueError, match="unknown partition 'pathological'; valid: iid, dirichlet"):
        make_partition("pathological", BIG_LABELS, 4, 0)


def test_bad_labels():
    with pytest.raises(ValueError, match="float64"):
        iid_partition(np.array([0.5, 1.0]), 1, seed=0)
    with pytest.raises(ValueError, match="shape \\(2, 2\\)"):
        iid_partition(np.zeros((2, 2), dtype=int), 1, seed=0)
