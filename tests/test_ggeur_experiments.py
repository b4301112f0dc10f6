"""The studies and readings of the chapter ``ggeur_experiments`` (fedbook.studies.ggeur_experiments): the
claims' reads of the chapter's frames against the former readers' arithmetic (pivots per seed), the
similarity rows against the chapter's former loop, the numbers and sentences of the prose by hand,
the claims paragraph's branches, the errors, and tiny studies end to end (headline seeds, workers,
the cache, the worked solutions' reduced runs)."""

from __future__ import annotations

import warnings
from functools import partial
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

import fedbook.studies.ggeur_experiments as gg
from fedbook.page import sign_word
from fedbook.claims import (DOES_NOT_HOLD, OPPOSITE, SHORTFALLS, SMALLER, UNTESTABLE_SETTING, VERDICTS, Claim, Read,
                            RegimeCheck, evaluate, says)
from fedbook.study import Study, run_study
from fedlib.data import ArrayDataset
from fedlib.engines.vectorized import SequentialFallback
from fedbook.studies.ggeur_experiments import (DIFFERENT, DOM_ORDER, GAIN_STEP2, GGEUR_CODE, GGEUR_PAPER, HEADLINE_DOM, HEADLINE_LABEL,
                                   LABEL_METHODS, LOW_BETA_ONLY, NORM, PROBE, PROBE_THRESHOLD, ROWMAX, SAME, STEP1, STEPS12,
                                   ZEROS, GGEURStudy, chapter_frames, claims_reading, curve_drops, diagonal_gap, domain_cell,
                                   encoder_column, label_cell, probe_numbers, probe_rows, similarity_rows)
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
    ds = _domains(n_per=60)
    domain = pd.DataFrame({"seed": [0, 0, 0, 1], "base": ["FedAvg"] * 4, "method": ["FedAvg", STEP1, STEPS12, "FedAvg"],
                           "AVG": [50.0, 53.0, 52.0, 1.0], "STD": [4.0, 3.0, 2.0, 1.0]})
    sims = pd.DataFrame([{"seed": 0, "similarity": m, **{k: v for k, v in r.items() if k != "seed"}}
                         for m in ("paper", "subspace") for r in similarity_rows(0, ds, ds, 2, m)[0]])
    col = encoder_column(domain, sims, 0)
    assert col["AVG, FedAvg (%)"] == 50.0 and col["STD, FedAvg (points)"] == 4.0
    assert col["gain of step 1 over FedAvg, AVG (points)"] == 3.0 and col[GAIN_STEP2] == -1.0
    # the former column: diagonal_gap of the similarity rows computed from the embeddings, under both similarities
    assert col["S same − different classes, paper's S"] == diagonal_gap(similarity_rows(0, ds, ds, 2)[0])
    assert col["S same − different classes, subspace S"] == diagonal_gap(similarity_rows(0, ds, ds, 2, method="subspace")[0])


def _label_frame(full=(0, 1), seeds=(0, 1, 2), betas=(0.5, 0.1)) -> pd.DataFrame:
    """A label-skew study's frame as run_study makes it: β outermost, seeds innermost; every run on a
    full seed (those of LOW_BETA_ONLY at the lowest β only), the headline runs on another seed."""
    rows = []
    for b in betas:
        for s in seeds:
            names = ([m for m in LABEL_METHODS if m not in LOW_BETA_ONLY or b == min(betas)] if s in full
                     else list(HEADLINE_LABEL))
            for i, m in enumerate(names):
                rows.append({"beta": b, "seed": s, "method": m, "accuracy (%)": 10.0 * s + b + i + 0.3 * (m == GGEUR_CODE),
                             "early (%)": 5.0 * s + i, "drops": 0.5 * i + s, "full": s in full, "seconds": 0.1})
    return pd.DataFrame(rows)


def _former(frame: pd.DataFrame, column: str, beta: float, method: str, seeds) -> np.ndarray:
    """The former reader of the label-skew runs (LabelRuns): a pivot per seed, on the seeds read."""
    return (frame.pivot_table(index="seed", columns=["beta", "method"], values=column)[(beta, method)].dropna()
            .reindex(list(seeds)).to_numpy())


def test_the_claims_reads_of_the_label_frame_equal_the_former_pivots():
    label = _label_frame()
    results = {"label": label}
    for b in (0.5, 0.1):
        for m in HEADLINE_LABEL:  # a headline row reads every seed that made the run
            got = Read("label", "accuracy (%)", beta=b, method=m)(results)
            assert got.index.tolist() == [0, 1, 2]
            assert np.array_equal(got.to_numpy(), _former(label, "accuracy (%)", b, m, [0, 1, 2]))
        for m in LABEL_METHODS:  # the other rows read the full seeds
            if m in LOW_BETA_ONLY and b != 0.1:
                continue
            for column in ("accuracy (%)", "early (%)", "drops"):
                got = Read("label", column, beta=b, method=m, full=True)(results)
                assert got.index.tolist() == [0, 1] and np.array_equal(got.to_numpy(), _former(label, column, b, m, [0, 1]))
    # a row against every baseline of a tuple, paired unit by unit
    c = Claim("x", "q", "s", "accuracy, X − Y, points", "greater", resolution=0.1, versus=("FedAvg", "FedMix-style"),
              ours=Read("label", "accuracy (%)", beta=0.5, method=GGEUR_CODE, full=True),
              baseline={m: Read("label", "accuracy (%)", beta=0.5, method=m, full=True) for m in ("FedAvg", "FedMix-style")})
    ours, baseline, within = c.read(results)
    assert np.array_equal(ours, _former(label, "accuracy (%)", 0.5, GGEUR_CODE, [0, 1])) and within is None
    assert np.array_equal(baseline["FedMix-style"], _former(label, "accuracy (%)", 0.5, "FedMix-style", [0, 1]))
    # without full=True, GGEUR's headline seed has no FedMix-style run to pair with: refused, not dropped
    bad = Claim("x", "q", "s", "accuracy, X − Y, points", "greater", resolution=0.1,
                ours=Read("label", "accuracy (%)", beta=0.5, method=GGEUR_CODE),
                baseline=Read("label", "accuracy (%)", beta=0.5, method="FedMix-style"))
    with pytest.raises(ValueError, match="the two sides must be paired unit by unit"):
        bad.read(results)


