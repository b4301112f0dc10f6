"""Every shell command the README and the book's pages give a reader, as written.

The commands are read from the ```bash blocks of ``README.md``, ``book/reading.md``,
``book/inside.md`` and the chapters' sources (``notebooks/*.py``), and each must appear in
:data:`COVERAGE`, which says how it is checked; a new command without an entry fails
:func:`test_every_command_of_the_readme_and_the_book_is_covered`. The ways:

- ``RUN``: run as written, word for word (the shell's splitting, no shell), from a sandbox that
  stands for the repository's root (its top-level entries linked, so that the relative paths
  of ``runs/``, ``handouts/`` and ``flower-run/`` land in the sandbox), and its outcome checked;
- ``PARSED``: a command at the book's scale (minutes to hours), parsed and checked as written up
  to the kernel: ``book/build.py``'s own argument, name and kind checks with execution stubbed,
  papermill's command line with ``execute_notebook`` stubbed and the parameters it would inject
  checked against the chapter's kinds; the same command at the smoke profile is ``RUN``;
- anything else: the name of the test or CI job that runs it.

What the ``RUN`` commands cost: two executions of the setting chapter at the smoke profile
(``book/build.py`` and papermill, about 20 s each), a Flower loopback run and the exercise's test
(seconds each).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "README.md", ROOT / "book" / "reading.md", ROOT / "book" / "inside.md",
           *sorted((ROOT / "notebooks").glob("*.py"))]

_spec = importlib.util.spec_from_file_location("book_build_commands", ROOT / "book" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

RUN, PARSED = "run as written", "parsed as written"

COVERAGE = {
    "make book": "CI's book job (.github/workflows/book.yml runs make book; "
                 "tests/test_book_tooling.py::test_the_publishing_workflow_parses_builds_with_the_readme_command_and_deploys_the_html)",
    "make test": "CI (.ci/run runs make test, which runs this test)",
    "make flower": "tests/test_flower.py::test_flower_deployment_equals_the_in_process_loop (the same deployment, "
                   "4 SuperNodes) and test_a_killed_deployment_command_leaves_no_process (its command line)",
    ".venv/bin/python -m fedlib.engines.flower --engine simulation --clients 4 --rounds 3":
        "tests/test_flower.py::test_flower_simulation_equals_the_in_process_loop (Ray's start-up: minutes on 2 cores)",
    ".venv/bin/python -m fedlib.engines.flower --engine loopback --algorithm ditto": RUN,
    ".venv/bin/python book/build.py --profile smoke --only setting -p seed=1 -p 'alphas=[0.5]' -p n_clients=10 "
    "--out runs/setting-seed1": RUN,
    "mkdir -p runs": RUN,
    ".venv/bin/jupytext --to ipynb notebooks/setting.py -o runs/setting.ipynb": RUN,
    ".venv/bin/papermill runs/setting.ipynb runs/setting-seed1.ipynb -p profile smoke -p seed 1 -y 'alphas: [0.5]' "
    "-p n_clients 10 --cwd notebooks": RUN,
    ".venv/bin/python book/build.py --handout handouts/ana --profile smoke --only setting -p seed=7": RUN,
    ".venv/bin/python book/build.py --profile smoke --compare runs/setting-seed1 --rtol 0.05": RUN,
    ".venv/bin/python book/build.py --compare runs/setting-seed1 --against '$BOOK_URL'":
        "test_compare_against_a_published_site_reads_its_notebooks (the same command against a site served on "
        "127.0.0.1: no network in the tests; BOOK_URL, the reader's site, set as the README says)",
    ".venv/bin/python -m pytest book/exercises": RUN,
    ".venv/bin/python book/build.py --profile paper -p cifar_root=/path/to/root": RUN,
    # the chapters' pages: the book-profile re-runs (minutes), checked up to the kernel
    ".venv/bin/python book/build.py --only leaderboard --out runs/leaderboard -p n_seeds=10 "
    "-p 'alphas=[0.05, 1.0]' -p rank_by=worst_pooled": PARSED,
    ".venv/bin/python book/build.py --only setting --out runs/setting-seed1 -p seed=1 -p 'alphas=[0.5]' "
    "-p n_clients=10": PARSED,
    ".venv/bin/papermill runs/setting.ipynb runs/setting-seed1.ipynb -p seed 1 -y 'alphas: [0.5]' "
    "-p n_clients 10 --cwd notebooks": PARSED,
    ".venv/bin/python book/build.py --only setting -p seed=7 --out runs/ana": PARSED,
    ".venv/bin/python book/build.py --compare runs/ana": "the README's --compare command (RUN here) at the book "
                                                        "profile, which needs make book's build first",
    ".venv/bin/python book/build.py --compare runs/ana --rtol 0.05": "the README's --compare command (RUN here), "
                                                                    "which it is at the smoke profile",
    # the findings page's confirmatory runs: every check before the kernel, the plan's parameters and the Ray executor
    ".venv/bin/python book/build.py --confirm --plan-only":
        "tests/test_confirm.py::test_the_findings_pages_confirm_commands_plan_and_pass_the_plans_parameters",
    ".venv/bin/python book/build.py --confirm":
        "tests/test_confirm.py::test_the_findings_pages_confirm_commands_plan_and_pass_the_plans_parameters "
        "(execution stubbed) and test_a_confirmatory_run_resumes_after_a_kill_and_ray_gives_the_same_bits (run)",
    ".venv/bin/python book/build.py --confirm -p executor=ray --workers 16":
        "tests/test_confirm.py::test_the_findings_pages_confirm_commands_plan_and_pass_the_plans_parameters "
        "(execution stubbed) and test_a_confirmatory_run_resumes_after_a_kill_and_ray_gives_the_same_bits (Ray of 2 CPUs)",
    # the teaching page's course commands
    ".venv/bin/python book/build.py --handout handouts/ana --profile smoke --only setting teaching -p seed=7":
        "tests/test_course.py::test_student_versions_hold_no_solution_or_hint_and_teacher_versions_all (every "
        "chapter's handout) and the README's --handout command (RUN here: the same code path)",
    ".venv/bin/python book/grade.py handouts/ana/teacher submissions --csv marks.csv":
        "tests/test_course.py::test_grading_marks_every_exercise_right_wrong_and_crashed (a folder of "
        "submissions graded; 'submissions' is the teacher's own folder) and "
        "test_code_is_graded_apart_from_the_students_kernel_and_a_collection_error_said (grade's hidden=, --hidden)",
    # the teaching page's set-up of a student's machine: what make's venv target runs before every make test
    "python3.11 -m venv .venv": "CI (make test's venv target: $(PYTHON) -m venv .venv)",
    ".venv/bin/python -m pip install -r requirements.txt": "CI (make test's venv target installs requirements.txt)",
    ".venv/bin/python -m pip install --no-deps -e .": "CI (make test's venv target installs fedlib editable, no deps)",
}


def _blocks(path: Path) -> list[str]:
    """The ```bash blocks of a page (a chapter's markdown cells: its ``# `` comment lines)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        text = "\n".join(line[2:] if line.startswith("# ") else "" if line == "#" else "\x00"
                         for line in text.splitlines())
    return [m.group(1) for m in re.finditer(r"^```(?:bash|sh|shell|console)[ \t]*\n(.*?)^```", text, flags=re.M | re.S)]


def commands(path: Path) -> list[str]:
    """The commands of a page's shell blocks, one per command (continued lines joined, comments
    dropped), each written as ``shlex.join`` of its words: the words the shell would run."""
    out = []
    for block in _blocks(path):
        for line in re.sub(r"\\\n[ \t]*", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(shlex.join(words))
    return out


def test_commands_are_read_from_the_shell_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text `make x`\n\n```bash\nmake book    # the book\n.venv/bin/python a.py \\\n    -p \"x=[1]\"\n"
                    "# a comment\n```\n\n```python\nprint(1)\n```\n")
    assert commands(page) == ["make book", ".venv/bin/python a.py -p 'x=[1]'"]
    chapter = tmp_path / "c.py"
    chapter.write_text("# %% [markdown]\n# ```bash\n# make smoke\n# ```\nx = 1\n")
    assert commands(chapter) == ["make smoke"]


