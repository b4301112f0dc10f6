r"""FedGRC's experiments: every method trained and deployed per run seed and Dirichlet
concentration, and the tables read from them (the chapter *FedGRC: the experiments*,
``notebooks/fedgrc_experiments.py``).

From FedGRC (*Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive
Statistical Personalization for Federated Learning*), Section V: Tables I/II (every method under
the evaluation protocol), Table IV (before and after personalization), Table IX (backbone × head
and the excess gain :math:`I`) and the sensitivity to :math:`m_0` and :math:`\gamma`.

:class:`FedGRCStudy` holds what is trained and deployed; :meth:`FedGRCStudy.run` runs it for
every seed and :math:`\alpha` and returns a :class:`StudyRuns`, whose tidy results (one row per
seed, :math:`\alpha`, method and metric, in percent) the chapter reads per seed with
:class:`fedbook.claims.SeedValues`. The other functions take such a reader ``v(alpha, method,
metric)`` (an array with one value per seed) and make the chapter's tables: :func:`each_baseline`,
:func:`mean_over_heads`, :func:`before_after`, :func:`baseline_head`, :func:`excess_gain_rows`
and :func:`sensitivity`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fedlib.algorithms import Ditto, FedAvg, FedAvgFT, FedETF, FedRep
from fedlib.algorithms.fedgrc import CGRL
from fedlib.cgrl import CGRLConfig
from fedlib.data import ArrayDataset
from fedlib.posthoc import FrozenFeatures, StatHead, collect_statistics
from fedlib.federation import Federation, hold_out_validation, make_federation
from fedlib.heads import MMS, SASP, FedCGSHead
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.messages import Ledger
from fedlib.metrics import protocol_summary
from fedlib.protocol import Algorithm
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig


def final_round(run: RunResult) -> pd.DataFrame:
    """The rows of a run's frame at its last completed round (what it deploys at the end)."""
    return run.frame[run.frame["round"] == run.rounds_done]


class SharedRule:
    r"""One linear head shared by every client, as :class:`fedlib.posthoc.StatPredictor` applies it
    to features: scores :math:`z W^\top + b` (float64), :math:`-\infty` for a class marked invalid
    (non-finite intercept); ``predict`` is their arg max (ties: the smallest class index). What
    :meth:`fedlib.posthoc.FrozenFeatures.summary` takes, so that a shared baseline head is scored
    on features extracted once per backbone instead of one backbone pass per head.

    Examples
    --------
    >>> rule = SharedRule(torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]), torch.tensor([0.0, 0.0, -math.inf]))
    >>> rule.predict(torch.tensor([[2.0, 1.0], [0.0, 3.0]])).tolist()  # class 2 is never predicted
    [0, 1]
    """

    def __init__(self, coef: torch.Tensor, intercept: torch.Tensor) -> None:
        self.valid = torch.isfinite(intercept)
        self.coef = torch.where(self.valid[:, None], coef.to(torch.float64), torch.zeros_like(coef, dtype=torch.float64))
        self.intercept = torch.where(self.valid, intercept.to(torch.float64), torch.zeros_like(intercept, dtype=torch.float64))

    @classmethod
    def fit(cls, head: object, statistics: RunResult, seed: int) -> "SharedRule":
        """The head the server of :class:`fedlib.posthoc.StatHead` fits on a statistics round
        (its arrays ``head/coef`` and ``head/intercept``: CCVR's virtual features from ``seed``)."""
        arrays = StatHead(head=head, seed=seed).server_head(statistics.server)
        return cls(arrays["head/coef"], arrays["head/intercept"])

    def predict(self, z: torch.Tensor) -> torch.Tensor:
        """Predicted classes of shape (n,) for features ``z`` of shape (n, d)."""
        logits = z.to(torch.float64) @ self.coef.T + self.intercept  # (n, C)
        return torch.where(self.valid[None, :], logits, torch.full_like(logits, -math.inf)).argmax(dim=1)


def deployed_name(method: str) -> str:
    """The row name of a trained method's own deployment: CGRL's own linear head is
    ``"CGRL (training head)"`` (its statistical heads are ``"CGRL + <head>"``); every other
    method keeps its name."""
    return "CGRL (training head)" if method == "CGRL" else method


