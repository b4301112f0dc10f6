"""FedGRC's experiments (fedbook.studies.fedgrc): the study every seed and α runs, checked against
the same runs and heads made by hand, and the table helpers on hand-computed values."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest

from fedlib.algorithms import Ditto, FedAvg
from fedlib.cgrl import CGRLConfig
from fedbook.claims import SeedValues, seed_band
from fedlib.data import make_gaussian_mixture
from fedlib.posthoc import FrozenFeatures, StatHead, collect_statistics
from fedbook.studies.fedgrc import (EXCESS_COLUMNS, FedGRCStudy, SharedRule, baseline_head, before_after,
                                      deployed_name, each_baseline, excess_gain_rows, final_round, mean_over_heads,
                                      sensitivity)
from fedlib.federation import hold_out_validation, make_federation
from fedlib.heads import MMS, SASP, CCVRHead, FedNCMHead, LDAHead
from fedlib.loop import LoopConfig
from fedlib.models import build_model
from fedlib.results import per_client_table
from fedlib.metrics import protocol_summary
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig

SEED, ALPHA = 3, 0.5


@pytest.fixture(scope="module")
def study_and_runs(tmp_path_factory):
    data = make_gaussian_mixture(n_per_class=50, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    model_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4, hidden=(16, 8))
    train = TrainConfig(epochs=1, batch_size=16, lr=0.05)
    cgrl = CGRLConfig(augment="none", warmup=1, layers=("fc1", "penultimate"))
    study = FedGRCStudy(model_fn=model_fn, train=train, finetune=train, head_train=train, cgrl=cgrl,
                        augmentation=CGRLConfig(augment="none", lambda_dir=0.0, lambda_rad=0.0, layers=("fc1", "penultimate")),
                        layers=("fc1", "penultimate"), baseline_heads={"FedNCM": FedNCMHead(), "LDA": LDAHead()}, gamma=0.1,
                        m0=10.0, n_clients=3, global_test_per_class=10, val_fraction=0.3)
    edited = []
    out = tmp_path_factory.mktemp("fedgrc_results")
    runs = study.run({SEED: data}, [SEED], [ALPHA], {SEED: LoopConfig(rounds=1, seed=SEED, eval_every=0)},
                     keep_features_at=ALPHA, results_dir=out, edit_federation=lambda f: edited.append(f) or f)
    return study, runs, data, edited, out


def test_the_study_trains_every_method_and_deploys_every_head(study_and_runs):
    study, runs, _, edited, out = study_and_runs
    assert runs.n_runs == len(study.methods()) == 5 and len(edited) == 1 and "FedAvg" not in study.methods()
    methods = set(runs.tidy["method"])
    expected = {deployed_name(m) for m in study.methods()} | {"FedAvg", "FedAvg-FT", "FedETF-FT", "FedAvg + FedCGS + FT"}
    expected |= {f"{b} + {h}" for b in study.backbones for h in ("FedNCM", "LDA", "MMS", "MMS + SASP")}
    assert methods == expected and "CGRL (training head)" in methods
    assert runs.validation["head"].tolist() == ["FedNCM", "LDA"] and (runs.validation["backbone"] == "FedAvg-Aug").all()
    assert set(runs.statistics) == {(SEED, ALPHA, b) for b in study.backbones} and set(runs.penultimate) == {(SEED, ALPHA)}
    assert set(runs.features) == {SEED} and len(runs.ledgers) == 2 * len(study.backbones)
    assert set(runs.train_ledgers) == set(runs.round_seconds) == {(SEED, ALPHA, m) for m in study.methods()}
    saved = pd.read_csv(out / "fedgrc_results.csv")
    assert len(saved) == len(runs.tidy) and (out / f"seed{SEED}" / f"alpha{ALPHA}" / "CGRL").is_dir()
    assert not (out / f"seed{SEED}" / f"alpha{ALPHA}" / "FedAvg").exists()  # FedAvg's run is Ditto's, saved once


def test_the_study_equals_the_same_runs_made_by_hand(study_and_runs):
    study, runs, data, _, _ = study_and_runs
    fed = make_federation(data, n_clients=3, partition="dirichlet", alpha=ALPHA, min_size=10, global_test_per_class=10,
                          seed=SEED)
    fed, _ = hold_out_validation(fed, 0.3, SEED)
    assert np.array_equal(runs.federations[(SEED, ALPHA)].global_test.x, fed.global_test.x)
    lc = LoopConfig(rounds=1, seed=SEED, eval_every=0)
    v = SeedValues(runs.tidy, ["alpha", "method", "metric"], [SEED])
    # FedAvg is Ditto's global model: deployed on Ditto's server state, not trained again
    fedavg = run_federated(Ditto(train=study.train, personal_train=study.train), fed, study.model_fn, lc)
    fa = protocol_summary(per_client_table(evaluate_deployment(FedAvg(train=study.train), fedavg, fed, study.model_fn, lc)))
    assert v(ALPHA, "FedAvg", "global")[0] == 100 * fa["global"]
    assert v(ALPHA, "Ditto", "global")[0] == 100 * fedavg.summary()["global"]
    frozen = FrozenFeatures(collect_statistics(fedavg, fed, study.model_fn, layers=study.layers, seed=SEED), fed, study.model_fn)
    mms = MMS(gamma=0.1).fit(frozen.moments, frozen.layer_dims)
    sasp = frozen.summary([SASP(m0=10.0).fit(mms, m) for m in frozen.client_moments])
    assert v(ALPHA, "FedAvg + MMS + SASP", "F@25")[0] == 100 * sasp["F@25"]
    assert final_round(fedavg)["round"].unique().tolist() == [1]


def test_sensitivity_refits_the_heads_on_the_kept_features(study_and_runs):
    _, runs, _, _, _ = study_and_runs
    sens = sensitivity(runs.features, [0.0, 10.0, math.inf], [0.1, 1.0], gamma=0.1, m0=10.0)
    assert len(sens) == 3 * 3 + 2 * 3 and set(sens["grid"]) == {"m0", "gamma"}
    v = SeedValues(runs.tidy, ["alpha", "method", "metric"], [SEED])
    at = sens.set_index(["grid", "x", "curve"])["value"]
    assert at[("m0", 10.0, "F@25")] == v(ALPHA, "CGRL + MMS + SASP", "F@25")[0]  # the chapter's own head at m0 = 10
    assert at[("m0", math.inf, "global")] == v(ALPHA, "CGRL + MMS", "global")[0]  # m0 = inf: the shared head
    assert at[("gamma", 0.1, "MMS global")] == v(ALPHA, "CGRL + MMS", "global")[0]
    mean, half = seed_band(sens[sens["curve"] == "MMS global"], "x", [0.1, 1.0])
    assert mean.tolist() == [at[("gamma", 0.1, "MMS global")], at[("gamma", 1.0, "MMS global")]]
    assert np.isinf(half).all()  # one seed: no interval


def _tidy(values):
    rows = [{"seed": s, "alpha": 0.1, "method": m, "metric": k, "value": x} for (m, k), xs in values.items()
            for s, x in enumerate(xs)]
    return SeedValues(pd.DataFrame(rows), ["alpha", "method", "metric"], [0, 1])


def test_each_baseline_and_mean_over_heads_by_hand():
    v = _tidy({("A", "g"): [1.0, np.nan], ("B", "g"): [2.0, np.nan], ("C", "g"): [0.5, 3.0],
               ("X + H1", "g"): [10.0, 20.0], ("X + H2", "g"): [30.0, 40.0]})
    every = each_baseline(v, 0.1, "g", ["A", "B", "C"])
    assert list(every) == ["A", "B", "C"] and every["C"].tolist() == [0.5, 3.0]  # by name, never a per-seed maximum
    assert np.isnan(every["A"][1])
    assert mean_over_heads(v, 0.1, "X", ["H1", "H2"], "g").tolist() == [20.0, 30.0]


def test_before_after_and_excess_gain_by_hand():
    v = _tidy({("P", "m"): [1.0, 2.0], ("Q", "m"): [4.0, 1.0]})
    d = before_after(v, [0, 1], [0.1], [("P", "Q")], ["m"])
    assert d["value"].tolist() == [3.0, -1.0] and d["column"].tolist() == ["Δ m", "Δ m"]
    # F(B0,H0) = 10, F(B1,H0) = 12, F(B0,H1) = 11, F(B1,H1) = 16: I = 6 - 2 - 1 = 3 on seed 0; additive on seed 1: I = 0
    v = _tidy({("B0 + H", "F"): [10.0, 10.0], ("B1 + H", "F"): [12.0, 12.0], ("B0 + S", "F"): [11.0, 11.0],
               ("B1 + S", "F"): [16.0, 13.0]})
    rows = excess_gain_rows(v, {(0, 0.1): "H", (1, 0.1): "H"}, [0, 1], [0.1], ["F"], b0="B0", b1="B1", h1="S")
    table = rows.pivot(index="seed", columns="column", values="value")[list(EXCESS_COLUMNS)]
    assert table.loc[0].tolist() == [10.0, 12.0, 11.0, 16.0, 3.0] and table.loc[1, "excess gain I"] == 0.0


def test_baseline_head_is_the_best_on_validation_per_seed():
    val = pd.DataFrame({"seed": [0, 0, 1, 1, 0], "alpha": 0.1, "backbone": ["FedAvg-Aug"] * 4 + ["FedAvg"],
                        "head": ["X", "Y", "X", "Y", "Z"], "validation global (%)": [80.0, 85.0, 90.0, 70.0, 99.0]})
    assert baseline_head(val) == {(0, 0.1): "Y", (1, 0.1): "X"}  # Z is on another backbone


def test_a_shared_baseline_head_on_frozen_features_equals_its_deployment(study_and_runs):
    """SharedRule on features extracted once gives the protocol's numbers of evaluate_deployment(StatHead(head))."""
    study, runs, _, _, _ = study_and_runs
    fed = runs.federations[(SEED, ALPHA)]
    lc = LoopConfig(rounds=1, seed=SEED, eval_every=0)
    backbone = run_federated(FedAvg(train=study.train), fed, study.model_fn, lc)
    pen = collect_statistics(backbone, fed, study.model_fn, layers=("penultimate",), seed=SEED)
    frozen = FrozenFeatures(pen, fed, study.model_fn)
    for head in (FedNCMHead(), LDAHead(), CCVRHead()):
        ours = frozen.summary([SharedRule.fit(head, pen, SEED)] * len(frozen.clients))
        theirs = protocol_summary(per_client_table(evaluate_deployment(StatHead(head=head, seed=SEED), pen, fed,
                                                                       study.model_fn, lc)))
        assert ours.keys() == theirs.keys()
        for k in ours:
            assert ours[k] == pytest.approx(theirs[k], abs=1e-9, nan_ok=True), (type(head).__name__, k)
