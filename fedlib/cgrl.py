r"""CGRL: FedGRC's consensus geometric representation learning (the local objective and the
server's reference updates).

From *Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive Statistical
Personalization for Federated Learning* (FedGRC), Section IV-A, Appendix A-A, A-B and A-I. The
training plug-in that uses these functions is :class:`fedlib.algorithms.fedgrc.CGRL`.

A mini-batch of :math:`B` examples gives :math:`2B` views (a weak and a strong augmentation,
concatenated). With :math:`h_\ell` the pooled features of layer :math:`\ell\in\Lambda`, :math:`L`
the final backbone layer and :math:`u_i = \operatorname{unit}(h_L(x_i))`:

* Eq. (11), supervised contrastive loss with temperature :math:`\tau`,

  .. math:: \mathcal L_{CL} = \frac{1}{2B}\sum_i \frac{-1}{|P_i|}\sum_{p\in P_i}
            \log\frac{\exp(u_i^\top u_p/\tau)}{\sum_{j\ne i}\exp(u_i^\top u_j/\tau)} ;

* Eq. (12), prototype cross-entropy against the shared class directions :math:`p_c(t)`
  (zero references give zero logits),
  :math:`\mathcal L_{proto} = \frac{1}{2B}\sum_i -\log \operatorname{softmax}_c(u_i^\top p_c/\tau)_{y_i}`;
* Eq. (13), :math:`\mathcal L_{dir} = \mathcal L_{CL} + \beta\,\mathcal L_{proto}`;
* Eq. (14)-(15), stabilized log norms :math:`\rho_\ell = \tfrac12\log(\lVert h_\ell\rVert^2+\varepsilon^2)`
  and the magnitude loss against shared per-class, per-layer references :math:`a_{\ell,c}(t)`,

  .. math:: \mathcal L_{mag} = \frac{1}{|\Lambda|\,2B}\sum_{\ell\in\Lambda}\sum_i \chi_{\ell i}\,(\rho_\ell(x_i) - a_{\ell,y_i})^2,
            \qquad \chi_{\ell i} = v_{y_i}(t)\,\mathbf 1\{r_\ell(x_i)\ge r_{\min}\},

  with :math:`\chi` held fixed during differentiation;
* Eq. (17), :math:`\mathcal L = \mathcal L_{CE} + w_t(\lambda_{dir}\mathcal L_{dir} + \lambda_{rad}\mathcal L_{mag})`,
  :math:`w_t = \min\{(t+1)/T_w, 1\}`.

Between rounds (Appendix A-I) the server updates the class directions from the clients'
post-update directions (count-weighted, then temporal averaging with weight :math:`\xi`) and the
log-norm references from the pooled means of all training occurrences (temporal weight
:math:`\zeta`), with observation flags :math:`v_c`.

Choices where the paper's text is silent (its Table X of hyper-parameters is missing) are the
defaults of :class:`CGRLConfig`, each documented there; the normalization of :math:`\mathcal L_{mag}`
over layers (a mean, so the weight :math:`\lambda_{rad}` does not grow with :math:`|\Lambda|`) is ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

AUGMENT_DOMAINS = ("digits", "cifar", "none")
STRENGTHS = ("weak", "strong")
DIRECTION_PASSES = ("eval", "train")


@dataclass(frozen=True)
class CGRLConfig:
    """CGRL's hyper-parameters (the paper's Table X is missing: every default is our choice).

    Attributes
    ----------
    tau : temperature :math:`\\tau` of the contrastive and prototype losses (0.1, the usual
        supervised-contrastive value)
    beta : weight :math:`\\beta` of the prototype loss inside :math:`\\mathcal L_{dir}` (1.0)
    lambda_dir, lambda_rad : weights of the directional and magnitude terms (0.5 and 0.1)
    warmup : warm-up rounds :math:`T_w` (5)
    xi : weight of the current round's class directions in the temporal average (0.5)
    zeta : weight of the current round's log-norm means in the temporal average (0.5)
    r_min : safe-norm threshold :math:`r_{\\min}` below which the magnitude penalty is off (1e-2)
    eps : stabilizer :math:`\\varepsilon` of the log norm (1e-3)
    layers : the layers :math:`\\Lambda` (names of ``model.feature_layers``); ``None`` = all of them
    augment : the augmentation family, ``"digits"`` (28×28 grey digits: no flips), ``"cifar"``
        (32×32 colour images) or ``"none"`` (identity views, for tests and ablations)
    direction_pass : where a client's class directions come from: ``"eval"`` (the paper: one pass
        over its training split after local training, evaluation mode, no augmentation) or
        ``"train"`` (ours, cheaper: the detached final-layer features of the weak views seen
        during local training, summed as they go; no extra pass, but features of the model
        *before* each step)
    """

    tau: float = 0.1
    beta: float = 1.0
    lambda_dir: float = 0.5
    lambda_rad: float = 0.1
    warmup: int = 5
    xi: float = 0.5
    zeta: float = 0.5
    r_min: float = 1e-2
    eps: float = 1e-3
    layers: tuple[str, ...] | None = None
    augment: str = "digits"
    direction_pass: str = "eval"

    def __post_init__(self) -> None:
        for name in ("tau", "eps"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < math.inf):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        for name in ("beta", "lambda_dir", "lambda_rad", "r_min"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        for name in ("xi", "zeta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v <= 1):
                raise ValueError(f"{name} must be in (0, 1], got {v!r}")
        if not (isinstance(self.warmup, int) and self.warmup >= 1):
            raise ValueError(f"warmup must be an integer >= 1 (rounds), got {self.warmup!r}")
        if self.direction_pass not in DIRECTION_PASSES:
            raise ValueError(f"unknown direction_pass {self.direction_pass!r}; valid: {', '.join(DIRECTION_PASSES)}")
        if self.augment not in AUGMENT_DOMAINS:
            raise ValueError(f"unknown augment {self.augment!r}; valid: {', '.join(AUGMENT_DOMAINS)}")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))
            if not self.layers:
                raise ValueError("layers must name at least one layer (or be None for all of them)")


def unit(v: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    r"""Row-wise :math:`v/\lVert v\rVert_2`, with :math:`\operatorname{unit}(0) = 0`; shape of ``v``.

    >>> unit(torch.tensor([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    norm = v.norm(dim=-1, keepdim=True)
    return torch.where(norm > eps, v / norm.clamp_min(eps), torch.zeros_like(v))


def log_norm(h: torch.Tensor, eps: float) -> torch.Tensor:
    r"""Eq. (14): :math:`\rho = \tfrac12\log(\lVert h\rVert_2^2 + \varepsilon^2)` per row, shape (n,)."""
    return 0.5 * torch.log((h * h).sum(dim=-1) + eps * eps)


def supcon_loss(u: torch.Tensor, y: torch.Tensor, tau: float) -> torch.Tensor:
    r"""Eq. (11): supervised contrastive loss of unit views ``u`` (n, d) with labels ``y`` (n,).

    Anchors without a positive (no other view of their class) are left out of the mean; with two
    views of every example there is none. Zero if no anchor has a positive.
    """
    n = u.shape[0]
    logits = u @ u.T / tau  # (n, n)
    eye = torch.eye(n, dtype=torch.bool, device=u.device)
    logits = logits.masked_fill(eye, -math.inf)  # j != i in Z_i
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    pos = (y[:, None] == y[None, :]) & ~eye  # P_i
    n_pos = pos.sum(1)
    has = n_pos > 0
    if not bool(has.any()):
        return u.sum() * 0.0
    per_anchor = -(log_prob.masked_fill(~pos, 0.0)).sum(1)[has] / n_pos[has]
    return per_anchor.mean()


def prototype_ce(u: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor, tau: float) -> torch.Tensor:
    r"""Eq. (12): cross-entropy of the logits :math:`u_i^\top p_c/\tau`; zero references give zero logits."""
    return F.cross_entropy(u @ prototypes.to(u.dtype).T / tau, y)


def directional_loss(u, y, prototypes, tau: float, beta: float, use_prototypes: bool) -> torch.Tensor:
    r"""Eq. (13): :math:`\mathcal L_{CL} + \beta\mathcal L_{proto}` (the latter only once references exist)."""
    loss = supcon_loss(u, y, tau)
    if use_prototypes and beta > 0:
        loss = loss + beta * prototype_ce(u, y, prototypes, tau)
    return loss


def magnitude_gate(features: list[torch.Tensor], y: torch.Tensor, observed: torch.Tensor, r_min: float,
                   eps: float = 0.0) -> torch.Tensor:
    r""":math:`\chi_{\ell i} = v_{y_i}\mathbf 1\{r_\ell(x_i)\ge r_{\min}\}` of shape (L, n), no gradient, with the
    stabilized norm :math:`r_\ell = (\lVert h_\ell\rVert^2 + \varepsilon^2)^{1/2}` of Eq. (14)."""
    with torch.no_grad():
        v = observed.to(torch.bool)[y]  # (n,)
        return torch.stack([(torch.sqrt((h * h).sum(dim=1) + eps * eps) >= r_min) & v for h in features])


def magnitude_loss(features: list[torch.Tensor], y: torch.Tensor, references: torch.Tensor, observed: torch.Tensor,
                   r_min: float, eps: float) -> torch.Tensor:
    r"""Eq. (15): mean over layers and views of :math:`\chi_{\ell i}(\rho_\ell(x_i) - a_{\ell,y_i})^2`.

    ``features`` is one (n, d_ell) tensor per layer, ``references`` (L, C), ``observed`` (C,) the
    flags :math:`v_c`. The gate :math:`\chi` is held fixed (no gradient flows through it).
    """
    chi = magnitude_gate(features, y, observed, r_min, eps)  # (L, n)
    total = features[0].sum() * 0.0
    for ell, h in enumerate(features):
        rho = log_norm(h, eps)
        a = references[ell].to(rho.dtype)[y]
        total = total + (chi[ell].to(rho.dtype) * (rho - a) ** 2).mean()
    return total / len(features)


def dispersion_plus_offset(rho: np.ndarray, chi: np.ndarray, reference: float) -> float:
    r"""Lemma IV.1 (Eq. (16)) under a batch's empirical distribution: the right side
    :math:`p_\chi\,[\operatorname{Var}(\rho\mid\chi=1) + (\bar\rho_\chi - a)^2]` for one class and layer.

    :math:`p_\chi` is the share of gated views, the variance is the biased :math:`1/n_\chi` one of
    the gated log norms and :math:`\bar\rho_\chi` their mean; 0 when no view is gated. It equals
    the batch mean of :math:`\chi(\rho - a)^2`, the class's and layer's part of
    :func:`magnitude_loss`.

    Parameters
    ----------
    rho : ndarray of shape (n,)
        The log norms :math:`\rho` of the class's views at one layer (:func:`log_norm`).
    chi : ndarray of bool, shape (n,)
        The gate :math:`\chi` of each view (:func:`magnitude_gate`).
    reference : float
        The reference :math:`a` of the class and layer.

    Returns
    -------
    float
        The dispersion plus the squared mean offset, weighted by :math:`p_\chi`.

    Raises
    ------
    ValueError
        On ``rho`` and ``chi`` of different shapes or not one-dimensional, or ``chi`` that is not boolean.

    Examples
    --------
    >>> rho, chi = np.array([0.0, 1.0, 2.0, 5.0]), np.array([True, True, True, False])
    >>> float(dispersion_plus_offset(rho, chi, 0.0))  # 3/4 (2/3 + 1) = mean of (0, 1, 4, 0)
    1.25
    """
    rho, chi = np.asarray(rho), np.asarray(chi)
    if rho.ndim != 1 or rho.shape != chi.shape:
        raise ValueError(f"rho and chi must be of the same shape (n,), got {rho.shape} and {chi.shape}")
    if chi.dtype != np.bool_:
        raise ValueError(f"chi must be boolean (the gate), got dtype {chi.dtype}")
    if chi.sum() == 0:
        return 0.0
    r = rho[chi]
    return chi.mean() * (r.var() + (r.mean() - reference) ** 2)


def trace_from_pairs(h: np.ndarray) -> tuple[float, float, float]:
    r"""Eq. (21): the trace of a class's covariance (denominator :math:`N`) from pairwise radial and
    angular distances, and its two parts,

    .. math:: \operatorname{tr}\widehat\Sigma = \frac{1}{2N^2}\sum_{i,j}\Big[(R_i - R_j)^2
              + 2R_iR_j\,(1 - u_i^\top u_j)\Big],

    with :math:`R_i = \lVert h_i\rVert_2` and :math:`u_i = \operatorname{unit}(h_i)` (:func:`unit`).

    Parameters
    ----------
    h : ndarray of shape (N, d)
        The class's features at one layer, :math:`N \ge 1`.

    Returns
    -------
    (float, float, float)
        The trace, its radial part and its angular part (the trace is their sum).

    Raises
    ------
    ValueError
        On ``h`` that is not two-dimensional with at least one row.

    Examples
    --------
    >>> [float(t) for t in trace_from_pairs(np.array([[1.0, 0.0], [0.0, 3.0]]))]  # |h_1 - h_2|^2 / 4 = 10 / 4
    [2.5, 1.0, 1.5]
    """
    h = np.asarray(h, dtype=np.float64)
    if h.ndim != 2 or len(h) == 0:
        raise ValueError(f"h must be of shape (N, d) with N >= 1, got {h.shape}")
    R = np.linalg.norm(h, axis=1)
    u = unit(torch.as_tensor(h)).numpy()
    radial = ((R[:, None] - R[None, :]) ** 2).sum()
    angular = (2 * R[:, None] * R[None, :] * (1 - u @ u.T)).sum()
    n = len(h)
    return (radial + angular) / (2 * n * n), radial / (2 * n * n), angular / (2 * n * n)


def warmup_weight(round_: int, warmup: int) -> float:
    r""":math:`w_t = \min\{(t+1)/T_w, 1\}` with the loop's round :math:`r = t+1` (rounds numbered from 1)."""
    return min(round_ / warmup, 1.0)


# --- augmentations ---------------------------------------------------------------------------

def _uniform(n: int, low: float, high: float, generator: torch.Generator) -> torch.Tensor:
    return low + (high - low) * torch.rand(n, generator=generator)


def _affine(x: torch.Tensor, angle: torch.Tensor, scale: torch.Tensor, tx: torch.Tensor, ty: torch.Tensor,
            flip: torch.Tensor | None = None) -> torch.Tensor:
    """Batched rotation/scale/translation (in units of half the image side) by one grid sample."""
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    sx = torch.ones_like(cos) if flip is None else torch.where(flip, -1.0, 1.0)
    theta = torch.stack([torch.stack([cos * sx, -sin, tx], 1), torch.stack([sin * sx, cos, ty], 1)], 1)  # (n, 2, 3)
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _cutout(x: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    n, _, h, w = x.shape
    cy = torch.randint(0, h, (n,), generator=generator)
    cx = torch.randint(0, w, (n,), generator=generator)
    rows = torch.arange(h)[None, :, None]
    cols = torch.arange(w)[None, None, :]
    mask = ((rows - cy[:, None, None]).abs() <= size // 2) & ((cols - cx[:, None, None]).abs() <= size // 2)
    return x.masked_fill(mask[:, None], 0.0)


def augment(x: torch.Tensor, strength: str, generator: torch.Generator, domain: str = "digits") -> torch.Tensor:
    """A label-preserving random view of the image batch ``x`` (n, channels, H, W).

    ``digits`` (28×28 grey digits, no flips: a flipped 2 is not a 2): weak = a shift of up to 2
    pixels; strong = rotation up to 20°, scale 0.85-1.15, shift up to 3 pixels and a 10-pixel
    cutout. ``cifar`` (32×32 colour): weak = a shift of up to 4 pixels and a horizontal flip;
    strong = the weak view plus rotation up to 15°, brightness and contrast jitter of ±0.4 and a
    12-pixel cutout (the usual RandAugment-style ingredients in tensor form). ``none``: the batch
    itself. Randomness comes only from ``generator``.
    """
    if strength not in STRENGTHS:
        raise ValueError(f"unknown strength {strength!r}; valid: {', '.join(STRENGTHS)}")
    if domain not in AUGMENT_DOMAINS:
        raise ValueError(f"unknown augmentation domain {domain!r}; valid: {', '.join(AUGMENT_DOMAINS)}")
    if domain == "none":
        return x
    if x.dim() != 4:
        raise ValueError(f"augment expects an image batch (n, channels, H, W), got shape {tuple(x.shape)}")
    n, side = x.shape[0], x.shape[-1]
    px = 2.0 / side  # one pixel in grid units
    if domain == "digits":
        if strength == "weak":
            zero = torch.zeros(n)
            return _affine(x, zero, torch.ones(n), _uniform(n, -2, 2, generator) * px, _uniform(n, -2, 2, generator) * px)
        angle = _uniform(n, -20, 20, generator) * math.pi / 180
        out = _affine(x, angle, _uniform(n, 0.85, 1.15, generator), _uniform(n, -3, 3, generator) * px,
                      _uniform(n, -3, 3, generator) * px)
        return _cutout(out, 10, generator)
    flip = torch.rand(n, generator=generator) < 0.5
    angle = torch.zeros(n) if strength == "weak" else _uniform(n, -15, 15, generator) * math.pi / 180
    out = _affine(x, angle, torch.ones(n), _uniform(n, -4, 4, generator) * px, _uniform(n, -4, 4, generator) * px, flip)
    if strength == "weak":
        return out
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    contrast = _uniform(n, 0.6, 1.4, generator).view(n, 1, 1, 1)
    bright = _uniform(n, 0.6, 1.4, generator).view(n, 1, 1, 1)
    out = ((out - mean) * contrast + mean) * bright
    return _cutout(out, 12, generator)


# --- server-side reference updates (Appendix A-I) ---------------------------------------------

def update_directions(prototypes: torch.Tensor, observed: torch.Tensor, counts, directions, xi: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Shared class directions after a round (Appendix A-I):

    .. math:: \hat p_c = \operatorname{unit}\Big(\sum_k n_c^{(k)} d_c^{(k)}\Big), \qquad
              p_c(t+1) = \operatorname{unit}\big((1-\xi)p_c(t) + \xi\hat p_c\big)

    for a class seen before and in this round; :math:`\hat p_c` for a first-time class; unchanged
    for a class absent from the round.

    Parameters
    ----------
    prototypes : (C, d) current :math:`p_c(t)` (zero rows for classes never observed)
    observed : (C,) bool, whether :math:`p_c` has been set
    counts : (K, C) the participating clients' class counts :math:`n_c^{(k)}`
    directions : (K, C, d) their post-update class directions (unit, zero where :math:`n_c^{(k)} = 0`)
    xi : weight of the round's estimate in the temporal average

    Returns
    -------
    (prototypes, observed) : the updated (C, d) directions and (C,) flags
    """
    counts = torch.as_tensor(counts, dtype=torch.float64)
    directions = torch.as_tensor(directions, dtype=torch.float64)
    p = prototypes.to(torch.float64)
    pooled = (counts[:, :, None] * directions).sum(0)  # (C, d)
    now = (counts.sum(0) > 0) & (pooled.norm(dim=1) > 0)
    new = unit(pooled)
    blended = unit((1 - xi) * p + xi * new)
    upd = torch.where((observed & now)[:, None], blended, torch.where(now[:, None], new, p))
    return upd.to(prototypes.dtype), observed | now


def update_magnitudes(references: torch.Tensor, flags: torch.Tensor, sums, counts, zeta: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Shared log-norm references after a round (Appendix A-I):

    .. math:: \bar a_{\ell,c} = \frac{\text{sums}_{\ell c}}{q_c}, \qquad
              a_{\ell,c}(t+1) = (1-\zeta)a_{\ell,c}(t) + \zeta\bar a_{\ell,c}

    where :math:`v_c(t) = 1` and :math:`q_c > 0`; :math:`\bar a_{\ell,c}` for a first-time class;
    unchanged where :math:`q_c = 0`.

    Parameters
    ----------
    references : (L, C) current :math:`a_{\ell,c}(t)`
    flags : (C,) bool :math:`v_c(t)`
    sums : (L, C) the round's summed log norms :math:`\sum_k\sum_{i\in\mathcal Z^{(k)}_t, y_i=c}\rho_\ell(x_i)`
    counts : (C,) the round's occurrence counts :math:`q_c(t)` (views, repeats counted)
    zeta : weight of the round's estimate in the temporal average

    Returns
    -------
    (references, flags) : the updated (L, C) references and (C,) flags
    """
    sums = torch.as_tensor(sums, dtype=torch.float64)
    q = torch.as_tensor(counts, dtype=torch.float64)
    a = references.to(torch.float64)
    now = q > 0
    mean = sums / q.clamp_min(1.0)[None, :]
    upd = torch.where((flags & now)[None, :], (1 - zeta) * a + zeta * mean, torch.where(now[None, :], mean, a))
    return upd.to(references.dtype), flags | now


def within_class_share(moments) -> float:
    r"""The within-class share of a feature set's scatter: how much of the features' spread lies
    inside the classes rather than between them, from additive class moments.

    CGRL's directional loss is there "to promote within-class alignment and between-class
    separation" and its magnitude loss penalizes within-class log-norm dispersion (Section IV-A,
    Eq. (11), Lemma IV.1); Eq. (28) ties both to the within-class covariance MMS uses. With
    :math:`S_W = \sum_c \sum_{i: y_i = c} (z_i - \mu_c)(z_i - \mu_c)^\top` and
    :math:`S_T = \sum_i (z_i - \bar z)(z_i - \bar z)^\top`,

    .. math:: w = \frac{\operatorname{tr} S_W}{\operatorname{tr} S_T} \in [0, 1],

    unchanged by a common scale or shift of the features, so two backbones whose features have
    different norms compare on it (a smaller :math:`w`: tighter classes relative to their spread).

    Parameters
    ----------
    moments : fedlib.stats.ClassMoments
        Counts, sums and Gram matrices of the features (the server's merged statistics round).

    Returns
    -------
    float
        :math:`w`; NaN when the features have no spread (:math:`\operatorname{tr} S_T = 0`).

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0], [12.0, 0.0]])
    >>> m = ClassMoments.from_features(z, torch.tensor([0, 0, 1, 1]), n_classes=2)
    >>> round(within_class_share(m), 6)  # S_W: 4 * 1 = 4; S_T about the mean 6: 36 + 16 + 16 + 36 = 104
    0.038462
    """
    n = float(moments.counts.sum())
    if n <= 0:
        raise ValueError(f"within_class_share needs at least one feature, got counts summing to {n:g}")
    within = float(torch.trace(moments.within_scatter()))
    total = n * float(torch.trace(moments.total_covariance()))  # tr S_T = N tr(total covariance)
    return within / total if total > 0 else math.nan


__all__ = [
    "AUGMENT_DOMAINS", "CGRLConfig", "augment", "directional_loss", "dispersion_plus_offset", "log_norm", "magnitude_gate",
    "magnitude_loss", "prototype_ce", "supcon_loss", "trace_from_pairs", "unit", "update_directions", "update_magnitudes",
    "warmup_weight", "within_class_share",
]
