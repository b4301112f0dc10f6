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
# (chapter-setting)=
# # The federated setting and how we evaluate it
#
# Every chapter of this book trains on the same kind of federation and reads its results through
# the same evaluation protocol. This chapter builds both once, in the open:
#
# 1. **the federation**: a pooled data set, a shared class-balanced global test set held out
#    first, a seeded label-skew partition of the rest over the clients, and a 75/25 split of every
#    client's data into a training split and a local test split;
# 2. **the protocol**: each client's *deployed* predictor is evaluated, unchanged, on its local
#    test split and on the global test set, and summarized per ability (local, global, unseen,
#    rare) and over clients (mean, worst, bottom 20 %, the @25 floors) as in FedGRC
#    {cite:p}`fedgrc` and HDC-FL {cite:p}`hdcfl`;
# 3. **sanity anchors**: the small CNN trained centrally, and FedAvg {cite:p}`fedavg` on an IID
#    partition, so that no later chapter compares against a weak baseline;
# 4. **a first experiment**: FedAvg against FedAvg with local fine-tuning (FedAvg-FT) under two
#    degrees of label skew, the pattern that motivates the personalization papers: fine-tuning
#    raises local accuracy, and what it does to everything else is measured below.
#
# Every number in the prose of this page is computed when the page is built (glued from the
# executed notebook); the parameters cell below says which profile produced them.

# %% tags=["parameters"]
profile = "book"  # "smoke" (seconds), "book" (the default, minutes on 2 cores), "paper" (CIFAR-10, ResNet-18)
seed = 0  # the run seed; every random stream is derived from it
n_clients = None  # None: the profile's value
alphas = None  # Dirichlet concentrations of the label-skew experiment, e.g. [0.3, 0.1]
rounds = None  # communication rounds
lr = None  # learning rate of local training (SGD with momentum 0.9)
local_epochs = None  # local epochs per round
finetune_epochs = None  # FedAvg-FT: local epochs of fine-tuning before deployment
rare_ratio = None  # a class is locally rare below rare_ratio times the uniform share 1/C
cifar_root = None  # paper profile: folder holding cifar-10-batches-py/
results_dir = None  # where tidy results are saved (None: not saved)

# %%
import functools
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from myst_nb import glue

from fedlib.algorithms import FedAvg, FedAvgFT
from fedlib.chapter import load_data, resolve
from fedlib.data import plot_partition
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig, evaluate_deployment, per_client_table, run_federated
from fedlib.metrics import RARE_RATIO, Confusion, client_abilities, protocol_summary, summarize
from fedlib.models import build_model
from fedlib.rng import INIT, derive_seed, isolated_torch_rng, torch_generator
from fedlib.training import TrainConfig, local_train, predict

PROFILES = {
    "smoke": dict(dataset="mnist5k", n_samples=800, n_clients=4, alphas=[0.3], global_test_per_class=20,
                  model="cnn", rounds=2, local_epochs=1, finetune_epochs=1, central_epochs=1, central_lr=0.01, lr=0.01, finetune_lr=0.01,
                  rare_ratio=RARE_RATIO),
    "book": dict(dataset="mnist5k", n_samples=None, n_clients=20, alphas=[0.3, 0.1], global_test_per_class=100,
                 model="cnn", rounds=20, local_epochs=1, finetune_epochs=5, central_epochs=10, central_lr=0.01, lr=0.01, finetune_lr=0.01,
                 rare_ratio=RARE_RATIO),
    "paper": dict(dataset="cifar10", n_samples=None, n_clients=20, alphas=[0.3, 0.1], global_test_per_class=600,
                  model="resnet18", rounds=100, local_epochs=5, finetune_epochs=5, central_epochs=100, central_lr=0.01, lr=0.01, finetune_lr=0.01,
                  rare_ratio=RARE_RATIO),
}

# %%
P = resolve(PROFILES, profile, n_clients=n_clients, alphas=alphas, rounds=rounds, lr=lr, local_epochs=local_epochs,
            finetune_epochs=finetune_epochs, rare_ratio=rare_ratio)
