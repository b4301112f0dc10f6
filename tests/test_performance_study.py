"""The performance chapter's procedures (fedbook.studies.performance): its cells are the
benchmarks' measurements as rows (a round's cost, a speed-up), read back as the benchmarks'
objects; its tables, figures and numbers computed as the chapter computed them, on hand-made
measurements."""

from __future__ import annotations

import dataclasses
import types

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from fedbook.benchmarks import LoopOverhead, RoundCost, SpeedUp, round_scaling  # noqa: E402
from fedbook.studies.performance import (WORKLOAD_TEXT, cost_table, costs_of, numbers, overhead_table,  # noqa: E402
                                         plot_costs, plot_stack, round_cell, speed_cell, speed_table)
from fedbook.study import Study, run_study  # noqa: E402
from fedlib.algorithms import registered  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

COSTS = [RoundCost(n, "mlp", a, "mnist5k", 1000, 100.0, peak, seconds)
         for n, a, peak, seconds in [(10, "fold", 200.0, 1.0), (10, "list", 210.0, 1.0),
                                     (40, "fold", 202.0, 2.0), (40, "list", 250.0, 2.0)]]


def _speed(rows) -> pd.DataFrame:
    return pd.DataFrame([{**dataclasses.asdict(r), "ratio": r.ratio, "seed": 0} for r in rows])


def test_a_rounds_cell_is_one_measured_round_read_back_as_the_benchmarks_object():
    study = Study("round_cost", lambda seed, model, n_clients, aggregation: round_cell(
        seed, model, n_clients, aggregation, fresh_process=False), grid={"model": ["mlp"], "n_clients": [2],
                                                                         "aggregation": ["fold", "list"]})
    frame = run_study(study)["round_cost"]
    assert frame.columns[:4].tolist() == ["model", "n_clients", "aggregation", "seed"]
    (fold, kept) = costs_of(frame)
    assert isinstance(fold, RoundCost) and (fold.aggregation, kept.aggregation) == ("fold", "list")
    assert fold.n_clients == 2 and fold.n_parameters > 0 and type(fold.n_clients) is int
    table = cost_table([fold, kept])
    assert table["added by the round (MiB)"].tolist() == [fold.round_mib, kept.round_mib]
    assert table["ms per client"].tolist() == [fold.ms_per_client, kept.ms_per_client]


def test_a_speed_cell_is_one_side_by_side_measurement_with_its_ratio():
    row = speed_cell(0, "linear", 2, repeats=1)
    assert row.loc[0, "workload"] == "linear" and row.loc[0, "n_clients"] == 2
    assert row.loc[0, "ratio"] == row.loc[0, "sequential_s"] / row.loc[0, "vectorized_s"]
    assert row.loc[0, "max_abs_diff"] < 1e-4  # the two paths agree up to float32 rounding


def test_tables_and_figures_of_hand_made_measurements():
    ovh = LoopOverhead("cnn", 20, 2, 1.5, 1.0, True)
    assert overhead_table(ovh)["seconds"].tolist() == [1.5, 1.0]
    fig = plot_costs(cost_table(COSTS), [10, 40])
    assert [ax.get_ylabel() for ax in fig.axes] == ["peak resident memory (MiB)", "time per client (ms)"]
    plt.close(fig)
    speed = _speed([SpeedUp("linear", 20, 5130, 2.0, 0.5, 1e-6), SpeedUp("cnn", 20, 9000, 1.0, 2.0, 3e-6)])
    table = speed_table(speed)
    assert table["workload"].tolist() == [WORKLOAD_TEXT["linear"], WORKLOAD_TEXT["cnn"]]
    assert table["speed-up"].tolist() == [4.0, 0.5]
    stack = _speed([SpeedUp("linear", n, 5130, n / 5, 1.0, 0.0) for n in (5, 20)])
    fig = plot_stack(stack)
    assert fig.axes[0].lines[0].get_ydata().tolist() == [1.0, 4.0]
    plt.close(fig)


def test_the_numbers_of_the_prose():
    ovh = LoopOverhead("cnn", 20, 2, 1.5, 1.0, False)
    speed = _speed([SpeedUp("linear", 20, 5130, 2.0, 0.5, 1e-6), SpeedUp("cnn", 20, 9000, 1.0, 2.0, 3e-6)])
    stack = _speed([SpeedUp("linear", n, 5130, r, 1.0, 0.0) for n, r in ((5, 1.0), (80, 2.0))])
    P = types.SimpleNamespace(models=["mlp"], fresh_process=False, overhead={"repeats": 3}, repeats=5)
    R = numbers(ovh, COSTS, speed, stack, P)
    scale = round_scaling(COSTS, "mlp")
    assert (R["perf_small"], R["perf_large"], R["perf_params"]) == (10, "40", "1,000")
    assert R["perf_fold_growth_measured"] == scale.fold_growth and R["perf_time_ratio"] == 0.5
    assert R["perf_time_reading"].startswith("lower") and R["perf_ovh_identical"].startswith("differ")
    assert R["perf_ovh_model"] == "small CNN" and R["perf_ovh_ratio_measured"] == 1.5 and R["perf_ovh_repeats"] == 3
    assert R["perf_isolation"].startswith("(the smoke profile)")
    assert R["perf_vec_best_measured"] == WORKLOAD_TEXT["linear"] and R["perf_vec_worst_ratio_measured"] == 0.5
    assert R["perf_vec_worst_reading_measured"] == "slower than one client after another"
    assert R["perf_vec_cnn_reading_measured"] == ": stacked, the small CNN trains 0.50 times as fast as one client after another"
    assert R["perf_vec_maxdiff"] == 3e-6 and (R["perf_vec_stack_lo"], R["perf_vec_stack_hi"]) == (5, 80)
    assert R["perf_vec_stack_reading_measured"] == "grows" and R["perf_vec_clients"] == 20
    assert R["perf_n_fold"] == len(registered(streams=True))
    assert type(R["perf_vec_maxdiff"]) is float and type(R["perf_vec_stack_lo"]) is int
