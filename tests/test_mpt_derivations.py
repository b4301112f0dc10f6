"""The MPT derivations chapter's checks (fedbook.studies.mpt_derivations): its random instances, each
check passing on fedlib.tracking and failing on a wrong implementation, and the rows each records
in the chapter's check table."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedbook.checks import CheckTable
from fedbook.studies import mpt_derivations as mpt_checks
from fedbook.studies.mpt_derivations import (
    ALPHA_RISK_COLUMNS,
    ALPHA_RISK_DIGITS,
    DRIFTS,
    RECONSTRUCTIONS,
    alpha_risk_checks,
    alpha_risk_table,
    alpha_star_checks,
    barycentric_against_slsqp,
    barycentric_check,
    drift_checks,
    kkt_check,
    known_drift_table,
    measurement_limit,
    measurement_limit_check,
    projector_check,
    projector_errors,
    random_normal,
    random_spd,
    residual_check,
    residual_off_span,
    transport_checks,
    transport_map_against_scipy,
)
from fedlib.rng import torch_generator

F = torch.float64


def test_random_instances_are_named_streams():
    x = random_normal(3, (2, 5), 1, 4)
    assert torch.equal(x, torch.randn(2, 5, generator=torch_generator(3, 1, 4), dtype=F))
    assert not torch.equal(x, random_normal(3, (2, 5), 1, 5)) and not torch.equal(x, random_normal(4, (2, 5), 1, 4))
    A = random_normal(3, (6, 6), 2)
    assert torch.equal(random_spd(3, 6, 2), A @ A.T / 6 + 0.05 * torch.eye(6, dtype=F))


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 8))
def test_random_spd_is_symmetric_positive_definite(seed, d):
    S = random_spd(seed, d, 1)
    assert torch.allclose(S, S.T, rtol=0, atol=1e-12) and float(torch.linalg.eigvalsh(S).min()) >= 0.05 - 1e-12


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 10_000))
def test_every_check_holds_on_fedlib_tracking(seed):
    excess, off_one = barycentric_against_slsqp(seed, 4, 3, 5)
    assert excess <= 1e-8 and off_one < 1e-9
    affine, linear = residual_off_span(seed, 4, 3, 6)
    assert affine < 1e-8 and linear > 0
    T = transport_map_against_scipy(seed, 3, 4)
    assert T["asymmetry"] < 1e-10 and T["min_eigenvalue"] > 0 and T["pushforward"] < 1e-8
    assert T["scipy"] < 1e-6 and T["w2_gap"] < 1e-6 and T["n_cheaper"] == 0
    assert projector_errors(seed, 5, 3, 6) < 1e-9


def test_each_check_fails_on_a_wrong_implementation(monkeypatch):
    uniform = lambda mu, M, lam: torch.full((M.shape[0],), 1 / M.shape[0], dtype=F)  # noqa: E731
    monkeypatch.setattr(mpt_checks, "barycentric_weights", uniform)
    assert barycentric_against_slsqp(0, 4, 3, 5)[0] > 1e-3
    monkeypatch.setattr(mpt_checks, "barycentric_decomposition", lambda mu, M, lam: (None, mu))  # r0 = mu
    assert residual_off_span(0, 4, 3, 6)[0] > 1e-3
    monkeypatch.setattr(mpt_checks, "transport_map", lambda Sd, St: torch.eye(Sd.shape[0], dtype=F))
    T = transport_map_against_scipy(0, 3, 4)
    assert T["pushforward"] > 1e-3 and T["scipy"] > 1e-3
    monkeypatch.setattr(mpt_checks, "span_projector", lambda M, span: torch.eye(M.shape[1], dtype=F))
    assert projector_errors(0, 5, 3, 6) > 1e-3


def test_alpha_risk_table_hand_checked_cells():
    t = alpha_risk_table(0, 6, 4000, n_samples=(1, 1000), biases=(0.0, 1.0))
    assert list(t[["N", "bias tau"]].itertuples(index=False, name=None)) == [(1, 0.0), (1, 1.0), (1000, 0.0), (1000, 1.0)]
    assert len(t) == 4 and (t["predicted"][t["bias tau"] == 0.0] == 0).all()  # no bias: the prediction is exact
    # one sample: the measured residual's error is the noise, about 1 per coordinate
    assert t.loc[1, "measured"] == pytest.approx(1.0, rel=0.5)
    assert (t["adaptive / best"] == t["adaptive"] / t[["measured", "predicted"]].min(axis=1).clip(lower=1e-12)).all()
    assert t.loc[3, "adaptive / best"] <= 1.1  # many samples: the blend follows the measurement
    with pytest.raises(ValueError, match="mc"):
        alpha_risk_table(0, 6, 0)


def test_alpha_risk_table_sees_a_wrong_weight(monkeypatch):
    monkeypatch.setattr(mpt_checks, "adaptive_alpha", lambda r_ho, r_pred, s2, n: 1.0)  # always the measurement
    t = alpha_risk_table(0, 6, 4000, n_samples=(1,), biases=(0.0,))
    assert t.loc[0, "adaptive"] == t.loc[0, "measured"] and t.loc[0, "adaptive / best"] > 1e6


def test_known_drift_table_exact_and_blind_cells():
    t = known_drift_table(0, 4, 8)
    assert list(t.index) == list(DRIFTS) and list(t.columns) == list(RECONSTRUCTIONS)
    exact = t.loc[["translation", "isotropic scaling x1.5"], ["MPT-lite", "MPT (prediction)"]].to_numpy()
    assert exact.max() < 1e-8
    assert t.loc["translation", "bary + stored residual"] < 1e-8  # the stored residual moves with a translation
    assert t.loc["axis-aligned scaling", "MPT without the projector"] < 1e-8  # then T = A
    assert t.loc["rotation", "MPT-lite"] > 1e-3 and t.loc["translation", "frozen"] > 1e-3
    stay = t.loc["remaining classes only (rare offset stays)"]
    assert stay["bary + stored residual"] < 1e-8 and stay["MPT without the projector"] > 1e-3
    with pytest.raises(ValueError, match="dim"):
        known_drift_table(0, 4, 0)


# ----------------------------------------------------------------- the rows of the chapter's check table
def test_every_check_records_its_rows_in_the_chapters_order_and_holds():
    checks = CheckTable()
    assert kkt_check(checks) == [0, 0, 0]
    assert barycentric_check(checks, 0, 3, 3, 5)["bary_worst_obj"] == barycentric_against_slsqp(0, 3, 3, 5)[0]
    assert residual_check(checks, 0, 3, 3, 6)["orth_linear_loss"] == residual_off_span(0, 3, 3, 6)[1]
    assert transport_checks(checks, 0, 2, 4) == transport_map_against_scipy(0, 2, 4)
    assert projector_check(checks, 0, 5, 3, 6) == projector_errors(0, 5, 3, 6)
    alpha = alpha_star_checks(checks)
    assert str(alpha["alpha*"]) == "N*tau2/(N*tau2 + sigma2)" and (alpha["N -> oo"], alpha["tau2 -> 0"]) == (1, 0)
    assert measurement_limit_check(checks, 0, 3, 4, 8) == dict(zip(("limit_err", "limit_gap"), measurement_limit(0, 3, 4, 8)))
    table = alpha_risk_table(0, 6, 4000, n_samples=(1, 20, 1000), biases=(0.0, 1.0))
    ratios = alpha_risk_checks(checks, table)
    biased = table[table["bias tau"] > 0]
    assert ratios == {"alpha_worst_ratio": biased["adaptive / best"].max(),
                      "alpha_large_n_ratio": biased.loc[biased["N"] >= 20, "adaptive / best"].max(),
                      "alpha_worst_z": table["z"].abs().max()}
    drift = known_drift_table(0, 4, 8)
    errors = drift_checks(checks, drift)
    assert errors["lite_rot"] == drift.loc["rotation", "MPT-lite"] and errors["noproj_axis"] < 1e-8
    assert errors["noproj_spd"] < 1e-8 and errors["stay_stored"] < 1e-8 and errors["stay_transported"] > 1e-3
    frame = checks.frame()
    assert len(checks) == 17 and checks.n_fail == 0, frame[frame["verdict"] != "holds"]
    assert frame["statement"].iloc[0] == "KKT solution of Eq. (1) equals the closed form"
    assert frame["statement"].iloc[7].startswith(r"$P_\perp$ is an orthogonal projector")
    assert frame["statement"].iloc[9].startswith(r"as $N$ grows ($\alpha \to 1$) MPT tends to")
    assert not frame["statement"].str.contains("never worse than the worse|tracked exactly|alpha -> 1 as N -> oo").any()
    assert frame["statement"].iloc[-1].startswith("Eq. (4)'s projector discards")
    shown = table.rename(columns=ALPHA_RISK_COLUMNS)
    assert set(ALPHA_RISK_DIGITS) <= set(shown.columns) and len(shown.columns) == len(table.columns)


def test_a_wrong_implementation_fails_its_rows(monkeypatch):
    checks = CheckTable()
    monkeypatch.setattr(mpt_checks, "projector_errors", lambda *a: 0.5)
    projector_check(checks, 0, 5, 3, 6)
    monkeypatch.setattr(mpt_checks, "adaptive_alpha", lambda r_ho, r_pred, s2, n: 1.0)  # always the measurement
    alpha_risk_checks(checks, alpha_risk_table(0, 6, 4000, n_samples=(1, 20), biases=(1.0,)))
    drift = known_drift_table(0, 4, 8)
    drift.loc["rotation", "MPT-lite"] = 0.0  # a scalar that followed a rotation: the counterexample is gone
    drift_checks(checks, drift)
    verdicts = checks.frame()["verdict"].tolist()
    assert verdicts[0] == "FAILS" and verdicts[1] == "FAILS"  # the projector; the weight's limits
    assert verdicts[6] == "FAILS" and verdicts.count("FAILS") == 3  # MPT-lite's rotation


# ----------------------------------------------------------------- the replaced checks, each failed by a mutation
def test_moment_identity_fails_when_the_noise_is_not_divided_by_n(monkeypatch):
    table = alpha_risk_table(0, 6, 4000, n_samples=(2, 20, 1000), biases=(0.0, 1.0))
    assert table["z"].abs().max() <= 4  # fedlib's terms: the unclipped estimate is unbiased
    # hand-checked cell: no bias, so tau2 = 0 and the estimate's mean is near 0
    assert table.loc[0, "tau2"] == 0.0 and abs(table.loc[0, "tau2 hat"]) < 0.2
    wrong = lambda r_ho, r_pred, s2, n: (float(((r_ho - r_pred) ** 2).mean()), float(s2))  # noqa: E731  noise not / N
    monkeypatch.setattr(mpt_checks, "discrepancy_terms", wrong)
    checks = CheckTable()
    out = alpha_risk_checks(checks, alpha_risk_table(0, 6, 4000, n_samples=(2, 20, 1000), biases=(0.0, 1.0)))
    assert out["alpha_worst_z"] > 4 and checks.frame()["verdict"].tolist()[-1] == "FAILS"


def test_measurement_limit_fails_when_the_measurement_is_not_projected(monkeypatch):
    import fedlib.tracking as tracking

    err, gap = measurement_limit(0, 4, 4, 8)
    assert err < 1e-8 and gap > 1e-3
    # a measured residual that is not projected off the span: then MPT tends to the samples' mean
    monkeypatch.setattr(tracking, "span_projector", lambda M, span="affine", tol=1e-9: torch.eye(M.shape[1], dtype=F))
    checks = CheckTable()
    out = measurement_limit_check(checks, 0, 4, 4, 8)
    assert out["limit_err"] > 1e-3 and checks.frame()["verdict"].tolist() == ["FAILS"]


def _pushforward_not_ot(cov_d, cov_t):
    """A push-forward of N(0, cov_d) to N(0, cov_t) that is not the optimal-transport map."""
    e, V = torch.linalg.eigh(cov_d)
    f, W = torch.linalg.eigh(cov_t)
    return ((W * f.clamp_min(0).sqrt()) @ W.T) @ ((V / e.sqrt()) @ V.T)


def test_transport_rows_fail_on_a_wrong_map(monkeypatch):
    monkeypatch.setattr(mpt_checks, "transport_map", _pushforward_not_ot)
    t = known_drift_table(0, 4, 8)
    assert t.loc["axis-aligned scaling", "MPT without the projector"] < 1e-8  # commuting: the old row could not see it
    assert t.loc["symmetric positive definite map", "MPT without the projector"] > 1e-3
    checks = CheckTable()
    drift_checks(checks, t)
    assert checks.frame()["verdict"].tolist()[0] == "FAILS"
    # a transport that does nothing: the stored residual again, and the assumption's counterexample is gone
    monkeypatch.setattr(mpt_checks, "transport_map", lambda Sd, St: torch.eye(Sd.shape[0], dtype=F))
    checks = CheckTable()
    drift_checks(checks, known_drift_table(0, 4, 8))
    assert checks.frame()["verdict"].tolist()[:2] == ["FAILS", "FAILS"]


def test_the_moment_identitys_sentence_follows_its_check():
    from fedbook.studies.mpt_derivations import Z_MAX, alpha_bias_text
    assert alpha_bias_text(Z_MAX).startswith("The unclipped estimate agrees with τ² in every cell")  # the boundary passes
    assert "fails" in alpha_bias_text(Z_MAX + 0.01) and "agrees" not in alpha_bias_text(Z_MAX + 0.01)
    assert "(the largest |z| is 2.50)" in alpha_bias_text(2.5)
