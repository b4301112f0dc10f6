"""FedGRC's theory as property tests: CGRL's geometry (fedlib.cgrl), MMS's trace identities and
invariances, SASP's stationarity and the prediction-stability theorem (fedlib.heads.mms).

The moment identities of Appendix A-E, Proposition IV.1, the bounds of Eq. (31), the minimizer of
Proposition IV.2 (against SciPy) and the Bayes / nearest-mean equivalence are in tests/test_mms.py;
this file covers the other statements of the chapters notebooks/fedgrc_cgrl.py and
notebooks/fedgrc_statistics.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fedlib.cgrl import directional_loss, dispersion_plus_offset, log_norm, magnitude_loss, prototype_ce, trace_from_pairs, unit
from fedbook.studies.fedgrc_synthetic import random_layer_dims, random_multilayer_federation
from fedlib.heads import MMS, SASP, adaptation_weights
from fedlib.heads.stability import StabilityTally, stability_summary, stability_terms
from fedlib.stats import ClassMoments

F64 = torch.float64
seeds = st.integers(0, 2**31 - 1)
dims_strategy = st.lists(st.integers(1, 4), min_size=1, max_size=3)


def T(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def moments(h, y, c):
    return ClassMoments.from_features(T(h), torch.as_tensor(np.asarray(y)), c)


def federation(seed: int, n_clients: int, c: int, layer_dims, n: int = 15):
    """Per-client unscaled multilayer features: label skew, client shifts, per-layer magnitudes, every class present."""
    rng = np.random.default_rng(seed)
    d = sum(layer_dims)
    mag = np.repeat(10.0 ** rng.uniform(-1, 2, size=len(layer_dims)), layer_dims)
    centers = rng.normal(scale=2.0, size=(c, d))
    mix = rng.normal(size=(d, d)) * 0.5
    parts = []
    for k in range(n_clients):
        y = rng.choice(c, size=n, p=rng.dirichlet(np.full(c, 0.5)))
        if k == 0:
            y[:c] = np.arange(c)  # every class federation-known
        h = (centers[y] + rng.normal(scale=0.8, size=(c, d))[y] + rng.normal(size=(n, d)) @ mix) * mag
        parts.append((h, y))
    return parts


def fit(parts, c, dims, gamma=0.1):
    return MMS(gamma=gamma).fit([moments(h, y, c) for h, y in parts], dims)


# ---------------------------------------------------------------- Eq. (10)
@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(1, 12))
def test_radial_angular_decomposition(seed, d):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(20, d)) * 10.0 ** rng.uniform(-3, 3, size=(20, 1))
    u, r = unit(T(h)).numpy(), np.linalg.norm(h, axis=1)
    lhs = ((h[:, None, :] - h[None, :, :]) ** 2).sum(-1)
    rhs = (r[:, None] - r[None, :]) ** 2 + 2 * r[:, None] * r[None, :] * (1 - u @ u.T)
    assert np.all(np.abs(lhs - rhs) <= 1e-12 * (r[:, None] ** 2 + r[None, :] ** 2))
    assert np.all(rhs >= -1e-12 * (r[:, None] ** 2 + r[None, :] ** 2))  # both terms are >= 0


# ---------------------------------------------------------------- Lemma IV.1 (Eq. (16))
def test_lemma_iv1_hand_computed():
    # one layer, one observed class, a = 0; log norms 0, 1, 2 and one feature below r_min:
    # loss = (0 + 1 + 4 + 0) / 4 = 1.25 = p_chi [Var + offset^2] = 3/4 (2/3 + 1)
    h = T([[1.0], [math.e], [math.e**2], [1e-4]])
    y = torch.zeros(4, dtype=torch.long)
    loss = magnitude_loss([h], y, torch.zeros(1, 1, dtype=F64), torch.ones(1, dtype=torch.bool), 1e-2, 1e-12)
    assert float(loss) == pytest.approx(1.25, rel=1e-12)
    assert float(magnitude_loss([h], y, torch.zeros(1, 1, dtype=F64), torch.zeros(1, dtype=torch.bool), 1e-2, 1e-12)) == 0.0
    # the same by the lemma's right side: rho = (0, 1, 2) gated, the fourth view not
    rho, chi = np.array([0.0, 1.0, 2.0, math.log(1e-4)]), np.array([True, True, True, False])
    assert dispersion_plus_offset(rho, chi, 0.0) == pytest.approx(1.25, rel=1e-12)
    assert dispersion_plus_offset(rho, np.zeros(4, dtype=bool), 0.0) == 0.0  # p_chi = 0
    assert dispersion_plus_offset(rho, chi, 1.0) == pytest.approx(0.75 * (2 / 3 + 0.0), rel=1e-12)  # no offset


def test_dispersion_plus_offset_refuses_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        dispersion_plus_offset(np.zeros(3), np.ones(2, dtype=bool), 0.0)
    with pytest.raises(ValueError, match="boolean"):
        dispersion_plus_offset(np.zeros(3), np.ones(3), 0.0)


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(1, 3), st.integers(1, 4), st.integers(2, 30))
def test_magnitude_loss_is_dispersion_plus_offset(seed, n_layers, c, n):
    """L_mag = (1/L) sum_l sum_c (n_c/n) p_chi [Var(rho | chi) + (mean(rho | chi) - a)^2] (biased variance)."""
    rng = np.random.default_rng(seed)
    y = torch.as_tensor(rng.integers(0, c, size=n))
    feats = [T(rng.normal(size=(n, int(rng.integers(1, 6)))) * 10.0 ** rng.uniform(-3, 1, size=(n, 1))) for _ in range(n_layers)]
    refs = T(rng.normal(size=(n_layers, c)))
    observed = torch.as_tensor(rng.random(c) < 0.7)
    r_min, eps = 1e-2, 1e-3
    expected = 0.0
    yn = y.numpy()
    for ell, h in enumerate(feats):
        rho = log_norm(h, eps).numpy()
        gate = (torch.sqrt((h * h).sum(dim=1) + eps**2) >= r_min).numpy() & observed.numpy()[yn]
        for k in range(c):
            sel = yn == k
            if sel.any():
                expected += sel.mean() * dispersion_plus_offset(rho[sel], gate[sel], float(refs[ell, k])) / n_layers
    loss = float(magnitude_loss(feats, y, refs, observed, r_min, eps))
    assert loss == pytest.approx(expected, rel=1e-12, abs=1e-14)


# ---------------------------------------------------------------- Eq. (17)-(20)
def batch(seed, b, d, c):
    rng = np.random.default_rng(seed)
    y = torch.as_tensor(np.tile(rng.integers(0, c, size=b), 2))  # two views per example
    h = T(rng.normal(size=(2 * b, d)) * 10.0 ** rng.uniform(-1, 2, size=(2 * b, 1))).requires_grad_(True)
    protos = unit(T(rng.normal(size=(c, d))))
    protos[torch.as_tensor(rng.random(c) < 0.3)] = 0.0  # classes without a shared direction yet
    return rng, y, h, protos


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(2, 8), st.integers(2, 10), st.integers(2, 5), st.floats(0.05, 1.0), st.floats(0.0, 2.0))
def test_directional_gradient_is_tangent_and_keeps_the_norm_to_second_order(seed, b, d, c, tau, beta):
    _, y, h, protos = batch(seed, b, d, c)
    g = torch.autograd.grad(directional_loss(unit(h), y, protos, tau, beta, True), h)[0]
    hn, r = h.detach(), h.detach().norm(dim=1)
    assert torch.all((hn * g).sum(1).abs() <= 1e-12 * r * g.norm(dim=1) + 1e-300)
    for s in (1e-2, 1.0):
        change = ((hn - s * g) ** 2).sum(1) - r**2
        assert torch.allclose(change, s**2 * (g**2).sum(1), rtol=1e-8, atol=1e-12 * float((r**2).max()))


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 8), st.integers(2, 10), st.integers(2, 5), st.floats(0.05, 1.0))
@example(33554429, 1, 2, 2, 0.0625)  # a saturated softmax: the gradient is 1e-7 of its terms
def test_prototype_ce_gradient_closed_form(seed, b, d, c, tau):
    """Eq. (18b): grad_h l_p = (1 / (tau r)) (I - u u') (sum_c q_c p_c - p_y), divided by 2B (the mean over views)."""
    _, y, h, protos = batch(seed, b, d, c)
    g = torch.autograd.grad(prototype_ce(unit(h), y, protos, tau), h)[0]
    hn = h.detach()
    r, u = hn.norm(dim=1, keepdim=True), unit(hn)
    inner = torch.softmax(u @ protos.T / tau, 1) @ protos - protos[y]
    closed = (inner - (u * inner).sum(1, keepdim=True) * u) / (tau * r) / len(y)
    # the two sides differ by rounding at the scale of the terms (|inner| <= 2, over tau r 2B), which a
    # saturated softmax can make far larger than the gradient itself
    scale = float((1.0 / (tau * r)).max()) / len(y)
    assert torch.allclose(g, closed, rtol=1e-10, atol=1e-14 * scale)


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 8), st.integers(2, 10), st.integers(2, 5), st.integers(1, 3))
def test_magnitude_gradient_is_radial_and_orthogonal_to_the_directional_one(seed, b, d, c, n_layers):
    """Eq. (19): grad = 2 chi (rho - a) h / (|h|^2 + eps^2) / (2B L); Eq. (20): g' v = 0 at the final layer."""
    rng, y, h, protos = batch(seed, b, d, c)
    eps, r_min = 1e-3, 1.0  # some features fall below r_min: no gradient there
    others = [T(rng.normal(size=(2 * b, 3))) for _ in range(n_layers - 1)]
    refs = T(rng.normal(size=(n_layers, c)) + 1.0)
    observed = torch.as_tensor(rng.random(c) < 0.8)
    v = torch.autograd.grad(magnitude_loss(others + [h], y, refs, observed, r_min, eps), h)[0]
    hn = h.detach()
    chi = ((hn.norm(dim=1) >= r_min) & observed[y]).to(F64)
    rho = log_norm(hn, eps)
    closed = 2 * (chi * (rho - refs[-1, y]))[:, None] * hn / (hn.norm(dim=1) ** 2 + eps**2)[:, None] / (len(y) * n_layers)
    assert torch.allclose(v, closed, rtol=1e-10, atol=1e-300)
    u = unit(hn)
    assert torch.all((v - (v * u).sum(1, keepdim=True) * u).norm(dim=1) <= 1e-12 * v.norm(dim=1) + 1e-300)  # radial
    g = torch.autograd.grad(directional_loss(unit(h), y, protos, 0.3, 1.0, True), h)[0]
    assert torch.all((g * v).sum(1).abs() <= 1e-12 * g.norm(dim=1) * v.norm(dim=1) + 1e-300)


