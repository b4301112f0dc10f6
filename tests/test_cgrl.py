"""CGRL: the local losses, augmentations and reference updates (fedlib.cgrl) and the training
plug-in (fedlib.algorithms.fedgrc.CGRL), on hand-computed fixtures and tiny federations."""

from __future__ import annotations

import functools
import json
import math

import numpy as np

import pytest
import torch

from fedlib.algorithms import FedAvg, load_model
from fedlib.algorithms.fedgrc import CGRL, class_directions
from fedlib.cgrl import (
    CGRLConfig,
    augment,
    log_norm,
    magnitude_gate,
    magnitude_loss,
    prototype_ce,
    supcon_loss,
    unit,
    update_directions,
    update_magnitudes,
    warmup_weight,
)
from fedlib.data import make_gaussian_mixture
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.models import build_model
from fedlib.training import TrainConfig


def test_unit_maps_zero_to_zero():
    u = unit(torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(u, torch.tensor([[0.6, 0.8], [0.0, 0.0]], dtype=torch.float64))


def test_log_norm_by_hand():
    h = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(log_norm(h, 1e-3), torch.tensor([0.5 * math.log(25 + 1e-6), math.log(1e-3)], dtype=torch.float64))


def test_supcon_by_hand():
    # three unit views: 0 and 1 share a class, 2 is alone (no positive: left out of the mean)
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1])
    tau = 0.5
    # anchor 0: positive 1 (dot 0), others {1 (0), 2 (-1)}; anchor 1: positive 0 (0), others {0 (0), 2 (0)}
    l0 = -(0.0 - math.log(math.exp(0.0) + math.exp(-1 / tau)))
    l1 = -(0.0 - math.log(2.0))
    assert supcon_loss(u, y, tau).item() == pytest.approx((l0 + l1) / 2, abs=1e-12)
    assert supcon_loss(u, torch.tensor([0, 1, 2]), tau).item() == 0.0  # no positives at all


def test_prototype_ce_zero_references_give_uniform_logits():
    u = unit(torch.randn(5, 4, generator=torch.Generator().manual_seed(0)))
    y = torch.tensor([0, 1, 2, 0, 1])
    assert prototype_ce(u, y, torch.zeros(3, 4), 0.1).item() == pytest.approx(math.log(3), abs=1e-6)


def test_magnitude_gate_and_loss_by_hand():
    h = [torch.tensor([[3.0, 4.0], [1e-4, 0.0], [0.0, 2.0]], dtype=torch.float64, requires_grad=True)]
    y = torch.tensor([0, 0, 1])
    observed = torch.tensor([True, False])
    refs = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    chi = magnitude_gate(h, y, observed, r_min=1e-2)
    assert chi.tolist() == [[True, False, False]]  # tiny norm and an unobserved class are off
    loss = magnitude_loss(h, y, refs, observed, r_min=1e-2, eps=0.0)
    assert loss.item() == pytest.approx((math.log(5.0) - 1.0) ** 2 / 3, abs=1e-12)
    loss.backward()
    g = h[0].grad
    assert torch.equal(g[1:], torch.zeros(2, 2, dtype=torch.float64))  # gated views get no gradient
    # radial: d/dh (log|h| - a)^2 / 3 = 2 (log|h| - a) h / |h|^2 / 3
    expected = 2 * (math.log(5.0) - 1.0) * torch.tensor([3.0, 4.0], dtype=torch.float64) / 25 / 3
    assert torch.allclose(g[0], expected)


def test_warmup_weight():
    assert [warmup_weight(r, 4) for r in (1, 2, 4, 9)] == [0.25, 0.5, 1.0, 1.0]


@pytest.mark.parametrize("domain,shape", [("digits", (6, 1, 28, 28)), ("cifar", (6, 3, 32, 32))])
def test_augment_is_seeded_and_shape_preserving(domain, shape):
    x = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    for strength in ("weak", "strong"):
        a = augment(x, strength, torch.Generator().manual_seed(5), domain)
        b = augment(x, strength, torch.Generator().manual_seed(5), domain)
        assert a.shape == x.shape and torch.equal(a, b) and torch.isfinite(a).all()
        assert not torch.equal(a, x)
    assert augment(x, "strong", torch.Generator(), "none") is x


