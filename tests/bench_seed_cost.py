"""Benchmark of what a seed costs: the CPU seconds per seed of each seeded chapter, at a base
revision (before) and in the working tree (after), side by side in this run.

    .venv/bin/python tests/bench_seed_cost.py                              # book profile: 35-40 minutes on 2 idle cores
    .venv/bin/python tests/bench_seed_cost.py --profile smoke              # a few minutes
    .venv/bin/python tests/bench_seed_cost.py --chapters mpt_experiments --before HEAD~3 --seeds 3 --json seed_cost.json
    .venv/bin/python tests/bench_seed_cost.py --simple                     # one run per chapter and revision: CPU(S) / S

The base revision is checked out with ``git worktree add`` into a temporary folder (removed
after) and executed from there (its ``fedlib`` and ``fedbook`` come first on ``PYTHONPATH``); the
working tree is executed from this checkout. Each execution is a fresh process that runs the
chapter with papermill (``jupytext.read`` of ``notebooks/<chapter>.py``, as ``book/build.py``
does) into a fresh, empty study cache, with one torch thread; its CPU time is the user + system
time of that process and every process it waited for (the kernel, its workers), read with
``os.wait4``, so the two revisions can run at once (``--jobs 2``, the default: the before and the
after of a chapter side by side, so the machine's noise hits both alike) without mixing their
times. The chapters run one after another; the order of the revisions alternates from chapter to
chapter.

*Per seed* is the marginal cost: every seed-count parameter of the chapter (:data:`SEED_PARAMETERS`)
at ``S`` and at ``S + 1`` (default ``S = 2``), and

    per seed = CPU(S + 1) - CPU(S),   fixed = CPU(S) - S * per seed,

so that a chapter's CPU at ``n`` seeds is about ``fixed + per seed * n``. ``--simple`` runs ``S``
seeds only and prints CPU(S) / S (labelled so). A chapter without a seed-count parameter
(``setting``: one run seed) runs once; its whole CPU is its cost of one seed.

The book profile's time is an estimate from the cold build's cells (about 2,300 CPU seconds per
revision at S = 2 and 3, two runs at a time); the smoke profile's seeds cost little next to its
fixed part, so its per-seed figures are mostly noise: it checks the benchmark, not the chapters.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SEED_PARAMETERS = {
    "mpt_experiments": ("n_seeds", "n_seeds_figure"),
    "ggeur_experiments": ("n_seeds", "headline_seeds"),
    "fedgrc_experiments": ("n_seeds",),
    "hdcfl_experiments": ("n_seeds",),
    "cosmos_experiments": ("n_seeds", "side_seeds"),
    "setting": (),
    "leaderboard": ("n_seeds",),
}
"""The seeded chapters and the parameters that set how many seeds they run (all set to the same
count; ``setting`` runs one run seed and has none): each chapter's
``fedbook.confirm.seed_parameters`` of its notebook's parameters, which a test holds it to."""

RUNNER = r"""
import importlib.util, json, sys
from pathlib import Path
root, chapter, params, out = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
for package in ("fedlib", "fedbook"):  # the revision's own code, not the checkout's editable install
    origin = Path(importlib.util.find_spec(package).origin).resolve()
    if root.resolve() not in origin.parents:
        raise SystemExit(f"{package} comes from {origin}, not from {root}")
import jupytext, papermill
papermill.execute_notebook(jupytext.read(root / "notebooks" / f"{chapter}.py"), out, kernel_name="python3",
                           parameters=params, cwd=str(root / "notebooks"), progress_bar=False)
"""
"""What one measured process runs: the chapter through papermill, from the revision's folder."""


def seed_parameters(chapter: str, seeds: int) -> dict[str, int]:
    """The papermill parameters that run ``chapter`` at ``seeds`` seeds: each of its seed-count
    parameters (:data:`SEED_PARAMETERS`) set to ``seeds``.

    >>> seed_parameters("cosmos_experiments", 3)
    {'n_seeds': 3, 'side_seeds': 3}
    >>> seed_parameters("setting", 3)
    {}
    """
    if chapter not in SEED_PARAMETERS:
        raise ValueError(f"unknown seeded chapter {chapter!r}; valid: {', '.join(SEED_PARAMETERS)}")
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
    return {name: seeds for name in SEED_PARAMETERS[chapter]}


def marginal(cpu_s: float, cpu_s1: float, s: int) -> tuple[float, float]:
    """A seed's marginal CPU and the fixed part, from a chapter's CPU at ``s`` and ``s + 1`` seeds:
    ``per seed = cpu_s1 - cpu_s`` and ``fixed = cpu_s - s * per seed`` (the line through the two
    points; either may come out negative when noise exceeds a seed's cost).

    >>> marginal(50.0, 65.0, 2)
    (15.0, 20.0)
    """
    per_seed = cpu_s1 - cpu_s
    return per_seed, cpu_s - s * per_seed


@dataclass
class Cost:
    """One chapter's measured CPU seconds at one revision: ``cpu[seeds]``, and the derived per-seed
    cost and fixed part (``per_seed``, ``fixed``; ``fixed`` is ``None`` for the simple measure)."""

    cpu: dict[int, float] = field(default_factory=dict)
    per_seed: float | None = None
    fixed: float | None = None


