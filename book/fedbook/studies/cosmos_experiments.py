r"""COSMOS's experiments: every method run per seed on the paper's partition, the sensitivity
runs, the pilot that picks each method's learning rate on pseudo-labels, and the numbers the
chapter reads (the chapter *COSMOS: can pseudo-labels alone personalize clients of different
architectures?*, ``notebooks/cosmos_experiments.py``).

From COSMOS (Ge, Yeoh, Zhang and Vorobeychik, "COSMOS: Model-Agnostic Personalized Federated
Learning with Clustered Server Models and Pseudo-Label-Only Communication", arXiv:2605.11165),
Section 6 and Appendices C-D: Figure 2 and Table 2 (COSMOS against FedMD, FedCT and COMET on
clients of mixed architectures), Figure 3 and Table 3 (mixtures of architectures), Table 7 (one
architecture, against parameter sharing), Table 4 (communication), Tables 5-6 (the Dirichlet
:math:`\alpha`), Figures 7-9 (sensitivity) and Corollary 5.13 (local training alone,
:class:`fedlib.algorithms.cosmos.LocalOnly`).

:class:`COSMOSStudy` holds what is run (:meth:`COSMOSStudy.from_settings`: from the chapter's
profile). The chapter declares its studies (:class:`fedbook.study.Study`) over the functions of
one cell each, with the study bound (``functools.partial``): :func:`pilot_cell`,
:func:`main_cell`, :func:`local_cell`, :func:`homogeneous_cell`, :func:`mixture_cell`,
:func:`alpha_cell`, :func:`sweep_cell` and :func:`exercise_cell`; the runs of a process pre-train each
client once (:data:`PRETRAINED`, :func:`shared_pretraining`: the same bits). :func:`pilot_choice` reads the
pilot; :func:`tidy` turns the studies' frames into the frames the tables and the claims read (one
row per seed and method or setting, :func:`accuracy_points` in points); :func:`main_table`,
:func:`mixture_table`, :func:`alpha_table`, :func:`homogeneous_table`, :func:`traffic_table`,
:func:`paper_scale` and :func:`sensitivity_table` are the chapter's tables, :func:`plot_curves`
its figure; :func:`parameters`, :func:`numbers`, :func:`verdicts` (with :func:`local_reading`)
and :func:`exercise_numbers` the numbers its prose reads.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from fedbook.claims import (HOLDS, INCONCLUSIVE, OPPOSITE, SMALLER, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING, Claim,
                            ClaimResult, Comparator, Read, strongest_baseline)
from fedbook.intervals import paired_interval, seed_table
from fedbook.page import format_bytes
from fedbook.studies.cosmos_synthetic import client_objective, shift_basis
from fedlib.algorithms import COMET, COSMOS, Ditto, FedBABU, FedCT, FedMD, FedRep
from fedlib.algorithms.cosmos import LocalOnly, cosmos_fits, cosmos_history
from fedlib.algorithms.fedmd import grouping
from fedlib.clustering import assignment_agreement, group_purity
from fedlib.data import ArrayDataset, load_dataset
from fedlib.distill import PublicSet, augment, make_public_set
from fedlib.federation import Federation, make_federation
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.messages import DOWN, UP
from fedlib.metrics import protocol_summary
from fedlib.models import ClientArchitectures, build_model, count_parameters
from fedlib.run import RunOptions, evaluate_deployment, run_federated
from fedlib.training import TrainConfig, TrainingMemo

STUDIES = ("λ", "T", "rule", "clusters", "|U| share", "clients", "server", "detach")
"""The sensitivity studies a study can sweep (the ``sweeps`` of :class:`COSMOSStudy`)."""

PSEUDO_LR_METHODS = ("COSMOS", "FedMD", "FedCT", "COMET")
"""The methods that may take a learning rate on pseudo-labels of their own (the ``pseudo_lr`` of
:class:`COSMOSStudy`)."""

METRICS = ("mean", "worst", "bottom-20 %", "P@25")
"""The columns of :func:`accuracy_points`, in points."""

BASE = ("FedMD", "FedCT", "COMET")
"""The model-agnostic baselines."""

PFL = ("Ditto", "FedBABU", "FedRep")
"""The personalized parameter-sharing baselines (one architecture)."""

MAIN_METHODS = ("COSMOS", "COSMOS (client models)", "FedMD", "FedCT", "COMET", "Local")
"""The rows of :func:`main_table`: the main runs, COSMOS's clients' own models, local training alone."""

PSEUDO_BATCH = 64
"""The mini-batch on :math:`U` (the clients' distillation and COSMOS's server's)."""

FT_EPOCHS = 1
"""FedBABU's fine-tuning epochs before deployment."""

DATA_LABELS = {"uci8": "UCI digits at 8 × 8", "cifar100": "CIFAR-100", "cifar10": "CIFAR-10", "mnist5k": "MNIST-5k"}
"""How the chapter names its data sets."""

FEDAVG = "FedAvg (one architecture, computed)"
"""FedAvg's row of :func:`traffic_table`: no run, :func:`fedavg_bytes`."""

U_PAPER, C_PAPER = 10_000, 100
"""The paper's CIFAR-100 scale for :func:`paper_scale`: 20 % of the 50,000 training images as
:math:`U`, and the classes."""

PRETRAINED = TrainingMemo(max_entries=1024, max_bytes=2**28)
"""The clients' pre-trainings (the first round of every model-agnostic method, and of local
training alone) this process has run, kept by everything they depend on
(:class:`fedlib.training.TrainingMemo`): the four methods of a seed start from the same
pre-trained clients, and the other studies of the seed (local training alone, the sensitivity
runs, the exercises) from those of its main runs, so each is trained once. At most 256 MiB are
kept (the book profile's small models fit many times over; the paper profile's keep fewer, the
oldest go first). The cells read and
fill it through :func:`shared_pretraining`; the results are the same bits as training every time
(``tests/test_cosmos_study.py``)."""


def shared_pretraining(study: COSMOSStudy):
    """The context in which a cell's runs share their clients' pre-training (``study``'s
    ``client_train["pretrain"]``) through :data:`PRETRAINED`."""
    return PRETRAINED.covering(study.client_train["pretrain"])


def sweep_label(study: str, value) -> str:
    """The name of one swept value: a claim's comparator, a cell of the sweep study, and the frame
    of its runs in :func:`tidy` (``"λ = 0.5"``, ``"rule = median"``).

    Examples
    --------
    >>> sweep_label("λ", 0.5), sweep_label("rule", "median")
    ('λ = 0.5', 'rule = median')
    """
    return f"{study} = {value:g}" if isinstance(value, (int, float, np.integer, np.floating)) else f"{study} = {value}"


def sweep_settings(sweeps: Mapping[str, Sequence]) -> list[str]:
    """Every swept setting other than the defaults, by :func:`sweep_label`, in the sweeps' order:
    the grid of the sweep study.

    Examples
    --------
    >>> sweep_settings({"λ": [0.0, 1.0], "rule": ["median"]})
    ['λ = 0', 'λ = 1', 'rule = median']
    """
    return [sweep_label(study, v) for study, values in sweeps.items() for v in values]


def sweep_reads(study: str, sweeps: Mapping[str, Sequence], column: str = "mean") -> dict | None:
    """A claim's baselines "every other value of ``study`` tried": one :class:`fedbook.claims.Read`
    per swept value of ``study`` (the frame :func:`tidy` names after it), by :func:`sweep_label`;
    ``None`` where ``study`` is not swept (the claim is then not decided).

    Examples
    --------
    >>> sweep_reads("λ", {"λ": [0.0]}), sweep_reads("T", {"λ": [0.0]})
    ({'λ = 0': Read('λ = 0', 'mean')}, None)
    """
    return {sweep_label(study, v): Read(sweep_label(study, v), column) for v in sweeps.get(study, [])} or None


def lambda_note(sweeps: Mapping[str, Sequence], lam: float) -> str:
    """The "λ" claim's substitution: the values of λ tried, and what a sweep of the regulariser off
    alone cannot test.

    Examples
    --------
    >>> lambda_note({"λ": [0.0]}, 5.0)[:40]
    'λ = 0 tried: only the regulariser off, s'
    >>> lambda_note({"λ": [0.0, 1.0, 10.0]}, 5.0)
    'λ = 0, 1, 10 tried'
    """
    tried = list(sweeps.get("λ", []))
    return f"λ = {', '.join(f'{v:g}' for v in tried)} tried" + (
        f": only the regulariser off, so this row tests λ = {lam:g} against no regulariser and cannot test that λ = {lam:g} is "
        "the best of a range of values (the paper profile tries λ = 0, 1 and 10)" if tried and all(v == 0 for v in tried) else "")


def temperature_note(sweeps: Mapping[str, Sequence], temperature: float) -> str:
    """The "T" claim's substitution: the temperatures tried (or that none is: the row is then not
    decided), what hard labels alone cannot test, and whether the oversmoothing half is tested.

    Examples
    --------
    >>> temperature_note({}, 1.0)
    'this profile tries no other T, so this row is not decided here'
    >>> temperature_note({"T": [0.0, 4.0]}, 1.0)
    'T = 0, 4 tried; the oversmoothing half is cut from the quotation, not tested'
    """
    tried = list(sweeps.get("T", []))
    if not tried:
        return "this profile tries no other T, so this row is not decided here"
    return (f"T = {', '.join(f'{t:g}' for t in tried)} tried" + (
        f" (hard labels) only, so this row tests T = {temperature:g} against hard labels alone, not against another soft "
        "temperature (the paper profile tries T = 4)" if all(t == 0 for t in tried) else "") +
        ("; no T above 1, so the oversmoothing half is not tested" if all(t <= 1 for t in tried) else
         "; the oversmoothing half is cut from the quotation, not tested"))


def accuracy_points(frame: pd.DataFrame, round_: int | None = None) -> dict[str, float]:
    """The protocol's client accuracies of a run's round ``round_`` (default: its last evaluated round), in points: the mean over
    clients (``mean``), the worst client (``worst``), the mean of the lowest 20 %
    (``bottom-20 %``) and the @25 floor (``P@25``, the mean of the lowest quarter) of the clients'
    pooled scores (each client's model on the held-out pool of its own distribution, the ability
    ``pooled`` of :mod:`fedlib.metrics`; :func:`fedlib.metrics.protocol_summary`).

    Parameters
    ----------
    frame : DataFrame
        A run's tidy frame (:attr:`fedlib.results.RunResult.frame`).
    round_ : int, optional
        The evaluated round to read (a run evaluated every round holds every earlier round's scores).
    """
    s = protocol_summary(per_client_table(frame, round_))
    return {"mean": 100 * s["pooled"], "worst": 100 * s["worst_pooled"], "bottom-20 %": 100 * s["bottom20_pooled"],
            "P@25": 100 * s["P@25"]}


def training_bytes(run: RunResult, n_clients: int, n_rounds: int) -> dict[str, float]:
    """A run's training traffic per client and round, ``{"up": ..., "down": ...}`` in bytes
    (:meth:`fedlib.messages.Ledger.per_client_and_round`; evaluation messages excluded), over the
    federation's ``n_clients`` and the run's ``n_rounds``."""
    return {"up": run.ledger.per_client_and_round(UP, n_clients=n_clients, n_rounds=n_rounds),
            "down": run.ledger.per_client_and_round(DOWN, n_clients=n_clients, n_rounds=n_rounds)}


@dataclass(frozen=True)
class COSMOSStudy:
    """What the chapter runs, whatever the seed: the data, the partition, the architectures, the
    methods' settings and the sweeps. The cell functions (:func:`main_cell`, ...) take it as their
    first argument; the chapter binds it with ``functools.partial`` (so a cell's cache key covers
    every field).

    The sensitivity runs' default setting is no run of its own: a main COSMOS run is evaluated
    every round, and its scores after ``sweep_rounds`` rounds are those of the default setting
    (the rounds' random streams do not depend on how many rounds follow; :func:`main_cell`'s
    ``default`` table).

    Parameters
    ----------
    dataset : str
        The data set's name (:func:`fedlib.data.datasets.load_dataset`), with ``n_samples`` and ``cifar_root``.
    n_samples : int or None
    public_share : float
        The share of every class held out as the public set :math:`U` (:func:`fedlib.distill.make_public_set`).
    n_clients, n_groups, alpha, pool_fraction, global_test_per_class
        The paper's partition (``"grouped_dirichlet"``, :func:`fedlib.federation.make_federation`).
    arch_specs : mapping of str to mapping
        Every client architecture by name (:meth:`fedlib.models.ClientArchitectures.mixture`).
    base_mix : sequence of str
        The default mixture of the main runs.
    mixtures : mapping of str to sequence of str
        The other mixtures; the first is the one-architecture federation of the parameter-sharing
        runs (:func:`homogeneous_cell`), the others run COSMOS and COMET (:func:`mixture_cell`).
    server, small_server : mapping
        COSMOS's server architecture (:func:`fedlib.models.build_model`'s name under ``model`` and
        its options), and the smaller one of the ``server`` sweep.
    client_train : mapping of str to TrainConfig
        The model-agnostic methods' ``pretrain``, ``train`` and ``distill`` (local training alone
        takes the same ``pretrain`` and ``train``).
    server_train : TrainConfig
        COSMOS's server distillation.
    pfl_train, finetune : TrainConfig
        The parameter-sharing methods' local training per round, and FedBABU's fine-tuning. Every
        method trains ``pfl_train.epochs`` epochs per round in all: Ditto's global and personal
        models, and FedRep's head and body, split them (:func:`split_epochs`).
    temperature, lam : float
        The pseudo-labels' :math:`T` and COSMOS's :math:`\\lambda`.
    target_clusters, comet_k : int
        COSMOS's target number of clusters and COMET's :math:`K`.
    rounds, sweep_rounds : int
        The rounds of the main, mixture, :math:`\\alpha` and one-architecture runs, and of a
        sensitivity run (at most ``rounds``).
    sweeps : mapping of str to sequence
        The values tried per sensitivity study (:data:`STUDIES`), the default aside. ``"|U|
        share"`` values are below ``public_share`` and ``"clients"`` values below ``n_clients``:
        the smaller :math:`U` is a class-balanced part of the default one and the fewer clients
        are the first ones of each label group's block of the default federation, so the data of
        every client is the same in both settings.
    cifar_root : str or None
    pseudo_lr : mapping of str to float
        A method's own learning rate on pseudo-labels (:data:`PSEUDO_LR_METHODS`): its clients'
        distillation and, for COSMOS, its server's; a method not named takes ``client_train``'s
        ``distill`` rate (and COSMOS ``server_train``'s). Local training alone distils nothing.
    radius : float, optional
        COSMOS's consistency ball scaled to the images (:class:`fedlib.algorithms.cosmos.COSMOS`'s
        ``radius``: Gaussian noise of that share of the mean image norm, no translation); None
        keeps the family's augmentation.
    """

    dataset: str
    n_samples: int | None
    public_share: float
    n_clients: int
    n_groups: int
    alpha: float
    pool_fraction: float
    global_test_per_class: int
    arch_specs: Mapping[str, Mapping]
    base_mix: Sequence[str]
    mixtures: Mapping[str, Sequence[str]]
    server: Mapping
    small_server: Mapping
    client_train: Mapping[str, TrainConfig]
    server_train: TrainConfig
    pfl_train: TrainConfig
    finetune: TrainConfig
    temperature: float
    lam: float
    target_clusters: int
    comet_k: int
    rounds: int
    sweep_rounds: int
    sweeps: Mapping[str, Sequence] = field(default_factory=dict)
    cifar_root: str | None = None
    pseudo_lr: Mapping[str, float] = field(default_factory=dict)
    radius: float | None = None

    def __post_init__(self) -> None:
        bad = {m: lr for m, lr in self.pseudo_lr.items()
               if m not in PSEUDO_LR_METHODS or not isinstance(lr, (int, float)) or not np.isfinite(lr) or lr <= 0}
        if bad:
            raise ValueError(f"pseudo_lr must map methods of {', '.join(PSEUDO_LR_METHODS)} to positive finite rates, got {bad}")
        if self.n_clients < self.n_groups:
            raise ValueError(f"n_clients={self.n_clients} must be at least the {self.n_groups} label groups of the partition")
        unknown = [s for s in self.sweeps if s not in STUDIES]
        if unknown:
            raise ValueError(f"unknown sensitivity studies {unknown}; valid: {', '.join(STUDIES)}")
        if not 1 <= self.sweep_rounds <= self.rounds:
            raise ValueError(f"sweep_rounds={self.sweep_rounds} must be in 1..rounds={self.rounds} (the default setting is "
                             "read from the main runs)")
        if any(not 0 < v < self.public_share for v in self.sweeps.get("|U| share", [])):
            raise ValueError(f"'|U| share' values must lie in (0, public_share={self.public_share}): a smaller U is a part of "
                             f"the default one, got {list(self.sweeps['|U| share'])}")
        if any(not self.n_groups <= v < self.n_clients for v in self.sweeps.get("clients", [])):
            raise ValueError(f"'clients' values must lie in [n_groups={self.n_groups}, n_clients={self.n_clients}): fewer "
                             f"clients are kept from the default federation, got {list(self.sweeps['clients'])}")

    @classmethod
    def from_settings(cls, P, *, cifar_root: str | None = None) -> COSMOSStudy:
        """The study of the chapter's settings ``P`` (:func:`fedbook.page.setup` of its profile):
        Adam with mini-batches of 32 (:data:`PSEUDO_BATCH` on :math:`U`) at ``P.lr_true`` on true
        labels and the first of ``P.lr_pseudo_candidates`` on pseudo-labels (until the pilot picks
        each method's, :meth:`with_pseudo_lrs`); the parameter-sharing methods with SGD with
        momentum 0.9 at ``P.sgd_lr`` for :func:`matched_epochs` local epochs per round, FedBABU
        fine-tuning :data:`FT_EPOCHS` epoch(s) at a fifth of the rate; the clients take the
        architectures of ``P.archs`` in turn (``P.extra_archs`` enter the other mixtures)."""
        adam = functools.partial(TrainConfig, batch_size=32, optimizer="adam")
        pfl = TrainConfig(epochs=matched_epochs(P.pretrain_epochs, P.local_epochs, P.rounds), batch_size=32, lr=P.sgd_lr,
                          momentum=0.9)
        client_train = dict(pretrain=adam(epochs=P.pretrain_epochs, lr=P.lr_true), train=adam(epochs=P.local_epochs, lr=P.lr_true),
                            distill=adam(epochs=1, lr=P.lr_pseudo_candidates[0], batch_size=PSEUDO_BATCH))
        return cls(dataset=P.dataset, n_samples=P.n_samples, cifar_root=cifar_root, public_share=P.public_share,
                   n_clients=P.n_clients, n_groups=P.n_groups, alpha=P.alpha, pool_fraction=P.pool_fraction,
                   global_test_per_class=P.global_test_per_class, arch_specs={**P.archs, **P.extra_archs},
                   base_mix=list(P.archs), mixtures=P.mixtures, server=P.server, small_server=P.small_server,
                   client_train=client_train,
                   server_train=adam(epochs=P.server_epochs, steps=getattr(P, "server_steps", (None,))[0],
                                     lr=P.lr_pseudo_candidates[0], batch_size=PSEUDO_BATCH), radius=getattr(P, "radius", None),
                   pfl_train=pfl, finetune=dataclasses.replace(pfl, epochs=FT_EPOCHS, lr=P.sgd_lr / 5),
                   temperature=P.temperature, lam=P.lam, target_clusters=P.target_clusters, comet_k=P.comet_k,
                   rounds=P.rounds, sweep_rounds=P.sweep_rounds, sweeps=P.sweeps)

    @property
    def sweep_defaults(self) -> dict:
        """Each sensitivity study's default value: the main runs' setting."""
        return {"λ": self.lam, "T": self.temperature, "rule": "mean", "clusters": self.target_clusters,
                "|U| share": self.public_share, "clients": self.n_clients, "server": "default", "detach": False}

    @property
    def default_mixture(self) -> str:
        """The name of the default mixture (``base_mix``) in the mixtures' table: ``"cnn + mlp"``."""
        return " + ".join(self.base_mix)

    def swept(self, setting: str) -> tuple[str, object]:
        """``(study, value)`` of a swept setting named by :func:`sweep_label`."""
        for study, values in self.sweeps.items():
            for v in values:
                if sweep_label(study, v) == setting:
                    return study, v
        raise ValueError(f"unknown sweep setting {setting!r}; valid: {', '.join(sweep_settings(self.sweeps))}")

    def split(self, run_seed: int, alpha: float | None = None) -> tuple[PublicSet, np.ndarray, Federation, np.ndarray]:
        """``(public, hidden, federation, planted)``: :math:`U` (its labels ``hidden``), the federation
        of the rest (at the Dirichlet ``alpha``, default the study's), and each client's planted
        label group (blocks of clients, in order)."""
        ds = load_dataset(self.dataset, n_samples=self.n_samples, seed=run_seed, root=self.cifar_root)
        public, rest, hidden = make_public_set(ds, self.public_share, seed=run_seed)
        n = self.n_clients
        fed = make_federation(rest, n_clients=n, partition="grouped_dirichlet", n_groups=self.n_groups,
                              alpha=self.alpha if alpha is None else alpha, pool_fraction=self.pool_fraction,
                              global_test_per_class=self.global_test_per_class, seed=run_seed)
        return public, hidden, fed, planted_groups(n, self.n_groups)

    def architectures(self, names: Sequence[str], n: int, ds: ArrayDataset) -> ClientArchitectures:
        """``n`` clients taking the architectures ``names`` in turn, for the data of ``ds``."""
        specs = {a: self.arch_specs[a] for a in names}
        return ClientArchitectures.mixture(specs, n, in_channels=ds.x.shape[1], n_classes=ds.n_classes, input_size=ds.x.shape[-1])

    def server_factory(self, ds: ArrayDataset, spec: Mapping) -> Callable[[], nn.Module]:
        """The server architecture ``spec`` for the data of ``ds``."""
        spec = dict(spec)
        return functools.partial(build_model, spec.pop("model"), in_channels=ds.x.shape[1], n_classes=ds.n_classes,
                                 input_size=ds.x.shape[-1], **spec)

    def method_train(self, name: str) -> dict[str, TrainConfig]:
        """The client configurations of method ``name``: ``client_train`` with its ``distill``
        rate replaced by the method's own rate on pseudo-labels where ``pseudo_lr`` names one."""
        if name not in self.pseudo_lr:
            return dict(self.client_train)
        return {**self.client_train, "distill": dataclasses.replace(self.client_train["distill"], lr=self.pseudo_lr[name])}

    def cosmos_method(self, ds: ArrayDataset, public: PublicSet, run_seed: int, **change) -> COSMOS:
        """COSMOS with the study's settings (its own rate on pseudo-labels, :meth:`method_train`, on
        both sides), ``change`` applied."""
        server_train = self.server_train if "COSMOS" not in self.pseudo_lr else \
            dataclasses.replace(self.server_train, lr=self.pseudo_lr["COSMOS"])
        kw = dict(public=public, server_model=self.server_factory(ds, self.server), server_train=server_train,
                  radius=self.radius, temperature=self.temperature, lam=self.lam, target_clusters=self.target_clusters, seed=run_seed,
                  **self.method_train("COSMOS"))
        kw.update(change)
        return COSMOS(**kw)

    def baselines(self, public: PublicSet, run_seed: int) -> dict:
        """FedMD, FedCT and COMET with the study's settings, each with its own rate on pseudo-labels
        (:meth:`method_train`)."""
        kw = dict(public=public, temperature=self.temperature, seed=run_seed)
        return {"FedMD": FedMD(**kw, **self.method_train("FedMD")), "FedCT": FedCT(**kw, **self.method_train("FedCT")),
                "COMET": COMET(k=self.comet_k, **kw, **self.method_train("COMET"))}

    def local_only(self, public: PublicSet, run_seed: int) -> LocalOnly:
        """Local training alone: the model-agnostic clients' own training, no server feedback."""
        return LocalOnly(public=public, temperature=self.temperature, seed=run_seed, **self.client_train)

    def with_pseudo_lr(self, lr: float) -> COSMOSStudy:
        """The study with the learning rate ``lr`` on pseudo-labels: every client's distillation and
        COSMOS's server's (a method's own rate in ``pseudo_lr`` still overrides it)."""
        return dataclasses.replace(self, server_train=dataclasses.replace(self.server_train, lr=lr),
                                   client_train={**self.client_train, "distill": dataclasses.replace(self.client_train["distill"], lr=lr)})

    def with_server(self, lr: float, steps: int) -> COSMOSStudy:
        """The study with COSMOS's server budget: ``steps`` optimizer steps per cluster and round at the
        learning rate ``lr`` (also COSMOS's clients' rate on pseudo-labels, ``pseudo_lr``)."""
        return dataclasses.replace(self, server_train=dataclasses.replace(self.server_train, steps=int(steps), lr=lr),
                                   pseudo_lr={**self.pseudo_lr, "COSMOS": lr})

    def with_pseudo_lrs(self, rates: Mapping[str, float]) -> COSMOSStudy:
        """The study with each method of ``rates`` (:data:`PSEUDO_LR_METHODS`) taking its own learning
        rate on pseudo-labels (``pseudo_lr``)."""
        return dataclasses.replace(self, pseudo_lr={**self.pseudo_lr, **rates})

    def fewer_clients(self, fed: Federation, planted: np.ndarray, n_kept: int) -> tuple[Federation, np.ndarray]:
        """The federation of ``n_kept`` of ``fed``'s clients (:func:`kept_clients`: every kept
        client's data unchanged) and their planted groups."""
        keep = kept_clients(self.n_clients, self.n_groups, n_kept)
        return (dataclasses.replace(fed, clients=[fed.clients[k] for k in keep], description={**fed.description, "n_clients": len(keep)}),
                planted[keep])

    def pilot_scores(self, run_seed: int, rounds: int, methods: Sequence[str] = ("COSMOS", "FedMD", "FedCT", "COMET"),
                     n_clients: int | None = None) -> dict[str, float]:
        """Each of ``methods``' mean accuracy in points on the default mixture after ``rounds``
        rounds at ``run_seed``: a pilot seed's scores, for a setting chosen before the claims' runs
        on a seed none of them uses. ``n_clients`` (below the study's) keeps that many clients of the
        federation (:meth:`fewer_clients`), to make the pilot cheaper with every client's data unchanged."""
        unknown = [m for m in methods if m not in PSEUDO_LR_METHODS]
        if unknown or not methods:
            raise ValueError(f"methods must be among {', '.join(PSEUDO_LR_METHODS)}, got {list(methods)}")
        public, hidden, fed, planted = self.split(run_seed)
        if n_clients is not None and n_clients != self.n_clients:
            fed, planted = self.fewer_clients(fed, planted, n_clients)
        ds = fed.global_test
        archs = self.architectures(self.base_mix, fed.n_clients, ds)
        cfg = LoopConfig(rounds=rounds, seed=run_seed, eval_every=0)
        scores = {}
        for m in methods:
            method = self.cosmos_method(ds, public, run_seed) if m == "COSMOS" else self.baselines(public, run_seed)[m]
            scores[m] = accuracy_points(run_federated(method, fed, archs, cfg).frame)["mean"]
        return scores


def matched_epochs(pretrain_epochs: int, local_epochs: int, rounds: int) -> int:
    """The parameter-sharing methods' local epochs per round: as many epochs on their own data in
    all as COSMOS's clients (its pre-training plus its local epochs of the later rounds), spread
    over the rounds, rounded up.

    Examples
    --------
    >>> matched_epochs(20, 3, 4)  # (20 + 3 × 3) / 4, rounded up
    8
    """
    return -(-(pretrain_epochs + (rounds - 1) * local_epochs) // rounds)


# ---- the cells of the chapter's studies ------------------------------------------------------------

def pilot_cell(study: COSMOSStudy, seed: int, lr: float, method: str, rounds: int, n_clients: int | None = None
               ) -> pd.DataFrame:
    """One pilot score: ``method``'s mean accuracy (points) on the default mixture after ``rounds``
    rounds at ``seed`` with the learning rate ``lr`` on pseudo-labels (:meth:`COSMOSStudy.with_pseudo_lr`,
    :meth:`COSMOSStudy.pilot_scores`, on ``n_clients`` of the clients). Columns: ``mean``."""
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        score = study.with_pseudo_lr(lr).pilot_scores(seed, rounds, (method,), n_clients=n_clients)[method]
        return pd.DataFrame({"mean": [score]})


def server_pilot_cell(study: COSMOSStudy, seed: int, lr: float, steps: int, rounds: int, n_clients: int | None = None
                      ) -> pd.DataFrame:
    """One pilot score of COSMOS's server budget: its mean accuracy (points) on the default mixture
    after ``rounds`` rounds at ``seed`` with ``steps`` server optimizer steps per cluster and round
    at the learning rate ``lr`` (:meth:`COSMOSStudy.with_server`), on ``n_clients`` of the clients,
    and how well its servers reproduce their targets (``fit``: the last round's mean over clusters
    of :func:`fedlib.algorithms.cosmos.cosmos_fits`, %). Columns: ``mean``, ``fit``."""
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        st = study.with_server(lr, steps)
        public, hidden, fed, planted = st.split(seed)
        if n_clients is not None and n_clients != st.n_clients:
            fed, planted = st.fewer_clients(fed, planted, n_clients)
        ds = fed.global_test
        run = run_federated(st.cosmos_method(ds, public, seed), fed, st.architectures(st.base_mix, fed.n_clients, ds),
                            LoopConfig(rounds=rounds, seed=seed, eval_every=0))
        return pd.DataFrame({"mean": [accuracy_points(run.frame)["mean"]], "fit": [last_fit(run.server)]})


def last_fit(server) -> float:
    """The last round's mean over clusters of the server models' agreement with their targets on
    :math:`U` (:func:`fedlib.algorithms.cosmos.cosmos_fits`), in %."""
    fits = pd.DataFrame(cosmos_fits(server))
    return float(100 * fits[fits["round"] == fits["round"].max()]["agreement"].mean())


def fit_at(server, round_: int | None = None) -> float:
    """:func:`last_fit` at ``round_`` (the last round where None): the mean over clusters of the
    server models' agreement with their targets on :math:`U` after that round's distillation, in %."""
    fits = pd.DataFrame(cosmos_fits(server))
    at = fits["round"].max() if round_ is None else round_
    if at not in set(fits["round"]):
        raise ValueError(f"no server fit recorded at round {round_!r}; rounds: {sorted(set(fits['round']))}")
    return float(100 * fits[fits["round"] == at]["agreement"].mean())


BALL_POINTS = 4
"""How many random parameter points :func:`ball_convexity` measures the Hessian at."""
BALL_IMAGES = 100
"""How many images of :math:`U` (its first ones) :func:`ball_convexity` reads."""


def ball_convexity(x: torch.Tensor, *, shift: int, noise: float, lam: float, n_classes: int, seed: int,
                   points: int = BALL_POINTS) -> float:
    r"""The derivations' convexity check of the two-sided consistency term (Definition 5.4, the
    synthetic chapter's :func:`~fedbook.studies.cosmos_synthetic.hessian_checks`) on images ``x``
    with the ball the chapter draws (``shift``, ``noise``, :func:`fedlib.distill.augment`): the
    share of ``points`` random parameter points of a linear softmax client (random teacher labels)
    at which the Hessian of its objective, :math:`\mathrm{KL} + \lambda` times the two-sided
    consistency term (:func:`~fedbook.studies.cosmos_synthetic.client_objective`, float64), has an
    eigenvalue below :math:`-10^{-9}` off the logit-shift directions. 0 is the regime the
    analysis assumes; a ball large against the images makes the term non-convex.

    Examples
    --------
    >>> x = torch.rand(20, 1, 3, 3, generator=torch.Generator().manual_seed(0))
    >>> ball_convexity(x, shift=0, noise=1e-4, lam=5.0, n_classes=3, seed=0)
    0.0
    >>> ball_convexity(x, shift=0, noise=3.0, lam=5.0, n_classes=3, seed=0) > 0
    True
    """
    from torch.func import hessian

    f64 = torch.float64
    flat = x.reshape(len(x), -1).to(f64)
    D, C = flat.shape[1], int(n_classes)
    x_aug = augment(x.float(), torch.Generator().manual_seed(int(seed)), shift=shift, noise=noise).reshape(len(x), -1).to(f64)
    S = shift_basis(C, D)
    n = C * (D + 1)
    complement = torch.linalg.eigh(torch.eye(n, dtype=f64) - S @ S.T)[1][:, S.shape[1]:]
    rng = np.random.default_rng(int(seed))
    teacher = torch.softmax(torch.tensor(rng.normal(size=(len(x), C)) * 2), 1)
    scale = float(flat.norm(dim=1).mean().clamp_min(1e-12))  # logits of a few units at the images' norm
    negative = 0
    for _ in range(points):
        theta = torch.tensor(rng.normal(size=n) * rng.uniform(0.1, 5.0) / scale)
        H = hessian(lambda th: client_objective(th, flat, x_aug, teacher, lam, C, D))(theta)
        negative += float(torch.linalg.eigvalsh(complement.T @ H @ complement).min()) < -1e-9
    return negative / points


def server_choice(pilot: pd.DataFrame, fit_threshold: float) -> dict:
    """COSMOS's server budget from the server pilot's frame (``lr, steps, seed, mean, fit``): the
    fewest steps at which a rate's servers reproduce their targets on at least ``fit_threshold`` % of
    :math:`U` (the budget the server-fit regime check asks for, and no more), at the rate with the
    higher mean accuracy there (a tie: the first rate); where none does, the setting with the
    highest fit. Returns ``lr``, ``steps``, ``met`` (whether the threshold was met) and ``text``
    (every setting's scores).

    Examples
    --------
    >>> f = pd.DataFrame({"lr": [1e-4, 1e-3, 1e-3, 1e-3], "steps": [150, 18, 60, 150], "seed": 9,
    ...                   "mean": [80.0, 85.0, 84.0, 86.0], "fit": [90.0, 93.0, 96.0, 97.0]})
    >>> c = server_choice(f, 95.0)
    >>> c["lr"], c["steps"], bool(c["met"])
    (0.001, 60, True)
    >>> server_choice(f, 99.0)["steps"]  # none meets 99 %: the highest fit
    150
    """
    f = pilot.reset_index(drop=True).assign(order=lambda d: range(len(d)))
    ok = f[f["fit"] >= fit_threshold]
    pick = (ok.sort_values(["steps", "mean", "order"], ascending=[True, False, True]) if len(ok) else
            f.sort_values(["fit", "steps", "order"], ascending=[False, True, True])).iloc[0]
    text = "; ".join(f"{r.lr:g} × {int(r.steps)} steps: {r.mean:.1f} %, fit {r.fit:.1f} %" for r in f.itertuples())
    return {"lr": float(pick["lr"]), "steps": int(pick["steps"]), "met": bool(len(ok)), "text": text}


@dataclass
class VoteRecorder(FedCT):
    """FedCT that keeps each round's majority vote on :math:`U` (``votes``, in the order the
    aggregations ran), to read its dynamics; it trains and communicates as FedCT."""

    votes: list = field(default_factory=list)

    def consensus(self, labels: torch.Tensor) -> torch.Tensor:
        vote = super().consensus(labels)
        self.votes.append(vote.detach().clone())
        return vote


def vote_dynamics(votes: Sequence[torch.Tensor], hidden: np.ndarray, n_classes: int) -> pd.DataFrame:
    """FedCT's vote per round (``votes``, one per aggregation) against :math:`U`'s hidden labels:
    ``round``, ``accuracy`` (% of public points the vote labels right), ``top_class`` (the class
    the vote gives most often), ``top_count`` (how many public points it takes) and ``n_public``.

    Examples
    --------
    >>> vote_dynamics([torch.tensor([0, 1, 1, 1]), torch.tensor([1, 1, 1, 1])], np.array([0, 1, 2, 3]), 4).values.tolist()
    [[1.0, 50.0, 1.0, 3.0, 4.0], [2.0, 25.0, 1.0, 4.0, 4.0]]
    """
    rows = []
    for r, v in enumerate(votes, start=1):
        v = np.asarray(v, dtype=int)
        counts = np.bincount(v, minlength=n_classes)
        rows.append({"round": r, "accuracy": 100 * float(np.mean(v == np.asarray(hidden))), "top_class": int(counts.argmax()),
                     "top_count": int(counts.max()), "n_public": len(v)})
    return pd.DataFrame(rows)


def main_cell(study: COSMOSStudy, seed: int) -> dict[str, pd.DataFrame]:
    """The four model-agnostic methods on the default mixture at ``seed``, evaluated every round.

    Returns
    -------
    dict of str to DataFrame
        ``main``: ``method`` and :func:`accuracy_points` of the last round, per method and for
        COSMOS's clients' own models (``"COSMOS (client models)"``,
        :func:`fedlib.run.evaluate_deployment` with ``deploy_model="client"``); ``curves``:
        ``method, round, mean`` (the clients' mean pooled score per round, points); ``bytes``:
        ``method, up, down`` (:func:`training_bytes`); ``clusters``: COSMOS's clustering per round
        (:func:`fedlib.algorithms.cosmos.cosmos_history`, less the seeds); ``default``: the
        sensitivity runs' default setting, COSMOS after ``sweep_rounds`` rounds, with its
        ``clusters``, ``purity`` and ``fit`` (:func:`fit_at` that round); COSMOS's ``main`` row also
        carries its ``fit`` and ``purity``; ``measures``: one row of ``server_fit`` (:func:`last_fit`),
        ``ball`` (one draw of the ball's mean relative move), ``shift_ratio`` (a one-pixel
        translation's), ``ball_nonconvex`` (:func:`ball_convexity` at COSMOS's ball and λ),
        ``purity`` and ``comet_purity``
        (against the planted groups), ``deploy_bytes`` (a cluster model's evaluation message),
        ``n_public``, ``test_size``, ``train_size`` (mean local split sizes) and ``params`` (the
        one-architecture client model's parameters).
    """
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        public, hidden, fed, planted = study.split(seed)
        ds = fed.global_test
        archs = study.architectures(study.base_mix, study.n_clients, ds)
        cfg = LoopConfig(rounds=study.rounds, seed=seed, eval_every=1)
        methods = {"COSMOS": study.cosmos_method(ds, public, seed), **study.baselines(public, seed)}
        methods["FedCT"] = VoteRecorder(**{f.name: getattr(methods["FedCT"], f.name) for f in dataclasses.fields(FedCT) if f.init})
        rows, curves, nbytes, clusters, default, measures = [], [], [], [], [], {}
        for name, m in methods.items():
            run = run_federated(m, fed, archs, cfg)
            rows.append({"method": name, **accuracy_points(run.frame)})
            curve = run.curve("pooled")  # the clients' pooled scores, as the table
            curves.append(pd.DataFrame({"method": name, "round": curve.index, "mean": 100 * curve.values}))
            nbytes.append({"method": name, **training_bytes(run, study.n_clients, study.rounds)})
            if name == "COSMOS":  # the paper's protocol: each evaluated client downloads its cluster model
                led = run.ledger.to_frame()
                own = evaluate_deployment(dataclasses.replace(m, deploy_model="client"), run, fed, archs, cfg)
                rows.append({"method": "COSMOS (client models)", **accuracy_points(own)})
                clusters += [{k: v for k, v in h.items() if k != "seeds"} for h in cosmos_history(run.server)]
                purity = group_purity(grouping(run.server), planted)
                # the sensitivity runs' default setting: this run after sweep_rounds rounds (the clusters are fixed after round 1),
                # and its mean over the clients each smaller federation of the clients sweep keeps (the same clients compared)
                table = per_client_table(run.frame, study.sweep_rounds)
                kept = {f"kept_{n}": 100 * protocol_summary(table.loc[kept_clients(study.n_clients, study.n_groups, n)])["pooled"]
                        for n in study.sweeps.get("clients", [])}
                default.append({**accuracy_points(run.frame, study.sweep_rounds), "clusters": int(run.server.meta["n_groups"]),
                                "purity": purity, "fit": fit_at(run.server, study.sweep_rounds), **kept})
                x = public.x.float()
                drawn = augment(x, torch.Generator().manual_seed(int(seed)), shift=m.shift, noise=m.noise) - x
                moved = augment(x, torch.Generator().manual_seed(int(seed)), shift=1, noise=0.0) - x  # a one-pixel translation
                measures.update(server_fit=last_fit(run.server),
                                shift_ratio=float((moved.flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1).clamp_min(1e-12)).mean()),
                                ball=float((drawn.flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1).clamp_min(1e-12)).mean()),
                                ball_nonconvex=ball_convexity(public.x[:BALL_IMAGES], shift=m.shift, noise=m.noise, lam=m.lam,
                                                              n_classes=ds.n_classes, seed=int(seed)))
                rows[0].update(fit=last_fit(run.server), purity=purity)  # COSMOS's row: its server fit and purity
                one = list(study.mixtures.values())[0]
                measures.update(purity=purity, deploy_bytes=float(led[led["kind"] == "eval:cluster_model"]["bytes"].mean()),
                                n_public=len(public), test_size=float(np.mean([len(c.test) for c in fed.clients])),
                                train_size=float(np.mean([len(c.train) for c in fed.clients])),
                                params=study.architectures(one, 1, ds).parameters()[one[0]])
            if name == "COMET":
                measures["comet_purity"] = group_purity(grouping(run.server), planted)
            if name == "FedCT":
                votes = vote_dynamics(m.votes, hidden, ds.n_classes)
                measures.update({f"vote_{c}_{int(r['round'])}": r[c] for _, r in votes.iterrows()
                                 for c in ("accuracy", "top_class", "top_count")}, vote_n_public=int(votes["n_public"].iloc[0]))
        return {"main": pd.DataFrame(rows), "curves": pd.concat(curves, ignore_index=True), "bytes": pd.DataFrame(nbytes),
                "clusters": pd.DataFrame(clusters), "default": pd.DataFrame(default), "measures": pd.DataFrame([measures])}


