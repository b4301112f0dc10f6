"""The setting chapter's procedures (*The federated setting and how we evaluate it*,
``notebooks/setting.py``): what it runs, as the cells of its studies (``fedbook.study``), and
the numbers its prose reads.

The chapter runs, every run on one seed (a study with one seed):

- **the anchors** (:func:`anchor_cell`): the small CNN trained centrally on the pooled training
  splits (:func:`central_accuracy`) and FedAvg on the IID partition;
- **FedAvg against FedAvg-FT** (:func:`finetune_cell`), one cell per Dirichlet concentration: one
  FedAvg run deployed as it is and fine-tuned on every client, both keeping every client's
  predictions, which the cell scores again under other rare thresholds (:func:`rare_thresholds`,
  the chapter's Exercise 2);
- **the exercises' reduced runs**: FedAvg's global accuracy on a seeded subset of the data
  (:func:`exercise_cell`: per partition and learning rate) and one reduced FedAvg run deployed
  with more and more fine-tuning (:func:`sweep_cell`, :func:`finetune_sweep`).

A cell re-derives everything it needs from its seed and a :class:`SettingConfig` (the data set,
its seeded subset, the federation of its concentration: :func:`fedlib.federation.make_federation`
gives one concentration the partition it gives it among others), so every cell runs alone, in any
process, with the bits of the chapter's single run. The partitions themselves train nothing:
:func:`partition_table` and :func:`plot_partitions` read them, :func:`unseen_classes` counts what
a client never sees. :func:`numbers` turns the studies' frames into the mapping the prose reads
(signed changes, never words computed from their sign), and :func:`plot_abilities` and
:func:`plot_clients` draw its figures.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from fedlib.algorithms import FedAvg, FedAvgFT
from fedlib.data import ArrayDataset, load_dataset, plot_partition, subsample
from fedlib.federation import Federation, make_federations
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.run import RunOptions
from fedlib.messages import DOWN
from fedlib.metrics import Confusion, protocol_summary, rescore
from fedlib.models import build_model
from fedlib.rng import INIT, derive_seed, isolated_torch_rng, torch_generator
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig, local_train, predict
from fedbook.page import format_bytes, show_table
from fedbook.tables import rows_where

METHODS = ("FedAvg", "FedAvg-FT")
"""The two deployments of one FedAvg run that the chapter compares."""
MEANS = {"local": "local accuracy (%)", "global": "global accuracy (%)", "unseen": "unseen accuracy (%)",
         "rare": "rare accuracy (%)"}
"""The mean abilities over clients (:func:`fedlib.metrics.protocol_summary`'s keys) and their columns' names."""
FLOORS = {"L@25": "L@25 (%)", "U@25": "U@25 (%)", "R@25": "R@25 (%)", "F@25": "F@25 (%)"}
"""The @25 floors and their columns' names."""
TAILS = {"worst_pooled": "worst client, pooled (%)", "bottom20_pooled": "bottom 20 % of clients, pooled (%)",
         "gap_pooled": "fairness gap, best − worst, pooled (points)"}
"""The lower tail of the clients' pooled scores (:mod:`fedlib.metrics`, the ability ``pooled``: a
client's own test split is too small to rank clients) and its columns' names."""
CHANGES = {"local": "local", "global": "global", "unseen": "unseen", "rare": "rare", "F@25": "f25", "L@25": "l25"}
"""The abilities whose change under fine-tuning the prose quotes, and the suffix of its key
(``ft_change_<suffix>``, :func:`numbers`)."""
SHOWN = ("local", "global", "unseen", "rare", "L@25", "U@25", "R@25", "F@25")
"""The abilities of the chapter's bar chart (:func:`plot_abilities`)."""
BATCH, MOMENTUM = 32, 0.9
"""Every local update's batch size and SGD momentum (the central anchor keeps TrainConfig's default momentum)."""
CENTRAL_TARGET, ANCHOR_TOLERANCE = 95.0, 3.0
"""The anchors' yardsticks, as the prose states them: the central model's global-test accuracy
should reach ``CENTRAL_TARGET`` percent at the book profile, and FedAvg on the IID partition
should come within ``ANCHOR_TOLERANCE`` points of it."""
EX1_DROP = 5.0
"""Exercise 1's question: at which concentration FedAvg falls more than this many points below the IID anchor."""
SWEEP_EPOCHS = (1, 5, 20)
"""Exercise 4's numbers of fine-tuning epochs (beside 0, plain FedAvg)."""
EX_ALPHAS, EX_SKEW_ALPHA, EX_LR = (None, 1.0, 0.3, 0.1, 0.03), 0.1, 0.05
"""The exercises' reduced runs: the partitions of Exercise 1 (``None``: IID), the skewed
federation that Exercises 3 and 4 train on, and Exercise 3's larger learning rate."""


def partition_label(alpha: float | None) -> str:
    """How the chapter names a partition: ``"IID"`` for ``None``, else ``"Dirichlet α = <alpha>"``.

    Examples
    --------
    >>> partition_label(None), partition_label(0.3)
    ('IID', 'Dirichlet α = 0.3')
    """
    return "IID" if alpha is None else f"Dirichlet α = {alpha}"


@dataclass(frozen=True)
class SettingConfig:
    """What a cell of the chapter's studies depends on besides its seed and its setting: the data
    set (and its seeded subset, ``n_samples``; ``root``: the folder of CIFAR-10), the federation,
    the model, local training, fine-tuning, the central anchor, the rare threshold, and the
    reduced scale of the exercises (``ex_*``). :meth:`of` reads it from the chapter's settings.

    Examples
    --------
    >>> c = SettingConfig(dataset="mnist5k", n_samples=800, n_clients=4, global_test_per_class=20, model="cnn",
    ...                   rounds=2, local_epochs=1, lr=0.01, finetune_epochs=3, finetune_lr=0.01)
    >>> c.train.epochs, c.finetune.epochs, c.finetune.momentum, c.loop_of(seed=7).rounds
    (1, 3, 0.9, 2)
    """

    dataset: str
    n_samples: int | None
    n_clients: int
    global_test_per_class: int
    model: str
    rounds: int
    local_epochs: int
    lr: float
    finetune_epochs: int
    finetune_lr: float
    central_epochs: int = 1
    central_lr: float = 0.01
    rare_ratio: float = 0.5
    ex_samples: int = 400
    ex_clients: int = 4
    ex_rounds: int = 1
    ex_test_per_class: int = 5
    root: str | None = None

    @classmethod
    def of(cls, settings: Any, root: str | None = None) -> "SettingConfig":
        """The configuration of a chapter's settings (:func:`fedbook.page.setup`'s): every field
        the settings hold, ``root`` given apart (it is a parameter, not a profile's setting)."""
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)
                      if f.name != "root" and hasattr(settings, f.name)},
                   root=root)

    @property
    def train(self) -> TrainConfig:
        """Every client's local update (SGD with momentum)."""
        return TrainConfig(epochs=self.local_epochs, batch_size=BATCH, lr=self.lr, momentum=MOMENTUM)

    @property
    def finetune(self) -> TrainConfig:
        """FedAvg-FT's fine-tuning on each client before deployment."""
        return TrainConfig(epochs=self.finetune_epochs, batch_size=BATCH, lr=self.finetune_lr, momentum=MOMENTUM)

    @property
    def central(self) -> TrainConfig:
        """The central anchor's training."""
        return TrainConfig(epochs=self.central_epochs, batch_size=BATCH, lr=self.central_lr)

    def loop_of(self, seed: int, rounds: int | None = None) -> LoopConfig:
        """The loop of a run of ``seed`` (``rounds``: the exercises' fewer rounds)."""
        return LoopConfig(rounds=self.rounds if rounds is None else rounds, seed=seed, rare_ratio=self.rare_ratio)

    def data(self, seed: int) -> ArrayDataset:
        """The chapter's data set, seeded-subsampled to ``n_samples`` (:func:`fedlib.data.datasets.load_dataset`)."""
        return load_dataset(self.dataset, n_samples=self.n_samples, seed=seed, root=self.root)

    def model_fn(self, data: ArrayDataset) -> Callable[[], torch.nn.Module]:
        """The chapter's model for ``data``'s images and classes."""
        return functools.partial(build_model, self.model, in_channels=data.x.shape[1], n_classes=data.n_classes,
                                 input_size=data.x.shape[-1])

    def federation(self, data: ArrayDataset, alpha: float | None, seed: int, *, reduced: bool = False) -> Federation:
        """The federation of ``data`` at ``alpha`` (``None``: IID) that :func:`fedlib.federation.make_federations`
        builds, at the chapter's scale or (``reduced``) the exercises' one on a seeded subset of ``data``."""
        if reduced:
            data = subsample(data, self.ex_samples, seed)
        clients, per_class = (self.ex_clients, self.ex_test_per_class) if reduced else (self.n_clients,
                                                                                        self.global_test_per_class)
        return make_federations(data, [alpha], n_clients=clients, global_test_per_class=per_class, seed=seed)[alpha]


