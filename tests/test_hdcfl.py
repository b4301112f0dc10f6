"""HDC-FL's server (arXiv:2610.30075) and its baselines: the cache, the descriptors, the grouping,
the membership, the activation gate, the per-client evaluation message, IFCA, the rotation
federation, and the bad inputs. Hand-computed fixtures; scikit-learn as the reference where it
computes the same thing. The paper's identities as properties: tests/test_hdcfl_properties.py."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.cluster import KMeans
from scipy.stats import spearmanr
from sklearn.metrics import adjusted_rand_score, silhouette_score

from fedlib.algorithms import FedAvgSE, FedRep, HDCFL, IFCA
from fedlib.algorithms.hdcfl import (GATES, CachedPair, HDCConfig, HDCServer, cached_clients, cached_pair, donor_ranking, donor_swap,
                                     head_matrix, partial_spearman, personalized_encoder, refresh, refresh_history,
                                     with_variant)
from fedlib.algorithms.ifca import cluster_losses
from fedlib.clustering import (SilhouetteKMeans, assignment_agreement, descriptor_drift, hard_membership,
                               head_descriptors, lowrank_basis, membership_entropy, random_groups, soft_membership)
from fedlib.data import ArrayDataset, make_gaussian_mixture
from fedlib.federation import make_federation, make_rotation_federation
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.run import evaluate_deployment, run_federated
from fedlib.messages import Message, State, from_state, to_state
from fedlib.models import build_model
from fedlib.protocol import Event
from fedlib.training import TrainConfig

TRAIN = TrainConfig(epochs=1, batch_size=16, lr=0.05)


def planted_heads(n_per_group=4, groups=3, C=5, d=6, noise=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(groups, C, d, generator=g, dtype=torch.float64)
    labels = np.repeat(np.arange(groups), n_per_group)
    heads = centers[labels] + noise * torch.randn(len(labels), C, d, generator=g, dtype=torch.float64)
    return heads, labels


# --------------------------------------------------------------------------- descriptors


def test_the_lowrank_basis_spans_the_heads_class_directions():
    # every head lives in the span of classes 0 and 1: the rank-2 basis is that span
    h = torch.zeros(3, 4, 2, dtype=torch.float64)
    h[0, 0] = torch.tensor([1.0, 0.0])
    h[1, 1] = torch.tensor([0.0, 2.0])
    h[2, 0] = torch.tensor([3.0, 1.0])
    u = lowrank_basis(h, 2)
    projector = u @ u.T
    assert torch.allclose(projector, torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)), atol=1e-12)


def test_descriptors_by_hand():
    # one class row each, C = 2, d = 2: rank 1 keeps the dominant class (row 0, norm 3 vs 1)
    h = torch.tensor([[[3.0, 0.0], [0.0, 0.0]], [[0.0, 3.0], [0.0, 1.0]]], dtype=torch.float64)
    z = head_descriptors(h, rank=1)
    assert z.shape == (2, 2)
    assert torch.allclose(z.abs(), torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    raw = head_descriptors(h, rank=1, kind="raw")
    assert torch.allclose(raw[1], torch.tensor([0.0, 3.0, 0.0, 1.0], dtype=torch.float64) / math.sqrt(10))


def test_head_matrix_appends_the_bias_as_a_column():
    m = head_matrix({"weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "bias": torch.tensor([5.0, 6.0])})
    assert m.tolist() == [[1.0, 2.0, 5.0], [3.0, 4.0, 6.0]] and m.dtype == torch.float64


@pytest.mark.parametrize("rank, match", [(6, "rank r=6 is larger than the heads' rank.*valid: 1..5"),
                                         (0, "rank must be an integer >= 1, got 0")])
def test_a_rank_above_the_heads_rank_is_refused(rank, match):
    with pytest.raises(ValueError, match=match):
        head_descriptors(torch.randn(3, 5, 4), rank=rank)


def test_bad_heads_and_kinds_are_refused():
    with pytest.raises(ValueError, match="shape \\(n_clients, n_classes, d\\)"):
        head_descriptors(torch.randn(3, 5), rank=1)
    with pytest.raises(ValueError, match="unknown descriptor kind 'pca'; valid: lowrank, raw"):
        head_descriptors(torch.randn(3, 5, 4), rank=1, kind="pca")
    with pytest.raises(ValueError, match="NaN"):
        head_descriptors(torch.full((2, 3, 2), math.nan), rank=1)


# --------------------------------------------------------------------------- grouping


def test_silhouette_kmeans_equals_scikit_learn_and_picks_the_planted_k():
    heads, planted = planted_heads(groups=3)
    z = head_descriptors(heads, rank=4).numpy()
    km = SilhouetteKMeans(2, 6, n_init=10, seed=0).fit(z)
    for k, score in km.scores_.items():  # each k is scikit-learn's k-means and silhouette
        ref = KMeans(n_clusters=k, n_init=10, random_state=0).fit(z)
        assert score == pytest.approx(silhouette_score(z, ref.labels_))
    assert km.k_ == 3 and km.silhouette_ == max(km.scores_.values())
    assert adjusted_rand_score(planted, km.labels_) == 1.0
    assert set(km.scores_) == {2, 3, 4, 5, 6}


def test_the_k_range_is_capped_at_n_minus_one_and_one_group_needs_no_kmeans():
    z = np.random.default_rng(0).normal(size=(4, 3))
    assert set(SilhouetteKMeans(2, 8).fit(z).scores_) == {2, 3}
    one = SilhouetteKMeans(1, 1).fit(z)
    assert one.k_ == 1 and one.labels_.tolist() == [0, 0, 0, 0] and math.isnan(one.silhouette_)
    assert np.allclose(one.cluster_centers_, z.mean(axis=0, keepdims=True))


@pytest.mark.parametrize("k_min, k_max, match", [
    (5, 3, "the k range is empty: k_min=5 > k_max=3"),
    (1, 4, "give k_min >= 2, or k_min = k_max = 1"),
    (0, 2, "k_min must be an integer >= 1, got 0"),
])
def test_an_empty_or_invalid_k_range_is_refused(k_min, k_max, match):
    with pytest.raises(ValueError, match=match):
        SilhouetteKMeans(k_min, k_max)


def test_a_k_range_above_the_cached_clients_is_refused():
    with pytest.raises(ValueError, match="k range 4..8 lies above what 4 cached clients allow.*n - 1 = 3"):
        SilhouetteKMeans(4, 8).fit(np.eye(4))


def test_points_too_alike_for_k_groups_form_one_group():
    km = SilhouetteKMeans(2, 3).fit(np.ones((4, 3)))  # k-means cannot make 2 non-empty groups of one point
    assert km.k_ == 1 and km.labels_.tolist() == [0, 0, 0, 0] and math.isnan(km.silhouette_) and km.scores_ == {}


def test_a_rank_above_what_few_heads_can_have_is_refused():
    # 2 heads of 10 classes x 2 columns side by side have rank at most min(10, 4) = 4
    with pytest.raises(ValueError, match="rank r=8 is larger.*min\\(C, n d\\) = 4; valid: 1..4"):
        head_descriptors(torch.randn(2, 10, 2), rank=8)


def test_random_groups_are_balanced_and_seeded():
    a = random_groups(10, 3, np.random.default_rng(1))
    assert sorted(np.bincount(a).tolist()) == [3, 3, 4]
    assert a.tolist() == random_groups(10, 3, np.random.default_rng(1)).tolist()


# --------------------------------------------------------------------------- membership


def test_soft_membership_by_hand():
    # cosine similarities (1, 0) and (0, 1); T = 0.5 -> softmax of (2, 0)
    m = soft_membership(np.eye(2), np.eye(2), temperature=0.5)
    e = math.exp(2.0)
    assert m[0].tolist() == pytest.approx([e / (e + 1), 1 / (e + 1)])
    assert m.sum(axis=1) == pytest.approx([1.0, 1.0])


def test_temperature_limits_hard_and_uniform():
    x, c = np.array([[1.0, 0.2], [0.1, 1.0]]), np.eye(2)
    assert np.allclose(soft_membership(x, c, 1e-4), hard_membership(x, c))
    assert np.allclose(soft_membership(x, c, 1e6), 0.5, atol=1e-5)


@pytest.mark.parametrize("t", [0, -1.0, math.inf, math.nan, True])
def test_a_temperature_that_is_not_positive_is_refused(t):
    with pytest.raises(ValueError, match="temperature T must be a finite number > 0"):
        soft_membership(np.eye(2), np.eye(2), t)


def test_entropy_drift_and_agreement_by_hand():
    assert membership_entropy(np.array([[1.0, 0.0], [0.5, 0.5]])) == pytest.approx(math.log(2) / 2)
    g0, g1 = np.eye(2), np.array([[1.0, 0.5], [0.5, 1.0]])
    assert descriptor_drift(g0, g1) == pytest.approx(math.sqrt(0.5) / math.sqrt(2))
    assert assignment_agreement(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])) == pytest.approx(
        adjusted_rand_score([0, 0, 1, 1], [0, 1, 0, 1]))


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=0.0), "temperature T must be a finite number > 0, got 0.0"),
    (dict(lam=1.5), "lam \\(λ\\) must be a number in \\[0, 1\\], got 1.5"),
    (dict(lam=-0.1), "lam \\(λ\\) must be a number in \\[0, 1\\]"),
    (dict(k_min=9, k_max=8), "the k range is empty"),
    (dict(grouping="spectral"), "unknown grouping 'spectral'; valid: kmeans, random"),
    (dict(membership="fuzzy"), "unknown membership 'fuzzy'; valid: soft, hard"),
    (dict(refresh_every=0), "refresh_every must be an integer >= 1, got 0"),
    (dict(max_drift=-1.0), "max_drift must be a finite number >= 0"),
    (dict(rank=0), "rank must be an integer >= 1, got 0"),
    (dict(gate="any"), "unknown gate 'any'; valid: either, both"),
])
def test_bad_hdc_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HDCConfig(**kwargs)


# --------------------------------------------------------------------------- the server


def _server_with_cache(heads: torch.Tensor, sizes, encoders) -> State:
    model = {"fc.weight": torch.zeros(2), "head.weight": torch.zeros(heads.shape[1], heads.shape[2] - 1),
             "head.bias": torch.zeros(heads.shape[1])}
    cache = {k: CachedPair.of(Message(arrays={"model/fc.weight": e, "head/weight": h[:, :-1].float(), "head/bias": h[:, -1].float()},
                                      meta={"n_samples": n}))
             for k, (h, n, e) in enumerate(zip(heads, sizes, encoders))}
    return to_state(HDCServer(model, cache))


def test_the_cache_keeps_each_clients_pair_and_size():
    heads, _ = planted_heads(n_per_group=2, groups=2, C=3, d=3)
    encoders = [torch.tensor([float(k), 0.0]) for k in range(4)]
    server = _server_with_cache(heads, [1, 2, 3, 4], encoders)
    assert cached_clients(server) == [0, 1, 2, 3]
    enc, head, n = cached_pair(server, 2)
    assert enc["fc.weight"].tolist() == [2.0, 0.0] and n == 3
    assert torch.allclose(head_matrix(head), heads[2], atol=1e-6)
    with pytest.raises(ValueError, match="client 7 has no cached \\(encoder, head\\) pair.*cached clients: \\[0, 1, 2, 3\\]"):
        cached_pair(server, 7)


def test_a_refresh_builds_size_weighted_prototypes_and_the_mixture_by_hand():
    heads, planted = planted_heads(n_per_group=2, groups=2, C=3, d=3, noise=0.01)
    encoders = [torch.tensor([1.0, 0.0]), torch.tensor([3.0, 0.0]), torch.tensor([0.0, 2.0]), torch.tensor([0.0, 4.0])]
    server = _server_with_cache(heads, [1, 3, 1, 1], encoders)
    server.arrays["model/fc.weight"] = torch.tensor([10.0, 10.0])
    cfg = HDCConfig(rank=2, k_min=2, k_max=2, membership="hard", lam=0.5, max_activation_round=1)
    new = refresh(server, 1, cfg, seed=0)
    labels = new.arrays["hdcfl/labels"].numpy()
    assert adjusted_rand_score(planted, labels) == 1.0
    assert new.arrays["hdcfl/membership"].argmax(1).tolist() == labels.tolist()  # hard: each client's own group
    group_a = labels[0]
    proto_a = new.arrays[f"proto/{group_a}/model/fc.weight"]
    assert proto_a.tolist() == [(1.0 * 1 + 3.0 * 3) / 4, 0.0]  # size-weighted: 2.5
    # hard membership, λ = 0.5: half the client's prototype, half the shared encoder
    assert personalized_encoder(new, 0, cfg.lam)["fc.weight"].tolist() == [0.5 * 2.5 + 5.0, 5.0]
    # the cache and the shared encoder are untouched by the refresh and by personalization
    for name, t in server.arrays.items():
        assert torch.equal(new.arrays[name], t)
    assert refresh_history(new).loc[0, "k"] == 2 and bool(refresh_history(new).loc[0, "active"])


def test_the_gate_waits_for_stable_refreshes_or_the_maximum_round():
    heads, _ = planted_heads(n_per_group=3, groups=2, C=3, d=3, noise=0.01)
    server = _server_with_cache(heads, [1] * 6, [torch.zeros(2)] * 6)
    cfg = HDCConfig(rank=2, k_max=3, patience=2, max_activation_round=10, min_silhouette=0.1, min_ari=0.9)
    s1 = refresh(server, 2, cfg, seed=0)   # first refresh: no previous grouping, not stable
    s2 = refresh(s1, 4, cfg, seed=0)       # same heads: ARI 1, drift 0 -> stable, streak 1
    s3 = refresh(s2, 6, cfg, seed=0)       # streak 2 = patience -> active
    h = refresh_history(s3)
    assert h["stable"].tolist() == [False, True, True] and h["active"].tolist() == [False, False, True]
    assert h.loc[1, "ari"] == 1.0 and h.loc[1, "drift"] == 0.0 and math.isnan(h.loc[0, "ari"])
    assert from_state(HDCServer, s3).hdcfl.activated_round == 6
    # a grouping never separated enough still activates at the maximum round
    strict = HDCConfig(rank=2, k_max=3, min_silhouette=1.0, max_activation_round=4)
    t = refresh(refresh(server, 2, strict, 0), 4, strict, 0)
    assert refresh_history(t)["active"].tolist() == [False, True] and refresh_history(t)["stable"].tolist() == [False, False]


def test_the_both_gate_needs_the_partition_unchanged_not_only_a_small_drift():
    # the same heads twice (drift 0), but the previous refresh's partition replaced by another one:
    # "either" counts the refresh as persistent on the drift alone; "both" needs the ARI too
    heads, _ = planted_heads(n_per_group=3, groups=2, C=3, d=3, noise=0.01)
    server = _server_with_cache(heads, [1] * 6, [torch.zeros(2)] * 6)
    rows = {}
    for gate in GATES:
        cfg = HDCConfig(rank=2, k_max=3, patience=1, max_activation_round=10, min_silhouette=0.1, min_ari=0.9, gate=gate)
        s1 = refresh(server, 2, cfg, seed=0)
        s1.arrays["hdcfl/labels"] = torch.tensor([0, 1, 0, 1, 0, 1])  # a partition crossing the planted one
        rows[gate] = refresh_history(refresh(s1, 4, cfg, seed=0)).iloc[-1]
    assert rows["either"]["drift"] == 0.0 and rows["either"]["ari"] < 0.9
    assert bool(rows["either"]["stable"]) and bool(rows["either"]["active"])  # the old gate opens on the drift alone
    assert not bool(rows["both"]["stable"]) and not bool(rows["both"]["active"])
    # with the partition kept, both gates open
    cfg = HDCConfig(rank=2, k_max=3, patience=1, max_activation_round=10, min_silhouette=0.1, min_ari=0.9, gate="both")
    assert bool(refresh_history(refresh(refresh(server, 2, cfg, 0), 4, cfg, 0)).iloc[-1]["active"])


def test_identical_heads_refresh_into_one_group():
    heads = torch.ones(4, 3, 3, dtype=torch.float64)
    new = refresh(_server_with_cache(heads, [1] * 4, [torch.zeros(2)] * 4), 1, HDCConfig(rank=2, k_max=3), 0)
    assert refresh_history(new).loc[0, "k"] == 1 and new.arrays["hdcfl/membership"].shape == (4, 1)


def test_random_groups_report_their_own_silhouette():
    heads, _ = planted_heads(n_per_group=4, groups=2, C=3, d=3, noise=0.01)
    server = _server_with_cache(heads, [1] * 8, [torch.zeros(2)] * 8)
    planted = refresh(server, 1, HDCConfig(rank=2, k_max=2), 0)
    rand = refresh(server, 1, HDCConfig(rank=2, k_max=2, grouping="random"), 0)
    z = head_descriptors(heads, rank=2).numpy()
    assert refresh_history(rand).loc[0, "silhouette"] == pytest.approx(silhouette_score(z, rand.arrays["hdcfl/labels"].numpy()))
    assert refresh_history(rand).loc[0, "silhouette"] < refresh_history(planted).loc[0, "silhouette"]


def test_stability_is_read_on_the_clients_both_refreshes_saw():
    heads, _ = planted_heads(n_per_group=3, groups=2, C=3, d=3, noise=0.01)
    four = _server_with_cache(heads[[0, 1, 3, 4]], [1] * 4, [torch.zeros(2)] * 4)
    cfg = HDCConfig(rank=2, k_max=2, max_activation_round=10)
    first = refresh(four, 2, cfg, 0)
    six = _server_with_cache(heads, [1] * 6, [torch.zeros(2)] * 6)  # clients 0..5: the old 2, 3 are new heads now
    six.arrays.update({k: v for k, v in first.arrays.items() if k.startswith("hdcfl/")})
    six.meta.update(first.meta)
    second = refresh(six, 4, cfg, 0)
    # common clients 0, 1, 2, 3: heads 0, 1 the same, 2, 3 moved from group 1 (heads 3, 4) to group 0 (heads 2) and 1
    before = first.arrays["hdcfl/labels"].numpy()
    now = second.arrays["hdcfl/labels"].numpy()[:4]
    assert refresh_history(second).loc[1, "ari"] == pytest.approx(adjusted_rand_score(before, now))


def test_compare_raw_groups_the_raw_heads_of_the_same_cache_and_changes_nothing_deployed():
    heads, planted = planted_heads(n_per_group=3, groups=2, C=4, d=3, noise=0.05)
    server = _server_with_cache(heads, [1] * 6, [torch.tensor([float(k), 0.0]) for k in range(6)])
    cfg = HDCConfig(rank=2, k_max=3, max_activation_round=10)
    plain = refresh(refresh(server, 2, cfg, 0), 4, cfg, 0)
    both_cfg = replace(cfg, compare_raw=True)
    both = refresh(refresh(server, 2, both_cfg, 0), 4, both_cfg, 0)
    for name, t in plain.arrays.items():  # the prototypes, labels, membership and gate are the method's own
        assert torch.equal(both.arrays[name], t), name
    assert from_state(HDCServer, plain).hdcfl.active == from_state(HDCServer, both).hdcfl.active
    h_plain, h = refresh_history(plain), refresh_history(both)
    assert "raw_k" not in h_plain.columns and h[list(h_plain.columns)].equals(h_plain)
    # the raw columns are those of a refresh with raw descriptors on the same cache and stream
    raw_cfg = replace(cfg, descriptor="raw")
    raw = refresh(refresh(server, 2, raw_cfg, 0), 4, raw_cfg, 0)
    h_raw = refresh_history(raw)
    assert h["raw_k"].tolist() == h_raw["k"].tolist()
    assert h["raw_silhouette"].tolist() == pytest.approx(h_raw["silhouette"].tolist())
    assert math.isnan(h.loc[0, "raw_ari"]) and h.loc[1, "raw_ari"] == pytest.approx(h_raw.loc[1, "ari"])
    assert both.arrays["hdcfl/raw_labels"].tolist() == raw.arrays["hdcfl/labels"].tolist()
    with pytest.raises(ValueError, match="compare_raw must be True or False, got 1"):
        HDCConfig(compare_raw=1)


def test_a_rank_above_the_models_classes_is_refused_before_any_round(tiny_model_fn):
    with pytest.raises(ValueError, match="HDCConfig.rank r=8 is larger than the head's rank.*valid: 1..3"):
        HDCFL(config=HDCConfig(rank=8)).init_server(tiny_model_fn())


def test_a_lambda_outside_the_unit_interval_is_refused_by_personalization():
    heads, _ = planted_heads(n_per_group=2, groups=2, C=3, d=3)
    new = refresh(_server_with_cache(heads, [1] * 4, [torch.zeros(2)] * 4), 1, HDCConfig(rank=2, k_max=2), 0)
    with pytest.raises(ValueError, match="lam \\(λ\\) must be a number in \\[0, 1\\], got 1.5"):
        personalized_encoder(new, 0, 1.5)


def test_a_client_that_leaves_is_dropped_from_the_cache():
    heads, _ = planted_heads(n_per_group=2, groups=2, C=3, d=3)
    server = _server_with_cache(heads, [1] * 4, [torch.zeros(2)] * 4)
    after = HDCFL(config=HDCConfig(rank=2)).on_event(server, Event(3, 1, "leave"))
    assert cached_clients(after) == [0, 2, 3]
    assert HDCFL().on_event(server, Event(3, 1, "join")) is server


def test_personalization_without_a_cached_pair_is_refused():
    heads, _ = planted_heads(n_per_group=2, groups=2, C=3, d=3)
    new = refresh(_server_with_cache(heads, [1] * 4, [torch.zeros(2)] * 4), 1, HDCConfig(rank=2, k_max=2), 0)
    with pytest.raises(ValueError, match="client 9 has no cached \\(encoder, head\\) pair at the last refresh"):
        personalized_encoder(new, 9, 1.0)
    with pytest.raises(ValueError, match="no refresh has run yet"):
        personalized_encoder(State(), 0, 1.0)


# --------------------------------------------------------------------------- in the loop


@pytest.fixture(scope="module")
def grouped():
    """Two planted groups of clients: the second group's labels are permuted (a head-visible shift)."""
    ds = make_gaussian_mixture(n_per_class=80, n_classes=3, dim=8, separation=4.0, seed=0).dataset
    fed = make_federation(ds, n_clients=6, partition="iid", global_test_per_class=10, seed=0)
    clients = []
    for k, c in enumerate(fed.clients):
        if k >= 3:
            c = type(c)(ArrayDataset(c.train.x, (c.train.y + 1) % 3, 3, "perm"), ArrayDataset(c.test.x, (c.test.y + 1) % 3, 3, "perm"))
        clients.append(c)
    fed = type(fed)(clients, fed.global_test, fed.n_classes, {**fed.description, "partition": "permuted"})
    return fed, functools.partial(build_model, "mlp", in_channels=8, n_classes=3, input_size=1, hidden=(16,))


