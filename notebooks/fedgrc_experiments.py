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
# (chapter-fedgrc-experiments)=
# # FedGRC: is high local accuracy enough? The experiments
#
# FedGRC {cite:p}`fedgrc` asks every client's deployed model to do two things at once: fit the
# client's own data (local accuracy) and still recognize every class the federation knows,
# including the classes the client never saw (global, unseen and rare accuracy, and the client
# floors L@25, U@25, R@25 and F@25 of {ref}`chapter-setting`). It combines three parts, whose
# mathematics the previous chapters checked ({ref}`chapter-fedgrc-cgrl`, {ref}`chapter-fedgrc-statistics`):
#
# 1. **CGRL**, a representation trained with cross-entropy on a weak and a strong view of every
#    sample, a supervised contrastive loss {cite:p}`khosla2020supcon`, a prototype cross-entropy
#    against shared class directions and a log-norm magnitude loss against shared per-class,
#    per-layer references ({mod}`fedlib.cgrl`, {class}`fedlib.algorithms.fedgrc.CGRL`);
# 2. **MMS**, a shared statistical metric built from additive multilayer moments under the
#    frozen backbone ({class}`fedlib.heads.MMS`);
# 3. **SASP**, each client's linear head from class means shrunk toward the shared ones by
#    $\alpha(n) = n/(n+m_0)$, with equal priors ({class}`fedlib.heads.SASP`).
#
# This chapter re-makes the paper's Tables I/II (every method under the protocol), Table IV
# (before and after personalization), Table IX (backbone × head, with the excess gain) and the
# sensitivity to $m_0$ and $\gamma$, at our scale, and ends with a claims table.
#
# **Our scale, honestly.** The paper trains ResNet-18 on CIFAR-10/100 and on the FedRS
# remote-sensing benchmark; its result tables and its hyper-parameter table (Table X) are missing
# from the text we have. The `book` profile uses MNIST-5k, the small CNN, 20 clients and
# Dirichlet label skew, with every default ours and listed below; the `paper` profile runs CIFAR
# with ResNet-18 for readers who have the files and the hours.

# %% tags=["parameters"]
profile = "book"  # "smoke" (seconds), "book" (the default, minutes on 2 cores), "paper" (CIFAR, ResNet-18)
seed = 0  # the run seed; every random stream is derived from it
alphas = None  # Dirichlet concentrations, e.g. [0.3, 0.1]
rounds = None  # communication rounds of every training run
local_epochs = None  # local epochs per round
lr = None  # local learning rate (SGD, momentum 0.9, batch 32)
m0 = None  # SASP reference strength m0 (the shared mean weighs as m0 samples)
gamma = None  # MMS relative ridge gamma
tau = None  # CGRL temperature
lambda_dir = None  # CGRL weight of the directional loss
lambda_rad = None  # CGRL weight of the magnitude loss
warmup = None  # CGRL warm-up rounds T_w
layers = None  # MMS / CGRL layers, e.g. ["conv1", "conv2", "penultimate"]
m0_grid = None  # sensitivity: values of m0
gamma_grid = None  # sensitivity: values of gamma
cifar_root = None  # paper profile: folder holding cifar-10-batches-py/ (or cifar-100-python/)
results_dir = None  # where tidy results are saved (None: not saved)

# %%
import functools
import math
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from myst_nb import glue

from fedlib.algorithms import Ditto, FedAvg, FedAvgFT, FedBABU, FedETF, FedRep
from fedlib.algorithms.fedgrc import CGRL
from fedlib.deployment import FrozenFeatures, StatHead, collect_statistics
from fedlib.cgrl import CGRLConfig
from fedlib.chapter import load_data, resolve, verdict
from fedlib.data import plot_partition
from fedlib.federation import make_federation
from fedlib.heads import MMS, SASP, CCVRHead, FedCGSHead, Fed3RHead, FedNCMHead, LDAHead
from fedlib.loop import LoopConfig, evaluate_deployment, per_client_table, run_federated
from fedlib.metrics import RARE_RATIO, protocol_summary
from fedlib.models import build_model
from fedlib.training import TrainConfig

t_start = time.perf_counter()
PROFILES = {
    "smoke": dict(dataset="mnist5k", n_samples=700, n_clients=6, alphas=[0.1], global_test_per_class=20, model="cnn",
                  model_kw=dict(width=16, feature_dim=128),
                  rounds=2, local_epochs=1, lr=0.01, m0=10.0, gamma=0.1, tau=0.1, lambda_dir=0.5, lambda_rad=0.1, warmup=5,
                  layers=None, m0_grid=[0.0, 10.0, math.inf], gamma_grid=[0.01, 0.1, 1.0], finetune_epochs=1),
    "book": dict(dataset="mnist5k", n_samples=None, n_clients=20, alphas=[0.3, 0.1], global_test_per_class=100, model="cnn",
                 model_kw=dict(width=16, feature_dim=128),
                 rounds=10, local_epochs=1, lr=0.01, m0=10.0, gamma=0.1, tau=0.1, lambda_dir=0.5, lambda_rad=0.1, warmup=5,
                 layers=None, m0_grid=[0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0, math.inf],
                 gamma_grid=[1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0], finetune_epochs=3),
    "paper": dict(dataset="cifar10", n_samples=None, n_clients=20, alphas=[0.3, 0.1], global_test_per_class=600,
                  model="resnet18", model_kw={}, rounds=100, local_epochs=5, lr=0.01, m0=10.0, gamma=0.1, tau=0.1, lambda_dir=0.5,
                  lambda_rad=0.1, warmup=5, layers=None, m0_grid=[0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0, math.inf],
                  gamma_grid=[1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0], finetune_epochs=5),
}
P = resolve(PROFILES, profile, alphas=alphas, rounds=rounds, local_epochs=local_epochs, lr=lr, m0=m0, gamma=gamma,
            tau=tau, lambda_dir=lambda_dir, lambda_rad=lambda_rad, warmup=warmup, layers=layers, m0_grid=m0_grid,
            gamma_grid=gamma_grid)
