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
# (chapter-deciding-cost)=
# # What deciding every open claim would cost
#
# The book's profile is a pilot: each experiments chapter runs a few seeds, and a claim whose
# interval still straddles its margin stays open, *inconclusive at this scale*
# ({ref}`the findings page <chapter-findings>`). A confirmatory run decides such claims on fresh
# seeds, disjoint from the book's: {func}`fedbook.confirm.plan` sizes each open claim's run from
# the pilot's spread at its margin (power {glue:text}`cost_power`, at most
# {glue:text}`cost_cap` seeds per claim), and `book/build.py --confirm` runs the chapters those
# claims belong to at the planned seeds (a chapter's seed tiers that serve no open claim at their
# smallest), on a process pool or a Ray cluster. This page prices the plan for this build, from the build's own
# records; it measures nothing itself.{glue:text}`cost_no_plan`

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke", "book" or "paper": which build this page prices (it runs nothing itself)
records = None  # {profile: folder of that build's chapter records}; book/build.py passes it

# %% tags=["hide-input"]
from inspect import signature

import pandas as pd

from fedbook.confirm import CHAPTER_COLUMNS, CLAIM_COLUMNS
from fedbook.confirm import plan as confirm_plan
from fedbook.page import glue_all, setup, show_table
from fedbook.studies.deciding_cost import confirm_costs, cost_numbers, decided_cost, spent_by_chapter, spent_numbers

P = setup({"smoke": {}, "book": {}, "paper": {}}, profile)
records = records or {profile: "../book/chapters" if profile == "book" else f"../book/_{profile}/chapters"}
defaults = signature(confirm_plan).parameters
try:
    PLAN = confirm_plan(records[profile])
    claims, chapters, no_plan = PLAN.claims, PLAN.chapters, ""
except ValueError as why:  # no records, or a pilot's seeds reaching the first fresh seed: say why, plan nothing
    claims = pd.DataFrame(columns=list(CLAIM_COLUMNS)).astype({"planned_n": "Int64"})
    chapters, no_plan = pd.DataFrame(columns=list(CHAPTER_COLUMNS)), str(why)
decide, left_out = confirm_costs(records[profile], claims, chapters)
glue_all(cost_numbers(decide, claims, decided_cost(records[profile], exclude=["deciding_cost"]), left_out,
                      power=defaults["power"].default, cap=defaults["cap"].default, no_plan=no_plan))
spent = spent_by_chapter(records[profile], exclude=["deciding_cost"])  # where those minutes went
glue_all(spent_numbers(spent))

# %% [markdown]
# **How to read it.** Each row is a chapter of experiments that this build left with open claims:
# *open claims* are the claims it left undecided, *planned* those the plan can decide within its
# cap of seeds, *fresh seeds* the new seeds it would run for them. The price follows from what
# this build recorded for each chapter ({func}`fedbook.confirm.estimate_parts`, the one cost model
# of the confirmatory runs, which `book/build.py --confirm` prints too): each study the chapter
# ran costs its cells' seconds divided by its seeds, for every seed its run will have; what the
# chapter spent outside its studies (loading data, fitting, drawing) is a *fixed* part that does
# not grow with the seeds. So *chapter CPU ≈ fixed + per seed × seeds*, where *per seed (s)* is
# what one more seed of every study adds. *CPU-hours* is the planned run's total; the three last
# columns estimate the minutes one would wait on a laptop, a workstation and a small cluster: the
# fixed part on one core, then the run's cells, independent of each other, spread over the cores
# in waves at their mean time ({func}`fedbook.studies.deciding_cost.wall_seconds`; a Ray
# instance's start-up left out). That is an estimate, not a bound: a wave lasts as long as its
# slowest cell. And the pilot's per-seed costs were measured with what one process shares (MPT's
# table cells reuse its figure's runs, COSMOS's pre-trained weights are memoised), which a run
# spread over worker processes or Ray loses: for such a run the estimate is low.

# %% tags=["hide-input"]
show_table(decide, digits={"per seed (s)": 1, "fixed (s)": 0, "CPU-hours": 2, "wall, 2 cores (min)": 1,
                           "wall, 16 cores (min)": 1, "wall, 64 cores (min)": 1}, index=False)

# %% [markdown]
# Deciding the {glue:text}`cost_planned` open claims that the plan can decide (of
# {glue:text}`cost_open`{glue:text}`cost_left_out`) takes {glue:text}`cost_seeds` fresh seeds and
# {glue:text}`cost_cpu_hours_measured:.1f` CPU-hours: on {glue:text}`cost_cores` cores about
# {glue:text}`cost_wall_2_measured`, {glue:text}`cost_wall_16_measured` and
# {glue:text}`cost_wall_64_measured`, the chapters one after another, each on every core. The plan
# leaves the other {glue:text}`cost_unplanned` out, and says why (how many, and the reason):
# {glue:text}`cost_reasons`.
#
# ## What this build paid per decided claim
#
# For comparison, this build's {glue:text}`cost_chapters` chapter records (this page's own left
# out) come to {glue:text}`cost_cpu_minutes_measured:.1f` CPU-minutes for the
# {glue:text}`cost_decided` claims they decided: {glue:text}`cost_minutes_measured:.2f` CPU-minutes
# per decided claim. Each chapter counts as if every one of its study cells had been computed in
# this build: its CPU seconds in this execution, plus the seconds its cells took when they were
# computed, for the cells the study cache served instead ({func}`fedbook.confirm.chapter_seconds`;
# a cell's seconds are its wall time on one torch thread, about its CPU). In this build
# {glue:text}`cost_cached`; {glue:text}`cost_no_studies` no study cells (a page that runs no study,
# or a record from before the build kept them: only its own seconds count){glue:text}`cost_wall`.
#
# Where those minutes went, chapter by chapter (*counted*: CPU, or wall where a chapter's CPU
# escapes the count; *claims*: its claims, not its controls), the most expensive first. The
# {glue:text}`cost_deciding_chapters` chapters that decided a claim spent
# {glue:text}`cost_deciding_minutes_measured:.1f` of these minutes,
# {glue:text}`cost_deciding_per_claim_measured:.2f` per decided claim{glue:text}`cost_undecided`; the
# {glue:text}`cost_other_chapters` chapters that declare no claim ({glue:text}`cost_other_names`)
# spent {glue:text}`cost_other_minutes_measured:.1f`: they check the papers' mathematics, the
# engines and the shared setting, rank the methods or describe the build, and a confirmatory run
# does not re-run them.

# %% tags=["hide-input"]
show_table(spent, digits={"minutes": 2, "share (%)": 1, "minutes per decided claim": 2}, index=False)