def test_hdcfl_trains_exactly_as_fedavg_se_and_caches_heads_beside_their_encoders(grouped):
    fed, model_fn = grouped
    cfg = LoopConfig(rounds=4, seed=0)
    hdc = run_federated(HDCFL(train=TRAIN, config=HDCConfig(rank=2, k_max=3, refresh_every=2, max_activation_round=2)),
                        fed, model_fn, cfg)
    se = run_federated(FedAvgSE(train=TRAIN), fed, model_fn, cfg)
    for name, t in se.server.arrays.items():  # the shared trajectory is FedAvg-SE's, bit for bit
        assert torch.equal(hdc.server.arrays[name], t), name
    for k in range(fed.n_clients):  # each cached head is the client's own latest head
        _, head, n = cached_pair(hdc.server, k)
        assert torch.equal(head["weight"], hdc.client_states[k].arrays["personal/head.weight"])
        assert n == len(fed.clients[k].train)
    # the planted groups are found, and the heads travelled up as messages the ledger counts
    labels = hdc.server.arrays["hdcfl/labels"].numpy()
    assert adjusted_rand_score([0, 0, 0, 1, 1, 1], labels) == 1.0
    led = hdc.ledger.to_frame()
    up_hdc = led[led.direction == "up"].bytes.sum()
    up_se = se.ledger.to_frame().query("direction == 'up'").bytes.sum()
    head_bytes = (3 * 16 + 3) * 4 * fed.n_clients * 4
    assert up_hdc - up_se == pytest.approx(head_bytes, abs=100)
    # after activation every client is evaluated on its own personalized encoder, one message each
    evals = led[(led.direction == "down") & (led.kind == "eval:personalized")]
    assert sorted(evals.client) == list(range(fed.n_clients))


