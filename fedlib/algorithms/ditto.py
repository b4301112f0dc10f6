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
from torch.nn import functional as F

from ..messages import Message, State, prefixed
from ..training import TrainConfig, local_train, proximal_term
from ..protocol import MODEL, Algorithm, ClientContext, Predictor, load_model, model_arrays, update_message

PERSONAL = "personal/"


@dataclass
class Ditto(Algorithm):
    """FedAvg for the global model plus a proximally regularized personal model per client."""

    train: TrainConfig = field(default_factory=TrainConfig)  # the global model's local update
    personal_train: TrainConfig = field(default_factory=TrainConfig)  # the personal model's
    lam: float = 0.1
    name = "ditto"

    def __post_init__(self) -> None:
        if not self.lam >= 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")

    def _personal(self, ctx: ClientContext, state: State, message: Message) -> torch.nn.Module:
        own = state.with_prefix(PERSONAL)
        return load_model(ctx.model, State(prefixed(MODEL, own)) if own else message)

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        x, y = data.train.x, data.train.y
        # 1. the personal model, pulled toward the broadcast global model
        model = self._personal(ctx, state, message)
        anchor = {name: t.detach().clone() for name, t in message.with_prefix(MODEL).items()}  # w^t
        lam = self.lam

        def loss_fn(m, xb, yb):
            return F.cross_entropy(m(xb), yb) + 0.5 * lam * proximal_term(m, anchor)

        local_train(model, x, y, self.personal_train, generator, loss_fn=loss_fn)
        new_state = State(arrays=prefixed(PERSONAL, model.state_dict()), meta=dict(state.meta))
        # 2. the global model's local update, exactly as FedAvg
        model = load_model(ctx.model, message)
        loss = local_train(model, x, y, self.train, generator)
        return new_state, update_message(model_arrays(model), len(y), loss)

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        return self._personal(ctx, state, message).eval()