# ---------------------------------------------------------------- Eq. (21), Eq. (28), invariances
def test_trace_identity_hand_computed():
    # two features of one class: h_1 = (1, 0), h_2 = (0, 3): tr Sigma = |h_1 - h_2|^2 / 4 = 10 / 4;
    # radial (1 - 3)^2 = 4 and angular 2 * 1 * 3 * (1 - 0) = 6, each counted twice over ordered pairs, / (2 * 2^2)
    m = moments([[1.0, 0.0], [0.0, 3.0]], [0, 0], 1)
    assert float(torch.trace(m.class_covariances()[0])) == pytest.approx(2.5)
    total, radial, angular = trace_from_pairs(np.array([[1.0, 0.0], [0.0, 3.0]]))
    assert (total, radial, angular) == pytest.approx((2.5, 8 / 8, 12 / 8), rel=1e-15)
    assert trace_from_pairs(np.array([[2.0, 0.0]])) == (0.0, 0.0, 0.0)  # one feature: no spread
    # collinear features: the trace is all radial; a zero feature has unit(0) = 0 and only a radial part
    assert trace_from_pairs(np.array([[1.0, 1.0], [3.0, 3.0]]))[2] == pytest.approx(0.0, abs=1e-15)
    assert trace_from_pairs(np.array([[0.0, 0.0], [0.0, 2.0]])) == pytest.approx((1.0, 1.0, 0.0))
    with pytest.raises(ValueError, match="at least one row|N >= 1"):
        trace_from_pairs(np.zeros((0, 3)))


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 4), st.integers(2, 4), dims_strategy)
def test_trace_of_pooled_covariance_is_the_scaled_radial_angular_scatter(seed, k, c, dims):
    """Eq. (21) per layer and class; Eq. (28): N tr Sigma_w = sum_l s_l^-2 sum_c N_c tr Sigma_{l,c}."""
    parts = federation(seed, k, c, dims)
    mms = fit(parts, c, dims)
    h = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    bounds = np.cumsum([0] + dims)
    total = 0.0
    for ell in range(len(dims)):
        hl = h[:, bounds[ell]:bounds[ell + 1]]
        cov = moments(hl, y, c).class_covariances()
        for cl in range(c):
            hc = hl[y == cl]
            pairs, radial, angular = trace_from_pairs(hc)
            # rounding is measured at the scale of the class's points: a class of (nearly) equal
            # points has a scatter of zero up to a rounding of either sign
            scale = float((hc**2).sum(1).mean())
            assert pairs == pytest.approx(radial + angular, rel=1e-12, abs=1e-12 * scale)
            assert radial >= 0 and angular >= -1e-12 * scale
            assert float(torch.trace(cov[cl])) == pytest.approx(pairs, rel=1e-9, abs=1e-12 * scale)
            total += len(hc) * pairs / float(mms.scales_[ell]) ** 2
    assert len(y) * float(torch.trace(mms.covariance_)) == pytest.approx(total, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(seeds, st.integers(1, 4), st.integers(2, 4), dims_strategy, st.lists(st.floats(1e-3, 1e3), min_size=3, max_size=3))
def test_mms_is_invariant_to_rescaling_each_layer(seed, k, c, dims, factors):
    parts = federation(seed, k, c, dims)
    f = np.repeat(np.asarray(factors[: len(dims)]), dims)
    m1 = fit(parts, c, dims)
    m2 = fit([(h * f, y) for h, y in parts], c, dims)
    h = np.concatenate([p[0] for p in parts])
    assert torch.allclose(m2.scales_, m1.scales_ * T(factors[: len(dims)]), rtol=1e-10)
    assert torch.allclose(m2.transform(T(h * f)), m1.transform(T(h)), rtol=1e-9, atol=1e-9)
    for name in ("means_", "covariance_", "metric_"):
        a, b = getattr(m2, name), getattr(m1, name)
        assert torch.allclose(a, b, rtol=1e-7, atol=1e-9 * float(b.abs().max())), name
    assert torch.equal(m1.predict(T(h)), m2.predict(T(h * f)))
    # raw geometry of a layer: norm ratios kept, every log norm shifted by log(factor)
    r1, r2 = np.linalg.norm(h[:, : dims[0]], axis=1), np.linalg.norm((h * f)[:, : dims[0]], axis=1)
    assert np.allclose(np.log(r2) - np.log(r1), math.log(factors[0]), atol=1e-9)


# ---------------------------------------------------------------- Eq. (31): the exact identities, and tightness
@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 10), st.integers(3, 25), st.floats(1e-3, 100.0))
def test_metric_spectrum_identities(seed, d, n, gamma):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    mms = MMS(gamma=gamma).fit(moments(h, rng.integers(0, 2, size=n), 2))
    sig = np.clip(np.linalg.eigvalsh(mms.covariance_.numpy()), 0, None)
    eig = np.linalg.eigvalsh(mms.metric_.numpy())
    lam = mms.ridge_
    assert eig.min() == pytest.approx(1 / (sig.max() + lam), rel=1e-8)
    assert eig.max() / eig.min() == pytest.approx((sig.max() + lam) / (sig.min() + lam), rel=1e-8)


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(2, 12), st.floats(1e-2, 10.0))
def test_condition_bound_is_attained_by_a_rank_one_covariance(seed, d, gamma):
    h = np.random.default_rng(seed).normal(size=(3, d))
    mms = MMS(gamma=gamma).fit(moments(h, [0, 0, 1], 2))  # within-class scatter of rank one
    eig = np.linalg.eigvalsh(mms.metric_.numpy())
    assert eig.max() / eig.min() == pytest.approx(1 + d / gamma, rel=1e-8)