@dataclass
class StudyRuns:
    """What :meth:`FedGRCStudy.run` computed, keyed by seed ``s``, concentration ``a``, method or backbone.

    Attributes
    ----------
    tidy : DataFrame
        ``seed, alpha, method, metric, value``: every deployment's protocol summary, in percent.
    validation : DataFrame
        ``seed, alpha, backbone, head, validation global (%)``: each baseline head on the
        FedAvg-Aug backbone, on the validation images (to choose Table IX's :math:`H_0`).
    federations : dict
        ``(s, a)``: the federation (its global test set without the validation images).
    statistics : dict
        ``(s, a, backbone)``: the backbone's multilayer statistics round (:func:`fedlib.posthoc.collect_statistics`).
    penultimate : dict
        ``(s, a)``: CGRL's penultimate-layer statistics round.
    features : dict
        ``s``: CGRL's multilayer :class:`fedlib.posthoc.FrozenFeatures` at the concentration
        ``keep_features_at`` of :meth:`FedGRCStudy.run`.
    ledgers : dict
        ``(s, a, backbone, kind)``: the ledger of a statistics round, ``kind`` ``"penultimate"`` or ``"multilayer"``.
    train_ledgers : dict
        ``(s, a, method)``: a training run's ledger.
    round_seconds : dict
        ``(s, a, method)``: the median wall-clock seconds of a training run's rounds.
    n_runs : int
        How many training runs there were.
    """

    tidy: pd.DataFrame
    validation: pd.DataFrame
    federations: dict = field(default_factory=dict)
    statistics: dict = field(default_factory=dict)
    penultimate: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    ledgers: dict[tuple, Ledger] = field(default_factory=dict)
    train_ledgers: dict[tuple, Ledger] = field(default_factory=dict)
    round_seconds: dict[tuple, float] = field(default_factory=dict)
    n_runs: int = 0


