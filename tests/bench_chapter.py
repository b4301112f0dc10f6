"""Benchmark of a whole experiments chapter: the GGEUR experiments executed one client after
another in one process, and with vectorized clients and its seeds in two worker processes, side
by side in this run (papermill, book profile unless --profile says otherwise).

    .venv/bin/python tests/bench_chapter.py                   # book profile: about 12 minutes
    .venv/bin/python tests/bench_chapter.py --profile smoke   # seconds

Printed: each execution's wall time, their ratio (target <= 0.6 on 2 cores), and which of the
chapter's glued values differ between the two (measured times, whose keys name seconds or time,
are left out). Running the seeds in workers changes no bit; vectorized clients change the
accuracies by what float32 rounding grows into over the training (a few hundredths of a point),
which can move a claim whose interval bound sits that close to its threshold.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))

import jupytext  # noqa: E402
import papermill  # noqa: E402

from build import MEASURED_KEYS, glued_values  # noqa: E402  (the build's reading of glued values and timings)

CHAPTER = "ggeur_experiments"
TARGET = 0.6


def execute(profile: str, execution: str, workers: int, folder: Path) -> tuple[float, Path]:
    out = folder / f"{CHAPTER}-{execution}-{workers}.ipynb"
    t0 = time.perf_counter()
    papermill.execute_notebook(jupytext.read(ROOT / "notebooks" / f"{CHAPTER}.py"), str(out), kernel_name="python3",
                               parameters=dict(profile=profile, execution=execution, workers=workers),
                               cwd=str(ROOT / "notebooks"), progress_bar=False)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="book", choices=("smoke", "book"))
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the fast execution (default 2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        slow, slow_nb = execute(args.profile, "sequential", 1, Path(tmp))
        print(f"{CHAPTER} ({args.profile}), sequential clients, one process: {slow:7.1f} s", flush=True)
        fast, fast_nb = execute(args.profile, "vectorized", args.workers, Path(tmp))
        print(f"{CHAPTER} ({args.profile}), vectorized clients, {args.workers} workers: {fast:7.1f} s", flush=True)
        a, b = glued_values(slow_nb), glued_values(fast_nb)
    keys = [k for k in a if not re.search(MEASURED_KEYS, k)]
    differ = [k for k in keys if a[k] != b.get(k)]  # a glued table reads as its text (fedbook.tables)
    print(f"\nratio (measured side by side in this run): {fast / slow:.2f}, target <= {TARGET}: "
          f"{'met' if fast / slow <= TARGET else 'NOT met'}")
    print(f"glued values: {len(keys)} compared, {len(differ)} differ{': ' + ', '.join(differ) if differ else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
