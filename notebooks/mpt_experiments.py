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
# runs MPT {cite:p}`mpt` and its baselines in fedlib's round loop:
#
# * **FedAvg** {cite:p}`fedavg`: the model's own softmax head;
# * **CCVR** {cite:p}`ccvr`: the head re-trained each round on virtual features drawn from the
#   class Gaussians (per-class covariances from the clients);
# * **iCaRL nearest-mean** {cite:p}`icarl`: the rare prototype re-estimated from the few remaining
#   rare samples;
# * **SDC** {cite:p}`sdc`: the stored prototype moved by the Gaussian-weighted drift of the
#   clients' samples between the previous and the current model (sent as aggregates);
# * **LDC** {cite:p}`ldc`: a bias-free linear old-to-new feature map trained on each client (MSE,
#   Adam from the identity, learning rate and epochs as in the reference, see {ref}`mpt-ldc-steps`)
#   and averaged by the server;
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
seed = 0  # the first run seed; every run uses seed, seed + 1, ..., seed + n_seeds - 1
n_seeds = None  # run seeds of the figure runs, the fraction table and the claims
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
from scipy.stats import t as student_t

from fedlib.algorithms import MPT, Event
from fedlib.algorithms.mpt import METHOD_PAYLOAD, evaluate_history
from fedlib.chapter import load_data, resolve
from fedlib.claims import Claim, evaluate, mean_interval, seed_table, show, tally
from fedlib.data import plot_partition
from fedlib.federation import make_departure_scenario
from fedlib.loop import LoopConfig, run_federated
from fedlib.models import build_model
from fedlib.rng import LOCAL_TRAIN, torch_generator
from fedlib.stats import ClassMoments
from fedlib.tracking import TrackingConfig, ldc_fit_map, sdc_client_sums
from fedlib.training import TrainConfig, local_train

torch.set_num_threads(threads)
t_start = time.perf_counter()

PROFILES = {
    "smoke": dict(datasets=["mnist5k"], n_samples=500, rare_class=5, n_clients=4, rounds=4, departure_round=3,
                  local_epochs=1, lr=0.05, fig_model="mlp", table_model="mlp", fractions=[0.02, 0.1], n_seeds=2,
                  global_test_per_class=10, ldc_epochs=2, ldc_batch=32, ccvr_steps=10, ccvr_virtual=20),
    "book": dict(datasets=["mnist5k", "uci"], n_samples=2000, rare_class=5, n_clients=10, rounds=20, departure_round=6,
                 local_epochs=1, lr=0.05, fig_model="cnn", table_model="mlp", fractions=[0.01, 0.02, 0.05, 0.1],
                 n_seeds=3, global_test_per_class=40, ldc_epochs=20, ldc_batch=32, ccvr_steps=100, ccvr_virtual=100),
    "paper": dict(datasets=["cifar10"], n_samples=None, rare_class=9, n_clients=10, rounds=100, departure_round=15,
                  local_epochs=5, lr=0.01, fig_model="resnet18", table_model="resnet18",
                  fractions=[0.01, 0.02, 0.05, 0.1], n_seeds=3, global_test_per_class=600, ldc_epochs=20, ldc_batch=32,
                  ccvr_steps=100, ccvr_virtual=100),
}
P = resolve(PROFILES, profile, n_seeds=n_seeds, fractions=fractions, rounds=rounds, departure_round=departure_round,
            local_epochs=local_epochs, n_clients=n_clients)
if not 1 < P.departure_round <= P.rounds:
    raise ValueError(f"departure_round must be in [2, rounds={P.rounds}], got {P.departure_round}")
DEPARTING = 0
SEEDS = list(range(seed, seed + P.n_seeds))
BATCH = 32  # local training mini-batch
LDC_BATCH_OLD = 128  # the LDC mini-batch of the chapter's earlier builds (the LDC check below)
TRACK = TrackingConfig()  # fixed defaults, nothing selected at run time (see "MPT's settings")


@functools.cache
def data(name, run_seed):
    """The data set's seeded subset: each run seed draws its own (``load_data(..., seed=run_seed)``)."""
    return load_data(name, n_samples=P.n_samples, seed=run_seed, cifar_root=cifar_root)


def model_fn_for(name, ds):
    return functools.partial(build_model, name, in_channels=ds.x.shape[1], n_classes=ds.n_classes, input_size=ds.x.shape[-1])


def scenario(ds, fraction, run_seed):
    return make_departure_scenario(ds, n_clients=P.n_clients, rare_class=P.rare_class, departing_share=1 - fraction,
                                   departing_client=DEPARTING, global_test_per_class=P.global_test_per_class, seed=run_seed)


def algorithm(run_seed, payload=None, steps=None, **overrides):
    """The chapter's MPT plug-in; ``overrides`` replace constructor arguments (e.g. ``ldc_batch``, ``history``)."""
    train = TrainConfig(epochs=P.local_epochs, steps=steps, batch_size=BATCH, lr=P.lr, momentum=0.9)
    kw = dict(ldc_epochs=P.ldc_epochs, ldc_batch=P.ldc_batch, ccvr_steps=P.ccvr_steps, ccvr_virtual=P.ccvr_virtual)
    kw.update(overrides)
    if payload is not None:
        kw["payload"] = payload
    return MPT(train=train, rare_class=P.rare_class, tracking=TRACK, train_rare_on=(DEPARTING,), seed=run_seed, **kw)


def loop_config(run_seed, rounds=None):
    return LoopConfig(rounds=rounds or P.rounds, seed=run_seed, events=(Event(P.departure_round, DEPARTING, "leave"),),
                      f1_class=P.rare_class)


print(f"profile {P.profile}: {', '.join(P.datasets)}; seeds {SEEDS}; {P.n_clients} clients, "
      f"{P.rounds} rounds, departure at round {P.departure_round}, {P.local_epochs} local epoch(s); "
      f"figure model {P.fig_model}, table model {P.table_model}")
glue("n_seeds", P.n_seeds, display=False)
glue("local_batch", BATCH, display=False)
glue("ldc_epochs", P.ldc_epochs, display=False)
glue("ldc_batch", P.ldc_batch, display=False)
glue("ldc_batch_old", LDC_BATCH_OLD, display=False)
glue("ldc_lr", algorithm(seed).ldc_lr, display=False)
glue("rare_test", P.global_test_per_class, display=False)
glue("one_image", 1 / P.global_test_per_class, display=False)

