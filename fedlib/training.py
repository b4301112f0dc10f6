"""Local training and prediction: the few lines every algorithm's client step shares.

Batches are drawn by index from tensors that already sit in memory (no ``DataLoader``), with a
``torch.Generator`` passed in by the caller, so a client's step is a pure function of
(model weights, data, generator).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import hashlib
import math
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .models import HEAD_PREFIX
from .validation import is_int, is_real

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TrainConfig:
    """How a client trains locally.

    ``steps`` (if given) overrides ``epochs``: the client takes exactly that many mini-batch
    steps, cycling through fresh permutations of its data.

    Every field is checked once, here, with the offending value and the valid range in the
    message: ``epochs`` an int >= 0 (not a bool; ``0.5`` epochs is refused, use ``steps``),
    ``steps`` None or an int >= 0, ``batch_size`` an int >= 1, ``lr`` a finite number > 0,
    ``momentum`` in [0, 1), ``weight_decay`` a finite number >= 0.

    >>> TrainConfig(epochs=2, lr=0.1).epochs
    2
    >>> TrainConfig(epochs=0.5)
    Traceback (most recent call last):
    ...
    ValueError: epochs must be an int >= 0, got 0.5
    """

    epochs: int = 1
    steps: int | None = None
    batch_size: int = 32
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        if not (is_int(self.epochs) and self.epochs >= 0):
            raise ValueError(f"epochs must be an int >= 0, got {self.epochs!r}")
        if self.steps is not None and not (is_int(self.steps) and self.steps >= 0):
            raise ValueError(f"steps must be None or an int >= 0, got {self.steps!r}")
        if not (is_int(self.batch_size) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if not (is_real(self.lr) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not (is_real(self.momentum) and 0 <= self.momentum < 1):
            raise ValueError(f"momentum must be a number in [0, 1), got {self.momentum!r}")
        if not (is_real(self.weight_decay) and math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer named by ``cfg.optimizer`` over ``params``."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


class PlainOptimizer:
    r"""The optimizer of :func:`local_train`: the update ``torch.optim.SGD`` or ``torch.optim.Adam``
    makes on CPU (their single-tensor path, torch's default there), written out without the
    optimizer's per-step machinery (hooks, profiling records, parameter groups): the same
    operations on the same tensors in the same order, so the same bits, without that machinery's
    cost at every step (which a loop of many small steps pays many times).

    SGD, per parameter with a gradient :math:`g`: :math:`g \leftarrow g + \lambda p` (weight decay
    :math:`\lambda`), with momentum :math:`\mu` a buffer :math:`b \leftarrow g` at its first step
    and :math:`b \leftarrow \mu b + g` after, :math:`p \leftarrow p - \text{lr}\, b`. Adam (betas
    0.9, 0.999, eps :math:`10^{-8}`, torch's defaults), at the parameter's step :math:`t`:
    :math:`m \leftarrow m + 0.1 (g - m)`, :math:`v \leftarrow 0.999 v + 0.001 g^2`,
    :math:`p \leftarrow p - \tfrac{\text{lr}}{1 - 0.9^t}\, m / (\sqrt{v} / \sqrt{1 - 0.999^t} + \epsilon)`.
    A parameter without a gradient is skipped (its buffers and step count stay), as torch does.

    Parameters
    ----------
    params : iterable of torch.nn.Parameter
    cfg : TrainConfig
        Its ``optimizer``, ``lr``, ``momentum`` (SGD) and ``weight_decay``.

    Examples
    --------
    >>> w1 = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
    >>> w2 = w1.detach().clone().requires_grad_()
    >>> cfg = TrainConfig(optimizer="adam", lr=0.01, weight_decay=1e-3)
    >>> ref, plain = make_optimizer([w1], cfg), PlainOptimizer([w2], cfg)
    >>> for k in range(5):
    ...     for w, opt in ((w1, ref), (w2, plain)):
    ...         opt.zero_grad(set_to_none=True); (w ** 3 + k * w).sum().backward(); opt.step()
    >>> bool(torch.equal(w1, w2)), w2.grad is not None
    (True, True)
    """

    def __init__(self, params, cfg: TrainConfig) -> None:
        self.params = list(params)
        self.cfg = cfg
        self._buffers: list = [None] * len(self.params)  # SGD: the momentum buffer; Adam: [m, v, t]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Every parameter's gradient set to ``None`` (``set_to_none=False``: zeroed in place)."""
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        cfg = self.cfg
        lr, wd = cfg.lr, cfg.weight_decay
        if cfg.optimizer == "sgd":
            momentum = cfg.momentum
            for i, p in enumerate(self.params):
                g = p.grad
                if g is None:
                    continue
                if wd != 0:
                    g = g.add(p, alpha=wd)
                if momentum != 0:
                    buf = self._buffers[i]
                    if buf is None:
                        buf = self._buffers[i] = g.detach().clone()
                    else:
                        buf.mul_(momentum).add_(g, alpha=1)
                    g = buf
                p.add_(g, alpha=-lr)
            return
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                continue
            if self._buffers[i] is None:
                self._buffers[i] = [torch.zeros_like(p, memory_format=torch.preserve_format),
                                    torch.zeros_like(p, memory_format=torch.preserve_format), 0]
            state = self._buffers[i]
            state[2] += 1
            m, v, t = state[0], state[1], float(state[2])  # torch reads its float32 step count with .item()
            if wd != 0:
                g = g.add(p, alpha=wd)
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            step_size = lr / (1 - beta1 ** t)
            bias_correction2_sqrt = (1 - beta2 ** t) ** 0.5
            p.addcdiv_(m, (v.sqrt() / bias_correction2_sqrt).add_(eps), value=-step_size)


def minibatches(n: int, cfg: TrainConfig, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Index batches of shape ``(<= batch_size,)``: ``epochs`` passes, or exactly ``steps`` batches."""
    if n == 0:
        return
    total = cfg.steps if cfg.steps is not None else None
    taken, epoch = 0, 0
    while True:
        if total is None and epoch >= cfg.epochs:
            return
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n, cfg.batch_size):
            if total is not None and taken >= total:
                return
            yield perm[start : start + cfg.batch_size]
            taken += 1
        epoch += 1


LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The default local objective: mean cross-entropy of ``model(x)`` against ``y``."""
    return F.cross_entropy(model(x), y)


def proximal_term(model: nn.Module, anchor: Mapping[str, torch.Tensor]) -> torch.Tensor:
    r"""The squared distance of ``model``'s parameters to ``anchor``, the proximal term of FedProx
    (Eq. 2) and Ditto (Algorithm 1):

    .. math:: \lVert w - a \rVert^2 = \sum_{\text{name}} \lVert w_{\text{name}} - a_{\text{name}} \rVert^2 ,

    summed over the model's named parameters (in ``named_parameters`` order) whose names are in
    ``anchor`` (unprefixed ``state_dict`` names; buffers and extra entries are ignored). A scalar
    tensor with gradients toward the parameters; zero when no name matches.

    >>> model = nn.Linear(2, 1)
    >>> anchor = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    >>> bool(proximal_term(model, anchor) == model.weight.pow(2).sum() + model.bias.pow(2).sum())
    True
    """
    # Python's sum (0 + t_1 + t_2 + ...) in parameter order: the arithmetic FedProx and Ditto used
    total = sum(((p - anchor[name]) ** 2).sum() for name, p in model.named_parameters() if name in anchor)
    return total if isinstance(total, torch.Tensor) else torch.zeros(())


def local_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: TrainConfig,
    generator: torch.Generator,
    *,
    loss_fn: LossFn = cross_entropy_loss,
    params=None,
) -> float:
    """Train ``model`` in place on ``(x, y)``; return the mean training loss (NaN if no step).

    Parameters
    ----------
    x : torch.Tensor of shape (n, ...)
    y : torch.Tensor of shape (n,)
    params : iterable of parameters to optimise (default: all of ``model``'s); the others are
        left untouched (FedRep/FedBABU-style partial training) and take no gradient while it
        trains (:func:`frozen_except`: the backward pass skips what no step reads; the trained
        parameters' gradients, so the result, are the same bits).
    """
    active = _ACTIVE_MEMO.get()
    if active is not None and loss_fn is cross_entropy_loss and params is None and cfg in active[1]:
        return active[0].train(model, x, y, cfg, generator)
    return _train(model, x, y, cfg, generator, loss_fn=loss_fn, params=params)


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, generator: torch.Generator, *,
           loss_fn: LossFn = cross_entropy_loss, params=None) -> float:
    """:func:`local_train`'s work."""
    model.train()
    params = list(model.parameters()) if params is None else list(params)
    opt = PlainOptimizer(params, cfg)  # torch's SGD or Adam, the same bits, less CPU
    total, count = 0.0, 0
    with frozen_except(model, params):
        for idx in minibatches(len(y), cfg, generator):
            loss = loss_fn(model, x[idx], y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach())
            count += 1
    model.eval()
    return total / count if count else float("nan")


_TORCH_FIELDS = frozenset({"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
                           "_is_full_backward_hook"})
"""Attributes of a module that :class:`TrainingMemo`'s key covers otherwise (its tensors, its
submodules) or that :func:`local_train` sets itself (``training``)."""

_ACTIVE_MEMO: contextvars.ContextVar[tuple[TrainingMemo, tuple[TrainConfig, ...]] | None] = contextvars.ContextVar(
    "fedlib_training_memo", default=None)
"""The memo of the innermost :meth:`TrainingMemo.covering` block of this thread or task, and the
configurations it covers."""


class _Uncacheable(Exception):
    """A module attribute :class:`TrainingMemo`'s key cannot describe by its value."""


_PLAIN = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), torch.dtype, torch.device)


