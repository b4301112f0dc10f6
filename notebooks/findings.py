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
# (chapter-findings)=
# # Findings: every claim at a glance
#
# What the book found, paper by paper: which of each paper's headline claims (those of its abstract
# or conclusion) hold, which do not, which remain open and what would decide them. The sentences
# are written from the build's records of each chapter's claims table (nothing here is typed),
# and the same sentences open each experiments chapter; each claim's name links to its row.
# The {term}`verdicts <holds>` and the other terms are defined in the {doc}`../glossary`.
#
# ```{glue} paper_summaries
# ```

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke", "book" or "paper": which build's records this page reads (it trains nothing)
seed = 0  # unused: the page trains nothing (every chapter declares a seed)
records = None  # {profile: folder of that build's chapter records}; book/build.py passes it
confirm_records = None  # folder of the profile's confirmatory records (book/_confirm/<profile>/chapters); book/build.py passes it

# %% tags=["hide-input"]
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import display

from fedbook.claims import HOLDS
from fedbook.page import glue_all, setup, show_table
from fedbook.catalog import (confirm_note, confirm_numbers, findings_counts, findings_html, findings_numbers,
                             nearest_decisions, paper_summaries, plot_verdicts, read_confirmations, read_findings,
                             toc_chapters, verdict_changes, with_confirmations)

PROFILES = {"smoke": {}, "book": {}, "paper": {}}
P = setup(PROFILES, profile)
ROOT = Path("..").resolve()  # the chapters execute in notebooks/
records = records or {profile: "../book/chapters" if profile == "book" else f"../book/_{profile}/chapters"}
parts = toc_chapters(ROOT / "book" / "_toc.yml")
findings, not_built = read_findings(records[profile], parts)
# the chapters with a claims table (those that call claims_report) that this build has no record of
not_built = [n for n in not_built if n != "findings" and "claims_report(" in (ROOT / "notebooks" / f"{n}.py").read_text()]
counts = findings_counts(findings)
confirm_records = confirm_records or f"../book/_confirm/{profile}/chapters"
# the claims whose confirmatory verdict stands (section "Confirmatory runs"), marked in the table of every claim
findings = with_confirmations(findings, read_confirmations(records[profile], confirm_records, parts)
                              if Path(confirm_records).is_dir() else None)
glue_all({**findings_numbers(findings, counts, not_built, P.profile), **verdict_changes(findings, records, P.profile, parts),
          **nearest_decisions(findings), "paper_summaries": paper_summaries(records[profile], parts),
          "confirm_note": confirm_note(findings)})

# %% [markdown]
# This page gathers every claim of the papers that a chapter tests, with its verdict, the interval
# it rests on, the seeds behind it and how many seeds would decide it if it is still open. It
# reads the claims records that the build wrote for each experiments chapter (each chapter's claims
# table, row by row), so it says what the chapters say. Each quotation is shortened here; its link
# opens the chapter's table at that row, where the whole quotation, the quantity, the decision
# rule and the substitution that affects it stand. How a verdict is decided from an interval over
# seeds is explained in {ref}`reading-claims`.

