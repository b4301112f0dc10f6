r"""FedNCM: normalized class means as the weights of a linear readout.

Legate et al., "Guiding The Last Layer in Federated Learning with Pre-Trained Models", NeurIPS
2023, arXiv:2306.03937 (FedNCM; a statistical-head baseline of FedGRC, Section V-B): the weights
are the L2-normalized class means of the unnormalized features, no bias,

.. math:: w_c = \mu_c / \lVert \mu_c \rVert_2, \qquad b_c = 0, \qquad s_c(z) = z^\top w_c .

It needs the clients' class counts and sums only.
"""

from __future__ import annotations

import math

import torch

from ._linalg import _check_moments
from .base import LinearHead


class FedNCMHead(LinearHead):
    r"""FedNCM: cosine-style readout with L2-normalized class means as weights, no bias.

    .. math:: s_c(z) = z^\top \mu_c / \lVert\mu_c\rVert_2

    A zero class mean (e.g. all-zero features) keeps a zero weight row instead of 0/0.

    Attributes
    ----------
    means_ : (C, d) class means (zero rows for classes without samples)
    coef_, intercept_ : (C, d), (C,): normalized means, 0 (:math:`-\infty` for absent classes)

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
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


__all__ = ["FedNCMHead"]
