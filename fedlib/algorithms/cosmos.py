r"""COSMOS: clustered server models trained on pseudo-labels only.

Ge, Yeoh, Zhang and Vorobeychik, "COSMOS: Model-Agnostic Personalized Federated Learning with
Clustered Server Models and Pseudo-Label-Only Communication", arXiv:2605.11165, Section 4. The
client side is the family's (:class:`~fedlib.algorithms.fedmd.PublicDistillation`: digest,
revisit, communicate) with the paper's consistency term on the clients too (Eq. 2, :math:`w_i(x)
= 1`). COSMOS changes the server:

1. **Greedy clustering** (Algorithm 1; :class:`fedlib.clustering.GreedyB0`) of the clients by the
   :math:`\ell_1` distance of their pseudo-labels (:func:`fedlib.distill.l1_distances`), with a
   given threshold ``b0`` or, as the authors' code, the smallest threshold that forms at most
   ``target_clusters`` clusters. Algorithm 1's input is the clients' *hard* label vectors
   (``cluster_on="hard"``, the default: each pseudo-label row one-hot at its argmax, so the
   distance is twice the number of public images two clients label differently);
   ``cluster_on="soft"`` clusters the soft labels themselves. The paper clusters once, on the PTC phase's labels
   (:math:`d^{(1)}`), and keeps :math:`\pi` fixed (``recluster=False``); a client first seen later
   joins the cluster of its nearest clustered client (this project's rule: the paper assumes every
   client takes part in round 1).
2. **Server distillation** (Eq. 1): one server model per cluster, of its own architecture
   (``server_model``: a factory, larger than the clients' by default in the book), trained on
   :math:`U` toward the cluster's aggregated labels :math:`\bar f_k` (``rule``: mean, median, max
   or confidence-weighted) plus :math:`\lambda` times the consistency regularizer, with the
   ``server_train`` optimizer; each round continues from the cluster's previous model. How
   often the trained model's argmax on :math:`U` agrees with its targets' is recorded per round
   and cluster (:class:`ServerFit`, :func:`cosmos_fits`): a server that does not reproduce its
   own targets has not been trained to the objective the analysis assumes.
3. **Back to the clients**: the cluster model's pseudo-labels :math:`h_k(U)` at temperature ``T``
   are its clients' targets for the next round's digest
   (:meth:`~fedlib.algorithms.fedmd.PublicDistillation.configure_train`).

The consistency ball (Section 4.1: :math:`\mathcal{B}(x)` is the inputs within a radius
:math:`d` of a transformed :math:`x`, with :math:`d` "significantly smaller than the typical norm
of :math:`x`"): by default the family's augmentation (``shift`` pixels of translation and
Gaussian ``noise``); with ``radius`` the ball is scaled to the images instead: no translation, and
Gaussian noise whose expected norm is ``radius`` times the mean norm of the public images
(:func:`ball_noise`), on the server and on the clients alike.

Deployment (``deploy_model``): ``"server"`` is the paper's protocol (Appendix C: client ``i`` is
evaluated with :math:`h_{\pi(i)}`, sent as its evaluation message, so the ledger counts it under
``eval:cluster_model``); ``"client"`` is the client's own model :math:`f_i`, as the baselines
deploy. The server's state is typed (:class:`COSMOSServer`): the family's, plus the cluster models,
their common initial weights and each aggregation's :class:`Clustering`.

:class:`LocalOnly` is the comparator of Corollary 5.13 ("personalization risk drops below the risk
from local training alone"): the same clients with the same local training as COSMOS's (``pretrain``
the first round, ``train`` afterwards), and no server feedback at all.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from ..clustering import GreedyB0, check_b0, cluster_diameters
from torch.func import functional_call, vmap

from ..distill import augment, check_lam, consistency_loss, distill, kl_rows, l1_distances, pseudo_labels
from ..messages import Message, State, from_state, prefixed, to_state
from ..protocol import MODEL, ClientContext, Predictor
from ..rng import DISTILL_SERVER, DISTILL_SERVER_INIT, derive_seed, isolated_torch_rng, torch_generator
from ..training import TrainConfig, make_optimizer, minibatches
from ..validation import is_int
from .fedmd import Grouping, PublicDistillation, PublicServer, _adam, client_model

DEPLOYS = ("server", "client")
"""What COSMOS deploys for a client: its cluster's server model (the paper) or its own model."""

