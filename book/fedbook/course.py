r"""A course from the book: every exercise's answer declared once, student and teacher versions of
a chapter, and the grading of submitted notebooks.

**Where an exercise's answer is marked.** In a chapter's jupytext source (``notebooks/<name>.py``)
an exercise's hint and worked solution are the MyST blocks ``:::{dropdown} Hint`` and
``:::{dropdown} Worked solution`` the book renders folded; the code cells that compute the worked
solutions carry the cell tag :data:`SOLUTION_TAG`. What a correct answer is lives here, in
:data:`EXERCISES`: one :class:`Exercise` per exercise of the book, of one of three kinds
(:data:`KINDS`):

- ``"number"``: the student sets ``answer_<n>`` to a number; the reference is the number the
  worked solution glues (its key ``key``, read with ``pick`` where it sits in a sentence),
  computed by executing the chapter with its solutions at the student's parameters for each
  seed of :data:`REFERENCE_SEEDS`; the answer is accepted inside the prediction interval of one
  more seed (:func:`prediction_interval`), never narrower than the declared ``floor``;
- ``"choice"``: the student sets ``answer_<n>`` to a word or phrase the worked solution glues;
  accepted when it equals (case and surrounding spaces aside) the value of one of those seeds;
- ``"code"``: the student writes the object ``name`` in the answer cell; the public tests
  (handed out) and the hidden tests (in the teacher's folder, or a folder of the teacher's own:
  they are in the book's public repository) run against it, in a process of their own
  (:func:`run_code_tests`).

**Versions.** :func:`student_version` removes the worked solutions, the hints (or keeps the
hints, converted to plain markdown) and the solution cells, renders the glue roles and MyST
directives Jupyter would show raw (:func:`plain_markdown`) and appends one answer cell per
exercise (:func:`answer_cells`); :func:`teacher_version` keeps everything and appends the same
cells. ``book/build.py --handout`` writes both, with the graders (:func:`write_handout`).

**Grading.** :func:`grade` executes each submitted notebook with papermill in a fresh kernel,
each cell under a time limit, with every answer cell guarded so that one crash marks only its
exercise, and reads the answers back (:func:`grade_notebook`); the references are computed on
demand and cached per chapter and parameters in the teacher's folder (:func:`references`).
``book/grade.py`` is its command.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
from scipy import stats

from fedbook.catalog import chapter_title, exercises, record_seconds
from fedlib.io import atomic_write_text

KINDS = ("number", "choice", "code")
"""What an exercise's answer is: a number within a prediction interval over seeds, a word or
phrase among the values the seeds give, or code checked by tests."""

SOLUTION_TAG = "solution"
"""The cell tag of a code cell that computes a worked solution: left out of a student's notebook."""

ANSWER_TAG = "answer"
"""The cell tag of an answer cell (:func:`answer_cells`): the cells the grader guards and reads."""

REFERENCE_SEEDS = (0, 1, 2, 3, 4)
"""The seeds at which a number's reference is computed (the chapter executed with its solutions at
the student's parameters, ``seed`` set to each): five values of the worked solution's number."""

LEVEL = 0.95
"""The prediction interval's level."""


@dataclass(frozen=True)
class Exercise:
    """One exercise's answer declaration.

    Parameters
    ----------
    chapter, number
        The chapter (``notebooks/<chapter>.py``) and the exercise's number in it.
    kind
        One of :data:`KINDS`.
    asks
        What the student hands in, said in one sentence (the answer cell's comment).
    key
        ``"number"``/``"choice"``: the glued key of the worked solution that holds the answer.
    pick
        A regular expression with one group that takes the answer out of the glued text (``None``:
        the whole value).
    floor
        ``"number"``: the smallest half-width of the accepted interval, in the answer's unit, so
        that a reference without spread (a count, a deterministic ratio) does not demand
        equality to the last bit.
    name
        ``"code"``: the class or function the student writes.
    skeleton
        ``"code"``: the file (relative to the repository's root) whose text starts the answer cell.
    public, hidden
        ``"code"``: the test files (relative to the repository's root) handed out and kept.
    solution
        ``"code"``: the worked solution's file, for the teacher only.
    params
        The parameters the exercise asks the student to change (a re-run: ``-p key=value``): the
        reference is computed at the student's parameters with these on top.
    """

    chapter: str
    number: int
    kind: str
    asks: str
    key: str | None = None
    pick: str | None = None
    floor: float = 0.0
    name: str | None = None
    skeleton: str | None = None
    public: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    solution: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.chapter} exercise {self.number}: kind {self.kind!r}; valid: {', '.join(KINDS)}")
        if self.kind == "code" and not (self.name and self.public):
            raise ValueError(f"{self.chapter} exercise {self.number}: a code exercise needs a name and public tests")
        if self.kind != "code" and not self.key:
            raise ValueError(f"{self.chapter} exercise {self.number}: a {self.kind} exercise needs the glued key")

    @property
    def variable(self) -> str:
        """The name the student's answer cell defines: ``answer_<number>``, or the code's ``name``."""
        return self.name if self.kind == "code" else f"answer_{self.number}"


_E = Exercise
_FEDAVGM = dict(name="FedAvgM", skeleton="book/exercises/fedavgm.py", public=("book/exercises/test_fedavgm.py",),
                hidden=("book/exercises/hidden/test_fedavgm_hidden.py",), solution="book/exercises/fedavgm_solution.py")