def test_every_command_of_the_readme_and_the_book_is_covered():
    found = {c: p.relative_to(ROOT) for p in SOURCES for c in commands(p)}
    assert {c for c in found if c.startswith(".venv/bin/papermill")}, "the papermill command left the README"
    missing = sorted(f"{found[c]}: {c}" for c in set(found) - set(COVERAGE))
    assert not missing, ("commands without a test (add each to COVERAGE in tests/test_commands.py: RUN, PARSED, "
                         "or the test that runs it):\n" + "\n".join(missing))
    # a command this module runs or parses must still be on a page (one covered elsewhere may go
    # first: a page and its test change in separate commits)
    stale = sorted(c for c in set(COVERAGE) - set(found) if COVERAGE[c] in (RUN, PARSED))
    assert not stale, f"COVERAGE runs commands no page gives any more: {stale}"


def test_no_command_holds_a_placeholder_that_cannot_run_as_written():
    """``--against https://<owner>.github.io/<repository>/`` in a shell block: bash reads ``<owner>``
    as a redirection from a file named owner. A value the reader supplies is a variable the text
    says how to set."""
    found = sorted(f"{p.relative_to(ROOT)}: {c}" for p in SOURCES for c in commands(p) if re.search(r"<[\w-]+>", c))
    assert found == []


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """A folder that stands for the repository's root: its top-level entries linked (the
    commands' relative outputs land here, not in the checkout)."""
    root = tmp_path_factory.mktemp("readme_root")
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "runs", "handouts", "flower-run"):
            (root / entry.name).symlink_to(entry)
    return root