CLUSTER_INPUTS = ("hard", "soft")
"""What Algorithm 1 clusters: the clients' hard label vectors (the paper) or their soft labels."""


def hard_labels(labels: torch.Tensor) -> torch.Tensor:
    """Each row of ``labels`` (shape ``(n, C)``) one-hot at its argmax (ties to the lowest class):
    Algorithm 1's hard label vectors.

    Examples
    --------
    >>> hard_labels(torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])).tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    """
    if labels.ndim != 2 or labels.shape[1] < 1:
        raise ValueError(f"labels must have shape (n, C) with C >= 1, got {tuple(labels.shape)}")
    return torch.nn.functional.one_hot(labels.argmax(dim=1), labels.shape[1]).to(labels.dtype)


def ball_noise(x: torch.Tensor, radius: float) -> float:
    r"""The standard deviation of Gaussian noise whose expected norm is ``radius`` times the mean
    norm of the inputs ``x`` (one per row): :math:`\sigma = r\,\overline{\lVert x\rVert} / \sqrt{D}`
    over :math:`D` numbers per input (the noise's norm is about :math:`\sigma\sqrt{D}`).

    Examples
    --------
    >>> round(ball_noise(torch.full((2, 1, 4, 4), 0.5), 0.1), 6)  # norm 2, D = 16: 0.1 * 2 / 4
    0.05
    """
    if isinstance(radius, bool) or not (isinstance(radius, (int, float)) and np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be a finite number > 0 (a share of the inputs' mean norm), got {radius!r}")
    flat = x.reshape(len(x), -1).float()
    return float(radius * flat.norm(dim=1).mean() / np.sqrt(flat.shape[1]))


@dataclass
class Clustering:
    """One aggregation's clustering: round, threshold :math:`B_0`, clusters, largest diameter, seed clients."""

    round: int
    b0: float
    n_clusters: int
    max_diameter: float
    seeds: list[int]


def distill_stacked(models: list[nn.Module], x: torch.Tensor, targets: list[torch.Tensor], cfg: TrainConfig,
                    generators: list[torch.Generator], *, lam: float = 0.0, n_augment: int = 1, detach_target: bool = False,
                    shift: int = 1, noise: float = 0.05) -> None:
    """:func:`fedlib.distill.distill` of several models of one architecture at once, each toward its
    own ``targets`` with its own ``generators`` (its mini-batches and augmentations drawn in the same
    order as :func:`~fedlib.distill.distill` draws them): the models' parameters are stacked and one
    ``vmap`` of ``functional_call`` takes every model's step together, the optimizer acting on the
    stack (Adam and SGD act element by element, so each model's slice follows its own
    trajectory). The models are trained in place; buffers are not supported (COSMOS's server
    models have none).

    Examples
    --------
    >>> torch.manual_seed(0) is not None
    True
    >>> models = [nn.Linear(3, 2) for _ in range(2)]
    >>> x, t = torch.randn(8, 3), [torch.softmax(torch.randn(8, 2), 1) for _ in range(2)]
    >>> distill_stacked(models, x, t, TrainConfig(steps=3, batch_size=4, lr=0.1, optimizer="adam"),
    ...                 [torch.Generator().manual_seed(k) for k in range(2)], lam=1.0)
    >>> models[0].weight.shape
    torch.Size([2, 3])
    """
    lam = check_lam(lam)
    if not (is_int(n_augment) and n_augment >= 1):  # as distill checks it, whether or not lam uses it
        raise ValueError(f"n_augment must be an int >= 1, got {n_augment!r}")
    if not models or len(targets) != len(models) or len(generators) != len(models):
        raise ValueError(f"distill_stacked needs one target and one generator per model, got {len(models)} models, "
                         f"{len(targets)} targets and {len(generators)} generators")
    base = models[0]
    if list(base.named_buffers()):
        raise ValueError("distill_stacked does not support models with buffers")
    names = [n for n, _ in base.named_parameters()]
    stack = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).clone().requires_grad_() for n in names}
    opt = make_optimizer(list(stack.values()), cfg)

    def one(p, xb, tb, xa):
        logits = functional_call(base, p, (xb,))
        per = kl_rows(tb, logits)
        for a in range(xa.shape[0]):
            per = per + lam * consistency_loss(functional_call(base, p, (xa[a],)), logits, detach_target=detach_target)
        return per.mean()

    batched = vmap(one)
    k_aug = n_augment if lam > 0 else 0
    base.train()
    for idxs in zip(*(minibatches(len(x), cfg, g) for g in generators)):
        xb = torch.stack([x[i] for i in idxs])
        tb = torch.stack([t[i] for t, i in zip(targets, idxs)])
        xa = torch.stack([torch.stack([augment(x[i], g, shift=shift, noise=noise) for _ in range(k_aug)]) if k_aug else
                          x[i][None][:0] for i, g in zip(idxs, generators)])
        loss = batched(stack, xb, tb, xa).sum()  # the sum: each model's gradient is its own mean loss's
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        for k, m in enumerate(models):
            for n, p in m.named_parameters():
                p.copy_(stack[n][k])
            m.eval()


