"""The client-departure scenario of MPT (Jang et al., arXiv:2609.12771, Section V-A, "Scenario").

One client holds a given share (default 98 %) of a designated rare class; the rest of that class
is spread over the other clients; every other class is spread uniformly (IID) over all clients.
The client leaves for good at the departure round (a loop ``Event(round, client, "leave")``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rng import derive_seed, numpy_rng
from .datasets import ArrayDataset
from .partition import global_test_split, split_train_test


@dataclass(frozen=True)
class DepartureScenario:
    """A federation with a designated rare class and the client that holds most of it.

    Attributes
    ----------
    federation : :class:`fedlib.federation.Federation`
    departing_client : the client id that will leave
    rare_class : the designated rare class
    n_rare_departing : rare training+local-test samples on the departing client
    n_rare_remaining : rare samples on all other clients together
    """

    federation: object
    departing_client: int
    rare_class: int
    n_rare_departing: int
    n_rare_remaining: int


def make_departure_scenario(
    dataset: ArrayDataset,
    *,
    n_clients: int = 10,
    rare_class: int = 0,
    departing_share: float = 0.98,
    departing_client: int = 0,
    global_test_per_class: int = 100,
    test_fraction: float = 0.0,
    seed: int = 0,
) -> DepartureScenario:
    """Build the departure scenario.

    Parameters
    ----------
    dataset : the pooled data
    n_clients : number of clients (>= 2)
    rare_class : the class concentrated on the departing client, in ``[0, n_classes)``
    departing_share : share of the rare class (after the global test split) held by the departing
        client, in ``[0, 1]``; the remaining fraction ``1 - departing_share`` (the paper's 1, 2, 5,
        10 %) is dealt over the other clients as evenly as possible, in random order
    departing_client : its id, in ``[0, n_clients)``
    global_test_per_class : samples of every class held out first as the shared global test set
    test_fraction : each client's local test split (default 0: the few remaining rare samples
        all stay on the clients' training side, where MPT measures them)
    seed : run seed (global test split, dealing, local splits use derived streams)

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=120, n_classes=3, dim=2, seed=0).dataset
    >>> sc = make_departure_scenario(ds, n_clients=4, rare_class=1, departing_share=0.9, global_test_per_class=20)
    >>> sc.n_rare_departing, sc.n_rare_remaining
    (90, 10)
    """
    from ..federation import ClientData, Federation

    C = dataset.n_classes
    if not isinstance(n_clients, (int, np.integer)) or n_clients < 2:
        raise ValueError(f"n_clients must be an integer >= 2, got {n_clients!r}")
    if not isinstance(rare_class, (int, np.integer)) or not 0 <= rare_class < C:
        raise ValueError(f"rare_class must be a class index in [0, {C}) (valid: 0..{C - 1}), got {rare_class!r}")
    if not isinstance(departing_client, (int, np.integer)) or not 0 <= departing_client < n_clients:
        raise ValueError(f"departing_client must be in [0, {n_clients}), got {departing_client!r}")
    if not (isinstance(departing_share, (int, float)) and 0.0 <= departing_share <= 1.0):
        raise ValueError(f"departing_share must be in [0, 1], got {departing_share!r}")
    labels = dataset.labels_np
    if not np.any(labels == rare_class):
        raise ValueError(f"rare_class {rare_class} has no sample in {dataset.name!r}; classes present: "
                         f"{sorted(set(labels.tolist()))}")
    test_idx, rest = global_test_split(labels, global_test_per_class, seed=derive_seed(seed, 11))
    rng = numpy_rng(seed, 12)
    parts: list[list[int]] = [[] for _ in range(n_clients)]
    others = [k for k in range(n_clients) if k != departing_client]
    for c in range(C):
        idx = rest[labels[rest] == c]
        idx = idx[rng.permutation(len(idx))]
        if c == rare_class:
            if len(idx) == 0:
                raise ValueError(f"rare_class {rare_class} has no sample left after the global test split "
                                 f"({global_test_per_class} per class); lower global_test_per_class")
            n_dep = int(round(departing_share * len(idx)))
            parts[departing_client].extend(idx[:n_dep].tolist())
            order = rng.permutation(others)
            for j, i in enumerate(idx[n_dep:]):
                parts[int(order[j % len(order)])].append(int(i))
        else:
            for j, chunk in enumerate(np.array_split(idx, n_clients)):
                parts[j].extend(chunk.tolist())
    parts_np = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    train_parts, test_parts = split_train_test(labels, parts_np, test_fraction=test_fraction, seed=derive_seed(seed, 13))
    clients = [ClientData(dataset.subset(tr), dataset.subset(te)) for tr, te in zip(train_parts, test_parts)]
    n_dep = int(np.sum(labels[parts_np[departing_client]] == rare_class))
    n_rem = int(sum(np.sum(labels[p] == rare_class) for k, p in enumerate(parts_np) if k != departing_client))
    description = {
        "dataset": dataset.name, "n_clients": n_clients, "partition": "departure", "rare_class": int(rare_class),
        "departing_share": float(departing_share), "departing_client": int(departing_client),
        "global_test_per_class": global_test_per_class, "test_fraction": test_fraction, "seed": seed,
    }
    fed = Federation(clients, dataset.subset(test_idx), C, description)
    return DepartureScenario(fed, int(departing_client), int(rare_class), n_dep, n_rem)


__all__ = ["DepartureScenario", "make_departure_scenario"]
