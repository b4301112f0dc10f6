"""The transport contract: how the one round loop's messages reach the clients and their replies come back.

:mod:`fedlib.loop` writes a round once (sampling, events, the non-finite guard, aggregation, the
evaluation schedule, the ledger, checkpoints) over a :class:`Transport`, which only carries
messages: "send these messages to these clients and collect the replies". This module sits below
the loop and below every engine that implements it (:mod:`fedlib.engines`: in this process, one
after another or stacked; on Flower's nodes); the loop imports no engine.

A client that gives no reply (its hook raised; on Flower, its node failed or timed out) is yielded as
a :class:`ClientFailure`, which the loop handles by ``LoopConfig(on_failure=...)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from .messages import Message, State
from .protocol import Algorithm


@dataclass(frozen=True)
class ClientFailure:
    """What a transport yields in place of a reply when a client did not give one: its hook
    raised, or (on Flower) its node failed or did not reply in time. The loop never aggregates
    it: ``LoopConfig(on_failure="raise")`` stops the run (re-raising ``error`` where there is
    one), ``"drop"`` records a row and goes on.

    Attributes
    ----------
    client : the client
    reason : what happened, in words (naming the node on Flower)
    error : the exception the client's hook raised, where it was raised in this process
    """

    client: int
    reason: str
    error: BaseException | None = None


class Transport:
    """Carries one round's messages to clients and brings their replies back.

    The loop builds every message (and records it in the ledger), hands them to the transport,
    and receives, client by client **in the order of** ``messages``, what each client returned.
    A transport owns the clients (their data, their model workspace and the random stream of
    their work: ``derive_seed(seed, round, client, LOCAL_TRAIN)`` for training,
    ``... DEPLOY`` for deployment, see :mod:`fedlib.rng`), never the server state.

    Attributes
    ----------
    initial_model : the architecture with the run's initial weights (drawn under
        ``derive_seed(seed, INIT)``), from which the server state is initialized; clients never
        train in it, so one transport can carry several runs
    seed : the run seed its clients derive their streams from (the loop refuses a transport
        whose seed is not the run's)
    n_clients : the number of clients it carries
    description : how the federation was built (:attr:`fedlib.federation.Federation.description`):
        part of a checkpoint's fingerprint
    """

    name = "transport"
    heterogeneous = False
    """Whether its clients' architectures differ (:class:`fedlib.models.ClientArchitectures`);
    the loop then runs model-agnostic methods only."""
    architectures = ""
    """The clients' architectures in words (for error messages)."""
    keeps_predictions = True
    """Whether :meth:`evaluate` can return the clients' predictions (``RunOptions(keep_predictions=True)``;
    not on Flower, where they stay on the nodes)."""
    initial_model: torch.nn.Module
    seed: int
    n_clients: int
    description: dict

    def fingerprint(self) -> dict:
        """What of this transport a checkpoint's fingerprint must cover: nothing for one that
        computes every client's work exactly as in-process (the default)."""
        return {}

    def discard_state(self, client: int) -> None:
        """The loop dropped ``client``'s reply (``LoopConfig(on_nonfinite="drop")``) and keeps
        the state it had before the round: a transport whose clients keep a copy of their own
        state must give them the loop's copy with their next message. Nothing to do in-process
        (the default: the loop's copy is the only one)."""

    def local_updates(
        self, algorithm: Algorithm, round_: int, messages: Mapping[int, Message], states: Mapping[int, State]
    ) -> Iterator[tuple[int, State, Message]]:
        """Run ``algorithm.local_update`` on every client ``k`` of ``messages`` with its state
        ``states[k]``; yield ``(k, new_state, reply)`` in the order of ``messages``, or
        ``(k, None, ClientFailure)`` for a client that gave no reply."""
        raise NotImplementedError

    def evaluate(
        self, algorithm: Algorithm, round_: int, messages: Mapping[int, Message], states: Mapping[int, State], *,
        rare_ratio: float, f1_class: int | None, predictions: dict | None = None,
    ) -> Iterator[tuple[int, dict[str, float]]]:
        """Deploy ``algorithm`` on every client of ``messages`` and evaluate the predictor by the
        protocol (:func:`fedlib.metrics.client_predictions_abilities`) on the client's local test
        split, the global test set and its pool (its own :attr:`fedlib.federation.ClientData.pool`,
        or the global test set); yield ``(k, abilities)`` in the order of ``messages``, or
        ``(k, ClientFailure)`` for a client that gave no reply. ``predictions`` (a dict), when
        given, receives ``predictions[k] = (local test labels predicted, global test labels
        predicted)`` of every evaluated client, and the labels predicted on its own pool third for a
        client that has one (a transport that cannot return them raises)."""
        raise NotImplementedError
