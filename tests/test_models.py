"""Tests for fedlib.models: the pooled-features interface, seeding, head/body split, norms."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedlib.models import (
    HEAD_PREFIX,
    MLP,
    MODELS,
    FeatureModel,
    SmallCNN,
    build_model,
    count_parameters,
    mobilenet_v2,
    resnet18,
)

# (name, in_channels, input_size, kwargs): tiny configurations, 2 images each.
CONFIGS = [
    ("cnn", 1, 28, {}),
    ("cnn", 3, 28, {}),
    ("cnn", 1, 32, {}),
    ("cnn", 3, 32, {"width": 16, "feature_dim": 32, "norm": "batch"}),
    ("cnn", 1, 28, {"norm": "none"}),
    ("mlp", 1, 28, {}),
    ("mlp", 3, 8, {"hidden": (16, 12, 8)}),
    ("resnet18", 3, 32, {}),
    ("mobilenet_v2", 3, 32, {}),
]


@pytest.fixture(scope="module")
def built() -> dict[int, tuple[FeatureModel, torch.Tensor]]:
    """Each config's model (eval mode) and a 2-image input, built once."""
    gen = torch.Generator().manual_seed(0)
    out = {}
    for i, (name, c, s, kw) in enumerate(CONFIGS):
        model = build_model(name, in_channels=c, n_classes=7, input_size=s, seed=i, **kw).eval()
        out[i] = model, torch.randn(2, c, s, s, generator=gen)
    return out


@pytest.mark.parametrize("i", range(len(CONFIGS)), ids=[f"{n}-{c}x{s}-{kw}" for n, c, s, kw in CONFIGS])
def test_shapes_and_consistency(built, i):
    model, x = built[i]
    assert isinstance(model, FeatureModel)
    assert model.n_classes == 7
    assert model.feature_layers[-1] == "penultimate"
    assert list(model.feature_dims) == list(model.feature_layers)
    assert model.head.in_features == model.feature_dims["penultimate"]
    assert model.head.out_features == 7
    with torch.no_grad():
        logits = model(x)
        assert logits.shape == (2, 7)
        logits2, feats = model.forward_features(x, model.feature_layers)
        assert list(feats) == list(model.feature_layers)
        for layer, f in feats.items():
            assert f.shape == (2, model.feature_dims[layer]), layer
        torch.testing.assert_close(logits2, logits)
        torch.testing.assert_close(model.head(feats["penultimate"]), logits)
        # defaults, embed, a single str name, requested order and deduplication
        _, default = model.forward_features(x)
        assert list(default) == ["penultimate"]
        torch.testing.assert_close(model.embed(x), feats["penultimate"])
        torch.testing.assert_close(model.features(x)["penultimate"], feats["penultimate"])
        first = model.feature_layers[0]
        only = model.features(x, first)
        assert list(only) == [first]
        torch.testing.assert_close(only[first], feats[first])
        both = model.features(x, ["penultimate", first, "penultimate"])
        assert list(both) == ["penultimate", first]


@pytest.mark.parametrize("i", [0, 5, 7, 8], ids=["cnn", "mlp", "resnet18", "mobilenet_v2"])
def test_forward_pools_nothing_extra(built, i):
    model, x = built[i]
    with torch.no_grad():
        z, pooled = model._forward_layers(x, frozenset())
        assert pooled == {}
        assert z.shape == (2, model.feature_dims["penultimate"])


