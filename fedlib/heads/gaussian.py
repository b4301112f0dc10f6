r"""Shared-covariance Gaussian heads from class moments: LDA-style and FedCGS.

Both are the linear discriminant of a Gaussian model with one covariance shared by the classes
(FedGRC, Eq. (5)),

.. math:: w_c = \Sigma^{-1}\mu_c, \qquad b_c = -\tfrac12 \mu_c^\top \Sigma^{-1}\mu_c + \log\pi_c ,

and differ in the covariance and the priors:

* :class:`~fedlib.heads.LDAHead` -- the pooled **within-class** covariance :math:`\Sigma_w` (1/N, about the class
  means; GH-LDA), optionally with the ridge :math:`\lambda\operatorname{tr}(\Sigma_w)/d`, and equal
  or empirical priors. With ``reg=0`` and ``priors="empirical"`` it is scikit-learn's
  ``LinearDiscriminantAnalysis(solver="lsqr")`` (same coefficients and decision function).
* :class:`~fedlib.heads.FedCGSHead` -- FedCGS (Guan et al., "Capture Global Feature Statistics for One-Shot
  Federated Learning", arXiv:2503.06962; a statistical-head baseline of FedGRC, Section V-B):
  the **total** covariance :math:`S` (about the global mean) and empirical priors.

Both need the clients' counts, sums and total Gram matrix :math:`\sum_c G_c` only.
"""

from __future__ import annotations

import math

import torch

from ._linalg import _check_moments, _check_reg, regularized_covariance, spd_inverse
from .base import LinearHead

PRIORS = ("equal", "empirical")
"""The priors :class:`LDAHead` offers."""


def _check_priors(priors) -> str:
    if priors not in PRIORS:
        raise ValueError(f"priors must be one of {PRIORS}, got {priors!r}")
    return priors


