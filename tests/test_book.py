"""The book pipeline: every chapter executes through papermill at the smoke profile; the execution
cache re-runs nothing when nothing changed and re-runs when the parameters or fedlib change; the
table of contents is read as YAML; a non-book profile builds into its own folder; the example of
the page *Inside fedlib* runs."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("book_build", ROOT / "book" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

CHAPTERS = build.chapter_names()


def test_toc_lists_every_notebook_once():
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.py"))
    assert sorted(CHAPTERS) == notebooks


@pytest.fixture
def sandbox(tmp_path):
    """A folder to execute chapters into (the ``out`` of :func:`build.build`)."""
    return tmp_path


def test_toc_is_read_as_yaml(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text(
        "# a comment naming chapters/not_this\n"
        "format: jb-book\nroot: intro\nparts:\n"
        "  - caption: 'A: part'\n    chapters:\n"
        "      - file: reading\n      - file: \"chapters/one\"\n"
        "        sections:\n          - file: chapters/two\n"
        "  - caption: B\n    chapters:\n      - {file: chapters/three}\n"
    )
    assert build.toc_files(toc) == ["intro", "reading", "chapters/one", "chapters/two", "chapters/three"]
    assert build.chapter_names(toc) == ["one", "two", "three"]


@pytest.fixture
def stub_execution(tmp_path, monkeypatch):
    """build.execute_chapter replaced by a stub that records the parameters and writes an empty notebook."""
    import nbformat

    calls = {}

    def execute(name, params, output, **_):
        calls[name] = params
        output.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), output)
        return 0.0

    monkeypatch.setattr(build, "execute_chapter", execute)
    monkeypatch.setattr(build, "BOOK", tmp_path / "book")
    return calls


def test_a_cold_build_orders_chapters_by_their_times_at_another_profile():
    todo = [("short", 0, 0, 0, 0, None), ("long", 0, 0, 0, 0, None), ("known", 0, 0, 0, 0, 50.0), ("new", 0, 0, 0, 0, None)]
    order = [t[0] for t in build.longest_first(todo, {"short": 2.0, "long": 30.0})]
    assert order == ["new", "known", "long", "short"]  # unknown first, then this profile's 50 s, then the hints


def test_a_non_book_profile_builds_into_its_own_folder(stub_execution, tmp_path):
    assert build.output_dir("book") == build.BOOK
    assert build.build("smoke", ["setting"], {}, render=False, force=False) == 0
    assert (tmp_path / "book" / "_smoke" / "chapters" / "setting.ipynb").exists()
    assert not (tmp_path / "book" / "chapters").exists()
    assert stub_execution["setting"]["results_dir"].endswith("book/_smoke/results/setting")


def test_a_parameter_goes_to_the_chapters_that_declare_it(stub_execution, tmp_path):
    assert "n_clients" in build.notebook_parameters("setting")
    assert "n_clients" not in build.notebook_parameters("mpt_derivations")
    build.build("smoke", ["setting", "mpt_derivations"], {"n_clients": 3}, render=False, force=False, out=tmp_path)
    assert stub_execution["setting"]["n_clients"] == 3 and "n_clients" not in stub_execution["mpt_derivations"]
    # results_dir too: a chapter that saves nothing does not declare it and is not given one
    assert "results_dir" in stub_execution["setting"] and "results_dir" not in stub_execution["mpt_derivations"]
    with pytest.raises(SystemExit, match="unknown parameter\\(s\\) n_client for setting; valid: .*n_clients"):
        build.build("smoke", ["setting"], {"n_client": 3}, render=False, force=False, out=tmp_path)


def test_a_chapter_that_declares_cache_dir_gets_its_profiles_study_cache(stub_execution, tmp_path):
    assert "cache_dir" in build.notebook_parameters("mpt_experiments")
    assert "cache_dir" not in build.notebook_parameters("mpt_derivations")  # it runs no study: no cache
    build.build("smoke", ["mpt_experiments", "mpt_derivations"], {}, render=False, force=False)
    assert stub_execution["mpt_experiments"]["cache_dir"].endswith("book/_smoke/cache")  # the profile's own folder
    assert "cache_dir" not in stub_execution["mpt_derivations"]
    build.build("book", ["mpt_experiments"], {}, render=False, force=True)
    assert stub_execution["mpt_experiments"]["cache_dir"].endswith("book/cache")


def test_progress_names_each_chapter_its_rank_and_the_last_builds_time(stub_execution, tmp_path, capsys):
    two = ["setting", "mpt_derivations"]
    build.build("smoke", two, {}, render=False, force=False, out=tmp_path)
    first = capsys.readouterr().out
    assert "[plan]     2 chapter(s) to execute\n" in first  # no estimate before a first build
    assert "[execute]  setting  (1 of 2, 0 s elapsed)" in first
    assert "[execute]  mpt_derivations  (2 of 2, 0 s elapsed)" in first
    for name, seconds in zip(two, (65.4, 200.0)):  # as if the last builds took this long
        meta = tmp_path / "chapters" / f"{name}.json"
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "seconds": seconds}))
    build.build("smoke", two, {}, render=False, force=True, out=tmp_path)
    again = capsys.readouterr().out
    assert "[plan]     2 chapter(s) to execute; the last builds took 4 min 25 s" in again
    assert "(1 of 2, 0 s elapsed, last build 1 min 05 s)" in again
    assert build._minutes(38.4) == "38 s" and build._minutes(3600) == "60 min 00 s"


def test_staged_pages_hold_the_books_own_pages_and_toc(tmp_path):
    build.stage_pages(tmp_path)
    staged = {p.name for p in tmp_path.iterdir()}
    pages = [f for f in build.toc_files() if not f.startswith("chapters/")]
    assert {"_toc.yml", "references.bib", *(f"{f}.md" for f in pages)} <= staged
    assert not staged & {"build.py", "chapters", "results", "_build", "_smoke"}


def _glued_keys(nb) -> set[str]:
    keys = set()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            key = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if key:
                assert key not in keys, f"glue key {key!r} glued twice (the render refuses a duplicate key)"
                keys.add(key)
    return keys


@pytest.mark.notebook
@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_executes_at_smoke_profile_and_is_cached(name, smoke_out, capsys):
    # into the session's smoke build, which the browser tests then render
    assert build.build("smoke", [name], {}, render=False, force=False, out=smoke_out) == 0
    nb = nbformat.read(smoke_out / "chapters" / f"{name}.ipynb", as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    referenced = set()
    for piece in source.split("{glue:text}`")[1:]:
        referenced.add(piece.split("`", 1)[0].split(":", 1)[0])
    assert referenced <= _glued_keys(nb), f"prose references keys that were not glued: {referenced - _glued_keys(nb)}"
    if name.endswith("_experiments"):  # its claims table comes from fedbook.claims.show, shaded verdicts and all
        html = "".join("".join(o.get("data", {}).get("text/html", ""))  # a str or a list of lines
                       for cell in nb.cells for o in cell.get("outputs", []))
        assert 'class="claims-table"' in html, "an experiments chapter shows its claims with fedbook.claims.show"
        assert not re.search(r">\s*partly\s*<", html), "there is no 'partly' verdict any more"
        # every row, claim or control, links to the table or figure it reads: a MyST (label)= of this
        # chapter's prose, or a figure's name in a cell's mystnb metadata
        labels = set(re.findall(r"^\(([^)\s]+)\)=[ \t]*$", source, re.M)) | {
            c.metadata.get("mystnb", {}).get("figure", {}).get("name") for c in nb.cells} - {None}
        rows = re.findall(r'<tr id="(claim-[^"]*)"(.*?)</tr>', html, re.S)
        links = {anchor: re.findall(r'· reads <a href="#([^"]+)">', row) for anchor, row in rows}
        assert rows and all(links.values()), f"claims rows without evidence: {[a for a, t in links.items() if not t]}"
        unresolved = {a: t for a, t in links.items() if not set(t) <= labels}
        assert not unresolved, f"evidence links to no label of {name}: {unresolved}"
    # a table's text form is the table, not a memory address (a pandas Styler's), so that comparing
    # two builds' glued values (book/build.py --compare) reports only what changed
    addresses = [k for k, v in build.glued_values(smoke_out / "chapters" / f"{name}.ipynb").items()
                 if re.search(r" object at 0x[0-9a-f]+", v)]
    assert not addresses, f"glued values whose text is a memory address: {addresses}"
    meta = json.loads((smoke_out / "chapters" / f"{name}.json").read_text())
    assert meta["params"]["profile"] == "smoke"
    if name.endswith("_experiments"):  # the findings page reads these records, one per claims row
        assert meta["claims"] and {"verdict", "quote", "anchor"} <= set(meta["claims"][0])
    capsys.readouterr()
    assert build.build("smoke", [name], {}, render=False, force=False, out=smoke_out) == 0
    assert f"[cached]   {name}" in capsys.readouterr().out
    assert not list((smoke_out / "chapters").glob(".*.ipynb")), "a temporary file was left behind"


def test_unknown_profile_is_refused_before_executing(sandbox):
    with pytest.raises(SystemExit, match="unknown profile 'fast'; valid: smoke, book, paper"):
        build.build("fast", None, {}, render=False, force=False, out=sandbox)
    with pytest.raises(SystemExit, match="unknown chapter"):
        build.build("smoke", ["nope"], {}, render=False, force=False, out=sandbox)


@pytest.mark.notebook
def test_unknown_parameter_value_stops_the_notebook_with_a_clear_message(sandbox):
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match="unknown profile 'fast'"):
        build.execute_chapter(CHAPTERS[0], {"profile": "fast"}, sandbox / "x.ipynb")
    assert (sandbox / "x.failed.ipynb").exists() and not (sandbox / "x.ipynb").exists()


@pytest.mark.notebook
def test_a_misspelled_papermill_parameter_stops_the_notebook_before_any_work(sandbox):
    import papermill

    # build.py refuses it before papermill starts; papermill alone would inject it and warn only
    with pytest.raises(papermill.PapermillExecutionError, match=r"unknown parameter\(s\) sede; valid: .*seed"):
        build.execute_chapter("setting", {"profile": "smoke", "sede": 1}, sandbox / "x.ipynb")


@pytest.fixture
def project_copy(tmp_path, monkeypatch):
    """A copy of the notebooks, fedlib, fedbook and the requirements that build.py reads instead of the project's."""
    for part in ("notebooks", "fedlib", "book/fedbook"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "requirements.txt", tmp_path / "requirements.txt")
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(build, "NOTEBOOKS", tmp_path / "notebooks")
    return tmp_path


