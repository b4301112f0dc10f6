"""Flower as an engine: the same :class:`~fedlib.protocol.Algorithm` objects run on Flower's nodes.

A fedlib run on Flower is the one round loop (:func:`fedlib.loop.run_rounds`) with another
transport. The loop runs inside Flower's ``ServerApp`` and writes every round once (sampling,
events, the non-finite guard, aggregation, the evaluation schedule, the ledger, checkpoints);
:class:`~fedlib.engines.flower.remote.FlowerTransport` carries its messages through Flower's
``Grid`` to ``ClientApp`` handlers (``@app.train()``, ``@app.evaluate()``, ``@app.query()``),
which run the client's hooks exactly as the in-process transport does. Nothing of a method changes.

**The job.** Both sides build what they need from one JSON-able
:class:`~fedlib.engines.flower.job.FlowerJob`: the method by its registry name and keyword
arguments, the federation and the model as calls of importable functions
(:class:`~fedlib.engines.flower.job.Call`), the loop's settings. A node builds the federation and
keeps only its partition's data; the ServerApp never builds it (it learns the clients' number,
classes and the federation's description from the nodes, and checks that every node built the
same one; only the loopback grid runs its nodes in the server's process).

**A node is one client.** A node's ``node_config`` holds ``partition-id`` (the fedlib client it
is) and ``num-partitions``; a handshake (:func:`~fedlib.engines.flower.remote.handshake`, a
``query`` message) maps every client to its node before round 1 and refuses a node without a
partition, two nodes with one partition, or a node whose job or federation differs from the server's.

**Client state.** A client's persistent :class:`~fedlib.messages.State` lives on its node, in
Flower's ``context.state``; the server sends it down only where the node does not hold it yet
(its first message in a Flower run: the empty state every client starts from, or a resumed
run's). With ``mirror_states=True`` (default) each reply also carries a copy
up, so the loop can checkpoint, resume and return every client's state as in-process; with
``False`` the state never leaves the node (:class:`~fedlib.results.RunResult` then holds placeholders and the run
cannot be checkpointed).

**Exactness.** A client's work is a function of (state, message, data, generator), the generator
is derived from (seed, round, client) on the node as in-process, and the conversion of messages to
Flower's records is lossless (:func:`~fedlib.engines.flower.records.message_to_records`), so the
final server state and every protocol metric are bit-identical to the in-process loop's on the
CPU (tested for FedAvg, Ditto and MPT on both engines, and for every registered method on the
loopback grid).

**Bytes.** The ledger counts fedlib's bytes (arrays' raw bytes plus JSON metadata). The transport
also records, for every message, the bytes of the Flower message that carried it, as Flower
serializes it (the deflated objects of its tree: array bytes in ``.npy`` form, headers, the
control record, a restored or mirrored state):
:meth:`~fedlib.engines.flower.remote.FlowerTransport.wire_frame`, saved as ``wire.csv``.

**Engines.** :func:`~fedlib.engines.flower.deployment.run_flower` with ``engine="simulation"``
(Flower's simulation engine, Ray backend, in this process) or ``engine="deployment"`` (a SuperLink
and one SuperNode per client as separate processes on 127.0.0.1,
:class:`~fedlib.engines.flower.deployment.LocalDeployment`, insecure mode: plain HTTP, no node
authentication; for loopback only) or ``engine="loopback"``
(:class:`~fedlib.engines.flower.loopback.LoopbackGrid`: Flower's messages without its runtime).

**Modules**, from the bottom up (each imports only those before it, and the loop sits between
the second and the third):

* :mod:`fedlib.engines.flower.records`: fedlib's messages and states as Flower's records, losslessly;
* :mod:`fedlib.engines.flower.remote`: :class:`~fedlib.engines.flower.remote.FlowerTransport`
  and the handshake (below the round loop: it imports neither :mod:`fedlib.loop` nor a method);
* :mod:`fedlib.engines.flower.job`: :class:`~fedlib.engines.flower.job.FlowerJob`, what both sides build from;
* :mod:`fedlib.engines.flower.apps`: the ``ClientApp`` and the ``ServerApp`` that runs the loop;
* :mod:`fedlib.engines.flower.entrypoint`: the apps a deployment loads by name (the only module that
  builds apps when imported);
* :mod:`fedlib.engines.flower.loopback`: :class:`~fedlib.engines.flower.loopback.LoopbackGrid`;
* :mod:`fedlib.engines.flower.deployment`: running on an engine, and the local deployment's processes;
* :mod:`fedlib.engines.flower.cli`: ``python -m fedlib.engines.flower`` and the engines' costs.

This package imports its modules lazily (PEP 562, as ``fedlib.algorithms`` does):
``from fedlib.engines.flower import run_flower`` imports what ``run_flower`` needs, and
``import fedlib.engines.flower.records`` loads neither the round loop nor Flower's simulation
engine. Importing it builds no app.
"""

from __future__ import annotations

import importlib

_LAZY: dict[str, str] = {
    "CTL": "records",
    "FlowerConversionError": "records",
    "flower_bytes": "records",
    "has_state": "records",
    "message_to_records": "records",
    "put_state": "records",
    "records_to_message": "records",
    "take_state": "records",
    "FlowerSetupError": "remote",
    "FlowerTransport": "remote",
    "RemoteFederation": "remote",
    "handshake": "remote",
    "Call": "job",
    "FlowerJob": "job",
    "example_job": "job",
    "make_client_app": "apps",
    "make_server_app": "apps",
    "LoopbackGrid": "loopback",
    "ENGINES": "deployment",
    "FlowerRun": "deployment",
    "LocalDeployment": "deployment",
    "free_port_block": "deployment",
    "port_free": "deployment",
    "run_flower": "deployment",
    "ENGINE_CHOICES": "cli",
    "engine_costs": "cli",
    "main": "cli",
    "run_job": "cli",
}
"""Each public name and the submodule that defines it (a literal: the book's build reads it)."""

_SUBMODULES = ("records", "remote", "job", "apps", "entrypoint", "loopback", "deployment", "cli")


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name in _SUBMODULES:  # a submodule as an attribute: fedlib.engines.flower.records
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)