def test_personalized_messages_are_what_each_client_deploys(grouped):
    fed, model_fn = grouped
    cfg = LoopConfig(rounds=2, seed=1)
    alg = HDCFL(train=TRAIN, config=HDCConfig(rank=2, k_max=3, refresh_every=1, max_activation_round=1, lam=1.0))
    run = run_federated(alg, fed, model_fn, cfg)
    rows = evaluate_deployment(alg, run, fed, model_fn, cfg)
    ref = run.frame[run.frame["round"] == 2]
    pd.testing.assert_frame_equal(rows.reset_index(drop=True), ref[ref.metric != "train_loss"].reset_index(drop=True))
    # what a client deploys is its personalized encoder with its own head, by hand
    model = model_fn()
    for k in (0, 4):
        head = {"head." + n: t for n, t in cached_pair(run.server, k)[1].items()}
        model.load_state_dict({**personalized_encoder(run.server, k, 1.0), **head})
        test = fed.clients[k].test
        acc = float((model(test.x).argmax(1) == test.y).float().mean())
        assert rows[(rows.client == k) & (rows.metric == "local")].value.item() == pytest.approx(acc)
    # λ = 0 deploys the shared encoder: FedAvg-SE's deployment exactly
    zero = HDCFL(train=TRAIN, config=HDCConfig(rank=2, k_max=3, lam=0.0))
    a = evaluate_deployment(zero, type(run)(**{**run.__dict__, "server": with_variant(run.server, 2, zero.config, 0)}),
                            fed, model_fn, cfg)
    b = evaluate_deployment(FedAvgSE(train=TRAIN), run, fed, model_fn, cfg)
    pd.testing.assert_frame_equal(a, b)