data = load_data(P.dataset, n_samples=P.n_samples, seed=seed, cifar_root=cifar_root)  # smoke: a seeded subset
C = data.n_classes
in_channels, input_size = data.x.shape[1], data.x.shape[-1]
model_fn = functools.partial(build_model, P.model, in_channels=in_channels, n_classes=C, input_size=input_size, **P.model_kw)
LAYERS = tuple(P.layers) if P.layers is not None else tuple(model_fn().feature_layers)
train_cfg = TrainConfig(epochs=P.local_epochs, batch_size=32, lr=P.lr, momentum=0.9)
finetune_cfg = TrainConfig(epochs=P.finetune_epochs, batch_size=32, lr=P.lr, momentum=0.9)
cgrl_cfg = CGRLConfig(tau=P.tau, lambda_dir=P.lambda_dir, lambda_rad=P.lambda_rad, warmup=P.warmup, layers=LAYERS,
                      augment="cifar" if P.dataset.startswith("cifar") else "digits")
loop_cfg = LoopConfig(rounds=P.rounds, seed=seed, eval_every=0, rare_ratio=RARE_RATIO)
print(f"profile {P.profile}: {data.name}, {len(data)} samples, {P.n_clients} clients, alphas {P.alphas}, "
      f"{P.rounds} rounds, model {P.model}, MMS layers {LAYERS}")

# %% [markdown]
# ## The setting and our defaults
#
# We hold out a class-balanced global test set, split the rest over the clients with a Dirichlet
# label skew and split every client's data 75/25 into training and local test samples, exactly as
# in {ref}`chapter-setting` (where every metric is defined). All methods train the same CNN
# (GroupNorm) for the same number of rounds with full participation and the same local optimizer.
#
# The paper's Table X of hyper-parameters is missing from the text; these are our choices, each a
# parameter of this notebook:
#
# | quantity | value | why |
# |---|---|---|
# | rounds × local epochs | {glue:text}`fge_rounds` × {glue:text}`fge_epochs` | the largest budget that keeps this page under 6 minutes on 2 cores |
# | the CNN | {glue:text}`fge_width` channels in the first block, a {glue:text}`fge_fdim`-dimensional penultimate layer | half the width of {ref}`chapter-setting`'s CNN: {glue:text}`fge_n_runs` training runs must fit the page's budget |
# | CGRL temperature $\tau$ | {glue:text}`fge_tau` | the usual supervised-contrastive value |
# | $\lambda_{dir}$, $\lambda_{rad}$, $\beta$ | {glue:text}`fge_ldir`, {glue:text}`fge_lrad`, {glue:text}`fge_beta` | the auxiliary terms stay below the cross-entropy |
# | warm-up $T_w$ | {glue:text}`fge_warmup` rounds | {class}`fedlib.cgrl.CGRLConfig` |
# | $\xi$, $\zeta$ (temporal averaging) | {glue:text}`fge_xi`, {glue:text}`fge_zeta` | weights of the new estimate against the old reference |
# | layers $\Lambda$ | {glue:text}`fge_layers` | every pooled block of the CNN |
# | weak / strong views | shift ≤ 2 px / rotation ≤ 20°, scale, shift ≤ 3 px, 10-px cutout | label-preserving for digits (no flips) |
# | MMS ridge $\gamma$ | {glue:text}`fge_gamma` | the ridge is $\gamma$ times the average within-class variance |
# | SASP $m_0$ | {glue:text}`fge_m0` | the shared mean weighs as this many samples |
# | baselines' statistical heads | penultimate features | as in their papers |
# | FedRep head epochs, FedBABU / FedAvg-FT / FedETF-FT fine-tuning | 1, {glue:text}`fge_ft` epochs | |

# %% tags=["remove-cell"]
glue("fge_rounds", P.rounds, display=False)
glue("fge_epochs", P.local_epochs, display=False)
glue("fge_tau", P.tau, display=False)
glue("fge_ldir", P.lambda_dir, display=False)
glue("fge_lrad", P.lambda_rad, display=False)
glue("fge_beta", cgrl_cfg.beta, display=False)
glue("fge_xi", cgrl_cfg.xi, display=False)
glue("fge_zeta", cgrl_cfg.zeta, display=False)
glue("fge_warmup", P.warmup, display=False)
glue("fge_layers", ", ".join(LAYERS), display=False)
glue("fge_gamma", P.gamma, display=False)
glue("fge_m0", P.m0, display=False)
glue("fge_ft", P.finetune_epochs, display=False)
glue("fge_n_clients", P.n_clients, display=False)
glue("fge_width", P.model_kw.get("width", 64), display=False)  # ResNet-18 starts with 64 channels
glue("fge_fdim", model_fn().feature_dims["penultimate"], display=False)

# %%
federations = {a: make_federation(data, n_clients=P.n_clients, partition="dirichlet", alpha=a, min_size=10,
                                  global_test_per_class=P.global_test_per_class, seed=seed) for a in P.alphas}
fig, axes = plt.subplots(1, len(P.alphas), figsize=(4.2 * len(P.alphas), 4.2), squeeze=False)
for ax, (a, fed) in zip(axes[0], federations.items()):
    plot_partition(fed.train_counts(), ax=ax, title=f"Dirichlet α = {a}")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Training every method once per α
#
# Six training runs per $\alpha$ share the one round loop ({func}`fedlib.loop.run_federated`):
# FedAvg {cite:p}`fedavg`, CGRL, FedRep {cite:p}`fedrep`, FedBABU {cite:p}`fedbabu`, Ditto
# {cite:p}`ditto` and FedETF {cite:p}`fedetf`. Methods that differ only in what a client deploys
# reuse a run ({func}`fedlib.loop.evaluate_deployment`): FedAvg-FT {cite:p}`motley` and
# FedETF-FT fine-tune the final model locally; every **statistical head** is fitted after a
# terminal statistics round ({func}`fedlib.deployment.collect_statistics`) in which each
# client sends the additive class moments (counts, sums, Gram matrices) of its training features
# under the frozen final backbone, and nothing else. The baseline heads use the penultimate
# features: FedNCM {cite:p}`fedncm`, an LDA-style pooled-covariance head, FedCGS
# {cite:p}`fedcgs`, Fed3R {cite:p}`fed3r` and CCVR {cite:p}`ccvr`; MMS and SASP use the
# concatenated layers $\Lambda$.