@dataclass(frozen=True)
class FedGRCStudy:
    """What the chapter trains and deploys for every run seed and Dirichlet concentration.

    Trained (one run each, :meth:`methods`): FedAvg-Aug (CGRL's code with ``augmentation``, its
    auxiliary weights at zero), CGRL (when ``"CGRL"`` is one of ``backbones``), FedRep, Ditto
    and FedETF (FedBABU, which the paper does not name, is not among them). **FedAvg is Ditto's global model**: Ditto's global update is FedAvg's local
    update (:class:`fedlib.algorithms.ditto.Ditto`, step 2) and only it is sent and averaged, so the
    server state of Ditto's run is a FedAvg run (its mini-batch order drawn after the personal
    model's); FedAvg is deployed on it, not trained a second time. Deployed on those runs without
    training again: FedAvg and FedAvg-FT (on Ditto's server state), FedETF-FT (local fine-tuning of
    the final model); on each backbone of ``backbones``, every head of ``baseline_heads`` on the
    penultimate features (scored on features extracted once, :class:`SharedRule`), MMS and
    MMS + SASP on the concatenated ``layers``, and on FedAvg, FedCGS fine-tuned on the client's
    features.

    The local budget: every model a client trains takes ``train`` (one pass over its data) per
    round; FedRep's head and body each take theirs (its two phases), Ditto's personal and global
    models each take theirs (the global one is FedAvg's), CGRL and FedAvg-Aug one pass over the
    two views of every sample.

    Parameters
    ----------
    model_fn : callable
        Builds the model every method trains.
    train, finetune, head_train : TrainConfig
        The local training of every method; FedAvg-FT's, FedETF-FT's and the FedCGS
        head's fine-tuning; FedRep's head epochs.
    cgrl, augmentation : CGRLConfig
        CGRL's configuration, and FedAvg-Aug's (the same views, no CGRL term).
    layers : tuple of str
        MMS's and CGRL's layers :math:`\\Lambda`.
    baseline_heads : mapping of str to Head
        The baseline statistical heads, by row name.
    gamma, m0 : float
        MMS's ridge :math:`\\gamma` and SASP's :math:`m_0`.
    n_clients, global_test_per_class : int
        The federation (:func:`fedlib.federation.make_federation`, Dirichlet label skew, ``min_size=10``).
    val_fraction : float
        The share of each class of the global test set held out for validation
        (:func:`fedlib.federation.hold_out_validation`).
    backbones : tuple of str, default ("FedAvg", "FedAvg-Aug", "CGRL")
        The trained methods whose backbone carries statistical heads.
    """

    model_fn: Callable[[], torch.nn.Module]
    train: TrainConfig
    finetune: TrainConfig
    head_train: TrainConfig
    cgrl: CGRLConfig
    augmentation: CGRLConfig
    layers: tuple[str, ...]
    baseline_heads: Mapping[str, object]
    gamma: float
    m0: float
    n_clients: int
    global_test_per_class: int
    val_fraction: float
    backbones: tuple[str, ...] = ("FedAvg", "FedAvg-Aug", "CGRL")

    def methods(self) -> dict[str, Algorithm]:
        """The trained methods, by row name, fresh objects (FedAvg is Ditto's global model; CGRL
        only when it is one of ``backbones``)."""
        methods = {
            "FedAvg-Aug": CGRL(train=self.train, cgrl=self.augmentation),
            "CGRL": CGRL(train=self.train, cgrl=self.cgrl),
            "FedRep": FedRep(train=self.train, head_train=self.head_train),
            "Ditto": Ditto(train=self.train, personal_train=self.train),
            "FedETF": FedETF(train=self.train),
        }
        if "CGRL" not in self.backbones:
            del methods["CGRL"]
        return methods

    def run(self, datasets: Mapping[int, ArrayDataset], seeds: Sequence[int], alphas: Sequence[float],
            loops: Mapping[int, LoopConfig], *, keep_features_at: float, results_dir: str | Path | None = None,
            edit_federation: Callable[[Federation], Federation] | None = None) -> StudyRuns:
        """Train and deploy everything for every seed (outer) and concentration (inner).

        Parameters
        ----------
        datasets : mapping of int to ArrayDataset
            The data set of each seed (a seeded subset per seed).
        seeds, alphas : sequences
            The run seeds and the Dirichlet concentrations.
        loops : mapping of int to LoopConfig
            The loop configuration of each seed.
        keep_features_at : float
            The concentration at which CGRL's frozen features are kept (:attr:`StudyRuns.features`).
        results_dir : path, optional
            Where every training run is saved (``seed<s>/alpha<a>/<method>``) with the tidy
            results (``fedgrc_results.csv``).
        edit_federation : callable, optional
            Applied to each federation right after it is built, before the validation split (the
            chapter's Exercise 2 rotates some clients' images).

        Returns
        -------
        StudyRuns
        """
        out, rows, val_rows = StudyRuns(pd.DataFrame(), pd.DataFrame()), [], []
        for s in seeds:
            for a in alphas:
                self._run_setting(out, rows, val_rows, datasets[s], s, a, loops[s], a == keep_features_at,
                                  results_dir, edit_federation)
        out.tidy, out.validation = pd.DataFrame(rows), pd.DataFrame(val_rows)
        if results_dir is not None:
            out.tidy.to_csv(Path(results_dir) / "fedgrc_results.csv", index=False)
        return out

    def federation(self, data: ArrayDataset, seed: int, alpha: float,
                   edit_federation: Callable[[Federation], Federation] | None = None) -> tuple[Federation, ArrayDataset]:
        """The federation of run ``seed`` at concentration ``alpha`` (its global test set without the
        validation images) and the validation set: what :meth:`run` trains and selects on."""
        fed = make_federation(data, n_clients=self.n_clients, partition="dirichlet", alpha=alpha, min_size=10,
                              global_test_per_class=self.global_test_per_class, seed=seed)
        if edit_federation is not None:
            fed = edit_federation(fed)
        return hold_out_validation(fed, self.val_fraction, seed)

    def _run_setting(self, out: StudyRuns, rows: list, val_rows: list, data: ArrayDataset, s: int, a: float,
                     lc: LoopConfig, keep_features: bool, results_dir, edit_federation) -> None:
        fed, val_set = self.federation(data, s, a, edit_federation)
        fed_val = dataclasses.replace(fed, global_test=val_set)
        out.federations[(s, a)] = fed
        model_fn = self.model_fn
        runs = {name: run_federated(alg, fed, model_fn, lc) for name, alg in self.methods().items()}
        out.n_runs += len(runs)
        for name, run in runs.items():
            out.train_ledgers[(s, a, name)] = run.ledger
            out.round_seconds[(s, a, name)] = float(np.median(run.seconds))  # the last round includes the evaluation
        deployments = {deployed_name(name): final_round(run) for name, run in runs.items()}
        runs["FedAvg"] = runs["Ditto"]  # Ditto's server state is FedAvg's global model (see the class docstring)
        summaries = {}
        deployments["FedAvg"] = evaluate_deployment(FedAvg(train=self.train), runs["FedAvg"], fed, model_fn, lc)
        deployments["FedAvg-FT"] = evaluate_deployment(FedAvgFT(train=self.train, finetune=self.finetune), runs["FedAvg"],
                                                       fed, model_fn, lc)
        deployments["FedETF-FT"] = evaluate_deployment(FedETF(train=self.train, finetune=self.finetune), runs["FedETF"],
                                                       fed, model_fn, lc)
        for backbone in self.backbones:
            pen = collect_statistics(runs[backbone], fed, model_fn, layers=("penultimate",), seed=s)
            multi = collect_statistics(runs[backbone], fed, model_fn, layers=self.layers, seed=s)
            out.statistics[(s, a, backbone)] = multi
            # the baseline heads are shared by every client: scored on the penultimate features extracted once
            pen_frozen = FrozenFeatures(pen, fed, model_fn)
            val_frozen = FrozenFeatures(pen, fed_val, model_fn) if backbone == "FedAvg-Aug" else None
            for label, head in self.baseline_heads.items():
                rule = SharedRule.fit(head, pen, s)
                summaries[f"{backbone} + {label}"] = pen_frozen.summary([rule] * len(pen_frozen.clients))
                if val_frozen is not None:  # the selection of H0 (Table IX's B0) on the validation images
                    val_global = val_frozen.summary([rule] * len(val_frozen.clients))["global"]
                    val_rows.append({"seed": s, "alpha": a, "backbone": backbone, "head": label,
                                     "validation global (%)": 100 * val_global})
            # MMS and SASP: the features once per split (FrozenFeatures gives the protocol's numbers without a
            # backbone pass over the global test set per client)
            frozen = FrozenFeatures(multi, fed, model_fn)
            mms = MMS(gamma=self.gamma).fit(frozen.moments, frozen.layer_dims)
            summaries[f"{backbone} + MMS"] = frozen.summary([mms] * len(frozen.client_moments))
            summaries[f"{backbone} + MMS + SASP"] = frozen.summary([SASP(m0=self.m0).fit(mms, mom) for mom in frozen.client_moments])
            if backbone == "CGRL" and keep_features:
                out.features[s] = frozen  # reused by the sensitivity sweep
            if backbone == "CGRL":
                out.penultimate[(s, a)] = pen
            out.ledgers[(s, a, backbone, "penultimate")] = pen.ledger
            out.ledgers[(s, a, backbone, "multilayer")] = multi.ledger
            if backbone == "FedAvg":
                deployments["FedAvg + FedCGS + FT"] = evaluate_deployment(
                    StatHead(FedCGSHead(), finetune=self.finetune, seed=s), pen, fed, model_fn, lc)
        summaries.update({name: protocol_summary(per_client_table(frame)) for name, frame in deployments.items()})
        for name, summary in summaries.items():
            rows += [{"seed": s, "alpha": a, "method": name, "metric": m, "value": 100 * v} for m, v in summary.items()]
        if results_dir is not None:
            for name, run in runs.items():
                if name != "FedAvg":  # FedAvg's run is Ditto's, saved once under its own name
                    run.save(Path(results_dir) / f"seed{s}" / f"alpha{a}" / name)


