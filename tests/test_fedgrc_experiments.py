"""FedGRC's experiments (fedbook.studies.fedgrc_experiments): the cells the chapter's studies run, checked against
the same runs and heads made by hand, and the tables, claim frames and numbers read from their
frames, on hand-computed values."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fedbook.claims import UNTESTABLE_RESOLUTION, Claim, Read, effect, evaluate
from fedbook.intervals import SeedValues, defined_pairs, interval_text, seed_band
from fedbook.study import Study, run_study
from fedbook.page import save_frames
from fedbook.studies.fedgrc_experiments import (REGIME_COLUMNS, SCATTER, effective_images, protocol_row, regime_row, resolutions, BASELINE_HEAD_NAMES, BASELINES, EXCESS_COLUMNS, FEDGRC, HEADS, METRICS, ORDER, PAIRS, FedGRCStudy,
                                    SharedRule, ablation_cell, baseline_head, before_after, chapter_study, claim_frames,
                                    cost_table, defined, deployed_name, excess_gain_rows, final_round, mean_over_alphas,
                                    mean_over_heads, numbers, reads, refitted_heads, rotate, rotate_odd_clients,
                                    rotated_cell, seed_values, train_cell, untestable_text)
from fedlib.algorithms import CGRL, Ditto, FedAvg
from fedlib.cgrl import CGRLConfig
from fedlib.data import ArrayDataset, make_gaussian_mixture
from fedlib.federation import hold_out_validation, make_federation
from fedlib.heads import MMS, SASP, CCVRHead, FedCGSHead, Fed3RHead, FedNCMHead, LDAHead
from fedlib.loop import LoopConfig
from fedlib.results import per_client_table
from fedlib.messages import same_arrays
from fedlib.metrics import RARE_RATIO, protocol_summary
from fedlib.models import build_model
from fedlib.posthoc import FrozenFeatures, StatHead, collect_statistics
from fedlib.run import evaluate_deployment, run_federated
from fedlib.training import TrainConfig

SEED, ALPHA = 3, 0.5
HEAD_OBJECTS = (FedNCMHead(), LDAHead(), FedCGSHead(), Fed3RHead(), CCVRHead())
M0_GRID, GAMMA_GRID = [0.0, 10.0, math.inf], [0.1, 1.0]


def _data(seed: int = 0) -> ArrayDataset:
    """Three Gaussian classes as 1 x 4 x 4 images (so that the rotation of Exercise 2 applies)."""
    d = make_gaussian_mixture(n_per_class=50, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    return ArrayDataset(d.x.reshape(-1, 1, 4, 4), d.y, d.n_classes, d.name)


def _study() -> FedGRCStudy:
    model_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4, hidden=(16, 8))
    train = TrainConfig(epochs=1, batch_size=16, lr=0.05)
    layers = ("fc1", "penultimate")
    return FedGRCStudy(model_fn=model_fn, train=train, finetune=train, head_train=train,
                       cgrl=CGRLConfig(augment="none", warmup=1, layers=layers),
                       augmentation=CGRLConfig(augment="none", lambda_dir=0.0, lambda_rad=0.0, layers=layers),
                       layers=layers, baseline_heads=dict(zip(BASELINE_HEAD_NAMES, HEAD_OBJECTS)), gamma=0.1,
                       m0=10.0, n_clients=3, global_test_per_class=10, val_fraction=0.3)


def _loop() -> LoopConfig:
    return LoopConfig(rounds=1, seed=SEED, eval_every=0, rare_ratio=RARE_RATIO)


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    """The training study of one cell (run by fedbook.study.run_study, as the chapter runs it)."""
    study, edited = _study(), []
    out = tmp_path_factory.mktemp("fedgrc_results")
    run = functools.partial(train_cell, study=study, data=_data, rounds=1, m0_grid=M0_GRID, gamma_grid=GAMMA_GRID,
                            edit_federation=lambda f: edited.append(f) or f, results_dir=out)
    frames = run_study(Study("training", run, grid={"alpha": [ALPHA]}, seeds=[SEED]))
    return study, frames, edited, out


@pytest.fixture(scope="module")
def deployment():
    study = _study()
    return study, study.deploy(_data(), SEED, ALPHA, _loop())


def test_the_cell_trains_every_method_and_deploys_every_head(cell, tmp_path):
    study, frames, edited, out = cell
    assert set(frames) == {"runs", "validation", "costs", "sensitivity", "penultimate", "scatter", "regime"}
    scatter = frames["scatter"]
    assert scatter["backbone"].tolist() == list(study.backbones)
    assert ((scatter[SCATTER] > 0) & (scatter[SCATTER] < 100)).all() and (scatter["images"] > 0).all()
    assert frames["regime"].columns.tolist() == ["alpha", "seed", *REGIME_COLUMNS] and len(frames["regime"]) == 1
    runs = frames["runs"]
    assert {"pooled", "P@25", "PF@25"} <= set(runs["metric"])
    assert len(edited) == 1 and len(study.methods()) == 5 and "FedAvg" not in study.methods()
    methods = set(frames["runs"]["method"])
    expected = {deployed_name(m) for m in study.methods()} | {"FedAvg", "FedAvg-FT", "FedETF-FT", "FedAvg + FedCGS + FT"}
    expected |= {f"{b} + {h}" for b in study.backbones for h in HEADS}
    assert methods == expected and "CGRL (training head)" in methods
    assert frames["runs"].columns.tolist() == ["alpha", "seed", "method", "metric", "value"]
    assert frames["validation"]["head"].tolist() == list(BASELINE_HEAD_NAMES) and (frames["validation"]["backbone"] == "FedAvg-Aug").all()
    costs = frames["costs"]
    training = costs[costs["round"] == "training"]
    assert set(training["method"]) == set(study.methods()) and (training["seconds per round"] > 0).all()
    stats = costs[costs["round"] != "training"]
    assert set(zip(stats["method"], stats["round"])) == {(b, f"statistics ({k})") for b in study.backbones
                                                         for k in ("penultimate", "multilayer")}
    assert stats["seconds per round"].isna().all() and (costs["bytes per client"] > 0).all()
    assert (out / f"seed{SEED}" / f"alpha{ALPHA}" / "CGRL").is_dir()
    assert not (out / f"seed{SEED}" / f"alpha{ALPHA}" / "FedAvg").exists()  # FedAvg's run is Ditto's, saved once
    save_frames({"fedgrc_results": frames["runs"]}, tmp_path / "new")
    assert len(pd.read_csv(tmp_path / "new" / "fedgrc_results.csv")) == len(frames["runs"])


def test_the_cell_equals_the_same_runs_made_by_hand(cell):
    study, frames, _, _ = cell
    fed = make_federation(_data(), n_clients=3, partition="dirichlet", alpha=ALPHA, min_size=10, global_test_per_class=10,
                          seed=SEED)
    fed, _ = hold_out_validation(fed, 0.3, SEED)
    lc = _loop()
    v = seed_values(frames["runs"], [SEED])
    # FedAvg is Ditto's global model: deployed on Ditto's server state, not trained again
    fedavg = run_federated(Ditto(train=study.train, personal_train=study.train), fed, study.model_fn, lc)
    fa = protocol_summary(per_client_table(evaluate_deployment(FedAvg(train=study.train), fedavg, fed, study.model_fn, lc)))
    assert v(ALPHA, "FedAvg", "global")[0] == 100 * fa["global"]
    assert v(ALPHA, "Ditto", "global")[0] == 100 * fedavg.summary()["global"]
    frozen = FrozenFeatures(collect_statistics(fedavg, fed, study.model_fn, layers=study.layers, seed=SEED), fed, study.model_fn)
    mms = MMS(gamma=0.1).fit(frozen.moments, frozen.layer_dims)
    sasp = frozen.summary([SASP(m0=10.0).fit(mms, m) for m in frozen.client_moments])
    assert v(ALPHA, "FedAvg + MMS + SASP", "F@25")[0] == 100 * sasp["F@25"]
    assert final_round(fedavg)["round"].unique().tolist() == [1]
    # a training run's bytes per client and round: the ledger's total over the clients
    costs = frames["costs"].set_index(["method", "round"])
    assert costs.loc[("Ditto", "training"), "bytes per client"] == fedavg.ledger.per_client_and_round(phase="all", n_clients=1) / 3


def test_the_cell_refits_the_heads_on_its_frozen_cgrl_backbone(cell, deployment):
    _, frames, _, _ = cell
    study, dep = deployment
    v = seed_values(frames["runs"], [SEED])
    sens = frames["sensitivity"]
    assert len(sens) == 3 * 3 + 2 * 3 and set(sens["grid"]) == {"m0", "gamma"}
    at = sens.set_index(["grid", "x", "curve"])["value"]
    assert at[("m0", 10.0, "F@25")] == v(ALPHA, FEDGRC, "F@25")[0]  # the chapter's own head at m0 = 10
    assert at[("m0", math.inf, "global")] == v(ALPHA, "CGRL + MMS", "global")[0]  # m0 = inf: the shared head
    assert at[("gamma", 0.1, "MMS global")] == v(ALPHA, "CGRL + MMS", "global")[0]
    mean, half = seed_band(sens[sens["curve"] == "MMS global"], "x", GAMMA_GRID)
    assert mean.tolist() == [at[("gamma", 0.1, "MMS global")], at[("gamma", 1.0, "MMS global")]]
    assert np.isinf(half).all()  # one seed: no interval
    # refitted on the multilayer features, the heads are the chapter's rows; on the penultimate ones, the frame's
    multi = refitted_heads(dep.features[("CGRL", "multilayer")], gamma=0.1, m0=10.0).set_index(["method", "metric"])["value"]
    assert multi[(FEDGRC, "local")] == v(ALPHA, FEDGRC, "local")[0] and multi[("CGRL + MMS", "F@25")] == v(ALPHA, "CGRL + MMS", "F@25")[0]
    pen = refitted_heads(dep.features[("CGRL", "penultimate")], gamma=0.1, m0=10.0)
    assert pen["value"].tolist() == frames["penultimate"]["value"].tolist()


def test_training_cgrl_alone_gives_the_backbone_of_the_cell(deployment):
    """Exercise 2's cell trains CGRL again on its own: the same bits as among the other methods."""
    study, dep = deployment
    alone = run_federated(CGRL(train=study.train, cgrl=study.cgrl), dep.federation, study.model_fn, _loop())
    assert same_arrays(alone.server.arrays, dep.runs["CGRL"].server.arrays)


