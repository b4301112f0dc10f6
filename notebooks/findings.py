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
# This page gathers what the book found: every claim of the papers that a chapter tests, with
# its verdict, the interval it rests on, the seeds behind it and how many seeds would decide it if
# it is still open. Nothing on it is typed: it reads the claims records that the build wrote for
# each experiments chapter (each chapter's claims table, row by row), so it says what the
# chapters say. Each quotation is shortened here; its link opens the chapter's table at that row,
# where the whole quotation, the quantity, the decision rule and the substitution that affects it
# stand. How a verdict is decided from an interval over seeds is explained in
# {ref}`reading-claims`.

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke", "book" or "paper": which build's records this page reads (it trains nothing)
seed = 0  # unused: the page trains nothing (every chapter declares a seed)
records = None  # {profile: folder of that build's chapter records}; book/build.py passes it

# %% tags=["hide-input"]
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display
from myst_nb import glue

from fedbook.page import setup, show_table
from fedbook.records import findings_counts, findings_html, read_findings, toc_chapters
from fedbook.claims import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, VERDICT_COLOURS

PROFILES = {"smoke": {}, "book": {}, "paper": {}}
P = setup(PROFILES, profile)
ROOT = Path("..").resolve()  # the chapters execute in notebooks/
records = records or {profile: "../book/chapters" if profile == "book" else f"../book/_{profile}/chapters"}
parts = toc_chapters(ROOT / "book" / "_toc.yml")
findings, not_built = read_findings(records[profile], parts)
# the chapters with a claims table (those that call claims_report) that this build has no record of
not_built = [n for n in not_built if n != "findings" and "claims_report(" in (ROOT / "notebooks" / f"{n}.py").read_text()]
counts = findings_counts(findings)
claims = findings[findings["kind"] == "claim"]

# %% tags=["remove-cell"]
total = counts.loc["all papers"]
papers = [p for p in counts.index if p != "all papers"]
glue("n_claims", int(total["claims"]), display=False)
glue("n_holds", int(total[HOLDS]), display=False)
glue("n_not", int(total[DOES_NOT_HOLD]), display=False)
glue("n_inconclusive", int(total[INCONCLUSIVE]), display=False)
glue("n_papers", len(papers), display=False)
glue("n_controls", int((findings["kind"] == "control").sum()), display=False)
glue("n_rows", len(findings), display=False)
glue("n_headline", int(total["headline claims"]), display=False)
glue("headline_decided", int(total["headline decided"]), display=False)
glue("decided_percent", float(100 * (total[HOLDS] + total[DOES_NOT_HOLD]) / max(int(total["claims"]), 1)), display=False)
glue("not_built_text", "every chapter with claims was built for it" if not not_built else
     f"the chapters with claims {', '.join(not_built)} have no record in this build, so their claims are missing", display=False)
most = counts.loc[papers, HOLDS].idxmax() if papers else "none"
glue("most_holds_paper", most, display=False)
glue("most_holds", int(counts.loc[most, HOLDS]) if papers else 0, display=False)
glue("profile", P.profile, display=False)

# %% [markdown]
# ## The verdicts, counted
#
# This build ({glue:text}`profile` profile) tests {glue:text}`n_claims` claims of
# {glue:text}`n_papers` papers: {glue:text}`n_holds` hold, {glue:text}`n_not` do not hold and
# {glue:text}`n_inconclusive` are inconclusive at this scale, so
# {glue:text}`decided_percent:.0f` % are decided either way. Of the {glue:text}`n_headline`
# headline claims (those of a paper's abstract or conclusion), {glue:text}`headline_decided` are
# decided. {glue:text}`most_holds_paper` has the most claims that hold
# ({glue:text}`most_holds`). The counts leave out the book's {glue:text}`n_controls` controls
# (questions of our own that check a setting can test a claim at all); they are listed with the
# claims below. For this page {glue:text}`not_built_text`.
#
# A verdict is a statement about our scale: small federations, few rounds, the substitutions each
# chapter names. "Does not hold" means the interval over seeds clears the claimed direction the
# other way; "inconclusive" means it does not clear either side, and the last column of the table
# below says how many seeds the observed spread would need to decide it.