def _run(command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _readme(prefix: str) -> str:
    """The one README command that starts with ``prefix``."""
    found = [c for c in commands(ROOT / "README.md") if c.startswith(prefix)]
    assert len(found) == 1, f"{len(found)} README commands start with {prefix!r}: {found}"
    assert COVERAGE[found[0]] == RUN
    return found[0]


@pytest.mark.notebook
def test_the_readmes_rerun_commands_run_as_written(sandbox):
    """The re-run through the build and the same with papermill, the list parameter included, at
    the smoke profile; then the comparison with the smoke build and the handout."""
    t0 = time.perf_counter()
    done = _run(_readme(".venv/bin/python book/build.py --profile smoke --only setting"), sandbox)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    executed = sandbox / "runs" / "setting-seed1" / "chapters" / "setting.ipynb"
    assert f"[output]   setting: {executed}" in done.stdout  # it says where the notebook went
    assert "without encryption" not in done.stdout + done.stderr  # the kernel's TCP warning is gone
    assert executed.stat().st_mode & 0o044 == 0o044 & ~_umask(), oct(executed.stat().st_mode)  # not 0600
    injected = [c.source for c in nbformat.read(executed, as_version=4).cells
                if "injected-parameters" in c.metadata.get("tags", ())]
    assert "alphas = [0.5]" in injected[0] and "seed = 1" in injected[0] and "n_clients = 10" in injected[0]

    for command in (_readme("mkdir -p runs"), _readme(".venv/bin/jupytext"), _readme(".venv/bin/papermill")):
        done = _run(command, sandbox)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    papermilled = nbformat.read(sandbox / "runs" / "setting-seed1.ipynb", as_version=4)
    injected = [c.source for c in papermilled.cells if "injected-parameters" in c.metadata.get("tags", ())]
    assert "alphas = [0.5]" in injected[0], injected  # a list, not the string '[0.5]'
    assert not [o for c in papermilled.cells for o in c.get("outputs", ()) if o.get("output_type") == "error"]

    done = _run(_readme(".venv/bin/python book/build.py --profile smoke --compare"), sandbox)
    if (build.output_dir("smoke") / "chapters" / "setting.ipynb").exists():  # make smoke ran here
        assert done.returncode == 0 and "glued values agree with the smoke build" in done.stdout, done.stderr[-2000:]
    else:  # a fresh clone: the message says what to build or compare against
        assert done.returncode == 1 and "make book" in done.stderr and "--against" in done.stderr, done.stderr[-2000:]

    done = _run(_readme(".venv/bin/python book/build.py --handout"), sandbox)
    assert done.returncode == 0, done.stderr[-3000:]
    written = [Path(line.split(maxsplit=1)[1]) for line in done.stdout.splitlines() if line.startswith("[handout]")]
    assert written and all(p.is_relative_to(sandbox / "handouts" / "ana") and p.exists() for p in written)
    assert all(p.stat().st_mode & 0o044 == 0o044 & ~_umask() for p in written)  # readable by the group, not 0600
    print(f"the README's re-run commands: {time.perf_counter() - t0:.0f} s")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_the_readmes_paper_command_stops_at_once_on_a_missing_data_folder(sandbox):
    t0 = time.perf_counter()
    done = _run(_readme(".venv/bin/python book/build.py --profile paper"), sandbox)
    assert done.returncode == 1 and "-p cifar_root: no folder /path/to/root" in done.stderr, done.stderr[-2000:]
    assert time.perf_counter() - t0 < 30 and "[execute]" not in done.stdout


def test_the_readmes_flower_loopback_command_runs_as_written(sandbox):
    done = _run(_readme(".venv/bin/python -m fedlib.engines.flower --engine loopback"), sandbox)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"results in {sandbox / 'flower-run'}" in done.stdout


def test_the_readmes_exercise_command_fails_on_the_skeleton_as_handed_out(sandbox):
    done = _run(_readme(".venv/bin/python -m pytest book/exercises"), sandbox)
    assert done.returncode == 1 and re.search(r"\d+ failed", done.stdout), done.stdout[-3000:]


@pytest.fixture
def stubbed(monkeypatch, tmp_path):
    """``book/build.py`` with execution and rendering stubbed: the parameters each chapter would get."""
    ran = {}

    def execute(name, params, output, cwd=build.NOTEBOOKS):
        ran[name] = params
        output.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), output)
        return 0.0

    monkeypatch.setattr(build, "execute_chapter", execute)
    monkeypatch.setattr(build, "render_book", lambda out: pytest.fail("a --out build renders nothing"))
    monkeypatch.chdir(tmp_path)
    return ran


