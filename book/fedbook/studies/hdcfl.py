r"""HDC-FL's experiments: every method trained per heterogeneity setting and run seed, the
server-side ablations on the same HDC-FL run, and the values per seed that the claims compare
(the chapter *HDC-FL: do head-derived encoder mixtures lift the worst clients?*,
``notebooks/hdcfl_experiments.py``).

From HDC-FL (Dehghanpour, Noori, Tanghatari, Omidvar and Rabiee, "From Classifier Heads to Encoder
Prototypes: Personalized Federated Learning with Head-Derived Clustering", arXiv:2610.30075),
Section 4: the main comparison (Sections 4.2-4.3: mean, worst-client and bottom-20 % accuracy),
the ablations (Section 4.4, Appendix E), the grouping dynamics and the activation step (Appendix
D), the donor swap (Section 4.5, Appendix F) and the communication cost.

:class:`HDCFLStudy` holds what is trained and deployed; :meth:`HDCFLStudy.run` runs it for every
setting and seed and returns an :class:`HDCFLRuns`, whose tidy tables the chapter shows and whose
methods give the values per seed its claims compare. The pieces of one run are free functions:
:func:`tail_metrics`, :func:`ledger_costs`, :func:`server_seconds`, :func:`donor_table`; the
activation table of the dynamics is :func:`activation_table` (its steps per seed: :func:`activation_steps`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from fedlib.algorithms import HDCFL, IFCA, Ditto, FedAvg, FedAvgFT, FedAvgSE, FedBABU, FedRep
from fedlib.algorithms.hdcfl import RAW_HISTORY_COLUMNS, HDCConfig, donor_ranking, donor_swap, refresh_history, with_variant
from fedlib.data import ArrayDataset, load_dataset
from fedlib.federation import Federation, make_federation, make_rotation_federation
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.run import RunOptions
from fedlib.messages import DOWN, UP, Ledger, State
from fedlib.metrics import protocol_summary
from fedlib.models import build_model
from fedbook.parallel import map_parallel
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig, predict
from fedlib.validation import check_int

SETTINGS = ("label subsets", "Dirichlet", "rotation")
"""The heterogeneities (:meth:`HDCFLStudy.federation`): label subsets, a Dirichlet label skew,
rotation groups (covariate shift, :func:`fedlib.federation.make_rotation_federation`)."""
BASELINES = ("FedAvg-SE", "FedRep", "FedBABU", "Ditto", "FedAvg-FT", "IFCA")
"""The baselines every seed trains (FedAvg-SE is HDC-FL's own run deployed with the shared encoder)."""
METHODS = ("HDC-FL", *BASELINES)
"""The rows of the main table."""
TAIL_METRICS = ("mean", "worst", "bottom-20 %", "gap")
"""The columns :func:`tail_metrics` returns (points)."""
REFRESH_RUNS = ("rank-r descriptors", "raw heads")
"""The two descriptors whose refresh histories :attr:`HDCFLRuns.history` holds, both from the same
HDC-FL run (the raw heads grouped on the same cache at the same refreshes, ``HDCConfig.compare_raw``)."""
RAW_RUN = "raw heads"
"""The raw-head ablation's row: a server-side variant of the same run (``descriptor="raw"``), after the others."""
DEFAULT_VARIANT = "HDC-FL (λ = 1, the default)"
"""The variant row that is HDC-FL's own deployment (copied from the run, not computed again)."""
SHARED_VARIANT = "λ = 0 (the shared encoder)"
"""The variant row that is FedAvg-SE's deployment (λ = 0 deploys the shared encoder: copied, not computed again)."""
DONOR_COLUMNS = {"rho_raw": "ρ (raw heads)", "rho_lowrank": "ρ (rank-r)", "auroc_helps": "AUROC helps",
                 "auroc_same_group": "AUROC same rotation", "ap_same_group": "AP same rotation",
                 "base_same_group": "same-rotation share", "mean_gain": "mean gain (points)",
                 "rho_overlap": "ρ(similarity, overlap)", "partial_rho": "partial ρ given overlap"}
"""The columns of :attr:`HDCFLRuns.donor_seed`: :func:`fedlib.algorithms.hdcfl.donor_ranking`'s keys, renamed."""
STEP_COLUMN = "mean accuracy step at activation (points)"
"""The column of :func:`activation_table` that :func:`step_text` reads."""


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


def activation_steps(history: pd.DataFrame, curves: pd.DataFrame, setting: str, refresh_every: int) -> pd.Series:
    """Per seed of ``setting`` (the index, sorted), the step in mean accuracy at activation: the
    first personalized evaluation (the first active refresh round of the rank-r descriptors' run)
    minus the evaluation ``refresh_every`` rounds before it, in points; NaN where activation comes
    at the first refresh (no evaluation before it) or never. What :func:`activation_table`
    averages, and what a claim on the steps compares, seed by seed.

    Examples
    --------
    >>> history = pd.DataFrame({"setting": "a", "seed": [0, 0, 1, 1], "descriptor": REFRESH_RUNS[0],
    ...                         "round": [2, 4, 2, 4], "active": [False, True, True, True]})
    >>> curves = pd.DataFrame({"setting": "a", "seed": [0, 0, 1, 1], "round": [2, 4, 2, 4], "mean": [50.0, 54.0, 60.0, 61.0]})
    >>> activation_steps(history, curves, "a", refresh_every=2).tolist()
    [4.0, nan]
    """
    check_int("refresh_every", refresh_every, low=1)
    main = history[(history.descriptor == REFRESH_RUNS[0]) & (history.setting == setting)]  # the run's own refreshes
    seeds = sorted(main.seed.unique())
    r_act = main[main.active].groupby("seed")["round"].min()
    at = curves[curves.setting == setting]

    def mean_at(s, r):
        v = at[(at.seed == s) & (at["round"] == r)]["mean"]
        return float(v.mean()) if len(v) else math.nan

    steps = {s: mean_at(s, r_act[s]) - mean_at(s, r_act[s] - refresh_every) if s in r_act.index else math.nan
             for s in seeds}
    return pd.Series(steps, dtype=float).sort_index()


def activation_table(history: pd.DataFrame, curves: pd.DataFrame, settings: Sequence[str],
                     refresh_every: int) -> pd.DataFrame:
    """When personalization starts, per setting: the first active refresh round of the rank-r
    descriptors' runs (mean, earliest and latest over seeds), and the mean step in mean accuracy
    from the evaluation ``refresh_every`` rounds before it to the first personalized evaluation
    (:data:`STEP_COLUMN`, the mean over seeds of :func:`activation_steps`; NaN where activation
    comes at the first refresh).

    Parameters
    ----------
    history : DataFrame
        :attr:`HDCFLRuns.history`: refresh rows with ``setting``, ``seed``, ``descriptor``, ``round``, ``active``.
    curves : DataFrame
        :attr:`HDCFLRuns.curves`: ``setting``, ``seed``, ``round``, ``mean`` (points).
    """
    main = history[history.descriptor == REFRESH_RUNS[0]]  # the run's own refreshes
    table = main[main.active].groupby(["setting", "seed"])["round"].min().groupby("setting").agg(["mean", "min", "max"])
    table = table.reindex(settings)
    table.columns = ["activation round (mean)", "earliest", "latest"]
    step = {}
    for setting in settings:
        steps = activation_steps(history, curves, setting, refresh_every).to_numpy()
        with warnings.catch_warnings():  # every step NaN (activation at the first refresh): NaN, said in the docstring
            warnings.simplefilter("ignore", RuntimeWarning)
            step[setting] = float(np.nanmean(steps)) if len(steps) else math.nan
    table[STEP_COLUMN] = pd.Series(step)
    return table


def step_text(points: float) -> str:
    """The activation step for the prose: ``"+1.2 points"``, or why there is none (NaN).

    Examples
    --------
    >>> step_text(1.23), step_text(float("nan"))
    ('+1.2 points', 'not measurable (activation at the first refresh)')
    """
    return "not measurable (activation at the first refresh)" if math.isnan(points) else f"{points:+.1f} points"


@dataclass
class HDCFLRuns:
    """What :meth:`HDCFLStudy.run` computed, one row per setting and seed (and method, variant,
    refresh, round or donor pair), with the values per seed (in seed order) that the claims read.

    Attributes
    ----------
    main : DataFrame
        ``setting, seed, method`` and :data:`TAIL_METRICS` (points), for every method of :data:`METHODS`.
    variants : DataFrame
        ``setting, seed, variant``, :data:`TAIL_METRICS`, and the last refresh's ``k`` and ``silhouette``.
    history : DataFrame
        :func:`two_histories` of the HDC-FL run, with ``setting, seed, descriptor``.
    curves : DataFrame
        ``setting, seed, round, mean``: HDC-FL's mean accuracy (points; the clients' pooled scores) at every evaluated round.
    donors : DataFrame
        :func:`donor_table` of the HDC-FL run, with ``setting, seed``.
    costs : DataFrame
        ``setting, seed, method`` and :func:`ledger_costs` (HDC-FL and FedRep).
    server : DataFrame
        ``setting, seed`` and :func:`server_seconds` of the HDC-FL run.
    first : dict of str to RunResult
        The first seed's HDC-FL run per setting (the chapter's worked solutions re-evaluate it).
    seconds : float
        The time all the runs took.
    macro : DataFrame
        ``seed, method``, :data:`TAIL_METRICS` averaged over the settings, and ``setting = "macro"``.
    donor_seed : DataFrame
        ``setting, seed`` and :func:`fedlib.algorithms.hdcfl.donor_ranking` per run (:data:`DONOR_COLUMNS`).
    """

    main: pd.DataFrame
    variants: pd.DataFrame
    history: pd.DataFrame
    curves: pd.DataFrame
    donors: pd.DataFrame
    costs: pd.DataFrame
    server: pd.DataFrame
    first: dict[str, RunResult] = field(default_factory=dict)
    seconds: float = 0.0
    macro: pd.DataFrame = field(init=False)
    donor_seed: pd.DataFrame = field(init=False)

    def __post_init__(self) -> None:
        self.macro = self.main.groupby(["seed", "method"])[list(TAIL_METRICS)].mean().reset_index().assign(setting="macro")
        rows = [{"setting": setting, "seed": s, **donor_ranking(d.dropna(axis=1, how="all"))}
                for (setting, s), d in self.donors.groupby(["setting", "seed"])]
        self.donor_seed = pd.DataFrame(rows).rename(columns=DONOR_COLUMNS)

    @classmethod
    def gather(cls, outputs: Sequence[Mapping]) -> "HDCFLRuns":
        """The runs from :meth:`HDCFLStudy.run_seed`'s outputs, in their order."""
        def rows(key):
            return [r for out in outputs for r in out[key]]

        return cls(main=pd.DataFrame(rows("rows")), variants=pd.DataFrame(rows("variants")),
                   history=pd.concat(rows("history"), ignore_index=True), curves=pd.concat(rows("curves"), ignore_index=True),
                   donors=pd.concat([out["donors"] for out in outputs], ignore_index=True), costs=pd.DataFrame(rows("bytes")),
                   server=pd.DataFrame(rows("server")),
                   first={out["setting"]: out["first"] for out in outputs if out["first"] is not None},
                   seconds=sum(out["seconds"] for out in outputs))

    @staticmethod
    def _per_seed(frame: pd.DataFrame, column: str, **where) -> np.ndarray:
        rows = frame
        for key, value in where.items():
            rows = rows[rows[key] == value]
        return rows.sort_values("seed")[column].to_numpy()

    def macro_of(self, method: str, metric: str) -> np.ndarray:
        """Per seed, ``method``'s macro value (the mean over the settings) of ``metric``."""
        return self._per_seed(self.macro, metric, method=method)

    def of(self, setting: str, method: str, metric: str) -> np.ndarray:
        """Per seed, ``method``'s ``metric`` in ``setting`` (a row of :attr:`main`)."""
        return self._per_seed(self.main, metric, setting=setting, method=method)

    def each_baseline(self, metric: str, baselines: Sequence[str] = BASELINES) -> dict[str, np.ndarray]:
        """Every baseline's macro values on ``metric``, one per seed, by name: what a claim against
        every baseline reads (one paired interval each, :func:`fedbook.claims.evaluate`; never
        the per-seed maximum of the test results)."""
        return {b: self.macro_of(b, metric) for b in baselines}

    def variant(self, setting: str, variant: str, metric: str = "mean") -> np.ndarray:
        """Per seed, an ablation's ``metric`` in ``setting``."""
        return self._per_seed(self.variants, metric, setting=setting, variant=variant)

    def refreshes(self, setting: str, descriptor: str, column: str, how: str) -> np.ndarray:
        """Per seed, the last refresh's value (``how="last"``) or the mean over the refreshes
        (``how="mean"``) of a :attr:`history` column, for one of :data:`REFRESH_RUNS`."""
        if how not in ("last", "mean"):
            raise ValueError(f"how must be 'last' or 'mean', got {how!r}")
        h = self.history[(self.history.setting == setting) & (self.history.descriptor == descriptor)]
        g = h.sort_values(["seed", "round"]).groupby("seed")[column]
        return (g.agg(lambda v: v.iloc[-1]) if how == "last" else g.mean()).sort_index().to_numpy()

    def nearest_donor(self, setting: str) -> tuple[np.ndarray, np.ndarray]:
        """Per seed, in ``setting``: the mean swap gain of each target's nearest-head donor (the
        highest raw-head cosine) and of a donor drawn at random (the mean gain over its donors,
        the expectation of a uniform draw), both averaged over the targets (:func:`nearest_donor_gain`)."""
        d = self.donors[self.donors.setting == setting]
        pairs = [nearest_donor_gain(g) for _, g in d.groupby("seed", sort=True)]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])

    def steps(self, setting: str, refresh_every: int) -> np.ndarray:
        """Per seed (every seed of :attr:`history`, in order), HDC-FL's step in mean accuracy at
        activation in ``setting`` (:func:`activation_steps`; NaN where it is not measurable), so
        that two settings' steps pair by seed."""
        seeds = sorted(self.history.seed.unique())
        return activation_steps(self.history, self.curves, setting, refresh_every).reindex(seeds).to_numpy(dtype=float)

    def overlap_share(self, setting: str, floor: float) -> np.ndarray:
        """Per seed, the share of the donor-ranking association that label-support overlap takes:
        (ρ − partial ρ given overlap) / ρ, with ρ the Spearman correlation of the raw-head
        similarity and the swap gain (:meth:`donor`); NaN on a seed whose ρ is not above
        ``floor`` (no positive association to explain: a claim reads the other seeds)."""
        rho, partial = self.donor(setting), self.donor(setting, DONOR_COLUMNS["partial_rho"])
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(rho > floor, (rho - partial) / rho, np.nan)

    def donor(self, setting: str, column: str = DONOR_COLUMNS["rho_raw"]) -> np.ndarray:
        """Per seed, a column of :attr:`donor_seed` in ``setting`` (default: ρ of the raw-head
        similarity and the swap gain)."""
        return self._per_seed(self.donor_seed, column, setting=setting)


