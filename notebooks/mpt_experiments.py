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
# (chapter-mpt-experiments)=
# # MPT: a departed client's rare class, tracked
#
# A client that holds almost every sample of one class leaves the federation for good; the
# backbone keeps training on the others; how long does the federation still recognize that class,
# and can the server keep its prototype aligned from class-level statistics alone? This chapter
# runs MPT {cite:p}`mpt` and its baselines in fedlib's one round loop:
#
# * **FedAvg** {cite:p}`fedavg`: the model's own softmax head;
# * **CCVR** {cite:p}`ccvr`: the head re-trained each round on virtual features drawn from the
#   class Gaussians (per-class covariances from the clients);
# * **iCaRL nearest-mean** {cite:p}`icarl`: the rare prototype re-estimated from the few remaining
#   rare samples;
# * **SDC** {cite:p}`sdc`: the stored prototype moved by the Gaussian-weighted drift of the
#   clients' samples between the previous and the current model (sent as aggregates);
# * **LDC** {cite:p}`ldc`: a bias-free linear old-to-new feature map trained on each client (MSE,
#   Adam, lr 0.001, 20 epochs from the identity as in the reference; mini-batches of 128 here, to
#   save time) and averaged by the server;
# * **frozen** (the departure prototype), **oracle** (the current rare-class *test* mean,
#   unavailable in practice), **MPT-lite** and **MPT**, plus the ablations of the paper's
#   Section V-D (barycentric only, barycentric + stored residual, prediction only, measurement
#   only).
#
# Every prototype method uses the same Mahalanobis nearest-class-mean readout {cite:p}`mensink2013ncm`
# ({class}`fedlib.heads.MahalanobisNCM`) over the same backbone; they differ **only** in the
# server's rare-class prototype. So one training run serves them all: the plug-in
# ({class}`fedlib.algorithms.mpt.MPT`) has the clients send every statistic any method needs,
# the server computes every method's prototype set each round and keeps it, and the evaluation
# reads all of them back ({func}`fedlib.algorithms.mpt.evaluate_history`). SDC and LDC need extra
# client computation (a second embedding under the previous model; LDC also trains a map): it
# runs inside the same rounds as extra message contents. The communication of each method alone
# is measured by short runs that send only that method's payload, through the ledger. The maths
# is derived and checked in {ref}`chapter-mpt-derivations`.

# %% tags=["parameters"]
profile = "book"  # "smoke" (seconds), "book" (the default, minutes on 2 cores), "paper" (CIFAR-10, ResNet-18)
seed = 0  # the first run seed; the table uses seed, seed + 1, ...
n_seeds = None  # seeds of the fraction table
fractions = None  # remaining rare fractions of the table, e.g. [0.01, 0.02, 0.05, 0.1]
rounds = None  # communication rounds
departure_round = None  # the round at whose start the client leaves
local_epochs = None  # local epochs per round
n_clients = None  # clients (client 0 departs)
threads = 1  # torch CPU threads (1 is fastest on a shared 2-core machine)
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

from fedlib.algorithms import MPT, Event
from fedlib.algorithms.mpt import METHOD_PAYLOAD, evaluate_history
from fedlib.chapter import load_data, resolve, verdict
from fedlib.data import plot_partition
from fedlib.federation import make_departure_scenario
from fedlib.loop import LoopConfig, run_federated
from fedlib.models import build_model
from fedlib.stats import ClassMoments
from fedlib.tracking import TrackingConfig, ldc_fit_map, sdc_client_sums
from fedlib.training import TrainConfig, local_train

torch.set_num_threads(threads)
t_start = time.perf_counter()

