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
# (chapter-cosmos-experiments)=
# # COSMOS: can pseudo-labels alone personalize clients of different architectures?
#
# ```{glue} claims_summary
# ```
#
# The rest of this chapter sets up the runs, shows them and decides every claim in the claims table
# at its end; the {doc}`glossary <../glossary>` defines the table's terms.
#
# COSMOS {cite:p}`cosmos` lets every client keep its own architecture: clients send only their
# soft pseudo-labels on a public unlabeled set $U$, the server groups them greedily by the
# $\ell_1$ distance of their hard label vectors (Algorithm 1, a threshold $B_0$), trains **one server model
# per cluster** on $U$ by distillation with a consistency regularizer, and sends the cluster
# model's labels back for the clients to distil on. The paper deploys each client's cluster
# model. This chapter re-makes its comparisons at a laptop's scale, in fedlib's one round loop,
# against the three model-agnostic baselines it names:
#
# * **FedMD** {cite:p}`fedmd`: one consensus (the mean of every client's soft labels), digested
#   by every client ({class}`fedlib.algorithms.fedmd.FedMD`);
# * **FedCT** {cite:p}`fedct`: hard labels up, their majority vote down, and each client trains
#   on its own data and the public set labelled by the vote together, as its paper's Algorithm 1
#   does ({class}`fedlib.algorithms.fedct.FedCT`);
# * **COMET** {cite:p}`comet`: k-means with a fixed $K$ on the pseudo-labels, each cluster's mean
#   distilled on its clients ({class}`fedlib.algorithms.comet.COMET`);
#
# and, with one architecture for everyone, against the personalized parameter-sharing methods
# Ditto {cite:p}`ditto`, FedBABU {cite:p}`fedbabu` and FedRep {cite:p}`fedrep` (FedAvg
# {cite:p}`fedavg` enters only through its bytes, which need no run).
# Every method of the first group runs with clients of **different architectures** in one
# federation ({class}`fedlib.models.ClientArchitectures`): the loop hands each client a model
# workspace of its own architecture, sends each client its own message
# ({meth}`fedlib.protocol.Algorithm.configure_train`) and refuses a parameter-sharing method on such
# a federation. The ledger counts pseudo-label bytes and parameter bytes alike. The derivations
# (Algorithm 1's diameter, Lemma 5.2, the contraction rate, the consistency gradient) are in
# {ref}`chapter-cosmos-derivations`.
#
# **Our scale.** The paper trains AlexNet, ResNet-18, MobileNet and SqueezeNet clients and a
# VGG-16 server on CIFAR-10/100, EMNIST and Tiny ImageNet. The book profile keeps the paper's
# partition (25 clients there, {glue:text}`n_clients` here), its public share and its
# hyper-parameters where they fit, but uses the UCI optical digits at 8 × 8 pixels
# ({glue:text}`n_images` images, bundled with scikit-learn), small CNNs and MLPs for the clients
# and an MLP for the server, so that the chapter runs in minutes on two CPU cores. The `paper`
# profile takes CIFAR-100 with MobileNetV2 and ResNet-18 clients where the files exist (`cifar_root`).

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke" (seconds), "book" (the default, minutes on 2 cores), "paper" (CIFAR-100)
seed = 0  # the first run seed; every run uses seed, seed + 1, ..., seed + n_seeds - 1
n_seeds = None  # run seeds of the headline claims (the main and one-architecture runs)
side_seeds = None  # the first seeds that also run everything else (mixtures, α, sensitivity, local training alone)
rounds = None  # communication rounds (iterations; the first is COSMOS's PTC phase)
n_clients = None  # clients (25 in the paper)
lam = None  # COSMOS's consistency weight λ (the paper: 5)
temperature = None  # the pseudo-labels' temperature T (0: hard labels; the paper: 1)
workers = 1  # processes the runs are spread over: 1 inside the book's parallel build; 2 on a 2-core machine running this alone
executor = None  # where the studies' cells run: None, the local process pool over workers; "ray", a local Ray instance; "auto" or "ray://HOST:PORT", a Ray cluster
progress = None  # a file that receives one line per finished cell (book/build.py --confirm shows it)
threads = 1  # torch CPU threads per process
cifar_root = None  # paper profile: folder holding cifar-100-python/
results_dir = None  # where tidy results are saved (None: not saved)
cache_dir = None  # where the studies keep each cell's frames (book/build.py gives the profile's own); None: no cache

# %% tags=["hide-input"]
import dataclasses
import functools

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from fedbook.claims import RESOLUTION_SHARE, Claim, Read, RegimeCheck, effect, regime_reading, regime_table
from fedbook.intervals import paired_interval, resolution_of
from fedbook.page import claims_report, format_bytes, glue_all, save_frames, setup, show_table
from fedbook.studies import cosmos_experiments as cosmos
from fedbook.studies.cosmos_experiments import BASE, METRICS, PFL, sweep_label, sweep_reads
from fedbook.study import Study, run_study
from fedlib.data import load_dataset

COMMON = dict(n_groups=5, alpha=5.0, pool_fraction=0.1, public_share=0.2, temperature=1.0, lam=5.0, target_clusters=5,
              comet_k=5, lr_true=1e-3, lr_pseudo_candidates=(1e-4, 1e-3), sgd_lr=0.05, level=0.95, radius=0.01)
WEAK = dict(model="mlp", hidden=(16,))  # the weaker client model of the weak-heavy mixture
SMALL = dict(model="cnn", width=8, feature_dim=32)
PROFILES = {
    "smoke": dict(COMMON, dataset="uci8", n_samples=500, n_clients=5, rounds=2, n_seeds=2, side_seeds=2, sweep_rounds=2,
                  global_test_per_class=5, pretrain_epochs=3, local_epochs=1, server_epochs=1, server_steps=(6,), alphas=[1.0],
                  archs={"cnn": SMALL, "mlp": dict(model="mlp", hidden=(64,))},
                  mixtures={"one (cnn)": ["cnn"], "weak-heavy": ["cnn", "weak", "weak", "weak"]}, extra_archs={"weak": WEAK},
                  server=dict(model="mlp", hidden=(256,)), small_server=dict(model="mlp", hidden=(32,)),
                  sweeps={"λ": [0.0], "clusters": [1], "|U| share": [0.1]}),
    "book": dict(COMMON, dataset="uci8", n_samples=None, n_clients=20, rounds=4, n_seeds=6, side_seeds=3, sweep_rounds=2,
                 global_test_per_class=40, pretrain_epochs=20, local_epochs=3, server_epochs=3, server_steps=(18, 60),
                 alphas=[1.0],
                 archs={"cnn": SMALL, "mlp": dict(model="mlp", hidden=(64,))},
                 mixtures={"one (cnn)": ["cnn"], "weak-heavy": ["cnn", "weak", "weak", "weak"]}, extra_archs={"weak": WEAK},
                 server=dict(model="mlp", hidden=(256,)), small_server=dict(model="mlp", hidden=(32,)),
                 sweeps={"λ": [0.0, 10.0], "T": [0.0], "rule": ["median"], "clusters": [1, 8], "|U| share": [0.1], "clients": [10],
                         "server": ["small"]}),
    "paper": dict(COMMON, dataset="cifar100", n_samples=None, n_clients=25, rounds=10, n_seeds=5, side_seeds=3, sweep_rounds=10,
                  global_test_per_class=20, pretrain_epochs=10, local_epochs=2, server_epochs=5, server_steps=(200, 1000),
                  alphas=[1.0],
                  archs={"mobilenet": dict(model="mobilenet_v2"), "resnet": dict(model="resnet18")},
                  mixtures={"one (mobilenet)": ["mobilenet"], "weak-heavy": ["resnet", "cnn", "cnn", "cnn"]},
                  extra_archs={"cnn": dict(model="cnn", width=32, feature_dim=128)},
                  server=dict(model="resnet18"), small_server=dict(model="cnn", width=16, feature_dim=64),
                  sweeps={"λ": [0.0, 1.0, 10.0], "T": [0.0, 4.0], "rule": ["median", "max", "confidence"], "clusters": [1, 3, 8],
                          "|U| share": [0.1], "clients": [10, 15], "server": ["small"], "detach": [True]}),
}
P = setup(PROFILES, profile, threads=threads, n_seeds=n_seeds, side_seeds=side_seeds, rounds=rounds, n_clients=n_clients, lam=lam,
          temperature=temperature)
