r"""The terminal statistics round and statistical-head deployment on any trained backbone (FedGRC).

From *Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive Statistical
Personalization for Federated Learning* (FedGRC), Section IV-B (MMS), IV-C (SASP), V-B (the
statistical-head baselines on other backbones), V-C (Table IV: a head before and after local
fine-tuning) and Appendix A-E / A-I: *"Terminal statistics are collected from all registered
clients using the final post-aggregation backbone, with augmentation disabled and normalization
statistics fixed."*

This module sits **above** the round loop (:mod:`fedlib.loop`): it runs the loop once more and
evaluates deployments of a finished run; nothing under the loop imports it. Two steps, both
through the loop's hooks:

1. :func:`collect_statistics` runs **one** extra round after training (numbered
   ``rounds_done + 1`` in the ledger): the server broadcasts the final backbone (kind
   ``"stats_request"``), every registered client (:attr:`fedlib.results.RunResult.registered`)
   computes :func:`fedlib.stats.feature_moments` of the unscaled concatenated features of the
   selected layers on its own raw training inputs (no augmentation; model in evaluation mode: no
   dropout, normalization statistics fixed) and replies with its class counts, sums and Gram
   matrices (kind ``"statistics"``); the server merges them by addition only. No feature vector
   leaves a client. The payload is :math:`C(1 + d + d^2)` float64 values with the per-class Gram
   matrices (``grams="class"``, the default: every head, CCVR included) or
   :math:`C(1 + d) + d^2` with their total only (``grams="total"``, the compact form: enough for
   every head but CCVR; :func:`fedlib.heads.gram_form` says which a set of heads needs).
   A run holds one statistics round: calling it again on its result is a ``ValueError``.
2. :class:`StatHead` is a deployment rule for :func:`fedlib.run.evaluate_deployment`, a
   meta-estimator around one head object of :mod:`fedlib.heads` (``StatHead(LDAHead(reg=0.0))``,
   ``StatHead(SASP(m0=10.0, gamma=0.1))``...): the server fits a clone of the head on the merged
   moments (once per server state and hyper-parameters), broadcasts it with the backbone, and
   every client deploys ``logits = concat(features) @ coef.T + intercept`` (:class:`StatPredictor`).
   A :class:`~fedlib.heads.CCVRHead` starts from the backbone's own head when the features are
   the penultimate ones. For :class:`~fedlib.heads.SASP` the server broadcasts the shared
   :class:`~fedlib.heads.MMS` arrays (layer scales, shared means, metric :math:`A`, global
   counts: :meth:`fedlib.heads.MMS.to_arrays`) and each client fits its own head from its class
   counts and sums, computed locally. ``StatHead(head, finetune=TrainConfig(...))`` then
   fine-tunes the (fitted or personalized) linear head on the client's own training features with
   cross-entropy, the backbone frozen (the "statistical head + local fine-tuning" of Table IV;
   :func:`finetune_head`).

:class:`StatHead` is not in the registry ``fedlib.algorithms.ALGORITHMS``: it does not train (the loop
refuses to run it), and it is configured by a head object, not by a name.

Conventions: a class absent from every client is never predicted (zero weight row, intercept
:math:`-\infty`; the predictor masks it to :math:`-\infty` whatever the features); a client with
no training sample contributes zero moments and deploys the shared head (SASP with every
:math:`\alpha = 0`); a layer name the model does not have is the model's own ``ValueError``,
raised before any client works.

>>> import functools
>>> from fedlib.data import make_gaussian_mixture
>>> from fedlib.federation import make_federation
>>> from fedlib.heads import SASP, FedNCMHead
>>> from fedlib.models import build_model
>>> from fedlib.algorithms import FedAvg
>>> from fedlib.loop import LoopConfig
>>> from fedlib.run import run_federated
>>> ds = make_gaussian_mixture(n_per_class=30, n_classes=3, dim=16, seed=0).dataset
>>> fed = make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=5, seed=0)
>>> model_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,))
>>> run = run_federated(FedAvg(), fed, model_fn, LoopConfig(rounds=1, evaluate_last=False))
>>> stats = collect_statistics(run, fed, model_fn)
>>> tuple(stats.server.arrays["stats/grams"].shape), stat_layers(stats.server)
((3, 8, 8), ('penultimate',))
>>> frame = evaluate_heads(stats, fed, model_fn, {"sasp": StatHead(SASP()), "fedncm": StatHead(FedNCMHead())})
>>> sorted(set(frame["head"]))
['fedncm', 'sasp']
>>> compact = collect_statistics(run, fed, model_fn, grams="total")  # every head but CCVR
>>> tuple(compact.server.arrays["stats/grams"].shape)
(8, 8)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd
import torch
from torch.nn import functional as F

from .federation import Federation
from .heads import MMS, SASP, CCVRHead, LinearHead
from .loop import LoopConfig
from .results import RunResult, per_client_table
from .run import evaluate_deployment, run_federated
from .messages import Ledger, Message, State, from_state, to_state
from .metrics import RARE_RATIO, client_predictions_abilities, protocol_summary
from .models import PENULTIMATE
from .protocol import HEAD, MODEL, Algorithm, Capabilities, ClientContext, Event, Predictor, load_model
from .rng import CCVR_VIRTUAL, torch_generator
from .stats import GRAM_FORMS, ClassMoments, class_counts_sums, feature_moments
from .training import TrainConfig, local_train

STATS = "stats/"
"""Prefix of the moments in a client's statistics reply (``stats/counts``, ``stats/sums``,
``stats/grams``), and where :class:`TerminalStatistics` lies in the flattened server state."""

_HEAD = "head/"
_MMS = "mms/"
_PENULTIMATE = (PENULTIMATE,)


# ---------------------------------------------------------------------------------------------
# 1. the terminal statistics round
# ---------------------------------------------------------------------------------------------
@dataclass
class TerminalStatistics:
    """What the terminal statistics round adds to a run's server state."""

    layers: list[str]  # whose pooled features the statistics concatenate
    layer_dims: list[int]
    counts: torch.Tensor | None = None  # the merged moments: (C,),
    sums: torch.Tensor | None = None  # (C, d),
    grams: torch.Tensor | None = None  # (C, d, d) or their total (d, d)
    clients: int | None = None  # how many sent them
    round: int | None = None