def test_cache_key_covers_parameters_fedlib_and_requirements(project_copy):
    tmp_path = project_copy
    name = "setting"  # a chapter that imports fedlib.metrics
    key = build.cache_key(name, {"profile": "book"})
    assert build.cache_key(name, {"profile": "book"}) == key
    assert build.cache_key(name, {"profile": "smoke"}) != key
    with open(tmp_path / "fedlib" / "metrics.py", "a") as f:
        f.write("\n# a change in the library\n")
    key2 = build.cache_key(name, {"profile": "book"})
    assert key2 != key
    with open(tmp_path / "requirements.txt", "a") as f:
        f.write("\n")
    assert build.cache_key(name, {"profile": "book"}) != key2


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("0.3", 0.3), ("[0.3, 0.1]", [0.3, 0.1]), ("None", None), ("cnn", "cnn")])
def test_parameter_values_parse_as_literals(text, value):
    assert build.parse_value(text) == value


def _inside_example() -> str:
    """The one Python code block of the page *Inside fedlib* (book/inside.md)."""
    text = (ROOT / "book" / "inside.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert len(blocks) == 1, f"expected one python block in book/inside.md, found {len(blocks)}"
    return blocks[0]


def test_the_inside_fedlib_example_runs_clips_and_equals_fedavg_without_a_bound(monkeypatch):
    import types

    import torch

    from fedlib.algorithms import FedAvg
    from fedlib.loop import LoopConfig
    from fedlib.run import run_federated
    from fedlib.messages import State
    from fedlib.protocol import MODEL, ClientContext

    module = types.ModuleType("inside_example")  # a real module: dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(_inside_example(), "book/inside.md", "exec"), module.__dict__)
    ns = module.__dict__
    summary = ns["run"].summary()
    assert 0.0 <= summary["global"] <= 1.0
    method, fed, model_fn = ns["method"], ns["fed"], ns["model_fn"]
    # every client's update respects the bound, and the server counts the clipped ones
    messages = method.configure_train(method.init_server(model_fn()), 1, range(fed.n_clients))
    clipped = 0
    for k, client in enumerate(fed.clients):
        ctx = ClientContext(client=k, round=1, model=model_fn(), n_classes=10)
        _, reply = method.local_update(ctx, State(), messages[k], client, torch.Generator().manual_seed(k))
        sq = sum(float(((reply.arrays[n] - messages[k].arrays[n]) ** 2).sum()) for n in reply.arrays
                 if n.startswith(MODEL) and reply.arrays[n].is_floating_point())
        assert sq ** 0.5 <= method.max_norm * (1 + 1e-6)
        clipped += bool(reply.meta["clipped"])
    assert 0 < clipped
    # the server's fold counts exactly the replies that say they were clipped, over every round
    from fedlib.engines import InProcessTransport

    said = []

    class Recording(InProcessTransport):
        def local_updates(self, algorithm, round_, messages, states):
            for k, state, up in super().local_updates(algorithm, round_, messages, states):
                said.append(bool(up.meta["clipped"]))
                yield k, state, up

    again = run_federated(method, fed, model_fn, LoopConfig(rounds=3, seed=0), transport=Recording(fed, model_fn, 0))
    assert again.server.meta["clipped"] == sum(said) == ns["run"].server.meta["clipped"] and len(said) == 3 * fed.n_clients
    # without a bound it is FedAvg, bit for bit
    config = LoopConfig(rounds=2, seed=1)
    unbounded = run_federated(ns["ClippedFedAvg"](train=method.train, max_norm=math.inf), fed, model_fn, config)
    fedavg = run_federated(FedAvg(train=method.train), fed, model_fn, config)
    assert unbounded.frame.equals(fedavg.frame)
    assert all(torch.equal(unbounded.server.arrays[n], fedavg.server.arrays[n]) for n in fedavg.server.arrays)


def test_a_chapter_that_reads_the_records_runs_last_and_its_key_covers_them(stub_execution, tmp_path, capsys):
    readers = [n for n in CHAPTERS if build.RECORDS in build.notebook_parameters(n)]
    assert readers == ["findings", "teaching", "deciding_cost"]
    build.build("smoke", ["teaching", "setting"], {}, render=False, force=False, out=tmp_path)
    assert list(stub_execution) == ["setting", "teaching"]  # in toc order teaching comes first
    records = stub_execution["teaching"][build.RECORDS]
    assert set(records) == set(build.PROFILES) and (build.NOTEBOOKS / records["smoke"]).resolve() == tmp_path / "chapters"
    assert build.RECORDS not in stub_execution["setting"]
    capsys.readouterr()
    build.build("smoke", ["teaching", "setting"], {}, render=False, force=False, out=tmp_path)
    again = capsys.readouterr().out
    assert "[cached]   setting" in again and "[cached]   teaching" in again
    # a new record of another chapter (its time changed) re-runs the teaching page, not the chapter
    meta = tmp_path / "chapters" / "setting.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "seconds": 99.0}))
    stub_execution.clear()
    build.build("smoke", ["teaching", "setting"], {}, render=False, force=False, out=tmp_path)
    assert list(stub_execution) == ["teaching"]


def test_readers_run_one_at_a_time_in_toc_order_and_a_later_readers_record_keeps_an_earlier_cached(
        stub_execution, tmp_path, capsys):
    build.build("smoke", ["teaching", "findings", "setting"], {}, render=False, force=False, out=tmp_path)
    assert list(stub_execution) == ["setting", "findings", "teaching"]
    capsys.readouterr()
    # the teaching page's record changes (it runs after the findings page): the findings page stays cached
    meta = tmp_path / "chapters" / "teaching.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "seconds": 42.0}))
    stub_execution.clear()
    build.build("smoke", ["teaching", "findings", "setting"], {}, render=False, force=False, out=tmp_path)
    assert list(stub_execution) == []  # the teaching page's own record is not in its key
    # the findings page's record changes: the teaching page (after it) re-runs, the findings page does not
    meta = tmp_path / "chapters" / "findings.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "seconds": 42.0}))
    build.build("smoke", ["teaching", "findings", "setting"], {}, render=False, force=False, out=tmp_path)
    assert list(stub_execution) == ["teaching"]


def test_the_claims_a_chapter_glued_are_copied_into_its_record(tmp_path):
    rows = [{"key": "c1", "verdict": "holds"}, {"key": "c2", "verdict": "inconclusive"}]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("glue", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/plain": repr(json.dumps(rows))},
        metadata={"scrapbook": {"name": "demo_claims_records", "mime_prefix": ""}})])])
    path = tmp_path / "c.ipynb"
    nbformat.write(nb, path)
    assert build.claims_of(path) == rows
    nbformat.write(nbformat.v4.new_notebook(), path)
    assert build.claims_of(path) is None


