"""Messages, client state and the communication ledger.

Everything that crosses between a client and the server is a :class:`Message`: named arrays plus
scalar metadata, with a ``kind`` (``"model"``, ``"update"``, ``"statistics"``, ...). A client's
persistent state (a personal head, prototypes, ...) is a :class:`State` of the same shape, so it is
explicit and serializable (``torch.save``) rather than hidden in long-lived objects. A method whose
server or client state has structure writes it as a dataclass and converts it with one pair of
functions, :func:`to_state` and :func:`from_state`, so that what the ledger, the checkpoints and
Flower's records carry is always a :class:`State`. Every message passes through a :class:`Ledger`
that records its size per round, client, direction and kind.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Union

import numpy as np
import pandas as pd
import torch

Scalar = Union[int, float, str, bool]

UP = "up"
DOWN = "down"
_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)
"""The floating dtypes :meth:`State.nonfinite_array` checks with numpy (bfloat16 has no numpy dtype)."""
PHASES = ("all", "train", "eval")
"""Which messages :meth:`Ledger.select` keeps: all, the training traffic, or the evaluation messages (kind ``eval:...``)."""


@dataclass
class State:
    """Named arrays plus metadata.

    Attributes
    ----------
    arrays : dict[str, torch.Tensor]
        Named tensors (e.g. ``"model/conv1.weight"``).
    meta : dict[str, int | float | str | bool | list | dict]
        JSON data: scalars (e.g. ``"n_samples"``), and lists or dicts of them, never a structure
        encoded as a string.
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
        """The name of the first floating array that holds a NaN or an infinity, else ``None``.

        A CPU array of a dtype numpy holds is checked by numpy (about a tenth of torch's time on a
        CNN's weights: the loop checks every reply and client state); any other by torch.

        >>> State({"a": torch.ones(2), "b": torch.tensor([1.0, float("nan")]), "c": torch.tensor([float("inf")])}).nonfinite_array()
        'b'
        >>> State({"n": torch.tensor([1, 2])}, {"x": float("inf")}).nonfinite_array()
        'x'
        """
        for name, t in self.arrays.items():
            if not t.is_floating_point():
                continue
            if t.device.type == "cpu" and t.dtype in _NUMPY_FLOATS and t.layout == torch.strided:
                if not np.isfinite(t.detach().resolve_conj().resolve_neg().numpy()).all():
                    return name
            elif not bool(torch.isfinite(t).all()):
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


def to_state(record) -> State:
    """A typed state (a dataclass) as a :class:`State`, by its fields' types: a tensor is the
    array named after its field; a nested dataclass, a ``dict`` keyed by ``int`` or ``str`` and a
    ``dict`` of tensors put their entries under ``<field>/<key>/`` (a ``state_dict``'s names keep
    their dots); anything else (numbers, strings, lists: JSON data) is metadata under its field's
    name, a list of dataclasses as a list of dicts. ``None`` and empty mappings are left out.
    :func:`from_state` reads it back.

    >>> @dataclass
    ... class Server:
    ...     model: dict[str, torch.Tensor]
    ...     counts: dict[int, float] = field(default_factory=dict)
    ...     layers: list[str] = field(default_factory=list)
    >>> state = to_state(Server({"fc.weight": torch.ones(1)}, {3: 2.0}, ["penultimate"]))
    >>> list(state.arrays), state.meta
    (['model/fc.weight'], {'counts/3': 2.0, 'layers': ['penultimate']})
    >>> from_state(Server, state) == Server({"fc.weight": torch.ones(1)}, {3: 2.0}, ["penultimate"])
    True
    """
    out = State()
    _put(record, "", out)
    return out


def from_state(cls: type, state: State):
    """The typed state of class ``cls`` (a dataclass) that :func:`to_state` flattened into
    ``state``; a field absent from ``state`` takes its default."""
    return _record(cls, state.arrays, state.meta)


_hints = functools.cache(typing.get_type_hints)


def _put(value, key: str, out: State) -> None:
    if value is None:
        return
    if isinstance(value, torch.Tensor):
        out.arrays[key] = value
    elif isinstance(value, dict) or dataclasses.is_dataclass(value):
        items = value.items() if isinstance(value, dict) else ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
        for k, v in items:
            _put(v, f"{key}/{k}" if key else str(k), out)
    elif isinstance(value, list) and any(dataclasses.is_dataclass(v) for v in value):
        out.meta[key] = [dataclasses.asdict(v) for v in value]
    else:
        out.meta[key] = value


def _split(named: Mapping) -> dict[str, dict]:
    """``{"a/b/c": v, "a": w}`` -> ``{"a": {"b/c": v, "": w}}``: names grouped by their first part."""
    out: dict[str, dict] = {}
    for name, v in named.items():
        head, _, rest = name.partition("/")
        out.setdefault(head, {})[rest] = v
    return out


def _record(cls: type, arrays: Mapping, meta: Mapping):
    """A dataclass ``cls`` from the arrays and metadata under its name (names relative to it)."""
    arrays, meta = _split(arrays), _split(meta)
    values = {f.name: _value(_hints(cls)[f.name], arrays.get(f.name, {}), meta.get(f.name, {}))
              for f in dataclasses.fields(cls)}
    return cls(**{name: v for name, v in values.items() if v is not None})