# %% [markdown]
# ## The verdicts, counted
#
# This build ({glue:text}`profile` profile) tests {glue:text}`n_claims` claims of
# {glue:text}`n_papers` papers: {glue:text}`n_holds` hold, {glue:text}`n_not` do not hold
# ({glue:text}`n_not_smaller` smaller than claimed, {glue:text}`n_not_opposite` in the opposite
# direction), {glue:text}`n_inconclusive` are inconclusive at this scale and
# {glue:text}`n_untestable` are untestable here ({glue:text}`n_untestable_resolution` at their
# quantity's resolution, {glue:text}`n_untestable_setting` in this setting), so
# {glue:text}`decided_percent:.0f` % are decided either way. Of the {glue:text}`n_headline`
# headline claims (those of a paper's abstract or conclusion), {glue:text}`headline_decided` are
# decided. Of the {glue:text}`n_headline_method` headline claims about the papers' own methods,
# {glue:text}`headline_method_holds` hold, {glue:text}`headline_method_not` do not hold and
# {glue:text}`headline_method_open` remain open (inconclusive or untestable); the
# {glue:text}`n_headline_problem` about the problems the papers address (a baseline's failure, which
# motivates a method but is not the method working) are counted apart, and
# {glue:text}`headline_problem_holds` of them hold. The counts leave out the book's {glue:text}`n_controls` {term}`controls <control>`
# (questions of our own that check a setting can test a claim at all); they are listed with the
# claims below. For this page {glue:text}`not_built_text`. {glue:text}`confirm_note`
#
# A verdict is a statement about our scale: small federations, few rounds, the substitutions each
# chapter names.
#
# **How a row is decided.** Each claim declares, before anything runs, its *smallest effect of
# interest* $m$: {glue:text}`effect_share` of the gain the paper reports for that comparison, or,
# where the paper reports none, a default for the kind of quantity (one point of accuracy, 0.1 of
# a correlation). The paired difference *ours − baseline* over seeds then gives a 95 % interval,
# and the figure below shows the three zones it can fall in. If the whole interval lies beyond $m$
# in the claimed direction, the claim **holds**. If the whole interval lies short of $m$, the data
# exclude an effect of the claimed size and the claim **does not hold**: *smaller than claimed*
# when the interval still reaches the claimed side of zero (a tie lands here), *the opposite
# direction* when it lies wholly on the other side. An interval across $m$ is **inconclusive**,
# and more seeds would decide it, unless the true effect sits exactly on $m$. Two checks come
# before the interval is read, and a row that fails either is **untestable**, counted apart from
# the inconclusive ones: *at this resolution*, when one unit of the quantity (one test image of
# the set it is read on) is more than {glue:text}`resolution_share` of $m$, so the effect could not
# be measured; *in this setting*, when a regime check declared with the claim fails (the
# backbone still reshaping its features when a client departs, a domain whose embeddings carry no
# signal): then the row says which check failed, and its chapter says what setting would test it.
# The details are in {ref}`reading-claims`.
#
# ```{figure} ../figures/rule-zones.svg
# :name: fig-findings-zones
# :alt: An axis of the paired difference with 0 and m marked; right of m a green zone where an interval holds, left of m a red zone where it does not hold; five example intervals: one wholly beyond m (holds), one across m (inconclusive), one between 0 and m (smaller than claimed), one around 0 (a tie, smaller than claimed) and one wholly below 0 (the opposite direction).
#
# The three zones around the smallest effect of interest $m$: an interval wholly beyond $m$
# holds, one wholly short of it does not hold (smaller than claimed, or in the opposite
# direction), one across it is inconclusive.
# ```
#
# The last column of the table of every claim, further down, says how many seeds the observed
# spread would need to decide an open row.

# %% tags=["hide-input"]
show_table(counts.rename(columns={"claims": "claims tested"}), digits=0, best={HOLDS: "max"} if len(counts) > 2 else None)

# %% tags=["hide-input"] mystnb={"figure": {"caption": "The verdicts of each paper's claims at this build's scale: claims that hold (green), that do not hold because the effect is smaller than claimed (light red) or goes the opposite way (red), that are inconclusive at this scale (grey) and that are untestable at their quantity's resolution (sand, hatched) or in this setting (sand), one bar per paper; controls are not counted.", "name": "fig-findings-verdicts"}, "image": {"alt": "Horizontal stacked bars, one per paper, split into the number of claims that hold in green, that do not hold in two shades of red, that are inconclusive in grey and that are untestable in sand."}}
plot_verdicts(counts)
plt.show()

# %% [markdown]
# ## Every claim
#
# One row per row of the chapters' claims tables ({glue:text}`n_rows` rows, controls included),
# in the book's order. The two menus above the table keep one paper's or one verdict's rows (they
# need the browser's scripts; without them every row shows). "Ours" is the mean paired difference
# with its 95 % interval, in the unit of the claim's quantity (under the quotation); against every
# baseline of a tuple it lists each baseline's interval. "Seeds to decide" is "decided", or the
# seeds the observed spread would need, or why no number of seeds would do.

