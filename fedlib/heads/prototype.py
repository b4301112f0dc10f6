r"""Prototype heads: Euclidean and Mahalanobis nearest-class-mean.

Both are fitted either from :class:`fedlib.stats.ClassMoments` (what clients send) or from
explicit class means and a covariance (what a server reconstructs, e.g. MPT's tracked prototype
set).

* :class:`~fedlib.heads.NearestClassMean`: :math:`\hat y(z) = \arg\min_c \lVert z - \mu_c \rVert_2^2`
  (Mensink et al., "Distance-Based Image Classification: Generalizing to New Classes at Near-Zero
  Cost", TPAMI 2013; iCaRL's nearest-mean-of-exemplars rule).
* :class:`~fedlib.heads.MahalanobisNCM`: :math:`\hat y(z) = \arg\min_c (z-\mu_c)^\top \tilde\Sigma^{-1} (z-\mu_c)`
  with the pooled within-class covariance regularized by a multiple of its average variance,

  .. math:: \tilde\Sigma = \Sigma + \lambda_\Sigma \, \frac{\operatorname{tr}\Sigma}{d}\, I_d

  (MPT, Jang et al., arXiv:2609.12771, Eq. (3) and Section IV-D; the same ridge
  :math:`\gamma \operatorname{tr}/d` appears in FedGRC's multilayer statistics).

A class whose prototype is not finite (never observed) is never predicted: its score is
:math:`-\infty`. Scores are float64: :math:`-\tfrac12 d^2(z, \mu_c)`.
"""

from __future__ import annotations

import torch

from ..stats import ClassMoments
from ._linalg import _check_covariance, _check_reg, regularized_covariance, spd_inverse
from .base import Head


def _squared_distances(z: torch.Tensor, means: torch.Tensor, precision: torch.Tensor | None) -> torch.Tensor:
    """(n, C) squared (Mahalanobis if ``precision``) distances; rows of ``means`` may be non-finite."""
    ok = torch.isfinite(means).all(dim=1)
    safe = torch.where(ok[:, None], means, torch.zeros_like(means))
    diff = z[:, None, :] - safe[None, :, :]  # (n, C, d)
    if precision is None:
        d2 = (diff * diff).sum(-1)
    else:
        d2 = torch.einsum("ncd,de,nce->nc", diff, precision, diff)
    return torch.where(ok[None, :], d2, torch.full_like(d2, float("inf")))


def _means_from(moments: ClassMoments | None, means) -> torch.Tensor:
    if (moments is None) == (means is None):
        raise ValueError("pass exactly one of moments= or means=")
    m = moments.means() if moments is not None else torch.as_tensor(means, dtype=torch.float64)
    if m.ndim != 2 or m.shape[0] < 1:
        raise ValueError(f"means must have shape (C, d) with C >= 1, got {tuple(m.shape)}")
    if not bool(torch.isfinite(m).all(dim=1).any()):
        raise ValueError("no class has a finite prototype: nothing to predict")
    return m.clone()


class _PrototypeHead(Head):
    _fitted_attr = "means_"

    def _n_features(self) -> int:
        return self.means_.shape[1]

    def _predictable(self) -> torch.Tensor:
        return torch.isfinite(self.means_).all(dim=1)

    def _scores(self, z: torch.Tensor) -> torch.Tensor:
        return -0.5 * _squared_distances(z, self.means_, getattr(self, "precision_", None))


class NearestClassMean(_PrototypeHead):
    """Euclidean nearest-class-mean.

    Attributes
    ----------
    means_ : torch.Tensor of shape (C, d), float64
        Set by ``fit``; non-finite rows are never predicted.

    Examples
    --------
    >>> head = NearestClassMean().fit(means=torch.tensor([[0.0, 0.0], [4.0, 0.0]]))
    >>> head.predict(torch.tensor([[1.0, 1.0], [3.0, -1.0]])).tolist()
    [0, 1]
    """

    def fit(self, moments: ClassMoments | None = None, *, means=None) -> "NearestClassMean":
        """Fit from ``moments`` (class means) or from explicit ``means`` of shape (C, d)."""
        self.means_ = _means_from(moments, means)
        return self


