"""The check procedures of FedGRC's two derivations chapters (fedbook.studies.fedgrc_derivations): each
passes on correct code, and each fails when the quantity it checks is wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedbook.checks import CheckTable
from fedlib.algorithms import FedAvg
from fedlib.cgrl import magnitude_loss
from fedbook.studies import fedgrc_derivations as fc
from fedlib.heads import MMS, SASP
from fedlib.loop import LoopConfig
from fedlib.protocol import load_model
from fedlib.run import run_federated
from fedlib.stats import feature_moments
from fedlib.training import TrainConfig


def rng(seed=0):
    return np.random.default_rng(seed)


def test_every_check_passes_on_fedlib():
    traces = fc.trace_identities(rng(1), 3, 6)
    assert traces["eq21"] < 1e-10 and traces["eq28"] < 1e-10 and traces["aligned_radial"] < 1e-12
    inv = fc.layer_scaling_invariance(rng(2), 3, 6)
    assert inv["geometry"] < 1e-9 and inv["mms"] < 1e-8 and inv["predictions"] == 0
    prop1 = fc.shift_decomposition(rng(3), 3, 6)
    assert prop1["error"] < 1e-10 and all(0.0 <= s <= 1.0 for s in prop1["between_share"])
    errs = fc.moments_against_centralized(rng(4), 3, 6)
    assert list(errs) == list(fc.MOMENT_QUANTITIES) and max(errs.values()) < 1e-8
    bounds = fc.metric_bounds(rng(5), 4, 6)
    assert bounds["identities"] < 1e-8 and bounds["op_bound"] < 1e-9 and bounds["kappa_bound"] < 1e-9
    assert bounds["tight"] < 1e-8
    opt = fc.sasp_minimizer(rng(6), 2, 4)
    assert opt["optimum"] < 1e-6 and opt["cancel"] < 1e-6 and opt["objective_worse"] == 0 and opt["absent"] == 0.0
    assert opt["eq35_local"] < 1e-10 and opt["eq35_departure"] < 1e-10 and opt["n_classes"] >= 4
    bayes = fc.bayes_equivalence(rng(7), 3, 6)
    assert bayes["scores"] < 1e-10 and bayes["nearest_mean"] == bayes["gaussian"] == 0 and bayes["n_queries"] > 0
    tally = fc.stability_on_random_federations(rng(8), 3, 6)
    assert tally.eq37 < 1e-10 and tally.budget_viol == tally.certified_flipped == tally.pointwise == tally.classwise == 0
    assert tally.min_slack >= 0 and tally.n > 0


def test_the_checks_are_reproducible_from_the_stream():
    assert fc.moments_against_centralized(rng(9), 2, 5) == fc.moments_against_centralized(rng(9), 2, 5)
    assert fc.metric_bounds(rng(9), 2, 5) == fc.metric_bounds(rng(9), 2, 5)


class _ShiftedCovariance(MMS):
    """An MMS whose pooled covariance is off by 1 % (a wrong Eq. (25))."""

    def fit(self, moments, layer_dims=None):
        super().fit(moments, layer_dims)
        self.covariance_ = self.covariance_ * 1.01
        return self


class _NoAdaptation(SASP):
    """A SASP whose scores are the shared head's although its means moved (a wrong Eq. (36))."""

    def fit(self, mms, counts, sums=None):
        super().fit(mms, counts, sums)
        self.coef_, self.intercept_ = mms.coef_, mms.intercept_
        return self


def test_the_checks_fail_on_a_wrong_covariance(monkeypatch):
    monkeypatch.setattr(fc, "MMS", _ShiftedCovariance)
    assert fc.moments_against_centralized(rng(4), 2, 6)["covariance"] > 1e-3
    assert fc.trace_identities(rng(1), 2, 6)["eq28"] > 1e-3
    assert fc.shift_decomposition(rng(3), 2, 6)["error"] > 1e-3


def test_the_checks_fail_on_a_wrong_head(monkeypatch):
    monkeypatch.setattr(fc, "SASP", _NoAdaptation)
    assert fc.bayes_equivalence(rng(7), 3, 6)["scores"] > 1e-3
    assert fc.stability_on_random_federations(rng(8), 3, 6).eq37 > 1e-3


def test_the_pairs_check_fails_on_a_wrong_trace(monkeypatch):
    monkeypatch.setattr(fc, "trace_from_pairs", lambda h: (1.0, 1.0, 0.0))
    assert fc.trace_identities(rng(1), 2, 6)["eq21"] > 1e-3


