r"""HDC-FL: head-derived clustering, encoder prototypes and soft mixtures, on the server.

Dehghanpour, Noori, Tanghatari, Omidvar and Rabiee, "From Classifier Heads to Encoder Prototypes:
Personalized Federated Learning with Head-Derived Clustering", arXiv:2610.30075, Section 3 and
Appendix A. Training is FedAvg-SE's (:class:`~fedlib.algorithms.fedrep.FedAvgSE`: the encoder is
averaged, each head stays on its client) and is **not changed**; the method adds server work:

1. **Cache** (Section 3.1): each reply carries the client's trained encoder (``model/``, averaged
   as in FedAvg-SE) and its head (``head/``, never averaged); the server keeps each observed
   client's latest pair, refreshed together, and its sample count. Unsampled clients keep their
   last pair.
2. **Refresh** every ``refresh_every`` rounds (Sections 3.2-3.5): the cached heads become
   descriptors (:func:`fedlib.clustering.head_descriptors`), k-means with ``k`` chosen by
   silhouette groups them (:class:`fedlib.clustering.SilhouetteKMeans`), each group's encoder
   prototype is the size-weighted average of its cached encoders
   (:func:`fedlib.aggregate.weighted_average`), and each client's membership is a softmax of its
   descriptor's cosine similarity to the group centroids over a temperature ``T``.
3. **Gate** (Section 3.5, Appendix A.2): personalization starts once the grouping has been stable
   for ``patience`` consecutive refreshes (silhouette at least ``min_silhouette``, and, with
   ``gate="either"``, either the adjusted Rand index with the previous refresh at least
   ``min_ari`` or the descriptor drift at most ``max_drift``; with ``gate="both"``, the two at
   once: the partition unchanged, not only the descriptors slow), or at ``max_activation_round``.
4. **Personalized encoder** (Section 3.4), sent to each client for evaluation
   (:meth:`HDCFL.configure_evaluate`) and deployed with the client's own head:

   .. math:: \theta_k = \lambda \sum_j m_{kj} P_j + (1 - \lambda)\, \bar\theta ,

   with :math:`P_j` the prototypes and :math:`\bar\theta` the shared encoder. It is never written
   back into the cache or the shared trajectory.

The summary the project has gives none of the thresholds, nor the temperature: the defaults of
:class:`HDCConfig` are this project's choices, documented in the book. Everything the server
keeps is typed (:class:`HDCServer`: the shared encoder, each client's :class:`CachedPair`, the
groups' :class:`Prototype`, the last refresh and the gate, :class:`RefreshState`) and flattened to
its :class:`~fedlib.messages.State` by :func:`fedlib.messages.to_state` (so checkpoints resume bit
for bit); :func:`refresh_history` reads the per-refresh diagnostics back as a table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score, roc_auc_score, silhouette_score

from ..clustering import (DESCRIPTORS, SilhouetteKMeans, assignment_agreement, descriptor_drift, group_centroids,
                          head_descriptors, membership_entropy, random_groups, soft_membership)
from ..messages import Message, State, from_state, prefixed, to_state
from ..models import HEAD_PREFIX
from ..aggregate import model_average, weighted_average
from ..protocol import MODEL, Event, body_arrays, update_message
from ..rng import HDC_GROUPING, HDC_RANDOM_GROUPS, derive_seed, numpy_rng
from ..validation import is_int, is_real
from .fedrep import FedAvgSE

HEAD_REPLY = "head/"
"""Prefix of the head in a client's reply (``head/weight``, ``head/bias``): cached, never averaged."""
GROUPINGS = ("kmeans", "random")
"""How a refresh groups the clients: k-means on the descriptors, or random groups (the ablation)."""
GATES = ("either", "both")
"""How the gate reads persistence: the ARI with the previous refresh at least ``min_ari`` *or* the
descriptor drift at most ``max_drift`` (``"either"``), or both at once (``"both"``: a small drift
alone cannot open it while the partition still changes)."""
MEMBERSHIPS = ("soft", "hard")
"""Soft membership (softmax over ``T``) or hard assignment to the client's own group (the ablation)."""
HISTORY_COLUMNS = ("round", "k", "silhouette", "ari", "drift", "entropy", "stable", "active", "n_cached")
"""The columns of :func:`refresh_history`, one row per refresh."""
RAW_HISTORY_COLUMNS = ("raw_k", "raw_silhouette", "raw_ari")
"""The extra columns of :func:`refresh_history` when :attr:`HDCConfig.compare_raw` is set: the
raw-head grouping of the same cache at the same refresh (chosen k, its silhouette, its ARI with the
previous refresh's raw-head grouping)."""