@pytest.mark.parametrize("command", [c for c, how in COVERAGE.items() if how == PARSED and "book/build.py" in c])
def test_the_pages_book_profile_build_commands_pass_every_check_before_the_kernel(command, stubbed, tmp_path):
    words = shlex.split(command)
    assert words[:2] == [".venv/bin/python", "book/build.py"]
    assert build.main(words[2:]) == 0
    out = Path(words[words.index("--out") + 1])
    assert list(stubbed) == words[words.index("--only") + 1:words.index("--only") + 2]
    assert (tmp_path / out / "chapters").is_dir()  # into --out, not the book's own chapters
    given = {w.split("=", 1)[0]: build.parse_value(w.split("=", 1)[1]) for w in words[words.index("-p"):] if "=" in w}
    assert {k: stubbed[list(stubbed)[0]][k] for k in given} == given


@pytest.mark.parametrize("command", [c for c, how in COVERAGE.items() if how == PARSED and "papermill" in c])
def test_the_pages_papermill_commands_inject_parameters_of_the_chapters_kinds(command, monkeypatch):
    """papermill's own command line, as written, with the execution stubbed: what it would inject
    passes the chapter's kind checks (a list for ``alphas``, not the string ``'[0.5]'``)."""
    import papermill.cli

    got = {}
    monkeypatch.setattr(papermill.cli, "execute_notebook", lambda *a, **kw: got.update(kw["parameters"]))
    words = shlex.split(command)
    assert words[0] == ".venv/bin/papermill"
    papermill.cli.papermill.main(words[1:], standalone_mode=False)
    assert got and isinstance(got.get("alphas", []), list)
    name = Path(words[1]).stem
    build.check_parameters([name], got.get("profile", build.DEFAULT_PROFILE), got)  # raises SystemExit if not
    assert set(got) <= set(build.notebook_parameters(name))


def _glued(path: Path, values: dict) -> None:
    """An executed notebook whose outputs glued ``values`` (as myst_nb's glue records them)."""
    cells = [nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/plain": repr(v)}, metadata={"scrapbook": {"name": k, "mime_prefix": ""}})])
        for k, v in values.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)


def test_compare_against_a_published_site_reads_its_notebooks(tmp_path, capsys):
    """``--compare DIR --against URL``: the site's executed chapters (``_sources/chapters/``, the
    pages' downloads) served on 127.0.0.1 stand for the published book; a site's folder and a
    ``file://`` URL work the same; the numbers print with the digits that tell them apart."""
    import functools
    import http.server
    import threading

    site = tmp_path / "site"
    _glued(site / "_sources" / "chapters" / "setting.ipynb", {"acc": 25.999999999999996, "n": 20, "name": "FedAvg"})
    _glued(tmp_path / "mine" / "chapters" / "setting.ipynb", {"acc": 26.5, "n": 20, "name": "FedAvg"})
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        for against in (url, site.as_uri(), str(site)):
            assert build.main(["--compare", str(tmp_path / "mine"), "--against", against]) == 0
            out = capsys.readouterr().out
            assert "setting: acc: the book has 26, yours 26.5 (+1.92%)" in out, out
            assert "2 of 3 glued values agree" in out and "25.99999" not in out
        _glued(tmp_path / "mine" / "chapters" / "other.ipynb", {"x": 1})
        with pytest.raises(SystemExit, match="other is not executed in .*--against https://<owner>"):
            build.main(["--compare", str(tmp_path / "mine"), "--against", url])
    finally:
        server.shutdown()


