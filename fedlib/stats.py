r"""Additive sufficient statistics of features per class: counts, sums and second moments.

A client summarizes its features :math:`z_i \in \mathbb{R}^d` with labels :math:`y_i` by, for each
class :math:`c`,

.. math:: n_c = \sum_i [y_i = c], \qquad s_c = \sum_{i: y_i = c} z_i, \qquad
          G_c = \sum_{i: y_i = c} z_i z_i^\top ,

and the server merges clients by **addition only**: the statistics of a union of data sets are the
sums of the statistics. Every class mean, class covariance, pooled within-class covariance and
total covariance that the papers use is a function of the merged :math:`(n, s, G)`, so it equals
the centralized computation on the pooled features without any feature vector leaving a client
(FedGRC, Appendix A-E; GGEUR, Eq. 4 (law of total covariance); MPT, per-round re-embedding;
FedCGS's class counts, sums and second moments).

All arithmetic is float64. A class with no samples has a NaN mean and is skipped by the pooled
quantities.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from .messages import Message


@dataclass(frozen=True)
class ClassMoments:
    """Per-class counts, sums and Gram matrices of d-dimensional features.

    Attributes
    ----------
    counts : torch.Tensor of shape (C,), float64
    sums : torch.Tensor of shape (C, d), float64
    grams : torch.Tensor of shape (C, d, d), float64, :math:`G_c = \\sum z z^\\top`

    Examples
    --------
    >>> z = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]])
    >>> m = ClassMoments.from_features(z, torch.tensor([0, 0, 1]), n_classes=2)
    >>> m.means()
    tensor([[2., 1.],
            [5., 5.]], dtype=torch.float64)
    >>> (m + m).counts
    tensor([4., 2.], dtype=torch.float64)
    """

    counts: torch.Tensor
    sums: torch.Tensor
    grams: torch.Tensor

    def __post_init__(self) -> None:
        c = self.counts.shape[0]
        if self.counts.ndim != 1 or self.sums.ndim != 2 or self.sums.shape[0] != c or self.grams.shape != (c, self.sums.shape[1], self.sums.shape[1]):
            raise ValueError(
                f"inconsistent shapes: counts {tuple(self.counts.shape)}, sums {tuple(self.sums.shape)}, "
                f"grams {tuple(self.grams.shape)}; expected (C,), (C, d), (C, d, d)"
            )

    @property
    def n_classes(self) -> int:
        return int(self.counts.shape[0])

    @property
    def dim(self) -> int:
        return int(self.sums.shape[1])

    @classmethod
    def zeros(cls, n_classes: int, dim: int) -> "ClassMoments":
        f = torch.float64
        return cls(torch.zeros(n_classes, dtype=f), torch.zeros(n_classes, dim, dtype=f), torch.zeros(n_classes, dim, dim, dtype=f))

    @classmethod
    def from_features(cls, features: torch.Tensor, labels: torch.Tensor, n_classes: int) -> "ClassMoments":
        """Statistics of ``features`` (n, d) with integer ``labels`` (n,) in [0, n_classes)."""
        if features.ndim != 2 or labels.ndim != 1 or len(features) != len(labels):
            raise ValueError(f"need features (n, d) and labels (n,), got {tuple(features.shape)} and {tuple(labels.shape)}")
        labels = labels.long()
        if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
            bad = int(labels.min()) if int(labels.min()) < 0 else int(labels.max())
            raise ValueError(f"label {bad} outside the valid range [0, {n_classes})")
        z = features.detach().to(torch.float64)
        d = z.shape[1]
        counts = torch.bincount(labels, minlength=n_classes).to(torch.float64)
        sums = torch.zeros(n_classes, d, dtype=torch.float64).index_add_(0, labels, z)  # (C, d)
        grams = torch.zeros(n_classes, d, d, dtype=torch.float64)
        for c in torch.unique(labels).tolist():  # one (n_c, d)^T (n_c, d) product per class: O(n d^2) in all
            zc = z[labels == c]
            grams[c] = zc.T @ zc
        return cls(counts, sums, grams)

    def merge(self, other: "ClassMoments") -> "ClassMoments":
        """The statistics of the union: element-wise sums."""
        if (self.n_classes, self.dim) != (other.n_classes, other.dim):
            raise ValueError(f"cannot merge moments of shape {(self.n_classes, self.dim)} and {(other.n_classes, other.dim)}")
        return ClassMoments(self.counts + other.counts, self.sums + other.sums, self.grams + other.grams)

    __add__ = merge

    @staticmethod
    def sum(parts: Iterable["ClassMoments"]) -> "ClassMoments":
        """Merge many (e.g. one per client): one allocation, then in-place sums (the parts are not modified)."""
        parts = list(parts)
        if not parts:
            raise ValueError("need at least one ClassMoments to sum")
        first = parts[0]
        counts, sums, grams = first.counts.clone(), first.sums.clone(), first.grams.clone()
        for p in parts[1:]:
            if (p.n_classes, p.dim) != (first.n_classes, first.dim):
                raise ValueError(f"cannot merge moments of shape {(first.n_classes, first.dim)} and {(p.n_classes, p.dim)}")
            counts += p.counts
            sums += p.sums
            grams += p.grams
        return ClassMoments(counts, sums, grams)

    # ----- derived quantities ---------------------------------------------------------------
    @property
    def observed(self) -> torch.Tensor:
        """Boolean (C,): classes with at least one sample."""
        return self.counts > 0

    def means(self) -> torch.Tensor:
        r"""Class means :math:`\mu_c = s_c / n_c`, shape (C, d); NaN rows for empty classes."""
        return self.sums / self.counts[:, None]

    def class_covariances(self) -> torch.Tensor:
        r"""Biased (1/n) class covariances :math:`G_c/n_c - \mu_c\mu_c^\top`, shape (C, d, d); NaN for empty classes."""
        mu = self.means()
        return self.grams / self.counts[:, None, None] - mu[:, :, None] * mu[:, None, :]

    def within_scatter(self, centers: torch.Tensor | None = None) -> torch.Tensor:
        r"""Scatter about ``centers`` (default: the class means), summed over observed classes, (d, d).

        .. math:: S = \sum_c \big(G_c - s_c m_c^\top - m_c s_c^\top + n_c m_c m_c^\top\big)
        """
        obs = self.observed
        if centers is None:  # about the class means: sum_c G_c - t_c t_c^T / n_c, no (C, d, d) temporary
            t = self.sums[obs] / torch.sqrt(self.counts[obs])[:, None]  # (C_obs, d)
            scatter = self.grams.sum(0) - t.T @ t
            return 0.5 * (scatter + scatter.T)
        m = centers.to(torch.float64)
        m, s, g, n = m[obs], self.sums[obs], self.grams[obs], self.counts[obs]
        outer = lambda a, b: a[:, :, None] * b[:, None, :]  # noqa: E731
        return (g - outer(s, m) - outer(m, s) + n[:, None, None] * outer(m, m)).sum(0)

    def pooled_covariance(self, centers: torch.Tensor | None = None, ddof: int = 0) -> torch.Tensor:
        r"""Pooled within-class covariance :math:`S / (N - \text{ddof})`, shape (d, d).

        With ``ddof = n_observed_classes`` and the class means as centers this is the LDA estimate
        (scikit-learn's ``LinearDiscriminantAnalysis`` uses the biased ``ddof = 0`` per class).
        """
        n = float(self.counts.sum()) - ddof
        if n <= 0:
            raise ValueError(f"pooled covariance needs more samples than ddof={ddof}, have {float(self.counts.sum()):g}")
        return self.within_scatter(centers) / n

    def total_covariance(self) -> torch.Tensor:
        r"""Covariance of all features about the global mean (1/N), shape (d, d)."""
        n = self.counts.sum()
        if float(n) <= 0:
            raise ValueError("total covariance of an empty set of features")
        mu = self.sums.sum(0) / n
        total = self.grams.sum(0) / n - mu[:, None] * mu[None, :]
        return 0.5 * (total + total.T)

    # ----- wire format ----------------------------------------------------------------------
    def to_message(self, kind: str = "statistics", prefix: str = "stats/") -> Message:
        """A message carrying the three arrays (what a client sends; no per-sample feature)."""
        return Message(arrays={prefix + "counts": self.counts, prefix + "sums": self.sums, prefix + "grams": self.grams}, kind=kind)

    @classmethod
    def from_message(cls, message: Message, prefix: str = "stats/") -> "ClassMoments":
        a = message.with_prefix(prefix)
        return cls(a["counts"], a["sums"], a["grams"])


@torch.no_grad()
def feature_moments(model, x: torch.Tensor, y: torch.Tensor, n_classes: int, *, layers=None, batch_size: int = 256) -> ClassMoments:
    """Class moments of a model's pooled features on ``(x, y)``, computed in batches.

    ``layers`` (a list of layer names of a :class:`fedlib.models.FeatureModel`) are concatenated in
    the given order; default: the penultimate features.
    """
    model.eval()
    total = None
    for i in range(0, len(x), batch_size):
        feats = model.features(x[i : i + batch_size], layers)
        z = torch.cat(list(feats.values()), dim=1)
        part = ClassMoments.from_features(z, y[i : i + batch_size], n_classes)
        total = part if total is None else total + part
    if total is None:
        dim = sum(model.feature_dims[name] for name in (layers or ("penultimate",)))
        total = ClassMoments.zeros(n_classes, dim)
    return total
