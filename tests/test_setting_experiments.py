"""The setting chapter's procedures (fedbook.studies.setting): each cell of its studies equal to the
computation the chapter once wrote out (one concentration's federation as it is among the others,
the runs, the deployments, the rescoring), and the numbers its prose reads computed from the
studies' frames as the chapter computed them."""

from __future__ import annotations

import dataclasses
import math

import matplotlib
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fedlib.algorithms import FedAvg, FedAvgFT  # noqa: E402
from fedlib.data import make_gaussian_mixture, subsample  # noqa: E402
from fedbook.studies.setting import (MEANS, SettingConfig, anchor_cell, anchor_table, by_method,  # noqa: E402
                                     central_accuracy, exercise_cell, exercise_tables, finetune_cell, finetune_sweep,
                                     mean_unseen, numbers, partition_table, plot_abilities, plot_clients,
                                     plot_partitions, rare_thresholds, sweep_cell, traffic_table,
                                     unseen_classes)
from fedbook.page import save_frames  # noqa: E402
from fedbook.study import Study, run_study  # noqa: E402
from fedlib.federation import make_federations  # noqa: E402
from fedlib.loop import LoopConfig  # noqa: E402
from fedlib.results import per_client_table  # noqa: E402
from fedlib.run import RunOptions  # noqa: E402
from fedlib.messages import DOWN  # noqa: E402
from fedlib.metrics import Confusion, protocol_summary, rescore  # noqa: E402
from fedlib.rng import INIT, derive_seed, isolated_torch_rng, torch_generator  # noqa: E402
from fedlib.run import evaluate_deployment, run_federated  # noqa: E402
from fedlib.training import TrainConfig, local_train, predict  # noqa: E402

TRAIN = TrainConfig(epochs=1, batch_size=16, lr=0.05)
FINETUNE = TrainConfig(epochs=1, batch_size=16, lr=0.01)
CONFIG = LoopConfig(rounds=2, seed=0)
# a tiny chapter: 300 UCI digits of 8 x 8 pixels, an MLP, 4 clients, the exercises on 200 of them
TINY = SettingConfig(dataset="uci8", n_samples=300, n_clients=4, global_test_per_class=5, model="mlp", rounds=1,
                     local_epochs=1, lr=0.05, finetune_epochs=1, finetune_lr=0.01, central_epochs=1, central_lr=0.05,
                     ex_samples=200, ex_clients=3, ex_rounds=1, ex_test_per_class=3)


def _same(a: dict, b: dict) -> bool:
    """The same numbers bit for bit, NaN (an ability no client has) equal to NaN."""
    return pd.Series(a, dtype=float).equals(pd.Series(b, dtype=float))


