"""Seed derivation: one run seed, independent streams per (round, client, purpose).

Randomness is always an argument in fedlib (DESIGN.md, item 9). A run has one integer seed;
every consumer derives its own stream from it with :func:`derive_seed`, so that results do not
depend on the order in which clients are visited, and a resumed run draws exactly the numbers an
uninterrupted run would have drawn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

# Purposes, so that two consumers of the same (round, client) never share a stream.
SAMPLING = 0
LOCAL_TRAIN = 1
DEPLOY = 2
INIT = 3


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for the stream named by ``keys`` under the run seed ``seed``.

    >>> derive_seed(0, 3, 1) == derive_seed(0, 3, 1) != derive_seed(0, 1, 3)
    True
    """
    words = np.random.SeedSequence([int(seed), *[int(k) for k in keys]]).generate_state(2, np.uint32)
    return int((int(words[0]) << 31) ^ int(words[1])) & ((1 << 63) - 1)


def torch_generator(seed: int, *keys: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed`."""
    return torch.Generator().manual_seed(derive_seed(seed, *keys))


def numpy_rng(seed: int, *keys: int) -> np.random.Generator:
    """A numpy ``Generator`` seeded with :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, *keys))


@contextlib.contextmanager
def isolated_torch_rng(seed: int) -> Iterator[None]:
    """Run a block with torch's global CPU RNG seeded to ``seed``, restoring it afterwards.

    Modules that draw from the global RNG (weight initialisation, dropout) become deterministic
    without changing the caller's RNG state.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