PROFILES = {
    "smoke": dict(datasets=["mnist5k"], n_samples=500, rare_class=5, n_clients=4, rounds=4, departure_round=3,
                  local_epochs=1, lr=0.05, fig_model="mlp", table_model="mlp", fractions=[0.02, 0.1], n_seeds=1,
                  global_test_per_class=10, ldc_epochs=2, ccvr_steps=10, ccvr_virtual=20),
    "book": dict(datasets=["mnist5k", "uci"], n_samples=2000, rare_class=5, n_clients=10, rounds=20, departure_round=6,
                 local_epochs=1, lr=0.05, fig_model="cnn", table_model="mlp", fractions=[0.01, 0.02, 0.05, 0.1],
                 n_seeds=3, global_test_per_class=40, ldc_epochs=20, ccvr_steps=100, ccvr_virtual=100),
    "paper": dict(datasets=["cifar10"], n_samples=None, rare_class=9, n_clients=10, rounds=100, departure_round=15,
                  local_epochs=5, lr=0.01, fig_model="resnet18", table_model="resnet18",
                  fractions=[0.01, 0.02, 0.05, 0.1], n_seeds=3, global_test_per_class=600, ldc_epochs=20,
                  ccvr_steps=100, ccvr_virtual=100),
}
P = resolve(PROFILES, profile, n_seeds=n_seeds, fractions=fractions, rounds=rounds, departure_round=departure_round,
            local_epochs=local_epochs, n_clients=n_clients)
if not 1 < P.departure_round <= P.rounds:
    raise ValueError(f"departure_round must be in [2, rounds={P.rounds}], got {P.departure_round}")
DEPARTING = 0


DATA = {name: load_data(name, n_samples=P.n_samples, seed=seed, cifar_root=cifar_root) for name in P.datasets}  # seeded subsets
TRACK = TrackingConfig()  # ridge 1e-3 (relative), lambda_Sigma 0.1, affine span, rare-sample noise


def model_fn_for(name, ds):
    return functools.partial(build_model, name, in_channels=ds.x.shape[1], n_classes=ds.n_classes, input_size=ds.x.shape[-1])


def scenario(ds, fraction, run_seed):
    return make_departure_scenario(ds, n_clients=P.n_clients, rare_class=P.rare_class, departing_share=1 - fraction,
                                   departing_client=DEPARTING, global_test_per_class=P.global_test_per_class, seed=run_seed)


def algorithm(payload=None, steps=None):
    train = TrainConfig(epochs=P.local_epochs, steps=steps, batch_size=32, lr=P.lr, momentum=0.9)
    kw = {} if payload is None else {"payload": payload}
    return MPT(train=train, rare_class=P.rare_class, tracking=TRACK, train_rare_on=(DEPARTING,), ldc_epochs=P.ldc_epochs,
               ldc_batch=128, ccvr_steps=P.ccvr_steps, ccvr_virtual=P.ccvr_virtual, seed=seed, **kw)


def loop_config(run_seed, rounds=None):
    return LoopConfig(rounds=rounds or P.rounds, seed=run_seed, events=(Event(P.departure_round, DEPARTING, "leave"),),
                      f1_class=P.rare_class)


print(f"profile {P.profile}: {', '.join(f'{k} ({len(v)} samples)' for k, v in DATA.items())}; {P.n_clients} clients, "
      f"{P.rounds} rounds, departure at round {P.departure_round}, {P.local_epochs} local epoch(s); "
      f"figure model {P.fig_model}, table model {P.table_model}")

# %% [markdown]
# ## The departure scenario
#
# {func}`fedlib.federation.make_departure_scenario` holds out a class-balanced global test set, gives
# client 0 a share $1 - f$ of the rare class and deals the remaining fraction $f$ over the other
# clients; every other class is spread uniformly over all clients (Section V-A, "Scenario").
# Following the paper's design choice (Fig. 7 (c)), the remaining rare samples are kept **out of
# training** and only re-embedded and measured (`MPT(train_rare_on=(0,))`). Client 0 leaves for good
# at the start of the departure round: the loop's `Event(round, 0, "leave")`.

