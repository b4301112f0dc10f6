"""The COSMOS experiments chapter's study (fedbook.studies.cosmos_experiments): its settings, the cells of its
studies, the bytes and accuracies they read, the frames and tables the chapter reads (by hand), the
pilot, the numbers of its prose, and every cell run end to end through fedbook.study."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fedbook.claims import DOES_NOT_HOLD, SHORTFALLS, VERDICTS, Claim, Read, RegimeCheck, effect, evaluate
from fedbook.studies.cosmos_experiments import (BASE, FEDAVG, LOCAL_READINGS, MAIN_METHODS, METRICS, COSMOSStudy, accuracy_points,
                                    alpha_cell, alpha_table, exercise_cell, exercise_numbers, fedavg_bytes, fedavg_total,
                                    homogeneous_cell, homogeneous_table, kept_clients, local_cell, local_reading, main_cell,
                                    main_table, matched_epochs, mixture_cell, mixture_table, numbers, paper_scale, pilot_cell,
                                    planted_groups, public_part, sensitivity_table, sweep_cell, sweep_reads, sweep_settings,
                                    server_choice, server_pilot_cell, tidy, traffic_table, training_bytes, verdicts,
                                    vote_dynamics)
from fedbook.studies import cosmos_experiments
from fedbook.study import Study, run_study
from fedlib.algorithms import FedAvg
from fedlib.algorithms.cosmos import LocalOnly
from fedlib.distill import PublicSet
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.results import per_client_table
from fedlib.messages import DOWN, UP, Ledger, Message
from fedlib.training import TrainConfig, TrainingMemo


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
              target_clusters=2, comet_k=2, rounds=2, sweep_rounds=1, sweeps={"λ": [0.0], "clusters": [1]})
    kw.update(change)
    return COSMOSStudy(**kw)


def test_the_sweep_grid_names_every_swept_setting_and_finds_it_back():
    study = _study(n_clients=10, sweeps={"λ": [0.0, 1.0], "clusters": [1, 8], "clients": [5], "detach": [True]})
    # the grid of the sweep study: every value other than the default, in the sweeps' order (the default is no run)
    assert sweep_settings(study.sweeps) == ["λ = 0", "λ = 1", "clusters = 1", "clusters = 8", "clients = 5", "detach = 1"]
    assert [study.swept(s) for s in sweep_settings(study.sweeps)] == [("λ", 0.0), ("λ", 1.0), ("clusters", 1), ("clusters", 8),
                                                                       ("clients", 5), ("detach", True)]
    assert study.sweep_defaults["clients"] == 10 and study.sweep_defaults["|U| share"] == 0.2
    assert study.default_mixture == "cnn + mlp"
    # a claim against every other value reads one frame per value, named as its comparator
    assert list(sweep_reads("λ", study.sweeps)) == ["λ = 0", "λ = 1"] and sweep_reads("T", study.sweeps) is None
    assert sweep_reads("clusters", study.sweeps)["clusters = 8"] == Read("clusters = 8", "mean")


def test_the_study_of_the_chapters_settings():
    P = SimpleNamespace(dataset="uci8", n_samples=None, public_share=0.2, n_clients=20, n_groups=5, alpha=5.0, pool_fraction=0.1,
                        global_test_per_class=40, archs={"cnn": {"model": "cnn"}}, extra_archs={"weak": {"model": "mlp"}},
                        mixtures={"one (cnn)": ["cnn"]}, server={"model": "mlp"}, small_server={"model": "mlp"},
                        pretrain_epochs=20, local_epochs=3, rounds=4, sweep_rounds=2, lr_true=1e-3, lr_pseudo_candidates=(1e-4, 1e-3),
                        server_epochs=3, sgd_lr=0.05, temperature=1.0, lam=5.0, target_clusters=5, comet_k=5, sweeps={"λ": [0.0]})
    study = COSMOSStudy.from_settings(P)
    assert matched_epochs(20, 3, 4) == 8 and study.pfl_train.epochs == 8  # (20 + 3 * 3) / 4, rounded up
    assert (study.pfl_train.lr, study.pfl_train.momentum, study.finetune.epochs, study.finetune.lr) == (0.05, 0.9, 1, 0.01)
    assert study.client_train["distill"].lr == 1e-4 and study.client_train["distill"].batch_size == 64
    assert study.client_train["pretrain"].epochs == 20 and study.client_train["train"].optimizer == "adam"
    assert study.server_train.lr == 1e-4 and study.server_train.epochs == 3
    assert study.arch_specs == {"cnn": {"model": "cnn"}, "weak": {"model": "mlp"}} and list(study.base_mix) == ["cnn"]


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
    with pytest.raises(ValueError, match="unknown sweep setting 'λ = 3'; valid: λ = 0, clusters = 1"):
        _study().swept("λ = 3")


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


def _runs() -> dict[str, pd.DataFrame]:
    """Hand-made frames of the chapter's studies: two seeds, side seed 0 only, one other α, one
    other mixture, and sweeps of λ (0) and clusters (1, 8) around the defaults λ = 5 and 2 clusters."""
    metrics = dict.fromkeys(["worst", "bottom-20 %", "P@25"], 0.0)
    main = pd.DataFrame([{"seed": s, "method": m, "mean": 10.0 * i + s, **metrics}
                         for s in (0, 1) for i, m in enumerate(["COSMOS", "COSMOS (client models)", "FedMD", "FedCT", "COMET"])])
    local = pd.DataFrame([{"seed": 0, "method": "Local", "mean": 7.0, **metrics}])
    homogeneous = pd.DataFrame([{"seed": s, "method": m, "mean": 50.0 + s, **metrics}
                                for s in (0, 1) for m in ["COSMOS", "Ditto", "FedBABU", "FedRep"]])
    mixture = pd.DataFrame([{"mixture": "two", "seed": 0, "method": m, "mean": x, **metrics} for m, x in (("COSMOS", 61.0), ("COMET", 62.0))])
    alpha = pd.DataFrame([{"alpha": 1.0, "seed": 0, "method": m, "mean": x, **metrics} for m, x in (("COSMOS", 1.5), ("COMET", 36.0))])
    default = pd.DataFrame([{"seed": s, "mean": 80.0 + s, **metrics, "clusters": 5, "purity": 1.0} for s in (0, 1)])
    sweep = pd.DataFrame([{"setting": label, "seed": 0, "study": study, "value": value, "mean": x, **metrics, "clusters": k,
                           "purity": 0.5} for label, study, value, x, k in (("λ = 0", "λ", "0.0", 70.0, 5), ("clusters = 1", "clusters", "1", 50.0, 1),
                                                                              ("clusters = 8", "clusters", "8", 81.0, 8))])
    nbytes = pd.DataFrame([{"seed": s, "method": m, "up": 100.0, "down": 300.0} for s in (0, 1) for m in ["COSMOS", *BASE]])
    measures = pd.DataFrame([{"seed": s, "purity": 1.0, "comet_purity": 1.0, "deploy_bytes": 10.0, "n_public": 9, "test_size": 4.0,
                              "train_size": 8.0, "params": 1000} for s in (0, 1)])
    return {"main": main, "local": local, "homogeneous": homogeneous, "mixture": mixture, "alpha": alpha, "default": default,
            "sweep": sweep, "bytes": nbytes, "measures": measures, "curves": pd.DataFrame(), "clusters": pd.DataFrame()}


def test_the_frames_the_claims_read_by_hand():
    study = _study(sweeps={"λ": [0.0], "clusters": [1, 8]})
    F = tidy(_runs(), study, side=[0])
    assert F["main"].method.tolist()[-1] == "Local" and F["side"].seed.unique().tolist() == [0]
    assert Read("side", "mean", method="Local")(F).to_dict() == {0: 7.0}
    # the mixtures: one architecture (the one-architecture COSMOS runs), the default mixture (the main runs), the others
    mixtures = F["mixtures"]
    assert mixtures[["mixture", "method"]].values.tolist() == [["one (cnn)", "COSMOS"], ["two", "COSMOS"], ["two", "COMET"],
                                                             ["cnn + mlp", "COSMOS"], ["cnn + mlp", "COMET"]]
    assert (mixtures.seed == 0).all()
    # α: the default's rows are the main runs' on the side seeds; the change is the mean there minus at the default
    assert Read("alphas", "mean", method="COMET", alpha=5.0)(F).tolist() == [40.0]
    assert Read("alpha_change", "change", method="COSMOS", alpha=1.0)(F).tolist() == [1.5]
    assert Read("alpha_change", "change", method="COMET", alpha=1.0)(F).tolist() == [-4.0]
    # FedAvg's bytes are the model's both ways: 8 × 1000 over 400 bytes, 20 times more
    assert Read("traffic", "log10_ratio", method="COSMOS")(F).tolist() == [np.log10(20.0)] * 2
    # one frame per swept setting and per swept study's default (the main runs after sweep_rounds, side seeds)
    assert Read("λ = 5", "mean")(F).to_dict() == {0: 80.0} and Read("clusters = 2", "mean")(F).to_dict() == {0: 80.0}
    assert Read("clusters = 8", "mean")(F).tolist() == [81.0] and "clusters = None" not in F and "T = 1" not in F
    sens = F["sensitivity"]  # λ's default first, the others' last (the order of the table's rows)
    assert sens[["study", "value"]].values.tolist() == [["λ", "5.0"], ["λ", "0.0"], ["clusters", "1"], ["clusters", "8"],
                                                        ["clusters", "2"]]
    table = sensitivity_table(F, study)
    assert table.value.tolist() == ["5.0 (default)", "0.0", "1", "8", "2 (default)"] and table.clusters.tolist()[2:] == [1.0, 8.0, 5.0]


def test_the_tables_of_the_frames():
    study = _study(sweeps={"λ": [0.0], "clusters": [1, 8]})
    F = tidy(_runs(), study, side=[0])
    comm = traffic_table(F)
    assert comm.loc[FEDAVG, "total"] == 8000.0 and comm.loc["COSMOS", "FedAvg ÷ this"] == 20.0
    assert list(mixture_table(F, study).columns) == ["one (cnn)", "cnn + mlp", "two"]
    assert list(alpha_table(F, study).columns) == ["α = 5", "α = 1"]
    assert main_table(F).loc["Local", "mean"] == "7.0 ± ∞" and list(main_table(F).index) == list(MAIN_METHODS)
    assert homogeneous_table(F).loc["Ditto", "mean"] == "50.5 ± 6.4"
    scale = paper_scale()  # fedlib's models at CIFAR-100: the parameters both ways over 2 × 10,000 × 100 float32
    assert (scale["parameters ÷ pseudo-labels"] == 8 * scale["parameters"] / 8e6).all()


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


def test_the_cells_share_their_clients_pretraining_and_keep_every_bit(monkeypatch):
    """The four methods of a cell start from the same pre-trained clients, and local training alone
    and a sensitivity run of the same seed and partition from those of that cell (PRETRAINED): the
    frames are those of cells that train every client themselves."""
    study = _study(client_train=dict(pretrain=dataclasses.replace(ADAM, epochs=2), train=ADAM,
                                     distill=dataclasses.replace(ADAM, batch_size=64)))
    cells = (lambda: alpha_cell(study, 0, study.alpha), lambda: local_cell(study, 0), lambda: sweep_cell(study, 0, "λ = 0"))
    monkeypatch.setattr(cosmos_experiments, "shared_pretraining", lambda study: contextlib.nullcontext())
    alone = [cell() for cell in cells]
    monkeypatch.undo()
    memo = TrainingMemo()
    monkeypatch.setattr(cosmos_experiments, "PRETRAINED", memo)
    shared = [cell() for cell in cells]
    # 5 clients pre-trained once, by the first cell's first method; its three others, local training and the sweep reuse them
    assert (memo.misses, memo.hits) == (5, 5 * 5)
    for a, b in zip(alone, shared):
        for name in a if isinstance(a, dict) else [None]:
            pd.testing.assert_frame_equal(a[name] if name else a, b[name] if name else b, check_exact=True)


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
    row = sweep_cell(study, 0, "clients = 5").iloc[0]
    pilot = study.pilot_scores(0, 1, ("COSMOS",), n_clients=5)
    assert list(pilot) == ["COSMOS"] and pilot["COSMOS"] == row["mean"]
    # the pilot study's cell: the same run at the study's own rate on pseudo-labels
    cell = pilot_cell(study, 0, lr=study.client_train["distill"].lr, method="COSMOS", rounds=1, n_clients=5)
    assert cell["mean"].tolist() == [row["mean"]]
    with pytest.raises(ValueError, match="methods"):
        study.pilot_scores(0, 1, ("Local",))


def test_the_clients_sweep_runs_the_kept_clients_of_the_default_federation():
    study = _study(n_clients=10, sweep_rounds=1, sweeps={"clients": [5]})
    row = sweep_cell(study, 0, "clients = 5").iloc[0]
    assert (row["study"], row["value"]) == ("clients", "5") and 0 <= row["purity"] <= 1


def test_every_cell_runs_through_the_study_runner_and_counts_pseudo_label_bytes():
    study = _study(sweeps={"λ": [0.0], "clusters": [1], "|U| share": [0.1]})
    studies = (Study("main", functools.partial(main_cell, study), seeds=[0]),
               Study("homogeneous", functools.partial(homogeneous_cell, study), seeds=[0]),
               Study("local", functools.partial(local_cell, study), seeds=[0]),
               Study("mixture", functools.partial(mixture_cell, study), grid={"mixture": ["two"]}, seeds=[0]),
               Study("alpha", functools.partial(alpha_cell, study), grid={"alpha": [1.0]}, seeds=[0]),
               Study("sweep", functools.partial(sweep_cell, study), grid={"setting": sweep_settings(study.sweeps)}, seeds=[0]))
    runs = {name: frame for s in studies for name, frame in run_study(s).items()}
    assert runs["main"].method.tolist() == list(MAIN_METHODS[:-1]) and runs["local"].method.tolist() == ["Local"]
    assert runs["homogeneous"].method.tolist() == ["COSMOS", "Ditto", "FedBABU", "FedRep"]
    assert runs["mixture"][["mixture", "method"]].values.tolist() == [["two", "COSMOS"], ["two", "COMET"]]
    assert runs["alpha"][["alpha", "method"]].values.tolist() == [[1.0, m] for m in ("COSMOS", *BASE)]  # every baseline
    assert runs["sweep"][["setting", "study", "value"]].values.tolist() == [
        ["λ = 0", "λ", "0.0"], ["clusters = 1", "clusters", "1"], ["|U| share = 0.1", "|U| share", "0.1"]]
    assert (runs["sweep"].loc[runs["sweep"].study == "clusters", "clusters"] == 1).all()
    # the sweep default is the main COSMOS run after sweep_rounds rounds: the same scores as a run of that many rounds
    columns = [*METRICS, "clusters", "purity"]
    assert sweep_cell(_study(sweeps={"λ": [5.0]}), 0, "λ = 5")[columns].values.tolist() == runs["default"][columns].values.tolist()
    measures = runs["measures"].iloc[0]
    # a client sends its |U| × C float32 pseudo-labels every round (and its reply's metadata, a few bytes of JSON)
    cosmos = runs["bytes"].set_index("method").loc["COSMOS"]
    assert measures["n_public"] * 10 * 4 <= cosmos["up"] < measures["n_public"] * 10 * 4 + 100
    assert runs["bytes"].method.tolist() == ["COSMOS", *BASE]
    assert runs["curves"].groupby("method").size().to_dict() == {"COMET": 2, "COSMOS": 2, "FedCT": 2, "FedMD": 2}
    assert runs["clusters"]["round"].tolist() == [1, 2] and 0 <= measures["purity"] <= 1 and measures["deploy_bytes"] > 0
    # accuracy_points: the clients' pooled scores of the last round (or of a given one), in points; the main cell's, bit for bit
    public, hidden, fed, planted = study.split(0)
    archs = study.architectures(study.base_mix, study.n_clients, fed.global_test)
    run = run_federated(study.cosmos_method(fed.global_test, public, 0), fed, archs, LoopConfig(rounds=2, seed=0, eval_every=1))
    table, points = per_client_table(run.frame), accuracy_points(run.frame)
    assert points["mean"] == pytest.approx(100 * table["pooled"].mean()) and points["worst"] == pytest.approx(100 * table["pooled"].min())
    assert points["worst"] <= points["bottom-20 %"] <= points["mean"]
    assert points == runs["main"].set_index("method").loc["COSMOS", list(METRICS)].to_dict()
    assert accuracy_points(run.frame, 1)["mean"] == pytest.approx(100 * per_client_table(run.frame, 1)["pooled"].mean())
    # FedAvg is no run: its bytes are the model's, both ways (the ledger of a real FedAvg run agrees, metadata aside)
    fedavg = run_federated(FedAvg(train=SGD), fed, study.architectures(["cnn"], study.n_clients, fed.global_test),
                           LoopConfig(rounds=1, seed=0, evaluate_last=False))
    measured, computed = training_bytes(fedavg, study.n_clients, 1), fedavg_bytes(int(measures["params"]))
    assert computed["down"] <= measured["down"] < computed["down"] + 200 and computed["up"] <= measured["up"] < computed["up"] + 200
    # the frames and numbers the chapter reads
    F = tidy(runs, study, side=[0])
    R = numbers(F, study, n_classes=10)
    assert R["comm_ratio"] == fedavg_total(runs) / (cosmos["up"] + cosmos["down"])  # one seed: its mean is itself
    assert R["cosmos_mean"] == points["mean"] and R["local_mean"] == runs["local"]["mean"].iloc[0]
    assert R["n_public"] == measures["n_public"] and R["one_image"] == 100 / measures["test_size"]
    assert R["n_formed"] == runs["clusters"]["n_clusters"].iloc[0] and isinstance(R["cnn_params"], int)
    # the exercises' cell re-runs the main COSMOS run, bit for bit
    ex = exercise_cell(study, 0).iloc[0]
    assert ex["fixed"] == points["mean"] and ex["fixed_sweep"] == runs["default"]["mean"].iloc[0]
    assert ex["diam_round"] == 2 and 0 <= ex["re_purity"] <= 1 and ex["one_model"] <= 100
    # the regime checks' quantities: the server's fit in %, the ball (the family's one-pixel shift: most of an 8 x 8 image's
    # norm, the mutation the ball check must fail), FedCT's votes per round, each baseline's gain over local training
    assert 0 <= measures["server_fit"] <= 100 and measures["ball"] > 0.25 and measures["shift_ratio"] > 0.25
    # the convexity check the ball regime check reads: the one-pixel shift (this study's ball) fails it at every point
    assert measures["ball_nonconvex"] == 1.0
    # each COSMOS run records its own server fit and purity (the regime checks read the runs a row reads)
    assert runs["main"].set_index("method").loc["COSMOS", ["fit", "purity"]].tolist() == [measures["server_fit"], measures["purity"]]
    assert 0 <= runs["default"]["fit"].iloc[0] <= 100 and 0 <= runs["sweep"]["fit"].min() <= runs["sweep"]["fit"].max() <= 100
    for name in ("homogeneous", "mixture", "alpha"):
        own = runs[name].set_index("method")
        assert 0 <= own.loc["COSMOS", "fit"] <= 100 and 0 <= own.loc["COSMOS", "purity"] <= 1
        assert own.drop("COSMOS")[["fit", "purity"]].isna().all().all()  # the other methods have no server to fit
    assert [int(measures[f"vote_top_count_{r}"]) <= measures["vote_n_public"] for r in (1, 2)] == [True, True]
    gain = F["collaboration"]["gain"]
    assert gain.index.names == ["seed", "method"] and gain.loc[(0, "FedMD")] == pytest.approx(
        runs["main"].set_index("method").loc["FedMD", "mean"] - runs["local"]["mean"].iloc[0])
    assert set(F["alpha_change"].method) == {"COSMOS", *BASE} and set(F["mixture_change"].method) == {"COSMOS", "COMET"}
    assert "FedCT reaches" in R["fedct_reading"]


def test_the_scaled_ball_passes_the_ball_check_and_the_same_clients_are_compared():
    study = _study(n_clients=10, radius=0.1, sweeps={"clients": [5]})
    out = main_cell(study, 0)
    assert out["measures"]["ball"].iloc[0] == pytest.approx(0.1, abs=0.03)  # noise of 10 % of the mean norm
    # the default run scored on the clients the 5-client federation keeps: their mean pooled score, in points
    public, hidden, fed, planted = study.split(0)
    archs = study.architectures(study.base_mix, study.n_clients, fed.global_test)
    run = run_federated(study.cosmos_method(fed.global_test, public, 0), fed, archs, LoopConfig(rounds=2, seed=0, eval_every=1))
    kept = kept_clients(10, study.n_groups, 5)
    table = per_client_table(run.frame, study.sweep_rounds)
    assert out["default"]["kept_5"].iloc[0] == pytest.approx(100 * table.loc[kept, "pooled"].mean())


def test_the_server_pilot_reads_the_fit_and_the_vote_dynamics_count_the_public_points():
    study = _study()
    row = server_pilot_cell(study, 7, 1e-3, 3, rounds=1).iloc[0]
    assert 0 <= row["fit"] <= 100 and 0 <= row["mean"] <= 100
    assert study.with_server(1e-3, 3).server_train.steps == 3 and study.with_server(1e-3, 3).pseudo_lr["COSMOS"] == 1e-3
    frame = pd.DataFrame({"lr": [1e-4, 1e-3], "steps": [3, 3], "seed": 7, "mean": [50.0, 40.0], "fit": [80.0, 96.0]})
    assert server_choice(frame, 95.0)["lr"] == 1e-3  # the only one that fits, though it scores lower
    assert server_choice(frame.assign(fit=[96.0, 96.0]), 95.0)["lr"] == 1e-4  # both fit: the higher mean
    more = pd.DataFrame({"lr": [1e-3, 1e-3], "steps": [3, 9], "seed": 7, "mean": [40.0, 70.0], "fit": [96.0, 99.0]})
    assert server_choice(more, 95.0)["steps"] == 3  # the fewest steps that fit, not the best-scoring budget
    v = vote_dynamics([torch.tensor([2, 2, 2, 1])], np.array([2, 0, 1, 1]), 3).iloc[0]
    assert (v["accuracy"], v["top_class"], v["top_count"]) == (50.0, 2, 3)


def test_the_exercises_readings_follow_their_numbers():
    row = dict(fixed_sweep=60.0, fixed=70.0, re=61.0, re_purity=0.9, changes=1, ari=1.0, diam_first=10.0, diam_last=8.0,
               diam_round=4, one_model=9.0)
    E = exercise_numbers(pd.DataFrame([row]))
    assert (E["ex1_fixed"], E["ex2_fixed"], E["ex2_one_model"], E["ex1_diam_round"]) == (60.0, 70.0, 9.0, 4)
    assert type(E["ex1_changes"]) is int and type(E["ex1_ari"]) is float
    assert E["ex1_reading"].startswith("the final re-clustering finds the same groups") and E["ex1_diam_reading"].startswith("it shrank")
    assert E["ex2_reading"].startswith("a cluster model knows")
    E = exercise_numbers(pd.DataFrame([{**row, "ari": 0.5, "diam_first": 0.0, "one_model": 65.0}]))
    assert E["ex1_reading"] == "the final re-clustering differs from the first one"
    assert E["ex1_diam_reading"].startswith("every client formed a cluster of its own")
    assert E["ex2_reading"].startswith("one cluster's model serves the other clusters")


def test_the_verdicts_the_prose_reads():
    def claim(key, versus=None, substitution=""):
        return Claim(key, "q", "s", "accuracy, points", "greater", effect("points"), substitution, resolution=0.1, versus=versus)

    up, down = [3.0, 3.2, 2.9], [-3.0, -3.1, -2.8]
    results = {"beats": evaluate(claim("beats", ("A", "B")), up, {"A": [0.0, 0.1, 0.0], "B": [2.0, 3.2, 1.5]}),
               "beats-own": evaluate(claim("beats-own"), down), "comm": evaluate(claim("comm"), up),
               **{k: evaluate(claim(k), up) for k in ("homogeneous", "alpha-gain", "mixtures", "mixtures-edge")},
               "local": evaluate(claim("local"), down)}
    declared = [claim(k) for k in results] + [claim("T", substitution="no other T, so this row is not decided here; 2 seeds"),
                                              claim("rule")]
    V = verdicts(results, declared, comm_ratio=1.2)
    assert (V["beats_verdict"], V["beats_binding"], V["own_verdict"], V["local_verdict"]) == (
        "inconclusive at this scale", "B", "does not hold: the opposite direction", "does not hold: the opposite direction")
    assert V["alpha_gain_verdict"] == "holds" and V["mixtures_edge_verdict"] == "holds"
    assert V["local_reading"].endswith("COSMOS does worse than its clients' own training")
    assert V["comm_reading"].startswith("with models this small") and V["local_interval"] == "−3.0 [−3.3, −2.6], 3 seeds"
    assert V["undecided_text"] == ("This profile leaves out of the table, undecided, the declared rows “T” (no other T, so this row "
                                   "is not decided here); “rule” (its sweep is not run at this profile).")
    coarse = Claim("local", "q", "s", "accuracy, points", "greater", effect("points"), resolution=2.0)
    V = verdicts({**results, "local": evaluate(coarse, up)}, declared, comm_ratio=12.0)
    assert V["local_verdict"] == "untestable at this resolution: the resolution 2 is above 0.25 × m = 0.25"
    assert V["local_reading"] == LOCAL_READINGS["untestable at this resolution"]
    assert V["comm_reading"].startswith("the pseudo-label matrix is an order of magnitude")


def test_the_reading_of_local_training_covers_every_verdict():
    assert set(LOCAL_READINGS) == (set(VERDICTS) - {DOES_NOT_HOLD}) | set(SHORTFALLS)
    frame = pd.DataFrame({"seed": [0, 1, 2], "n": [5.0, 5.0, 5.0]})
    check = RegimeCheck("enough", "clients", Read("f", "n"), "at least", 10.0, "a regime check that fails here")
    c = Claim("local", "q", "s", "accuracy, points", "greater", effect("points"), resolution=0.1)
    results = {"holds": evaluate(c, [3.0, 3.2, 2.9]), "smaller than claimed": evaluate(c, [0.2, 0.3, 0.25]),
               "the opposite direction": evaluate(c, [-3.0, -3.1, -2.8]), "inconclusive at this scale": evaluate(c, [1.0]),
               "untestable at this resolution": evaluate(dataclasses.replace(c, resolution=2.0), [3.0, 3.2, 2.9]),
               "untestable in this setting": evaluate(dataclasses.replace(c, regimes=(check,)), [3.0, 3.2, 2.9],
                                                      regimes=[check.check({"f": frame})])}
    for expected, result in results.items():
        assert (result.shortfall or result.verdict) == expected
        assert local_reading(result) == LOCAL_READINGS[expected]


def test_the_ball_check_passes_a_small_ball_and_fails_a_large_one_or_a_one_pixel_shift():
    from fedbook.studies.cosmos_experiments import ball_convexity
    from fedlib.algorithms.cosmos import ball_noise
    x = torch.rand(60, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    x[:, :, :, :2] = 0  # pixels that are blank in every image, as a digit's border is
    check = lambda **ball: ball_convexity(x, lam=5.0, n_classes=10, seed=0, **ball)  # noqa: E731
    assert check(shift=0, noise=ball_noise(x, 0.001)) == 0.0
    assert check(shift=0, noise=ball_noise(x, 0.5)) > 0 and check(shift=1, noise=0.0) > 0
    assert check(shift=0, noise=ball_noise(x, 0.5)) == ball_convexity(x, lam=5.0, n_classes=10, seed=0, shift=0,
                                                                     noise=ball_noise(x, 0.5))  # same seed, same share


def test_the_regime_reading_names_the_failing_check_its_rows_and_what_would_make_them_testable():
    from fedbook.claims import regime_reading
    from fedbook.studies.cosmos_experiments import TESTABLE_IF
    chk = RegimeCheck("the baselines' collaboration beats local training", "gain, points", Read("c", "gain"), "at least", 0.0,
                      "why")
    claim = lambda k: Claim(k, "q", "s", "x, points", "greater", effect("points"), resolution=0.1, regimes=(chk,))
    low, high = chk.check({"c": pd.DataFrame({"gain": [-0.5]})}), chk.check({"c": pd.DataFrame({"gain": [2.0]})})
    text = regime_reading({k: evaluate(claim(k), [3.0, 4.0], regimes=(low,)) for k in ("beats", "alpha-beats")}, TESTABLE_IF)
    assert "makes “beats”, “alpha-beats” untestable in this setting" in text and "= -0.5, needs at least 0" in text
    assert text.endswith(TESTABLE_IF[chk.key] + ".")
    assert regime_reading({"beats": evaluate(claim("beats"), [3.0, 4.0], regimes=(high,))}, TESTABLE_IF).startswith("Every regime check passes")