def test_the_injected_parameters_are_collapsed_on_the_page(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("profile = 'book'", metadata={"tags": ["parameters", "hide-input"]}),
        nbformat.v4.new_code_cell("# Parameters\nprofile = 'smoke'\n", metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("x = 1"),
    ])
    path = tmp_path / "c.ipynb"
    nbformat.write(nb, path)
    build.collapse_injected(path)
    tags = [c.metadata.get("tags", []) for c in nbformat.read(path, as_version=4).cells]
    assert tags == [["parameters", "hide-input"], ["injected-parameters", "hide-input"], []]


def test_a_handout_has_the_students_parameters_and_nothing_executed():
    import os
    import tempfile

    from fedlib.io import umask_mode

    with tempfile.TemporaryDirectory(dir=ROOT) as folder:  # inside the repository, as handouts/ana is
        old = os.umask(0o027)  # a group's umask: 0640, neither the 0644 of a fixed chmod nor mkstemp's 0600
        try:
            written = build.handout(["setting"], "smoke", {"seed": 7}, Path(folder) / "ana")
            mode = umask_mode()
        finally:
            os.umask(old)
        ana = Path(folder) / "ana"
        assert written == [ana / "student" / "setting.ipynb", ana / "teacher" / "setting.ipynb", ana / "teacher" / "answers.json"]
        assert not [p for p in ana.rglob(".*")]  # no temporary file left
        assert mode == 0o640 and all(p.stat().st_mode & 0o777 == mode for p in written)  # the umask's mode
        text = written[0].read_text()
        nb = nbformat.reads(text, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", ())]
    assert len(injected) == 1 and 'profile = "smoke"' in injected[0].source and "seed = 7" in injected[0].source
    assert "results_dir" not in injected[0].source and "results_dir" not in json.dumps(nb.metadata)
    assert str(ROOT) not in text and "output_path" not in text and "input_path" not in text  # no path of this machine
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    with pytest.raises(SystemExit, match=r"unknown parameter\(s\) sede for setting; valid: .*seed"):
        build.main(["--handout", "unused", "--only", "setting", "-p", "sede=7"])


def test_scrub_paths_leaves_no_path_of_the_building_machine(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "# Parameters\nprofile = \"smoke\"\nresults_dir = \"../book/_smoke/results/setting\"\n"
        "cache_dir = \"../book/_smoke/cache\"\n",
        metadata={"tags": ["injected-parameters", "hide-input"]})])
    nb.metadata["papermill"] = {"input_path": "/work/x/in.ipynb", "output_path": "/tmp/.setting.abc.ipynb",
                                "parameters": {"profile": "smoke", "results_dir": "../book/_smoke/results/setting",
                                               "cache_dir": "../book/_smoke/cache"}}
    path = tmp_path / "c.ipynb"
    nbformat.write(nb, path)
    build.scrub_paths(path)
    text = path.read_text()
    assert "results_dir" not in text and "cache_dir" not in text and "/tmp" not in text and "/work" not in text
    assert 'profile = \\"smoke\\"' in text