# %% [markdown]
# Every run seed $s$ in `seed, seed + 1, …` ({glue:text}`n_seeds` at this profile) draws its own
# data subset (`load_data(..., seed=s)`) where the data set is larger than the profile's
# {glue:text}`n_samples_profile` images ({glue:text}`full_sets_text`), its own departure scenario
# (which samples the departing client holds, the global test set) and its own model initialization
# and batch order (`LoopConfig(seed=s)`); every number below is a mean over these seeds with its 95 % Student's t
# interval, and every claim is decided on differences paired by seed ({mod}`fedlib.claims`).
#
# ## The claims, declared before any run
#
# Each claim of the paper is a row with its decision rule fixed here, before the runs: "holds"
# when the 95 % interval of the paired difference (over seeds) clears the minimum effect in the
# claimed direction, "does not hold" when it clears it in the other direction, otherwise
# "inconclusive at this scale". The minimum effects:
#
# * **a lead in rare-class F1** must exceed {glue:text}`min_lead` F1. The paper's margins over the
#   strongest baseline in Table II go down to about 1.0 %p, but our global test set holds only
#   {glue:text}`rare_test` images of the rare class, so one image moves its recall by
#   {glue:text}`one_image:.3f`: a lead smaller than about one test image is not resolved here, and
#   {glue:text}`min_lead` is that resolution (stricter than the paper's smallest margin).
#   "All baselines" means the paper's five (FedAvg, CCVR, iCaRL, SDC, LDC; the frozen prototype is,
#   as in Section V-A, a reference bound, not a baseline) and is read strictly: per seed and cell,
#   MPT against the *best* of the five on that cell. That maximum is picked on the test set, so it
#   is biased upward: it favours the baselines, which makes "holds" harder to reach and "does not
#   hold" easier; a "holds" is therefore conservative, a "does not hold" is not (read it with the
#   per-baseline columns of the fraction table);
# * **"closely tracking" / "competitive with"** is a non-inferiority statement (direction "at least"):
#   it holds when the 95 % interval of the difference (method − reference) lies above
#   −{glue:text}`tolerance` F1, i.e. the method is shown to be less than {glue:text}`tolerance` below
#   the reference; it does not hold when the interval lies below −{glue:text}`tolerance`;
# * **"progressively degrades"**: the frozen prototype's F1 must fall by more than
#   {glue:text}`min_drop` between the round before the departure and the last round;
# * **Figure 6 (b)**: the Spearman correlation between distance and F1 must lie below
#   −{glue:text}`min_rho` (a clear negative relation, not just a negative sign);
# * **distances (Figure 6 (a))** and **costs (Figure 5)**: any difference in the claimed direction
#   (minimum effect 0); "reduces the initial gap" is read on the mean distance over the
#   {glue:text}`stored_rounds` rounds after the departure round (at the departure round itself the
#   stored residual reproduces the departure prototype); bytes are deterministic given the shapes, so their interval has zero width.
#
# The oracle prototype is the rare-class *test* mean under the current model, by definition (as
# in the paper's Section V-A: "an upper reference that is unavailable in the actual departure
# scenario"); it is a reference, never a method that is selected or tuned.

# %%
MIN_LEAD, TOL, MIN_DROP, MIN_RHO = 0.02, 0.05, 0.05, 0.3
for k, v in {"min_lead": MIN_LEAD, "tolerance": TOL, "min_drop": MIN_DROP, "min_rho": MIN_RHO}.items():
    glue(k, v, display=False)
BASELINES = ["fedavg", "ccvr", "icarl", "sdc", "ldc"]  # the paper's five; the frozen prototype is a reference bound
STORED_ROUNDS = 3  # fig6a-stored: the rounds after the departure over which the distance is averaged
SIZES = {name: sorted({len(data(name, s)) for s in SEEDS}) for name in P.datasets}
size_text = ", ".join(f"{name} {'/'.join(f'{n:,}' for n in SIZES[name])} images" for name in P.datasets)
FULL = [name for name in P.datasets if P.n_samples is None or len(data(name, seed)) < P.n_samples]
glue("stored_rounds", STORED_ROUNDS, display=False)
glue("n_samples_profile", "all" if P.n_samples is None else f"{P.n_samples:,}", display=False)
glue("full_sets_text", "; ".join(
    [f"{name}: {'/'.join(f'{n:,}' for n in SIZES[name])} images" for name in P.datasets]
    + [f"{', '.join(FULL)} {'is' if len(FULL) == 1 else 'are'} used whole at every seed, so there the seeds vary only "
       "the partition, the test set, the initialization and the batch order"] * bool(FULL)), display=False)
SUB_TABLE = (f"Table II replica on an MLP ({P.table_model}), not the paper's CNN; small data sets "
             f"({size_text}) instead of nuImages / Car-1000; {P.rounds} rounds "
             f"(departure at {P.departure_round}) instead of 100 (15); baselines implemented here from their "
             "papers (no reference code run); the readout is Mahalanobis NCM for every prototype method")
SUB_FIG = (f"one small {P.fig_model} on {P.datasets[0]} (not the paper's 3-layer CNN on nuImages, nor four backbones); "
           f"{P.rounds} rounds instead of 100")
SUB_COMM = ("our readout is a Mahalanobis NCM, so every prototype method (MPT-lite included) sends one d×d scatter "
            "per client and round; the paper's MPT-lite sends no covariance. The ordering of our bytes therefore "
            "differs from the paper's Figure 5 (a) for the lighter methods (frozen, iCaRL, MPT-lite cost the same)")
SUB_COMM_MPT = (SUB_COMM + "; so the paper's reason (one covariance summary per client for the pooled covariance) does "
                "not apply here: our MPT − MPT-lite difference is the rare class's d×d matrix (its noise estimate)")
Q = {
    "beats": ("MPT outperforms all baselines in rare class F1", "Abstract; Section V-B, Table II"),
    "oracle": ("… closely tracking the oracle prototype", "Section VII"),
    "frozen": ("After departure, Frozen prototype, which retains the departure-time rare-class prototype, "
               "progressively degrades as backbone updates gradually misalign with the current feature space.",
               "Section V-B, Figure 4"),
    "lite": ("MPT-lite remains competitive with MPT across CNN backbones", "Section V-C"),
    "fig6b": ("Figure 6 (b) relates this distance to rare-class F1 and shows that prototypes closer to the oracle "
              "achieve higher F1.", "Section V-D, Figure 6 (b)"),
    "fig6a_stored": ("The green “Barycentric + Stored Residual” plot adds this missing component and substantially "
                     "reduces the initial gap.", "Section V-D, Figure 6 (a)"),
    "fig6a_update": ("These results show that barycentric reconstruction tracks in-span drift, while sustained "
                     "alignment requires out-of-span residual updates.", "Section V-D, Figure 6 (a)"),
    "comm_mpt": ("The (more noticeable) cost increase from MPT-lite to MPT …", "Section V-B, Figure 5 (a)"),
    "comm_ccvr": ("CCVR incurs a further increase by transmitting a separate covariance for each class at all clients",
                  "Section V-B, Figure 5 (a)"),
    "time_ldc": ("LDC … incur substantially larger overhead due to drift-map training in LDC …",
                 "Section V-B, Figure 5 (b)"),
}
CLAIMS = {}
for name in P.datasets:
    CLAIMS[f"beats-{name}"] = Claim(f"beats-{name}", *Q["beats"],
                                    f"{name}: rare-class F1 at the last round, MPT − best of the five baselines per "
                                    "cell and seed (picked on the test set: favours the baselines), averaged over "
                                    "fractions", "greater", MIN_LEAD, SUB_TABLE)
    CLAIMS[f"oracle-{name}"] = Claim(f"oracle-{name}", *Q["oracle"],
                                     f"{name}: rare-class F1, MPT − oracle, averaged over fractions", "at least",
                                     TOL, SUB_TABLE + "; the oracle is the rare-class test mean (a reference)")
