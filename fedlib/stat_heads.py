r"""Statistical-head baselines fitted from additive class moments on a frozen backbone.

Every head here is a *linear* classifier :math:`s_c(z) = w_c^\top z + b_c` whose weights are a
function of the merged ``fedlib.stats.ClassMoments`` (counts, sums, Gram matrices) that clients
send -- closed-form, except CCVR's, trained on virtual features drawn from them; no feature vector
reaches the server. They are the statistical-head baselines of
FedGRC's experiments (FedGRC, Section II and V; the facts on each baseline come from its reference
code, see ``shared/papers/README.md``):

* :class:`FedNCMHead` -- FedNCM (Legate et al., 2023): the weights are the L2-normalized class means
  of the unnormalized features, no bias,

  .. math:: w_c = \mu_c / \lVert \mu_c \rVert_2, \qquad b_c = 0 .

* :class:`LDAHead` -- a pooled-covariance (LDA-style, GH-LDA) Gaussian head: the pooled
  within-class covariance :math:`\Sigma_w` (1/N, about the class means), optionally with the ridge
  :math:`\lambda\,\operatorname{tr}(\Sigma_w)/d`, and equal or empirical priors,

  .. math:: w_c = \Sigma_w^{-1}\mu_c, \qquad b_c = -\tfrac12 \mu_c^\top \Sigma_w^{-1}\mu_c + \log\pi_c .

  With ``reg=0`` and ``priors="empirical"`` it is scikit-learn's
  ``LinearDiscriminantAnalysis(solver="lsqr")`` (same coefficients and decision function).
* :class:`FedCGSHead` -- FedCGS (one-shot Gaussian head): the same rule with the **total**
  covariance :math:`S` (about the global mean) and empirical priors,

  .. math:: w_c = S^{-1}\mu_c, \qquad b_c = -\tfrac12 \mu_c^\top S^{-1}\mu_c + \log(N_c/N).

* :class:`Fed3RHead` -- Fed3R (closed-form ridge regression on :math:`\tilde\phi = [\phi; 1]`),

  .. math:: W = \big(\lambda I + \textstyle\sum_i \tilde\phi_i\tilde\phi_i^\top\big)^{-1}
            \textstyle\sum_i \tilde\phi_i y_i^\top, \qquad \lambda = 0.01,

  each class column of :math:`W` (bias entry included) L2-normalized afterwards. Both sums are
  moments: :math:`\sum\phi\phi^\top = \sum_c G_c`, :math:`\sum \phi = \sum_c s_c`,
  :math:`\sum_i \phi_i [y_i = c] = s_c` and :math:`\sum_i [y_i = c] = N_c`.

* :class:`CCVRHead` -- CCVR (Luo et al., "No Fear of Heterogeneity: Classifier Calibration for
  Federated Learning with Non-IID Data", NeurIPS 2021, arXiv:2106.05001): class means and class
  covariances (1/n) from the moments, ``n_virtual`` virtual features drawn per observed class from

  .. math:: \hat z \sim \mathcal N\big(\mu_c,\ \Sigma_c + \lambda\operatorname{tr}(\Sigma_c)/d\, I\big),

  and a linear head re-trained on them with cross-entropy (Adam), from a given ``init`` (the
  backbone's own trained head when the features are its penultimate ones) or from zeros
  (:func:`fedlib.tracking.ccvr_head` does the sampling and the training). It is the only head
  here that needs the per-class Gram matrices (the others use :math:`\sum_c G_c` only) and the
  only random one (a ``torch.Generator`` is an argument of ``fit``).

Conventions (bad input never yields a NaN in a head):

* a class with no sample in the federation (``N_c = 0``) has a zero weight row and an intercept of
  :math:`-\infty`: it is never predicted (the paper's label space holds federation-known classes
  only); fitting with no sample at all is a ``ValueError``;
* a zero class mean (e.g. all-zero features) keeps a zero FedNCM weight instead of 0/0;
* a singular covariance (``reg=0``) is inverted by its pseudo-inverse, as scikit-learn's ``lsqr``
  solver does (a minimum-norm least-squares solution);
* CCVR needs ``reg > 0``: a class covariance is singular whenever a class has fewer samples than
  dimensions (or dead ReLU units), and the ridge :math:`\lambda\operatorname{tr}(\Sigma_c)/d`
  (:math:`\lambda` alone when the trace is 0, e.g. all-zero features) makes it positive definite;
  a covariance that rounding leaves indefinite (:math:`G_c/n_c - \mu_c\mu_c^\top` cancels) is
  first projected onto the positive semi-definite cone; a class seen once uses the pooled
  covariance of the classes seen at least twice; a class absent from every client gets no virtual
  feature, a zero weight row and a :math:`-\infty` intercept.

All heads follow the estimator contract: ``__init__`` stores hyper-parameters, ``fit(moments)``
(CCVR: ``fit(moments, generator=..., init=None)``) sets ``coef_`` (C, d), ``intercept_`` (C,), ``classes_`` (C,) and returns ``self``;
``decision_function(z)`` returns (n, C) float64 scores and ``predict(z)`` their argmax.
"""

