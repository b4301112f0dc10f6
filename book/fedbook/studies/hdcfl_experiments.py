r"""HDC-FL's experiments as data: the studies the chapter runs, the frames its claims read, the
numbers its prose quotes, and its tables and figure (the chapter *HDC-FL: do head-derived encoder
mixtures lift the worst clients?*, ``notebooks/hdcfl_experiments.py``).

From HDC-FL (Dehghanpour, Noori, Tanghatari, Omidvar and Rabiee, "From Classifier Heads to Encoder
Prototypes: Personalized Federated Learning with Head-Derived Clustering", arXiv:2610.30075),
Section 4: the main comparison (Sections 4.2-4.3: mean, worst-client and bottom-20 % accuracy),
the ablations (Section 4.4, Appendix E), the grouping dynamics and the activation step (Appendix
D), the donor swap (Section 4.5, Appendix F) and the communication cost.

The chapter declares one study (:class:`fedbook.study.Study`) over the heterogeneity
``setting`` (:data:`SETTINGS`) and the run seeds, each cell a function of this module with the
chapter's :class:`HDCFLStudy` bound:

* :func:`run_cell`: every method trained on one setting and seed, the server-side ablations on
  the same HDC-FL run, its refresh history, its activation round, the donor swaps on its final
  cache, the ledger's bytes and the server's times: the frames ``main``, ``variants``,
  ``history``, ``activation``, ``donors``, ``costs`` and ``server``;
* the worked solutions' frames, computed by the first seed's cells on their own HDC-FL runs
  (:func:`exercise_frames`; :func:`exercise_cell` on its own): the run re-evaluated at other
  temperatures (``ex1``) and grouped by label histograms (``ex2``).

:func:`results` adds the frames the claims read, one row per seed (``macro``, ``donor_seed``,
``refreshes``, ``contrasts``, ``overlap``); :func:`scale` gives the resolutions declared before the
runs; :func:`setting_numbers`, :func:`results_numbers` and :func:`exercise_numbers` the numbers the
prose quotes; :func:`main_tables`, :func:`ablation_tables`, :func:`donor_view`, :func:`cost_table`
and :func:`plot_dynamics` what the chapter shows. The pieces of one run are free functions:
:func:`tail_metrics`, :func:`ledger_costs`, :func:`server_seconds`, :func:`donor_table`,
:func:`nearest_donor_gain`, :func:`two_histories`. Personalization's start is read on the run
as it stood at its activation round (:func:`activation_snapshot`): the grouping against a
reference (:func:`reference_groups`), whether the gate opened it (:func:`gate_opened`) and the
activation contrast, HDC-FL − FedAvg-SE on that same state (:func:`activation_contrast`; per
setting :func:`activation_table`, paired across settings :func:`contrast_pairs`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown
from matplotlib.ticker import MaxNLocator

from fedbook.claims import (DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING, ClaimResult,
                            smallest_resolvable)
from fedbook.intervals import defined_pairs, paired_interval, resolution_of, seed_table
from fedbook.page import format_bytes, show_table
from fedbook.tables import rows_where
from fedlib.algorithms import HDCFL, IFCA, Ditto, FedAvg, FedAvgFT, FedAvgSE, FedBABU, FedRep
from fedlib.algorithms.hdcfl import RAW_HISTORY_COLUMNS, HDCConfig, HDCServer, donor_ranking, donor_swap, refresh_history, with_variant
from fedlib.clustering import SilhouetteKMeans, assignment_agreement
from fedlib.data import ArrayDataset, load_dataset
from fedlib.federation import Federation, make_federation, make_rotation_federation
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.run import RunOptions
from fedlib.messages import DOWN, UP, Ledger, State, from_state
from fedlib.metrics import protocol_summary
from fedlib.models import build_model
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig, predict
from fedlib.validation import check_int

SETTINGS = ("label subsets", "Dirichlet", "rotation")
"""The heterogeneities (:meth:`HDCFLStudy.federation`): label subsets, a Dirichlet label skew,
rotation groups (covariate shift, :func:`fedlib.federation.make_rotation_federation`)."""
S_LS, S_DIR, S_ROT = SETTINGS
"""Each setting by name."""
BASELINES = ("FedAvg-SE", "FedRep", "FedBABU", "Ditto", "FedAvg-FT", "IFCA")
"""The baselines every seed trains (FedAvg-SE is HDC-FL's own run deployed with the shared encoder)."""
METHODS = ("HDC-FL", *BASELINES)
"""The rows of the main table."""
TAIL_METRICS = ("mean", "worst", "bottom-20 %", "gap")
"""The columns :func:`tail_metrics` returns (points)."""
REFRESH_RUNS = ("rank-r descriptors", "raw heads")
"""The two descriptors whose refresh histories the ``history`` frame holds, both from the same
HDC-FL run (the raw heads grouped on the same cache at the same refreshes, ``HDCConfig.compare_raw``)."""
RAW_RUN = "raw heads"
"""The raw-head ablation's row: a server-side variant of the same run (``descriptor="raw"``), after the others."""
DEFAULT_VARIANT = "HDC-FL (λ = 1, the default)"
"""The variant row that is HDC-FL's own deployment (copied from the run, not computed again)."""
SHARED_VARIANT = "λ = 0 (the shared encoder)"
"""The variant row that is FedAvg-SE's deployment (λ = 0 deploys the shared encoder: copied, not computed again)."""
ONE_GROUP_VARIANT = "k = 1 (population-level prototype)"
"""The variant row of one group: every client gets the prototype of the whole (stale) cache."""
DONOR_COLUMNS = {"rho_raw": "ρ (raw heads)", "rho_lowrank": "ρ (rank-r)", "auroc_helps": "AUROC helps",
                 "auroc_same_group": "AUROC same rotation", "ap_same_group": "AP same rotation",
                 "base_same_group": "same-rotation share", "mean_gain": "mean gain (points)",
                 "rho_overlap": "ρ(similarity, overlap)", "partial_rho": "partial ρ given overlap"}
"""The columns of the ``donor_seed`` frame (:func:`donor_seeds`): :func:`fedlib.algorithms.hdcfl.donor_ranking`'s keys, renamed."""
DATA_LABELS = {"uci8": "UCI digits at 8 x 8", "mnist5k": "MNIST-5k", "uci": "UCI digits", "cifar10": "CIFAR-10",
               "cifar100": "CIFAR-100"}
"""Each data set's name in the claims' substitutions and the prose."""
MODEL_LABELS = {"cnn": "a small CNN", "mlp": "an MLP", "resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2"}
"""Each model's name in the claims' substitutions and the prose."""
T_OLD, T_GAP = 0.05, 0.15
"""The temperature this chapter used before, and a cosine gap between two centroids (the prose's
arithmetic of the membership's sharpness, :func:`setting_numbers`)."""


def tail_metrics(frame: pd.DataFrame) -> dict[str, float]:
    """The protocol's tail summary (:func:`fedlib.metrics.protocol_summary`) of a run's tidy
    frame at its last evaluated round, in points: ``mean``, ``worst`` and ``bottom-20 %`` of the
    clients' pooled scores (each client's predictor on the held-out pool of its own distribution,
    the ability ``pooled`` of :mod:`fedlib.metrics`: hundreds of images where the clients' own
    test splits hold tens), and the ``gap`` (best - worst client).

    Examples
    --------
    >>> frame = pd.DataFrame([(1, k, metric, v) for k, v in enumerate([0.5, 0.75, 1.0, 1.0, 1.0])
    ...                       for metric in ("local", "pooled", "global", "unseen", "rare")], columns=["round", "client", "metric", "value"])
    >>> tail_metrics(frame)
    {'mean': 85.0, 'worst': 50.0, 'bottom-20 %': 50.0, 'gap': 50.0}
    """
    s = protocol_summary(per_client_table(frame))
    return {"mean": 100 * s["pooled"], "worst": 100 * s["worst_pooled"], "bottom-20 %": 100 * s["bottom20_pooled"],
            "gap": 100 * s["gap_pooled"]}


def ledger_costs(ledger: Ledger, rounds: int, n_clients: int) -> dict[str, float]:
    """A run's bytes from its ledger (:meth:`fedlib.messages.Ledger.per_client_and_round`): the
    upload and the training broadcast per client and round, over ``n_clients`` × ``rounds``,
    and the evaluation messages per client at the last evaluated round (after activation
    HDC-FL's is the client's own encoder; NaN for a run never evaluated).

    Examples
    --------
    >>> from fedlib.messages import Message
    >>> ledger = Ledger()
    >>> for r in (1, 2):
    ...     for k in (0, 1):
    ...         _ = ledger.record(r, k, DOWN, Message(arrays={"w": torch.zeros(4)}, kind="model"))
    ...         _ = ledger.record(r, k, UP, Message(arrays={"w": torch.zeros(2)}, kind="update"))
    >>> _ = ledger.record(2, 0, DOWN, Message(arrays={"w": torch.zeros(3)}, kind="eval:personalized"))
    >>> ledger_costs(ledger, rounds=2, n_clients=2)
    {'up per client and round': 8.0, 'training broadcast per client and round': 16.0, 'evaluation message per client, last round': 6.0}
    """
    check_int("rounds", rounds, low=1)
    check_int("n_clients", n_clients, low=1)
    evaluated = ledger.select(phase="eval")["round"]
    last = ledger.per_client_and_round(phase="eval", rounds=evaluated.max(), n_clients=n_clients, n_rounds=1) \
        if len(evaluated) else math.nan
    return {"up per client and round": ledger.per_client_and_round(UP, phase="all", n_clients=n_clients, n_rounds=rounds),
            "training broadcast per client and round": ledger.per_client_and_round(DOWN, phase="train", n_clients=n_clients,
                                                                                    n_rounds=rounds),
            "evaluation message per client, last round": last}


def server_seconds(seconds: Sequence[float], refresh_every: int) -> dict[str, float]:
    """The server's mean time per round (``seconds``: one per round, from round 1), over the
    refresh rounds (every ``refresh_every``-th) and over the others (NaN where there are none).

    Examples
    --------
    >>> server_seconds([1.0, 3.0, 2.0, 5.0], refresh_every=2)
    {'refresh': 4.0, 'other': 1.5}
    """
    check_int("refresh_every", refresh_every, low=1)
    refresh_rounds = set(range(refresh_every, len(seconds) + 1, refresh_every))
    return {"refresh": float(np.mean([t for r, t in enumerate(seconds, 1) if r in refresh_rounds])),
            "other": float(np.mean([t for r, t in enumerate(seconds, 1) if r not in refresh_rounds] or [np.nan]))}


def donor_table(server: State, fed: Federation, model_fn: Callable[[], torch.nn.Module], rank: int,
                groups: np.ndarray | None = None) -> pd.DataFrame:
    """Donor swaps (:func:`fedlib.algorithms.hdcfl.donor_swap`) on the cached pairs of ``server``,
    each scored by the accuracy (points) on the target client's local test split; the label
    supports are the clients' training classes, ``groups`` the planted groups (rotation) or
    ``None``."""
    model = model_fn()

    def score(i, weights):
        model.load_state_dict(weights)
        test = fed.clients[i].test
        return 100 * float((predict(model, test.x) == test.y).float().mean())

    return donor_swap(server, score, rank=rank, supports=fed.train_counts() > 0, groups=groups)


def nearest_donor_gain(table: pd.DataFrame) -> tuple[float, float]:
    """A donor-swap table's (:func:`fedlib.algorithms.hdcfl.donor_swap`) mean gain of each
    target's nearest-head donor (highest ``head_cosine``; the first on a tie) and of a random donor
    (the mean of the target's gains over all its donors, the expectation of a uniform draw), each
    averaged over the targets.

    Examples
    --------
    >>> t = pd.DataFrame({"target": [0, 0, 1, 1], "donor": [1, 2, 0, 2], "head_cosine": [0.9, 0.1, 0.2, 0.8],
    ...                   "gain": [1.0, -3.0, -2.0, 2.0]})
    >>> nearest_donor_gain(t)
    (1.5, -0.5)
    """
    nearest = table.loc[table.groupby("target")["head_cosine"].idxmax(), "gain"]
    return float(nearest.mean()), float(table.groupby("target")["gain"].mean().mean())


def two_histories(history: pd.DataFrame) -> pd.DataFrame:
    """A run's :func:`fedlib.algorithms.hdcfl.refresh_history` with ``compare_raw`` as two blocks of
    rows, ``descriptor`` :data:`REFRESH_RUNS`: the run's own (rank-r) refreshes, and the raw-head
    grouping of the same cache at the same refreshes (its ``k``, ``silhouette`` and ``ari``; the
    gate columns of the run; no membership, so ``entropy`` NaN).

    Examples
    --------
    >>> h = pd.DataFrame({"round": [2], "k": [3], "silhouette": [0.4], "ari": [np.nan], "entropy": [0.1],
    ...                   "active": [False], "raw_k": [2], "raw_silhouette": [0.2], "raw_ari": [np.nan]})
    >>> two_histories(h)[["descriptor", "k", "silhouette", "entropy"]].values.tolist()
    [['rank-r descriptors', 3, 0.4, 0.1], ['raw heads', 2, 0.2, nan]]
    """
    own = history.drop(columns=list(RAW_HISTORY_COLUMNS)).assign(descriptor=REFRESH_RUNS[0])
    raw = history.drop(columns=["k", "silhouette", "ari"]).rename(columns=dict(zip(RAW_HISTORY_COLUMNS, ("k", "silhouette", "ari"))))
    raw = raw.assign(entropy=np.nan, descriptor=REFRESH_RUNS[1])[own.columns]
    return pd.concat([own, raw], ignore_index=True)


CONTRAST_COLUMN = "mean activation contrast (points)"
"""The column of :func:`activation_table` that :func:`contrast_text` reads."""


def activation_table(activation: pd.DataFrame, settings: Sequence[str]) -> pd.DataFrame:
    """When and on what personalization starts, per setting, from the ``activation`` frame
    (:func:`activation_contrast`, one row per setting and seed): the activation round (mean,
    earliest and latest over the seeds), the share of the seeds whose gate opened it (the rest:
    the deadline), the mean ``k`` and the mean adjusted Rand index with the reference grouping at
    that round, and the mean activation contrast (:data:`CONTRAST_COLUMN`: HDC-FL − FedAvg-SE on
    the same state).

    Examples
    --------
    >>> act = pd.DataFrame({"setting": ["a", "a", "b"], "seed": [0, 1, 0], "round": [4.0, 8.0, 6.0],
    ...                     "gate opened": [1.0, 0.0, 1.0], "k": [2.0, 4.0, 3.0], "ARI with the reference": [1.0, 0.5, 0.2],
    ...                     "contrast": [2.0, 1.0, -1.0]})
    >>> activation_table(act, ["b", "a"]).loc["a"].tolist()
    [6.0, 4.0, 8.0, 50.0, 3.0, 0.75, 1.5]
    """
    g = activation.groupby("setting")
    table = pd.DataFrame({"activation round (mean)": g["round"].mean(), "earliest": g["round"].min(), "latest": g["round"].max(),
                          "gate opened (% of seeds)": 100 * g["gate opened"].mean(), "k (mean)": g["k"].mean(),
                          "ARI with the reference": g["ARI with the reference"].mean(), CONTRAST_COLUMN: g["contrast"].mean()})
    return table.reindex(settings)


def contrast_text(points: float) -> str:
    """The activation contrast for the prose: ``"+1.2 points"``, or why there is none (NaN).

    Examples
    --------
    >>> contrast_text(1.23), contrast_text(float("nan"))
    ('+1.2 points', 'not measurable (personalization never started)')
    """
    return "not measurable (personalization never started)" if math.isnan(points) else f"{points:+.1f} points"


def activation_snapshot(into: dict, round_: int, server: State, clients: Mapping[int, State]) -> None:
    """An observer of an HDC-FL run (``RunOptions.observe``): at the round whose refresh turns
    personalization on, keep a copy of the server state and the clients' states in ``into``
    (keys ``round``, ``server``, ``clients``), so that both deployments can be evaluated on the
    state of that round (:func:`activation_contrast`). Every other round leaves ``into`` as it is."""
    if into or "hdcfl/clients" not in server.arrays:
        return
    refreshed = from_state(HDCServer, server).hdcfl
    if refreshed is not None and refreshed.activated_round == round_:
        into.update(round=int(round_), server=copy.deepcopy(server), clients=copy.deepcopy(dict(clients)))


def reference_groups(fed: Federation, planted: np.ndarray | None, hdc: HDCConfig, seed: int) -> tuple[np.ndarray, str]:
    """The grouping HDC-FL's should match: the planted rotations where the setting plants them,
    else the clients grouped by their normalized label histograms
    (:class:`fedlib.clustering.SilhouetteKMeans` over HDC-FL's ``k`` range, seeded by ``seed``),
    the heterogeneity a label-skew head can see; and its name."""
    if planted is not None:
        return np.asarray(planted), "planted rotations"
    counts = fed.train_counts().astype(float)
    km = SilhouetteKMeans(hdc.k_min, hdc.k_max, seed=seed).fit(counts / counts.sum(axis=1, keepdims=True))
    return km.labels_, "label histograms"


def gate_opened(history: pd.DataFrame, round_: int, patience: int) -> bool:
    """Whether the gate, not the deadline, turned personalization on at ``round_``: the refreshes
    up to it (the run's own, rank-r) end in ``patience`` stable ones in a row.

    Examples
    --------
    >>> h = pd.DataFrame({"round": [2, 4, 6], "stable": [False, True, True]})
    >>> gate_opened(h, 6, patience=2), gate_opened(h, 4, patience=2)
    (True, False)
    """
    check_int("patience", patience, low=1)
    stable = history[history["round"] <= round_].sort_values("round")["stable"].tolist()
    return len(stable) >= patience and all(stable[-patience:])


ACTIVATION_COLUMNS = ("round", "gate opened", "k", "ARI with the reference", "contrast", "contrast worst", "contrast bottom-20 %")
"""The columns of the ``activation`` frame (:func:`activation_contrast`)."""


def activation_contrast(study: "HDCFLStudy", at: RunResult | None, fed: Federation, model_fn: Callable,
                        reference: np.ndarray, seed: int, final: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """The run at its activation round ``at`` (:meth:`HDCFLStudy.train_hdcfl`), read on one
    state: the round, whether the gate opened it (:func:`gate_opened`, 1 or 0), the chosen
    ``k``, the adjusted Rand index of that refresh's grouping with ``reference``
    (:func:`reference_groups`) and the **activation contrast**: HDC-FL's deployment minus
    FedAvg-SE's (the shared encoder with each client's head) on that same state, on the mean,
    the worst client and the bottom 20 % (points, :func:`tail_metrics`). No training lies between
    the two sides. All NaN where personalization never started. Where it started at the last
    round, the state is the run's final one and ``final`` (the run's own :func:`tail_metrics` of
    ``"HDC-FL"`` and ``"FedAvg-SE"``), when given, is read instead of evaluating both again."""
    if at is None:
        return dict.fromkeys(ACTIVATION_COLUMNS, math.nan)
    cfg = study.loop(seed)
    if final is not None and at.rounds_done == study.rounds:  # the final state: the main table's two deployments
        hdc, se = final["HDC-FL"], final["FedAvg-SE"]
    else:
        hdc = tail_metrics(evaluate_deployment(HDCFL(train=study.train, config=study.hdc, seed=seed), at, fed, model_fn, cfg))
        se = tail_metrics(evaluate_deployment(FedAvgSE(train=study.train), at, fed, model_fn, cfg))
    history = refresh_history(at.server)
    ids = at.server.arrays["hdcfl/clients"].numpy()
    return {"round": float(at.rounds_done), "gate opened": float(gate_opened(history, at.rounds_done, study.hdc.patience)),
            "k": float(history.iloc[-1]["k"]),
            "ARI with the reference": assignment_agreement(at.server.arrays["hdcfl/labels"].numpy(), reference[ids]),
            "contrast": hdc["mean"] - se["mean"], "contrast worst": hdc["worst"] - se["worst"],
            "contrast bottom-20 %": hdc["bottom-20 %"] - se["bottom-20 %"]}


@dataclass(frozen=True)
class HDCFLStudy:
    """What the chapter trains and deploys for every setting and run seed: the settings its
    cells (:func:`run_cell`, :func:`exercise_cell`) share.

    Trained (:func:`run_cell`): HDC-FL (evaluated every ``hdc.refresh_every`` rounds, for the
    dynamics; its server also groups the raw heads, for the raw-head ablation), FedRep,
    FedBABU, Ditto, FedAvg and IFCA (``ifca_k`` clusters). Deployed without training again:
    FedAvg-SE on HDC-FL's run (its shared encoder with each client's head), FedAvg-FT on
    FedAvg's, and each of ``variants`` on HDC-FL's final server state
    (:func:`fedlib.algorithms.hdcfl.with_variant`).

    Parameters
    ----------
    dataset, n_samples, cifar_root
        The data (:func:`fedlib.data.datasets.load_dataset`, a subset seeded by the run seed).
    model, width, feature_dim
        The model (:func:`fedlib.models.build_model`; ``width`` ``None``: the model's own sizes).
    n_clients, global_test_per_class, test_fraction
        The federation's clients, its global test set per class and each client's local test share.
    class_fraction, alpha, n_rotations
        The settings' heterogeneity: the share of the classes per client (label subsets), the
        Dirichlet concentration, the rotation groups.
    rounds : int
        Communication rounds.
    participation : float
        The share of the clients sampled each round (every method the same; the unsampled keep
        their last cached pair on HDC-FL's server).
    train, finetune : TrainConfig
        Every method's local training; FedBABU's and FedAvg-FT's fine-tuning before deployment.
    hdc : HDCConfig
        HDC-FL's server; personalization must start by ``rounds`` (``max_activation_round``). The
        run groups the raw heads of the same cache too (``compare_raw``), for the raw-head
        ablation's refresh diagnostics.
    variants : mapping of str to mapping
        The server-side ablations, in order: per name, the
        :class:`~fedlib.algorithms.hdcfl.HDCConfig` fields it changes (kept as a tuple of
        ``(name, change)`` pairs, so that the order is part of a cell's cache key);
        :data:`RAW_RUN` (``descriptor="raw"``) is added after them. No change
        (:data:`DEFAULT_VARIANT`) is the run's own deployment and ``lam=0`` alone the shared
        encoder's (FedAvg-SE's): both copied from the rows already computed.
    ifca_k : int
        IFCA's clusters.
    options : RunOptions
        How the training runs execute (``execution="vectorized"``: a round's clients stacked).

    Raises
    ------
    ValueError
        ``rounds`` or ``ifca_k`` that is not an integer >= 1, personalization that starts after
        the last round, or a variant named as the raw-head run.
    """

    dataset: str
    n_samples: int | None
    model: str
    width: int | None
    feature_dim: int | None
    n_clients: int
    global_test_per_class: int
    class_fraction: float
    alpha: float
    n_rotations: int
    rounds: int
    train: TrainConfig
    finetune: TrainConfig
    hdc: HDCConfig
    variants: Mapping[str, Mapping] | Sequence[tuple[str, Mapping]] = ()
    ifca_k: int = 4
    participation: float = 1.0
    test_fraction: float = 0.25
    cifar_root: str | None = None
    options: RunOptions = field(default_factory=RunOptions)

    def __post_init__(self) -> None:
        check_int("rounds", self.rounds, low=1)
        check_int("ifca_k", self.ifca_k, low=1)
        LoopConfig(rounds=self.rounds, participation=self.participation)  # checks the participation
        if not self.hdc.max_activation_round <= self.rounds:
            raise ValueError(f"max_activation_round={self.hdc.max_activation_round} must be <= rounds={self.rounds}: the "
                             "tables read HDC-FL after activation")
        pairs = self.variants.items() if isinstance(self.variants, Mapping) else self.variants
        object.__setattr__(self, "variants", tuple((str(name), dict(change)) for name, change in pairs))
        if RAW_RUN in self.variant_names[:-1]:
            raise ValueError(f"a variant may not be named {RAW_RUN!r}: that is the raw-head ablation's row")

    @property
    def variant_names(self) -> list[str]:
        """The rows of the ``variants`` frame, in order: the declared ablations, then :data:`RAW_RUN`."""
        return [name for name, _ in self.variants] + [RAW_RUN]

    def model_fn(self, ds: ArrayDataset) -> Callable[..., torch.nn.Module]:
        """The model builder for the inputs and classes of ``ds``."""
        extra = {} if self.width is None else dict(width=self.width, feature_dim=self.feature_dim)
        return functools.partial(build_model, self.model, in_channels=ds.x.shape[1], n_classes=ds.n_classes,
                                 input_size=ds.x.shape[-1], **extra)

    def federation(self, setting: str, seed: int) -> tuple[Federation, np.ndarray | None]:
        """The setting's federation of the data drawn with ``seed``, and each client's planted
        group (the rotation; ``None`` in the label-skew settings)."""
        if setting not in SETTINGS:
            raise ValueError(f"unknown setting {setting!r}; valid: {', '.join(SETTINGS)}")
        ds = load_dataset(self.dataset, n_samples=self.n_samples, seed=seed, root=self.cifar_root)
        common = dict(n_clients=self.n_clients, global_test_per_class=self.global_test_per_class,
                      test_fraction=self.test_fraction, seed=seed)
        if setting == "rotation":
            return make_rotation_federation(ds, n_rotations=self.n_rotations, **common)
        if setting == "label subsets":
            return make_federation(ds, partition="label_subset", class_fraction=self.class_fraction, **common), None
        return make_federation(ds, partition="dirichlet", alpha=self.alpha, min_size=10, **common), None

    def loop(self, seed: int) -> LoopConfig:
        """Every method's loop: ``rounds`` rounds, ``participation``, the run seed."""
        return LoopConfig(rounds=self.rounds, seed=seed, participation=self.participation)

    def train_hdcfl(self, setting: str, seed: int) -> tuple[Federation, np.ndarray | None, Callable, RunResult, RunResult | None]:
        """The setting's federation for ``seed``, its planted groups, the model builder, the
        HDC-FL run on it (evaluated at the last round; its server groups the raw heads too,
        ``compare_raw``) and the run as it stood at the end of its activation round (the server
        state and the clients' states of that round, :func:`activation_snapshot`; ``None`` if
        personalization never started): what :func:`run_cell` and :func:`exercise_cell` both start
        from, the same bits in both."""
        fed, groups = self.federation(setting, seed)
        model_fn = self.model_fn(fed.global_test)
        config = dataclasses.replace(self.hdc, compare_raw=True)  # the raw heads grouped too: diagnostics only
        snapshot: dict[str, Any] = {}
        run = run_federated(HDCFL(train=self.train, config=config, seed=seed), fed, model_fn, self.loop(seed),
                            dataclasses.replace(self.options, observe=functools.partial(activation_snapshot, snapshot)))
        at = dataclasses.replace(run, server=snapshot["server"], client_states=snapshot["clients"],
                                 rounds_done=snapshot["round"]) if snapshot else None
        return fed, groups, model_fn, run, at

    def deploy_variant(self, run: RunResult, fed: Federation, model_fn: Callable, config: HDCConfig,
                       seed: int) -> tuple[dict[str, float], State]:
        """An HDC-FL run's final server state refreshed again under ``config``
        (:func:`fedlib.algorithms.hdcfl.with_variant`), each client's deployment evaluated
        (:func:`fedlib.run.evaluate_deployment`): its :func:`tail_metrics`, and the state."""
        state = with_variant(run.server, run.rounds_done, config, seed)
        rows = evaluate_deployment(HDCFL(train=self.train, config=config, seed=seed), dataclasses.replace(run, server=state),
                                   fed, model_fn, self.loop(seed))
        return tail_metrics(rows), state


def run_cell(seed: int, setting: str, *, study: HDCFLStudy, temperatures: Sequence[float] = (),
             exercise_seed: int | None = None) -> dict[str, pd.DataFrame]:
    """The main study's cell: every run of one setting and seed, as the frames the chapter reads.
    With ``temperatures``, the cell of ``exercise_seed`` also computes the worked solutions'
    frames ``ex1`` and ``ex2`` on its own HDC-FL run (:func:`exercise_frames`: no run trained
    again), every other cell returns them empty.

    Returns
    -------
    dict of str to DataFrame
        ``main``: ``method`` and :data:`TAIL_METRICS` (points, the clients' pooled scores at the
        last round) for every method of :data:`METHODS`; ``variants``: ``variant`` (in
        :attr:`HDCFLStudy.variant_names` order), :data:`TAIL_METRICS`, and the last refresh's
        ``k`` and ``silhouette``; ``history``: :func:`two_histories` of the HDC-FL run;
        ``activation``: :func:`activation_contrast` at its activation round, against
        :func:`reference_groups`;
        ``donors``: :func:`donor_table` on its final cache; ``costs``: ``method`` and
        :func:`ledger_costs` (HDC-FL and FedRep); ``server``: :func:`server_seconds` of the HDC-FL
        run, the median client's ``top weight`` (its weight on its nearest prototype at the last
        refresh) and the ``seconds`` the cell took. :func:`fedbook.study.run_study` puts the
        ``setting`` and ``seed`` in front.
    """
    t0 = time.perf_counter()
    fed, group, model_fn, hdc, at = study.train_hdcfl(setting, seed)
    cfg = study.loop(seed)
    main, variants, costs = [], [], []

    def add(method, frame):
        main.append({"method": method, **tail_metrics(frame)})

    add("HDC-FL", hdc.frame)
    add("FedAvg-SE", evaluate_deployment(FedAvgSE(train=study.train), hdc, fed, model_fn, cfg))
    done = {row["method"]: row for row in main}
    for name, change in [*study.variants, (RAW_RUN, {"descriptor": "raw"})]:
        if not change and study.rounds % study.hdc.refresh_every == 0:  # the run's own last refresh, deployed
            metrics, state = {m: done["HDC-FL"][m] for m in TAIL_METRICS}, hdc.server
        elif dict(change) == {"lam": 0.0}:  # λ = 0 deploys the shared encoder with each head: FedAvg-SE's row
            metrics, state = {m: done["FedAvg-SE"][m] for m in TAIL_METRICS}, hdc.server
        else:
            metrics, state = study.deploy_variant(hdc, fed, model_fn, dataclasses.replace(study.hdc, **change), seed)
        last = refresh_history(state).iloc[-1]
        variants.append({"variant": name, **metrics, "k": int(last["k"]), "silhouette": float(last["silhouette"])})
    history = two_histories(refresh_history(hdc.server))
    activation = activation_contrast(study, at, fed, model_fn, reference_groups(fed, group, study.hdc, seed)[0], seed,
                                     final={m: done[m] for m in ("HDC-FL", "FedAvg-SE")})
    costs.append({"method": "HDC-FL", **ledger_costs(hdc.ledger, study.rounds, study.n_clients)})
    server = {**server_seconds(hdc.server_seconds, study.hdc.refresh_every),
              "top weight": float(hdc.server.arrays["hdcfl/membership"].max(dim=1).values.median())}
    donors = donor_table(hdc.server, fed, model_fn, study.hdc.rank, group)
    for name, alg in (("FedRep", FedRep(train=study.train, head_train=study.train)),
                      ("FedBABU", FedBABU(train=study.train, finetune=study.finetune)),
                      ("Ditto", Ditto(train=study.train, personal_train=study.train)), ("FedAvg", FedAvg(train=study.train)),
                      ("IFCA", IFCA(train=study.train, k=study.ifca_k, seed=seed))):
        run = run_federated(alg, fed, model_fn, cfg, study.options)
        if name == "FedAvg":
            add("FedAvg-FT", evaluate_deployment(FedAvgFT(train=study.train, finetune=study.finetune), run, fed, model_fn, cfg))
            continue
        add(name, run.frame)
        if name == "FedRep":
            costs.append({"method": "FedRep", **ledger_costs(run.ledger, study.rounds, study.n_clients)})
    exercises = {}
    if len(temperatures):
        exercises = exercise_frames(study, fed, group, model_fn, hdc, seed, temperatures) if seed == exercise_seed else \
            {"ex1": pd.DataFrame(columns=["T", *TAIL_METRICS, "entropy"]), "ex2": pd.DataFrame(columns=list(EX2_COLUMNS))}
    server["seconds"] = time.perf_counter() - t0
    return {"main": pd.DataFrame(main), "variants": pd.DataFrame(variants), "history": history,
            "activation": pd.DataFrame([activation]), **exercises,
            "donors": donors, "costs": pd.DataFrame(costs), "server": pd.DataFrame([server])}


EX2_COLUMNS = ("k (labels)", "k (heads)", "ARI(heads, labels)", "ARI(heads, planted rotations)", "ARI(labels, planted rotations)")
"""The columns of exercise 2's frame (:func:`exercise_frames`)."""


def exercise_frames(study: HDCFLStudy, fed: Federation, planted: np.ndarray | None, model_fn: Callable, run: RunResult,
                    seed: int, temperatures: Sequence[float]) -> dict[str, pd.DataFrame]:
    """The exercises' frames from an HDC-FL run of one setting and seed (``run`` on ``fed``,
    :meth:`HDCFLStudy.train_hdcfl`), re-evaluated on the server side only.

    Returns
    -------
    dict of str to DataFrame
        ``ex1``: per temperature ``T`` of ``temperatures``, the final state refreshed at that
        temperature (:meth:`HDCFLStudy.deploy_variant`): :data:`TAIL_METRICS` and the mean
        membership ``entropy`` of its last refresh. ``ex2``: one row, the clients grouped by their
        normalized label histograms (:func:`reference_groups` without planted groups) against
        HDC-FL's last grouping and the planted rotations (adjusted Rand indices; NaN without
        planted groups), :data:`EX2_COLUMNS`.
    """
    ex1 = []
    for t in temperatures:
        scores, state = study.deploy_variant(run, fed, model_fn, dataclasses.replace(study.hdc, temperature=t), seed)
        ex1.append({"T": t, **scores, "entropy": float(refresh_history(state).iloc[-1]["entropy"])})
    by_labels = reference_groups(fed, None, study.hdc, seed)[0]
    heads = run.server.arrays["hdcfl/labels"].numpy()
    seen = run.server.arrays["hdcfl/clients"].numpy()  # the clients cached at the last refresh
    ex2 = dict(zip(EX2_COLUMNS, (int(by_labels.max() + 1), int(heads.max() + 1), assignment_agreement(heads, by_labels[seen]),
                                 assignment_agreement(heads, planted[seen]) if planted is not None else float("nan"),
                                 assignment_agreement(by_labels, planted) if planted is not None else float("nan"))))
    return {"ex1": pd.DataFrame(ex1), "ex2": pd.DataFrame([ex2])}


def exercise_cell(seed: int, setting: str, *, study: HDCFLStudy, temperatures: Sequence[float]) -> dict[str, pd.DataFrame]:
    """The exercises' frames (:func:`exercise_frames`) of the HDC-FL run of one setting and seed,
    trained again (:meth:`HDCFLStudy.train_hdcfl`, the main study's run, the same bits): what
    :func:`run_cell` returns for its ``exercise_seed``, on its own."""
    fed, planted, model_fn, run, _ = study.train_hdcfl(setting, seed)
    return exercise_frames(study, fed, planted, model_fn, run, seed, temperatures)


# ------------------------------------------------------------------------------------------------
# The frames the claims read: one row per seed (and setting, method, variant or descriptor)
# ------------------------------------------------------------------------------------------------


def per_seed(frame: pd.DataFrame, column: str, **where: Any) -> np.ndarray:
    """The values of ``column`` on the rows where each ``where`` column holds its value, in seed
    order.

    Examples
    --------
    >>> t = pd.DataFrame({"seed": [1, 0, 1], "method": ["a", "a", "b"], "acc": [2.0, 1.0, 5.0]})
    >>> per_seed(t, "acc", method="a").tolist()
    [1.0, 2.0]
    """
    return rows_where(frame, **where).sort_values("seed")[column].to_numpy()


def paired_rows(ours: pd.Series, baseline: pd.Series, names: tuple[str, str] = ("ours", "baseline")) -> pd.DataFrame:
    """Two sides indexed by seed as a frame of the seeds where both are defined
    (:func:`fedbook.intervals.defined_pairs`: a seed where either side is NaN is left out; with no
    pair left, one row of zeros, seed -1, an inconclusive one-seed interval).

    Examples
    --------
    >>> a, b = pd.Series([1.0, float("nan"), 3.0], index=[0, 1, 2]), pd.Series([0.5, 1.0, 2.0], index=[0, 1, 2])
    >>> paired_rows(a, b).values.tolist()
    [[0.0, 1.0, 0.5], [2.0, 3.0, 2.0]]
    >>> paired_rows(a * float("nan"), b).values.tolist()
    [[-1.0, 0.0, 0.0]]
    """
    o, b = ours.to_numpy(dtype=float), baseline.reindex(ours.index).to_numpy(dtype=float)
    ok = ~np.isnan(o) & ~np.isnan(b)
    o, b = defined_pairs(o, b)
    seeds = list(ours.index[ok]) if ok.any() else [-1]
    return pd.DataFrame({"seed": seeds, names[0]: o, names[1]: b})


def macro_table(main: pd.DataFrame) -> pd.DataFrame:
    """Per seed and method, :data:`TAIL_METRICS` averaged over the settings of the ``main`` frame,
    with ``setting = "macro"``.

    Examples
    --------
    >>> main = pd.DataFrame({"setting": ["x", "y"], "seed": 0, "method": "m", "mean": [1.0, 2.0], "worst": 0.0,
    ...                      "bottom-20 %": 0.0, "gap": 0.0})
    >>> macro_table(main)[["seed", "method", "mean", "setting"]].values.tolist()
    [[0, 'm', 1.5, 'macro']]
    """
    return main.groupby(["seed", "method"])[list(TAIL_METRICS)].mean().reset_index().assign(setting="macro")


def donor_seeds(donors: pd.DataFrame) -> pd.DataFrame:
    """Per setting and seed of the ``donors`` frame: :func:`fedlib.algorithms.hdcfl.donor_ranking`
    (its columns renamed by :data:`DONOR_COLUMNS`), and the mean swap gain of each target's
    nearest-head donor and of a donor drawn at random (``nearest gain``, ``random gain``,
    :func:`nearest_donor_gain`)."""
    rows = []
    for (setting, s), d in donors.groupby(["setting", "seed"]):
        nearest, random = nearest_donor_gain(d)
        rows.append({"setting": setting, "seed": s, **donor_ranking(d.dropna(axis=1, how="all")),
                     "nearest gain": nearest, "random gain": random})
    return pd.DataFrame(rows).rename(columns=DONOR_COLUMNS)


def refresh_summary(history: pd.DataFrame) -> pd.DataFrame:
    """Per setting, descriptor (:data:`REFRESH_RUNS`) and seed of the ``history`` frame: the
    silhouette of the last refresh and the mean adjusted Rand index between consecutive
    refreshes (the first refresh's, undefined, left out).

    Examples
    --------
    >>> h = pd.DataFrame({"setting": "x", "descriptor": "raw heads", "seed": [0, 0, 1, 1], "round": [4, 2, 2, 4],
    ...                   "silhouette": [0.4, 0.2, 0.1, 0.3], "ari": [0.5, np.nan, np.nan, 1.0]})
    >>> refresh_summary(h)[["seed", "silhouette (last)", "ARI (mean)"]].values.tolist()
    [[0.0, 0.4, 0.5], [1.0, 0.3, 1.0]]
    """
    rows = []
    for (setting, descriptor), h in history.groupby(["setting", "descriptor"], sort=False):
        g = h.sort_values(["seed", "round"]).groupby("seed")
        last, ari = g["silhouette"].agg(lambda v: v.iloc[-1]), g["ari"].mean()
        rows += [{"setting": setting, "descriptor": descriptor, "seed": s, "silhouette (last)": last[s],
                  "ARI (mean)": ari[s]} for s in last.index]
    return pd.DataFrame(rows)


def contrast_pairs(activation: pd.DataFrame) -> pd.DataFrame:
    """Per setting of label subsets and rotation and per seed, HDC-FL's activation contrast
    (``contrast``, :func:`activation_contrast`) beside the same seed's contrast under Dirichlet
    skew (``Dirichlet contrast``), on the seeds where both are defined (:func:`paired_rows`).

    Examples
    --------
    >>> act = pd.DataFrame({"setting": [S_LS, S_DIR, S_ROT] * 2, "seed": [0, 0, 0, 1, 1, 1],
    ...                     "contrast": [3.0, 1.0, 2.0, 4.0, float("nan"), 0.5]})
    >>> contrast_pairs(act)[["setting", "seed", "contrast", "Dirichlet contrast"]].values.tolist()
    [['label subsets', 0, 3.0, 1.0], ['rotation', 0, 2.0, 1.0]]
    """
    def by_seed(setting):
        return activation[activation.setting == setting].set_index("seed")["contrast"].sort_index()

    base = by_seed(S_DIR)
    return pd.concat([paired_rows(by_seed(s), base, ("contrast", "Dirichlet contrast")).assign(setting=s) for s in (S_LS, S_ROT)],
                     ignore_index=True)


HALF_RHO = "½ ρ (raw heads)"
"""The ``overlap`` frame's column of half the donor association (:func:`overlap_frame`)."""


def overlap_frame(donor_seed: pd.DataFrame) -> pd.DataFrame:
    """Per label-skew setting and seed (every seed), half the Spearman correlation of raw-head
    similarity and swap gain, :data:`HALF_RHO`, beside the partial correlation given the
    label-support overlap. "Largely explained by the overlap" (the overlap takes more than half
    of ρ, ρ − partial ρ > ρ / 2) is ½ ρ − partial ρ > 0: a difference defined on every seed,
    with no division by ρ and no seed left out for its ρ (a selection on the outcome).

    Examples
    --------
    >>> d = pd.DataFrame({"setting": "label subsets", "seed": [1, 0], "ρ (raw heads)": [0.0, 0.4],
    ...                   "partial ρ given overlap": [-0.05, 0.1]})
    >>> f = overlap_frame(pd.concat([d, d.assign(setting="Dirichlet")]))
    >>> f[f.setting == "label subsets"][["seed", HALF_RHO, "partial ρ given overlap"]].values.tolist()
    [[0.0, 0.2, 0.1], [1.0, 0.0, -0.05]]
    """
    d = donor_seed[donor_seed.setting.isin([S_LS, S_DIR])].sort_values(["setting", "seed"], kind="stable")
    return pd.DataFrame({"setting": d.setting.to_numpy(), "seed": d.seed.to_numpy(),
                         HALF_RHO: d[DONOR_COLUMNS["rho_raw"]].to_numpy() / 2,
                         DONOR_COLUMNS["partial_rho"]: d[DONOR_COLUMNS["partial_rho"]].to_numpy()})


def results(frames: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The main study's frames (:func:`run_cell` through :func:`fedbook.study.run_study`) with
    the frames the claims read added: ``macro`` (:func:`macro_table`), ``donor_seed``
    (:func:`donor_seeds`), ``refreshes`` (:func:`refresh_summary`), ``contrasts``
    (:func:`contrast_pairs`) and ``overlap`` (:func:`overlap_frame`)."""
    out = dict(frames)
    out["macro"] = macro_table(frames["main"])
    out["donor_seed"] = donor_seeds(frames["donors"])
    out["refreshes"] = refresh_summary(frames["history"])
    out["contrasts"] = contrast_pairs(frames["activation"])
    out["overlap"] = overlap_frame(out["donor_seed"])
    return out


def in_run_order(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s rows seed by seed (stably: the settings in the study's order within a seed),
    the order in which sums over settings and seeds (the costs, the server's times) add up."""
    return frame.sort_values("seed", kind="stable")


# ------------------------------------------------------------------------------------------------
# The numbers the prose quotes
# ------------------------------------------------------------------------------------------------


def scale(study: HDCFLStudy, settings: Sequence[str], seed: int) -> dict[str, float]:
    """The resolutions the claims declare before any run, from the first seed's federations of
    ``settings`` (``rotation`` among them), and the clients' sizes.

    Returns
    -------
    dict
        ``res_mean`` (points: one image of the global pool), ``res_tail`` (the most one pool image
        moves a client's pooled score, over the clients and classes), ``res_donor`` (one image of
        the rotation targets' test splits), ``pool_min`` and ``pool_mean`` (the pools' effective
        sizes), ``test_size`` and ``train_size`` (a client's mean local split sizes, in the first
        setting) and ``one_image`` (points of one image of that local test split).
    """
    feds = {s: study.federation(s, seed)[0] for s in settings}
    pool = np.concatenate([f.pool_sizes() for f in feds.values()])
    first = feds[settings[0]]
    test_size = float(np.mean([len(c.test) for c in first.clients]))
    return {"res_mean": resolution_of(len(first.global_test)),
            "res_tail": 100 * max(float(np.nanmax(f.pool_steps())) for f in feds.values()),
            "res_donor": resolution_of(sum(len(c.test) for c in feds[S_ROT].clients)),
            "pool_min": float(pool.min()), "pool_mean": float(pool.mean()), "test_size": test_size,
            "train_size": float(np.mean([len(c.train) for c in first.clients])), "one_image": 100 / test_size}


HDC_FIELDS = ("rank", "temperature", "refresh_every", "min_silhouette", "min_ari", "max_drift", "patience", "k_min", "k_max",
              "max_activation_round", "lam")
"""The fields of HDC-FL's server the prose quotes (``hdc_<field>``)."""


def setting_numbers(study: HDCFLStudy, n_seeds: int, n_classes: int) -> dict[str, Any]:
    """The settings the prose quotes: seeds, clients, rounds, the protocol's bottom-20 % count,
    the splits, the heterogeneities, the participation, HDC-FL's server (``hdc_*``,
    :data:`HDC_FIELDS`) and the arithmetic of the membership's sharpness at :data:`T_OLD` and at
    the study's temperature for a cosine gap :data:`T_GAP`.

    Examples
    --------
    >>> hdc = HDCConfig(temperature=0.15)
    >>> train = TrainConfig(epochs=1)
    >>> s = HDCFLStudy(dataset="uci8", n_samples=None, model="cnn", width=8, feature_dim=8, n_clients=20,
    ...                global_test_per_class=3, class_fraction=0.3, alpha=0.3, n_rotations=4, rounds=hdc.max_activation_round,
    ...                train=train, finetune=train, hdc=hdc, participation=0.5)
    >>> n = setting_numbers(s, n_seeds=7, n_classes=10)
    >>> n["bottom_k"], n["n_sampled"], round(n["t_gap_new"], 2), n["hdc_temperature"]
    (4, 10, 73.11, 0.15)
    """
    t = study.hdc.temperature
    return {"n_seeds": n_seeds, "n_clients": study.n_clients, "rounds": study.rounds,
            "bottom_k": max(1, math.ceil(round(0.2 * study.n_clients, 9))),  # the protocol's count (fedlib.metrics.tail_mean)
            "ft_epochs": study.finetune.epochs, "n_images": len(load_dataset("uci8")),  # the data set the book profile draws from
            "test_pct": 100 * study.test_fraction, "train_pct": 100 * (1 - study.test_fraction),
            "class_pct": 100 * study.class_fraction, "alpha": study.alpha, "n_rot": study.n_rotations,
            "ifca_k": study.ifca_k, "participation_pct": 100 * study.participation,
            "n_sampled": max(1, int(round(study.participation * study.n_clients))),  # the loop's count (fedlib.loop)
            "n_classes_data": n_classes, "data_label": DATA_LABELS[study.dataset].replace(" x ", " × "),
            "model_label": MODEL_LABELS[study.model], "t_old": T_OLD, "t_gap": T_GAP,
            "t_gap_old": 100 / (1 + math.exp(-T_GAP / T_OLD)),  # two groups, that gap, at T_OLD
            "t_gap_new": 100 / (1 + math.exp(-T_GAP / t)),  # the same gap at our T
            "t_gap_95": t * math.log(19),  # the cosine gap that puts 95 % on one of two groups
            **{f"hdc_{name}": getattr(study.hdc, name) for name in HDC_FIELDS}}


def substitutions(P: Any, n_classes: int) -> dict[str, str]:
    """What our scale substitutes for the paper's, in the words of the claims' ``substitution``
    field, per group of claims: ``scale`` (data, model, rounds), ``head`` (the headline claims:
    the settings and the baselines), ``ls``, ``rot``, ``dir`` (one setting's ablations),
    ``lr`` (the low-rank rows), ``donor`` and ``rotations`` (the donor swap). ``P`` holds the
    chapter's settings (:func:`fedbook.page.setup`).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> P = SimpleNamespace(dataset="uci8", model="cnn", rounds=16, settings=list(SETTINGS), class_fraction=0.3,
    ...                     n_rotations=4, participation=0.5, alpha=0.3, temperature=0.15, rank=5)
    >>> substitutions(P, 10)["dir"]
    'UCI digits at 8 x 8, Dirichlet α = 0.3; T = 0.15 chosen from the cosine gaps'
    """
    data, model = DATA_LABELS[P.dataset], MODEL_LABELS[P.model]
    scale = f"{data} and {model} for CIFAR-10/100 and ResNet-18 / MobileNetV2; {P.rounds} rounds"
    return {"scale": scale,
            "head": scale + f"; macro over our {len(P.settings)} settings, not the paper's 11 configurations; PFedCS (the "
                            "paper's nearest rival) and EMD-CFL are not run: six baselines fedlib has",
            "ls": f"{data}, {100 * P.class_fraction:.0f} % of the classes per client",
            "rot": f"{data}, {P.n_rotations} rotations; k chosen by silhouette, not fixed; stale cache "
                   f"({100 * P.participation:.0f} % participation)",
            "dir": f"{data}, Dirichlet α = {P.alpha}; T = {P.temperature} chosen from the cosine gaps",
            "lr": "raw heads grouped on the same cache at the same refreshes of the same run (server-side); r = "
                  f"{P.rank} = ⌈C/2⌉ of C = {n_classes} classes (the paper: 8 of 100), a rule blind to the "
                  f"{P.n_rotations} planted groups",
            "donor": "the last round's cached pairs; raw-head cosine",
            "rotations": f"the last round's cached pairs; {P.n_rotations} rotations of {data}"}


def overlap_reading(rho: float, partial: float) -> str:
    """What the label-subset donor association and its partial correlation given label overlap
    (means over the seeds) say, in words: whether there is a positive association for the overlap
    to explain and, if so, whether the overlap takes more than half of it.

    Examples
    --------
    >>> overlap_reading(0.3, 0.1).startswith("on average over the seeds, more than half")
    True
    >>> overlap_reading(-0.1, 0.0).startswith("on average over the seeds there is no positive")
    True
    """
    if rho <= 0:
        reading = "on average over the seeds there is no positive association for the overlap to explain"
    elif partial < rho / 2:
        reading = "on average over the seeds, more than half of the label-subset association goes with the shared labels"
    else:
        reading = "on average over the seeds, the shared labels take less than half of the label-subset association"
    return reading + " (the claims table's rows overlap-ls and overlap-dir decide it over the seeds)"


def server_text(refresh_ms: float, other_ms: float) -> str:
    """The server's time per round in a sentence: refresh rounds against plain averaging rounds,
    or, where every round is a refresh round (``other_ms`` NaN), the refresh rounds alone.

    Examples
    --------
    >>> server_text(68.2, 0.61)
    'A refresh round takes the server 68 ms against 0.6 ms for a plain averaging round'
    >>> server_text(17.0, float("nan"))
    'Every round is a refresh round at this profile; one takes the server 17 ms'
    """
    return (f"A refresh round takes the server {refresh_ms:.0f} ms against {other_ms:.1f} ms for a plain averaging round"
            if not math.isnan(other_ms) else f"Every round is a refresh round at this profile; one takes the server {refresh_ms:.0f} ms")


def contrasts_text(activation: pd.DataFrame) -> str:
    """The activation contrasts of label subsets, rotation and Dirichlet skew (:func:`activation_table`)
    in one phrase for the prose (:func:`contrast_text` of each; the prose names the last setting)."""
    return (f"{contrast_text(activation.loc[S_LS, CONTRAST_COLUMN])} under label subsets, "
            f"{contrast_text(activation.loc[S_ROT, CONTRAST_COLUMN])} under rotation and "
            f"{contrast_text(activation.loc[S_DIR, CONTRAST_COLUMN])}")


TAIL_WORDS = {"mean": "macro mean", "worst": "worst client", "bottom-20 %": "bottom 20 %"}
"""The macro metrics as :func:`standing_text` names them."""


def standing_text(intervals: Mapping[str, Any], ours: str, theirs: str) -> str:
    """Where ``theirs`` stands against ``ours`` on several metrics, from the sign of each interval
    of ``ours`` − ``theirs`` (by metric name, :class:`fedbook.intervals.Interval`): a metric is
    led by one side when its interval lies beyond 0 on that side, and is within the seeds' spread
    otherwise.

    Examples
    --------
    >>> from fedbook.intervals import paired_interval
    >>> behind, level = paired_interval([-3.0, -2.5, -3.5]), paired_interval([-1.0, 1.0, 0.5])
    >>> standing_text({"mean": behind, "worst": behind}, "HDC-FL", "FedAvg-FT")
    "FedAvg-FT leads HDC-FL on all of the mean and the worst beyond the seeds' spread: it is the baseline to beat here"
    >>> standing_text({"mean": behind, "worst": level}, "HDC-FL", "FedAvg-FT")
    "FedAvg-FT leads HDC-FL on the mean beyond the seeds' spread; the worst is within it"
    """
    groups: dict[str, list[str]] = {"theirs": [], "ours": [], "level": []}
    for name, iv in intervals.items():
        groups["theirs" if iv.high < 0 else "ours" if iv.low > 0 else "level"].append(f"the {name}")

    def listed(names):
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    if len(groups["theirs"]) == len(intervals):
        return f"{theirs} leads {ours} on all of {listed(groups['theirs'])} beyond the seeds' spread: it is the baseline to beat here"
    if len(groups["ours"]) == len(intervals):
        return f"{ours} leads {theirs} on all of {listed(groups['ours'])} beyond the seeds' spread"
    parts = [f"{who} leads {other} on {listed(groups[key])} beyond the seeds' spread"
             for key, who, other in (("theirs", theirs, ours), ("ours", ours, theirs)) if groups[key]]
    if groups["level"]:
        level = listed(groups["level"])
        parts.append(f"{level} {'is' if len(groups['level']) == 1 else 'are'} within it" if parts else
                     f"{ours} and {theirs} are within the seeds' spread on {level}")
    return "; ".join(parts)


ARI_CHECK = "activation on the setting's groups ({})"
"""The key of a setting's regime check "HDC-FL's grouping at the activation round matches the reference" (``format`` with the setting)."""

GATE_CHECK = "activation opened by the gate ({})"
"""The key of a setting's regime check "the gate, not the deadline, opened personalization" (``format`` with the setting)."""


def what_makes_testable(settings: Sequence[str]) -> dict[str, str]:
    """What would make the rows that a setting's regime check (:data:`ARI_CHECK`,
    :data:`GATE_CHECK`) fails testable, by the check's key, for each of ``settings`` (read by
    :func:`fedbook.claims.regime_reading`).

    Examples
    --------
    >>> sorted(what_makes_testable(["Dirichlet"]))
    ["activation on the setting's groups (Dirichlet)", 'activation opened by the gate (Dirichlet)']
    >>> "grouped_dirichlet" in what_makes_testable(["Dirichlet"])[ARI_CHECK.format("Dirichlet")]
    True
    """
    groups = {
        S_DIR: ("groups for the grouping to find: a plain Dirichlet partition plants none (every client draws its own "
                "class proportions), while fedlib's grouped_dirichlet partition (disjoint label groups, a Dirichlet "
                "skew over the clients inside each) plants them and keeps a Dirichlet skew within each group"),
        S_LS: ("label subsets that set the clients apart more sharply (fewer classes per client, fewer subsets shared "
               "by chance), so that the label-histogram grouping has well-separated groups to find"),
        S_ROT: "more training before the first refresh, so that the heads have separated the rotations when the gate looks",
    }
    out = {}
    for setting in settings:
        if setting not in groups:
            raise ValueError(f"unknown setting {setting!r}; valid: {', '.join(map(repr, groups))}")
        out[ARI_CHECK.format(setting)] = groups[setting]
        out[GATE_CHECK.format(setting)] = (groups[setting] + "; a grouping that holds from one refresh to the next is "
                                           "what the gate waits for")
    return out


def level_note(m: float, resolution: float) -> str:
    """Why a "remains level" row (HDC-FL − FedAvg-SE in the same run, "at least" −``m``) is a
    claim and not a control, for its note: ``m`` against the smallest margin the row's
    ``resolution`` can test (:func:`fedbook.claims.smallest_resolvable`), and why the row can fail.

    Examples
    --------
    >>> level_note(1.0, 0.25)[:75]
    'm is the default for points, declared before the runs, and the smallest mar'
    >>> "four images of the pool are 0.4 points" in level_note(1.0, 0.1)
    True
    """
    finest = smallest_resolvable(resolution)
    where = ("the smallest margin this pooled score can resolve (four images of the pool)" if finest >= m - 1e-12
             else f"above the smallest margin this pooled score can resolve (four images of the pool are {finest:.2g} points)")
    return (f"m is the default for points, declared before the runs, and {where}. The row's quantity is the "
            "personalization effect itself, so it fails where personalization costs more than m, and nothing in the "
            "method bounds that cost (a client's mixture of the wrong groups' prototypes can be worse than the shared "
            "encoder by any amount). The low-rank accuracy rows are controls for another reason: their sentence is about "
            "the descriptor, which acts only through this effect, so where the whole effect is below m a margin of m "
            "cannot tell a descriptor that matters from one that does not; here the sentence is about the effect itself")


def cost_frame(costs: pd.DataFrame) -> pd.DataFrame:
    """The ``costs`` frame's bytes per method, means over the settings and seeds."""
    return in_run_order(costs).groupby("method").mean(numeric_only=True).drop(columns="seed")


def results_numbers(R: Mapping[str, pd.DataFrame], settings: Sequence[str], *, first_seed: int) -> dict[str, Any]:
    """The numbers of the runs the prose quotes, from :func:`results`' frames ``R`` (the ablations
    read the ``variants`` rows :data:`DEFAULT_VARIANT`, :data:`ONE_GROUP_VARIANT` and :data:`SHARED_VARIANT`).

    Returns
    -------
    dict
        The macro mean, worst-client and bottom-20 % accuracy of HDC-FL and of the baseline
        highest on each (``macro_<metric>_hdc``, ``_best``, ``_best_value``) and FedAvg-SE's
        worst client; the ablations' mean gains (``rot_k1_gain``, ``rot_proto_alone``,
        ``lam0_gain``) and the median client's weight on its nearest prototype at the first
        seed's last refreshes (``top_weight_median``, %); the activation contrasts
        (``contrast_text``, :func:`contrasts_text`) and, per setting (``ls``, ``dir``, ``rot``),
        the mean ARI with the reference grouping, the share of seeds the gate opened, the mean
        activation round and ``k`` at it (``act_ari_*``, ``act_gate_*``, ``act_round_*``,
        ``act_k_*``: :func:`activation_table`); HDC-FL − FedAvg-FT on the three macro metrics,
        paired intervals over the seeds (``ft_mean_text``, ``ft_worst_text``, ``ft_bottom_text``)
        and their reading by sign (``ft_standing``, :func:`standing_text`);
        the donor swaps (``nearest_same_pct``,
        ``base_same_pct``, ``same_gain``, ``diff_gain``, ``auroc_rot``, ``nearest_gain``,
        ``random_gain``, ``rho_*``, ``partial_*``, ``overlap_rho_*`` per setting and
        ``overlap_reading``); the bytes HDC-FL adds to the upload (``extra_up_bytes``,
        ``extra_up_pct``) and the server's time (``server_seconds_text``, ``run_seconds``:
        measured).
    """
    out: dict[str, Any] = {}
    mm = R["macro"].groupby("method")[list(TAIL_METRICS)].mean()
    for metric, key in (("mean", "mean"), ("worst", "worst"), ("bottom-20 %", "bottom")):
        best = mm.loc[list(BASELINES), metric].idxmax()
        out.update({f"macro_{key}_hdc": float(mm.loc["HDC-FL", metric]), f"macro_{key}_best": str(best),
                    f"macro_{key}_best_value": float(mm.loc[best, metric])})
    out["macro_worst_se"] = float(mm.loc["FedAvg-SE", "worst"])

    def variant(setting, name):
        return per_seed(R["variants"], "mean", setting=setting, variant=name)

    out["rot_k1_gain"] = float((variant(S_ROT, DEFAULT_VARIANT) - variant(S_ROT, ONE_GROUP_VARIANT)).mean())
    out["rot_proto_alone"] = float((variant(S_ROT, ONE_GROUP_VARIANT) - variant(S_ROT, SHARED_VARIANT)).mean())
    out["lam0_gain"] = float(np.mean([(variant(s, DEFAULT_VARIANT) - variant(s, SHARED_VARIANT)).mean() for s in settings]))
    server = in_run_order(R["server"])
    top = server[server.seed == first_seed]["top weight"].tolist()  # the first seed's last refresh, median client
    out["top_weight_median"] = 100 * float(np.median(top))
    act = activation_table(R["activation"], settings)
    out["contrast_text"] = contrasts_text(act)
    for setting, key in ((S_LS, "ls"), (S_DIR, "dir"), (S_ROT, "rot")):
        out[f"act_ari_{key}"] = float(act.loc[setting, "ARI with the reference"])
        out[f"act_gate_{key}"] = float(act.loc[setting, "gate opened (% of seeds)"])
        out[f"act_round_{key}"] = float(act.loc[setting, "activation round (mean)"])
        out[f"act_k_{key}"] = float(act.loc[setting, "k (mean)"])
    macro, ft = R["macro"], {}
    for metric, key in (("mean", "mean"), ("worst", "worst"), ("bottom-20 %", "bottom")):
        ft[TAIL_WORDS[metric]] = paired_interval(per_seed(macro, metric, method="HDC-FL"), per_seed(macro, metric, method="FedAvg-FT"))
        out[f"ft_{key}_text"] = ft[TAIL_WORDS[metric]].format(2)
    out["ft_standing"] = standing_text(ft, "HDC-FL", "FedAvg-FT")
    donors, view = R["donors"], donor_view(R, settings)
    rot = donors[donors.setting == S_ROT].astype({"same_group": bool})
    nearest = rot.loc[rot.groupby(["seed", "target"])["head_cosine"].idxmax()]
    out["nearest_same_pct"] = 100 * float(nearest.same_group.mean()) if len(nearest) else float("nan")
    out["base_same_pct"] = 100 * float(rot.same_group.mean()) if len(rot) else float("nan")
    out["same_gain"] = float(rot[rot.same_group].gain.mean()) if len(rot) else float("nan")
    out["auroc_rot"] = float(view.loc[S_ROT, "AUROC same rotation"])
    out["overlap_reading"] = overlap_reading(float(view.loc[S_LS, "ρ (raw heads)"]), float(view.loc[S_LS, "partial ρ given overlap"]))
    out["nearest_gain"] = float(np.mean(per_seed(R["donor_seed"], "nearest gain", setting=S_ROT)))
    out["random_gain"] = float(np.mean(per_seed(R["donor_seed"], "random gain", setting=S_ROT)))
    out["diff_gain"] = float(rot[~rot.same_group].gain.mean()) if len(rot) else float("nan")
    for setting, key in ((S_LS, "ls"), (S_DIR, "dir"), (S_ROT, "rot")):
        out[f"rho_{key}"] = float(view.loc[setting, "ρ (raw heads)"])
        out[f"partial_{key}"] = float(view.loc[setting, "partial ρ given overlap"])
        out[f"overlap_rho_{key}"] = float(view.loc[setting, "ρ(similarity, overlap)"])
    cost = cost_frame(R["costs"])
    extra_up = float(cost.loc["HDC-FL", "up per client and round"] - cost.loc["FedRep", "up per client and round"])
    out["extra_up_bytes"] = format_bytes(extra_up)
    out["extra_up_pct"] = 100 * extra_up / float(cost.loc["FedRep", "up per client and round"])
    out["server_seconds_text"] = server_text(1000 * float(server["refresh"].mean()), 1000 * float(server["other"].mean()))
    out["run_seconds"] = float(sum(server["seconds"]))
    return out


TAIL_READINGS = {
    HOLDS: "HDC-FL is on top as the paper words it: no baseline lies above it by more than the row's m",
    DOES_NOT_HOLD: "HDC-FL is not on top: a baseline's tail clients fare better by more than the row's m",
    INCONCLUSIVE: "whether a baseline lies above HDC-FL by more than the row's m is within the seed-to-seed spread",
    UNTESTABLE_RESOLUTION: "the pooled tail scores cannot resolve the row's m: one image moves them by more than a quarter of it",
    UNTESTABLE_SETTING: "a regime check of the setting fails, so the claim cannot be tested here",
}
"""What each verdict of a tail claim (``worst``, ``bottom``) says, in the words of :func:`claims_reading`: one
phrase for every verdict of :data:`fedbook.claims.VERDICTS`."""


def claims_reading(decided: Mapping[str, ClaimResult]) -> str:
    """The claims table's reading in a paragraph (Markdown): what the two tail claims (``worst``,
    ``bottom``) say as the paper words them (:data:`TAIL_READINGS`, one phrase per verdict, so
    every verdict is read), and the mean claim's verdict with the interval of the baseline
    nearest to failing it.

    Examples
    --------
    >>> from fedbook.claims import Claim, effect, evaluate
    >>> c = Claim("worst", "X.", "S", "q", "at least", effect("points"), resolution=0.1)
    >>> d = {"worst": evaluate(c, [5.0, 5.2, 4.8]), "bottom": evaluate(c, [5.0, 5.2, 4.8]),
    ...      "mean": evaluate(Claim("mean", "X.", "S", "q", "at least", effect("points"), resolution=2.0, versus=("A",)),
    ...                       [1.0, 2.0], {"A": [0.0, 0.0]})}
    >>> print(claims_reading(d))  # doctest: +NORMALIZE_WHITESPACE
    **Reading the table.** At this scale, on both tail metrics (worst client and bottom 20 %), HDC-FL is on top as the
    paper words it: no baseline lies above it by more than the row's m. The mean claim is *untestable at this resolution: the
    resolution 2 is above 0.25 × m = 0.25* (HDC-FL − A, the baseline nearest to failing it: +1.5 [−4.9, +7.9], 2 seeds,
    in points).
    """
    worst, bottom = (decided[key].verdict for key in ("worst", "bottom"))
    if worst == bottom:
        reading = f"At this scale, on both tail metrics (worst client and bottom 20 %), {TAIL_READINGS[worst]}."
    else:
        reading = (f"At this scale the two tail metrics part: on the worst client, {TAIL_READINGS[worst]}; on the bottom "
                   f"20 %, {TAIL_READINGS[bottom]}.")
    mean = decided["mean"]
    return (f"**Reading the table.** {reading} The mean claim is *{mean.verdict_text()}* (HDC-FL − {mean.binding}, the "
            f"baseline nearest to failing it: {mean.interval.format(1)}, in points).")


def exercise_numbers(ex: Mapping[str, pd.DataFrame], settings: Sequence[str], temperatures: Sequence[float],
                     decided: Mapping[str, ClaimResult]) -> dict[str, Any]:
    """The worked solutions' numbers from the exercises' frames ``ex`` (:func:`exercise_frames`):
    the seed-to-seed yardstick (``ex_noise``: the half-width of the mean claim's binding
    interval, and its baseline), exercise 1's temperatures, best temperature per setting, largest
    spread of the mean and its reading against the yardstick, exercise 2's adjusted Rand indices
    and their reading, and both worked solutions' tables (``ex1_table``, ``ex2_table``)."""
    mean = decided["mean"]
    ex_noise = float(mean.interval.high - mean.interval.mean)
    ex1 = ex["ex1"].drop(columns="seed")
    ex2 = ex["ex2"].drop(columns="seed").set_index("setting")
    best_t = ex1.loc[ex1.groupby("setting")["worst"].idxmax()].set_index("setting")["T"]
    spread = ex1.groupby("setting")["mean"].agg(lambda v: v.max() - v.min())
    out = {"ex_noise": ex_noise, "ex_noise_baseline": mean.binding, "ex1_t_list": ", ".join(f"{t:g}" for t in temperatures),
           "ex1_best_t": "; ".join(f"{s}: T = {best_t[s]:g}" for s in settings), "ex1_spread": float(spread.max()),
           "ex1_reading": "within the seed-to-seed yardstick, so one seed cannot rank the temperatures"
           if spread.max() < ex_noise else "larger than the seed-to-seed yardstick in at least one setting"}
    for setting, key in ((S_LS, "ls"), (S_DIR, "dir"), (S_ROT, "rot")):
        out[f"ex2_ari_{key}"] = float(ex2.loc[setting, "ARI(heads, labels)"])
    heads, labels = ex2.loc[S_ROT, "ARI(heads, planted rotations)"], ex2.loc[S_ROT, "ARI(labels, planted rotations)"]
    out["ex2_rot_heads"], out["ex2_rot_labels"] = float(heads), float(labels)
    out.update(rotation_reading(bool(heads > 0.5), bool(labels > 0.5)))
    out["ex1_table"] = show_table(ex1.set_index(["setting", "T"]), digits={"mean": 1, "worst": 1, "bottom-20 %": 1, "gap": 1,
                                                                            "entropy": 3})
    out["ex2_table"] = show_table(ex2, digits=2)
    return out


def rotation_reading(heads_find: bool, labels_find: bool) -> dict[str, str]:
    """Exercise 2's reading under rotation, in words (``ex2_rot_reading``, ``ex2_rot_conclusion``):
    whether the heads' grouping and the label histograms' find the planted rotations (an ARI
    above 0.5), and what that says.

    Examples
    --------
    >>> rotation_reading(True, False)["ex2_rot_reading"]
    'find the rotations'
    """
    return {"ex2_rot_reading": "find the rotations" if heads_find else "do not recover the rotations well on this seed",
            "ex2_rot_conclusion":
                "that is the covariate shift a label summary cannot see, and the setting where the paper finds head geometry "
                "most useful" if heads_find and not labels_find else
                "on this seed the heads do not show the covariate shift clearly either, though rotation is the setting where "
                "the paper finds head geometry most useful" if not heads_find else
                "on this seed the label histograms find the rotations too, so the heads have no advantage here"}


# ------------------------------------------------------------------------------------------------
# Tables and figure
# ------------------------------------------------------------------------------------------------


def main_tables(R: Mapping[str, pd.DataFrame], settings: Sequence[str]) -> list:
    """The main table, one per metric of :data:`TAIL_METRICS` (a heading and a table each): per
    method and setting the mean ± the half-width of the 95 % interval over the seeds, the macro
    average, and each method's average rank (1 = best) over the settings; the best of each column
    in bold."""
    both = pd.concat([R["main"], R["macro"]], ignore_index=True)
    shown = []
    for metric in TAIL_METRICS:
        cells = seed_table(both, "method", "setting", metric, digits=1, bounds=(0, 100)).reindex(list(METHODS))[[*settings, "macro"]]
        means = both.groupby(["method", "setting"])[metric].mean().unstack()[list(settings)]
        ranks = means.rank(axis=0, ascending=metric == "gap", method="average").mean(axis=1)
        cells["average rank"] = ranks.reindex(list(METHODS)).map(lambda v: f"{v:.1f}")
        cells.columns.name = None
        shown.append(Markdown(f"**{metric}** (pooled scores, points" + ("; lower is fairer)" if metric == "gap" else ")")))
        shown.append(show_table(cells.rename_axis("method"), best={c: ("min" if metric == "gap" else "max")
                                                                   for c in [*settings, "macro"]} | {"average rank": "min"}))
    return shown


def ablation_tables(R: Mapping[str, pd.DataFrame], settings: Sequence[str], names: Sequence[str]) -> list:
    """Per setting (a heading and a table), each ablation of ``names`` (the ``variants`` rows):
    mean, worst-client and bottom-20 % accuracy over the seeds, and the last refresh's ``k`` and
    silhouette (means over the seeds)."""
    shown = []
    for setting in settings:
        v = R["variants"][R["variants"].setting == setting]
        table = seed_table(v, "variant", None, "mean", digits=1, bounds=(0, 100)).reindex(names)
        table["worst"] = seed_table(v, "variant", None, "worst", digits=1, bounds=(0, 100)).reindex(names)["worst"]
        table["bottom-20 %"] = seed_table(v, "variant", None, "bottom-20 %", digits=1, bounds=(0, 100)).reindex(names)[
            "bottom-20 %"]
        table["k"] = v.groupby("variant")["k"].mean().reindex(names)
        table["silhouette"] = v.groupby("variant")["silhouette"].mean().reindex(names)
        shown.append(Markdown(f"**{setting}**"))
        shown.append(show_table(table.rename(columns={"mean": "mean (points)"}), digits={"k": 1, "silhouette": 3},
                                best={"mean (points)": "max", "worst": "max", "bottom-20 %": "max"}))
    return shown


def donor_view(R: Mapping[str, pd.DataFrame], settings: Sequence[str]) -> pd.DataFrame:
    """The donor swap per setting: the ``donor_seed`` frame's :data:`DONOR_COLUMNS`, means over the seeds."""
    view = R["donor_seed"].groupby("setting").mean(numeric_only=True).drop(columns="seed").reindex(settings)
    return view[list(DONOR_COLUMNS.values())]


def cost_table(R: Mapping[str, pd.DataFrame]):
    """The bytes per client and round of HDC-FL and FedRep (:func:`cost_frame`), as a table."""
    cost = cost_frame(R["costs"])
    return show_table(cost, formats={c: format_bytes for c in cost.columns})


def plot_dynamics(history: pd.DataFrame, settings: Sequence[str]):
    """HDC-FL's grouping at every refresh, per setting (colours) and descriptor (solid: rank-r,
    dashed: raw heads), means over the seeds, in a two by two grid: the chosen ``k``, the
    silhouette, the ARI with the previous refresh and the membership entropy. Returns the figure."""
    fig, axes = plt.subplots(2, 2, figsize=(8, 5.6), sharex=True)
    colours = dict(zip(settings, ["tab:blue", "tab:orange", "tab:green"]))
    for ax, (col, label) in zip(axes.flat, [("k", "chosen k"), ("silhouette", "silhouette"),
                                             ("ari", "ARI with previous refresh"), ("entropy", "membership entropy (nats)")]):
        for (setting, desc), h in history.groupby(["setting", "descriptor"]):
            m = h.groupby("round")[col].mean()
            ax.plot(m.index, m.values, color=colours[setting], ls="-" if desc == REFRESH_RUNS[0] else "--",
                    label=f"{setting}, {desc}")
        ax.set_ylabel(label)
    for ax in axes[1]:
        ax.set_xlabel("round")
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig


__all__ = ["ARI_CHECK", "GATE_CHECK", "TAIL_WORDS", "level_note", "standing_text", "what_makes_testable", "ACTIVATION_COLUMNS", "BASELINES", "CONTRAST_COLUMN", "DATA_LABELS", "DEFAULT_VARIANT", "DONOR_COLUMNS", "HALF_RHO",
           "HDCFLStudy", "HDC_FIELDS", "METHODS", "MODEL_LABELS", "ONE_GROUP_VARIANT", "RAW_RUN", "REFRESH_RUNS", "SETTINGS",
           "SHARED_VARIANT", "S_DIR", "S_LS", "S_ROT", "TAIL_METRICS", "TAIL_READINGS", "T_GAP", "T_OLD",
           "ablation_tables", "activation_contrast", "activation_snapshot", "activation_table", "claims_reading",
           "contrast_pairs", "contrast_text", "contrasts_text", "cost_frame", "cost_table", "donor_seeds", "donor_table",
           "donor_view", "EX2_COLUMNS", "exercise_cell", "exercise_frames", "exercise_numbers", "gate_opened", "in_run_order", "ledger_costs", "macro_table",
           "main_tables", "nearest_donor_gain", "overlap_frame", "overlap_reading", "paired_rows", "per_seed",
           "plot_dynamics", "reference_groups", "refresh_summary", "results", "results_numbers", "rotation_reading",
           "run_cell", "scale", "server_seconds", "server_text", "setting_numbers", "substitutions", "tail_metrics",
           "two_histories"]