def test_the_exercise_cells():
    study = _study()
    rotated = rotated_cell(SEED, ALPHA, study=study, data=_data, rounds=1, m0_grid=M0_GRID)
    assert rotated["m0"].tolist() == M0_GRID and (rotated["rotated"] == 1).all() and (rotated["clients"] == 3).all()
    assert rotated[["local (%)", "global (%)", "F@25 (%)"]].notna().all().all()
    fed = make_federation(_data(), n_clients=3, partition="dirichlet", alpha=ALPHA, min_size=10, global_test_per_class=10,
                          seed=SEED)
    turned = rotate_odd_clients(fed)
    assert turned.clients[0] is fed.clients[0] and torch.equal(turned.clients[1].train.x, torch.rot90(fed.clients[1].train.x, 1, (2, 3)))
    assert torch.equal(rotate(rotate(rotate(rotate(fed.global_test)))).x, fed.global_test.x)
    full = ablation_cell(SEED, "CGRL", study=study, data=_data, rounds=1, alpha=ALPHA, n_samples=120, n_clients=3,
                         global_test_per_class=10)
    assert full.columns.tolist() == ["local (%)", "global (%)", "F@25 (%)", "images", "clients"]
    assert full["images"].item() == 120 and full["clients"].item() == 3


def test_the_chapter_study_from_a_profile():
    P = SimpleNamespace(model="mlp", model_kw=dict(hidden=(16, 8)), layers=None, local_epochs=1, lr=0.05, finetune_epochs=2,
                        tau=0.2, lambda_dir=0.5, lambda_rad=0.1, warmup=3, dataset="mnist5k", gamma=0.1, m0=10.0,
                        n_clients=4, global_test_per_class=5, val_fraction=0.3)
    study = chapter_study(P, _data())
    assert study.layers == tuple(study.model_fn().feature_layers) and study.cgrl.augment == "digits"
    assert study.augmentation.lambda_dir == study.augmentation.lambda_rad == 0.0 and study.finetune.epochs == 2
    assert list(study.baseline_heads) == ["FedNCM", "LDA", "FedCGS", "Fed3R", "CCVR"] and study.backbones == ("FedAvg", "FedAvg-Aug", "CGRL")


