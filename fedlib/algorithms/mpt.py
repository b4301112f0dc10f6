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
   after the departure, trains locally, and replies with the update and the statistics in one
   message (so the ledger counts every byte);
3. ``aggregate``: FedAvg for the model; the merged statistics give the prototypes under
   :math:`\theta_r`; after the departure the rare-class prototype of every tracking method is
   reconstructed (:mod:`fedlib.tracking`); with ``history`` the round's model, prototype sets,
   covariance and CCVR head are kept in the server state for an offline evaluation
   (:func:`evaluate_history`);
4. ``on_event``: at the departure the server stores the barycentric weights, the residual and the
   regularized covariance (Section IV-B, step 5).

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

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..heads import MahalanobisNCM, NearestClassMean, ccvr_calibrate, mahalanobis
from ..messages import Message, State, prefixed
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
)
from ..training import TrainConfig, local_train
from ..aggregate import model_average
from ..protocol import (HEAD, MODEL, Algorithm, Capabilities, ClientContext, Event, Predictor, load_model, model_arrays,
                        model_message, update_message)

PARTS = ("moments", "scatter", "rare_gram", "sqnorm", "class_grams", "sdc", "ldc")

METHOD_PAYLOAD: dict[str, tuple[str, ...]] = {
    "fedavg": (),
    "ccvr": ("moments", "class_grams"),
    "frozen": ("moments", "scatter"),
    "icarl": ("moments", "scatter"),
    "barycentric": ("moments", "scatter"),
    "stored_residual": ("moments", "scatter"),
    "mpt_lite": ("moments", "scatter", "sqnorm"),
    "mpt": ("moments", "scatter", "rare_gram"),
    "sdc": ("moments", "scatter", "sdc"),
    "ldc": ("moments", "scatter", "ldc"),
}
"""The payload parts each method needs (all prototype methods share the Mahalanobis readout)."""

PROTO_METHODS = ("frozen", "icarl", "barycentric", "stored_residual", "mpt_lite", "mpt", "mpt_predicted",
                 "mpt_measured", "sdc", "ldc")
"""Methods that differ only in the server's rare-class prototype (one training run serves all)."""

_STATS_MODEL = "stats_model/"


VARIANT = "mpt:"
"""The prefix of an MPT variant's method name (``MPT(variants=...)``): ``"mpt:<name>"``."""


