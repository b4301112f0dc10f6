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
# sensitivity to $m_0$ and $\gamma$, at our scale, and ends with a claims table whose rules are
# declared before anything is trained ({mod}`fedlib.claims`).
#
# **Our scale, honestly.** The paper trains ResNet-18 on CIFAR-10/100 and on the FedRS
# remote-sensing benchmark; its result tables and its hyper-parameter table (Table X) are missing
# from the text we have. The `book` profile uses a seeded subset of MNIST-5k
# ({glue:text}`fge_n_samples` images), the small CNN, {glue:text}`fge_n_clients` clients and
# Dirichlet label skew, with every default ours and listed below, and repeats everything over
# {glue:text}`fge_n_seeds` run seeds; the `paper` profile runs CIFAR with ResNet-18 for readers
# who have the files and the hours.

# %% tags=["parameters"]
profile = "book"  # "smoke" (seconds), "book" (the default, minutes on 2 cores), "paper" (CIFAR, ResNet-18)
seed = 0  # the first run seed; the runs use seed, seed + 1, ..., seed + n_seeds - 1
n_seeds = None  # how many run seeds every number is averaged over (each varies data subset, partition, init)
n_samples = None  # images kept from the data set (a seeded subset per run seed; None: all)
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
val_fraction = None  # share of each class of the global test set held out for selecting the baseline head
cifar_root = None  # paper profile: folder holding cifar-10-batches-py/ (or cifar-100-python/)
results_dir = None  # where tidy results are saved (None: not saved)

# %%
import dataclasses
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
from fedlib.cgrl import CGRLConfig
from fedlib.chapter import load_data, resolve
from fedlib.claims import Claim, evaluate, mean_interval, seed_table, show, tally
from fedlib.data import plot_partition
from fedlib.deployment import FrozenFeatures, StatHead, collect_statistics
from fedlib.federation import make_federation
from fedlib.heads import MMS, SASP, CCVRHead, FedCGSHead, Fed3RHead, FedNCMHead, LDAHead
from fedlib.loop import LoopConfig, evaluate_deployment, per_client_table, run_federated
from fedlib.metrics import RARE_RATIO, protocol_summary
from fedlib.models import build_model
from fedlib.rng import VALIDATION, derive_seed
from fedlib.training import TrainConfig

torch.set_num_threads(1)  # the book's chapters run single-threaded (the budget is single-thread CPU time)
t_start = time.perf_counter()
PROFILES = {
    "smoke": dict(dataset="mnist5k", n_seeds=2, n_samples=700, n_clients=6, alphas=[0.1], global_test_per_class=20,
                  val_fraction=0.3, model="cnn", model_kw=dict(width=16, feature_dim=128),
                  rounds=2, local_epochs=1, lr=0.01, m0=10.0, gamma=0.1, tau=0.1, lambda_dir=0.5, lambda_rad=0.1, warmup=5,
                  layers=None, m0_grid=[0.0, 10.0, math.inf], gamma_grid=[0.01, 0.1, 1.0], finetune_epochs=1),
    "book": dict(dataset="mnist5k", n_seeds=3, n_samples=2500, n_clients=16, alphas=[0.3, 0.1], global_test_per_class=70,
                 val_fraction=0.3, model="cnn", model_kw=dict(width=16, feature_dim=128),
                 rounds=10, local_epochs=1, lr=0.01, m0=10.0, gamma=0.1, tau=0.1, lambda_dir=0.5, lambda_rad=0.1, warmup=5,
                 layers=None, m0_grid=[0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0, math.inf],
                 gamma_grid=[1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0], finetune_epochs=3),
    "paper": dict(dataset="cifar10", n_seeds=3, n_samples=None, n_clients=20, alphas=[0.3, 0.1], global_test_per_class=600,
                  val_fraction=0.3, model="resnet18", model_kw={}, rounds=100, local_epochs=5, lr=0.01, m0=10.0, gamma=0.1,
                  tau=0.1, lambda_dir=0.5, lambda_rad=0.1, warmup=5, layers=None,
                  m0_grid=[0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0, math.inf],
                  gamma_grid=[1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0], finetune_epochs=5),
}
P = resolve(PROFILES, profile, n_seeds=n_seeds, n_samples=n_samples, alphas=alphas, rounds=rounds,
            local_epochs=local_epochs, lr=lr, m0=m0, gamma=gamma, tau=tau, lambda_dir=lambda_dir, lambda_rad=lambda_rad,
            warmup=warmup, layers=layers, m0_grid=m0_grid, gamma_grid=gamma_grid, val_fraction=val_fraction)
SEEDS = [seed + i for i in range(P.n_seeds)]
datasets = {s: load_data(P.dataset, n_samples=P.n_samples, seed=s, cifar_root=cifar_root) for s in SEEDS}  # a subset per seed
data = datasets[seed]
C = data.n_classes
in_channels, input_size = data.x.shape[1], data.x.shape[-1]
model_fn = functools.partial(build_model, P.model, in_channels=in_channels, n_classes=C, input_size=input_size, **P.model_kw)
LAYERS = tuple(P.layers) if P.layers is not None else tuple(model_fn().feature_layers)
train_cfg = TrainConfig(epochs=P.local_epochs, batch_size=32, lr=P.lr, momentum=0.9)
finetune_cfg = TrainConfig(epochs=P.finetune_epochs, batch_size=32, lr=P.lr, momentum=0.9)
cgrl_cfg = CGRLConfig(tau=P.tau, lambda_dir=P.lambda_dir, lambda_rad=P.lambda_rad, warmup=P.warmup, layers=LAYERS,
                      augment="cifar" if P.dataset.startswith("cifar") else "digits")
# the augmentation control ("FedYoYo-like"): the same two views and the same cross-entropy, no CGRL term (its
# class directions are unused, so they come from the training pass instead of an extra evaluation pass)
aug_cfg = dataclasses.replace(cgrl_cfg, lambda_dir=0.0, lambda_rad=0.0, direction_pass="train")
loop_cfgs = {s: LoopConfig(rounds=P.rounds, seed=s, eval_every=0, rare_ratio=RARE_RATIO) for s in SEEDS}
a_hi, a_lo = P.alphas[0], P.alphas[-1]
print(f"profile {P.profile}: {data.name}, {len(data)} samples, {P.n_clients} clients, alphas {P.alphas}, "
      f"{P.rounds} rounds, model {P.model}, MMS layers {LAYERS}, seeds {SEEDS}")

# %% tags=["remove-cell"]
glue("fge_n_samples", len(data), display=False)
glue("fge_n_seeds", P.n_seeds, display=False)
glue("fge_n_clients", P.n_clients, display=False)
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
glue("fge_head_epochs", 1, display=False)
glue("fge_width", P.model_kw.get("width", 64), display=False)  # ResNet-18 starts with 64 channels
glue("fge_fdim", model_fn().feature_dims["penultimate"], display=False)
glue("fge_gt_per_class", P.global_test_per_class, display=False)
glue("fge_val_pct", 100 * P.val_fraction, display=False)
glue("fge_rare_ratio", RARE_RATIO, display=False)
glue("fge_alpha_hi", a_hi, display=False)
glue("fge_alpha_lo", a_lo, display=False)
glue("fge_seeds", ", ".join(map(str, SEEDS)), display=False)