from __future__ import annotations

import math

import torch

from .heads import _as_features, regularized_covariance, spd_inverse
from .stats import ClassMoments
from .tracking import ccvr_head

_PRIORS = ("equal", "empirical")


def _check_moments(moments) -> ClassMoments:
    if isinstance(moments, ClassMoments):
        out = moments
    else:
        parts = list(moments)
        if not parts or not all(isinstance(p, ClassMoments) for p in parts):
            raise ValueError("moments must be a ClassMoments or a non-empty list of ClassMoments (one per client)")
        out = ClassMoments.sum(parts)
    for name in ("counts", "sums", "grams"):  # a NaN or inf anywhere makes the sum non-finite: one cheap pass
        if not bool(torch.isfinite(getattr(out, name).sum())):
            raise ValueError(f"moments.{name} holds a NaN or an infinity (or overflows float64)")
    if bool((out.counts < 0).any()):
        raise ValueError(f"moments.counts must be >= 0, got {out.counts.tolist()}")
    if float(out.counts.sum()) <= 0:
        raise ValueError("moments hold no sample (every class count is 0): nothing to fit")
    return out


def _gaussian_fit(head, m: ClassMoments, covariance: torch.Tensor, reg, log_priors: torch.Tensor) -> None:
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


def _check_priors(priors) -> str:
    if priors not in _PRIORS:
        raise ValueError(f"priors must be one of {_PRIORS}, got {priors!r}")
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


class LinearHead:
    """Base of the linear statistical heads: scores :math:`z W^\\top + b`.

    Subclasses set ``coef_`` (C, d), ``intercept_`` (C,) in ``fit``. ``classes_`` (boolean (C,))
    marks the classes that can be predicted (finite intercept).
    """

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit(...) first")

    @property
    def classes_(self) -> torch.Tensor:
        """Boolean (C,): classes that can be predicted."""
        self._check_fitted()
        return torch.isfinite(self.intercept_)

    def decision_function(self, z) -> torch.Tensor:
        r"""Scores of shape (n, C), float64: :math:`s_c(z) = w_c^\top z + b_c` (:math:`-\infty` for classes never predicted)."""
        self._check_fitted()
        z = _as_features(z, self.coef_.shape[1])
        return z @ self.coef_.T + self.intercept_[None, :]

    def predict(self, z) -> torch.Tensor:
        """Predicted classes of shape (n,) (ties: the smallest class index)."""
        return self.decision_function(z).argmax(dim=1)