def each_baseline(v: Callable[..., np.ndarray], alpha: float, metric: str, baselines: Sequence[str]) -> dict[str, np.ndarray]:
    """Every baseline's values of ``metric`` at ``alpha``, one per seed, by name: what a claim
    against every baseline reads (:class:`fedbook.claims.Claim` with ``versus`` the names; one
    paired interval per baseline, never the per-seed maximum of the test results).

    Examples
    --------
    >>> values = {"A": np.array([90.0, 80.0]), "B": np.array([95.0, np.nan])}  # two seeds
    >>> each_baseline(lambda alpha, method, metric: values[method], 0.1, "global", ["A", "B"])["B"]
    array([95., nan])
    """
    return {n: v(alpha, n, metric) for n in baselines}


def mean_over_heads(v: Callable[..., np.ndarray], alpha: float, backbone: str, heads: Sequence[str], metric: str = "global") -> np.ndarray:
    """Per seed, the mean of ``metric`` over the rows ``"<backbone> + <head>"`` of ``heads``.

    Examples
    --------
    >>> values = {"B + X": np.array([90.0]), "B + Y": np.array([80.0])}  # one seed
    >>> mean_over_heads(lambda alpha, method, metric: values[method], 0.1, "B", ["X", "Y"])
    array([85.])
    """
    return np.mean([v(alpha, f"{backbone} + {h}", metric) for h in heads], axis=0)


