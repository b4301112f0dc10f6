"""Seed derivation: one run seed, independent streams per (round, client, purpose).

Randomness is always an argument in fedlib (the book's page *Inside fedlib*, "Conventions"). A
run has one integer seed; every consumer derives its own stream from it with :func:`derive_seed`,
so that results do not depend on the order in which clients are visited, and a resumed run draws
exactly the numbers an uninterrupted run would have drawn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from .validation import is_int

# Every purpose of a random stream is a named constant here, with a value no other purpose uses,
# so that two consumers never share a stream (a stream is the run seed plus these keys; see
# derive_seed). The values are fixed forever: changing one changes every number drawn from it.

# the round loop, keyed by (round, client, purpose) or (purpose,)
SAMPLING = 0
"""Which clients a round samples: ``numpy_rng(seed, round, SAMPLING)``."""
LOCAL_TRAIN = 1
"""A client's local work in a round: ``derive_seed(seed, round, client, LOCAL_TRAIN)``."""
DEPLOY = 2
"""A client's deployment (e.g. fine-tuning) in an evaluated round: ``(seed, round, client, DEPLOY)``."""
INIT = 3
"""The initial model weights: ``derive_seed(seed, INIT)``."""
EVAL_SAMPLE = 4
"""The clients evaluated in a round when evaluation is on a sample (``LoopConfig(eval_clients=...)``), keyed by (round, purpose)."""
# building a federation (fedlib.federation.make_federation), keyed by (purpose,)
GLOBAL_TEST = 11
"""The class-balanced global test split."""
PARTITION = 12
"""The partition of the remaining samples over the clients."""
LOCAL_SPLIT = 13
"""Each client's train / local-test split."""
VALIDATION = 14
"""Validation splits: what a chapter selects on (a head, a setting) is chosen on them, never on a test set."""
# frozen encoders (fedlib.encoders), keyed by (purpose,)
PUBLIC_SPLIT = 41
"""The public (encoder-training) share of a data set."""
ENCODER_INIT = 42
"""A public encoder's initial weights."""
ENCODER_TRAIN = 43
"""A public encoder's training batches."""
# server-side randomness of the statistical heads, keyed by (round, purpose) or (purpose,)
CCVR_VIRTUAL = 44
"""CCVR's virtual features on the server (MPT's per-round CCVR baseline, the FedGRC CCVR head)."""
# server-side clustering (HDC-FL), keyed by (round, purpose)
HDC_GROUPING = 45
"""HDC-FL's k-means initializations at a refresh."""
HDC_RANDOM_GROUPS = 46
"""HDC-FL's random-groups ablation at a refresh."""
# IFCA, keyed by (cluster, purpose)
IFCA_INIT = 47
"""The initial weights of IFCA's cluster models beyond the first (the run's own initial model)."""
# public-set distillation (COSMOS and its baselines), keyed by (client, purpose) or (round, purpose)
DISTILL_CLIENT_INIT = 48
"""A client's own model's initial weights in a model-agnostic federation, keyed by (client, purpose)."""
DISTILL_SERVER = 49
"""The server's distillation on the public set (COSMOS's cluster models), keyed by (round, cluster, purpose)."""
COMET_KMEANS = 50
"""COMET's k-means initializations on the clients' pseudo-labels, keyed by (round, purpose)."""
DISTILL_SERVER_INIT = 51
"""The initial weights of COSMOS's cluster models (one draw, shared by every cluster), keyed by (purpose,)."""
# chapters
LEADERBOARD_BOOTSTRAP = 61
"""The leaderboard's resamples of the seeds when it ranks the methods
(:func:`fedbook.studies.leaderboard.rank_bootstrap`), keyed by (purpose,)."""
LOCAL_ONLY_INIT = 98
"""The initial weights of a model trained on one client's data alone (a chapter's local-training-alone
reference: COSMOS's synthetic federation, :mod:`fedbook.studies.cosmos_synthetic`), keyed by (client, purpose)."""
DATA_SUBSET = 99
"""A chapter's seeded subsample of its data set."""

PURPOSES = {name: value for name, value in globals().items() if name.isupper() and isinstance(value, int)}
"""Every named purpose and its stream key (a test checks that the values are distinct)."""