EXERCISES: tuple[Exercise, ...] = (
    _E("findings", 1, "number", "how many of the rows both builds have change verdict between them",
       key="ex1_text", pick=r"(\d+) change verdict", floor=0.5),
    _E("findings", 2, "number", "how many open claims would need at most twice the seeds they rest on now",
       key="ex2_text", pick=r"and (\d+) would need at most twice", floor=0.5),
    _E("leaderboard", 1, "number", "how many methods are on the accuracy-per-byte front", key="ex1_n_front", floor=0.5),
    _E("leaderboard", 2, "choice", "the method that leads under the other yardstick (its name as the table writes it)",
       key="ex2_leader"),
    _E("teaching", 1, "code", "the class FedAvgM (FedAvg with server momentum)", **_FEDAVGM),
    _E("setting", 1, "number", "FedAvg's global accuracy (%) on the IID partition of the reduced run", key="ex1_iid",
       floor=1.0),
    _E("setting", 2, "number", "how far (points) FedAvg's F@25 moves across the three rare-class thresholds",
       key="ex2_spread_fedavg", floor=0.5),
    _E("setting", 3, "number", "the change (points) of the skewed federation's global accuracy with the larger "
       "learning rate, reduced run", key="ex3_skew_change", floor=1.0),
    _E("setting", 4, "number", "the change (points) of the F@25 floor from no fine-tuning to the most epochs, "
       "reduced run", key="ex4_f25_change", floor=1.0),
    _E("mpt_experiments", 1, "choice", "the worked solution's answer sentence about the larger fractions",
       key="ex1_answer"),
    _E("mpt_experiments", 2, "number", "the frozen prototype's score at the end of the chapter's horizon",
       key="ex2_frozen_end", floor=0.01),
    _E("mpt_experiments", 3, "number", "the spread of the damage score over the paper's unstated choices",
       key="ex3_spread_d", floor=0.01),
    _E("mpt_experiments", 4, "choice", "the variant whose clients' maps get the fewest steps (its name)",
       key="ex4_answer", pick=r"^'?([^,]+),"),
    _E("ggeur_experiments", 1, "number", "the gap (points) between the two formulas at the small scale",
       key="ex1_gap_small", floor=0.5),
    _E("ggeur_experiments", 2, "number", "the step-1 total at which GGEUR peaks", key="ex2_peak", floor=0.5),
    _E("ggeur_experiments", 3, "number", "FedAvg's AVG accuracy (%) on the other domain encoder", key="ex3_avg_d",
       floor=1.0),
    _E("fedgrc_experiments", 1, "number", "the change (points) from the backbone at full scale", key="ex1_full",
       floor=1.0),
    _E("fedgrc_experiments", 2, "number", "the change (points) SASP makes on the rotated clients", key="ex2_change",
       floor=1.0),
    _E("fedgrc_experiments", 3, "number", "how many times more bytes the multilayer statistics take",
       key="ex3_bytes_ratio", floor=0.05),
    _E("hdcfl_experiments", 1, "number", "the largest spread (points) over the membership temperatures",
       key="ex1_spread", floor=1.0),
    _E("hdcfl_experiments", 2, "number", "the adjusted Rand index of the heads' grouping on the rotated setting",
       key="ex2_ari_rot", floor=0.05),
    _E("cosmos_derivations", 1, "number", "the median γ of the lowest support share", key="ex1_gamma_low",
       floor=0.001),
    _E("cosmos_derivations", 2, "number", "the stopping size S of the bound", key="ex2_S", floor=0.05),
    _E("cosmos_derivations", 3, "number", "the smallest number of clients m with a counterexample",
       key="ex3_sentence", pick=r"counterexample in this search is (\d+)", floor=0.5),
    _E("cosmos_experiments", 1, "number", "COSMOS's accuracy (%) when it re-clusters every round", key="ex1_re",
       floor=1.0),
    _E("cosmos_experiments", 2, "number", "the mean accuracy (%) with every client on cluster 0's model",
       key="ex2_one_model", floor=1.0),
    _E("cosmos_experiments", 3, "number", "COSMOS's mean accuracy (%) re-run with temperature=0 (hard labels)",
       key="cosmos_mean", floor=1.0, params={"temperature": 0}),
    _E("flower", 1, "choice", "the rounds in which the node was dropped (as the worked solution lists them)",
       key="ex1_dropped_rounds"),
    _E("flower", 2, "number", "how many bytes the mirrored states add to what travels up", key="ex2_up_extra",
       floor=0.5),
    _E("flower", 3, "number", "how many of the page's runs agree bit for bit with the in-process loop",
       key="fl_n_same", floor=0.5),
)
"""Every exercise of the book and what a correct answer is (the teaching page lists them)."""


def declared(chapter: str | None = None) -> list[Exercise]:
    """The declarations of ``chapter`` (every chapter's: ``None``), in the book's order.

    Examples
    --------
    >>> [e.number for e in declared("setting")]
    [1, 2, 3, 4]
    >>> declared("nowhere")
    []
    """
    return [e for e in EXERCISES if chapter is None or e.chapter == chapter]


ANSWER_WORDS = {"number": "a number, within its prediction interval", "choice": "a phrase, among the seeds' values",
                "code": "code, public and hidden tests"}
"""How the teaching page's list names each kind of answer (:data:`KINDS`)."""


