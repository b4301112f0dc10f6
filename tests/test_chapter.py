"""The chapter helper (fedlib.chapter): profile resolution, the seeded data choice, the check table
(its doctests run with the others: pytest --doctest-modules)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib.chapter import CheckTable, load_data, resolve, subsample
from fedlib.data import ArrayDataset
from fedlib.rng import DATA_SUBSET, derive_seed


def test_resolve_applies_overrides_and_refuses_unknowns():
    profiles = {"smoke": {"rounds": 2, "alphas": [0.3]}, "book": {"rounds": 20, "alphas": [0.3, 0.1]}}
    p = resolve(profiles, "book", rounds=None, alphas=[0.5])
    assert (p.profile, p.rounds, p.alphas) == ("book", 20, [0.5])
    with pytest.raises(ValueError, match="unknown profile 'fast'; valid: smoke, book"):
        resolve(profiles, "fast")
    with pytest.raises(ValueError, match="unknown parameter 'epochs'.*valid: alphas, rounds"):
        resolve(profiles, "book", epochs=3)


@pytest.mark.parametrize("key, value, words", [
    ("alphas", 0.5, r"'alphas' must be a list \(profile 'book' has \[0.3, 0.1\]\), got 0.5; for one value write \[0.5\]"),
    ("rounds", 2.5, r"'rounds' must be an integer .* got 2.5"),
    ("rounds", True, r"'rounds' must be an integer .* got True"),
    ("lr", "fast", r"'lr' must be a number .* got 'fast'"),
    ("dataset", 3, r"'dataset' must be a string .* got 3"),
    ("plot", 1, r"'plot' must be true or false .* got 1"),
])
def test_resolve_refuses_an_override_of_another_kind(key, value, words):
    profiles = {"book": {"rounds": 20, "alphas": [0.3, 0.1], "lr": 0.05, "dataset": "uci", "plot": True, "layers": None}}
    with pytest.raises(ValueError, match=words):
        resolve(profiles, "book", **{key: value})


def test_resolve_accepts_an_integer_for_a_number_a_tuple_for_a_list_and_anything_for_none():
    profiles = {"book": {"lr": 0.05, "alphas": [0.3], "layers": None}}
    p = resolve(profiles, "book", lr=1, alphas=(0.5, 0.1), layers=["block1"])
    assert (p.lr, p.alphas, p.layers) == (1, (0.5, 0.1), ["block1"])


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


def test_load_data_names_and_cifar_root():
    with pytest.raises(ValueError, match="unknown data set 'svhn'; valid: mnist5k, uci, cifar10, cifar100"):
        load_data("svhn")
    with pytest.raises(ValueError, match="cifar100 needs cifar_root: the folder that holds cifar-100-python/"):
        load_data("cifar100")
    uci = load_data("uci", n_samples=5000)  # more than it has: every sample
    assert len(uci) == 1797 and tuple(uci.x.shape[1:]) == (1, 28, 28)
    assert len(load_data("mnist5k", n_samples=300, seed=1)) == 300


def test_check_table_verdicts_and_columns():
    checks = CheckTable()
    assert checks.add("a", "h", 1e-13, 1e-12) is None  # a cell ending with a check shows nothing
    checks.add("b", "h", 3, 0, kind="count")
    checks.add("c", "h", 0.2, 1e-3, kind="at least")
    checks.add("d", "h", "shrinks for 80 %", ok=False, partly=True)
    table = checks.frame()
    assert list(table.columns) == ["statement", "how checked", "worst error / counterexamples", "tolerance", "verdict"]
    assert table["verdict"].tolist() == ["holds", "FAILS", "holds", "partly"]
    assert table["tolerance"].tolist() == ["<= 1e-12", "<= 0", ">= 1e-03", ""]
    assert (len(checks), checks.n_fail) == (4, 2)
    only_ok = CheckTable()
    only_ok.add("e", "h", "0 (symbolic)", ok=True)
    assert "tolerance" not in only_ok.frame().columns
    with pytest.raises(ValueError, match="give exactly one of tol and ok"):
        only_ok.add("f", "h", 0.0)
    with pytest.raises(ValueError, match="unknown kind 'relative'"):
        only_ok.add("f", "h", 0.0, 1.0, kind="relative")


def test_resolve_reads_the_notebooks_history_and_refuses_an_injected_unknown_parameter():
    profiles = {"book": {"rounds": 20}}
    history = ["", "profile = 'book'\nrounds = None  # communication rounds", "# Parameters\nround = 5\n"]
    namespace = {"In": history, "resolve": resolve, "profiles": profiles}
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) round; valid: profile, rounds"):
        exec("resolve(profiles, 'book', rounds=None)", namespace)
    namespace["In"] = [*history[:2], "# Parameters\nrounds = 5\n"]
    exec("P = resolve(profiles, 'book', rounds=5)", namespace)
    assert namespace["P"].rounds == 5
    assert resolve(profiles, "book").rounds == 20  # outside a notebook there is no history to check
