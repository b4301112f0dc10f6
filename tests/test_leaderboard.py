"""The leaderboard chapter's procedures (fedbook.studies.leaderboard): ranks, first places,
the seed bootstrap (fedbook.intervals.bootstrap_means, the book's one resampling), the summary's
intervals and the Pareto front on hand-computed fixtures; the exclusions read from the classes; bad
input refused with the valid values named; a small study end to end (each cell on the federation
that its seed builds for every concentration), the same twice for the same seed, and the numbers of
the page's prose read from it."""

from __future__ import annotations

import dataclasses
import functools
import math
import types

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from fedlib.algorithms import registered
from fedbook.intervals import bootstrap_means, plus_minus
from fedbook.studies.leaderboard import (BOOTSTRAP, BYTES, COLUMNS, SHARED, LeaderboardConfig, board, boards,
                                         display_name, named,
                                         build_method, communication_rounds, digit_vectors,
                                         execution_of, exclusion_reason, first_shares, lead_interval, leaderboard_cell,
                                         method_table, numbers, pareto_front, plot_accuracy, rank_bootstrap,
                                         ranks_of, run_one, split_methods, summary_table, winner_words)
from fedbook.page import save_frames
from fedbook.studies import leaderboard
from fedbook.studies.setting import TAILS
from fedbook.study import Study, run_study
from fedlib.engines import vectorized
from fedlib.federation import make_federations
from fedlib.rng import PURPOSES, numpy_rng

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = LeaderboardConfig(rounds=1, local_epochs=1, finetune_epochs=1, hidden=(8,), total_per_class=5)


def _rows(values: dict[str, list[float]], alpha: float = 0.1, metric: str = "pooled") -> pd.DataFrame:
    """Per-run rows of a hand-made leaderboard: ``values[method]`` holds one value per seed."""
    out = []
    for m, vs in values.items():
        for s, v in enumerate(vs):
            out.append({"alpha": alpha, "seed": s, "method": m, metric: v, BYTES: 100.0})
    return pd.DataFrame(out)


# ------------------------------------------------------------------ ranks and first places
def test_ranks_are_average_ranks_with_one_for_the_largest():
    values = np.array([0.2, 0.9, 0.5, 0.9, 0.1])
    assert ranks_of(values).tolist() == [4.0, 1.5, 3.0, 1.5, 5.0]
    # scipy's average ranks of the negated values are the same rule
    assert np.array_equal(ranks_of(values), stats.rankdata(-values, method="average"))
    assert ranks_of(np.array([[1.0, 2.0], [3.0, 0.0]])).tolist() == [[2.0, 1.0], [1.0, 2.0]]


def test_first_place_is_shared_by_ties_and_sums_to_one():
    shares = first_shares(np.array([[0.3, 0.3, 0.3], [0.1, 0.9, 0.2], [0.5, 0.5, 0.1]]))
    assert np.allclose(shares, [[1 / 3, 1 / 3, 1 / 3], [0, 1, 0], [0.5, 0.5, 0]])
    assert np.allclose(shares.sum(axis=1), 1.0)


def test_bootstrap_means_resample_the_seeds_jointly():
    values = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # method 1 is ten times method 0, seed by seed
    means = bootstrap_means(values, 500, np.random.default_rng(0))
    assert means.shape == (500, 2)
    assert np.allclose(means[:, 1], 10 * means[:, 0])  # the same resample for both methods
    # the resample of the same generator, by hand
    idx = np.random.default_rng(0).integers(0, 3, size=(500, 3))
    assert np.array_equal(means, values[idx].mean(axis=1))


def test_rank_bootstrap_on_a_hand_made_board():
    # a always beats c; a and b swap places between the two seeds
    rows = _rows({"a": [0.9, 0.7], "b": [0.8, 0.8], "c": [0.1, 0.2]})
    r = rank_bootstrap(rows, n_boot=4000, seed=3).loc[0.1]
    assert r.loc["c", "first"] == 0.0 and r.loc["c", "median rank"] == 3.0 and r.loc["c", "rank"] == 3.0
    assert r.loc["a", "rank"] == r.loc["b", "rank"] == 1.5  # observed means 0.8 and 0.8: a tie
    # resamples: (0, 0) a wins (1/4), (1, 1) b wins (1/4), mixed (1/2) ties at 0.8: shared
    assert r.loc["a", "first"] == pytest.approx(0.5, abs=0.03) and r.loc["b", "first"] == pytest.approx(0.5, abs=0.03)
    assert r["first"].sum() == pytest.approx(1.0)