class MahalanobisNCM(_PrototypeHead):
    r"""Mahalanobis nearest-class-mean with a regularized shared covariance.

    Parameters
    ----------
    reg : float, default 0.1
        :math:`\lambda_\Sigma` of :func:`~fedlib.heads.regularized_covariance`; 0 uses the
        covariance as is (its pseudo-inverse if singular).

    Attributes
    ----------
    means_ : torch.Tensor of shape (C, d)
        The prototypes (set by ``fit``).
    covariance_ : torch.Tensor of shape (d, d)
        The regularized covariance :math:`\tilde\Sigma`.
    precision_ : torch.Tensor of shape (d, d)
        Its inverse.

    Notes
    -----
    From moments, the pooled within-class covariance needs the total Gram matrix only; restricted
    to a subset of classes (``fit(moments, classes=...)``) it needs the per-class Gram matrices.

    Examples
    --------
    >>> cov = torch.diag(torch.tensor([1.0, 100.0]))
    >>> head = MahalanobisNCM(reg=0.0).fit(means=torch.tensor([[0.0, 0.0], [1.0, 10.0]]), covariance=cov)
    >>> head.predict(torch.tensor([[1.0, 4.0]])).tolist()  # Euclidean NCM would say class 0
    [1]
    """

    def __init__(self, reg: float = 0.1) -> None:
        self.reg = reg

    def check_params(self) -> "MahalanobisNCM":
        _check_reg(self.reg)
        return self

    def fit(
        self, moments: ClassMoments | None = None, *, means=None, covariance=None, classes=None
    ) -> "MahalanobisNCM":
        """Fit from ``moments`` or from explicit ``means`` (C, d) and ``covariance`` (d, d).

        With ``moments`` the covariance (unless given) is the pooled within-class covariance
        (1/N) about the class means of the classes in ``classes`` (a boolean mask or index list;
        default: every observed class).
        """
        reg = _check_reg(self.reg)
        self.means_ = _means_from(moments, means)
        if covariance is None:
            if moments is None:
                raise ValueError("with means= also pass covariance= (d, d)")
            if classes is not None:
                if moments.form != "class":
                    raise ValueError("fit(moments, classes=...) needs the per-class Gram matrices, got the compact "
                                     "moments (total Gram only): collect the statistics with grams='class'")
                mask = torch.zeros(moments.n_classes, dtype=torch.bool)
                mask[torch.as_tensor(classes)] = True
                moments = ClassMoments(moments.counts * mask, moments.sums * mask[:, None], moments.grams * mask[:, None, None])
            covariance = moments.pooled_covariance()
        cov = _check_covariance(covariance)
        if cov.shape[0] != self.means_.shape[1]:
            raise ValueError(f"covariance is {tuple(cov.shape)} but prototypes have d={self.means_.shape[1]}")
        self.covariance_ = regularized_covariance(cov, reg) if reg > 0 else cov
        self.precision_ = spd_inverse(self.covariance_)
        return self


def mahalanobis(a: torch.Tensor, b: torch.Tensor, precision: torch.Tensor) -> float:
    r""":math:`\sqrt{(a-b)^\top P (a-b)}` for vectors ``a``, ``b`` of shape (d,) and ``precision`` :math:`P` (d, d).

    >>> mahalanobis(torch.tensor([3.0, 0.0]), torch.zeros(2), torch.eye(2) / 4)
    1.5
    """
    diff = torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)
    return float(torch.sqrt(torch.clamp(diff @ precision.to(torch.float64) @ diff, min=0.0)))


__all__ = ["MahalanobisNCM", "NearestClassMean", "mahalanobis"]
