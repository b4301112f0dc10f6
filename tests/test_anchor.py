"""Sanity anchors at reduced size: the small CNN learns MNIST-5k centrally, and FedAvg on an IID
partition lands close to it (the book's protocol chapter shows the full-size version)."""

from __future__ import annotations

import functools

import torch

from fedlib.algorithms import FedAvg
from fedlib.data import load_mnist5k
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.metrics import Confusion
from fedlib.models import build_model
from fedlib.rng import torch_generator
from fedlib.training import TrainConfig, local_train, predict


def test_central_cnn_and_iid_fedavg_anchor():
    fed = make_federation(load_mnist5k(), n_clients=5, partition="iid", global_test_per_class=100, seed=0)
    model_fn = functools.partial(build_model, "cnn", in_channels=1, n_classes=10, input_size=28)
    x = torch.cat([c.train.x for c in fed.clients])
    y = torch.cat([c.train.y for c in fed.clients])
    central = build_model("cnn", in_channels=1, n_classes=10, seed=0)
    local_train(central, x, y, TrainConfig(epochs=3, batch_size=32, lr=0.05), torch_generator(0, 1))
    central_acc = Confusion.from_predictions(fed.global_test.labels_np, predict(central, fed.global_test.x).numpy(), 10).accuracy()
    run = run_federated(FedAvg(train=TrainConfig(epochs=1, batch_size=32, lr=0.05)), fed, model_fn, LoopConfig(rounds=6))
    fedavg_acc = run.summary()["global"]
    assert central_acc >= 0.95, central_acc
    assert fedavg_acc >= central_acc - 0.03, (central_acc, fedavg_acc)  # the book's 3-point tolerance
