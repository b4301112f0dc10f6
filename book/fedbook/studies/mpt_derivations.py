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
* :func:`alpha_risk_table`: Eq. (7), the adaptive weight's risk and its moment identity by Monte Carlo;
* :func:`measurement_limit`: where the reconstruction goes as the remaining rare samples grow;
* :func:`known_drift_table`: every reconstruction under known drifts :math:`z \mapsto Az + b`.

The chapter records each check as rows of its check table (:class:`fedbook.checks.CheckTable`),
with the statement, how it was checked and the verdict's condition written here, and quotes the
numbers they return: :func:`kkt_check` and :func:`alpha_star_checks` (the symbolic derivations,
with sympy), :func:`barycentric_check`, :func:`residual_check`, :func:`transport_checks`,
:func:`projector_check`, :func:`alpha_risk_checks`, :func:`measurement_limit_check` and
:func:`drift_checks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.optimize
import sympy as sp
import torch

from fedbook.checks import CheckTable
from fedbook.tables import format_small
from fedlib.heads import regularized_covariance
from fedlib.rng import torch_generator
from fedlib.tracking import (
    TrackingConfig,
    adaptive_alpha,
    barycentric_decomposition,
    discrepancy_terms,
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

DRIFTS = ("translation", "isotropic scaling x1.5", "axis-aligned scaling", "symmetric positive definite map",
          "rotation", "remaining classes only (rare offset stays)")
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
        eye, Tn = np.eye(dim), T.numpy()
        cost = np.trace((eye - Tn) @ a_ @ (eye - Tn).T)  # fedlib's map's cost, against the closed-form W2
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
        (the mean squared errors), ``adaptive / best`` (the blend's over the smaller of the two
        pure estimates', which is floored at 1e-12), ``tau2`` (the prediction's true bias
        :math:`\tau^2 = \lVert\delta\rVert^2/d`), ``tau2 hat`` (the mean over the repetitions of the
        unclipped method-of-moments estimate :math:`D - \hat\sigma^2/N`,
        :func:`fedlib.tracking.discrepancy_terms`) and ``z`` (their difference in standard errors of
        that mean; 0 when the estimate does not vary).

    Raises
    ------
    ValueError
        ``dim`` or ``mc`` that is not an integer >= 1.

    Examples
    --------
    >>> t = alpha_risk_table(0, 4, 1000, n_samples=(1000,), biases=(1.0,))
    >>> list(t.columns), bool(t.loc[0, "adaptive / best"] < 1.1)
    (['N', 'bias tau', 'measured', 'predicted', 'adaptive', 'adaptive / best', 'tau2', 'tau2 hat', 'z'], True)
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
            tau2_hat = []
            for _ in range(max(20, mc // 200)):
                noise = torch.randn(n, dim, generator=rng_t, dtype=F64)
                r_ho = r_true + noise.mean(0)
                s2_hat = float(noise.var(0, unbiased=True).mean()) if n > 1 else 1.0
                r_pred = r_true + delta
                a_t = adaptive_alpha(r_ho, r_pred, s2_hat, n)
                blend = a_t * r_ho + (1 - a_t) * r_pred
                for k, est in {"measured": r_ho, "predicted": r_pred, "adaptive": blend}.items():
                    errs[k].append(float(((est - r_true) ** 2).mean()))
                D, noise_n = discrepancy_terms(r_ho, r_pred, s2_hat, n)
                tau2_hat.append(D - noise_n)
            se = float(np.std(tau2_hat, ddof=1) / np.sqrt(len(tau2_hat)))
            tau2 = float((delta**2).mean())
            rows.append({"N": n, "bias tau": bias, **{k: float(np.mean(v)) for k, v in errs.items()},
                         "tau2": tau2, "tau2 hat": float(np.mean(tau2_hat)),
                         "z": (float(np.mean(tau2_hat)) - tau2) / se if se > 0 else 0.0})
    table = pd.DataFrame(rows)
    better = table[["measured", "predicted"]].min(axis=1).clip(lower=1e-12)
    table.insert(5, "adaptive / best", table["adaptive"] / better)
    return table


def known_drift_table(seed: int, K: int, dim: int) -> pd.DataFrame:
    r"""Every reconstruction of :mod:`fedlib.tracking` under the known drifts :math:`z \mapsto Az + b`
    of :data:`DRIFTS`, with no rare sample remaining (MPT uses its prediction).

    The departure configuration: :math:`K` remaining prototypes (streams ``(seed, 10)``, times 2),
    the rare prototype (``(seed, 11)``, times 2) and an axis-aligned covariance (uniform in
    [0.2, 1.2) on the diagonal, stream ``(seed, 12)``), decomposed with
    ``TrackingConfig(ridge=0, reg=0)``. The drifts: a translation (``b`` from ``(seed, 14)``), an
    isotropic scaling by 1.5, an axis-aligned scaling (diagonal ``linspace(0.5, 2, dim)``), a
    symmetric positive definite map (:func:`random_spd` of ``(seed, 15)``, not diagonal) and a
    rotation (the Q factor of a draw from ``(seed, 13)``), under which every class moves together
    (:math:`M A^\top + b`, :math:`A\mu + b`, :math:`A\Sigma A^\top`); and the last drift, where
    the rare class's offset does **not** follow: the remaining classes and the covariance move by
    the symmetric positive definite map, the rare prototype keeps its departure-time residual,
    :math:`\mu_t = M_t^\top w_0 + r_0` (the assumption of Eq. (6) broken).

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
    spd = random_spd(seed, dim, 15)
    zero = torch.zeros(dim, dtype=F64)
    drifts = dict(zip(DRIFTS, [
        (torch.eye(dim, dtype=F64), random_normal(seed, (dim,), 14)),
        (1.5 * torch.eye(dim, dtype=F64), zero),
        (torch.diag(torch.linspace(0.5, 2.0, dim, dtype=F64)), zero),
        (spd, zero),
        (Qr, zero),
        (spd, zero),
    ]))
    rows = []
    for name, (A_, b_) in drifts.items():
        Mt, mut, St = M0 @ A_.T + b_, A_ @ mu0 + b_, A_ @ S0 @ A_.T
        if name == DRIFTS[-1]:  # the rare offset stays: only the remaining classes (and the covariance) move
            mut = Mt.T @ snap0.w0 + snap0.r0
        g = growth_factor(snap0.trace_d, float(torch.trace(St)))
        recs = [snap0.prototype, barycentric_prototype(snap0, Mt), stored_residual_prototype(snap0, Mt),
                reconstruct_lite(snap0, Mt, g), reconstruct_mpt(snap0, Mt, St, cfg=cfg0).prototype,
                Mt.T @ snap0.w0 + transport_map(snap0.cov_d, St) @ snap0.r0]
        rows.append({"drift": name, **{k: float((v - mut).norm() / mut.norm()) for k, v in zip(RECONSTRUCTIONS, recs)}})
    return pd.DataFrame(rows).set_index("drift")


# ----------------------------------------------------------------- the chapter's checks, recorded in its table
ALPHA_RISK_COLUMNS = {"N": "N (rare samples)", "bias tau": "bias τ", "measured": "MSE, measured",
                      "predicted": "MSE, predicted", "adaptive": "MSE, adaptive blend",
                      "adaptive / best": "adaptive / better of the two", "tau2": "τ²",
                      "tau2 hat": "mean of D − σ̂²/N", "z": "z (standard errors)"}
"""How the chapter's table names the columns of :func:`alpha_risk_table`."""
ALPHA_RISK_DIGITS = {"bias τ": 1, "MSE, measured": 4, "MSE, predicted": 4, "MSE, adaptive blend": 4,
                     "adaptive / better of the two": 2, "τ²": 4, "mean of D − σ̂²/N": 4, "z (standard errors)": 2}
"""The decimals of that table's columns."""


def kkt_check(checks: CheckTable) -> list:
    r"""Eq. (1) symbolically: sympy solves the Karush-Kuhn-Tucker system of
    :math:`\min_{\mathbf 1^\top w = 1} w^\top A w - 2b^\top w` for a symbolic symmetric 3 × 3
    :math:`A` and :math:`b`, compared with the closed form
    :math:`A^{-1}b + A^{-1}\mathbf 1 (1 - \mathbf 1^\top A^{-1}b) / (\mathbf 1^\top A^{-1}\mathbf 1)`;
    one row of ``checks``.

    Returns
    -------
    list of sympy expressions
        The solution minus the closed form, per weight (zeros).
    """
    k = 3
    a = sp.symbols("a0:6")
    A = sp.Matrix([[a[0], a[1], a[2]], [a[1], a[3], a[4]], [a[2], a[4], a[5]]])  # symmetric A
    b, w, nu = sp.Matrix(sp.symbols("b0:3")), sp.Matrix(sp.symbols("w0:3")), sp.Symbol("nu")
    one = sp.ones(k, 1)
    lagrangian = (w.T * A * w)[0] - 2 * (b.T * w)[0] + nu * ((one.T * w)[0] - 1)
    kkt = [sp.diff(lagrangian, wi) for wi in w] + [sp.diff(lagrangian, nu)]
    sol = sp.solve(kkt, list(w) + [nu], dict=True)[0]
    Ainv = A.inv()
    closed = Ainv * b + Ainv * one * (1 - (one.T * Ainv * b)[0]) / (one.T * Ainv * one)[0]
    diff = [sp.simplify(sol[w[i]] - closed[i]) for i in range(k)]
    ok = all(d == 0 for d in diff)
    checks.add("KKT solution of Eq. (1) equals the closed form", "sympy: solve the KKT system for a symbolic 3x3 A, b",
               "0 (symbolic)" if ok else str(diff), ok=ok)
    return diff


def barycentric_check(checks: CheckTable, seed: int, trials: int, K: int, dim: int) -> dict[str, float]:
    """:func:`barycentric_against_slsqp` as one row of ``checks``: the closed form is never worse
    than the solver (up to 1e-8) and sums to one (up to 1e-9).

    Returns
    -------
    dict of str to float
        ``bary_worst_obj``: the worst objective excess.
    """
    worst_obj, worst_sum = barycentric_against_slsqp(seed, trials, K, dim)
    checks.add("closed form is optimal (never worse than SciPy SLSQP) and sums to one",
               f"{trials} random instances, lambda in {{1e-3, 0.1, 1, 10}}",
               f"objective excess {format_small(worst_obj)}, |1'w - 1| {format_small(worst_sum)}",
               ok=worst_obj <= 1e-8 and worst_sum < 1e-9)
    return {"bary_worst_obj": float(worst_obj)}


def residual_check(checks: CheckTable, seed: int, trials: int, K: int, dim: int) -> dict[str, float]:
    """:func:`residual_off_span` as one row of ``checks``: with :math:`\\lambda = 0` the residual is
    orthogonal to the affine directions (up to 1e-8).

    Returns
    -------
    dict of str to float
        ``orth_linear_loss``: the largest part of the residual the linear span would discard.
    """
    worst_orth, worst_lin = residual_off_span(seed, trials, K, dim)
    checks.add(r"with $\lambda = 0$, $r_0$ is orthogonal to the affine directions ($P_{\mathrm{aff}} r_0 = r_0$)",
               f"{trials} random instances, relative error", format_small(worst_orth), ok=worst_orth < 1e-8)
    return {"orth_linear_loss": float(worst_lin)}


def transport_checks(checks: CheckTable, seed: int, trials: int, dim: int) -> dict[str, float]:
    """:func:`transport_map_against_scipy` as four rows of ``checks``: :math:`T_t` symmetric positive
    definite, its push-forward, SciPy's map, and the 2-Wasserstein cost no rotated push-forward beats.

    Returns
    -------
    dict of str to float
        What :func:`transport_map_against_scipy` measured.
    """
    ot = transport_map_against_scipy(seed, trials, dim)
    pairs = f"{trials} random SPD pairs"  # SPD: symmetric positive definite
    checks.add(r"$T_t$ is symmetric positive definite", pairs,
               f"asymmetry {format_small(ot['asymmetry'])}, min eigenvalue {ot['min_eigenvalue']:.3g}",
               ok=ot["asymmetry"] < 1e-10 and ot["min_eigenvalue"] > 0)
    checks.add(r"$T_t \Sigma_d T_t = \Sigma_t$", f"{pairs}, relative max error", format_small(ot['pushforward']),
               ok=ot["pushforward"] < 1e-8)
    checks.add(r"$T_t$ equals the Gaussian OT map computed with SciPy sqrtm", f"{pairs}, relative max error",
               format_small(ot['scipy']), ok=ot["scipy"] < 1e-6)
    checks.add(r"$T_t$ attains the 2-Wasserstein cost; no rotated push-forward is cheaper",
               f"{trials} pairs; a random orthogonal Q per pair",
               f"relative gap {format_small(ot['w2_gap'])}; {ot['n_cheaper']} cheaper maps",
               ok=ot["w2_gap"] < 1e-6 and ot["n_cheaper"] == 0)
    return ot


def projector_check(checks: CheckTable, seed: int, trials: int, K: int, dim: int) -> float:
    """:func:`projector_errors` as one row of ``checks`` (up to 1e-9); returns the worst error."""
    worst = projector_errors(seed, trials, K, dim)
    checks.add(r"$P_\perp$ is an orthogonal projector off the span (both spans, collinear cases included)",
               f"{trials} instances x 2 spans; every 5th collinear", format_small(worst), ok=worst < 1e-9)
    return worst


def alpha_star_checks(checks: CheckTable) -> dict[str, Any]:
    r"""Eq. (7)'s weight symbolically, as one row of ``checks``: sympy minimizes the blend's mean
    squared error :math:`\alpha^2\sigma^2/N + (1-\alpha)^2\tau^2`; the limits of its minimizer are
    returned for the prose, not checked (they follow from the formula: what the limit means for the
    prototype is :func:`measurement_limit_check`'s row).

    Returns
    -------
    dict
        ``alpha*`` (the minimizer, simplified: :math:`\tau^2/(\tau^2 + \sigma^2/N)`), ``N -> oo``
        and ``tau2 -> 0`` (its limits: 1 and 0).
    """
    al, s2, tau2, N = sp.symbols("alpha sigma2 tau2 N", positive=True)
    mse = al**2 * s2 / N + (1 - al) ** 2 * tau2
    alpha_star = sp.solve(sp.diff(mse, al), al)[0]
    ok = sp.simplify(alpha_star - tau2 / (tau2 + s2 / N)) == 0
    lim_N, lim_tau = sp.limit(alpha_star, N, sp.oo), sp.limit(alpha_star, tau2, 0)
    checks.add(r"$\alpha^* = \tau^2 / (\tau^2 + \sigma^2/N)$ minimizes the blend's MSE", r"sympy: $d\,\mathrm{MSE} / d\alpha = 0$",
               "0 (symbolic)" if ok else "differs", ok=ok)
    return {"alpha*": sp.simplify(alpha_star), "N -> oo": lim_N, "tau2 -> 0": lim_tau}


Z_MAX = 4.0
"""The moment identity's check (:func:`alpha_risk_checks`): every cell's ``|z|`` at most this many standard errors."""


def alpha_bias_text(worst_z: float, z_max: float = Z_MAX) -> str:
    """The moment identity's result in words (:func:`alpha_risk_checks`), worded from the largest
    ``|z|`` and the check's bound.

    Examples
    --------
    >>> alpha_bias_text(1.234)
    'The unclipped estimate agrees with τ² in every cell within the check’s 4 standard errors (the largest |z| is 1.23)'
    >>> alpha_bias_text(7.0)[:70]
    'The unclipped estimate misses τ² by more than the check’s 4 standard e'
    """
    if worst_z <= z_max:
        return (f"The unclipped estimate agrees with τ² in every cell within the check\u2019s {z_max:g} standard errors "
                f"(the largest |z| is {worst_z:.2f})")
    return (f"The unclipped estimate misses τ² by more than the check\u2019s {z_max:g} standard errors in at least one "
            f"cell (the largest |z| is {worst_z:.2f}): the moment identity fails here")


def alpha_risk_checks(checks: CheckTable, table: pd.DataFrame, z_max: float = Z_MAX) -> dict[str, float]:
    r"""Eq. (7)'s implementation (:func:`fedlib.tracking.adaptive_alpha`) at its limits and the
    Monte Carlo of :func:`alpha_risk_table` (``table``), as three rows of ``checks``: the weight's
    limits (0 with no rare sample, 0 when the residuals agree); with N >= 20 the blend within 10 %
    of the better pure estimate; and the moment identity the weight rests on, :math:`\mathbb E[D -
    \hat\sigma^2/N] = \tau^2` (the unclipped estimate of every cell within ``z_max`` standard
    errors of the true bias: a discrepancy or a noise term off by a factor, e.g. the noise not
    divided by :math:`N`, fails it). The row it replaces, "never worse than the worse pure
    estimate", could not fail: a convex blend's error is at most the larger one's in every draw.

    Returns
    -------
    dict of str to float
        ``alpha_worst_ratio`` (the blend's largest risk over the better pure estimate's, in the
        biased cells), ``alpha_large_n_ratio`` (the same with N >= 20) and ``alpha_worst_z`` (the
        largest ``|z|`` of the moment identity).
    """
    limits = [adaptive_alpha(torch.ones(4), torch.zeros(4), 1.0, 0) == 0.0,
              adaptive_alpha(torch.ones(4), torch.ones(4), 1.0, 10) < 1e-9]
    biased = table[table["bias tau"] > 0]
    worst_ratio = float(biased["adaptive / best"].max())
    large_n_ratio = float(biased.loc[biased["N"] >= 20, "adaptive / best"].max())
    worst_z = float(table["z"].abs().max())
    checks.add(r"implementation: $\alpha = 0$ with no rare sample and $\alpha \to 0$ when the residuals agree",
               "adaptive_alpha at N = 0 and at equal residuals", f"{2 - sum(limits)} of 2 fail", ok=all(limits))
    checks.add(r"with $N \ge 20$ the plug-in blend is within 10 % of the better pure estimate (or beats both)",
               "Monte Carlo, N in {20, 100, 1000} x bias in {0.3, 1}", f"worst risk ratio {large_n_ratio:.2f}",
               ok=large_n_ratio <= 1.1)
    checks.add(r"the moment identity behind Eq. (7): $E[D - \hat\sigma^2/N] = \tau^2$ (the unclipped estimate is unbiased)",
               f"Monte Carlo, every cell (N x bias), |mean - tau2| in standard errors, at most {z_max:g}",
               f"worst |z| {worst_z:.2f}", ok=worst_z <= z_max)
    return {"alpha_worst_ratio": worst_ratio, "alpha_large_n_ratio": large_n_ratio, "alpha_worst_z": worst_z}


def measurement_limit(seed: int, trials: int, K: int, dim: int) -> tuple[float, float]:
    r"""Where MPT's reconstruction goes as the remaining rare samples grow (:math:`\alpha_t \to 1`),
    on ``trials`` random instances (departure prototypes (K, dim) and rare prototype from the
    streams ``(seed, 16, i)`` and ``(seed, 17, i)``, the current ones ``(seed, 18, i)``, the rare
    samples' mean ``(seed, 19, i)``): :func:`fedlib.tracking.reconstruct_mpt` with
    :math:`N = 10^{12}` against :math:`M_t^\top w_0 + P^\perp_t(\bar h - M_t^\top w_0)`, the
    projector computed here with NumPy's SVD (not fedlib's).

    Returns
    -------
    (float, float)
        The worst relative error of the reconstruction against that limit (0 up to rounding), and
        the smallest relative distance of the limit from the rare samples' mean :math:`\bar h`,
        :math:`\lVert (I - P^\perp_t)(\bar h - M_t^\top w_0)\rVert / \lVert \bar h - M_t^\top w_0\rVert`
        (above 0: the in-span part of the measurement is never used, so MPT with every sample
        measured is not the samples' mean).

    Raises
    ------
    ValueError
        ``trials``, ``K`` or ``dim`` that is not an integer >= 1.

    Examples
    --------
    >>> err, gap = measurement_limit(0, 3, 4, 8)
    >>> err < 1e-8, gap > 0.1
    (True, True)
    """
    _sizes(trials, K, dim)
    worst_err, min_gap = 0.0, np.inf
    cfg = TrackingConfig()
    eye = torch.eye(dim, dtype=F64)
    for i in range(trials):
        Md, mu = random_normal(seed, (K, dim), 16, i), random_normal(seed, (dim,), 17, i)
        Mt = Md + 0.5 * random_normal(seed, (K, dim), 18, i)
        h_bar = random_normal(seed, (dim,), 19, i)
        snap = take_snapshot(mu, Md, eye, cfg)
        rec = reconstruct_mpt(snap, Mt, eye, 1e12, h_bar, eye, cfg).prototype
        B = (Mt - Mt.mean(0)).numpy()
        _, sv, Vh = np.linalg.svd(B, full_matrices=False)
        Q = Vh[sv > 1e-9 * sv.max()]
        bary = (Mt.T @ snap.w0).numpy()
        off = h_bar.numpy() - bary
        limit = bary + off - Q.T @ (Q @ off)
        worst_err = max(worst_err, float(np.linalg.norm(rec.numpy() - limit) / np.linalg.norm(limit)))
        min_gap = min(min_gap, float(np.linalg.norm(Q.T @ (Q @ off)) / np.linalg.norm(off)))
    return worst_err, float(min_gap)


def measurement_limit_check(checks: CheckTable, seed: int, trials: int, K: int, dim: int) -> dict[str, float]:
    r""":func:`measurement_limit` as one row of ``checks``: as :math:`N` grows the reconstruction
    tends to :math:`M_t^\top w_0 + P^\perp_t(\bar h - M_t^\top w_0)` (up to 1e-8) and stays away
    from the samples' mean (the in-span share above 1e-3). It replaces "alpha -> 1 as N -> oo",
    true but silent on where the prototype goes: not to :math:`\bar h`.

    Returns
    -------
    dict of str to float
        ``limit_err`` and ``limit_gap`` (:func:`measurement_limit`'s two numbers).
    """
    err, gap = measurement_limit(seed, trials, K, dim)
    checks.add(r"as $N$ grows ($\alpha \to 1$) MPT tends to $M_t^\top w_0 + P_\perp (\bar h - M_t^\top w_0)$: the measurement "
               r"corrects only the out-of-span part, so the limit is not the rare samples' mean $\bar h$",
               f"{trials} random instances, N = 1e12; the limit's projector from NumPy's SVD",
               f"relative error {format_small(err)}; smallest in-span share of h_bar - M_t'w0 {gap:.2f}",
               ok=err < 1e-8 and gap > 1e-3)
    return {"limit_err": err, "limit_gap": gap}


def drift_checks(checks: CheckTable, table: pd.DataFrame) -> dict[str, float]:
    """The known drifts of :func:`known_drift_table` (``table``) as four rows of ``checks``: the
    transport map moves the residual exactly when every class moves by one symmetric positive
    definite map (axis-aligned or not; without the projector); the assumption this rests on, that
    the rare class's offset follows the remaining classes' covariance, broken (a counterexample:
    then the transported residual errs; the stored residual's error is shown but not checked, since
    this drift defines the rare prototype as :math:`M_t^\top w_0 + r_0`); MPT-lite blind to a
    rotation; and the projector's blind spot (a counterexample). The row "translation and isotropic
    scaling are tracked exactly" is gone from the checks (it follows from the sum-to-one weights
    and says nothing of the covariance); the table still shows those drifts.

    Returns
    -------
    dict of str to float
        The relative errors the prose quotes: ``lite_rot`` and ``mpt_rot`` (rotation),
        ``lite_axis``, ``mpt_axis`` and ``noproj_axis`` (axis-aligned scaling: MPT-lite, MPT's
        prediction, MPT without the projector), ``noproj_spd`` (the symmetric positive definite
        map, without the projector), ``stay_stored`` and ``stay_transported`` (the rare offset
        stays: the stored residual's and the transported one's, without the projector).
    """
    stay = DRIFTS[-1]
    out = {"lite_rot": float(table.loc["rotation", "MPT-lite"]),
           "mpt_rot": float(table.loc["rotation", "MPT (prediction)"]),
           "lite_axis": float(table.loc["axis-aligned scaling", "MPT-lite"]),
           "mpt_axis": float(table.loc["axis-aligned scaling", "MPT (prediction)"]),
           "noproj_axis": float(table.loc["axis-aligned scaling", "MPT without the projector"]),
           "noproj_spd": float(table.loc["symmetric positive definite map", "MPT without the projector"]),
           "stay_stored": float(table.loc[stay, "bary + stored residual"]),
           "stay_transported": float(table.loc[stay, "MPT without the projector"])}
    exact = max(out["noproj_axis"], out["noproj_spd"])
    checks.add(r"$T_t r_0$ is the exactly moved residual when every class moves by one symmetric positive definite map $A$ "
               r"(then $T = A$, the unique OT map), axis-aligned or not", "known drifts: diagonal A and a random "
               "non-diagonal SPD A; error of M_t'w0 + T r0", format_small(exact), ok=exact < 1e-8)
    # The stored residual's error on this drift is shown, not checked: the drift defines the rare prototype as
    # M_t'w0 + r0, which is the stored-residual reconstruction itself, so its error is 0 by construction.
    checks.add("the transported residual assumes the rare offset follows the remaining classes' covariance: where it "
               "does not, T_t r_0 misses the rare prototype (counterexample)",
               "the remaining classes move by the SPD A, the rare prototype keeps M_t'w0 + r0",
               f"relative error of the transported residual {out['stay_transported']:.3f} (the stored residual's, "
               f"{format_small(out['stay_stored'])}, is shown, not checked: the drift defines the prototype by it)",
               ok=out["stay_transported"] > 1e-3)
    checks.add("MPT-lite's scalar cannot follow a rotation (counterexample)", "random rotation of the feature space",
               f"relative error {out['lite_rot']:.2f}", ok=out["lite_rot"] > 1e-3)
    checks.add(r"Eq. (4)'s projector discards the part of $T r_0$ that drifts into the new span (counterexample)",
               "axis-aligned drift, with P_perp", f"relative error {out['mpt_axis']:.3f} (lite {out['lite_axis']:.3f})",
               ok=out["mpt_axis"] > 1e-3)
    return out


__all__ = ["ALPHA_RISK_COLUMNS", "ALPHA_RISK_DIGITS", "DRIFTS", "LAMBDAS", "RECONSTRUCTIONS", "Z_MAX",
           "alpha_bias_text", "alpha_risk_checks", "alpha_risk_table", "alpha_star_checks",
           "barycentric_against_slsqp", "barycentric_check", "drift_checks", "kkt_check", "known_drift_table",
           "measurement_limit", "measurement_limit_check", "projector_check", "projector_errors", "random_normal",
           "random_spd", "residual_check", "residual_off_span", "transport_checks", "transport_map_against_scipy"]
