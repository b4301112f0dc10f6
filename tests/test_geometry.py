"""fedlib.geometry: Eq. 4, shapes, the similarity S, both augmentation formulas, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlib.geometry import (
    GeometricShapes,
    augment,
    augment_around_prototypes,
    augment_loop,
    class_shapes,
    combine_local_covariances,
    eigen_shape,
    fill_to_total,
    frechet_distance,
    gaussian_kl,
    generated_covariance,
    geometry_similarity,
    noise_scales,
    similarity_matrix,
)
from fedlib.stats import ClassMoments


def _local_stats(parts, C):
    """Per-client counts, means, biased covariances computed directly with numpy."""
    d = parts[0][0].shape[1]
    K = len(parts)
    n = np.zeros((K, C)); mu = np.zeros((K, C, d)); cov = np.zeros((K, C, d, d))
    for k, (x, y) in enumerate(parts):
        for c in range(C):
            xc = x[y == c]
            n[k, c] = len(xc)
            if len(xc):
                mu[k, c] = xc.mean(0)
                cov[k, c] = np.cov(xc.T, bias=True).reshape(d, d) if len(xc) > 1 else 0.0
    return torch.tensor(n), torch.tensor(mu), torch.tensor(cov)


def test_eq4_hand_computed():
    # client 0: class 0 = {0, 2} (mean 1, var 1); client 1: class 0 = {4} (mean 4, var 0)
    n = torch.tensor([[2.0], [1.0]])
    mu = torch.tensor([[[1.0]], [[4.0]]])
    cov = torch.tensor([[[[1.0]]], [[[0.0]]]])
    N, m, S = combine_local_covariances(n, mu, cov)
    assert N.tolist() == [3.0] and m.item() == pytest.approx(2.0)
    assert S.item() == pytest.approx(np.var([0.0, 2.0, 4.0]))  # 8/3


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(1, 6), st.integers(0, 10_000))
def test_eq4_equals_pooled_covariance_and_moments(K, C, d, seed):
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(K):
        m = int(rng.integers(1, 12))  # unequal client sizes, some classes with one sample
        parts.append((rng.normal(size=(m, d)) + k, rng.integers(0, C, size=m)))
    n, mu, cov = _local_stats(parts, C)
    N, m_, S = combine_local_covariances(n, mu, cov)
    x = np.concatenate([p[0] for p in parts]); y = np.concatenate([p[1] for p in parts])
    moments = ClassMoments.sum(ClassMoments.from_features(torch.tensor(px), torch.tensor(py), C) for px, py in parts)
    shapes = class_shapes(moments, min_samples=1)
    for c in range(C):
        xc = x[y == c]
        assert N[c] == len(xc)
        if len(xc):
            ref = np.cov(xc.T, bias=True).reshape(d, d) if len(xc) > 1 else np.zeros((d, d))
            np.testing.assert_allclose(S[c].numpy(), ref, atol=1e-9)
            np.testing.assert_allclose(shapes.covariances()[c].numpy(), ref, atol=1e-8)


def test_single_client_class_gets_that_clients_covariance():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 3)), rng.normal(size=(5, 3))
    n, mu, cov = _local_stats([(a, np.zeros(7, int)), (b, np.ones(5, int))], 2)
    _, _, S = combine_local_covariances(n, mu, cov)
    np.testing.assert_allclose(S[0].numpy(), np.cov(a.T, bias=True), atol=1e-12)
    np.testing.assert_allclose(S[1].numpy(), np.cov(b.T, bias=True), atol=1e-12)


def test_eigen_shape_descending_reconstructs_and_clips_roundoff():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 6))
    cov = torch.tensor(a.T @ a / 3)  # rank 3 in 6 dims: zero eigenvalues up to round-off
    vals, vecs = eigen_shape(cov)
    assert bool((vals[:-1] >= vals[1:]).all()) and bool((vals >= 0).all())
    torch.testing.assert_close((vecs * vals) @ vecs.T, cov, atol=1e-10, rtol=0)
    bumped = cov - 1e-12 * torch.eye(6, dtype=torch.float64)  # small negative eigenvalues
    assert float(eigen_shape(bumped)[0].min()) == 0.0


def test_eigen_shape_rejects_indefinite_and_nan():
    with pytest.raises(ValueError, match="not positive semi-definite"):
        eigen_shape(torch.diag(torch.tensor([1.0, -0.5])))
    with pytest.raises(ValueError, match="NaN"):
        eigen_shape(torch.tensor([[float("nan")]]))


def test_ridge_makes_rank_deficient_full_rank():
    cov = torch.zeros(4, 4, dtype=torch.float64); cov[0, 0] = 4.0
    vals, _ = eigen_shape(cov, ridge=0.1)
    assert float(vals.min()) == pytest.approx(0.1)


def _random_basis(rng, d):
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return torch.tensor(q)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 8), st.integers(0, 10_000))
def test_similarity_range_sign_invariance_and_maximum(d, seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, d + 1))
    a, b = _random_basis(rng, d), _random_basis(rng, d)
    s = float(geometry_similarity(a, b, k))
    assert 0.0 <= s <= k + 1e-9
    signs = torch.tensor(rng.choice([-1.0, 1.0], size=d))
    assert float(geometry_similarity(a * signs, b, k)) == pytest.approx(s, abs=1e-12)
    assert float(geometry_similarity(a, a * signs, k)) == pytest.approx(k)
    sub = float(geometry_similarity(a, b, k, method="subspace"))
    assert 0.0 <= sub <= k + 1e-9


def test_similarity_depends_on_order_but_subspace_does_not():
    eye = torch.eye(4, dtype=torch.float64)
    swapped = eye[:, [1, 0, 2, 3]]
    assert float(geometry_similarity(eye, swapped, 2)) == 0.0
    assert float(geometry_similarity(eye, swapped, 2, method="subspace")) == pytest.approx(2.0)


def test_similarity_bad_k():
    with pytest.raises(ValueError, match="k must be"):
        geometry_similarity(torch.eye(3), torch.eye(3), 4)
    with pytest.raises(ValueError, match="unknown similarity method"):
        geometry_similarity(torch.eye(3), torch.eye(3), 2, method="angles")


def test_generated_covariance_analytic():
    vals = torch.tensor([4.0, 1.0], dtype=torch.float64)
    vecs = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64) / 2**0.5
    sigma = (vecs * vals) @ vecs.T
    torch.testing.assert_close(generated_covariance(vals, vecs, "code"), sigma)
    torch.testing.assert_close(generated_covariance(vals, vecs, "paper"), sigma @ sigma)
    assert noise_scales(vals, "code").tolist() == [2.0, 1.0]
    with pytest.raises(ValueError, match="unknown formula 'both'"):
        noise_scales(vals, "both")


@pytest.mark.parametrize("formula", ["code", "paper"])
def test_empirical_covariance_of_generated_noise(formula):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 5))
    sigma = torch.tensor(a @ a.T / 5 + 0.5 * np.eye(5))
    vals, vecs = eigen_shape(sigma)
    g = torch.Generator().manual_seed(0)
    out = augment(torch.zeros(1, 5, dtype=torch.float64), vals, vecs, 40_000, formula=formula, generator=g)
    emp = torch.tensor(np.cov(out.numpy().T))
    ref = generated_covariance(vals, vecs, formula)
    assert float((emp - ref).norm() / ref.norm()) < 0.05


def test_batched_equals_loop_for_the_same_draws():
    rng = np.random.default_rng(4)
    centers = torch.tensor(rng.normal(size=(3, 4)))
    vals, vecs = eigen_shape(torch.tensor(np.cov(rng.normal(size=(4, 20)))))
    eps = torch.tensor(rng.normal(size=(7, 4)))
    for formula in ("code", "paper"):
        a = augment(centers, vals, vecs, 7, formula=formula, eps=eps)
        b = augment_loop(centers, vals, vecs, 7, formula=formula, eps=eps)
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_augment_round_robin_and_bad_inputs():
    vals, vecs = torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)
    c = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    out = augment(c, vals, vecs, 5)  # zero spread: copies of the centres in turn
    assert out.tolist() == [[0, 0], [1, 1], [0, 0], [1, 1], [0, 0]]
    assert augment(c, vals, vecs, 0).shape == (0, 2)
    with pytest.raises(ValueError, match="NaN"):
        augment(torch.tensor([[float("nan"), 0.0]]), vals, vecs, 1)
    with pytest.raises(ValueError, match="n_new"):
        augment(c, vals, vecs, -1)


def _moments(x, y, C):
    return ClassMoments.from_features(torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y), C)


def test_one_sample_class_falls_back_and_never_nan():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=(20, 3)), [[5.0, 5.0, 5.0]]])
    y = np.array([0] * 20 + [1])
    m = _moments(x, y, 3)  # class 1: one sample (rank 0); class 2: absent
    pooled = class_shapes(m, fallback="pooled")
    assert bool(pooled.fallback[1]) and not bool(pooled.fallback[0]) and not bool(pooled.observed[2])
    torch.testing.assert_close(pooled.covariances()[1], m.pooled_covariance(), atol=1e-10, rtol=0)
    zero = class_shapes(m, fallback="zero")
    assert float(zero.eigenvalues[1].abs().max()) == 0.0
    with pytest.raises(ValueError, match=r"classes \[1\] have fewer than min_samples=2"):
        class_shapes(m, fallback="error")
    with pytest.raises(ValueError, match="unknown fallback"):
        class_shapes(m, fallback="drop")
    xa, ya = fill_to_total(torch.tensor(x), torch.tensor(y), pooled, 30, generator=torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(xa).all()) and (ya == 1).sum() == 30 and (ya == 0).sum() == 30 and (ya == 2).sum() == 0


def test_d_larger_than_n_is_finite():
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(6, 40)), np.array([0, 0, 0, 1, 1, 1])
    shapes = class_shapes(_moments(x, y, 2))
    assert bool((shapes.eigenvalues >= 0).all())
    xa, _ = fill_to_total(torch.tensor(x), torch.tensor(y), shapes, 50, formula="paper", generator=torch.Generator().manual_seed(1))
    assert xa.shape == (100, 40) and bool(torch.isfinite(xa).all())


def test_fill_to_total_keeps_real_samples_and_respects_total():
    rng = np.random.default_rng(7)
    x, y = torch.tensor(rng.normal(size=(12, 2))), torch.tensor([0] * 10 + [1] * 2)
    shapes = class_shapes(_moments(x, y, 2))
    xa, ya = fill_to_total(x, y, shapes, 5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(xa[:12], x)
    assert (ya == 0).sum() == 10 and (ya == 1).sum() == 5  # a class above the total keeps its samples
    with pytest.raises(ValueError, match="total_per_class"):
        fill_to_total(x, y, shapes, -3)


def test_prototype_augmentation_skips_missing_classes():
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(30, 3)), np.repeat([0, 1, 2], 10)
    shapes = class_shapes(_moments(x, y, 3))
    protos = torch.tensor(rng.normal(size=(2, 3, 3)))
    protos[1, 2] = float("nan")  # a domain without class 2: its prototype must never be used
    present = torch.tensor([[True, True, True], [True, True, False]])
    xp, yp = augment_around_prototypes(protos, present, shapes, 4, generator=torch.Generator().manual_seed(0))
    assert len(xp) == 4 * 5 and bool(torch.isfinite(xp).all())
    assert (yp == 2).sum() == 4


def test_similarity_matrix_nan_for_unobserved():
    rng = np.random.default_rng(9)
    s = class_shapes(_moments(rng.normal(size=(20, 4)), np.repeat([0, 1], 10), 3))
    m = similarity_matrix(s, s, k=2)
    assert m.shape == (3, 3) and bool(torch.isnan(m[2]).all())
    assert float(m[0, 0]) == pytest.approx(2.0)


def test_shapes_round_trip_arrays():
    rng = np.random.default_rng(10)
    s = class_shapes(_moments(rng.normal(size=(20, 4)), np.repeat([0, 1], 10), 2))
    back = GeometricShapes.from_arrays(s.to_arrays("g/"), "g/")
    torch.testing.assert_close(back.covariances(), s.covariances())


def test_frechet_against_scipy_and_kl_closed_form():
    rng = np.random.default_rng(11)
    a, b = rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
    c0, c1 = a @ a.T + np.eye(4), b @ b.T + np.eye(4)
    m0, m1 = rng.normal(size=4), rng.normal(size=4)
    s0 = scipy.linalg.sqrtm(c0)
    ref = np.sum((m0 - m1) ** 2) + np.trace(c0 + c1 - 2 * np.real(scipy.linalg.sqrtm(s0 @ c1 @ s0)))
    got = frechet_distance(torch.tensor(m0), torch.tensor(c0), torch.tensor(m1), torch.tensor(c1))
    assert got == pytest.approx(ref, rel=1e-8)
    assert frechet_distance(torch.tensor(m0), torch.tensor(c0), torch.tensor(m0), torch.tensor(c0)) == pytest.approx(0, abs=1e-8)
    inv = np.linalg.inv(c1)
    kl_ref = 0.5 * (np.trace(inv @ c0) + (m1 - m0) @ inv @ (m1 - m0) - 4 + np.log(np.linalg.det(c1) / np.linalg.det(c0)))
    assert gaussian_kl(torch.tensor(m0), torch.tensor(c0), torch.tensor(m1), torch.tensor(c1), ridge=0.0) == pytest.approx(kl_ref, rel=1e-8)


def test_augmentation_moves_a_scarce_class_toward_the_global_fit():
    rng = np.random.default_rng(12)
    a = rng.normal(size=(4, 4))
    cov = a @ a.T + np.eye(4)
    x_all = rng.multivariate_normal(np.zeros(4), cov, size=400)
    shapes = class_shapes(_moments(x_all, np.zeros(400, int), 1))
    g_mu, g_cov = shapes.means[0], shapes.covariances()[0]
    local = torch.tensor(x_all[:3])  # a client with 3 samples of the class
    xa, _ = fill_to_total(local, torch.zeros(3, dtype=torch.long), shapes, 3000, generator=torch.Generator().manual_seed(0))
    before = frechet_distance(local.mean(0), torch.tensor(np.cov(local.numpy().T, bias=True)), g_mu, g_cov)
    after = frechet_distance(xa.mean(0), torch.tensor(np.cov(xa.numpy().T, bias=True)), g_mu, g_cov)
    assert after < before


def test_augmented_class_covariance_is_local_plus_generated():
    rng = np.random.default_rng(13)
    x = torch.tensor(rng.normal(size=(5, 3)) * [3.0, 1.0, 0.5])
    sigma = torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 0.3]], dtype=torch.float64)
    vals, vecs = eigen_shape(sigma)
    for formula in ("code", "paper"):
        gen = augment(x, vals, vecs, 50_000, formula=formula, generator=torch.Generator().manual_seed(1))
        emp = torch.tensor(np.cov(gen.numpy().T, bias=True))
        expected = torch.tensor(np.cov(x.numpy().T, bias=True)) + generated_covariance(vals, vecs, formula)
        assert float((emp - expected).norm() / expected.norm()) < 0.05