def _by_name(value) -> bool:
    """Whether ``value`` (a class or a function) is the object its module's attribute of that
    qualified name holds: importable by name, so its name says which one it is (not a closure,
    a lambda, a function defined in a function, or a method bound to an object)."""
    if isinstance(value, types.FunctionType) and value.__closure__:
        return False
    name, module = getattr(value, "__qualname__", None), getattr(value, "__module__", None)
    if not isinstance(name, str) or not isinstance(module, str) or "<" in name:
        return False
    found = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    return found is value


def _array_text(kind: str, dtype, shape, data: bytes) -> str:
    return f"{kind}({dtype},{tuple(shape)},{hashlib.sha256(data).hexdigest()})"


def _describe(value, depth: int = 0) -> str:
    """A module attribute's value as text for :class:`TrainingMemo`'s key, raising
    :class:`_Uncacheable` for a value that is not plain data.

    Plain data: ``None``, bools, numbers, strings, bytes, torch dtypes and devices, enum members
    (by their ``repr``); tensors (on the CPU) and numpy arrays and scalars by dtype, shape and a
    digest of their bytes (a ``repr`` summarises a large one with "..."); lists, tuples, dicts,
    sets and dataclass instances element by element; classes and functions importable by their
    module and qualified name (:func:`_by_name`), by that name. Anything else (a module held
    outside the registered submodules, a closure, a lambda, a bound method, an object of another
    kind) is not described: the call always trains."""
    if depth > 8:
        raise _Uncacheable("nested too deep")
    if isinstance(value, enum.Enum) or type(value) in _PLAIN:
        return repr(value)
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.dtype == torch.bfloat16 or value.layout != torch.strided:
            raise _Uncacheable("a tensor the key does not read")
        t = value.detach().resolve_conj().resolve_neg().contiguous()
        return _array_text(f"tensor{value.requires_grad}", t.dtype, t.shape, t.numpy().tobytes())
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if a.dtype.hasobject:
            raise _Uncacheable("an object array")
        return _array_text(type(value).__name__, a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes())
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "(" + ",".join(_describe(v, depth + 1) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_describe(k, depth + 1)}:{_describe(v, depth + 1)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):
        return "set(" + ",".join(sorted(_describe(v, depth + 1) for v in value)) + ")"
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and _by_name(type(value)):
        state = vars(value) if hasattr(value, "__dict__") else {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return f"<{type(value).__module__}.{type(value).__qualname__}>({_describe(dict(sorted(state.items())), depth + 1)})"
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) and _by_name(value):
        return f"<{value.__module__}.{value.__qualname__}>"
    raise _Uncacheable(f"a {type(value).__name__}")


