"""Benchmark of the foundation: prints ratios measured side by side in one run.

    .venv/bin/python tests/bench_loop.py            # the loop's overhead, and the smoke build
    .venv/bin/python tests/bench_loop.py --book     # also the book-profile build (minutes)

1. fedlib's FedAvg rounds against a minimal hand-written PyTorch loop doing the same work on the
   same batches (same initial weights, same per-client generators, same averaging): the ratio of
   their times (target <= 1.10) and whether their final weights agree bit for bit. The two are
   timed alternately, several times, and the medians compared, so that machine noise hits both.
2. The time and peak memory (summed PSS of the build and its kernels) of executing every chapter at
   the smoke profile and, with ``--book``, at the book profile, into a temporary folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from fedbook.benchmarks import loop_overhead
from fedlib.memory import measure_command


ROOT = Path(__file__).resolve().parent.parent


def report_loop_overhead(rounds: int, repeats: int) -> None:
    r = loop_overhead("cnn", rounds=rounds, repeats=repeats)
    print(f"FedAvg, {r.n_clients} clients, {rounds} rounds, MNIST-5k CNN ({repeats} alternating repeats, medians)")
    print(f"  fedlib loop      {r.fedlib_s:8.2f} s   per round {r.fedlib_s / rounds:6.2f} s")
    print(f"  hand-written     {r.hand_s:8.2f} s   per round {r.hand_s / rounds:6.2f} s")
    print(f"  ratio fedlib / hand-written = {r.ratio:.3f}   (target <= 1.10)")
    print(f"  final weights identical bit for bit: {r.identical}")


def build_cost(profile: str) -> tuple[float, float]:
    """The build's wall seconds and the peak memory (PSS, MiB) of it and every kernel it starts
    (fedlib's one memory meter, :func:`fedlib.memory.measure_command`)."""
    with tempfile.TemporaryDirectory() as out:
        m = measure_command([sys.executable, str(ROOT / "book" / "build.py"), "--profile", profile, "--out", out, "--force"])
    if m["returncode"] != 0:
        raise RuntimeError(f"the {profile} build failed:\n{m['output'][-2000:]}")
    return m["seconds"], m["peak_pss_mib"]


def main() -> None:
    parser = argparse.ArgumentParser(description="fedlib benchmarks (ratios measured side by side)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--book", action="store_true", help="also time the book-profile build (minutes)")
    args = parser.parse_args()
    report_loop_overhead(args.rounds, args.repeats)
    print("\nExecuting every chapter (papermill), into a temporary folder:")
    smoke = build_cost("smoke")
    print(f"  smoke profile: {smoke[0]:8.1f} s, peak memory {smoke[1]:7.0f} MiB")
    if args.book:
        book = build_cost("book")
        print(f"  book profile:  {book[0]:8.1f} s, peak memory {book[1]:7.0f} MiB")
        print(f"  ratio book / smoke time = {book[0] / smoke[0]:.1f}")


if __name__ == "__main__":
    main()
