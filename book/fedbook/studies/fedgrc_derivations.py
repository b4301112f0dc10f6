r"""The numerical and symbolic checks of FedGRC's two derivations chapters, on seeded random
instances: *FedGRC's representation (CGRL)* (``notebooks/fedgrc_cgrl.py``) and *FedGRC's
statistics* (``notebooks/fedgrc_statistics.py``).

From FedGRC (*Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive
Statistical Personalization for Federated Learning*), Section IV and Appendix A. Each procedure
draws ``trials`` random instances from the stream ``rng``, compares what fedlib computes
(:mod:`fedlib.cgrl`, :class:`fedlib.heads.MMS`, :class:`fedlib.heads.SASP`,
:class:`fedlib.stats.ClassMoments`) with an independent computation of the paper's statement,
and returns the worst error (or the count of counterexamples) of every comparison; a ``record_*``
function writes a section's rows into the chapter's :class:`fedbook.checks.CheckTable` and
returns the numbers its prose quotes (glue keys ``fgd_...``).

CGRL (Section IV-A):

* :func:`radial_angular_symbolic` and :func:`radial_angular_split`: Eq. (10), the split of a
  squared distance into a radial and an angular part;
* :func:`magnitude_lemma_symbolic` and :func:`magnitude_decomposition`: Lemma IV.1 (Eq. (16)),
  the magnitude loss as dispersion plus offset;
* :func:`gradient_geometry`: Eq. (17)-(20), tangential directional and radial magnitude gradients;
* :func:`parameter_gradient_cosines`: the two terms' parameter gradients, not orthogonal.

Statistics (Section IV-B and IV-C, Appendix A-E to A-H), on random federations
(:mod:`fedbook.studies.fedgrc_synthetic`):

* :func:`trace_identities`: Eq. (21) and Eq. (28), the covariance trace from pairwise radial and
  angular distances (:func:`fedlib.cgrl.trace_from_pairs`);
* :func:`layer_scaling_invariance`: the raw geometry and MMS under a rescaling of every layer;
* :func:`shift_decomposition`: Proposition IV.1, within-client plus between-client covariance;
* :func:`moments_against_centralized`: Appendix A-E, MMS from client moments against
  :func:`centralized_mms` on the pooled features;
* :func:`metric_bounds`: Eq. (29)-(31), the spectrum of the metric and its condition bound;
* :func:`sasp_symbolic` and :func:`sasp_minimizer`: Proposition IV.2 and Eq. (35), SASP's means
  against sympy's and a numerical minimizer;
* :func:`bayes_equivalence`: Eq. (36), the linear head, the nearest mean and the Gaussian Bayes rule;
* :func:`stability_on_random_federations`, :func:`stability_by_client` and
  :func:`trained_cnn_stability`: Eq. (37)-(40) and the risk bounds
  (:mod:`fedlib.heads.stability`), on random features and on a trained model's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.optimize
import sympy as sp
import torch
from scipy.stats import multivariate_normal

from fedbook.checks import CheckTable, float64_tensor
from fedbook.page import show_table
from fedlib.algorithms import FedAvg
from fedlib.cgrl import (directional_loss, dispersion_plus_offset, log_norm, magnitude_loss, prototype_ce,
                         trace_from_pairs, unit, within_class_share)
from fedlib.data import load_dataset
from fedbook.studies.fedgrc_synthetic import random_layer_dims, random_multilayer_federation
from fedlib.federation import Federation, make_federation
from fedlib.heads import DEFAULT_GAMMA, DEFAULT_M0, MMS, SASP, adaptation_weights, scale_moments
from fedlib.heads.stability import StabilityTally, stability_summary, stability_terms
from fedlib.loop import LoopConfig
from fedlib.models import build_model
from fedlib.protocol import load_model
from fedlib.run import run_federated
from fedlib.stats import ClassMoments, feature_moments
from fedlib.training import TrainConfig
from fedlib.validation import check_int

F64 = torch.float64
T = float64_tensor


def _moments(h, y, c: int) -> ClassMoments:
    return ClassMoments.from_features(T(h), torch.as_tensor(np.asarray(y)), c)


def _fit(parts, c: int, dims, gamma: float | None = None) -> MMS:
    mms = MMS() if gamma is None else MMS(gamma=gamma)
    return mms.fit([_moments(ph, py, c) for ph, py in parts], dims)


def _check(trials, dim, min_dim: int = 1) -> None:
    check_int("trials", trials, low=1)
    check_int("dim", dim, low=min_dim)


def trace_identities(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Eq. (21) per layer and class, and Eq. (28), on ``trials`` random federations of 1-4 clients.

    Returns
    -------
    dict
        ``eq21``: the worst :math:`|\\operatorname{tr}\\widehat\\Sigma_{\\ell,c} - \\text{pairs}|` over
        the mean squared norm (the trace from :class:`fedlib.stats.ClassMoments`, the pairs from
        :func:`fedlib.cgrl.trace_from_pairs`); ``eq28``: the worst relative error of
        :math:`N\\operatorname{tr}\\widehat\\Sigma_w = \\sum_\\ell s_\\ell^{-2}\\sum_c N_c\\operatorname{tr}\\widehat\\Sigma_{\\ell,c}`
        (with the traces from moments or from pairs); ``aligned_radial``: the worst share of the
        angular part in the trace of 10 collinear features (0: purely radial).

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> out = trace_identities(np.random.default_rng(0), 2, 4)
    >>> bool(out["eq21"] < 1e-10 and out["eq28"] < 1e-10 and out["aligned_radial"] < 1e-12)
    True
    """
    _check(trials, dim)
    eq21_err, eq28_err, eq28_pair_err, aligned_radial = 0.0, 0.0, 0.0, []
    for t in range(trials):
        C, dims = int(rng.integers(2, 5)), random_layer_dims(rng, dim)
        parts = random_multilayer_federation(rng, int(rng.integers(1, 5)), C, dims)
        h = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        mms = _fit(parts, C, dims, 0.1)
        bounds = np.cumsum([0] + dims)
        total_blocks, total_pairs = 0.0, 0.0
        for ell in range(len(dims)):
            hl = h[:, bounds[ell]:bounds[ell + 1]]
            cov = ClassMoments.from_features(T(hl), torch.as_tensor(y), C).class_covariances()  # 1/N_c, raw layer features
            s2 = float(mms.scales_[ell]) ** 2
            for c in range(C):
                hc = hl[y == c]
                tr_moments = float(torch.trace(cov[c]))
                tr_pairs, _, _ = trace_from_pairs(hc)
                eq21_err = max(eq21_err, abs(tr_moments - tr_pairs) / max(1e-300, float((hc**2).sum(1).mean())))
                total_blocks += len(hc) * tr_moments / s2
                total_pairs += len(hc) * tr_pairs / s2
        lhs28 = len(y) * float(torch.trace(mms.covariance_))
        eq28_err = max(eq28_err, abs(lhs28 - total_blocks) / lhs28)
        eq28_pair_err = max(eq28_pair_err, abs(lhs28 - total_pairs) / lhs28)
        # aligned directions, different norms: the trace is all radial
        direction = unit(T(rng.normal(size=(1, dims[0])))).numpy()
        aligned = direction * rng.uniform(0.5, 3.0, size=(10, 1))
        full, radial, angular = trace_from_pairs(aligned)
        aligned_radial.append(abs(full - radial) / full)
    return dict(eq21=eq21_err, eq28=max(eq28_err, eq28_pair_err), aligned_radial=max(aligned_radial))