def answer_table(notebooks: str | Path, parts: Sequence[tuple[str, Sequence[str]]],
                 smoke: str | Path | None) -> pd.DataFrame:
    """The teaching page's list of exercises: one row per declaration of :data:`EXERCISES`, in
    the book's order (``parts``: the table of contents' chapters, :func:`fedbook.catalog.toc_chapters`),
    with its chapter's title, its title and what it needs (:func:`fedbook.catalog.exercises`, from
    ``<notebooks>/<name>.py``), its answer (:data:`ANSWER_WORDS`), what the student hands in, and
    the seconds its chapter took at the smoke profile in the records of ``smoke`` (a folder of
    chapter records; ``None`` or a missing record: NaN): what one run of the exercise costs a
    student, who re-runs the chapter."""
    rows = []
    for _, names in parts:
        for name in names:
            found = exercises(Path(notebooks) / f"{name}.py").set_index("exercise")
            for e in declared(name):
                title = found["title"].get(e.number, "Write your own method") if len(found) else "Write your own method"
                needs = found["kind"].get(e.number) if len(found) else "code"
                seconds = record_seconds(smoke, name)
                rows.append({"chapter": chapter_title(Path(notebooks) / f"{name}.py"), "exercise": e.number,
                             "title": title, "needs": needs or "not marked", "answer": ANSWER_WORDS[e.kind],
                             "hands in": f"{e.variable}: {e.asks}",
                             "smoke (s)": float("nan") if seconds is None else float(seconds)})
    return pd.DataFrame(rows, columns=["chapter", "exercise", "title", "needs", "answer", "hands in", "smoke (s)"])


def answer_numbers(table: pd.DataFrame) -> dict[str, int]:
    """The teaching page's counts of :func:`answer_table`, by their glued keys: the exercises
    declared, and those whose answer is a number, a phrase or code.

    Examples
    --------
    >>> answer_numbers(pd.DataFrame({"answer": [ANSWER_WORDS["number"], ANSWER_WORDS["code"], ANSWER_WORDS["number"]]}))
    {'n_declared': 3, 'n_number': 2, 'n_choice': 0, 'n_code_answers': 1}
    """
    counts = table["answer"].value_counts()
    return {"n_declared": len(table), "n_number": int(counts.get(ANSWER_WORDS["number"], 0)),
            "n_choice": int(counts.get(ANSWER_WORDS["choice"], 0)),
            "n_code_answers": int(counts.get(ANSWER_WORDS["code"], 0))}


# --- numbers: the prediction interval --------------------------------------------------------------

