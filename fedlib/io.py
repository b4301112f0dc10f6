"""Files: atomic writes (a file is either the old version or the complete new one, never half
written) and a state format that is safe to open (tensors plus JSON metadata, read with
``torch.load(weights_only=True)``)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _digest(tensors: Mapping[str, torch.Tensor], text: str) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes (in name order) and the JSON text."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    h.update(text.encode())
    return h.hexdigest()


def save_tensors_json(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], meta: Any) -> Path:
    """Write named tensors plus JSON metadata to one file, atomically, in a format that
    :func:`load_tensors_json` reads with ``torch.load(weights_only=True)``: a dict of tensors,
    one JSON string (numbers, strings, lists, dicts; NaN and infinities allowed) and a SHA-256
    checksum of both, which the reader verifies (a bit flipped inside a saved tensor is refused).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.pt"
    >>> _ = save_tensors_json(path, {"w": torch.ones(2)}, {"round": 3})
    >>> tensors, meta = load_tensors_json(path)
    >>> tensors["w"].tolist(), meta
    ([1.0, 1.0], {'round': 3})
    """
    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"save_tensors_json stores tensors only; not tensors: {bad}")
    text = json.dumps(meta, sort_keys=True, default=json_default)
    cpu = {k: v.detach().cpu() for k, v in tensors.items()}
    buffer = io.BytesIO()
    torch.save({"format": _FORMAT, "tensors": cpu, "json": text, "sha256": _digest(cpu, text)}, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def load_tensors_json(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], Any]:
    """Read what :func:`save_tensors_json` wrote. The file is opened with
    ``torch.load(weights_only=True)``, which unpickles tensors, numbers, strings and containers
    only: a file that holds anything else (a crafted pickle that would run code, an object of
    another program) is refused with a ``ValueError`` and nothing in it is executed; so is a file
    whose checksum does not match its content (corrupted or changed after it was written: the
    checksum has no key, so it finds accidents and careless edits, not a forger who rewrites it)."""
    path = Path(path)
    return load_tensors_json_bytes(path.read_bytes(), path)


def load_tensors_json_bytes(data: bytes, path: str | os.PathLike = "<bytes>") -> tuple[dict[str, torch.Tensor], Any]:
    """:func:`load_tensors_json` of a file's bytes already read (``path`` names it in errors): a
    caller that checked the bytes' digest parses the very bytes it checked."""
    path = Path(path)
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise ValueError(f"{path} is not a readable fedlib state file (truncated or corrupt?): {str(err).splitlines()[0]}") from None
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"refusing to load {path}: it holds objects other than tensors, numbers and strings "
            f"(fedlib's state files hold nothing else; a file that needs more may run code when opened). "
            f"Detail: {str(err).splitlines()[0]}"
        ) from None
    if not (isinstance(obj, dict) and obj.get("format") == _FORMAT and isinstance(obj.get("tensors"), dict)
            and isinstance(obj.get("json"), str) and isinstance(obj.get("sha256"), str)):
        raise ValueError(f"{path} is not a fedlib state file (format {_FORMAT!r}); was it written by an older fedlib?")
    bad = [k for k, v in obj["tensors"].items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f"{path} is not a fedlib state file: entries {bad} are not tensors")
    if _digest(obj["tensors"], obj["json"]) != obj["sha256"]:
        raise ValueError(f"{path} fails its checksum (SHA-256 of its tensors and metadata): the file was changed or "
                         "corrupted after it was written; refusing to load it")
    return obj["tensors"], json.loads(obj["json"])


_FORMAT = "fedlib-state-2"  # 2: with a SHA-256 checksum of the tensors and the metadata


def json_default(v: Any) -> Any:
    """``json.dumps(..., default=json_default)``: numpy scalars as Python numbers; anything else
    that JSON cannot hold is a ``TypeError`` naming it."""
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"cannot store {v!r} ({type(v).__name__}) as JSON metadata; use numbers, strings, lists or dicts")
