"""The runs and readings of the chapter ``hdcfl_experiments`` (fedbook.studies.hdcfl_experiments): the pieces by
hand, the frames the claims read by hand (one row per seed, in seed order, NaN seeds left out as
the claims' rules say), the byte accounting against the ledger's own frame, and a tiny study end to
end through the study runner, whose deployments that must coincide do."""

from __future__ import annotations

import dataclasses
import functools
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import fedbook.studies.hdcfl_experiments as hdcfl
from fedbook.claims import HOLDS, INCONCLUSIVE, UNTESTABLE_RESOLUTION, VERDICTS, Claim, Read, effect, evaluate
from fedbook.study import Study, run_study
from fedbook.studies.hdcfl_experiments import (BASELINES, CONTRAST_COLUMN, DEFAULT_VARIANT, HALF_RHO, METHODS, ONE_GROUP_VARIANT,
                                   RAW_RUN, SHARED_VARIANT, S_DIR, S_LS, S_ROT, HDCFLStudy, activation_contrast,
                                   activation_table, contrast_pairs, contrast_text, donor_seeds, donor_table, exercise_cell,
                                   exercise_numbers, gate_opened, in_run_order, ledger_costs, macro_table, nearest_donor_gain,
                                   overlap_frame, paired_rows, per_seed, reference_groups, refresh_summary, results,
                                   results_numbers, run_cell, server_seconds, tail_metrics)
from fedlib.algorithms.hdcfl import HDCConfig, HDCFL, cached_clients
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


def test_contrast_text():
    assert contrast_text(-0.04) == "-0.0 points" and contrast_text(2.0) == "+2.0 points"
    assert contrast_text(float("nan")).startswith("not measurable")


def _activation() -> pd.DataFrame:
    return pd.DataFrame({"setting": [S_LS] * 3 + [S_DIR] * 3 + [S_ROT] * 3, "seed": [0, 1, 2] * 3,
                         "round": [4.0, 8.0, 6.0, 16.0, 16.0, 16.0, 12.0, 14.0, np.nan],
                         "gate opened": [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, np.nan],
                         "k": [8.0, 7.0, 6.0, 2.0, 3.0, 4.0, 4.0, 4.0, np.nan],
                         "ARI with the reference": [1.0, 0.5, 0.6, 0.1, 0.2, 0.0, 1.0, 0.8, np.nan],
                         "contrast": [3.0, 1.0, 2.0, 1.0, 0.5, -1.0, 2.0, 0.5, np.nan]})


def test_activation_table_by_hand():
    table = activation_table(_activation(), [S_ROT, S_LS, S_DIR])
    assert table.index.tolist() == [S_ROT, S_LS, S_DIR]
    assert table.loc[S_LS].tolist() == pytest.approx([6.0, 4.0, 8.0, 100 * 2 / 3, 7.0, 0.7, 2.0])
    assert table.loc[S_ROT, "ARI with the reference"] == pytest.approx(0.9)  # a seed never activated (NaN) left out
    assert table.loc[S_DIR, "gate opened (% of seeds)"] == 0.0 and table.loc[S_DIR, CONTRAST_COLUMN] == pytest.approx(0.5 / 3)


def test_contrast_pairs_by_seed_against_dirichlet():
    pairs = contrast_pairs(_activation())
    # label subsets − Dirichlet on every seed; rotation's seed 2 (never activated) left out
    assert pairs[["setting", "seed", "contrast", "Dirichlet contrast"]].values.tolist() == [
        [S_LS, 0, 3.0, 1.0], [S_LS, 1, 1.0, 0.5], [S_LS, 2, 2.0, -1.0], [S_ROT, 0, 2.0, 1.0], [S_ROT, 1, 0.5, 0.5]]