def _needs(method: str) -> tuple[str, ...]:
    base = "mpt" if method.startswith(VARIANT) else {"mpt_predicted": "mpt", "mpt_measured": "mpt"}.get(method, method)
    return METHOD_PAYLOAD[base]


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
    ccvr_virtual, ccvr_steps, ccvr_lr : CCVR's virtual features per class and head re-training
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
    ccvr_virtual: int = 100
    ccvr_steps: int = 100
    ccvr_lr: float = 0.01
    history: bool = True
    seed: int = 0
    variants: tuple[tuple[str, TrackingConfig], ...] = ()
    name = "mpt"
    capabilities = Capabilities(streams=False)  # tracking reads each client's rare-class count and statistics at once

    def __post_init__(self) -> None:
        bad = [p for p in self.payload if p not in PARTS]
        if bad:
            raise ValueError(f"unknown payload part(s) {bad}; valid: {', '.join(PARTS)}")
        self.payload = tuple(self.payload)
        if self.deploy_method not in PROTO_METHODS:
            raise ValueError(f"unknown deploy_method {self.deploy_method!r}; valid: {', '.join(PROTO_METHODS)}")
        if self.payload and "moments" not in self.payload:
            raise ValueError("every statistics payload needs the 'moments' part (class counts and sums)")
        self.variants = tuple(tuple(v) for v in self.variants)
        names = [v[0] for v in self.variants]
        bad = [v for v in self.variants if len(v) != 2 or not isinstance(v[0], str) or not v[0]
               or any(ch in v[0] for ch in ",/") or not isinstance(v[1], TrackingConfig)]
        if bad or len(set(names)) != len(names):
            raise ValueError("variants must be (name, TrackingConfig) pairs with distinct non-empty names without ',' "
                             f"or '/', got {self.variants!r}")

    # ------------------------------------------------------------------ server side
    def methods(self) -> list[str]:
        """The prototype methods this payload supports."""
        base = [m for m in PROTO_METHODS if set(_needs(m)) <= set(self.payload)]
        return base + [VARIANT + name for name, _ in self.variants if "mpt" in base]

    def init_server(self, model: torch.nn.Module) -> State:
        return State(arrays=model_arrays(model), meta={"tracking": False, "departed": -1, "methods": ",".join(self.methods())})

    def configure_evaluate(self, server: State, round_: int, clients) -> dict[int, Message]:
        """After round ``round_``'s aggregation: deploy :math:`\\theta_r` with its own prototypes
        (the model the statistics were computed under); before any aggregation, the model. One
        message shared by every client."""
        if server.meta.get("aggregated_round") != round_ or "protos" not in server.arrays:
            return self.configure_train(server, round_, clients)
        methods = str(server.meta["methods"]).split(",")
        m = self.deploy_method if self.deploy_method in methods else methods[0]  # e.g. a reduced payload
        means = server.arrays["protos"][methods.index(m)]
        arrays = {MODEL + k: v for k, v in server.with_prefix(_STATS_MODEL).items()}
        arrays.update({"deploy/means": means, "deploy/cov": server.arrays["cov"]})
        return dict.fromkeys(clients, Message(arrays=arrays, kind="deploy"))

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The model (and, while tracking with SDC, its drifting prototype), one message shared by
        every client."""
        tracking = bool(server.meta.get("tracking"))
        extra = {"sdc/prototype": server.arrays["sdc/prototype"]} if tracking and "sdc" in self.payload else {}
        msg = model_message(server, **extra)
        msg.meta = {"tracking": tracking}
        return dict.fromkeys(clients, msg)

    def on_event(self, server: State, event: Event) -> State:
        if event.kind != "leave" or server.meta.get("departed", -1) >= 0 or "last/means" not in server.arrays:
            return server
        meta = dict(server.meta, departed=event.client)
        arrays = dict(server.arrays)
        c = self.rare_class
        means = server.arrays["last/means"]
        held = float(server.meta.get(f"rare_count/{event.client}", 0.0))
        if held <= 0 or not bool(torch.isfinite(means[c]).all()) or "last/cov" not in server.arrays:
            meta["tracking"] = False
            meta["note"] = "the departing client held no rare-class sample (or no statistics): nothing to track"
            return State(arrays=arrays, meta=meta)
        rem = [k for k in range(means.shape[0]) if k != c and bool(torch.isfinite(means[k]).all())]
        snap = take_snapshot(means[c], means[rem], server.arrays["last/cov"], self.tracking)
        arrays.update(snap.to_arrays())
        for name, cfg in self.variants:
            variant = take_snapshot(means[c], means[rem], server.arrays["last/cov"], cfg)
            arrays.update(variant.to_arrays(f"{VARIANT}{name}/"))
        arrays["snap/remaining"] = torch.tensor(rem)
        arrays["sdc/prototype"] = means[c].clone()
        arrays["ldc/prototype"] = means[c].clone()
        meta["tracking"] = True
        meta["departure_round"] = event.round
        return State(arrays=arrays, meta=meta)

    def aggregate(self, server: State, replies, round_: int) -> State:
        """FedAvg's mean of the models, the class statistics under the broadcast model, and every
        prototype method's rare-class prototype (tracked after the departure)."""
        updates = list(replies)
        if not updates:
            return server
        stats_model = {k: v for k, v in server.arrays.items() if k.startswith(MODEL)}
        new = model_average(server, updates)
        arrays, meta = dict(new.arrays), dict(new.meta)
        arrays.update({_STATS_MODEL + k[len(MODEL):]: v for k, v in stats_model.items()})
        meta["aggregated_round"] = round_
        if not self.payload:
            return State(arrays=arrays, meta=meta)
        c = self.rare_class
        total = lambda name: sum(m.arrays[name] for _, m in updates)  # noqa: E731
        counts, sums = total("stats/counts"), total("stats/sums")
        for k, m in updates:
            meta[f"rare_count/{k}"] = float(m.arrays["stats/counts"][c])
        C, d = sums.shape
        means = sums / counts[:, None]
        rem = torch.ones(C, dtype=torch.bool)
        rem[c] = False
        rem &= counts > 0
        cov_t = None
        if "scatter" in self.payload:
            n_rem = float(counts[rem].sum())
            outer = (sums[rem][:, :, None] * sums[rem][:, None, :] / counts[rem][:, None, None]).sum(0)
            cov_t = (total("stats/scatter") - outer) / max(n_rem, 1.0)
            cov_t = 0.5 * (cov_t + cov_t.T)
        last = arrays.get("last/means", torch.full_like(means, float("nan")))
        last = torch.where(torch.isfinite(means), means, last)
        arrays["last/means"] = last
        if cov_t is not None:
            arrays["last/cov"] = cov_t
        methods = str(meta["methods"]).split(",") if meta.get("methods") else []
        rare = {m: means[c].clone() for m in methods}
        if meta.get("tracking"):
            rare, info = self._track(arrays, meta, updates, counts, sums, cov_t, methods, total, round_)
            meta.update(info)
        protos = []
        for m in methods:
            P = last.clone()
            P[c] = rare[m]
            protos.append(P)
        if protos:
            arrays["protos"] = torch.stack(protos)
        if cov_t is not None:
            arrays["cov"] = cov_t
        if "class_grams" in self.payload:
            mom = ClassMoments(counts, sums, total("stats/grams"))
            w, b = stats_model[HEAD + "weight"], stats_model[HEAD + "bias"]
            gen = torch_generator(self.seed, round_, CCVR_VIRTUAL)
            covs = torch.nan_to_num(mom.class_covariances())
            arrays["ccvr/weight"], arrays["ccvr/bias"] = ccvr_calibrate(
                torch.nan_to_num(means), covs, counts, w, b, n_virtual=self.ccvr_virtual, steps=self.ccvr_steps,
                lr=self.ccvr_lr, reg=self.tracking.reg, generator=gen)
        if self.history:
            h = f"hist/{round_:04d}/"
            arrays.update({h + "model/" + k[len(MODEL):]: v for k, v in stats_model.items()})
            for name in ("protos", "cov", "ccvr/weight", "ccvr/bias"):
                if name in arrays:
                    arrays[h + name] = arrays[name]
            arrays[h + "alpha"] = torch.tensor([float(meta.get("alpha", float("nan")))], dtype=torch.float64)
        return State(arrays=arrays, meta=meta)

    def _track(self, arrays, meta, updates, counts, sums, cov_t, methods, total, round_):
        """Reconstruct the rare-class prototype of every method (after the departure)."""
        c = self.rare_class
        snap = Snapshot.from_arrays(arrays)
        rem = arrays["snap/remaining"].tolist()
        M_t = arrays["last/means"][rem]  # current remaining-class prototypes (last known if a class vanished)
        n = float(counts[c])
        rare_mean = sums[c] / n if n > 0 else None
        rare_cov = None
        if "rare_gram" in self.payload and n >= 2:
            G = total("stats/rare_gram")
            rare_cov = (G - n * torch.outer(rare_mean, rare_mean)) / (n - 1)
        out, info = {}, {"rare_remaining": n}
        for m in methods:
            if m == "frozen":
                out[m] = snap.prototype.clone()
            elif m == "icarl":
                out[m] = icarl_prototype(n, sums[c], snap.prototype)
            elif m == "barycentric":
                out[m] = barycentric_prototype(snap, M_t)
            elif m == "stored_residual":
                out[m] = stored_residual_prototype(snap, M_t)
            elif m == "mpt_lite":
                sq = total("stats/sqnorm")
                mask = torch.zeros_like(counts, dtype=torch.bool)
                mask[rem] = True
                mask &= counts > 0
                tr_t = float((sq[mask] - (sums[mask] ** 2).sum(1) / counts[mask]).sum() / counts[mask].sum())
                g = growth_factor(snap.trace_d, tr_t)
                info["growth"] = g
                out[m] = reconstruct_lite(snap, M_t, g)
            elif m in ("mpt", "mpt_predicted", "mpt_measured"):
                forced = {"mpt": None, "mpt_predicted": 0.0, "mpt_measured": 1.0}[m]
                rec = reconstruct_mpt(snap, M_t, cov_t, n, rare_mean, rare_cov, self.tracking, alpha=forced)
                out[m] = rec.prototype
                if m == "mpt":
                    info["alpha"] = rec.alpha
            elif m.startswith(VARIANT):
                cfg = dict(self.variants)[m[len(VARIANT):]]
                snap_v = Snapshot.from_arrays(arrays, prefix=f"{m}/")
                out[m] = reconstruct_mpt(snap_v, M_t, cov_t, n, rare_mean, rare_cov, cfg).prototype
            elif m == "sdc":
                sw = float(sum(float(u.arrays["sdc/sum_w"][0]) for _, u in updates if "sdc/sum_w" in u.arrays))
                swd = sum((u.arrays["sdc/sum_w_delta"] for _, u in updates if "sdc/sum_w" in u.arrays),
                          torch.zeros_like(snap.prototype))
                arrays["sdc/prototype"] = sdc_step(arrays["sdc/prototype"], swd, sw)
                out[m] = arrays["sdc/prototype"].clone()
            elif m == "ldc":
                parts = [(u.arrays["ldc/map"], float(u.arrays["ldc/n"][0])) for _, u in updates if "ldc/map" in u.arrays]
                ntot = sum(w for _, w in parts)
                if ntot > 0:
                    W = sum(Wk * (w / ntot) for Wk, w in parts)
                    arrays["ldc/prototype"] = ldc_step(arrays["ldc/prototype"], W)
                out[m] = arrays["ldc/prototype"].clone()
        return out, info

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
                prev_ok = state.meta.get("prev_round") == ctx.round - 1 and bool(message.meta.get("tracking"))
                if prev_ok:
                    load_model(ctx.model, state, prefix="prev/" + MODEL)
                    z_old = ctx.model.extract(x).to(torch.float64)
                    model = load_model(ctx.model, message)
                    if "sdc" in self.payload:
                        swd, sw = sdc_client_sums(z_old, z, message.arrays["sdc/prototype"], self.sdc_sigma)
                        arrays["sdc/sum_w_delta"], arrays["sdc/sum_w"] = swd, torch.tensor([sw], dtype=torch.float64)
                    if "ldc" in self.payload:
                        W = ldc_fit_map(z_old, z, epochs=self.ldc_epochs, lr=self.ldc_lr, batch_size=self.ldc_batch,
                                        generator=generator)
                        arrays["ldc/map"], arrays["ldc/n"] = W, torch.tensor([float(len(x))], dtype=torch.float64)
                new_state = State(arrays=prefixed("prev/", message.arrays), meta={"prev_round": ctx.round})
                new_state.arrays = {k: v for k, v in new_state.arrays.items() if k.startswith("prev/" + MODEL)}
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


