"""The teaching page's demonstration (*Teaching with this book*, ``notebooks/teaching.py``): a
method a student writes (the worked solution of the page's exercise, FedAvgM, read from
``book/exercises/``: :func:`demo_methods`), trained beside FedAvg on the same seed, federation and
client steps, as a study of one seed over the methods (:func:`demo_cell`).

The rest of the page reads the build (its records and the book's index): :mod:`fedbook.catalog`.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from fedlib.algorithms import FedAvg
from fedlib.data import load_uci_digits
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.models import build_model
from fedlib.protocol import Algorithm
from fedlib.run import run_federated
from fedlib.training import TrainConfig

TRAIN = TrainConfig(epochs=1, lr=0.05)
"""The local update both methods of the demonstration share."""


def demo_methods(folder: str | Path, beta: float, train: TrainConfig = TRAIN) -> dict[str, Algorithm]:
    """FedAvg and the exercise's worked solution, FedAvgM with server momentum ``beta``
    (``<folder>/fedavgm_solution.py``, imported as the module ``fedavgm_solution``), both with the
    local update ``train``."""
    path = Path(folder) / "fedavgm_solution.py"
    if "fedavgm_solution" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fedavgm_solution", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["fedavgm_solution"] = module  # a dataclass looks its module up while it is built
        spec.loader.exec_module(module)
    return {"fedavg": FedAvg(train=train), "fedavgm": sys.modules["fedavgm_solution"].FedAvgM(train=train, beta=beta)}


def demo_cell(seed: int, method: str, *, algorithms: Mapping[str, Algorithm], clients: int, rounds: int) -> pd.DataFrame:
    """``algorithms[method]`` trained for ``rounds`` rounds on the UCI digits (8 × 8) split over
    ``clients`` clients by a Dirichlet(0.5) label skew (at least 10 samples each, 20 global test
    images per class), with an MLP, run seed ``seed``: every method of a seed on the same
    federation, from the same initial weights.

    Returns
    -------
    DataFrame
        One row: ``global``, the final global accuracy (a fraction).
    """
    digits = load_uci_digits(size=8)
    fed = make_federation(digits, n_clients=clients, partition="dirichlet", alpha=0.5, min_size=10,
                          global_test_per_class=20, seed=seed)
    model = functools.partial(build_model, "mlp", in_channels=1, n_classes=digits.n_classes, input_size=8)
    summary = run_federated(algorithms[method], fed, model, LoopConfig(rounds=rounds, seed=seed)).summary()
    return pd.DataFrame([{"global": float(summary["global"])}])


__all__ = ["TRAIN", "demo_cell", "demo_methods"]
