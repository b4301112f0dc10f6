"""The registry: every registered name builds, runs the one loop on a tiny federation, is
deterministic, and its replies and deployments follow the protocol."""

from __future__ import annotations

import functools

import pandas as pd
import pytest
import torch

from fedlib.algorithms import ALGORITHMS, make_algorithm
from fedlib.algorithms.hdcfl import HDCConfig
from fedlib.cgrl import CGRLConfig
from fedlib.distill import PublicSet
from fedlib.models import build_model
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.protocol import Algorithm
from fedlib.training import TrainConfig

TRAIN = TrainConfig(epochs=1, batch_size=16, lr=0.05)
ADAM = TrainConfig(epochs=1, batch_size=16, optimizer="adam", lr=1e-2)
# the model-agnostic methods' public set: random inputs of the mixture's shape (16 features)
PUBLIC = PublicSet(torch.randn(12, 16, generator=torch.Generator().manual_seed(0)))
SERVER = functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,))

# the few arguments each method needs on a 3-class, 16-feature mixture (everything else: defaults)
KWARGS = {
    "fedavg": dict(train=TRAIN),
    "fedavg_ft": dict(train=TRAIN, finetune=TrainConfig(epochs=1, batch_size=16, lr=0.01)),
    "ditto": dict(train=TRAIN, personal_train=TRAIN),
    "fedbabu": dict(train=TRAIN, finetune=TrainConfig(epochs=1, batch_size=16, lr=0.01)),
    "fedetf": dict(train=TRAIN),
    "fedrep": dict(train=TRAIN, head_train=TRAIN),
    "fedprox": dict(train=TRAIN),
    "fedproto": dict(train=TRAIN),
    "ggeur": dict(total_per_class=10),
    "fedfa_style": dict(),
    "fedmix_style": dict(),
    "rebalanced": dict(total_per_class=10),
    "mpt": dict(train=TRAIN, rare_class=1, ldc_epochs=1, ccvr_steps=2, ccvr_virtual=4),
    "cgrl": dict(train=TRAIN, cgrl=CGRLConfig(augment="none", warmup=1)),
    "fedavg_se": dict(train=TRAIN),
    "hdcfl": dict(train=TRAIN, config=HDCConfig(rank=2, k_max=3, refresh_every=1, max_activation_round=2)),
    "ifca": dict(train=TRAIN, k=2),
    "cosmos": dict(public=PUBLIC, server_model=SERVER, target_clusters=2, train=ADAM, pretrain=ADAM, distill=ADAM, server_train=ADAM),
    "fedmd": dict(public=PUBLIC, train=ADAM, pretrain=ADAM, distill=ADAM),
    "fedct": dict(public=PUBLIC, train=ADAM, pretrain=ADAM, distill=ADAM),
    "comet": dict(public=PUBLIC, k=2, train=ADAM, pretrain=ADAM, distill=ADAM),
}


def test_every_registered_name_is_covered_here():
    assert set(KWARGS) == set(ALGORITHMS), "add the new method to KWARGS so that this module tests it"


def test_an_unknown_name_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown algorithm 'fedsgd'; valid: .*fedavg"):
        make_algorithm("fedsgd")


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_registered_method_runs_the_loop(name, tiny_federation, tiny_model_fn):
    algorithm = make_algorithm(name, **KWARGS[name])
    assert isinstance(algorithm, Algorithm) and isinstance(algorithm, ALGORITHMS[name])
    cfg = LoopConfig(rounds=3, seed=1, eval_every=0)
    run = run_federated(algorithm, tiny_federation, tiny_model_fn, cfg)
    summary = run.summary()
    assert 0.0 <= summary["local"] <= 1.0 and 0.0 <= summary["global"] <= 1.0
    led = run.ledger.to_frame()
    assert set(led["direction"]) == {"up", "down"} and (led["bytes"] > 0).all()
    assert run.algorithm == algorithm.name
    # the same seed gives the same results, bit for bit
    again = run_federated(make_algorithm(name, **KWARGS[name]), tiny_federation, tiny_model_fn, cfg)
    pd.testing.assert_frame_equal(run.frame, again.frame)
    assert run.server.arrays.keys() == again.server.arrays.keys()
    for k in run.server.arrays:  # bit for bit (a NaN, e.g. MPT's alpha before any departure, equals a NaN)
        torch.testing.assert_close(run.server.arrays[k], again.server.arrays[k], rtol=0, atol=0, equal_nan=True)
