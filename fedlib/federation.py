"""A federation: clients that own their data, and the shared class-balanced global test set.

Data flows one way (DESIGN.md): dataset -> global test split -> partition of the rest ->
per-client train / local-test split -> :class:`Federation`. Only :class:`fedlib.loop.Client`
objects hold a :class:`ClientData`; the server side of the loop never receives one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .data import ArrayDataset, global_test_split, make_partition, partition_summary, split_train_test
from .rng import derive_seed


@dataclass(frozen=True)
class ClientData:
    """One client's training split and local test split."""

    train: ArrayDataset
    test: ArrayDataset

    def train_counts(self, n_classes: int) -> np.ndarray:
        """Per-class training counts, shape (n_classes,)."""
        return np.bincount(self.train.labels_np, minlength=n_classes).astype(np.int64)


@dataclass(frozen=True)
class Federation:
    """Clients' data plus the shared global test set.

    Attributes
    ----------
    clients : list of ClientData, one per client
    global_test : ArrayDataset, class-balanced, disjoint from every client's data
    n_classes : int
    description : dict, how it was built (for tables and reproducibility)
    """

    clients: list[ClientData]
    global_test: ArrayDataset
    n_classes: int
    description: dict

    @property
    def n_clients(self) -> int:
        return len(self.clients)

    def train_counts(self) -> np.ndarray:
        """Client × class training counts, shape (n_clients, n_classes)."""
        return np.stack([c.train_counts(self.n_classes) for c in self.clients])

    def summary(self) -> pd.DataFrame:
        """One row per client: training and local-test sizes, classes seen, largest class share."""
        counts = self.train_counts()
        n = counts.sum(axis=1)
        return pd.DataFrame(
            {
                "n_train": n,
                "n_local_test": [len(c.test) for c in self.clients],
                "classes_seen": (counts > 0).sum(axis=1),
                "largest_class_share": np.where(n > 0, counts.max(axis=1) / np.maximum(n, 1), 0.0),
            },
            index=pd.RangeIndex(self.n_clients, name="client"),
        )


def make_federation(
    dataset: ArrayDataset,
    *,
    n_clients: int,
    partition: str = "dirichlet",
    global_test_per_class: int = 100,
    test_fraction: float = 0.25,
    seed: int = 0,
    **partition_kwargs,
) -> Federation:
    """Split ``dataset`` into a class-balanced global test set and ``n_clients`` clients.

    Parameters
    ----------
    dataset : the pooled data (e.g. :func:`fedlib.data.datasets.load_mnist5k`)
    n_clients : number of clients
    partition : a name from ``fedlib.data.PARTITIONS`` (``"dirichlet"`` takes ``alpha`` and
        ``min_size``; ``"label_subset"`` takes ``class_fraction``; ...)
    global_test_per_class : samples of every class held out as the shared global test set
    test_fraction : share of each client's data in its local test split (75/25 by default)
    seed : run seed; the three random steps use independent derived streams

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    >>> fed = make_federation(ds, n_clients=4, alpha=0.5, global_test_per_class=10, seed=0)
    >>> fed.n_clients, len(fed.global_test)
    (4, 30)
    """
    labels = dataset.labels_np
    test_idx, rest = global_test_split(labels, global_test_per_class, seed=derive_seed(seed, 11))
    parts = make_partition(partition, labels[rest], n_clients, seed=derive_seed(seed, 12), **partition_kwargs)
    parts = [rest[p] for p in parts]
    train_parts, test_parts = split_train_test(labels, parts, test_fraction=test_fraction, seed=derive_seed(seed, 13))
    clients = [ClientData(dataset.subset(tr), dataset.subset(te)) for tr, te in zip(train_parts, test_parts)]
    description = {
        "dataset": dataset.name,
        "n_clients": n_clients,
        "partition": partition,
        **{k: v for k, v in partition_kwargs.items() if np.isscalar(v)},
        "global_test_per_class": global_test_per_class,
        "test_fraction": test_fraction,
        "seed": seed,
    }
    return Federation(clients, dataset.subset(test_idx), dataset.n_classes, description)


__all__ = ["ClientData", "Federation", "make_federation", "partition_summary"]
