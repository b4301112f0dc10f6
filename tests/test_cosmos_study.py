"""The COSMOS experiments chapter's study (fedbook.studies.cosmos): its items, the bytes and
accuracies it reads, the sensitivity reader, and one small study run end to end."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fedbook.claims import SeedValues
from fedlib.algorithms import FedAvg
from fedlib.algorithms.cosmos import LocalOnly
from fedlib.distill import PublicSet
from fedbook.studies.cosmos import (COSMOSStudy, Sensitivity, accuracy_points, fedavg_bytes, kept_clients, planted_groups,
                                       public_part, training_bytes)
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.results import per_client_table
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


def test_the_items_run_the_headline_items_on_every_seed_and_the_rest_on_the_side_seeds():
    study = _study(n_clients=10, sweeps={"λ": [0.0, 1.0], "clusters": [1, 8], "clients": [5]}, alphas=[1.0], side_seeds=1)
    items = study.items([0, 1])
    kinds = [k for k, _, _ in items]
    assert kinds.count("main") == 2 and kinds.count("homogeneous") == 2 and kinds.count("mixture") == 1
    assert [key for k, key, s in items if k == "main"] == [True, False]  # the side seed's main item gives the sweep default
    assert [key for k, key, s in items if k == "homogeneous"] == ["one (cnn)", "one (cnn)"]
    assert [(key, s) for k, key, s in items if k in ("mixture", "alpha")] == [("two", 0), (1.0, 0)]
    sweeps = [(key, s) for k, key, s in items if k == "sweep"]
    # no run of the default: the main COSMOS run after sweep_rounds rounds is the default's
    assert sweeps == [(("λ", 0.0), 0), (("λ", 1.0), 0), (("clusters", 1), 0), (("clusters", 8), 0), (("clients", 5), 0)]
    assert study.sweep_defaults["clients"] == 10 and study.sweep_defaults["|U| share"] == 0.2
    assert study.side([3, 4, 5]) == [3] and _study().side([3, 4]) == [3, 4]


def test_a_study_is_validated():
    with pytest.raises(ValueError, match="n_clients=3 must be at least the 5 label groups of the partition"):
        _study(n_clients=3)
    with pytest.raises(ValueError, match="unknown sensitivity studies \\['epochs'\\]"):
        _study(sweeps={"epochs": [2]})
    with pytest.raises(ValueError, match="sweep_rounds=3 must be in 1..rounds=2"):
        _study(sweep_rounds=3)
    with pytest.raises(ValueError, match="'\\|U\\| share' values must lie in \\(0, public_share=0.2\\)"):
        _study(sweeps={"|U| share": [0.4]})
    with pytest.raises(ValueError, match="'clients' values must lie in \\[n_groups=5, n_clients=10\\)"):
        _study(n_clients=10, sweeps={"clients": [20]})
    with pytest.raises(ValueError, match="unknown item kind 'nope'"):
        _study().run_item(("nope", None, 0))


def test_the_split_plants_one_label_group_per_block_of_clients():
    study = _study(n_clients=7)
    public, hidden, fed, planted = study.split(0)
    assert planted.tolist() == [0, 0, 1, 1, 2, 3, 4] and fed.n_clients == 7 and len(hidden) == len(public)
    public1, _, fed1, planted1 = study.split(0, alpha=0.5)  # another α: the same U, another partition of the rest
    assert torch.equal(public1.x, public.x) and planted1.tolist() == planted.tolist()
    assert [len(c.train) for c in fed1.clients] != [len(c.train) for c in fed.clients]


def test_fewer_clients_and_a_smaller_u_keep_every_clients_data():
    assert planted_groups(7, 5).tolist() == [0, 0, 1, 1, 2, 3, 4]
    assert kept_clients(20, 5, 10).tolist() == [0, 1, 4, 5, 8, 9, 12, 13, 16, 17]
    assert kept_clients(7, 5, 5).tolist() == [0, 2, 4, 5, 6] and planted_groups(7, 5)[kept_clients(7, 5, 5)].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="n_kept must lie in \\[5, 20\\], got 4"):
        kept_clients(20, 5, 4)
    u = PublicSet(torch.arange(12.0).reshape(12, 1))
    hidden = np.array([0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2])
    half = public_part(u, hidden, 0.5)  # of each class the first round(n_c / 2), at least one
    assert half.x.ravel().tolist() == [0.0, 2.0, 3.0, 6.0, 7.0, 8.0]
    assert public_part(u, hidden, 0.1).x.ravel().tolist() == [0.0, 2.0, 6.0]
    with pytest.raises(ValueError, match="fraction must lie in \\(0, 1\\], got 0"):
        public_part(u, hidden, 0)


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
    # the chapter reads accuracy_points' rows with fedbook.claims.SeedValues: seed order, one setting
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
    study = _study(alphas=[1.0], sweeps={"λ": [0.0], "clusters": [1], "|U| share": [0.1]})
    res = study.run([0])
    assert len(study.items([0])) == 7 and res.seconds > 0
    main = res.rows[res.rows.study == "main"]
    assert main.method.tolist() == ["COSMOS", "COSMOS (client models)", "FedMD", "FedCT", "COMET", "Local"]
    assert sorted(res.rows[res.rows.study == "homogeneous"].method) == ["Ditto", "FedBABU", "FedRep"]
    mixture = res.rows[res.rows.study == "mixture"]
    assert mixture.groupby("setting").method.apply(list).to_dict() == {"one (cnn)": ["COSMOS"], "two": ["COSMOS", "COMET"]}
    assert res.rows[res.rows.study == "alpha"][["setting", "method"]].values.tolist() == [["1.0", "COSMOS"], ["1.0", "COMET"]]
    sweeps = res.rows[~res.rows.study.isin(["main", "mixture", "homogeneous", "alpha"])]
    assert sweeps[["study", "setting"]].values.tolist() == [["λ", "5.0"], ["λ", "0.0"], ["clusters", "1"], ["|U| share", "0.1"]]
    assert (sweeps.loc[sweeps.setting == "1", "clusters"] == 1).all()
    # the sweep default is the main COSMOS run after sweep_rounds rounds: the same scores as a run of that many rounds
    default = study.run_item(("sweep", ("λ", 5.0), 0))["rows"][0]
    assert default == sweeps.iloc[0].to_dict()
    first = res.main[0]
    # a client sends its |U| × C float32 pseudo-labels every round (and its reply's metadata, a few bytes of JSON)
    cosmos = res.nbytes[res.nbytes.method == "COSMOS"].iloc[0]
    assert first["n_public"] * 10 * 4 <= cosmos["up"] < first["n_public"] * 10 * 4 + 100
    assert set(res.nbytes.method) == {"COSMOS", "FedMD", "FedCT", "COMET"}
    assert res.curves.groupby("method").size().to_dict() == {"COMET": 2, "COSMOS": 2, "FedCT": 2, "FedMD": 2}
    assert res.clusters["round"].tolist() == [1, 2] and 0 <= first["purity"] <= 1 and first["deploy_bytes"] > 0
    # accuracy_points: the clients' pooled scores of the last round (or of a given one), in points
    run, method = first["first"]
    table = per_client_table(run.frame)
    points = accuracy_points(run.frame)
    assert points["mean"] == pytest.approx(100 * table["pooled"].mean()) and points["worst"] == pytest.approx(100 * table["pooled"].min())
    assert points["worst"] <= points["bottom-20 %"] <= points["mean"] and points["mean"] == main.iloc[0]["mean"]
    assert accuracy_points(run.frame, 1)["mean"] == pytest.approx(100 * per_client_table(run.frame, 1)["pooled"].mean())
    assert method.name == "cosmos" and np.isfinite(first["params"])
    # FedAvg is no run: its bytes are the model's, both ways (the ledger of a real FedAvg run agrees, metadata aside)
    fedavg = run_federated(FedAvg(train=SGD), *study.split(0)[2:3], study.architectures(["cnn"], study.n_clients, study.split(0)[2].global_test),
                           LoopConfig(rounds=1, seed=0, evaluate_last=False))
    measured = training_bytes(fedavg, study.n_clients, 1)
    computed = fedavg_bytes(first["params"])
    assert computed["down"] <= measured["down"] < computed["down"] + 200 and computed["up"] <= measured["up"] < computed["up"] + 200


def test_local_training_alone_is_cosmos_without_any_target():
    """LocalOnly never sends a target; after its first round its clients are COSMOS's clients after
    theirs (the same pre-training, the same streams), and afterwards they train on their data only."""
    study = _study()
    public, hidden, fed, planted = study.split(0)
    ds = fed.global_test
    archs = study.architectures(study.base_mix, study.n_clients, ds)
    cfg = LoopConfig(rounds=1, seed=0)
    local = run_federated(study.local_only(public, 0), fed, archs, cfg)
    cosmos = run_federated(study.cosmos_method(ds, public, 0, deploy_model="client"), fed, archs, cfg)
    assert accuracy_points(local.frame) == accuracy_points(cosmos.frame)
    two = run_federated(study.local_only(public, 0), fed, archs, LoopConfig(rounds=2, seed=0))
    kinds = set(two.ledger.to_frame()["kind"])
    assert not any("teacher" in k for k in kinds) and isinstance(study.local_only(public, 0), LocalOnly)


def test_the_pseudo_label_learning_rate_is_set_on_both_sides():
    study = _study().with_pseudo_lr(1e-4)
    assert study.server_train.lr == 1e-4 and study.client_train["distill"].lr == 1e-4
    assert study.client_train["train"].lr == 1e-3 and study.client_train["distill"].batch_size == 64


def test_each_method_takes_its_own_pseudo_label_rate():
    """No method inherits another's rate: a method named in pseudo_lr distils at its own rate (COSMOS's server too);
    the others keep the study's rate; the true-label rates are untouched."""
    study = _study().with_pseudo_lr(1e-4).with_pseudo_lrs({"COSMOS": 1e-3, "FedMD": 5e-4})
    public, hidden, fed, planted = study.split(0)
    cosmos = study.cosmos_method(fed.global_test, public, 0)
    base = study.baselines(public, 0)
    assert cosmos.distill.lr == 1e-3 and cosmos.server_train.lr == 1e-3 and cosmos.train.lr == 1e-3
    assert base["FedMD"].distill.lr == 5e-4 and base["COMET"].distill.lr == 1e-4 and base["FedCT"].distill.lr == 1e-4
    assert all(m.pretrain.lr == 1e-3 and m.train.lr == 1e-3 for m in base.values())
    assert study.with_pseudo_lrs({"COMET": 1e-3}).pseudo_lr == {"COSMOS": 1e-3, "FedMD": 5e-4, "COMET": 1e-3}
    for bad in ({"Ditto": 1e-3}, {"COSMOS": 0.0}, {"FedMD": float("nan")}):
        with pytest.raises(ValueError, match="pseudo_lr"):
            _study(pseudo_lr=bad)