# %%
fig_name = P.datasets[0]
fig_fraction = 0.02 if 0.02 in P.fractions else P.fractions[0]
sc = scenario(DATA[fig_name], fig_fraction, seed)
fig, ax = plt.subplots(figsize=(5, 3.6))
plot_partition(sc.federation.train_counts(), ax=ax, title=f"{fig_name}: training counts (rare class {P.rare_class})")
plt.show()
glue("rare_class", P.rare_class, display=False)
glue("n_rare_departing", sc.n_rare_departing, display=False)
glue("n_rare_remaining", sc.n_rare_remaining, display=False)
glue("fig_fraction_pct", 100 * fig_fraction, display=False)
glue("fig_dataset", fig_name, display=False)
glue("departure_round", P.departure_round, display=False)
glue("n_rounds", P.rounds, display=False)

# %% [markdown]
# With {glue:text}`fig_fraction_pct:.0f` % remaining, the departing client holds
# {glue:text}`n_rare_departing` training samples of class {glue:text}`rare_class` and all other
# clients together {glue:text}`n_rare_remaining`.
#
# ## Per-round rare-class F1 (the paper's Figure 4)
#
# One run on {glue:text}`fig_dataset` with the figure model, the client leaving at the start of
# round {glue:text}`departure_round` of {glue:text}`n_rounds`. A method's curve at round $r$ pairs
# the global model $\theta_r$ with the prototypes the server computed under it (see
# {mod}`fedlib.algorithms.mpt` for the one-round bookkeeping). Rare-class F1 is
# {meth}`fedlib.metrics.Confusion.f1` on the global test set; overall accuracy is beside it.

# %%
fig_model_fn = model_fn_for(P.fig_model, DATA[fig_name])
t0 = time.perf_counter()
run = run_federated(algorithm(), sc.federation, fig_model_fn, loop_config(seed))
fig_run_seconds = time.perf_counter() - t0
hist = evaluate_history(run.server, sc.federation.global_test, fig_model_fn, rare_class=P.rare_class, reg=TRACK.reg)
if results_dir is not None:
    run.save(Path(results_dir) / "figure_run")
    hist.to_csv(Path(results_dir) / "figure_run" / "history.csv", index=False)
SHOW = ["fedavg", "ccvr", "icarl", "sdc", "ldc", "frozen", "mpt_lite", "mpt", "oracle"]
LABEL = {"fedavg": "FedAvg (softmax)", "ccvr": "CCVR", "icarl": "iCaRL-NME", "sdc": "SDC", "ldc": "LDC",
         "frozen": "frozen prototype", "mpt_lite": "MPT-lite", "mpt": "MPT", "oracle": "oracle (unavailable)",
         "barycentric": "barycentric only", "stored_residual": "barycentric + stored residual",
         "mpt_predicted": "MPT, predicted residual only", "mpt_measured": "MPT, measured residual only"}
f1 = hist[hist["metric"] == "f1"].pivot(index="round", columns="method", values="value")
acc = hist[hist["metric"] == "accuracy"].pivot(index="round", columns="method", values="value")
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for m in SHOW:
    style = dict(ls="--", color="k") if m == "oracle" else {}
    axes[0].plot(f1.index, f1[m], label=LABEL[m], **style)
    axes[1].plot(acc.index, acc[m], label=LABEL[m], **style)
for ax, title in zip(axes, ["rare-class F1", "overall accuracy"]):
    ax.axvline(P.departure_round - 0.5, color="grey", lw=1)
    ax.set_xlabel("round")
    ax.set_title(title)
axes[0].legend(fontsize=7, ncol=2)
fig.tight_layout()
plt.show()

# %%
last = int(f1.index.max())
final = pd.DataFrame({"rare-class F1": f1.loc[last], "overall accuracy": acc.loc[last]})
final.index = [LABEL.get(m, m) for m in final.index]
final = final.sort_values("rare-class F1", ascending=False)
for m in f1.columns:
    glue(f"fig_f1_{m}", float(f1.loc[last, m]), display=False)
    glue(f"fig_acc_{m}", float(acc.loc[last, m]), display=False)
pre = f1.loc[P.departure_round - 1]
glue("fig_f1_pre", float(pre["mpt"]), display=False)
glue("fig_f1_pre_fedavg", float(pre["fedavg"]), display=False)
glue("fig_run_seconds", fig_run_seconds, display=False)
final.round(3)