def test_gate_opened_reads_the_trailing_stable_refreshes():
    h = pd.DataFrame({"round": [8, 2, 4, 6], "stable": [True, True, False, True]})  # any order: sorted by round
    assert gate_opened(h, 8, patience=2) and not gate_opened(h, 6, patience=2) and gate_opened(h, 6, patience=1)
    assert not gate_opened(h, 2, patience=2)  # fewer refreshes than the patience
    with pytest.raises(ValueError, match="patience must be an int >= 1, got 0"):
        gate_opened(h, 8, patience=0)


def test_paired_rows_keeps_the_seeds_where_both_sides_are_defined():
    ours = pd.Series([1.0, np.nan, 3.0, 4.0], index=[5, 6, 7, 8])
    base = pd.Series([0.5, 1.0, np.nan, 2.0], index=[5, 6, 7, 8])
    assert paired_rows(ours, base).values.tolist() == [[5.0, 1.0, 0.5], [8.0, 4.0, 2.0]]
    assert paired_rows(ours, base, ("a", "b")).columns.tolist() == ["seed", "a", "b"]


def test_overlap_frame_keeps_every_seed_and_halves_rho():
    donor_seed = pd.DataFrame({"setting": [S_LS] * 3 + [S_DIR] * 3 + [S_ROT], "seed": [2, 1, 0] * 2 + [0],
                               "ρ (raw heads)": [0.005, 0.0, 0.4, -0.1, -0.2, -0.3, 0.9],
                               "partial ρ given overlap": [-0.2, -0.05, 0.1, 0.0, 0.0, 0.0, 0.0]})
    f = overlap_frame(donor_seed)
    # every label-skew seed, no floor on ρ (the former rule left out seeds 1 and 2, a selection on the outcome);
    # rotation is not a label-skew setting
    assert f[["setting", "seed", HALF_RHO, "partial ρ given overlap"]].values.tolist() == [
        [S_DIR, 0, -0.15, 0.0], [S_DIR, 1, -0.1, 0.0], [S_DIR, 2, -0.05, 0.0],
        [S_LS, 0, 0.2, 0.1], [S_LS, 1, 0.0, -0.05], [S_LS, 2, 0.0025, -0.2]]


def _main() -> pd.DataFrame:
    main = pd.DataFrame([{"setting": s, "seed": seed, "method": m, "mean": v + seed, "worst": v / 2, "bottom-20 %": v / 2,
                          "gap": 10.0}
                         for s in ("x", "y") for seed in (1, 0) for m, v in zip(METHODS, range(7))])
    main.loc[(main.method == "IFCA") & (main.seed == 1), "mean"] = 100.0  # one seed's best baseline is IFCA
    return main


def test_the_macro_frame_and_the_claims_reading_it_by_hand():
    macro = macro_table(_main())
    assert set(macro.setting) == {"macro"} and len(macro) == 2 * len(METHODS)
    assert per_seed(macro, "mean", method="HDC-FL").tolist() == [0.0, 1.0]  # seeds 0, 1; HDC-FL's v is 0
    assert per_seed(macro, "mean", method="IFCA").tolist() == [6.0, 100.0]
    # a claim against every baseline reads each one by name, paired by seed (never the per-seed maximum)
    claim = Claim("mean", "X is competitive.", "Table 2", "macro mean, X − each baseline, points", "at least", effect("points"),
                  resolution=0.1, versus=BASELINES, ours=Read("macro", "mean", method="HDC-FL"),
                  baseline={b: Read("macro", "mean", method=b) for b in BASELINES})
    ours, baseline, _ = claim.read({"macro": macro})
    assert ours.tolist() == [0.0, 1.0] and list(baseline) == list(BASELINES) and baseline["IFCA"].tolist() == [6.0, 100.0]


