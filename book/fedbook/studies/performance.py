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

The page's last section reads the build itself: what deciding every open claim would cost
(:func:`seed_costs` from the experiments chapters' records and study caches, :func:`confirm_costs`
from a confirmatory plan, :func:`decided_cost` for the CPU per decided claim).

This module sits with :mod:`fedbook.benchmarks` in the measurements layer (it calls it).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import torch
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from fedbook.benchmarks import LoopOverhead, RoundCost, local_training_speed, round_cost, round_scaling
from fedbook.claims import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE
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


EXPERIMENTS_STUDIES: dict[str, dict[str, tuple[str, ...]]] = {
    "mpt_experiments": {"figure": ("dataset", "fraction"), "table": ("dataset", "fraction"),
                        "bytes": ("dataset", "fraction"), "exercise_drift": ("fraction",),
                        "exercise_fractions": ("fraction",)},
    "ggeur_experiments": {"label": ("beta",), "domain": (), "ex1": ("beta",), "ex2": ("beta", "total"), "ex3": ()},
    "fedgrc_experiments": {"pilot": ("alpha",), "training": ("alpha",), "ablation": ("variant",), "rotated": ("alpha",)},
    "hdcfl_experiments": {"main": ("setting",)},
    "cosmos_experiments": {"pilot": ("lr", "method"), "server_pilot": ("lr", "steps"), "main": (), "homogeneous": (),
                           "local": (), "mixture": ("mixture",), "alpha": ("alpha",), "sweep": ("setting",),
                           "exercises": ()},
}
"""Each experiments chapter's studies (:class:`fedbook.study.Study` names, the folders of the study
cache) and the settings of their grids: two chapters may name a study alike (``main``, ``pilot``),
so a cached cell belongs to a chapter by its study's name and its settings together."""

SEED_COST_COLUMNS = ("chapter", "seconds", "seeds", "cells_per_seed", "per_seed", "fixed", "cells")
"""The columns of :func:`seed_costs`."""