def _tidy(values, seeds=(0, 1)):
    rows = [{"seed": s, "alpha": 0.1, "method": m, "metric": k, "value": x} for (m, k), xs in values.items()
            for s, x in zip(seeds, xs)]
    return SeedValues(pd.DataFrame(rows), ["alpha", "method", "metric"], list(seeds))


def test_means_over_heads_and_alphas_by_hand():
    v = _tidy({("X + H1", "g"): [10.0, 20.0], ("X + H2", "g"): [30.0, 40.0]})
    assert mean_over_heads(v, 0.1, "X", ["H1", "H2"], "g").tolist() == [20.0, 30.0]
    assert mean_over_alphas(lambda a, m, k: np.array([a, 2 * a]), [1.0, 3.0], "X", "g").tolist() == [2.0, 4.0]


def test_before_after_and_excess_gain_by_hand():
    v = _tidy({("P", "m"): [1.0, 2.0], ("Q", "m"): [4.0, 1.0]})
    d = before_after(v, [0, 1], [0.1], [("P", "Q")], ["m"])
    assert d["value"].tolist() == [3.0, -1.0] and d["change"].tolist() == ["Δ m", "Δ m"]
    # F(B0,H0) = 10, F(B1,H0) = 12, F(B0,H1) = 11, F(B1,H1) = 16: I = 6 - 2 - 1 = 3 on seed 0; additive on seed 1: I = 0
    v = _tidy({("B0 + H", "F"): [10.0, 10.0], ("B1 + H", "F"): [12.0, 12.0], ("B0 + S", "F"): [11.0, 11.0],
               ("B1 + S", "F"): [16.0, 13.0]})
    rows = excess_gain_rows(v, {(0, 0.1): "H", (1, 0.1): "H"}, [0, 1], [0.1], ["F"], b0="B0", b1="B1", h1="S")
    table = rows.pivot(index="seed", columns="pairing", values="value")[list(EXCESS_COLUMNS)]
    assert table.loc[0].tolist() == [10.0, 12.0, 11.0, 16.0, 3.0] and table.loc[1, "excess gain I"] == 0.0


