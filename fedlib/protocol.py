"""The method contract: the seven hooks through which a method plugs into the one round loop.

This module sits **below** :mod:`fedlib.loop` (which drives the hooks) and below every plug-in in
``fedlib.algorithms`` (which override them); importing it imports no method. The book's page
"Inside fedlib" draws the layers, compares the contract with Flower's strategies and FedJAX, and
walks through adding a method. A method overrides some of these hooks and nothing else (one
round loop, never a copy of it):

=======================  ==========  =============================================================
hook                     runs on     does
=======================  ==========  =============================================================
``init_server``          server      the server state from the initial model
``configure_train``      server      each sampled client's training message (default: the
                                     ``model/`` arrays, **one** message object shared by every
                                     client, so the server builds it once)
``local_update``         client      (state, message, data, generator) -> (new state, reply);
                                     a :class:`ProgramMethod` writes it as a
                                     :class:`~fedlib.training.LocalProgram` instead (stackable)
``aggregate``            server      the aggregation rule as a fold over the replies: an object
                                     with ``add(client, reply)`` and ``finish() -> State``
                                     (default: :class:`ModelAverage`); a rule that needs every
                                     reply at once says so with :func:`needs_all_replies`
``configure_evaluate``   server      each evaluated client's message (default: the training
                                     messages of that round)
``deploy``               client      the client's deployed predictor, evaluated unchanged by the
                                     protocol
``on_event``             server      a client left or joined (the server learns the id, nothing else)
=======================  ==========  =============================================================

and two class-level declarations: ``name`` (the method's name in tables and checkpoints) and
``model_agnostic`` (whether clients of different architectures can run it).

A client's persistent :class:`~fedlib.messages.State` starts empty; a method that keeps one
(Ditto's personal model, FedRep's head) fills it in its first ``local_update``. Server hooks
receive :class:`~fedlib.messages.State` and :class:`~fedlib.messages.Message` objects only;
client hooks receive the client's own data. A client's work is a function of (state, message,
data, generator): ``ctx.model`` is a scratch copy of the architecture whose weights the hook
must load from the message or state before use.

Shared parts for plug-ins (so that no method writes them again): :func:`model_arrays` /
:func:`body_arrays` (what a client sends), :func:`update_message` (the usual reply),
:func:`load_model`, :func:`model_message`, :func:`fold_replies`; the prefixes :data:`MODEL` and
:data:`HEAD`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from .aggregate import WeightedMean
from .messages import Message, State, prefixed
from .models import HEAD_PREFIX
from .training import LocalProgram, SequentialWork
from .validation import is_int

MODEL = "model/"
"""Prefix of the model's ``state_dict`` entries in a message or a state (``model/conv1.weight``)."""

HEAD = MODEL + HEAD_PREFIX
"""Prefix of the final classifier's entries (``model/head.weight``, ``model/head.bias``)."""

Predictor = Callable[[torch.Tensor], torch.Tensor]
"""A deployed predictor: inputs (n, ...) -> scores (n, C); the protocol takes their argmax."""

HOOKS = ("init_server", "configure_train", "local_update", "aggregate", "configure_evaluate", "deploy", "on_event")
"""The hooks of :class:`Algorithm`, in the order a round calls them (the book's *Inside fedlib*)."""


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
        if not is_int(self.round) or self.round < 1:
            raise ValueError(f"event round must be an int >= 1 (rounds are numbered from 1), got {self.round!r}")
        if not is_int(self.client) or self.client < 0:
            raise ValueError(f"event client must be an int >= 0 (a client index), got {self.client!r}")


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


def model_message(server: State, **extra: torch.Tensor) -> Message:
    """The server's ``model/`` arrays (plus ``extra`` arrays) as a message of kind ``"model"``:
    what most methods send for training.

    >>> model_message(State({"model/w": torch.zeros(1), "cache/x": torch.ones(1)})).arrays
    {'model/w': tensor([0.])}
    """
    return Message(arrays={**{k: v for k, v in server.arrays.items() if k.startswith(MODEL)}, **extra}, kind="model")


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


def map_messages(messages: Mapping[int, Message], change: Callable[[Message], Message]) -> dict[int, Message]:
    """``change`` applied to each distinct message object of ``messages`` once: clients that
    shared one message share its changed form (what a wrapper of another method's messages uses).

    >>> m = Message(kind="model")
    >>> out = map_messages({0: m, 1: m}, lambda msg: Message(kind="request"))
    >>> out[0] is out[1], out[0].kind
    (True, 'request')
    """
    done: dict[int, Message] = {}
    out = {}
    for k, m in messages.items():
        if id(m) not in done:
            done[id(m)] = change(m)
        out[k] = done[id(m)]
    return out


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


