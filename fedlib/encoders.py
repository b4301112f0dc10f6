"""Frozen encoders: the embedding space in which GGEUR works (GGEUR, Section 3.2.1).

GGEUR (Dai et al., CVPR 2025, arXiv:2503.06457) embeds every image once with a frozen CLIP image
encoder (ViT-B/16 in the paper, raw ViT-B/32 features of dimension 512 in the authors' code) and
trains only a classifier on the embeddings. CLIP's weights cannot be downloaded in this project,
so the default encoder is an honest stand-in:

:func:`train_public_encoder` trains the small CNN of :mod:`fedlib.models` on a **public split**
that is disjoint from every client's data and from every test set (:func:`public_split`), then
freezes it. Like CLIP it is trained once, by someone else, before federated learning starts; unlike
CLIP it has seen only a few hundred images of the same task, so its embeddings are far more
task-specific and far less general. Two options bring it closer to how CLIP reads an image:
``standardize`` (every image standardized on its own pixels, :func:`standardize_images`, so an
inverted or dimmer domain is not a different input range) and ``features="linear"`` (the
penultimate layer before its ReLU: a linear projection's output, as CLIP's image embedding is, with
no coordinate clamped to zero). :class:`OpenCLIPEncoder` is the hook for a reader who has
open_clip and a checkpoint file locally; it never downloads anything.

Every encoder is a :class:`FrozenEncoder`: ``embed(x)`` returns ``(n, d)`` float32 features, in
batches, without gradients, and :func:`encode_dataset` turns an image dataset into an embedding
dataset (labels and domains kept) from which a :class:`~fedlib.federation.Federation` is built.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .data import ArrayDataset
from .models import build_model
from .rng import ENCODER_INIT, ENCODER_TRAIN, PUBLIC_SPLIT, derive_seed, isolated_torch_rng, torch_generator
from .training import TrainConfig, local_train

__all__ = ["FrozenEncoder", "public_split", "standardize_images", "train_public_encoder", "encode_dataset",
           "OpenCLIPEncoder", "ENCODER_FEATURES"]

ENCODER_FEATURES = ("relu", "linear")
"""What :func:`train_public_encoder`'s embedding is: the CNN's penultimate layer after its ReLU (``"relu"``, the
model's ``embed``), or the same layer's linear output before the ReLU (``"linear"``: no coordinate is clamped to 0,
like CLIP's image embedding, the output of a linear projection)."""


class FrozenEncoder:
    """A frozen feature extractor ``(n, ...) -> (n, dim)``.

    Parameters
    ----------
    fn : the feature function (e.g. ``model.embed``); it is called under ``torch.no_grad()``
    dim : output dimension
    name : short description for tables
    module : the underlying module, if any; its parameters are set to ``requires_grad=False``
    """

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], dim: int, name: str, module: nn.Module | None = None) -> None:
        self._fn = fn
        self.dim = int(dim)
        self.name = name
        self.module = module
        if module is not None:
            module.eval()
            for p in module.parameters():
                p.requires_grad_(False)

    @torch.no_grad()
    def embed(self, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
        """Embeddings of shape (n, dim), float32."""
        if self.module is not None:
            self.module.eval()
        out = [self._fn(x[i : i + batch_size]).float() for i in range(0, len(x), batch_size)]
        z = torch.cat(out) if out else torch.zeros(0, self.dim)
        if z.ndim != 2 or z.shape[1] != self.dim:
            raise ValueError(f"encoder {self.name} returned shape {tuple(z.shape)}, expected (n, {self.dim})")
        return z

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x)


