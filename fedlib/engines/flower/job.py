"""What a Flower run runs, as JSON: the method, the federation, the model and the loop's settings.

The ServerApp and every node build what they need from one :class:`FlowerJob`: the method by its
registry name and keyword arguments, the federation and the model as calls of importable
functions (:class:`Call`), the loop's settings. :func:`example_job` gives a ready one.

**What a job may call.** A job is data that travels in Flower's run config, so whoever submits a
run could otherwise make every node import and call anything (``os:system``). A call's target
must be one of fedlib's own factories (:data:`BUILTIN_TARGETS`) or one that the *operator* of
this machine lists in the environment variable ``FEDLIB_FLOWER_ALLOW`` (comma-separated
``module:name``; empty by default), never one the job names for itself. Every target of a job is
checked against :func:`allowed_targets` when the job is built or read (before anything is
imported), and again when a call is made. The method must be registered
(``fedlib.algorithms.ALGORITHMS``). The server's ``checkpoint`` is a relative path without
``..``, resolved inside the run's output folder, so a job cannot make the server write elsewhere.

This module sits above the round loop: it builds a :class:`~fedlib.loop.LoopConfig` and a
registered method (``fedlib.algorithms.make_algorithm``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
from pathlib import PurePosixPath, PureWindowsPath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ... import algorithms as _algorithms
from ...algorithms import make_algorithm
from ...federation import Federation
from ...loop import LoopConfig
from ...results import RunResult
from ...run import RunOptions, run_federated
from ...protocol import Algorithm, Event
from ...validation import is_int


BUILTIN_TARGETS = frozenset({
    "fedlib.data:load_dataset",
    "fedlib.federation:make_federation",
    "fedlib.federation:make_rotation_federation",
    "fedlib.federation:one_client_per_domain",
    "fedlib.models:build_model",
    "fedlib.training:TrainConfig",
    "fedlib.cgrl:CGRLConfig",
    "fedlib.tracking:TrackingConfig",
    "fedlib.algorithms.hdcfl:HDCConfig",
})
"""The calls any job may make: fedlib's data sets, federations, models and method configurations."""

_NODE_ONLY = {"fedlib.data:load_dataset": ("root", "download")}
"""Arguments of a built-in target that only a node's operator may set (a path on the node, a download)."""

ALLOW_ENV = "FEDLIB_FLOWER_ALLOW"
"""The environment variable in which the operator of a machine (a SuperNode's, the ServerApp's)
lists further targets a job may call, comma-separated ``module:name`` (e.g. a lab's own data set
loader); unset or empty: none."""


def allowed_targets() -> frozenset[str]:
    """The targets a job may call on this machine: :data:`BUILTIN_TARGETS` and the operator's
    ``FEDLIB_FLOWER_ALLOW`` list (read now, from this process's environment)."""
    extra = {t.strip() for t in os.environ.get(ALLOW_ENV, "").split(",") if t.strip()}
    return BUILTIN_TARGETS | frozenset(extra)


def _check_target(target: object) -> str:
    if not isinstance(target, str):
        raise ValueError(f"a call target is a string 'package.module:name', got {target!r}")
    allowed = allowed_targets()
    if target not in allowed:
        raise ValueError(
            f"call target {target!r} is not allowed on this machine; nothing was imported. A job may call "
            f"fedlib's own factories ({', '.join(sorted(BUILTIN_TARGETS))}) and what this machine's operator lists "
            f"in {ALLOW_ENV} (comma-separated 'module:name'; now: {', '.join(sorted(allowed - BUILTIN_TARGETS)) or 'none'})"
        )
    return target


