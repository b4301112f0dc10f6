"""Benchmark of fedlib on Flower: one workload (FedAvg, 20 clients, fedlib's small CNN, MNIST-5k,
5 rounds, one local epoch per round, evaluation after the last round) in-process, in Flower's
simulation engine (Ray) and in its deployment engine (a SuperLink and 20 SuperNodes as processes
on 127.0.0.1), each in a fresh process, one after another in this run
(fedlib.engines.flower.cli.engine_costs).

    .venv/bin/python tests/bench_flower.py              # the workload above (about 10 minutes)
    .venv/bin/python tests/bench_flower.py --quick      # 4 clients, 2 rounds, the digits MLP

Printed: wall seconds including start-up, mean seconds of a round (rounds 2..5), peak PSS of all
processes of the run, and each as a ratio to in-process; whether the final server state and the
metrics are bit-identical to the in-process run's; fedlib's and Flower's bytes. The full run also
writes book/data/bench_flower.json, the table the book's "Running on Flower" appendix shows. Every
node and the in-process loop use one torch thread (the same arithmetic, so the same bits).
A timing on a shared machine is not a test: the exit status is 0 unless a run fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
from pathlib import Path

from fedlib.engines.flower import engine_costs, example_job
from fedlib.io import atomic_write_bytes

SAVED = Path(__file__).resolve().parents[1] / "book" / "data" / "bench_flower.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 clients, 2 rounds, the digits MLP (nothing saved)")
    parser.add_argument("--port", type=int, default=19091, help="the deployment's first port")
    args = parser.parse_args(argv)
    if args.quick:
        job = example_job("fedavg", n_clients=4, rounds=2)
    else:
        job = example_job("fedavg", n_clients=20, rounds=5, dataset="mnist5k", model="cnn")
    with tempfile.TemporaryDirectory(prefix="bench-flower-") as folder:
        table = engine_costs(job, ("in-process", "simulation", "deployment"), folder=folder, port=args.port)
    cols = ["wall_s", "wall_s_ratio", "round_s", "round_s_ratio", "peak_pss_mib", "peak_pss_mib_ratio", "processes",
            "identical", "fedlib_bytes", "flower_bytes"]
    print(table[cols].to_string(float_format=lambda v: f"{v:.2f}"))
    if not args.quick:
        record = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "workload": "FedAvg, 20 clients, small CNN, MNIST-5k, 5 rounds, 1 epoch, 1 torch thread per process",
                  "job": json.loads(job.to_json()), "table": json.loads(table.reset_index().to_json(orient="records"))}
        atomic_write_bytes(SAVED, json.dumps(record, indent=1).encode())
        print(f"saved to {SAVED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
