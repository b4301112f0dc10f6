"""fedlib.training.TrainingMemo: a training served from the memo is the training's bits."""

from __future__ import annotations

import pytest
import torch

from fedlib.models import build_model
from fedlib.training import TrainConfig, TrainingMemo, cross_entropy_loss, local_train

CFG = TrainConfig(epochs=3, batch_size=4, lr=0.01, optimizer="adam")
X = torch.randn(10, 1, 3, 3, generator=torch.Generator().manual_seed(0))
Y = torch.tensor([0, 1, 2] * 3 + [0])


def _model(seed: int = 0, hidden=(5,)):
    return build_model("mlp", in_channels=1, n_classes=3, input_size=3, hidden=hidden, seed=seed)


def _train(memo: TrainingMemo | None, *, model=None, x=X, y=Y, cfg=CFG, generator_seed=1, torch_seed=2, covered=(CFG,),
           **kw):
    """One local_train call, inside ``memo`` (covering ``covered``) or not; everything it leaves."""
    model = _model() if model is None else model() if not isinstance(model, torch.nn.Module) else model
    g = torch.Generator().manual_seed(generator_seed)
    torch.manual_seed(torch_seed)
    if memo is None:
        loss = local_train(model, x, y, cfg, g, **kw)
    else:
        with memo.covering(*covered):
            loss = local_train(model, x, y, cfg, g, **kw)
    return {"loss": loss, "params": [p.detach().clone() for p in model.parameters()],
            "grads": [torch.zeros(0) if p.grad is None else p.grad.clone() for p in model.parameters()], "generator": g.get_state(), "torch": torch.get_rng_state(),
            "training": model.training, "draw": torch.rand(3, generator=g)}


def _same(a, b) -> bool:
    return (a["loss"] == b["loss"] and a["training"] == b["training"]
            and all(torch.equal(p, q) for k in ("params", "grads") for p, q in zip(a[k], b[k], strict=True))
            and all(torch.equal(a[k], b[k]) for k in ("generator", "torch", "draw")))


def test_a_served_training_leaves_the_bits_of_training():
    fresh = _train(None)
    memo = TrainingMemo()
    first, second = _train(memo), _train(memo)
    assert (memo.misses, memo.hits, len(memo)) == (1, 1, 1)
    assert _same(fresh, first) and _same(fresh, second)
    # the model trained in between (another client's training in the same workspace) does not matter: its weights are loaded
    model = _model()
    _train(None, model=model, cfg=TrainConfig(epochs=1, batch_size=2, lr=0.5))
    model.load_state_dict(_model().state_dict())
    assert _same(fresh, _train(memo, model=model)) and memo.hits == 2


@pytest.mark.parametrize("change", [
    dict(x=X + 1e-6), dict(y=torch.roll(Y, 1)), dict(generator_seed=3), dict(torch_seed=4),
    dict(cfg=TrainConfig(epochs=3, batch_size=4, lr=0.02, optimizer="adam")), dict(model=lambda: _model(seed=1)),
    dict(model=lambda: _model(hidden=(6,)))])  # a model each call: a model object would be trained by the first
def test_anything_the_training_depends_on_changes_the_key(change):
    memo = TrainingMemo()
    _train(memo, covered=(CFG, TrainConfig(epochs=3, batch_size=4, lr=0.02, optimizer="adam")))
    out = _train(memo, covered=(CFG, TrainConfig(epochs=3, batch_size=4, lr=0.02, optimizer="adam")), **change)
    assert (memo.hits, memo.misses) == (0, 2)
    assert _same(out, _train(None, **change))


def test_only_covered_default_trainings_inside_the_block_are_kept():
    memo = TrainingMemo()
    _train(memo, covered=(TrainConfig(epochs=1),))  # CFG is not covered
    _train(memo, loss_fn=lambda m, x, y: cross_entropy_loss(m, x, y) * 2)  # another objective
    model = _model()
    _train(memo, model=model, params=list(model.head.parameters()))  # partial training: params given
    assert (memo.hits, memo.misses, len(memo)) == (0, 0, 0)
    with memo.covering(CFG):
        local_train(_model(), X[:0], Y[:0], CFG, torch.Generator())  # no step: trained, not kept
    assert len(memo) == 0 and memo.configs == ()


def test_the_oldest_entry_goes_and_bad_arguments_are_refused():
    memo = TrainingMemo(max_entries=2)
    for s in (1, 2, 3):
        _train(memo, generator_seed=s)
    _train(memo, generator_seed=1)  # evicted: trained again
    _train(memo, generator_seed=3)  # kept
    assert (memo.misses, memo.hits, len(memo)) == (4, 1, 2)
    one = memo.nbytes // 2  # every entry of one model holds as many bytes
    small = TrainingMemo(max_bytes=one + 1)  # room for one training
    _train(small, generator_seed=1), _train(small, generator_seed=2), _train(small, generator_seed=2)
    assert (small.misses, small.hits, len(small), small.nbytes) == (2, 1, 1, one)
    tiny = TrainingMemo(max_bytes=one - 1)  # a training larger than the budget is not kept
    _train(tiny), _train(tiny)
    assert (tiny.misses, tiny.hits, len(tiny), tiny.nbytes) == (2, 0, 0, 0)
    with pytest.raises(ValueError, match="max_entries must be an int >= 1, got 0"):
        TrainingMemo(max_entries=0)
    with pytest.raises(ValueError, match="max_bytes must be an int >= 1, got 0.5"):
        TrainingMemo(max_bytes=0.5)
    with pytest.raises(ValueError, match="covering takes one or more TrainConfig"):
        with memo.covering({"epochs": 1}):
            pass
