"""The vectorized transport: a round's clients train as one batched computation (``torch.func``).

A client's local work is a function of (start weights, data, generator). For a method whose
work is a :class:`~fedlib.training.LocalProgram` (phases of SGD or Adam steps on cross-entropy,
with a proximal term around the start weights or the message's as an option: FedAvg, FedAvg-FT,
FedProx, FedBABU, FedRep, Ditto, GGEUR's classifier on embeddings), the programs of the clients sampled in a round are stacked: one
tensor of shape ``(clients, ...)`` per parameter, one per optimizer buffer, one mini-batch per
client per step. A step is one forward pass of ``vmap(functional_call(model, ...))`` over the
stacked parameters (``torch.func``), one backward pass, and the optimizer's update written out on
the stacked tensors. This is the one round loop's transport (:mod:`fedlib.engines`), not a second loop:
sampling, events, the guard, aggregation, evaluation and checkpoints stay in :mod:`fedlib.loop`.

Exactness. Each client's update is its sequential update:

* **Batch order.** Each client draws its mini-batch indices from its own generator, seeded
  ``derive_seed(seed, round, client, LOCAL_TRAIN)`` as in the sequential path, phase after
  phase with :func:`fedlib.training.minibatches`: the same batches, in the same order.
* **Ragged data.** Clients with fewer samples take fewer steps, and a short last batch is padded:
  a padded sample's loss is multiplied by 0 and the sum divided by the batch's real length, so
  the loss is the batch's mean cross-entropy. Clients are sorted by their number of steps, so the clients still
  training at a step are a prefix of the stack; the others are not computed at all (their
  parameters and optimizer state stay as they are).
* **The optimizers.** SGD (momentum, weight decay) and Adam are torch's update rules
  (``torch.optim.SGD``/``Adam``, single-tensor form), with a fresh state per phase, as
  :func:`fedlib.training.local_train` creates a new optimizer per call.
* **Continued programs.** A program whose ``finish`` continues with the client's next program
  (Ditto: the personal model, then the global model) has the next one stacked with its chunk's
  others, drawing from the same generators.

The results agree with the sequential path to float32 rounding (about 1e-7 relative per step),
not bit for bit: a batched convolution or matrix product sums in another order than ``C``
separate ones, and a mean over a padded batch is a weighted sum. Within the vectorized path the
same seed gives the same bits (the chunks and their order are a function of the round's
clients and the memory budget only).

Limits. Models whose training mode keeps running statistics (BatchNorm) or draws random numbers
(Dropout) are refused with a message; fedlib's models default to GroupNorm and no dropout. A
method without programs (custom losses or control flow: CGRL, FedProto, MPT, ...) or a
client whose program cannot be formed this round runs sequentially; the transport says so once
per method (:attr:`VectorizedTransport.notes`).

Memory. Clients are processed in chunks. The chunk size is the memory budget divided by an
estimate of one client's footprint (:func:`chunk_size`): its parameters eight times over (the
stacked, sorted and trained copies, the gradient, two optimizer buffers, a proximal anchor), its
activations for one batch (measured once with forward hooks on a one-sample input, times the
batch size and three for the backward pass) and its training inputs. It is an estimate, not a
hard bound: temporaries of the kernels come on top.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from ..federation import Federation
from ..messages import Message, State
from ..protocol import LocalWork
from ..training import LocalProgram, Phase, SequentialWork, minibatches
from ..transport import ClientFailure
from ..validation import is_int
from .inprocess import InProcessTransport

DEFAULT_MEMORY_BUDGET = 512 * 2**20
"""Bytes the stacked clients of one chunk are estimated to take (:func:`chunk_size`)."""


class SequentialFallback(UserWarning):
    """Some clients of a vectorized run trained sequentially (a method, or a round, without a
    :class:`~fedlib.training.LocalProgram`); the results are the same, only slower."""


def check_vectorizable_model(model: nn.Module) -> None:
    """Refuse a model whose training step the stacked computation cannot reproduce: a BatchNorm
    layer (batch statistics, which padding would bias, and running statistics) or a dropout layer
    with ``p > 0``."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise ValueError(
                f"module {name!r} ({type(module).__name__}) normalizes over the batch (and may keep running statistics), "
                "which vectorized clients cannot reproduce with padded batches; use norm='group' (fedlib's default) or "
                "RunOptions(execution='sequential')")
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            raise ValueError(
                f"module {name!r} ({type(module).__name__}, p={module.p}) draws random numbers in training, which "
                "vectorized clients cannot reproduce client by client; remove it or use RunOptions(execution='sequential')")


