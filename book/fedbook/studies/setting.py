"""The setting chapter's procedures (*The federated setting and how we evaluate it*,
``notebooks/setting.py``): the table of its partitions, the central anchor, FedAvg against FedAvg
with local fine-tuning (FedAvg-FT) on one run per Dirichlet concentration, and the worked
solutions of its exercises turned into words.

The chapter's federations come from :func:`fedlib.federation.make_federations` (``None``: the IID
partition); every ability is the protocol's (:mod:`fedlib.metrics`). The words are computed from
the numbers, never typed: a change of at most ``0.05`` points "stays level" (:func:`direction`),
a distance says "below" or "above" (:func:`points_below`), a gain "gains" or "loses"
(:func:`gains_or_loses`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fedlib.algorithms import FedAvg, FedAvgFT
from fedlib.federation import Federation
from fedlib.loop import LoopConfig
from fedlib.results import RunResult, per_client_table
from fedlib.run import RunOptions
from fedlib.metrics import Confusion, protocol_summary, rescore
from fedlib.rng import INIT, derive_seed, isolated_torch_rng, torch_generator
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig, local_train, predict

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
LEVEL = 0.05
"""A change of at most this many points (either way) "stays level" (:func:`direction`)."""


def partition_label(alpha: float | None) -> str:
    """How the chapter names a partition: ``"IID"`` for ``None``, else ``"Dirichlet α = <alpha>"``.

    Examples
    --------
    >>> partition_label(None), partition_label(0.3)
    ('IID', 'Dirichlet α = 0.3')
    """
    return "IID" if alpha is None else f"Dirichlet α = {alpha}"


def partition_table(federations: Mapping[float | None, Federation], rare_ratio: float) -> pd.DataFrame:
    """One row per federation (indexed by :func:`partition_label`): its training, local-test and
    global-test samples, and per client on average the classes seen, the unseen classes, the rare
    classes (:meth:`fedlib.federation.Federation.summary` at ``rare_ratio``) and the largest class
    share.

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> from fedlib.federation import make_federations
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


@dataclass
class FineTuning:
    """FedAvg and FedAvg-FT deployed from the same FedAvg run, per Dirichlet concentration
    (:func:`fedavg_and_finetune`).

    Attributes
    ----------
    runs : the FedAvg run per ``alpha``
    per_client : the client × ability table per ``(alpha, method)`` (``method`` one of :data:`METHODS`)
    predictions : every client's kept predictions per ``(alpha, method)``, for
        :func:`fedlib.metrics.rescore`
    summary : :func:`fedlib.metrics.protocol_summary` per ``(alpha, method)`` (the index)
    """

    runs: dict[float, RunResult]
    per_client: dict[tuple[float, str], pd.DataFrame]
    predictions: dict[tuple[float, str], dict]
    summary: pd.DataFrame

    def percent(self, columns: Mapping[str, str]) -> pd.DataFrame:
        """The ``summary``'s ``columns`` (e.g. :data:`MEANS`) in percent, renamed, the index named
        ``α`` and ``method``."""
        return (100 * self.summary[list(columns)]).rename(columns=columns).rename_axis(["α", "method"])

    def change(self, alpha: float, metric: str) -> float:
        """What fine-tuning changes: FedAvg-FT's ``metric`` minus FedAvg's at ``alpha``, in points
        (NaN where the ability is n/a)."""
        ft, fedavg = self.summary.loc[(alpha, "FedAvg-FT"), metric], self.summary.loc[(alpha, "FedAvg"), metric]
        return float(100 * (ft - fedavg))


def fedavg_and_finetune(federations: Mapping[float, Federation], model_fn: Callable[[], torch.nn.Module],
                        config: LoopConfig, train: TrainConfig, finetune: TrainConfig,
                        results_dir: str | Path | None = None) -> FineTuning:
    """Per federation, one FedAvg run (local training ``train``) deployed twice: the global model
    (FedAvg) and the global model fine-tuned on each client's training split with ``finetune``
    before deployment (FedAvg-FT, :func:`fedlib.run.evaluate_deployment` on the same run); both
    keep every client's predictions.

    With ``results_dir``, each run is saved in ``<results_dir>/fedavg_alpha<alpha>`` and FedAvg-FT's
    tidy frame beside it (``fedavg_ft_frame.csv``).
    """
    runs, per_client, kept, summaries = {}, {}, {}, []
    for a, fed in federations.items():
        run = run_federated(FedAvg(train=train), fed, model_fn, config, RunOptions(keep_predictions=True))
        runs[a], kept[(a, "FedAvg")], kept[(a, "FedAvg-FT")] = run, run.predictions, {}
        ft_frame = evaluate_deployment(FedAvgFT(train=train, finetune=finetune), run, fed, model_fn, config,
                                       predictions=kept[(a, "FedAvg-FT")])
        for method, wide in (("FedAvg", run.per_client()), ("FedAvg-FT", per_client_table(ft_frame))):
            per_client[(a, method)] = wide
            summaries.append({"alpha": a, "method": method, **protocol_summary(wide)})
        if results_dir is not None:
            run.save(Path(results_dir) / f"fedavg_alpha{a}")
            ft_frame.to_csv(Path(results_dir) / f"fedavg_alpha{a}" / "fedavg_ft_frame.csv", index=False)
    return FineTuning(runs, per_client, kept, pd.DataFrame(summaries).set_index(["alpha", "method"]))