SEEDS = list(range(seed, seed + P.n_seeds))
SIDE = SEEDS[:min(P.side_seeds, P.n_seeds)]  # the seeds of everything that is not a headline claim's
STUDY = cosmos.COSMOSStudy.from_settings(P, cifar_root=cifar_root)  # what every run runs: fedbook.studies.cosmos_experiments
print(f"profile {P.profile}: seeds {SEEDS} (side seeds {SIDE}); {P.n_clients} clients, {P.rounds} rounds; {P.dataset}; "
      f"clients {STUDY.base_mix}")
# The pilot (the rule in the text below), before any claim's run, on a seed that no claim uses and half of the clients:
# each method's rate on pseudo-labels, 1e-4 or 1e-3. FedCT never reads it (tests/test_cosmos_study.py): it keeps 1e-4.
PILOT_CLIENTS = max(P.n_groups, P.n_clients // 2)
FIT_MIN = 95.0  # the server-fit regime check's threshold (%), declared before the pilot and the runs
PILOT = Study("pilot", functools.partial(cosmos.pilot_cell, STUDY, rounds=P.sweep_rounds, n_clients=PILOT_CLIENTS),
              grid={"lr": P.lr_pseudo_candidates, "method": ["FedMD", "COMET"]}, seeds=[seed + 1000])
# COSMOS's server budget, on the same pilot seed and clients: its rate and its optimizer steps per cluster and round together
SERVER_PILOT = Study("server_pilot", functools.partial(cosmos.server_pilot_cell, STUDY, rounds=P.sweep_rounds,
                                                       n_clients=PILOT_CLIENTS),
                     grid={"lr": P.lr_pseudo_candidates, "steps": list(P.server_steps)}, seeds=[seed + 1000])
assert P.lr_pseudo_candidates[0] == 1e-4  # the authors' rate first: a tie keeps the first candidate
server = cosmos.server_choice(run_study(SERVER_PILOT, workers=workers, threads=threads, cache=cache_dir, executor=executor,
                                        progress=progress)["server_pilot"], FIT_MIN)
pilot = cosmos.pilot_choice(run_study(PILOT, workers=workers, threads=threads, cache=cache_dir, executor=executor, progress=progress)["pilot"],
                            n_clients=PILOT_CLIENTS, rounds=P.sweep_rounds,
                            fixed={"FedCT": P.lr_pseudo_candidates[0], "COSMOS": server["lr"]})
STUDY = STUDY.with_pseudo_lrs(pilot.rates).with_server(server["lr"], server["steps"])
R = {**cosmos.parameters(P, STUDY, SIDE), **pilot.numbers(P.n_clients), "server_rule": server["text"],
     "server_lr": f"{server['lr']:g}", "server_steps": server["steps"], "fit_min": FIT_MIN,
     "server_met": "meets" if server["met"] else "does not meet (no candidate does; the highest fit is kept)"}

# %% [markdown]
# ## The setting and what we chose
#
# The partition is the paper's (and its authors' code): the classes are cut into
# {glue:text}`n_groups` disjoint label groups, each block of clients draws its group's classes by
# a Dirichlet with $\alpha =$ {glue:text}`alpha`, and {glue:text}`pool_pct:.0f` % of every
# client's data is pooled and dealt out again uniformly
# ({func}`fedlib.data.partition.grouped_dirichlet_partition`); so the planted structure is
# {glue:text}`n_groups` groups of clients. $U$ holds {glue:text}`public_pct:.0f` % of every class,
# held out from every client and every test set, its labels discarded
# ({func}`fedlib.distill.make_public_set`). Each client is evaluated on its own local test split.
# The clients alternate between the architectures of the mixture (client $k$ takes the
# $(k \bmod m)$-th).
#
# **From the paper and its authors' code**: KL distillation (batch mean), Adam, learning rate
# {glue:text}`lr_true` on true labels, $T =$ {glue:text}`temperature`, $\lambda =$ {glue:text}`lam`,
# $B_0$ raised until at most {glue:text}`target_clusters` clusters form (we search the smallest
# such $B_0$ exactly, {func}`fedlib.clustering.b0_for_clusters`), the mean as the cluster's label
# aggregate, clustering once after the pre-training phase. Algorithm 1's input is the clients'
# **hard label vectors** (the paper's Algorithm 1: each client's argmax on $U$, one-hot, so the
# distance counts the public images two clients label differently;
# {class}`fedlib.algorithms.cosmos.COSMOS`'s `cluster_on="hard"`, the default; `"soft"` clusters
# the soft labels, which puts a client of low margin near every group at once). **Our choices, where the paper is
# silent or our scale differs**: $E_0 =$ {glue:text}`pretrain_epochs` pre-training epochs,
# {glue:text}`local_epochs` local epochs per round and one distillation epoch on $U$ per round.
# The learning rate on pseudo-labels (the clients' distillation) is chosen **per method**, by a
# rule fixed before any run, on a pilot seed ({glue:text}`pilot_seed`) that no claim uses: each
# method gets the authors' $10^{-4}$ or ten times more, whichever gives *that method* the higher
# mean accuracy after {glue:text}`sweep_rounds` rounds (a tie keeps the authors' value), so no
# baseline runs at a rate tuned for COSMOS. The pilot {glue:text}`pilot_federation`. The
# pilot's means: {glue:text}`lr_rule`. COSMOS alone trains a server model, so its **server budget**
# is piloted as a whole on the same seed and clients: the rate (for its server and its clients)
# and the server's optimizer steps per cluster and round are chosen together, by the rule: the
# fewest steps at which the servers reproduce the argmax of their own targets on at least
# {glue:text}`fit_min:g` % of $U$ (the server-fit regime check below: the budget it asks for and no
# more), at the rate with the higher mean accuracy there (else the setting with the highest fit).
# The clusters' servers are trained together, one stacked step for every cluster
# ({func}`fedlib.algorithms.cosmos.distill_stacked`: the same random streams as one at a time). The candidates ({glue:text}`server_rule`) give
# {glue:text}`server_lr` with {glue:text}`server_steps` steps, which {glue:text}`server_met` the
# threshold on the pilot seed. The server's budget is a number of steps, not of epochs, so the
# sweeps that change $U$ or the server's architecture leave it unchanged.
# So COSMOS runs at {glue:text}`lr_cosmos`, FedMD at
# {glue:text}`lr_fedmd`, COMET at {glue:text}`lr_comet` and FedCT at {glue:text}`lr_fedct`
# ({glue:text}`lr_shared`). FedCT's runs never read this rate: every client takes part from the
# first round, and FedCT trains on its data and the vote-labelled $U$ together at the true-label
# rate (its Algorithm 1), so its two pilot scores would be equal and it keeps the authors' value
# without a pilot run. Our
# $U$ holds a few hundred images, so an epoch on it is a few optimizer steps where the paper's
# is hundreds, and the authors' rate may move our models too little; the rule lets the pilot say
# so, not the claims' results. The consistency term's ball $\mathcal{B}(x)$ is, in the paper
# (Section 4.1), the inputs within a radius $d$ of a transformed $x$, with $d$ "significantly
# smaller than the typical norm of $x$". A translation by one pixel (at most one in each
# direction, drawn) moves an image of $U$ by {glue:text}`shift_pct:.0f` % of its own norm on average, so we translate nothing and draw Gaussian noise whose expected norm is
# {glue:text}`radius_pct:.0f` % of the mean image norm on $U$ (COSMOS's `radius`, on the server and
# on the clients alike; ten times that radius, the first we tried, left the two-sided term non-convex
# at most of the convexity check's points on these digits, so the regime check below would have
# failed it): the augmentation moves an image of $U$ by {glue:text}`ball_pct:.0f` % of its
# norm on average (a recorded setting, not a check). The regime check reads what the analysis needs of the ball:
# the derivations' convexity check of the two-sided term, on the chapter's images, ball and λ, finds negative
# curvature at {glue:text}`ball_nonconvex_pct:.0f` % of its random parameter points (mean over seeds). COMET gets
# $K =$ {glue:text}`comet_k`, the planted number of groups (its best case). FedMD's digest uses
# the same KL as every other method (its paper: an L1 loss on logits after transfer learning on a
# labelled public set, which $U$ is not).
#
# ## The claims, declared before any run
#
# Accuracy is the mean over clients of each client's **pooled score**, in points: a client's
# local test split holds about {glue:text}`test_size:.0f` images, too few to measure it (one image
# is {glue:text}`one_image:.0f` points of one client), so each client's deployed model is scored on
# the class-balanced held-out global test set, each class's recall weighted by the client's own
# class mix (the ability `pooled` of {mod}`fedlib.metrics`); the worst-client and bottom-20 %
# columns are the tails of the same scores. Every interval is Student's t over the seeds, paired
# by seed ({mod}`fedbook.claims`): the two **headline** claims, those of the paper's abstract (COSMOS
# beats every model-agnostic baseline; it stays competitive with personalized methods), on
# {glue:text}`n_seeds` seeds, every other row on the first {glue:text}`n_side`. One image of the
# pool moves a mean accuracy by {glue:text}`res_mean:.2f` points: that is the resolution every
# accuracy row declares. Each row's smallest effect of interest $m$ comes from the book's one rule
# ({ref}`reading-claims`): a fixed share of the gain the paper reports for that comparison, else
# the default of the quantity's kind. The paper's result tables are not in its text and its prose
# gives no gain in numbers, so every accuracy row takes the default for points, $m =$
# {glue:text}`m_points:g` points ("better" must exceed it, "competitive" means within it), and the
# communication control the default for a base-10 log ratio, {glue:text}`m_log:g`. A row holds when
# its interval lies beyond $m$ in the claimed direction, does not hold when it lies short of $m$
# (smaller than claimed, or in the opposite direction), is inconclusive only while it straddles
# $m$, and is untestable at this resolution when the resolution is above
# {glue:text}`resolution_share:g` × $m$. A claim against "all" baselines, or that one setting is
# "the best", holds one paired interval per named comparator and holds when every one clears
# $m$; where a claim reads one baseline, it is COMET, the closest prior work in the paper's own
# words, named here before any run; none is picked from the test results. Four rows are the
# book's **controls**, not tests of the paper's claims (not counted): the clients' own models against the
# baselines; the
# communication ratio, which is an accounting identity (the model's parameters over $|U| \times
# C$ floats, fixed before any run: no run can make it true or false); Corollary 5.13 against local
# training alone, which speaks of sufficiently large $n$ and $T$ and so cannot be refuted at ours;
# and five clusters against one, near true by construction when the label groups are disjoint.
#
# **Regime checks**, declared with the rows they guard before any run ({class}`fedbook.claims.RegimeCheck`;
# a row whose check fails reads "untestable in this setting"): COSMOS's servers reproduce the argmax
# of their own targets on at least {glue:text}`fit_min:g` % of $U$ after the last round (the
# server is trained to its objective, so a comparison is not one of its budget); COSMOS's clusters
# have a purity of at least 0.9 against the planted label groups (both read from the runs each row reads); the
# two-sided consistency term at our ball keeps a linear client's objective convex at every random parameter point
# the derivations' check draws (Definition 5.4's regime); and,
# for the rows against the model-agnostic baselines, FedMD's and COMET's collaboration beats local
# training alone (each baseline's mean minus local training's, the lower one, at least 0 points),
# since otherwise "beats the baselines" compares COSMOS with local training. Where a quotation is cut
# ("[...]"), the part cut is a separate statement: its own row, or one this scale does not try
# (the row says which). Corollary 5.13's comparator, local training alone
# ({class}`fedlib.algorithms.cosmos.LocalOnly`), is COSMOS's own clients training on their own
# data with the same epochs and never receiving a target. The settings that vary the data are
# chosen so that only the variable changes: the weak-heavy mixture gives three clients in four a
# weaker model (an MLP with one hidden layer of 16 units) where the paper's robustness sentence
# speaks of "a high proportion of weaker models"; fewer clients are a subset of the default
# federation's clients and a smaller $U$ a class-balanced part of the default $U$, so each
# client's data is the same in both settings of those sweeps.

# %% tags=["hide-input"]
N_CLASSES = load_dataset(P.dataset, root=cifar_root).n_classes
RES_MEAN = resolution_of(P.global_test_per_class * N_CLASSES)  # one image of the pool (the class-balanced global test set)
RES_LOG = 0.01  # the declared resolution of a base-10 log ratio
# Every row's smallest effect of interest m by the book's one rule (fedbook.claims.effect). The paper's result tables
# (Tables 2-8) are not in its text and its prose gives no gain in numbers ("by a large margin", "consistently"), so no
# row has a paper gain to halve: every accuracy row takes the default for points, and a claim against every baseline of
# a tuple, which would take the smallest gain the paper reports over them, takes it too. A non-inferiority row
# ("competitive", "robust", "no further improvement") takes the same default as its tolerance.
ONE, WEAK_MIX = list(P.mixtures)[:2]  # one architecture for everyone; a high share of weaker client models
ALPHA_LOW = min(P.alphas)  # the more heterogeneous Dirichlet α
SUB = f"{R['data_label']}, clients {' + '.join(STUDY.base_mix)}, MLP server; {P.rounds} rounds"
SWEEP = (f"{P.sweep_rounds} rounds per sweep run, the first of them pre-training and clustering (the clients distil on the "
         f"server's labels in {P.sweep_rounds - 1} round(s) only); {len(SIDE)} seeds")
ABSTRACT = ("Experiments across benchmarks demonstrate that COSMOS consistently outperforms all model-agnostic FL baselines "
            "while remaining competitive with state-of-the-art personalized FL methods.")
LAMBDA = ("COSMOS is robust to moderate variations in λ, with performance remaining stable across a wide range of values and "
          "λ = 5 yielding the best overall results in our experiments.")
LAM_NEAR = min((v for v in P.sweeps.get("λ", []) if v > 0), key=lambda v: abs(np.log(v / P.lam)), default=None)  # a moderate λ
SATURATE = ("We observe that performance saturates once the number of clusters reaches approximately five, with no further "
            "improvement beyond this point.")
# Each claim reads a frame of cosmos.tidy's, made from the runs below: "main", "homogeneous" and "traffic" on every seed;
# "local" and "collaboration" on every seed too; "side", "mixtures", "alphas" and "alpha_change" on the side seeds; a sensitivity claim reads the frames named after its
# settings (sweep_label), which exist only where this profile sweeps them (a setting it does not try, e.g. "λ = None",
# has no frame: the claim is left out, undecided).
MORE_CLUSTERS = max((v for v in P.sweeps.get("clusters", []) if v > P.target_clusters), default=None)
FEWER = {s: min((v for v in P.sweeps.get(s, []) if v < d), default=None)  # every value tried is below these defaults
         for s, d in (("clusters", P.target_clusters), ("clients", P.n_clients), ("|U| share", P.public_share))}
mean = functools.partial(Read, column="mean")  # Read(frame, "mean", **rows): the mean client accuracy, one value per seed
# The regime checks, declared before the runs: what the setting must show for a row to test its sentence at all.
FIT = RegimeCheck("server reproduces its targets", "agreement of each cluster model's argmax on U with its targets' after "
                  "the last round, mean over clusters and seeds, %", Read("measures", "server_fit"), "at least", FIT_MIN,
                  "Eq. (1)'s server is the minimizer of its distillation objective in the analysis; a server that does not "
                  "reproduce its own targets makes a comparison one of the server's budget, not of the method")
PURE = RegimeCheck("clusters match the planted groups", "purity of COSMOS's clusters against the planted label groups, mean "
                   "over seeds", Read("measures", "purity"), "at least", 0.9,
                   "Algorithm 1's guarantee is about clients of one distribution sharing a cluster; clients placed in "
                   "another group's cluster are taught another group's classes, so the row would read the clustering's errors")
BALL = RegimeCheck("the consistency term keeps the objective convex", "share of random parameter points of a linear "
                   f"softmax client on {cosmos.BALL_IMAGES} images of U at which its objective with the two-sided consistency "
                   "term, at the chapter's ball and λ, has negative curvature off the logit-shift directions (the "
                   "derivations' convexity check), mean over seeds", Read("measures", "ball_nonconvex"), "at most", 0.0,
                   "the analysis (Definition 5.4) needs the client objective with the two-sided term to stay (strongly) "
                   "convex; a ball large against the images makes the term non-convex, and the analysis no longer speaks "
                   "of the runs")
COLLAB = RegimeCheck("the baselines' collaboration beats local training", "mean accuracy of FedMD and of COMET minus local "
                     "training alone's, the lower of the two means over every seed, points", Read("collaboration", "gain"),
                     "at least", 0.0, "where the baselines' collaboration does nothing, “beats the baselines” compares COSMOS "
                     "with local training, not with another way of collaborating", summary="min", by="method")
SERVER_CHECKS = (FIT, PURE, BALL)  # the rows that read the main runs' COSMOS


def server_checks(frame: str, purity: bool = True, **rows) -> tuple:
    """FIT and PURE read from the COSMOS runs a row reads (``frame``'s rows ``rows``), and BALL (the same ball
    and λ in every run but the λ sweep's)."""
    where = ", ".join(f"{k} = {v}" for k, v in rows.items() if k != "method")
    tail = f" ({frame} runs{', ' + where if where else ''})"
    fit = dataclasses.replace(FIT, quantity=FIT.quantity + tail, read=Read(frame, "fit", **rows))
    pure = dataclasses.replace(PURE, quantity=PURE.quantity + tail, read=Read(frame, "purity", **rows))
    return (fit, pure, BALL) if purity else (fit, BALL)


# the baselines' collaboration is measured at the default α and mixture only (local training alone runs there): a row at
# another α or mixture reads it from those runs, and says so
COLLAB_DEFAULT = dataclasses.replace(COLLAB, quantity=COLLAB.quantity + " (read from the default α and mixture's runs: "
                                     "local training alone runs only there)")
CLAIMS = [
    # m: default for points; every baseline: the smallest gain the paper reports over FedMD, FedCT, COMET would be m's
    # source, but Table 2's numbers are not in the text (Section 6: 'by a large margin', no number)
    Claim("beats", ABSTRACT.replace(" while remaining competitive with state-of-the-art personalized FL methods.", " [...]"),
          "Abstract; Section 6, Figure 2", "mean accuracy, COSMOS − each model-agnostic baseline, points", "greater", effect("points"),
          f"{SUB}; {P.n_seeds} seeds", resolution=RES_MEAN, versus=BASE, headline=True, regimes=(*SERVER_CHECKS, COLLAB),
          ours=mean("main", method="COSMOS"), baseline={b: mean("main", method=b) for b in BASE}),
    # m: default for points (a control of the book's: the paper reports no such comparison)
    Claim("beats-own", "Do COSMOS's clients' own models f_i (instead of the cluster models h_π(i) the paper deploys) beat every "
          "model-agnostic baseline?", "“beats”: it separates the server's models from what the clients learn",
          "mean accuracy, COSMOS's client models − each baseline, points", "greater", effect("points"), f"{SUB}; {P.n_seeds} seeds",
          kind="control", resolution=RES_MEAN, versus=BASE, regimes=(COLLAB,),
          ours=mean("main", method="COSMOS (client models)"), baseline={b: mean("main", method=b) for b in BASE}),
    # tolerance: default for points (Table 7's numbers are not in the text; 'competitive' gives no size)
    Claim("homogeneous", "[...] " + ABSTRACT.split(" baselines ")[1], "Abstract; Appendix D, Table 7",
          "mean accuracy with one architecture, COSMOS − each of Ditto, FedBABU, FedRep, points", "at least", effect("points"),
          f"our three personalized parameter-sharing baselines; {P.n_seeds} seeds", resolution=RES_MEAN, versus=PFL,
          headline=True, regimes=server_checks("homogeneous", method="COSMOS"), ours=mean("homogeneous", method="COSMOS"), baseline={b: mean("homogeneous", method=b) for b in PFL}),
    # m: default for points (Corollary 5.13 is a bound: no gain reported). A control: at our small n and T no verdict can
    # refute a statement about sufficiently large n and T, so the row only reports COSMOS against its clients' own training
    Claim("local", "Moreover, for sufficiently large n and T, personalization risk drops below the risk from local training alone.",
          "Section 5.4, Corollary 5.13", "mean accuracy, COSMOS − local training alone (the same clients' own training), points",
          "greater", effect("points"), f"n and T are small here ({P.n_clients} clients of a few dozen images, {P.rounds} rounds), so "
          "this scale cannot refute the corollary, which speaks only of sufficiently large n and T: a verdict other than "
          "“holds” says that the runs do not show COSMOS beating local training at this n and T, not that the corollary is false; "
          f"{P.n_seeds} seeds", kind="control", resolution=RES_MEAN, regimes=server_checks("main", method="COSMOS"),
          ours=mean("main", method="COSMOS"), baseline=mean("main", method="Local")),
    # m: default for points (Tables 5-6's numbers are not in the text)
    Claim("alpha-beats", "Across all datasets, COSMOS consistently outperforms model-agnostic baselines for all evaluated values "
          "of α.", "Appendix D, Tables 5-6", f"mean accuracy at α = {ALPHA_LOW:g}, COSMOS − each model-agnostic baseline, points",
          "greater", effect("points"), f"α = {ALPHA_LOW:g} against every baseline (α = {P.alpha:g} is “beats”); {len(SIDE)} seeds",
          resolution=RES_MEAN, versus=BASE, regimes=(*server_checks("alphas", method="COSMOS", alpha=ALPHA_LOW), COLLAB_DEFAULT),
          ours=mean("alphas", method="COSMOS", alpha=ALPHA_LOW),
          baseline={b: mean("alphas", method=b, alpha=ALPHA_LOW) for b in BASE}),
    # m: default for points (Tables 5-6's numbers are not in the text; 'degrades' gives no size)
    *[Claim(f"alpha-degrades-{m}", "While the absolute performance of all methods degrades as heterogeneity increases [...]",
            "Appendix D, Tables 5-6", f"mean accuracy of {m}, α = {P.alpha:g} − α = {ALPHA_LOW:g}, points", "greater", effect("points"),
            f"COSMOS and COMET only; {len(SIDE)} seeds", resolution=RES_MEAN,
            ours=mean("alphas", method=m, alpha=P.alpha), baseline=mean("alphas", method=m, alpha=ALPHA_LOW)) for m in ("COSMOS", "COMET")],
    # m: default for points (Tables 2, 5-6's numbers are not in the text; 'more pronounced' gives no size)
    Claim("alpha-gain", "[...] the relative advantage of COSMOS becomes more pronounced in highly non-IID regimes.",
          "Appendix D, Tables 5-6", f"(COSMOS − COMET at α = {ALPHA_LOW:g}) − (COSMOS − COMET at α = {P.alpha:g}), points: "
          "a difference of differences", "greater", effect("points"),
          f"COMET, the closest prior work (named before the runs), as the baseline; {len(SIDE)} seeds", resolution=RES_MEAN,
          versus="COMET", regimes=server_checks("alphas", method="COSMOS", alpha=ALPHA_LOW),
          ours=Read("alpha_change", "change", method="COSMOS", alpha=ALPHA_LOW),
          baseline=Read("alpha_change", "change", method="COMET", alpha=ALPHA_LOW)),
    # tolerance: default for points (Table 3's numbers are not in the text; 'robust' gives no size)
    Claim("mixtures", "Across all combinations, COSMOS remains robust to heterogeneity in client capabilities, including settings "
          "with a high proportion of weaker models (AlexNet) [...]", "Section 6, Figure 3",
          f"mean accuracy, (COSMOS with {R['weak_mix']} − with the default mixture) − (the same for COMET), points: COSMOS "
          "loses no more than the closest prior work when the weaker models take over (no loss beyond m)", "at least",
          effect("points"), f"three clients in four take a weaker model ({'MLP with one hidden layer of 16' if P.dataset == 'uci8' else 'a small CNN'}); "
          "robustness read against COMET's own change, since any method loses accuracy when its clients' models are weaker "
          f"(the paper's AlexNet is weaker than its peers by less than our 16-unit MLP is); {len(SIDE)} seeds",
          resolution=RES_MEAN, regimes=server_checks("mixtures", method="COSMOS", mixture=WEAK_MIX), versus="COMET",
          ours=Read("mixture_change", "change", method="COSMOS", mixture=WEAK_MIX),
          baseline=Read("mixture_change", "change", method="COMET", mixture=WEAK_MIX)),
    # m: default for points (Table 3's numbers are not in the text; 'substantial' gives no size)
    Claim("mixtures-edge", "[...] including settings with a high proportion of weaker models (AlexNet), maintaining substantial "
          "performance edge over baselines.", "Section 6, Figure 3", f"mean accuracy with {R['weak_mix']}, COSMOS − COMET, points",
          "greater", effect("points"), f"COMET, the closest prior work (named before the runs), as the baseline; {len(SIDE)} seeds",
          resolution=RES_MEAN, versus="COMET",
          regimes=(*server_checks("mixtures", method="COSMOS", mixture=WEAK_MIX), COLLAB_DEFAULT),
          ours=mean("mixtures", method="COSMOS", mixture=WEAK_MIX), baseline=mean("mixtures", method="COMET", mixture=WEAK_MIX)),
    # m: default for log10 ratio (a control; Section 1's '1-2 orders of magnitude' bounds the ratio, not its excess over one order)
    Claim("comm", "Is FedAvg's training traffic an order of magnitude (or more) above COSMOS's at this scale? An accounting "
          "identity, not evidence: the ratio is 2 × the model's parameters over |U| × C floats, set before any run.",
          "“reducing communication from parameter sharing by 1-2 orders of magnitude” (Section 1; Appendix C, Table 4)",
          "log10(FedAvg bytes ÷ COSMOS bytes) − 1, training traffic per client and round (above 0: an order of magnitude or more)",
          "greater", effect("log10 ratio"), "our client models are small (the ratio scales with the parameter count over |U| x C)",
          kind="control", resolution=RES_LOG, ours=Read("traffic", "log10_ratio", method="COSMOS"), baseline=1.0),
    # m: default for points; every other λ: Figure 9(a) reports no numbers, so no smallest gain over them
    Claim("lambda", LAMBDA.replace("COSMOS is robust to moderate variations in λ, with performance remaining stable across a "
                                   "wide range of values and", "[...]"), "Appendix D, Figure 9(a)",
          "mean accuracy, λ = 5 − each other λ tried, points", "greater", effect("points"), f"{cosmos.lambda_note(P.sweeps, P.lam)}; {SWEEP}",
          resolution=RES_MEAN, versus=tuple(sweep_label("λ", x) for x in P.sweeps.get("λ", [])) or None,
          ours=mean(sweep_label("λ", P.lam)), baseline=sweep_reads("λ", P.sweeps)),
    # tolerance: default for points (Figure 9(a): 'stable', no size)
    Claim("lambda-robust", LAMBDA.replace(" and λ = 5 yielding the best overall results in our experiments.", " [...]"),
          "Appendix D, Figure 9(a)", f"mean accuracy, λ = {LAM_NEAR:g} − λ = 5, points (no loss)" if LAM_NEAR is not None else
          "mean accuracy, a moderate λ − λ = 5, points (no loss)", "at least", effect("points"),
          (f"λ = {LAM_NEAR:g} as the moderate variation (the nearest non-zero λ tried); {SWEEP}" if LAM_NEAR is not None else
           "no non-zero λ other than 5 is tried at this profile, so this row is not decided here; the paper profile tries "
           f"λ = 1 and 10; {SWEEP}"), resolution=RES_MEAN, ours=mean(sweep_label("λ", LAM_NEAR)), baseline=mean(sweep_label("λ", P.lam))),
    # m: default for points; every other T: Figure 9(b) reports no numbers, so no smallest gain over them
    Claim("T", "We also observe that T = 1 performs best across datasets [...]", "Appendix D, Figure 9(b)",
          "mean accuracy, T = 1 − each other T tried, points", "greater", effect("points"),
          f"{cosmos.temperature_note(P.sweeps, P.temperature)}; Algorithm 1 clusters hard label vectors whatever T, so T "
          f"changes the targets only; {SWEEP}",
          resolution=RES_MEAN, versus=tuple(sweep_label("T", x) for x in P.sweeps.get("T", [])) or None,
          ours=mean(sweep_label("T", P.temperature)), baseline=sweep_reads("T", P.sweeps)),
    # m: default for points; every other rule: Figure 9(b) reports no numbers, so no smallest gain over them
    Claim("rule", "Additionally, mean aggregation consistently achieves the strongest performance among the evaluated aggregation "
          "strategies.", "Appendix D, Figure 9(b)", "mean accuracy, mean − each other aggregation rule, points", "greater", effect("points"),
          f"{', '.join(P.sweeps.get('rule', []))} as the other rule(s); {SWEEP}",
          resolution=RES_MEAN, versus=tuple(sweep_label("rule", x) for x in P.sweeps.get("rule", [])) or None,
          ours=mean(sweep_label("rule", "mean")), baseline=sweep_reads("rule", P.sweeps)),
    # m: default for points (Figure 7(a), Table 8's numbers are not in the text)
    Claim("clients", "As the number of clients increases, COSMOS continues to improve, benefiting from increased pseudo-label "
          "diversity at the server.", "Appendix D, Figure 7(a)",
          "mean accuracy of the same clients, in the larger federation − in the smaller one, points", "greater", effect("points"),
          f"the fewer clients are the first of each label group's block of the default federation, and both settings are "
          f"scored on those clients only: the same clients, the same data; {SWEEP}", resolution=RES_MEAN,
          ours=Read(sweep_label("clients", P.n_clients), f"kept_{FEWER['clients']}"),
          baseline=mean(sweep_label("clients", FEWER["clients"]))),
    # m: default for points (Figure 7(b), Table 8's numbers are not in the text)
    Claim("U", "Similarly, increasing |U| results in consistent performance gains.", "Appendix D, Figure 7(b)",
          "mean accuracy, the default |U| − a smaller one, points", "greater", effect("points"),
          f"the smaller U is a class-balanced part of the default one, every client's data the same in both, the server's "
          f"optimizer steps the same ({R['server_steps']} per cluster and round; the clients' one distillation epoch on U is "
          f"fewer steps on the smaller U); {SWEEP}",
          resolution=RES_MEAN, ours=mean(sweep_label("|U| share", P.public_share)),
          baseline=mean(sweep_label("|U| share", FEWER["|U| share"]))),
    # m: default for points (Figure 7(c), Table 8's numbers are not in the text)
    Claim("server", "Figure 7(c) shows that COSMOS further benefits from stronger server-side models.", "Appendix D, Figure 7(c)",
          "mean accuracy, the default server − a smaller one, points", "greater", effect("points"),
          f"MLP servers of two widths, the same optimizer steps ({R['server_steps']} per cluster and round); {SWEEP}",
          resolution=RES_MEAN, ours=mean(sweep_label("server", "default")), baseline=mean(sweep_label("server", "small"))),
    # m: default for points (Figure 8: no numbers)
    Claim("saturate", "In contrast, larger values of β (resulting in fewer clusters) lead to degraded performance, likely because "
          "grouping too many clients together reduces data similarity within each cluster.", "Appendix D, Figure 8",
          "mean accuracy, ~5 clusters − fewer (1), points", "greater", effect("points"), "a control: with disjoint label groups one "
          "cluster for all mixes five groups' classes in one server's targets, so the row is near true by construction, not "
          f"evidence for the sentence; targets of 1 and 5 clusters; {SWEEP}", kind="control",
          resolution=RES_MEAN, ours=mean(sweep_label("clusters", P.target_clusters)),
          baseline=mean(sweep_label("clusters", FEWER["clusters"]))),
    # tolerance: default for points (Figure 8: 'no further improvement', no size)
    Claim("saturate-more", SATURATE, "Appendix D, Figure 8", "mean accuracy, more clusters (8) − ~5, points (no gain)", "at most",
          effect("points"), f"a target of 8 clusters; {SWEEP}", resolution=RES_MEAN,
          ours=mean(sweep_label("clusters", MORE_CLUSTERS)), baseline=mean(sweep_label("clusters", P.target_clusters))),
    # tolerance: default for points (Figure 8: 'saturates', no size)
    Claim("saturate-flat", SATURATE, "Appendix D, Figure 8", "mean accuracy, more clusters (8) − ~5, points (no loss: a plateau)",
          "at least", effect("points"), f"a target of 8 clusters; {SWEEP}", resolution=RES_MEAN,
          ours=mean(sweep_label("clusters", MORE_CLUSTERS)), baseline=mean(sweep_label("clusters", P.target_clusters))),
]
SWEPT = {"lambda", "lambda-robust", "T", "rule", "clients", "U", "server", "saturate", "saturate-more", "saturate-flat"}


def swept_checks(claim: Claim) -> tuple:
    """A swept row's checks, read from each setting it compares (its own runs): the server fit in each and BALL; the
    purity too, except where the number of clusters is the variable (one cluster for five groups is impure by design)."""
    reads = [claim.ours, *(claim.baseline.values() if isinstance(claim.baseline, dict) else [claim.baseline])]
    frames = list(dict.fromkeys(r.frame for r in reads if isinstance(r, Read)))
    checks = [c for f in frames for c in server_checks(f, purity=not claim.key.startswith("saturate"))[:-1]]
    return (*checks, BALL)


CLAIMS = [dataclasses.replace(c, regimes=swept_checks(c)) if c.key in SWEPT else c for c in CLAIMS]  # each setting's own checks
R.update(m_points=effect("points").m, m_log=effect("log10 ratio").m, resolution_share=RESOLUTION_SHARE, res_mean=RES_MEAN,
         alpha_low=ALPHA_LOW)

# %% [markdown]
# ## The runs
#
# On each of the {glue:text}`n_seeds` seeds, what the headline claims read: the four
# model-agnostic methods on the default mixture (evaluated every round, for the curves), and with
# one architecture COSMOS, Ditto, FedBABU and FedRep, and local training alone. On the first {glue:text}`n_side`
# seeds also: COSMOS and COMET on the weak-heavy mixture and at
# $\alpha =$ {glue:text}`alpha_low`; one COSMOS run per sensitivity setting other than the default
# ({glue:text}`sweep_rounds` rounds). The sensitivity default is no run of its own: the main COSMOS
# run is evaluated every round, and its scores after {glue:text}`sweep_rounds` rounds are the
# default's (every round's randomness is its own stream, so the first rounds of a longer run are
# those of a shorter one: `tests/test_cosmos_study.py` checks it). The main COSMOS run also gives
# its clients' own models ({func}`fedlib.run.evaluate_deployment` with `deploy_model="client"`).
# Each group of runs is a study ({class}`fedbook.study.Study`: a grid of settings, the seeds, and
# the function of {mod}`fedbook.studies.cosmos_experiments` that runs one cell), run in parallel over the seeds
# and cached cell by cell ({func}`fedbook.study.run_study`).

# %% tags=["hide-input"]
MAIN = Study("main", functools.partial(cosmos.main_cell, STUDY), seeds=SEEDS)  # the four methods, evaluated every round
HOMOGENEOUS = Study("homogeneous", functools.partial(cosmos.homogeneous_cell, STUDY), seeds=SEEDS)  # one architecture
LOCAL = Study("local", functools.partial(cosmos.local_cell, STUDY), seeds=SEEDS)  # local training alone, every seed
MIXTURES = Study("mixture", functools.partial(cosmos.mixture_cell, STUDY), grid={"mixture": list(P.mixtures)[1:]}, seeds=SIDE)
ALPHAS = Study("alpha", functools.partial(cosmos.alpha_cell, STUDY), grid={"alpha": P.alphas}, seeds=SIDE)
SWEEPS = Study("sweep", functools.partial(cosmos.sweep_cell, STUDY), grid={"setting": cosmos.sweep_settings(P.sweeps)}, seeds=SIDE)
ran = [run_study(study, workers=workers, threads=threads, cache=cache_dir, executor=executor, progress=progress)
       for study in (MAIN, HOMOGENEOUS, LOCAL, MIXTURES, ALPHAS, SWEEPS)]
runs = {name: frame for frames in ran for name, frame in frames.items()}
R["run_seconds"] = sum(frames.seconds for frames in ran)  # the cells' own time, cached ones included
F = cosmos.tidy(runs, STUDY, SIDE)  # the frames the tables and the claims read
R.update(cosmos.numbers(F, STUDY, n_classes=N_CLASSES))
save_frames(runs, results_dir)

# %% [markdown]
# (cosmos-table-2)=
# ## Model-agnostic methods on mixed architectures (the paper's Figure 2 and Table 2)
#
# Mean client accuracy per round (the clients' pooled scores, points; the mean over the
# {glue:text}`n_seeds` seeds, the band the 95 % interval), then the last round's table with the
# protocol's tails of the same scores: the worst client, the bottom 20 % of clients and the @25
# floor P@25 (the mean of the lowest quarter, {ref}`chapter-setting`). The first round is COSMOS's pre-training and clustering phase: the
# clients have trained on their own data only, and the cluster models have just been distilled.
# "Local" is local training alone (Corollary 5.13's comparator), on every seed.

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Mean client accuracy per round on the default mixture of architectures (COSMOS deploys each client's cluster model), mean over the seeds with the 95 % interval as a band.", "name": "fig-cosmos-curves"}, "image": {"alt": "Line plot of mean client accuracy in percent against the round for COSMOS, FedMD, FedCT and COMET, one line per method with a shaded band over seeds."}}
cosmos.plot_curves(F["curves"], level=P.level)
plt.show()

# %% tags=["hide-input"]
display(show_table(cosmos.main_table(F), best={m: "max" for m in METRICS}))

# %% [markdown]
# COSMOS's cluster models reach {glue:text}`cosmos_mean:.1f` % on average, its clients' own models
# {glue:text}`cosmos_own_mean:.1f` %, the baseline with the highest mean ({glue:text}`best_base`)
# {glue:text}`best_base_mean:.1f` %, local training alone {glue:text}`local_mean:.1f` %.{glue:text}`fedct_reading` Algorithm 1 formed {glue:text}`n_formed:.1f` clusters on
# average at $B_0 \approx$ {glue:text}`b0_first:.0f` (a sum of $\ell_1$ distances over the
# {glue:text}`n_public` public images); {glue:text}`diam_text`. The clusters' purity against the planted label groups (the share of
# clients whose cluster's majority group is their own) is {glue:text}`purity:.2f` for COSMOS and
# {glue:text}`comet_purity:.2f` for COMET's k-means.
#
# (cosmos-mixtures)=
# ## Architecture mixtures (the paper's Figure 3 and Table 3)
#
# The same federation with one architecture for every client (COSMOS only: it is the
# one-architecture run of the next section), the default two, and the weak-heavy mixture
# ({glue:text}`weak_mix`: three clients in four take the weaker model); then the default mixture
# at the Dirichlet $\alpha =$ {glue:text}`alpha_low` (more heterogeneous) against the default
# $\alpha =$ {glue:text}`alpha`; COSMOS against COMET, the last round's mean accuracy, every column
# on the first {glue:text}`n_side` seeds (those the weak-heavy mixture and
# $\alpha =$ {glue:text}`alpha_low` run on), so that the columns compare the same seeds.

# %% tags=["hide-input"]
for table in (cosmos.mixture_table(F, STUDY), cosmos.alpha_table(F, STUDY)):
    display(show_table(table, best={c: "max" for c in table.columns}))

# %% [markdown]
# (cosmos-table-7)=
# ## With one architecture: against parameter sharing (the paper's Table 7)
#
# Every client runs the same small CNN. The parameter-sharing methods train with SGD with
# momentum (learning rate {glue:text}`sgd_lr`, the book's usual choice for them in the other
# chapters) for {glue:text}`matched_epochs` local epochs per round over the same
# {glue:text}`rounds` rounds: as many epochs on their own data in all as COSMOS's clients (its
# pre-training plus its local epochs), so that neither side trains more. Ditto's global and
# personal models, and FedRep's head and body, share those epochs
# ({func}`fedbook.studies.cosmos_experiments.split_epochs`: {glue:text}`split_first` then
# {glue:text}`split_second` per round), so no method trains more than another. FedBABU fine-tunes for
# {glue:text}`ft_epochs` epoch(s) before deployment. Their clients train stacked, one batched step
# for every client ({mod}`fedlib.engines.vectorized`: the same batches and updates as one client at a
# time, to float32 rounding). COSMOS is the one-architecture run above.
# FedAvg, which does not personalize (no claim compares with it; the paper's Table 7 leaves it
# out too), is not run.

# %% tags=["hide-input"]
display(show_table(cosmos.homogeneous_table(F), best={m: "max" for m in METRICS}))

# %% [markdown]
# (cosmos-table-4)=
# ## Communication (the paper's Table 4)
#
# Bytes per client and round of training traffic, from the ledger (evaluation messages are left
# out: the paper's protocol evaluates the cluster model, which a deployment would send once). A
# soft pseudo-label matrix is $|U| \times C$ float32 numbers whatever the architecture; FedCT's
# hard labels are one byte per public image; FedAvg sends the model both ways, which is known
# without a run ({func}`fedbook.studies.cosmos_experiments.fedavg_bytes`: four bytes per parameter of the
# one-architecture CNN each way, the messages' few bytes of metadata aside).

# %% tags=["hide-input"]
display(show_table(cosmos.traffic_table(F), formats={"up": format_bytes, "down": format_bytes, "total": format_bytes},
                   digits={"FedAvg ÷ this": 1}))

# %% [markdown]
# COSMOS moves {glue:text}`cosmos_bytes` per client and round against {glue:text}`fedavg_bytes`
# for FedAvg with our small CNN ({glue:text}`cnn_params` parameters): a factor of
# {glue:text}`comm_ratio:.1f`. The factor is the model's parameter count over $|U| \times C$, so
# it is a property of the scale, not of the method. The paper's protocol also evaluates each
# client with its cluster's server model, which the client must download: {glue:text}`deploy_bytes`
# here (our MLP server), as much as {glue:text}`deploy_rounds:.1f` FedAvg rounds, sent once per
# deployment (the main runs above send it at every evaluation; the table leaves it out). The same
# arithmetic at the paper's scale (computed from fedlib's models, not run): CIFAR-100,
# $C =$ {glue:text}`c_paper`, $|U| =$ {glue:text}`u_paper` (20 % of the 50,000 training images),
# every message float32, both directions.

# %% tags=["hide-input"]
display(show_table(cosmos.paper_scale(), digits={"parameters ÷ pseudo-labels": 1},
                   formats={"parameter bytes per round": format_bytes, "pseudo-label bytes per round": format_bytes}))

# %% [markdown]
# There the factor is {glue:text}`paper_ratio_resnet:.1f` for ResNet-18 and
# {glue:text}`paper_ratio_mobilenet:.1f` for MobileNetV2: {glue:text}`paper_reading`. A per-round
# pseudo-label matrix of $|U| \times C$ floats is large. Larger factors need a smaller
# public set, fewer classes, compressed labels (FedCT's one byte per image; float16 halves them)
# or bigger models (the paper's text does not say how its Table 4 counted bytes).
#
# (cosmos-sensitivity)=
# ## Sensitivity (the paper's Figures 7-9)
#
# One COSMOS run per setting and seed on the first {glue:text}`n_side` seeds
# ({glue:text}`sweep_rounds` rounds; the default row, the same in every block, is the main COSMOS
# runs read after {glue:text}`sweep_rounds` rounds): the last round's mean accuracy, the clusters
# formed and their purity. Each block tries what its claim reads and no more.

# %% tags=["hide-input"]
display(show_table(cosmos.sensitivity_table(F, STUDY), digits={"clusters": 1, "purity": 2}, index=False))

# %% [markdown]
# At this scale {glue:text}`lam_reading`. For the detach, {glue:text}`detach_reading`:
# with the detach only the augmented view is pulled toward the clean one; without it the clean
# prediction is pulled toward the augmented one as well ({ref}`chapter-cosmos-derivations`
# compares the two gradients). The sweeps run {glue:text}`sweep_rounds` rounds against the main
# runs' {glue:text}`rounds`, so their default row differs from the main table's COSMOS row; the
# first of those rounds is the pre-training and clustering phase, so a setting that acts on the
# clients' distillation ($\lambda$, $T$) acts there for the remaining round(s) only. Each claim's
# row says what its thin sweep can and cannot test.

# %% [markdown]
# (chapter-cosmos-claims)=
# ## Claims
#
# The declarations above, decided on the paired differences over the seeds (the headline claims
# on {glue:text}`n_seeds`, the others on {glue:text}`n_side`). Of the {glue:text}`n_claims` claims
# this profile runs (the controls are not counted), {glue:text}`n_holds` hold,
# {glue:text}`n_not` do not hold ({glue:text}`n_not_smaller` smaller than claimed,
# {glue:text}`n_not_opposite` in the opposite direction), {glue:text}`n_inconclusive` are
# inconclusive at this scale and {glue:text}`n_untestable` are untestable (at this resolution, or
# in this setting; {ref}`reading-claims`); {glue:text}`headline_decided` of the
# {glue:text}`n_headline` headline claims are decided, and the median half-width of their 95 % intervals is {glue:text}`headline_half_width:.1f` points.

# %% tags=["hide-input"]
EVIDENCE = {"main": ("cosmos-table-2", "Table 2"), "homogeneous": ("cosmos-table-7", "Table 7"),
            **{frame: ("cosmos-mixtures", "the mixture and α tables") for frame in ("mixtures", "mixture_change", "alphas",
                                                                                     "alpha_change")},
            "traffic": ("cosmos-table-4", "Table 4"),
            **{frame: ("cosmos-sensitivity", "the sensitivity table") for frame in F
               if frame.split(" = ", 1)[0] in P.sweeps}}  # where each row's numbers are shown (a sweep's frames by its settings)
REPORT = claims_report(CLAIMS, F, total_seconds=P.elapsed(), evidence=EVIDENCE)
glue_all({**R, **cosmos.verdicts(REPORT, CLAIMS, comm_ratio=R["comm_ratio"])})

# %% [markdown]
# The regime checks, each once with its value, its threshold and the rows it guards:

# %% tags=["hide-input"]
display(show_table(regime_table(REPORT), formats={"value": ".3g"}, index=False))
glue_all({"regime_reading": regime_reading(REPORT, cosmos.TESTABLE_IF),
          "collab_gain": "; ".join(f"{b} {paired_interval(F['collaboration']['gain'].xs(b, level='method').to_numpy())}"
                                   for b in ("FedMD", "COMET"))})

# %% [markdown]
# {glue:text}`regime_reading`
#
# The baselines' collaboration, each one's mean accuracy minus local training alone's over every seed (points, the
# 95 % interval): {glue:text}`collab_gain`.

# %% [markdown]
# **Reading the table.** {glue:text}`undecided_text` The first headline claim, that COSMOS beats every model-agnostic
# baseline, is *{glue:text}`beats_verdict`* here (against the baseline nearest to failing it,
# {glue:text}`beats_binding`: COSMOS − {glue:text}`beats_binding` {glue:text}`beats_interval`
# points); the control that deploys the clients' own models instead of the cluster models reads
# *{glue:text}`own_verdict`*. The second, that COSMOS stays competitive with the personalized
# methods, is *{glue:text}`homogeneous_verdict`* (nearest to failing it
# {glue:text}`homog_binding`: {glue:text}`homog_interval` points). Against local training alone
# (Corollary 5.13) the verdict is *{glue:text}`local_verdict`* ({glue:text}`local_interval`
# points): {glue:text}`local_reading`. That COSMOS's edge over COMET grows as $\alpha$ falls is
# *{glue:text}`alpha_gain_verdict`* ({glue:text}`alpha_interval` points, a difference of
# differences); with a high share of weaker clients, robustness is *{glue:text}`mixtures_verdict`*
# and the edge over COMET *{glue:text}`mixtures_edge_verdict`*. The communication control is
# *{glue:text}`comm_verdict`* ({glue:text}`comm_reading`; see the arithmetic at the paper's scale
# above); it is an identity of the scale, not evidence about the method.
#
# **Why a verdict can differ from the paper's.** Our clients hold about {glue:text}`train_size:.0f`
# training images each ({glue:text}`data_label`) and train small CNNs and MLPs from scratch for
# {glue:text}`rounds` rounds; the server is an MLP, not a VGG-16, and $U$ holds
# {glue:text}`n_public` images. A cluster model is trained on $U$ alone: at this scale it sees
# fewer images than its clients' data combined, and its advantage in capacity is small. The
# sensitivity runs are shorter ({glue:text}`sweep_rounds` rounds). The whole page took
# {glue:text}`total_seconds:.0f` s to execute (the runs alone {glue:text}`run_seconds:.0f` s, each
# measured when it ran: a run read back from the study cache counts the time it took then).
#
# ## Exercises
#
# Each exercise re-runs this chapter with other parameters (e.g.
# `python book/build.py --only cosmos_experiments -p lam=1 --out runs/mine`) or changes a little
# code. The worked solutions are computed when the page is built from reduced runs (the first
# seed only).

# %% tags=["remove-cell", "solution"]
EXERCISES = Study("exercises", functools.partial(cosmos.exercise_cell, STUDY), seeds=[seed])  # reduced runs: the first seed
ex_runs = run_study(EXERCISES, cache=cache_dir)
glue_all({**cosmos.exercise_numbers(ex_runs["exercises"]), "ex_seconds": ex_runs.seconds})

# %% [markdown]
# ### Exercise 1: Cluster once, or every round?
#
# *(code)* The paper clusters once, after the pre-training phase, and keeps the assignment. Run
# COSMOS with `recluster=True` (every round's pseudo-labels are clustered again; each new cluster
# continues its seed client's previous cluster model). Does the grouping change, and does it help?
#
# :::{dropdown} Hint
# `dataclasses.replace(method, recluster=True)`, then compare
# {func}`fedlib.algorithms.cosmos.cosmos_history` of both runs: the `seeds` of every round.
# :::
#
# :::{dropdown} Worked solution
# On the first seed, after {glue:text}`sweep_rounds` rounds, clustering once gives {glue:text}`ex1_fixed:.1f` % and re-clustering every
# round {glue:text}`ex1_re:.1f` % (purity {glue:text}`ex1_re_purity:.2f`; the seeds changed in
# {glue:text}`ex1_changes` of the rounds). The adjusted Rand index between the two final
# groupings is {glue:text}`ex1_ari:.2f`: {glue:text}`ex1_reading`. After the pre-training phase
# the clients distil on their cluster's labels. In the run that clusters once, the largest
# $\ell_1$ distance between the pseudo-labels of two clients of one cluster was
# {glue:text}`ex1_diam_first:.0f` in round 1 and {glue:text}`ex1_diam_last:.0f` in round
# {glue:text}`ex1_diam_round`: {glue:text}`ex1_diam_reading`. One seed gives no interval; compare
# with the chapter's seed-to-seed spread before reading a difference.
# :::
#
# ### Exercise 2: Is it the cluster, or the server's capacity?
#
# *(code)* Evaluate every client with the model of cluster 0 instead of its own cluster's
# (overwrite `groups/labels` in the final server state and call
# {func}`fedlib.run.evaluate_deployment`). What does the drop say about where COSMOS's accuracy
# comes from?
#
# :::{dropdown} Hint
# The server state is a {class}`fedlib.messages.State`; `groups/labels` holds each client's cluster.
# :::
#
# :::{dropdown} Worked solution
# With every client on cluster 0's model the mean falls to {glue:text}`ex2_one_model:.1f` % from
# {glue:text}`ex2_fixed:.1f` %: {glue:text}`ex2_reading`.
# :::
#
# ### Exercise 3: Hard labels
#
# *(parameters only)* Re-run with `temperature=0` (COSMOS's clients send one-hot labels). Compare
# with FedCT, which also sends hard labels but one byte per image instead of $C$ floats.
#
# :::{dropdown} Hint
# The sensitivity table's `T` block has the book profile's answer for COSMOS.
# :::
#
# :::{dropdown} Worked solution
# The `T` block of the sensitivity table gives the answer on {glue:text}`n_side` seeds. A hard
# label carries the argmax only. Algorithm 1 clusters hard label vectors whatever $T$, so the
# clusters are the same; what changes is that the server model is distilled toward one-hot
# targets, which removes the "dark knowledge" of the soft labels.
# FedCT's message is $C \times 4$ times smaller than COSMOS's at $T = 0$ for the same information:
# COSMOS sends the one-hot rows as floats.
# :::