def layer_scaling_invariance(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Rescale every layer of a random federation (3 clients) by a factor in 1e-3..1e3.

    Returns
    -------
    dict
        ``geometry``: the worst change of the raw norm ratios (relative to the largest ratio), of
        the class log-norm variances and of the differences between class means of log norms;
        ``mms``: the worst relative change of MMS's quantities (the scales up to the factors, the
        scaled features, the means, :math:`\\widehat\\Sigma_w` and :math:`A`); ``predictions``: how
        many predictions changed.

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> out = layer_scaling_invariance(np.random.default_rng(0), 2, 4)
    >>> bool(out["geometry"] < 1e-9 and out["mms"] < 1e-8), out["predictions"]
    (True, 0)
    """
    _check(trials, dim)
    inv_geom, inv_mms, inv_pred = 0.0, 0.0, 0
    for t in range(trials):
        C, dims = int(rng.integers(2, 5)), random_layer_dims(rng, dim)
        parts = random_multilayer_federation(rng, 3, C, dims)
        factors = 10.0 ** rng.uniform(-3, 3, size=len(dims))
        f_rep = np.repeat(factors, dims)
        parts2 = [(ph * f_rep, py) for ph, py in parts]
        h = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        bounds = np.cumsum([0] + dims)
        for ell in range(len(dims)):  # raw geometry of one layer
            hl, hl2 = h[:, bounds[ell]:bounds[ell + 1]], h[:, bounds[ell]:bounds[ell + 1]] * factors[ell]
            R, R2 = np.linalg.norm(hl, axis=1), np.linalg.norm(hl2, axis=1)
            lr, lr2 = np.log(R), np.log(R2)
            ratio = np.abs(R2[:, None] / R2[None, :] - R[:, None] / R[None, :]).max() / (R.max() / R.min())
            var = max(abs(lr[y == c].var() - lr2[y == c].var()) for c in range(C) if (y == c).any())
            cm = np.array([lr[y == c].mean() for c in range(C)])
            cm2 = np.array([lr2[y == c].mean() for c in range(C)])
            diff = np.abs((cm[:, None] - cm[None, :]) - (cm2[:, None] - cm2[None, :])).max()
            inv_geom = max(inv_geom, ratio, var, diff)
        m1 = _fit(parts, C, dims, 0.1)
        m2 = _fit(parts2, C, dims, 0.1)

        def rel(a, b):
            return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))

        inv_mms = max(inv_mms, rel(m2.scales_, m1.scales_ * T(factors)), rel(m2.transform(T(h * f_rep)), m1.transform(T(h))),
                      rel(m2.means_, m1.means_), rel(m2.covariance_, m1.covariance_), rel(m2.metric_, m1.metric_))
        inv_pred += int((m1.predict(T(h)) != m2.predict(T(h * f_rep))).sum())
    return dict(geometry=inv_geom, mms=inv_mms, predictions=inv_pred)


def shift_decomposition(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Proposition IV.1 on random federations of 2-5 clients:
    :math:`\\widehat\\Sigma_w = \\frac1N\\sum_k\\sum_c n_c^{(k)}[\\widehat\\Sigma_c^{(k)} + \\Delta_c^{(k)}\\Delta_c^{(k)\\top}]`.

    Returns
    -------
    dict
        ``error``: the worst entrywise difference over :math:`\\max|\\widehat\\Sigma_w|`;
        ``between_share``: per instance, the share of the between-client term in the trace.

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> out = shift_decomposition(np.random.default_rng(0), 2, 4)
    >>> out["error"] < 1e-10, len(out["between_share"])
    (True, 2)
    """
    _check(trials, dim)
    prop1_err, between_share = 0.0, []
    for t in range(trials):
        C, dims = int(rng.integers(2, 5)), random_layer_dims(rng, dim)
        parts = random_multilayer_federation(rng, int(rng.integers(2, 6)), C, dims)
        mms = _fit(parts, C, dims)
        within = torch.zeros_like(mms.covariance_)
        between = torch.zeros_like(mms.covariance_)
        for ph, py in parts:
            zk = scale_moments(_moments(ph, py, C), mms.feature_scale_)
            for c in zk.observed.nonzero().flatten().tolist():
                delta = zk.means()[c] - mms.means_[c]
                within += zk.counts[c] * zk.class_covariances()[c]
                between += zk.counts[c] * torch.outer(delta, delta)
        n_all = float(mms.counts_.sum())
        prop1_err = max(prop1_err, float((mms.covariance_ - (within + between) / n_all).abs().max() / mms.covariance_.abs().max()))
        between_share.append(float(torch.trace(between) / (torch.trace(within) + torch.trace(between))))
    return dict(error=prop1_err, between_share=between_share)


def centralized_mms(h: np.ndarray, y: np.ndarray, n_classes: int, layer_dims) -> tuple:
    """MMS's quantities computed directly on the pooled features (numpy, no moments): Eq. (22)-(25).

    Parameters
    ----------
    h : ndarray of shape (N, d)
        The pooled unscaled concatenated features.
    y : ndarray of shape (N,)
        Their labels in ``[0, n_classes)``.
    n_classes : int
    layer_dims : sequence of int
        The layer dimensions, adding up to ``d``.

    Returns
    -------
    (scales, z, mu, sigma)
        The layer scales (m,), the scaled features (N, d), the shared class means (C, d; a zero
        row for a class without sample) and the pooled within-class covariance about them (d, d),
        denominator :math:`N`.

    Raises
    ------
    ValueError
        On layer dimensions that do not add up to ``d`` or labels of another length than ``h``.

    Examples
    --------
    >>> h = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [2.0, 4.0]])
    >>> scales, z, mu, sigma = centralized_mms(h, np.array([0, 0, 1, 1]), 2, [1, 1])
    >>> scales.tolist(), mu.tolist(), sigma.tolist()
    ([1.0, 2.0], [[1.0, 0.0], [1.0, 2.0]], [[1.0, 0.0], [0.0, 0.0]])
    """
    h, y = np.asarray(h, dtype=np.float64), np.asarray(y)
    if h.ndim != 2 or y.shape != (len(h),):
        raise ValueError(f"need h of shape (N, d) and y of shape (N,), got {h.shape} and {y.shape}")
    if sum(layer_dims) != h.shape[1]:
        raise ValueError(f"layer_dims {list(layer_dims)} add up to {sum(layer_dims)}, not to the dimension {h.shape[1]}")
    blocks = np.split(np.arange(h.shape[1]), np.cumsum(layer_dims)[:-1])
    scales = np.array([np.sqrt(((h[:, b] - h[:, b].mean(0)) ** 2).sum(1).mean() / len(b)) for b in blocks])  # Eq. (22)
    z = h / np.repeat(scales, layer_dims)  # Eq. (23): scaled without centring
    mu = np.stack([z[y == k].mean(0) if (y == k).any() else np.zeros(h.shape[1]) for k in range(n_classes)])  # Eq. (24)
    e = z - mu[y]
    return scales, z, mu, e.T @ e / len(y)  # Eq. (25)


MOMENT_QUANTITIES = ("scales", "means", "covariance", "cross-layer blocks", "ridge", "metric", "unit block variance")
"""What :func:`moments_against_centralized` compares, in its table's order."""


def moments_against_centralized(rng: np.random.Generator, trials: int, dim: int) -> dict[str, float]:
    """Appendix A-E: MMS fitted on per-client moments against :func:`centralized_mms` on the
    pooled features, on random federations of 1-5 clients and 2-3 layers (random ridges
    :math:`\\gamma` in 0.01..10).

    Returns
    -------
    dict of str to float
        Per quantity of :data:`MOMENT_QUANTITIES`, the worst relative error (the cross-layer
        blocks relative to the whole matrix; the unit block variance as the largest
        :math:`|\\text{mean coordinate variance of a scaled block} - 1|`).

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> errs = moments_against_centralized(np.random.default_rng(0), 2, 4)
    >>> list(errs) == list(MOMENT_QUANTITIES), max(errs.values()) < 1e-8
    (True, True)
    """
    _check(trials, dim)
    errs = dict.fromkeys(MOMENT_QUANTITIES, 0.0)
    for t in range(trials):
        C = int(rng.integers(2, 5))
        dims = random_layer_dims(rng, dim)
        if len(dims) == 1:
            dims = dims + [int(rng.integers(1, 4))]  # at least two layers: cross-layer blocks exist
        parts = random_multilayer_federation(rng, int(rng.integers(1, 6)), C, dims)
        h = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        gamma = float(10.0 ** rng.uniform(-2, 1))
        mms = _fit(parts, C, dims, gamma)
        scales, z, mu, sigma = centralized_mms(h, y, C, dims)
        d = h.shape[1]

        def rel(a, b):
            return float(np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-300))

        errs["scales"] = max(errs["scales"], rel(mms.scales_.numpy(), scales))
        errs["means"] = max(errs["means"], rel(mms.means_.numpy(), mu))
        errs["covariance"] = max(errs["covariance"], rel(mms.covariance_.numpy(), sigma))
        off = np.ones((d, d), dtype=bool)
        for b in np.split(np.arange(d), np.cumsum(dims)[:-1]):
            off[np.ix_(b, b)] = False
            errs["unit block variance"] = max(errs["unit block variance"], abs(np.var(z[:, b], axis=0).mean() - 1.0))
        errs["cross-layer blocks"] = max(errs["cross-layer blocks"],
                                         rel(mms.covariance_.numpy()[off], sigma[off]) * np.abs(sigma[off]).max() / np.abs(sigma).max())
        lam = gamma * np.trace(sigma) / d
        errs["ridge"] = max(errs["ridge"], abs(mms.ridge_ - lam) / lam)
        errs["metric"] = max(errs["metric"], rel(mms.metric_.numpy(), np.linalg.inv(sigma + lam * np.eye(d))))
    return errs


