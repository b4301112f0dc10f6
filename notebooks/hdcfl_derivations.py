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
# (chapter-hdcfl-derivations)=
# # HDC-FL: head-derived clustering, checked
#
# HDC-FL (Head-Derived Clustering for personalized federated learning) {cite:p}`hdcfl` trains one
# shared encoder with a private linear head per client, as FedAvg-SE does (the encoder is averaged;
# each head is cached on the server but never averaged nor sent to another client; the body/head
# split of FedPer and FedRep {cite:p}`fedrep`). At periodic refreshes the server turns the cached heads
# into normalized low-rank **descriptors**, groups them by k-means with $k$ chosen by silhouette,
# averages the cached encoders of each group into an **encoder prototype**, and gives each client a
# **soft mixture** of the prototypes (a softmax of its descriptor's cosine similarity to the group
# centroids over a temperature $T$), blended with the shared encoder by a weight $\lambda$ and
# paired with the client's own head. The shared training trajectory is never changed. This
# chapter checks the statements behind those steps, numerically and symbolically:
#
# 1. the descriptor (this book's documented choice of basis) is unit-norm, and the matrix of its
#    pairwise cosines does not depend on the basis the refresh happened to compute;
# 2. the soft membership lies on the simplex and goes to the hard assignment as $T \to 0$ and to
#    the uniform mixture as $T \to \infty$ (with a closed form for two groups, by sympy);
# 3. with one group and $\lambda = 1$ the personalized encoder **is** FedAvg-SE's shared encoder,
#    and with $\lambda = 0$ it is the shared encoder whatever the grouping;
# 4. how well the rank-$r$ projection keeps a planted grouping of synthetic heads;
# 5. why *short* local updates keep the clients' head coordinates comparable, measured;
# 6. what a refresh may and may not change on the server.
#
# The chapter ends with a live check table. The same statements are property tests in
# `tests/test_hdcfl_properties.py`. The implementation is {mod}`fedlib.clustering` (descriptors,
# k-means with silhouette, memberships, stability diagnostics) and {mod}`fedlib.algorithms.hdcfl`
# (the cache, the refresh, the personalized encoder).

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke" (seconds), "book" (the default, well under a minute), "paper" (more trials)
seed = 0  # every random draw is derived from it
trials = None  # random instances per numerical check (None: the profile's value)
noises = None  # noise levels of the planted head instances (section 4), e.g. [0.25, 0.5, 1.0]
steps = None  # local step counts s of section 5, e.g. [1, 4, 16, 64]
n_clients = None  # clients of the small federation (sections 3, 5, 6)
threads = 1  # torch CPU threads (1 is fastest on a shared 2-core machine)

# %% tags=["hide-input"]
import functools
import math

import numpy as np
import pandas as pd
import sympy as sp
from myst_nb import glue

from fedlib.algorithms.fedrep import FedAvgSE
from fedlib.algorithms.hdcfl import HDCConfig
from fedbook.page import setup, show_table
from fedbook.checks import CheckTable
from fedlib.data import load_uci_digits
from fedbook.studies.hdcfl_checks import (PlantedHeads, descriptor_invariance, local_drift, membership_limits,
                                             one_group_identity, planted_grouping, planted_summary, refresh_invariants)
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.models import build_model
from fedlib.training import TrainConfig

PROFILES = {
    "smoke": dict(trials=5, noises=[0.5, 2.5], planted_trials=1, steps=[1, 4, 16], n_clients=6, rounds=2,
                  warm_rounds=1, local_steps=3, sep_noise=0.5),
    "book": dict(trials=50, noises=[0.5, 1.5, 2.5, 3.5], planted_trials=3, steps=[1, 4, 16, 64], n_clients=10,
                 rounds=2, warm_rounds=5, local_steps=5, sep_noise=0.5),
    "paper": dict(trials=300, noises=[0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 5.0], planted_trials=20, steps=[1, 4, 16, 64, 256],
                  n_clients=20, rounds=2, warm_rounds=20, local_steps=5, sep_noise=0.5),
}
P = setup(PROFILES, profile, threads=threads, trials=trials, noises=noises, steps=steps, n_clients=n_clients)
checks = CheckTable()  # the closing check table

# the small federation of sections 3, 5 and 6: UCI digits at 8 x 8, a Dirichlet label skew
ALPHA = 0.3
digits = load_uci_digits(size=8)
fed = make_federation(digits, n_clients=P.n_clients, partition="dirichlet", alpha=ALPHA, min_size=10,
                      global_test_per_class=20, seed=seed)
model_fn = functools.partial(build_model, "cnn", in_channels=1, n_classes=10, input_size=8, width=8, feature_dim=32)
TRAIN = TrainConfig(steps=P.local_steps, batch_size=32, lr=0.05)  # local work per round (momentum 0.9)
glue("n_clients", int(P.n_clients), display=False)
glue("img_size", int(digits.x.shape[-1]), display=False)
glue("alpha", float(ALPHA), display=False)
print(f"profile {P.profile}: {P.trials} random instances per check, {P.n_clients} clients, local steps {P.steps}")