def test_baseline_head_is_the_best_on_validation_per_seed():
    val = pd.DataFrame({"seed": [0, 0, 1, 1, 0], "alpha": 0.1, "backbone": ["FedAvg-Aug"] * 4 + ["FedAvg"],
                        "head": ["X", "Y", "X", "Y", "Z"], "validation global (%)": [80.0, 85.0, 90.0, 70.0, 99.0]})
    assert baseline_head(val) == {(0, 0.1): "Y", (1, 0.1): "X"}  # Z is on another backbone


def test_defined_drops_a_seed_from_every_side():
    f = pd.DataFrame({"backbone": ["A", "A", "B", "B"], "seed": [0, 1, 0, 1], "x": [1.0, 2.0, np.nan, 4.0]})
    assert defined(f, ["x"])["seed"].tolist() == [1, 1]  # seed 0 is undefined for B: dropped for A too
    assert defined(f.assign(x=np.nan), ["x"]).values.tolist() == [["A", 0, 0.0], ["B", 0, 0.0]]


def _runs(seeds, alphas, nan_at=None):
    """A runs frame over every row of Tables I/II, values from a seeded stream; NaN at ``nan_at``."""
    rng = np.random.default_rng(0)
    rows = [{"alpha": a, "seed": s, "method": name, "metric": m, "value": float(rng.uniform(40, 100))}
            for a in alphas for s in seeds for name in ORDER for m in METRICS]
    frame = pd.DataFrame(rows)
    if nan_at is not None:
        a, s, name, m = nan_at
        frame.loc[(frame["alpha"] == a) & (frame["seed"] == s) & (frame["method"] == name) & (frame["metric"] == m), "value"] = math.nan
    return frame