# %% [markdown]
# Before the departure every prototype method is the direct estimate (rare-class F1
# {glue:text}`fig_f1_pre:.2f` at round {glue:text}`departure_round` − 1, against FedAvg's softmax
# {glue:text}`fig_f1_pre_fedavg:.2f`). At the last round MPT reaches {glue:text}`fig_f1_mpt:.2f`,
# MPT-lite {glue:text}`fig_f1_mpt_lite:.2f`, the frozen prototype {glue:text}`fig_f1_frozen:.2f`,
# iCaRL {glue:text}`fig_f1_icarl:.2f`, SDC {glue:text}`fig_f1_sdc:.2f`, LDC
# {glue:text}`fig_f1_ldc:.2f`, CCVR {glue:text}`fig_f1_ccvr:.2f`, FedAvg
# {glue:text}`fig_f1_fedavg:.2f` and the oracle {glue:text}`fig_f1_oracle:.2f`; overall accuracy
# barely separates them (MPT {glue:text}`fig_acc_mpt:.3f`, frozen {glue:text}`fig_acc_frozen:.3f`):
# accuracy hides the loss of one class in ten. The run took {glue:text}`fig_run_seconds:.0f` s.
#
# ## Final rare-class F1 by remaining fraction (Table II style)
#
# The table model on every dataset, for each remaining fraction and seed; the value is the
# rare-class F1 at the last round, mean ± standard deviation over seeds.

# %%
TABLE_METHODS = ["fedavg", "ccvr", "icarl", "sdc", "ldc", "frozen", "mpt_lite", "mpt", "oracle"]
rows = []
t0 = time.perf_counter()
for name, ds in DATA.items():
    mfn = model_fn_for(P.table_model, ds)
    for frac in P.fractions:
        for s in range(seed, seed + P.n_seeds):
            sc_t = scenario(ds, frac, s)
            alg = algorithm()
            alg.history = True
            res = run_federated(alg, sc_t.federation, mfn, loop_config(s))
            h = evaluate_history(res.server, sc_t.federation.global_test, mfn, rare_class=P.rare_class,
                                 rounds=[P.rounds], reg=TRACK.reg)
            for m in TABLE_METHODS:
                v = h[(h["method"] == m) & (h["metric"] == "f1")]["value"]
                rows.append({"dataset": name, "fraction": frac, "seed": s, "method": m, "f1": float(v.iloc[0]),
                             "n_remaining": sc_t.n_rare_remaining})
table_seconds = time.perf_counter() - t0
table_long = pd.DataFrame(rows)
if results_dir is not None:
    Path(results_dir).mkdir(parents=True, exist_ok=True)
    table_long.to_csv(Path(results_dir) / "fraction_table.csv", index=False)
agg = table_long.groupby(["dataset", "fraction", "method"])["f1"].agg(["mean", "std"]).reset_index()
agg["cell"] = [f"{m:.3f} ± {0 if np.isnan(sd) else sd:.3f}" for m, sd in zip(agg["mean"], agg["std"])]
table2 = agg.pivot(index="method", columns=["dataset", "fraction"], values="cell").loc[TABLE_METHODS]
table2.index = [LABEL[m] for m in table2.index]
glue("table_seconds", table_seconds, display=False)
glue("table_seeds", P.n_seeds, display=False)
glue("table_model", P.table_model, display=False)
table2