def test_rank_bootstrap_draws_from_its_own_stream_and_is_reproducible():
    assert PURPOSES["LEADERBOARD_BOOTSTRAP"] == BOOTSTRAP and list(PURPOSES.values()).count(BOOTSTRAP) == 1
    rows = _rows({"a": [0.9, 0.7, 0.8], "b": [0.8, 0.85, 0.79], "c": [0.5, 0.9, 0.6]})
    one, two = rank_bootstrap(rows, n_boot=300, seed=5), rank_bootstrap(rows, n_boot=300, seed=5)
    pd.testing.assert_frame_equal(one, two)
    # by hand from the documented stream
    values = np.array([[0.9, 0.8, 0.5], [0.7, 0.85, 0.9], [0.8, 0.79, 0.6]])
    means = bootstrap_means(values, 300, numpy_rng(5, BOOTSTRAP))
    assert np.allclose(one["first"].to_numpy(), first_shares(means).mean(axis=0))
    assert np.allclose(one["median rank"].to_numpy(), np.median(ranks_of(means), axis=0))


def test_rank_bootstrap_ranks_each_alpha_on_its_own():
    rows = pd.concat([_rows({"a": [0.9, 0.9], "b": [0.1, 0.1]}, alpha=0.1),
                      _rows({"a": [0.1, 0.1], "b": [0.9, 0.9]}, alpha=0.5)])
    r = rank_bootstrap(rows, n_boot=10)
    assert r.loc[(0.1, "a"), "first"] == 1.0 and r.loc[(0.5, "b"), "first"] == 1.0


# ------------------------------------------------------------------ summary, board and words
def test_summary_is_the_mean_and_t_interval_over_seeds_in_percent():
    rows = _rows({"a": [0.90, 0.91, 0.92], "b": [0.5, 0.6, 0.7]})
    t = summary_table(rows, ["pooled"])
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)  # sd of (90, 91, 92) is 1
    assert t.loc[(0.1, "a"), "pooled"] == pytest.approx(91.0)
    assert t.loc[(0.1, "a"), "pooled ±"] == pytest.approx(half)
    assert t.loc[(0.1, "a"), "pooled low"] == pytest.approx(91.0 - half)
    assert t.loc[(0.1, "b"), "pooled ±"] == pytest.approx(stats.t.ppf(0.975, 2) * 10 / math.sqrt(3))
    assert t.loc[(0.1, "a"), "seeds"] == 3 and t.loc[(0.1, "a"), BYTES] == 100.0
    assert t.index.get_level_values("method").tolist() == ["a", "b"]


def test_one_seed_has_an_infinite_interval_and_the_cell_says_so():
    t = summary_table(_rows({"a": [0.5]}), ["pooled"])
    assert math.isinf(t.loc[(0.1, "a"), "pooled ±"])
    assert plus_minus(50.0, math.inf) == "50.0 ± ∞"
    assert plus_minus(91.26, 1.04) == "91.3 ± 1.0"


def test_board_sorts_by_the_chosen_metric_and_names_the_columns():
    rows = _rows({"a": [0.5, 0.6], "b": [0.8, 0.9]})
    rows["worst_pooled"] = [0.4, 0.5, 0.1, 0.2]
    s = summary_table(rows, ["pooled", "worst_pooled"])
    b = board(s, 0.1, metrics=["pooled", "worst_pooled"])
    assert b.index.tolist() == ["b", "a"] and list(b.columns[:2]) == [COLUMNS["pooled"], TAILS["worst_pooled"]]
    assert board(s, 0.1, metrics=["pooled", "worst_pooled"], sort_by="worst_pooled").index.tolist() == ["a", "b"]
    ranks = rank_bootstrap(rows, n_boot=20)
    assert board(s, 0.1, ranks, metrics=["pooled"]).loc["b", "ranked first (%)"] == 100.0
    with pytest.raises(ValueError, match=r"no results at alpha = 0.3; valid: 0.1"):
        board(s, 0.3)
    with pytest.raises(ValueError, match=r"cannot sort by 'nope'"):
        board(s, 0.1, metrics=["pooled"], sort_by="nope")


