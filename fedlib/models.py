"""Models behind one "pooled features per layer" interface.

Every model is a :class:`FeatureModel`: a *body* that maps an input batch to penultimate
features ``z`` of shape ``(n, d)`` and a linear *head* (``model.head``, parameters named
``head.*``) that maps ``z`` to logits of shape ``(n, n_classes)``. Statistical heads (NCM, LDA,
Fed3R, FedCGS, ...) need the pooled features of selected intermediate layers, and
personalisation algorithms (FedRep, FedBABU, ...) split body from head by parameter name; both
go through the same small interface:

>>> import torch
>>> model = build_model("cnn", in_channels=1, n_classes=10, seed=0)
>>> model.feature_layers
('conv1', 'conv2', 'penultimate')
>>> logits, feats = model.forward_features(torch.zeros(2, 1, 28, 28), layers=("conv2", "penultimate"))
>>> logits.shape, feats["conv2"].shape, feats["penultimate"].shape
(torch.Size([2, 10]), torch.Size([2, 64]), torch.Size([2, 128]))

Convolutional feature maps of shape ``(n, c, h, w)`` are pooled by global average pooling to
``(n, c)``; vector layers are returned as they are. Only the requested layers are pooled, and
:meth:`FeatureModel.forward` (the training hot path) pools nothing but what the head needs.

Normalisation. ``norm="group"`` (the default everywhere) uses GroupNorm, which keeps no running
statistics and therefore behaves under federated averaging of parameters (Hsieh et al., "The
Non-IID Data Quagmire of Decentralized Machine Learning", ICML 2020, arXiv:1910.00189, Sec. 5);
``norm="batch"`` keeps BatchNorm2d (with its ``running_mean`` / ``running_var`` buffers).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import importlib

import torch
from torch import Tensor, nn

from .rng import isolated_torch_rng

__all__ = [
    "HEAD_PREFIX",
    "MODELS",
    "NORMS",
    "PENULTIMATE",
    "FeatureModel",
    "MLP",
    "SmallCNN",
    "ClientArchitectures",
    "build_model",
    "count_parameters",
    "reinitialized",
    "mobilenet_v2",
    "resnet18",
]

HEAD_PREFIX = "head."
"""Prefix of the head's parameter and buffer names in every :class:`FeatureModel`."""

PENULTIMATE = "penultimate"
"""Name of the head's input layer, the last of every :class:`FeatureModel`'s ``feature_layers``."""

NORMS = ("group", "batch", "none")
"""Normalisation choices of :class:`SmallCNN`; the torchvision backbones accept ``NORMS[:2]``."""

_BACKBONE_NORMS = ("group", "batch")

MODELS = ("cnn", "mlp", "resnet18", "mobilenet_v2")
"""Names accepted by :func:`build_model`."""


def _torchvision_models():
    """``torchvision.models``, imported when a backbone is built (importing torchvision costs
    about two seconds, which every process of a Flower deployment would pay)."""
    return importlib.import_module("torchvision.models")


def _pool(h: Tensor) -> Tensor:
    """Global average pooling of a feature map ``(n, c, h, w)`` to ``(n, c)``; vectors pass through."""
    return h.mean(dim=(2, 3)) if h.dim() == 4 else h


