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
    table = alpha_risk_table(0, 6, 4000, n_samples=(1, 20, 1000), biases=(0.0, 1.0))
    ratios = alpha_risk_checks(checks, table)
    biased = table[table["bias tau"] > 0]
    assert ratios == {"alpha_worst_ratio": biased["adaptive / best"].max(),
                      "alpha_large_n_ratio": biased.loc[biased["N"] >= 20, "adaptive / best"].max()}
    drift = known_drift_table(0, 4, 8)
    errors = drift_checks(checks, drift)
    assert errors["lite_rot"] == drift.loc["rotation", "MPT-lite"] and errors["noproj_axis"] < 1e-8
    frame = checks.frame()
    assert len(checks) == 17 and checks.n_fail == 0, frame[frame["verdict"] != "holds"]
    assert frame["statement"].iloc[0] == "KKT solution of Eq. (1) equals the closed form"
    assert frame["statement"].iloc[7].startswith("P_perp is an orthogonal projector")
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
    assert verdicts[5] == "FAILS" and verdicts.count("FAILS") == 3