# %%
means = agg.pivot(index="method", columns=["dataset", "fraction"], values="mean")
baselines = ["fedavg", "ccvr", "icarl", "sdc", "ldc", "frozen"]
best_base = means.loc[baselines].max()
mpt_wins = int((means.loc["mpt"] > best_base).sum())
lite_wins = int((means.loc["mpt_lite"] > best_base).sum())
mpt_or_lite_wins = int((means.loc[["mpt", "mpt_lite"]].max() > best_base).sum())
n_cells = int(means.shape[1])
gap_oracle = float((means.loc["mpt"] - means.loc["oracle"]).mean())
frozen_drop = float((means.loc["frozen"] - means.loc["oracle"]).mean())
best_name = means.loc[baselines].mean(axis=1).idxmax()
glue("mpt_wins", mpt_wins, display=False)
glue("lite_wins", lite_wins, display=False)
glue("any_wins", mpt_or_lite_wins, display=False)
glue("n_cells", n_cells, display=False)
glue("gap_oracle", gap_oracle, display=False)
glue("frozen_gap", frozen_drop, display=False)
glue("best_baseline", LABEL[best_name], display=False)
glue("best_baseline_f1", float(means.loc[best_name].mean()), display=False)
glue("mpt_mean_f1", float(means.loc["mpt"].mean()), display=False)
glue("lite_mean_f1", float(means.loc["mpt_lite"].mean()), display=False)

# %% [markdown]
# Over the {glue:text}`n_cells` dataset × fraction cells ({glue:text}`table_seeds` seeds each, model
# {glue:text}`table_model`, {glue:text}`table_seconds:.0f` s in all), MPT beats the best baseline
# in {glue:text}`mpt_wins` cells, MPT-lite in {glue:text}`lite_wins`, one of the two in
# {glue:text}`any_wins`. Averaged over cells, MPT scores {glue:text}`mpt_mean_f1:.3f`, MPT-lite
# {glue:text}`lite_mean_f1:.3f`, the strongest baseline ({glue:text}`best_baseline`)
# {glue:text}`best_baseline_f1:.3f`; MPT is {glue:text}`gap_oracle:.3f` from the oracle on
# average (negative: below), the frozen prototype {glue:text}`frozen_gap:.3f`.
#
# ## Where the error comes from (the paper's Figure 6)
#
# The Mahalanobis distance (under the round's regularized pooled covariance) from each
# reconstruction to the oracle prototype, per round, for the figure run; and, over the rounds after
# the departure, its relation to rare-class F1.

# %%
dist = hist[hist["metric"] == "dist_oracle"].pivot(index="round", columns="method", values="value")
ABL = ["frozen", "barycentric", "stored_residual", "mpt_lite", "mpt_predicted", "mpt_measured", "mpt", "icarl", "sdc", "ldc"]
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for m in ABL:
    axes[0].plot(dist.index, dist[m], label=LABEL[m])
axes[0].axvline(P.departure_round - 0.5, color="grey", lw=1)
axes[0].set_xlabel("round")
axes[0].set_ylabel("Mahalanobis distance to the oracle prototype")
axes[0].legend(fontsize=7)
post = [r for r in dist.index if r >= P.departure_round]
xs = np.concatenate([dist.loc[post, m].to_numpy() for m in ABL])
ys = np.concatenate([f1.loc[post, m].to_numpy() for m in ABL])
axes[1].scatter(xs, ys, s=8)
axes[1].set_xlabel("distance to the oracle prototype")
axes[1].set_ylabel("rare-class F1")
fig.tight_layout()
plt.show()
rho = float(pd.Series(xs).corr(pd.Series(ys), method="spearman"))
glue("spearman", rho, display=False)
abl_final = dist.loc[last, ABL].rename(index=LABEL).to_frame("distance at the last round")
for m in ABL:
    glue(f"dist_{m}", float(dist.loc[last, m]), display=False)
alpha_series = hist[hist["metric"] == "alpha"].set_index("round")["value"]
glue("alpha_mean", float(alpha_series.mean()) if len(alpha_series) else float("nan"), display=False)
growth_last = float(run.server.meta.get("growth", float("nan")))
glue("growth_last", growth_last, display=False)
abl_final.round(2)