@dataclass(frozen=True)
class HDCConfig:
    """HDC-FL's server settings (every one checked here, with the valid values in the message).

    Attributes
    ----------
    rank : r of the low-rank descriptor (the paper: 8), in 1..n_classes
    descriptor : ``"lowrank"`` (default) or ``"raw"`` (the flattened head, the ablation)
    k_min, k_max : the range of k tried by silhouette (the paper: 2..8); ``k_min = k_max = 1`` is
        population-level prototype averaging (the ablation)
    grouping : ``"kmeans"`` or ``"random"`` (random groups of the chosen k, the ablation)
    membership : ``"soft"`` (softmax over ``temperature``) or ``"hard"`` (each client on its own
        group's prototype alone)
    temperature : T > 0 of the soft membership (cosine similarities lie in [-1, 1])
    lam : λ in [0, 1], the weight of the prototype mixture against the shared encoder (the paper: 1)
    refresh_every : R, refresh the grouping every R rounds
    min_silhouette, min_ari, max_drift, patience : the stability gate (see the module's docstring)
    gate : ``"either"`` (default) or ``"both"``: whether the ARI *or* the drift, or both, must
        pass for a refresh to count as persistent (:data:`GATES`)
    max_activation_round : personalization starts at this round at the latest
    n_init : k-means restarts per k
    compare_raw : also group the raw heads of the same cache at every refresh (the raw-head
        ablation's k, silhouette and ARI between consecutive refreshes, server-side, on the same
        trajectory: :data:`RAW_HISTORY_COLUMNS`); nothing the method sends or deploys changes
    """

    rank: int = 8
    descriptor: str = "lowrank"
    k_min: int = 2
    k_max: int = 8
    grouping: str = "kmeans"
    membership: str = "soft"
    temperature: float = 0.05
    lam: float = 1.0
    refresh_every: int = 2
    min_silhouette: float = 0.1
    min_ari: float = 0.8
    max_drift: float = 0.05
    patience: int = 2
    gate: str = "either"
    max_activation_round: int = 20
    n_init: int = 10
    compare_raw: bool = False

    def __post_init__(self) -> None:
        if not is_int(self.rank) or self.rank < 1:
            raise ValueError(f"rank must be an integer >= 1, got {self.rank!r}")
        if self.descriptor not in DESCRIPTORS:
            raise ValueError(f"unknown descriptor {self.descriptor!r}; valid: {', '.join(DESCRIPTORS)}")
        SilhouetteKMeans(self.k_min, self.k_max, self.n_init)  # checks the k range and n_init
        if self.grouping not in GROUPINGS:
            raise ValueError(f"unknown grouping {self.grouping!r}; valid: {', '.join(GROUPINGS)}")
        if self.gate not in GATES:
            raise ValueError(f"unknown gate {self.gate!r}; valid: {', '.join(GATES)}")
        if self.membership not in MEMBERSHIPS:
            raise ValueError(f"unknown membership {self.membership!r}; valid: {', '.join(MEMBERSHIPS)}")
        if not is_real(self.temperature) or not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature T must be a finite number > 0, got {self.temperature!r} "
                             "(hard assignment is membership='hard')")
        if not is_real(self.lam) or not 0 <= self.lam <= 1:
            raise ValueError(f"lam (λ) must be a number in [0, 1], got {self.lam!r}")
        for name in ("refresh_every", "patience", "max_activation_round"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not is_real(self.min_silhouette) or not -1 <= self.min_silhouette <= 1:
            raise ValueError(f"min_silhouette must be a number in [-1, 1], got {self.min_silhouette!r}")
        if not is_real(self.min_ari) or not -1 <= self.min_ari <= 1:
            raise ValueError(f"min_ari must be a number in [-1, 1], got {self.min_ari!r}")
        if not is_real(self.max_drift) or not (math.isfinite(self.max_drift) and self.max_drift >= 0):
            raise ValueError(f"max_drift must be a finite number >= 0, got {self.max_drift!r}")
        if not isinstance(self.compare_raw, bool):
            raise ValueError(f"compare_raw must be True or False, got {self.compare_raw!r}")


# ------------------------------------------------------------------------------------------------
# The server's state, and the cache
# ------------------------------------------------------------------------------------------------


@dataclass
class CachedPair:
    """A client's latest (encoder, head) pair on the server, refreshed together, and its sample count."""

    model: dict[str, torch.Tensor]  # the encoder, {state_dict name: tensor}, no head
    head: dict[str, torch.Tensor]  # weight, bias
    n: torch.Tensor  # int64 scalar

    @classmethod
    def of(cls, reply: Message) -> "CachedPair":
        """What the server caches from a client's reply: its encoder, its head and its sample count."""
        return cls(reply.with_prefix(MODEL), reply.with_prefix(HEAD_REPLY), torch.tensor(int(reply.meta["n_samples"]), dtype=torch.int64))


@dataclass
class Prototype:
    """A group's encoder prototype: its members' cached encoders averaged by size."""

    model: dict[str, torch.Tensor]


@dataclass
class RefreshRow:
    """One refresh's diagnostics (:func:`refresh_history`'s row: :data:`HISTORY_COLUMNS`, and
    :data:`RAW_HISTORY_COLUMNS` with :attr:`HDCConfig.compare_raw`); an undefined number (one
    group's silhouette, the first refresh's ARI) is ``None``, so that two states compare equal."""

    round: int
    k: int
    silhouette: float | None
    ari: float | None
    drift: float | None
    entropy: float | None
    stable: bool
    active: bool
    n_cached: int
    raw_k: int | None = None
    raw_silhouette: float | None = None
    raw_ari: float | None = None


@dataclass
class RefreshState:
    """The last refresh's grouping, the gate, and every refresh's row."""

    clients: torch.Tensor  # the clients it saw, in increasing order, (n,)
    labels: torch.Tensor  # their groups, (n,)
    gram: torch.Tensor  # the descriptors' Gram matrix, (n, n)
    membership: torch.Tensor  # (n, k)
    raw_labels: torch.Tensor | None = None  # the raw heads' groups (compare_raw)
    streak: int = 0  # consecutive stable refreshes
    active: bool = False
    activated_round: int | None = None
    history: list[RefreshRow] = field(default_factory=list)


@dataclass
class HDCServer:
    """HDC-FL's server state (``hdcfl/...``, ``cache/<k>/...``, ``proto/<j>/...`` once flattened)."""

    model: dict[str, torch.Tensor]  # FedAvg-SE's shared encoder (and the initial head)
    cache: dict[int, CachedPair] = field(default_factory=dict)  # by client
    proto: dict[int, Prototype] = field(default_factory=dict)  # by group
    hdcfl: RefreshState | None = None


def _number(v) -> float | None:
    """``v`` as a Python float, ``None`` for NaN."""
    return None if math.isnan(v) else float(v)


def cached_clients(server: State) -> list[int]:
    """The clients with a cached (encoder, head) pair, in increasing order."""
    return sorted(from_state(HDCServer, server).cache)


def cached_pair(server: State, client: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], int]:
    """Client ``client``'s cached encoder (``{state_dict name: tensor}``, no head), head
    (``{"weight", "bias"}``) and sample count."""
    cache = from_state(HDCServer, server).cache
    if client not in cache:
        raise ValueError(f"client {client} has no cached (encoder, head) pair: it has not taken part yet "
                         f"(cached clients: {sorted(cache)}); personalization needs its head")
    return cache[client].model, cache[client].head, int(cache[client].n)


