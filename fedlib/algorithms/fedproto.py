"""FedProto: class prototypes shared through the server regularize local representations.

Tan, Long, Liu, Zhou, Lu, Jiang and Zhang, "FedProto: Federated Prototype Learning across
Heterogeneous Clients", AAAI 2022 (arXiv:2105.00243), the local loss and the prototype
aggregation of its method section: each client minimizes

.. math:: \\mathcal L = \\mathrm{CE}(f(x), y) + \\lambda\\, \\lVert z(x) - \\bar C_y \\rVert^2

(mean squared error between its penultimate features :math:`z` and the global prototype of the
label), then sends its local class prototypes (means of :math:`z`) with their counts; the server
averages prototypes per class weighted by counts.

As in the benchmark the GGEUR paper follows (Huang et al., TPAMI 2024), the models are also
averaged (FedAvg) and each client deploys the global model's head; the original FedProto keeps
heterogeneous local models and classifies by the nearest prototype. ``lam`` defaults to 2
(GGEUR, Table 9). With a linear classifier on fixed embeddings the penultimate features are the
input itself, so the regularizer has no gradient: use an MLP classifier.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ..messages import Message, State, prefixed
from ..models import PENULTIMATE
from ..training import TrainConfig, local_train
from ..aggregate import model_average
from ..protocol import MODEL, Algorithm, Capabilities, ClientContext, load_model, model_arrays, update_message

PROTO = "proto/"


def _class_sums(z: torch.Tensor, y: torch.Tensor, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    onehot = F.one_hot(y.long(), n_classes).to(z.dtype)  # (n, C)
    return onehot.sum(0), onehot.T @ z  # (C,), (C, d)


@dataclass
class FedProto(Algorithm):
    """FedAvg plus FedProto's prototype regularizer and prototype exchange."""

    train: TrainConfig = field(default_factory=TrainConfig)
    lam: float = 2.0
    name = "fedproto"
    capabilities = Capabilities(streams=False, reply_arrays=("proto/",))  # the global prototypes are stacked from every reply (C x d each)

    def __post_init__(self) -> None:
        if not self.lam >= 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The model and the global prototypes, one message shared by every client."""
        keep = {k: v for k, v in server.arrays.items() if k.startswith(MODEL) or k.startswith(PROTO)}
        return dict.fromkeys(clients, Message(arrays=keep, kind="model+prototypes"))

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        model = load_model(ctx.model, message, strict=True)
        protos = message.with_prefix(PROTO)
        lam = self.lam
        if "global" in protos:
            glob, have = protos["global"].float(), protos["mask"].bool()
        else:
            glob, have = None, None

        def loss_fn(m, x, y):
            logits, feats = m.forward_features(x)
            loss = F.cross_entropy(logits, y)
            if glob is not None and lam > 0:
                sel = have[y]
                if bool(sel.any()):
                    loss = loss + lam * F.mse_loss(feats[PENULTIMATE][sel], glob[y[sel]])
            return loss

        loss = local_train(model, data.train.x, data.train.y, self.train, generator, loss_fn=loss_fn)
        with torch.no_grad():
            z = model.embed(data.train.x)
        counts, sums = _class_sums(z, data.train.y, ctx.n_classes)
        means = sums / counts.clamp(min=1)[:, None]
        arrays = {**model_arrays(model), **prefixed(PROTO, {"means": means, "counts": counts})}
        return state, update_message(arrays, len(data.train), loss, kind="update+prototypes")

    def aggregate(self, server: State, replies, round_: int) -> State:
        """FedAvg's mean of the models, and the count-weighted global class prototypes."""
        updates = list(replies)
        new = model_average(server, updates)
        if not updates:
            return new
        counts = torch.stack([m.arrays[PROTO + "counts"] for _, m in updates])  # (K, C)
        means = torch.stack([m.arrays[PROTO + "means"] for _, m in updates])  # (K, C, d)
        total = counts.sum(0)
        glob = (counts[:, :, None] * means).sum(0) / total.clamp(min=1)[:, None]  # count-weighted class means
        new.arrays[PROTO + "global"] = glob
        new.arrays[PROTO + "mask"] = (total > 0).to(torch.float32)
        return new
