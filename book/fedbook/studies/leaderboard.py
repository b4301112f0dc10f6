r"""The leaderboard chapter's procedures (*Leaderboard: every method under one protocol*,
``notebooks/leaderboard.py``): every registered method (``fedlib.algorithms.registered``)
trained on the same federations, with the same model, rounds and local training, read through
the same protocol (:mod:`fedlib.metrics`) at the final round, over several seeds; the methods that
cannot run on such a federation are listed with the reason their class gives.

The protocol, once:

- **data**: the scikit-learn digits (:func:`fedlib.data.datasets.load_dataset`, ``"uci8"``: 1,797 images of
  8 × 8 pixels) as vectors of 64 values (:func:`digit_vectors`), so that the methods that work on
  feature vectors (GGEUR and its baselines) run on them as they are;
- **federations**: per seed, one :func:`fedlib.federation.make_federations` call (a class-balanced
  global test set, a Dirichlet label-skew partition per concentration :math:`\alpha`, a 75/25
  train / local-test split per client), shared by every method of that seed;
- **model**: one MLP (:func:`fedlib.models.build_model`, ``"mlp"``), its initial weights drawn
  from the run seed;
- **training**: one :class:`fedlib.training.TrainConfig` for every method's local update, and one
  for every method's personal or fine-tuning step (:func:`build_method`, :data:`SHARED`); every
  other hyper-parameter is the class's default;
- **reading**: the last round's evaluation (never the best round): mean client accuracy on the
  clients' pooled scores, the worst client and the bottom 20 % of those scores, mean global
  accuracy and mean local-test accuracy (:data:`COLUMNS`, the keys of
  :func:`fedlib.metrics.protocol_summary`), and the training bytes per client and round from the
  run's ledger (:class:`fedlib.messages.Ledger`);
- **execution**: the clients of a method that can stack them (its class's
  :attr:`fedlib.protocol.Capabilities.stacks`) train stacked (``execution="vectorized"``,
  :mod:`fedlib.engines.vectorized`), the others one after another (:func:`execution_of`), at less
  CPU. A stacked computation sums in another order, so its weights agree with a sequential run's to
  float32 rounding, not bit for bit, and an accuracy may therefore differ in a rare case (a score on
  the edge between two classes); it is still deterministic: the same seed gives the same bits, run
  stacked. The bytes may differ from a sequential run's by a few bytes per client and round, because
  a reply's metadata carries the client's mean training loss (``train_loss``), which the stacked
  computation rounds differently in its last bits, and the JSON text of a float is as long as its
  shortest exact decimal (the ``nbytes`` of a :class:`fedlib.messages.Message`);
- **uncertainty**: each cell as the mean over seeds with its 95 % Student's t interval
  (:func:`fedbook.intervals.mean_interval`), and the rank of every method re-drawn over bootstrap
  resamples of the seeds (:func:`rank_bootstrap`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedlib.algorithms import ALGORITHMS, make_algorithm, registered
from fedlib.algorithms.ggeur import StatisticsFirst
from fedlib.algorithms.mpt import METHOD_PAYLOAD
from fedlib.cgrl import CGRLConfig
from fedbook.intervals import bootstrap_means, mean_interval, plus_minus, signed
from fedbook.page import format_bytes
from fedlib.data import ArrayDataset, load_dataset
from fedlib.engines.vectorized import SequentialFallback
from fedbook.studies.setting import MEANS, TAILS, partition_label
from fedlib.federation import make_federation, make_federations
from fedlib.loop import LoopConfig
from fedlib.metrics import protocol_summary
from fedlib.models import build_model
from fedlib.protocol import Algorithm
from fedlib.rng import LEADERBOARD_BOOTSTRAP, numpy_rng
from fedlib.run import RunOptions, run_federated
from fedlib.training import TrainConfig
from fedlib.validation import check_int, check_real, is_int, is_real

COLUMNS = {"pooled": "mean client accuracy (%)", "worst_pooled": TAILS["worst_pooled"],
           "bottom20_pooled": TAILS["bottom20_pooled"], "global": MEANS["global"], "local": MEANS["local"]}
"""The protocol's numbers the leaderboard reports (keys of :func:`fedlib.metrics.protocol_summary`)
and their columns' names. A client's accuracy is its pooled score (its deployed predictor on the
class-balanced global test set, each class's recall weighted by the client's own class mix): its
own local test split is too small to rank clients, so the mean, the worst client and the bottom
20 % all read the pooled score; the mean local-test accuracy is reported beside it."""

RANK_METRICS = tuple(COLUMNS)
"""The metrics :func:`rank_bootstrap` can rank on (higher is better for each)."""

BYTES = "bytes_per_client_round"
"""The column of the training bytes (up and down) per client and communication round."""

BOOTSTRAP = LEADERBOARD_BOOTSTRAP
"""The purpose key of the rank bootstrap's stream, ``numpy_rng(seed, BOOTSTRAP)``
(:data:`fedlib.rng.LEADERBOARD_BOOTSTRAP`)."""

SHARED = {
    "fedavg": {"train": "train"},
    "fedavg_ft": {"train": "train", "finetune": "finetune"},
    "ditto": {"train": "train", "personal_train": "train"},
    "fedbabu": {"train": "train", "finetune": "finetune"},
    "fedetf": {"train": "train"},
    "fedrep": {"train": "train", "head_train": "train"},
    "fedprox": {"train": "train"},
    "fedproto": {"train": "train"},
    "ggeur": {"base": "fedavg"},
    "fedfa_style": {"base": "fedavg"},
    "fedmix_style": {"train": "train", "base": "fedavg"},
    "rebalanced": {"base": "fedavg"},
    "fedavg_se": {"train": "train"},
    "hdcfl": {"train": "train"},
    "ifca": {"train": "train"},
    "mpt": {"train": "train"},
    "cgrl": {"train": "train"},
}
"""Per registered method, which constructor parameter receives which shared setting:
``"train"`` (the local update), ``"finetune"`` (the fine-tuning before deployment) or
``"fedavg"`` (a FedAvg with the local update, the base of a statistics-first method). FedETF
keeps its default of no fine-tuning (FedETF, not FedETF-FT)."""

DISPLAY_NAMES = {
    "cgrl": "CGRL (FedGRC)", "comet": "COMET", "cosmos": "COSMOS", "ditto": "Ditto", "fedavg": "FedAvg",
    "fedavg_ft": "FedAvg-FT", "fedavg_se": "FedAvg-SE", "fedbabu": "FedBABU", "fedct": "FedCT", "fedetf": "FedETF",
    "fedfa_style": "FedFA-style", "fedmd": "FedMD", "fedmix_style": "FedMix-style", "fedproto": "FedProto",
    "fedprox": "FedProx", "fedrep": "FedRep", "ggeur": "GGEUR", "hdcfl": "HDC-FL", "ifca": "IFCA", "mpt": "MPT",
    "rebalanced": "rebalancing control",
}
"""The name a page shows for each registered method (its registry key is what code passes:
``fedavg_ft`` is FedAvg-FT, FedAvg with fine-tuning before deployment; ``rebalanced`` the control
that fills each class by resampling the client's own samples). A registered method missing here
is shown by its class's name (:func:`display_name`)."""


def display_name(key: str) -> str:
    """The page's name of the registered method ``key`` (:data:`DISPLAY_NAMES`, else its class's name).

    Examples
    --------
    >>> display_name("fedavg_ft"), display_name("rebalanced")
    ('FedAvg-FT', 'rebalancing control')
    """
    _names([key])
    return DISPLAY_NAMES.get(key, ALGORITHMS[key].__name__)


def named(frame: pd.DataFrame, key_column: bool = False) -> pd.DataFrame:
    """``frame`` with its ``method`` index level (registry keys) shown by :func:`display_name`;
    ``key_column``: the registry key kept as a column beside it (what ``-p methods=[...]`` takes).

    Examples
    --------
    >>> t = pd.DataFrame({"rounds": [5]}, index=pd.Index(["fedavg_ft"], name="method"))
    >>> named(t, key_column=True).reset_index().values.tolist()
    [['FedAvg-FT', 'fedavg_ft', 5]]
    """
    out = frame.copy()
    keys = out.index.get_level_values("method")
    if key_column:
        out.insert(0, "registry key", list(keys))
    return out.rename(index={k: display_name(k) for k in dict.fromkeys(keys)}, level="method")


_SETTING_WORDS = {"train": "local update", "finetune": "fine-tuning", "fedavg": "FedAvg(local update)"}

SEEDED = ("ifca", "hdcfl", "mpt")
"""The methods whose class takes a ``seed`` of its own server-side randomness: it is the run seed."""


def _names(names: Iterable[str] | None) -> list[str]:
    valid = registered()
    if names is None:
        return valid
    if isinstance(names, str):
        raise ValueError(f"names must be a list of registered method names, got the string {names!r}; "
                         f"valid: {', '.join(valid)}")
    names = list(names)
    bad = [n for n in names if n not in valid]
    if bad:
        raise ValueError(f"unknown method(s) {', '.join(map(repr, bad))}; valid: {', '.join(valid)}")
    if not names or len(set(names)) != len(names):
        raise ValueError(f"names must be distinct registered methods, at least one, got {names!r}")
    return names


def digit_vectors(n_samples: int | None = None, seed: int = 0) -> ArrayDataset:
    """The scikit-learn digits (:func:`fedlib.data.datasets.load_dataset` ``"uci8"``, 8 × 8 pixels in [0, 1])
    as vectors of shape (n, 64), seeded-subsampled to ``n_samples`` (``None``: all 1,797).

    Examples
    --------
    >>> data = digit_vectors(300, seed=1)
    >>> tuple(data.x.shape), data.n_classes
    ((300, 64), 10)
    """
    images = load_dataset("uci8", n_samples=n_samples, seed=seed)
    return ArrayDataset(images.x.flatten(1).contiguous(), images.y, images.n_classes, "uci_digits_vectors")


@dataclass(frozen=True)
class LeaderboardConfig:
    """What every method shares (besides the federation).

    Attributes
    ----------
    rounds : training rounds (a statistics-first method runs one statistics round more,
        :func:`communication_rounds`)
    local_epochs, lr, batch_size, momentum : the local update of every method (SGD)
    finetune_epochs : the epochs of every fine-tuning step before deployment (FedAvg-FT,
        FedBABU), at the same learning rate
    hidden : the MLP's hidden widths
    total_per_class : GGEUR, FedFA-style and the rebalancing control fill each class a client
        holds up to this many samples (the classes' default, 500, is for CLIP embeddings of
        thousands of images; a digits client holds tens per class)
    """

    rounds: int = 20
    local_epochs: int = 1
    lr: float = 0.05
    batch_size: int = 32
    momentum: float = 0.9
    finetune_epochs: int = 5
    hidden: tuple[int, ...] = (128, 64)
    total_per_class: int = 40

    def __post_init__(self) -> None:
        check_int("rounds", self.rounds, low=1)
        check_int("local_epochs", self.local_epochs, low=1)
        check_int("finetune_epochs", self.finetune_epochs, low=0)
        check_int("batch_size", self.batch_size, low=1)
        check_int("total_per_class", self.total_per_class, low=0)
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_real("momentum", self.momentum, low=0.0, high=1.0, high_open=True)
        hidden = tuple(self.hidden) if isinstance(self.hidden, (list, tuple)) else None
        if not hidden or any(not is_int(h) or h < 1 for h in hidden):
            raise ValueError(f"hidden must be a non-empty sequence of positive ints, got {self.hidden!r}")
        object.__setattr__(self, "hidden", hidden)

    @property
    def train(self) -> TrainConfig:
        """The local update every method shares."""
        return TrainConfig(epochs=self.local_epochs, batch_size=self.batch_size, lr=self.lr, momentum=self.momentum)

    @property
    def finetune(self) -> TrainConfig:
        """The fine-tuning step every method that fine-tunes shares."""
        return dataclasses.replace(self.train, epochs=self.finetune_epochs)


def exclusion_reason(name: str) -> str | None:
    """Why the registered method ``name`` cannot run on the shared federation, read from its class's
    :class:`fedlib.protocol.Capabilities` (``None``: it can): ``needs_public`` says that it needs
    something the federation does not hold (COSMOS and its baselines need ``public``, an unlabeled
    public set that every client and the server read), and ``model_agnostic`` that the method is
    built for clients of different architectures.

    Examples
    --------
    >>> exclusion_reason("fedavg") is None
    True
    >>> for part in exclusion_reason("fedmd").split("; "):
    ...     print(part)
    needs public (PublicSet), which the shared federation does not hold
    built for clients of different architectures (model_agnostic)
    """
    _names([name])
    can = ALGORITHMS[name].capabilities
    if not can.needs_public:
        return None
    reason = "needs public (PublicSet), which the shared federation does not hold"
    if can.model_agnostic:
        reason += "; built for clients of different architectures (model_agnostic)"
    return reason


def split_methods(names: Iterable[str] | None = None) -> tuple[list[str], pd.DataFrame]:
    """The methods that run on the shared federation, and a table of the others (indexed by
    ``method``: its ``class`` and the ``reason``, :func:`exclusion_reason`).

    Examples
    --------
    >>> runs, excluded = split_methods(["fedavg", "cosmos", "ditto"])
    >>> runs, excluded.index.tolist()
    (['fedavg', 'ditto'], ['cosmos'])
    """
    names = _names(names)
    reasons = {n: exclusion_reason(n) for n in names}
    rows = [{"method": n, "class": ALGORITHMS[n].__name__, "reason": r} for n, r in reasons.items() if r is not None]
    excluded = pd.DataFrame(rows, columns=["method", "class", "reason"]).set_index("method")
    return [n for n in names if reasons[n] is None], excluded


def statistics_rounds(name: str) -> int:
    """The rounds a method spends before it trains: 1 for a statistics-first method (its round 1
    exchanges statistics only, :class:`fedlib.algorithms.ggeur.StatisticsFirst`), else 0.

    Examples
    --------
    >>> statistics_rounds("ggeur"), statistics_rounds("fedavg")
    (1, 0)
    """
    _names([name])
    return int(issubclass(ALGORITHMS[name], StatisticsFirst))


def communication_rounds(name: str, rounds: int) -> int:
    """The rounds a run of ``name`` takes for ``rounds`` training rounds: every method trains the
    same number of rounds, a statistics-first one runs its statistics round first.

    Examples
    --------
    >>> communication_rounds("ggeur", 20), communication_rounds("ditto", 20)
    (21, 20)
    """
    return rounds + statistics_rounds(name)


def build_method(name: str, config: LeaderboardConfig, seed: int, *, vectors: bool = True) -> Algorithm:
    """The registered method ``name`` with the shared settings (:data:`SHARED`) and its class's
    defaults otherwise; the methods of :data:`SEEDED` take ``seed``. CGRL's augmentations act on
    images: on vector inputs (``vectors``) it runs with identity views (``augment="none"``).

    Raises
    ------
    ValueError
        On a name that is not registered or is excluded (:func:`exclusion_reason`).

    Examples
    --------
    >>> m = build_method("fedbabu", LeaderboardConfig(local_epochs=2, finetune_epochs=3), seed=0)
    >>> m.train.epochs, m.finetune.epochs
    (2, 3)
    """
    _names([name])
    reason = exclusion_reason(name)
    if reason is not None:
        raise ValueError(f"method {name!r} cannot run on the shared federation: {reason}; valid: "
                         f"{', '.join(split_methods()[0])}")
    if name not in SHARED:
        raise ValueError(f"method {name!r} is registered but the leaderboard does not say which of its parameters take "
                         f"the shared settings: add it to SHARED (it knows {', '.join(SHARED)})")
    settings = {"train": config.train, "finetune": config.finetune}
    kwargs = {}
    for param, what in SHARED[name].items():
        kwargs[param] = make_algorithm("fedavg", train=config.train) if what == "fedavg" else settings[what]
    if "total_per_class" in inspect.signature(ALGORITHMS[name]).parameters:
        kwargs["total_per_class"] = config.total_per_class
    if name in SEEDED:
        kwargs["seed"] = seed
    if name == "cgrl" and vectors:
        kwargs["cgrl"] = CGRLConfig(augment="none")
    if name == "mpt":  # the statistics its own deployment reads, not every part (the default, for its chapter's study)
        kwargs["payload"] = METHOD_PAYLOAD["mpt"]
    return make_algorithm(name, **kwargs)


def method_table(names: Sequence[str], config: LeaderboardConfig) -> pd.DataFrame:
    """What each method of ``names`` receives: its class, its communication rounds
    (:func:`communication_rounds`) and which constructor parameters take the shared local update
    and fine-tuning (:data:`SHARED`), and what else differs from the class's defaults.

    Examples
    --------
    >>> t = method_table(["fedavg", "ggeur"], LeaderboardConfig(rounds=5))
    >>> t["rounds"].tolist()
    [5, 6]
    """
    names = _names(names)
    rows = []
    for n in names:
        shared = ", ".join(f"{p} = {_SETTING_WORDS[w]}" for p, w in SHARED[n].items())
        notes = []
        if "total_per_class" in inspect.signature(ALGORITHMS[n]).parameters:
            notes.append(f"total_per_class = {config.total_per_class}")
        if statistics_rounds(n):
            notes.append("round 1 exchanges statistics only")
        if n in SEEDED:
            notes.append("seed = run seed")
        if n == "mpt":
            notes.append(f"payload = {', '.join(METHOD_PAYLOAD['mpt'])} (what its deployment reads)")
        if n == "cgrl":
            notes.append("identity views (augment = none): the inputs are vectors, not images")
        rows.append({"method": n, "class": ALGORITHMS[n].__name__, "rounds": communication_rounds(n, config.rounds),
                     "shared settings": shared, "differs from the class's defaults": "; ".join(notes) or "nothing"})
    return pd.DataFrame(rows).set_index("method")


EXECUTIONS = ("vectorized", "sequential")
"""How a leaderboard run's clients may train (:func:`execution_of`): ``"vectorized"`` (the
default) stacks the clients of every method that can stack them, ``"sequential"`` trains every
method's clients one after another."""


def execution_of(name: str, execution: str = "vectorized") -> str:
    """The :class:`fedlib.run.RunOptions` ``execution`` a leaderboard run of ``name`` uses: ``"vectorized"``
    only where asked (``execution``) and where the method's class can stack its clients
    (:attr:`fedlib.protocol.Capabilities.stacks`), else ``"sequential"``. Stacked clients reach
    the weights of a sequential run to float32 rounding, not bit for bit (a batched computation
    sums in another order), so an accuracy may differ in a rare case; the same seed still gives
    the same bits when run stacked. A reply's reported mean training loss (``train_loss``,
    metadata) may differ in its last bits, so its size in bytes may differ by a few characters.

    Examples
    --------
    >>> execution_of("fedavg"), execution_of("fedproto"), execution_of("fedavg", "sequential")
    ('vectorized', 'sequential', 'sequential')
    """
    _names([name])
    if execution not in EXECUTIONS:
        raise ValueError(f"unknown execution {execution!r}; valid: {', '.join(EXECUTIONS)}")
    return "vectorized" if execution == "vectorized" and ALGORITHMS[name].capabilities.stacks else "sequential"


def run_one(name: str, federation, config: LeaderboardConfig, seed: int, execution: str = "vectorized") -> dict:
    """One run of ``name`` on ``federation`` (the shared MLP, :func:`build_method`) and its
    final-round reading: every key of :func:`fedlib.metrics.protocol_summary`, ``bytes_per_round``
    (training messages up and down, all clients) and :data:`BYTES` (the same per client), the
    ``rounds`` run and the process's ``cpu_seconds``. ``execution``: :data:`EXECUTIONS`, applied
    by :func:`execution_of` (a round whose work cannot stack runs sequentially within a
    vectorized run, silently: that is the declared behaviour, not a fault).
    """
    options = RunOptions(execution=execution_of(name, execution))
    vectors = federation.global_test.x.dim() == 2
    in_features = int(np.prod(federation.global_test.x.shape[1:]))
    model_fn = _MLP(in_features, federation.n_classes, config.hidden)
    rounds = communication_rounds(name, config.rounds)
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SequentialFallback)
        run = run_federated(build_method(name, config, seed, vectors=vectors), federation, model_fn,
                            LoopConfig(rounds=rounds, seed=seed), options)
    seconds = time.process_time() - t0
    if run.rounds_done != rounds:
        raise RuntimeError(f"{name} stopped after round {run.rounds_done} of {rounds}")
    summary = protocol_summary(run.per_client(rounds))  # the last round, never the best
    sent = float(run.ledger.select(phase="train")["bytes"].sum())
    return {**summary, "bytes_per_round": sent / rounds, BYTES: sent / (rounds * federation.n_clients),
            "rounds": rounds, "cpu_seconds": seconds}


