r"""FedGRC's experiments: what one cell of the chapter's studies trains and deploys (a run seed and
a Dirichlet concentration), and the tables, figures, claim frames and numbers read from the
studies' frames (the chapter *FedGRC: the experiments*, ``notebooks/fedgrc_experiments.py``).

From FedGRC (*Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive
Statistical Personalization for Federated Learning*), Section V: Tables I/II (every method under
the evaluation protocol), Table IV (before and after personalization), Table IX (backbone × head
and the excess gain :math:`I`), the sensitivity to :math:`m_0` and :math:`\gamma`, the costs, and
the exercises' reduced runs.

The chapter runs its experiments as :class:`fedbook.study.Study` objects whose cells are
functions of this module, called as ``cell(seed=s, **setting)``:

* :func:`train_cell`: every method of a :class:`FedGRCStudy` trained and deployed at one seed
  and :math:`\alpha` (the frames ``runs``, ``validation`` and ``costs``; with CGRL among the
  backbones also ``sensitivity``, the :math:`m_0` and :math:`\gamma` sweeps on its frozen
  backbone, and ``penultimate``, MMS and SASP refitted on its penultimate layer only). The
  pilot that names the trade-off rows' comparators runs it too, without CGRL.
* :func:`ablation_cell`: Exercise 1's reduced runs (one CGRL term switched off at a time).
* :func:`rotated_cell`: Exercise 2's heads refitted after some clients' images are rotated.

The rest reads their frames: :func:`results_table` (Tables I/II), :func:`before_after`
(Table IV), :func:`baseline_head` and :func:`excess_gain_rows` (Table IX),
:func:`cost_table`, :func:`plot_local_global` and :func:`plot_sensitivity` (the figures),
:func:`claim_frames` (what the claims read, one row per seed), :func:`untestable_text` (the rows
their resolution cannot test) and :func:`numbers` (every number the prose quotes). A reader ``v(alpha, method, metric)`` of one value per seed is a
:class:`fedbook.intervals.SeedValues` of the ``runs`` frame (:func:`seed_values`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.lines
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from fedbook.claims import UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING, ClaimResult, Read, smallest_resolvable
from fedbook.intervals import SeedValues, interval_text, mean_interval, resolution_of, seed_band, seed_table
from fedbook.page import clipped_error, format_bytes, format_value, place_labels, show_table
from fedlib.algorithms import Ditto, FedAvg, FedAvgFT, FedETF, FedRep
from fedlib.algorithms.fedgrc import CGRL
from fedlib.cgrl import CGRLConfig
from fedlib.data import ArrayDataset, plot_partition, subsample
from fedlib.federation import ClientData, Federation, hold_out_validation, make_federation
from fedlib.heads import MMS, SASP, CCVRHead, FedCGSHead, Fed3RHead, FedNCMHead, LDAHead
from fedlib.heads.mms import adaptation_weights
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.cgrl import within_class_share
from fedlib.metrics import FLOOR_FRACTION, RARE_RATIO, floor_at25, lowest_tail, pooled_effective_size, protocol_summary, rare_classes
from fedlib.models import build_model
from fedlib.posthoc import FrozenFeatures, StatHead, collect_statistics
from fedlib.protocol import Algorithm
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig

FEDGRC = "CGRL + MMS + SASP"
"""FedGRC's row: the CGRL backbone with the MMS metric and SASP heads."""
PFL = ("FedAvg", "FedAvg-Aug", "FedAvg-FT", "FedRep", "Ditto", "FedETF", "FedETF-FT", "CGRL (training head)")
"""The personalized-FL rows of Tables I/II (CGRL's own training head among them)."""
BASELINE_HEAD_NAMES = ("FedNCM", "LDA", "FedCGS", "Fed3R", "CCVR")
"""The five baseline statistical heads, in the tables' order (:class:`FedGRCStudy` builds them)."""
BACKBONES = ("FedAvg", "FedAvg-Aug", "CGRL")
"""The trained methods whose backbone carries statistical heads."""
HEADS = (*BASELINE_HEAD_NAMES, "MMS", "MMS + SASP")
"""Every statistical head, by the suffix of its rows (``"<backbone> + <head>"``)."""
BASELINES = ([n for n in PFL if n != "CGRL (training head)"] + ["FedAvg + FedCGS + FT"]
             + [f"{b} + {h}" for b in ("FedAvg", "FedAvg-Aug") for h in BASELINE_HEAD_NAMES])
"""The baselines of the claims: the personalized-FL methods, FedCGS fine-tuned on FedAvg (the
stand-in for pFedGM) and the baseline heads on the FedAvg and FedAvg-Aug backbones; the rows made
of FedGRC's own parts are ablations."""
ORDER = [*PFL, "FedAvg + FedCGS + FT", *(f"{b} + {h}" for b in BACKBONES for h in HEADS)]
"""The rows of Tables I/II, in the paper's grouping."""
ABILITY_COLUMNS = ("local", "pooled", "global", "unseen", "rare")
"""The abilities of Tables I/II: the four of the paper, with the client-weighted recall ``pooled``
beside ``local`` (:func:`fedlib.metrics.pooled_accuracy`)."""
FLOOR_COLUMNS = ("L@25", "P@25", "U@25", "R@25", "F@25", "PF@25")
"""The floors of Tables I/II: the paper's four, with ``P@25`` (the floor of ``pooled``) and ``PF@25``
(:data:`CLIENT_WEIGHTED_FLOOR`) beside them."""
METRICS = (*ABILITY_COLUMNS, *FLOOR_COLUMNS)
"""The columns of Tables I/II: the abilities, then the floors."""
CLIENT_WEIGHTED_FLOOR = ("pooled", "unseen", "rare")
"""The abilities whose minimum is a client's floor in ``PF@25``: ``F@25`` with the client-weighted
recall in the place of the local test split's accuracy (:func:`fedlib.metrics.floor_at25`)."""
CLIENT_WEIGHTED = {"local": "pooled", "L@25": "P@25", "F@25": "PF@25"}
"""The metric a claim about the paper's metric reads (the others read themselves): each client's
personalized model on the global test set, each class's recall weighted by the client's training
label mix :math:`p_k(c)` (exact under label skew), instead of its own test split of a few images."""
SCATTER = "within-class share (%)"
"""The column of the ``scatter`` frame: :func:`fedlib.cgrl.within_class_share` of a backbone's
penultimate training features, in percent."""
PAIRS = (("FedETF", "FedETF-FT"), ("FedAvg + FedCGS", "FedAvg + FedCGS + FT"), ("CGRL + MMS", FEDGRC))
"""Table IV's (before, after) personalization pairs."""
SENSITIVITY_CURVES = ("local", "global", "F@25")
"""The curves of the :math:`m_0` sweep (:func:`sensitivity`)."""
GAMMA_CURVES = ("MMS global", "MMS + SASP local", "MMS + SASP global")
"""The curves of the :math:`\\gamma` sweep (:func:`sensitivity`)."""
EXCESS_COLUMNS = ("B0 + H0", "B1 + H0", "B0 + H1", "B1 + H1 (FedGRC)", "excess gain I")
"""The columns of Table IX (:func:`excess_gain_rows`)."""
EXCESS_METRICS = ("F@25", "PF@25", "global")
"""The metrics of Table IX (:func:`excess_gain_rows`)."""
ROUND_ROWS = {"Ditto": "FedAvg's messages (Ditto's run: its global model)", "FedAvg-Aug": "FedAvg-Aug", "CGRL": "CGRL"}
"""The training rounds the cost table shows, by trained method (FedAvg's messages are Ditto's global model's)."""
ABLATIONS = {"FedAvg-Aug (both weights 0)": dict(lambda_dir=0.0, lambda_rad=0.0, direction_pass="train"), "CGRL": {},
             "CGRL, λ_dir = 0": dict(lambda_dir=0.0), "CGRL, λ_rad = 0": dict(lambda_rad=0.0)}
"""Exercise 1's backbones: CGRL's configuration with these fields replaced (:func:`ablation_cell`)."""
HEAD_EPOCHS = 1
"""FedRep's head epochs per round."""
CEILING = 90.0
"""Percent: a statistical head at or above it leaves the paper's differences little room (:func:`ceiling_text`)."""


def protocol_row(per_client: pd.DataFrame) -> dict[str, float]:
    """:func:`fedlib.metrics.protocol_summary` of a per-client ability table, with ``PF@25``
    (:func:`fedlib.metrics.floor_at25` over :data:`CLIENT_WEIGHTED_FLOOR`)."""
    return protocol_summary(per_client) | {"PF@25": floor_at25(per_client, CLIENT_WEIGHTED_FLOOR)}


def final_round(run: RunResult) -> pd.DataFrame:
    """The rows of a run's frame at its last completed round (what it deploys at the end)."""
    return run.frame[run.frame["round"] == run.rounds_done]


def key(metric: str) -> str:
    """A metric's name in glue and claim keys (no ``@``).

    >>> key("F@25")
    'F25'
    """
    return metric.replace("@", "")


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
class Deployment:
    """What :meth:`FedGRCStudy.deploy` computed at one seed ``s`` and concentration ``a``.

    Attributes
    ----------
    federation : Federation
        Its global test set without the validation images.
    rows : list of dict
        ``method, metric, value``: every deployment's protocol summary, in percent.
    validation : list of dict
        ``backbone, head, validation global (%)``: each baseline head on the FedAvg-Aug backbone,
        on the validation images (to choose Table IX's :math:`H_0`).
    runs : dict
        The training runs by method (``"FedAvg"``: Ditto's run).
    statistics : dict
        ``(backbone, kind)``: a statistics round (:func:`fedlib.posthoc.collect_statistics`),
        ``kind`` ``"penultimate"`` or ``"multilayer"``.
    features : dict
        ``(backbone, kind)``: the :class:`fedlib.posthoc.FrozenFeatures` of that round.
    scatter : list of dict
        ``backbone, within-class share (%), images``: :func:`fedlib.cgrl.within_class_share` of each
        backbone's penultimate features on the clients' training images (the statistics round).
    """

    federation: Federation
    rows: list = field(default_factory=list)
    validation: list = field(default_factory=list)
    runs: dict = field(default_factory=dict)
    statistics: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    scatter: list = field(default_factory=list)