# %% [markdown]
# ## The setting and our defaults
#
# We hold out a class-balanced global test set ({glue:text}`fge_gt_per_class` images per class),
# split the rest over the clients with a Dirichlet label skew and split every client's data 75/25
# into training and local test samples, exactly as in {ref}`chapter-setting` (where every metric
# is defined). All methods train the same CNN (GroupNorm) for the same number of rounds with full
# participation and the same local optimizer. A class is **rare** for a client when the client
# holds it but with less than {glue:text}`fge_rare_ratio` times the uniform share $1/C$ of its
# training samples: the paper does not define a rare class in the text we have, so this
# threshold is ours ({data}`fedlib.metrics.RARE_RATIO`).
#
# **Seeds.** Everything is run for the run seeds {glue:text}`fge_seeds`. A run seed draws the
# data subset, the global test set, the partition, the local splits, the model initialization
# and every mini-batch order; every table shows the mean over the seeds ± the half-width of the
# 95 % Student's t interval ({func}`fedlib.claims.seed_table`).
#
# **Validation.** Selecting the best baseline head on the test set would favour the baselines
# by the luck of the test draw. We therefore hold out a random {glue:text}`fge_val_pct:.0f` % of
# each class of the global test set as a **validation set** (stream {data}`fedlib.rng.VALIDATION`
# of the run seed) and report every accuracy on the remaining test images only. The baseline head
# $H_0$ of Table IX is, per seed and backbone, the baseline head of highest mean global accuracy
# on the validation set. (The paper chooses $H_0$ by F@25; F@25 needs each client's local test
# split, which we keep for testing, so we select on the validation global accuracy instead.)
#
# **The augmentation control.** CGRL trains on a weak and a strong augmented view of every
# sample; the other methods see the raw images. To keep the augmentation apart from CGRL's
# losses we add **FedAvg-Aug**: the same CGRL code with both auxiliary weights at zero, i.e.
# FedAvg trained with cross-entropy on the same two views. It stands in for the paper's FedYoYo,
# an augmentation-based FedAvg, which is not implemented here; wherever the chapter compares
# backbones (Table IX, the statistical-heads claim), FedAvg-Aug is the baseline backbone.
#
# The paper's Table X of hyper-parameters is missing from the text; these are our choices, each a
# parameter of this notebook:
#
# | quantity | value | why |
# |---|---|---|
# | rounds × local epochs | {glue:text}`fge_rounds` × {glue:text}`fge_epochs` | the largest budget that keeps this page within its share of the book's build time, for every seed |
# | the CNN | {glue:text}`fge_width` channels in the first block, a {glue:text}`fge_fdim`-dimensional penultimate layer | half the width of {ref}`chapter-setting`'s CNN: {glue:text}`fge_n_runs` training runs must fit the page's budget |
# | CGRL temperature $\tau$ | {glue:text}`fge_tau` | the usual supervised-contrastive value |
# | $\lambda_{dir}$, $\lambda_{rad}$, $\beta$ | {glue:text}`fge_ldir`, {glue:text}`fge_lrad`, {glue:text}`fge_beta` | the auxiliary terms stay below the cross-entropy |
# | warm-up $T_w$ | {glue:text}`fge_warmup` rounds | {class}`fedlib.cgrl.CGRLConfig` |
# | $\xi$, $\zeta$ (temporal averaging) | {glue:text}`fge_xi`, {glue:text}`fge_zeta` | weights of the new estimate against the old reference |
# | layers $\Lambda$ | {glue:text}`fge_layers` | every pooled block of the CNN |
# | weak / strong views | small shift / rotation, scale, shift and cutout ({mod}`fedlib.cgrl`) | label-preserving for digits (no flips); FedAvg-Aug uses the same views |
# | MMS ridge $\gamma$ | {glue:text}`fge_gamma` | the ridge is $\gamma$ times the average within-class variance |
# | SASP $m_0$ | {glue:text}`fge_m0` | the shared mean weighs as this many samples |
# | baselines' statistical heads | penultimate features | as in their papers |
# | FedRep head epochs, FedBABU / FedAvg-FT / FedETF-FT fine-tuning | {glue:text}`fge_head_epochs`, {glue:text}`fge_ft` epochs | |

# %% [markdown]
# ## The claims, declared before any training
#
# Each claim of the paper is checked as a declaration fixed here, before any number exists
# ({mod}`fedlib.claims`): the paper's sentence, the quantity (a paired difference ours −
# baseline, one value per run seed), the claimed direction, the smallest difference that counts
# (`min_effect`) and the substitution of our scale that affects it. A row **holds** when the
# whole 95 % interval of the paired difference over the seeds clears the minimum effect in the
# claimed direction, **does not hold** when it clears it in the other direction, and is
# **inconclusive at this scale** otherwise. A claim with several parts is several rows.
#
# The minimum effects: 0 where the paper claims only a direction ("the highest", "higher",
# "positive"); where the paper claims a size, the rows test the size itself: the quantity is our
# gain minus the paper's smallest reported gain (the lower ends of its ranges of gains over the
# best baselines, in global accuracy and in F@25), claimed positive, so such a row holds when our
# gain is surely at least the paper's and does not hold when it is surely smaller; one point
# where the paper speaks of a substantial change ("substantially reducing") or of a contrast between two backbones, the
# smallest change we would call more than a handful of test images; and a one-point tolerance
# for "largely retaining", declared as non-inferiority (direction "at least": the change in global
# accuracy is surely above minus one point).
#
# **Which baseline.** "The highest … scores" means ahead of *every* baseline, so the quantity
# of those rows is FedGRC minus the *strongest* baseline of each seed on that metric (the
# maximum over the baselines, per seed: a declared aggregate that can only make the claim
# harder). The baselines are the personalized-FL methods, FedAvg-Aug, and the baseline heads on
# the FedAvg and FedAvg-Aug backbones; rows built from FedGRC's own parts (CGRL's backbone, MMS,
# SASP) are ablations.

# %%
ABSENT = "absent baselines (BTFL, pFedFDA, FedLog, FedROD, FedTHE, HPFL, FedYoYo) are not in the comparison"
SCALE = f"{P.dataset}, {P.model}, {P.n_clients} clients, {P.rounds} rounds instead of CIFAR/FedRS with ResNet-18"
RARE = f"rare class = held with under {RARE_RATIO:g}× the uniform share (the paper's definition is not in the text)"
Q_LEAD = ("FedGRC achieves the highest mean global, unseen, rare, and F@25 scores in all 5 heterogeneity settings.")
Q_SIZE = ("Its gains over the respective best baselines are 2.17%–4.15% in global accuracy and 2.13%–6.46% in F@25.")
Q_LOCAL_LEAD = ("It also leads in local accuracy on both CIFAR datasets under Dir(0.3) and on FedRS; the two Dir(0.1) "
                "settings expose a trade-off between local adaptation and broader recognition.")
