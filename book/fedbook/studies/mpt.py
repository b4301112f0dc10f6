r"""The runs of the MPT experiments chapter (``notebooks/mpt_experiments.py``): the departure study
over seeds, remaining fractions and data sets, and what the chapter measures of it.

MPT: Jang et al., "MPT: Missing Prototype Tracking via Barycentric Reconstruction in Vehicular
Federated Learning", arXiv:2609.12771, Section V. One :class:`MPTStudy` holds the chapter's
settings and builds each run the same way: the seed's data subset, the departure scenario
(Section V-A, :func:`fedlib.federation.make_departure_scenario`), the MPT plug-in
(:class:`fedlib.algorithms.mpt.MPT`, every method's prototype from one training run), the loop's
configuration with the departure event, and the offline evaluation of the kept rounds
(:func:`fedlib.algorithms.mpt.evaluate_history`). Over it:

* :func:`figure_runs`: the per-round runs of Figure 4 and Figure 6, one per seed, and their
  history (read with :func:`per_seed`, :func:`seed_curves`, :func:`mean_at`, :func:`history_value`;
  drawn with :func:`round_axis`);
* :func:`fraction_table`: Table II, the last round's rare-class F1 per data set, fraction and seed;
* :func:`ldc_batch_runs`: LDC alone at another mini-batch (the chapter's LDC control);
* :func:`bytes_per_method`: Figure 5 (a), each method's bytes per client and round through the
  ledger; :func:`extra_work_times`: Figure 5 (b), each method's extra work relative to local
  training.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import MaxNLocator

from fedlib.algorithms.mpt import METHOD_PAYLOAD, MPT, MPTServer, evaluate_history
from fedlib.data import ArrayDataset, load_dataset
from fedlib.federation import DepartureScenario, make_departure_scenario
from fedlib.heads import ccvr_calibrate
from fedlib.loop import LoopConfig
from fedlib.results import RunResult
from fedlib.messages import from_state
from fedlib.models import build_model
from fedlib.protocol import Event
from fedlib.rng import LOCAL_TRAIN, torch_generator
from fedlib.run import run_federated
from fedlib.stats import ClassMoments
from fedlib.tracking import TrackingConfig, ldc_fit_map, reconstruct_mpt, sdc_client_sums
from fedlib.training import TrainConfig, local_train
from fedlib.validation import check_int

TIME_PARTS = ("re-embedding + statistics (every prototype method)", "SDC extra (client)", "LDC extra (client)",
              "server, all methods incl. CCVR (per round)", "CCVR server (virtual features + head)",
              "MPT server (reconstruction)")
"""The extra work :func:`extra_work_times` measures, in its order."""


@dataclass(frozen=True)
class MPTStudy:
    """The chapter's departure study: its settings and how each run is built from them.

    Parameters
    ----------
    rounds : int
        Communication rounds (>= 2).
    departure_round : int
        The round at whose start the departing client leaves, in ``[2, rounds]``.
    n_clients : int
        Clients (>= 2).
    rare_class : int
        The class the departing client holds almost all of.
    local_epochs, lr : int, float
        Local training of a round (SGD with momentum 0.9, mini-batches of ``batch``).
    global_test_per_class : int
        Samples of every class held out as the global test set.
    ldc_epochs, ldc_batch, ccvr_steps, ccvr_virtual : int
        LDC's map training and CCVR's head re-training (:class:`fedlib.algorithms.mpt.MPT`).
    n_samples : int or None, default None
        The seeded data subset's size (``None``: every sample).
    cifar_root : str or None, default None
        Where CIFAR lies (:func:`fedlib.data.load_dataset`).
    tracking : TrackingConfig, default TrackingConfig()
        MPT's settings.
    departing : int, default 0
        The departing client.
    batch : int, default 32
        The local training mini-batch.

    Raises
    ------
    ValueError
        On a departure round outside ``[2, rounds]`` or a departing client outside ``[0, n_clients)``.

    Examples
    --------
    >>> study = MPTStudy(rounds=4, departure_round=3, n_clients=4, rare_class=5, local_epochs=1, lr=0.05,
    ...                  global_test_per_class=10, ldc_epochs=2, ldc_batch=32, ccvr_steps=10, ccvr_virtual=20)
    >>> study.loop_config(7).events
    (Event(round=3, client=0, kind='leave'),)
    >>> dataclasses.replace(study, departure_round=5)
    Traceback (most recent call last):
    ...
    ValueError: departure_round must be in [2, rounds=4], got 5
    """

    rounds: int
    departure_round: int
    n_clients: int
    rare_class: int
    local_epochs: int
    lr: float
    global_test_per_class: int
    ldc_epochs: int
    ldc_batch: int
    ccvr_steps: int
    ccvr_virtual: int
    n_samples: int | None = None
    cifar_root: str | None = None
    tracking: TrackingConfig = TrackingConfig()
    departing: int = 0
    batch: int = 32
    _data: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_int("rounds", self.rounds, low=2)
        check_int("n_clients", self.n_clients, low=2)
        if not 1 < self.departure_round <= self.rounds:
            raise ValueError(f"departure_round must be in [2, rounds={self.rounds}], got {self.departure_round}")
        check_int("departing", self.departing, low=0, high=self.n_clients - 1)

    @classmethod
    def from_settings(cls, settings: Any, **values: Any) -> MPTStudy:
        """The study of a chapter's settings (:func:`fedbook.page.setup`): every field the settings
        have, then ``values`` (e.g. ``cifar_root``, ``tracking``)."""
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        return cls(**{n: getattr(settings, n) for n in names if hasattr(settings, n)}, **values)

    def data(self, name: str, seed: int) -> ArrayDataset:
        """The data set's seeded subset of the run seed (``load_dataset(..., seed=seed)``), loaded once."""
        if (name, seed) not in self._data:
            self._data[name, seed] = load_dataset(name, n_samples=self.n_samples, seed=seed, root=self.cifar_root)
        return self._data[name, seed]

    def model_fn(self, model: str, ds: ArrayDataset) -> Callable[[], torch.nn.Module]:
        """A fresh ``model`` (:func:`fedlib.models.build_model`) for the shapes of ``ds``."""
        return functools.partial(build_model, model, in_channels=ds.x.shape[1], n_classes=ds.n_classes,
                                 input_size=ds.x.shape[-1])

    def scenario(self, ds: ArrayDataset, fraction: float, seed: int) -> DepartureScenario:
        """The departure scenario of ``ds`` with the remaining rare ``fraction`` (the departing
        client holds the share ``1 - fraction``)."""
        return make_departure_scenario(ds, n_clients=self.n_clients, rare_class=self.rare_class,
                                       departing_share=1 - fraction, departing_client=self.departing,
                                       global_test_per_class=self.global_test_per_class, seed=seed)

    def algorithm(self, seed: int, payload: tuple[str, ...] | None = None, steps: int | None = None,
                  **overrides: Any) -> MPT:
        """The MPT plug-in of run ``seed``: every payload part unless ``payload`` is given, ``steps``
        local steps instead of epochs when given; ``overrides`` replace constructor arguments (e.g.
        ``ldc_batch``, ``history``, ``tracking``). The remaining rare samples are kept out of
        training (the paper's Fig. 7 (c): only the departing client trains on the rare class)."""
        train = TrainConfig(epochs=self.local_epochs, steps=steps, batch_size=self.batch, lr=self.lr, momentum=0.9)
        kw = dict(tracking=self.tracking, ldc_epochs=self.ldc_epochs, ldc_batch=self.ldc_batch,
                  ccvr_steps=self.ccvr_steps, ccvr_virtual=self.ccvr_virtual)
        kw.update(overrides)
        if payload is not None:
            kw["payload"] = payload
        return MPT(train=train, rare_class=self.rare_class, train_rare_on=(self.departing,), seed=seed, **kw)

    def loop_config(self, seed: int, rounds: int | None = None) -> LoopConfig:
        """``rounds`` (default the study's) with the departure event and the rare class's F1."""
        return LoopConfig(rounds=rounds or self.rounds, seed=seed,
                          events=(Event(self.departure_round, self.departing, "leave"),), f1_class=self.rare_class)

    def run(self, ds: ArrayDataset, model_fn: Callable[[], torch.nn.Module], fraction: float, seed: int, *,
            rounds: int | None = None, eval_rounds: Sequence[int] | None = None,
            **overrides: Any) -> tuple[RunResult, DepartureScenario, pd.DataFrame]:
        """One run: the scenario, the training run and the offline evaluation of ``eval_rounds``
        (default every kept round) on the global test set.

        ``overrides`` go to :meth:`MPTStudy.algorithm` (``payload``, ``steps``, constructor arguments).

        Returns
        -------
        (RunResult, DepartureScenario, DataFrame)
            The run, its scenario, and its history (``round, method, metric, value``:
            :func:`fedlib.algorithms.mpt.evaluate_history`).
        """
        sc = self.scenario(ds, fraction, seed)
        result = run_federated(self.algorithm(seed, **overrides), sc.federation, model_fn, self.loop_config(seed, rounds))
        history = evaluate_history(result.server, sc.federation.global_test, model_fn, rare_class=self.rare_class,
                                   rounds=eval_rounds, reg=self.tracking.reg)
        return result, sc, history


