"""The round loop's transport over Flower's ``Grid``, and the handshake that maps clients to nodes.

:class:`FlowerTransport` is a :class:`~fedlib.transport.Transport`: the round loop hands it a
round's messages and it carries each, as one Flower message (:mod:`fedlib.engines.flower.records`),
to the node that holds the client, and brings the replies back. :func:`handshake` asks every node
which client it holds before round 1 (a ``query`` message) and what federation it built.

This module sits below the round loop: it imports the transport contract
(:mod:`fedlib.transport`), messages, models, seeds and the records, never
:mod:`fedlib.loop`, a method or the job. What it needs of a run comes as arguments: the model
factory, the seed and the job's digest (:class:`~fedlib.engines.flower.job.FlowerJob` gives all three).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import pandas as pd
import torch

from flwr.app import ConfigRecord, Message as FlowerMessage, RecordDict
from flwr.serverapp import Grid

from ...messages import DOWN, UP, Message, State
from ...models import ClientArchitectures
from ...rng import INIT, derive_seed, isolated_torch_rng
from ...transport import ClientFailure, Transport
from .records import CTL, flower_bytes, put_state, take_state


class FlowerSetupError(RuntimeError):
    """The Flower nodes do not form the job's federation (a node without a partition, two nodes
    with one partition, a node that built another federation), or a deployment could not start."""


@dataclass(frozen=True)
class RemoteFederation:
    """The server's view of a federation whose data stays on the nodes: its size, classes and
    description (what the round loop reads of a federation, through the transport)."""

    n_clients: int
    n_classes: int
    description: dict
    digest: str = ""
    """The nodes' :meth:`fedlib.federation.Federation.digest` (every node built the same data)."""


def _wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    t0 = time.monotonic()
    while len(ids := sorted(grid.get_node_ids())) < n:
        if time.monotonic() - t0 > timeout:
            raise FlowerSetupError(f"{len(ids)} node(s) connected within {timeout:.0f} s, but the federation has "
                                   f"{n} clients: start one SuperNode per client (partition-id 0..{n - 1})")
        time.sleep(0.05)
    return ids


def handshake(grid: Grid, job_digest: str, n_clients: int, timeout: float) -> tuple[dict[int, int], RemoteFederation]:
    """Ask every node which client it holds: ``{client: node id}`` and the federation the nodes
    built. ``job_digest`` is the job's :attr:`~fedlib.engines.flower.job.FlowerJob.digest`: a node
    given another job refuses. Raises :class:`FlowerSetupError` naming the node when one has no
    partition, two hold one partition, a partition has no node, or the nodes built different
    federations (different descriptions, sizes or data: each node reports its federation's digest)."""
    ids = _wait_for_nodes(grid, n_clients, timeout)
    msgs = [FlowerMessage(RecordDict({CTL: ConfigRecord({"job": job_digest})}), dst_node_id=i, message_type="query")
            for i in ids]
    replies = list(grid.send_and_receive(msgs, timeout=timeout))
    nodes: dict[int, int] = {}
    shapes = set()
    for rep in replies:
        node = rep.metadata.src_node_id
        if rep.has_error():
            raise FlowerSetupError(f"node {node} refused the handshake: {rep.error.reason}")
        info = rep.content[CTL]
        pid = int(info["partition-id"])
        if pid in nodes:
            raise FlowerSetupError(f"nodes {nodes[pid]} and {node} both hold partition-id={pid}; each client needs "
                                   "its own node")
        nodes[pid] = node
        shapes.add((int(info["n_clients"]), int(info["n_classes"]), str(info["description"]), str(info.get("digest", ""))))
    missing = sorted(set(range(n_clients)) - set(nodes))
    if len(replies) < len(ids):
        silent = sorted(set(ids) - {rep.metadata.src_node_id for rep in replies})
        raise FlowerSetupError(f"node(s) {silent} did not answer the handshake within {timeout:.0f} s")
    if missing:
        raise FlowerSetupError(f"no node holds client(s) {missing}; valid partition-ids: 0..{n_clients - 1}")
    if len(shapes) != 1:
        raise FlowerSetupError(f"the nodes built {len(shapes)} different federations from one job; a federation call "
                               "must be deterministic")
    (n, c, description, digest), = shapes
    return nodes, RemoteFederation(n, c, json.loads(description), digest)


