"""The runs and readings of the chapter ``hdcfl_experiments`` (fedbook.studies.hdcfl): the pieces by
hand, the byte accounting against the ledger's own frame, and a tiny study end to end, whose
deployments that must coincide do."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from fedlib.algorithms.hdcfl import HDCConfig, HDCFL, cached_clients
from fedbook.studies.hdcfl import (BASELINES, METHODS, RAW_RUN, STEP_COLUMN, HDCFLRuns, HDCFLStudy, activation_steps,
                                      activation_table, donor_table, ledger_costs, nearest_donor_gain, server_seconds, step_text, tail_metrics)
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.training import TrainConfig, predict


def _frame(values: list[float]) -> pd.DataFrame:
    rows = [(2, k, m, v) for k, v in enumerate(values) for m in ("pooled", "global", "unseen", "rare")]
    rows += [(2, k, "local", 1.0) for k in range(len(values))]  # the clients' own small splits: not what the tails read
    rows += [(1, k, "pooled", 0.0) for k in range(len(values))]  # an earlier round is not read
    return pd.DataFrame(rows, columns=["round", "client", "metric", "value"])


def test_tail_metrics_by_hand():
    # ten clients: the bottom 20 % are the two lowest
    out = tail_metrics(_frame([0.1, 0.3, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.6, 0.9]))
    assert out == pytest.approx({"mean": 49.0, "worst": 10.0, "bottom-20 %": 20.0, "gap": 80.0})


def test_server_seconds_by_hand_and_without_plain_rounds():
    assert server_seconds([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3) == {"refresh": 4.5, "other": 3.0}
    every = server_seconds([2.0, 4.0], 1)
    assert every["refresh"] == 3.0 and math.isnan(every["other"])
    with pytest.raises(ValueError, match="refresh_every must be an int >= 1, got 0"):
        server_seconds([1.0], 0)


def test_step_text():
    assert step_text(-0.04) == "-0.0 points" and step_text(2.0) == "+2.0 points"
    assert step_text(float("nan")).startswith("not measurable")


def test_activation_table_by_hand():
    history = pd.DataFrame({"setting": ["a"] * 4 + ["b"] * 2, "seed": [0, 0, 1, 1, 0, 0],
                            "descriptor": ["rank-r descriptors"] * 6, "round": [2, 4, 2, 4, 2, 4],
                            "active": [False, True, False, True, True, True]})
    raw = history.assign(descriptor="raw heads", active=True)  # the raw-head runs are not read
    curves = pd.DataFrame({"setting": ["a"] * 4 + ["b"] * 2, "seed": [0, 0, 1, 1, 0, 0], "round": [2, 4, 2, 4, 2, 4],
                           "mean": [50.0, 54.0, 60.0, 61.0, 70.0, 75.0]})
    table = activation_table(pd.concat([history, raw]), curves, ["b", "a"], refresh_every=2)
    assert table.index.tolist() == ["b", "a"]
    assert table.loc["a"].tolist() == [4.0, 4, 4, 2.5]  # steps 4 and 1
    assert table.loc["b", "earliest"] == 2 and math.isnan(table.loc["b", STEP_COLUMN])  # active at the first refresh


def test_activation_steps_per_seed_by_hand_and_paired_across_settings():
    history = pd.DataFrame({"setting": ["a"] * 6 + ["b"] * 6, "seed": [0, 0, 1, 1, 2, 2] * 2,
                            "descriptor": "rank-r descriptors", "round": [2, 4] * 6,
                            "active": [False, True, False, True, True, True,   # a: seed 2 active at the first refresh
                                       False, True, False, False, False, True]})  # b: seed 1 never active
    curves = history[["setting", "seed", "round"]].assign(mean=[50.0, 54.0, 60.0, 61.0, 70.0, 75.0,
                                                                40.0, 41.0, 30.0, 35.0, 20.0, 22.0])
    a = activation_steps(history, curves, "a", refresh_every=2)
    assert a.index.tolist() == [0, 1, 2] and a.tolist()[:2] == [4.0, 1.0] and math.isnan(a[2])
    b = activation_steps(history, curves, "b", refresh_every=2)
    assert b[0] == 1.0 and math.isnan(b[1]) and b[2] == 2.0
    runs = dataclasses.replace(_runs(), history=history, curves=curves)
    steps_a, steps_b = runs.steps("a", 2), runs.steps("b", 2)
    assert steps_a[:2].tolist() == [4.0, 1.0] and math.isnan(steps_a[2])  # seed order, NaN kept: pairs by seed
    assert steps_b[0] == 1.0 and math.isnan(steps_b[1]) and steps_b[2] == 2.0
    assert activation_table(history, curves, ["a", "b"], 2)[STEP_COLUMN].tolist() == [2.5, 1.5]  # the means of the steps


def test_overlap_share_reads_only_seeds_with_an_association_to_explain():
    runs = _runs()
    runs.donor_seed = pd.DataFrame({"setting": "x", "seed": [0, 1, 2], "ρ (raw heads)": [0.4, 0.0, 0.005],
                                    "partial ρ given overlap": [0.1, -0.05, -0.2]})
    share = runs.overlap_share("x", floor=0.01)
    assert share[0] == pytest.approx(0.75)  # (0.4 − 0.1) / 0.4
    # ρ = 0 with a negative partial ρ: the old ρ/2 − partial ρ = 0.05 "held" with nothing to explain; now undefined
    assert math.isnan(share[1]) and math.isnan(share[2])


def _runs() -> HDCFLRuns:
    main = pd.DataFrame([{"setting": s, "seed": seed, "method": m, "mean": v + seed, "worst": v / 2, "bottom-20 %": v / 2,
                          "gap": 10.0}
                         for seed in (1, 0) for s in ("x", "y") for m, v in zip(METHODS, range(7))])
    main.loc[(main.method == "IFCA") & (main.seed == 1), "mean"] = 100.0  # one seed's best baseline is IFCA
    variants = pd.DataFrame({"setting": "x", "seed": [1, 0], "variant": "v", "mean": [3.0, 2.0], "worst": 0.0,
                             "bottom-20 %": 0.0, "gap": 0.0, "k": 2, "silhouette": 0.5})
    history = pd.DataFrame({"setting": "x", "seed": [0, 0, 1, 1], "descriptor": "raw heads", "round": [4, 2, 2, 4],
                            "silhouette": [0.4, 0.2, 0.1, 0.3]})
    donors = pd.DataFrame({"setting": "x", "seed": [1] * 6 + [0] * 6, "target": [0, 0, 1, 1, 2, 2] * 2,
                           "donor": [1, 2, 0, 2, 0, 1] * 2, "gain": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] * 2,
                           "head_cosine": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6] + [0.6, 0.5, 0.4, 0.3, 0.2, 0.1],
                           "lowrank_cosine": 0.0})
    return HDCFLRuns(main=main, variants=variants, history=history, curves=pd.DataFrame(), donors=donors,
                     costs=pd.DataFrame(), server=pd.DataFrame())


def test_the_readings_per_seed_by_hand():
    runs = _runs()
    assert runs.macro_of("HDC-FL", "mean").tolist() == [0.0, 1.0]  # seeds 0, 1; HDC-FL's v is 0
    assert runs.macro_of("IFCA", "mean").tolist() == [6.0, (100.0 + 100.0) / 2]
    every = runs.each_baseline("mean")
    assert list(every) == list(BASELINES) and every["IFCA"].tolist() == [6.0, 100.0]  # by name, no per-seed maximum
    assert {k: v.tolist() for k, v in runs.each_baseline("mean", baselines=["FedAvg-SE", "FedRep"]).items()} == {
        "FedAvg-SE": runs.macro_of("FedAvg-SE", "mean").tolist(), "FedRep": runs.macro_of("FedRep", "mean").tolist()}
    assert runs.variant("x", "v").tolist() == [2.0, 3.0]
    assert runs.refreshes("x", "raw heads", "silhouette", "last").tolist() == [0.4, 0.3]
    assert runs.refreshes("x", "raw heads", "silhouette", "mean").tolist() == pytest.approx([0.3, 0.2])
    assert runs.donor("x").tolist() == pytest.approx([-1.0, 1.0])  # similarity against gain: reversed, then aligned
    assert set(runs.macro.setting) == {"macro"} and len(runs.macro) == 2 * len(METHODS)
    with pytest.raises(ValueError, match="how must be 'last' or 'mean', got 'first'"):
        runs.refreshes("x", "raw heads", "silhouette", "first")


def test_ledger_costs_equal_the_chapter_s_frame_arithmetic(tiny_federation, tiny_model_fn):
    """The numbers the chapter glued before the accounting moved: sums of the ledger's frame over
    rounds × clients, bit for bit."""
    config = HDCConfig(rank=2, refresh_every=1, max_activation_round=1, n_init=2)
    run = run_federated(HDCFL(train=TrainConfig(steps=1, batch_size=16), config=config), tiny_federation, tiny_model_fn,
                        LoopConfig(rounds=2, seed=0))
    led, n = run.ledger.to_frame(), 2 * tiny_federation.n_clients
    evals = led[led.kind.str.startswith("eval")]
    expected = {"up per client and round": led[led.direction == "up"].bytes.sum() / n,
                "training broadcast per client and round":
                    led[(led.direction == "down") & ~led.kind.str.startswith("eval")].bytes.sum() / n,
                "evaluation message per client, last round":
                    evals[evals["round"] == evals["round"].max()].bytes.sum() / tiny_federation.n_clients}
    assert ledger_costs(run.ledger, 2, tiny_federation.n_clients) == expected
    assert expected["evaluation message per client, last round"] < expected["training broadcast per client and round"]
    unevaluated = run_federated(HDCFL(train=TrainConfig(steps=1, batch_size=16), config=config), tiny_federation,
                                tiny_model_fn, LoopConfig(rounds=1, seed=0, evaluate_last=False))
    assert math.isnan(ledger_costs(unevaluated.ledger, 1, tiny_federation.n_clients)["evaluation message per client, last round"])


def test_donor_table_scores_the_target_s_own_pair_on_its_test_split(tiny_federation, tiny_model_fn):
    config = HDCConfig(rank=2, refresh_every=1, max_activation_round=1, n_init=2)
    run = run_federated(HDCFL(train=TrainConfig(steps=2, batch_size=16), config=config), tiny_federation, tiny_model_fn,
                        LoopConfig(rounds=1, seed=0, evaluate_last=False))
    groups = np.array([0, 0, 1, 1])
    table = donor_table(run.server, tiny_federation, tiny_model_fn, 2, groups)
    n = len(cached_clients(run.server))
    assert len(table) == n * (n - 1) and table["same_group"].sum() == 4  # (0, 1), (1, 0), (2, 3), (3, 2)
    model = tiny_model_fn()
    model.load_state_dict({**run.server.with_prefix("cache/0/model/"),
                           **{"head." + k: v for k, v in run.server.with_prefix("cache/0/head/").items()}})
    test = tiny_federation.clients[0].test
    assert (table[table.target == 0]["own"] == 100 * float((predict(model, test.x) == test.y).float().mean())).all()


@pytest.fixture(scope="module")
def tiny_study():
    train = TrainConfig(epochs=1, batch_size=16, lr=0.05)
    return HDCFLStudy(dataset="uci8", n_samples=160, model="cnn", width=8, feature_dim=8, n_clients=4,
                      global_test_per_class=3, class_fraction=0.3, alpha=0.3, n_rotations=2, rounds=2, train=train,
                      finetune=train, hdc=HDCConfig(rank=2, refresh_every=1, max_activation_round=2, n_init=2),
                      variants={"default": {}, "λ = 0": dict(lam=0.0)}, ifca_k=2)


def test_a_tiny_study_end_to_end(tiny_study):
    runs = tiny_study.run(["rotation"], [3])
    assert runs.main.method.tolist() == list(METHODS) and set(runs.main.seed) == {3}
    assert list(runs.first) == ["rotation"]
    assert runs.variants.variant.tolist() == ["default", "λ = 0", RAW_RUN]
    assert set(runs.history.descriptor) == {"rank-r descriptors", "raw heads"}
    assert runs.costs.method.tolist() == ["HDC-FL", "FedRep"] and runs.seconds > 0
    assert runs.donors["same_group"].any() and not runs.donors["same_group"].all()
    tails = ["mean", "worst", "bottom-20 %", "gap"]
    v, by = runs.variants.set_index("variant"), runs.main.set_index("method")
    # the two rows copied rather than computed again are what computing them gives: λ = 0 deploys the shared
    # encoder with each client's head (FedAvg-SE's deployment), and the default refreshed again at the last
    # round (active by then) is what the run itself deployed
    run = runs.first["rotation"]
    fed = tiny_study.federation("rotation", 3)[0]
    for name, change in (("λ = 0", dict(lam=0.0)), ("default", {})):
        again, _ = tiny_study.deploy_variant(run, fed, tiny_study.model_fn(fed.global_test),
                                             dataclasses.replace(tiny_study.hdc, **change), 3)
        assert v.loc[name, tails].tolist() == pytest.approx([again[m] for m in tails], abs=1e-9)
    assert v.loc["λ = 0", tails].tolist() == by.loc["FedAvg-SE", tails].tolist()
    # the raw-head rows of the history are the same run's refreshes, grouped on the raw heads
    h = runs.history.set_index(["descriptor", "round"])
    assert h.loc["raw heads"].index.tolist() == h.loc["rank-r descriptors"].index.tolist()
    assert h.loc["raw heads", "entropy"].isna().all() and (h.loc["raw heads", "k"] >= 2).all()
    cost = runs.costs.set_index("method")
    assert cost.loc["HDC-FL", "up per client and round"] > cost.loc["FedRep", "up per client and round"]  # + the head


def test_a_study_under_partial_participation_samples_half_the_clients_for_every_method(tiny_study):
    half = dataclasses.replace(tiny_study, participation=0.5)
    out = half.run_seed("Dirichlet", 1)
    assert [r["method"] for r in out["rows"]] == list(METHODS)
    assert all(np.isfinite(r["mean"]) for r in out["rows"])
    with pytest.raises(ValueError, match="participation must be"):
        dataclasses.replace(tiny_study, participation=0.0)


def test_nearest_donor_gain_by_hand():
    t = pd.DataFrame({"target": [0, 0, 0, 1, 1, 1], "donor": [1, 2, 3, 0, 2, 3],
                      "head_cosine": [0.1, 0.7, 0.7, 0.9, 0.2, 0.3], "gain": [-6.0, 3.0, 0.0, 1.0, -1.0, -3.0]})
    nearest, random = nearest_donor_gain(t)
    assert nearest == pytest.approx((3.0 + 1.0) / 2)  # a tie (0.7) takes the first donor
    assert random == pytest.approx((-1.0 + -1.0) / 2)


def test_run_orders_the_items_by_seed_then_setting_and_keeps_the_first_seed_s_runs(tiny_study, monkeypatch):
    def fake(self, setting, seed, keep=False):
        frame = pd.DataFrame({"setting": [setting], "seed": [seed], "round": [1]})
        return {"rows": [{"setting": setting, "seed": seed, "method": "HDC-FL", "mean": 1.0, "worst": 1.0,
                          "bottom-20 %": 1.0, "gap": 0.0}], "variants": [], "history": [frame], "curves": [frame],
                "bytes": [], "server": [], "donors": pd.DataFrame(columns=["setting", "seed"]), "setting": setting,
                "first": f"{setting} {seed}" if keep else None, "seconds": 1.0}

    monkeypatch.setattr(HDCFLStudy, "run_seed", fake)
    runs = tiny_study.run(["rotation", "Dirichlet"], [5, 6])
    assert runs.main[["setting", "seed"]].values.tolist() == [["rotation", 5], ["Dirichlet", 5], ["rotation", 6],
                                                               ["Dirichlet", 6]]
    assert runs.first == {"rotation": "rotation 5", "Dirichlet": "Dirichlet 5"} and runs.seconds == 4.0


def test_the_study_s_federations_and_its_refusals(tiny_study):
    fed, groups = tiny_study.federation("rotation", 0)
    assert fed.n_clients == 4 and groups.tolist() == [0, 0, 1, 1]
    assert tiny_study.federation("label subsets", 0)[1] is None
    with pytest.raises(ValueError, match="unknown setting 'rotations'"):
        tiny_study.federation("rotations", 0)
    kwargs = {f: getattr(tiny_study, f) for f in tiny_study.__dataclass_fields__}
    with pytest.raises(ValueError, match="max_activation_round=2 must be <= rounds=1"):
        HDCFLStudy(**{**kwargs, "rounds": 1})
    with pytest.raises(ValueError, match="may not be named 'raw heads'"):
        HDCFLStudy(**{**kwargs, "variants": {RAW_RUN: {}}})
    with pytest.raises(ValueError, match="seeds must hold at least one run seed"):
        tiny_study.run(["rotation"], [])