def test_the_claim_frames_give_what_the_claims_read_by_hand():
    """Every family of claims reads, through Read, the paired values the chapter's formulas give
    (fedbook.intervals.defined_pairs of them, seed by seed)."""
    seeds, alphas = [0, 1, 2], [0.3, 0.1]
    runs = _runs(seeds, alphas, nan_at=(0.1, 1, "FedRep", "rare"))  # FedRep's rare accuracy undefined on seed 1
    v = seed_values(runs, seeds)
    h0 = {(s, a): "LDA" for s in seeds for a in alphas}
    tidy9 = excess_gain_rows(v, h0, seeds, alphas)
    ft = {"FedETF → FedETF-FT": ("FedETF", "FedETF-FT")}
    scatter = pd.DataFrame([{"alpha": a, "seed": s, "backbone": b, SCATTER: 10.0 * (b == "CGRL") + s + a}
                            for a in alphas for s in seeds for b in ("FedAvg-Aug", "CGRL")])
    frames = claim_frames(runs, tidy9, seeds, alphas, leaders={"pooled": "Ditto", "P@25": "FedRep"},
                          shift_methods=["FedRep", "Ditto"], ft_pairs=ft, sizes={"global": 2.17}, scatter=scatter,
                          regime=pd.DataFrame([{"alpha": a, "seed": s, **{c: 10 * a + s for c in REGIME_COLUMNS}}
                                               for a in alphas for s in [*seeds, 9]]))

    def read(ours, baseline=0.0, versus=None):
        c = Claim("c", "q", "s", "x", "greater", effect("points"), resolution=0.1, versus=versus, ours=ours,
                  baseline=baseline)
        o, b, _ = c.read(frames)
        return o.tolist(), ({k: x.tolist() for k, x in b.items()} if isinstance(b, dict) else b if isinstance(b, float) else b.tolist())

    def by_hand(ours, baseline):
        o, b = defined_pairs(ours, baseline)
        return o.tolist(), ({k: x.tolist() for k, x in b.items()} if isinstance(b, dict) else b.tolist())

    every = lambda a, m: {b: v(a, b, m) for b in BASELINES}  # noqa: E731
    assert read(Read("versus", FEDGRC, alpha=0.1, metric="rare"), reads("versus", BASELINES, alpha=0.1, metric="rare"),
                tuple(BASELINES)) == by_hand(v(0.1, FEDGRC, "rare"), every(0.1, "rare"))
    assert len(read(Read("versus", FEDGRC, alpha=0.1, metric="rare"))[0]) == 2  # the undefined seed is dropped
    assert read(Read("versus", "FedGRC − the paper's gain", alpha=0.3, metric="global"),
                reads("versus", BASELINES, alpha=0.3, metric="global"), tuple(BASELINES)) == \
        by_hand(v(0.3, FEDGRC, "global") - 2.17, every(0.3, "global"))
    assert read(Read("trail", FEDGRC, metric="P@25"), Read("trail", "FedRep", metric="P@25")) == \
        by_hand(v(0.1, FEDGRC, "P@25"), v(0.1, "FedRep", "P@25"))
    assert read(Read("shift", "no change", metric="pooled"), reads("shift", ["FedRep", "Ditto"], metric="pooled"),
                ("FedRep", "Ditto")) == by_hand(np.zeros(3), {n: v(0.3, n, "pooled") - v(0.1, n, "pooled") for n in ("FedRep", "Ditto")})
    assert read(Read("scatter", "CGRL", alpha=0.1), Read("scatter", "FedAvg-Aug", alpha=0.1)) == \
        by_hand(np.array([10.1, 11.1, 12.1]), np.array([0.1, 1.1, 2.1]))
    col = REGIME_COLUMNS[0]  # one unit per seed at one alpha; over both alphas, one per (alpha, seed); seed 9 left out
    assert Read("regime", col, alpha=0.1)(frames).tolist() == [1.0, 2.0, 3.0]
    assert sorted(Read("regime", col)(frames).tolist()) == [1.0, 2.0, 3.0, 3.0, 4.0, 5.0]
    room = Read("headroom", "value", alpha=0.1, metric="PF@25")(frames)
    assert room.index.names == ["method", "seed"] and len(room) == len(BASELINES) * 3
    assert room.loc[("Ditto", 2)] == v(0.1, "Ditto", "PF@25")[2]
    heads = lambda b: mean_over_heads(v, 0.3, b, HEADS)  # noqa: E731
    assert read(Read("heads", "gain over its own head", backbone="FedAvg-Aug"),
                Read("heads", "gain over its own head", backbone="FedAvg")) == \
        by_hand(heads("FedAvg-Aug") - v(0.3, "FedAvg-Aug", "global"), heads("FedAvg") - v(0.3, "FedAvg", "global"))
    assert read(Read("heads", "mean head", backbone="FedAvg-Aug"), Read("heads", "mean head", backbone="FedAvg")) == \
        by_hand(heads("FedAvg-Aug"), heads("FedAvg"))
    over = lambda name, m: np.mean([v(a, name, m) for a in alphas], axis=0)  # noqa: E731
    assert read(Read("personalization", "no change", metric="PF@25"), reads("personalization", ft, metric="PF@25"), tuple(ft)) == \
        by_hand(np.zeros(3), {"FedETF → FedETF-FT": over("FedETF", "PF@25") - over("FedETF-FT", "PF@25")})
    assert read(Read("sasp", FEDGRC, metric="pooled"), Read("sasp", "CGRL + MMS", metric="pooled")) == \
        by_hand(over(FEDGRC, "pooled"), over("CGRL + MMS", "pooled"))
    v9 = SeedValues(tidy9, ["alpha", "metric", "pairing"], seeds)
    assert read(Read("excess", "B1 + H1 (FedGRC)", alpha=0.3, metric="F@25"),
                reads("excess", ("B1 + H0", "B0 + H1"), alpha=0.3, metric="F@25"), ("B1 + H0", "B0 + H1")) == \
        by_hand(v9(0.3, "F@25", "B1 + H1 (FedGRC)"), {c: v9(0.3, "F@25", c) for c in ("B1 + H0", "B0 + H1")})
    assert read(Read("excess_over_alphas", "excess gain I", metric="global"))[0] == \
        by_hand(np.mean([v9(a, "global", "excess gain I") for a in alphas], axis=0), np.zeros(3))[0]


