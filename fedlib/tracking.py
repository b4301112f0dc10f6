r"""Tracking a departed client's rare-class prototype (MPT) and the drift-compensation baselines.

MPT: Jang et al., "MPT: Missing Prototype Tracking via Barycentric Reconstruction in Vehicular
Federated Learning", arXiv:2609.12771, Section IV. A client holding almost every sample of a rare
class :math:`c` leaves at round :math:`t_d`; the backbone keeps changing; the server must keep a
prototype :math:`\hat\mu_c(t)` aligned with the current feature space from class-level statistics
only. With :math:`M_t \in \mathbb{R}^{K\times d}` the current prototypes of the :math:`K`
remaining classes:

* departure-time decomposition, Eq. (1)-(2): :func:`barycentric_weights`,
  :func:`barycentric_decomposition` (closed form of the sum-to-one ridge problem);
* regularized covariances, Eq. (3): :func:`fedlib.heads.regularized_covariance`;
* transport map, Eq. (6): :func:`transport_map`
  :math:`T_t = \tilde\Sigma_d^{-1/2}(\tilde\Sigma_d^{1/2}\tilde\Sigma_t\tilde\Sigma_d^{1/2})^{1/2}\tilde\Sigma_d^{-1/2}`;
* the projector off the span of the remaining prototypes: :func:`span_projector`;
* measured residual, Eq. (5): :func:`measured_residual`; adaptive weight, Eq. (7):
  :func:`adaptive_alpha` (its two terms :func:`discrepancy_terms`); the reconstruction, Eq. (4): :func:`reconstruct_mpt`;
* MPT-lite (the paper names it only): :func:`growth_factor`, :func:`reconstruct_lite`;
* the diagnostic of Eq. (6)'s assumption (the residual transported, no projector):
  :func:`transported_prototype`;
* baselines: frozen, iCaRL nearest-mean (:func:`icarl_prototype`), SDC (:func:`sdc_client_sums`,
  :func:`sdc_step`), LDC (:func:`ldc_fit_map`, its Adam steps :func:`ldc_steps_per_round`,
  :func:`ldc_step`); CCVR's calibration is a head
  (:func:`fedlib.heads.ccvr_calibrate`).

Choices the paper leaves open (each a parameter of :class:`TrackingConfig`):

* **Which span.** ``span="affine"`` (default): :math:`P^\perp_t` projects off the *directions* of
  the affine hull, :math:`\operatorname{span}\{m_k - \bar m\}`. The sum-to-one constraint makes
  the decomposition affine; the KKT conditions of Eq. (1) with :math:`\lambda=0` give
  :math:`r_0 \perp (m_k - m_j)`, so :math:`P^\perp_{t_d} r_0 = r_0` and at :math:`t = t_d` the
  reconstruction returns the departure prototype exactly. With the linear span
  (``span="linear"``) the part of :math:`r_0` along :math:`\bar m` would be discarded.
* **Measured residual.** Eq. (5) writes :math:`P^\perp_t\,\mathbb{E}[h]`. For the linear span
  :math:`P^\perp_t M_t^\top w_0 = 0`, so this equals :math:`P^\perp_t(\mathbb{E}[h] - M_t^\top w_0)`;
  we use the latter form, which is also right for the affine span.
* **Noise estimate.** :math:`\hat\sigma^2_t = \operatorname{tr}(P^\perp_t \hat\Sigma_{c} P^\perp_t)/d`
  from the remaining rare samples' covariance (unbiased, needs :math:`N_t \ge 2`; with fewer the
  pooled within-class covariance of the remaining classes is used), so that
  :math:`\mathbb{E}[D_t] = \tau^2 + \hat\sigma^2_t/N_t` term by term (method of moments).
* **Ridge scale.** :math:`\lambda = ` ``ridge`` :math:`\cdot\operatorname{tr}(M_d M_d^\top)/K`, so
  the default is free of the feature scale.

Every function returns finite values for finite input: no remaining rare samples gives
:math:`\alpha_t = 0` (the prediction), a singular covariance is regularized (or pseudo-inverted),
collinear prototypes are handled by the ridge (or the minimum-norm KKT solution when
:math:`\lambda = 0`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

from .heads import regularized_covariance
from .training import PlainOptimizer, TrainConfig, minibatches
from .validation import check_int

SPANS = ("affine", "linear")
NOISE = ("rare", "pooled")
METRICS = ("euclidean", "whitened")

F64 = torch.float64


def _t(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=F64)


def _check_protos(M: torch.Tensor, name: str = "M") -> torch.Tensor:
    M = _t(M)
    if M.ndim != 2 or M.shape[0] < 1:
        raise ValueError(f"{name} must have shape (K, d) with K >= 1 remaining classes, got {tuple(M.shape)}")
    if not bool(torch.isfinite(M).all()):
        raise ValueError(f"{name} holds a non-finite prototype (a remaining class with no samples?)")
    return M


# --------------------------------------------------------------------- Eq. (1)-(2)
def barycentric_weights(mu: torch.Tensor, M: torch.Tensor, lam: float = 0.0) -> torch.Tensor:
    r"""Affine (sum-to-one) ridge weights :math:`w_0` of ``mu`` (d,) on the rows of ``M`` (K, d).

    .. math:: w_0 = \arg\min_{\mathbf 1^\top w = 1} \lVert \mu - M^\top w\rVert^2 + \lambda\lVert w\rVert^2
              = A^{-1}b + A^{-1}\mathbf 1\,\frac{1 - \mathbf 1^\top A^{-1} b}{\mathbf 1^\top A^{-1}\mathbf 1},
              \quad A = MM^\top + \lambda I,\ b = M\mu .

    For ``lam > 0`` :math:`A` is positive definite and the closed form is used; for ``lam = 0``
    the KKT system is solved in the least-squares sense (minimum-norm weights when the
    prototypes are affinely dependent, e.g. collinear).

    >>> barycentric_weights(torch.tensor([1.0, 1.0]), torch.tensor([[0.0, 0.0], [2.0, 0.0]])).round(decimals=6).tolist()
    [0.5, 0.5]
    """
    M = _check_protos(M)
    mu = _t(mu)
    if mu.shape != (M.shape[1],):
        raise ValueError(f"mu must have shape ({M.shape[1]},), got {tuple(mu.shape)}")
    if not bool(torch.isfinite(mu).all()):
        raise ValueError("mu (the rare-class prototype at departure) is not finite: the rare class was never observed")
    if not (lam >= 0 and lam == lam and lam != float("inf")):
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    K = M.shape[0]
    A = M @ M.T + lam * torch.eye(K, dtype=F64)
    b = M @ mu
    one = torch.ones(K, dtype=F64)
    if lam > 0:
        Ab = torch.linalg.solve(A, b)
        A1 = torch.linalg.solve(A, one)
        return Ab + A1 * (1.0 - Ab.sum()) / A1.sum()
    kkt = torch.zeros(K + 1, K + 1, dtype=F64)
    kkt[:K, :K] = A
    kkt[:K, K] = 1.0
    kkt[K, :K] = 1.0
    rhs = torch.cat([b, torch.ones(1, dtype=F64)])
    return (torch.linalg.pinv(kkt, hermitian=True) @ rhs)[:K]


def barycentric_decomposition(mu: torch.Tensor, M: torch.Tensor, lam: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(w0, r0)``: Eq. (1) and the residual :math:`r_0 = \mu - M^\top w_0` (Eq. (2))."""
    w = barycentric_weights(mu, M, lam)
    return w, _t(mu) - _t(M).T @ w