def local_cell(study: COSMOSStudy, seed: int) -> pd.DataFrame:
    """Local training alone (Corollary 5.13's comparator, :meth:`COSMOSStudy.local_only`) on the
    default mixture at ``seed``: ``method`` (``"Local"``) and :func:`accuracy_points`."""
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        public, hidden, fed, planted = study.split(seed)
        archs = study.architectures(study.base_mix, study.n_clients, fed.global_test)
        run = run_federated(study.local_only(public, seed), fed, archs, LoopConfig(rounds=study.rounds, seed=seed, eval_every=0))
        return pd.DataFrame([{"method": "Local", **accuracy_points(run.frame)}])


def homogeneous_cell(study: COSMOSStudy, seed: int) -> pd.DataFrame:
    """One architecture for every client (the first of ``mixtures``) at ``seed``: COSMOS, Ditto,
    FedBABU and FedRep (FedAvg, no personalized method, is no run: its bytes are
    :func:`fedavg_bytes`), each training ``COSMOSStudy.pfl_train``'s epochs per round in all
    (:func:`split_epochs`); the parameter-sharing methods' clients train stacked
    (``execution="vectorized"``, :mod:`fedlib.engines.vectorized`). Columns: ``method``,
    :func:`accuracy_points`, and COSMOS's ``fit`` and ``purity`` (NaN for the others)."""
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        public, hidden, fed, planted = study.split(seed)
        ds = fed.global_test
        archs = study.architectures(list(study.mixtures.values())[0], study.n_clients, ds)
        cfg = LoopConfig(rounds=study.rounds, seed=seed, eval_every=0)
        train = study.pfl_train
        first, second = split_epochs(train)  # two models (Ditto) or two parts (FedRep): the same epochs in all
        methods = {"COSMOS": study.cosmos_method(ds, public, seed), "Ditto": Ditto(train=first, personal_train=second),
                   "FedBABU": FedBABU(train=train, finetune=study.finetune), "FedRep": FedRep(head_train=first, train=second)}
        # the parameter-sharing methods' clients train stacked (their local work is a LocalProgram: the same batches and
        # updates as one client at a time, to float32 rounding); COSMOS's clients, with their own losses, one at a time
        stacked = RunOptions(execution="vectorized")
        rows = []
        for name, m in methods.items():
            run = run_federated(m, fed, archs, cfg, RunOptions() if name == "COSMOS" else stacked)
            rows.append({"method": name, **accuracy_points(run.frame), **_server_measures(run, planted, name)})
        return pd.DataFrame(rows)


