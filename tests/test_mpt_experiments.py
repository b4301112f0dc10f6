"""The MPT experiments chapter's runs (fedbook.studies.mpt_experiments: its study, the cells of its studies, what
it reads of their frames, its tables and figures) against what the chapter computed by hand before
they moved; and the small pieces they use (fedbook.intervals.interval_band,
fedlib.tracking.ldc_steps_per_round, DepartureScenario.remaining_train_sizes)."""

from __future__ import annotations

import functools
import math
import pickle
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedbook.claims import (HOLDS, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING, Claim, Read, RegimeCheck, effect,
                            evaluate)
from fedbook.intervals import interval_band, mean_interval
from fedbook.studies import mpt_experiments as M
from fedbook.page import save_frames
from fedbook.studies.mpt_experiments import (
    EX_DEFAULT,
    LABELS,
    TIME_PARTS,
    MPTStudy,
    bytes_cell,
    figure_cell,
    history_value,
    paper_lead,
    regime_numbers,
    spread_change,
    mean_at,
    median_seconds,
    per_seed,
    reduced_cell,
    round_axis,
    seed_curves,
    table_cell,
)
from fedbook.study import Study, run_study
from fedlib.algorithms.mpt import METHOD_PAYLOAD, PARTS, VARIANT, evaluate_history
from fedlib.data import ArrayDataset, make_gaussian_mixture
from fedlib.federation import make_departure_scenario
from fedlib.loop import LoopConfig, algorithm_configuration
from fedlib.messages import largest_difference
from fedlib.protocol import Event
from fedlib.run import run_federated
from fedlib.tracking import TrackingConfig, ldc_fit_map, ldc_steps_per_round
from fedlib import training

matplotlib.use("Agg")
SETTINGS = dict(rounds=3, departure_round=2, n_clients=4, rare_class=1, local_epochs=1, lr=0.05,
                global_test_per_class=10, ldc_epochs=1, ldc_batch=32, ccvr_steps=2, ccvr_virtual=5)


def _images(seed: int) -> ArrayDataset:
    """A three-class Gaussian mixture as 1 x 4 x 4 images (what the study's model_fn reads)."""
    ds = make_gaussian_mixture(n_per_class=60, n_classes=3, dim=16, separation=4.0, seed=seed).dataset
    return ArrayDataset(ds.x.reshape(-1, 1, 4, 4), ds.y, ds.n_classes, "mix")


def _study(**changes) -> MPTStudy:
    study = MPTStudy(**{**SETTINGS, **changes})
    for s in (0, 1):  # the study's data cache, filled with the mixture under the name "mix"
        study._data["mix", s] = _images(s)
    return study


@pytest.fixture(scope="module")
def study():
    return _study()


# ----------------------------------------------------------------- the study's settings and one run
def test_study_settings_and_validation():
    with pytest.raises(ValueError, match=r"departure_round must be in \[2, rounds=3\], got 4"):
        MPTStudy(**{**SETTINGS, "departure_round": 4})
    with pytest.raises(ValueError, match="departing"):
        MPTStudy(**{**SETTINGS, "departing": 4})
    P = SimpleNamespace(**SETTINGS, datasets=["mix"], fig_model="cnn")  # a chapter's settings hold more
    study = MPTStudy.from_settings(P, tracking=TrackingConfig(span="linear"))
    assert study == MPTStudy(**SETTINGS, tracking=TrackingConfig(span="linear"))


def test_a_studys_loaded_data_is_no_setting():
    """The data cache is not a field: a study with loaded data equals, and is configured like (the
    cache key of the cells that bind it), one without."""
    loaded, fresh = _study(), MPTStudy(**SETTINGS)
    assert loaded == fresh and "_data" not in repr(loaded) and loaded._data and not fresh._data
    assert algorithm_configuration(loaded) == algorithm_configuration(fresh)


def test_study_builds_the_chapters_algorithm_and_loop(study):
    algo = study.algorithm(7)
    assert (algo.seed, algo.rare_class, algo.train_rare_on) == (7, 1, (0,))
    assert (algo.train.epochs, algo.train.batch_size, algo.train.lr, algo.train.momentum) == (1, 32, 0.05, 0.9)
    assert (algo.ldc_epochs, algo.ldc_batch, algo.ccvr_steps, algo.ccvr_virtual) == (1, 32, 2, 5)
    assert tuple(algo.payload) == PARTS  # every part: one run serves every method
    small = study.algorithm(7, payload=METHOD_PAYLOAD["ldc"], steps=1, ldc_batch=128)
    assert tuple(small.payload) == METHOD_PAYLOAD["ldc"] and small.train.steps == 1 and small.ldc_batch == 128
    cfg = study.loop_config(7)
    assert (cfg.rounds, cfg.seed, cfg.f1_class, cfg.events) == (3, 7, 1, (Event(2, 0, "leave"),))
    assert study.loop_config(7, rounds=5).rounds == 5


def test_data_is_loaded_once_per_name_and_seed():
    study = MPTStudy(**SETTINGS, n_samples=300)
    first = study.data("uci", 3)
    assert study.data("uci", 3) is first and len(first) == 300
    assert not torch.equal(study.data("uci", 4).y, first.y)


def test_a_run_is_the_chapters_hand_written_run(study):
    ds = study.data("mix", 0)
    model_fn = study.model_fn("mlp", ds)
    result, sc, history = study.run(ds, model_fn, 0.1, 0)
    by_hand = make_departure_scenario(ds, n_clients=4, rare_class=1, departing_share=0.9, departing_client=0,
                                      global_test_per_class=10, seed=0)
    assert np.array_equal(sc.federation.train_counts(), by_hand.federation.train_counts())
    again = run_federated(study.algorithm(0), by_hand.federation, model_fn, study.loop_config(0))
    expected = evaluate_history(again.server, by_hand.federation.global_test, model_fn, rare_class=1, reg=0.1)
    pd.testing.assert_frame_equal(history, expected)
    assert sorted(history["round"].unique()) == [1, 2, 3]
    _, _, last = study.run(ds, model_fn, 0.1, 0, eval_rounds=[3])
    pd.testing.assert_frame_equal(last, expected[expected["round"] == 3].reset_index(drop=True))


