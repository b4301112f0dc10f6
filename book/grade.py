"""Grade a folder of submitted notebooks against a handout's teacher folder.

    python book/build.py --handout course --profile smoke --only setting teaching -p seed=7
    #   ... hand course/student/ out; collect each student's notebooks as subs/<student>/<chapter>.ipynb
    python book/grade.py course/teacher subs                 # one table, tab-separated, on stdout
    python book/grade.py course/teacher subs --csv marks.csv --timeout 900
    python book/grade.py course/teacher subs --hidden ~/my-hidden-tests      # the teacher's own hidden tests

Each notebook is executed with papermill in a fresh kernel from the repository's ``notebooks/``
folder, each cell under ``--timeout`` seconds; every answer cell is guarded, so a crash marks only
its own exercise (a crash in the chapter before the answers marks them all, with the cell and the
error). A number is checked against the chapter's worked solution executed at the notebook's
parameters on the seeds of ``fedbook.course.REFERENCE_SEEDS`` (cached under
``<teacher>/references/``: the first grading at new parameters executes the chapter once per
seed); code against its public and hidden tests, in a process of its own (the answer cell written
as the skeleton's file, beside the tests alone). The book's hidden tests are in its public
repository (``book/exercises/hidden/``): a teacher who needs them secret keeps a copy of their own
outside the students' clone and passes its folder with ``--hidden DIR``. See ``fedbook.course``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))

from fedbook.course import REFERENCE_SEEDS, grade  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("teacher", help="the handout's teacher folder (book/build.py --handout DIR writes DIR/teacher)")
    parser.add_argument("submissions", help="a folder of <student>/<chapter>.ipynb")
    parser.add_argument("--timeout", type=float, default=600, help="seconds each cell may run (default 600)")
    parser.add_argument("--seeds", type=int, default=len(REFERENCE_SEEDS),
                        help=f"reference seeds 0, 1, ... (default {len(REFERENCE_SEEDS)})")
    parser.add_argument("--csv", help="also write the table to this CSV file")
    parser.add_argument("--hidden", help="a folder of the teacher's own holding the hidden tests (by their file "
                        "names, e.g. test_fedavgm_hidden.py) to run instead of <teacher>/exercises/'s: the "
                        "book's are in its public repository (book/exercises/hidden/)")
    args = parser.parse_args(argv)
    teacher, submissions = Path(args.teacher).resolve(), Path(args.submissions).resolve()
    if not (teacher / "answers.json").exists():
        raise SystemExit(f"{teacher} has no answers.json: give the teacher folder of book/build.py --handout")
    if not submissions.is_dir():
        raise SystemExit(f"no folder {submissions}")
    if args.seeds < 3:
        raise SystemExit(f"--seeds must be at least 3 (with two, the t quantile alone is 12.7), got {args.seeds}")
    hidden = Path(args.hidden).resolve() if args.hidden else None
    if hidden is not None and not hidden.is_dir():
        raise SystemExit(f"--hidden: no folder {hidden}")
    table = grade(teacher, submissions, root=ROOT, timeout=args.timeout, seeds=tuple(range(args.seeds)),
                  log=lambda line: print(line, file=sys.stderr, flush=True), hidden=hidden)
    print(table.to_csv(sep="\t", index=False), end="")
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"[grades]   {Path(args.csv).resolve()}", file=sys.stderr)
    marks = table.groupby("student")["mark"].sum()
    print("[total]    " + ", ".join(f"{s}: {int(m)}/{int((table['student'] == s).sum())}" for s, m in marks.items()),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