def test_an_undefined_metric_on_every_seed_gives_one_zero_pair():
    seeds, alphas = [0, 1], [0.1]
    runs = _runs(seeds, alphas)
    runs.loc[(runs["method"] == FEDGRC) & (runs["metric"] == "unseen"), "value"] = math.nan
    v = seed_values(runs, seeds)
    frames = claim_frames(runs, excess_gain_rows(v, {(s, 0.1): "LDA" for s in seeds}, seeds, alphas),
                          seeds, alphas, leaders={}, shift_methods=[], ft_pairs={}, sizes={})
    unseen = frames["versus"][frames["versus"]["metric"] == "unseen"]
    assert len(unseen) == 1 and unseen[FEDGRC].item() == 0.0 and (unseen[BASELINES] == 0.0).all(axis=None)


def test_the_untestable_rows_are_named_by_resolution_with_their_m():
    """Only the rows untestable at this resolution are named, grouped by resolution, coarsest first."""
    def row(key, paper, res):
        return evaluate(Claim(key, "q", "s", "x, points", "greater", effect("points", paper=paper), resolution=res),
                        [5.0, 6.0, 7.0])
    rows = {r.claim.key: r for r in (row("global", 2.17, 0.2), row("rare", 1.44, 2.0), row("F@25", 2.13, 4.0),
                                     row("local", 2.15, 4.0))}
    assert [k for k, r in rows.items() if r.verdict == UNTESTABLE_RESOLUTION] == ["rare", "F@25", "local"]
    assert untestable_text(rows) == ("3 rows are untestable at this resolution: at a resolution of 4.00 points, "
                                     "F@25 (m = 1.06) and local (m = 1.07); at a resolution of 2.00 points, rare (m = 0.72)")
    assert untestable_text({"global": rows["global"]}) == "No row is untestable at this resolution"