def _server_measures(run: RunResult, planted: np.ndarray, name: str) -> dict:
    """COSMOS's server fit (:func:`last_fit`) and purity against ``planted`` in its run (``fit``,
    ``purity``); NaN for another method's run."""
    if name != "COSMOS":
        return {"fit": np.nan, "purity": np.nan}
    return {"fit": last_fit(run.server), "purity": group_purity(grouping(run.server), planted)}


def _cosmos_and_comet(study: COSMOSStudy, seed: int, names: Sequence[str], alpha: float | None,
                      baselines: Sequence[str] = ("COMET",)) -> pd.DataFrame:
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        public, hidden, fed, planted = study.split(seed, alpha=alpha)
        ds = fed.global_test
        archs = study.architectures(names, study.n_clients, ds)
        cfg = LoopConfig(rounds=study.rounds, seed=seed, eval_every=0)
        base = study.baselines(public, seed)
        methods = (("COSMOS", study.cosmos_method(ds, public, seed)), *((b, base[b]) for b in baselines))
        rows = []
        for name, m in methods:
            run = run_federated(m, fed, archs, cfg)
            rows.append({"method": name, **accuracy_points(run.frame), **_server_measures(run, planted, name)})
        return pd.DataFrame(rows)


def mixture_cell(study: COSMOSStudy, seed: int, mixture: str) -> pd.DataFrame:
    """COSMOS and COMET with the clients of ``mixture`` (a name of ``mixtures``) at ``seed``:
    ``method``, :func:`accuracy_points`, and COSMOS's ``fit`` and ``purity`` (NaN for COMET)."""
    return _cosmos_and_comet(study, seed, study.mixtures[mixture], None)