def test_refresh_summary_by_hand():
    history = pd.DataFrame({"setting": "x", "seed": [0, 0, 1, 1, 0, 0], "round": [4, 2, 2, 4, 2, 4],
                            "descriptor": ["raw heads"] * 4 + ["rank-r descriptors"] * 2,
                            "silhouette": [0.4, 0.2, 0.1, 0.3, 0.5, 0.6], "ari": [0.5, np.nan, np.nan, 1.0, np.nan, 0.9]})
    table = refresh_summary(history).set_index(["descriptor", "seed"])
    assert table.loc["raw heads", "silhouette (last)"].tolist() == [0.4, 0.3]  # the last refresh, by round
    assert table.loc["raw heads", "ARI (mean)"].tolist() == [0.5, 1.0]  # the first refresh's ARI is undefined
    assert table.loc[("rank-r descriptors", 0), ["silhouette (last)", "ARI (mean)"]].tolist() == [0.6, 0.9]


def test_donor_seeds_by_hand():
    donors = pd.DataFrame({"setting": "x", "seed": [1] * 6 + [0] * 6, "target": [0, 0, 1, 1, 2, 2] * 2,
                           "donor": [1, 2, 0, 2, 0, 1] * 2, "gain": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] * 2,
                           "head_cosine": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6] + [0.6, 0.5, 0.4, 0.3, 0.2, 0.1],
                           "lowrank_cosine": 0.0})
    seeds = donor_seeds(donors)
    assert seeds.seed.tolist() == [0, 1]
    assert seeds["ρ (raw heads)"].tolist() == pytest.approx([-1.0, 1.0])  # similarity against gain: reversed, then aligned
    assert seeds["nearest gain"].tolist() == [(1.0 + 3.0 + 5.0) / 3, (2.0 + 4.0 + 6.0) / 3]
    assert seeds["random gain"].tolist() == [3.5, 3.5]


def test_in_run_order_is_seed_by_seed_the_settings_kept_in_order():
    frame = pd.DataFrame({"setting": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "x": [1, 2, 3, 4]})
    assert in_run_order(frame).x.tolist() == [1, 3, 2, 4]


def test_readings_in_words():
    assert hdcfl.overlap_reading(0.3, 0.2).startswith("on average over the seeds, the shared labels take less than half")
    assert hdcfl.server_text(10.0, 1.0).startswith("A refresh round takes the server 10 ms against 1.0 ms")
    assert hdcfl.rotation_reading(False, False)["ex2_rot_reading"] == "do not recover the rotations well on this seed"
    assert hdcfl.rotation_reading(True, True)["ex2_rot_conclusion"].startswith("on this seed the label histograms find")
    claim = functools.partial(Claim, quote="X.", source="S", quantity="q", direction="at least", min_effect=effect("points"),
                              resolution=0.1)
    decided = {"worst": evaluate(claim("worst"), [5.0, 5.2, 4.8]), "bottom": evaluate(claim("bottom"), [0.0, 3.0, -3.0]),
               "mean": evaluate(claim("mean", versus=("A", "B")), [1.0, 2.0, 3.0], {"A": [0.0, 0.0, 0.0], "B": [1.0, 2.0, 3.0]})}
    text = hdcfl.claims_reading(decided)
    assert (f"on the worst client, {hdcfl.TAIL_READINGS[HOLDS]}; on the bottom 20 %, {hdcfl.TAIL_READINGS[INCONCLUSIVE]}"
            in text and "HDC-FL − A, the baseline nearest to failing it" in text)
    # every verdict is read, the untestable ones too: tails the pools cannot resolve, a mean that does not hold
    assert set(hdcfl.TAIL_READINGS) == set(VERDICTS)
    coarse = functools.partial(claim, resolution=2.0)
    decided = {"worst": evaluate(coarse("worst"), [5.0, 5.2, 4.8]), "bottom": evaluate(coarse("bottom"), [0.0, 3.0, -3.0]),
               "mean": evaluate(claim("mean", versus=("A",)), [-5.0, -5.1, -4.9], {"A": [0.0, 0.0, 0.0]})}
    text = hdcfl.claims_reading(decided)
    assert f"on both tail metrics (worst client and bottom 20 %), {hdcfl.TAIL_READINGS[UNTESTABLE_RESOLUTION]}." in text
    assert "The mean claim is *does not hold: the opposite direction*" in text