# %% [markdown]
# ## 1. The descriptor, and why its Gram matrix is basis-free
#
# Client $k$'s head is $H_k = [W_k, b_k] \in \mathbb R^{C \times (d+1)}$ (weights, bias as a last
# column). The paper projects the heads into a "normalized low-rank descriptor space" without
# naming the basis; the book's choice (documented in {mod}`fedlib.clustering`) is the top $r$ left
# singular vectors $U_r$ of the heads side by side:
#
# $$
# [H_1, \dots, H_n] = U \Sigma V^\top \in \mathbb R^{C \times n(d+1)}, \qquad
# z_k = \frac{\operatorname{vec}(U_r^\top H_k)}{\lVert U_r^\top H_k \rVert_F} \in \mathbb R^{r(d+1)} ,
# $$
#
# equivalently the top eigenvectors of $\sum_k H_k H_k^\top$. The class axis shrinks from $C$ to
# $r$; every descriptor has unit norm by construction. The cosine of two descriptors is
#
# $$
# G_{kl} = z_k^\top z_l = \frac{\operatorname{tr}(H_k^\top U_r U_r^\top H_l)}
#   {\sqrt{\operatorname{tr}(H_k^\top U_r U_r^\top H_k)}\,\sqrt{\operatorname{tr}(H_l^\top U_r U_r^\top H_l)}} ,
# $$
#
# so the Gram matrix $G$ depends on $U_r$ only through the projector $U_r U_r^\top$. Replacing
# $U_r$ by $U_r Q$ with any orthogonal $Q \in O(r)$ (a sign flip of each basis vector is a diagonal
# $Q$ of $\pm 1$; a rotation within the span is any other) leaves $U_r U_r^\top$ and hence $G$
# unchanged, while the coordinates $z_k$ themselves change. This matters because singular vectors
# are defined only up to sign (and up to rotation within repeated singular values), and the basis
# is recomputed at every refresh: two refreshes' descriptors live in different coordinates, their
# Gram matrices do not. {func}`fedlib.clustering.descriptor_drift` therefore compares Gram matrices. Finally, with
# $r = C$ the projector $U_r U_r^\top$ is the orthogonal projector onto the column space of
# $[H_1, \dots, H_n]$, which contains every column of every head, so $U_r U_r^\top H_k = H_k$ and
# $G$ equals the Gram matrix of the raw flattened heads.
#
# We check each statement on random heads of random sizes ($n$ clients, $C$ classes, $d$
# features, rank $r$), against the formula written out on its own
# ({func}`fedbook.studies.hdcfl_checks.descriptors_in_basis`) in a basis found without the
# library: the top-$r$ eigenvectors of $\sum_k H_k H_k^\top$, which span the same subspace as the
# top-$r$ left singular vectors of $[H_1, \dots, H_n]$ (compared through Gram matrices, since a
# basis of that subspace is fixed only up to signs and a rotation); the invariance checks rotate
# the library's own basis {func}`fedlib.clustering.lowrank_basis`
# ({func}`fedbook.studies.hdcfl_checks.descriptor_invariance`).

# %% tags=["hide-input"]
err, moved = descriptor_invariance(P.trials, seed)  # the worst errors over the random head sets
descriptor_table = pd.DataFrame({"max abs error": list(err.values())}, index=pd.Index([
    "‖z_k‖ − 1", "library's Gram vs the formula's in an independent eigenbasis", "Gram after flipping basis signs",
    "Gram after rotating the basis within its span", "descriptor_drift between the two bases",
    "Gram at r = C vs Gram of the raw heads"], name="quantity"))
glue("desc_trials", int(P.trials), display=False)
glue("desc_reading", "every deviation is round-off" if max(err.values()) <= 1e-12 else
     f"the largest deviation is {max(err.values()):.1e}, more than round-off", display=False)
glue("desc_moved", float(np.median(moved)) if moved else float("nan"), display=False)
glue("desc_rot_err", float(err["rotation"]), display=False)
glue("desc_full_err", float(err["full"]), display=False)
how = f"{P.trials} random head sets, n ≤ 8, C ≤ 12, d ≤ 5, r ≤ C"
checks.add("descriptors are unit-norm", how, err["unit"], 1e-12)
checks.add("the library's descriptors have the Gram matrix of vec(U_rᵀH_k)/‖U_rᵀH_k‖, U_r the top-r eigenvectors of "
           "Σ H_k H_kᵀ found independently (numpy.linalg.eigh)", how, err["formula"], 1e-12)
checks.add("the descriptors' Gram matrix is invariant to the sign of each basis vector", how, err["sign"], 1e-12)
checks.add("the Gram matrix is invariant to a rotation within the span (descriptor_drift is basis-free)", how,
           max(err["rotation"], err["drift"]), 1e-12)