CLAIMS["frozen"] = Claim("frozen", *Q["frozen"], "figure runs: frozen prototype's rare-class F1, last round − round "
                         "before the departure", "less", MIN_DROP, SUB_FIG)
CLAIMS["lite-cnn"] = Claim("lite-cnn", *Q["lite"], f"figure runs ({P.fig_model}): rare-class F1 at the last round, "
                           "MPT-lite − MPT", "at least", TOL,
                           SUB_FIG + "; MPT-lite's form (scalar growth of the stored residual) is our reading of the "
                           "paper's one-line description")
CLAIMS["lite-mlp"] = Claim("lite-mlp", f"is MPT-lite within {TOL} F1 of MPT on an MLP ({P.table_model}), outside the "
                           "paper's “across CNN backbones”?", "lite-cnn", f"table runs ({P.table_model}, all data sets "
                           "and fractions): rare-class F1, MPT-lite − MPT", "at least", TOL, SUB_TABLE, kind="control")
CLAIMS["fig6b"] = Claim("fig6b", *Q["fig6b"], "figure runs: Spearman correlation of the Mahalanobis distance to the "
                        "oracle with rare-class F1 (methods × post-departure rounds)", "less", MIN_RHO, SUB_FIG)
CLAIMS["fig6a-stored"] = Claim("fig6a-stored", *Q["fig6a_stored"], "figure runs: Mahalanobis distance to the oracle, "
                               f"mean over the {STORED_ROUNDS} rounds after the departure round, barycentric + stored "
                               "residual − barycentric only", "less", 0.0, SUB_FIG)
CLAIMS["fig6a-update"] = Claim("fig6a-update", *Q["fig6a_update"], "figure runs: Mahalanobis distance to the oracle at "
                               "the last round, MPT − barycentric + stored residual", "less", 0.0, SUB_FIG)
CLAIMS["fig6a-bary"] = Claim("fig6a-bary", *Q["fig6a_update"], "figure runs: Mahalanobis distance to the oracle at "
                             "the last round, MPT − barycentric only", "less", 0.0, SUB_FIG)
CLAIMS["comm-mpt"] = Claim("comm-mpt", *Q["comm_mpt"], "bytes per client and round (after the departure), MPT − "
                           "MPT-lite, relative to FedAvg's", "greater", 0.0, SUB_COMM_MPT)
CLAIMS["comm-ccvr"] = Claim("comm-ccvr", *Q["comm_ccvr"], "bytes per client and round, CCVR − MPT, relative to "
                            "FedAvg's", "greater", 0.0, SUB_COMM)
CLAIMS["time-ldc"] = Claim("time-ldc", *Q["time_ldc"], "extra client time per round, LDC − MPT, relative to one "
                           "client's local training", "greater", 0.0,
                           "time measured on one client of the figure run's final model, CPU, one thread; "
                           "the server's per-round work (MPT's reconstruction, CCVR's ghost features and head "
                           "re-training) is timed for all methods together, so CCVR's part of the sentence is left "
                           "out and MPT's server time is counted on neither side")
LDC_CHECK = P.datasets[-1]
CLAIMS["ldc-batch"] = Claim("ldc-batch", f"does LDC's rare-class F1 on {LDC_CHECK} depend on the number of Adam steps "
                            f"of its map (mini-batches of {P.ldc_batch} against {LDC_BATCH_OLD})?", "LDC rows",
                            f"{LDC_CHECK}, fraction of the figure: LDC's rare-class F1 at the last round, batch "
                            f"{P.ldc_batch} − batch {LDC_BATCH_OLD}", "greater", MIN_LEAD,
                            "same seeds, scenario and model; the batch-128 side runs with LDC's payload only (no "
                            "other statistics); the backbone is checked to be the same below (LDC's map draws one "
                            "permutation per epoch whatever its batch, from the client's local stream)", kind="control")
print(f"{sum(c.kind == 'claim' for c in CLAIMS.values())} claims and "
      f"{sum(c.kind == 'control' for c in CLAIMS.values())} control declared")

# %% [markdown]
# ## The departure scenario
#
# {func}`fedlib.federation.make_departure_scenario` holds out a class-balanced global test set, gives
# client 0 a share $1 - f$ of the rare class and deals the remaining fraction $f$ over the other
# clients; every other class is spread uniformly over all clients (Section V-A, "Scenario").
# Following the paper's design choice (Fig. 7 (c)), the remaining rare samples are kept **out of
# training** and only re-embedded and measured (`MPT(train_rare_on=(0,))`). Client 0 leaves for good
# at the start of the departure round: the loop's `Event(round, 0, "leave")`. Below, the first seed's
# scenario.

# %%
fig_name = P.datasets[0]
fig_fraction = 0.02 if 0.02 in P.fractions else P.fractions[0]
sc = scenario(data(fig_name, seed), fig_fraction, seed)
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
# The figure runs: {glue:text}`fig_dataset` with the figure model, one run per seed, the client
# leaving at the start of round {glue:text}`departure_round` of {glue:text}`n_rounds`. A method's
# curve at round $r$ pairs the global model $\theta_r$ with the prototypes the server computed under
# it (see {mod}`fedlib.algorithms.mpt` for the one-round bookkeeping); the line is the mean over
# seeds and the band its 95 % interval. Rare-class F1 is {meth}`fedlib.metrics.Confusion.f1` on the
# global test set; overall accuracy is beside it.

