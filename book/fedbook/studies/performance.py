"""The performance chapter's procedures (*Performance: a round at cross-device scale, and clients
trained together*, ``notebooks/performance.py``): its grids of measurements as studies
(``fedbook.study``) over :mod:`fedbook.benchmarks`, and the tables, figures and numbers its
prose reads.

Two grids of measurements, one seed each:

- **a round's cost** (:func:`round_cell`): one FedAvg round per model × number of clients ×
  aggregation (:func:`fedbook.benchmarks.round_cost`, each in a fresh process at the book
  profile);
- **sequential against vectorized local training** (:func:`speed_cell`): per workload, and for
  the linear head per number of clients stacked (:func:`fedbook.benchmarks.local_training_speed`).

They are measurements of the machine that builds the book: the chapter runs them in its own
process, one after another (one worker), and keeps no cache of them. The loop's own overhead is a
single measurement (:func:`fedbook.benchmarks.loop_overhead`), not a grid.

This module sits with :mod:`fedbook.benchmarks` in the measurements layer (it calls it).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import torch
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from fedbook.benchmarks import LoopOverhead, RoundCost, local_training_speed, round_cost, round_scaling
from fedlib.algorithms import registered

WORKLOAD_TEXT = {"linear": "linear head on 512-d frozen embeddings", "mlp_digits": "MLP 64-64-10, UCI digits 8 × 8",
                 "mlp": "MLP 784-256-128-10, MNIST-5k", "cnn": "small CNN (width 32), MNIST-5k 28 × 28"}
"""How the page names each workload of :data:`fedbook.benchmarks.WORKLOADS`."""
MODEL_TEXT = {"cnn": "small CNN", "mlp": "MLP"}
"""How the page names the loop-overhead check's model."""


def round_cell(seed: int, model: str, n_clients: int, aggregation: str, *, fresh_process: bool = True) -> pd.DataFrame:
    """One measured FedAvg round (:func:`fedbook.benchmarks.round_cost`): one row of the
    :class:`~fedbook.benchmarks.RoundCost`'s fields."""
    cost = round_cost(n_clients, model, aggregation, seed=seed, fresh_process=fresh_process)
    return pd.DataFrame([dataclasses.asdict(cost)])


def speed_cell(seed: int, workload: str, n_clients: int = 20, *, repeats: int = 5) -> pd.DataFrame:
    """One round's local training of ``n_clients`` clients on ``workload``, sequential against
    vectorized (:func:`fedbook.benchmarks.local_training_speed`, ``repeats`` alternating runs
    each): one row of the :class:`~fedbook.benchmarks.SpeedUp`'s fields and its ``ratio``."""
    r = local_training_speed(workload, n_clients=n_clients, repeats=repeats, seed=seed)
    return pd.DataFrame([{**dataclasses.asdict(r), "ratio": r.ratio}])


def costs_of(frame: pd.DataFrame) -> list[RoundCost]:
    """The rounds of :func:`round_cell`'s study as :class:`~fedbook.benchmarks.RoundCost` objects, in its order."""
    names = [f.name for f in dataclasses.fields(RoundCost)]
    return [RoundCost(**{k: r[k] for k in names}) for r in frame.to_dict("records")]


def overhead_table(ovh: LoopOverhead) -> pd.DataFrame:
    """The loop-overhead check as the page shows it: the seconds of fedlib's loop and of the hand-written one."""
    return pd.DataFrame([{"loop": "fedlib (run_federated)", "seconds": ovh.fedlib_s},
                         {"loop": "hand-written PyTorch", "seconds": ovh.hand_s}])


def cost_table(costs: Sequence[RoundCost]) -> pd.DataFrame:
    """The measured rounds as the page shows them: model, clients, aggregation, parameters, the
    memory before the round, its peak and what the round added (MiB), the milliseconds per client."""
    return pd.DataFrame([{"model": c.model, "clients": c.n_clients, "aggregation": c.aggregation,
                          "parameters": c.n_parameters, "baseline (MiB)": c.baseline_mib, "peak (MiB)": c.peak_mib,
                          "added by the round (MiB)": c.round_mib, "ms per client": c.ms_per_client} for c in costs])


