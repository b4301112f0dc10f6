"""The hidden tests of the exercise "write your own method" (FedAvgM): kept by the teacher
(``book/build.py --handout`` copies them into the teacher's folder only) and run by
``book/grade.py`` beside the public ones. They check, by hand-computed values, what the public
tests leave open: three rounds of momentum, the server learning rate on its own, several arrays
and an integer array that is averaged and not stepped.

Like the public test, it imports ``FedAvgM`` from ``fedavgm`` (or from the module that
``FEDLIB_EXERCISE`` names).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
FedAvgM = importlib.import_module(os.environ.get("FEDLIB_EXERCISE", "fedavgm")).FedAvgM

from fedlib.messages import Message, State  # noqa: E402


def _reply(n: int, **arrays) -> Message:
    return Message(arrays={f"model/{k}": torch.tensor(v) for k, v in arrays.items()}, meta={"n_samples": n})


def test_three_rounds_of_momentum_by_hand():
    method = FedAvgM(beta=0.5, server_lr=1.0)
    server = State(arrays={"model/w": torch.tensor([4.0])})
    for round_ in (1, 2, 3):  # the one client always replies 0.0
        server = method.aggregate(server, [(0, _reply(1, w=[0.0]))], round_)
    # r1: delta 4, v 4, w 0; r2: delta 0, v 2, w -2; r3: delta -2, v -1, w -1
    assert float(server.arrays["momentum/w"]) == pytest.approx(-1.0)
    assert float(server.arrays["model/w"]) == pytest.approx(-1.0)


def test_the_server_learning_rate_scales_the_step():
    server = State(arrays={"model/w": torch.tensor([2.0])})
    after = FedAvgM(beta=0.9, server_lr=0.25).aggregate(server, [(0, _reply(1, w=[0.0]))], 1)
    # delta 2, v 2 (first round), w = 2 - 0.25 * 2 = 1.5
    assert float(after.arrays["model/w"]) == pytest.approx(1.5)


def test_every_array_is_stepped_with_its_own_velocity_and_integers_are_only_averaged():
    server = State(arrays={"model/a": torch.tensor([1.0, 1.0]), "model/b": torch.tensor([[0.0]]),
                           "model/count": torch.tensor([4])})
    replies = [(0, _reply(1, a=[0.0, 2.0], b=[[2.0]], count=[2])), (1, _reply(3, a=[0.0, 2.0], b=[[2.0]], count=[2]))]
    after = FedAvgM(beta=0.5, server_lr=1.0).aggregate(server, replies, 1)
    assert torch.allclose(after.arrays["model/a"], torch.tensor([0.0, 2.0]))
    assert torch.allclose(after.arrays["momentum/a"], torch.tensor([1.0, -1.0]))
    assert torch.allclose(after.arrays["model/b"], torch.tensor([[2.0]]))
    assert "momentum/count" not in after.arrays  # an integer array has no velocity
