"""The check procedures of the chapter ``hdcfl_derivations`` (fedbook.studies.hdcfl_derivations): each
gives the verdicts the chapter reports on the library, and each can fail on a wrong library."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr

import fedbook.studies.hdcfl_derivations as hc
from fedlib.algorithms.fedrep import FedAvgSE
from fedlib.algorithms.hdcfl import refresh
from fedlib.clustering import head_descriptors, soft_membership
from fedbook.checks import CheckTable
from fedbook.studies.hdcfl_derivations import (PLANTED_FAMILIES, PlantedHeads, arrays_kept, descriptor_invariance, descriptor_section,
                                          descriptors_in_basis, drift_section, head_compatibility_rho, identity_section, local_drift,
                                          membership_limits, membership_section, one_group_identity, planted_grouping,
                                          planted_section, planted_summary, random_orthogonal, refresh_invariants,
                                          refresh_section, snapshot, two_group_membership)
from fedlib.loop import LoopConfig
from fedlib.messages import State
from fedlib.run import run_federated
from fedlib.training import TrainConfig


def test_snapshots_by_hand():
    state = State({"cache/0/w": torch.ones(2), "model/w": torch.zeros(2)})
    before = snapshot(state)
    state.arrays["model/w"] += 1  # a change in place: the snapshot is a copy
    assert arrays_kept(before, state, "cache/") and not arrays_kept(before, state, "model/")
    assert not arrays_kept(before, State({**state.arrays, "cache/1/w": torch.ones(1)}), "cache/")  # a new name
    assert not arrays_kept(before, State({**state.arrays, "cache/0/w": torch.ones(2, dtype=torch.float64)}), "cache/")  # a dtype
    nan = State({"w": torch.tensor([float("nan")])})
    assert arrays_kept(snapshot(nan), nan)  # a NaN kept is kept (fedlib.messages.same_arrays)


def test_descriptors_in_a_basis_by_hand_and_a_random_orthogonal_matrix():
    heads = torch.tensor([[[3.0, 0.0], [4.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]]],
                         dtype=torch.float64)  # (2, 3, 2)
    basis = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)  # the first two classes
    assert descriptors_in_basis(heads, basis).tolist() == [[0.6, 0.0, 0.8, 0.0], [0.0, 1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match=r"basis of shape \(C, r\).*basis \(2, 2\)"):
        descriptors_in_basis(heads, torch.eye(2))
    q = random_orthogonal(4, torch.Generator().manual_seed(3))
    assert q.dtype == torch.float64 and torch.allclose(q.T @ q, torch.eye(4, dtype=torch.float64), atol=1e-14)
    assert torch.equal(q, random_orthogonal(4, torch.Generator().manual_seed(3)))
    with pytest.raises(ValueError, match="r must be an int >= 1, got 0"):
        random_orthogonal(0, torch.Generator())


def test_descriptor_invariance_holds_and_fails_on_an_unnormalized_descriptor(monkeypatch):
    errors, moved = descriptor_invariance(4, seed=1)
    assert set(errors) == set(hc.DESCRIPTOR_ERRORS) and max(errors.values()) < 1e-12
    assert moved and min(moved) > 1e-3  # a rotation moves the coordinates, not the Gram matrix
    monkeypatch.setattr(hc, "head_descriptors", lambda heads, rank=8, kind="lowrank": 2 * head_descriptors(heads, rank, kind))
    errors, _ = descriptor_invariance(2, seed=1)
    assert errors["unit"] == pytest.approx(1.0) and errors["formula"] > 0.1
    with pytest.raises(ValueError, match="trials must be an int >= 1, got 0"):
        descriptor_invariance(0, seed=1)


def test_the_descriptor_formula_check_finds_a_basis_that_is_not_the_top_singular_subspace(monkeypatch):
    # the library's descriptors in a random r-dimensional basis: unit-norm and basis-invariant, but not the
    # top-r subspace, which the independent eigendecomposition finds
    g = torch.Generator().manual_seed(0)

    def random_basis_descriptors(heads, rank=8, kind="lowrank"):
        q, _ = torch.linalg.qr(torch.randn(heads.shape[1], rank, generator=g, dtype=torch.float64))
        return hc.descriptors_in_basis(heads, q)

    monkeypatch.setattr(hc, "head_descriptors", random_basis_descriptors)
    errors, _ = descriptor_invariance(8, seed=1)
    assert errors["unit"] < 1e-12 and errors["formula"] > 1e-3


def test_membership_limits_hold_and_fail_on_a_wrong_softmax(monkeypatch):
    table, summary = membership_limits(3, [1e-3, 1.0, 1e3], seed=2)
    assert list(table.index) == [1e-3, 1.0, 1e3]
    assert summary["cold_viol"] == summary["hot_viol"] == 0 and summary["simplex_err"] < 1e-12
    assert summary["closed_err"] < 1e-12 and summary["min_entry"] >= 0
    assert table["max |m − hard|"].iloc[0] < table["max |m − hard|"].iloc[-1]  # colder is harder
    assert summary["n_instances"] == 3 and summary["n_rows"] % 3 == 0 and summary["n_rows"] >= 3 * 3 * 3  # n >= 3 rows each
    # a softmax at twice the temperature breaks the cold bound
    monkeypatch.setattr(hc, "soft_membership", lambda x, c, t: soft_membership(x, c, 2 * t))
    _, wrong = membership_limits(3, [1e-2, 0.1], seed=2)
    assert wrong["cold_viol"] > 0
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got 0"):
        membership_limits(3, [0], seed=2)


def test_one_group_identity_on_a_tiny_federation(tiny_federation, tiny_model_fn):
    train = TrainConfig(steps=2, batch_size=16, lr=0.05)
    ident = one_group_identity(tiny_federation, tiny_model_fn, train, 2, seed=0, k_max=3, rank=2)
    n = tiny_federation.n_clients
    assert ident.shared_diff == ident.identity_diff == ident.zero_diff == 0.0
    assert ident.identity_bits == ident.n_clients == n and ident.same_eval
    assert 2 <= ident.k_grouped <= 3 and len(ident.rel_moves) == n and max(ident.rel_moves) > 0
    assert ident.table["bit-equal clients"].tolist()[:4] == ["1 of 1", f"{n} of {n}", f"{n} of {n}", f"{n} of {n}"]
    assert ident.table["max abs difference"].iloc[4] > 0  # λ = 1 on k >= 2 groups moves the encoders
    with pytest.raises(ValueError, match="participation must be a finite number > 0 and <= 1, got 0"):
        one_group_identity(tiny_federation, tiny_model_fn, train, 2, seed=0, participation=0, rank=2)


def test_planted_heads_differ_in_the_family_s_class_directions():
    spec = PlantedHeads(G=3, m=2, C=8, d1=5, common_rank=2, sig_rank=2)
    for family, most in zip(PLANTED_FAMILIES, (2, 8)):
        heads, labels = spec.draw(np.random.default_rng(0), 0.0, family)
        assert heads.shape == (6, 8, 5) and labels.tolist() == [0, 0, 1, 1, 2, 2]
        assert np.array_equal(heads[0], heads[1])  # no noise: a group's heads are equal
        differences = np.concatenate([heads[2] - heads[0], heads[4] - heads[0]], axis=1)  # (C, 2 d1)
        assert np.linalg.matrix_rank(differences) == most
    heads, _ = spec.draw(np.random.default_rng(0), 1.0, PLANTED_FAMILIES[0])
    assert not np.array_equal(heads[0], heads[1])
    with pytest.raises(ValueError, match="sig_rank must be an int <= 8, got 9"):
        PlantedHeads(C=8, common_rank=2, sig_rank=9)
    with pytest.raises(ValueError, match="unknown family 'some'"):
        spec.draw(np.random.default_rng(0), 0.1, "some")


def test_planted_grouping_recovers_separated_groups_and_its_summary_by_hand():
    spec = PlantedHeads(G=2, m=4, C=8, d1=5, common_rank=2, sig_rank=2)
    planted = planted_grouping(spec, [0.05], 2, seed=0, rank=4, k_min=2, k_max=4)
    assert len(planted) == 4 and (planted["ARI lowrank"] == 1.0).all() and (planted["k lowrank"] == 2).all()
    rows = pd.DataFrame({"signal": ["a", "a", "b"], "σ": [0.5, 0.5, 0.5], "silhouette raw": [0.1, 0.3, 0.5],
                         "silhouette lowrank": [0.2, 0.4, 0.6], "k raw": [2, 4, 3], "k lowrank": [2, 2, 3],
                         "ARI raw": [1.0, 0.0, 0.5], "ARI lowrank": [1.0, 0.5, 0.25]})
    table = planted_summary(rows)
    assert table.loc[("a", 0.5)].tolist() == pytest.approx([0.2, 0.3, 3.0, 2.0, 0.5, 0.75, 0.5])
    assert table.loc[("b", 0.5), "min ARI low-rank"] == 0.25


def test_local_drift_is_nothing_for_a_vanishing_step_and_something_for_a_real_one(tiny_federation, tiny_model_fn):
    train = TrainConfig(steps=2, batch_size=16, lr=0.05)
    warm = run_federated(FedAvgSE(train=train), tiny_federation, tiny_model_fn, LoopConfig(rounds=1, seed=0, evaluate_last=False))
    still = local_drift(warm, tiny_federation, tiny_model_fn, TrainConfig(batch_size=16, lr=1e-12), [1], seed=0)
    assert still.index.tolist() == [1]
    assert still.loc[1, "(b) ‖Δθ‖ / ‖θ₀‖"] < 1e-9 and still.loc[1, "(c) feature movement"] < 1e-9
    assert still.loc[1, "(d) same prediction on f₀"] == 1.0
    moving = local_drift(warm, tiny_federation, tiny_model_fn, train, [1, 8], seed=0)
    assert (moving["(b) ‖Δθ‖ / ‖θ₀‖"] > 1e-4).all() and moving["(c) feature movement"].iloc[1] > 0
    assert ((moving["(d) same prediction on f₀"] >= 0) & (moving["(d) same prediction on f₀"] <= 1)).all()
    assert moving["(e) ρ(head cosine, compatibility)"].between(-1, 1).all()


def test_head_compatibility_rho_by_hand_and_the_mutation_that_fails_the_check():
    # four clients: logits[k, l] = h_k(f_l); the relative change of client k's logits with l's encoder is change[k, l]
    change = torch.tensor([[0.0, 0.1, 0.4, 0.8], [0.1, 0.0, 0.3, 0.6], [0.4, 0.3, 0.0, 0.2], [0.8, 0.6, 0.2, 0.0]])
    logits = torch.ones(4, 1, 1)[:, None] + change[:, :, None, None]
    angles = torch.tensor([0.0, 0.2, 0.9, 1.5])  # heads on a circle: the pairwise cosine falls with the angle gap
    heads = torch.stack([torch.stack([torch.cos(a), torch.sin(a)])[None] for a in angles])  # (4, C = 1, 2)
    sim = [math.cos(float(angles[j] - angles[i])) for i in range(4) for j in range(i + 1, 4)]
    compat = [-float(change[i, j]) for i in range(4) for j in range(i + 1, 4)]
    rho = head_compatibility_rho(heads, logits)
    assert rho == pytest.approx(spearmanr(sim, compat).statistic) and rho > 0.8
    # the mutation: heads handed to the wrong clients (a permutation) no longer track the encoders: the sign turns
    assert head_compatibility_rho(heads[[1, 3, 0, 2]], logits) == pytest.approx(-0.6)
    assert math.isnan(head_compatibility_rho(torch.ones(4, 1, 2), logits))  # identical heads: no ranking


def _cached_server(n: int = 6, C: int = 10, d: int = 3) -> State:
    g = torch.Generator().manual_seed(0)
    arrays = {"model/enc.weight": torch.randn(3, 4, generator=g), "model/head.weight": torch.randn(C, d, generator=g),
              "model/head.bias": torch.randn(C, generator=g)}
    for k in range(n):
        arrays[f"cache/{k}/model/enc.weight"] = torch.randn(3, 4, generator=g)
        arrays[f"cache/{k}/head/weight"] = torch.randn(C, d, generator=g)
        arrays[f"cache/{k}/head/bias"] = torch.randn(C, generator=g)
        arrays[f"cache/{k}/n"] = torch.tensor(k + 1)
    return State(arrays=arrays, meta={})


def test_refresh_invariants_hold_and_fail_on_a_refresh_that_writes_into_the_cache(monkeypatch):
    server = _cached_server()
    out = refresh_invariants(server, 4, 3, seed=0)
    assert out["n_cached"] == 6 and len(out["ks"]) == 4 and out["k_viol"] == 0 and out["row_err"] < 1e-12
    assert out["cache_kept"] and out["model_kept"] and out["nothing_written_back"] and out["broadcast_kept"]

    def leaky(state, round_, config, seed):
        fresh = refresh(state, round_, config, seed)
        return State({**fresh.arrays, "cache/0/model/enc.weight": fresh.arrays["cache/0/model/enc.weight"] + 1}, fresh.meta)

    monkeypatch.setattr(hc, "refresh", leaky)
    wrong = refresh_invariants(server, 2, 3, seed=0)
    assert not wrong["cache_kept"] and wrong["model_kept"]
    with pytest.raises(ValueError, match="need at least 10 classes, got 4"):
        refresh_invariants(_cached_server(C=4), 2, 3, seed=0)


# ------------------------------------------------------------------------------------------------
# The chapter's sections: each adds its checks and returns the numbers its prose quotes
# ------------------------------------------------------------------------------------------------


def test_the_descriptor_and_membership_sections_record_their_checks_and_numbers():
    checks = CheckTable()
    table, numbers = descriptor_section(checks, 3, seed=1)
    assert table.index.tolist() == list(hc.DESCRIPTOR_QUANTITIES) and len(checks) == 5 and checks.n_fail == 0
    assert numbers["desc_trials"] == 3 and numbers["desc_reading"] == "every deviation is round-off"
    assert numbers["desc_rot_err"] == table.loc["Gram after rotating the basis within its span", "max abs error"]
    symbolic = two_group_membership(checks)
    assert symbolic["difference"] == 0 and [str(v) for v in symbolic["limits"].values()] == ["1", "0", "1/2"]
    assert len(checks) == 7 and checks.n_fail == 0
    table, numbers = membership_section(checks, 3, [1e-3, 1.0, 1e3], seed=2)
    assert len(checks) == 11 and checks.n_fail == 0 and numbers["memb_bounds"].startswith("Both bounds hold on all")
    assert numbers["memb_cold"] == table["max |m − hard|"].iloc[0] and numbers["memb_t_max"] == 1e3
    # the gap that puts 95 % on the closer of two centroids at the library's temperature: T log(0.95 / 0.05)
    assert numbers["memb_share"] == 95.0 and numbers["memb_gap"] == pytest.approx(numbers["memb_default_t"] * math.log(19))


def test_the_federation_sections_on_a_small_federation():
    fed, model_fn = hc.small_federation(4, 0.3, seed=0)
    assert fed.n_clients == 4 and fed.global_test.x.shape[-1] == 8 and len(fed.global_test) == 200
    train = TrainConfig(steps=2, batch_size=32, lr=0.05)
    checks = CheckTable()
    ident, numbers = identity_section(checks, fed, model_fn, train, 1, seed=0)
    assert numbers["id_bits"] == "4 of 4" and numbers["id_diff"] == numbers["id_zero"] == 0.0
    assert numbers["id_eval"] == "identical" and len(checks) == 4 and checks.n_fail == 0
    assert numbers["id_partial_sentence"].startswith("the one-group prototype differs" if numbers["id_partial"] > 0 else "yet here")
    assert numbers["id_participation"] == 0.5 and numbers["id_partial"] == ident.partial_diff
    feds = [(fed, model_fn), hc.small_federation(4, 0.3, seed=1)]
    table, numbers = drift_section(checks, feds, train, [1, 2], 1, [0, 1], min_reliability=-math.inf)  # always testable
    assert table.index.tolist() == [1, 2] and numbers["ls_steps"] == "1, 2" and numbers["ls_s_short"] == 2
    assert numbers["ls_move_min"] == table["(c) feature movement"].iloc[0] and 0 <= numbers["ls_agree_max"] <= 100
    assert numbers["ls_n_seeds"] == 2 and numbers["ls_rho_short"].endswith("2 seeds")
    assert numbers["ls_rel_short"] == table.loc[2, "(f) reliability of compatibility"] and numbers["ls_folds"] == hc.PROBE_FOLDS
    assert len(checks) == 7 and "untestable" not in checks.frame()["verdict"].tolist()
    # the same runs with a regime the short updates do not reach: both tracking rows stay, the first untestable
    fewer = CheckTable()
    again, numbers = drift_section(fewer, feds, train, [1, 2], 1, [0, 1], min_reliability=2.0)  # a reliability is <= 1
    assert len(fewer) == 3 and fewer.frame()["verdict"].tolist()[0] == "untestable" and fewer.n_untestable == 1
    assert fewer.frame()["verdict"].tolist()[1] != "untestable"  # the trend is decided on its intervals
    assert numbers["ls_track_reading"].startswith("the first is untestable in this setting")
    assert again.equals(table) and numbers["ls_min_rel"] == 2.0
    with pytest.raises(ValueError, match="one federation per seed, got 2 federation"):
        drift_section(fewer, feds, train, [1, 2], 1, [0])
    numbers = refresh_section(checks, ident.run.server, 3, 2, seed=0)
    assert numbers["rf_n"] == 4 and numbers["rf_trials"] == 3 and len(checks) == 12
    assert numbers["rf_reading"].startswith("each within its range. Personalization is read-only")
    assert all(v == "holds" for v in checks.frame()["verdict"].iloc[-5:])


def test_the_planted_section_by_its_instances():
    spec = PlantedHeads(G=2, m=4, C=8, d1=5, common_rank=2, sig_rank=2)
    checks = CheckTable()
    table, numbers = planted_section(checks, spec, [0.05, 2.0], 2, seed=0, sep_noise=0.5, rank=4, k_min=2, k_max=4)
    planted = planted_grouping(spec, [0.05, 2.0], 2, seed=0, rank=4, k_min=2, k_max=4)
    assert numbers["pl_G"] == 2 and numbers["pl_rank"] == 4 and numbers["pl_instances"] == len(planted) == 8
    assert numbers["pl_n_sep"] == 4 and numbers["pl_min_ari_sep"] == 1.0 and numbers["pl_sep_reading"].startswith("finds")
    noisy = planted[planted["σ"] == 2.0]
    assert numbers["pl_noisy_sigma"] == 2.0 and numbers["pl_noisy_raw"] == float(noisy["ARI raw"].mean())
    assert numbers["pl_noisy_lowrank"] == float(noisy["ARI lowrank"].mean())
    assert table.equals(planted_summary(planted)) and len(checks) == 2 and checks.frame()["verdict"].iloc[0] == "holds"


def test_compatibility_reliability_by_hand_and_on_pure_probe_noise():
    # 3 clients, 4 probe inputs, 1 class; own logits 1; client k's head on l's features 1 + d_kl on every input:
    # c_kl = -d_kl on every fold, so the probe's error is 0 and the reliability 1
    d = torch.tensor([[0.0, 0.2, 0.6], [0.2, 0.0, 0.4], [0.6, 0.4, 0.0]])
    logits = 1 + d[:, :, None, None] * torch.ones(3, 3, 4, 1)
    assert hc.compatibility_reliability(logits, folds=2) == 1.0
    # the same mean change for every pair, alternating by input: folds [0, 1] and [2, 3] give
    # c = -sqrt(mean of squares) alike, so all pairs equal: no spread, NaN
    flip = torch.tensor([0.0, 2.0, 0.0, 2.0])
    same = 1 + (1 - torch.eye(3))[:, :, None, None] * flip[None, None, :, None]
    assert math.isnan(hc.compatibility_reliability(same, folds=2))
    # pure probe noise: every pair's change drawn alike per input, so pairs differ only by the probe
    g = torch.Generator().manual_seed(0)
    noise = 1 + (1 - torch.eye(6))[:, :, None, None] * torch.rand(6, 6, 20, 2, generator=g)
    assert hc.compatibility_reliability(noise, folds=10) < hc.MIN_RELIABILITY
    with pytest.raises(ValueError, match="fewer than the 10 folds"):
        hc.compatibility_reliability(logits, folds=10)


def test_track_reading_names_the_opposite_direction_and_the_untestable_first_statement():
    from fedbook.intervals import mean_interval
    opposite = hc.track_reading(True, mean_interval([-0.1, 0.0, 0.1]), mean_interval([0.5, 0.6, 0.7]), 0.9, 0.5, 4)
    assert opposite.endswith("the opposite of the statement that the tracking weakens")
    assert opposite.startswith("ρ is of either sign")
    untestable = hc.track_reading(False, mean_interval([-0.1, 0.0, 0.1]), mean_interval([0.5, 0.6, 0.7]), 0.2, 0.5, 4)
    assert "reliability of 0.20" in untestable and "below the 0.5 declared" in untestable
    assert untestable.endswith("the opposite of the statement that the tracking weakens")
