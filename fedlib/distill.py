r"""Knowledge transfer through a public unlabeled set: pseudo-labels, their distances and
aggregation, and distillation with a consistency regularizer.

Model-agnostic federated learning exchanges predictions, never parameters: every client labels
the same public unlabeled set :math:`U` with its own model, and what crosses the network is an
``(|U|, C)`` matrix of class probabilities. This module holds that vocabulary, shared by COSMOS
(Ge, Yeoh, Zhang and Vorobeychik, "COSMOS: Model-Agnostic Personalized Federated Learning with
Clustered Server Models and Pseudo-Label-Only Communication", arXiv:2605.11165, Sections 4-5) and
its baselines FedMD, FedCT and COMET (:mod:`fedlib.algorithms.fedmd`):

- :class:`PublicSet` and :func:`make_public_set`: :math:`U`, a seeded share of every class held
  out from all clients, its labels discarded (the book keeps them aside for analysis only);
- :func:`soft_labels` / :func:`pseudo_labels`: :math:`f(U)` at temperature :math:`T`
  (:math:`T = 0`: one-hot hard labels), and :func:`check_pseudo_labels`, the validation every
  received matrix passes;
- :func:`l1_distances`: the clustering distance :math:`d(i, j) = \sum_{x \in U} \lVert f_i(x) -
  f_j(x) \rVert_1` (Section 4.1, Step 2);
- :func:`aggregate_labels` (mean, coordinate median or maximum, confidence-weighted) and
  :func:`majority_vote` (FedCT's hard consensus);
- :func:`augment`, :func:`consistency_loss` and :func:`distill`: Eq. (1)/(2), the KL loss to the
  targets plus :math:`\lambda` times the consistency regularizer
  :math:`r_\mathcal{B}(g)(x) = \sum_{x' \in S} \ell(g(x'), g(x))` over augmentations :math:`S` of
  :math:`x`;
- :func:`margins` and :func:`lemma52`: the quantities of Lemma 5.2; :func:`lemma52_chain`, the
  terms of its proof's chain (Appendix B.1), and :func:`margin_profile_bound`, the lemma with the
  margin floor replaced by the best threshold.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .data import ArrayDataset
from .encoders import public_split
from .training import TrainConfig, local_train
from .validation import is_int, is_real

LABEL_RULES = ("mean", "median", "max", "confidence")
"""How a cluster's pseudo-labels are combined (:func:`aggregate_labels`)."""

SIMPLEX_TOL = 1e-3
"""How far a row of a received pseudo-label matrix may sum from 1 (float32 softmax rounding)."""


def _row_digests(x: Tensor) -> list[bytes]:
    flat = x.detach().to(torch.float32).contiguous().reshape(len(x), -1).numpy()
    return [hashlib.sha1(row.tobytes()).digest() for row in flat]


@dataclass(frozen=True)
class PublicSet:
    """The public unlabeled set :math:`U` every client and the server can read: inputs only.

    Attributes
    ----------
    x : torch.Tensor of shape (n, ...)
        The inputs, as the clients' data (images ``(n, c, h, w)`` or vectors ``(n, d)``).
    name : str
        Where it came from (for tables).
    """

    x: Tensor
    name: str = "public"
    _digests: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.x, Tensor) or not self.x.is_floating_point():
            raise ValueError(f"the public set's inputs must be a floating tensor, got {type(self.x).__name__}")
        if len(self.x) == 0:
            raise ValueError("the public set U is empty; valid: at least one sample (a share of every class, make_public_set)")

    def __len__(self) -> int:
        return len(self.x)

    def overlap(self, x: Tensor) -> int:
        """How many rows of ``x`` are also in :math:`U` (byte-identical inputs)."""
        if "rows" not in self._digests:
            self._digests["rows"] = frozenset(_row_digests(self.x))
        rows = self._digests["rows"]
        return sum(d in rows for d in _row_digests(x)) if len(x) else 0


