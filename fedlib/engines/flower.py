"""Flower as an engine: the same :class:`~fedlib.protocol.Algorithm` objects run on Flower's nodes.

A fedlib run on Flower is the one round loop (:func:`fedlib.loop.run_federated`) with another
transport. The loop runs inside Flower's ``ServerApp`` and writes every round once (sampling,
events, the non-finite guard, aggregation, the evaluation schedule, the ledger, checkpoints);
:class:`FlowerTransport` carries its messages through Flower's ``Grid`` to ``ClientApp`` handlers
(``@app.train()``, ``@app.evaluate()``, ``@app.query()``), which run the client's hooks exactly as
the in-process transport does. Nothing of a method changes.

**The job.** Both sides build what they need from one JSON-able :class:`FlowerJob`: the method by
its registry name and keyword arguments, the federation and the model as calls of importable
functions (:class:`Call`), the loop's settings. A node builds the federation and keeps only its
partition's data; the ServerApp never builds it (it learns the clients' number, classes and the
federation's description from the nodes, and checks that every node built the same one; only the
loopback grid runs its nodes in the server's process).

**A node is one client.** A node's ``node_config`` holds ``partition-id`` (the fedlib client it
is) and ``num-partitions``; a handshake (a ``query`` message) maps every client to its node
before round 1 and refuses a node without a partition, two nodes with one partition, or a node
whose job or federation differs from the server's.

**Client state.** A client's persistent :class:`~fedlib.messages.State` lives on its node, in
Flower's ``context.state``; the server sends it down only where the node does not hold it yet
(its first message in a Flower run: the state the method's ``init_client`` gives, or a resumed
run's). With ``mirror_states=True`` (default) each reply also carries a copy
up, so the loop can checkpoint, resume and return every client's state as in-process; with
``False`` the state never leaves the node (:class:`~fedlib.loop.RunResult` then holds placeholders and the run
cannot be checkpointed).

**Exactness.** A client's work is a function of (state, message, data, generator), the generator
is derived from (seed, round, client) on the node as in-process, and the conversion of messages to
Flower's records is lossless (:func:`message_to_records`), so the final server state and every
protocol metric are bit-identical to the in-process loop's on the CPU (tested for FedAvg, Ditto
and MPT on both engines, and for every registered method on the loopback grid).

**Bytes.** The ledger counts fedlib's bytes (arrays' raw bytes plus JSON metadata). The transport
also records, for every message, the bytes of the Flower message that carried it, as Flower
serializes it (the deflated objects of its tree: array bytes in ``.npy`` form, headers, the
control record, a restored or mirrored state): :meth:`FlowerTransport.wire_frame`, saved as ``wire.csv``.

Engines: :func:`run_flower` with ``engine="simulation"`` (Flower's simulation engine, Ray backend,
in this process) or ``engine="deployment"`` (a SuperLink and one SuperNode per client as separate
processes on 127.0.0.1, :class:`LocalDeployment`, insecure mode: plain HTTP, no node
authentication; for loopback only).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message as FlowerMessage, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.task_identity import TaskIdentity
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from ..algorithms import make_algorithm
from ..federation import Federation
from ..io import atomic_write_bytes, json_default
from ..loop import LoopConfig, RunResult, run_federated
from ..messages import DOWN, UP, Message, State
from ..models import ClientArchitectures
from ..protocol import Event
from ..rng import INIT, derive_seed, isolated_torch_rng
from .base import ClientFailure, Transport
from .inprocess import InProcessTransport

ENGINES = ("simulation", "deployment", "loopback")
"""The engines :func:`run_flower` drives: Flower's two, and :class:`LoopbackGrid` (Flower's
messages without its runtime, for tests and teaching)."""

CTL = "fedlib.ctl"
"""The record of a Flower message that says what it is for (round, client, job, key orders)."""

_SCALARS = (bool, int, float, str)


class FlowerConversionError(TypeError):
    """A fedlib message holds something Flower's records cannot carry losslessly."""


class FlowerSetupError(RuntimeError):
    """The Flower nodes do not form the job's federation (a node without a partition, two nodes
    with one partition, a node that built another federation), or a deployment could not start."""


# --------------------------------------------------------------------------------------------
# fedlib Message / State <-> Flower records, lossless
# --------------------------------------------------------------------------------------------

def _array(name: str, t: Any) -> Array:
    if not isinstance(t, torch.Tensor):
        raise FlowerConversionError(f"array {name!r} is a {type(t).__name__}; a message's arrays must be torch tensors")
    try:
        a = t.detach().cpu().resolve_conj().resolve_neg().numpy()
    except (TypeError, RuntimeError) as err:
        raise FlowerConversionError(
            f"array {name!r} has dtype {t.dtype}, which Flower's arrays (NumPy .npy) cannot carry; valid: the dtypes "
            "NumPy has (float16/32/64, complex, int8..int64, uint8, bool)") from err
    return Array(a if a.flags.c_contiguous else a.copy(order="C"))  # (np.ascontiguousarray would make a 0-d array 1-d)


def _scalar(name: str, v: Any) -> tuple[Any, bool]:
    """A metadata value as Flower's records carry it, and whether it travels as JSON text (a
    list or dict: fedlib's metadata is JSON, so a tuple comes back as a list, as from a checkpoint)."""
    if isinstance(v, np.generic) and isinstance(v.item(), _SCALARS):
        v = v.item()  # a NumPy scalar travels as the Python number of the same value
    if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**63:
        raise FlowerConversionError(f"metadata {name!r} = {v} does not fit Flower's 64-bit integers")
    if isinstance(v, _SCALARS):
        return v, False
    if isinstance(v, (list, tuple, dict)):
        try:
            return json.dumps(v, allow_nan=True), True
        except TypeError:
            pass
    raise FlowerConversionError(
        f"metadata {name!r} is a {type(v).__name__} ({v!r}); valid metadata values: bool, int, float, str, and "
        "lists or dicts of them (JSON)")


