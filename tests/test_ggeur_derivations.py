"""The GGEUR derivations chapter's checks (fedbook.studies.ggeur_derivations): their random
instances, the same numbers as the chapter's former inline computation, each check passing on
fedlib.geometry and failing on a wrong implementation, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import fedbook.studies.ggeur_derivations as gc
from fedbook.checks import CheckTable
from fedbook.studies.ggeur_derivations import (augmentation_distances, augmentation_shares, batched_against_loop,
                                             degenerate_failures, degenerate_inputs, distance_summary,
                                             eq4_on_random_federations, generation_covariances, local_stats,
                                             random_federation, similarity_properties, similarity_table)
from fedlib.geometry import combine_local_covariances
from fedlib.rng import numpy_rng
from fedlib.stats import ClassMoments

F = torch.float64


def test_random_federation_keeps_the_last_class_on_client_zero():
    for seed in range(5):
        parts = random_federation(np.random.default_rng(seed), 4, 3, 2)
        assert len(parts) == 4 and parts[0][1][0] == 2
        assert all(x.shape == (len(y), 2) for x, y in parts) and 1 <= len(parts[0][1]) <= 24
        assert all((y != 2).all() for _, y in parts[1:])
    one = random_federation(np.random.default_rng(0), 1, 1, 1)  # the smallest federation
    assert len(one) == 1 and (one[0][1] == 0).all()


def test_local_stats_by_hand():
    x = np.array([[0.0, 1.0], [2.0, 1.0], [5.0, 5.0]]); y = np.array([0, 0, 2])
    n, mu, cov = local_stats([(x, y), (np.zeros((0, 2)), np.zeros(0, dtype=int))], 3, 2)
    assert n.tolist() == [[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert mu[0, 0].tolist() == [1.0, 1.0] and mu[0, 2].tolist() == [5.0, 5.0] and (mu[1] == 0).all()
    assert cov[0, 0].tolist() == [[1.0, 0.0], [0.0, 0.0]] and (cov[0, 2] == 0).all()


def _former_eq4(seed, trials):
    """The chapter's Eq. 4 cell before the move, verbatim but for the names."""
    rng = numpy_rng(seed, 1)
    eq4_err, moments_err, cross_max, single = 0.0, 0.0, 0.0, 0
    for _ in range(trials):
        K, C, d = int(rng.integers(2, 6)), int(rng.integers(2, 5)), int(rng.integers(1, 7))
        parts = []
        for k in range(K):
            m = int(rng.integers(1, 25))
            y = rng.integers(0, C, size=m)
            if k == 0:
                y[0] = C - 1
            parts.append((rng.normal(size=(m, d)) * rng.uniform(0.5, 2) + 3 * k, y))
        for k in range(1, K):
            parts[k] = (parts[k][0][parts[k][1] != C - 1], parts[k][1][parts[k][1] != C - 1])
        n, mu, cov = np.zeros((K, C)), np.zeros((K, C, d)), np.zeros((K, C, d, d))
        for k, (x, y) in enumerate(parts):
            for c in range(C):
                xc = x[y == c]
                n[k, c] = len(xc)
                if len(xc):
                    mu[k, c] = xc.mean(0)
                    cov[k, c] = (xc - mu[k, c]).T @ (xc - mu[k, c]) / len(xc)
        N, _, S = combine_local_covariances(torch.tensor(n), torch.tensor(mu), torch.tensor(cov))
        merged = ClassMoments.sum(ClassMoments.from_features(torch.tensor(x), torch.tensor(y), C) for x, y in parts)
        x_all = np.concatenate([p[0] for p in parts]); y_all = np.concatenate([p[1] for p in parts])
        for c in range(C):
            xc = x_all[y_all == c]
            if not len(xc):
                continue
            single += int((n[:, c] > 0).sum() == 1)
            ref = np.cov(xc.T, bias=True).reshape(d, d) if len(xc) > 1 else np.zeros((d, d))
            scale = max(1.0, np.abs(ref).max())
            eq4_err = max(eq4_err, np.abs(S[c].numpy() - ref).max() / scale)
            moments_err = max(moments_err, np.abs(merged.class_covariances()[c].numpy() - ref).max() / scale)
            mu_c = xc.mean(0)
            for x, y in parts:
                xk = x[y == c]
                if len(xk):
                    cross = (xk - xk.mean(0)).sum(0)[:, None] * (xk.mean(0) - mu_c)[None, :]
                    cross_max = max(cross_max, np.abs(cross).max() / scale)
    return eq4_err, moments_err, cross_max, single