def test_a_client_the_server_never_saw_is_evaluated_on_the_shared_encoder(grouped):
    fed, model_fn = grouped
    alg = HDCFL(train=TRAIN, config=HDCConfig(rank=2, k_max=2, refresh_every=1, max_activation_round=1))
    run = run_federated(alg, fed, model_fn, LoopConfig(rounds=1, seed=0, participation=0.5))
    seen = set(cached_clients(run.server))
    assert 0 < len(seen) < fed.n_clients
    led = run.ledger.to_frame()
    evals = led[(led.direction == "down") & led.kind.str.startswith("eval")]
    assert set(evals[evals.kind == "eval:personalized"].client) == seen
    assert set(evals[evals.kind == "eval:model"].client) == set(range(fed.n_clients)) - seen


def test_hdcfl_is_vectorizable_and_the_vectorized_run_matches(grouped):
    fed, model_fn = grouped
    alg = HDCFL(train=TRAIN, config=HDCConfig(rank=2, k_max=3, refresh_every=1, max_activation_round=1))
    assert all(m.capabilities.stacks for m in (alg, FedAvgSE(), FedRep(), IFCA()))
    a = run_federated(alg, fed, model_fn, LoopConfig(rounds=2, seed=0))
    b = run_federated(alg, fed, model_fn, LoopConfig(rounds=2, seed=0), RunOptions(execution="vectorized"))
    for name, t in a.server.arrays.items():
        assert torch.allclose(b.server.arrays[name].double(), t.double(), atol=1e-5), name


