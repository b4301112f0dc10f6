r"""MPT as a plug-in of the one round loop: FedAvg training plus per-round re-embedding and
server-side rare-class prototype tracking (Jang et al., "MPT: Missing Prototype Tracking via
Barycentric Reconstruction in Vehicular Federated Learning", arXiv:2609.12771, Section IV-B).

One round ``r`` (the loop's hooks only):

1. ``configure_train``: the global model :math:`\theta_r` (plus, after the departure and when SDC is
   on, SDC's current rare prototype, :math:`d` floats);
2. ``local_update``: the client **re-embeds** its training data under :math:`\theta_r` (the model
   the server aggregated at the end of round ``r-1``: the paper's step 4, moved to the start of the
   next round because the loop has one client step per round), computes the class statistics its
   ``payload`` asks for, the SDC/LDC aggregates between :math:`\theta_{r-1}` and :math:`\theta_r`
   after the departure (on its remaining rare-class samples, the paper's budget, or on all its
   samples: ``drift_samples``, :data:`DRIFT_SAMPLES`), trains locally, and replies with the update and the statistics in one
   message (so the ledger counts every byte);
3. ``aggregate``: FedAvg for the model; the merged statistics give the prototypes under
   :math:`\theta_r`; after the departure the rare-class prototype of every tracking method is
   reconstructed (:mod:`fedlib.tracking`); with ``history`` the round's model, prototype sets,
   covariance and CCVR head are kept in the server state for an offline evaluation
   (:func:`evaluate_history`);
4. ``on_event``: at the departure the server stores the barycentric weights, the residual and the
   regularized covariance (Section IV-B, step 5).

The server's state is typed (:class:`MPTServer`: the model, the statistics' model, the last known
prototypes, the :class:`Departure` with its snapshots and the drifting SDC/LDC prototypes, the
:class:`KeptRound` history) and a client's too (:class:`MPTClient`), each flattened to a
:class:`~fedlib.messages.State` by :func:`fedlib.messages.to_state`.

The evaluation at round ``r`` pairs :math:`\theta_r` with the prototypes computed under it (one
round behind the freshly aggregated :math:`\theta_{r+1}`): the prototypes of
:math:`\theta_{r+1}` exist only after the next round's re-embedding.

Payload parts (``MPT(payload=...)``; :data:`METHOD_PAYLOAD` says which parts each method needs):

===============  ==========================================  ==================================
part             arrays per client and round                 needed by
===============  ==========================================  ==================================
``moments``      class counts (C) and feature sums (C, d)    every prototype method
``scatter``      Gram matrix summed over remaining classes   the Mahalanobis readout, MPT's
                 (d, d)                                      :math:`\Sigma_t`
``rare_gram``    Gram matrix of the rare class (d, d)        MPT's noise estimate
``sqnorm``       per-class sum of squared norms (C)          MPT-lite's growth factor
``class_grams``  per-class Gram matrices (C, d, d)           CCVR
``sdc``          weighted drift sum (d) and weight (1)       SDC
``ldc``          a linear map (d, d) and a count (1)         LDC
===============  ==========================================  ==================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..heads import MahalanobisNCM, NearestClassMean, ccvr_calibrate, mahalanobis
from ..messages import Message, State, from_state, prefixed, to_state
from ..metrics import Confusion
from ..rng import CCVR_VIRTUAL, torch_generator
from ..stats import ClassMoments
from ..tracking import (
    TrackingConfig,
    Snapshot,
    barycentric_prototype,
    growth_factor,
    icarl_prototype,
    ldc_fit_map,
    ldc_step,
    reconstruct_lite,
    reconstruct_mpt,
    sdc_client_sums,
    sdc_step,
    stored_residual_prototype,
    take_snapshot,
    transported_prototype,
)
from ..training import TrainConfig, local_train
from ..validation import is_int
from ..aggregate import model_average
from ..models import HEAD_PREFIX
from ..protocol import (MODEL, Algorithm, Capabilities, ClientContext, Event, Predictor, load_model, model_arrays,
                        model_message, update_message)

PARTS = ("moments", "scatter", "rare_gram", "sqnorm", "class_grams", "sdc", "ldc")

METHOD_PAYLOAD: dict[str, tuple[str, ...]] = {
    "fedavg": (),
    "ccvr": ("moments", "class_grams"),
    "frozen": ("moments", "scatter"),
    "icarl": ("moments", "scatter"),
    "barycentric": ("moments", "scatter"),
    "stored_residual": ("moments", "scatter"),
    "transported": ("moments", "scatter"),
    "mpt_lite": ("moments", "scatter", "sqnorm"),
    "mpt": ("moments", "scatter", "rare_gram"),
    "sdc": ("moments", "scatter", "sdc"),
    "ldc": ("moments", "scatter", "ldc"),
}
"""The payload parts each method needs (all prototype methods share the Mahalanobis readout)."""

DRIFT_SAMPLES = ("rare", "all")
"""The sample budgets of SDC's and LDC's drift (``MPT(drift_samples=...)``): the remaining rare-class
samples only (the paper's, Section V-A) or every sample of every remaining client."""

PROTO_METHODS = ("frozen", "icarl", "barycentric", "stored_residual", "transported", "mpt_lite", "mpt", "mpt_predicted",
                 "mpt_measured", "sdc", "ldc")
"""Methods that differ only in the server's rare-class prototype (one training run serves all)."""

VARIANT = "mpt:"
"""The prefix of an MPT variant's method name (``MPT(variants=...)``): ``"mpt:<name>"``."""


def _needs(method: str) -> tuple[str, ...]:
    base = "mpt" if method.startswith(VARIANT) else {"mpt_predicted": "mpt", "mpt_measured": "mpt"}.get(method, method)
    return METHOD_PAYLOAD[base]


@dataclass
class Departure:
    """What the server keeps of the departure (Section IV-B, step 5) and what tracking moves."""

    client: int
    round: int
    snapshot: Snapshot | None = None  # the rare prototype's decomposition; None: the client held no rare sample
    variants: dict[str, Snapshot] = field(default_factory=dict)  # each MPT variant's own snapshot, by name
    remaining: torch.Tensor | None = None  # the remaining classes, (K,)
    sdc: torch.Tensor | None = None  # SDC's drifting rare-class prototype, (d,)
    ldc: torch.Tensor | None = None  # LDC's, (d,)


@dataclass
class KeptRound:
    """One aggregated round kept for the offline evaluation (:func:`evaluate_history`)."""

    model: dict[str, torch.Tensor]  # the model the round's statistics were computed under
    protos: torch.Tensor | None = None  # every method's prototype set, (methods, C, d)
    cov: torch.Tensor | None = None
    ccvr: dict[str, torch.Tensor] = field(default_factory=dict)  # CCVR's head: weight, bias
    alpha: float | None = None  # MPT's alpha (None before the departure)


@dataclass
class MPTServer:
    """MPT's server state (:func:`fedlib.messages.to_state` flattens it)."""

    model: dict[str, torch.Tensor]  # the global model theta (FedAvg's mean), {state_dict name: tensor}
    methods: list[str]  # the prototype methods, in the order of protos
    stats_model: dict[str, torch.Tensor] = field(default_factory=dict)  # theta_r, under which the statistics were computed
    aggregated_round: int | None = None
    rare_counts: dict[int, float] = field(default_factory=dict)  # each client's last reported rare-class count
    last_means: torch.Tensor | None = None  # every class's last known prototype, (C, d)
    last_cov: torch.Tensor | None = None  # Sigma_t of the remaining classes, last known, (d, d)
    protos: torch.Tensor | None = None  # the last aggregation's prototype sets, (methods, C, d)
    cov: torch.Tensor | None = None
    ccvr: dict[str, torch.Tensor] = field(default_factory=dict)
    departure: Departure | None = None
    history: dict[int, KeptRound] = field(default_factory=dict)  # by round
    note: str | None = None  # why nothing is tracked
    rare_remaining: float | None = None  # in the last tracked round: the rare class's remaining samples,
    growth: float | None = None  # MPT-lite's growth factor
    alpha: float | None = None  # and MPT's alpha


@dataclass
class MPTClient:
    """A client's state: the model of the round it last took part in (:math:`\\theta_{r-1}`, where
    SDC's and LDC's drift starts) and that round."""

    prev_round: int | None = None
    prev_model: dict[str, torch.Tensor] = field(default_factory=dict)


class RoundStats:
    """One round's replies and their merged statistics under the broadcast model :math:`\\theta_r`:
    class counts (C,) and sums (C, d), any other part summed on demand (:meth:`total`), and, after
    the departure, what every tracking method reads (``cov``, ``M_t``, ``n``, ``rare_mean``,
    ``rare_cov``)."""

    def __init__(self, updates: list[tuple[int, Message]]) -> None:
        self.replies = [m for _, m in updates]
        self.counts, self.sums = self.total("stats/counts"), self.total("stats/sums")
        self.cov = self.M_t = self.rare_mean = self.rare_cov = None
        self.n = 0.0

    def total(self, name: str) -> torch.Tensor:
        """The sum of the replies' ``name`` arrays."""
        return sum(m.arrays[name] for m in self.replies)


def _mpt_lite(mpt: "MPT", method: str, s: MPTServer, r: RoundStats) -> torch.Tensor:
    snap, sums, counts = s.departure.snapshot, r.sums, r.counts
    sq = r.total("stats/sqnorm")
    mask = torch.zeros_like(counts, dtype=torch.bool)
    mask[s.departure.remaining.tolist()] = True
    mask &= counts > 0
    tr_t = float((sq[mask] - (sums[mask] ** 2).sum(1) / counts[mask]).sum() / counts[mask].sum())
    s.growth = growth_factor(snap.trace_d, tr_t)
    return reconstruct_lite(snap, r.M_t, s.growth)


def _mpt(mpt: "MPT", method: str, s: MPTServer, r: RoundStats) -> torch.Tensor:
    if method.startswith(VARIANT):
        name = method[len(VARIANT):]
        return reconstruct_mpt(s.departure.variants[name], r.M_t, r.cov, r.n, r.rare_mean, r.rare_cov,
                               dict(mpt.variants)[name]).prototype
    forced = {"mpt": None, "mpt_predicted": 0.0, "mpt_measured": 1.0}[method]
    rec = reconstruct_mpt(s.departure.snapshot, r.M_t, r.cov, r.n, r.rare_mean, r.rare_cov, mpt.tracking, alpha=forced)
    if method == "mpt":
        s.alpha = rec.alpha
    return rec.prototype


def _sdc(mpt: "MPT", method: str, s: MPTServer, r: RoundStats) -> torch.Tensor:
    d = s.departure
    sw = float(sum(float(u.arrays["sdc/sum_w"][0]) for u in r.replies if "sdc/sum_w" in u.arrays))
    swd = sum((u.arrays["sdc/sum_w_delta"] for u in r.replies if "sdc/sum_w" in u.arrays), torch.zeros_like(d.snapshot.prototype))
    d.sdc = sdc_step(d.sdc, swd, sw)
    return d.sdc.clone()


def _ldc(mpt: "MPT", method: str, s: MPTServer, r: RoundStats) -> torch.Tensor:
    d = s.departure
    parts = [(u.arrays["ldc/map"], float(u.arrays["ldc/n"][0])) for u in r.replies if "ldc/map" in u.arrays]
    ntot = sum(w for _, w in parts)
    if ntot > 0:
        d.ldc = ldc_step(d.ldc, sum(Wk * (w / ntot) for Wk, w in parts))
    return d.ldc.clone()


PROTOTYPES: dict[str, Callable[["MPT", str, MPTServer, RoundStats], torch.Tensor]] = {
    "frozen": lambda mpt, m, s, r: s.departure.snapshot.prototype.clone(),
    "icarl": lambda mpt, m, s, r: icarl_prototype(r.n, r.sums[mpt.rare_class], s.departure.snapshot.prototype),
    "barycentric": lambda mpt, m, s, r: barycentric_prototype(s.departure.snapshot, r.M_t),
    "stored_residual": lambda mpt, m, s, r: stored_residual_prototype(s.departure.snapshot, r.M_t),
    "transported": lambda mpt, m, s, r: transported_prototype(s.departure.snapshot, r.M_t, r.cov, mpt.tracking),
    "mpt_lite": _mpt_lite, "mpt": _mpt, "mpt_predicted": _mpt, "mpt_measured": _mpt, VARIANT: _mpt, "sdc": _sdc, "ldc": _ldc,
}
"""Each tracking method's rare-class prototype in a round after the departure, from the typed
server state and the round's statistics (MPT-lite notes its growth factor in the state, MPT its
:math:`\\alpha`, SDC and LDC move their drifting prototypes); ``VARIANT`` stands for every MPT variant."""


class NCMPredictor(nn.Module):
    """The deployed predictor: the backbone's penultimate features scored by a Mahalanobis NCM."""

    def __init__(self, model: nn.Module, means: torch.Tensor, precision: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        ok = torch.isfinite(means).all(dim=1)
        self.register_buffer("means", torch.where(ok[:, None], means, torch.zeros_like(means)).float())
        self.register_buffer("valid", ok)
        self.register_buffer("precision", precision.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.model.embed(x)
        diff = z[:, None, :] - self.means[None]
        d2 = torch.einsum("ncd,de,nce->nc", diff, self.precision, diff)
        return torch.where(self.valid[None], -0.5 * d2, torch.full_like(d2, -float("inf")))


@dataclass
class MPT(Algorithm):
    """FedAvg training with per-round re-embedding and rare-class prototype tracking.

    Parameters
    ----------
    train : local training
    rare_class : the class whose prototype is tracked after the departure
    tracking : MPT's hyper-parameters (:class:`fedlib.tracking.TrackingConfig`)
    payload : the statistics clients send (see the module docstring); default: every part, so one
        run serves every method
    train_rare_on : clients that train on the rare class (``None``: all). The paper keeps the
        remaining rare samples out of training and uses them only to measure (Fig. 7 (c)): pass the
        departing client's id alone
    deploy_method : the prototype method the loop's own evaluation deploys
    sdc_sigma, ldc_epochs, ldc_lr, ldc_batch : SDC's kernel width (on L2-normalized features) and
        LDC's training (Adam, MSE, from the identity; the reference uses 20 epochs, lr 1e-3)
    drift_samples : the samples SDC and LDC measure the drift on (:data:`DRIFT_SAMPLES`):
        ``"rare"`` (default), each remaining client's rare-class samples only, the paper's "same
        post-departure rare-class sample budget as MPT" (Section V-A, Baselines); ``"all"``, every
        sample of every class on every remaining client (the baselines' own papers, where the
        current task's data is at hand)
    ccvr_virtual, ccvr_steps, ccvr_lr : CCVR's virtual features per class and head re-training
    ccvr_rounds : the rounds whose CCVR head is calibrated (``None``: every round). CCVR's head
        is an evaluator's readout that nothing else in a run reads, drawn from a generator of its
        own round, so an offline evaluation of a few rounds (:func:`evaluate_history`'s
        ``rounds``) passes them and every other number of the run is unchanged; a round left out
        keeps no CCVR head (its evaluation has no ``ccvr`` rows)
    history : keep every round's model, prototype sets and covariance in the server state
    seed : seed of the server's own randomness (CCVR's virtual features)
    variants : ``(name, TrackingConfig)`` pairs: MPT again with other settings, server-side on the
        same trajectory (the clients' statistics do not depend on them), as the methods
        ``"mpt:<name>"`` (own departure snapshot, same statistics); an offline evaluation reads
        them with the study's readout regularization (:func:`evaluate_history`'s ``reg``)
    """

    train: TrainConfig = field(default_factory=TrainConfig)
    rare_class: int = 0
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    payload: tuple[str, ...] = PARTS
    train_rare_on: tuple[int, ...] | None = None
    deploy_method: str = "mpt"
    sdc_sigma: float = 0.3
    ldc_epochs: int = 20
    ldc_lr: float = 1e-3
    ldc_batch: int = 32
    drift_samples: str = "rare"
    ccvr_virtual: int = 100
    ccvr_steps: int = 100
    ccvr_lr: float = 0.01
    ccvr_rounds: tuple[int, ...] | None = None
    history: bool = True
    seed: int = 0
    variants: tuple[tuple[str, TrackingConfig], ...] = ()
    name = "mpt"
    capabilities = Capabilities(streams=False, reply_arrays=("stats/", "sdc/", "ldc/"))  # tracking reads each client's rare-class count and statistics at once

    def __post_init__(self) -> None:
        bad = [p for p in self.payload if p not in PARTS]
        if bad:
            raise ValueError(f"unknown payload part(s) {bad}; valid: {', '.join(PARTS)}")
        self.payload = tuple(self.payload)
        if self.drift_samples not in DRIFT_SAMPLES:
            raise ValueError(f"unknown drift_samples {self.drift_samples!r}; valid: {', '.join(map(repr, DRIFT_SAMPLES))}")
        if self.deploy_method not in PROTO_METHODS:
            raise ValueError(f"unknown deploy_method {self.deploy_method!r}; valid: {', '.join(PROTO_METHODS)}")
        if self.payload and "moments" not in self.payload:
            raise ValueError("every statistics payload needs the 'moments' part (class counts and sums)")
        if self.ccvr_rounds is not None:
            rounds = self.ccvr_rounds
            if not isinstance(rounds, (tuple, list)) or not all(is_int(r) and r >= 1 for r in rounds):
                raise ValueError(f"ccvr_rounds must be None or rounds (ints >= 1), got {self.ccvr_rounds!r}")
            self.ccvr_rounds = tuple(sorted({int(r) for r in self.ccvr_rounds}))
        self.variants = tuple(tuple(v) for v in self.variants)
        names = [v[0] for v in self.variants]
        bad = [v for v in self.variants if len(v) != 2 or not isinstance(v[0], str) or not v[0]
               or "/" in v[0] or not isinstance(v[1], TrackingConfig)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"variants must be (name, TrackingConfig) pairs with distinct non-empty names without '/', got "
                             f"{self.variants!r}")

    # ------------------------------------------------------------------ server side
    def methods(self) -> list[str]:
        """The prototype methods this payload supports."""
        base = [m for m in PROTO_METHODS if set(_needs(m)) <= set(self.payload)]
        return base + [VARIANT + name for name, _ in self.variants if "mpt" in base]

    def init_server(self, model: torch.nn.Module) -> State:
        return to_state(MPTServer(model=prefixed("", model.state_dict()), methods=self.methods()))

    def configure_evaluate(self, server: State, round_: int, clients) -> dict[int, Message]:
        """After round ``round_``'s aggregation: deploy :math:`\\theta_r` with its own prototypes
        (the model the statistics were computed under); before any aggregation, the model. One
        message shared by every client."""
        s = from_state(MPTServer, server)
        if s.aggregated_round != round_ or s.protos is None:
            return self.configure_train(server, round_, clients)
        m = self.deploy_method if self.deploy_method in s.methods else s.methods[0]  # e.g. a reduced payload
        arrays = {MODEL + k: v for k, v in s.stats_model.items()}
        arrays.update({"deploy/means": s.protos[s.methods.index(m)], "deploy/cov": s.cov})
        return dict.fromkeys(clients, Message(arrays=arrays, kind="deploy"))

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The model (and, while tracking with SDC, its drifting prototype), one message shared by
        every client."""
        d = from_state(MPTServer, server).departure
        tracking = d is not None and d.snapshot is not None
        msg = model_message(server, **({"sdc/prototype": d.sdc} if tracking and "sdc" in self.payload else {}))
        msg.meta = {"tracking": tracking}
        return dict.fromkeys(clients, msg)

    def on_event(self, server: State, event: Event) -> State:
        """At the first departure, the departing client's rare-class prototype decomposed over the
        remaining classes' (Section IV-B, step 5), for MPT and each variant; nothing to track when
        the client held no rare-class sample."""
        s = from_state(MPTServer, server)
        if event.kind != "leave" or s.departure is not None or s.last_means is None:
            return server
        c, means = self.rare_class, s.last_means
        s.departure = Departure(client=event.client, round=event.round)
        if s.rare_counts.get(event.client, 0.0) <= 0 or not bool(torch.isfinite(means[c]).all()) or s.last_cov is None:
            s.note = "the departing client held no rare-class sample (or no statistics): nothing to track"
            return to_state(s)
        rem = [k for k in range(means.shape[0]) if k != c and bool(torch.isfinite(means[k]).all())]
        s.departure.snapshot = take_snapshot(means[c], means[rem], s.last_cov, self.tracking)
        s.departure.variants = {name: take_snapshot(means[c], means[rem], s.last_cov, cfg) for name, cfg in self.variants}
        s.departure.remaining = torch.tensor(rem)
        s.departure.sdc, s.departure.ldc = means[c].clone(), means[c].clone()
        return to_state(s)

    def aggregate(self, server: State, replies, round_: int) -> State:
        """FedAvg's mean of the models, the class statistics under the broadcast model, and every
        prototype method's rare-class prototype (tracked after the departure); the list of the
        round's replies at once, since tracking reads each client's rare-class count and statistics."""
        updates = list(replies)
        if not updates:
            return server
        s = from_state(MPTServer, server)
        s.stats_model = s.model  # theta_r, the model the clients' statistics were computed under
        s.model = model_average(server, updates).with_prefix(MODEL)
        s.aggregated_round = round_
        if not self.payload:
            return to_state(s)
        c = self.rare_class
        r = RoundStats(updates)
        counts, sums = r.counts, r.sums
        for k, m in updates:
            s.rare_counts[k] = float(m.arrays["stats/counts"][c])
        means = sums / counts[:, None]
        rem = torch.ones(len(counts), dtype=torch.bool)
        rem[c] = False
        rem &= counts > 0
        if "scatter" in self.payload:
            n_rem = float(counts[rem].sum())
            outer = (sums[rem][:, :, None] * sums[rem][:, None, :] / counts[rem][:, None, None]).sum(0)
            cov_t = (r.total("stats/scatter") - outer) / max(n_rem, 1.0)
            r.cov = 0.5 * (cov_t + cov_t.T)
        last = s.last_means if s.last_means is not None else torch.full_like(means, float("nan"))
        s.last_means = last = torch.where(torch.isfinite(means), means, last)
        if r.cov is not None:
            s.last_cov = r.cov
        tracking = s.departure is not None and s.departure.snapshot is not None
        if tracking:
            self._prepare_tracking(s, r)
        protos = []
        for m in s.methods:  # every method's prototype set: the last known prototypes, its own rare-class one
            P = last.clone()
            P[c] = PROTOTYPES[m if m in PROTOTYPES else VARIANT](self, m, s, r) if tracking else means[c].clone()
            protos.append(P)
        if protos:
            s.protos = torch.stack(protos)
        if r.cov is not None:
            s.cov = r.cov
        if "class_grams" in self.payload and self.ccvr_rounds is not None and round_ not in self.ccvr_rounds:
            s.ccvr = {}  # not calibrated this round (ccvr_rounds): no head kept, not the previous round's
        elif "class_grams" in self.payload:
            mom = ClassMoments(counts, sums, r.total("stats/grams"))
            w, b = s.stats_model[HEAD_PREFIX + "weight"], s.stats_model[HEAD_PREFIX + "bias"]
            gen = torch_generator(self.seed, round_, CCVR_VIRTUAL)
            covs = torch.nan_to_num(mom.class_covariances())
            s.ccvr["weight"], s.ccvr["bias"] = ccvr_calibrate(
                torch.nan_to_num(means), covs, counts, w, b, n_virtual=self.ccvr_virtual, steps=self.ccvr_steps,
                lr=self.ccvr_lr, reg=self.tracking.reg, generator=gen)
        if self.history:
            s.history[round_] = KeptRound(model=s.stats_model, protos=s.protos, cov=s.cov, ccvr=dict(s.ccvr), alpha=s.alpha)
        return to_state(s)

    def _prepare_tracking(self, s: "MPTServer", r: "RoundStats") -> None:
        """What every tracking method reads this round: the remaining classes' current prototypes
        (the last known if a class vanished), the rare class's count, mean and covariance."""
        c = self.rare_class
        r.M_t = s.last_means[s.departure.remaining.tolist()]
        r.n = float(r.counts[c])
        r.rare_mean = r.sums[c] / r.n if r.n > 0 else None
        if "rare_gram" in self.payload and r.n >= 2:
            r.rare_cov = (r.total("stats/rare_gram") - r.n * torch.outer(r.rare_mean, r.rare_mean)) / (r.n - 1)
        s.rare_remaining = r.n

    # ------------------------------------------------------------------ client side
    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> tuple[State, Message]:
        C, c = ctx.n_classes, self.rare_class
        x, y = data.train.x, data.train.y
        model = load_model(ctx.model, message)
        arrays: dict[str, torch.Tensor] = {}
        new_state = state
        if self.payload:
            z = model.extract(x).to(torch.float64)  # re-embedding under theta_r
            mom = ClassMoments.from_features(z, y, C)
            arrays["stats/counts"], arrays["stats/sums"] = mom.counts, mom.sums
            if "scatter" in self.payload:
                arrays["stats/scatter"] = mom.grams.sum(0) - mom.grams[c]
            if "rare_gram" in self.payload:
                arrays["stats/rare_gram"] = mom.grams[c]
            if "sqnorm" in self.payload:
                arrays["stats/sqnorm"] = torch.diagonal(mom.grams, dim1=1, dim2=2).sum(-1)
            if "class_grams" in self.payload:
                arrays["stats/grams"] = mom.grams
            drift = ("sdc" in self.payload) or ("ldc" in self.payload)
            if drift:
                prev = from_state(MPTClient, state)
                if prev.prev_round == ctx.round - 1 and bool(message.meta.get("tracking")):
                    # the drift's sample budget: the client's rare-class samples (the paper's) or all of them
                    used = (y == c) if self.drift_samples == "rare" else torch.ones(len(y), dtype=torch.bool)
                    n_used, z_now = int(used.sum()), z[used]
                    ctx.model.load_state_dict(prev.prev_model)
                    z_old = ctx.model.extract(x[used]).to(torch.float64) if n_used else z_now
                    model = load_model(ctx.model, message)
                    if "sdc" in self.payload:
                        swd, sw = sdc_client_sums(z_old, z_now, message.arrays["sdc/prototype"], self.sdc_sigma)
                        arrays["sdc/sum_w_delta"], arrays["sdc/sum_w"] = swd, torch.tensor([sw], dtype=torch.float64)
                    if "ldc" in self.payload:  # no sample: the identity with weight 0 (the same message size)
                        W = ldc_fit_map(z_old, z_now, epochs=self.ldc_epochs, lr=self.ldc_lr, batch_size=self.ldc_batch,
                                        generator=generator) if n_used else torch.eye(z.shape[1], dtype=torch.float64)
                        arrays["ldc/map"], arrays["ldc/n"] = W, torch.tensor([float(n_used)], dtype=torch.float64)
                new_state = to_state(MPTClient(ctx.round, prefixed("", message.with_prefix(MODEL))))
        keep = torch.ones(len(y), dtype=torch.bool)
        if self.train_rare_on is not None and ctx.client not in self.train_rare_on:
            keep = y != c
        loss = local_train(model, x[keep], y[keep], self.train, generator)
        arrays.update(model_arrays(model))
        reply = update_message(arrays, int(keep.sum()), loss, kind="update+stats")
        return new_state, reply

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        model = load_model(ctx.model, message).eval()
        if "deploy/means" not in message.arrays:
            return model
        head = MahalanobisNCM(self.tracking.reg).fit(means=message.arrays["deploy/means"], covariance=message.arrays["deploy/cov"])
        return NCMPredictor(model, head.means_, head.precision_).eval()


def method_payload(method: str) -> tuple[str, ...]:
    """The payload parts ``method`` needs (:data:`METHOD_PAYLOAD`)."""
    if method not in METHOD_PAYLOAD and method not in PROTO_METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(sorted(set(METHOD_PAYLOAD) | set(PROTO_METHODS)))}")
    return _needs(method)


def _mahalanobis_predict(Pz: torch.Tensor, means: torch.Tensor, precision: torch.Tensor) -> np.ndarray:
    r"""The Mahalanobis nearest-class-mean predictions of :class:`fedlib.heads.MahalanobisNCM` from
    ``Pz`` :math:`= Z\tilde\Sigma^{-1}` (n, d), computed once per round: :math:`\arg\min_c
    (z-\mu_c)^\top P (z-\mu_c) = \arg\max_c\, 2 z^\top P\mu_c - \mu_c^\top P\mu_c` (the term
    :math:`z^\top P z` is the same for every class), an (n, d) × (d, C) product instead of an
    (n, C, d, d) one; a class without a finite prototype is never predicted."""
    ok = torch.isfinite(means).all(dim=1)
    safe = torch.where(ok[:, None], means, torch.zeros_like(means)).to(Pz.dtype)
    scores = 2.0 * Pz @ safe.T - ((safe @ precision.to(Pz.dtype)) * safe).sum(1)[None, :]
    scores = torch.where(ok[None, :], scores, torch.full_like(scores, -float("inf")))
    return scores.argmax(1).numpy()


@torch.no_grad()
def evaluate_history(server: State, global_test, model_fn, *, rare_class: int, rounds=None, reg: float = 0.1,
                     readout: str = "mahalanobis") -> pd.DataFrame:
    """Evaluate every kept round's methods on the global test set (the evaluator's side, offline).

    Returns a tidy frame ``round, method, metric, value`` with metrics ``f1`` (rare-class F1,
    :meth:`fedlib.metrics.Confusion.f1`), ``accuracy`` and, for prototype methods, ``dist_oracle``
    (Mahalanobis distance of the rare prototype to the oracle prototype, the current rare-class
    test mean, which is unavailable in practice). Methods: the server's prototype methods, the
    ``oracle`` prototype, ``fedavg`` (the model's softmax head) and ``ccvr`` when kept.
    """
    if readout not in ("mahalanobis", "euclidean"):
        raise ValueError(f"unknown readout {readout!r}; valid: 'mahalanobis', 'euclidean'")
    s = from_state(MPTServer, server)
    methods = s.methods
    rounds = sorted(s.history) if rounds is None else list(rounds)
    model = model_fn()
    y = global_test.y
    ynp = global_test.labels_np
    C = int(s.protos.shape[1]) if s.protos is not None else int(y.max()) + 1
    rows = []
    for r in rounds:
        kept = s.history[r]
        model.load_state_dict(kept.model)
        model.eval()
        z = model.extract(global_test.x).to(torch.float64)
        logits = model.head(z.float())
        conf = Confusion.from_predictions(ynp, logits.argmax(1).numpy(), C)
        rows += [(r, "fedavg", "f1", conf.f1(rare_class)), (r, "fedavg", "accuracy", conf.accuracy())]
        if kept.ccvr:
            lg = z.float() @ kept.ccvr["weight"].T + kept.ccvr["bias"]
            conf = Confusion.from_predictions(ynp, lg.argmax(1).numpy(), C)
            rows += [(r, "ccvr", "f1", conf.f1(rare_class)), (r, "ccvr", "accuracy", conf.accuracy())]
        if kept.protos is None:
            continue
        protos = kept.protos
        oracle = z[y == rare_class].mean(0)
        sets = {m: protos[i] for i, m in enumerate(methods)}
        base = protos[0].clone()
        base[rare_class] = oracle
        sets["oracle"] = base
        cov = kept.cov
        precision = Pz = None
        for m, P in sets.items():
            if readout == "mahalanobis" and cov is not None:
                if precision is None:  # one covariance per round: every method's readout shares its precision
                    precision = MahalanobisNCM(reg).fit(means=P, covariance=cov).precision_
                    Pz = z @ precision  # (n, d)
                pred = _mahalanobis_predict(Pz, P, precision)
            else:
                pred = NearestClassMean().fit(means=P).predict(z).numpy()
            conf = Confusion.from_predictions(ynp, pred, C)
            rows += [(r, m, "f1", conf.f1(rare_class)), (r, m, "accuracy", conf.accuracy())]
            if precision is not None and bool(torch.isfinite(P[rare_class]).all()):
                rows.append((r, m, "dist_oracle", mahalanobis(P[rare_class], oracle, precision)))
        if kept.alpha is not None and np.isfinite(kept.alpha):
            rows.append((r, "mpt", "alpha", kept.alpha))
    frame = pd.DataFrame(rows, columns=["round", "method", "metric", "value"])
    return frame.astype({"round": "int64", "method": str, "metric": str, "value": "float64"})


__all__ = ["DRIFT_SAMPLES", "METHOD_PAYLOAD", "MPT", "PROTOTYPES", "Departure", "KeptRound", "MPTClient", "MPTServer", "NCMPredictor", "PARTS",
           "PROTO_METHODS", "RoundStats", "VARIANT", "evaluate_history",
           "method_payload"]
