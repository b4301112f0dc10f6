"""The method contract: the hooks through which a method plugs into the one round loop.

This module sits **below** :mod:`fedlib.loop` (which drives the hooks) and below every plug-in in
``fedlib.algorithms`` (which override them); importing it imports no method. The book's page
"Inside fedlib" draws the layers and walks through adding a method. A method overrides some of
these hooks and nothing else (one round loop, never a copy of it):

==================  ==========  ==================================================================
hook                runs on     does
==================  ==========  ==================================================================
``init_server``     server      the server state from the initial model
``init_client``     client      a client's persistent state before its first round (default empty)
``broadcast``       server      the message the server sends to a sampled client for training
``train_message``   server      the training message one client receives (default: the
                                ``broadcast`` itself; a method that sends each client its own,
                                as COSMOS's cluster pseudo-labels, returns that client's)
``local_update``    client      (state, message, data, generator) -> (new state, reply)
``local_program``   client      the same local work as data (:class:`~fedlib.training.LocalProgram`),
                                or ``None``: what lets a vectorized executor batch clients
``fold``            server      the aggregation rule as a fold over the replies (default: the
                                sample-weighted mean of the ``model/`` arrays)
``aggregate``       server      the new server state from the replies (messages only)
``eval_broadcast``  server      the message sent to every active client for evaluation (default:
                                the training broadcast of that round)
``eval_message``    server      the evaluation message one client receives (default: the
                                ``eval_broadcast`` itself; a method that personalizes on the
                                server, as HDC-FL, returns that client's own)
``deploy``          client      the client's deployed predictor, evaluated unchanged by the protocol
``on_event``        server      a client left or joined (the server learns the id, nothing else)
==================  ==========  ==================================================================

Server hooks receive :class:`~fedlib.messages.State` and :class:`~fedlib.messages.Message`
objects only; client hooks receive the client's own data. A client's work is a function of
(state, message, data, generator): ``ctx.model`` is a scratch copy of the architecture whose
weights the hook must load from the message or state before use.

Shared parts for plug-ins (so that no method writes them again): :func:`model_arrays` /
:func:`body_arrays` (what a client sends), :func:`update_message` (the usual reply),
:func:`load_model`; the prefixes :data:`MODEL` and :data:`HEAD`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from .aggregate import WeightedMean
from .messages import Message, State, prefixed
from .models import HEAD_PREFIX
from .training import LocalProgram

MODEL = "model/"
"""Prefix of the model's ``state_dict`` entries in a message or a state (``model/conv1.weight``)."""

HEAD = MODEL + HEAD_PREFIX
"""Prefix of the final classifier's entries (``model/head.weight``, ``model/head.bias``)."""

Predictor = Callable[[torch.Tensor], torch.Tensor]
"""A deployed predictor: inputs (n, ...) -> scores (n, C); the protocol takes their argmax."""


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


