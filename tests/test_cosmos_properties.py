"""COSMOS's derivations as property tests: the statements the chapter ``cosmos_derivations`` checks.

(a) Algorithm 1 (:func:`fedlib.clustering.greedy_b0`) returns a partition whose seeds belong to
    their own clusters, every member within ``B0`` of its seed and so every diameter at most
    ``2 B0`` (Assumption 5.1 holds with ``B = 2 B0``), between 1 and ``n`` clusters, and ``n``
    clusters at ``B0 = 0`` on distinct points;
(b) :func:`fedlib.clustering.b0_for_clusters` reaches the target and no smaller candidate does;
(c) every pseudo-label aggregation rule keeps rows on the simplex, and the mean (and the
    confidence-weighted mean) lies coordinate-wise between the clients' smallest and largest labels;
(d) Lemma 5.2 (:func:`fedlib.distill.lemma52` with its default ``B``) holds on random instances,
    and so do the steps of its proof (:func:`fedlib.distill.lemma52_chain`) and its margin-profile
    version (:func:`fedlib.distill.margin_profile_bound`), never weaker than the lemma;
(e) the clustering distance :func:`fedlib.distill.l1_distances` is a metric;
(f) :func:`fedlib.distill.soft_labels` tends to the one-hot argmax as ``T -> 0`` when the top
    class is unique (with the explicit bound ``(C - 1) exp(-gap / T)``), and ``T = 0`` is exactly it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from fedlib.clustering import b0_for_clusters, candidate_thresholds, cluster_diameters, greedy_b0
from fedlib.distill import LABEL_RULES, aggregate_labels, l1_distances, lemma52, lemma52_chain, margin_profile_bound, soft_labels
from fedbook.studies.cosmos_derivations import greedy_rule_violations

SEEDS = st.integers(0, 2**31 - 1)
TOL = 1e-12


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _points_distances(n: int, dim: int, seed: int) -> np.ndarray:
    """The l1 (cityblock) distances of n random points in dim dimensions, with a random scale."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)) * rng.uniform(0.1, 10.0)
    return cdist(x, x, "cityblock")


def _off_diagonal(d: np.ndarray) -> np.ndarray:
    return d[~np.eye(len(d), dtype=bool)]


def _soft(m: int, n: int, C: int, seed: int, *, hard_share: float = 0.0) -> torch.Tensor:
    """(m, n, C) float64 pseudo-labels: softmax of random logits, a share of rows made one-hot."""
    g = torch.Generator().manual_seed(seed)
    scale = 0.1 + 5 * torch.rand(m, 1, 1, generator=g, dtype=torch.float64)
    labels = torch.softmax(torch.randn(m, n, C, generator=g, dtype=torch.float64) * scale, dim=2)
    hard = torch.rand(m, n, generator=g, dtype=torch.float64) < hard_share
    one_hot = torch.nn.functional.one_hot(labels.argmax(dim=2), C).to(torch.float64)
    return torch.where(hard.unsqueeze(2), one_hot, labels)


# ------------------------------------------------------------------------------------------------
# (a) Algorithm 1
# ------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 14), dim=st.integers(1, 4), seed=SEEDS, q=st.floats(0.0, 1.0))
def test_greedy_clusters_partition_the_clients_within_b0_of_their_seeds(n, dim, seed, q):
    d = _points_distances(n, dim, seed)
    b0 = float(np.quantile(_off_diagonal(d), q)) if n > 1 else 0.0
    labels, seeds = greedy_b0(d, b0)
    k = len(seeds)
    assert 1 <= k <= n
    assert labels.shape == (n,) and set(labels.tolist()) == set(range(k))  # every client in exactly one cluster
    assert len(set(seeds)) == k and all(labels[s] == g for g, s in enumerate(seeds))  # each seed in its own cluster
    for j in range(n):
        assert d[seeds[labels[j]], j] <= b0  # a radius around the seed
    diam = cluster_diameters(d, labels)
    assert (diam <= 2 * b0 + TOL).all()  # so a diameter of at most 2 B0 (triangle inequality)
    assert greedy_rule_violations(d, b0, labels, seeds) == 0  # Algorithm 1 replayed step by step agrees
    for g in range(k):  # the same, pair by pair
        members = np.flatnonzero(labels == g)
        assert d[np.ix_(members, members)].max() <= 2 * b0 + TOL


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 14), dim=st.integers(1, 4), seed=SEEDS)
def test_b0_zero_on_distinct_points_leaves_every_client_alone_and_the_largest_distance_joins_all(n, dim, seed):
    d = _points_distances(n, dim, seed)
    assert n == 1 or _off_diagonal(d).min() > 0  # random points are distinct
    labels, seeds = greedy_b0(d, 0.0)
    assert len(seeds) == n and sorted(labels.tolist()) == list(range(n))
    assert len(greedy_b0(d, float(d.max()))[1]) == 1


