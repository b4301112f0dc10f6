"""The terminal statistics round and statistical-head deployment (fedlib.posthoc)."""

from __future__ import annotations

import dataclasses
import doctest
import functools
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

import fedlib.posthoc as deployment_module
from fedlib.algorithms import ALGORITHMS, FedAvg, make_algorithm
from fedlib.data import make_gaussian_mixture
from fedlib.loop import DroppedClientsWarning
from fedlib.posthoc import (
    FrozenFeatures,
    StatHead,
    StatPredictor,
    _StatisticsRound,
    collect_statistics,
    evaluate_heads,
    finetune_head,
    merged_moments,
    stat_layer_dims,
    stat_layers,
    terminal_statistics,
    summarize_heads,
)
from fedlib.engines.inprocess import weights_key
from fedlib.federation import ClientData, Federation, make_federation
from fedlib.heads import MMS, SASP, CCVRHead, FedCGSHead, Fed3RHead, FedNCMHead, LDAHead, MahalanobisNCM
from fedlib.loop import LoopConfig
from fedlib.results import RunResult
from fedlib.run import evaluate_deployment, run_federated
from fedlib.messages import State
from fedlib.models import build_model
from fedlib.protocol import ClientContext, Event, load_model
from fedlib.stats import ClassMoments, feature_moments
from fedlib.training import TrainConfig

C = 4
LAYERS = ("fc1", "penultimate")  # MLP hidden=(16, 8): d = 16 + 8
D = 24
TRAIN = TrainConfig(epochs=1, batch_size=8, lr=0.1)
HEADS = {  # a fresh, unfitted head of every kind StatHead deploys (CCVR with few virtual features and steps)
    "fedncm": FedNCMHead, "lda": LDAHead, "fedcgs": FedCGSHead, "fed3r": Fed3RHead,
    "ccvr": lambda: CCVRHead(n_virtual=20, steps=30), "mms": MMS, "sasp": SASP,
}
model_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=C, input_size=4, hidden=(16, 8))


def make_fed(absent=(), empty_client: int | None = None, seed: int = 0) -> Federation:
    """A tiny label-skewed federation (4 clients, 4 classes, 16-d Gaussian mixture); classes in
    ``absent`` are removed from every client's training split (kept in the tests), and client
    ``empty_client`` gets no training sample."""
    ds = make_gaussian_mixture(n_per_class=40, n_classes=C, dim=16, separation=4.0, seed=seed).dataset
    fed = make_federation(ds, n_clients=4, alpha=0.5, min_size=8, global_test_per_class=8, seed=seed)
    clients = []
    for k, c in enumerate(fed.clients):
        keep = np.flatnonzero(~np.isin(c.train.labels_np, list(absent)))
        if k == empty_client:
            keep = keep[:0]
        clients.append(ClientData(c.train.subset(keep), c.test))
    return Federation(clients, fed.global_test, C, {**fed.description, "absent": list(absent), "empty": empty_client})


def train(fed: Federation, rounds: int = 2, events=()) -> RunResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedClientsWarning)  # an empty client's NaN loss: dropped on purpose
        return run_federated(FedAvg(train=TRAIN), fed, model_fn,
                             LoopConfig(rounds=rounds, seed=1, on_nonfinite="drop", events=events, evaluate_last=False))


def backbone(result: RunResult) -> torch.nn.Module:
    return load_model(model_fn(), result.server).eval()


def pooled_moments(result: RunResult, fed: Federation, clients, layers=LAYERS) -> ClassMoments:
    x = torch.cat([fed.clients[k].train.x for k in clients])
    y = torch.cat([fed.clients[k].train.y for k in clients])
    return feature_moments(backbone(result), x, y, C, layers=list(layers))


def deploy(alg: StatHead, result: RunResult, fed: Federation, k: int) -> StatPredictor:
    """Client ``k``'s predictor through the hooks, as the loop's evaluation builds it (own workspace)."""
    ctx = ClientContext(k, result.rounds_done, model_fn(), C)
    msg = alg.configure_evaluate(result.server, result.rounds_done, [k])[k]
    return alg.deploy(ctx, result.client_states[k], msg, fed.clients[k], torch.Generator().manual_seed(k))


