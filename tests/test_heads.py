"""Statistical heads: Euclidean and Mahalanobis nearest-class-mean (fedlib.heads)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from fedlib.heads import MahalanobisNCM, NearestClassMean, mahalanobis, regularized_covariance
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