def _glue_notebook(path: Path, values: dict) -> None:
    from myst_nb import glue  # noqa: F401  (the format below is glue's)

    cells = [nbformat.v4.new_code_cell("glue(...)", outputs=[nbformat.v4.new_output(
        "display_data", data={"application/papermill.record/text/plain": repr(v)},
        metadata={"scrapbook": {"name": k, "mime_prefix": "application/papermill.record/"}})])
        for k, v in values.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)


def test_compare_lists_the_glued_values_that_differ(tmp_path, capsys, monkeypatch):
    _glue_notebook(tmp_path / "ref" / "chapters" / "setting.ipynb", {"acc": 91.25, "name": "FedAvg", "n": 20})
    _glue_notebook(tmp_path / "mine" / "chapters" / "setting.ipynb", {"acc": 91.5, "name": "FedAvg", "extra": 1})
    assert build.glued_values(tmp_path / "ref" / "chapters" / "setting.ipynb") == {
        "acc": "91.25", "name": "'FedAvg'", "n": "20"}
    rows, compared = build.compare(tmp_path / "ref", tmp_path / "mine")
    assert [(r["key"], r["reference"], r["yours"]) for r in rows] == [
        ("acc", "91.25", "91.5"), ("extra", None, "1"), ("n", "20", None)]
    assert compared == 4  # the keys of either side: acc, extra, n, name
    assert [r["key"] for r in build.compare(tmp_path / "ref", tmp_path / "mine", rtol=0.01)[0]] == ["extra", "n"]
    monkeypatch.setattr(build, "output_dir", lambda profile: tmp_path / "ref")
    assert build.main(["--compare", str(tmp_path / "mine")]) == 0
    out = capsys.readouterr().out
    assert "setting: acc: the book has 91.25, yours 91.5" in out and "1 of 4 glued values agree" in out
    with pytest.raises(SystemExit, match="no executed chapter"):
        build.compare(tmp_path / "ref", tmp_path / "empty")


