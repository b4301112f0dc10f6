r"""Grouping clients: head descriptors, k-means with k chosen by silhouette, soft membership.

The server-side geometry of HDC-FL (Dehghanpour, Noori, Tanghatari, Omidvar and Rabiee, "From
Classifier Heads to Encoder Prototypes: Personalized Federated Learning with Head-Derived
Clustering", arXiv:2610.30075), Sections 3.2-3.3 and Appendix A.1, as free functions and one
estimator. The k-means, the silhouette score and the adjusted Rand index are scikit-learn's.

* :func:`head_descriptors`: each client's classifier head :math:`H_k = [W_k, b_k]` of shape
  ``(C, d + 1)``, projected on a shared rank-``r`` basis of the class axis and L2-normalized
  (the paper's "normalized low-rank descriptor": ``Cd`` values become ``rd``), or flattened
  raw (the ablation);
* :class:`SilhouetteKMeans`: k-means for every ``k`` of a range, the ``k`` of the highest
  silhouette kept (Appendix A.1; ``k = 1`` is population-level averaging, no k-means);
* :func:`soft_membership` / :func:`hard_membership`: a softmax of descriptor-to-centroid cosine
  similarities over a temperature (Section 3.3), and its ``T -> 0`` limit;
* :func:`membership_entropy`, :func:`descriptor_drift`, :func:`assignment_agreement`: the
  stability diagnostics of the activation gate (Section 3.5, Appendix A.2).

COSMOS's greedy clustering (Ge, Yeoh, Zhang and Vorobeychik, arXiv:2605.11165, Algorithm 1) lives
here too: :class:`GreedyB0` groups clients from a matrix of pairwise distances (their
pseudo-labels' :math:`\ell_1` distances, :func:`fedlib.distill.l1_distances`) with a threshold
:math:`B_0`, and :func:`b0_for_clusters` finds the smallest :math:`B_0` that forms at most a
target number of clusters among the thresholds where the clustering can change
(:func:`candidate_thresholds`).

The paper describes the projection only in words. The basis chosen here, documented in the book:
the top ``r`` left-singular vectors :math:`U_r` of the clients' heads side by side,
:math:`[H_1, \dots, H_n]` of shape ``(C, n (d + 1))`` (equivalently the top eigenvectors of
:math:`\sum_k H_k H_k^\top`), so that

.. math:: z_k = \operatorname{vec}(U_r^\top H_k) / \lVert U_r^\top H_k \rVert_F \in \R^{r (d+1)} .

The basis is recomputed at each refresh, so descriptors of two refreshes live in different
coordinates; :func:`descriptor_drift` therefore compares their Gram matrices, which do not depend
on the basis (nor on the signs of its vectors).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score, silhouette_score

from .validation import check_real, is_int, is_real

DESCRIPTORS = ("lowrank", "raw")
"""What :func:`head_descriptors` computes: the rank-``r`` projection (default) or the raw head."""


def _as_heads(heads) -> torch.Tensor:
    h = torch.as_tensor(heads, dtype=torch.float64)
    if h.ndim != 3 or h.shape[0] < 1 or h.shape[1] < 1 or h.shape[2] < 1:
        raise ValueError(f"heads must be an array of shape (n_clients, n_classes, d) with every size >= 1, "
                         f"got shape {tuple(h.shape)}")
    if not bool(torch.isfinite(h).all()):
        raise ValueError("heads hold a NaN or an infinity; a descriptor of them would be meaningless")
    return h


def _check_rank(rank, heads: torch.Tensor) -> int:
    n, C, d = heads.shape
    if not is_int(rank) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
    most = min(C, n * d)
    if rank > most:
        raise ValueError(f"rank r={rank} is larger than the heads' rank: {n} head(s) of {C} classes x {d} columns side by "
                         f"side have rank at most min(C, n d) = {most}; valid: 1..{most}")
    return int(rank)


def lowrank_basis(heads, rank: int) -> torch.Tensor:
    r"""The shared rank-``r`` basis of the class axis, of shape ``(C, r)``: the top ``r``
    left-singular vectors of :math:`[H_1, \dots, H_n]` (heads of shape ``(n, C, d)``).

    >>> h = torch.zeros(2, 3, 2); h[:, 0, 0] = 1.0
    >>> lowrank_basis(h, 1).abs().flatten().tolist()
    [1.0, 0.0, 0.0]
    """
    h = _as_heads(heads)
    rank = _check_rank(rank, h)
    side_by_side = h.permute(1, 0, 2).reshape(h.shape[1], -1)  # (C, n d)
    u, _, _ = torch.linalg.svd(side_by_side, full_matrices=False)
    return u[:, :rank]


def _normalize_rows(x: torch.Tensor) -> torch.Tensor:
    norms = x.norm(dim=1, keepdim=True)
    return x / torch.where(norms > 0, norms, torch.ones_like(norms))


def head_descriptors(heads, rank: int = 8, kind: str = "lowrank") -> torch.Tensor:
    r"""Each client's L2-normalized head descriptor, of shape ``(n, r d)`` (``"lowrank"``) or
    ``(n, C d)`` (``"raw"``), float64.

    .. math:: z_k = \operatorname{vec}(U_r^\top H_k) / \lVert U_r^\top H_k \rVert_F

    Parameters
    ----------
    heads : array of shape (n_clients, n_classes, d)
        The cached heads (weights with the bias as a last column: ``d = features + 1``).
    rank : int, default 8
        ``r``, in ``1..min(n_classes, n_clients d)`` (the rank the heads side by side can have;
        used by ``"lowrank"`` only, but checked for both).
    kind : {"lowrank", "raw"}

    Examples
    --------
    >>> z = head_descriptors(torch.randn(5, 10, 4, generator=torch.Generator().manual_seed(0)), rank=3)
    >>> tuple(z.shape), bool(torch.allclose(z.norm(dim=1), torch.ones(5, dtype=torch.float64)))
    ((5, 12), True)
    """
    if kind not in DESCRIPTORS:
        raise ValueError(f"unknown descriptor kind {kind!r}; valid: {', '.join(DESCRIPTORS)}")
    h = _as_heads(heads)
    _check_rank(rank, h)
    if kind == "raw":
        return _normalize_rows(h.reshape(len(h), -1))
    u = lowrank_basis(h, rank)  # (C, r)
    projected = torch.einsum("cr,ncd->nrd", u, h)  # (n, r, d)
    return _normalize_rows(projected.reshape(len(h), -1))


def _as_points(x, name: str = "descriptors") -> np.ndarray:
    a = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    if a.ndim != 2 or len(a) < 1:
        raise ValueError(f"{name} must be an array of shape (n, p) with n >= 1, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} hold a NaN or an infinity")
    return a


def _check_k_range(k_min, k_max) -> tuple[int, int]:
    for name, v in (("k_min", k_min), ("k_max", k_max)):
        if not is_int(v) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if k_max < k_min:
        raise ValueError(f"the k range is empty: k_min={k_min} > k_max={k_max}")
    if k_min == 1 and k_max > 1:
        raise ValueError(f"the silhouette compares k >= 2 only: give k_min >= 2, or k_min = k_max = 1 (one group), "
                         f"got k_min=1, k_max={k_max}")
    return int(k_min), int(k_max)


@dataclass
class SilhouetteKMeans:
    """k-means (scikit-learn's :class:`~sklearn.cluster.KMeans`) for every ``k`` in
    ``k_min..k_max``; the clustering with the highest silhouette score is kept (ties: the
    smaller ``k``). ``k_min = k_max = 1`` is one group (no k-means, silhouette undefined), and so
    is a set of points too alike for any ``k`` of the range to give ``k`` non-empty groups.

    Parameters
    ----------
    k_min, k_max : int, default 2 and 8
        The range of ``k`` (Appendix A.1: 2..8). ``k_max`` is capped at ``n - 1`` (the
        silhouette needs at least one point more than clusters); a range wholly above that is an
        error.
    n_init : int, default 10
        k-means restarts per ``k``.
    seed : int, default 0
        The k-means initialization's seed (randomness is an argument).

    Attributes
    ----------
    k_ : int
        The chosen number of groups.
    labels_ : np.ndarray of shape (n,)
        The group of each point.
    cluster_centers_ : np.ndarray of shape (k, p)
        The groups' centres (k-means'), ``k`` the chosen number of groups.
    silhouette_ : float
        The chosen clustering's silhouette (NaN for one group).
    scores_ : dict
        The silhouette of every ``k`` tried.

    Examples
    --------
    >>> x = np.r_[np.zeros((4, 2)), np.ones((4, 2))] + 0.01 * np.arange(8)[:, None]
    >>> km = SilhouetteKMeans(2, 4).fit(x)
    >>> km.k_, km.labels_.tolist() in ([0, 0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0, 0])
    (2, True)
    """

    k_min: int = 2
    k_max: int = 8
    n_init: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        _check_k_range(self.k_min, self.k_max)
        if not is_int(self.n_init) or self.n_init < 1:
            raise ValueError(f"n_init must be an integer >= 1, got {self.n_init!r}")

    def fit(self, x) -> "SilhouetteKMeans":
        """Cluster the rows of ``x`` (shape (n, p))."""
        x = _as_points(x)
        n = len(x)
        if self.k_max == 1:
            self.k_, self.labels_ = 1, np.zeros(n, dtype=np.int64)
            self.cluster_centers_, self.silhouette_, self.scores_ = x.mean(axis=0, keepdims=True), math.nan, {}
            return self
        if self.k_min > n - 1:
            raise ValueError(f"the k range {self.k_min}..{self.k_max} lies above what {n} cached clients allow: the "
                             f"silhouette needs k <= n - 1 = {n - 1}; lower k_min or wait for more clients")
        best = None
        self.scores_ = {}
        for k in range(self.k_min, min(self.k_max, n - 1) + 1):
            with warnings.catch_warnings():  # fewer distinct points than k: handled below
                warnings.simplefilter("ignore", ConvergenceWarning)
                km = KMeans(n_clusters=k, n_init=self.n_init, random_state=self.seed).fit(x)
            labels = km.labels_.astype(np.int64)
            if len(np.unique(labels)) < k:  # fewer distinct points than k: no grouping into k exists
                continue
            score = float(silhouette_score(x, labels))
            self.scores_[k] = score
            if best is None or score > best[0]:
                best = (score, k, labels, km.cluster_centers_)
        if best is None:  # every point the same (or nearly): one group
            best = (math.nan, 1, np.zeros(n, dtype=np.int64), x.mean(axis=0, keepdims=True))
        self.silhouette_, self.k_, self.labels_, self.cluster_centers_ = best
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "labels_"):
            raise ValueError("this SilhouetteKMeans is not fitted yet: call fit(x) first")


def random_groups(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """The random-groups ablation: ``n`` points dealt into ``k`` groups of near-equal size in a
    random order (every group non-empty when ``k <= n``), shape (n,).

    >>> sorted(np.bincount(random_groups(7, 3, np.random.default_rng(0))).tolist())
    [2, 2, 3]
    """
    if not 1 <= k <= n:
        raise ValueError(f"random groups need 1 <= k <= n, got k={k}, n={n}")
    return rng.permutation(np.arange(n) % k).astype(np.int64)


def group_centroids(x, labels: np.ndarray, k: int) -> np.ndarray:
    """The mean of each group's rows, shape (k, p) (a group without rows: zeros)."""
    x = _as_points(x)
    out = np.zeros((k, x.shape[1]))
    for j in range(k):
        if np.any(labels == j):
            out[j] = x[labels == j].mean(axis=0)
    return out