class Collect:
    """A fold that keeps every reply, in arrival order, and hands the list of ``(client, reply)``
    pairs to ``merge`` at the end: the aggregation of a method that needs every reply at once
    (:func:`needs_all_replies`), at the memory cost of holding them."""

    def __init__(self, merge: Callable[[list[tuple[int, Message]]], State]) -> None:
        self._merge = merge
        self._replies: list[tuple[int, Message]] = []

    def __len__(self) -> int:
        return len(self._replies)

    def add(self, client: int, message: Message) -> None:
        """Keep client ``client``'s reply."""
        self._replies.append((client, message))

    def finish(self) -> State:
        """The new server state: ``merge`` of the kept replies."""
        return self._merge(self._replies)


def fold_replies(fold, replies: Iterable[tuple[int, Message]]) -> State:
    """Feed ``replies`` (``(client, reply)`` pairs) into ``fold`` (an ``aggregate`` hook's
    result) and return the new server state: what a rule that keeps the list uses to apply
    another rule to it (e.g. FedAvg's mean, ``fold_replies(ModelAverage(server), replies)``)."""
    for client, message in replies:
        fold.add(client, message)
    return fold.finish()


def needs_all_replies(merge: Callable) -> Callable:
    """Declare an ``aggregate`` hook that needs every reply of the round at once.

    Decorates ``merge(self, server, replies, round_) -> State`` (``replies`` the round's
    ``(client, reply)`` pairs) and turns it into the hook ``aggregate(server, round_)``, which
    returns a :class:`Collect` fold around it. :func:`streams` reads the declaration, so the
    methods that keep every reply (at the memory cost of holding them) are known without
    running them.

    >>> class CountReplies(Algorithm):
    ...     @needs_all_replies
    ...     def aggregate(self, server, replies, round_):
    ...         return State(meta={"replies": len(replies)})
    >>> fold = CountReplies().aggregate(State(), 1)
    >>> fold.add(0, Message()); fold.add(1, Message())
    >>> fold.finish().meta, streams(CountReplies())
    ({'replies': 2}, False)
    """

    def aggregate(self, server: State, round_: int) -> Collect:
        return Collect(lambda replies: merge(self, server, replies, round_))

    aggregate.__name__, aggregate.__qualname__ = merge.__name__, merge.__qualname__
    aggregate.__module__ = merge.__module__
    aggregate.__doc__ = (merge.__doc__ or "") + "\n\n(Every reply of the round at once: :func:`fedlib.protocol.needs_all_replies`.)"
    aggregate.needs_all_replies = True  # type: ignore[attr-defined]
    return aggregate


def streams(algorithm: "Algorithm | type[Algorithm]") -> bool:
    """Whether ``algorithm`` (a method or its class) aggregates as a stream, each reply folded and
    freed, rather than keeping every reply (:func:`needs_all_replies`)."""
    cls = algorithm if isinstance(algorithm, type) else type(algorithm)
    return not getattr(cls.aggregate, "needs_all_replies", False)


REMOVED_HOOKS = {
    "broadcast": "configure_train", "train_message": "configure_train", "eval_broadcast": "configure_evaluate",
    "eval_message": "configure_evaluate", "local_program": "ProgramMethod.program", "fold": "aggregate",
    "aggregator": "aggregate", "init_client": "local_update (a client's state starts empty)",
    "aggregation": "aggregate (with needs_all_replies)", "program_hooks": "ProgramMethod",
}
"""Names of an earlier method contract and what replaced them: a method that defines one is
refused when its class is defined, so that no hook is silently never called."""