def check_targets(value: Any, where: str = "the job") -> None:
    """Check, before anything is imported, every call and partial nested in ``value`` (a job's
    JSON data): each is ``{"call" or "partial": target, "kwargs": {...}}`` with an allowed target
    (:func:`allowed_targets`); a ``ValueError`` names the first that is not."""
    if isinstance(value, Call):
        value = value.to_dict()
    if isinstance(value, Mapping):
        keys = set(value)
        if "call" in keys or "partial" in keys:
            kind = "call" if "call" in keys else "partial"
            if keys - {kind, "kwargs"}:
                raise ValueError(f"a {kind} in {where} is a dict {{'{kind}': 'module:name', 'kwargs': {{...}}}}, got keys "
                                 f"{sorted(keys)}")
            _check_target(value[kind])
            kwargs = value.get("kwargs", {})
            if not isinstance(kwargs, Mapping):
                raise ValueError(f"the kwargs of {value[kind]!r} in {where} must be a dict, got {kwargs!r}")
            bad = sorted(set(_NODE_ONLY.get(value[kind], ())) & set(kwargs))
            if bad:
                raise ValueError(
                    f"{value[kind]} in {where} may not be given {bad}: a job may not name files on a node nor make it "
                    "download; a node whose operator has the files allows a loader of them (FEDLIB_FLOWER_ALLOW) that "
                    "reads the node's own path"
                )
            check_targets(kwargs, where)
            return
        for v in value.values():
            check_targets(v, where)
    elif isinstance(value, (list, tuple)):
        for v in value:
            check_targets(v, where)


def _check_checkpoint(path: object) -> str:
    """A job's checkpoint: a relative path without ``..`` (resolved inside the run's output folder)."""
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"a job's checkpoint must be a relative file path (a string), got {path!r}")
    posix, windows = PurePosixPath(path), PureWindowsPath(path)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or ".." in posix.parts or ".." in windows.parts:
        raise ValueError(f"a job's checkpoint must be a relative path inside the run's output folder (no '..', not "
                         f"absolute), got {path!r}; e.g. 'checkpoint.pt'")
    if posix.as_posix() in _RESERVED:
        raise ValueError(f"a job's checkpoint may not be named {path!r}: the run writes its results under that name "
                         f"({', '.join(sorted(_RESERVED))}); e.g. 'checkpoint.pt'")
    return path


_RESERVED = frozenset({"frame.csv", "ledger.csv", "state.pt", "manifest.json", "wire.csv", "flower.json",
                       "serverapp-error.txt", ".lock"})
"""The files a run's output folder holds (:meth:`fedlib.results.RunResult.save`, the ServerApp): no checkpoint takes their names."""


