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
# (chapter-fedgrc-statistics)=
# # FedGRC's statistics (MMS and SASP): the mathematics, checked
#
# FedGRC {cite:p}`fedgrc` freezes the backbone its representation learning (CGRL,
# {ref}`chapter-fedgrc-cgrl`) trained and builds every client's head from class statistics. This
# chapter checks the exact statements behind its two statistical parts:
#
# * **MMS** (Section IV-B) builds a shared metric $A$ from multilayer features: per-layer scales,
#   shared class means, a pooled within-class covariance about them (Proposition IV.1, Eq. (28)),
#   computed exactly from additive client moments (Appendix A-E), and a ridge that bounds the
#   metric's norm and condition number (Eq. (31)).
# * **SASP** (Section IV-C) shrinks each client's class means toward the shared ones with weight
#   $\alpha(n) = n/(n+m_0)$ (Proposition IV.2, Eq. (35)), and predicts with the equal-prior linear
#   head (Eq. (36)); adaptation can flip a prediction only inside a computable budget
#   (Eq. (37)-(40)) and the risk bounds of Appendix A-H follow.
#
# It starts where CGRL's geometry meets the statistics: the trace of a class covariance in terms
# of radial and angular distances (Eq. (21)). For each statement this chapter gives a short
# derivation, checks it numerically on many seeded random instances (and symbolically with sympy
# where that is a proof), and records a row of the **check table** at the end; the final section
# checks the stability theorem on the features of a small CNN trained with FedAvg. The library
# code under test is {mod}`fedlib.heads.mms` ({class}`fedlib.heads.MMS`, {class}`fedlib.heads.SASP`) and
# {class}`fedlib.stats.ClassMoments`; the same statements are property tests in
# `tests/test_fedgrc_theory.py`. The random instances are federations of unscaled multilayer
# features with label skew, client-specific class shifts and a magnitude per layer
# ({func}`fedlib.data.synthetic.random_multilayer_federation`); each numerical check is a function of
# {mod}`fedbook.studies.fedgrc_checks`, named where it is used.
#
# **About the source.** The extracted text of the paper lacks every displayed equation: the
# numbered equations are referred to but not shown. We reconstruct each one from the prose around
# it and from the appendix proofs. Where that leaves a choice we make it explicit:
#
# * the paper does not show the perturbation budget $B^{(k)}(x)$ of Eq. (39); we use the smallest
#   budget its proof in Appendix A-H supports, $b_{c^\star} + \max_{c\ne c^\star} b_c$ (Section 7);
# * the paper does not show Eq. (28); we use $N\operatorname{tr}\widehat\Sigma_w = \sum_\ell s_\ell^{-2}\sum_c N_c\operatorname{tr}\widehat\Sigma_{\ell,c}$,
#   the sum of squared residual blocks its proof describes (Section 1);
# * the paper does not give $\gamma$ and $m_0$ (its Table X is missing); we use fedlib's defaults
#   (Section 7), and the identities hold for every value we draw at random.
#
# The heads are fedlib's; this chapter re-derives them independently and compares.

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke" (seconds), "book" (the default), "paper" (more instances, a longer training run)
seed = 0  # every random draw is derived from it
trials = None  # random instances per numerical check (None: the profile's value)
dim = None  # largest feature dimension of the random instances
rounds = None  # FedAvg rounds of the trained model in the last section
n_clients = None  # clients of the trained model's federation

# %% tags=["hide-input"]
import functools
import time

import numpy as np
import pandas as pd
import sympy as sp
import torch
from myst_nb import glue

from fedlib.algorithms import FedAvg
from fedbook.page import setup, show_table
from fedbook.checks import CheckTable
from fedlib.data import load_dataset
from fedbook.studies import fedgrc_checks
from fedlib.federation import make_federation
from fedlib.heads import DEFAULT_GAMMA, DEFAULT_M0, MMS, adaptation_weights
from fedlib.loop import LoopConfig
from fedlib.models import build_model
from fedlib.protocol import load_model
from fedlib.rng import numpy_rng
from fedlib.run import run_federated
from fedlib.stats import feature_moments
from fedlib.training import TrainConfig

PROFILES = {
    "smoke": dict(trials=6, dim=6, rounds=1, n_clients=3, n_samples=600, gtpc=20, alpha=0.3),
    "book": dict(trials=60, dim=16, rounds=4, n_clients=8, n_samples=None, gtpc=50, alpha=0.3),
    "paper": dict(trials=300, dim=48, rounds=20, n_clients=20, n_samples=None, gtpc=100, alpha=0.3),
}
# Small matrices and a shared 2-core machine: one intra-op thread is many times faster here (two threads
# contend with the other processes); this sets the kernel process only.
P = setup(PROFILES, profile, threads=1, trials=trials, dim=dim, rounds=rounds, n_clients=n_clients)
F64 = torch.float64
checks = CheckTable()  # the closing check table: check(statement, how, worst, tol, kind=...)
check = checks.add

rng_for = functools.partial(numpy_rng, seed)  # rng_for(*keys): this chapter's stream for a purpose
print(f"profile {P.profile}: {P.trials} random instances per check, dimension up to {P.dim}; "
      f"trained model: {P.n_clients} clients, {P.rounds} FedAvg rounds")