# %%
BASELINE_HEADS = {"FedNCM": FedNCMHead(), "LDA": LDAHead(), "FedCGS": FedCGSHead(), "Fed3R": Fed3RHead(), "CCVR": CCVRHead()}


def summarize_frame(frame):
    wide = per_client_table(frame)
    return wide, protocol_summary(wide)


def train_runs(fed):
    algs = {
        "FedAvg": FedAvg(train=train_cfg),
        "CGRL": CGRL(train=train_cfg, cgrl=cgrl_cfg),
        "FedRep": FedRep(train=train_cfg, head_train=TrainConfig(epochs=1, batch_size=32, lr=P.lr)),
        "FedBABU": FedBABU(train=train_cfg, finetune=finetune_cfg),
        "Ditto": Ditto(train=train_cfg, personal_train=train_cfg),
        "FedETF": FedETF(train=train_cfg),
    }
    runs, seconds = {}, {}
    for name, alg in algs.items():
        t0 = time.perf_counter()
        runs[name] = run_federated(alg, fed, model_fn, loop_cfg)
        seconds[name] = time.perf_counter() - t0
    return runs, seconds


results, per_client, run_seconds, ledgers, stat_runs, ledgers_train, round_seconds = {}, {}, {}, {}, {}, {}, {}
for a, fed in federations.items():
    runs, run_seconds[a] = train_runs(fed)
    for name, run in runs.items():
        ledgers_train[(a, name)] = run.ledger.to_frame()
        round_seconds[(a, name)] = float(np.median(run.seconds))  # the last round includes the evaluation
    deployments = {name: run.frame[run.frame["round"] == run.rounds_done] for name, run in runs.items() if name != "CGRL"}
    deployments["CGRL (training head)"] = runs["CGRL"].frame[runs["CGRL"].frame["round"] == runs["CGRL"].rounds_done]
    deployments["FedAvg-FT"] = evaluate_deployment(FedAvgFT(train=train_cfg, finetune=finetune_cfg), runs["FedAvg"], fed, model_fn, loop_cfg)
    deployments["FedETF-FT"] = evaluate_deployment(FedETF(train=train_cfg, finetune=finetune_cfg), runs["FedETF"], fed, model_fn, loop_cfg)
    for backbone in ("FedAvg", "CGRL"):
        pen = collect_statistics(runs[backbone], fed, model_fn, layers=("penultimate",), seed=seed)
        multi = collect_statistics(runs[backbone], fed, model_fn, layers=LAYERS, seed=seed)
        stat_runs[(a, backbone)] = multi
        for label, head in BASELINE_HEADS.items():
            deployments[f"{backbone} + {label}"] = evaluate_deployment(StatHead(head=head, seed=seed), pen, fed, model_fn, loop_cfg)
        deployments[f"{backbone} + MMS"] = evaluate_deployment(StatHead(MMS(gamma=P.gamma)), multi, fed, model_fn, loop_cfg)
        deployments[f"{backbone} + MMS + SASP"] = evaluate_deployment(
            StatHead(SASP(m0=P.m0, gamma=P.gamma)), multi, fed, model_fn, loop_cfg)
        ledgers[(a, backbone, "penultimate")] = pen.ledger
        ledgers[(a, backbone, "multilayer")] = multi.ledger
    deployments["FedAvg + FedCGS + FT"] = evaluate_deployment(
        StatHead(FedCGSHead(), finetune=finetune_cfg, seed=seed),
        collect_statistics(runs["FedAvg"], fed, model_fn, layers=("penultimate",), seed=seed), fed, model_fn, loop_cfg)
    for name, frame in deployments.items():
        per_client[(a, name)], results[(a, name)] = summarize_frame(frame)
    if results_dir is not None:
        for name, run in runs.items():
            run.save(Path(results_dir) / f"alpha{a}" / name)
glue("fge_n_runs", sum(len(v) for v in run_seconds.values()), display=False)

# %% [markdown]
# ## Tables I/II: every method under the protocol
#
# Mean local, global, unseen and rare accuracy over the clients and the four floors (%). FedGRC is
# the last row of each block: the CGRL backbone with the MMS metric and SASP heads. Rows are
# grouped as in the paper: personalized-FL methods, statistical heads on the FedAvg backbone, and
# statistical heads on the CGRL backbone.

# %%
METRICS = ["local", "global", "unseen", "rare", "L@25", "U@25", "R@25", "F@25"]
PFL = ["FedAvg", "FedAvg-FT", "FedRep", "FedBABU", "Ditto", "FedETF", "FedETF-FT", "CGRL (training head)"]
HEADS = [*BASELINE_HEADS, "MMS", "MMS + SASP"]
ORDER = PFL + [f"FedAvg + {h}" for h in HEADS] + [f"CGRL + {h}" for h in HEADS]


def family(name):
    return "personalized FL" if name in PFL else ("heads on FedAvg" if name.startswith("FedAvg +") else "heads on CGRL")


table = pd.DataFrame([{"alpha": a, "family": family(n), "method": "FedGRC (CGRL + MMS + SASP)" if n == "CGRL + MMS + SASP" else n,
                       **{m: 100 * results[(a, n)][m] for m in METRICS}} for a in P.alphas for n in ORDER])
table = table.set_index(["alpha", "family", "method"])
table.round(1)

# %% tags=["remove-cell"]
FEDGRC = "CGRL + MMS + SASP"
a_hi, a_lo = P.alphas[0], P.alphas[-1]
POS = {"hi": a_hi, "lo": a_lo}
key = lambda m: m.replace("@", "")  # noqa: E731  (glue keys without '@')
# The baselines: the personalized-FL methods and the baseline heads on FedAvg's backbone. Rows built from
# FedGRC's own parts (CGRL's backbone, MMS, SASP) are ablations, compared in Table IX, not baselines.
BASELINES = [n for n in PFL if n != "CGRL (training head)"] + [f"FedAvg + {h}" for h in BASELINE_HEADS]
best = {}
for a in P.alphas:
    for m in METRICS:
        vals = {n: results[(a, n)][m] for n in BASELINES if not math.isnan(results[(a, n)][m])}
        best[(a, m)] = max(vals.items(), key=lambda kv: kv[1]) if vals else ("n/a", math.nan)
