"""Shared linear algebra and input checks of the statistical heads (private).

Public functions validate their input here, once (book page *Inside fedlib*); the heads' private maths
assumes valid input. Everything is float64.
"""

from __future__ import annotations

import math

import torch

from ..stats import ClassMoments
from ..validation import is_real




def _check_reg(reg, name: str = "reg") -> float:
    """A finite number >= 0 (a relative ridge)."""
    if not (is_real(reg) and reg >= 0 and math.isfinite(reg)):
        raise ValueError(f"{name} must be a finite number >= 0, got {reg!r}")
    return float(reg)


def _check_positive(value, name: str) -> float:
    """A finite number > 0."""
    if not (is_real(value) and 0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_covariance(covariance: torch.Tensor) -> torch.Tensor:
    """A finite square (d, d) matrix, as float64, symmetrized."""
    cov = torch.as_tensor(covariance, dtype=torch.float64)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"covariance must be a square (d, d) matrix, got shape {tuple(cov.shape)}")
    if not bool(torch.isfinite(cov).all()):
        raise ValueError("covariance holds a NaN or an infinity")
    return 0.5 * (cov + cov.T)


def _as_features(z, dim: int) -> torch.Tensor:
    """Features ``z`` as a float64 (n, ``dim``) tensor."""
    z = torch.as_tensor(z).detach().to(torch.float64)
    if z.ndim != 2 or z.shape[1] != dim:
        raise ValueError(f"features must have shape (n, {dim}), got {tuple(z.shape)}")
    return z


def _check_moments(moments, *, class_grams: bool = False, head: str = "this head") -> ClassMoments:
    """One :class:`~fedlib.stats.ClassMoments` or a non-empty list of them (merged by addition),
    finite, with non-negative counts and at least one sample; ``class_grams`` requires the
    per-class Gram matrices (not the compact form)."""
    if isinstance(moments, ClassMoments):
        out = moments
    else:
        parts = list(moments) if isinstance(moments, (list, tuple)) else []
        if not parts or not all(isinstance(p, ClassMoments) for p in parts):
            raise ValueError("moments must be a ClassMoments or a non-empty list of ClassMoments (one per client), "
                             f"got {type(moments).__name__}")
        out = ClassMoments.sum(parts)
    for name in ("counts", "sums", "grams"):  # a NaN or inf anywhere makes the sum non-finite: one cheap pass
        if not bool(torch.isfinite(getattr(out, name).sum())):
            raise ValueError(f"moments.{name} holds a NaN or an infinity (or overflows float64)")
    if bool((out.counts < 0).any()):
        raise ValueError(f"moments.counts must be >= 0, got {out.counts.tolist()}")
    if float(out.counts.sum()) <= 0:
        raise ValueError("moments hold no sample (every class count is 0): nothing to fit")
    if class_grams and out.form != "class":
        raise ValueError(f"{head} needs the per-class Gram matrices, got the compact moments (total Gram only): "
                         "collect the statistics with grams='class'")
    return out


def regularized_covariance(covariance: torch.Tensor, reg: float) -> torch.Tensor:
    r"""The covariance plus ``reg`` times its average variance on the diagonal, shape (d, d).

    .. math:: \tilde\Sigma = \Sigma + \lambda\, \bar\sigma\, I_d, \qquad \bar\sigma = \operatorname{tr}(\Sigma)/d

    If :math:`\operatorname{tr}\Sigma = 0` (e.g. one sample per class) the added term would vanish,
    so :math:`\lambda I_d` is added instead; the result is then still positive definite for
    ``reg > 0``. The same ridge appears in MPT (Eq. (3)) and FedGRC's MMS (Eq. (29)).

    >>> regularized_covariance(torch.diag(torch.tensor([1.0, 3.0])), 0.5)
    tensor([[2., 0.],
            [0., 4.]], dtype=torch.float64)
    """
    cov = _check_covariance(covariance)
    reg = _check_reg(reg)
    d = cov.shape[0]
    avg = float(torch.trace(cov)) / d
    scale = avg if avg > 0 else 1.0
    return cov + reg * scale * torch.eye(d, dtype=torch.float64)


def spd_inverse(cov: torch.Tensor) -> torch.Tensor:
    """Inverse of a symmetric PSD (d, d) matrix: a Cholesky solve when numerically positive definite
    (every pivot above ``10 d eps`` times the largest), else the pseudo-inverse (scikit-learn's
    ``lsqr`` minimum-norm solution; a covariance computed from moments is singular only up to
    rounding). ``cholesky_solve`` against the identity is about 25x faster than
    ``torch.cholesky_inverse`` on the CPU at d = 1,000.

    >>> inv = spd_inverse(torch.diag(torch.tensor([2.0, 4.0], dtype=torch.float64)))
    >>> torch.allclose(inv, torch.diag(torch.tensor([0.5, 0.25], dtype=torch.float64)), rtol=1e-15, atol=0)
    True
    >>> spd_inverse(torch.ones(2, 2, dtype=torch.float64)).round(decimals=12).tolist()  # singular: pseudo-inverse
    [[0.25, 0.25], [0.25, 0.25]]
    """
    chol, info = torch.linalg.cholesky_ex(cov)
    pivots = torch.diagonal(chol) ** 2  # Schur-complement pivots; a tiny one means numerically singular
    eps = torch.finfo(cov.dtype).eps * cov.shape[0] * 10
    if int(info) == 0 and float(pivots.min()) > eps * float(pivots.max()):
        inv = torch.cholesky_solve(torch.eye(cov.shape[0], dtype=cov.dtype), chol)
    else:
        inv = torch.linalg.pinv(cov, hermitian=True)
    return 0.5 * (inv + inv.T)
