"""Flower's two apps for a fedlib job: a ``ClientApp`` that runs one client per node, and a
``ServerApp`` that runs the one round loop over a :class:`~fedlib.engines.flower.remote.FlowerTransport`.

:func:`make_client_app` and :func:`make_server_app` build them (for a given job, or for the job
that comes in the run config); this module builds no app when imported. The objects a
deployment loads by name are in :mod:`fedlib.engines.flower.entrypoint`.

This module sits above the round loop (the ServerApp calls :func:`fedlib.loop.run_rounds`).
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from flwr.app import ConfigRecord, Context, Message as FlowerMessage, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ...federation import Federation
from ...io import atomic_write_bytes, json_default
from ...loop import run_rounds
from ...messages import State
from ...transport import ClientFailure
from ..inprocess import InProcessTransport
from .job import FlowerJob
from .records import CTL, has_state, put_state, take_state
from .remote import FlowerSetupError, FlowerTransport, handshake

# --------------------------------------------------------------------------------------------
# the node side: a ClientApp whose handlers run one client's hooks
# --------------------------------------------------------------------------------------------

_NODE_CACHE: dict[str, tuple] = {}
"""Per process: job digest -> (algorithm, in-process transport over the federation, federation).
A simulation's Ray workers keep it across messages; a deployment starts a process per message."""


def _node(job: FlowerJob) -> tuple[Any, InProcessTransport, Federation]:
    if job.threads is not None and torch.get_num_threads() != job.threads:
        torch.set_num_threads(job.threads)
    if job.digest not in _NODE_CACHE:
        federation = job.build_federation()
        _NODE_CACHE.clear()  # one job per process at a time
        _NODE_CACHE[job.digest] = (job.build_algorithm(), InProcessTransport(federation, job.model_fn(), job.seed),
                                   federation)
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
                 "description": json.dumps(federation.description, sort_keys=True, default=json_default),
                 "digest": federation.digest()}
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
# the server side: a ServerApp that runs the one loop over the transport
# --------------------------------------------------------------------------------------------

SERVERAPP_ERROR = "serverapp-error.txt"
"""The file a failed ServerApp leaves in its output folder: its exception's traceback (read by
:func:`fedlib.engines.flower.deployment.failure_report`; removed when a run starts)."""


def make_server_app(job: FlowerJob | None = None, out: str | Path | None = None, *, timeout: float | None = None,
                    mirror_states: bool = True, setup_timeout: float = 600.0, stop_after: int | None = None,
                    max_in_flight: int | None = None) -> ServerApp:
    """A Flower ``ServerApp`` that runs ``job`` (or the run config's ``fedlib-job``) through the
    one round loop over a :class:`~fedlib.engines.flower.remote.FlowerTransport`, and writes
    the run into ``out`` (or the run config's ``fedlib-out``): :meth:`fedlib.results.RunResult.save`'s
    files, ``wire.csv`` and ``flower.json`` (nodes, timings). ``setup_timeout``: seconds to wait
    for the nodes to connect and answer the handshake (a deployment's first message starts a
    process on every node, which imports torch and builds the node's data: on a small machine
    with many nodes, minutes). ``stop_after`` stops after that round, as
    :func:`fedlib.loop.run_rounds`'s does (with a checkpoint in the job, a later run resumes)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        t0 = time.perf_counter()
        j = _context_job(job, context)
        folder = Path(out if out is not None else context.run_config["fedlib-out"])
        (folder / SERVERAPP_ERROR).unlink(missing_ok=True)
        threads = torch.get_num_threads()
        try:
            config = j.loop_config()
            n = int(context.run_config.get("fedlib-clients", 0)) or j.n_clients()
            nodes, federation = handshake(grid, j.digest, n, setup_timeout)
            t_setup = time.perf_counter() - t0
            if j.threads is not None:  # the server's arithmetic too (a deployment's ServerApp is a process of its own)
                torch.set_num_threads(j.threads)
            _serve(j, grid, context, folder, config, nodes, federation, t0, t_setup)
        except BaseException:  # the cause, for the command that submitted the run (a deployment's app is a process)
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(folder / SERVERAPP_ERROR, traceback.format_exc().encode())
            raise
        finally:
            torch.set_num_threads(threads)

    def _serve(j, grid, context, folder, config, nodes, federation, t0, t_setup) -> None:
        t_limit = float(context.run_config.get("fedlib-timeout", -1.0)) if timeout is None else timeout
        window = int(context.run_config.get("fedlib-max-in-flight", 0)) or max_in_flight
        transport = FlowerTransport(grid, nodes, federation=federation, model_fn=j.model_fn(), seed=j.seed, job_digest=j.digest,
                                    timeout=None if t_limit < 0 else t_limit, mirror_states=mirror_states,
                                    max_in_flight=window)
        result = run_rounds(j.build_algorithm(), transport, config, checkpoint=j.run_options(folder).checkpoint,
                            stop_after=stop_after)
        result.save(folder)
        atomic_write_bytes(folder / "wire.csv", transport.wire_frame().to_csv(index=False).encode())
        info = {"nodes": {str(k): v for k, v in nodes.items()}, "setup_seconds": t_setup,
                "run_seconds": time.perf_counter() - t0, "job": j.digest}
        atomic_write_bytes(folder / "flower.json", json.dumps(info, indent=1).encode())

    return app


__all__ = ["SERVERAPP_ERROR", "make_client_app", "make_server_app"]
