"""Seeded client partitions of a labelled dataset, and their summaries.

Every partitioner takes per-sample integer ``labels`` of shape ``(n,)`` (or group ids), a
number of clients and a ``seed`` for ``np.random.default_rng``, and returns one sorted ``int64``
index array per client. The arrays are pairwise disjoint and, unless stated otherwise, cover
``range(n)``.

* :func:`iid_partition` -- uniform random split;
* :func:`dirichlet_partition` -- per-class Dirichlet(alpha) proportions (Hsu et al., 2019,
  "Measuring the Effects of Non-Identical Data Distribution for Federated Visual
  Classification", arXiv:1909.06335), with a bounded ``min_size`` repair;
* :func:`label_subset_partition` -- every client owns a fixed fraction of the classes;
* :func:`group_partition` -- clients divided among domains / rotation groups;
* :func:`grouped_dirichlet_partition` -- the COSMOS label-group split: Dirichlet inside label
  groups plus a shared random pool;
* :func:`departure_partition` -- MPT's client-departure scenario: one client holds most of a rare
  class, every other class is spread uniformly;
* :func:`split_train_test`, :func:`global_test_split` -- local and global evaluation splits.

Examples
--------
>>> labels = np.array([0, 0, 1, 1, 2, 2])
>>> [p.tolist() for p in iid_partition(labels, n_clients=2, seed=0)]  # doctest: +SKIP
[[1, 3, 4], [0, 2, 5]]
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..validation import check_int, is_real

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes

__all__ = [
    "PARTITIONS",
    "iid_partition",
    "dirichlet_partition",
    "label_subset_partition",
    "group_partition",
    "grouped_dirichlet_partition",
    "departure_partition",
    "powerlaw_partition",
    "powerlaw_sizes",
    "split_train_test",
    "global_test_split",
    "client_class_counts",
    "partition_summary",
    "plot_partition",
    "make_partition",
]

PARTITIONS: tuple[str, ...] = ("iid", "dirichlet", "label_subset", "group", "grouped_dirichlet", "departure", "powerlaw")
"""Names accepted by :func:`make_partition`."""

_ANNOTATE_MAX_CELLS = 400


# --------------------------------------------------------------------------------------------
# Validation (public edge only)
# --------------------------------------------------------------------------------------------


def _check_labels(labels: Any, name: str = "labels") -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of shape (n,), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ValueError(f"{name} must be >= 0, got minimum {arr.min()}")
    return arr.astype(np.int64, copy=False)


def _check_fraction(name: str, value: Any, low: float, high: float, closed: str) -> float:
    """``closed`` is one of "[]", "(]", "[)"."""
    ok_type = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    v = float(value) if ok_type else math.nan
    lo_ok = v >= low if closed[0] == "[" else v > low
    hi_ok = v <= high if closed[1] == "]" else v < high
    if not (ok_type and math.isfinite(v) and lo_ok and hi_ok):
        raise ValueError(f"{name} must be in {closed[0]}{low:g}, {high:g}{closed[1]}, got {value!r}")
    return v


def _check_alpha(alpha: Any) -> float:
    ok_type = not isinstance(alpha, bool) and isinstance(alpha, (int, float, np.integer, np.floating))
    if not (ok_type and math.isfinite(float(alpha)) and float(alpha) > 0):
        raise ValueError(f"alpha must be a finite number > 0, got alpha={alpha!r}")
    return float(alpha)


def _check_n_clients(n_clients: Any, n: int, min_size: int = 1) -> int:
    n_clients = check_int("n_clients", n_clients, low=1)
    if n_clients * min_size > n:
        need = (
            f"n_clients={n_clients}"
            if min_size == 1
            else f"n_clients={n_clients} x min_size={min_size} = {n_clients * min_size}"
        )
        raise ValueError(f"more clients than samples: {need} > n_samples={n}")
    return n_clients


def _check_parts(parts: Sequence[Any], n: int) -> list[np.ndarray]:
    out = []
    for j, p in enumerate(parts):
        arr = np.asarray(p)
        if arr.size == 0:
            out.append(np.zeros(0, dtype=np.int64))
            continue
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"parts[{j}] must be a 1-D int array, got dtype {arr.dtype} and shape {arr.shape}"
            )
        if arr.min() < 0 or arr.max() >= n:
            raise ValueError(
                f"parts[{j}] indices must lie in [0, {n}), got range [{arr.min()}, {arr.max()}]"
            )
        out.append(arr.astype(np.int64, copy=False))
    return out


def _round_half_up(x: np.ndarray | float) -> np.ndarray:
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5).astype(np.int64)


# --------------------------------------------------------------------------------------------
# Private pure helpers: they work on a client-of-sample vector
# --------------------------------------------------------------------------------------------


def _parts_from_owner(owner: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """Turn ``owner`` of shape (n,) (client id per sample, -1 = nobody) into sorted parts."""
    order = np.argsort(owner, kind="stable")  # indices grouped by client, ascending within
    sizes = np.bincount(owner[owner >= 0], minlength=n_clients)
    start = int(np.sum(owner < 0))
    bounds = start + np.concatenate([[0], np.cumsum(sizes)])
    return [order[bounds[j] : bounds[j + 1]].astype(np.int64) for j in range(n_clients)]


def _split_evenly(idx: np.ndarray, clients: np.ndarray, owner: np.ndarray) -> None:
    """Assign ``idx`` (already shuffled) to ``clients`` in near-equal contiguous chunks."""
    for chunk, j in zip(np.array_split(idx, len(clients)), clients):
        owner[chunk] = j


def _dirichlet_owner(
    labels: np.ndarray, sample_idx: np.ndarray, clients: np.ndarray, alpha: float,
    rng: np.random.Generator, owner: np.ndarray,
) -> None:
    """Per class, split the shuffled samples ``sample_idx`` over ``clients`` by Dir(alpha)."""
    for c in np.unique(labels[sample_idx]):
        idx_c = rng.permutation(sample_idx[labels[sample_idx] == c])
        p = rng.dirichlet(np.full(len(clients), alpha))  # (k,)
        if not np.all(np.isfinite(p)) or p.sum() <= 0:  # numerical guard for tiny alpha
            p = np.zeros(len(clients))
            p[rng.integers(len(clients))] = 1.0
        cuts = np.clip(_round_half_up(np.cumsum(p)[:-1] * len(idx_c)), 0, len(idx_c))
        counts = np.diff(np.concatenate([[0], cuts, [len(idx_c)]]))  # (k,), sums to n_c
        owner[idx_c] = np.repeat(clients, counts)


def _repair_min_size(
    owner: np.ndarray, n_clients: int, min_size: int, rng: np.random.Generator
) -> None:
    """Move single random samples from the largest client to clients below ``min_size``.

    Each move raises one deficient client by one sample and never pushes the donor below
    ``min_size`` (if any client is short and ``n >= n_clients * min_size``, the largest holds
    more than ``min_size``), so the loop ends after exactly the total deficit, at most
    ``n_clients * min_size`` moves. A max-heap keeps each move at ``O(log n_clients)``.
    """
    sizes = np.bincount(owner, minlength=n_clients)
    deficient = np.flatnonzero(sizes < min_size)
    if deficient.size == 0:
        return
    heap = [(-int(s), j) for j, s in enumerate(sizes) if s > min_size]
    heapq.heapify(heap)
    pools: dict[int, list[int]] = {}  # donor -> its samples in a seeded random order
    for j in deficient:
        for _ in range(min_size - int(sizes[j])):
            neg_size, donor = heapq.heappop(heap)
            if donor not in pools:
                pools[donor] = rng.permutation(np.flatnonzero(owner == donor)).tolist()
            owner[pools[donor].pop()] = j
            if -neg_size - 1 > min_size:
                heapq.heappush(heap, (neg_size + 1, donor))


# --------------------------------------------------------------------------------------------
# Partitioners
# --------------------------------------------------------------------------------------------


def iid_partition(labels: np.ndarray, n_clients: int, seed: int) -> list[np.ndarray]:
    """Split the samples uniformly at random into ``n_clients`` near-equal parts.

    Parameters
    ----------
    labels : np.ndarray of int, shape (n,)
        Only its length is used.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n``.
    seed : int
        Seed of ``np.random.default_rng``.

    Returns
    -------
    list of np.ndarray
        ``n_clients`` sorted ``int64`` index arrays of size ``floor(n / n_clients)`` or one more,
        disjoint and covering ``range(n)``.
    """
    labels = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, len(labels))
    perm = np.random.default_rng(seed).permutation(len(labels))
    return [np.sort(p).astype(np.int64) for p in np.array_split(perm, n_clients)]


def powerlaw_sizes(n: int, n_clients: int, exponent: float = 1.0, min_size: int = 1, seed: int = 0) -> np.ndarray:
    r"""Client sizes of a cross-device federation: a few large clients and a long tail of small
    ones (Zipf's law over the clients' size ranks, in a seeded order).

    The client of rank :math:`r = 1, \dots, K` gets :math:`m` samples plus its share
    :math:`(n - Km)\, r^{-a} / \sum_j j^{-a}` of the rest (:math:`m` = ``min_size``, :math:`a` =
    ``exponent``), rounded by largest remainder so that the sizes sum to ``n``; ranks are assigned
    to clients by a seeded permutation. ``exponent=0`` gives near-equal sizes.

    Returns
    -------
    np.ndarray of int64, shape (n_clients,)

    Examples
    --------
    >>> powerlaw_sizes(100, 4, exponent=1.0, min_size=1, seed=0).sum()
    np.int64(100)
    >>> sorted(powerlaw_sizes(100, 4, exponent=1.0, min_size=1, seed=0).tolist())
    [13, 16, 24, 47]
    """
    min_size = check_int("min_size", min_size, low=1)
    n_clients = _check_n_clients(n_clients, n, min_size)
    if not is_real(exponent) or not np.isfinite(exponent) or exponent < 0:
        raise ValueError(f"exponent must be a finite number >= 0, got {exponent!r}")
    exponent = float(exponent)
    weights = np.arange(1, n_clients + 1, dtype=np.float64) ** -exponent
    share = (n - n_clients * min_size) * weights / weights.sum()
    extra = np.floor(share).astype(np.int64)
    left = int((n - n_clients * min_size) - extra.sum())
    extra[np.argsort(-(share - extra), kind="stable")[:left]] += 1  # largest remainders
    sizes_by_rank = min_size + extra
    return sizes_by_rank[np.random.default_rng(seed).permutation(n_clients)]


def powerlaw_partition(
    labels: np.ndarray, n_clients: int, exponent: float = 1.0, min_size: int = 1, seed: int = 0
) -> list[np.ndarray]:
    """Samples drawn at random (labels as in the pool) onto clients of power-law sizes
    (:func:`powerlaw_sizes`): cross-device federations of many clients with a few samples each.

    Returns
    -------
    list of np.ndarray
        Per-client sorted ``int64`` index arrays, disjoint, covering ``range(n)``.

    Examples
    --------
    >>> parts = powerlaw_partition(np.zeros(50, dtype=int), 10, exponent=1.5, seed=0)
    >>> sum(len(p) for p in parts), min(len(p) for p in parts) >= 1
    (50, True)
    """
    labels = _check_labels(labels)
    rng = np.random.default_rng(seed)
    sizes = powerlaw_sizes(len(labels), n_clients, exponent, min_size, seed=int(rng.integers(2**31)))
    perm = rng.permutation(len(labels))
    return [np.sort(p).astype(np.int64) for p in np.split(perm, np.cumsum(sizes)[:-1])]


def dirichlet_partition(
    labels: np.ndarray,
    n_clients: int,
    alpha: float,
    *,
    min_size: int = 1,
    seed: int,
) -> list[np.ndarray]:
    """Label-skewed split: each class is divided over clients by Dirichlet proportions.

    For every class :math:`c`, with :math:`n_c` samples shuffled,

    .. math::
        p_c \\sim \\mathrm{Dir}(\\alpha \\mathbf 1_K), \\qquad
        \\text{client } k \\text{ gets the slice } \\big[\\mathrm{round}(n_c P_{c,k-1}),
        \\mathrm{round}(n_c P_{c,k})\\big),\\; P_{c,k} = \\textstyle\\sum_{i \\le k} p_{c,i}.

    Small ``alpha`` gives few classes per client; large ``alpha`` approaches IID. Afterwards
    every client is brought to at least ``min_size`` samples by a deterministic, bounded repair:
    one seeded-random sample at a time moves from the currently largest client to a client
    below ``min_size`` (at most ``n_clients * min_size`` moves; no resampling loop).

    Parameters
    ----------
    labels : np.ndarray of int, shape (n,)
    n_clients : int
        ``>= 1`` with ``n_clients * min_size <= n``.
    alpha : float
        Concentration ``> 0``.
    min_size : int, default 1
        Minimum samples per client (``>= 0``).
    seed : int
        Seed of ``np.random.default_rng``.

    Returns
    -------
    list of np.ndarray
        ``n_clients`` sorted ``int64`` index arrays, disjoint, covering ``range(n)``, each of
        size ``>= min_size``.
    """
    labels = _check_labels(labels)
    alpha = _check_alpha(alpha)
    min_size = check_int("min_size", min_size, low=0)
    n_clients = _check_n_clients(n_clients, len(labels), min_size)
    rng = np.random.default_rng(seed)
    owner = np.empty(len(labels), dtype=np.int64)
    _dirichlet_owner(labels, np.arange(len(labels)), np.arange(n_clients), alpha, rng, owner)
    _repair_min_size(owner, n_clients, min_size, rng)
    return _parts_from_owner(owner, n_clients)


def label_subset_partition(
    labels: np.ndarray, n_clients: int, class_fraction: float, seed: int
) -> list[np.ndarray]:
    """Each client owns ``k`` classes; each class is split evenly among its owners.

    With ``C`` distinct labels, ``k = max(1, round_half_up(class_fraction * C))``. Classes are
    assigned by a shuffled cyclic rule: with ``pi`` a seeded permutation of the classes, client
    ``j`` owns ``pi[(j * k + t) mod C]`` for ``t = 0..k-1``. This needs ``n_clients * k >= C``
    and then owns every class at least once, with owner counts differing by at most one. Each
    class's shuffled samples are split into near-equal chunks among its owners (a class with
    fewer samples than owners leaves some owners without it).

    Parameters
    ----------
    labels : np.ndarray of int, shape (n,)
    n_clients : int
        ``>= 1``, with ``n_clients * k >= C``.
    class_fraction : float
        Fraction of the classes each client owns, in ``(0, 1]``.
    seed : int

    Returns
    -------
    list of np.ndarray
        ``n_clients`` sorted ``int64`` index arrays, disjoint, covering ``range(n)``.

    Examples
    --------
    Four classes, four clients, half the classes each: every client sees 2 classes and every
    class is shared by exactly 2 clients.
    """
    labels = _check_labels(labels)
    n_clients = check_int("n_clients", n_clients, low=1)
    class_fraction = _check_fraction("class_fraction", class_fraction, 0.0, 1.0, "(]")
    classes = np.unique(labels)
    n_cls = len(classes)
    k = max(1, int(_round_half_up(class_fraction * n_cls)))
    if n_clients * k < n_cls:
        raise ValueError(
            f"cannot own all {n_cls} classes: n_clients={n_clients} clients x {k} classes each "
            f"(class_fraction={class_fraction:g}) < {n_cls}; raise n_clients or class_fraction"
        )
    rng = np.random.default_rng(seed)
    perm = rng.permutation(classes)
    slots = (np.arange(n_clients)[:, None] * k + np.arange(k)[None, :]) % n_cls  # (K, k)
    owned = perm[slots]  # (n_clients, k) class ids
    owner = np.empty(len(labels), dtype=np.int64)
    for c in classes:
        owners = np.flatnonzero(np.any(owned == c, axis=1))
        _split_evenly(rng.permutation(np.flatnonzero(labels == c)), owners, owner)
    return _parts_from_owner(owner, n_clients)


def group_partition(
    groups: np.ndarray, n_clients: int, seed: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Divide clients among groups (domains, rotations); split each group IID among its clients.

    Clients form contiguous blocks: with ``G`` distinct group ids sorted ascending, clients
    ``np.array_split(range(n_clients), G)[g]`` belong to the ``g``-th group (the first
    ``n_clients mod G`` groups get one client more).

    Parameters
    ----------
    groups : np.ndarray of int, shape (n,)
        Group id per sample.
    n_clients : int
        ``G <= n_clients``; every group needs at least as many samples as clients.
    seed : int

    Returns
    -------
    parts : list of np.ndarray
        ``n_clients`` sorted ``int64`` index arrays, disjoint, covering ``range(n)``.
    client_group : np.ndarray of int64, shape (n_clients,)
        The group id of each client (a value of ``groups``).
    """
    groups = _check_labels(groups, "groups")
    n_clients = check_int("n_clients", n_clients, low=1)
    group_ids, group_sizes = np.unique(groups, return_counts=True)
    if n_clients < len(group_ids):
        raise ValueError(
            f"n_clients={n_clients} is smaller than the number of groups G={len(group_ids)}; "
            f"every group needs at least one client"
        )
    blocks = np.array_split(np.arange(n_clients), len(group_ids))
    for g, size, block in zip(group_ids, group_sizes, blocks):
        if size < len(block):
            raise ValueError(
                f"group {g} has {size} samples but {len(block)} clients; "
                f"use fewer clients (n_clients={n_clients})"
            )
    rng = np.random.default_rng(seed)
    owner = np.empty(len(groups), dtype=np.int64)
    client_group = np.empty(n_clients, dtype=np.int64)
    for g, block in zip(group_ids, blocks):
        _split_evenly(rng.permutation(np.flatnonzero(groups == g)), block, owner)
        client_group[block] = g
    return _parts_from_owner(owner, n_clients), client_group


