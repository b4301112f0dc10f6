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
# (chapter-leaderboard)=
# # Leaderboard: every method under one protocol
#
# Each paper chapter of this book tests its paper in the paper's own terms: its data, its model,
# its baselines. This page asks a different question: **if every method that fedlib implements
# runs on the same federation, with the same model, the same rounds and the same local training,
# and is read through the same evaluation protocol, how do they order?** Nothing is tuned per
# method; every number below is the last round's, over several seeds, with its interval; and the
# order itself comes with its uncertainty: how often each method would come first if the seeds
# had been others.
#
# The methods are those of the registry (`fedlib.algorithms.registered`). A method that
# cannot run on a shared federation is not dropped silently: it is listed with the reason its
# class gives. The procedures are `fedbook.studies.leaderboard`; the protocol is the one
# of {ref}`chapter-setting`.

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke" (seconds), "book" (the default, minutes on 2 cores), "paper" (more seeds and rounds)
seed = 0  # the first seed; the seeds are seed, seed + 1, ..., and the rank bootstrap's stream derives from seed
n_seeds = None  # seeds per method and federation
alphas = None  # Dirichlet concentrations of the label skew, e.g. [0.1, 0.5]
rounds = None  # training rounds (a statistics-first method runs one statistics round more)
local_epochs = None  # local epochs per round, every method
n_clients = None  # clients per federation
methods = None  # registered names to run (None: every registered method that can run)
rank_by = None  # the metric the board is ordered and the bootstrap ranks on: "pooled", "worst_pooled", ...
n_boot = None  # bootstrap resamples of the seeds for the rank uncertainty
results_dir = None  # where the tidy per-run rows are saved (None: not saved)
cache_dir = None  # where the study keeps each cell's frames (book/build.py gives the profile's own); None: no cache
workers = 1  # processes the study's cells run in (the numbers do not depend on it)
execution = "vectorized"  # "vectorized": the clients of every method that can stack them train stacked; "sequential": none

# %% tags=["hide-input"]
import os
import time
from functools import partial

import matplotlib.pyplot as plt
import pandas as pd

from fedbook.page import format_bytes, glue_all, save_frames, setup, show_table
from fedbook.studies.leaderboard import (COLUMNS, LeaderboardConfig, board, digit_vectors, leaderboard_cell,
                                         method_table, named, numbers, plot_accuracy, rank_bootstrap, split_methods,
                                         summary_table)
from fedbook.studies.setting import partition_label
from fedbook.study import Study, run_study

PROFILES = {
    "smoke": dict(n_samples=400, n_clients=4, alphas=[0.1, 0.5], global_test_per_class=5, n_seeds=2, rounds=2,
                  local_epochs=1, finetune_epochs=1, lr=0.05, hidden=[16], total_per_class=10, methods=None,
                  rank_by="pooled", n_boot=100),
    "book": dict(n_samples=None, n_clients=10, alphas=[0.1, 0.5], global_test_per_class=30, n_seeds=5, rounds=20,
                 local_epochs=1, finetune_epochs=5, lr=0.05, hidden=[128, 64], total_per_class=40, methods=None,
                 rank_by="pooled", n_boot=2000),
    "paper": dict(n_samples=None, n_clients=20, alphas=[0.1, 0.5], global_test_per_class=30, n_seeds=10, rounds=50,
                  local_epochs=2, finetune_epochs=5, lr=0.05, hidden=[128, 64], total_per_class=40, methods=None,
                  rank_by="pooled", n_boot=5000),
}

# %% tags=["hide-input"]
P = setup(PROFILES, profile, threads=1, n_seeds=n_seeds, alphas=alphas, rounds=rounds, local_epochs=local_epochs,
          n_clients=n_clients, methods=methods, rank_by=rank_by, n_boot=n_boot)
if P.rank_by not in COLUMNS:
    raise ValueError(f"unknown rank_by {P.rank_by!r}; valid: {', '.join(COLUMNS)}")
SEEDS = list(range(seed, seed + P.n_seeds))
config = LeaderboardConfig(rounds=P.rounds, local_epochs=P.local_epochs, lr=P.lr, finetune_epochs=P.finetune_epochs,
                           hidden=tuple(P.hidden), total_per_class=P.total_per_class)
