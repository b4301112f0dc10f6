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


# ---- what deciding every open claim would cost: hand-made records with their studies ----

def _study(name: str, seeds: list, cells: int, cached: int, cached_seconds: float, computed_seconds: float) -> dict:
    return {"study": name, "cells": cells, "cached": cached, "cached_seconds": cached_seconds,
            "computed_seconds": computed_seconds, "seeds": seeds}


RECORD = {"seconds": 60.0, "cpu_seconds": 50.0, "seeds": {"seed": 0, "n_seeds": 3, "side_seeds": 2, "n_seeds_figure": 2},
          "studies": [_study("main", [0, 1, 2], 6, 3, 24.0, 12.0),  # 36 s: 12 s a seed of n_seeds
                      _study("side", [0, 1], 2, 0, 0.0, 10.0),  # 5 s a seed; 2 seeds: side_seeds and n_seeds_figure tie
                      _study("pilot", [1000], 1, 0, 0.0, 5.0)]}  # 1 seed: no tier has 1
"""A chapter of cost 50 + 24 = 74 s (its CPU and its cached cells'), 51 s of it in studies: 23 s fixed."""


def test_the_estimate_prices_each_study_by_its_tier_and_the_rest_as_fixed():
    from fedbook.confirm import chapter_seconds, estimate_parts, estimate_seconds

    assert chapter_seconds(RECORD) == 74.0
    parts = estimate_parts(RECORD, {"seed": 10000, "n_seeds": 10, "side_seeds": 2, "n_seeds_figure": 4})
    # main 12 x 10; side (a tie) at the dearer tier, n_seeds_figure: 5 x 4; pilot (no match) at n_seeds: 5 x 10
    assert parts["seconds"] == 23 + 120 + 20 + 50 and parts["fixed"] == 23.0 and parts["unmatched"] == 2
    assert parts["cells"] == 20 + 4 + 10 and parts["per_seed"] == 22.0
    assert (parts["cached"], parts["pilot_cells"]) == (3, 9)
    assert parts["cell_seconds"] == (120 + 20 + 50) / 34
    # at the pilot's own parameters the estimate is the pilot's cost, but for the studies placed by a guess
    pilot = dict(RECORD["seeds"])
    assert estimate_seconds(RECORD, pilot) == 74.0 + 5.0 * (3 - 1)  # the pilot study charged 3 seeds, not 1
    # a tier the parameters leave out keeps its pilot value; computed cells over the CPU (a busy machine): no fixed part
    busy = {**RECORD, "cpu_seconds": 1.0, "studies": RECORD["studies"][:1]}
    assert estimate_parts(busy, {"n_seeds": 6})["fixed"] == 0.0 and estimate_seconds(busy, {"n_seeds": 6}) == 72.0
    # without studies, seed parameters or seconds: nothing prices it
    for record in ({"cpu_seconds": 5.0, "seeds": {"n_seeds": 2}}, {k: v for k, v in RECORD.items() if k != "seeds"},
                   {"studies": RECORD["studies"], "seeds": RECORD["seeds"]}):
        assert estimate_seconds(record, pilot) is None


def test_the_plan_carries_the_estimate(tmp_path):
    import json

    from fedbook.claims import Claim, claims_records, evaluate
    from fedbook.confirm import estimate_seconds, plan

    c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X - Y, points", "greater", 1.0, resolution=0.1)
    record = {**RECORD, "claims": claims_records([evaluate(c, [0.0, 2.0, 1.0])])}  # open, 3 seeds: n_seeds
    (tmp_path / "x_experiments.json").write_text(json.dumps(record))
    row = plan(tmp_path).chapters.iloc[0]
    assert row["pilot_seconds"] == 74.0
    assert row["estimated_seconds"] == estimate_seconds(record, row["parameters"]) > 74.0