checks.add("with r = C the low-rank Gram equals the raw Gram", how, err["full"], 1e-12)
show_table(descriptor_table, formats={"max abs error": ".1e"})

# %% [markdown]
# Over {glue:text}`desc_trials` random head sets {glue:text}`desc_reading`. The invariance is
# not trivial: a random rotation of the basis moves the descriptors themselves by a median
# {glue:text}`desc_moved:.2f` of their norm, while their Gram matrix moves by at most
# {glue:text}`desc_rot_err:.1e`. At $r = C$ the low-rank and raw descriptors have the same Gram
# matrix (largest deviation {glue:text}`desc_full_err:.1e`), so any difference between the two in
# section 4 comes from dropping class directions, not from the change of coordinates.
#
# ## 2. Soft membership: the simplex and its two limits
#
# With $s_{kj} = \cos(z_k, c_j)$ the cosine similarity of client $k$'s descriptor to centroid $j$,
#
# $$
# m_{kj} = \frac{\exp(s_{kj}/T)}{\sum_{l=1}^{k} \exp(s_{kl}/T)} .
# $$
#
# Each row is positive and sums to one. For two groups the softmax is a logistic function of the
# similarity gap, $m_1 = 1/(1 + \exp((s_2 - s_1)/T))$; sympy derives it and its limits.

# %%
s1, s2 = sp.symbols("s_1 s_2", real=True)
T = sp.Symbol("T", positive=True)
gap = sp.Symbol("Delta", positive=True)  # the similarity gap |s_1 - s_2| > 0
m1 = sp.exp(s1 / T) / (sp.exp(s1 / T) + sp.exp(s2 / T))
closed_form = 1 / (1 + sp.exp((s2 - s1) / T))
form_diff = sp.simplify(m1 - closed_form)
limits = {
    "T → 0+, s_1 > s_2": sp.limit(closed_form.subs(s1, s2 + gap), T, 0, "+"),
    "T → 0+, s_1 < s_2": sp.limit(closed_form.subs(s1, s2 - gap), T, 0, "+"),
    "T → ∞": sp.limit(closed_form, T, sp.oo),
}
print("softmax minus closed form:", form_diff)
for case, value in limits.items():
    print(f"limit of m_1, {case}: {value}")
sym_ok = form_diff == 0
limits_ok = (limits["T → 0+, s_1 > s_2"] == 1 and limits["T → 0+, s_1 < s_2"] == 0
             and limits["T → ∞"] == sp.Rational(1, 2))
checks.add("two groups: m_1 = 1 / (1 + exp((s_2 − s_1)/T))", "sympy: simplify(softmax − closed form)",
           "0 (symbolic)" if sym_ok else str(form_diff), ok=sym_ok)
checks.add("two groups: m_1 → 1 (s_1 > s_2) or 0 (s_1 < s_2) as T → 0+, and → 1/2 as T → ∞",
           "sympy: limit", ", ".join(f"{v}" for v in limits.values()), ok=limits_ok)

# %% [markdown]
# For any number of groups the limits come with explicit bounds. Let $g_k > 0$ be the gap between
# the largest and the second-largest similarity of row $k$ (no tie). Every other group's term is
# at most $e^{-g_k/T}$ times the top one, so
#
# $$
# \max_j \lvert m_{kj} - \mathbb 1[j = \arg\max_l s_{kl}] \rvert \le (k - 1)\, e^{-g_k / T}
# \xrightarrow[T \to 0]{} 0 ,
# $$
#
# the hard assignment ({func}`fedlib.clustering.hard_membership`). Cosines lie in $[-1, 1]$, so any two terms differ by a
# factor at most $e^{2/T}$ and
#
# $$
# \lvert m_{kj} - 1/k \rvert \le \frac{e^{2/T} - 1}{k} \xrightarrow[T \to \infty]{} 0 ,
# $$
#
# the uniform mixture (entropy $\log k$). We evaluate {func}`fedlib.clustering.soft_membership` on random descriptors and
# centroids over a range of temperatures, and check the simplex, both bounds, and the two-group
# closed form numerically.

# %% tags=["hide-input"]
TEMPERATURES = [1e-4, 1e-3, 1e-2, 0.05, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4]
membership_table, M = membership_limits(P.trials, TEMPERATURES, seed)  # the table, and the checks' worst values
glue("memb_rows", int(M["n_rows"]), display=False)
glue("memb_bounds", f"Both bounds hold on all {M['n_rows']} rows." if M["cold_viol"] + M["hot_viol"] == 0 else
     f"The bounds fail on {M['cold_viol']} (T → 0) and {M['hot_viol']} (T → ∞) of {M['n_rows']} rows.", display=False)