# %%
fig_model_fn = model_fn_for(P.fig_model, data(fig_name, seed))
fig_runs, fig_scen, hists = {}, {}, []
t0 = time.perf_counter()
for s in SEEDS:
    fig_scen[s] = scenario(data(fig_name, s), fig_fraction, s)
    fig_runs[s] = run_federated(algorithm(s), fig_scen[s].federation, fig_model_fn, loop_config(s))
    h = evaluate_history(fig_runs[s].server, fig_scen[s].federation.global_test, fig_model_fn, rare_class=P.rare_class,
                         reg=TRACK.reg)
    hists.append(h.assign(seed=s))
    if results_dir is not None:
        fig_runs[s].save(Path(results_dir) / f"figure_run_{s}")
fig_run_seconds = (time.perf_counter() - t0) / len(SEEDS)
hist = pd.concat(hists, ignore_index=True)
if results_dir is not None:
    hist.to_csv(Path(results_dir) / "figure_runs_history.csv", index=False)
SHOW = ["fedavg", "ccvr", "icarl", "sdc", "ldc", "frozen", "mpt_lite", "mpt", "oracle"]
LABEL = {"fedavg": "FedAvg (softmax)", "ccvr": "CCVR", "icarl": "iCaRL-NME", "sdc": "SDC", "ldc": "LDC",
         "frozen": "frozen prototype", "mpt_lite": "MPT-lite", "mpt": "MPT", "oracle": "oracle (unavailable)",
         "barycentric": "barycentric only", "stored_residual": "barycentric + stored residual",
         "mpt_predicted": "MPT, predicted residual only", "mpt_measured": "MPT, measured residual only"}


def per_seed(metric):
    """{seed: frame round × method} of one metric of the figure runs."""
    part = hist[hist["metric"] == metric]
    return {s: g.pivot(index="round", columns="method", values="value") for s, g in part.groupby("seed")}


def band(metric, method):
    """Mean over seeds per round and its 95 % t interval (NaN band with one seed)."""
    frames = per_seed(metric)
    stack = np.stack([frames[s][method].to_numpy() for s in SEEDS])  # (seeds, rounds)
    rounds_ = frames[SEEDS[0]].index.to_numpy()
    ivs = [mean_interval(stack[:, j]) for j in range(stack.shape[1])]
    return rounds_, np.array([i.mean for i in ivs]), np.array([i.low for i in ivs]), np.array([i.high for i in ivs])


fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for m in SHOW:
    for ax, metric in zip(axes, ["f1", "accuracy"]):
        r_, mu, lo, hi = band(metric, m)
        line, = ax.plot(r_, mu, label=LABEL[m], **(dict(ls="--", color="k") if m == "oracle" else {}))
        if np.isfinite(lo).all():
            ax.fill_between(r_, lo, hi, color=line.get_color(), alpha=0.12, lw=0)
for ax, title in zip(axes, ["rare-class F1", "overall accuracy"]):
    ax.axvline(P.departure_round - 0.5, color="grey", lw=1)
    ax.set_xlabel("round")
    ax.set_title(f"{title} (mean and 95 % interval over seeds)")
axes[0].legend(fontsize=7, ncol=2)
fig.tight_layout()
plt.show()

# %%
last = int(hist["round"].max())
pre_round = P.departure_round - 1
at = lambda metric, r: hist[(hist["metric"] == metric) & (hist["round"] == r)]  # noqa: E731
final = pd.concat([
    seed_table(at("f1", last), "method", None, "value", digits=3).rename(columns={"value": "rare-class F1"}),
    seed_table(at("accuracy", last), "method", None, "value", digits=3).rename(columns={"value": "overall accuracy"}),
], axis=1).loc[SHOW]
fig_mean = lambda metric, r, m: float(at(metric, r).query("method == @m")["value"].mean())  # noqa: E731
for m in SHOW + ["barycentric", "stored_residual", "mpt_predicted", "mpt_measured"]:
    glue(f"fig_f1_{m}", fig_mean("f1", last, m), display=False)
    glue(f"fig_acc_{m}", fig_mean("accuracy", last, m), display=False)
glue("fig_f1_pre", fig_mean("f1", pre_round, "mpt"), display=False)
glue("fig_f1_pre_fedavg", fig_mean("f1", pre_round, "fedavg"), display=False)
glue("fig_run_seconds", fig_run_seconds, display=False)
final.index = [LABEL[m] for m in final.index]
final

# %% [markdown]
# Means over the seeds (the table: mean ± half-width of the 95 % interval). Before the departure
# every prototype method is the direct estimate (rare-class F1 {glue:text}`fig_f1_pre:.2f` at round
# {glue:text}`departure_round` − 1, against FedAvg's softmax {glue:text}`fig_f1_pre_fedavg:.2f`).
# At the last round MPT reaches {glue:text}`fig_f1_mpt:.2f`, MPT-lite {glue:text}`fig_f1_mpt_lite:.2f`,
# the frozen prototype {glue:text}`fig_f1_frozen:.2f`, iCaRL {glue:text}`fig_f1_icarl:.2f`, SDC
# {glue:text}`fig_f1_sdc:.2f`, LDC {glue:text}`fig_f1_ldc:.2f`, CCVR {glue:text}`fig_f1_ccvr:.2f`,
# FedAvg {glue:text}`fig_f1_fedavg:.2f` and the oracle {glue:text}`fig_f1_oracle:.2f`; compare the
# overall accuracies (MPT {glue:text}`fig_acc_mpt:.3f`, frozen {glue:text}`fig_acc_frozen:.3f`):
# the rare class is one class in ten, so its loss moves overall accuracy by a tenth at most. One run
# took {glue:text}`fig_run_seconds:.0f` s on average.
#
# ## Final rare-class F1 by remaining fraction (Table II style)
#
# The table model on every data set, for each remaining fraction and seed; each cell is the
# rare-class F1 at the last round, mean ± half-width of the 95 % interval over the seeds.

# %%
TABLE_METHODS = ["fedavg", "ccvr", "icarl", "sdc", "ldc", "frozen", "mpt_lite", "mpt", "oracle"]
model_arrays = lambda server: {k: v for k, v in server.arrays.items() if k.startswith("model/")}  # noqa: E731
rows, growth_rows, ldc_check_models, client_sizes = [], [], {}, {}
t0 = time.perf_counter()
for name in P.datasets:
    for frac in P.fractions:
        for s in SEEDS:
            ds = data(name, s)
            mfn = model_fn_for(P.table_model, ds)
            sc_t = scenario(ds, frac, s)
            res = run_federated(algorithm(s), sc_t.federation, mfn, loop_config(s))
            h = evaluate_history(res.server, sc_t.federation.global_test, mfn, rare_class=P.rare_class,
                                 rounds=[P.rounds], reg=TRACK.reg)
            f1s = h[h["metric"] == "f1"].set_index("method")["value"]
            rows += [{"dataset": name, "fraction": frac, "seed": s, "method": m, "f1": float(f1s[m]),
                      "n_remaining": sc_t.n_rare_remaining} for m in TABLE_METHODS]
            growth_rows.append({"dataset": name, "fraction": frac, "seed": s,
                                "growth": float(res.server.meta.get("growth", float("nan")))})
            if name == P.datasets[-1] and frac == fig_fraction:  # kept for the LDC control's backbone check
                ldc_check_models[s] = model_arrays(res.server)
                client_sizes[s] = [len(c.train.y) for c in sc_t.federation.clients[1:]]  # the remaining clients
