"""Statistical-head baselines from class moments: FedNCM, LDA-style, FedCGS, Fed3R (fedlib.stat_heads)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from fedlib.stat_heads import FedCGSHead, Fed3RHead, FedNCMHead, LDAHead, gaussian_linear_head
from fedlib.stats import ClassMoments

HEADS = [FedNCMHead, LDAHead, FedCGSHead, Fed3RHead]
LOG_HALF = math.log(0.5)


def moments(z, y, c):
    return ClassMoments.from_features(torch.as_tensor(z, dtype=torch.float64), torch.as_tensor(y), c)


def clients(seed: int, n_clients: int, c: int, d: int, n: int = 30):
    """Per-client features with client-specific class shifts; returns (list of (z, y), pooled z, pooled y)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(c, d))
    parts = []
    for _ in range(n_clients):
        y = rng.integers(0, c, size=n)
        z = centers[y] + rng.normal(size=(c, d))[y] * 0.5 + rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) * 0.5
        parts.append((z, y))
    z = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    return parts, z, y


# ---------------------------------------------------------------- hand-computed fixtures
def test_fedncm_hand_computed_and_zero_mean_class():
    z = [[3.0, 4.0], [3.0, 4.0], [1.0, -1.0], [-1.0, 1.0], [0.0, 2.0]]
    head = FedNCMHead().fit(moments(z, [0, 0, 1, 1, 2], 3))
    assert torch.allclose(head.coef_, torch.tensor([[0.6, 0.8], [0.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    assert head.intercept_.tolist() == [0.0, 0.0, 0.0]  # class 1 has a zero mean: zero weights, no 0/0
    assert head.decision_function(torch.tensor([[5.0, 0.0]])).tolist() == [[3.0, 0.0, 0.0]]


def test_lda_hand_computed_singular_pooled_covariance():
    # pooled within-class covariance diag(1, 0) (singular): pseudo-inverse diag(1, 0)
    head = LDAHead().fit(moments([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0], [6.0, 0.0]], [0, 0, 1, 1], 2))
    assert torch.allclose(head.covariance_, torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(head.coef_, torch.tensor([[1.0, 0.0], [5.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(head.intercept_, torch.tensor([-0.5 + LOG_HALF, -12.5 + LOG_HALF], dtype=torch.float64))
    eq = LDAHead(priors="equal").fit(moments([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0], [6.0, 0.0]], [0, 0, 1, 1], 2))
    assert torch.allclose(eq.intercept_ - head.intercept_, torch.zeros(2, dtype=torch.float64))  # 2 balanced classes


def test_fedcgs_hand_computed():
    # global mean (2, 0), total covariance S = diag(4, 1); mu_0 = (0, 0), mu_1 = (4, 0)
    head = FedCGSHead().fit(moments([[0.0, 1.0], [0.0, -1.0], [4.0, 1.0], [4.0, -1.0]], [0, 0, 1, 1], 2))
    assert torch.allclose(head.covariance_, torch.diag(torch.tensor([4.0, 1.0], dtype=torch.float64)))
    assert torch.allclose(head.coef_, torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(head.intercept_, torch.tensor([LOG_HALF, -2.0 + LOG_HALF], dtype=torch.float64))


def test_fed3r_hand_computed():
    # one feature, phi = [x; 1]: samples x = 1 (class 0), x = -1 (class 1); G = diag(2, 2), B = [[1, -1], [1, 1]]
    head = Fed3RHead(lam=2.0).fit(moments([[1.0], [-1.0]], [0, 1], 2))  # (2I + G)^-1 B = B / 4
    s = 1 / math.sqrt(2)
    assert torch.allclose(head.weights_, torch.tensor([[s, -s], [s, s]], dtype=torch.float64))
    raw = Fed3RHead(lam=2.0, normalize=False).fit(moments([[1.0], [-1.0]], [0, 1], 2))
    assert torch.allclose(raw.weights_, torch.tensor([[0.25, -0.25], [0.25, 0.25]], dtype=torch.float64))


def test_gaussian_linear_head_skips_nan_means_of_absent_classes():
    w, b = gaussian_linear_head(torch.tensor([[1.0, 0.0], [math.nan, math.nan]]), torch.eye(2), torch.tensor([0.0, -math.inf]))
    assert w.tolist() == [[1.0, 0.0], [0.0, 0.0]] and b.tolist() == [-0.5, -math.inf]


# ---------------------------------------------------------------- reference tests
def test_lda_head_equals_sklearn_lsqr_and_eigen_with_empirical_priors():
    _, z, y = clients(0, 3, 4, 5)  # unbalanced classes
    head = LDAHead(reg=0.0, priors="empirical").fit(moments(z, y, 4))
    q = np.random.default_rng(1).normal(scale=3.0, size=(200, 5))
    lsqr = LinearDiscriminantAnalysis(solver="lsqr").fit(z, y)
    np.testing.assert_allclose(head.coef_.numpy(), lsqr.coef_, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(head.intercept_.numpy(), lsqr.intercept_, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(head.decision_function(torch.from_numpy(q)).numpy(), lsqr.decision_function(q), rtol=1e-8, atol=1e-7)
    eigen = LinearDiscriminantAnalysis(solver="eigen").fit(z, y)
    assert np.array_equal(head.predict(torch.from_numpy(q)).numpy(), eigen.predict(q))


def test_lda_head_equals_sklearn_with_equal_priors_on_balanced_classes():
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(3), 40)
    z = rng.normal(size=(120, 4)) @ rng.normal(size=(4, 4)) + rng.normal(scale=2.0, size=(3, 4))[y]
    head = LDAHead(priors="equal").fit(moments(z, y, 3))
    lda = LinearDiscriminantAnalysis(solver="lsqr", priors=np.ones(3) / 3).fit(z, y)
    np.testing.assert_allclose(head.decision_function(torch.from_numpy(z)).numpy(), lda.decision_function(z), rtol=1e-8, atol=1e-7)


def test_lda_head_singular_covariance_matches_sklearn_min_norm_solution():
    _, z, y = clients(3, 2, 3, 3)
    z = np.concatenate([z, z[:, :1]], axis=1)  # a duplicated coordinate: exactly singular covariance
    head = LDAHead().fit(moments(z, y, 3))
    lda = LinearDiscriminantAnalysis(solver="lsqr").fit(z, y)
    assert bool(torch.isfinite(head.coef_).all())
    assert np.array_equal(head.predict(torch.from_numpy(z)).numpy(), lda.predict(z))


def test_fedcgs_and_fed3r_equal_their_per_sample_formulas_on_pooled_features():
    _, z, y = clients(4, 4, 3, 4)
    c, n = 3, len(y)
    cgs = FedCGSHead().fit(moments(z, y, c))
    s_inv = np.linalg.inv(np.cov(z.T, bias=True))
    mu = np.stack([z[y == k].mean(0) for k in range(c)])
    np.testing.assert_allclose(cgs.coef_.numpy(), mu @ s_inv, rtol=1e-9, atol=1e-9)
    prior = np.log(np.bincount(y, minlength=c) / n)
    np.testing.assert_allclose(cgs.intercept_.numpy(), -0.5 * np.einsum("cd,de,ce->c", mu, s_inv, mu) + prior, rtol=1e-9)

    phi = np.concatenate([z, np.ones((n, 1))], axis=1)
    onehot = np.eye(c)[y]
    w = np.linalg.solve(0.01 * np.eye(5) + phi.T @ phi, phi.T @ onehot)
    w /= np.linalg.norm(w, axis=0, keepdims=True)
    f3r = Fed3RHead().fit(moments(z, y, c))
    np.testing.assert_allclose(f3r.weights_.numpy(), w, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(f3r.decision_function(torch.from_numpy(z)).numpy(), phi @ w, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------- properties
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(2, 4), st.integers(1, 5))
def test_heads_from_client_moments_equal_heads_from_pooled_features(seed, k, c, d):
    parts, z, y = clients(seed, k, c, d, n=12)
    pooled = moments(z, y, c)
    per_client = [moments(pz, py, c) for pz, py in parts]
    for cls in HEADS:
        a, b = cls().fit(per_client), cls().fit(pooled)
        assert torch.equal(a.classes_, b.classes_)
        ok = a.classes_
        assert torch.allclose(a.coef_, b.coef_, rtol=1e-6, atol=1e-8), cls.__name__
        assert torch.allclose(a.intercept_[ok], b.intercept_[ok], rtol=1e-6, atol=1e-8), cls.__name__
        assert not bool(torch.isnan(a.coef_).any() or torch.isnan(a.intercept_).any())
        scores = a.decision_function(torch.from_numpy(z))
        assert torch.allclose(scores, torch.from_numpy(z) @ a.coef_.T + a.intercept_)
        assert bool(torch.isfinite(scores[:, ok]).all())
        assert bool(a.classes_[a.predict(torch.from_numpy(z))].all())  # only classes with samples


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(2, 5), st.integers(1, 6))
def test_fast_pooled_covariance_equals_the_general_path_and_numpy(seed, k, c, d):
    """ClassMoments' pooled covariance about the class means (one (d, d) product, no (C, d, d)
    temporary) equals the scatter about explicitly given centres and numpy on the pooled features."""
    parts, z, y = clients(seed, k, c, d, n=10)
    mom = ClassMoments.sum([moments(pz, py, c) for pz, py in parts])
    within, total = mom.pooled_covariance(), mom.total_covariance()
    assert torch.allclose(within, mom.pooled_covariance(centers=mom.means()), rtol=1e-7, atol=1e-9)
    mu = np.stack([z[y == k].mean(0) if (y == k).any() else np.zeros(d) for k in range(c)])
    e = z - mu[y]
    np.testing.assert_allclose(within.numpy(), e.T @ e / len(y), rtol=1e-6, atol=1e-8)  # numpy on the pooled features
    np.testing.assert_allclose(total.numpy(), np.cov(z.T, bias=True).reshape(d, d), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("cls", HEADS)
def test_class_absent_from_every_client_is_never_predicted(cls):
    _, z, y = clients(5, 2, 3, 3)
    y = np.where(y == 1, 0, y)  # class 1 absent everywhere
    head = cls().fit(moments(z, y, 3))
    assert head.classes_.tolist() == [True, False, True]
    assert head.intercept_[1] == -math.inf and bool((head.coef_[1] == 0).all())
    assert not bool(torch.isnan(head.coef_).any() or torch.isnan(head.intercept_).any())
    assert not bool((head.predict(torch.from_numpy(z) * 3) == 1).any())


@pytest.mark.parametrize("cls", HEADS)
def test_zero_norm_features_give_a_finite_head(cls):
    head = cls().fit(moments(np.zeros((6, 3)), [0, 0, 1, 1, 2, 2], 3))
    assert bool(torch.isfinite(head.coef_).all() and torch.isfinite(head.intercept_).all())
    assert bool(torch.isfinite(head.decision_function(torch.zeros(2, 3))).all())


@pytest.mark.parametrize("cls", HEADS)
def test_no_sample_not_fitted_and_bad_moments(cls):
    with pytest.raises(ValueError, match="no sample"):
        cls().fit(ClassMoments.zeros(3, 2))
    with pytest.raises(RuntimeError, match="not fitted"):
        cls().predict(torch.zeros(1, 2))
    bad = ClassMoments(torch.tensor([1.0, 1.0]), torch.tensor([[math.nan], [1.0]]), torch.ones(2, 1, 1))
    with pytest.raises(ValueError, match="NaN"):
        cls().fit(bad)
    with pytest.raises(ValueError, match="list of ClassMoments"):
        cls().fit([])
    head = cls().fit(moments([[1.0, 0.0], [0.0, 1.0]], [0, 1], 2))
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        head.predict(torch.zeros(3, 5))


@pytest.mark.parametrize("make", [lambda: LDAHead(priors="uniform"), lambda: LDAHead(reg=-1.0), lambda: FedCGSHead(reg=math.nan),
                                  lambda: Fed3RHead(lam=0.0), lambda: Fed3RHead(lam=-0.01), lambda: Fed3RHead(lam=math.inf)])
def test_bad_hyper_parameters_are_clear_errors(make):
    with pytest.raises(ValueError, match="priors|reg|lam"):
        make().fit(moments([[1.0, 0.0], [0.0, 1.0]], [0, 1], 2))
