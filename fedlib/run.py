"""Running a method on a federation: the entry point that builds a transport and runs the loop.

:func:`run_federated` is what most code calls: it builds the engine that
``RunOptions.execution`` names over the federation and the model (the clients in this process,
one after another or stacked: :mod:`fedlib.engines`) and runs the one round loop
(:func:`fedlib.loop.run_rounds`) over it, handing the loop what it needs of :class:`RunOptions`
(how a run is executed and kept: the engine, a checkpoint, a progress bar, where client states
live, what else to keep; none of which changes a result beyond the float32 rounding of clients
trained stacked). :func:`evaluate_deployment` evaluates another deployment rule on a finished run
the same way. This module sits above both the loop and the engines; the loop itself imports no
engine.

>>> import functools
>>> from fedlib.algorithms import FedAvg
>>> from fedlib.data import make_gaussian_mixture
>>> from fedlib.federation import make_federation
>>> from fedlib.loop import LoopConfig
>>> from fedlib.models import build_model
>>> ds = make_gaussian_mixture(n_per_class=20, n_classes=3, dim=16, seed=0).dataset
>>> fed = make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=5, seed=0)
>>> model_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,))
>>> run = run_federated(FedAvg(), fed, model_fn, LoopConfig(rounds=2))
>>> run.rounds_done, sorted(run.per_client().index)
(2, [0, 1, 2])
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

import pandas as pd
import torch

from .engines.inprocess import InProcessTransport
from .engines.vectorized import DEFAULT_MEMORY_BUDGET, VectorizedTransport
from .federation import Federation
from .loop import LoopConfig, evaluate_result, run_rounds
from .messages import State
from .protocol import Algorithm
from .results import RunResult
from .store import STATE_STORES
from .transport import Transport
from .validation import is_int

EXECUTIONS = ("sequential", "vectorized")
"""How a round's sampled clients train (``RunOptions.execution``): one after another, or stacked."""