def activation_numel(model: nn.Module, sample: torch.Tensor) -> int:
    """The number of activation values one input ``sample`` (shape ``(1, ...)``) produces in a
    forward pass of ``model``: the outputs of its leaf modules, summed."""
    total = 0

    def hook(_module, _inputs, output):
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel()

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.no_grad():
            model(sample)
    finally:
        for h in handles:
            h.remove()
    return total


PARAMETER_COPIES = 8
"""Copies of a client's parameters a chunk holds at most: the stacked start weights, their sorted
copy, the trained copy, the gradient, two optimizer buffers and, with a proximal term, the anchor
and its sorted copy."""


def chunk_size(model: nn.Module, sample: torch.Tensor, batch_size: int, memory_budget: int, data_bytes: int = 0) -> int:
    """How many clients one chunk stacks: ``memory_budget`` bytes over an estimate of one
    client's footprint: :data:`PARAMETER_COPIES` copies of its parameters, three times the
    activations of one batch (measured on ``sample``, shape ``(1, ...)``) and ``data_bytes`` (its
    training inputs, which the chunk concatenates); at least 1."""
    n_params = sum(p.numel() for p in model.parameters())
    itemsize = next(model.parameters()).element_size()
    per_client = itemsize * (PARAMETER_COPIES * n_params + 3 * batch_size * activation_numel(model, sample)) + data_bytes
    return max(1, int(memory_budget // per_client))


def _signature(program: LocalProgram) -> tuple:
    """What programs must share to be stacked: phases, input shape and dtype, weight shapes (and
    the message's, when a phase is anchored at it)."""
    return (program.phases, tuple(program.x.shape[1:]), program.x.dtype,
            tuple((k, tuple(v.shape), v.dtype) for k, v in program.weights.items()),
            tuple((k, tuple(v.shape), v.dtype) for k, v in (program.message_weights or {}).items()))


class _Stack:
    """A phase's stacked clients: their inputs in one tensor and their whole batch schedule as
    one index of shape ``(steps, clients, batch)`` (padded with each client's first sample), so
    that a step's mini-batches are gathered with one indexing operation."""

    def __init__(self, xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], batches: Sequence[Sequence[torch.Tensor]],
                 dtype: torch.dtype) -> None:
        self.x = torch.cat(list(xs))
        self.y = torch.cat(list(ys))
        sizes = torch.tensor([len(y) for y in ys])
        offsets = (torch.cumsum(sizes, 0) - sizes).tolist()
        self.steps = [len(b) for b in batches]
        T, C = max(self.steps, default=0), len(batches)
        width = max((len(idx) for b in batches for idx in b), default=0)
        self.index = torch.zeros(T, C, width, dtype=torch.long)
        lengths = torch.zeros(T, C, dtype=torch.long)
        for c, client_batches in enumerate(batches):
            for t, idx in enumerate(client_batches):
                self.index[t, c, : len(idx)] = idx + offsets[c]
                lengths[t, c] = len(idx)
                if len(idx) < width:
                    self.index[t, c, len(idx):] = offsets[c]
        # per step: the batch width, every client's mask (1 for a real sample, 0 for padding) and length
        self.widths = [int(lengths[t].max()) for t in range(T)]
        self.masks = (torch.arange(width)[None, None, :] < lengths[:, :, None]).to(dtype)
        self.lengths = lengths.to(dtype)

    def batch(self, t: int, a: int):
        """Step ``t``'s inputs ``(a, b, ...)``, labels ``(a, b)``, masks ``(a, b)`` and batch
        lengths ``(a,)`` of the first ``a`` clients."""
        b = self.widths[t]
        index = self.index[t, :a, :b]
        return self.x[index], self.y[index], self.masks[t, :a, :b], self.lengths[t, :a]


def _train_phase(model: nn.Module, phase: Phase, weights: dict[str, torch.Tensor], anchor: dict[str, torch.Tensor],
                 data: _Stack) -> list[float]:
    """One phase for a stack of clients (already sorted by decreasing number of steps).

    ``weights`` maps every ``state_dict`` name to a ``(clients, ...)`` tensor and is updated in
    place. Returns each client's mean loss."""
    cfg = phase.train
    names = [n for n, _ in model.named_parameters()]
    # as torch.optim skips a parameter without a gradient: one that does not require it is not trained
    trained = [n for n, p in model.named_parameters() if phase.trains(n) and p.requires_grad]
    steps = data.steps
    C = len(steps)
    mu = float(phase.mu)
    params = {n: weights[n].clone() for n in trained}
    adam = cfg.optimizer == "adam"
    # SGD's momentum buffers (made at the first step) or Adam's first and second moments, (clients, ...) each
    state1 = {n: torch.zeros_like(params[n]) if adam else None for n in trained}
    state2 = {n: torch.zeros_like(params[n]) for n in trained} if adam else {}
    beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults

    # the forward pass of every stacked client at once; the backward pass is autograd's on the sum of
    # the clients' losses (client c's loss depends on client c's parameters only, so the gradient of
    # the sum with respect to the stack is every client's own gradient). torch.func.grad under vmap
    # computes the same, with about a millisecond more per step on a CPU (its transforms are
    # re-entered at every call), which is most of a small model's step.
    forward = vmap(lambda p, frozen, x: functional_call(model, {**frozen, **p}, (x,)))

    def step_fn(p, frozen, x, y, w, count, a):
        leaves = {n: v.detach().requires_grad_(True) for n, v in p.items()}
        out = forward(leaves, frozen, x)  # (a, b, classes)
        ce = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view_as(w)
        per = (ce * w).sum(1) / count  # (a,): each batch's mean cross-entropy
        if mu:  # FedProx, Eq. (2), over every parameter as proximal_term sums it (a frozen one adds a constant)
            every = {**frozen, **leaves}
            per = per + 0.5 * mu * sum(((every[n] - a[n]) ** 2).flatten(1).sum(1) for n in names)
        grads = torch.autograd.grad(per.sum(), list(leaves.values()), allow_unused=True)
        return dict(zip(leaves, grads)), per.detach()

    totals = [0.0] * C
    model.train()  # as local_train: a module whose forward reads self.training sees training mode
    for t in range(max(steps, default=0)):
        a = sum(1 for s in steps if s > t)  # clients still training: a prefix of the sorted stack
        frozen = {n: v[:a] for n, v in weights.items() if n not in params}
        p_now = {n: v[:a] for n, v in params.items()}
        x, y, w, count = data.batch(t, a)
        anc = {n: anchor[n][:a] for n in names} if mu else {}
        g, losses = step_fn(p_now, frozen, x, y, w, count, anc)
        with torch.no_grad():
            for n in trained:
                p, d = params[n][:a], g[n]
                if d is None:  # a parameter the loss does not reach: torch.optim skips it (no decay, no momentum)
                    continue
                if cfg.weight_decay:
                    d = d.add(p, alpha=cfg.weight_decay)
                if not adam:
                    if cfg.momentum:
                        if state1[n] is None:
                            state1[n] = d.clone()  # torch.optim.SGD: the first buffer is the gradient
                        else:
                            state1[n][:a].mul_(cfg.momentum).add_(d)
                        d = state1[n][:a]
                    p.add_(d, alpha=-cfg.lr)
                else:  # torch.optim.Adam, single-tensor form
                    m1, m2 = state1[n][:a], state2[n][:a]
                    m1.lerp_(d, 1 - beta1)
                    m2.mul_(beta2).addcmul_(d, d, value=1 - beta2)
                    step = t + 1
                    step_size = cfg.lr / (1 - beta1 ** step)
                    denom = (m2.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
                    p.addcdiv_(m1, denom, value=-step_size)
        for c, v in enumerate(losses.tolist()):
            totals[c] += v
    model.eval()
    for n in trained:
        weights[n] = params[n]
    return [totals[c] / steps[c] if steps[c] else float("nan") for c in range(C)]


def train_programs(model: nn.Module, programs: Sequence[LocalProgram], generators: Sequence[torch.Generator]
                   ) -> list[tuple[dict[str, torch.Tensor], float]]:
    """Run ``programs`` (one per client, all of one signature: the same phases, input shape and
    weight shapes) as one stacked
    computation in ``model``'s architecture; client ``c`` draws its batches from
    ``generators[c]``. Returns, per client in the given order, its trained ``state_dict`` and its
    last phase's mean training loss."""
    C = len(programs)
    phases = programs[0].phases
    # the batch schedule: phase after phase from each client's one generator, as local_train draws it
    schedule = [[list(minibatches(len(p.y), phase.train, g)) for phase in phases] for p, g in zip(programs, generators)]
    names = list(programs[0].weights)
    dtype = next(p for p in model.parameters()).dtype  # of the losses and the batch masks
    stacked = {n: torch.stack([p.weights[n] for p in programs]) for n in names}
    used = {ph.anchor for ph in phases if ph.mu}  # the proximal terms' anchors: the start weights, the message's
    anchors = {"start": {n: v.clone() for n, v in stacked.items()} if "start" in used else {},
               "message": {n: torch.stack([p.message_weights[n] for p in programs]) for n in names} if "message" in used
               else {}}
    loss = [float("nan")] * C
    for i, phase in enumerate(phases):
        order = sorted(range(C), key=lambda c: -len(schedule[c][i]))  # stable: ties keep the clients' order
        inv = torch.tensor(order)
        w = {n: v[inv] for n, v in stacked.items()}
        anc = {n: v[inv] for n, v in anchors[phase.anchor].items()} if phase.mu else {}
        data = _Stack([programs[c].x for c in order], [programs[c].y for c in order], [schedule[c][i] for c in order],
                      dtype)
        losses = _train_phase(model, phase, w, anc, data)
        back = torch.empty_like(inv)
        back[inv] = torch.arange(C)
        stacked = {n: v[back] for n, v in w.items()}
        loss = [losses[int(back[c])] for c in range(C)]
    return [({n: stacked[n][c] for n in names}, loss[c]) for c in range(C)]


class VectorizedTransport(InProcessTransport):
    """The clients of ``federation`` in this process; each round, the sampled clients whose
    method gives a :class:`~fedlib.training.LocalProgram` train as one batched computation (see
    the module's docstring). Evaluation is the in-process transport's.

    Parameters
    ----------
    memory_budget : bytes one chunk of stacked clients may take (:func:`chunk_size`)
    """

    name = "vectorized"

    def __init__(self, federation: Federation, model_fn: Callable[[], nn.Module], seed: int, *,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        if not (is_int(memory_budget) and memory_budget >= 1):
            raise ValueError(f"memory_budget must be a positive number of bytes, got {memory_budget!r}")
        super().__init__(federation, model_fn, seed)
        if self.heterogeneous:
            raise ValueError(f"vectorized execution stacks clients of one architecture, but these differ ({self.architectures}); "
                             "valid: execution='sequential' for a federation of mixed architectures")
        check_vectorizable_model(self.initial_model)
        self.memory_budget = int(memory_budget)
        self.notes: list[str] = []
        """What ran sequentially and why, each said once per method (as a warning too)."""
        self.stacked_clients = 0
        """How many client updates ran stacked so far (the rest ran sequentially)."""
        self._chunk: dict[tuple, int] = {}
        self._noted: set[tuple] = set()

    def _note(self, key: tuple, text: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self.notes.append(text)
            warnings.warn(text, SequentialFallback, stacklevel=3)

    def local_updates(self, algorithm, round_, messages, states) -> Iterator[tuple[int, State, Message]]:
        if not algorithm.capabilities.stacks:
            self._note((algorithm.name, "method"), f"{algorithm.name}: its local_update is not a LocalProgram; its clients train sequentially")
            yield from super().local_updates(algorithm, round_, messages, states)
            return
        order = list(messages)
        works: dict[int, LocalWork] = {}
        for k in order:
            try:
                works[k] = self._clients[k].program(algorithm, states[k], messages[k], round_, self._workspace)
            except Exception as err:
                err.add_note(f"(raised by client {k}'s program in round {round_})")
                raise
        stacks = lambda c: isinstance(works[c], LocalProgram)  # noqa: E731
        # clients run in chunks of consecutive clients (in the order of messages, so replies keep
        # their order), a chunk ending where the memory budget or the program's signature says
        done: dict[int, tuple[State, Message]] = {}
        i = 0
        while i < len(order):
            k = order[i]
            if not stacks(k):
                self._note((algorithm.name, "client"), f"{algorithm.name}: some clients have no LocalProgram in some rounds "
                           f"(the first: client {k} in round {round_}); those train sequentially")
                yield self._alone(k, works[k], round_)
                i += 1
                continue
            sig = _signature(works[k])
            # the footprint is measured on a client with data (an empty one has no sample)
            sized = next((works[c] for c in order[i:] if stacks(c) and len(works[c].x) and _signature(works[c]) == sig),
                         works[k])
            size = self._chunk_size(sig, sized)
            chunk = [k]
            while (len(chunk) < size and i + len(chunk) < len(order) and stacks(order[i + len(chunk)])
                   and _signature(works[order[i + len(chunk)]]) == sig):
                chunk.append(order[i + len(chunk)])
            gens = {c: self._clients[c].train_generator(round_, self._seed) for c in chunk}
            programs = {c: works[c] for c in chunk}
            while programs:  # a finish may continue with the client's next program (Ditto's global model), stacked again
                head = _signature(next(iter(programs.values())))
                group = [c for c in programs if _signature(programs[c]) == head]
                try:
                    trained = train_programs(self._workspace, [programs[c] for c in group], [gens[c] for c in group])
                except Exception as err:
                    err.add_note(f"(raised while training clients {group} stacked in round {round_})")
                    raise
                for c, (weights, loss) in zip(group, trained):
                    self._workspace.load_state_dict(weights)
                    try:
                        out = programs.pop(c).finish(self._workspace, loss)
                    except Exception as err:
                        err.add_note(f"(raised by client {c}'s program finish in round {round_})")
                        raise
                    if isinstance(out, LocalProgram):
                        programs[c] = out
                    else:
                        done[c] = out
            self.stacked_clients += len(chunk)
            for c in chunk:
                state, up = done.pop(c)
                yield c, state, up
            i += len(chunk)

    def _alone(self, k: int, work: SequentialWork, round_: int) -> tuple[int, State | None, Message | ClientFailure]:
        """Client ``k``'s sequential work, as the in-process transport runs a ``local_update``."""
        try:
            state, up = self._clients[k].run(work, round_, self._seed, self._workspace)
        except Exception as err:
            err.add_note(f"(raised by client {k}'s local work in round {round_})")
            return k, None, ClientFailure(k, f"local work raised {type(err).__name__}: {err}", err)
        return k, state, up

    def fingerprint(self) -> dict:
        """Stacked clients agree with sequential ones to float32 rounding only, and the chunks
        (the memory budget) fix the order of the sums: a checkpoint covers both."""
        return {**super().fingerprint(), "execution": "vectorized", "memory_budget": self.memory_budget}

    def _chunk_size(self, sig: tuple, program: LocalProgram) -> int:
        if sig not in self._chunk:
            batch = max(ph.train.batch_size for ph in program.phases)
            self._workspace.load_state_dict(program.weights)
            data_bytes = program.x.numel() * program.x.element_size()
            self._chunk[sig] = chunk_size(self._workspace, program.x[:1], batch, self.memory_budget, data_bytes)
        return self._chunk[sig]


__all__ = ["DEFAULT_MEMORY_BUDGET", "PARAMETER_COPIES", "SequentialFallback", "VectorizedTransport", "activation_numel", "check_vectorizable_model", "chunk_size",
           "train_programs"]