def test_decided_cost_counts_the_cached_cells_of_every_chapter_but_the_excluded(tmp_path):
    import json

    from fedbook.studies.deciding_cost import decided_cost

    claims = [{"kind": "claim", "verdict": "holds"}, {"kind": "claim", "verdict": "does not hold"},
              {"kind": "control", "verdict": "holds"}, {"kind": "claim", "verdict": "inconclusive at this scale"}]
    records = {"a": {"seconds": 70.0, "cpu_seconds": 60.0, "claims": claims, "studies": [_study("m", [0], 4, 3, 90.0, 2.0)]},
               "b": {"seconds": 90.0, "claims": claims[:1]},  # an old record: its wall seconds, no studies
               "c": {"seconds": 12.0, "cpu_seconds": 10.0, "studies": []},  # a page that runs no study
               "f": {"seconds": 30.0, "cpu_seconds": 8.0, "studies": [], "cpu_escapes": "ClientApps"},  # wall: 30
               "me": {"seconds": 5.0, "cpu_seconds": 5.0, "claims": claims}}
    for name, record in records.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    got = decided_cost(tmp_path, exclude=["me"])
    assert got["seconds"] == 60 + 90 + 90 + 10 + 30 and got["decided"] == 3 and got["chapters"] == 4
    assert (got["wall"], got["no_studies"], got["cached"], got["cells"]) == (2, 1, 3, 4)
    assert got["minutes_per_claim"] == 280 / 60 / 3
    # where those seconds went: the same chapters and totals, split by chapter
    from fedbook.studies.deciding_cost import spent_by_chapter, spent_numbers

    (tmp_path / "u.json").write_text(json.dumps({"seconds": 7.0, "cpu_seconds": 6.0, "studies": [],  # all open
                                                 "claims": [claims[3], claims[3]]}))
    spent = spent_by_chapter(tmp_path, exclude=["me"])
    assert spent["chapter"].tolist() == ["a", "b", "f", "c", "u", "all"]  # 150 s (60 + 90 cached), 90, 30, 10, 6
    assert spent["minutes"].iloc[:-1].tolist() == [150 / 60, 90 / 60, 30 / 60, 10 / 60, 6 / 60]
    assert spent["minutes"].iloc[-1] == pytest.approx((got["seconds"] + 6) / 60)
    assert spent["counted"].tolist() == ["CPU", "wall", "wall", "CPU", "CPU", ""]
    assert spent["claims"].tolist() == [3, 1, 0, 0, 2, 6] and spent["decided"].tolist() == [2, 1, 0, 0, 0, got["decided"]]
    assert spent["share (%)"].iloc[-1] == 100.0 and spent["share (%)"].iloc[:-1].sum() == pytest.approx(100.0)
    assert spent["minutes per decided claim"].iloc[:2].tolist() == [150 / 60 / 2, 90 / 60 / 1]
    assert spent["minutes per decided claim"].iloc[2:5].isna().all()
    R = spent_numbers(spent)
    assert R["cost_deciding_chapters"] == 2 and R["cost_deciding_minutes_measured"] == pytest.approx(240 / 60)
    assert R["cost_deciding_per_claim_measured"] == pytest.approx(240 / 60 / 3)
    assert R["cost_undecided"] == "; the 1 chapter with claims of which it decided none (u) spent 0.1 minutes"
    assert (R["cost_other_chapters"], R["cost_other_names"]) == (2, "f, c")
    assert R["cost_other_minutes_measured"] == pytest.approx(40 / 60)