@dataclass(frozen=True)
class FedGRCStudy:
    """What the chapter trains and deploys at every run seed and Dirichlet concentration.

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
    backbones: tuple[str, ...] = BACKBONES

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

    def federation(self, data: ArrayDataset, seed: int, alpha: float,
                   edit_federation: Callable[[Federation], Federation] | None = None) -> tuple[Federation, ArrayDataset]:
        """The federation of run ``seed`` at concentration ``alpha`` (its global test set without the
        validation images) and the validation set: what :meth:`deploy` trains and selects on."""
        fed = make_federation(data, n_clients=self.n_clients, partition="dirichlet", alpha=alpha, min_size=10,
                              global_test_per_class=self.global_test_per_class, seed=seed)
        if edit_federation is not None:
            fed = edit_federation(fed)
        return hold_out_validation(fed, self.val_fraction, seed)

    def deploy(self, data: ArrayDataset, s: int, a: float, lc: LoopConfig, *,
               edit_federation: Callable[[Federation], Federation] | None = None,
               results_dir: str | Path | None = None) -> Deployment:
        """Train every method of :meth:`methods` at seed ``s`` and concentration ``a`` and deploy
        every row (see the class docstring).

        Parameters
        ----------
        data : ArrayDataset
            The run seed's data set.
        s, a : int, float
            The run seed and the Dirichlet concentration.
        lc : LoopConfig
            The round loop's configuration (its seed is ``s``).
        edit_federation : callable, optional
            Applied to the federation right after it is built, before the validation split (the
            chapter's Exercise 2 rotates some clients' images).
        results_dir : path, optional
            Where every training run is saved (``seed<s>/alpha<a>/<method>``).

        Returns
        -------
        Deployment
        """
        fed, val_set = self.federation(data, s, a, edit_federation)
        fed_val = dataclasses.replace(fed, global_test=val_set)
        out = Deployment(fed)
        model_fn = self.model_fn
        runs = {name: run_federated(alg, fed, model_fn, lc) for name, alg in self.methods().items()}
        out.runs = runs
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
            out.statistics[(backbone, "penultimate")], out.statistics[(backbone, "multilayer")] = pen, multi
            # the baseline heads are shared by every client: scored on the penultimate features extracted once
            pen_frozen = FrozenFeatures(pen, fed, model_fn)
            val_frozen = FrozenFeatures(pen, fed_val, model_fn) if backbone == "FedAvg-Aug" else None
            for label, head in self.baseline_heads.items():
                rule = SharedRule.fit(head, pen, s)
                summaries[f"{backbone} + {label}"] = protocol_row(pen_frozen.abilities([rule] * len(pen_frozen.clients)))
                if val_frozen is not None:  # the selection of H0 (Table IX's B0) on the validation images
                    val_global = val_frozen.summary([rule] * len(val_frozen.clients))["global"]
                    out.validation.append({"backbone": backbone, "head": label, "validation global (%)": 100 * val_global})
            # MMS and SASP: the features once per split (FrozenFeatures gives the protocol's numbers without a
            # backbone pass over the global test set per client)
            frozen = FrozenFeatures(multi, fed, model_fn)
            mms = MMS(gamma=self.gamma).fit(frozen.moments, frozen.layer_dims)
            summaries[f"{backbone} + MMS"] = protocol_row(frozen.abilities([mms] * len(frozen.client_moments)))
            summaries[f"{backbone} + MMS + SASP"] = protocol_row(
                frozen.abilities([SASP(m0=self.m0).fit(mms, mom) for mom in frozen.client_moments]))
            out.scatter.append({"backbone": backbone, SCATTER: 100 * within_class_share(pen_frozen.moments),
                                "images": float(pen_frozen.moments.counts.sum())})
            out.features[(backbone, "penultimate")], out.features[(backbone, "multilayer")] = pen_frozen, frozen
            if backbone == "FedAvg":
                deployments["FedAvg + FedCGS + FT"] = evaluate_deployment(
                    StatHead(FedCGSHead(), finetune=self.finetune, seed=s), pen, fed, model_fn, lc)
        summaries.update({name: protocol_row(per_client_table(frame)) for name, frame in deployments.items()})
        for name, summary in summaries.items():
            out.rows += [{"method": name, "metric": m, "value": 100 * v} for m, v in summary.items()]
        if results_dir is not None:
            for name, run in runs.items():
                if name != "FedAvg":  # FedAvg's run is Ditto's, saved once under its own name
                    run.save(Path(results_dir) / f"seed{s}" / f"alpha{a}" / name)
        return out


def chapter_study(P, data: ArrayDataset) -> FedGRCStudy:
    """The chapter's :class:`FedGRCStudy` from its settings ``P`` (the profile with the
    overrides, :func:`fedbook.page.setup`) and a data set of the run (its shape and classes):
    the model ``P.model`` (``P.model_kw``), SGD with momentum 0.9 and batch 32 at ``P.lr``
    (``P.local_epochs`` a round, ``P.finetune_epochs`` to fine-tune, :data:`HEAD_EPOCHS` for
    FedRep's head), CGRL with ``P.tau``, ``P.lambda_dir``, ``P.lambda_rad``, ``P.warmup`` on the
    layers ``P.layers`` (``None``: every pooled block of the model), FedAvg-Aug the same views with
    both auxiliary weights at zero, the five baseline heads, and ``P.gamma``, ``P.m0``,
    ``P.n_clients``, ``P.global_test_per_class``, ``P.val_fraction``."""
    model_fn = functools.partial(build_model, P.model, in_channels=data.x.shape[1], n_classes=data.n_classes,
                                 input_size=data.x.shape[-1], **P.model_kw)
    layers = tuple(P.layers) if P.layers is not None else tuple(model_fn().feature_layers)
    cgrl = CGRLConfig(tau=P.tau, lambda_dir=P.lambda_dir, lambda_rad=P.lambda_rad, warmup=P.warmup, layers=layers,
                      augment="cifar" if P.dataset.startswith("cifar") else "digits")
    # the augmentation control ("FedYoYo-like"): the same two views and the same cross-entropy, no CGRL term (its
    # class directions are unused, so they come from the training pass instead of an extra evaluation pass)
    return FedGRCStudy(
        model_fn=model_fn, train=TrainConfig(epochs=P.local_epochs, batch_size=32, lr=P.lr, momentum=0.9),
        finetune=TrainConfig(epochs=P.finetune_epochs, batch_size=32, lr=P.lr, momentum=0.9),
        head_train=TrainConfig(epochs=HEAD_EPOCHS, batch_size=32, lr=P.lr), cgrl=cgrl,
        augmentation=dataclasses.replace(cgrl, **ABLATIONS["FedAvg-Aug (both weights 0)"]), layers=layers,
        baseline_heads=dict(zip(BASELINE_HEAD_NAMES, (FedNCMHead(), LDAHead(), FedCGSHead(), Fed3RHead(), CCVRHead()))),
        gamma=P.gamma, m0=P.m0, n_clients=P.n_clients, global_test_per_class=P.global_test_per_class,
        val_fraction=P.val_fraction)


def _loop(rounds: int, seed: int, **kw) -> LoopConfig:
    return LoopConfig(rounds=rounds, seed=seed, eval_every=0, rare_ratio=RARE_RATIO, **kw)


def train_cell(seed: int, alpha: float, *, study: FedGRCStudy, data: Callable[..., ArrayDataset], rounds: int,
               m0_grid: Sequence[float] = (), gamma_grid: Sequence[float] = (),
               edit_federation: Callable[[Federation], Federation] | None = None,
               results_dir: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """One cell of the chapter's training study (and of its pilot): every method of ``study``
    trained for ``rounds`` rounds at run seed ``seed`` and concentration ``alpha``, deployed
    (:meth:`FedGRCStudy.deploy`), and the heads refitted on its frozen CGRL backbone.

    Parameters
    ----------
    seed, alpha : int, float
        The cell.
    study : FedGRCStudy
    data : callable
        ``data(seed=seed)``: the run seed's data set (e.g. a ``functools.partial`` of
        :func:`fedlib.data.datasets.load_dataset`).
    rounds : int
        Communication rounds of every training run.
    m0_grid, gamma_grid : sequences of float
        The sensitivity sweeps on the CGRL backbone (:func:`sensitivity`).
    edit_federation : callable, optional
        As :meth:`FedGRCStudy.deploy`.
    results_dir : path, optional
        Where the training runs are saved (a cell read from the study's cache saves nothing).

    Returns
    -------
    dict of str to DataFrame
        ``runs`` (``method, metric, value``: every row of Tables I/II, percent), ``validation``
        (``backbone, head, validation global (%)``), ``costs`` (``method, round, bytes per
        client, seconds per round``: each training run, and each backbone's statistics rounds); ``scatter``
        (``backbone, within-class share (%), images``: :attr:`Deployment.scatter`); ``regime`` (one row,
        :func:`regime_row` of the federation);
        with CGRL among the backbones, ``sensitivity`` (:func:`sensitivity` on its multilayer
        features) and ``penultimate`` (``method, metric, value``: ``"CGRL + MMS"`` and FedGRC's
        heads refitted on its penultimate features only).
    """
    cell = study.deploy(data(seed=seed), seed, alpha, _loop(rounds, seed), edit_federation=edit_federation,
                        results_dir=results_dir)
    costs = [{"method": name, "round": "training",
              # a round's bytes over all clients (n_clients=1: the ledger's total per round), then per client
              "bytes per client": run.ledger.per_client_and_round(phase="all", n_clients=1) / study.n_clients,
              "seconds per round": float(np.median(run.seconds))}  # the last round includes the evaluation
             for name, run in cell.runs.items() if name != "FedAvg"]
    for (backbone, kind), stats in cell.statistics.items():  # the statistics round follows the last training round
        costs.append({"method": backbone, "round": f"statistics ({kind})", "seconds per round": math.nan,
                      "bytes per client": stats.ledger.per_client_and_round(phase="all", rounds=rounds + 1,
                                                                            n_clients=study.n_clients, n_rounds=1)})
    frames = {"runs": pd.DataFrame(cell.rows), "validation": pd.DataFrame(cell.validation),
              "costs": pd.DataFrame(costs, columns=["method", "round", "bytes per client", "seconds per round"]),
              "scatter": pd.DataFrame(cell.scatter, columns=["backbone", SCATTER, "images"]),
              "regime": pd.DataFrame([regime_row(cell.federation, study.m0)], columns=list(REGIME_COLUMNS))}
    if "CGRL" in study.backbones:
        frames["sensitivity"] = sensitivity(cell.features[("CGRL", "multilayer")], m0_grid, gamma_grid,
                                            gamma=study.gamma, m0=study.m0)
        frames["penultimate"] = refitted_heads(cell.features[("CGRL", "penultimate")], gamma=study.gamma, m0=study.m0)
    return frames


def refitted_heads(frozen: FrozenFeatures, gamma: float, m0: float, metrics: Sequence[str] = SENSITIVITY_CURVES,
                   backbone: str = "CGRL") -> pd.DataFrame:
    """MMS (ridge ``gamma``) and MMS + SASP (``m0``) fitted on ``frozen``'s features, scored by the
    protocol: ``method, metric, value`` (percent), the rows ``"<backbone> + MMS"`` and
    ``"<backbone> + MMS + SASP"``."""
    mms = MMS(gamma=gamma).fit(frozen.moments, frozen.layer_dims)
    rows = []
    for label, heads in ((f"{backbone} + MMS", [mms] * len(frozen.client_moments)),
                         (f"{backbone} + MMS + SASP", [SASP(m0=m0).fit(mms, mom) for mom in frozen.client_moments])):
        summ = frozen.summary(heads)
        rows += [{"method": label, "metric": m, "value": 100 * summ[m]} for m in metrics]
    return pd.DataFrame(rows)


def sensitivity(frozen: FrozenFeatures, m0_grid: Sequence[float], gamma_grid: Sequence[float],
                gamma: float, m0: float) -> pd.DataFrame:
    """The heads refitted on one frozen backbone's features: SASP for every :math:`m_0` of
    ``m0_grid`` (on the shared MMS with ridge ``gamma``; its curves :data:`SENSITIVITY_CURVES`),
    and for every :math:`\\gamma` of ``gamma_grid`` the shared MMS (curve ``"MMS global"``) and
    MMS + SASP with ``m0`` (``"MMS + SASP local"``, ``"MMS + SASP global"``), each by the protocol.

    Returns
    -------
    DataFrame
        ``grid ("m0" or "gamma"), x, curve, value`` (percent).
    """
    rows = []
    mms = MMS(gamma=gamma).fit(frozen.moments, frozen.layer_dims)
    for m in m0_grid:
        summ = frozen.summary([SASP(m0=m).fit(mms, mom) for mom in frozen.client_moments])
        rows += [{"grid": "m0", "x": m, "curve": k, "value": 100 * summ[k]} for k in SENSITIVITY_CURVES]
    for g in gamma_grid:
        mg = MMS(gamma=g).fit(frozen.moments, frozen.layer_dims)
        shared = frozen.summary([mg] * len(frozen.client_moments))
        pers = frozen.summary([SASP(m0=m0).fit(mg, mom) for mom in frozen.client_moments])
        rows += [{"grid": "gamma", "x": g, "curve": "MMS global", "value": 100 * shared["global"]},
                 {"grid": "gamma", "x": g, "curve": "MMS + SASP local", "value": 100 * pers["local"]},
                 {"grid": "gamma", "x": g, "curve": "MMS + SASP global", "value": 100 * pers["global"]}]
    return pd.DataFrame(rows, columns=["grid", "x", "curve", "value"])


def ablation_cell(seed: int, variant: str, *, study: FedGRCStudy, data: Callable[..., ArrayDataset], rounds: int,
                  alpha: float, n_samples: int, n_clients: int, global_test_per_class: int) -> pd.DataFrame:
    """Exercise 1's reduced run: a backbone trained with CGRL's code, its configuration
    ``study.cgrl`` with the fields of :data:`ABLATIONS` ``[variant]`` replaced, on a smaller
    federation (``n_samples`` of the run seed's data, ``n_clients`` clients, Dirichlet ``alpha``),
    with MMS + SASP on top.

    Returns
    -------
    DataFrame
        One row: ``local (%)``, ``global (%)``, ``F@25 (%)``, and the ``images`` and ``clients`` of the run.
    """
    images = subsample(data(seed=seed), n_samples, seed)
    fed = make_federation(images, n_clients=n_clients, partition="dirichlet", alpha=alpha, min_size=10,
                          global_test_per_class=global_test_per_class, seed=seed)
    cfg = dataclasses.replace(study.cgrl, **ABLATIONS[variant])
    run = run_federated(CGRL(train=study.train, cgrl=cfg), fed, study.model_fn, _loop(rounds, seed, evaluate_last=False))
    ff = FrozenFeatures(collect_statistics(run, fed, study.model_fn, layers=study.layers, seed=seed), fed, study.model_fn)
    mms = MMS(gamma=study.gamma).fit(ff.moments, ff.layer_dims)
    summ = ff.summary([SASP(m0=study.m0).fit(mms, mom) for mom in ff.client_moments])
    return pd.DataFrame([{**{f"{m} (%)": 100 * summ[m] for m in SENSITIVITY_CURVES}, "images": len(images),
                          "clients": fed.n_clients}])


def rotate(d: ArrayDataset) -> ArrayDataset:
    """The images of ``d`` turned a quarter turn (``torch.rot90`` over the two image axes)."""
    return ArrayDataset(torch.rot90(d.x, 1, (2, 3)), d.y, d.n_classes, d.name)


def rotate_odd_clients(fed: Federation) -> Federation:
    """``fed`` with every odd-numbered client's training and local test images rotated
    (:func:`rotate`); a rotated client's held-out pool is the global test set, rotated like its images."""
    pool = rotate(fed.global_test)
    return Federation([ClientData(rotate(c.train), rotate(c.test), pool=pool) if k % 2 else c
                       for k, c in enumerate(fed.clients)], fed.global_test, fed.n_classes, fed.description)


def rotated_cell(seed: int, alpha: float, *, study: FedGRCStudy, data: Callable[..., ArrayDataset], rounds: int,
                 m0_grid: Sequence[float]) -> pd.DataFrame:
    """Exercise 2's reduced run: the chapter's CGRL backbone at ``seed`` and ``alpha`` (trained
    again as :func:`train_cell` trains it, on upright digits), then every odd-numbered client's
    images rotated *before the statistics round* (:func:`rotate_odd_clients`), MMS fitted on the
    clients' moments and SASP for every :math:`m_0` of ``m0_grid``.

    Returns
    -------
    DataFrame
        ``m0, local (%), global (%), F@25 (%)``, and the federation's ``clients`` and how many are ``rotated``.
    """
    fed, _ = study.federation(data(seed=seed), seed, alpha)
    run = run_federated(CGRL(train=study.train, cgrl=study.cgrl), fed, study.model_fn, _loop(rounds, seed))
    stats = collect_statistics(run, fed, study.model_fn, layers=study.layers, seed=seed)
    ff = FrozenFeatures(stats, rotate_odd_clients(fed), study.model_fn)
    mms = MMS(gamma=study.gamma).fit(ff.client_moments, ff.layer_dims)  # the rotated clients' moments
    rows = []
    for m in m0_grid:
        summ = ff.summary([SASP(m0=m).fit(mms, mom) for mom in ff.client_moments])
        rows.append({"m0": m, **{f"{k} (%)": 100 * summ[k] for k in SENSITIVITY_CURVES}, "clients": fed.n_clients,
                     "rotated": fed.n_clients // 2})
    return pd.DataFrame(rows)


REGIME_COLUMNS = ("effective images, weakest quarter", "rare-class support", "SASP weight on own data")
"""The columns of :func:`regime_row`."""


def effective_images(fed: Federation) -> np.ndarray:
    """Each client's effective test images behind its client-weighted recall on ``fed``'s global
    test set (:func:`fedlib.metrics.pooled_effective_size`: the size of a plain sample with the
    same variance), of shape (n_clients,)."""
    pool = np.bincount(fed.global_test.labels_np, minlength=fed.n_classes)
    return np.array([pooled_effective_size(pool, counts) for counts in fed.train_counts()], dtype=float)


def regime_row(fed: Federation, m0: float, rare_ratio: float = RARE_RATIO) -> dict[str, float]:
    r"""What the chapter's regime checks read from one federation (one seed and :math:`\alpha`),
    all fixed by the partition, none by a method:

    * ``effective images, weakest quarter``: the mean, over the quarter of clients with the fewest,
      of the effective test images behind a client's client-weighted recall
      (:func:`effective_images`): the clients a floor reads at worst;
    * ``rare-class support``: the median training count of a client's rare class, over every
      (client, rare class) pair (NaN without one);
    * ``SASP weight on own data``: the mean over clients of :math:`\sum_c p_k(c)\,\alpha(n_c)`,
      SASP's weight :math:`\alpha(n) = n/(n + m_0)` on the client's own means (the weight of Eq. (33)) averaged
      over the images the client is scored on (its training label mix :math:`p_k`).

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> data = make_gaussian_mixture(n_per_class=40, n_classes=2, dim=4, seed=0).dataset
    >>> fed = make_federation(data, n_clients=2, partition="dirichlet", alpha=1.0, global_test_per_class=10, seed=0)
    >>> sorted(regime_row(fed, m0=10.0))
    ['SASP weight on own data', 'effective images, weakest quarter', 'rare-class support']
    """
    counts = fed.train_counts().astype(float)  # (K, C)
    rare = np.concatenate([c[rare_classes(c, rare_ratio)] for c in counts])
    mix = counts / np.maximum(counts.sum(1, keepdims=True), 1.0)
    weight = adaptation_weights(torch.from_numpy(counts), m0).numpy()  # SASP's own alpha: 0 where n = 0, also at m0 = 0
    return {REGIME_COLUMNS[0]: float(lowest_tail(effective_images(fed), FLOOR_FRACTION).mean()),
            REGIME_COLUMNS[1]: float(np.median(rare)) if rare.size else math.nan,
            REGIME_COLUMNS[2]: float(np.mean((mix * weight).sum(1)))}


def resolutions(federations: Mapping[float, Federation]) -> dict[str, float]:
    r"""Each metric's resolution (:func:`fedbook.intervals.resolution_of`): the step one test image
    makes, on the test set the metric uses, sizes from ``federations`` (the first seed's, by
    :math:`\\alpha`; the global test set's smallest class of the last one). Global accuracy weighs
    every image of the global test set; unseen and rare accuracy are means of class recalls (one
    image of a class); local accuracy one image of a mean local test split (rounded down); ``F@25``
    the coarser of local and rare (a floor takes each client's weakest ability); ``L@25``, ``U@25`` and
    ``R@25`` their ability's step. The client-weighted recall ``pooled`` (:func:`fedlib.metrics.pooled_accuracy`)
    weighs the global test set's classes by a client's training label mix: a plain sample of
    :math:`n_{\mathrm{eff}}` images (:func:`fedlib.metrics.pooled_effective_size`) has its variance,
    so its step is :math:`100 / n_{\mathrm{eff}}`; the mean over clients reads the mean mix
    (``pooled``), a floor the mean step of the quarter of clients with the fewest effective images
    (``P@25``; ``PF@25`` the coarser of that and rare's), the coarsest over :math:`\alpha`.
    ``scatter``: one training image of the smallest federation (the within-class share, in points).

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> data = make_gaussian_mixture(n_per_class=40, n_classes=2, dim=4, seed=0).dataset
    >>> fed = make_federation(data, n_clients=2, partition="dirichlet", alpha=1.0, global_test_per_class=10, seed=0)
    >>> res = resolutions({1.0: fed})
    >>> res["global"], res["unseen"]
    (5.0, 10.0)
    """
    last = list(federations.values())[-1]
    n_class = int(np.bincount(last.global_test.labels_np, minlength=last.n_classes).min())  # a class's test images
    local = float(np.mean([len(c.test) for f in federations.values() for c in f.clients]))  # a client's local test split
    res = {"global": resolution_of(last.n_classes * n_class), "unseen": resolution_of(n_class),
           "rare": resolution_of(n_class), "local": resolution_of(max(1, math.floor(local)))}
    res["F@25"] = max(res["local"], res["rare"])
    res["L@25"], res["U@25"], res["R@25"] = res["local"], res["unseen"], res["rare"]
    # the client-weighted recall: a plain sample of n_eff images has its variance, so one image of it is 100 / n_eff;
    # the mean over clients reads the mean mix, a floor its weakest quarter of clients (coarsest over alpha)
    mean_mix, floor = [], []
    for f in federations.values():
        pool = np.bincount(f.global_test.labels_np, minlength=f.n_classes)
        mix = f.train_counts() / np.maximum(f.train_counts().sum(1, keepdims=True), 1)  # (K, C): each client's p_k
        mean_mix.append(100.0 / pooled_effective_size(pool, mix.mean(0)))
        floor.append(float(np.mean(100.0 / lowest_tail(effective_images(f), FLOOR_FRACTION))))
    res["pooled"], res["P@25"] = max(mean_mix), max(floor)
    res["PF@25"] = max(res["P@25"], res["rare"])
    # the within-class share of the training features: one training image of the smallest federation, in points
    res["scatter"] = resolution_of(min(sum(len(c.train) for c in f.clients) for f in federations.values()))
    return res


def seed_values(runs: pd.DataFrame, seeds: Sequence[int]) -> SeedValues:
    """``v(alpha, method, metric)``: one value per seed of ``seeds`` (percent) of the ``runs`` frame."""
    return SeedValues(runs, ["alpha", "method", "metric"], seeds)


def results_table(runs: pd.DataFrame, seeds: Sequence[int], alphas: Sequence[float]) -> pd.DataFrame:
    """Tables I/II: per :math:`\\alpha` and row of :data:`ORDER`, each metric of :data:`METRICS` as
    ``"mean ± half-width"`` over ``seeds`` (:func:`fedbook.intervals.seed_table`), NaN where some seed
    leaves the metric undefined (a whole column where no seed defines it); FedGRC's row named ``"FedGRC (CGRL + MMS + SASP)"``."""
    main = runs[runs["metric"].isin(METRICS)].dropna(subset=["value"])
    main = main[main.groupby(["alpha", "method", "metric"])["seed"].transform("count") == len(seeds)]
    table = seed_table(main, ["alpha", "method"], "metric", "value")
    table = table.reindex(index=pd.MultiIndex.from_product([alphas, ORDER], names=["alpha", "method"]), columns=list(METRICS))
    return table.rename(index={FEDGRC: "FedGRC (CGRL + MMS + SASP)"})


def show_results(table: pd.DataFrame, alphas: Sequence[float]) -> list:
    """Tables I/II as shown: per :math:`\\alpha`, the abilities and the floors (%), the best mean of
    each column in bold."""
    shown = []
    for a in alphas:
        for part, cols in (("abilities", ABILITY_COLUMNS), ("floors", FLOOR_COLUMNS)):
            t = table.loc[a, list(cols)].rename(columns=lambda m: f"{m} (%)")
            shown.append(show_table(t, best={f"{m} (%)": "max" for m in cols}).set_caption(f"Tables I/II, α = {a}: {part} (%)"))
    return shown


def mean_over_heads(v: Callable[..., np.ndarray], alpha: float, backbone: str, heads: Sequence[str] = HEADS,
                    metric: str = "global") -> np.ndarray:
    """Per seed, the mean of ``metric`` over the rows ``"<backbone> + <head>"`` of ``heads``.

    Examples
    --------
    >>> values = {"B + X": np.array([90.0]), "B + Y": np.array([80.0])}  # one seed
    >>> mean_over_heads(lambda alpha, method, metric: values[method], 0.1, "B", ["X", "Y"])
    array([85.])
    """
    return np.mean([v(alpha, f"{backbone} + {h}", metric) for h in heads], axis=0)


def mean_over_alphas(v: Callable[..., np.ndarray], alphas: Sequence[float], method: str, metric: str) -> np.ndarray:
    """Per seed, the mean of ``metric`` of ``method`` over ``alphas``.

    Examples
    --------
    >>> values = {0.3: np.array([90.0, 80.0]), 0.1: np.array([70.0, 80.0])}  # two seeds
    >>> mean_over_alphas(lambda alpha, method, metric: values[alpha], [0.3, 0.1], "X", "local")
    array([80., 80.])
    """
    return np.mean([v(a, method, metric) for a in alphas], axis=0)


def before_after(v: Callable[..., np.ndarray], seeds: Sequence[int], alphas: Sequence[float],
                 pairs: Sequence[tuple[str, str]] = PAIRS, metrics: Sequence[str] = ("local", "global", "unseen", "F@25")
                 ) -> pd.DataFrame:
    """Table IV's paired changes: per seed, :math:`\\alpha`, pair ``(before, after)`` and metric,
    ``after − before``, in the column ``"Δ <metric>"`` (NaN where either is undefined).

    Returns
    -------
    DataFrame
        ``seed, alpha, before → after, change, value``.

    Examples
    --------
    >>> values = {"X": np.array([80.0]), "X-FT": np.array([90.0])}  # one seed
    >>> before_after(lambda alpha, method, metric: values[method], [0], [0.1], [("X", "X-FT")], ["local"]).to_dict("records")
    [{'seed': 0, 'alpha': 0.1, 'before → after': 'X → X-FT', 'change': 'Δ local', 'value': 10.0}]
    """
    rows = []
    for s_i, s in enumerate(seeds):
        for a in alphas:
            for before, after in pairs:
                for m in metrics:
                    d = v(a, after, m)[s_i] - v(a, before, m)[s_i]
                    rows.append({"seed": s, "alpha": a, "before → after": f"{before} → {after}", "change": f"Δ {m}", "value": d})
    return pd.DataFrame(rows)


def personalization_table(v: Callable[..., np.ndarray], seeds: Sequence[int], alphas: Sequence[float],
                          metrics: Sequence[str] = ("local", "global", "unseen", "F@25")) -> pd.DataFrame:
    """Table IV: per :math:`\\alpha` and pair of :data:`PAIRS`, ``after − before`` of each metric
    as ``"mean ± half-width"`` over the seeds (a metric only where every seed defines it)."""
    d4 = before_after(v, seeds, alphas, PAIRS, metrics).dropna(subset=["value"])
    d4 = d4[d4.groupby(["alpha", "before → after", "change"])["seed"].transform("count") == len(seeds)]
    table4 = seed_table(d4, ["alpha", "before → after"], "change", "value")
    return table4[[c for c in (f"Δ {m}" for m in metrics) if c in table4.columns]]


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


def excess_gain_rows(v: Callable[..., np.ndarray], h0: Mapping[tuple, str], seeds: Sequence[int], alphas: Sequence[float],
                     metrics: Sequence[str] = EXCESS_METRICS, b0: str = "FedAvg-Aug", b1: str = "CGRL",
                     h1: str = "MMS + SASP") -> pd.DataFrame:
    """Table IX per seed: each backbone × head pairing :math:`F(B, H)` and the excess gain

    .. math:: I = [F(B_1,H_1) - F(B_0,H_0)] - [F(B_1,H_0) - F(B_0,H_0)] - [F(B_0,H_1) - F(B_0,H_0)],

    positive when the two replacements help more together than the sum of their separate effects.

    Parameters
    ----------
    v : callable
        The chapter's values per seed, ``v(alpha, method, metric)`` (:func:`seed_values`).
    h0 : mapping
        :math:`H_0` per ``(seed, alpha)`` (:func:`baseline_head`).
    seeds, alphas : sequences
    metrics : sequence of str
    b0, b1, h1 : str
        The baseline backbone, FedGRC's backbone and FedGRC's head.

    Returns
    -------
    DataFrame
        ``seed, alpha, metric, pairing, value`` with the pairings of :data:`EXCESS_COLUMNS`.

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
                    rows.append({"seed": s, "alpha": a, "metric": metric, "pairing": col, "value": val})
    return pd.DataFrame(rows)


def show_excess(tidy9: pd.DataFrame, h0: Mapping[tuple, str]) -> list:
    """Table IX as shown (``F@25``, ``PF@25`` and global accuracy of each pairing, the excess gain in points,
    mean over the seeds ± 95 % interval), and the head :math:`H_0` chosen per seed."""
    table9 = seed_table(tidy9.dropna(subset=["value"]), ["alpha", "metric"], "pairing", "value", digits=2)
    table9 = table9[list(EXCESS_COLUMNS)].rename(columns=lambda c: f"{c} (points)" if c == "excess gain I" else f"{c} (%)")
    choice = pd.Series(h0).rename_axis(["seed", "alpha"]).unstack("alpha")
    caption = "Table IX: F@25, PF@25 (F@25 with the client-weighted recall) and global accuracy of each backbone × head pairing"
    return [show_table(table9, formats={"alpha": "g"}).set_caption(caption),
            show_table(choice.rename(columns=lambda a: f"H0 chosen on validation, α = {a:g}")).set_caption(
                "The baseline head H0, per seed")]


def cost_table(costs: pd.DataFrame, seed: int, alphas: Sequence[float]) -> pd.DataFrame:
    """The cost table: per :math:`\\alpha`, one training round of each method of :data:`ROUND_ROWS`
    (bytes per client, up and down, at run ``seed``; the median seconds of its rounds, averaged
    over the seeds) and CGRL's two terminal statistics rounds (bytes per client at ``seed``, no
    seconds). Indexed by ``alpha, what``."""
    rows = []
    for a in alphas:
        at = costs[costs["alpha"] == a]
        for name, label in ROUND_ROWS.items():
            runs = at[(at["method"] == name) & (at["round"] == "training")]
            rows.append({"alpha": a, "what": f"{label}: one training round",
                         "bytes per client": float(runs.loc[runs["seed"] == seed, "bytes per client"].iloc[0]),
                         "seconds per round (median)": float(np.mean(runs["seconds per round"].to_numpy()))})
        for kind in ("penultimate", "multilayer"):
            stats = at[(at["method"] == "CGRL") & (at["round"] == f"statistics ({kind})") & (at["seed"] == seed)]
            rows.append({"alpha": a, "what": f"terminal statistics ({kind})",
                         "bytes per client": float(stats["bytes per client"].iloc[0]), "seconds per round (median)": math.nan})
    return pd.DataFrame(rows).set_index(["alpha", "what"])


def show_costs(table: pd.DataFrame):
    """The cost table as shown (bytes readable, seconds with their unit)."""
    return show_table(table.rename(columns={"bytes per client": "bytes per client (up + down)",
                                            "seconds per round (median)": "seconds per round (median, s)"}),
                      formats={"bytes per client (up + down)": format_bytes, "alpha": "g"})


def plot_federations(federations: Mapping[float, Federation], seed: int):
    """Training images per client and class of each federation, one panel per :math:`\\alpha`."""
    fig, axes = plt.subplots(1, len(federations), figsize=(4.6 * len(federations), 4.8), squeeze=False)
    for ax, (a, fed) in zip(axes[0], federations.items()):
        plot_partition(fed.train_counts(), ax=ax, title=f"Dirichlet α = {a}, seed {seed}")
    fig.tight_layout()
    return fig


def plot_local_global(v: Callable[..., np.ndarray], alphas: Sequence[float],
                      labelled: Sequence[str] = ("FedAvg", "FedAvg-Aug", "FedAvg-FT", "FedETF-FT", "Ditto", "FedRep", FEDGRC)):
    """The paper's Figure 1: every row of :data:`ORDER`'s mean local against mean global accuracy,
    with 95 % intervals over the seeds cut at 0 and 100 %, one panel per :math:`\\alpha`; coloured
    by family (personalized FL, heads on FedAvg / FedAvg-Aug, heads on CGRL), FedGRC a star, the
    rows ``labelled`` named where a label fits (:func:`fedbook.page.place_labels`)."""
    family = {name: "personalized FL" if name in PFL or name == "FedAvg + FedCGS + FT" else
              "heads on CGRL" if name.startswith("CGRL +") else "heads on FedAvg / FedAvg-Aug" for name in ORDER}
    colors = {"personalized FL": "tab:blue", "heads on FedAvg / FedAvg-Aug": "tab:orange", "heads on CGRL": "tab:green"}
    fig, axes = plt.subplots(1, len(alphas), figsize=(4.8 * len(alphas), 4.6), squeeze=False)
    to_label = []
    for ax, a in zip(axes[0], alphas):
        labels, points = [], []
        for name in ORDER:
            ix, iy = mean_interval(v(a, name, "local")), mean_interval(v(a, name, "global"))  # 95 % intervals over the seeds
            x, y = ix.mean, iy.mean
            fam, star = family[name], name == FEDGRC
            ax.errorbar(x, y, xerr=clipped_error(x, ix.half_width), yerr=clipped_error(y, iy.half_width),
                        color=colors[fam], marker="*" if star else "o", ms=14 if star else 5, lw=0.8, alpha=0.9,
                        mec="black" if star else colors[fam], mew=0.8 if star else 0, zorder=3 if star else 2)
            points.append((x, y))
            if name in labelled:
                labels.append(("FedGRC" if star else name, (x, y)))
        to_label.append((ax, labels, points))
        ax.set_xlabel("mean local accuracy (%)")
        ax.set_ylabel("mean global accuracy (%)")
        ax.set_title(f"Dirichlet α = {a}")
    handles = [matplotlib.lines.Line2D([], [], color=c, marker="o", ls="", label=f) for f, c in colors.items()]
    handles.append(matplotlib.lines.Line2D([], [], color=colors["heads on CGRL"], marker="*", ms=12, mec="black", mew=0.8,
                                          ls="", label="FedGRC"))
    wide = len(alphas) > 1
    fig.legend(handles=handles, loc="lower center", ncol=4 if wide else 2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07 if wide else 0.12, 1, 1))
    fig.canvas.draw()
    for ax, labels, points in to_label:
        place_labels(ax, labels, points)
    return fig


def sensitivity_at(frame: pd.DataFrame, alpha: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``sensitivity`` frame's rows at ``alpha``: the :math:`m_0` sweep and the :math:`\\gamma` sweep."""
    at = frame[frame["alpha"] == alpha]
    return at[at["grid"] == "m0"], at[at["grid"] == "gamma"]


def plot_sensitivity(sub_m0: pd.DataFrame, sub_gamma: pd.DataFrame, m0_grid: Sequence[float], gamma_grid: Sequence[float],
                     alpha: float, m0: float):
    """The sensitivity figure: SASP's curves (:data:`SENSITIVITY_CURVES`) against :math:`m_0`
    (:math:`\\infty` drawn at ten times the largest finite value, 0 at 0.1) and the
    :data:`GAMMA_CURVES` against :math:`\\gamma`, each the mean over the seeds with its 95 % band
    cut at 0 and 100 % (:func:`fedbook.intervals.seed_band`)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    xm = [m if math.isfinite(m) else 10 * max(v_ for v_ in m0_grid if math.isfinite(v_)) for m in m0_grid]
    xm = [max(v_, 0.1) for v_ in xm]
    for ax, sub, grid, xs, curves in ((ax1, sub_m0, m0_grid, xm, SENSITIVITY_CURVES),
                                      (ax2, sub_gamma, gamma_grid, gamma_grid, GAMMA_CURVES)):
        for col in curves:
            mu, hw = seed_band(sub[sub["curve"] == col], "x", grid)  # mean and 95 % half-width over the seeds
            ax.plot(xs, mu, marker="o", label=col)
            ax.fill_between(xs, np.clip(mu - hw, 0, 100), np.clip(mu + hw, 0, 100), alpha=0.2)
        ax.set_xscale("log")
        ax.set_ylabel("accuracy (%)")
        ax.legend(loc="best", fontsize=8)
    ax1.set_xticks(xm, [("∞" if not math.isfinite(m) else f"{m:g}") for m in m0_grid], fontsize=8)
    ax1.set_xlabel("$m_0$ (left: 0, right: ∞ = shared head)")
    ax1.set_title(f"SASP, CGRL backbone, α = {alpha}")
    ax2.set_xlabel("$\\gamma$")
    ax2.set_title(f"ridge, m0 = {m0:g}")
    fig.tight_layout()
    return fig


def show_m0(sub_m0: pd.DataFrame):
    """SASP against :math:`m_0`: each curve's mean over the seeds ± 95 % interval, the best in bold."""
    table = seed_table(sub_m0, "x", "curve", "value").rename_axis("m0")[list(SENSITIVITY_CURVES)]
    return show_table(table.rename(columns=lambda c: f"{c} (%)"), formats={"m0": format_value},
                      best={f"{c} (%)": "max" for c in SENSITIVITY_CURVES}).set_caption(
        "SASP against m0 (mean over the seeds ± 95 % interval)")


def reads(frame: str, columns: Sequence[str], **where) -> dict[str, Read]:
    """One :class:`fedbook.claims.Read` of ``frame`` per column, by the column's name: the
    ``baseline`` of a claim against every baseline of a tuple.

    >>> reads("versus", ["A", "B"], alpha=0.1)
    {'A': Read('versus', 'A', alpha=0.1), 'B': Read('versus', 'B', alpha=0.1)}
    """
    return {c: Read(frame, c, **where) for c in columns}


def defined(frame: pd.DataFrame, columns: Sequence[str], seed: str = "seed") -> pd.DataFrame:
    """The rows of one claim's sides (``frame``: one or more rows per seed) on the seeds where every
    one of ``columns`` is defined on every row: a claim pairs its sides seed by seed, and a seed
    where one side is undefined (no client holds a rare class, say) is dropped from every side.
    With no such seed, the rows of the first seed with ``columns`` set to zero (an inconclusive
    one-seed interval, as :func:`fedbook.intervals.defined_pairs` gives).

    Examples
    --------
    >>> f = pd.DataFrame({"seed": [0, 1, 2], "A": [1.0, np.nan, 3.0], "B": [2.0, 3.0, 4.0]})
    >>> defined(f, ["A", "B"])["seed"].tolist(), defined(f.assign(A=np.nan), ["A", "B"]).values.tolist()
    ([0, 2], [[0.0, 0.0, 0.0]])
    """
    columns = list(columns)
    bad = set(frame.loc[frame[columns].isna().any(axis=1), seed])
    kept = frame[~frame[seed].isin(bad)]
    if kept.empty:
        kept = frame[frame[seed] == frame[seed].iloc[0]].copy()
        kept[columns] = 0.0
    return kept


def claim_frames(runs: pd.DataFrame, tidy9: pd.DataFrame, seeds: Sequence[int], alphas: Sequence[float], *,
                 leaders: Mapping[str, str], shift_methods: Sequence[str], ft_pairs: Mapping[str, tuple[str, str]],
                 sizes: Mapping[str, float], scatter: pd.DataFrame | None = None,
                 regime: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """What the chapter's claims read: one row per seed (per seed and backbone in ``heads``), the
    same floats the tables show, each claim's group keeping the seeds where all its sides are
    defined (:func:`defined`).

    Parameters
    ----------
    runs : DataFrame
        The training study's ``runs`` frame.
    tidy9 : DataFrame
        Table IX per seed (:func:`excess_gain_rows`).
    seeds, alphas : sequences
        The claims' seeds and the concentrations (the first is the larger α, the last the smaller).
    leaders : mapping of str to str
        The pilot's strongest baseline per metric, the comparator of a trade-off row.
    shift_methods : sequence of str
        The methods whose change from the larger to the smaller α is claimed.
    ft_pairs : mapping of str to (str, str)
        The personalization pairs ``(before, after)`` by name.
    sizes : mapping of str to float
        The paper's smallest gain per metric (by the metric the claim reads).
    scatter, regime : DataFrame, optional
        The training study's ``scatter`` and ``regime`` frames (:func:`train_cell`).

    Returns
    -------
    dict of str to DataFrame
        ``versus``: ``alpha, metric, seed``, FedGRC's column (:data:`FEDGRC`), every baseline's
        (:data:`BASELINES`) and ``"FedGRC − the paper's gain"`` (FedGRC minus ``sizes[metric]``);
        ``trail``: ``metric, seed``, FedGRC and the metric's leader at the smaller α; ``shift``:
        ``metric, seed, no change`` (0) and each shift method's value at the larger α minus at the
        smaller; ``heads``: ``backbone, seed``, ``mean head`` (global accuracy at the larger α,
        mean over :data:`HEADS`) and ``gain over its own head``; ``personalization``: ``metric,
        seed, no change`` and each pair's before minus after, means over α; ``sasp``: ``metric,
        seed``, FedGRC and ``"CGRL + MMS"``, means over α; ``excess``: ``alpha, metric, seed`` and
        the :data:`EXCESS_COLUMNS`; ``excess_over_alphas``: ``metric, seed, excess gain I``, the
        mean over α; ``headroom``: ``value`` indexed by ``alpha, metric, method, seed``, every baseline's
        value (what the ceiling checks read, each baseline a unit); with ``scatter``, ``scatter``: ``alpha, seed`` and each
        backbone's within-class share (%); with ``regime``, ``regime``: the :data:`REGIME_COLUMNS`
        indexed by ``alpha, seed``.
    """
    v = seed_values(runs, seeds)
    v9 = SeedValues(tidy9, ["alpha", "metric", "pairing"], seeds)
    over = functools.partial(mean_over_alphas, v, alphas)
    a_hi, a_lo, n = alphas[0], alphas[-1], len(seeds)
    parts: dict[str, list[pd.DataFrame]] = {}

    def add(name: str, columns: Mapping[str, np.ndarray], sides: Sequence[str] | None = None, **lead) -> None:
        """One claim's group: its rows on the seeds where its ``sides`` (default: every column) are defined."""
        frame = pd.DataFrame({**{k: [x] * n for k, x in lead.items()}, "seed": list(seeds), **columns})
        parts.setdefault(name, []).append(defined(frame, list(columns) if sides is None else sides))

    for a in alphas:
        for m in METRICS:
            sides = {name: v(a, name, m) for name in [FEDGRC, *BASELINES]}
            gain = {"FedGRC − the paper's gain": sides[FEDGRC] - sizes[m] if m in sizes else np.full(n, math.nan)}
            add("versus", {**sides, **gain}, [*sides, *gain] if m in sizes else list(sides), alpha=a, metric=m)
    for m, name in leaders.items():
        add("trail", {FEDGRC: v(a_lo, FEDGRC, m), name: v(a_lo, name, m)}, metric=m)
    for m in ("pooled", "global"):
        add("shift", {"no change": np.zeros(n), **{k: v(a_hi, k, m) - v(a_lo, k, m) for k in shift_methods}}, metric=m)
    for m in ("pooled", "global", "PF@25"):
        add("personalization", {"no change": np.zeros(n), **{k: over(b, m) - over(f, m) for k, (b, f) in ft_pairs.items()}},
            metric=m)
        add("sasp", {FEDGRC: over(FEDGRC, m), "CGRL + MMS": over("CGRL + MMS", m)}, metric=m)
    for a in alphas:
        for m in EXCESS_METRICS:
            add("excess", {c: v9(a, m, c) for c in EXCESS_COLUMNS}, alpha=a, metric=m)
    for m in EXCESS_METRICS:
        add("excess_over_alphas", {"excess gain I": np.mean([v9(a, m, "excess gain I") for a in alphas], axis=0)}, metric=m)
    heads = pd.concat([pd.DataFrame({"backbone": b, "seed": list(seeds), "mean head": mean_over_heads(v, a_hi, b),
                                     "gain over its own head": mean_over_heads(v, a_hi, b) - v(a_hi, b, "global")})
                       for b in ("FedAvg-Aug", "FedAvg")], ignore_index=True)
    out = {"heads": defined(heads, ["mean head", "gain over its own head"]).reset_index(drop=True),
           "headroom": pd.DataFrame([{"alpha": a, "metric": m, "method": b, "seed": s, "value": x}
                                     for a in alphas for m in METRICS for b in BASELINES
                                     for s, x in zip(seeds, v(a, b, m))]).set_index(["alpha", "metric", "method", "seed"])}
    if scatter is not None:
        wide = scatter.pivot_table(index=["alpha", "seed"], columns="backbone", values=SCATTER).reset_index()
        out["scatter"] = wide[wide["seed"].isin(list(seeds))].reset_index(drop=True)
    if regime is not None:  # the units of a check: a seed at one alpha
        out["regime"] = regime[regime["seed"].isin(list(seeds))].set_index(["alpha", "seed"])
    return out | {name: pd.concat(frames, ignore_index=True) for name, frames in parts.items()}


def head_reading(intervals: Sequence) -> str:
    """How the prose reads the shared MMS head's gain over FedAvg's trained head (global accuracy,
    one :class:`fedbook.intervals.Interval` per α): a gain clear of the seed-to-seed spread at every
    α, positive on average at every α, or neither; the sentence names the effect expected.

    >>> from fedbook.intervals import mean_interval
    >>> head_reading([mean_interval([1.0, 2.0, 3.0]), mean_interval([-1.0, 0.0])])[:37]
    'not a gain at both concentrations, so'
    """
    bias = ("a linear head trained by FedAvg under label skew leans toward the classes most clients hold, a head built "
            "from pooled class moments with equal priors does not")
    if all(iv.low > 0 for iv in intervals):
        return f"a gain clear of the seed-to-seed spread at both, as expected if {bias}"
    if all(iv.mean > 0 for iv in intervals):
        return (f"positive on average at both but not clear of the seed-to-seed spread at both, so the table does not "
                f"show that {bias}")
    return f"not a gain at both concentrations, so the expected effect (that {bias}) does not show at this scale"


def ceiling_text(low: float, high: float, ceiling: float = CEILING) -> str:
    """Why a verdict can differ: the ceiling argument, made only where every statistical head's
    mean global accuracy (between ``low`` and ``high`` percent over the backbones and α) is at
    least ``ceiling``; otherwise the sentence says MNIST's ease alone does not explain a verdict.

    >>> ceiling_text(91.0, 97.5)[:27], ceiling_text(78.25, 94.0)[:45]
    ('MNIST digits are nearly sep', "the statistical heads' mean global accuracy r")
    """
    if low >= ceiling:
        return (f"MNIST digits are nearly separable by the small CNN after a few rounds: every statistical head reaches a "
                f"mean global accuracy of at least {low:.1f} % on every backbone (at most {high:.1f} %), so the "
                "differences the paper reports on CIFAR-100 and remote-sensing scenes with ResNet-18 have little room here")
    return (f"the statistical heads' mean global accuracy ranges from {low:.1f} % to {high:.1f} % over the backbones "
            f"and concentrations, so not every head is near a ceiling (at least {ceiling:.0f} % for all, declared here) and "
            "MNIST's ease alone does not explain a verdict")


def untestable_text(results: Mapping[str, ClaimResult]) -> str:
    """The rows of ``results`` (:func:`fedbook.page.claims_report`'s) that are "untestable at this
    resolution", in a sentence: grouped by their resolution in points, coarsest first, each key
    with its smallest effect of interest :math:`m`.

    >>> from fedbook.claims import Claim, effect, evaluate
    >>> c = lambda k, m, r: Claim(k, "q", "s", "x, points", "greater", effect("points", paper=m), resolution=r)
    >>> rows = {k: evaluate(c(k, m, r), [3.0, 4.0]) for k, m, r in [("a", 2.13, 4.0), ("b", 12.1, 0.5), ("d", 7.12, 4.0)]}
    >>> untestable_text(rows)
    '2 rows are untestable at this resolution: at a resolution of 4.00 points, a (m = 1.06) and d (m = 3.56)'
    >>> untestable_text({"b": rows["b"]})
    'No row is untestable at this resolution'
    """
    groups: dict[float, list[str]] = {}
    for r in results.values():
        if r.verdict == UNTESTABLE_RESOLUTION:
            groups.setdefault(r.claim.resolution, []).append(f"{r.claim.key} (m = {r.claim.min_effect:.3g})")
    n = sum(map(len, groups.values()))
    if not n:
        return "No row is untestable at this resolution"
    joined = (f"at a resolution of {res:.2f} points, {', '.join(keys[:-1])}{' and ' * (len(keys) > 1)}{keys[-1]}"
              for res, keys in sorted(groups.items(), reverse=True))
    return f"{n} row{'s are' if n > 1 else ' is'} untestable at this resolution: {'; '.join(joined)}"


def scatter_numbers(scatter: pd.DataFrame, seeds: Sequence[int], alphas: Sequence[float]) -> dict:
    """The within-class share of each backbone's penultimate training features the prose quotes
    (``fge_`` keys, ``hi``: the first α, ``lo``: the last): ``fge_scatter_<backbone>_<hi|lo>``
    (mean over the seeds, percent; backbone ``cgrl``, ``aug``, ``avg``) and
    ``fge_scatter_diff_<hi|lo>``, CGRL − FedAvg-Aug with its interval (:func:`fedbook.intervals.interval_text`).

    >>> f = pd.DataFrame([{"alpha": 0.1, "seed": s, "backbone": b, SCATTER: x + s}
    ...                   for s in (0, 1) for b, x in (("FedAvg", 40.0), ("FedAvg-Aug", 30.0), ("CGRL", 20.0))])
    >>> n = scatter_numbers(f, [0, 1], [0.1])
    >>> n["fge_scatter_cgrl_lo"], n["fge_scatter_aug_lo"], n["fge_scatter_diff_lo"]
    (20.5, 30.5, '−10.0 [−10.0, −10.0], 2 seeds')
    """
    v = SeedValues(scatter, ["alpha", "backbone"], seeds, value=SCATTER)
    out = {}
    for tag, a in (("hi", alphas[0]), ("lo", alphas[-1])):
        for name, b in (("cgrl", "CGRL"), ("aug", "FedAvg-Aug"), ("avg", "FedAvg")):
            out[f"fge_scatter_{name}_{tag}"] = float(np.mean(v(a, b)))
        out[f"fge_scatter_diff_{tag}"] = interval_text(v(a, "CGRL") - v(a, "FedAvg-Aug"))
    return out


def regime_numbers(regime: pd.DataFrame, seeds: Sequence[int], alphas: Sequence[float]) -> dict:
    """The regime values the prose quotes (``fge_`` keys, means over the seeds): per α (``hi``,
    ``lo``) the effective images behind the weakest quarter of clients (``fge_neff_<tag>``), the
    median rare-class support (``fge_rare_support_<tag>``), and SASP's weight on the clients' own
    data averaged over α (``fge_sasp_weight``).

    >>> f = pd.DataFrame([{"alpha": a, "seed": s, REGIME_COLUMNS[0]: 60.0 + s, REGIME_COLUMNS[1]: 1.0,
    ...                    REGIME_COLUMNS[2]: 0.5 + a} for a in (0.3, 0.1) for s in (0, 1)])
    >>> n = regime_numbers(f, [0, 1], [0.3, 0.1])
    >>> n["fge_neff_lo"], n["fge_rare_support_hi"], round(n["fge_sasp_weight"], 3)
    (60.5, 1.0, 0.7)
    """
    r = regime[regime["seed"].isin(list(seeds))]
    at = lambda a, c: float(r.loc[r["alpha"] == a, c].mean())  # noqa: E731
    out = {"fge_sasp_weight": float(r[REGIME_COLUMNS[2]].mean())}
    for tag, a in (("hi", alphas[0]), ("lo", alphas[-1])):
        out[f"fge_neff_{tag}"], out[f"fge_rare_support_{tag}"] = at(a, REGIME_COLUMNS[0]), at(a, REGIME_COLUMNS[1])
    return out


def setting_text(results: Mapping[str, ClaimResult]) -> str:
    """The rows of ``results`` that are "untestable in this setting", in a sentence: grouped by the
    first regime check each fails (its text: quantity, value, threshold).

    >>> import pandas as pd
    >>> from fedbook.claims import Claim, RegimeCheck, effect, evaluate
    >>> chk = RegimeCheck("support", "median count", Read("r", "n"), "at least", 10.0, "too few")
    >>> c = Claim("a", "q", "s", "x, points", "greater", effect("points", paper=2.0), resolution=0.1, regimes=(chk,))
    >>> r = evaluate(c, [3.0, 4.0], regimes=(chk.check({"r": pd.DataFrame({"n": [1.0, 2.0]})}),))
    >>> setting_text({"a": r})
    '1 row is untestable in this setting: a (support: median count = 1.5 (needs at least 10))'
    >>> setting_text({})
    'No row is untestable in this setting'
    """
    groups: dict[str, list[str]] = {}
    for r in results.values():
        if r.verdict == UNTESTABLE_SETTING:
            groups.setdefault(r.failed[0].text(), []).append(r.claim.key)
    n = sum(map(len, groups.values()))
    if not n:
        return "No row is untestable in this setting"
    joined = (f"{', '.join(keys)} ({text})" for text, keys in groups.items())
    return f"{n} row{'s are' if n > 1 else ' is'} untestable in this setting: {'; '.join(joined)}"


def rare_weight_reading(alpha: float) -> str:
    r"""The prose's reading of SASP's weight :math:`\alpha(n) = n/(n + m_0)` (the weight of Eq. (33)) on a client's
    own mean at the median rare-class support: below one half (:math:`n < m_0`, the threshold of the
    rare-support check) the shared mean outweighs the client's own on rare classes.

    >>> rare_weight_reading(0.2)
    "below one half: on rare classes FedGRC's head leans on the shared mean more than on the client's own"
    >>> rare_weight_reading(0.5)
    "at least one half: on rare classes the client's own mean weighs at least as much as the shared one"
    >>> rare_weight_reading(float("nan"))
    'undefined: no client holds a rare class'
    """
    if math.isnan(alpha):
        return "undefined: no client holds a rare class"
    if alpha < 0.5:
        return "below one half: on rare classes FedGRC's head leans on the shared mean more than on the client's own"
    return "at least one half: on rare classes the client's own mean weighs at least as much as the shared one"


def ablation_reading(drops: Sequence[float], spread: float) -> tuple[str, str]:
    """Exercise 1's reading: whether the larger change of ``F@25`` that switching off one CGRL term
    makes is ``"larger than"`` or ``"within"`` the half-width ``spread`` of the chapter's own
    interval, and what that lets a single reduced run say.

    >>> ablation_reading([6.7, 0.0], 2.4)
    ('larger than', 'a one-seed hint, no more, of which term matters here')
    """
    larger = max(abs(d) for d in drops) > spread
    return (("larger than", "a one-seed hint, no more, of which term matters here") if larger
            else ("within", "so this reduced run cannot tell which term matters"))


def rotation_reading(rotated_change: float, upright_change: float) -> str:
    """Exercise 2's reading of local accuracy's change from the smallest :math:`m_0` to the shared
    head, with and without the rotation, against the fall Eq. (35) predicts.

    >>> rotation_reading(-1.0, 3.0)
    'local accuracy now falls as m0 grows, as Eq. (35) predicts'
    """
    if rotated_change < 0:
        return "local accuracy now falls as m0 grows, as Eq. (35) predicts"
    if rotated_change < upright_change:
        return ("local accuracy still does not fall as m0 grows, but the rotation moves the curve toward the fall "
                "Eq. (35) predicts")
    return "the rotation does not move the curve toward the fall Eq. (35) predicts"


def setting_numbers(P, study: FedGRCStudy, n_samples: int, seeds: Sequence[int], res: Mapping[str, float]) -> dict:
    """The settings the prose quotes (``fge_`` keys): the profile's values, CGRL's defaults, the
    resolutions ``res`` (:func:`resolutions`) with the mean local test split they read
    (``fge_local_split``) and the smallest :math:`m` each resolution can test
    (``fge_m_local``, ``fge_m_class``, ``fge_m_floor``, ``fge_m_global``: the resolution over
    :func:`fedbook.claims.smallest_resolvable`), and the counts of baselines and trained methods."""
    return {
        "fge_n_samples": n_samples, "fge_n_seeds": P.n_seeds, "fge_n_clients": P.n_clients, "fge_rounds": P.rounds,
        "fge_epochs": P.local_epochs, "fge_tau": P.tau, "fge_ldir": P.lambda_dir, "fge_lrad": P.lambda_rad,
        "fge_beta": study.cgrl.beta, "fge_xi": study.cgrl.xi, "fge_zeta": study.cgrl.zeta, "fge_warmup": P.warmup,
        "fge_layers": ", ".join(study.layers), "fge_gamma": P.gamma, "fge_m0": P.m0, "fge_ft": P.finetune_epochs,
        "fge_head_epochs": HEAD_EPOCHS, "fge_width": P.model_kw.get("width", 64),  # ResNet-18 starts with 64 channels
        "fge_fdim": study.model_fn().feature_dims["penultimate"], "fge_gt_per_class": P.global_test_per_class,
        "fge_val_pct": 100 * P.val_fraction, "fge_rare_ratio": RARE_RATIO, "fge_alpha_hi": P.alphas[0],
        "fge_alpha_lo": P.alphas[-1], "fge_seeds": ", ".join(map(str, seeds)), "fge_res_class": res["unseen"],
        "fge_res_global": res["global"], "fge_res_local": res["local"], "fge_res_floor": res["F@25"],
        "fge_local_split": round(100 / res["local"]),  # resolutions: one image of the mean split (rounded down)
        "fge_m_local": smallest_resolvable(res["local"]), "fge_m_class": smallest_resolvable(res["unseen"]),
        "fge_m_floor": smallest_resolvable(res["F@25"]), "fge_m_global": smallest_resolvable(res["global"]),
        "fge_n_baselines": len(BASELINES), "fge_n_algs": len(study.methods()),
        "fge_res_pooled": res["pooled"], "fge_res_pfloor": res["PF@25"], "fge_res_P25": res["P@25"],
        "fge_m_pooled": smallest_resolvable(res["pooled"]), "fge_m_pfloor": smallest_resolvable(res["PF@25"]),
        "fge_res_scatter": res["scatter"],
    }


def numbers(frames: Mapping[str, pd.DataFrame], seeds: Sequence[int], alphas: Sequence[float], h0: Mapping[tuple, str],
            tidy9: pd.DataFrame) -> dict:
    """The results the prose quotes (``fge_`` keys), from the training study's ``frames``: the
    undefined cells of Tables I/II; per α (``hi``: the first, ``lo``: the last) FedGRC's local,
    global and ``F@25`` and its gap to the baseline of highest mean in each (named for the prose only:
    it is picked on the test results), the gains of the shared head, of the augmentation and of
    CGRL's losses, Table IV's changes and Table IX's excess gains; the readings of the shared
    head (:func:`head_reading`) and of the ceiling (:func:`ceiling_text`); the :math:`m_0` and
    :math:`\\gamma` sweeps at the smaller α; the number of training runs and the costs."""
    v = seed_values(frames["runs"], seeds)
    a_hi, a_lo = alphas[0], alphas[-1]
    table = results_table(frames["runs"], seeds, alphas)
    R = {"fge_n_missing": int(table.isna().to_numpy().sum())}
    pos = {"hi": a_hi, "lo": a_lo}
    tags = dict(zip((after for _, after in PAIRS), ("etf", "head", "sasp")))
    for p, a in pos.items():
        for m in ("local", "global", "F@25"):
            R[f"fge_fedgrc_{key(m)}_{p}"] = interval_text(v(a, FEDGRC, m))
            closest = max(BASELINES, key=lambda b: np.nanmean(v(a, b, m)))
            R[f"fge_closest_{key(m)}_{p}"] = closest
            R[f"fge_gap_{key(m)}_{p}"] = interval_text(v(a, FEDGRC, m) - v(a, closest, m))
            for before, after in PAIRS:
                R[f"fge_t4_{tags[after]}_{key(m)}_{p}"] = interval_text(v(a, after, m) - v(a, before, m))
        R[f"fge_head_gain_{p}"] = interval_text(v(a, "FedAvg + MMS", "global") - v(a, "FedAvg", "global"))
        R[f"fge_aug_gain_{p}"] = interval_text(v(a, "FedAvg-Aug", "global") - v(a, "FedAvg", "global"))
        R[f"fge_cgrl_gain_{p}"] = interval_text(v(a, FEDGRC, "F@25") - v(a, "FedAvg-Aug + MMS + SASP", "F@25"))
        v9 = SeedValues(tidy9, ["alpha", "metric", "pairing"], seeds)
        R[f"fge_I_F25_{p}"] = interval_text(v9(a, "F@25", "excess gain I"), 2)
        R[f"fge_I_global_{p}"] = interval_text(v9(a, "global", "excess gain I"), 2)
    gains = (v(a, "FedAvg + MMS", "global") - v(a, "FedAvg", "global") for a in pos.values())
    R["fge_head_reading"] = head_reading([mean_interval(d[~np.isnan(d)] if (~np.isnan(d)).any() else np.zeros(1))
                                          for d in gains])
    head_glob = [float(np.nanmean(v(a, f"{b} + {h}", "global"))) for a in alphas for b in BACKBONES for h in HEADS]
    R["fge_ceiling_text"] = ceiling_text(min(head_glob), max(head_glob))
    R["fge_h0_names"] = ", ".join(sorted(set(h0.values())))
    sub_m0, sub_gamma = sensitivity_at(frames["sensitivity"], a_lo)
    m0_grid = list(dict.fromkeys(sub_m0["x"]))
    gamma_grid = list(dict.fromkeys(sub_gamma["x"]))
    m_min, m_last = min(m for m in m0_grid if math.isfinite(m)), m0_grid[-1]
    R["fge_m0_min"] = float(m_min)
    for k in ("local", "global"):
        at_min = sub_m0[(sub_m0["x"] == m_min) & (sub_m0["curve"] == k)]["value"].to_numpy()
        at_inf = sub_m0[(sub_m0["x"] == m_last) & (sub_m0["curve"] == k)]["value"].to_numpy()
        R[f"fge_m0_{k}_0"], R[f"fge_m0_{k}_inf"] = interval_text(at_min), interval_text(at_inf)
        R[f"fge_m0_{k}_change"] = interval_text(at_inf - at_min)
    gmu, _ = seed_band(sub_gamma[sub_gamma["curve"] == "MMS + SASP global"], "x", gamma_grid)
    R["fge_gamma_best"] = format_value(float(gamma_grid[int(np.argmax(gmu))]))
    R["fge_gamma_range"] = float(gmu.max() - gmu.min())
    costs = frames["costs"]
    R["fge_n_runs"] = int((costs["round"] == "training").sum())
    c_lo = cost_table(costs, seeds[0], alphas).loc[a_lo]
    fedavg_row = f"{ROUND_ROWS['Ditto']}: one training round"
    R["fge_round_time_ratio"] = float(c_lo.loc["CGRL: one training round", "seconds per round (median)"]
                                      / c_lo.loc["FedAvg-Aug: one training round", "seconds per round (median)"])
    R["fge_bytes_ratio"] = float(c_lo.loc["CGRL: one training round", "bytes per client"]
                                 / c_lo.loc[fedavg_row, "bytes per client"])
    R["fge_stats_bytes"] = format_bytes(c_lo.loc["terminal statistics (multilayer)", "bytes per client"])
    return R


def exercise_numbers(frames: Mapping[str, pd.DataFrame], ablation: pd.DataFrame, rotated: pd.DataFrame,
                     seeds: Sequence[int], alphas: Sequence[float], rounds: int) -> dict:
    """The exercises' tables and numbers (``ex1_``, ``ex2_``, ``ex3_`` keys), at the smaller α and
    the first seed: Exercise 1 from its ``ablation`` study (``n_images`` images over ``n_clients``
    clients) against the chapter's own CGRL − FedAvg-Aug interval; Exercise 2
    from its ``rotated`` study against the upright :math:`m_0` sweep; Exercise 3 from the training
    study's ``penultimate`` frame and the statistics messages' sizes (``rounds``: the training
    rounds, for Exercise 1's scale)."""
    v = seed_values(frames["runs"], seeds)
    seed, a_lo = seeds[0], alphas[-1]
    R = {}
    ex1 = ablation.set_index("variant")[[f"{m} (%)" for m in SENSITIVITY_CURVES]].rename_axis("backbone (head: MMS + SASP)")
    F = ex1["F@25 (%)"]
    drop_dir, drop_rad = F["CGRL, λ_dir = 0"] - F["CGRL"], F["CGRL, λ_rad = 0"] - F["CGRL"]
    gap = mean_interval(v(a_lo, FEDGRC, "F@25") - v(a_lo, "FedAvg-Aug + MMS + SASP", "F@25"))
    spread = gap.high - gap.mean
    R["ex1_scale"] = (f"seed {seed}, α = {a_lo}, {int(ablation['images'].iloc[0]):,} images over "
                      f"{int(ablation['clients'].iloc[0])} clients, {rounds} rounds")
    R["ex1_table"] = show_table(ex1, digits=1)
    R["ex1_full"] = float(F["CGRL"] - F["FedAvg-Aug (both weights 0)"])
    R["ex1_drop_dir"], R["ex1_drop_rad"], R["ex1_spread"] = float(drop_dir), float(drop_rad), float(spread)
    R["ex1_verdict"], R["ex1_reading"] = ablation_reading([drop_dir, drop_rad], spread)
    ex2 = rotated.set_index("m0")[[f"{k} (%)" for k in SENSITIVITY_CURVES]]
    sens = frames["sensitivity"]
    upright = sens[(sens["alpha"] == a_lo) & (sens["grid"] == "m0") & (sens["seed"] == seed)].pivot(
        index="x", columns="curve", values="value")
    m_lo, m_hi = min(m for m in ex2.index if math.isfinite(m)), ex2.index[-1]  # the smallest finite m0 and the last
    rot_change = ex2.loc[m_hi, "local (%)"] - ex2.loc[m_lo, "local (%)"]
    up_change = upright.loc[m_hi, "local"] - upright.loc[m_lo, "local"]
    best_m0 = ex2["F@25 (%)"].idxmax()
    R["ex2_scale"] = (f"seed {seed}, α = {a_lo}, {int(rotated['rotated'].iloc[0])} of {int(rotated['clients'].iloc[0])} "
                      "clients rotated")
    R["ex2_table"] = show_table(ex2, digits=1, formats={"m0": format_value}, best={f"{k} (%)": "max" for k in SENSITIVITY_CURVES})
    R["ex2_m_lo"] = format_value(m_lo)
    R["ex2_local_lo"], R["ex2_local_hi"] = float(ex2.loc[m_lo, "local (%)"]), float(ex2.loc[m_hi, "local (%)"])
    R["ex2_change"], R["ex2_up_change"] = float(rot_change), float(up_change)
    R["ex2_reading"] = rotation_reading(rot_change, up_change)
    R["ex2_best_m0"] = format_value(best_m0)
    R["ex2_best_F25"], R["ex2_best_global"] = float(ex2.loc[best_m0, "F@25 (%)"]), float(ex2.loc[best_m0, "global (%)"])
    ex3 = frames["runs"].merge(frames["penultimate"], on=["alpha", "seed", "method", "metric"], suffixes=("", " (penultimate)"))
    ex3 = ex3.assign(value=ex3["value"] - ex3["value (penultimate)"])[["seed", "alpha", "method", "metric", "value"]]
    ex3_table = seed_table(ex3.replace({FEDGRC: "FedGRC"}), ["alpha", "method"], "metric", "value")[list(SENSITIVITY_CURVES)]
    R["ex3_table"] = show_table(ex3_table.rename(columns=lambda c: f"Δ {c} (points)"), formats={"alpha": "g"})
    R["ex3_scale"] = f"{len(seeds)} seed{'s' * (len(seeds) > 1)} × {len(alphas)} value{'s' * (len(alphas) > 1)} of α"
    for m in ("global", "F@25"):
        at = ex3[(ex3["alpha"] == a_lo) & (ex3["method"] == FEDGRC) & (ex3["metric"] == m)]
        R[f"ex3_{key(m)}"] = mean_interval(at["value"].to_numpy()).format(1)
    c_lo = cost_table(frames["costs"], seed, alphas).loc[a_lo]
    stats_pen = c_lo.loc["terminal statistics (penultimate)", "bytes per client"]
    stats_multi = c_lo.loc["terminal statistics (multilayer)", "bytes per client"]
    R["ex3_bytes_pen"], R["ex3_bytes_multi"] = format_bytes(stats_pen), format_bytes(stats_multi)
    R["ex3_bytes_ratio"] = float(stats_multi / stats_pen)
    return R


__all__ = ["ABILITY_COLUMNS", "CLIENT_WEIGHTED", "CLIENT_WEIGHTED_FLOOR", "EXCESS_METRICS", "FLOOR_COLUMNS",
           "REGIME_COLUMNS", "SCATTER", "effective_images", "protocol_row", "regime_row",
           "ABLATIONS", "BACKBONES", "BASELINES", "BASELINE_HEAD_NAMES", "CEILING", "Deployment", "EXCESS_COLUMNS",
           "FEDGRC", "FedGRCStudy", "GAMMA_CURVES", "HEADS", "HEAD_EPOCHS", "METRICS", "ORDER", "PAIRS", "PFL",
           "ROUND_ROWS", "SENSITIVITY_CURVES", "SharedRule", "ablation_cell", "ablation_reading", "rare_weight_reading", "baseline_head",
           "before_after", "ceiling_text", "chapter_study", "claim_frames", "cost_table", "defined", "deployed_name",
           "excess_gain_rows", "exercise_numbers", "final_round", "head_reading", "key", "mean_over_alphas",
           "mean_over_heads", "numbers", "personalization_table", "plot_local_global", "plot_federations",
           "plot_sensitivity", "reads", "refitted_heads", "resolutions", "results_table", "rotate", "rotate_odd_clients",
           "rotated_cell", "rotation_reading", "seed_values", "sensitivity", "sensitivity_at", "setting_numbers",
           "regime_numbers", "scatter_numbers", "setting_text", "show_costs", "show_excess", "show_m0", "show_results", "train_cell", "untestable_text"]
