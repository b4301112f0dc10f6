"""Build the book: execute every chapter with papermill, then render it with Jupyter Book.

    python book/build.py                       # every chapter at the default ("book") profile
    python book/build.py --profile smoke       # seconds: the parameters the tests use
    python book/build.py --only setting -p seed=1 -p alphas='[0.5]'   # one chapter, own parameters
    python book/build.py --no-render           # execute only
    python book/build.py --out /tmp/x --force  # execute into another folder (leaves the book alone)

Pipeline (DESIGN.md, "The book pipeline"): ``notebooks/<name>.py`` (jupytext percent format) ->
``jupytext.read`` -> ``papermill.execute_notebook`` with parameters -> ``book/chapters/<name>.ipynb``
-> ``jupyter-book build`` with execution off, warnings as errors and references checked.

Execution cache: a chapter is re-executed only when its key changes; the key hashes the
notebook's source, every file of ``fedlib/``, the parameters and ``requirements.txt`` (Jupyter
Book's own cache only sees code cells, so a change in fedlib would not re-run anything). Every
write is atomic (a temporary file and ``os.replace``), so an interrupted build resumes: finished
chapters are kept, the interrupted one runs again.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
NOTEBOOKS = ROOT / "notebooks"
CHAPTERS = BOOK / "chapters"
RESULTS = BOOK / "results"
TOC = BOOK / "_toc.yml"
PROFILES = ("smoke", "book", "paper")


def chapter_names(toc: Path = TOC) -> list[str]:
    """The executed chapters the toc lists (entries ``chapters/<name>``), in toc order."""
    names = []
    for line in toc.read_text().splitlines():
        line = line.strip()
        if line.startswith("- file: chapters/") or line.startswith("file: chapters/"):
            names.append(line.split("chapters/", 1)[1].strip())
    return names


def cache_key(name: str, params: dict) -> str:
    """sha256 of the notebook source, fedlib's source, the parameters and the requirements."""
    h = hashlib.sha256()
    h.update((NOTEBOOKS / f"{name}.py").read_bytes())
    for path in sorted((ROOT / "fedlib").rglob("*.py")):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    h.update(json.dumps(params, sort_keys=True).encode())
    h.update((ROOT / "requirements.txt").read_bytes())
    return h.hexdigest()


def parse_value(text: str):
    """``-p key=value`` values: Python literals where they parse (numbers, lists, None), else strings."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def execute_chapter(name: str, params: dict, output: Path, *, cwd: Path = NOTEBOOKS) -> float:
    """Execute ``notebooks/<name>.py`` with ``params`` into ``output`` (atomically); return seconds."""
    import jupytext
    import papermill

    source = NOTEBOOKS / f"{name}.py"
    if not source.exists():
        valid = ", ".join(sorted(p.stem for p in NOTEBOOKS.glob("*.py")))
        raise SystemExit(f"no notebook {source}; valid chapters: {valid}")
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.stem}.", suffix=".ipynb")
    os.close(fd)
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(
            nb, tmp, parameters=params, kernel_name="python3", cwd=str(cwd), progress_bar=False
        )
    except BaseException:
        failed = output.with_suffix(".failed.ipynb")
        if Path(tmp).exists():
            os.replace(tmp, failed)
            print(f"chapter {name} failed; the partly executed notebook is {failed}", file=sys.stderr)
        raise
    os.replace(tmp, output)
    return time.perf_counter() - t0


def build(profile: str, only: list[str] | None, overrides: dict, render: bool, force: bool) -> int:
    if profile not in PROFILES:
        raise SystemExit(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    names = chapter_names()
    if only:
        bad = [n for n in only if n not in names]
        if bad:
            raise SystemExit(f"unknown chapter(s) {', '.join(bad)}; valid: {', '.join(names)}")
        names = only
    from fedlib.io import atomic_write_json  # after the venv is active

    for name in names:
        # relative to the notebooks' working directory, so no local path shows in the book
        params = {"profile": profile, **overrides, "results_dir": os.path.relpath(RESULTS / name, NOTEBOOKS)}
        key = cache_key(name, params)
        output, meta = CHAPTERS / f"{name}.ipynb", CHAPTERS / f"{name}.json"
        if not force and output.exists() and meta.exists() and json.loads(meta.read_text()).get("key") == key:
            print(f"[cached]   {name}")
            continue
        print(f"[execute]  {name}  {json.dumps(params)}", flush=True)
        seconds = execute_chapter(name, params, output)
        atomic_write_json(meta, {"key": key, "params": params, "seconds": round(seconds, 2)})
        print(f"[done]     {name}  {seconds:.1f} s", flush=True)
    if not render:
        return 0
    cmd = [
        str(Path(sys.executable).parent / "jupyter-book"), "build", str(BOOK),
        "--config", str(ROOT / "_config.yml"), "--toc", str(TOC), "--path-output", str(BOOK),
        "-W", "-n", "--keep-going", "--all",
    ]
    print("[render]  ", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc == 0:
        print(f"\nThe book is at {BOOK / '_build' / 'html' / 'index.html'}")
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="book", help=f"one of {', '.join(PROFILES)} (default: book)")
    parser.add_argument("--only", nargs="*", help="execute only these chapters (default: all in the toc)")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a notebook parameter, e.g. -p seed=1 -p alphas='[0.5, 0.1]'")
    parser.add_argument("--no-render", action="store_true", help="execute the chapters, do not render HTML")
    parser.add_argument("--force", action="store_true", help="re-execute even where the cache is valid")
    parser.add_argument("--out", help="write executed chapters and results under this folder instead of book/ "
                        "(implies --no-render; for experiments that must not touch the book)")
    args = parser.parse_args(argv)
    if args.out:
        global CHAPTERS, RESULTS
        CHAPTERS, RESULTS = Path(args.out) / "chapters", Path(args.out) / "results"
        args.no_render = True
    overrides = {}
    for item in args.param:
        if "=" not in item:
            raise SystemExit(f"parameters are KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        overrides[k.strip()] = parse_value(v)
    return build(args.profile, args.only, overrides, not args.no_render, args.force)


if __name__ == "__main__":
    sys.exit(main())
