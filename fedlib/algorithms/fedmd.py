r"""Model-agnostic federated learning through a public set, and FedMD.

Li and Wang, "FedMD: Heterogenous Federated Learning via Model Distillation", arXiv:1910.03581,
Section 2 ("communicate", "aggregate", "digest", "revisit"). FedMD is the simplest member of a
family that the COSMOS chapter compares (COSMOS, FedMD, FedCT, COMET): clients of **any**
architecture never send a parameter; they label a public unlabeled set :math:`U`
(:class:`fedlib.distill.PublicSet`) and learn from labels the server sends back. The family is
written once, in :class:`PublicDistillation`; a method says only how the server groups clients
(:meth:`~PublicDistillation.group`), how a group's labels are combined
(:meth:`~PublicDistillation.consensus`), what the server makes of the consensus
(:meth:`~PublicDistillation.teach`), and, for hard labels, how a client sends and learns them.

A round of every member, client ``i`` (its model lives in its own state, of its own
architecture: :class:`fedlib.models.ClientArchitectures`):

1. *Digest*: if the server sent targets for :math:`U` (``teacher``), distil on them
   (:func:`fedlib.distill.distill`: KL to the targets, plus :math:`\lambda` times the
   consistency regularizer where the method uses one);
2. *Revisit*: train on its labelled data (``pretrain`` the first time it takes part, the
   :math:`E_0` epochs of COSMOS's PTC phase; ``train`` afterwards);
3. *Communicate*: send its pseudo-labels :math:`f_i(U)` at temperature ``temperature``.

The server validates every matrix (:func:`fedlib.distill.check_pseudo_labels`), keeps each
client's latest in its state (:class:`PublicServer`: ``labels``), groups the clients, combines each
group's latest labels and keeps a teacher per group (``teacher``); each client receives its group's
(:meth:`~PublicDistillation.configure_train`). The deployed predictor is the client's own
model. FedMD: one group, the mean (consensus soft labels over all clients). Its paper digests on
logits with an L1 loss and starts from transfer learning on a *labelled* public set; here
:math:`U` is unlabeled and every member digests with the same KL, so that the comparison changes
one thing at a time (the book says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ..distill import (LABEL_RULES, PublicSet, aggregate_labels, check_lam, check_pseudo_labels, check_temperature,
                       distill, pseudo_labels)
from ..messages import Message, State, from_state, to_state
from ..models import reinitialized
from ..protocol import MODEL, Algorithm, Capabilities, ClientContext, Event, Predictor, load_model, model_arrays, update_message
from ..rng import DISTILL_CLIENT_INIT, derive_seed
from ..training import TrainConfig, local_train
from ..validation import is_int


@dataclass
class Grouping:
    """Which group each known client is in (``groups/clients``, ``groups/labels`` once flattened)."""

    clients: torch.Tensor  # int64 (n,), increasing
    labels: torch.Tensor  # int64 (n,)

    @classmethod
    def of(cls, groups: dict[int, int]) -> "Grouping":
        """The grouping of ``groups`` (client -> group)."""
        clients = sorted(groups)
        return cls(torch.tensor(clients, dtype=torch.int64), torch.tensor([groups[k] for k in clients], dtype=torch.int64))

    def as_dict(self) -> dict[int, int]:
        """Client -> group, by increasing client."""
        return dict(zip(self.clients.tolist(), self.labels.tolist()))


@dataclass
class PublicServer:
    """The family's server state (:func:`fedlib.messages.to_state` flattens it)."""

    n_classes: int  # the classes the clients' models predict
    n_public: int  # |U|
    labels: dict[int, torch.Tensor] = field(default_factory=dict)  # each known client's latest pseudo-labels on U
    groups: Grouping | None = None  # None before the first round
    teacher: dict[int, torch.Tensor] = field(default_factory=dict)  # each group's targets on U
    n_groups: int | None = None  # how many groups the last aggregation formed

    def client_groups(self) -> dict[int, int]:
        """Client -> group, by increasing client (empty before the first round)."""
        return {} if self.groups is None else self.groups.as_dict()


def _adam(epochs: int, lr: float) -> TrainConfig:
    return TrainConfig(epochs=epochs, batch_size=32, optimizer="adam", lr=lr)


def client_model(ctx: ClientContext, state: State, seed: int) -> nn.Module:
    """The client's own model in ``ctx.model``: from its state, or, before its first round, drawn
    afresh under ``derive_seed(seed, client, DISTILL_CLIENT_INIT)`` (each client its own)."""
    if state.with_prefix(MODEL):
        return load_model(ctx.model, state)
    fresh = reinitialized(ctx.model, derive_seed(seed, ctx.client, DISTILL_CLIENT_INIT))
    ctx.model.load_state_dict(fresh.state_dict())
    return ctx.model


