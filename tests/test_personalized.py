"""Personalized-FL baselines as plug-ins of the one loop: FedRep, FedBABU, Ditto, FedETF(-FT)."""

from __future__ import annotations

import math

import pytest
import torch

from torch.nn import functional as F

from fedlib.aggregate import weighted_average
from fedlib.algorithms import Ditto, FedBABU, FedETF, FedRep, make_algorithm
from fedlib.algorithms.fedetf import balanced_softmax_loss, etf_logits, simplex_etf
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.models import HEAD_PREFIX
from fedlib.protocol import HEAD, MODEL, ClientContext
from fedlib.rng import INIT, LOCAL_TRAIN, derive_seed, isolated_torch_rng
from fedlib.training import TrainConfig, local_train

TRAIN = TrainConfig(epochs=1, batch_size=8, lr=0.1)


def _initial(model_fn, seed=0):
    with isolated_torch_rng(derive_seed(seed, INIT)):
        return model_fn()


def _train_generator(client, round_=1, seed=0):
    """The generator the loop hands to ``local_update`` (fedlib.engines.inprocess.Client.update)."""
    return torch.Generator().manual_seed(derive_seed(seed, round_, client, LOCAL_TRAIN))


def _assert_same_weights(arrays, model, prefix):
    expected = model.state_dict()
    assert sorted(arrays) == sorted(prefix + k for k in expected)
    for k, v in expected.items():
        assert torch.equal(arrays[prefix + k], v), k


def test_fedrep_keeps_heads_personal_and_sends_the_body_only(tiny_federation, tiny_model_fn):
    run = run_federated(FedRep(train=TRAIN, head_train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2))
    init = _initial(tiny_model_fn)
    # the server's head is the initial one: heads are never averaged
    assert torch.equal(run.server.arrays[HEAD + "weight"], init.head.weight)
    heads = [s.arrays["personal/head.weight"] for s in run.client_states.values()]
    assert len(heads) == 4 and not torch.equal(heads[0], heads[1])
    body_bytes = sum(v.numel() * 4 for k, v in init.state_dict().items() if not k.startswith(HEAD_PREFIX))
    up = run.ledger.to_frame().query("direction == 'up'")
    assert (up["bytes"] - body_bytes).between(1, 200).all()  # body + small metadata, no head
    assert {"local", "global"} <= set(run.frame["metric"])


def test_fedrep_round_is_algorithm_1_by_hand(tiny_federation, tiny_model_fn):
    """One round: every client trains its head (body frozen), then its body (head frozen), from
    the initial model with the loop's generator; the server averages the bodies by sample count."""
    head_train = TrainConfig(epochs=2, batch_size=8, lr=0.05)
    run = run_federated(FedRep(train=TRAIN, head_train=head_train), tiny_federation, tiny_model_fn,
                        LoopConfig(rounds=1, evaluate_last=False))
    bodies, sizes = [], []
    for k, data in enumerate(tiny_federation.clients):
        model, g = _initial(tiny_model_fn), _train_generator(k)
        local_train(model, data.train.x, data.train.y, head_train, g, params=model.head_parameters())
        local_train(model, data.train.x, data.train.y, TRAIN, g, params=model.body_parameters())
        _assert_same_weights(run.client_states[k].arrays, model.head, "personal/" + HEAD_PREFIX)
        bodies.append({k: v for k, v in model.state_dict().items() if not k.startswith(HEAD_PREFIX)})
        sizes.append(float(len(data.train)))
    expected = weighted_average(bodies, sizes)
    for k, v in expected.items():
        assert torch.equal(run.server.arrays[MODEL + k], v), k


def test_fedbabu_never_updates_the_head(tiny_federation, tiny_model_fn):
    run = run_federated(FedBABU(train=TRAIN, finetune=TrainConfig(epochs=0)), tiny_federation, tiny_model_fn, LoopConfig(rounds=2))
    init = _initial(tiny_model_fn)
    assert torch.equal(run.server.arrays[HEAD + "weight"], init.head.weight)
    assert torch.equal(run.server.arrays[HEAD + "bias"], init.head.bias)
    assert not torch.equal(run.server.arrays["model/hidden.0.weight"], init.hidden[0].weight)
    up = run.ledger.to_frame().query("direction == 'up'")
    body_bytes = sum(v.numel() * 4 for k, v in init.state_dict().items() if not k.startswith(HEAD_PREFIX))
    assert (up["bytes"] - body_bytes).between(1, 200).all()  # the head is never sent