def prediction_interval(values: Sequence[float], floor: float = 0.0, level: float = LEVEL) -> tuple[float, float]:
    r"""Where one more seed's value falls with probability ``level``, from the ``values`` of
    ``n`` seeds: mean :math:`\pm\, t_{(1+\text{level})/2,\,n-1}\, s \sqrt{1 + 1/n}` (``s`` the
    sample standard deviation), the half-width at least ``floor``; with one value, that value
    :math:`\pm` ``floor``.

    Examples
    --------
    >>> lo, hi = prediction_interval([50.0, 52.0, 54.0])  # mean 52, s 2, t(0.975, 2) 4.303
    >>> round(lo, 2), round(hi, 2)
    (42.06, 61.94)
    >>> prediction_interval([3.0, 3.0, 3.0], floor=0.5)
    (2.5, 3.5)
    """
    xs = [float(v) for v in values]
    if not xs or any(math.isnan(x) for x in xs):
        raise ValueError(f"a prediction interval needs numbers, got {values!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n, mean = len(xs), sum(xs) / len(xs)
    half = 0.0
    if n > 1:
        s = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
        half = float(stats.t.ppf((1 + level) / 2, n - 1)) * s * math.sqrt(1 + 1 / n)
    half = max(half, float(floor))
    return mean - half, mean + half


_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf|nan")


def glued_answer(text: str, pick: str | None = None) -> str:
    """The answer in a glued value's text (its ``text/plain``: a repr): the group of ``pick`` where
    given, else the text without its quotes or numpy wrapper.

    Examples
    --------
    >>> glued_answer("np.float64(37.25)"), glued_answer("'3, 5'"), glued_answer("'Of the 9 rows, 2 change verdict'", r"(\\d+) change")
    ('37.25', '3, 5', '2')
    """
    text = str(text).strip()
    wrapped = re.fullmatch(r"np\.\w+\((.*)\)", text)
    if wrapped:
        text = wrapped.group(1)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    if pick is not None:
        found = re.search(pick, text)
        if not found:
            raise ValueError(f"the glued text {text!r} has no match for {pick!r}")
        text = found.group(1)
    return text.strip()


def as_number(value: Any) -> float:
    """A student's or a reference's number: a float, or the first number of a text.

    Examples
    --------
    >>> as_number(3), as_number("37.5 %"), as_number("np.float64(1.5)")
    (3.0, 37.5, 1.5)
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    found = _NUMBER.search(glued_answer(str(value)).replace(",", ""))
    if not found:
        raise ValueError(f"not a number: {value!r}")
    return float(found.group(0))


def check(exercise: Exercise, answer: Any, reference: Sequence[str]) -> tuple[bool, str]:
    """Whether ``answer`` is correct for ``exercise`` given the worked solution's glued values
    ``reference`` (one text per seed of the reference); and the accepted range or values.

    Examples
    --------
    >>> e = Exercise("c", 1, "number", "a rate", key="k", floor=0.5)
    >>> check(e, 52.0, ["50.0", "52.0", "54.0"])
    (True, '[42.1, 61.9]')
    >>> check(e, 70, ["50.0", "52.0", "54.0"])[0], check(e, None, ["1"])[0]
    (False, False)
    >>> check(Exercise("c", 2, "choice", "a name", key="k"), " FedAvg ", ["'fedavg'", "'mpt'"])
    (True, 'one of: fedavg, mpt')
    """
    if exercise.kind == "number":
        values = [as_number(glued_answer(t, exercise.pick)) for t in reference]
        lo, hi = prediction_interval(values, exercise.floor)
        half = (hi - lo) / 2
        decimals = max(0, 1 - math.floor(math.log10(half))) if half > 0 else 6  # two significant digits of the half-width
        accepted = f"[{lo:.{decimals}f}, {hi:.{decimals}f}]"
        try:
            x = as_number(answer)
        except ValueError:
            return False, accepted
        return bool(lo <= x <= hi), accepted
    if exercise.kind == "choice":
        values = sorted({glued_answer(t, exercise.pick).strip().lower() for t in reference})
        return (answer is not None and str(answer).strip().lower() in values), "one of: " + ", ".join(values)
    raise ValueError(f"{exercise.chapter} exercise {exercise.number} is code: its tests grade it")


# --- the student's and the teacher's notebooks -------------------------------------------------------

_DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}\s*(?P<arg>.*)$")
_ROLE = re.compile(r"\{(?P<name>[a-z][\w:-]*)\}`(?P<text>[^`]*)`")
_LABEL = re.compile(r"^\(([\w-]+)\)=\s*$")


def _blocks(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """The top-level MyST directives of markdown ``lines``: ``(start, end, name, argument)`` with
    ``end`` the line of the closing fence (nested fences of the same kind need more characters)."""
    out, i = [], 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, j = m.group("fence"), i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        out.append((i, min(j, len(lines) - 1), m.group("name"), m.group("arg").strip()))
        i = j + 1
    return out


def _glue_text(key: str, values: Mapping[str, str] | None) -> str:
    """A glue role's ``key[:format]`` as text: the build's value (formatted) where known, else ``[key]``."""
    name, _, spec = key.partition(":")
    if values is None or name not in values:
        return f"[{name}]"
    text = glued_answer(values[name])
    if spec:
        try:
            return format(as_number(text), spec)
        except ValueError:
            return text
    return text


def _role(m: re.Match, values: Mapping[str, str] | None) -> str:
    name, text = m.group("name"), m.group("text")
    if name.startswith("glue"):
        return _glue_text(text, values)
    if name == "math":
        return f"${text}$"
    if name.startswith("cite"):
        return "[" + ", ".join(t.strip() for t in text.split(",")) + "]"
    title = re.match(r"^(.*?)\s*<([^>]+)>$", text)
    if name in ("ref", "numref", "doc", "download"):
        return f"*{title.group(1)}*" if title else f"*{text}*"
    return f"`{(title.group(1) if title else text).lstrip('~!')}`"


def plain_markdown(text: str, values: Mapping[str, str] | None = None, *, hints: bool = True,
                   solutions: bool = True) -> str:
    r"""A markdown cell of the book as Jupyter can show it: glue roles replaced by the build's
    ``values`` (key -> glued text; ``[key]`` where there is none), other roles by their text,
    labels dropped, directives turned into plain markdown; the ``Hint`` and ``Worked solution``
    dropdowns left out unless ``hints`` / ``solutions``.

    Examples
    --------
    >>> md = ("(sec)=\nRate {glue:text}`acc:.1f` %, see {func}`fedlib.run.run_federated`.\n"
    ...       ":::{dropdown} Hint\nLook up.\n:::\n:::{dropdown} Worked solution\n```{glue:figure} t\n```\nIt is 3.\n:::")
    >>> print(plain_markdown(md, {"acc": "91.25"}, hints=False, solutions=False))
    Rate 91.2 %, see `fedlib.run.run_federated`.
    >>> print(plain_markdown(md, {}, solutions=False))
    Rate [acc] %, see `fedlib.run.run_federated`.
    **Hint.** Look up.
    """
    lines = text.split("\n")
    out: list[str] = []
    last = 0
    for start, end, name, arg in _blocks(lines):
        out.extend(lines[last:start])
        last = end + 1
        body = lines[start + 1:end]
        if name == "dropdown" and arg == "Hint" and not hints:
            continue
        if name == "dropdown" and arg.startswith("Worked solution") and not solutions:
            continue
        if name in ("glue:figure", "glue", "glue:"):
            out.append(f"*[{arg}: a figure or table of the book, shown when the chapter is executed]*")
        elif name == "literalinclude":
            out.append(f"*[the file `{arg}`]*")
        elif name == "math":
            out.extend(["$$", *[b for b in body if not b.startswith(":")], "$$"])
        elif name == "figure":
            out.append(f"![{' '.join(b for b in body if not b.startswith(':'))}]({arg})")
        else:
            inner = plain_markdown("\n".join(body), values, hints=hints, solutions=solutions).split("\n")
            inner = [b for b in inner if not re.match(r"^:[\w-]+:", b)]
            title = arg or name.capitalize()
            if name == "dropdown" and inner:
                out.append(f"**{title}.** {inner[0]}")
                out.extend(inner[1:])
            else:
                out.extend([f"> **{title}.**", *[f"> {b}" for b in inner]])
    out.extend(lines[last:])
    out = [_ROLE.sub(lambda m: _role(m, values), line) for line in out if not _LABEL.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


def answer_cells(chapter: str, root: Path) -> list[nbformat.NotebookNode]:
    """The cells appended to a chapter's student and teacher notebooks: a heading, then one code
    cell per declared exercise (tagged :data:`ANSWER_TAG` and ``exercise-<n>``) that sets its
    :attr:`Exercise.variable` (a number or a phrase: ``None`` to fill in; code: the skeleton)."""
    exercises = declared(chapter)
    if not exercises:
        return []
    cells = [nbformat.v4.new_markdown_cell(
        "## Your answers\n\nFill in one cell per exercise below, then run the whole notebook from the top. "
        "The grader runs it the same way, in a fresh kernel, and reads the variable each cell sets; a cell "
        "that fails marks only its own exercise. A number is compared with the values the chapter gives on "
        f"the seeds {', '.join(map(str, REFERENCE_SEEDS))} at your notebook's parameters: it is accepted "
        "within the range where one more seed's value falls with 95 % probability. Where an answer names "
        "a *reduced run*, it is the run at the scale this chapter's profile sets for its exercises (the "
        "`ex_` settings of its `PROFILES`), on your seed; where it names a re-run, run the chapter with "
        "the parameters the exercise gives (`book/build.py --only <chapter> -p ... --out runs/mine`).")]
    for e in exercises:
        if e.kind == "code":
            source = (root / e.skeleton).read_text().rstrip("\n")
            head = f"# Exercise {e.number}: write {e.asks} in this cell (the public tests: {', '.join(e.public)})\n"
        else:
            what = "a number" if e.kind == "number" else "a word or phrase, as a string"
            head = f"# Exercise {e.number}: {e.asks} ({what})\n"
            source = f"{e.variable} = None"
        cells.append(nbformat.v4.new_code_cell(head + source, metadata={"tags": [ANSWER_TAG, f"exercise-{e.number}"]}))
    return cells


def student_version(nb: nbformat.NotebookNode, chapter: str, root: Path, *, hints: bool = False,
                    values: Mapping[str, str] | None = None) -> nbformat.NotebookNode:
    """The student's notebook of ``chapter`` from its teacher's source ``nb``: without the cells
    tagged :data:`SOLUTION_TAG`, without the worked solutions, without the hints unless ``hints``,
    its markdown made plain (:func:`plain_markdown`, glue roles from ``values``) and its answer
    cells appended (:func:`answer_cells`)."""
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code" and SOLUTION_TAG in cell.metadata.get("tags", ()):
            continue
        if cell.cell_type == "markdown":
            cell.source = plain_markdown(cell.source, values, hints=hints, solutions=False)
            if not cell.source.strip():
                continue
        cells.append(cell)
    nb.cells = cells + answer_cells(chapter, root)
    return nb


def teacher_version(nb: nbformat.NotebookNode, chapter: str, root: Path) -> nbformat.NotebookNode:
    """The teacher's notebook of ``chapter``: everything of ``nb`` (solutions, hints, the cells that
    compute them) and the answer cells, as a student's notebook ends."""
    nb = copy.deepcopy(nb)
    nb.cells = list(nb.cells) + answer_cells(chapter, root)
    return nb