def _chapter_cells(cache: Path, studies: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The cached cells of a chapter's studies (:data:`EXPERIMENTS_STUDIES`), the newest file of
    each study, setting and seed (an older file is an earlier version of the code's)."""
    newest: dict[tuple, tuple[float, dict]] = {}
    for study, settings in studies.items():
        for path in sorted((cache / study).glob("*.json")):
            record = json.loads(path.read_text())
            cell = record.get("cell", {})
            if set(cell) != {*settings, "seed"}:
                continue
            ident = (study, json.dumps(cell, sort_keys=True, default=str))
            mtime = path.stat().st_mtime
            if ident not in newest or mtime > newest[ident][0]:
                newest[ident] = (mtime, {"study": study, "seed": int(cell["seed"]), "seconds": float(record["seconds"])})
    return [cell for _, cell in newest.values()]


def seed_costs(records: str | os.PathLike, chapters: Mapping[str, Mapping[str, Sequence[str]]] = EXPERIMENTS_STUDIES
               ) -> tuple[pd.DataFrame, list[str]]:
    r"""What a seed of each experiments chapter cost in a build: its seconds per seed and the fixed rest.

    A chapter's record (``<records>/<chapter>.json``, written by ``book/build.py``) gives its
    CPU seconds (``cpu_seconds``; its wall ``seconds`` in a record from before they were kept), its parameters (``cache_dir``: its study cache, relative to the directory the chapter
    ran in, as this function is called from; ``seed``: its first seed, default 0) and its claims;
    the headline claims read the ``n`` seeds ``seed, ..., seed + n - 1`` (``n``: the largest
    ``n`` of its claims). The cells of its studies (``chapters``) in the cache are grouped by
    seed: the studies that ran every one of those seeds are the work a seed adds, and

    .. math:: \text{per seed} = \operatorname{median}_s \sum_{\text{cells of seed } s} \text{seconds},
              \qquad \text{fixed} = \max(0, \text{chapter seconds} - n \cdot \text{per seed}),

    so the chapter's time at ``k`` seeds is about ``fixed + k * per seed`` (fixed: loading data,
    pilots, exercises and the runs only some seeds make). A cell's seconds are its wall time,
    measured when it ran with one torch thread; on a shared machine they are made CPU seconds by
    the chapter's share of a core (its CPU seconds over its wall seconds; 1 for an old record).

    Parameters
    ----------
    records : path
        The folder of the build's chapter records (``book/chapters``, ``book/_smoke/chapters``).
    chapters : mapping, optional
        Chapter -> its studies and their settings (default :data:`EXPERIMENTS_STUDIES`).

    Returns
    -------
    (DataFrame, list of str)
        One row per chapter with a record and cached cells (columns :data:`SEED_COST_COLUMNS`:
        ``seeds`` n, ``cells_per_seed`` the cells a seed adds, ``per_seed`` and ``fixed`` in seconds,
        ``cells`` the cells read), and the chapters left out (no record, or no cell of its seeds).

    Examples
    --------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for seed, secs in [(0, 10.0), (1, 12.0), (2, 11.0)]:
    ...     _ = (root / "cache" / "runs").mkdir(parents=True, exist_ok=True)
    ...     _ = (root / "cache" / "runs" / f"{seed}.json").write_text(json.dumps(
    ...         {"study": "runs", "cell": {"alpha": 0.1, "seed": seed}, "seconds": secs}))
    >>> claims = [{"kind": "claim", "n": 3}]
    >>> _ = (root / "x.json").write_text(json.dumps({"seconds": 40.0, "params": {"cache_dir": str(root / "cache")},
    ...                                               "claims": claims}))
    >>> costs, left_out = seed_costs(root, {"x": {"runs": ("alpha",)}, "y": {}})
    >>> costs.to_dict("records"), left_out
    ([{'chapter': 'x', 'seconds': 40.0, 'seeds': 3, 'cells_per_seed': 1, 'per_seed': 11.0, 'fixed': 7.0, 'cells': 3}], ['y'])
    """
    rows, left_out = [], []
    for chapter, studies in chapters.items():
        path = Path(records) / f"{chapter}.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        ns = [int(c["n"]) for c in record.get("claims") or () if c.get("kind") == "claim" and c.get("n") is not None]
        cache = (record.get("params") or {}).get("cache_dir")
        if not ns or cache is None:
            left_out.append(chapter)
            continue
        first = int(record["params"].get("seed", 0))
        seeds = list(range(first, first + max(ns)))
        cells = pd.DataFrame(_chapter_cells(Path(cache), studies), columns=["study", "seed", "seconds"])
        cells = cells[cells["seed"].isin(seeds)]
        every = [s for s, part in cells.groupby("study") if set(part["seed"]) == set(seeds)]
        work = cells[cells["study"].isin(every)]
        if work.empty:
            left_out.append(chapter)
            continue
        total = float(record.get("cpu_seconds", record["seconds"]))
        share = total / float(record["seconds"]) if record["seconds"] else 1.0  # of a core the chapter had
        per_seed = float(work.groupby("seed")["seconds"].sum().median()) * share
        rows.append({"chapter": chapter, "seconds": total, "seeds": len(seeds),
                     "cells_per_seed": int(round(len(work) / len(seeds))), "per_seed": per_seed,
                     "fixed": max(0.0, total - len(seeds) * per_seed), "cells": len(cells)})
    return pd.DataFrame(rows, columns=list(SEED_COST_COLUMNS)), left_out


def wall_seconds(fixed: float, per_seed: float, cells_per_seed: int, seeds: int, cores: int) -> float:
    r"""The wall time of a run of ``seeds`` seeds on ``cores`` cores, its cells independent: the fixed
    part on one core, then the seeds' ``seeds * cells_per_seed`` cells in waves of ``cores``, each
    cell taking ``per_seed / cells_per_seed``. No seed: nothing runs (0).

    .. math:: \text{wall} = \text{fixed} + \left\lceil \frac{\text{seeds} \cdot k}{\text{cores}} \right\rceil
              \frac{\text{per seed}}{k}

    >>> wall_seconds(100.0, 60.0, 3, seeds=10, cores=16)  # 30 cells of 20 s: two waves
    140.0
    >>> wall_seconds(100.0, 60.0, 3, seeds=0, cores=16)
    0.0
    """
    if seeds <= 0:
        return 0.0
    return float(fixed + math.ceil(seeds * cells_per_seed / cores) * per_seed / cells_per_seed)


CORES = (2, 16, 64)
"""The machines the cost table sizes a confirmatory run for: a laptop, a workstation, a small cluster."""


def confirm_costs(costs: pd.DataFrame, planned_claims: pd.DataFrame, planned_chapters: pd.DataFrame,
                  cores: Sequence[int] = CORES) -> pd.DataFrame:
    """What deciding every open claim would cost, per experiments chapter: its open claims, how many
    of them a confirmatory plan can decide (a planned number of seeds), the fresh seeds it plans,
    the chapter's measured seconds per seed and fixed seconds (:func:`seed_costs`), the CPU-hours
    (``(fixed + per seed * seeds) / 3600``) and the wall minutes on each number of ``cores``
    (:func:`wall_seconds`), and a last row, *all*, that sums them (its walls: the chapters one
    after another, each on every core).

    ``planned_claims`` and ``planned_chapters``: a :class:`fedbook.confirm.ConfirmPlan`'s ``claims``
    (``chapter``, ``pilot_verdict``: the open claims are those inconclusive at the pilot's scale,
    ``planned_n``: a number of seeds, or missing where the plan cannot decide the claim) and
    ``chapters`` (``chapter``, ``seeds``). A chapter with no seeds planned costs nothing.

    >>> costs = pd.DataFrame([{"chapter": "x", "seconds": 700.0, "seeds": 5, "cells_per_seed": 2, "per_seed": 120.0,
    ...                        "fixed": 100.0, "cells": 10}])
    >>> claims = pd.DataFrame({"chapter": ["x", "x"], "planned_n": pd.array([20, None], dtype="Int64")})
    >>> table = confirm_costs(costs, claims, pd.DataFrame({"chapter": ["x"], "seeds": [20]}), cores=(2, 16))
    >>> table[["chapter", "open claims", "planned", "fresh seeds"]].to_dict("records")[0]
    {'chapter': 'x', 'open claims': 2, 'planned': 1, 'fresh seeds': 20}
    >>> # 100 + 120 * 20 = 2500 s; on 16 cores: 100 s, then 40 cells of 60 s in ceil(40 / 16) = 3 waves
    >>> round(float(table.loc[0, "CPU-hours"]) * 3600, 6), round(float(table.loc[0, "wall, 16 cores (min)"]) * 60, 6)
    (2500.0, 280.0)
    >>> table["chapter"].tolist()
    ['x', 'all']
    """
    rows = []
    if "pilot_verdict" in planned_claims:  # the open claims: inconclusive at the pilot's scale
        planned_claims = planned_claims[planned_claims["pilot_verdict"] == INCONCLUSIVE]
    for c in costs.to_dict("records"):
        mine = planned_claims[planned_claims["chapter"] == c["chapter"]]
        plan = planned_chapters[planned_chapters["chapter"] == c["chapter"]]
        seeds = int(plan["seeds"].sum()) if len(plan) else 0
        row = {"chapter": c["chapter"], "open claims": len(mine), "planned": int(mine["planned_n"].notna().sum()),
               "fresh seeds": seeds, "per seed (s)": c["per_seed"], "fixed (s)": c["fixed"],
               "CPU-hours": (c["fixed"] + c["per_seed"] * seeds) / 3600 if seeds else 0.0}
        for n in cores:
            row[f"wall, {n} cores (min)"] = wall_seconds(c["fixed"], c["per_seed"], c["cells_per_seed"], seeds, n) / 60
        rows.append(row)
    table = pd.DataFrame(rows)
    if len(table):
        total = {col: table[col].sum() for col in table.columns if col not in ("chapter", "per seed (s)", "fixed (s)")}
        table = pd.concat([table, pd.DataFrame([{"chapter": "all", **total}])], ignore_index=True)
    return table


def decided_cost(records: str | os.PathLike, exclude: Sequence[str] = ()) -> dict[str, float]:
    """The CPU of a build's chapter execution per decided claim: the CPU seconds of every chapter
    record in ``records`` but ``exclude`` (``cpu_seconds``: the kernel's and its workers'; a record
    without them gives its wall ``seconds``, counted in ``wall``) and the claims decided (kind
    ``"claim"``, verdict holds or does not hold).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> claims = [{"kind": "claim", "verdict": "holds"}, {"kind": "claim", "verdict": "does not hold"},
    ...           {"kind": "control", "verdict": "holds"}, {"kind": "claim", "verdict": "inconclusive at this scale"}]
    >>> _ = (root / "a.json").write_text(json.dumps({"seconds": 170.0, "cpu_seconds": 150.0, "claims": claims}))
    >>> _ = (root / "b.json").write_text(json.dumps({"seconds": 90.0}))
    >>> decided_cost(root)
    {'seconds': 240.0, 'decided': 2, 'chapters': 2, 'wall': 1, 'minutes_per_claim': 2.0}
    """
    seconds, decided, chapters, wall = 0.0, 0, 0, 0
    for path in sorted(Path(records).glob("*.json")):
        if path.stem in exclude:
            continue
        record = json.loads(path.read_text())
        if "seconds" not in record:
            continue
        wall += "cpu_seconds" not in record
        seconds, chapters = seconds + float(record.get("cpu_seconds", record["seconds"])), chapters + 1
        decided += sum(1 for c in record.get("claims") or () if c.get("kind") == "claim"
                       and c.get("verdict") in (HOLDS, DOES_NOT_HOLD))
    return {"seconds": seconds, "decided": decided, "chapters": chapters, "wall": wall,
            "minutes_per_claim": seconds / 60 / decided if decided else float("nan")}


def _duration(seconds: float) -> str:
    """A wall or CPU time as the page says it: minutes below two hours, else hours.

    >>> _duration(95.0), _duration(4 * 3600.0)
    ('1.6 minutes', '4.0 hours')
    """
    return f"{seconds / 60:.1f} minutes" if seconds < 7200 else f"{seconds / 3600:.1f} hours"


def confirm_numbers(table: pd.DataFrame, planned_claims: pd.DataFrame, decided: Mapping[str, float],
                    left_out: Sequence[str], *, power: float, cap: int, cores: Sequence[int] = CORES) -> dict[str, Any]:
    """The numbers the section on deciding every open claim reads (``perf_confirm_`` and
    ``perf_claim_`` keys; a measurement's key says ``measured``): the totals of
    :func:`confirm_costs`' ``table`` (its row *all*), why the plan leaves open claims out (the
    ``reason`` of ``planned_claims``' open rows without ``planned_n``, each with its count), the
    plan's ``power`` and ``cap``, the build's CPU per decided claim (:func:`decided_cost`) and the
    chapters ``left_out`` (no record or no cached cell: :func:`seed_costs`)."""
    claims = planned_claims
    if "pilot_verdict" in claims:
        claims = claims[claims["pilot_verdict"] == INCONCLUSIVE]
    counts = claims.loc[claims["planned_n"].isna(), "reason"].value_counts() if len(claims) else pd.Series(dtype=int)
    total = table.set_index("chapter").loc["all"] if len(table) else pd.Series(dtype=float)
    get = lambda col: float(total.get(col, 0.0))  # noqa: E731  (an empty table: nothing planned)
    out = {"perf_confirm_open": int(get("open claims")), "perf_confirm_planned": int(get("planned")),
           "perf_confirm_unplanned": int(get("open claims") - get("planned")), "perf_confirm_seeds": int(get("fresh seeds")),
           "perf_confirm_reasons": "; ".join(f"{n}: {reason}" for reason, n in counts.iloc[:4].items())
           + (f"; and {int(counts.iloc[4:].sum())} for {len(counts) - 4} other reasons" if len(counts) > 4 else "")
           or "none",
           "perf_confirm_power": f"{power * 100:.0f} %", "perf_confirm_cap": int(cap),
           "perf_confirm_cpu_hours_measured": get("CPU-hours"),
           "perf_confirm_cores": ", ".join(str(n) for n in cores[:-1]) + f" and {cores[-1]}",
           "perf_confirm_left_out": "" if not left_out else
           f" ({', '.join(left_out)}: no record or no cached cell in this build, left out)",
           "perf_claim_decided": int(decided["decided"]), "perf_claim_chapters": int(decided["chapters"]),
           "perf_claim_cpu_minutes_measured": decided["seconds"] / 60,
           "perf_claim_wall": "" if not decided.get("wall") else
           f" ({decided['wall']} of them by their wall time: records from before the build kept CPU time)",
           "perf_claim_minutes_measured": decided["minutes_per_claim"]}
    for n in cores:
        out[f"perf_confirm_wall_{n}_measured"] = _duration(get(f"wall, {n} cores (min)") * 60)
    return out


__all__ = ["CORES", "EXPERIMENTS_STUDIES", "MODEL_TEXT", "SEED_COST_COLUMNS", "WORKLOAD_TEXT", "confirm_costs",
           "confirm_numbers", "cost_table",
           "costs_of", "decided_cost", "numbers", "overhead_table", "plot_costs", "plot_stack", "round_cell", "seed_costs",
           "speed_cell", "speed_table", "wall_seconds"]