def alpha_cell(study: COSMOSStudy, seed: int, alpha: float) -> pd.DataFrame:
    """COSMOS and every model-agnostic baseline (:data:`BASE`) on the default mixture with the
    Dirichlet ``alpha`` at ``seed`` (the same :math:`U`, another partition of the rest):
    ``method``, :func:`accuracy_points`, and COSMOS's ``fit`` and ``purity`` (NaN for the baselines)."""
    return _cosmos_and_comet(study, seed, study.base_mix, alpha, BASE)


def sweep_cell(study: COSMOSStudy, seed: int, setting: str) -> pd.DataFrame:
    """One COSMOS run of a sensitivity ``setting`` (:func:`sweep_label` of a value of ``sweeps``)
    for ``sweep_rounds`` rounds at ``seed``: a smaller :math:`U` is a class-balanced part of the
    default one (:func:`public_part`), fewer clients are kept from the default federation
    (:meth:`COSMOSStudy.fewer_clients`). Columns: ``study``, ``value`` (the value as text),
    :func:`accuracy_points`, ``clusters`` (formed), ``purity`` (against the planted groups) and ``fit``
    (:func:`last_fit`)."""
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        name, value = study.swept(setting)
        public, hidden, fed, planted = study.split(seed)
        if name == "|U| share":
            public = public_part(public, hidden, value / study.public_share)
        if name == "clients":
            fed, planted = study.fewer_clients(fed, planted, value)
        ds = fed.global_test
        archs = study.architectures(study.base_mix, fed.n_clients, ds)
        change = {"λ": dict(lam=value), "T": dict(temperature=value), "rule": dict(rule=value),
                  "clusters": dict(target_clusters=value), "detach": dict(detach_target=value),
                  "server": dict(server_model=study.server_factory(ds, study.small_server))}.get(name, {})
        run = run_federated(study.cosmos_method(ds, public, seed, **change), fed, archs,
                            LoopConfig(rounds=study.sweep_rounds, seed=seed, eval_every=0))
        return pd.DataFrame([{"study": name, "value": str(value), **accuracy_points(run.frame),
                              "clusters": int(run.server.meta["n_groups"]), "purity": group_purity(grouping(run.server), planted),
                              "fit": last_fit(run.server)}])