def _tensor_bytes(h, name: str, t: torch.Tensor | None) -> None:
    h.update(name.encode())
    if t is None:
        h.update(b"<none>")
        return
    requires_grad = t.requires_grad  # before detaching, which turns it off: a frozen parameter is not trained
    t = t.detach()
    h.update(f"{t.dtype}{tuple(t.shape)}{t.device}{requires_grad}".encode())
    h.update(t.contiguous().cpu().numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().contiguous().numpy().tobytes())


class TrainingMemo:
    r"""A store of :func:`local_train`'s results, to train once what several runs train alike.

    Inside :meth:`covering`, a call of :func:`local_train` with the default loss and every parameter
    (``loss_fn`` and ``params`` left out) whose ``cfg`` is one of the covered configurations is
    looked up by everything its result depends on: the model (each module's class and
    attributes, every parameter and every buffer, bit for bit; not the gradients, which the
    first step sets afresh), the data ``x`` and
    ``y``, ``cfg``, the state of ``generator`` and of torch's global generator, and torch's CPU
    threads. A call seen before is not trained again: the model's parameters, gradients and
    buffers, both generators' states and the returned loss are set to what the first call left,
    so the caller sees the same bits as from training; a new call trains and is kept (the oldest
    entries go once more than ``max_entries`` or ``max_bytes`` are kept; a training larger than
    ``max_bytes`` on its own is not kept). A call that takes no step, a model with hooks,
    tensors on another device than the CPU, or a module attribute that is not plain data (a
    module held outside the registered submodules, a closure, a lambda, a bound method, an
    object of another kind: ``_describe``) always trains, and counts in ``uncached``, not in
    ``misses``.

    Several methods whose clients start alike share their first training this way (e.g. the
    pre-training round of the model-agnostic methods of :mod:`fedlib.algorithms.fedmd`, which
    depends on the client's data, its architecture and the run's seed only); a run that repeats
    another's training is served whole.

    The covered configurations belong to the thread or task that entered :meth:`covering` (a
    context variable): a call in another thread is not served. The store and the counters are
    not locked: let one thread at a time train through a memo (give each thread its own).

    Parameters
    ----------
    max_entries : int
        How many trainings are kept.
    max_bytes : int
        How many bytes of tensors (weights, gradients, buffers, generator states) they may hold.

    Examples
    --------
    >>> from fedlib.models import build_model
    >>> memo = TrainingMemo()
    >>> cfg = TrainConfig(epochs=2, batch_size=4, lr=0.1)
    >>> x, y = torch.randn(8, 1, 2, 2, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1] * 4)
    >>> def trained():
    ...     model = build_model("mlp", in_channels=1, n_classes=2, input_size=2, hidden=(3,), seed=0)
    ...     loss = local_train(model, x, y, cfg, torch.Generator().manual_seed(1))
    ...     return loss, model.head.weight.detach().clone()
    >>> with memo.covering(cfg):
    ...     (a, wa), (b, wb) = trained(), trained()
    >>> c, wc = trained()  # outside: trained again
    >>> (memo.hits, memo.misses, a == b == c, bool(torch.equal(wa, wb)), bool(torch.equal(wa, wc)))
    (1, 1, True, True, True)
    >>> with memo.covering(cfg):  # a model holding a function made in a function: not described, trained
    ...     model = build_model("mlp", in_channels=1, n_classes=2, input_size=2, hidden=(3,), seed=0)
    ...     model.scale = (lambda k: lambda v: k * v)(2)
    ...     _ = local_train(model, x, y, cfg, torch.Generator().manual_seed(1))
    >>> (memo.hits, memo.misses, memo.uncached)
    (1, 1, 1)
    """

    def __init__(self, max_entries: int = 1024, max_bytes: int = 2**28) -> None:
        if not (is_int(max_entries) and max_entries >= 1):
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        if not (is_int(max_bytes) and max_bytes >= 1):
            raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
        self.max_entries, self.max_bytes = int(max_entries), int(max_bytes)
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.uncached = 0
        self._store: OrderedDict[str, tuple] = OrderedDict()

    def __len__(self) -> int:
        return len(self._store)

    @property
    def configs(self) -> tuple[TrainConfig, ...]:
        """The configurations this memo covers in this thread or task (``()`` outside its
        :meth:`covering` blocks)."""
        active = _ACTIVE_MEMO.get()
        return active[1] if active is not None and active[0] is self else ()

    @contextlib.contextmanager
    def covering(self, *configs: TrainConfig) -> Iterator[TrainingMemo]:
        """Serve and keep the :func:`local_train` calls of ``configs`` (each a :class:`TrainConfig`)
        made inside the ``with`` block in this thread or task (a context variable holds them, not
        the memo); the previous memo, if any, applies again after it."""
        bad = [c for c in configs if not isinstance(c, TrainConfig)]
        if bad or not configs:
            raise ValueError(f"covering takes one or more TrainConfig, got {[type(c).__name__ for c in configs]}")
        token = _ACTIVE_MEMO.set((self, tuple(configs)))
        try:
            yield self
        finally:
            _ACTIVE_MEMO.reset(token)

    def key(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig,
            generator: torch.Generator) -> str | None:
        """The digest a call is kept under, ``None`` for a call that always trains (no step, a
        model with hooks, a tensor off the CPU, or a module attribute that is not plain data)."""
        if len(y) == 0 or (cfg.steps == 0 if cfg.steps is not None else cfg.epochs == 0):
            return None  # no step: nothing to save
        h = hashlib.sha256()
        h.update(f"{cfg!r}|threads={torch.get_num_threads()}".encode())
        for name, module in model.named_modules():
            cls = type(module)
            h.update(f"|{name}:{cls.__module__}.{cls.__qualname__}".encode())
            for attr, value in sorted(vars(module).items()):
                if attr in _TORCH_FIELDS:
                    continue
                if attr.endswith("_hooks") or attr.endswith("_hooks_with_kwargs") or attr.endswith("_hooks_always_called"):
                    if value:
                        return None
                    continue
                try:
                    h.update(f"{attr}={_describe(value)};".encode())
                except _Uncacheable:
                    return None
        for name, p in model.named_parameters():
            if p.device.type != "cpu":
                return None
            _tensor_bytes(h, f"p:{name}", p)  # not its gradient: the first step sets every gradient afresh
        for name, b in model.named_buffers():
            _tensor_bytes(h, f"b:{name}", b)
        for name, t in (("x", x), ("y", y)):
            if t.device.type != "cpu":
                return None
            _tensor_bytes(h, name, t)
        _tensor_bytes(h, "generator", generator.get_state())
        _tensor_bytes(h, "torch", torch.get_rng_state())
        return h.hexdigest()

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, generator: torch.Generator) -> float:
        """:func:`local_train` of ``model`` on ``(x, y)`` with ``cfg`` and ``generator``, served from
        the memo when the same call was trained before (the class's docstring)."""
        key = self.key(model, x, y, cfg, generator)
        if key is None:
            self.uncached += 1
            return _train(model, x, y, cfg, generator)
        if key in self._store:
            self.hits += 1
            self._store.move_to_end(key)
            params, grads, buffers, gen_state, rng_state, loss, _ = self._store[key]
            with torch.no_grad():
                for (name, p), value, grad in zip(model.named_parameters(), params, grads, strict=True):
                    p.copy_(value)
                    p.grad = None if grad is None else grad.clone()
                for (name, b), value in zip(model.named_buffers(), buffers, strict=True):
                    b.copy_(value)
            model.eval()
            generator.set_state(gen_state)
            torch.set_rng_state(rng_state)
            return loss
        self.misses += 1
        loss = _train(model, x, y, cfg, generator)
        entry = ([p.detach().clone() for p in model.parameters()],
                 [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()],
                 [b.detach().clone() for b in model.buffers()], generator.get_state(), torch.get_rng_state(), loss)
        size = sum(t.nbytes for group in entry[:3] for t in group if t is not None) + entry[3].nbytes + entry[4].nbytes
        if size <= self.max_bytes:
            self._store[key] = (*entry, size)
            self.nbytes += size
            while len(self._store) > self.max_entries or self.nbytes > self.max_bytes:
                self.nbytes -= self._store.popitem(last=False)[1][-1]
        return loss


