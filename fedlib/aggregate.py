"""Aggregation as free functions over ``(values, weights)``, tested on hand-computed arrays (the
book's page *Inside fedlib*, "Conventions")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def normalized_weights(weights: Sequence[float]) -> torch.Tensor:
    """``w / w.sum()`` in float64; every weight must be finite and >= 0 with a positive sum."""
    w = torch.as_tensor(list(weights), dtype=torch.float64)
    if w.ndim != 1 or len(w) == 0:
        raise ValueError(f"need a non-empty list of weights, got {list(weights)!r}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or float(w.sum()) <= 0:
        raise ValueError(f"weights must be finite, >= 0 and sum to > 0, got {w.tolist()}")
    return w / w.sum()


def weighted_average(
    arrays: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float]
) -> dict[str, torch.Tensor]:
    r"""Sample-size-weighted average of named arrays (FedAvg's rule).

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
    w = normalized_weights(weights)
    names = list(arrays[0])
    for k, a in enumerate(arrays[1:], start=1):
        if list(a) != names:
            raise ValueError(f"update {k} has arrays {sorted(a)} but update 0 has {sorted(names)}")
    out: dict[str, torch.Tensor] = {}
    for name in names:
        first = arrays[0][name]
        if first.is_floating_point():
            stacked = torch.stack([a[name].to(torch.float64) for a in arrays])
            avg = torch.tensordot(w, stacked, dims=1)
            out[name] = avg.to(first.dtype)
        else:
            out[name] = torch.stack([a[name] for a in arrays]).max(dim=0).values
    return out