def test_exercise_numbers_by_hand():
    ex1 = pd.DataFrame({"setting": [S_LS] * 2 + [S_DIR] * 2 + [S_ROT] * 2, "seed": 0, "T": [0.1, 1.0] * 3,
                        "mean": [50.0, 52.0, 60.0, 60.5, 70.0, 70.0], "worst": [10.0, 9.0, 8.0, 9.0, 7.0, 7.0],
                        "bottom-20 %": 0.0, "gap": 0.0, "entropy": 0.0})
    ex2 = pd.DataFrame({"setting": [S_LS, S_DIR, S_ROT], "seed": 0, "k (labels)": 2, "k (heads)": 2,
                        "ARI(heads, labels)": [1.0, 0.5, 0.0], "ARI(heads, planted rotations)": [np.nan, np.nan, 0.9],
                        "ARI(labels, planted rotations)": [np.nan, np.nan, 0.1]})
    mean = SimpleNamespace(interval=SimpleNamespace(mean=1.0, high=2.5), binding="FedRep")
    out = exercise_numbers({"ex1": ex1, "ex2": ex2}, [S_LS, S_DIR, S_ROT], [0.1, 1.0], {"mean": mean})
    assert out["ex_noise"] == 1.5 and out["ex_noise_baseline"] == "FedRep" and out["ex1_t_list"] == "0.1, 1"
    assert out["ex1_best_t"] == "label subsets: T = 0.1; Dirichlet: T = 1; rotation: T = 0.1"  # a tie: the first
    assert out["ex1_spread"] == 2.0 and out["ex1_reading"].startswith("larger than the seed-to-seed yardstick")
    assert (out["ex2_ari_ls"], out["ex2_ari_dir"], out["ex2_ari_rot"]) == (1.0, 0.5, 0.0)
    assert out["ex2_rot_heads"] == 0.9 and out["ex2_rot_reading"] == "find the rotations"


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
                      variants={DEFAULT_VARIANT: {}, ONE_GROUP_VARIANT: dict(k_min=1, k_max=1), SHARED_VARIANT: dict(lam=0.0)},
                      ifca_k=2)


@pytest.fixture(scope="module")
def tiny_frames(tiny_study):
    """The tiny study's main study, every setting, one seed, through the study runner."""
    return run_study(Study("main", functools.partial(run_cell, study=tiny_study), grid={"setting": list(hdcfl.SETTINGS)},
                           seeds=[3]))


