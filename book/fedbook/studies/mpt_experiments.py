r"""The runs of the MPT experiments chapter (``notebooks/mpt_experiments.py``): the departure study
over seeds, remaining fractions and data sets, what the chapter reads of it, and its figures.

MPT: Jang et al., "MPT: Missing Prototype Tracking via Barycentric Reconstruction in Vehicular
Federated Learning", arXiv:2609.12771, Section V. One :class:`MPTStudy` holds the chapter's
settings and builds each run the same way: the seed's data subset, the departure scenario
(Section V-A, :func:`fedlib.federation.make_departure_scenario`), the MPT plug-in
(:class:`fedlib.algorithms.mpt.MPT`, every method's prototype from one training run), the loop's
configuration with the departure event, and the offline evaluation of the kept rounds
(:func:`fedlib.algorithms.mpt.evaluate_history`).

The chapter declares its experiments as studies (:class:`fedbook.study.Study`) whose cells are
functions of this module, one seed and one setting each:

* :func:`figure_cell`: the per-round run of Figure 4 and Figure 6 and, on its final model, the
  extra work of each method (Figure 5 (b), :func:`extra_work_times`);
* :func:`table_cell`: Table II, the last round's rare-class F1 of one data set and fraction;
* :func:`bytes_cell`: Figure 5 (a), each method's bytes per client and round through the ledger;
* :func:`reduced_cell`: the exercises' reduced runs (MPT's payload only).

The figure and table cells also measure whether the backbone was stable at the departure
(:func:`spread_change`: how much the remaining classes' within-class variance changes in the round
after it), the value of the chapter's regime check; :func:`paper_lead` reads the paper's Table II
(:data:`TABLE_II_NUIMAGES`) for the smallest effect of interest of the claim against all baselines.

What the chapter reads of the frames: the claim-ready frames (:func:`table_frames`,
:func:`stability_by_seed`, :func:`distance_seed`, :func:`figure_frames`, :func:`backbone_frame`),
the numbers of its prose (:func:`data_numbers`, :func:`resolution_numbers`, :func:`transport_numbers`,
:func:`scenario_numbers`, :func:`figure_numbers`, :func:`table_numbers`, :func:`ldc_numbers`,
:func:`distance_numbers`, :func:`cost_numbers`, :func:`regime_numbers`, :func:`exercise_numbers`,
:func:`ldc_steps_numbers`), its tables (:func:`last_round_table`,
:func:`fraction_tables`, :func:`distance_table`, :func:`bytes_table`, :func:`time_table`) and its
figures (:func:`plot_scenario`, :func:`plot_rounds`, :func:`plot_distances`,
:func:`plot_distance_f1`, :func:`plot_cost`: each returns its figure closed, so that a notebook cell
ending with the call shows it once); a history over seeds is read with :func:`per_seed`,
:func:`seed_curves`, :func:`mean_at` and :func:`history_value`; :func:`fedbook.page.save_frames` keeps the
tidy frames as CSV files (the chapter's ``results_dir``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import MaxNLocator
from scipy.stats import t as student_t

from fedbook.claims import RESOLUTION_SHARE, UNTESTABLE_RESOLUTION, ClaimResult
from fedbook.intervals import interval_band, mean_interval, seed_table
from fedbook.tables import rows_where
from fedlib.algorithms.mpt import METHOD_PAYLOAD, MPT, VARIANT, MPTServer, evaluate_history
from fedlib.data import ArrayDataset, load_dataset, plot_partition
from fedlib.federation import DepartureScenario, make_departure_scenario
from fedlib.heads import ccvr_calibrate
from fedlib.loop import LoopConfig
from fedlib.messages import State, from_state
from fedlib.results import RunResult
from fedlib.models import build_model
from fedlib.protocol import Event
from fedlib.rng import LOCAL_TRAIN, torch_generator
from fedlib.run import run_federated
from fedlib.stats import ClassMoments
from fedlib.tracking import TrackingConfig, ldc_fit_map, ldc_steps_per_round, reconstruct_mpt, sdc_client_sums
from fedlib.training import TrainConfig, local_train
from fedlib.validation import check_int

TIME_PARTS = ("re-embedding + statistics (every prototype method)", "SDC extra (client)", "LDC extra (client)",
              "server, all methods incl. CCVR (per round)", "CCVR server (virtual features + head)",
              "MPT server (reconstruction)")
"""The extra work :func:`extra_work_times` measures, in its order."""

TIME_KEYS = ("stats", "sdc", "ldc", "server", "ccvr", "mpt")
"""The short name of each part of :data:`TIME_PARTS` (the prose's ``time_<key>``)."""

LABELS = {"fedavg": "FedAvg (softmax)", "ccvr": "CCVR", "icarl": "iCaRL-NME", "sdc": "SDC", "ldc": "LDC",
          "frozen": "frozen prototype", "mpt_lite": "MPT-lite", "mpt": "MPT", "oracle": "oracle (unavailable)",
          "barycentric": "barycentric only", "stored_residual": "barycentric + stored residual",
          "transported": "barycentric + transported residual (no projector)",
          "mpt_predicted": "MPT, predicted residual only", "mpt_measured": "MPT, measured residual only"}
"""How the chapter's tables and figures name each method."""

EX_DEFAULT = "default (affine span, rare noise, Euclidean)"
"""How Exercise 3 names MPT with its default settings."""

TABLE_II_NUIMAGES = pd.DataFrame(
    {0.01: [0.384, 0.393, 0.435, 0.421, 0.516], 0.02: [0.433, 0.419, 0.436, 0.425, 0.510],
     0.05: [0.478, 0.459, 0.456, 0.457, 0.513], 0.1: [0.479, 0.434, 0.451, 0.451, 0.509]},
    index=pd.Index(["ccvr", "icarl", "sdc", "ldc", "mpt"], name="method")).rename_axis(columns="fraction")
"""The paper's Table II, nuImages (Truck), three-layer CNN: the rare-class F1 of MPT and of the four
baselines it reports (FedAvg is in Figure 4 only), by remaining fraction (the means; the ± parts left out)."""


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
        Samples of every class held out as the global test set (every data set not in
        ``test_per_class``).
    ldc_epochs, ldc_batch, ccvr_steps, ccvr_virtual : int
        LDC's map training and CCVR's head re-training (:class:`fedlib.algorithms.mpt.MPT`).
    n_samples : int or None, default None
        The seeded data subset's size (``None``: every sample).
    cifar_root : str or None, default None
        Where CIFAR lies (:func:`fedlib.data.datasets.load_dataset`).
    tracking : TrackingConfig, default TrackingConfig()
        MPT's settings.
    departing : int, default 0
        The departing client.
    batch : int, default 32
        The local training mini-batch.
    test_per_class : tuple of (str, int) pairs, default ()
        A data set's own global test size per class, by name (:meth:`test_size`): the rare
        class's F1 resolves one test image in that many, so a data set with the images for it
        holds out more.
    drift_samples : str, default "rare"
        SDC's and LDC's sample budget (:data:`fedlib.algorithms.mpt.DRIFT_SAMPLES`): the remaining
        rare-class samples (the paper's) or every sample of the remaining clients.

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
    test_per_class: tuple[tuple[str, int], ...] = ()
    drift_samples: str = "rare"

    def __post_init__(self) -> None:
        object.__setattr__(self, "test_per_class", tuple((str(k), int(v)) for k, v in dict(self.test_per_class).items()))
        for name, n in self.test_per_class:
            check_int(f"test_per_class[{name!r}]", n, low=1)
        check_int("rounds", self.rounds, low=2)
        check_int("n_clients", self.n_clients, low=2)
        if not 1 < self.departure_round <= self.rounds:
            raise ValueError(f"departure_round must be in [2, rounds={self.rounds}], got {self.departure_round}")
        check_int("departing", self.departing, low=0, high=self.n_clients - 1)
        # the loaded data sets, by (name, seed): a cache, not a setting (no field: a study's cache key
        # and its equality cover its settings only)
        object.__setattr__(self, "_data", {})
        # the figure runs of this process, by (dataset, model, fraction, seed), until a table cell of the
        # same run takes it (:func:`table_cell`: the same training, read at other rounds) or
        # :meth:`forget_runs`; never pickled (__getstate__)
        object.__setattr__(self, "_runs", {})

    def __getstate__(self) -> dict[str, Any]:
        """The study's state for pickling (a study sent to a worker process or a Ray task) without
        the figure runs this process keeps (:meth:`forget_runs`): they stay with the process that
        ran them."""
        state = dict(self.__dict__)
        state["_runs"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def forget_runs(self) -> int:
        """Drop the figure runs this process keeps for a table cell (:func:`figure_cell`) that has
        not read them, e.g. once the table's study has run (its cells read from a cache or run in
        other processes take none); the number dropped.

        Examples
        --------
        >>> study = MPTStudy(rounds=4, departure_round=3, n_clients=4, rare_class=5, local_epochs=1, lr=0.05,
        ...                  global_test_per_class=10, ldc_epochs=2, ldc_batch=32, ccvr_steps=10, ccvr_virtual=20)
        >>> study.forget_runs()
        0
        """
        n = len(self._runs)
        self._runs.clear()
        return n

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

    def test_size(self, name: str) -> int:
        """The global test images per class of data set ``name`` (``test_per_class``, else
        ``global_test_per_class``).

        Examples
        --------
        >>> s = MPTStudy(rounds=4, departure_round=3, n_clients=4, rare_class=5, local_epochs=1, lr=0.05,
        ...              global_test_per_class=10, ldc_epochs=2, ldc_batch=32, ccvr_steps=10, ccvr_virtual=20,
        ...              test_per_class={"mnist5k": 400})
        >>> s.test_size("mnist5k"), s.test_size("uci")
        (400, 10)
        """
        return dict(self.test_per_class).get(name, self.global_test_per_class)

    def model_fn(self, model: str, ds: ArrayDataset) -> Callable[[], torch.nn.Module]:
        """A fresh ``model`` (:func:`fedlib.models.build_model`) for the shapes of ``ds``."""
        return functools.partial(build_model, model, in_channels=ds.x.shape[1], n_classes=ds.n_classes,
                                 input_size=ds.x.shape[-1])

    def scenario(self, ds: ArrayDataset, fraction: float, seed: int) -> DepartureScenario:
        """The departure scenario of ``ds`` with the remaining rare ``fraction`` (the departing
        client holds the share ``1 - fraction``)."""
        return make_departure_scenario(ds, n_clients=self.n_clients, rare_class=self.rare_class,
                                       departing_share=1 - fraction, departing_client=self.departing,
                                       global_test_per_class=self.test_size(ds.name), seed=seed)

    def algorithm(self, seed: int, payload: tuple[str, ...] | None = None, steps: int | None = None,
                  **overrides: Any) -> MPT:
        """The MPT plug-in of run ``seed``: every payload part unless ``payload`` is given, ``steps``
        local steps instead of epochs when given; ``overrides`` replace constructor arguments (e.g.
        ``ldc_batch``, ``history``, ``tracking``). The remaining rare samples are kept out of
        training (the paper's Fig. 7 (c): only the departing client trains on the rare class)."""
        train = TrainConfig(epochs=self.local_epochs, steps=steps, batch_size=self.batch, lr=self.lr, momentum=0.9)
        kw = dict(tracking=self.tracking, ldc_epochs=self.ldc_epochs, ldc_batch=self.ldc_batch,
                  drift_samples=self.drift_samples, ccvr_steps=self.ccvr_steps, ccvr_virtual=self.ccvr_virtual)
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
        With ``eval_rounds`` given, CCVR's head is calibrated at those rounds only
        (``MPT(ccvr_rounds=eval_rounds)``: an evaluator's readout, nothing else of the run reads it).

        Returns
        -------
        (RunResult, DepartureScenario, DataFrame)
            The run, its scenario, and its history (``round, method, metric, value``:
            :func:`fedlib.algorithms.mpt.evaluate_history`).
        """
        sc = self.scenario(ds, fraction, seed)
        ccvr = {} if eval_rounds is None else {"ccvr_rounds": tuple(eval_rounds)}
        result = run_federated(self.algorithm(seed, **{**ccvr, **overrides}), sc.federation, model_fn,
                               self.loop_config(seed, rounds))
        return result, sc, self.evaluate(result, sc, model_fn, eval_rounds)

    def evaluate(self, result: RunResult, scenario: DepartureScenario, model_fn: Callable[[], torch.nn.Module],
                 eval_rounds: Sequence[int] | None = None) -> pd.DataFrame:
        """The offline evaluation of a run's kept rounds ``eval_rounds`` (default every kept round)
        on the global test set of ``scenario`` (:func:`fedlib.algorithms.mpt.evaluate_history`, the
        study's readout regularization)."""
        return evaluate_history(result.server, scenario.federation.global_test, model_fn, rare_class=self.rare_class,
                                rounds=eval_rounds, reg=self.tracking.reg)



def paper_lead(fractions: Sequence[float]) -> tuple[float, str, list[float]]:
    """The paper's lead of MPT over its strongest baseline for the fraction table's comparison:
    in :data:`TABLE_II_NUIMAGES` (the paper's default data set), MPT − each baseline averaged over
    the ``fractions`` the table reports, the smallest of them (the baseline every claim against all
    baselines is bound by); over all four of the table's fractions when it reports none of them.

    Returns
    -------
    (float, str, list of float)
        The lead in F1 (0–1), the baseline it is over and the table's fractions it averages (for
        the chapter to say which).

    Examples
    --------
    >>> lead, baseline, used = paper_lead([0.02, 0.1])  # (.510 − .433 + .509 − .479) / 2
    >>> round(lead, 4), baseline, used
    (0.0535, 'ccvr', [0.02, 0.1])
    >>> paper_lead([0.2, 0.5])  # none reported: the table's four fractions (.512 − .4445)
    (0.0675, 'sdc', [0.01, 0.02, 0.05, 0.1])
    """
    table = TABLE_II_NUIMAGES
    cols = [c for c in table.columns if any(math.isclose(c, f) for f in fractions)] or list(table.columns)
    means = table[cols].mean(axis=1)
    leads = means["mpt"] - means.drop("mpt")
    return float(leads.min()), str(leads.idxmin()), [float(c) for c in cols]


def spread_change(server: State, departure_round: int) -> dict[str, float]:
    r"""How much the remaining classes' within-class spread changes in the round after the departure.

    The spread is the total within-class variance of the remaining classes,
    :math:`\operatorname{tr}\Sigma_r` of the pooled covariance the server computed from round ``r``'s
    statistics (kept in the run's history, :class:`fedlib.algorithms.mpt.KeptRound`), at the
    departure round :math:`d` (under the model the departing client last trained) and at
    :math:`d + 1` (after the first round of training without it). A backbone whose features have
    settled changes it little; one still reshaping its features at the departure changes it by a
    large factor, either way.

    Returns
    -------
    dict of str to float
        ``variance_departure`` (:math:`\operatorname{tr}\Sigma_d`), ``variance_after``
        (:math:`\operatorname{tr}\Sigma_{d+1}`), ``growth`` (their ratio) and ``change``
        (``max(growth, 1 / growth)``: the factor of the change, up or down); NaN where a round was
        not kept (a run that ends at the departure round, no history or no scatter statistics).
    """
    check_int("departure_round", departure_round, low=1)
    kept = from_state(MPTServer, server).history

    def variance(r: int) -> float:
        k = kept.get(r)
        return float(torch.trace(k.cov)) if k is not None and k.cov is not None else float("nan")

    before, after = variance(departure_round), variance(departure_round + 1)
    growth = after / before if before > 0 and after > 0 else float("nan")
    return {"variance_departure": before, "variance_after": after, "growth": growth,
            "change": max(growth, 1 / growth) if math.isfinite(growth) else float("nan")}


# ----------------------------------------------------------------- the studies' cells
def _run_frame(**values: Any) -> pd.DataFrame:
    """One row of a cell's own values (a run's growth factor, its seconds)."""
    return pd.DataFrame({k: [v] for k, v in values.items()})


def figure_cell(study: MPTStudy, seed: int, *, dataset: str, fraction: float, model: str) -> dict[str, pd.DataFrame]:
    """One figure run (Figure 4 and Figure 6): ``dataset`` at the remaining ``fraction`` with
    ``model``, every round evaluated, and the extra work of each method measured on its final
    model (Figure 5 (b), :func:`extra_work_times`). The run stays in the study's memory until the
    table cell of the same data set, fraction, model and seed takes it (:func:`table_cell`: the same
    training, read at two of its rounds; in the same process only, e.g. ``workers=1``) or
    :meth:`MPTStudy.forget_runs` drops it; a pickled study leaves it behind.

    Returns
    -------
    dict of str to DataFrame
        ``history``: the run's history (``round, method, metric, value``:
        :func:`fedlib.algorithms.mpt.evaluate_history`); ``figure_runs``: one row, MPT-lite's growth
        factor at the last round (``growth``, NaN when the run never tracked) and the run's
        ``seconds``; ``times``: ``part, relative`` (:data:`TIME_PARTS`, over a client's local training);
        ``stability``: one row, the remaining classes' spread at the departure round and the round
        after (:func:`spread_change`: ``variance_departure, variance_after, growth, change``).
    """
    start = time.perf_counter()
    ds = study.data(dataset, seed)
    model_fn = study.model_fn(model, ds)
    result, scenario, history = study.run(ds, model_fn, fraction, seed)
    study._runs[dataset, model, fraction, seed] = result, scenario  # for the table cell of this run
    seconds = time.perf_counter() - start
    times = extra_work_times(study, result, scenario, model_fn, seed)
    return {"history": history,
            "figure_runs": _run_frame(growth=float(result.server.meta.get("growth", float("nan"))), seconds=seconds),
            "times": pd.DataFrame({"part": list(times), "relative": list(times.values())}),
            "stability": _run_frame(**spread_change(result.server, study.departure_round))}


def table_cell(study: MPTStudy, seed: int, *, dataset: str, fraction: float, model: str, methods: Sequence[str],
               before: int | None = None) -> dict[str, pd.DataFrame]:
    """One run of Table II: ``dataset`` at the remaining ``fraction`` with ``model``, the last round
    evaluated (and the round ``before``, when given: the same run read once more, no training).
    A figure run of the same data set, fraction, model and seed done earlier in this process
    (:func:`figure_cell`) is the same training: the cell reads it instead of training again (the
    same numbers; its ``seconds`` are then this cell's reading only).

    Returns
    -------
    dict of str to DataFrame
        ``table``: one row per method of ``methods``, ``method, f1, n_remaining`` (the rare-class
        F1 at the last round, the remaining rare samples) and, with ``before``, ``f1_before``;
        ``table_distances``: one row per prototype method, ``method, dist`` (the Mahalanobis
        distance of its rare-class prototype to the oracle at the last round);
        ``table_runs``: one row, MPT-lite's growth factor at the last round (``growth``) and the
        run's ``seconds``; ``table_stability``: one row, the remaining classes' spread at the
        departure round and the round after (:func:`spread_change`).

    Raises
    ------
    ValueError
        On ``before`` outside ``[1, rounds)``.
    """
    if before is not None:
        check_int("before", before, low=1, high=study.rounds - 1)
    start = time.perf_counter()
    ds = study.data(dataset, seed)
    eval_rounds = [study.rounds] if before is None else [before, study.rounds]
    shared = study._runs.pop((dataset, model, fraction, seed), None)  # the figure run of these settings, if any
    if shared is None:
        result, scenario, history = study.run(ds, study.model_fn(model, ds), fraction, seed, eval_rounds=eval_rounds)
    else:
        result, scenario = shared
        history = study.evaluate(result, scenario, study.model_fn(model, ds), eval_rounds)
    f1 = history[history["metric"] == "f1"]
    last = f1[f1["round"] == study.rounds].set_index("method")["value"]
    pre = f1[f1["round"] == before].set_index("method")["value"] if before is not None else None
    table = pd.DataFrame([{"method": m, "f1": float(last[m]), "n_remaining": scenario.n_rare_remaining,
                           **({} if pre is None else {"f1_before": float(pre[m])})} for m in methods])
    runs = _run_frame(growth=float(result.server.meta.get("growth", float("nan"))),
                      seconds=time.perf_counter() - start)
    dist = history[(history["metric"] == "dist_oracle") & (history["round"] == study.rounds)]
    return {"table": table, "table_runs": runs,
            "table_distances": dist[["method", "value"]].rename(columns={"value": "dist"}).reset_index(drop=True),
            "table_stability": _run_frame(**spread_change(result.server, study.departure_round))}


def bytes_cell(study: MPTStudy, seed: int, *, dataset: str, fraction: float, model: str,
               methods: Sequence[str]) -> pd.DataFrame:
    """Figure 5 (a) at one seed: each method alone, its clients sending only its payload
    (:data:`fedlib.algorithms.mpt.METHOD_PAYLOAD`), through the ledger.

    A two-round run per method on half of the seed's data (message sizes depend on shapes, not on
    the number of samples), one local step per round, no history, the client leaving at round 2;
    the training bytes of round 2 (after the departure, with SDC's and LDC's extras) per client,
    up and down (:meth:`fedlib.messages.Ledger.per_client_and_round`).

    Returns
    -------
    pandas.DataFrame
        ``method, bytes, relative`` (the bytes over FedAvg's).

    Raises
    ------
    ValueError
        On ``methods`` without ``"fedavg"`` (the reference) or with a method that has no payload.
    """
    unknown = [m for m in methods if m not in METHOD_PAYLOAD]
    if "fedavg" not in methods or unknown:
        raise ValueError(f"methods must include 'fedavg' and name methods of METHOD_PAYLOAD, got {list(methods)}; "
                         f"valid: {', '.join(METHOD_PAYLOAD)}")
    ds = study.data(dataset, seed)
    model_fn = study.model_fn(model, ds)
    # half the data (every client keeps samples at the smoke profile) and the default test size (a data set's own
    # larger test set may not fit in half of it): message sizes depend on shapes only
    small = dataclasses.replace(study, test_per_class=()).scenario(ds.subset(np.arange(0, len(ds), 2)), fraction, seed)
    rows = []
    for m in methods:
        alg = study.algorithm(seed, payload=METHOD_PAYLOAD[m], steps=1, history=False, ldc_epochs=1, ccvr_steps=1)
        cfg = LoopConfig(rounds=2, seed=seed, events=(Event(2, study.departing, "leave"),))  # sizes do not depend on the round
        ledger = run_federated(alg, small.federation, model_fn, cfg).ledger
        rows.append({"method": m, "bytes": ledger.per_client_and_round(phase="train", rounds=2)})
    frame = pd.DataFrame(rows)
    frame["relative"] = frame["bytes"] / frame.set_index("method")["bytes"]["fedavg"]
    return frame


def reduced_cell(study: MPTStudy, seed: int, *, dataset: str, fraction: float, model: str, rounds: int,
                 eval_rounds: Sequence[int], variants: tuple = ()) -> dict[str, pd.DataFrame]:
    """One reduced run of the exercises: ``dataset`` at the remaining ``fraction`` with ``model``
    for ``rounds`` rounds, the clients sending MPT's payload only (it changes no prototype of the
    methods compared), ``eval_rounds`` evaluated; ``variants`` (``(name, TrackingConfig)`` pairs)
    are MPT again with other settings on the same trajectory (``MPT(variants=...)``).

    Returns
    -------
    dict of str to DataFrame
        ``history`` (``round, method, metric, value``) and ``runs``: one row, the remaining rare
        samples (``n_remaining``) and the run's ``seconds``.
    """
    start = time.perf_counter()
    ds = study.data(dataset, seed)
    _, scenario, history = study.run(ds, study.model_fn(model, ds), fraction, seed, rounds=rounds,
                                     eval_rounds=list(eval_rounds), payload=METHOD_PAYLOAD["mpt"],
                                     **({"variants": tuple(variants)} if variants else {}))
    return {"history": history,
            "runs": _run_frame(n_remaining=scenario.n_rare_remaining, seconds=time.perf_counter() - start)}


# ----------------------------------------------------------------- reading a history over seeds
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
        :func:`fedbook.intervals.interval_band` turns into a figure's line and band.

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
    return float(rows_where(history, metric=metric, round=round_, method=method)["value"].mean())


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



# ----------------------------------------------------------------- what the chapter reads of the frames
def distance_seed(distances: pd.DataFrame) -> pd.DataFrame:
    """The table runs' distances to the oracle at the last round (:func:`table_cell`'s
    ``table_distances``, over cells) per data set and seed, the mean over the fractions: index
    ``(dataset, seed)``, one column per method.

    Examples
    --------
    >>> t = pd.DataFrame({"dataset": "d", "fraction": [0.1, 0.2], "seed": 0, "method": "mpt", "dist": [1.0, 3.0]})
    >>> distance_seed(t)["mpt"].tolist()
    [2.0]
    """
    wide = distances.pivot_table(index=["dataset", "fraction", "seed"], columns="method", values="dist")
    return wide.groupby(["dataset", "seed"]).mean()


def table_frames(table: pd.DataFrame, seeds: Sequence[int]) -> dict[str, pd.DataFrame]:
    """The fraction table's frames the claims and the prose read, from the tidy ``table``
    (``dataset, fraction, seed, method, f1, f1_before``: :func:`table_cell`'s rows).

    Returns
    -------
    dict of str to DataFrame
        ``wide`` and ``wide_before``: the F1 at the last round and at the round before the
        departure, index ``(dataset, fraction, seed)``, one column per method; ``by_seed`` and
        ``before_seed``: their means over the fractions, index ``(dataset, seed)`` (a claim per
        data set reads its rows); ``all_seed`` and ``all_before``: the means over data sets and
        fractions, index ``seed`` (in the order of ``seeds``); ``cell_means``: the means over
        seeds, index ``(dataset, fraction)``.

    Examples
    --------
    >>> t = pd.DataFrame({"dataset": "d", "fraction": [0.1, 0.1, 0.2, 0.2], "seed": [0, 1, 0, 1], "method": "mpt",
    ...                   "f1": [0.5, 0.7, 0.25, 0.5], "f1_before": 0.9})
    >>> out = table_frames(t, [0, 1])
    >>> out["by_seed"]["mpt"].tolist(), out["all_seed"].index.tolist(), out["cell_means"]["mpt"].tolist()
    ([0.375, 0.6], [0, 1], [0.6, 0.375])
    """
    wide = table.pivot_table(index=["dataset", "fraction", "seed"], columns="method", values="f1")
    wide_before = table.pivot_table(index=["dataset", "fraction", "seed"], columns="method", values="f1_before")
    return {"wide": wide, "wide_before": wide_before,
            "by_seed": wide.groupby(["dataset", "seed"]).mean(),  # per data set and seed: mean over fractions
            "before_seed": wide_before.groupby(["dataset", "seed"]).mean(),  # the same, before the departure
            "all_seed": wide.groupby("seed").mean().loc[list(seeds)],
            "all_before": wide_before.groupby("seed").mean().loc[list(seeds)],
            "cell_means": wide.groupby(["dataset", "fraction"]).mean()}


def stability_by_seed(stability: pd.DataFrame) -> pd.DataFrame:
    """The table runs' :func:`spread_change` per data set and seed, the mean over the fractions (as
    the claims per data set average their F1 over the fractions: :func:`table_frames`' ``by_seed``).

    Examples
    --------
    >>> t = pd.DataFrame({"dataset": "d", "fraction": [0.1, 0.1, 0.2, 0.2], "seed": [0, 1, 0, 1],
    ...                   "growth": [2.0, 0.5, 1.0, 1.0], "change": [2.0, 2.0, 1.0, 1.0]})
    >>> stability_by_seed(t)["change"].tolist()
    [1.5, 1.5]
    """
    return stability.drop(columns="fraction").groupby(["dataset", "seed"]).mean()


def _distance_f1(dist: pd.DataFrame, f1: pd.DataFrame, methods: Sequence[str],
                 departure_round: int) -> tuple[np.ndarray, np.ndarray]:
    """One seed's (distance to the oracle, rare-class F1) of ``methods`` over the rounds from the
    departure on (Figure 6 (b)'s points), from :func:`per_seed` frames."""
    post = [r for r in dist.index if r >= departure_round]
    return (np.concatenate([dist.loc[post, m].to_numpy() for m in methods]),
            np.concatenate([f1.loc[post, m].to_numpy() for m in methods]))


def figure_frames(history: pd.DataFrame, departure_round: int, stored_rounds: int,
                  scatter_methods: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The figure runs' frames the claims read, per seed, from their ``history`` over seeds.

    Parameters
    ----------
    history : DataFrame
        ``seed, round, method, metric, value`` (:func:`figure_cell`'s histories).
    departure_round : int
    stored_rounds : int
        The rounds after the departure round over which the "early" distance is averaged.
    scatter_methods : sequence of str
        The methods whose (distance, F1) points over the rounds from the departure on give each
        seed's Spearman correlation (Figure 6 (b)).

    Returns
    -------
    dict of str to DataFrame
        ``figure``: one row per seed and method, ``seed, method`` and the rare-class F1 at the
        last round (``f1_last``), at the round before the departure (``f1_pre``) and at the
        departure round (``f1_departure``), and the Mahalanobis distance to the oracle at the last
        round (``d_last``), its mean over the ``stored_rounds`` rounds after the departure round
        (``d_early``) and over the rounds from the departure on (``d_post``), NaN for a method
        without a prototype; ``figure_seed``: one row per seed, MPT's adaptive weight averaged
        over the rounds (``alpha``) and the Spearman correlation of distance and F1 (``rho``);
        ``early_rounds``: the rounds of ``d_early`` (``round``).

    Examples
    --------
    >>> rows = [(s, r, m, k, v) for s in (0, 1) for r in (1, 2, 3) for m, k, v in
    ...         [("mpt", "f1", r / 4), ("mpt", "dist_oracle", 3 - r), ("b", "f1", 0.125 * s), ("b", "dist_oracle", r),
    ...          ("mpt", "alpha", r / 8)]]
    >>> h = pd.DataFrame(rows, columns=["seed", "round", "method", "metric", "value"])
    >>> out = figure_frames(h, departure_round=2, stored_rounds=1, scatter_methods=["mpt", "b"])
    >>> out["figure"].query("method == 'mpt'")[["seed", "f1_last", "f1_pre", "d_early", "d_post"]].values.tolist()
    [[0.0, 0.75, 0.25, 0.0, 0.5], [1.0, 0.75, 0.25, 0.0, 0.5]]
    >>> out["figure_seed"].round(3).values.tolist(), out["early_rounds"]["round"].tolist()
    ([[0.0, 0.25, -0.949], [1.0, 0.25, -0.949]], [3])
    """
    dist_s, f1_s = per_seed(history, "dist_oracle"), per_seed(history, "f1")
    seeds = list(pd.unique(history["seed"]))
    last = int(history["round"].max())
    after = [r for r in dist_s[seeds[0]].index if departure_round < r <= departure_round + stored_rounds]
    rows, per_seed_rows = [], []
    for s in seeds:
        d, f = dist_s[s], f1_s[s]
        post = [r for r in d.index if r >= departure_round]
        by_method = pd.DataFrame({"f1_last": f.loc[last], "f1_pre": f.loc[departure_round - 1],
                                  "f1_departure": f.loc[departure_round], "d_last": d.loc[last],
                                  "d_early": d.loc[after].mean(), "d_post": d.loc[post].mean()})
        rows.append(by_method.rename_axis("method").reset_index().assign(seed=s))
        xs, ys = _distance_f1(d, f, scatter_methods, departure_round)
        alpha = history_value(history[history["seed"] == s], "mpt", "alpha")  # mean over the rounds
        rho = float(pd.Series(xs).corr(pd.Series(ys), method="spearman"))
        per_seed_rows.append({"seed": s, "alpha": alpha, "rho": rho})
    figure = pd.concat(rows, ignore_index=True)
    return {"figure": figure[["seed", *[c for c in figure.columns if c != "seed"]]],
            "figure_seed": pd.DataFrame(per_seed_rows), "early_rounds": pd.DataFrame({"round": after})}


# ----------------------------------------------------------------- the numbers of the prose
def data_sizes(study: MPTStudy, datasets: Sequence[str], seeds: Sequence[int]) -> dict[str, list[int]]:
    """Each data set's sizes over the run seeds' subsets (sorted, distinct)."""
    return {name: sorted({len(study.data(name, s)) for s in seeds}) for name in datasets}


def sizes_text(sizes: Mapping[str, Sequence[int]], sep: str = " ") -> str:
    """``"mnist5k 2,000 images, uci 1,797 images"``: each data set's sizes (``/`` between several).

    Examples
    --------
    >>> sizes_text({"a": [500], "b": [300, 310]})
    'a 500 images, b 300/310 images'
    """
    return ", ".join(f"{name}{sep}{'/'.join(f'{n:,}' for n in ns)} images" for name, ns in sizes.items())


def data_numbers(study: MPTStudy, datasets: Sequence[str], seeds: Sequence[int]) -> dict[str, str]:
    """What the chapter says of its data at this profile, as prose (the scenarios only: no training).

    Returns
    -------
    dict of str to str
        ``n_samples_profile`` (the subset's size, or ``"all"``), ``full_sets_text`` (each data
        set's sizes over the seeds, and which are used whole, where the seeds vary only the
        partition, the test set, the initialization and the batch order), ``n_remaining_top`` and
        ``n_remaining_one`` (the remaining rare samples at the fractions 0.1 and 0.01 over every
        data set and seed: a range, and the values joined by "or").
    """
    sizes = data_sizes(study, datasets, seeds)
    full = [name for name in datasets if study.n_samples is None or len(study.data(name, seeds[0])) < study.n_samples]

    def remaining_at(fraction: float) -> list[int]:
        return sorted({study.scenario(study.data(name, s), fraction, s).n_rare_remaining
                       for name in datasets for s in seeds})

    top, one = remaining_at(0.1), remaining_at(0.01)
    whole = (f"{', '.join(full)} {'is' if len(full) == 1 else 'are'} used whole at every seed, so there the seeds vary "
             "only the partition, the test set, the initialization and the batch order")
    return {"n_remaining_top": f"{top[0]}–{top[-1]}" if len(top) > 1 else str(top[0]),
            "n_remaining_one": " or ".join(map(str, one)),
            "n_samples_profile": "all" if study.n_samples is None else f"{study.n_samples:,}",
            "full_sets_text": "; ".join([sizes_text({name: ns}, sep=": ") for name, ns in sizes.items()]
                                        + [whole] * bool(full))}


def resolution_numbers(study: MPTStudy, datasets: Sequence[str], seed: int, m_f1: float, m_lead: float) -> dict[str, Any]:
    """What the chapter says of its global test sets and the F1 resolution they give.

    Parameters
    ----------
    study : MPTStudy
    datasets : sequence of str
        The fraction table's data sets.
    seed : int
        A run seed (the class sizes do not depend on it where the data set is used whole).
    m_f1, m_lead : float
        The smallest effects of interest of the F1 rows and of the lead over all baselines.

    Returns
    -------
    dict
        ``rare_test_text`` (each data set's test images per class, e.g. "400 test images per class
        on mnist5k and 40 on uci"), ``one_image_text`` (one rare-class test image in F1, per data
        set), ``fine_dataset`` (the data set with the largest test set), ``fine_test``,
        ``fine_class`` (the size of its smallest class, whichever class that is: not the rare
        class's size) and ``fine_train`` (what that smallest class keeps for training), ``needed_f1`` and ``needed_lead`` (the rare test images an F1 row
        and the lead need: :data:`fedbook.claims.RESOLUTION_SHARE` of their m), ``coarse_text`` (the
        data sets whose test set cannot resolve an F1 row's m, and why no split of them can).

    Examples
    --------
    >>> s = MPTStudy(rounds=4, departure_round=3, n_clients=4, rare_class=5, local_epochs=1, lr=0.05,
    ...              global_test_per_class=40, ldc_epochs=2, ldc_batch=32, ccvr_steps=10, ccvr_virtual=20,
    ...              test_per_class={"mnist5k": 400})
    >>> out = resolution_numbers(s, ["mnist5k", "uci"], 0, 0.01, 0.02675)
    >>> out["needed_f1"], out["needed_lead"], out["one_image_text"]
    (400, 150, '0.0025 on mnist5k, 0.025 on uci')
    >>> out["rare_test_text"]
    '400 test images per class on mnist5k and 40 on uci'
    """
    sizes = {name: study.test_size(name) for name in datasets}
    classes = {name: np.bincount(study.data(name, seed).labels_np) for name in datasets}
    needed_f1 = math.ceil(1 / (RESOLUTION_SHARE * m_f1) - 1e-9)
    needed_lead = math.ceil(1 / (RESOLUTION_SHARE * m_lead) - 1e-9)
    fine = max(datasets, key=lambda name: sizes[name])
    coarse = []
    for name in datasets:
        if sizes[name] >= needed_f1:
            continue
        big, small = int(classes[name].max()), int(classes[name].min())
        can = (f"no split of it can: its classes hold {small} to {big} images"
               if big < needed_f1 else f"a test split of {needed_f1} images per class would (its classes hold "
               f"{small} to {big})")
        lead = (f"; the lead's m would need {needed_lead} of them, leaving its smallest class about "
                f"{small - needed_lead} images to train on" if small > needed_lead else "")
        coarse.append(f"{name} holds out {sizes[name]} test images per class, so its F1 rows are untestable at this "
                      f"resolution; {can}, fewer than the {needed_f1} an m of {m_f1:g} F1 needs{lead}: only a larger "
                      "data set (as the paper's nuImages) makes them testable")
    per = [f"{sizes[n]} test images per class on {n}" if i == 0 else f"{sizes[n]} on {n}" for i, n in enumerate(datasets)]
    return {"rare_test_text": " and ".join(per) if len(per) < 3 else ", ".join(per[:-1]) + " and " + per[-1],
            "one_image_text": ", ".join(f"{1 / sizes[n]:.3g} on {n}" for n in datasets),
            "fine_dataset": fine, "fine_test": sizes[fine], "fine_class": int(classes[fine].min()),
            "fine_train": int(classes[fine].min()) - sizes[fine], "needed_f1": needed_f1, "needed_lead": needed_lead,
            "coarse_text": "; ".join(coarse) if coarse else "every data set's test set resolves the F1 rows' m"}


F1_STEP_FLOOR = 2 - math.sqrt(2)
"""The lowest F1 at which one test image moved from a miss to a hit changes F1 by at most 1/n, whatever the
number of images predicted as the class (:func:`f1_step`)."""


def f1_step(f1: float, n: int) -> float:
    r"""The largest change of a class's F1 when one of its ``n`` test images moves from a miss to
    a hit, given the F1 before the move (the resolution argument of the chapter's F1 rows).

    With :math:`F_1 = 2\mathrm{TP}/(n + \hat n)` (:math:`\hat n` the images predicted as the
    class), the move adds one to TP and to :math:`\hat n`, so :math:`F_1` grows by
    :math:`(2 - F_1)/(n + \hat n + 1)`. Since :math:`\mathrm{TP} \le \hat n`,
    :math:`\hat n \ge F_1 n/(2 - F_1)`, and the step is at most
    :math:`(2 - F_1)^2/(2n + 2 - F_1)`: 2/(n + 1) at :math:`F_1 = 0`, and at most 1/n for every
    :math:`n` when :math:`(1 - F_1)(2 - F_1) \le F_1`, i.e. :math:`F_1 \ge 2 - \sqrt 2`
    (:data:`F1_STEP_FLOOR`; the condition is also necessary as :math:`n` grows, while at a given
    :math:`n` the term :math:`2 - F_1` lets a slightly lower F1 pass).

    Examples
    --------
    >>> round(f1_step(0.0, 10), 6), round(2 / 11, 6)  # nothing predicted: 0 → 2/11
    (0.181818, 0.181818)
    >>> f1_step(F1_STEP_FLOOR, 400) <= 1 / 400 + 1e-15
    True
    """
    if not 0 <= f1 <= 1 or n < 1:
        raise ValueError(f"f1_step needs 0 <= f1 <= 1 and n >= 1, got f1={f1!r}, n={n!r}")
    return (2 - f1) ** 2 / (2 * n + 2 - f1)


def lowest_read(claims: Sequence, keys: Sequence[str], results: Mapping[str, pd.DataFrame]) -> dict[str, float]:
    """The lowest value each of the claims ``keys`` reads on its own sides (ours and every
    baseline, over their methods and seeds; not its regime checks'); a claim whose frames are not in
    ``results`` is left out.

    Examples
    --------
    >>> from fedbook.claims import Claim, Read
    >>> f = pd.DataFrame({"seed": [0, 1, 0, 1], "method": ["a", "a", "b", "b"], "f1": [0.9, 0.7, 0.5, 0.8]})
    >>> c = Claim("x", "A beats B.", "Table 1", "F1, a − b", "greater", 0.01, resolution=0.001,
    ...           ours=Read("f", "f1", method="a"), baseline=Read("f", "f1", method="b"))
    >>> lowest_read([c], ["x"], {"f": f})
    {'x': 0.5}
    """
    out = {}
    for c in claims:
        if c.key not in keys:
            continue
        reads = c.reads[:len(c.reads) - len(c.regimes)]
        values = [r(results) for r in reads]
        if any(v is None for v in values):
            continue
        out[c.key] = float(min(np.nanmin(np.asarray(v, dtype=float)) for v in values))
    return out


def f1_step_numbers(lowest: Mapping[str, float], n: Mapping[str, int]) -> dict[str, Any]:
    """What the chapter says of its F1 rows' declared resolution (one test image, 1/n) against the
    step one image can make (:func:`f1_step`), from the lowest F1 each row reads
    (:func:`lowest_read`) and the rare test images ``n`` of each row's test set.

    Returns
    -------
    dict
        ``f1_lowest`` (the lowest over the rows), ``f1_floor`` (:data:`F1_STEP_FLOOR`) and
        ``f1_step_text``: a sentence worded from them, naming the rows where one image's step at
        their lowest F1 exceeds 1/n, and that step.

    Examples
    --------
    >>> f1_step_numbers({"a": 0.8, "b": 0.9}, {"a": 400, "b": 400})["f1_step_text"]
    'every F1 row reads an F1 of at least 0.800, above 2 − √2, so the declared resolution 1/n bounds the step of every F1 it reads'
    >>> out = f1_step_numbers({"a": 0.8, "b": 0.1}, {"a": 400, "b": 40})
    >>> out["f1_lowest"], out["f1_step_text"]
    (0.1, 'the lowest F1 an F1 row reads is 0.100; where one image can move the F1 by more than 1/n, the declared resolution understates the step: b (lowest F1 0.100: up to 0.0441 against 1/n = 0.025)')
    >>> f1_step_numbers({"a": 0.58}, {"a": 10})["f1_step_text"]  # below the floor, yet within 1/n at n = 10
    "the lowest F1 an F1 row reads is 0.580, below 2 − √2, but at each row's n one image's step is still at most the declared resolution 1/n"
    """
    if not lowest:
        return {"f1_lowest": float("nan"), "f1_floor": F1_STEP_FLOOR,
                "f1_step_text": "no F1 row was read at this profile, so the step of its F1 is not bounded here"}
    low = min(lowest.values())
    over = {k: v for k, v in lowest.items() if f1_step(v, n[k]) > (1 + 1e-12) / n[k]}
    if not over and low >= F1_STEP_FLOOR:
        text = (f"every F1 row reads an F1 of at least {low:.3f}, above 2 − √2, so the declared resolution 1/n bounds "
                "the step of every F1 it reads")
    elif not over:
        text = (f"the lowest F1 an F1 row reads is {low:.3f}, below 2 − √2, but at each row's n one image's step is "
                "still at most the declared resolution 1/n")
    else:
        rows = ", ".join(f"{k} (lowest F1 {v:.3f}: up to {f1_step(v, n[k]):.3g} against 1/n = {1 / n[k]:.3g})"
                         for k, v in over.items())
        text = (f"the lowest F1 an F1 row reads is {low:.3f}; where one image can move the F1 by more than 1/n, the "
                f"declared resolution understates the step: {rows}")
    return {"f1_lowest": low, "f1_floor": F1_STEP_FLOOR, "f1_step_text": text}


def boundary_text(resolution: float, m: float, name: str) -> str:
    """Where a data set's F1 resolution stands against the rule's boundary
    (:data:`fedbook.claims.RESOLUTION_SHARE` of m), worded from the two numbers.

    Examples
    --------
    >>> boundary_text(0.0025, 0.01, "mnist5k")
    'on mnist5k the resolution 0.0025 equals a quarter of m (0.0025) exactly: the rule’s boundary, still testable (a row is testable when its resolution is at most a quarter of m), and one test image fewer per class would make its F1 rows untestable'
    >>> boundary_text(0.025, 0.01, "uci")[:60]
    'on uci the resolution 0.025 lies above a quarter of m (0.002'
    """
    share = RESOLUTION_SHARE * m
    rule = "a row is testable when its resolution is at most a quarter of m"
    if math.isclose(resolution, share, rel_tol=1e-9):
        return (f"on {name} the resolution {resolution:.3g} equals a quarter of m ({share:.3g}) exactly: the rule\u2019s "
                f"boundary, still testable ({rule}), and one test image fewer per class would make its F1 rows "
                "untestable")
    where = "below" if resolution < share else "above"
    return f"on {name} the resolution {resolution:.3g} lies {where} a quarter of m ({share:.3g}; {rule})"


def backbone_frame(study: MPTStudy, model: str, dataset: str, seed: int) -> pd.DataFrame:
    """The figure runs' backbone, for the regime check "a convolutional backbone": one row,
    ``model`` and ``conv_layers`` (its :class:`torch.nn.Conv2d` modules, built for ``dataset``).

    Examples
    --------
    >>> s = MPTStudy(rounds=4, departure_round=3, n_clients=4, rare_class=5, local_epochs=1, lr=0.05,
    ...              global_test_per_class=10, ldc_epochs=2, ldc_batch=32, ccvr_steps=10, ccvr_virtual=20, n_samples=200)
    >>> backbone_frame(s, "mlp", "uci8", 0)["conv_layers"].tolist(), backbone_frame(s, "cnn", "uci8", 0)["conv_layers"].tolist()
    ([0], [2])
    """
    net = study.model_fn(model, study.data(dataset, seed))()
    return pd.DataFrame({"model": [model], "conv_layers": [sum(isinstance(m, torch.nn.Conv2d) for m in net.modules())]})


def transport_numbers(dist_seed: pd.DataFrame, datasets: Sequence[str], m: float | None = None) -> dict[str, str]:
    """What the table runs say of Eq. (6)'s assumption (the rare residual moves with the remaining
    classes' covariance): per data set, the mean over seeds of the distance to the oracle at the
    last round of the stored residual, the transported one (no projector), MPT's prediction (the
    transported residual projected), its measurement alone and iCaRL (the same samples' mean),
    from :func:`distance_seed`.

    Examples
    --------
    >>> d = pd.DataFrame({"stored_residual": [1.0, 3.0], "transported": 4.0, "mpt_predicted": 5.0,
    ...                   "mpt_measured": 2.0, "icarl": 1.0},
    ...                  index=pd.MultiIndex.from_tuples([("a", 0), ("a", 1)], names=["dataset", "seed"]))
    >>> transport_numbers(d, ["a"])["transport_text"]
    'a: stored 2.00, transported 4.00, MPT’s prediction 5.00'
    >>> transport_numbers(d, ["a"], m=0.2)["measured_compare_text"]  # with the distances' m: how far apart, in words
    'on a, measurement only lies farther from the oracle than iCaRL by more than m = 0.2 (2.00 against 1.00)'
    """
    means = dist_seed.groupby("dataset").mean()
    return {"transport_text": "; ".join(
        f"{n}: stored {means.loc[n, 'stored_residual']:.2f}, transported {means.loc[n, 'transported']:.2f}, "
        f"MPT\N{RIGHT SINGLE QUOTATION MARK}s prediction {means.loc[n, 'mpt_predicted']:.2f}" for n in datasets),
        "measured_text": "; ".join(f"{n}: {means.loc[n, 'mpt_measured']:.2f} against {means.loc[n, 'icarl']:.2f}"
                                   for n in datasets),
        "measured_compare_text": "; ".join(_compare(n, means.loc[n, "mpt_measured"], means.loc[n, "icarl"], m)
                                           for n in datasets) if m is not None else ""}


def _compare(name: str, measured: float, icarl: float, m: float) -> str:
    """One data set's measurement-only distance against iCaRL's, worded from the two means and m."""
    diff = measured - icarl
    how = (f"within m = {m:g} of iCaRL" if abs(diff) <= m else
           f"{'farther from' if diff > 0 else 'closer to'} the oracle than iCaRL by more than m = {m:g}")
    return f"on {name}, measurement only lies {how} ({measured:.2f} against {icarl:.2f})"


def scenario_numbers(scenario: DepartureScenario, fraction: float, dataset: str, departure_round: int,
                     rounds: int, rare_class: int) -> dict[str, Any]:
    """The figure's departure scenario in numbers: the rare class, its training samples on the
    departing client and on the others, the fraction in percent, the data set and the rounds."""
    return {"rare_class": rare_class, "n_rare_departing": scenario.n_rare_departing,
            "n_rare_remaining": scenario.n_rare_remaining, "fig_fraction_pct": 100 * fraction,
            "fig_dataset": dataset, "departure_round": departure_round, "n_rounds": rounds,
            "pre_round": departure_round - 1}


def figure_numbers(history: pd.DataFrame, runs: pd.DataFrame, methods: Sequence[str], departure_round: int
                   ) -> dict[str, float]:
    """The figure runs' last round in numbers (means over seeds, :func:`mean_at`): every
    method's rare-class F1 and overall accuracy (``fig_f1_<m>``, ``fig_acc_<m>``), MPT's and
    FedAvg's F1 at the round before the departure (``fig_f1_pre``, ``fig_f1_pre_fedavg``), and
    one run's mean seconds (``fig_run_seconds``, from ``runs``: :func:`figure_cell`'s
    ``figure_runs``)."""
    last, out = int(history["round"].max()), {}
    for m in methods:
        out[f"fig_f1_{m}"] = mean_at(history, "f1", last, m)
        out[f"fig_acc_{m}"] = mean_at(history, "accuracy", last, m)
    out["fig_f1_pre"] = mean_at(history, "f1", departure_round - 1, "mpt")
    out["fig_f1_pre_fedavg"] = mean_at(history, "f1", departure_round - 1, "fedavg")
    out["fig_run_seconds"] = float(runs["seconds"].mean())
    return out


def table_numbers(frames: Mapping[str, pd.DataFrame], baselines: Sequence[str], n_seeds: int) -> dict[str, Any]:
    """The fraction table in numbers, from :func:`table_frames` and the study's ``table`` and
    ``table_runs`` frames in ``frames``.

    Returns
    -------
    dict
        ``n_cells`` (data set × fraction cells), ``mpt_wins`` (cells where MPT's mean is above
        every baseline's mean), the means over cells of MPT, MPT-lite and the baseline with the
        highest average (``mpt_mean_f1``, ``lite_mean_f1``, ``best_baseline`` (its label),
        ``best_baseline_f1``), ``gap_oracle`` (MPT − oracle), the median and largest half-width of
        the cells' 95 % intervals (``half_median``, ``half_max``), Student's t multiplier of
        ``n_seeds`` (``t_mult``), MPT-lite's growth factor per data set (``growth_table_text``),
        MPT-lite's mean F1 per data set (``lite_mean_text``) and the runs' ``table_seconds`` (a
        cell that read a figure run counts its reading only: :func:`table_cell`).
    """
    cell_means, table, runs = frames["cell_means"], frames["table"], frames["table_runs"]
    datasets = list(pd.unique(table["dataset"]))
    best_name = cell_means[list(baselines)].mean().idxmax()
    half = table.groupby(["dataset", "fraction", "method"])["f1"].apply(
        lambda v: mean_interval(v.to_numpy()).width / 2)
    growth = runs.groupby("dataset")["growth"]
    return {
        "n_cells": len(cell_means),
        "mpt_wins": int((cell_means["mpt"] > cell_means[list(baselines)].max(axis=1)).sum()),
        "mpt_mean_f1": float(cell_means["mpt"].mean()), "lite_mean_f1": float(cell_means["mpt_lite"].mean()),
        "best_baseline": LABELS[best_name], "best_baseline_f1": float(cell_means[best_name].mean()),
        "gap_oracle": float((cell_means["mpt"] - cell_means["oracle"]).mean()),
        "half_median": float(half.median()), "half_max": float(half.max()),
        "t_mult": float(student_t.ppf(0.975, n_seeds - 1)) if n_seeds > 1 else float("nan"),
        "growth_table_text": "; ".join(f"{name}: median {growth.median()[name]:.2f}, range {growth.min()[name]:.2f} "
                                       f"to {growth.max()[name]:.2f}" for name in datasets),
        "lite_mean_text": ", ".join(f"{name} {cell_means.loc[name, 'mpt_lite'].mean():.3f}" for name in datasets),
        "table_seconds": float(runs["seconds"].sum()),
    }


def ldc_numbers(study: MPTStudy, wide: pd.DataFrame, dataset: str, fraction: float, seeds: Sequence[int],
                old_batch: int) -> dict[str, Any]:
    """LDC's Adam steps on ``dataset`` at the remaining ``fraction`` (counted, no run) and its F1.

    Returns
    -------
    dict
        ``ldc_client_n`` (the training samples of a remaining client, mean over clients and
        seeds), ``ldc_steps_old`` and ``ldc_steps_new`` (the map's Adam steps per round with
        mini-batches of ``old_batch`` and of the study's, :func:`fedlib.tracking.ldc_steps_per_round`),
        ``ldc_check_dataset`` and ``ldc_f1_new`` (LDC's rare-class F1 there, mean over ``seeds``,
        from :func:`table_frames`' ``wide``).
    """
    sizes = np.concatenate([study.scenario(study.data(dataset, s), fraction, s).remaining_train_sizes() for s in seeds])
    ldc = wide.xs((dataset, fraction), level=("dataset", "fraction"))["ldc"].loc[list(seeds)].to_numpy()
    return {"ldc_client_n": float(sizes.mean()),
            "ldc_steps_old": ldc_steps_per_round(sizes, old_batch, study.ldc_epochs),
            "ldc_steps_new": ldc_steps_per_round(sizes, study.ldc_batch, study.ldc_epochs),
            "ldc_check_dataset": dataset, "ldc_f1_new": float(np.mean(ldc))}


def distance_numbers(history: pd.DataFrame, frames: Mapping[str, pd.DataFrame], methods: Sequence[str]
                     ) -> dict[str, Any]:
    """Figure 6 in numbers: every method's mean distance to the oracle at the last round
    (``dist_<m>``), the mean over seeds of the Spearman correlation (``spearman``), MPT's adaptive
    weight averaged over every seed and round (``alpha_mean``), MPT-lite's growth factor at the
    last round (``growth_last``), and the "early" rounds of Figure 6 (a) with each seed's two
    distances there (``stored_rounds_text``, ``stored_seed_text``); from :func:`figure_frames` and
    :func:`figure_cell`'s ``figure_runs`` in ``frames``."""
    last = int(history["round"].max())
    alpha = history[(history["metric"] == "alpha")]["value"]
    early = frames["figure"].pivot(index="seed", columns="method", values="d_early")
    out = {"spearman": float(np.mean(frames["figure_seed"]["rho"].tolist()))}
    out.update({f"dist_{m}": mean_at(history, "dist_oracle", last, m) for m in methods})
    out.update(alpha_mean=float(alpha.mean()) if len(alpha) else float("nan"),
               growth_last=float(np.mean(frames["figure_runs"]["growth"].tolist())),
               stored_rounds_text=", ".join(map(str, frames["early_rounds"]["round"])),
               stored_seed_text="; ".join(f"seed {s}: {r['stored_residual']:.2f} against {r['barycentric']:.2f}"
                                          for s, r in early.iterrows()))
    return out


def cost_numbers(bytes_frame: pd.DataFrame, times: pd.DataFrame, methods: Sequence[str]) -> dict[str, float]:
    """Figure 5 in numbers, means over seeds: each method's bytes relative to FedAvg's
    (``comm_<m>``) and each extra work relative to a client's local training (``time_<key>``,
    :data:`TIME_KEYS`)."""
    comm = bytes_frame.pivot(index="seed", columns="method", values="relative")
    spent = times.pivot(index="seed", columns="part", values="relative")
    return {**{f"comm_{m}": float(comm[m].mean()) for m in methods},
            **{f"time_{key}": float(spent[part].mean()) for key, part in zip(TIME_KEYS, TIME_PARTS)}}


def _plural(n: int, word: str) -> str:
    return f"{n:g} {word}{'' if n == 1 else 's'}"


def regime_numbers(results: Mapping[str, ClaimResult], check: str, *, local_epochs: int,
                   paper_local_epochs: int, f1_rows: Sequence[str] | None = None) -> dict[str, str]:
    """What the claims table says of the rows that declare the regime check ``check``, in a sentence
    built from the decided rows (it stays true for every verdict and every value of the check).

    Parameters
    ----------
    results : mapping of str to ClaimResult
        The decided rows (:func:`fedbook.page.claims_report`'s answer).
    check : str
        The regime check's key (:class:`fedbook.claims.RegimeCheck`).
    local_epochs, paper_local_epochs : int
        The local epochs per round of this profile and of the paper (the setting the sentence names
        where the check fails).

    f1_rows : sequence of str, optional
        The rows that read a rare-class F1 (default: every row). One of them that declares the
        check and is untestable at this resolution (an F1 read on a test set of :math:`n`
        rare-class images, one image :math:`1/n` its resolution) is told how many images per class
        would resolve its :math:`m`; any other such row, its declared resolution.

    Returns
    -------
    dict of str to str
        ``regime_rows`` (the rows that declare the check) and ``regime_text``: which of them the
        check passes and fails for, with its values, and, where it fails, the setting that would
        make them testable.

    Examples
    --------
    >>> from fedbook.claims import Claim, RegimeCheck, Read, effect, evaluate
    >>> g = RegimeCheck("stable", "a factor", Read("s", "x"), "at most", 1.5, "why")
    >>> c = Claim("a", "A.", "T", "q", "greater", effect("relative"), resolution=0.01, regimes=(g,))
    >>> r = evaluate(c, [1.0, 1.2, 1.1], regimes=[g.check({"s": pd.DataFrame({"x": [2.0, 2.2]})})])
    >>> regime_numbers({"a": r}, "stable", local_epochs=1, paper_local_epochs=5)["regime_text"]
    'The check “stable” (a factor; it needs at most 1.5) fails for a (2.10): after 1 local epoch per round the setting cannot test it; re-run with the paper’s 5 local epochs per round (`-p local_epochs=5`) to test it.'
    >>> regime_numbers({"a": r}, "stable", local_epochs=5, paper_local_epochs=5)["regime_text"]
    'The check “stable” (a factor; it needs at most 1.5) fails for a (2.10): with the paper’s 5 local epochs per round the backbone still changes by more than the check allows at the departure; a later departure (`-p departure_round=...`) gives it longer to settle.'
    """
    rows = {k: next(g for g in r.regimes if g.check.key == check) for k, r in results.items()
            if any(g.check.key == check for g in r.regimes)}
    if not rows:
        return {"regime_rows": "none", "regime_text": f"No row declares the check “{check}”."}

    def grouped(keys: list[str]) -> str:
        by_value: dict[str, list[str]] = {}
        for k in keys:
            value = rows[k].value
            by_value.setdefault("not computable" if math.isnan(value) else f"{value:.2f}", []).append(k)
        return "; ".join(f"{', '.join(ks)} ({v})" for v, ks in by_value.items())

    reading = next(iter(rows.values())).check
    failing = [k for k, g in rows.items() if not g.passes]
    passing = [k for k in rows if k not in failing]
    head = f"The check \N{LEFT DOUBLE QUOTATION MARK}{check}\N{RIGHT DOUBLE QUOTATION MARK} ({reading.quantity}; " \
           f"it needs {reading.op} {reading.threshold:g})"
    said = f"{head} passes for {grouped(passing)}" if passing else head
    parts = [said] if passing else []
    if failing:
        them = "it" if len(failing) == 1 else "them"
        paper = f"the paper\N{RIGHT SINGLE QUOTATION MARK}s {_plural(paper_local_epochs, 'local epoch')}"
        if local_epochs != paper_local_epochs:
            advice = (f"after {_plural(local_epochs, 'local epoch')} per round the setting cannot test {them}; re-run "
                      f"with {paper} per round (`-p local_epochs={paper_local_epochs}`) to test {them}")
        else:
            advice = (f"with {paper} per round the backbone still changes by more than the check allows at the "
                      "departure; a later departure (`-p departure_round=...`) gives it longer to settle")
        parts.append(f"{said if not passing else 'It'} fails for {grouped(failing)}: {advice}")
    coarse = [k for k in rows if results[k].verdict == UNTESTABLE_RESOLUTION]
    f1 = [k for k in coarse if f1_rows is None or k in f1_rows]
    other = [k for k in coarse if k not in f1]
    if f1:
        res = max(results[k].claim.resolution for k in f1)  # F1: one image of n is 1/n
        needed = max(math.ceil(1 / results[k].claim.coarsest_resolution - 1e-9) for k in f1)
        parts.append(f"{', '.join(f1)} {'is' if len(f1) == 1 else 'are'} untestable at this resolution "
                     f"whatever the check reads: one rare-class test image of {round(1 / res)} is {res:.3g} F1, above a "
                     f"quarter of {'its' if len(f1) == 1 else 'their'} m; a global test set of at least "
                     f"{needed} images per class resolves {'it' if len(f1) == 1 else 'them'}")
    for k in other:
        c = results[k].claim
        parts.append(f"{k} is untestable at this resolution whatever the check reads: its declared resolution "
                     f"{c.resolution:.3g} is above a quarter of its m ({c.coarsest_resolution:.3g})")
    return {"regime_rows": ", ".join(rows), "regime_text": ". ".join(parts) + "."}


def exercise_numbers(drift: Mapping[str, pd.DataFrame], fractions: Mapping[str, pd.DataFrame], *,
                     departure_round: int, rounds: int, last_round: int, one_image: float) -> dict[str, Any]:
    """The worked solutions of Exercises 1 to 3 from the reduced runs (:func:`reduced_cell`).

    Parameters
    ----------
    drift : mapping of str to DataFrame
        The run at the figure's fraction over the longer horizon, with MPT's variants (its
        ``history`` and ``runs``): its rounds up to ``last_round`` are the reduced run of
        Exercise 1 at that fraction, its later rounds Exercise 2's.
    fractions : mapping of str to DataFrame
        The runs at the larger fractions of Exercise 1, up to ``last_round``.
    departure_round, rounds : int
        The departure round and the profile's rounds (Exercise 2 reads the longer run there too).
    last_round : int
        The reduced runs' last round.
    one_image : float
        The F1 resolution of one rare-class test image (Exercise 3 compares its spread with it).

    Returns
    -------
    dict
        Exercise 1: ``ex1_text`` (per fraction: the remaining rare samples, the mean adaptive
        weight, the F1 of MPT, of its prediction only and of its measurement only),
        ``ex1_alpha_word`` and ``ex1_answer`` (the sentences that depend on how they compare);
        Exercise 2: ``ex2_long`` (the longer horizon), the frozen prototype's F1 before the
        departure, at ``rounds`` and at the longer horizon (``ex2_frozen_pre``,
        ``ex2_frozen_end``, ``ex2_frozen_long``), the stored residual's and MPT's distances to the
        oracle there (``ex2_stored_end``, ``ex2_mpt_end``, ``ex2_stored_long``, ``ex2_mpt_long``),
        ``ex2_frozen_word`` and ``ex2_answer``; Exercise 3: ``ex3_text`` (each setting's distance and
        F1 at the last round), ``ex3_spread_d``, ``ex3_spread_f``, ``ex3_most`` (the setting that moves
        the prototype most) and ``ex3_f1_word``; the reduced runs' seed and rounds (``ex_seed``,
        ``ex_rounds``) and their seconds (``ex_seconds``).
    """
    long_history = drift["history"]
    first = float(drift["history"]["fraction"].iloc[0])
    reduced = {first: long_history[long_history["round"].between(departure_round, last_round)]}
    remaining = {first: int(drift["runs"]["n_remaining"].iloc[0])}
    for f in pd.unique(fractions["runs"]["fraction"]):
        reduced[float(f)] = fractions["history"][fractions["history"]["fraction"] == f]
        remaining[float(f)] = int(fractions["runs"].loc[fractions["runs"]["fraction"] == f, "n_remaining"].iloc[0])
    ex1 = {f: {"N": remaining[f], "alpha": history_value(h, "mpt", "alpha"), "mpt": history_value(h, "mpt", "f1"),
               "pred": history_value(h, "mpt_predicted", "f1"), "meas": history_value(h, "mpt_measured", "f1")}
           for f, h in reduced.items()}
    larger = [f for f in ex1 if f != first]
    alphas_up = all(ex1[b]["alpha"] > ex1[a]["alpha"] for a, b in zip([first, *larger], larger))
    beats = [f for f in larger if ex1[f]["mpt"] > ex1[f]["pred"]]
    ties = [f for f in larger if ex1[f]["mpt"] == ex1[f]["pred"]]
    out = {
        "ex1_text": "; ".join(f"f = {f:g} ({r['N']} remaining rare sample(s)): mean α_t {r['alpha']:.3f}, "
                              f"F1 of MPT {r['mpt']:.3f}, prediction only {r['pred']:.3f}, "
                              f"measurement only {r['meas']:.3f}" for f, r in ex1.items()),
        "ex1_alpha_word": "rises with every step" if alphas_up else "does not rise at every step",
        "ex1_answer": ("MPT beats its prediction-only variant at both larger fractions" if len(beats) == 2 else
                       f"MPT beats its prediction-only variant only at f = {beats[0]:g}" if beats else
                       "MPT ties its prediction-only variant at both larger fractions" if len(ties) == 2 else
                       "MPT does not beat its prediction-only variant at the larger fractions"),
    }
    long = int(long_history["round"].max())
    ex2 = {r: (history_value(long_history, "frozen", "f1", r),
               history_value(long_history, "stored_residual", "dist_oracle", r),
               history_value(long_history, "mpt", "dist_oracle", r)) for r in (rounds, long)}
    out.update(ex2_long=long, ex2_frozen_pre=history_value(long_history, "frozen", "f1", departure_round - 1),
               ex2_frozen_end=ex2[rounds][0], ex2_frozen_long=ex2[long][0], ex2_stored_end=ex2[rounds][1],
               ex2_mpt_end=ex2[rounds][2], ex2_stored_long=ex2[long][1], ex2_mpt_long=ex2[long][2],
               ex2_frozen_word="keeps degrading" if ex2[long][0] < ex2[rounds][0] else
               "does not keep degrading (it holds or recovers)",
               ex2_answer="the stored residual is farther from the oracle than MPT, as in the paper's Figure 6 (a)"
               if ex2[long][1] > ex2[long][2] else
               "the stored residual is not farther from the oracle than MPT, unlike the paper's Figure 6 (a)")
    h = reduced[first]
    variants = [m[len(VARIANT):] for m in pd.unique(h["method"]) if m.startswith(VARIANT)]
    ex3 = {label: (history_value(h, m, "dist_oracle"), history_value(h, m, "f1"))
           for label, m in [(EX_DEFAULT, "mpt"), *[(v, VARIANT + v) for v in variants]]}
    spread_f = max(f for _, f in ex3.values()) - min(f for _, f in ex3.values())
    out.update(ex3_text="; ".join(f"{k}: distance {d:.2f}, F1 {f:.3f}" for k, (d, f) in ex3.items()),
               ex3_spread_d=max(d for d, _ in ex3.values()) - min(d for d, _ in ex3.values()), ex3_spread_f=spread_f,
               ex3_most=max((k for k in ex3 if k != EX_DEFAULT), key=lambda k: abs(ex3[k][0] - ex3[EX_DEFAULT][0])),
               ex3_f1_word="below the resolution of one test image" if spread_f < one_image
               else "larger than one test image",
               ex_seconds=float(drift["runs"]["seconds"].sum() + fractions["runs"]["seconds"].sum()),
               ex_seed=int(long_history["seed"].iloc[0]), ex_rounds=last_round)
    return out


def ldc_steps_numbers(study: MPTStudy, wide: pd.DataFrame, datasets: Sequence[str], fraction: float, seed: int,
                      old_batch: int) -> dict[str, str]:
    """Exercise 4: LDC's Adam steps per round on every data set at ``fraction`` for ``seed`` with
    every sample of a remaining client (``drift_samples="all"``; counted,
    :func:`fedlib.tracking.ldc_steps_per_round`, no run) with the study's mini-batch and
    with ``old_batch``, and LDC's F1 in the fraction table (``wide`` of :func:`table_frames`).

    Returns
    -------
    dict of str to str
        ``ex4_text`` (per data set) and ``ex4_answer`` (the data set whose maps get the fewest
        steps with ``old_batch``).
    """
    rows = []
    for name in datasets:
        sizes = study.scenario(study.data(name, seed), fraction, seed).remaining_train_sizes()
        steps = {b: ldc_steps_per_round(sizes, b, study.ldc_epochs) for b in (study.ldc_batch, old_batch)}
        rows.append({"name": name, "n": float(np.mean(sizes)), "new": float(wide.loc[(name, fraction, seed), "ldc"]),
                     **steps})
    fewest = min(rows, key=lambda r: r[old_batch])
    b = study.ldc_batch
    return {"ex4_text": "; ".join(f"{r['name']}: {r['n']:.0f} training samples per remaining client, {r[b]:.0f} Adam "
                                  f"steps per round with batch {b} and {r[old_batch]:.0f} with batch {old_batch}; "
                                  f"LDC's F1 in the table ({study.drift_samples!r} budget) {r['new']:.3f}" for r in rows),
            "ex4_answer": f"{fewest['name']}, whose clients' maps get the fewest steps with batch {old_batch} "
                          f"({fewest[old_batch]:.0f} per round)"}


# ----------------------------------------------------------------- tables
UNIT_RANGE = (0.0, 1.0)
"""The range of an F1 and of an accuracy as fractions: a table's interval is clipped to it
(:func:`fedbook.intervals.plus_minus`)."""

CLIPPED_NOTE = ("Mean ± half-width of the 95 % interval over seeds; where that interval would leave the "
                "metric's range, it is shown clipped to the range, as [low, high].")
"""The caption of the chapter's tables over seeds (:func:`fedbook.intervals.plus_minus`'s bounds)."""


def last_round_table(history: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """The figure runs' last round: each method's rare-class F1 and overall accuracy, mean ±
    half-width of the 95 % interval over seeds (:func:`fedbook.intervals.seed_table`), rows named by
    :data:`LABELS`."""
    last = int(history["round"].max())
    final = pd.concat([
        seed_table(rows_where(history, metric="f1", round=last), "method", None, "value", digits=3,
                   bounds=UNIT_RANGE).rename(columns={"value": "rare-class F1"}),
        seed_table(rows_where(history, metric="accuracy", round=last), "method", None, "value", digits=3,
                   bounds=UNIT_RANGE).rename(
            columns={"value": "overall accuracy"}),
    ], axis=1).loc[list(methods)]
    final.index = pd.Index([LABELS[m] for m in final.index], name="method")
    return final


def fraction_tables(table: pd.DataFrame, methods: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Table II per data set: rows the ``methods`` (named by :data:`LABELS`), columns the remaining
    fractions, each cell the rare-class F1 at the last round, mean ± half-width over seeds."""
    out = {}
    for name in pd.unique(table["dataset"]):
        t = seed_table(table[table["dataset"] == name], "method", "fraction", "f1", digits=3, bounds=UNIT_RANGE)
        t = t.loc[list(methods)].rename(index=LABELS).rename_axis(f"{name}: method")
        t.columns = [f"rare-class F1, f = {f:g}" for f in t.columns]
        out[name] = t
    return out


def distance_table(history: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """Each method's Mahalanobis distance to the oracle at the last round, mean ± half-width over seeds."""
    last = int(history["round"].max())
    table = seed_table(rows_where(history, metric="dist_oracle", round=last), "method", None, "value", digits=2,
                       bounds=(0.0, None))
    table = table.loc[list(methods)]
    table.index = [LABELS[m] for m in table.index]
    return table.rename(columns={"value": "distance to the oracle at the last round"}).rename_axis("method")


def bytes_table(bytes_frame: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """Each method's bytes per client and round (mean over seeds) and relative to FedAvg's."""
    comm = bytes_frame.pivot(index="seed", columns="method", values="relative").mean().loc[list(methods)].to_frame(
        "bytes per client and round, relative to FedAvg")
    comm.insert(0, "bytes per client and round", bytes_frame.groupby("method")["bytes"].mean().loc[list(methods)])
    return comm.rename(index=LABELS).rename_axis("method")


def time_table(times: pd.DataFrame) -> pd.DataFrame:
    """Each extra work relative to one client's local training, mean ± half-width over seeds."""
    return seed_table(times, "part", None, "relative", digits=2, bounds=(0.0, None)).rename(
        columns={"relative": "time relative to one client's local training"}).rename_axis("extra work")


# ----------------------------------------------------------------- costs
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
    model of ``result`` and the data of the remaining client of ``scenario`` with the most rare-class
    training samples (the first of them on a tie).

    The parts (:data:`TIME_PARTS`): the clients' re-embedding and class statistics (every prototype
    method); SDC's second embedding and drift sums and LDC's second embedding and map training, on
    the study's drift budget (``drift_samples``: the client's rare-class samples, or all of them;
    the old embedding a stand-in: the current one plus noise); the server's aggregation of the run's
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
    rare = int(study.rare_class)
    remaining = [k for k in range(len(scenario.federation.clients)) if k != scenario.departing_client]
    client = scenario.federation.clients[max(remaining, key=lambda k: (
        int((scenario.federation.clients[k].train.y == rare).sum()), -k))]
    x, y = client.train.x, client.train.y
    used = (y == rare) if study.drift_samples == "rare" else torch.ones(len(y), dtype=torch.bool)
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

    z_now = embed()[used]  # the drift budget's samples
    z_old = z_now + 0.01 * torch.randn(z_now.shape, generator=torch_generator(seed, LOCAL_TRAIN, 1), dtype=z_now.dtype)
    t_train = median_seconds(train_once)
    model.load_state_dict(init)
    t_stats = median_seconds(lambda: ClassMoments.from_features(embed(), y, scenario.federation.n_classes))
    xs = x[used]

    @torch.no_grad()
    def embed_used():
        model.eval()
        return model.embed(xs).double()

    t_sdc = median_seconds(lambda: (embed_used(), sdc_client_sums(z_old, z_now, z_now.mean(0) if len(z_now) else
                                                                  torch.zeros(z_old.shape[1], dtype=torch.float64))))
    t_ldc = median_seconds(lambda: (embed_used(), len(z_now) and ldc_fit_map(
        z_old, z_now, epochs=study.ldc_epochs, batch_size=study.ldc_batch, generator=torch_generator(seed, LOCAL_TRAIN))),
        repeats=1)
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



# ----------------------------------------------------------------- figures
def plot_scenario(scenario: DepartureScenario, name: str, rare_class: int):
    """Training samples per client and class of ``scenario`` (a heat map)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_partition(scenario.federation.train_counts(), ax=ax, title=f"{name}: training counts (rare class {rare_class})")
    fig.tight_layout()
    plt.close(fig)  # shown once, as the value of the notebook's cell
    return fig


SUBJECT_COLOR = "#c0392b"
"""MPT's colour in the per-round figures: the figures' subject, drawn strong and on top."""

MUTED = ("#4c72b0", "#55a868", "#8172b2", "#ccb974", "#64b5cd", "#dd8452", "#937860", "#da8bc3", "#8c8c8c",
         "#2f4b7c", "#7aa974")
"""The other methods' colours in the per-round figures, in the order they are drawn (muted: thin,
lighter lines and faint bands, so that MPT stands out)."""

LEGEND_PT = 10.5
"""The per-round figures' legend size in points, on a figure 8 inches wide: shown 688 px wide in
the book's text column at 1280 px, a point is drawn 1.19 px, so the legend reads at 12.5 px (9.4 pt)."""


def method_style(method: str, i: int) -> tuple[dict, float]:
    """The line style of ``method``, the ``i``-th drawn, in the per-round figures, and its band's
    opacity: MPT strong (:data:`SUBJECT_COLOR`, thick, on top), the oracle dashed black, every other
    method muted (:data:`MUTED`).

    Examples
    --------
    >>> method_style("mpt", 7)[0]["color"], method_style("oracle", 8)[0]["ls"], method_style("sdc", 3)[0]["color"]
    ('#c0392b', '--', '#ccb974')
    """
    if method == "mpt":
        return {"color": SUBJECT_COLOR, "lw": 2.6, "zorder": 5}, 0.22
    if method == "oracle":
        return {"color": "k", "ls": "--", "lw": 1.3, "zorder": 4}, 0.05
    return {"color": MUTED[i % len(MUTED)], "lw": 1.1, "zorder": 2}, 0.06


def _band(ax, rounds, curves, label, low=0.0, high=None, alpha=0.12, **style) -> None:
    """One method's line (the mean over seeds) and band (its 95 % interval, clipped) per round."""
    mu, lo, hi = interval_band(curves)  # mean over seeds and its 95 % interval per round
    line, = ax.plot(rounds, mu, label=label, **style)
    if np.isfinite(lo).all():
        ax.fill_between(rounds, np.clip(lo, low, high), hi if high is None else np.clip(hi, low, high),
                        color=line.get_color(), alpha=alpha, lw=0, zorder=style.get("zorder", 2) - 0.5)


def plot_rounds(history: pd.DataFrame, methods: Sequence[str], departure_round: int):
    """Figure 4: rare-class F1 (left) and overall accuracy (right) of each method per round, the
    mean over seeds and its 95 % interval (clipped to [0, 1]); the oracle dashed. Returns the figure."""
    import matplotlib.pyplot as plt

    seeds = list(pd.unique(history["seed"]))
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.6))
    for i, m in enumerate(methods):
        style, alpha = method_style(m, i)
        for ax, metric in zip(axes, ["f1", "accuracy"]):
            rounds, curves = seed_curves(history, metric, m, seeds)  # (rounds,), (seeds, rounds)
            _band(ax, rounds, curves, LABELS[m], 0, 1, alpha=alpha, **style)
    for ax, title in zip(axes, ["rare-class F1", "overall accuracy"]):
        round_axis(ax, departure_round)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=LEGEND_PT, frameon=False)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    plt.close(fig)  # shown once, as the value of the notebook's cell
    return fig


def plot_distances(history: pd.DataFrame, methods: Sequence[str], departure_round: int):
    """Figure 6 (a): each method's Mahalanobis distance to the oracle per round, the mean over
    seeds and its 95 % interval (clipped at 0). Returns the figure."""
    import matplotlib.pyplot as plt

    seeds = list(pd.unique(history["seed"]))
    fig, ax = plt.subplots(figsize=(8, 5.6))
    for i, m in enumerate(methods):
        style, alpha = method_style(m, i)
        rounds, curves = seed_curves(history, "dist_oracle", m, seeds)
        _band(ax, rounds, curves, LABELS[m], 0, None, alpha=alpha, **{**style, **({"ls": "--"} if m == "transported" else {})})
    round_axis(ax, departure_round)
    ax.set_ylabel("Mahalanobis distance to the oracle prototype")
    ax.legend(fontsize=LEGEND_PT, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    fig.tight_layout()
    plt.close(fig)  # shown once, as the value of the notebook's cell
    return fig


def plot_distance_f1(history: pd.DataFrame, methods: Sequence[str], departure_round: int):
    """Figure 6 (b): rare-class F1 against the distance to the oracle, one point per method and
    round from the departure on, coloured by seed. Returns the figure."""
    import matplotlib.pyplot as plt

    dist_s, f1_s = per_seed(history, "dist_oracle"), per_seed(history, "f1")
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for s in pd.unique(history["seed"]):
        xs, ys = _distance_f1(dist_s[s], f1_s[s], methods, departure_round)
        ax.scatter(xs, ys, s=10, alpha=0.7, label=f"seed {s}")
    ax.set_xlabel("Mahalanobis distance to the oracle prototype")
    ax.set_ylabel("rare-class F1")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    plt.close(fig)  # shown once, as the value of the notebook's cell
    return fig


def plot_cost(history: pd.DataFrame, bytes_frame: pd.DataFrame, times: pd.DataFrame, methods: Sequence[str]):
    """Figure 5: each method's final rare-class F1 (mean over seeds) against its bytes relative to
    FedAvg's (left) and its extra client time relative to local training (right: every prototype
    method re-embeds, SDC and LDC add their own part, FedAvg nothing). Returns the figure."""
    import matplotlib.pyplot as plt

    last = int(history["round"].max())
    comm = bytes_frame.pivot(index="seed", columns="method", values="relative")
    spent = times.pivot(index="seed", columns="part", values="relative").mean()
    base = float(spent[TIME_PARTS[0]])
    extra = {"sdc": float(spent["SDC extra (client)"]), "ldc": float(spent["LDC extra (client)"])}
    markers = dict(zip(methods, "osD^vPXh"))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for m in methods:
        f1 = mean_at(history, "f1", last, m)
        for ax, x in zip(axes, [float(comm[m].mean()), 0.0 if m == "fedavg" else base + extra.get(m, 0.0)]):
            ax.scatter(x, f1, marker=markers[m], s=55, alpha=0.8, label=LABELS[m])
    axes[0].set_xlabel("bytes per client and round, relative to FedAvg")
    axes[1].set_xlabel("extra client time per round, relative to local training")
    for ax in axes:
        ax.set_ylabel("final rare-class F1 (mean over seeds)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    plt.close(fig)  # shown once, as the value of the notebook's cell
    return fig


__all__ = ["CLIPPED_NOTE", "EX_DEFAULT", "F1_STEP_FLOOR", "LABELS", "LEGEND_PT", "MUTED", "MPTStudy", "SUBJECT_COLOR", "UNIT_RANGE", "TABLE_II_NUIMAGES", "TIME_KEYS", "TIME_PARTS",
           "backbone_frame", "boundary_text", "bytes_cell", "bytes_table", "cost_numbers", "data_numbers",
           "data_sizes", "distance_numbers", "distance_seed", "distance_table", "exercise_numbers", "extra_work_times",
           "f1_step", "f1_step_numbers", "figure_cell", "figure_frames", "figure_numbers", "fraction_tables",
           "history_value", "last_round_table", "ldc_numbers", "ldc_steps_numbers", "lowest_read", "mean_at",
           "median_seconds", "method_style", "paper_lead", "per_seed", "plot_cost", "plot_distance_f1", "plot_distances",
           "plot_rounds", "plot_scenario", "reduced_cell", "regime_numbers", "resolution_numbers", "round_axis",
           "scenario_numbers", "seed_curves", "sizes_text", "spread_change", "stability_by_seed", "table_cell",
           "table_frames", "table_numbers", "time_table", "transport_numbers"]