# ---------------------------------------------------------------- Prop. IV.2: stationarity under ANY metric, Eq. (35)
@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(2, 4), dims_strategy, st.floats(0.05, 50.0))
def test_sasp_mean_is_stationary_for_every_metric_and_eq35(seed, c, dims, m0):
    parts = federation(seed, 3, c, dims)
    mms = fit(parts, c, dims)
    h, y = parts[1]
    sasp = SASP(m0=m0).fit(mms, moments(h, y, c))
    z = mms.transform(T(h))
    rng = np.random.default_rng(seed)
    d = z.shape[1]
    b = T(rng.normal(size=(d, d)))
    for metric in (mms.metric_, b @ b.T / d + 0.1 * torch.eye(d, dtype=F64)):  # A cancels from the optimality condition
        for cl in range(c):
            m = sasp.means_[cl]
            grad = -2 * metric @ (z[T(y) == cl] - m).sum(0) + 2 * m0 * metric @ (m - mms.means_[cl])
            scale = float((metric.abs().max()) * (z.abs().max() + 1) * (len(y) + m0))
            assert float(grad.abs().max()) <= 1e-10 * scale
    A = mms.metric_
    anorm = lambda v: float(torch.sqrt(v @ A @ v))  # noqa: E731
    for cl in range(c):
        alpha, delta = float(sasp.alpha_[cl]), sasp.displacement_[cl]
        tol = 1e-9 * (anorm(delta) + anorm(mms.means_[cl]))
        assert abs(anorm(sasp.means_[cl] - sasp.local_means_[cl]) - (1 - alpha) * anorm(delta)) <= tol
        assert abs(anorm(sasp.means_[cl] - mms.means_[cl]) - alpha * anorm(delta)) <= tol
        if float(sasp.counts_[cl]) == 0:
            assert torch.equal(sasp.means_[cl], mms.means_[cl])
    one_minus = 1 - adaptation_weights(torch.arange(0, 50, dtype=F64), m0)
    assert bool((one_minus[1:] < one_minus[:-1]).all())


