"""Additive class moments (fedlib.stats): equal to the centralized computation on the pooled
features, input validation, and the compact form (total Gram matrix only)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlib.models import build_model
from fedlib.stats import ClassMoments, feature_moments


def _data(seed, n, d, c):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) * 3 + 1, torch.randint(0, c, (n,), generator=g)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 5), st.integers(1, 6), st.integers(1, 4))
def test_merged_client_moments_equal_pooled_numpy(seed, n_clients, d, c):
    z, y = _data(seed, 60, d, c)
    cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, 60), n_clients - 1, replace=False))
    parts = [ClassMoments.from_features(torch.from_numpy(zz), torch.from_numpy(yy), c)
             for zz, yy in zip(np.split(z.numpy(), cuts), np.split(y.numpy(), cuts))]
    merged = ClassMoments.sum(parts)
    zn, yn = z.numpy(), y.numpy()
    for k in range(c):
        zk = zn[yn == k]
        assert merged.counts[k] == len(zk)
        if len(zk):
            np.testing.assert_allclose(merged.means()[k], zk.mean(0), atol=1e-10)
            np.testing.assert_allclose(merged.class_covariances()[k], np.cov(zk.T, bias=True).reshape(d, d), atol=1e-9)
    # pooled within-class covariance about the class means = numpy on class-centred features
    centred = np.concatenate([zn[yn == k] - zn[yn == k].mean(0) for k in range(c) if (yn == k).any()])
    np.testing.assert_allclose(merged.pooled_covariance(), centred.T @ centred / len(zn), atol=1e-9)
    np.testing.assert_allclose(merged.total_covariance(), np.cov(zn.T, bias=True).reshape(d, d), atol=1e-9)


def test_hand_computed_moments():
    z = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]])
    m = ClassMoments.from_features(z, torch.tensor([0, 0, 1]), 3)
    assert m.counts.tolist() == [2, 1, 0]
    assert m.sums.tolist() == [[4, 2], [5, 5], [0, 0]]
    assert m.grams[0].tolist() == [[10, 6], [6, 4]]  # [1,0][1,0]^T + [3,2][3,2]^T
    assert torch.isnan(m.means()[2]).all() and m.observed.tolist() == [True, True, False]
    # class 0 covariance: mean (2, 1); deviations (-1,-1), (1,1) -> [[1,1],[1,1]]
    assert m.class_covariances()[0].tolist() == [[1, 1], [1, 1]]
    # pooled about class means: class 0 scatter [[2,2],[2,2]], class 1 zero, / 3
    torch.testing.assert_close(m.pooled_covariance(), torch.tensor([[2, 2], [2, 2]], dtype=torch.float64) / 3)


def test_pooled_covariance_matches_sklearn_lda():
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    z, y = _data(3, 200, 4, 3)
    lda = LinearDiscriminantAnalysis(store_covariance=True).fit(z.numpy(), y.numpy())
    m = ClassMoments.from_features(z, y, 3)
    # sklearn's covariance_ is the class-prior-weighted average of biased class covariances = S / N
    np.testing.assert_allclose(m.pooled_covariance().numpy(), lda.covariance_, atol=1e-10)
    np.testing.assert_allclose(m.means().numpy(), lda.means_, atol=1e-12)


def test_message_round_trip_and_bad_input():
    z, y = _data(0, 20, 3, 2)
    m = ClassMoments.from_features(z, y, 2)
    back = ClassMoments.from_message(m.to_message())
    assert torch.equal(back.grams, m.grams)
    assert m.to_message().nbytes() == 8 * (2 + 2 * 3 + 2 * 9)
    with pytest.raises(ValueError, match="label 5"):
        ClassMoments.from_features(z, torch.full((20,), 5), 2)
    with pytest.raises(ValueError, match="merge"):
        m + ClassMoments.zeros(3, 3)


def test_feature_moments_of_a_model_equal_direct_computation():
    model = build_model("cnn", in_channels=1, n_classes=4, seed=0)
    x = torch.rand(50, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    y = torch.arange(50) % 4
    m = feature_moments(model, x, y, 4, layers=["conv2", "penultimate"], batch_size=16)
    with torch.no_grad():
        f = model.features(x, ["conv2", "penultimate"])
    direct = ClassMoments.from_features(torch.cat(list(f.values()), 1), y, 4)
    assert m.dim == 64 + 128
    torch.testing.assert_close(m.grams, direct.grams, rtol=1e-4, atol=1e-5)  # float32 features, batched differently


def test_feature_moments_is_the_per_batch_computation_bit_for_bit():
    """feature_moments extracts with FeatureModel.extract and sums the moments of consecutive
    chunks: the arithmetic of the per-batch loop it replaced, bit for bit."""
    model = build_model("cnn", in_channels=1, n_classes=4, seed=0)
    x = torch.rand(70, 1, 28, 28, generator=torch.Generator().manual_seed(2))
    y = torch.arange(70) % 4
    m = feature_moments(model, x, y, 4, layers=["conv1", "penultimate"], batch_size=32)
    ref = None
    with torch.no_grad():
        for i in range(0, 70, 32):
            z = torch.cat(list(model.features(x[i : i + 32], ["conv1", "penultimate"]).values()), dim=1)
            part = ClassMoments.from_features(z, y[i : i + 32], 4)
            ref = part if ref is None else ref + part
    assert torch.equal(m.counts, ref.counts) and torch.equal(m.sums, ref.sums) and torch.equal(m.grams, ref.grams)
    compact = feature_moments(model, x, y, 4, layers=["conv1", "penultimate"], batch_size=32, grams="total")
    assert compact.form == "total" and torch.equal(compact.sums, m.sums)
    torch.testing.assert_close(compact.grams, m.total_gram(), rtol=1e-12, atol=1e-9)
    empty = feature_moments(model, x[:0], y[:0], 4, layers=["conv1", "penultimate"], grams="total")
    assert empty.grams.shape == (m.dim, m.dim) and float(empty.counts.sum()) == 0


# ---------------------------------------------------------------- input validation
def test_from_features_rejects_non_finite_features_naming_the_value():
    z, y = _data(0, 6, 3, 2)
    for bad in (float("nan"), float("inf"), -float("inf")):
        zz = z.clone()
        zz[4, 1] = bad
        with pytest.raises(ValueError, match=rf"features must be finite, got {bad!r} at row 4, column 1"):
            ClassMoments.from_features(zz, y, 2)


@pytest.mark.parametrize("labels, match", [
    ([0.0, 0.5, 1.0], r"integer class indices in \[0, 2\), got 0.5 \(at position 1\)"),
    ([0.0, float("nan"), 1.0], r"got nan \(at position 1\)"),
    ([True, False, True], "dtype torch.bool"),
    ([0, 2, 1], r"label 2 outside the valid range \[0, 2\) \(valid labels: 0 to 1\)"),
    ([0, -1, 1], r"label -1 outside the valid range"),
    ([0.0, 3.0, 1.0], r"label 3 outside the valid range"),
])
def test_from_features_rejects_bad_labels_naming_the_value(labels, match):
    with pytest.raises(ValueError, match=match):
        ClassMoments.from_features(torch.ones(3, 2), torch.tensor(labels), 2)


def test_float_labels_holding_exact_integers_are_accepted():
    z, y = _data(1, 12, 3, 3)
    a = ClassMoments.from_features(z, y.double(), 3)
    b = ClassMoments.from_features(z, y, 3)
    assert torch.equal(a.grams, b.grams) and torch.equal(a.sums, b.sums) and torch.equal(a.counts, b.counts)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_classes"):
            ClassMoments.from_features(z, y, bad)


# ---------------------------------------------------------------- the compact form
def test_compact_form_shapes_bytes_merge_and_derived_quantities():
    z, y = _data(4, 40, 3, 4)
    full = ClassMoments.from_features(z, y, 4)
    compact = ClassMoments.from_features(z, y, 4, grams="total")
    assert full.form == "class" and compact.form == "total" and compact.dim == 3 and compact.n_classes == 4
    assert compact.to_message().nbytes() == 8 * (4 + 4 * 3 + 3 * 3)  # C(1 + d) + d^2, vs C(1 + d + d^2)
    assert full.to_message().nbytes() == 8 * (4 + 4 * 3 + 4 * 9)
    back = ClassMoments.from_message(compact.to_message())
    assert back.form == "total" and torch.equal(back.grams, compact.grams)
    torch.testing.assert_close(compact.grams, z.T @ z, rtol=0, atol=0)
    torch.testing.assert_close(compact.pooled_covariance(), full.pooled_covariance(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compact.total_covariance(), full.total_covariance(), rtol=1e-12, atol=1e-12)
    assert torch.equal(full.compact().grams, full.grams.sum(0)) and full.compact().compact() is not None
    halves = [ClassMoments.from_features(z[:20], y[:20], 4, grams="total"), ClassMoments.from_features(z[20:], y[20:], 4, grams="total")]
    torch.testing.assert_close(ClassMoments.sum(halves).grams, compact.grams, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="class Grams.*total Grams|total Grams.*class Grams"):
        full + compact
    with pytest.raises(ValueError, match="per-class Gram matrices"):
        compact.class_covariances()
    with pytest.raises(ValueError, match="per-class Gram matrices"):
        compact.pooled_covariance(centers=compact.means())
    assert ClassMoments.zeros(4, 3, grams="total").grams.shape == (3, 3)
    with pytest.raises(ValueError, match="grams must be one of"):
        ClassMoments.from_features(z, y, 4, grams="diag")
    with pytest.raises(ValueError, match=r"inconsistent shapes.*\(C, d, d\) or \(d, d\)"):
        ClassMoments(full.counts, full.sums, torch.zeros(2, 3, 3))
