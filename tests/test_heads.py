"""The statistical heads (fedlib.heads): the estimator contract, Euclidean and Mahalanobis
nearest-class-mean, the baselines from class moments (FedNCM, LDA-style, FedCGS, Fed3R, CCVR).
MMS and SASP are in test_mms.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from fedlib.heads import (
    MMS,
    SASP,
    CCVRHead,
    FedCGSHead,
    Fed3RHead,
    FedNCMHead,
    Head,
    LDAHead,
    MahalanobisNCM,
    NearestClassMean,
    ccvr_calibrate,
    gaussian_linear_head,
    gram_form,
    mahalanobis,
    regularized_covariance,
)
from fedlib.stats import ClassMoments

def test_regularized_covariance_hand_computed():
    cov = torch.tensor([[2.0, 1.0], [1.0, 4.0]])
    out = regularized_covariance(cov, 0.5)  # tr/d = 3 -> + 1.5 I
    assert torch.allclose(out, torch.tensor([[3.5, 1.0], [1.0, 5.5]], dtype=torch.float64))
    assert torch.allclose(regularized_covariance(torch.zeros(2, 2), 0.5), 0.5 * torch.eye(2, dtype=torch.float64))


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "x"])
def test_bad_reg_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="reg"):
        regularized_covariance(torch.eye(2), bad)
    with pytest.raises(ValueError, match="reg"):
        MahalanobisNCM(reg=bad).fit(means=torch.zeros(2, 2), covariance=torch.eye(2))


def test_not_fitted_and_bad_shapes():
    with pytest.raises(RuntimeError, match="not fitted"):
        NearestClassMean().predict(torch.zeros(1, 2))
    head = NearestClassMean().fit(means=torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        head.predict(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="exactly one"):
        NearestClassMean().fit()
    with pytest.raises(ValueError, match="covariance"):
        MahalanobisNCM().fit(means=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="finite"):
        NearestClassMean().fit(means=torch.full((2, 2), float("nan")))


def test_unobserved_class_is_never_predicted():
    means = torch.tensor([[0.0, 0.0], [float("nan"), 0.0], [5.0, 5.0]])
    head = MahalanobisNCM().fit(means=means, covariance=torch.eye(2))
    pred = head.predict(torch.randn(50, 2, generator=torch.Generator().manual_seed(0)))
    assert not bool((pred == 1).any())
    assert head.classes_.tolist() == [True, False, True]


def test_singular_covariance_without_reg_uses_pinv_and_stays_finite():
    cov = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    head = MahalanobisNCM(reg=0.0).fit(means=torch.tensor([[0.0, 0.0], [1.0, -1.0]]), covariance=cov)
    assert bool(torch.isfinite(head.decision_function(torch.randn(5, 2))).all())


def test_mahalanobis_ncm_equals_sklearn_lda_with_equal_priors():
    rng = np.random.default_rng(0)
    z = np.concatenate([rng.normal(size=(80, 3)) @ np.diag([1, 3, 0.5]) + m for m in ([0, 0, 0], [2, 1, 0], [0, 3, 1])])
    y = np.repeat(np.arange(3), 80)
    mom = ClassMoments.from_features(torch.from_numpy(z), torch.from_numpy(y), 3)
    head = MahalanobisNCM(reg=0.0).fit(mom)
    lda = LinearDiscriminantAnalysis(solver="lsqr", priors=np.ones(3) / 3).fit(z, y)
    assert np.array_equal(head.predict(torch.from_numpy(z)).numpy(), lda.predict(z))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 5), st.integers(1, 6))
def test_identity_covariance_equals_euclidean_ncm(seed, c, d):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(c, d, generator=g, dtype=torch.float64) * 3
    z = torch.randn(40, d, generator=g, dtype=torch.float64) * 3
    a = MahalanobisNCM(reg=0.0).fit(means=means, covariance=torch.eye(d)).decision_function(z)
    b = NearestClassMean().fit(means=means).decision_function(z)
    assert torch.allclose(a, b)
    assert mahalanobis(means[0], z[0], torch.eye(d, dtype=torch.float64)) == pytest.approx(float((means[0] - z[0]).norm()))


def test_fit_from_moments_with_class_subset():
    z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [10.0, 14.0]])
    mom = ClassMoments.from_features(z, torch.tensor([0, 0, 1, 1]), 2)
    head = MahalanobisNCM(reg=0.0).fit(mom, classes=[0])
    assert torch.allclose(head.covariance_, torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64))


# ---------------------------------------------------------------- baselines from class moments
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


# ---------------------------------------------------------------- CCVRHead
def _moments(z, y, c=3):
    return ClassMoments.from_features(torch.as_tensor(np.asarray(z), dtype=torch.float64), torch.as_tensor(y), c)


def test_ccvr_head_equals_ccvr_calibrate_and_is_reproducible():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 10)
    z = rng.normal(size=(30, 3)) + 3 * np.eye(3)[y]
    m = _moments(z, y)
    w0, b0 = torch.randn(3, 3, generator=torch.Generator().manual_seed(1)), torch.zeros(3)
    head = CCVRHead(n_virtual=30, steps=50, lr=0.05).fit(m, generator=torch.Generator().manual_seed(2), init=(w0, b0))
    covs = m.class_covariances()
    w, b = ccvr_calibrate(m.means(), covs, m.counts, w0, b0, n_virtual=30, steps=50, lr=0.05, reg=0.1,
                          generator=torch.Generator().manual_seed(2))
    assert torch.allclose(head.coef_, w.double()) and torch.allclose(head.intercept_, b.double())
    again = CCVRHead(n_virtual=30, steps=50, lr=0.05).fit(m, generator=torch.Generator().manual_seed(2), init=(w0, b0))
    assert torch.equal(head.coef_, again.coef_)
    assert (head.predict(torch.as_tensor(z)).numpy() == y).mean() > 0.9


def test_ccvr_zero_steps_returns_init_on_observed_classes_absent_class_never_predicted():
    z, y = [[0.0, 1.0], [1.0, 0.0], [5.0, 5.0], [6.0, 5.0]], [0, 0, 2, 2]
    w0, b0 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), torch.tensor([0.5, 9.0, -0.5])
    head = CCVRHead(steps=0).fit(_moments(z, y), generator=torch.Generator(), init=(w0, b0))
    assert head.coef_.tolist() == [[1.0, 2.0], [0.0, 0.0], [5.0, 6.0]]
    assert head.intercept_.tolist() == [0.5, -math.inf, -0.5] and head.classes_.tolist() == [True, False, True]
    trained = CCVRHead(steps=50).fit(_moments(z, y), generator=torch.Generator().manual_seed(0), init=(w0, b0))
    assert trained.intercept_[1] == -math.inf and not bool((trained.predict(torch.randn(50, 2) * 10) == 1).any())


def test_ccvr_singular_indefinite_zero_and_single_sample_covariances_stay_finite():
    g = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    # moments whose class covariance G/n - mu mu^T is indefinite (eigenvalues 1.5 and -0.5), as
    # cancellation can leave it: the ridge 0.1 * tr/d = 0.05 does not fix it, plain ccvr_calibrate fails
    m = ClassMoments(torch.tensor([2.0, 2.0], dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64),
                     torch.tensor([[[1.0, 2.0], [2.0, 1.0]], [[2.0, 0.0], [0.0, 2.0]]], dtype=torch.float64))
    with pytest.raises(torch.linalg.LinAlgError):
        ccvr_calibrate(m.means(), m.class_covariances(), m.counts, torch.zeros(2, 2), torch.zeros(2), n_virtual=5, steps=1,
                       generator=g)
    head = CCVRHead(n_virtual=5, steps=3).fit(m, generator=g)
    assert bool(torch.isfinite(head.coef_).all() and torch.isfinite(head.intercept_).all())
    assert torch.allclose(head.covariances_[0], torch.tensor([[0.75, 0.75], [0.75, 0.75]], dtype=torch.float64))  # PSD part
    assert torch.equal(head.covariances_[1], torch.eye(2, dtype=torch.float64))  # a valid one is kept
    # all-zero features: zero covariances, virtual features from reg * I
    zero = CCVRHead(n_virtual=5, steps=3).fit(_moments(np.zeros((4, 3)), [0, 0, 1, 1], 2), generator=g)
    assert bool(torch.isfinite(zero.coef_).all())
    # d > n: singular covariances; a class seen once uses the pooled covariance
    wide = CCVRHead(n_virtual=5, steps=3).fit(_moments(rng.normal(size=(5, 8)), [0, 0, 0, 1, 2]), generator=g)
    assert bool(torch.isfinite(wide.coef_).all()) and wide.classes_.tolist() == [True, True, True]


def test_ccvr_bad_input():
    m = _moments([[0.0], [1.0]], [0, 1], 2)
    g = torch.Generator()
    for kw, match in (({"reg": 0.0}, "reg"), ({"n_virtual": 0}, "n_virtual"), ({"steps": -1}, "steps"), ({"lr": -1.0}, "lr"),
                      ({"n_virtual": 2.5}, "n_virtual")):
        with pytest.raises(ValueError, match=match):
            CCVRHead(**kw).fit(m, generator=g)
    with pytest.raises(ValueError, match="generator"):
        CCVRHead().fit(m, generator=0)
    with pytest.raises(ValueError, match="init must be"):
        CCVRHead().fit(m, generator=g, init=(torch.zeros(3, 1), torch.zeros(3)))
    with pytest.raises(ValueError, match="NaN"):
        CCVRHead().fit(m, generator=g, init=(torch.full((2, 1), math.nan), torch.zeros(2)))
    with pytest.raises(ValueError, match="no sample"):
        CCVRHead().fit(ClassMoments.zeros(2, 1), generator=g)
    with pytest.raises(ValueError, match="diverged"):
        CCVRHead(steps=20, lr=1e37).fit(_moments([[0.0], [1e3]], [0, 1], 2), generator=g)


def test_ccvr_calibrate_learns_separated_class_gaussians_and_skips_unobserved():
    """(moved from test_tracking.py with CCVR's calibration)"""
    F = torch.float64
    means = torch.tensor([[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0]], dtype=F)
    covs = torch.eye(2, dtype=F).repeat(3, 1, 1)
    counts = torch.tensor([50.0, 50.0, 0.0], dtype=F)
    W, b = ccvr_calibrate(means, covs, counts, torch.zeros(3, 2), torch.zeros(3), n_virtual=50, steps=200, lr=0.05,
                          generator=torch.Generator().manual_seed(0))
    pred = (means.float() @ W.T + b).argmax(1)
    assert pred[:2].tolist() == [0, 1]
    assert bool(torch.isfinite(W).all())
    with pytest.raises(ValueError, match="n_virtual"):
        ccvr_calibrate(means, covs, counts, torch.zeros(3, 2), torch.zeros(3), n_virtual=0)


# ---------------------------------------------------------------- the estimator contract
ALL_HEADS = [NearestClassMean, MahalanobisNCM, FedNCMHead, LDAHead, FedCGSHead, Fed3RHead, CCVRHead, MMS, SASP]
TOTAL_GRAM_HEADS = [NearestClassMean, MahalanobisNCM, FedNCMHead, LDAHead, FedCGSHead, Fed3RHead, MMS]


@pytest.mark.parametrize("cls", ALL_HEADS)
def test_one_base_class_params_clone_and_needs(cls):
    head = cls()
    assert isinstance(head, Head)
    assert head.needs == ("class_grams" if cls is CCVRHead else "total_gram")
    twin = head.clone()
    assert type(twin) is cls and twin is not head and twin.get_params() == head.get_params()
    assert repr(head).startswith(cls.__name__ + "(")
    with pytest.raises(RuntimeError, match=f"this {cls.__name__} is not fitted yet"):
        head.predict(torch.zeros(1, 2))
    with pytest.raises(RuntimeError, match="not fitted"):
        head.classes_  # noqa: B018


def test_check_params_validates_without_fitting():
    for bad, match in ((LDAHead(priors="uniform"), "priors"), (FedCGSHead(reg=-1.0), "reg"), (Fed3RHead(lam=0.0), "lam"),
                       (CCVRHead(n_virtual=0), "n_virtual"), (MMS(gamma=0.0), "gamma"), (SASP(m0=-1.0), "m0"),
                       (SASP(gamma=math.nan), "gamma"), (MahalanobisNCM(reg=math.inf), "reg")):
        with pytest.raises(ValueError, match=match):
            bad.check_params()
    assert LDAHead().check_params().get_params() == {"reg": 0.0, "priors": "empirical"}


def test_gram_form_of_a_set_of_heads():
    assert gram_form([FedNCMHead(), LDAHead(), FedCGSHead(), Fed3RHead(), MMS(), SASP(), MahalanobisNCM()]) == "total"
    assert gram_form([LDAHead(), CCVRHead()]) == "class"
    with pytest.raises(ValueError, match="not a head: 'lda'"):
        gram_form(["lda"])


@pytest.mark.parametrize("cls", TOTAL_GRAM_HEADS)
def test_fit_features_equals_fit_on_the_moments_of_the_features(cls):
    _, z, y = clients(7, 2, 3, 4)
    a = cls().fit_features(torch.from_numpy(z), torch.from_numpy(y), 3)
    b = cls().fit(moments(z, y, 3))
    q = torch.from_numpy(z)
    assert torch.equal(a.decision_function(q), b.decision_function(q))


def test_sasp_fit_features_is_its_client_side():
    parts, z, y = clients(8, 3, 3, 4)
    mms = MMS().fit([moments(pz, py, 3) for pz, py in parts])
    a = SASP(m0=2.0).fit_features(mms, torch.from_numpy(parts[0][0]), torch.from_numpy(parts[0][1]))
    b = SASP(m0=2.0).fit(mms, moments(*parts[0], 3))
    assert torch.equal(a.coef_, b.coef_) and torch.equal(a.intercept_, b.intercept_)
    shared = SASP(m0=2.0, gamma=0.3).shared([moments(pz, py, 3) for pz, py in parts])
    assert isinstance(shared, MMS) and shared.gamma == 0.3
    assert torch.equal(shared.metric_, MMS(0.3).fit([moments(pz, py, 3) for pz, py in parts]).metric_)


@pytest.mark.parametrize("cls", TOTAL_GRAM_HEADS)
def test_compact_moments_give_the_same_heads(cls):
    """The heads that need the total Gram only fit from the compact form: bit for bit from
    ``moments.compact()`` (the same total), to rounding from features summarized compactly."""
    _, z, y = clients(9, 3, 4, 5)
    full = moments(z, y, 4)
    compact = ClassMoments.from_features(torch.from_numpy(z), torch.from_numpy(y), 4, grams="total")
    assert compact.form == "total" and compact.grams.shape == (5, 5)
    assert torch.allclose(compact.grams, full.total_gram(), rtol=1e-12, atol=1e-10)
    q = torch.from_numpy(z)
    reference = cls().fit(full).decision_function(q)
    assert torch.equal(cls().fit(full.compact()).decision_function(q), reference)
    assert torch.allclose(cls().fit(compact).decision_function(q), reference, rtol=1e-8, atol=1e-8)


def test_heads_that_need_class_grams_refuse_the_compact_form():
    _, z, y = clients(10, 2, 3, 3)
    compact = moments(z, y, 3).compact()
    with pytest.raises(ValueError, match="CCVRHead needs the per-class Gram matrices.*grams='class'"):
        CCVRHead().fit(compact, generator=torch.Generator())
    with pytest.raises(ValueError, match="classes=.*per-class Gram matrices"):
        MahalanobisNCM().fit(compact, classes=[0, 1])
    MahalanobisNCM().fit(compact)  # the pooled covariance of every class needs the total only
