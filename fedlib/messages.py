"""Messages, client state and the communication ledger.

Everything that crosses between a client and the server is a :class:`Message`: named arrays plus
scalar metadata, with a ``kind`` (``"model"``, ``"update"``, ``"statistics"``, ...). A client's
persistent state (a personal head, prototypes, ...) is a :class:`State` of the same shape, so it is
explicit and serializable (``torch.save``) rather than hidden in long-lived objects. Every message
passes through a :class:`Ledger` that records its size per round, client, direction and kind.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Union

import pandas as pd
import torch

Scalar = Union[int, float, str, bool]

UP = "up"
DOWN = "down"


@dataclass
class State:
    """Named arrays plus scalar metadata.

    Attributes
    ----------
    arrays : dict[str, torch.Tensor]
        Named tensors (e.g. ``"model/conv1.weight"``).
    meta : dict[str, int | float | str | bool]
        Scalars (e.g. ``"n_samples"``).
    """

    arrays: dict[str, torch.Tensor] = field(default_factory=dict)
    meta: dict[str, Scalar] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Bytes on the wire: the arrays' raw bytes plus the JSON-encoded metadata."""
        arrays = sum(t.numel() * t.element_size() for t in self.arrays.values())
        meta = len(json.dumps(self.meta, sort_keys=True).encode()) if self.meta else 0
        return int(arrays + meta)

    def with_prefix(self, prefix: str) -> dict[str, torch.Tensor]:
        """The arrays whose name starts with ``prefix``, with the prefix removed."""
        n = len(prefix)
        return {k[n:]: v for k, v in self.arrays.items() if k.startswith(prefix)}

    def nonfinite_array(self) -> str | None:
        """The name of the first floating array that holds a NaN or an infinity, else ``None``."""
        for name, t in self.arrays.items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                return name
        for name, v in self.meta.items():
            if isinstance(v, float) and not math.isfinite(v):
                return name
        return None

    def to_dict(self) -> dict:
        """A plain dict for ``torch.save``."""
        return {"arrays": dict(self.arrays), "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "State":
        return cls(arrays=dict(d["arrays"]), meta=dict(d["meta"]))


@dataclass
class Message(State):
    """A :class:`State` in transit, with the ``kind`` recorded by the ledger."""

    kind: str = "message"

    def to_dict(self) -> dict:
        return {**super().to_dict(), "kind": self.kind}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Message":
        return cls(arrays=dict(d["arrays"]), meta=dict(d["meta"]), kind=str(d["kind"]))


def prefixed(prefix: str, arrays: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{prefix + name: tensor}``: detached CPU copies, safe to send or store."""
    return {prefix + k: v.detach().cpu().clone() for k, v in arrays.items()}


class Ledger:
    """Records every message's size: per round, client, direction (``up``/``down``) and kind.

    >>> ledger = Ledger()
    >>> ledger.record(0, 3, DOWN, Message(arrays={"w": torch.zeros(4)}, kind="model"))
    16
    >>> int(ledger.to_frame()["bytes"].sum())
    16
    """

    columns = ("round", "client", "direction", "kind", "bytes")

    def __init__(self, records: Iterable[tuple] = ()) -> None:
        self._records: list[tuple[int, int, str, str, int]] = [tuple(r) for r in records]

    def record(self, round_: int, client: int, direction: str, message: Message) -> int:
        """Record one message and return its size in bytes."""
        if direction not in (UP, DOWN):
            raise ValueError(f"direction must be {UP!r} or {DOWN!r}, got {direction!r}")
        size = message.nbytes()
        self._records.append((int(round_), int(client), direction, message.kind, size))
        return size

    @property
    def records(self) -> list[tuple[int, int, str, str, int]]:
        return list(self._records)

    def to_frame(self) -> pd.DataFrame:
        """One row per message: ``round, client, direction, kind, bytes``."""
        return pd.DataFrame(self._records, columns=list(self.columns))

    def totals(self, by: str | list[str] = "direction") -> pd.Series:
        """Bytes summed by one or more of the columns."""
        frame = self.to_frame()
        return frame.groupby(by)["bytes"].sum()

    def total(self, direction: str | None = None) -> int:
        """Total bytes, optionally in one direction."""
        return int(sum(r[4] for r in self._records if direction is None or r[2] == direction))

    def __len__(self) -> int:
        return len(self._records)
