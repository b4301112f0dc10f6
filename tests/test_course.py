"""A course from the book (``fedbook.course``): every exercise has an answer declaration; the
student's version of every chapter with exercises holds no worked solution or hint; the
prediction interval is the one written on the teaching page; grading a folder with a correct, a
wrong and a crashing submission for every declared exercise gives the right marks and says what
crashed; code is tested apart from the student's kernel (a notebook cannot point the tests at the
worked solution), a test file that cannot be collected is said, and a teacher's own hidden tests
are used; a handout shows the build's numbers at the profile's own values; every declared answer
is glued by its chapter at the smoke profile and checked right and wrong."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest

from fedbook.catalog import exercises
from fedbook.course import (ANSWER_TAG, EXERCISES, SOLUTION_TAG, Exercise, as_number, check, declared, glued_answer,
                            grade, prediction_interval, references, solution_texts, student_version,
                            write_handout)

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("book_build_course", ROOT / "book" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

WITH_EXERCISES = [n for n in build.chapter_names() if declared(n)]


def _exercise_cells(name: str):
    import jupytext

    nb = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    inside, out = False, []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("## "):
                    inside = line[3:].lower().startswith("exercise")
        out.append((inside, cell))
    return nb, out


def test_every_exercise_has_an_answer_declaration():
    for name in build.chapter_names():
        listed = exercises(ROOT / "notebooks" / f"{name}.py")["exercise"].tolist()
        if name == "teaching":
            listed = [1]  # its one exercise is the section "Exercise: write your own method"
        assert [e.number for e in declared(name)] == listed, name
    assert len({(e.chapter, e.number) for e in EXERCISES}) == len(EXERCISES)
    assert {e.chapter for e in EXERCISES} <= set(build.chapter_names())
    sources = "\n".join(p.read_text() for p in [*(ROOT / "book" / "fedbook").rglob("*.py"),
                                                *(ROOT / "notebooks").glob("*.py")])
    for e in EXERCISES:
        if e.kind == "code":
            assert all((ROOT / f).exists() for f in (e.skeleton, *e.public, *e.hidden, e.solution)), e
            continue
        # the glued key is written in the book's code: literally, or as an f-string's head ("ex2_spread_{m}")
        head = e.key.rsplit("_", 1)[0] + "_{"
        assert f'"{e.key}"' in sources or head in sources, f"{e.chapter} {e.number}: no glued {e.key}"
        assert set(e.params) <= set(build.notebook_parameters(e.chapter)), e


def test_every_code_cell_of_an_exercises_section_is_marked_as_a_solution():
    for name in WITH_EXERCISES:
        _, cells = _exercise_cells(name)
        for inside, cell in cells:
            if cell.cell_type == "code":
                assert (SOLUTION_TAG in cell.metadata.get("tags", ())) == inside, (name, cell.source[:80])


def test_student_versions_hold_no_solution_or_hint_and_teacher_versions_all(tmp_path):
    written = build.handout(WITH_EXERCISES, "smoke", {"seed": 3}, tmp_path / "course")
    hinted = build.handout(["setting"], "smoke", {"seed": 3}, tmp_path / "hinted", hints=True)
    student, teacher = tmp_path / "course" / "student", tmp_path / "course" / "teacher"
    assert {p.name for p in student.glob("*.ipynb")} == {f"{n}.ipynb" for n in WITH_EXERCISES}
    assert {p.name for p in (student / "exercises").iterdir()} == {"fedavgm.py", "test_fedavgm.py"}
    assert {p.name for p in (teacher / "exercises").iterdir()} == {"fedavgm_solution.py", "test_fedavgm.py",
                                                                   "test_fedavgm_hidden.py"}
    assert all(p in written for p in [teacher / "answers.json", student / "setting.ipynb"])
    for name in WITH_EXERCISES:
        source = (ROOT / "notebooks" / f"{name}.py").read_text()
        secret = [line for line in solution_texts(source) if "{" not in line and "`" not in line]
        assert secret, name  # the check below reads real text
        nb = nbformat.read(student / f"{name}.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert not [c for c in nb.cells if SOLUTION_TAG in c.metadata.get("tags", ())], name
        assert "Worked solution" not in text and "Hint" not in text, name
        leaked = [line for line in secret if line in text]
        assert not leaked, f"{name}: {leaked[:3]}"
        assert "{glue" not in text and not re.search(r"^(```|:::)\{", text, re.M), name  # nothing MyST shows raw
        answers = [c for c in nb.cells if ANSWER_TAG in c.metadata.get("tags", ())]
        assert len(answers) == len(declared(name)), name
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
        full = "\n".join(c.source for c in nbformat.read(teacher / f"{name}.ipynb", as_version=4).cells)
        assert full.count(":::{dropdown} Worked solution") == len(declared(name)), name
    hint_text = "\n".join(c.source for c in nbformat.read(tmp_path / "hinted" / "student" / "setting.ipynb",
                                                          as_version=4).cells)
    assert hint_text.count("**Hint.**") == 4 and "Worked solution" not in hint_text
    spec = json.loads((teacher / "answers.json").read_text())
    assert spec["params"]["setting"] == {"profile": "smoke", "seed": 3}
    assert len(spec["exercises"]) == sum(len(declared(n)) for n in WITH_EXERCISES)
    assert hinted  # the command wrote something


def test_the_prediction_interval_by_hand():
    # five seeds 1..5: mean 3, s = sqrt(2.5), t(0.975, 4) = 2.776445, sqrt(1 + 1/5): half-width 4.80894
    lo, hi = prediction_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert lo == pytest.approx(3 - 4.80894, abs=1e-4) and hi == pytest.approx(3 + 4.80894, abs=1e-4)
    assert prediction_interval([7.0, 7.0], floor=0.25) == (6.75, 7.25)  # no spread: the declared floor
    assert prediction_interval([1.0, 2.0, 3.0, 4.0, 5.0], floor=10.0) == (-7.0, 13.0)
    with pytest.raises(ValueError, match="needs numbers"):
        prediction_interval([])
    number = Exercise("c", 1, "number", "x", key="k", floor=0.25)
    assert check(number, "3.1", ["1.0", "2.0", "3.0", "4.0", "5.0"])[0]
    assert not check(number, 7.9, ["1.0", "2.0", "3.0", "4.0", "5.0"])[0]
    assert not check(number, "a lot", ["1.0", "2.0"])[0] and not check(number, True, ["1.0"])[0]
    with pytest.raises(ValueError, match="kind 'essay'"):
        Exercise("c", 1, "essay", "x", key="k")


def _glued_cell(values: dict) -> nbformat.NotebookNode:
    """A code cell whose outputs are what ``myst_nb.glue`` leaves for each ``values`` key."""
    prefix = "application/papermill.record/"
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data={prefix + "text/plain": repr(v)},
                                           metadata={"scrapbook": {"name": k, "mime_prefix": prefix}})
                    for k, v in values.items()]
    return cell


SETTING_REFERENCE = {"ex1_iid": [40.0, 42.0, 44.0], "ex2_spread_fedavg": [5.0, 5.0, 5.0],
                     "ex3_skew_change": [-3.0, -1.0, 1.0], "ex4_f25_change": [-10.0, -12.0, -14.0]}
"""Hand-made references of the setting chapter's four exercises on three seeds (the grading test's)."""


PICKED = {("findings", 1): "Of the 9 rows both builds have, {} change verdict",
          ("findings", 2): "3 open claims rest on few seeds, and {} would need at most twice the seeds",
          ("mpt_experiments", 4): "{}, with the fewest steps",
          ("cosmos_derivations", 3): "The smallest m with a counterexample in this search is {}."}
"""How the worked solutions of the exercises read with ``pick`` glue their answer (a sentence around it)."""

OUTCOMES = ("right", "wrong", "crash")


def _reference(e: Exercise) -> tuple[list, object]:
    """Hand-made values of ``e``'s worked solution on three seeds (what it glues), and the right answer."""
    if e.chapter == "setting":
        values = SETTING_REFERENCE[e.key]
        return values, sum(values) / len(values)
    if e.kind == "choice":
        right = f"variant {e.number}"
        return [PICKED.get((e.chapter, e.number), "{}").format(right)] * 3, right
    right = 10 * e.number + 3
    text = PICKED.get((e.chapter, e.number))
    return ([text.format(right)] * 3 if text else [float(right)] * 3), right