def grouping(server: State) -> dict[int, int]:
    """The server's current grouping, client -> group (empty before the first round)."""
    return from_state(PublicServer, server).client_groups()


def cached_labels(server: State) -> dict[int, torch.Tensor]:
    """Each client's latest pseudo-labels on the server, by client."""
    return from_state(PublicServer, server).labels


@dataclass
class PublicDistillation(Algorithm):
    """Clients of any architecture exchange pseudo-labels on a public set (module docstring).

    Parameters
    ----------
    public : PublicSet
        :math:`U`; every client and the server read it, nobody sends it.
    pretrain, train, distill : TrainConfig
        A client's first training on its data (:math:`E_0` epochs), its later ones, and its
        distillation on :math:`U` (the paper's Adam, 1e-3 on true labels and 1e-4 on pseudo-labels).
    temperature : float
        :math:`T` of the pseudo-labels sent (0: hard labels).
    lam : float
        :math:`\\lambda`, the client-side consistency weight (0 for FedMD, FedCT and COMET).
    n_augment : int
        Augmentations per public sample in the consistency term.
    detach_target : bool
        The consistency target as a constant (the authors' code) instead of the paper's gradient
        through both sides (:func:`fedlib.distill.consistency_loss`).
    shift, noise : int, float
        The augmentations of the consistency term (:func:`fedlib.distill.augment`): translations
        up to ``shift`` pixels and Gaussian noise of standard deviation ``noise`` (the paper's
        radius :math:`d`, "significantly smaller than the typical norm of :math:`x`").
    seed : int
        The clients' initial weights and the server's randomness derive from it.
    """

    public: PublicSet
    pretrain: TrainConfig = field(default_factory=lambda: _adam(5, 1e-3))
    train: TrainConfig = field(default_factory=lambda: _adam(1, 1e-3))
    distill: TrainConfig = field(default_factory=lambda: _adam(1, 1e-4))
    temperature: float = 1.0
    lam: float = 0.0
    n_augment: int = 1
    detach_target: bool = False
    shift: int = 1
    noise: float = 0.05
    seed: int = 0
    name = "public_distillation"
    capabilities = Capabilities(model_agnostic=True, streams=False, needs_public=True, reply_arrays=("labels",))
    rule = "mean"
    state_type = PublicServer  # the server state's class (COSMOS's adds its server models)

    def __post_init__(self) -> None:
        if not isinstance(self.public, PublicSet):
            raise ValueError(f"{type(self).__name__} needs public=PublicSet(...) (the unlabeled set U), got {type(self.public).__name__}")
        check_temperature(self.temperature)
        check_lam(self.lam)
        if not (is_int(self.n_augment) and self.n_augment >= 1):
            raise ValueError(f"n_augment must be an int >= 1, got {self.n_augment!r}")
        if self.rule not in LABEL_RULES:
            raise ValueError(f"unknown pseudo-label aggregation {self.rule!r}; valid: {', '.join(LABEL_RULES)}")

    # ---- server ----------------------------------------------------------------------------
    def init_server(self, model: torch.nn.Module) -> State:
        """The number of classes, read from one forward pass of the initial model on :math:`U`
        (which also checks that :math:`U`'s inputs fit the clients' models)."""
        with torch.no_grad():
            try:
                n_classes = int(model.eval()(self.public.x[:1]).shape[1])
            except RuntimeError as err:
                raise ValueError(f"the public set's inputs of shape {tuple(self.public.x.shape[1:])} do not fit the "
                                 f"clients' model: {err}") from err
        return to_state(self.state_type(n_classes=n_classes, n_public=len(self.public)))

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """Each client's group's targets on :math:`U`, once it has a group with a teacher; a client
        without one gets no parameters, the round number only (one message shared by all such)."""
        start = Message(meta={"round": int(round_)}, kind="start")
        s = from_state(self.state_type, server)
        groups = s.client_groups()
        out = {}
        for k in clients:
            g = groups.get(k)
            teacher = None if g is None else s.teacher.get(g)
            out[k] = start if teacher is None else Message(arrays={"teacher": teacher}, meta={"round": int(round_), "group": int(g)},
                                                           kind="teacher")
        return out

    def configure_evaluate(self, server: State, round_: int, clients) -> dict[int, Message]:
        """No parameters (every client deploys its own model): the round number, one message shared by all."""
        return dict.fromkeys(clients, Message(meta={"round": int(round_)}, kind="start"))

    def check_reply(self, server: PublicServer, client: int, labels: torch.Tensor) -> torch.Tensor:
        """A client's labels, validated (soft: rows on the simplex)."""
        return check_pseudo_labels(labels, len(self.public), int(server.n_classes), who=f"client {client}'s pseudo-labels")

    def group(self, server: PublicServer, labels: dict[int, torch.Tensor], round_: int) -> dict[int, int]:
        """Every known client's group (client -> group) from the cached ``labels``; ``server`` is the
        new state, still with the previous grouping (a method may record its clustering in it).
        FedMD: one group."""
        return {k: 0 for k in labels}

    def consensus(self, labels: torch.Tensor) -> torch.Tensor:
        """One group's combined labels from its members' of shape ``(m, |U|, C)``."""
        return aggregate_labels(labels.float(), self.rule)

    def teach(self, old: PublicServer, server: PublicServer, g: int, target: torch.Tensor, round_: int) -> torch.Tensor:
        """What group ``g``'s clients will distil on, from its ``target``; ``old`` is the state
        before this aggregation, ``server`` the new one (a method with server models updates it).
        FedMD: the consensus itself."""
        return target

    def aggregate(self, server: State, replies, round_: int) -> State:
        """Cache the round's labels, group every known client, and renew each group's teacher from
        its members' latest labels (under partial participation a member that did not reply this
        round counts with its cached labels, so a teacher always belongs to its group's current
        members, however the groups were renumbered). A round without any labels yet changes nothing."""
        updates = list(replies)  # the grouping reads every client's labels of the round at once
        old = from_state(self.state_type, server)
        fresh = {k: self.check_reply(old, k, m.arrays["labels"]) for k, m in updates}
        labels = {**old.labels, **fresh}
        if not labels:
            return server
        s = from_state(self.state_type, server)  # the new state (containers of its own)
        s.labels, s.teacher = labels, {}
        groups = self.group(s, labels, round_)
        clients = sorted(groups)
        s.groups = Grouping.of(groups)
        live = sorted(set(groups.values()))
        for g in live:
            target = self.consensus(torch.stack([labels[k] for k in clients if groups[k] == g]))
            s.teacher[g] = self.teach(old, s, g, target, round_).detach().clone()
        s.n_groups = len(live)
        return to_state(s)

    def on_event(self, server: State, event: Event) -> State:
        """A client that leaves is forgotten: its cached labels and its place in the grouping go
        (the next aggregation groups the clients that remain); one that joins is grouped once it
        has sent labels."""
        s = from_state(self.state_type, server)
        if event.kind != "leave" or s.groups is None:
            return server
        groups = s.client_groups()
        groups.pop(event.client, None)
        s.groups = Grouping.of(groups)
        s.labels.pop(event.client, None)
        return to_state(s)

    # ---- client ----------------------------------------------------------------------------
    def check_public(self, client: int, data) -> None:
        """A client refuses a public set that holds any of its own samples (train or local test)."""
        shared = self.public.overlap(data.train.x) + self.public.overlap(data.test.x)
        if shared:
            raise ValueError(f"the public set U overlaps client {client}'s data in {shared} samples; valid: a U held out "
                             "from every client (fedlib.distill.make_public_set)")

    def labels_of(self, model: nn.Module) -> torch.Tensor:
        """What the client sends: its pseudo-labels on :math:`U` at ``temperature``, float32 ``(|U|, C)``."""
        return pseudo_labels(model, self.public.x, self.temperature)

    def digest(self, model: nn.Module, teacher: torch.Tensor, n_classes: int, generator: torch.Generator) -> None:
        """Distil on the received targets (Eq. 2 with :math:`w_i(x) = 1`)."""
        check_pseudo_labels(teacher, len(self.public), n_classes, who="the server's targets")
        distill(model, self.public.x, teacher.float(), self.distill, generator, lam=self.lam, n_augment=self.n_augment,
                detach_target=self.detach_target, shift=self.shift, noise=self.noise)

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        first = not state.with_prefix(MODEL)
        if first:
            self.check_public(ctx.client, data)
        model = client_model(ctx, state, self.seed)
        if "teacher" in message.arrays:
            self.digest(model, message.arrays["teacher"], ctx.n_classes, generator)
        loss = local_train(model, data.train.x, data.train.y, self.pretrain if first else self.train, generator)
        reply = update_message({"labels": self.labels_of(model)}, len(data.train),
                               None if math.isnan(loss) else loss, kind="pseudo_labels")
        return State(arrays=model_arrays(model), meta=dict(state.meta)), reply

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        """The client's own model (a client that never trained: its initial weights)."""
        return client_model(ctx, state, self.seed).eval()


@dataclass
class FedMD(PublicDistillation):
    """FedMD: every client distils on the mean of all clients' soft labels, then revisits its data."""

    name = "fedmd"


__all__ = ["FedMD", "Grouping", "PublicDistillation", "PublicServer", "cached_labels", "client_model", "grouping"]