def exercise_cell(study: COSMOSStudy, seed: int) -> pd.DataFrame:
    """The exercises' runs at ``seed``: the main COSMOS run (evaluated after ``sweep_rounds``
    rounds and at the end; the same training as :func:`main_cell`'s), COSMOS re-clustering every round for ``sweep_rounds`` rounds, and the
    main run's clients deployed with the model of cluster 0.

    Returns
    -------
    DataFrame of one row
        ``fixed_sweep`` and ``fixed`` (the main run's mean accuracy after ``sweep_rounds`` rounds
        and at the end), ``re`` and ``re_purity`` (the re-clustering run's mean accuracy and
        purity), ``changes`` (its rounds whose cluster seeds differ from its first round's),
        ``ari`` (the adjusted Rand index of the two final groupings), ``diam_first``,
        ``diam_last`` and ``diam_round`` (the main run's largest within-cluster distance in its
        first and last rounds, and the last round), ``one_model`` (the mean accuracy with every
        client on cluster 0's model).
    """
    with shared_pretraining(study):  # the clients' pre-training, trained once per process (PRETRAINED)
        public, hidden, fed, planted = study.split(seed)
        ds = fed.global_test
        method = study.cosmos_method(ds, public, seed)
        every = study.sweep_rounds if study.rounds % study.sweep_rounds == 0 else 1  # the two rounds it reads, evaluated
        run = run_federated(method, fed, study.architectures(study.base_mix, study.n_clients, ds),
                            LoopConfig(rounds=study.rounds, seed=seed, eval_every=every))
        public0, hidden0, fed0, planted0 = study.split(seed)
        archs0 = study.architectures(study.base_mix, study.n_clients, fed0.global_test)
        cfg0 = LoopConfig(rounds=study.rounds, seed=seed)
        re_run = run_federated(dataclasses.replace(method, recluster=True), fed0, archs0,
                               dataclasses.replace(cfg0, rounds=study.sweep_rounds))
        re_history = cosmos_history(re_run.server)
        clients = sorted(grouping(run.server))
        history = cosmos_history(run.server)  # the run that clusters once: every round's largest within-cluster distance
        state = run.server  # every client deployed with the model of cluster 0
        wrong = dataclasses.replace(run, server=type(state)(
            arrays={**state.arrays, "groups/labels": torch.zeros_like(state.arrays["groups/labels"])}, meta=dict(state.meta)))
        return pd.DataFrame([{
            "fixed_sweep": accuracy_points(run.frame, study.sweep_rounds)["mean"], "fixed": accuracy_points(run.frame)["mean"],
            "re": accuracy_points(re_run.frame)["mean"], "re_purity": group_purity(grouping(re_run.server), planted0),
            "changes": int(sum(h["seeds"] != re_history[0]["seeds"] for h in re_history)),
            "ari": assignment_agreement(np.array([grouping(run.server)[k] for k in clients]),
                                        np.array([grouping(re_run.server)[k] for k in clients])),
            "diam_first": history[0]["max_diameter"], "diam_last": history[-1]["max_diameter"],
            "diam_round": int(history[-1]["round"]),
            "one_model": accuracy_points(evaluate_deployment(method, wrong, fed0, archs0, cfg0))["mean"]}])


# ---- the pilot ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pilot:
    """The learning rates on pseudo-labels the pilot chose (:func:`pilot_choice`).

    Attributes
    ----------
    rates : dict of str to float
        Each method's rate (those the pilot ran, then the fixed ones).
    picks : dict of str to Comparator
        Per method the pilot ran, the chosen rate's :class:`fedbook.claims.Comparator`.
    scores : dict of str to dict of str to float
        Per candidate rate (``f"{lr:g}"``), each method's pilot score.
    seed, n_clients : int
        The pilot's seed and its clients.
    """

    rates: Mapping[str, float]
    picks: Mapping[str, Comparator]
    scores: Mapping[str, Mapping[str, float]]
    seed: int
    n_clients: int

    def numbers(self, n_clients: int) -> dict:
        """What the prose reads of the pilot (of a federation of ``n_clients``): ``lr_<method>``
        (each rate, as ``f"{lr:g}"``), ``lr_rule`` (each method's pick and scores),
        ``lr_shared`` (whether every method ends with the same rate), ``pilot_federation`` (its
        clients) and ``pilot_seed``."""
        out = {f"lr_{m.lower()}": f"{lr:g}" for m, lr in self.rates.items()}
        out["lr_rule"] = "; ".join(f"{m} {self.picks[m].name} (" + ", ".join(
            f"{lr}: {scores[m]:.1f} %" for lr, scores in self.scores.items()) + ")" for m in self.picks)
        out["lr_shared"] = ("every method ends with the same rate" if len(set(self.rates.values())) == 1 else
                            "the methods do not all end with the same rate")
        out["pilot_federation"] = (f"keeps {self.n_clients} of the {n_clients} clients (the first of each label group's "
                                   "block, their data unchanged), to cut its cost" if self.n_clients < n_clients
                                   else f"runs all {n_clients} clients")
        out["pilot_seed"] = self.seed
        return out


def pilot_choice(pilot: pd.DataFrame, *, n_clients: int, rounds: int, fixed: Mapping[str, float] | None = None) -> Pilot:
    """Each method's learning rate on pseudo-labels from the pilot study's frame (``lr, method,
    seed, mean``, one seed): the candidate with the higher score
    (:func:`fedbook.claims.strongest_baseline`; a tie keeps the first candidate), and the
    ``fixed`` rates of the methods the pilot does not run.

    Examples
    --------
    >>> frame = pd.DataFrame({"lr": [1e-4, 1e-4, 1e-3, 1e-3], "method": ["A", "B", "A", "B"], "seed": 9,
    ...                       "mean": [50.0, 70.0, 60.0, 70.0]})
    >>> p = pilot_choice(frame, n_clients=4, rounds=2, fixed={"C": 1e-4})
    >>> p.rates, p.numbers(4)["lr_rule"]
    ({'A': 0.001, 'B': 0.0001, 'C': 0.0001}, 'A 0.001 (0.0001: 50.0 %, 0.001: 60.0 %); B 0.0001 (0.0001: 70.0 %, 0.001: 70.0 %)')
    """
    (seed,) = set(pilot["seed"])
    scores = {f"{lr:g}": dict(zip(part["method"], part["mean"])) for lr, part in pilot.groupby("lr", sort=False)}
    methods = list(dict.fromkeys(pilot["method"]))
    on = f"pilot seed {seed} ({n_clients} clients, {rounds} rounds)"
    picks = {m: strongest_baseline({lr: [s[m]] for lr, s in scores.items()}, on=on) for m in methods}
    rates = {**{m: float(picks[m].name) for m in methods}, **(fixed or {})}
    return Pilot(rates=rates, picks=picks, scores=scores, seed=int(seed), n_clients=int(n_clients))