def test_pareto_front_by_hand():
    acc = {"a": 90.0, "b": 80.0, "c": 85.0, "d": 90.0, "e": 70.0}
    cost = {"a": 10.0, "b": 5.0, "c": 20.0, "d": 10.0, "e": 5.0}
    # c: a is more accurate and cheaper; e: b is as cheap and more accurate; a and d tie (neither dominates)
    assert pareto_front(acc, cost) == ["a", "b", "d"]
    with pytest.raises(ValueError, match="same methods"):
        pareto_front({"a": 1.0}, {"b": 1.0})


def test_winner_words_read_the_shares():
    r = pd.DataFrame({"alpha": 0.1, "method": ["a", "b"], "rank": [1.0, 2.0], "first": [0.97, 0.03],
                      "median rank": [1.0, 2.0]}).set_index(["alpha", "method"])
    w = winner_words(r, 0.1)
    assert w["leader"] == "a" and w["runner_up"] == "b" and w["contenders"] == "a (97 %)"
    assert w["verdict"].startswith("the first place is settled")


def test_a_lead_within_the_noise_is_not_settled_however_often_it_ranks_first():
    # a beats b on every seed by a hundredth of a point: first in every resample, yet the paired
    # lead's interval (t with 2 degrees of freedom over leads of 0.01, 0.01 and 0.04 points) crosses 0
    rows = _rows({"a": [0.9001, 0.8001, 0.7004], "b": [0.9, 0.8, 0.7]})
    ranks = rank_bootstrap(rows, n_boot=200, seed=0)
    assert ranks.loc[(0.1, "a"), "first"] == 1.0
    iv = lead_interval(rows, 0.1, "pooled", "a", "b")
    assert iv.mean == pytest.approx(0.02) and iv.low < 0 < iv.high
    w = winner_words(ranks, 0.1, rows)
    assert w["verdict"].startswith("the first place is not settled: a is first in 100 %") and "within the noise" in w["verdict"]
    # a lead of several points on every seed is settled, and says so with its interval
    rows = _rows({"a": [0.95, 0.85, 0.75], "b": [0.9, 0.8, 0.7]})
    w = winner_words(rank_bootstrap(rows, n_boot=200, seed=0), 0.1, rows)
    assert w["verdict"].startswith("the first place is settled at these seeds") and "+5.0 points [+5.0, +5.0]" in w["lead"]


def test_lead_and_words_refuse_what_they_do_not_hold():
    rows = _rows({"a": [0.9, 0.8], "b": [0.8, 0.7]})
    with pytest.raises(ValueError, match=r"no rows at alpha = 0.5; valid: 0.1"):
        lead_interval(rows, 0.5, "pooled", "a", "b")
    with pytest.raises(ValueError, match=r"no method 'c' at alpha = 0.1; valid: a, b"):
        lead_interval(rows, 0.1, "pooled", "a", "c")
    with pytest.raises(ValueError, match=r"no ranks at alpha = 0.5; valid: 0.1"):
        winner_words(rank_bootstrap(rows, n_boot=10), 0.5)
    with pytest.raises(ValueError, match="lack a finite pooled"):
        rank_bootstrap(_rows({"a": [0.9, float("inf")], "b": [0.8, 0.7]}), n_boot=10)


# ------------------------------------------------------------------ which methods, with what
def test_exclusions_are_read_from_the_classes():
    runs, excluded = split_methods()
    assert sorted(excluded.index) == ["comet", "cosmos", "fedct", "fedmd"]
    assert all("needs public" in r and "model_agnostic" in r for r in excluded["reason"])
    assert sorted(runs + list(excluded.index)) == registered()
    assert set(runs) == set(registered(bare=True)) == set(SHARED)  # every runnable method says what it shares