def solution_texts(source: str) -> list[str]:
    """The lines of the hints and worked solutions of a chapter's jupytext ``source`` (their
    markdown without the leading ``#``; lines of fewer than 25 characters left out): what a
    student's notebook must not contain."""
    lines = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in source.splitlines()]
    out = []
    for start, end, name, arg in _blocks(lines):
        if name == "dropdown" and (arg == "Hint" or arg.startswith("Worked solution")):
            out.extend(line.strip() for line in lines[start + 1:end]
                       if len(line.strip()) >= 25 and not _DIRECTIVE.match(line))
    return out


# --- the handout: both versions and the graders ---------------------------------------------------------

def glued_values(path: Path) -> dict[str, str]:
    """The values an executed notebook glued (``myst_nb.glue``): key -> the ``text/plain`` the page
    shows (the build's ``glued_values`` reads them with this function)."""
    nb = nbformat.read(path, as_version=4)
    values = {}
    for cell in nb.cells:
        for output in cell.get("outputs", ()) if cell.cell_type == "code" else ():
            record = output.get("metadata", {}).get("scrapbook")
            if record:
                prefix = record.get("mime_prefix", "")
                values[record["name"]] = str(output.get("data", {}).get(prefix + "text/plain", ""))
    return values


_LOCAL = ("results_dir", "cache_dir", "records")
"""Parameters that say where the build writes or reads, not what it computes."""


def build_values(executed: Path, params: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
                 ) -> dict[str, str] | None:
    """The glued values of the build's executed chapter ``executed`` (``<name>.ipynb``, its record
    ``<name>.json`` beside it) when it was built with ``params`` (a parameter left at its value in
    ``defaults`` counts as not given; those that say where the build writes are left aside), else
    ``None``: a handout shows the build's numbers only where they are the student's."""
    record = executed.with_suffix(".json")
    if not executed.exists() or not record.exists():
        return None

    def effective(p: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in p.items() if k not in _LOCAL and not (defaults and k in defaults and defaults[k] == v)}

    if effective(json.loads(record.read_text()).get("params", {})) != effective(params):
        return None
    return glued_values(executed)


def write_handout(prepared: Mapping[str, nbformat.NotebookNode], params: Mapping[str, Mapping[str, Any]],
                  folder: Path, root: Path, *, hints: bool = False,
                  values: Mapping[str, Mapping[str, str] | None] | None = None) -> dict[str, list[Path]]:
    """Write a course's handout into ``folder``: ``student/<chapter>.ipynb`` (:func:`student_version`)
    with the public tests and skeletons of its code exercises, and ``teacher/<chapter>.ipynb``
    (:func:`teacher_version`) with the hidden tests, the worked solutions' files and
    ``teacher/answers.json`` (the declarations and each chapter's parameters, what ``book/grade.py``
    reads). ``prepared``: chapter -> its notebook with the parameters injected, not executed;
    ``params``: chapter -> those parameters; ``values``: chapter -> the build's glued values (or
    ``None``). Returns ``{"student": [...], "teacher": [...]}``, the files written."""
    student, teacher = folder / "student", folder / "teacher"
    written: dict[str, list[Path]] = {"student": [], "teacher": []}
    spec = {"params": {}, "exercises": []}
    for chapter, nb in prepared.items():
        for side, version in ((student, student_version(nb, chapter, root, hints=hints,
                                                         values=(values or {}).get(chapter))),
                              (teacher, teacher_version(nb, chapter, root))):
            side.mkdir(parents=True, exist_ok=True)
            _write_notebook(version, side / f"{chapter}.ipynb")
            written[side.name].append(side / f"{chapter}.ipynb")
        spec["params"][chapter] = dict(params[chapter])
        for e in declared(chapter):
            spec["exercises"].append({"chapter": e.chapter, "number": e.number, "kind": e.kind})
            for side, files in ((student, (e.skeleton, *e.public)), (teacher, (*e.public, *e.hidden, e.solution))):
                for rel in filter(None, files):
                    target = side / "exercises" / Path(rel).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(root / rel, target)
                    written[side.name].append(target)
    if prepared:
        teacher.mkdir(parents=True, exist_ok=True)
        atomic_write_text(teacher / "answers.json", json.dumps(spec, indent=1, sort_keys=True) + "\n")
        written["teacher"].append(teacher / "answers.json")
    return written