def test_compare_reads_a_claims_table_claim_by_claim_and_leaves_out_claims_about_time(tmp_path):
    def records(anchor: str, acc: float, seconds: float) -> str:
        return json.dumps([
            {"key": "beats", "verdict": "holds", "mean": acc, "low": 0.5, "high": 2.0, "n": 3, "anchor": f"{anchor}_row0_col0"},
            {"key": "time-server", "verdict": "holds", "mean": seconds, "low": 1.0, "high": 9.0, "n": 3,
             "anchor": f"{anchor}_row1_col0"}])

    # another run: the table's anchors changed (its measured time did) and one claim's mean moved
    _glue_notebook(tmp_path / "ref" / "chapters" / "c.ipynb", {"x_claims_records": records("T_claims-aa", 1.25, 3.0)})
    _glue_notebook(tmp_path / "mine" / "chapters" / "c.ipynb", {"x_claims_records": records("T_claims-bb", 1.5, 4.0)})
    rows, compared = build.compare(tmp_path / "ref", tmp_path / "mine")
    assert [(r["key"], r["reference"], r["yours"]) for r in rows] == [("x_claims_records[beats].mean", "1.25", "1.5")]
    assert compared == len(build.CLAIMS_FIELDS)  # the time claim's fields are measurements, left out
    assert len(build.compare(tmp_path / "ref", tmp_path / "mine", skip=None)[0]) == 2