def direction(change: float) -> str:
    """A change in words: ``"rises"``, ``"falls"``, ``"stays level"`` (within :data:`LEVEL`
    points) or ``"is n/a"`` (NaN).

    Examples
    --------
    >>> direction(1.2), direction(-0.3), direction(0.04), direction(float("nan"))
    ('rises', 'falls', 'stays level', 'is n/a')
    """
    if not np.isfinite(change):
        return "is n/a"
    return "rises" if change > LEVEL else ("falls" if change < -LEVEL else "stays level")


def by_points(change: float) -> str:
    """The size of a change: ``"by 1.2 points"``, nothing for NaN.

    Examples
    --------
    >>> by_points(-1.23), by_points(float("nan"))
    ('by 1.2 points', '')
    """
    return f"by {abs(change):.1f} points" if np.isfinite(change) else ""


def points_below(distance: float) -> str:
    """How far a value lies below a reference (``distance``: the reference minus the value):
    ``"2.5 points below"``, and ``"above"`` for a negative distance.

    Examples
    --------
    >>> points_below(2.54), points_below(-1.0), points_below(0.0)
    ('2.5 points below', '1.0 points above', '0.0 points below')
    """
    return f"{abs(distance):.1f} points {'below' if distance >= 0 else 'above'}"


def gains_or_loses(change: float) -> str:
    """A change as a gain: ``"gains 2.5 points"``, ``"loses 1.0 points"`` (no change: loses 0.0).

    Examples
    --------
    >>> gains_or_loses(2.54), gains_or_loses(-1.0)
    ('gains 2.5 points', 'loses 1.0 points')
    """
    return f"{'gains' if change > 0 else 'loses'} {abs(change):.1f} points"


def tradeoff_text(local: float, global_: float) -> str:
    """The sentence that reads fine-tuning's change of mean local and global accuracy (points):
    the personalization papers' trade-off when local accuracy rises while global accuracy falls."""
    if local > 0 and global_ < 0:
        return ("This is the trade-off the personalization chapters start from: a predictor fitted to the "
                "client's own label distribution loses recognition of the classes it rarely or never saw, "
                "and a mean over clients of local accuracy alone would not show it.")
    return ("In this run fine-tuning did not trade global for local accuracy, so the pattern reported "
            "by the personalization papers does not appear at these parameters.")


def mean_unseen(federation: Federation) -> float:
    """The mean number of classes a client of ``federation`` never trains on.

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> from fedlib.federation import make_federation
    >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    >>> mean_unseen(make_federation(ds, n_clients=2, partition="iid", global_test_per_class=10, seed=0))
    0.0
    """
    return float(federation.n_classes - federation.summary()["classes_seen"].mean())