def make_public_set(dataset: ArrayDataset, share: float = 0.2, *, seed: int = 0) -> tuple[PublicSet, ArrayDataset, np.ndarray]:
    """Hold out ``share`` of every class as the public set :math:`U`, labels discarded.

    Returns ``(public, rest, hidden_labels)``: the federation is built from ``rest`` only (so
    :math:`U` overlaps no client's data and no test set); ``hidden_labels`` of shape ``(|U|,)``
    are :math:`U`'s true classes, which no method receives (the book's analysis reads them:
    Lemma 5.2, purity). The split is :func:`fedlib.encoders.public_split` (stream ``PUBLIC_SPLIT``).

    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=10, n_classes=3, dim=2, seed=0).dataset
    >>> u, rest, y = make_public_set(ds, 0.2, seed=0)
    >>> len(u), len(rest), np.bincount(y).tolist()
    (6, 24, [2, 2, 2])
    """
    if not (is_real(share) and 0.0 < share < 1.0):
        raise ValueError(f"share must be a number in (0, 1), got {share!r}")
    pub, rest = public_split(dataset, float(share), seed=seed)
    public = PublicSet(dataset.x[pub].clone(), name=f"{dataset.name}:public")
    return public, dataset.subset(rest), dataset.labels_np[pub].copy()


def soft_labels(logits: Tensor, temperature: float) -> Tensor:
    r"""Pseudo-labels from logits: :math:`\mathrm{softmax}(z / T)`, or one-hot :math:`\arg\max z`
    when :math:`T = 0` (hard labels; ties to the lowest class).

    >>> soft_labels(torch.tensor([[2.0, 0.0]]), 0).tolist()
    [[1.0, 0.0]]
    """
    check_temperature(temperature)
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=1), logits.shape[1]).to(logits.dtype)
    # shifted by the row maximum first, so that a tiny T cannot overflow z / T (it tends to one-hot)
    return torch.softmax((logits - logits.max(dim=1, keepdim=True).values) / temperature, dim=1)


def check_temperature(temperature: float) -> float:
    """``temperature`` if it is a finite number >= 0 (0 means hard labels), else a ValueError."""
    if not (is_real(temperature) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature T must be a finite number >= 0 (0: hard labels), got {temperature!r}")
    return float(temperature)


@torch.no_grad()
def pseudo_labels(model: nn.Module, x: Tensor, temperature: float = 1.0, batch_size: int = 256) -> Tensor:
    """``model``'s pseudo-labels on ``x``, float32 of shape ``(n, C)`` (:func:`soft_labels`)."""
    model.eval()
    out = [soft_labels(model(x[i:i + batch_size]).float(), temperature) for i in range(0, len(x), batch_size)]
    return torch.cat(out)


def check_pseudo_labels(labels: Tensor, n: int, n_classes: int, *, who: str = "pseudo-labels") -> Tensor:
    """``labels`` if it is a finite ``(n, n_classes)`` matrix whose rows lie on the probability
    simplex (entries >= 0, rows summing to 1 within :data:`SIMPLEX_TOL`); else a ValueError
    that names ``who`` and what is wrong."""
    if not isinstance(labels, Tensor) or labels.ndim != 2 or tuple(labels.shape) != (n, n_classes):
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"{who} have shape {shape}; valid: ({n}, {n_classes}), one row per public sample and a column per class")
    if not labels.is_floating_point() or not bool(torch.isfinite(labels).all()):
        raise ValueError(f"{who} must be finite floating-point probabilities")
    low = float(labels.min()) if labels.numel() else 0.0
    sums = labels.double().sum(dim=1)
    worst = float((sums - 1).abs().max()) if len(sums) else 0.0
    if low < 0 or worst > SIMPLEX_TOL:
        raise ValueError(f"{who} are not on the probability simplex (smallest entry {low:.3g}, a row sums "
                         f"{worst:.3g} away from 1); valid: rows of probabilities that sum to 1")
    return labels