for pos, a in POS.items():
    glue(f"fge_alpha_{pos}", a, display=False)
    for m in METRICS:
        glue(f"fge_fedgrc_{key(m)}_{pos}", 100 * results[(a, FEDGRC)][m], display=False)
        glue(f"fge_gap_{key(m)}_{pos}", 100 * (results[(a, FEDGRC)][m] - best[(a, m)][1]), display=False)
        glue(f"fge_best_{key(m)}_{pos}", best[(a, m)][0], display=False)
        glue(f"fge_bestval_{key(m)}_{pos}", 100 * best[(a, m)][1], display=False)
    led = [m for m in ("global", "unseen", "rare", "F@25") if results[(a, FEDGRC)][m] > best[(a, m)][1]]
    glue(f"fge_leads_{pos}", ", ".join(led) if led else "none of them", display=False)
    glue(f"fge_head_gain_{pos}", 100 * (results[(a, "FedAvg + MMS")]["global"] - results[(a, "FedAvg")]["global"]), display=False)
    glue(f"fge_cgrl_gain_{pos}", 100 * (results[(a, FEDGRC)]["F@25"] - results[(a, "FedAvg + MMS + SASP")]["F@25"]), display=False)

# %% [markdown]
# We call **baselines** the personalized-FL methods and the five baseline heads on FedAvg's
# backbone; the other rows are built from FedGRC's own parts (its backbone, MMS, SASP) and are
# ablations, which Table IX below takes apart. At $\alpha =$ {glue:text}`fge_alpha_lo`, FedGRC
# reaches {glue:text}`fge_fedgrc_global_lo:.1f` % mean global accuracy and
# {glue:text}`fge_fedgrc_F25_lo:.1f` % F@25, against {glue:text}`fge_bestval_F25_lo:.1f` % F@25
# for the best baseline ({glue:text}`fge_best_F25_lo`), a difference of
# {glue:text}`fge_gap_F25_lo:+.1f` points; FedGRC beats every baseline in:
# *{glue:text}`fge_leads_lo`* (of global, unseen, rare and F@25). At
# $\alpha =$ {glue:text}`fge_alpha_hi` it does in: *{glue:text}`fge_leads_hi`*. Its local
# accuracy is {glue:text}`fge_gap_local_lo:+.1f` points from the best local baseline
# ({glue:text}`fge_best_local_lo`) at $\alpha =$ {glue:text}`fge_alpha_lo`. The personalized-FL
# methods that fine-tune or keep personal heads (FedAvg-FT, FedRep, FedBABU, Ditto, FedETF-FT)
# reach high local accuracy and lose the classes their clients do not hold: their U@25 and
# F@25 are at or near 0, the paper's central observation.
#
# The largest single effect in the table is not CGRL but the **statistical readout itself**:
# replacing FedAvg's trained linear head by the shared MMS head on the *same* backbone changes
# the mean global accuracy by {glue:text}`fge_head_gain_lo:+.1f` points at
# $\alpha =$ {glue:text}`fge_alpha_lo` ({glue:text}`fge_head_gain_hi:+.1f` at
# {glue:text}`fge_alpha_hi`). A linear head trained by FedAvg under label skew leans toward the
# classes most clients hold; a head built from pooled class moments with equal priors does not.
# Swapping FedAvg's backbone for CGRL's under the same MMS + SASP head changes F@25 by
# {glue:text}`fge_cgrl_gain_lo:+.1f` points at $\alpha =$ {glue:text}`fge_alpha_lo`
# ({glue:text}`fge_cgrl_gain_hi:+.1f` at {glue:text}`fge_alpha_hi`).

# %% [markdown]
# Each point below is one method's mean local accuracy against its mean global accuracy (the
# paper's Figure 1): a method in the upper right fits the clients *and* keeps the label space.