data = digit_vectors(P.n_samples, seed=seed)
names, excluded = split_methods(P.methods)
print(f"profile {P.profile}: {data.name}, {len(data)} samples of {data.x.shape[1]} values, {P.n_clients} clients, "
      f"alphas {P.alphas}, seeds {SEEDS}, {P.rounds} rounds of {P.local_epochs} local epoch(s), "
      f"{len(names)} methods run, {len(excluded)} excluded")

# %% [markdown]
# ## The protocol
#
# **What every method shares.** The data are the scikit-learn digits, {glue:text}`lb_n_samples`
# handwritten digits (the `smoke` profile keeps a seeded subset), each read as a vector of
# {glue:text}`lb_n_features` pixel values: the methods that work on feature vectors (GGEUR and its
# baselines) then run on them as they are. For every seed, one call builds the federations of
# every Dirichlet concentration $\alpha$ (a class-balanced global test set held out first, the
# label-skew partition of the rest over {glue:text}`lb_clients` clients, a local test split of
# {glue:text}`lb_test_percent` % of each client's data, as in {ref}`chapter-setting`), and **every
# method of that seed trains on the same federation**, from the same initial weights of the same
# MLP (hidden widths {glue:text}`lb_hidden`; IFCA draws its extra cluster models' weights from a
# stream of its own), for {glue:text}`lb_rounds` training rounds with full participation. Every
# local update is the same SGD ({glue:text}`lb_epochs` local epoch(s), learning rate
# {glue:text}`lb_lr`, momentum {glue:text}`lb_momentum`, batches of {glue:text}`lb_batch`), and
# so are Ditto's personal update and FedRep's head update; the fine-tuning before deployment of
# FedAvg-FT and FedBABU runs for {glue:text}`lb_ft_epochs` epochs at the same learning rate. Every
# other hyper-parameter, the deployment steps of MPT, CGRL and FedProto included, is the class's default;
# the table says which parameter receives what, and the few places where this page departs from
# a default, with the reason.

# %% tags=["hide-input"]
show_table(named(method_table(names, config), key_column=True), wrap=True)

# %% [markdown]
# **Who is not on the board.** Of the {glue:text}`lb_n_registered` registered methods,
# {glue:text}`lb_n_methods` run and {glue:text}`lb_n_excluded` cannot
# ({glue:text}`lb_excluded_names`). The reason is read from each class, not typed: a constructor
# parameter without a default names something the shared federation does not hold, and the
# class's `model_agnostic` flag says it was built for clients of different architectures. The
# COSMOS family exchanges pseudo-labels on an unlabeled public set that every client and the
# server read; giving them one would take data away from the clients of the others, so they are
# compared among themselves in the COSMOS chapters instead.

# %% tags=["hide-input"]
show_table(named(excluded, key_column=True) if len(excluded) else
           pd.DataFrame({"reason": ["every method runs"]}, index=pd.Index(["—"], name="method")), wrap=True)

# %% [markdown]
# **What each column means.** Every number is read at the **final round**, never at the best
# round: choosing the best of {glue:text}`lb_rounds` evaluations would favour the methods whose
# curves are the noisiest. Per run, the protocol ({func}`fedlib.metrics.protocol_summary`) gives:
#
# | column | what it is |
# |---|---|
# | mean client accuracy | the mean over clients of each client's **pooled** score: its deployed predictor on the class-balanced global test set, each class's recall weighted by the client's own class mix |
# | worst client | the lowest pooled score of a client |
# | bottom 20 % of clients | the mean pooled score of the lowest $\lceil 0.2\,m \rceil$ of the $m$ clients |
# | global accuracy | the mean over clients of the class-balanced accuracy on the global test set (every class counts the same) |
# | local accuracy | the mean over clients of the accuracy on the client's own local test split |
# | bytes per client and round | the training messages (down and up) of the whole run over clients × rounds, from the run's ledger ({class}`fedlib.messages.Ledger`) |
#
# The clients of every method that can stack them (its class's `Capabilities.stacks`) train
# stacked, as one batched computation ({mod}`fedlib.engines.vectorized`, parameter `execution`),
# at less CPU. A batched computation sums in another order: the weights agree with those of
# training the clients one after another to float32 rounding, not bit for bit, so an accuracy
# may differ in a rare case (a score on the edge between two classes). The run stays
# deterministic: the same seed gives the same bits, stacked. The bytes column may differ from a
# sequential run's by a few bytes per client and round: a reply's metadata carries the client's
# mean training loss, which the stacked computation rounds differently in its last bits, and a
# float's text can be a few digits longer or shorter.
#
# Why the pooled score for the client's accuracy, and above all for the worst client? A client's
# local test split holds a few dozen digits here, and fewer for a small client: one image moves
# its local accuracy by several points, so the worst local accuracy would mostly name the client
# with the smallest test split. The pooled score asks the same question, how well the predictor
# serves this client's label distribution, on hundreds of images. Each cell is the mean over
# {glue:text}`lb_seeds` seeds with the half-width of its 95 % Student's t interval
# ({func}`fedbook.intervals.mean_interval`): the leader's cell at the most skewed $\alpha$ below,
# {glue:text}`lb_example_cell`, reads "between {glue:text}`lb_example_low:.1f` and
# {glue:text}`lb_example_high:.1f` with 95 % confidence, as far as seed-to-seed variation goes".

