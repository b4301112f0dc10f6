"""make_federation: the global test set is balanced and disjoint, clients own disjoint data."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fedlib.algorithms import FedAvg
from fedlib.data import ArrayDataset, load_mnist5k, make_gaussian_mixture
from fedlib.engines.inprocess import InProcessTransport
from fedlib.federation import (hold_out_validation, make_federation, make_federations, make_rotation_federation,
                               one_client_per_domain)
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.messages import Message, State
from fedlib.metrics import Confusion, pooled_accuracy, pooled_effective_size, rescore
from fedlib.run import run_federated
from fedlib.training import TrainConfig


def _ids(ds):
    # identify samples by their exact feature vectors (the mixture's are continuous, hence unique)
    return {tuple(np.round(r, 6)) for r in ds.x.reshape(len(ds), -1).numpy()}


def test_federation_splits_are_disjoint_and_cover():
    ds = make_gaussian_mixture(n_per_class=50, n_classes=4, dim=3, seed=1).dataset
    fed = make_federation(ds, n_clients=5, alpha=0.3, min_size=5, global_test_per_class=10, seed=0)
    assert np.bincount(fed.global_test.labels_np).tolist() == [10, 10, 10, 10]
    parts = [_ids(fed.global_test)] + [_ids(c.train) for c in fed.clients] + [_ids(c.test) for c in fed.clients]
    assert sum(len(p) for p in parts) == len(ds) == len(set().union(*parts))
    for c in fed.clients:  # every class a client tests on locally, it has trained on
        assert set(c.test.labels_np) <= set(c.train.labels_np)
    assert fed.train_counts().shape == (5, 4)
    assert fed.summary()["n_train"].sum() + fed.summary()["n_local_test"].sum() == 160


def test_federation_is_seeded():
    ds = make_gaussian_mixture(n_per_class=30, n_classes=3, dim=2, seed=0).dataset
    a = make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=5, seed=4)
    b = make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=5, seed=4)
    c = make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=5, seed=5)
    assert (a.train_counts() == b.train_counts()).all()
    assert not (a.train_counts() == c.train_counts()).all()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"partition": "shards"}, "shards"),
    ({"alpha": 0.0}, "0.0"),
    ({"alpha": -1.0}, "-1.0"),
])
def test_bad_federation_arguments(kwargs, match):
    ds = make_gaussian_mixture(n_per_class=30, n_classes=3, dim=2, seed=0).dataset
    kwargs = {"partition": "dirichlet", "alpha": 0.5, **kwargs}
    if kwargs["partition"] != "dirichlet":
        kwargs.pop("alpha")
    with pytest.raises(ValueError, match=match):
        make_federation(ds, n_clients=3, global_test_per_class=5, **kwargs)


def test_more_clients_than_samples_is_refused():
    ds = make_gaussian_mixture(n_per_class=10, n_classes=2, dim=2, seed=0).dataset
    with pytest.raises(ValueError, match="100"):
        make_federation(ds, n_clients=100, partition="dirichlet", alpha=1.0, global_test_per_class=2)


def test_mnist_federation_matches_the_book_setting():
    fed = make_federation(load_mnist5k(), n_clients=20, alpha=0.1, min_size=10, global_test_per_class=100, seed=0)
    assert len(fed.global_test) == 1000
    assert sum(len(c.train) + len(c.test) for c in fed.clients) == 4000
    assert (fed.train_counts() == 0).any()  # alpha = 0.1 leaves classes unseen by some clients


def test_hold_out_validation_is_class_balanced_disjoint_and_seeded():
    ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    fed = make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=10, seed=0)
    rest, val = hold_out_validation(fed, 0.3, seed=5)
    assert np.bincount(val.labels_np).tolist() == [3, 3, 3] and np.bincount(rest.global_test.labels_np).tolist() == [7, 7, 7]
    both = np.concatenate([val.x.reshape(len(val), -1), rest.global_test.x.reshape(len(rest.global_test), -1)])
    assert len(np.unique(both, axis=0)) == len(fed.global_test)  # disjoint, and together the whole global test set
    assert rest.clients is fed.clients and rest.n_classes == fed.n_classes
    assert np.array_equal(hold_out_validation(fed, 0.3, seed=5)[1].x, val.x)  # the same seed, the same split
    assert not np.array_equal(hold_out_validation(fed, 0.3, seed=6)[1].x, val.x)  # another seed, another split
    assert len(hold_out_validation(fed, 0.0, seed=5)[1]) == 0
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            hold_out_validation(fed, bad, seed=5)
def test_make_federations_builds_one_federation_per_alpha_as_make_federation_does():
    ds = make_gaussian_mixture(n_per_class=40, n_classes=4, dim=2, seed=0).dataset
    common = dict(n_clients=5, global_test_per_class=5, seed=3)
    feds = make_federations(ds, [None, 0.5, 0.1], **common)
    assert list(feds) == [None, 0.5, 0.1]
    assert np.array_equal(feds[None].train_counts(), make_federation(ds, partition="iid", **common).train_counts())
    for a in (0.5, 0.1):
        alone = make_federation(ds, partition="dirichlet", alpha=a, min_size=10, **common)
        assert np.array_equal(feds[a].train_counts(), alone.train_counts()) and feds[a].description == alone.description
    assert (make_federations(ds, [0.1], min_size=2, **common)[0.1].description["min_size"]) == 2


@pytest.mark.parametrize("rare_ratio", [0.25, 0.5, 1.0])
def test_the_summary_counts_each_clients_rare_classes_as_the_protocol_defines_them(rare_ratio):
    ds = make_gaussian_mixture(n_per_class=60, n_classes=5, dim=2, seed=1).dataset
    fed = make_federation(ds, n_clients=6, alpha=0.3, min_size=5, global_test_per_class=5, seed=0)
    counts = fed.train_counts()
    # n_c / n < rho / C, written out on the client x class matrix (the setting chapter's former table)
    by_hand = ((counts > 0) & (counts * fed.n_classes < rare_ratio * counts.sum(axis=1, keepdims=True))).sum(axis=1)
    summary = fed.summary(rare_ratio)
    assert summary["rare_classes"].tolist() == by_hand.tolist() and by_hand.any()
    assert summary.drop(columns="rare_classes").equals(fed.summary()) and "rare_classes" not in fed.summary()


# --------------------------------------------------------------------------- client pools


class _RowReader(torch.nn.Module):
    """Reads the class off one row of a 4x4 image: the logits are that row's pixels (flipped:
    read right to left). The images below hold their label as one bright pixel at (0, label),
    so ``_RowReader(0)`` classifies upright images and ``_RowReader(3, flip=True)`` images
    rotated by 180 degrees (``rot90`` twice takes pixel (0, c) to (3, 3 - c)). Elsewhere on rows
    0 and 3 the images are 0, so a reader on the wrong orientation sees ties and predicts class 0.
    """

    calls: list = []  # the inputs of every forward pass (shared by deep copies of the module)

    def __init__(self, row: int = 0, flip: bool = False) -> None:
        super().__init__()
        self.row, self.flip = row, flip
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        _RowReader.calls.append(x)
        r = x[:, 0, self.row, :]  # (n, 4)
        return self.scale * (r.flip(-1) if self.flip else r)


def _pixel_images(n: int = 80, seed: int = 0) -> ArrayDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 4
    x = torch.zeros(n, 1, 4, 4)
    x[torch.arange(n), 0, 0, y] = 1.0
    x[:, 0, 1:3, :] = 0.1 * torch.rand(n, 2, 4, generator=g)  # distinct images; rows 0 and 3 stay clean
    return ArrayDataset(x, y, 4, "pixels")


def _scored(fed, model_fn, execution="sequential"):
    """One round of FedAvg with one tiny SGD step (the reader's positive scale stays positive, so
    its argmax predictions stay model_fn's) through the in-process (or vectorized) transport,
    evaluated by the loop: the client x ability table."""
    algorithm = FedAvg(train=TrainConfig(steps=1, lr=1e-6, momentum=0.0))
    run = run_federated(algorithm, fed, model_fn, LoopConfig(rounds=1, seed=0), RunOptions(execution=execution))
    return run.per_client()


def test_rotation_federation_pools_are_the_rotated_global_test_shared_per_group():
    fed, group = make_rotation_federation(_pixel_images(), n_clients=4, n_rotations=2, global_test_per_class=5)
    assert group.tolist() == [0, 0, 1, 1]
    assert fed.clients[0].pool is fed.clients[1].pool and fed.clients[2].pool is fed.clients[3].pool
    assert fed.clients[0].pool is fed.global_test  # rotation 0: the global test set itself
    assert torch.equal(fed.clients[2].pool.x, torch.rot90(fed.global_test.x, 2, dims=(2, 3)))
    assert all(np.array_equal(c.pool.labels_np, fed.global_test.labels_np) for c in fed.clients)
    assert fed.client_pool(2) is fed.clients[2].pool
    # the global test set stays upright: row 0 holds the label
    assert torch.equal(fed.global_test.x[:, 0, 0, :].argmax(1), fed.global_test.y)


@pytest.mark.parametrize("execution", ["sequential", "vectorized"])
@pytest.mark.parametrize(("reader", "matched"), [((0, False), (0, 1)), ((3, True), (2, 3))])
def test_a_rotated_client_is_scored_on_rotated_images(reader, matched, execution):
    fed, _ = make_rotation_federation(_pixel_images(), n_clients=4, n_rotations=2, global_test_per_class=5)
    table = _scored(fed, lambda: _RowReader(*reader), execution)
    assert {"local", "pooled", "global"} <= set(table.columns)
    pi0 = fed.train_counts()[:, 0] / fed.train_counts().sum(1)  # (n_clients,) the class-0 share
    for k in range(4):
        if k in matched:  # the predictor reads this client's orientation: right on every pool image
            assert table.loc[k, "pooled"] == 1.0 and table.loc[k, "local"] == 1.0
        else:  # the wrong orientation: every image predicted 0, recalls (1, 0, 0, 0), pooled = pi_0
            assert table.loc[k, "pooled"] == pytest.approx(pi0[k])
    # the global test set is upright for every client: the upright reader scores 1, the other 1/4
    assert (table["global"] == (1.0 if reader == (0, False) else 0.25)).all()


def test_one_pool_pass_per_pool_and_weights():
    fed, _ = make_rotation_federation(_pixel_images(), n_clients=4, n_rotations=2, global_test_per_class=5)
    _RowReader.calls.clear()
    transport = InProcessTransport(fed, _RowReader, seed=0)
    messages = {k: Message(arrays={"model/scale": torch.ones(())}) for k in range(4)}
    out = dict(transport.evaluate(FedAvg(), 1, messages, {k: State() for k in range(4)}, rare_ratio=0.5, f1_class=None))
    assert sorted(out) == [0, 1, 2, 3] and all("pooled" in ab for ab in out.values())
    on = lambda ds: sum(x.shape == ds.x.shape and torch.equal(x, ds.x) for x in _RowReader.calls)  # noqa: E731
    # one weights for all: one pass over the global test set (it is client 0's and 1's pool too:
    # no second pass), one over the rotated pool of clients 2 and 3, one over each local test split
    assert on(fed.global_test) == 1 and on(fed.clients[2].pool) == 1
    assert all(on(c.test) == 1 for c in fed.clients)
    # the kept predictions: (local, global, pool) for a client with a pool of its own, and rescoring them gives
    # the same abilities, pooled included
    kept = {}
    list(transport.evaluate(FedAvg(), 1, messages, {k: State() for k in range(4)}, rare_ratio=0.5, f1_class=None,
                            predictions=kept))
    assert all(len(v) == 3 and len(v[1]) == len(fed.global_test) and len(v[2]) == len(fed.clients[k].pool)
               for k, v in kept.items())
    again = rescore(fed, kept)
    assert [again.loc[k, "pooled"] for k in range(4)] == pytest.approx([out[k]["pooled"] for k in range(4)])
    assert np.isnan(rescore(fed, {k: v[:2] for k, v in kept.items()}).loc[2, "pooled"])  # without the pool's: NaN


def test_make_federation_pools_are_the_global_test_and_pool_sizes_by_hand():
    ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    fed = make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=10, seed=0)
    assert all(c.pool is None for c in fed.clients) and fed.client_pool(1) is fed.global_test
    pi = fed.train_counts() / fed.train_counts().sum(1, keepdims=True)  # (n_clients, C)
    np.testing.assert_allclose(fed.pool_sizes(), 1 / (pi ** 2 / 10).sum(1))
    assert (fed.pool_sizes() <= len(fed.global_test) + 1e-9).all()
    assert fed.pool_sizes().shape == (3,)
    with pytest.raises(ValueError, match=r"client must be an index in \[0, 3\) \(valid: 0..2\), got 3"):
        fed.client_pool(3)


def test_rotation_pool_sizes_count_the_rotated_pool():
    fed, _ = make_rotation_federation(_pixel_images(), n_clients=4, n_rotations=2, global_test_per_class=5)
    counts = fed.train_counts()
    expected = [pooled_effective_size(np.bincount(fed.clients[k].pool.labels_np, minlength=4), counts[k]) for k in range(4)]
    np.testing.assert_allclose(fed.pool_sizes(), expected)
    assert (fed.pool_sizes() > 15).all()  # IID mixes over 4 x 5 images: near the 20 of a uniform mix


def test_hold_out_validation_cuts_the_rotated_pools_too():
    fed, _ = make_rotation_federation(_pixel_images(), n_clients=4, n_rotations=2, global_test_per_class=5)
    rest, val = hold_out_validation(fed, 0.4, seed=1)
    assert len(rest.global_test) == 12 and len(val) == 8
    for c in rest.clients:
        assert len(c.pool) == 12 and np.array_equal(c.pool.labels_np, rest.global_test.labels_np)
    assert torch.equal(rest.clients[3].pool.x, torch.rot90(rest.global_test.x, 2, dims=(2, 3)))
    assert rest.clients[2].pool is rest.clients[3].pool  # still one copy per group
    assert rest.clients[0].pool is rest.global_test  # group 0's pool is still the global test set itself
    assert all(a.train is b.train and a.test is b.test for a, b in zip(rest.clients, fed.clients))


def test_one_client_per_domain_pool_is_the_domain_test():
    ds = ArrayDataset(torch.randn(40, 3), torch.arange(40) % 4, 4, "toy", domain=torch.arange(40) // 20,
                      domain_names=("a", "b"))
    fed, _ = one_client_per_domain(ds, {"a": 20, "b": 20}, test_share=0.25, client_share=0.5, seed=0)
    assert all(c.pool is c.test for c in fed.clients)
    rest, _ = hold_out_validation(fed, 0.2, seed=0)  # a pool that is not a copy of the global test stays as it is
    assert all(c.pool is c.test for c in rest.clients)


def test_dataclass_replace_and_ggeur_augmentation_keep_the_pool():
    from fedlib.algorithms.ggeur import GGEUR

    fed, _ = make_rotation_federation(_pixel_images(), n_clients=2, n_rotations=2, global_test_per_class=5)
    c = fed.clients[1]
    assert dataclasses.replace(c, test=c.train).pool is c.pool
    aug = GGEUR._augmented(c, {"x": torch.zeros(3, 1, 4, 4), "y": torch.zeros(3)})
    assert aug.pool is c.pool and aug.test is c.test and len(aug.train) == 3


def test_a_domain_clients_pool_is_scored_on_its_local_test_predictions():
    torch.manual_seed(0)
    ds = ArrayDataset(torch.randn(80, 3), torch.arange(80) % 4, 4, "toy", domain=torch.arange(80) // 40,
                      domain_names=("a", "b"))
    fed, _ = one_client_per_domain(ds, {"a": 40, "b": 40}, test_share=0.5, client_share=0.5, seed=0)
    seen = []

    class Linear(torch.nn.Linear):
        def forward(self, x):
            seen.append(x)
            return super().forward(x)

    transport = InProcessTransport(fed, lambda: Linear(3, 4), seed=0)
    arrays = {f"model/{k}": v for k, v in transport.initial_model.state_dict().items()}
    messages = {k: Message(arrays=arrays) for k in range(2)}
    kept = {}
    out = dict(transport.evaluate(FedAvg(), 1, messages, {k: State() for k in range(2)}, rare_ratio=0.5, f1_class=None,
                                  predictions=kept))
    for k, c in enumerate(fed.clients):
        local = Confusion.from_predictions(c.test.labels_np, kept[k][0], 4)
        assert out[k]["pooled"] == pytest.approx(pooled_accuracy(local, c.train_counts(4)))
        # the pool is the local test split: predicted once, not twice
        assert sum(x.shape == c.test.x.shape and torch.equal(x, c.test.x) for x in seen) == 1