Q_SHIFT = ("As heterogeneity increases from Dir(0.3) to Dir(0.1), pFedFDA [21], FedLog [27], and pFedGM [28] achieve "
           "higher local but lower global accuracy on both CIFAR datasets (Fig. 1). The same pattern occurs for FedRep "
           "[15], FedROD [16], FedTHE [18], BTFL [24], and HPFL [25].")
Q_HEADS = ("On CIFAR-100 Dir(0.3), the six statistical classifiers raise FedYoYo’s [26] global accuracy from 34.59% to "
           "48.51%–51.56%, whereas the same classifiers on FedAvg [14] yield 33.05%–35.47%, compared with 34.80% for its "
           "original head.")
Q_FT = ("Both reference methods improve local accuracy while substantially reducing generalization and client "
        "recognition floors.")
Q_SASP = ("SASP improves local adaptation and recognition floors while largely retaining the shared classifier’s "
          "all-class accuracy.")
Q_T9 = "The complete combination achieves higher F@25 than either single-component replacement in all five settings."
Q_I = ("The excess gain I measures how much the joint improvement exceeds the sum of the gains from the two individual "
       "replacements. It is positive for F@25 in all five settings, ranging from 0.86% to 2.61%, and for global accuracy "
       "in four settings.")
SIZES = {"global": 2.17, "F@25": 2.13}  # the lower ends of the paper's ranges, quoted in Q_SIZE
claims = []
for a in P.alphas:
    for m in ("global", "unseen", "rare", "F@25"):
        claims.append(Claim(f"lead-{m}-{a}", Q_LEAD, "Section V-B, Tables I–III",
                            f"{m} (α = {a}), FedGRC − strongest baseline of the seed, points", "greater", 0.0,
                            f"{SCALE}; {ABSENT}" + (f"; {RARE}" if m == "rare" else "")))
    for m, size in SIZES.items():
        claims.append(Claim(f"size-{m}-{a}", Q_SIZE, "Section V-B, Tables I–III",
                            f"{m} (α = {a}), FedGRC − strongest baseline of the seed − {size:g} (the paper's smallest "
                            "gain), points", "greater", 0.0,
                            f"{SCALE}; {ABSENT}; the paper's sizes are on other data"))
claims.append(Claim(f"local-lead-{a_hi}", Q_LOCAL_LEAD, "Section V-B, Tables I–II",
                    f"local (α = {a_hi}), FedGRC − strongest baseline of the seed, points", "greater", 0.0,
                    f"{SCALE}; {ABSENT}"))
claims.append(Claim(f"local-trail-{a_lo}", Q_LOCAL_LEAD, "Section V-B, Tables I–II",
                    f"local (α = {a_lo}), FedGRC − strongest baseline of the seed, points", "less", 0.0,
                    f"{SCALE}; {ABSENT}"))
SHIFT_METHODS = {"FedRep": "FedRep, named by the paper",
                 "FedAvg + FedCGS + FT": "pFedGM → FedCGS + fine-tuning (pFedGM is not implemented)",
                 "Ditto": "Ditto stands in for the absent pFedFDA, FedLog, FedROD, BTFL"}
for name, sub in SHIFT_METHODS.items():
    for m, d in (("local", "greater"), ("global", "less")):
        claims.append(Claim(f"shift-{m}-{name}", Q_SHIFT, "Section V-B, Fig. 1",
                            f"{m} of {name}, α = {a_lo} − α = {a_hi}, points", d, 0.0, f"{sub}; {SCALE}"))
HEAD_SUB = ("FedYoYo → FedAvg-Aug (FedAvg on the same two augmented views); the heads are our five baseline heads "
            "plus MMS and MMS + SASP")
for a in P.alphas:
    claims.append(Claim(f"heads-gain-{a}", Q_HEADS, "Section V-B",
                        f"global (α = {a}), gain of the mean head over the backbone's own head, FedAvg-Aug − FedAvg, points",
                        "greater", 1.0, HEAD_SUB))
    claims.append(Claim(f"heads-level-{a}", Q_HEADS, "Section V-B",
                        f"global (α = {a}), mean accuracy of the heads, FedAvg-Aug backbone − FedAvg backbone, points",
                        "greater", 1.0, HEAD_SUB))
FT_PAIRS = {"FedETF → FedETF-FT": ("FedETF", "FedETF-FT", "FedETF, as in the paper"),
            "FedCGS → FedCGS + FT": ("FedAvg + FedCGS", "FedAvg + FedCGS + FT",
                                      "pFedGM → FedCGS + fine-tuning on the FedAvg backbone")}
for label, (before, after, sub) in FT_PAIRS.items():
    for m, d, eff in (("local", "greater", 0.0), ("global", "less", 1.0), ("F@25", "less", 1.0)):
        claims.append(Claim(f"ft-{m}-{before}", Q_FT, "Section V-C, Table IV",
                            f"{m}, {after} − {before}, mean over α ∈ {P.alphas}, points", d, eff, f"{sub}; {SCALE}"))
for a in P.alphas:
    claims.append(Claim(f"sasp-local-{a}", Q_SASP, "Section V-C, Table IV",
                        f"local (α = {a}), FedGRC − CGRL + MMS, points", "greater", 0.0, SCALE))
    claims.append(Claim(f"sasp-F25-{a}", Q_SASP, "Section V-C, Table IV",
                        f"F@25 (α = {a}), FedGRC − CGRL + MMS, points", "greater", 0.0, SCALE))
    claims.append(Claim(f"sasp-global-{a}", Q_SASP, "Section V-C, Table IV",
                        f"global (α = {a}), FedGRC − CGRL + MMS, points", "at least", 1.0,
                        f"{SCALE}; 'largely retaining' read as a loss under one point"))
T9_SUB = ("B0 = FedAvg-Aug (for FedYoYo); H0 = the baseline head of best validation global accuracy (the paper picks "
          "the best F@25 on its tables)")
for a in P.alphas:
    claims.append(Claim(f"t9-vs-B1H0-{a}", Q_T9, "Section V-D, Table IX", f"F@25 (α = {a}), B1 + H1 − B1 + H0, points",
                        "greater", 0.0, T9_SUB))
    claims.append(Claim(f"t9-vs-B0H1-{a}", Q_T9, "Section V-D, Table IX", f"F@25 (α = {a}), B1 + H1 − B0 + H1, points",
                        "greater", 0.0, T9_SUB))
    claims.append(Claim(f"excess-F25-{a}", Q_I, "Section V-D, Table IX", f"excess gain I in F@25 (α = {a}), points",
                        "greater", 0.0, T9_SUB))
    claims.append(Claim(f"excess-global-{a}", Q_I, "Section V-D, Table IX", f"excess gain I in global accuracy (α = {a}), points",
                        "greater", 0.0, T9_SUB))
glue("fge_n_claims", len(claims), display=False)
print(f"{len(claims)} claims declared")