def _exercise_test(module: str | None) -> int:
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "FEDLIB_EXERCISE"}
    if module:
        env["FEDLIB_EXERCISE"] = module
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "book" / "exercises")]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True).returncode


def test_the_write_your_own_method_exercise_fails_as_handed_out_and_passes_when_solved():
    assert _exercise_test(None) == 1  # the skeleton raises NotImplementedError: every test fails
    assert _exercise_test("fedavgm_solution") == 0


def test_every_exercise_is_marked_and_has_a_hint_and_a_worked_solution():
    from fedbook.catalog import EXERCISE_KINDS, exercises

    problems, total = [], 0
    for name in CHAPTERS:
        source = ROOT / "notebooks" / f"{name}.py"
        table = exercises(source)
        total += len(table)
        for row in table.itertuples(index=False):
            if row.kind not in EXERCISE_KINDS:
                problems.append(f"{name} exercise {row.exercise}: not marked *(parameters only)* or *(code)*")
        text = source.read_text()
        section = text.split("# ## Exercises", 1)[1] if "# ## Exercises" in text else ""
        if name == "teaching":
            section = text.split("## Exercise: write your own method", 1)[1]
        hints, solutions = section.count(":::{dropdown} Hint"), section.count(":::{dropdown} Worked solution")
        expected = max(len(table), 1 if name == "teaching" else 0)
        if hints != expected or solutions != expected:
            problems.append(f"{name}: {expected} exercise(s), {hints} hint(s), {solutions} worked solution(s)")
    assert total >= 14 and not problems, "\n".join(problems)


