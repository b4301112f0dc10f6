"""Running a job on Flower's engines: :func:`run_flower`, and :class:`LocalDeployment` (a
SuperLink and one SuperNode per client as processes on this machine).

:func:`run_flower` drives the engines of :data:`ENGINES`: Flower's simulation engine (Ray, in
this process), a local deployment (processes on 127.0.0.1, insecure mode: for loopback only), or
the :class:`~fedlib.engines.flower.loopback.LoopbackGrid` (Flower's messages, no runtime). Each
runs the apps of :mod:`fedlib.engines.flower.apps` and reads back the folder the ServerApp wrote
(:class:`FlowerRun`). A deployment loads the apps by name from :mod:`fedlib.engines.flower.entrypoint`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from flwr.app import Context, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ...results import RunResult
from ...io import load_tensors_json
from .apps import SERVERAPP_ERROR, make_client_app, make_server_app
from .job import FlowerJob
from .loopback import LoopbackGrid
from .remote import FlowerSetupError
from .watchdog import MARKER_VARIABLE, marked_pids

ENGINES = ("simulation", "deployment", "loopback")
"""The engines :func:`run_flower` drives: Flower's two, and
:class:`~fedlib.engines.flower.loopback.LoopbackGrid` (Flower's messages without its runtime,
for tests and teaching)."""


@dataclass
class FlowerRun:
    """What :func:`run_flower` returns: the run, Flower's bytes per message, and timings.

    Attributes
    ----------
    result : the :class:`~fedlib.results.RunResult` (read back from the folder the ServerApp wrote)
    wire : one row per fedlib message with Flower's bytes
        (:meth:`~fedlib.engines.flower.remote.FlowerTransport.wire_frame`)
    engine : ``"simulation"`` or ``"deployment"``
    seconds : wall-clock seconds of the whole call, start-up included
    info : what the ServerApp recorded (nodes, setup and run seconds)
    """

    result: RunResult
    wire: pd.DataFrame
    engine: str
    seconds: float
    info: dict

    @classmethod
    def read(cls, folder: str | Path, engine: str, seconds: float) -> "FlowerRun":
        """The run a ServerApp (or :func:`fedlib.engines.flower.cli.run_job`) wrote into
        ``folder``; a ``RuntimeError`` when it wrote none."""
        folder = Path(folder)
        if not (folder / "flower.json").exists():
            raise RuntimeError(f"the Flower run wrote no results into {folder}: the ServerApp failed (see the log above)")
        return cls(RunResult.load(folder), pd.read_csv(folder / "wire.csv"), engine, seconds,
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
        ``"loopback"`` (:class:`~fedlib.engines.flower.loopback.LoopbackGrid`: Flower's messages, no
        runtime; milliseconds)
    out : the folder the ServerApp writes the run into (default: a temporary one, removed after
        reading it back)
    timeout : seconds a message waits for its client's reply, from when it is sent (``None``: no limit)
    mirror_states : replies carry the clients' states too (needed to checkpoint)
    deployment : a running :class:`LocalDeployment` to submit to (it is left running)
    unresponsive : ``"loopback"`` only: clients whose nodes stop replying after the handshake
        (see :class:`~fedlib.engines.flower.loopback.LoopbackGrid`)
    stop_after : stop after this round (simulation and loopback; with a checkpoint in the job a
        later call resumes, its nodes given back their states from the checkpoint)
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown Flower engine {engine!r}; valid: {', '.join(ENGINES)}")
    if not mirror_states and job.config.get("checkpoint"):
        raise ValueError("a checkpoint needs the clients' states on the server: run with mirror_states=True")
    if not mirror_states and job.config.get("on_nonfinite") == "drop":
        raise ValueError("on_nonfinite='drop' gives a dropped client back its state from before the round, which needs the "
                         "clients' states on the server: run with mirror_states=True (or on_nonfinite='raise')")
    if job.config.get("checkpoint") and out is None and stop_after is not None:
        raise ValueError("a run stopped early (stop_after) with a checkpoint needs an output folder to keep it in: give "
                         "run_flower(out=...) (without it the run's temporary folder, checkpoint included, is removed)")
    n = job.n_clients()
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
        return FlowerRun.read(folder, engine, time.perf_counter() - t0)


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


EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
"""The signals :func:`term_exits` turns into an orderly exit: TERM (a benchmark's timeout), HUP
(a closed terminal, a dropped ssh session) and INT (Ctrl-C)."""


@contextlib.contextmanager
def term_exits() -> Iterator[None]:
    """A TERM, HUP or INT signal (:data:`EXIT_SIGNALS`) unwinds like an error while inside (exit
    status 128 + the signal's number), so a :class:`LocalDeployment` stops its processes on its
    way out; the previous handlers are restored afterwards. Main thread only (Python's signal
    handlers). A KILL, which no handler sees, is the deployment's watchdog's to clean up."""
    previous = {sig: signal.signal(sig, lambda signum, frame: sys.exit(128 + signum)) for sig in EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
serverapp = "fedlib.engines.flower.entrypoint:server_app"
clientapp = "fedlib.engines.flower.entrypoint:client_app"

[tool.flwr.app.config]
fedlib-job = "{}"
fedlib-out = ""
fedlib-clients = 0
fedlib-timeout = -1.0
fedlib-max-in-flight = 0
"""


def failure_report(job: FlowerJob, out: str | Path) -> str:
    """Why a run wrote no results into ``out``, and the round a rerun of ``job`` would start from:
    the ServerApp's error (the traceback it left in ``out``), or that it ended without one (its
    process was killed); the rounds its checkpoint holds, or that it has none.

    Examples
    --------
    >>> import tempfile
    >>> from fedlib.engines.flower import example_job
    >>> with tempfile.TemporaryDirectory() as out:
    ...     print(failure_report(example_job("fedavg", rounds=2), out))
    the ServerApp ended without results and without an error (its process was killed or died); the job has no checkpoint, so a rerun starts from round 1 (give it one: --checkpoint NAME on the command line, or 'checkpoint' in the job's config)
    """
    folder = Path(out)
    error = folder / SERVERAPP_ERROR
    if error.exists():
        cause = f"the ServerApp failed with {error.read_text(errors='replace').strip()[-2000:]}\n(its error: {error})"
    else:
        cause = "the ServerApp ended without results and without an error (its process was killed or died)"
    if job.config.get("checkpoint") is None:
        return (f"{cause}; the job has no checkpoint, so a rerun starts from round 1 (give it one: --checkpoint NAME on the "
                "command line, or 'checkpoint' in the job's config)")
    path = Path(job.run_options(folder).checkpoint)
    if not path.exists():
        return f"{cause}; no round was checkpointed yet ({path}): a rerun starts from round 1"
    try:
        done = int(load_tensors_json(path)[1]["rounds_done"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{cause}; its checkpoint {path} cannot be read ({e})"
    return f"{cause}; checkpoint {path} holds rounds 1..{done}: the same command resumes from round {done + 1}"


class LocalDeployment:
    """Flower's deployment engine on this machine: a SuperLink and ``n_nodes`` SuperNodes, each a
    separate process on 127.0.0.1, in insecure mode (plain HTTP, no TLS, no node
    authentication: for loopback only). Node ``k`` is started with
    ``--node-config 'partition-id=k num-partitions=n_nodes'``.

    Use it as a context manager: every process it started (and every process those started, found
    by a marker in their environment) is stopped on exit, also when the run failed; and a
    watchdog process (:mod:`fedlib.engines.flower.watchdog`) stops them and removes the temporary
    Flower home when the process that entered it dies without exiting it (KILLed, or a signal
    that :func:`term_exits` does not turn into an exit).

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
        gives a starting process 30 s to report (:class:`~fedlib.engines.flower.remote.FlowerTransport`)
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
        self._watchdog: subprocess.Popen | None = None
        self.home: Path | None = None
        self.logs: Path | None = None

    # ---- processes
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        env["FLWR_HOME"] = str(self.home)
        env[MARKER_VARIABLE] = self._marker
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
        # the watchdog first, in a session of its own: its standard input's only writer is this process
        watchdog = [sys.executable, str(Path(__file__).with_name("watchdog.py")), self._marker]
        self._watchdog = subprocess.Popen(watchdog + ([str(self.home)] if self._tmp is not None else []),
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
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
            self.__exit__(None, None, None)
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
        n = job.n_clients()
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
        (Path(out) / SERVERAPP_ERROR).unlink(missing_ok=True)
        exe = Path(sys.executable).parent / "flwr"
        done = subprocess.run([str(exe), "run", str(app), "fedlib", "--stream", "--run-config", str(overrides)],
                              env=self._env(), capture_output=True, text=True, timeout=run_timeout)
        (self.logs / f"flwr-run-{overrides.stem[11:]}.log").write_text(done.stdout + done.stderr)
        if self.verbose:
            print(done.stdout + done.stderr)
        if done.returncode != 0 or not (Path(out) / "flower.json").exists():
            logs = Path(out) / "flower-logs"  # kept: a temporary Flower home goes with the deployment
            with contextlib.suppress(OSError):
                shutil.copytree(self.logs, logs, dirs_exist_ok=True)
            raise RuntimeError(f"the Flower run failed (flwr run exit {done.returncode}): {failure_report(job, out)}; the "
                               f"deployment's logs: {logs}; flwr run's output:\n{(done.stdout + done.stderr)[-3000:]}")

    def pids(self) -> list[int]:
        """Every live process of this deployment: those it started and their descendants (found by
        the marker in their environment, which detached children keep)."""
        return marked_pids(self._marker)

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
        if self._watchdog is not None:  # its input closed, it finds nothing left to stop and exits
            self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=10)
            self._watchdog = None




__all__ = ["ENGINES", "EXIT_SIGNALS", "FlowerRun", "failure_report", "LocalDeployment", "free_port_block", "port_free", "run_flower", "term_exits"]
