"""Files: atomic writes (a file is either the old version or the complete new one, never half
written) and a state format that is safe to open (tensors plus JSON metadata, read with
``torch.load(weights_only=True)``)."""

from __future__ import annotations

import contextlib
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


def save_tensors_json(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], meta: Any) -> Path:
    """Write named tensors plus JSON metadata to one file, atomically, in a format that
    :func:`load_tensors_json` reads with ``torch.load(weights_only=True)``: a dict of tensors and
    one JSON string (numbers, strings, lists, dicts; NaN and infinities allowed).

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
    buffer = io.BytesIO()
    torch.save({"format": _FORMAT, "tensors": {k: v.detach().cpu() for k, v in tensors.items()}, "json": text}, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def load_tensors_json(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], Any]:
    """Read what :func:`save_tensors_json` wrote. The file is opened with
    ``torch.load(weights_only=True)``, which unpickles tensors, numbers, strings and containers
    only: a file that holds anything else (a crafted pickle that would run code, an object of
    another program) is refused with a ``ValueError`` and nothing in it is executed."""
    path = Path(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
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
            and isinstance(obj.get("json"), str)):
        raise ValueError(f"{path} is not a fedlib state file (format {_FORMAT!r}); was it written by an older fedlib?")
    return obj["tensors"], json.loads(obj["json"])


_FORMAT = "fedlib-state-1"


def json_default(v: Any) -> Any:
    """``json.dumps(..., default=json_default)``: numpy scalars as Python numbers; anything else
    that JSON cannot hold is a ``TypeError`` naming it."""
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"cannot store {v!r} ({type(v).__name__}) as JSON metadata; use numbers, strings, lists or dicts")