class FlowerTransport(Transport):
    """The loop's transport over a Flower ``Grid``: client ``k``'s messages go to the node that
    holds partition ``k`` (``nodes[k]``), one Flower message per fedlib message.

    Parameters
    ----------
    grid : the ServerApp's grid
    nodes : client -> node id (:func:`handshake`)
    federation : what the nodes reported of the federation (:func:`handshake`): its clients, classes and description
    model_fn : the architecture's factory (the job's
        :meth:`~fedlib.engines.flower.job.FlowerJob.model_fn`); the initial weights are drawn
        from it under ``derive_seed(seed, INIT)``, as the in-process transport does
    seed : the run seed (the loop checks it is the run's)
    job_digest : the job's :attr:`~fedlib.engines.flower.job.FlowerJob.digest`, sent with every
        message (a node given another job refuses it)
    timeout : seconds a message waits for its reply, from when it is sent (``None``: no limit); a
        client with no reply by then is a :class:`~fedlib.transport.ClientFailure`, handled by the loop's
        ``on_failure``
    mirror_states : whether replies also carry the client's new state (:mod:`fedlib.engines.flower`
        says why)
    max_in_flight : at most that many messages unanswered at a time (``None``: a round's messages
        all at once). A local deployment sets it to twice the machine's cores: Flower starts a process
        for every message on every node and gives it 30 s to report, which twenty processes
        importing torch at once on two cores do not meet
    poll : seconds between two requests for replies (Flower's own ``send_and_receive`` waits 3 s)
    """

    name = "flower"
    keeps_predictions = False  # the predictions stay on the nodes

    def __init__(self, grid: Grid, nodes: Mapping[int, int], *, federation: RemoteFederation,
                 model_fn: Callable[[], torch.nn.Module], seed: int, job_digest: str, timeout: float | None = None,
                 mirror_states: bool = True, max_in_flight: int | None = None, poll: float = 0.5) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be None (no limit) or >= 1, got {max_in_flight}")
        self.grid = grid
        self.job_digest = job_digest
        self.nodes = dict(nodes)
        self.seed = int(seed)
        self.n_clients = len(self.nodes)
        if federation.n_clients != self.n_clients:
            raise FlowerSetupError(f"{self.n_clients} nodes for a federation of {federation.n_clients} clients: one node per client")
        self.description = federation.description
        self._data_digest = federation.digest
        with isolated_torch_rng(derive_seed(self.seed, INIT)):
            self.initial_model = model_fn()
        if isinstance(model_fn, ClientArchitectures):
            self.heterogeneous = model_fn.heterogeneous
            self.architectures = ", ".join(sorted(set(model_fn.assignment)))
        self.timeout = timeout
        self.mirror_states = mirror_states
        self.max_in_flight = max_in_flight
        self.poll = poll
        self._holds: set[int] = set()  # clients whose node holds their state in this Flower run
        self._unsent: set[int] = set()  # clients whose message Flower refused to send this exchange
        self.wire: list[tuple[int, int, str, str, int, int]] = []  # (round, client, direction, kind, bytes, Flower's bytes)

    def _message(self, kind: str, k: int, round_: int, down: Message, state: State, extra: dict) -> FlowerMessage:
        content = RecordDict()
        put_state(content, "fedlib.down", down)
        if k not in self._holds:
            put_state(content, "fedlib.restore", state)
        content[CTL] = ConfigRecord({"job": self.job_digest, "client": k, "round": round_, "mirror": self.mirror_states,
                                     **extra})
        return FlowerMessage(content, dst_node_id=self.nodes[k], message_type=kind)

    def _exchange(self, sent: dict[int, FlowerMessage]) -> dict[int, FlowerMessage]:
        """Push the messages (at most ``max_in_flight`` unanswered at a time), pull the replies
        every ``poll`` seconds; a message unanswered ``timeout`` seconds after it was pushed gets
        no reply."""
        queue = list(sent.items())
        window = len(queue) if self.max_in_flight is None else self.max_in_flight
        in_flight: dict[str, tuple[int, float]] = {}
        replies: dict[int, FlowerMessage] = {}
        while queue or in_flight:
            while queue and len(in_flight) < window:
                k, msg = queue.pop(0)
                ids = list(self.grid.push_messages([msg]))
                if len(ids) != 1 or not ids[0]:  # Flower refused it (e.g. too large for the SuperLink)
                    self._unsent.add(k)
                    continue
                in_flight[ids[0]] = (k, time.monotonic())
            for rep in self.grid.pull_messages(list(in_flight)):
                k, _ = in_flight.pop(rep.metadata.reply_to_message_id)
                replies[k] = rep
            if self.timeout is not None:
                late = [mid for mid, (_, t) in in_flight.items() if time.monotonic() - t > self.timeout]
                for mid in late:
                    del in_flight[mid]
            if in_flight and (not queue or len(in_flight) >= window):
                time.sleep(self.poll)
        return replies

    def _failure(self, k: int, round_: int, rep: FlowerMessage | None) -> ClientFailure:
        # the node may have kept a state the server never saw (a late reply): its next message restores the server's
        self._holds.discard(k)
        node = self.nodes[k]
        if k in self._unsent:
            self._unsent.discard(k)
            return ClientFailure(k, f"Flower could not send the message to node {node}")
        if rep is None:
            return ClientFailure(k, f"node {node} did not reply within {self.timeout} s of the message")
        return ClientFailure(k, f"node {node} failed: {rep.error.reason}")

    def fingerprint(self) -> dict:
        """The digest of the data every node built (reported in the handshake), as the in-process
        transport's: a checkpoint resumes only on the same data and partition."""
        return {"data": self._data_digest} if self._data_digest else {}

    def discard_state(self, client: int) -> None:
        """The node keeps the state the loop dropped: its next message restores the server's copy
        (``fedlib.restore``). Without the mirror the server has no copy to restore."""
        if not self.mirror_states:
            raise RuntimeError(
                f"client {client}'s non-finite state stays on node {self.nodes[client]} (mirror_states=False): the server "
                "has no copy to restore it from; valid: mirror_states=True, or LoopConfig(on_nonfinite='raise')"
            )
        self._holds.discard(client)

    def local_updates(self, algorithm, round_, messages, states) -> Iterator[tuple[int, State, Message]]:
        sent = {k: self._message("train", k, round_, down, states[k], {}) for k, down in messages.items()}
        replies = self._exchange(sent)
        for k, down in messages.items():
            rep = replies.get(k)
            self.wire.append((round_, k, DOWN, down.kind, down.nbytes(), flower_bytes(sent[k])))
            if rep is None or rep.has_error():
                yield k, None, self._failure(k, round_, rep)
                continue
            up = take_state(rep.content, "fedlib.up")
            self.wire.append((round_, k, UP, up.kind, up.nbytes(), flower_bytes(rep)))
            self._holds.add(k)
            if self.mirror_states:
                state = take_state(rep.content, "fedlib.state")
            else:
                state = State(meta={"fedlib.state": f"on node {self.nodes[k]}"})
            yield k, state, up

    def evaluate(self, algorithm, round_, messages, states, *, rare_ratio, f1_class,
                 predictions=None) -> Iterator[tuple[int, dict[str, float]]]:
        extra = {"rare_ratio": float(rare_ratio), "f1_class": -1 if f1_class is None else int(f1_class)}
        sent = {k: self._message("evaluate", k, round_, down, states[k], extra) for k, down in messages.items()}
        replies = self._exchange(sent)
        for k, down in messages.items():
            rep = replies.get(k)
            self.wire.append((round_, k, DOWN, down.kind, down.nbytes(), flower_bytes(sent[k])))
            if rep is None or rep.has_error():
                yield k, self._failure(k, round_, rep)
                continue
            self._holds.add(k)
            record = rep.content["fedlib.abilities"]
            yield k, {name: float(record[name]) for name in json.loads(rep.content[CTL]["order"])}

    def wire_frame(self) -> pd.DataFrame:
        """One row per fedlib message this transport carried: ``round, client, direction, kind,
        bytes`` (fedlib's count, as in the ledger) ``, flower_bytes``
        (:func:`~fedlib.engines.flower.records.flower_bytes` of the Flower message that carried it)."""
        return pd.DataFrame(self.wire, columns=["round", "client", "direction", "kind", "bytes", "flower_bytes"])


__all__ = ["FlowerSetupError", "FlowerTransport", "RemoteFederation", "handshake"]
