# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# (chapter-teaching)=
# # Teaching with this book
#
# This page is for a teacher who wants to use a chapter in a course: how long each chapter takes
# to run, which exercises need only new parameters and which need code, how to hand a chapter to
# a student, how the student checks a re-run against the book, and one exercise in which the
# student writes a federated method of their own and tests it. Every time and count on this page
# comes from the build that produced it.

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke", "book" or "paper": which build this page describes (it trains little itself)
seed = 0  # the seed of the small FedAvgM run in the last section
records = None  # {profile: folder of that build's chapter records}; book/build.py passes it

# %% tags=["hide-input"]
from functools import partial
from pathlib import Path

from fedbook.page import glue_all, setup, show_table
from fedbook.catalog import (chapter_times, exercise_index, exercise_numbers, handout_cell, timing_numbers,
                             toc_chapters)
from fedbook.course import REFERENCE_SEEDS, answer_numbers, answer_table
from fedbook.studies.teaching import demo_cell, demo_methods
from fedbook.study import Study, run_study

PROFILES = {"smoke": dict(demo_rounds=2, demo_clients=4, beta=0.9), "book": dict(demo_rounds=10, demo_clients=10, beta=0.9),
            "paper": dict(demo_rounds=10, demo_clients=10, beta=0.9)}
P = setup(PROFILES, profile)
ROOT = Path("..").resolve()  # the chapters execute in notebooks/
records = records or {profile: "../book/chapters" if profile == "book" else f"../book/_{profile}/chapters"}
parts = toc_chapters(ROOT / "book" / "_toc.yml")

# %% [markdown]
# ## How long each chapter takes
#
# The times below are the execution times this build recorded for every chapter (the seconds in
# `book/chapters/<name>.json`, and `book/_smoke/chapters/<name>.json` for the smoke profile), on
# the machine that built this page. The `smoke` profile is what a student runs first: seconds per
# chapter, the same code on a few hundred samples. The `book` profile produced the numbers in the
# book. A dash means that profile has not been built on this machine yet (`make smoke` builds the
# smoke profile; `make book` builds both). A chapter whose runs are studies keeps every finished
# cell in its profile's study cache (`book/cache/`): when it executes again after a change that
# leaves its cells' code, settings and seeds alone (its prose, say), it reads them back, and its
# recorded time is then that of the reading; a cold build (`make clean`, then `make book`) records
# every chapter's full time.

# %% tags=["hide-input"]
timing = chapter_times(ROOT / "notebooks", parts, records, leave_out=["teaching"])
show_table(timing, digits={"smoke (s)": 0, "book (min)": 1}, index=False)

# %% [markdown]
# Executing all {glue:text}`n_chapters` chapters one after another takes {glue:text}`book_total_time`
# at the book profile and {glue:text}`smoke_total_time` at the smoke profile on this machine (`make
# book` runs a chapter per core at a time, so its wall-clock time is shorter); the slowest chapter at
# the book profile is {glue:text}`slowest_time`. A class that works through one chapter per session can
# run it at the book profile during the session; at the smoke profile every student re-runs a
# whole chapter in seconds.
#
# ## The exercises
#
# Every experiments chapter ends with exercises. Each one says whether it needs only new
# parameters (a re-run with `-p`, no code to write) or a change to the code, and has a hint and a
# worked solution, each folded away until a student opens it. The worked solutions' numbers are
# computed when the book is built; where an exercise asks for a run larger than the book can
# afford, its solution computes a reduced version and says at what scale.
#
# Every exercise also declares what a correct answer is (`book/fedbook/course.py`), so that a
# grader can mark it: **a number** the student sets (`answer_1 = ...`), accepted within the
# prediction interval described under *Grading* below; **a phrase** (the name of a method, the
# rounds a node was dropped in), accepted when it is one of the values the worked solution gives
# on the reference seeds; or **code** (a class), run against public tests that the student has and
# hidden tests in the teacher's folder (not secret: see *Grading*). The list below gives, for each exercise, what the student
# hands in and how long its chapter took at the smoke profile on this machine: a student runs the
# whole chapter once per try (a dash: the smoke profile has not been built here).

# %% tags=["hide-input"]
exercise_table = exercise_index(ROOT / "notebooks", parts)
answers = answer_table(ROOT / "notebooks", parts, records.get("smoke"))
show_table(answers, digits={"smoke (s)": 0}, index=False, wrap=True)