def test_the_cost_table_reads_the_first_seed_and_averages_the_seconds():
    rows = []
    for s, sec in ((0, 1.0), (1, 3.0)):
        for name in ("Ditto", "FedAvg-Aug", "CGRL"):
            rows.append({"alpha": 0.1, "seed": s, "method": name, "round": "training", "bytes per client": 100.0 + s,
                         "seconds per round": sec})
        for kind in ("penultimate", "multilayer"):
            rows.append({"alpha": 0.1, "seed": s, "method": "CGRL", "round": f"statistics ({kind})",
                         "bytes per client": 50.0 + s, "seconds per round": math.nan})
    table = cost_table(pd.DataFrame(rows), 0, [0.1])
    assert table["bytes per client"].tolist() == [100.0] * 3 + [50.0] * 2
    assert table["seconds per round (median)"].tolist()[:3] == [2.0] * 3 and table.index.names == ["alpha", "what"]


def test_the_numbers_of_one_cell(cell):
    _, frames, _, _ = cell
    v = seed_values(frames["runs"], [SEED])
    h0 = baseline_head(frames["validation"])
    R = numbers(frames, [SEED], [ALPHA], h0, excess_gain_rows(v, h0, [SEED], [ALPHA]))
    assert R["fge_n_runs"] == 5 and R["fge_n_missing"] >= 0 and R["fge_m0_min"] == 0.0
    assert R["fge_fedgrc_global_lo"] == R["fge_fedgrc_global_hi"] == interval_text(v(ALPHA, FEDGRC, "global"))
    assert R["fge_t4_sasp_local_lo"] == interval_text(v(ALPHA, FEDGRC, "local") - v(ALPHA, "CGRL + MMS", "local"))
    assert R["fge_closest_F25_lo"] in BASELINES and R["fge_h0_names"] in BASELINE_HEAD_NAMES
    assert {f"fge_t4_{t}_{m}_lo" for t in ("etf", "head", "sasp") for m in ("local", "global", "F25")} <= set(R)
    assert len(PAIRS) == 3


def test_a_shared_baseline_head_on_frozen_features_equals_its_deployment(deployment):
    """SharedRule on features extracted once gives the protocol's numbers of evaluate_deployment(StatHead(head))."""
    study, dep = deployment
    fed = dep.federation
    lc = _loop()
    backbone = run_federated(FedAvg(train=study.train), fed, study.model_fn, lc)
    pen = collect_statistics(backbone, fed, study.model_fn, layers=("penultimate",), seed=SEED)
    frozen = FrozenFeatures(pen, fed, study.model_fn)
    for head in (FedNCMHead(), LDAHead(), CCVRHead()):
        ours = frozen.summary([SharedRule.fit(head, pen, SEED)] * len(frozen.clients))
        theirs = protocol_summary(per_client_table(evaluate_deployment(StatHead(head=head, seed=SEED), pen, fed,
                                                                       study.model_fn, lc)))
        assert ours.keys() == theirs.keys()
        for k in ours:
            assert ours[k] == pytest.approx(theirs[k], abs=1e-9, nan_ok=True), (type(head).__name__, k)



# --------------------------------------------------------------------------- issue 38: client-weighted scores, regimes


def _two_client_federation():
    """Hand-made: 2 classes, a global test set of 4 + 6 images, client 0 trains 9 of class 0 and 1 of
    class 1, client 1 trains 5 and 5."""
    from fedlib.federation import ClientData, Federation

    def ds(labels):
        y = torch.tensor(labels)
        return ArrayDataset(torch.zeros(len(labels), 1, 2, 2), y, 2, "toy")
    clients = [ClientData(ds([0] * 9 + [1]), ds([0, 1])), ClientData(ds([0] * 5 + [1] * 5), ds([0, 1]))]
    return Federation(clients, ds([0] * 4 + [1] * 6), 2, "toy")


