"""COSMOS and its model-agnostic baselines: the public set, pseudo-labels, Algorithm 1, the
distillation objective, clients of different architectures in the one loop, and bad input."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from torch import nn
from scipy.spatial.distance import cdist

from fedlib.algorithms import COMET, COSMOS, FedAvg, FedCT, FedMD, make_algorithm
from fedlib.algorithms.cosmos import COSMOSServer, cosmos_fits, cosmos_history, distill_stacked, hard_labels
from fedlib.algorithms.fedmd import PublicServer, cached_labels, grouping
from fedlib.clustering import GreedyB0, b0_for_clusters, candidate_thresholds, cluster_diameters, greedy_b0, group_purity
from fedlib.data import make_gaussian_mixture
from fedlib.distill import (PublicSet, aggregate_labels, augment, check_pseudo_labels, consistency_loss, distill,
                            distillation_objective, kl_rows, l1_distances, lemma52, lemma52_chain, majority_vote,
                            make_public_set, margin_profile_bound, soft_labels)
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.run import evaluate_deployment, run_federated
from fedlib.messages import Message, State
from fedlib.protocol import Event
from fedlib.models import ClientArchitectures, build_model
from fedlib.training import TrainConfig

ADAM = TrainConfig(epochs=1, batch_size=16, optimizer="adam", lr=1e-2)
FAST = dict(pretrain=ADAM, train=ADAM, distill=ADAM)


@pytest.fixture(scope="module")
def split():
    ds = make_gaussian_mixture(n_per_class=60, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    public, rest, hidden = make_public_set(ds, 0.2, seed=0)
    fed = make_federation(rest, n_clients=4, partition="dirichlet", alpha=0.5, min_size=8, global_test_per_class=10, seed=0)
    return ds, public, rest, hidden, fed


@pytest.fixture(scope="module")
def archs():
    return ClientArchitectures({"small": {"model": "mlp", "hidden": (8,)}, "wide": {"model": "mlp", "hidden": (32, 16)}},
                               ("small", "wide", "small", "wide"), in_channels=1, n_classes=3, input_size=4)


def server_fn():
    return build_model("mlp", in_channels=1, n_classes=3, input_size=4, hidden=(24,))


# ---- the public set --------------------------------------------------------------------------

def test_the_public_set_holds_out_a_share_of_every_class_and_hides_its_labels(split):
    ds, public, rest, hidden, _ = split
    assert len(public) + len(rest) == len(ds)
    assert np.bincount(hidden).tolist() == [12, 12, 12]  # 20 % of 60 per class
    assert not hasattr(public, "y") and public.overlap(rest.x) == 0
    assert public.overlap(ds.x) == len(public)


def test_an_empty_or_overlapping_public_set_is_refused(split):
    ds, public, *_ = split
    with pytest.raises(ValueError, match="the public set U is empty"):
        PublicSet(torch.zeros(0, 16))
    with pytest.raises(ValueError, match="share must be a number in \\(0, 1\\), got 1.5"):
        make_public_set(ds, 1.5)
    leaky = make_federation(ds, n_clients=3, alpha=0.5, min_size=8, global_test_per_class=10, seed=0)
    method = FedMD(public=public, **FAST)
    with pytest.raises(ValueError, match="the public set U overlaps client 0's data in [0-9]+ samples"):
        run_federated(method, leaky, functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4), LoopConfig(rounds=1))


# ---- pseudo-labels ---------------------------------------------------------------------------

def test_temperature_zero_is_hard_labels_and_a_negative_one_is_refused():
    logits = torch.tensor([[1.0, 3.0, 0.0], [2.0, 2.0, -1.0]])
    assert soft_labels(logits, 0).tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]  # ties to the lowest class
    assert torch.allclose(soft_labels(logits, 2.0), torch.softmax(logits / 2, dim=1))
    assert soft_labels(torch.tensor([[2.0, 0.0]]), 1e-40).tolist() == [[1.0, 0.0]]  # no overflow to NaN
    with pytest.raises(ValueError, match="temperature T must be a finite number >= 0 \\(0: hard labels\\), got -1"):
        soft_labels(logits, -1)


def test_received_pseudo_labels_must_have_the_shape_and_lie_on_the_simplex():
    good = torch.full((4, 3), 1 / 3)
    assert check_pseudo_labels(good, 4, 3) is good
    with pytest.raises(ValueError, match="have shape \\(4, 2\\); valid: \\(4, 3\\)"):
        check_pseudo_labels(torch.full((4, 2), 0.5), 4, 3)
    with pytest.raises(ValueError, match="not on the probability simplex"):
        check_pseudo_labels(torch.ones(4, 3), 4, 3)
    with pytest.raises(ValueError, match="must be finite"):
        check_pseudo_labels(torch.full((4, 3), float("nan")), 4, 3)


def test_l1_distances_equal_scipys_cityblock():
    g = torch.Generator().manual_seed(0)
    labels = torch.rand(5, 7, 3, generator=g).softmax(dim=2)
    ref = cdist(labels.reshape(5, -1).double().numpy(), labels.reshape(5, -1).double().numpy(), "cityblock")
    np.testing.assert_allclose(l1_distances(labels), ref, rtol=1e-12, atol=1e-12)


def test_the_aggregation_rules_by_hand():
    labels = torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]], [[0.2, 0.8]]])
    assert torch.allclose(aggregate_labels(labels, "mean"), torch.tensor([[1.7 / 3, 1.3 / 3]]))
    assert torch.allclose(aggregate_labels(labels, "median"), torch.tensor([[0.5, 0.5]]))  # medians 0.5, 0.5
    w = torch.tensor([1.0, 0.5, 0.8]) / 2.3
    assert torch.allclose(aggregate_labels(labels, "confidence"), (w[:, None, None] * labels).sum(0))
    # max: (1.0, 0.8) renormalized
    assert torch.allclose(aggregate_labels(labels, "max"), torch.tensor([[1.0 / 1.8, 0.8 / 1.8]]))
    with pytest.raises(ValueError, match="unknown pseudo-label aggregation 'vote'; valid: mean, median, max, confidence"):
        aggregate_labels(labels, "vote")


def test_majority_vote_breaks_ties_to_the_lowest_class():
    assert majority_vote(torch.tensor([[2, 0, 1], [1, 0, 2], [2, 1, 0]]), 3).tolist() == [2, 0, 0]


# ---- Algorithm 1 -----------------------------------------------------------------------------

def test_algorithm_1_on_a_hand_worked_example():
    # points on a line (l1 = |a - b|): 0, 1, 2, 10, 11, 30
    x = np.array([0.0, 1, 2, 10, 11, 30])
    d = np.abs(x[:, None] - x[None, :])
    labels, seeds = greedy_b0(d, 1.0)
    # neighbours within 1: client 1 has two (0, 2), clients 0, 2, 3, 4 one, client 5 none
    assert seeds == [1, 3, 5] and labels.tolist() == [0, 0, 0, 1, 1, 2]
    # a tie between 3 and 4 (one neighbour each, same distance): the lower index seeds
    labels, seeds = greedy_b0(d[3:5, 3:5], 1.0)
    assert seeds == [0] and labels.tolist() == [0, 0]
    # B0 = 0: every client alone; B0 = 30: one cluster
    assert len(greedy_b0(d, 0.0)[1]) == 6 and len(greedy_b0(d, 30.0)[1]) == 1
    assert b0_for_clusters(d, 3) == 1.0 and b0_for_clusters(d, 6) == 0.0
    fit = GreedyB0(target=3).fit(d)
    assert fit.n_clusters_ == 3 and fit.b0_ == 1.0 and fit.diameters_.tolist() == [2.0, 1.0, 0.0]
    assert (cluster_diameters(d, fit.labels_) <= 2 * fit.b0_).all()


def test_a_cluster_left_empty_has_no_diameter_and_cosmos_keeps_going():
    d = np.array([[0.0, 1.0, 9.0], [1.0, 0.0, 9.0], [9.0, 9.0, 0.0]])
    assert cluster_diameters(d[:2, :2], np.array([0, 0])).tolist() == [1.0]
    assert cluster_diameters(d[np.ix_([0, 2], [0, 2])], np.array([0, 2])).tolist() == [0.0, 0.0, 0.0]
    # COSMOS with fixed clusters: the only member of a cluster leaves, the next round still aggregates
    pub = PublicSet(torch.randn(4, 16, generator=torch.Generator().manual_seed(0)))
    srv = functools.partial(build_model, "mlp", in_channels=1, n_classes=2, input_size=4, hidden=(4,))
    m = COSMOS(public=pub, server_model=srv, b0=1.0, target_clusters=None, server_train=ADAM)
    a, b = [[1.0, 0.0]] * 4, [[0.0, 1.0]] * 4
    s1 = m.aggregate(m.init_server(srv()), [(0, _labels(a)), (1, _labels(a)), (2, _labels(b))], 1)
    lone = grouping(s1)[2]
    s2 = m.aggregate(m.on_event(s1, Event(2, 2, "leave")), [(0, _labels(a)), (1, _labels(a))], 2)
    assert 2 not in grouping(s2) and f"teacher/{lone}" not in s2.arrays and s2.meta["n_groups"] == 1
    assert cosmos_history(s2)[-1]["n_clusters"] == 1


def test_the_tie_rule_prefers_the_tighter_cluster():
    # clients 0 and 3 both have two neighbours within 2; 3's are closer in total
    x = np.array([0.0, 2.0, -2.0, 10.0, 11.0, 9.5])
    d = np.abs(x[:, None] - x[None, :])
    _, seeds = greedy_b0(d, 2.0)
    assert seeds[0] == 3


def test_bad_thresholds_and_distances_are_refused():
    d = np.zeros((2, 2))
    with pytest.raises(ValueError, match="B0 must be a finite number >= 0, got -1"):
        greedy_b0(d, -1)
    with pytest.raises(ValueError, match="symmetric"):
        greedy_b0(np.array([[0.0, 1.0], [2.0, 0.0]]), 1.0)
    with pytest.raises(ValueError, match="needs b0 .* or target"):
        GreedyB0()


# ---- the distillation objective ---------------------------------------------------------------

def test_augment_translates_each_image_by_its_own_offset_and_adds_noise():
    x = torch.randn(30, 2, 6, 6, generator=torch.Generator().manual_seed(0))
    out = augment(x, torch.Generator().manual_seed(1), shift=2, noise=0.0)
    g = torch.Generator().manual_seed(1)  # the same draws, by hand: zero padding then a crop per image
    dy, dx = torch.randint(-2, 3, (30,), generator=g), torch.randint(-2, 3, (30,), generator=g)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    ref = torch.stack([padded[i, :, 2 + int(dy[i]):8 + int(dy[i]), 2 + int(dx[i]):8 + int(dx[i])] for i in range(30)])
    assert torch.equal(out, ref)
    vec = torch.zeros(4, 5)
    noisy = augment(vec, torch.Generator().manual_seed(0), noise=0.1)
    assert noisy.shape == vec.shape and 0.01 < float(noisy.std()) < 0.3  # vectors: the noise only

def test_kl_rows_equal_torchs_kl_div():
    g = torch.Generator().manual_seed(1)
    t, z = torch.rand(6, 4, generator=g).softmax(1), torch.randn(6, 4, generator=g)
    ref = torch.nn.functional.kl_div(torch.log_softmax(z, 1), t, reduction="none").sum(1)
    assert torch.allclose(kl_rows(t, z), ref, atol=1e-6)


def test_the_consistency_gradient_with_and_without_the_detach():
    g = torch.Generator().manual_seed(2)
    clean = torch.randn(5, 3, generator=g, requires_grad=True)
    aug = torch.randn(5, 3, generator=g, requires_grad=True)
    consistency_loss(aug, clean, detach_target=True).sum().backward()
    assert clean.grad is None and aug.grad.abs().sum() > 0
    aug.grad = None
    consistency_loss(aug, clean, detach_target=False).sum().backward()
    # the paper's objective: d/dz_clean KL(p || q) = J_softmax^T (log p - log q + 1) (by hand)
    p = torch.softmax(clean.detach(), 1)
    dlogp = torch.log(p) - torch.log_softmax(aug.detach(), 1) + 1
    expected = p * (dlogp - (p * dlogp).sum(1, keepdim=True))
    assert torch.allclose(clean.grad, expected, atol=1e-6)
    # the augmented side's gradient is the same in both
    assert torch.allclose(aug.grad, torch.softmax(aug.detach(), 1) - p, atol=1e-6)


def test_distillation_without_consistency_is_kl_training_and_with_it_differs():
    x = torch.randn(40, 16, generator=torch.Generator().manual_seed(0))
    target = torch.rand(40, 3, generator=torch.Generator().manual_seed(1)).softmax(1)
    runs = {}
    for lam in (0.0, 5.0):
        m = build_model("mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,), seed=0)
        distill(m, x, target, ADAM, torch.Generator().manual_seed(3), lam=lam)
        runs[lam] = m
    # the lam = 0 objective is batchmean KL: reproduce one step by hand
    m0 = build_model("mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,), seed=0)
    loss = distillation_objective(m0, x[:16], target[:16])
    ref = torch.nn.functional.kl_div(torch.log_softmax(m0(x[:16]), 1), target[:16], reduction="batchmean")
    assert torch.allclose(loss, ref, atol=1e-6)
    assert not torch.equal(runs[0.0].head.weight, runs[5.0].head.weight)
    with pytest.raises(ValueError, match="lambda \\(the consistency weight\\) must be a finite number >= 0, got -1"):
        distill(m0, x, target, ADAM, torch.Generator(), lam=-1)


# ---- Lemma 5.2 on a hand example ---------------------------------------------------------------

def test_lemma52_terms_by_hand():
    # one client (row 0) and a second member; three supported points
    own = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]])
    other = torch.tensor([[0.0, 1.0], [0.9, 0.1], [0.2, 0.8]])
    t = lemma52(torch.stack([own, other]), 0, np.array([0, 0, 1]), np.array([True, True, True]))
    assert t.size == 3 and t.err_client == 0.0
    # the mean is (0.45, 0.55), (0.85, 0.15), (0.25, 0.75): point 0 flips to class 1
    assert t.err_mean == pytest.approx(1 / 3) and t.bad == 1
    # margins 0.8, 0.6, 0.4; l1 distances 1.8 + 0.2 + 0.2 = 2.2 = 2B
    assert t.gamma == pytest.approx(0.4) and t.B == pytest.approx(1.1)
    assert t.holds and t.bound == pytest.approx(0.0 + 2 * t.B / (0.4 * 3))
    # the proof's chain: S = |0.45 - 0.9| * 2 + |0.85 - 0.8| * 2 + |0.25 - 0.3| * 2 = 1.1; d_U(0, ·) = (0, 2.2)
    chain = lemma52_chain(torch.stack([own, other]).double(), 0, np.array([True, True, True]))
    assert chain.S == pytest.approx(1.1) and chain.mean_distance == pytest.approx(1.1)
    assert chain.max_distance == pytest.approx(2.2) and chain.diameter == pytest.approx(2.2)
    # on U_i = the first two points only: S = 1.0, d_U(0, 1) = 2.0
    assert lemma52_chain(torch.stack([own, other]).double(), 0, np.array([True, True, False])).S == pytest.approx(1.0)


def test_the_margin_profile_bound_by_hand():
    own = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.55, 0.45], [0.95, 0.05]], dtype=torch.float64)
    # margins 0.1, 0.2, 0.8, 0.9 (sorted): the terms 0 + 2B/(0.1 · 4), 1/4 + 2B/(0.2 · 4), 2/4 + 2B/(0.8 · 4), 3/4 + 2B/(0.9 · 4)
    for two_b in (0.04, 0.4, 4.0):
        terms = [0 + two_b / 0.4, 0.25 + two_b / 0.8, 0.5 + two_b / 3.2, 0.75 + two_b / 3.6]
        assert margin_profile_bound(own, two_b) == pytest.approx(min(terms), rel=1e-12)
    assert margin_profile_bound(own, 0.04) == pytest.approx(0.1)  # small B: τ = γ, the lemma's own term
    # a tie (margin 0) never gives the minimum; all ties: no bound
    assert margin_profile_bound(torch.tensor([[0.5, 0.5], [0.9, 0.1]], dtype=torch.float64), 0.2) == pytest.approx(0.5 + 0.2 / 1.6)
    assert margin_profile_bound(torch.tensor([[0.5, 0.5]], dtype=torch.float64), 0.2) == float("inf")


def test_the_candidate_thresholds_are_zero_and_every_distinct_distance():
    d = np.array([[0, 2, 1, 2], [2, 0, 2, 3], [1, 2, 0, 2], [2, 3, 2, 0]], float)
    assert candidate_thresholds(d).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert candidate_thresholds(np.zeros((1, 1))).tolist() == [0.0]
    with pytest.raises(ValueError, match="distances must be symmetric"):
        candidate_thresholds(np.array([[0, 1], [2, 0]], float))


# ---- clients of different architectures in the one loop ---------------------------------------

def test_architectures_are_validated_and_parameter_sharing_methods_refused(split, archs):
    *_, fed = split
    with pytest.raises(ValueError, match="architecture 'x' names model 'vgg16'; valid: cnn, mlp"):
        ClientArchitectures({"x": {"model": "vgg16"}}, ("x",), in_channels=1, n_classes=3)
    with pytest.raises(ValueError, match="assignment names unknown architecture\\(s\\) \\['big'\\]"):
        ClientArchitectures({"x": {"model": "mlp"}}, ("big",), in_channels=1, n_classes=3)
    with pytest.raises(ValueError, match="fedavg shares parameters, but the clients' architectures differ \\(small x2, wide x2\\)"):
        run_federated(FedAvg(), fed, archs, LoopConfig(rounds=1))
    with pytest.raises(ValueError, match="vectorized execution stacks clients of one architecture"):
        run_federated(FedMD(public=split[1]), fed, archs, LoopConfig(rounds=1), RunOptions(execution="vectorized"))
    short = dataclasses.replace(archs, assignment=("small",))
    with pytest.raises(ValueError, match="assigns 1 clients, but the federation has 4"):
        run_federated(FedMD(public=split[1]), fed, short, LoopConfig(rounds=1))


@pytest.mark.parametrize("name", ["cosmos", "fedmd", "fedct", "comet"])
def test_every_model_agnostic_method_runs_mixed_architectures_and_sends_no_parameter(name, split, archs):
    _, public, _, _, fed = split
    extra = dict(server_model=server_fn, target_clusters=2, server_train=ADAM) if name == "cosmos" else {}
    if name == "comet":
        extra = dict(k=2)
    method = make_algorithm(name, public=public, **FAST, **extra)
    cfg = LoopConfig(rounds=3, seed=4, eval_every=1)
    a, b = run_federated(method, fed, archs, cfg), run_federated(method, fed, archs, cfg)
    pd_a, pd_b = a.frame, b.frame
    assert pd_a.equals(pd_b)  # same seed, same results, bit for bit
    for k in range(fed.n_clients):  # each client's own model, of its own architecture
        want = archs.for_client(k).state_dict()
        got = a.client_states[k].with_prefix("model/")
        assert {n: t.shape for n, t in got.items()} == {n: t.shape for n, t in want.items()}
    led = a.ledger.to_frame()
    train = led[~led["kind"].str.startswith("eval:")]
    assert set(train["kind"]) <= {"start", "pseudo_labels", "teacher"}
    per_up = train[train["kind"] == "pseudo_labels"]["bytes"]
    n_u = len(public)
    assert (per_up <= n_u * 3 * 4 + 200).all()  # at most |U| x C float32 (+ the metadata)
    assert (train[train["kind"] == "teacher"]["round"] >= 2).all()  # the first round has no teacher yet
    assert 0 <= a.summary()["local"] <= 1


def test_fedct_sends_one_small_integer_per_public_sample(split, archs):
    _, public, _, _, fed = split
    run = run_federated(FedCT(public=public, **FAST), fed, archs, LoopConfig(rounds=2, seed=0, evaluate_last=False))
    up = run.ledger.to_frame().query("kind == 'pseudo_labels'")["bytes"]
    assert (up < len(public) + 100).all()


def test_fedct_trains_on_the_union_of_its_data_and_the_labelled_public_set(split):
    """FedCT's Algorithm 1: with a consensus, one training on the union (its data, then U with the
    consensus as labels), not a digest on U followed by a revisit of its data."""
    from fedlib.algorithms.fedmd import client_model
    from fedlib.protocol import ClientContext
    from fedlib.training import local_train
    _, public, _, _, fed = split
    method = FedCT(public=public, **FAST)
    data = fed.clients[0]

    def fresh():
        return build_model("mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,))

    state, _ = method.local_update(ClientContext(0, 1, fresh(), 3), State(), Message(meta={"round": 1}), data,
                                   torch.Generator().manual_seed(1))  # the first round: pre-training on its data
    teacher = torch.arange(len(public)) % 3
    message = Message(arrays={"teacher": teacher.to(torch.uint8)}, meta={"round": 2}, kind="teacher")
    got, reply = method.local_update(ClientContext(0, 2, fresh(), 3), state, message, data, torch.Generator().manual_seed(2))
    want = client_model(ClientContext(0, 2, fresh(), 3), state, method.seed)
    local_train(want, torch.cat([data.train.x, public.x]), torch.cat([data.train.y.long(), teacher]), ADAM,
                torch.Generator().manual_seed(2))
    for name, value in want.state_dict().items():
        assert torch.equal(got.arrays[f"model/{name}"], value), name
    assert reply.arrays["labels"].dtype == torch.uint8 and reply.arrays["labels"].shape == (len(public),)
    with pytest.raises(ValueError, match="the server's hard labels have shape"):
        method.local_update(ClientContext(0, 2, fresh(), 3), state, Message(arrays={"teacher": teacher.float()}), data,
                            torch.Generator())


def test_cosmos_clusters_deploys_and_records_its_history(split, archs):
    _, public, _, _, fed = split
    method = COSMOS(public=public, server_model=server_fn, target_clusters=2, server_train=ADAM, **FAST)
    run = run_federated(method, fed, archs, LoopConfig(rounds=2, seed=0))
    groups = grouping(run.server)
    assert sorted(groups) == [0, 1, 2, 3] and len(set(groups.values())) <= 2
    hist = cosmos_history(run.server)
    assert [h["round"] for h in hist] == [1, 2] and hist[0]["max_diameter"] <= 2 * hist[0]["b0"] + 1e-9
    assert hist[0]["seeds"] == hist[1]["seeds"]  # fixed after PTC (the paper's default)
    led = run.ledger.to_frame()
    assert (led["kind"] == "eval:cluster_model").sum() == fed.n_clients
    own = evaluate_deployment(dataclasses.replace(method, deploy_model="client"), run, fed, archs, LoopConfig(rounds=2, seed=0))
    assert set(own["metric"]) >= {"local", "global"}
    again = run_federated(dataclasses.replace(method, recluster=True), fed, archs, LoopConfig(rounds=2, seed=0))
    # re-clustered on round 2's labels: Algorithm 1 on those labels' hard label vectors gives the recorded seeds
    hard = torch.stack([hard_labels(cached_labels(again.server)[k].float()) for k in range(4)])
    from_labels = GreedyB0(target=2).fit(l1_distances(hard))
    assert cosmos_history(again.server)[1]["seeds"] == from_labels.seeds_
    # every round and cluster records how often the server model's argmax agrees with its targets'
    fits = cosmos_fits(run.server)
    assert sorted({(f["round"], f["cluster"]) for f in fits}) == sorted({(r, g) for r in (1, 2) for g in set(groups.values())})
    assert all(0.0 <= f["agreement"] <= 1.0 for f in fits)


def test_hard_labels_make_the_distance_count_disagreements():
    # two clients whose soft labels are close (l1 0.2) but whose argmax differs on one image: 2 apart when hard
    a = torch.tensor([[0.55, 0.45], [0.9, 0.1]])
    b = torch.tensor([[0.45, 0.55], [0.9, 0.1]])
    assert np.isclose(float(l1_distances(torch.stack([a, b]))[0, 1]), 0.2)
    assert float(l1_distances(torch.stack([hard_labels(a), hard_labels(b)]))[0, 1]) == 2.0
    with pytest.raises(ValueError, match=r"labels must have shape \(n, C\)"):
        hard_labels(torch.zeros(3))


def test_cosmos_clusters_hard_labels_by_default_and_soft_on_request(split, archs):
    # a low-margin client: soft labels near another group's, hard labels its own; the input changes the grouping
    _, public, _, _, _ = split
    method = COSMOS(public=public, server_model=server_fn, target_clusters=2, server_train=ADAM, **FAST)
    n = len(public)
    one = torch.zeros(n, 2); one[:, 0] = 1.0
    two = torch.zeros(n, 2); two[:, 1] = 1.0
    low = torch.full((n, 2), 0.5); low[:, 0] += 0.01; low[:, 1] -= 0.01  # argmax class 0, barely
    labels = {0: one, 1: one.clone(), 2: two, 3: two.clone(), 4: low}
    from fedlib.algorithms.cosmos import COSMOSServer
    s_hard, s_soft = COSMOSServer(n_classes=2, n_public=n), COSMOSServer(n_classes=2, n_public=n)
    hard = method.group(s_hard, labels, 1)
    assert hard[4] == hard[0] and hard[0] != hard[2] and s_hard.b0 == 0.0  # client 4's hard labels are client 0's
    soft = dataclasses.replace(method, cluster_on="soft").group(s_soft, labels, 1)
    # soft: client 4 is 0.98 per image from clients 0-1 (1.02 from 2-3), so two clusters need B0 = 0.98 n
    assert np.isclose(s_soft.b0, 0.98 * n, rtol=1e-4) and soft[4] == soft[0] and soft[0] != soft[2]
    with pytest.raises(ValueError, match="unknown cluster_on 'argmax'; valid: hard, soft"):
        dataclasses.replace(method, cluster_on="argmax")


def test_cosmos_radius_scales_the_ball_to_the_images(split):
    _, public, _, _, _ = split
    m = COSMOS(public=public, server_model=server_fn, radius=0.1)
    flat = public.x.reshape(len(public.x), -1).float()
    assert m.shift == 0 and np.isclose(m.noise, 0.1 * float(flat.norm(dim=1).mean()) / np.sqrt(flat.shape[1]))
    # the noise's norm is about radius x the mean norm
    drawn = augment(public.x.float(), torch.Generator().manual_seed(0), shift=m.shift, noise=m.noise) - public.x.float()
    assert abs(float(drawn.reshape(len(drawn), -1).norm(dim=1).mean()) / float(flat.norm(dim=1).mean()) - 0.1) < 0.02
    assert COSMOS(public=public, server_model=server_fn).shift == 1  # without radius: the family's augmentation
    with pytest.raises(ValueError, match="radius must be a finite number > 0"):
        COSMOS(public=public, server_model=server_fn, radius=-0.1)


def test_cosmos_bad_input_is_refused(split):
    public = split[1]
    with pytest.raises(ValueError, match="B0 must be a finite number >= 0, got -0.5"):
        COSMOS(public=public, server_model=server_fn, b0=-0.5)
    with pytest.raises(ValueError, match="temperature T must be a finite number >= 0"):
        COSMOS(public=public, server_model=server_fn, temperature=-1.0)
    with pytest.raises(ValueError, match="lambda \\(the consistency weight\\) must be a finite number >= 0, got -2"):
        COSMOS(public=public, server_model=server_fn, lam=-2)
    with pytest.raises(ValueError, match="COSMOS needs server_model"):
        COSMOS(public=public)
    with pytest.raises(ValueError, match="needs public=PublicSet"):
        FedMD(public=None)
    with pytest.raises(ValueError, match="unknown deploy_model 'both'; valid: server, client"):
        COSMOS(public=public, server_model=server_fn, deploy_model="both")
    with pytest.raises(ValueError, match="COMET's number of clusters k must be an int >= 1, got 0"):
        COMET(public=public, k=0)


def test_a_reply_with_malformed_pseudo_labels_is_refused(split):
    public = split[1]
    method = FedMD(public=public)
    server = method.init_server(server_fn())
    bad = Message(arrays={"labels": torch.full((len(public), 2), 0.5)}, meta={"n_samples": 3}, kind="pseudo_labels")
    with pytest.raises(ValueError, match="client 7's pseudo-labels have shape \\(36, 2\\); valid: \\(36, 3\\)"):
        method.aggregate(server, [(7, bad)], 1)
    off = Message(arrays={"labels": torch.full((len(public), 3), 0.5)}, meta={"n_samples": 3}, kind="pseudo_labels")
    with pytest.raises(ValueError, match="client 7's pseudo-labels are not on the probability simplex"):
        method.aggregate(server, [(7, off)], 1)
    hard = FedCT(public=public)
    with pytest.raises(ValueError, match="client 1's hard labels hold class 5; valid: 0..2"):
        hard.aggregate(server, [(1, Message(arrays={"labels": torch.full((len(public),), 5, dtype=torch.uint8)},
                                            meta={"n_samples": 1}))], 1)


def test_the_default_training_message_is_one_object_shared_by_every_client():
    method = FedAvg()
    server = State(arrays={"model/w": torch.zeros(2), "extra": torch.ones(1)})
    out = method.configure_train(server, 1, [3, 5])
    assert list(out) == [3, 5] and out[3] is out[5] and list(out[3].arrays) == ["model/w"]
    assert method.configure_evaluate(server, 1, [3])[3].arrays.keys() == out[3].arrays.keys()


def test_group_purity_by_hand():
    assert group_purity({0: 0, 1: 0, 2: 1, 3: 1}, np.array([0, 0, 1, 1])) == 1.0
    assert group_purity({0: 0, 1: 0, 2: 0, 3: 0}, np.array([0, 0, 1, 1])) == 0.5


# ---- bookkeeping under partial participation, events and re-clustering --------------------------

def _labels(rows):
    return Message(arrays={"labels": torch.tensor(rows)}, meta={"n_samples": 1}, kind="pseudo_labels")


def test_a_renumbered_cluster_gets_its_own_members_teacher_not_the_old_number():
    # round 1: {0, 1} say class 0, {2, 3} class 1; round 2 only client 0 replies, now like {2, 3}
    pub = PublicSet(torch.randn(4, 16, generator=torch.Generator().manual_seed(0)))
    srv = functools.partial(build_model, "mlp", in_channels=1, n_classes=2, input_size=4, hidden=(4,))
    fit = TrainConfig(epochs=30, batch_size=16, optimizer="adam", lr=1e-2)  # enough steps to fit four public samples
    m = COSMOS(public=pub, server_model=srv, b0=1.0, target_clusters=None, recluster=True, server_train=fit)
    a, b = [[1.0, 0.0]] * 4, [[0.0, 1.0]] * 4
    s1 = m.aggregate(m.init_server(srv()), [(0, _labels(a)), (1, _labels(a)), (2, _labels(b)), (3, _labels(b))], 1)
    s2 = m.aggregate(s1, [(0, _labels(b))], 2)
    groups = grouping(s2)
    assert groups[0] == groups[2] == groups[3] != groups[1]
    # client 1 alone: its cluster model is distilled toward its own (cached) class-0 labels, not the old {2, 3}'s
    teacher = m.configure_train(s2, 3, [1])[1].arrays["teacher"]
    assert int((teacher.argmax(1) == 0).sum()) >= 3
    # COMET's teacher is the consensus itself: exactly client 1's own labels
    comet = COMET(public=pub, k=2, **FAST)
    c1 = comet.aggregate(comet.init_server(srv()), [(0, _labels(a)), (1, _labels(a)), (2, _labels(b)), (3, _labels(b))], 1)
    c2 = comet.aggregate(c1, [(0, _labels(b))], 2)
    assert torch.equal(comet.configure_train(c2, 3, [1])[1].arrays["teacher"], torch.tensor(a))


def test_comet_groups_by_kmeans_numbers_by_lowest_client_and_caps_k():
    pub = PublicSet(torch.zeros(3, 16))
    m = COMET(public=pub, k=2)
    a, b = torch.tensor([[1.0, 0.0]] * 3), torch.tensor([[0.0, 1.0]] * 3)
    groups = m.group(PublicServer(n_classes=2, n_public=3), {5: b, 1: a, 2: a, 7: b}, 1)
    assert groups == {1: 0, 2: 0, 5: 1, 7: 1}
    assert set(COMET(public=pub, k=9).group(PublicServer(n_classes=2, n_public=3), {0: a, 1: b}, 1).values()) == {0, 1}  # k capped


def test_a_round_without_labels_changes_nothing_and_a_leaver_is_forgotten(split, archs):
    _, public, _, _, fed = split
    for method in (COSMOS(public=public, server_model=server_fn, target_clusters=2, server_train=ADAM, **FAST),
                   COMET(public=public, k=2, **FAST), FedMD(public=public, **FAST)):
        empty = method.init_server(server_fn())
        assert method.aggregate(empty, [], 1) is empty
        # every client joins at round 2: round 1 has no reply at all
        joins = tuple(Event(2, k, "join") for k in range(fed.n_clients))
        run = run_federated(method, fed, archs, LoopConfig(rounds=2, seed=0, events=joins))
        assert sorted(grouping(run.server)) == list(range(fed.n_clients))
        left = run_federated(method, fed, archs, LoopConfig(rounds=3, seed=0, events=(Event(2, 3, "leave"),)))
        assert 3 not in grouping(left.server) and 3 not in cached_labels(left.server)


def test_partial_participation_and_a_resumed_cosmos_run_are_bit_for_bit(split, archs, tmp_path):
    _, public, _, _, fed = split
    method = COSMOS(public=public, server_model=server_fn, target_clusters=2, server_train=ADAM, **FAST)
    cfg = LoopConfig(rounds=3, seed=2, participation=0.5)
    whole = run_federated(method, fed, archs, cfg)
    ck = RunOptions(checkpoint=str(tmp_path / "ck.json"))
    run_federated(method, fed, archs, cfg, ck, stop_after=2)
    resumed = run_federated(method, fed, archs, cfg, ck)
    assert whole.frame.equals(resumed.frame)
    assert all(torch.equal(whole.server.arrays[k], resumed.server.arrays[k]) for k in whole.server.arrays)
    assert whole.server.meta == resumed.server.meta


def test_an_unclustered_client_is_evaluated_with_the_first_cluster_model(split):
    public = split[1]
    m = COSMOS(public=public, server_model=server_fn, b0=100.0, target_clusters=None, server_train=ADAM)
    s = m.aggregate(m.init_server(server_fn()), [(0, _labels([[1.0, 0.0, 0.0]] * len(public)))], 1)
    msg = m.configure_evaluate(s, 1, [9])[9]
    assert msg.kind == "cluster_model" and msg.meta["group"] == 0


def test_the_objective_with_consistency_by_hand():
    torch.manual_seed(0)
    model = build_model("mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,), seed=0)
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(1))
    t = torch.rand(6, 3, generator=torch.Generator().manual_seed(2)).softmax(1)
    got = distillation_objective(model, x, t, torch.Generator().manual_seed(3), lam=2.0, n_augment=2)
    g = torch.Generator().manual_seed(3)  # the same two draws of x', by hand
    p = torch.softmax(model(x), 1)
    kl = lambda a, b: (a * (a.log() - b.log())).sum(1)
    want = kl(t, p)
    for _ in range(2):
        want = want + 2.0 * kl(p, torch.softmax(model(augment(x, g)), 1))
    assert torch.allclose(got, want.mean(), atol=1e-6)


def test_more_bad_values_are_refused():
    neg = torch.tensor([[1.2, -0.2], [0.5, 0.5]])
    with pytest.raises(ValueError, match="not on the probability simplex \\(smallest entry -0.2"):
        check_pseudo_labels(neg, 2, 2)
    with pytest.raises(ValueError, match="B0 must be a finite number >= 0, got nan"):
        greedy_b0(np.zeros((2, 2)), float("nan"))
    with pytest.raises(ValueError, match="the target number of clusters must be an int >= 1, got 0"):
        GreedyB0(target=0)


@pytest.mark.parametrize("lam, n_augment, detach", [(2.0, 1, False), (0.0, 1, False), (2.0, 2, True)])
def test_the_stacked_server_distillation_is_each_clusters_own(lam, n_augment, detach):
    # distill_stacked trains every cluster's model with its own stream: the same weights as one distill per model
    x = torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(0))  # images: the shift and the noise both drawn
    cfg = TrainConfig(steps=7, batch_size=16, optimizer="adam", lr=1e-2)
    targets = [torch.softmax(torch.randn(len(x), 3, generator=torch.Generator().manual_seed(k)), 1) for k in range(3)]
    make = lambda k: build_model("mlp", in_channels=x.shape[1], n_classes=3, input_size=x.shape[-1], hidden=(8,))
    torch.manual_seed(0)
    ref, stacked = [make(k) for k in range(3)], []
    for m in ref:
        stacked.append(make(0)); stacked[-1].load_state_dict(m.state_dict())
    for k, m in enumerate(ref):
        distill(m, x, targets[k], cfg, torch.Generator().manual_seed(10 + k), lam=lam, n_augment=n_augment,
                detach_target=detach, shift=1, noise=0.05)
    distill_stacked(stacked, x, targets, cfg, [torch.Generator().manual_seed(10 + k) for k in range(3)], lam=lam, shift=1,
                    noise=0.05, n_augment=n_augment, detach_target=detach)
    for a, b in zip(ref, stacked):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.allclose(p, q, atol=1e-5), n
    # a mutation: one generator shared by every model draws other batches, and the weights differ
    torch.manual_seed(0)
    shared = [make(k) for k in range(3)]
    gen = torch.Generator().manual_seed(10)
    distill_stacked(shared, x, targets, cfg, [gen] * 3, lam=lam, shift=1, noise=0.05, n_augment=n_augment, detach_target=detach)
    assert not torch.allclose(shared[1].head.weight, ref[1].head.weight, atol=1e-5)
    with pytest.raises(ValueError, match="one target and one generator per model"):
        distill_stacked(stacked, x, targets[:2], cfg, [torch.Generator()] * 3)


def test_distill_stacked_refuses_no_augmentation_as_distill_does():
    x, t = torch.randn(8, 3), [torch.softmax(torch.randn(8, 2), 1)]
    cfg = TrainConfig(steps=1, batch_size=4, lr=0.1, optimizer="adam")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_augment must be an int >= 1"):
            distill(nn.Linear(3, 2), x, t[0], cfg, torch.Generator(), lam=1.0, n_augment=bad)
        with pytest.raises(ValueError, match="n_augment must be an int >= 1"):
            distill_stacked([nn.Linear(3, 2)], x, t, cfg, [torch.Generator()], lam=1.0, n_augment=bad)


def test_the_server_fit_is_the_share_of_u_where_the_argmax_agrees_with_the_target(split):
    # hand fixtures: a model whose argmax is the target's everywhere agrees on all of U; a constant model agrees on the
    # share of U whose target is its class (the majority share, when its class is the majority)
    public = split[1]
    method = COSMOS(public=public, server_model=server_fn)
    flat = public.x.reshape(len(public.x), -1).float()
    label = flat[:, :3].argmax(1)
    target = torch.nn.functional.one_hot(label, 3).float()
    exact = nn.Sequential(nn.Flatten(), nn.Linear(flat.shape[1], 3))
    constant = nn.Sequential(nn.Flatten(), nn.Linear(flat.shape[1], 3))
    with torch.no_grad():
        exact[1].weight.zero_(); exact[1].weight[:, :3] = torch.eye(3); exact[1].bias.zero_()
        constant[1].weight.zero_(); constant[1].bias.copy_(torch.tensor([0.0, 0.0, 0.0]))
        majority = int(torch.bincount(label, minlength=3).argmax()); constant[1].bias[majority] = 1.0
    server = COSMOSServer(n_classes=3, n_public=len(public.x))
    method._finish(server, 0, exact, target, 1)
    method._finish(server, 1, constant, target, 1)
    assert server.fits[0].agreement == 1.0
    assert server.fits[1].agreement == pytest.approx(float((label == majority).float().mean()))
    assert server.fits[1].agreement == pytest.approx(float(torch.bincount(label, minlength=3).max()) / len(label))


def test_radius_and_a_ball_of_the_callers_are_not_both_taken(split):
    public = split[1]
    with pytest.raises(ValueError, match="give radius or shift/noise, not both"):
        COSMOS(public=public, server_model=server_fn, radius=0.1, noise=0.2)
    with pytest.raises(ValueError, match="give radius or shift/noise, not both"):
        COSMOS(public=public, server_model=server_fn, radius=0.1, shift=2)
    m = COSMOS(public=public, server_model=server_fn, radius=0.1)
    assert dataclasses.replace(m, lam=1.0).noise == m.noise  # a copy keeps what radius set
    with pytest.raises(ValueError, match="radius must be a finite number > 0"):
        COSMOS(public=public, server_model=server_fn, radius=True)


def test_cosmos_aggregation_matches_teaching_one_cluster_at_a_time(split, archs):
    _, public, _, _, fed = split
    method = COSMOS(public=public, server_model=server_fn, target_clusters=2, server_train=ADAM, radius=0.1, **FAST)
    run = run_federated(method, fed, archs, LoopConfig(rounds=1, seed=0))
    # the same round with teach() per cluster: the family's aggregation
    one_by_one = run_federated(type("Sequential", (COSMOS,), {"aggregate": lambda self, server, replies, r:
                                                              _sequential(self, server, replies, r)})(**{
        f.name: getattr(method, f.name) for f in dataclasses.fields(COSMOS) if f.init}), fed, archs, LoopConfig(rounds=1, seed=0))
    a, b = run.server.arrays, one_by_one.server.arrays
    assert sorted(a) == sorted(b)
    fa, fb = cosmos_fits(run.server), cosmos_fits(one_by_one.server)
    assert len(fa) == len(fb) and [(f["round"], f["cluster"]) for f in fa] == [(f["round"], f["cluster"]) for f in fb]
    assert np.allclose([f["agreement"] for f in fa], [f["agreement"] for f in fb], atol=1e-6)
    for k in a:
        assert torch.allclose(a[k].float(), b[k].float(), atol=1e-4), k


def _sequential(self, server, replies, round_):
    from fedlib.algorithms.cosmos import COSMOSServer
    from fedlib.algorithms.fedmd import PublicDistillation
    from fedlib.messages import from_state, to_state
    state = PublicDistillation.aggregate(self, server, replies, round_)
    s = from_state(COSMOSServer, state)
    live = set(s.client_groups().values())
    s.server = {g: m for g, m in s.server.items() if g in live}
    return to_state(s)