class _MaxPool2(torch.autograd.Function):
    """2x2 max-pooling of an ``(n, c, h, w)`` map with the bits of ``F.max_pool2d(x, 2)`` and its
    gradient, in about half the CPU time (a quarter without gradients): the pooling runs on a
    channels-last copy (torch's vectorized CPU kernel; the NCHW kernel is scalar), whose window
    maxima and argmax indices are those of the NCHW kernel (the first maximum of each window in
    row-major order; a window holding NaNs gives NaN, with the index of its last NaN); the
    output is returned contiguous, so the next layer reads the same tensor; the backward pass
    scatters each output gradient onto its window's argmax (windows do not overlap: no sum,
    exactly the NCHW kernel's gradient).

    >>> x = torch.relu(torch.randn(2, 8, 6, 6, generator=torch.Generator().manual_seed(0))).requires_grad_()
    >>> y = _MaxPool2.apply(x); y.sum().backward()
    >>> x2 = x.detach().clone().requires_grad_(); y2 = nn.functional.max_pool2d(x2, 2); y2.sum().backward()
    >>> bool(torch.equal(y, y2)), bool(torch.equal(x.grad, x2.grad))
    (True, True)
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        out, idx = nn.functional.max_pool2d_with_indices(x.contiguous(memory_format=torch.channels_last), 2)
        ctx.save_for_backward(idx)
        ctx.in_shape = x.shape
        return out.contiguous()

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (idx,) = ctx.saved_tensors
        n, c, h, w = ctx.in_shape
        out = grad.new_zeros(n, c, h * w)
        out.scatter_(2, idx.contiguous().view(n, c, -1), grad.contiguous().view(n, c, -1))
        return out.view(n, c, h, w)


def _run_block(block: nn.Sequential, x: Tensor) -> Tensor:
    """``block(x)`` for a :class:`SmallCNN` block, its ``MaxPool2d(2)`` computed by
    ``_MaxPool2`` (the same bits, faster); the module itself is called when hooks watch it,
    under ``torch.func`` transforms (the vectorized engine's ``vmap``), or for any other pooling."""
    for module in block:
        if (type(module) is nn.MaxPool2d and x.dim() == 4 and module.kernel_size == 2 and module.stride == 2
                and module.padding == 0 and module.dilation == 1 and not module.ceil_mode and not module.return_indices
                and not (module._forward_hooks or module._forward_pre_hooks or nn.modules.module._global_forward_hooks
                         or nn.modules.module._global_forward_pre_hooks)
                and not torch._C._functorch.is_functorch_wrapped_tensor(x)):
            x = _MaxPool2.apply(x)
        else:
            x = module(x)
    return x


def _group_norm(channels: int) -> nn.GroupNorm:
    """GroupNorm for the torchvision backbones: ``gcd(32, channels)`` groups.

    This is the usual 32 groups (Wu & He, "Group Normalization", ECCV 2018, arXiv:1803.08494)
    whenever 32 divides ``channels`` (every ResNet-18 layer), and otherwise the largest power of two
    below 32 that divides it (MobileNetV2's 16-, 24- and 144-channel layers get 16, 8 and 16
    groups), since ``min(32, channels)`` would not divide e.g. 144.
    """
    return nn.GroupNorm(math.gcd(32, channels), channels)


def _check_positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_norm(norm: object, valid: Sequence[str]) -> None:
    if norm not in valid:
        raise ValueError(f"unknown norm {norm!r}; valid: {', '.join(map(repr, valid))}")


class FeatureModel(nn.Module):
    """Base class: a body producing penultimate features and a linear head producing logits.

    Subclasses set, in ``__init__``:

    - ``self.head``: ``nn.Linear(feature_dims["penultimate"], n_classes)``, the final classifier
      (its parameters are named ``head.*``, see ``HEAD_PREFIX``);
    - ``self.feature_layers``: selectable layer names in network order, the last always
      ``"penultimate"`` (the input of the head);
    - ``self.feature_dims``: the pooled dimension of each selectable layer;
    - ``self.n_classes``;

    and implement ``_forward_layers``. Submodules must not shadow the methods below
    (``features``, ``embed``, ...).
    """

    head: nn.Linear
    feature_layers: tuple[str, ...]
    feature_dims: dict[str, int]
    n_classes: int

    def _forward_layers(self, x: Tensor, layers: frozenset[str]) -> tuple[Tensor, dict[str, Tensor]]:
        """Run the body, pooling only the requested intermediate layers.

        Parameters
        ----------
        x : Tensor
            Input batch, of shape ``(n, ...)``.
        layers : frozenset of str
            Valid names from ``feature_layers`` other than ``"penultimate"`` to pool; often empty.

        Returns
        -------
        z : Tensor
            Penultimate features, of shape ``(n, feature_dims["penultimate"])``.
        pooled : dict of str to Tensor
            ``{layer: pooled features of shape (n, feature_dims[layer])}`` for each name in ``layers``.
        """
        raise NotImplementedError

    def _check_layers(self, layers: Sequence[str] | str | None) -> tuple[str, ...]:
        if layers is None:
            return (PENULTIMATE,)
        if isinstance(layers, str):  # a single name, not a sequence of characters
            layers = (layers,)
        for name in layers:
            if name not in self.feature_dims:
                raise ValueError(
                    f"unknown layer {name!r} for {type(self).__name__}; "
                    f"valid: {', '.join(map(repr, self.feature_layers))}"
                )
        return tuple(dict.fromkeys(layers))  # deduplicated, order kept

    def _features(self, x: Tensor, names: tuple[str, ...]) -> tuple[Tensor, dict[str, Tensor]]:
        z, pooled = self._forward_layers(x, frozenset(names) - {PENULTIMATE})
        pooled[PENULTIMATE] = z
        return z, {name: pooled[name] for name in names}

    def forward(self, x: Tensor) -> Tensor:
        """Logits of shape ``(n, n_classes)`` for an input batch ``x`` of shape ``(n, ...)``."""
        z, _ = self._forward_layers(x, frozenset())
        return self.head(z)

    def forward_features(
        self, x: Tensor, layers: Sequence[str] | str | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Logits and pooled features of selected layers in one pass.

        Parameters
        ----------
        x : Tensor
            Input batch, of shape ``(n, ...)``.
        layers : sequence of str, str or None
            Names from ``feature_layers`` (a single name may be given as a str); ``None`` means
            ``("penultimate",)``.

        Returns
        -------
        logits : Tensor
            Of shape ``(n, n_classes)``, equal to ``self(x)``.
        features : dict of str to Tensor
            ``{layer: features of shape (n, feature_dims[layer])}`` in the requested order;
            convolutional maps are globally average-pooled.
        """
        z, feats = self._features(x, self._check_layers(layers))
        return self.head(z), feats

    def features(self, x: Tensor, layers: Sequence[str] | str | None = None) -> dict[str, Tensor]:
        """Pooled features of selected layers, ``{layer: (n, feature_dims[layer])}``; no head is run.

        See :meth:`forward_features` for ``layers``.
        """
        return self._features(x, self._check_layers(layers))[1]

    @torch.no_grad()
    def extract(self, x: Tensor, layers: Sequence[str] | str | None = None, batch_size: int = 256) -> Tensor:
        """Concatenated pooled features of ``layers`` (in the given order) for a whole data set,
        of shape ``(n, sum(feature_dims[l] for l in layers))``: in batches of ``batch_size``, in
        evaluation mode (no dropout, normalization statistics fixed), without gradients. The one
        batched extraction every statistics round, head and tracker uses.

        >>> model = build_model("cnn", in_channels=1, n_classes=10, seed=0, width=8, feature_dim=8)
        >>> model.extract(torch.zeros(300, 1, 28, 28), ("conv1", "penultimate")).shape
        torch.Size([300, 16])
        >>> model.extract(torch.zeros(0, 1, 28, 28)).shape
        torch.Size([0, 8])
        """
        names = self._check_layers(layers)
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.eval()
        if len(x) == 0:
            return torch.zeros(0, sum(int(self.feature_dims[n]) for n in names))
        parts = []
        for i in range(0, len(x), batch_size):
            feats = self._features(x[i : i + batch_size], names)[1]
            parts.append(torch.cat([feats[n] for n in names], dim=1))
        return torch.cat(parts)

    def embed(self, x: Tensor) -> Tensor:
        """Penultimate features (the head's input), of shape ``(n, feature_dims["penultimate"])``."""
        return self._forward_layers(x, frozenset())[0]

    def body_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters whose names do not start with ``"head."`` (feature extractor)."""
        return (p for name, p in self.named_parameters() if not name.startswith(HEAD_PREFIX))

    def head_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters whose names start with ``"head."`` (the final linear classifier)."""
        return (p for name, p in self.named_parameters() if name.startswith(HEAD_PREFIX))


class SmallCNN(FeatureModel):
    """Two-block CNN for 28×28 (MNIST-like) or 32×32 (CIFAR-like) images.

    ``conv1``: conv3×3(in→width) + norm + ReLU + maxpool2; ``conv2``: conv3×3(width→2·width) + norm
    + ReLU + maxpool2; flatten; ``fc``: Linear → ``feature_dim`` + ReLU (``"penultimate"``);
    ``head``: Linear(feature_dim → n_classes). The selectable ``"conv1"`` / ``"conv2"`` features
    are the block outputs (after max-pooling), globally average-pooled to ``width`` /
    ``2·width`` dimensions.

    Parameters
    ----------
    in_channels : int
        Image channels (1 for MNIST, 3 for CIFAR).
    n_classes : int
        Number of classes.
    width : int
        Channels of the first block (the second has ``2 * width``); a multiple of 8 when
        ``norm="group"``.
    feature_dim : int
        Penultimate dimension.
    norm : {"group", "batch", "none"}
        GroupNorm with 8 groups (no running statistics), BatchNorm2d, or nothing. Convolutions have
        a bias only when ``norm="none"``.
    input_size : int
        Height and width of the (square) input; the flattened map is
        ``2 * width * (input_size // 4) ** 2``.

    Examples
    --------
    >>> with isolated_torch_rng(0):  # initial weights from seed 0; the caller's generator is left alone
    ...     model = SmallCNN(in_channels=3, input_size=32)
    >>> model(torch.zeros(4, 3, 32, 32)).shape
    torch.Size([4, 10])
    """

    def __init__(
        self,
        in_channels: int = 1,
        n_classes: int = 10,
        width: int = 32,
        feature_dim: int = 128,
        norm: str = "group",
        input_size: int = 28,
    ) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("n_classes", n_classes), ("width", width),
                            ("feature_dim", feature_dim), ("input_size", input_size)]:
            _check_positive_int(name, value)
        _check_norm(norm, NORMS)
        if norm == "group" and width % 8:
            raise ValueError(f"width must be a multiple of 8 for norm='group' (8 groups), got {width!r}")
        if input_size < 4:
            raise ValueError(f"input_size must be at least 4 (two 2x2 max-pools), got {input_size!r}")

        def block(c_in: int, c_out: int) -> nn.Sequential:
            if norm == "group":
                norm_layer: nn.Module = nn.GroupNorm(8, c_out)
            elif norm == "batch":
                norm_layer = nn.BatchNorm2d(c_out)
            else:
                norm_layer = nn.Identity()
            conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=norm == "none")
            return nn.Sequential(conv, norm_layer, nn.ReLU(inplace=True), nn.MaxPool2d(2))

        side = input_size // 2 // 2
        self.conv1 = block(in_channels, width)
        self.conv2 = block(width, 2 * width)
        self.fc = nn.Linear(2 * width * side * side, feature_dim)
        self.head = nn.Linear(feature_dim, n_classes)
        self.n_classes = n_classes
        self.feature_layers = ("conv1", "conv2", PENULTIMATE)
        self.feature_dims = {"conv1": width, "conv2": 2 * width, PENULTIMATE: feature_dim}

    def _forward_layers(self, x: Tensor, layers: frozenset[str]) -> tuple[Tensor, dict[str, Tensor]]:
        pooled: dict[str, Tensor] = {}
        h = _run_block(self.conv1, x)  # (n, width, s/2, s/2)
        if "conv1" in layers:
            pooled["conv1"] = _pool(h)
        h = _run_block(self.conv2, h)  # (n, 2 width, s/4, s/4)
        if "conv2" in layers:
            pooled["conv2"] = _pool(h)
        z = torch.relu(self.fc(h.flatten(1)))  # (n, feature_dim)
        return z, pooled


class MLP(FeatureModel):
    """Fully connected ReLU network on flattened inputs.

    Hidden layer ``i`` (1-based) is selectable as ``"fc{i}"`` (after its ReLU), except the last
    hidden layer, which is ``"penultimate"``; with ``hidden=(256, 128)`` the layers are
    ``("fc1", "penultimate")`` of dimensions 256 and 128. Hidden layers are stored in
    ``self.hidden`` (an ``nn.ModuleList``).

    Parameters
    ----------
    in_features : int
        Size of a flattened input, e.g. ``784`` for 1×28×28 images.
    hidden : sequence of int
        Hidden widths; at least one.
    n_classes : int
        Number of classes.

    Examples
    --------
    >>> with isolated_torch_rng(0):  # initial weights from seed 0; the caller's generator is left alone
    ...     model = MLP(in_features=64, hidden=(32,), n_classes=10)
    >>> model(torch.zeros(5, 1, 8, 8)).shape
    torch.Size([5, 10])
    """

    def __init__(self, in_features: int = 784, hidden: Sequence[int] = (256, 128), n_classes: int = 10) -> None:
        super().__init__()
        _check_positive_int("in_features", in_features)
        _check_positive_int("n_classes", n_classes)
        hidden = tuple(hidden)
        if not hidden or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in hidden):
            raise ValueError(f"hidden must be a non-empty sequence of positive ints, got {hidden!r}")
        widths = (in_features, *hidden)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.head = nn.Linear(hidden[-1], n_classes)
        self.n_classes = n_classes
        self.feature_layers = (*(f"fc{i}" for i in range(1, len(hidden))), PENULTIMATE)
        self.feature_dims = dict(zip(self.feature_layers, hidden))

    def _forward_layers(self, x: Tensor, layers: frozenset[str]) -> tuple[Tensor, dict[str, Tensor]]:
        pooled: dict[str, Tensor] = {}
        h = x.flatten(1)  # (n, in_features)
        for name, linear in zip(self.feature_layers, self.hidden):
            h = torch.relu(linear(h))  # (n, feature_dims[name])
            if name in layers:
                pooled[name] = h
        return h, pooled