data = load_data(P.dataset, n_samples=P.n_samples, seed=seed, cifar_root=cifar_root)  # smoke: a seeded subset
in_channels, input_size = data.x.shape[1], data.x.shape[-1]
model_fn = functools.partial(build_model, P.model, in_channels=in_channels, n_classes=data.n_classes,
                             input_size=input_size)
train_cfg = TrainConfig(epochs=P.local_epochs, batch_size=32, lr=P.lr, momentum=0.9)
finetune_cfg = TrainConfig(epochs=P.finetune_epochs, batch_size=32, lr=P.finetune_lr, momentum=0.9)
print(f"profile {P.profile}: {data.name}, {len(data)} samples, {P.n_clients} clients, "
      f"alphas {P.alphas}, {P.rounds} rounds, model {P.model}")

# %% [markdown]
# ## The federation
#
# We first hold out a class-balanced **global test set**, shared by every client and disjoint from
# all client data; the rest is split over the clients by a Dirichlet label-skew partition
# {cite:p}`dirichlet`: for every class, client shares are drawn from
# $\mathrm{Dir}(\alpha\mathbf{1})$. Small $\alpha$ concentrates each class on few clients. Each
# client's data is then split 75/25 into a training split and a **local test split**, keeping at
# least one training sample of every class the client observes. The heat maps show the training
# counts per client and class for the IID partition and for each $\alpha$.

# %%
federations = {"iid": make_federation(data, n_clients=P.n_clients, partition="iid",
                                      global_test_per_class=P.global_test_per_class, seed=seed)}
for a in P.alphas:
    federations[f"dir{a}"] = make_federation(data, n_clients=P.n_clients, partition="dirichlet", alpha=a,
                                             min_size=10, global_test_per_class=P.global_test_per_class, seed=seed)

fig, axes = plt.subplots(1, len(federations), figsize=(4.2 * len(federations), 4.2), squeeze=False)
for ax, (name, fed) in zip(axes[0], federations.items()):
    plot_partition(fed.train_counts(), ax=ax, title=name)
fig.tight_layout()
plt.show()

rows = []
for name, fed in federations.items():
    s = fed.summary()
    counts = fed.train_counts()
    n = counts.sum(axis=1, keepdims=True)
    rare = ((counts > 0) & (counts * data.n_classes < P.rare_ratio * n)).sum(axis=1)
    rows.append({"partition": name, "train samples": int(s["n_train"].sum()),
                 "local test samples": int(s["n_local_test"].sum()),
                 "global test samples": len(fed.global_test),
                 "classes seen (mean)": s["classes_seen"].mean(),
                 "unseen classes (mean)": (data.n_classes - s["classes_seen"]).mean(),
                 "rare classes (mean)": rare.mean(),
                 "largest class share (mean)": s["largest_class_share"].mean()})
partition_table = pd.DataFrame(rows).set_index("partition")
partition_table.round(2)

# %% tags=["remove-cell"]
last = f"dir{P.alphas[-1]}"
glue("n_clients", P.n_clients, display=False)
glue("n_global_test", len(federations["iid"].global_test), display=False)
glue("alpha_last", P.alphas[-1], display=False)
glue("seen_last", float(partition_table.loc[last, "classes seen (mean)"]), display=False)
glue("unseen_last", float(partition_table.loc[last, "unseen classes (mean)"]), display=False)
glue("seen_iid", float(partition_table.loc["iid", "classes seen (mean)"]), display=False)