# %%
# every method of a seed trains on the same federation from the same initial weights (the page's data: its seed)
LEADERBOARD = Study("leaderboard", partial(leaderboard_cell, config=config, n_samples=P.n_samples, data_seed=seed,
                                           n_clients=P.n_clients, global_test_per_class=P.global_test_per_class,
                                           execution=execution),
                    grid={"alpha": P.alphas, "method": names}, seeds=SEEDS)
board_runs = run_study(LEADERBOARD, workers=workers, threads=1, cache=cache_dir)
rows, run_seconds = board_runs["leaderboard"], board_runs.seconds  # the cells' own time, cached ones included
save_frames({"leaderboard": rows}, results_dir)
summary = summary_table(rows)
ranks = rank_bootstrap(rows, P.rank_by, n_boot=P.n_boot, seed=seed)

# %% [markdown]
# ## The leaderboard
#
# One table for every $\alpha$, each ordered by {glue:text}`lb_rank_by` (best first). The last two
# columns come from the rank bootstrap of the next section: the share of seed resamples in which
# the method ranks first, and its median rank.

# %% tags=["hide-input"]
for a in P.alphas:  # one table per α; the methods by the names of the method table above
    display(show_table(named(board(summary, a, ranks, sort_by=P.rank_by)), digits={"ranked first (%)": 0, "median rank": 1},
                       formats={"bytes per client and round": format_bytes}).set_caption(
        f"{partition_label(a)}: mean ± half-width of the 95 % interval over seeds (where that interval would "
        f"leave [0, 100] %, it is shown clipped to it, as [low, high])"))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Mean client accuracy (dot) with its 95 % interval over seeds (bar) and the worst client (cross) of every method, one panel per Dirichlet concentration $\\alpha$; methods ordered by their mean client accuracy at the most skewed $\\alpha$. Final round, pooled scores.", "name": "fig-leaderboard-accuracy"}, "image": {"alt": "Horizontal dot plots, one panel per alpha, with one row per method: a dot with a horizontal error bar for the mean client accuracy over seeds and a cross for the worst client, on a 0 to 100 percent axis. The order of the rows is the same in every panel."}}
plot_accuracy(summary, P.alphas)
plt.show()