@dataclass(frozen=True)
class HDCFLStudy:
    """What the chapter trains and deploys for every setting and run seed.

    Trained (:meth:`run_seed`): HDC-FL (evaluated every ``hdc.refresh_every`` rounds, for the
    dynamics; its server also groups the raw heads, for the raw-head ablation), FedRep,
    FedBABU, Ditto, FedAvg and IFCA (``ifca_k`` clusters). Deployed without training again:
    FedAvg-SE on HDC-FL's run (its shared encoder with each client's head), FedAvg-FT on
    FedAvg's, and each of ``variants`` on HDC-FL's final server state
    (:func:`fedlib.algorithms.hdcfl.with_variant`).

    Parameters
    ----------
    dataset, n_samples, cifar_root
        The data (:func:`fedlib.data.load_dataset`, a subset seeded by the run seed).
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
        The server-side ablations: per name, the :class:`~fedlib.algorithms.hdcfl.HDCConfig`
        fields it changes; :data:`RAW_RUN` (``descriptor="raw"``) is added after them. No change
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
    variants: Mapping[str, Mapping] = field(default_factory=dict)
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
        if RAW_RUN in self.variants:
            raise ValueError(f"a variant may not be named {RAW_RUN!r}: that is the raw-head ablation's row")

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

    def deploy_variant(self, run: RunResult, fed: Federation, model_fn: Callable, config: HDCConfig,
                       seed: int) -> tuple[dict[str, float], State]:
        """An HDC-FL run's final server state refreshed again under ``config``
        (:func:`fedlib.algorithms.hdcfl.with_variant`), each client's deployment evaluated
        (:func:`fedlib.run.evaluate_deployment`): its :func:`tail_metrics`, and the state."""
        state = with_variant(run.server, run.rounds_done, config, seed)
        rows = evaluate_deployment(HDCFL(train=self.train, config=config, seed=seed), dataclasses.replace(run, server=state),
                                   fed, model_fn, LoopConfig(rounds=self.rounds, seed=seed, participation=self.participation))
        return tail_metrics(rows), state

    def run_seed(self, setting: str, seed: int, keep: bool = False) -> dict:
        """Every run of one setting and seed: the rows of each of :class:`HDCFLRuns`'s tables
        (``rows`` for :attr:`HDCFLRuns.main`, ``variants``, ``history``, ``curves``, ``donors``,
        ``bytes`` for the costs, ``server``), the HDC-FL run itself when ``keep`` (``first``),
        and the ``seconds`` it all took."""
        fed, group = self.federation(setting, seed)
        model_fn = self.model_fn(fed.global_test)
        cfg = LoopConfig(rounds=self.rounds, seed=seed, participation=self.participation)
        t0 = time.perf_counter()
        tag = {"setting": setting, "seed": seed}
        out = {"rows": [], "variants": [], "history": [], "curves": [], "bytes": [], "server": []}

        def add(method, rows):
            out["rows"].append({**tag, "method": method, **tail_metrics(rows)})

        def last_refresh(server):
            last = refresh_history(server).iloc[-1]
            return {"k": int(last["k"]), "silhouette": float(last["silhouette"])}

        config = dataclasses.replace(self.hdc, compare_raw=True)  # the raw heads grouped too: diagnostics only
        hdc = run_federated(HDCFL(train=self.train, config=config, seed=seed), fed, model_fn,
                            dataclasses.replace(cfg, eval_every=self.hdc.refresh_every), self.options)
        add("HDC-FL", hdc.frame)
        add("FedAvg-SE", evaluate_deployment(FedAvgSE(train=self.train), hdc, fed, model_fn, cfg))
        done = {name: row for name, row in zip(("HDC-FL", "FedAvg-SE"), out["rows"])}
        for name, change in [*self.variants.items(), (RAW_RUN, {"descriptor": "raw"})]:
            if not change and self.rounds % self.hdc.refresh_every == 0:  # the run's own last refresh, deployed
                metrics, state = {m: done["HDC-FL"][m] for m in TAIL_METRICS}, hdc.server
            elif dict(change) == {"lam": 0.0}:  # λ = 0 deploys the shared encoder with each head: FedAvg-SE's row
                metrics, state = {m: done["FedAvg-SE"][m] for m in TAIL_METRICS}, hdc.server
            else:
                metrics, state = self.deploy_variant(hdc, fed, model_fn, dataclasses.replace(self.hdc, **change), seed)
            out["variants"].append({**tag, "variant": name, **metrics, **last_refresh(state)})
        out["history"].append(two_histories(refresh_history(hdc.server)).assign(**tag))
        curve = hdc.curve("pooled")  # the clients' pooled scores, as the tables
        out["curves"].append(pd.DataFrame({**tag, "round": curve.index, "mean": 100 * curve.values}))
        out["bytes"].append({**tag, "method": "HDC-FL", **ledger_costs(hdc.ledger, self.rounds, self.n_clients)})
        out["server"].append({**tag, **server_seconds(hdc.server_seconds, self.hdc.refresh_every)})
        out["donors"] = donor_table(hdc.server, fed, model_fn, self.hdc.rank, group).assign(**tag)
        out["setting"], out["first"] = setting, hdc if keep else None
        for name, alg in (("FedRep", FedRep(train=self.train, head_train=self.train)),
                          ("FedBABU", FedBABU(train=self.train, finetune=self.finetune)),
                          ("Ditto", Ditto(train=self.train, personal_train=self.train)), ("FedAvg", FedAvg(train=self.train)),
                          ("IFCA", IFCA(train=self.train, k=self.ifca_k, seed=seed))):
            run = run_federated(alg, fed, model_fn, cfg, self.options)
            if name == "FedAvg":
                add("FedAvg-FT", evaluate_deployment(FedAvgFT(train=self.train, finetune=self.finetune), run, fed, model_fn, cfg))
                continue
            add(name, run.frame)
            if name == "FedRep":
                out["bytes"].append({**tag, "method": "FedRep", **ledger_costs(run.ledger, self.rounds, self.n_clients)})
        out["seconds"] = time.perf_counter() - t0
        return out

    def run(self, settings: Sequence[str], seeds: Sequence[int], workers: int = 1) -> HDCFLRuns:
        """:meth:`run_seed` for every seed and, within it, every setting, in ``workers`` processes
        (:func:`fedbook.parallel.map_parallel`: the same bits as one after another); the first
        seed's HDC-FL runs are kept."""
        if not seeds:
            raise ValueError("seeds must hold at least one run seed, got none")
        items = [(setting, s) for s in seeds for setting in settings]
        outputs = map_parallel(lambda item: self.run_seed(*item, keep=item[1] == seeds[0]), items, workers)
        return HDCFLRuns.gather(outputs)


__all__ = ["BASELINES", "DEFAULT_VARIANT", "DONOR_COLUMNS", "HDCFLRuns", "HDCFLStudy", "METHODS", "RAW_RUN", "REFRESH_RUNS",
           "SETTINGS", "SHARED_VARIANT", "STEP_COLUMN", "TAIL_METRICS", "activation_steps", "activation_table", "donor_table",
           "ledger_costs", "nearest_donor_gain", "server_seconds", "step_text", "tail_metrics", "two_histories"]