# %% [markdown]
# With {glue:text}`n_clients` clients and a global test set of {glue:text}`n_global_test`
# samples, a client of the IID partition sees {glue:text}`seen_iid:.1f` classes on average; at
# $\alpha =$ {glue:text}`alpha_last` it sees {glue:text}`seen_last:.1f`, so on average
# {glue:text}`unseen_last:.1f` classes are **unseen** by a client during training. Its deployed
# model must still recognize them: they are federation-known classes, and the global test set
# weighs them like every other class.
#
# ## The evaluation protocol
#
# Client $k$ deploys one predictor $f^{(k)}$ over all $C$ classes. With its per-class training
# counts $n^{(k)}_c$ ($n^{(k)} = \sum_c n^{(k)}_c$) and the per-class recalls $r^{(k)}_c$ of
# $f^{(k)}$ on the global test set, the protocol of {mod}`fedlib.metrics` reports:
#
# | ability | definition |
# |---|---|
# | local accuracy | sample accuracy of $f^{(k)}$ on client $k$'s local test split |
# | global accuracy | $\frac{1}{C}\sum_{c=1}^{C} r^{(k)}_c$ (class-balanced, every class counts the same) |
# | unseen accuracy | $\frac{1}{\lvert\mathcal U^{(k)}\rvert}\sum_{c\in\mathcal U^{(k)}} r^{(k)}_c$, $\;\mathcal U^{(k)} = \{c : n^{(k)}_c = 0\}$ |
# | rare accuracy | $\frac{1}{\lvert\mathcal R^{(k)}\rvert}\sum_{c\in\mathcal R^{(k)}} r^{(k)}_c$, $\;\mathcal R^{(k)} = \{c : 0 < n^{(k)}_c < \rho\, n^{(k)} / C\}$ |
# | designated-class F1 | $F1_c = 2\,TP_c / (2\,TP_c + FP_c + FN_c)$ on the global test set |
#
# **What "rare" means.** The FedGRC paper's text does not define a locally rare class, so we
# choose: a class is rare for a client when the client has seen it, but with less than $\rho$
# times the uniform share $1/C$ of its training data. The default is
# $\rho =$ {glue:text}`rho` (the parameter `rare_ratio`); with ten classes a class is rare below
# {glue:text}`rare_pct:.0f` % of the client's data.
#
# Over the clients where an ability is defined (a client without unseen classes has no unseen
# accuracy: it is *n/a*, never 0), we report the mean, the worst client, the **bottom-20 %** mean
# (the lowest $\lceil 0.2m\rceil$ clients: 4 of 20, as in HDC-FL), the **fairness gap**
# (best − worst), and the **@25 floors**: the mean of the lowest $\lceil m/4\rceil$ clients.
# L@25, U@25 and R@25 are the floors of local, unseen and rare accuracy. F@25 first takes each
# client's weakest assessed ability $F^{(k)} = \min\{A^{(k)}_{\text{local}}, A^{(k)}_{\text{unseen}}, A^{(k)}_{\text{rare}}\}$
# (over those defined) and then the floor of $F^{(k)}$, so a client that is weak on unseen classes
# and one that is weak on rare classes both count (FedGRC, Appendix B).
#
# A tiny worked example, computed by the library: three classes, a client that trained on
# $n = (10, 1, 0)$ (class 1 is rare, class 2 unseen) and the confusion matrices of its predictor.

# %%
glue("rho", P.rare_ratio, display=False)
glue("rare_pct", 100 * P.rare_ratio / data.n_classes, display=False)
toy_global = Confusion(np.array([[4, 0, 0], [1, 2, 1], [2, 1, 1]]))
toy_local = Confusion(np.array([[5, 0, 0], [1, 1, 0], [0, 0, 0]]))
toy = client_abilities(toy_local, toy_global, np.array([10, 1, 0]), rare_ratio=0.5)
pd.Series(toy, name="worked example").to_frame().T.round(3)

# %% [markdown]
# Local accuracy is $6/7$ (six of seven local test samples right), global accuracy the mean of
# the recalls $(4/4, 2/4, 1/4)$, unseen accuracy the recall of class 2 and rare accuracy the
# recall of class 1. The unit tests in `tests/test_metrics.py` check these and many more
# hand-computed cases, and the merge of confusion matrices against pooled evaluation.
#
# ## Sanity anchors
#
# Before comparing federated methods we check that the model and the loop are not the weak link:
# the small CNN trained **centrally** on the pooled training splits of all clients, and **FedAvg
# on the IID partition** with full participation, both evaluated on the global test set.
#
# The small CNN (two 3×3 convolutions with 32 and 64 channels, a 128-dimensional penultimate
# layer, {mod}`fedlib.models`) uses **GroupNorm** {cite:p}`groupnorm`. This is a deliberate
# choice: GroupNorm normalizes each sample on its own and keeps no running statistics, so there
# is nothing in the model that averaging across clients with different label distributions could
# corrupt, as it can BatchNorm's running means and variances {cite:p}`hsieh2020`. ResNet-18 and
# MobileNetV2 (the `paper` profile) use GroupNorm too; `norm="batch"` keeps BatchNorm, whose
# running statistics FedAvg then averages like any other array.