def grouped_dirichlet_partition(
    labels: np.ndarray,
    n_clients: int,
    n_groups: int = 5,
    alpha: float = 5.0,
    pool_fraction: float = 0.1,
    seed: int = 0,
) -> list[np.ndarray]:
    """The COSMOS label-group split: Dirichlet inside disjoint label groups, plus a shared pool.

    1. The distinct classes, in a seeded random order, are cut into ``n_groups`` near-equal
       disjoint label groups (``np.array_split``); clients form ``n_groups`` contiguous blocks
       (``np.array_split(range(n_clients), n_groups)``); block ``g`` gets label group ``g``.
    2. Inside each group, each class is split over the group's clients by Dir(``alpha``)
       proportions (as :func:`dirichlet_partition`, no ``min_size`` repair).
    3. From every client, ``round_half_up(pool_fraction * size)`` random samples are pooled and
       each pooled sample is reassigned to a client drawn uniformly from all ``n_clients``.

    Parameters
    ----------
    labels : np.ndarray of int, shape (n,)
    n_clients : int
        ``n_groups <= n_clients <= n``.
    n_groups : int, default 5
        ``1 <= n_groups <= min(C, n_clients)`` with ``C`` distinct labels.
    alpha : float, default 5.0
        Dirichlet concentration ``> 0`` inside groups.
    pool_fraction : float, default 0.1
        In ``[0, 1]``.
    seed : int, default 0

    Returns
    -------
    list of np.ndarray
        ``n_clients`` sorted ``int64`` index arrays, disjoint, covering ``range(n)``. A client
        may end up empty when groups are tiny (no ``min_size`` guarantee).
    """
    labels = _check_labels(labels)
    n_clients = _check_n_clients(n_clients, len(labels))
    n_groups = check_int("n_groups", n_groups, low=1)
    alpha = _check_alpha(alpha)
    pool_fraction = _check_fraction("pool_fraction", pool_fraction, 0.0, 1.0, "[]")
    classes = np.unique(labels)
    if n_groups > min(len(classes), n_clients):
        raise ValueError(
            f"n_groups={n_groups} must be <= min(n_classes, n_clients) = "
            f"min({len(classes)}, {n_clients})"
        )
    rng = np.random.default_rng(seed)
    label_groups = np.array_split(rng.permutation(classes), n_groups)
    client_blocks = np.array_split(np.arange(n_clients), n_groups)
    owner = np.empty(len(labels), dtype=np.int64)
    for group_classes, block in zip(label_groups, client_blocks):
        sample_idx = np.flatnonzero(np.isin(labels, group_classes))
        _dirichlet_owner(labels, sample_idx, block, alpha, rng, owner)
    pooled = []
    for part in _parts_from_owner(owner, n_clients):
        n_pool = int(_round_half_up(pool_fraction * len(part)))
        pooled.append(rng.choice(part, size=n_pool, replace=False))
    pool = np.concatenate(pooled).astype(np.int64)
    owner[pool] = rng.integers(0, n_clients, size=len(pool))
    return _parts_from_owner(owner, n_clients)