# ----------------------------------------------------------------- the studies' cells
CELL = {"dataset": ["mix"], "fraction": [0.1]}


@pytest.fixture(scope="module")
def figure(study):
    """The chapter's figure study on the mixture: two seeds."""
    return run_study(Study("figure", functools.partial(figure_cell, study, model="mlp"), grid=CELL, seeds=[0, 1]))


def test_the_figure_cell_is_one_run_and_its_measurements(study, figure):
    assert list(figure) == ["history", "figure_runs", "times", "stability"]
    hist = figure["history"]
    assert list(hist.columns[:3]) == ["dataset", "fraction", "seed"] and list(pd.unique(hist["seed"])) == [0, 1]
    ds = study.data("mix", 1)
    result, _, h1 = study.run(ds, study.model_fn("mlp", ds), 0.1, 1)
    one = hist[hist["seed"] == 1].drop(columns=["dataset", "fraction", "seed"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(one, h1)
    runs = figure["figure_runs"].set_index("seed")
    assert runs.loc[1, "growth"] == float(result.server.meta["growth"]) and (runs["seconds"] > 0).all()
    times = figure["times"]
    assert list(times.loc[times["seed"] == 0, "part"]) == list(TIME_PARTS)
    assert all(math.isfinite(t) and t > 0 for t in times["relative"])
    stability = figure["stability"].set_index("seed")
    assert stability.loc[1].drop(["dataset", "fraction"]).to_dict() == spread_change(result.server, 2)


def test_the_table_cell_reads_the_last_round_and_the_round_before_from_one_run(study):
    """``before`` adds the F1 of an earlier round of the same run (no second training): the values
    are the run's history at that round and the last round's are unchanged."""
    methods = ["mpt", "frozen", "fedavg"]
    out = table_cell(study, 1, dataset="mix", fraction=0.3, model="mlp", methods=methods, before=1)
    plain = table_cell(study, 1, dataset="mix", fraction=0.3, model="mlp", methods=methods)
    assert "f1_before" not in plain["table"] and list(out["table"]["f1"]) == list(plain["table"]["f1"])
    ds = study.data("mix", 1)
    result, sc, h = study.run(ds, study.model_fn("mlp", ds), 0.3, 1, eval_rounds=[1, 3])
    table = out["table"].set_index("method")
    for m in methods:
        assert table.loc[m, "f1_before"] == history_value(h, m, "f1", 1)
        assert table.loc[m, "f1"] == history_value(h, m, "f1", 3) and table.loc[m, "n_remaining"] == sc.n_rare_remaining
    # before the departure every prototype method is the direct estimate: MPT and frozen agree
    assert table.loc["mpt", "f1_before"] == table.loc["frozen", "f1_before"]
    assert out["table_runs"]["growth"].iloc[0] == float(result.server.meta["growth"])
    assert out["table_stability"].iloc[0].to_dict() == spread_change(result.server, study.departure_round)
    for bad in (0, 3, 1.5):
        with pytest.raises(ValueError, match="before must be an int"):
            table_cell(study, 1, dataset="mix", fraction=0.3, model="mlp", methods=["mpt"], before=bad)


def test_a_table_cell_reads_the_figure_run_of_its_settings_and_gets_the_same_frames(monkeypatch):
    """A figure cell keeps its run in the study until the table cell of the same data set,
    fraction, model and seed takes it: that table cell trains nothing and its frames are, every bit,
    those of a table cell that trains (CCVR calibrated at its two rounds only); the cell of
    another seed finds nothing and trains."""
    methods = ["fedavg", "ccvr", "ldc", "mpt", "oracle"]
    trained = table_cell(_study(), 0, dataset="mix", fraction=0.2, model="mlp", methods=methods, before=1)
    study = _study()
    figure_cell(study, 0, dataset="mix", fraction=0.2, model="mlp")
    assert list(study._runs) == [("mix", "mlp", 0.2, 0)]
    table_cell(study, 1, dataset="mix", fraction=0.2, model="mlp", methods=["mpt"])  # another seed: trains
    assert list(study._runs) == [("mix", "mlp", 0.2, 0)]
    calls = []
    original = M.run_federated
    monkeypatch.setattr(M, "run_federated", lambda *a, **k: (calls.append(1), original(*a, **k))[1])
    shared = table_cell(study, 0, dataset="mix", fraction=0.2, model="mlp", methods=methods, before=1)
    assert calls == [] and not study._runs  # read, not trained; taken once
    figure_cell(study, 1, dataset="mix", fraction=0.2, model="mlp")
    assert list(study._runs) == [("mix", "mlp", 0.2, 1)]
    sent = pickle.loads(pickle.dumps(study))  # as to a worker: the settings and the data, not the runs
    assert sent == study and not sent._runs and list(study._runs) == [("mix", "mlp", 0.2, 1)]
    assert ("mix", 1) in sent._data and study.forget_runs() == 1 and not study._runs and study.forget_runs() == 0
    assert list(shared) == list(trained)
    for name in trained:
        pd.testing.assert_frame_equal(shared[name].drop(columns=["seconds"], errors="ignore"),
                                      trained[name].drop(columns=["seconds"], errors="ignore"), check_exact=True)
    assert "ccvr" in set(trained["table"]["method"])


def test_spread_change_is_the_ratio_of_the_kept_covariances_traces(study):
    """The remaining classes' within-class variance at the departure round and the round after, read
    from the run's kept covariances by hand; the change is the factor up or down; a round not kept
    gives NaN (a run that ends at the departure round)."""
    from fedlib.algorithms.mpt import MPTServer
    from fedlib.messages import from_state

    ds = study.data("mix", 0)
    result, _, _ = study.run(ds, study.model_fn("mlp", ds), 0.1, 0, eval_rounds=[3])
    kept = from_state(MPTServer, result.server).history
    before, after = (float(np.trace(kept[r].cov.numpy())) for r in (2, 3))
    out = spread_change(result.server, 2)
    assert out == pytest.approx({"variance_departure": before, "variance_after": after, "growth": after / before,
                                 "change": max(after / before, before / after)}, rel=1e-12)
    assert out["change"] >= 1.0
    ended = spread_change(result.server, 3)  # no round 4 kept
    assert ended["variance_departure"] == out["variance_after"]
    assert all(math.isnan(ended[k]) for k in ("variance_after", "growth", "change"))


def test_paper_lead_is_table_ii_mpt_minus_its_strongest_baseline():
    t = M.TABLE_II_NUIMAGES
    assert t.loc["mpt", 0.01] == 0.516 and t.loc["sdc", 0.02] == 0.436  # the abstract's 1 %, the default 2 %
    lead, over, used = paper_lead([0.02, 0.1])
    assert used == [0.02, 0.1]
    assert over == "ccvr" and lead == pytest.approx(((0.510 - 0.433) + (0.509 - 0.479)) / 2)
    assert paper_lead([0.01]) == (pytest.approx(0.516 - 0.435), "sdc", [0.01])  # the abstract's 8.1 %p
    assert paper_lead([0.02, 0.1, 0.3]) == paper_lead([0.02, 0.1])  # a fraction the table lacks is left out
    assert paper_lead([0.3]) == paper_lead(list(t.columns))  # none reported: all four


def test_regime_numbers_say_where_the_check_passes_fails_and_what_would_test_the_rows():
    def check(frame):
        return RegimeCheck("stable", "a factor", Read(frame, "x"), "at most", 1.5, "the paper's regime")

    frames = {"fig": pd.DataFrame({"x": [2.0, 2.5]}), "tab": pd.DataFrame({"x": [1.2, 1.4]})}
    fig, tab = check("fig"), check("tab")

    def decided(key, values, m, resolution, g):
        c = Claim(key, "A.", "T", "q", "greater", m, resolution=resolution, regimes=(g,))
        return evaluate(c, values, regimes=[g.check(frames)])

    results = {"a": decided("a", [1.0, 1.1, 1.2], effect("relative"), 0.01, fig),  # check fails
               "b": decided("b", [0.5, 0.6, 0.7], effect("score"), 0.025, fig),  # fails, and too coarse
               "c": decided("c", [1.0, 1.1, 1.2], effect("relative"), 0.01, tab),  # passes
               "d": evaluate(Claim("d", "D.", "T", "q", "greater", effect("relative"), resolution=0.01),
                             [1.0, 1.1, 1.2])}  # no check
    assert [r.verdict for r in results.values()] == [UNTESTABLE_SETTING, UNTESTABLE_RESOLUTION, HOLDS, HOLDS]
    out = regime_numbers(results, "stable", local_epochs=1, paper_local_epochs=5)
    assert out["regime_rows"] == "a, b, c"
    assert out["regime_text"] == (
        "The check “stable” (a factor; it needs at most 1.5) passes for c (1.30). It fails for a, b (2.25): "
        "after 1 local epoch per round the setting cannot test them; re-run with the paper’s 5 local epochs per "
        "round (`-p local_epochs=5`) to test them. b is untestable at this "
        "resolution whatever the check reads: one rare-class test image of 40 is 0.025 F1, above a quarter of its "
        "m; a global test set of at least 400 images per class resolves it.")
    passing = regime_numbers({"c": results["c"]}, "stable", local_epochs=5, paper_local_epochs=5)
    assert passing["regime_text"] == "The check “stable” (a factor; it needs at most 1.5) passes for c (1.30)."
    failing = {"a": results["a"], "d": results["d"]}
    text = regime_numbers(failing, "stable", local_epochs=2, paper_local_epochs=5)["regime_text"]
    assert text.startswith("The check “stable” (a factor; it needs at most 1.5) fails for a (2.25): after 2 local "
                           "epochs per round the setting cannot test it;")
    e = decided("e", [0.5, 0.6, 0.7], effect("score"), 0.01, tab)  # not an F1: a declared resolution of 0.01
    text = regime_numbers({"b": results["b"], "e": e}, "stable", local_epochs=5, paper_local_epochs=5,
                          f1_rows=["b"])["regime_text"]
    assert text.endswith("b is untestable at this resolution whatever the check reads: one rare-class test image of 40 "
                         "is 0.025 F1, above a quarter of its m; a global test set of at least 400 images per class "
                         "resolves it. e is untestable at this resolution whatever the check reads: its declared "
                         "resolution 0.01 is above a quarter of its m (0.0025).")
    none = regime_numbers({"d": results["d"]}, "stable", local_epochs=1, paper_local_epochs=5)
    assert none == {"regime_rows": "none", "regime_text": "No row declares the check “stable”."}


def test_a_cached_table_reads_back_the_same_bits(study, tmp_path):
    """The fraction table as the chapter declares it (a cell per data set, fraction and seed), run
    once and read back from the study cache: the same frames, bit for bit."""
    table = Study("table", functools.partial(table_cell, study, model="mlp", methods=["mpt", "oracle"], before=1),
                  grid={"dataset": ["mix"], "fraction": [0.1, 0.3]}, seeds=[1])
    first = run_study(table, cache=tmp_path)
    again = run_study(table, cache=tmp_path)
    assert len(list((tmp_path / "table").glob("*.json"))) == 2
    frame = first["table"]
    assert list(zip(frame["fraction"], frame["seed"], frame["method"])) == [(0.1, 1, "mpt"), (0.1, 1, "oracle"),
                                                                            (0.3, 1, "mpt"), (0.3, 1, "oracle")]
    pd.testing.assert_frame_equal(again["table"], frame)
    pd.testing.assert_frame_equal(again["table_runs"], first["table_runs"])
    pd.testing.assert_frame_equal(again["table_stability"], first["table_stability"])


def test_ldc_alone_trains_the_same_backbone(study):
    """LDC's payload and mini-batch change no backbone parameter (why the chapter no longer re-runs
    LDC alone with the old mini-batch: the backbone is the table runs' own)."""
    ds = study.data("mix", 0)
    model_fn = study.model_fn("mlp", ds)
    alone, _, h = study.run(ds, model_fn, 0.1, 0, eval_rounds=[3], payload=METHOD_PAYLOAD["ldc"], ldc_batch=128)
    full, _, _ = study.run(ds, model_fn, 0.1, 0, eval_rounds=[3])
    assert largest_difference(full.server.with_prefix("model/"), alone.server.with_prefix("model/")) == 0.0
    assert 0.0 <= history_value(h, "ldc", "f1") <= 1.0


def test_the_bytes_cell_is_the_ledgers_last_round(study):
    frame = bytes_cell(study, 0, dataset="mix", fraction=0.1, model="mlp", methods=["fedavg", "mpt_lite", "mpt"])
    by = frame.set_index("method")
    assert by.loc["fedavg", "relative"] == 1.0
    assert by.loc["mpt", "relative"] == by.loc["mpt", "bytes"] / by.loc["fedavg", "bytes"]
    ds = study.data("mix", 0)
    small = study.scenario(ds.subset(np.arange(0, len(ds), 2)), 0.1, 0)
    alg = study.algorithm(0, payload=METHOD_PAYLOAD["mpt"], steps=1, history=False, ldc_epochs=1, ccvr_steps=1)
    led = run_federated(alg, small.federation, study.model_fn("mlp", ds),
                        LoopConfig(rounds=2, seed=0, events=(Event(2, 0, "leave"),))).ledger.to_frame()
    led = led[(led["round"] == 2) & ~led["kind"].str.startswith("eval")]  # the chapter's accounting before it moved
    assert by.loc["mpt", "bytes"] == led["bytes"].sum() / led["client"].nunique()
    assert by.loc["mpt", "bytes"] > by.loc["mpt_lite", "bytes"]
    with pytest.raises(ValueError, match="fedavg"):
        bytes_cell(study, 0, dataset="mix", fraction=0.1, model="mlp", methods=["mpt"])


def test_the_reduced_cell_sends_mpts_payload_and_carries_its_variants(study):
    linear = (("lin", TrackingConfig(span="linear")),)
    out = reduced_cell(study, 0, dataset="mix", fraction=0.3, model="mlp", rounds=3, eval_rounds=range(2, 4),
                       variants=linear)
    ds = study.data("mix", 0)
    _, sc, h = study.run(ds, study.model_fn("mlp", ds), 0.3, 0, rounds=3, eval_rounds=[2, 3],
                         payload=METHOD_PAYLOAD["mpt"], variants=linear)
    pd.testing.assert_frame_equal(out["history"], h)
    assert out["runs"]["n_remaining"].iloc[0] == sc.n_rare_remaining and VARIANT + "lin" in set(h["method"])
    plain = reduced_cell(study, 0, dataset="mix", fraction=0.3, model="mlp", rounds=3, eval_rounds=[3])
    assert not any(m.startswith(VARIANT) for m in plain["history"]["method"])


def test_save_frames_writes_one_csv_per_frame_and_nothing_without_a_folder(tmp_path):
    frame = pd.DataFrame({"a": [1, 2]})
    save_frames({"x": frame}, tmp_path / "out")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "x.csv"), frame)
    save_frames({"x": frame}, None)  # the chapter's results_dir = None
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