# %% [markdown]
# ## 1. From feature geometry to covariance traces (Eq. (21), Eq. (28))
#
# Pool the $N_c$ class-$c$ features of layer $\ell$ from all clients under one backbone, with mean
# $\bar h$ and covariance $\widehat\Sigma_{\ell,c}$ (denominator $N_c$). Expanding about the mean,
# $\sum_{i,j}\lVert h_i - h_j\rVert^2 = 2N_c\sum_i\lVert h_i - \bar h\rVert^2$, and with Eq. (10),
#
# $$
# \begin{aligned}
# \operatorname{tr}\widehat\Sigma_{\ell,c} &= \frac1{N_c}\sum_i\lVert h_i - \bar h\rVert^2 \\
#  &= \frac{1}{2N_c^2}\sum_{i,j}\Big[(R_i - R_j)^2 \\
#  &\qquad\qquad + 2R_iR_j\,(1 - u_i^\top u_j)\Big]. \qquad (21)
# \end{aligned}
# $$
#
# The radial part stays positive even when every direction agrees. In MMS's scaled space
# $z_\ell = h_\ell/s_\ell$ the pooled within-class covariance $\widehat\Sigma_w$ (about the shared class
# means, denominator $N$) is block-wise a sum of the class covariances, and its trace is
#
# $$
# \begin{aligned}
# N\operatorname{tr}\widehat\Sigma_w &= \sum_{\ell\in\Lambda} s_\ell^{-2}\sum_c N_c\operatorname{tr}\widehat\Sigma_{\ell,c} \\
#  &= \sum_{\ell} s_\ell^{-2}\sum_c \frac1{2N_c}\sum_{i,j\in c}\Big[(R_{\ell i} - R_{\ell j})^2 \\
#  &\qquad\qquad + 2R_{\ell i}R_{\ell j}(1 - u_{\ell i}^\top u_{\ell j})\Big]. \qquad (28)
# \end{aligned}
# $$
#
# (The paper's display of Eq. (28) is missing; the prose says it sums the squared norms of the
# layer residual blocks, which is the middle expression; the right one substitutes Eq. (21).)
# We compute the left sides with {class}`fedlib.stats.ClassMoments` and {class}`fedlib.heads.MMS`
# fitted on per-client moments, the right sides from explicit pairwise sums
# ({func}`fedlib.cgrl.trace_from_pairs`; the check is {func}`fedbook.studies.fedgrc_checks.trace_identities`).

# %%
traces = fedgrc_checks.trace_identities(rng_for(5), P.trials, P.dim)
glue("fgd_eq21_err", float(traces["eq21"]), display=False)
glue("fgd_eq28_err", float(traces["eq28"]), display=False)
check("Eq. (21): tr Sigma_{l,c} = (1/2N_c^2) sum_ij [(R_i-R_j)^2 + 2R_iR_j(1-cos)]",
      f"{P.trials} random federations, ClassMoments vs explicit pairs, error / mean |h|^2", traces["eq21"], 1e-10)
check("Eq. (21): aligned directions leave a purely radial, nonzero trace", "10 collinear features of different norms",
      traces["aligned_radial"], 1e-12)
check("Eq. (28): N tr Sigma_w = sum_l s_l^-2 sum_c N_c tr Sigma_{l,c} (also in pairwise form)",
      "MMS fitted on client moments vs per-layer class traces, relative error", traces["eq28"], 1e-10)

# %% [markdown]
# Eq. (21) holds to {glue:text}`fgd_eq21_err:.1e` and Eq. (28) to {glue:text}`fgd_eq28_err:.1e`
# (relative). The trace sees only the *total* within-class variation; the full covariance keeps
# the directions and the cross-layer blocks (Section 3).
#
# **Invariances under layer scaling.** Multiplying a layer's raw features by $c > 0$ multiplies
# every norm by $c$: norm ratios are unchanged, every raw log norm shifts by $\log c$, so the
# within-class log-norm variance and the differences between class means of log norms are
# unchanged, and Eq. (21) scales by $c^2$. MMS's scale $s_\ell$ (Eq. (22)) is then multiplied by
# $c$ as well, so the scaled features $z$, the shared means, $\widehat\Sigma_w$, the metric $A$ and
# every prediction are **exactly invariant**: the statistical head does not depend on the
# arbitrary scale of each layer, while the magnitude structure *within* a layer survives
# ({func}`fedbook.studies.fedgrc_checks.layer_scaling_invariance`).

# %%
inv = fedgrc_checks.layer_scaling_invariance(rng_for(6), P.trials, P.dim)
glue("fgd_inv_mms", float(inv["mms"]), display=False)
check("layer scaling: norm ratios, log-norm variance, class log-norm mean differences unchanged",
      f"{P.trials} federations, factors 1e-3..1e3 per layer", inv["geometry"], 1e-9)
check("MMS is invariant to per-layer rescaling (s_l scales; z, mu, Sigma_w, A unchanged)",
      "MMS fitted before and after, relative error", inv["mms"], 1e-8)
check("... and so are its predictions", "same instances, changed predictions", inv["predictions"], 0, kind="count")