def _answer(e: Exercise, outcome: str, right) -> str:
    """The answer cell's source of ``e`` for a right, a wrong or a crashing submission."""
    if outcome == "crash":
        return f"raise ValueError('crash {e.chapter} {e.number}')"
    if e.kind == "code":
        solution = (ROOT / "book" / "exercises" / "fedavgm_solution.py").read_text()
        # a classic wrong answer: the first round reads a velocity that does not exist yet (its tests fail fast)
        wrong = solution.replace("server.arrays[key] + delta if key in server.arrays else delta", "server.arrays[key] + delta")
        assert wrong != solution
        return solution if outcome == "right" else wrong
    if outcome == "right":
        return f"{e.variable} = {right!r}"
    return f"{e.variable} = {right + 100 + 10 * e.floor!r}" if e.kind == "number" else f"{e.variable} = 'none of these'"


def _handout(folder: Path, chapters) -> tuple[Path, Path]:
    """A handout of small notebooks: each chapter's parameters cell only (and its answer cells)."""
    prepared = {c: nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "profile = 'smoke'\nseed = 0", metadata={"tags": ["parameters"]})]) for c in chapters}
    write_handout(prepared, {c: {"profile": "smoke"} for c in chapters}, folder, ROOT)
    return folder / "teacher", folder / "student"