# ---------------------------------------------------------------- Eq. (37)-(40), Appendix A-H
def stability(mms, sasp, h):
    z = mms.transform(h)
    A = mms.metric_
    s0, s = mms.decision_function(h), sasp.decision_function(h)
    mu, delta = mms.means_, sasp.means_ - mms.means_
    diff = z[:, None, :] - mu[None]
    exact = torch.einsum("cd,de,nce->nc", delta, A, diff) - 0.5 * torch.einsum("cd,de,ce->c", delta, A, delta)[None]
    dist = torch.sqrt(torch.einsum("ncd,de,nce->nc", diff, A, diff).clamp_min(0))
    dn = torch.sqrt(torch.einsum("cd,de,ce->c", delta, A, delta).clamp_min(0))
    dl = torch.sqrt(torch.einsum("cd,de,ce->c", sasp.displacement_, A, sasp.displacement_).clamp_min(0))
    b, b_local = dn[None] * dist + 0.5 * dn[None] ** 2, dl[None] * dist + 0.5 * dl[None] ** 2
    f0 = s0.argmax(1)
    idx = torch.arange(len(z))
    top = s0.topk(2, dim=1).values
    margin = top[:, 0] - top[:, 1]

    def budget(bb):
        other = bb.clone()
        other[idx, f0] = -math.inf
        return bb[idx, f0] + other.max(1).values

    return s0, s, exact, b, margin, budget(b), budget(b_local), f0, s.argmax(1)


