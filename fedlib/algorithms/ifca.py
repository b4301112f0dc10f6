"""IFCA: k cluster models, each client trains the one with the lowest loss on its data.

Ghosh, Chung, Yin and Ramchandran, "An Efficient Framework for Clustered Federated Learning",
NeurIPS 2020 (arXiv:2006.04088), Algorithm 2 (model averaging): the server broadcasts all ``k``
cluster models; a sampled client evaluates each on its training split, picks the one with the
lowest mean cross-entropy (its cluster, a hard assignment), trains it locally and replies with it
and the cluster's index; the server averages each cluster's replies (sample-weighted) and keeps a
cluster that no client chose. A client deploys the cluster model with the lowest training loss.
Several training trajectories (one per cluster) and hard clusters: the baseline HDC-FL contrasts
itself with (arXiv:2610.30075, Section 2).

Cluster 0 starts from the run's initial model; cluster ``j >= 1`` from a fresh initialization of
the same architecture under the stream ``derive_seed(seed, j, IFCA_INIT)``: every module's
``reset_parameters`` (PyTorch's default initialization; the ResNet-18 and MobileNetV2 stems, which
torchvision initializes with Kaiming's rule at construction, are drawn by PyTorch's default rule
in those clusters).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ..aggregate import WeightedMean
from ..messages import Message, State, prefixed
from ..protocol import MODEL, ClientContext, ProgramMethod, Predictor, load_model, model_arrays, update_message
from ..models import reinitialized
from ..rng import IFCA_INIT, derive_seed
from ..training import LocalProgram, Phase, TrainConfig
from ..validation import is_int

CLUSTER = "cluster/"
"""Prefix of the cluster models in the server state and the broadcast: ``cluster/<j>/model/...``."""


@torch.no_grad()
def cluster_losses(model: torch.nn.Module, message: Message, k: int, x: torch.Tensor, y: torch.Tensor,
                   batch_size: int = 256) -> torch.Tensor:
    """The mean cross-entropy of each of the ``k`` cluster models of ``message`` on ``(x, y)``, shape (k,)."""
    out = torch.empty(k, dtype=torch.float64)
    for j in range(k):
        load_model(model, State(message.with_prefix(f"{CLUSTER}{j}/"))).eval()
        total = sum(float(F.cross_entropy(model(x[i:i + batch_size]), y[i:i + batch_size], reduction="sum"))
                    for i in range(0, len(x), batch_size))
        out[j] = total / max(len(x), 1)
    return out


@dataclass
class IFCA(ProgramMethod):
    """``k`` cluster models; each sampled client trains the one with its lowest training loss."""

    train: TrainConfig = field(default_factory=TrainConfig)
    k: int = 2
    seed: int = 0  # the initializations of clusters 1..k-1
    name = "ifca"

    def __post_init__(self) -> None:
        if not (is_int(self.k) and self.k >= 1):
            raise ValueError(f"k (the number of cluster models) must be an integer >= 1 (1 is FedAvg), got {self.k!r}")
        self.k = int(self.k)

    def init_server(self, model: torch.nn.Module) -> State:
        arrays = prefixed(f"{CLUSTER}0/", model_arrays(model))
        for j in range(1, self.k):
            arrays.update(prefixed(f"{CLUSTER}{j}/", model_arrays(reinitialized(model, derive_seed(self.seed, j, IFCA_INIT)))))
        return State(arrays=arrays)

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """Every cluster model, one message shared by every client."""
        return dict.fromkeys(clients, Message(arrays=dict(server.arrays), kind="clusters"))

    def _choose(self, ctx: ClientContext, message: Message, x: torch.Tensor, y: torch.Tensor) -> int:
        return int(torch.argmin(cluster_losses(ctx.model, message, self.k, x, y)))

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram:
        """The cluster model with the lowest training loss, trained locally; the reply names the cluster."""
        x, y = data.train.x, data.train.y
        j = self._choose(ctx, message, x, y)
        return LocalProgram(message.with_prefix(f"{CLUSTER}{j}/{MODEL}"), x, y, (Phase(self.train),),
                            lambda model, loss: (state, update_message(model_arrays(model), len(y), loss, cluster=j)))

    def aggregate(self, server: State, replies, round_: int) -> State:
        """One running sample-weighted mean per cluster, each reply folded into its cluster's as it
        arrives; a cluster no client chose keeps its model."""
        clusters = sorted({int(name.split("/")[1]) for name in server.arrays if name.startswith(CLUSTER)})
        means: dict[int, WeightedMean] = {}
        for client, reply in replies:
            j = reply.meta.get("cluster")
            if not is_int(j) or j not in clusters:
                raise ValueError(f"client {client}'s reply names cluster {j!r}; valid: {', '.join(map(str, clusters))}")
            means.setdefault(int(j), WeightedMean()).add(reply.with_prefix(MODEL), float(reply.meta["n_samples"]))
            del reply  # freed before the next client trains
        arrays = dict(server.arrays)
        for j, mean in sorted(means.items()):
            arrays.update(prefixed(f"{CLUSTER}{j}/{MODEL}", mean.finish()))
        return State(arrays=arrays, meta=dict(server.meta))

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        j = self._choose(ctx, message, data.train.x, data.train.y)
        return load_model(ctx.model, State(message.with_prefix(f"{CLUSTER}{j}/"))).eval()


__all__ = ["CLUSTER", "IFCA", "cluster_losses"]
