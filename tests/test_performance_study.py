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


# ---- what deciding every open claim would cost: a hand-made build's records and study cache ----

def _cell(folder, study: str, name: str, cell: dict, seconds: float, mtime: float) -> None:
    import json
    import os

    path = folder / study / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"study": study, "cell": cell, "seconds": seconds}))
    os.utime(path, (mtime, mtime))


def test_seed_costs_group_a_chapters_own_newest_cells_by_seed(tmp_path):
    import json

    from fedbook.studies.performance import seed_costs

    cache = tmp_path / "cache"
    for seed, (a, b) in enumerate([(10.0, 5.0), (12.0, 6.0), (9.0, 4.0)]):  # "runs" over two alphas: 15, 18, 13 s
        _cell(cache, "runs", f"a{seed}", {"alpha": 0.1, "seed": seed}, a, 2000)
        _cell(cache, "runs", f"b{seed}", {"alpha": 0.5, "seed": seed}, b, 2000)
    _cell(cache, "runs", "stale", {"alpha": 0.1, "seed": 1}, 99.0, 1000)  # an older version of a cell: not read
    _cell(cache, "runs", "other", {"seed": 0}, 50.0, 3000)  # another chapter's study of the same name: not read
    _cell(cache, "runs", "beyond", {"alpha": 0.1, "seed": 3}, 70.0, 3000)  # a seed the claims do not read
    _cell(cache, "figure", "f0", {"seed": 0}, 7.0, 2000)  # a study of the first seed only: the fixed part
    record = {"seconds": 80.0, "params": {"cache_dir": str(cache)}, "claims": [
        {"kind": "claim", "n": 3}, {"kind": "claim", "n": 2}, {"kind": "control", "n": 9}]}
    (tmp_path / "x_experiments.json").write_text(json.dumps(record))
    costs, left_out = seed_costs(tmp_path, {"x_experiments": {"runs": ("alpha",), "figure": ()},
                                            "y_experiments": {"runs": ()}})
    assert left_out == ["y_experiments"]
    row = costs.iloc[0]
    assert (row["seeds"], row["cells_per_seed"], row["cells"]) == (3, 2, 7)  # 6 runs cells and the figure's
    assert row["per_seed"] == 15.0  # median of 15, 18 and 13
    assert row["fixed"] == 80.0 - 3 * 15.0


def test_seed_costs_first_seed_comes_from_the_records_parameters(tmp_path):
    import json

    from fedbook.studies.performance import seed_costs

    cache = tmp_path / "cache"
    for seed in (0, 5, 6):
        _cell(cache, "runs", f"s{seed}", {"seed": seed}, 10.0 + seed, 2000)
    (tmp_path / "x.json").write_text(json.dumps({"seconds": 30.0, "params": {"cache_dir": str(cache), "seed": 5},
                                                 "claims": [{"kind": "claim", "n": 2}]}))
    costs, _ = seed_costs(tmp_path, {"x": {"runs": ()}})
    assert costs.iloc[0]["per_seed"] == 15.5 and costs.iloc[0]["fixed"] == 0.0  # 30 - 2 * 15.5 < 0: no fixed part
    # a record with CPU seconds: the chapter had half a core, so the cells' wall seconds count half
    (tmp_path / "x.json").write_text(json.dumps({"seconds": 40.0, "cpu_seconds": 20.0, "claims": [{"kind": "claim", "n": 2}],
                                                 "params": {"cache_dir": str(cache), "seed": 5}}))
    costs, _ = seed_costs(tmp_path, {"x": {"runs": ()}})
    assert costs.iloc[0]["per_seed"] == 15.5 / 2 and costs.iloc[0]["fixed"] == 20.0 - 15.5