@pytest.fixture(scope="module")
def fed():
    return make_fed()


@pytest.fixture(scope="module")
def run(fed):
    return train(fed)


@pytest.fixture(scope="module")
def stats(run, fed):
    return collect_statistics(run, fed, model_fn, layers=LAYERS)


@pytest.fixture(scope="module")
def absent_case():
    f = make_fed(absent=(2,), empty_client=0)
    return f, collect_statistics(train(f), f, model_fn, layers=LAYERS)


# ---------------------------------------------------------------- the statistics round
def test_merged_moments_equal_feature_moments_on_pooled_training_data(run, fed, stats):
    merged = merged_moments(stats.server)
    ref = pooled_moments(run, fed, range(fed.n_clients))
    assert merged.grams.shape == (C, D, D) and merged.grams.dtype == torch.float64
    assert torch.equal(merged.counts, ref.counts)
    assert torch.allclose(merged.sums, ref.sums, rtol=1e-10, atol=1e-10)
    assert torch.allclose(merged.grams, ref.grams, rtol=1e-10, atol=1e-10)
    assert stat_layers(stats.server) == LAYERS and stat_layer_dims(stats.server) == (16, 8)
    held = terminal_statistics(stats.server)
    assert held.round == run.rounds_done + 1 and held.clients == fed.n_clients
    # the run itself is untouched: same frame, same client states, its ledger not extended
    assert stats.frame is run.frame and stats.rounds_done == run.rounds_done
    assert STATS_KEYS.isdisjoint(run.server.arrays) and len(run.ledger) < len(stats.ledger)
    for k, v in run.server.arrays.items():
        assert stats.server.arrays[k] is v  # the backbone is not modified


STATS_KEYS = {"stats/counts", "stats/sums", "stats/grams"}


def test_default_layer_is_the_penultimate_one_and_the_round_is_deterministic(run, fed):
    a = collect_statistics(run, fed, model_fn)
    b = collect_statistics(run, fed, model_fn, seed=7)
    assert stat_layers(a.server) == ("penultimate",) and merged_moments(a.server).dim == 8
    for k in STATS_KEYS:
        assert torch.equal(a.server.arrays[k], b.server.arrays[k])


def test_ledger_records_the_statistics_bytes_per_client(run, fed, stats):
    led = stats.ledger.to_frame()
    assert led.iloc[: len(run.ledger)].equals(run.ledger.to_frame())  # a copy of the run's, then the new round
    new = led.iloc[len(run.ledger):]
    assert set(new["round"]) == {run.rounds_done + 1}
    up, down = new[new["direction"] == "up"], new[new["direction"] == "down"]
    assert set(up["kind"]) == {"statistics"} and set(down["kind"]) == {"stats_request"}
    assert sorted(up["client"]) == sorted(down["client"]) == list(range(fed.n_clients))
    assert (up["bytes"] == C * (1 + D + D * D) * 8).all()  # counts, sums and Gram matrices in float64, nothing else
    model_bytes = sum(v.numel() * v.element_size() for k, v in run.server.arrays.items() if k.startswith("model/"))
    assert (down["bytes"] > model_bytes).all() and (down["bytes"] < model_bytes + 100).all()  # + the layer names


def test_server_receives_moments_only(run, fed, monkeypatch):
    seen = []
    original = _StatisticsRound.aggregate

    def spy(self, server, replies, round_):
        updates = list(replies)
        seen.extend((k, {n: tuple(t.shape) for n, t in m.arrays.items()}, dict(m.meta)) for k, m in updates)
        return original(self, server, updates, round_)

    monkeypatch.setattr(_StatisticsRound, "aggregate", spy)
    collect_statistics(run, fed, model_fn, layers=LAYERS)
    assert [k for k, _, _ in seen] == list(range(fed.n_clients))
    for _, shapes, meta in seen:
        assert shapes == {"stats/counts": (C,), "stats/sums": (C, D), "stats/grams": (C, D, D)} and meta == {}