def figure_runs(study: MPTStudy, name: str, model_fn: Callable[[], torch.nn.Module], fraction: float,
                seeds: Sequence[int]) -> tuple[dict[int, RunResult], dict[int, DepartureScenario], pd.DataFrame]:
    """One run per seed on data set ``name`` at the remaining ``fraction``, every round evaluated
    (Figure 4 and Figure 6).

    Returns
    -------
    (dict, dict, DataFrame)
        The runs and the scenarios by seed, and the histories of every seed in one frame
        (``round, method, metric, value, seed``).
    """
    runs, scenarios, histories = {}, {}, []
    for s in seeds:
        runs[s], scenarios[s], history = study.run(study.data(name, s), model_fn, fraction, s)
        histories.append(history.assign(seed=s))
    return runs, scenarios, pd.concat(histories, ignore_index=True)


def per_seed(history: pd.DataFrame, metric: str) -> dict[int, pd.DataFrame]:
    """``{seed: frame round × method}`` of one ``metric`` of a history over seeds.

    Examples
    --------
    >>> h = pd.DataFrame({"round": [1, 1, 2, 2], "method": ["a", "b", "a", "b"], "metric": "f1",
    ...                   "value": [0.1, 0.2, 0.3, 0.4], "seed": 0})
    >>> float(per_seed(h, "f1")[0].loc[2, "b"])
    0.4
    """
    part = history[history["metric"] == metric]
    return {s: g.pivot(index="round", columns="method", values="value") for s, g in part.groupby("seed")}


