r"""CCVR: a linear head re-trained on virtual features drawn from the clients' class Gaussians.

Luo et al., "No Fear of Heterogeneity: Classifier Calibration for Federated Learning with Non-IID
Data", NeurIPS 2021, arXiv:2106.05001 (classifier calibration with virtual representations). From
the merged moments, the class means and class covariances (1/n), then
``n_virtual`` virtual features per observed class drawn from

.. math:: \hat z \sim \mathcal N\big(\mu_c,\ \Sigma_c + \lambda\operatorname{tr}(\Sigma_c)/d\, I\big),

and a linear head re-trained on them with cross-entropy (full-batch Adam), from a given ``init``
(the backbone's own trained head when the features are its penultimate ones) or from zeros.
It is the only head that needs the per-class Gram matrices (the others use :math:`\sum_c G_c`
only) and the only random one (a ``torch.Generator`` is an argument of ``fit``).

:func:`~fedlib.heads.ccvr_calibrate` is the sampling and the re-training (MPT's per-round CCVR baseline,
:mod:`fedlib.algorithms.mpt`, calls it too); :class:`~fedlib.heads.CCVRHead` the estimator around it.

Conventions: CCVR needs ``reg > 0``: a class covariance is singular whenever a class has fewer
samples than dimensions (or dead ReLU units), and the ridge :math:`\lambda\operatorname{tr}(\Sigma_c)/d`
(:math:`\lambda` alone when the trace is 0, e.g. all-zero features) makes it positive definite; a
covariance that rounding leaves indefinite (:math:`G_c/n_c - \mu_c\mu_c^\top` cancels) is first
projected onto the positive semi-definite cone; a class seen once uses the pooled covariance of
the classes seen at least twice; a class absent from every client gets no virtual feature, a zero
weight row and a :math:`-\infty` intercept.

The re-training is a plain loop of ``steps`` full-batch Adam steps on all virtual features in
their drawing order, not :func:`fedlib.training.local_train`: that function draws a fresh random
permutation of the rows per step, which reorders the float32 sums of the loss and gradients and
so changes the head (by about 1e-4 after 50 steps), and it would take randomness from the
generator that draws the virtual features.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ..stats import ClassMoments
from ..validation import is_int, is_real
from ._linalg import _check_moments, regularized_covariance
from .base import LinearHead

F64 = torch.float64


def _check_ccvr(n_virtual, steps, lr, reg, *, reg_positive: bool = True) -> None:
    """Validate CCVR's hyper-parameters (each ``ValueError`` names the bad value)."""
    if not (is_int(n_virtual) and n_virtual >= 1):
        raise ValueError(f"n_virtual must be an int >= 1 (virtual features per class), got {n_virtual!r}")
    if not (is_int(steps) and steps >= 0):
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if not (is_real(lr) and 0 < lr < math.inf):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if reg_positive and not (is_real(reg) and 0 < reg < math.inf):
        raise ValueError(f"reg must be a finite number > 0 (class covariances are often singular), got {reg!r}")
    if not reg_positive and not (is_real(reg) and 0 <= reg < math.inf):
        raise ValueError(f"reg must be a finite number >= 0, got {reg!r}")