# %% [markdown]
# {numref}`fig-leaderboard-accuracy` draws the same numbers with their intervals. At the most
# skewed federation ($\alpha =$ {glue:text}`lb_alpha_hard`),
# **{glue:text}`lb_leader_hard`** leads with a mean client accuracy of
# {glue:text}`lb_leader_acc_hard:.1f` % (± {glue:text}`lb_leader_half_hard:.1f`) and a worst
# client at {glue:text}`lb_leader_worst_hard:.1f` %; {glue:text}`lb_ref_hard` reaches
# {glue:text}`lb_ref_acc_hard:.1f` % with a worst client at {glue:text}`lb_ref_worst_hard:.1f` %.
# At $\alpha =$ {glue:text}`lb_alpha_mild` the leader is **{glue:text}`lb_leader_mild`**
# ({glue:text}`lb_leader_acc_mild:.1f` %, worst client {glue:text}`lb_leader_worst_mild:.1f` %),
# against {glue:text}`lb_ref_acc_mild:.1f` % for {glue:text}`lb_ref_mild`.
#
# Mean client accuracy and global accuracy measure different things, and the board shows it: the
# personalized methods (a personal head or model per client) serve their clients' own label
# distributions and can do so while recognizing the rest of the classes poorly. At
# $\alpha =$ {glue:text}`lb_alpha_hard` the largest gap between the two columns is
# {glue:text}`lb_personal_hard`'s: {glue:text}`lb_personal_gap_hard:.1f` points more on the
# clients' own mixes than on the class-balanced global test set, while the best global accuracy is
# {glue:text}`lb_best_global_hard`'s ({glue:text}`lb_best_global_acc_hard:.1f` %). Which column
# matters depends on the deployment: a client that will only ever see its own classes, or one that
# must recognize every class of the federation.
#
# ## How sure is the order?
#
# {glue:text}`lb_seeds` seeds give a mean and an interval per cell, but a leaderboard is read as an order, and two
# methods whose intervals overlap may swap places with other seeds. The rank bootstrap
# (`fedbook.studies.leaderboard.rank_bootstrap`) draws {glue:text}`lb_n_boot` resamples of
# the seeds with replacement, **the same resample for every method** (the methods of a seed share
# its federation and initial weights, so their results are paired), recomputes every method's
# mean, and ranks them. A method's share of first places is how often it would lead; its median
# rank is where it typically lands. Ties share a place. The resamples come from one numpy
# generator derived from the page's `seed`, so the shares are reproducible.
#
# A share of first places alone can overstate how settled a first place is: a lead on every
# seed, however small, is first in every resample. So the page calls a first place
# settled only when the leader is first in at least {glue:text}`lb_settled_share` % of the resamples
# **and** the 95 % interval of its paired lead over the runner-up (the mean over seeds of the
# difference, {func}`fedbook.intervals.mean_interval`) clears zero.
#
# At $\alpha =$ {glue:text}`lb_alpha_hard`, the methods ranked first in at least
# {glue:text}`lb_contender_share` % of the resamples are {glue:text}`lb_contenders_hard`: {glue:text}`lb_verdict_hard`. At
# $\alpha =$ {glue:text}`lb_alpha_mild` they are {glue:text}`lb_contenders_mild`:
# {glue:text}`lb_verdict_mild`.
#
# How to read this: a share near 100 % says that these seeds leave little doubt about the first
# place *under this protocol*; a share split between several methods says the data cannot tell
# them apart, and more seeds (the `paper` profile, or `-p n_seeds=10`) are the honest way to
# decide. The bootstrap resamples only the seeds we ran: it says nothing about another data set,
# another model or other hyper-parameters, and with few seeds it is itself coarse: there are only
# {glue:text}`lb_n_resamples` distinct resamples of {glue:text}`lb_seeds` seeds.

# %% [markdown]
# ## Communication
#
# The bytes column counts what the round loop's ledger recorded for training (the evaluation
# messages are left out), over clients and rounds. {glue:text}`lb_ref` sends the model down and
# back: {glue:text}`lb_ref_bytes` per client and round at $\alpha =$ {glue:text}`lb_alpha_hard`.
# The cheapest method is {glue:text}`lb_cheapest` ({glue:text}`lb_cheapest_bytes`), the most
# expensive {glue:text}`lb_dearest` ({glue:text}`lb_dearest_bytes`). Methods that keep their head
# at home send less than the whole model; methods that send statistics, references or several
# models besides it send more; a statistics-first method's extra round is averaged into its
# per-round figure.
#
# ## Caveats
#
# - **This is not any paper's setting.** The digits are small images of {glue:text}`lb_n_features` pixels; the model is a
#   small MLP; the rounds are few. A method designed for CLIP embeddings (GGEUR), for deep
#   features (MPT, CGRL) or for many rounds may order differently at its paper's scale, which
#   the paper chapters test.
# - **Defaults, not tuned settings.** Every method runs with its class's defaults and the shared
#   local training; a method that needs a different learning rate or a longer warm-up is at a
#   disadvantage here, and a per-method search on a validation split would be the fair next step.
# - **Inputs as vectors.** CGRL's augmentations act on images, so it runs with identity views
#   here (stated in the method table): that is CGRL without its augmentation.
# - **One data set, one kind of skew.** Label skew at a few strengths is one kind of heterogeneity; feature
#   shift, client departures and differing architectures are the subjects of other chapters.
#
# ## Re-running this chapter
#
# ```bash
# .venv/bin/python book/build.py --only leaderboard --out runs/leaderboard \
#     -p n_seeds=10 -p "alphas=[0.05, 1.0]" -p rank_by=worst_pooled
# ```
#
# (`--out` keeps the run apart from the book's own executed chapter.)
#
# The whole page took {glue:text}`leaderboard_cpu_seconds:.0f` CPU seconds at this profile
# (the runs themselves {glue:text}`lb_run_seconds:.0f` s, each measured when it ran: a run read back
# from the study cache counts the time it took then).
#
# ## Exercises
#
# Both exercises are answered from the runs above: no new training.

