"""Personalized-FL baselines as plug-ins of the one loop: FedRep, FedBABU, Ditto, FedETF(-FT)."""

from __future__ import annotations

import math

import pytest
import torch

from fedlib.algorithms import Ditto, FedAvg, FedBABU, FedETF, FedRep, make_algorithm
from fedlib.algorithms.fedetf import balanced_softmax_loss, simplex_etf
from fedlib.loop import LoopConfig, run_federated
from fedlib.rng import INIT, derive_seed, isolated_torch_rng
from fedlib.training import TrainConfig

TRAIN = TrainConfig(epochs=1, batch_size=8, lr=0.1)


def _initial(model_fn, seed=0):
    with isolated_torch_rng(derive_seed(seed, INIT)):
        return model_fn()


def test_fedrep_keeps_heads_personal_and_sends_the_body_only(tiny_federation, tiny_model_fn):
    run = run_federated(FedRep(train=TRAIN, head_train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2))
    init = _initial(tiny_model_fn)
    # the server's head is the initial one: heads are never averaged
    assert torch.equal(run.server.arrays["model/head.weight"], init.head.weight)
    heads = [s.arrays["personal/head.weight"] for s in run.client_states.values()]
    assert len(heads) == 4 and not torch.equal(heads[0], heads[1])
    body_bytes = sum(v.numel() * 4 for k, v in init.state_dict().items() if not k.startswith("head."))
    up = run.ledger.to_frame().query("direction == 'up'")
    assert (up["bytes"] - body_bytes).between(1, 200).all()  # body + small metadata, no head
    assert {"local", "global"} <= set(run.frame["metric"])


def test_fedbabu_never_updates_the_head(tiny_federation, tiny_model_fn):
    run = run_federated(FedBABU(train=TRAIN, finetune=TrainConfig(epochs=0)), tiny_federation, tiny_model_fn, LoopConfig(rounds=2))
    init = _initial(tiny_model_fn)
    assert torch.equal(run.server.arrays["model/head.weight"], init.head.weight)
    assert not torch.equal(run.server.arrays["model/hidden.0.weight"], init.hidden[0].weight)


def test_ditto_with_a_huge_lambda_keeps_personal_models_at_the_global_one(tiny_federation, tiny_model_fn):
    # lam * lr must stay < 2 for the proximal step to be stable; lam = 19 with lr = 0.1 nearly pins v_k to w
    personal = TrainConfig(epochs=1, batch_size=8, lr=0.1, momentum=0.0)
    pinned = run_federated(Ditto(train=TRAIN, personal_train=personal, lam=19.0), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    free = run_federated(Ditto(train=TRAIN, personal_train=personal, lam=0.0), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    w0 = _initial(tiny_model_fn).hidden[0].weight
    gaps = [((pinned.client_states[k].arrays["personal/hidden.0.weight"] - w0).norm(),
             (free.client_states[k].arrays["personal/hidden.0.weight"] - w0).norm()) for k in pinned.client_states]
    # the proximal term is zero on a client's first step (v = w), so a client with a single
    # mini-batch moves equally either way; with more steps the pull shows
    assert all(p <= f + 1e-12 for p, f in gaps)
    assert sum(p < f for p, f in gaps) >= 3


def test_ditto_with_lambda_zero_trains_the_personal_model_like_local_training(tiny_federation, tiny_model_fn):
    run = run_federated(Ditto(train=TRAIN, personal_train=TRAIN, lam=0.0), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    assert all("personal/head.weight" in s.arrays for s in run.client_states.values())
    with pytest.raises(ValueError, match="-1"):
        Ditto(lam=-1)


@pytest.mark.parametrize(("dim", "c"), [(16, 3), (128, 10), (10, 10)])
def test_simplex_etf_geometry(dim, c):
    w = simplex_etf(dim, c, torch.Generator().manual_seed(0)).double()
    gram = w.T @ w
    torch.testing.assert_close(torch.diag(gram), torch.ones(c, dtype=torch.float64), atol=1e-6, rtol=0)
    off = gram[~torch.eye(c, dtype=torch.bool)]
    torch.testing.assert_close(off, torch.full_like(off, -1 / (c - 1)), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="n_classes=11, dim=10"):
        simplex_etf(10, 11, torch.Generator())


def test_balanced_softmax_is_cross_entropy_with_log_prior_hand_computed():
    logits = torch.tensor([[0.0, 0.0]])
    # prior (3/4, 1/4): adjusted logits (log .75, log .25); CE for class 1 = -log(.25 / 1) = log 4
    loss = balanced_softmax_loss(logits, torch.tensor([1]), torch.tensor([3, 1]))
    assert math.isclose(float(loss), math.log(4), rel_tol=1e-6)


def test_fedetf_and_its_finetuned_deployment(tiny_federation, tiny_model_fn):
    cfg = LoopConfig(rounds=2)
    plain = run_federated(FedETF(train=TRAIN, temperature=5.0), tiny_federation, tiny_model_fn, cfg)
    ft = run_federated(FedETF(train=TRAIN, temperature=5.0, finetune=TrainConfig(epochs=3, batch_size=8, lr=0.1)),
                       tiny_federation, tiny_model_fn, cfg)
    for k, v in plain.server.arrays.items():  # the same training: only the deployment differs
        assert torch.equal(v, ft.server.arrays[k]), k
    assert plain.summary()["global"] > 0.5  # 3 well-separated Gaussian classes
    # fine-tuning changes the deployed predictor's logits (accuracy may already be saturated here)
    from fedlib.protocol import ClientContext

    alg_plain, alg_ft = FedETF(temperature=5.0), FedETF(temperature=5.0, finetune=TrainConfig(epochs=3, batch_size=8, lr=0.1))
    msg = alg_plain.broadcast(plain.server, 2)
    data = tiny_federation.clients[0]
    x = tiny_federation.global_test.x
    logits = []
    for alg in (alg_plain, alg_ft):
        ctx = ClientContext(0, 2, tiny_model_fn(), 3)
        predictor = alg.deploy(ctx, plain.client_states[0], msg, data, torch.Generator().manual_seed(0))
        with torch.no_grad():
            logits.append(predictor(x))
    assert not torch.allclose(logits[0], logits[1])


def test_registry_builds_every_baseline():
    for name in ("fedrep", "fedbabu", "ditto", "fedetf"):
        assert make_algorithm(name).name == name