# ----------------------------------------------------------------- the claims' frames
def _table(values: dict) -> pd.DataFrame:
    """A tidy fraction table: ``values[(dataset, fraction, seed)] = {method: (f1, f1_before)}``."""
    return pd.DataFrame([{"dataset": d, "fraction": f, "seed": s, "method": m, "f1": v[0], "f1_before": v[1]}
                         for (d, f, s), row in values.items() for m, v in row.items()])


TABLE = _table({("a", 0.1, 0): {"mpt": (0.5, 0.8), "sdc": (0.25, 0.8), "oracle": (1.0, 0.9)},
                ("a", 0.1, 1): {"mpt": (0.75, 0.6), "sdc": (0.5, 0.6), "oracle": (1.0, 0.9)},
                ("a", 0.2, 0): {"mpt": (0.25, 0.4), "sdc": (0.5, 0.4), "oracle": (0.5, 0.9)},
                ("a", 0.2, 1): {"mpt": (0.5, 0.2), "sdc": (0.75, 0.2), "oracle": (1.0, 0.9)}})


def test_table_frames_are_what_the_claims_read_per_seed():
    out = M.table_frames(TABLE, [0, 1])
    assert out["by_seed"].loc[("a", 0), "mpt"] == 0.375 and out["by_seed"].loc[("a", 1), "sdc"] == 0.625
    assert out["before_seed"].loc[("a", 1), "mpt"] == 0.4 and out["all_before"].index.tolist() == [0, 1]
    assert out["cell_means"].loc[("a", 0.2), "oracle"] == 0.75 and out["wide"].loc[("a", 0.2, 1), "sdc"] == 0.75
    # a claim per data set reads by_seed's rows of that data set, indexed by seed
    claim = Claim("beats", "X beats Y.", "T", "F1, MPT − SDC", "greater", effect("score"), resolution=0.001,
                  ours=Read("by_seed", "mpt", dataset="a"), baseline=Read("by_seed", "sdc", dataset="a"))
    ours, base, _ = claim.read(out)
    assert ours.tolist() == [0.375, 0.625] and base.tolist() == [0.375, 0.625]