# --------------------------------------------------------------------------------------------
# Evaluation splits
# --------------------------------------------------------------------------------------------


def split_train_test(
    labels: np.ndarray,
    parts: Sequence[np.ndarray],
    test_fraction: float = 0.25,
    seed: int = 0,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split every client's samples into a local train and test set, stratified by class.

    For a class with :math:`n_c` samples on a client,
    :math:`n^{test}_c = \\min(\\mathrm{round\\_half\\_up}(f\\, n_c),\\; n_c - 1)`: at least one
    training sample of every class the client observes is kept (a singleton class stays in
    train). Test samples are chosen at random.

    Parameters
    ----------
    labels : np.ndarray of int, shape (n,)
    parts : sequence of np.ndarray
        Per-client index arrays (e.g. from a partitioner).
    test_fraction : float, default 0.25
        In ``[0, 1)``.
    seed : int, default 0

    Returns
    -------
    train, test : list of np.ndarray
        Per client, sorted ``int64`` arrays; ``train[j]`` and ``test[j]`` are disjoint and their
        union is ``parts[j]``.
    """
    labels = _check_labels(labels)
    parts = _check_parts(parts, len(labels))
    test_fraction = _check_fraction("test_fraction", test_fraction, 0.0, 1.0, "[)")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for part in parts:
        shuffled = rng.permutation(part)
        y = labels[shuffled]
        order = np.argsort(y, kind="stable")  # shuffled samples grouped by class
        shuffled, y = shuffled[order], y[order]
        _, first, counts = np.unique(y, return_index=True, return_counts=True)
        rank = np.arange(len(y)) - np.repeat(first, counts)  # position within its class
        n_test = np.minimum(_round_half_up(test_fraction * counts), counts - 1)
        is_test = rank < np.repeat(n_test, counts)
        train.append(np.sort(shuffled[~is_test]).astype(np.int64))
        test.append(np.sort(shuffled[is_test]).astype(np.int64))
    return train, test


def global_test_split(
    labels: np.ndarray, n_per_class: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw a class-balanced global test set with exactly ``n_per_class`` samples per class.

    Parameters
    ----------
    labels : np.ndarray of int, shape (n,)
    n_per_class : int
        ``>= 1``; every class present in ``labels`` needs at least this many samples.
    seed : int

    Returns
    -------
    test_idx : np.ndarray of int64, shape (n_present_classes * n_per_class,)
    rest_idx : np.ndarray of int64, shape (n - len(test_idx),)
        Both sorted; disjoint; together they cover ``range(n)``.
    """
    labels = _check_labels(labels)
    n_per_class = check_int("n_per_class", n_per_class, low=1)
    classes, counts = np.unique(labels, return_counts=True)
    short = counts < n_per_class
    if np.any(short):
        c, k = classes[short][0], counts[short][0]
        raise ValueError(
            f"class {c} has {k} samples, fewer than n_per_class={n_per_class}"
            + (f" ({int(short.sum())} classes are short)" if short.sum() > 1 else "")
        )
    rng = np.random.default_rng(seed)
    chosen = [
        rng.choice(np.flatnonzero(labels == c), size=n_per_class, replace=False) for c in classes
    ]
    is_test = np.zeros(len(labels), dtype=bool)
    is_test[np.concatenate(chosen)] = True
    return np.flatnonzero(is_test).astype(np.int64), np.flatnonzero(~is_test).astype(np.int64)


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------


def client_class_counts(
    labels: np.ndarray, parts: Sequence[np.ndarray], n_classes: int
) -> np.ndarray:
    """Count each client's samples per class.

    Returns
    -------
    np.ndarray of int64, shape (n_clients, n_classes)
        ``counts[j, c]`` is the number of samples of class ``c`` on client ``j``.
    """
    labels = _check_labels(labels)
    n_classes = check_int("n_classes", n_classes, low=1)
    if labels.max() >= n_classes:
        raise ValueError(f"labels must be < n_classes={n_classes}, got maximum {labels.max()}")
    parts = _check_parts(parts, len(labels))
    if not parts:
        return np.zeros((0, n_classes), dtype=np.int64)
    return np.stack([np.bincount(labels[p], minlength=n_classes) for p in parts]).astype(np.int64)


def partition_summary(
    labels: np.ndarray, parts: Sequence[np.ndarray], n_classes: int
) -> "pd.DataFrame":
    """One row per client describing its local label distribution.

    Returns
    -------
    pandas.DataFrame
        Index ``"client"`` (0..n_clients-1); columns ``n_samples``, ``n_classes_seen``,
        ``largest_class_share`` (NaN for an empty client) and ``class_0 .. class_{C-1}`` counts.
    """
    import pandas as pd

    counts = client_class_counts(labels, parts, n_classes)  # (K, C)
    n_samples = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n_samples > 0, counts.max(axis=1, initial=0) / n_samples, np.nan)
    frame = pd.DataFrame(
        {
            "n_samples": n_samples,
            "n_classes_seen": (counts > 0).sum(axis=1),
            "largest_class_share": share,
        }
    )
    per_class = pd.DataFrame(counts, columns=[f"class_{c}" for c in range(n_classes)])
    frame = pd.concat([frame, per_class], axis=1)
    frame.index.name = "client"
    return frame


