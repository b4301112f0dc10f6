"""GGEUR as a plug-in of the one round loop, composed with any base algorithm; and two
augmentation baselines in the style of FedMix and FedFA.

GGEUR: Dai, Huang, Chen et al., "Geometric Knowledge-Guided Localized Global Distribution
Alignment for Federated Learning", CVPR 2025 (arXiv:2503.06457), Section 3.2, Algorithms 1-2.
The maths lives in :mod:`fedlib.geometry`; this module only routes it through the hooks.

Every method here is a *statistics-first* wrapper around a base algorithm (FedAvg, FedProx,
FedProto, ...), and changes nothing but its hooks:

=========  ==========================================================================================
round 1    the statistics round: the broadcast asks for statistics; each client replies with a
           summary of its embeddings (GGEUR and FedFA-style: ``ClassMoments`` (``fedlib.stats``),
           i.e. per-class counts, sums and Gram matrices, from which the server gets the local means
           and covariances of Eq. 4; FedMix-style: means of random batches); the server turns them
           into *knowledge* (GGEUR: the global geometric shapes and the clients' class prototypes).
           No training happens in this round.
round 2    the broadcast carries the base's message plus the knowledge (sent once); each client
           builds its augmented embedding set once and keeps it in its own state (it never leaves
           the client), then runs the base's ``local_update`` on it.
round 3+   the base algorithm, unchanged, on the cached augmented set.
=========  ==========================================================================================

So a run with ``rounds = R + 1`` has R training rounds. The statistics round needs every client:
run it with full participation (a client without knowledge raises a clear error).

Baselines (our implementations on embeddings, not the original code):

- :class:`FedMixStyle` - the NaiveMix form of FedMix (Yoon et al., ICLR 2021, arXiv:2107.00233):
  clients share means of random batches of ``mix_batch`` embeddings and their mean one-hot
  labels; locally every mini-batch is mixed, :math:`\\tilde x = (1-\\lambda)x + \\lambda\\bar x_j`,
  with the soft target :math:`(1-\\lambda)e_y + \\lambda\\bar y_j`.
- :class:`Rebalanced` - a control, not a method of the literature: every held class is filled up
  to ``total_per_class`` with copies of the client's *own* samples (resampling with replacement),
  so the local set has exactly GGEUR's size and class balance, and nothing generated or shared.
  It separates GGEUR's class rebalancing (and its extra local steps) from its new samples.
- :class:`FedFAStyle` - "Gaussian feature augmentation around class prototypes", as the GGEUR paper
  describes FedFA (Zhou and Konukoglu, ICLR 2023, arXiv:2301.12995): every held class is filled up
  to ``total_per_class`` with samples from :math:`\\mathcal N(\\mu_c, \\mathrm{diag}\\,\\sigma_c^2)`, the
  global class prototype and the global per-dimension variances, i.e. a Gaussian without the
  cross-dimension geometry that GGEUR uses. (The original FedFA perturbs feature-map statistics
  inside the network; this is the simpler reading the GGEUR paper compares with.)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..data import ArrayDataset
from ..federation import ClientData
from ..geometry import FORMULAS, GeometricShapes, augment_around_prototypes, class_shapes, fill_to_total
from ..messages import Message, State
from ..models import PENULTIMATE, FeatureModel, build_model
from ..stats import ClassMoments
from ..training import LocalProgram, SequentialWork, TrainConfig, local_train
from ..protocol import (Algorithm, Capabilities, ClientContext, LocalWork, Predictor, ProgramMethod, load_model, map_messages,
                        model_arrays, update_message)
from .fedavg import FedAvg

KNOW = "know/"
"""Prefix of the knowledge arrays in the server state and in the round-2 broadcast."""
CACHE = "aug/"
"""Prefix of the augmented set in a client's own state (never sent)."""
REQUEST = "statistics_request"

__all__ = ["LinearClassifier", "classifier_fn", "GGEUR", "FedFAStyle", "FedMixStyle", "Rebalanced", "StatisticsFirst",
           "filled_size", "augmented_size", "matched_train"]