def _value(tp, arrays: dict, meta: dict):
    """A field of type ``tp`` from the arrays and metadata under its name (``""``: the name itself)."""
    if typing.get_origin(tp) in (Union, types.UnionType):  # X | None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if tp is torch.Tensor:
        return arrays.get("")
    if dataclasses.is_dataclass(tp):
        return _record(tp, arrays, meta) if arrays or meta else None
    args = typing.get_args(tp)
    if typing.get_origin(tp) is dict:
        if args[1] is torch.Tensor:  # named arrays: the rest of the name is the key (a state_dict's dotted names)
            return {args[0](k): v for k, v in arrays.items()}
        a, m = _split(arrays), _split(meta)
        return {args[0](k): _value(args[1], a.get(k, {}), m.get(k, {})) for k in dict.fromkeys([*a, *m])}
    value = meta.get("")
    if value is not None and typing.get_origin(tp) is list and args and dataclasses.is_dataclass(args[0]):
        return [args[0](**v) for v in value]
    return value


def prefixed(prefix: str, arrays: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{prefix + name: tensor}``: detached CPU copies, safe to send or store."""
    return {prefix + k: v.detach().cpu().clone() for k, v in arrays.items()}


def same_arrays(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Whether two sets of named arrays are the same bit for bit: the same names in the same
    order, dtypes, shapes and values (a NaN equal to a NaN).

    >>> same_arrays({"w": torch.tensor([1.0, float("nan")])}, {"w": torch.tensor([1.0, float("nan")])})
    True
    >>> same_arrays({"w": torch.zeros(2)}, {"w": torch.zeros(2, dtype=torch.float64)})
    False
    """
    if list(a) != list(b):
        return False
    for name, x in a.items():
        y = b[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.is_floating_point():
            if not (torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0))):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def largest_difference(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """The largest absolute difference between the arrays of ``a`` and those of the same names in
    ``b``, in float64: 0 when they agree bit for bit (a NaN equal to a NaN), ``inf`` where one
    holds a NaN the other does not, 1 where an integer array differs.

    Raises
    ------
    ValueError
        On a name of ``a`` that ``b`` lacks, or two arrays of different shapes.

    Examples
    --------
    >>> largest_difference({"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([1.5, 2.0]), "v": torch.zeros(1)})
    0.5
    >>> largest_difference({"w": torch.tensor([float("nan")])}, {"w": torch.tensor([0.0])})
    inf
    """
    missing = [k for k in a if k not in b]
    if missing:
        raise ValueError(f"largest_difference: the second set lacks {missing}; it has {sorted(b)}")
    worst = 0.0
    for name, x in a.items():
        y = b[name]
        if x.shape != y.shape:
            raise ValueError(f"largest_difference: {name!r} has shape {tuple(x.shape)} and {tuple(y.shape)}")
        if not x.numel():
            continue
        if x.is_floating_point() or y.is_floating_point():
            x64, y64 = x.detach().double(), y.detach().double()
            if not torch.equal(x64.isnan(), y64.isnan()):
                return math.inf
            worst = max(worst, float((x64 - y64).nan_to_num(0.0).abs().max()))
        else:
            worst = max(worst, float(not torch.equal(x, y)))
    return worst


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

    def select(self, direction: str | None = None, *, phase: str = "all", rounds=None) -> pd.DataFrame:
        """The rows of :meth:`to_frame` of one ``direction`` (``"up"``, ``"down"``, ``None``: both),
        one ``phase`` (``"train"``: the training traffic; ``"eval"``: the evaluation messages,
        whose kind starts with ``eval:``; ``"all"``) and some ``rounds`` (an int, a collection of
        ints, or ``None``: every round)."""
        if direction not in (None, UP, DOWN):
            raise ValueError(f"direction must be None, {UP!r} or {DOWN!r}, got {direction!r}")
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")
        frame = self.to_frame()
        keep = pd.Series(True, index=frame.index)
        if direction is not None:
            keep &= frame["direction"] == direction
        if phase != "all":
            keep &= frame["kind"].str.startswith("eval:") == (phase == "eval")
        if rounds is not None:
            keep &= frame["round"].isin([int(rounds)] if isinstance(rounds, (int, np.integer)) else [int(r) for r in rounds])
        return frame[keep]

    def per_client_and_round(self, direction: str | None = None, *, phase: str = "train", rounds=None,
                             n_clients: int | None = None, n_rounds: int | None = None) -> float:
        """Mean bytes per client and round of the messages :meth:`select` chooses: their total over
        ``n_clients`` × ``n_rounds`` (default: the clients and the rounds that appear among them).

        >>> ledger = Ledger()
        >>> for r in (1, 2):
        ...     for k in (0, 1):
        ...         _ = ledger.record(r, k, DOWN, Message(arrays={"w": torch.zeros(4)}, kind="model"))
        ...         _ = ledger.record(r, k, UP, Message(arrays={"w": torch.zeros(2)}, kind="update"))
        >>> ledger.per_client_and_round(UP), ledger.per_client_and_round()  # 8 bytes up, 16 + 8 both ways
        (8.0, 24.0)
        >>> ledger.per_client_and_round(DOWN, n_clients=4)  # 4 clients in the federation, 2 rounds
        8.0
        """
        rows = self.select(direction, phase=phase, rounds=rounds)
        clients = rows["client"].nunique() if n_clients is None else int(n_clients)
        count = rows["round"].nunique() if n_rounds is None else int(n_rounds)
        if clients * count == 0:
            return math.nan
        return float(rows["bytes"].sum() / (clients * count))

    def __len__(self) -> int:
        return len(self._records)