def _backbone_norm(norm: str) -> Callable[[int], nn.Module]:
    return _group_norm if norm == "group" else nn.BatchNorm2d


class ResNet18(FeatureModel):
    """Torchvision ResNet-18 adapted to 32×32 inputs; build it with :func:`resnet18`.

    Submodules keep torchvision's names (``conv1``, ``bn1``, ``layer1`` ... ``layer4``) so that
    state-dict keys match torchvision's, except ``fc``, which is ``head``.
    """

    def __init__(self, in_channels: int = 3, n_classes: int = 10, norm: str = "group") -> None:
        super().__init__()
        _check_positive_int("in_channels", in_channels)
        _check_positive_int("n_classes", n_classes)
        _check_norm(norm, _BACKBONE_NORMS)
        net = _torchvision_models().resnet18(weights=None, num_classes=n_classes, norm_layer=_backbone_norm(norm))
        # CIFAR stem: 3x3 stride-1 conv and no max-pool, so 32x32 inputs reach layer4 at 4x4.
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")  # torchvision's init
        self.bn1, self.relu = net.bn1, net.relu
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4
        self.head = net.fc  # Linear(512, n_classes), torchvision's init
        self.n_classes = n_classes
        self.feature_layers = ("layer1", "layer2", "layer3", "layer4", PENULTIMATE)
        self.feature_dims = {"layer1": 64, "layer2": 128, "layer3": 256, "layer4": 512, PENULTIMATE: 512}

    def _forward_layers(self, x: Tensor, layers: frozenset[str]) -> tuple[Tensor, dict[str, Tensor]]:
        pooled: dict[str, Tensor] = {}
        h = self.relu(self.bn1(self.conv1(x)))  # (n, 64, 32, 32) for 32x32 inputs
        for name in ("layer1", "layer2", "layer3", "layer4"):  # to (n, 512, 4, 4)
            h = getattr(self, name)(h)
            if name in layers:
                pooled[name] = _pool(h)
        return _pool(h), pooled  # avgpool + flatten: (n, 512)