def _figure_history() -> pd.DataFrame:
    """Two seeds, rounds 1 to 4, the departure at round 3: an MPT whose distance falls and F1 rises,
    a frozen prototype the other way, FedAvg without a prototype; MPT's adaptive weight."""
    rows = []
    for s in (0, 1):
        for r in (1, 2, 3, 4):
            rows += [(s, r, "mpt", "f1", 0.5 + r / 10 + s / 100), (s, r, "mpt", "dist_oracle", 4.0 - r),
                     (s, r, "frozen", "f1", 1.0 - r / 10), (s, r, "frozen", "dist_oracle", float(r + s)),
                     (s, r, "fedavg", "f1", 0.25), (s, r, "mpt", "alpha", r / 8 + s / 16)]
    return pd.DataFrame(rows, columns=["seed", "round", "method", "metric", "value"])


def test_figure_frames_hold_each_seeds_values_as_the_chapter_read_them():
    h = _figure_history()
    out = M.figure_frames(h, departure_round=3, stored_rounds=1, scatter_methods=["mpt", "frozen"])
    fig = out["figure"].set_index(["seed", "method"])
    dist, f1 = per_seed(h, "dist_oracle"), per_seed(h, "f1")
    for s in (0, 1):  # the chapter's expressions before they moved
        assert fig.loc[(s, "frozen"), "f1_last"] == f1[s].loc[4, "frozen"]
        assert fig.loc[(s, "frozen"), "f1_pre"] == f1[s].loc[2, "frozen"]
        assert fig.loc[(s, "frozen"), "f1_departure"] == f1[s].loc[3, "frozen"]
        assert fig.loc[(s, "mpt"), "d_early"] == dist[s].loc[[4]].mean()["mpt"] == 0.0
        assert fig.loc[(s, "frozen"), "d_post"] == dist[s].loc[[3, 4]].mean()["frozen"] == 3.5 + s
    assert math.isnan(fig.loc[(0, "fedavg"), "d_last"])  # no prototype, no distance
    per = out["figure_seed"].set_index("seed")
    assert per.loc[1, "alpha"] == (1 + 2 + 3 + 4) / 8 / 4 + 1 / 16
    assert per.loc[0, "rho"] == pytest.approx(-1.0)  # the closer prototype scores higher in every round
    assert out["early_rounds"]["round"].tolist() == [4]
    claim = Claim("frozen", "F degrades.", "T", "F1", "less", effect("score"), resolution=0.001,
                  ours=Read("figure", "f1_last", method="frozen"), baseline=Read("figure", "f1_pre", method="frozen"))
    ours, base, _ = claim.read(out)
    assert ours.tolist() == [0.6, 0.6] and base.tolist() == [0.8, 0.8]