def _log_clients(ax, clients: Sequence[int], minor: bool = True) -> None:
    ax.set_xscale("log")
    ax.set_xticks(clients)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    if minor:
        ax.xaxis.set_minor_locator(LogLocator(subs="auto"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("clients in the round")


def plot_costs(table: pd.DataFrame, clients: Sequence[int]) -> plt.Figure:
    """Peak memory (left) and time per client (right) of a round against its clients, one line per
    model and aggregation (solid: the fold, dashed: the list), on a logarithmic client axis.
    ``table``: :func:`cost_table`."""
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    for (model, aggregation), part in table.groupby(["model", "aggregation"], sort=False):
        style = dict(marker="o", linestyle="-" if aggregation == "fold" else "--", label=f"{model}, {aggregation}")
        ax_mem.plot(part["clients"], part["peak (MiB)"], **style)
        ax_time.plot(part["clients"], part["ms per client"], **style)
    for ax, label in ((ax_mem, "peak resident memory (MiB)"), (ax_time, "time per client (ms)")):
        _log_clients(ax, clients)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    ax_mem.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def speed_table(speed: pd.DataFrame) -> pd.DataFrame:
    """The workloads' speed-ups as the page shows them (:func:`speed_cell`'s study)."""
    return pd.DataFrame({"workload": speed["workload"].map(WORKLOAD_TEXT), "parameters": speed["n_parameters"],
                         "sequential (s)": speed["sequential_s"], "vectorized (s)": speed["vectorized_s"],
                         "speed-up": speed["ratio"], "max difference": speed["max_abs_diff"]})


def plot_stack(stack: pd.DataFrame) -> plt.Figure:
    """The linear head's speed-up against the clients stacked in the round (a dashed line at 1: no
    gain), on a logarithmic client axis. ``stack``: :func:`speed_cell`'s study over ``n_clients``."""
    clients = stack["n_clients"].tolist()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.plot(clients, stack["ratio"].tolist(), marker="o", label="linear head")
    ax.axhline(1.0, color="0.5", linestyle="--", linewidth=1)
    _log_clients(ax, clients, minor=False)
    ax.set_ylabel("speed-up (times faster)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def numbers(ovh: LoopOverhead, costs: Sequence[RoundCost], speed: pd.DataFrame, stack: pd.DataFrame,
            settings: Any) -> dict[str, Any]:
    """Every number the page's prose reads, by its glued key (``perf_`` prefix; a key that names a
    measurement of this machine says ``measured``, ``time`` or ``seconds``): the loop's overhead,
    the round's scaling from the fewest to the most clients (:func:`fedbook.benchmarks.round_scaling`
    of the first model), which methods fold and stack, and the vectorized speed-ups.
    ``settings``: the page's (:func:`fedbook.page.setup`: ``models``, ``fresh_process``,
    ``overhead``, ``repeats``)."""
    P = settings
    scale = round_scaling(costs, P.models[0])
    rc, speed_sig = inspect.signature(round_cost).parameters, inspect.signature(local_training_speed).parameters
    ratios = dict(zip(speed["workload"], speed["ratio"].astype(float)))
    best, worst = max(ratios, key=ratios.get), min(ratios, key=ratios.get)
    lo, hi = float(stack["ratio"].iloc[0]), float(stack["ratio"].iloc[-1])
    return {
        "perf_ovh_clients": ovh.n_clients, "perf_ovh_model": MODEL_TEXT[ovh.model], "perf_ovh_rounds": ovh.rounds,
        "perf_ovh_repeats": P.overhead["repeats"], "perf_ovh_ratio_measured": ovh.ratio,
        "perf_ovh_identical": "are identical bit for bit" if ovh.identical else
        "differ (a defect: the tests require equality)",
        "perf_model": scale.model, "perf_small": scale.small, "perf_large": f"{scale.large:,}",
        "perf_fold_growth_measured": scale.fold_growth, "perf_list_growth_measured": scale.list_growth,
        "perf_time_ratio": scale.time_ratio,
        "perf_time_reading": "flat, so a round's total time grows linearly with its clients"
        if 0.8 <= scale.time_ratio <= 1.25 else
        "lower, because a round's fixed costs (the first client's warm-up, the server's finish) are spread over "
        "more clients; the total grows no faster than linearly" if scale.time_ratio < 0.8 else
        "higher: a round's total time grows faster than its number of clients here",
        "perf_kept_measured": scale.kept_mib, "perf_params": f"{scale.n_parameters:,}",
        "perf_list_methods": ", ".join(registered(streams=False)),
        "perf_isolation": "measured each round in a fresh process" if P.fresh_process else
        "(the smoke profile) measured every round in the chapter's own process, so its peaks are not the rounds' alone",
        "perf_per_client": rc["min_per_client"].default, "perf_round_threads": rc["threads"].default,
        "perf_n_fold": len(registered(streams=True)),
        "perf_vec_methods": ", ".join(registered(stacks=True, bare=True)),
        "perf_seq_methods": ", ".join(registered(stacks=False, bare=True)),
        "perf_vec_clients": int(speed["n_clients"].iloc[0]), "perf_vec_epochs": speed_sig["epochs"].default,
        "perf_vec_batch": speed_sig["batch_size"].default, "perf_vec_threads": torch.get_num_threads(),
        "perf_vec_repeats": P.repeats, "perf_vec_best_measured": WORKLOAD_TEXT[best],
        "perf_vec_best_ratio_measured": ratios[best], "perf_vec_worst_measured": WORKLOAD_TEXT[worst],
        "perf_vec_worst_ratio_measured": ratios[worst],
        "perf_vec_worst_reading_measured": "slower than one client after another" if ratios[worst] < 1 else
        "barely faster" if ratios[worst] < 1.3 else "still faster",
        "perf_vec_maxdiff": float(speed["max_abs_diff"].max()),
        "perf_vec_stack_lo": int(stack["n_clients"].iloc[0]), "perf_vec_stack_lo_ratio_measured": lo,
        "perf_vec_stack_hi": int(stack["n_clients"].iloc[-1]), "perf_vec_stack_hi_ratio_measured": hi,
        "perf_vec_cnn_reading_measured": "" if "cnn" not in ratios else
        f": stacked, the small CNN trains {ratios['cnn']:.2f} times as fast as one client after another",
        "perf_cores": os.cpu_count(),
        "perf_vec_stack_reading_measured": "grows" if hi > 1.1 * lo else "falls" if hi < lo / 1.1 else
        "stays about the same",
    }



__all__ = ["MODEL_TEXT", "WORKLOAD_TEXT", "cost_table", "costs_of", "numbers", "overhead_table", "plot_costs",
           "plot_stack", "round_cell", "speed_cell", "speed_table"]