# %% [markdown]
# With per-layer factors between $10^{-3}$ and $10^{3}$, MMS's scaled quantities move by at most
# {glue:text}`fgd_inv_mms:.1e` (relative): rounding only.
#
# ## 2. Shared-mean covariance = within-client + between-client shift (Proposition IV.1)
#
# With client means $\mu_c^{(k)}$, client covariances $\widehat\Sigma_c^{(k)}$ (denominator $n_c^{(k)}$)
# and shifts $\Delta_c^{(k)} = \mu_c^{(k)} - \mu_c$, split each residual about the shared mean as
# $z_i - \mu_c = r_i^{(k)} + \Delta_c^{(k)}$ with $r_i^{(k)} = z_i - \mu_c^{(k)}$. Since
# $\sum_{i\in\mathcal I_c^{(k)}} r_i^{(k)} = 0$ the cross terms vanish exactly and
#
# $$
# \begin{aligned}
# \widehat\Sigma_w = \frac1N\sum_k\sum_{c:\,n_c^{(k)}>0} n_c^{(k)}\Big[&\widehat\Sigma_c^{(k)} \\
#   &+ \Delta_c^{(k)}\Delta_c^{(k)\top}\Big]. \qquad (26)
# \end{aligned}
# $$
#
# Pooling client-centred covariances would drop the second (between-client) term; MMS keeps it
# ({func}`fedbook.studies.fedgrc_checks.shift_decomposition` compares the two sides).

# %%
prop1 = fedgrc_checks.shift_decomposition(rng_for(7), P.trials, P.dim)
glue("fgd_prop1_err", float(prop1["error"]), display=False)
glue("fgd_between_share", float(np.median(prop1["between_share"])), display=False)
check("Prop. IV.1: Sigma_w = (1/N) sum_k sum_c n_c^k (Sigma_c^k + Delta Delta')",
      f"{P.trials} random federations (2-5 clients), entrywise / max|Sigma_w|", prop1["error"], 1e-10)

# %% [markdown]
# The decomposition holds to {glue:text}`fgd_prop1_err:.1e`; on these federations (client-specific
# class shifts) the between-client term carries a median {glue:text}`fgd_between_share:.2f` of
# the trace, variation that a pool of client-centred covariances would not see.
#
# ## 3. Everything from additive client moments (Appendix A-E)
#
# Each client sends, per class, $n_c^{(k)}$, $t_c^{(k)} = \sum_i h_i$ and
# $G_c^{(k)} = \sum_i h_ih_i^\top$ of its **unscaled** concatenated features; the server adds them. From
# the sums, the total covariance's diagonal blocks give the scales,
# $s_\ell^2 = \operatorname{tr}(S_{\ell\ell})/d_\ell$ with $S = \tfrac1N\sum_c G_c - \bar h\bar h^\top$ (Eq. (22));
# with $D_s = \operatorname{blockdiag}(s_\ell^{-1}I_{d_\ell})$ the shared means are $\mu_c = D_s t_c/N_c$ and
#
# $$
# \widehat\Sigma_w = \frac1N D_s\Big(\sum_c G_c - \frac{t_ct_c^\top}{N_c}\Big)D_s ,
# $$
#
# because $\sum_{i\in c}(h_i - \bar h_c)(h_i - \bar h_c)^\top = G_c - t_ct_c^\top/N_c$. We compare
# {class}`fedlib.heads.MMS` fitted on a *list* of per-client {class}`fedlib.stats.ClassMoments` with a
# direct numpy computation on the pooled, explicitly scaled, concatenated features
# ({func}`fedbook.studies.fedgrc_checks.centralized_mms`) — the whole matrix, and the
# off-diagonal (cross-layer) blocks on their own.

# %%
errs = fedgrc_checks.moments_against_centralized(rng_for(8), P.trials, P.dim)
ae_table = pd.DataFrame({"quantity (moments vs centralized)": list(errs), "worst relative error": list(errs.values())})
for name, err in errs.items():
    check(f"Appendix A-E: {name} from client moments = centralized", f"{P.trials} federations, 1-5 clients, 2-3 layers",
          err, 1e-8)
glue("fgd_ae_worst", float(max(errs.values())), display=False)
show_table(ae_table, formats={"worst relative error": ".1e"}, index=False)