# ----------------------------------------------------------------- the numbers of the prose
def test_data_numbers_describe_the_subsets_and_the_scenarios(study):
    out = M.data_numbers(study, ["mix"], [0, 1])
    assert out["n_samples_profile"] == "all"
    assert out["full_sets_text"] == ("mix: 180 images; mix is used whole at every seed, so there the seeds vary only "
                                     "the partition, the test set, the initialization and the batch order")
    top = sorted({study.scenario(study.data("mix", s), 0.1, s).n_rare_remaining for s in (0, 1)})
    assert out["n_remaining_top"] == (f"{top[0]}–{top[-1]}" if len(top) > 1 else str(top[0]))
    assert M.sizes_text({"a": [2000], "b": [1797, 1800]}) == "a 2,000 images, b 1,797/1,800 images"
    assert M.data_numbers(_study(n_samples=100), ["mix"], [0])["n_samples_profile"] == "100"


def test_table_numbers_hand_computed():
    frames = {**M.table_frames(TABLE, [0, 1]), "table": TABLE,
              "table_runs": pd.DataFrame({"dataset": "a", "growth": [1.0, 2.0, 1.5, 4.0], "seconds": 1.0})}
    frames["cell_means"] = frames["cell_means"].assign(mpt_lite=[0.5, 0.25])
    out = M.table_numbers(frames, ["sdc"], 2)
    assert (out["n_cells"], out["mpt_wins"]) == (2, 1)  # MPT leads at f = 0.1 (0.625 > 0.375), not at 0.2
    assert out["mpt_mean_f1"] == 0.5 and out["best_baseline"] == "SDC" and out["best_baseline_f1"] == 0.5
    assert out["gap_oracle"] == ((0.625 - 1.0) + (0.375 - 0.75)) / 2 and out["lite_mean_f1"] == 0.375
    assert out["t_mult"] == pytest.approx(12.7062, abs=1e-4) and out["table_seconds"] == 4.0
    assert out["growth_table_text"] == "a: median 1.75, range 1.00 to 4.00" and out["lite_mean_text"] == "a 0.375"
    # the cells' half-widths: four of two values a quarter apart, the oracle's (zero at f = 0.1, a half apart at 0.2)
    half = [(iv.high - iv.low) / 2 for iv in (mean_interval([0.5, 0.75]), mean_interval([0.5, 1.0]))]
    assert (out["half_median"], out["half_max"]) == tuple(half)
    assert math.isnan(M.table_numbers(frames, ["sdc"], 1)["t_mult"])


def test_distance_and_cost_numbers_hand_computed():
    h = _figure_history()
    frames = {**M.figure_frames(h, 3, 1, ["mpt", "frozen"]), "figure_runs": pd.DataFrame({"growth": [1.0, 1.5]})}
    frames["figure"]["method"] = frames["figure"]["method"].replace({"mpt": "stored_residual", "frozen": "barycentric"})
    out = M.distance_numbers(h, frames, ["mpt", "frozen"])
    assert out["dist_mpt"] == 0.0 and out["dist_frozen"] == 4.5 and out["growth_last"] == 1.25
    assert out["spearman"] == pytest.approx(-1.0) and out["alpha_mean"] == (1 + 2 + 3 + 4) / 8 / 4 + 1 / 32
    assert out["stored_rounds_text"] == "4"
    assert out["stored_seed_text"] == "seed 0: 0.00 against 4.00; seed 1: 0.00 against 5.00"
    bytes_frame = pd.DataFrame({"seed": [0, 0, 1, 1], "method": ["fedavg", "mpt"] * 2, "bytes": [100, 150, 100, 160],
                                "relative": [1.0, 1.5, 1.0, 1.6]})
    times = pd.DataFrame([{"seed": s, "part": p, "relative": float(i + s)}
                          for s in (0, 1) for i, p in enumerate(TIME_PARTS)])
    costs = M.cost_numbers(bytes_frame, times, ["fedavg", "mpt"])
    assert costs["comm_mpt"] == 1.55 and costs["comm_fedavg"] == 1.0
    assert costs["time_stats"] == 0.5 and costs["time_mpt"] == 5.5