def test_a_checkpointed_hdcfl_run_resumes_bit_for_bit(grouped, tmp_path):
    fed, model_fn = grouped
    alg = HDCFL(train=TRAIN, config=HDCConfig(rank=2, k_max=3, refresh_every=1, max_activation_round=2))
    full = run_federated(alg, fed, model_fn, LoopConfig(rounds=3, seed=0))
    cfg, ckpt = LoopConfig(rounds=3, seed=0), RunOptions(checkpoint=str(tmp_path / "run.pt"))
    run_federated(alg, fed, model_fn, cfg, ckpt, stop_after=2)
    resumed = run_federated(alg, fed, model_fn, cfg, ckpt)
    pd.testing.assert_frame_equal(full.frame, resumed.frame)
    assert full.server.meta == resumed.server.meta
    assert full.server.arrays.keys() == resumed.server.arrays.keys()
    assert all(torch.equal(full.server.arrays[k], resumed.server.arrays[k]) for k in full.server.arrays)  # cache, prototypes


def test_donor_swap_scores_every_ordered_pair_with_the_targets_head_on_the_donors_encoder(grouped):
    fed, model_fn = grouped
    run = run_federated(HDCFL(train=TRAIN, config=HDCConfig(rank=2, k_max=3)), fed, model_fn, LoopConfig(rounds=2, seed=0))

    def score(i, weights):  # depends on both halves: the encoder's first layer and the head's bias
        return float(weights["hidden.0.weight"].sum()) + 1000.0 * float(weights["head.bias"].sum())

    table = donor_swap(run.server, score, rank=2)
    assert len(table) == 6 * 5
    for row in table.itertuples():
        enc_i, head_i, _ = cached_pair(run.server, row.target)
        enc_j, _, _ = cached_pair(run.server, row.donor)
        own = float(enc_i["hidden.0.weight"].sum()) + 1000.0 * float(head_i["bias"].sum())
        assert row.own == pytest.approx(own)
        assert row.gain == pytest.approx(float(enc_j["hidden.0.weight"].sum()) - float(enc_i["hidden.0.weight"].sum()))
    assert table["head_cosine"].between(-1, 1).all() and table["lowrank_cosine"].between(-1, 1).all()


