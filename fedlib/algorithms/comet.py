"""COMET: clustered knowledge transfer with k-means on pseudo-labels.

Cho, Wang, Chirvolu and Joshi, "Communication-Efficient and Model-Heterogeneous Personalized
Federated Learning via Clustered Knowledge Transfer", IEEE JSTSP 2023 (arXiv:2109.08119),
Algorithm 1. A :class:`~fedlib.algorithms.fedmd.PublicDistillation` method whose server groups
the clients by k-means (scikit-learn's, a **fixed** number of clusters ``k``, re-run every round on
the clients' latest pseudo-labels, flattened) and sends each client its cluster's mean soft
labels; the clients distil on them (KL) and revisit their data. No server model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from sklearn.cluster import KMeans

from ..rng import COMET_KMEANS, derive_seed
from ..validation import is_int
from .fedmd import PublicDistillation, PublicServer


@dataclass
class COMET(PublicDistillation):
    """k-means with a fixed ``k`` on the pseudo-labels; each cluster's mean is its clients' target."""

    k: int = 5
    n_init: int = 10
    name = "comet"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (is_int(self.k) and self.k >= 1):
            raise ValueError(f"COMET's number of clusters k must be an int >= 1, got {self.k!r}")

    def group(self, server: PublicServer, labels: dict[int, torch.Tensor], round_: int) -> dict[int, int]:
        """k-means on the flattened labels (``min(k, clients)`` clusters; seeded per round);
        clusters numbered by their lowest client."""
        clients = sorted(labels)
        k = min(self.k, len(clients))
        if k == 1:
            return {c: 0 for c in clients}
        x = torch.stack([labels[c].reshape(-1) for c in clients]).double().numpy()
        raw = KMeans(n_clusters=k, n_init=self.n_init, random_state=derive_seed(self.seed, round_, COMET_KMEANS) % 2**32).fit(x).labels_
        order = {g: j for j, g in enumerate(dict.fromkeys(raw.tolist()))}
        return {c: order[int(g)] for c, g in zip(clients, raw)}


__all__ = ["COMET"]