def test_fedct_never_reads_the_pseudo_label_rate_when_every_client_takes_part_from_the_start():
    """Why the chapter's pilot does not run FedCT: its scores at the two candidate rates are equal by construction
    (mutation: make FedCT digest U with ``distill`` before its joint training, and they differ)."""
    scores = [_study().with_pseudo_lrs({"FedCT": lr}).pilot_scores(0, 2, ("FedCT",))["FedCT"] for lr in (1e-4, 1e-1)]
    assert scores[0] == scores[1]
    fedmd = [_study().with_pseudo_lrs({"FedMD": lr}).pilot_scores(0, 2, ("FedMD",))["FedMD"] for lr in (1e-4, 1e-1)]
    assert fedmd[0] != fedmd[1]  # the same pilot does see FedMD's rate


def test_the_pilot_on_fewer_clients_is_the_clients_sweep_setting():
    """A pilot on n_clients keeps the clients sweep's clients: COSMOS's pilot score is that sweep's run, bit for bit."""
    study = _study(n_clients=10, sweep_rounds=1, sweeps={"clients": [5]})
    row = study.run_item(("sweep", ("clients", 5), 0))["rows"][0]
    pilot = study.pilot_scores(0, 1, ("COSMOS",), n_clients=5)
    assert list(pilot) == ["COSMOS"] and pilot["COSMOS"] == row["mean"]
    with pytest.raises(ValueError, match="methods"):
        study.pilot_scores(0, 1, ("Local",))


def test_the_clients_sweep_runs_the_kept_clients_of_the_default_federation():
    study = _study(n_clients=10, sweep_rounds=1, sweeps={"clients": [5]})
    row = study.run_item(("sweep", ("clients", 5), 0))["rows"][0]
    assert (row["study"], row["setting"], row["method"]) == ("clients", "5", "COSMOS") and 0 <= row["purity"] <= 1