def _write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write ``nb`` to ``path`` atomically, with the mode the umask gives a new file
    (:func:`fedlib.io.atomic_write_text`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, nbformat.writes(nb))


# --- grading ---------------------------------------------------------------------------------------------

GRADER_MARK = "__fedbook_grader__ "
"""The line the grader's last cell prints before its JSON (the answers it read)."""

_GUARD = """\
__fedbook_errors__ = globals().get("__fedbook_errors__", {{}})
try:
    exec(compile({source!r}, "<exercise {number}>", "exec"), globals())
except Exception as __fedbook_err__:
    import traceback as __fedbook_tb__
    __fedbook_errors__[{number}] = "".join(__fedbook_tb__.format_exception_only(__fedbook_err__)).strip()
"""

_READ = """\
import json as __fedbook_json__
__fedbook_report__ = {{}}
for __fedbook_n__, __fedbook_var__, __fedbook_kind__ in {plan!r}:
    __fedbook_e__ = globals().get("__fedbook_errors__", {{}}).get(__fedbook_n__)
    if __fedbook_e__ is not None:
        __fedbook_report__[__fedbook_n__] = {{"error": __fedbook_e__}}
    elif __fedbook_var__ not in globals():
        __fedbook_report__[__fedbook_n__] = {{"error": f"no variable {{__fedbook_var__}} (its answer cell was removed)"}}
    elif __fedbook_kind__ != "code":
        __fedbook_v__ = globals()[__fedbook_var__]
        __fedbook_report__[__fedbook_n__] = {{"answer": __fedbook_v__ if isinstance(__fedbook_v__, (int, float, str, type(None))) else repr(__fedbook_v__)}}
    else:  # code: its tests run apart, in a clean process (grade_notebook)
        __fedbook_report__[__fedbook_n__] = {{"defined": True}}
print({mark!r} + __fedbook_json__.dumps(__fedbook_report__))
"""


def prepare_submission(nb: nbformat.NotebookNode, exercises: Sequence[Exercise]) -> nbformat.NotebookNode:
    """The notebook the grader executes: ``nb`` with every answer cell guarded (an exception is
    recorded for its exercise and the notebook goes on) and a last cell that prints the answers
    after :data:`GRADER_MARK` (a code exercise's: that its object is defined; its tests run apart,
    :func:`run_code_tests`)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        tags = cell.metadata.get("tags", ())
        if cell.cell_type == "code" and ANSWER_TAG in tags:
            cell.source = _GUARD.format(source=cell.source, number=_exercise_number(tags))
    plan = [(e.number, e.variable, e.kind) for e in exercises]
    nb.cells.append(nbformat.v4.new_code_cell(_READ.format(plan=plan, mark=GRADER_MARK), metadata={"tags": ["grader"]}))
    return nb


def _exercise_number(tags: Iterable[str]) -> int:
    """The exercise an answer cell's tags name (``exercise-<n>``; 0 where none does)."""
    return next((int(t.split("-", 1)[1]) for t in tags if re.fullmatch(r"exercise-\d+", t)), 0)


_REPORTER = """\
import json, os


class Reporter:
    def __init__(self):
        self.passed, self.failed, self.uncollected = [], [], []

    def pytest_collectreport(self, report):
        if report.failed:
            lines = [l.strip() for l in str(report.longrepr).splitlines() if l.strip()]
            last = next((l[1:].strip() for l in reversed(lines) if l.startswith("E ")), lines[-1] if lines else "")
            self.uncollected.append(f"{report.nodeid or 'collection'}: {last}")

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome == "failed":
            (self.passed if report.outcome == "passed" else self.failed).append(report.nodeid.split("::")[-1])

    def pytest_sessionfinish(self, session):
        with open(os.environ["FEDBOOK_GRADER_REPORT"], "w") as f:
            json.dump({"passed": self.passed, "failed": self.failed, "uncollected": self.uncollected}, f)


def pytest_configure(config):
    config.pluginmanager.register(Reporter(), "fedbook_grader_reporter_instance")
"""

