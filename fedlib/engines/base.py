"""The transport contract of the round loop (:mod:`fedlib.loop`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from ..messages import Message, State
from ..protocol import Algorithm


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
    """

    name = "transport"
    heterogeneous = False
    """Whether its clients' architectures differ (:class:`fedlib.models.ClientArchitectures`);
    the loop then runs model-agnostic methods only."""
    architectures = ""
    """The clients' architectures in words (for error messages)."""
    initial_model: torch.nn.Module
    seed: int
    n_clients: int

    def local_updates(
        self, algorithm: Algorithm, round_: int, messages: Mapping[int, Message], states: Mapping[int, State]
    ) -> Iterator[tuple[int, State, Message]]:
        """Run ``algorithm.local_update`` on every client ``k`` of ``messages`` with its state
        ``states[k]``; yield ``(k, new_state, reply)`` in the order of ``messages``, or
        ``(k, None, ClientFailure)`` for a client that gave no reply."""
        raise NotImplementedError

    def evaluate(
        self, algorithm: Algorithm, round_: int, messages: Mapping[int, Message], states: Mapping[int, State], *,
        rare_ratio: float, f1_class: int | None,
    ) -> Iterator[tuple[int, dict[str, float]]]:
        """Deploy ``algorithm`` on every client of ``messages`` and evaluate the predictor by the
        protocol (:func:`fedlib.metrics.client_predictions_abilities`) on the client's local test
        split and the global test set; yield ``(k, abilities)`` in the order of ``messages``, or
        ``(k, ClientFailure)`` for a client that gave no reply."""
        raise NotImplementedError