glue("memb_cold", float(membership_table["max |m − hard|"].iloc[0]), display=False)
glue("memb_hot", float(membership_table["max |m − 1/k|"].iloc[-1]), display=False)
glue("memb_t_min", float(TEMPERATURES[0]), display=False)
glue("memb_t_max", float(TEMPERATURES[-1]), display=False)
glue("memb_default_t", float(HDCConfig().temperature), display=False)
SHARE = 0.95  # the weight on the closer of two centroids quoted in the text
glue("memb_share", 100 * SHARE, display=False)
glue("memb_gap", float(HDCConfig().temperature * math.log(SHARE / (1 - SHARE))), display=False)
how = f"{M['n_rows']} membership rows: {M['n_instances']} random instances × {len(TEMPERATURES)} temperatures"
checks.add("soft membership rows lie on the simplex (nonnegative, sum to 1)", how,
           f"min entry {M['min_entry']:.1e}, max |Σ − 1| {M['simplex_err']:.1e}",
           ok=M["min_entry"] >= 0 and M["simplex_err"] < 1e-12)
checks.add("T → 0: soft membership → hard_membership, with |m − hard| ≤ (k−1)·exp(−gap/T)", how,
           M["cold_viol"], 0, kind="count")
checks.add("T → ∞: soft membership → uniform 1/k, with |m − 1/k| ≤ (exp(2/T) − 1)/k", how, M["hot_viol"], 0,
           kind="count")
checks.add("two groups: soft_membership equals the closed form", "the k = 2 instances at every temperature",
           M["closed_err"], 1e-12)
show_table(membership_table, formats={"T": "g", "max |m − hard|": ".1e", "max |m − 1/k|": ".1e",
                                      "mean entropy / log k": ".3f"})

# %% [markdown]
# {glue:text}`memb_bounds` At $T =$ {glue:text}`memb_t_min:g` the
# largest deviation from the hard assignment is {glue:text}`memb_cold:.1e` (the rows with the
# smallest gaps converge last); at $T =$ {glue:text}`memb_t_max:g` the largest deviation from the
# uniform mixture is {glue:text}`memb_hot:.1e`. The library's default temperature,
# $T =$ {glue:text}`memb_default_t:g`, sits on the cold side: with two groups a client puts
# {glue:text}`memb_share:.0f` % of its weight on the closer centroid once the cosine gap exceeds
# $T \log(p / (1 - p))$ = {glue:text}`memb_gap:.3f`, so clearly separated clients get nearly hard
# assignments while clients between groups keep a real mixture.
#
# ## 3. One group and λ = 1: the personalized encoder is FedAvg-SE's shared encoder
#
# The personalized encoder of client $k$ is
#
# $$
# \theta_k = \lambda \sum_j m_{kj} P_j + (1 - \lambda)\,\bar\theta, \qquad
# P_j = \frac{\sum_{i \in \text{group } j} n_i \theta_i}{\sum_{i \in \text{group } j} n_i} ,
# $$
#
# with $\theta_i$ the cached encoders, $n_i$ their sample counts and $\bar\theta$ the shared
# encoder. With one group ($k_{\min} = k_{\max} = 1$, population-level prototype averaging) the
# membership is a softmax over a single entry, $m_{k1} = 1$, and $P_1$ is the sample-weighted mean
# of **all** cached encoders. Under full participation with a refresh every round, the cache holds
# exactly this round's encoders, whose sample-weighted mean is FedAvg-SE's aggregate:
# $P_1 = \bar\theta$, so $\theta_k = \bar\theta$ for $\lambda = 1$. fedlib computes both means by the same
# float64 fold ({class}`fedlib.aggregate.WeightedMean`) in the same client order, and the mixture multiplies
# by exactly $1.0$ and adds exactly $0 \cdot \bar\theta$, so the equality should hold **bit for bit**.
# With $\lambda = 0$, $\theta_k = \bar\theta$ for any grouping. We run both methods on the same
# federation ({glue:text}`n_clients` clients holding UCI digits at {glue:text}`img_size` pixels a side under a Dirichlet
# label skew, $\alpha =$ {glue:text}`alpha:g`, a small CNN), same seed.

# %% tags=["hide-input"]
ident = one_group_identity(fed, model_fn, TRAIN, P.rounds, seed, participation=0.5)
run = ident.run  # HDC-FL with one group: its cache is refreshed again in section 6
bits = f"{ident.identity_bits} of {ident.n_clients}"
glue("id_rounds", int(P.rounds), display=False)
glue("id_diff", ident.identity_diff, display=False)
glue("id_bits", bits, display=False)
glue("id_zero", ident.zero_diff, display=False)
glue("id_k", ident.k_grouped, display=False)
glue("id_rel_k", float(np.median(ident.rel_moves)), display=False)
glue("id_partial", ident.partial_diff, display=False)
glue("id_participation", ident.participation, display=False)
glue("id_partial_sentence", f"the one-group prototype differs from the round's average by up to {ident.partial_diff:.1e}."
     if ident.partial_diff > 0 else "yet here the one-group prototype equals the round's average (the same clients were "
     "sampled in every round).", display=False)