def test_stability_hand_computed():
    # MMS of the test_mms fixture: A = diag(2/3, 2), mu_0 = (1, 0), mu_1 = (1, 2); SASP (m0 = 1) with one sample of
    # class 0 at (2, 0): delta_0 = (1/2, 0). At z = 0: s_0 - s_0^0 = delta'A(z - mu_0) - |delta|_A^2 / 2 = -1/3 - 1/12,
    # and the Cauchy-Schwarz budget b_0 = |delta|_A |z - mu_0|_A + |delta|_A^2 / 2 = 1/3 + 1/12 is tight (z - mu_0 || delta).
    mms = MMS(gamma=1.0).fit(moments([[0, 0], [2, 0], [0, 4], [2, 4]], [0, 0, 1, 1], 2), [1, 1])
    sasp = SASP(m0=1.0).fit(mms, T([1, 0]), T([[2, 0], [0, 0]]))
    s0, s, exact, b, *_ = stability(mms, sasp, T([[0.0, 0.0]]))
    assert torch.allclose(s - s0, T([[-5 / 12, 0.0]]))
    assert torch.allclose(exact, T([[-5 / 12, 0.0]]))
    assert torch.allclose(b, T([[5 / 12, 0.0]]))


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(2, 5), dims_strategy, st.floats(0.0, 30.0), st.floats(1e-2, 1.0))
def test_score_change_budget_stability_and_risk_bound(seed, c, dims, m0, gamma):
    parts = federation(seed, 4, c, dims, n=20)
    mms = fit(parts, c, dims, gamma)
    h_k, y_k = parts[seed % 4]
    sasp = SASP(m0=m0).fit(mms, moments(h_k, y_k, c))
    hq = T(np.concatenate([p[0] for p in parts]))
    yq = torch.as_tensor(np.concatenate([p[1] for p in parts]))
    s0, s, exact, b, margin, B, B_local, f0, fk = stability(mms, sasp, hq)
    scale = float(s0.abs().max()) + 1.0
    assert torch.allclose(s - s0, exact, rtol=0, atol=1e-10 * scale)  # Eq. (37)
    absent = sasp.counts_ == 0
    assert torch.allclose((s - s0)[:, absent], torch.zeros_like(s0[:, absent]), atol=1e-10 * scale)
    assert bool(((s - s0).abs() <= b + 1e-10 * scale).all())  # Eq. (38)
    certified = margin > B
    assert bool((fk[certified] == f0[certified]).all())  # Eq. (40)
    err0, errk = (f0 != yq).double(), (fk != yq).double()
    assert bool((errk <= err0 + (~certified).double()).all())  # pointwise, hence for every target distribution
    for cl in range(c):
        sel = yq == cl
        assert float(errk[sel].mean()) <= float(err0[sel].mean() + (~certified[sel]).double().mean()) + 1e-12
    assert bool((B <= B_local * (1 + 1e-12) + 1e-12).all())  # SASP's budget never exceeds local-mean adaptation's