def test_a_tiny_study_end_to_end(tiny_study, tiny_frames):
    main = tiny_frames["main"][tiny_frames["main"].setting == "rotation"]
    assert main.method.tolist() == list(METHODS) and set(main.seed) == {3}
    assert list(tiny_frames) == ["main", "variants", "history", "activation", "donors", "costs", "server"]
    variants = tiny_frames["variants"][tiny_frames["variants"].setting == "rotation"]
    assert variants.variant.tolist() == [DEFAULT_VARIANT, ONE_GROUP_VARIANT, SHARED_VARIANT, RAW_RUN] == tiny_study.variant_names
    assert set(tiny_frames["history"].descriptor) == {"rank-r descriptors", "raw heads"}
    assert tiny_frames["costs"].method.tolist() == ["HDC-FL", "FedRep"] * 3
    assert (tiny_frames["server"]["seconds"] > 0).all() and tiny_frames["server"]["top weight"].between(0, 1).all()
    donors = tiny_frames["donors"][tiny_frames["donors"].setting == "rotation"]
    assert donors["same_group"].astype(bool).any() and not donors["same_group"].astype(bool).all()
    tails = ["mean", "worst", "bottom-20 %", "gap"]
    v, by = variants.set_index("variant"), main.set_index("method")
    # the two rows copied rather than computed again are what computing them gives: λ = 0 deploys the shared
    # encoder with each client's head (FedAvg-SE's deployment), and the default refreshed again at the last
    # round (active by then) is what the run itself deployed; the run trained again is the same run
    fed, planted, model_fn, run, at = tiny_study.train_hdcfl("rotation", 3)
    assert tail_metrics(run.frame) == {m: by.loc["HDC-FL", m] for m in tails}
    # the activation round's state: active there, the round the run's refresh history names; the contrast read on it
    act = tiny_frames["activation"][tiny_frames["activation"].setting == "rotation"].iloc[0]
    first_active = int(hdcfl.refresh_history(run.server).query("active")["round"].min())
    assert at.rounds_done == first_active == act["round"] and bool(at.server.arrays["hdcfl/membership"].numel())
    again = activation_contrast(tiny_study, at, fed, model_fn, reference_groups(fed, planted, tiny_study.hdc, 3)[0], 3)
    assert again == pytest.approx({c: act[c] for c in hdcfl.ACTIVATION_COLUMNS}, nan_ok=True)
    if at.rounds_done == tiny_study.rounds:  # activated at the last round: the contrast is the main table's, HDC-FL − FedAvg-SE
        assert act["contrast"] == pytest.approx(by.loc["HDC-FL", "mean"] - by.loc["FedAvg-SE", "mean"], abs=1e-9)
    for name, change in ((SHARED_VARIANT, dict(lam=0.0)), (DEFAULT_VARIANT, {})):
        again, _ = tiny_study.deploy_variant(run, fed, model_fn, dataclasses.replace(tiny_study.hdc, **change), 3)
        assert v.loc[name, tails].tolist() == pytest.approx([again[m] for m in tails], abs=1e-9)
    assert v.loc[SHARED_VARIANT, tails].tolist() == by.loc["FedAvg-SE", tails].tolist()
    # the raw-head rows of the history are the same run's refreshes, grouped on the raw heads
    h = tiny_frames["history"][tiny_frames["history"].setting == "rotation"].set_index(["descriptor", "round"])
    assert h.loc["raw heads"].index.tolist() == h.loc["rank-r descriptors"].index.tolist()
    assert h.loc["raw heads", "entropy"].isna().all() and (h.loc["raw heads", "k"] >= 2).all()
    cost = tiny_frames["costs"][tiny_frames["costs"].setting == "rotation"].set_index("method")
    assert cost.loc["HDC-FL", "up per client and round"] > cost.loc["FedRep", "up per client and round"]  # + the head


def test_the_claims_frames_and_numbers_of_a_tiny_study(tiny_study, tiny_frames):
    R = results(tiny_frames)
    assert {"macro", "donor_seed", "refreshes", "contrasts", "overlap"} <= set(R)
    assert set(R["macro"].method) == set(METHODS) and (R["macro"].setting == "macro").all() and set(R["macro"].seed) == {3}
    assert R["refreshes"].groupby(["setting", "descriptor"]).size().tolist() == [1] * 6  # one seed each
    numbers = results_numbers(R, list(hdcfl.SETTINGS), first_seed=3)
    assert numbers["macro_mean_best"] in BASELINES and numbers["ft_mean_text"].endswith("1 seed")
    assert numbers["act_round_rot"] == float(R["activation"].set_index("setting").loc[S_ROT, "round"])
    assert numbers["macro_mean_hdc"] == float(R["macro"].set_index("method").loc["HDC-FL", "mean"])
    assert 0 < numbers["top_weight_median"] <= 100 and numbers["extra_up_pct"] > 0
    assert all(isinstance(numbers[k], float) for k in ("rot_k1_gain", "lam0_gain", "nearest_gain", "rho_ls", "extra_up_pct"))
    assert numbers["rot_proto_alone"] == float(np.mean(per_seed(R["variants"], "mean", setting=S_ROT, variant=ONE_GROUP_VARIANT)
                                                       - per_seed(R["variants"], "mean", setting=S_ROT, variant=SHARED_VARIANT)))


