"""fedlib.rng: no two consumers of a run share a stream, and seeds outside the supported range are refused."""

from __future__ import annotations

import numpy as np
import pytest

from fedlib import rng
from fedlib.rng import derive_seed

# Every key shape the library derives a stream with, by purpose (the purpose is the last key;
# see each purpose's docstring in fedlib.rng). "round", "client" and "cluster" run over
# realistic ranges below.
KEY_SHAPES = {
    "SAMPLING": ("round",), "LOCAL_TRAIN": ("round", "client"), "DEPLOY": ("round", "client"), "INIT": (),
    "EVAL_SAMPLE": ("round",), "GLOBAL_TEST": (), "PARTITION": (), "LOCAL_SPLIT": (), "VALIDATION": (),
    "PUBLIC_SPLIT": (), "ENCODER_INIT": (), "ENCODER_TRAIN": (), "CCVR_VIRTUAL": ((), ("round",)),
    "HDC_GROUPING": ("round",), "HDC_RANDOM_GROUPS": ("round",), "IFCA_INIT": ("cluster",),
    "DISTILL_CLIENT_INIT": ("client",), "DISTILL_SERVER": ("round", "cluster"), "COMET_KMEANS": ("round",),
    "DISTILL_SERVER_INIT": (), "LEADERBOARD_BOOTSTRAP": (), "LOCAL_ONLY_INIT": ("client",), "DATA_SUBSET": (),
}
RANGES = {"round": range(0, 201), "client": range(0, 101), "cluster": range(0, 11)}


def _keys(shape: tuple[str, ...]):
    grids = np.meshgrid(*[np.asarray(RANGES[name]) for name in shape], indexing="ij") if shape else []
    return zip(*(g.ravel().tolist() for g in grids)) if shape else [()]


def test_every_purpose_has_a_declared_key_shape():
    assert set(KEY_SHAPES) == set(rng.PURPOSES), set(KEY_SHAPES) ^ set(rng.PURPOSES)


@pytest.mark.parametrize("run_seeds", [(0, 1, 2)])
def test_no_two_streams_of_the_library_share_a_seed(run_seeds):
    seen: dict[int, tuple] = {}
    for seed in run_seeds:
        for purpose, shapes in KEY_SHAPES.items():
            shapes = shapes if shapes and isinstance(shapes[0], tuple) else [shapes]
            for shape in shapes:
                for keys in _keys(shape):
                    full = (seed, *keys, rng.PURPOSES[purpose])
                    s = derive_seed(*full)
                    assert s not in seen, f"{full} and {seen[s]} derive the same seed"
                    seen[s] = full
    assert len(seen) > 3 * 2 * 201 * 101  # the (round, client) streams alone, for every run seed


def test_keys_of_different_lengths_are_different_streams():
    # SeedSequence pads its entropy with zeros: the length comes first so that these differ
    assert derive_seed(0, 12, 0) != derive_seed(0, 12)
    assert derive_seed(5, 3) != derive_seed(5, 3, 0) != derive_seed(5, 3, 0, 0)
    assert derive_seed(0) != derive_seed(0, 0)


def test_round_twelves_sampling_is_not_the_partition():
    # before, derive_seed(s, 12, SAMPLING) == derive_seed(s, PARTITION): round 12's client sample drew the partition's numbers
    assert derive_seed(0, 12, rng.SAMPLING) != derive_seed(0, rng.PARTITION)
    assert derive_seed(0, 3, rng.SAMPLING) != derive_seed(0, rng.INIT)


@pytest.mark.parametrize("bad", [-1, 2**32, 2**40, 1.7, True, "3", None])
def test_seeds_and_keys_outside_the_range_are_refused(bad):
    with pytest.raises(ValueError, match=r"integer in \[0, 2\*\*32\)"):
        derive_seed(bad, 1)
    with pytest.raises(ValueError, match="stream key"):
        derive_seed(0, bad)


def test_the_largest_supported_seed_and_numpy_integers_are_accepted():
    assert derive_seed(2**32 - 1, 1) != derive_seed(0, 1)
    assert derive_seed(np.int64(4), np.uint32(2)) == derive_seed(4, 2)
    assert 0 <= derive_seed(7, 1, 2) < 2**63