def test_donor_ranking_by_hand_and_against_scipy():
    table = pd.DataFrame({"head_cosine": [0.9, 0.1, 0.5, 0.3], "lowrank_cosine": [0.8, 0.2, 0.4, 0.6],
                          "gain": [2.0, -1.0, 0.5, -0.5], "overlap": [1.0, 0.2, 0.5, 0.5],
                          "same_group": [True, False, False, True]})
    out = donor_ranking(table)
    assert out["rho_raw"] == pytest.approx(1.0) and out["rho_lowrank"] == pytest.approx(0.8)
    assert out["auroc_helps"] == 1.0 and out["auroc_same_group"] == 0.75 and out["mean_gain"] == 0.25
    # ranked 0.9 (same), 0.5, 0.3 (same), 0.1: precision 1/1 and 2/3 at the two same-group pairs
    assert out["ap_same_group"] == pytest.approx((1 + 2 / 3) / 2) and out["base_same_group"] == 0.5
    x, y, z = (pd.Series(v).rank().to_numpy() for v in (table.head_cosine, table.gain, table.overlap))
    rx, ry = (r - np.polyval(np.polyfit(z, r, 1), z) for r in (x, y))
    assert out["partial_rho"] == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    assert partial_spearman([1, 2, 3], [3, 1, 2], [0, 0, 0]) == pytest.approx(spearmanr([1, 2, 3], [3, 1, 2]).statistic)


