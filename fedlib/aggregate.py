"""Aggregation as free functions over ``(values, weights)``, tested on hand-computed arrays (the
book's page *Inside fedlib*, "Conventions"); a running weighted mean (:class:`WeightedMean`), so
that a rule over the round's replies never holds them at once; and FedAvg's rule over the
replies themselves (:func:`model_average`), every method's default aggregation."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import torch

from .messages import Message, State, prefixed


def normalized_weights(weights: Sequence[float]) -> torch.Tensor:
    """``w / w.sum()`` in float64; every weight must be finite and >= 0 with a positive sum."""
    w = torch.as_tensor(list(weights), dtype=torch.float64)
    if w.ndim != 1 or len(w) == 0:
        raise ValueError(f"need a non-empty list of weights, got {list(weights)!r}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or float(w.sum()) <= 0:
        raise ValueError(f"weights must be finite, >= 0 and sum to > 0, got {w.tolist()}")
    return w / w.sum()


class WeightedMean:
    r"""A running sample-weighted mean of named arrays: aggregation as a fold over replies.

    .. math:: \bar\theta = \frac{\sum_k n_k \theta_k}{\sum_k n_k}

    :meth:`add` one reply's arrays and weight at a time, :meth:`finish` once: the server holds one
    float64 running sum per array (and the total weight), never the list of replies, so a round's memory does not grow
    with the number of clients. Floating arrays are summed in float64 (in place, no temporary
    copy) and cast back to their dtype; integer arrays (e.g. BatchNorm's
    ``num_batches_tracked``) keep the running maximum. :func:`weighted_average` is this fold
    over a list, so the list and the fold give the same bits.

    Examples
    --------
    >>> mean = WeightedMean()
    >>> mean.add({"w": torch.tensor([0.0])}, 2)
    >>> mean.add({"w": torch.tensor([3.0])}, 1)
    >>> len(mean), mean.finish()["w"]
    (2, tensor([1.]))
    """

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._dtypes: dict[str, torch.dtype] = {}
        self._names: list[str] | None = None
        self._total = 0.0
        self._count = 0

    def __len__(self) -> int:
        """How many replies were added."""
        return self._count

    def add(self, arrays: Mapping[str, torch.Tensor], weight: float) -> None:
        """Fold in one reply's ``arrays`` with its ``weight`` (finite, >= 0; e.g. its sample count)."""
        w = float(weight)
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"weights must be finite, >= 0 and sum to > 0, got {w} for update {self._count}")
        names = list(arrays)
        if self._names is None:
            self._names = names
            for name, a in arrays.items():
                self._dtypes[name] = a.dtype
                if a.is_floating_point():
                    self._sums[name] = torch.zeros(a.shape, dtype=torch.float64).add_(a.detach(), alpha=w)
                else:
                    self._sums[name] = a.detach().clone()
        else:
            if names != self._names:
                raise ValueError(f"update {self._count} has arrays {sorted(names)} but update 0 has {sorted(self._names)}")
            for name, a in arrays.items():
                acc = self._sums[name]
                if a.shape != acc.shape or a.is_floating_point() != self._dtypes[name].is_floating_point:
                    raise ValueError(f"update {self._count} has '{name}' of shape {tuple(a.shape)} and dtype {a.dtype}, "
                                     f"but update 0 has shape {tuple(acc.shape)} and dtype {self._dtypes[name]}")
            for name, a in arrays.items():
                acc = self._sums[name]
                if acc.dtype == torch.float64 and self._dtypes[name].is_floating_point:
                    acc.add_(a.detach(), alpha=w)
                else:
                    torch.maximum(acc, a, out=acc)
        self._total += w
        self._count += 1

    def finish(self) -> dict[str, torch.Tensor]:
        """The weighted mean of everything added (each array in its own dtype)."""
        if self._names is None:
            raise ValueError("need a non-empty list of weights, got []: no reply was added")
        if self._total <= 0:
            raise ValueError(f"weights must be finite, >= 0 and sum to > 0, got {self._count} weight(s) summing to {self._total}")
        return {name: (acc / self._total).to(self._dtypes[name]) if self._dtypes[name].is_floating_point else acc
                for name, acc in self._sums.items()}


def weighted_average(
    arrays: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float]
) -> dict[str, torch.Tensor]:
    r"""Sample-size-weighted average of named arrays (FedAvg's rule): :class:`WeightedMean`
    folded over the list, so it gives the same bits as the streaming fold.

    .. math:: \bar\theta = \sum_k \frac{n_k}{\sum_j n_j} \theta_k

    Floating arrays are averaged in float64 and cast back to their dtype; integer arrays (e.g.
    BatchNorm's ``num_batches_tracked``) take the maximum.

    Parameters
    ----------
    arrays : sequence of K dicts with the same names and shapes
    weights : sequence of K non-negative numbers (e.g. sample counts)

    Examples
    --------
    >>> weighted_average([{"w": torch.tensor([0.0])}, {"w": torch.tensor([3.0])}], [2, 1])["w"]
    tensor([1.])
    """
    if len(arrays) != len(weights):
        raise ValueError(f"got {len(arrays)} arrays but {len(weights)} weights")
    normalized_weights(weights)  # the same checks, with every weight in the message
    mean = WeightedMean()
    for a, w in zip(arrays, weights):
        mean.add(a, w)
    return mean.finish()


def model_average(server: State, replies: Iterable[tuple[int, Message]], prefix: str = "model/") -> State:
    r"""FedAvg's aggregation (McMahan et al., AISTATS 2017, Algorithm 1): the server state with
    its ``prefix``-ed arrays replaced by the replies' sample-weighted mean,

    .. math:: \bar\theta = \frac{\sum_k n_k \theta_k}{\sum_k n_k}, \qquad n_k = \text{reply}_k\text{.meta["n\_samples"]},

    and its other arrays and metadata kept. ``replies`` (``(client, reply)`` pairs, as the loop
    hands them to :meth:`fedlib.protocol.Algorithm.aggregate`) is read once: each reply is folded
    into a running float64 sum (:class:`WeightedMean`) and freed before the next one is read, so a
    round's memory does not grow with its clients. No reply: ``server`` itself.

    >>> up = lambda w, n: (0, Message({"model/w": torch.tensor([w])}, {"n_samples": n}))
    >>> model_average(State({"model/w": torch.zeros(1), "other": torch.ones(1)}), [up(0.0, 2), up(3.0, 1)]).arrays
    {'model/w': tensor([1.]), 'other': tensor([1.])}
    """
    mean = WeightedMean()
    for _, reply in replies:
        mean.add(reply.with_prefix(prefix), float(reply.meta["n_samples"]))
        del reply  # freed before the loop's next client trains
    if not len(mean):
        return server
    return State(arrays={**server.arrays, **prefixed(prefix, mean.finish())}, meta=dict(server.meta))


__all__ = ["WeightedMean", "model_average", "normalized_weights", "weighted_average"]