table_seconds = time.perf_counter() - t0
table_long = pd.DataFrame(rows)
if results_dir is not None:
    Path(results_dir).mkdir(parents=True, exist_ok=True)
    table_long.to_csv(Path(results_dir) / "fraction_table.csv", index=False)
table2 = seed_table(table_long, "method", ["dataset", "fraction"], "f1", digits=3).loc[TABLE_METHODS]
table2.index = [LABEL[m] for m in table2.index]
glue("table_seconds", table_seconds, display=False)
glue("table_model", P.table_model, display=False)
table2

# %%
wide = table_long.pivot_table(index=["dataset", "fraction", "seed"], columns="method", values="f1")
wide["best_baseline"] = wide[BASELINES].max(axis=1)
by_seed = wide.groupby(["dataset", "seed"]).mean()  # per data set and seed: mean over fractions
cell_means = wide.groupby(["dataset", "fraction"]).mean()
n_cells = len(cell_means)
mpt_wins = int((cell_means["mpt"] > cell_means[BASELINES].max(axis=1)).sum())
glue("mpt_wins", mpt_wins, display=False)
glue("n_cells", n_cells, display=False)
glue("mpt_mean_f1", float(cell_means["mpt"].mean()), display=False)
glue("lite_mean_f1", float(cell_means["mpt_lite"].mean()), display=False)
best_name = cell_means[BASELINES].mean().idxmax()
glue("best_baseline", LABEL[best_name], display=False)
glue("best_baseline_f1", float(cell_means[best_name].mean()), display=False)
glue("gap_oracle", float((cell_means["mpt"] - cell_means["oracle"]).mean()), display=False)
half = table_long.groupby(["dataset", "fraction", "method"])["f1"].apply(
    lambda v: (mean_interval(v.to_numpy()).high - mean_interval(v.to_numpy()).low) / 2)
glue("half_median", float(half.median()), display=False)
glue("half_max", float(half.max()), display=False)
glue("t_mult", float(student_t.ppf(0.975, len(SEEDS) - 1)) if len(SEEDS) > 1 else float("nan"), display=False)
growth_t = pd.DataFrame(growth_rows).groupby("dataset")["growth"]
glue("growth_table_text", "; ".join(f"{name}: median {growth_t.median()[name]:.2f}, range {growth_t.min()[name]:.2f} "
                                    f"to {growth_t.max()[name]:.2f}" for name in P.datasets), display=False)
glue("lite_mean_text", ", ".join(f"{name} {cell_means.loc[name, 'mpt_lite'].mean():.3f}" for name in P.datasets),
     display=False)

# %% [markdown]
# Over the {glue:text}`n_cells` data set × fraction cells (model {glue:text}`table_model`,
# {glue:text}`table_seconds:.0f` s in all), MPT's mean is above every baseline's mean in
# {glue:text}`mpt_wins` cells (a count of means, not a test: the claims table decides). Averaged
# over cells, MPT scores {glue:text}`mpt_mean_f1:.3f`, MPT-lite {glue:text}`lite_mean_f1:.3f`, the
# baseline with the highest average ({glue:text}`best_baseline`) {glue:text}`best_baseline_f1:.3f`;
# MPT − oracle is {glue:text}`gap_oracle:.3f` on average.
#
# Many rows of the claims table below end "inconclusive at this scale" for a plain reason: with
# {glue:text}`n_seeds` seeds the 95 % interval is the mean ± {glue:text}`t_mult:.2f` standard errors,
# and the half-widths of the cells above have median {glue:text}`half_median:.3f` F1 and reach
# {glue:text}`half_max:.3f` (cells where every seed scores the same have width zero): the same
# order as the effects the claims are about.
#
# MPT-lite's mean F1 per data set is {glue:text}`lite_mean_text`. One diagnostic of MPT-lite and of
# MPT's predicted residual on the table runs: the growth factor $g_t$ at the last round (the factor
# by which the remaining classes' within-class spread changed since the departure, which scales the
# stored residual) is {glue:text}`growth_table_text`. A $g_t$ far from one scales the stored residual
# by that much whether or not the rare class's offset followed; this chapter does not establish
# that it is the cause of MPT-lite's scores or of MPT's variance on UCI (that would need a run with
# $g_t$ fixed to one), it only shows the factor the predictions applied.
#
# (mpt-ldc-steps)=
# ### LDC and the number of Adam steps of its map
#
# Earlier builds of this chapter trained LDC's map with mini-batches of {glue:text}`ldc_batch_old`
# "to save time" and LDC's rare-class F1 on UCI digits collapsed to about zero while it stayed
# near MNIST's other trackers. It was not a bug in {func}`fedlib.tracking.ldc_fit_map`: a
# remaining {glue:text}`ldc_check_dataset` client holds {glue:text}`ldc_client_n:.0f` training samples
# on average (the figure's fraction, mean over clients and seeds), about one mini-batch of
# {glue:text}`ldc_batch_old`, so the map got {glue:text}`ldc_steps_old:.0f` Adam steps per round on
# average ({glue:text}`ldc_epochs` epochs at learning rate {glue:text}`ldc_lr` from the identity;
# {glue:text}`ldc_steps_new:.0f` with mini-batches of {glue:text}`ldc_batch`), too few to fit; the per-round under-correction accumulates over the rounds in the low-variance directions
# that the Mahalanobis readout weighs most. (Offline, with the map's old mini-batch, each single
# round's map still moved the rare-class test mean closer than the identity, while the composed
# map ended far from the oracle in Mahalanobis distance though close in Euclidean distance.) The
# book now uses mini-batches of {glue:text}`ldc_batch` (the default of `ldc_fit_map`), and the
# control row of the claims table re-runs LDC alone with the old mini-batch on the same seeds
# (`tests/test_tracking.py` checks the step limit on a planted map): LDC's F1 on {glue:text}`ldc_check_dataset` is {glue:text}`ldc_f1_new:.3f` with the new
# mini-batch and {glue:text}`ldc_f1_old:.3f` with the old one. The old-batch runs send LDC's
# payload only; their final backbone, compared parameter by parameter with the table run's of the
# same seed, is {glue:text}`backbone_same`.

