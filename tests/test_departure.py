"""The departure scenario: fedlib.data.partition.departure_partition and fedlib.federation.make_departure_scenario."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlib.data import make_gaussian_mixture
from fedlib.federation import make_departure_scenario


@pytest.fixture(scope="module")
def mixture():
    return make_gaussian_mixture(n_per_class=120, n_classes=4, dim=4, seed=0).dataset


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 7), st.integers(0, 3), st.sampled_from([0.9, 0.95, 0.98, 0.99, 1.0, 0.0]), st.integers(0, 100))
def test_rare_class_shares_and_uniform_others(n_clients, rare, share, seed):
    ds = make_gaussian_mixture(n_per_class=120, n_classes=4, dim=4, seed=1).dataset
    dep = seed % n_clients
    sc = make_departure_scenario(ds, n_clients=n_clients, rare_class=rare, departing_share=share, departing_client=dep,
                                 global_test_per_class=20, seed=seed)
    counts = sc.federation.train_counts()
    n_rare = 100
    assert counts[dep, rare] == round(share * n_rare) == sc.n_rare_departing
    assert counts[:, rare].sum() == n_rare and sc.n_rare_remaining == n_rare - sc.n_rare_departing
    others = np.delete(counts[:, rare], dep)
    assert others.max() - others.min() <= 1  # dealt as evenly as possible
    for c in range(4):
        if c != rare:
            assert counts[:, c].max() - counts[:, c].min() <= 1
    assert len(sc.federation.global_test) == 80
    assert np.bincount(sc.federation.global_test.labels_np, minlength=4).tolist() == [20] * 4


def test_deterministic(mixture):
    a = make_departure_scenario(mixture, n_clients=3, seed=5).federation.train_counts()
    b = make_departure_scenario(mixture, n_clients=3, seed=5).federation.train_counts()
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"rare_class": 4}, "rare_class"), ({"rare_class": -1}, "rare_class"), ({"departing_share": 1.5}, "departing_share"),
     ({"departing_client": 5}, "departing_client"), ({"n_clients": 1}, "n_clients"),
     ({"global_test_per_class": 120}, "no sample left")],
)
def test_bad_input(mixture, kwargs, match):
    args = {"n_clients": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_departure_scenario(mixture, **args)


def test_missing_rare_class(mixture):
    sub = mixture.subset(np.flatnonzero(mixture.labels_np != 2))
    with pytest.raises(ValueError, match="no sample"):
        make_departure_scenario(sub, n_clients=3, rare_class=2)