# %% [markdown]
# 1. *(code)* **Accuracy per byte.** At $\alpha =$ {glue:text}`lb_alpha_hard`, which methods are on the
#    Pareto front of mean client accuracy against bytes per client and round (no other method is
#    at least as accurate and at most as expensive, and better on one of the two)? Which methods
#    beat {glue:text}`lb_ref` on accuracy without sending more?
#
# :::{dropdown} Hint
# `fedbook.studies.leaderboard.pareto_front` takes two mappings, method → accuracy and
# method → bytes. Read both from the summary table (`summary.loc[alpha, "pooled"]` and
# `summary.loc[alpha, "bytes_per_client_round"]`). The front ignores the intervals: a method just
# off it may be on it with other seeds.
# :::
#
# :::{dropdown} Worked solution
# The front holds {glue:text}`ex1_n_front` method(s): {glue:text}`ex1_front`. More accurate than
# {glue:text}`lb_ref` at no more bytes (gain in points of mean client accuracy):
# {glue:text}`ex1_dominate`. To see why a method sits where it does, read its row of the method
# table: a method that keeps its classifier head at home sends less than the whole model, one
# whose extra messages are a few counts adds almost nothing to the model's bytes, and one that
# sends class statistics for a deployed head pays for them every round. The front uses the means
# only: a gain smaller than the half-widths in the board is not one these seeds can vouch for.
# :::

# %% [markdown]
# 2. *(parameters only)* **Another yardstick.** Order the board at $\alpha =$ {glue:text}`lb_alpha_hard` by the worst
#    client instead of the mean client accuracy (`-p rank_by=worst_pooled`; the solution below
#    ranks by {glue:text}`ex2_metric`, the other of the two). Does the leader
#    change, how settled is its first place, and which methods move most?
#
# :::{dropdown} Hint
# No training is needed: `fedbook.studies.leaderboard.rank_bootstrap` takes the per-run
# rows and any metric of `COLUMNS`. The worst client of a run is one number per seed, so expect
# it to vary more from seed to seed than a mean over clients does.
# :::
#
# :::{dropdown} Worked solution
# Ranked by {glue:text}`ex2_metric`, the leader is {glue:text}`ex2_leader`, ranked first in
# {glue:text}`ex2_leader_first:.0f` % of the resamples: {glue:text}`ex2_same` the board's own
# order ({glue:text}`ex2_main_metric`), and {glue:text}`ex2_verdict`. {glue:text}`ex2_moved`
# method(s) move by {glue:text}`ex2_move` places or more between the two orders; the largest move is {glue:text}`ex2_moved_most`. A method can
# raise the mean by serving its large clients well and still leave a client behind; a method
# that shares knowledge across clients (statistics, prototypes, a common classifier) may lift the
# tail instead; the two orders say which methods do which here. Which order to publish depends on what the federation promises its weakest
# member.
# :::

# %% tags=["remove-cell", "solution"]
children = os.times()
glue_all({**numbers(rows, summary, ranks, P, names, excluded, data, config, seed), "lb_run_seconds": float(run_seconds),
          "leaderboard_cpu_seconds": float(time.process_time() + children.children_user + children.children_system)})