def resnet18(in_channels: int = 3, n_classes: int = 10, norm: str = "group") -> ResNet18:
    """ResNet-18 (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016,
    arXiv:1512.03385) from torchvision (``weights=None``), adapted to 32×32 inputs.

    Changes to ``torchvision.models.resnet18``: ``conv1`` is 3×3, stride 1, padding 1 (with
    ``in_channels`` inputs); the stem max-pool is removed; every BatchNorm2d becomes
    ``GroupNorm(gcd(32, c), c)`` — i.e. 32 groups, since all ResNet-18 widths are multiples of
    32 — when ``norm="group"``; ``fc`` is the ``head``. A 32×32 input reaches ``layer4`` at 4×4.

    Parameters
    ----------
    in_channels : int
        Image channels.
    n_classes : int
        Number of classes.
    norm : {"group", "batch"}
        GroupNorm (no running statistics) or torchvision's BatchNorm2d.

    Returns
    -------
    ResNet18
        Selectable layers ``"layer1"`` ... ``"layer4"`` (64, 128, 256, 512 dimensions after
        global average pooling) and ``"penultimate"`` (512; equal to the pooled ``"layer4"``).
    """
    return ResNet18(in_channels=in_channels, n_classes=n_classes, norm=norm)


# torchvision's (t, c, n, s) rows with the stride of the second row (24 channels) set to 1.
_MOBILENET_V2_CIFAR_SETTING = [
    [1, 16, 1, 1],
    [6, 24, 2, 1],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]