def history_rounds(server: State) -> list[int]:
    """The rounds whose model and prototypes the server kept."""
    return sorted({int(k.split("/")[1]) for k in server.arrays if k.startswith("hist/")})


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
    methods = str(server.meta.get("methods", "")).split(",")
    rounds = history_rounds(server) if rounds is None else list(rounds)
    model = model_fn()
    y = global_test.y
    ynp = global_test.labels_np
    C = int(server.arrays["protos"].shape[1]) if "protos" in server.arrays else int(y.max()) + 1
    rows = []
    for r in rounds:
        h = f"hist/{r:04d}/"
        model.load_state_dict({k[len(h) + 6:]: v for k, v in server.arrays.items() if k.startswith(h + "model/")})
        model.eval()
        z = model.extract(global_test.x).to(torch.float64)
        logits = model.head(z.float())
        conf = Confusion.from_predictions(ynp, logits.argmax(1).numpy(), C)
        rows += [(r, "fedavg", "f1", conf.f1(rare_class)), (r, "fedavg", "accuracy", conf.accuracy())]
        if h + "ccvr/weight" in server.arrays:
            lg = z.float() @ server.arrays[h + "ccvr/weight"].T + server.arrays[h + "ccvr/bias"]
            conf = Confusion.from_predictions(ynp, lg.argmax(1).numpy(), C)
            rows += [(r, "ccvr", "f1", conf.f1(rare_class)), (r, "ccvr", "accuracy", conf.accuracy())]
        if h + "protos" not in server.arrays:
            continue
        protos = server.arrays[h + "protos"]
        oracle = z[y == rare_class].mean(0)
        sets = {m: protos[i] for i, m in enumerate(methods)}
        base = protos[0].clone()
        base[rare_class] = oracle
        sets["oracle"] = base
        cov = server.arrays.get(h + "cov")
        precision = None
        for m, P in sets.items():
            if readout == "mahalanobis" and cov is not None:
                head = MahalanobisNCM(reg).fit(means=P, covariance=cov)
                precision = head.precision_
            else:
                head = NearestClassMean().fit(means=P)
            conf = Confusion.from_predictions(ynp, head.predict(z).numpy(), C)
            rows += [(r, m, "f1", conf.f1(rare_class)), (r, m, "accuracy", conf.accuracy())]
            if precision is not None and bool(torch.isfinite(P[rare_class]).all()):
                rows.append((r, m, "dist_oracle", mahalanobis(P[rare_class], oracle, precision)))
        a = float(server.arrays[h + "alpha"][0])
        if np.isfinite(a):
            rows.append((r, "mpt", "alpha", a))
    frame = pd.DataFrame(rows, columns=["round", "method", "metric", "value"])
    return frame.astype({"round": "int64", "method": str, "metric": str, "value": "float64"})


__all__ = ["METHOD_PAYLOAD", "MPT", "NCMPredictor", "PARTS", "PROTO_METHODS", "VARIANT", "evaluate_history",
           "history_rounds", "method_payload"]