@dataclass(frozen=True)
class RunOptions:
    """How a run is executed and kept: none of these changes a result, so a checkpoint's
    fingerprint leaves them out (except that clients trained stacked agree with sequential
    training to float32 rounding only).

    Attributes
    ----------
    execution : how the sampled clients train when :func:`fedlib.run.run_federated` builds the
        transport: ``"sequential"`` (default, one after another) or ``"vectorized"`` (stacked into
        one batched computation, :class:`fedlib.engines.vectorized.VectorizedTransport`; equal to
        sequential to float32 rounding, and methods without a
        :class:`~fedlib.training.LocalProgram` still train sequentially)
    memory_budget : bytes a chunk of stacked clients may take (``"vectorized"`` only; ``None``: the
        engine's default, :data:`fedlib.engines.vectorized.DEFAULT_MEMORY_BUDGET`)
    checkpoint : a file path; when given the run state is saved after every round and a run
        started with an existing checkpoint resumes from it
    progress : show a progress bar over rounds with the current metrics
    states : where the clients' persistent states live, ``"memory"`` (default) or ``"disk"``
        (one file per client in ``states_dir``: :mod:`fedlib.store`); the results are the same
    states_dir : the folder of the ``"disk"`` store (it must hold no state files yet; the store locks it
        while it lives, so that another process's run refuses it: :class:`fedlib.store.DiskStates`)
    keep_predictions : keep every evaluated client's predicted labels of the last evaluated
        round in :attr:`fedlib.results.RunResult.predictions` (to score them again, e.g. under another rare
        threshold: :func:`fedlib.metrics.rescore`)
    observe : called after every round this call runs with ``(round, server state, client states)``
        (the latter the mapping ``client -> State``), e.g. to record the run's trajectory; it must
        not change them. A run resumed from a checkpoint calls it for the rounds it runs, not for
        those the checkpoint holds
    """

    execution: str = "sequential"
    memory_budget: int | None = None
    checkpoint: str | None = None
    progress: bool = False
    states: str = "memory"
    states_dir: str | None = None
    keep_predictions: bool = False
    observe: Callable[[int, State, MutableMapping[int, State]], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.states not in STATE_STORES:
            raise ValueError(f"unknown states {self.states!r}; valid: {', '.join(STATE_STORES)}")
        if self.execution not in EXECUTIONS:
            raise ValueError(f"unknown execution {self.execution!r}; valid: {', '.join(EXECUTIONS)}")
        if self.memory_budget is not None and not (is_int(self.memory_budget) and self.memory_budget >= 1):
            raise ValueError(f"memory_budget must be None (the engine's default) or a positive number of bytes, "
                             f"got {self.memory_budget!r}")
        if self.states == "disk" and not self.states_dir:
            raise ValueError("states='disk' needs states_dir, the folder of the client state files")
        if self.observe is not None and not callable(self.observe):
            raise ValueError(f"observe must be None or a callable (round, server state, client states), got {self.observe!r}")




def make_transport(federation: Federation, model_fn: Callable[[], torch.nn.Module], seed: int,
                   options: RunOptions = RunOptions()) -> Transport:
    """The engine ``options.execution`` names over ``federation``, with the run's ``seed``:
    :class:`~fedlib.engines.inprocess.InProcessTransport` (``"sequential"``) or
    :class:`~fedlib.engines.vectorized.VectorizedTransport` (``"vectorized"``)."""
    if options.execution == "vectorized":
        budget = DEFAULT_MEMORY_BUDGET if options.memory_budget is None else options.memory_budget
        return VectorizedTransport(federation, model_fn, seed, memory_budget=int(budget))
    return InProcessTransport(federation, model_fn, seed)


def _checked(transport: Transport, federation: Federation) -> Transport:
    if transport.n_clients != federation.n_clients:
        raise ValueError(f"the transport carries {transport.n_clients} clients, but the federation has "
                         f"{federation.n_clients}: build the transport over this federation")
    return transport


def run_federated(
    algorithm: Algorithm,
    federation: Federation,
    model_fn: Callable[[], torch.nn.Module],
    config: LoopConfig = LoopConfig(),
    options: RunOptions = RunOptions(),
    *,
    stop_after: int | None = None,
    transport: Transport | None = None,
) -> RunResult:
    """Run ``algorithm`` on ``federation`` for ``config.rounds`` rounds (:func:`fedlib.loop.run_rounds`).

    Parameters
    ----------
    model_fn : builds the architecture (e.g. ``functools.partial(build_model, "cnn", ...)``, or a
        :class:`~fedlib.models.ClientArchitectures` for clients of different architectures); the
        initial weights are drawn under a stream derived from ``config.seed``, so the same seed
        gives the same model whatever the caller's RNG state
    config : what the run computes (:class:`fedlib.loop.LoopConfig`)
    options : how it is run and kept (:class:`RunOptions`: the engine, a checkpoint, ...)
    stop_after : stop after this round (as if interrupted); with ``options.checkpoint`` the run
        can be resumed by calling again without it
    transport : a transport built by the caller over ``federation`` (e.g. one kept to reuse its
        workspace); default: the one ``options.execution`` names (:func:`make_transport`)

    Returns
    -------
    fedlib.results.RunResult
    """
    if transport is None:
        transport = make_transport(federation, model_fn, config.seed, options)
    elif options.execution != "sequential" or options.memory_budget is not None:
        raise ValueError(f"RunOptions(execution={options.execution!r}, memory_budget={options.memory_budget!r}) choose "
                         f"the engine, but a transport ({transport.name}) was given: give one or the other")
    return run_rounds(algorithm, _checked(transport, federation), config, checkpoint=options.checkpoint, states=options.states,
                      states_dir=options.states_dir, progress=options.progress, keep_predictions=options.keep_predictions,
                      observe=options.observe, stop_after=stop_after)


def evaluate_deployment(
    algorithm: Algorithm,
    result: RunResult,
    federation: Federation,
    model_fn: Callable[[], torch.nn.Module],
    config: LoopConfig = LoopConfig(),
    *,
    transport: Transport | None = None,
    predictions: dict | None = None,
) -> pd.DataFrame:
    """Evaluate another deployment rule on a finished run's final server state.

    For example, FedAvg-FT's deployment on a FedAvg run: the training is the same, only the
    ``deploy`` hook differs, so there is no need to train twice. Every registered client
    (:attr:`fedlib.results.RunResult.registered`) is evaluated in this process; the messages are not
    recorded in the run's ledger. ``predictions`` (a dict), when given, receives every client's
    predicted labels ``{client: (local test, global test)}``. Returns the tidy rows for the last
    round, like ``result.frame`` (:func:`fedlib.loop.evaluate_result`).
    """
    transport = InProcessTransport(federation, model_fn, config.seed) if transport is None else transport
    return evaluate_result(algorithm, result, _checked(transport, federation), config, predictions=predictions)


__all__ = ["EXECUTIONS", "RunOptions", "evaluate_deployment", "make_transport", "run_federated"]