glue("id_eval", "identical" if ident.same_eval else "not identical", display=False)
checks.add("HDC-FL leaves the shared-encoder trajectory intact (its shared encoder is FedAvg-SE's)",
           f"{P.n_clients} clients, {P.rounds} rounds, same seed", ident.shared_diff, 0.0)
checks.add("k = 1, λ = 1, full participation, refresh every round: personalized encoder = FedAvg-SE's shared encoder",
           f"every client after {P.rounds} rounds; bit-equal: {bits}", ident.identity_diff, 0.0)
checks.add("λ = 0 gives exactly the shared encoder for every client", f"k = {ident.k_grouped} groups by k-means",
           ident.zero_diff, 0.0)
checks.add("k = 1, λ = 1: the loop's per-client evaluation equals FedAvg-SE's", "RunResult.per_client() of both runs",
           "identical" if ident.same_eval else "differs", ok=ident.same_eval)
show_table(ident.table, formats={"max abs difference": ".1e"})

# %% [markdown]
# After {glue:text}`id_rounds` rounds, the largest difference between a client's personalized
# encoder (one group, $\lambda = 1$) and FedAvg-SE's shared encoder is {glue:text}`id_diff:.1e`
# (bit-equal clients: {glue:text}`id_bits`), and the per-client accuracies the loop reports for the
# two methods are {glue:text}`id_eval`. With $\lambda = 0$ and {glue:text}`id_k` groups the
# difference is {glue:text}`id_zero:.1e`, while with $\lambda = 1$ the same {glue:text}`id_k` groups
# move a client's encoder by a median {glue:text}`id_rel_k:.3f` of the shared encoder's norm:
# the identity is specific to one group. It also needs full participation: with a share
# {glue:text}`id_participation:g` of the clients sampled per round the cache keeps the stale encoders
# of clients not sampled in the last round, and {glue:text}`id_partial_sentence`
#
# ## 4. Does the rank-r projection keep a planted grouping?
#
# The paper reports that the low-rank projection gives higher silhouette scores and more stable
# assignments than raw heads, with little change in accuracy (Appendix E.1). That is an empirical
# statement, not a theorem: the projection discards $C - r$ class directions, which helps when the
# grouping signal lives in the kept directions and noise spreads over all of them, and hurts when
# it does not. We measure it on planted instances. $G$ groups of $m$ clients each get
#
# $$
# H_k = M + A_{g(k)} + \sigma E_k ,
# $$
#
# a large common component $M$ (class rank {glue:text}`pl_common_rank`, root-mean-square entry
# {glue:text}`pl_common:g`, the part every client learns), a group head $A_g$ (root-mean-square entry
# {glue:text}`pl_signal:g`, the unit of $\sigma$) and noise $E_k$ with independent standard normal entries. Two families: the group heads differ
# in a few class directions only (a shared subspace of dimension {glue:text}`pl_sig_rank`, as under
# label-support or rotation groups that affect some classes), or in all $C$ of them. Per
# instance: the silhouette (scikit-learn's) of the **planted** grouping in each descriptor space,
# and the k chosen by {class}`fedlib.clustering.SilhouetteKMeans` ($k$ from {glue:text}`pl_kmin` to {glue:text}`pl_kmax`, as the paper's Appendix A.1) with its adjusted
# Rand index (ARI) against the planted labels. Sizes: $G =$ {glue:text}`pl_G`, $m =$
# {glue:text}`pl_m`, $C =$ {glue:text}`pl_C`, $d + 1 =$ {glue:text}`pl_d1`, rank
# $r =$ {glue:text}`pl_rank` (the paper's).

# %% tags=["hide-input"]
PLANTED = PlantedHeads(G=4, m=5, C=20, d1=17, common=3.0, signal=1.0, common_rank=4, sig_rank=3)
PL = dict(vars(PLANTED), rank=HDCConfig().rank, kmin=2, kmax=8)
for key, value in PL.items():
    glue(f"pl_{key}", value, display=False)
planted = planted_grouping(PLANTED, P.noises, P.planted_trials, seed, rank=PL["rank"], k_min=PL["kmin"], k_max=PL["kmax"])
planted_table = planted_summary(planted)  # per family and σ
separated = planted[planted["σ"] <= P.sep_noise]
min_ari_sep = float(separated["ARI lowrank"].min()) if len(separated) else float("nan")
sil_better = float((planted["silhouette lowrank"] >= planted["silhouette raw"]).mean())
ari_better = float((planted["ARI lowrank"] >= planted["ARI raw"] - 1e-12).mean())
few = planted[planted["signal"] == "few class directions"]
allc = planted[planted["signal"] == "all class directions"]
sil_gain_few = float((few["silhouette lowrank"] - few["silhouette raw"]).median())
sil_gain_all = float((allc["silhouette lowrank"] - allc["silhouette raw"]).median())
glue("pl_instances", int(len(planted)), display=False)
glue("pl_sep_noise", float(P.sep_noise), display=False)
glue("pl_n_sep", int(len(separated)), display=False)
glue("pl_min_ari_sep", min_ari_sep, display=False)
glue("pl_sep_reading", "finds the planted groups exactly" if min_ari_sep >= 1 - 1e-12 else
     "does not always find the planted groups exactly", display=False)