class FedNCMHead(LinearHead):
    r"""FedNCM: cosine-style readout with L2-normalized class means as weights, no bias.

    .. math:: s_c(z) = z^\top \mu_c / \lVert\mu_c\rVert_2

    >>> z = torch.tensor([[3.0, 0.0], [0.0, 1.0], [0.0, 3.0]])
    >>> head = FedNCMHead().fit(ClassMoments.from_features(z, torch.tensor([0, 1, 1]), 2))
    >>> head.coef_.tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """

    def fit(self, moments) -> "FedNCMHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition)."""
        m = _check_moments(moments)
        obs = m.observed
        mu = torch.where(obs[:, None], m.means(), torch.zeros_like(m.sums))
        norm = mu.norm(dim=1, keepdim=True)
        self.means_ = mu
        self.coef_ = torch.where(norm > 0, mu / torch.where(norm > 0, norm, torch.ones_like(norm)), torch.zeros_like(mu))
        self.intercept_ = torch.where(obs, torch.zeros_like(m.counts), torch.full_like(m.counts, -math.inf))
        return self


class LDAHead(LinearHead):
    r"""LDA-style head: pooled within-class covariance, Gaussian linear discriminant.

    Parameters
    ----------
    reg : float, default 0.0
        Ridge :math:`\lambda`: the covariance used is :math:`\Sigma_w + \lambda\operatorname{tr}(\Sigma_w)/d\,I`
        (``fedlib.heads.regularized_covariance``); 0 inverts :math:`\Sigma_w` itself (pseudo-inverse
        if singular).
    priors : {"empirical", "equal"}, default "empirical"
        :math:`\pi_c = N_c/N` or :math:`1/C_{\text{observed}}`.

    Attributes
    ----------
    means_ : (C, d) class means (zero rows for classes without samples)
    covariance_ : (d, d) the (regularized) pooled within-class covariance (1/N)
    precision_ : (d, d) its inverse
    coef_, intercept_ : (C, d), (C,)

    With ``reg=0, priors="empirical"`` this equals ``sklearn.discriminant_analysis.
    LinearDiscriminantAnalysis(solver="lsqr")`` fitted on the pooled features (sklearn weights the
    class covariances by the priors, hence the empirical priors); with balanced classes also with
    equal priors.

    >>> z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0], [6.0, 0.0]])
    >>> head = LDAHead(reg=0.5).fit(ClassMoments.from_features(z, torch.tensor([0, 0, 1, 1]), 2))
    >>> head.predict(torch.tensor([[1.0, 5.0], [5.0, -5.0]])).tolist()
    [0, 1]
    """

    def __init__(self, reg: float = 0.0, priors: str = "empirical") -> None:
        self.reg = reg
        self.priors = priors

    def fit(self, moments) -> "LDAHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition)."""
        priors = _check_priors(self.priors)
        m = _check_moments(moments)
        within = m.pooled_covariance()
        _gaussian_fit(self, m, within, self.reg, _log_priors(m.counts, priors))
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

    >>> z = torch.tensor([[0.0, 1.0], [0.0, -1.0], [4.0, 1.0], [4.0, -1.0]])
    >>> FedCGSHead().fit(ClassMoments.from_features(z, torch.tensor([0, 0, 1, 1]), 2)).predict(z).tolist()
    [0, 0, 1, 1]
    """

    def __init__(self, reg: float = 0.0) -> None:
        self.reg = reg

    def fit(self, moments) -> "FedCGSHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition)."""
        m = _check_moments(moments)
        total = m.total_covariance()
        _gaussian_fit(self, m, total, self.reg, _log_priors(m.counts, "empirical"))
        return self


