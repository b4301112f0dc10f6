"""fedlib.training.TrainingMemo: a training served from the memo is the training's bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

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


def _frozen_body():
    """A model whose body takes no gradient (``requires_grad`` off): local_train trains its head only."""
    model = _model()
    for name, p in model.named_parameters():
        if not name.startswith("head."):
            p.requires_grad_(False)
    return model


def _holding(**attrs):
    """A function making a model that holds ``attrs`` in plain attributes (``object.__setattr__``: no registration)."""
    def make():
        model = _model()
        for name, value in attrs.items():
            object.__setattr__(model, name, value)
        return model
    return make


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
    dict(model=lambda: _model(hidden=(6,))),
    dict(model=_frozen_body)])  # a model each call: a model object would be trained by the first
def test_anything_the_training_depends_on_changes_the_key(change):
    memo = TrainingMemo()
    _train(memo, covered=(CFG, TrainConfig(epochs=3, batch_size=4, lr=0.02, optimizer="adam")))
    out = _train(memo, covered=(CFG, TrainConfig(epochs=3, batch_size=4, lr=0.02, optimizer="adam")), **change)
    assert (memo.hits, memo.misses) == (0, 2)
    assert _same(out, _train(None, **change))


def _big(k: int):
    """2000 zeros but a 1 at ``k``: its repr is the same "..." summary for any ``k`` inside."""
    t = torch.zeros(2000)
    t[k] = 1.0
    return t


@pytest.mark.parametrize("make", [torch.Tensor.clone, lambda t: t.numpy().copy()], ids=["tensor", "ndarray"])
def test_tensors_and_arrays_in_attributes_are_read_by_their_bytes(make):
    a, b = make(_big(1000)), make(_big(1001))
    assert repr(a) == repr(b)  # what a key from the repr would have read
    memo = TrainingMemo()
    first = _train(memo, model=_holding(table=a))
    again = _train(memo, model=_holding(table=make(_big(1000))))  # equal bytes: served
    other = _train(memo, model=_holding(table=b))  # one element apart: trained
    assert (memo.hits, memo.misses, memo.uncached) == (1, 2, 0)
    assert _same(first, again) and _same(other, _train(None, model=_holding(table=b)))


class _Opaque:
    def __repr__(self) -> str:
        return "Opaque()"  # says nothing of its state


@pytest.mark.parametrize("value", [
    torch.nn.Linear(2, 2), [torch.nn.Linear(2, 2)], (lambda k: lambda v: k * v)(2), lambda v: v,
    torch.nn.Linear(2, 2).forward, object(), _Opaque(), {"inner": object()}],
    ids=["module", "module in a list", "closure", "lambda", "bound method", "object", "opaque repr", "nested object"])
def test_attributes_that_are_not_plain_data_make_the_call_always_train(value):
    memo = TrainingMemo()
    first, second = _train(memo, model=_holding(extra=value)), _train(memo, model=_holding(extra=value))
    assert (memo.hits, memo.misses, memo.uncached, len(memo)) == (0, 0, 2, 0)
    fresh = _train(None, model=_holding(extra=value))
    assert _same(first, fresh) and _same(second, fresh)


@pytest.mark.parametrize("value", [F.relu, torch.nn.Linear, CFG, np.float32(0.5), torch.float64, {"a": (1, 2.5, "x")}],
                         ids=["function", "class", "dataclass", "numpy scalar", "dtype", "container"])
def test_plain_data_and_functions_named_by_their_module_are_kept(value):
    memo = TrainingMemo()
    first, second = _train(memo, model=_holding(extra=value)), _train(memo, model=_holding(extra=value))
    assert (memo.hits, memo.misses, memo.uncached, len(memo)) == (1, 1, 0, 1) and _same(first, second)


def test_only_covered_default_trainings_inside_the_block_are_kept():
    memo = TrainingMemo()
    _train(memo, covered=(TrainConfig(epochs=1),))  # CFG is not covered
    _train(memo, loss_fn=lambda m, x, y: cross_entropy_loss(m, x, y) * 2)  # another objective
    model = _model()
    _train(memo, model=model, params=list(model.head.parameters()))  # partial training: params given
    assert (memo.hits, memo.misses, len(memo)) == (0, 0, 0)
    with memo.covering(CFG):
        assert memo.configs == (CFG,)
        local_train(_model(), X[:0], Y[:0], CFG, torch.Generator())  # no step: trained, not kept
    assert len(memo) == 0 and memo.uncached == 1 and memo.configs == ()


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


def test_the_covered_configurations_belong_to_the_thread_that_covers():
    """Another thread, running while one covers, is not served: its memo is none (a context variable)."""
    import threading
    memo, seen, inside, done = TrainingMemo(), [], threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen.append(memo.configs)
        _train(None)  # local_train in this thread: not through the memo
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with memo.covering(CFG):
        inside.set()
        done.wait()
    thread.join()
    assert seen == [()] and (memo.hits, memo.misses, memo.uncached) == (0, 0, 0)