@pytest.mark.parametrize("param, words", [
    ("alphas=0.5", r"-p alphas: chapter setting \(profile smoke\) must be a list \(like \[0.3\]\), got 0.5; "
                   r"for one value write -p 'alphas=\[0.5\]'"),
    ("n_clients=ten", r"-p n_clients: chapter setting \(profile smoke\) must be an integer \(like 4\), got 'ten'"),
    ("seed=1.5", r"-p seed: .* must be an integer \(like 0\), got 1.5"),
    ("seed=-1", r"-p seed: .* must be >= 0 \(like 0\), got -1"),
    ("lr=fast", r"-p lr: .* must be a number \(like 0.01\), got 'fast'"),
    ("alphas=[0.5, 'x']", r"-p alphas: .* item 1 must be a number \(like 0.3\), got 'x'"),
    ("cifar_root=/no/such/folder", r"-p cifar_root: no folder /no/such/folder"),
])
def test_a_parameter_of_the_wrong_kind_stops_the_build_before_any_kernel(param, words, stubbed):
    t0 = time.perf_counter()
    with pytest.raises(SystemExit, match=words) as err:
        build.main(["--profile", "smoke", "--only", "setting", "-p", param, "--out", "x"])
    assert "\n" not in str(err.value) and "-p 'alphas=[0.5]' or -p alphas=0.5,0.1" in str(err.value) or "_root" in param
    assert not stubbed and time.perf_counter() - t0 < 5  # nothing executed; in well under a second on its own


def test_parameter_kinds_are_read_from_the_parameters_cell_and_the_profiles(stubbed):
    smoke, book = build.parameter_defaults("setting", "smoke"), build.parameter_defaults("setting", "book")
    assert (smoke["seed"], smoke["alphas"], smoke["n_clients"], smoke["cifar_root"]) == (0, [0.3], 4, None)
    assert (book["alphas"], book["n_clients"]) == ([0.3, 0.1], 20)
    # values that pass: an integer for a number, a comma list, None for the profile's value, anything for None
    assert build.parse_value("0.5,1") == [0.5, 1] and build.parse_value("None") is None
    build.check_parameters(["setting"], "smoke", {"lr": 1, "alphas": [0.5, 1], "n_clients": None, "results_dir": "x"})
    # a name that is not a literal in the source (RARE_RATIO) takes anything
    assert smoke["rare_ratio"] is None and build._kind_error("rare_ratio", "x", None) is None
    # the kinds of every chapter are read without error
    for name in build.chapter_names():
        assert set(build.parameter_defaults(name, "smoke")) == set(build.notebook_parameters(name))


def test_build_and_fedbook_page_refuse_and_accept_the_same_values():
    """The build's check (before the kernel) and the notebook's (fedbook.page.resolve, in it) agree."""
    from fedbook.page import resolve

    cases = [(20, 5), (20, 2.5), (20, True), (0.05, 1), (0.05, "x"), ("uci", 3), (True, 1), ([0.3, 0.1], 0.5),
             ([0.3, 0.1], [0.5]), ([0.3], ["a"]), (None, "anything"), (4, -1), (0.5, float("inf"))]
    for default, value in cases:
        try:
            resolve({"book": {"k": default}}, "book", k=value)
            notebook = None
        except ValueError as err:
            notebook = str(err)
        ours = build._kind_error("k", value, default)
        assert (ours is None) == (notebook is None), (default, value, ours, notebook)


def test_the_kernels_messages_are_encrypted():
    assert build.kernel_config().KernelManager.transport_encryption == "auto"


