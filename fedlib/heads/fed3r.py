r"""Fed3R: a closed-form ridge-regression head from the clients' moments.

Fanì et al., "Accelerating Heterogeneous Federated Learning with Closed-form Classifiers", ICML
2024, arXiv:2406.01116 (Fed3R; a statistical-head baseline of FedGRC, Section V-B): ridge
regression of one-hot labels on :math:`\tilde\phi = [\phi; 1]`,

.. math:: W = \big(\lambda I + \textstyle\sum_i \tilde\phi_i\tilde\phi_i^\top\big)^{-1}
          \textstyle\sum_i \tilde\phi_i y_i^\top, \qquad \lambda = 0.01,

each class column of :math:`W` (bias entry included) L2-normalized afterwards. Both sums are
moments: :math:`\sum\phi\phi^\top = \sum_c G_c` (the total Gram matrix), :math:`\sum \phi = \sum_c s_c`,
:math:`\sum_i \phi_i [y_i = c] = s_c` and :math:`\sum_i [y_i = c] = N_c`.
"""

from __future__ import annotations

import math

import torch

from ._linalg import _check_moments, _check_positive
from .base import LinearHead


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
    coef_, intercept_ : (C, d), (C,)

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> Fed3RHead().fit(ClassMoments.from_features(z, torch.tensor([0, 1]), 2)).predict(z).tolist()
    [0, 1]
    """

    def __init__(self, lam: float = 0.01, normalize: bool = True) -> None:
        self.lam = lam
        self.normalize = normalize

    def check_params(self) -> "Fed3RHead":
        _check_positive(self.lam, "lam")
        if not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be True or False, got {self.normalize!r}")
        return self

    def fit(self, moments) -> "Fed3RHead":
        """Fit from class moments (one ``ClassMoments`` or a list, merged by addition)."""
        self.check_params()
        lam = self.lam
        m = _check_moments(moments)
        d = m.dim
        gram = torch.empty(d + 1, d + 1, dtype=torch.float64)  # sum [phi;1][phi;1]^T
        gram[:d, :d] = m.total_gram()
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


__all__ = ["Fed3RHead"]