def before_after(v: Callable[..., np.ndarray], seeds: Sequence[int], alphas: Sequence[float], pairs: Sequence[tuple[str, str]],
                 metrics: Sequence[str]) -> pd.DataFrame:
    """Table IV's paired changes: per seed, :math:`\\alpha`, pair ``(before, after)`` and metric,
    ``after − before``, in the column ``"Δ <metric>"`` (NaN where either is undefined).

    Returns
    -------
    DataFrame
        ``seed, alpha, before → after, column, value``.

    Examples
    --------
    >>> values = {"X": np.array([80.0]), "X-FT": np.array([90.0])}  # one seed
    >>> before_after(lambda alpha, method, metric: values[method], [0], [0.1], [("X", "X-FT")], ["local"]).to_dict("records")
    [{'seed': 0, 'alpha': 0.1, 'before → after': 'X → X-FT', 'column': 'Δ local', 'value': 10.0}]
    """
    rows = []
    for s_i, s in enumerate(seeds):
        for a in alphas:
            for before, after in pairs:
                for m in metrics:
                    d = v(a, after, m)[s_i] - v(a, before, m)[s_i]
                    rows.append({"seed": s, "alpha": a, "before → after": f"{before} → {after}", "column": f"Δ {m}", "value": d})
    return pd.DataFrame(rows)


def baseline_head(validation: pd.DataFrame, backbone: str = "FedAvg-Aug") -> dict[tuple, str]:
    """Table IX's :math:`H_0` per ``(seed, alpha)``: the baseline head of highest validation global
    accuracy on ``backbone`` (the first one on a tie).

    Examples
    --------
    >>> val = pd.DataFrame({"seed": 0, "alpha": 0.1, "backbone": "FedAvg-Aug", "head": ["X", "Y"],
    ...                     "validation global (%)": [80.0, 85.0]})
    >>> baseline_head(val)
    {(0, 0.1): 'Y'}
    """
    h0 = {}
    for (s, a), g in validation[validation["backbone"] == backbone].groupby(["seed", "alpha"]):
        h0[(s, a)] = g.set_index("head")["validation global (%)"].idxmax()
    return h0


EXCESS_COLUMNS = ("B0 + H0", "B1 + H0", "B0 + H1", "B1 + H1 (FedGRC)", "excess gain I")
"""The columns of Table IX (:func:`excess_gain_rows`)."""


