"""The procedures of the COSMOS derivations chapter (fedbook.studies.cosmos_derivations and
fedbook.studies.cosmos_synthetic): hand-computed fixtures, the identities they rely on, each
check shown to fail on a wrong library function, and the synthetic federation's independence of
torch's global random state."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import multivariate_normal

import fedbook.studies.cosmos_derivations as cc
from fedlib.algorithms import COSMOS
from fedlib.clustering import greedy_b0
from fedlib.data import make_gaussian_mixture
from fedlib.distill import PublicSet, consistency_loss, kl_rows, l1_distances, make_public_set
from fedbook.studies.cosmos_derivations import (algorithm1_checks, assumption51_over_time, b0_search_checks,
                                              consistency_gradient_checks, cosmos_iterations, greedy_rule_violations,
                                              lemma52_random_checks, lemma_rows, monotonicity_search, random_pseudo_labels,
                                              reference_cluster_count)
from fedbook.studies.cosmos_synthetic import (Circle, Linear, SyntheticRun, client_objective, error_rate, fitted_ratio,
                                                 hessian_checks, linear_from, shift_basis, synthetic_run, theory_table)
from fedlib.federation import make_federation
from fedlib.models import build_model
from fedlib.rng import numpy_rng
from fedlib.training import TrainConfig


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


F64 = torch.float64


# ---- Algorithm 1 ---------------------------------------------------------------------------------

def test_random_pseudo_labels_are_seeded_rows_on_the_simplex():
    a = random_pseudo_labels(np.random.default_rng(3), 6, 7, 5)
    b = random_pseudo_labels(np.random.default_rng(3), 6, 7, 5)
    assert a.shape == (6, 7, 5) and a.dtype == F64 and torch.equal(a, b)
    assert torch.allclose(a.sum(dim=2), torch.ones(6, 7, dtype=F64)) and bool((a > 0).all())


def test_the_greedy_replay_accepts_algorithm_1_and_counts_each_wrong_step():
    d = np.abs(np.subtract.outer([0.0, 1.0, 2.0, 10.0], [0.0, 1.0, 2.0, 10.0]))  # points on a line
    # at B0 = 1.5 client 1 has two close neighbours, the others at most one: it seeds {0, 1, 2}, then {3}
    assert greedy_rule_violations(d, 1.5, np.array([0, 0, 0, 1]), [1, 3]) == 0
    assert greedy_rule_violations(d, 1.5, np.array([0, 0, 1, 2]), [0, 2, 3]) == 1  # seed 0 has fewer neighbours than 1
    assert greedy_rule_violations(d, 1.5, np.array([0, 0, 0, 0]), [1]) == 2  # cluster 0 too large, and 3 left over


def test_algorithm1_checks_pass_on_greedy_b0_and_fail_on_a_wrong_rule(monkeypatch):
    r = algorithm1_checks(numpy_rng(0, 301), 15)
    assert (r["partition_bad"], r["rule_bad"]) == (0, 0)
    assert r["radius_excess"] <= 0 and r["diam_excess"] <= 1e-12 and 0 < r["worst_ratio"] <= 1 + 1e-12
    assert r["n_clusters"] >= 15 and r["inst_over_b0"] <= r["over_b0"] <= r["n_clusters"]

    def alone(d, b0):  # every client a cluster of its own, whatever B0 says
        return np.arange(len(d)), list(range(len(d)))

    monkeypatch.setattr(cc, "greedy_b0", alone)
    wrong = algorithm1_checks(numpy_rng(0, 301), 15)
    assert wrong["partition_bad"] == 0 and wrong["rule_bad"] > 0


def test_same_partition_ignores_the_cluster_numbers_only():
    assert cc.same_partition(np.array([0, 0, 1, 2]), np.array([2, 2, 0, 1]))
    assert not cc.same_partition(np.array([0, 0, 1, 2]), np.array([0, 0, 1, 1]))
    assert not cc.same_partition(np.array([0, 1]), np.array([0, 0]))


def test_planted_hard_labels_are_one_hot_and_seeded():
    labels, groups = cc.planted_hard_labels(np.random.default_rng(3))
    again, groups_again = cc.planted_hard_labels(np.random.default_rng(3))
    assert torch.equal(labels, again) and np.array_equal(groups, groups_again)
    assert labels.dtype == F64 and bool((labels.sum(dim=2) == 1).all()) and 2 <= len(set(groups.tolist())) <= 5
    d = l1_distances(labels)  # twice the number of disagreements: even integers
    assert np.array_equal(d, 2 * np.round(d / 2))


def test_recovery_holds_inside_the_window_and_a_wrong_radius_fails_it():
    """Inside W <= B0 < D Algorithm 1 returns the planted groups on every run; outside it some runs
    miss them. A neighbourhood of radius 2 B0 (or B0 / 2) is the mutation: it fails the inside row."""
    r = cc.recovery_checks(numpy_rng(0, 304), 60)
    assert r["separated"] > 20 and r["inside"] == 3 * r["separated"] and r["inside_bad"] == 0
    assert 0 < r["outside_bad"] <= r["outside"]
    for wrong in (lambda d, b0: greedy_b0(d, 2 * b0), lambda d, b0: greedy_b0(d, b0 / 2)):
        bad = cc.recovery_checks(numpy_rng(0, 304), 60, cluster=wrong)
        assert bad["separated"] == r["separated"] and bad["inside_bad"] > 0
    # the section records the rows: the first fails on the mutation (monkeypatched as the chapter calls it)
    from fedbook.checks import CheckTable
    checks = CheckTable()
    numbers = cc.recovery_section(checks, numpy_rng(0, 304), 60)
    assert len(checks) == 2 and checks.n_fail == 0 and numbers["rc_inside_bad"] == 0 and numbers["rc_separated"] == r["separated"]


def test_recovery_section_fails_on_a_wrong_radius(monkeypatch):
    from fedbook.checks import CheckTable
    true_greedy, original = cc.greedy_b0, cc.recovery_checks
    monkeypatch.setattr(cc, "recovery_checks", lambda rng, trials: original(rng, trials, cluster=lambda d, b0: true_greedy(d, 2 * b0)))
    checks = CheckTable()
    cc.recovery_section(checks, numpy_rng(0, 304), 60)
    assert checks.rows[0]["verdict"] == "FAILS"


def test_the_reference_algorithm1_counts_as_the_library_does_on_random_instances():
    rng = np.random.default_rng(5)
    for _ in range(60):
        m = int(rng.integers(3, 11))
        d = l1_distances(random_pseudo_labels(rng, m, int(rng.integers(3, 20)), int(rng.integers(2, 5))))
        for b0 in np.quantile(d[np.triu_indices(m, 1)], [0.0, 0.3, 0.6, 1.0]):
            assert reference_cluster_count(d, float(b0)) == len(greedy_b0(d, float(b0))[1])


def test_b0_search_checks_pass_and_fail_on_a_threshold_that_is_not_the_smallest(monkeypatch):
    r = b0_search_checks(numpy_rng(0, 302), 4, 60)
    assert (r["reach_bad"], r["smaller_bad"], r["grid_bad"]) == (0, 0, 0)
    assert r["overshoot"].shape == (4,) and (r["overshoot"] >= -1e-9).all()
    monkeypatch.setattr(cc, "b0_for_clusters", lambda d, target: float(d.max()))  # always reaches the target
    wrong = b0_search_checks(numpy_rng(0, 302), 4, 60)
    assert wrong["reach_bad"] == 0 and wrong["smaller_bad"] > 0


def test_the_monotonicity_search_finds_none_with_three_clients_and_a_checkable_example_with_more():
    assert monotonicity_search(np.random.default_rng(1), 40, m=3) == (0, None)  # provably none (exercise 3)
    found, example = monotonicity_search(numpy_rng(0, 303), 30)
    assert found > 0 and 4 <= example["m"] <= 9
    assert example["low"] < example["high"] and example["k_low"] < example["k_high"]


# ---- Lemma 5.2 -----------------------------------------------------------------------------------

def test_the_random_lemma_checks_pass_find_the_mean_reading_false_and_catch_a_wrong_b(monkeypatch):
    r = lemma52_random_checks(numpy_rng(0, 311), 100)
    assert (r["lemma_bad"], r["chain_bad"], r["diam_bad"], r["profile_bad"]) == (0, 0, 0, 0)
    assert r["mean_reading_bad"] > 0 and 0 < len(r["slack"]) == len(r["bound_terms"]) <= 100
    assert min(r["slack"]) >= -1e-12
    true_lemma52 = cc.lemma52
    monkeypatch.setattr(cc, "lemma52", lambda *a, **k: true_lemma52(*a, radius=0.0, **k))  # B = 0: the chain breaks
    assert lemma52_random_checks(numpy_rng(0, 311), 30)["chain_bad"] > 0


def _iterations(b0: float) -> list[dict]:
    labels = {0: torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=F64), 1: torch.tensor([[0.7, 0.3], [0.6, 0.4]], dtype=F64),
              2: torch.tensor([[0.1, 0.9], [0.5, 0.5]], dtype=F64)}
    return [dict(t=1, labels=labels, groups={0: 0, 1: 0, 2: 1}, history={"b0": b0, "seeds": [0, 2]})]


def test_lemma_rows_by_hand():
    # U holds two points of classes 0 and 1; clients 0 and 1 share a cluster; client 2 (alone) supports class 0 only
    rows = lemma_rows(_iterations(0.6), [np.array([0, 1]), np.array([0, 1]), np.array([0])], np.array([0, 1])).set_index("client")
    assert rows["t"].tolist() == [1, 1, 1] and rows["cluster size"].tolist() == [2, 2, 1] and rows["|U_i|"].tolist() == [2, 2, 1]
    # d_U(0, 1) = 0.2 + 0.2 + 0.4 + 0.4 = 1.2 = 2B for both; the mean is (0.8, 0.2), (0.4, 0.6): right on both points
    assert rows["2B"].tolist() == pytest.approx([1.2, 1.2, 0.0])
    assert rows["γ"].tolist() == pytest.approx([0.6, 0.2, 0.8])
    assert rows["Err(f_i)"].tolist() == pytest.approx([0.0, 0.5, 1.0]) and rows["Err(f̄)"].tolist() == pytest.approx([0.0, 0.0, 1.0])
    assert rows["bad"].tolist() == [0, 1, 0] and rows["gap"].tolist() == pytest.approx([0.0, -0.5, 0.0])
    assert rows["2B/(γ|U_i|)"].tolist() == pytest.approx([1.2 / 1.2, 1.2 / 0.4, 0.0])
    # S: |0.8 - 0.9| · 2 + |0.4 - 0.2| · 2 = 0.6 for client 0, |0.8 - 0.7| · 2 + |0.4 - 0.6| · 2 = 0.6 for client 1
    assert rows["S/(γ|U_i|)"].tolist() == pytest.approx([0.6 / 1.2, 0.6 / 0.4, 0.0])
    assert rows["holds"].all() and rows["holds, B = diameter on U"].all() and rows["mean reading holds"].all()
    # the margin profile of client 1 (margins 0.2, 0.4): min(0 + 1.2/(0.2 · 2), 1/2 + 1.2/(0.4 · 2)) = 2
    assert rows.loc[1, "margin-profile term"] == pytest.approx(2.0)
    # a client with no supported public point is left out
    assert len(lemma_rows(_iterations(0.6), [np.array([0, 1]), np.array([0, 1]), np.array([5])], np.array([0, 1]))) == 2


def test_assumption_5_1_over_time_by_hand():
    table = assumption51_over_time(_iterations(0.6))
    # on all of U: d(0, 1) = 1.2, seed 0's member 1 at 1.2 and client 2 alone: 1.2 / 0.6 = 2 for both
    assert table.index.tolist() == [1] and table.loc[1, "clusters"] == 2
    assert table.loc[1, "max seed radius / B₀"] == pytest.approx(2.0) and table.loc[1, "max diameter / B₀"] == pytest.approx(2.0)
    assert assumption51_over_time(_iterations(0.0)).loc[1, "max diameter / B₀"] == 0.0  # B0 = 0: no ratio


def test_cosmos_iterations_record_every_round():
    ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    public, rest, _ = make_public_set(ds, 0.2, seed=0)
    fed = make_federation(rest, n_clients=4, partition="dirichlet", alpha=0.5, min_size=8, global_test_per_class=5, seed=0)
    adam = TrainConfig(epochs=1, batch_size=16, optimizer="adam", lr=1e-2)
    model = lambda: build_model("mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,))  # noqa: E731
    method = COSMOS(public=public, server_model=model, server_train=adam, pretrain=adam, train=adam, distill=adam,
                    target_clusters=2, seed=0)
    its = cosmos_iterations(method, fed, model, 2, 0)
    assert [it["t"] for it in its] == [1, 2] and [it["history"]["round"] for it in its] == [1, 2]
    for it in its:
        assert sorted(it["groups"]) == [0, 1, 2, 3] and len(set(it["groups"].values())) <= 2
        assert all(v.dtype == F64 and v.shape == (len(public), 3) for v in it["labels"].values())


# ---- the consistency gradient ----------------------------------------------------------------------

def test_the_gradient_checks_hold_and_catch_an_objective_that_ignores_the_detach():
    r = consistency_gradient_checks(numpy_rng(0, 341), 0, 3)
    assert r["clean_grad_is_none"] and max(r["err_logits"], r["err_none"], r["err_params_nd"], r["err_params_d"],
                                           r["err_objective"]) < 1e-12
    assert min(r["rel_diff"]) > 0 and len(r["cosines"]) == len(r["clean_share"]) == 3
    true_objective = cc.distillation_objective
    ignored = lambda *a, detach_target, **k: true_objective(*a, detach_target=False, **k)  # noqa: E731
    assert consistency_gradient_checks(numpy_rng(0, 341), 0, 3, objective=ignored)["err_objective"] > 1e-6


def test_the_symbolic_check_holds_on_fedlibs_loss_and_fails_on_a_swapped_kl():
    r = cc.symbolic_gradient_checks(numpy_rng(0, 340), 4)
    assert r["formula_ok"] and r["err"] < 1e-12
    swapped = lambda z_aug, z, detach_target=False: kl_rows(torch.softmax(z_aug, 1), z)  # KL(q ‖ p): the mutation  # noqa: E731
    assert cc.symbolic_gradient_checks(numpy_rng(0, 340), 4, loss=swapped)["err"] > 1e-3
    from fedbook.checks import CheckTable
    checks = CheckTable()
    numbers = cc.symbolic_gradient_section(checks, numpy_rng(0, 340), 2)
    assert len(checks) == 1 and checks.n_fail == 0 and numbers["sg_trials"] == 2 and numbers["sg_err"] < 1e-12


def test_the_logit_gradient_rows_fail_on_a_swapped_kl_and_on_a_detach_ignored():
    swapped = lambda z_aug, z, detach_target=False: kl_rows(torch.softmax(z_aug, 1), z)  # noqa: E731
    assert consistency_gradient_checks(numpy_rng(0, 341), 0, 2, loss=swapped)["err_logits"] > 1e-3
    ignored = lambda z_aug, z, detach_target=False: consistency_loss(z_aug, z)  # noqa: E731
    assert not consistency_gradient_checks(numpy_rng(0, 341), 0, 2, loss=ignored)["clean_grad_is_none"]


# ---- the synthetic federation --------------------------------------------------------------------

def test_the_circle_by_hand():
    circle = Circle(n_classes=4, radius=2.0)
    np.testing.assert_allclose(circle.means, [[2, 0], [0, 2], [-2, 0], [0, -2]], atol=1e-15)
    x, y = circle.draw(np.random.default_rng(0), np.array([0.5, 0.5, 0.0, 0.0]), 400)
    assert x.shape == (400, 2) and set(np.unique(y)) == {0, 1}
    # the log densities are N(x; μ_y, I)'s up to one constant, -log(2π)
    ref = np.stack([multivariate_normal(mean=m).logpdf(x) for m in circle.means], axis=1)
    np.testing.assert_allclose(ref - circle.log_density(x), -math.log(2 * math.pi), atol=1e-12)
    with pytest.raises(ValueError, match="n_classes must be an int >= 2, got 1"):
        Circle(n_classes=1)


def test_linear_from_loads_the_weights_without_touching_the_global_random_state():
    source = Linear(2, 3)
    before = torch.random.get_rng_state()
    model = linear_from(source.state_dict(), 2, 3)
    assert torch.equal(torch.random.get_rng_state(), before) and not model.training
    assert torch.equal(model.head.weight, source.head.weight) and torch.equal(model.head.bias, source.head.bias)


def test_error_rate_and_fitted_ratio_by_hand():
    assert error_rate(lambda z: torch.cat([z, -z], 1), np.array([[1.0], [-2.0], [3.0], [-4.0]]), np.array([0, 0, 0, 1])) == 0.25
    assert fitted_ratio([0.9 * 0.7**t for t in range(5)]) == pytest.approx(0.7, rel=1e-12)
    assert fitted_ratio([0.5]) is None and fitted_ratio([0.5, -0.1]) is None and fitted_ratio([0.5, 0.0]) is None


def _run(frame: pd.DataFrame, w_exact=(2.0, 1.5), w_mc=(1.5, 1.2)) -> SyntheticRun:
    return SyntheticRun(frame=frame, bayes=0.1, local=0.3, prior=np.full((2, 4), 0.25), public=PublicSet(torch.zeros(3, 2)),
                        w_exact=w_exact, w_mc=w_mc, hessian_points=[])


def test_the_theory_table_by_hand():
    frame = pd.DataFrame({"t": [1, 2, 3], "R†(h)": [0.5, 0.3, 0.2], "mean R(f_i^(t,1))": [0.4, 0.3, 0.3],
                          "b̄ on Q": [0.2, 0.1, 0.1], "b̄ on D_i": [0.25, 0.1, 0.05]}).set_index("t")
    row = theory_table({"s": _run(frame)}).loc["s"]
    assert row["b̄"] == 0.25 and row["b̄ ≤ 1/3 (Ass. 5.8)"] and row["1/b̄ > 2w1w2 + 1"] == (4 > 2 * 3 + 1)
    assert row["κ2 ≥"] == pytest.approx(4 * 3.0 / 3**2) and row["κ2 ≥ (Monte Carlo w)"] == pytest.approx(4 * 1.8 / 9)
    assert row["fitted ratio of R† − Bayes"] == pytest.approx(fitted_ratio([0.4, 0.2, 0.1]))
    assert (row["R† first"], row["R† last"], row["Bayes risk"], row["local only"]) == (0.5, 0.2, 0.1, 0.3)
    assert "fitted ratio without the teacher" not in row
    control = _run(frame.assign(**{"R†(h)": [0.5, 0.4, 0.3]}))
    both = theory_table({"s": _run(frame)}, {"s": control}).loc["s"]
    assert both["fitted ratio without the teacher"] == pytest.approx(fitted_ratio([0.4, 0.3, 0.2]))
    perfect = theory_table({"s": _run(frame.assign(**{"b̄ on Q": 0.0, "b̄ on D_i": 0.0}))}).loc["s"]
    assert perfect["κ2 ≥"] == math.inf and perfect["1/b̄ > 2w1w2 + 1"]


def test_the_client_objective_is_the_distillation_objective_and_flat_along_the_logit_shifts():
    g = torch.Generator().manual_seed(0)
    C, D, n = 3, 2, 7
    x, x_aug = torch.randn(n, D, generator=g, dtype=F64), torch.randn(n, D, generator=g, dtype=F64)
    target = torch.softmax(torch.randn(n, C, generator=g, dtype=F64), 1)
    theta = torch.randn(C * (D + 1), generator=g, dtype=F64)
    W, b = theta[:C * D].reshape(C, D), theta[C * D:]
    ref = (kl_rows(target, x @ W.T + b) + 1.5 * consistency_loss(x_aug @ W.T + b, x @ W.T + b)).mean()
    assert float(client_objective(theta, x, x_aug, target, 1.5, C, D)) == pytest.approx(float(ref), rel=1e-14)
    S = shift_basis(C, D)
    assert S.shape == (C * (D + 1), D + 1) and torch.allclose(S.T @ S, torch.eye(D + 1, dtype=F64), atol=1e-14)
    for v in torch.randn(5, D + 1, generator=g, dtype=F64):
        shifted = client_objective(theta + S @ v * 3, x, x_aug, target, 1.5, C, D)
        assert float(shifted) == pytest.approx(float(client_objective(theta, x, x_aug, target, 1.5, C, D)), abs=1e-12)


def test_the_hessian_checks_on_hand_made_points():
    circle = Circle()
    g = torch.Generator().manual_seed(1)
    public = PublicSet(torch.randn(30, 2, generator=g))
    points = [(Linear(2, 4), torch.softmax(torch.randn(30, 4, generator=g, dtype=F64), 1)) for _ in range(2)]
    run = SyntheticRun(frame=pd.DataFrame(), bayes=0.0, local=0.0, prior=np.zeros((2, 4)), public=public,
                       w_exact=(1.0, 1.0), w_mc=(1.0, 1.0), hessian_points=points)
    h = hessian_checks({"s": run}, seed=0, hessian_points=3, circle=circle)
    assert (h["n_params"], h["shift_dims"]) == (12, 3) and h["flat_err"] < 1e-10
    assert h["table"]["points"].tolist() == [2, 3, 3, 3]
    assert h["table"].index.tolist() == [("s: final client parameters", 0.1), ("random parameters", 0.1),
                                         ("random parameters", 1.0), ("random parameters", 3.0)]
    assert math.isfinite(h["final_min"]) and math.isfinite(h["small_min"]) and 0 <= h["large_neg"] <= 1


def test_synthetic_run_does_not_depend_on_torchs_global_random_state():
    """Local training alone draws its initial weights from the run's seed, not from torch's global generator."""
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        runs.append(synthetic_run("mild skew", seed=0, n_clients=3, n_eval=200, local_epochs=1, rounds=1))
    a, b = runs
    assert a.local == b.local and a.frame.equals(b.frame) and a.bayes == b.bayes
    assert a.w_exact == (float(4 * a.prior.max(axis=1).max()), float(1 / (4 * a.prior.min(axis=1).min())))
    assert len(a.hessian_points) == 3 and a.frame.index.tolist() == [1]
    with pytest.raises(ValueError, match="unknown setting 'wild'; valid: mild skew, label groups"):
        synthetic_run("wild", seed=0, n_clients=3, n_eval=10, local_epochs=1, rounds=1)


def test_a_risk_only_run_measures_the_same_risks_and_nothing_else():
    """``risk_only`` (the contraction check's controls and further seeds) runs the same federation:
    R† and the Bayes risk equal the full run's bit for bit, the other measurements are NaN; and a
    full run's b̄ on D_i is at least every cluster model's error there (R† is their mean)."""
    kw = dict(seed=0, n_clients=3, n_eval=200, local_epochs=1, rounds=2, teacher=False, local_only=False)
    full, risk = synthetic_run("mild skew", **kw), synthetic_run("mild skew", risk_only=True, **kw)
    pd.testing.assert_series_equal(full.frame["R†(h)"], risk.frame["R†(h)"], check_exact=True)
    assert risk.bayes == full.bayes and risk.prior.tolist() == full.prior.tolist() and risk.w_exact == full.w_exact
    assert risk.frame.drop(columns="R†(h)").isna().all().all() and not full.frame.isna().any().any()
    assert all(math.isnan(w) for w in risk.w_mc) and risk.hessian_points == [] and len(full.hessian_points) == 3
    assert (full.frame["b̄ on D_i"] >= full.frame["R†(h)"]).all()


def _contraction_check(**kw) -> tuple[float, float]:
    """The chapter's contraction check: COSMOS's fitted ratio of R† − Bayes, and the control's (the teacher never sent back)."""
    runs = {t: synthetic_run("mild skew", seed=0, n_clients=4, n_eval=4000, local_epochs=5, rounds=4, teacher=t, **kw)
            for t in (True, False)}
    table = theory_table({"s": runs[True]}, {"s": runs[False]}).loc["s"]
    return table["fitted ratio of R† − Bayes"], table["fitted ratio without the teacher"]


def test_the_contraction_check_compares_with_the_control_and_fails_when_the_teacher_is_disabled(monkeypatch):
    """The live check of the derivations chapter (COSMOS contracts faster than the control) holds on
    a small mild-skew federation, and fails on the mutation that disables COSMOS's teacher: the run
    is then the control's, bit for bit, so its ratio is not below the control's."""
    ratio, control = _contraction_check()
    assert ratio < control
    from fedlib.algorithms.cosmos import COSMOS
    from fedbook.studies.cosmos_synthetic import WithoutTeacher
    monkeypatch.setattr(COSMOS, "configure_train", WithoutTeacher.configure_train)
    ratio, control = _contraction_check()
    assert not ratio < control and ratio == control
    from fedbook.studies.cosmos_synthetic import contraction_verdict
    assert contraction_verdict([ratio, ratio], [control, control])[1] == "inconclusive"  # equal on every seed: not decided


def test_the_contraction_verdict_reads_the_interval_over_seeds():
    from fedbook.studies.cosmos_synthetic import contraction_verdict
    from fedbook.intervals import paired_interval
    iv, verdict, n = contraction_verdict([0.5, 0.6, 0.55, 0.52, 0.58], [0.9, 0.95, 0.92, 0.91, 0.9])
    assert (verdict, n) == ("holds", 5) and iv.high < 0
    assert iv.format(4) == paired_interval([0.5, 0.6, 0.55, 0.52, 0.58], [0.9, 0.95, 0.92, 0.91, 0.9]).format(4)
    assert contraction_verdict([0.9, 0.95, 0.92], [0.5, 0.6, 0.55])[1] == "opposite"
    assert contraction_verdict([0.5, 0.9, 0.7], [0.6, 0.8, 0.7])[1] == "inconclusive"
    assert contraction_verdict([0.5, None, 0.6], [0.9, 0.9, None]) == (None, "inconclusive", 1)


# ---- the chapter's sections: the rows they record and the numbers they return ---------------------

def test_the_random_instance_sections_record_their_rows_and_return_what_the_checks_measured():
    from fedbook.checks import CheckTable

    checks = CheckTable()
    numbers, table = cc.algorithm1_section(checks, numpy_rng(0, 301), 15)
    A1 = algorithm1_checks(numpy_rng(0, 301), 15)  # the same stream: the same instances
    assert len(checks) == 3 and checks.n_fail == 0 and "random instances" in table.to_html()
    assert (numbers["s1_trials"], numbers["s1_clusters"], numbers["s1_over"]) == (15, A1["n_clusters"], A1["over_b0"])
    assert numbers["s1_rule"] == "matches Algorithm 1 replayed step by step on every instance"
    assert numbers["s1_inst_over_pct"] == 100 * A1["inst_over_b0"] / 15
    numbers = cc.b0_search_section(checks, numpy_rng(0, 302), 4, 60)
    assert len(checks) == 6 and numbers["s1_grid"] == 60 and numbers["s1_over_max"] <= 1 + 1e-12
    numbers = cc.monotonicity_section(checks, numpy_rng(0, 303), 30)
    found, example = monotonicity_search(numpy_rng(0, 303), 30)
    assert len(checks) == 7 and numbers["s1_mono_found"] == found
    assert numbers["s1_mono_sentence"].startswith(f"One is found in {found} of 30" if found else "No increase is found")
    numbers = cc.lemma52_section(checks, numpy_rng(0, 311), 40)
    assert len(checks) == 12 and numbers["lm_reading"].startswith("the lemma holds on every one")
    assert numbers["lm_trials"] == len(lemma52_random_checks(numpy_rng(0, 311), 40)["slack"])
    numbers = cc.consistency_gradient_section(checks, numpy_rng(0, 341), 0, 2)
    assert len(checks) == 16 and numbers["cg_trials"] == 2 and numbers["cg_err_logits"] < 1e-12
    assert numbers["cg_none"].startswith("no gradient at all") and checks.n_fail == 0


def test_the_real_run_section_and_the_exercises_on_a_small_run():
    from fedbook.checks import CheckTable

    runs = cc.real_runs(0, n_clients=5, rounds=2, pretrain_epochs=1, server_epochs=1)
    assert [it["t"] for it in runs.iterations] == [1, 2] and runs.counts.shape == (5, 10) and len(runs.hidden) == runs.n_public
    real = runs.lemma_rows(0.1)
    checks = CheckTable()
    numbers, tables = cc.real_run_section(checks, runs, real, support_share=0.1)
    assert len(checks) == 4 and list(tables) == ["summary", "per client", "over time"]  # two rounds: the later one re-measured
    assert (numbers["rr_n"], numbers["rr_rounds"], numbers["rr_clients"], numbers["rr_public"]) == (len(real), 2, 5, runs.n_public)
    assert numbers["rr_holds_pct"] == 100.0 and numbers["rr_later_sentence"].startswith("In the later rounds")
    ex = cc.exercise_numbers(runs, real, numpy_rng(0, 351), support_share=0.1, mono_trials=10)
    assert ex["ex1_shares"] == "0.02, 0.1, 0.3" and ex["ex3_trials"] == 20 and ex["ex2_lemma"] == float(real["2B/(γ|U_i|)"].median())
    assert str(ex["ex1_table"]).startswith("support share median |U_i|") and str(ex["ex3_table"]).startswith("instances non-monotone")


def test_the_synthetic_sections_record_their_rows_and_draw_one_panel_per_setting():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from fedbook.checks import CheckTable
    from fedbook.studies.cosmos_synthetic import hessian_section, plot_risks, synthetic_section

    runs = {t: synthetic_run("mild skew", seed=0, n_clients=3, n_eval=200, local_epochs=1, rounds=2, teacher=t) for t in (True, False)}
    checks = CheckTable()
    circle = Circle()
    more = {1: tuple({"mild skew": synthetic_run("mild skew", seed=1, n_clients=3, n_eval=200, local_epochs=1, rounds=2, teacher=t,
                                                 local_only=False)} for t in (True, False))}
    assert math.isnan(more[1][0]["mild skew"].local)
    numbers, table = synthetic_section(checks, {"mild skew": runs[True]}, {"mild skew": runs[False]}, circle=circle, n_clients=3,
                                       rounds=2, n_eval=200, more_seeds=more)
    assert len(checks) == 3 and numbers["sy_rounds"] == 2 and numbers["sy_n_eval"] == "200" and numbers["sy_seeds"] == 2
    assert numbers["sy_contraction_sentence"].startswith("*mild skew*: over 2 seeds")
    assert checks.rows[1]["how checked"].endswith("2 seeds, 95 % interval below 0")
    # the third row tests κ2: its measured lower bound against 1, the row failing where the bound leaves no contraction
    from fedbook.studies.cosmos_synthetic import kappa2_can_contract, theory_table
    k2 = float(theory_table({"mild skew": runs[True]}, {"mild skew": runs[False]})["κ2 ≥"].iloc[0])
    assert checks.rows[2]["statement"].startswith("mild skew: κ2's measured lower bound")
    assert (checks.rows[2]["verdict"] == "holds") == kappa2_can_contract(k2)
    assert kappa2_can_contract(0.5) and not kappa2_can_contract(1.5) and not kappa2_can_contract(float("nan"))
    assert numbers["sy_lam_c"] == circle.lam / (2 - circle.lam) and numbers["sy_sentences"].startswith("*mild skew*: w1 = ")
    assert numbers["sy_groups_sentence"] == "(The label-group federation runs at the book and paper profiles.)"
    numbers, table = hessian_section(checks, {"mild skew": runs[True]}, seed=0, hessian_points=2, circle=circle)
    assert len(checks) == 6 and numbers["sy_h_points"] == 2 and numbers["sy_shift_dims"] == circle.dim + 1
    fig = plot_risks({"a": runs[True], "b": runs[False]})
    assert [ax.get_title() for ax in fig.axes] == ["a", "b"]
    plt.close(fig)