def test_augment_bad_arguments():
    x = torch.zeros(2, 1, 28, 28)
    with pytest.raises(ValueError, match="strength"):
        augment(x, "medium", torch.Generator())
    with pytest.raises(ValueError, match="augmentation domain"):
        augment(x, "weak", torch.Generator(), "audio")
    with pytest.raises(ValueError, match="image batch"):
        augment(torch.zeros(2, 784), "weak", torch.Generator())


def test_update_directions_by_hand():
    prev = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    observed = torch.tensor([True, False, True])
    counts = [[1, 2, 0], [3, 0, 0]]
    dirs = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]])
    p, obs = update_directions(prev, observed, counts, dirs, xi=0.5)
    s = 1 / math.sqrt(2)
    assert torch.allclose(p, torch.tensor([[s, s], [1.0, 0.0], [0.0, 1.0]]))  # blended, first time, unchanged
    assert obs.tolist() == [True, True, True]


def test_update_magnitudes_by_hand():
    refs = torch.tensor([[1.0, 0.0, 5.0]])
    flags = torch.tensor([True, False, True])
    a, v = update_magnitudes(refs, flags, sums=torch.tensor([[6.0, 4.0, 0.0]]), counts=torch.tensor([2.0, 2.0, 0.0]), zeta=0.25)
    assert torch.allclose(a, torch.tensor([[0.75 * 1 + 0.25 * 3, 2.0, 5.0]]))
    assert v.tolist() == [True, True, True]


@pytest.mark.parametrize("kw", [dict(tau=0), dict(xi=0), dict(zeta=1.5), dict(warmup=0), dict(augment="audio"),
                                dict(lambda_dir=-1), dict(layers=()), dict(direction_pass="test")])
def test_config_rejects_bad_values(kw):
    with pytest.raises(ValueError):
        CGRLConfig(**kw)


# --- the plug-in -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    mix = make_gaussian_mixture(n_per_class=40, n_classes=4, dim=6, separation=3.0, seed=0)
    fed = make_federation(mix.dataset, n_clients=3, partition="dirichlet", alpha=0.5, min_size=5,
                          global_test_per_class=5, seed=0)
    model_fn = functools.partial(build_model, "mlp", in_channels=6, n_classes=4, input_size=1, hidden=(16, 8))
    return fed, model_fn


def _cgrl(**kw):
    return CGRL(train=TrainConfig(epochs=1, batch_size=16, lr=0.05), cgrl=CGRLConfig(augment="none", warmup=1, **kw))


def test_cgrl_sets_references_and_is_reproducible(tiny):
    fed, model_fn = tiny
    cfg = LoopConfig(rounds=2, seed=3, eval_every=0)
    r1 = run_federated(_cgrl(), fed, model_fn, cfg)
    r2 = run_federated(_cgrl(), fed, model_fn, cfg)
    for k, v in r1.server.arrays.items():
        assert torch.equal(v, r2.server.arrays[k]), k
    seen = torch.tensor(fed.train_counts().sum(0) > 0)
    assert torch.equal(r1.server.arrays["cgrl/proto_flags"], seen)
    assert torch.equal(r1.server.arrays["cgrl/ref_flags"], seen)
    p = r1.server.arrays["cgrl/prototypes"]
    assert torch.allclose(p[seen].norm(dim=1), torch.ones(int(seen.sum())), atol=1e-6)
    assert torch.isfinite(r1.server.arrays["cgrl/references"]).all()
    kinds = set(r1.ledger.to_frame()["kind"])
    assert "update" in kinds and "model" in kinds
    up = r1.ledger.to_frame().query("direction == 'up' and round == 1")["bytes"].iloc[0]
    fa = run_federated(FedAvg(train=TrainConfig(epochs=1, batch_size=16, lr=0.05)), fed, model_fn, cfg)
    fa_up = fa.ledger.to_frame().query("direction == 'up' and round == 1")["bytes"].iloc[0]
    extra = 4 * (4 * 8) + 8 * 4 + 8 * (2 * 4) + 8 * 4  # directions (f32), counts, rho sums (L=2 layers), occurrences (f64)
    meta = lambda r: len(json.dumps({"n_samples": len(fed.clients[0].train), "train_loss": float(  # noqa: E731
        r.frame.query("round == 1 and client == 0 and metric == 'train_loss'")["value"].iloc[0])}, sort_keys=True))
    assert up - meta(r1) == fa_up - meta(fa) + extra  # arrays only: the JSON meta holds a loss of varying length