@pytest.fixture(scope="module")
def federations():
    ds = make_gaussian_mixture(n_per_class=60, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    return make_federations(ds, [None, 0.5, 0.1], n_clients=4, global_test_per_class=10, seed=0)


@pytest.fixture(scope="module")
def cell():
    return finetune_cell(seed=1, alpha=0.3, config=TINY)


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
    fig = plot_partitions(federations)
    assert len(fig.axes) >= 3 and fig.axes[0].get_title() == "IID"
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["IID", "Dirichlet α = 0.5", "Dirichlet α = 0.1"]
    plt.close(fig)


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


def test_a_cell_builds_its_concentration_as_the_chapter_built_it_among_the_others():
    data = TINY.data(2)
    together = make_federations(data, [None, 0.3, 0.1], n_clients=4, global_test_per_class=5, seed=2)
    for a in (None, 0.1):
        alone = TINY.federation(data, a, 2)
        assert all(torch.equal(x.train.x, y.train.x) and torch.equal(x.test.y, y.test.y)
                   for x, y in zip(alone.clients, together[a].clients))
        assert torch.equal(alone.global_test.y, together[a].global_test.y)
    reduced = TINY.federation(data, 0.1, 2, reduced=True)
    expected = make_federations(subsample(data, 200, 2), [0.1], n_clients=3, global_test_per_class=3, seed=2)[0.1]
    assert reduced.n_clients == 3 and torch.equal(reduced.clients[0].train.x, expected.clients[0].train.x)
    assert SettingConfig.of(dataclasses.replace(TINY), root="x").root == "x"


def test_the_anchors_are_the_central_model_and_fedavg_on_the_iid_federation():
    data = TINY.data(0)
    fed, model_fn = TINY.federation(data, None, 0), TINY.model_fn(data)
    central = anchor_cell(0, "central SGD", config=TINY)
    assert central["accuracy"].iloc[0] == central_accuracy(fed, model_fn, TINY.central, 0)[0]
    assert central["passes"].iloc[0] == TINY.central_epochs
    fedavg = anchor_cell(0, "FedAvg, IID", config=TINY)
    run = run_federated(FedAvg(train=TINY.train), fed, model_fn, LoopConfig(rounds=1, seed=0, rare_ratio=0.5))
    assert fedavg["accuracy"].iloc[0] == run.summary()["global"] and fedavg["passes"].iloc[0] == 1
    frames = run_study(Study("anchors", lambda seed, anchor: anchor_cell(seed, anchor, config=TINY),
                             grid={"anchor": ["central SGD", "FedAvg, IID"]}))
    table = anchor_table(frames["anchors"])
    assert table.index.tolist() == ["central SGD", "FedAvg, IID"]
    assert table.iloc[1, 0] == 100 * run.summary()["global"]
    with pytest.raises(ValueError, match="unknown anchor 'x'; valid: central SGD, FedAvg, IID"):
        anchor_cell(0, "x", config=TINY)


def test_one_fedavg_run_is_deployed_as_it_is_and_fine_tuned(cell):
    data = TINY.data(1)
    fed, model_fn, loop = TINY.federation(data, 0.3, 1), TINY.model_fn(data), TINY.loop_of(1)
    run = run_federated(FedAvg(train=TINY.train), fed, model_fn, loop, RunOptions(keep_predictions=True))
    kept = {}
    ft = per_client_table(evaluate_deployment(FedAvgFT(train=TINY.train, finetune=TINY.finetune), run, fed, model_fn,
                                              loop, predictions=kept))
    summary = cell["finetune"].set_index("method")
    assert summary.index.tolist() == ["FedAvg", "FedAvg-FT"]
    assert _same(summary.loc["FedAvg"].drop("down_per_round").to_dict(), protocol_summary(run.per_client()))
    assert _same(summary.loc["FedAvg-FT"].drop("down_per_round").to_dict(), protocol_summary(ft))
    assert (summary["down_per_round"] == run.ledger.per_client_and_round(DOWN, n_clients=1)).all()
    clients = cell["clients"]
    assert clients.columns[:2].tolist() == ["method", "client"]
    pd.testing.assert_frame_equal(clients[clients["method"] == "FedAvg-FT"].set_index("client").drop(columns="method"),
                                  ft.rename_axis("client"), check_names=False)
    rare = cell["rare"].set_index("rho")
    pd.testing.assert_frame_equal(rare, rare_thresholds(fed, {"FedAvg": run.predictions, "FedAvg-FT": kept},
                                                        [0.25, 1.0, 0.5]))
    traffic = cell["traffic"].set_index(["direction", "kind"])["bytes"]
    assert traffic.equals(run.ledger.totals(["direction", "kind"]).rename("bytes"))


def test_the_studys_frames_read_as_the_pages_tables(cell):
    frames = {name: f.assign(alpha=0.3, seed=1)[["alpha", "seed", *f.columns]] for name, f in cell.items()}
    percent = by_method(frames["finetune"], MEANS)
    assert percent.columns.tolist() == list(MEANS.values()) and percent.index.names == ["α", "method"]
    assert percent.iloc[0, 0] == 100 * frames["finetune"].iloc[0]["local"]
    shown = traffic_table(frames["traffic"], 0.3)
    assert shown.columns.tolist() == ["bytes in the whole run"] and shown.index.names == ["direction", "kind"]
    for fig in (plot_abilities(frames["finetune"], [0.3]), plot_clients(frames["clients"], [0.3])):
        assert fig.axes[0].get_title() == "Dirichlet α = 0.3"
        plt.close(fig)


def test_rare_thresholds_rescore_the_kept_predictions_under_each_threshold(federations, tiny_model_fn):
    fed = federations[0.1]
    run = run_federated(FedAvg(train=TRAIN), fed, tiny_model_fn, CONFIG, RunOptions(keep_predictions=True))
    ft_kept = {}
    evaluate_deployment(FedAvgFT(train=TRAIN, finetune=FINETUNE), run, fed, tiny_model_fn, CONFIG, predictions=ft_kept)
    kept = {"FedAvg": run.predictions, "FedAvg-FT": ft_kept}
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


def test_the_exercises_reduced_run_is_fedavg_on_the_reduced_federation_at_its_learning_rate():
    data = TINY.data(0)
    fed = TINY.federation(data, None, 0, reduced=True)
    for lr in (0.05, 0.2):
        run = run_federated(FedAvg(train=dataclasses.replace(TINY.train, lr=lr)), fed, TINY.model_fn(data),
                            LoopConfig(rounds=1, seed=0, rare_ratio=0.5))
        row = exercise_cell(0, None, lr, config=TINY)
        assert row["global"].iloc[0] == run.summary()["global"] and row["samples"].iloc[0] == 200


def test_the_fine_tuning_sweep_deploys_one_run_with_each_number_of_epochs(federations, tiny_model_fn):
    fed = federations[0.5]
    run = run_federated(FedAvg(train=TRAIN), fed, tiny_model_fn, CONFIG)
    table = finetune_sweep(run, fed, tiny_model_fn, CONFIG, TRAIN, FINETUNE, epochs=(1, 3))
    assert table.index.tolist() == [0, 1, 3] and table.index.name == "fine-tuning epochs"
    assert _same(table.loc[0].to_dict(), protocol_summary(run.per_client()))
    three = TrainConfig(epochs=3, batch_size=16, lr=0.01)
    frame = evaluate_deployment(FedAvgFT(train=TRAIN, finetune=three), run, fed, tiny_model_fn, CONFIG)
    assert _same(table.loc[3].to_dict(), protocol_summary(per_client_table(frame)))
    one = evaluate_deployment(FedAvgFT(train=TRAIN, finetune=FINETUNE), run, fed, tiny_model_fn, CONFIG)
    assert _same(table.loc[1].to_dict(), protocol_summary(per_client_table(one)))
    # the exercise's cell: the reduced run, swept the same way
    data = TINY.data(0)
    fed, model_fn, loop = TINY.federation(data, 0.1, 0, reduced=True), TINY.model_fn(data), TINY.loop_of(0, 1)
    reduced = run_federated(FedAvg(train=TINY.train), fed, model_fn, loop)
    expected = finetune_sweep(reduced, fed, model_fn, loop, TINY.train, TINY.finetune, (1, 2)).reset_index()
    pd.testing.assert_frame_equal(sweep_cell(0, 0.1, config=TINY, epochs=(1, 2)), expected)


def _frames(cell) -> dict[str, pd.DataFrame]:
    """Hand-made study frames: the anchors, two concentrations of the fine-tuning cell, the exercises."""
    finetune = pd.DataFrame({"alpha": [0.3, 0.3, 0.1, 0.1], "seed": 0, "method": ["FedAvg", "FedAvg-FT"] * 2,
                             "local": [0.5, 0.6, 0.5, 0.75], "global": [0.8, 0.7, 0.8, 0.5],
                             "unseen": [0.4, 0.1, 0.4, math.nan], "rare": [0.3, 0.2, 0.3, 0.2],
                             "F@25": [0.2, 0.1, 0.2, 0.05], "L@25": [0.3, 0.4, 0.3, 0.45],
                             "down_per_round": [1e6, 1e6, 2e6, 2e6]})
    rare = pd.DataFrame({"alpha": 0.1, "seed": 0, "rho": [0.25, 0.5, 1.0], "rare per client": [0.5, 1.0, 2.0],
                         "clients with rare": [1, 3, 4], "rare FedAvg": [50.0, 55.0, 60.0],
                         "F@25 FedAvg": [10.0, 14.0, 12.0], "rare FedAvg-FT": [30.0, 20.0, 25.0],
                         "F@25 FedAvg-FT": [5.0, 5.0, 5.5]})
    skew = pd.DataFrame({"alpha": [None, 1.0, 0.1], "lr": 0.05, "seed": 0, "global": [0.9, 0.88, 0.8], "samples": 200})
    return {"anchors": pd.DataFrame({"anchor": ["central SGD", "FedAvg, IID"], "seed": 0, "accuracy": [0.98, 0.95],
                                     "passes": [1, 1], "seconds": [1.0, 2.0]}),
            "finetune": finetune, "rare": rare, "ex_skew": skew,
            "ex_lr": pd.DataFrame({"alpha": [None, 0.1], "lr": 0.2, "seed": 0, "global": [0.85, 0.6], "samples": 200}),
            "ex_sweep": pd.DataFrame({"alpha": 0.1, "seed": 0, "fine-tuning epochs": [0, 1, 5], "local": [0.5, 0.7, 0.9],
                                      "global": [0.6, 0.5, 0.4], "F@25": [0.2, 0.2, 0.1]})}


def test_the_numbers_of_the_prose_are_signed_changes_of_the_frames():
    settings = dataclasses.replace(TINY)  # the settings the prose republishes, and the alphas of the chapter
    P = type("P", (), {**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}, "alphas": [0.3, 0.1]})
    data = TINY.data(0)
    federations = make_federations(data, [None, 0.3, 0.1], n_clients=4, global_test_per_class=5, seed=0)
    R = numbers(_frames(None), P, federations, data, TINY, seed=0)
    assert R["alpha_last"] == R["alpha_ft"] == R["ex2_alpha"] == 0.1
    assert R["ft_change_local"] == pytest.approx(25.0) and R["ft_change_global"] == pytest.approx(-30.0)
    assert math.isnan(R["ft_change_unseen"]) and R["ft_change_f25"] == pytest.approx(-15.0)
    assert R["ft_local_before"] == 50.0 and R["ft_global_after"] == 50.0
    assert R["central_acc"] == 98.0 and R["iid_acc"] == 95.0 and R["anchor_gap"] == pytest.approx(3.0)
    assert R["bytes_per_round"] == "2.00 MB" and R["ex1_iid"] == 90.0
    assert R["ex3_lr"] == 0.2 and R["ex3_iid_change"] == pytest.approx(-5.0) and R["ex3_skew_change"] == pytest.approx(-20.0)
    assert R["ex2_spread_fedavg"] == 4.0 and R["ex2_spread_ft"] == 0.5 and R["ex2_rare_ft_change"] == -5.0
    assert R["ex2_few"] == 1 and R["ex_scale"].startswith("200 samples (3 global test images per class), 3 clients")
    assert R["seen_iid"] == float(partition_table(federations, 0.5).loc["IID", "classes seen (mean)"])
    assert all(type(R[k]) is float for k in ("seen_last", "central_acc", "ft_change_l25", "ex3_iid_base", "rare_pct"))
    # the values: every class seen under IID (10 classes); ρ = 0.5 of 10 classes is 5 %; L@25 0.30 → 0.45
    assert R["seen_iid"] == 10.0 and R["seen_last"] + R["unseen_last"] == 10.0 and R["rare_pct"] == 5.0
    assert R["ft_change_l25"] == pytest.approx(15.0) and R["ex3_iid_base"] == 90.0 and R["ex3_skew_base"] == 80.0
    assert R["ex4_epochs"] == "1 and 5" and (R["ex2_rho_lo"], R["ex2_rho_hi"]) == (0.25, 1.0)
    unseen = unseen_classes(data, [1.0, 0.1], TINY, 0)
    assert unseen == {1.0: 0.75, 0.1: 5.0}  # the seeded partitions': the skewed one hides half the classes
    tables = exercise_tables(_frames(None), unseen)
    assert tables["ex1"].index.tolist() == [1.0, 0.1]
    assert tables["ex1"]["change from IID (points)"].tolist() == pytest.approx([-2.0, -10.0])
    assert tables["ex1"]["unseen classes per client"].tolist() == [mean_unseen(TINY.federation(data, a, 0))
                                                                    for a in (1.0, 0.1)]
    assert tables["ex4"].columns.tolist() == ["local (%)", "global (%)", "F@25 (%)"] and tables["ex4"].iloc[2, 0] == 90.0


def test_the_frames_are_saved_as_csv_where_asked(tmp_path):
    frames = _frames(None)
    assert save_frames(frames, None) == []
    written = save_frames(frames, tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{n}.csv" for n in frames)
    assert pd.read_csv(tmp_path / "rare.csv")["rho"].tolist() == [0.25, 0.5, 1.0]