def test_eq4_check_repeats_the_chapters_former_computation_bit_for_bit():
    for seed in (0, 3):
        assert tuple(eq4_on_random_federations(seed, 4)) == _former_eq4(seed, 4)


def test_eq4_check_holds_and_fails_on_a_wrong_combination(monkeypatch):
    e = eq4_on_random_federations(1, 3)
    assert e.eq4 < 1e-10 and e.moments < 1e-10 and e.cross < 1e-10 and e.single_client_cases >= 3

    def within_only(counts, means, covariances):  # forgets the between-client term of Eq. 4
        N, m, S = combine_local_covariances(counts, means, covariances)
        w = counts / counts.sum(0).clamp(min=1)
        return N, m, (w[..., None, None] * covariances).sum(0)

    monkeypatch.setattr(gc, "combine_local_covariances", within_only)
    assert eq4_on_random_federations(1, 3).eq4 > 1e-2


def test_generation_covariances_and_a_wrong_analytic_covariance(monkeypatch):
    formulas, by_scale = generation_covariances(2, 5000, dim=3, scales=(0.5, 2.0))
    assert list(formulas.index) == ["code", "paper"] and formulas["analytic Cov(β)"].tolist() == ["Σ", "Σ²"]
    assert formulas.loc["code", "relative distance of Cov(β) from Σ"] < 1e-12
    assert formulas.loc["paper", "relative distance of Cov(β) from Σ"] > 0.05
    assert (formulas["relative error empirical vs analytic"] < 0.1).all()
    assert by_scale.index.tolist() == [0.5, 2.0] and np.allclose(by_scale["tr Cov(β) / tr Σ, code"], 1.0)
    # the paper's ratio grows with the square of the feature scale
    assert by_scale.loc[2.0, "tr Cov(β) / tr Σ, paper"] == pytest.approx(16 * by_scale.loc[0.5, "tr Cov(β) / tr Σ, paper"])
    right = gc.generated_covariance  # a wrong analytic covariance: twice each formula's own
    monkeypatch.setattr(gc, "generated_covariance", lambda v, V, formula: 2 * right(v, V, formula))
    assert (generation_covariances(2, 5000, dim=3)[0]["relative error empirical vs analytic"] > 0.3).all()


def test_similarity_properties_and_a_signed_similarity(monkeypatch):
    p = similarity_properties(4, 5)
    assert p["out_of_range"] == 0 and p["sign_dev"] < 1e-12 and p["max_at_equal"] < 1e-12
    assert 0.5 < p["near_mean"] <= p["near_max"] < 1 and p["s_swap"] == 3.0 and p["s_swap_sub"] == pytest.approx(5.0)
    t = similarity_table(p, 5)
    assert t.index.name == "property" and t["result"].iloc[0] == "0 of 5"
    signed = lambda A, B, k, method="paper": (A[:, :k] * B[:, :k]).sum()  # noqa: E731  (no absolute value)
    monkeypatch.setattr(gc, "geometry_similarity", signed)
    q = similarity_properties(4, 20)
    assert q["out_of_range"] > 0 and q["sign_dev"] > 1e-3 and q["max_at_equal"] > 1e-3