@pytest.mark.parametrize("in_channels", [1, 3])
@pytest.mark.parametrize("input_size", [28, 32])
def test_small_cnn_sizes(in_channels, input_size):
    model = SmallCNN(in_channels=in_channels, n_classes=10, input_size=input_size)
    x = torch.zeros(3, in_channels, input_size, input_size)
    assert model(x).shape == (3, 10)
    assert model.feature_dims == {"conv1": 32, "conv2": 64, "penultimate": 128}
    assert model.fc.in_features == 64 * (input_size // 4) ** 2
    assert model.embed(x).min() >= 0  # after ReLU


def test_mlp_layers():
    model = MLP(in_features=12, hidden=(8, 6, 4), n_classes=3)
    assert model.feature_layers == ("fc1", "fc2", "penultimate")
    assert model.feature_dims == {"fc1": 8, "fc2": 6, "penultimate": 4}
    assert build_model("mlp", in_channels=3, n_classes=2, input_size=5).hidden[0].in_features == 75


def test_backbone_final_maps_are_4x4(built):
    resnet, x = built[7]
    mobilenet, _ = built[8]
    with torch.no_grad():
        h = resnet.relu(resnet.bn1(resnet.conv1(x)))
        h = resnet.layer4(resnet.layer3(resnet.layer2(resnet.layer1(h))))
        assert h.shape == (2, 512, 4, 4)
        assert mobilenet.blocks(x).shape == (2, 1280, 4, 4)
    assert mobilenet.feature_layers == (*(f"stage{k}" for k in range(1, 8)), "penultimate")
    assert not any(isinstance(m, nn.Dropout) for m in mobilenet.modules())


def test_backbones_in_channels():
    model = resnet18(in_channels=1, n_classes=4)
    assert model.conv1.in_channels == 1
    assert model.head.out_features == 4
    assert mobilenet_v2(in_channels=1, n_classes=4).blocks[0][0].in_channels == 1


# ---------------------------------------------------------------- seeding


def _state_equal(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name", ["cnn", "mlp", "mobilenet_v2"])
def test_seed_determinism(name):
    kw = dict(in_channels=3, n_classes=5, input_size=32)
    assert _state_equal(build_model(name, seed=1, **kw), build_model(name, seed=1, **kw))
    assert not _state_equal(build_model(name, seed=1, **kw), build_model(name, seed=2, **kw))


def test_seed_leaves_global_rng_untouched():
    with torch.random.fork_rng(devices=[]):  # these tests set the global generator; fork_rng restores it
        torch.manual_seed(123)
        before = torch.get_rng_state()
        build_model("cnn", in_channels=1, n_classes=10, seed=7)
        assert torch.equal(torch.get_rng_state(), before)
        # without a seed the global RNG is used (and advanced)
        build_model("cnn", in_channels=1, n_classes=10)
        assert not torch.equal(torch.get_rng_state(), before)


def test_seeded_build_ignores_global_state():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        a = build_model("cnn", in_channels=1, n_classes=10, seed=7)
        torch.manual_seed(1)
        b = build_model("cnn", in_channels=1, n_classes=10, seed=7)
    assert _state_equal(a, b)


# ---------------------------------------------------------------- head / body split


@pytest.mark.parametrize("i", [0, 5, 7, 8], ids=["cnn", "mlp", "resnet18", "mobilenet_v2"])
def test_head_body_split(built, i):
    model, _ = built[i]
    head_names = [n for n, _ in model.named_parameters() if n.startswith(HEAD_PREFIX)]
    assert head_names == ["head.weight", "head.bias"]
    head = list(model.head_parameters())
    body = list(model.body_parameters())
    assert [id(p) for p in head] == [id(p) for p in model.head.parameters()]
    assert {id(p) for p in head}.isdisjoint(id(p) for p in body)
    assert len(head) + len(body) == len(list(model.parameters()))
    n_head = sum(p.numel() for p in head)
    assert n_head == model.head.in_features * 7 + 7
    assert count_parameters(model) == n_head + sum(p.numel() for p in body)


def test_count_parameters():
    assert count_parameters(nn.Linear(3, 2)) == 8
    assert count_parameters(MLP(in_features=4, hidden=(3,), n_classes=2)) == (4 * 3 + 3) + (3 * 2 + 2)


# ---------------------------------------------------------------- normalisation


@pytest.mark.parametrize("name", ["cnn", "resnet18"])
def test_group_norm_has_no_running_stats(name):
    kw = dict(in_channels=3, n_classes=10, input_size=32)
    group = build_model(name, **kw)
    assert not any("running_mean" in k for k in group.state_dict())
    assert any(isinstance(m, nn.GroupNorm) for m in group.modules())
    batch = build_model(name, norm="batch", **kw)
    assert any("running_mean" in k for k in batch.state_dict())
    assert not any(isinstance(m, nn.GroupNorm) for m in batch.modules())


def test_mobilenet_group_norm_divides_channels():
    model = mobilenet_v2()
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert norms and not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert all(m.num_channels % m.num_groups == 0 for m in norms)
    assert {m.num_channels: m.num_groups for m in norms}[144] == 16


# ---------------------------------------------------------------- validation


def test_bad_layer_name(built):
    model, x = built[0]
    with pytest.raises(ValueError, match=r"'nope'.*'conv1', 'conv2', 'penultimate'"):
        model.forward_features(x, ["conv1", "nope"])
    with pytest.raises(ValueError, match="'fc1'"):
        model.features(x, "fc1")


def test_bad_model_name():
    with pytest.raises(ValueError, match=r"unknown model 'vgg'; valid: 'cnn', 'mlp', 'resnet18', 'mobilenet_v2'"):
        build_model("vgg", in_channels=1, n_classes=10)
    assert MODELS == ("cnn", "mlp", "resnet18", "mobilenet_v2")


@pytest.mark.parametrize(
    "make, valid",
    [
        (lambda: SmallCNN(norm="layer"), "'group', 'batch', 'none'"),
        (lambda: resnet18(norm="layer"), "'group', 'batch'"),
        (lambda: mobilenet_v2(norm="none"), "'group', 'batch'"),
        (lambda: build_model("cnn", in_channels=1, n_classes=10, norm="layer"), "'group', 'batch', 'none'"),
    ],
)
def test_bad_norm(make, valid):
    with pytest.raises(ValueError, match=rf"unknown norm '(layer|none)'; valid: {valid}"):
        make()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: SmallCNN(width=12), "width.*12"),
        (lambda: SmallCNN(input_size=2), "input_size.*2"),
        (lambda: SmallCNN(n_classes=0), "n_classes.*0"),
        (lambda: MLP(hidden=()), r"hidden.*\(\)"),
        (lambda: MLP(hidden=(8, -1)), r"hidden.*-1"),
        (lambda: build_model("cnn", in_channels=1, n_classes=10, seed=1.5), "seed.*1.5"),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# --- SmallCNN's 2x2 max-pool (fedlib.models._MaxPool2): the bits of F.max_pool2d, faster ---

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fedlib.models import _MaxPool2, _run_block  # noqa: E402


def _pool_pair(x: torch.Tensor, grad: torch.Tensor):
    """Output and input gradient of nn.functional.max_pool2d(x, 2) and of _MaxPool2 on copies of x."""
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = nn.functional.max_pool2d(a, 2), _MaxPool2.apply(b)
    ya.backward(grad)
    yb.backward(grad)
    return ya, yb, a.grad, b.grad


def test_max_pool2_ties_nan_and_odd_sizes_by_hand():
    # window [[1, 3], [3, 0]]: the maximum 3 twice; the NCHW kernel routes the gradient to the
    # first (row-major) one, so must _MaxPool2; an odd side drops its last row and column
    x = torch.tensor([[[[1.0, 3.0, 0.0], [3.0, 0.0, 5.0], [7.0, 7.0, 7.0]]]])
    ya, yb, ga, gb = _pool_pair(x, torch.tensor([[[[2.0]]]]))
    assert yb.tolist() == [[[[3.0]]]] and torch.equal(ya, yb)
    assert gb.tolist() == [[[[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]] and torch.equal(ga, gb)
    x = torch.tensor([[[[float("nan"), 1.0], [2.0, 3.0]]]])  # a NaN in a window is its maximum
    ya, yb, ga, gb = _pool_pair(x, torch.ones(1, 1, 1, 1))
    assert torch.isnan(yb).all() and gb.tolist() == [[[[1.0, 0.0], [0.0, 0.0]]]] and torch.equal(ga, gb)
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[[[1.0, nan], [nan, 3.0]]]])  # two NaNs: the gradient goes to the last one (row-major)
    ya, yb, ga, gb = _pool_pair(x, torch.ones(1, 1, 1, 1))
    assert torch.isnan(yb).all() and gb.tolist() == [[[[0.0, 0.0], [1.0, 0.0]]]] and torch.equal(ga, gb)
    x = torch.full((1, 1, 2, 2), -inf)  # a window of -inf alone: the maximum -inf, the gradient to its first entry
    ya, yb, ga, gb = _pool_pair(x, torch.ones(1, 1, 1, 1))
    assert yb.tolist() == [[[[-inf]]]] and gb.tolist() == [[[[1.0, 0.0], [0.0, 0.0]]]] and torch.equal(ga, gb)


def _equal_with_nans(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality where NaN equals NaN: the same NaN positions, the same bits elsewhere."""
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    return torch.equal(nan_a, nan_b) and torch.equal(a[~nan_a], b[~nan_b])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3), c=st.one_of(st.integers(1, 32), st.sampled_from((8, 16, 32))),
       h=st.integers(2, 11), w=st.integers(2, 11), levels=st.integers(1, 4),
       p_nan=st.sampled_from((0.0, 0.05, 0.3)), p_neg_inf=st.sampled_from((0.0, 0.1, 0.6)),
       seed=st.integers(0, 2**31 - 1))
def test_max_pool2_is_max_pool2d_bit_for_bit(n, c, h, w, levels, p_nan, p_neg_inf, seed):
    # few distinct values (levels): windows full of ties, as ReLU's zeros and flat image regions give;
    # NaNs and -inf (windows of -inf alone among them); c up to 32 takes the channels-last kernel's
    # full-vector paths (8 and 16 floats) as well as its remainder loop
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, levels, (n, c, h, w), generator=g).float() * torch.rand(1, generator=g)
    u = torch.rand(n, c, h, w, generator=g)
    x[u < p_neg_inf] = float("-inf")
    x[u > 1 - p_nan] = float("nan")
    grad = torch.randn(n, c, h // 2, w // 2, generator=g)
    ya, yb, ga, gb = _pool_pair(x, grad)
    assert _equal_with_nans(ya, yb) and yb.is_contiguous()
    assert torch.equal(ga, gb) and gb.is_contiguous()  # finite output gradients: finite input gradients


def test_run_block_keeps_hooks_and_vmap():
    # the module itself runs when a hook watches it or under torch.func.vmap (a custom autograd
    # Function has no batching rule): the hook fires, and vmap computes the plain call's logits up
    # to float rounding (not the same bits: its batched convolution sums in another order, about
    # 2e-7 apart here)
    model = build_model("cnn", in_channels=1, n_classes=10, seed=0, width=8, feature_dim=16)
    x = torch.randn(3, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    seen = []
    handle = model.conv1[3].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    try:
        plain = model(x)
    finally:
        handle.remove()
    assert seen == [torch.Size([3, 8, 14, 14])]
    assert torch.equal(_run_block(model.conv1, x), model.conv1(x))
    batched = torch.func.vmap(model)(x.unsqueeze(1))  # (3, 1, classes): each image its own batch
    assert torch.allclose(batched.squeeze(1), plain, rtol=1e-5, atol=1e-6)
