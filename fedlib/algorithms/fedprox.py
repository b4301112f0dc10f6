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
from ..training import TrainConfig, local_train, proximal_term
from ..protocol import Algorithm, ClientContext, load_model, model_arrays, update_message


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
        anchor = {name: p.detach().clone() for name, p in model.named_parameters()}  # w^t
        mu = self.mu

        def loss_fn(m, x, y):  # Eq. (2)
            return F.cross_entropy(m(x), y) + 0.5 * mu * proximal_term(m, anchor)

        loss = local_train(model, data.train.x, data.train.y, self.train, generator, loss_fn=loss_fn)
        return state, update_message(model_arrays(model), len(data.train), loss)
