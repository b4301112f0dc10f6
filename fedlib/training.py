"""Local training and prediction: the few lines every algorithm's client step shares.

Batches are drawn by index from tensors that already sit in memory (no ``DataLoader``), with a
``torch.Generator`` passed in by the caller, so a client's step is a pure function of
(model weights, data, generator).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TrainConfig:
    """How a client trains locally.

    ``steps`` (if given) overrides ``epochs``: the client takes exactly that many mini-batch
    steps, cycling through fresh permutations of its data.
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
        if self.epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {self.epochs}")
        if self.steps is not None and self.steps < 0:
            raise ValueError(f"steps must be >= 0 or None, got {self.steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer named by ``cfg.optimizer`` over ``params``."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


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
        left untouched (FedRep/FedBABU-style partial training).
    """
    model.train()
    params = list(model.parameters()) if params is None else list(params)
    opt = make_optimizer(params, cfg)
    total, count = 0.0, 0
    for idx in minibatches(len(y), cfg, generator):
        loss = loss_fn(model, x[idx], y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += float(loss.detach())
        count += 1
    model.eval()
    return total / count if count else float("nan")


@torch.no_grad()
def predict(predictor: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """Predicted labels ``argmax predictor(x)`` of shape (n,), computed in batches."""
    if isinstance(predictor, nn.Module):
        predictor.eval()
    out = [predictor(x[i : i + batch_size]).argmax(dim=1) for i in range(0, len(x), batch_size)]
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)