# %% [markdown]
# At the last round the frozen prototype is {glue:text}`dist_frozen:.2f` from the oracle, the
# barycentric in-span part alone {glue:text}`dist_barycentric:.2f`, barycentric + stored residual
# {glue:text}`dist_stored_residual:.2f`, MPT {glue:text}`dist_mpt:.2f` (its prediction alone
# {glue:text}`dist_mpt_predicted:.2f`, its measurement alone {glue:text}`dist_mpt_measured:.2f`;
# the adaptive weight averaged $\alpha_t =$ {glue:text}`alpha_mean:.2f` after the departure).
# Across methods and post-departure rounds the Spearman correlation between the distance and
# rare-class F1 is {glue:text}`spearman:.2f` (negative: closer prototypes classify better, as
# the paper's Figure 6 (b) says).
#
# One mechanism to watch: MPT's predicted residual (and MPT-lite's) **grows with the spread of
# the remaining classes**. At the last round MPT-lite's growth factor is
# $g_t =$ {glue:text}`growth_last:.2f`: the within-class spread of the classes still being trained
# has changed by that factor since the departure. The rare class is no longer trained, and its
# offset from the span need not follow; when it does not, scaling the stored residual by $g_t$ or
# transporting it by $T_t$ moves the prototype *away* from the oracle (compare the distances of
# "barycentric + stored residual", "MPT-lite" and "MPT, predicted residual only" above).
#
# ## Cost: communication and time (the paper's Figure 5)
#
# **Communication.** Each method alone, through the ledger: a short run per method whose clients
# send only that method's payload ({data}`fedlib.algorithms.mpt.METHOD_PAYLOAD`), on a small
# subset of the same scenario (message sizes depend on shapes, not on the number of samples), one
# local step per round; the bytes of the last round (after the departure, with SDC's and LDC's
# extras) per client, up and down, relative to FedAvg's.

# %%
small = scenario(DATA[fig_name].subset(np.arange(0, len(DATA[fig_name]), 4)), fig_fraction, seed)
byte_rows = []
for m in ["fedavg", "ccvr", "frozen", "icarl", "sdc", "ldc", "mpt_lite", "mpt"]:
    alg = algorithm(payload=METHOD_PAYLOAD[m], steps=1)
    alg.history, alg.ldc_epochs, alg.ccvr_steps = False, 1, 1
    cfg = LoopConfig(rounds=2, seed=seed, events=(Event(2, DEPARTING, "leave"),))  # sizes do not depend on the round
    led = run_federated(alg, small.federation, fig_model_fn, cfg).ledger.to_frame()
    led = led[(led["round"] == 2) & ~led["kind"].str.startswith("eval")]
    byte_rows.append({"method": m, "bytes per client and round": led["bytes"].sum() / led["client"].nunique()})
comm = pd.DataFrame(byte_rows).set_index("method")
comm["relative to FedAvg"] = comm["bytes per client and round"] / comm.loc["fedavg", "bytes per client and round"]
for m in comm.index:
    glue(f"comm_{m}", float(comm.loc[m, "relative to FedAvg"]), display=False)
comm.rename(index=LABEL).round(4)

# %% [markdown]
# **Time.** The extra work each method adds to a round, measured side by side on the figure
# run's final model and one client's data (the departing client's size is typical): the
# clients' re-embedding and statistics (every prototype method), SDC's second embedding under the
# previous model, LDC's second embedding and map training, and the server's per-round work (CCVR's
# virtual features and head re-training; MPT's reconstruction), each relative to one client's
# local training of one round.

# %%
client = sc.federation.clients[1]
x, y = client.train.x, client.train.y
model = fig_model_fn()
model.load_state_dict({k[len("model/"):]: v for k, v in run.server.arrays.items() if k.startswith("model/")})
init = {k: v.clone() for k, v in model.state_dict().items()}


def timed(fn, repeats=3):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def train_once():
    model.load_state_dict(init)
    local_train(model, x, y, TrainConfig(epochs=P.local_epochs, lr=P.lr), torch.Generator().manual_seed(0))


@torch.no_grad()
def embed():
    model.eval()
    return model.embed(x).double()


def stats():
    ClassMoments.from_features(embed(), y, 10)