# --------------------------------------------------------------------- Eq. (6)
def _eig_psd(S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    S = _t(S)
    evals, evecs = torch.linalg.eigh(0.5 * (S + S.T))
    return torch.clamp(evals, min=0.0), evecs


def sqrtm_psd(S: torch.Tensor) -> torch.Tensor:
    """Symmetric square root of a PSD matrix (negative round-off eigenvalues clipped to 0)."""
    e, V = _eig_psd(S)
    return (V * e.sqrt()) @ V.T


def inv_sqrtm_pd(S: torch.Tensor) -> torch.Tensor:
    """Inverse symmetric square root of a positive definite matrix."""
    e, V = _eig_psd(S)
    if float(e.min()) <= 0:
        raise ValueError("matrix is singular: regularize it first (fedlib.heads.regularized_covariance)")
    return (V / e.sqrt()) @ V.T


def transport_map(cov_d: torch.Tensor, cov_t: torch.Tensor, *, half: torch.Tensor | None = None,
                  ihalf: torch.Tensor | None = None) -> torch.Tensor:
    r"""The optimal-transport (Bures-Wasserstein) map from :math:`N(0,\Sigma_d)` to :math:`N(0,\Sigma_t)`.

    .. math:: T = \Sigma_d^{-1/2}\,(\Sigma_d^{1/2}\Sigma_t\Sigma_d^{1/2})^{1/2}\,\Sigma_d^{-1/2}

    ``cov_d`` must be positive definite (pass regularized covariances); the result is symmetric
    positive semi-definite and satisfies :math:`T\Sigma_d T = \Sigma_t`. ``half`` and ``ihalf``
    (:math:`\Sigma_d^{\pm 1/2}`, fixed after the departure) may be passed precomputed.
    """
    cov_d, cov_t = _t(cov_d), _t(cov_t)
    if cov_d.shape != cov_t.shape or cov_d.ndim != 2 or cov_d.shape[0] != cov_d.shape[1]:
        raise ValueError(f"need two (d, d) covariances, got {tuple(cov_d.shape)} and {tuple(cov_t.shape)}")
    half = sqrtm_psd(cov_d) if half is None else half
    ihalf = inv_sqrtm_pd(cov_d) if ihalf is None else ihalf
    T = ihalf @ sqrtm_psd(half @ cov_t @ half) @ ihalf
    return 0.5 * (T + T.T)


# --------------------------------------------------------------------- projector
def span_projector(M: torch.Tensor, span: str = "affine", tol: float = 1e-9) -> torch.Tensor:
    r"""Orthogonal projector :math:`P^\perp` (d, d) off the span of the rows of ``M`` (K, d).

    ``span="affine"``: off :math:`\operatorname{span}\{m_k - \bar m\}` (the directions of the affine
    hull); ``span="linear"``: off :math:`\operatorname{span}\{m_k\}`. The basis comes from an SVD
    with relative tolerance ``tol``, so collinear or repeated prototypes are fine.
    """
    if span not in SPANS:
        raise ValueError(f"unknown span {span!r}; valid: {', '.join(SPANS)}")
    M = _check_protos(M)
    B = M - M.mean(0, keepdim=True) if span == "affine" else M
    d = M.shape[1]
    eye = torch.eye(d, dtype=F64)
    if B.abs().max() == 0:
        return eye
    _, s, Vh = torch.linalg.svd(B, full_matrices=False)
    Q = Vh[s > tol * s.max()]  # (rank, d), orthonormal rows
    return eye - Q.T @ Q


# --------------------------------------------------------------------- Eq. (5), (7)
def measured_residual(rare_mean: torch.Tensor, M_t: torch.Tensor, w0: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    r""":math:`\hat r_{ho}(t) = P^\perp_t(\bar h_c - M_t^\top w_0)` from the remaining rare samples' mean."""
    return P @ (_t(rare_mean) - _t(M_t).T @ _t(w0))


def discrepancy_terms(r_ho: torch.Tensor, r_pred: torch.Tensor, sigma2: float, n: float) -> tuple[float, float]:
    r"""The two terms of Eq. (7): the discrepancy :math:`D = \tfrac1d\lVert \hat r_{ho} - \hat r_{pred}\rVert^2`
    and the measured residual's noise :math:`\hat\sigma^2/N`, so that :math:`D - \hat\sigma^2/N`
    is the method-of-moments estimate of :math:`\tau^2` before the clip at :math:`\varepsilon`
    (:math:`\mathbb E[D] = \tau^2 + \sigma^2/N` when :math:`\hat r_{ho}` is the mean of :math:`N`
    samples of per-coordinate variance :math:`\sigma^2` about the true residual).

    >>> discrepancy_terms(torch.tensor([2.0, 0.0]), torch.zeros(2), 1.0, 4)
    (2.0, 0.25)
    """
    if not n > 0:
        raise ValueError(f"n must be > 0 (the remaining rare samples), got {n!r}")
    if not (sigma2 >= 0 and sigma2 == sigma2):
        raise ValueError(f"sigma2 must be >= 0, got {sigma2!r}")
    r_ho, r_pred = _t(r_ho), _t(r_pred)
    return float(((r_ho - r_pred) ** 2).sum()) / r_ho.numel(), float(sigma2) / float(n)


def adaptive_alpha(r_ho: torch.Tensor, r_pred: torch.Tensor, sigma2: float, n: float, eps: float = 1e-12) -> float:
    r"""The adaptive weight of the measured residual, Eq. (7).

    .. math:: D = \tfrac1d\lVert \hat r_{ho} - \hat r_{pred}\rVert^2,\quad
              \hat\tau^2 = \max(D - \hat\sigma^2/N, \varepsilon),\quad
              \alpha = \frac{\hat\tau^2}{\hat\tau^2 + \hat\sigma^2/N}

    ``n = 0`` (no remaining rare sample) gives 0: the reconstruction falls back to the prediction.
    """
    if not n > 0:
        return 0.0
    D, noise = discrepancy_terms(r_ho, r_pred, sigma2, n)
    tau2 = max(D - noise, eps)
    return tau2 / (tau2 + noise)


# --------------------------------------------------------------------- the tracker
@dataclass(frozen=True)
class TrackingConfig:
    r"""MPT's hyper-parameters (the paper gives none of their values).

    Attributes
    ----------
    ridge : relative ridge of Eq. (1): :math:`\lambda = \text{ridge}\cdot\operatorname{tr}(M_dM_d^\top)/K`
    reg : :math:`\lambda_\Sigma` of Eq. (3)
    span : ``"affine"`` or ``"linear"`` (see the module docstring)
    noise : ``"rare"`` (the remaining rare samples' covariance, pooled if fewer than 2) or ``"pooled"``
    eps : :math:`\varepsilon` of Eq. (7)
    metric : where :math:`D_t` and :math:`\hat\sigma^2_t` of Eq. (7) are measured: ``"euclidean"``
        (the paper's Eq. (7)) or ``"whitened"`` (after :math:`\tilde\Sigma_t^{-1/2}`, the metric of
        the Mahalanobis readout; an option of ours, not the paper's)
    """

    ridge: float = 1e-3
    reg: float = 0.1
    span: str = "affine"
    noise: str = "rare"
    eps: float = 1e-12
    metric: str = "euclidean"

    def __post_init__(self) -> None:
        if self.span not in SPANS:
            raise ValueError(f"unknown span {self.span!r}; valid: {', '.join(SPANS)}")
        if self.noise not in NOISE:
            raise ValueError(f"unknown noise {self.noise!r}; valid: {', '.join(NOISE)}")
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; valid: {', '.join(METRICS)}")
        for name in ("ridge", "reg", "eps"):
            v = getattr(self, name)
            if not (v >= 0 and v == v and v != float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


@dataclass
class Snapshot:
    """What the server stores at departure (Section IV-B, step 5).

    Attributes
    ----------
    prototype : (d,) the rare-class prototype at departure (the frozen prototype)
    w0 : (K,) barycentric weights; r0 : (d,) residual
    cov_d : (d, d) regularized pooled within-class covariance of the remaining classes
    trace_d : tr of the unregularized covariance (MPT-lite's reference scale)
    """

    prototype: torch.Tensor
    w0: torch.Tensor
    r0: torch.Tensor
    cov_d: torch.Tensor
    trace_d: float
    half: torch.Tensor | None = None
    ihalf: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.half is None:
            self.half = sqrtm_psd(self.cov_d)
        if self.ihalf is None:
            self.ihalf = inv_sqrtm_pd(self.cov_d)


def take_snapshot(mu_c: torch.Tensor, M_d: torch.Tensor, cov_d: torch.Tensor, cfg: TrackingConfig = TrackingConfig()) -> Snapshot:
    """Decompose the departure prototype ``mu_c`` (d,) over ``M_d`` (K, d); store the regularized ``cov_d``."""
    M_d = _check_protos(M_d, "M_d")
    lam = cfg.ridge * float((M_d * M_d).sum()) / M_d.shape[0]
    w0, r0 = barycentric_decomposition(mu_c, M_d, lam)
    cov = _t(cov_d)
    return Snapshot(_t(mu_c).clone(), w0, r0, regularized_covariance(cov, cfg.reg), float(torch.trace(cov)))


@dataclass
class Reconstruction:
    """MPT's reconstruction at round t and its parts (for the ablations of Section V-D)."""

    prototype: torch.Tensor
    in_span: torch.Tensor
    r_pred: torch.Tensor
    r_ho: torch.Tensor | None
    alpha: float
    extras: dict = field(default_factory=dict)


def reconstruct_mpt(
    snap: Snapshot,
    M_t: torch.Tensor,
    cov_t: torch.Tensor,
    rare_n: float = 0.0,
    rare_mean: torch.Tensor | None = None,
    rare_cov: torch.Tensor | None = None,
    cfg: TrackingConfig = TrackingConfig(),
    alpha: float | None = None,
) -> Reconstruction:
    r"""Eq. (4): :math:`\hat\mu_c(t) = M_t^\top w_0 + \alpha_t\hat r_{ho}(t) + (1-\alpha_t)\hat r_{pred}(t)`.

    Parameters
    ----------
    M_t : (K, d) current remaining-class prototypes (same class order as at departure)
    cov_t : (d, d) current pooled within-class covariance of the remaining classes (unregularized)
    rare_n, rare_mean, rare_cov : count, mean (d,) and covariance (d, d, unbiased) of the remaining
        rare samples under the current model (``rare_n = 0``: none)
    alpha : force :math:`\alpha_t` (0: "predicted only", 1: "measured only"); default adaptive

    Notes
    -----
    As :math:`N_t` grows, :math:`\alpha_t \to 1` and the reconstruction tends to
    :math:`M_t^\top w_0 + P^\perp_t(\bar h - M_t^\top w_0)`, not to the rare samples' mean
    :math:`\bar h`: the measurement corrects only the part off the span, and the in-span part stays
    the barycentric estimate, however many samples remain.
    """
    M_t = _check_protos(M_t, "M_t")
    cov_t = _t(cov_t)
    in_span = M_t.T @ snap.w0
    P = span_projector(M_t, cfg.span)
    reg_t = regularized_covariance(cov_t, cfg.reg)
    T = transport_map(snap.cov_d, reg_t, half=snap.half, ihalf=snap.ihalf)
    r_pred = P @ (T @ snap.r0)
    r_ho = None
    a = 0.0
    if rare_n > 0 and rare_mean is not None and bool(torch.isfinite(_t(rare_mean)).all()):
        r_ho = measured_residual(rare_mean, M_t, snap.w0, P)
        noise_cov = rare_cov if (cfg.noise == "rare" and rare_n >= 2 and rare_cov is not None) else cov_t
        W = inv_sqrtm_pd(reg_t) if cfg.metric == "whitened" else torch.eye(P.shape[0], dtype=F64)
        WP = W @ P
        sigma2 = float(torch.trace(WP @ _t(noise_cov) @ WP.T)) / P.shape[0]
        if alpha is None:
            a = adaptive_alpha(W @ r_ho, W @ r_pred, sigma2, float(rare_n), cfg.eps)
        else:
            a = float(alpha)
    elif alpha is not None and alpha > 0:
        a = 0.0  # nothing measured: the prediction is all there is
    proto = in_span + (a * r_ho if r_ho is not None else 0.0) + (1.0 - a) * r_pred
    return Reconstruction(proto, in_span, r_pred, r_ho, a)


def transported_prototype(snap: Snapshot, M_t: torch.Tensor, cov_t: torch.Tensor,
                          cfg: TrackingConfig = TrackingConfig()) -> torch.Tensor:
    r"""The barycentric part plus the residual transported by Eq. (6), **without** the projector:
    :math:`M_t^\top w_0 + T_t r_0`, with :math:`T_t` from the regularized ``cov_t`` (d, d).

    Not a method of the paper: the diagnostic of what Eq. (6) assumes, that the rare class's offset
    from the span moves with the remaining classes' covariance. Against the stored residual
    (:func:`stored_residual_prototype`, :math:`M_t^\top w_0 + r_0`) it isolates the transport: the
    two share the in-span part, so their distances to the oracle prototype are the distances of
    :math:`T_t r_0` and :math:`r_0` to the oracle's residual :math:`\mu_c(t) - M_t^\top w_0`.
    """
    M_t = _check_protos(M_t, "M_t")
    T = transport_map(snap.cov_d, regularized_covariance(_t(cov_t), cfg.reg), half=snap.half, ihalf=snap.ihalf)
    return M_t.T @ snap.w0 + T @ snap.r0


# --------------------------------------------------------------------- MPT-lite
def growth_factor(trace_d: float, trace_t: float) -> float:
    r"""MPT-lite's scalar :math:`g_t = \sqrt{\operatorname{tr}\Sigma_t / \operatorname{tr}\Sigma_d}`.

    It is the transport map of Eq. (6) restricted to isotropic covariances
    (:math:`\Sigma = s I \Rightarrow T = \sqrt{s_t/s_d}\, I`), i.e. the best a single scale can do;
    it needs only the per-class sums of squared feature norms, not a covariance matrix.
    Returns 1 when either trace is not positive.
    """
    if not (trace_d > 0 and trace_t > 0):
        return 1.0
    return float((trace_t / trace_d) ** 0.5)


def reconstruct_lite(snap: Snapshot, M_t: torch.Tensor, growth: float) -> torch.Tensor:
    r"""MPT-lite: :math:`M_t^\top w_0 + g_t r_0` (barycentric + stored residual + one scalar)."""
    return _check_protos(M_t, "M_t").T @ snap.w0 + float(growth) * snap.r0


def barycentric_prototype(snap: Snapshot, M_t: torch.Tensor) -> torch.Tensor:
    """The in-span component only: :math:`M_t^\\top w_0` (the "Barycentric Prototype" of Fig. 6)."""
    return _check_protos(M_t, "M_t").T @ snap.w0


def stored_residual_prototype(snap: Snapshot, M_t: torch.Tensor) -> torch.Tensor:
    """:math:`M_t^\\top w_0 + r_0` ("Barycentric + Stored Residual" of Fig. 6)."""
    return barycentric_prototype(snap, M_t) + snap.r0


# --------------------------------------------------------------------- baselines
def icarl_prototype(rare_n: float, rare_sum: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """iCaRL nearest-mean: the mean of the remaining rare samples; ``fallback`` (the frozen
    prototype) when none remains."""
    if rare_n > 0:
        return _t(rare_sum) / float(rare_n)
    return _t(fallback).clone()


def sdc_client_sums(z_old: torch.Tensor, z_new: torch.Tensor, prototype: torch.Tensor, sigma: float = 0.3) -> tuple[torch.Tensor, float]:
    r"""One client's SDC aggregates for one stored prototype :math:`p`.

    .. math:: \sum_i w_i (z_i^{new} - z_i^{old}),\ \sum_i w_i,\qquad
              w_i = \exp\Big(-\frac{\lVert \hat z_i^{old} - \hat p\rVert^2}{2\sigma^2}\Big)

    with :math:`\hat\cdot` the L2-normalized vectors (SDC's features are normalized; the drift
    itself is measured on the raw features). Float64; weights cannot underflow since the
    normalized distance is at most 2.
    """
    z_old, z_new, p = _t(z_old), _t(z_new), _t(prototype)
    if len(z_old) == 0:
        return torch.zeros(p.shape[0], dtype=F64), 0.0
    zn = z_old / z_old.norm(dim=1, keepdim=True).clamp_min(1e-12)
    pn = p / p.norm().clamp_min(1e-12)
    w = torch.exp(-((zn - pn) ** 2).sum(1) / (2 * sigma**2))
    return (w[:, None] * (z_new - z_old)).sum(0), float(w.sum())


def sdc_step(prototype: torch.Tensor, sum_w_delta: torch.Tensor, sum_w: float) -> torch.Tensor:
    r"""SDC: :math:`p \leftarrow p + \sum_i w_i\delta_i / \sum_i w_i` (unchanged when no weight)."""
    if not sum_w > 0:
        return _t(prototype).clone()
    return _t(prototype) + _t(sum_w_delta) / sum_w


def ldc_fit_map(z_old: torch.Tensor, z_new: torch.Tensor, *, epochs: int = 20, lr: float = 1e-3, batch_size: int = 32,
                generator: torch.Generator | None = None) -> torch.Tensor:
    r"""LDC: a bias-free linear map :math:`W` (d, d) with :math:`z^{new} \approx W z^{old}`, trained
    with MSE (:math:`\tfrac1B\sum_i \lVert W z_i^{old} - z_i^{new}\rVert^2` per batch) and Adam from the
    identity, in float32 (one client's part; the server averages the maps). ``generator`` orders
    the batches (default: torch's global generator).

    The batches are :func:`fedlib.training.minibatches`' (``epochs`` passes of ``batch_size``) and
    the update :class:`fedlib.training.PlainOptimizer`'s (:class:`torch.optim.Adam`'s arithmetic): the map
    a bias-free ``torch.nn.Linear`` from the identity trained by ``torch.optim.Adam`` on these
    batches, bit for bit, in a loop without a module or an optimizer object's per-step machinery
    (a client's rare-class samples are few, so that machinery cost more than the arithmetic).

    Examples
    --------
    >>> z = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    >>> W = ldc_fit_map(z, 2 * z, epochs=50, lr=0.05, batch_size=2, generator=torch.Generator().manual_seed(0))
    >>> W.dtype, W.shape, bool((W @ z.T - 2 * z.T).abs().max() < (z.T - 2 * z.T).abs().max())
    (torch.float64, torch.Size([3, 3]), True)
    """
    z_old, z_new = _t(z_old).float(), _t(z_new).float()
    W = torch.eye(z_old.shape[1]).requires_grad_()  # no draw from torch's global RNG
    cfg = TrainConfig(epochs=epochs, batch_size=batch_size, optimizer="adam", lr=lr)
    adam = PlainOptimizer([W], cfg)
    for idx in minibatches(len(z_new), cfg, torch.default_generator if generator is None else generator):
        loss = ((F.linear(z_old[idx], W) - z_new[idx]) ** 2).sum(1).mean()  # nn.Linear's forward, bias-free
        adam.zero_grad()
        loss.backward()
        adam.step()
    return W.detach().to(F64)


def ldc_steps_per_round(sizes, batch_size: int, epochs: int) -> float:
    r"""The Adam steps :func:`ldc_fit_map` gives a client's map in a round, averaged over clients:
    :math:`\lceil n / \text{batch\_size}\rceil` mini-batches per epoch (the last one partial)
    times ``epochs``, for clients of ``sizes`` training samples each.

    Parameters
    ----------
    sizes : array-like of int, shape (n_clients,)
        The clients' training samples (each >= 0).
    batch_size, epochs : int
        As passed to :func:`ldc_fit_map` (each >= 1).

    Raises
    ------
    ValueError
        On no client, a negative size, or ``batch_size`` or ``epochs`` below 1.

    Examples
    --------
    >>> ldc_steps_per_round([32, 33, 100], 32, 20)  # 1, 2 and 4 steps per epoch
    46.66666666666667
    """
    sizes = np.asarray(sizes)
    if sizes.ndim != 1 or len(sizes) == 0 or (sizes < 0).any():
        raise ValueError(f"sizes must be a non-empty list of sample counts >= 0, got {sizes.tolist()!r}")
    check_int("batch_size", batch_size, low=1)
    check_int("epochs", epochs, low=1)
    return float(np.mean(np.ceil(sizes / batch_size)) * epochs)


def ldc_step(prototype: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """LDC: :math:`p \\leftarrow W p`."""
    return _t(W) @ _t(prototype)


__all__ = [
    "METRICS", "NOISE", "SPANS", "Reconstruction", "Snapshot", "TrackingConfig", "adaptive_alpha", "barycentric_decomposition",
    "barycentric_prototype", "barycentric_weights", "discrepancy_terms", "growth_factor", "icarl_prototype", "inv_sqrtm_pd",
    "ldc_fit_map", "ldc_step", "ldc_steps_per_round", "measured_residual", "reconstruct_lite", "reconstruct_mpt",
    "sdc_client_sums", "sdc_step", "span_projector", "sqrtm_psd", "stored_residual_prototype", "take_snapshot",
    "transport_map", "transported_prototype",
]