def partition_table(federations: Mapping[float | None, Federation], rare_ratio: float) -> pd.DataFrame:
    """One row per federation (indexed by :func:`partition_label`): its training, local-test and
    global-test samples, and per client on average the classes seen, the unseen classes, the rare
    classes (:meth:`fedlib.federation.Federation.summary` at ``rare_ratio``) and the largest class
    share.

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    >>> feds = make_federations(ds, [None, 0.1], n_clients=4, global_test_per_class=10, seed=0)
    >>> partition_table(feds, 0.5).loc["IID", ["train samples", "global test samples", "unseen classes (mean)"]].tolist()
    [66.0, 30.0, 0.0]
    """
    rows = []
    for alpha, fed in federations.items():
        s = fed.summary(rare_ratio)
        rows.append({"partition": partition_label(alpha), "train samples": int(s["n_train"].sum()),
                     "local test samples": int(s["n_local_test"].sum()),
                     "global test samples": len(fed.global_test),
                     "classes seen (mean)": s["classes_seen"].mean(),
                     "unseen classes (mean)": (fed.n_classes - s["classes_seen"]).mean(),
                     "rare classes (mean)": s["rare_classes"].mean(),
                     "largest class share (mean)": s["largest_class_share"].mean()})
    return pd.DataFrame(rows).set_index("partition")