def test_ldc_numbers_count_the_steps_and_read_the_table(study):
    index = pd.MultiIndex.from_tuples([("mix", 0.1, 0), ("mix", 0.1, 1)], names=["dataset", "fraction", "seed"])
    wide = pd.DataFrame({"ldc": [0.25, 0.75]}, index=index)
    out = M.ldc_numbers(study, wide, "mix", 0.1, [0, 1], 128)
    sizes = np.concatenate([study.scenario(study.data("mix", s), 0.1, s).remaining_train_sizes() for s in (0, 1)])
    assert out["ldc_client_n"] == float(sizes.mean()) and out["ldc_f1_new"] == 0.5 and out["ldc_check_dataset"] == "mix"
    assert out["ldc_steps_old"] == ldc_steps_per_round(sizes, 128, 1)
    assert out["ldc_steps_new"] == ldc_steps_per_round(sizes, 32, 1)
    ex4 = M.ldc_steps_numbers(study, wide, ["mix"], 0.1, 1, 128)
    assert ex4["ex4_text"].startswith("mix: ") and ex4["ex4_text"].endswith("LDC's F1 in the table ('rare' budget) 0.750")
    assert ex4["ex4_answer"].startswith("mix, whose clients' maps get the fewest steps with batch 128")


def _reduced(fraction: float, rounds: range, values: dict) -> dict:
    """A reduced run's frames as the study gives them: ``values[(method, metric)]`` is a function of the round."""
    rows = [(0, fraction, r, m, k, f(r)) for r in rounds for (m, k), f in values.items()]
    history = pd.DataFrame(rows, columns=["seed", "fraction", "round", "method", "metric", "value"])
    return {"history": history, "runs": pd.DataFrame({"seed": [0], "fraction": [fraction], "n_remaining": [2],
                                                      "seconds": [1.0]})}


def test_exercise_numbers_say_what_the_reduced_runs_show():
    common = {("mpt", "f1"): lambda r: 0.5, ("mpt", "alpha"): lambda r: 0.1, ("mpt_predicted", "f1"): lambda r: 0.5,
              ("mpt_measured", "f1"): lambda r: 0.25}
    drift = _reduced(0.02, range(2, 9), {**common, ("frozen", "f1"): lambda r: 1 - r / 10,
                                         ("stored_residual", "dist_oracle"): lambda r: r / 2,
                                         ("mpt", "dist_oracle"): lambda r: r / 4,
                                         (VARIANT + "lin", "dist_oracle"): lambda r: float(r),
                                         (VARIANT + "lin", "f1"): lambda r: 0.25,
                                         (VARIANT + "pool", "dist_oracle"): lambda r: r / 4 + 0.5,
                                         (VARIANT + "pool", "f1"): lambda r: 0.5})
    more = {k: pd.concat([_reduced(f, range(3, 5), {**common, ("mpt", "alpha"): lambda r, f=f: f,
                                                    ("mpt", "f1"): lambda r, f=f: 0.5 + f})[k] for f in (0.2, 0.5)],
                         ignore_index=True) for k in ("history", "runs")}
    out = M.exercise_numbers(drift, more, departure_round=3, rounds=4, last_round=4, one_image=0.1)
    assert out["ex1_text"].startswith("f = 0.02 (2 remaining rare sample(s)): mean α_t 0.100, F1 of MPT 0.500")
    assert out["ex1_alpha_word"] == "rises with every step"
    assert out["ex1_answer"] == "MPT beats its prediction-only variant at both larger fractions"
    assert (out["ex2_long"], out["ex2_frozen_pre"], out["ex2_frozen_end"]) == (8, 0.8, 0.6)
    assert out["ex2_frozen_long"] == 1 - 8 / 10
    distances = (out["ex2_stored_end"], out["ex2_mpt_end"], out["ex2_stored_long"], out["ex2_mpt_long"])
    assert distances == (2.0, 1.0, 4.0, 2.0) and out["ex2_frozen_word"] == "keeps degrading"
    assert out["ex2_answer"].startswith("the stored residual is farther")
    assert out["ex3_text"] == (f"{EX_DEFAULT}: distance 1.00, F1 0.500; lin: distance 4.00, F1 0.250; "
                               "pool: distance 1.50, F1 0.500")
    assert (out["ex3_spread_d"], out["ex3_spread_f"], out["ex3_most"]) == (3.0, 0.25, "lin")
    assert out["ex3_f1_word"] == "larger than one test image"
    assert (out["ex_seed"], out["ex_rounds"], out["ex_seconds"]) == (0, 4, 3.0)
    tied = {k: v.assign(value=0.5) if k == "history" else v for k, v in more.items()}
    answer = M.exercise_numbers(drift, tied, departure_round=3, rounds=4, last_round=4, one_image=0.1)["ex1_answer"]
    assert answer == "MPT ties its prediction-only variant at both larger fractions"


# ----------------------------------------------------------------- tables and figures
def test_tables_name_every_method_and_keep_their_order(figure):
    hist = figure["history"]
    final = M.last_round_table(hist, ["mpt", "fedavg"])
    assert final.index.tolist() == [LABELS["mpt"], LABELS["fedavg"]]
    assert list(final.columns) == ["rare-class F1", "overall accuracy"]
    dist = M.distance_table(hist, ["frozen", "mpt"])
    assert dist.index.tolist() == [LABELS["frozen"], LABELS["mpt"]] and dist.index.name == "method"
    tables = M.fraction_tables(TABLE, ["sdc", "mpt"])
    assert list(tables) == ["a"] and list(tables["a"].columns) == ["rare-class F1, f = 0.1", "rare-class F1, f = 0.2"]
    iv = mean_interval([0.5, 0.75])
    assert tables["a"].index.tolist() == ["SDC", "MPT"]
    # an F1 of two seeds, 0.625 ± 1.588, would leave [0, 1]: shown clipped to it (fedbook.intervals.plus_minus)
    assert iv.mean - iv.half_width < 0 and tables["a"].loc["MPT", "rare-class F1, f = 0.1"] == f"{iv.mean:.3f} [0.000, 1.000]"
    bytes_frame = pd.DataFrame({"seed": [0, 0], "method": ["fedavg", "mpt"], "bytes": [100, 150],
                                "relative": [1.0, 1.5]})
    assert M.bytes_table(bytes_frame, ["mpt", "fedavg"]).values.tolist() == [[150.0, 1.5], [100.0, 1.0]]
    assert M.time_table(figure["times"]).index.tolist() == list(TIME_PARTS)