def public_split(dataset: ArrayDataset, fraction: float, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(public, rest)``: a ``fraction`` of every class (and every domain, if any) is public.

    The public indices train the encoder; everything else (clients' data, test sets) is drawn from
    ``rest``, so the encoder never sees a client's or a test sample.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng(derive_seed(seed, PUBLIC_SPLIT))
    labels = dataset.labels_np
    strata = labels if dataset.domain is None else labels + dataset.n_classes * dataset.domain.numpy()
    public = []
    for s in np.unique(strata):
        idx = rng.permutation(np.flatnonzero(strata == s))
        public.append(idx[: int(round(fraction * len(idx)))])
    pub = np.sort(np.concatenate(public))
    rest = np.setdiff1d(np.arange(len(dataset)), pub)
    return pub, rest


def standardize_images(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Every image shifted and scaled to mean 0 and standard deviation 1 over its own pixels (and channels).

    ``x`` of shape ``(n, ...)``; returns the same shape. An image and its negative ``1 - x`` (the inverted
    digits) then differ only in sign, and no domain enters the network at another brightness or contrast;
    a constant image becomes 0 (``eps``, added to the variance, keeps the division finite).

    Examples
    --------
    >>> x = torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]]])
    >>> standardize_images(x).flatten().tolist(), standardize_images(1 - x).flatten().tolist()
    ([-1.0, 1.0, -1.0, 1.0], [1.0, -1.0, 1.0, -1.0])
    """
    if x.ndim < 2:
        raise ValueError(f"x must be a batch of images of shape (n, ...), got shape {tuple(x.shape)}")
    flat = x.reshape(len(x), -1).float()
    mean = flat.mean(dim=1, keepdim=True)
    var = flat.var(dim=1, unbiased=False, keepdim=True)
    return ((flat - mean) / torch.sqrt(var + eps)).reshape(x.shape)


def train_public_encoder(
    public: ArrayDataset, *, epochs: int = 5, lr: float = 0.05, batch_size: int = 32, feature_dim: int = 128,
    width: int = 32, seed: int = 0, standardize: bool = False, features: str = "relu",
) -> FrozenEncoder:
    """Train the small CNN on the public split with SGD, then freeze it; its penultimate layer is the embedding.

    Returns a :class:`FrozenEncoder` of dimension ``feature_dim`` (not normalized, like the raw CLIP
    features of the authors' code). ``standardize``: every image, in training and when embedding, is
    first standardized on its own pixels (:func:`standardize_images`). ``features``: the penultimate
    layer after its ReLU or before it (:data:`ENCODER_FEATURES`).
    """
    if len(public) == 0:
        raise ValueError("the public split is empty; valid: at least one sample")
    if features not in ENCODER_FEATURES:
        raise ValueError(f"unknown encoder features {features!r}; valid: {', '.join(ENCODER_FEATURES)}")
    with isolated_torch_rng(derive_seed(seed, ENCODER_INIT)):
        model = build_model("cnn", in_channels=public.x.shape[1], n_classes=public.n_classes,
                            input_size=public.x.shape[-1], feature_dim=feature_dim, width=width)
    prep = standardize_images if standardize else (lambda x: x)
    local_train(model, prep(public.x), public.y, TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, momentum=0.9),
                torch_generator(seed, ENCODER_TRAIN))
    if features == "relu":
        fn = lambda x: model.embed(prep(x))  # noqa: E731
    else:
        fn = lambda x: model.fc(model.conv2(model.conv1(prep(x))).flatten(1))  # noqa: E731
    what = ", standardized inputs" if standardize else ""
    what += ", features before the ReLU" if features == "linear" else ""
    return FrozenEncoder(fn, feature_dim, f"CNN trained on {len(public)} public images{what}, frozen", module=model)


def encode_dataset(encoder: FrozenEncoder, dataset: ArrayDataset) -> ArrayDataset:
    """The embedding dataset: ``x`` of shape (n, encoder.dim); labels, domains and names kept."""
    return ArrayDataset(encoder.embed(dataset.x), dataset.y, dataset.n_classes, f"{dataset.name}:emb",
                        dataset.domain, dataset.domain_names)


class OpenCLIPEncoder(FrozenEncoder):
    """A CLIP image encoder from a **local** open_clip checkpoint (never downloaded).

    Parameters
    ----------
    model_name : an open_clip architecture name, e.g. ``"ViT-B-32"``
    checkpoint : path to a local weights file (``pretrained=`` of ``open_clip.create_model_and_transforms``)

    Grey 28×28 digits are repeated to 3 channels and resized to the model's input size; features are
    the raw (not normalized) image embeddings, as in the authors' code.
    """

    def __init__(self, model_name: str, checkpoint: str | Path) -> None:
        path = Path(checkpoint)
        if not path.is_file():
            raise ValueError(f"checkpoint {str(path)!r} is not a local file; valid: the path of downloaded open_clip weights")
        try:
            import open_clip  # noqa: PLC0415
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("OpenCLIPEncoder needs the optional package open_clip_torch") from exc
        model, _, preprocess = open_clip.create_model_and_transforms(model_name, pretrained=str(path))  # pragma: no cover
        size = model.visual.image_size  # pragma: no cover
        size = size[0] if isinstance(size, (tuple, list)) else size  # pragma: no cover
        mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)  # pragma: no cover
        std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)  # pragma: no cover

        def fn(x: torch.Tensor) -> torch.Tensor:  # pragma: no cover
            if x.shape[1] == 1:
                x = x.repeat(1, 3, 1, 1)
            x = torch.nn.functional.interpolate(x, size=(size, size), mode="bicubic", align_corners=False)
            return model.encode_image((x - mean) / std)

        dim = int(model.visual.output_dim)  # pragma: no cover
        super().__init__(fn, dim, f"open_clip {model_name}", module=model)  # pragma: no cover