def test_departed_clients_are_skipped(fed):
    result = train(fed, rounds=2, events=(Event(2, 1, "leave"),))
    got = collect_statistics(result, fed, model_fn, layers=LAYERS)
    ref = pooled_moments(result, fed, [0, 2, 3])
    merged = merged_moments(got.server)
    assert torch.equal(merged.counts, ref.counts) and torch.allclose(merged.grams, ref.grams, rtol=1e-10, atol=1e-10)
    led = got.ledger.to_frame()
    assert 1 not in set(led[led["kind"] == "statistics"]["client"])
    assert got.departed == [1] and got.registered == [0, 2, 3]
    frame = evaluate_deployment(StatHead(SASP()), got, fed, model_fn)
    assert sorted(set(frame["client"])) == [0, 2, 3]


def test_unknown_layer_is_the_models_error_before_any_client_works(run, fed, monkeypatch):
    calls = []
    monkeypatch.setattr(_StatisticsRound, "local_update", lambda *a, **k: calls.append(1))
    with pytest.raises(ValueError, match=r"unknown layer 'conv9' for MLP; valid: 'fc1', 'penultimate'"):
        collect_statistics(run, fed, model_fn, layers=("fc1", "conv9"))
    assert calls == []


def test_a_run_without_backbone_or_clients_is_a_clear_error(run, fed):
    bare = RunResult(run.frame, run.ledger, State(), run.client_states, run.rounds_done)
    with pytest.raises(ValueError, match="no 'model/' arrays"):
        collect_statistics(bare, fed, model_fn)
    gone = RunResult(run.frame, run.ledger, run.server, run.client_states, run.rounds_done, departed=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="no registered client"):
        collect_statistics(gone, fed, model_fn)
    with pytest.raises(ValueError, match="collect_statistics"):
        evaluate_heads(run, fed, model_fn, {"sasp": StatHead()})
    with pytest.raises(ValueError, match="collect_statistics"):
        evaluate_deployment(StatHead(LDAHead()), run, fed, model_fn)
    with pytest.raises(ValueError, match="grams must be one of"):
        collect_statistics(run, fed, model_fn, grams="diagonal")


def test_statistics_survive_save_and_load(stats, fed, tmp_path):
    back = RunResult.load(stats.save(tmp_path / "run"))
    a = evaluate_deployment(StatHead(SASP()), stats, fed, model_fn)
    b = evaluate_deployment(StatHead(SASP()), back, fed, model_fn)
    pd.testing.assert_frame_equal(a, b)


# ---------------------------------------------------------------- deployment
def test_sasp_with_infinite_m0_equals_the_mms_deployment(stats, fed):
    mms, inf = StatHead(MMS()), StatHead(SASP(m0=math.inf))
    x = fed.global_test.x
    for k in range(fed.n_clients):
        a, b = deploy(mms, stats, fed, k), deploy(inf, stats, fed, k)
        assert torch.equal(a.coef, b.coef) and torch.equal(a.intercept, b.intercept)
        assert torch.equal(a(x), b(x))
    frame = evaluate_heads(stats, fed, model_fn, {"mms": mms, "sasp": inf})
    va = frame[frame["head"] == "mms"]["value"].to_numpy()
    vb = frame[frame["head"] == "sasp"]["value"].to_numpy()
    assert np.array_equal(va, vb, equal_nan=True)


def test_frozen_features_give_the_protocol_of_the_deployed_heads(stats, fed):
    """Refitting heads on cached features (the m0 / gamma sweeps) gives evaluate_deployment's numbers."""
    frozen = FrozenFeatures(stats, fed, model_fn)
    assert torch.equal(frozen.moments.grams, merged_moments(stats.server).grams)
    assert frozen.layer_dims == stat_layer_dims(stats.server)
    mms = MMS().fit(frozen.moments, frozen.layer_dims)
    for m0 in (0.0, 3.0):
        deployed = summarize_heads(evaluate_heads(stats, fed, model_fn, {"sasp": StatHead(SASP(m0=m0))})).loc["sasp"]
        cached = frozen.summary([SASP(m0=m0).fit(mms, mom) for mom in frozen.client_moments])
        assert cached.keys() == deployed.to_dict().keys()
        for key, value in cached.items():
            assert value == pytest.approx(deployed[key], nan_ok=True), key
    with pytest.raises(ValueError, match="one head per registered client"):
        frozen.summary([mms])