@dataclass
class ServerFit:
    """How well one cluster model reproduces its targets after a round's distillation: the share
    of public images whose argmax agrees with the target's."""

    round: int
    cluster: int
    agreement: float


@dataclass
class COSMOSServer(PublicServer):
    """COSMOS's server state: the family's (:class:`~fedlib.algorithms.fedmd.PublicServer`) and its own."""

    server_init: dict[str, torch.Tensor] = field(default_factory=dict)  # the cluster models' common initial weights
    server: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # the cluster models, by cluster
    b0: float | None = None
    seeds: list[int] = field(default_factory=list)
    history: list[Clustering] = field(default_factory=list)
    fits: list[ServerFit] = field(default_factory=list)


@dataclass
class COSMOS(PublicDistillation):
    """Greedy pseudo-label clusters, one server model distilled per cluster, its labels sent back."""

    server_model: Callable[[], nn.Module] | None = None
    server_train: TrainConfig = field(default_factory=lambda: _adam(5, 1e-4))
    b0: float | None = None
    target_clusters: int | None = 5
    recluster: bool = False
    rule: str = "mean"
    lam: float = 5.0
    deploy_model: str = "server"
    cluster_on: str = "hard"
    radius: float | None = None
    name = "cosmos"
    state_type = COSMOSServer

    def __post_init__(self) -> None:
        super().__post_init__()
        if not callable(self.server_model):
            raise ValueError("COSMOS needs server_model: a factory of the server's architecture "
                             "(e.g. functools.partial(build_model, 'cnn', ...))")
        if self.b0 is None and self.target_clusters is None:
            raise ValueError("COSMOS needs b0 (the threshold B0) or target_clusters (raise B0 until that many form)")
        if self.b0 is not None:
            check_b0(self.b0)
        if self.target_clusters is not None and not (is_int(self.target_clusters) and self.target_clusters >= 1):
            raise ValueError(f"target_clusters must be None or an int >= 1, got {self.target_clusters!r}")
        if self.deploy_model not in DEPLOYS:
            raise ValueError(f"unknown deploy_model {self.deploy_model!r}; valid: {', '.join(DEPLOYS)}")
        if self.cluster_on not in CLUSTER_INPUTS:
            raise ValueError(f"unknown cluster_on {self.cluster_on!r}; valid: {', '.join(CLUSTER_INPUTS)}")
        if self.radius is not None:  # the ball scaled to the images: noise only, its norm radius x the mean norm
            scaled = ball_noise(self.public.x, self.radius)
            family = {f.name: f.default for f in dataclasses.fields(PublicDistillation) if f.name in ("shift", "noise")}
            # the family's defaults, or what radius itself set (dataclasses.replace of a COSMOS with radius)
            if (self.shift, self.noise) not in ((family["shift"], family["noise"]), (0, scaled)):
                raise ValueError(f"radius sets the ball (shift 0, noise {scaled:.4g}); give radius or shift/noise, not "
                                 f"both: got radius={self.radius!r}, shift={self.shift!r}, noise={self.noise!r}")
            self.shift, self.noise = 0, scaled

    def _server_module(self) -> nn.Module:
        """The server architecture, built under the run's ``DISTILL_SERVER_INIT`` stream (its initial weights)."""
        with isolated_torch_rng(derive_seed(self.seed, DISTILL_SERVER_INIT)):
            return self.server_model()

    def init_server(self, model: nn.Module) -> State:
        s = from_state(COSMOSServer, super().init_server(model))
        template = self._server_module()
        with torch.no_grad():
            out = template.eval()(self.public.x[:1]).shape[1]
        if out != s.n_classes:
            raise ValueError(f"the server model predicts {out} classes, the clients' {s.n_classes}")
        s.server_init = prefixed("", template.state_dict())
        return to_state(s)

    def group(self, server: COSMOSServer, labels: dict[int, torch.Tensor], round_: int) -> dict[int, int]:
        """Algorithm 1 on the first round's labels (or every round's, with ``recluster``); a
        client not yet clustered joins its nearest clustered client's cluster. The threshold, the
        seeds and the round's :class:`Clustering` are recorded in ``server``."""
        old = server.client_groups()
        clients = sorted(labels)
        vectors = [labels[k].float() for k in clients]
        d = l1_distances(torch.stack([hard_labels(v) for v in vectors] if self.cluster_on == "hard" else vectors))
        if old and not self.recluster:
            groups = dict(old)
            known = [i for i, k in enumerate(clients) if k in old]
            for i, k in enumerate(clients):
                if k not in groups:
                    groups[k] = old[clients[min(known, key=lambda j: (d[i, j], j))]]
        else:
            fit = GreedyB0(b0=self.b0, target=self.target_clusters).fit(d)
            groups = {k: int(g) for k, g in zip(clients, fit.labels_)}
            server.b0, server.seeds = float(fit.b0_), [clients[s] for s in fit.seeds_]
        lab = np.array([groups[k] for k in clients])
        server.history.append(Clustering(int(round_), server.b0, len(set(lab.tolist())),
                                         float(cluster_diameters(d, lab).max()), list(server.seeds)))
        return groups

    def _start(self, old: COSMOSServer, server: COSMOSServer, g: int) -> nn.Module:
        """Cluster ``g``'s model before this round's distillation: its previous weights (the common
        initial ones when it is new; after a re-clustering, those of its seed client's previous cluster)."""
        model = self._server_module()
        if self.recluster:
            seed, groups = server.seeds[g] if g < len(server.seeds) else None, old.client_groups()
            prev = old.server.get(groups[seed], {}) if seed in groups else {}
        else:
            prev = old.server.get(g, {})
        model.load_state_dict(prev or old.server_init)
        return model

    def _finish(self, server: COSMOSServer, g: int, model: nn.Module, target: torch.Tensor, round_: int) -> torch.Tensor:
        """Record cluster ``g``'s trained model and its fit; its pseudo-labels at temperature ``T``."""
        server.server[g] = prefixed("", model.state_dict())
        out = pseudo_labels(model, self.public.x, self.temperature)
        agree = (pseudo_labels(model, self.public.x, 1.0).argmax(dim=1) == target.argmax(dim=1)).float().mean()
        server.fits.append(ServerFit(int(round_), int(g), float(agree)))
        return out

    def teach(self, old: COSMOSServer, server: COSMOSServer, g: int, target: torch.Tensor, round_: int) -> torch.Tensor:
        """Eq. (1): cluster ``g``'s model, continued from its previous weights (the common initial
        ones when it is new; after a re-clustering, those of its seed client's previous cluster),
        distilled on :math:`U` toward ``target``; returns its pseudo-labels at temperature ``T``.
        The aggregation distils every cluster at once (:meth:`aggregate`, :func:`distill_stacked`),
        with the same random streams; this is one cluster's, the reference it is tested against."""
        model = self._start(old, server, g)
        gen = torch_generator(self.seed, round_, g, DISTILL_SERVER)
        distill(model, self.public.x, target.float(), self.server_train, gen, lam=self.lam, n_augment=self.n_augment,
                detach_target=self.detach_target, shift=self.shift, noise=self.noise)
        return self._finish(server, g, model, target, round_)

    def aggregate(self, server: State, replies, round_: int) -> State:
        """The family's aggregation (:meth:`fedlib.algorithms.fedmd.PublicDistillation.aggregate`:
        cache the labels, group, one target per group), with every cluster's server model distilled
        at once (:func:`distill_stacked`, each with its own random stream, as :meth:`teach` would);
        the models of clusters that no longer exist are dropped."""
        updates = list(replies)
        old = from_state(COSMOSServer, server)
        fresh = {k: self.check_reply(old, k, m.arrays["labels"]) for k, m in updates}
        labels = {**old.labels, **fresh}
        if not labels:
            return server
        s = from_state(COSMOSServer, server)
        s.labels, s.teacher = labels, {}
        groups = self.group(s, labels, round_)
        clients = sorted(groups)
        s.groups = Grouping.of(groups)
        live = sorted(set(groups.values()))
        targets = {g: self.consensus(torch.stack([labels[k] for k in clients if groups[k] == g])) for g in live}
        models = {g: self._start(old, s, g) for g in live}
        distill_stacked([models[g] for g in live], self.public.x, [targets[g].float() for g in live], self.server_train,
                        [torch_generator(self.seed, round_, g, DISTILL_SERVER) for g in live], lam=self.lam,
                        n_augment=self.n_augment, detach_target=self.detach_target, shift=self.shift, noise=self.noise)
        for g in live:
            s.teacher[g] = self._finish(s, g, models[g], targets[g], round_).detach().clone()
        s.n_groups = len(live)
        s.server = {g: m for g, m in s.server.items() if g in set(live)}
        return to_state(s)

    # ---- evaluation ------------------------------------------------------------------------
    def configure_evaluate(self, server: State, round_: int, clients) -> dict[int, Message]:
        """``deploy_model="server"``: each client's cluster model (its parameters: evaluation
        traffic, recorded as ``eval:cluster_model``); otherwise the family's message. A client no
        cluster holds yet gets the lowest-numbered cluster's (the first formed, the largest)."""
        shared = super().configure_evaluate(server, round_, clients)
        s = from_state(COSMOSServer, server)
        groups = s.client_groups()
        if self.deploy_model != "server" or not groups:
            return shared
        out = {}
        for k in clients:
            g = groups.get(k, min(groups.values()))
            out[k] = Message(arrays=prefixed(MODEL, s.server[g]), meta={"group": int(g)}, kind="cluster_model")
        return out

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        """The cluster model of the evaluation message, or the client's own model."""
        if message.with_prefix(MODEL):
            model = self._server_module()
            model.load_state_dict(message.with_prefix(MODEL))
            return model.eval()
        return client_model(ctx, state, self.seed).eval()


