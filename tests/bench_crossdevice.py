"""Benchmark of cross-device scale: peak memory and time of one FedAvg round against the number of
sampled clients, the loop's streaming aggregation (fold) and the list of replies side by side.

    .venv/bin/python tests/bench_crossdevice.py           # MLP to 5,000 clients, CNN to 1,000
    .venv/bin/python tests/bench_crossdevice.py --quick   # MLP only, to 1,000 clients

Each round runs in a fresh process (fedbook.benchmarks.round_cost): full participation, no
evaluation, one torch thread, MNIST-5k split IID while it gives every client five samples and a
synthetic data set of five 28 x 28 images per client beyond that. Printed: the peak resident
memory of each run and what the round added to it, the time per client, and the ratios the
targets are stated in:

- peak memory growth from 20 to 1,000 clients with the fold: target <= 10 % (stateless FedAvg);
- time per client at 1,000 (and 5,000) clients against 20: flat, i.e. a total linear in clients.
"""

from __future__ import annotations

import argparse
import sys

from fedbook.benchmarks import round_cost

TARGET_GROWTH = 0.10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the MLP only, up to 1,000 clients")
    args = parser.parse_args(argv)
    plan = {"mlp": (20, 200, 1000) if args.quick else (20, 200, 1000, 5000)}
    if not args.quick:
        plan["cnn"] = (20, 200, 1000)
    rows = []
    print(f"{'model':>5} {'clients':>7} {'aggregation':>11} {'data':>9} {'peak MiB':>9} {'round MiB':>9} "
          f"{'seconds':>8} {'ms/client':>9}")
    for model, sizes in plan.items():
        for n in sizes:
            for aggregation in ("fold", "list"):
                c = round_cost(n, model, aggregation)
                rows.append(c)
                print(f"{model:>5} {n:>7} {aggregation:>11} {c.data:>9} {c.peak_mib:>9.0f} {c.round_mib:>9.0f} "
                      f"{c.seconds:>8.2f} {c.ms_per_client:>9.2f}", flush=True)
    ok = True
    print("\nratios (measured side by side in this run):")
    for model, sizes in plan.items():
        get = {(c.n_clients, c.aggregation): c for c in rows if c.model == model}
        small = sizes[0]
        for aggregation in ("fold", "list"):
            growth = get[(1000, aggregation)].peak_mib / get[(small, aggregation)].peak_mib - 1
            line = f"  {model} {aggregation}: peak memory {small} -> 1000 clients {100 * growth:+.1f} %"
            if aggregation == "fold":
                passed = growth <= TARGET_GROWTH
                ok &= passed
                line += f" (target <= {100 * TARGET_GROWTH:.0f} %: {'met' if passed else 'MISSED'})"
            print(line)
        for n in sizes[1:]:
            ratio = get[(n, "fold")].ms_per_client / get[(small, "fold")].ms_per_client
            print(f"  {model} fold: time per client at {n} clients / at {small}: {ratio:.2f}")
        saved = get[(1000, "list")].peak_mib - get[(1000, "fold")].peak_mib
        print(f"  {model}: the fold's peak at 1000 clients is {saved:.0f} MiB below the list's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