def test_a_one_chapter_render_leaves_the_other_chapters_out_of_its_toc_and_config(tmp_path):
    """``--render`` of a folder where only some chapters were executed renders those with the
    book's own pages: the others leave the toc (a part left empty goes too) and the extension
    ``book/_ext/partial.py`` gets their pages, titles and labels."""
    import yaml

    toc = yaml.safe_load(build.TOC.read_text())
    kept = build.partial_toc(toc, {"setting"})
    files = [e["file"] for part in kept["parts"] for e in part["chapters"]]
    assert files == [f for f in build.toc_files()[1:] if not f.startswith("chapters/") or f == "chapters/setting"]
    assert {p["caption"] for p in kept["parts"]} <= {p["caption"] for p in toc["parts"]}
    assert all(p["chapters"] for p in kept["parts"]) and kept["root"] == toc["root"]
    # a section kept, its chapter left out (the page on deciding's cost, a section of the performance page): it takes the
    # chapter's place
    back = {p["caption"]: p for p in build.partial_toc(toc, {"deciding_cost"})["parts"]}["Back matter"]
    assert [e["file"] for e in back["chapters"]][:1] == ["chapters/deciding_cost"]
    absent = [n for n in build.chapter_names() if n != "setting"]
    config_path, toc_path = build.partial_config(tmp_path, absent)
    config = yaml.safe_load(config_path.read_text())
    assert config["sphinx"]["local_extensions"]["partial"] == str(build.BOOK / "_ext")
    assert all(Path(p).is_absolute() for p in config["sphinx"]["local_extensions"].values())
    info = config["sphinx"]["config"]["fedbook_absent"]
    assert set(info) == {f"chapters/{n}" for n in absent}
    assert info["chapters/flower"]["title"] == "Running on Flower" and "chapter-flower" in info["chapters/flower"]["labels"]
    assert yaml.safe_load(toc_path.read_text()) == kept and config_path.parent == tmp_path / "_build" / "partial"


def test_a_reference_to_a_chapter_left_out_prints_as_text_and_any_other_stays_missing():
    """The ``missing-reference`` handler of ``book/_ext/partial.py``: the landing page's ``{doc}``
    to a chapter left out reads as that chapter's title, a ``{ref}`` to one of its labels as its
    own text, and a reference to anything else is still reported (``None``)."""
    from types import SimpleNamespace

    from docutils import nodes
    from sphinx.addnodes import pending_xref

    spec = importlib.util.spec_from_file_location("partial_ext", ROOT / "book" / "_ext" / "partial.py")
    partial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(partial)
    app = SimpleNamespace(config=SimpleNamespace(fedbook_absent={
        "chapters/flower": {"title": "Running on Flower", "labels": ["chapter-flower"]}}))

    def resolve(reftype, target, text, explicit=False, refdoc="intro"):
        node = pending_xref("", reftype=reftype, reftarget=target, refdoc=refdoc, refexplicit=explicit)
        found = partial.absent_reference(app, None, node, nodes.inline(text, text))
        return None if found is None else found.astext()

    assert resolve("doc", "chapters/flower", "chapters/flower") == "Running on Flower"
    assert resolve("doc", "flower", "flower", refdoc="chapters/setting") == "Running on Flower"  # relative
    assert resolve("ref", "chapter-flower", "Flower", explicit=True) == "Flower"
    assert resolve("ref", "chapter-flower", "chapter-flower") == "Running on Flower"
    assert resolve("doc", "chapters/setting", "chapters/setting") is None  # rendered: resolved as usual
    assert resolve("ref", "no-such-label", "x") is None  # a typo still fails the render
    assert resolve("func", "chapter-flower", "x") is None


def test_the_build_checks_its_arguments_without_importing_torch():
    """What makes the checks quick: ``book/build.py`` imports no torch (nor fedbook.page) until it
    executes; its claims key is fedbook.page's."""
    code = ("import sys; sys.path.insert(0, 'book'); import build; "
            "print(sorted(m for m in ('torch', 'fedbook.page', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    from fedbook.page import CLAIMS_RECORDS

    assert build.CLAIMS_RECORDS == CLAIMS_RECORDS


@pytest.mark.parametrize("key, option", [("results_dir", "--out"), ("cache_dir", "--out"), ("records", "--profile and --out"),
                                         ("profile", "--profile")])
def test_a_parameter_the_build_sets_itself_is_refused_naming_the_option_that_sets_it(key, option, tmp_path):
    """``-p results_dir=...`` was overridden without a word by the build's own results/<chapter>."""
    with pytest.raises(SystemExit, match=rf"^-p {key}=\.\.\. is set by the build, not by -p: give {option}"):
        build.main(["--only", "setting", "--no-render", "--out", str(tmp_path), "-p", f"{key}=elsewhere"])
    assert list(tmp_path.iterdir()) == []  # refused before anything ran
