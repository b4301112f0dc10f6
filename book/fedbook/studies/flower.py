"""The Flower chapter's procedures (*Running on Flower*, ``notebooks/flower.py``): its grid of runs
(engines × methods) as a study (``fedbook.study``), each run checked against the in-process
loop bit for bit, and the tables and numbers its prose reads.

- :func:`equivalence_cell`: one method's job (:func:`job_of`, the page's small federation) on one
  engine (``"loopback"``, ``"simulation"`` or ``"deployment"``: a SuperLink and one SuperNode per
  client, started and stopped by the cell) against the same job in this process
  (:meth:`fedlib.engines.flower.job.FlowerJob.run_in_process`): whether they are identical
  (:func:`fedlib.results.run_differences`), the largest difference of the final server arrays
  (:func:`fedlib.messages.largest_difference`, float64), and every message's bytes as fedlib and
  Flower count them;
- :func:`trust_refusal`: a crafted job (a call of ``os:system``) read by a node, refused;
- :func:`node_failure` and :func:`mirrored_bytes`: the exercises (a node that stops answering;
  a client state kept on its node);
- :func:`bench_tables`: the engines' costs, read from ``make bench``'s saved results.

Flower's runs are the page's point (they are executed when the book is built): the page runs the
study in its own process, one run after another, and keeps no cache of it.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedlib.algorithms import ALGORITHMS
from fedlib.engines.flower import ENGINES, FlowerJob, LocalDeployment, example_job, free_port_block, run_flower
from fedlib.loop import DroppedClientsWarning
from fedlib.results import run_differences
from fedlib.messages import largest_difference, same_arrays
from fedbook.page import format_bytes

TRAIN = {"call": "fedlib.training:TrainConfig", "kwargs": {"epochs": 1, "batch_size": 32, "lr": 0.05}}
"""MPT's local update on the page (the other methods take :func:`fedlib.engines.flower.job.example_job`'s)."""
KWARGS = {"mpt": {"train": TRAIN, "rare_class": 1, "ldc_epochs": 1, "ccvr_steps": 2, "ccvr_virtual": 4}}
"""Per method, the arguments that differ from :func:`fedlib.engines.flower.job.example_job`'s: MPT with a short
schedule (its defaults are the paper's)."""
EQUIVALENCE = {"method": "object", "engine": "object", "identical": "object", "largest difference": "float64",
               "mean local accuracy": "float64", "in-process": "float64", "seconds": "float64", "survivors": "int64"}
"""The columns of :func:`equivalence_cell`'s ``equivalence`` table and their types."""
WIRE = {"round": "int64", "client": "int64", "direction": "object", "kind": "object", "bytes": "int64",
        "flower_bytes": "int64"}
"""The columns of a run's wire frame (:meth:`fedlib.engines.flower.remote.FlowerTransport.wire_frame`) and their types."""


def _empty(columns: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def check_settings(settings: Any) -> None:
    """Refuse the page's settings that name an unknown engine or method, or a runtime method that
    is not among its methods (the message names the valid values)."""
    bad = [e for e in settings.engines if e not in ENGINES]
    if bad:
        raise ValueError(f"unknown engines {bad}; valid: {', '.join(ENGINES)}")
    bad = [m for m in settings.methods if m not in ALGORITHMS]
    if bad:
        raise ValueError(f"unknown methods {bad}; valid: {', '.join(sorted(ALGORITHMS))}")
    bad = [m for m in settings.runtime_methods if m not in settings.methods]
    if bad:
        raise ValueError(f"runtime_methods {bad} are not among methods; valid: {', '.join(settings.methods)}")


def job_of(method: str, n_clients: int, rounds: int, seed: int) -> FlowerJob:
    """The page's job of ``method``: :func:`fedlib.engines.flower.job.example_job` with ``n_clients``
    clients and ``rounds`` rounds, evaluated every round, one torch thread per node, and the
    method's arguments of :data:`KWARGS`."""
    return example_job(method, n_clients=n_clients, rounds=rounds, seed=seed, eval_every=1, threads=1,
                       algorithm_kwargs=KWARGS.get(method))


def equivalence_cell(seed: int, engine: str, method: str, *, n_clients: int, rounds: int,
                     runtime_methods: Sequence[str]) -> dict[str, pd.DataFrame]:
    """``method``'s job (:func:`job_of`) on ``engine``, against the same job in this process.

    Flower's runtimes (``"simulation"``, ``"deployment"``) run only the methods of
    ``runtime_methods`` (a run costs their start-up, about a minute): another method's cell on a
    runtime has no rows. A deployment cell starts a SuperLink and one SuperNode per client on
    127.0.0.1 and stops them; the processes still alive after the stop are its ``survivors``.

    Returns
    -------
    dict of DataFrame
        ``equivalence``: one row (columns :data:`EQUIVALENCE`): ``identical`` (``"yes"`` when
        :func:`fedlib.results.run_differences` finds nothing), the ``largest difference`` of the
        final server arrays (:func:`fedlib.messages.largest_difference`), the mean local accuracy
        on the engine and in process, the engine's seconds; ``wire``: one row per message (columns
        :data:`WIRE`).
    """
    if engine != "loopback" and method not in runtime_methods:
        return {"equivalence": _empty(EQUIVALENCE), "wire": _empty(WIRE)}
    job = job_of(method, n_clients, rounds, seed)
    ref = job.run_in_process()
    survivors = 0
    if engine == "deployment":
        with LocalDeployment(n_clients, port=free_port_block(n_clients + 1)) as dep:
            run = run_flower(job, "deployment", deployment=dep)
        survivors = len(dep.pids())  # no process of it may survive the with-block
    else:
        run = run_flower(job, engine)
    row = {"method": method, "engine": engine, "identical": "no" if run_differences(ref, run.result) else "yes",
           "largest difference": largest_difference(ref.server.arrays, run.result.server.arrays),
           "mean local accuracy": run.result.summary()["local"], "in-process": ref.summary()["local"],
           "seconds": run.seconds, "survivors": survivors}
    return {"equivalence": pd.DataFrame([row]).astype(EQUIVALENCE), "wire": run.wire[list(WIRE)].astype(WIRE)}


def equivalence_table(equivalence: pd.DataFrame) -> pd.DataFrame:
    """The runs as the page shows them: method, engine, identical, the largest difference, the
    mean local accuracy on the engine and in process, the engine's seconds."""
    return equivalence[[c for c in EQUIVALENCE if c != "survivors"]].reset_index(drop=True)


def bytes_table(wire: pd.DataFrame, engine: str) -> pd.DataFrame:
    """Per method, direction and kind, fedlib's bytes and Flower's on ``engine``, and their ratio."""
    by_kind = (wire[wire["engine"] == engine].groupby(["method", "direction", "kind"])[["bytes", "flower_bytes"]]
               .sum().reset_index())
    by_kind["Flower / fedlib"] = by_kind["flower_bytes"] / by_kind["bytes"]
    return by_kind


def trust_refusal(job: FlowerJob) -> str:
    """What a node answers to ``job`` with its federation's seed replaced by a call of
    ``os:system``: the refusal's first clause, quoted (or that it was accepted, a defect)."""
    crafted = json.loads(job.to_json())
    crafted["federation"]["kwargs"]["seed"] = {"call": "os:system", "kwargs": {"command": "touch MARKER"}}
    try:
        FlowerJob.from_json(json.dumps(crafted))
    except ValueError as err:
        return f"“{str(err).split(';')[0]}”"
    return "it was accepted (a defect: the tests require a refusal)"


def node_failure(seed: int, silent: int = 1) -> dict[str, Any]:
    """Exercise 1: FedAvg on the loopback engine (4 clients, 3 rounds) with client ``silent``'s node
    silent after the handshake: the loop's default policy's error (its first clause), and with
    ``on_failure="drop"`` the rounds the client is recorded as dropped in and the clients the
    final evaluation covers."""
    job = example_job("fedavg", n_clients=4, rounds=3, seed=seed, threads=1, eval_every=0)
    try:
        run_flower(job, "loopback", unresponsive={silent}, timeout=0.01)
        error = "no error (a defect)"
    except RuntimeError as err:
        error = str(err).split(";")[0]
    drop = dataclasses.replace(job, config={**job.config, "on_failure": "drop"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedClientsWarning)  # the drops are the exercise's point, shown as numbers
        dropped = run_flower(drop, "loopback", unresponsive={silent}, timeout=0.01).result
    rounds = dropped.frame.loc[dropped.frame["metric"] == "dropped_failed", "round"]
    return {"ex1_error": error, "ex1_dropped_rounds": ", ".join(str(int(r)) for r in rounds),
            "ex1_evaluated": len(dropped.per_client())}


def mirrored_bytes(n_clients: int, rounds: int, seed: int) -> dict[str, str]:
    """Exercise 2: Ditto on the loopback engine with and without its client states mirrored up
    with every reply: Flower's bytes up each way (``ex2_up_extra``: what the mirror adds, in bytes),
    and whether the final server states agree."""
    job = example_job("ditto", n_clients=n_clients, rounds=rounds, seed=seed, threads=1)
    mirrored, kept = run_flower(job, "loopback"), run_flower(job, "loopback", mirror_states=False)

    def up(w: pd.DataFrame) -> int:
        return int(w.loc[w["direction"] == "up", "flower_bytes"].sum())

    same = same_arrays(mirrored.result.server.arrays, kept.result.server.arrays)
    return {"ex2_up_mirror": format_bytes(up(mirrored.wire)), "ex2_up_nomirror": format_bytes(up(kept.wire)),
            "ex2_up_extra": up(mirrored.wire) - up(kept.wire),
            "ex2_same": "the same final server state" if same else "another final server state (a defect)"}


BENCH_COLUMNS = {"wall_s": "wall (s)", "wall_s_ratio": "wall ratio", "round_s": "round (s)",
                 "round_s_ratio": "round ratio", "peak_pss_mib": "peak PSS (MiB)", "peak_pss_mib_ratio": "memory ratio",
                 "processes": "most processes at once", "identical": "identical"}
"""The saved benchmark's columns the page shows, and their names."""


def bench_tables(path: str | Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """``make bench``'s saved comparison of the engines (``book/data/bench_flower.json``): the
    saved record, its table by engine, and the table as the page shows it."""
    saved = json.loads(Path(path).read_text())
    bench = pd.DataFrame(saved["table"]).set_index("engine")
    view = bench[list(BENCH_COLUMNS)].rename(columns=BENCH_COLUMNS)
    view["identical"] = view["identical"].map({True: "yes", False: "no"})
    return saved, bench, view


def numbers(equivalence: pd.DataFrame, wire: pd.DataFrame, settings: Any, *, seconds: float, saved: Mapping,
            bench: pd.DataFrame) -> dict[str, Any]:
    """Every number the page's prose reads about its runs (``fl_`` prefix): how many runs are
    identical to the in-process loop, what ran where, whether a deployment left a process behind,
    Flower's bytes over fedlib's, and the saved benchmark's ratios. ``equivalence`` and ``wire``:
    :func:`equivalence_cell`'s study; ``settings``: the page's (``methods``, ``runtime_methods``,
    ``engines``, ``n_clients``, ``rounds``); ``seconds``: the study's."""
    P = settings
    n_same = int((equivalence["identical"] == "yes").sum())
    runtimes = [e for e in P.engines if e != "loopback"]
    survivors = int(equivalence["survivors"].sum())
    per_engine = wire[wire["method"].isin(P.runtime_methods)].groupby("engine")["flower_bytes"].sum()  # the same runs
    first = wire[wire["engine"] == P.engines[0]]
    out = {
        "fl_n_runs": len(equivalence), "fl_n_same": n_same,
        "fl_same_reading": "every one of them is bit-identical to the in-process run: the same final weights, client "
        "states, metrics and ledger" if n_same == len(equivalence) else
        f"{len(equivalence) - n_same} differ from the in-process run (a defect: the tests require equality)",
        "fl_methods": ", ".join(P.methods),
        "fl_runtime_runs": f"; {', '.join(P.runtime_methods)} also on {' and '.join(runtimes)}" if runtimes else "",
        "fl_engines": ", ".join(P.engines), "fl_clients": P.n_clients, "fl_rounds": P.rounds, "fl_seconds": seconds,
        "fl_survivors": "no process of the deployment was left running" if "deployment" not in P.engines or not survivors
        else f"{survivors} processes of the deployment were left running (a defect)",
        "fl_bytes_same_engines": "the same on every engine" if per_engine.nunique() == 1 else
        "nearly the same on every engine (Flower's message metadata, ids among them, differ in length between engines)",
        "fl_overhead": float(100 * (first["flower_bytes"].sum() / first["bytes"].sum() - 1)),
        "fl_first_engine": P.engines[0],
        "fl_bench_date": saved["date"], "fl_bench_machine": saved["machine"], "fl_bench_workload": saved["workload"],
        "fl_bench_identical": "bit-identical to the in-process run on both engines" if bool(bench["identical"].all())
        else "not identical to the in-process run on every engine (a defect)",
    }
    for engine in ("simulation", "deployment"):
        for key, column in (("round", "round_s_ratio"), ("wall", "wall_s_ratio"), ("mem", "peak_pss_mib_ratio")):
            out[f"fl_bench_{engine}_{key}"] = float(bench.loc[engine, column])
    return out


__all__ = ["BENCH_COLUMNS", "EQUIVALENCE", "KWARGS", "TRAIN", "WIRE", "bench_tables", "bytes_table", "check_settings",
           "equivalence_cell",
           "equivalence_table", "job_of", "mirrored_bytes", "node_failure", "numbers", "trust_refusal"]