def _fill(student: Path, chapter: str, answers: dict[int, str], body: str | None = None) -> nbformat.NotebookNode:
    """The handed-out small notebook of ``chapter`` with its answer cells filled (exercise -> the
    cell's source) and ``body`` as a chapter cell before them."""
    nb = nbformat.read(student / f"{chapter}.ipynb", as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.get("tags", ())
        if ANSWER_TAG in tags:
            number = int(next(t for t in tags if t.startswith("exercise-")).split("-")[1])
            cell.source = answers.get(number, cell.source)
    if body is not None:
        nb.cells.insert(1, nbformat.v4.new_code_cell(body))
    return nb


@pytest.mark.notebook
def test_grading_marks_every_exercise_right_wrong_and_crashed(tmp_path):
    teacher, student = _handout(tmp_path / "course", WITH_EXERCISES)
    refs = {(e.chapter, e.number): _reference(e) for e in EXERCISES}
    for chapter in WITH_EXERCISES:  # the references cached as a grading computes them: hand-made values here
        groups = {}
        for e in declared(chapter):
            if e.kind != "code":
                groups.setdefault(json.dumps(dict(e.params), sort_keys=True), []).append(e)
        for at, group in groups.items():
            def execute(nb, params, out, cwd, group=group):
                values = {e.key: refs[(e.chapter, e.number)][0][params["seed"]] for e in group}
                nbformat.write(nbformat.v4.new_notebook(cells=[_glued_cell(values)]), out)

            references(chapter, {"profile": "smoke", **json.loads(at)}, [e.key for e in group],
                       source=teacher / f"{chapter}.ipynb", cache=teacher / "references", cwd=ROOT / "notebooks",
                       seeds=(0, 1, 2), execute=execute)
    subs = tmp_path / "submissions"
    expected = {}
    for r in range(3):  # three students: exercise i of a chapter is right, wrong or crashes by (i + r) mod 3
        (subs / f"s{r}").mkdir(parents=True)
        for chapter in WITH_EXERCISES:
            answers = {}
            for i, e in enumerate(declared(chapter)):
                outcome = OUTCOMES[(i + r) % 3]
                answers[e.number] = _answer(e, outcome, refs[(e.chapter, e.number)][1])
                expected[(f"s{r}", chapter, e.number)] = outcome
            nbformat.write(_fill(student, chapter, answers), subs / f"s{r}" / f"{chapter}.ipynb")
    (subs / "t").mkdir()  # a crash in the chapter before the answers marks them all, naming the cell
    nbformat.write(_fill(student, "setting", {}, body="raise ValueError('my data went missing')"),
                   subs / "t" / "setting.ipynb")
    table = grade(teacher, subs, root=ROOT, timeout=300, seeds=(0, 1, 2), log=lambda line: None)
    got = {(r.student, r.chapter, r.exercise): r for r in table.itertuples()}
    assert len({(c, n) for _, c, n in expected}) == len(EXERCISES) == 30
    for key, outcome in expected.items():
        row, e = got[key], next(x for x in declared(key[1]) if x.number == key[2])
        assert row.mark == (outcome == "right"), (key, outcome, row.message)
        if outcome == "crash":
            assert row.message == f"crashed: ValueError: crash {key[1]} {key[2]}", key
        elif outcome == "wrong":
            said = {"number": "outside the accepted interval", "choice": "not among the accepted values",
                    "code": "failed: "}[e.kind]
            assert row.message == said or (e.kind == "code" and row.message.startswith(said)), (key, row.message)
        else:
            assert row.message == "", key
    assert "test_one_round_by_hand" in next(r.message for k, r in got.items() if expected.get(k) == "wrong"
                                            and k[1] == "teaching")
    assert {(n, got[("t", "setting", n)].message) for n in range(1, 5)} == {
        (n, "crashed: the notebook stopped at cell 2: ValueError: my data went missing") for n in range(1, 5)}
    assert all(r.message == "no teaching.ipynb submitted" and r.mark == 0 for k, r in got.items()
               if k[:2] == ("t", "teaching"))
    accepted = {k[2]: r.accepted for k, r in got.items() if k[1] == "setting" and expected.get(k) == "right"}
    assert accepted[2] == "[4.50, 5.50]"  # no spread over the seeds: 5 ± the declared floor of half a point
    assert accepted[1] == "[32.1, 51.9]"  # 42 ± t(0.975, 2) 4.303 × s 2 × sqrt(4/3) = 9.94


@pytest.mark.notebook
def test_code_is_graded_apart_from_the_students_kernel_and_a_collection_error_said(tmp_path):
    teacher, student = _handout(tmp_path / "course", ["teaching"])
    wrong = _answer(declared("teaching")[0], "wrong", None)
    subs = tmp_path / "submissions"
    cases = {  # a wrong class that points the tests at the worked solution; a cell that leans on another cell's import
        "cheat": wrong + "\nimport os\nos.environ['FEDLIB_EXERCISE'] = 'fedavgm_solution'\n",
        "noimport": "class FedAvgM(fedlib.algorithms.FedAvg):\n    pass\n"}
    cases["right"] = _answer(declared("teaching")[0], "right", None)
    for who, source in cases.items():
        (subs / who).mkdir(parents=True)
        nb = _fill(student, "teaching", {1: source}, body="import fedlib.algorithms")
        nbformat.write(nb, subs / who / "teaching.ipynb")
    own = tmp_path / "own-hidden"  # a teacher's own hidden tests, kept outside the handout: one the solution fails
    own.mkdir()
    hidden_tests = (ROOT / "book" / "exercises" / "hidden" / "test_fedavgm_hidden.py").read_text()
    (own / "test_fedavgm_hidden.py").write_text(hidden_tests + "\n\ndef test_kept_by_the_teacher():\n    assert False\n")
    table = grade(teacher, subs, root=ROOT, timeout=300, seeds=(0, 1, 2), log=lambda line: None, hidden=own)
    got = {r.student: r for r in table.itertuples()}
    assert got["right"].mark == 0 and got["right"].message == "failed: test_kept_by_the_teacher"
    assert got["cheat"].mark == 0 and "test_one_round_by_hand" in got["cheat"].message
    assert "not collected: test_fedavgm_hidden.py: ModuleNotFoundError: No module named 'fedavgm_solution'" in got["cheat"].message
    assert got["noimport"].mark == 0 and got["noimport"].answer == "0/0 tests passed"
    assert got["noimport"].message.startswith("no test ran: test_fedavgm.py: NameError: name 'fedlib' is not defined")


def test_a_handout_shows_the_builds_numbers_at_the_profiles_own_values(tmp_path, monkeypatch):
    # the smoke profile fills rounds = None with 2 (setting's PROFILES): a student who passes -p rounds=2 runs the build's chapter
    assert build.parameter_defaults("setting", "smoke")["rounds"] == 2
    built = tmp_path / "_smoke" / "chapters"
    built.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[_glued_cell({"n_clients": 4})]), built / "setting.ipynb")
    (built / "setting.json").write_text(json.dumps({"params": {"profile": "smoke"}}))
    monkeypatch.setattr(build, "output_dir", lambda profile: tmp_path / f"_{profile}")
    for overrides, placeholder in (({"rounds": 2}, False), ({"rounds": 3}, True)):
        build.handout(["setting"], "smoke", overrides, tmp_path / "course")
        text = "\n".join(c.source for c in nbformat.read(tmp_path / "course" / "student" / "setting.ipynb",
                                                         as_version=4).cells if c.cell_type == "markdown")
        assert ("[n_clients]" in text) == placeholder, overrides  # the build's 4 clients, or a placeholder


