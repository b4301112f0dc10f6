"""fedlib.training: TrainConfig's validation, the shared proximal term, partial local training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedlib.models import build_model
from fedlib.training import PlainOptimizer, TrainConfig, local_train, make_optimizer, proximal_term

# --- TrainConfig ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {}, {"epochs": 0}, {"epochs": 3}, {"epochs": np.int64(2)}, {"steps": 0}, {"steps": 7}, {"batch_size": 1},
    {"lr": 1e-12}, {"lr": 5}, {"momentum": 0.0}, {"momentum": 0.999}, {"weight_decay": 0}, {"weight_decay": 1e-4},
    {"optimizer": "adam"},
])
def test_valid_train_configs(kwargs):
    cfg = TrainConfig(**kwargs)
    for k, v in kwargs.items():
        assert getattr(cfg, k) == v


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"optimizer": "rmsprop"}, "unknown optimizer 'rmsprop'; valid: sgd, adam"),
    ({"epochs": 0.5}, "epochs must be an int >= 0, got 0.5"),
    ({"epochs": 1.0}, "epochs must be an int >= 0, got 1.0"),
    ({"epochs": -1}, "epochs must be an int >= 0, got -1"),
    ({"epochs": True}, "epochs must be an int >= 0, got True"),
    ({"epochs": "1"}, "epochs must be an int >= 0, got '1'"),
    ({"epochs": None}, "epochs must be an int >= 0, got None"),
    ({"steps": -1}, "steps must be None or an int >= 0, got -1"),
    ({"steps": 2.5}, "steps must be None or an int >= 0, got 2.5"),
    ({"steps": False}, "steps must be None or an int >= 0, got False"),
    ({"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
    ({"batch_size": 8.0}, "batch_size must be an int >= 1, got 8.0"),
    ({"batch_size": True}, "batch_size must be an int >= 1, got True"),
    ({"lr": 0.0}, "lr must be a finite number > 0, got 0.0"),
    ({"lr": -0.1}, "lr must be a finite number > 0, got -0.1"),
    ({"lr": math.inf}, "lr must be a finite number > 0, got inf"),
    ({"lr": math.nan}, "lr must be a finite number > 0, got nan"),
    ({"lr": "0.1"}, "lr must be a finite number > 0, got '0.1'"),
    ({"lr": True}, "lr must be a finite number > 0, got True"),
    ({"momentum": -0.1}, r"momentum must be a number in \[0, 1\), got -0.1"),
    ({"momentum": 1.0}, r"momentum must be a number in \[0, 1\), got 1.0"),
    ({"momentum": math.nan}, r"momentum must be a number in \[0, 1\), got nan"),
    ({"momentum": None}, r"momentum must be a number in \[0, 1\), got None"),
    ({"weight_decay": -1e-4}, "weight_decay must be a finite number >= 0, got -0.0001"),
    ({"weight_decay": math.inf}, "weight_decay must be a finite number >= 0, got inf"),
    ({"weight_decay": math.nan}, "weight_decay must be a finite number >= 0, got nan"),
])
def test_bad_train_config_names_the_value_and_the_valid_range(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        TrainConfig(**kwargs)


# --- the proximal term ---------------------------------------------------------------------------


def _mlp(seed: int) -> nn.Module:
    return build_model("mlp", in_channels=1, n_classes=3, input_size=2, hidden=(5, 4), seed=seed)


def test_proximal_term_hand_computed():
    model = nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
        model.bias.fill_(-1.0)
    anchor = {"weight": torch.tensor([[0.0, 4.0]]), "bias": torch.tensor([1.0]), "unused": torch.ones(3)}
    value = proximal_term(model, anchor)
    assert float(value.detach()) == 1.0 + 4.0 + 4.0  # (1-0)^2 + (2-4)^2 + (-1-1)^2; extra names are ignored
    value.backward()
    assert torch.equal(model.weight.grad, torch.tensor([[2.0, -4.0]]))  # 2 (w - a)
    assert torch.equal(model.bias.grad, torch.tensor([-4.0]))
    assert float(proximal_term(model, {"bias": torch.tensor([-1.0])}).detach()) == 0.0
    assert proximal_term(model, {}).shape == () and float(proximal_term(model, {})) == 0.0


def test_proximal_term_equals_the_forms_fedprox_and_ditto_used():
    """Bit for bit, value and gradients: FedProx zipped ``parameters()`` with a list of clones;
    Ditto paired named parameters with the broadcast ``state_dict`` (buffers included) in its order."""
    model = build_model("cnn", in_channels=1, n_classes=3, input_size=8, width=8, norm="batch", seed=0)
    anchor_model = build_model("cnn", in_channels=1, n_classes=3, input_size=8, width=8, norm="batch", seed=1)
    anchor = {k: v.clone() for k, v in anchor_model.state_dict().items()}  # with BatchNorm buffers
    assert any(k not in dict(model.named_parameters()) for k in anchor)

    new = proximal_term(model, anchor)
    g_new = torch.autograd.grad(new, list(model.parameters()))
    fedprox_anchor = [p.detach().clone() for p in anchor_model.parameters()]
    fedprox = sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), fedprox_anchor))
    g_fedprox = torch.autograd.grad(fedprox, list(model.parameters()))
    params = dict(model.named_parameters())
    pairs = [(params[n], a) for n, a in anchor.items() if n in params]
    ditto = sum(((p - a) ** 2).sum() for p, a in pairs)
    g_ditto = torch.autograd.grad(ditto, list(model.parameters()))
    assert torch.equal(new, fedprox) and torch.equal(new, ditto)
    for a, b, c in zip(g_new, g_fedprox, g_ditto):
        assert torch.equal(a, b) and torch.equal(a, c)


# --- local training ------------------------------------------------------------------------------


def test_local_train_with_params_leaves_the_other_parameters_untouched():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 1, 2, 2, generator=g), torch.randint(0, 3, (40,), generator=g)
    model, before = _mlp(0), _mlp(0).state_dict()
    loss = local_train(model, x, y, TrainConfig(epochs=2, batch_size=8, lr=0.1), torch.Generator().manual_seed(1),
                       params=model.head_parameters())
    assert math.isfinite(loss)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]) != k.startswith("head."), k  # only the head moved


def test_local_train_with_params_freezes_the_others_and_keeps_the_former_bits():
    """A head-only phase: the body takes no gradient while it trains (its requires_grad off,
    restored after, also after an error), and the head ends where the former loop left it, bit
    for bit: SGD with momentum over the head's parameters, every parameter taking gradients."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 1, 2, 2, generator=g), torch.randint(0, 3, (40,), generator=g)
    cfg = TrainConfig(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    model, ref = _mlp(0), _mlp(0)
    seen = []

    def loss_fn(m, xb, yb):
        seen.append(tuple(p.requires_grad for p in m.parameters()))
        return nn.functional.cross_entropy(m(xb), yb)

    local_train(model, x, y, cfg, torch.Generator().manual_seed(1), loss_fn=loss_fn, params=model.head_parameters())
    heads = [name.startswith("head.") for name, _ in model.named_parameters()]
    assert len(seen) == 10 and set(seen) == {tuple(heads)}  # 2 epochs of 5 batches, only the head trained
    assert all(p.requires_grad for p in model.parameters())
    assert all((p.grad is None) != h for p, h in zip(model.parameters(), heads))  # the body took no gradient
    # the former loop: every parameter requires gradients, the optimizer steps the head's only
    opt = torch.optim.SGD(list(ref.head_parameters()), lr=cfg.lr, momentum=cfg.momentum)
    gen = torch.Generator().manual_seed(1)
    ref.train()
    for _ in range(cfg.epochs):
        perm = torch.randperm(40, generator=gen)
        for start in range(0, 40, cfg.batch_size):
            idx = perm[start:start + cfg.batch_size]
            loss = nn.functional.cross_entropy(ref(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    assert all(p.grad is not None for p in ref.parameters())  # the former loop took every gradient
    for (k, v), r in zip(model.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(v, r), k

    def failing(m, xb, yb):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        local_train(model, x, y, cfg, torch.Generator().manual_seed(1), loss_fn=failing, params=model.head_parameters())
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("cfg", [
    TrainConfig(lr=0.1, momentum=0.0), TrainConfig(lr=0.05, momentum=0.9), TrainConfig(lr=0.05, momentum=0.9, weight_decay=1e-3),
    TrainConfig(optimizer="adam", lr=0.01), TrainConfig(optimizer="adam", lr=0.01, weight_decay=1e-3)],
    ids=["sgd", "momentum", "momentum-wd", "adam", "adam-wd"])
def test_plain_optimizer_steps_as_torch_s_optimizer_bit_for_bit(cfg):
    """PlainOptimizer against torch.optim (make_optimizer) on the same model and batches: the same
    weights bit for bit after every step, a parameter without a gradient skipped by both (its
    step count too: it trains again from step 1 of its own)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(30, 1, 2, 2, generator=g), torch.randint(0, 3, (30,), generator=g)
    models = _mlp(3), _mlp(3)
    opts = make_optimizer(list(models[0].parameters()), cfg), PlainOptimizer(models[1].parameters(), cfg)
    for step in range(6):
        for model, opt in zip(models, opts):
            idx = torch.arange(step * 5, step * 5 + 5)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            if step < 3:  # the head alone in the first steps: the body has no gradient, no step
                loss = nn.functional.cross_entropy(model.head(model.embed(x[idx]).detach()), y[idx])
            loss.backward()
            opt.step()
        for (k, a), b in zip(models[0].state_dict().items(), models[1].state_dict().values()):
            assert torch.equal(a, b), (step, k)
    moved = [not torch.equal(a, b) for a, b in zip(models[0].state_dict().values(), _mlp(3).state_dict().values())]
    assert all(moved)


def test_local_train_is_plain_sgd_by_hand():
    """Momentum 0, one batch per epoch: each step is w <- w - lr * grad of the mean cross-entropy."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(6, 1, 2, 2, generator=g), torch.randint(0, 3, (6,), generator=g)
    cfg = TrainConfig(epochs=3, batch_size=6, lr=0.2, momentum=0.0)
    model, ref = _mlp(2), _mlp(2)
    losses = []
    gen = torch.Generator().manual_seed(4)
    for _ in range(cfg.epochs):
        idx = torch.randperm(6, generator=gen)
        loss = nn.functional.cross_entropy(ref(x[idx]), y[idx])
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        with torch.no_grad():
            for p, gr in zip(ref.parameters(), grads):
                p.sub_(cfg.lr * gr)
        losses.append(float(loss.detach()))
    mean_loss = local_train(model, x, y, cfg, torch.Generator().manual_seed(4))
    assert mean_loss == pytest.approx(sum(losses) / 3, rel=1e-6)
    for (k, v), r in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(v, r, rtol=1e-6, atol=1e-7, msg=k)
