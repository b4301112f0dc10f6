"""Flower's Message API without its runtime: a ``Grid`` whose nodes are ``ClientApp`` calls in
this process (:class:`LoopbackGrid`). fedlib's tests and a reader's first debugging run use it.

It imports Flower only: any ``ClientApp`` can run on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from flwr.app import Context, Error, Message as FlowerMessage, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.serverapp import Grid


class LoopbackGrid(Grid):
    """Flower's Message API without its runtime: a ``Grid`` whose nodes are ``ClientApp`` calls in
    this process, one after another. Every message and reply is serialized to Flower's protobuf
    form and read back (what a real engine does on the wire), each node keeps its own
    ``Context`` (``context.state`` persists), and a handler that raises gives an error reply, as
    on Flower's engines. It starts in milliseconds: fedlib's tests and a reader's first debugging
    run use it; the results equal the simulation's and the deployment's.

    Parameters
    ----------
    client_app : the ``ClientApp`` every node runs
    n_nodes : nodes, node ``k`` with ``node_config = {"partition-id": k, "num-partitions": n_nodes}``
    run_config : every node's run config
    unresponsive : partition ids whose nodes answer the handshake, then never reply (a node
        that crashed mid-run: the server's ``send_and_receive`` returns without their replies
        once its timeout has passed)
    node_configs : replaces the node configs (e.g. a node without a partition, for tests)
    """

    def __init__(self, client_app: ClientApp, n_nodes: int, *, run_config: Mapping | None = None,
                 unresponsive: set[int] | frozenset[int] = frozenset(), node_configs: list[dict] | None = None) -> None:
        configs = node_configs if node_configs is not None else [
            {"partition-id": k, "num-partitions": n_nodes} for k in range(n_nodes)]
        self._app = client_app
        self._contexts = {1000 + i: Context(run_id=1, node_id=1000 + i, node_config=dict(cfg), state=RecordDict(),
                                            run_config=dict(run_config or {})) for i, cfg in enumerate(configs)}
        self._silent = {1000 + i for i, cfg in enumerate(configs) if cfg.get("partition-id") in set(unresponsive)}
        self._replies: dict[str, FlowerMessage] = {}
        self._run = None

    def set_run(self, run) -> None:
        """Flower's run (unused here)."""
        self._run = run

    @property
    def run(self):
        """Flower's run (``None``: a loopback grid has none)."""
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> FlowerMessage:
        """A message to ``dst_node_id`` (Flower's deprecated helper; build a ``Message`` instead)."""
        return FlowerMessage(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        """The nodes: ``1000 + i`` for the ``i``-th node config."""
        return list(self._contexts)

    def push_messages(self, messages) -> list[str]:
        """Deliver each message to its node's ``ClientApp`` now (through the wire format); the
        reply waits for :meth:`pull_messages`. Returns the messages' ids."""
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            msg.metadata.__dict__["_src_node_id"] = 1
            ids.append(msg.metadata.message_id)
            node = msg.metadata.dst_node_id
            if node not in self._contexts:
                raise ValueError(f"no node {node}; valid: {sorted(self._contexts)}")
            if node in self._silent and msg.metadata.message_type != "query":
                continue
            received = message_from_proto(message_to_proto(msg))  # through the wire format
            try:
                reply = self._app(received, self._contexts[node])
            except Exception as err:  # a failing ClientApp gives an error reply, as on Flower's engines
                reply = FlowerMessage(Error(code=0, reason=f"{type(err).__name__}: {err}"), reply_to=received)
            reply.metadata.__dict__["_src_node_id"] = node
            self._replies[msg.metadata.message_id] = message_from_proto(message_to_proto(reply))
        return ids

    def pull_messages(self, message_ids) -> list[FlowerMessage]:
        """The replies to these message ids that exist (a silent node's never do)."""
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages, *, timeout: float | None = None) -> list[FlowerMessage]:
        """Push, then pull the replies (a silent node's never come)."""
        return self.pull_messages(self.push_messages(list(messages)))


__all__ = ["LoopbackGrid"]