# %% [markdown]
# ## Training every method, for every α and seed
#
# {glue:text}`fge_n_algs` training runs per $\alpha$ and seed share the same round loop
# ({func}`fedlib.loop.run_federated`): FedAvg {cite:p}`fedavg`, FedAvg-Aug, CGRL, FedRep
# {cite:p}`fedrep`, FedBABU {cite:p}`fedbabu`, Ditto {cite:p}`ditto` and FedETF
# {cite:p}`fedetf`. Methods that differ only in what a client deploys reuse a run
# ({func}`fedlib.loop.evaluate_deployment`): FedAvg-FT {cite:p}`motley` and FedETF-FT fine-tune
# the final model locally; every **statistical head** is fitted after a terminal statistics round
# ({func}`fedlib.deployment.collect_statistics`) in which each client sends the additive class
# moments (counts, sums, Gram matrices) of its training features under the frozen final backbone,
# and nothing else. The baseline heads use the penultimate features: FedNCM {cite:p}`fedncm`, an
# LDA-style pooled-covariance head, FedCGS {cite:p}`fedcgs`, Fed3R {cite:p}`fed3r` and CCVR
# {cite:p}`ccvr`; MMS and SASP use the concatenated layers $\Lambda$.

# %%
BASELINE_HEADS = {"FedNCM": FedNCMHead(), "LDA": LDAHead(), "FedCGS": FedCGSHead(), "Fed3R": Fed3RHead(), "CCVR": CCVRHead()}
BACKBONES = ("FedAvg", "FedAvg-Aug", "CGRL")
HEAD_EPOCHS = 1


def split_validation(fed, s):
    """The federation with a class-balanced share of its global test set held out, and that share."""
    rng = np.random.default_rng(derive_seed(s, VALIDATION))
    y = fed.global_test.labels_np
    val = np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == c))[: int(round(P.val_fraction * (y == c).sum()))]
                                  for c in range(fed.n_classes)]))
    test = np.setdiff1d(np.arange(len(y)), val)
    return dataclasses.replace(fed, global_test=fed.global_test.subset(test)), fed.global_test.subset(val)


def make_algs():
    return {
        "FedAvg": FedAvg(train=train_cfg),
        "FedAvg-Aug": CGRL(train=train_cfg, cgrl=aug_cfg),
        "CGRL": CGRL(train=train_cfg, cgrl=cgrl_cfg),
        "FedRep": FedRep(train=train_cfg, head_train=TrainConfig(epochs=HEAD_EPOCHS, batch_size=32, lr=P.lr)),
        "FedBABU": FedBABU(train=train_cfg, finetune=finetune_cfg),
        "Ditto": Ditto(train=train_cfg, personal_train=train_cfg),
        "FedETF": FedETF(train=train_cfg),
    }


def train_runs(fed, lc):
    runs, seconds = {}, {}
    for name, alg in make_algs().items():
        t0 = time.perf_counter()
        runs[name] = run_federated(alg, fed, model_fn, lc)
        seconds[name] = time.perf_counter() - t0
    return runs, seconds


glue("fge_n_algs", len(make_algs()), display=False)


def final(run):
    return run.frame[run.frame["round"] == run.rounds_done]


def own_head(b):
    return "CGRL (training head)" if b == "CGRL" else b


frozen_lo = {}
rows, val_rows, federations, stat_runs, ledgers, ledgers_train, round_seconds, n_runs = [], [], {}, {}, {}, {}, {}, 0
for s in SEEDS:
    lc = loop_cfgs[s]
    for a in P.alphas:
        fed, val_set = split_validation(make_federation(datasets[s], n_clients=P.n_clients, partition="dirichlet", alpha=a,
                                                        min_size=10, global_test_per_class=P.global_test_per_class, seed=s), s)
        fed_val = dataclasses.replace(fed, global_test=val_set)
        federations[(s, a)] = fed
        runs, secs = train_runs(fed, lc)
        n_runs += len(runs)
        for name, run in runs.items():
            ledgers_train[(s, a, name)] = run.ledger.to_frame()
            round_seconds[(s, a, name)] = float(np.median(run.seconds))  # the last round includes the evaluation
        deployments = {own_head(name): final(run) for name, run in runs.items()}
        summaries = {}
        deployments["FedAvg-FT"] = evaluate_deployment(FedAvgFT(train=train_cfg, finetune=finetune_cfg), runs["FedAvg"], fed, model_fn, lc)
        deployments["FedETF-FT"] = evaluate_deployment(FedETF(train=train_cfg, finetune=finetune_cfg), runs["FedETF"], fed, model_fn, lc)
        for backbone in BACKBONES:
            pen = collect_statistics(runs[backbone], fed, model_fn, layers=("penultimate",), seed=s)
            multi = collect_statistics(runs[backbone], fed, model_fn, layers=LAYERS, seed=s)
            stat_runs[(s, a, backbone)] = multi
            for label, head in BASELINE_HEADS.items():
                deployments[f"{backbone} + {label}"] = evaluate_deployment(StatHead(head=head, seed=s), pen, fed, model_fn, lc)
                if backbone == "FedAvg-Aug":  # the selection of H0 (Table IX's B0) on the validation images
                    vf = evaluate_deployment(StatHead(head=head, seed=s), pen, fed_val, model_fn, lc)
                    val_rows.append({"seed": s, "alpha": a, "backbone": backbone, "head": label,
                                     "validation global (%)": 100 * protocol_summary(per_client_table(vf))["global"]})
            # MMS and SASP: the features once per split (FrozenFeatures gives the protocol's numbers without a
            # backbone pass over the global test set per client)
            frozen = FrozenFeatures(multi, fed, model_fn)
            mms = MMS(gamma=P.gamma).fit(frozen.moments, frozen.layer_dims)
            summaries[f"{backbone} + MMS"] = frozen.summary([mms] * len(frozen.client_moments))
            summaries[f"{backbone} + MMS + SASP"] = frozen.summary([SASP(m0=P.m0).fit(mms, mom) for mom in frozen.client_moments])
            if backbone == "CGRL" and a == a_lo:
                frozen_lo[s] = frozen  # reused by the sensitivity sweep
            ledgers[(s, a, backbone, "penultimate")] = pen.ledger
            ledgers[(s, a, backbone, "multilayer")] = multi.ledger
            if backbone == "FedAvg":
                deployments["FedAvg + FedCGS + FT"] = evaluate_deployment(
                    StatHead(FedCGSHead(), finetune=finetune_cfg, seed=s), pen, fed, model_fn, lc)
        summaries.update({name: protocol_summary(per_client_table(frame)) for name, frame in deployments.items()})
        for name, summary in summaries.items():
            rows += [{"seed": s, "alpha": a, "method": name, "metric": m, "value": 100 * v} for m, v in summary.items()]
        if results_dir is not None:
            for name, run in runs.items():
                run.save(Path(results_dir) / f"seed{s}" / f"alpha{a}" / name)
tidy = pd.DataFrame(rows)
val_table = pd.DataFrame(val_rows)
if results_dir is not None:
    tidy.to_csv(Path(results_dir) / "fedgrc_results.csv", index=False)
glue("fge_n_runs", n_runs, display=False)
fig, axes = plt.subplots(1, len(P.alphas), figsize=(4.2 * len(P.alphas), 4.2), squeeze=False)
for ax, a in zip(axes[0], P.alphas):
    plot_partition(federations[(seed, a)].train_counts(), ax=ax, title=f"Dirichlet α = {a}, seed {seed}")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Tables I/II: every method under the protocol