class MobileNetV2(FeatureModel):
    """Torchvision MobileNetV2 adapted to 32×32 inputs; build it with :func:`mobilenet_v2`.

    ``self.blocks`` is torchvision's ``features`` (an ``nn.Sequential``; renamed because
    :meth:`FeatureModel.features` is a method); stage ``k`` (1-based) is the ``k``-th row of the
    bottleneck table and ends at ``blocks[stage_ends[k - 1]]``.
    """

    def __init__(self, in_channels: int = 3, n_classes: int = 10, norm: str = "group") -> None:
        super().__init__()
        _check_positive_int("in_channels", in_channels)
        _check_positive_int("n_classes", n_classes)
        _check_norm(norm, _BACKBONE_NORMS)
        net = _torchvision_models().mobilenet_v2(
            weights=None,
            num_classes=n_classes,
            norm_layer=_backbone_norm(norm),
            inverted_residual_setting=_MOBILENET_V2_CIFAR_SETTING,
        )
        stem = nn.Conv2d(in_channels, 32, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(stem.weight, mode="fan_out")  # torchvision's init
        net.features[0][0] = stem
        self.blocks = net.features  # not `features`: that is FeatureModel.features
        self.head = net.classifier[1]  # Linear(1280, n_classes); the Dropout(0.2) before it is dropped
        ends, index = [], 0
        for _, _, n, _ in _MOBILENET_V2_CIFAR_SETTING:  # features[0] is the stem
            index += n
            ends.append(index)
        self.stage_ends = tuple(ends)  # (1, 3, 6, 10, 13, 16, 17)
        stages = tuple(f"stage{k}" for k in range(1, len(ends) + 1))
        self._stage_at = dict(zip(ends, stages))
        self.n_classes = n_classes
        self.feature_layers = (*stages, PENULTIMATE)
        self.feature_dims = {
            **{s: c for s, (_, c, _, _) in zip(stages, _MOBILENET_V2_CIFAR_SETTING)},
            PENULTIMATE: net.last_channel,
        }

    def _forward_layers(self, x: Tensor, layers: frozenset[str]) -> tuple[Tensor, dict[str, Tensor]]:
        pooled: dict[str, Tensor] = {}
        h = x
        for i, module in enumerate(self.blocks):  # (n, 3, 32, 32) -> (n, 1280, 4, 4)
            h = module(h)
            stage = self._stage_at.get(i)
            if stage is not None and stage in layers:
                pooled[stage] = _pool(h)
        return _pool(h), pooled  # (n, 1280)


def mobilenet_v2(in_channels: int = 3, n_classes: int = 10, norm: str = "group") -> MobileNetV2:
    """MobileNetV2 (Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks",
    CVPR 2018, arXiv:1801.04381) from torchvision (``weights=None``), adapted to 32×32 inputs.

    Changes to ``torchvision.models.mobilenet_v2`` (the usual CIFAR adaptation): the stem conv
    has stride 1 (and ``in_channels`` inputs); the first block of the 24-channel row (Table 2,
    row 3; ``features[2]``) has stride 1 instead of 2, so the total stride is 8 and a 32×32 input
    ends at a 4×4 map rather than 1×1; every BatchNorm2d becomes ``GroupNorm(gcd(32, c), c)``
    when ``norm="group"``; the classifier's ``Dropout(0.2)`` is removed and its Linear is the
    ``head``, so ``head(embed(x))`` are the logits in train mode too.

    Parameters
    ----------
    in_channels : int
        Image channels.
    n_classes : int
        Number of classes.
    norm : {"group", "batch"}
        GroupNorm (no running statistics) or torchvision's BatchNorm2d.

    Returns
    -------
    MobileNetV2
        Selectable layers: the outputs of the seven bottleneck stages ``"stage1"`` ... ``"stage7"``
        (after torchvision's ``features[i]`` for i = 1, 3, 6, 10, 13, 16, 17, here ``blocks[i]``;
        16, 24, 32, 64, 96, 160, 320 dimensions, at 32, 32, 16, 8, 8, 4, 4 pixels for 32×32
        inputs) and ``"penultimate"`` (1280, after the final 1×1 conv and global average pooling).
    """
    return MobileNetV2(in_channels=in_channels, n_classes=n_classes, norm=norm)


def build_model(
    name: str,
    *,
    in_channels: int,
    n_classes: int,
    input_size: int = 28,
    seed: int | None = None,
    **kwargs: object,
) -> FeatureModel:
    """Build a model from the registry ``MODELS``.

    Parameters
    ----------
    name : {"cnn", "mlp", "resnet18", "mobilenet_v2"}
        :class:`SmallCNN`, :class:`MLP` (with ``in_features = in_channels * input_size ** 2``),
        :func:`resnet18` or :func:`mobilenet_v2`.
    in_channels : int
        Image channels.
    n_classes : int
        Number of classes.
    input_size : int
        Square image side; used by ``"cnn"`` and ``"mlp"`` (the backbones pool adaptively and
        are meant for 32×32).
    seed : int or None
        If given, the initial parameters are a deterministic function of ``seed``; the caller's
        global RNG state is left untouched. If None, the global RNG is used (and advanced).
    **kwargs
        Passed to the model's constructor (e.g. ``width``, ``norm``, ``hidden``).

    Examples
    --------
    >>> a = build_model("mlp", in_channels=1, n_classes=10, input_size=8, seed=3)
    >>> b = build_model("mlp", in_channels=1, n_classes=10, input_size=8, seed=3)
    >>> all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    True
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(map(repr, MODELS))}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed must be an int or None, got {seed!r}")
    _check_positive_int("in_channels", in_channels)
    _check_positive_int("input_size", input_size)

    def make() -> FeatureModel:
        if name == "cnn":
            return SmallCNN(in_channels=in_channels, n_classes=n_classes, input_size=input_size, **kwargs)
        if name == "mlp":
            return MLP(in_features=in_channels * input_size**2, n_classes=n_classes, **kwargs)
        if name == "resnet18":
            return resnet18(in_channels=in_channels, n_classes=n_classes, **kwargs)
        return mobilenet_v2(in_channels=in_channels, n_classes=n_classes, **kwargs)

    if seed is None:
        return make()
    with isolated_torch_rng(seed):  # the CPU RNG only, seeded as torch.manual_seed(seed) seeds it; restored on exit
        return make()


def count_parameters(model: nn.Module) -> int:
    """Total number of parameter entries of ``model`` (trainable or not; buffers excluded)."""
    return sum(p.numel() for p in model.parameters())


def reinitialized(model: nn.Module, seed: int) -> nn.Module:
    """A copy of ``model`` with every parameter drawn again (each module's ``reset_parameters``)
    under ``seed``; the caller's RNG state is left untouched.

    >>> m = build_model("mlp", in_channels=1, n_classes=2, input_size=2, hidden=(3,), seed=0)
    >>> a, b = reinitialized(m, 5), reinitialized(m, 5)
    >>> all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    True
    """
    fresh = copy.deepcopy(model)
    with isolated_torch_rng(seed):
        for module in fresh.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
    return fresh


@dataclass(frozen=True)
class ClientArchitectures:
    """Each client's own architecture: the model factory of a federation whose clients differ.

    Give it where a run takes ``model_fn``. The transport then hands each client a workspace of
    its own architecture (``ctx.model``), and the loop refuses every method that shares
    parameters (:attr:`fedlib.protocol.Capabilities.model_agnostic` is ``False``). Calling the
    object builds the first client's architecture: it is the run's initial model.

    Parameters
    ----------
    specs : mapping of str to mapping
        Architecture name -> :func:`build_model` arguments: ``"model"`` (one of ``fedlib.models.MODELS``)
        and its keyword arguments (e.g. ``{"model": "cnn", "width": 8}``).
    assignment : sequence of str
        Client ``k``'s architecture name, one per client.
    in_channels, n_classes, input_size : int
        As :func:`build_model`, shared by every client.

    Examples
    --------
    >>> archs = ClientArchitectures.mixture({"small": {"model": "mlp", "hidden": (8,)},
    ...                                     "wide": {"model": "mlp", "hidden": (32,)}}, 3,
    ...                                     in_channels=1, n_classes=2, input_size=4)
    >>> archs.assignment, archs.heterogeneous
    (('small', 'wide', 'small'), True)
    >>> archs.for_client(1).head.in_features
    32
    """

    specs: Mapping[str, Mapping]
    assignment: tuple[str, ...]
    in_channels: int
    n_classes: int
    input_size: int = 28
    _built: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "specs", {str(k): dict(v) for k, v in dict(self.specs).items()})
        object.__setattr__(self, "assignment", tuple(self.assignment))
        if not self.specs:
            raise ValueError("ClientArchitectures needs at least one architecture in specs, got none")
        for key, spec in self.specs.items():
            if spec.get("model") not in MODELS:
                raise ValueError(f"architecture {key!r} names model {spec.get('model')!r}; valid: {', '.join(MODELS)}")
        if not self.assignment:
            raise ValueError("ClientArchitectures needs one architecture per client, got an empty assignment")
        unknown = sorted({a for a in self.assignment if a not in self.specs})
        if unknown:
            raise ValueError(f"assignment names unknown architecture(s) {unknown}; valid: {', '.join(self.specs)}")

    @classmethod
    def mixture(cls, specs: Mapping[str, Mapping], n_clients: int, **shared) -> "ClientArchitectures":
        """``n_clients`` clients taking the architectures of ``specs`` in turn (client ``k`` the
        ``k mod len(specs)``-th): every architecture on a near-equal share of the clients."""
        names = list(specs)
        return cls(specs, tuple(names[k % len(names)] for k in range(n_clients)), **shared)

    @property
    def heterogeneous(self) -> bool:
        """Whether the clients use more than one architecture."""
        return len(set(self.assignment)) > 1

    def key(self, client: int) -> str:
        """Client ``client``'s architecture name."""
        return self.assignment[client]

    def build(self, name: str) -> FeatureModel:
        """A fresh model of architecture ``name`` (drawn from the global RNG: seed around it)."""
        spec = dict(self.specs[name])
        model = spec.pop("model")
        return build_model(model, in_channels=self.in_channels, n_classes=self.n_classes, input_size=self.input_size, **spec)

    def for_client(self, client: int) -> FeatureModel:
        """A fresh model of client ``client``'s architecture."""
        if not 0 <= client < len(self.assignment):
            raise ValueError(f"client {client} has no architecture: {len(self.assignment)} clients are assigned (0..{len(self.assignment) - 1})")
        return self.build(self.assignment[client])

    def parameters(self) -> dict[str, int]:
        """Each architecture's parameter count."""
        if not self._built:
            with torch.random.fork_rng(devices=[]):
                self._built.update({name: count_parameters(self.build(name)) for name in self.specs})
        return dict(self._built)

    def __call__(self) -> FeatureModel:
        return self.for_client(0)