def test_every_runnable_method_builds_with_the_shared_settings():
    config = LeaderboardConfig(local_epochs=2, finetune_epochs=3, lr=0.02, total_per_class=7)
    for name in split_methods()[0]:
        m = build_method(name, config, seed=4)
        trains = [t for t in (getattr(m, "train", None), getattr(getattr(m, "base", None), "train", None)) if t is not None]
        assert trains and all((t.epochs, t.lr) == (2, 0.02) for t in trains), name
    assert build_method("ggeur", config, 0).total_per_class == 7
    assert build_method("ifca", config, 9).seed == 9
    assert build_method("fedavg_ft", config, 0).finetune.epochs == 3
    assert build_method("cgrl", config, 0).cgrl.augment == "none"
    assert build_method("cgrl", config, 0, vectors=False).cgrl.augment == "digits"
    assert communication_rounds("rebalanced", 4) == 5 and communication_rounds("fedavg", 4) == 4
    assert method_table(["fedavg", "mpt"], config).loc["fedavg", "differs from the class's defaults"] == "nothing"


def test_digit_vectors_are_the_flattened_digits():
    data = digit_vectors(100, seed=2)
    assert tuple(data.x.shape) == (100, 64) and float(data.x.min()) >= 0.0 and float(data.x.max()) <= 1.0


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(("call", "message"), [
    (lambda: build_method("fedsgd", TINY, 0), r"unknown method\(s\) 'fedsgd'; valid: .*fedavg"),
    (lambda: build_method("cosmos", TINY, 0), r"'cosmos' cannot run on the shared federation: needs public.*valid: .*fedavg"),
    (lambda: split_methods("fedavg"), r"got the string 'fedavg'; valid: "),
    (lambda: split_methods(["fedavg", "fedavg"]), r"distinct"),
    (lambda: exclusion_reason("nope"), r"unknown method\(s\) 'nope'; valid: "),
    (lambda: rank_bootstrap(_rows({"a": [0.5]}), "accuracy"), r"unknown metric 'accuracy' to rank on; valid: pooled"),
    (lambda: rank_bootstrap(_rows({"a": [0.5]}), n_boot=0), r"n_boot must be an integer >= 1, got 0"),
    (lambda: rank_bootstrap(_rows({"a": [0.5, float("nan")]})), r"method\(s\) \['a'\] lack a finite pooled"),
    (lambda: rank_bootstrap(pd.concat([_rows({"a": [0.5]})] * 2)), r"twice"),
    (lambda: summary_table(pd.DataFrame({"alpha": [0.1]}), ["pooled"]), r"lack the column\(s\) \['seed', 'method'"),
    (lambda: LeaderboardConfig(rounds=0), r"rounds"),
    (lambda: LeaderboardConfig(hidden=(8, 0)), r"hidden must be a non-empty sequence of positive ints, got \(8, 0\)"),
    (lambda: LeaderboardConfig(lr=-1.0), r"lr"),
])
def test_bad_input_names_the_bad_value_and_the_valid_ones(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _cell(**kwargs):
    """The leaderboard's cell with the tiny settings: 150 digits, 3 clients."""
    return functools.partial(leaderboard_cell, config=TINY, n_samples=150, data_seed=0, n_clients=3,
                             global_test_per_class=5, **kwargs)


@pytest.mark.parametrize(("setting", "message"), [
    (dict(alpha=0.0), r"alphas must be distinct Dirichlet concentrations > 0.*got \[0.0\]"),
    (dict(alpha=None), r"no IID None"),
    (dict(method="fedmd"), r"fedmd cannot run on the shared federation; valid: .*fedavg"),
    (dict(method="fedsgd"), r"unknown method\(s\) 'fedsgd'; valid: .*fedavg"),
    (dict(execution="stacked"), r"unknown execution 'stacked'; valid: vectorized, sequential"),
])
def test_a_cell_refuses_bad_input(setting, message):
    with pytest.raises(ValueError, match=message):
        _cell()(**(dict(seed=0, alpha=0.5, method="fedavg") | setting))
    with pytest.raises(ValueError, match=r"seeds must be distinct integers in \[0, 2\*\*32\).*got \[1, 1\]"):
        Study("leaderboard", _cell(), grid={"alpha": [0.5], "method": ["fedavg"]}, seeds=[1, 1])


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def tiny_board():
    study = Study("leaderboard", _cell(), grid={"alpha": [0.5], "method": ["fedavg", "fedrep"]}, seeds=[0])
    return run_study(study)["leaderboard"]


def test_a_small_run_end_to_end(tiny_board, tmp_path):
    rows = tiny_board
    assert rows[["alpha", "method", "seed"]].values.tolist() == [[0.5, "fedavg", 0], [0.5, "fedrep", 0]]
    for key in COLUMNS:
        assert rows[key].between(0, 1).all()
    assert (rows["rounds"] == 1).all()
    # FedRep keeps its head at home: fewer bytes up than FedAvg, which sends the whole model both ways
    assert rows.loc[1, BYTES] < rows.loc[0, BYTES]
    assert rows.loc[0, "bytes_per_round"] == pytest.approx(3 * rows.loc[0, BYTES])
    s = summary_table(rows)
    assert math.isinf(s.loc[(0.5, "fedavg"), "pooled ±"])  # one seed
    (path,) = save_frames({"leaderboard": rows}, tmp_path / "results")
    assert path.name == "leaderboard.csv"
    pd.testing.assert_frame_equal(pd.read_csv(path), rows, check_dtype=False)


def test_a_cell_is_the_run_on_its_seeds_federation_among_every_concentration(tiny_board):
    data = digit_vectors(150, seed=0)
    feds = make_federations(data, [0.1, 0.5], n_clients=3, global_test_per_class=5, seed=0)
    expected = run_one("fedrep", feds[0.5], TINY, 0)
    got = tiny_board.iloc[1]
    for key, value in expected.items():
        if key != "cpu_seconds":  # the clock is not a result
            assert got[key] == value or (math.isnan(value) and math.isnan(got[key])), key


def test_stacked_clients_reach_the_sequential_weights_to_float32_rounding(monkeypatch):
    # the methods that stack train stacked (execution_of), the others sequentially, whatever is asked
    assert [execution_of(m) for m in ("fedavg", "ditto", "fedproto", "mpt")] == ["vectorized", "vectorized",
                                                                                 "sequential", "sequential"]
    assert execution_of("ditto", "sequential") == "sequential"
    stacked = []  # the clients each stacked call trains: the vectorized cells do stack, the sequential ones do not
    train_programs = vectorized.train_programs
    monkeypatch.setattr(vectorized, "train_programs", lambda model, programs, gens: (
        stacked.append(len(programs)), train_programs(model, programs, gens))[1])
    runs = []  # every run's result: its final server and client states
    run_federated = leaderboard.run_federated
    monkeypatch.setattr(leaderboard, "run_federated", lambda *a, **k: (runs.append(run_federated(*a, **k)), runs[-1])[1])
    config = dataclasses.replace(TINY, rounds=2)
    cell = functools.partial(leaderboard_cell, config=config, n_samples=150, data_seed=0, n_clients=3,
                             global_test_per_class=5)

    def arrays(run):  # every tensor of the final server and client states, by name
        states = {"server": run.server, **{k: run.client_states[k] for k in sorted(run.client_states)}}
        return {(who, name): a.double() for who, state in states.items() for name, a in state.arrays.items()}

    for method in ("fedavg", "ditto", "fedrep"):
        before = len(stacked)
        seq = cell(seed=0, alpha=0.5, method=method, execution="sequential")
        assert len(stacked) == before
        vec = cell(seed=0, alpha=0.5, method=method)  # the default: vectorized
        assert len(stacked) > before and max(stacked[before:]) == 3  # the round's 3 clients in one stack
        # Bit-equality is NOT claimed: a stacked computation sums in another order, so the final
        # weights agree to float32 rounding (fedlib.engines.vectorized), checked here on every tensor
        a, b = arrays(runs[-2]), arrays(runs[-1])
        assert a.keys() == b.keys() and a
        assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
        # the accuracies agree on these cells (they may differ in a rare case, a score on an edge)
        accuracy = [*COLUMNS, "rounds"]
        pd.testing.assert_frame_equal(seq[accuracy], vec[accuracy], check_exact=True)
        # a reply's train_loss (metadata) may round differently: its JSON text a few characters longer or
        # shorter (a float's repr has at most 24), so at most 24 bytes per reply, 3 replies a round
        assert abs(seq.loc[0, "bytes_per_round"] - vec.loc[0, "bytes_per_round"]) <= 24 * 3
        assert abs(seq.loc[0, BYTES] - vec.loc[0, BYTES]) <= 24 + 1e-9  # per client (3 of them)
        assert seq.loc[0, "bytes_per_round"] > 1000  # the whole MLP up and down: the bound is tight by comparison
    again = cell(seed=0, alpha=0.5, method="fedrep")  # stacked again: the same seed, the same bits
    c, d = arrays(runs[-2]), arrays(runs[-1])
    assert all(torch.equal(c[k], d[k]) for k in c)
    pd.testing.assert_frame_equal(vec.drop(columns="cpu_seconds"), again.drop(columns="cpu_seconds"), check_exact=True)


def test_the_same_seed_gives_the_same_table(tiny_board):
    study = Study("leaderboard", _cell(), grid={"alpha": [0.5], "method": ["fedavg", "fedrep"]}, seeds=[0])
    again = run_study(study, workers=2)["leaderboard"]  # in two worker processes: the same bits
    deterministic = [c for c in tiny_board.columns if c != "cpu_seconds"]
    pd.testing.assert_frame_equal(tiny_board[deterministic], again[deterministic], check_exact=True)
    pd.testing.assert_frame_equal(summary_table(tiny_board), summary_table(again), check_exact=True)


def test_the_pages_numbers_read_the_summary_and_the_ranks():
    rows = pd.concat([_rows({"fedavg": [0.6, 0.7], "fedrep": [0.9, 0.8], "ditto": [0.7, 0.9]}, alpha=a) for a in (0.1, 0.5)],
                     ignore_index=True)
    rows["worst_pooled"] = [0.2, 0.3, 0.5, 0.4, 0.6, 0.1] * 2
    rows["global"] = [0.6, 0.7, 0.3, 0.2, 0.6, 0.8] * 2
    rows[BYTES] = [100.0, 100.0, 50.0, 50.0, 200.0, 200.0] * 2
    rows["bottom20_pooled"], rows["local"] = rows["worst_pooled"], rows["global"]
    summary = summary_table(rows)
    ranks = rank_bootstrap(rows, "pooled", n_boot=200, seed=3)
    P = types.SimpleNamespace(alphas=[0.1, 0.5], n_clients=3, hidden=[8, 4], rounds=1, local_epochs=1, lr=0.05,
                              finetune_epochs=1, n_seeds=2, methods=None, n_boot=200, rank_by="pooled")
    excluded = pd.DataFrame({"class": ["FedMD"], "reason": ["x"]}, index=pd.Index(["fedmd"], name="method"))
    R = numbers(rows, summary, ranks, P, ["fedavg", "fedrep", "ditto"], excluded, digit_vectors(120, 0), TINY, seed=3)
    # the prose names the methods as the tables do (display_name): the words of the renamed rows
    w = winner_words(named(ranks), 0.1, rows.assign(method=rows["method"].map(display_name)), "pooled")
    assert w["leader"] == "FedRep" and "fedrep" not in w["verdict"]
    assert (R["lb_alpha_hard"], R["lb_alpha_mild"], R["lb_leader_hard"], R["lb_verdict_hard"]) == (0.1, 0.5, w["leader"],
                                                                                                   w["verdict"])
    assert R["lb_ref_hard"] == R["lb_ref"] == "FedAvg" and R["lb_ref_acc_hard"] == pytest.approx(65.0)
    assert R["lb_personal_hard"] == "FedRep" and R["lb_personal_gap_hard"] == pytest.approx(60.0)  # 85 - 25
    assert R["lb_best_global_hard"] == "Ditto" and R["lb_cheapest"] == "FedRep" and R["lb_dearest"] == "Ditto"
    assert R["lb_cheapest_bytes"] == "50 B" and R["lb_n_resamples"] == 3 and R["lb_hidden"] == "8 × 4"
    assert R["ex1_front"] == "FedRep (85.0 %, 50 B)" and R["ex1_n_front"] == 1 and R["ex1_dominate"] == "FedRep (+20.0)"
    assert R["ex2_metric"] == COLUMNS["worst_pooled"] and R["lb_n_samples"] == "120" and R["lb_excluded_names"] == "FedMD"
    assert R["lb_example_cell"] == plus_minus(summary.loc[(0.1, "fedrep"), "pooled"], summary.loc[(0.1, "fedrep"), "pooled ±"])
    table = boards(summary, ranks, [0.1, 0.5], "pooled")
    assert table.index.names == ["α", "method"] and table.loc[0.1].index[0] == "fedrep"
    fig = plot_accuracy(summary, [0.5, 0.1])
    assert [ax.get_title() for ax in fig.axes[:2]] == ["Dirichlet α = 0.1", "Dirichlet α = 0.5"]
    plt.close(fig)