# %% [markdown]
# The largest disagreement between the moment-based MMS and the centralized computation is
# {glue:text}`fgd_ae_worst:.1e` (relative; the cross-layer blocks are measured relative to the
# whole matrix). Each scaled block has unit average coordinate variance, the property that makes
# one relative ridge $\gamma$ meaningful across layers.
#
# ## 4. The ridge bounds the metric (Eq. (29)-(31))
#
# With $\widehat\Sigma_w = Q\operatorname{diag}(\sigma_1,\dots,\sigma_d)Q^\top$, $\sigma_j\ge 0$, and
# $\lambda_A = \gamma\sum_j\sigma_j/d > 0$ (Eq. (29)), the metric $A = (\widehat\Sigma_w + \lambda_AI)^{-1}$
# (Eq. (30)) has eigenvalues $1/(\sigma_j + \lambda_A)$, so
#
# $$
# \begin{aligned}
# \lVert A\rVert_2 &= \frac{1}{\sigma_{\min} + \lambda_A} \le \frac1{\lambda_A}, \\
# \kappa(A) &= \frac{\sigma_{\max} + \lambda_A}{\sigma_{\min} + \lambda_A}
#   \le 1 + \frac{\sigma_{\max}}{\lambda_A} \\
#   &\le 1 + \frac{\sum_j\sigma_j}{\lambda_A} = 1 + \frac d\gamma. \qquad (31)
# \end{aligned}
# $$
#
# using $\sigma_{\min}\ge0$ and $\sigma_{\max}\le\sum_j\sigma_j$. Neither bound needs
# $\widehat\Sigma_w$ to be invertible: we include covariances from fewer samples than dimensions
# ($n < d$). The condition-number bound is **attained** when $\widehat\Sigma_w$ has rank one
# ($\sigma_{\max} = \sum_j\sigma_j$, $\sigma_{\min} = 0$): two samples of one class
# ({func}`fedbook.studies.fedgrc_checks.metric_bounds`).

# %%
bounds = fedgrc_checks.metric_bounds(rng_for(9), P.trials, P.dim)
glue("fgd_op_exact", float(bounds["identities"]), display=False)
glue("fgd_n_singular", int(bounds["n_singular"]), display=False)
glue("fgd_kappa_tight", float(bounds["tight"]), display=False)
check("Eq. (31) identities: |A|_2 = 1/(s_min + lam), kappa = (s_max + lam)/(s_min + lam)",
      f"{P.trials} random covariances ({bounds['n_singular']} singular), relative error", bounds["identities"], 1e-8)
check("|A|_2 <= 1/lambda_A", "largest relative excess over the bound", bounds["op_bound"], 1e-9)
check("kappa(A) <= 1 + d/gamma, including singular covariances", "largest relative excess", bounds["kappa_bound"], 1e-9)
check("the condition bound is attained by a rank-one covariance", f"{P.trials} rank-one instances, |kappa/(1+d/gamma) - 1|",
      bounds["tight"], 1e-8)

# %% [markdown]
# The identities hold to {glue:text}`fgd_op_exact:.1e` on instances including
# {glue:text}`fgd_n_singular` singular covariances, and the bound $1 + d/\gamma$ is reached to
# {glue:text}`fgd_kappa_tight:.1e` by rank-one covariances: it cannot be improved without
# knowing more than $d$ and $\gamma$.
#
# ## 5. SASP's mean is a regularized estimate (Proposition IV.2, Eq. (33)-(35))
#
# For client $k$ and class $c$ with $n$ samples summing to $t$ (scaled features), Proposition IV.2
# minimizes
#
# $$
# \begin{aligned}
# J(m) &= \sum_{i\in\mathcal I_c^{(k)}}\lVert z_i - m\rVert_A^2 + m_0\lVert m - \mu_c\rVert_A^2 , \\
# \nabla J &= -2A(t - nm) + 2m_0A(m - \mu_c), \\
# \nabla^2J &= 2(n + m_0)A \succ 0 .
# \end{aligned}
# $$
#
# $J$ is strictly convex, and setting the gradient to zero and multiplying by $A^{-1}$ (the metric
# **cancels**) gives $m^\star = (t + m_0\mu_c)/(n + m_0)$. For $n > 0$, $t = n\mu_c^{(k)}$ and
#
# $$
# \begin{aligned}
# m^\star &= \mu_c + \alpha(n)\,\Delta_c^{(k)} = \tilde\mu_c^{(k)}, \\
# \alpha(n) &= \frac{n}{n+m_0}. \qquad (33)
# \end{aligned}
# $$
#
# while for $n = 0$ the data sum is empty and $m^\star = \mu_c$. Subtracting the local centre,
# $\tilde\mu_c^{(k)} - \mu_c^{(k)} = -(1-\alpha)\Delta_c^{(k)}$, so by homogeneity of the $A$-norm
#
# $$
# \begin{aligned}
# \lVert\tilde\mu_c^{(k)} - \mu_c^{(k)}\rVert_A &= (1-\alpha)\lVert\Delta_c^{(k)}\rVert_A, \\
# \lVert\tilde\mu_c^{(k)} - \mu_c\rVert_A &= \alpha\lVert\Delta_c^{(k)}\rVert_A. \qquad (35)
# \end{aligned}
# $$
#
# sympy solves the stationarity condition in one dimension for general $n$ (with symbolic $t$)
# and in two dimensions with a symbolic symmetric $A$ and three symbolic samples:

# %%
m_, t_, mu_, a_ = sp.symbols("m t mu a", real=True)
n_, m0_ = sp.symbols("n m_0", positive=True)
J1 = a_ * (sp.Symbol("S2") - 2 * m_ * t_ + n_ * m_**2) + m0_ * a_ * (m_ - mu_) ** 2  # sum_i a (z_i - m)^2, S2 = sum z^2
sol1 = sp.solve(sp.diff(J1, m_), m_)[0]
sasp_1d_ok = sp.simplify(sol1 - (t_ + m0_ * mu_) / (n_ + m0_)) == 0 and a_ not in sol1.free_symbols
hess_1d = sp.simplify(sp.diff(J1, m_, 2))
print("1-d: m* =", sol1, "| J'' =", hess_1d)