# %% tags=["hide-input"]
display(findings_html(findings))

# %% [markdown]
# (findings-confirmatory)=
# ## Confirmatory runs
#
# A claim still open here can be decided by a **confirmatory run** on more machines:
#
# ```bash
# .venv/bin/python book/build.py --confirm --plan-only     # print and save the plan from the book build's records
# .venv/bin/python book/build.py --confirm                 # plan, then run the planned chapters on their fresh seeds
# .venv/bin/python book/build.py --confirm -p executor=ray --workers 16   # the same on a local Ray instance of 16 CPUs
# ```
#
# From this build's records, the command plans how many **fresh seeds** (from
# {glue:text}`confirm_first_seed` on, none of them the book's) would decide each open claim with a
# power of {glue:text}`confirm_power`, at most {glue:text}`confirm_cap` seeds a claim: the power at
# a true effect $m$ away from the decision threshold (for a claimed gain or drop, an effect of twice
# $m$ if the claim holds and none if it does not; for a claim that ours is no worse, or no more, than
# a baseline by $m$, no effect if it holds and $2m$ the wrong way if it does not), with the spread the
# book's seeds measured. That power is nominal: it takes the spread of the book's few seeds as the
# true one. Against every baseline of a tuple it multiplies the baselines' powers as if they were
# independent; they share the method's runs, so that product errs low. None of the fresh seeds is
# one the book's chapters or their studies ran. The command then runs the chapters that hold such
# claims on those seeds and decides each planned claim on the fresh seeds alone. The book's seeds only size the run: their mean is not used, and they are not reused,
# because adding seeds to the book's until a claim decides would make the number of seeds depend on
# the results, and a claim looked at again after every seed gets many chances to cross a threshold
# by chance: both error rates of the rule would grow. For the claims a confirmatory run was planned
# for from this build's records, its verdict stands; for every other claim (and where the run was
# planned from an earlier build of the chapter), this page's.
#
# {glue:text}`confirm_text`
#
# ```{glue} confirm_table
# ```

# %% tags=["hide-input"]
glue_all(confirm_numbers(records[profile], confirm_records, parts))

# %% [markdown]
# ## Exercises
#
# 1. *(parameters only)* **How do the verdicts move with the scale?** Build the book at the smoke
#    profile (`make smoke`, a few minutes) and compare its findings with this page's: which
#    claims change verdict, and in which direction?
#
# :::{dropdown} Hint
# The smoke build writes its own records (`book/_smoke/chapters/<name>.json`); this page reads any
# build's records (`python book/build.py --profile smoke --only findings`). Compare the two
# tables row by row on the chapter and the claim's key.
# :::
#
# :::{dropdown} Worked solution
# {glue:text}`ex1_text`
#
# ```{glue:figure} ex1_table
# ```
#
# A smoke run has few seeds and few rounds: most of its intervals are wide, so a claim decided
# here is mostly inconclusive there, and a verdict that flips between "holds" and "does not hold"
# says the setting, not only the noise, has changed.
# :::

# %% [markdown]
# 2. *(code)* **Which open claims are nearest to a decision?** Write the few lines that list the
#    inconclusive claims whose "seeds to decide" is a number, fewest seeds first, with the seeds
#    they rest on now. Which paper's open claims would a modest budget (twice the seeds) settle?
#
# :::{dropdown} Hint
# `fedbook.catalog.read_findings` gives the table behind this page; the column `seeds to decide` reads
# `"n = 12"` where a number of seeds would decide the claim at the observed spread.
# :::
#
# :::{dropdown} Worked solution
# ```python
# open_ = findings[(findings["kind"] == "claim") & (findings["verdict"] == INCONCLUSIVE)]
# needed = open_["seeds to decide"].str.extract(r"n = ([\d,]+)")[0].str.replace(",", "").astype(float)
# near = open_.assign(needed=needed).dropna(subset=["needed"]).sort_values("needed")
# ```
#
# {glue:text}`ex2_text`
#
# ```{glue:figure} ex2_table
# ```
# :::