def test_cgrl_without_regularizers_and_views_is_fedavg(tiny):
    """Identity views and zero weights: CE over [x; x] has FedAvg's gradient, so the models agree."""
    fed, model_fn = tiny
    cfg = LoopConfig(rounds=2, seed=1, eval_every=0)
    tc = TrainConfig(epochs=1, batch_size=16, lr=0.05)
    cg = run_federated(CGRL(train=tc, cgrl=CGRLConfig(augment="none", lambda_dir=0, lambda_rad=0)), fed, model_fn, cfg)
    fa = run_federated(FedAvg(train=tc), fed, model_fn, cfg)
    for k, v in fa.server.arrays.items():
        assert torch.allclose(v, cg.server.arrays[k], atol=1e-5), k


def test_cgrl_rejects_unknown_layer(tiny):
    fed, model_fn = tiny
    with pytest.raises(ValueError, match="unknown layer 'conv9'"):
        run_federated(_cgrl(layers=("conv9",)), fed, model_fn, LoopConfig(rounds=1, seed=0, eval_every=0))


def test_class_directions_are_unit_means():
    model = build_model("mlp", in_channels=3, n_classes=3, input_size=1, hidden=(5,), seed=0)
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 0, 1, 1, 1, 0, 0])
    d, n = class_directions(model, x, y, 3)
    with torch.no_grad():
        u = unit(model.embed(x))
    assert n.tolist() == [4.0, 3.0, 0.0]
    assert torch.allclose(d[0], unit(u[y == 0].sum(0, keepdim=True))[0], atol=1e-6)
    assert torch.equal(d[2], torch.zeros(5))


@pytest.mark.parametrize("batch_size", [1, 64, 256, 5000])
def test_class_directions_equal_the_batch_by_batch_sums_bit_for_bit(batch_size):
    """One extraction and one index_add_ over the rows in order give the very numbers of summing
    unit(embed(batch)) batch by batch (the form the FedGRC results were computed with)."""
    model = build_model("mlp", in_channels=1, n_classes=5, input_size=4, hidden=(32, 16), seed=1)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(1500, 1, 4, 4, generator=g), torch.randint(0, 5, (1500,), generator=g)
    y[y == 3] = 4  # one class without a sample
    model.eval()
    total = torch.zeros(5, 16, dtype=torch.float64)
    with torch.no_grad():
        for i in range(0, len(y), batch_size):
            total.index_add_(0, y[i : i + batch_size], unit(model.embed(x[i : i + batch_size])).to(torch.float64))
    d, n = class_directions(model, x, y, 5, batch_size=batch_size)
    assert torch.equal(d, unit(total).to(torch.float32))
    assert torch.equal(d[3], torch.zeros(16)) and n.tolist() == torch.bincount(y, minlength=5).double().tolist()


def test_cgrl_trains_a_cnn_step_with_augmentation():
    """One round on a few images with both views and every term on: finite, and the model moves."""
    g = torch.Generator().manual_seed(0)
    from fedlib.data import ArrayDataset

    x = torch.rand(48, 1, 28, 28, generator=g)
    y = torch.arange(48) % 3
    data = ArrayDataset(x, y, 3, "toy")
    fed = make_federation(data, n_clients=2, partition="iid", global_test_per_class=2, seed=0)
    model_fn = functools.partial(build_model, "cnn", in_channels=1, n_classes=3, input_size=28, width=8, feature_dim=16)
    res = run_federated(CGRL(train=TrainConfig(epochs=1, batch_size=8, lr=0.05), cgrl=CGRLConfig(warmup=1)), fed, model_fn,
                        LoopConfig(rounds=2, seed=0, eval_every=0))
    model = load_model(model_fn(), res.server)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert res.server.arrays["cgrl/references"].shape == (3, 3)


