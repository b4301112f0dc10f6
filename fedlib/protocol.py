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
``aggregate``            server      the aggregation rule over an iterable of the round's
                                     ``(client, reply)`` pairs, read as they arrive (default:
                                     FedAvg's :func:`~fedlib.aggregate.model_average`, which folds
                                     each reply into a running sum and frees it); a rule that
                                     needs every reply at once calls ``list(replies)``
``configure_evaluate``   server      each evaluated client's message (default: the training
                                     messages of that round)
``deploy``               client      the client's deployed predictor, evaluated unchanged by the
                                     protocol
``on_event``             server      a client left or joined (the server learns the id, nothing else)
=======================  ==========  =============================================================

and two class-level declarations: ``name`` (the method's name in tables and checkpoints) and
``capabilities`` (:class:`Capabilities`: what the loop, the engines, the registry and the book
read about the method). A subclass that defines a method whose name is close to a hook's
(``aggregation``, ``local_updates``) is refused when it is defined, naming the hook, so that no
hook is silently never called.

A client's persistent :class:`~fedlib.messages.State` starts empty; a method that keeps one
(Ditto's personal model, FedRep's head) fills it in its first ``local_update``. Server hooks
receive :class:`~fedlib.messages.State` and :class:`~fedlib.messages.Message` objects only;
client hooks receive the client's own data. A client's work is a function of (state, message,
data, generator): ``ctx.model`` is a scratch copy of the architecture whose weights the hook
must load from the message or state before use.

Shared parts for plug-ins (so that no method writes them again): :func:`model_arrays` /
:func:`body_arrays` (what a client sends), :func:`update_message` (the usual reply),
:func:`load_model`, :func:`model_message`, :func:`map_messages`; the prefixes :data:`MODEL` and
:data:`HEAD`. A method's structured server or client state is a dataclass flattened to a
:class:`~fedlib.messages.State` by :func:`fedlib.messages.to_state` and read back by
:func:`fedlib.messages.from_state`.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from .aggregate import model_average
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


@dataclass(frozen=True)
class Capabilities:
    """What a method class declares about itself, in one place (its class attribute
    ``capabilities``), and what every reader uses: the loop refuses clients of different
    architectures unless ``model_agnostic``, the vectorized engine stacks the clients of a method
    that ``stacks``, and the registry (``fedlib.algorithms.registered``) and the book's
    leaderboard choose methods by them.

    Attributes
    ----------
    model_agnostic : no client's parameters are sent, averaged or loaded into another client's
        model, and nothing a client receives must fit its own architecture (COSMOS's evaluation
        message carries a *server* model, of the server's own architecture): it runs on clients of
        different architectures (:class:`fedlib.models.ClientArchitectures`)
    stacks : its local work is a :class:`~fedlib.training.LocalProgram` that the vectorized
        engine can stack with other clients' (only a :class:`ProgramMethod` can say so; a round
        whose work is :class:`~fedlib.training.SequentialWork` still runs alone)
    streams : its ``aggregate`` reads each reply once, as it arrives, and keeps none of them, so
        a round's memory does not grow with its clients; ``False``: it holds the round's replies
        at once (``list(replies)``)
    needs_public : its constructor needs a public unlabeled set (:class:`fedlib.distill.PublicSet`),
        which a federation alone does not hold
    reply_arrays : the arrays its replies carry besides the server's model, by name or by prefix
        (ending in ``/``), e.g. ``("stats/",)``: the loop refuses a reply with an array that is
        neither one of these nor one of the server state's or the model's (``model/...``), whose
        shapes and dtypes it must have (:class:`fedlib.loop.InvalidReplyError`); a method that
        wraps another (an attribute ``base``, as GGEUR's around FedProto) adds the base's

    Examples
    --------
    >>> Capabilities(model_agnostic=True, needs_public=True).stacks
    False
    """

    model_agnostic: bool = False
    stacks: bool = False
    streams: bool = True
    needs_public: bool = False
    reply_arrays: tuple[str, ...] = ()


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


def _check_hooks(cls: type) -> None:
    """Refuse, when ``cls`` is defined, a method named like a hook but not one (the hook would
    silently never be called), a hook of another form than the one it overrides, and stacking
    declared by a method without programs."""
    hooks = (*HOOKS, "program")
    for name, value in vars(cls).items():
        if not inspect.isfunction(value) or name.startswith("_"):
            continue
        if name not in hooks:
            near = difflib.get_close_matches(name, hooks, n=1, cutoff=0.8)
            if near:
                raise TypeError(f"{cls.__name__} defines {name}, which is not a hook of the method contract; did you "
                                f"mean {near[0]}? (the hooks: {', '.join(hooks)})")
            continue
        base = next((vars(b)[name] for b in cls.__mro__[1:] if name in vars(b)), None)
        if base is None:
            continue
        ours, theirs = inspect.signature(value), inspect.signature(base)
        if (len(ours.parameters) != len(theirs.parameters)
                and not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in ours.parameters.values())):
            raise TypeError(f"{cls.__name__}.{name}{ours} does not have the hook's form {name}{theirs}")
    if cls.capabilities.stacks and not hasattr(cls, "program"):
        raise TypeError(f"{cls.__name__} declares Capabilities(stacks=True), but only a ProgramMethod's local work "
                        "can be stacked; derive from ProgramMethod and write program(), or leave stacks False")


class Algorithm:
    """Base class: FedAvg's server side (the model to every client, the sample-weighted average)."""

    name = "base"
    capabilities = Capabilities()
    """What the method declares about itself (:class:`Capabilities`); a subclass that differs
    declares its own, e.g. ``capabilities = Capabilities(model_agnostic=True, needs_public=True)``."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        _check_hooks(cls)

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

    def aggregate(self, server: State, replies: Iterable[tuple[int, Message]], round_: int) -> State:
        """The server state after round ``round_`` from its ``replies``: an iterable of
        ``(client, reply)`` pairs that the loop fills as the clients reply (each one accepted by
        the ledger, the non-finite guard and the failure policy), to be read once and whole.
        Default: FedAvg's sample-weighted mean of the ``model/`` arrays
        (:func:`fedlib.aggregate.model_average`), each reply folded in and freed. A rule that
        needs every reply at once reads ``list(replies)`` (and says ``streams=False`` in its
        :class:`Capabilities`)."""
        return model_average(server, replies)

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
    :class:`~fedlib.training.LocalProgram` (phases of SGD or Adam steps on cross-entropy, each
    optionally proximal to the start weights or to the message's, a program possibly continued by
    the next: Ditto's personal model, then its global one), which the vectorized transport
    (:class:`fedlib.engines.vectorized.VectorizedTransport`) stacks with the round's other
    clients, or a :class:`~fedlib.training.SequentialWork` for a round whose work is not of that
    form (GGEUR's statistics round), which runs alone.

    ``local_update`` is final: it runs the program, so what is stacked is by construction what
    runs sequentially. A subclass that defines ``local_update`` is refused when it is defined.
    """

    capabilities = Capabilities(stacks=True)  # a method whose every round is SequentialWork (FedMix-style) says False

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


__all__ = ["HEAD", "HOOKS", "MODEL", "Algorithm", "Capabilities", "ClientContext", "Event", "LocalWork", "Predictor",
           "ProgramMethod", "body_arrays", "load_model", "map_messages", "model_arrays", "model_message", "update_message",
           "without_head"]