def test_frozen_features_score_each_clients_own_pool_as_the_loop_does(stats, fed):
    """Clients 2 and 3 share a pool of their own (the global test set shifted: another input
    distribution); clients 0 and 1 keep the global test set as their pool. The cached features
    give evaluate_deployment's pooled scores, and the own pool changes them."""
    shifted = dataclasses.replace(fed.global_test, x=fed.global_test.x + 0.7)
    pooled_fed = dataclasses.replace(fed, clients=[c if k < 2 else dataclasses.replace(c, pool=shifted)
                                                   for k, c in enumerate(fed.clients)])
    frozen = FrozenFeatures(stats, pooled_fed, model_fn)
    assert frozen._pool[2] is frozen._pool[3] and frozen._pool[0] is None  # one feature pass per pool object
    mms = MMS().fit(frozen.moments, frozen.layer_dims)
    heads = [SASP(m0=3.0).fit(mms, mom) for mom in frozen.client_moments]
    deployed = summarize_heads(evaluate_heads(stats, pooled_fed, model_fn, {"sasp": StatHead(SASP(m0=3.0))})).loc["sasp"]
    cached = frozen.summary(heads)
    for key, value in cached.items():
        assert value == pytest.approx(deployed[key], nan_ok=True), key
    per_client = evaluate_heads(stats, pooled_fed, model_fn, {"sasp": StatHead(SASP(m0=3.0))})
    plain = evaluate_heads(stats, fed, model_fn, {"sasp": StatHead(SASP(m0=3.0))})
    pooled = lambda f: f[f["metric"] == "pooled"].set_index("client")["value"]  # noqa: E731
    assert np.array_equal(pooled(per_client)[[0, 1]], pooled(plain)[[0, 1]])  # the global test: the same
    assert not np.array_equal(pooled(per_client)[[2, 3]], pooled(plain)[[2, 3]])  # their own pool: other images


def test_server_head_matches_the_heads_fitted_on_the_merged_moments(stats, fed):
    m = merged_moments(stats.server)
    mms = MMS(0.1).fit(m, (16, 8))
    pred = deploy(StatHead(MMS(gamma=0.1)), stats, fed, 1)
    assert torch.equal(pred.coef, mms.coef_) and torch.equal(pred.intercept, mms.intercept_)
    # SASP on the client: its own counts and sums under the same backbone
    own = pooled_moments(stats, fed, [1])
    sasp = SASP(3.0).fit(mms, own)
    got = deploy(StatHead(SASP(m0=3.0, gamma=0.1)), stats, fed, 1)
    assert torch.allclose(got.coef, sasp.coef_, rtol=1e-9, atol=1e-12)
    assert torch.allclose(got.intercept, sasp.intercept_, rtol=1e-9, atol=1e-12)
    # the predictor is the head on the concatenated unscaled features
    h = torch.cat(list(backbone(stats).features(fed.global_test.x, list(LAYERS)).values()), 1).double()
    assert torch.allclose(got(fed.global_test.x), sasp.decision_function(h), rtol=1e-9, atol=1e-9)


def test_mms_arrays_round_trip(stats):
    mms = MMS(0.2).fit(merged_moments(stats.server), (16, 8))
    back = MMS.from_arrays(mms.to_arrays(), (16, 8), 0.2)
    z = torch.randn(5, D, dtype=torch.float64)
    assert torch.equal(back.decision_function(z), mms.decision_function(z))
    assert torch.allclose(back.scaled_coef_, mms.scaled_coef_) and back.layer_dims_ == (16, 8)
    client = ClassMoments.from_features(z, torch.tensor([0, 1, 1, 3, 3]), C)
    assert torch.equal(SASP(2.0).fit(back, client).coef_, SASP(2.0).fit(mms, client).coef_)


