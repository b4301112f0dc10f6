"""fedlib.rng: no two consumers of a run share a stream, seeds outside the supported range are refused, and
isolated_torch_rng draws the seed's stream and restores the caller's state, a failing block included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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


# --- isolated_torch_rng: the seeded stream inside, the caller's state restored after (a finally clause) ---


@pytest.mark.parametrize("seed", [0, 5, 2**32 - 1, derive_seed(3, rng.INIT)])
def test_isolated_torch_rng_draws_the_seeds_stream(seed):
    with rng.isolated_torch_rng(seed):
        inside = torch.rand(4)
    assert torch.equal(inside, torch.rand(4, generator=torch.Generator().manual_seed(seed)))
    with torch.random.fork_rng(devices=[]):  # the stream torch.manual_seed starts, the global state restored after
        torch.manual_seed(seed)
        assert torch.equal(inside, torch.rand(4))


def test_isolated_torch_rng_restores_the_global_state_when_the_block_ends_or_raises():
    before = torch.get_rng_state()
    with rng.isolated_torch_rng(5):
        a = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), before)
    with pytest.raises(RuntimeError, match="the block fails"):  # the exception propagates ...
        with rng.isolated_torch_rng(5):
            b = torch.rand(3)
            torch.randn(100)  # draws past a's, so a missing restore would leave another state
            raise RuntimeError("the block fails")
    assert torch.equal(torch.get_rng_state(), before)  # ... and the state is restored all the same
    assert torch.equal(a, b)
    # the caller's next draws are those of its saved state (checked on a copy, the global state restored)
    with torch.random.fork_rng(devices=[]):
        expected = torch.rand(3, generator=torch.Generator().set_state(before))
        assert torch.equal(torch.rand(3), expected)
