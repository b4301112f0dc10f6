"""The data registry's seeded subsets (fedlib.data.load_dataset, fedlib.data.subsample): a data set by
its profile's name, seeded-subsampled (the doctests run with the others: pytest --doctest-modules)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib.data import ArrayDataset, load_dataset, subsample
from fedlib.rng import DATA_SUBSET, derive_seed


def _toy(n=50):
    return ArrayDataset(torch.arange(float(n))[:, None], torch.arange(n) % 3, n_classes=3, name="toy")


def test_subsample_is_the_sorted_seeded_choice_of_the_purpose_stream():
    toy = _toy()
    for seed in (0, 3):
        expected = np.sort(np.random.default_rng(derive_seed(seed, DATA_SUBSET)).choice(50, 7, replace=False))
        assert subsample(toy, 7, seed).x.flatten().long().tolist() == expected.tolist()
        other = np.sort(np.random.default_rng(derive_seed(seed, 13)).choice(50, 7, replace=False))
        assert subsample(toy, 7, seed, key=13).x.flatten().long().tolist() == other.tolist()
    assert subsample(toy, None, 0) is toy and subsample(toy, 80, 0) is toy
    with pytest.raises(ValueError, match="n_samples must be None .* or an integer >= 1, got 0"):
        subsample(toy, 0, 0)


def test_load_dataset_names_and_cifar_root():
    with pytest.raises(ValueError, match="unknown dataset 'svhn'; valid: mnist5k, uci, uci8, cifar10, cifar100"):
        load_dataset("svhn")
    with pytest.raises(ValueError, match="cifar100 needs root: the folder that holds cifar-100-python/"):
        load_dataset("cifar100")
    uci = load_dataset("uci", n_samples=5000)  # more than it has: every sample
    assert len(uci) == 1797 and tuple(uci.x.shape[1:]) == (1, 28, 28)
    assert len(load_dataset("mnist5k", n_samples=300, seed=1)) == 300