def test_the_cost_of_deciding_and_its_numbers(tmp_path):
    import json

    from fedbook.studies.deciding_cost import confirm_costs, cost_numbers

    x = {"cpu_seconds": 30.0, "seeds": {"seed": 0, "n_seeds": 5},  # 30 s fixed; 60 s a seed in 2 cells of 30 s
         "studies": [_study("main", [0, 1, 2, 3, 4], 10, 10, 300.0, 0.0)]}
    (tmp_path / "x.json").write_text(json.dumps(x))
    (tmp_path / "z.json").write_text(json.dumps({"seconds": 9.0, "seeds": {"seed": 0, "n_seeds": 5}}))  # no studies
    claims = pd.DataFrame({"chapter": ["x", "x", "x", "y", "w", "z"],
                           "planned_n": pd.array([4, None, 9, None, None, 3], dtype="Int64"),
                           "pilot_verdict": ["inconclusive at this scale"] * 3 + ["holds"]
                           + ["inconclusive at this scale"] * 2,
                           "reason": ["", "more than the cap", "", "", "more than the cap", ""]})
    chapters = pd.DataFrame({"chapter": ["x", "z"], "seeds": [9, 3],
                             "parameters": [{"seed": 1000, "n_seeds": 9}, {"seed": 1000, "n_seeds": 3}]})
    table, left_out = confirm_costs(tmp_path, claims, chapters, cores=(2, 64))
    assert left_out == ["z"] and table["chapter"].tolist() == ["x", "w", "all"]  # y has no open claim
    x, w, total = (table.iloc[i] for i in range(3))
    assert (x["open claims"], x["planned"], x["fresh seeds"]) == (3, 2, 9)
    assert x["CPU-hours"] == (30 + 60 * 9) / 3600
    assert x["wall, 2 cores (min)"] == (30 + 9 * 30) / 60  # 18 cells of 30 s, two at a time
    assert x["wall, 64 cores (min)"] == (30 + 30) / 60  # one wave
    assert (w["open claims"], w["fresh seeds"], w["CPU-hours"], w["wall, 2 cores (min)"]) == (1, 0, 0.0, 0.0)
    assert total["fresh seeds"] == 9 and total["CPU-hours"] == x["CPU-hours"] and total["open claims"] == 4
    decided = {"seconds": 600.0, "decided": 4, "chapters": 3, "wall": 1, "no_studies": 2, "cached": 5, "cells": 8,
               "minutes_per_claim": 2.5}
    R = cost_numbers(table, claims, decided, left_out, power=0.8, cap=40, cores=(2, 64))
    assert (R["cost_open"], R["cost_planned"], R["cost_unplanned"]) == (4, 2, 2)
    from fedbook.studies.deciding_cost import spent_by_chapter, spent_numbers

    shared = set(R) & set(spent_numbers(spent_by_chapter(tmp_path)))  # one page glues both: a key twice fails its render
    assert not shared, f"glue keys of both cost_numbers and spent_numbers: {sorted(shared)}"
    assert R["cost_reasons"] == "2: more than the cap" and R["cost_no_plan"] == ""
    assert R["cost_power"] == "80 %" and R["cost_cores"] == "2 and 64"
    assert R["cost_wall_2_measured"] == "5.0 minutes" and "z left out" in R["cost_left_out"]
    assert R["cost_minutes_measured"] == 2.5 and R["cost_cpu_minutes_measured"] == 10.0
    assert R["cost_cached"] == "the study cache served 5 of their 8 study cells"
    assert R["cost_no_studies"] == "2 records keep" and R["cost_wall"] == ("; 1 record without a whole CPU count (from before the build kept CPU time, or the "
                                 "Flower appendix, whose ClientApp processes no process waits for) counts its wall "
                                 "seconds instead")
    # no plan (fedbook.confirm.plan refused): an empty table, and the page says why
    from fedbook.confirm import CHAPTER_COLUMNS, CLAIM_COLUMNS

    empty = pd.DataFrame(columns=list(CLAIM_COLUMNS)).astype({"planned_n": "Int64"})
    table, left_out = confirm_costs(tmp_path, empty, pd.DataFrame(columns=list(CHAPTER_COLUMNS)))
    R = cost_numbers(table, empty, decided, left_out, power=0.8, cap=40, no_plan="the pilot's seeds reach first_seed")
    assert table.empty and "wall, 64 cores (min)" in table and R["cost_open"] == 0 and R["cost_wall_64_measured"] == "0.0 minutes"
    assert R["cost_no_plan"] == " No plan could be made from this build's records: the pilot's seeds reach first_seed."


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
    # the hand list is the chapters' seed parameters as the confirmatory plans find them
    from fedbook.confirm import seed_parameters

    spec = importlib.util.spec_from_file_location("book_build", path.parent.parent / "book" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    for chapter, names in bench.SEED_PARAMETERS.items():
        assert list(names) == seed_parameters(build.notebook_parameters(chapter)), chapter