_KEPT_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The variables of the grader's environment its tests' process keeps (no other: none the student set)."""


def run_code_tests(exercise: Exercise, source: str, tests: Sequence[str | Path], *, timeout: float) -> dict:
    """Run a code exercise's ``tests`` against the student's answer cell ``source``, apart from
    the student's kernel: the cell written as ``<skeleton's name>.py`` into an empty temporary
    folder with copies of the test files only (no worked solution on the path), and pytest run
    there in a new process whose environment holds a few of the grader's variables
    (``PATH``, ``HOME``, the locale, ``TMPDIR`` and the thread counts) and ``FEDLIB_EXERCISE`` set to the student's module. Returns
    ``{"passed": [...], "failed": [...], "uncollected": [...]}`` (test names; a test file that
    could not be collected, with its error); where the process wrote no report,
    ``{"error": ...}``."""
    import os
    import subprocess

    module = Path(exercise.skeleton).stem if exercise.skeleton else exercise.name.lower()
    with tempfile.TemporaryDirectory() as folder:
        work, plugin = Path(folder) / "answer", Path(folder) / "plugin"
        work.mkdir()
        plugin.mkdir()
        (work / f"{module}.py").write_text(source)
        for test in tests:
            shutil.copyfile(test, work / Path(test).name)
        (plugin / "fedbook_grader_reporter.py").write_text(_REPORTER)
        report = Path(folder) / "report.json"
        env = {k: os.environ[k] for k in _KEPT_ENVIRONMENT if k in os.environ}
        env.update(FEDLIB_EXERCISE=module, PYTHONPATH=str(plugin), FEDBOOK_GRADER_REPORT=str(report),
                   PYTHONDONTWRITEBYTECODE="1")
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", *(Path(t).name for t in tests), "-q",
                                   "-p", "no:cacheprovider", "-p", "fedbook_grader_reporter", "--no-header", "--continue-on-collection-errors",
                                   "--rootdir", str(work)],
                                  cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"its tests did not finish in {timeout:g} s"}
        if not report.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()
            return {"error": f"its tests did not run: {tail[-1] if tail else f'pytest exited {done.returncode}'}"}
        return json.loads(report.read_text())


def grade_notebook(path: Path, exercises: Sequence[Exercise], tests: Mapping[int, list[str]], *, cwd: Path,
                   timeout: float) -> dict[int, dict]:
    """Execute the submitted notebook ``path`` (:func:`prepare_submission`) with papermill in a
    fresh kernel from ``cwd``, each cell under ``timeout`` seconds, and return what it answered:
    exercise number -> ``{"answer": ...}``, ``{"passed": [...], "failed": [...], "uncollected": [...]}``
    (code: its answer cell tested by ``tests``, exercise number -> the test files, with
    :func:`run_code_tests`) or ``{"error": message}`` (its cell raised, or the notebook stopped
    before the answers: then the message names the cell and the error)."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    submitted = nbformat.read(path, as_version=4)
    nb = prepare_submission(submitted, exercises)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "executed.ipynb"
        try:
            executed = papermill.execute_notebook(nb, str(out), kernel_name="python3", cwd=str(cwd), progress_bar=False,
                                                  execution_timeout=timeout, log_output=False)
        except PapermillExecutionError as err:
            where = f"cell {err.exec_count}" if err.exec_count else f"cell {err.cell_index}"
            message = f"the notebook stopped at {where}: {err.ename}: {err.evalue}".strip()
            return {e.number: {"error": message} for e in exercises}
        except Exception as err:  # a timeout, a dead kernel
            message = f"the notebook did not finish: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            return {e.number: {"error": message} for e in exercises}
    answers = None
    for output in executed.cells[-1].get("outputs", ()):
        for line in str(output.get("text", "")).splitlines():
            if line.startswith(GRADER_MARK):
                answers = {int(k): v for k, v in json.loads(line[len(GRADER_MARK):]).items()}
    if answers is None:
        return {e.number: {"error": "the grader's cell printed nothing"} for e in exercises}
    cells = {_exercise_number(c.metadata.get("tags", ())): c.source for c in submitted.cells
             if c.cell_type == "code" and ANSWER_TAG in c.metadata.get("tags", ())}
    for e in exercises:
        if e.kind == "code" and answers.get(e.number, {}).get("defined"):
            answers[e.number] = run_code_tests(e, cells.get(e.number, ""), tests.get(e.number, []), timeout=timeout)
    return answers