def plot_partitions(federations: Mapping[float | None, Federation]) -> plt.Figure:
    """The training counts per class (rows) and client (columns) of every federation, one panel
    each (:func:`fedlib.data.partition.plot_partition`; the counts written in the cells only when they are
    at most 100)."""
    fig, axes = plt.subplots(len(federations), 1, figsize=(10, 3.6 * len(federations)), squeeze=False)
    for ax, (alpha, fed) in zip(axes[:, 0], federations.items()):
        plot_partition(fed.train_counts().T, ax=ax, title=partition_label(alpha))
        if fed.train_counts().size > 100:  # many cells: the colours alone, without the counts
            for text in list(ax.texts):
                text.remove()
        ax.set_xlabel("client")
        ax.set_ylabel("class")
    fig.tight_layout()
    return fig


def central_accuracy(federation: Federation, model_fn: Callable[[], torch.nn.Module], train: TrainConfig,
                     seed: int) -> tuple[float, float]:
    """The central anchor: ``model_fn()`` (its initial weights drawn as a run of ``seed`` draws
    them) trained with ``train`` on every client's training split pooled, and its accuracy on
    the global test set; with the seconds the training took.

    Returns
    -------
    (accuracy, seconds) : tuple of float
        The accuracy as a fraction.
    """
    x = torch.cat([c.train.x for c in federation.clients])
    y = torch.cat([c.train.y for c in federation.clients])
    with isolated_torch_rng(derive_seed(seed, INIT)):
        model = model_fn()
    t0 = time.perf_counter()
    local_train(model, x, y, train, torch_generator(seed, 0, 0, 7))
    seconds = time.perf_counter() - t0
    pred = predict(model, federation.global_test.x).numpy()
    return Confusion.from_predictions(federation.global_test.labels_np, pred, federation.n_classes).accuracy(), seconds


ANCHORS = ("central SGD", "FedAvg, IID")
"""The anchors of :func:`anchor_cell`."""


def anchor_cell(seed: int, anchor: str, *, config: SettingConfig) -> pd.DataFrame:
    """One sanity anchor of :data:`ANCHORS` on the IID federation of ``seed``: the central model
    (:func:`central_accuracy`) or FedAvg (every client every round, :attr:`SettingConfig.train`).

    Returns
    -------
    DataFrame
        One row: ``accuracy`` on the global test set (a fraction), ``passes`` over the data, and
        the ``seconds`` the training took (a measurement).
    """
    if anchor not in ANCHORS:
        raise ValueError(f"unknown anchor {anchor!r}; valid: {', '.join(ANCHORS)}")
    data = config.data(seed)
    fed = config.federation(data, None, seed)
    if anchor == "central SGD":
        accuracy, seconds = central_accuracy(fed, config.model_fn(data), config.central, seed)
        passes = config.central_epochs
    else:
        t0 = time.perf_counter()
        accuracy = run_federated(FedAvg(train=config.train), fed, config.model_fn(data), config.loop_of(seed)).summary()["global"]
        seconds, passes = time.perf_counter() - t0, config.rounds * config.local_epochs
    return pd.DataFrame({"accuracy": [float(accuracy)], "passes": [int(passes)], "seconds": [float(seconds)]})