# --------------------------------------------------------------------------- IFCA


def test_ifca_clients_choose_the_lowest_loss_cluster_and_each_cluster_averages_its_own(grouped):
    fed, model_fn = grouped
    alg = IFCA(train=TRAIN, k=2, seed=0)
    run = run_federated(alg, fed, model_fn, LoopConfig(rounds=10, seed=0))  # FedAvg, one model for both groups: 0.52
    led = run.ledger.to_frame()
    assert set(led[led.direction == "down"].kind) >= {"clusters"}
    model = model_fn()
    msg = Message(arrays=run.server.arrays)
    choice = [int(torch.argmin(cluster_losses(model, msg, 2, c.train.x, c.train.y))) for c in fed.clients]
    assert len(set(choice[:3])) == 1 and len(set(choice[3:])) == 1 and choice[0] != choice[3]  # the planted groups
    assert run.summary()["local"] > 0.8


def test_ifca_vectorized_equals_sequential_and_refuses_an_unknown_cluster(grouped):
    fed, model_fn = grouped
    a = run_federated(IFCA(train=TRAIN, k=2), fed, model_fn, LoopConfig(rounds=2, seed=0))
    b = run_federated(IFCA(train=TRAIN, k=2), fed, model_fn, LoopConfig(rounds=2, seed=0), RunOptions(execution="vectorized"))
    for name, t in a.server.arrays.items():
        assert torch.allclose(b.server.arrays[name], t, atol=1e-5), name
    with pytest.raises(ValueError, match="client 4's reply names cluster 5; valid: 0, 1"):
        IFCA(k=2).aggregate(a.server, [(4, Message(arrays={}, meta={"cluster": 5, "n_samples": 3}))], 3)


