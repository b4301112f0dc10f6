"""The COSMOS experiments chapter's study (fedlib.experiments.cosmos): its items, the bytes and
accuracies it reads, the sensitivity reader, and one small study run end to end."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fedlib.claims import SeedValues
from fedlib.experiments.cosmos import COSMOSStudy, Sensitivity, accuracy_points, training_bytes
from fedlib.loop import per_client_table
from fedlib.messages import DOWN, UP, Ledger, Message
from fedlib.training import TrainConfig


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


ADAM = TrainConfig(epochs=1, batch_size=32, optimizer="adam", lr=1e-3)
SGD = TrainConfig(epochs=1, batch_size=32, lr=0.05, momentum=0.9)


def _study(**change) -> COSMOSStudy:
    kw = dict(dataset="uci8", n_samples=300, public_share=0.2, n_clients=5, n_groups=5, alpha=5.0, pool_fraction=0.1,
              global_test_per_class=3, arch_specs={"cnn": dict(model="cnn", width=8, feature_dim=8),
                                                   "mlp": dict(model="mlp", hidden=(16,))},
              base_mix=["cnn", "mlp"], mixtures={"one (cnn)": ["cnn"], "two": ["mlp", "cnn"]},
              server=dict(model="mlp", hidden=(32,)), small_server=dict(model="mlp", hidden=(8,)),
              client_train=dict(pretrain=ADAM, train=ADAM, distill=dataclasses.replace(ADAM, batch_size=64)),
              server_train=ADAM, pfl_train=SGD, finetune=dataclasses.replace(SGD, lr=0.01), temperature=1.0, lam=5.0,
              target_clusters=2, comet_k=2, rounds=2, sweep_rounds=1, sweeps={"λ": [0.0], "clusters": [1]}, first_seed=0)
    kw.update(change)
    return COSMOSStudy(**kw)


def test_the_items_run_every_setting_and_the_sweeps_default_once():
    study = _study(sweeps={"λ": [0.0, 1.0], "clusters": [1, 8], "clients": [10]})
    items = study.items([0, 1])
    kinds = [k for k, _, _ in items]
    assert kinds.count("main") == 2 and kinds.count("mixture") == 4 and kinds.count("homogeneous") == 2
    assert [key for k, key, s in items if k == "homogeneous"] == ["one (cnn)", "one (cnn)"]
    sweeps = [(key, s) for k, key, s in items if k == "sweep"]
    # λ: the default 5.0 and two others; clusters: 1 and 8 (the default 2 is the λ default's run); clients: 10
    assert sweeps == [(("λ", 5.0), 0), (("λ", 5.0), 1), (("λ", 0.0), 0), (("λ", 0.0), 1), (("λ", 1.0), 0), (("λ", 1.0), 1),
                      (("clusters", 1), 0), (("clusters", 1), 1), (("clusters", 8), 0), (("clusters", 8), 1),
                      (("clients", 10), 0), (("clients", 10), 1)]
    assert study.sweep_defaults["clients"] == 5 and study.sweep_defaults["|U| share"] == 0.2


def test_a_study_is_validated():
    with pytest.raises(ValueError, match="n_clients=3 must be at least the 5 label groups of the partition"):
        _study(n_clients=3)
    with pytest.raises(ValueError, match="unknown sensitivity studies \\['epochs'\\]"):
        _study(sweeps={"epochs": [2]})
    with pytest.raises(ValueError, match="unknown item kind 'nope'"):
        _study().run_item(("nope", None, 0))


def test_the_split_plants_one_label_group_per_block_of_clients():
    study = _study(n_clients=7)
    public, hidden, fed, planted = study.split(0)
    assert planted.tolist() == [0, 0, 1, 1, 2, 3, 4] and fed.n_clients == 7 and len(hidden) == len(public)
    public2, _, fed2, planted2 = study.split(0, share=0.4, clients=5)
    assert len(public2) > len(public) and fed2.n_clients == 5 and planted2.tolist() == [0, 1, 2, 3, 4]


def test_training_bytes_count_training_traffic_per_client_and_round():
    ledger = Ledger()
    for r in (1, 2):
        for k in (0, 1):
            ledger.record(r, k, UP, Message(arrays={"labels": torch.zeros(10)}, kind="labels"))  # 40 bytes
            ledger.record(r, k, DOWN, Message(arrays={"t": torch.zeros(5)}, kind="targets"))  # 20 bytes
            ledger.record(r, k, DOWN, Message(arrays={"w": torch.zeros(100)}, kind="eval:cluster_model"))  # left out
    run = SimpleNamespace(ledger=ledger)
    assert training_bytes(run, 2, 2) == {"up": 40.0, "down": 20.0}
    assert training_bytes(run, 4, 2) == {"up": 20.0, "down": 10.0}  # two clients of four never spoke


def test_the_chapter_reads_its_rows_per_seed_in_seed_order_by_setting():
    # the chapter reads accuracy_points' rows with fedlib.claims.SeedValues: seed order, one setting
    rows = pd.DataFrame({"seed": [2, 0, 1, 0], "method": ["A", "A", "A", "A"], "setting": ["x", "x", "x", "y"],
                         "mean": [3.0, 1.0, 2.0, 9.0]})
    per_seed = SeedValues(rows, ["method", "setting"], [0, 1, 2], value="mean")
    assert per_seed("A", "x").tolist() == [1.0, 2.0, 3.0]
    assert np.isnan(per_seed("A", "y")[1:]).all() and per_seed("A", "y")[0] == 9.0


def _sweep_rows() -> pd.DataFrame:
    rows = []
    for s in (0, 1):
        rows.append({"study": "main", "setting": "default", "seed": s, "method": "COSMOS", "mean": 99.0})
        for study, setting, mean in (("λ", "5.0", 80.0), ("λ", "0.0", 70.0), ("λ", "1.0", 85.0), ("clients", "10", 60.0),
                                     ("clusters", "1", 50.0), ("clusters", "8", 81.0)):
            rows.append({"study": study, "setting": setting, "seed": s, "method": "COSMOS", "mean": mean + s,
                         "clusters": 5 - s, "purity": 1.0})
    return pd.DataFrame(rows)


def test_the_sensitivity_reader_by_hand():
    defaults = {"λ": 5.0, "clients": 20, "clusters": 5}
    sens = Sensitivity(_sweep_rows(), defaults, {"λ": [0.0, 1.0], "clients": [10], "clusters": [1, 8]})
    assert sens.values("λ", 5.0).tolist() == [80.0, 81.0] and sens.values("clusters", 5).tolist() == [80.0, 81.0]
    assert {k: v.tolist() for k, v in sens.others("λ").items()} == {"λ = 0": [70.0, 71.0], "λ = 1": [85.0, 86.0]}
    assert sens.others("T") is None  # by name, every other value: never the per-seed maximum
    more, fewer = sens.larger_vs_smaller("clients")  # only fewer clients tried: the default against them
    assert more.tolist() == [80.0, 81.0] and fewer.tolist() == [60.0, 61.0]
    larger, default = sens.larger_vs_smaller("clusters")  # 8 > 5 is tried: it against the default
    assert larger.tolist() == [81.0, 82.0] and default.tolist() == [80.0, 81.0]
    assert sens.larger_vs_smaller("T") is None
    largest, default = sens.largest_vs_default("clusters")
    assert largest.tolist() == [81.0, 82.0] and default.tolist() == [80.0, 81.0]
    assert Sensitivity(_sweep_rows(), defaults, {"clusters": [1]}).largest_vs_default("clusters") is None
    lam = sens.study_rows("λ")
    assert lam.setting.tolist() == ["5.0", "0.0", "1.0", "5.0", "0.0", "1.0"]
    clusters = sens.study_rows("clusters")  # its own runs, then the default's, relabelled
    assert clusters.setting.tolist() == ["1", "8", "1", "8", "5", "5"] and (clusters.study == "clusters").all()
    assert clusters["mean"].tolist() == [50.0, 81.0, 51.0, 82.0, 80.0, 81.0]

def test_a_small_study_runs_every_kind_and_counts_pseudo_label_bytes():
    study = _study()
    res = study.run([0])
    assert len(study.items([0])) == 7 and res.seconds > 0
    main = res.rows[res.rows.study == "main"]
    assert main.method.tolist() == ["COSMOS", "COSMOS (client models)", "FedMD", "FedCT", "COMET"]
    assert sorted(res.rows[res.rows.study == "homogeneous"].method) == ["Ditto", "FedAvg", "FedBABU", "FedRep"]
    assert res.rows[res.rows.study == "mixture"].groupby("setting").size().to_dict() == {"one (cnn)": 2, "two": 2}
    sweeps = res.rows[~res.rows.study.isin(["main", "mixture", "homogeneous"])]
    assert sweeps[["study", "setting"]].values.tolist() == [["λ", "5.0"], ["λ", "0.0"], ["clusters", "1"]]
    assert (sweeps.loc[sweeps.setting == "1", "clusters"] == 1).all()
    first = res.main[0]
    # a client sends its |U| × C float32 pseudo-labels every round (and its reply's metadata, a few bytes of JSON)
    cosmos = res.nbytes[res.nbytes.method == "COSMOS"].iloc[0]
    assert first["n_public"] * 10 * 4 <= cosmos["up"] < first["n_public"] * 10 * 4 + 100
    assert set(res.nbytes.method) == {"COSMOS", "FedMD", "FedCT", "COMET", "FedAvg (one architecture)"}
    assert res.curves.groupby("method").size().to_dict() == {"COMET": 2, "COSMOS": 2, "FedCT": 2, "FedMD": 2}
    assert res.clusters["round"].tolist() == [1, 2] and 0 <= first["purity"] <= 1 and first["deploy_bytes"] > 0
    # accuracy_points: the clients' pooled scores of the last round, in points
    run, method = first["first"]
    table = per_client_table(run.frame)
    points = accuracy_points(run.frame)
    assert points["mean"] == pytest.approx(100 * table["pooled"].mean()) and points["worst"] == pytest.approx(100 * table["pooled"].min())
    assert points["worst"] <= points["bottom-20 %"] <= points["mean"] and points["mean"] == main.iloc[0]["mean"]
    assert method.name == "cosmos" and np.isfinite(first["params"])