def test_augmentation_distances_on_a_tiny_mixture():
    dist = augmentation_distances(0, n_per_class=40, n_classes=2, dim=2, n_clients=2, alpha=1.0, total=60, small=10)
    assert set(dist.formula) == {"code", "paper"} and len(dist) == 2 * (len(dist) // 2)
    assert ((dist["n"] >= 2) & (dist["n"] < 60)).all() and (dist["before"] >= 0).all()
    assert (dist["shrinks"] == (dist["after"] < dist["before"])).all()
    assert (dist["beats isotropic"] == (dist["after"] < dist["after (isotropic)"])).all()
    assert (dist["small"] == np.where(dist["n"] < 10, "fewer than 10", "10 or more")).all()
    code = dist[dist.formula == "code"].set_index(["client", "class"])
    paper = dist[dist.formula == "paper"].set_index(["client", "class"])
    assert code.index.equals(paper.index) and np.array_equal(code["before"], paper["before"])


def test_summary_and_shares_by_hand():
    dist = pd.DataFrame({"formula": ["code", "code", "code", "paper", "paper", "paper"], "n": [3, 4, 30] * 2,
                         "before": [2.0, 2.0, 1.0, 2.0, 2.0, 1.0], "after": [1.0, 3.0, 4.0, 3.0, 3.0, 0.5],
                         "tr ratio": [1.0, 1.0, 0.5, 1.0, 1.0, 1.0]})
    dist["shrinks"] = dist["after"] < dist["before"]
    dist["small"] = np.where(dist["n"] < 10, "fewer than 10", "10 or more")
    summary = distance_summary(dist)
    assert list(summary.index) == [("code", "fewer than 10"), ("code", "10 or more"),
                                   ("paper", "fewer than 10"), ("paper", "10 or more")]
    assert summary["(client, class) pairs"].tolist() == [2, 1, 2, 1]
    assert summary["distance shrinks (% of pairs)"].tolist() == [50.0, 0.0, 0.0, 100.0]
    s = augmentation_shares(dist)
    assert s["share_code"] == pytest.approx(1 / 3) and s["share_paper"] == pytest.approx(1 / 3)
    assert s["med_ratio_code"] == 1.5 and s["share_small"] == 0.5 and s["share_large"] == 0.0
    assert s["tr_ratio_large"] == 0.5 and s["n_pairs"] == 3 and s["scarce_better"] and not s["too_wide"]
    only_scarce = augmentation_shares(dist[dist.n < 10])
    assert math.isnan(only_scarce["share_large"]) and math.isnan(only_scarce["tr_ratio_large"])
    assert not only_scarce["scarce_better"] and not only_scarce["too_wide"]


def test_degenerate_inputs_and_batched_generation():
    t = degenerate_inputs(0)
    assert t.index.name == "input" and len(t) == 6 and degenerate_failures(t) == 0
    assert t.loc["d = 50 larger than n = 5", "behaviour"].startswith("rank 4;")
    broken = t.copy(); broken.iloc[0, -1] = False; broken.iloc[1, -2] = True
    assert degenerate_failures(broken) == 2
    broken.iloc[1, -1] = False  # row 1 now fails both ways: it counts once
    assert degenerate_failures(broken) == 2
    err, t_fast, t_slow = batched_against_loop(0, dim=5, n_new=12)
    assert err < 1e-12 and t_fast > 0 and t_slow > 0


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="K must be an int >= 1, got 0"):
        random_federation(np.random.default_rng(0), 0, 2, 2)
    with pytest.raises(ValueError, match="d must be an int >= 1, got 2.5"):
        local_stats([], 2, 2.5)
    with pytest.raises(ValueError, match="trials must be an int >= 1, got 0"):
        eq4_on_random_federations(0, 0)
    with pytest.raises(ValueError, match="n_draws must be an int >= 2, got 1"):
        generation_covariances(0, 1)
    with pytest.raises(ValueError, match=r"scale must be a finite number > 0, got -1.0"):
        generation_covariances(0, 100, scales=(1.0, -1.0))
    with pytest.raises(ValueError, match="trials must be an int >= 1, got -1"):
        similarity_properties(0, -1)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0, got 0"):
        augmentation_distances(0, n_per_class=40, n_classes=2, dim=2, n_clients=2, alpha=0, total=60)
    with pytest.raises(ValueError, match="total must be an int >= 2, got 1"):
        augmentation_distances(0, n_per_class=40, n_classes=2, dim=2, n_clients=2, alpha=1.0, total=1)
    with pytest.raises(ValueError, match="n_new must be an int >= 1, got 0"):
        batched_against_loop(0, n_new=0)