def test_centralized_mms_by_hand_and_with_an_absent_class():
    # layer 1: (0, 2, 0, 2) has variance 1, layer 2: (0, 0, 4, 4) variance 4, so s = (1, 2)
    h = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [2.0, 4.0]])
    scales, z, mu, sigma = fc.centralized_mms(h, np.array([0, 0, 2, 2]), 3, [1, 1])
    assert scales.tolist() == [1.0, 2.0]
    assert z.tolist() == [[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]]
    assert mu.tolist() == [[1.0, 0.0], [0.0, 0.0], [1.0, 2.0]]  # class 1 has no sample: a zero row
    assert sigma.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="add up to 3"):
        fc.centralized_mms(h, np.array([0, 0, 2, 2]), 3, [1, 2])
    with pytest.raises(ValueError, match=r"shape \(N,\)"):
        fc.centralized_mms(h, np.array([0, 0]), 3, [1, 1])


@pytest.mark.parametrize("check", [fc.trace_identities, fc.layer_scaling_invariance, fc.shift_decomposition,
                                   fc.moments_against_centralized, fc.metric_bounds, fc.sasp_minimizer,
                                   fc.bayes_equivalence, fc.stability_on_random_federations])
def test_the_checks_refuse_bad_sizes(check):
    with pytest.raises(ValueError, match="trials"):
        check(rng(), 0, 4)
    with pytest.raises(ValueError, match="dim"):
        check(rng(), 2, 0)


def test_stability_by_client_on_a_trained_model(tiny_federation, tiny_model_fn):
    fed, model_fn = tiny_federation, tiny_model_fn
    run = run_federated(FedAvg(train=TrainConfig(epochs=1, batch_size=16, lr=0.05)), fed, model_fn,
                        LoopConfig(rounds=1, seed=0, evaluate_last=False))
    model = load_model(model_fn(), run.server).eval()
    layers = ("fc1", "penultimate")
    dims = [model.feature_dims[name] for name in layers]
    client_moments = [feature_moments(model, c.train.x, c.train.y, 3, layers=layers) for c in fed.clients]
    mms = MMS().fit(client_moments, dims)
    table, tally = fc.stability_by_client(mms, client_moments, fed, model, layers, m0=5.0)
    assert len(table) == 2 * fed.n_clients and set(table["target"]) == {"global (Q)", "local (P_k)"}
    glob = table[table["target"] == "global (Q)"]
    assert (glob["queries"] == len(fed.global_test)).all()
    assert (table["bound"] >= table["error SASP"] - 1e-12).all()  # Eq. (40)'s consequence, per client and target
    assert (table["certified & changed"] == 0).all() and tally.certified_flipped == 0 and tally.budget_viol == 0
    assert tally.n == int(table["queries"].sum())
    # the shared head's error is the MMS head's own error on the global test set
    with torch.no_grad():
        h = torch.cat(list(model.features(fed.global_test.x, layers).values()), dim=1).to(torch.float64)
    err = float((mms.predict(h).numpy() != fed.global_test.labels_np).mean())
    assert glob["error shared"].tolist() == pytest.approx([err] * fed.n_clients)
    with pytest.raises(ValueError, match="one ClassMoments per client"):
        fc.stability_by_client(mms, client_moments[:-1], fed, model, layers)



def test_the_cgrl_checks_pass_on_fedlib():
    ok, residual = fc.radial_angular_symbolic()
    assert ok and residual == 0 and fc.magnitude_lemma_symbolic() == 0
    eq10 = fc.radial_angular_split(rng(1), 3, 6)
    assert eq10["error"] < 1e-12 and eq10["pairs"] == 600 and eq10["unit_zero"] == 0.0
    lemma = fc.magnitude_decomposition(rng(2), 4, 6)
    assert lemma["error"] < 1e-12 and lemma["batches"] == 4 and lemma["zero_p"] >= 0
    grads = fc.gradient_geometry(rng(3), 3, 6)
    assert max(grads["tangent"], grads["second_order"], grads["orthogonal"]) < 1e-10
    assert max(grads["ce"], grads["radial"], grads["parallel"]) < 1e-12 and grads["sign_violations"] == 0
    assert grads["views"] > 0
    cosines = fc.parameter_gradient_cosines(rng(4), 12)
    assert len(cosines) == 3 and np.median(cosines) > 1e-3  # weight space: the terms interact


