r"""The numerical checks of FedGRC's statistics on seeded random instances (the chapter *FedGRC's
statistics*, ``notebooks/fedgrc_statistics.py``).

From FedGRC (*Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive
Statistical Personalization for Federated Learning*), Section IV-B and IV-C and Appendix A-E to
A-H. Each function draws ``trials`` random federations (:mod:`fedlib.data.synthetic`) from the
stream ``rng``, compares what fedlib computes (:class:`fedlib.heads.MMS`, :class:`fedlib.heads.SASP`,
:class:`fedlib.stats.ClassMoments`) with an independent computation of the paper's statement,
and returns the worst error (or the count of counterexamples) of every comparison; the chapter
records each in its check table:

* :func:`trace_identities`: Eq. (21) and Eq. (28), the covariance trace from pairwise radial and
  angular distances (:func:`fedlib.cgrl.trace_from_pairs`);
* :func:`layer_scaling_invariance`: the raw geometry and MMS under a rescaling of every layer;
* :func:`shift_decomposition`: Proposition IV.1, within-client plus between-client covariance;
* :func:`moments_against_centralized`: Appendix A-E, MMS from client moments against
  :func:`centralized_mms` on the pooled features;
* :func:`metric_bounds`: Eq. (29)-(31), the spectrum of the metric and its condition bound;
* :func:`sasp_minimizer`: Proposition IV.2 and Eq. (35), SASP's means against a numerical minimizer;
* :func:`bayes_equivalence`: Eq. (36), the linear head, the nearest mean and the Gaussian Bayes rule;
* :func:`stability_on_random_federations` and :func:`stability_by_client`: Eq. (37)-(40) and the
  risk bounds (:mod:`fedlib.heads.stability`), on random features and on a trained model's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.optimize
import torch
from scipy.stats import multivariate_normal

from fedlib.cgrl import trace_from_pairs, unit
from fedlib.data.synthetic import random_layer_dims, random_multilayer_federation
from fedlib.federation import Federation
from fedlib.heads import DEFAULT_M0, MMS, SASP, scale_moments
from fedlib.heads.stability import StabilityTally, stability_summary, stability_terms
from fedlib.stats import ClassMoments
from fedlib.validation import check_int


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _moments(h, y, c: int) -> ClassMoments:
    return ClassMoments.from_features(_t(h), torch.as_tensor(np.asarray(y)), c)


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
            cov = ClassMoments.from_features(_t(hl), torch.as_tensor(y), C).class_covariances()  # 1/N_c, raw layer features
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
        direction = unit(_t(rng.normal(size=(1, dims[0])))).numpy()
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

        inv_mms = max(inv_mms, rel(m2.scales_, m1.scales_ * _t(factors)), rel(m2.transform(_t(h * f_rep)), m1.transform(_t(h))),
                      rel(m2.means_, m1.means_), rel(m2.covariance_, m1.covariance_), rel(m2.metric_, m1.metric_))
        inv_pred += int((m1.predict(_t(h)) != m2.predict(_t(h * f_rep))).sum())
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
        z = mms.transform(_t(ph)).numpy()
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
        z = mms.transform(_t(hq))
        scores = sasp.decision_function(_t(hq))
        d2 = sasp.squared_distances(_t(hq))
        za = torch.einsum("nd,de,ne->n", z, mms.metric_, z)
        bayes_err = max(bayes_err, float(((scores + 0.5 * d2 - 0.5 * za[:, None]).abs() / (1 + za[:, None])).max()))
        cov = np.linalg.inv(mms.metric_.numpy())
        loglik = np.stack([multivariate_normal(sasp.means_[c].numpy(), cov).logpdf(z.numpy()).reshape(-1) for c in range(C)], 1)
        pred = sasp.predict(_t(hq)).numpy()
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
        terms = stability_terms(mms, sasp, _t(hq))
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


__all__ = ["MOMENT_QUANTITIES", "bayes_equivalence", "centralized_mms", "layer_scaling_invariance", "metric_bounds",
           "moments_against_centralized", "sasp_minimizer", "shift_decomposition", "stability_by_client",
           "stability_on_random_federations", "trace_identities"]