def plot_partition(
    counts: np.ndarray, ax: "Axes | None" = None, title: str | None = None
) -> "Axes":
    """Heat map of a client x class count matrix.

    Parameters
    ----------
    counts : np.ndarray, shape (n_clients, n_classes)
        E.g. from :func:`client_class_counts`.
    ax : matplotlib Axes, optional
        Drawn into if given, else a new figure is created (``plt.subplots``; never shown).
    title : str, optional

    Returns
    -------
    matplotlib.axes.Axes
        Counts are written into the cells when the matrix has at most 400 cells.
    """
    counts = np.asarray(counts)
    if counts.ndim != 2:
        raise ValueError(f"counts must have shape (n_clients, n_classes), got {counts.shape}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(
            figsize=(min(12.0, 1.0 + 0.5 * counts.shape[1]), min(10.0, 1.0 + 0.3 * counts.shape[0]))
        )
    image = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, label="samples")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis):  # clients and classes are integers
        axis.set_major_locator(MaxNLocator(nbins=min(20, max(counts.shape)), integer=True))
    if counts.size <= _ANNOTATE_MAX_CELLS:
        threshold = counts.max() / 2 if counts.size else 0
        for (j, c), v in np.ndenumerate(counts):
            ax.text(
                c, j, f"{v:g}", ha="center", va="center", fontsize=7,
                color="black" if v > threshold else "white",
            )
    if title is not None:
        ax.set_title(title)
    return ax


