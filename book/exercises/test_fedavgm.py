"""The provided test of the exercise "write your own method" (FedAvgM, ``fedavgm.py`` here).

Run it from the repository root:  ``.venv/bin/python -m pytest book/exercises``

It imports ``FedAvgM`` from ``fedavgm.py`` next to this file (your answer); set
``FEDLIB_EXERCISE=fedavgm_solution`` to run it against the worked solution instead.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
FedAvgM = importlib.import_module(os.environ.get("FEDLIB_EXERCISE", "fedavgm")).FedAvgM

from fedlib.algorithms import FedAvg  # noqa: E402
from fedlib.data import load_uci_digits  # noqa: E402
from fedlib.federation import make_federation  # noqa: E402
from fedlib.loop import LoopConfig  # noqa: E402
from fedlib.messages import Message, State  # noqa: E402
from fedlib.models import build_model  # noqa: E402
from fedlib.run import run_federated  # noqa: E402
from fedlib.training import TrainConfig  # noqa: E402


def _update(w: float, n: int) -> Message:
    return Message(arrays={"model/w": torch.tensor([w])}, meta={"n_samples": n})


def test_one_round_by_hand():
    # clients at 1.0 (3 samples) and 4.0 (1 sample): their average is 1.75; the server is at 3.0
    server = State(arrays={"model/w": torch.tensor([3.0])})
    method = FedAvgM(beta=0.5, server_lr=1.0)
    after = method.aggregate(server, [(0, _update(1.0, 3)), (1, _update(4.0, 1))], 1)
    # delta = 3.0 - 1.75 = 1.25, v = 1.25, w = 3.0 - 1.25 = 1.75 (the first step is FedAvg's)
    assert float(after.arrays["model/w"]) == pytest.approx(1.75)
    assert float(after.arrays["momentum/w"]) == pytest.approx(1.25)


def test_a_round_without_replies_changes_nothing_and_the_replies_stream():
    server = State(arrays={"model/w": torch.tensor([3.0])})
    assert FedAvgM().aggregate(server, [], 1) is server
    assert FedAvgM.capabilities.streams  # each reply is folded and freed: the momentum step needs none kept


def test_two_rounds_by_hand():
    method = FedAvgM(beta=0.5, server_lr=0.5)
    server = State(arrays={"model/w": torch.tensor([3.0])})
    server = method.aggregate(server, [(0, _update(1.0, 1))], 1)
    # round 1: delta = 2.0, v = 2.0, w = 3.0 - 0.5 * 2.0 = 2.0
    assert float(server.arrays["model/w"]) == pytest.approx(2.0)
    server = method.aggregate(server, [(0, _update(1.0, 1))], 2)
    # round 2: delta = 1.0, v = 0.5 * 2.0 + 1.0 = 2.0, w = 2.0 - 0.5 * 2.0 = 1.0
    assert float(server.arrays["momentum/w"]) == pytest.approx(2.0)
    assert float(server.arrays["model/w"]) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def federation():
    data = load_uci_digits(size=8)
    fed = make_federation(data, n_clients=4, partition="dirichlet", alpha=0.5, min_size=10,
                          global_test_per_class=10, seed=0)
    model_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=10, input_size=8)
    return fed, model_fn


def test_without_momentum_it_is_fedavg(federation):
    fed, model_fn = federation
    train = TrainConfig(epochs=1, lr=0.05)
    ours = run_federated(FedAvgM(train=train, beta=0.0, server_lr=1.0), fed, model_fn, LoopConfig(rounds=2, seed=0))
    theirs = run_federated(FedAvg(train=train), fed, model_fn, LoopConfig(rounds=2, seed=0))
    for name, w in theirs.server.arrays.items():
        assert torch.allclose(ours.server.arrays[name], w, atol=1e-6), name


def test_it_trains_in_the_loop_and_its_momentum_changes_the_model(federation):
    fed, model_fn = federation
    train = TrainConfig(epochs=1, lr=0.05)
    run = run_federated(FedAvgM(train=train, beta=0.9), fed, model_fn, LoopConfig(rounds=3, seed=0))
    acc = run.summary()["global"]
    assert math.isfinite(acc) and acc > 1 / fed.n_classes  # better than chance after three rounds
    assert any(name.startswith("momentum/") for name in run.server.arrays)  # the velocity is kept
    fedavg = run_federated(FedAvg(train=train), fed, model_fn, LoopConfig(rounds=3, seed=0))
    assert any(not torch.equal(run.server.arrays[n], w) for n, w in fedavg.server.arrays.items())