def references(chapter: str, params: Mapping[str, Any], keys: Iterable[str], *, source: Path, cache: Path,
               cwd: Path, seeds: Sequence[int] = REFERENCE_SEEDS, timeout: float = 3600,
               execute: Callable[[nbformat.NotebookNode, dict, Path, Path], None] | None = None) -> dict[int, dict[str, str]]:
    """The worked solutions' glued values ``keys`` of ``chapter`` at ``params`` for each seed of
    ``seeds``: the teacher's notebook ``source`` executed with ``seed`` set to each (papermill,
    from ``cwd``), read back and kept in ``cache`` (a folder: one JSON file per chapter and
    parameters), so that the next grading at the same parameters executes nothing."""
    keys = sorted(set(keys))
    base = {k: v for k, v in params.items() if k not in ("seed", *_LOCAL)}
    digest = hashlib.sha256(json.dumps({"chapter": chapter, "params": base, "source": source.read_text()},
                                       sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = cache / f"{chapter}-{digest}.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    if execute is None:
        import papermill

        def execute(nb, p, out, cwd):
            papermill.execute_notebook(nb, str(out), parameters=p, kernel_name="python3", cwd=str(cwd),
                                       progress_bar=False, execution_timeout=timeout, log_output=False)
    changed = False
    for seed in seeds:
        have = known.get(str(seed), {})
        if all(k in have for k in keys):
            continue
        nb = nbformat.read(source, as_version=4)
        nb.cells = [c for c in nb.cells if ANSWER_TAG not in c.metadata.get("tags", ())]
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / f"{chapter}.ipynb"
            execute(nb, {**base, "seed": seed}, out, cwd)
            glued = glued_values(out)
        known[str(seed)] = {k: glued[k] for k in keys if k in glued}
        changed = True
    if changed:
        cache.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(known, indent=1, sort_keys=True) + "\n")
    return {int(s): known[str(s)] for s in seeds}


def _why_not(exercise: Exercise, answer: Any) -> str:
    """The message of an answer that was not accepted: none given, not a number, or outside."""
    if answer is None:
        return "no answer given"
    if exercise.kind == "number":
        try:
            as_number(answer)
        except ValueError:
            return f"not a number: {answer!r}"
        return "outside the accepted interval"
    return "not among the accepted values"


GRADE_COLUMNS = ("student", "chapter", "exercise", "kind", "answer", "accepted", "mark", "message")
"""The columns of :func:`grade`'s table: one row per student, chapter and exercise; ``mark`` 1 or 0."""


def grade(teacher: Path, submissions: Path, *, root: Path, timeout: float = 600,
          seeds: Sequence[int] = REFERENCE_SEEDS, log: Callable[[str], None] = print,
          hidden: Path | None = None) -> pd.DataFrame:
    """Grade every submitted notebook under ``submissions`` (``<student>/<chapter>.ipynb``) against
    the handout's ``teacher`` folder (its ``answers.json``, tests and notebooks): each notebook
    executed (:func:`grade_notebook`, from ``<root>/notebooks``, ``timeout`` seconds a cell), each
    number or phrase checked against the references at the parameters the notebook records
    (:func:`references`, :func:`check`), each code exercise by its public and hidden tests
    (:func:`run_code_tests`; the hidden ones read from ``hidden``, a folder of the teacher's own,
    where given, else from ``<teacher>/exercises``: the book's hidden tests are in its public
    repository). One row per student, chapter and exercise (:data:`GRADE_COLUMNS`)."""
    spec = json.loads((teacher / "answers.json").read_text())
    wanted = {(x["chapter"], x["number"]) for x in spec["exercises"]}
    rows = []
    students = sorted(p for p in submissions.iterdir() if p.is_dir())
    if not students:
        raise SystemExit(f"no submission in {submissions}: expected <student>/<chapter>.ipynb folders")
    for student in students:
        for chapter in spec["params"]:
            exercises = [e for e in declared(chapter) if (e.chapter, e.number) in wanted]
            path = student / f"{chapter}.ipynb"
            if not path.exists():
                rows += [dict(student=student.name, chapter=chapter, exercise=e.number, kind=e.kind, answer=None,
                              accepted=None, mark=0, message=f"no {chapter}.ipynb submitted") for e in exercises]
                continue
            tests = {e.number: [teacher / "exercises" / Path(t).name for t in e.public]
                     + [(hidden or teacher / "exercises") / Path(t).name for t in e.hidden]
                     for e in exercises if e.kind == "code"}
            missing = [str(t) for ts in tests.values() for t in ts if not t.exists()]
            if missing:
                raise SystemExit(f"no test file {', '.join(missing)}: the handout's tests, or --hidden's folder")
            log(f"[grade]    {student.name}/{chapter}.ipynb")
            answers = grade_notebook(path, exercises, tests, cwd=root / "notebooks", timeout=timeout)
            recorded = nbformat.read(path, as_version=4).metadata.get("papermill", {}).get("parameters")
            params = recorded if recorded is not None else spec["params"][chapter]
            refs, groups = {}, {}
            for e in exercises:  # one reference per distinct parameters, with every key read at them
                if e.kind != "code":
                    groups.setdefault(json.dumps({**params, **e.params}, sort_keys=True, default=str), []).append(e)
            for at, group in groups.items():
                ref = references(chapter, json.loads(at), [e.key for e in group], source=teacher / f"{chapter}.ipynb",
                                 cache=teacher / "references", cwd=root / "notebooks", seeds=seeds, timeout=timeout)
                refs.update({e.number: ref for e in group})
            for e in exercises:
                got = answers.get(e.number, {"error": "not read"})
                row = dict(student=student.name, chapter=chapter, exercise=e.number, kind=e.kind, answer=None,
                           accepted=None, mark=0, message="")
                if "error" in got:
                    row["message"] = f"crashed: {got['error']}"
                elif e.kind == "code":
                    n, failed, uncollected = len(got["passed"]) + len(got["failed"]), got["failed"], got.get("uncollected", [])
                    said = (["failed: " + ", ".join(failed)] if failed else []) + (
                        [("no test ran: " if n == 0 else "not collected: ") + "; ".join(uncollected)] if uncollected else [])
                    if n == 0 and not said:
                        said = ["no test ran"]
                    row.update(answer=f"{len(got['passed'])}/{n} tests passed",
                               mark=int(n > 0 and not failed and not uncollected), message="; ".join(said))
                else:
                    ref = [v[e.key] for v in refs[e.number].values() if e.key in v]
                    if not ref:
                        row["message"] = f"no reference: the chapter glued no {e.key} at these parameters"
                    else:
                        try:
                            ok, accepted = check(e, got["answer"], ref)
                        except ValueError as err:  # the reference's text says it has no number here
                            row["message"] = f"no reference: {err}"
                            rows.append(row)
                            continue
                        row.update(answer=got["answer"], accepted=accepted, mark=int(ok),
                                   message="" if ok else _why_not(e, got["answer"]))
                rows.append(row)
    return pd.DataFrame(rows, columns=list(GRADE_COLUMNS))


__all__ = ["ANSWER_TAG", "ANSWER_WORDS", "EXERCISES", "Exercise", "GRADER_MARK", "GRADE_COLUMNS", "KINDS", "LEVEL",
           "REFERENCE_SEEDS", "SOLUTION_TAG", "answer_cells", "answer_numbers", "answer_table", "as_number", "build_values", "check", "declared",
           "glued_answer", "glued_values", "grade", "grade_notebook", "plain_markdown", "prediction_interval", "prepare_submission",
           "references", "run_code_tests", "solution_texts", "student_version", "teacher_version", "write_handout"]