#
# Mean local, global, unseen and rare accuracy over the clients and the four floors (%), each
# cell the mean over the seeds ± the half-width of its 95 % interval. FedGRC is the last row of
# each block: the CGRL backbone with the MMS metric and SASP heads. Rows are grouped as in the
# paper: personalized-FL methods, statistical heads on the FedAvg, FedAvg-Aug and CGRL backbones.

# %%
METRICS = ["local", "global", "unseen", "rare", "L@25", "U@25", "R@25", "F@25"]
PFL = ["FedAvg", "FedAvg-Aug", "FedAvg-FT", "FedRep", "FedBABU", "Ditto", "FedETF", "FedETF-FT", "CGRL (training head)"]
HEADS = [*BASELINE_HEADS, "MMS", "MMS + SASP"]
ORDER = PFL + ["FedAvg + FedCGS + FT"] + [f"{b} + {h}" for b in BACKBONES for h in HEADS]
FEDGRC = "CGRL + MMS + SASP"
BASELINES = [n for n in PFL if n != "CGRL (training head)"] + [f"{b} + {h}" for b in ("FedAvg", "FedAvg-Aug") for h in BASELINE_HEADS]
R = tidy.set_index(["alpha", "method", "metric", "seed"])["value"].sort_index()


def v(a, name, m):
    """One number per seed (percent), in SEEDS order."""
    return R.loc[(a, name, m)].reindex(SEEDS).to_numpy(dtype=float)


def strongest(a, m):
    """Per seed, the best baseline on metric m (NaN-aware)."""
    stack = np.stack([v(a, n, m) for n in BASELINES])
    return np.array([np.nan if np.isnan(col).all() else np.nanmax(col) for col in stack.T])


main = tidy[tidy["metric"].isin(METRICS)].dropna(subset=["value"])
main = main[main.groupby(["alpha", "method", "metric"])["seed"].transform("count") == len(SEEDS)]
table = seed_table(main, ["alpha", "method"], "metric", "value")
table = table.reindex(pd.MultiIndex.from_product([P.alphas, ORDER], names=["alpha", "method"]))[METRICS].fillna("n/a")
table = table.rename(index={FEDGRC: "FedGRC (CGRL + MMS + SASP)"})
table

# %% tags=["remove-cell"]
POS = {"hi": a_hi, "lo": a_lo}
key = lambda m: m.replace("@", "")  # noqa: E731  (glue keys without '@')


def iv_text(values, digits=1):
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return mean_interval(values if len(values) else np.zeros(1)).format(digits)


for pos, a in POS.items():
    for m in ("local", "global", "F@25"):
        glue(f"fge_fedgrc_{key(m)}_{pos}", iv_text(v(a, FEDGRC, m)), display=False)
        glue(f"fge_gap_{key(m)}_{pos}", iv_text(v(a, FEDGRC, m) - strongest(a, m)), display=False)
    glue(f"fge_head_gain_{pos}", iv_text(v(a, "FedAvg + MMS", "global") - v(a, "FedAvg", "global")), display=False)
    glue(f"fge_aug_gain_{pos}", iv_text(v(a, "FedAvg-Aug", "global") - v(a, "FedAvg", "global")), display=False)
    glue(f"fge_cgrl_gain_{pos}", iv_text(v(a, FEDGRC, "F@25") - v(a, "FedAvg-Aug + MMS + SASP", "F@25")), display=False)

# %% [markdown]
# We call **baselines** the personalized-FL methods, FedAvg-Aug and the five baseline heads on
# the FedAvg and FedAvg-Aug backbones; the other rows are built from FedGRC's own parts and are
# ablations, which Table IX below takes apart. Differences below are means over the seeds with
# their 95 % intervals. At $\alpha =$ {glue:text}`fge_alpha_lo`, FedGRC reaches a mean global
# accuracy of {glue:text}`fge_fedgrc_global_lo` % and an F@25 of {glue:text}`fge_fedgrc_F25_lo` %;
# against the strongest baseline of each seed it differs by {glue:text}`fge_gap_global_lo` points
# in global accuracy, {glue:text}`fge_gap_F25_lo` in F@25 and {glue:text}`fge_gap_local_lo` in
# local accuracy (at $\alpha =$ {glue:text}`fge_alpha_hi`: {glue:text}`fge_gap_global_hi`,
# {glue:text}`fge_gap_F25_hi` and {glue:text}`fge_gap_local_hi`). The claims table decides
# these by their declared rules. The personalized-FL methods that fine-tune or keep personal heads
# (FedAvg-FT, FedRep, FedBABU, Ditto, FedETF-FT) fit their clients and can lose the classes their
# clients do not hold: compare their local and U@25 columns.
#
# Two effects that are not CGRL's losses can be read off the same table. Replacing FedAvg's
# trained linear head by the shared MMS head on the *same* backbone changes the mean global
# accuracy by {glue:text}`fge_head_gain_lo` points at $\alpha =$ {glue:text}`fge_alpha_lo`
# ({glue:text}`fge_head_gain_hi` at {glue:text}`fge_alpha_hi`): a linear head trained by FedAvg
# under label skew leans toward the classes most clients hold, a head built from pooled class
# moments with equal priors does not. Training FedAvg on the two augmented views (FedAvg-Aug)
# changes its global accuracy by {glue:text}`fge_aug_gain_lo` points
# ({glue:text}`fge_aug_gain_hi`). Swapping the augmentation-matched backbone FedAvg-Aug for CGRL's
# under the same MMS + SASP head changes F@25 by {glue:text}`fge_cgrl_gain_lo` points at
# $\alpha =$ {glue:text}`fge_alpha_lo` ({glue:text}`fge_cgrl_gain_hi` at {glue:text}`fge_alpha_hi`):
# that is the part of the backbone effect that CGRL's losses, not its augmentation, account for.

# %% [markdown]
# Each point below is one method's mean local accuracy against its mean global accuracy (the
# paper's Figure 1), with the 95 % intervals over the seeds as error bars: a method in the upper
# right fits the clients *and* keeps the label space.

# %%
def mean_half(values):
    values = np.asarray(values, dtype=float)
    iv = mean_interval(values)
    return iv.mean, iv.high - iv.mean


def family(name):
    return ("personalized FL" if name in PFL or name == "FedAvg + FedCGS + FT" else
            "heads on CGRL" if name.startswith("CGRL +") else "heads on FedAvg / FedAvg-Aug")


