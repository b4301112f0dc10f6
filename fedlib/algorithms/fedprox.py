"""FedProx: FedAvg with a proximal term on the local objective.

Li, Sahu, Zaheer, Sanjabi, Talwalkar and Smith, "Federated Optimization in Heterogeneous
Networks", MLSys 2020 (arXiv:1812.06127), Eq. (2): client ``k`` minimizes

.. math:: h_k(w) = F_k(w) + \\frac{\\mu}{2}\\,\\lVert w - w^t \\rVert^2

around the broadcast global model :math:`w^t`. Only the local objective changes; broadcast and
aggregation are FedAvg's. With ``mu = 0`` it is FedAvg exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..messages import Message, State
from ..training import LocalProgram, Phase, TrainConfig
from ..protocol import MODEL, ClientContext, ProgramMethod, model_arrays, update_message


@dataclass
class FedProx(ProgramMethod):
    """Local SGD on cross-entropy plus ``mu / 2 * ||w - w_global||^2``; FedAvg's server."""

    train: TrainConfig = field(default_factory=TrainConfig)
    mu: float = 0.01
    name = "fedprox"

    def __post_init__(self) -> None:
        if not (isinstance(self.mu, (int, float)) and not isinstance(self.mu, bool) and math.isfinite(self.mu)
                and self.mu >= 0):
            raise ValueError(f"mu must be a finite number >= 0, got {self.mu!r}")

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram:
        """Eq. (2): local SGD on cross-entropy plus the proximal term around the broadcast :math:`w^t`."""
        n = len(data.train)
        return LocalProgram(message.with_prefix(MODEL), data.train.x, data.train.y, (Phase(self.train, mu=self.mu),),
                            lambda model, loss: (state, update_message(model_arrays(model), n, loss)))
