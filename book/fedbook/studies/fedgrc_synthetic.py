"""Random synthetic instances for FedGRC's statistics chapter: federations of per-client features and
labels with a chosen layer structure, drawn from a seeded ``numpy.random.Generator``.

FedGRC (*Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive Statistical
Personalization for Federated Learning*), Section IV-B and IV-C: the statements about MMS and
SASP hold for any unscaled multilayer features, so its chapter checks them on random
federations (:func:`random_multilayer_federation`) with random layer structures
(:func:`random_layer_dims`).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> dims = random_layer_dims(rng, 6)
>>> parts = random_multilayer_federation(rng, 3, 4, dims)
>>> len(parts), parts[0][0].shape[1] == sum(dims)
(3, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedlib.validation import check_int


def random_layer_dims(rng: np.random.Generator, max_dim: int) -> list[int]:
    """One to three layer dimensions, each between 1 and ``max(2, max_dim // m)`` for ``m`` layers.

    Parameters
    ----------
    rng : numpy.random.Generator
        The stream the draws come from (two draws: the number of layers, then their dimensions).
    max_dim : int
        The largest total feature dimension aimed at (at least 1).

    Returns
    -------
    list of int
        The layer dimensions, of length 1 to 3.

    Raises
    ------
    ValueError
        ``max_dim`` that is not an integer >= 1.

    Examples
    --------
    >>> random_layer_dims(np.random.default_rng(0), 12)
    [3, 3, 2]
    """
    check_int("max_dim", max_dim, low=1)
    m = int(rng.integers(1, 4))
    return [int(x) for x in rng.integers(1, max(2, max_dim // m) + 1, size=m)]


def random_multilayer_federation(
    rng: np.random.Generator,
    n_clients: int,
    n_classes: int,
    layer_dims: Sequence[int],
    n_per_client: tuple[int, int] = (4, 25),
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Unscaled multilayer features of clients with label skew and client-specific class shifts.

    Each layer has its own magnitude (a factor between 0.1 and 100, so per-layer scaling
    matters), the within-class noise is correlated across coordinates (one mixing matrix), every
    client shifts every class mean by its own offset and draws its labels from a Dirichlet(0.4)
    class distribution, so some classes are absent on some clients. Every class is
    federation-known: a class that no client drew is given one sample on client 0.

    Parameters
    ----------
    rng : numpy.random.Generator
        The stream every draw comes from, in a fixed order.
    n_clients, n_classes : int
        At least 1 each.
    layer_dims : sequence of int
        The dimension of each layer; the features are their concatenation, of dimension
        ``d = sum(layer_dims)``.
    n_per_client : (int, int), default (4, 25)
        Each client's sample count is drawn from ``[low, high)``.

    Returns
    -------
    list of (ndarray, ndarray)
        Per client, the features ``h`` of shape (n_k, d) and the labels ``y`` of shape (n_k,)
        in ``[0, n_classes)`` (client 0 may hold up to ``n_classes`` extra samples).

    Raises
    ------
    ValueError
        On a count below 1, an empty ``layer_dims`` or a layer dimension below 1, or an empty
        range ``n_per_client``.

    Examples
    --------
    >>> parts = random_multilayer_federation(np.random.default_rng(1), 2, 3, [2, 1], n_per_client=(5, 6))
    >>> [h.shape for h, y in parts]  # 5 samples each; a class neither client drew is added to client 0
    [(6, 3), (5, 3)]
    >>> sorted(set(np.concatenate([y for h, y in parts]).tolist()))
    [0, 1, 2]
    """
    check_int("n_clients", n_clients, low=1)
    check_int("n_classes", n_classes, low=1)
    if len(layer_dims) == 0:
        raise ValueError(f"layer_dims must name at least one layer, got {list(layer_dims)!r}")
    for x in layer_dims:
        check_int("each of layer_dims", x, low=1)
    low, high = n_per_client
    if not 1 <= low < high:
        raise ValueError(f"n_per_client must be a range [low, high) with 1 <= low < high, got {n_per_client!r}")
    d = int(sum(layer_dims))
    mag = np.repeat(10.0 ** rng.uniform(-1, 2, size=len(layer_dims)), layer_dims)
    centers = rng.normal(scale=2.0, size=(n_classes, d))
    mix = rng.normal(size=(d, d)) * 0.5
    parts = []
    for _ in range(n_clients):
        n = int(rng.integers(*n_per_client))
        y = rng.choice(n_classes, size=n, p=rng.dirichlet(np.full(n_classes, 0.4)))
        shift = rng.normal(scale=0.8, size=(n_classes, d))
        h = (centers[y] + shift[y] + rng.normal(size=(n, d)) @ mix) * mag
        parts.append((h, y))
    missing = sorted(set(range(n_classes)) - set(np.concatenate([p[1] for p in parts]).tolist()))
    if missing:  # make every class federation-known (one sample each on client 0)
        h0, y0 = parts[0]
        extra = (centers[missing] + rng.normal(size=(len(missing), d)) @ mix) * mag
        parts[0] = (np.concatenate([h0, extra]), np.concatenate([y0, missing]))
    return parts


__all__ = ["random_layer_dims", "random_multilayer_federation"]