@pytest.mark.parametrize("head", HEADS)
def test_every_head_deploys_finite_logits_except_minus_inf_for_a_class_absent_everywhere(head, absent_case):
    fed, result = absent_case  # class 2 in no client's training split; client 0 has no training sample
    alg = StatHead(HEADS[head]())
    x = fed.global_test.x
    for k in range(fed.n_clients):
        pred = deploy(alg, result, fed, k)
        logits = pred(x)
        assert logits.dtype == torch.float64 and not bool(torch.isnan(logits).any())
        assert bool(torch.isfinite(logits[:, [0, 1, 3]]).all()) and bool((logits[:, 2] == -math.inf).all())
        assert bool(torch.isfinite(pred.coef).all()) and bool((pred.coef[2] == 0).all())
        assert not bool((logits.argmax(1) == 2).any())
    frame = evaluate_deployment(alg, result, fed, model_fn)
    assert frame["value"].notna().any() and np.isfinite(frame[frame["metric"] == "global"]["value"]).all()


def test_a_client_without_samples_deploys_the_shared_head(absent_case):
    fed, result = absent_case
    led = result.ledger.to_frame()
    up = led[(led["kind"] == "statistics") & (led["client"] == 0)]
    assert len(up) == 1  # it replied (zero moments), like every registered client
    merged = merged_moments(result.server)
    assert torch.equal(merged.counts, pooled_moments(result, fed, [1, 2, 3]).counts)
    a, b = deploy(StatHead(SASP(m0=0.0)), result, fed, 0), deploy(StatHead(MMS()), result, fed, 0)
    assert torch.equal(a.coef, b.coef) and torch.equal(a.intercept, b.intercept)
    ft = deploy(StatHead(LDAHead(), finetune=TrainConfig(epochs=3, lr=0.1)), result, fed, 0)
    assert torch.equal(ft.coef, deploy(StatHead(LDAHead()), result, fed, 0).coef)  # nothing to fine-tune on


@pytest.mark.parametrize("head", ["lda", "fedcgs", "ccvr", "mms", "sasp"])
def test_singular_within_class_covariance_gives_finite_heads(head):
    """Wide features (64 + 32 units, ReLU: dead units, fewer samples per class than dimensions):
    the class and pooled covariances are singular."""
    fed = make_fed()
    wide = functools.partial(build_model, "mlp", in_channels=1, n_classes=C, input_size=4, hidden=(64, 32))
    result = run_federated(FedAvg(train=TRAIN), fed, wide, LoopConfig(rounds=1, evaluate_last=False))
    result = collect_statistics(result, fed, wide, layers=("fc1", "penultimate"))
    m = merged_moments(result.server)
    assert int(torch.linalg.matrix_rank(m.class_covariances()[0])) < m.dim  # singular indeed
    alg = StatHead(HEADS[head]())
    ctx = ClientContext(1, 1, wide(), C)
    pred = alg.deploy(ctx, State(), alg.configure_evaluate(result.server, 1, [1])[1], fed.clients[1], torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(pred.coef).all() and torch.isfinite(pred.intercept).all())
    assert bool(torch.isfinite(pred(fed.global_test.x)).all())


@pytest.fixture(scope="module")
def zero_stats(run, fed):
    """A backbone with all-zero weights: every feature of every layer is 0."""
    zero = {k: torch.zeros_like(v) if k.startswith("model/") else v for k, v in run.server.arrays.items()}
    return collect_statistics(RunResult(run.frame, run.ledger, State(zero, dict(run.server.meta)), run.client_states,
                                        run.rounds_done), fed, model_fn, layers=LAYERS)


@pytest.mark.parametrize("head", HEADS)
def test_all_zero_features_give_no_nan_anywhere(head, zero_stats, fed):
    result = zero_stats
    assert float(merged_moments(result.server).grams.abs().sum()) == 0.0
    alg = StatHead(HEADS[head](), finetune=TrainConfig(epochs=1, lr=0.1))
    for k in range(fed.n_clients):
        pred = deploy(alg, result, fed, k)
        assert bool(torch.isfinite(pred.coef).all() and torch.isfinite(pred.intercept).all())
        assert bool(torch.isfinite(pred(fed.global_test.x)).all())