def test_references_execute_the_teachers_notebook_once_per_seed_and_parameters(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("seed = 0\nprofile = 'book'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("from myst_nb import glue\nglue('x', 2.5 * seed + (profile == 'smoke'), display=False)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "c.ipynb")
    got = references("c", {"profile": "smoke", "seed": 9}, ["x"], source=tmp_path / "c.ipynb", cache=tmp_path / "refs",
                     cwd=tmp_path, seeds=(0, 1))
    assert {s: as_number(glued_answer(v["x"])) for s, v in got.items()} == {0: 1.0, 1: 3.5}

    def refuse(*args):
        raise AssertionError("executed again")

    again = references("c", {"profile": "smoke", "seed": 4}, ["x"], source=tmp_path / "c.ipynb",
                       cache=tmp_path / "refs", cwd=tmp_path, seeds=(0, 1), execute=refuse)
    assert again == got  # the student's own seed is not the reference's: the same parameters, read back


@pytest.mark.notebook
@pytest.mark.parametrize("name", WITH_EXERCISES)
def test_every_declared_answer_is_glued_at_the_smoke_profile_and_checked(name, smoke_out):
    # the chapter as the book's smoke test executes it (test_book.py's session build; cached here)
    assert build.build("smoke", [name], {}, render=False, force=False, out=smoke_out) == 0
    values = build.glued_values(smoke_out / "chapters" / f"{name}.ipynb")
    for e in declared(name):
        if e.kind == "code":
            continue
        assert e.key in values, f"{name} exercise {e.number}: {e.key} not glued"
        if e.pick and not re.search(e.pick, values[e.key]):  # the findings page compares with another
            assert name == "findings" and "build" in values[e.key]  # profile's build, which this machine may lack
            continue
        answer = glued_answer(values[e.key], e.pick)
        if e.kind == "number":
            value = as_number(answer)
            assert check(e, value, [values[e.key]])[0]
            assert not check(e, value + 3 * e.floor, [values[e.key]])[0]
        else:
            assert check(e, answer.upper(), [values[e.key]])[0] and not check(e, answer + " not", [values[e.key]])[0]
