"""FedRep, and FedAvg-SE: a shared representation (encoder), personal heads.

Collins, Hassani, Mokhtari and Shakkottai, "Exploiting Shared Representations for Personalized
Federated Learning", ICML 2021 (arXiv:2102.07078), Algorithm 1: each round a sampled client first
trains its own head with the body frozen, then the body with its head frozen; only the body is
sent and averaged. A client's head never leaves it (it is the client's persistent state), and the
deployed predictor is the global body with the client's head.

FedAvg-SE ("shared encoder", the trajectory HDC-FL leaves intact: arXiv:2610.30075, Section 3.1;
FedPer's scheme, Arivazhagan et al., arXiv:1912.00818) trains body and head **together** from
the shared body and the client's own head, and sends the body only. Both are
:class:`PersonalHead` methods: one body/head split, written once, that differ only in their
phases (:meth:`PersonalHead.phases`) and, for HDC-FL, in their reply (:meth:`PersonalHead.reply`).

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
from ..protocol import (HEAD, MODEL, ClientContext, ProgramMethod, Predictor, body_arrays, load_model, update_message,
                        without_head)

PERSONAL = "personal/"


def personal_head(state: State, message: Message) -> dict[str, torch.Tensor]:
    """The client's head from its state, or the broadcast initial head on its first round (``model/head.*``-prefixed)."""
    own = state.with_prefix(PERSONAL)
    return prefixed(MODEL, own) if own else {k: v for k, v in message.arrays.items() if k.startswith(HEAD)}


class PersonalHead(ProgramMethod):
    """The body/head split: local work starts from the broadcast body with the client's own head,
    the head stays in the client's state, the reply is the body (averaged by the server), and the
    deployed predictor is the message's body with the client's head. A subclass says which
    :meth:`phases` train, and may add to the :meth:`reply`."""

    train: TrainConfig

    def phases(self) -> tuple[Phase, ...]:
        """The local phases, in order."""
        raise NotImplementedError

    def reply(self, model: torch.nn.Module, n_samples: int, loss: float) -> Message:
        """What the client sends after training: its body (``model/``-prefixed, no head)."""
        return update_message(body_arrays(model), n_samples, loss)

    @staticmethod
    def _arrays(state: State, message: Message) -> State:
        """The message's body with the client's own head (``model/``-prefixed)."""
        return State({**without_head(message.arrays), **personal_head(state, message)})

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram:
        """The :meth:`phases` from the broadcast body and the client's head; the head stays in
        the client's state, :meth:`reply` is sent."""
        n = len(data.train)

        def finish(model, loss):
            new_state = State(arrays=prefixed(PERSONAL + HEAD_PREFIX, model.head.state_dict()), meta=dict(state.meta))
            return new_state, self.reply(model, n, loss)

        return LocalProgram(self._arrays(state, message).with_prefix(MODEL), data.train.x, data.train.y, self.phases(), finish)

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        return load_model(ctx.model, self._arrays(state, message)).eval()


@dataclass
class FedRep(PersonalHead):
    """Head epochs, then body epochs, per round; the body is averaged, heads stay personal."""

    train: TrainConfig = field(default_factory=TrainConfig)  # the body's local training
    head_train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=5))  # the head's, first
    name = "fedrep"

    def phases(self) -> tuple[Phase, ...]:
        """The client's head trained on the global body, then the body under that head."""
        return (Phase(self.head_train, params="head"), Phase(self.train, params="body"))


@dataclass
class FedAvgSE(PersonalHead):
    """Body and head trained together per round; the body is averaged, heads stay personal."""

    train: TrainConfig = field(default_factory=TrainConfig)
    name = "fedavg_se"

    def phases(self) -> tuple[Phase, ...]:
        """One joint phase over every parameter."""
        return (Phase(self.train),)