def test_the_cgrl_checks_fail_on_a_wrong_loss(monkeypatch):
    monkeypatch.setattr(fc, "magnitude_loss", lambda *a: 1.01 * magnitude_loss(*a))
    assert fc.magnitude_decomposition(rng(2), 4, 6)["error"] > 1e-4
    assert fc.gradient_geometry(rng(3), 2, 6)["radial"] > 1e-3
    monkeypatch.setattr(fc, "unit", lambda h: h)  # no normalization: the split of Eq. (10) needs unit directions
    assert fc.radial_angular_split(rng(1), 2, 6)["error"] > 1e-3


def test_a_section_records_its_rows_and_the_numbers_of_its_prose():
    checks = CheckTable()
    numbers = fc.record_eq10(checks, fc.radial_angular_symbolic(), fc.radial_angular_split(rng(1), 2, 4))
    assert len(checks) == 3 and checks.n_fail == 0 and set(numbers) == {"fgd_eq10_err", "fgd_eq10_pairs"}
    numbers = fc.record_traces(checks, fc.trace_identities(rng(1), 2, 4), 2)
    assert len(checks) == 6 and set(numbers) == {"fgd_eq21_err", "fgd_eq28_err"}
    numbers = fc.record_moments(checks, {"scales": 2e-8, "means": 1e-12}, 2)
    assert len(checks) == 8 and checks.n_fail == 1 and numbers == {"fgd_ae_worst": 2e-8}  # 2e-8 > 1e-8: a failing row
    assert fc.record_table(checks, 2, "stats") == {"fgd_stats_n_checks": 8, "fgd_stats_n_fail": 1, "fgd_trials": 2}
    sym = fc.sasp_symbolic()
    assert sym["ok_1d"] and sym["ok_2d"] and sym["metric_free_2d"] and fc.record_sasp_symbolic(checks, sym) == {}
    assert checks.frame()["verdict"].tolist()[-2:] == ["holds", "holds"]
    assert fc.support_increases(m0=10.0) == 0 and fc.support_increases(m0=0.5, n_max=3) == 0


def test_the_trained_cnn_check_on_a_small_federation():
    cnn = fc.trained_cnn_stability(0, 600, 3, 0.3, 20, 1)
    table, tally = cnn["table"], cnn["tally"]
    assert len(table) == 2 * cnn["n_clients"] == 6 and cnn["rounds"] == 1 and cnn["dim"] > 0
    assert tally.certified_flipped == tally.budget_viol == 0 and tally.n == int(table["queries"].sum())
    checks = CheckTable()
    numbers = fc.record_trained_cnn(checks, cnn)
    assert len(checks) == 7 and checks.n_fail == 0 and numbers["fgd_cnn_clients"] == 3 and numbers["fgd_cnn_dim"] == cnn["dim"]
    assert numbers["fgd_cnn_changed"] == int(table["changed"].sum())
    assert [t.caption for t in fc.stability_tables(table)] == ["On the global test set (R = Q)",
                                                                "On each client's local test split (R = P_k)"]


def test_scatter_descent_passes_and_its_mutation_fails():
    """Descent on the directional loss lowers the within-class share of the directions on every
    instance (the check holds); stepping up the loss (the mutation) leaves counterexamples."""
    from fedbook.checks import CheckTable
    from fedbook.studies.fedgrc_derivations import record_scatter, scatter_descent

    down = scatter_descent(np.random.default_rng(5), 12, steps=10)
    up = scatter_descent(np.random.default_rng(5), 12, steps=10, ascent=True)
    assert len(down) == 3 and (down < 0).all()
    ok, bad = CheckTable(), CheckTable()
    numbers = record_scatter(ok, down, steps=10)
    record_scatter(bad, up, steps=10)
    assert ok.n_fail == 0 and bad.n_fail == 1
    assert numbers["fgd_scatter_instances"] == 3 and numbers["fgd_scatter_median"] < 0
    # every instance fell: the largest change is the smallest fall, worded as one (not "the largest change")
    assert numbers["fgd_scatter_extreme"] == f"every instance lowered it, the least by {-numbers['fgd_scatter_worst']:.1f} points"
    assert record_scatter(CheckTable(), up, steps=10)["fgd_scatter_extreme"].startswith("the largest rise +")
