"""The MPT experiments chapter's runs (fedbook.studies.mpt) against what the chapter computed by
hand before they moved; and the small pieces they use (fedbook.claims.interval_band,
fedlib.tracking.ldc_steps_per_round, DepartureScenario.remaining_train_sizes)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlib.algorithms.mpt import METHOD_PAYLOAD, PARTS, evaluate_history
from fedbook.claims import interval_band, mean_interval
from fedlib.data import ArrayDataset, make_gaussian_mixture
from fedbook.studies.mpt import (
    TIME_PARTS,
    MPTStudy,
    bytes_per_method,
    distance_relation,
    extra_work_times,
    figure_runs,
    fraction_table,
    history_value,
    largest_difference,
    ldc_batch_runs,
    mean_at,
    median_seconds,
    per_seed,
    round_axis,
    seed_curves,
)
from fedlib.federation import make_departure_scenario
from fedlib.loop import LoopConfig
from fedlib.protocol import Event
from fedlib.run import run_federated
from fedlib.tracking import TrackingConfig, ldc_fit_map, ldc_steps_per_round

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


# ----------------------------------------------------------------- over seeds and cells
@pytest.fixture(scope="module")
def figure(study):
    model_fn = study.model_fn("mlp", study.data("mix", 0))
    return figure_runs(study, "mix", model_fn, 0.1, [0, 1]), model_fn


def test_figure_runs_stack_every_seeds_history(study, figure):
    (runs, scenarios, hist), model_fn = figure
    assert list(runs) == [0, 1] and list(scenarios) == [0, 1] and list(hist["seed"].unique()) == [0, 1]
    _, _, h1 = study.run(study.data("mix", 1), model_fn, 0.1, 1)
    pd.testing.assert_frame_equal(hist[hist["seed"] == 1].drop(columns="seed").reset_index(drop=True), h1)


def test_fraction_table_rows_and_kept_models(study):
    long, growth, models = fraction_table(study, ["mix"], [0.1, 0.3], [0, 1], "mlp", ["mpt", "oracle"], keep=("mix", 0.3))
    assert len(long) == 2 * 2 * 2 and len(growth) == 2 * 2 and list(models) == [0, 1]
    ds = study.data("mix", 1)
    result, sc, h = study.run(ds, study.model_fn("mlp", ds), 0.3, 1, eval_rounds=[3])
    row = long[(long["fraction"] == 0.3) & (long["seed"] == 1) & (long["method"] == "mpt")].iloc[0]
    assert row["f1"] == history_value(h, "mpt", "f1") and row["n_remaining"] == sc.n_rare_remaining
    assert largest_difference(models[1], result.server.with_prefix("model/")) == 0.0


def test_fraction_table_reads_the_round_before_from_the_same_run(study):
    """``before`` adds the F1 of an earlier round of the same run (no second training): the values
    are the run's history at that round and the last round's are unchanged."""
    long, _, _ = fraction_table(study, ["mix"], [0.3], [1], "mlp", ["mpt", "frozen", "fedavg"], before=1)
    plain, _, _ = fraction_table(study, ["mix"], [0.3], [1], "mlp", ["mpt", "frozen", "fedavg"])
    assert "f1_before" not in plain and list(long["f1"]) == list(plain["f1"])
    ds = study.data("mix", 1)
    _, _, h = study.run(ds, study.model_fn("mlp", ds), 0.3, 1, eval_rounds=[1, 3])
    for m in ("mpt", "frozen", "fedavg"):
        row = long[long["method"] == m].iloc[0]
        assert row["f1_before"] == history_value(h, m, "f1", 1) and row["f1"] == history_value(h, m, "f1", 3)
    # before the departure every prototype method is the direct estimate: MPT and frozen agree
    assert long.set_index("method").loc["mpt", "f1_before"] == long.set_index("method").loc["frozen", "f1_before"]
    for bad in (0, 3, 1.5):
        with pytest.raises(ValueError, match="before must be an int"):
            fraction_table(study, ["mix"], [0.3], [1], "mlp", ["mpt"], before=bad)


def test_ldc_alone_trains_the_same_backbone(study):
    """LDC's payload and mini-batch change no backbone parameter (the chapter's LDC control)."""
    f1, models = ldc_batch_runs(study, "mix", "mlp", 0.1, [0], 128)
    ds = study.data("mix", 0)
    full, _, h = study.run(ds, study.model_fn("mlp", ds), 0.1, 0, eval_rounds=[3])
    assert largest_difference(models[0], full.server.with_prefix("model/")) == 0.0
    assert 0.0 <= f1[0] <= 1.0


def test_bytes_per_method_is_the_ledgers_last_round(study, figure):
    _, model_fn = figure
    frame = bytes_per_method(study, "mix", model_fn, 0.1, [0], ["fedavg", "mpt_lite", "mpt"])
    assert frame.set_index("method")["relative"]["fedavg"] == 1.0
    ds = study.data("mix", 0)
    small = study.scenario(ds.subset(np.arange(0, len(ds), 2)), 0.1, 0)
    alg = study.algorithm(0, payload=METHOD_PAYLOAD["mpt"], steps=1, history=False, ldc_epochs=1, ccvr_steps=1)
    led = run_federated(alg, small.federation, model_fn,
                        LoopConfig(rounds=2, seed=0, events=(Event(2, 0, "leave"),))).ledger.to_frame()
    led = led[(led["round"] == 2) & ~led["kind"].str.startswith("eval")]  # the chapter's accounting before it moved
    assert frame.set_index("method")["bytes"]["mpt"] == led["bytes"].sum() / led["client"].nunique()
    assert frame.set_index("method")["bytes"]["mpt"] > frame.set_index("method")["bytes"]["mpt_lite"]
    with pytest.raises(ValueError, match="fedavg"):
        bytes_per_method(study, "mix", model_fn, 0.1, [0], ["mpt"])


def test_extra_work_times_measure_every_part(study, figure):
    (runs, scenarios, _), model_fn = figure
    times = extra_work_times(study, runs[0], scenarios[0], model_fn, 0)
    assert tuple(times) == TIME_PARTS and all(math.isfinite(t) and t > 0 for t in times.values())


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
    assert distance_relation(h, 6, "b", "a") == "closer to the oracle (2.00 against 2.50)"
    assert distance_relation(h, 5, "b", "a") == "farther from the oracle (3.50 against 1.50)"
    one = h[h["seed"] == 0]
    assert history_value(one, "b", "dist_oracle") == 1.5 and history_value(one, "b", "dist_oracle", 5) == 3.0


def test_largest_difference_and_median_seconds():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.zeros(1)}
    assert largest_difference(a, {"w": torch.tensor([1.0, 2.25]), "b": torch.tensor([-0.5])}) == 0.5
    with pytest.raises(ValueError, match="lacks"):
        largest_difference(a, {"v": torch.zeros(1)})
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
    original = torch.optim.Adam.step
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, *a, **k: (steps.append(1), original(self, *a, **k))[1])
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