def test_fedbabu_deploys_the_global_model_fine_tuned_with_the_deploy_generator(tiny_federation, tiny_model_fn):
    finetune = TrainConfig(epochs=2, batch_size=8, lr=0.05)
    run = run_federated(FedBABU(train=TRAIN, finetune=finetune), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    alg, data = FedBABU(train=TRAIN, finetune=finetune), tiny_federation.clients[1]
    msg = alg.configure_evaluate(run.server, 1, [1])[1]
    deployed = alg.deploy(ClientContext(1, 1, tiny_model_fn(), 3), run.client_states[1], msg, data,
                          torch.Generator().manual_seed(7))
    by_hand = tiny_model_fn()
    by_hand.load_state_dict(msg.with_prefix(MODEL))
    local_train(by_hand, data.train.x, data.train.y, finetune, torch.Generator().manual_seed(7))  # every layer
    _assert_same_weights(deployed.state_dict(), by_hand, "")
    assert not torch.equal(deployed.head.weight, run.server.arrays[HEAD + "weight"])


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
    """lam = 0: each personal model is, weight for weight, plain local training of the first global
    model with the loop's generator (the personal step runs first); the global update follows."""
    personal = TrainConfig(epochs=2, batch_size=8, lr=0.05)
    run = run_federated(Ditto(train=TRAIN, personal_train=personal, lam=0.0), tiny_federation, tiny_model_fn,
                        LoopConfig(rounds=1, evaluate_last=False))
    globals_, sizes = [], []
    for k, data in enumerate(tiny_federation.clients):
        local, g = _initial(tiny_model_fn), _train_generator(k)
        local_train(local, data.train.x, data.train.y, personal, g)
        _assert_same_weights(run.client_states[k].arrays, local, "personal/")
        glob = _initial(tiny_model_fn)
        local_train(glob, data.train.x, data.train.y, TRAIN, g)  # the same generator, after the personal step
        globals_.append(glob.state_dict())
        sizes.append(float(len(data.train)))
    for k, v in weighted_average(globals_, sizes).items():
        assert torch.equal(run.server.arrays[MODEL + k], v), k
    with pytest.raises(ValueError, match="-1"):
        Ditto(lam=-1)


def test_ditto_personal_step_minimizes_cross_entropy_plus_the_proximal_term(tiny_federation, tiny_model_fn):
    """lam > 0: the personal model equals local training on CE + lam/2 ||v - w||^2 written out by hand."""
    lam, personal = 0.7, TrainConfig(epochs=2, batch_size=8, lr=0.05)
    run = run_federated(Ditto(train=TRAIN, personal_train=personal, lam=lam), tiny_federation, tiny_model_fn,
                        LoopConfig(rounds=1, evaluate_last=False))
    w = {k: v.clone() for k, v in _initial(tiny_model_fn).named_parameters()}

    def loss_fn(m, x, y):
        prox = sum(((p - w[n]) ** 2).sum() for n, p in m.named_parameters())
        return F.cross_entropy(m(x), y) + 0.5 * lam * prox

    for k, data in enumerate(tiny_federation.clients):
        local = _initial(tiny_model_fn)
        local_train(local, data.train.x, data.train.y, personal, _train_generator(k), loss_fn=loss_fn)
        _assert_same_weights(run.client_states[k].arrays, local, "personal/")


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
    assert torch.equal(plain.server.arrays["etf"], FedETF()._etf(tiny_model_fn()))  # fixed, never trained

    finetune = TrainConfig(epochs=3, batch_size=8, lr=0.1)
    alg_plain, alg_ft = FedETF(temperature=5.0), FedETF(temperature=5.0, finetune=finetune)
    msg = alg_plain.configure_evaluate(plain.server, 2, [0])[0]
    data = tiny_federation.clients[0]
    etf = msg.arrays["etf"]
    deployed = {}
    for name, alg in (("plain", alg_plain), ("ft", alg_ft)):
        ctx = ClientContext(0, 2, tiny_model_fn(), 3)
        deployed[name] = alg.deploy(ctx, plain.client_states[0], msg, data, torch.Generator().manual_seed(0))
    # FedETF deploys the broadcast backbone as it is, with the ETF
    _assert_same_weights({MODEL + k: v for k, v in deployed["plain"].model.state_dict().items()},
                         _loaded(tiny_model_fn, msg), MODEL)
    assert torch.equal(deployed["plain"].etf, etf) and deployed["plain"].temperature == 5.0
    # FedETF-FT: the backbone fine-tuned on CE over the fixed ETF's logits with the deploy generator
    by_hand = _loaded(tiny_model_fn, msg)
    local_train(by_hand, data.train.x, data.train.y, finetune, torch.Generator().manual_seed(0),
                loss_fn=lambda m, x, y: F.cross_entropy(etf_logits(m, x, etf, 5.0), y))
    _assert_same_weights({MODEL + k: v for k, v in deployed["ft"].model.state_dict().items()}, by_hand, MODEL)
    assert not torch.equal(deployed["ft"].model.hidden[0].weight, deployed["plain"].model.hidden[0].weight)


def _loaded(model_fn, message):
    model = model_fn()
    model.load_state_dict(message.with_prefix(MODEL))
    return model


def test_registry_builds_every_baseline():
    for name in ("fedrep", "fedbabu", "ditto", "fedetf"):
        assert make_algorithm(name).name == name