# %%
ldc_rows, backbone_diff = [], []
for s in SEEDS:
    ds = data(LDC_CHECK, s)
    mfn = model_fn_for(P.table_model, ds)
    sc_l = scenario(ds, fig_fraction, s)
    res = run_federated(algorithm(s, payload=METHOD_PAYLOAD["ldc"], ldc_batch=LDC_BATCH_OLD), sc_l.federation, mfn,
                        loop_config(s))
    h = evaluate_history(res.server, sc_l.federation.global_test, mfn, rare_class=P.rare_class, rounds=[P.rounds],
                         reg=TRACK.reg)
    ldc_rows.append(float(h[(h["method"] == "ldc") & (h["metric"] == "f1")]["value"].iloc[0]))
    other = model_arrays(res.server)
    backbone_diff.append(max(float((other[k].double() - v.double()).abs().max()) for k, v in ldc_check_models[s].items()))
glue("backbone_same", "identical (largest parameter difference 0)" if max(backbone_diff) == 0 else
     f"not identical (largest parameter difference {max(backbone_diff):.2g})", display=False)
sizes_ = np.concatenate([np.asarray(v) for v in client_sizes.values()])
glue("ldc_client_n", float(sizes_.mean()), display=False)
for key, b in [("ldc_steps_old", LDC_BATCH_OLD), ("ldc_steps_new", P.ldc_batch)]:
    glue(key, float(np.mean(np.ceil(sizes_ / b)) * P.ldc_epochs), display=False)
ldc_new = wide.xs((LDC_CHECK, fig_fraction), level=("dataset", "fraction"))["ldc"].loc[SEEDS].to_numpy()
glue("ldc_check_dataset", LDC_CHECK, display=False)
glue("ldc_f1_new", float(np.mean(ldc_new)), display=False)
glue("ldc_f1_old", float(np.mean(ldc_rows)), display=False)
pd.DataFrame({f"batch {P.ldc_batch}": ldc_new, f"batch {LDC_BATCH_OLD}": ldc_rows}, index=pd.Index(SEEDS, name="seed"))

# %% [markdown]
# ## Where the error comes from (the paper's Figure 6)
#
# The Mahalanobis distance (under the round's regularized pooled covariance) from each
# reconstruction to the oracle prototype, per round, mean over the figure runs' seeds; and, over
# the rounds after the departure, its relation to rare-class F1 (all seeds).

# %%
dist_s, f1_s = per_seed("dist_oracle"), per_seed("f1")
ABL = ["frozen", "barycentric", "stored_residual", "mpt_lite", "mpt_predicted", "mpt_measured", "mpt", "icarl", "sdc", "ldc"]
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for m in ABL:
    r_, mu, lo, hi = band("dist_oracle", m)
    line, = axes[0].plot(r_, mu, label=LABEL[m])
    if np.isfinite(lo).all():
        axes[0].fill_between(r_, lo, hi, color=line.get_color(), alpha=0.1, lw=0)
axes[0].axvline(P.departure_round - 0.5, color="grey", lw=1)
axes[0].set_xlabel("round")
axes[0].set_ylabel("Mahalanobis distance to the oracle prototype")
axes[0].legend(fontsize=7)
rhos = {}
for s in SEEDS:
    post = [r for r in dist_s[s].index if r >= P.departure_round]
    xs = np.concatenate([dist_s[s].loc[post, m].to_numpy() for m in ABL])
    ys = np.concatenate([f1_s[s].loc[post, m].to_numpy() for m in ABL])
    axes[1].scatter(xs, ys, s=8, label=f"seed {s}")
    rhos[s] = float(pd.Series(xs).corr(pd.Series(ys), method="spearman"))
axes[1].set_xlabel("distance to the oracle prototype")
axes[1].set_ylabel("rare-class F1")
axes[1].legend(fontsize=7)
fig.tight_layout()
plt.show()
glue("spearman", float(np.mean(list(rhos.values()))), display=False)
abl_final = seed_table(at("dist_oracle", last), "method", None, "value", digits=2).loc[ABL]
abl_final.index = [LABEL[m] for m in abl_final.index]
for m in ABL:
    glue(f"dist_{m}", fig_mean("dist_oracle", last, m), display=False)
alpha_series = hist[(hist["metric"] == "alpha")]["value"]
glue("alpha_mean", float(alpha_series.mean()) if len(alpha_series) else float("nan"), display=False)
growth = [float(fig_runs[s].server.meta.get("growth", float("nan"))) for s in SEEDS]
glue("growth_last", float(np.mean(growth)), display=False)


def relation(m, ref="stored_residual"):
    """Computed wording: is ``m`` closer to or farther from the oracle than ``ref`` at the last round (means)?"""
    a, b = fig_mean("dist_oracle", last, m), fig_mean("dist_oracle", last, ref)
    return f"{'closer to' if a < b else 'farther from'} the oracle ({a:.2f} against {b:.2f})"


glue("lite_vs_stored", relation("mpt_lite"), display=False)
glue("pred_vs_stored", relation("mpt_predicted"), display=False)
abl_final.rename(columns={"value": "distance at the last round"})

# %% [markdown]
# At the last round (means over seeds) the frozen prototype is {glue:text}`dist_frozen:.2f` from
# the oracle, the barycentric in-span part alone {glue:text}`dist_barycentric:.2f`, barycentric +
# stored residual {glue:text}`dist_stored_residual:.2f`, MPT {glue:text}`dist_mpt:.2f` (its
# prediction alone {glue:text}`dist_mpt_predicted:.2f`, its measurement alone
# {glue:text}`dist_mpt_measured:.2f`; the adaptive weight averaged $\alpha_t =$
# {glue:text}`alpha_mean:.2f` after the departure). Across methods and post-departure rounds the
# Spearman correlation between the distance and rare-class F1 is {glue:text}`spearman:.2f` on
# average over seeds (the claims table decides Figure 6 (b) on it).
#
# One mechanism to watch: MPT's predicted residual (and MPT-lite's) **grows with the spread of
# the remaining classes**. At the last round MPT-lite's growth factor is
# $g_t =$ {glue:text}`growth_last:.2f` (mean over seeds): the within-class spread of the classes
# still being trained has changed by that factor since the departure. The rare class is no longer
# trained, and its offset from the span need not follow it; whether scaling or transporting the
# stored residual helps is measured here against the stored residual left as it is: at the last
# round MPT-lite (scaled by $g_t$) is {glue:text}`lite_vs_stored`, and MPT's predicted residual
# alone (transported by $T_t$) is {glue:text}`pred_vs_stored` (means over seeds; the
# per-seed spread is in the band of the figure).
#
# ## Cost: communication and time (the paper's Figure 5)
#
# **Communication.** Each method alone, through the ledger: per seed, a short run per method whose
# clients send only that method's payload ({data}`fedlib.algorithms.mpt.METHOD_PAYLOAD`), on a
# quarter of the seed's data (message sizes depend on shapes, not on the number of samples), one
# local step per round; the bytes of the last round (after the departure, with SDC's and LDC's
# extras) per client, up and down, relative to FedAvg's.