fig, axes = plt.subplots(1, len(P.alphas), figsize=(6 * len(P.alphas), 4.6), squeeze=False)
colors = {"personalized FL": "tab:blue", "heads on FedAvg / FedAvg-Aug": "tab:orange", "heads on CGRL": "tab:green"}
for ax, a in zip(axes[0], P.alphas):
    seen = set()
    for name in ORDER:
        (x, xe), (y, ye) = mean_half(v(a, name, "local")), mean_half(v(a, name, "global"))
        fam, star = family(name), name == FEDGRC
        ax.errorbar(x, y, xerr=xe if np.isfinite(xe) else None, yerr=ye if np.isfinite(ye) else None,
                    color=colors[fam], marker="*" if star else "o", ms=12 if star else 5, lw=0.8,
                    label=fam if fam not in seen else None, zorder=3 if star else 2)
        seen.add(fam)
        if name in ("FedAvg", "FedAvg-Aug", "FedAvg-FT", "FedETF-FT", "Ditto", "FedRep") or star:
            ax.annotate("FedGRC" if star else name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
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
# after it (differences in points, mean over the seeds ± interval): FedETF → FedETF-FT (the
# backbone and the classifier are fine-tuned), a statistical head → the same head fine-tuned on
# the client's own features (FedCGS on the FedAvg backbone, the backbone frozen: our stand-in for
# the paper's pFedGM, which is not implemented here), and the shared MMS head → SASP (only the
# class means change).

# %%
PAIRS = [("FedETF", "FedETF-FT"), ("FedAvg + FedCGS", "FedAvg + FedCGS + FT"), ("CGRL + MMS", FEDGRC)]
SHOW4 = ["local", "global", "unseen", "F@25"]
rows4 = []
for s_i, s in enumerate(SEEDS):
    for a in P.alphas:
        for before, after in PAIRS:
            for m in SHOW4:
                d = v(a, after, m)[s_i] - v(a, before, m)[s_i]
                rows4.append({"seed": s, "alpha": a, "before → after": f"{before} → {after}", "column": f"Δ {m}", "value": d})
d4 = pd.DataFrame(rows4).dropna(subset=["value"])
d4 = d4[d4.groupby(["alpha", "before → after", "column"])["seed"].transform("count") == len(SEEDS)]
table4 = seed_table(d4, ["alpha", "before → after"], "column", "value")
table4[[c for c in (f"Δ {m}" for m in SHOW4) if c in table4.columns]]

# %% tags=["remove-cell"]
for pos, a in POS.items():
    for (before, after), tag in zip(PAIRS, ("etf", "head", "sasp")):
        for m in ("local", "global", "F@25"):
            glue(f"fge_t4_{tag}_{key(m)}_{pos}", iv_text(v(a, after, m) - v(a, before, m)), display=False)

# %% [markdown]
# At $\alpha =$ {glue:text}`fge_alpha_lo`, fine-tuning FedETF changes local accuracy by
# {glue:text}`fge_t4_etf_local_lo` points, global accuracy by {glue:text}`fge_t4_etf_global_lo`
# and F@25 by {glue:text}`fge_t4_etf_F25_lo`; fine-tuning the FedCGS head changes them by
# {glue:text}`fge_t4_head_local_lo`, {glue:text}`fge_t4_head_global_lo` and
# {glue:text}`fge_t4_head_F25_lo`; SASP by {glue:text}`fge_t4_sasp_local_lo`,
# {glue:text}`fge_t4_sasp_global_lo` and {glue:text}`fge_t4_sasp_F25_lo`. The paper's pattern is
# that fine-tuning buys local accuracy with global accuracy while SASP buys local accuracy at
# almost no global cost; the claims table decides each part. SASP cannot hurt a locally unseen
# class's *mean*: its mean stays the shared one (Eq. (32)), so unseen accuracy moves only through
# the other classes' adapted means.
#
# ## Table IX: backbone × head
#
# The baseline combination is the augmentation-matched backbone $B_0$ = FedAvg-Aug (our stand-in
# for the paper's FedYoYo) with the baseline head $H_0$ of highest global accuracy on the
# *validation* images on it, chosen per seed; FedGRC's parts are the CGRL backbone $B_1$ and
# MMS + SASP ($H_1$). With $F(B, H)$ the F@25 (or global accuracy) of a pairing, the **excess
# gain** is
#
# $$ I = \big[F(B_1,H_1) - F(B_0,H_0)\big] - \big[F(B_1,H_0) - F(B_0,H_0)\big] - \big[F(B_0,H_1) - F(B_0,H_0)\big], $$
#
# positive when the two replacements help more together than the sum of their separate effects.

# %%
h0 = {}
for (s, a), g in val_table[val_table["backbone"] == "FedAvg-Aug"].groupby(["seed", "alpha"]):
    h0[(s, a)] = g.set_index("head")["validation global (%)"].idxmax()
rows9 = []
for s_i, s in enumerate(SEEDS):
    for a in P.alphas:
        for metric in ("F@25", "global"):
            f = {(b, hk): v(a, f"{b} + {hh}", metric)[s_i]
                 for b in ("FedAvg-Aug", "CGRL") for hk, hh in (("H0", h0[(s, a)]), ("H1", "MMS + SASP"))}
            i_gain = (f[("CGRL", "H1")] - f[("FedAvg-Aug", "H0")]) - (f[("CGRL", "H0")] - f[("FedAvg-Aug", "H0")]) \
                - (f[("FedAvg-Aug", "H1")] - f[("FedAvg-Aug", "H0")])
            for col, val in (("B0 + H0", f[("FedAvg-Aug", "H0")]), ("B1 + H0", f[("CGRL", "H0")]),
                             ("B0 + H1", f[("FedAvg-Aug", "H1")]), ("B1 + H1 (FedGRC)", f[("CGRL", "H1")]),
                             ("excess gain I", i_gain)):
                rows9.append({"seed": s, "alpha": a, "metric": metric, "column": col, "value": val})
tidy9 = pd.DataFrame(rows9)
T9 = tidy9.set_index(["alpha", "metric", "column", "seed"])["value"].sort_index()


def v9(a, metric, col):
    return T9.loc[(a, metric, col)].reindex(SEEDS).to_numpy(dtype=float)


table9 = seed_table(tidy9.dropna(subset=["value"]), ["alpha", "metric"], "column", "value", digits=2)
h0_choice = pd.Series(h0).rename_axis(["seed", "alpha"]).unstack("alpha")
display(table9[["B0 + H0", "B1 + H0", "B0 + H1", "B1 + H1 (FedGRC)", "excess gain I"]])
display(h0_choice.rename_axis(columns="H0 chosen on validation, α"))

# %% tags=["remove-cell"]
for pos, a in POS.items():
    glue(f"fge_I_F25_{pos}", iv_text(v9(a, "F@25", "excess gain I"), 2), display=False)
    glue(f"fge_I_global_{pos}", iv_text(v9(a, "global", "excess gain I"), 2), display=False)
glue("fge_h0_names", ", ".join(sorted(set(h0.values()))), display=False)

# %% [markdown]
# The excess gain in F@25 is {glue:text}`fge_I_F25_lo` points at $\alpha =$
# {glue:text}`fge_alpha_lo` and {glue:text}`fge_I_F25_hi` at $\alpha =$ {glue:text}`fge_alpha_hi`;
# in global accuracy it is {glue:text}`fge_I_global_lo` and {glue:text}`fge_I_global_hi`. The
# validation set chose $H_0$ among: {glue:text}`fge_h0_names`. F@25 averages only the weakest
# quarter of the clients, so its intervals are wider than those of the means over all clients.

# %% [markdown]
# ## Sensitivity to $m_0$ and $\gamma$
#
# Both parameters act only on the head, so we freeze the CGRL backbone of every seed at
# $\alpha =$ {glue:text}`fge_alpha_lo`, extract each client's features once
# ({class}`fedlib.deployment.FrozenFeatures`), and refit: SASP for every $m_0$ (0 uses
# the raw local means of the observed classes, $\infty$ the shared head), and MMS + SASP for every
# $\gamma$. Each head is evaluated by the same protocol; the bands are the 95 % intervals over
# the seeds.

# %%
SENS = ("local", "global", "F@25")
sens_rows = []
for s in SEEDS:
    frozen = frozen_lo[s]  # the CGRL backbone's features, extracted once in the training cell
    mms = MMS(gamma=P.gamma).fit(frozen.moments, frozen.layer_dims)
    for m in P.m0_grid:
        summ = frozen.summary([SASP(m0=m).fit(mms, mom) for mom in frozen.client_moments])
        sens_rows += [{"seed": s, "grid": "m0", "x": m, "curve": k, "value": 100 * summ[k]} for k in SENS]
    for g in P.gamma_grid:
        mg = MMS(gamma=g).fit(frozen.moments, frozen.layer_dims)
        shared = frozen.summary([mg] * len(frozen.client_moments))
        pers = frozen.summary([SASP(m0=P.m0).fit(mg, mom) for mom in frozen.client_moments])
        sens_rows += [{"seed": s, "grid": "gamma", "x": g, "curve": "MMS global", "value": 100 * shared["global"]},
                      {"seed": s, "grid": "gamma", "x": g, "curve": "MMS + SASP local", "value": 100 * pers["local"]},
                      {"seed": s, "grid": "gamma", "x": g, "curve": "MMS + SASP global", "value": 100 * pers["global"]}]
sens = pd.DataFrame(sens_rows)


def curve(grid, name):
    """Mean and half-width over the seeds along the grid."""
    sub = sens[(sens["grid"] == grid) & (sens["curve"] == name)]
    out = [mean_half(sub[sub["x"] == x]["value"]) for x in (P.m0_grid if grid == "m0" else P.gamma_grid)]
    return np.array([o[0] for o in out]), np.array([o[1] for o in out])


fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
xm = [m if math.isfinite(m) else 10 * max(v_ for v_ in P.m0_grid if math.isfinite(v_)) for m in P.m0_grid]
xm = [max(v_, 0.1) for v_ in xm]
for col in SENS:
    mu, hw = curve("m0", col)
    ax1.plot(xm, mu, marker="o", label=col)
    ax1.fill_between(xm, mu - hw, mu + hw, alpha=0.2)
ax1.set_xscale("log")
ax1.set_xticks(xm, [("∞" if not math.isfinite(m) else f"{m:g}") for m in P.m0_grid], fontsize=8)
ax1.set_xlabel("$m_0$ (left: 0, right: ∞ = shared head)")
ax1.set_ylabel("accuracy (%)")
ax1.set_title(f"SASP, CGRL backbone, α = {a_lo}")
ax1.legend()
for col in ("MMS global", "MMS + SASP local", "MMS + SASP global"):
    mu, hw = curve("gamma", col)
    ax2.plot(P.gamma_grid, mu, marker="o", label=col)
    ax2.fill_between(P.gamma_grid, mu - hw, mu + hw, alpha=0.2)
ax2.set_xscale("log")
ax2.set_xlabel("$\\gamma$")
ax2.set_title(f"ridge, m0 = {P.m0:g}")
ax2.legend()
fig.tight_layout()
plt.show()
seed_table(sens[sens["grid"] == "m0"], "x", "curve", "value").rename_axis("m0")

# %% tags=["remove-cell"]
m_fin = [m for m in P.m0_grid if math.isfinite(m)]
sub_m0 = sens[sens["grid"] == "m0"]
glue("fge_m0_min", float(min(m_fin)), display=False)
for k, tag in (("local", "local"), ("global", "global")):
    at_min = sub_m0[(sub_m0["x"] == min(m_fin)) & (sub_m0["curve"] == k)]["value"].to_numpy()
    at_inf = sub_m0[(sub_m0["x"] == P.m0_grid[-1]) & (sub_m0["curve"] == k)]["value"].to_numpy()
    glue(f"fge_m0_{tag}_0", iv_text(at_min), display=False)
    glue(f"fge_m0_{tag}_inf", iv_text(at_inf), display=False)
    glue(f"fge_m0_{tag}_change", iv_text(at_inf - at_min), display=False)
gmu, _ = curve("gamma", "MMS + SASP global")
glue("fge_gamma_best", float(P.gamma_grid[int(np.argmax(gmu))]), display=False)
glue("fge_gamma_range", float(gmu.max() - gmu.min()), display=False)

# %% [markdown]
# From $m_0 =$ {glue:text}`fge_m0_min:g` to the shared head ($m_0 = \infty$), mean local accuracy
# goes from {glue:text}`fge_m0_local_0` % to {glue:text}`fge_m0_local_inf` % (a paired change of
# {glue:text}`fge_m0_local_change` points) and global accuracy from {glue:text}`fge_m0_global_0` %
# to {glue:text}`fge_m0_global_inf` % ({glue:text}`fge_m0_global_change`). Eq. (35) predicts a
# trade-off: a smaller $m_0$ moves each observed class's mean toward the client's own samples,
# which should fit the local test split and cost all-class recognition. That trade-off needs
# client-specific shifts of the class-conditional features; a label-skewed MNIST partition has
# none by construction (every client draws a class's images from the same distribution), so
# whether local accuracy falls as $m_0$ grows is exactly what the intervals above test.
# Across the $\gamma$ grid, the mean global accuracy of MMS + SASP varies by
# {glue:text}`fge_gamma_range:.1f` points, highest at $\gamma =$ {glue:text}`fge_gamma_best:g`
# (a description of the test set, not a selection: $\gamma$ stays at its default).
#
# ## What it costs
#
# Every byte goes through the ledger. Per client, the terminal statistics round uploads counts,
# sums and Gram matrices of the selected features, $C(1 + d + d^2)$ numbers: with the multilayer
# features that is more than a model update of the small CNN, once. The CGRL reference arrays
# ride along with every broadcast and update. Seconds are medians per round, averaged over seeds.

# %%
cost_rows = []
for a in P.alphas:
    for name in ("FedAvg", "FedAvg-Aug", "CGRL"):
        led = ledgers_train[(seed, a, name)]
        per_round = led.groupby("round")["bytes"].sum().mean() / P.n_clients
        cost_rows.append({"alpha": a, "what": f"{name}: one training round", "KiB per client": per_round / 1024,
                          "seconds per round (median)": float(np.mean([round_seconds[(s, a, name)] for s in SEEDS]))})
    for kind in ("penultimate", "multilayer"):
        led = ledgers[(seed, a, "CGRL", kind)].to_frame()
        last = led[led["round"] == led["round"].max()]
        cost_rows.append({"alpha": a, "what": f"terminal statistics ({kind})", "KiB per client": last["bytes"].sum() / P.n_clients / 1024,
                          "seconds per round (median)": math.nan})
costs = pd.DataFrame(cost_rows).set_index(["alpha", "what"])
costs.round(2)

# %% tags=["remove-cell"]
c_lo = costs.loc[a_lo]
glue("fge_round_ratio", float(c_lo.loc["CGRL: one training round", "seconds per round (median)"]
                             / c_lo.loc["FedAvg: one training round", "seconds per round (median)"]), display=False)
glue("fge_aug_round_ratio", float(c_lo.loc["FedAvg-Aug: one training round", "seconds per round (median)"]
                                 / c_lo.loc["FedAvg: one training round", "seconds per round (median)"]), display=False)
glue("fge_bytes_ratio", float(c_lo.loc["CGRL: one training round", "KiB per client"]
                             / c_lo.loc["FedAvg: one training round", "KiB per client"]), display=False)
glue("fge_stats_kib", float(c_lo.loc["terminal statistics (multilayer)", "KiB per client"]), display=False)

# %% [markdown]
# A CGRL round took {glue:text}`fge_round_ratio:.2f` times as long as a FedAvg round here (two
# views per sample, plus the post-update direction pass; `tests/bench_fedgrc.py` measures it
# side by side), a FedAvg-Aug round {glue:text}`fge_aug_round_ratio:.2f` times, and a CGRL round
# moved {glue:text}`fge_bytes_ratio:.3f` times the bytes of a FedAvg round. The multilayer
# statistics cost {glue:text}`fge_stats_kib:.0f` KiB per client, once.
#
# ## Claims
#
# The claims declared at the top of the chapter, decided on the numbers above by their rules
# ({ref}`reading-claims` explains how to read the table). "Ours" is the mean paired difference
# over the seeds with its 95 % interval.

# %%
def mean_heads(a, b):
    return np.mean([v(a, f"{b} + {h}", "global") for h in HEADS], axis=0)


def ours_base(k):
    """(ours, baseline), one value per seed, for the claim with key k."""
    for a in P.alphas:
        for m in ("global", "unseen", "rare", "F@25"):
            if k == f"lead-{m}-{a}":
                return v(a, FEDGRC, m), strongest(a, m)
            if k == f"size-{m}-{a}":
                return v(a, FEDGRC, m) - SIZES[m], strongest(a, m)
        if k in (f"local-lead-{a}", f"local-trail-{a}"):
            return v(a, FEDGRC, "local"), strongest(a, "local")
        if k == f"heads-gain-{a}":
            return mean_heads(a, "FedAvg-Aug") - v(a, "FedAvg-Aug", "global"), mean_heads(a, "FedAvg") - v(a, "FedAvg", "global")
        if k == f"heads-level-{a}":
            return mean_heads(a, "FedAvg-Aug"), mean_heads(a, "FedAvg")
        for m in ("local", "F25", "global"):
            if k == f"sasp-{m}-{a}":
                mm = m.replace("F25", "F@25")
                return v(a, FEDGRC, mm), v(a, "CGRL + MMS", mm)
        if k == f"t9-vs-B1H0-{a}":
            return v9(a, "F@25", "B1 + H1 (FedGRC)"), v9(a, "F@25", "B1 + H0")
        if k == f"t9-vs-B0H1-{a}":
            return v9(a, "F@25", "B1 + H1 (FedGRC)"), v9(a, "F@25", "B0 + H1")
        if k == f"excess-F25-{a}":
            return v9(a, "F@25", "excess gain I"), np.zeros(len(SEEDS))
        if k == f"excess-global-{a}":
            return v9(a, "global", "excess gain I"), np.zeros(len(SEEDS))
    for name in SHIFT_METHODS:
        for m in ("local", "global"):
            if k == f"shift-{m}-{name}":
                return v(a_lo, name, m), v(a_hi, name, m)
    for before, after, _ in FT_PAIRS.values():
        for m in ("local", "global", "F@25"):
            if k == f"ft-{m}-{before}":
                return (np.mean([v(a, after, m) for a in P.alphas], axis=0),
                        np.mean([v(a, before, m) for a in P.alphas], axis=0))
    raise KeyError(k)


def paired(ours, base):
    """The seeds where both sides are defined (an undefined metric, e.g. no rare class, drops a seed)."""
    ours, base = np.asarray(ours, dtype=float), np.asarray(base, dtype=float)
    ok = ~(np.isnan(ours) | np.isnan(base))
    return (ours[ok], base[ok]) if ok.any() else (np.zeros(1), np.zeros(1))


results = [evaluate(c, *paired(*ours_base(c.key))) for c in claims]
counts = tally(results)
glue("fge_n_holds", counts["holds"], display=False)
glue("fge_n_not", counts["does not hold"], display=False)
glue("fge_n_inconclusive", counts["inconclusive at this scale"], display=False)
glue("fge_total_seconds", time.perf_counter() - t_start, display=False)
show(results)

# %% [markdown]
# Of {glue:text}`fge_n_claims` rows, {glue:text}`fge_n_holds` hold here,
# {glue:text}`fge_n_not` do not hold and {glue:text}`fge_n_inconclusive` are inconclusive at this
# scale. **Why a verdict can differ from the paper's.** MNIST digits are nearly separable by the
# small CNN after a few rounds, so every statistical head reaches a high global accuracy on every
# backbone and the differences the paper reports on CIFAR-100 and remote-sensing scenes with
# ResNet-18 have little room here; the rows with a size (the paper's smallest gain) ask for more
# than a direction. SASP's premise is that a client's classes *look* different from the
# federation's (sensors, regions, styles); a Dirichlet label skew of MNIST changes only how many
# images of each class a client holds, not what they look like (the $m_0$ curve above). Our
# training budget ({glue:text}`fge_rounds` rounds) is short for a method whose auxiliary losses
# are warmed up over {glue:text}`fge_warmup` rounds, the hyper-parameters are our guesses
# (Table X is missing), and {glue:text}`fge_n_seeds` seeds give wide intervals: an inconclusive
# row is an honest "our scale cannot tell", not a failure. The whole page took
# {glue:text}`fge_total_seconds:.0f` s to compute.
#
# ## Exercises
#
# 1. **Where does the backbone matter?** Set `lambda_dir=0` and then `lambda_rad=0` (one CGRL
#    term at a time) and re-run. Which of the two moves Table IX's $B_1$ column, and does the
#    excess gain $I$ keep its sign? With both at zero, CGRL trains with FedAvg-Aug's loss: how
#    close are the two rows then? Then try `rounds=30`: does CGRL's advantage grow with the budget, as its
#    warm-up suggests?
# 2. **Give SASP something to adapt to.** SASP pays off when a client's images of a class look
#    different from the federation's. Make them: in the training cell, right after
#    `make_federation(...)` builds a federation (before `split_validation`), give every
#    odd-numbered client quarter-turn-rotated images (training and local test) with
#    `rot = lambda d: ArrayDataset(torch.rot90(d.x, 1, (2, 3)), d.y, d.n_classes, d.name)` and
#    `Federation([ClientData(rot(c.train), rot(c.test)) if k % 2 else c for k, c in enumerate(f.clients)], f.global_test, f.n_classes, f.description)`
#    (from `fedlib.data` and `fedlib.federation`), then re-run. Does local accuracy now fall as
#    $m_0$ grows (the `m0_grid` figure), as Eq. (35) predicts, and where is the best compromise
#    with F@25?
# 3. **Is the multilayer part worth it?** Set `layers=["penultimate"]` (MMS on the final layer
#    only) and compare the rows "CGRL + MMS" and "FedGRC" with the default run. How large are the
#    statistics messages in the cost table in each case?