A2 = sp.Matrix([[sp.Symbol("a11"), sp.Symbol("a12")], [sp.Symbol("a12"), sp.Symbol("a22")]])
mvec = sp.Matrix(sp.symbols("m1 m2", real=True))
muvec = sp.Matrix(sp.symbols("mu1 mu2", real=True))
zs = [sp.Matrix(sp.symbols(f"z{i}1 z{i}2", real=True)) for i in range(3)]
J2 = sum(((z - mvec).T * A2 * (z - mvec))[0] for z in zs) + m0_ * ((mvec - muvec).T * A2 * (mvec - muvec))[0]
sol2 = {k: sp.simplify(v) for k, v in sp.solve([sp.diff(J2, v) for v in mvec], list(mvec), dict=True)[0].items()}
closed2 = (zs[0] + zs[1] + zs[2] + m0_ * muvec) / (3 + m0_)
diff2 = [sp.simplify(sol2[mvec[i]] - closed2[i]) for i in range(2)]
a_free = not (set().union(*[sol2[v].free_symbols for v in mvec]) & A2.free_symbols)
sasp_2d_ok = all(x == 0 for x in diff2) and a_free
print("2-d: m* - (sum z + m0 mu)/(3 + m0) =", diff2, "| metric entries in m*:", not a_free)
check("Prop. IV.2 in 1-d: m* = (t + m0 mu)/(n + m0), independent of a; J'' = 2a(n + m0) > 0", "sympy, symbolic n, t",
      "symbolic difference 0" if sasp_1d_ok else "the closed form differs", ok=bool(sasp_1d_ok))
check("Prop. IV.2 in 2-d with a symbolic A: m* = (sum z + m0 mu)/(n + m0), A cancels", "sympy, 3 symbolic samples",
      "symbolic difference 0" if sasp_2d_ok else "the closed form differs", ok=bool(sasp_2d_ok))

# %% [markdown]
# Numerically: {class}`fedlib.heads.SASP`'s means against `scipy.optimize.minimize` (BFGS with the
# analytic gradient) on $J$ with the fitted metric, and against the minimizer of $J$ under a
# *different*, random SPD metric (it must not move); the absent-class case; the identities (35)
# ({func}`fedbook.studies.fedgrc_checks.sasp_minimizer`).

# %%
sasp_opt = fedgrc_checks.sasp_minimizer(rng_for(10), P.trials, P.dim)
nn_ = np.arange(0, 200)
alpha_mono = int((np.diff(1 - adaptation_weights(torch.as_tensor(nn_, dtype=F64), 10.0).numpy()) > 0).sum())
glue("fgd_opt_err", float(sasp_opt["optimum"]), display=False)
glue("fgd_cancel_err", float(sasp_opt["cancel"]), display=False)
glue("fgd_opt_classes", int(sasp_opt["n_classes"]), display=False)
glue("fgd_absent", int(sasp_opt["n_absent"]), display=False)
check("Prop. IV.2: SASP mean = numerical minimizer of J (BFGS)",
      f"{sasp_opt['n_classes']} (client, class) instances, error / (1 + |m|)", sasp_opt["optimum"], 1e-6)
check("... the closed form's objective is never above the optimizer's", "same instances", sasp_opt["objective_worse"], 0,
      kind="count")
check("A cancels: the minimizer under a different random SPD metric is the same", "same instances", sasp_opt["cancel"], 1e-6)
check("n = 0: the SASP mean is the shared mean", f"{sasp_opt['n_absent']} locally absent (client, class) pairs",
      sasp_opt["absent"], 0.0)
check("Eq. (35): |mu~ - mu_local|_A = (1 - alpha)|Delta|_A", "observed classes, error / (|Delta|_A + |mu_c|_A)",
      sasp_opt["eq35_local"], 1e-10)
check("departure |mu~ - mu|_A = alpha |Delta|_A", "observed classes, error / (|Delta|_A + |mu_c|_A)",
      sasp_opt["eq35_departure"], 1e-10)
check("1 - alpha(n) decreases with the support n", "n = 0..199, m0 = 10, increases counted", alpha_mono, 0, kind="count")

