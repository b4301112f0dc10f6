"""A course from the book (``fedbook.course``): every exercise has an answer declaration; the
student's version of every chapter with exercises holds no worked solution or hint; the
prediction interval is the one written on the teaching page; grading a folder with a correct, a
wrong and a crashing submission per exercise gives the right marks and says what crashed; every
declared answer is glued by its chapter at the smoke profile and checked right and wrong."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest

from fedbook.catalog import exercises
from fedbook.course import (ANSWER_TAG, EXERCISES, SOLUTION_TAG, Exercise, as_number, check, declared, glued_answer,
                            grade, prediction_interval, references, solution_texts, student_version)

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


def _submission(handout: Path, chapter: str, answers: dict[int, str], body: str | None = None) -> nbformat.NotebookNode:
    """A small submission: the handed-out notebook's injected parameters and answer cells (filled
    with ``answers``: exercise -> cell source), and ``body`` as a chapter cell before them."""
    nb = nbformat.read(handout / f"{chapter}.ipynb", as_version=4)
    kept = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", ())]
    if body is not None:
        kept.append(nbformat.v4.new_code_cell(body))
    for cell in nb.cells:
        tags = cell.metadata.get("tags", ())
        if ANSWER_TAG in tags:
            number = int(next(t for t in tags if t.startswith("exercise-")).split("-")[1])
            cell.source = answers.get(number, cell.source)
            kept.append(cell)
    nb.cells = kept
    return nb


@pytest.mark.notebook
def test_grading_a_folder_marks_right_wrong_and_crashed_answers(tmp_path):
    build.handout(["setting", "teaching"], "smoke", {"seed": 3}, tmp_path / "course")
    teacher, student = tmp_path / "course" / "teacher", tmp_path / "course" / "student"

    def execute(nb, params, out, cwd):  # the chapter with its solutions, at a reference seed: hand-made values
        i = [0, 1, 2].index(params["seed"])
        nbformat.write(nbformat.v4.new_notebook(cells=[_glued_cell({k: v[i] for k, v in SETTING_REFERENCE.items()})]), out)

    references("setting", {"profile": "smoke", "seed": 3}, SETTING_REFERENCE, source=teacher / "setting.ipynb",
               cache=teacher / "references", cwd=ROOT / "notebooks", seeds=(0, 1, 2), execute=execute)
    solution = (ROOT / "book" / "exercises" / "fedavgm_solution.py").read_text()
    # a classic wrong answer: the first round reads a velocity that does not exist yet (its tests fail fast)
    no_first_round = solution.replace("server.arrays[key] + delta if key in server.arrays else delta",
                                      "server.arrays[key] + delta")
    assert no_first_round != solution
    subs = tmp_path / "submissions"
    right = {1: "answer_1 = 42.5", 2: "answer_2 = 5.1", 3: "answer_3 = -1", 4: "answer_4 = '-12 points'"}
    wrong = {1: "answer_1 = 80.0", 2: "answer_2 = 'five'", 3: "answer_3 = 12.0", 4: "answer_4 = None"}
    for who, setting, teaching in (
            ("ana", _submission(student, "setting", right), _submission(student, "teaching", {1: solution})),
            ("ben", _submission(student, "setting", wrong), _submission(student, "teaching", {1: no_first_round})),
            ("cy", _submission(student, "setting", right, body="raise ValueError('my data went missing')"),
             _submission(student, "teaching", {1: "raise RuntimeError('unfinished')"}))):
        (subs / who).mkdir(parents=True)
        nbformat.write(setting, subs / who / "setting.ipynb")
        nbformat.write(teaching, subs / who / "teaching.ipynb")
    table = grade(teacher, subs, root=ROOT, timeout=300, seeds=(0, 1, 2), log=lambda line: None)
    marks = {(r.student, r.chapter, r.exercise): r.mark for r in table.itertuples()}
    assert marks == {**{("ana", c, n): 1 for c, ns in (("setting", range(1, 5)), ("teaching", [1])) for n in ns},
                     **{("ben", c, n): 0 for c, ns in (("setting", range(1, 5)), ("teaching", [1])) for n in ns},
                     **{("cy", c, n): 0 for c, ns in (("setting", range(1, 5)), ("teaching", [1])) for n in ns}}
    msg = {(r.student, r.chapter, r.exercise): r.message for r in table.itertuples()}
    assert msg[("cy", "setting", 2)] == "crashed: the notebook stopped at cell 2: ValueError: my data went missing"
    assert msg[("cy", "teaching", 1)] == "crashed: RuntimeError: unfinished"
    assert msg[("ben", "setting", 2)] == "not a number: 'five'"
    assert msg[("ben", "setting", 1)] == "outside the accepted interval" and msg[("ben", "setting", 4)] == "no answer given"
    assert msg[("ben", "teaching", 1)].startswith("failed: ") and "test_one_round_by_hand" in msg[("ben", "teaching", 1)]
    accepted = {r.exercise: r.accepted for r in table.itertuples() if r.student == "ana" and r.chapter == "setting"}
    assert accepted[2] == "[4.50, 5.50]"  # no spread over the seeds: 5 ± the declared floor of half a point
    assert accepted[1] == "[32.1, 51.9]"  # 42 ± t(0.975, 2) 4.303 × s 2 × sqrt(4/3) = 9.94


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