def seed_curves(history: pd.DataFrame, metric: str, method: str, seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """One ``method``'s ``metric`` per round, one row per seed (the rounds of the first seed).

    Returns
    -------
    (ndarray, ndarray)
        The rounds, of shape (n_rounds,), and the values, of shape (len(seeds), n_rounds): what
        :func:`fedbook.claims.interval_band` turns into a figure's line and band.

    Examples
    --------
    >>> h = pd.DataFrame({"round": [1, 2, 1, 2], "method": "a", "metric": "f1", "value": [0.1, 0.3, 0.2, 0.5],
    ...                   "seed": [0, 0, 1, 1]})
    >>> rounds, values = seed_curves(h, "f1", "a", [1, 0])
    >>> rounds.tolist(), values.tolist()
    ([1, 2], [[0.2, 0.5], [0.1, 0.3]])
    """
    frames = per_seed(history, metric)
    return frames[seeds[0]].index.to_numpy(), np.stack([frames[s][method].to_numpy() for s in seeds])


def mean_at(history: pd.DataFrame, metric: str, round_: int, method: str) -> float:
    """The mean over seeds of one ``method``'s ``metric`` at ``round_`` (NaN without a row).

    Examples
    --------
    >>> h = pd.DataFrame({"round": [3, 3, 3], "method": ["a", "a", "b"], "metric": "f1", "value": [0.5, 0.7, 0.0]})
    >>> mean_at(h, "f1", 3, "a")
    0.6
    """
    rows = history[(history["metric"] == metric) & (history["round"] == round_) & (history["method"] == method)]
    return float(rows["value"].mean())


def history_value(history: pd.DataFrame, method: str, metric: str, round_: int | None = None) -> float:
    """One run's value of ``method``'s ``metric`` at ``round_`` (default the last round); for
    ``alpha`` (MPT's adaptive weight), its mean over the rounds.

    Examples
    --------
    >>> h = pd.DataFrame({"round": [5, 6, 5, 6], "method": "mpt", "metric": ["f1", "f1", "alpha", "alpha"],
    ...                   "value": [0.5, 0.7, 0.2, 0.4]})
    >>> history_value(h, "mpt", "f1"), history_value(h, "mpt", "f1", 5), history_value(h, "mpt", "alpha")
    (0.7, 0.5, 0.30000000000000004)
    """
    rows = history[(history["method"] == method) & (history["metric"] == metric)]
    if metric == "alpha":
        return float(rows["value"].mean())
    return float(rows[rows["round"] == (rows["round"].max() if round_ is None else round_)]["value"].iloc[0])


def distance_relation(history: pd.DataFrame, round_: int, method: str, reference: str = "stored_residual") -> str:
    """Whether ``method``'s prototype is closer to or farther from the oracle than ``reference``'s
    at ``round_``, in words, with both mean distances (:func:`mean_at` of ``dist_oracle``).

    Examples
    --------
    >>> h = pd.DataFrame({"round": 9, "method": ["a", "b"], "metric": "dist_oracle", "value": [1.0, 2.5]})
    >>> distance_relation(h, 9, "a", "b")
    'closer to the oracle (1.00 against 2.50)'
    """
    a, b = mean_at(history, "dist_oracle", round_, method), mean_at(history, "dist_oracle", round_, reference)
    return f"{'closer to' if a < b else 'farther from'} the oracle ({a:.2f} against {b:.2f})"


def fraction_table(study: MPTStudy, datasets: Sequence[str], fractions: Sequence[float], seeds: Sequence[int],
                   model: str, methods: Sequence[str], *, keep: tuple[str, float] | None = None,
                   before: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, dict]]:
    """Table II: one run per data set, remaining fraction and seed (in that order), the last round
    evaluated (and the round ``before``, when given: the same run read once more, no training).

    Parameters
    ----------
    study : MPTStudy
    datasets, fractions, seeds : sequence
        The cells and the seeds.
    model : str
        The table's model (:meth:`MPTStudy.model_fn`).
    methods : sequence of str
        The methods whose rare-class F1 the table holds.
    keep : (str, float), optional
        The cell ``(data set, fraction)`` whose final models are returned.
    before : int, optional
        A round in ``[1, rounds)`` also evaluated (e.g. the last round before the departure), its
        rare-class F1 in the column ``f1_before``.

    Returns
    -------
    (DataFrame, DataFrame, dict)
        The rare-class F1 at the last round (``dataset, fraction, seed, method, f1, n_remaining``:
        the remaining rare samples; and ``f1_before`` with ``before``), MPT-lite's growth factor at
        the last round (``dataset, fraction, seed, growth``), and the final model arrays of the
        ``keep`` cell by seed (``"model/"`` stripped).

    Raises
    ------
    ValueError
        On ``before`` outside ``[1, rounds)``.
    """
    if before is not None:
        check_int("before", before, low=1, high=study.rounds - 1)
    rounds = [study.rounds] if before is None else [before, study.rounds]
    rows, growth_rows, models = [], [], {}
    for name in datasets:
        for frac in fractions:
            for s in seeds:
                ds = study.data(name, s)
                res, sc, h = study.run(ds, study.model_fn(model, ds), frac, s, eval_rounds=rounds)
                f1 = h[h["metric"] == "f1"]
                f1s = f1[f1["round"] == study.rounds].set_index("method")["value"]
                pre = f1[f1["round"] == before].set_index("method")["value"] if before is not None else None
                rows += [{"dataset": name, "fraction": frac, "seed": s, "method": m, "f1": float(f1s[m]),
                          "n_remaining": sc.n_rare_remaining,
                          **({} if pre is None else {"f1_before": float(pre[m])})} for m in methods]
                growth_rows.append({"dataset": name, "fraction": frac, "seed": s,
                                    "growth": float(res.server.meta.get("growth", float("nan")))})
                if (name, frac) == keep:
                    models[s] = res.server.with_prefix("model/")
    return pd.DataFrame(rows), pd.DataFrame(growth_rows), models


