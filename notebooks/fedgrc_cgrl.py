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
# (chapter-fedgrc-cgrl)=
# # FedGRC's representation (CGRL): the geometry, checked
#
# FedGRC {cite:p}`fedgrc` has three parts, and each rests on a few exact statements. This chapter
# checks the first, **CGRL** (Section IV-A), which trains the backbone with a *directional* loss on
# unit features (supervised contrastive {cite:p}`khosla2020supcon` plus cross-entropy against
# shared class directions) and a *magnitude* loss that pulls each feature's log norm to a shared
# reference per class and layer. The statements: the radial–angular split of a squared distance
# (Eq. (10)), the bias–variance form of the magnitude penalty (Lemma IV.1, Eq. (16)), and that the
# directional gradient is tangent to the sphere and the magnitude gradient radial (Eq. (18)-(20)).
# The link to the trace of the class covariance (Eq. (21)) and the two statistical parts, MMS and
# SASP, are the next chapter ({ref}`chapter-fedgrc-statistics`).
#
# For each statement this chapter gives a short derivation, checks it numerically on many seeded
# random instances (and symbolically with sympy where that is a proof), and records a row of the
# **check table** at the end. The library code under test is {mod}`fedlib.cgrl` (the losses); the
# same statements are property tests in `tests/test_fedgrc_theory.py`. Each check is a function of
# {mod}`fedbook.studies.fedgrc_derivations`, named where it is used, and the section's `record_*`
# function of that module adds its rows to the table.
#
# **About the source.** The extracted text of the paper lacks every displayed equation: the
# numbered equations are referred to but not shown. We reconstruct each one from the prose around
# it and from the appendix proofs. The gradients and the magnitude loss are fedlib's; this chapter
# re-derives them independently and compares.

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke" (seconds), "book" (the default), "paper" (more instances)
seed = 0  # every random draw is derived from it
trials = None  # random instances per numerical check (None: the profile's value)
dim = None  # largest feature dimension of the random instances

# %% tags=["hide-input"]
import functools

from fedbook.checks import CheckTable
from fedbook.page import glue_all, setup
from fedbook.studies import fedgrc_derivations as fc
from fedlib.rng import numpy_rng

PROFILES = {
    "smoke": dict(trials=6, dim=6),
    "book": dict(trials=60, dim=16),
    "paper": dict(trials=300, dim=48),
}
# Small matrices and a shared 2-core machine: one intra-op thread is many times faster here (two threads
# contend with the other processes); this sets the kernel process only.
P = setup(PROFILES, profile, threads=1, trials=trials, dim=dim)
checks = CheckTable()  # the closing check table: each section's record_* adds its rows
rng_for = functools.partial(numpy_rng, seed)  # rng_for(*keys): this chapter's stream for a purpose
R = {}  # every number the prose quotes, glued at the end

print(f"profile {P.profile}: {P.trials} random instances per check, dimension up to {P.dim}")

# %% [markdown]
# ## 1. The radial–angular split of a squared distance (Eq. (10))
#
# Write a nonzero feature as $h = R\,u$ with $R = \lVert h\rVert_2$ and $u = \operatorname{unit}(h)$.
# Expanding the square and using $u_i^\top u_i = u_j^\top u_j = 1$,
#
# $$
# \begin{aligned}
# \lVert h_i - h_j\rVert_2^2 &= R_i^2 - 2R_iR_j\,u_i^\top u_j + R_j^2 \\
#   &= \underbrace{(R_i - R_j)^2}_{\text{radial}} + \underbrace{2R_iR_j\,(1 - u_i^\top u_j)}_{\text{angular}} .
#   \qquad (10)
# \end{aligned}
# $$
#
# Both terms are nonnegative: two features are far apart when their norms differ *or* their
# directions do, and the angular part is weighted by the product of the norms. sympy confirms that
# the difference of the two sides is exactly $R_i^2(u_i^\top u_i - 1) + R_j^2(u_j^\top u_j - 1)$,
# i.e. zero precisely on unit directions; numerically we split random raw features with
# {func}`fedlib.cgrl.unit` over six orders of magnitude of norms
# ({func}`fedbook.studies.fedgrc_derivations.radial_angular_symbolic`,
# {func}`fedbook.studies.fedgrc_derivations.radial_angular_split`).

# %%
eq10_symbolic = fc.radial_angular_symbolic()
print("sympy: lhs - rhs - [R_i^2(|u_i|^2-1) + R_j^2(|u_j|^2-1)] =", eq10_symbolic[1])
R.update(fc.record_eq10(checks, eq10_symbolic, fc.radial_angular_split(rng_for(1), P.trials, P.dim)))

