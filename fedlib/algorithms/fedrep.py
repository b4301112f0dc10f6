"""FedRep: a shared representation, personal heads.

Collins, Hassani, Mokhtari and Shakkottai, "Exploiting Shared Representations for Personalized
Federated Learning", ICML 2021 (arXiv:2102.07078), Algorithm 1: each round a sampled client first
trains its own head with the body frozen, then the body with its head frozen; only the body is
sent and averaged. A client's head never leaves it (it is the client's persistent state), and the
deployed predictor is the global body with the client's head.

The server's broadcast carries the body and the *initial* head (which the server never changes):
a client adopts it as its personal head the first time it takes part, so every head starts from
the same seeded initialization.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..messages import Message, State, prefixed
from ..models import HEAD_PREFIX
from ..training import LocalProgram, Phase, TrainConfig
from ..protocol import (HEAD, MODEL, Algorithm, ClientContext, Predictor, body_arrays, load_model, update_message,
                        without_head)

PERSONAL = "personal/"


def personal_head(state: State, message: Message) -> dict[str, torch.Tensor]:
    """The client's head from its state, or the broadcast initial head on its first round (``model/head.*``-prefixed)."""
    own = state.with_prefix(PERSONAL)
    return prefixed(MODEL, own) if own else {k: v for k, v in message.arrays.items() if k.startswith(HEAD)}


@dataclass
class FedRep(Algorithm):
    """Head epochs, then body epochs, per round; the body is averaged, heads stay personal."""

    train: TrainConfig = field(default_factory=TrainConfig)  # the body's local training
    head_train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=5))  # the head's, first
    name = "fedrep"

    @staticmethod
    def _arrays(state: State, message: Message) -> State:
        """The broadcast body with the client's own head (``model/``-prefixed)."""
        return State({**without_head(message.arrays), **personal_head(state, message)})

    def _load(self, ctx: ClientContext, state: State, message: Message) -> torch.nn.Module:
        return load_model(ctx.model, self._arrays(state, message))

    def local_program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram:
        """The client's head trained on the global body, then the body under that head; the head
        stays in the client's state, the body is the reply."""
        weights = self._arrays(state, message).with_prefix(MODEL)
        n = len(data.train)

        def finish(model, loss):
            new_state = State(arrays=prefixed(PERSONAL + HEAD_PREFIX, model.head.state_dict()), meta=dict(state.meta))
            return new_state, update_message(body_arrays(model), n, loss)

        phases = (Phase(self.head_train, params="head"), Phase(self.train, params="body"))
        return LocalProgram(weights, data.train.x, data.train.y, phases, finish)

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        return self._load(ctx, state, message).eval()