# %% [markdown]
# On {glue:text}`fgd_opt_classes` (client, class) instances, including
# {glue:text}`fgd_absent` locally absent classes, the closed form matches BFGS to
# {glue:text}`fgd_opt_err:.1e` and the minimizer under an unrelated metric to
# {glue:text}`fgd_cancel_err:.1e` (the optimizer's tolerance): the metric decides how a query is
# compared with the means, never where the means are.
#
# ## 6. Equal priors: nearest personalized mean = Gaussian Bayes rule (Eq. (36), Appendix A-G)
#
# Expanding $\lVert z - \tilde\mu_c\rVert_A^2 = z^\top Az - 2\tilde\mu_c^\top Az + \tilde\mu_c^\top A\tilde\mu_c$
# and dropping the class-independent $z^\top Az$,
#
# $$
# \begin{aligned}
# \arg\min_c\lVert z - \tilde\mu_c\rVert_A^2 &= \arg\max_c\, s_c(z), \qquad s_c(z) = w_c^\top z + b_c, \\
# w_c &= A\tilde\mu_c,\qquad b_c = -\tfrac12\tilde\mu_c^\top A\tilde\mu_c. \qquad (36)
# \end{aligned}
# $$
#
# and under $z\mid y = c\sim\mathcal N(\tilde\mu_c, A^{-1})$ with $\pi_c = 1/C$ the log posterior is
# $-\tfrac12\lVert z - \tilde\mu_c\rVert_A^2$ plus a constant: the same rule. We compare SASP's
# linear head, the nearest mean and `scipy.stats.multivariate_normal`'s log densities
# ({func}`fedbook.studies.fedgrc_checks.bayes_equivalence`).

# %%
bayes = fedgrc_checks.bayes_equivalence(rng_for(11), P.trials, P.dim)
glue("fgd_bayes_queries", int(bayes["n_queries"]), display=False)
glue("fgd_bayes_disagree", int(bayes["nearest_mean"] + bayes["gaussian"]), display=False)
check("Eq. (36): s_c(z) = -1/2 |z - mu~_c|_A^2 + 1/2 z'Az", f"{bayes['n_queries']} queries, error / (1 + z'Az)",
      bayes["scores"], 1e-10)
check("SASP head argmax = nearest personalized mean under A", f"{bayes['n_queries']} queries, disagreements",
      bayes["nearest_mean"], 0, kind="count")
check("SASP head argmax = equal-prior Gaussian Bayes rule N(mu~_c, A^-1)", "scipy.stats.multivariate_normal, disagreements",
      bayes["gaussian"], 0, kind="count")

# %% [markdown]
# Over {glue:text}`fgd_bayes_queries` queries the linear head, the nearest personalized mean and
# the Gaussian Bayes rule disagree {glue:text}`fgd_bayes_disagree` times.
#
# ## 7. Prediction stability under mean adaptation (Eq. (37)-(40), Appendix A-H)
#
# Let $s_c^0(z) = \mu_c^\top Az - \tfrac12\mu_c^\top A\mu_c$ be the shared score (every $\alpha = 0$) and
# $\delta_c = \tilde\mu_c - \mu_c = \alpha_c\Delta_c$ the adapted displacement. Substituting
# $\tilde\mu_c = \mu_c + \delta_c$ into Eq. (36),
#
# $$
# \begin{aligned}
# s_c(z) - s_c^0(z) &= \delta_c^\top A(z - \mu_c) - \tfrac12\delta_c^\top A\delta_c \\
#   &= \alpha_c\,\Delta_c^\top A(z - \mu_c) - \tfrac{\alpha_c^2}2\lVert\Delta_c\rVert_A^2, \qquad (37)
# \end{aligned}
# $$
#
# which is zero for a locally absent class. Cauchy–Schwarz in the $A$-inner product gives the
# per-class budget
#
# $$
# \begin{aligned}
# |s_c(z) - s_c^0(z)| &\le b_c(z), \\
# b_c(z) &:= \lVert\delta_c\rVert_A\lVert z - \mu_c\rVert_A + \tfrac12\lVert\delta_c\rVert_A^2 . \qquad (38)
# \end{aligned}
# $$
#
# With $c^\star = f^0(x)$ the shared prediction, the margin $M^0(x) = s^0_{c^\star} - \max_{c\ne c^\star}s^0_c$
# and, for every $c \ne c^\star$, $s_{c^\star} - s_c \ge s^0_{c^\star} - s^0_c - b_{c^\star} - b_c \ge M^0 - (b_{c^\star} + b_c)$.
# The extracted text does not show the budget's formula (Eq. (39)); we use the smallest one
# this proof supports,
#
# $$
# \begin{aligned}
# B^{(k)}(x) &= b_{c^\star}(z) + \max_{c\ne c^\star} b_c(z), \\
# M^0(x) > B^{(k)}(x) &\ \Rightarrow\ f^{(k)}(x) = f^0(x). \qquad (40)
# \end{aligned}
# $$
#
# Since $f^{(k)}(x)\ne y$ requires $f^0(x)\ne y$ or a flipped prediction,
# $\mathbf 1\{f^{(k)}(x)\ne y\}\le\mathbf 1\{f^0(x)\ne y\} + \mathbf 1\{M^0(x)\le B^{(k)}(x)\}$ for every
# example, hence for any target distribution $R$ and per class
#
# $$
# \begin{aligned}
# \mathcal E_R(f^{(k)}) &\le \mathcal E_R(f^0) + \Pr_R\big(M^0 \le B^{(k)}\big), \\
# e_c^{(k)} &\le e_c^0 + \Pr_{Q_c}\big(M^0 \le B^{(k)}\big).
# \end{aligned}
# $$
#
# Finally, SASP's budget is never larger than that of direct local-mean adaptation ($\alpha = 1$
# for every observed class), because $b_c$ grows with $\lVert\delta_c\rVert_A = \alpha_c\lVert\Delta_c\rVert_A$.
# One function computes all these quantities from a fitted shared head and a client's head
# ({func}`fedlib.heads.stability.stability_terms`), another counts the counterexamples to each
# statement on labelled queries ({func}`fedlib.heads.stability.stability_summary`); the check
# adds them up over random federations ({func}`fedbook.studies.fedgrc_checks.stability_on_random_federations`):