z_now = embed()
z_old = z_now + 0.01 * torch.randn_like(z_now)
t_train = timed(train_once)
model.load_state_dict(init)
t_stats = timed(stats)
t_sdc = timed(lambda: (embed(), sdc_client_sums(z_old, z_now, z_now.mean(0))))
t_ldc = timed(lambda: (embed(), ldc_fit_map(z_old, z_now, epochs=P.ldc_epochs, batch_size=128)), repeats=1)
server_seconds = float(run.server_seconds[-1])  # the server's aggregation (all methods), last round; timed by the loop
time_table = pd.DataFrame({"seconds": {"local training (one client, one round)": t_train,
                                       "re-embedding + statistics (every prototype method)": t_stats,
                                       "SDC extra (client)": t_sdc, "LDC extra (client)": t_ldc,
                                       "server, all methods incl. CCVR (per round)": server_seconds}})
time_table["relative to local training"] = time_table["seconds"] / t_train
for key, name in [("stats", "re-embedding + statistics (every prototype method)"), ("sdc", "SDC extra (client)"),
                  ("ldc", "LDC extra (client)"), ("server", "server, all methods incl. CCVR (per round)")]:
    glue(f"time_{key}", float(time_table.loc[name, "relative to local training"]), display=False)
time_table.round(3)

# %%
overhead_time = {"fedavg": 0.0, "ccvr": float(time_table.iloc[1, 1]), "frozen": float(time_table.iloc[1, 1]),
                 "icarl": float(time_table.iloc[1, 1]), "sdc": float(time_table.iloc[1, 1] + time_table.iloc[2, 1]),
                 "ldc": float(time_table.iloc[1, 1] + time_table.iloc[3, 1]), "mpt_lite": float(time_table.iloc[1, 1]),
                 "mpt": float(time_table.iloc[1, 1])}
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for m in comm.index:
    axes[0].scatter(comm.loc[m, "relative to FedAvg"], f1.loc[last, m])
    axes[0].annotate(LABEL[m], (comm.loc[m, "relative to FedAvg"], f1.loc[last, m]), fontsize=7)
    axes[1].scatter(overhead_time[m], f1.loc[last, m])
    axes[1].annotate(LABEL[m], (overhead_time[m], f1.loc[last, m]), fontsize=7)
axes[0].set_xscale("log")
axes[0].set_xlabel("bytes per client and round, relative to FedAvg")
axes[1].set_xlabel("extra client time per round, relative to local training")
for ax in axes:
    ax.set_ylabel("final rare-class F1")
fig.tight_layout()
plt.show()

# %% [markdown]
# Every prototype method pays for the class statistics: with the shared Mahalanobis readout they
# all send one $d\times d$ matrix per client and round, so frozen, iCaRL and MPT-lite already cost
# {glue:text}`comm_frozen:.3f` × FedAvg's bytes, MPT {glue:text}`comm_mpt:.3f` × (one more
# $d\times d$ matrix: the rare class's, for its noise estimate), SDC {glue:text}`comm_sdc:.3f` ×,
# LDC {glue:text}`comm_ldc:.3f` × (a $d\times d$ map) and CCVR {glue:text}`comm_ccvr:.3f` × (a
# covariance per class). This ordering differs from the paper's Figure 5 (a), where MPT-lite is
# cheaper than MPT: there the lighter methods evidently do not send a covariance; here the readout
# needs one. In time, re-embedding costs {glue:text}`time_stats:.2f` × one client's local training,
# SDC adds {glue:text}`time_sdc:.2f` ×, LDC {glue:text}`time_ldc:.2f` × and the server's work for
# all methods together {glue:text}`time_server:.2f` × (the benchmark `tests/bench_mpt.py` measures
# MPT's server cost alone at $d = 512$).
#
# ## Claims
#
# The paper's claims against our measurement at this scale (book profile: small data sets and
# models, far fewer rounds than the paper's 100; verdicts are produced by the code below).

# %%
f1_last = f1.loc[last]
post_f1 = f1.loc[[r for r in f1.index if r >= P.departure_round]]
frozen_degrades = bool(f1_last["frozen"] < f1.loc[P.departure_round - 1, "frozen"] - 0.05)
lite_cnn_ok = bool(f1_last["mpt_lite"] >= f1_last["mpt"] - 0.05)
lite_table_ok = bool(means.loc["mpt_lite"].mean() >= means.loc["mpt"].mean() - 0.05)
closest = min(["icarl", "sdc", "ldc", "frozen"], key=lambda m: float(dist.loc[last, m]))
near_oracle = bool(abs(gap_oracle) <= 0.05 or gap_oracle > 0)