def ccvr_calibrate(means: torch.Tensor, covs: torch.Tensor, counts: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                   *, n_virtual: int = 100, steps: int = 100, lr: float = 0.01, reg: float = 0.1,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""CCVR's calibration: draw ``n_virtual`` virtual features per observed class from
    :math:`\mathcal N(\mu_c, \tilde\Sigma_c)` and re-train the linear head from ``weight`` (C, d),
    ``bias`` (C,) with cross-entropy (``steps`` full-batch Adam steps, learning rate ``lr``, in
    float32).

    ``means`` (C, d) and ``covs`` (C, d, d) must be finite (pass zeros for unobserved classes),
    ``counts`` (C,); :math:`\tilde\Sigma_c` is :func:`~fedlib.heads.regularized_covariance` with
    ``reg``, of the class covariance, or of the pooled covariance of the classes seen at least
    twice when class :math:`c` was seen fewer than twice; an unobserved class gets no virtual
    feature. Returns the calibrated ``(weight, bias)`` in float32 (the input unchanged, cloned,
    when no class was observed).

    >>> means = torch.tensor([[3.0, 0.0], [-3.0, 0.0]], dtype=torch.float64)
    >>> covs = torch.eye(2, dtype=torch.float64).repeat(2, 1, 1)
    >>> w, b = ccvr_calibrate(means, covs, torch.tensor([20.0, 20.0]), torch.zeros(2, 2), torch.zeros(2),
    ...                       n_virtual=20, steps=50, lr=0.1, generator=torch.Generator().manual_seed(0))
    >>> (means.float() @ w.T + b).argmax(1).tolist()
    [0, 1]
    """
    _check_ccvr(n_virtual, steps, lr, reg, reg_positive=False)
    means, covs, counts = (torch.as_tensor(t, dtype=F64) for t in (means, covs, counts))
    C, d = means.shape
    obs = counts > 0
    if not bool(obs.any()):
        return weight.clone(), bias.clone()
    pooled = (covs[counts >= 2] * counts[counts >= 2, None, None]).sum(0) / counts[counts >= 2].sum().clamp_min(1)
    feats, labels = [], []
    for c in torch.nonzero(obs).flatten().tolist():
        cov = covs[c] if counts[c] >= 2 else pooled
        L = torch.linalg.cholesky(regularized_covariance(cov, reg))
        eps = torch.randn(n_virtual, d, generator=generator, dtype=F64)
        feats.append(means[c] + eps @ L.T)
        labels.append(torch.full((n_virtual,), c, dtype=torch.long))
    x, y = torch.cat(feats).float(), torch.cat(labels)
    head = torch.nn.Linear(d, C)
    with torch.no_grad():
        head.weight.copy_(weight)
        head.bias.copy_(bias)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    for _ in range(steps):  # full batch, rows in drawing order (see the module docstring)
        loss = F.cross_entropy(head(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.weight.detach().clone(), head.bias.detach().clone()


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
    _, info = torch.linalg.cholesky_ex(covs + reg * scale[:, None, None] * eye)  # what ccvr_calibrate factorizes
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
    Adam steps from ``init`` (:func:`ccvr_calibrate`). Needs the per-class Gram matrices.

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

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> z = torch.tensor([[0.0, 0.0], [0.2, 0.1], [4.0, 4.0], [4.1, 3.8]])
    >>> m = ClassMoments.from_features(z, torch.tensor([0, 0, 2, 2]), 3)
    >>> head = CCVRHead(n_virtual=20, steps=200, lr=0.1).fit(m, generator=torch.Generator().manual_seed(0))
    >>> head.predict(torch.tensor([[0.1, 0.0], [4.0, 3.9]])).tolist(), head.classes_.tolist()
    ([0, 2], [True, False, True])
    """

    needs = "class_grams"

    def __init__(self, n_virtual: int = 100, steps: int = 100, lr: float = 0.01, reg: float = 0.1) -> None:
        self.n_virtual = n_virtual
        self.steps = steps
        self.lr = lr
        self.reg = reg

    def check_params(self) -> "CCVRHead":
        _check_ccvr(self.n_virtual, self.steps, self.lr, self.reg)
        return self

    def fit(self, moments, *, generator: torch.Generator, init=None) -> "CCVRHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition).

        ``generator`` draws the virtual features; ``init`` is ``(weight (C, d), bias (C,))`` to
        start from (e.g. the backbone's trained linear head), default zeros.
        """
        self.check_params()
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator (randomness is an argument), got {type(generator).__name__}")
        m = _check_moments(moments, class_grams=True, head="CCVRHead")
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
        w, b = ccvr_calibrate(self.means_, self.covariances_, m.counts, w0, b0, n_virtual=self.n_virtual, steps=self.steps,
                              lr=float(self.lr), reg=float(self.reg), generator=generator)
        w, b = w.to(torch.float64), b.to(torch.float64)
        if not bool(torch.isfinite(w).all() and torch.isfinite(b).all()):  # e.g. a huge lr diverged
            raise ValueError(f"CCVR's training diverged (non-finite head) with lr={self.lr!r}; lower lr or steps")
        self.coef_ = torch.where(obs[:, None], w, torch.zeros_like(w))
        self.intercept_ = torch.where(obs, b, torch.full_like(b, -math.inf))
        return self


__all__ = ["CCVRHead", "ccvr_calibrate"]