def split_epochs(train: TrainConfig) -> tuple[TrainConfig, TrainConfig]:
    """``train`` cut in two phases of ``epochs // 2`` and the rest (at least one each): what a method
    that trains two models or two parts per round takes, so that it trains as many epochs in all as
    a method that trains one.

    Examples
    --------
    >>> [c.epochs for c in split_epochs(TrainConfig(epochs=7))], [c.epochs for c in split_epochs(TrainConfig(epochs=1))]
    ([3, 4], [1, 1])
    """
    first = max(1, train.epochs // 2)
    return dataclasses.replace(train, epochs=first), dataclasses.replace(train, epochs=max(1, train.epochs - first))


def fedavg_bytes(n_parameters: int) -> dict[str, float]:
    """FedAvg's training traffic per client and round with a model of ``n_parameters`` float32
    parameters, ``{"up": ..., "down": ...}`` in bytes: the model down and its update up (the
    messages' few bytes of metadata aside). An accounting identity: no run is needed to know it.

    Examples
    --------
    >>> fedavg_bytes(1000)
    {'up': 4000.0, 'down': 4000.0}
    """
    return {"up": 4.0 * n_parameters, "down": 4.0 * n_parameters}


def planted_groups(n_clients: int, n_groups: int) -> np.ndarray:
    """Each client's planted label group under the grouped Dirichlet split: blocks of clients, in order.

    Examples
    --------
    >>> planted_groups(5, 2).tolist()
    [0, 0, 0, 1, 1]
    """
    return np.concatenate([np.full(len(b), g) for g, b in enumerate(np.array_split(np.arange(n_clients), n_groups))])


def kept_clients(n_clients: int, n_groups: int, n_kept: int) -> np.ndarray:
    """The clients a smaller federation keeps: from each label group's block of
    :func:`planted_groups`, its first clients, as many as the block of ``n_kept`` clients split
    the same way holds (the data of every kept client unchanged).

    Examples
    --------
    >>> kept_clients(20, 5, 10).tolist()
    [0, 1, 4, 5, 8, 9, 12, 13, 16, 17]
    """
    if not n_groups <= n_kept <= n_clients:
        raise ValueError(f"n_kept must lie in [{n_groups}, {n_clients}], got {n_kept!r}")
    blocks = np.array_split(np.arange(n_clients), n_groups)
    sizes = [len(b) for b in np.array_split(np.arange(n_kept), n_groups)]
    return np.concatenate([b[:m] for b, m in zip(blocks, sizes)])


def public_part(public: PublicSet, hidden: np.ndarray, fraction: float) -> PublicSet:
    """A class-balanced part of :math:`U`: of each class (its hidden labels ``hidden``, used only to
    balance), the first ``round(fraction * n_c)`` of its ``n_c`` points in :math:`U`'s order (at
    least one).

    Examples
    --------
    >>> import torch
    >>> u = PublicSet(torch.arange(8.0).reshape(8, 1))
    >>> public_part(u, np.array([0, 1, 0, 1, 0, 1, 0, 1]), 0.5).x.ravel().tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
    keep = np.sort(np.concatenate([np.flatnonzero(hidden == c)[:max(1, int(round(fraction * (hidden == c).sum())))]
                                   for c in np.unique(hidden)]))
    return PublicSet(public.x[torch.as_tensor(keep)].clone(), name=f"{public.name}[{fraction:g}]")


# ---- the frames the chapter reads ------------------------------------------------------------------


def _changes(runs: pd.DataFrame, by: str, reference: pd.DataFrame) -> pd.DataFrame:
    """Each method's mean accuracy in every ``by`` value of ``runs`` minus its own in ``reference``,
    per seed (the seeds of ``runs``): columns ``by``, ``method``, ``seed``, ``change``."""
    parts = []
    for value, part in runs.groupby(by, sort=False):
        for m in part.method.unique():
            there = part[part.method == m].set_index("seed")["mean"]
            base = reference[reference.method == m].set_index("seed")["mean"].loc[there.index]
            parts.append(pd.DataFrame({by: value, "method": m, "seed": there.index, "change": (there - base).to_numpy()}))
    return pd.concat(parts, ignore_index=True)

def tidy(runs: Mapping[str, pd.DataFrame], study: COSMOSStudy, side: Sequence[int]) -> dict[str, pd.DataFrame]:
    """The frames the chapter's tables, claims and prose read, from its studies' frames.

    Parameters
    ----------
    runs : mapping of str to DataFrame
        The studies' frames (:func:`fedbook.study.run_study`): :func:`main_cell`'s ``main``,
        ``curves``, ``bytes``, ``clusters``, ``default`` and ``measures`` on every seed;
        ``homogeneous`` (:func:`homogeneous_cell`) and ``local`` on every seed; ``mixture`` (by
        ``mixture``), ``alpha`` (by ``alpha``) and ``sweep`` (by ``setting``) on the side seeds.
    study : COSMOSStudy
    side : sequence of int
        The side seeds (those of the mixtures, the other :math:`\\alpha` and
        the sweeps).

    Returns
    -------
    dict of str to DataFrame
        ``runs`` with, in place of ``main``, every main run and local training alone (``seed,
        method`` and :func:`accuracy_points`), and: ``side`` (``main`` on the side seeds);
        ``homogeneous``; ``mixtures`` (``mixture, seed, method``, the side seeds: the first
        mixture from the one-architecture runs, the default from the main runs, the others);
        ``alphas`` (``alpha, seed, method``: the default :math:`\\alpha` from the main runs on the
        side seeds, then the others); ``alpha_change`` (``method, seed, change``: per other
        :math:`\\alpha`, the mean accuracy there minus at the default); ``traffic`` (``seed,
        method, up, down, total`` and ``log10_ratio``: :math:`\\log_{10}` of FedAvg's computed
        bytes over the method's); ``sensitivity`` (``study, value, setting, seed``,
        :func:`accuracy_points`, ``clusters``, ``purity``: each swept study's runs and the
        default's, read from the main runs); and one frame per swept setting and per swept study's
        default, named by :func:`sweep_label` (``seed, mean, ...``), what a sensitivity claim reads.
    """
    out = dict(runs)
    main = pd.concat([runs["main"], runs["local"]], ignore_index=True)
    out["main"] = main
    out["side"] = main[main.seed.isin(side)].reset_index(drop=True)
    homogeneous = runs["homogeneous"]
    first = list(study.mixtures)[0]
    pair = main[main.seed.isin(side) & main.method.isin(["COSMOS", "COMET"])]
    mixtures = pd.concat([homogeneous[homogeneous.method == "COSMOS"].assign(mixture=first), runs["mixture"],
                          pair.assign(mixture=study.default_mixture)], ignore_index=True)
    out["mixtures"] = mixtures[mixtures.seed.isin(side)].reset_index(drop=True)
    every = main[main.seed.isin(side) & main.method.isin(["COSMOS", *BASE])]
    alphas = pd.concat([every.assign(alpha=study.alpha), runs["alpha"]], ignore_index=True)
    out["alphas"] = alphas
    out["alpha_change"] = _changes(runs["alpha"], "alpha", every)
    # each mixture's change against the default one, per method and seed (the robustness row reads COSMOS's against COMET's)
    out["mixture_change"] = _changes(runs["mixture"], "mixture", pair)
    # each baseline's collaboration: its mean accuracy minus local training alone's, per seed (every seed local ran on)
    local = runs["local"].set_index("seed")["mean"]
    out["collaboration"] = pd.concat([pd.DataFrame({"method": b, "seed": local.index, "gain": (
        main[(main.method == b)].set_index("seed")["mean"].loc[local.index] - local).to_numpy()}) for b in ("FedMD", "COMET")],
        ignore_index=True).set_index(["seed", "method"])  # the units: a seed and a baseline
    traffic = runs["bytes"].assign(total=runs["bytes"].up + runs["bytes"].down)
    out["traffic"] = traffic.assign(log10_ratio=np.log10(fedavg_total(runs) / traffic.total))
    out["sensitivity"] = sensitivity(runs, study, side)
    for setting, part in out["sensitivity"].groupby("setting", sort=False):
        out[setting] = part.sort_values("seed").reset_index(drop=True)
    return out


def fedavg_total(runs: Mapping[str, pd.DataFrame]) -> float:
    """FedAvg's training bytes per client and round with the one-architecture client model
    (:func:`fedavg_bytes` of the first seed's ``params``), both directions."""
    b = fedavg_bytes(int(runs["measures"]["params"].iloc[0]))
    return float(b["up"] + b["down"])


def sensitivity(runs: Mapping[str, pd.DataFrame], study: COSMOSStudy, side: Sequence[int]) -> pd.DataFrame:
    """Each swept study's runs with the default setting's (:func:`main_cell`'s ``default`` on the
    side seeds, relabelled as the study at its default value): ``study, value, setting, seed``,
    :func:`accuracy_points`, ``clusters``, ``purity``; for :math:`\\lambda` the default's rows
    first, for the others last."""
    sweep = runs["sweep"]
    default = runs["default"][runs["default"].seed.isin(side)]
    blocks = []
    for name in study.sweeps:
        value = study.sweep_defaults[name]
        rows = default.assign(study=name, value=str(value), setting=sweep_label(name, value))
        own = sweep[sweep.study == name]
        blocks += [rows, own] if name == "λ" else [own, rows]
    columns = ["study", "value", "setting", "seed", *METRICS, "clusters", "purity", "fit",
               *[c for c in default.columns if str(c).startswith("kept_")]]
    return pd.concat(blocks, ignore_index=True).reindex(columns=columns)


# ---- tables and the figure --------------------------------------------------------------------------

def _metric_table(frame: pd.DataFrame, order: Sequence[str]) -> pd.DataFrame:
    return pd.concat({m: seed_table(frame, "method", None, m, digits=1, bounds=(0, 100))[m] for m in METRICS},
                     axis=1).reindex(order)


def main_table(F: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The main runs' last round (Figure 2 and Table 2): per method of :data:`MAIN_METHODS`, each
    of :data:`METRICS` as ``mean ± half-width`` over the seeds (local training alone over the side
    seeds: it is summarised apart, since :func:`fedbook.intervals.seed_table` pairs a table's cells
    by seed)."""
    main = F["main"]
    parts = (main[main.method != "Local"], main[main.method == "Local"])
    return pd.concat([_metric_table(part, list(part.method.unique())) for part in parts if len(part)]
                     ).reindex(list(MAIN_METHODS)).rename_axis("method")


def homogeneous_table(F: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One architecture (Table 7): COSMOS and :data:`PFL`, each of :data:`METRICS` over the seeds."""
    return _metric_table(F["homogeneous"], ["COSMOS", *PFL]).rename_axis("method")


def mixture_table(F: Mapping[str, pd.DataFrame], study: COSMOSStudy) -> pd.DataFrame:
    """COSMOS and COMET per mixture of architectures (Figure 3 and Table 3), the one-architecture
    mixture, the default and the others, over the side seeds."""
    order = [list(study.mixtures)[0], study.default_mixture, *list(study.mixtures)[1:]]
    table = seed_table(F["mixtures"], "method", "mixture", "mean", digits=1, bounds=(0, 100))
    table = table.reindex(columns=order)
    table.columns.name = None
    return table.rename_axis("method")


def alpha_table(F: Mapping[str, pd.DataFrame], study: COSMOSStudy) -> pd.DataFrame:
    """COSMOS and COMET per Dirichlet :math:`\\alpha` (Tables 5-6), the default first, over the side seeds."""
    alphas = F["alphas"].assign(setting=lambda f: "α = " + f.alpha.astype(float).map("{:g}".format))
    order = list(dict.fromkeys(alphas.setting))
    table = seed_table(alphas, "method", "setting", "mean", digits=1, bounds=(0, 100)).reindex(columns=order)
    table.columns.name = None
    return table.rename_axis("method")


def traffic_table(F: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Bytes per client and round of training traffic (Table 4): each model-agnostic method's mean
    over the seeds, FedAvg's computed (:func:`fedavg_bytes`), and FedAvg's over each."""
    comm = F["bytes"].groupby("method")[["up", "down"]].mean()
    comm["total"] = comm["up"] + comm["down"]
    comm.loc[FEDAVG, ["up", "down"]] = list(fedavg_bytes(int(F["measures"]["params"].iloc[0])).values())
    comm["total"] = comm["up"] + comm["down"]
    comm = comm.reindex(["COSMOS", *BASE, FEDAVG])
    comm["FedAvg ÷ this"] = float(comm.loc[FEDAVG, "total"]) / comm["total"]
    return comm.rename_axis("method")


def paper_scale() -> pd.DataFrame:
    """The communication arithmetic at the paper's scale (no run): CIFAR-100's ResNet-18 and
    MobileNetV2 clients (fedlib's models), their parameter bytes per round (float32, both
    directions) against :math:`|U| \\times C` float32 pseudo-labels both directions
    (:data:`U_PAPER`, :data:`C_PAPER`)."""
    label_bytes = 2 * U_PAPER * C_PAPER * 4
    scale = pd.DataFrame([{"client model": name, "parameters": count_parameters(build_model(arch, in_channels=3, n_classes=C_PAPER, seed=0))}
                          for name, arch in (("ResNet-18", "resnet18"), ("MobileNetV2", "mobilenet_v2"))]).set_index("client model")
    scale["parameter bytes per round"] = 2 * 4 * scale["parameters"]
    scale["pseudo-label bytes per round"] = label_bytes
    scale["parameters ÷ pseudo-labels"] = scale["parameter bytes per round"] / label_bytes
    return scale


def sensitivity_table(F: Mapping[str, pd.DataFrame], study: COSMOSStudy) -> pd.DataFrame:
    """The sensitivity runs (Figures 7-9): per study and value, the mean accuracy over the side
    seeds (``mean ± half-width``), the clusters formed and their purity (means); the default
    value marked."""
    blocks = []
    for name in study.sweeps:
        part = F["sensitivity"][F["sensitivity"].study == name]
        cell = seed_table(part, "value", None, "mean", digits=1)
        extra = part.groupby("value")[["clusters", "purity"]].mean()
        blocks.append(cell.join(extra).assign(study=name).reset_index())
    table = pd.concat(blocks, ignore_index=True)[["study", "value", "mean", "clusters", "purity"]]
    table["value"] = table.apply(lambda r: f"{r['value']} (default)" if r["value"] == str(study.sweep_defaults[r["study"]])
                                 else r["value"], axis=1)
    return table


def plot_curves(curves: pd.DataFrame, *, level: float = 0.95, ax=None):
    """Mean client accuracy per round, one line per method (the mean over the seeds), the band its
    Student's t interval (:func:`fedbook.intervals.paired_interval` against 0; none with one seed).
    ``curves``: ``seed, method, round, mean``. Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        ax = plt.subplots(figsize=(6.4, 3.6))[1]
    for name, g in curves.groupby("method", sort=False):
        by_round = g.groupby("round")["mean"]
        mean = by_round.mean()
        half = by_round.apply(lambda v: paired_interval(v.to_numpy(), level=level).high - v.mean() if len(v) > 1 else 0.0)
        ax.plot(mean.index, mean.values, marker="o", label=name)
        ax.fill_between(mean.index, mean - half, mean + half, alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel("mean client accuracy (%)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(frameon=False)
    ax.figure.tight_layout()
    return ax


# ---- the numbers the prose reads --------------------------------------------------------------------

def parameters(P, study: COSMOSStudy, side: Sequence[int]) -> dict:
    """The chapter's settings as its prose quotes them (``P``: :func:`fedbook.page.setup`'s
    settings): the seeds, the federation, the methods' settings and epochs
    (``COSMOSStudy.pfl_train``'s matched epochs and their split, :func:`split_epochs`), the
    consistency term's augmentations (:class:`fedlib.algorithms.fedmd.PublicDistillation`'s)."""
    first, second = split_epochs(study.pfl_train)
    return {
        "n_seeds": P.n_seeds, "n_side": len(side), "n_clients": P.n_clients, "rounds": P.rounds,
        "sweep_rounds": P.sweep_rounds, "n_images": len(load_dataset("uci8")), "n_groups": P.n_groups, "alpha": P.alpha,
        "pool_pct": 100 * P.pool_fraction, "public_pct": 100 * P.public_share, "lam": P.lam, "temperature": P.temperature,
        "target_clusters": P.target_clusters, "comet_k": P.comet_k, "pretrain_epochs": P.pretrain_epochs,
        "local_epochs": P.local_epochs, "server_epochs": P.server_epochs, "lr_true": P.lr_true, "sgd_lr": P.sgd_lr,
        "matched_epochs": study.pfl_train.epochs, "split_first": first.epochs, "split_second": second.epochs,
        "ft_epochs": study.finetune.epochs, "radius_pct": 100 * (study.radius or 0.0),
        "data_label": DATA_LABELS[P.dataset], "weak_mix": " + ".join(P.mixtures[list(P.mixtures)[1]]),
        "c_paper": C_PAPER, "u_paper": f"{U_PAPER:,}"}


def numbers(F: Mapping[str, pd.DataFrame], study: COSMOSStudy, *, n_classes: int) -> dict:
    """What the prose reads of the runs (``F``: :func:`tidy`'s frames; ``n_classes`` of the data).

    The first seed's sizes (``test_size``, ``train_size``, ``n_public``, ``one_image``: one test
    image of a client in points, ``cnn_params``); the main runs' means (``cosmos_mean``,
    ``cosmos_own_mean``, ``best_base`` and ``best_base_mean``: the baseline with the highest mean,
    ``local_mean``); COSMOS's clusters (``purity``, ``comet_purity``, ``n_formed``, ``b0_first``);
    the traffic (``comm_ratio``, ``fedavg_bytes``, ``cosmos_bytes``, ``deploy_bytes``,
    ``deploy_rounds``) and the paper's scale (``paper_ratio_resnet``, ``paper_ratio_mobilenet``).
    The sentences that depend on the numbers: ``fedct_reading`` (empty unless FedCT falls near
    chance), ``diam_text`` (the largest within-cluster distance over :math:`2B_0`), ``paper_reading``
    (how many orders of magnitude the paper's models reach), ``lam_reading`` (which λ scores
    highest) and ``detach_reading`` (the detach's mean, where it is swept).
    """
    measures, main = F["measures"], F["main"]
    mm = main.groupby("method")[list(METRICS)].mean()
    best_base = mm.loc[list(BASE), "mean"].idxmax()  # named to read the table; the claims compare with each baseline
    fedct_mean, chance = float(mm.loc["FedCT", "mean"]), 100.0 / n_classes
    clusters = F["clusters"]
    positive = clusters[clusters["b0"] > 0]  # B0 = 0 (every client alone) has no ratio
    comm = traffic_table(F)
    fedavg, cosmos = float(comm.loc[FEDAVG, "total"]), float(comm.loc["COSMOS", "total"])
    deploy = float(np.mean(measures["deploy_bytes"].to_numpy()))
    scale = paper_scale()
    orders = np.log10(scale["parameters ÷ pseudo-labels"])
    sweeps, lam = study.sweeps, study.lam
    lams = {v: float(F[sweep_label("λ", v)]["mean"].to_numpy().mean()) for v in [lam, *sweeps["λ"]]}
    best_lam = max(lams, key=lams.get)
    tried = list(sweeps.get("λ", []))
    out = {
        "test_size": float(measures["test_size"].iloc[0]), "train_size": float(measures["train_size"].iloc[0]),
        "n_public": int(measures["n_public"].iloc[0]), "one_image": 100 / float(measures["test_size"].iloc[0]),
        "cosmos_mean": float(mm.loc["COSMOS", "mean"]), "cosmos_own_mean": float(mm.loc["COSMOS (client models)", "mean"]),
        "best_base": best_base, "best_base_mean": float(mm.loc[best_base, "mean"]), "local_mean": float(mm.loc["Local", "mean"]),
        "fedct_reading": fedct_reading(measures, fedct_mean, float(mm.loc["FedCT", "worst"]), chance, study.rounds),
        "server_fit": float(np.mean(measures["server_fit"].to_numpy())),
        "ball_pct": 100 * float(np.mean(measures["ball"].to_numpy())),
        "shift_pct": 100 * float(np.mean(measures["shift_ratio"].to_numpy())),
        "ball_nonconvex_pct": 100 * float(np.mean(measures["ball_nonconvex"].to_numpy())),
        "purity": float(np.mean(measures["purity"].to_numpy())),
        "comet_purity": float(np.mean(measures["comet_purity"].to_numpy())),
        "n_formed": float(clusters[clusters["round"] == 1]["n_clusters"].mean()),
        "b0_first": float(clusters[clusters["round"] == 1]["b0"].mean()),
        "diam_text": f"the largest within-cluster distance was at most {(positive['max_diameter'] / (2 * positive['b0'])).max():.2f} "
                     "× 2B₀ over every round and seed (Algorithm 1 guarantees ≤ 1 in the round it clusters)" if len(positive) else
                     "every client formed a cluster of its own (B₀ = 0), so no within-cluster distance arises",
        "comm_ratio": fedavg / cosmos, "fedavg_bytes": format_bytes(fedavg), "cosmos_bytes": format_bytes(cosmos),
        "cnn_params": int(measures["params"].iloc[0]), "deploy_bytes": format_bytes(deploy), "deploy_rounds": deploy / fedavg,
        "paper_ratio_resnet": float(scale.loc["ResNet-18", "parameters ÷ pseudo-labels"]),
        "paper_ratio_mobilenet": float(scale.loc["MobileNetV2", "parameters ÷ pseudo-labels"]),
        "paper_reading": "neither reaches one order of magnitude" if (orders < 1).all() else
        "only ResNet-18 reaches one order of magnitude, and neither two" if (orders >= 1).any() and (orders < 2).all() and (orders < 1).any()
        else "both reach one order of magnitude" if (orders < 2).all() else "at least one reaches two orders of magnitude",
        "lam_reading": (f"the paper's λ = {lam:g} scores the highest mean of the values tried" if best_lam == lam else
                        f"λ = {best_lam:g} scores highest ({lams[best_lam]:.1f} % against {lams[lam]:.1f} % at the paper's "
                        f"λ = {lam:g}; the claims table says whether the difference exceeds the seed-to-seed spread)") +
                       ("; λ = 0, the regulariser off, is the only other value tried, so this says whether the regulariser helps, "
                        "not whether λ = 5 is the best of a range of values" if tried and all(v == 0 for v in tried) else ""),
    }
    if "detach" in sweeps:
        on, off = (float(F[sweep_label("detach", v)]["mean"].to_numpy().mean()) for v in (True, False))
        out["detach_reading"] = (f"the authors' code's variant (the consistency target detached) reaches {on:.1f} % against "
                                 f"{off:.1f} % for the paper's objective")
    else:
        out["detach_reading"] = ("this profile does not run the authors' code's variant (the consistency target detached: no "
                                 "claim reads it; the `paper` profile runs it)")
    return out


def fedct_reading(measures: pd.DataFrame, fedct_mean: float, fedct_worst: float, chance: float, rounds: int) -> str:
    """FedCT's vote dynamics in words, from the main runs' ``measures`` (:func:`vote_dynamics`'s
    columns ``vote_<accuracy|top_class|top_count>_<round>`` per seed): the first seed's vote
    accuracy after round 1 and, per round, how many of the public points its most frequent class
    takes; then the mean over the seeds of the first vote's accuracy and of the last vote's top share.

    Examples
    --------
    >>> m = pd.DataFrame({"vote_accuracy_1": [41.5, 50.0], "vote_top_class_1": [5, 3], "vote_top_count_1": [104, 90],
    ...                   "vote_accuracy_2": [10.0, 12.0], "vote_top_class_2": [5, 3], "vote_top_count_2": [359, 300],
    ...                   "vote_n_public": [359, 359], "n_public": [359, 359], "train_size": [60.0, 60.0]})
    >>> "U is 6.0 times a client's data" in fedct_reading(m, 12.0, 0.0, 10.0, 2)
    True
    >>> fedct_reading(m, 12.0, 0.0, 10.0, 2).split(": ")[1].split(";")[0]
    'its majority vote labels 41.5 % of the public points right after round 1, and its most frequent class (class 5) takes 104, then 359 of the 359 public points in rounds 1 to 2'
    """
    first = measures.iloc[0]
    counts = ", then ".join(str(int(first[f"vote_top_count_{r}"])) for r in range(1, rounds + 1) if f"vote_top_count_{r}" in first)
    top1 = float(np.mean(measures["vote_accuracy_1"].to_numpy()))
    last = max(r for r in range(1, rounds + 1) if f"vote_top_count_{r}" in first)
    share = 100 * float(np.mean(measures[f"vote_top_count_{last}"].to_numpy() / measures["vote_n_public"].to_numpy()))
    return (f" FedCT reaches {fedct_mean:.1f} % on average (the worst client {fedct_worst:.1f} %; chance is {chance:.0f} %). "
            f"On the first seed: its majority vote labels {float(first['vote_accuracy_1']):.1f} % of the public points right "
            f"after round 1, and its most frequent class (class {int(first['vote_top_class_1'])}) takes {counts} of the "
            f"{int(first['vote_n_public'])} public points in rounds 1 to {last}; over the seeds the first vote is "
            f"{top1:.1f} % right and the last vote's most frequent class takes {share:.0f} % of the public points. " + (
                "Each client trains on its own data and the vote-labelled U together (FedCT's Algorithm 1), and U is "
                f"{int(measures['n_public'].iloc[0]) / float(measures['train_size'].iloc[0]):.1f} times a client's data, so a vote drawn from clients that each know one label group pulls every client toward "
                "one class: the collapse is the method under this partition, not a failure of the run." if share > 50 else
                "The vote does not collapse onto one class here."))


TESTABLE_IF = {
    "the baselines' collaboration beats local training": (
        "a setting where a client's own data teach it less than the others' labels on U can: fewer training images per "
        "client (the same data over more clients), clients whose test distribution reaches beyond their training classes, "
        "or a public set that carries more than the clients already know. Our pilot tried the baselines' learning "
        "rate only, not their digest epochs as it tried COSMOS's server steps: a second pilot grid of three baselines "
        "would add about as many runs as the chapter's side studies, beyond its time budget; their digest epochs and "
        "the share of U are the next settings to try"),
    "server reproduces its targets": "a larger server budget (more optimizer steps, or a larger server) on the pilot seed",
    "clusters match the planted groups": "clients with more data per label group, or a target number of clusters at the "
                                         "planted one, so that Algorithm 1's hard labels separate the groups",
    "the consistency term keeps the objective convex": "a smaller radius (a ball whose two-sided term leaves the "
                                                       "objective convex at every random point), or a smaller λ",
}
"""What would make a row that a regime check of the chapter fails testable, by the check's key (read by
:func:`fedbook.claims.regime_reading`)."""


_LOCAL_CAVEAT = ("the corollary speaks only of sufficiently large n and T, and ours are small, so this verdict cannot refute "
                 "it; it says only that at this n and T ")
LOCAL_READINGS = {
    HOLDS: "COSMOS beats local training alone already at our small n and T",
    SMALLER: _LOCAL_CAVEAT + "COSMOS's edge over its clients' own training, if it has one, is smaller than the declared m",
    OPPOSITE: _LOCAL_CAVEAT + "COSMOS does worse than its clients' own training",
    INCONCLUSIVE: _LOCAL_CAVEAT + "the seeds do not show COSMOS beating its clients' own training by the declared m",
    UNTESTABLE_RESOLUTION: "the pooled test set is too small at this profile to resolve the declared m, so the row tests "
                           "nothing here, neither the corollary nor COSMOS against its clients' own training at this n and T",
    UNTESTABLE_SETTING: "a regime check of the row fails, so this setting cannot test COSMOS against its clients' own "
                        "training (and, with its small n and T, could not test the corollary)",
}
"""What the verdict on Corollary 5.13 (the ``local`` row) says at this scale: one sentence per verdict
of :data:`fedbook.claims.VERDICTS`, "does not hold" split into its two kinds
(:data:`fedbook.claims.SHORTFALLS`)."""


def local_reading(result: ClaimResult) -> str:
    """What the ``local`` row's result says of Corollary 5.13 at this scale (:data:`LOCAL_READINGS`,
    read by the verdict, or by the kind of a "does not hold").

    Examples
    --------
    >>> from fedbook.claims import effect, evaluate
    >>> c = Claim("local", "q", "s", "accuracy, points", "greater", effect("points"), resolution=0.1)
    >>> local_reading(evaluate(c, [-3.0, -3.1, -2.8])).endswith("COSMOS does worse than its clients' own training")
    True
    >>> local_reading(evaluate(c, [0.2, 0.3, 0.25])).endswith("is smaller than the declared m")
    True
    """
    return LOCAL_READINGS[result.outcome]


def verdicts(report: Mapping[str, ClaimResult], claims: Sequence[Claim], *, comm_ratio: float) -> dict:
    """What the prose reads of the claims report (``report``: :func:`fedbook.page.claims_report`'s
    results of ``claims``): each discussed claim's verdict as the table shows it (``<key>_verdict``,
    the key's ``-`` as ``_``; ``own_verdict`` for ``beats-own``:
    :meth:`fedbook.claims.ClaimResult.verdict_text`, with the kind of a "does not hold" or what
    makes a row untestable), the intervals and binding baselines of ``beats``, ``homogeneous``,
    ``local`` and ``alpha-gain``; and the sentences that depend on them: ``local_reading`` (what
    the verdict on Corollary 5.13 says at this scale, :func:`local_reading`), ``comm_reading``
    (``comm_ratio``: FedAvg's bytes over COSMOS's, below 10 or not) and ``undecided_text`` (the
    declared rows this profile does not decide, each with the first part of its substitution when
    it says why, else that its sweep is not run)."""
    out = {"beats_verdict": report["beats"].verdict_text(), "beats_interval": report["beats"].interval.format(1),
           "beats_binding": report["beats"].binding, "own_verdict": report["beats-own"].verdict_text(),
           "comm_verdict": report["comm"].verdict_text()}
    for key in ("homogeneous", "local", "alpha-gain", "mixtures", "mixtures-edge"):
        out[f"{key.replace('-', '_')}_verdict"] = report[key].verdict_text()
    undecided = [c for c in claims if c.key not in report]  # declared rows this profile does not run
    out.update({
        "homog_binding": report["homogeneous"].binding, "homog_interval": report["homogeneous"].interval.format(1),
        "local_interval": report["local"].interval.format(1),
        "local_reading": local_reading(report["local"]),
        "alpha_interval": report["alpha-gain"].interval.format(1),
        "comm_reading": "with models this small the pseudo-label matrix is about as large as the model" if comm_ratio < 10
        else "the pseudo-label matrix is an order of magnitude or more smaller than the model",
        "undecided_text": "This profile leaves out of the table, undecided, the declared rows " + "; ".join(
            f"“{c.key}” (" + (c.substitution.split("; ")[0] if "not decided here" in c.substitution else
                              "its sweep is not run at this profile") + ")" for c in undecided) + "." if undecided else
        "This profile decides every declared row."})
    return out


def exercise_numbers(exercises: pd.DataFrame) -> dict:
    """What the exercises' worked solutions read of :func:`exercise_cell`'s row: ``ex1_fixed``,
    ``ex1_re``, ``ex1_re_purity``, ``ex1_changes``, ``ex1_ari``, ``ex1_diam_first``,
    ``ex1_diam_last``, ``ex1_diam_round``, ``ex2_one_model``, ``ex2_fixed``, and the sentences
    that depend on them: ``ex1_reading`` (whether the two final groupings agree, adjusted Rand
    index above 0.99), ``ex1_diam_reading`` (whether the largest within-cluster distance shrank)
    and ``ex2_reading`` (whether one cluster's model costs more than 10 points)."""
    r = exercises.iloc[0]
    first, last = float(r["diam_first"]), float(r["diam_last"])
    fixed, one = float(r["fixed"]), float(r["one_model"])
    return {
        "ex1_fixed": float(r["fixed_sweep"]), "ex1_re": float(r["re"]), "ex1_re_purity": float(r["re_purity"]),
        "ex1_changes": int(r["changes"]), "ex1_ari": float(r["ari"]),
        "ex1_reading": "the final re-clustering finds the same groups as the first one (the seeds may change inside a group)"
        if r["ari"] > 0.99 else "the final re-clustering differs from the first one",
        "ex1_diam_first": first, "ex1_diam_last": last, "ex1_diam_round": int(r["diam_round"]),
        "ex1_diam_reading": "every client formed a cluster of its own, so there is no within-cluster distance to shrink"
        if first == 0 else
        "it shrank, as distilling on the cluster's labels, which pulls a cluster's members together, would predict (one seed, "
        "and the largest distance, not the typical one)" if last < first else
        "it did not shrink: the pull of the cluster's labels on its members does not show in this measure here (one seed, and "
        "the largest distance, not the typical one)",
        "ex2_one_model": one, "ex2_fixed": fixed,
        "ex2_reading": "a cluster model knows its own label group's classes and little else, because its targets come from "
        "clients that hold those classes only: the personalization is the clustering" if fixed - one > 10 else
        "one cluster's model serves the other clusters nearly as well here: the clusters matter less than the server's training"}


__all__ = ["BALL_IMAGES", "BALL_POINTS", "PRETRAINED", "shared_pretraining", "TESTABLE_IF", "ball_convexity", "fit_at", "VoteRecorder", "fedct_reading", "last_fit", "server_choice", "server_pilot_cell", "vote_dynamics", "BASE", "C_PAPER", "DATA_LABELS", "FEDAVG", "FT_EPOCHS", "LOCAL_READINGS", "MAIN_METHODS", "METRICS", "PFL",
           "PSEUDO_BATCH", "PSEUDO_LR_METHODS", "STUDIES", "U_PAPER", "COSMOSStudy", "Pilot", "accuracy_points", "alpha_cell",
           "alpha_table", "exercise_cell", "exercise_numbers", "fedavg_bytes", "fedavg_total", "homogeneous_cell",
           "homogeneous_table", "kept_clients", "lambda_note", "local_cell", "local_reading", "main_cell", "main_table",
           "matched_epochs", "mixture_cell", "mixture_table", "numbers", "paper_scale", "parameters", "pilot_cell",
           "pilot_choice", "planted_groups", "plot_curves", "public_part", "sensitivity", "sensitivity_table", "split_epochs",
           "sweep_cell", "sweep_label", "sweep_reads", "sweep_settings", "temperature_note", "tidy", "training_bytes",
           "traffic_table", "verdicts"]
