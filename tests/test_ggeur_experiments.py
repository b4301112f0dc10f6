"""The runs and readings of the chapter ``ggeur_experiments`` (fedbook.studies.ggeur): the
readers per seed against the chapter's former pivot arithmetic, the similarity rows against the
chapter's former loop, the claims paragraph's branches, the errors, and a tiny study end to end."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from fedbook.page import sign_word
from fedbook.claims import Claim, evaluate, says
from fedlib.data import ArrayDataset
from fedlib.engines.vectorized import SequentialFallback
from fedbook.studies.ggeur import (DIFFERENT, DOM_ORDER, GAIN_STEP2, GGEUR_CODE, HEADLINE_DOM, HEADLINE_LABEL, LABEL_METHODS,
                                      LOW_BETA_ONLY, ROWMAX, SAME,
                                      STEP1, STEPS12, DomainRuns, GGEURStudy, LabelRuns, claims_reading, diagonal_gap, encoder_column,
                                      similarity_rows)
from fedlib.geometry import class_shapes, numerical_ranks, similarity_matrix, trace_ratio
from fedlib.stats import ClassMoments
from fedlib.training import TrainConfig

TRAIN = TrainConfig(epochs=1, batch_size=32, optimizer="adam", lr=1e-2)
SIZES = dict(n_samples=300, public_fraction=0.2, encoder_epochs=1, encoder_width=8, n_clients=3, global_test_per_class=3,
             total_per_class=10, per_prototype=5, rounds=1, domain_rounds=1, train=TRAIN, early=1, hidden=8,
             domain_max=60, domain_public=0.2, domain_client=0.2)


def _domains(n_per=120, n_classes=10, dim=6, seed=0) -> ArrayDataset:
    g = torch.Generator().manual_seed(seed)
    names = ["mnist", "uci", "mnist_rotated", "mnist_inverted"]
    x = torch.randn(n_per * len(names), dim, generator=g)
    y = torch.arange(n_per * len(names)) % n_classes
    x = x + 0.5 * torch.nn.functional.one_hot(y, dim if dim >= n_classes else n_classes)[:, :dim]
    return ArrayDataset(x, y, n_classes, "toy", domain=torch.arange(n_per * len(names)) // n_per, domain_names=names)


def test_similarity_rows_equal_the_chapter_s_former_loop():
    """What the chapter computed before the move, written out: 10 classes, MNIST against every other domain."""
    ds = _domains()
    rows, mats = similarity_rows(3, ds, ds, k=2)
    shapes = {}
    for d, dname in enumerate(ds.domain_names):
        sel = ds.domain == d
        shapes[dname] = class_shapes(ClassMoments.from_features(ds.x[sel], ds.y[sel], 10))
    former = []
    for other in [n for n in ds.domain_names if n != "mnist"]:
        S = similarity_matrix(shapes["mnist"], shapes[other], k=2, method="paper").numpy()
        assert np.array_equal(mats[other], S)
        former.append({"seed": 3, "other domain": other, "mean S, same class": float(np.nanmean(np.diag(S))),
                       "mean S, different classes": float(np.nanmean(S[~np.eye(10, dtype=bool)])),
                       "classes whose diagonal is its row's maximum": float((np.nanargmax(S, axis=1) == np.arange(10)).sum())})
    assert rows == former
    sub = similarity_rows(3, ds, ds, k=2, method="subspace")[0]
    assert [r["other domain"] for r in sub] == ["uci", "mnist_rotated", "mnist_inverted"]


def test_similarity_rows_refuse_bad_k_and_method():
    ds = _domains(n_per=20)
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        similarity_rows(0, ds, ds, k=0)
    with pytest.raises(ValueError, match="unknown similarity method 'cosine'; valid: paper, subspace"):
        similarity_rows(0, ds, ds, k=2, method="cosine")
    plain = ArrayDataset(ds.x, ds.y, ds.n_classes, "plain")
    with pytest.raises(ValueError, match=r"embeddings must carry each image's domain"):
        similarity_rows(0, ds, plain, k=2)
    with pytest.raises(ValueError, match=r"domains must name 2 or more, got \[\]"):
        similarity_rows(0, plain, ds, k=2)
    renamed = ArrayDataset(ds.x, ds.y, ds.n_classes, "renamed", domain=ds.domain,
                           domain_names=list(reversed(ds.domain_names)))
    with pytest.raises(ValueError, match=r"domains names \['mnist_inverted', .* but the embeddings' domains are \['mnist'"):
        similarity_rows(0, renamed, ds, k=2)


def test_diagonal_gap_and_encoder_column_by_hand():
    rows = [{SAME: 2.0, DIFFERENT: 0.5}, {SAME: 1.0, DIFFERENT: 1.5}]
    assert diagonal_gap(rows) == 0.5
    runs = {"FedAvg": {"AVG": 50.0, "STD": 4.0}, STEP1: {"AVG": 53.0, "STD": 3.0}, STEPS12: {"AVG": 52.0, "STD": 2.0}}
    ds = _domains(n_per=60)
    col = encoder_column(runs, 0, ds, ds, k=2)
    assert col["AVG, FedAvg (%)"] == 50.0 and col["STD, FedAvg (points)"] == 4.0
    assert col["gain of step 1 over FedAvg, AVG (points)"] == 3.0 and col[GAIN_STEP2] == -1.0
    assert col["S same − different classes, paper's S"] == diagonal_gap(similarity_rows(0, ds, ds, 2)[0])


def _label_table() -> pd.DataFrame:
    rows = [{"seed": s, "beta": b, "method": m, "accuracy (%)": 10.0 * s + b + i, "early (%)": 5.0 * s + i}
            for s in (2, 0, 1) for b in (0.1, 0.5) for i, m in enumerate(LABEL_METHODS)]
    return pd.DataFrame(rows)


def test_label_readers_equal_the_chapter_s_former_pivots():
    table = _label_table()
    runs = LabelRuns(table)
    L = table.pivot_table(index="seed", columns=["beta", "method"], values="accuracy (%)")
    E = table.pivot_table(index="seed", columns=["beta", "method"], values="early (%)")
    for b in (0.1, 0.5):
        for m in LABEL_METHODS:
            assert np.array_equal(runs.accuracy(b, m), L[(b, m)].to_numpy())
            assert np.array_equal(runs.early(b, m), E[(b, m)].to_numpy())
            assert runs.mean(b, m) == float(L[(b, m)].mean())
            assert runs.mean(b, m, "early (%)") == float(E[(b, m)].mean())
    assert runs.accuracy(0.5, "FedAvg").tolist() == [0.5, 10.5, 20.5]  # seed order, not row order
    assert runs.of_seed(1, 0.1, "FedFA-style") == 10.0 + 0.1 + 7
    with pytest.raises(ValueError, match=r"no label-skew run 'FedSGD' at beta = 0.5; betas: \[0.1, 0.5\], runs: FedAvg, "):
        runs.accuracy(0.5, "FedSGD")
    with pytest.raises(ValueError, match=r"no label-skew run 'FedAvg' at beta = 0.05"):
        runs.early(0.05, "FedAvg")
    with pytest.raises(ValueError, match=r"unknown column 'late \(%\)'; valid: 'accuracy \(%\)', 'early \(%\)'"):
        runs.mean(0.5, "FedAvg", "late (%)")
    with pytest.raises(ValueError, match=r"no run seed 7; the seeds: \[0, 1, 2\]"):
        runs.of_seed(7, 0.5, "FedAvg")


def test_label_readers_on_some_seeds_and_the_drops_by_hand():
    """A run made on some seeds only (the headline seeds make FedAvg and GGEUR only): read on the
    seeds that made it, or on given seeds, each of which must have made it."""
    table = pd.concat([_label_table(), pd.DataFrame([{"seed": 3, "beta": 0.5, "method": "FedAvg", "accuracy (%)": 70.0,
                                                      "early (%)": 7.0}])])
    curves = {(0, 0.5, "FedAvg"): pd.Series([0.50, 0.40, 0.45, 0.30], index=[1, 2, 3, 4]),
              (0, 0.5, GGEUR_CODE): pd.Series([0.10, 0.50, 0.60, 0.60, 0.58], index=[0, 1, 2, 3, 4])}
    runs = LabelRuns(table, curves)
    assert runs.accuracy(0.5, "FedAvg").tolist() == [0.5, 10.5, 20.5, 70.0]
    assert runs.accuracy(0.5, "FedAvg", [3, 0]).tolist() == [70.0, 0.5]
    assert runs.accuracy(0.5, "FedFA-style").tolist() == [7.5, 17.5, 27.5]  # not made on seed 3
    assert runs.mean(0.5, "FedAvg", seeds=[0, 1]) == 5.5
    with pytest.raises(ValueError, match=r"'FedFA-style' at beta = 0.5 was not made on seeds \[3\]; it was on \[0, 1, 2\]"):
        runs.accuracy(0.5, "FedFA-style", [0, 3])
    # drops: FedAvg falls 50 -> 40 and 45 -> 30 (10 + 15 points); GGEUR 60 -> 58 (2 points), its round 0 not read
    assert runs.drops(0.5, "FedAvg", [0]) == pytest.approx([25.0])
    assert runs.drops(0.5, GGEUR_CODE, [0]) == pytest.approx([2.0])
    with pytest.raises(ValueError, match=r"no curve of 'FedAvg' at beta = 0.5 for seed 1"):
        runs.drops(0.5, "FedAvg", [0, 1])


def _domain_runs(seeds=(1, 0)) -> DomainRuns:
    rows = [{"seed": s, "base": b, "method": v, "mnist": 1.0 * s, "AVG": 10.0 * s + i, "STD": float(i)}
            for s in (0, 1) for i, (b, v) in enumerate(DOM_ORDER)]
    sims = [{"seed": s, "other domain": o, SAME: 2.0 + s, DIFFERENT: 1.0, ROWMAX: float(3 + s + j)}
            for s in (0, 1) for j, o in enumerate(("uci", "mnist_rotated", "mnist_inverted"))]
    return DomainRuns(pd.DataFrame(rows), pd.DataFrame(sims), {}, list(seeds))


def test_domain_readers_equal_the_chapter_s_former_arithmetic():
    runs = _domain_runs()
    D = runs.table.set_index(["seed", "base", "method"])
    former = D.xs(("FedProx", STEP1), level=("base", "method"))["AVG"].reindex([1, 0]).to_numpy()
    assert np.array_equal(runs.value("FedProx", STEP1), former)
    assert runs.value("FedProx", STEP1).tolist() == [14.0, 4.0]  # the seeds' order
    assert runs.value("FedAvg", "FedAvg", "STD").tolist() == [0.0, 0.0]
    assert runs.row(1, "FedAvg", STEPS12)["AVG"] == 12.0
    with pytest.raises(ValueError, match=r"no domain-skew run \('FedAvg', 'FedSGD'\); valid: "):
        runs.value("FedAvg", "FedSGD")
    with pytest.raises(ValueError, match=r"unknown column 'usps'; valid: mnist, AVG, STD"):
        runs.value("FedAvg", "FedAvg", "usps")
    with pytest.raises(ValueError, match=r"no run seed 5; the seeds: \[1, 0\]"):
        runs.row(5, "FedAvg", STEPS12)
    per_seed = runs.similarity_per_seed()
    assert per_seed.index.tolist() == [1, 0] and per_seed[SAME].tolist() == [3.0, 2.0]
    # each heat map's diagonal lead, by hand: SAME − DIFFERENT = 2 + seed − 1
    gaps = runs.diagonal_gaps()
    assert gaps.index.tolist() == [1, 0] and gaps.columns.tolist() == ["uci", "mnist_rotated", "mnist_inverted"]
    assert gaps.to_numpy().tolist() == [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]
    assert runs.value("FedAvg", "FedAvg", "AVG", [0, 1]).tolist() == [0.0, 10.0]
    sim = runs.similarity
    former_share = (sim.groupby("seed")[ROWMAX].sum().reindex([1, 0]) / (10 * 3)).to_numpy()
    assert np.array_equal(runs.rowmax_share(10), former_share) and runs.rowmax_share(10).tolist() == [15 / 30, 12 / 30]


def _results(verdicts: dict[str, str], betas) -> dict:
    """Decided rows with the wanted verdicts: holds from (2, 3, 2.5), does not hold from their negatives, else one seed."""
    values = {"holds": [2.0, 3.0, 2.5], "does not hold": [-2.0, -3.0, -2.5], "inconclusive at this scale": [1.0]}
    keys = [f"{k}-{b}" for b in betas for k in ("label-gain", "ctrl-rebalanced", "ctrl-matched", "label-outperforms")]
    keys += [f"ctrl-fedmix-matched-{min(betas)}", "label-convergence", "ctrl-convergence-matched", "label-smoother",
             "dom-gain-FedAvg", "ctrl-dom-matched", "digits-vs-peers"]
    out = {}
    for key in keys:
        c = Claim(key, "q", "s", "accuracy, X − Y, points", "greater", resolution=0.1)
        out[key] = evaluate(c, values[verdicts.get(key, "inconclusive at this scale")])
    return out


def test_claims_reading_branches():
    betas = [0.5, 0.1]
    text = claims_reading(_results({}, betas), betas)
    assert text.startswith("At β = 0.5, label-gain-0.5 is inconclusive at this scale (")
    assert "No label-skew gain over FedAvg holds" in text and text.count("At β =") == 2
    both = {"label-gain-0.5": "holds", "label-gain-0.1": "holds", "ctrl-rebalanced-0.5": "holds"}
    text = claims_reading(_results(both, betas), betas)
    assert "At β = 0.5 the gain is ahead of rebalancing alone; at β = 0.1 it is not shown to be." in text
    assert "generated samples beat copies of real samples" in text
    text = claims_reading(_results({"label-gain-0.1": "holds", "ctrl-rebalanced-0.1": "holds"}, betas), betas)
    assert "Not here: every gain that holds is also ahead of rebalancing alone." in text
    text = claims_reading(_results({"label-gain-0.1": "holds", "ctrl-dom-matched": "does not hold"}, betas), betas)
    assert "none of the gains that hold is ahead of rebalancing alone" in text
    assert "ctrl-dom-matched does not hold (" in text and "the baseline given GGEUR's local steps does better" in text
    # the FedMix-style control with GGEUR's steps is read at the lowest concentration only
    assert text.count("ctrl-fedmix-matched-") == 1 and "FedMix-style given GGEUR's local steps: ctrl-fedmix-matched-0.1" in text
    assert "on smoothness, label-smoother is inconclusive" in text and "digits-vs-peers is inconclusive" in text
    with pytest.raises(KeyError):
        claims_reading(_results({}, [0.5]), [0.5, 0.05])


def test_says_and_sign_word():
    c = Claim("gain", "q", "s", "accuracy, X − Y, points", "greater", resolution=0.1)
    assert says(evaluate(c, [2.0, 3.0, 2.5])) == f"gain holds ({evaluate(c, [2.0, 3.0, 2.5]).interval.format(1)})"
    with pytest.raises(ValueError, match="says reads a ClaimResult, got a str"):
        says("gain")
    assert [sign_word(x, "up", "down") for x in (0.06, -0.06, 0.05, float("nan"))] == ["up", "down", "does not change",
                                                                                    "does not change"]
    with pytest.raises(ValueError, match="tol must be a number >= 0, got -1"):
        sign_word(1.0, "up", "down", tol=-1)


def test_trace_ratio_and_ranks_equal_the_chapter_s_former_expressions():
    ds = _domains(n_per=50)
    ev = class_shapes(ClassMoments.from_features(ds.x, ds.y, 10)).eigenvalues
    assert torch.equal(trace_ratio(ev), (ev**2).sum(1) / ev.sum(1))
    assert torch.equal(numerical_ranks(ev).double(), (ev > 1e-8 * ev[:, :1]).sum(1).double())
    # against their definitions: tr(C @ C) / tr(C) of each class covariance, and the rank of a
    # covariance built with rank 2 (3 classes in 4 dimensions; a batch of them reads the last axis)
    cov = ClassMoments.from_features(ds.x.double(), ds.y, 10).class_covariances()
    by_trace = torch.stack([torch.trace(c @ c) / torch.trace(c) for c in cov])
    assert torch.allclose(trace_ratio(torch.linalg.eigvalsh(cov).flip(-1)), by_trace, rtol=1e-10)
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 2, generator=g, dtype=torch.float64)
    ev2 = torch.linalg.eigvalsh(a @ a.T).flip(-1)
    assert numerical_ranks(ev2[None]).tolist() == [2] == [int(torch.linalg.matrix_rank(a @ a.T))]
    assert numerical_ranks(torch.stack([ev2[None], ev2[None]])).shape == (2, 1)
    with pytest.raises(ValueError, match="tol must be a finite number >= 0.0, got -1"):
        numerical_ranks(ev, tol=-1)


@pytest.mark.parametrize("change, message", [
    (dict(encoder_sees="some"), "encoder_sees must be 'all' or 'mnist', got 'some'"),
    (dict(rounds=0), "rounds must be an int >= 1, got 0"),
    (dict(early=1.5), "early must be an int >= 1, got 1.5"),
    (dict(public_fraction=1.0), r"public_fraction must be a finite number > 0.0 and < 1.0, got 1.0"),
    (dict(domain_max=0), "domain_max must be an int >= 1, got 0"),
    (dict(embedding_scale=0.0), "embedding_scale must be a finite number"),
    (dict(early=2), "early must be a training round, 1 to rounds = 1, got 2"),
    (dict(eval_every=2), "eval_every must be 1 .every curve is read at round early = 1., got 2"),
    (dict(similarity_method="cosine"), "unknown similarity_method 'cosine'; valid: paper, subspace"),
    (dict(train=TrainConfig(steps=3)), "train must count epochs, not steps .* got steps=3"),
])
def test_the_study_refuses_bad_settings(change, message):
    with pytest.raises(ValueError, match=message):
        GGEURStudy(**{**SIZES, **change})


def test_the_study_s_pieces_refuse_bad_input(tiny_federation):
    study = GGEURStudy(**SIZES)
    with pytest.raises(ValueError, match="beta must be a finite number > 0.0, got 0.0"):
        study.label_federation(None, 0.0, 0)
    with pytest.raises(ValueError, match="total must be an int >= 1, got 0"):
        study.label_methods(tiny_federation, 3, 0)
    with pytest.raises(ValueError, match="sees must be 'all' or 'mnist', got 'usps'"):
        study.domain_federation(0, sees="usps")
    with pytest.raises(ValueError, match="seeds must hold at least one run seed, got none"):
        study.run_label([], [0.5])
    with pytest.raises(ValueError, match="betas must hold at least one concentration, got none"):
        study.run_label([0], [])
    assert list(study.label_methods(tiny_federation, 3, 10)) == list(LABEL_METHODS)
    assert list(study.domain_runs(tiny_federation)) == DOM_ORDER
    assert study.matched([40, 60]).steps == 2  # ceil(50 / 32) batches, one epoch
    # the matched controls keep the study's optimizer, momentum and weight decay
    sgd = GGEURStudy(**{**SIZES, "train": TrainConfig(epochs=2, batch_size=32, optimizer="sgd", lr=0.1, weight_decay=1e-4)})
    m = sgd.matched([40, 60])
    assert (m.optimizer, m.momentum, m.weight_decay, m.lr, m.batch_size, m.steps) == ("sgd", 0.9, 1e-4, 0.1, 32, 4)


@pytest.fixture(scope="module")
def tiny_runs(one_thread):
    study = GGEURStudy(**SIZES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SequentialFallback)
        first = study.label_embeddings(0)
        label = study.run_label([0], [0.5], first=first)
        dom_first = study.domain_federation(0)
        domain = study.run_domain([0], first=dom_first)
    return study, first, label, dom_first, domain


def test_domain_readers_on_some_seeds():
    """Seed 2 made the headline runs only and has no similarity rows (its encoder is the first seed's)."""
    runs = _domain_runs()
    extra = pd.DataFrame([{"seed": 2, "base": "FedAvg", "method": m, "mnist": 2.0, "AVG": 20.0 + i, "STD": 1.0}
                          for i, m in enumerate(("FedAvg", STEPS12))])
    runs = DomainRuns(pd.concat([runs.table, extra]), runs.similarity, {}, [0, 1, 2])
    assert runs.value("FedAvg", STEPS12).tolist() == [2.0, 12.0, 21.0]
    assert runs.value("FedAvg", STEP1).tolist() == [1.0, 11.0]
    with pytest.raises(ValueError, match=r"\('FedAvg', '\+ GGEUR \(step 1\)'\) was not made on seeds \[2\]; it was on \[0, 1\]"):
        runs.value("FedAvg", STEP1, "AVG", [0, 2])
    assert runs.similarity_seeds == [0, 1] and runs.rowmax_share(10).tolist() == [12 / 30, 15 / 30]
    assert runs.diagonal_gaps().index.tolist() == [0, 1]


def test_a_tiny_study_with_headline_seeds(one_thread):
    """Two seeds: the second makes the headline runs only (label skew: on the first seed's frozen
    encoder; domain skew: on its own, with its own similarity rows); the first seed's runs are those
    of a one-seed study."""
    study = GGEURStudy(**{**SIZES, "rounds": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SequentialFallback)
        first = study.label_embeddings(0)
        label = study.run_label([0, 1], [0.5, 0.1], first=first, full=1)
        alone = study.run_label([0], [0.5, 0.1], first=first)
        dom_first = study.domain_federation(0)
        domain = study.run_domain([0, 1], first=dom_first, full=1)
    t = label.table
    assert t[t.seed == 1].method.tolist() == list(HEADLINE_LABEL) * 2
    assert t[(t.seed == 0) & (t.beta == 0.5)].method.tolist() == [m for m in LABEL_METHODS if m not in LOW_BETA_ONLY]
    assert t[(t.seed == 0) & (t.beta == 0.1)].method.tolist() == list(LABEL_METHODS)
    assert label.accuracy(0.1, GGEUR_CODE, [0]).tolist() == alone.accuracy(0.1, GGEUR_CODE).tolist()
    d = domain.table
    assert list(zip(d[d.seed == 1].base, d[d.seed == 1].method)) == HEADLINE_DOM
    assert list(zip(d[d.seed == 0].base, d[d.seed == 0].method)) == DOM_ORDER
    assert domain.similarity_seeds == [0, 1] and domain.diagonal_gaps().shape == (2, 3)
    # the label-skew seeds share the first seed's embeddings: seed 1's clients draw from them
    fed1 = study.label_federation(first.embeddings, 0.5, 1)
    rows = {tuple(r) for r in first.embeddings.x.tolist()}
    assert all(tuple(r) in rows for c in fed1.clients for r in c.train.x[:5].tolist())


def test_a_tiny_study_end_to_end(tiny_runs):
    study, first, label, dom_first, domain = tiny_runs
    assert label.table.method.tolist() == list(LABEL_METHODS) and set(label.table.seed) == {0}
    assert set(label.curves) == {(0, 0.5, m) for m in LABEL_METHODS} and label.seconds > 0
    # the statistics round is not a training round: one training round (rounds=1) is round 1 of
    # every curve; an augmentation method's curve also has round 0, its statistics round
    assert label.curves[(0, 0.5, "FedAvg")].index.tolist() == [1]
    assert label.curves[(0, 0.5, GGEUR_CODE)].index.tolist() == [0, 1]
    assert [(b, v) for b, v in zip(domain.table.base, domain.table.method)] == DOM_ORDER
    assert list(domain.first_matrices) == ["uci", "mnist_rotated", "mnist_inverted"]
    assert domain.value("FedAvg", "FedAvg").shape == (1,)
    row = domain.row(0, "FedAvg", "FedAvg")
    per = row[list(dom_first.domains.domain_names)].to_numpy(dtype=float)
    assert row["AVG"] == pytest.approx(per.mean()) and row["STD"] == pytest.approx(per.std())


def test_the_worked_solutions_reduced_run_repeats_the_chapter_s_run(tiny_runs):
    """Same seed, same results: the first seed re-run at the chapter's total gives the chapter's accuracies."""
    study, first, label, _, _ = tiny_runs
    again = study.first_seed_label(first.embeddings, 0.5, 0, study.total_per_class, ["FedAvg", LABEL_METHODS[3]])
    assert again == {m: label.of_seed(0, 0.5, m) for m in again}
    with pytest.raises(ValueError, match=r"unknown label-skew runs \['FedSGD'\]; valid: FedAvg, "):
        study.first_seed_label(first.embeddings, 0.5, 0, 10, ["FedSGD"])