def test_the_exercise_cell_reevaluates_the_main_study_s_run(tiny_study, tiny_frames):
    t = tiny_study.hdc.temperature
    out = exercise_cell(3, "rotation", study=tiny_study, temperatures=[0.01, t])
    ex1, ex2 = out["ex1"], out["ex2"]
    assert ex1["T"].tolist() == [0.01, t] and (ex1["entropy"] >= 0).all()
    main = tiny_frames["main"].set_index(["setting", "method"]).loc[("rotation", "HDC-FL")]
    # at the run's own temperature, the final state refreshed again deploys what the run deployed
    assert ex1.iloc[1][["mean", "worst"]].tolist() == pytest.approx(main[["mean", "worst"]].tolist(), abs=1e-9)
    assert len(ex2) == 1 and 2 <= ex2["k (labels)"].iloc[0] and -1 <= ex2["ARI(heads, planted rotations)"].iloc[0] <= 1
    assert math.isnan(exercise_cell(3, "Dirichlet", study=tiny_study, temperatures=[t])["ex2"]["ARI(labels, planted rotations)"].iloc[0])


def test_the_main_cell_computes_the_exercises_on_its_own_run_for_the_exercise_seed_only(tiny_study):
    t = tiny_study.hdc.temperature
    own = run_cell(3, "rotation", study=tiny_study, temperatures=[0.01, t], exercise_seed=3)
    alone = exercise_cell(3, "rotation", study=tiny_study, temperatures=[0.01, t])  # the run trained again: the same bits
    pd.testing.assert_frame_equal(own["ex1"], alone["ex1"])
    pd.testing.assert_frame_equal(own["ex2"], alone["ex2"])
    other = run_cell(4, "rotation", study=tiny_study, temperatures=[t], exercise_seed=3)
    assert other["ex1"].empty and other["ex2"].empty and list(other["ex2"].columns) == list(hdcfl.EX2_COLUMNS)
    assert "ex1" not in run_cell(4, "rotation", study=tiny_study)  # no temperatures: no exercise frames


def test_a_cell_under_partial_participation_samples_half_the_clients_for_every_method(tiny_study):
    half = dataclasses.replace(tiny_study, participation=0.5)
    out = run_cell(1, "Dirichlet", study=half)
    assert out["main"].method.tolist() == list(METHODS)
    assert np.isfinite(out["main"]["mean"]).all()
    with pytest.raises(ValueError, match="participation must be"):
        dataclasses.replace(tiny_study, participation=0.0)


def test_nearest_donor_gain_by_hand():
    t = pd.DataFrame({"target": [0, 0, 0, 1, 1, 1], "donor": [1, 2, 3, 0, 2, 3],
                      "head_cosine": [0.1, 0.7, 0.7, 0.9, 0.2, 0.3], "gain": [-6.0, 3.0, 0.0, 1.0, -1.0, -3.0]})
    nearest, random = nearest_donor_gain(t)
    assert nearest == pytest.approx((3.0 + 1.0) / 2)  # a tie (0.7) takes the first donor
    assert random == pytest.approx((-1.0 + -1.0) / 2)


def test_the_study_s_federations_variants_and_its_refusals(tiny_study):
    fed, groups = tiny_study.federation("rotation", 0)
    assert fed.n_clients == 4 and groups.tolist() == [0, 0, 1, 1]
    assert tiny_study.federation("label subsets", 0)[1] is None
    with pytest.raises(ValueError, match="unknown setting 'rotations'"):
        tiny_study.federation("rotations", 0)
    # the variants in their order, as pairs (the order is part of a cell's cache key)
    assert tiny_study.variants == ((DEFAULT_VARIANT, {}), (ONE_GROUP_VARIANT, {"k_min": 1, "k_max": 1}), (SHARED_VARIANT, {"lam": 0.0}))
    kwargs = {f: getattr(tiny_study, f) for f in tiny_study.__dataclass_fields__}
    assert HDCFLStudy(**kwargs).variants == tiny_study.variants
    with pytest.raises(ValueError, match="max_activation_round=2 must be <= rounds=1"):
        HDCFLStudy(**{**kwargs, "rounds": 1})
    with pytest.raises(ValueError, match="may not be named 'raw heads'"):
        HDCFLStudy(**{**kwargs, "variants": {RAW_RUN: {}}})