# %% [markdown]
# Of the {glue:text}`n_exercises` exercises of the chapters, {glue:text}`n_parameters_only` need
# only parameters and {glue:text}`n_code` need code; with this page's own, {glue:text}`n_declared`
# exercises have an answer declaration: {glue:text}`n_number` numbers, {glue:text}`n_choice`
# phrases and {glue:text}`n_code_answers` piece of code. The last exercise of this page is a method
# of the student's own, with a test to pass.
#
# ## Handing a chapter out
#
# A student needs Python 3.11, the repository and its pinned requirements. From the repository's
# root:
#
# ```bash
# python3.11 -m venv .venv
# .venv/bin/python -m pip install -r requirements.txt
# .venv/bin/python -m pip install --no-deps -e .      # fedlib, editable
# ```
#
# (`make test` does the same and then runs the tests.) To give each student chapters with their
# own seed at the smoke profile, write one handout per student: the chapters with their
# parameters injected, nothing executed yet, no output and no path of your machine in them:
#
# ```bash
# .venv/bin/python book/build.py --handout handouts/ana --profile smoke --only setting teaching -p seed=7
# ```
#
# It writes two folders from the one source of each chapter. `handouts/ana/student/` is what the
# student gets: each chapter without its worked solutions, its hints and the cells that compute
# the solutions, its MyST markup turned into plain markdown that Jupyter shows (a glued number
# becomes the build's value where this machine's build of the profile has the same parameters,
# else a `[key]` placeholder), a cell per exercise at the end to fill in, and the skeleton and
# public test of a code exercise under `exercises/`. `--hints` keeps the hints (never the worked
# solutions). `handouts/ana/teacher/` holds the chapters whole, the hidden tests, the worked
# solution of the code exercise and `answers.json`, what the grader reads. The student opens
# `student/setting.ipynb` in Jupyter with the repository's `notebooks/` folder as the working
# directory and runs it top to bottom. The notebook refuses a misspelled or ill-typed parameter in
# its first cells, before any work. Here is the cell such a handout carries, made by the command
# above (for the setting chapter alone) while this page was built:

# %% tags=["hide-input"]
injected, executed = handout_cell(ROOT / "book" / "build.py", "setting", seed=7)
print(injected)
print(f"cells with an output: {executed}")