claims = pd.DataFrame([
    {"claim (paper)": "\"MPT outperforms all baselines in rare class F1\" (Abstract; Table II)",
     "ours": f"MPT above the best baseline in {mpt_wins}/{n_cells} cells (MPT or MPT-lite: {mpt_or_lite_wins}/{n_cells})",
     "verdict": verdict(mpt_wins == n_cells, mpt_or_lite_wins > 0),
     "why": ("MPT leads every cell" if mpt_wins == n_cells else
             f"at the figure run's last round MPT is {float(dist.loc[last, 'mpt']):.2f} from the oracle, "
             f"{LABEL[closest]} {float(dist.loc[last, closest]):.2f}; the covariance-transported residual follows "
             f"the trained classes' spread (growth {growth_last:.2f}), which the untrained rare class need not share")},
    {"claim (paper)": "\"MPT ... closely tracking the oracle prototype\" (Section VII)",
     "ours": f"MPT - oracle F1 = {gap_oracle:+.3f} on average",
     "verdict": verdict(near_oracle, gap_oracle > -0.15),
     "why": "within 0.05 (or above) counts as close; the oracle is the rare-class test mean itself"},
    {"claim (paper)": "\"Frozen prototype ... progressively degrades\" (Section V-B)",
     "ours": f"frozen F1 {f1.loc[P.departure_round - 1, 'frozen']:.2f} before the departure, {f1_last['frozen']:.2f} at the end",
     "verdict": verdict(frozen_degrades),
     "why": "a drop of more than 0.05 counts; the backbone keeps training on the other classes only"},
    {"claim (paper)": "\"MPT-lite remains competitive with MPT across CNN backbones\" (Section V-C)",
     "ours": f"CNN figure run: MPT-lite {f1_last['mpt_lite']:.3f} vs MPT {f1_last['mpt']:.3f}; "
             f"{P.table_model} table: {means.loc['mpt_lite'].mean():.3f} vs {means.loc['mpt'].mean():.3f}",
     "verdict": verdict(lite_cnn_ok and lite_table_ok, lite_cnn_ok),
     "why": "competitive = at most 0.05 below MPT; the claim is about CNN features (the figure run, one seed); "
            "on the table's features the scalar growth factor, which follows the trained classes' spread, "
            "over-scales the stored residual"},
    {"claim (paper)": "\"prototypes closer to the oracle achieve higher F1\" (Section V-D, Fig. 6 (b))",
     "ours": f"Spearman(distance, F1) = {rho:.2f}",
     "verdict": verdict(rho < -0.5, rho < 0), "why": "over methods and post-departure rounds of the figure run"},
])
glue("total_seconds", float(time.perf_counter() - t_start), display=False)
claims

# %% [markdown]
# This chapter ran in {glue:text}`total_seconds:.0f` s at this profile.
#
# ## Exercises
#
# 1. **More remaining samples.** Set `fractions = [0.2, 0.5]`: as $N_t$ grows the adaptive weight
#    should move toward the measurement (the derivation's limit $\alpha_t \to 1$). Does MPT then
#    beat its prediction-only variant?
# 2. **Longer drift.** Set `rounds = 60` (keeping the profile's `departure_round`): does the frozen prototype
#    keep degrading, and does the stored residual (barycentric + stored residual) fall behind MPT as
#    in the paper's Figure 6 (a)?
# 3. **The paper's unstated choices.** In the cell after the parameters, set
#    `TRACK = TrackingConfig(span="linear")`, `TrackingConfig(noise="pooled")` or
#    `TrackingConfig(metric="whitened")` (the adaptive weight measured in the readout's metric)
#    and compare MPT's distance to the oracle and its F1: which choice matters at this scale?