# %%
fed = federations["iid"]
central_x = torch.cat([c.train.x for c in fed.clients])
central_y = torch.cat([c.train.y for c in fed.clients])
with isolated_torch_rng(derive_seed(seed, INIT)):
    central = model_fn()
t0 = time.perf_counter()
local_train(central, central_x, central_y, TrainConfig(epochs=P.central_epochs, batch_size=32, lr=P.central_lr),
            torch_generator(seed, 0, 0, 7))
central_seconds = time.perf_counter() - t0
central_pred = predict(central, fed.global_test.x).numpy()
central_acc = Confusion.from_predictions(fed.global_test.labels_np, central_pred, data.n_classes).accuracy()

loop_cfg = LoopConfig(rounds=P.rounds, seed=seed, rare_ratio=P.rare_ratio)
t0 = time.perf_counter()
iid_run = run_federated(FedAvg(train=train_cfg), fed, model_fn, loop_cfg)
iid_seconds = time.perf_counter() - t0
iid_global = iid_run.summary()["global"]
anchor = pd.DataFrame({
    "global-test accuracy (%)": [100 * central_acc, 100 * iid_global],
    "passes over the data": [P.central_epochs, P.rounds * P.local_epochs],
    "seconds": [central_seconds, iid_seconds],
}, index=pd.Index(["central SGD", "FedAvg, IID"], name="anchor"))
anchor.round(2)

# %% tags=["remove-cell"]
gap = 100 * (central_acc - iid_global)
glue("central_acc", 100 * central_acc, display=False)
glue("iid_acc", 100 * iid_global, display=False)
glue("anchor_gap", gap, display=False)
glue("central_verdict", "meets" if central_acc >= 0.95 else "misses", display=False)
glue("iid_verdict", "within" if abs(gap) <= 3 else "not within", display=False)
glue("central_epochs", P.central_epochs, display=False)
glue("central_lr", P.central_lr, display=False)

# %% [markdown]
# Trained centrally for {glue:text}`central_epochs` epochs (SGD with momentum 0.9, batch 32,
# learning rate {glue:text}`central_lr`), the CNN reaches
# {glue:text}`central_acc:.1f` % on the global test set, which {glue:text}`central_verdict` the
# 95 % target for this profile. FedAvg on the IID partition reaches {glue:text}`iid_acc:.1f` %,
# {glue:text}`anchor_gap:.1f` points below the central model: {glue:text}`iid_verdict` the 3-point
# tolerance. (At the `smoke` profile both numbers are meaningless by design: it runs for seconds.)
#
# ## FedAvg against FedAvg with local fine-tuning
#
# FedAvg deploys the global model on every client. FedAvg-FT {cite:p}`motley` trains exactly
# the same global model and then, on every client, fine-tunes it on the client's own training
# split before deployment ({glue:text}`ft_epochs` epochs of SGD at learning rate
# {glue:text}`ft_lr`). Every client trains for {glue:text}`local_epochs` local epoch(s) per round
# (SGD, momentum 0.9, batch 32, learning rate {glue:text}`train_lr`) and all clients take part in
# every round, for {glue:text}`rounds` rounds.
# Because only the deployment hook differs, we train once per $\alpha$ and evaluate both
# deployments of the same final global model
# ({func}`fedlib.loop.evaluate_deployment`).