class Fed3RHead(LinearHead):
    r"""Fed3R: closed-form ridge regression of one-hot labels on :math:`[\phi; 1]`, columns normalized.

    .. math:: W = (\lambda I + G)^{-1} B, \quad
              G = \begin{pmatrix}\sum_c G_c & \sum_c s_c\\ \sum_c s_c^\top & N\end{pmatrix}, \quad
              B = \begin{pmatrix} s_1 & \cdots & s_C\\ N_1 & \cdots & N_C\end{pmatrix},

    then :math:`W_{:,c} \leftarrow W_{:,c}/\lVert W_{:,c}\rVert_2` (bias entry included).
    ``coef_`` is the first d rows of :math:`W` transposed, ``intercept_`` the last row.

    Parameters
    ----------
    lam : float, default 0.01
        The ridge :math:`\lambda > 0` (Fed3R's value).
    normalize : bool, default True
        L2-normalize each class column afterwards, as Fed3R's code does.

    Attributes
    ----------
    weights_ : (d + 1, C) the matrix :math:`W` (after normalization)

    >>> z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> Fed3RHead().fit(ClassMoments.from_features(z, torch.tensor([0, 1]), 2)).predict(z).tolist()
    [0, 1]
    """

    def __init__(self, lam: float = 0.01, normalize: bool = True) -> None:
        self.lam = lam
        self.normalize = normalize

    def fit(self, moments) -> "Fed3RHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition)."""
        lam = self.lam
        if not (isinstance(lam, (int, float)) and 0 < lam < math.inf):
            raise ValueError(f"lam must be a finite number > 0, got {lam!r}")
        m = _check_moments(moments)
        d = m.dim
        gram = torch.empty(d + 1, d + 1, dtype=torch.float64)  # sum [phi;1][phi;1]^T
        gram[:d, :d] = m.grams.sum(0)
        gram[:d, d] = gram[d, :d] = m.sums.sum(0)
        gram[d, d] = m.counts.sum()
        rhs = torch.cat([m.sums.T, m.counts[None, :]], dim=0)  # (d+1, C): sum [phi;1] y^T
        system = gram + lam * torch.eye(d + 1, dtype=torch.float64)
        w = torch.cholesky_solve(rhs, torch.linalg.cholesky(system))  # (d+1, C), system is PD
        if self.normalize:
            norm = w.norm(dim=0, keepdim=True)
            w = torch.where(norm > 0, w / torch.where(norm > 0, norm, torch.ones_like(norm)), w)
        obs = m.observed
        w = torch.where(obs[None, :], w, torch.zeros_like(w))
        self.weights_ = w
        self.coef_ = w[:d].T.contiguous()
        self.intercept_ = torch.where(obs, w[d], torch.full_like(w[d], -math.inf))
        return self


def _check_ccvr(n_virtual, steps, lr, reg) -> None:
    """Validate CCVR's hyper-parameters (shared by :class:`CCVRHead` and its callers' constructors)."""
    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not (is_int(n_virtual) and n_virtual >= 1):
        raise ValueError(f"n_virtual must be an int >= 1 (virtual features per class), got {n_virtual!r}")
    if not (is_int(steps) and steps >= 0):
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and 0 < lr < math.inf):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if not (isinstance(reg, (int, float)) and not isinstance(reg, bool) and 0 < reg < math.inf):
        raise ValueError(f"reg must be a finite number > 0 (class covariances are often singular), got {reg!r}")


def _psd_class_covariances(m: ClassMoments, reg: float) -> torch.Tensor:
    r"""(C, d, d) class covariances (1/n), zero for absent classes, symmetric; each one whose ridge
    :math:`\Sigma_c + \lambda\operatorname{tr}(\Sigma_c)/d\,I` fails a Cholesky factorization
    (rounding left it indefinite) is replaced by its projection onto the PSD cone."""
    obs = m.observed
    covs = torch.where(obs[:, None, None], m.class_covariances(), torch.zeros_like(m.grams))  # NaN rows -> 0
    covs = 0.5 * (covs + covs.transpose(1, 2))
    d = m.dim
    avg = torch.diagonal(covs, dim1=1, dim2=2).sum(-1) / d  # (C,)
    scale = torch.where(avg > 0, avg, torch.ones_like(avg))
    eye = torch.eye(d, dtype=torch.float64)
    _, info = torch.linalg.cholesky_ex(covs + reg * scale[:, None, None] * eye)  # what ccvr_head factorizes
    for c in torch.nonzero(info != 0).flatten().tolist():
        w, q = torch.linalg.eigh(covs[c])
        covs[c] = (q * w.clamp(min=0.0)[None, :]) @ q.T
    return covs