# %%
rand = fedgrc_checks.stability_on_random_federations(rng_for(12), P.trials, P.dim)
for key in ("n", "flipped", "certified", "certified_flipped", "budget_viol"):
    glue(f"fgd_rand_{key}", int(getattr(rand, key)), display=False)
glue("fgd_rand_uncertified", int(rand.n - rand.certified), display=False)
glue("fgd_rand_eq37", float(rand.eq37), display=False)
how = f"{P.trials} random federations, {rand.n} queries"
check("Eq. (37): s_c - s_c^0 = delta'A(z - mu_c) - 1/2 |delta|_A^2 (also in alpha, Delta form)", how + ", error / score scale",
      rand.eq37, 1e-10)
check("locally absent classes keep their scores", how, rand.absent_change, 1e-9)
check("Eq. (38): |s_c - s_c^0| <= b_c(z) (Cauchy-Schwarz)", how + ", (query, class) violations", rand.budget_viol, 0,
      kind="count")
check("Eq. (40): M^0 > B => unchanged prediction", how + ", certified but flipped", rand.certified_flipped, 0, kind="count")
check("pointwise: 1{f^k != y} <= 1{f^0 != y} + 1{M^0 <= B}", how, rand.pointwise, 0, kind="count")
check("risk bound E(f^k) <= E(f^0) + Pr(M^0 <= B)", how + ", smallest slack (bound - risk)", rand.min_slack, 0.0,
      kind="at least")
check("class-wise bound e_c^k <= e_c^0 + Pr_Qc(M^0 <= B)", how + ", (instance, class) violations", rand.classwise, 0,
      kind="count")
check("SASP's budget <= the local-mean (alpha = 1) budget", how, rand.budget_larger, 0, kind="count")

# %% [markdown]
# On {glue:text}`fgd_rand_n` random queries Eq. (37) holds to {glue:text}`fgd_rand_eq37:.1e`
# (relative to the score scale), the Cauchy–Schwarz budget is violated
# {glue:text}`fgd_rand_budget_viol` times, and of the {glue:text}`fgd_rand_certified` certified
# queries ($M^0 > B$) {glue:text}`fgd_rand_certified_flipped` changed prediction. The theorem is a
# *sufficient* condition: of the {glue:text}`fgd_rand_uncertified` uncertified queries only
# {glue:text}`fgd_rand_flipped` changed.
#
# ### On a trained model's features
#
# The statements of Sections 2-7 hold for *any* frozen backbone, however it was trained, so a
# FedAvg backbone is enough to check them on real features (the CGRL-trained backbone is the
# subject of the experiments chapter). We train a small CNN with FedAvg on MNIST-5k split over
# Dirichlet label-skewed clients and freeze it; MMS is fitted from the clients' moments of the
# pooled `conv1`, `conv2` and penultimate features ({func}`fedlib.stats.feature_moments`), and SASP
# per client, with fedlib's defaults $\gamma$ = {glue:text}`fgd_gamma:.2f` and $m_0$ = {glue:text}`fgd_m0:.0f`
# (the paper's hyper-parameter table is missing). Each client's adapted head is compared with the
# shared head on the **global test set** (class-balanced: $R = Q$) and on its **local test split**
# ($R = P^{(k)}$): {func}`fedbook.studies.fedgrc_checks.stability_by_client`.

# %% tags=["hide-input"]
t_train = time.perf_counter()
data = load_dataset("mnist5k", n_samples=P.n_samples, seed=seed)  # the smoke profile trains on a seeded subset
fed = make_federation(data, n_clients=P.n_clients, partition="dirichlet", alpha=P.alpha, min_size=10,
                      global_test_per_class=P.gtpc, seed=seed)
model_fn = functools.partial(build_model, "cnn", in_channels=1, n_classes=data.n_classes, input_size=28)
run = run_federated(FedAvg(train=TrainConfig(epochs=1, batch_size=32, lr=0.01, momentum=0.9)), fed, model_fn,
                    LoopConfig(rounds=P.rounds, seed=seed, evaluate_last=False))
