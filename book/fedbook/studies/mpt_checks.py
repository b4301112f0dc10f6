r"""The numerical checks of MPT's tracking maths on seeded random instances (the chapter *MPT: the
maths of tracking a departed class*, ``notebooks/mpt_derivations.py``).

MPT: Jang et al., "MPT: Missing Prototype Tracking via Barycentric Reconstruction in Vehicular
Federated Learning", arXiv:2609.12771, Section IV-C. Every random instance is drawn from its own
stream, ``torch_generator(seed, *keys)`` (:func:`fedlib.rng.torch_generator`), in double precision:
:func:`random_normal` and :func:`random_spd`, which the chapter and the property tests of
:mod:`fedlib.tracking` share. Each check compares what :mod:`fedlib.tracking` computes with an
independent computation of the paper's statement and returns the worst error (or the count of
counterexamples); the chapter records each in its check table:

* :func:`barycentric_against_slsqp`: Eq. (1)-(2), the closed form against SciPy's SLSQP solver;
* :func:`residual_off_span`: the residual of Eq. (2) with :math:`\lambda = 0` against the affine
  and the linear projector;
* :func:`transport_map_against_scipy`: Eq. (6), the transport map's symmetry, push-forward,
  SciPy reference and 2-Wasserstein cost;
* :func:`projector_errors`: the projector off the span (collinear prototypes included);
* :func:`alpha_risk_table`: Eq. (7), the adaptive weight's risk by Monte Carlo;
* :func:`known_drift_table`: every reconstruction under known drifts :math:`z \mapsto Az + b`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.optimize
import torch

from fedlib.heads import regularized_covariance
from fedlib.rng import torch_generator
from fedlib.tracking import (
    TrackingConfig,
    adaptive_alpha,
    barycentric_decomposition,
    barycentric_prototype,
    barycentric_weights,
    growth_factor,
    reconstruct_lite,
    reconstruct_mpt,
    span_projector,
    stored_residual_prototype,
    take_snapshot,
    transport_map,
)
from fedlib.validation import check_int

F64 = torch.float64

LAMBDAS = (1e-3, 0.1, 1.0, 10.0)
"""The ridge weights :func:`barycentric_against_slsqp` cycles through, one per instance."""

DRIFTS = ("translation", "isotropic scaling x1.5", "axis-aligned scaling", "rotation")
"""The known drifts of :func:`known_drift_table` (its rows)."""

RECONSTRUCTIONS = ("frozen", "barycentric", "bary + stored residual", "MPT-lite", "MPT (prediction)",
                   "MPT without the projector")
"""The reconstructions of :func:`known_drift_table` (its columns)."""


def random_normal(seed: int, shape: Sequence[int], *keys: int) -> torch.Tensor:
    """Standard normal draws of the given ``shape``, float64, from the stream ``(seed, *keys)``.

    Parameters
    ----------
    seed : int
        The run seed.
    shape : sequence of int
        The tensor's shape, e.g. ``(K, d)``.
    *keys : int
        Name the stream (:func:`fedlib.rng.torch_generator`): one per purpose and instance.

    Returns
    -------
    torch.Tensor
        Of shape ``shape`` and dtype float64.

    Examples
    --------
    >>> x = random_normal(0, (3, 2), 1, 5)
    >>> tuple(x.shape), x.dtype, bool((x == random_normal(0, (3, 2), 1, 5)).all())
    ((3, 2), torch.float64, True)
    """
    return torch.randn(*shape, generator=torch_generator(seed, *keys), dtype=F64)


def random_spd(seed: int, d: int, *keys: int) -> torch.Tensor:
    r"""A random symmetric positive definite (d, d) matrix :math:`AA^\top/d + 0.05 I`, with
    :math:`A` = :func:`random_normal` ``(seed, (d, d), *keys)``; its smallest eigenvalue is at
    least 0.05.

    Examples
    --------
    >>> S = random_spd(0, 4, 7)
    >>> bool(torch.allclose(S, S.T)), bool(torch.linalg.eigvalsh(S).min() >= 0.05)
    (True, True)
    """
    A = random_normal(seed, (d, d), *keys)
    return A @ A.T / d + 0.05 * torch.eye(d, dtype=F64)


def _sizes(trials: int, K: int, dim: int) -> None:
    check_int("trials", trials, low=1)
    check_int("K", K, low=1)
    check_int("dim", dim, low=1)


def barycentric_against_slsqp(seed: int, trials: int, K: int, dim: int) -> tuple[float, float]:
    r"""Eq. (1): the closed form (:func:`fedlib.tracking.barycentric_weights`) against SciPy's
    SLSQP solver of the constrained problem, on ``trials`` random instances (prototypes (K, dim)
    from the streams ``(seed, 1, i)``, the prototype from ``(seed, 2, i)``, :math:`\lambda` cycling
    through :data:`LAMBDAS`).

    Returns
    -------
    (float, float)
        The worst objective excess of the closed form over the solver's optimum, relative to
        ``max(1, |optimum|)`` (at most 0 up to rounding: the closed form is never worse), and the
        worst :math:`|\mathbf 1^\top w_0 - 1|`.

    Raises
    ------
    ValueError
        ``trials``, ``K`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> excess, off_one = barycentric_against_slsqp(0, 3, 4, 6)
    >>> excess <= 1e-8, off_one < 1e-9
    (True, True)
    """
    _sizes(trials, K, dim)
    worst_obj, worst_sum = 0.0, 0.0
    for i in range(trials):
        M = random_normal(seed, (K, dim), 1, i)
        mu = random_normal(seed, (dim,), 2, i)
        lam = LAMBDAS[i % len(LAMBDAS)]
        w = barycentric_weights(mu, M, lam).numpy()
        Mn, mun = M.numpy(), mu.numpy()

        def obj(v, Mn=Mn, mun=mun, lam=lam):
            return float(np.sum((mun - Mn.T @ v) ** 2) + lam * np.sum(v**2))

        sums_to_one = {"type": "eq", "fun": lambda v: v.sum() - 1}
        res = scipy.optimize.minimize(obj, np.ones(K) / K, method="SLSQP", constraints=[sums_to_one],
                                      options={"ftol": 1e-14, "maxiter": 1000})
        worst_obj = max(worst_obj, (obj(w) - res.fun) / max(1.0, abs(res.fun)))
        worst_sum = max(worst_sum, abs(w.sum() - 1))
    return float(worst_obj), float(worst_sum)


def residual_off_span(seed: int, trials: int, K: int, dim: int) -> tuple[float, float]:
    r"""The residual :math:`r_0` of Eq. (2) with :math:`\lambda = 0` under the projector off the
    affine and off the linear span (:func:`fedlib.tracking.span_projector`), on ``trials`` random
    instances (streams ``(seed, 3, i)`` and ``(seed, 4, i)``).

    Returns
    -------
    (float, float)
        The worst :math:`\lVert P^\perp r_0 - r_0\rVert / \lVert r_0\rVert` for the affine span (0 up
        to rounding: :math:`r_0` is orthogonal to the affine directions) and for the linear span
        (the part of :math:`r_0` the linear span would discard).

    Raises
    ------
    ValueError
        ``trials``, ``K`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> affine, linear = residual_off_span(0, 3, 3, 8)
    >>> affine < 1e-8, linear > 1e-3
    (True, True)
    """
    _sizes(trials, K, dim)
    worst_orth, worst_lin = 0.0, 0.0
    for i in range(trials):
        M = random_normal(seed, (K, dim), 3, i)
        mu = random_normal(seed, (dim,), 4, i)
        _, r0 = barycentric_decomposition(mu, M, 0.0)
        kept_off = {span: float((span_projector(M, span) @ r0 - r0).norm() / r0.norm()) for span in ("affine", "linear")}
        worst_orth = max(worst_orth, kept_off["affine"])
        worst_lin = max(worst_lin, kept_off["linear"])
    return worst_orth, worst_lin


def transport_map_against_scipy(seed: int, trials: int, dim: int) -> dict[str, float]:
    r"""Eq. (6) on ``trials`` random pairs of regularized SPD covariances :math:`\tilde\Sigma_d,
    \tilde\Sigma_t` (:func:`random_spd`, streams ``(seed, 5, i)`` and ``(seed, 6, i)``,
    :func:`fedlib.heads.regularized_covariance` with 0.1): :math:`T` =
    :func:`fedlib.tracking.transport_map` against its definition computed with SciPy's ``sqrtm``,
    and its transport cost against the 2-Wasserstein distance and against a rotated push-forward
    :math:`\Sigma_t^{1/2}Q\Sigma_d^{-1/2}` (a random orthogonal :math:`Q` per pair, from
    ``numpy.random.default_rng(seed + i)``).

    Returns
    -------
    dict of str to float
        ``asymmetry`` (worst :math:`\max|T - T^\top|`), ``min_eigenvalue`` (smallest eigenvalue of
        any :math:`T`), ``pushforward`` (worst :math:`\max|T\Sigma_dT - \Sigma_t| / \max|\Sigma_t|`),
        ``scipy`` (worst relative max difference from SciPy's map), ``w2_gap`` (worst relative gap
        between :math:`T`'s cost and the squared 2-Wasserstein distance) and ``n_cheaper`` (the
        pairs where the rotated push-forward is cheaper: 0).

    Raises
    ------
    ValueError
        ``trials`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> out = transport_map_against_scipy(0, 2, 4)
    >>> out["asymmetry"] < 1e-10, out["min_eigenvalue"] > 0, out["w2_gap"] < 1e-6, out["n_cheaper"]
    (True, True, True, 0)
    """
    check_int("trials", trials, low=1)
    check_int("dim", dim, low=1)
    worst_sym = worst_push = worst_ref = worst_w2 = 0.0
    n_beaten, min_eig = 0, np.inf
    for i in range(trials):
        Sd = regularized_covariance(random_spd(seed, dim, 5, i), 0.1)
        St = regularized_covariance(random_spd(seed, dim, 6, i), 0.1)
        T = transport_map(Sd, St)
        worst_sym = max(worst_sym, float((T - T.T).abs().max()))
        min_eig = min(min_eig, float(torch.linalg.eigvalsh(T).min()))
        worst_push = max(worst_push, float((T @ Sd @ T - St).abs().max() / St.abs().max()))
        a_, b_ = Sd.numpy(), St.numpy()
        ah = np.real(scipy.linalg.sqrtm(a_))
        middle = np.real(scipy.linalg.sqrtm(ah @ b_ @ ah))
        ref = np.linalg.inv(ah) @ middle @ np.linalg.inv(ah)
        worst_ref = max(worst_ref, float(np.abs(T.numpy() - ref).max() / np.abs(ref).max()))
        eye = np.eye(dim)
        cost = np.trace((eye - ref) @ a_ @ (eye - ref).T)
        w2 = np.trace(a_) + np.trace(b_) - 2 * np.trace(middle)
        worst_w2 = max(worst_w2, abs(cost - w2) / w2)
        Q, _ = np.linalg.qr(np.random.default_rng(seed + i).normal(size=(dim, dim)))
        other = np.real(scipy.linalg.sqrtm(b_)) @ Q @ np.linalg.inv(ah)
        n_beaten += int(np.trace((eye - other) @ a_ @ (eye - other).T) < cost - 1e-9 * w2)
    return {"asymmetry": worst_sym, "min_eigenvalue": min_eig, "pushforward": worst_push, "scipy": worst_ref,
            "w2_gap": float(worst_w2), "n_cheaper": n_beaten}


def projector_errors(seed: int, trials: int, K: int, dim: int) -> float:
    r"""The projector off the span (:func:`fedlib.tracking.span_projector`), both spans, on
    ``trials`` random prototype sets (K, dim) (stream ``(seed, 7, i)``; every fifth set collinear,
    multiples of one draw of stream ``(seed, 8, i)``).

    Returns
    -------
    float
        The worst of :math:`\max|P - P^\top|`, :math:`\max|P^2 - P|` and
        :math:`\max|BP| / \max(1, \max|B|)`, with :math:`B` the centred prototypes (affine span) or
        the prototypes (linear span): 0 up to rounding.

    Raises
    ------
    ValueError
        ``trials``, ``K`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> projector_errors(0, 5, 3, 6) < 1e-9
    True
    """
    _sizes(trials, K, dim)
    worst_proj = 0.0
    for i in range(trials):
        M = random_normal(seed, (K, dim), 7, i)
        if i % 5 == 0:  # collinear prototypes
            M = torch.linspace(-1, 1, K, dtype=F64)[:, None] * random_normal(seed, (1, dim), 8, i)
        for span in ("affine", "linear"):
            Pp = span_projector(M, span)
            B = M - M.mean(0) if span == "affine" else M
            worst_proj = max(worst_proj, float((Pp - Pp.T).abs().max()), float((Pp @ Pp - Pp).abs().max()),
                             float((B @ Pp).abs().max() / max(1.0, float(B.abs().max()))))
    return worst_proj


def alpha_risk_table(seed: int, dim: int, mc: int, *, n_samples: Sequence[int] = (1, 2, 5, 20, 100, 1000),
                     biases: Sequence[float] = (0.0, 0.3, 1.0)) -> pd.DataFrame:
    r"""Eq. (7) by Monte Carlo: the mean squared error per coordinate of the measured residual
    :math:`\hat r_{ho} = r + \bar\varepsilon` (the mean of :math:`N` standard normal noise
    vectors), of the predicted one :math:`\hat r_{pred} = r + \delta` (a fixed bias of size
    ``bias`` per coordinate) and of their blend with :func:`fedlib.tracking.adaptive_alpha`
    (the noise variance estimated from the :math:`N` draws, 1 when :math:`N = 1`).

    Every draw comes from one stream, ``torch_generator(seed, 9)``: the true residual (dim,), then
    per cell the bias direction and ``max(20, mc // 200)`` repetitions.

    Parameters
    ----------
    seed : int
        The run seed.
    dim : int
        The residual's dimension.
    mc : int
        The Monte-Carlo budget: ``max(20, mc // 200)`` repetitions per cell.
    n_samples, biases : sequence
        The cells: every :math:`N` with every bias.

    Returns
    -------
    pandas.DataFrame
        One row per cell, columns ``N``, ``bias tau``, ``measured``, ``predicted``, ``adaptive``
        (the mean squared errors) and ``adaptive / best`` (the blend's over the smaller of the two
        pure estimates', which is floored at 1e-12).

    Raises
    ------
    ValueError
        ``dim`` or ``mc`` that is not an integer >= 1.

    Examples
    --------
    >>> t = alpha_risk_table(0, 4, 1000, n_samples=(1000,), biases=(1.0,))
    >>> list(t.columns), bool(t.loc[0, "adaptive / best"] < 1.1)
    (['N', 'bias tau', 'measured', 'predicted', 'adaptive', 'adaptive / best'], True)
    """
    check_int("dim", dim, low=1)
    check_int("mc", mc, low=1)
    rng_t = torch_generator(seed, 9)
    r_true = torch.randn(dim, generator=rng_t, dtype=F64)
    rows = []
    for n in n_samples:
        for bias in biases:
            errs = {"measured": [], "predicted": [], "adaptive": []}
            delta = bias * torch.randn(dim, generator=rng_t, dtype=F64)
            for _ in range(max(20, mc // 200)):
                noise = torch.randn(n, dim, generator=rng_t, dtype=F64)
                r_ho = r_true + noise.mean(0)
                s2_hat = float(noise.var(0, unbiased=True).mean()) if n > 1 else 1.0
                r_pred = r_true + delta
                a_t = adaptive_alpha(r_ho, r_pred, s2_hat, n)
                blend = a_t * r_ho + (1 - a_t) * r_pred
                for k, est in {"measured": r_ho, "predicted": r_pred, "adaptive": blend}.items():
                    errs[k].append(float(((est - r_true) ** 2).mean()))
            rows.append({"N": n, "bias tau": bias, **{k: float(np.mean(v)) for k, v in errs.items()}})
    table = pd.DataFrame(rows)
    better = table[["measured", "predicted"]].min(axis=1).clip(lower=1e-12)
    table["adaptive / best"] = table["adaptive"] / better
    return table


def known_drift_table(seed: int, K: int, dim: int) -> pd.DataFrame:
    r"""Every reconstruction of :mod:`fedlib.tracking` under the known drifts :math:`z \mapsto Az + b`
    of :data:`DRIFTS`, with no rare sample remaining (MPT uses its prediction).

    The departure configuration: :math:`K` remaining prototypes (streams ``(seed, 10)``, times 2),
    the rare prototype (``(seed, 11)``, times 2) and an axis-aligned covariance (uniform in
    [0.2, 1.2) on the diagonal, stream ``(seed, 12)``), decomposed with
    ``TrackingConfig(ridge=0, reg=0)``. The drifts: a translation (``b`` from ``(seed, 14)``), an
    isotropic scaling by 1.5, an axis-aligned scaling (diagonal ``linspace(0.5, 2, dim)``) and a
    rotation (the Q factor of a draw from ``(seed, 13)``); the prototypes and the covariance move
    together (:math:`M A^\top + b`, :math:`A\mu + b`, :math:`A\Sigma A^\top`).

    Returns
    -------
    pandas.DataFrame
        Index ``drift`` (:data:`DRIFTS`), one column per reconstruction (:data:`RECONSTRUCTIONS`):
        the relative error :math:`\lVert\hat\mu - \mu_t\rVert / \lVert\mu_t\rVert` (0 is exact).

    Raises
    ------
    ValueError
        ``K`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> t = known_drift_table(0, 3, 6)
    >>> bool(t.loc["translation", "MPT (prediction)"] < 1e-8), bool(t.loc["rotation", "MPT-lite"] > 1e-3)
    (True, True)
    """
    _sizes(1, K, dim)  # one configuration
    M0 = random_normal(seed, (K, dim), 10) * 2
    mu0 = random_normal(seed, (dim,), 11) * 2
    S0 = torch.diag(torch.rand(dim, generator=torch_generator(seed, 12), dtype=F64) + 0.2)  # axis-aligned
    cfg0 = TrackingConfig(ridge=0.0, reg=0.0)
    snap0 = take_snapshot(mu0, M0, S0, cfg0)
    Qr, _ = torch.linalg.qr(random_normal(seed, (dim, dim), 13))
    drifts = dict(zip(DRIFTS, [
        (torch.eye(dim, dtype=F64), random_normal(seed, (dim,), 14)),
        (1.5 * torch.eye(dim, dtype=F64), torch.zeros(dim, dtype=F64)),
        (torch.diag(torch.linspace(0.5, 2.0, dim, dtype=F64)), torch.zeros(dim, dtype=F64)),
        (Qr, torch.zeros(dim, dtype=F64)),
    ]))
    rows = []
    for name, (A_, b_) in drifts.items():
        Mt, mut, St = M0 @ A_.T + b_, A_ @ mu0 + b_, A_ @ S0 @ A_.T
        g = growth_factor(snap0.trace_d, float(torch.trace(St)))
        recs = [snap0.prototype, barycentric_prototype(snap0, Mt), stored_residual_prototype(snap0, Mt),
                reconstruct_lite(snap0, Mt, g), reconstruct_mpt(snap0, Mt, St, cfg=cfg0).prototype,
                Mt.T @ snap0.w0 + transport_map(snap0.cov_d, St) @ snap0.r0]
        rows.append({"drift": name, **{k: float((v - mut).norm() / mut.norm()) for k, v in zip(RECONSTRUCTIONS, recs)}})
    return pd.DataFrame(rows).set_index("drift")


__all__ = ["DRIFTS", "LAMBDAS", "RECONSTRUCTIONS", "alpha_risk_table", "barycentric_against_slsqp", "known_drift_table",
           "projector_errors", "random_normal", "random_spd", "residual_off_span", "transport_map_against_scipy"]