def put_state(content: RecordDict, slot: str, state: State) -> None:
    """Write ``state`` (a :class:`~fedlib.messages.State` or :class:`~fedlib.messages.Message`)
    into ``content`` as records ``<slot>.arrays`` (an ``ArrayRecord``) and ``<slot>.meta`` (a
    ``ConfigRecord`` of the metadata, the orders of both and, for a message, its kind)."""
    arrays = {str(k): _array(k, t) for k, t in state.arrays.items()}
    converted = {str(k): _scalar(k, v) for k, v in state.meta.items()}
    meta = {k: v for k, (v, _) in converted.items()}
    info: dict[str, Any] = {"arrays": list(arrays), "meta": list(meta), "message": isinstance(state, Message),
                            "json": [k for k, (_, as_json) in converted.items() if as_json]}
    if isinstance(state, Message):
        info["kind"] = state.kind
    content[f"{slot}.arrays"] = ArrayRecord(arrays)
    content[f"{slot}.meta"] = ConfigRecord(meta)
    content[f"{slot}.info"] = ConfigRecord({"json": json.dumps(info)})


def take_state(content: RecordDict, slot: str) -> State:
    """What :func:`put_state` wrote into ``content`` under ``slot``: the same class, array names,
    dtypes, shapes and values, metadata types and values, and orders."""
    info = json.loads(content[f"{slot}.info"]["json"])
    records, meta = content[f"{slot}.arrays"], content[f"{slot}.meta"]
    arrays = {k: torch.from_numpy(np.array(records[k].numpy(), copy=True)) for k in info["arrays"]}
    values = {k: meta[k] for k in info["meta"]}
    for k in info["json"]:
        values[k] = json.loads(values[k])
    if info["message"]:
        return Message(arrays=arrays, meta=values, kind=str(info["kind"]))
    return State(arrays=arrays, meta=values)


def has_state(content: RecordDict, slot: str) -> bool:
    """Whether ``content`` holds a state or message written under ``slot``."""
    return f"{slot}.info" in content


def message_to_records(message: State) -> RecordDict:
    """A fedlib :class:`~fedlib.messages.Message` (or :class:`~fedlib.messages.State`) as a
    Flower ``RecordDict`` (slot ``"fedlib"``); :func:`records_to_message` gives it back exactly.
    Raises :class:`FlowerConversionError` naming an array or metadata entry that cannot travel."""
    content = RecordDict()
    put_state(content, "fedlib", message)
    return content


def records_to_message(content: RecordDict) -> State:
    """The inverse of :func:`message_to_records`."""
    return take_state(content, "fedlib")


def flower_bytes(message: FlowerMessage | RecordDict) -> int:
    """The bytes of a Flower message (or record dict) as Flower serializes it: the deflated
    objects of its tree, each once (Flower sends an object shared by two records once)."""
    return int(sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values()))


# --------------------------------------------------------------------------------------------
# the job: what both sides build, as JSON
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """A call of an importable function, as data: ``target`` is ``"package.module:name"``;
    ``kwargs`` may hold further calls as ``{"call": ..., "kwargs": ...}`` dicts, made first, and
    functions with bound arguments (e.g. a model factory) as ``{"partial": ..., "kwargs": ...}``.

    >>> Call("fedlib.data:load_dataset", {"name": "uci_digits"}).to_dict()
    {'call': 'fedlib.data:load_dataset', 'kwargs': {'name': 'uci_digits'}}
    """

    target: str
    kwargs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"call": self.target, "kwargs": _plain(self.kwargs)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Call":
        if not isinstance(d, Mapping) or set(d) - {"call", "kwargs"} or "call" not in d:
            raise ValueError(f"a call is a dict {{'call': 'module:name', 'kwargs': {{...}}}}, got {d!r}")
        return cls(str(d["call"]), dict(d.get("kwargs", {})))

    def function(self) -> Callable:
        """The function ``target`` names (imported)."""
        module, _, name = self.target.partition(":")
        if not module or not name:
            raise ValueError(f"call target {self.target!r} must read 'package.module:name'")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"call target {self.target!r} cannot be imported: {err}") from err

    def partial(self) -> Callable:
        """The function with its keyword arguments bound (nested calls made now)."""
        return functools.partial(self.function(), **_resolve(self.kwargs))

    def __call__(self) -> Any:
        return self.partial()()


