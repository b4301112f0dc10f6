"""FedGRC's MMS (layer scales, shared means, pooled covariance, metric) and SASP (fedlib.heads.mms)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from scipy.stats import multivariate_normal

from fedbook.studies.fedgrc_derivations import centralized_mms as centralized
from fedlib.heads import MMS, SASP, ZERO_VARIANCE_RTOL, adaptation_weights, layer_scales, scale_moments
from fedlib.stats import ClassMoments

T = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64))  # noqa: E731


def moments(h, y, c):
    return ClassMoments.from_features(T(h), torch.as_tensor(np.asarray(y)), c)


def federation(seed: int, n_clients: int, c: int, layer_dims, n: int = 15, absent=()):
    """Unscaled multilayer features of clients with label skew and client-specific class shifts.

    Each layer has its own magnitude, so the layer scales matter. Returns (parts, h, y).
    """
    rng = np.random.default_rng(seed)
    d = sum(layer_dims)
    mag = np.repeat(10.0 ** rng.uniform(-1, 2, size=len(layer_dims)), layer_dims)
    centers = rng.normal(scale=2.0, size=(c, d))
    classes = [k for k in range(c) if k not in absent]
    parts = []
    for _ in range(n_clients):
        y = rng.choice(classes, size=n, p=rng.dirichlet(np.ones(len(classes)) * 0.5))
        shift = rng.normal(scale=0.7, size=(c, d))
        h = (centers[y] + shift[y] + rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) * 0.5) * mag
        parts.append((h, y))
    return parts, np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


# ---------------------------------------------------------------- hand-computed fixture
def test_mms_and_sasp_hand_computed():
    # s = (1, 2); z = [[0,0],[2,0],[0,2],[2,2]]; mu_0 = (1,0), mu_1 = (1,2); Sigma_w = diag(1, 0);
    # lambda_A = 1 * 1/2; A = diag(1/1.5, 1/0.5)
    mms = MMS(gamma=1.0).fit(moments([[0, 0], [2, 0], [0, 4], [2, 4]], [0, 0, 1, 1], 2), [1, 1])
    assert mms.scales_.tolist() == [1.0, 2.0]
    assert layer_scales(moments([[0, 0], [2, 0], [0, 4], [2, 4]], [0, 0, 1, 1], 2), [2]).tolist() == [math.sqrt(2.5)]
    assert torch.allclose(mms.means_, T([[1, 0], [1, 2]]))
    assert torch.allclose(mms.covariance_, T([[1, 0], [0, 0]]))
    assert mms.ridge_ == pytest.approx(0.5)
    assert torch.allclose(mms.metric_, T([[2 / 3, 0], [0, 2]]))
    assert torch.allclose(mms.scaled_coef_, T([[2 / 3, 0], [2 / 3, 4]]))
    assert torch.allclose(mms.coef_, T([[2 / 3, 0], [2 / 3, 2]]))  # on unscaled h: column 2 divided by s_2 = 2
    assert torch.allclose(mms.intercept_, T([-1 / 3, -13 / 3]))
    # a client with one sample of class 0 at h = (2, 0) and none of class 1; m0 = 1 -> alpha = (1/2, 0)
    sasp = SASP(m0=1.0).fit(mms, T([1, 0]), T([[2, 0], [0, 0]]))
    assert sasp.alpha_.tolist() == [0.5, 0.0]
    assert torch.allclose(sasp.local_means_, T([[2, 0], [1, 2]]))
    assert torch.allclose(sasp.displacement_, T([[1, 0], [0, 0]]))
    assert torch.allclose(sasp.means_, T([[1.5, 0], [1, 2]]))
    assert torch.allclose(sasp.scaled_coef_, T([[1.0, 0], [2 / 3, 4]]))
    assert torch.allclose(sasp.intercept_, T([-0.75, -13 / 3]))


def test_adaptation_weights_conventions():
    n = T([0, 1, 4])
    assert adaptation_weights(n, 4.0).tolist() == [0.0, 0.2, 0.5]
    assert adaptation_weights(n, 0.0).tolist() == [0.0, 1.0, 1.0]  # alpha(0) = 0 even for m0 = 0
    assert adaptation_weights(n, math.inf).tolist() == [0.0, 0.0, 0.0]


# ---------------------------------------------------------------- Appendix A-E and Prop. IV.1
dims_strategy = st.lists(st.integers(1, 3), min_size=1, max_size=3)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(2, 4), dims_strategy)
def test_moments_based_mms_equals_centralized_computation(seed, k, c, dims):
    parts, h, y = federation(seed, k, c, dims)
    mms = MMS(gamma=0.3).fit([moments(ph, py, c) for ph, py in parts], dims)  # merged by addition only
    scales, z, mu, sigma = centralized(h, y, c, dims)
    assert np.allclose(mms.scales_.numpy(), scales, rtol=1e-8)
    assert np.allclose(mms.transform(T(h)).numpy(), z, rtol=1e-8)
    assert np.allclose(mms.means_.numpy(), mu, rtol=1e-7, atol=1e-9)
    assert np.allclose(mms.covariance_.numpy(), sigma, rtol=1e-6, atol=1e-8 * np.abs(sigma).max())
    for b in np.split(np.arange(h.shape[1]), np.cumsum(dims)[:-1]):  # unit average coordinate variance per block
        assert np.var(z[:, b], axis=0).mean() == pytest.approx(1.0, rel=1e-9)
    assert mms.ridge_ == pytest.approx(0.3 * np.trace(sigma) / h.shape[1], rel=1e-8)
    assert np.allclose(mms.metric_.numpy(), np.linalg.inv(sigma + mms.ridge_ * np.eye(h.shape[1])), rtol=1e-6, atol=1e-8)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 4), st.integers(2, 4), dims_strategy)
def test_pooled_covariance_is_within_client_plus_between_client_shift(seed, k, c, dims):
    """Prop. IV.1: Sigma_w = (1/N) sum_k sum_c n_c^k (Sigma_c^k + Delta_c^k Delta_c^k^T)."""
    parts, _, _ = federation(seed, k, c, dims)
    mms = MMS().fit([moments(ph, py, c) for ph, py in parts], dims)
    within = torch.zeros_like(mms.covariance_)
    between = torch.zeros_like(mms.covariance_)
    for ph, py in parts:
        zk = scale_moments(moments(ph, py, c), mms.feature_scale_)
        for cl in zk.observed.nonzero().flatten().tolist():
            delta = zk.means()[cl] - mms.means_[cl]
            within += zk.counts[cl] * zk.class_covariances()[cl]
            between += zk.counts[cl] * torch.outer(delta, delta)
    n = float(mms.counts_.sum())
    assert torch.allclose(mms.covariance_, (within + between) / n, rtol=1e-6, atol=1e-9)
    # pooling the client-centred covariances alone would miss the between-client term
    shared = sum((moments(ph, py, c).counts > 0).to(torch.int) for ph, py in parts) >= 2
    assert float(torch.trace(between)) >= 0
    if bool(shared.any()):  # a class held by two clients with different means: a positive shift term
        assert float(torch.trace(between)) > 0


# ---------------------------------------------------------------- Eq. (31): operator norm and condition number
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 8), st.integers(2, 12), st.floats(1e-3, 100.0))
def test_metric_norm_and_condition_bounds_including_singular_covariances(seed, d, n, gamma):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) * rng.uniform(0.1, 10)  # n < d: singular covariance
    mms = MMS(gamma=gamma).fit(moments(h, rng.integers(0, 2, size=n), 2))
    sig = np.linalg.eigvalsh(mms.covariance_.numpy())
    eig = np.linalg.eigvalsh(mms.metric_.numpy())
    lam = mms.ridge_
    assert lam > 0 and eig.min() > 0
    assert eig.max() <= (1 / lam) * (1 + 1e-9)
    assert eig.max() == pytest.approx(1 / (max(sig.min(), 0.0) + lam), rel=1e-6, abs=1e-12)
    assert eig.max() / eig.min() <= (1 + d / gamma) * (1 + 1e-9)


# ---------------------------------------------------------------- Prop. IV.2: SASP mean is the unique minimizer
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 30.0), st.integers(1, 3))
def test_sasp_mean_is_the_minimizer_of_the_regularized_objective(seed, m0, d):
    parts, _, _ = federation(seed, 3, 3, [d], n=8)
    mms = MMS(gamma=0.2).fit([moments(ph, py, 3) for ph, py in parts], [d])
    ph, py = parts[0]
    sasp = SASP(m0=m0).fit(mms, moments(ph, py, 3))
    a = mms.metric_.numpy()
    z = mms.transform(T(ph)).numpy()
    rng = np.random.default_rng(seed)
    for c in range(3):
        zc, mu = z[py == c], mms.means_[c].numpy()

        def objective(m, zc=zc, mu=mu):  # J_c^(k)(m) = sum_i ||z_i - m||_A^2 + m0 ||m - mu_c||_A^2
            r = zc - m
            return float(np.einsum("id,de,ie->", r, a, r) + m0 * (m - mu) @ a @ (m - mu))

        x0 = mu + rng.normal(size=d) * 3
        num = minimize(objective, x0, method="BFGS", options={"gtol": 1e-10}).x
        closed = sasp.means_[c].numpy()
        scale = 1 + np.abs(closed).max()
        assert np.abs(num - closed).max() <= 1e-4 * scale
        # uniqueness: the Hessian 2 (n + m0) A is positive definite, so every other point is worse
        for _ in range(3):
            other = closed + rng.normal(size=d) * 0.1 * scale
            assert objective(other) > objective(closed)
        if len(zc) == 0:  # absent locally: keeps the shared mean
            assert np.allclose(closed, mu)


# ---------------------------------------------------------------- Appendix A-G: Bayes / nearest-mean equivalence
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 50.0), dims_strategy)
def test_equal_prior_head_is_nearest_personalized_mean_and_bayes_rule(seed, m0, dims):
    parts, h, _ = federation(seed, 3, 4, dims, n=10)
    mms = MMS().fit([moments(ph, py, 4) for ph, py in parts], dims)
    ph, py = parts[1]
    sasp = SASP(m0=m0).fit(mms, moments(ph, py, 4))
    q = T(h[:40])
    z = mms.transform(q)
    scores = sasp.decision_function(q)
    d2 = sasp.squared_distances(q)
    za = torch.einsum("nd,de,ne->n", z, mms.metric_, z)
    ok = sasp.classes_
    assert torch.allclose(scores[:, ok], (-0.5 * d2 + 0.5 * za[:, None])[:, ok], rtol=1e-9, atol=1e-7)
    assert torch.allclose(scores, z @ sasp.scaled_coef_.T + sasp.intercept_, rtol=1e-9, atol=1e-8)  # h-space == z-space head
    assert torch.equal(sasp.predict(q), d2.argmin(1))
    cov = np.linalg.inv(mms.metric_.numpy())
    loglik = np.stack([multivariate_normal(sasp.means_[c].numpy(), cov, allow_singular=True).logpdf(z.numpy()).reshape(-1)
                       for c in range(4)], axis=1)
    loglik[:, ~ok.numpy()] = -np.inf
    assert np.array_equal(sasp.predict(q).numpy(), loglik.argmax(1))


# ---------------------------------------------------------------- limits of m0
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), dims_strategy)
def test_m0_limits_shared_head_and_local_means(seed, dims):
    parts, h, _ = federation(seed, 3, 3, dims, n=10)
    mms = MMS().fit([moments(ph, py, 3) for ph, py in parts], dims)
    client = moments(*parts[2], 3)
    inf = SASP(m0=math.inf).fit(mms, client)
    assert torch.equal(inf.coef_, mms.coef_) and torch.equal(inf.intercept_, mms.intercept_)
    big = SASP(m0=1e12).fit(mms, client)
    assert torch.allclose(big.decision_function(T(h)), mms.decision_function(T(h)), rtol=1e-6, atol=1e-6)
    zero = SASP(m0=0.0).fit(mms, client)
    seen = client.observed
    local = scale_moments(client, mms.feature_scale_).means()
    assert torch.allclose(zero.means_[seen], local[seen])
    assert torch.equal(zero.means_[~seen], mms.means_[~seen])
    empty = SASP(m0=0.0).fit(mms, ClassMoments.zeros(3, sum(dims)))  # a client with no samples: the shared head
    assert torch.equal(empty.coef_, mms.coef_) and torch.equal(empty.intercept_, mms.intercept_)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("gamma", [0.0, -1.0, math.nan, math.inf, True, "0.1"])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        MMS(gamma=gamma).fit(moments([[0.0], [1.0]], [0, 1], 2))


@pytest.mark.parametrize("m0", [-1.0, math.nan, "1", None])
def test_bad_m0(m0):
    mms = MMS().fit(moments([[0.0], [1.0]], [0, 1], 2))
    with pytest.raises(ValueError, match="m0"):
        SASP(m0=m0).fit(mms, T([1, 0]), T([[0.0], [0.0]]))


def test_bad_layer_dims_and_client_inputs():
    mom = moments([[0.0, 1.0, 2.0], [1.0, 0.0, 2.0]], [0, 1], 3)
    for dims in ([1, 1], [2, 2], [0, 3], [1.5, 1.5], []):
        with pytest.raises(ValueError, match="layer_dims"):
            MMS().fit(mom, dims)
    mms = MMS().fit(mom, [2, 1])
    with pytest.raises(ValueError, match="no client"):  # class 2 is not federation-known
        SASP().fit(mms, T([0, 0, 1]), T(np.zeros((3, 3))))
    with pytest.raises(ValueError, match="shapes"):
        SASP().fit(mms, T([1, 0]), T(np.zeros((2, 3))))
    with pytest.raises(ValueError, match=">= 0"):
        SASP().fit(mms, T([-1, 0, 0]), T(np.zeros((3, 3))))
    with pytest.raises(ValueError, match="fitted MMS"):
        SASP().fit(MMS(), T([1, 0, 0]), T(np.zeros((3, 3))))
    with pytest.raises(ValueError, match="no sample"):
        MMS().fit(ClassMoments.zeros(2, 3))
    with pytest.raises(RuntimeError, match="not fitted"):
        SASP().predict(torch.zeros(1, 3))


def test_class_absent_everywhere_zero_features_and_singular_covariance_never_nan():
    parts, h, y = federation(1, 3, 4, [2, 2], absent=(2,))
    mms = MMS().fit([moments(ph, py, 4) for ph, py in parts], [2, 2])
    sasp = SASP(m0=0.0).fit(mms, moments(*parts[0], 4))
    for head in (mms, sasp):
        assert head.classes_.tolist() == [True, True, False, True]
        assert head.intercept_[2] == -math.inf and bool((head.coef_[2] == 0).all())
        assert not bool(torch.isnan(head.coef_).any() or torch.isnan(head.intercept_).any())
        assert not bool((head.predict(T(h)) == 2).any())
    # zero-norm features: s = 1, Sigma_w = 0, lambda_A falls back to gamma, A = I / gamma
    zero = MMS(gamma=0.5).fit(moments(np.zeros((4, 3)), [0, 0, 1, 1], 2), [2, 1])
    assert zero.scales_.tolist() == [1.0, 1.0] and zero.ridge_ == pytest.approx(0.5)
    assert torch.allclose(zero.metric_, 2 * torch.eye(3, dtype=torch.float64))
    s = SASP(m0=0.0).fit(zero, moments(np.zeros((1, 3)), [0], 2))
    assert bool(torch.isfinite(s.coef_).all() and torch.isfinite(s.decision_function(torch.ones(2, 3))).all())
    # one sample per class: Sigma_w = 0 exactly (singular), the head stays finite
    one = MMS().fit(moments([[0.0, 1.0], [3.0, 1.0]], [0, 1], 2))
    assert bool(torch.isfinite(one.metric_).all()) and one.predict(T([[0.1, 1.0], [2.9, 1.0]])).tolist() == [0, 1]


# ---------------------------------------------------------------- layer scales of constant layers (bug fix)
def _naive_layer_scales(moments, layer_dims):
    """Eq. (22) without treating rounding residue as zero (the computation before the fix)."""
    n = moments.counts.sum()
    mean = moments.sums.sum(0) / n
    var = (torch.diagonal(moments.grams, dim1=1, dim2=2).sum(0) / n - mean**2).clamp(min=0.0)
    s = torch.stack([torch.sqrt(b.mean()) for b in torch.split(var, list(layer_dims))])
    return torch.where(s > 0, s, torch.ones_like(s))


@pytest.mark.parametrize("c", [1e-3, 1.0, 1e3, 1e6])
def test_a_constant_non_zero_layer_keeps_scale_one(c):
    """A layer whose features are constant but not zero has zero variance: s = 1, as documented.

    Its E[x^2] - mean^2 is rounding residue of the merged moments; here a residue of a few ulps of
    E[x^2] is put in by hand (the sums of n c^2 in some order), so that the formula before the fix
    gives s = sqrt(residue) ~ 1e-8 |c| for every magnitude; the fix gives 1."""
    n = torch.tensor([400.0, 300.0, 297.0], dtype=torch.float64)
    const = torch.tensor([c, 0.37 * c, 2.9 * c], dtype=torch.float64)  # layer 0: 3 constant coordinates
    rng = np.random.default_rng(0)
    vary = T(rng.normal(size=(3, 4)))  # layer 1: class means of 4 varying coordinates
    sums = torch.cat([n[:, None] * const[None, :], n[:, None] * vary], dim=1)  # (3, 7)
    grams = sums[:, :, None] * sums[:, None, :] / n[:, None, None] + torch.diag_embed(torch.cat(
        [torch.zeros(3), torch.ones(4)]).double()).expand(3, 7, 7) * n[:, None, None]  # within-class variance in layer 1 only
    residue = 1 + 4 * torch.finfo(torch.float64).eps
    grams[:, :3, :3] *= residue  # rounding residue of the constant coordinates' second moments
    merged = ClassMoments(n, sums, grams)
    assert float(_naive_layer_scales(merged, (3, 4))[0]) < 1e-7 * abs(c)  # the bug
    s = layer_scales(merged, (3, 4))
    assert s[0] == 1.0 and s[1] == _naive_layer_scales(merged, (3, 4))[1]  # the fix; the varying layer unchanged
    assert layer_scales(merged.compact(), (3, 4))[0] == 1.0  # the compact form too
    mms = MMS().fit(merged, (3, 4))
    assert mms.scales_[0] == 1.0 and bool(torch.isfinite(mms.metric_).all())


def test_a_constant_layer_of_float32_features_keeps_scale_one():
    """The same from features: 997 float32 samples whose first layer is the constant 3.3, summarized
    in chunks of 256 rows and merged (as a client does); before the fix its scale came out 2.4e-8."""
    rng = np.random.default_rng(0)
    h = np.concatenate([np.full((997, 3), 3.3) * np.array([1.0, 0.37, 2.9]), rng.normal(size=(997, 4))], axis=1)
    h = T(h.astype(np.float32).astype(np.float64))
    y = torch.from_numpy(rng.integers(0, 10, size=997))
    merged = ClassMoments.sum([ClassMoments.from_features(h[i : i + 256], y[i : i + 256], 10) for i in range(0, 997, 256)])
    assert float(_naive_layer_scales(merged, (3, 4))[0]) < 1e-6  # the bug, on this data
    s = layer_scales(merged, (3, 4))
    assert s[0] == 1.0
    assert float(s[1]) == pytest.approx(math.sqrt(np.var(h[:, 3:].numpy(), axis=0).mean()), rel=1e-10)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([[2], [3, 1], [1, 2, 2]]))
def test_a_varying_layer_keeps_its_scale_bit_for_bit(seed, dims):
    """The fix only zeroes variances at rounding level: a normal layer's scale is unchanged."""
    parts, h, y = federation(seed, 3, 3, dims)
    merged = ClassMoments.sum([moments(ph, py, 3) for ph, py in parts])
    assert torch.equal(layer_scales(merged, dims), _naive_layer_scales(merged, dims))
    np.testing.assert_allclose(layer_scales(merged, dims).numpy(), centralized(h, y, 3, dims)[0], rtol=1e-9)


def test_zero_variance_threshold_is_relative():
    # a coordinate that varies by 1e-4 relative to its mean is kept (variance 1e-8 * E[x^2] > rtol)
    h = np.array([[1e3 * (1 + 1e-4)], [1e3 * (1 - 1e-4)]])
    s = layer_scales(moments(h, [0, 1], 2), [1])
    assert float(s[0]) == pytest.approx(1e3 * 1e-4, rel=1e-6) and ZERO_VARIANCE_RTOL < 1e-8