glue("pl_sil_better", 100 * sil_better, display=False)
glue("pl_ari_better", 100 * ari_better, display=False)
glue("pl_gain_few", sil_gain_few, display=False)
glue("pl_gain_all", sil_gain_all, display=False)
ari_diff = planted_table["ARI low-rank"] - planted_table["ARI raw"]
ARI_STEP = 0.05  # a difference in mean ARI smaller than this (about one client of twenty moved) is not read as a gain or a loss
(fam_best, s_best), (fam_worst, s_worst) = ari_diff.idxmax(), ari_diff.idxmin()
best_row, worst_row = planted_table.loc[(fam_best, s_best)], planted_table.loc[(fam_worst, s_worst)]
glue("pl_gain_sentence", f"The largest gain in mean ARI from the projection is at σ = {s_best:g} with the groups "
     f"differing in {fam_best}: {best_row['ARI low-rank']:.2f} against {best_row['ARI raw']:.2f}."
     if ari_diff.max() > ARI_STEP else f"The projection raises the mean ARI by more than {ARI_STEP} in none of these settings.",
     display=False)
glue("pl_loss_sentence", f"The largest loss is at σ = {s_worst:g} with the groups differing in {fam_worst}: "
     f"{worst_row['ARI low-rank']:.2f} against {worst_row['ARI raw']:.2f}." if ari_diff.min() < -ARI_STEP
     else f"The projection lowers the mean ARI by more than {ARI_STEP} in none of these settings.", display=False)
noisiest = planted[planted["σ"] == max(P.noises)]
glue("pl_noisy_sentence", f"At the largest noise, σ = {max(P.noises):g}, the mean ARI over both families is "
     f"{noisiest['ARI raw'].mean():.2f} (raw) and {noisiest['ARI lowrank'].mean():.2f} (low-rank).", display=False)
checks.add(f"the low-rank descriptor recovers a planted grouping exactly on well-separated instances (σ ≤ {P.sep_noise})",
           f"{len(separated)} planted instances, SilhouetteKMeans k in {PL['kmin']}..{PL['kmax']}, ARI vs planted labels",
           f"min ARI {min_ari_sep:.3f}", ok=len(separated) > 0 and min_ari_sep >= 1 - 1e-12)
checks.add("the low-rank descriptor separates the planted groups at least as well as the raw head (silhouette)",
           f"{len(planted)} planted instances, both families, every σ", f"true for {100 * sil_better:.0f} %",
           ok=sil_better == 1, partly=sil_better > 0)
show_table(planted_table, digits={"silhouette raw": 3, "silhouette low-rank": 3, "k raw": 1, "k low-rank": 1,
                                  "ARI raw": 2, "ARI low-rank": 2, "min ARI low-rank": 2})

# %% [markdown]
# On the {glue:text}`pl_n_sep` instances with $\sigma \le$ {glue:text}`pl_sep_noise:g` the low-rank
# descriptor {glue:text}`pl_sep_reading` (smallest ARI {glue:text}`pl_min_ari_sep:.3f`). Over
# all {glue:text}`pl_instances` instances its silhouette of the planted grouping is at least the raw
# head's in {glue:text}`pl_sil_better:.0f` % of them (median gain {glue:text}`pl_gain_few:.3f` when
# the groups differ in a few class directions, {glue:text}`pl_gain_all:.3f` when they differ in all),
# and its ARI is at least the raw head's in {glue:text}`pl_ari_better:.0f` %.
# {glue:text}`pl_gain_sentence` {glue:text}`pl_loss_sentence` {glue:text}`pl_noisy_sentence` These
# are statements about these planted instances, not about heads in general: a grouping signal that
# lives outside the top $r$ singular directions of the heads (for example, small differences in
# classes that every client predicts weakly) is projected away.
#
# ## 5. Why short local updates keep head coordinates comparable
#
# A head is a linear map on its client's features. Comparing $H_k$ with $H_l$ entry by entry
# presumes that coordinate $i$ of client $k$'s features means what coordinate $i$ of client
# $l$'s does. The paper's argument (Section 3.2) is that short local updates from a common encoder
# keep the client encoders near one trajectory, so the coordinates stay approximately aligned. We
# measure it. From a common point of the FedAvg-SE trajectory (after {glue:text}`ls_warm` rounds)
# each client trains its encoder and its own head locally for $s$ steps, with
# $s$ in {glue:text}`ls_steps`, and we record: (a) the mean pairwise cosine of the clients'
# encoder changes $\Delta\theta_k$; (b) their size, $\lVert\Delta\theta_k\rVert / \lVert\theta_0\rVert$;
# (c) the relative movement of the penultimate features of a fixed probe batch (the global test set),
# $\lVert f_k(x) - f_0(x)\rVert / \lVert f_0(x)\rVert$; (d) how often the client's trained head
# predicts the same class on the common features $f_0(x)$ as on its own $f_k(x)$: the extent to
# which its head still reads the common coordinates; (e) the statement the server relies on,
# that **head similarity tracks encoder compatibility**: over the pairs of clients, the Spearman
# correlation between the cosine of their trained heads and the compatibility of their encoders
# (how little a client's logits on the probe change when its encoder is swapped for the other's,
# averaged over both directions; {func}`fedbook.studies.hdcfl_checks.head_compatibility_rho`).
# The paper's argument predicts a positive correlation for short updates and a weaker one as
# the encoders drift apart; both are checked, and either can fail.