@dataclass
class LocalOnly(PublicDistillation):
    """Local training alone: each client trains on its own data only, as COSMOS's clients do
    (``pretrain`` epochs the first time, ``train`` epochs every later round), and never receives a
    target (no digest, no consistency term); it deploys its own model. The server keeps the
    family's record of the labels it is sent, and sends nothing back."""

    name = "local_only"

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The round number only, one message shared by every client: never a teacher."""
        return dict.fromkeys(clients, Message(meta={"round": int(round_)}, kind="start"))


def cosmos_history(server: State) -> list[dict]:
    """Each aggregation's clustering: round, threshold :math:`B_0`, clusters, largest diameter,
    seeds (:class:`Clustering` as a dict)."""
    return [asdict(c) for c in from_state(COSMOSServer, server).history]


def cosmos_fits(server: State) -> list[dict]:
    """Each round's and cluster's :class:`ServerFit` as a dict: how often the cluster model's
    argmax on :math:`U` agrees with its targets' after that round's distillation."""
    return [asdict(f) for f in from_state(COSMOSServer, server).fits]


__all__ = ["distill_stacked", "CLUSTER_INPUTS", "COSMOS", "COSMOSServer", "Clustering", "DEPLOYS", "LocalOnly", "ServerFit", "ball_noise",
           "cosmos_fits", "cosmos_history", "hard_labels"]