def metric_bounds(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Eq. (29)-(31) on random within-class covariances (including singular ones, fewer samples
    than dimensions), then on rank-one covariances (two samples of one class), where the
    condition bound :math:`1 + d/\\gamma` is attained.

    Returns
    -------
    dict
        ``identities``: the worst relative error of :math:`\\lVert A\\rVert_2 = 1/(\\sigma_{\\min} + \\lambda_A)`
        and :math:`\\kappa(A) = (\\sigma_{\\max} + \\lambda_A)/(\\sigma_{\\min} + \\lambda_A)`; ``op_bound``
        and ``kappa_bound``: the largest relative excess over :math:`1/\\lambda_A` and over
        :math:`1 + d/\\gamma` (0, or rounding, when the bounds hold); ``n_singular``: how many covariances were
        singular; ``tight``: the worst :math:`|\\kappa/(1 + d/\\gamma) - 1|` of the rank-one instances.

    Raises
    ------
    ValueError
        ``trials`` that is not an integer >= 1 or ``dim`` that is not an integer >= 2.

    Examples
    --------
    >>> out = metric_bounds(np.random.default_rng(0), 3, 4)
    >>> bool(max(out["identities"], out["op_bound"], out["kappa_bound"], out["tight"]) < 1e-8)
    True
    """
    _check(trials, dim, min_dim=2)
    op_exact, kappa_exact, op_bound, kappa_bound, n_singular = 0.0, 0.0, 0.0, 0.0, 0
    for t in range(trials):
        d = int(rng.integers(1, dim + 1))
        n = int(rng.integers(2, 2 * d + 3))
        gamma = float(10.0 ** rng.uniform(-3, 2))
        h = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) * 10.0 ** rng.uniform(-2, 2)
        mms = MMS(gamma=gamma).fit(_moments(h, rng.integers(0, 2, size=n), 2))
        sig = np.clip(np.linalg.eigvalsh(mms.covariance_.numpy()), 0.0, None)
        eig = np.linalg.eigvalsh(mms.metric_.numpy())
        lam = mms.ridge_
        op_exact = max(op_exact, abs(eig.max() - 1 / (sig.min() + lam)) * (sig.min() + lam))
        kappa = eig.max() / eig.min()
        kappa_exact = max(kappa_exact, abs(kappa - (sig.max() + lam) / (sig.min() + lam)) / kappa)
        op_bound = max(op_bound, eig.max() * lam - 1.0)  # <= 0 if the bound holds
        kappa_bound = max(kappa_bound, kappa / (1 + d / gamma) - 1.0)
        n_singular += int(sig.min() <= 1e-12 * max(sig.max(), 1e-300))  # a singular within-class covariance
    # rank one: two samples of one class (one more of another class adds no within-class variation)
    tight = []
    for t in range(trials):
        d = int(rng.integers(2, dim + 1))
        gamma = float(10.0 ** rng.uniform(-2, 1))
        h = rng.normal(size=(3, d))
        mms = MMS(gamma=gamma).fit(_moments(h, [0, 0, 1], 2))
        eig = np.linalg.eigvalsh(mms.metric_.numpy())
        tight.append(abs(eig.max() / eig.min() / (1 + d / gamma) - 1.0))
    return dict(identities=max(op_exact, kappa_exact), op_bound=max(op_bound, 0.0), kappa_bound=max(kappa_bound, 0.0),
                n_singular=n_singular, tight=max(tight))


def sasp_minimizer(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Proposition IV.2 and Eq. (35): SASP's means against ``scipy.optimize.minimize`` (BFGS with the
    analytic gradient) on :math:`J(m) = \\sum_i\\lVert z_i - m\\rVert_A^2 + m_0\\lVert m - \\mu_c\\rVert_A^2`
    with the fitted metric and with an unrelated random SPD metric, for every (client, class) of
    random federations (3 clients, dimension up to ``min(dim, 8)``, :math:`m_0` in 0.1..100).

    Returns
    -------
    dict
        ``optimum``: the worst :math:`|m_{\\text{BFGS}} - \\tilde\\mu|/(1 + |\\tilde\\mu|)` (max norm) under
        the fitted metric; ``objective_worse``: how often the closed form's objective exceeds the
        optimizer's; ``cancel``: the same error under the other metric (the metric cancels);
        ``absent``: the worst distance of a locally absent class's mean from the shared mean;
        ``eq35_local`` and ``eq35_departure``: the worst errors of
        :math:`\\lVert\\tilde\\mu - \\mu^{(k)}\\rVert_A = (1-\\alpha)\\lVert\\Delta\\rVert_A` and
        :math:`\\lVert\\tilde\\mu - \\mu\\rVert_A = \\alpha\\lVert\\Delta\\rVert_A` over
        :math:`\\lVert\\Delta\\rVert_A + \\lVert\\mu_c\\rVert_A`; ``n_classes`` and ``n_absent``:
        the (client, class) instances and the locally absent ones among them.

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> out = sasp_minimizer(np.random.default_rng(0), 1, 3)
    >>> out["optimum"] < 1e-6, out["cancel"] < 1e-6, out["objective_worse"], out["eq35_local"] < 1e-10
    (True, True, 0, True)
    """
    _check(trials, dim)
    opt_err, cancel_err, absent_err, res_err, dep_err, n_classes_opt, n_absent, n_obj_worse = 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0
    for t in range(trials):
        C, dims = int(rng.integers(2, 5)), random_layer_dims(rng, min(dim, 8))
        parts = random_multilayer_federation(rng, 3, C, dims)
        mms = _fit(parts, C, dims, float(10.0 ** rng.uniform(-2, 0)))
        m0 = float(10.0 ** rng.uniform(-1, 2))
        ph, py = parts[int(rng.integers(0, 3))]
        sasp = SASP(m0=m0).fit(mms, _moments(ph, py, C))
        z = mms.transform(T(ph)).numpy()
        d = z.shape[1]
        B_ = rng.normal(size=(d, d))
        other_metric = B_ @ B_.T / d + 0.1 * np.eye(d)
        for c in range(C):
            zc, mu = z[py == c], mms.means_[c].numpy()
            closed = sasp.means_[c].numpy()
            for metric, name in ((mms.metric_.numpy(), "fit"), (other_metric, "other")):
                def J(m, zc=zc, mu=mu, A=metric):
                    r = zc - m
                    return float(np.einsum("id,de,ie->", r, A, r) + m0 * (m - mu) @ A @ (m - mu))

                def dJ(m, zc=zc, mu=mu, A=metric):
                    return -2 * A @ (zc - m).sum(0) + 2 * m0 * A @ (m - mu)

                x0 = mu + rng.normal(size=d) * (1 + np.abs(mu).max())
                res = scipy.optimize.minimize(J, x0, jac=dJ, method="BFGS", options={"gtol": 1e-12, "maxiter": 2000})
                err = float(np.abs(res.x - closed).max() / (1 + np.abs(closed).max()))
                if name == "fit":
                    opt_err = max(opt_err, err)
                    n_obj_worse += int(J(closed) > res.fun * (1 + 1e-12) + 1e-12)
                else:
                    cancel_err = max(cancel_err, err)
            n_classes_opt += 1
            if len(zc) == 0:
                absent_err = max(absent_err, float(np.abs(closed - mu).max()))
                n_absent += 1
            else:
                A = mms.metric_

                def anorm(v):
                    return float(torch.sqrt(v @ A @ v))

                alpha, delta = float(sasp.alpha_[c]), sasp.displacement_[c]
                scale = anorm(delta) + anorm(mms.means_[c])  # |Delta|_A can be 0 (a class held by this client only)
                res_err = max(res_err, abs(anorm(sasp.means_[c] - sasp.local_means_[c]) - (1 - alpha) * anorm(delta)) / scale)
                dep_err = max(dep_err, abs(anorm(sasp.means_[c] - mms.means_[c]) - alpha * anorm(delta)) / scale)
    return dict(optimum=opt_err, objective_worse=n_obj_worse, cancel=cancel_err, absent=absent_err, eq35_local=res_err,
                eq35_departure=dep_err, n_classes=n_classes_opt, n_absent=n_absent)


def bayes_equivalence(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Eq. (36) and Appendix A-G on random federations (3 clients) and every client's queries:
    SASP's scores against :math:`-\\tfrac12\\lVert z - \\tilde\\mu_c\\rVert_A^2 + \\tfrac12 z^\\top Az`, and its
    predictions against the nearest personalized mean and the equal-prior Gaussian Bayes rule
    :math:`\\mathcal N(\\tilde\\mu_c, A^{-1})` (``scipy.stats.multivariate_normal``).

    Returns
    -------
    dict
        ``scores``: the worst error over :math:`1 + z^\\top Az`; ``nearest_mean`` and ``gaussian``:
        the disagreements; ``n_queries``.

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> out = bayes_equivalence(np.random.default_rng(0), 2, 4)
    >>> out["scores"] < 1e-10, out["nearest_mean"], out["gaussian"]
    (True, 0, 0)
    """
    _check(trials, dim)
    bayes_err, head_vs_nn, head_vs_gauss, n_queries = 0.0, 0, 0, 0
    for t in range(trials):
        C, dims = int(rng.integers(2, 6)), random_layer_dims(rng, dim)
        parts = random_multilayer_federation(rng, 3, C, dims)
        mms = _fit(parts, C, dims, float(10.0 ** rng.uniform(-2, 0)))
        ph, py = parts[int(rng.integers(0, 3))]
        sasp = SASP(m0=float(10.0 ** rng.uniform(-1, 2))).fit(mms, _moments(ph, py, C))
        hq = np.concatenate([p[0] for p in parts])
        z = mms.transform(T(hq))
        scores = sasp.decision_function(T(hq))
        d2 = sasp.squared_distances(T(hq))
        za = torch.einsum("nd,de,ne->n", z, mms.metric_, z)
        bayes_err = max(bayes_err, float(((scores + 0.5 * d2 - 0.5 * za[:, None]).abs() / (1 + za[:, None])).max()))
        cov = np.linalg.inv(mms.metric_.numpy())
        loglik = np.stack([multivariate_normal(sasp.means_[c].numpy(), cov).logpdf(z.numpy()).reshape(-1) for c in range(C)], 1)
        pred = sasp.predict(T(hq)).numpy()
        head_vs_nn += int((pred != d2.argmin(1).numpy()).sum())
        head_vs_gauss += int((pred != loglik.argmax(1)).sum())
        n_queries += len(hq)
    return dict(scores=bayes_err, nearest_mean=head_vs_nn, gaussian=head_vs_gauss, n_queries=n_queries)


def stability_on_random_federations(rng: np.random.Generator, trials: int, dim: int) -> StabilityTally:
    """Eq. (37)-(40) and the risk bounds on random federations (4 clients of 10-39 samples): the
    shared head with a random ridge, one random client's SASP head with a random :math:`m_0`,
    queried on every client's features (the all-class population).

    Returns
    -------
    StabilityTally
        The worst errors and the counts over every instance (:mod:`fedlib.heads.stability`).

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> tally = stability_on_random_federations(np.random.default_rng(0), 2, 4)
    >>> tally.eq37 < 1e-10, tally.budget_viol, tally.certified_flipped, tally.pointwise, tally.min_slack >= 0
    (True, 0, 0, 0, True)
    """
    _check(trials, dim)
    tally = StabilityTally()
    for t in range(trials):
        C, dims = int(rng.integers(2, 6)), random_layer_dims(rng, dim)
        parts = random_multilayer_federation(rng, 4, C, dims, n_per_client=(10, 40))
        mms = _fit(parts, C, dims, float(10.0 ** rng.uniform(-2, 0)))
        k = int(rng.integers(0, 4))
        sasp = SASP(m0=float(10.0 ** rng.uniform(-1, 1.5))).fit(mms, _moments(*parts[k], C))
        hq = np.concatenate([p[0] for p in parts])  # queries from every client: the all-class population
        yq = np.concatenate([p[1] for p in parts])
        terms = stability_terms(mms, sasp, T(hq))
        tally.add(terms, stability_summary(terms, yq))
    return tally


def stability_by_client(mms: MMS, client_moments, federation: Federation, model: torch.nn.Module, layers,
                        m0: float = DEFAULT_M0) -> tuple[pd.DataFrame, StabilityTally]:
    """Eq. (37)-(40) and the risk bounds on a trained model's features: every client's SASP head
    (fitted on its moments) against the shared head, on the global test set (:math:`R = Q`) and on
    the client's local test split (:math:`R = P^{(k)}`).

    Parameters
    ----------
    mms : MMS
        The shared head fitted on the clients' moments of the concatenated ``layers``.
    client_moments : sequence of ClassMoments
        Each client's moments, in the order of ``federation.clients``.
    federation : Federation
    model : FeatureModel
        The frozen backbone; the queries are its ``layers`` features (one pass, float64).
    layers : sequence of str
    m0 : float, default 10
        SASP's :math:`m_0` (fedlib's default, ``fedlib.heads.DEFAULT_M0``).

    Returns
    -------
    (DataFrame, StabilityTally)
        One row per client and target (``client``, ``target``, ``queries``, ``error shared``,
        ``error SASP``, ``Pr(M0 <= B)``, ``bound``, ``changed``, ``certified & changed``; the rates
        as fractions), and the tally over every row. A target without query is left out.

    Raises
    ------
    ValueError
        On a count of moments other than the number of clients.
    """
    if len(client_moments) != len(federation.clients):
        raise ValueError(f"need one ClassMoments per client ({len(federation.clients)}), got {len(client_moments)}")

    def features(x):
        with torch.no_grad():
            return torch.cat(list(model.features(x, layers).values()), dim=1).to(torch.float64)

    h_global = features(federation.global_test.x)
    y_global = federation.global_test.labels_np
    rows, tally = [], StabilityTally()
    for k, client in enumerate(federation.clients):
        sasp = SASP(m0=m0).fit(mms, client_moments[k])
        for target, hq, yq in (("global (Q)", h_global, y_global),
                               ("local (P_k)", features(client.test.x), client.test.labels_np)):
            if len(yq) == 0:
                continue
            terms = stability_terms(mms, sasp, hq)
            summ = stability_summary(terms, yq)
            tally.add(terms, summ)
            rows.append({"client": k, "target": target, "queries": summ["n"], "error shared": summ["err0"],
                         "error SASP": summ["errk"], "Pr(M0 <= B)": summ["pr_uncertified"],
                         "bound": summ["err0"] + summ["pr_uncertified"], "changed": summ["flipped"],
                         "certified & changed": summ["certified_flipped"]})
    return pd.DataFrame(rows), tally


# ----------------------------------------------------------------------------------------------
# CGRL (Section IV-A): the chapter *FedGRC's representation (CGRL)*
# ----------------------------------------------------------------------------------------------

def radial_angular_symbolic() -> tuple[bool, sp.Expr]:
    """Eq. (10) by sympy in three dimensions: the residual ``lhs - rhs - [R_i^2(u_i'u_i - 1) +
    R_j^2(u_j'u_j - 1)]`` of :math:`\\lVert R_iu_i - R_ju_j\\rVert^2 = (R_i - R_j)^2 + 2R_iR_j(1 -
    u_i^\\top u_j)` expanded, and whether it is zero (the split is exact on unit directions).

    >>> radial_angular_symbolic()
    (True, 0)
    """
    Ri, Rj = sp.symbols("R_i R_j", positive=True)
    ui, uj = sp.Matrix(sp.symbols("a0:3")), sp.Matrix(sp.symbols("b0:3"))
    lhs = ((Ri * ui - Rj * uj).T * (Ri * ui - Rj * uj))[0]
    rhs = (Ri - Rj) ** 2 + 2 * Ri * Rj * (1 - (ui.T * uj)[0])
    residual = sp.expand(lhs - rhs - (Ri**2 * ((ui.T * ui)[0] - 1) + Rj**2 * ((uj.T * uj)[0] - 1)))
    return bool(residual == 0), residual


def radial_angular_split(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Eq. (10) numerically on ``trials`` batches of 40 raw features (dimension 1..``dim``, norms
    over six orders of magnitude), 200 random pairs each, with :func:`fedlib.cgrl.unit`.

    Returns
    -------
    dict
        ``error``: the worst :math:`|\\text{lhs} - \\text{rhs}| / (R_i^2 + R_j^2)`; ``pairs``: how many
        pairs; ``unit_zero``: the largest entry of ``unit`` of zero rows (the paper's convention: 0).

    Examples
    --------
    >>> out = radial_angular_split(np.random.default_rng(0), 2, 4)
    >>> bool(out["error"] < 1e-12), out["pairs"], out["unit_zero"]
    (True, 400, 0.0)
    """
    _check(trials, dim)
    eq10_err, n_pairs = 0.0, 0
    for t in range(trials):
        d = int(rng.integers(1, dim + 1))
        h = rng.normal(size=(40, d)) * 10.0 ** rng.uniform(-3, 3, size=(40, 1))
        u = unit(T(h)).numpy()
        R = np.linalg.norm(h, axis=1)
        i, j = rng.integers(0, 40, size=(2, 200))
        lhs_n = ((h[i] - h[j]) ** 2).sum(1)
        rhs_n = (R[i] - R[j]) ** 2 + 2 * R[i] * R[j] * (1 - (u[i] * u[j]).sum(1))
        eq10_err = max(eq10_err, float(np.max(np.abs(lhs_n - rhs_n) / (R[i] ** 2 + R[j] ** 2))))
        n_pairs += len(i)
    unit_zero = float(unit(torch.zeros(2, 3, dtype=F64)).abs().max())
    return dict(error=float(eq10_err), pairs=int(n_pairs), unit_zero=unit_zero)


def magnitude_lemma_symbolic() -> sp.Expr:
    """Lemma IV.1 under a batch's empirical distribution by sympy: on five views with the gate
    pattern (1, 0, 1, 1, 0) and symbolic log norms, the simplified difference of the mean of
    :math:`\\chi(\\rho - a)^2` and :math:`p_\\chi[\\widehat{\\operatorname{Var}} + \\text{offset}^2]` (zero).

    >>> magnitude_lemma_symbolic()
    0
    """
    rho_s = sp.symbols("rho0:5", real=True)
    a_s = sp.Symbol("a", real=True)
    chi_s = [1, 0, 1, 1, 0]
    n_s, n_chi = len(chi_s), sum(chi_s)
    kept = [r for r, c in zip(rho_s, chi_s) if c]
    mean_chi = sum(kept) / n_chi
    lemma_lhs = sum(c * (r - a_s) ** 2 for r, c in zip(rho_s, chi_s)) / n_s
    lemma_rhs = sp.Rational(n_chi, n_s) * (sum((r - mean_chi) ** 2 for r in kept) / n_chi + (mean_chi - a_s) ** 2)
    return sp.simplify(sp.expand(lemma_lhs - lemma_rhs))


def magnitude_decomposition(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """:func:`fedlib.cgrl.magnitude_loss` against Lemma IV.1's decomposition (the mean over
    layers of :math:`\\sum_c (n_c/n)\\,p_\\chi[\\widehat{\\operatorname{Var}} + \\text{offset}^2]`,
    :func:`fedlib.cgrl.dispersion_plus_offset`) on ``trials`` random batches of 1-3 layers and 1-4
    classes, some features below :math:`r_{\\min}` and some classes without a reference.

    Returns
    -------
    dict
        ``error``: the worst :math:`|\\text{loss} - \\text{decomposition}| / \\max(1, |\\text{decomposition}|)`;
        ``batches``; ``zero_p``: the (class, layer) groups with :math:`p_\\chi = 0`.

    Examples
    --------
    >>> out = magnitude_decomposition(np.random.default_rng(0), 3, 4)
    >>> bool(out["error"] < 1e-12), out["batches"]
    (True, 3)
    """
    _check(trials, dim)
    lemma_err, lemma_instances, zero_p = 0.0, 0, 0
    for t in range(trials):
        L, C, n = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(2, 40))
        dims = [int(x) for x in rng.integers(1, dim + 1, size=L)]
        y = torch.as_tensor(rng.integers(0, C, size=n))
        feats = [T(rng.normal(size=(n, dl)) * 10.0 ** rng.uniform(-3, 1, size=(n, 1))) for dl in dims]  # some below r_min
        refs = T(rng.normal(size=(L, C)))
        observed = torch.as_tensor(rng.random(C) < 0.7)
        r_min, eps = float(10.0 ** rng.uniform(-3, -1)), float(10.0 ** rng.uniform(-6, -2))
        loss = float(magnitude_loss(feats, y, refs, observed, r_min, eps))
        expected = 0.0
        for ell, h in enumerate(feats):
            rho = log_norm(h, eps).numpy()
            gate = (torch.sqrt((h * h).sum(dim=1) + eps**2) >= r_min).numpy() & observed.numpy()[y.numpy()]  # stabilized r, Eq. (14)
            for c in range(C):
                sel = y.numpy() == c
                if sel.any():
                    expected += sel.mean() * dispersion_plus_offset(rho[sel], gate[sel], float(refs[ell, c])) / L
                    zero_p += int(gate[sel].sum() == 0)
        lemma_err = max(lemma_err, abs(loss - expected) / max(1.0, abs(expected)))
        lemma_instances += 1
    return dict(error=float(lemma_err), batches=int(lemma_instances), zero_p=int(zero_p))


def gradient_geometry(rng: np.random.Generator, trials: int, dim: int) -> dict:
    """Eq. (17)-(20) by autograd (float64) through :func:`fedlib.cgrl.directional_loss`,
    :func:`fedlib.cgrl.prototype_ce` and :func:`fedlib.cgrl.magnitude_loss`, on ``trials`` random
    batches: :math:`2B` views (both views of each example), random unit class directions with some
    zero references, feature norms over three orders of magnitude.

    Returns
    -------
    dict
        ``tangent``: the worst :math:`|h^\\top g|/(|h||g|)` of the directional gradient;
        ``second_order``: the worst error of :math:`|h - sg|^2 = |h|^2 + s^2|g|^2` over :math:`|h|^2`
        (three step sizes); ``ce``: the worst relative error of Eq. (18b) against autograd;
        ``radial``: of Eq. (19); ``parallel``: the worst tangential part of the magnitude gradient
        over its norm; ``orthogonal``: the worst :math:`|g^\\top v|/(|g||v|)` (Eq. (20));
        ``sign_violations``: small magnitude descent steps that do not move the norm toward the
        reference; ``views``: how many views.

    Examples
    --------
    >>> out = gradient_geometry(np.random.default_rng(0), 2, 4)
    >>> bool(max(out["tangent"], out["orthogonal"]) < 1e-10 and out["ce"] < 1e-12), out["sign_violations"]
    (True, 0)
    """
    _check(trials, dim, min_dim=2)
    tang_err, ce_err, rad_err, par_err, orth_err, second_err, sign_viol, n_views = (0.0,) * 6 + (0, 0)
    for t in range(trials):
        B, d, C = int(rng.integers(2, 10)), int(rng.integers(2, dim + 1)), int(rng.integers(2, 6))
        y = torch.as_tensor(np.tile(rng.integers(0, C, size=B), 2))  # two views of each example
        n = 2 * B
        h = T(rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-1, 2, size=(n, 1))).requires_grad_(True)
        protos = unit(T(rng.normal(size=(C, d))))
        protos[rng.random(C) < 0.3] = 0.0  # classes without a shared direction yet: zero logits
        tau, beta = float(rng.uniform(0.05, 1.0)), float(rng.uniform(0.0, 2.0))
        g = torch.autograd.grad(directional_loss(unit(h), y, protos, tau, beta, True), h)[0]
        hn, gn = h.detach(), g
        R = hn.norm(dim=1)
        tang_err = max(tang_err, float(((hn * gn).sum(1).abs() / (R * gn.norm(dim=1)).clamp_min(1e-300)).max()))
        # second order: |h - s g|^2 - |h|^2 = s^2 |g|^2 exactly (isolated feature-space step)
        for s in (1e-3, 1e-1, 1.0):
            s_i = s * R / gn.norm(dim=1).clamp_min(1e-300)  # a step of relative size s
            change = ((hn - s_i[:, None] * gn) ** 2).sum(1) - R**2
            second_err = max(second_err, float(((change - s_i**2 * (gn**2).sum(1)).abs() / R**2).max()))
        # Eq. (18b) against autograd of the prototype cross-entropy alone
        gp = torch.autograd.grad(prototype_ce(unit(h), y, protos, tau), h)[0]
        u = unit(hn)
        q = torch.softmax(u @ protos.T / tau, dim=1)
        inner = q @ protos - protos[y]  # sum_c q_c p_c - p_y
        proj = inner - (u * inner).sum(1, keepdim=True) * u  # (I - u u') (.)
        closed = proj / (tau * R[:, None]) / n  # mean over the 2B views
        ce_err = max(ce_err, float((gp - closed).norm() / gp.norm().clamp_min(1e-300)))
        # Eq. (19) against autograd of the magnitude loss at the final layer, chi and a fixed
        refs = T(rng.normal(size=(1, C)) + np.log(R.numpy()).mean())
        observed = torch.ones(C, dtype=torch.bool)
        r_min, eps = 1e-2, 1e-3
        v = torch.autograd.grad(magnitude_loss([h], y, refs, observed, r_min, eps), h)[0]
        rho = log_norm(hn, eps)
        v_closed = 2 * (rho - refs[0, y])[:, None] * hn / (R**2 + eps**2)[:, None] / n
        rad_err = max(rad_err, float((v - v_closed).norm() / v.norm().clamp_min(1e-300)))
        par_err = max(par_err, float(((v - (v * u).sum(1, keepdim=True) * u).norm(dim=1) / v.norm(dim=1).clamp_min(1e-300)).max()))
        orth_err = max(orth_err, float(((g * v).sum(1).abs() / (g.norm(dim=1) * v.norm(dim=1)).clamp_min(1e-300)).max()))
        # a small descent step on the magnitude term moves the norm toward the reference
        step = 1e-4 * R[:, None] / v.norm(dim=1, keepdim=True).clamp_min(1e-300)
        new_norm = (hn - step * v).norm(dim=1)
        above = rho > refs[0, y]
        sign_viol += int(((above & (new_norm >= R)) | (~above & (new_norm <= R))).sum())
        n_views += n
    return dict(tangent=float(tang_err), second_order=float(second_err), ce=float(ce_err), radial=float(rad_err),
                parallel=float(par_err), orthogonal=float(orth_err), sign_violations=int(sign_viol), views=int(n_views))


def parameter_gradient_cosines(rng: np.random.Generator, trials: int) -> list[float]:
    """The absolute cosine between the parameter gradients of the directional and the magnitude
    terms through a random two-layer backbone (12 views, 3 classes, 5 inputs, 4 features), on
    ``max(3, trials // 4)`` instances: the feature-space orthogonality of Eq. (20) need not hold
    in weight space.

    >>> len(parameter_gradient_cosines(np.random.default_rng(0), 4))
    3
    """
    check_int("trials", trials, low=1)
    param_cos = []
    for t in range(max(3, trials // 4)):
        B, C, p_in, d = 6, 3, 5, 4
        x = T(rng.normal(size=(2 * B, p_in)))
        y = torch.as_tensor(np.tile(rng.integers(0, C, size=B), 2))
        w1 = T(rng.normal(size=(8, p_in))).requires_grad_(True)
        w2 = T(rng.normal(size=(d, 8))).requires_grad_(True)
        hb = torch.tanh(x @ w1.T) @ w2.T  # final-layer features of a tiny backbone
        protos = unit(T(rng.normal(size=(C, d))))
        l_dir = directional_loss(unit(hb), y, protos, 0.5, 1.0, True)
        l_mag = magnitude_loss([hb], y, T(rng.normal(size=(1, C))), torch.ones(C, dtype=torch.bool), 1e-2, 1e-3)
        gd = torch.cat([x.flatten() for x in torch.autograd.grad(l_dir, [w1, w2], retain_graph=True)])
        gm = torch.cat([x.flatten() for x in torch.autograd.grad(l_mag, [w1, w2])])
        param_cos.append(float((gd @ gm).abs() / (gd.norm() * gm.norm())))
    return param_cos


def scatter_descent(rng: np.random.Generator, trials: int, steps: int = 20, lr: float = 0.5,
                    ascent: bool = False) -> np.ndarray:
    r"""The reason Section IV-A gives for CGRL's directional loss, "to promote within-class
    alignment and between-class separation", on random instances: a linear backbone
    :math:`h = W x` (3 Gaussian classes of 12 inputs in 6 dimensions, 4 features) takes ``steps``
    gradient steps of size ``lr`` on :math:`\mathcal L_{dir}` (Eq. (13): supervised contrastive
    plus prototype cross-entropy, :math:`\tau = 0.5`, :math:`\beta = 1`, the prototypes the unit
    class means at the start), and the within-class share of the final-layer directions
    :math:`u = \operatorname{unit}(h)` (:func:`fedlib.cgrl.within_class_share`) is measured before
    and after, on ``max(3, trials // 4)`` instances.

    ``ascent=True`` steps up the loss instead: the mutation the check must catch.

    Returns
    -------
    ndarray of shape (n_instances,)
        The change of the within-class share (after − before); negative where the loss tightened
        the classes.

    Examples
    --------
    >>> bool((scatter_descent(np.random.default_rng(0), 4, steps=3) < 0).all())
    True
    """
    check_int("trials", trials, low=1)
    check_int("steps", steps, low=1)
    changes = []
    for _ in range(max(3, trials // 4)):
        C, n, p, d = 3, 12, 6, 4
        y = np.repeat(np.arange(C), n)
        x = T(rng.normal(size=(C, p))[y] + rng.normal(size=(C * n, p)))  # (36, 6)
        yt = torch.as_tensor(y)
        w = T(rng.normal(size=(d, p)) / np.sqrt(p)).requires_grad_(True)  # (4, 6)

        def share() -> float:
            with torch.no_grad():
                return within_class_share(ClassMoments.from_features(unit(x @ w.T), yt, C))

        with torch.no_grad():
            u0 = unit(x @ w.T)
            protos = unit(torch.stack([u0[yt == c].mean(0) for c in range(C)]))  # (3, 4)
        before = share()
        for _ in range(steps):
            (g,) = torch.autograd.grad(directional_loss(unit(x @ w.T), yt, protos, 0.5, 1.0, True), w)
            with torch.no_grad():
                w += lr * g if ascent else -lr * g
        changes.append(share() - before)
    return np.array(changes)


def record_scatter(checks: CheckTable, changes: np.ndarray, steps: int = 20) -> dict:
    """The within-class scatter row of ``checks`` from :func:`scatter_descent` (no instance where
    descent on the directional loss failed to lower the within-class share of the directions); the
    numbers the prose quotes."""
    n_up = int((changes >= 0).sum())
    checks.add(r"descent on $L_{\mathrm{dir}}$ lowers the within-class share of the final-layer directions (Section IV-A's reason)",
               f"{len(changes)} random linear backbones, {steps} steps; instances where it did not", n_up, 0, kind="count")
    worst = float(np.max(changes) * 100)
    return {"fgd_scatter_instances": len(changes), "fgd_scatter_median": float(np.median(changes) * 100),
            "fgd_scatter_worst": worst, "fgd_scatter_extreme": scatter_extreme_text(worst)}


def scatter_extreme_text(worst: float) -> str:
    """The prose's reading of the largest change ``worst`` (points) of the within-class share over
    :func:`scatter_descent`'s instances, worded from its sign: below zero every instance lowered
    the share and ``worst`` is the smallest fall; above zero it is the largest rise.

    >>> scatter_extreme_text(-2.34)
    'every instance lowered it, the least by 2.3 points'
    >>> scatter_extreme_text(1.25)
    'the largest rise +1.2 points'
    >>> scatter_extreme_text(0.0)
    'at least one instance left it unchanged'
    """
    if worst < 0:
        return f"every instance lowered it, the least by {-worst:.1f} points"
    if worst > 0:
        return f"the largest rise {worst:+.1f} points"
    return "at least one instance left it unchanged"


def record_eq10(checks: CheckTable, symbolic: tuple[bool, sp.Expr], eq10: dict) -> dict:
    """Eq. (10)'s rows of ``checks`` (sympy, numerically, ``unit(0) = 0``) from
    :func:`radial_angular_symbolic` and :func:`radial_angular_split`; the numbers the prose quotes."""
    ok, residual = symbolic
    checks.add(r"Eq. (10): $\lVert h_i - h_j\rVert^2 = (R_i - R_j)^2 + 2 R_i R_j (1 - u_i^\top u_j)$", "sympy expansion (d = 3)",
               "symbolic difference 0" if ok else f"difference {residual}", ok=bool(ok))
    checks.add("Eq. (10) numerically, u = fedlib.cgrl.unit(h)",
               f"{eq10['pairs']} random pairs, norms 1e-3..1e3, error / (R_i^2 + R_j^2)", eq10["error"], 1e-12)
    checks.add("unit(0) = 0 (the paper's convention)", "fedlib.cgrl.unit on zero rows", eq10["unit_zero"], 0.0)
    return {"fgd_eq10_err": float(eq10["error"]), "fgd_eq10_pairs": int(eq10["pairs"])}


def record_lemma(checks: CheckTable, symbolic: sp.Expr, lemma: dict) -> dict:
    """Lemma IV.1's rows of ``checks`` from :func:`magnitude_lemma_symbolic` and
    :func:`magnitude_decomposition`; the numbers the prose quotes."""
    checks.add("Lemma IV.1 (Eq. (16)) under a batch's empirical distribution", "sympy, 5 views, gate (1,0,1,1,0)",
               "symbolic difference 0" if symbolic == 0 else f"difference {symbolic}", ok=bool(symbolic == 0))
    checks.add(r"fedlib.cgrl.magnitude_loss = mean over layers of $\sum_c (n_c/n)\, p_\chi\, [\mathrm{Var} + \mathrm{offset}^2]$",
               f"{lemma['batches']} random batches (1-3 layers, 1-4 classes, gates from r_min and flags)", lemma["error"], 1e-12)
    return {"fgd_lemma_err": float(lemma["error"]), "fgd_lemma_zero_p": int(lemma["zero_p"])}


def record_gradients(checks: CheckTable, grads: dict) -> dict:
    """Eq. (17)-(20)'s rows of ``checks`` from :func:`gradient_geometry`; the numbers the prose quotes."""
    n_views = grads["views"]
    checks.add(r"directional gradient is tangent: $h_i^\top g_i = 0$ (supcon + $\beta$ proto-CE)",
               f"autograd through fedlib.cgrl, {n_views} views, |h'g| / (|h||g|)", grads["tangent"], 1e-10)
    checks.add(r"squared norm changes at second order: $\lVert h - s g\rVert^2 = \lVert h\rVert^2 + s^2 \lVert g\rVert^2$",
               "3 step sizes per view, error / |h|^2", grads["second_order"], 1e-10)
    checks.add("Eq. (18b): closed-form prototype-CE gradient = autograd", "relative error per batch", grads["ce"], 1e-12)
    checks.add(r"Eq. (19): closed-form magnitude gradient = autograd ($\chi$, $a$ fixed)", "relative error per batch",
               grads["radial"], 1e-12)
    checks.add("magnitude gradient is radial (parallel to h)", "norm of the tangential part / |v|", grads["parallel"], 1e-12)
    checks.add(r"Eq. (20): $g_i^\top v_i = 0$ at the final layer", r"$|g^\top v| / (\lVert g\rVert\,\lVert v\rVert)$", grads["orthogonal"], 1e-10)
    checks.add("a small magnitude descent step contracts above the reference, expands below",
               f"{n_views} views, step 1e-4 |h|", grads["sign_violations"], 0, kind="count")
    return {"fgd_tang_err": float(grads["tangent"]), "fgd_ce_err": float(grads["ce"]), "fgd_rad_err": float(grads["radial"]),
            "fgd_orth_err": float(grads["orthogonal"]), "fgd_grad_views": int(n_views)}


def record_parameter_space(checks: CheckTable, cosines: Sequence[float]) -> dict:
    """The parameter-space caveat's row of ``checks`` (the median absolute cosine of
    :func:`parameter_gradient_cosines` is at least 1e-3); the number the prose quotes."""
    median = float(np.median(cosines))
    checks.add("parameter gradients of the two terms need NOT be orthogonal (the paper's caveat)",
               f"{len(cosines)} random 2-layer backbones, median |cos|", median, 1e-3, kind="at least")
    return {"fgd_param_cos": median}


def record_table(checks: CheckTable, trials: int, chapter: str) -> dict:
    """The closing numbers of a derivations chapter's check table: ``fgd_<chapter>_n_checks``,
    ``fgd_<chapter>_n_fail`` and ``fgd_trials`` (the random instances per numerical check).

    >>> checks = CheckTable()
    >>> checks.add("x = y", "one pair", 0.0, 1e-12)
    >>> record_table(checks, 6, "cgrl")
    {'fgd_cgrl_n_checks': 1, 'fgd_cgrl_n_fail': 0, 'fgd_trials': 6}
    """
    return {f"fgd_{chapter}_n_checks": len(checks), f"fgd_{chapter}_n_fail": checks.n_fail, "fgd_trials": int(trials)}


# ----------------------------------------------------------------------------------------------
# Statistics: the SASP objective by sympy, the support weights, a trained model
# ----------------------------------------------------------------------------------------------

def sasp_symbolic() -> dict:
    """Proposition IV.2 by sympy: the stationary point of :math:`J(m)` in one dimension for general
    :math:`n` (symbolic sums :math:`t` and :math:`S_2`) and in two dimensions with a symbolic
    symmetric :math:`A` and three symbolic samples, against :math:`(t + m_0\\mu)/(n + m_0)`.

    Returns
    -------
    dict
        ``ok_1d`` (the closed form, free of the metric's entry :math:`a`), ``solution_1d``,
        ``hessian_1d``; ``ok_2d`` (the closed form, free of every entry of :math:`A`),
        ``difference_2d`` (per coordinate) and ``metric_free_2d``.

    Examples
    --------
    >>> out = sasp_symbolic()
    >>> out["ok_1d"], out["ok_2d"], out["hessian_1d"]
    (True, True, 2*a*(m_0 + n))
    """
    m_, t_, mu_, a_ = sp.symbols("m t mu a", real=True)
    n_, m0_ = sp.symbols("n m_0", positive=True)
    J1 = a_ * (sp.Symbol("S2") - 2 * m_ * t_ + n_ * m_**2) + m0_ * a_ * (m_ - mu_) ** 2  # sum_i a (z_i - m)^2, S2 = sum z^2
    sol1 = sp.solve(sp.diff(J1, m_), m_)[0]
    ok_1d = sp.simplify(sol1 - (t_ + m0_ * mu_) / (n_ + m0_)) == 0 and a_ not in sol1.free_symbols
    hess_1d = sp.simplify(sp.diff(J1, m_, 2))
    A2 = sp.Matrix([[sp.Symbol("a11"), sp.Symbol("a12")], [sp.Symbol("a12"), sp.Symbol("a22")]])
    mvec = sp.Matrix(sp.symbols("m1 m2", real=True))
    muvec = sp.Matrix(sp.symbols("mu1 mu2", real=True))
    zs = [sp.Matrix(sp.symbols(f"z{i}1 z{i}2", real=True)) for i in range(3)]
    J2 = sum(((z - mvec).T * A2 * (z - mvec))[0] for z in zs) + m0_ * ((mvec - muvec).T * A2 * (mvec - muvec))[0]
    sol2 = {k: sp.simplify(v) for k, v in sp.solve([sp.diff(J2, v) for v in mvec], list(mvec), dict=True)[0].items()}
    closed2 = (zs[0] + zs[1] + zs[2] + m0_ * muvec) / (3 + m0_)
    diff2 = [sp.simplify(sol2[mvec[i]] - closed2[i]) for i in range(2)]
    a_free = not (set().union(*[sol2[v].free_symbols for v in mvec]) & A2.free_symbols)
    return dict(ok_1d=bool(ok_1d), solution_1d=sol1, hessian_1d=hess_1d, ok_2d=bool(all(x == 0 for x in diff2) and a_free),
                difference_2d=diff2, metric_free_2d=bool(a_free))


def support_increases(m0: float = 10.0, n_max: int = 200) -> int:
    """How often :math:`1 - \\alpha(n)` increases from :math:`n` to :math:`n + 1` over
    :math:`n = 0, \\dots, n_{\\max} - 1` (:func:`fedlib.heads.adaptation_weights` with ``m0``): 0,
    the shrinkage toward the shared mean decreases with the support.

    >>> support_increases()
    0
    """
    nn_ = np.arange(0, n_max)
    return int((np.diff(1 - adaptation_weights(torch.as_tensor(nn_, dtype=F64), m0).numpy()) > 0).sum())


def trained_cnn_stability(seed: int, n_samples: int | None, n_clients: int, alpha: float, global_test_per_class: int,
                          rounds: int, layers: Sequence[str] = ("conv1", "conv2", "penultimate")) -> dict:
    """Eq. (37)-(40) on a trained model's features: a small CNN trained with FedAvg (SGD, one epoch
    a round, batch 32, learning rate 0.01, momentum 0.9) for ``rounds`` rounds on MNIST-5k
    (``n_samples`` of it, seeded by ``seed``) split over ``n_clients`` Dirichlet(``alpha``) clients,
    frozen; MMS with fedlib's default ridge fitted on the clients' moments of the pooled ``layers``
    features and every client's SASP head (fedlib's default :math:`m_0`) compared with the shared
    head (:func:`stability_by_client`).

    Returns
    -------
    dict
        ``table`` and ``tally`` (:func:`stability_by_client`), ``n_clients``, ``rounds`` and
        ``dim`` (the concatenated features' dimension).
    """
    data = load_dataset("mnist5k", n_samples=n_samples, seed=seed)  # the smoke profile trains on a seeded subset
    fed = make_federation(data, n_clients=n_clients, partition="dirichlet", alpha=alpha, min_size=10,
                          global_test_per_class=global_test_per_class, seed=seed)
    model_fn = functools.partial(build_model, "cnn", in_channels=1, n_classes=data.n_classes, input_size=28)
    run = run_federated(FedAvg(train=TrainConfig(epochs=1, batch_size=32, lr=0.01, momentum=0.9)), fed, model_fn,
                        LoopConfig(rounds=rounds, seed=seed, evaluate_last=False))
    model = load_model(model_fn(), run.server).eval()
    layers = tuple(layers)
    layer_dims = [model.feature_dims[name] for name in layers]
    client_moments = [feature_moments(model, c.train.x, c.train.y, data.n_classes, layers=layers) for c in fed.clients]
    mms_cnn = MMS(gamma=DEFAULT_GAMMA).fit(client_moments, layer_dims)
    table, tally = stability_by_client(mms_cnn, client_moments, fed, model, layers, m0=DEFAULT_M0)
    return dict(table=table, tally=tally, n_clients=int(fed.n_clients), rounds=int(rounds), dim=int(sum(layer_dims)))


PERCENT = {"error shared": "error, shared head (%)", "error SASP": "error, SASP head (%)",
           "Pr(M0 <= B)": "Pr(M⁰ ≤ B) (%)", "bound": "bound (%)"}
"""The rate columns of :func:`stability_by_client`'s table and their names in percent."""


def stability_tables(table: pd.DataFrame) -> list:
    """:func:`stability_by_client`'s table as shown, rates in percent: on the global test set
    (:math:`R = Q`), then on each client's local test split (:math:`R = P^{(k)}`)."""
    shown = table.assign(**{c: 100 * table[c] for c in PERCENT}).rename(columns={**PERCENT, "changed": "changed predictions"})
    return [show_table(shown[shown["target"] == target].drop(columns="target"), digits=1, index=False).set_caption(caption)
            for target, caption in (("global (Q)", "On the global test set (R = Q)"),
                                    ("local (P_k)", "On each client's local test split (R = P_k)"))]


def moments_table(errs: dict[str, float]):
    """:func:`moments_against_centralized`'s worst errors as a table for the page."""
    table = pd.DataFrame({"quantity (moments vs centralized)": list(errs), "worst relative error": list(errs.values())})
    return show_table(table, formats={"worst relative error": ".1e"}, index=False)


def record_traces(checks: CheckTable, traces: dict, trials: int) -> dict:
    """Eq. (21) and Eq. (28)'s rows of ``checks`` from :func:`trace_identities`; the numbers the prose quotes."""
    checks.add(r"Eq. (21): $\operatorname{tr}\Sigma_{l,c} = \frac{1}{2N_c^2} \sum_{i,j} [(R_i-R_j)^2 + 2R_iR_j(1-\cos\theta_{ij})]$",
               f"{trials} random federations, ClassMoments vs explicit pairs, error / mean |h|^2", traces["eq21"], 1e-10)
    checks.add("Eq. (21): aligned directions leave a purely radial, nonzero trace", "10 collinear features of different norms",
               traces["aligned_radial"], 1e-12)
    checks.add(r"Eq. (28): $N \operatorname{tr}\Sigma_w = \sum_l s_l^{-2} \sum_c N_c \operatorname{tr}\Sigma_{l,c}$ (also in pairwise form)",
               "MMS fitted on client moments vs per-layer class traces, relative error", traces["eq28"], 1e-10)
    return {"fgd_eq21_err": float(traces["eq21"]), "fgd_eq28_err": float(traces["eq28"])}


def record_invariance(checks: CheckTable, inv: dict, trials: int) -> dict:
    """The layer-scaling invariance's rows of ``checks`` from :func:`layer_scaling_invariance`."""
    checks.add("layer scaling: norm ratios, log-norm variance, class log-norm mean differences unchanged",
               f"{trials} federations, factors 1e-3..1e3 per layer (numpy: the statement's arithmetic, no fedlib code; "
               "the rows below test fedlib's MMS)", inv["geometry"], 1e-9)
    checks.add(r"MMS is invariant to per-layer rescaling ($s_l$ scales; $z$, $\mu$, $\Sigma_w$, $A$ unchanged)",
               "MMS fitted before and after, relative error", inv["mms"], 1e-8)
    checks.add("... and so are its predictions", "same instances, changed predictions", inv["predictions"], 0, kind="count")
    return {"fgd_inv_mms": float(inv["mms"])}


def record_shift(checks: CheckTable, prop1: dict, trials: int) -> dict:
    """Proposition IV.1's row of ``checks`` from :func:`shift_decomposition`; with the median
    share of the between-client term."""
    checks.add(r"Prop. IV.1: $\Sigma_w = \frac{1}{N} \sum_k \sum_c n_c^k (\Sigma_c^k + \Delta\Delta^\top)$",
               f"{trials} random federations (2-5 clients), entrywise / " r"$\max|\Sigma_w|$", prop1["error"], 1e-10)
    return {"fgd_prop1_err": float(prop1["error"]), "fgd_between_share": float(np.median(prop1["between_share"]))}


def record_moments(checks: CheckTable, errs: dict[str, float], trials: int) -> dict:
    """Appendix A-E's rows of ``checks``, one per quantity of :func:`moments_against_centralized`."""
    for name, err in errs.items():
        checks.add(f"Appendix A-E: {name} from client moments = centralized", f"{trials} federations, 1-5 clients, 2-3 layers",
                   err, 1e-8)
    return {"fgd_ae_worst": float(max(errs.values()))}


def record_bounds(checks: CheckTable, bounds: dict, trials: int) -> dict:
    """Eq. (29)-(31)'s rows of ``checks`` from :func:`metric_bounds`."""
    checks.add(r"Eq. (31) identities: $\lVert A\rVert_2 = 1/(s_{\min} + \lambda)$, $\kappa = (s_{\max} + \lambda)/(s_{\min} + \lambda)$",
               f"{trials} random covariances ({bounds['n_singular']} singular), relative error", bounds["identities"], 1e-8)
    checks.add(r"$\lVert A\rVert_2 \le 1/\lambda_A$", "largest relative excess over the bound", bounds["op_bound"], 1e-9)
    checks.add(r"$\kappa(A) \le 1 + d/\gamma$, including singular covariances", "largest relative excess", bounds["kappa_bound"], 1e-9)
    checks.add("the condition bound is attained by a rank-one covariance",
               f"{trials} rank-one instances, |kappa/(1+d/gamma) - 1|", bounds["tight"], 1e-8)
    return {"fgd_op_exact": float(bounds["identities"]), "fgd_n_singular": int(bounds["n_singular"]),
            "fgd_kappa_tight": float(bounds["tight"])}


def record_sasp_symbolic(checks: CheckTable, symbolic: dict) -> dict:
    """Proposition IV.2's symbolic rows of ``checks`` from :func:`sasp_symbolic` (no number for the prose)."""
    checks.add(r"Prop. IV.2 in 1-d: $m^* = (t + m_0\mu)/(n + m_0)$, independent of $a$; $J'' = 2a(n + m_0) > 0$", "sympy, symbolic n, t",
               "symbolic difference 0" if symbolic["ok_1d"] else "the closed form differs", ok=symbolic["ok_1d"])
    checks.add(r"Prop. IV.2 in 2-d with a symbolic $A$: $m^* = (\sum z + m_0\mu)/(n + m_0)$, $A$ cancels", "sympy, 3 symbolic samples",
               "symbolic difference 0" if symbolic["ok_2d"] else "the closed form differs", ok=symbolic["ok_2d"])
    return {}


def record_sasp(checks: CheckTable, opt: dict, increases: int) -> dict:
    """Proposition IV.2's and Eq. (35)'s numerical rows of ``checks`` from :func:`sasp_minimizer`,
    and the support weights' (:func:`support_increases`)."""
    checks.add("Prop. IV.2: SASP mean = numerical minimizer of J (BFGS)",
               f"{opt['n_classes']} (client, class) instances, error / (1 + |m|)", opt["optimum"], 1e-6)
    checks.add("... the closed form's objective is never above the optimizer's", "same instances", opt["objective_worse"], 0,
               kind="count")
    checks.add("A cancels: the minimizer under a different random SPD metric is the same", "same instances", opt["cancel"], 1e-6)
    checks.add("n = 0: the SASP mean is the shared mean", f"{opt['n_absent']} locally absent (client, class) pairs",
               opt["absent"], 0.0)
    checks.add(r"Eq. (35): $\lVert\tilde\mu - \mu_{\mathrm{local}}\rVert_A = (1 - \alpha)\lVert\Delta\rVert_A$", "observed classes, error / (|Delta|_A + |mu_c|_A)",
               opt["eq35_local"], 1e-10)
    checks.add(r"departure $\lVert\tilde\mu - \mu\rVert_A = \alpha \lVert\Delta\rVert_A$", "observed classes, error / (|Delta|_A + |mu_c|_A)",
               opt["eq35_departure"], 1e-10)
    checks.add(r"$1 - \alpha(n)$ decreases with the support $n$", "n = 0..199, m0 = 10, increases counted", increases, 0, kind="count")
    return {"fgd_opt_err": float(opt["optimum"]), "fgd_cancel_err": float(opt["cancel"]),
            "fgd_opt_classes": int(opt["n_classes"]), "fgd_absent": int(opt["n_absent"])}


def record_bayes(checks: CheckTable, bayes: dict) -> dict:
    """Eq. (36)'s rows of ``checks`` from :func:`bayes_equivalence`."""
    n = bayes["n_queries"]
    checks.add(r"Eq. (36): $s_c(z) = -\frac12 \lVert z - \tilde\mu_c\rVert_A^2 + \frac12 z^\top A z$", f"{n} queries, error / (1 + z'Az)", bayes["scores"], 1e-10)
    checks.add("SASP head argmax = nearest personalized mean under A", f"{n} queries, disagreements",
               bayes["nearest_mean"], 0, kind="count")
    checks.add(r"SASP head argmax = equal-prior Gaussian Bayes rule $N(\tilde\mu_c, A^{-1})$",
               "scipy.stats.multivariate_normal, disagreements", bayes["gaussian"], 0, kind="count")
    return {"fgd_bayes_queries": int(n), "fgd_bayes_disagree": int(bayes["nearest_mean"] + bayes["gaussian"])}


def record_random_stability(checks: CheckTable, rand: StabilityTally, trials: int) -> dict:
    """Eq. (37)-(40)'s and the risk bounds' rows of ``checks`` from :func:`stability_on_random_federations`."""
    how = f"{trials} random federations, {rand.n} queries"
    checks.add(r"Eq. (37): $s_c - s_c^0 = \delta^\top A(z - \mu_c) - \frac12 \lVert\delta\rVert_A^2$ (also in $\alpha$, $\Delta$ form)",
               how + ", error / score scale", rand.eq37, 1e-10)
    checks.add("locally absent classes keep their scores", how, rand.absent_change, 1e-9)
    checks.add(r"Eq. (38): $|s_c - s_c^0| \le b_c(z)$ (Cauchy-Schwarz)", how + ", (query, class) violations", rand.budget_viol, 0,
               kind="count")
    checks.add(r"Eq. (40): $M^0 > B \Rightarrow$ unchanged prediction", how + ", certified but flipped", rand.certified_flipped, 0,
               kind="count")
    checks.add(r"pointwise: $\mathbb{1}\{f^k \ne y\} \le \mathbb{1}\{f^0 \ne y\} + \mathbb{1}\{M^0 \le B\}$", how, rand.pointwise, 0, kind="count")
    checks.add(r"risk bound $E(f^k) \le E(f^0) + \Pr(M^0 \le B)$", how + ", smallest slack (bound - risk)", rand.min_slack, 0.0,
               kind="at least")
    checks.add(r"class-wise bound $e_c^k \le e_c^0 + \Pr_{Q_c}(M^0 \le B)$", how + ", (instance, class) violations", rand.classwise, 0,
               kind="count")
    checks.add(r"SASP's budget $\le$ the local-mean ($\alpha = 1$) budget", how, rand.budget_larger, 0, kind="count")
    out = {f"fgd_rand_{key}": int(getattr(rand, key)) for key in ("n", "flipped", "certified", "certified_flipped", "budget_viol")}
    return out | {"fgd_rand_uncertified": int(rand.n - rand.certified), "fgd_rand_eq37": float(rand.eq37)}


def record_trained_cnn(checks: CheckTable, cnn: dict) -> dict:
    """The trained model's rows of ``checks`` from :func:`trained_cnn_stability`; the numbers the
    prose quotes (fedlib's default :math:`\\gamma` and :math:`m_0`, the model, its errors and the
    worst errors and counts over every client and target)."""
    worst, table = cnn["tally"], cnn["table"]
    how = f"FedAvg CNN, {cnn['n_clients']} clients x (global + local test), d = {cnn['dim']}"
    checks.add("trained CNN: Eq. (37) exact score change", how + ", error / score scale", worst.eq37, 1e-9)
    checks.add("trained CNN: locally absent classes keep their scores", how, worst.absent_change, 1e-8)
    checks.add("trained CNN: Eq. (38) budget", how + ", violations", worst.budget_viol, 0, kind="count")
    checks.add(r"trained CNN: Eq. (40) margin $>$ budget $\Rightarrow$ unchanged prediction", how + ", certified but changed",
               worst.certified_flipped, 0, kind="count")
    checks.add("trained CNN: pointwise and class-wise risk bounds", how + ", violations", worst.pointwise + worst.classwise, 0,
               kind="count")
    checks.add(r"trained CNN: $E_R(f^k) \le E_R(f^0) + \Pr_R(M^0 \le B)$ for $R = Q$ and $R = P_k$", how + ", smallest slack",
               worst.min_slack, 0.0, kind="at least")
    checks.add(r"trained CNN: SASP's budget $\le$ the local-mean budget", how, worst.budget_larger, 0, kind="count")
    g_tab = table[table["target"] == "global (Q)"]
    return {"fgd_gamma": float(DEFAULT_GAMMA), "fgd_m0": float(DEFAULT_M0), "fgd_cnn_clients": int(cnn["n_clients"]),
            "fgd_cnn_rounds": int(cnn["rounds"]), "fgd_cnn_dim": int(cnn["dim"]),
            "fgd_cnn_err0": float(100 * g_tab["error shared"].mean()), "fgd_cnn_errk": float(100 * g_tab["error SASP"].mean()),
            "fgd_cnn_uncert": float(100 * g_tab["Pr(M0 <= B)"].mean()), "fgd_cnn_changed": int(table["changed"].sum()),
            "fgd_cnn_cert_changed": int(worst.certified_flipped), "fgd_cnn_eq37": float(worst.eq37),
            "fgd_cnn_min_slack": float(100 * worst.min_slack)}


__all__ = ["record_scatter", "scatter_extreme_text", "scatter_descent", "MOMENT_QUANTITIES", "PERCENT", "bayes_equivalence", "centralized_mms", "gradient_geometry",
           "layer_scaling_invariance", "magnitude_decomposition", "magnitude_lemma_symbolic", "metric_bounds",
           "moments_against_centralized", "moments_table", "parameter_gradient_cosines", "radial_angular_split",
           "radial_angular_symbolic", "record_bayes", "record_bounds", "record_eq10", "record_gradients",
           "record_invariance", "record_lemma", "record_moments", "record_parameter_space", "record_random_stability",
           "record_sasp", "record_sasp_symbolic", "record_shift", "record_table", "record_traces", "record_trained_cnn",
           "sasp_minimizer", "sasp_symbolic", "shift_decomposition", "stability_by_client", "stability_on_random_federations",
           "stability_tables", "support_increases", "trace_identities", "trained_cnn_stability"]