STREAMS_VERSION = 2
"""The version of :func:`derive_seed`'s derivation (2: length-separated keys). A checkpoint's
fingerprint carries it, so a run saved under another derivation is refused instead of resuming
with other random numbers."""
SEED_RANGE = (0, 2**32)
"""Run seeds and stream keys are integers in ``[0, 2**32)`` (one 32-bit word each): larger values
would be split into several words and alias other keys, so they are refused."""


def _word(value, name: str) -> int:
    if not is_int(value) or not 0 <= value < SEED_RANGE[1]:
        raise ValueError(f"{name} must be an integer in [0, 2**32), got {value!r}; fedlib's seeds and stream keys "
                         "are 32-bit words (a larger seed would alias another stream)")
    return int(value)


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for the stream named by ``keys`` under the run seed ``seed``.

    The entropy handed to ``numpy.random.SeedSequence`` is ``[len(keys), seed, *keys]``: the
    number of keys comes first, so that keys of different lengths can never collide
    (``SeedSequence`` pads its entropy with zeros, so without it ``(seed, r, 0)`` would be the
    stream ``(seed, r)``), and every value is one 32-bit word (:data:`SEED_RANGE`), so that
    distinct key tuples give distinct entropy. A test derives every key shape the library uses
    over realistic rounds and clients and checks that no two seeds are equal.

    Raises
    ------
    ValueError
        On a seed or key that is not an integer in ``[0, 2**32)`` (a float, a bool, a negative
        number, ``2**32`` or more).

    Examples
    --------
    >>> derive_seed(0, 3, 1) == derive_seed(0, 3, 1) != derive_seed(0, 1, 3)
    True
    >>> derive_seed(0, 12) != derive_seed(0, 12, 0)  # a shorter key is another stream
    True
    """
    words = [len(keys), _word(seed, "seed"), *(_word(k, f"stream key {i}") for i, k in enumerate(keys))]
    state = np.random.SeedSequence(words).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def torch_generator(seed: int, *keys: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed`."""
    return torch.Generator().manual_seed(derive_seed(seed, *keys))


def numpy_rng(seed: int, *keys: int) -> np.random.Generator:
    """A numpy ``Generator`` seeded with :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, *keys))


@contextlib.contextmanager
def isolated_torch_rng(seed: int) -> Iterator[None]:
    """Run a block with torch's global CPU generator seeded to ``seed``, restoring its state afterwards.

    Modules that draw from the global generator (weight initialisation, dropout) become
    deterministic without changing the caller's random state. What it guarantees:

    - inside the block, the global CPU generator draws the stream of
      ``torch.Generator().manual_seed(seed)`` (the stream ``torch.manual_seed(seed)`` starts);
    - on leaving the block, normally or by an exception (the exception propagates), the global CPU
      generator's state is restored to the one it had on entry, byte for byte: the state is saved
      before seeding and set back in a ``finally`` clause, so the caller's later draws are the
      ones it would have made without the block.

    Only the CPU generator is seeded and restored (what ``torch.random.fork_rng(devices=[])`` with
    ``torch.manual_seed`` did to it, the same bits): ``torch.manual_seed`` would also queue a
    seeding of every accelerator's generator, each with a formatted stack trace (about 0.4 ms a
    call on a CPU, thousands of calls a chapter), and leave them seeded. The global generator is
    shared by every thread: a thread drawing from it during the block draws from the seeded stream.

    Examples
    --------
    >>> before = torch.get_rng_state()
    >>> with isolated_torch_rng(7):
    ...     a = torch.rand(2)
    >>> with isolated_torch_rng(7):
    ...     b = torch.rand(2)
    >>> bool(torch.equal(a, b)), bool(torch.equal(a, torch.rand(2, generator=torch.Generator().manual_seed(7))))
    (True, True)
    >>> try:
    ...     with isolated_torch_rng(7):
    ...         _ = torch.rand(5)
    ...         raise RuntimeError("the block fails")
    ... except RuntimeError:
    ...     pass
    >>> bool(torch.equal(torch.get_rng_state(), before))  # the caller's state, the failed block included
    True
    """
    state = torch.get_rng_state()
    try:
        torch.default_generator.manual_seed(int(seed))
        yield
    finally:
        torch.set_rng_state(state)