def rare_thresholds(federation: Federation, predictions: Mapping[str, Mapping], thresholds: Iterable[float]
                    ) -> pd.DataFrame:
    """Kept predictions scored again under other rare thresholds (:func:`fedlib.metrics.rescore`):
    per threshold :math:`\\rho` (sorted), the rare classes per client on average, the clients with
    one, and per method of ``predictions`` its mean rare accuracy and its ``F@25`` (%).

    Returns
    -------
    DataFrame
        Indexed by ``rho``; columns ``rare per client``, ``clients with rare``, ``rare <method>``
        and ``F@25 <method>``.
    """
    rows = []
    for rho in sorted(set(thresholds)):
        rare = federation.summary(rho)["rare_classes"]
        row = {"rho": rho, "rare per client": rare.mean(), "clients with rare": int((rare > 0).sum())}
        for method, kept in predictions.items():
            s = protocol_summary(rescore(federation, kept, rho))
            row[f"rare {method}"], row[f"F@25 {method}"] = 100 * s["rare"], 100 * s["F@25"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("rho")


RHOS = (0.25, 1.0)
"""The rare thresholds, besides the chapter's own, under which :func:`finetune_cell` scores the
kept predictions again (Exercise 2)."""


def finetune_cell(seed: int, alpha: float, *, config: SettingConfig, rhos: Sequence[float] = RHOS
                  ) -> dict[str, pd.DataFrame]:
    """FedAvg against FedAvg-FT at ``alpha``: one FedAvg run (:attr:`SettingConfig.train`, every
    client's predictions kept) deployed twice, the global model as it is (FedAvg) and fine-tuned
    on each client's training split before deployment (FedAvg-FT, :attr:`SettingConfig.finetune`,
    :func:`fedlib.run.evaluate_deployment` on the same run).

    Returns
    -------
    dict of DataFrame
        ``finetune``: one row per method of :data:`METHODS`, every key of
        :func:`fedlib.metrics.protocol_summary` (fractions) and ``down_per_round`` (the bytes one
        client receives per training round, from the run's ledger); ``clients``: each method's
        client × ability table (``method``, ``client``, the abilities); ``rare``: the kept
        predictions scored again under the rare thresholds ``rhos`` and the chapter's own
        (:func:`rare_thresholds`, ``rho`` first); ``traffic``: the run's bytes by ``direction``
        and ``kind``.

    Raises
    ------
    RuntimeError
        When the kept predictions, scored again at the chapter's threshold, do not give the
        deployment's ``F@25`` (they are what Exercise 2 scores).
    """
    data = config.data(seed)
    fed, model_fn, loop = config.federation(data, alpha, seed), config.model_fn(data), config.loop_of(seed)
    run = run_federated(FedAvg(train=config.train), fed, model_fn, loop, RunOptions(keep_predictions=True))
    kept = {"FedAvg": run.predictions, "FedAvg-FT": {}}
    ft_frame = evaluate_deployment(FedAvgFT(train=config.train, finetune=config.finetune), run, fed, model_fn, loop,
                                   predictions=kept["FedAvg-FT"])
    wide = {"FedAvg": run.per_client(), "FedAvg-FT": per_client_table(ft_frame)}
    down = run.ledger.per_client_and_round(DOWN, n_clients=1)
    summary = pd.DataFrame([{"method": m, **protocol_summary(w), "down_per_round": down} for m, w in wide.items()])
    rare = rare_thresholds(fed, kept, [*rhos, config.rare_ratio])
    deployed = 100 * summary.loc[summary["method"] == "FedAvg-FT", "F@25"].iloc[0]
    if not np.allclose(rare.loc[config.rare_ratio, "F@25 FedAvg-FT"], deployed, equal_nan=True):
        raise RuntimeError("the kept predictions of FedAvg-FT do not score as its deployment did")
    clients = pd.concat([w.rename_axis("client").reset_index().assign(method=m) for m, w in wide.items()],
                        ignore_index=True)
    traffic = run.ledger.totals(["direction", "kind"]).rename("bytes").reset_index()
    return {"finetune": summary, "clients": clients[["method", *clients.columns.drop("method")]],
            "rare": rare.reset_index(), "traffic": traffic}


def exercise_cell(seed: int, alpha: float | None, lr: float, *, config: SettingConfig) -> pd.DataFrame:
    """The exercises' reduced run: FedAvg (the chapter's local update at learning rate ``lr``) on
    the reduced federation at ``alpha`` (``None``: IID; :meth:`SettingConfig.federation`), for
    ``ex_rounds`` rounds.

    Returns
    -------
    DataFrame
        One row: ``global`` (FedAvg's mean global accuracy, a fraction) and ``samples`` (the
        reduced data set's size).
    """
    data = config.data(seed)
    fed = config.federation(data, alpha, seed, reduced=True)
    run = run_federated(FedAvg(train=dataclasses.replace(config.train, lr=lr)), fed, config.model_fn(data),
                        config.loop_of(seed, config.ex_rounds))
    return pd.DataFrame({"global": [float(run.summary()["global"])], "samples": [len(subsample(data, config.ex_samples, seed))]})


def finetune_sweep(run: RunResult, federation: Federation, model_fn: Callable[[], torch.nn.Module],
                   config: LoopConfig, train: TrainConfig, finetune: TrainConfig, epochs: Iterable[int]
                   ) -> pd.DataFrame:
    """One FedAvg run deployed with more and more local fine-tuning: the protocol's summary
    (:func:`fedlib.metrics.protocol_summary`) of the run itself (0 epochs) and of FedAvg-FT with
    ``finetune`` for each number of ``epochs`` (:func:`fedlib.run.evaluate_deployment`).

    Returns
    -------
    DataFrame
        Indexed by ``fine-tuning epochs``.
    """
    rows = [{"fine-tuning epochs": 0, **protocol_summary(run.per_client())}]
    for e in epochs:
        ft = FedAvgFT(train=train, finetune=dataclasses.replace(finetune, epochs=e))
        frame = evaluate_deployment(ft, run, federation, model_fn, config)
        rows.append({"fine-tuning epochs": e, **protocol_summary(per_client_table(frame))})
    return pd.DataFrame(rows).set_index("fine-tuning epochs")


def sweep_cell(seed: int, alpha: float, *, config: SettingConfig, epochs: Sequence[int] = SWEEP_EPOCHS) -> pd.DataFrame:
    """Exercise 4: the reduced FedAvg run at ``alpha`` (:func:`exercise_cell`'s, the chapter's
    learning rate) deployed with 0 and each number of ``epochs`` of fine-tuning
    (:func:`finetune_sweep`), one row per number of epochs (``fine-tuning epochs`` first)."""
    data = config.data(seed)
    fed, model_fn, loop = config.federation(data, alpha, seed, reduced=True), config.model_fn(data), config.loop_of(
        seed, config.ex_rounds)
    run = run_federated(FedAvg(train=config.train), fed, model_fn, loop)
    return finetune_sweep(run, fed, model_fn, loop, config.train, config.finetune, epochs).reset_index()


def mean_unseen(federation: Federation) -> float:
    """The mean number of classes a client of ``federation`` never trains on.

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    >>> from fedlib.federation import make_federation
    >>> mean_unseen(make_federation(ds, n_clients=2, partition="iid", global_test_per_class=10, seed=0))
    0.0
    """
    return float(federation.n_classes - federation.summary()["classes_seen"].mean())


def unseen_classes(data: ArrayDataset, alphas: Iterable[float | None], config: SettingConfig, seed: int
                   ) -> dict[float | None, float]:
    """The mean unseen classes per client (:func:`mean_unseen`) of the chapter's federation at each
    of ``alphas``: partitions only, no training."""
    return {a: mean_unseen(config.federation(data, a, seed)) for a in alphas}


def by_method(frame: pd.DataFrame, columns: Mapping[str, str] | None = None, *, percent: bool = True) -> pd.DataFrame:
    """A study's tidy frame indexed by (``alpha``, ``method``): ``columns`` (e.g. :data:`MEANS`;
    ``None``: every column but the cell's) renamed, in percent (``percent``), the index named ``α``
    and ``method`` for the page's tables.

    Examples
    --------
    >>> f = pd.DataFrame({"alpha": [0.1, 0.1], "seed": 0, "method": ["FedAvg", "FedAvg-FT"], "local": [0.5, 0.75]})
    >>> by_method(f, {"local": "local (%)"}).to_dict("index")
    {(0.1, 'FedAvg'): {'local (%)': 50.0}, (0.1, 'FedAvg-FT'): {'local (%)': 75.0}}
    """
    table = frame.drop(columns="seed").set_index(["alpha", "method"])
    table = table[list(columns)].rename(columns=columns) if columns is not None else table
    return (100 * table if percent else table).rename_axis(["α", "method"])


def plot_abilities(summary: pd.DataFrame, alphas: Sequence[float], shown: Sequence[str] = SHOWN) -> plt.Figure:
    """The mean abilities and floors ``shown`` of each method, one panel of bars per ``alpha``
    (percent, 0 to 100; a missing bar: no client has the ability). ``summary``: the
    ``finetune`` frame of :func:`finetune_cell`'s study."""
    table = by_method(summary, None, percent=False)
    fig, axes = plt.subplots(1, len(alphas), figsize=(min(10, 5 * len(alphas)), 3.8), squeeze=False)
    for ax, a in zip(axes[0], alphas):
        s = 100 * table.loc[a, list(shown)]
        xs = np.arange(len(shown))
        for i, method in enumerate(s.index):
            ax.bar(xs + (i - 0.5) * 0.38, s.loc[method].to_numpy(dtype=float), width=0.38, label=method)
        ax.set_xticks(xs, shown, rotation=30)
        ax.set_ylim(0, 100)
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"Dirichlet α = {a}")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return fig