def test_shared_head_has_zero_budget_and_never_changes():
    parts = federation(3, 3, 3, [2, 2])
    mms = fit(parts, 3, [2, 2])
    sasp = SASP(m0=math.inf).fit(mms, moments(*parts[0], 3))
    s0, s, exact, b, margin, B, *_ = stability(mms, sasp, T(np.concatenate([p[0] for p in parts])))
    assert torch.equal(s, s0) and bool((b == 0).all()) and bool((B == 0).all())


# ---------------------------------------------------------------- fedlib.heads.stability: the library's terms
def _hand_heads():
    # the fixture of test_stability_hand_computed: A = diag(2/3, 2), mu_0 = (1, 0), mu_1 = (1, 2); the client holds
    # one sample of class 0 at (2, 0) and none of class 1, SASP with m0 = 1: delta_0 = (1/2, 0), Delta_0 = (1, 0)
    mms = MMS(gamma=1.0).fit(moments([[0, 0], [2, 0], [0, 4], [2, 4]], [0, 0, 1, 1], 2), [1, 1])
    return mms, SASP(m0=1.0).fit(mms, T([1, 0]), T([[2, 0], [0, 0]]))


def test_stability_terms_hand_computed():
    # at z = 0: s^0 = (-1/3, -13/3), so f^0 = 0 and M^0 = 4; b_0 = |delta|_A |z - mu_0|_A + |delta|_A^2 / 2
    # = 1/3 + 1/12 (tight: z - mu_0 is parallel to delta), b_1 = 0 (class 1 is locally absent), B = 5/12;
    # local-mean adaptation (alpha = 1): 2/3 + 1/3 = 1
    mms, sasp = _hand_heads()
    terms = stability_terms(mms, sasp, T([[0.0, 0.0]]))
    assert terms["f0"].tolist() == [0] and terms["fk"].tolist() == [0]
    assert terms["margin"].tolist() == pytest.approx([4.0], rel=1e-12)
    assert terms["B"].tolist() == pytest.approx([5 / 12], rel=1e-12)
    assert terms["B_local"].tolist() == pytest.approx([1.0], rel=1e-12)
    assert terms["eq37"] < 1e-15 and terms["budget_viol"] == 0 and terms["absent_change"] == 0.0
    summary = stability_summary(terms, np.array([1]))  # wrong under both heads, certified
    assert (summary["certified"], summary["flipped"], summary["pointwise"], summary["err0"], summary["errk"]) == (1, 0, 0, 1.0, 1.0)
    assert summary["risk_slack"] == 0.0 and summary["pr_uncertified"] == 0.0