def _bookweb():
    spec = importlib.util.spec_from_file_location("bookweb", ROOT / "book" / "_ext" / "bookweb.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(bookweb, theme_options: dict, pagename: str = "chapters/setting") -> list[dict]:
    import types

    app = types.SimpleNamespace(config=types.SimpleNamespace(html_theme_options=theme_options))
    context = {"header_buttons": [{"type": "group", "label": "download-buttons", "buttons": [{"label": "ipynb"}]}],
               "pathto": lambda target, resource=0: f"../{target}", "default_mode": "auto"}
    bookweb._page_context(app, pagename, "page.html", context, None)
    return context["header_buttons"]


def test_a_chapter_offers_its_jupytext_source_and_binder_only_with_a_repository():
    bookweb = _bookweb()
    buttons = _page(bookweb, {"repository_url": ""})
    assert [b["label"] for b in buttons] == ["download-buttons"]  # no launch button without a repository
    assert buttons[0]["buttons"][1]["url"] == "../_sources/chapters/setting.py"
    buttons = _page(bookweb, {"repository_url": "https://github.com/someone/fedbook/", "repository_branch": "dev"})
    launch = [b for b in buttons if b["label"] == "launch-buttons"]
    assert launch[0]["buttons"][0]["url"] == \
        "https://mybinder.org/v2/gh/someone/fedbook/dev?urlpath=lab%2Ftree%2Fnotebooks%2Fsetting.py"
    assert _page(bookweb, {"repository_url": "https://example.org/fedbook"})[-1]["label"] == "download-buttons"
    assert _page(bookweb, {"repository_url": "https://github.com/a/b"}, "intro") == \
        [{"type": "group", "label": "download-buttons", "buttons": [{"label": "ipynb"}]}]  # not a chapter
    import types

    config = types.SimpleNamespace(html_theme_options={"repository_url": "https://github.com/a/b"})
    bookweb._config(None, config)
    assert config.html_theme_options["use_repository_button"] is True
    config = types.SimpleNamespace(html_theme_options={"repository_url": ""})
    bookweb._config(None, config)
    assert config.html_theme_options["use_repository_button"] is False


def test_the_cache_key_covers_the_modules_a_chapter_imports_and_no_other(project_copy):
    tmp_path = project_copy
    used = {p.relative_to(tmp_path).as_posix() for p in build.chapter_modules("mpt_derivations")}
    # what the chapter imports, what that imports, and the packages on the way (the book's tooling,
    # fedbook.page, imports fedbook.claims for its claims report: every chapter runs it)
    assert {"fedlib/__init__.py", "book/fedbook/page.py", "book/fedbook/checks.py", "book/fedbook/claims.py", "fedlib/tracking.py",
            "fedlib/heads/__init__.py", "fedlib/heads/base.py", "fedlib/rng.py"} <= used
    assert "fedlib/geometry.py" not in used and "fedlib/loop.py" not in used and "fedlib/data/datasets.py" not in used
    key = build.cache_key("mpt_derivations", {"profile": "book"})
    with open(tmp_path / "fedlib" / "geometry.py", "a") as f:  # a module the chapter never runs
        f.write("\n# unrelated\n")
    assert build.cache_key("mpt_derivations", {"profile": "book"}) == key
    with open(tmp_path / "fedlib" / "tracking.py", "a") as f:  # one it imports
        f.write("\n# related\n")
    assert build.cache_key("mpt_derivations", {"profile": "book"}) != key


def test_a_change_to_one_papers_module_reruns_only_that_papers_chapters():
    """``fedlib.algorithms`` imports lazily, so a chapter that imports FedAvg from it does not
    depend on MPT's or GGEUR's module (the build follows the package's ``_LAZY`` map)."""
    papers = {"fedlib/algorithms/mpt.py": "mpt", "fedlib/tracking.py": "mpt", "fedlib/algorithms/ggeur.py": "ggeur",
              "fedlib/geometry.py": "ggeur", "fedlib/algorithms/fedgrc.py": "fedgrc", "fedlib/cgrl.py": "fedgrc"}
    uses = {name: {p.relative_to(ROOT).as_posix() for p in build.chapter_modules(name)} for name in CHAPTERS}
    for module, paper in papers.items():
        hit = {name for name, used in uses.items() if module in used}
        # the performance page lists every registered method (fedlib.algorithms.ALGORITHMS), the
        # Flower page runs any of them by name, and the leaderboard runs every one of them
        every = {"performance", "flower", "leaderboard"}
        assert hit - every and all(name.startswith(paper) for name in hit - every), (module, hit)
    assert "fedlib/algorithms/fedavg.py" in uses["setting"] and "fedlib/algorithms/mpt.py" not in uses["setting"]


def test_the_lazy_registry_gives_every_method_and_its_modules_on_demand():
    import fedlib.algorithms as algorithms

    assert algorithms.make_algorithm("fedavg").name == "fedavg"
    assert set(algorithms.ALGORITHMS) >= {"fedavg", "mpt", "cgrl", "ggeur"}
    assert algorithms.ggeur.LinearClassifier.__module__ == "fedlib.algorithms.ggeur"
    with pytest.raises(AttributeError, match="has no attribute 'FedNothing'"):
        algorithms.FedNothing  # noqa: B018
    with pytest.raises(ValueError, match="unknown algorithm 'nope'; valid: cgrl, comet, cosmos, ditto"):
        algorithms.make_algorithm("nope")


@pytest.mark.notebook
def test_a_parallel_build_gives_the_bits_of_a_sequential_one(tmp_path):
    import subprocess

    two = ["fedgrc_cgrl", "mpt_derivations"]
    for folder, jobs in (("parallel", "2"), ("sequential", "1")):
        cmd = [sys.executable, str(ROOT / "book" / "build.py"), "--profile", "smoke", "--only", *two,
               "--out", str(tmp_path / folder), "-j", jobs]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (", 2 at a time" in done.stdout) == (jobs == "2")
        assert all((tmp_path / folder / "chapters" / f"{n}.json").exists() for n in two)
    rows, compared = build.compare(tmp_path / "sequential", tmp_path / "parallel")
    assert rows == [] and compared > 10
    with pytest.raises(SystemExit, match="jobs and threads must be >= 1"):
        build.build("smoke", two, {}, render=False, force=False, out=tmp_path / "x", jobs=0)