# %%
glue("ft_epochs", P.finetune_epochs, display=False)
glue("ft_lr", P.finetune_lr, display=False)
glue("local_epochs", P.local_epochs, display=False)
glue("train_lr", P.lr, display=False)
glue("rounds", P.rounds, display=False)
runs, per_client, summaries = {}, {}, []
for a in P.alphas:
    fed = federations[f"dir{a}"]
    run = run_federated(FedAvg(train=train_cfg), fed, model_fn, loop_cfg)
    runs[a] = run
    ft_frame = evaluate_deployment(FedAvgFT(train=train_cfg, finetune=finetune_cfg), run, fed, model_fn, loop_cfg)
    for method, wide in (("FedAvg", run.per_client()), ("FedAvg-FT", per_client_table(ft_frame))):
        per_client[(a, method)] = wide
        summaries.append({"alpha": a, "method": method, **protocol_summary(wide)})
    if results_dir is not None:
        run.save(Path(results_dir) / f"fedavg_alpha{a}")
        ft_frame.to_csv(Path(results_dir) / f"fedavg_alpha{a}" / "fedavg_ft_frame.csv", index=False)

summary = pd.DataFrame(summaries).set_index(["alpha", "method"])
cols = ["local", "global", "unseen", "rare", "L@25", "U@25", "R@25", "F@25", "worst_local", "bottom20_local", "gap_local"]
(100 * summary[cols]).round(1)

# %%
fig, axes = plt.subplots(1, len(P.alphas), figsize=(6 * len(P.alphas), 3.6), squeeze=False)
show = ["local", "global", "unseen", "rare", "L@25", "U@25", "R@25", "F@25"]
for ax, a in zip(axes[0], P.alphas):
    s = 100 * summary.loc[a, show]
    xs_ = np.arange(len(show))
    for i, method in enumerate(s.index):
        ax.bar(xs_ + (i - 0.5) * 0.38, s.loc[method].fillna(0).values, width=0.38, label=method)
    ax.set_xticks(xs_, show, rotation=30)
    ax.set_ylim(0, 100)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"Dirichlet α = {a}")
    ax.legend(loc="lower left")
fig.tight_layout()
plt.show()

# %% [markdown]
# Each point below is a client: its local accuracy against its global accuracy, before (FedAvg)
# and after (FedAvg-FT) fine-tuning, joined by a line.

# %%
fig, axes = plt.subplots(1, len(P.alphas), figsize=(5 * len(P.alphas), 4), squeeze=False)
for ax, a in zip(axes[0], P.alphas):
    before, after = per_client[(a, "FedAvg")], per_client[(a, "FedAvg-FT")]
    for k in before.index:
        ax.plot([100 * before.loc[k, "local"], 100 * after.loc[k, "local"]],
                [100 * before.loc[k, "global"], 100 * after.loc[k, "global"]], color="0.8", lw=0.8, zorder=1)
    ax.scatter(100 * before["local"], 100 * before["global"], label="FedAvg", zorder=2)
    ax.scatter(100 * after["local"], 100 * after["global"], label="FedAvg-FT", zorder=2)
    ax.set_xlabel("local accuracy (%)")
    ax.set_ylabel("global accuracy (%)")
    ax.set_title(f"α = {a}")
    ax.legend()
fig.tight_layout()
plt.show()

# %% tags=["remove-cell"]
def delta(a, metric):
    return float(100 * (summary.loc[(a, "FedAvg-FT"), metric] - summary.loc[(a, "FedAvg"), metric]))

def direction(x):
    return "rises" if x > 0.05 else ("falls" if x < -0.05 else "stays level")

a = P.alphas[-1]
for metric, key in (("local", "local"), ("global", "global"), ("unseen", "unseen"), ("rare", "rare"),
                    ("F@25", "f25"), ("L@25", "l25")):
    d = delta(a, metric)
    glue(f"d_{key}", abs(d) if np.isfinite(d) else float("nan"), display=False)
    glue(f"dir_{key}", direction(d) if np.isfinite(d) else "is n/a", display=False)
d_loc, d_glob = delta(a, "local"), delta(a, "global")
if d_loc > 0 and d_glob < 0:
    tradeoff = ("This is the trade-off the personalization chapters start from: a predictor fitted to the "
                "client's own label distribution loses recognition of the classes it rarely or never saw, "
                "and a mean over clients of local accuracy alone would not show it.")
else:
    tradeoff = ("In this run fine-tuning did not trade global for local accuracy, so the pattern reported "
                "by the personalization papers does not appear at these parameters.")