def head_matrix(head: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """A linear head as one matrix ``[W, b]`` of shape ``(C, d + 1)`` (float64)."""
    return torch.cat([head["weight"].double(), head["bias"].double()[:, None]], dim=1)


# ------------------------------------------------------------------------------------------------
# The refresh: descriptors, groups, prototypes, membership, gate
# ------------------------------------------------------------------------------------------------


def refresh(server: State, round_: int, config: HDCConfig, seed: int) -> State:
    """The server state after a refresh at round ``round_``: new prototypes, membership and
    diagnostics from the current cache, and the gate updated. The shared encoder and the cache
    are returned unchanged."""
    s = from_state(HDCServer, server)
    clients = sorted(s.cache)
    if not clients or (config.k_max > 1 and len(clients) <= config.k_min):
        return server  # the grouping waits for k_min + 1 cached clients (the silhouette needs k <= n - 1)
    pairs = [(s.cache[k].model, s.cache[k].head, int(s.cache[k].n)) for k in clients]
    heads = torch.stack([head_matrix(h) for _, h, _ in pairs])  # (n, C, d + 1)
    z = head_descriptors(heads, rank=config.rank, kind=config.descriptor).numpy()  # (n, p)
    km = SilhouetteKMeans(config.k_min, config.k_max, config.n_init,
                          seed=derive_seed(seed, round_, HDC_GROUPING) % 2**32).fit(z)
    k, labels, centroids = km.k_, km.labels_, km.cluster_centers_
    silhouette = km.silhouette_
    if config.grouping == "random":
        labels = random_groups(len(clients), k, numpy_rng(seed, round_, HDC_RANDOM_GROUPS))
        centroids = group_centroids(z, labels, k)
        silhouette = float(silhouette_score(z, labels)) if 1 < k < len(clients) else math.nan  # the random groups' own
    protos = {}
    for j in range(k):
        members = np.flatnonzero(labels == j)
        protos[j] = Prototype(prefixed("", weighted_average([pairs[i][0] for i in members], [pairs[i][2] for i in members])))
    # soft: over the centroids; hard: each client's own group, whose prototype its encoder went into
    m = soft_membership(z, centroids, config.temperature) if config.membership == "soft" else np.eye(k)[labels]
    gram = torch.as_tensor(z @ z.T)
    ids = torch.as_tensor(clients, dtype=torch.int64)
    # stability against the previous refresh, on the clients both saw
    ari = drift = math.nan
    prev = s.hdcfl
    if prev is not None:
        prev_ids = prev.clients.tolist()
        common = [c for c in clients if c in prev_ids]
        if len(common) >= 2:
            now = [clients.index(c) for c in common]
            before = [prev_ids.index(c) for c in common]
            ari = assignment_agreement(prev.labels.numpy()[before], labels[now])
            drift = descriptor_drift(prev.gram.numpy()[np.ix_(before, before)], gram.numpy()[np.ix_(now, now)])
    # one group by design (k_max = 1) needs no separation; one group because the heads are too alike has none
    separated = config.k_max == 1 or (k > 1 and silhouette >= config.min_silhouette)
    same_partition = not math.isnan(ari) and ari >= config.min_ari
    slow_descriptors = not math.isnan(drift) and drift <= config.max_drift
    persistent = same_partition and slow_descriptors if config.gate == "both" else same_partition or slow_descriptors
    stable = bool(separated and persistent)
    was_active = prev is not None and prev.active
    streak = (0 if prev is None else prev.streak) + 1 if stable else 0
    active = was_active or streak >= config.patience or round_ >= config.max_activation_round
    row = RefreshRow(int(round_), int(k), _number(silhouette), _number(ari), _number(drift), _number(membership_entropy(m)),
                     stable, bool(active), len(clients))
    raw_labels = None
    if config.compare_raw:  # the raw-head grouping of the same cache: diagnostics only, nothing deployed changes
        raw_km = SilhouetteKMeans(config.k_min, config.k_max, config.n_init,
                                  seed=derive_seed(seed, round_, HDC_GROUPING) % 2**32).fit(
            head_descriptors(heads, rank=config.rank, kind="raw").numpy())
        raw_ari = math.nan
        if prev is not None and prev.raw_labels is not None:
            prev_ids = prev.clients.tolist()
            common = [c for c in clients if c in prev_ids]
            if len(common) >= 2:
                raw_ari = assignment_agreement(prev.raw_labels.numpy()[[prev_ids.index(c) for c in common]],
                                               raw_km.labels_[[clients.index(c) for c in common]])
        row.raw_k, row.raw_silhouette, row.raw_ari = int(raw_km.k_), _number(raw_km.silhouette_), _number(raw_ari)
        raw_labels = torch.as_tensor(raw_km.labels_, dtype=torch.int64)
    s.proto = protos
    s.hdcfl = RefreshState(ids, torch.as_tensor(labels, dtype=torch.int64), gram, torch.as_tensor(m), raw_labels, streak, active,
                           int(round_) if active and not was_active else (None if prev is None else prev.activated_round),
                           ([] if prev is None else prev.history) + [row])
    return to_state(s)


def shared_encoder(server: State) -> dict[str, torch.Tensor]:
    r"""The server's shared encoder :math:`\bar\theta` (``{state_dict name: tensor}``, no head):
    FedAvg-SE's average of the clients' encoders, which no refresh changes.

    Examples
    --------
    >>> list(shared_encoder(State({"model/enc.weight": torch.ones(1), "model/head.weight": torch.ones(1)})))
    ['enc.weight']
    """
    return {k: v for k, v in server.with_prefix(MODEL).items() if not k.startswith(HEAD_PREFIX)}


def personalized_encoder(server: State, client: int, lam: float) -> dict[str, torch.Tensor]:
    r"""Client ``client``'s personalized encoder :math:`\lambda \sum_j m_{kj} P_j + (1 - \lambda)\bar\theta`
    from the last refresh (``{state_dict name: tensor}``, no head), computed in float64 and cast
    back to each array's dtype."""
    if not is_real(lam) or not 0 <= lam <= 1:
        raise ValueError(f"lam (λ) must be a number in [0, 1], got {lam!r}")
    state = from_state(HDCServer, server)
    if state.hdcfl is None:
        raise ValueError("no refresh has run yet: there are no prototypes to personalize with")
    ids = state.hdcfl.clients.tolist()
    if client not in ids:
        raise ValueError(f"client {client} has no cached (encoder, head) pair at the last refresh (cached clients: "
                         f"{ids}); personalization needs its head")
    weights = state.hdcfl.membership[ids.index(client)]  # (k,)
    out = {}
    for name, s in shared_encoder(server).items():
        mix = sum(float(weights[j]) * state.proto[j].model[name].double() for j in range(len(weights)))
        out[name] = (lam * mix + (1.0 - lam) * s.double()).to(s.dtype) if s.is_floating_point() else s
    return out


def refresh_history(server: State) -> pd.DataFrame:
    """One row per refresh: round, chosen k, silhouette (NaN for one group), ARI and descriptor
    drift against the previous refresh (NaN at the first), mean membership entropy (nats),
    whether the grouping was stable, whether personalization was active, and how many clients
    were cached; with :attr:`HDCConfig.compare_raw`, the raw-head grouping's :data:`RAW_HISTORY_COLUMNS` too."""
    refreshed = from_state(HDCServer, server).hdcfl
    rows = [] if refreshed is None else refreshed.history
    columns = list(HISTORY_COLUMNS) + (list(RAW_HISTORY_COLUMNS) if any(r.raw_k is not None for r in rows) else [])
    frame = pd.DataFrame([[getattr(r, c) for c in columns] for r in rows], columns=columns).fillna(np.nan)
    return frame.astype({"round": int, "k": int, "stable": bool, "active": bool, "n_cached": int})


# ------------------------------------------------------------------------------------------------
# The method
# ------------------------------------------------------------------------------------------------


@dataclass
class HDCFL(FedAvgSE):
    """FedAvg-SE training with HDC-FL's server: cache, head-derived groups, encoder prototypes,
    soft mixtures deployed with each client's own head once the grouping is stable."""

    config: HDCConfig = field(default_factory=HDCConfig)
    seed: int = 0  # k-means initializations and random groups: streams derived from it per refresh
    name = "hdcfl"
    capabilities = replace(FedAvgSE.capabilities, reply_arrays=(HEAD_REPLY,))  # each client's head, cached on the server

    def reply(self, model: torch.nn.Module, n_samples: int, loss: float) -> Message:
        """The encoder (averaged) and the head (cached on the server, never averaged nor sent on)."""
        return update_message({**body_arrays(model), **prefixed(HEAD_REPLY, model.head.state_dict())}, n_samples, loss)

    def init_server(self, model: torch.nn.Module) -> State:
        n_classes = int(model.head.out_features)
        if self.config.rank > n_classes:
            raise ValueError(f"HDCConfig.rank r={self.config.rank} is larger than the head's rank: a head of {n_classes} "
                             f"classes has rank at most {n_classes}; valid: 1..{n_classes}")
        return super().init_server(model)

    def aggregate(self, server: State, replies, round_: int) -> State:
        """The encoders averaged as FedAvg-SE's (:func:`fedlib.aggregate.model_average`), each
        reply's (encoder, head) cached as it arrives, and a refresh on the refresh rounds."""
        s = from_state(HDCServer, server)

        def caching(pairs):
            for client, reply in pairs:
                s.cache[client] = CachedPair.of(reply)
                yield client, reply
                del reply

        s.model = model_average(server, caching(replies)).with_prefix(MODEL)
        state = to_state(s)
        if round_ % self.config.refresh_every == 0:
            state = refresh(state, round_, self.config, self.seed)
        return state

    def on_event(self, server: State, event: Event) -> State:
        """A client that leaves is dropped from the cache (its pair no longer joins a prototype);
        the next refresh groups the clients that remain."""
        if event.kind != "leave":
            return server
        s = from_state(HDCServer, server)
        s.cache.pop(event.client, None)
        return to_state(s)

    def configure_evaluate(self, server: State, round_: int, clients) -> dict[int, Message]:
        """Before activation, the training message (the shared encoder: FedAvg-SE's deployment);
        after, each client's personalized encoder (body only: the client deploys it with its own
        head). A client the last refresh did not see (under partial participation, one never
        sampled yet; a client that joined since) has no head on the server to personalize with:
        it gets the shared message too, FedAvg-SE's deployment."""
        shared = super().configure_evaluate(server, round_, clients)
        refreshed = from_state(HDCServer, server).hdcfl
        if refreshed is None or not refreshed.active:
            return shared
        seen = set(refreshed.clients.tolist())
        return {k: Message(arrays=prefixed(MODEL, personalized_encoder(server, k, self.config.lam)), kind="personalized")
                if k in seen else shared[k] for k in clients}


def with_variant(server: State, round_: int, config: HDCConfig, seed: int) -> State:
    """A finished run's server state refreshed again under another ``config`` (an ablation:
    another descriptor, k range, grouping, membership), with personalization active. Since
    HDC-FL never changes the training trajectory, every server-side ablation is evaluated on
    the same run (:func:`fedlib.run.evaluate_deployment` with ``HDCFL(config=config)``)."""
    s = from_state(HDCServer, server)
    s.proto, s.hdcfl = {}, None
    return refresh(to_state(s), round_, replace(config, max_activation_round=1), seed)


def donor_swap(server: State, score: Callable[[int, dict[str, torch.Tensor]], float], *, rank: int = 8,
               supports: np.ndarray | None = None, groups: np.ndarray | None = None) -> pd.DataFrame:
    """The donor-swap diagnostic (Appendix F): for each target client ``i`` and donor ``j != i``,
    the target's cached head on the donor's cached encoder, scored by ``score(i, weights)``
    (e.g. the accuracy on client ``i``'s local test split; ``weights`` a full ``state_dict``),
    against the target's own pair.

    Returns one row per (target, donor): ``own``, ``swapped``, ``gain = swapped - own``, the
    similarity of the two heads as the cosine of the raw heads (``head_cosine``, flattened
    ``[W, b]``) and of their rank-``rank`` descriptors (``lowrank_cosine``); with ``supports``
    (shape (n_clients, n_classes), True where a client holds a class) the Jaccard index of their
    label supports (``overlap``); with ``groups`` (shape (n_clients,), e.g. the rotations) whether
    they share a group (``same_group``). :func:`donor_ranking` summarizes the table."""
    clients = cached_clients(server)
    pairs = {k: cached_pair(server, k) for k in clients}
    heads = torch.stack([head_matrix(pairs[k][1]) for k in clients])
    raw = head_descriptors(heads, rank=1, kind="raw")  # unit-norm flattened heads: their dot is the cosine
    low = head_descriptors(heads, rank=rank)
    at = {k: i for i, k in enumerate(clients)}
    rows = []
    for i in clients:
        head = {"head." + name: t for name, t in pairs[i][1].items()}
        own = score(i, {**pairs[i][0], **head})
        for j in clients:
            if j == i:
                continue
            swapped = score(i, {**pairs[j][0], **head})
            row = {"target": i, "donor": j, "own": own, "swapped": swapped, "gain": swapped - own,
                   "head_cosine": float(raw[at[i]] @ raw[at[j]]), "lowrank_cosine": float(low[at[i]] @ low[at[j]])}
            if supports is not None:
                union = np.sum(supports[i] | supports[j])
                row["overlap"] = float(np.sum(supports[i] & supports[j]) / union) if union else 1.0
            if groups is not None:
                row["same_group"] = bool(groups[i] == groups[j])
            rows.append(row)
    return pd.DataFrame(rows)


def partial_spearman(x, y, z) -> float:
    """The Spearman correlation of ``x`` and ``y`` after the ranks of ``z`` are regressed out of
    both ranks (the partial rank correlation; Appendix F's "partial correlation with loss benefit
    after residualizing overlap ranks"). A constant ``z`` gives the plain Spearman correlation.

    >>> round(partial_spearman([1, 2, 3, 4], [1, 2, 4, 3], [5, 5, 5, 5]), 3)
    0.8
    """
    rx, ry, rz = (pd.Series(np.asarray(v, dtype=float)).rank().to_numpy() for v in (x, y, z))
    if np.ptp(rz) > 0:
        rx, ry = (r - np.polyval(np.polyfit(rz, r, 1), rz) for r in (rx, ry))
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def donor_ranking(table: pd.DataFrame) -> dict[str, float]:
    """The donor-swap table of one run (:func:`donor_swap`) in numbers: the Spearman correlation
    of the swap gain with the raw-head and with the rank-r similarity, the AUROC of the raw-head
    similarity for "the swap helps" (gain > 0) and, with ``same_group``, for "same group" (and
    its average precision, with the share of same-group pairs: the average precision of chance); the
    mean gain; with ``overlap``, the Spearman correlation of similarity and label overlap and
    the partial correlation of similarity and gain given the overlap (:func:`partial_spearman`).
    An undefined value (one class of labels only, a constant column) is NaN."""
    def auroc(labels) -> float:
        labels = np.asarray(labels, dtype=bool)
        return float(roc_auc_score(labels, table["head_cosine"])) if 0 < labels.sum() < len(labels) else math.nan

    def rho(a, b) -> float:
        return float(spearmanr(a, b).statistic) if np.ptp(a) > 0 and np.ptp(b) > 0 else math.nan

    out = {"rho_raw": rho(table["head_cosine"], table["gain"]), "rho_lowrank": rho(table["lowrank_cosine"], table["gain"]),
           "auroc_helps": auroc(table["gain"] > 0), "mean_gain": float(table["gain"].mean())}
    if "same_group" in table:
        same = np.asarray(table["same_group"], dtype=bool)
        out["auroc_same_group"] = auroc(same)
        out["ap_same_group"] = float(average_precision_score(same, table["head_cosine"])) if 0 < same.sum() < len(same) \
            else math.nan
        out["base_same_group"] = float(same.mean())  # the average precision of a random ranking
    if "overlap" in table:
        out["rho_overlap"] = rho(table["head_cosine"], table["overlap"])
        out["partial_rho"] = partial_spearman(table["head_cosine"], table["gain"], table["overlap"])
    return out


__all__ = ["GATES", "GROUPINGS", "CachedPair", "HDCConfig", "HDCFL", "HDCServer", "HEAD_REPLY", "HISTORY_COLUMNS", "MEMBERSHIPS",
           "Prototype", "RAW_HISTORY_COLUMNS", "RefreshRow", "RefreshState", "cached_clients", "cached_pair", "donor_ranking", "donor_swap", "head_matrix",
           "partial_spearman", "personalized_encoder", "refresh", "refresh_history", "shared_encoder", "with_variant"]