def test_standing_text_reads_each_metric_by_the_sign_of_its_interval():
    from fedbook.intervals import paired_interval
    behind, ahead, level = paired_interval([-3.0, -2.5, -3.5]), paired_interval([2.0, 2.5, 3.0]), paired_interval([-1.0, 1.0, 0.5])
    text = hdcfl.standing_text({"mean": behind, "worst": behind, "tail": behind}, "A", "B")
    assert text == "B leads A on all of the mean, the worst and the tail beyond the seeds' spread: it is the baseline to beat here"
    assert hdcfl.standing_text({"mean": ahead}, "A", "B") == "A leads B on all of the mean beyond the seeds' spread"
    mixed = hdcfl.standing_text({"mean": behind, "worst": ahead, "tail": level}, "A", "B")
    assert mixed == ("B leads A on the mean beyond the seeds' spread; A leads B on the worst beyond the seeds' spread; "
                     "the tail is within it")
    assert hdcfl.standing_text({"mean": level, "tail": level}, "A", "B") == "A and B are within the seeds' spread on the mean and the tail"
    # flipping the sign of every difference swaps the sides (the mutation a typed "the one to beat" would miss)
    flipped = paired_interval([3.0, 2.5, 3.5])
    assert hdcfl.standing_text({"mean": flipped}, "A", "B").startswith("A leads B")


def test_the_regime_reading_names_the_failing_checks_and_what_would_make_their_rows_testable():
    from fedbook.claims import RegimeCheck, regime_reading
    remedies = hdcfl.what_makes_testable(hdcfl.SETTINGS)
    assert set(remedies) == {k.format(s) for k in (hdcfl.ARI_CHECK, hdcfl.GATE_CHECK) for s in hdcfl.SETTINGS}
    assert "grouped_dirichlet" in remedies[hdcfl.GATE_CHECK.format(hdcfl.S_DIR)]
    chk = RegimeCheck(hdcfl.ARI_CHECK.format(hdcfl.S_DIR), "ARI, mean over the seeds", Read("activation", "ARI"), "at least", 0.5, "why")
    claim = Claim("se-mean-Dirichlet", "q", "s", "x, points", "at least", effect("points"), resolution=0.25, regimes=(chk,))
    failing, passing = (chk.check({"activation": pd.DataFrame({"ARI": [v]})}) for v in (0.04, 0.9))
    text = regime_reading({"se-mean-Dirichlet": evaluate(claim, [0.1, 0.3], regimes=(failing,))}, remedies)
    assert "makes “se-mean-Dirichlet” untestable in this setting" in text and "grouped_dirichlet" in text and "0.04" in text
    assert regime_reading({"se-mean-Dirichlet": evaluate(claim, [0.1, 0.3], regimes=(passing,))}, remedies).startswith("Every regime check passes")
    with pytest.raises(ValueError, match="unknown setting 'iid'"):
        hdcfl.what_makes_testable(["iid"])


def test_level_note_ties_the_margin_to_the_resolution_and_says_why_the_row_can_fail():
    assert "the smallest margin this pooled score can resolve" in hdcfl.level_note(1.0, 0.25)  # 4 × 0.25 = m
    finer = hdcfl.level_note(1.0, 0.05)
    assert "above the smallest margin" in finer and "four images of the pool are 0.2 points" in finer
    assert "fails where personalization costs more than m" in finer