# %% tags=["hide-input"]
warm = run_federated(FedAvgSE(train=TRAIN), fed, model_fn,
                     LoopConfig(rounds=P.warm_rounds, seed=seed, evaluate_last=False))
steps_table = local_drift(warm, fed, model_fn, TRAIN, P.steps, seed)  # (a)-(d) per local step count s
movement = steps_table["(c) feature movement"].to_numpy()
agreement = steps_table["(d) same prediction on f₀"].to_numpy()
cosines = steps_table["(a) mean pairwise cosine of Δθ"].to_numpy()
move_monotone = bool(np.all(np.diff(movement) > 0))
agree_monotone = bool(np.all(np.diff(agreement) < 0))
glue("ls_warm", int(P.warm_rounds), display=False)
glue("ls_steps", ", ".join(str(s) for s in P.steps), display=False)
glue("ls_s_min", int(P.steps[0]), display=False)
glue("ls_s_max", int(P.steps[-1]), display=False)
glue("ls_move_min", float(movement[0]), display=False)
glue("ls_move_max", float(movement[-1]), display=False)
glue("ls_agree_min", 100 * float(agreement[0]), display=False)
glue("ls_agree_max", 100 * float(agreement[-1]), display=False)
glue("ls_move_reading", "grows with every step of the grid" if move_monotone else
     "grows overall but not at every step of the grid", display=False)
glue("ls_agree_reading", "falls with every step of the grid" if agree_monotone else
     "does not fall at every step of the grid", display=False)
sizes = steps_table["(b) ‖Δθ‖ / ‖θ₀‖"].to_numpy()
glue("ls_size_min", float(sizes[0]), display=False)
glue("ls_size_max", float(sizes[-1]), display=False)
glue("ls_cos_first", float(cosines[0]), display=False)
glue("ls_cos_last", float(cosines[-1]), display=False)
COS_STEP = 0.05  # a change of the mean pairwise cosine smaller than this is read as no change
glue("ls_cos_sentence", "longer local training makes the clients' encoder changes larger and, on this run, more alike in "
     "direction, not less." if cosines[-1] - cosines[0] > COS_STEP else
     "longer local training makes the clients' encoder changes larger and, on this run, less aligned."
     if cosines[-1] - cosines[0] < -COS_STEP else
     "longer local training makes the clients' encoder changes larger, about as aligned as before.", display=False)
how = f"{P.n_clients} clients, s in {{{', '.join(map(str, P.steps))}}}, probe: the global test set"
tracking = steps_table["(e) ρ(head cosine, compatibility)"]
short = tracking[tracking.index <= P.local_steps]  # the short updates of the federation's own rounds
short_ok = bool(len(short) and (short > 0).all())
weakens = bool(tracking.iloc[-1] < short.iloc[-1]) if len(short) else False
checks.add(f"short local updates (s ≤ {P.local_steps}, a round's): head similarity ranks encoder compatibility "
           "(Spearman ρ of pairwise head cosine and compatibility > 0)", how,
           ", ".join(f"s = {s_}: ρ = {v:+.3f}" for s_, v in short.items()), ok=short_ok,
           partly=bool(len(short) and (short > 0).any()))
checks.add(f"the tracking weakens as updates lengthen: ρ at s = {P.steps[-1]} below ρ at s = {short.index[-1] if len(short) else '—'}",
           how, ", ".join(f"{v:+.3f}" for v in tracking), ok=weakens)
glue("ls_rho_short", float(short.iloc[-1]) if len(short) else float("nan"), display=False)
glue("ls_s_short", int(short.index[-1]) if len(short) else 0, display=False)
glue("ls_rho_long", float(tracking.iloc[-1]), display=False)
glue("ls_track_reading", ("positive at every short s and weaker at the longest" if short_ok and weakens else
                          "positive at every short s but not weaker at the longest" if short_ok else
                          "not positive at every short s"), display=False)
checks.add("a client's head reads the common features less faithfully as s grows (same prediction on f₀ and f_k)",
           how, "monotone" if agree_monotone else "not monotone: " + ", ".join(f"{v:.3f}" for v in agreement),
           ok=agree_monotone, partly=bool(agreement[-1] < agreement[0]))