def _cosine(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    def unit(a):
        n = np.linalg.norm(a, axis=1, keepdims=True)
        return a / np.where(n > 0, n, 1.0)

    return unit(x) @ unit(centroids).T  # (n, k)


def soft_membership(x, centroids, temperature: float) -> np.ndarray:
    r"""Soft membership of each row of ``x`` in each group, shape (n, k): a softmax of the cosine
    similarity of the descriptor to each centroid over the temperature ``T`` (> 0)

    .. math:: m_{kj} = \frac{\exp(\cos(z_k, c_j)/T)}{\sum_l \exp(\cos(z_k, c_l)/T)} .

    Each row lies on the simplex; ``T -> 0`` gives :func:`hard_membership` (without ties),
    ``T -> inf`` the uniform mixture.

    >>> m = soft_membership(np.eye(2), np.eye(2), temperature=1.0)
    >>> np.round(m, 3).tolist()
    [[0.731, 0.269], [0.269, 0.731]]
    """
    if not is_real(temperature) or not math.isfinite(temperature) \
            or temperature <= 0:
        raise ValueError(f"temperature T must be a finite number > 0, got {temperature!r} (hard membership is "
                         "membership='hard', the limit T -> 0)")
    s = _cosine(_as_points(x), _as_points(centroids, "centroids")) / float(temperature)
    s -= s.max(axis=1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=1, keepdims=True)


def hard_membership(x, centroids) -> np.ndarray:
    """One-hot membership in the most similar group (cosine), shape (n, k): the ``T -> 0`` limit
    of :func:`soft_membership` (ties go to the first group).

    >>> hard_membership(np.array([[1.0, 0.1]]), np.eye(2)).tolist()
    [[1.0, 0.0]]
    """
    s = _cosine(_as_points(x), _as_points(centroids, "centroids"))
    out = np.zeros_like(s)
    out[np.arange(len(s)), s.argmax(axis=1)] = 1.0
    return out


def membership_entropy(membership) -> float:
    r"""Mean over clients of the membership's entropy :math:`-\sum_j m_{kj} \log m_{kj}` (nats; 0
    for hard assignments, :math:`\log k` for the uniform mixture).

    >>> round(membership_entropy(np.full((3, 4), 0.25)), 6) == round(math.log(4), 6)
    True
    """
    m = _as_points(membership, "membership")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(m > 0, -m * np.log(m), 0.0)
    return float(terms.sum(axis=1).mean())


def descriptor_drift(previous, current) -> float:
    r"""How much the descriptors moved between two refreshes, independent of each refresh's basis:
    the relative change of their Gram matrices (pairwise cosine similarities),

    .. math:: \lVert G_t - G_{t-1} \rVert_F / \lVert G_{t-1} \rVert_F, \qquad G = Z Z^\top .

    ``previous`` and ``current`` are the Gram matrices (shape (n, n)) of the same clients.

    >>> g = np.eye(3)
    >>> descriptor_drift(g, g)
    0.0
    """
    a, b = _as_points(previous, "previous Gram matrix"), _as_points(current, "current Gram matrix")
    if a.shape != b.shape:
        raise ValueError(f"the Gram matrices must have the same shape, got {a.shape} and {b.shape}")
    return float(np.linalg.norm(b - a) / max(np.linalg.norm(a), 1e-300))


def assignment_agreement(previous: np.ndarray, current: np.ndarray) -> float:
    """The adjusted Rand index (scikit-learn's) between two groupings of the same clients: 1 for
    the same partition up to relabelling, about 0 for unrelated ones.

    >>> assignment_agreement(np.array([0, 0, 1, 1]), np.array([1, 1, 0, 0]))
    1.0
    """
    return float(adjusted_rand_score(np.asarray(previous), np.asarray(current)))


def _as_distances(d) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or d.shape[0] == 0:
        raise ValueError(f"distances must be a square (n, n) matrix with n >= 1, got shape {d.shape}")
    if not np.isfinite(d).all() or (d < 0).any():
        raise ValueError("distances must be finite and >= 0")
    if not np.allclose(d, d.T, rtol=1e-9, atol=1e-9):
        raise ValueError("distances must be symmetric: d(i, j) = d(j, i)")
    return d


def check_b0(b0) -> float:
    """``b0`` as a float if it is a finite number >= 0, else a ValueError naming it."""
    return check_real("B0", b0, low=0)


def greedy_b0(distances, b0: float) -> tuple[np.ndarray, list[int]]:
    r"""Algorithm 1 of COSMOS on a distance matrix: ``(labels, seeds)``.

    While clients remain unassigned, the seed is the unassigned client with the most
    :math:`B_0`-close unassigned neighbours (:math:`d \le B_0`); it and those neighbours form the
    next cluster. Ties (the paper leaves them open) go to the candidate whose neighbours are
    closest in total (the tighter cluster), then to the lowest index. Every member lies within
    :math:`B_0` of its seed, so a cluster's diameter is at most :math:`2 B_0` (triangle
    inequality).

    >>> d = np.array([[0, 1, 5, 6], [1, 0, 5, 6], [5, 5, 0, 1], [6, 6, 1, 0]], float)
    >>> labels, seeds = greedy_b0(d, 1.5)
    >>> labels.tolist(), seeds
    ([0, 0, 1, 1], [0, 2])
    """
    d = _as_distances(distances)
    b0 = check_b0(b0)
    n = len(d)
    labels = np.full(n, -1, dtype=np.int64)
    seeds: list[int] = []
    remaining = np.arange(n)
    while len(remaining):
        sub = d[np.ix_(remaining, remaining)]
        close = (sub <= b0) & ~np.eye(len(remaining), dtype=bool)
        counts = close.sum(axis=1)
        spread = np.where(close, sub, 0.0).sum(axis=1)
        # most neighbours; then the smallest total distance to them; then the lowest index
        best = min(range(len(remaining)), key=lambda j: (-counts[j], spread[j], remaining[j]))
        members = remaining[close[best] | (np.arange(len(remaining)) == best)]
        labels[members] = len(seeds)
        seeds.append(int(remaining[best]))
        remaining = remaining[labels[remaining] < 0]
    return labels, seeds


def candidate_thresholds(distances) -> np.ndarray:
    r"""The thresholds at which :func:`greedy_b0` can change: 0 and every distinct off-diagonal
    distance, increasing, float64 of shape ``(k,)``. The clustering depends on :math:`B_0` only
    through which pairs have :math:`d \le B_0`, so between two candidates it is constant.

    Examples
    --------
    >>> candidate_thresholds(np.array([[0, 1, 5], [1, 0, 5], [5, 5, 0]], float)).tolist()
    [0.0, 1.0, 5.0]
    """
    d = _as_distances(distances)
    return np.unique(np.r_[0.0, d[~np.eye(len(d), dtype=bool)]])


def b0_for_clusters(distances, target: int) -> float:
    r"""The smallest :math:`B_0` at which :func:`greedy_b0` forms at most ``target`` clusters.

    The clustering changes only where :math:`B_0` crosses a pairwise distance, so the candidates
    are 0 and the distinct off-diagonal distances, tried in increasing order. (The authors' code
    raises :math:`B_0` by a fixed step until about ``target`` clusters form; a step can overshoot
    the smallest such value, this search cannot.) The count need not fall monotonically with
    :math:`B_0` for a greedy rule, so the first candidate that reaches the target is returned.

    >>> d = np.array([[0, 1, 5], [1, 0, 5], [5, 5, 0]], float)
    >>> b0_for_clusters(d, 2), b0_for_clusters(d, 1)
    (1.0, 5.0)
    """
    d = _as_distances(distances)
    if not is_int(target) or target < 1:
        raise ValueError(f"the target number of clusters must be an int >= 1, got {target!r}")
    candidates = candidate_thresholds(d)
    for b0 in candidates:
        if len(greedy_b0(d, float(b0))[1]) <= target:
            return float(b0)
    return float(candidates[-1])


def cluster_diameters(distances, labels: np.ndarray) -> np.ndarray:
    """The largest within-cluster distance of each cluster, float64 of shape ``(max(labels) + 1,)``,
    from ``distances`` of shape ``(n, n)`` and ``labels`` of shape ``(n,)`` (0 for a singleton, and for a
    number no client holds: after a client left its one-member cluster)."""
    d = _as_distances(distances)
    labels = np.asarray(labels)
    return np.array([d[np.ix_(labels == g, labels == g)].max() if (labels == g).any() else 0.0
                     for g in range(int(labels.max()) + 1)])


@dataclass
class GreedyB0:
    """COSMOS's greedy clustering (Algorithm 1) as an estimator, on a distance matrix.

    Parameters
    ----------
    b0 : float or None
        The threshold :math:`B_0`; ``None`` searches it (:func:`b0_for_clusters`). A given ``b0``
        is used as it is, whatever ``target`` says.
    target : int or None
        With ``b0=None``, the number of clusters to reach at most (the authors' code aims at 5).

    Attributes
    ----------
    b0_ : float
        The threshold used.
    labels_ : np.ndarray of shape (n,)
        Each client's cluster (clusters numbered in the order they were formed).
    seeds_ : list of int
        Each cluster's seed client.
    n_clusters_ : int
    diameters_ : np.ndarray of shape (n_clusters,)
        The largest within-cluster distance of each cluster (at most ``2 * b0_``).

    Examples
    --------
    >>> d = np.array([[0, 1, 5], [1, 0, 5], [5, 5, 0]], float)
    >>> GreedyB0(target=2).fit(d).labels_.tolist()
    [0, 0, 1]
    """

    b0: float | None = None
    target: int | None = None

    def __post_init__(self) -> None:
        if self.b0 is None and self.target is None:
            raise ValueError("GreedyB0 needs b0 (the threshold) or target (a number of clusters to reach)")
        if self.b0 is not None:
            check_b0(self.b0)
        if self.target is not None and (not is_int(self.target)
                                        or self.target < 1):
            raise ValueError(f"the target number of clusters must be an int >= 1, got {self.target!r}")

    def fit(self, distances) -> "GreedyB0":
        """Cluster the ``n`` clients of the ``(n, n)`` ``distances``."""
        d = _as_distances(distances)
        self.b0_ = float(self.b0) if self.b0 is not None else b0_for_clusters(d, self.target)
        self.labels_, self.seeds_ = greedy_b0(d, self.b0_)
        self.n_clusters_ = len(self.seeds_)
        self.diameters_ = cluster_diameters(d, self.labels_)
        return self


def group_purity(groups: dict[int, int], planted: np.ndarray) -> float:
    """The share of clients whose group's most common planted label is their own, from a grouping
    ``{client: group}`` and the planted label of every client (``planted[client]``): 1 when every
    group holds one planted group (a planted group split over several groups still scores 1).

    >>> group_purity({0: 0, 1: 0, 2: 0, 3: 1}, np.array([0, 0, 1, 1]))
    0.75
    """
    if not groups:
        return float("nan")
    clients = np.array(sorted(groups))
    g = np.array([groups[k] for k in clients])
    p = np.asarray(planted)[clients]
    hits = sum(np.bincount(p[g == j]).max() for j in np.unique(g))
    return float(hits / len(clients))


__all__ = ["DESCRIPTORS", "GreedyB0", "SilhouetteKMeans", "assignment_agreement", "b0_for_clusters", "candidate_thresholds", "check_b0", "cluster_diameters", "descriptor_drift", "greedy_b0",
           "group_centroids", "group_purity", "hard_membership", "head_descriptors", "lowrank_basis", "membership_entropy", "random_groups", "soft_membership"]
