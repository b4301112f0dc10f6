"""FedProx: FedAvg with a proximal term on the local objective.

Li, Sahu, Zaheer, Sanjabi, Talwalkar and Smith, "Federated Optimization in Heterogeneous
Networks", MLSys 2020 (arXiv:1812.06127), Eq. (2): client ``k`` minimizes

.. math:: h_k(w) = F_k(w) + \\frac{\\mu}{2}\\,\\lVert w - w^t \\rVert^2

around the broadcast global model :math:`w^t`. Only the local objective changes; broadcast and
aggregation are FedAvg's. With ``mu = 0`` it is FedAvg exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ..messages import Message, State
from ..training import TrainConfig, local_train
from ..protocol import Algorithm, ClientContext, load_model, model_arrays


@dataclass
class FedProx(Algorithm):
    """Local SGD on cross-entropy plus ``mu / 2 * ||w - w_global||^2``; FedAvg's server."""

    train: TrainConfig = field(default_factory=TrainConfig)
    mu: float = 0.01
    name = "fedprox"

    def __post_init__(self) -> None:
        if not self.mu >= 0:
            raise ValueError(f"mu must be >= 0, got {self.mu}")

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        model = load_model(ctx.model, message)
        anchor = [p.detach().clone() for p in model.parameters()]
        mu = self.mu

        def loss_fn(m, x, y):
            prox = sum(((p - a) ** 2).sum() for p, a in zip(m.parameters(), anchor))
            return F.cross_entropy(m(x), y) + 0.5 * mu * prox

        loss = local_train(model, data.train.x, data.train.y, self.train, generator, loss_fn=loss_fn)
        return state, Message(arrays=model_arrays(model), meta={"n_samples": len(data.train), "train_loss": loss}, kind="update")