# %% [markdown]
# ## Checking a re-run against the book
#
# A student who re-runs a chapter with the book's parameters gets the book's numbers bit for bit
# (on a CPU: every random stream is derived from the seed). Any other seed or parameter changes
# them, and the comparison below says which by how much. Execute the chapter into a folder of its
# own, then compare its glued values (the numbers the page's text shows) with the book's build:
#
# ```bash
# .venv/bin/python book/build.py --only setting -p seed=7 --out runs/ana
# .venv/bin/python book/build.py --compare runs/ana            # bit for bit
# .venv/bin/python book/build.py --compare runs/ana --rtol 0.05 # numbers within 5 %
# ```
#
# The command prints every value that differs (with the book's and the student's) and then how
# many agree. Measured times differ from machine to machine: the values whose key names
# `seconds`, `minutes` or `time` are left out unless `--timings` is given. `--profile smoke`
# compares with the smoke build instead.
#
# ## Grading
#
# Collect each student's notebooks as `submissions/<student>/<chapter>.ipynb` and run
#
# ```bash
# .venv/bin/python book/grade.py handouts/ana/teacher submissions --csv marks.csv
# ```
#
# Each notebook is executed with papermill in a fresh kernel from the repository's `notebooks/`
# folder, every cell under a time limit (`--timeout`, 600 s by default). Each answer cell is
# guarded: one that raises marks its own exercise 0 with the error as its message, and the others
# are still read; a notebook that stops earlier, in the chapter itself, marks each of its
# exercises 0 with the cell and the error. The grader prints one table, tab-separated, one row per
# student, chapter and exercise (the answer, the accepted range or values, a mark of 1 or 0 and a
# message), ready to paste into a grade book, and writes it as CSV with `--csv`.
#
# **Numbers that vary with the seed.** A student's number comes from their own seed, so it is not
# compared with one value. The grader executes the teacher's chapter, solutions included, at the
# parameters the student's notebook records, once for each of the
# {glue:text}`reference_seeds_n` reference seeds ({glue:text}`reference_seeds`), reads the number
# the worked solution glues, and accepts the student's if it falls in the 95 % prediction interval
# of one more seed: $\bar x \pm t_{0.975,\,n-1}\, s \sqrt{1 + 1/n}$ ($\bar x$ and $s$ the
# mean and standard deviation of the $n$ reference values). Where the reference has no spread (a
# count, a deterministic ratio), the half-width is the declared floor of the exercise (half a
# unit for a count, a point for an accuracy), so that a correct answer does not have to be equal
# to the last bit. The references are computed on demand, at the first grading at new
# parameters, and kept under `teacher/references/` (one file per chapter and parameters), so the
# book's build does not get slower and the next grading executes nothing. An exercise that asks
# for a re-run with other parameters declares them, and its reference is computed with them.
#
# **Code is tested apart from the student's notebook.** The answer cell of a code exercise is
# written as the skeleton's file (`fedavgm.py`) into an empty folder beside copies of the test
# files alone, and pytest runs there in a process of its own, whose environment the student's
# notebook cannot touch: a notebook that sets `FEDLIB_EXERCISE` or reaches for the worked solution
# gets no further than its own cell. So the cell must hold its imports, as the skeleton does; a
# test file that cannot even be imported is reported as such (`no test ran: ...`, with the error).
#
# **The hidden tests are not secret here.** They are in the book's public repository
# (`book/exercises/hidden/`), like the worked solutions, and the handout copies them into
# `teacher/exercises/`. A teacher who needs them secret keeps tests of their own, under the same
# file names, in a folder outside the students' clone and grades with it:
# `book/grade.py handouts/ana/teacher submissions --hidden ~/my-hidden-tests`.
#
# **Why not otter-grader or nbgrader.** Both were checked against this book: otter-grader 7 builds
# student and teacher versions and runs hidden tests, and nbgrader strips marked solution regions
# and grades. Neither fits here. Above all, neither accepts a number within an interval computed
# by executing the chapter at the student's parameters on several seeds, and a fixed tolerance
# would mark correct answers wrong when the answer varies with the seed. Both also want their own
# assignment format (otter-grader's questions, solutions and tests marked in the cells of its
# master notebook, nbgrader's cell metadata and a course directory with its database), while the
# chapters are jupytext percent files whose hints and worked solutions are MyST blocks the book
# already renders. And both are heavy for what they would do here: otter-grader grades a folder
# of submissions in Docker containers (`otter grade`), or one submission at a time without
# them (`otter run`), and installs a Docker client (`python-on-whales`), `fica`, `ipylab`,
# `ipywidgets` and nbconvert's `webpdf` extra either way; nbgrader brings a Jupyter server,
# JupyterLab 4, Notebook 7, SQLAlchemy and Alembic, none of which the book needs. The grader is
# therefore a few hundred lines on papermill, which the book already uses to execute its chapters
# (`book/fedbook/course.py`, tested in `tests/test_course.py` with a right, a wrong and a crashing
# submission for each of the {glue:text}`n_declared` declared exercises).
#
# (teaching-own-method)=
# ## Exercise: write your own method
#
# *(code)* Write **FedAvgM**, FedAvg with server momentum {cite:p}`fedavgm`: the server treats the
# change the clients' average makes to the global model as a gradient, $\Delta_t = w_t - \bar w_t$,
# keeps a velocity $v_{t+1} = \beta v_t + \Delta_t$ and steps $w_{t+1} = w_t - \eta\, v_{t+1}$.
# Only the server changes, so only the `aggregate` hook of {class}`fedlib.protocol.Algorithm`
# changes: it reads the round's replies, which the loop hands it one at a time, and the skeleton
# already averages them with FedAvg's rule ({func}`fedlib.aggregate.model_average`), so only the
# momentum step is left to write ({ref}`inside-add-a-method` shows a complete plug-in). Download the skeleton
# {download}`fedavgm.py <../exercises/fedavgm.py>` and its test
# {download}`test_fedavgm.py <../exercises/test_fedavgm.py>` into the repository's
# `book/exercises/` folder (they are already there in a clone), fill in the `TODO` and run
#
# ```bash
# .venv/bin/python -m pytest book/exercises
# ```
#
# The test checks one and two rounds against values computed by hand, that $\beta = 0$ and
# $\eta = 1$ give FedAvg, and that the method trains in {func}`fedlib.run.run_federated`. It fails
# on the skeleton as it is handed out and passes on a correct answer.
#
# :::{dropdown} Hint
# `model_average(server, replies)` is FedAvg's sample-weighted average $\bar w_t$ of the
# replies (the server state itself when none came). The current weights $w_t$ are
# in `server.arrays` under names that start with `"model/"`; store $v$ under the same names with `"momentum/"` in front. In the first round there
# is no velocity yet: take $v_1 = \Delta_1$.
# :::
#
# :::{dropdown} Worked solution
# ```{literalinclude} ../exercises/fedavgm_solution.py
# :language: python
# :start-after: MOMENTUM = "momentum/"
# ```
# The run below trains it and FedAvg on the same seed, federation and client steps (UCI digits,
# an MLP, Dirichlet label skew): {glue:text}`demo_clients` clients for {glue:text}`demo_rounds`
# rounds, with $\beta =$ {glue:text}`demo_beta`. FedAvg's final global accuracy is
# {glue:text}`demo_fedavg:.1f` %, FedAvgM's {glue:text}`demo_fedavgm:.1f` %; one seed on a small
# federation tells nothing general about which is better (that would need the seeds and intervals
# of the experiments chapters), but it shows that the method runs in the loop unchanged.
# :::

# %% tags=["remove-cell", "solution"]
# FedAvg and the worked solution's FedAvgM on the same seed, federation and client steps: a study of one seed
METHODS = demo_methods(ROOT / "book" / "exercises", beta=P.beta)
DEMO = Study("demo", partial(demo_cell, algorithms=METHODS, clients=P.demo_clients, rounds=P.demo_rounds),
             grid={"method": list(METHODS)}, seeds=[seed])
demo = run_study(DEMO)["demo"].set_index("method")["global"]
glue_all({**timing_numbers(timing), **exercise_numbers(exercise_table), **answer_numbers(answers),
          "reference_seeds": ", ".join(map(str, REFERENCE_SEEDS)), "reference_seeds_n": len(REFERENCE_SEEDS),
          "demo_clients": P.demo_clients,
          "demo_rounds": P.demo_rounds, "demo_beta": P.beta, "demo_fedavg": 100 * float(demo["fedavg"]),
          "demo_fedavgm": 100 * float(demo["fedavgm"])})
