"""make_federation: the global test set is balanced and disjoint, clients own disjoint data."""

from __future__ import annotations

import numpy as np
import pytest

from fedlib.data import load_mnist5k, make_gaussian_mixture
from fedlib.federation import hold_out_validation, make_federation, make_federations


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