def test_shared_heads_share_global_predictions_personalized_heads_do_not(stats, fed):
    for head, shared in (("fedcgs", True), ("mms", True), ("sasp", False)):
        keys = {weights_key(deploy(StatHead(HEADS[head]()), stats, fed, k)) for k in range(fed.n_clients)}
        assert (len(keys) == 1) == shared, head
    ft = {weights_key(deploy(StatHead(FedCGSHead(), finetune=TrainConfig(epochs=1, lr=0.05)), stats, fed, k)) for k in range(4)}
    assert len(ft) == fed.n_clients


def test_the_server_fits_once_per_server_state(stats, fed, monkeypatch):
    calls = []
    original = StatHead._fit
    monkeypatch.setattr(StatHead, "_fit", lambda self, server: calls.append(1) or original(self, server))
    template = LDAHead()
    alg = StatHead(template)
    evaluate_deployment(alg, stats, fed, model_fn)
    evaluate_deployment(alg, stats, fed, model_fn)
    assert len(calls) == 1
    assert not hasattr(template, "coef_")  # the server fits a clone: the template stays unfitted
    alg.head.reg = 0.5  # new hyper-parameters: fitted again
    evaluate_deployment(alg, stats, fed, model_fn)
    assert len(calls) == 2


def test_ccvr_starts_from_the_backbones_head_on_penultimate_features(run, fed):
    pen = collect_statistics(run, fed, model_fn)  # penultimate only
    alg = StatHead(CCVRHead(steps=0))
    pred = deploy(alg, pen, fed, 0)
    w, b = run.server.arrays["model/head.weight"], run.server.arrays["model/head.bias"]
    assert torch.allclose(pred.coef, w.double()) and torch.allclose(pred.intercept, b.double())
    # the deployed predictor with zero steps is the backbone's own model
    assert torch.allclose(pred(fed.global_test.x), backbone(run)(fed.global_test.x).double(), atol=1e-5)


def test_local_finetuning_fits_the_local_data_and_keeps_absent_classes_out(absent_case):
    fed, result = absent_case
    k = 1
    base = deploy(StatHead(FedNCMHead()), result, fed, k)
    tuned = deploy(StatHead(FedNCMHead(), finetune=TrainConfig(epochs=20, lr=0.1)), result, fed, k)
    x, y = fed.clients[k].train.x, fed.clients[k].train.y
    ce = lambda p: float(torch.nn.functional.cross_entropy(p(x).detach().masked_fill(~p.valid, -1e30), y))  # noqa: E731
    assert ce(tuned) < ce(base)
    assert tuned.intercept[2] == 0 and not bool(tuned.valid[2]) and bool((tuned(x)[:, 2] == -math.inf).all())