# ------------------------------------------------------------------------------------------------
# (b) the smallest B0 for a target number of clusters
# ------------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 10), dim=st.integers(1, 4), seed=SEEDS, data=st.data())
def test_b0_for_clusters_reaches_the_target_and_no_smaller_candidate_does(n, dim, seed, data):
    d = _points_distances(n, dim, seed)
    target = data.draw(st.integers(1, n), label="target")
    b_star = b0_for_clusters(d, target)
    candidates = candidate_thresholds(d)
    assert np.array_equal(candidates, np.unique(np.r_[0.0, _off_diagonal(d)]))
    assert b_star in candidates
    assert len(greedy_b0(d, b_star)[1]) <= target
    for c in candidates[candidates < b_star]:
        assert len(greedy_b0(d, float(c))[1]) > target


# ------------------------------------------------------------------------------------------------
# (c) aggregation rules
# ------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 7), n=st.integers(1, 20), C=st.integers(2, 8), seed=SEEDS, rule=st.sampled_from(LABEL_RULES),
       hard_share=st.sampled_from([0.0, 0.5, 1.0]))
def test_aggregated_labels_stay_on_the_simplex_and_the_means_between_the_clients(m, n, C, seed, rule, hard_share):
    labels = _soft(m, n, C, seed, hard_share=hard_share)
    out = aggregate_labels(labels, rule)
    assert out.shape == (n, C)
    assert bool((out >= 0).all()) and float((out.sum(dim=1) - 1).abs().max()) <= 1e-12
    if rule in ("mean", "confidence"):  # a convex combination of the clients' rows, per sample
        low, high = labels.min(dim=0).values, labels.max(dim=0).values
        assert bool((out >= low - 1e-12).all()) and bool((out <= high + 1e-12).all())
    if rule == "mean":
        assert torch.allclose(out, labels.sum(dim=0) / m, atol=1e-15, rtol=0)


# ------------------------------------------------------------------------------------------------
# (d) Lemma 5.2
# ------------------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(m=st.integers(1, 8), n=st.integers(1, 50), C=st.integers(2, 6), seed=SEEDS,
       sharpness=st.floats(0.2, 10.0), spread=st.floats(0.0, 4.0), flip=st.floats(0.0, 0.6), data=st.data())