def test_the_sections_record_their_checks_and_read_the_same_numbers():
    """Each section is the chapter's former cell: the numbers are the checks' own, the rows the chapter's."""
    checks = CheckTable()
    s1 = gc.eq4_section(checks, 0, 3)
    e = eq4_on_random_federations(0, 3)
    assert s1.numbers == {"eq4_err": e.eq4, "eq4_trials": 3, "single_client_cases": e.single_client_cases}
    assert type(s1.numbers["eq4_err"]) is float and type(s1.numbers["eq4_trials"]) is int
    s2 = gc.generation_section(checks, 0, 3000)
    formulas, by_scale = generation_covariances(0, 3000)
    assert s2.numbers["emp_err"] == formulas["relative error empirical vs analytic"].max()
    assert s2.numbers["scale_paper_small"] == by_scale.iloc[0, 1] and s2.numbers["scale_paper_large"] == by_scale.iloc[-1, 1]
    s3 = gc.similarity_section(checks, 0, 3)
    assert s3.numbers == {"s_swap": 3.0}
    s4 = gc.augmentation_section(checks, 0, n_per_class=40, n_classes=2, dim=2, n_clients=2, alpha=1.0, total=60)
    shares = augmentation_shares(s4.data)
    assert s4.numbers["share_code"] == 100 * shares["share_code"] and s4.numbers["n_pairs"] == len(s4.data) // 2
    gc.degenerate_section(checks, 0)
    s6 = gc.batched_section(checks, 0, dim=4, n_new=10)
    assert s6.numbers["loop_err"] < 1e-12 and s6.numbers["loop_time_ratio"] > 0
    rows = checks.frame()
    assert len(rows) == 2 + 3 + 4 + 1 + 1 + 1
    assert rows["how checked"].tolist()[0] == "3 random federations vs numpy.cov(bias=True)"
    assert rows["how checked"].tolist()[2] == "3,000 draws, Frobenius relative error"
    assert rows["worst error / counterexamples"].tolist()[8] == "S = 3 of 5"
    assert rows["how checked"].tolist()[-1] == "10 samples, d = 4, same draws"
    verdicts = rows["verdict"].tolist()
    assert verdicts[:9] + verdicts[10:] == ["holds"] * 11  # the augmentation row (10th) reads the shape against isotropic noise:
    share = s4.numbers["share_iso_code"]
    assert verdicts[9] == ("holds" if share == 100 else "partly" if share > 50 else "FAILS")
    assert rows["worst error / counterexamples"].tolist()[9] == f"closer for {share:.0f} %"
    assert len(s1.tables) == 1 and len(s2.tables) == 2 and len(s3.tables) == 1


def test_augmentation_reading_has_a_sentence_for_every_case():
    texts = {(a, b): gc.augmentation_reading({"scarce_better": a, "too_wide": b}) for a in (True, False) for b in (True, False)}
    assert texts[(True, True)]["aug_reading"] == ("GGEUR's augmentation is a remedy for scarce classes; filling a "
                                                  "well-represented class up to the total makes it too wide")
    assert texts[(False, False)]["aug_reading"].startswith("the scarce classes do not gain more often")
    assert texts[(False, False)]["aug_reading"].endswith("does not make it wider than the global class here")
    assert texts[(False, True)]["aug_closing"] == "no more often for under-represented classes than for the others"
    assert len({t["aug_reading"] for t in texts.values()}) == 4


def test_the_figures_draw_both_formulas():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = gc.plot_formulas(0, n=50)
    ax = fig.axes[0]
    assert [c.get_offsets().shape[0] for c in ax.collections] == [50, 50, 1]
    assert ax.get_title() == "new samples around one sample, λ = (4, 0.25)"
    plt.close(fig)
    dist = augmentation_distances(0, n_per_class=40, n_classes=2, dim=2, n_clients=2, alpha=1.0, total=60)
    fig = gc.plot_frechet(dist)
    ax = fig.axes[0]
    assert sum(c.get_offsets().shape[0] for c in ax.collections) == len(dist) and ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["code's formula", "paper's formula", "no change"]
    plt.close(fig)