class LinearClassifier(FeatureModel):
    """A single linear layer on embeddings (the authors' code's classifier); ``penultimate`` is the input.

    >>> LinearClassifier(8, 3)(torch.zeros(5, 8)).shape
    torch.Size([5, 3])
    """

    def __init__(self, in_features: int, n_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(in_features, n_classes)
        self.n_classes = n_classes
        self.feature_layers = (PENULTIMATE,)
        self.feature_dims = {PENULTIMATE: in_features}

    def _forward_layers(self, x: Tensor, layers: frozenset[str]) -> tuple[Tensor, dict[str, Tensor]]:
        return x.flatten(1), {}


CLASSIFIERS = ("linear", "mlp")


def classifier_fn(kind: str, dim: int, n_classes: int, hidden: int = 128):
    """A ``model_fn`` for :func:`fedlib.run.run_federated`: ``"linear"`` (:class:`LinearClassifier`)
    or ``"mlp"`` (``build_model("mlp", ...)`` with one hidden layer of ``hidden`` units)."""
    if kind not in CLASSIFIERS:
        raise ValueError(f"unknown classifier {kind!r}; valid: {', '.join(CLASSIFIERS)}")
    if kind == "linear":
        return lambda: LinearClassifier(dim, n_classes)
    return lambda: build_model("mlp", in_channels=dim, input_size=1, n_classes=n_classes, hidden=(hidden,))


@dataclass
class StatisticsFirst(ProgramMethod):
    """The statistics and knowledge rounds around a base algorithm: round 1 exchanges statistics,
    round 2 knowledge, from then on the base trains (see the module's table). A subclass says
    what clients send (``client_statistics``), what the server makes of it
    (``server_knowledge``), what a client caches (:meth:`prepare`) and how it trains on the
    cache (:meth:`train_work`: by default the base's own work on the augmented set, which stacks
    with other clients' where the base's work is a :class:`~fedlib.training.LocalProgram`; around a
    base without programs every client trains alone)."""

    base: Algorithm = field(default_factory=FedAvg)
    suffix = "statistics"
    capabilities = Capabilities(stacks=True, streams=False, reply_arrays=("stats/",))  # round 1 reads every client's statistics at once

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.base.name}+{self.suffix}"

    # --- what a subclass defines --------------------------------------------------------
    def client_statistics(self, ctx: ClientContext, train: ArrayDataset, generator: torch.Generator) -> dict[str, Tensor]:
        raise NotImplementedError

    def server_knowledge(self, updates: list[tuple[int, Message]]) -> dict[str, Tensor]:
        raise NotImplementedError

    def prepare(self, ctx: ClientContext, train: ArrayDataset, knowledge: dict[str, Tensor], generator) -> dict[str, Tensor]:
        """The client's cached arrays (default: an augmented set ``x``, ``y``)."""
        raise NotImplementedError

    def train_work(self, ctx: ClientContext, state: State, message: Message, data: ClientData,
                   cache: dict[str, Tensor]) -> LocalWork:
        """The local training of a round after the knowledge round, given the cache: the base's
        local work on the augmented set (its program, or its ``local_update``)."""
        augmented = self._augmented(data, cache)
        if isinstance(self.base, ProgramMethod):
            return self.base.program(ctx, state, message, augmented)
        return SequentialWork(lambda model, generator: self.base.local_update(ctx, state, message, augmented, generator))

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalWork:
        """This round's work: the statistics, the cache and the first training, or :meth:`train_work` on the cache."""
        return self._work(ctx, state, message, data)

    # --- hooks ----------------------------------------------------------------------------
    def init_server(self, model: nn.Module) -> State:
        return self.base.init_server(model)

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """Round 1: the base's messages as statistics requests (the model rides along: it costs one
        model copy); round 2: the base's messages plus the knowledge (sent once); later: the base's."""
        down = self.base.configure_train(server, round_, clients)
        if round_ == 1:
            return map_messages(down, lambda m: Message(arrays=m.arrays, meta=m.meta, kind=REQUEST))
        if round_ == 2:
            know = {k: v for k, v in server.arrays.items() if k.startswith(KNOW)}
            return map_messages(down, lambda m: Message(arrays={**m.arrays, **know}, meta=m.meta, kind=f"{m.kind}+knowledge"))
        return down

    def configure_evaluate(self, server: State, round_: int, clients) -> dict[int, Message]:
        """Evaluation is the base's, in every round: no statistics request, no knowledge."""
        return self.base.configure_evaluate(server, round_, clients)

    @staticmethod
    def _without_knowledge(message: Message) -> Message:
        """``message`` without the server's knowledge arrays: what the base method receives."""
        return Message({k: v for k, v in message.arrays.items() if not k.startswith(KNOW)}, dict(message.meta), message.kind)

    @staticmethod
    def _augmented(data: ClientData, cache: dict[str, Tensor]) -> ClientData:
        """The client's data with its cached augmented set as the training split."""
        aug = ArrayDataset(cache["x"], cache["y"].long(), data.train.n_classes, data.train.name + "+aug")
        return dataclasses.replace(data, train=aug)  # the local test split and the pool stay

    @staticmethod
    def _split(state: State) -> tuple[State, dict[str, Tensor]]:
        cache = state.with_prefix(CACHE)
        rest = State({k: v for k, v in state.arrays.items() if not k.startswith(CACHE)}, dict(state.meta))
        return rest, cache

    @staticmethod
    def _keeping(cache: dict[str, Tensor], work: LocalWork) -> LocalWork:
        """``work`` whose new state also holds the cache (which never leaves the client)."""
        def keep(result):
            if isinstance(result, LocalProgram):  # the work continues (Ditto's second program): keep the cache at its end
                return StatisticsFirst._keeping(cache, result)
            new_state, reply = result
            return State({**new_state.arrays, **{CACHE + k: v for k, v in cache.items()}}, dict(new_state.meta)), reply

        if isinstance(work, LocalProgram):
            finish = work.finish
            return dataclasses.replace(work, finish=lambda model, loss: keep(finish(model, loss)))
        return SequentialWork(lambda model, generator: keep(work.run(model, generator)))

    def _work(self, ctx: ClientContext, state: State, message: Message, data) -> LocalWork:
        """This round's local work: the statistics (round 1), the cache and the first training
        (round 2: both draw from the generator, so they run sequentially), then
        :meth:`train_work` on the cache."""
        if message.kind == REQUEST:
            return SequentialWork(lambda model, generator: (
                state, update_message(self.client_statistics(ctx, data.train, generator), len(data.train), kind="statistics")))
        base_state, cache = self._split(state)
        base_msg = self._without_knowledge(message)
        if cache:
            return self._keeping(cache, self.train_work(ctx, base_state, base_msg, data, cache))
        knowledge = message.with_prefix(KNOW)

        def first(model, generator):
            if not knowledge:
                raise ValueError(
                    f"client {ctx.client} has no augmented set and round {ctx.round}'s message carries no knowledge; "
                    "the statistics round (1) and the knowledge round (2) need full participation (LoopConfig(participation=1.0))"
                )
            new_cache = self.prepare(ctx, data.train, knowledge, generator)
            return self._keeping(new_cache, self.train_work(ctx, base_state, base_msg, data, new_cache)).run(model, generator)

        return SequentialWork(first)

    def aggregate(self, server: State, replies, round_: int) -> State:
        """The knowledge from the statistics round (every client's statistics at once); the base's
        aggregation afterwards."""
        updates = list(replies)
        if updates and all(m.kind == "statistics" for _, m in updates):
            know = self.server_knowledge(updates)
            return State({**server.arrays, **{KNOW + k: v for k, v in know.items()}}, dict(server.meta))
        return self.base.aggregate(server, updates, round_)

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        base_state, _ = self._split(state)
        base_msg = self._without_knowledge(message)
        return self.base.deploy(ctx, base_state, base_msg, data, generator)

    def on_event(self, server, event):
        return self.base.on_event(server, event)