@dataclass
class _WithStatistics:
    """The part of a server state that is its terminal statistics (``stats/``; the rest is the run's own)."""

    stats: TerminalStatistics | None = None


def _with(server: State, stats: TerminalStatistics) -> State:
    """``server`` with its terminal statistics set to ``stats``."""
    part = to_state(_WithStatistics(stats))
    return State(arrays={**server.arrays, **part.arrays}, meta={**server.meta, **part.meta})


def terminal_statistics(server: State, required: bool = False) -> TerminalStatistics | None:
    """The terminal statistics a :func:`collect_statistics` server state holds (``None``: none;
    ``required``: an error unless its moments are there)."""
    stats = from_state(_WithStatistics, server).stats
    if required and (stats is None or stats.grams is None):
        raise ValueError("this server state holds no statistics: call collect_statistics(result, federation, model_fn) first")
    return stats


@dataclass
class _StatisticsRound(Algorithm):
    """One round's hooks: broadcast the final backbone, clients reply with their class moments
    (in the Gram form ``grams``), the server adds them up. ``init_server`` starts from the
    finished run's server state."""

    server_state: State
    layers: Sequence[str] | str | None = None
    grams: str = "class"
    name = "statistics"
    capabilities = Capabilities(streams=False, reply_arrays=(STATS,))  # one terminal round of class moments, summed at once

    def init_server(self, model: torch.nn.Module) -> State:
        names = model._check_layers(self.layers)  # the model's own ValueError, before any client works
        dims = [int(model.feature_dims[n]) for n in names]
        return _with(self.server_state, TerminalStatistics(list(names), dims))

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        model = {k: v for k, v in server.arrays.items() if k.startswith(MODEL)}
        layers = ",".join(terminal_statistics(server).layers)  # the request's wire format: the names comma-joined
        return dict.fromkeys(clients, Message(arrays=model, meta={"layers": layers}, kind="stats_request"))

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        model = load_model(ctx.model, message)  # feature_moments puts it in eval mode
        layers = str(message.meta["layers"]).split(",")
        moments = feature_moments(model, data.train.x, data.train.y, ctx.n_classes, layers=layers, grams=self.grams)
        return state, moments.to_message(kind="statistics", prefix=STATS)  # no meta: the three arrays only

    def aggregate(self, server: State, replies, round_: int) -> State:
        updates = list(replies)
        merged = ClassMoments.sum([ClassMoments.from_message(m, prefix=STATS) for _, m in updates])  # addition only
        stats = terminal_statistics(server)
        stats.counts, stats.sums, stats.grams, stats.clients = merged.counts, merged.sums, merged.grams, len(updates)
        return _with(server, stats)