def test_isotropic_like_keeps_the_total_variance_by_hand():
    """Eigenvalues (4, 0): the code's noise has total variance 4, so the isotropic shape is (2, 2); the paper's has
    4² = 16, so the isotropic eigenvalue is sqrt(16 / 2) = 2·sqrt(2). Means and counts are kept."""
    sh = gc.GeometricShapes(torch.tensor([[4.0, 0.0]], dtype=torch.float64), torch.eye(2, dtype=torch.float64)[None],
                            torch.tensor([[1.0, 2.0]], dtype=torch.float64), torch.tensor([5.0]), torch.tensor([False]))
    code, paper = gc.isotropic_like(sh, "code"), gc.isotropic_like(sh, "paper")
    assert code.eigenvalues.tolist() == [[2.0, 2.0]] and paper.eigenvalues[0].tolist() == pytest.approx([8 ** 0.5] * 2)
    assert torch.equal(code.eigenvectors[0], torch.eye(2, dtype=torch.float64)) and torch.equal(code.means, sh.means)
    with pytest.raises(ValueError, match="unknown formula 'wrong'; valid: code, paper"):
        gc.isotropic_like(sh, "wrong")


def test_the_shape_check_reads_a_held_out_fit_not_the_merged_moments():
    """The target of the shape comparison is a Gaussian fitted on held-out samples of each class (the mixture's true
    class Gaussians, their own stream), so it can fail without a mutation: on this mixture one scarce pair ends
    closer to the held-out fit after the isotropic fill (against the merged fit the global shape won every pair)."""
    dist = augmentation_distances(0, n_per_class=200, n_classes=4, dim=6, n_clients=6, alpha=0.1, total=200)
    assert (dist["beats isotropic"] == (dist["held out, GGEUR"] < dist["held out, isotropic"])).all()
    assert not np.allclose(dist["held out, GGEUR"], dist["after"])  # a different target from the merged fit
    code = dist[dist.formula == "code"]
    assert 0.5 < code["beats isotropic"].mean() < 1  # partly: the check can fail
    checks = CheckTable()
    s = gc.augmentation_section(checks, 0, n_per_class=200, n_classes=4, dim=6, n_clients=6, alpha=0.1, total=200)
    assert checks.frame()["verdict"].tolist() == ["partly"] and "holds only partly" in s.numbers["shape_reading"]


def test_the_shape_reading_words_every_case():
    assert gc.shape_reading(1.0).startswith("so where augmentation helps, it is the global geometry")
    assert "not for all" in gc.shape_reading(0.9) and "global geometry, not the mere" not in gc.shape_reading(0.9)
    assert gc.shape_reading(0.5).endswith("the check fails")
    with pytest.raises(ValueError, match="share_iso must be a fraction"):
        gc.shape_reading(1.5)


def _rotated_shapes(moments, **kw):
    """A mutation: the true global shapes with their eigenvectors replaced by a fixed random rotation (same spread,
    wrong directions)."""
    shapes = _REAL(moments, **kw)
    g = torch.Generator().manual_seed(123)
    q, _ = torch.linalg.qr(torch.randn(shapes.n_classes, shapes.dim, shapes.dim, generator=g, dtype=shapes.eigenvectors.dtype))
    return gc.GeometricShapes(shapes.eigenvalues, q, shapes.means, shapes.counts, shapes.fallback)


_REAL = gc.class_shapes


def test_the_shape_check_holds_and_fails_when_the_shape_is_wrong(monkeypatch):
    """The check of Section 4 reads the operative statement (the global *shape* brings a client's class toward the
    global one, more than as much spread in no direction); with the eigenvectors replaced by a random rotation (the
    mutation) it must fail."""
    kw = dict(n_per_class=120, n_classes=4, dim=6, n_clients=6, alpha=0.1, total=120)  # the smoke profile's mixture
    checks = CheckTable()
    good = gc.augmentation_section(checks, 0, **kw)
    assert good.numbers["share_iso_code"] == 100 and checks.frame()["verdict"].tolist() == ["holds"]
    assert good.numbers["shape_reading"] == gc.shape_reading(1.0)
    monkeypatch.setattr(gc, "class_shapes", _rotated_shapes)
    bad_checks = CheckTable()
    bad = gc.augmentation_section(bad_checks, 0, **kw)
    assert bad.numbers["share_iso_code"] <= 50 and bad_checks.frame()["verdict"].tolist() == ["FAILS"]