def test_finetune_head_refuses_labels_of_never_predicted_classes():
    coef, intercept = torch.zeros(3, 2, dtype=torch.float64), torch.tensor([0.0, -math.inf, 0.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"labels \[1\]"):
        finetune_head(coef, intercept, torch.ones(2, 2), torch.tensor([0, 1]), TrainConfig(), torch.Generator())
    w, b = finetune_head(coef, intercept, torch.ones(2, 2), torch.tensor([0, 2]), TrainConfig(epochs=2), torch.Generator())
    assert b[1] == -math.inf and bool((w[1] == 0).all()) and bool(torch.isfinite(w).all())


def test_evaluate_heads_and_summary(stats, fed):
    heads = {"fedavg": FedAvg(), "fedncm": StatHead(FedNCMHead()), "sasp": StatHead(SASP())}
    frame = evaluate_heads(stats, fed, model_fn, heads)
    assert list(frame.columns) == ["head", "round", "client", "metric", "value"]
    assert list(dict.fromkeys(frame["head"])) == list(heads)
    table = summarize_heads(frame)
    assert list(table.index) == list(heads) and "global" in table.columns
    with pytest.raises(ValueError, match="heads is empty"):
        evaluate_heads(stats, fed, model_fn, {})


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("head, match", [
    ("sasp", "head must be a linear head of fedlib.heads .* got 'sasp'"),
    (MahalanobisNCM(), r"head must be a linear head .* got MahalanobisNCM\(reg=0.1\)"),
    (MMS(gamma=0.0), "gamma"), (MMS(gamma=-1.0), "gamma"), (MMS(gamma=math.nan), "gamma"),
    (SASP(m0=-1.0), "m0"), (SASP(m0=math.nan), "m0"), (SASP(gamma=0.0), "gamma"),
    (LDAHead(reg=-0.1), "reg"), (LDAHead(priors="uniform"), "priors"), (FedCGSHead(reg=math.inf), "reg"),
    (Fed3RHead(lam=0.0), "lam"), (CCVRHead(n_virtual=0), "n_virtual"), (CCVRHead(steps=-1), "steps"),
    (CCVRHead(lr=0.0), "lr"), (CCVRHead(reg=0.0), "reg"),
])
def test_bad_heads_are_clear_errors_at_construction(head, match):
    with pytest.raises(ValueError, match=match):
        StatHead(head)


def test_bad_finetune_is_a_clear_error():
    with pytest.raises(ValueError, match="finetune"):
        StatHead(LDAHead(), finetune={"epochs": 1})


def test_stathead_is_a_deployment_rule_not_a_registered_algorithm(fed):
    assert "stathead" not in ALGORITHMS
    with pytest.raises(ValueError, match="unknown algorithm 'stathead'"):
        make_algorithm("stathead")
    assert isinstance(StatHead().head, SASP)  # the default: FedGRC's personalized head
    with pytest.raises(ValueError, match="does not train"):
        run_federated(StatHead(LDAHead()), fed, model_fn, LoopConfig(rounds=1))


# ---------------------------------------------------------------- one statistics round per run
def test_collecting_statistics_twice_on_one_result_is_an_error(run, fed, stats):
    with pytest.raises(ValueError, match=r"already holds terminal statistics \(round 3, layers 'fc1,penultimate'\)"):
        collect_statistics(stats, fed, model_fn)
    again = collect_statistics(run, fed, model_fn, layers=LAYERS)  # from the training result: the same round
    assert terminal_statistics(again.server).round == terminal_statistics(stats.server).round
    for k in STATS_KEYS:
        assert torch.equal(again.server.arrays[k], stats.server.arrays[k])


# ---------------------------------------------------------------- the compact payload
@pytest.fixture(scope="module")
def compact(run, fed):
    return collect_statistics(run, fed, model_fn, layers=LAYERS, grams="total")


def test_compact_statistics_send_the_total_gram_only(run, fed, stats, compact):
    led = compact.ledger.to_frame()
    up = led[(led["kind"] == "statistics")]
    assert (up["bytes"] == (C * (1 + D) + D * D) * 8).all()  # about C times fewer than C (1 + D + D^2)
    merged, full = merged_moments(compact.server), merged_moments(stats.server)
    assert merged.form == "total" and merged.grams.shape == (D, D)
    assert torch.equal(merged.counts, full.counts) and torch.equal(merged.sums, full.sums)
    torch.testing.assert_close(merged.grams, full.total_gram(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("head", ["fedncm", "lda", "fedcgs", "fed3r", "mms", "sasp"])
def test_heads_deployed_from_compact_statistics_equal_the_full_ones(head, fed, stats, compact):
    for k in range(fed.n_clients):
        a, b = deploy(StatHead(HEADS[head]()), compact, fed, k), deploy(StatHead(HEADS[head]()), stats, fed, k)
        torch.testing.assert_close(a.coef, b.coef, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(a.intercept, b.intercept, rtol=1e-7, atol=1e-9)


def test_ccvr_on_compact_statistics_is_a_clear_error(fed, compact):
    with pytest.raises(ValueError, match="CCVRHead needs the per-class Gram matrices.*grams='class'"):
        deploy(StatHead(CCVRHead()), compact, fed, 0)


def test_module_examples_run():
    failed, _ = doctest.testmod(deployment_module, optionflags=doctest.ELLIPSIS)
    assert failed == 0