glue("tradeoff", tradeoff, display=False)
glue("alpha_ft", a, display=False)
glue("ft_local_before", float(100 * summary.loc[(a, "FedAvg"), "local"]), display=False)
glue("ft_local_after", float(100 * summary.loc[(a, "FedAvg-FT"), "local"]), display=False)
glue("ft_global_before", float(100 * summary.loc[(a, "FedAvg"), "global"]), display=False)
glue("ft_global_after", float(100 * summary.loc[(a, "FedAvg-FT"), "global"]), display=False)

# %% [markdown]
# At $\alpha =$ {glue:text}`alpha_ft`, fine-tuning moves mean local accuracy from
# {glue:text}`ft_local_before:.1f` % to {glue:text}`ft_local_after:.1f` % (it
# {glue:text}`dir_local` by {glue:text}`d_local:.1f` points), while mean global accuracy goes from
# {glue:text}`ft_global_before:.1f` % to {glue:text}`ft_global_after:.1f` % (it
# {glue:text}`dir_global` by {glue:text}`d_global:.1f` points). Unseen accuracy
# {glue:text}`dir_unseen` by {glue:text}`d_unseen:.1f` points and rare accuracy
# {glue:text}`dir_rare` by {glue:text}`d_rare:.1f`; the client floor F@25
# {glue:text}`dir_f25` by {glue:text}`d_f25:.1f` points and L@25 {glue:text}`dir_l25` by
# {glue:text}`d_l25:.1f`. {glue:text}`tradeoff`
#
# ## Communication
#
# Every message passes through the ledger ({class}`fedlib.messages.Ledger`). FedAvg sends the
# whole model down and up once per sampled client and round; evaluation downloads are recorded
# under their own kind (`eval:model`).

# %%
ledger = runs[P.alphas[-1]].ledger.to_frame()
comm = (ledger.groupby(["direction", "kind"])["bytes"].sum() / 2**20).rename("MiB").to_frame()
per_round = ledger[ledger["kind"] == "model"].groupby("round")["bytes"].sum().mean() / 2**20
glue("mib_per_round", float(per_round), display=False)
comm.round(2)

# %% [markdown]
# On average {glue:text}`mib_per_round:.2f` MiB go down per training round. Later chapters
# compare methods by these bytes relative to FedAvg.
#
# ## Re-running this chapter
#
# The book was built with the parameters printed at the top. To re-run the chapter with your own,
# for example another seed, one $\alpha$ and 10 clients:
#
# ```bash
# .venv/bin/python book/build.py --only setting -p seed=1 -p "alphas=[0.5]" -p n_clients=10 --no-render
# ```
#
# or with papermill directly on the paired notebook:
#
# ```bash
# .venv/bin/jupytext --to ipynb notebooks/setting.py -o /tmp/setting.ipynb
# .venv/bin/papermill /tmp/setting.ipynb /tmp/setting-seed1.ipynb -p seed 1 -p alphas "[0.5]" --cwd notebooks
# ```
#
# ## Exercises
#
# 1. **How much skew breaks the global model?** Re-run with `alphas=[1.0, 0.3, 0.1, 0.03]`. At which
#    $\alpha$ does FedAvg's global accuracy fall more than 5 points below the IID anchor, and how
#    does the mean number of unseen classes per client grow?
# 2. **What counts as rare?** Change `rare_ratio` to 0.25 and to 1.0. Which clients gain or lose
#    rare classes, and how do rare accuracy and F@25 respond? Argue which definition the FedGRC
#    paper's claims would be most sensitive to.
# 3. **A learning rate that drifts.** Re-run with `lr=0.05` (the default is {glue:text}`train_lr`). Compare the
#    IID anchor and the $\alpha = 0.1$ federation: which one suffers, and why does a larger local
#    step hurt more when each client sees only a few classes (client drift)?
# 4. **How much fine-tuning?** Vary `finetune_epochs` over 1, 5 and 20. Plot local and global
#    accuracy against it: is there a number of epochs that improves local accuracy without
#    lowering the F@25 floor?