def _domain_frames(seeds=(0, 1, 2), full=(0, 1), names=("mnist", "uci", "mnist_rotated", "mnist_inverted")) -> dict:
    """A domain-skew study's frames as run_study makes them (seeds in order; a headline seed makes HEADLINE_DOM only)."""
    rows, sims, maps = [], [], []
    for s in seeds:
        for i, (b, v) in enumerate(DOM_ORDER if s in full else HEADLINE_DOM):
            rows.append({"seed": s, "base": b, "method": v, **{n: 10.0 * j + s + i for j, n in enumerate(names)},
                         "AVG": 10.0 * s + i + 0.25, "STD": float(i) + 0.5 * s, "full": s in full, "seconds": 0.1})
        for m, shift in (("paper", 0.0), ("subspace", 1.0)):
            for j, o in enumerate(names[1:]):
                sims.append({"seed": s, "similarity": m, "other domain": o, SAME: 2.0 + s + 0.1 * j + shift,
                             DIFFERENT: 1.0 + 0.05 * j, ROWMAX: float(3 + s + j)})
                maps += [{"seed": s, "similarity": m, "other domain": o, "row": r, "column": c, "S": float(r == c) + shift}
                         for r in range(2) for c in range(2)]
    return {"domain": pd.DataFrame(rows), "similarity": pd.DataFrame(sims), "heatmaps": pd.DataFrame(maps),
            "domain_sizes": pd.DataFrame([{"seed": s, "domain": n, "domain size": 100, "client train": 10, "domain test": 20,
                                           "classes held": 10} for s in seeds for n in names]),
            "domain_encoder": pd.DataFrame({"seed": list(seeds), "public images": [30] * len(seeds), "classes": [10] * len(seeds),
                                            "embedding dimension": [8] * len(seeds)}),
            # the probe: the last domain is the weakest (30 % on seed 0, 10 points more per seed), the others 85, 80, 75 % + seed
            "probe": pd.DataFrame([{"seed": s, "domain": n, PROBE: 30.0 + 10 * s if j == 3 else 85.0 - 5 * j + s,
                                    ZEROS: 99.0 if j == 3 else 80.0 + j, NORM: 0.5 if j == 3 else 8.0 - j}
                                   for s in seeds for j, n in enumerate(names)])}


def test_chapter_frames_equal_the_former_arithmetic():
    label, domain = _label_frame(), _domain_frames()
    F = chapter_frames({"label": label, "label_curves": pd.DataFrame()}, domain, "paper")
    assert set(F) >= {"label", "label_curves", "label_gain", "domain", "similarity", "heatmaps", "fig6", "leads"}
    assert "similarity" not in F["similarity"].columns and F["similarity"][SAME].tolist()[:3] == [2.0, 2.1, 2.2]
    assert set(F["heatmaps"]["S"]) == {0.0, 1.0}  # the paper's S only
    # label_gain: GGEUR − FedAvg per seed, as the former trend row computed it
    for b in (0.5, 0.1):
        former = _former(label, "accuracy (%)", b, GGEUR_CODE, [0, 1, 2]) - _former(label, "accuracy (%)", b, "FedAvg", [0, 1, 2])
        assert np.array_equal(Read("label_gain", "gain", beta=b)(F).to_numpy(), former)
    # the former DomainRuns: one run's column per seed, each heat map's diagonal lead, the row-maximum share
    table = domain["domain"]
    d = table.set_index(["seed", "base", "method"])
    for b, v in HEADLINE_DOM:
        assert np.array_equal(Read("domain", "AVG", base=b, method=v)(F).to_numpy(),
                              d.xs((b, v), level=("base", "method"))["AVG"].reindex([0, 1, 2]).to_numpy())
    assert np.array_equal(Read("domain", "STD", base="FedAvg", method=STEP1, full=True)(F).to_numpy(),
                          d.xs(("FedAvg", STEP1), level=("base", "method"))["STD"].reindex([0, 1]).to_numpy())
    sim = domain["similarity"][domain["similarity"].similarity == "paper"]
    gaps = sim.assign(gap=sim[SAME] - sim[DIFFERENT]).pivot(index="seed", columns="other domain", values="gap")
    for o in ("uci", "mnist_rotated", "mnist_inverted"):
        assert np.array_equal(Read("leads", "minus lead", other=o)(F).to_numpy(), -gaps[o].reindex([0, 1, 2]).to_numpy())
        assert Read("leads", "lead", other=o)(F).tolist() == pytest.approx([1.0 + s + 0.05 * ("uci", "mnist_rotated",
                                                                                                   "mnist_inverted").index(o)
                                                                              for s in (0, 1, 2)])
    share = (sim.groupby("seed")[ROWMAX].sum().reindex([0, 1, 2]) / (10 * 3)).to_numpy()
    assert np.array_equal(Read("fig6", "rowmax share (%)")(F).to_numpy(), 100 * share)
    assert F["fig6"]["rowmax share (%)"].tolist() == pytest.approx([100 * 12 / 30, 100 * 15 / 30, 100 * 18 / 30])
    assert Read("fig6", "zero")(F).tolist() == [0.0, 0.0, 0.0]
    # the Figure 6 row: ours − each heat map's baseline is its lead
    c = Claim("fig6", "q", "s", "S, same − different", "greater", resolution=0.01, versus=("uci", "mnist_rotated"),
              ours=Read("fig6", "zero"), baseline={o: Read("leads", "minus lead", other=o) for o in ("uci", "mnist_rotated")})
    ours, baseline, _ = c.read(F)
    assert np.array_equal(ours - baseline["uci"], gaps["uci"].to_numpy())
    # per heat map, its own row-maximum share (the claim reads UCI's against chance; the controls each transform's excess)
    rowmax = sim.pivot(index="seed", columns="other domain", values=ROWMAX)
    for o in ("uci", "mnist_rotated", "mnist_inverted"):
        own = 100 * rowmax[o].reindex([0, 1, 2]).to_numpy() / 10
        assert np.array_equal(Read("leads", "rowmax share (%)", other=o)(F).to_numpy(), own)
        assert np.allclose(Read("leads", "minus rowmax excess", other=o)(F).to_numpy(), -(own - 10.0))
    t = Claim("t", "q", "s", "share − chance", "greater", resolution=10.0, versus=("mnist_rotated", "mnist_inverted"),
              ours=Read("fig6", "zero"), baseline={o: Read("leads", "minus rowmax excess", other=o)
                                                   for o in ("mnist_rotated", "mnist_inverted")})
    ours, baseline, _ = t.read(F)
    assert np.allclose(ours - baseline["mnist_inverted"], 100 * rowmax["mnist_inverted"].reindex([0, 1, 2]).to_numpy() / 10 - 10)
    per_cosine = chapter_frames({"label": label}, domain, "paper", k=4)["leads"]  # S / k: the lead per cosine
    assert np.allclose(per_cosine["lead per cosine"], F["leads"]["lead"] / 4)
    assert np.allclose(per_cosine["minus lead per cosine"], -F["leads"]["lead"] / 4)
    assert "lead per cosine" not in F["leads"]
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        chapter_frames({"label": label}, domain, "paper", k=0)
    subspace = chapter_frames({"label": label}, domain, "subspace")
    assert subspace["similarity"][SAME].tolist()[:3] == [3.0, 3.1, 3.2]
    with pytest.raises(ValueError, match="unknown similarity 'cosine'; valid: paper, subspace"):
        chapter_frames({"label": label}, domain, "cosine")
    broken = label[~((label.seed == 2) & (label.method == "FedAvg"))]
    with pytest.raises(ValueError, match=r"at beta = 0.5, GGEUR ran on seeds \[0, 1, 2\] and FedAvg on \[0, 1\]"):
        chapter_frames({"label": broken}, domain)