def _registered(result: RunResult, federation: Federation) -> list[int]:
    """The clients :func:`fedlib.run.evaluate_deployment` deploys on (:attr:`RunResult.registered`),
    checked against the federation."""
    clients = result.registered
    bad = [k for k in clients if not 0 <= k < federation.n_clients]
    if bad:
        raise ValueError(f"the run has client(s) {bad} that this federation of {federation.n_clients} clients lacks")
    return clients


def collect_statistics(result: RunResult, federation: Federation, model_fn: Callable[[], torch.nn.Module], *,
                       layers: Sequence[str] | str | None = None, grams: str = "class", seed: int = 0) -> RunResult:
    """One terminal statistics round on a finished run: every registered client's class moments
    under the final backbone, merged by addition on the server.

    Parameters
    ----------
    result : RunResult
        A finished training run (:class:`fedlib.results.RunResult`) whose server state holds the
        backbone (``model/`` arrays) and no statistics yet.
    federation, model_fn : Federation, callable
        As given to :func:`fedlib.run.run_federated`.
    layers : sequence of str, str or None
        Layer names of the model (``model.feature_layers``) whose pooled features are
        concatenated in this order; default the penultimate features.
    grams : {"class", "total"}
        What clients send besides counts and sums: the per-class Gram matrices (C, d, d), which
        every head can use, or their total (d, d), the compact payload (about C times fewer bytes)
        that every head but :class:`~fedlib.heads.CCVRHead` can use
        (:func:`fedlib.heads.gram_form`).
    seed : int
        The loop seed of this round (the statistics themselves are deterministic).

    Returns
    -------
    RunResult
        A copy (``dataclasses.replace``) whose server state also holds the merged moments
        (:class:`TerminalStatistics`, :func:`terminal_statistics`: counts (C,), sums (C, d), Gram
        matrices (C, d, d) or (d, d), the layers and their dimensions, the round and the clients
        that sent them); its ledger is a copy of the run's plus this round's messages
        (``stats_request`` down, ``statistics`` up, round ``rounds_done + 1``). ``frame``,
        ``client_states``, ``departed`` and ``rounds_done`` are the run's.

    Raises
    ------
    ValueError
        If the run holds no backbone, no registered client, or already holds statistics (a run
        has one statistics round; call this on the training result again for other layers).
    """
    if grams not in GRAM_FORMS:
        raise ValueError(f"grams must be one of {GRAM_FORMS}, got {grams!r}")
    if not any(k.startswith(MODEL) for k in result.server.arrays):
        raise ValueError("the run's server state holds no 'model/' arrays: there is no backbone to collect statistics with")
    held = terminal_statistics(result.server)
    if held is not None:
        raise ValueError(f"this run already holds terminal statistics (round {held.round}, layers {','.join(held.layers)!r}): "
                         "collect_statistics runs once per trained run; call it on the training result itself to collect "
                         "other layers")
    clients = _registered(result, federation)
    if not clients:
        raise ValueError("no registered client is left in the federation: there are no statistics to collect")
    gone = tuple(Event(1, k, "leave") for k in range(federation.n_clients) if k not in clients)
    config = LoopConfig(rounds=1, participation=1.0, seed=seed, events=gone, evaluate_last=False)
    stats = run_federated(_StatisticsRound(result.server, layers, grams), federation, model_fn, config)
    r = result.rounds_done + 1
    ledger = Ledger([*result.ledger.records, *((r, k, d, kind, b) for _, k, d, kind, b in stats.ledger.records)])
    held = terminal_statistics(stats.server)
    held.round = r  # no wall time: the state stays bit-for-bit reproducible
    return replace(result, ledger=ledger, server=_with(stats.server, held))