def test_stability_summary_counts_a_counterexample():
    # a certified query whose prediction changed (impossible for SASP, but the summary must see it) and an uncertified
    # query the adapted head gets wrong while the shared head was right: the pointwise bound still holds there
    terms = dict(f0=np.array([0, 1, 2]), fk=np.array([1, 0, 2]), margin=np.array([2.0, 0.1, 1.0]),
                 B=np.array([1.0, 0.5, 0.5]), B_local=np.array([0.5, 0.5, 0.5]))
    s = stability_summary(terms, np.array([0, 1, 2]))
    assert (s["certified"], s["flipped"], s["certified_flipped"]) == (2, 2, 1)
    assert s["pointwise"] == 1  # query 0: wrong now, right before, certified
    assert s["budget_larger"] == 1 and s["classwise"] == 1
    assert s["risk_slack"] == pytest.approx(0 + 1 / 3 - 2 / 3)
    with pytest.raises(ValueError, match="one label per query"):
        stability_summary(terms, np.array([0, 1]))


def test_stability_tally_keeps_worst_errors_and_sums_counts():
    tally = StabilityTally()
    counts = dict(certified_flipped=0, pointwise=1, classwise=0, budget_larger=2, n=5, flipped=1, certified=3)
    tally.add(dict(eq37=1e-12, absent_change=0.0, budget_viol=1), dict(risk_slack=0.5, **counts))
    tally.add(dict(eq37=1e-14, absent_change=1e-13, budget_viol=0), dict(risk_slack=0.25, **counts))
    assert (tally.eq37, tally.absent_change, tally.budget_viol, tally.min_slack) == (1e-12, 1e-13, 1, 0.25)
    assert (tally.pointwise, tally.budget_larger, tally.n, tally.flipped, tally.certified) == (2, 4, 10, 2, 6)