def test_the_declared_studies_are_the_chapters_own():
    from pathlib import Path

    from fedbook.studies.performance import EXPERIMENTS_STUDIES

    notebooks = Path(__file__).resolve().parent.parent / "notebooks"
    for chapter, studies in EXPERIMENTS_STUDIES.items():
        source = (notebooks / f"{chapter}.py").read_text()
        for study, settings in studies.items():
            assert f'Study("{study}"' in source, (chapter, study)
            for setting in settings:
                assert f'"{setting}"' in source, (chapter, study, setting)


def test_the_cost_of_deciding_and_its_numbers():
    from fedbook.studies.performance import confirm_costs, confirm_numbers

    costs = pd.DataFrame([{"chapter": "x", "seconds": 0.0, "seeds": 5, "cells_per_seed": 2, "per_seed": 60.0,
                           "fixed": 30.0, "cells": 10},
                          {"chapter": "y", "seconds": 0.0, "seeds": 5, "cells_per_seed": 1, "per_seed": 10.0,
                           "fixed": 5.0, "cells": 5}])
    claims = pd.DataFrame({"chapter": ["x", "x", "x", "y"], "planned_n": pd.array([4, None, 9, None], dtype="Int64"),
                           "pilot_verdict": ["inconclusive at this scale"] * 3 + ["holds"],
                           "reason": ["", "more than the cap", "", ""]})
    chapters = pd.DataFrame({"chapter": ["x"], "seeds": [9]})
    table = confirm_costs(costs, claims, chapters, cores=(2, 64))
    x, y, total = (table.iloc[i] for i in range(3))
    assert (x["open claims"], x["planned"], x["fresh seeds"]) == (3, 2, 9)
    assert x["CPU-hours"] == (30 + 60 * 9) / 3600
    assert x["wall, 2 cores (min)"] == (30 + 9 * 30) / 60  # 18 cells of 30 s, two at a time
    assert x["wall, 64 cores (min)"] == (30 + 30) / 60  # one wave
    assert (y["open claims"], y["fresh seeds"], y["CPU-hours"], y["wall, 2 cores (min)"]) == (0, 0, 0.0, 0.0)
    assert total["chapter"] == "all" and total["fresh seeds"] == 9 and total["CPU-hours"] == x["CPU-hours"]
    decided = {"seconds": 600.0, "decided": 4, "chapters": 3, "wall": 1, "minutes_per_claim": 2.5}
    R = confirm_numbers(table, claims, decided, ["z"], power=0.8, cap=40, cores=(2, 64))
    assert (R["perf_confirm_open"], R["perf_confirm_planned"], R["perf_confirm_unplanned"]) == (3, 2, 1)
    assert R["perf_confirm_reasons"] == "1: more than the cap"
    assert R["perf_confirm_power"] == "80 %" and R["perf_confirm_cores"] == "2 and 64"
    assert R["perf_confirm_wall_2_measured"] == "5.0 minutes" and "z" in R["perf_confirm_left_out"]
    assert R["perf_claim_minutes_measured"] == 2.5 and R["perf_claim_cpu_minutes_measured"] == 10.0
    assert R["perf_claim_wall"].startswith(" (1 of them by their wall time")


def test_bench_seed_cost_helpers(monkeypatch):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent / "bench_seed_cost.py"
    spec = importlib.util.spec_from_file_location("bench_seed_cost", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_seed_cost", bench)  # its dataclass looks its module up
    spec.loader.exec_module(bench)
    assert bench.seed_parameters("ggeur_experiments", 3) == {"n_seeds": 3, "headline_seeds": 3}
    assert bench.marginal(100.0, 130.0, 2) == (30.0, 40.0)  # 40 + 30 * 2 = 100, 40 + 30 * 3 = 130
    with pytest.raises(ValueError, match="unknown seeded chapter 'findings'"):
        bench.seed_parameters("findings", 2)
    notebooks = path.parent.parent / "notebooks"
    for chapter, names in bench.SEED_PARAMETERS.items():  # every seed-count parameter is the chapter's own
        source = (notebooks / f"{chapter}.py").read_text()
        assert all(f"\n{name} = None" in source for name in names), chapter