def test_every_figure_draws_its_methods_and_is_closed(study, figure):
    import matplotlib.pyplot as plt

    hist, methods = figure["history"], ["frozen", "mpt", "oracle"]
    before = plt.get_fignums()
    fig = M.plot_rounds(hist, methods, 2)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [LABELS[m] for m in methods]
    assert len(fig.axes[0].lines) == len(methods) + 1  # and the departure's line
    fig = M.plot_distances(hist, ["frozen", "mpt"], 2)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [LABELS["frozen"], LABELS["mpt"]]
    fig = M.plot_distance_f1(hist, ["frozen", "mpt"], 2)
    assert len(fig.axes[0].collections) == 2  # one scatter per seed
    bytes_frame = bytes_cell(study, 0, dataset="mix", fraction=0.1, model="mlp", methods=["fedavg", "mpt"])
    bytes_frame = bytes_frame.assign(seed=0)
    fig = M.plot_cost(hist, bytes_frame, figure["times"], ["fedavg", "mpt"])
    assert fig.axes[1].collections[0].get_offsets()[0][0] == 0.0  # FedAvg does no extra client work
    M.plot_scenario(study.scenario(study.data("mix", 0), 0.1, 0), "mix", 1)
    assert plt.get_fignums() == before  # each shown once, as the value of a notebook's cell


# ----------------------------------------------------------------- reading a history
def _history():
    rows = [(r, m, "dist_oracle", d) for r, m, d in [(5, "a", 1.0), (5, "b", 3.0), (6, "a", 2.0), (6, "b", 1.5)]]
    frame = pd.DataFrame(rows, columns=["round", "method", "metric", "value"])
    return pd.concat([frame.assign(seed=0), frame.assign(seed=1, value=frame["value"] + 1)], ignore_index=True)


def test_reading_a_history_over_seeds():
    h = _history()
    frames = per_seed(h, "dist_oracle")
    assert frames[1].loc[6, "b"] == 2.5 and list(frames[0].columns) == ["a", "b"]
    rounds, curves = seed_curves(h, "dist_oracle", "a", [1, 0])
    assert rounds.tolist() == [5, 6] and curves.tolist() == [[2.0, 3.0], [1.0, 2.0]]
    assert mean_at(h, "dist_oracle", 5, "b") == 3.5 and math.isnan(mean_at(h, "dist_oracle", 7, "b"))
    one = h[h["seed"] == 0]
    assert history_value(one, "b", "dist_oracle") == 1.5 and history_value(one, "b", "dist_oracle", 5) == 3.0


def test_median_seconds():
    calls = []
    assert median_seconds(lambda: calls.append(1), repeats=5) >= 0 and len(calls) == 5
    with pytest.raises(ValueError, match="repeats"):
        median_seconds(lambda: None, repeats=0)


def test_round_axis_marks_the_departure():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    round_axis(ax, 6)
    assert ax.get_xlabel() == "round" and ax.lines[0].get_xdata()[0] == 5.5
    plt.close(fig)


# ----------------------------------------------------------------- the pieces in fedbook.claims, fedlib.tracking, fedlib.federation
@settings(max_examples=20, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(0, 1000))
def test_interval_band_is_mean_interval_per_column(n_seeds, n_points, seed):
    values = np.random.default_rng(seed).normal(size=(n_seeds, n_points))
    mean, low, high = interval_band(values)
    for j in range(n_points):
        iv = mean_interval(values[:, j])
        assert (mean[j], low[j], high[j]) == (iv.mean, iv.low, iv.high)
    with pytest.raises(ValueError, match="2-D"):
        interval_band(values[0])