@dataclass(frozen=True)
class _MLP:
    """A picklable ``model_fn``: the shared MLP on vectors of ``in_features``."""

    in_features: int
    n_classes: int
    hidden: tuple[int, ...]

    def __call__(self):
        return build_model("mlp", in_channels=self.in_features, input_size=1, n_classes=self.n_classes,
                           hidden=self.hidden)


def _check_alphas(alphas) -> list[float]:
    if isinstance(alphas, (str, bytes)) or not isinstance(alphas, Iterable):
        raise ValueError(f"alphas must be a list of Dirichlet concentrations > 0, got {alphas!r}")
    alphas = list(alphas)
    bad = [a for a in alphas if not (is_real(a) and 0 < a < math.inf)]
    if not alphas or bad or len(set(alphas)) != len(alphas):
        raise ValueError(f"alphas must be distinct Dirichlet concentrations > 0 (no IID None here), got {alphas!r}")
    return [float(a) for a in alphas]


def leaderboard_cell(seed: int, alpha: float, method: str, *, config: LeaderboardConfig, n_samples: int | None,
                     data_seed: int, n_clients: int, global_test_per_class: int,
                     execution: str = "vectorized") -> pd.DataFrame:
    """One cell of the leaderboard's study (methods × ``alpha`` × seeds): ``method`` with run seed
    ``seed`` (:func:`run_one`) on the federation of ``seed`` at ``alpha``, the one that
    :func:`fedlib.federation.make_federations` builds for every concentration of a seed, over the
    digits of :func:`digit_vectors` (``n_samples`` of them, drawn by ``data_seed``: the page's
    seed, the same data for every seed). Every method of a seed trains on the same federation
    from the same initial weights: the cells of a seed are paired. ``execution``: how the
    clients train (:data:`EXECUTIONS`, :func:`execution_of`).

    Returns
    -------
    DataFrame
        One row: the columns of :func:`run_one`.

    Raises
    ------
    ValueError
        On an unknown or excluded method, a bad ``alpha``, ``n_clients`` or
        ``global_test_per_class`` (the message names the bad value and the valid ones).
    """
    names = _names([method])
    if exclusion_reason(method) is not None:
        raise ValueError(f"method(s) {', '.join(names)} cannot run on the shared federation; valid: "
                         f"{', '.join(split_methods()[0])}")
    (alpha,) = _check_alphas([alpha])
    check_int("n_clients", n_clients, low=2)
    check_int("global_test_per_class", global_test_per_class, low=1)
    execution_of(method, execution)  # a bad execution is refused before the data are built
    data = digit_vectors(n_samples, seed=data_seed)
    fed = make_federations(data, [alpha], n_clients=n_clients, global_test_per_class=global_test_per_class, seed=seed)
    return pd.DataFrame([run_one(method, fed[alpha], config, seed, execution)])