def l1_distances(labels: Tensor) -> np.ndarray:
    r"""The pairwise pseudo-label distances of COSMOS's clustering (Section 4.1, Step 2),

    .. math:: d(i, j) = \sum_{x \in U} \lVert f_i(x) - f_j(x) \rVert_1 ,

    float64 of shape ``(m, m)`` from ``labels`` of shape ``(m, |U|, C)``.

    >>> l1_distances(torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])).tolist()
    [[0.0, 2.0], [2.0, 0.0]]
    """
    flat = labels.reshape(len(labels), -1).double()
    return torch.cdist(flat, flat, p=1).numpy()


def aggregate_labels(labels: Tensor, rule: str = "mean") -> Tensor:
    r"""One pseudo-label matrix from a cluster's ``labels`` of shape ``(m, |U|, C)``, on the simplex.

    - ``"mean"`` (COSMOS's :math:`\bar f_k`): :math:`\frac{1}{m} \sum_i f_i(x)`;
    - ``"median"``: the coordinate-wise median over clients, each row renormalized to sum to 1
      (uniform where every coordinate's median is 0);
    - ``"max"``: the coordinate-wise maximum over clients, each row renormalized (the paper's
      Figure 9 compares mean, median and max);
    - ``"confidence"``: each client weighted per sample by its confidence
      :math:`\max_c f_i(x)_c`, the weights of a sample summing to 1.

    >>> aggregate_labels(torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]]]), "mean").tolist()
    [[0.75, 0.25]]
    """
    if rule not in LABEL_RULES:
        raise ValueError(f"unknown pseudo-label aggregation {rule!r}; valid: {', '.join(LABEL_RULES)}")
    if labels.ndim != 3 or len(labels) == 0:
        raise ValueError(f"need labels of shape (m >= 1, n, C), got {tuple(labels.shape)}")
    if rule == "mean":
        return labels.mean(dim=0)
    if rule in ("median", "max"):
        # the median: the midpoint of the two middle values when m is even
        raw = torch.quantile(labels, 0.5, dim=0) if rule == "median" else labels.max(dim=0).values
        sums = raw.sum(dim=1, keepdim=True)
        uniform = torch.full_like(raw, 1.0 / raw.shape[1])
        return torch.where(sums > 0, raw / sums.clamp_min(torch.finfo(raw.dtype).tiny), uniform)
    conf = labels.max(dim=2).values  # (m, n)
    w = conf / conf.sum(dim=0, keepdim=True)
    return (w.unsqueeze(2) * labels).sum(dim=0)


def majority_vote(hard: Tensor, n_classes: int) -> Tensor:
    """FedCT's consensus: the most voted class per public sample from ``hard`` labels of shape
    ``(m, n)``; ties go to the lowest class. int64 of shape ``(n,)``.

    >>> majority_vote(torch.tensor([[0, 2], [1, 2], [1, 0]]), 3).tolist()
    [1, 2]
    """
    counts = F.one_hot(hard.long(), n_classes).sum(dim=0)  # (n, C)
    return counts.argmax(dim=1)


def augment(x: Tensor, generator: torch.Generator, *, shift: int = 1, noise: float = 0.05) -> Tensor:
    r"""A draw from the transformation ball :math:`\mathcal{B}(x)` of Section 4.1: images
    (``(n, c, h, w)``) translated by an integer offset in ``[-shift, shift]`` per axis (zeros
    fill in), then every input plus Gaussian noise of standard deviation ``noise`` (the radius
    :math:`d`). Vectors get the noise only."""
    out = x
    if x.ndim == 4 and shift > 0:
        n, s = len(x), int(shift)
        h, w = x.shape[-2:]
        dy = torch.randint(-s, s + 1, (n,), generator=generator)
        dx = torch.randint(-s, s + 1, (n,), generator=generator)
        padded = F.pad(x, (s, s, s, s))
        rows = (torch.arange(h) + s + dy[:, None])[:, :, None]  # (n, h, 1)
        cols = (torch.arange(w) + s + dx[:, None])[:, None, :]  # (n, 1, w)
        out = padded[torch.arange(n)[:, None, None], :, rows, cols].permute(0, 3, 1, 2).contiguous()  # (n, h, w, c) -> (n, c, h, w)
    if noise > 0:
        out = out + noise * torch.randn(out.shape, generator=generator, dtype=out.dtype)
    return out