def skew_words(unseen: Mapping[float, float], iid: float, accuracy: Mapping[float, float]) -> dict[str, str]:
    """Exercise 1 (how much skew breaks the global model?) in words.

    Parameters
    ----------
    unseen : mean unseen classes per client (:func:`mean_unseen`) per ``alpha``, from the least
        skewed to the most
    iid : FedAvg's global accuracy (%) on the IID partition
    accuracy : FedAvg's global accuracy (%) per ``alpha`` (the same ``alpha`` as ``unseen``)

    Returns
    -------
    dict
        ``unseen_text`` and ``acc_text`` (per ``alpha``), ``answer`` (the ``alpha`` where FedAvg falls
        more than 5 points below IID), ``caveat`` (whether the drops are ordered by ``alpha``) and
        ``unseen_trend`` (whether the unseen classes grow as ``alpha`` falls).

    Examples
    --------
    >>> words = skew_words({1.0: 0.2, 0.1: 5.0}, 90.0, {1.0: 88.0, 0.1: 80.0})
    >>> words["acc_text"]
    'α = 1: 88.0 % (2.0 points below IID); α = 0.1: 80.0 % (10.0 points below IID)'
    >>> words["answer"]
    'FedAvg falls more than 5 points below the IID anchor at α = 0.1 and not at α = 1'
    """
    alphas = list(unseen)
    drops = {a: iid - accuracy[a] for a in alphas}
    broken = [a for a in alphas if drops[a] > 5]
    kept_up = [a for a in alphas if drops[a] <= 5]
    if broken:
        answer = (f"FedAvg falls more than 5 points below the IID anchor at α = {', '.join(f'{a:g}' for a in broken)}"
                  + (f" and not at α = {', '.join(f'{a:g}' for a in kept_up)}" if kept_up else ""))
    else:
        answer = "no α falls more than 5 points below the IID anchor at this reduced scale"
    ordered = [drops[x] <= drops[y] for x, y in zip(alphas, alphas[1:])]
    if all(ordered):
        caveat = "The drops grow as α falls, as the unseen-class counts lead one to expect."
    else:
        x, y = next((x, y) for (x, y), ok in zip(zip(alphas, alphas[1:]), ordered) if not ok)
        caveat = (f"The drops are not ordered by α here (α = {x:g} drops more than α = {y:g}): at this "
                  "reduced scale one seed and a few rounds are too noisy to rank the skews, so this part "
                  "of the answer is inconclusive; the unseen-class counts above are exact.")
    grows = all(unseen[x] <= unseen[y] for x, y in zip(alphas, alphas[1:]))
    return {"unseen_text": "; ".join(f"α = {a:g}: {unseen[a]:.1f}" for a in alphas),
            "acc_text": "; ".join(f"α = {a:g}: {accuracy[a]:.1f} % ({points_below(drops[a])} IID)" for a in alphas),
            "answer": answer, "caveat": caveat,
            "unseen_trend": "grows steadily" if grows else "does not grow monotonically"}


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


def _percent(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.1f} %"


def rare_threshold_words(table: pd.DataFrame, n_clients: int) -> dict:
    """Exercise 2 (what counts as rare?) in words, from :func:`rare_thresholds` of FedAvg and
    FedAvg-FT.

    Returns
    -------
    dict
        ``text`` (per threshold), ``spread_fedavg`` and ``spread_ft`` (how far each method's ``F@25``
        moves across the thresholds, points), ``more_sensitive`` (whose ``F@25`` moves more, by more
        than 0.05 points: ``"FedAvg's"``, ``"FedAvg-FT's"`` or ``"neither"``), ``rare_ft_word``
        (FedAvg-FT's rare accuracy from the smallest threshold to the largest) and ``few`` (the
        clients with a rare class at the smallest threshold).

    Examples
    --------
    >>> table = pd.DataFrame({"rare per client": [0.5, 2.0], "clients with rare": [1, 4],
    ...                       "rare FedAvg": [50.0, 60.0], "F@25 FedAvg": [10.0, 10.0],
    ...                       "rare FedAvg-FT": [float("nan"), 40.0], "F@25 FedAvg-FT": [5.0, 8.0]},
    ...                      index=pd.Index([0.25, 1.0], name="rho"))
    >>> words = rare_threshold_words(table, 4)
    >>> words["text"].split("; ρ")[0]
    'ρ = 0.25: 0.5 rare classes per client on average, 1 of 4 clients with one; rare accuracy 50.0 % (FedAvg) and n/a (FedAvg-FT), F@25 10.0 % and 5.0 %'
    >>> words["more_sensitive"], words["rare_ft_word"], words["few"]
    ("FedAvg-FT's", 'n/a at one of the thresholds', 1)
    """
    text = "; ".join(
        f"ρ = {rho:g}: {r['rare per client']:.1f} rare classes per client on average, "
        f"{r['clients with rare']:.0f} of {n_clients} clients with one; rare accuracy "
        f"{_percent(r['rare FedAvg'])} (FedAvg) and {_percent(r['rare FedAvg-FT'])} (FedAvg-FT), "
        f"F@25 {_percent(r['F@25 FedAvg'])} and {_percent(r['F@25 FedAvg-FT'])}" for rho, r in table.iterrows())
    spread = {m: float(table[f"F@25 {m}"].max() - table[f"F@25 {m}"].min()) for m in METHODS}
    low, high = table.index[0], table.index[-1]
    d_rare_ft = float(table.loc[high, "rare FedAvg-FT"] - table.loc[low, "rare FedAvg-FT"])
    return {"text": text, "spread_fedavg": spread["FedAvg"], "spread_ft": spread["FedAvg-FT"],
            "more_sensitive": "FedAvg-FT's" if spread["FedAvg-FT"] > spread["FedAvg"] + 0.05 else
            "FedAvg's" if spread["FedAvg"] > spread["FedAvg-FT"] + 0.05 else "neither",
            "rare_ft_word": "n/a at one of the thresholds" if not np.isfinite(d_rare_ft) else
            f"{'rises' if d_rare_ft > 0 else 'falls'} by {abs(d_rare_ft):.1f} points",
            "few": int(table.loc[low, "clients with rare"])}