# %%
COMM_METHODS = ["fedavg", "ccvr", "frozen", "icarl", "sdc", "ldc", "mpt_lite", "mpt"]
byte_rows = []
for s in SEEDS:
    ds = data(fig_name, s)
    small = scenario(ds.subset(np.arange(0, len(ds), 4)), fig_fraction, s)
    for m in COMM_METHODS:
        alg = algorithm(s, payload=METHOD_PAYLOAD[m], steps=1, history=False, ldc_epochs=1, ccvr_steps=1)
        cfg = LoopConfig(rounds=2, seed=s, events=(Event(2, DEPARTING, "leave"),))  # sizes do not depend on the round
        led = run_federated(alg, small.federation, fig_model_fn, cfg).ledger.to_frame()
        led = led[(led["round"] == 2) & ~led["kind"].str.startswith("eval")]
        byte_rows.append({"seed": s, "method": m, "bytes": led["bytes"].sum() / led["client"].nunique()})
comm_long = pd.DataFrame(byte_rows)
comm_long["relative"] = comm_long["bytes"] / comm_long["seed"].map(comm_long.query("method == 'fedavg'").set_index("seed")["bytes"])
comm_w = comm_long.pivot(index="seed", columns="method", values="relative")
comm = comm_w.mean().loc[COMM_METHODS].to_frame("bytes per client and round, relative to FedAvg")
for m in COMM_METHODS:
    glue(f"comm_{m}", float(comm_w[m].mean()), display=False)
comm.rename(index=LABEL).round(4)

# %% [markdown]
# **Time.** The extra work each method adds to a round, measured side by side on each figure run's
# final model and one remaining client's data: the clients' re-embedding and statistics (every
# prototype method), SDC's second embedding under the previous model, LDC's second embedding and
# map training, and the server's per-round work for all methods together (CCVR's virtual features
# and head re-training, MPT's reconstruction), each relative to a client's local training of a
# round (median of repeats).

# %%
def timed(fn, repeats=3):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


time_rows = []
for s in SEEDS:
    client = fig_scen[s].federation.clients[1]
    x, y = client.train.x, client.train.y
    model = fig_model_fn()
    arrays = fig_runs[s].server.arrays
    model.load_state_dict({k[len("model/"):]: v for k, v in arrays.items() if k.startswith("model/")})
    init = {k: v.clone() for k, v in model.state_dict().items()}

    def train_once():
        model.load_state_dict(init)
        local_train(model, x, y, TrainConfig(epochs=P.local_epochs, batch_size=BATCH, lr=P.lr), torch_generator(s, LOCAL_TRAIN))

    @torch.no_grad()
    def embed():
        model.eval()
        return model.embed(x).double()

    z_now = embed()
    z_old = z_now + 0.01 * torch.randn(z_now.shape, generator=torch_generator(s, LOCAL_TRAIN, 1), dtype=z_now.dtype)  # a stand-in old embedding
    t_train = timed(train_once)
    model.load_state_dict(init)
    t_stats = timed(lambda: ClassMoments.from_features(embed(), y, 10))
    t_sdc = timed(lambda: (embed(), sdc_client_sums(z_old, z_now, z_now.mean(0))))
    t_ldc = timed(lambda: (embed(), ldc_fit_map(z_old, z_now, epochs=P.ldc_epochs, batch_size=P.ldc_batch,
                                                generator=torch_generator(s, LOCAL_TRAIN))), repeats=1)
    server = float(fig_runs[s].server_seconds[-1])  # the server's aggregation (all methods), last round
    for part, t in [("re-embedding + statistics (every prototype method)", t_stats), ("SDC extra (client)", t_sdc),
                    ("LDC extra (client)", t_ldc), ("server, all methods incl. CCVR (per round)", server)]:
        time_rows.append({"seed": s, "part": part, "relative": t / t_train})
time_long = pd.DataFrame(time_rows)
time_table = seed_table(time_long, "part", None, "relative", digits=2).rename(
    columns={"relative": "relative to one client's local training"})
time_w = time_long.pivot(index="seed", columns="part", values="relative")
for key, part in [("stats", "re-embedding + statistics (every prototype method)"), ("sdc", "SDC extra (client)"),
                  ("ldc", "LDC extra (client)"), ("server", "server, all methods incl. CCVR (per round)")]:
    glue(f"time_{key}", float(time_w[part].mean()), display=False)
time_table

# %%
t_stats_m = float(time_w["re-embedding + statistics (every prototype method)"].mean())
overhead_time = {"fedavg": 0.0, "ccvr": t_stats_m, "frozen": t_stats_m, "icarl": t_stats_m,
                 "sdc": t_stats_m + float(time_w["SDC extra (client)"].mean()),
                 "ldc": t_stats_m + float(time_w["LDC extra (client)"].mean()), "mpt_lite": t_stats_m, "mpt": t_stats_m}
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for m in COMM_METHODS:
    f1m = fig_mean("f1", last, m)
    for ax, xv in zip(axes, [float(comm_w[m].mean()), overhead_time[m]]):
        ax.scatter(xv, f1m)
        ax.annotate(LABEL[m], (xv, f1m), fontsize=7)
