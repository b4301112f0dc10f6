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

**Compact form.** Most heads need only the total Gram matrix :math:`G = \sum_c G_c` (d, d), not
the per-class :math:`G_c` (C, d, d) (:mod:`fedlib.heads` lists which): the pooled within-class
covariance is :math:`(G - \sum_c s_c s_c^\top / n_c)/N` and the total covariance
:math:`G/N - \bar z\bar z^\top`. A :class:`ClassMoments` whose ``grams`` is (d, d) is that compact
form (``form == "total"``): about C times fewer bytes on the wire, merged by addition like the
other; :meth:`ClassMoments.class_covariances` needs the per-class form.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


import torch

from .messages import Message
from .validation import is_int

GRAM_FORMS = ("class", "total")
"""The Gram forms of :class:`ClassMoments`: per-class :math:`G_c` (C, d, d), or their total (d, d)."""


def _check_form(grams) -> str:
    if grams not in GRAM_FORMS:
        raise ValueError(f"grams must be one of {GRAM_FORMS} (per-class Gram matrices or their total), got {grams!r}")
    return grams


@dataclass(frozen=True)
class ClassMoments:
    """Per-class counts, sums and Gram matrices of d-dimensional features.

    Attributes
    ----------
    counts : torch.Tensor of shape (C,), float64
    sums : torch.Tensor of shape (C, d), float64
    grams : torch.Tensor of shape (C, d, d), float64, :math:`G_c = \\sum_{i: y_i = c} z_i z_i^\\top`;
        or of shape (d, d), their total :math:`\\sum_c G_c` (the compact form, ``form == "total"``)

    Examples
    --------
    >>> z = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]])
    >>> m = ClassMoments.from_features(z, torch.tensor([0, 0, 1]), n_classes=2)
    >>> m.means()
    tensor([[2., 1.],
            [5., 5.]], dtype=torch.float64)
    >>> (m + m).counts
    tensor([4., 2.], dtype=torch.float64)
    >>> m.compact().grams.shape, m.compact().form  # the total Gram matrix only
    (torch.Size([2, 2]), 'total')
    """

    counts: torch.Tensor
    sums: torch.Tensor
    grams: torch.Tensor

    def __post_init__(self) -> None:
        c = self.counts.shape[0]
        ok = self.counts.ndim == 1 and self.sums.ndim == 2 and self.sums.shape[0] == c
        d = self.sums.shape[1] if self.sums.ndim == 2 else -1
        if not ok or self.grams.shape not in ((c, d, d), (d, d)):
            raise ValueError(
                f"inconsistent shapes: counts {tuple(self.counts.shape)}, sums {tuple(self.sums.shape)}, "
                f"grams {tuple(self.grams.shape)}; expected (C,), (C, d), and (C, d, d) or (d, d)"
            )

    @property
    def form(self) -> str:
        """``"class"`` (per-class Gram matrices, (C, d, d)) or ``"total"`` (their total, (d, d))."""
        return "class" if self.grams.ndim == 3 else "total"

    @property
    def n_classes(self) -> int:
        return int(self.counts.shape[0])

    @property
    def dim(self) -> int:
        return int(self.sums.shape[1])

    @classmethod
    def zeros(cls, n_classes: int, dim: int, *, grams: str = "class") -> "ClassMoments":
        """Zero moments (no sample) of ``n_classes`` classes in dimension ``dim``, in the Gram form ``grams``."""
        f = torch.float64
        shape = (n_classes, dim, dim) if _check_form(grams) == "class" else (dim, dim)
        return cls(torch.zeros(n_classes, dtype=f), torch.zeros(n_classes, dim, dtype=f), torch.zeros(shape, dtype=f))

    @classmethod
    def from_features(cls, features: torch.Tensor, labels: torch.Tensor, n_classes: int, *,
                      grams: str = "class") -> "ClassMoments":
        """Statistics of ``features`` (n, d) with integer ``labels`` (n,) in [0, n_classes).

        ``features`` must be finite; ``labels`` an integer tensor, or a floating one whose values
        are exact integers (e.g. ``2.0``; ``0.5`` is refused, not truncated). ``grams="total"``
        gives the compact form (the total Gram matrix :math:`\\sum_i z_i z_i^\\top` only).

        >>> ClassMoments.from_features(torch.ones(2, 3), torch.tensor([0.5, 1.0]), 2)
        Traceback (most recent call last):
        ...
        ValueError: labels must be integer class indices in [0, 2), got 0.5 (at position 0)
        """
        form = _check_form(grams)
        features, labels = torch.as_tensor(features), torch.as_tensor(labels)
        if features.ndim != 2 or labels.ndim != 1 or len(features) != len(labels):
            raise ValueError(f"need features (n, d) and labels (n,), got {tuple(features.shape)} and {tuple(labels.shape)}")
        if not (is_int(n_classes) and n_classes >= 1):
            raise ValueError(f"n_classes must be an int >= 1, got {n_classes!r}")
        if labels.dtype == torch.bool or labels.is_complex():
            raise ValueError(f"labels must be integer class indices in [0, {n_classes}), got dtype {labels.dtype}")
        if labels.is_floating_point():
            frac = ~torch.isfinite(labels) | (labels != torch.floor(labels))
            if bool(frac.any()):
                i = int(torch.nonzero(frac)[0])
                raise ValueError(f"labels must be integer class indices in [0, {n_classes}), got {labels[i].item()!r} "
                                 f"(at position {i})")
        bad = ~torch.isfinite(features) if features.is_floating_point() or features.is_complex() else None
        if bad is not None and bool(bad.any()):
            i, j = (int(v) for v in torch.nonzero(bad)[0])
            raise ValueError(f"features must be finite, got {features[i, j].item()!r} at row {i}, column {j}")
        labels = labels.long()
        if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
            bad = int(labels.min()) if int(labels.min()) < 0 else int(labels.max())
            raise ValueError(f"label {bad} outside the valid range [0, {n_classes}) (valid labels: 0 to {n_classes - 1})")
        z = features.detach().to(torch.float64)
        d = z.shape[1]
        counts, sums = class_counts_sums(z, labels, n_classes)
        if form == "total":
            return cls(counts, sums, z.T @ z)  # (d, d): one product
        grams = torch.zeros(n_classes, d, d, dtype=torch.float64)
        for c in torch.unique(labels).tolist():  # one (n_c, d)^T (n_c, d) product per class: O(n d^2) in all
            zc = z[labels == c]
            grams[c] = zc.T @ zc
        return cls(counts, sums, grams)

    def compact(self) -> "ClassMoments":
        """The compact form: the same counts and sums, the total Gram matrix :math:`\\sum_c G_c` (d, d)."""
        return self if self.form == "total" else ClassMoments(self.counts, self.sums, self.grams.sum(0))

    def total_gram(self) -> torch.Tensor:
        """:math:`\\sum_c G_c = \\sum_i z_i z_i^\\top`, shape (d, d), from either form."""
        return self.grams.sum(0) if self.form == "class" else self.grams

    def _check_same(self, other: "ClassMoments") -> None:
        if (self.n_classes, self.dim, self.form) != (other.n_classes, other.dim, other.form):
            raise ValueError(f"cannot merge moments of shape {(self.n_classes, self.dim)} ({self.form} Grams) and "
                             f"{(other.n_classes, other.dim)} ({other.form} Grams)")

    def merge(self, other: "ClassMoments") -> "ClassMoments":
        """The statistics of the union: element-wise sums (both in the same Gram form)."""
        self._check_same(other)
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
            first._check_same(p)
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

    def _need_class_grams(self, what: str) -> None:
        if self.form != "class":
            raise ValueError(f"{what} needs the per-class Gram matrices, these moments hold their total only "
                             "(the compact form): compute them with grams='class'")

    def class_covariances(self) -> torch.Tensor:
        r"""Biased (1/n) class covariances :math:`G_c/n_c - \mu_c\mu_c^\top`, shape (C, d, d); NaN for empty classes."""
        self._need_class_grams("class_covariances()")
        mu = self.means()
        return self.grams / self.counts[:, None, None] - mu[:, :, None] * mu[:, None, :]

    def within_scatter(self, centers: torch.Tensor | None = None) -> torch.Tensor:
        r"""Scatter about ``centers`` (default: the class means), summed over observed classes, (d, d).

        .. math:: S = \sum_c \big(G_c - s_c m_c^\top - m_c s_c^\top + n_c m_c m_c^\top\big)
        """
        obs = self.observed
        if centers is None:  # about the class means: sum_c G_c - t_c t_c^T / n_c, no (C, d, d) temporary
            t = self.sums[obs] / torch.sqrt(self.counts[obs])[:, None]  # (C_obs, d)
            scatter = self.total_gram() - t.T @ t
            return 0.5 * (scatter + scatter.T)
        self._need_class_grams("within_scatter(centers)")
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
        total = self.total_gram() / n - mu[:, None] * mu[None, :]
        return 0.5 * (total + total.T)

    # ----- wire format ----------------------------------------------------------------------
    def to_message(self, kind: str = "statistics", prefix: str = "stats/") -> Message:
        """A message carrying the three arrays (what a client sends; no per-sample feature):
        :math:`C(1 + d + d^2)` float64 values, or :math:`C(1 + d) + d^2` in the compact form."""
        return Message(arrays={prefix + "counts": self.counts, prefix + "sums": self.sums, prefix + "grams": self.grams}, kind=kind)

    @classmethod
    def from_message(cls, message: Message, prefix: str = "stats/") -> "ClassMoments":
        a = message.with_prefix(prefix)
        return cls(a["counts"], a["sums"], a["grams"])