def _check_rows(rows, metrics: Iterable[str]) -> None:
    if not isinstance(rows, pd.DataFrame):
        raise ValueError(f"rows must be the frame of the leaderboard's study (leaderboard_cell), got {type(rows).__name__}")
    missing = [c for c in ("alpha", "seed", "method", *metrics) if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lack the column(s) {missing}; they have {list(rows.columns)}")
    dup = rows.duplicated(["alpha", "seed", "method"])
    if dup.any():
        r = rows[dup].iloc[0]
        raise ValueError(f"rows hold (alpha, seed, method) = ({r['alpha']}, {r['seed']}, {r['method']}) twice")


def summary_table(rows: pd.DataFrame, metrics: Sequence[str] = tuple(COLUMNS), level: float = 0.95) -> pd.DataFrame:
    """Per (``alpha``, ``method``), each metric (percent) as the mean over seeds with its interval
    at ``level`` (:func:`fedbook.intervals.mean_interval`): columns ``<metric>``, ``<metric> low``,
    ``<metric> high`` and ``<metric> ±`` (the half-width; infinite for one seed), and the mean
    ``bytes_per_client_round`` and ``seeds``. Methods keep their order of appearance.

    Examples
    --------
    >>> rows = pd.DataFrame({"alpha": 0.1, "seed": [0, 1, 2, 0, 1, 2], "method": ["a"] * 3 + ["b"] * 3,
    ...                      "pooled": [0.90, 0.91, 0.92, 0.5, 0.5, 0.5], BYTES: 100.0})
    >>> t = summary_table(rows, ["pooled"])
    >>> t.loc[(0.1, "a"), ["pooled", "pooled low"]].round(2).tolist(), float(t.loc[(0.1, "b"), "pooled ±"])
    ([91.0, 88.52], 0.0)
    """
    metrics = list(metrics)
    _check_rows(rows, [*metrics, BYTES])
    out = []
    for (a, m), g in rows.groupby(["alpha", "method"], sort=False):
        row = {"alpha": a, "method": m, "seeds": len(g), BYTES: float(g[BYTES].mean())}
        for k in metrics:
            values = 100 * g[k].to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            row[f"{k} n"] = len(values)  # the seeds the interval rests on (a non-finite run is left out)
            if len(values) == 0:
                row.update({k: math.nan, f"{k} low": math.nan, f"{k} high": math.nan, f"{k} ±": math.nan})
                continue
            iv = mean_interval(values, level)
            row.update({k: iv.mean, f"{k} low": iv.low, f"{k} high": iv.high, f"{k} ±": iv.half_width})
        out.append(row)
    return pd.DataFrame(out).set_index(["alpha", "method"])


PERCENT = (0.0, 100.0)
"""The range of every metric of the board (percent): a cell's interval that would leave it is shown
clipped to it (:func:`fedbook.intervals.plus_minus`)."""


def board(summary: pd.DataFrame, alpha: float, ranks: pd.DataFrame | None = None,
          metrics: Sequence[str] = tuple(COLUMNS), digits: int = 1, sort_by: str | None = None) -> pd.DataFrame:
    """The leaderboard at ``alpha`` for reading: one row per method, sorted by the mean of
    ``sort_by`` (default: the first metric; best first), each metric as ``mean ± half-width``
    (:func:`fedbook.intervals.plus_minus`, clipped to :data:`PERCENT`) under its name
    (:data:`COLUMNS`), the bytes per client and round, and with ``ranks``
    (:func:`rank_bootstrap`) the share of resamples ranked first and the median rank.

    Raises
    ------
    ValueError
        On an ``alpha`` the summary does not hold (the message names those it holds).
    """
    alphas = list(dict.fromkeys(summary.index.get_level_values("alpha")))
    if alpha not in alphas:
        raise ValueError(f"no results at alpha = {alpha!r}; valid: {', '.join(map(str, alphas))}")
    sort_by = metrics[0] if sort_by is None else sort_by
    if sort_by not in metrics or sort_by not in summary.columns:
        raise ValueError(f"cannot sort by {sort_by!r}; valid: {', '.join(m for m in metrics if m in summary.columns)}")
    s = summary.loc[alpha].sort_values(sort_by, ascending=False, kind="stable")
    out = pd.DataFrame(index=s.index)
    for k in metrics:
        out[COLUMNS.get(k, k)] = [plus_minus(m, h, digits, PERCENT) for m, h in zip(s[k], s[f"{k} ±"])]
    out["bytes per client and round"] = s[BYTES]
    if ranks is not None:
        r = ranks.loc[alpha].reindex(s.index)
        out["ranked first (%)"] = 100 * r["first"]
        out["median rank"] = r["median rank"]
    return out


def ranks_of(values: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis, 1 for the largest value (ties share the mean of their
    places).

    Examples
    --------
    >>> ranks_of(np.array([0.5, 0.9, 0.7])).tolist()
    [3.0, 1.0, 2.0]
    >>> ranks_of(np.array([[0.9, 0.9, 0.1]])).tolist()
    [[1.5, 1.5, 3.0]]
    """
    values = np.asarray(values, dtype=float)
    greater = (values[..., None, :] > values[..., :, None]).sum(-1)  # others strictly better, per entry
    equal = (values[..., None, :] == values[..., :, None]).sum(-1)  # itself included
    return 1.0 + greater + (equal - 1) / 2.0


def first_shares(values: np.ndarray) -> np.ndarray:
    """Each entry's share of first place along the last axis: 1 for a unique maximum, ``1/k`` for
    each of ``k`` tied maxima, 0 otherwise.

    Examples
    --------
    >>> first_shares(np.array([[0.9, 0.9, 0.1], [0.2, 0.8, 0.5]])).tolist()
    [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]
    """
    values = np.asarray(values, dtype=float)
    top = values == values.max(axis=-1, keepdims=True)
    return top / top.sum(axis=-1, keepdims=True)


def rank_bootstrap(rows: pd.DataFrame, metric: str = "pooled", n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    r"""How sure is the order? Per ``alpha``, the methods' means of ``metric`` over ``n_boot``
    resamples of the seeds, the same resample for every method (the methods of a seed share its
    federation: :func:`fedbook.intervals.bootstrap_means` of the seeds × methods values, one stream
    ``numpy_rng(seed, BOOTSTRAP)`` for every ``alpha`` in turn), each resample ranked
    (:func:`ranks_of`, 1 = best).

    Returns
    -------
    DataFrame
        Indexed by (``alpha``, ``method``): ``rank`` (on the observed means), ``first`` (the share
        of resamples that rank the method first, ties sharing, :func:`first_shares`) and
        ``median rank`` over the resamples.

    Raises
    ------
    ValueError
        On a metric not in :data:`RANK_METRICS`, ``n_boot`` < 1, a method without a value for
        every seed, or NaN values.

    Examples
    --------
    >>> rows = pd.DataFrame({"alpha": 0.1, "seed": [0, 1, 0, 1], "method": ["a", "a", "b", "b"],
    ...                      "pooled": [0.9, 0.8, 0.1, 0.2]})
    >>> rank_bootstrap(rows, n_boot=50).loc[0.1].to_dict("index")["a"]
    {'rank': 1.0, 'first': 1.0, 'median rank': 1.0}
    """
    if metric not in RANK_METRICS:
        raise ValueError(f"unknown metric {metric!r} to rank on; valid: {', '.join(RANK_METRICS)}")
    if not is_int(n_boot) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    _check_rows(rows, [metric])
    rng = numpy_rng(seed, BOOTSTRAP)
    out = []
    for a, g in rows.groupby("alpha", sort=False):
        wide = g.pivot(index="seed", columns="method", values=metric)[list(dict.fromkeys(g["method"]))]
        finite = np.isfinite(wide.to_numpy(dtype=float))
        if not finite.all():
            bad = wide.columns[~finite.all(axis=0)].tolist()
            raise ValueError(f"at alpha = {a}, method(s) {bad} lack a finite {metric} for some seed; every method "
                             f"needs one per seed (seeds {wide.index.tolist()})")
        values = wide.to_numpy(dtype=float)  # (n_seeds, n_methods)
        means = bootstrap_means(values, int(n_boot), rng)  # (n_boot, n_methods)
        ranks = ranks_of(means)
        observed = ranks_of(values.mean(axis=0))
        first = first_shares(means).mean(axis=0)
        for j, m in enumerate(wide.columns):
            out.append({"alpha": a, "method": m, "rank": float(observed[j]), "first": float(first[j]),
                        "median rank": float(np.median(ranks[:, j]))})
    return pd.DataFrame(out).set_index(["alpha", "method"])


def pareto_front(accuracy: Mapping[str, float], cost: Mapping[str, float]) -> list[str]:
    """The methods no other method beats on both axes: none has at least their ``accuracy`` at
    most their ``cost`` with one of the two strictly better. In the order of ``accuracy``.

    Examples
    --------
    >>> pareto_front({"a": 90, "b": 80, "c": 85}, {"a": 10, "b": 5, "c": 20})
    ['a', 'b']
    """
    names = list(accuracy)
    if set(names) != set(cost):
        raise ValueError(f"accuracy and cost must name the same methods, got {sorted(accuracy)} and {sorted(cost)}")
    front = []
    for n in names:
        dominated = any(accuracy[o] >= accuracy[n] and cost[o] <= cost[n]
                        and (accuracy[o] > accuracy[n] or cost[o] < cost[n]) for o in names if o != n)
        if not dominated:
            front.append(n)
    return front


CONTENDER_SHARE = 0.05
"""A method ranked first in at least this share of the resamples is a contender (:func:`winner_words`)."""


def lead_interval(rows: pd.DataFrame, alpha: float, metric: str, leader: str, other: str, level: float = 0.95):
    """The leader's lead over ``other`` at ``alpha`` in points of ``metric``: the mean over seeds of
    the paired difference (the two methods of a seed share its federation and initial weights)
    with its interval at ``level`` (:func:`fedbook.intervals.mean_interval`).

    Examples
    --------
    >>> rows = pd.DataFrame({"alpha": 0.1, "seed": [0, 1, 2] * 2, "method": ["a"] * 3 + ["b"] * 3,
    ...                      "pooled": [0.90, 0.925, 0.95, 0.88, 0.90, 0.92]})
    >>> iv = lead_interval(rows, 0.1, "pooled", "a", "b")  # leads of 2, 2.5 and 3 points
    >>> round(iv.mean, 2), round(iv.low, 2), round(iv.high, 2)
    (2.5, 1.26, 3.74)
    """
    _check_rows(rows, [metric])
    at = rows[rows["alpha"] == alpha]
    if at.empty:
        raise ValueError(f"no rows at alpha = {alpha!r}; valid: {', '.join(map(str, dict.fromkeys(rows['alpha'])))}")
    wide = at.pivot(index="seed", columns="method", values=metric)
    for m in (leader, other):
        if m not in wide.columns:
            raise ValueError(f"no method {m!r} at alpha = {alpha!r}; valid: {', '.join(wide.columns)}")
    diff = 100 * (wide[leader] - wide[other]).to_numpy(dtype=float)
    if not np.isfinite(diff).all():
        raise ValueError(f"{leader} or {other} lacks a finite {metric} on some seed at alpha = {alpha!r}")
    return mean_interval(diff, level)


def winner_words(ranks: pd.DataFrame, alpha: float, rows: pd.DataFrame | None = None,
                 metric: str = "pooled") -> dict[str, str | float]:
    """The rank uncertainty at ``alpha`` in words: ``leader`` (the best observed rank; ties: the
    first listed), ``leader_first`` (its share of first places, %), ``runner_up``, ``contenders``
    (the methods ranked first in at least :data:`CONTENDER_SHARE` of resamples) and ``verdict``.

    The share of first places alone can overstate how settled a first place is: a lead on every
    seed, however small, is first in every resample, and a bootstrap of a few seeds
    has few distinct resamples. With ``rows`` (the study's, :func:`leaderboard_cell`) the verdict also reads
    the leader's paired lead over the runner-up (:func:`lead_interval`): the first place is
    called settled only when the leader is first in at least ``1 − CONTENDER_SHARE`` of the
    resamples **and** that interval clears zero; ``lead`` is then the interval in words.

    Examples
    --------
    >>> r = pd.DataFrame({"alpha": 0.1, "method": ["a", "b", "c"], "rank": [1.0, 2.0, 3.0],
    ...                   "first": [0.7, 0.3, 0.0], "median rank": [1.0, 2.0, 3.0]}).set_index(["alpha", "method"])
    >>> w = winner_words(r, 0.1)
    >>> w["leader"], w["contenders"], w["verdict"]
    ('a', 'a (70 %) and b (30 %)', 'the first place is not settled: another method takes it in 30 % of the resamples')
    """
    alphas = list(dict.fromkeys(ranks.index.get_level_values("alpha")))
    if alpha not in alphas:
        raise ValueError(f"no ranks at alpha = {alpha!r}; valid: {', '.join(map(str, alphas))}")
    r = ranks.loc[alpha].sort_values(["rank", "first"], ascending=[True, False], kind="stable")
    leader, runner = r.index[0], (r.index[1] if len(r) > 1 else "none")
    contenders = r[r["first"] >= CONTENDER_SHARE].sort_values("first", ascending=False)
    items = [f"{m} ({100 * f:.0f} %)" for m, f in contenders["first"].items()]
    text = items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}" if items else "none"
    other = 1.0 - float(r.loc[leader, "first"])
    lead = lead_interval(rows, alpha, metric, leader, runner) if rows is not None and runner != "none" else None
    if lead is not None:
        mean_, low_, high_ = (signed(x, 1) for x in (lead.mean, lead.low, lead.high))
    lead_text = ("" if lead is None else
                 f"{leader}'s lead over {runner} is {mean_} points [{low_}, {high_}] (95 %, paired over seeds)")
    if other > CONTENDER_SHARE:
        verdict = f"the first place is not settled: another method takes it in {100 * other:.0f} % of the resamples"
    elif lead is not None and not lead.low > 0:
        verdict = (f"the first place is not settled: {leader} is first in {100 - 100 * other:.0f} % of the resamples, "
                   f"but its lead over {runner} is within the noise ({mean_} points [{low_}, {high_}])")
    else:
        verdict = (f"the first place is settled at these seeds: the leader is first in at least "
                   f"{100 - 100 * CONTENDER_SHARE:.0f} % of the resamples" + (f" and {lead_text}" if lead_text else ""))
    return {"leader": leader, "leader_first": 100 * float(r.loc[leader, "first"]), "runner_up": runner,
            "contenders": text, "verdict": verdict, "lead": lead_text or "not computed"}


def plot_accuracy(summary: pd.DataFrame, alphas: Sequence[float]) -> plt.Figure:
    """Every method's mean client accuracy (a dot) with its interval over seeds (a bar) and its
    worst client (a cross), one panel per ``alpha`` (sorted); the methods ordered by their mean
    client accuracy at the most skewed ``alpha``, the best on top. ``summary``: :func:`summary_table`."""
    order = summary.loc[min(alphas)].sort_values("pooled", kind="stable").index.tolist()  # best at the top
    fig, axes = plt.subplots(1, len(alphas), figsize=(min(10, 5 * len(alphas)), 0.32 * len(order) + 1.6),
                             sharey=True, squeeze=False)
    for ax, a in zip(axes[0], sorted(alphas)):
        s = summary.loc[a].reindex(order)
        ys = np.arange(len(order))
        half = s["pooled ±"].to_numpy(dtype=float)
        ax.errorbar(s["pooled"], ys, xerr=np.where(np.isfinite(half), half, 0.0), fmt="o", color="C0", capsize=2,
                    label="mean client accuracy")
        ax.scatter(s["worst_pooled"], ys, marker="x", color="C3", label="worst client", zorder=3)
        ax.set_yticks(ys, [display_name(m) for m in order])
        ax.set_xlim(0, 100)
        ax.set_xlabel("accuracy (%)")
        ax.set_title(partition_label(a))
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def boards(summary: pd.DataFrame, ranks: pd.DataFrame, alphas: Sequence[float], sort_by: str) -> pd.DataFrame:
    """The page's leaderboard: :func:`board` of every ``alpha``, one table indexed by (``α``, ``method``)."""
    return pd.concat({a: board(summary, a, ranks, sort_by=sort_by) for a in alphas}, names=["α", "method"])


MOVE = 3
"""Places: a "large" move between two orders of the board (Exercise 2)."""


def numbers(rows: pd.DataFrame, summary: pd.DataFrame, ranks: pd.DataFrame, settings: Any, names: Sequence[str],
            excluded: pd.DataFrame, data: ArrayDataset, config: LeaderboardConfig, seed: int) -> dict[str, Any]:
    """Every number the page's prose reads, by its glued key (``lb_`` and ``ex<k>_`` prefixes):
    the shared protocol and who is on the board, the leader, the reference method (FedAvg, or the
    first method run) and the widest gap between mean client and global accuracy at the most
    skewed and the mildest ``alpha`` (``hard``, ``mild``), the rank uncertainty in words
    (:func:`winner_words`), the bytes, and the exercises (the accuracy-bytes front of
    :func:`pareto_front`; the board ranked by the other of mean and worst client, a bootstrap of
    its own from the same ``seed``).

    ``rows`` is the study's frame (:func:`leaderboard_cell`), ``summary`` its
    :func:`summary_table`, ``ranks`` its :func:`rank_bootstrap` on ``settings.rank_by``; ``names``
    and ``excluded`` are :func:`split_methods`'s; ``data`` the page's digits.
    """
    P = settings
    hard, mild = min(P.alphas), max(P.alphas)
    # the prose names the methods as the tables do (display_name): the same rows, renamed
    rows = rows.assign(method=rows["method"].map(display_name))
    summary, ranks, excluded = named(summary), named(ranks), named(excluded)
    names = [display_name(n) for n in names]
    ref = display_name("fedavg") if "FedAvg" in names else names[0]
    out = {"lb_clients": P.n_clients, "lb_n_samples": f"{len(data):,}", "lb_n_features": int(data.x.shape[1]),
           "lb_test_percent": round(100 * inspect.signature(make_federation).parameters["test_fraction"].default),
           "lb_momentum": config.momentum, "lb_batch": config.batch_size, "lb_hidden": " × ".join(map(str, P.hidden)),
           "lb_rounds": P.rounds, "lb_epochs": P.local_epochs, "lb_lr": P.lr, "lb_ft_epochs": P.finetune_epochs,
           "lb_seeds": P.n_seeds, "lb_n_methods": len(names),
           "lb_n_registered": len(registered()) if P.methods is None else len(P.methods),
           "lb_n_excluded": len(excluded), "lb_excluded_names": ", ".join(excluded.index) if len(excluded) else "none",
           "lb_n_boot": P.n_boot, "lb_contender_share": round(100 * CONTENDER_SHARE),
           "lb_settled_share": round(100 * (1 - CONTENDER_SHARE)), "lb_rank_by": COLUMNS[P.rank_by],
           "lb_n_resamples": math.comb(2 * P.n_seeds - 1, P.n_seeds)}  # multisets of n seeds from n
    for key, a in (("hard", hard), ("mild", mild)):
        w = winner_words(ranks, a, rows, P.rank_by)
        at, lead = summary.loc[a], summary.loc[(a, w["leader"])]
        gap = at["pooled"] - at["global"]
        out |= {f"lb_alpha_{key}": a, f"lb_leader_{key}": w["leader"], f"lb_leader_first_{key}": w["leader_first"],
                f"lb_runner_{key}": w["runner_up"], f"lb_contenders_{key}": w["contenders"],
                f"lb_verdict_{key}": w["verdict"], f"lb_leader_acc_{key}": float(lead["pooled"]),
                f"lb_leader_half_{key}": float(lead["pooled ±"]), f"lb_leader_worst_{key}": float(lead["worst_pooled"]),
                f"lb_ref_{key}": ref, f"lb_ref_acc_{key}": float(at.loc[ref, "pooled"]),
                f"lb_ref_worst_{key}": float(at.loc[ref, "worst_pooled"]),
                f"lb_ref_global_{key}": float(at.loc[ref, "global"]), f"lb_best_global_{key}": at["global"].idxmax(),
                f"lb_best_global_acc_{key}": float(at.loc[at["global"].idxmax(), "global"]),
                f"lb_personal_{key}": gap.idxmax(), f"lb_personal_gap_{key}": float(gap.max())}
        if key == "hard":  # the example of how to read a cell
            out |= {"lb_example_cell": plus_minus(lead["pooled"], lead["pooled ±"]),
                    "lb_example_low": float(lead["pooled low"]), "lb_example_high": float(lead["pooled high"])}
    cost = summary[BYTES]
    cheap, dear = cost.idxmin(), cost.idxmax()
    out |= {"lb_cheapest": cheap[1], "lb_cheapest_bytes": format_bytes(float(cost.loc[cheap])), "lb_dearest": dear[1],
            "lb_dearest_bytes": format_bytes(float(cost.loc[dear])),
            "lb_ref_bytes": format_bytes(float(summary.loc[(hard, ref), BYTES])), "lb_ref": ref}
    acc, bytes_ = summary.loc[hard, "pooled"].to_dict(), summary.loc[hard, BYTES].to_dict()
    front = pareto_front(acc, bytes_)
    better = [m for m in names if m != ref and acc[m] > acc[ref] and bytes_[m] <= bytes_[ref]]
    out |= {"ex1_front": ", ".join(f"{m} ({acc[m]:.1f} %, {format_bytes(bytes_[m])})" for m in front),
            "ex1_n_front": len(front),
            "ex1_dominate": ", ".join(f"{m} ({acc[m] - acc[ref]:+.1f})" for m in better) if better else "no method"}
    other = "worst_pooled" if P.rank_by != "worst_pooled" else "pooled"
    ranks_other = rank_bootstrap(rows, other, n_boot=P.n_boot, seed=seed)
    w_main, w_other = winner_words(ranks, hard, rows, P.rank_by), winner_words(ranks_other, hard, rows, other)
    moved = (ranks_other.loc[hard, "rank"] - ranks.loc[hard, "rank"]).abs()
    return out | {"ex2_metric": COLUMNS[other], "ex2_leader": w_other["leader"], "ex2_leader_first": w_other["leader_first"],
                  "ex2_same": ("the same leader as" if w_other["leader"] == w_main["leader"] else
                               f"another leader than {w_main['leader']}, the leader of"),
                  "ex2_main_metric": COLUMNS[P.rank_by], "ex2_move": MOVE, "ex2_verdict": w_other["verdict"],
                  "ex2_moved": int((moved >= MOVE).sum()), "ex2_moved_most": f"{moved.idxmax()} ({moved.max():g} places)"}


__all__ = ["BOOTSTRAP", "BYTES", "COLUMNS", "CONTENDER_SHARE", "DISPLAY_NAMES", "EXECUTIONS", "MOVE", "PERCENT", "RANK_METRICS", "SEEDED", "SHARED",
           "LeaderboardConfig", "board", "boards", "build_method", "communication_rounds", "digit_vectors",
           "display_name", "exclusion_reason", "execution_of", "first_shares", "lead_interval", "leaderboard_cell", "method_table", "named", "numbers",
           "pareto_front", "plot_accuracy", "rank_bootstrap", "ranks_of", "run_one", "split_methods",
           "statistics_rounds", "summary_table", "winner_words"]