def test_lemma_5_2_holds_on_random_clusters(m, n, C, seed, sharpness, spread, flip, data):
    rng = np.random.default_rng(seed)
    own = rng.normal(size=(n, C)) * sharpness
    logits = own[None] + rng.normal(size=(m, n, C)) * spread
    i = data.draw(st.integers(0, m - 1), label="client")
    logits[i] = own
    members = torch.softmax(torch.tensor(logits), dim=2)
    truth = own.argmax(axis=1)
    flipped = rng.random(n) < flip
    truth[flipped] = rng.integers(0, C, size=int(flipped.sum()))
    support = rng.random(n) < rng.uniform(0.2, 1.0)
    support[rng.integers(0, n)] = True
    r = lemma52(members, i, truth, support)
    assert r.size == int(support.sum())
    assert r.holds  # Err(f̄) <= Err(f_i) + 2B / (γ |U_i|), B a sum over U_i
    if r.gamma > 0:
        assert r.gamma * r.bad <= 2 * r.B + 1e-9  # the count form: |Bad| <= 2B / γ
    # 2B is the largest distance from the client to a member, summed over U_i
    sup = torch.as_tensor(support)
    d_i = (members[:, sup] - members[i][sup]).abs().sum(dim=(1, 2))
    assert math.isclose(2 * r.B, float(d_i.max()), rel_tol=1e-12, abs_tol=1e-12)
    # the proof's chain: γ|Bad| <= S <= mean_j d_{U_i}(i, j) <= max_j d_{U_i}(i, j) = 2B <= the diameter on U_i
    chain = lemma52_chain(members, i, support)
    assert chain.S <= chain.mean_distance + 1e-9 <= chain.max_distance + 2e-9 <= chain.diameter + 3e-9
    assert math.isclose(chain.max_distance, 2 * r.B, rel_tol=1e-12, abs_tol=1e-12)
    if r.gamma > 0:
        assert r.gamma * r.bad <= chain.S + 1e-9
        # the margin profile: a valid bound, and at τ = γ (no point below) the lemma's own term, so never weaker
        profile = margin_profile_bound(members[i][sup], 2 * r.B)
        assert r.err_mean <= r.err_client + profile + 1e-9
        assert profile <= 2 * r.B / (r.gamma * r.size) * (1 + 1e-12)


# ------------------------------------------------------------------------------------------------
# (e) the clustering distance is a metric
# ------------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(m=st.integers(1, 8), n=st.integers(1, 15), C=st.integers(2, 6), seed=SEEDS,
       hard_share=st.sampled_from([0.0, 0.5]))
def test_l1_distances_are_a_metric(m, n, C, seed, hard_share):
    labels = _soft(m, n, C, seed, hard_share=hard_share)
    d = l1_distances(labels)
    assert d.shape == (m, m) and d.dtype == np.float64
    assert (d >= 0).all() and (np.diag(d) == 0).all()
    assert np.array_equal(d, d.T)
    # triangle inequality over every triple: d(i, k) <= d(i, j) + d(j, k)
    assert (d[:, None, :] <= d[:, :, None] + d[None, :, :] + 1e-12).all()
    # and the definition: the sum over U of the per-sample l1 distances (at most 2 each)
    ref = (labels[:, None] - labels[None]).abs().sum(dim=(2, 3)).numpy()
    np.testing.assert_allclose(d, ref, rtol=1e-12, atol=1e-12)
    assert (d <= 2 * n + 1e-12).all()


# ------------------------------------------------------------------------------------------------
# (f) the hard-label limit of the pseudo-labels
# ------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 20), C=st.integers(2, 10), seed=SEEDS)
def test_soft_labels_tend_to_the_one_hot_argmax_as_t_goes_to_zero(n, C, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, C, generator=g, dtype=torch.float64) * 3
    top2 = logits.topk(2, dim=1).values
    gap = top2[:, 0] - top2[:, 1]
    if float(gap.min()) <= 1e-6:  # a (near) tie: no unique limit; hypothesis draws few of these
        return
    one_hot = torch.nn.functional.one_hot(logits.argmax(dim=1), C).to(torch.float64)
    assert torch.equal(soft_labels(logits, 0), one_hot)  # T = 0 is the hard label itself
    previous = math.inf
    for T in (1.0, 0.3, 0.1, 0.03, 0.01, 0.001):
        dev = (soft_labels(logits, T) - one_hot).abs().max(dim=1).values
        # every other class carries at most exp(-gap/T) of the top one's weight
        assert bool((dev <= (C - 1) * torch.exp(-gap / T) + 1e-15).all())
        assert float(dev.max()) <= previous + 1e-15  # and the deviation shrinks as T falls
        previous = float(dev.max())
    assert previous <= (C - 1) * math.exp(-float(gap.min()) / 0.001) + 1e-15