show_table(steps_table, digits=3)

# %% [markdown]
# The probe batch's features move by {glue:text}`ls_move_min:.3f` of their norm at
# $s =$ {glue:text}`ls_s_min` and by {glue:text}`ls_move_max:.3f` at $s =$ {glue:text}`ls_s_max`:
# the movement {glue:text}`ls_move_reading`. A client's trained head predicts the same class on the
# common features as on its own for {glue:text}`ls_agree_min:.0f` % of the probe at
# $s =$ {glue:text}`ls_s_min` and {glue:text}`ls_agree_max:.0f` % at $s =$ {glue:text}`ls_s_max`
# (the agreement {glue:text}`ls_agree_reading`). The encoder changes grow from
# {glue:text}`ls_size_min:.3f` to {glue:text}`ls_size_max:.3f` of the common encoder's norm, and
# their mean pairwise cosine goes from {glue:text}`ls_cos_first:.2f` to {glue:text}`ls_cos_last:.2f`:
# {glue:text}`ls_cos_sentence` Head similarity and encoder compatibility have a rank correlation of
# {glue:text}`ls_rho_short:+.2f` at $s =$ {glue:text}`ls_s_short` and {glue:text}`ls_rho_long:+.2f`
# at $s =$ {glue:text}`ls_s_max`: {glue:text}`ls_track_reading`. The sense in which short updates keep head coordinates comparable is
# the size of the drift: with few local steps each head stays a map on features close to the
# common ones, so the server's comparison of heads compares maps on nearly the same coordinates.
#
# ## 6. What a refresh changes, and what it does not
#
# A refresh reads the cache and writes prototypes, memberships and diagnostics; the cache and the
# shared encoder must come out unchanged, the chosen $k$ must lie in
# $[k_{\min}, \min(k_{\max}, n - 1)]$ (the silhouette needs at least one client more than groups),
# every membership row must sum to one, and computing a client's personalized encoder must not write
# anything back into the server state (the next round's broadcast is the shared encoder). We refresh
# the cache of the run of section 3 under random settings (rank, raw or low-rank descriptor, $k$
# range, k-means or random groups, soft or hard membership, temperature) and compute every client's
# personalized encoder for random $\lambda$.

# %% tags=["hide-input"]
RF = refresh_invariants(run.server, P.trials, P.rounds + 1, seed)  # refreshes at rounds P.rounds + 1, + 2, ...
glue("rf_trials", int(P.trials), display=False)
glue("rf_n", int(RF["n_cached"]), display=False)
glue("rf_ks", ", ".join(str(k) for k in sorted(set(RF["ks"]))), display=False)
written = RF["nothing_written_back"] and RF["broadcast_kept"]
read_only = RF["cache_kept"] and RF["model_kept"] and written
glue("rf_reading", ("each within its range" if RF["k_viol"] == 0 else f"{RF['k_viol']} outside their range") + ". " + (
    "Personalization is read-only on the server: nothing a client receives for evaluation enters the cache or the "
    "trajectory." if read_only else "Some server arrays changed (see the check table)."), display=False)
how = f"{P.trials} random refresh settings on the cache of {RF['n_cached']} clients"
checks.add("the chosen k lies in [k_min, min(k_max, n − 1)]", how, RF["k_viol"], 0, kind="count")
checks.add("membership rows are nonnegative and sum to 1", how, RF["row_err"], 1e-12)
checks.add("a refresh leaves the cache (and the state it was given) unchanged", how,
           "bit-identical" if RF["cache_kept"] else "changed", ok=RF["cache_kept"])
checks.add("a refresh leaves the shared encoder unchanged", how, "bit-identical" if RF["model_kept"] else "changed",
           ok=RF["model_kept"])
checks.add("computing personalized encoders writes nothing back; the broadcast stays the shared encoder",
           how + ", every client, random λ", "bit-identical" if written else "changed", ok=written)

# %% [markdown]
# Over {glue:text}`rf_trials` random settings on the cache of {glue:text}`rf_n` clients the refresh
# chose $k$ among {glue:text}`rf_ks`; {glue:text}`rf_reading`
#
# ## The check table

# %% tags=["remove-cell"]
glue("n_checks", len(checks), display=False)
glue("n_fail", checks.n_fail, display=False)
glue("deriv_seconds", float(P.elapsed()), display=False)

# %% tags=["hide-input"]
checks.show()

# %% [markdown]
# {glue:text}`n_checks` statements checked, {glue:text}`n_fail` not holding, in
# {glue:text}`deriv_seconds:.1f` s at this profile. Sections 1-3 and 6 check identities, to
# round-off or bit for bit; sections 4 and 5 are measurements on the instances above, reported as
# measured. The identities of sections 1-3 and 6, and the exact recovery of well-separated planted
# groups of section 4, are also property tests (hypothesis) in `tests/test_hdcfl_properties.py`.