def _plain(value: Any) -> Any:
    if isinstance(value, Call):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _resolve(value: Any) -> Any:
    if isinstance(value, Mapping) and "call" in value:
        return Call.from_dict(value)()
    if isinstance(value, Mapping) and "partial" in value:
        if set(value) - {"partial", "kwargs"}:
            raise ValueError(f"a partial is a dict {{'partial': 'module:name', 'kwargs': {{...}}}}, got {value!r}")
        return Call(str(value["partial"]), dict(value.get("kwargs", {}))).partial()
    if isinstance(value, Mapping):
        return {k: _resolve(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


_LOOP_FIELDS = ("rounds", "participation", "eval_every", "seed", "on_nonfinite", "on_failure", "events", "rare_ratio",
                "f1_class", "checkpoint", "evaluate_last", "eval_clients")


@dataclass(frozen=True)
class FlowerJob:
    """What a Flower run runs, as JSON-able data that the server and every node build from.

    Attributes
    ----------
    algorithm : a registered method's name (as ``fedlib.algorithms.make_algorithm`` takes it)
    federation : a :class:`Call` that returns the :class:`~fedlib.federation.Federation`
        (deterministic: every node makes it and keeps its own partition)
    model : a :class:`Call` that returns the architecture (its keyword arguments bound; the loop
        draws the initial weights under the run's ``INIT`` stream)
    config : the :class:`~fedlib.loop.LoopConfig` settings (rounds, seed, ...; ``events`` as dicts)
    algorithm_kwargs : the method's keyword arguments (nested calls allowed)
    threads : torch's intra-op threads on every node and in the ServerApp while it runs
        (``torch.set_num_threads``); ``None`` leaves each process's default. Results are bit-identical to an in-process run only with the
        same number of threads on both sides: torch's CPU kernels split a reduction into
        per-thread parts, so another count sums in another order (the last bits differ)
    """

    algorithm: str
    federation: Call
    model: Call
    config: dict = field(default_factory=dict)
    algorithm_kwargs: dict = field(default_factory=dict)
    threads: int | None = None

    def __post_init__(self) -> None:
        bad = sorted(set(self.config) - set(_LOOP_FIELDS))
        if bad:
            raise ValueError(f"unknown loop setting(s) {bad} in a Flower job; valid: {', '.join(_LOOP_FIELDS)}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be None (each node's default) or an integer >= 1, got {self.threads!r}")
        try:
            json.dumps(self.to_dict())
        except TypeError as err:
            raise ValueError(f"a Flower job must be JSON-able (numbers, strings, lists, dicts, Calls): {err}") from err

    def to_dict(self) -> dict:
        return {"algorithm": self.algorithm, "federation": self.federation.to_dict(), "model": self.model.to_dict(),
                "config": _plain(self.config), "algorithm_kwargs": _plain(self.algorithm_kwargs), "threads": self.threads}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "FlowerJob":
        d = json.loads(text)
        return cls(d["algorithm"], Call.from_dict(d["federation"]), Call.from_dict(d["model"]), d.get("config", {}),
                   d.get("algorithm_kwargs", {}), d.get("threads"))

    @property
    def digest(self) -> str:
        """A short digest of the job (server and nodes check they run the same one)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def loop_config(self) -> LoopConfig:
        cfg = dict(self.config)
        cfg["events"] = tuple(Event(**e) if isinstance(e, Mapping) else e for e in cfg.get("events", ()))
        return LoopConfig(**cfg)

    def build_algorithm(self):
        return make_algorithm(self.algorithm, **_resolve(self.algorithm_kwargs))

    def model_fn(self) -> Callable[[], torch.nn.Module]:
        return self.model.partial()


# --------------------------------------------------------------------------------------------
# the node side: a ClientApp whose handlers run one client's hooks
# --------------------------------------------------------------------------------------------

_NODE_CACHE: dict[str, tuple] = {}
"""Per process: job digest -> (job, algorithm, in-process transport over the federation). A
simulation's Ray workers keep it across messages; a deployment starts a process per message."""


def _node(job: FlowerJob) -> tuple[Any, InProcessTransport, Federation]:
    if job.threads is not None and torch.get_num_threads() != job.threads:
        torch.set_num_threads(job.threads)
    if job.digest not in _NODE_CACHE:
        federation = job.federation()
        if not isinstance(federation, Federation):
            raise TypeError(f"the job's federation call {job.federation.target} returned a {type(federation).__name__}, "
                            "not a fedlib Federation")
        seed = int(job.config.get("seed", LoopConfig().seed))
        _NODE_CACHE.clear()  # one job per process at a time
        _NODE_CACHE[job.digest] = (job.build_algorithm(), InProcessTransport(federation, job.model_fn(), seed), federation)
    return _NODE_CACHE[job.digest]


def _partition(context: Context) -> tuple[int, int]:
    cfg = context.node_config
    if "partition-id" not in cfg or "num-partitions" not in cfg:
        raise FlowerSetupError(
            f"node {context.node_id} has no partition: its node config {dict(cfg)} lacks 'partition-id' and/or "
            "'num-partitions'; start its SuperNode with --node-config 'partition-id=K num-partitions=N' (K in 0..N-1)")
    return int(cfg["partition-id"]), int(cfg["num-partitions"])


def _context_job(job: FlowerJob | None, context: Context) -> FlowerJob:
    if job is not None:
        return job
    if "fedlib-job" not in context.run_config:
        raise FlowerSetupError(f"the run config has no 'fedlib-job' (keys: {sorted(context.run_config)}); run the app "
                               "through fedlib.engines.flower.run_flower or give --run-config a fedlib-job")
    return FlowerJob.from_json(str(context.run_config["fedlib-job"]))


def _check_job(job: FlowerJob, msg: FlowerMessage) -> dict:
    ctl = dict(msg.content[CTL])
    if ctl.get("job") != job.digest:
        raise FlowerSetupError(f"the server runs job {ctl.get('job')}, this node job {job.digest}: they were given "
                               "different jobs")
    return ctl


def _addressee(context: Context, ctl: Mapping) -> int:
    """The client a message is for, checked to be the one this node holds."""
    client = int(ctl["client"])
    pid, _ = _partition(context)
    if pid != client:
        raise FlowerSetupError(f"node {context.node_id} holds client {pid}, but the message is for client {client}")
    return client


def _client_state(context: Context, msg: FlowerMessage, client: int) -> State:
    if has_state(msg.content, "fedlib.restore"):
        return take_state(msg.content, "fedlib.restore")
    if not has_state(context.state, "fedlib.state"):
        raise FlowerSetupError(f"client {client}'s node holds no state and the server sent none")
    return take_state(context.state, "fedlib.state")


def _received(job: FlowerJob | None, context: Context, msg: FlowerMessage) -> tuple:
    """What a training or evaluation message says, checked: its control record, the client (this
    node's), the round, the node's algorithm and in-process transport, the client's state and
    the fedlib message."""
    j = _context_job(job, context)
    ctl = _check_job(j, msg)
    client = _addressee(context, ctl)
    algorithm, transport, _ = _node(j)
    return (ctl, client, int(ctl["round"]), algorithm, transport, _client_state(context, msg, client),
            take_state(msg.content, "fedlib.down"))


def make_client_app(job: FlowerJob | None = None) -> ClientApp:
    """A Flower ``ClientApp`` that runs one fedlib client per node: the client named by the
    node's ``partition-id``. ``job`` (or, when ``None``, the run config's ``fedlib-job``) says
    which method, federation and model."""
    app = ClientApp()

    @app.query()
    def handshake(msg: FlowerMessage, context: Context) -> FlowerMessage:
        j = _context_job(job, context)
        _check_job(j, msg)
        pid, n = _partition(context)
        _, _, federation = _node(j)
        if n != federation.n_clients or not 0 <= pid < n:
            raise FlowerSetupError(f"node {context.node_id} has partition-id={pid}, num-partitions={n}, but the job's "
                                   f"federation has {federation.n_clients} clients; valid: partition-id in "
                                   f"0..{federation.n_clients - 1}, num-partitions={federation.n_clients}")
        reply = {"partition-id": pid, "n_clients": federation.n_clients, "n_classes": federation.n_classes,
                 "description": json.dumps(federation.description, sort_keys=True, default=json_default)}
        return FlowerMessage(RecordDict({CTL: ConfigRecord(reply)}), reply_to=msg)

    @app.train()
    def train(msg: FlowerMessage, context: Context) -> FlowerMessage:
        ctl, client, r, algorithm, transport, state, down = _received(job, context, msg)
        ((_, new_state, up),) = list(transport.local_updates(algorithm, r, {client: down}, {client: state}))
        if isinstance(up, ClientFailure):
            raise up.error if up.error is not None else RuntimeError(up.reason)
        put_state(context.state, "fedlib.state", new_state)
        content = RecordDict()
        put_state(content, "fedlib.up", up)
        if ctl.get("mirror", True):
            put_state(content, "fedlib.state", new_state)
        return FlowerMessage(content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: FlowerMessage, context: Context) -> FlowerMessage:
        ctl, client, r, algorithm, transport, state, down = _received(job, context, msg)
        if has_state(msg.content, "fedlib.restore"):
            put_state(context.state, "fedlib.state", state)
        f1 = int(ctl["f1_class"]) if int(ctl["f1_class"]) >= 0 else None
        ((_, abilities),) = list(transport.evaluate(algorithm, r, {client: down}, {client: state},
                                                    rare_ratio=float(ctl["rare_ratio"]), f1_class=f1))
        if isinstance(abilities, ClientFailure):
            raise abilities.error if abilities.error is not None else RuntimeError(abilities.reason)
        names = list(abilities)
        content = RecordDict({"fedlib.abilities": MetricRecord({k: float(v) for k, v in abilities.items()}),
                              CTL: ConfigRecord({"order": json.dumps(names)})})
        return FlowerMessage(content, reply_to=msg)

    return app


# --------------------------------------------------------------------------------------------
# the server side: the transport, and a ServerApp that runs the one loop over it
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RemoteFederation:
    """The server's view of a federation whose data stays on the nodes: its size, classes and
    description (what :func:`fedlib.loop.run_federated` reads of a federation on the server)."""

    n_clients: int
    n_classes: int
    description: dict


def _wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    t0 = time.monotonic()
    while len(ids := sorted(grid.get_node_ids())) < n:
        if time.monotonic() - t0 > timeout:
            raise FlowerSetupError(f"{len(ids)} node(s) connected within {timeout:.0f} s, but the federation has "
                                   f"{n} clients: start one SuperNode per client (partition-id 0..{n - 1})")
        time.sleep(0.05)
    return ids


def handshake(grid: Grid, job: FlowerJob, n_clients: int, timeout: float) -> tuple[dict[int, int], RemoteFederation]:
    """Ask every node which client it holds: ``{client: node id}`` and the federation the nodes
    built. Raises :class:`FlowerSetupError` naming the node when one has no partition, two hold
    one partition, a partition has no node, or the nodes built different federations."""
    ids = _wait_for_nodes(grid, n_clients, timeout)
    msgs = [FlowerMessage(RecordDict({CTL: ConfigRecord({"job": job.digest})}), dst_node_id=i, message_type="query")
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
        shapes.add((int(info["n_clients"]), int(info["n_classes"]), str(info["description"])))
    missing = sorted(set(range(n_clients)) - set(nodes))
    if len(replies) < len(ids):
        silent = sorted(set(ids) - {rep.metadata.src_node_id for rep in replies})
        raise FlowerSetupError(f"node(s) {silent} did not answer the handshake within {timeout:.0f} s")
    if missing:
        raise FlowerSetupError(f"no node holds client(s) {missing}; valid partition-ids: 0..{n_clients - 1}")
    if len(shapes) != 1:
        raise FlowerSetupError(f"the nodes built {len(shapes)} different federations from one job; a federation call "
                               "must be deterministic")
    (n, c, description), = shapes
    return nodes, RemoteFederation(n, c, json.loads(description))


class FlowerTransport(Transport):
    """The loop's transport over a Flower ``Grid``: client ``k``'s messages go to the node that
    holds partition ``k`` (``nodes[k]``), one Flower message per fedlib message.

    Parameters
    ----------
    grid : the ServerApp's grid
    job : the job every node runs
    nodes : client -> node id (:func:`handshake`)
    timeout : seconds a message waits for its reply, from when it is sent (``None``: no limit); a
        client with no reply by then is a :class:`~fedlib.engines.base.ClientFailure`, handled by the loop's
        ``on_failure``
    mirror_states : whether replies also carry the client's new state (see the module's text)
    max_in_flight : at most that many messages unanswered at a time (``None``: a round's messages
        all at once). A local deployment sets it to twice the machine's cores: Flower starts a process
        for every message on every node and gives it 30 s to report, which twenty processes
        importing torch at once on two cores do not meet
    poll : seconds between two requests for replies (Flower's own ``send_and_receive`` waits 3 s)
    """

    name = "flower"

    def __init__(self, grid: Grid, job: FlowerJob, nodes: Mapping[int, int], *, timeout: float | None = None,
                 mirror_states: bool = True, max_in_flight: int | None = None, poll: float = 0.5) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be None (no limit) or >= 1, got {max_in_flight}")
        self.grid = grid
        self.job = job
        self.nodes = dict(nodes)
        self.seed = int(job.config.get("seed", LoopConfig().seed))
        self.n_clients = len(self.nodes)
        model_fn = job.model_fn()
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
        content[CTL] = ConfigRecord({"job": self.job.digest, "client": k, "round": round_, "mirror": self.mirror_states,
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

    def evaluate(self, algorithm, round_, messages, states, *, rare_ratio, f1_class) -> Iterator[tuple[int, dict[str, float]]]:
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
        bytes`` (fedlib's count, as in the ledger) ``, flower_bytes`` (:func:`flower_bytes` of the
        Flower message that carried it)."""
        return pd.DataFrame(self.wire, columns=["round", "client", "direction", "kind", "bytes", "flower_bytes"])


def make_server_app(job: FlowerJob | None = None, out: str | Path | None = None, *, timeout: float | None = None,
                    mirror_states: bool = True, setup_timeout: float = 600.0, stop_after: int | None = None,
                    max_in_flight: int | None = None) -> ServerApp:
    """A Flower ``ServerApp`` that runs ``job`` (or the run config's ``fedlib-job``) through the
    one round loop over a :class:`FlowerTransport`, and writes the run into ``out`` (or the run
    config's ``fedlib-out``): :meth:`fedlib.loop.RunResult.save`'s files, ``wire.csv`` and
    ``flower.json`` (nodes, timings). ``setup_timeout``: seconds to wait for the nodes to connect
    and answer the handshake (a deployment's first message starts a process on every node, which
    imports torch and builds the node's data: on a small machine with many nodes, minutes).
    ``stop_after`` stops after that round, as
    :func:`fedlib.loop.run_federated`'s does (with a checkpoint in the job, a later run resumes)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        t0 = time.perf_counter()
        j = _context_job(job, context)
        folder = Path(out if out is not None else context.run_config["fedlib-out"])
        config = j.loop_config()
        n = int(context.run_config.get("fedlib-clients", 0)) or _clients_of(j)
        nodes, federation = handshake(grid, j, n, setup_timeout)
        t_setup = time.perf_counter() - t0
        threads = torch.get_num_threads()
        if j.threads is not None:  # the server's arithmetic too (a deployment's ServerApp is a process of its own)
            torch.set_num_threads(j.threads)
        try:
            _serve(j, grid, context, folder, config, nodes, federation, t0, t_setup)
        finally:
            torch.set_num_threads(threads)

    def _serve(j, grid, context, folder, config, nodes, federation, t0, t_setup) -> None:
        t_limit = float(context.run_config.get("fedlib-timeout", -1.0)) if timeout is None else timeout
        window = int(context.run_config.get("fedlib-max-in-flight", 0)) or max_in_flight
        transport = FlowerTransport(grid, j, nodes, timeout=None if t_limit < 0 else t_limit, mirror_states=mirror_states,
                                    max_in_flight=window)
        result = run_federated(j.build_algorithm(), federation, j.model_fn(), config, transport=transport,  # type: ignore[arg-type]
                               stop_after=stop_after)
        result.save(folder)
        atomic_write_bytes(folder / "wire.csv", transport.wire_frame().to_csv(index=False).encode())
        info = {"nodes": {str(k): v for k, v in nodes.items()}, "setup_seconds": t_setup,
                "run_seconds": time.perf_counter() - t0, "job": j.digest}
        atomic_write_bytes(folder / "flower.json", json.dumps(info, indent=1).encode())

    return app


def _clients_of(job: FlowerJob) -> int:
    kwargs = job.federation.kwargs
    if "n_clients" in kwargs:
        return int(kwargs["n_clients"])
    raise ValueError(f"say how many clients the job's federation has: the federation call {job.federation.target} "
                     "has no n_clients argument (run_flower(n_clients=...))")


# the apps a deployment loads by name ("fedlib.engines.flower:server_app"); the job comes in the run config
server_app = make_server_app()
client_app = make_client_app()


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


# --------------------------------------------------------------------------------------------
# running: simulation, or a local deployment
# --------------------------------------------------------------------------------------------

@dataclass
class FlowerRun:
    """What :func:`run_flower` returns: the run, Flower's bytes per message, and timings.

    Attributes
    ----------
    result : the :class:`~fedlib.loop.RunResult` (read back from the folder the ServerApp wrote)
    wire : one row per fedlib message with Flower's bytes (:meth:`FlowerTransport.wire_frame`)
    engine : ``"simulation"`` or ``"deployment"``
    seconds : wall-clock seconds of the whole call, start-up included
    info : what the ServerApp recorded (nodes, setup and run seconds)
    """

    result: RunResult
    wire: pd.DataFrame
    engine: str
    seconds: float
    info: dict


def _read_run(folder: Path, engine: str, seconds: float) -> FlowerRun:
    if not (folder / "flower.json").exists():
        raise RuntimeError(f"the Flower run wrote no results into {folder}: the ServerApp failed (see the log above)")
    return FlowerRun(RunResult.load(folder), pd.read_csv(folder / "wire.csv"), engine, seconds,
                     json.loads((folder / "flower.json").read_text()))


def run_flower(job: FlowerJob, engine: str = "simulation", *, out: str | Path | None = None, timeout: float | None = None,
               mirror_states: bool = True, deployment: "LocalDeployment | None" = None, verbose: bool = False,
               unresponsive: set[int] | frozenset[int] = frozenset(), stop_after: int | None = None) -> FlowerRun:
    """Run ``job`` on one of Flower's engines and return its results.

    Parameters
    ----------
    engine : ``"simulation"`` (``flwr.simulation.run_simulation``, Ray backend, one virtual
        SuperNode per client) or ``"deployment"`` (a SuperLink and one SuperNode per client as
        processes on 127.0.0.1, started and stopped here unless ``deployment`` is given) or
        ``"loopback"`` (:class:`LoopbackGrid`: Flower's messages, no runtime; milliseconds)
    out : the folder the ServerApp writes the run into (default: a temporary one, removed after
        reading it back)
    timeout : seconds a message waits for its client's reply, from when it is sent (``None``: no limit)
    mirror_states : replies carry the clients' states too (needed to checkpoint)
    deployment : a running :class:`LocalDeployment` to submit to (it is left running)
    unresponsive : ``"loopback"`` only: clients whose nodes stop replying after the handshake
        (see :class:`LoopbackGrid`)
    stop_after : stop after this round (simulation and loopback; with a checkpoint in the job a
        later call resumes, its nodes given back their states from the checkpoint)
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown Flower engine {engine!r}; valid: {', '.join(ENGINES)}")
    if not mirror_states and job.config.get("checkpoint"):
        raise ValueError("a checkpoint needs the clients' states on the server: run with mirror_states=True")
    n = _clients_of(job)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if out is None:
            out = stack.enter_context(tempfile.TemporaryDirectory(prefix="fedlib-flower-"))
        folder = Path(out)
        (folder / "flower.json").unlink(missing_ok=True)  # a folder reused: never read back an earlier run
        if engine == "simulation":
            _simulate(job, folder, n, timeout, mirror_states, verbose, stop_after)
        elif engine == "loopback":
            if unresponsive and timeout is None:
                raise ValueError(f"client(s) {sorted(unresponsive)} never reply and no timeout is set: the run would wait "
                                 "for ever; give run_flower(timeout=...)")
            grid = LoopbackGrid(make_client_app(job), n, unresponsive=set(unresponsive))
            server = make_server_app(job, folder, timeout=timeout, mirror_states=mirror_states, setup_timeout=1.0,
                                     stop_after=stop_after)
            threads = torch.get_num_threads()  # the nodes run in this process and set their job's threads
            try:
                with _task_identity(run_id=1, node_id=1):
                    server(grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={}))
            finally:
                torch.set_num_threads(threads)
        else:
            if stop_after is not None:
                raise ValueError("stop_after is for the simulation and loopback engines; a deployment runs its rounds")
            dep = deployment if deployment is not None else stack.enter_context(LocalDeployment(n, verbose=verbose))
            dep.submit(job, folder, timeout=timeout, mirror_states=mirror_states)
        return _read_run(folder, engine, time.perf_counter() - t0)


@contextlib.contextmanager
def _task_identity(run_id: int, node_id: int) -> Iterator[None]:
    """Flower's per-process task identity (which new messages are stamped with), as its
    runtime sets it for a ServerApp process; restored afterwards."""
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = run_id, run_id, node_id
    try:
        yield
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Flower's and Ray's logs and deprecation notes, unless ``verbose``."""
    if verbose:
        yield
        return
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        flwr_logger.setLevel(level)


def _simulate(job: FlowerJob, folder: Path, n: int, timeout: float | None, mirror_states: bool, verbose: bool,
              stop_after: int | None) -> None:
    from flwr.simulation import run_simulation  # Ray loads only when a simulation runs

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    server = make_server_app(job, folder, timeout=timeout, mirror_states=mirror_states, stop_after=stop_after)
    client = make_client_app(job)
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"logging_level": "error" if not verbose else "info", "log_to_driver": verbose}}
    with _quiet(verbose):
        run_simulation(server, client, num_supernodes=n, backend_config=backend, verbose_logging=verbose)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``host:port`` (a port a server could bind: with
    ``SO_REUSEADDR``, as servers set it, so that a port whose last connections are closing counts free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port_block(n: int, start: int = 19091, stop: int = 30000) -> int:
    """The first port ``p >= start`` such that ``p .. p + n - 1`` are all free on 127.0.0.1 (for a
    :class:`LocalDeployment` of ``n - 1`` nodes: ``LocalDeployment(n - 1, port=free_port_block(n))``)."""
    for base in range(start, stop - n):
        if all(port_free(p) for p in range(base, base + n)):
            return base
    raise FlowerSetupError(f"no {n} consecutive free ports between {start} and {stop} on 127.0.0.1")


_APP_TOML = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedlib-flower"
version = "1.0.0"
description = "fedlib's methods on Flower: the one round loop in a ServerApp, a client per SuperNode"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedlib"

[tool.flwr.app.components]
serverapp = "fedlib.engines.flower:server_app"
clientapp = "fedlib.engines.flower:client_app"

[tool.flwr.app.config]
fedlib-job = "{}"
fedlib-out = ""
fedlib-clients = 0
fedlib-timeout = -1.0
fedlib-max-in-flight = 0
"""


class LocalDeployment:
    """Flower's deployment engine on this machine: a SuperLink and ``n_nodes`` SuperNodes, each a
    separate process on 127.0.0.1, in insecure mode (plain HTTP, no TLS, no node
    authentication: for loopback only). Node ``k`` is started with
    ``--node-config 'partition-id=k num-partitions=n_nodes'``.

    Use it as a context manager: every process it started (and every process those started, found
    by a marker in their environment) is stopped on exit, also when the run failed.

    Parameters
    ----------
    n_nodes : SuperNodes to start, one per client
    port : the SuperLink's port (its HTTP API serves the nodes and the ``flwr`` CLI); the nodes'
        own runtime APIs take the ``n_nodes`` ports after it. Refused with a clear error when one
        is in use.
    home : the Flower home folder (``FLWR_HOME``: the CLI's connection config, installed apps);
        default: a temporary folder
    max_in_flight : the server sends at most that many messages at a time (default: twice this
        machine's cores; ``None``: no limit): every node starts a process per message, and Flower
        gives a starting process 30 s to report (:class:`FlowerTransport`)
    """

    def __init__(self, n_nodes: int, *, port: int = 19091, home: str | Path | None = None, verbose: bool = False,
                 start_timeout: float = 60.0, max_in_flight: int | None = 2 * (os.cpu_count() or 1)) -> None:
        if n_nodes < 1:
            raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
        self.n_nodes = int(n_nodes)
        self.port = int(port)
        self.verbose = verbose
        self.start_timeout = start_timeout
        self.max_in_flight = max_in_flight
        self._home_arg = home
        self._procs: list[subprocess.Popen] = []
        self._marker = uuid.uuid4().hex
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.home: Path | None = None
        self.logs: Path | None = None

    # ---- processes
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        env["FLWR_HOME"] = str(self.home)
        env["FEDLIB_FLOWER_DEPLOYMENT"] = self._marker
        # the SuperExecs look for work to start every second by default; a local deployment can afford 0.2 s
        env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.2")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        exe = Path(sys.executable).parent / args[0]
        proc = subprocess.Popen([str(exe), *args[1:]], stdout=log, stderr=subprocess.STDOUT, env=self._env(),
                                start_new_session=True)
        proc._fedlib_log = log  # type: ignore[attr-defined]
        self._procs.append(proc)
        return proc

    def __enter__(self) -> "LocalDeployment":
        busy = [p for p in range(self.port, self.port + self.n_nodes + 1) if not port_free(p)]
        if busy:
            raise FlowerSetupError(
                f"port(s) {busy} on 127.0.0.1 are in use (another SuperLink or SuperNode?); a local deployment of "
                f"{self.n_nodes} node(s) needs ports {self.port}..{self.port + self.n_nodes}: stop what holds them "
                "or choose LocalDeployment(port=...)")
        if self._home_arg is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fedlib-flwr-home-")
            self.home = Path(self._tmp.name)
        else:
            self.home = Path(self._home_arg)
            self.home.mkdir(parents=True, exist_ok=True)
        self.logs = self.home / "logs"
        self.logs.mkdir(exist_ok=True)
        (self.home / "app").mkdir(exist_ok=True)
        (self.home / "app" / "pyproject.toml").write_text(_APP_TOML)  # once: runs submitted side by side read it
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "fedlib"\n\n[superlink.fedlib]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n')
        try:
            self._start("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--database", ":flwr-in-memory:", "--disable-runtime-dependency-installation"])
            self._wait_port(self.port, "the SuperLink")
            for k in range(self.n_nodes):
                self._start(f"supernode-{k}", [
                    "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                    "--node-config", f"partition-id={k} num-partitions={self.n_nodes}",
                    "--host", "127.0.0.1", "--port", str(self.port + 1 + k)])
            for k in range(self.n_nodes):
                self._wait_port(self.port + 1 + k, f"SuperNode {k}")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_port(self, port: int, what: str) -> None:
        t0 = time.monotonic()
        while port_free(port):
            dead = [p for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() - t0 > self.start_timeout:
                raise FlowerSetupError(f"{what} did not start on 127.0.0.1:{port}; its log: {self.logs}")
            time.sleep(0.1)

    def submit(self, job: FlowerJob, out: str | Path, *, timeout: float | None = None, mirror_states: bool = True,
               run_timeout: float = 1800.0) -> None:
        """Run ``job`` on this deployment (``flwr run``, waiting until it ends); the ServerApp
        writes the run into ``out``. Several threads may submit at once: the SuperLink runs
        them side by side, each node serving one message at a time."""
        if not mirror_states:
            raise ValueError("the deployment's ServerApp mirrors the clients' states; use the simulation engine or "
                             "make_server_app(mirror_states=False) in an app of your own")
        n = _clients_of(job)
        if n != self.n_nodes:
            raise FlowerSetupError(f"the job has {n} clients, but this deployment runs {self.n_nodes} SuperNode(s); "
                                   "valid: one SuperNode per client")
        app = self.home / "app"
        overrides = self.home / f"run-config-{uuid.uuid4().hex[:8]}.toml"  # one per submission: runs may overlap
        overrides.write_text(
            f"fedlib-job = {json.dumps(job.to_json())}\nfedlib-out = {json.dumps(str(Path(out).resolve()))}\n"
            f"fedlib-clients = {n}\nfedlib-timeout = {-1.0 if timeout is None else float(timeout)}\n"
            f"fedlib-max-in-flight = {self.max_in_flight or 0}\n")
        (Path(out) / "flower.json").unlink(missing_ok=True)
        exe = Path(sys.executable).parent / "flwr"
        done = subprocess.run([str(exe), "run", str(app), "fedlib", "--stream", "--run-config", str(overrides)],
                              env=self._env(), capture_output=True, text=True, timeout=run_timeout)
        (self.logs / f"flwr-run-{overrides.stem[11:]}.log").write_text(done.stdout + done.stderr)
        if self.verbose:
            print(done.stdout + done.stderr)
        if done.returncode != 0 or not (Path(out) / "flower.json").exists():
            raise RuntimeError(f"the Flower run failed (flwr run exit {done.returncode}); its output:\n"
                               f"{(done.stdout + done.stderr)[-4000:]}")

    def pids(self) -> list[int]:
        """Every live process of this deployment: those it started and their descendants (found by
        the marker in their environment, which detached children keep)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = (entry / "environ").read_bytes()
            except OSError:
                continue
            if f"FEDLIB_FLOWER_DEPLOYMENT={self._marker}".encode() in env.split(b"\0"):
                try:
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                if state != "Z":
                    found.append(int(entry.name))
        return sorted(found)

    def stop(self) -> None:
        """Stop every process of this deployment (TERM, then KILL after 5 s)."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            pids = set(self.pids()) | {p.pid for p in self._procs if p.poll() is None}
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            t0 = time.monotonic()
            while time.monotonic() - t0 < wait:
                for p in self._procs:
                    p.poll()
                if not self.pids() and all(p.poll() is not None for p in self._procs):
                    break
                time.sleep(0.1)
        for p in self._procs:
            with contextlib.suppress(Exception):
                p.wait(timeout=1)
            p._fedlib_log.close()  # type: ignore[attr-defined]
        self._procs.clear()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


# --------------------------------------------------------------------------------------------
# an example job, side-by-side costs of the engines, and the command line
# --------------------------------------------------------------------------------------------

def example_job(algorithm: str = "fedavg", *, n_clients: int = 4, rounds: int = 3, dataset: str = "uci_digits",
                model: str = "mlp", alpha: float = 0.5, seed: int = 0, eval_every: int = 0, threads: int | None = 1,
                algorithm_kwargs: Mapping | None = None) -> FlowerJob:
    """A ready job: ``algorithm`` on a Dirichlet(``alpha``) split of ``dataset`` (``"uci_digits"``:
    8 x 8 digits; ``"mnist5k"``: 28 x 28) over ``n_clients`` clients, ``model`` (``"mlp"`` or
    ``"cnn"``, fedlib's small CNN), one local epoch of SGD (batch 32, lr 0.05) per round.

    >>> example_job("fedavg", n_clients=2).federation.kwargs["n_clients"]
    2
    """
    size = {"uci_digits": 8, "mnist5k": 28}
    if dataset not in size:
        raise ValueError(f"unknown example dataset {dataset!r}; valid: {', '.join(size)}")
    data: dict = {"name": dataset, **({"size": 8} if dataset == "uci_digits" else {})}
    federation = Call("fedlib.federation:make_federation", {
        "dataset": {"call": "fedlib.data:load_dataset", "kwargs": data}, "n_clients": n_clients, "alpha": alpha,
        "global_test_per_class": 20 if dataset == "uci_digits" else 50, "seed": seed})
    net = Call("fedlib.models:build_model", {"name": model, "in_channels": 1, "n_classes": 10,
                                             "input_size": size[dataset]})
    train = {"call": "fedlib.training:TrainConfig", "kwargs": {"epochs": 1, "batch_size": 32, "lr": 0.05}}
    defaults = {"fedavg": {"train": train}, "ditto": {"train": train, "personal_train": train},
                "fedrep": {"train": train, "head_train": train}, "fedprox": {"train": train}}
    kwargs = dict(algorithm_kwargs) if algorithm_kwargs is not None else defaults.get(algorithm, {})
    return FlowerJob(algorithm, federation, net, {"rounds": rounds, "seed": seed, "eval_every": eval_every}, kwargs,
                     threads=threads)


ENGINE_CHOICES = ("in-process", *ENGINES)
"""What :func:`main` and :func:`engine_costs` run: the in-process loop, or an engine of :data:`ENGINES`."""


def run_job(job: FlowerJob, engine: str, out: str | Path, *, timeout: float | None = None,
            verbose: bool = False) -> FlowerRun:
    """Run ``job`` on ``engine`` (``"in-process"``: :func:`fedlib.loop.run_federated`, with the
    job's threads) and write it into ``out`` as the ServerApp does."""
    if engine not in ENGINE_CHOICES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINE_CHOICES)}")
    folder = Path(out)
    if engine != "in-process":
        return run_flower(job, engine, out=folder, timeout=timeout, verbose=verbose)
    t0 = time.perf_counter()
    if job.threads is not None:
        torch.set_num_threads(job.threads)
    result = run_federated(job.build_algorithm(), job.federation(), job.model_fn(), job.loop_config())
    result.save(folder)
    wire = pd.DataFrame(columns=["round", "client", "direction", "kind", "bytes", "flower_bytes"])
    atomic_write_bytes(folder / "wire.csv", wire.to_csv(index=False).encode())
    atomic_write_bytes(folder / "flower.json", json.dumps({"nodes": {}, "setup_seconds": 0.0,
                                                           "run_seconds": time.perf_counter() - t0}).encode())
    return _read_run(folder, engine, time.perf_counter() - t0)


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree(root: int, marker: str) -> set[int]:
    """``root``, its descendants, and every process whose environment holds ``marker``."""
    parents: dict[int, int] = {}
    found = {root}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text()
            parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
            if marker.encode() in (entry / "environ").read_bytes():
                found.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def measure(command: list[str], *, interval: float = 0.2, env: Mapping[str, str] | None = None) -> dict:
    """Run ``command`` as a process and measure it with everything it starts (descendants, and
    detached processes by a marker in their environment): wall seconds and the peak of their
    summed PSS (proportional set size: a page shared by k processes counts 1/k in each, so the
    sum is the memory they take together), sampled every ``interval`` seconds."""
    marker = f"FEDLIB_MEASURE={uuid.uuid4().hex}"
    full_env = {**os.environ, **(env or {})}
    key, value = marker.split("=")
    full_env[key] = value
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak, processes = 0, 0
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True)
    reader.start()
    while proc.poll() is None:
        pids = _tree(proc.pid, marker)
        peak = max(peak, sum(_pss_kib(p) for p in pids))
        processes = max(processes, len(pids))
        time.sleep(interval)
    reader.join()
    return {"returncode": proc.returncode, "seconds": time.perf_counter() - t0, "peak_pss_mib": peak / 1024,
            "processes": processes, "output": b"".join(output).decode(errors="replace")}


def engine_costs(job: FlowerJob, engines: tuple[str, ...] = ENGINE_CHOICES[:1] + ENGINES[:2], *, folder: str | Path,
                 port: int = 19091) -> pd.DataFrame:
    """Run ``job`` on each engine in a fresh process (``python -m fedlib.engines.flower``), one
    after another, and measure it side by side (:func:`measure`): wall seconds including start-up,
    the mean seconds of a round as the loop timed it (rounds after the first: the first pays
    one-off costs), peak PSS of all processes, the most processes seen at once, and whether the final
    server state and the frame are bit-identical to the in-process run's. Ratios are to
    ``"in-process"`` (which must be first)."""
    if not engines or engines[0] != "in-process":
        raise ValueError(f"engine_costs measures against the in-process run: put 'in-process' first, got {engines}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(job.to_json())
    rows, ref = [], None
    for engine in engines:
        out = folder / engine
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "fedlib.engines.flower", "--engine", engine, "--job", str(folder / "job.json"),
               "--out", str(out), "--port", str(port), "--quiet"]
        m = measure(cmd)
        if m["returncode"] != 0:
            raise RuntimeError(f"the {engine} run failed (exit {m['returncode']}):\n{m['output'][-3000:]}")
        run = _read_run(out, engine, m["seconds"])
        seconds = run.result.seconds[1:] or run.result.seconds
        if ref is None:
            ref = run.result
        same = (list(ref.server.arrays) == list(run.result.server.arrays)
                and all(torch.equal(ref.server.arrays[k], run.result.server.arrays[k]) for k in ref.server.arrays)
                and ref.frame.equals(run.result.frame))
        rows.append({"engine": engine, "wall_s": m["seconds"], "round_s": float(np.mean(seconds)),
                     "setup_s": float(run.info.get("setup_seconds", 0.0)), "peak_pss_mib": m["peak_pss_mib"],
                     "processes": m["processes"], "identical": bool(same),
                     "flower_bytes": int(run.wire["flower_bytes"].sum()) if len(run.wire) else 0,
                     "fedlib_bytes": int(run.result.ledger.total())})
    frame = pd.DataFrame(rows).set_index("engine")
    base = frame.loc["in-process"]
    for col in ("wall_s", "round_s", "peak_pss_mib"):
        frame[f"{col}_ratio"] = frame[col] / base[col]
    return frame


def main(argv: list[str] | None = None) -> int:
    """``python -m fedlib.engines.flower``: run a job on an engine and print what it did."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fedlib.engines.flower",
                                     description="Run a fedlib method on Flower (or in-process) and print its results.")
    parser.add_argument("--engine", choices=ENGINE_CHOICES, default="simulation")
    parser.add_argument("--job", help="a FlowerJob as JSON (default: example_job from the options below)")
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dataset", default="uci_digits", choices=("uci_digits", "mnist5k"))
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    parser.add_argument("--out", default="flower-run", help="the results folder (default: ./flower-run)")
    parser.add_argument("--port", type=int, default=19091, help="the local deployment's SuperLink port")
    parser.add_argument("--timeout", type=float, default=None, help="seconds a round waits for its replies")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    args = parser.parse_args(argv)
    job = (FlowerJob.from_json(Path(args.job).read_text()) if args.job else
           example_job(args.algorithm, n_clients=args.clients, rounds=args.rounds, dataset=args.dataset, model=args.model))
    if args.engine == "deployment":
        # a TERM (e.g. from a benchmark's timeout) unwinds like an error, so the deployment stops its processes
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        n = _clients_of(job)
        if not args.quiet:
            print(f"starting a SuperLink on 127.0.0.1:{args.port} and {n} SuperNodes (insecure mode, loopback only)")
        with LocalDeployment(n, port=args.port) as dep:
            if not args.quiet:
                print(f"running {job.algorithm} for {job.config.get('rounds')} rounds; logs under {dep.logs}")
            run = run_flower(job, "deployment", out=args.out, deployment=dep, timeout=args.timeout)
    else:
        run = run_job(job, args.engine, args.out, timeout=args.timeout)
    if not args.quiet:
        print(f"{args.engine}: {run.seconds:.1f} s in all, rounds {', '.join(f'{s:.2f}' for s in run.result.seconds)} s")
        print("protocol summary:", {k: round(v, 4) for k, v in run.result.summary().items()})
        if len(run.wire):
            print(run.wire.groupby(["direction", "kind"])[["bytes", "flower_bytes"]].sum().to_string())
        print(f"results in {Path(args.out).resolve()}")
    return 0


__all__ = ["CTL", "Call", "ENGINES", "FlowerConversionError", "FlowerJob", "FlowerRun", "FlowerSetupError",
           "FlowerTransport", "LocalDeployment", "LoopbackGrid", "RemoteFederation", "client_app", "flower_bytes", "handshake",
           "has_state", "make_client_app", "make_server_app", "message_to_records", "port_free", "put_state",
           "records_to_message", "run_flower", "server_app", "take_state", "example_job", "engine_costs", "measure", "run_job",
           "main", "ENGINE_CHOICES", "free_port_block"]


if __name__ == "__main__":
    raise SystemExit(main())