def departure_partition(
    labels: np.ndarray,
    n_clients: int,
    seed: int,
    *,
    rare_class: int = 0,
    departing_share: float = 0.98,
    departing_client: int = 0,
    n_classes: int | None = None,
) -> list[np.ndarray]:
    """MPT's client-departure scenario (Jang et al., arXiv:2609.12771, Section V-A, "Scenario").

    The client ``departing_client`` receives the share ``departing_share`` of class
    ``rare_class`` (rounded half to even, as Python's ``round``); the rest of that class is dealt
    over the other clients one by one in a random order (as evenly as possible); every other class
    is shuffled and split into ``n_clients`` nearly equal consecutive chunks (IID). The client
    leaves at the departure round, a loop ``Event(round, client, "leave")``:
    :func:`fedlib.federation.make_departure_scenario` builds the whole federation.

    Parameters
    ----------
    labels : np.ndarray of shape (n,)
    n_clients : int >= 2
    seed : seed of ``np.random.default_rng``; the draws are, class by class in increasing
        order, a permutation of the class's samples and, for the rare class, a permutation of
        the other clients
    rare_class : the designated class, in ``[0, n_classes)``; it must have a sample
    departing_share : in ``[0, 1]``; ``1 - departing_share`` is the paper's remaining fraction
    departing_client : in ``[0, n_clients)``
    n_classes : number of classes (default ``labels.max() + 1``)

    Examples
    --------
    >>> labels = np.repeat([0, 1, 2], 10)
    >>> parts = departure_partition(labels, 3, seed=0, rare_class=1, departing_share=0.8)
    >>> [int((labels[p] == 1).sum()) for p in parts]
    [8, 1, 1]
    """
    labels = _check_labels(labels)
    C = int(labels.max()) + 1 if n_classes is None else check_int("n_classes", n_classes, low=1)
    if not isinstance(n_clients, (int, np.integer)) or isinstance(n_clients, bool) or n_clients < 2:
        raise ValueError(f"n_clients must be an integer >= 2, got {n_clients!r}")
    if not isinstance(rare_class, (int, np.integer)) or isinstance(rare_class, bool) or not 0 <= rare_class < C:
        raise ValueError(f"rare_class must be a class index in [0, {C}) (valid: 0..{C - 1}), got {rare_class!r}")
    if not isinstance(departing_client, (int, np.integer)) or isinstance(departing_client, bool) \
            or not 0 <= departing_client < n_clients:
        raise ValueError(f"departing_client must be in [0, {n_clients}), got {departing_client!r}")
    if not (isinstance(departing_share, (int, float)) and not isinstance(departing_share, bool)
            and 0.0 <= departing_share <= 1.0):
        raise ValueError(f"departing_share must be in [0, 1], got {departing_share!r}")
    if not np.any(labels == rare_class):
        raise ValueError(f"rare_class {rare_class} has no sample; classes present: {sorted(set(labels.tolist()))}")
    rng = np.random.default_rng(seed)
    parts: list[list[int]] = [[] for _ in range(n_clients)]
    others = [k for k in range(n_clients) if k != departing_client]
    for c in range(C):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(len(idx))]
        if c == rare_class:
            n_dep = int(round(departing_share * len(idx)))
            parts[departing_client].extend(idx[:n_dep].tolist())
            order = rng.permutation(others)
            for j, i in enumerate(idx[n_dep:]):
                parts[int(order[j % len(order)])].append(int(i))
        else:
            for j, chunk in enumerate(np.array_split(idx, n_clients)):
                parts[j].extend(chunk.tolist())
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def make_partition(
    name: str, labels: np.ndarray, n_clients: int, seed: int, **kwargs: Any
) -> list[np.ndarray]:
    """Partition by name (one of ``PARTITIONS``).

    ``"iid"``, ``"dirichlet"`` (``alpha=``, ``min_size=``), ``"label_subset"``
    (``class_fraction=``), ``"grouped_dirichlet"`` (``n_groups=``, ``alpha=``,
    ``pool_fraction=``), ``"departure"`` (``rare_class=``, ``departing_share=``,
    ``departing_client=``, ``n_classes=``), ``"powerlaw"`` (``exponent=``, ``min_size=``) and ``"group"`` (``groups=`` required; ``labels`` is then unused and the
    client-group array is dropped -- call :func:`group_partition` to get it).

    Returns
    -------
    list of np.ndarray
        Per-client sorted ``int64`` index arrays.
    """
    if not isinstance(name, str) or name not in PARTITIONS:
        raise ValueError(f"unknown partition {name!r}; valid: {', '.join(PARTITIONS)}")
    if name == "iid":
        return iid_partition(labels, n_clients, seed, **kwargs)
    if name == "dirichlet":
        return dirichlet_partition(labels, n_clients, seed=seed, **kwargs)
    if name == "label_subset":
        return label_subset_partition(labels, n_clients, seed=seed, **kwargs)
    if name == "grouped_dirichlet":
        return grouped_dirichlet_partition(labels, n_clients, seed=seed, **kwargs)
    if name == "departure":
        return departure_partition(labels, n_clients, seed=seed, **kwargs)
    if name == "powerlaw":
        return powerlaw_partition(labels, n_clients, seed=seed, **kwargs)
    if "groups" not in kwargs:
        raise ValueError("partition 'group' needs group ids: pass groups=<array of shape (n,)>")
    parts, _ = group_partition(n_clients=n_clients, seed=seed, **kwargs)
    return parts