def plot_clients(clients: pd.DataFrame, alphas: Sequence[float]) -> plt.Figure:
    """Each client's local accuracy against its global accuracy, deploying the global model
    (FedAvg) and after fine-tuning (FedAvg-FT), the two points of a client joined by a grey line;
    one panel per ``alpha``. ``clients``: the ``clients`` frame of :func:`finetune_cell`'s study."""
    fig, axes = plt.subplots(1, len(alphas), figsize=(min(10, 5 * len(alphas)), 4.2), squeeze=False)
    for ax, a in zip(axes[0], alphas):
        at = clients[clients["alpha"] == a]
        before, after = (at[at["method"] == m].set_index("client") for m in METHODS)
        for k in before.index:
            ax.plot([100 * before.loc[k, "local"], 100 * after.loc[k, "local"]],
                    [100 * before.loc[k, "global"], 100 * after.loc[k, "global"]], color="0.8", lw=0.8, zorder=1)
        ax.scatter(100 * before["local"], 100 * before["global"], label="FedAvg", zorder=2)
        ax.scatter(100 * after["local"], 100 * after["global"], label="FedAvg-FT", zorder=2)
        ax.set_xlabel("local accuracy (%)")
        ax.set_ylabel("global accuracy (%)")
        ax.set_title(f"Dirichlet α = {a}")
        ax.legend(loc="best")
    fig.tight_layout()
    return fig