# %%
fig, axes = plt.subplots(1, len(P.alphas), figsize=(6 * len(P.alphas), 4.6), squeeze=False)
colors = {"personalized FL": "tab:blue", "heads on FedAvg": "tab:orange", "heads on CGRL": "tab:green"}
for ax, a in zip(axes[0], P.alphas):
    t = table.loc[a]
    for (fam, method), row in t.iterrows():
        star = method.startswith("FedGRC")
        ax.scatter(row["local"], row["global"], color=colors[fam], marker="*" if star else "o", s=160 if star else 30,
                   label=fam if method == t.loc[fam].index[0] else None, zorder=3 if star else 2)
        if method in ("FedAvg", "FedAvg-FT", "FedETF-FT", "Ditto", "FedRep") or star:
            ax.annotate(method.split(" (")[0], (row["local"], row["global"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("mean local accuracy (%)")
    ax.set_ylabel("mean global accuracy (%)")
    ax.set_title(f"Dirichlet α = {a}")
    ax.legend(fontsize=8, loc="lower left")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Table IV: what personalization does
#
# Three methods with an explicit personalization stage, each compared immediately before and
# after it (differences in points): FedETF → FedETF-FT (the backbone and the classifier are
# fine-tuned), a statistical head → the same head fine-tuned on the client's own features
# (FedCGS on the FedAvg backbone, the backbone frozen: the analogue of the paper's pFedGM, which
# is not implemented here), and the shared MMS head → SASP (only the class means change).

# %%
PAIRS = [("FedETF", "FedETF-FT"), ("FedAvg + FedCGS", "FedAvg + FedCGS + FT"), ("CGRL + MMS", "CGRL + MMS + SASP")]
SHOW4 = ["local", "global", "unseen", "F@25"]
rows4 = []
for a in P.alphas:
    for before, after in PAIRS:
        rows4.append({"alpha": a, "before → after": f"{before} → {after}",
                      **{f"{m} before": 100 * results[(a, before)][m] for m in SHOW4},
                      **{f"Δ {m}": 100 * (results[(a, after)][m] - results[(a, before)][m]) for m in SHOW4}})
table4 = pd.DataFrame(rows4).set_index(["alpha", "before → after"])
table4.round(1)

# %% tags=["remove-cell"]
for pos, a in POS.items():
    for (before, after), tag in zip(PAIRS, ("etf", "head", "sasp")):
        for m in SHOW4:
            glue(f"fge_t4_{tag}_{key(m)}_{pos}", 100 * (results[(a, after)][m] - results[(a, before)][m]), display=False)

# %% [markdown]
# At $\alpha =$ {glue:text}`fge_alpha_lo`, fine-tuning FedETF changes local accuracy by
# {glue:text}`fge_t4_etf_local_lo:+.1f` points, global accuracy by
# {glue:text}`fge_t4_etf_global_lo:+.1f` and F@25 by {glue:text}`fge_t4_etf_F25_lo:+.1f`;
# fine-tuning the FedCGS head changes them by {glue:text}`fge_t4_head_local_lo:+.1f`,
# {glue:text}`fge_t4_head_global_lo:+.1f` and {glue:text}`fge_t4_head_F25_lo:+.1f`; SASP by
# {glue:text}`fge_t4_sasp_local_lo:+.1f`, {glue:text}`fge_t4_sasp_global_lo:+.1f` and
# {glue:text}`fge_t4_sasp_F25_lo:+.1f`. The paper's pattern is that fine-tuning buys local
# accuracy with global accuracy while SASP buys local accuracy at almost no global cost; the
# table shows which of these hold here. SASP cannot hurt a locally unseen class's *mean*: its
# mean stays the shared one (Eq. (32)), so unseen accuracy moves only through the other classes'
# adapted means.
#
# ## Table IX: backbone × head
#
# The baseline combination is the FedAvg backbone $B_0$ with the baseline head $H_0$ of highest
# F@25 on it; FedGRC's parts are the CGRL backbone $B_1$ and MMS + SASP ($H_1$). With $F(B, H)$
# the F@25 of a pairing, the **excess gain** is
#
# $$ I = \big[F(B_1,H_1) - F(B_0,H_0)\big] - \big[F(B_1,H_0) - F(B_0,H_0)\big] - \big[F(B_0,H_1) - F(B_0,H_0)\big], $$
#
# positive when the two replacements help more together than the sum of their separate effects.

# %%
rows9, excess = [], {}
for a in P.alphas:
    h0 = max(BASELINE_HEADS, key=lambda h: results[(a, f"FedAvg + {h}")]["F@25"])
    for metric in ("F@25", "global"):
        f = {(b, h): 100 * results[(a, f"{b} + {hh}")][metric]
             for b in ("FedAvg", "CGRL") for h, hh in (("H0", h0), ("H1", "MMS + SASP"))}
        i_gain = (f[("CGRL", "H1")] - f[("FedAvg", "H0")]) - (f[("CGRL", "H0")] - f[("FedAvg", "H0")]) \
            - (f[("FedAvg", "H1")] - f[("FedAvg", "H0")])
        excess[(a, metric)] = i_gain
        rows9.append({"alpha": a, "metric": metric, "H0": h0, "B0 + H0": f[("FedAvg", "H0")], "B1 + H0": f[("CGRL", "H0")],
                      "B0 + H1": f[("FedAvg", "H1")], "B1 + H1 (FedGRC)": f[("CGRL", "H1")], "excess gain I": i_gain})
table9 = pd.DataFrame(rows9).set_index(["alpha", "metric"])
table9.round(2)

# %% tags=["remove-cell"]
for pos, a in POS.items():
    glue(f"fge_I_F25_{pos}", excess[(a, "F@25")], display=False)
    glue(f"fge_I_global_{pos}", excess[(a, "global")], display=False)
    glue(f"fge_h0_{pos}", table9.loc[(a, "F@25"), "H0"], display=False)
n_pos_I = sum(excess[(a, "F@25")] > 0 for a in P.alphas)
glue("fge_I_npos", int(n_pos_I), display=False)
glue("fge_n_alphas", len(P.alphas), display=False)

# %% [markdown]
# The excess gain in F@25 is {glue:text}`fge_I_F25_lo:+.2f` points at
# $\alpha =$ {glue:text}`fge_alpha_lo` ($H_0$ = {glue:text}`fge_h0_lo`) and
# {glue:text}`fge_I_F25_hi:+.2f` at $\alpha =$ {glue:text}`fge_alpha_hi`
# ($H_0$ = {glue:text}`fge_h0_hi`): positive in {glue:text}`fge_I_npos` of
# {glue:text}`fge_n_alphas` settings. In global accuracy it is {glue:text}`fge_I_global_lo:+.2f`
# and {glue:text}`fge_I_global_hi:+.2f`. One seed per setting: differences of a point or two are
# within the noise of an F@25 over {glue:text}`fge_n_clients` clients, which averages only the
# weakest quarter of them.
#
# ## Sensitivity to $m_0$ and $\gamma$
#
# Both parameters act only on the head, so we freeze the CGRL backbone at
# $\alpha =$ {glue:text}`fge_alpha_lo`, extract each client's features once
# ({class}`fedlib.deployment.FrozenFeatures`), and refit: SASP for every $m_0$ (0 uses
# the raw local means of the observed classes, $\infty$ the shared head), and MMS + SASP for every
# $\gamma$. Each head is evaluated by the same protocol.

# %%
frozen = FrozenFeatures(stat_runs[(a_lo, "CGRL")], federations[a_lo], model_fn)  # one backbone pass per split
mms = MMS(gamma=P.gamma).fit(frozen.moments, frozen.layer_dims)
SENS = ("local", "global", "unseen", "F@25")
sens_m0 = pd.DataFrame([{"m0": m, **{k: 100 * v for k, v in frozen.summary([SASP(m0=m).fit(mms, mom) for mom in frozen.client_moments]).items()
                                     if k in SENS}} for m in P.m0_grid]).set_index("m0")
sens_gamma = []
for g in P.gamma_grid:
    mg = MMS(gamma=g).fit(frozen.moments, frozen.layer_dims)
    shared = frozen.summary([mg] * len(frozen.client_moments))
    pers = frozen.summary([SASP(m0=P.m0).fit(mg, mom) for mom in frozen.client_moments])
    sens_gamma.append({"gamma": g, "MMS global": 100 * shared["global"], "MMS + SASP local": 100 * pers["local"],
                       "MMS + SASP global": 100 * pers["global"], "MMS + SASP F@25": 100 * pers["F@25"]})
sens_gamma = pd.DataFrame(sens_gamma).set_index("gamma")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
xm = [m if math.isfinite(m) else 10 * max(v for v in P.m0_grid if math.isfinite(v)) for m in P.m0_grid]
xm = [max(v, 0.1) for v in xm]
for col in ("local", "global", "F@25"):
    ax1.plot(xm, sens_m0[col], marker="o", label=col)
ax1.set_xscale("log")
ax1.set_xticks(xm, [("∞" if not math.isfinite(m) else f"{m:g}") for m in P.m0_grid], fontsize=8)
ax1.set_xlabel("$m_0$ (left: 0, right: ∞ = shared head)")
ax1.set_ylabel("accuracy (%)")
ax1.set_title(f"SASP, CGRL backbone, α = {a_lo}")
ax1.legend()
for col in ("MMS global", "MMS + SASP local", "MMS + SASP global"):
    ax2.plot(P.gamma_grid, sens_gamma[col], marker="o", label=col)
ax2.set_xscale("log")
ax2.set_xlabel("$\\gamma$")
ax2.set_title(f"ridge, m0 = {P.m0:g}")
ax2.legend()
fig.tight_layout()
plt.show()
display(sens_m0.round(1), sens_gamma.round(1))

# %% tags=["remove-cell"]
m_fin = [m for m in P.m0_grid if math.isfinite(m)]
glue("fge_m0_local_0", float(sens_m0.loc[min(m_fin), "local"]), display=False)
glue("fge_m0_global_0", float(sens_m0.loc[min(m_fin), "global"]), display=False)
glue("fge_m0_min", float(min(m_fin)), display=False)
glue("fge_m0_local_inf", float(sens_m0.iloc[-1]["local"]), display=False)
glue("fge_m0_global_inf", float(sens_m0.iloc[-1]["global"]), display=False)


def trend(values):
    d = np.diff(np.asarray(values, dtype=float))
    return "rises" if (d >= -1e-9).all() else ("falls" if (d <= 1e-9).all() else "is not monotone")


local_trend, global_trend = trend(sens_m0["local"]), trend(sens_m0["global"])
glue("fge_m0_trend_local", local_trend, display=False)
glue("fge_m0_trend_global", global_trend, display=False)
if local_trend == "falls" and global_trend == "rises":
    reading = ("This is the trade-off Eq. (35) describes: a smaller m0 moves each observed class's mean toward the "
               "client's own samples, which fits the local test split and costs all-class recognition.")
elif local_trend != "falls":
    reading = ("So there is no local-versus-global trade-off here for m0 to arbitrate: the shared class means, "
               "estimated from every client, describe even a client's own test samples at least as well as its few "
               "local ones. Eq. (35)'s trade-off needs client-specific shifts of the class-conditional features; a "
               "label-skewed MNIST partition has almost none (every client draws a class's images from the same "
               "distribution), so shrinking toward the shared mean only removes estimation noise.")
else:
    reading = "Local accuracy falls with m0 but global accuracy does not rise monotonically."
glue("fge_m0_reading", reading, display=False)
gcol = sens_gamma["MMS + SASP global"]
glue("fge_gamma_best", float(gcol.idxmax()), display=False)
glue("fge_gamma_range", float(gcol.max() - gcol.min()), display=False)

# %% [markdown]
# From $m_0 =$ {glue:text}`fge_m0_min:g` to the shared head, mean local accuracy goes from
# {glue:text}`fge_m0_local_0:.1f` % to {glue:text}`fge_m0_local_inf:.1f` % and global accuracy
# from {glue:text}`fge_m0_global_0:.1f` % to {glue:text}`fge_m0_global_inf:.1f` %: as $m_0$ grows,
# local accuracy {glue:text}`fge_m0_trend_local` and global accuracy
# {glue:text}`fge_m0_trend_global`. {glue:text}`fge_m0_reading`
# Across the $\gamma$ grid, the global accuracy of MMS + SASP varies by
# {glue:text}`fge_gamma_range:.1f` points, best at $\gamma =$ {glue:text}`fge_gamma_best:g`.
#
# ## What it costs
#
# Every byte goes through the ledger. Per client, the terminal statistics round uploads counts,
# sums and Gram matrices of the selected features, $C(1 + d + d^2)$ numbers: with the multilayer
# features that is more than a model update of the small CNN, once. The CGRL reference arrays
# ride along with every broadcast and update.

# %%
cost_rows = []
for a in P.alphas:
    for name in ("FedAvg", "CGRL"):
        led = ledgers_train[(a, name)]
        per_round = led.groupby("round")["bytes"].sum().mean() / P.n_clients
        cost_rows.append({"alpha": a, "what": f"{name}: one training round", "KiB per client": per_round / 1024,
                          "seconds per round (median)": round_seconds[(a, name)]})
    for kind in ("penultimate", "multilayer"):
        led = ledgers[(a, "CGRL", kind)].to_frame()
        last = led[led["round"] == led["round"].max()]
        cost_rows.append({"alpha": a, "what": f"terminal statistics ({kind})", "KiB per client": last["bytes"].sum() / P.n_clients / 1024,
                          "seconds per round (median)": math.nan})
costs = pd.DataFrame(cost_rows).set_index(["alpha", "what"])
costs.round(2)

# %% tags=["remove-cell"]
c_lo = costs.loc[a_lo]
glue("fge_round_ratio", float(c_lo.loc["CGRL: one training round", "seconds per round (median)"]
                             / c_lo.loc["FedAvg: one training round", "seconds per round (median)"]), display=False)
glue("fge_bytes_ratio", float(c_lo.loc["CGRL: one training round", "KiB per client"]
                             / c_lo.loc["FedAvg: one training round", "KiB per client"]), display=False)
glue("fge_stats_kib", float(c_lo.loc["terminal statistics (multilayer)", "KiB per client"]), display=False)

# %% [markdown]
# A CGRL round took {glue:text}`fge_round_ratio:.2f` times as long as a FedAvg round here (two
# views per sample, plus the post-update direction pass; `tests/bench_fedgrc.py` measures it
# side by side) and moved {glue:text}`fge_bytes_ratio:.3f` times the bytes. The multilayer
# statistics cost {glue:text}`fge_stats_kib:.0f` KiB per client, once.
#
# ## Claims
#
# The paper's headline claims, quoted with their section, against our numbers. A verdict is
# computed from the rule in the last column, never typed; "does not hold at this scale" means
# our run, with its small CNN, MNIST-5k, a short budget and one seed, does not show it.

# %%
fmt = lambda d: "; ".join(f"α={k}: {v:+.1f}" for k, v in d.items())  # noqa: E731
lead4 = {a: [m for m in ("global", "unseen", "rare", "F@25") if results[(a, FEDGRC)][m] > best[(a, m)][1]] for a in P.alphas}
gap_g = {a: 100 * (results[(a, FEDGRC)]["global"] - best[(a, "global")][1]) for a in P.alphas}
gap_f = {a: 100 * (results[(a, FEDGRC)]["F@25"] - best[(a, "F@25")][1]) for a in P.alphas}
gap_l = {a: 100 * (results[(a, FEDGRC)]["local"] - best[(a, "local")][1]) for a in P.alphas}
shift = {m: {k: 100 * (results[(a_lo, m)][k] - results[(a_hi, m)][k]) for k in ("local", "global")}
         for m in ("FedRep", "FedAvg-FT", "Ditto")}
pattern = [m for m, d in shift.items() if d["local"] > 0 and d["global"] < 0]
head_gain_fedavg = {a: 100 * (np.mean([results[(a, f"FedAvg + {h}")]["global"] for h in HEADS]) - results[(a, "FedAvg")]["global"]) for a in P.alphas}
head_gain_cgrl = {a: 100 * (np.mean([results[(a, f"CGRL + {h}")]["global"] for h in HEADS]) - results[(a, "CGRL (training head)")]["global"]) for a in P.alphas}
head_level = {a: 100 * (np.mean([results[(a, f"CGRL + {h}")]["global"] for h in HEADS])
                        - np.mean([results[(a, f"FedAvg + {h}")]["global"] for h in HEADS])) for a in P.alphas}
ft_hurts = {a: all(results[(a, af)]["local"] > results[(a, bf)]["local"] and results[(a, af)]["global"] < results[(a, bf)]["global"]
                   and results[(a, af)]["F@25"] < results[(a, bf)]["F@25"] for bf, af in PAIRS[:2]) for a in P.alphas}
ft_some = {a: any(results[(a, af)]["global"] < results[(a, bf)]["global"] for bf, af in PAIRS[:2]) for a in P.alphas}
sasp_ok = {a: results[(a, FEDGRC)]["local"] > results[(a, "CGRL + MMS")]["local"]
           and results[(a, FEDGRC)]["F@25"] >= results[(a, "CGRL + MMS")]["F@25"]
           and results[(a, FEDGRC)]["global"] > results[(a, "CGRL + MMS")]["global"] - 0.01 for a in P.alphas}
sasp_local = {a: results[(a, FEDGRC)]["local"] > results[(a, "CGRL + MMS")]["local"] for a in P.alphas}
both_better = {a: table9.loc[(a, "F@25"), "B1 + H1 (FedGRC)"] > max(table9.loc[(a, "F@25"), "B1 + H0"], table9.loc[(a, "F@25"), "B0 + H1"])
               for a in P.alphas}
claims = pd.DataFrame([
    ("“FedGRC achieves the highest mean global, unseen, rare, and F@25 scores in all 5 heterogeneity settings” (Section V-B)",
     "; ".join(f"α={a}: leads in {', '.join(lead4[a]) or 'none'}" for a in P.alphas),
     verdict(all(len(v) == 4 for v in lead4.values()), any(lead4.values())),
     "holds if FedGRC beats every baseline in all four at every α; partly if in some"),
    ("“Its gains over the respective best baselines are 2.17%–4.15% in global accuracy and 2.13%–6.46% in F@25” (Section V-B)",
     "global: " + fmt(gap_g) + " | F@25: " + fmt(gap_f),
     verdict(all(v > 0 for v in [*gap_g.values(), *gap_f.values()]), any(v > 0 for v in [*gap_g.values(), *gap_f.values()])),
     "holds if every gain is positive (our scale differs, so not the size)"),
    ("“Under Dir(0.1), FedGRC trails the best local baseline by 15.64% on CIFAR-10 and 3.72% on CIFAR-100” (Section V-B)",
     f"local gap at α={a_lo}: {gap_l[a_lo]:+.1f} (best local baseline: {best[(a_lo, 'local')][0]})",
     verdict(gap_l[a_lo] < 0), "holds if FedGRC's local accuracy trails the best local baseline at the strongest skew"),
    ("“As heterogeneity increases from Dir(0.3) to Dir(0.1), … achieve higher local but lower global accuracy … The same pattern occurs for FedRep” (Section V-B)",
     "; ".join(f"{m}: local {d['local']:+.1f}, global {d['global']:+.1f}" for m, d in shift.items()),
     verdict(len(pattern) == len(shift), bool(pattern)),
     f"from α={a_hi} to α={a_lo}; holds if local rises and global falls for FedRep, FedAvg-FT and Ditto"),
    ("“the six statistical classifiers raise FedYoYo’s global accuracy from 34.59% to 48.51%–51.56%, whereas the same classifiers on FedAvg yield 33.05%–35.47%, compared with 34.80% for its original head” (Section V-B)",
     "mean gain of the 7 heads over the backbone's own head, FedAvg backbone: " + fmt(head_gain_fedavg) + " | CGRL backbone: "
     + fmt(head_gain_cgrl) + " | mean head accuracy, CGRL − FedAvg backbone: " + fmt(head_level),
     verdict(all(head_gain_cgrl[a] > head_gain_fedavg[a] + 1 and head_level[a] > 1 for a in P.alphas),
             any(head_gain_cgrl[a] > head_gain_fedavg[a] + 1 for a in P.alphas)),
     "holds if the heads gain more (> 1 point) on the contrastive backbone *and* reach a higher accuracy (> 1 point) than on FedAvg's; "
     "partly if only the gain is larger (CGRL's own training head is weak)"),
    ("“Both reference methods improve local accuracy while substantially reducing generalization and client recognition floors” (Section V-C, Table IV)",
     "; ".join(f"α={a}: FedETF-FT Δlocal {results[(a, 'FedETF-FT')]['local'] * 100 - results[(a, 'FedETF')]['local'] * 100:+.1f}, "
               f"Δglobal {100 * (results[(a, 'FedETF-FT')]['global'] - results[(a, 'FedETF')]['global']):+.1f}" for a in P.alphas),
     verdict(all(ft_hurts.values()), any(ft_some.values())),
     "holds if, at every α, both fine-tuned methods gain local accuracy and lose global accuracy and F@25"),
    ("“SASP improves local adaptation and recognition floors while largely retaining the shared classifier’s all-class accuracy” (Section V-C)",
     "; ".join(f"α={a}: Δlocal {100 * (results[(a, FEDGRC)]['local'] - results[(a, 'CGRL + MMS')]['local']):+.1f}, "
               f"ΔF@25 {100 * (results[(a, FEDGRC)]['F@25'] - results[(a, 'CGRL + MMS')]['F@25']):+.1f}, "
               f"Δglobal {100 * (results[(a, FEDGRC)]['global'] - results[(a, 'CGRL + MMS')]['global']):+.1f}" for a in P.alphas),
     verdict(all(sasp_ok.values()), any(sasp_local.values())),
     "holds if local and F@25 do not fall and global falls by less than 1 point, at every α"),
    ("“The complete combination achieves higher F@25 than either single-component replacement in all five settings” (Section V-D)",
     "; ".join(f"α={a}: B1+H1 {table9.loc[(a, 'F@25'), 'B1 + H1 (FedGRC)']:.1f} vs B1+H0 {table9.loc[(a, 'F@25'), 'B1 + H0']:.1f}, "
               f"B0+H1 {table9.loc[(a, 'F@25'), 'B0 + H1']:.1f}" for a in P.alphas),
     verdict(all(both_better.values()), any(both_better.values())), "holds at every α"),
    ("“The excess gain I … is positive for F@25 in all five settings, ranging from 0.86% to 2.61%” (Section V-D)",
     fmt({a: excess[(a, "F@25")] for a in P.alphas}),
     verdict(all(excess[(a, "F@25")] > 0 for a in P.alphas), any(excess[(a, "F@25")] > 0 for a in P.alphas)),
     "holds if I > 0 at every α"),
], columns=["claim (quoted)", "our measurement (points)", "verdict", "rule"])
glue("fge_n_holds", int((claims["verdict"] == "holds").sum()), display=False)
glue("fge_n_partly", int((claims["verdict"] == "partly").sum()), display=False)
glue("fge_n_claims", len(claims), display=False)
glue("fge_total_seconds", time.perf_counter() - t_start, display=False)
with pd.option_context("display.max_colwidth", None):
    display(claims)

# %% [markdown]
# Of {glue:text}`fge_n_claims` claims, {glue:text}`fge_n_holds` hold here and
# {glue:text}`fge_n_partly` hold in part. **Why a verdict can differ from the paper's.** MNIST
# digits are nearly separable by the small CNN after a few rounds: every statistical head reaches
# a high global accuracy on either backbone, so FedGRC's margins over the best baseline head are
# small (the claims table gives them) and come from one seed, where the paper's come from CIFAR-100
# and remote-sensing scenes with ResNet-18. SASP's premise is that a client's classes
# *look* different from the federation's (sensors, regions, styles); a Dirichlet label skew of
# MNIST changes only how many images of each class a client holds, not what they look like, so
# adapting class means can only add estimation noise (the $m_0$ curve above). Our training budget
# ({glue:text}`fge_rounds` rounds) is short for a method whose auxiliary losses are warmed up over
# {glue:text}`fge_warmup` rounds, the hyper-parameters are our guesses (Table X is missing), and
# every number is one seed. The whole page took {glue:text}`fge_total_seconds:.0f` s to compute.
#
# ## Exercises
#
# 1. **Where does the backbone matter?** Set `lambda_dir=0` and then `lambda_rad=0` (one CGRL
#    term at a time) and re-run. Which of the two moves Table IX's $B_1$ column, and does the
#    excess gain $I$ keep its sign? Then try `rounds=30`: does CGRL's advantage grow with the
#    budget, as its warm-up suggests?
# 2. **Give SASP something to adapt to.** SASP pays off when a client's images of a class look
#    different from the federation's. Make them: right after the federations are built, give
#    every odd-numbered client 90°-rotated images (training and local test) with
#    `rot = lambda d: ArrayDataset(torch.rot90(d.x, 1, (2, 3)), d.y, d.n_classes, d.name)` and
#    `Federation([ClientData(rot(c.train), rot(c.test)) if k % 2 else c for k, c in enumerate(f.clients)], f.global_test, f.n_classes, f.description)`
#    (from `fedlib.data` and `fedlib.federation`), then re-run. Does local accuracy now fall as
#    $m_0$ grows (the `m0_grid` figure), as Eq. (35) predicts, and where is the best compromise
#    with F@25?
# 3. **Is the multilayer part worth it?** Set `layers=["penultimate"]` (MMS on the final layer
#    only) and compare the rows "CGRL + MMS" and "FedGRC" with the default run. How large are the
#    statistics messages in the cost table in each case?