# %% [markdown]
# Over {glue:text}`fgd_eq10_pairs` random pairs the two sides agree to
# {glue:text}`fgd_eq10_err:.1e` relative to $R_i^2 + R_j^2$ (rounding).
#
# ## 2. The magnitude penalty: dispersion plus offset (Lemma IV.1, Eq. (16))
#
# The magnitude loss (Eq. (14)-(15)) penalizes, per layer $\ell$ and view $i$,
# $\chi_{\ell i}(\rho_{\ell i} - a_{\ell,y_i})^2$ with the stabilized log norm
# $\rho = \tfrac12\log(\lVert h\rVert^2 + \varepsilon^2)$, the shared reference $a_{\ell,c}$ and the gate
# $\chi_{\ell i} = v_{y_i}\mathbf 1\{r_{\ell}(x_i) \ge r_{\min}\}$, $r_\ell = \sqrt{\lVert h_\ell\rVert^2 + \varepsilon^2}$ (the class's reference
# exists and the feature is not tiny). Fix a class, a layer and a round; let
# $p_\chi = \Pr(\chi = 1) > 0$ and $\bar\rho_\chi = \mathbb E[\rho\mid\chi=1]$. Since $\chi\in\{0,1\}$,
#
# $$
# \begin{aligned}
# \mathbb E[\chi(\rho - a)^2] &= p_\chi\,\mathbb E[(\rho - \bar\rho_\chi + \bar\rho_\chi - a)^2\mid\chi=1] \\
#  &= p_\chi\Big[\underbrace{\operatorname{Var}(\rho\mid\chi=1)}_{\text{dispersion}}
#  + \underbrace{(\bar\rho_\chi - a)^2}_{\text{mean offset}}\Big], \qquad (16)
# \end{aligned}
# $$
#
# the cross term $2(\bar\rho_\chi - a)\,\mathbb E[\rho - \bar\rho_\chi\mid\chi=1]$ vanishing by
# conditional centring; with $p_\chi = 0$ the penalty is zero. Under the **empirical** distribution
# of a batch (the paper's closing remark in Appendix A-A) the expectation is the batch mean and the
# variance is the biased $1/n_\chi$ one; the lemma holds for any gate held fixed during
# differentiation. The library's loss ({func}`fedlib.cgrl.magnitude_loss`)
# averages over views and layers, so over several classes and layers it must equal
#
# $$
# \begin{aligned}
# \mathcal L_{\mathrm{mag}} = \frac1{|\Lambda|}\sum_{\ell}\sum_c \frac{n_c}{n}\,
#   p_{\chi,\ell,c}\big[&\widehat{\operatorname{Var}}_{\ell,c} \\
#   &+ (\bar\rho_{\ell,c,\chi} - a_{\ell,c})^2\big].
# \end{aligned}
# $$
#
# (one class's and layer's term $p_{\chi,\ell,c}[\dots]$ is {func}`fedlib.cgrl.dispersion_plus_offset`).
# First sympy, on a batch of five views with the gate pattern $(1,0,1,1,0)$ and symbolic log norms
# ({func}`fedbook.studies.fedgrc_derivations.magnitude_lemma_symbolic`), then random batches
# ({func}`fedbook.studies.fedgrc_derivations.magnitude_decomposition`):

# %%
lemma_symbolic = fc.magnitude_lemma_symbolic()
print("sympy: empirical E[chi (rho - a)^2] - p_chi [Var + offset^2] =", lemma_symbolic)
R.update(fc.record_lemma(checks, lemma_symbolic, fc.magnitude_decomposition(rng_for(2), P.trials, P.dim)))