def learning_rate_words(iid: Sequence[float], skewed: Sequence[float], lr: float, larger_lr: float,
                        alpha: float) -> dict[str, str]:
    """Exercise 3 (a learning rate that drifts) in words: FedAvg's global accuracy (%) at ``lr``
    and at ``larger_lr``, on the IID partition (``iid``) and on the Dirichlet(``alpha``) one
    (``skewed``).

    Returns
    -------
    dict
        ``text``, ``iid_word`` and ``skew_word`` (each federation's change, :func:`gains_or_loses`)
        and ``answer`` (whether the skewed federation suffers more from the larger step).

    Examples
    --------
    >>> words = learning_rate_words((80.0, 82.0), (60.0, 55.0), 0.01, 0.05, 0.1)
    >>> words["text"], words["iid_word"], words["skew_word"]
    ('IID: 80.0 % at learning rate 0.01, 82.0 % at 0.05; α = 0.1: 60.0 % and 55.0 %', 'gains 2.0 points', 'loses 5.0 points')
    """
    d_iid, d_skew = iid[1] - iid[0], skewed[1] - skewed[0]
    return {"text": (f"IID: {iid[0]:.1f} % at learning rate {lr:g}, {iid[1]:.1f} % at {larger_lr:g}; "
                     f"α = {alpha:g}: {skewed[0]:.1f} % and {skewed[1]:.1f} %"),
            "iid_word": gains_or_loses(d_iid), "skew_word": gains_or_loses(d_skew),
            "answer": ("the skewed federation suffers more from the larger step, as client drift predicts"
                       if d_skew < d_iid else
                       "the skewed federation does not suffer more than the IID one here, so this reduced run "
                       "does not show the drift effect (more rounds, or a larger step, may be needed to see it)")}


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


def finetune_words(table: pd.DataFrame) -> dict[str, str]:
    """Exercise 4 (how much fine-tuning?) in words, from :func:`finetune_sweep`: ``text`` (local,
    global accuracy and ``F@25`` per number of epochs) and ``answer`` (the numbers of epochs that raise
    local accuracy without lowering ``F@25``).

    Examples
    --------
    >>> table = pd.DataFrame({"local": [0.5, 0.7, 0.9], "global": [0.6, 0.5, 0.4], "F@25": [0.2, 0.2, 0.1]},
    ...                      index=pd.Index([0, 1, 5], name="fine-tuning epochs"))
    >>> words = finetune_words(table)
    >>> words["text"]
    'FedAvg (no fine-tuning): local 50.0 %, global 60.0 %, F@25 20.0 %; 1 epoch: local 70.0 %, global 50.0 %, F@25 20.0 %; 5 epochs: local 90.0 %, global 40.0 %, F@25 10.0 %'
    >>> words["answer"]
    '1 epoch(s) raise local accuracy without lowering F@25'
    """
    base = table.loc[0]
    good = [e for e in table.index[1:]
            if table.loc[e, "local"] > base["local"] and table.loc[e, "F@25"] >= base["F@25"]]

    def label(e: int) -> str:
        return "FedAvg (no fine-tuning)" if e == 0 else "1 epoch" if e == 1 else f"{e} epochs"

    return {"text": "; ".join(f"{label(e)}: local {100 * r['local']:.1f} %, global {100 * r['global']:.1f} %, "
                              f"F@25 {100 * r['F@25']:.1f} %" for e, r in table.iterrows()),
            "answer": (f"{', '.join(map(str, good))} epoch(s) raise local accuracy without lowering F@25" if good else
                       "no number of epochs raises local accuracy without lowering F@25")}


__all__ = ["FLOORS", "LEVEL", "MEANS", "METHODS", "TAILS", "FineTuning", "by_points", "central_accuracy", "direction",
           "fedavg_and_finetune", "finetune_sweep", "finetune_words", "gains_or_loses", "learning_rate_words",
           "mean_unseen", "partition_label", "partition_table", "points_below", "rare_threshold_words",
           "rare_thresholds", "skew_words", "tradeoff_text"]