def gaussian_linear_head(means: torch.Tensor, precision: torch.Tensor, log_priors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Linear discriminant of a shared-covariance Gaussian model (FedGRC Eq. (5)).

    .. math:: w_c = P\mu_c, \qquad b_c = -\tfrac12\mu_c^\top P\mu_c + \log\pi_c

    ``means`` (C, d) (rows of classes with ``log_priors = -inf`` may be anything, even NaN),
    ``precision`` :math:`P` (d, d), ``log_priors`` (C,). Returns ``(coef, intercept)`` of shapes
    (C, d) and (C,); a class with :math:`\log\pi_c=-\infty` gets a zero row and :math:`-\infty`.

    >>> w, b = gaussian_linear_head(torch.tensor([[2.0, 0.0]]), torch.eye(2), torch.zeros(1))
    >>> w.tolist(), b.tolist()
    ([[2.0, 0.0]], [-2.0])
    """
    ok = torch.isfinite(log_priors) & torch.isfinite(means).all(dim=1)
    mu = torch.where(ok[:, None], means, torch.zeros_like(means)).to(torch.float64)
    coef = mu @ precision.to(torch.float64).T  # (C, d): P mu_c (P symmetric)
    intercept = -0.5 * (coef * mu).sum(1) + torch.where(ok, log_priors, torch.zeros_like(log_priors))
    return coef, torch.where(ok, intercept, torch.full_like(intercept, -math.inf))


def _gaussian_fit(head, m, covariance: torch.Tensor, reg, log_priors: torch.Tensor) -> None:
    """Shared by LDAHead and FedCGSHead: ridge, inverse, linear head."""
    head.means_ = torch.where(m.observed[:, None], m.means(), torch.zeros_like(m.sums))
    head.covariance_ = regularized_covariance(covariance, reg)  # + reg * tr/d * I (reg = 0: unchanged)
    head.precision_ = spd_inverse(head.covariance_)
    head.coef_, head.intercept_ = gaussian_linear_head(head.means_, head.precision_, log_priors)


def _log_priors(counts: torch.Tensor, priors: str) -> torch.Tensor:
    """(C,) log priors: equal over the observed classes, or :math:`\\log(N_c/N)`; -inf where N_c = 0."""
    obs = counts > 0
    if priors == "equal":
        lp = torch.full_like(counts, -math.log(int(obs.sum())))
    else:
        lp = torch.log(torch.where(obs, counts, torch.ones_like(counts)) / counts.sum())
    return torch.where(obs, lp, torch.full_like(lp, -math.inf))


class LDAHead(LinearHead):
    r"""LDA-style head: pooled within-class covariance, Gaussian linear discriminant.

    .. math:: w_c = \Sigma_w^{-1}\mu_c, \qquad b_c = -\tfrac12 \mu_c^\top \Sigma_w^{-1}\mu_c + \log\pi_c

    Parameters
    ----------
    reg : float, default 0.0
        Ridge :math:`\lambda`: the covariance used is :math:`\Sigma_w + \lambda\operatorname{tr}(\Sigma_w)/d\,I`
        (:func:`~fedlib.heads.regularized_covariance`); 0 inverts :math:`\Sigma_w` itself
        (pseudo-inverse if singular).
    priors : {"empirical", "equal"}, default "empirical"
        :math:`\pi_c = N_c/N` or :math:`1/C_{\text{observed}}`.

    Attributes
    ----------
    means_ : (C, d) class means (zero rows for classes without samples)
    covariance_ : (d, d) the (regularized) pooled within-class covariance (1/N)
    precision_ : (d, d) its inverse
    coef_, intercept_ : (C, d), (C,)

    Notes
    -----
    With ``reg=0, priors="empirical"`` this equals ``sklearn.discriminant_analysis.
    LinearDiscriminantAnalysis(solver="lsqr")`` fitted on the pooled features (sklearn weights the
    class covariances by the priors, hence the empirical priors); with balanced classes also with
    equal priors.

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0], [6.0, 0.0]])
    >>> head = LDAHead(reg=0.5).fit(ClassMoments.from_features(z, torch.tensor([0, 0, 1, 1]), 2))
    >>> head.predict(torch.tensor([[1.0, 5.0], [5.0, -5.0]])).tolist()
    [0, 1]
    """

    def __init__(self, reg: float = 0.0, priors: str = "empirical") -> None:
        self.reg = reg
        self.priors = priors

    def check_params(self) -> "LDAHead":
        _check_reg(self.reg)
        _check_priors(self.priors)
        return self

    def fit(self, moments) -> "LDAHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition)."""
        self.check_params()
        m = _check_moments(moments)
        within = m.pooled_covariance()
        _gaussian_fit(self, m, within, self.reg, _log_priors(m.counts, self.priors))
        return self


class FedCGSHead(LinearHead):
    r"""FedCGS: Gaussian head from the total covariance and empirical priors.

    .. math:: w_c = S^{-1}\mu_c, \qquad b_c = -\tfrac12\mu_c^\top S^{-1}\mu_c + \log(N_c/N),
              \qquad S = \tfrac1N\textstyle\sum_i (z_i - \bar z)(z_i - \bar z)^\top

    Parameters
    ----------
    reg : float, default 0.0
        Optional ridge :math:`\lambda\operatorname{tr}(S)/d` (not in FedCGS; 0 = the paper's rule,
        pseudo-inverse if :math:`S` is singular).

    Attributes
    ----------
    means_, covariance_, precision_, coef_, intercept_ : as :class:`LDAHead`'s, with :math:`S`

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> z = torch.tensor([[0.0, 1.0], [0.0, -1.0], [4.0, 1.0], [4.0, -1.0]])
    >>> FedCGSHead().fit(ClassMoments.from_features(z, torch.tensor([0, 0, 1, 1]), 2)).predict(z).tolist()
    [0, 0, 1, 1]
    """

    def __init__(self, reg: float = 0.0) -> None:
        self.reg = reg

    def check_params(self) -> "FedCGSHead":
        _check_reg(self.reg)
        return self

    def fit(self, moments) -> "FedCGSHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition)."""
        self.check_params()
        m = _check_moments(moments)
        total = m.total_covariance()
        _gaussian_fit(self, m, total, self.reg, _log_priors(m.counts, "empirical"))
        return self


__all__ = ["PRIORS", "FedCGSHead", "LDAHead", "gaussian_linear_head"]