def anchor_table(anchors: pd.DataFrame) -> pd.DataFrame:
    """The anchors' study as the page's table: one row per anchor, its global-test accuracy in
    percent, its passes over the data, its seconds, its yardstick (central SGD: at least
    :data:`CENTRAL_TARGET` percent; FedAvg on the IID partition: within :data:`ANCHOR_TOLERANCE`
    points of central SGD) and whether it meets it.

    Examples
    --------
    >>> anchors = pd.DataFrame({"anchor": ["central SGD", "FedAvg, IID"], "accuracy": [0.978, 0.944],
    ...                         "passes": [10, 10], "seconds": [1.0, 2.0]})
    >>> anchor_table(anchors)["meets it"].tolist()
    ['yes', 'no']
    """
    table = anchors.set_index("anchor")[["accuracy", "passes", "seconds"]]
    accuracy = 100 * table["accuracy"]
    central = accuracy["central SGD"]
    met = {"central SGD": central >= CENTRAL_TARGET, "FedAvg, IID": central - accuracy["FedAvg, IID"] <= ANCHOR_TOLERANCE}
    yardstick = {"central SGD": f"≥ {CENTRAL_TARGET:g} %", "FedAvg, IID": f"within {ANCHOR_TOLERANCE:g} points of central SGD"}
    return pd.DataFrame({"global-test accuracy (%)": accuracy, "passes over the data": table["passes"],
                         "seconds": table["seconds"], "yardstick": pd.Series(yardstick).reindex(accuracy.index),
                         "meets it": pd.Series({k: "yes" if v else "no" for k, v in met.items()}).reindex(accuracy.index)})