def kl_rows(target: Tensor, logits: Tensor) -> Tensor:
    r""":math:`\mathrm{KL}(p \,\Vert\, \mathrm{softmax}(z))` per row, shape ``(n,)``, with
    :math:`0 \log 0 = 0` (``nn.KLDivLoss`` without the reduction)."""
    return (torch.special.xlogy(target, target) - target * F.log_softmax(logits, dim=1)).sum(dim=1)


def consistency_loss(logits_aug: Tensor, logits_clean: Tensor, *, detach_target: bool = False) -> Tensor:
    r"""The consistency regularizer for one augmentation, :math:`\ell(g(x'), g(x)) =
    \mathrm{KL}(g(x) \,\Vert\, g(x'))` per row, shape ``(n,)``.

    ``detach_target=False`` is the paper's objective: :math:`g(x)` is a function of the
    parameters too, so the gradient flows through both sides. ``True`` is the authors' code:
    :math:`g(x)` is treated as a constant target, and only :math:`g(x')` is pulled toward it."""
    target = torch.softmax(logits_clean, dim=1)
    if detach_target:
        target = target.detach()
    return kl_rows(target, logits_aug)


def check_lam(lam: float) -> float:
    """``lam`` if it is a finite number >= 0, else a ValueError."""
    if not (is_real(lam) and math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lambda (the consistency weight) must be a finite number >= 0, got {lam!r}")
    return float(lam)


def distillation_objective(model: nn.Module, x: Tensor, targets: Tensor, generator: torch.Generator | None = None, *,
                           lam: float = 0.0, n_augment: int = 1, detach_target: bool = False,
                           weights: Tensor | None = None, shift: int = 1, noise: float = 0.05) -> Tensor:
    r"""Eq. (1)/(2) on a batch, as a mean over its samples:

    .. math:: \frac{1}{n} \sum_{x} w(x) \Big[\mathrm{KL}(t(x) \,\Vert\, g(x)) + \lambda \sum_{x' \in S(x)} \mathrm{KL}(g(x) \,\Vert\, g(x'))\Big]

    with ``targets`` :math:`t` of shape ``(n, C)`` and ``n_augment`` draws :math:`x' \sim`
    :func:`augment` (``shift``, ``noise``) per sample (drawn from ``generator``; none when ``lam == 0``)."""
    logits = model(x)
    per = kl_rows(targets, logits)
    if lam > 0:
        for _ in range(n_augment):
            x_aug = augment(x, generator, shift=shift, noise=noise)
            per = per + lam * consistency_loss(model(x_aug), logits, detach_target=detach_target)
    if weights is not None:
        per = per * weights
    return per.mean()


def distill(model: nn.Module, x: Tensor, targets: Tensor, cfg: TrainConfig, generator: torch.Generator, *,
            lam: float = 0.0, n_augment: int = 1, detach_target: bool = False, weights: Tensor | None = None,
            shift: int = 1, noise: float = 0.05) -> float:
    """Train ``model`` in place on the public inputs ``x`` toward the soft ``targets`` (shape
    ``(n, C)``) by :func:`distillation_objective`, mini-batches and optimizer from ``cfg``;
    returns the mean loss. ``weights`` (shape ``(n,)``) are Eq. (2)'s :math:`w_i(x)` (default 1)."""
    lam = check_lam(lam)
    if not (is_int(n_augment) and n_augment >= 1):
        raise ValueError(f"n_augment must be an int >= 1, got {n_augment!r}")
    index = torch.arange(len(x))

    def loss_fn(m: nn.Module, xb: Tensor, ib: Tensor) -> Tensor:
        return distillation_objective(m, xb, targets[ib], generator, lam=lam, n_augment=n_augment, detach_target=detach_target,
                                      weights=None if weights is None else weights[ib], shift=shift, noise=noise)

    return local_train(model, x, index, cfg, generator, loss_fn=loss_fn)


def margins(labels: Tensor) -> Tensor:
    r"""The confidence margin :math:`\Delta_g(x) = g(x)_{(1)} - g(x)_{(2)}` per row (Section 5.1), shape ``(n,)``."""
    top = labels.topk(2, dim=1).values
    return top[:, 0] - top[:, 1]


@dataclass(frozen=True)
class Lemma52:
    r"""The terms of Lemma 5.2 for one client :math:`i` of a cluster, on its supported public
    points :math:`U_i`: errors are fractions of :math:`U_i`; ``B`` is a **sum** over
    :math:`U_i` of per-sample :math:`\ell_1` distances (so :math:`2B/(\gamma |U_i|)` is a fraction
    too); ``bad`` counts the points where the cluster mean's argmax differs from the client's."""

    size: int
    err_client: float
    err_mean: float
    gamma: float
    B: float
    bad: int
    bound: float

    @property
    def holds(self) -> bool:
        return self.err_mean <= self.bound + 1e-12


def lemma52(members: Tensor, i: int, truth: np.ndarray | Tensor, support: np.ndarray | Tensor, *,
            radius: float | None = None) -> Lemma52:
    r"""Lemma 5.2 measured: :math:`\mathrm{Err}_{U_i}(\bar f_k) \le \mathrm{Err}_{U_i}(f_i) + 2B / (\gamma |U_i|)`.

    Parameters
    ----------
    members : tensor of shape (m, n, C)
        The cluster's pseudo-labels on :math:`U`; row ``i`` is the client's own.
    truth : shape (n,)
        :math:`U`'s true labels (hidden from every method; analysis only).
    support : bool of shape (n,)
        :math:`U_i`, the public points in the client's support.
    radius : float or None
        :math:`B`. ``None``: the proof's quantity, half the largest distance from ``i`` to a
        member on :math:`U_i` (so that :math:`2B` bounds it); else the given value.
    """
    support = torch.as_tensor(np.asarray(support), dtype=torch.bool)
    truth = torch.as_tensor(np.asarray(truth), dtype=torch.long)
    own, mean = members[i][support], members.mean(dim=0)[support]
    y = truth[support]
    size = int(support.sum())
    if size == 0:
        raise ValueError("the client's supported public set U_i is empty; the lemma needs |U_i| >= 1")
    gamma = float(margins(own).min())
    dist = (members[:, support] - own.unsqueeze(0)).abs().sum(dim=(1, 2))
    B = float(dist.max()) / 2 if radius is None else float(radius)
    bound = float("inf") if gamma <= 0 else 2 * B / (gamma * size)
    err_client = float((own.argmax(1) != y).double().mean())
    return Lemma52(size=size, err_client=err_client, err_mean=float((mean.argmax(1) != y).double().mean()),
                   gamma=gamma, B=B, bad=int((mean.argmax(1) != own.argmax(1)).sum()), bound=err_client + bound)


class Lemma52Chain(NamedTuple):
    r"""The terms of the proof chain of Lemma 5.2 (Appendix B.1) for client :math:`i`, each a sum
    over :math:`U_i`: :math:`\gamma |\mathrm{Bad}| \le` ``S`` :math:`\le` ``mean_distance``
    :math:`\le` ``max_distance`` :math:`= 2B`; ``diameter`` is the cluster's largest distance on
    :math:`U_i` (Assumption 5.1's :math:`B` read on :math:`U_i`)."""

    S: float
    mean_distance: float
    max_distance: float
    diameter: float


def lemma52_chain(members: Tensor, i: int, support: np.ndarray | Tensor) -> Lemma52Chain:
    r"""The proof chain of Lemma 5.2 measured for client ``i`` of a cluster.

    Parameters
    ----------
    members : tensor of shape (m, n, C)
        The cluster's pseudo-labels on :math:`U`; row ``i`` is the client's own.
    i : int
        The client's row.
    support : bool of shape (n,)
        :math:`U_i`, the public points in the client's support.

    Returns
    -------
    Lemma52Chain
        :math:`S = \sum_{x \in U_i} \lVert \bar f_k(x) - f_i(x) \rVert_1` (step iii), the mean
        and the largest over members :math:`j` of :math:`d_{U_i}(i, j)` (the distance summed over
        :math:`U_i` only; :math:`j = i` included, as in the mean :math:`\bar f_k`), and the
        cluster's largest :math:`d_{U_i}`.

    Examples
    --------
    >>> members = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]], dtype=torch.float64)
    >>> lemma52_chain(members, 0, np.array([True, True]))
    Lemma52Chain(S=1.0, mean_distance=1.0, max_distance=2.0, diameter=2.0)
    """
    sup = torch.as_tensor(np.asarray(support), dtype=torch.bool)
    own, mean = members[i][sup], members.mean(dim=0)[sup]
    S = float((mean - own).abs().sum())
    dU = torch.from_numpy(l1_distances(members[:, sup]))  # (m, m): d_{U_i} between every two members
    return Lemma52Chain(S, float(dU[i].mean()), float(dU[i].max()), float(dU.max()))


def margin_profile_bound(own_on_support: Tensor, two_b: float) -> float:
    r"""Lemma 5.2's extra term with the margin floor :math:`\gamma` replaced by the best threshold,

    .. math:: \min_\tau \Big[ P_{U_i}(\Delta_{f_i} < \tau) + \frac{2B}{\tau |U_i|} \Big] ,

    over the thresholds :math:`\tau` among the client's positive margins: the points below
    :math:`\tau` count as bad, and step (ii) of the proof holds with :math:`\tau` on the others;
    :math:`\tau = \gamma` gives the lemma's own term.

    Parameters
    ----------
    own_on_support : tensor of shape (n_i, C)
        The client's pseudo-labels on the ``n_i`` points of :math:`U_i`.
    two_b : float
        :math:`2B`, a sum over :math:`U_i` (:func:`lemma52`'s ``2 * B``).

    Returns
    -------
    float
        The smallest term; ``inf`` when no margin is positive.

    Examples
    --------
    >>> own = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.55, 0.45], [0.95, 0.05]])
    >>> round(margin_profile_bound(own, 0.4), 6)  # tau = 0.8: 2 of the 4 margins below it, 0.5 + 0.4 / (0.8 * 4)
    0.625
    """
    delta = np.sort(margins(own_on_support).double().numpy())
    size = len(delta)
    below = np.searchsorted(delta, delta, side="left") / size  # the share of points strictly below each margin
    with np.errstate(divide="ignore"):
        terms = np.where(delta > 0, below + two_b / (delta * size), np.inf)
    return float(terms.min())


__all__ = ["LABEL_RULES", "SIMPLEX_TOL", "Lemma52", "Lemma52Chain", "PublicSet", "aggregate_labels", "augment", "check_lam", "check_pseudo_labels",
           "check_temperature", "consistency_loss", "distill", "distillation_objective", "kl_rows", "l1_distances",
           "lemma52", "lemma52_chain", "majority_vote", "make_public_set", "margin_profile_bound", "margins", "pseudo_labels", "soft_labels"]