def test_effective_images_and_regime_row_by_hand():
    from fedlib.federation import ClientData, Federation
    fed = _two_client_federation()
    n_eff = effective_images(fed)
    # client 0: 1 / (0.9^2 / 4 + 0.1^2 / 6); client 1: 1 / (0.25 / 4 + 0.25 / 6)
    assert n_eff == pytest.approx([1 / (0.81 / 4 + 0.01 / 6), 1 / (0.25 / 4 + 0.25 / 6)])
    row = regime_row(fed, m0=10.0)
    assert row["effective images, weakest quarter"] == pytest.approx(min(n_eff))  # ceil(0.25 * 2) = 1 client
    # rare: n_c / n < 0.5 / 2 -> client 0's class 1 (1 of 10); client 1 none
    assert row["rare-class support"] == 1.0
    # SASP weight: client 0: 0.9 * 9/19 + 0.1 * 1/11; client 1: 0.5 * 5/15 * 2
    assert row["SASP weight on own data"] == pytest.approx(np.mean([0.9 * 9 / 19 + 0.1 / 11, 1 / 3]))
    # a mutation that weighs every class equally instead of by the client's mix gives another value
    assert np.mean([(9 / 19 + 1 / 11) / 2, 1 / 3]) != pytest.approx(row["SASP weight on own data"])
    assert math.isnan(regime_row(fed, m0=10.0, rare_ratio=0.01)["rare-class support"])  # no rare class: fails by name
    # m0 = 0: alpha = 1 on every class a client holds (both hold both), 0 on an absent one, never 0/0
    assert regime_row(fed, m0=0.0)["SASP weight on own data"] == pytest.approx(1.0)
    absent = Federation([ClientData(ArrayDataset(torch.zeros(3, 1, 2, 2), torch.tensor([0, 0, 0]), 2, "toy"),
                                    ArrayDataset(torch.zeros(2, 1, 2, 2), torch.tensor([0, 1]), 2, "toy"))],
                        fed.global_test, 2, "toy")
    assert regime_row(absent, m0=0.0)["SASP weight on own data"] == 1.0  # class 1 absent: weight 0, mix 0, not NaN
    assert regime_row(fed, m0=float("inf"))["SASP weight on own data"] == 0.0


def test_weakest_quarter_and_client_weighted_resolutions():
    from fedlib.metrics import FLOOR_FRACTION, lowest_tail
    assert lowest_tail(np.array([4.0, 1.0, 3.0, 2.0, 9.0, 8.0, 7.0, 6.0]), FLOOR_FRACTION).tolist() == [1.0, 2.0]
    fed = _two_client_federation()
    res = resolutions({0.5: fed})
    n_eff = effective_images(fed)
    mean_mix = np.array([0.7, 0.3])  # (0.9 + 0.5) / 2, (0.1 + 0.5) / 2
    assert res["pooled"] == pytest.approx(100 * (0.49 / 4 + 0.09 / 6))
    assert res["P@25"] == pytest.approx(100 / min(n_eff))
    assert res["PF@25"] == max(res["P@25"], res["rare"]) and res["scatter"] == pytest.approx(100 / 20)
    assert res["pooled"] != pytest.approx(100 / 10)  # not one image of the 10-image test set: the mix weighs it
    del mean_mix


def test_protocol_row_adds_the_client_weighted_floor():
    nan = float("nan")
    t = pd.DataFrame({"local": [1.0, 0.0, 1.0, 1.0], "pooled": [0.9, 0.8, 0.7, 0.95], "global": [0.5] * 4,
                      "unseen": [0.6, nan, 0.8, 0.9], "rare": [nan] * 4})
    row = protocol_row(t)
    assert row["F@25"] == 0.0 and row["PF@25"] == pytest.approx(0.6)  # the 3-image local split vs the pooled score
    assert {k: v for k, v in row.items() if k != "PF@25"}.keys() == protocol_summary(t).keys()
