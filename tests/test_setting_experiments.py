"""The setting chapter's procedures (fedbook.studies.setting): each equal to the computation the
chapter once wrote out, and its words checked on both sides of every choice they make."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedlib.algorithms import FedAvg, FedAvgFT
from fedlib.data import make_gaussian_mixture
from fedbook.studies.setting import (MEANS, by_points, central_accuracy, direction, fedavg_and_finetune,
                                        finetune_sweep, finetune_words, gains_or_loses, learning_rate_words,
                                        mean_unseen, partition_table, points_below, rare_threshold_words,
                                        rare_thresholds, skew_words, tradeoff_text)
from fedlib.federation import make_federations
from fedlib.loop import LoopConfig
from fedlib.results import per_client_table
from fedlib.metrics import Confusion, protocol_summary, rescore
from fedlib.rng import INIT, derive_seed, isolated_torch_rng, torch_generator
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig, local_train, predict

TRAIN = TrainConfig(epochs=1, batch_size=16, lr=0.05)
FINETUNE = TrainConfig(epochs=1, batch_size=16, lr=0.01)
CONFIG = LoopConfig(rounds=2, seed=0)


def _same(a: dict, b: dict) -> bool:
    """The same numbers bit for bit, NaN (an ability no client has) equal to NaN."""
    return pd.Series(a, dtype=float).equals(pd.Series(b, dtype=float))


@pytest.fixture(scope="module")
def federations():
    ds = make_gaussian_mixture(n_per_class=60, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    return make_federations(ds, [None, 0.5, 0.1], n_clients=4, global_test_per_class=10, seed=0)


@pytest.fixture(scope="module")
def comparison(federations, tiny_model_fn):
    return fedavg_and_finetune({a: federations[a] for a in (0.5, 0.1)}, tiny_model_fn, CONFIG, TRAIN, FINETUNE)


def test_the_partition_table_is_the_one_the_chapter_wrote_out(federations):
    rho = 0.5
    rows = []
    for name, fed in zip(["IID", "Dirichlet α = 0.5", "Dirichlet α = 0.1"], federations.values()):
        s, counts = fed.summary(), fed.train_counts()
        rare = ((counts > 0) & (counts * fed.n_classes < rho * counts.sum(axis=1, keepdims=True))).sum(axis=1)
        rows.append({"partition": name, "train samples": int(s["n_train"].sum()),
                     "local test samples": int(s["n_local_test"].sum()), "global test samples": len(fed.global_test),
                     "classes seen (mean)": s["classes_seen"].mean(),
                     "unseen classes (mean)": (fed.n_classes - s["classes_seen"]).mean(),
                     "rare classes (mean)": rare.mean(), "largest class share (mean)": s["largest_class_share"].mean()})
    pd.testing.assert_frame_equal(partition_table(federations, rho), pd.DataFrame(rows).set_index("partition"),
                                  check_exact=True)
    assert partition_table(federations, rho).loc["IID", "unseen classes (mean)"] == 0
    assert mean_unseen(federations[0.1]) == pytest.approx(partition_table(federations, rho).iloc[2, 4])


def test_the_central_anchor_trains_the_pooled_splits_from_the_runs_initial_weights(federations, tiny_model_fn):
    fed, central = federations[None], TrainConfig(epochs=3, batch_size=16, lr=0.05)
    accuracy, seconds = central_accuracy(fed, tiny_model_fn, central, seed=3)
    with isolated_torch_rng(derive_seed(3, INIT)):
        model = tiny_model_fn()
    local_train(model, torch.cat([c.train.x for c in fed.clients]), torch.cat([c.train.y for c in fed.clients]),
                central, torch_generator(3, 0, 0, 7))
    pred = predict(model, fed.global_test.x).numpy()
    assert accuracy == Confusion.from_predictions(fed.global_test.labels_np, pred, fed.n_classes).accuracy()
    assert accuracy > 0.9 and seconds > 0  # three well-separated classes


def test_one_fedavg_run_per_alpha_is_deployed_as_it_is_and_fine_tuned(federations, comparison, tiny_model_fn):
    assert list(comparison.runs) == [0.5, 0.1]
    assert comparison.summary.index.tolist() == [(0.5, "FedAvg"), (0.5, "FedAvg-FT"), (0.1, "FedAvg"), (0.1, "FedAvg-FT")]
    for a in (0.5, 0.1):
        run, fed = comparison.runs[a], federations[a]
        alone = run_federated(FedAvg(train=TRAIN), fed, tiny_model_fn, CONFIG)
        assert _same(alone.summary(), run.summary())  # keeping the predictions changes nothing
        ft = per_client_table(evaluate_deployment(FedAvgFT(train=TRAIN, finetune=FINETUNE), run, fed, tiny_model_fn,
                                                  CONFIG))
        pd.testing.assert_frame_equal(comparison.per_client[(a, "FedAvg-FT")], ft)
        for method in ("FedAvg", "FedAvg-FT"):
            expected = protocol_summary(comparison.per_client[(a, method)])
            assert _same(comparison.summary.loc[(a, method)].to_dict(), expected)
            # the kept predictions score again as the deployment did (the chapter's Exercise 2 relies on it)
            again = protocol_summary(rescore(fed, comparison.predictions[(a, method)], CONFIG.rare_ratio))
            assert again == pytest.approx(expected, nan_ok=True)
    s = comparison.summary
    assert comparison.change(0.1, "local") == pytest.approx(100 * (s.loc[(0.1, "FedAvg-FT"), "local"]
                                                                   - s.loc[(0.1, "FedAvg"), "local"]))
    percent = comparison.percent(MEANS)
    assert percent.columns.tolist() == list(MEANS.values()) and percent.index.names == ["α", "method"]
    assert percent.iloc[0, 0] == 100 * s.iloc[0]["local"]


def test_the_comparison_saves_each_run_and_the_fine_tuned_frame(federations, tiny_model_fn, tmp_path):
    fedavg_and_finetune({0.1: federations[0.1]}, tiny_model_fn, LoopConfig(rounds=1, seed=0), TRAIN, FINETUNE,
                        results_dir=tmp_path)
    assert (tmp_path / "fedavg_alpha0.1" / "fedavg_ft_frame.csv").exists()
    assert len(list((tmp_path / "fedavg_alpha0.1").iterdir())) > 1


def test_changes_in_words_at_their_edges():
    assert [direction(x) for x in (0.05, -0.05, 0.0501, -0.0501, math.nan)] == [
        "stays level", "stays level", "rises", "falls", "is n/a"]
    assert by_points(0.04) == "by 0.0 points" and by_points(math.nan) == ""
    assert points_below(-0.0) == "0.0 points below" and points_below(-0.04) == "0.0 points above"
    assert gains_or_loses(0.0) == "loses 0.0 points" and gains_or_loses(0.01) == "gains 0.0 points"
    assert tradeoff_text(1.0, -1.0).startswith("This is the trade-off")
    assert tradeoff_text(1.0, 0.0).startswith("In this run") and tradeoff_text(-1.0, -1.0).startswith("In this run")


def test_skew_in_words_names_the_broken_alphas_and_whether_the_drops_are_ordered():
    ordered = skew_words({1.0: 0.2, 0.3: 2.0, 0.1: 5.0}, 90.0, {1.0: 89.0, 0.3: 86.0, 0.1: 80.0})
    assert ordered["answer"] == "FedAvg falls more than 5 points below the IID anchor at α = 0.1 and not at α = 1, 0.3"
    assert ordered["caveat"].startswith("The drops grow as α falls") and ordered["unseen_trend"] == "grows steadily"
    assert ordered["unseen_text"] == "α = 1: 0.2; α = 0.3: 2.0; α = 0.1: 5.0"
    noisy = skew_words({1.0: 0.2, 0.3: 2.0, 0.1: 1.5}, 90.0, {1.0: 80.0, 0.3: 86.0, 0.1: 91.0})
    assert noisy["answer"] == "FedAvg falls more than 5 points below the IID anchor at α = 1 and not at α = 0.3, 0.1"
    assert noisy["caveat"].startswith("The drops are not ordered by α here (α = 1 drops more than α = 0.3)")
    assert noisy["unseen_trend"] == "does not grow monotonically"
    assert "(1.0 points above IID)" in noisy["acc_text"]
    every = skew_words({0.1: 5.0}, 90.0, {0.1: 80.0})["answer"]
    assert every == "FedAvg falls more than 5 points below the IID anchor at α = 0.1"
    assert skew_words({0.1: 5.0}, 90.0, {0.1: 85.0})["answer"].startswith("no α falls more than 5 points")


def test_rare_thresholds_rescore_the_kept_predictions_under_each_threshold(federations, comparison):
    fed = federations[0.1]
    kept = {m: comparison.predictions[(0.1, m)] for m in ("FedAvg", "FedAvg-FT")}
    table = rare_thresholds(fed, kept, [1.0, 0.25, 0.5, 0.25])
    assert table.index.tolist() == [0.25, 0.5, 1.0]
    counts = fed.train_counts()
    for rho in table.index:
        rare_sets = (counts > 0) & (counts * fed.n_classes < rho * counts.sum(axis=1, keepdims=True))
        assert table.loc[rho, "rare per client"] == rare_sets.sum(axis=1).mean()
        assert table.loc[rho, "clients with rare"] == rare_sets.any(axis=1).sum()
        for m in kept:
            s = protocol_summary(rescore(fed, kept[m], rho))
            assert table.loc[rho, f"rare {m}"] == pytest.approx(100 * s["rare"], nan_ok=True)
            assert table.loc[rho, f"F@25 {m}"] == pytest.approx(100 * s["F@25"], nan_ok=True)
    assert table.loc[1.0, "rare per client"] >= table.loc[0.25, "rare per client"]  # a larger rho only adds


def _thresholds(f25_fedavg, f25_ft, rare_ft):
    return pd.DataFrame({"rare per client": [0.5, 1.0, 2.0], "clients with rare": [1, 3, 4],
                         "rare FedAvg": [50.0, 55.0, 60.0], "F@25 FedAvg": f25_fedavg,
                         "rare FedAvg-FT": rare_ft, "F@25 FedAvg-FT": f25_ft},
                        index=pd.Index([0.25, 0.5, 1.0], name="rho"))


def test_rare_thresholds_in_words_say_whose_floor_moves_more():
    fedavg = rare_threshold_words(_thresholds([10.0, 14.0, 12.0], [5.0, 5.0, 5.02], [30.0, 20.0, 25.0]), 4)
    assert fedavg["spread_fedavg"] == 4.0 and fedavg["spread_ft"] == pytest.approx(0.02)
    assert fedavg["more_sensitive"] == "FedAvg's" and fedavg["rare_ft_word"] == "falls by 5.0 points"
    assert fedavg["few"] == 1 and fedavg["text"].count("ρ = ") == 3 and "3 of 4 clients with one" in fedavg["text"]
    neither = rare_threshold_words(_thresholds([10.0, 10.0, 10.04], [5.0, 5.0, 5.0], [20.0, 20.0, 21.0]), 4)
    assert neither["more_sensitive"] == "neither" and neither["rare_ft_word"] == "rises by 1.0 points"


def test_a_larger_learning_rate_in_words_compares_the_two_changes():
    drift = learning_rate_words((80.0, 81.0), (60.0, 50.0), 0.01, 0.05, alpha=0.1)
    assert drift["answer"].startswith("the skewed federation suffers more")
    assert drift["iid_word"] == "gains 1.0 points" and drift["skew_word"] == "loses 10.0 points"
    same = learning_rate_words((80.0, 70.0), (60.0, 65.0), 0.01, 0.05, alpha=0.3)
    assert same["answer"].startswith("the skewed federation does not suffer more") and "α = 0.3: 60.0 %" in same["text"]


def test_the_fine_tuning_sweep_deploys_one_run_with_each_number_of_epochs(federations, comparison, tiny_model_fn):
    fed, run = federations[0.5], comparison.runs[0.5]
    table = finetune_sweep(run, fed, tiny_model_fn, CONFIG, TRAIN, FINETUNE, epochs=(1, 3))
    assert table.index.tolist() == [0, 1, 3] and table.index.name == "fine-tuning epochs"
    assert _same(table.loc[0].to_dict(), protocol_summary(run.per_client()))
    three = TrainConfig(epochs=3, batch_size=16, lr=0.01)
    frame = evaluate_deployment(FedAvgFT(train=TRAIN, finetune=three), run, fed, tiny_model_fn, CONFIG)
    assert _same(table.loc[3].to_dict(), protocol_summary(per_client_table(frame)))
    assert _same(table.loc[1].to_dict(), comparison.summary.loc[(0.5, "FedAvg-FT")].to_dict())


def test_the_fine_tuning_sweep_in_words():
    table = pd.DataFrame({"local": [0.5, 0.6, 0.7, 0.4], "global": [0.6, 0.5, 0.4, 0.3], "F@25": [0.2, 0.3, 0.2, 0.1]},
                         index=pd.Index([0, 1, 5, 20], name="fine-tuning epochs"))
    words = finetune_words(table)
    assert words["answer"] == "1, 5 epoch(s) raise local accuracy without lowering F@25"
    assert words["text"].split("; ")[3] == "20 epochs: local 40.0 %, global 30.0 %, F@25 10.0 %"
    worse = finetune_words(table.assign(**{"F@25": [0.5, 0.3, 0.2, 0.1]}))
    assert worse["answer"] == "no number of epochs raises local accuracy without lowering F@25"