def _moments_of(updates: list[tuple[int, Message]]) -> tuple[list[int], list[ClassMoments]]:
    return [k for k, _ in updates], [ClassMoments.from_message(m) for _, m in updates]


@dataclass
class GGEUR(StatisticsFirst):
    """GGEUR around a base algorithm (Algorithms 1 and 2).

    Parameters
    ----------
    base : the federated algorithm that trains the classifier (FedAvg, FedProx, FedProto, ...)
    total_per_class : step 1 fills every class a client holds up to this many samples
    formula : ``"code"`` (N(x, Sigma), the authors' code) or ``"paper"`` (eigenvalue scaling, the text)
    cross_domain : also run step 2 (samples around the other clients' class prototypes; one client
        per domain, as in the paper's multi-domain setting)
    per_prototype : step 2 samples per other-domain prototype
    min_samples, fallback, ridge : passed to :func:`fedlib.geometry.class_shapes`
    """

    total_per_class: int = 500
    formula: str = "code"
    cross_domain: bool = False
    per_prototype: int = 500
    min_samples: int = 2
    fallback: str = "pooled"
    ridge: float = 0.0

    def __post_init__(self) -> None:
        if self.formula not in FORMULAS:
            raise ValueError(f"unknown formula {self.formula!r}; valid: {', '.join(FORMULAS)}")
        for name in ("total_per_class", "per_prototype"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")

    @property
    def suffix(self) -> str:  # type: ignore[override]
        return f"ggeur[{self.formula}{',step2' if self.cross_domain else ''}]"

    def client_statistics(self, ctx, train, generator):
        return ClassMoments.from_features(train.x, train.y, ctx.n_classes).to_message().arrays

    def server_knowledge(self, updates):
        ids, parts = _moments_of(updates)
        shapes = class_shapes(ClassMoments.sum(parts), min_samples=self.min_samples, fallback=self.fallback, ridge=self.ridge)
        know = shapes.to_arrays()
        know["fallback"] = know["fallback"].to(torch.float32)
        if self.cross_domain:  # the clients' class prototypes (local means), indexed by client id
            K = max(ids) + 1
            protos = torch.zeros(K, shapes.n_classes, shapes.dim, dtype=torch.float64)
            present = torch.zeros(K, shapes.n_classes, dtype=torch.float32)
            for k, m in zip(ids, parts):
                obs = m.observed
                protos[k, obs] = m.means()[obs]
                present[k] = obs.to(torch.float32)
            know["protos"], know["present"] = protos, present
        return know

    def prepare(self, ctx, train, knowledge, generator):
        shapes = GeometricShapes.from_arrays(knowledge)
        x, y = fill_to_total(train.x, train.y, shapes, self.total_per_class, formula=self.formula, generator=generator)
        if self.cross_domain:
            others = [k for k in range(knowledge["protos"].shape[0]) if k != ctx.client]
            xp, yp = augment_around_prototypes(knowledge["protos"][others], knowledge["present"][others].bool(), shapes,
                                               self.per_prototype, formula=self.formula, generator=generator)
            x, y = torch.cat([x, xp.to(x.dtype)]), torch.cat([y, yp])
        return {"x": x.float(), "y": y}


@dataclass
class FedFAStyle(StatisticsFirst):
    """Fill every held class to ``total_per_class`` with N(global prototype, diagonal global variance)."""

    total_per_class: int = 500
    suffix = "fedfa_style"

    def client_statistics(self, ctx, train, generator):
        return ClassMoments.from_features(train.x, train.y, ctx.n_classes).to_message().arrays

    def server_knowledge(self, updates):
        _, parts = _moments_of(updates)
        m = ClassMoments.sum(parts)
        obs = m.observed
        mu = torch.where(obs[:, None], m.means(), torch.zeros_like(m.sums))
        var = torch.diagonal(torch.where(obs[:, None, None], m.class_covariances(), torch.zeros_like(m.grams)), dim1=-2, dim2=-1)
        return {"means": mu, "variances": var.clamp(min=0), "counts": m.counts}

    def prepare(self, ctx, train, knowledge, generator):
        xs, ys = [train.x.float()], [train.y.long()]
        for c in torch.unique(train.y).tolist():
            need = self.total_per_class - int((train.y == c).sum())
            if need <= 0:
                continue
            eps = torch.randn(need, train.x.shape[1], generator=generator, dtype=torch.float64)
            xs.append((knowledge["means"][c] + eps * knowledge["variances"][c].sqrt()).float())
            ys.append(torch.full((need,), c, dtype=torch.long))
        return {"x": torch.cat(xs), "y": torch.cat(ys)}


@dataclass
class FedMixStyle(StatisticsFirst):
    """NaiveMix with globally shared averaged batches; composes with FedAvg only (its own local
    loss, so its clients always train one after another)."""

    train: TrainConfig = field(default_factory=TrainConfig)
    mix_batch: int = 10
    lam: float = 0.1
    suffix = "fedmix_style"
    capabilities = Capabilities(streams=False, reply_arrays=("xbar", "ybar"))  # every round's work mixes batches with the generator inside its loss

    def __post_init__(self) -> None:
        if not 0.0 <= self.lam < 1.0:
            raise ValueError(f"lam must be in [0, 1), got {self.lam}")
        if isinstance(self.mix_batch, bool) or not isinstance(self.mix_batch, int) or self.mix_batch < 1:
            raise ValueError(f"mix_batch must be an int >= 1, got {self.mix_batch!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return "fedmix_style"

    def client_statistics(self, ctx, train, generator):
        perm = torch.randperm(len(train), generator=generator)
        onehot = F.one_hot(train.y.long(), ctx.n_classes).to(torch.float32)
        groups = [perm[i : i + self.mix_batch] for i in range(0, len(perm), self.mix_batch)]
        groups = [g for g in groups if len(g) == self.mix_batch] or [perm]
        return {"xbar": torch.stack([train.x[g].mean(0) for g in groups]).float(),
                "ybar": torch.stack([onehot[g].mean(0) for g in groups])}

    def server_knowledge(self, updates):
        return {"xbar": torch.cat([m.arrays["xbar"] for _, m in updates]),
                "ybar": torch.cat([m.arrays["ybar"] for _, m in updates])}

    def prepare(self, ctx, train, knowledge, generator):
        return {"xbar": knowledge["xbar"], "ybar": knowledge["ybar"]}

    def train_work(self, ctx, state, message, data, cache) -> SequentialWork:
        """Local SGD on mixed batches against the mixed soft targets."""
        return SequentialWork(lambda model, generator: self._mix(ctx, state, message, data, cache, generator))

    def _mix(self, ctx, state, message, data, cache, generator):
        model = load_model(ctx.model, message)
        xbar, ybar, lam, C = cache["xbar"], cache["ybar"], self.lam, ctx.n_classes

        def loss_fn(m, x, y):
            j = torch.randint(len(xbar), (len(x),), generator=generator)
            xm = (1 - lam) * x + lam * xbar[j]
            target = (1 - lam) * F.one_hot(y, C).to(x.dtype) + lam * ybar[j]
            return -(target * F.log_softmax(m(xm), dim=1)).sum(1).mean()

        loss = local_train(model, data.train.x, data.train.y, self.train, generator, loss_fn=loss_fn)
        return state, update_message(model_arrays(model), len(data.train), loss)


@dataclass
class Rebalanced(StatisticsFirst):
    """Control: fill every held class to ``total_per_class`` by resampling the client's real samples.

    The local set has GGEUR's step-1 size and class counts exactly (so the same optimizer steps per
    epoch), but holds only copies of real samples: no statistics beyond the counts leave the client
    and nothing is generated. The statistics round is kept (it exchanges only the class counts) so
    that the rounds line up with GGEUR's.

    >>> import torch
    >>> from fedlib.algorithms.ggeur import Rebalanced
    >>> x, y = torch.arange(6.0).reshape(3, 2), torch.tensor([0, 0, 1])
    >>> rb = Rebalanced(total_per_class=4)
    >>> out = rb.prepare(None, ArrayDataset(x, y, 3, "toy"), {}, torch.Generator().manual_seed(0))
    >>> torch.bincount(out["y"]).tolist(), bool((out["x"][out["y"] == 1] == x[2]).all())
    ([4, 4], True)
    """

    total_per_class: int = 500
    capabilities = dataclasses.replace(StatisticsFirst.capabilities, reply_arrays=("counts",))  # the statistics round's counts
    suffix = "rebalanced"

    def __post_init__(self) -> None:
        v = self.total_per_class
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"total_per_class must be an int >= 0, got {v!r}")

    def client_statistics(self, ctx, train, generator):
        return {"counts": torch.bincount(train.y.long(), minlength=ctx.n_classes).to(torch.float64)}

    def server_knowledge(self, updates):
        return {"counts": torch.stack([m.arrays["counts"] for _, m in updates]).sum(0)}

    def prepare(self, ctx, train, knowledge, generator):
        xs, ys = [train.x.float()], [train.y.long()]
        for c in torch.unique(train.y).tolist():
            idx = torch.nonzero(train.y == c).flatten()
            need = self.total_per_class - len(idx)
            if need <= 0:
                continue
            pick = idx[torch.randint(len(idx), (need,), generator=generator)]
            xs.append(train.x[pick].float())
            ys.append(torch.full((need,), c, dtype=torch.long))
        return {"x": torch.cat(xs), "y": torch.cat(ys)}


# --------------------------------------------------------------------------- matched-steps controls
def filled_size(y, n_classes: int, total: int) -> int:
    """The size of a client's set after GGEUR's step 1: every class it holds filled to ``total``
    (a class already larger keeps its size; an absent class stays absent).

    >>> filled_size([0, 0, 1], n_classes=3, total=5)
    10
    """
    counts = torch.bincount(torch.as_tensor(y, dtype=torch.int64), minlength=n_classes)
    return int(torch.where(counts > 0, counts.clamp(min=total), torch.zeros_like(counts)).sum())


def augmented_size(fed, k: int, total: int, per_prototype: int) -> int:
    """Client ``k``'s set size after GGEUR's steps 1 and 2: its filled classes plus ``per_prototype``
    samples around every other client's class prototypes (one prototype per class a client holds).

    >>> from fedlib.data import ArrayDataset
    >>> from fedlib.federation import ClientData, Federation
    >>> mk = lambda ys: ArrayDataset(torch.zeros(len(ys), 2), torch.tensor(ys), 3, "toy")
    >>> fed = Federation([ClientData(mk([0, 0]), mk([0])), ClientData(mk([1, 2]), mk([1]))], mk([0, 1, 2]), 3, {})
    >>> augmented_size(fed, 0, total=4, per_prototype=3)  # 4 (class 0 filled) + 3 x 2 prototypes
    10
    """
    own = filled_size(fed.clients[k].train.y, fed.n_classes, total)
    held = [int((torch.bincount(c.train.y, minlength=fed.n_classes) > 0).sum()) for c in fed.clients]
    return own + per_prototype * (sum(held) - held[k])


def matched_train(sizes, batch_size: int, local_epochs: int, lr: float, optimizer: str = "adam") -> TrainConfig:
    """A local-training budget of as many steps per round as GGEUR's clients take on average:
    ``ceil(mean(sizes) / batch_size)`` batches per epoch, ``local_epochs`` epochs (the book's
    matched-steps controls).

    >>> matched_train([100, 60], batch_size=32, local_epochs=2, lr=0.01).steps
    6
    """
    steps = int(math.ceil(float(sum(sizes)) / len(sizes) / batch_size)) * local_epochs
    return TrainConfig(steps=steps, batch_size=batch_size, optimizer=optimizer, lr=lr)