def test_direction_pass_train_matches_eval_when_the_model_does_not_move(tiny):
    """With a learning rate too small to move the weights, the training-time directions of the
    weak views (identity views here) equal the evaluation pass's, and neither needs the other."""
    fed, model_fn = tiny
    tc = TrainConfig(epochs=1, batch_size=16, lr=1e-12, momentum=0.0)
    cfg = LoopConfig(rounds=1, seed=0, eval_every=0, evaluate_last=False)
    runs = {p: run_federated(CGRL(train=tc, cgrl=CGRLConfig(augment="none", direction_pass=p)), fed, model_fn, cfg)
            for p in ("eval", "train")}
    a, b = (runs[p].server.arrays["cgrl/prototypes"] for p in ("eval", "train"))
    assert torch.allclose(a, b, atol=1e-5)
    assert torch.equal(runs["eval"].server.arrays["cgrl/proto_flags"], runs["train"].server.arrays["cgrl/proto_flags"])


# --------------------------------------------------------------------------- within-class share (issue 38)


def _direct_share(z: np.ndarray, y: np.ndarray) -> float:
    """tr S_W / tr S_T computed from the samples themselves."""
    within = sum(((z[y == c] - z[y == c].mean(0)) ** 2).sum() for c in np.unique(y))
    return float(within / ((z - z.mean(0)) ** 2).sum())


def test_within_class_share_matches_samples_and_is_scale_free():
    from fedlib.cgrl import within_class_share
    from fedlib.stats import ClassMoments

    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (200,), generator=g)
    z = torch.randn(200, 6, generator=g, dtype=torch.float64) + 3.0 * torch.nn.functional.one_hot(y, 6).double()
    m = ClassMoments.from_features(z, y, 5)  # class 4 unobserved
    share = within_class_share(m)
    assert share == pytest.approx(_direct_share(z.numpy(), y.numpy()), rel=1e-10)
    assert 0.0 < share < 1.0
    scaled = ClassMoments.from_features(7.0 * z + 2.0, y, 5)
    assert within_class_share(scaled) == pytest.approx(share, rel=1e-10)
    # one class per client-merged part: the share of merged moments is the share of the pooled samples
    half = ClassMoments.from_features(z[:100], y[:100], 5) + ClassMoments.from_features(z[100:], y[100:], 5)
    assert within_class_share(half) == pytest.approx(share, rel=1e-10)


def test_within_class_share_mutations_fail_the_check(monkeypatch):
    """The check that ``within_class_share`` equals the samples' tr S_W / tr S_T fails for a wrong
    formula in the library: scatter about the global mean in the numerator (no class centring:
    ``within_scatter`` returning the total scatter) gives 1, and an uncentred denominator
    (``total_covariance`` returning the total Gram / N) gives a smaller number."""
    from fedlib.cgrl import within_class_share
    from fedlib.stats import ClassMoments

    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 3, (90,), generator=g)
    z = torch.randn(90, 4, generator=g, dtype=torch.float64) + 2.0 * torch.nn.functional.one_hot(y, 4).double() + 5.0
    m = ClassMoments.from_features(z, y, 3)
    direct = _direct_share(z.numpy(), y.numpy())
    assert within_class_share(m) == pytest.approx(direct, rel=1e-10)  # the unmutated library passes
    total_cov = ClassMoments.total_covariance
    with monkeypatch.context() as mp:  # no class centring: the numerator is the total scatter N * Sigma_T
        mp.setattr(ClassMoments, "within_scatter", lambda self, centers=None: self.counts.sum() * total_cov(self))
        assert within_class_share(m) == pytest.approx(1.0)
        assert within_class_share(m) != pytest.approx(direct, rel=1e-3)
    with monkeypatch.context() as mp:  # no centring in the denominator: the uncentred Gram / N
        mp.setattr(ClassMoments, "total_covariance", lambda self: self.total_gram() / self.counts.sum())
        assert within_class_share(m) < direct
        assert within_class_share(m) != pytest.approx(direct, rel=1e-3)


def test_within_class_share_refuses_empty_moments():
    from fedlib.cgrl import within_class_share
    from fedlib.stats import ClassMoments

    with pytest.raises(ValueError, match="at least one feature"):
        within_class_share(ClassMoments.zeros(3, 2))
    same = ClassMoments.from_features(torch.ones(4, 2, dtype=torch.float64), torch.tensor([0, 0, 1, 1]), 2)
    assert math.isnan(within_class_share(same))
