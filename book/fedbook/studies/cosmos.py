r"""COSMOS's experiments: every method run per seed on the paper's partition, and the sensitivity
runs (the chapter *COSMOS: can pseudo-labels alone personalize clients of different
architectures?*, ``notebooks/cosmos_experiments.py``).

From COSMOS (Ge, Yeoh, Zhang and Vorobeychik, "COSMOS: Model-Agnostic Personalized Federated
Learning with Clustered Server Models and Pseudo-Label-Only Communication", arXiv:2605.11165),
Section 6 and Appendices C-D: Figure 2 and Table 2 (COSMOS against FedMD, FedCT and COMET on
clients of mixed architectures), Figure 3 and Table 3 (mixtures of architectures), Table 7 (one
architecture, against parameter sharing), Table 4 (communication), Tables 5-6 (the Dirichlet
:math:`\alpha`), Figures 7-9 (sensitivity) and Corollary 5.13 (local training alone,
:class:`fedlib.algorithms.cosmos.LocalOnly`).

:class:`COSMOSStudy` holds what is run; :meth:`COSMOSStudy.run` runs every item of
:meth:`COSMOSStudy.items` and returns a :class:`StudyResults`, whose tidy rows
(:func:`accuracy_points` of every run, in points) the chapter reads per seed with
:class:`fedbook.claims.SeedValues` and, for the sensitivity runs, :class:`Sensitivity`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from fedlib.algorithms import COMET, COSMOS, Ditto, FedBABU, FedCT, FedMD, FedRep
from fedlib.algorithms.cosmos import LocalOnly, cosmos_history
from fedlib.algorithms.fedmd import grouping
from fedlib.clustering import group_purity
from fedlib.data import ArrayDataset
from fedlib.data import load_dataset
from fedlib.distill import PublicSet, make_public_set
from fedlib.federation import Federation, make_federation
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.messages import DOWN, UP
from fedlib.metrics import protocol_summary
from fedlib.models import ClientArchitectures, build_model
from fedbook.parallel import map_parallel
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig

KINDS = ("main", "homogeneous", "mixture", "alpha", "sweep")
"""The items of a study (:meth:`COSMOSStudy.items`): the four model-agnostic methods and local
training alone on the default mixture; COSMOS (and COMET) and the parameter-sharing methods with
one architecture; COSMOS and COMET on another mixture; COSMOS and COMET at another Dirichlet
:math:`\\alpha`; one COSMOS run of a sensitivity setting."""

STUDIES = ("λ", "T", "rule", "clusters", "|U| share", "clients", "server", "detach")
"""The sensitivity studies a study can sweep (the ``sweeps`` of :class:`COSMOSStudy`)."""

PSEUDO_LR_METHODS = ("COSMOS", "FedMD", "FedCT", "COMET")
"""The methods that may take a learning rate on pseudo-labels of their own (the ``pseudo_lr`` of
:class:`COSMOSStudy`)."""


def sweep_label(study: str, value) -> str:
    """The name of one swept value in a claim's comparators: ``"λ = 0.5"``, ``"rule = median"``.

    Examples
    --------
    >>> sweep_label("λ", 0.5), sweep_label("rule", "median")
    ('λ = 0.5', 'rule = median')
    """
    return f"{study} = {value:g}" if isinstance(value, (int, float, np.integer, np.floating)) else f"{study} = {value}"


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


@dataclass
class StudyResults:
    """What :meth:`COSMOSStudy.run` computed.

    Attributes
    ----------
    rows : DataFrame
        One row per run (and per deployment): ``study, setting, seed, method`` and
        :func:`accuracy_points`; a sensitivity run adds ``clusters`` and ``purity``.
    curves : DataFrame
        ``seed, method, round, mean``: the main runs' mean client accuracy per round, in points.
    nbytes : DataFrame
        ``seed, method, up, down``: training bytes per client and round (:func:`training_bytes`)
        of the main runs (FedAvg's are no run: :func:`fedavg_bytes`).
    clusters : DataFrame
        ``seed`` and COSMOS's clustering record per round of the main runs
        (:func:`fedlib.algorithms.cosmos.cosmos_history`, less the seeds).
    main : list of dict
        Per seed, what a main item measured besides: ``purity`` and ``comet_purity`` (against the
        planted groups), ``deploy_bytes`` (a cluster model's evaluation message), ``n_public``,
        ``test_size``, ``train_size`` (mean local split sizes), ``params`` (the first mixture's
        client model's parameters) and ``first`` (COSMOS's run and method on the study's first
        seed, else ``None``).
    seconds : float
        The runs' wall-clock seconds, summed over the items.
    """

    rows: pd.DataFrame
    curves: pd.DataFrame
    nbytes: pd.DataFrame
    clusters: pd.DataFrame
    main: list[dict] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class COSMOSStudy:
    """What the chapter runs for every seed.

    The headline items (``"main"`` and ``"homogeneous"``) run on every seed; the others (the
    mixtures, the other :math:`\\alpha` and the sensitivity runs) on the first ``side_seeds``.
    The sensitivity runs' default setting is no run of its own: a main COSMOS run is evaluated
    every round, and its scores after ``sweep_rounds`` rounds are those of the default setting
    (the rounds' random streams do not depend on how many rounds follow).

    Parameters
    ----------
    dataset : str
        The data set's name (:func:`fedlib.data.load_dataset`), with ``n_samples`` and ``cifar_root``.
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
        runs (a headline item), the others run COSMOS and COMET.
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
    first_seed : int
        The seed whose COSMOS run is kept (:attr:`StudyResults.main`'s ``first``).
    alphas : sequence of float
        The other Dirichlet :math:`\\alpha` at which COSMOS and COMET run on the default mixture.
    side_seeds : int or None
        How many of the first seeds run the items that are not headline items (None: every seed).
    cifar_root : str or None
    pseudo_lr : mapping of str to float
        A method's own learning rate on pseudo-labels (:data:`PSEUDO_LR_METHODS`): its clients'
        distillation and, for COSMOS, its server's; a method not named takes ``client_train``'s
        ``distill`` rate (and COSMOS ``server_train``'s). Local training alone distils nothing.
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
    sweeps: Mapping[str, Sequence]
    first_seed: int
    alphas: Sequence[float] = ()
    side_seeds: int | None = None
    cifar_root: str | None = None
    pseudo_lr: Mapping[str, float] = field(default_factory=dict)

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

    @property
    def sweep_defaults(self) -> dict:
        """Each sensitivity study's default value: the main runs' setting."""
        return {"λ": self.lam, "T": self.temperature, "rule": "mean", "clusters": self.target_clusters,
                "|U| share": self.public_share, "clients": self.n_clients, "server": "default", "detach": False}

    def side(self, seeds: Sequence[int]) -> list[int]:
        """The seeds of the items that are not headline items: the first ``side_seeds`` of ``seeds``."""
        return list(seeds) if self.side_seeds is None else list(seeds)[:self.side_seeds]

    def items(self, seeds: Sequence[int]) -> list[tuple[str, object, int]]:
        """Every run of the study, ``(kind, key, seed)`` (:data:`KINDS`): on every seed the main
        runs (key: whether the seed is a :meth:`side` seed, whose main item also runs local
        training alone and gives the sensitivity default's row) and the one-architecture runs
        (key: the mixture); on the side seeds each other mixture,
        each other :math:`\\alpha` and each sensitivity setting other than the default."""
        side = self.side(seeds)
        one = list(self.mixtures)[0]
        items = [("main", s in side, s) for s in seeds]
        items += [("homogeneous", one, s) for s in seeds]
        items += [("mixture", name, s) for name in list(self.mixtures)[1:] for s in side]
        items += [("alpha", a, s) for a in self.alphas for s in side]
        items += [("sweep", (study, v), s) for study, values in self.sweeps.items() for v in values for s in side]
        return items

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
                  temperature=self.temperature, lam=self.lam, target_clusters=self.target_clusters, seed=run_seed,
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

    def run_item(self, item: tuple[str, object, int]) -> dict:
        """One item of :meth:`items`: ``rows``, ``curves``, ``bytes``, ``clusters`` (lists) and
        ``seconds``; a main item adds what :attr:`StudyResults.main` lists."""
        kind, key, s = item
        out = {"rows": [], "curves": [], "bytes": [], "clusters": []}
        t0 = time.perf_counter()
        if kind == "main":
            public, hidden, fed, planted = self.split(s)
            ds = fed.global_test
            archs = self.architectures(self.base_mix, self.n_clients, ds)
            cfg = LoopConfig(rounds=self.rounds, seed=s, eval_every=1)
            methods = {"COSMOS": self.cosmos_method(ds, public, s), **self.baselines(public, s)}
            for name, m in methods.items():
                run = run_federated(m, fed, archs, cfg)
                out["rows"].append({"study": "main", "setting": "default", "seed": s, "method": name, **accuracy_points(run.frame)})
                curve = run.curve("pooled")  # the clients' pooled scores, as the table
                out["curves"].append(pd.DataFrame({"seed": s, "method": name, "round": curve.index, "mean": 100 * curve.values}))
                out["bytes"].append({"seed": s, "method": name, **training_bytes(run, self.n_clients, self.rounds)})
                if name == "COSMOS":  # the paper's protocol: each evaluated client downloads its cluster model
                    led = run.ledger.to_frame()
                    out["deploy_bytes"] = float(led[led["kind"] == "eval:cluster_model"]["bytes"].mean())
                    own = evaluate_deployment(dataclasses.replace(m, deploy_model="client"), run, fed, archs, cfg)
                    out["rows"].append({"study": "main", "setting": "default", "seed": s, "method": "COSMOS (client models)",
                                        **accuracy_points(own)})
                    for h in cosmos_history(run.server):
                        out["clusters"].append({"seed": s, **{k: v for k, v in h.items() if k != "seeds"}})
                    out["purity"] = group_purity(grouping(run.server), planted)
                    if key:  # the sensitivity runs' default setting: this run after sweep_rounds rounds (the clusters are fixed after round 1)
                        out["rows"].append({"study": "λ", "setting": str(self.lam), "seed": s, "method": "COSMOS",
                                            **accuracy_points(run.frame, self.sweep_rounds),
                                            "clusters": int(run.server.meta["n_groups"]), "purity": out["purity"]})
                    out["n_public"], out["test_size"] = len(public), float(np.mean([len(c.test) for c in fed.clients]))
                    out["train_size"] = float(np.mean([len(c.train) for c in fed.clients]))
                    one = list(self.mixtures.values())[0]
                    out["params"] = self.architectures(one, 1, ds).parameters()[one[0]]
                    out["first"] = (run, m) if s == self.first_seed else None
                if name == "COMET":
                    out["comet_purity"] = group_purity(grouping(run.server), planted)
            if key:  # local training alone (Corollary 5.13, not a headline claim): the side seeds only
                run = run_federated(self.local_only(public, s), fed, archs, dataclasses.replace(cfg, eval_every=0))
                out["rows"].append({"study": "main", "setting": "default", "seed": s, "method": "Local", **accuracy_points(run.frame)})
        elif kind == "homogeneous":
            one = key
            public, hidden, fed, planted = self.split(s)
            ds = fed.global_test
            archs = self.architectures(self.mixtures[one], self.n_clients, ds)
            cfg = LoopConfig(rounds=self.rounds, seed=s, eval_every=0)
            run = run_federated(self.cosmos_method(ds, public, s), fed, archs, cfg)
            out["rows"].append({"study": "mixture", "setting": one, "seed": s, "method": "COSMOS", **accuracy_points(run.frame)})
            train = self.pfl_train
            # the personalized methods (FedAvg, no personalized method, is no run: its bytes are fedavg_bytes)
            first, second = split_epochs(train)  # two models (Ditto) or two parts (FedRep): the same epochs in all
            pfl = {"Ditto": Ditto(train=first, personal_train=second), "FedBABU": FedBABU(train=train, finetune=self.finetune),
                   "FedRep": FedRep(head_train=first, train=second)}
            for name, m in pfl.items():
                run = run_federated(m, fed, archs, cfg)
                out["rows"].append({"study": "homogeneous", "setting": one, "seed": s, "method": name, **accuracy_points(run.frame)})
        elif kind in ("mixture", "alpha"):
            public, hidden, fed, planted = self.split(s, alpha=key if kind == "alpha" else None)
            ds = fed.global_test
            archs = self.architectures(self.mixtures[key] if kind == "mixture" else self.base_mix, self.n_clients, ds)
            cfg = LoopConfig(rounds=self.rounds, seed=s, eval_every=0)
            for name, m in (("COSMOS", self.cosmos_method(ds, public, s)), ("COMET", self.baselines(public, s)["COMET"])):
                run = run_federated(m, fed, archs, cfg)
                out["rows"].append({"study": kind, "setting": str(key), "seed": s, "method": name, **accuracy_points(run.frame)})
        elif kind == "sweep":
            study, value = key
            public, hidden, fed, planted = self.split(s)
            if study == "|U| share":
                public = public_part(public, hidden, value / self.public_share)
            if study == "clients":
                fed, planted = self.fewer_clients(fed, planted, value)
            ds = fed.global_test
            archs = self.architectures(self.base_mix, fed.n_clients, ds)
            change = {"λ": dict(lam=value), "T": dict(temperature=value), "rule": dict(rule=value),
                      "clusters": dict(target_clusters=value), "detach": dict(detach_target=value),
                      "server": dict(server_model=self.server_factory(ds, self.small_server))}.get(study, {})
            m = self.cosmos_method(ds, public, s, **change)
            run = run_federated(m, fed, archs, LoopConfig(rounds=self.sweep_rounds, seed=s, eval_every=0))
            out["rows"].append({"study": study, "setting": str(value), "seed": s, "method": "COSMOS", **accuracy_points(run.frame),
                                "clusters": int(run.server.meta["n_groups"]), "purity": group_purity(grouping(run.server), planted)})
        else:
            raise ValueError(f"unknown item kind {kind!r}; valid: {', '.join(KINDS)}")
        out["seconds"] = time.perf_counter() - t0
        return out

    def run(self, seeds: Sequence[int], workers: int = 1, threads: int = 1) -> StudyResults:
        """Every item of :meth:`items` (spread over ``workers`` processes with ``threads`` torch
        threads each, :func:`fedbook.parallel.map_parallel`), gathered."""
        items = self.items(seeds)
        results = map_parallel(self.run_item, items, workers, threads=threads)
        return StudyResults(rows=pd.DataFrame([r for res in results for r in res["rows"]]),
                            curves=pd.concat([c for res in results for c in res["curves"]], ignore_index=True),
                            nbytes=pd.DataFrame([r for res in results for r in res["bytes"]]),
                            clusters=pd.DataFrame([r for res in results for r in res["clusters"]]),
                            main=[res for (kind, _, _), res in zip(items, results) if kind == "main"],
                            seconds=sum(res["seconds"] for res in results))


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


class Sensitivity:
    """The sensitivity runs of a study read per seed: a study's value against its default.

    Parameters
    ----------
    rows : DataFrame
        :attr:`StudyResults.rows` (the rows of the sensitivity runs are those of no main, mixture,
        :math:`\\alpha` or one-architecture study).
    defaults : mapping
        :attr:`COSMOSStudy.sweep_defaults`; the default setting's rows are under ``"λ"`` (read
        from the main runs after the sweeps' rounds).
    sweeps : mapping of str to sequence
        The values tried per study (the ``sweeps`` of :class:`COSMOSStudy`).

    Examples
    --------
    >>> rows = pd.DataFrame({"study": ["λ", "λ", "T"], "setting": ["5.0", "0.0", "0.0"], "seed": 0, "method": "COSMOS",
    ...                      "mean": [80.0, 70.0, 75.0], "clusters": 5, "purity": 1.0})
    >>> s = Sensitivity(rows, {"λ": 5.0, "T": 1.0}, {"λ": [0.0], "T": [0.0]})
    >>> s.values("T", 1.0).tolist(), {k: v.tolist() for k, v in s.others("T").items()}, s.others("rule")
    ([80.0], {'T = 0': [75.0]}, None)
    """

    def __init__(self, rows: pd.DataFrame, defaults: Mapping, sweeps: Mapping[str, Sequence]) -> None:
        self.defaults, self.sweeps = dict(defaults), dict(sweeps)
        self.sweep = rows[~rows.study.isin(["main", "mixture", "homogeneous", "alpha"])]
        default = self.sweep[self.sweep.study == "λ"]
        self.default = default[default.setting == str(self.defaults["λ"])]

    def values(self, study: str, value) -> np.ndarray:
        """The ``mean`` accuracy per seed (in seed order) of ``study`` at ``value`` (the default runs at its default)."""
        part = self.default if value == self.defaults[study] else \
            self.sweep[(self.sweep.study == study) & (self.sweep.setting == str(value))]
        return part.sort_values("seed")["mean"].to_numpy()

    def others(self, study: str) -> dict[str, np.ndarray] | None:
        """Every value of ``study`` other than the default, its ``mean`` accuracy per seed, by
        :func:`sweep_label`: what a claim that the default is "the best" reads (one paired
        interval per other value; never the per-seed maximum); ``None`` where none is swept."""
        others = list(self.sweeps.get(study, []))
        return {sweep_label(study, v): self.values(study, v) for v in others} if others else None

    def larger_vs_smaller(self, study: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(values at the larger, values at the smaller)``: the sweep's largest value against the
        default where it tries a larger one, else the default against its smallest; ``None`` where
        ``study`` is not swept."""
        if study not in self.sweeps:
            return None
        default = self.defaults[study]
        more = [v for v in self.sweeps[study] if v > default]
        fewer = [v for v in self.sweeps[study] if v < default]
        return ((self.values(study, max(more)), self.values(study, default)) if more
                else (self.values(study, default), self.values(study, min(fewer))))

    def largest_vs_default(self, study: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(values at the sweep's largest value, values at the default)``; ``None`` where the sweep
        tries no value above the default."""
        if study not in self.sweeps or not max(self.sweeps[study]) > self.defaults[study]:
            return None
        return self.values(study, max(self.sweeps[study])), self.values(study, self.defaults[study])

    def study_rows(self, study: str) -> pd.DataFrame:
        """The rows of ``study``'s runs, the default setting's included (the runs of the λ default,
        relabelled as ``study`` at its default value)."""
        part = self.sweep[self.sweep.study == study]
        if study != "λ":
            part = pd.concat([part, self.default.assign(study=study, setting=str(self.defaults[study]))], ignore_index=True)
        return part


__all__ = ["KINDS", "PSEUDO_LR_METHODS", "STUDIES", "COSMOSStudy", "Sensitivity", "StudyResults", "accuracy_points", "fedavg_bytes", "kept_clients",
           "planted_groups", "public_part", "split_epochs", "sweep_label", "training_bytes"]