def test_ifca_cluster_models_start_apart_and_from_the_runs_initial_model(tiny_federation, tiny_model_fn):
    model = tiny_model_fn()
    server = IFCA(k=3, seed=0).init_server(model)
    w = [server.arrays[f"cluster/{j}/model/head.weight"] for j in range(3)]
    assert torch.equal(w[0], model.head.weight) and not torch.equal(w[0], w[1]) and not torch.equal(w[1], w[2])
    assert torch.equal(IFCA(k=3, seed=0).init_server(model).arrays["cluster/2/model/head.weight"], w[2])
    with pytest.raises(ValueError, match="k \\(the number of cluster models\\) must be an integer >= 1 \\(1 is FedAvg\\), got 0"):
        IFCA(k=0)


# --------------------------------------------------------------------------- the rotation federation


def test_rotation_federation_rotates_each_group_and_keeps_labels():
    x = torch.arange(40 * 16, dtype=torch.float32).reshape(40, 1, 4, 4)
    ds = ArrayDataset(x, torch.arange(40) % 2, 2, "toy")
    fed, group = make_rotation_federation(ds, n_clients=4, n_rotations=4, global_test_per_class=2, seed=0)
    plain = make_federation(ds, n_clients=4, partition="iid", global_test_per_class=2, seed=0)
    assert group.tolist() == [0, 1, 2, 3]
    for k in range(4):
        assert torch.equal(fed.clients[k].train.x, torch.rot90(plain.clients[k].train.x, k, dims=(2, 3)))
        assert torch.equal(fed.clients[k].test.y, plain.clients[k].test.y)
    assert torch.equal(fed.global_test.x, plain.global_test.x)
    with pytest.raises(ValueError, match="n_rotations must be an integer in \\[1, n_clients=4\\], got 5"):
        make_rotation_federation(ds, n_clients=4, n_rotations=5, global_test_per_class=2)
    with pytest.raises(ValueError, match="rotation needs images"):
        make_rotation_federation(ArrayDataset(torch.zeros(8, 3), torch.arange(8) % 2, 2, "v"), n_clients=2, n_rotations=2,
                                 global_test_per_class=1)
