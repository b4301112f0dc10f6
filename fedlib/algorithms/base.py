"""The hooks through which a method plugs into the one round loop (:mod:`fedlib.loop`).

A method overrides some of these and nothing else (DESIGN.md, item 2):

=================  ==========  ===================================================================
hook               runs on     does
=================  ==========  ===================================================================
``init_server``    server      the server state from the initial model
``init_client``    client      a client's persistent state before its first round (default empty)
``broadcast``      server      the message the server sends to a sampled client
``local_update``   client      (state, message, data, generator) -> (new state, reply)
``aggregate``      server      the new server state from the replies (messages only)
``deploy``         client      the client's deployed predictor, evaluated unchanged by the protocol
``on_event``       server      a client left or joined (the server learns the id, nothing else)
=================  ==========  ===================================================================

Server hooks receive :class:`~fedlib.messages.State` and :class:`~fedlib.messages.Message`
objects only; client hooks receive the client's own data. A client's work is a function of
(state, data, generator): ``ctx.model`` is a scratch copy of the architecture whose weights the
hook must load from the message or state before use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..aggregate import weighted_average
from ..messages import Message, State, prefixed

MODEL = "model/"

Predictor = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class ClientContext:
    """What the loop tells a client besides its data: who and when it is, and a model workspace."""

    client: int
    round: int
    model: torch.nn.Module
    n_classes: int


@dataclass(frozen=True)
class Event:
    """A client leaving the federation for good, or joining it, at the start of ``round``."""

    round: int
    client: int
    kind: str = "leave"

    def __post_init__(self) -> None:
        if self.kind not in ("leave", "join"):
            raise ValueError(f"unknown event kind {self.kind!r}; valid: 'leave', 'join'")
        if self.round < 1:
            raise ValueError(f"event round must be >= 1 (rounds are numbered from 1), got {self.round}")


def model_arrays(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's ``state_dict`` as ``model/``-prefixed detached copies."""
    return prefixed(MODEL, model.state_dict())


def load_model(model: torch.nn.Module, state: State, prefix: str = MODEL, strict: bool = True) -> torch.nn.Module:
    """Load the ``prefix``-ed arrays of ``state`` into ``model`` (in place) and return it."""
    model.load_state_dict(state.with_prefix(prefix), strict=strict)
    return model


class Algorithm:
    """Base class: FedAvg's server side (broadcast the model, sample-weighted average)."""

    name = "base"

    def init_server(self, model: torch.nn.Module) -> State:
        return State(arrays=model_arrays(model))

    def init_client(self, client: int, n_classes: int) -> State:
        return State()

    def broadcast(self, server: State, round_: int) -> Message:
        return Message(arrays={k: v for k, v in server.arrays.items() if k.startswith(MODEL)}, kind="model")

    def local_update(
        self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator
    ) -> tuple[State, Message]:
        raise NotImplementedError(f"{type(self).__name__} must implement local_update")

    def aggregate(self, server: State, updates: list[tuple[int, Message]], round_: int) -> State:
        """Sample-size-weighted average of the updates' ``model/`` arrays."""
        if not updates:
            return server
        arrays = weighted_average(
            [m.with_prefix(MODEL) for _, m in updates], [float(m.meta["n_samples"]) for _, m in updates]
        )
        return State(arrays={**server.arrays, **prefixed(MODEL, arrays)}, meta=dict(server.meta))

    def deploy(
        self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator
    ) -> Predictor:
        """The deployed predictor; by default the broadcast model itself."""
        return load_model(ctx.model, message).eval()

    def on_event(self, server: State, event: Event) -> State:
        return server