def excess_gain_rows(v: Callable[..., np.ndarray], h0: Mapping[tuple, str], seeds: Sequence[int], alphas: Sequence[float],
                     metrics: Sequence[str] = ("F@25", "global"), b0: str = "FedAvg-Aug", b1: str = "CGRL",
                     h1: str = "MMS + SASP") -> pd.DataFrame:
    """Table IX per seed: each backbone × head pairing :math:`F(B, H)` and the excess gain

    .. math:: I = [F(B_1,H_1) - F(B_0,H_0)] - [F(B_1,H_0) - F(B_0,H_0)] - [F(B_0,H_1) - F(B_0,H_0)],

    positive when the two replacements help more together than the sum of their separate effects.

    Parameters
    ----------
    v : callable
        The chapter's values per seed, ``v(alpha, method, metric)`` (a :class:`fedbook.claims.SeedValues`).
    h0 : mapping
        :math:`H_0` per ``(seed, alpha)`` (:func:`baseline_head`).
    seeds, alphas : sequences
    metrics : sequence of str
    b0, b1, h1 : str
        The baseline backbone, FedGRC's backbone and FedGRC's head.

    Returns
    -------
    DataFrame
        ``seed, alpha, metric, column, value`` with the columns of :data:`EXCESS_COLUMNS`.

    Examples
    --------
    >>> values = {"A + H": [10.0], "A + S": [12.0], "C + H": [13.0], "C + S": [20.0]}  # one seed
    >>> rows = excess_gain_rows(lambda alpha, method, metric: np.array(values[method]), {(0, 0.1): "H"}, [0], [0.1],
    ...                         ["F@25"], b0="A", b1="C", h1="S")
    >>> rows["value"].tolist()  # I = (20 - 10) - (13 - 10) - (12 - 10)
    [10.0, 13.0, 12.0, 20.0, 5.0]
    """
    rows = []
    for s_i, s in enumerate(seeds):
        for a in alphas:
            for metric in metrics:
                f = {(b, hk): v(a, f"{b} + {hh}", metric)[s_i] for b in (b0, b1) for hk, hh in (("H0", h0[(s, a)]), ("H1", h1))}
                i_gain = (f[(b1, "H1")] - f[(b0, "H0")]) - (f[(b1, "H0")] - f[(b0, "H0")]) - (f[(b0, "H1")] - f[(b0, "H0")])
                for col, val in zip(EXCESS_COLUMNS, (f[(b0, "H0")], f[(b1, "H0")], f[(b0, "H1")], f[(b1, "H1")], i_gain)):
                    rows.append({"seed": s, "alpha": a, "metric": metric, "column": col, "value": val})
    return pd.DataFrame(rows)


SENSITIVITY_CURVES = ("local", "global", "F@25")
"""The curves of the :math:`m_0` sweep (:func:`sensitivity`)."""


def sensitivity(features: Mapping[int, FrozenFeatures], m0_grid: Sequence[float], gamma_grid: Sequence[float],
                gamma: float, m0: float) -> pd.DataFrame:
    """The heads refitted on each seed's frozen features: SASP for every :math:`m_0` of ``m0_grid``
    (the shared MMS with ridge ``gamma``; its curves :data:`SENSITIVITY_CURVES`), and for every
    :math:`\\gamma` of ``gamma_grid`` the shared MMS (curve ``"MMS global"``) and MMS + SASP with
    ``m0`` (``"MMS + SASP local"``, ``"MMS + SASP global"``), each by the protocol.

    Returns
    -------
    DataFrame
        ``seed, grid ("m0" or "gamma"), x, curve, value`` (percent).
    """
    rows = []
    for s, frozen in features.items():
        mms = MMS(gamma=gamma).fit(frozen.moments, frozen.layer_dims)
        for m in m0_grid:
            summ = frozen.summary([SASP(m0=m).fit(mms, mom) for mom in frozen.client_moments])
            rows += [{"seed": s, "grid": "m0", "x": m, "curve": k, "value": 100 * summ[k]} for k in SENSITIVITY_CURVES]
        for g in gamma_grid:
            mg = MMS(gamma=g).fit(frozen.moments, frozen.layer_dims)
            shared = frozen.summary([mg] * len(frozen.client_moments))
            pers = frozen.summary([SASP(m0=m0).fit(mg, mom) for mom in frozen.client_moments])
            rows += [{"seed": s, "grid": "gamma", "x": g, "curve": "MMS global", "value": 100 * shared["global"]},
                     {"seed": s, "grid": "gamma", "x": g, "curve": "MMS + SASP local", "value": 100 * pers["local"]},
                     {"seed": s, "grid": "gamma", "x": g, "curve": "MMS + SASP global", "value": 100 * pers["global"]}]
    return pd.DataFrame(rows)


__all__ = ["EXCESS_COLUMNS", "SENSITIVITY_CURVES", "FedGRCStudy", "SharedRule", "StudyRuns", "baseline_head", "before_after",
           "deployed_name", "each_baseline", "excess_gain_rows", "final_round", "mean_over_heads", "sensitivity"]