@dataclass(frozen=True)
class Call:
    """A call of an importable function, as data: ``target`` is ``"package.module:name"``;
    ``kwargs`` may hold further calls as ``{"call": ..., "kwargs": ...}`` dicts, made first, and
    functions with bound arguments (e.g. a model factory) as ``{"partial": ..., "kwargs": ...}``.

    >>> Call("fedlib.data:load_dataset", {"name": "uci"}).to_dict()
    {'call': 'fedlib.data:load_dataset', 'kwargs': {'name': 'uci'}}
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
        """The function ``target`` names, imported once the target is found allowed
        (:func:`allowed_targets`; a ``ValueError`` otherwise, before any import)."""
        _check_target(self.target)
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


def _has_call(value: Any) -> bool:
    if isinstance(value, Call):
        return True
    if isinstance(value, Mapping):
        return "call" in value or "partial" in value or any(_has_call(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_call(v) for v in value)
    return False


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
                "f1_class", "evaluate_last", "eval_clients", "min_replies", "min_reply_share")
_RUN_FIELDS = ("checkpoint",)
"""The run options a job may set (:class:`~fedlib.run.RunOptions`): the server's checkpoint."""


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
    config : the :class:`~fedlib.loop.LoopConfig` settings (rounds, seed, ...; ``events`` as dicts) and
        the server's ``checkpoint`` (a :class:`~fedlib.run.RunOptions` setting)
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
        registered = _algorithms.ALGORITHMS  # every method imported: only now, when a job is built
        if self.algorithm not in registered:
            raise ValueError(f"unknown method {self.algorithm!r} in a Flower job; valid: {', '.join(sorted(registered))}")
        for name in ("federation", "model"):
            if not isinstance(getattr(self, name), Call):
                raise ValueError(f"a Flower job's {name} must be a Call, got {getattr(self, name)!r}")
        if not isinstance(self.config, Mapping) or not isinstance(self.algorithm_kwargs, Mapping):
            raise ValueError("a Flower job's config and algorithm_kwargs must be dicts")
        bad = sorted(set(self.config) - set(_LOOP_FIELDS) - set(_RUN_FIELDS))
        if bad:
            raise ValueError(f"unknown loop setting(s) {bad} in a Flower job; valid: {', '.join(_LOOP_FIELDS + _RUN_FIELDS)}")
        check_targets(self.federation, "the job's federation")
        check_targets(self.model, "the job's model")
        check_targets(self.algorithm_kwargs, "the job's algorithm_kwargs")
        if any(isinstance(v, (Mapping, list, tuple, Call)) and _has_call(v) for v in self.config.values()):
            raise ValueError("a Flower job's config holds settings only; no call may be nested in it")
        if self.config.get("checkpoint") is not None:
            _check_checkpoint(self.config["checkpoint"])
        try:
            self.loop_config()  # the loop's own checks (a seed of 1.7, rounds of 2.5, ...) before anything reads them
        except TypeError as err:  # an event with other keys than round, client, kind
            raise ValueError(f"a Flower job's config: {err}; an event is {{'round': r, 'client': k, 'kind': 'leave'|'join'}}") from None
        if "n_clients" in self.federation.kwargs and not (is_int(self.federation.kwargs["n_clients"])
                                                           and self.federation.kwargs["n_clients"] >= 1):
            raise ValueError(f"the job's federation n_clients must be an int >= 1, got {self.federation.kwargs['n_clients']!r}")
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
        """The job a JSON text holds, checked (every call target allowed on this machine, the method
        registered, the settings known) before anything is imported."""
        try:
            d = json.loads(text)
        except (TypeError, ValueError) as err:
            raise ValueError(f"a Flower job is a JSON object; this text is not JSON: {err}") from None
        missing = [k for k in ("algorithm", "federation", "model") if not isinstance(d, Mapping) or k not in d]
        if missing:
            raise ValueError(f"a Flower job needs the keys algorithm, federation and model; missing {missing}")
        bad = sorted(set(d) - {"algorithm", "federation", "model", "config", "algorithm_kwargs", "threads"})
        if bad:
            raise ValueError(f"unknown key(s) {bad} in a Flower job; valid: algorithm, federation, model, config, "
                             "algorithm_kwargs, threads")
        if not isinstance(d["algorithm"], str):
            raise ValueError(f"a Flower job's algorithm is a registered method's name (a string), got {d['algorithm']!r}")
        for key in ("federation", "model"):
            check_targets(d[key], f"the job's {key}")
        check_targets(d.get("algorithm_kwargs", {}), "the job's algorithm_kwargs")
        return cls(d["algorithm"], Call.from_dict(d["federation"]), Call.from_dict(d["model"]), d.get("config", {}),
                   d.get("algorithm_kwargs", {}), d.get("threads"))

    @property
    def digest(self) -> str:
        """A short digest of the job (server and nodes check they run the same one)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def seed(self) -> int:
        """The run seed: ``config["seed"]``, or :class:`~fedlib.loop.LoopConfig`'s default."""
        return int(self.config.get("seed", LoopConfig().seed))

    def n_clients(self) -> int:
        """The federation's number of clients, read from its call's ``n_clients`` argument
        (without building it); a ``ValueError`` when the call has none."""
        kwargs = self.federation.kwargs
        if "n_clients" in kwargs:
            return int(kwargs["n_clients"])
        raise ValueError(f"say how many clients the job's federation has: the federation call {self.federation.target} "
                         "has no n_clients argument (run_flower(n_clients=...))")

    def loop_config(self) -> LoopConfig:
        """The loop's settings as a :class:`~fedlib.loop.LoopConfig` (``events`` made
        :class:`~fedlib.protocol.Event` objects)."""
        cfg = {k: v for k, v in self.config.items() if k in _LOOP_FIELDS}
        cfg["events"] = tuple(Event(**e) if isinstance(e, Mapping) else e for e in cfg.get("events", ()))
        return LoopConfig(**cfg)

    def run_options(self, folder: str | os.PathLike | None = None) -> RunOptions:
        """The server's :class:`~fedlib.run.RunOptions`: the job's ``checkpoint``, if any,
        inside ``folder`` (the run's output folder; ``None``: relative to the working folder, as
        for the in-process reference on one's own machine)."""
        ckpt = self.config.get("checkpoint")
        if ckpt is None:
            return RunOptions()
        return RunOptions(checkpoint=str(ckpt if folder is None else os.path.join(folder, _check_checkpoint(ckpt))))

    def run_in_process(self, folder: str | os.PathLike | None = None) -> RunResult:
        """The job run by the in-process loop (:func:`fedlib.run.run_federated`): the reference
        that every Flower engine equals bit for bit (with the same torch threads); its checkpoint,
        if any, inside ``folder`` (:meth:`run_options`)."""
        return run_federated(self.build_algorithm(), self.build_federation(), self.model_fn(), self.loop_config(),
                             self.run_options(folder))

    def build_algorithm(self) -> Algorithm:
        """The method: ``make_algorithm(algorithm, **algorithm_kwargs)``, nested calls made."""
        return make_algorithm(self.algorithm, **_resolve(self.algorithm_kwargs))

    def model_fn(self) -> Callable[[], torch.nn.Module]:
        """The architecture's factory: the model call with its keyword arguments bound."""
        return self.model.partial()

    def build_federation(self) -> Federation:
        """The federation the federation call makes, checked to be a
        :class:`~fedlib.federation.Federation` (``TypeError`` otherwise)."""
        federation = self.federation()
        if not isinstance(federation, Federation):
            raise TypeError(f"the job's federation call {self.federation.target} returned a {type(federation).__name__}, "
                            "not a fedlib Federation")
        return federation