def class_counts_sums(z: torch.Tensor, labels: torch.Tensor, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first two of the additive statistics, without the Gram matrices: class counts
    :math:`n_c` (C,) and class sums :math:`t_c = \\sum_{i: y_i = c} z_i` (C, d), float64 (what SASP's
    clients compute locally). ``z`` (n, d) and integer ``labels`` (n,) in [0, n_classes) are
    assumed valid (:meth:`ClassMoments.from_features` checks them).

    >>> class_counts_sums(torch.tensor([[1.0], [2.0], [4.0]]), torch.tensor([0, 1, 1]), 3)
    (tensor([1., 2., 0.], dtype=torch.float64), tensor([[1.],
            [6.],
            [0.]], dtype=torch.float64))
    """
    z = z.to(torch.float64)
    counts = torch.bincount(labels, minlength=n_classes).to(torch.float64)
    sums = torch.zeros(n_classes, z.shape[1], dtype=torch.float64).index_add_(0, labels, z)  # (C, d)
    return counts, sums


def feature_moments(model, x: torch.Tensor, y: torch.Tensor, n_classes: int, *, layers=None, batch_size: int = 256,
                    grams: str = "class") -> ClassMoments:
    """Class moments of a model's pooled features on ``(x, y)``.

    The features are :meth:`fedlib.models.FeatureModel.extract` of ``layers`` (a list of layer
    names, concatenated in the given order; default: the penultimate features), in batches of
    ``batch_size``, model in evaluation mode; their moments are accumulated over consecutive
    chunks of ``batch_size`` rows (the summation order of every statistics round so far).
    ``grams="total"`` gives the compact form.
    """
    _check_form(grams)
    z = model.extract(x, layers, batch_size)  # (n, d) float32
    total = None
    for i in range(0, len(z), batch_size):
        part = ClassMoments.from_features(z[i : i + batch_size], y[i : i + batch_size], n_classes, grams=grams)
        total = part if total is None else total + part
    if total is None:
        total = ClassMoments.zeros(n_classes, int(z.shape[1]), grams=grams)
    return total