def test_ldc_steps_per_round_counts_ldc_fit_maps_adam_steps(monkeypatch):
    assert ldc_steps_per_round([32, 33, 100], 32, 20) == (1 + 2 + 4) / 3 * 20
    steps = []
    original = training.PlainOptimizer.step  # ldc_fit_map's Adam (torch.optim.Adam's arithmetic)
    monkeypatch.setattr(training.PlainOptimizer, "step", lambda self, *a, **k: (steps.append(1), original(self, *a, **k))[1])
    z = torch.randn(70, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ldc_fit_map(z, z, epochs=3, batch_size=32, generator=torch.Generator().manual_seed(1))
    assert len(steps) == ldc_steps_per_round([70], 32, 3) == 9
    with pytest.raises(ValueError, match="batch_size"):
        ldc_steps_per_round([70], 0, 3)
    with pytest.raises(ValueError, match="sizes"):
        ldc_steps_per_round([], 32, 3)


def test_remaining_train_sizes_leave_out_the_departing_client():
    ds = _images(0)
    sc = make_departure_scenario(ds, n_clients=4, rare_class=1, departing_share=0.9, departing_client=2,
                                 global_test_per_class=10, seed=0)
    sizes = [len(c.train.y) for c in sc.federation.clients]
    assert sc.remaining_train_sizes().tolist() == sizes[:2] + sizes[3:]


# ----------------------------------------------------------------- MPT's server-side variants
def test_variants_are_mpt_with_other_settings_on_the_same_trajectory(study):
    """A variant is MPT with its own settings on the same run: the default settings reproduce
    "mpt" bit for bit, and span='linear' reproduces the "mpt" of a run trained with that setting
    (the backbone does not depend on the tracking settings)."""
    from fedlib.algorithms.mpt import VARIANT

    ds, linear = study.data("mix", 0), TrackingConfig(span="linear")
    model_fn = study.model_fn("mlp", ds)
    res, _, h = study.run(ds, model_fn, 0.3, 0, variants=(("same", TrackingConfig()), ("lin", linear)))
    res_lin, _, h_lin = study.run(ds, model_fn, 0.3, 0, tracking=linear)
    assert largest_difference(res.server.with_prefix("model/"), res_lin.server.with_prefix("model/")) == 0.0
    methods = res.server.meta["methods"]
    assert methods[-2:] == [VARIANT + "same", VARIANT + "lin"]
    protos = res.server.arrays["protos"]
    assert torch.equal(protos[methods.index(VARIANT + "same")], protos[methods.index("mpt")])
    lin_methods = res_lin.server.meta["methods"]
    lin_mpt = res_lin.server.arrays["protos"][lin_methods.index("mpt")]
    assert torch.allclose(protos[methods.index(VARIANT + "lin")], lin_mpt, rtol=0, atol=1e-12)
    for r in (2, 3):  # the offline evaluation reads the variants like any method
        assert history_value(h, VARIANT + "lin", "f1", r) == history_value(h_lin, "mpt", "f1", r)
    with pytest.raises(ValueError, match="variants must be"):
        study.algorithm(0, variants=(("a/b", linear),))
    with pytest.raises(ValueError, match="variants must be"):
        study.algorithm(0, variants=(("a", linear), ("a", linear)))


def _f1(tp: int, n: int, n_hat: int) -> float:
    return 2 * tp / (n + n_hat)


def test_f1_step_bounds_one_images_step_hand_computed():
    # n = 10 rare test images. Nothing predicted rare (TP = 0, n̂ = 0): one hit gives 2/11, the bound at F1 = 0.
    assert M.f1_step(0.0, 10) == pytest.approx(2 / 11)
    assert _f1(1, 10, 1) - _f1(0, 10, 0) == pytest.approx(2 / 11)
    # TP = n̂ = 3 (no false alarm): F1 = 6/13, step to TP = n̂ = 4: 8/14 − 6/13 = (2 − 6/13)/14, above 1/n = 0.1
    f1 = _f1(3, 10, 3)
    step = _f1(4, 10, 4) - f1
    assert step == pytest.approx((2 - f1) / 14) and step > 1 / 10
    assert M.f1_step(f1, 10) == pytest.approx(step)  # no false alarm: the bound is reached
    # every (TP, n̂) with n = 10: the step never exceeds the bound, and is ≤ 1/n whenever F1 ≥ 2 − √2
    for n_hat in range(0, 20):
        for tp in range(0, min(n_hat, 9) + 1):
            f1 = _f1(tp, 10, n_hat) if n_hat else 0.0
            step = _f1(tp + 1, 10, n_hat + 1) - f1
            assert step <= M.f1_step(f1, 10) + 1e-12
            if f1 >= M.F1_STEP_FLOOR:
                assert step <= 1 / 10 + 1e-12
    assert M.F1_STEP_FLOOR == pytest.approx(0.5858, abs=1e-4)
    # a mutation (the bound without TP ≤ n̂, i.e. 1/n) fails on the hand-computed no-false-alarm case
    assert not (_f1(4, 10, 4) - _f1(3, 10, 3) <= 1 / 10)
    with pytest.raises(ValueError, match="f1"):
        M.f1_step(1.5, 10)


def test_f1_step_numbers_name_the_rows_below_the_floor():
    above = M.f1_step_numbers({"a": 0.6, "b": 0.9}, {"a": 400, "b": 400})
    assert above["f1_lowest"] == 0.6 and "bounds the step" in above["f1_step_text"]
    below = M.f1_step_numbers({"a": 0.9, "b": 0.5, "c": 0.2}, {"a": 400, "b": 400, "c": 40})
    text = below["f1_step_text"]
    assert below["f1_lowest"] == 0.2 and "understates" in text and "b (" in text and "c (" in text and "a (" not in text
    assert f"{(2 - 0.5) ** 2 / (800 + 1.5):.3g}" in text  # b: (2 − F1)² / (2n + 2 − F1), hand-computed 0.00281
    assert M.boundary_text(1 / 400, 0.01, "mnist5k").startswith("on mnist5k the resolution 0.0025 equals a quarter")
    assert "above" in M.boundary_text(1 / 40, 0.01, "uci") and "below" in M.boundary_text(0.001, 0.01, "x")


def test_measurement_only_against_icarl_is_worded_from_the_means_and_m():
    idx = pd.MultiIndex.from_tuples([("a", 0), ("a", 1), ("b", 0)], names=["dataset", "seed"])
    d = pd.DataFrame({"stored_residual": 1.0, "transported": 1.0, "mpt_predicted": 1.0,
                      "mpt_measured": [4.1, 4.2, 6.47], "icarl": [4.06, 4.06, 6.11]}, index=idx)
    text = M.transport_numbers(d, ["a", "b"], m=0.2)["measured_compare_text"]
    # a: 4.15 − 4.06 = 0.09 ≤ 0.2; b: 6.47 − 6.11 = 0.36 > 0.2
    assert text == ("on a, measurement only lies within m = 0.2 of iCaRL (4.15 against 4.06); on b, measurement only "
                    "lies farther from the oracle than iCaRL by more than m = 0.2 (6.47 against 6.11)")
    d["icarl"] = [4.5, 4.5, 6.11]  # a: 4.15 − 4.5 = −0.35: closer
    assert "on a, measurement only lies closer to the oracle than iCaRL by more than m" in \
        M.transport_numbers(d, ["a", "b"], m=0.2)["measured_compare_text"]


def test_f1_step_numbers_name_only_rows_whose_step_exceeds_one_image():
    # F1 = 0.58 < 2 − √2 at n = 10: (1.42)² / (20 + 1.42) = 0.0941 ≤ 0.1, so no row is named
    out = M.f1_step_numbers({"a": 0.58}, {"a": 10})["f1_step_text"]
    assert "below 2 − √2, but" in out and "understates" not in out
    # the same F1 at n = 400: (1.42)² / 801.42 = 0.002516 > 0.0025, named
    assert "a (lowest F1 0.580: up to 0.00252 against 1/n = 0.0025)" in M.f1_step_numbers({"a": 0.58}, {"a": 400})["f1_step_text"]