def example_job(algorithm: str = "fedavg", *, n_clients: int = 4, rounds: int = 3, dataset: str = "uci",
                model: str = "mlp", alpha: float = 0.5, seed: int = 0, eval_every: int = 0, threads: int | None = 1,
                algorithm_kwargs: Mapping | None = None) -> FlowerJob:
    """A ready job: ``algorithm`` on a Dirichlet(``alpha``) split of ``dataset`` (``"uci"``:
    8 x 8 digits; ``"mnist5k"``: 28 x 28) over ``n_clients`` clients, ``model`` (``"mlp"`` or
    ``"cnn"``, fedlib's small CNN), one local epoch of SGD (batch 32, lr 0.05) per round.

    >>> example_job("fedavg", n_clients=2).federation.kwargs["n_clients"]
    2
    """
    size = {"uci": 8, "mnist5k": 28}
    if dataset not in size:
        raise ValueError(f"unknown example dataset {dataset!r}; valid: {', '.join(size)}")
    data: dict = {"name": dataset, **({"size": 8} if dataset == "uci" else {})}
    federation = Call("fedlib.federation:make_federation", {
        "dataset": {"call": "fedlib.data:load_dataset", "kwargs": data}, "n_clients": n_clients, "alpha": alpha,
        "global_test_per_class": 20 if dataset == "uci" else 50, "seed": seed})
    net = Call("fedlib.models:build_model", {"name": model, "in_channels": 1, "n_classes": 10,
                                             "input_size": size[dataset]})
    train = {"call": "fedlib.training:TrainConfig", "kwargs": {"epochs": 1, "batch_size": 32, "lr": 0.05}}
    defaults = {"fedavg": {"train": train}, "ditto": {"train": train, "personal_train": train},
                "fedrep": {"train": train, "head_train": train}, "fedprox": {"train": train}}
    kwargs = dict(algorithm_kwargs) if algorithm_kwargs is not None else defaults.get(algorithm, {})
    return FlowerJob(algorithm, federation, net, {"rounds": rounds, "seed": seed, "eval_every": eval_every}, kwargs,
                     threads=threads)


__all__ = ["ALLOW_ENV", "BUILTIN_TARGETS", "Call", "FlowerJob", "allowed_targets", "check_targets", "example_job"]