class CCVRHead(LinearHead):
    r"""CCVR: a linear head re-trained with cross-entropy on virtual features drawn from class Gaussians.

    For every class observed in the federation, ``n_virtual`` features are drawn from
    :math:`\mathcal N(\mu_c, \Sigma_c + \lambda\operatorname{tr}(\Sigma_c)/d\,I)` (class mean and
    1/n class covariance from the merged moments; a class seen once uses the pooled covariance of
    the classes seen at least twice) and a linear head is trained on them for ``steps`` full-batch
    Adam steps from ``init`` (:func:`fedlib.tracking.ccvr_head`).

    Parameters
    ----------
    n_virtual : int, default 100
        Virtual features per observed class.
    steps : int, default 100
        Full-batch Adam steps (0 returns ``init``, restricted to the observed classes).
    lr : float, default 0.01
        Adam's learning rate.
    reg : float, default 0.1
        Ridge :math:`\lambda > 0` relative to each class covariance's average variance.

    Attributes
    ----------
    means_ : (C, d) class means (zero rows for absent classes)
    covariances_ : (C, d, d) the class covariances used (PSD; zero for absent classes)
    coef_, intercept_ : (C, d), (C,) float64; a class absent from every client has a zero row and
        :math:`-\infty` (never predicted), whatever the training did to its row

    >>> z = torch.tensor([[0.0, 0.0], [0.2, 0.1], [4.0, 4.0], [4.1, 3.8]])
    >>> m = ClassMoments.from_features(z, torch.tensor([0, 0, 2, 2]), 3)
    >>> head = CCVRHead(n_virtual=20, steps=200, lr=0.1).fit(m, generator=torch.Generator().manual_seed(0))
    >>> head.predict(torch.tensor([[0.1, 0.0], [4.0, 3.9]])).tolist(), head.classes_.tolist()
    ([0, 2], [True, False, True])
    """

    def __init__(self, n_virtual: int = 100, steps: int = 100, lr: float = 0.01, reg: float = 0.1) -> None:
        self.n_virtual = n_virtual
        self.steps = steps
        self.lr = lr
        self.reg = reg

    def fit(self, moments, *, generator: torch.Generator, init=None) -> "CCVRHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition).

        ``generator`` draws the virtual features; ``init`` is ``(weight (C, d), bias (C,))`` to
        start from (e.g. the backbone's trained linear head), default zeros.
        """
        _check_ccvr(self.n_virtual, self.steps, self.lr, self.reg)
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator (randomness is an argument), got {type(generator).__name__}")
        m = _check_moments(moments)
        c, d = m.n_classes, m.dim
        if init is None:
            w0, b0 = torch.zeros(c, d, dtype=torch.float64), torch.zeros(c, dtype=torch.float64)
        else:
            w0, b0 = (torch.as_tensor(t).detach().to(torch.float64) for t in init)
            if w0.shape != (c, d) or b0.shape != (c,):
                raise ValueError(f"init must be (weight, bias) of shapes ({c}, {d}) and ({c},), "
                                 f"got {tuple(w0.shape)} and {tuple(b0.shape)}")
            if not bool(torch.isfinite(w0).all() and torch.isfinite(b0).all()):
                raise ValueError("init holds a NaN or an infinity")
        obs = m.observed
        self.means_ = torch.where(obs[:, None], m.means(), torch.zeros_like(m.sums))
        self.covariances_ = _psd_class_covariances(m, float(self.reg))
        w, b = ccvr_head(self.means_, self.covariances_, m.counts, w0, b0, n_virtual=self.n_virtual, steps=self.steps,
                         lr=float(self.lr), reg=float(self.reg), generator=generator)
        w, b = w.to(torch.float64), b.to(torch.float64)
        if not bool(torch.isfinite(w).all() and torch.isfinite(b).all()):  # e.g. a huge lr diverged
            raise ValueError(f"CCVR's training diverged (non-finite head) with lr={self.lr!r}; lower lr or steps")
        self.coef_ = torch.where(obs[:, None], w, torch.zeros_like(w))
        self.intercept_ = torch.where(obs, b, torch.full_like(b, -math.inf))
        return self


__all__ = ["CCVRHead", "FedCGSHead", "Fed3RHead", "FedNCMHead", "LDAHead", "LinearHead", "gaussian_linear_head"]