class Algorithm:
    """Base class: FedAvg's server side (the model to every client, the sample-weighted average)."""

    name = "base"

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        old = sorted(set(vars(cls)) & set(REMOVED_HOOKS))
        if old:
            raise TypeError(f"{cls.__name__} defines {', '.join(old)}, which the method contract no longer calls; "
                            + "; ".join(f"{name} -> {REMOVED_HOOKS[name]}" for name in old))
        aggregate = vars(cls).get("aggregate")
        if aggregate is not None and not getattr(aggregate, "needs_all_replies", False):
            if len(inspect.signature(aggregate).parameters) != 3:  # (self, server, round_)
                raise TypeError(f"{cls.__name__}.aggregate{inspect.signature(aggregate)} does not have the hook's "
                                "form aggregate(self, server, round_) -> fold; a rule over the list of the round's "
                                "replies is declared with @needs_all_replies")

    model_agnostic = False
    """Whether the method works with clients of different architectures
    (:class:`fedlib.models.ClientArchitectures`): no client's parameters are sent, averaged or
    loaded into another client's model, and nothing a client receives must fit its own
    architecture (COSMOS's evaluation message carries a *server* model, of the server's own
    architecture). The loop refuses a heterogeneous federation for every method that leaves this
    ``False`` (all that average parameters)."""

    def init_server(self, model: torch.nn.Module) -> State:
        """The server state before round 1, from the run's initial model (default: its arrays)."""
        return State(arrays=model_arrays(model))

    def configure_train(self, server: State, round_: int, clients: Sequence[int]) -> dict[int, Message]:
        """The training message of each client of ``clients`` (sampled for round ``round_``).
        Default: the server's ``model/`` arrays, one :class:`~fedlib.messages.Message` object
        shared by every client (``dict.fromkeys``). A method that sends each client its own
        (COSMOS: its cluster's pseudo-labels) returns a message per client; the ledger records
        every message a client receives, shared or not."""
        return dict.fromkeys(clients, model_message(server))

    def local_update(
        self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator
    ) -> tuple[State, Message]:
        """The client's local work: ``(new state, reply)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement local_update (or derive from ProgramMethod)")

    def aggregate(self, server: State, round_: int):
        """The aggregation rule of round ``round_`` as a fold: an object with ``add(client,
        reply)`` (the loop adds each reply as it arrives and frees it) and ``finish() -> State``.
        Default: :class:`~fedlib.protocol.ModelAverage`, FedAvg's sample-weighted mean of the ``model/`` arrays. A
        method whose rule needs every reply at once decorates a function of the list with
        :func:`~fedlib.protocol.needs_all_replies`."""
        return ModelAverage(server)

    def configure_evaluate(self, server: State, round_: int, clients: Sequence[int]) -> dict[int, Message]:
        """The message each client of ``clients`` deploys from when round ``round_`` is evaluated
        (after its aggregation). Default: :meth:`~fedlib.protocol.Algorithm.configure_train`'s messages. A method whose
        evaluation needs something else (MPT's prototypes, HDC-FL's personalized encoders)
        overrides this hook instead of guessing the phase from round numbers. The loop records
        each with kind ``eval:<kind>``."""
        return self.configure_train(server, round_, clients)

    def deploy(
        self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator
    ) -> Predictor:
        """The deployed predictor; by default the message's model itself."""
        return load_model(ctx.model, message).eval()

    def on_event(self, server: State, event: Event) -> State:
        """The server state after ``event`` (a client left or joined); default: unchanged."""
        return server


LocalWork = LocalProgram | SequentialWork
"""What :meth:`ProgramMethod.program` returns: a stackable program, or sequential work."""


class ProgramMethod(Algorithm):
    """A method whose local work is data: :meth:`~fedlib.protocol.ProgramMethod.program` returns this round's
    :class:`~fedlib.training.LocalProgram` (phases of SGD or Adam steps on cross-entropy,
    optionally with a proximal term), which the vectorized transport
    (:class:`fedlib.engines.vectorized.VectorizedTransport`) stacks with the round's other
    clients, or a :class:`~fedlib.training.SequentialWork` for a round whose work is not of that
    form (GGEUR's statistics round), which runs alone.

    ``local_update`` is final: it runs the program, so what is stacked is by construction what
    runs sequentially. A subclass that defines ``local_update`` is refused when it is defined.
    """

    stacks = True
    """Whether this method's programs can be stacked at all (:func:`fedlib.protocol.vectorizable`);
    a method whose every round is :class:`~fedlib.training.SequentialWork` (FedMix-style's mixing)
    says ``False``, and a wrapper says what its base allows."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.local_update is not ProgramMethod.local_update:  # defined here or inherited from a mixin
            raise TypeError(f"{cls.__name__} derives from ProgramMethod, whose local_update is final (it runs "
                            "program()); write the local work in program(), or derive from Algorithm instead")

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalWork:
        """This round's local work as data."""
        raise NotImplementedError(f"{type(self).__name__} must implement program")

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        """Run :meth:`~fedlib.protocol.ProgramMethod.program` in ``ctx.model`` with ``generator`` (final)."""
        return self.program(ctx, state, message, data).run(ctx.model, generator)


def vectorizable(algorithm: "Algorithm | type[Algorithm]") -> bool:
    """Whether ``algorithm``'s (a method's, or its class's) local work can be stacked with other
    clients': it is a :class:`~fedlib.protocol.ProgramMethod` whose ``stacks`` says so (each
    round, the clients whose :meth:`~fedlib.protocol.ProgramMethod.program` is a
    :class:`~fedlib.training.LocalProgram` train stacked; the others alone). A class whose
    ``stacks`` depends on the instance (a wrapper, on its base) counts as stacking.

    >>> class Custom(Algorithm):
    ...     def local_update(self, ctx, state, message, data, generator): ...
    >>> vectorizable(Custom()), vectorizable(Custom), vectorizable(ProgramMethod)
    (False, False, True)
    """
    if isinstance(algorithm, type):
        return issubclass(algorithm, ProgramMethod) and algorithm.stacks is not False
    return isinstance(algorithm, ProgramMethod) and bool(algorithm.stacks)


__all__ = ["HEAD", "HOOKS", "MODEL", "REMOVED_HOOKS", "Algorithm", "ClientContext", "Collect", "Event", "LocalWork", "ModelAverage",
           "Predictor", "ProgramMethod", "body_arrays", "fold_replies", "load_model", "map_messages", "model_arrays",
           "model_message", "needs_all_replies", "streams", "update_message", "vectorizable", "without_head"]
