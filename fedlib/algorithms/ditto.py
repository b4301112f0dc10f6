"""Ditto: a global model trained as in FedAvg, and a personal model per client regularized toward it.

Li, Hu, Beirami and Smith, "Ditto: Fair and Robust Federated Learning Through Personalization",
ICML 2021 (arXiv:2012.04221), Algorithm 1: a sampled client updates the global model locally (as
FedAvg) and, separately, its personal model :math:`v_k` on

.. math:: \\min_{v_k}\\; F_k(v_k) + \\frac{\\lambda}{2}\\,\\lVert v_k - w^t \\rVert^2 ,

with :math:`w^t` the broadcast global model. Only the global update is sent; :math:`v_k` is the
client's persistent state (initialized to the first global model it receives) and its deployed
predictor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..messages import Message, State, prefixed
from ..training import LocalProgram, Phase, TrainConfig
from ..protocol import MODEL, ClientContext, Predictor, ProgramMethod, model_arrays, update_message

PERSONAL = "personal/"


@dataclass
class Ditto(ProgramMethod):
    """FedAvg for the global model plus a proximally regularized personal model per client."""

    train: TrainConfig = field(default_factory=TrainConfig)  # the global model's local update
    personal_train: TrainConfig = field(default_factory=TrainConfig)  # the personal model's
    lam: float = 0.1
    name = "ditto"

    def __post_init__(self) -> None:
        if not self.lam >= 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")

    def _personal(self, state: State, message: Message) -> dict[str, torch.Tensor]:
        """The client's personal model :math:`v_k`, or the broadcast model before its first round."""
        return state.with_prefix(PERSONAL) or message.with_prefix(MODEL)

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram:
        """The personal model trained proximal to the broadcast :math:`w^t`, then, from the same
        generator, the global model's local update exactly as FedAvg's; only the latter is sent."""
        x, y, glob = data.train.x, data.train.y, message.with_prefix(MODEL)

        def personal_done(model: torch.nn.Module, loss: float) -> LocalProgram:
            kept = State(arrays=prefixed(PERSONAL, model.state_dict()), meta=dict(state.meta))
            return LocalProgram(glob, x, y, (Phase(self.train),),
                                lambda model, loss: (kept, update_message(model_arrays(model), len(y), loss)))

        return LocalProgram(self._personal(state, message), x, y, (Phase(self.personal_train, mu=self.lam, anchor="message"),),
                            personal_done, message_weights=glob)

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        ctx.model.load_state_dict(self._personal(state, message))
        return ctx.model.eval()
