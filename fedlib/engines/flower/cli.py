"""The command line (``python -m fedlib.engines.flower``) and the engines' costs side by side.

:func:`run_job` runs a job on an engine of :data:`ENGINE_CHOICES` (the in-process loop, or one
of Flower's) and writes it into a folder as the ServerApp does; :func:`main` is the command
line; :func:`engine_costs` runs a job on each engine in a fresh process of this command line and
measures it (:func:`fedlib.memory.measure_command`: wall seconds and the process tree's peak PSS).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ...io import atomic_write_bytes
from ...memory import measure_command
from .deployment import ENGINES, FlowerRun, LocalDeployment, term_exits, run_flower
from .job import FlowerJob, example_job

ENGINE_CHOICES = ("in-process", *ENGINES)
"""What :func:`main` and :func:`engine_costs` run: the in-process loop, or an engine of
:data:`~fedlib.engines.flower.deployment.ENGINES`."""


def run_job(job: FlowerJob, engine: str, out: str | Path, *, timeout: float | None = None,
            verbose: bool = False) -> FlowerRun:
    """Run ``job`` on ``engine`` (``"in-process"``: :func:`fedlib.run.run_federated`, with the
    job's threads) and write it into ``out`` as the ServerApp does."""
    if engine not in ENGINE_CHOICES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINE_CHOICES)}")
    folder = Path(out)
    if engine != "in-process":
        return run_flower(job, engine, out=folder, timeout=timeout, verbose=verbose)
    t0 = time.perf_counter()
    if job.threads is not None:
        torch.set_num_threads(job.threads)
    result = job.run_in_process(folder)  # a job's checkpoint inside ``out``, as the ServerApp keeps it
    result.save(folder)
    wire = pd.DataFrame(columns=["round", "client", "direction", "kind", "bytes", "flower_bytes"])
    atomic_write_bytes(folder / "wire.csv", wire.to_csv(index=False).encode())
    atomic_write_bytes(folder / "flower.json", json.dumps({"nodes": {}, "setup_seconds": 0.0,
                                                           "run_seconds": time.perf_counter() - t0}).encode())
    return FlowerRun.read(folder, engine, time.perf_counter() - t0)


def engine_costs(job: FlowerJob, engines: tuple[str, ...] = ENGINE_CHOICES[:1] + ENGINES[:2], *, folder: str | Path,
                 port: int = 19091) -> pd.DataFrame:
    """Run ``job`` on each engine in a fresh process (``python -m fedlib.engines.flower``), one
    after another, and measure it side by side (:func:`fedlib.memory.measure_command`): wall
    seconds including start-up, the mean seconds of a round as the loop timed it (rounds after the
    first: the first pays one-off costs), peak PSS of all processes, the most processes seen at
    once, and whether the final server state and the frame are bit-identical to the in-process
    run's. Ratios are to ``"in-process"`` (which must be first)."""
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
        m = measure_command(cmd)
        if m["returncode"] != 0:
            raise RuntimeError(f"the {engine} run failed (exit {m['returncode']}):\n{m['output'][-3000:]}")
        run = FlowerRun.read(out, engine, m["seconds"])
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
    parser.add_argument("--dataset", default="uci", choices=("uci", "mnist5k"))
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
    parser.add_argument("--out", default="flower-run", help="the results folder (default: ./flower-run)")
    parser.add_argument("--port", type=int, default=19091, help="the local deployment's SuperLink port")
    parser.add_argument("--timeout", type=float, default=None, help="seconds a round waits for its replies")
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint every round into this file, a relative path inside --out (e.g. checkpoint.pt); "
                             "the same command run again resumes from the last round it holds")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    args = parser.parse_args(argv)
    job = (FlowerJob.from_json(Path(args.job).read_text()) if args.job else
           example_job(args.algorithm, n_clients=args.clients, rounds=args.rounds, dataset=args.dataset, model=args.model))
    if args.checkpoint is not None:  # inside the output folder, as the ServerApp resolves it (the in-process run too)
        job = dataclasses.replace(job, config={**job.config, "checkpoint": args.checkpoint})
    if args.engine == "deployment":
        # a TERM (e.g. from a benchmark's timeout) unwinds like an error, so the deployment stops its processes
        n = job.n_clients()
        with term_exits():
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
        dropped = run.result.dropped
        if len(dropped):
            print(f"dropped: {len(dropped)} repl{'y' if len(dropped) == 1 else 'ies'} (round: clients) "
                  + ", ".join(f"{r}: {sorted(g['client'])}" for r, g in dropped.groupby("round")))
        print("protocol summary:", {k: round(v, 4) for k, v in run.result.summary().items()})
        if len(run.wire):
            print(run.wire.groupby(["direction", "kind"])[["bytes", "flower_bytes"]].sum().to_string())
        print(f"results in {Path(args.out).resolve()}")
    return 0


__all__ = ["ENGINE_CHOICES", "engine_costs", "main", "run_job"]