def merged_moments(server: State) -> ClassMoments:
    """The merged :class:`~fedlib.stats.ClassMoments` a :func:`collect_statistics` server state holds."""
    stats = terminal_statistics(server, required=True)
    return ClassMoments(stats.counts, stats.sums, stats.grams)


def stat_layers(server: State) -> tuple[str, ...]:
    """The layer names whose features the statistics concatenate, in order."""
    return tuple(terminal_statistics(server, required=True).layers)


def stat_layer_dims(server: State) -> tuple[int, ...]:
    """The feature dimension of each of :func:`stat_layers`."""
    return tuple(terminal_statistics(server, required=True).layer_dims)


# ---------------------------------------------------------------------------------------------
# 2. the deployed predictor and the client-side helpers
# ---------------------------------------------------------------------------------------------
class StatPredictor(torch.nn.Module):
    r"""A frozen backbone plus a linear head on its concatenated unscaled features (float64):

    .. math:: \text{logits}(x) = [h_{\ell_1}(x); \dots; h_{\ell_m}(x)]\, W^\top + b,

    with :math:`-\infty` for the classes marked invalid (non-finite intercept), whatever the
    features (no ``0 * inf`` NaN). A module, so that :func:`fedlib.run.evaluate_deployment` shares
    the global-test predictions of clients with identical heads.
    """

    def __init__(self, model: torch.nn.Module, layers: Sequence[str], coef: torch.Tensor, intercept: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.layers = ",".join(layers)  # a str attribute: part of the loop's sharing key
        self._layers = tuple(layers)
        valid = torch.isfinite(intercept)
        self.register_buffer("coef", torch.where(valid[:, None], coef.to(torch.float64), torch.zeros_like(coef, dtype=torch.float64)))
        self.register_buffer("intercept", torch.where(valid, intercept.to(torch.float64), torch.zeros_like(intercept, dtype=torch.float64)))
        self.register_buffer("valid", valid)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.cat(list(self.model.features(x, self._layers).values()), dim=1).to(torch.float64)  # (n, d)
        logits = z @ self.coef.T + self.intercept  # (n, C)
        return torch.where(self.valid[None, :], logits, torch.full_like(logits, -math.inf))


def finetune_head(coef: torch.Tensor, intercept: torch.Tensor, z: torch.Tensor, y: torch.Tensor, cfg: TrainConfig,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Fine-tune a linear head (C, d), (C,) on features ``z`` (n, d) with cross-entropy (float64),
    through :func:`fedlib.training.local_train`.

    Classes with a non-finite intercept (absent from the federation) are masked out of the
    softmax and stay never predicted (zero row, :math:`-\\infty`). A client without samples keeps
    the head. Raises ``ValueError`` if a label names a masked class or the training diverges.
    """
    ok = torch.isfinite(intercept)
    if len(y) and not bool(ok[y].all()):
        raise ValueError(f"labels {sorted(set(y[~ok[y]].tolist()))} name classes the head can never predict")
    c, d = coef.shape
    head = torch.nn.Linear(d, c, dtype=torch.float64)
    with torch.no_grad():
        head.weight.copy_(torch.where(ok[:, None], coef, torch.zeros_like(coef)))
        head.bias.copy_(torch.where(ok, intercept, torch.zeros_like(intercept)))
    mask = torch.where(ok, 0.0, -math.inf).to(torch.float64)  # (C,): absent classes out of the softmax

    def loss_fn(m, xb, yb):
        return F.cross_entropy(m(xb) + mask, yb)

    local_train(head, z.to(torch.float64), y, cfg, generator, loss_fn=loss_fn)
    w, b = head.weight.detach().clone(), head.bias.detach().clone()
    if not bool(torch.isfinite(w[ok]).all() and torch.isfinite(b[ok]).all()):
        raise ValueError(f"local fine-tuning of the head diverged (non-finite weights) with lr={cfg.lr!r}; lower it")
    return torch.where(ok[:, None], w, torch.zeros_like(w)), torch.where(ok, b, torch.full_like(b, -math.inf))


# ---------------------------------------------------------------------------------------------
# 3. the deployment rule
# ---------------------------------------------------------------------------------------------
def _kind(head: LinearHead) -> str:
    """The head's short name in the ledger (``stathead:<name>``): ``LDAHead`` -> ``lda``, ``SASP`` -> ``sasp``."""
    name = type(head).__name__
    return (name[: -len("Head")] if name.endswith("Head") and len(name) > 4 else name).lower()


@dataclass
class StatHead(Algorithm):
    """Deploy a statistical head on a run's backbone from its terminal statistics.

    Use with :func:`fedlib.run.evaluate_deployment` (or :func:`evaluate_heads`) on the result of
    :func:`collect_statistics`; it does not train.

    Parameters
    ----------
    head : fedlib.heads.LinearHead, default ``SASP()``
        The head to deploy, unfitted (a template: the server fits a clone of it, so one head
        object may serve several deployments): :class:`~fedlib.heads.FedNCMHead`,
        :class:`~fedlib.heads.LDAHead`, :class:`~fedlib.heads.FedCGSHead`,
        :class:`~fedlib.heads.Fed3RHead`, :class:`~fedlib.heads.CCVRHead` (needs the per-class
        Gram matrices), :class:`~fedlib.heads.MMS` (the shared equal-prior head, fitted with the
        statistics' layer blocks), :class:`~fedlib.heads.SASP` (personalized on each client),
        or any other linear head whose ``fit(moments)`` needs nothing else. Its
        hyper-parameters are validated here (``ValueError`` naming the bad one).
    finetune : TrainConfig or None
        ``None`` deploys the head as fitted; a ``TrainConfig`` fine-tunes the linear head on the
        client's own training features (cross-entropy, backbone frozen) before deployment.
    seed : int
        Seed of the server's own randomness (CCVR's virtual features).

    Examples
    --------
    >>> from fedlib.heads import LDAHead
    >>> StatHead(LDAHead(reg=0.5))
    StatHead(head=LDAHead(reg=0.5, priors='empirical'), finetune=None, seed=0)
    >>> StatHead(LDAHead(priors="uniform"))
    Traceback (most recent call last):
    ...
    ValueError: priors must be one of ('equal', 'empirical'), got 'uniform'
    """

    head: LinearHead = field(default_factory=SASP)
    finetune: TrainConfig | None = None
    seed: int = 0
    _cache: tuple | None = field(default=None, init=False, repr=False, compare=False)
    name = "stathead"

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        if not isinstance(self.head, LinearHead):
            raise ValueError(f"head must be a linear head of fedlib.heads (FedNCMHead, LDAHead, FedCGSHead, Fed3RHead, "
                             f"CCVRHead, MMS, SASP), got {self.head!r}")
        self.head.check_params()
        if self.finetune is not None and not isinstance(self.finetune, TrainConfig):
            raise ValueError(f"finetune must be None or a TrainConfig, got {self.finetune!r}")

    # ------------------------------------------------------------------ server side
    def init_server(self, model: torch.nn.Module) -> State:
        raise ValueError("StatHead does not train: train a backbone (e.g. FedAvg), call collect_statistics(...) "
                         "and deploy with fedlib.run.evaluate_deployment(StatHead(...), result, ...)")

    def local_update(self, ctx, state, message, data, generator):
        self.init_server(ctx.model)  # the same explanation

    def _params(self) -> tuple:
        return (type(self.head), tuple(self.head.get_params().items()), self.seed)

    def server_head(self, server: State) -> dict[str, torch.Tensor]:
        """The arrays the server broadcasts with the backbone: ``head/coef`` (C, d) and
        ``head/intercept`` (C,) or, for :class:`~fedlib.heads.SASP`, ``mms/*``
        (:meth:`fedlib.heads.MMS.to_arrays`). Fitted once per server state and hyper-parameters
        (cached on the identity of the moments' tensors)."""
        keys = [STATS + "counts", STATS + "sums", STATS + "grams", HEAD + "weight", HEAD + "bias"]
        key = tuple(server.arrays.get(k) for k in keys)
        params = self._params()
        if self._cache is not None and self._cache[1] == params and all(a is b for a, b in zip(self._cache[0], key)):
            return self._cache[2]
        self._validate()
        arrays = self._fit(server)
        self._cache = (key, params, arrays)  # holds the key tensors: their identities stay unique
        return arrays

    def _fit(self, server: State) -> dict[str, torch.Tensor]:
        m = merged_moments(server)
        layers, dims = stat_layers(server), stat_layer_dims(server)
        head = self.head.clone()
        if isinstance(head, SASP):
            return {_MMS + k: v for k, v in head.shared(m, dims).to_arrays().items()}
        if isinstance(head, MMS):
            head.fit(m, dims)
        elif isinstance(head, CCVRHead):
            w, b = server.arrays.get(HEAD + "weight"), server.arrays.get(HEAD + "bias")
            own = layers == _PENULTIMATE and w is not None and b is not None and tuple(w.shape) == (m.n_classes, m.dim)
            head.fit(m, generator=torch_generator(self.seed, CCVR_VIRTUAL), init=(w, b) if own else None)
        else:
            head.fit(m)
        return {_HEAD + "coef": head.coef_, _HEAD + "intercept": head.intercept_}

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The backbone with the fitted head (or SASP's shared arrays), one message shared by every client."""
        arrays = {k: v for k, v in server.arrays.items() if k.startswith(MODEL)}
        arrays.update(self.server_head(server))
        stats = terminal_statistics(server, required=True)  # the message's wire format: names and dimensions comma-joined
        meta = {"stat_layers": ",".join(stats.layers), "stat_layer_dims": ",".join(map(str, stats.layer_dims))}
        return dict.fromkeys(clients, Message(arrays=arrays, meta=meta, kind=f"stathead:{_kind(self.head)}"))

    # ------------------------------------------------------------------ client side
    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        model = load_model(ctx.model, message).eval()
        layers = tuple(str(message.meta["stat_layers"]).split(","))
        x, y = data.train.x, data.train.y
        personal = isinstance(self.head, SASP)
        z = model.extract(x, layers).to(torch.float64) if (personal or self.finetune is not None) else None  # (n, d)
        if personal:
            dims = [int(v) for v in str(message.meta["stat_layer_dims"]).split(",")]
            mms = MMS.from_arrays(message.with_prefix(_MMS), dims, self.head.gamma)
            counts, sums = class_counts_sums(z, y, ctx.n_classes)  # (C,), (C, d): the client's own n_c and t_c
            fitted = self.head.clone().fit(mms, counts, sums)
            coef, intercept = fitted.coef_, fitted.intercept_
        else:
            coef, intercept = message.arrays[_HEAD + "coef"], message.arrays[_HEAD + "intercept"]
        if self.finetune is not None:
            coef, intercept = finetune_head(coef, intercept, z, y, self.finetune, generator)
        return StatPredictor(model, layers, coef, intercept).eval()


def evaluate_heads(result: RunResult, federation: Federation, model_fn: Callable[[], torch.nn.Module],
                   heads: Mapping[str, Algorithm], config: LoopConfig | None = None) -> pd.DataFrame:
    """Evaluate several deployment rules on one :func:`collect_statistics` result.

    ``heads`` maps a name to a :class:`StatHead` (or any other deployment rule, e.g. ``FedAvg()``
    for the backbone's own head). Returns the tidy rows of
    :func:`fedlib.run.evaluate_deployment` with a leading ``head`` column.
    """
    merged_moments(result.server)  # a clear error when the statistics round is missing
    if not heads:
        raise ValueError("heads is empty: pass {name: StatHead(...)}")
    config = LoopConfig() if config is None else config
    frames = []
    for name, algorithm in heads.items():
        f = evaluate_deployment(algorithm, result, federation, model_fn, config)
        f.insert(0, "head", str(name))
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def summarize_heads(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per head of an :func:`evaluate_heads` frame: :func:`fedlib.metrics.protocol_summary`."""
    rows = {h: protocol_summary(per_client_table(g.drop(columns="head"))) for h, g in frame.groupby("head", sort=False)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("head")


class FrozenFeatures:
    r"""Every client's and the global test set's features under a run's frozen backbone, computed
    once, to evaluate many fitted heads by the protocol without re-running the backbone.

    :func:`fedlib.run.evaluate_deployment` with :class:`StatHead` runs the backbone over the
    global test set for every client whose head differs (every SASP head); a sweep over
    :math:`m_0` or :math:`\gamma` only refits heads, so it can reuse the features. The
    numbers are the same (the tests check it against ``evaluate_deployment``): each client's
    abilities come from :func:`fedlib.metrics.client_predictions_abilities`, the routine the loop
    uses. The ``pooled`` ability is scored as the loop scores it: on the global test features for
    a client whose pool is the global test set, on the features of its own pool
    (:attr:`fedlib.federation.ClientData.pool`, computed once per pool object: the clients of a
    rotation group share one; a pool that is the global test set or the local test split itself
    reuses their features) for a client that has one.

    Parameters
    ----------
    result : a :func:`collect_statistics` result (backbone and merged moments)
    federation, model_fn : as given to :func:`fedlib.run.run_federated`

    Attributes
    ----------
    moments : the merged :class:`~fedlib.stats.ClassMoments` (what the server holds)
    layer_dims : tuple of int, the concatenated blocks' sizes
    clients : list of int, the registered clients, in order
    client_moments : list of each client's own moments on its training split (what it computes
        locally), in the order of ``clients``
    """

    def __init__(self, result: RunResult, federation: Federation, model_fn: Callable[[], torch.nn.Module]) -> None:
        self.moments = merged_moments(result.server)
        self.layer_dims = stat_layer_dims(result.server)
        layers = stat_layers(result.server)
        backbone = load_model(model_fn(), result.server).eval()
        feats = lambda x: backbone.extract(x, layers).to(torch.float64)  # noqa: E731  (n, d)
        self._federation = federation
        self._global = feats(federation.global_test.x)
        self.clients = _registered(result, federation)
        C = federation.n_classes
        self.client_moments = [ClassMoments.from_features(feats(federation.clients[k].train.x), federation.clients[k].train.y, C)
                               for k in self.clients]
        self._local = [feats(federation.clients[k].test.x) for k in self.clients]
        pools: dict[int, torch.Tensor] = {id(federation.global_test): self._global}  # id of a pool -> (n_pool, d)
        for k, h_local in zip(self.clients, self._local):
            data = federation.clients[k]
            if data.pool is not None and id(data.pool) not in pools:
                pools[id(data.pool)] = h_local if data.pool is data.test else feats(data.pool.x)
        self._pool = [None if federation.clients[k].pool is None else pools[id(federation.clients[k].pool)]
                      for k in self.clients]

    def summary(self, heads: Sequence, *, rare_ratio: float = RARE_RATIO) -> dict[str, float]:
        """:func:`fedlib.metrics.protocol_summary` of one fitted head per registered client (in order);
        each head has ``predict(h)`` on unscaled concatenated features."""
        return protocol_summary(self.abilities(heads, rare_ratio=rare_ratio))

    def abilities(self, heads: Sequence, *, rare_ratio: float = RARE_RATIO) -> pd.DataFrame:
        """The per-client abilities behind :meth:`summary`, of shape (n_registered_clients, n_abilities),
        indexed by client (:func:`fedlib.metrics.client_predictions_abilities` of each client)."""
        if len(heads) != len(self.clients):
            raise ValueError(f"need one head per registered client ({len(self.clients)}), got {len(heads)}")
        fed, C = self._federation, self._federation.n_classes
        rows = {}
        for k, head, h_local, h_pool in zip(self.clients, heads, self._local, self._pool):
            data = fed.clients[k]
            pool = {} if h_pool is None else {"pool_true": data.pool.labels_np, "pool_pred": head.predict(h_pool).numpy()}
            rows[k] = client_predictions_abilities(
                data.test.labels_np, head.predict(h_local).numpy(), fed.global_test.labels_np,
                head.predict(self._global).numpy(), data.train_counts(C), rare_ratio=rare_ratio, **pool)
        return pd.DataFrame.from_dict(rows, orient="index")


__all__ = ["STATS", "FrozenFeatures", "StatHead", "StatPredictor", "TerminalStatistics", "collect_statistics", "evaluate_heads",
           "finetune_head", "merged_moments", "stat_layer_dims", "stat_layers", "summarize_heads", "terminal_statistics"]