# %% [markdown]
# The library's magnitude loss equals the lemma's decomposition to {glue:text}`fgd_lemma_err:.1e`
# on batches that include {glue:text}`fgd_lemma_zero_p` (class, layer) groups with $p_\chi = 0$
# (tiny features or a class without a reference yet), where both sides are zero. Among the
# gated views the penalty is therefore a **dispersion** term (it shrinks the spread of log norms
# within a class) plus an **offset** term (it moves their mean to the shared reference): it aligns
# relative magnitudes, $\rho - a = \log(r/e^{a})$, not absolute ones.
#
# ## 3. Tangential and radial gradients (Eq. (17)-(20))
#
# **Normalization.** For $h \ne 0$ with $r = \lVert h\rVert$ and $u = h/r$, the differential is
# $du = \tfrac1r(I - uu^\top)\,dh$ (Eq. (17)), so for any loss $\ell(u)$,
# $\nabla_h\ell = \tfrac1r(I - uu^\top)\nabla_u\ell$.
#
# **Prototype cross-entropy.** With logits $u^\top p_c/\tau$, $q_c(u)$ the softmax and
# $\ell_p = -\log q_y(u)$, differentiating the log-sum-exp gives
# $\nabla_u\ell_p = \tfrac1\tau\big(\sum_c q_c\,p_c - p_y\big)$ (Eq. (18a)) and
#
# $$
# \nabla_h\ell_p = \frac{1}{\tau r}\,(I - uu^\top)\Big(\sum_c q_c(u)\,p_c - p_y\Big). \qquad (18b)
# $$
#
# The supervised contrastive loss also depends on $h_i$ only through $u_i$ (in every comparison
# where it appears), so the full directional gradient $g_i = \nabla_{h_i}\mathcal L_{\mathrm{dir}}$ is
# a sum of terms $(I - u_iu_i^\top)(\cdot)$ and $h_i^\top g_i = 0$: it is **tangent** to the sphere.
# For an isolated feature-space step, $\lVert h_i - s g_i\rVert^2 = \lVert h_i\rVert^2 + s^2\lVert g_i\rVert^2$:
# the squared norm changes only at second order.
#
# **Magnitude.** With $\chi$ and $a$ held fixed,
#
# $$
# \nabla_h\,\chi(\rho - a)^2 = 2\chi(\rho - a)\,\frac{h}{\lVert h\rVert^2 + \varepsilon^2}, \qquad (19)
# $$
#
# parallel to $h$ (**radial**): a small descent step contracts a feature whose log norm is above
# the reference and expands one below it. At the final layer, $v_i = \nabla_{h_i}\ell_{r,i}$ is
# parallel to $h_i$, hence $g_i^\top v_i = 0$ (Eq. (20)).
#
# We differentiate {func}`fedlib.cgrl.directional_loss` and {func}`fedlib.cgrl.magnitude_loss`
# with autograd (float64) on random batches: $2B$ views with both views of each example, random
# unit class directions with some zero references (classes never observed), feature norms over
# three orders of magnitude. The library's losses are means over the $2B$ views, so each view's
# closed-form gradient carries a factor $1/(2B)$ (and $1/|\Lambda|$ for the magnitude loss)
# ({func}`fedbook.studies.fedgrc_derivations.gradient_geometry`).

# %%
R.update(fc.record_gradients(checks, fc.gradient_geometry(rng_for(3), P.trials, P.dim)))

# %% [markdown]
# The directional gradient is tangent to within {glue:text}`fgd_tang_err:.1e` (cosine between
# $h_i$ and $g_i$, over {glue:text}`fgd_grad_views` views), Eq. (18b) and Eq. (19) match autograd
# to {glue:text}`fgd_ce_err:.1e` and {glue:text}`fgd_rad_err:.1e`, and the two feature-space
# gradients are orthogonal to {glue:text}`fgd_orth_err:.1e`.
#
# **In parameter space they are not.** The paper is careful to say that the complementarity is a
# feature-space statement: through the backbone Jacobian $J_i = \partial h_i/\partial\phi$ the
# parameter-gradient inner product is $\sum_{i,j} g_i^\top J_iJ_j^\top v_j$, with no reason to vanish.
# A two-layer random backbone shows it (a counterexample to the stronger reading,
# {func}`fedbook.studies.fedgrc_derivations.parameter_gradient_cosines`):

# %%
R.update(fc.record_parameter_space(checks, fc.parameter_gradient_cosines(rng_for(4), P.trials)))

# %% [markdown]
# The median absolute cosine between the two parameter gradients is
# {glue:text}`fgd_param_cos:.2f`: in weight space the terms interact, which is why the paper
# frames Eq. (20) as a statement about feature-space gradients only.
#
# ## 4. Does the directional loss tighten the classes? (Section IV-A's reason for CGRL)
#
# The paper introduces the supervised contrastive loss "to promote within-class alignment and
# between-class separation". The operative statement is about the features' within-class
# scatter: a step down $\mathcal L_{dir}$ should lower the share of the final-layer directions'
# scatter that lies within the classes ({func}`fedlib.cgrl.within_class_share`, free of scale). On
# random linear backbones, gradient descent on $\mathcal L_{dir}$ from random weights
# ({func}`fedbook.studies.fedgrc_derivations.scatter_descent`; the test suite checks that the
# same routine stepping *up* the loss fails the check):

# %%
R.update(fc.record_scatter(checks, fc.scatter_descent(rng_for(5), P.trials)))

# %% [markdown]
# Over {glue:text}`fgd_scatter_instances` instances the within-class share changed by a median of
# {glue:text}`fgd_scatter_median:.1f` points ({glue:text}`fgd_scatter_extreme`).
# Whether CGRL's trained backbone holds tighter classes than the same training without its
# losses is measured on the runs of {ref}`chapter-fedgrc-experiments` (its `cgrl-scatter-*`
# controls and the paragraph "Does CGRL reduce within-class scatter here?").
#
# ## The check table

# %% tags=["remove-cell"]
R.update(fc.record_table(checks, P.trials, "cgrl"), fgd_cgrl_seconds=float(P.elapsed()))
glue_all(R)

# %%
checks.show()

# %% [markdown]
# {glue:text}`fgd_cgrl_n_checks` statements checked with {glue:text}`fgd_trials` random instances per
# numerical check, {glue:text}`fgd_cgrl_n_fail` failing, in {glue:text}`fgd_cgrl_seconds:.1f` s at this
# profile. Every statement is also a property test (hypothesis) in `tests/test_fedgrc_theory.py`.