# %% tags=["hide-input"]
show_table(counts.rename(columns={"claims": "claims tested"}), digits=0,
           best={HOLDS: "max"} if len(papers) > 1 else None)

# %% tags=["hide-input"] mystnb={"figure": {"caption": "The verdicts of each paper's claims at this build's scale: claims that hold (green), that do not hold (red) and that are inconclusive at this scale (grey), one bar per paper; controls are not counted.", "name": "fig-findings-verdicts"}, "image": {"alt": "Horizontal stacked bars, one per paper, split into the number of claims that hold in green, that do not hold in red and that are inconclusive in grey."}}
fig, ax = plt.subplots(figsize=(8, 0.55 * max(len(papers), 1) + 1.2))
left = pd.Series(0, index=papers, dtype=float)
for verdict in (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE):
    values = counts.loc[papers, verdict].astype(float)
    ax.barh(papers, values, left=left, color=VERDICT_COLOURS[verdict], edgecolor="#555555", label=verdict)
    for y, (x0, v) in enumerate(zip(left, values)):
        if v:
            ax.text(x0 + v / 2, y, f"{int(v)}", ha="center", va="center", fontsize=9)
    left += values
ax.invert_yaxis()
ax.set_xlabel("claims")
ax.legend(loc="lower right", fontsize=8, frameon=False)
fig.tight_layout()
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

# %% tags=["remove-cell"]
other = "smoke" if P.profile != "smoke" else "book"
other_folder = (records or {}).get(other)
other_findings = read_findings(other_folder, parts)[0] if other_folder and Path(other_folder).exists() else None
if other_findings is None or other_findings.empty:
    glue("ex1_text", f"This machine has no {other}-profile build to compare with: build it and re-run this page.",
         display=False)
    glue("ex1_table", show_table(pd.DataFrame({"note": [f"no {other} build"]}), index=False), display=False)
else:
    joined = findings.merge(other_findings, on=["chapter", "key"], suffixes=("", f" ({other})"))
    moved = joined[joined["verdict"] != joined[f"verdict ({other})"]]
    glue("ex1_text", f"Of the {len(joined)} rows both builds have, {len(moved)} change verdict between the "
         f"{P.profile} profile and the {other} profile; the table lists them (the same rows, read from the two "
         "builds' records).", display=False)
    shown = moved[["paper", "key", "verdict", f"verdict ({other})", "n", f"n ({other})"]].rename(
        columns={"verdict": f"verdict ({P.profile})", "n": f"seeds ({P.profile})", f"n ({other})": f"seeds ({other})"})
    glue("ex1_table", show_table(shown if len(shown) else pd.DataFrame({"note": ["no verdict changes"]}), index=False),
         display=False)

# %% [markdown]
# 2. *(code)* **Which open claims are nearest to a decision?** Write the few lines that list the
#    inconclusive claims whose "seeds to decide" is a number, fewest seeds first, with the seeds
#    they rest on now. Which paper's open claims would a modest budget (twice the seeds) settle?
#
# :::{dropdown} Hint
# `read_findings` gives the table behind this page; the column `seeds to decide` reads
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

# %% tags=["remove-cell"]
open_ = findings[(findings["kind"] == "claim") & (findings["verdict"] == INCONCLUSIVE)]
needed = open_["seeds to decide"].str.extract(r"n = ([\d,]+)")[0].str.replace(",", "").astype(float)
near = open_.assign(needed=needed).dropna(subset=["needed"]).sort_values("needed", kind="stable")
within = near[near["needed"] <= 2 * near["n"]]
glue("ex2_text", f"{len(open_)} claims are open; for {len(near)} of them a number of seeds would decide at the observed "
     f"spread, and {len(within)} would need at most twice the seeds they rest on now"
     + (f" ({', '.join(f'{p}: {k}' for p, k in within.groupby('paper', sort=False).size().items())})." if len(within) else ".")
     + " The others need more seeds than a chapter can afford, or no number of seeds would decide them at the observed "
     "mean (a mean inside the band the rule leaves undecided).", display=False)
glue("ex2_table", show_table(near[["paper", "key", "n", "needed"]].rename(columns={"n": "seeds now", "needed": "seeds to decide"})
                             if len(near) else pd.DataFrame({"note": ["no open claim has a number"]}), digits=0, index=False),
     display=False)