def measure(root: Path, chapter: str, params: dict, work: Path) -> float:
    """CPU seconds (user + system, this process and those it waited for) of one execution of
    ``chapter`` from the revision in ``root`` with ``params``, in a fresh empty study cache."""
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    out = cache / f"{chapter}.ipynb"
    params = {**params, "cache_dir": str(cache / "cells")}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "book")]), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(root), chapter, json.dumps(params), str(out)],
                            cwd=str(root / "notebooks"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{chapter} failed in {root} with {params}:\n{output.decode(errors='replace')[-3000:]}")
    return usage.ru_utime + usage.ru_stime


def side_by_side(chapter: str, jobs: list[tuple[str, Path, dict]], work: Path, parallel: bool) -> dict[str, float]:
    """Measure ``chapter`` at every ``(label, root, params)``, at once (``parallel``) or in the
    order given; the CPU seconds by label."""
    found: dict[str, float] = {}
    errors: list[BaseException] = []

    def one(label: str, root: Path, params: dict) -> None:
        try:
            found[label] = measure(root, chapter, params, work)
        except BaseException as err:  # reported after the other finished
            errors.append(err)

    if parallel:
        threads = [threading.Thread(target=one, args=job) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for job in jobs:
            one(*job)
    if errors:
        raise errors[0]
    return found


def run(chapters: list[str], profile: str, seeds: int, before: Path, after: Path, simple: bool, jobs: int,
        work: Path, failures: dict[str, str]) -> dict[str, dict[str, Cost]]:
    """Every chapter at both revisions: ``{chapter: {"before": Cost, "after": Cost}}``, printed as it
    goes; a chapter whose execution fails is left out, its error in ``failures``."""
    results: dict[str, dict[str, Cost]] = {}
    for i, chapter in enumerate(chapters):
        counts = [1] if not SEED_PARAMETERS[chapter] else [seeds] if simple else [seeds, seeds + 1]
        costs = {"before": Cost(), "after": Cost()}
        order = [("before", before), ("after", after)]
        if i % 2:
            order.reverse()
        try:
            for n in counts:
                params = {"profile": profile, **seed_parameters(chapter, n)}
                found = side_by_side(chapter, [(label, root, params) for label, root in order], work, parallel=jobs > 1)
                for label, cpu in found.items():
                    costs[label].cpu[n] = cpu
        except RuntimeError as err:  # said, and the other chapters still measured
            failures[chapter] = str(err)
            last = [line for line in str(err).splitlines() if line.strip()][-2:]  # the error and its note
            print(f"{chapter:<20} FAILED: {str(err).splitlines()[0]} ... {' '.join(last)}", flush=True)
            continue
        for cost in costs.values():
            if len(counts) == 2:
                cost.per_seed, cost.fixed = marginal(cost.cpu[seeds], cost.cpu[seeds + 1], seeds)
            else:
                cost.per_seed = cost.cpu[counts[0]] / counts[0]
        results[chapter] = costs
        print(row(chapter, costs, simple or not SEED_PARAMETERS[chapter]), flush=True)
    return results


HEADER = f"{'chapter':<20} {'measure':<18} {'before':>9} {'after':>9} {'after/before':>12}   before CPU / after CPU (s)"


def row(chapter: str, costs: dict[str, Cost], simple: bool) -> str:
    """One chapter's line: per seed before and after, their ratio, the measured CPU of every run."""
    b, a = costs["before"], costs["after"]
    measure_name = "CPU(S)/S" if simple else "marginal per seed"
    ratio = a.per_seed / b.per_seed if b.per_seed else float("nan")
    runs = "; ".join(f"{n} seed(s): {b.cpu[n]:.1f} / {a.cpu[n]:.1f}" for n in b.cpu)
    fixed = "" if b.fixed is None else f"; fixed {b.fixed:.1f} / {a.fixed:.1f}"
    return f"{chapter:<20} {measure_name:<18} {b.per_seed:>9.1f} {a.per_seed:>9.1f} {ratio:>12.2f}   {runs}{fixed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="book", choices=("smoke", "book"))
    parser.add_argument("--chapters", nargs="+", default=list(SEED_PARAMETERS), choices=list(SEED_PARAMETERS),
                        metavar="CHAPTER", help=f"seeded chapters to measure (default: all: {', '.join(SEED_PARAMETERS)})")
    parser.add_argument("--before", default="5de9573", help="the base revision (default 5de9573)")
    parser.add_argument("--seeds", type=int, default=2, help="S: the chapters run at S and S + 1 seeds (default 2)")
    parser.add_argument("--simple", action="store_true", help="one run at S seeds; per seed = CPU(S) / S")
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2),
                        help="2 (default): a chapter's before and after run at once; 1: one after the other")
    parser.add_argument("--json", type=Path, help="also write the measurements to this JSON file")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    t0, failures = time.perf_counter(), {}
    with tempfile.TemporaryDirectory(prefix="bench-seed-cost-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(before), args.before],
                       check=True)
        try:
            print(f"CPU seconds per seed, {args.profile} profile, S = {args.seeds}: before = {args.before} "
                  f"(git worktree), after = the working tree; one torch thread, a fresh empty cache per run\n{HEADER}",
                  flush=True)
            results = run(args.chapters, args.profile, args.seeds, before, ROOT, args.simple, args.jobs, Path(tmp),
                          failures)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
    per = {label: sum(c[label].per_seed for c in results.values()) for label in ("before", "after")}
    ratio = per["after"] / per["before"] if per["before"] else float("nan")
    print(f"{'sum':<20} {'':<18} {per['before']:>9.1f} {per['after']:>9.1f} {ratio:>12.2f}\n(measured side by side "
          f"in {time.perf_counter() - t0:.0f} s{'; failed: ' + ', '.join(failures) if failures else ''})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"profile": args.profile, "seeds": args.seeds, "before": args.before,
                                         "simple": args.simple, "failures": failures, "chapters": {k: {lab: asdict(c) for lab, c in v.items()}
                                                                             for k, v in results.items()}}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