def body_arrays(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """:func:`model_arrays` without the final classifier (``head.*``): what body-only methods
    (FedRep, FedBABU, shared-encoder methods) send.

    >>> from fedlib.models import build_model
    >>> any(k.startswith(HEAD) for k in body_arrays(build_model("mlp", in_channels=1, n_classes=2, input_size=2, hidden=(3,))))
    False
    """
    return {k: v for k, v in model_arrays(model).items() if not k.startswith(HEAD)}


def without_head(arrays: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of ``arrays`` that are not the ``model/head.*`` classifier."""
    return {k: v for k, v in arrays.items() if not k.startswith(HEAD)}


def update_message(arrays: Mapping[str, torch.Tensor], n_samples: int, train_loss: float | None = None,
                   kind: str = "update", **meta) -> Message:
    """The usual reply of a client: ``arrays`` plus ``n_samples`` (the aggregation weight) and,
    when given, ``train_loss`` (the loop records it) and further scalar ``meta``.

    >>> update_message({"model/w": torch.zeros(2)}, 5, 0.25).meta
    {'n_samples': 5, 'train_loss': 0.25}
    """
    info: dict = {"n_samples": int(n_samples)}
    if train_loss is not None:
        info["train_loss"] = train_loss
    info.update(meta)
    return Message(arrays=dict(arrays), meta=info, kind=kind)


def load_model(model: torch.nn.Module, state: State, prefix: str = MODEL, strict: bool = True) -> torch.nn.Module:
    """Load the ``prefix``-ed arrays of ``state`` into ``model`` (in place) and return it."""
    model.load_state_dict(state.with_prefix(prefix), strict=strict)
    return model


AGGREGATIONS = ("fold", "list")
"""How a method's server aggregates a round's replies: ``"fold"`` streams them (:meth:`Algorithm.aggregator`,
one running sum per array, replies freed once folded), ``"list"`` keeps them all for
:meth:`Algorithm.aggregate` (a method that needs every reply at once, at its own memory cost)."""


class ModelAverage:
    """FedAvg's aggregation as a fold: the running sample-weighted mean of the replies' ``model/``
    arrays (:class:`fedlib.aggregate.WeightedMean`); the server's other arrays are kept."""

    def __init__(self, server: State) -> None:
        self._server = server
        self._mean = WeightedMean()

    def __len__(self) -> int:
        return len(self._mean)

    def add(self, client: int, message: Message) -> None:
        """Fold in client ``client``'s reply (weighted by its ``n_samples``)."""
        self._mean.add(message.with_prefix(MODEL), float(message.meta["n_samples"]))

    def finish(self) -> State:
        """The new server state (the old one where no reply was added)."""
        if not len(self._mean):
            return self._server
        arrays = self._mean.finish()
        return State(arrays={**self._server.arrays, **prefixed(MODEL, arrays)}, meta=dict(self._server.meta))


class Algorithm:
    """Base class: FedAvg's server side (broadcast the model, sample-weighted average)."""

    name = "base"
    aggregation = "fold"
    """One of :data:`fedlib.protocol.AGGREGATIONS`. A method that overrides ``aggregate`` keeps the
    list whatever this says (:meth:`fedlib.protocol.Algorithm.aggregator`); the registered ones say
    ``"list"`` too, with the reason."""

    model_agnostic = False
    """Whether the method works with clients of different architectures
    (:class:`fedlib.models.ClientArchitectures`): no client's parameters are sent, averaged or
    loaded into another client's model, and nothing a client receives must fit its own
    architecture (COSMOS's evaluation message carries a *server* model, of the server's own
    architecture). The loop refuses a heterogeneous federation for every method that leaves this
    ``False`` (all that average parameters)."""

    program_hooks: tuple[str, ...] = ("local_update",)
    """The hooks whose work :meth:`~fedlib.protocol.Algorithm.local_program` reproduces; overriding
    one of them in a subclass without overriding ``local_program`` too makes the method sequential
    (:func:`~fedlib.protocol.vectorizable`)."""

    def init_server(self, model: torch.nn.Module) -> State:
        return State(arrays=model_arrays(model))

    def init_client(self, client: int, n_classes: int) -> State:
        return State()

    def broadcast(self, server: State, round_: int) -> Message:
        """The message the server sends to every sampled client for training in round ``round_``
        (default: the ``model/`` arrays); :meth:`~fedlib.protocol.Algorithm.train_message` may make it each client's own."""
        return Message(arrays={k: v for k, v in server.arrays.items() if k.startswith(MODEL)}, kind="model")

    def train_message(self, server: State, message: Message, client: int, round_: int) -> Message:
        """The training message client ``client`` receives in round ``round_``, from the round's
        :meth:`~fedlib.protocol.Algorithm.broadcast` ``message``. Default: that message itself
        (every sampled client receives the same). A method that sends each client its own (COSMOS:
        the pseudo-labels of the client's cluster model) returns it here; the ledger records each
        one, so per-client bytes are counted honestly."""
        return message

    def eval_broadcast(self, server: State, round_: int) -> Message:
        """The message every active client deploys from when round ``round_`` is evaluated (after
        its aggregation). Default: the training broadcast; a method whose evaluation needs
        something else (MPT's prototypes, a knowledge round's plain model) overrides this hook
        instead of guessing the phase from round numbers. The loop records it with kind
        ``eval:<kind>``."""
        return self.broadcast(server, round_)

    def eval_message(self, server: State, message: Message, client: int, round_: int) -> Message:
        """The evaluation message client ``client`` receives in round ``round_``, from the round's
        :meth:`~fedlib.protocol.Algorithm.eval_broadcast` ``message``. Default: that message itself
        (every client receives the same). A method that personalizes on the server (HDC-FL's
        encoder mixtures) returns a message of the client's own; the ledger records each one, so
        its bytes are counted per client."""
        return message

    def local_update(
        self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator
    ) -> tuple[State, Message]:
        """The client's local work. Default: run :meth:`~fedlib.protocol.Algorithm.local_program` in ``ctx.model``
        (a method either returns a program there, or overrides this hook)."""
        program = self.local_program(ctx, state, message, data)
        if program is None:
            raise NotImplementedError(f"{type(self).__name__} must implement local_update or local_program")
        return program.run(ctx.model, generator)

    def local_program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram | None:
        """This round's local work as a :class:`~fedlib.training.LocalProgram` (phases of SGD or
        Adam steps on cross-entropy, optionally with a proximal term), or ``None`` when it is not
        of that form (custom losses or control flow). A method that returns a program here and
        leaves :meth:`~fedlib.protocol.Algorithm.local_update` to the default runs the same program sequentially or, with
        ``LoopConfig(execution="vectorized")``, batched with the round's other clients; a method
        that overrides :meth:`~fedlib.protocol.Algorithm.local_update` must return a program only where running it is
        exactly what its ``local_update`` does (:func:`~fedlib.protocol.vectorizable` checks
        which class defines each hook)."""
        return None

    def fold(self, server: State, round_: int):
        """The method's aggregation rule as a fold: an object with ``add(client, message)`` and
        ``finish() -> State``. Default: :class:`ModelAverage` (FedAvg's sample-weighted mean of
        the ``model/`` arrays); a method with another rule that can stream (HDC-FL's cache,
        IFCA's per-cluster means) overrides this hook, and both the loop's streaming path and
        :meth:`~fedlib.protocol.Algorithm.aggregate` run it."""
        return ModelAverage(server)

    def aggregator(self, server: State, round_: int):
        """The fold the loop feeds this round's replies into, one at a time (``add(client,
        message)``, then ``finish() -> State``), or ``None``: the loop then keeps the replies and
        calls :meth:`aggregate`. ``None`` for a method with ``aggregation = "list"`` and for every
        method that overrides :meth:`aggregate` (its own rule is what runs, whatever it declares);
        otherwise :meth:`~fedlib.protocol.Algorithm.fold`."""
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"{type(self).__name__}.aggregation is {self.aggregation!r}; valid: {', '.join(AGGREGATIONS)}")
        if self.aggregation == "list" or type(self).aggregate is not Algorithm.aggregate:
            return None
        return self.fold(server, round_)

    def aggregate(self, server: State, updates: list[tuple[int, Message]], round_: int) -> State:
        """The method's :meth:`~fedlib.protocol.Algorithm.fold` (by default the sample-size-weighted
        average of the updates' ``model/`` arrays, :class:`ModelAverage`) over the list: the same
        bits as the loop's streaming fold."""
        fold = self.fold(server, round_)
        for k, m in updates:
            fold.add(k, m)
        return fold.finish()

    def deploy(
        self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator
    ) -> Predictor:
        """The deployed predictor; by default the broadcast model itself."""
        return load_model(ctx.model, message).eval()

    def on_event(self, server: State, event: Event) -> State:
        return server


def vectorizable(algorithm: Algorithm) -> bool:
    """Whether ``algorithm``'s programs may stand for its ``local_update``: the class that
    defines :meth:`Algorithm.local_program` is, or derives from, the class that defines each of
    the hooks its program reproduces (:attr:`Algorithm.program_hooks`: ``local_update``, and for
    a wrapper the hooks its ``local_update`` calls); a wrapper's ``base`` method must be
    vectorizable too. A subclass that overrides ``local_update`` alone (custom control flow over
    an inherited program) is not vectorizable, and neither is a method that defines no program.

    >>> class Custom(Algorithm):
    ...     def local_update(self, ctx, state, message, data, generator): ...
    >>> vectorizable(Custom())
    False
    """
    mro = type(algorithm).__mro__
    owner_program = next(c for c in mro if "local_program" in vars(c))
    if owner_program is Algorithm:
        return False
    for hook in algorithm.program_hooks:
        owner = next(c for c in mro if hook in vars(c))
        if not issubclass(owner_program, owner):
            return False
    base = getattr(algorithm, "base", None)
    return vectorizable(base) if isinstance(base, Algorithm) else True


__all__ = ["AGGREGATIONS", "HEAD", "MODEL", "Algorithm", "ModelAverage", "ClientContext", "Event", "Predictor", "body_arrays", "load_model",
           "model_arrays", "update_message", "vectorizable", "without_head"]