model = load_model(model_fn(), run.server).eval()
layers = ("conv1", "conv2", "penultimate")
layer_dims = [model.feature_dims[name] for name in layers]
client_moments = [feature_moments(model, c.train.x, c.train.y, data.n_classes, layers=layers) for c in fed.clients]
mms_cnn = MMS(gamma=DEFAULT_GAMMA).fit(client_moments, layer_dims)
stab_table, worst = fedgrc_checks.stability_by_client(mms_cnn, client_moments, fed, model, layers, m0=DEFAULT_M0)
train_seconds = time.perf_counter() - t_train
g_tab = stab_table[stab_table["target"] == "global (Q)"]
glue("fgd_gamma", float(DEFAULT_GAMMA), display=False)
glue("fgd_m0", float(DEFAULT_M0), display=False)
glue("fgd_cnn_clients", int(fed.n_clients), display=False)
glue("fgd_cnn_rounds", int(P.rounds), display=False)
glue("fgd_cnn_dim", int(sum(layer_dims)), display=False)
glue("fgd_cnn_err0", float(100 * g_tab["error shared"].mean()), display=False)
glue("fgd_cnn_errk", float(100 * g_tab["error SASP"].mean()), display=False)
glue("fgd_cnn_uncert", float(100 * g_tab["Pr(M0 <= B)"].mean()), display=False)
glue("fgd_cnn_changed", int(stab_table["changed"].sum()), display=False)
glue("fgd_cnn_cert_changed", int(worst.certified_flipped), display=False)
glue("fgd_cnn_eq37", float(worst.eq37), display=False)
glue("fgd_cnn_min_slack", float(100 * worst.min_slack), display=False)
how = f"FedAvg CNN, {fed.n_clients} clients x (global + local test), d = {sum(layer_dims)}"
check("trained CNN: Eq. (37) exact score change", how + ", error / score scale", worst.eq37, 1e-9)
check("trained CNN: locally absent classes keep their scores", how, worst.absent_change, 1e-8)
check("trained CNN: Eq. (38) budget", how + ", violations", worst.budget_viol, 0, kind="count")
check("trained CNN: Eq. (40) margin > budget => unchanged prediction", how + ", certified but changed",
      worst.certified_flipped, 0, kind="count")
check("trained CNN: pointwise and class-wise risk bounds", how + ", violations", worst.pointwise + worst.classwise, 0,
      kind="count")
check("trained CNN: E_R(f^k) <= E_R(f^0) + Pr_R(M^0 <= B) for R = Q and R = P_k", how + ", smallest slack",
      worst.min_slack, 0.0, kind="at least")
check("trained CNN: SASP's budget <= the local-mean budget", how, worst.budget_larger, 0, kind="count")
print(f"training, statistics and {len(stab_table)} evaluations: {train_seconds:.1f} s")

# %% [markdown]
# Per client, the shared head's and the SASP head's error, the uncertified share
# $\Pr(M^0 \le B)$ and the bound (their sum, Eq. (40)'s consequence), all in % of the queries,
# then how many predictions SASP changed and how many of those were certified (the theorem
# allows none). First on the global test set ($R = Q$), then on each client's local test split
# ($R = P^{(k)}$):

# %% tags=["hide-input"]
PERCENT = {"error shared": "error, shared head (%)", "error SASP": "error, SASP head (%)",
           "Pr(M0 <= B)": "Pr(M⁰ ≤ B) (%)", "bound": "bound (%)"}
stab_shown = stab_table.assign(**{c: 100 * stab_table[c] for c in PERCENT}).rename(
    columns={**PERCENT, "changed": "changed predictions"})
for target, caption in (("global (Q)", "On the global test set (R = Q)"),
                        ("local (P_k)", "On each client's local test split (R = P_k)")):
    display(show_table(stab_shown[stab_shown["target"] == target].drop(columns="target"), digits=1,  # noqa: F821
                       index=False).set_caption(caption))

# %% [markdown]
# With {glue:text}`fgd_cnn_clients` clients, {glue:text}`fgd_cnn_rounds` FedAvg rounds and
# $d$ = {glue:text}`fgd_cnn_dim` concatenated features, the shared head errs on
# {glue:text}`fgd_cnn_err0:.1f`% of the global test set on average and the SASP heads on
# {glue:text}`fgd_cnn_errk:.1f`%; the bound adds the uncertified share,
# {glue:text}`fgd_cnn_uncert:.1f`% on average. Over all clients and both targets
# {glue:text}`fgd_cnn_changed` predictions changed, {glue:text}`fgd_cnn_cert_changed` of them
# certified (the theorem allows none), Eq. (37) holds to {glue:text}`fgd_cnn_eq37:.1e`, and the
# smallest slack of the risk bound is {glue:text}`fgd_cnn_min_slack:.1f` percentage points.
# The bound is loose by design: it charges every uncertified query as a possible error, and the
# budget grows with $\lVert z - \mu_c\rVert_A$, so queries far from the class means are rarely
# certified even when adaptation leaves them alone. It is a guarantee on *where* adaptation can
# hurt, not an estimate of how much.
#
# ## The check table

# %% tags=["remove-cell"]
glue("fgd_stats_n_checks", len(checks), display=False)
glue("fgd_stats_n_fail", checks.n_fail, display=False)
glue("fgd_stats_seconds", float(P.elapsed()), display=False)
glue("fgd_trials", int(P.trials), display=False)

# %%
checks.show()

# %% [markdown]
# {glue:text}`fgd_stats_n_checks` statements checked with {glue:text}`fgd_trials` random instances per
# numerical check, {glue:text}`fgd_stats_n_fail` failing, in {glue:text}`fgd_stats_seconds:.1f` s at this
# profile. Every statement is also a property test (hypothesis) in `tests/test_fedgrc_theory.py`;
# the moment identities of Appendix A-E, Proposition IV.1, the bounds (31), Proposition IV.2 and
# the Bayes equivalence are also in `tests/test_mms.py`.