def traffic_table(traffic: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """The bytes of the run at ``alpha`` by direction and kind (the ``traffic`` frame of
    :func:`finetune_cell`'s study), as the page shows them."""
    at = traffic[traffic["alpha"] == alpha]
    return at.set_index(["direction", "kind"])["bytes"].rename("bytes in the whole run").to_frame()


def exercise_tables(frames: Mapping[str, pd.DataFrame], unseen: Mapping[float | None, float]
                    ) -> dict[str, pd.DataFrame]:
    """The worked solutions' tables: ``ex1`` (per Dirichlet concentration, the mean unseen classes
    per client at the chapter's scale, FedAvg's global accuracy at the reduced one and its change
    from the IID partition's, points), ``ex2`` (the kept predictions of the last concentration
    scored under each rare threshold), ``ex4`` (the reduced run deployed with more and more
    fine-tuning: local, global and ``F@25``, percent)."""
    skew = frames["ex_skew"]
    iid = 100 * rows_where(skew, alpha=None)["global"].iloc[0]
    dirichlet = skew[skew["alpha"].notna()]
    ex1 = pd.DataFrame({"α": dirichlet["alpha"].astype(float).to_numpy(),
                        "unseen classes per client": [unseen[a] for a in dirichlet["alpha"]],
                        "FedAvg global accuracy (%)": 100 * dirichlet["global"].to_numpy(),
                        "change from IID (points)": 100 * dirichlet["global"].to_numpy() - iid})
    rare = frames["rare"]
    ex2 = rare[rare["alpha"] == rare["alpha"].iloc[-1]].drop(columns=["alpha", "seed"]).set_index("rho").rename_axis("ρ")
    sweep = frames["ex_sweep"].set_index("fine-tuning epochs")
    ex4 = 100 * sweep[["local", "global", "F@25"]].rename(columns=lambda c: f"{c} (%)")
    return {"ex1": ex1.set_index("α"), "ex2": ex2, "ex4": ex4}


def numbers(frames: Mapping[str, pd.DataFrame], settings: Any, federations: Mapping[float | None, Federation],
            data: ArrayDataset, config: SettingConfig, seed: int) -> dict[str, Any]:
    """Every number the chapter's prose reads, by its glued key: the federations' (``federations``:
    the IID one and the chapter's concentrations, :func:`partition_table`), the anchors', FedAvg
    against FedAvg-FT at the last concentration (``ft_change_<ability>``: FedAvg-FT − FedAvg in
    points, NaN where no client has the ability), the bytes, the exercises' (their tables by
    :func:`exercise_tables`, the unseen classes at the chapter's scale by :func:`unseen_classes`,
    the signed changes of the larger learning rate), and the settings the prose republishes.

    ``frames`` holds the studies' frames (``anchors``, ``finetune``, ``rare``, ``ex_skew``,
    ``ex_lr``, ``ex_sweep``); ``settings`` the chapter's (:func:`fedbook.page.setup`), ``data``
    its data set and ``config`` the cells' configuration.
    """
    P, a = settings, settings.alphas[-1]
    partitions, n_global_test, n_classes = partition_table(federations, P.rare_ratio), len(federations[None].global_test), data.n_classes
    unseen = unseen_classes(data, [x for x in frames["ex_skew"]["alpha"] if pd.notna(x)], config, seed)
    last, anchors = partition_label(a), frames["anchors"].set_index("anchor")["accuracy"]
    central, iid = anchors["central SGD"], anchors["FedAvg, IID"]
    ft = rows_where(frames["finetune"], alpha=a).set_index("method")
    change = {key: float(100 * (ft.loc["FedAvg-FT", m] - ft.loc["FedAvg", m])) for m, key in CHANGES.items()}
    skew, lr = frames["ex_skew"], frames["ex_lr"]
    ex3 = {(alpha, rate): 100 * float(rows_where(f, alpha=alpha)["global"].iloc[0])
           for f, rate in ((skew, P.lr), (lr, lr["lr"].iloc[0])) for alpha in (None, EX_SKEW_ALPHA)}
    larger = float(lr["lr"].iloc[0])
    tables = exercise_tables(frames, unseen)
    rare, ex2 = tables["ex2"], {}
    for m, key in (("FedAvg", "fedavg"), ("FedAvg-FT", "ft")):
        ex2[f"ex2_spread_{key}"] = float(rare[f"F@25 {m}"].max() - rare[f"F@25 {m}"].min())
    swept = [int(e) for e in frames["ex_sweep"]["fine-tuning epochs"] if e > 0]
    return {
        "n_clients": P.n_clients, "n_global_test": n_global_test, "alpha_last": a,
        "seen_last": float(partitions.loc[last, "classes seen (mean)"]),
        "unseen_last": float(partitions.loc[last, "unseen classes (mean)"]),
        "seen_iid": float(partitions.loc["IID", "classes seen (mean)"]),
        "rho": P.rare_ratio, "rare_pct": 100 * P.rare_ratio / n_classes,
        "central_acc": float(100 * central), "iid_acc": float(100 * iid), "anchor_gap": float(100 * (central - iid)),
        "central_epochs": P.central_epochs, "central_lr": P.central_lr, "batch": BATCH, "momentum": MOMENTUM,
        "central_target": CENTRAL_TARGET, "anchor_tolerance": ANCHOR_TOLERANCE, "ex1_drop": EX1_DROP,
        "ft_epochs": P.finetune_epochs, "ft_lr": P.finetune_lr, "local_epochs": P.local_epochs, "train_lr": P.lr,
        "rounds": P.rounds, **{f"ft_change_{k}": v for k, v in change.items()}, "alpha_ft": a,
        **{f"ft_{m}_{when}": float(100 * ft.loc[method, m]) for m in ("local", "global")
           for when, method in (("before", "FedAvg"), ("after", "FedAvg-FT"))},
        "bytes_per_round": format_bytes(float(ft.loc["FedAvg", "down_per_round"])),
        "ex_scale": (f"{int(skew['samples'].iloc[0]):,} samples ({P.ex_test_per_class} global test images per "
                     f"class), {P.ex_clients} clients, {P.ex_rounds} round(s), seed {seed}"),
        "ex1_iid": ex3[(None, P.lr)],  # the IID run of the skew exercise, at the chapter's learning rate
        "ex1_table": show_table(tables["ex1"], digits=1, formats={"α": "g"}),
        "ex2_alpha": a, "ex2_table": show_table(tables["ex2"], digits=1, formats={"ρ": "g"}),
        **ex2, "ex2_rare_ft_change": float(rare["rare FedAvg-FT"].iloc[-1] - rare["rare FedAvg-FT"].iloc[0]),
        "ex2_few": int(rare["clients with rare"].iloc[0]), "ex2_rho_lo": min(RHOS), "ex2_rho_hi": max(RHOS),
        "ex3_lr": larger, "ex3_iid_base": ex3[(None, P.lr)], "ex3_iid_larger": ex3[(None, larger)],
        "ex3_skew_base": ex3[(EX_SKEW_ALPHA, P.lr)], "ex3_skew_larger": ex3[(EX_SKEW_ALPHA, larger)],
        "ex3_iid_change": ex3[(None, larger)] - ex3[(None, P.lr)],
        "ex3_skew_change": ex3[(EX_SKEW_ALPHA, larger)] - ex3[(EX_SKEW_ALPHA, P.lr)], "ex_skew_alpha": EX_SKEW_ALPHA,
        "ex4_table": show_table(tables["ex4"], digits=1),
        # the graded answer of Exercise 4 (fedbook.course): the most fine-tuning's change of F@25, points
        "ex4_f25_change": float(tables["ex4"]["F@25 (%)"].iloc[-1] - tables["ex4"]["F@25 (%)"].iloc[0]),
        "ex4_epochs": ", ".join(map(str, swept[:-1])) + f" and {swept[-1]}" if len(swept) > 1 else str(swept[0]),
    }


__all__ = ["ANCHORS", "ANCHOR_TOLERANCE", "BATCH", "CENTRAL_TARGET", "CHANGES", "EX1_DROP", "FLOORS", "MEANS",
           "METHODS", "MOMENTUM", "RHOS", "SHOWN", "SWEEP_EPOCHS", "TAILS", "EX_ALPHAS", "EX_LR", "EX_SKEW_ALPHA",
           "SettingConfig", "anchor_cell", "anchor_table", "by_method", "central_accuracy", "exercise_cell",
           "exercise_tables", "finetune_cell", "finetune_sweep", "mean_unseen", "numbers", "partition_label",
           "partition_table", "plot_abilities", "plot_clients", "plot_partitions", "rare_thresholds",
           "sweep_cell", "traffic_table", "unseen_classes"]
