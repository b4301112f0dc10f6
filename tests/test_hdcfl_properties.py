"""HDC-FL's derivations as property tests: the statements the chapter ``hdcfl_derivations`` checks.

1. descriptors are unit-norm and their Gram matrix does not depend on the basis (signs, rotations
   within the span); at ``r = C`` it equals the raw heads' Gram matrix;
2. soft membership lies on the simplex, tends to the hard assignment as ``T -> 0`` and to the
   uniform mixture as ``T -> inf`` (with explicit bounds), and is the logistic of the gap for two
   groups (sympy);
3. one group and ``lam = 1`` under full participation give FedAvg-SE's shared encoder bit for bit;
   ``lam = 0`` gives the shared encoder for any grouping;
4. the low-rank descriptor recovers clearly separated planted groupings exactly (ARI 1);
5. (a measurement, in the chapter only: local steps and feature movement);
6. a refresh keeps ``k`` in ``[k_min, min(k_max, n - 1)]``, writes membership rows that sum to
   one, and changes neither the cache nor the shared encoder; personalization writes nothing back.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score

from fedlib.algorithms.fedrep import FedAvgSE
from fedlib.algorithms.hdcfl import (HDCConfig, HDCFL, cached_clients, personalized_encoder, refresh, refresh_history,
                                     shared_encoder)
from fedlib.clustering import (SilhouetteKMeans, descriptor_drift, hard_membership, head_descriptors, lowrank_basis,
                               soft_membership)
from fedbook.studies.hdcfl_derivations import PlantedHeads, arrays_kept, descriptors_in_basis, random_orthogonal, snapshot
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.messages import State, same_arrays
from fedlib.training import TrainConfig

F64 = torch.float64
SEEDS = st.integers(0, 2**31 - 1)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _heads(n: int, C: int, d1: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, C, d1, generator=g, dtype=F64) * (0.2 + torch.rand(n, 1, 1, generator=g, dtype=F64))


# ------------------------------------------------------------------------------------------------
# 1. The descriptor
# ------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 8), C=st.integers(2, 12), d=st.integers(1, 5), data=st.data(), seed=SEEDS)
def test_descriptors_are_unit_norm_and_their_gram_is_basis_free(n, C, d, data, seed):
    C = min(C, n * (d + 1))  # heads side by side have rank at most min(C, n (d + 1)): r beyond it is refused
    r = data.draw(st.integers(1, C), label="rank")
    heads = _heads(n, C, d + 1, seed)
    z = head_descriptors(heads, rank=r)
    assert torch.allclose(z.norm(dim=1), torch.ones(n, dtype=F64), rtol=0, atol=1e-12)
    u = lowrank_basis(heads, r)
    assert torch.allclose(z, descriptors_in_basis(heads, u), rtol=0, atol=1e-12)  # the documented formula
    gram = z @ z.T
    g = torch.Generator().manual_seed(seed + 1)
    signs = torch.where(torch.rand(u.shape[1], generator=g) < 0.5, -1.0, 1.0).to(F64)
    for basis in (u * signs, u @ random_orthogonal(u.shape[1], g)):
        z_other = descriptors_in_basis(heads, basis)
        gram_other = z_other @ z_other.T
        assert torch.allclose(gram_other, gram, rtol=0, atol=1e-12)
        assert descriptor_drift(gram.numpy(), gram_other.numpy()) <= 1e-12


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 8), C=st.integers(1, 12), d=st.integers(1, 5), seed=SEEDS)
def test_full_rank_descriptors_have_the_raw_heads_gram(n, C, d, seed):
    C = min(C, n * (d + 1))  # r = C must be a rank the heads side by side can have
    heads = _heads(n, C, d + 1, seed)
    low, raw = head_descriptors(heads, rank=C), head_descriptors(heads, rank=C, kind="raw")
    assert torch.allclose(low @ low.T, raw @ raw.T, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# 2. Soft membership
# ------------------------------------------------------------------------------------------------


def _points(n: int, p: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x, c = rng.normal(size=(n, p)), rng.normal(size=(k, p))
    cos = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T
    return x, c, cos


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 30), p=st.integers(2, 10), k=st.integers(1, 7), log_t=st.floats(-4, 4), seed=SEEDS)
def test_soft_membership_rows_lie_on_the_simplex(n, p, k, log_t, seed):
    x, c, _ = _points(n, p, k, seed)
    m = soft_membership(x, c, 10.0**log_t)
    assert m.shape == (n, k) and (m >= 0).all()
    assert np.abs(m.sum(axis=1) - 1).max() <= 1e-12


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 30), p=st.integers(2, 10), k=st.integers(2, 7), log_t=st.floats(-4, 4), seed=SEEDS)
def test_soft_membership_tends_to_hard_as_t_falls_and_to_uniform_as_t_grows(n, p, k, log_t, seed):
    x, c, cos = _points(n, p, k, seed)
    top2 = np.sort(cos, axis=1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]  # > 0: random draws have no ties
    t = 10.0**log_t
    m = soft_membership(x, c, t)
    # |m - hard| <= (k - 1) exp(-gap / T): the T -> 0 limit is hard_membership
    assert (np.abs(m - hard_membership(x, c)).max(axis=1) <= (k - 1) * np.exp(-gap / t) + 1e-12).all()
    # |m - 1/k| <= (exp(2/T) - 1) / k (cosines lie in [-1, 1]): the T -> inf limit is uniform
    assert (np.abs(m - 1 / k).max(axis=1) <= math.expm1(min(2 / t, 700)) / k + 1e-12).all()
    # and the limits themselves, far enough out
    cold = soft_membership(x, c, 1e-3 * max(float(gap.min()), 1e-9) / 50)  # exp(-gap / T) <= exp(-50000)
    assert np.allclose(cold, hard_membership(x, c), rtol=0, atol=1e-12)
    assert np.allclose(soft_membership(x, c, 1e9), 1 / k, rtol=0, atol=1e-8)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 30), p=st.integers(2, 10), log_t=st.floats(-3, 3), seed=SEEDS)
def test_two_group_soft_membership_is_the_logistic_of_the_similarity_gap(n, p, log_t, seed):
    x, c, cos = _points(n, p, 2, seed)
    t = 10.0**log_t
    with np.errstate(over="ignore"):
        closed = 1 / (1 + np.exp((cos[:, 1] - cos[:, 0]) / t))
    assert np.abs(soft_membership(x, c, t)[:, 0] - closed).max() <= 1e-12


def test_two_group_closed_form_and_its_limits_by_sympy():
    s1, s2 = sp.symbols("s_1 s_2", real=True)
    t = sp.Symbol("T", positive=True)
    gap = sp.Symbol("Delta", positive=True)
    closed = 1 / (1 + sp.exp((s2 - s1) / t))
    assert sp.simplify(sp.exp(s1 / t) / (sp.exp(s1 / t) + sp.exp(s2 / t)) - closed) == 0
    assert sp.limit(closed.subs(s1, s2 + gap), t, 0, "+") == 1
    assert sp.limit(closed.subs(s1, s2 - gap), t, 0, "+") == 0
    assert sp.limit(closed, t, sp.oo) == sp.Rational(1, 2)


# ------------------------------------------------------------------------------------------------
# 3. One group and lam = 1 is FedAvg-SE; lam = 0 is the shared encoder
# ------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), rounds=st.integers(1, 3), steps=st.integers(1, 4),
       lr=st.sampled_from([0.01, 0.05, 0.2]))
def test_one_group_and_full_mixing_give_fedavg_se_shared_encoder_bit_for_bit(tiny_federation, tiny_model_fn,
                                                                              seed, rounds, steps, lr):
    train = TrainConfig(steps=steps, batch_size=16, lr=lr)
    config = HDCConfig(rank=2, k_min=1, k_max=1, refresh_every=1, lam=1.0, max_activation_round=1)
    loop = LoopConfig(rounds=rounds, seed=seed, evaluate_last=False)
    run = run_federated(HDCFL(train=train, config=config), tiny_federation, tiny_model_fn, loop)
    se = run_federated(FedAvgSE(train=train), tiny_federation, tiny_model_fn, loop)
    shared, shared_se = shared_encoder(run.server), shared_encoder(se.server)
    assert same_arrays(shared, shared_se)  # the trajectory is FedAvg-SE's
    assert cached_clients(run.server) == list(range(tiny_federation.n_clients))
    for client in range(tiny_federation.n_clients):
        assert same_arrays(personalized_encoder(run.server, client, 1.0), shared_se)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k_max=st.integers(2, 3), membership=st.sampled_from(["soft", "hard"]),
       grouping=st.sampled_from(["kmeans", "random"]))
def test_lambda_zero_gives_the_shared_encoder_for_every_client(tiny_federation, tiny_model_fn, seed, k_max,
                                                                 membership, grouping):
    config = HDCConfig(rank=2, k_min=2, k_max=k_max, refresh_every=1, membership=membership, grouping=grouping,
                       lam=0.0, max_activation_round=1, n_init=3)
    run = run_federated(HDCFL(train=TrainConfig(steps=2, batch_size=16), config=config), tiny_federation,
                        tiny_model_fn, LoopConfig(rounds=1, seed=seed, evaluate_last=False))
    shared = shared_encoder(run.server)
    for client in cached_clients(run.server):
        assert same_arrays(personalized_encoder(run.server, client, 0.0), shared)


# ------------------------------------------------------------------------------------------------
# 4. The low-rank descriptor keeps a clearly separated planted grouping
# ------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(G=st.integers(2, 4), m=st.integers(3, 5), C=st.integers(6, 16), d1=st.integers(3, 8),
       noise=st.floats(0.01, 0.2), seed=SEEDS)
def test_lowrank_descriptor_recovers_a_clearly_separated_planted_grouping(G, m, C, d1, noise, seed):
    spec = PlantedHeads(G, m, C, d1, common=3.0, signal=1.0, common_rank=2, sig_rank=2)  # group heads: 2 class directions
    heads, labels = spec.draw(np.random.default_rng(seed), noise, "few class directions")
    z = head_descriptors(torch.tensor(heads), rank=4)  # r covers the common and the group directions
    km = SilhouetteKMeans(2, min(6, G * m - 1), n_init=3, seed=0).fit(z)
    assert km.k_ == G
    assert adjusted_rand_score(labels, km.labels_) == 1.0


# ------------------------------------------------------------------------------------------------
# 6. What a refresh changes, and what it does not
# ------------------------------------------------------------------------------------------------


def _server(n: int, C: int, d: int, seed: int) -> State:
    """A server state with a shared encoder and n cached (encoder, head, n) triples."""
    g = torch.Generator().manual_seed(seed)
    arrays = {"model/enc.weight": torch.randn(3, 4, generator=g), "model/enc.bias": torch.randn(3, generator=g),
              "model/head.weight": torch.randn(C, d, generator=g), "model/head.bias": torch.randn(C, generator=g)}
    for k in range(n):
        arrays[f"cache/{k}/model/enc.weight"] = torch.randn(3, 4, generator=g)
        arrays[f"cache/{k}/model/enc.bias"] = torch.randn(3, generator=g)
        arrays[f"cache/{k}/head/weight"] = torch.randn(C, d, generator=g)
        arrays[f"cache/{k}/head/bias"] = torch.randn(C, generator=g)
        arrays[f"cache/{k}/n"] = torch.tensor(int(torch.randint(1, 50, (1,), generator=g)), dtype=torch.int64)
    return State(arrays=arrays, meta={})


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 9), C=st.integers(2, 6), d=st.integers(1, 4), k_min=st.integers(2, 3),
       k_extra=st.integers(0, 8), descriptor=st.sampled_from(["lowrank", "raw"]),
       grouping=st.sampled_from(["kmeans", "random"]), membership=st.sampled_from(["soft", "hard"]),
       log_t=st.floats(-2, 1), lam=st.floats(0, 1), data=st.data(), seed=SEEDS)
def test_a_refresh_keeps_k_in_range_rows_on_the_simplex_and_the_cache_and_encoder_unchanged(
        n, C, d, k_min, k_extra, descriptor, grouping, membership, log_t, lam, data, seed):
    config = HDCConfig(rank=data.draw(st.integers(1, min(C, n * (d + 1))), label="rank"), descriptor=descriptor, k_min=k_min,
                       k_max=k_min + k_extra, grouping=grouping, membership=membership, temperature=10.0**log_t,
                       max_activation_round=1, n_init=3)
    server = _server(n, C, d, seed % 2**31)
    before = snapshot(server)
    state = refresh(server, 1, config, seed)
    assert arrays_kept(before, server)  # the state given is not mutated
    if n <= k_min:  # the grouping waits for k_min + 1 cached clients
        assert state is server
        return
    k = int(refresh_history(state)["k"].iloc[-1])
    assert config.k_min <= k <= min(config.k_max, n - 1)
    m = state.arrays["hdcfl/membership"].numpy()
    assert m.shape == (n, k) and (m >= 0).all() and np.abs(m.sum(axis=1) - 1).max() <= 1e-12
    if membership == "hard":
        assert set(np.unique(m)) <= {0.0, 1.0}
    assert arrays_kept(before, state, "cache/") and arrays_kept(before, state, "model/")
    after = snapshot(state)
    for client in cached_clients(state):
        personalized_encoder(state, client, lam)
    assert arrays_kept(after, state)  # nothing written back
    sent = HDCFL(config=config).configure_train(state, 2, [0])[0]
    assert same_arrays(dict(sent.arrays), {k: before[k] for k in sent.arrays}) and set(sent.arrays) == {
        k for k in before if k.startswith("model/")}