axes[0].set_xscale("log")
axes[0].set_xlabel("bytes per client and round, relative to FedAvg")
axes[1].set_xlabel("extra client time per round, relative to local training")
for ax in axes:
    ax.set_ylabel("final rare-class F1 (mean over seeds)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Every prototype method pays for the class statistics: with the shared Mahalanobis readout they
# all send one $d\times d$ matrix per client and round, so frozen, iCaRL and MPT-lite already cost
# {glue:text}`comm_frozen:.3f` × FedAvg's bytes, MPT {glue:text}`comm_mpt:.3f` × (one more
# $d\times d$ matrix: the rare class's, for its noise estimate), SDC {glue:text}`comm_sdc:.3f` ×,
# LDC {glue:text}`comm_ldc:.3f` × (a $d\times d$ map) and CCVR {glue:text}`comm_ccvr:.3f` × (a
# covariance per class). The paper's Figure 5 (a) orders the lighter methods differently (there
# MPT-lite sends "$K+d+1$ scalars in total" and no covariance); here the readout needs one, which
# the claims table states as the substitution of the communication rows. In time, re-embedding
# costs {glue:text}`time_stats:.2f` × a client's local training, SDC adds
# {glue:text}`time_sdc:.2f` ×, LDC {glue:text}`time_ldc:.2f` × and the server's work for all
# methods together {glue:text}`time_server:.2f` × (the benchmark `tests/bench_mpt.py` measures
# MPT's server cost alone at $d = 512$).
#
# ## MPT's settings
#
# MPT's tracking settings ({class}`fedlib.tracking.TrackingConfig`: the relative ridge of Eq. (1),
# $\lambda_\Sigma$ of Eq. (3), the affine span, the rare-sample noise estimate, the Euclidean
# metric of Eq. (7)) are **not selected at run time**: the chapter uses the defaults. The paper
# gives none of their values; the defaults were fixed in the commit that introduced fedlib's
# tracker, with reasons from the derivations (the affine span makes the reconstruction exact at
# the departure, the ridge is scale-free, the noise estimate is the method of moments of
# {ref}`chapter-mpt-derivations`); the repository holds no selection code and no record of a search
# over them, and this chapter does not change them after seeing its numbers. Exercise 3 varies
# them; a reader who picks one from the results should pick it on a validation split (e.g. a part of
# the remaining clients' data, {data}`fedlib.rng.VALIDATION`), not on the global test set the
# claims use.
#
# ## Claims
#
# The paper's claims against our measurements, decided by the rules declared above (each row: the
# quotation and its section, the quantity, our mean paired difference with its 95 % interval and
# the number of seeds, the rule, the verdict, and the substitution that affects it).

# %%
results = []
for name in P.datasets:
    bs = by_seed.loc[name].loc[SEEDS]
    results.append(evaluate(CLAIMS[f"beats-{name}"], bs["mpt"].to_numpy(), bs["best_baseline"].to_numpy()))
    results.append(evaluate(CLAIMS[f"oracle-{name}"], bs["mpt"].to_numpy(), bs["oracle"].to_numpy()))
last_f1 = {s: f1_s[s].loc[last] for s in SEEDS}
last_d = {s: dist_s[s].loc[last] for s in SEEDS}
after = [r for r in dist_s[SEEDS[0]].index if P.departure_round < r <= P.departure_round + STORED_ROUNDS]
early_d = {s: dist_s[s].loc[after].mean() for s in SEEDS}  # mean over the first rounds after the departure round
col = lambda frames, m: np.array([frames[s][m] for s in SEEDS])  # noqa: E731
results.append(evaluate(CLAIMS["frozen"], col(last_f1, "frozen"), np.array([f1_s[s].loc[pre_round, "frozen"] for s in SEEDS])))
results.append(evaluate(CLAIMS["lite-cnn"], col(last_f1, "mpt_lite"), col(last_f1, "mpt")))
all_seed = wide.groupby("seed").mean().loc[SEEDS]
results.append(evaluate(CLAIMS["lite-mlp"], all_seed["mpt_lite"].to_numpy(), all_seed["mpt"].to_numpy()))
results.append(evaluate(CLAIMS["fig6b"], np.array([rhos[s] for s in SEEDS])))
results.append(evaluate(CLAIMS["fig6a-stored"], col(early_d, "stored_residual"), col(early_d, "barycentric")))
stored_check = pd.DataFrame({"barycentric only": col(early_d, "barycentric"),
                             "barycentric + stored residual": col(early_d, "stored_residual")},
                            index=pd.Index(SEEDS, name="seed"))
glue("stored_rounds_text", ", ".join(map(str, after)), display=False)
glue("stored_seed_text", "; ".join(f"seed {s}: {r['barycentric + stored residual']:.2f} against {r['barycentric only']:.2f}"
                                   for s, r in stored_check.iterrows()), display=False)
results.append(evaluate(CLAIMS["fig6a-update"], col(last_d, "mpt"), col(last_d, "stored_residual")))
results.append(evaluate(CLAIMS["fig6a-bary"], col(last_d, "mpt"), col(last_d, "barycentric")))
results.append(evaluate(CLAIMS["comm-mpt"], comm_w.loc[SEEDS, "mpt"].to_numpy(), comm_w.loc[SEEDS, "mpt_lite"].to_numpy()))
results.append(evaluate(CLAIMS["comm-ccvr"], comm_w.loc[SEEDS, "ccvr"].to_numpy(), comm_w.loc[SEEDS, "mpt"].to_numpy()))
results.append(evaluate(CLAIMS["time-ldc"], time_w.loc[SEEDS, "LDC extra (client)"].to_numpy()))
results.append(evaluate(CLAIMS["ldc-batch"], ldc_new, np.array(ldc_rows)))
counts = tally(results)
glue("n_holds", counts["holds"], display=False)
glue("n_not", counts["does not hold"], display=False)
glue("n_inconclusive", counts["inconclusive at this scale"], display=False)
glue("n_claims", sum(counts.values()), display=False)
glue("total_seconds", float(time.perf_counter() - t_start), display=False)
show(results, digits=3)

# %% [markdown]
# The Figure 6 (a) "initial gap" row averages the distance over rounds {glue:text}`stored_rounds_text`;
# per seed, barycentric + stored residual against barycentric only: {glue:text}`stored_seed_text`.
#
# Of the {glue:text}`n_claims` claim rows (the controls are not counted), {glue:text}`n_holds` hold,
# {glue:text}`n_not` do not hold and {glue:text}`n_inconclusive` are inconclusive at this scale.
# This chapter ran in {glue:text}`total_seconds:.0f` s at this profile.
#
# ## Exercises
#
# 1. **More remaining samples.** Set `fractions = [0.2, 0.5]`: as $N_t$ grows the adaptive weight
#    should move toward the measurement (the derivation's limit $\alpha_t \to 1$). Does MPT then
#    beat its prediction-only variant?
# 2. **Longer drift.** Set `rounds = 60` (keeping the profile's `departure_round`): does the frozen
#    prototype keep degrading, and does the stored residual (barycentric + stored residual) fall
#    behind MPT as in the paper's Figure 6 (a)? Read the Figure 6 (a) rows of the claims table.
# 3. **The paper's unstated choices.** In the cell after the parameters, set
#    `TRACK = TrackingConfig(span="linear")`, `TrackingConfig(noise="pooled")` or
#    `TrackingConfig(metric="whitened")` (the adaptive weight measured in the readout's metric)
#    and compare MPT's distance to the oracle and its F1: which choice matters at this scale? To
#    *choose* one, hold out part of the remaining clients' data as a validation split and compare
#    there, not on the global test set.
# 4. **LDC's steps.** In `PROFILES`, set the book profile's `ldc_batch` to
#    {glue:text}`ldc_batch_old` and re-run: which data set's LDC row of the fraction table moves,
#    and why (count the Adam steps per round a client's map gets)?