def ldc_batch_runs(study: MPTStudy, name: str, model: str, fraction: float, seeds: Sequence[int],
                   batch: int) -> tuple[list[float], dict[int, dict]]:
    """LDC alone (its payload only) with mini-batches of ``batch`` for its map, one run per seed,
    the last round evaluated.

    Returns
    -------
    (list of float, dict)
        LDC's rare-class F1 at the last round per seed, and the final model arrays by seed
        (``"model/"`` stripped; compare them with :func:`largest_difference`).
    """
    f1, models = [], {}
    for s in seeds:
        ds = study.data(name, s)
        res, _, h = study.run(ds, study.model_fn(model, ds), fraction, s, eval_rounds=[study.rounds],
                              payload=METHOD_PAYLOAD["ldc"], ldc_batch=batch)
        f1.append(history_value(h, "ldc", "f1"))
        models[s] = res.server.with_prefix("model/")
    return f1, models


def largest_difference(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """The largest absolute difference between two models' parameters (of ``b``'s names), in float64.

    Raises
    ------
    ValueError
        On a parameter of ``b`` that ``a`` lacks.

    Examples
    --------
    >>> largest_difference({"w": torch.ones(2)}, {"w": torch.tensor([1.0, 0.5])})
    0.5
    """
    missing = sorted(set(b) - set(a))
    if missing:
        raise ValueError(f"largest_difference: the first model lacks {missing}; it has {sorted(a)}")
    return max(float((a[k].double() - v.double()).abs().max()) for k, v in b.items())


def bytes_per_method(study: MPTStudy, name: str, model_fn: Callable[[], torch.nn.Module], fraction: float,
                     seeds: Sequence[int], methods: Sequence[str]) -> pd.DataFrame:
    """Figure 5 (a): each method alone, its clients sending only its payload
    (:data:`fedlib.algorithms.mpt.METHOD_PAYLOAD`), through the ledger.

    Per seed, a two-round run per method on half of the seed's data (message sizes depend on
    shapes, not on the number of samples), one local step per round, no history, the client
    leaving at round 2; the training bytes of round 2 (after the departure, with SDC's and LDC's
    extras) per client, up and down (:meth:`fedlib.messages.Ledger.per_client_and_round`).

    Returns
    -------
    pandas.DataFrame
        ``seed, method, bytes, relative`` (the bytes over FedAvg's of the same seed).

    Raises
    ------
    ValueError
        On ``methods`` without ``"fedavg"`` (the reference) or with a method that has no payload.
    """
    unknown = [m for m in methods if m not in METHOD_PAYLOAD]
    if "fedavg" not in methods or unknown:
        raise ValueError(f"methods must include 'fedavg' and name methods of METHOD_PAYLOAD, got {list(methods)}; "
                         f"valid: {', '.join(METHOD_PAYLOAD)}")
    rows = []
    for s in seeds:
        ds = study.data(name, s)
        small = study.scenario(ds.subset(np.arange(0, len(ds), 2)), fraction, s)  # half the data: every client keeps samples at the smoke profile
        for m in methods:
            alg = study.algorithm(s, payload=METHOD_PAYLOAD[m], steps=1, history=False, ldc_epochs=1, ccvr_steps=1)
            cfg = LoopConfig(rounds=2, seed=s, events=(Event(2, study.departing, "leave"),))  # sizes do not depend on the round
            ledger = run_federated(alg, small.federation, model_fn, cfg).ledger
            rows.append({"seed": s, "method": m, "bytes": ledger.per_client_and_round(phase="train", rounds=2)})
    frame = pd.DataFrame(rows)
    frame["relative"] = frame["bytes"] / frame["seed"].map(frame.query("method == 'fedavg'").set_index("seed")["bytes"])
    return frame


def median_seconds(fn: Callable[[], Any], repeats: int = 3) -> float:
    """The median wall-clock seconds of ``repeats`` calls of ``fn`` (``time.perf_counter``).

    Examples
    --------
    >>> median_seconds(lambda: None) >= 0
    True
    """
    check_int("repeats", repeats, low=1)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def extra_work_times(study: MPTStudy, result: RunResult, scenario: DepartureScenario,
                     model_fn: Callable[[], torch.nn.Module], seed: int) -> dict[str, float]:
    """Figure 5 (b): the extra work each method adds to a round, relative to one client's local
    training of a round (median of 3 repeats; LDC's map training once), measured on the final
    model of ``result`` and the data of the first remaining client of ``scenario``.

    The parts (:data:`TIME_PARTS`): the clients' re-embedding and class statistics (every prototype
    method); SDC's second embedding and drift sums; LDC's second embedding and map training (the
    old embedding a stand-in: the current one plus noise); the server's aggregation of the run's
    last round (every method together: MPT's reconstruction, CCVR's virtual features and head);
    and, apart, the two server computations the paper's Figure 5 (b) compares: CCVR's
    calibration (:func:`fedlib.heads.ccvr_calibrate` with the study's virtual features and steps)
    and MPT's reconstruction (:func:`fedlib.tracking.reconstruct_mpt`), each on the run's last
    prototypes, covariance and head (their cost depends on the shapes; the class covariances and
    the rare samples' statistics are stand-ins of the right shapes: the pooled covariance, the
    rare prototype). These two are NaN when the run never tracked (no departure snapshot).

    Returns
    -------
    dict of str to float
        Each part's seconds over the local training's.
    """
    client = scenario.federation.clients[1 if scenario.departing_client == 0 else 0]
    x, y = client.train.x, client.train.y
    model = model_fn()
    model.load_state_dict(result.server.with_prefix("model/"))
    init = {k: v.clone() for k, v in model.state_dict().items()}

    def train_once():
        model.load_state_dict(init)
        local_train(model, x, y, TrainConfig(epochs=study.local_epochs, batch_size=study.batch, lr=study.lr),
                    torch_generator(seed, LOCAL_TRAIN))

    @torch.no_grad()
    def embed():
        model.eval()
        return model.embed(x).double()

    z_now = embed()
    z_old = z_now + 0.01 * torch.randn(z_now.shape, generator=torch_generator(seed, LOCAL_TRAIN, 1), dtype=z_now.dtype)
    t_train = median_seconds(train_once)
    model.load_state_dict(init)
    t_stats = median_seconds(lambda: ClassMoments.from_features(embed(), y, scenario.federation.n_classes))
    t_sdc = median_seconds(lambda: (embed(), sdc_client_sums(z_old, z_now, z_now.mean(0))))
    t_ldc = median_seconds(lambda: (embed(), ldc_fit_map(z_old, z_now, epochs=study.ldc_epochs, batch_size=study.ldc_batch,
                                                         generator=torch_generator(seed, LOCAL_TRAIN))), repeats=1)
    server = float(result.server_seconds[-1])
    t_ccvr = t_mpt = float("nan")
    state = from_state(MPTServer, result.server)
    if state.departure is not None and state.departure.snapshot is not None and state.cov is not None:
        snap, means, cov = state.departure.snapshot, state.last_means, state.cov
        C, rare = means.shape[0], int(study.rare_class)
        rem = state.departure.remaining.tolist()
        head_w, head_b = model.head.weight.detach().clone(), model.head.bias.detach().clone()
        t_ccvr = median_seconds(lambda: ccvr_calibrate(
            torch.nan_to_num(means), cov.expand(C, -1, -1), torch.full((C,), 100.0, dtype=torch.float64), head_w,
            head_b, n_virtual=study.ccvr_virtual, steps=study.ccvr_steps, reg=study.tracking.reg,
            generator=torch_generator(seed, LOCAL_TRAIN, 2)))
        t_mpt = median_seconds(lambda: reconstruct_mpt(snap, means[rem], cov, 3.0, means[rare], cov, study.tracking))
    return {part: t / t_train for part, t in zip(TIME_PARTS, (t_stats, t_sdc, t_ldc, server, t_ccvr, t_mpt))}


def round_axis(ax, departure_round: int) -> None:
    """A per-round figure's x axis: integer round ticks, the label, and the departure marked (a
    grey line half a round before ``departure_round``)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axvline(departure_round - 0.5, color="grey", lw=1)
    ax.set_xlabel("round")


__all__ = ["MPTStudy", "TIME_PARTS", "bytes_per_method", "distance_relation", "extra_work_times", "figure_runs",
           "fraction_table", "history_value", "largest_difference", "ldc_batch_runs", "mean_at", "median_seconds",
           "per_seed", "round_axis", "seed_curves"]