@contextlib.contextmanager
def frozen_except(model: nn.Module, params) -> Iterator[list[nn.Parameter]]:
    """Within the block, every parameter of ``model`` that is not one of ``params`` (by identity)
    and requires gradients has ``requires_grad`` off; restored on leaving (also on an error).

    A parameter no optimizer step reads then takes no gradient: the backward pass of a head-only
    phase (FedRep's head epochs) stops at the head instead of running through the body, and
    the gradients of ``params`` are computed by the same operations as before.

    Parameters
    ----------
    model : torch.nn.Module
    params : iterable of torch.nn.Parameter
        The parameters that keep their gradients (those :func:`local_train` optimizes).

    Yields
    ------
    list of torch.nn.Parameter
        The parameters it froze.

    Examples
    --------
    >>> m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    >>> with frozen_except(m, m[1].parameters()) as frozen:
    ...     [p.requires_grad for p in m.parameters()], len(frozen)
    ([False, False, True, True], 2)
    >>> [p.requires_grad for p in m.parameters()]
    [True, True, True, True]
    """
    keep = {id(p) for p in params}
    frozen = [p for p in model.parameters() if id(p) not in keep and p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        yield frozen
    finally:
        for p in frozen:
            p.requires_grad_(True)


PHASE_PARAMS = ("all", "head", "body")
"""Which parameters a :class:`Phase` trains: every one, the final classifier's (``head.*``), or
every other one (the body, as FedRep's and FedBABU's phases do)."""
PHASE_ANCHORS = ("start", "message")
"""Where a :class:`Phase`'s proximal term pulls: the program's start weights (FedProx), or the
weights of the message it carries (:attr:`LocalProgram.message_weights`: Ditto's personal model
toward the broadcast global model)."""


@dataclass(frozen=True)
class Phase:
    r"""One call of :func:`local_train`, as data: train ``params`` with ``train`` on the program's
    data, minimizing the mean cross-entropy plus, when ``mu > 0``, the proximal term

    .. math:: \frac{\mu}{2}\,\lVert w - a \rVert^2

    around an anchor :math:`a` (:func:`proximal_term`): the program's start weights :math:`w^0`
    (``anchor="start"``, FedProx's Eq. 2) or the message's weights (``anchor="message"``, Ditto's
    personal objective around the broadcast :math:`w^t`).

    >>> Phase(TrainConfig(), params="head").params
    'head'
    >>> Phase(TrainConfig(), params="encoder")
    Traceback (most recent call last):
    ...
    ValueError: unknown params 'encoder'; valid: all, head, body
    """

    train: TrainConfig
    params: str = "all"
    mu: float = 0.0
    anchor: str = "start"

    def __post_init__(self) -> None:
        if self.params not in PHASE_PARAMS:
            raise ValueError(f"unknown params {self.params!r}; valid: {', '.join(PHASE_PARAMS)}")
        if not (is_real(self.mu) and math.isfinite(self.mu) and self.mu >= 0):
            raise ValueError(f"mu must be a finite number >= 0, got {self.mu!r}")
        if self.anchor not in PHASE_ANCHORS:
            raise ValueError(f"unknown anchor {self.anchor!r}; valid: {', '.join(PHASE_ANCHORS)}")

    def trains(self, name: str) -> bool:
        """Whether this phase trains the parameter called ``name`` (a ``named_parameters`` name)."""
        if self.params == "all":
            return True
        return name.startswith(HEAD_PREFIX) == (self.params == "head")


@dataclass
class LocalProgram:
    """A client's local work as data, so that an executor can run many clients' programs at once.

    Start from ``weights`` (the model's full ``state_dict``, unprefixed), run each :class:`Phase`
    in order on ``(x, y)`` with the client's one generator (each phase a fresh optimizer, as
    :func:`local_train` makes), then hand the trained model and the last phase's mean training
    loss to ``finish``, which returns what the method's ``local_update`` returns,
    ``(new_state, reply)``, or the client's next program, which continues with the same
    generator (Ditto: the personal model's program, then the global model's).
    :meth:`run` is the sequential execution (the :class:`~fedlib.protocol.ProgramMethod`'s
    ``local_update``); :class:`fedlib.engines.vectorized.VectorizedTransport` runs the programs of
    a round's clients as one batched computation and calls the same ``finish``.

    Attributes
    ----------
    weights : the start weights, ``{state_dict name: tensor}``
    x : torch.Tensor of shape (n, ...), the training inputs
    y : torch.Tensor of shape (n,), their labels
    phases : the phases, in order
    finish : ``(trained model, mean training loss) -> (new_state, reply)`` or the next program
    message_weights : the weights a phase with ``anchor="message"`` is proximal to (the
        message's model, ``{state_dict name: tensor}``); ``None`` when no phase needs them
    """

    weights: Mapping[str, torch.Tensor]
    x: torch.Tensor
    y: torch.Tensor
    phases: tuple[Phase, ...]
    finish: Callable[[nn.Module, float], "tuple | LocalProgram"] = field(repr=False)
    message_weights: Mapping[str, torch.Tensor] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.message_weights is None and any(p.mu and p.anchor == "message" for p in self.phases):
            raise ValueError("a phase anchored at the message (Phase(anchor='message')) needs the program's "
                             "message_weights: the message's model weights")

    def run(self, model: nn.Module, generator: torch.Generator) -> tuple:
        """Execute the program in ``model`` (its weights are replaced), one phase after another,
        and the programs its ``finish`` continues with."""
        model.load_state_dict(self.weights)
        used = {phase.anchor for phase in self.phases if phase.mu}
        anchors = {"start": {name: p.detach().clone() for name, p in model.named_parameters()} if "start" in used else {},
                   "message": {name: t.detach().clone() for name, t in self.message_weights.items()} if "message" in used
                   else {}}  # w^0 and the message's w^t
        loss = float("nan")
        for phase in self.phases:
            loss = local_train(model, self.x, self.y, phase.train, generator,
                               loss_fn=_phase_loss(phase.mu, anchors[phase.anchor]),
                               params=[p for name, p in model.named_parameters() if phase.trains(name)])
        out = self.finish(model, loss)
        return out.run(model, generator) if isinstance(out, LocalProgram) else out


@dataclass
class SequentialWork:
    """A client's local work that is not a :class:`LocalProgram` (its own losses or control flow,
    e.g. a statistics round), as a function of the model workspace and the client's generator:
    ``run(model, generator) -> (new_state, reply)``. A
    :class:`~fedlib.protocol.ProgramMethod` returns it for a round whose work cannot be stacked;
    every executor runs it as it is, alone.

    >>> SequentialWork(lambda model, generator: ("state", "reply")).run(None, None)
    ('state', 'reply')
    """

    run: Callable[[nn.Module, torch.Generator], tuple] = field(repr=False)


def _phase_loss(mu: float, anchor: Mapping[str, torch.Tensor]) -> LossFn:
    if not mu:
        return cross_entropy_loss

    def loss_fn(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # FedProx's Eq. (2), Ditto's objective
        return F.cross_entropy(m(x), y) + 0.5 * mu * proximal_term(m, anchor)

    return loss_fn


@torch.no_grad()
def predict(predictor: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """Predicted labels ``argmax predictor(x)`` of shape (n,), computed in batches."""
    if isinstance(predictor, nn.Module):
        predictor.eval()
    out = [predictor(x[i : i + batch_size]).argmax(dim=1) for i in range(0, len(x), batch_size)]
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)