def test_probe_rows_by_hand():
    """The probe of each domain is scikit-learn's logistic regression on standardized coordinates, fitted on the client's
    train embeddings and scored on its test embeddings; a domain whose embeddings are all zero scores at chance."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from fedlib.federation import ClientData, Federation
    g = torch.Generator().manual_seed(1)
    y = torch.arange(120) % 3
    signal = ArrayDataset(torch.randn(120, 4, generator=g) + 2.0 * torch.nn.functional.one_hot(y, 4), y, 3, "toy")
    dead = ArrayDataset(torch.zeros(120, 4), y, 3, "toy")
    fed = Federation([ClientData(signal.subset(range(60)), signal.subset(range(60, 120))),
                      ClientData(dead.subset(range(60)), dead.subset(range(60, 120)))], signal, 3, {})
    rows = probe_rows(fed, ["a", "b"])
    by_hand = make_pipeline(StandardScaler(), LogisticRegression(max_iter=gg.PROBE_MAX_ITER))
    by_hand.fit(signal.x[:60].double().numpy(), y[:60].numpy())
    assert rows[0][PROBE] == 100 * by_hand.score(signal.x[60:].double().numpy(), y[60:].numpy()) and rows[0][PROBE] > 60
    assert rows[1][PROBE] == pytest.approx(100 / 3) and rows[1][ZEROS] == 100.0 and rows[1][NORM] == 0.0
    assert rows[0][NORM] == pytest.approx(float(signal.x.double().norm(dim=1).mean())) and rows[0][ZEROS] == 0.0
    assert probe_rows(fed, ["a", "b"]) == rows  # deterministic
    with pytest.raises(ValueError, match=r"names must name each of the 2 clients' domains, got \['a'\]"):
        probe_rows(fed, ["a"])


def test_the_signal_check_reads_each_domains_mean_over_the_seeds_and_takes_the_weakest():
    F = chapter_frames({"label": _label_frame()}, _domain_frames(), "paper")
    assert F["probe"].index.names == ["seed", "domain"] and len(F["probe"]) == 3 * 4
    check = RegimeCheck("signal in every domain", "probe, %", Read("probe", PROBE), "at least", PROBE_THRESHOLD, "why",
                        summary="min", by="domain")
    reading = check.check(F)
    assert reading.value == 40.0 and not reading.passes  # mnist_inverted: 30, 40 and 50 over the seeds
    c = Claim("dom", "q", "s", "AVG, points", "greater", resolution=0.1, regimes=(check,))
    assert evaluate(c, [2.0, 3.0, 2.5], regimes=[reading]).verdict == UNTESTABLE_SETTING
    passing = chapter_frames({"label": _label_frame()}, _domain_frames(seeds=(2,), full=(2,)), "paper")
    assert check.check(passing).value == 50.0 and check.check(passing).passes  # 30 + 10 × 2
    no_probe = {k: v for k, v in _domain_frames().items() if k != "probe"}
    assert "probe" not in chapter_frames({"label": _label_frame()}, no_probe, "paper")


def test_probe_numbers_by_hand_and_both_readings():
    names = ["mnist", "uci", "mnist_rotated", "mnist_inverted"]
    F = chapter_frames({"label": _label_frame()}, _domain_frames(), "paper")
    n, table = probe_numbers(F["probe"], PROBE_THRESHOLD, names)
    assert (n["probe_min"], n["probe_min_domain"], n["probe_min_seed"], n["probe_threshold"]) == (30.0, "mnist_inverted", 0, 50.0)
    assert (n["probe_failed"], n["probe_domains"], n["probe_weak"]) == (1, 4, "mnist_inverted")  # its mean, 40, is below
    assert n["probe_weak_acc"] == 40.0 and n["probe_weak_zeros"] == 99.0 and n["probe_weak_norm"] == 0.5
    assert n["probe_rest_acc"] == 76.0 and n["probe_rest_zeros"] == 82.0 and n["probe_rest_norm"] == 6.0
    assert n["probe_reading"].startswith("the check fails: 1 of the 4 domains fall below it on average (mnist_inverted)")
    assert "as CLIP does in the paper" in n["probe_reading"]
    html = table.to_html()
    assert PROBE in html and [html.index(f">{d}<") for d in names] == sorted(html.index(f">{d}<") for d in names)
    ok, _ = probe_numbers(F["probe"], 20.0, names)
    assert ok["probe_failed"] == 0 and ok["probe_reading"].startswith("the check passes")


def test_label_numbers_and_table_by_hand():
    label = _label_frame()
    n = gg.label_numbers(label, 0.1, 0.5)
    # means over the full seeds (0, 1): FedAvg is run 0, GGEUR run 3 (+0.3), FedMix-style with matched steps run 6
    assert n["acc_fedavg_lo"] == pytest.approx(5.1) and n["acc_ggeur_lo"] == pytest.approx(8.4)
    assert n["gain_lo"] == pytest.approx(3.3) and n["gain_hi"] == pytest.approx(3.3) and n["early_ms"] == pytest.approx(3.5)
    assert n["acc_fedfa_lo"] == pytest.approx(12.1) and n["fa_gain_lo"] == pytest.approx(7.0)
    assert n["acc_fedavg_lo"] == float(_former(label, "accuracy (%)", 0.1, "FedAvg", [0, 1]).mean())
    assert all(type(v) is float for v in n.values()) and len(n) == 7 + 6 + 3
    with pytest.raises(ValueError, match=r"no label-skew run 'FedAvg' at beta = 0.05 on the full seeds"):
        gg.label_numbers(label, 0.05, 0.5)
    html = gg.label_table(label, [0.5, 0.1]).to_html()
    assert "accuracy (%), β = 0.5" in html and "—" in html  # FedMix-style with matched steps: the lowest β only
    assert gg.of_seed(label, 1, 0.5, "FedAvg") == 10.5
    with pytest.raises(ValueError, match=r"no label-skew run 'FedAvg, matched steps' at beta = 0.5 on seed 2"):
        gg.of_seed(label, 2, 0.5, "FedAvg, matched steps")


def test_domain_and_similarity_numbers_by_hand():
    F = chapter_frames({"label": _label_frame()}, _domain_frames(), "paper")
    names = ["mnist", "uci", "mnist_rotated", "mnist_inverted"]
    n, table = gg.domain_numbers(F["domain"], names)
    # FedAvg is run 0 of DOM_ORDER, its GGEUR steps 1 and 2 runs 1 and 2; AVG = 10 seed + run + 0.25 over seeds 0, 1
    assert n["dom_FedAvg_avg"] == 5.25 and n["dom_FedAvg_s1"] == 6.25 and n["dom_FedAvg_s12"] == 7.25
    assert n["dom_FedProto_std12"] == pytest.approx(7.25) and "dom_FedProto_s1" not in n
    assert (n["dom_min_name"], n["dom_max_name"], n["n_domains"]) == ("mnist", "mnist_inverted", 4)
    assert n["dom_min"] == 0.5 and n["dom_max"] == 30.5
    # every domain moves by one point from seed 0 to 1, AVG by 10: the seeds move the domains together
    assert n["swing_avg"] == 0.25 and n["avg_range"] == 10.0 and n["swing_reading"].startswith("the seeds move the domains together")
    assert "FedAvg + GGEUR (steps 1 & 2)" in table.to_html()
    s, sim_table = gg.similarity_numbers(F)
    assert s["sim_diag"] == pytest.approx(3.1) and s["sim_off"] == pytest.approx(1.05)
    assert s["sim_rowmax"] == 15.0 and s["sim_rowmax_of"] == 30 and s["sim_rowmax_pct"] == pytest.approx(50.0)
    assert s["chance_pct"] == 10.0 and f"{ROWMAX} (of 10)" in sim_table.to_html()


def test_swing_reading_has_both_cases():
    names = ["a", "b"]
    one = pd.DataFrame({"a": [50.0, 90.0], "b": [60.0, 60.0], "AVG": [55.0, 75.0]}, index=pd.Index([0, 1], name="seed"))
    assert gg.swing_reading(one, names) == "one domain accounts for most of AVG's spread over the seeds"
    # three domains moving by 10 points each: each alone moves AVG by 10 / 3, less than half AVG's range of 10
    together = pd.DataFrame({"a": [50.0, 60.0], "b": [52.0, 62.0], "c": [40.0, 50.0], "AVG": [47.0, 57.0]},
                            index=pd.Index([3, 4], name="seed"))
    assert gg.swing_reading(together, ["a", "b", "c"]) == ("the seeds move the domains together (in seed 3, the weakest, FedAvg's best "
                                                 "domain reaches 52.0 %), so it is the seed, not one domain, that widens the "
                                                 "AVG intervals")


def _settings(**change):
    values = dict(n_seeds=2, headline_seeds=3, level=0.95, public_fraction=0.2, encoder_epochs=1, n_clients=3, batch_size=32,
                  lr=1e-2, local_epochs=1, rounds=9, total_per_class=10, betas=[0.5, 0.1], domain_public=0.2, domain_test=0.2,
                  domain_client=0.2, encoder_sees="all", hidden=8, k=2, n_samples=300, encoder_width=8, global_test_per_class=3,
                  per_prototype=5, domain_rounds=1, label_classifier="linear", domain_classifier="mlp", prox_mu=0.01,
                  proto_lam=2.0, domain_max=60, embedding_scale=1.0, eval_every=1, similarity="paper",
                  encoder_standardize=True, encoder_features="linear")
    return SimpleNamespace(**{**values, **change})


def test_the_study_from_the_settings_and_the_settings_republished():
    P = _settings()
    cfg = GGEURStudy.from_settings(P)
    assert cfg.early == 1 and cfg.train.epochs == 1 and cfg.train.optimizer == "adam" and cfg.train.lr == 1e-2
    assert (cfg.n_samples, cfg.domain_max, cfg.total_per_class, cfg.k) == (300, 60, 10, 2)
    assert GGEURStudy.from_settings(_settings(rounds=10)).early == 2
    with pytest.raises(ValueError, match="unknown similarity 'cosine'; valid: paper, subspace"):
        GGEURStudy.from_settings(_settings(similarity="cosine"))
    with pytest.raises(ValueError, match="encoder_sees must be 'all' or 'mnist', got 'some'"):
        GGEURStudy.from_settings(_settings(encoder_sees="some"))
    paper = {"total_per_class": 2000, "rounds": 100, "local_epochs": 10, "lr": 1e-3, "domain_rounds": 50}
    n = gg.setting_numbers(P, paper, cfg.early)
    assert (n["b_lo"], n["b_hi"], n["early_round"], n["paper_total"], n["level_pct"]) == (0.1, 0.5, 1, 2000, 95.0)
    assert n["dom_enc_sees"] == "the public parts of every domain" and type(n["public_pct"]) is float
    assert gg.setting_numbers(_settings(encoder_sees="mnist"), paper, 1)["dom_enc_like_clip"] == \
        "unlike CLIP it has seen one domain only"
    sub = gg.substitutions(P, paper)
    assert sub["label"].startswith("CLIP (ViT-B/16") and "10 instead of 2000 samples per class; 9 rounds × 1" in sub["label"]
    assert "public 20 % of every domain" in sub["dom"] and "nearly guaranteed by the design" in sub["fig6"]
    assert "MNIST only" in gg.substitutions(_settings(encoder_sees="mnist"), paper)["fig6"]
    assert "(1 epochs; inputs standardized per image, the embedding taken before the last ReLU), frozen" in sub["label"]
    plain = gg.substitutions(_settings(encoder_standardize=False, encoder_features="relu"), paper)
    assert "(1 epochs), frozen" in plain["label"] and "every domain, one trained per seed" in plain["dom"]
    assert gg.encoder_words(_settings(encoder_standardize=False)) == "; the embedding taken before the last ReLU"
    assert cfg.encoder_standardize and cfg.encoder_features == "linear"
    with pytest.raises(ValueError, match="unknown encoder_features 'pooled'; valid: relu, linear"):
        GGEURStudy.from_settings(_settings(encoder_features="pooled"))


def test_curve_drops_by_hand():
    # FedAvg falls 50 -> 40 and 45 -> 30 (10 + 15 points); GGEUR 60 -> 58 (2 points), its round 0 not read
    assert curve_drops(pd.Series([0.50, 0.40, 0.45, 0.30], index=[1, 2, 3, 4])) == pytest.approx(25.0)
    assert curve_drops(pd.Series([0.10, 0.50, 0.60, 0.60, 0.58], index=[0, 1, 2, 3, 4])) == pytest.approx(2.0)
    assert curve_drops(pd.Series([0.5], index=[1])) == 0.0


def _decided(values) -> object:
    return evaluate(Claim("x", "q", "s", "accuracy, X − Y, points", "greater", resolution=0.1), values)


def test_the_worked_solutions_numbers_and_sentences_by_hand():
    label = _label_frame(betas=(0.1,))
    g = torch.Generator().manual_seed(0)
    emb = ArrayDataset(torch.randn(60, 4, generator=g, dtype=torch.float64) * 3, torch.arange(60) % 3, 3, "toy")
    runs = pd.DataFrame({"beta": 0.1, "seed": 0, "method": ["FedAvg", "FedAvg, rebalanced", GGEUR_CODE, GGEUR_PAPER],
                         "accuracy (%)": [1.0, 3.0, 2.0, 2.5]})
    n = gg.exercise1(runs, label, 0, 0.1, emb, 0.1, noise=100.0)
    # the chapter's runs of seed 0 at β = 0.1: FedAvg 0.1, rebalanced 2.1, GGEUR 3.4, the paper's formula 4.1
    assert (n["ex1_fedavg_full"], n["ex1_rb_full"], n["ex1_code_full"], n["ex1_paper_full"]) == (0.1, 2.1, 3.4, 4.1)
    assert n["ex1_gap_small"] == 0.5 and n["ex1_code_move"] == pytest.approx(2.0 - 3.4) and n["ex1_scale"] == 0.1
    assert n["ex1_ratio"] < 1 and n["ex1_prb_small"] == -0.5  # 0.01 of the scale-1 ratio
    assert n["ex1_rb_reading"].startswith("closer to the rebalancing-only control") and n["ex1_rb_reading"].endswith("settle it)")
    assert n["ex1_move_reading"].startswith("they do not both move") and n["ex1_reading"].startswith("both gaps are within")
    small = gg.exercise1(runs.assign(**{"accuracy (%)": [0.0, 3.0, 2.0, 2.5]}), label, 0, 0.1, emb, 0.1, noise=0.01)
    assert small["ex1_rb_reading"] == "closer to the rebalancing-only control, as the ratio predicts"
    assert small["ex1_move_reading"].startswith("both move the same way") and small["ex1_reading"].startswith("at least one")
    # exercise 2: the chapter's run at its total, the reduced runs at the others
    ex2_runs = pd.DataFrame({"beta": 0.1, "total": [10, 10, 10, 150, 150, 150], "seed": 0, "method": gg.EX2_NAMES * 2,
                             "accuracy (%)": [20.0, 10.0, 15.0, 40.0, 30.0, 30.0]})
    e = gg.exercise2(ex2_runs, label, 0, 0.1, 30, noise=100.0)
    assert e["ex2_totals"] == "10, 30, 150" and e["ex2_peak"] == 150 and e["ex2_spread"] == pytest.approx(10.0 - 1.3)
    assert e["ex2_peak_reading"] == "it has not stopped growing by 150 samples per class"
    assert e["ex2_reading"].startswith("smaller than the seed-to-seed yardstick")
    assert "GGEUR − rebalanced (points)" in e["ex2_table"].to_html()
    e = gg.exercise2(ex2_runs.assign(**{"accuracy (%)": [40.0, 10.0, 15.0, 40.0, 30.0, 30.0]}), label, 0, 0.1, 30, noise=1.0)
    assert e["ex2_peak_reading"] == "on this seed it stops growing at 10 samples per class"
    assert e["ex2_reading"] == "larger than the seed-to-seed yardstick"
    # exercise 3: FedAvg's STD changes by 1.0 and step 2's gain by 2.0, against yardsticks
    own = _domain_frames()
    alt = {k: v[v.seed == 0] for k, v in _domain_frames(seeds=(0,), full=(0,)).items()}
    alt["domain"] = alt["domain"].assign(STD=alt["domain"]["STD"] + 1.0,
                                         AVG=alt["domain"]["AVG"] + 2.0 * (alt["domain"]["method"] == STEPS12))
    x = gg.exercise3(alt, own, 0, "all", 0.95, _decided([2.0, 3.0, 2.5]))
    assert (x["ex3_alt"], x["ex3_n_public"], x["ex3_std_d"], x["ex3_s2_mn"], x["ex3_s2_al"]) == ("mnist", 30, 1.0, 3.0, 1.0)
    assert x["ex3_diag_d"] == 0.0 and x["ex3_s2_noise"] == gg.yardstick(_decided([2.0, 3.0, 2.5]))
    assert x["ex3_reading"] == "only the step-2 change is larger than it"  # FedAvg's STD has a wide interval over 2 seeds
    assert "encoder on MNIST only" in x["ex3_table"].to_html()
    x = gg.exercise3(alt, own, 0, "all", 0.95, _decided([20.0, 30.0, 25.0]))
    assert x["ex3_reading"] == "both changes are within it, so this one seed is not conclusive"
    swapped = gg.exercise3(own, alt, 0, "mnist", 0.95, _decided([2.0, 3.0, 2.5]))  # the chapter's encoder saw MNIST only
    assert swapped["ex3_alt"] == "all" and swapped["ex3_std_d"] == x["ex3_std_d"] and swapped["ex3_s2_mn"] == 3.0


_FAILING = RegimeCheck("signal in every domain", "probe, %", Read("probe", PROBE), "at least", 50.0, "why", summary="min")


def _results(verdicts: dict[str, str], betas) -> dict:
    """Decided rows with the wanted outcomes (m = 0.4, the resolution's floor): holds from (2, 3, 2.5), the opposite direction
    from their negatives ("does not hold"), smaller than claimed from (0.2, 0.3, 0.25), untestable in this setting from a
    failing regime check, else one seed (inconclusive)."""
    values = {"holds": [2.0, 3.0, 2.5], "does not hold": [-2.0, -3.0, -2.5], SMALLER: [0.2, 0.3, 0.25],
              UNTESTABLE_SETTING: [2.0, 3.0, 2.5], "inconclusive at this scale": [1.0]}
    keys = [f"{k}-{b}" for b in betas for k in ("label-gain", "ctrl-rebalanced", "ctrl-matched", "label-outperforms")]
    keys += [f"ctrl-fedmix-matched-{min(betas)}", "label-convergence", "ctrl-convergence-matched", "label-smoother",
             "dom-gain-FedAvg", "ctrl-dom-matched", "digits-vs-peers"]
    out = {}
    for key in keys:
        wanted = verdicts.get(key, "inconclusive at this scale")
        regimes = (_FAILING,) if wanted == UNTESTABLE_SETTING else ()
        c = Claim(key, "q", "s", "accuracy, X − Y, points", "greater", resolution=0.1, regimes=regimes)
        readings = [_FAILING.check({"probe": pd.DataFrame({"domain": ["a"], PROBE: [30.0]}).set_index("domain")})] if regimes else ()
        out[key] = evaluate(c, values[wanted], regimes=readings)
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
    # the new outcomes: a control smaller than claimed, and untestable rows (a failing regime check)
    text = claims_reading(_results({"ctrl-rebalanced-0.5": SMALLER, "dom-gain-FedAvg": UNTESTABLE_SETTING,
                                    "ctrl-dom-matched": UNTESTABLE_SETTING}, betas), betas)
    assert gg.VS_COPIES[SMALLER] in text and "dom-gain-FedAvg is untestable in this setting (" in text
    assert "ctrl-dom-matched is untestable in this setting (" in text and gg.VS_STEPS[UNTESTABLE_SETTING] in text


def test_every_outcome_of_a_control_has_words():
    outcomes = {v for v in VERDICTS if v != DOES_NOT_HOLD} | set(SHORTFALLS)
    assert set(gg.VS_COPIES) == outcomes and set(gg.VS_STEPS) == outcomes
    assert _results({"label-gain-0.5": "does not hold"}, [0.5])["label-gain-0.5"].outcome == OPPOSITE


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
    assert list(study.label_methods(tiny_federation, 3, 10)) == list(LABEL_METHODS)
    assert list(study.domain_runs(tiny_federation)) == DOM_ORDER
    assert study.matched([40, 60]).steps == 2  # ceil(50 / 32) batches, one epoch
    # the matched controls keep the study's optimizer, momentum and weight decay
    sgd = GGEURStudy(**{**SIZES, "train": TrainConfig(epochs=2, batch_size=32, optimizer="sgd", lr=0.1, weight_decay=1e-4)})
    m = sgd.matched([40, 60])
    assert (m.optimizer, m.momentum, m.weight_decay, m.lr, m.batch_size, m.steps) == ("sgd", 0.9, 1e-4, 0.1, 32, 4)
    assert study.label_names(0.5, 0.1) == [m for m in LABEL_METHODS if m not in LOW_BETA_ONLY]
    assert study.label_names(0.1, 0.1) == list(LABEL_METHODS) and study.label_names(0.1, 0.1, False) == list(HEADLINE_LABEL)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SequentialFallback)
        return fn(*args, **kwargs)


@pytest.fixture(scope="module")
def tiny(one_thread):
    """The chapter's two studies at a tiny size: two β and two seeds, the second a headline seed."""
    study = GGEURStudy(**SIZES)
    setup = _quiet(study.label_embeddings, 0)
    label = Study("label", partial(label_cell, study=study, embeddings=setup.embeddings, full_seeds=[0], low_beta=0.1),
                  grid={"beta": [0.5, 0.1]}, seeds=[0, 1])
    domain = Study("domain", partial(domain_cell, study=study, full_seeds=[0]), seeds=[0, 1])
    return study, setup, label, _quiet(run_study, label), domain, _quiet(run_study, domain)


def test_a_tiny_label_study_with_a_headline_seed(tiny):
    study, setup, _, frames, _, _ = tiny
    t = frames["label"]
    assert t.columns.tolist()[:3] == ["beta", "seed", "method"] and t.beta.tolist()[0] == 0.5
    assert t[t.seed == 1].method.tolist() == list(HEADLINE_LABEL) * 2 and not t[t.seed == 1].full.any()
    assert t[(t.seed == 0) & (t.beta == 0.5)].method.tolist() == [m for m in LABEL_METHODS if m not in LOW_BETA_ONLY]
    assert t[(t.seed == 0) & (t.beta == 0.1)].method.tolist() == list(LABEL_METHODS) and t[t.seed == 0].full.all()
    c = frames["label_curves"]
    # the statistics round is not a training round: one training round (rounds=1) is round 1 of every curve;
    # an augmentation method's curve also has round 0, its statistics round
    assert c[(c.seed == 0) & (c.beta == 0.5) & (c.method == "FedAvg")]["round"].tolist() == [1]
    run = c[(c.seed == 0) & (c.beta == 0.5) & (c.method == GGEUR_CODE)]
    assert run["round"].tolist() == [0, 1]
    row = t[(t.seed == 0) & (t.beta == 0.5) & (t.method == GGEUR_CODE)].iloc[0]
    assert row["early (%)"] == 100 * run["accuracy"].iloc[1] and row["drops"] == curve_drops(run.set_index("round")["accuracy"])
    # the label-skew seeds share the first seed's embeddings: seed 1's clients draw from them
    fed1 = study.label_federation(setup.embeddings, 0.5, 1)
    rows = {tuple(r) for r in setup.embeddings.x.tolist()}
    assert all(tuple(r) in rows for cl in fed1.clients for r in cl.train.x[:5].tolist())


def test_a_tiny_domain_study_with_a_headline_seed(tiny):
    _, _, _, _, _, frames = tiny
    d = frames["domain"]
    assert list(zip(d[d.seed == 1].base, d[d.seed == 1].method)) == HEADLINE_DOM
    assert list(zip(d[d.seed == 0].base, d[d.seed == 0].method)) == DOM_ORDER
    names = frames["domain_sizes"][frames["domain_sizes"].seed == 0]["domain"].tolist()
    assert names == ["mnist", "uci", "mnist_rotated", "mnist_inverted"]
    per = d.iloc[0][names].to_numpy(dtype=float)
    assert d.iloc[0]["AVG"] == pytest.approx(per.mean()) and d.iloc[0]["STD"] == pytest.approx(per.std())
    sims = frames["similarity"]
    assert sims.groupby(["seed", "similarity"]).size().tolist() == [3] * 4  # both seeds, both similarities, 3 other domains
    maps = frames["heatmaps"]
    assert len(maps) == 2 * 2 * 3 * 10 * 10 and frames["domain_encoder"]["classes"].tolist() == [10, 10]
    F = chapter_frames({"label": tiny[3]["label"]}, frames)
    assert F["fig6"]["seed"].tolist() == [0, 1] and F["leads"].groupby("seed").size().tolist() == [3, 3]
    # the probe of every domain of every seed, the regime check's unit
    probe = frames["probe"]
    assert probe.columns.tolist() == ["seed", "domain", PROBE, ZEROS, NORM] and probe["domain"].tolist() == names * 2
    assert probe[PROBE].between(0, 100).all() and F["probe"].index.is_unique


@pytest.mark.parametrize("run", DOM_ORDER, ids=[f"{b}/{v}" for b, v in DOM_ORDER])
def test_a_run_without_its_curve_is_evaluated_after_its_last_round_only_with_the_same_bits(tiny_federation, run):
    """What a domain-skew row reads (the last round's per-client accuracies) is the same bits
    whether the run is evaluated every round or after its last round only (``full_curve=False``),
    for every run the domain-skew study makes."""
    from fedlib.algorithms.ggeur import classifier_fn
    study = GGEURStudy(**{**SIZES, "rounds": 3})
    fn = classifier_fn("mlp", 16, 3, hidden=8)
    alg, extra = study.domain_runs(tiny_federation)[run]
    every, curve, _ = _quiet(study.run, alg, tiny_federation, fn, 3, extra, 0)
    last, point, _ = _quiet(study.run, alg, tiny_federation, fn, 3, extra, 0, full_curve=False)
    rounds = [1, 2, 3, 4] if extra else [1, 2, 3]  # with a statistics round first: one more, training round 0
    assert curve.index.tolist() == [r - int(extra) for r in rounds] and point.index.tolist() == [3]
    evaluated = lambda res: sorted(set(res.frame.loc[res.frame["metric"] == "global", "round"]))  # noqa: E731
    assert evaluated(every) == rounds and evaluated(last) == rounds[-1:] and point.iloc[0] == curve.iloc[-1]
    pd.testing.assert_frame_equal(last.per_client(), every.per_client(), check_exact=True)
    assert all(torch.equal(last.server.arrays[k], every.server.arrays[k]) for k in every.server.arrays)


def test_the_cells_repeat_themselves_in_workers_from_the_cache_and_in_the_worked_solutions(tiny, tmp_path):
    """Same cell, same bits: in two worker processes, read back from the cache, and as the worked
    solutions' reduced runs (a label cell with named runs; a domain cell with named runs)."""
    study, setup, label, frames, domain, dframes = tiny
    twice = _quiet(run_study, label, workers=2)
    for name in frames:
        pd.testing.assert_frame_equal(twice[name].drop(columns="seconds", errors="ignore"),
                                      frames[name].drop(columns="seconds", errors="ignore"), check_exact=True)
    cold = _quiet(run_study, label, cache=tmp_path)
    warm = run_study(label, cache=tmp_path)  # every cell read back, nothing run
    for name in frames:
        pd.testing.assert_frame_equal(warm[name], cold[name], check_exact=True)
    again = _quiet(label_cell, 0, 0.5, study=study, embeddings=setup.embeddings, methods=["FedAvg", GGEUR_CODE])["label"]
    t = frames["label"]
    for m in ("FedAvg", GGEUR_CODE):
        assert again[again.method == m]["accuracy (%)"].iloc[0] == gg.of_seed(t, 0, 0.5, m)
    alone = _quiet(domain_cell, 0, study=study, runs=gg.EX3_RUNS)
    d = dframes["domain"]
    for (b, v), avg in zip(gg.EX3_RUNS, alone["domain"]["AVG"]):
        assert avg == d[(d.seed == 0) & (d.base == b) & (d.method == v)]["AVG"].iloc[0]
    pd.testing.assert_frame_equal(alone["similarity"], dframes["similarity"][dframes["similarity"].seed == 0]
                                  .drop(columns="seed").reset_index(drop=True), check_exact=True)
    with pytest.raises(ValueError, match=r"unknown label-skew runs \['FedSGD'\]; valid: FedAvg, "):
        label_cell(0, 0.5, study=study, embeddings=setup.embeddings, methods=["FedSGD"])
    with pytest.raises(ValueError, match=r"unknown domain-skew runs \[\('FedAvg', 'FedSGD'\)\]"):
        domain_cell(0, study=study, runs=[("FedAvg", "FedSGD")])


def test_a_scaled_cell_is_the_cell_of_scaled_embeddings(tiny):
    """Exercise 1's reduced run: scale=0.1 equals the same cell on the embeddings multiplied by 0.1."""
    study, setup, *_ = tiny
    emb = setup.embeddings
    scaled = _quiet(label_cell, 0, 0.5, study=study, embeddings=emb, methods=["FedAvg", GGEUR_PAPER], scale=0.1)["label"]
    by_hand = ArrayDataset(0.1 * emb.x, emb.y, emb.n_classes, emb.name)
    direct = _quiet(label_cell, 0, 0.5, study=study, embeddings=by_hand, methods=["FedAvg", GGEUR_PAPER])["label"]
    assert scaled["accuracy (%)"].tolist() == direct["accuracy (%)"].tolist()
    other = _quiet(label_cell, 0, 0.5, study=study, embeddings=emb, methods=[GGEUR_CODE], total=20)["label"]
    assert len(other) == 1 and other["full"].tolist() == [True]


def test_the_rank_reading_is_full_only_if_every_class_is_of_full_rank():
    from fedbook.studies.ggeur_experiments import rank_reading
    full = rank_reading(torch.tensor([8., 8., 8.]), 8)
    assert full.startswith("every class covariance is of full rank")
    # one class one rank short: the mean (7.67) is above dim - 0.5 = 7.5, the former test; now a subspace
    one_short = rank_reading(torch.tensor([8., 8., 7.]), 8)
    assert one_short.startswith("1 of 3 class covariances is below full rank (the lowest has rank 7 of 8)")
    assert "(7.7 of 8 dimensions on average over the classes)" in one_short
    assert "full rank, so augmentation can move samples in every direction" not in one_short
    assert rank_reading(np.array([3., 2., 8.]), 8).startswith("2 of 3 class covariances are below full rank (the lowest has rank 2")
    with pytest.raises(ValueError, match="at least one class rank"):
        rank_reading(np.array([]), 8)


def test_embedding_summary_reads_one_class_one_rank_short_as_a_subspace():
    # 2 classes in 3 dimensions: class 0 spread in all 3 directions, class 1 only in 2 (its third coordinate constant)
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(40, 3, generator=g)
    x1 = torch.randn(40, 3, generator=g)
    x1[:, 2] = 1.0
    emb = ArrayDataset(torch.cat([x0, x1]), torch.cat([torch.zeros(40), torch.ones(40)]).long(), 2, "toy")
    setup = gg.LabelSetup(SimpleNamespace(name="toy", dim=3), emb, 0)
    _, numbers = gg.embedding_summary(setup, seconds=0.0)
    assert numbers["emb_rank"] == pytest.approx(2.5)
    assert numbers["emb_rank_reading"].startswith("1 of 2 class covariances is below full rank (the lowest has rank 2 of 3)")


def test_rowmax_testability_by_the_book_s_rule():
    from fedbook.claims import smallest_resolvable  # the book's rule the helper restates
    for n in (10, 399, 400, 1000):
        r = gg.rowmax_testability(n, 1.0)
        assert ("can be decided" in r["rowmax_testable"]) == (smallest_resolvable(100 / n) <= 1.0 + 1e-12)
    ten = gg.rowmax_testability(10, 1.0)
    assert ten["rowmax_res"] == 10.0 and ten["rowmax_classes_needed"] == 400
    assert "untestable at this resolution" in ten["rowmax_testable"]
    assert "can be decided" in gg.rowmax_testability(400, 1.0)["rowmax_testable"]  # 0.25 points: exactly a quarter of m
    assert "untestable" in gg.rowmax_testability(399, 1.0)["rowmax_testable"]
    with pytest.raises(ValueError):
        gg.rowmax_testability(0, 1.0)