@settings(max_examples=20, deadline=None)
@given(seeds, st.integers(2, 5), dims_strategy, st.floats(0.0, 30.0))
def test_stability_terms_agree_with_the_independent_computation(seed, c, dims, m0):
    """fedlib.heads.stability against this file's own computation (stability above) on random heads."""
    parts = federation(seed, 4, c, dims, n=20)
    mms = fit(parts, c, dims)
    sasp = SASP(m0=m0).fit(mms, moments(*parts[seed % 4], c))
    hq = T(np.concatenate([p[0] for p in parts]))
    terms = stability_terms(mms, sasp, hq)
    s0, s, exact, b, margin, B, B_local, f0, fk = stability(mms, sasp, hq)
    assert np.array_equal(terms["f0"], f0.numpy()) and np.array_equal(terms["fk"], fk.numpy())
    assert np.allclose(terms["margin"], margin.numpy(), rtol=1e-12)
    assert np.allclose(terms["B"], B.numpy(), rtol=1e-12, atol=1e-300)
    assert np.allclose(terms["B_local"], B_local.numpy(), rtol=1e-12, atol=1e-300)
    summary = stability_summary(terms, np.concatenate([p[1] for p in parts]))
    assert summary["certified_flipped"] == summary["pointwise"] == summary["classwise"] == summary["budget_larger"] == 0
    assert terms["budget_viol"] == 0 and summary["risk_slack"] >= 0


# ---------------------------------------------------------------- fedbook.studies.fedgrc_synthetic: the random instances
@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 5), st.integers(1, 6), st.integers(1, 20))
def test_random_multilayer_federation_is_seeded_and_makes_every_class_known(seed, k, c, max_dim):
    dims = random_layer_dims(np.random.default_rng(seed), max_dim)
    assert 1 <= len(dims) <= 3 and all(1 <= x <= max(2, max_dim // len(dims)) for x in dims)
    a = random_multilayer_federation(np.random.default_rng(seed), k, c, dims)
    b = random_multilayer_federation(np.random.default_rng(seed), k, c, dims)
    assert len(a) == k
    assert all(np.array_equal(ha, hb) and np.array_equal(ya, yb) for (ha, ya), (hb, yb) in zip(a, b))
    assert all(h.shape == (len(y), sum(dims)) and 4 <= len(y) for h, y in a[1:])
    assert 4 <= len(a[0][1]) <= 24 + c
    assert sorted(set(np.concatenate([y for _, y in a]).tolist())) == list(range(c))


def test_random_multilayer_federation_gives_each_layer_its_magnitude():
    # layers drawn with magnitudes 10^U(-1, 2): the per-layer mean norms differ, which is what MMS's scales undo
    parts = random_multilayer_federation(np.random.default_rng(4), 3, 3, [4, 4], n_per_client=(200, 201))
    h = np.concatenate([p[0] for p in parts])
    n1, n2 = np.linalg.norm(h[:, :4], axis=1).mean(), np.linalg.norm(h[:, 4:], axis=1).mean()
    assert max(n1, n2) / min(n1, n2) > 2.0


@pytest.mark.parametrize("kw, match", [
    (dict(n_clients=0), "n_clients"), (dict(n_classes=0), "n_classes"), (dict(layer_dims=[]), "at least one layer"),
    (dict(layer_dims=[2, 0]), "layer_dims"), (dict(n_per_client=(5, 5)), "n_per_client"),
])
def test_random_multilayer_federation_refuses_bad_arguments(kw, match):
    args = dict(n_clients=2, n_classes=3, layer_dims=[2, 1]) | kw
    with pytest.raises(ValueError, match=match):
        random_multilayer_federation(np.random.default_rng(0), **args)
    with pytest.raises(ValueError, match="max_dim"):
        random_layer_dims(np.random.default_rng(0), 0)
