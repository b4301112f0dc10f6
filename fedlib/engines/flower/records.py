"""fedlib's messages and states as Flower's records, losslessly.

A :class:`~fedlib.messages.Message` or :class:`~fedlib.messages.State` travels in a Flower
``RecordDict`` as three records under a slot name: ``<slot>.arrays`` (an ``ArrayRecord``: every
tensor as a NumPy array, dtype and shape kept), ``<slot>.meta`` (a ``ConfigRecord`` of the
metadata) and ``<slot>.info`` (the orders of both, which metadata travel as JSON text and, for a
message, its kind). :func:`take_state` gives back the same class, names, dtypes, shapes, values,
metadata types and orders (a tuple comes back as a list, as from a checkpoint: fedlib's metadata
is JSON); a value Flower cannot carry is refused by name (:class:`FlowerConversionError`).

This module sits below the round loop: it imports :mod:`fedlib.messages` and Flower's record
types only.

Examples
--------
>>> import torch
>>> from fedlib.messages import Message
>>> m = Message(arrays={"w": torch.ones(2, 3)}, meta={"n": 7, "layers": ["fc"]}, kind="update")
>>> back = records_to_message(message_to_records(m))
>>> back.kind, back.meta, torch.equal(back.arrays["w"], m.arrays["w"])
('update', {'n': 7, 'layers': ['fc']}, True)
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from flwr.app import Array, ArrayRecord, ConfigRecord, Message as FlowerMessage, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from ...messages import Message, State

CTL = "fedlib.ctl"
"""The record of a Flower message that says what it is for (round, client, job, key orders)."""

_SCALARS = (bool, int, float, str)


class FlowerConversionError(TypeError):
    """A fedlib message holds something Flower's records cannot carry losslessly."""


def _array(name: str, t: Any) -> Array:
    if not isinstance(t, torch.Tensor):
        raise FlowerConversionError(f"array {name!r} is a {type(t).__name__}; a message's arrays must be torch tensors")
    try:
        a = t.detach().cpu().resolve_conj().resolve_neg().numpy()
    except (TypeError, RuntimeError) as err:
        raise FlowerConversionError(
            f"array {name!r} has dtype {t.dtype}, which Flower's arrays (NumPy .npy) cannot carry; valid: the dtypes "
            "NumPy has (float16/32/64, complex, int8..int64, uint8, bool)") from err
    return Array(a if a.flags.c_contiguous else a.copy(order="C"))  # (np.ascontiguousarray would make a 0-d array 1-d)


def _scalar(name: str, v: Any) -> tuple[Any, bool]:
    """A metadata value as Flower's records carry it, and whether it travels as JSON text (a
    list or dict: fedlib's metadata is JSON, so a tuple comes back as a list, as from a checkpoint)."""
    if isinstance(v, np.generic) and isinstance(v.item(), _SCALARS):
        v = v.item()  # a NumPy scalar travels as the Python number of the same value
    if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**63:
        raise FlowerConversionError(f"metadata {name!r} = {v} does not fit Flower's 64-bit integers")
    if isinstance(v, _SCALARS):
        return v, False
    if isinstance(v, (list, tuple, dict)):
        try:
            return json.dumps(v, allow_nan=True), True
        except TypeError:
            pass
    raise FlowerConversionError(
        f"metadata {name!r} is a {type(v).__name__} ({v!r}); valid metadata values: bool, int, float, str, and "
        "lists or dicts of them (JSON)")


def put_state(content: RecordDict, slot: str, state: State) -> None:
    """Write ``state`` (a :class:`~fedlib.messages.State` or :class:`~fedlib.messages.Message`)
    into ``content`` as records ``<slot>.arrays`` (an ``ArrayRecord``) and ``<slot>.meta`` (a
    ``ConfigRecord`` of the metadata, the orders of both and, for a message, its kind)."""
    arrays = {str(k): _array(k, t) for k, t in state.arrays.items()}
    converted = {str(k): _scalar(k, v) for k, v in state.meta.items()}
    meta = {k: v for k, (v, _) in converted.items()}
    info: dict[str, Any] = {"arrays": list(arrays), "meta": list(meta), "message": isinstance(state, Message),
                            "json": [k for k, (_, as_json) in converted.items() if as_json]}
    if isinstance(state, Message):
        info["kind"] = state.kind
    content[f"{slot}.arrays"] = ArrayRecord(arrays)
    content[f"{slot}.meta"] = ConfigRecord(meta)
    content[f"{slot}.info"] = ConfigRecord({"json": json.dumps(info)})


def take_state(content: RecordDict, slot: str) -> State:
    """What :func:`put_state` wrote into ``content`` under ``slot``: the same class, array names,
    dtypes, shapes and values, metadata types and values, and orders."""
    info = json.loads(content[f"{slot}.info"]["json"])
    records, meta = content[f"{slot}.arrays"], content[f"{slot}.meta"]
    arrays = {k: torch.from_numpy(np.array(records[k].numpy(), copy=True)) for k in info["arrays"]}
    values = {k: meta[k] for k in info["meta"]}
    for k in info["json"]:
        values[k] = json.loads(values[k])
    if info["message"]:
        return Message(arrays=arrays, meta=values, kind=str(info["kind"]))
    return State(arrays=arrays, meta=values)


def has_state(content: RecordDict, slot: str) -> bool:
    """Whether ``content`` holds a state or message written under ``slot``."""
    return f"{slot}.info" in content


def message_to_records(message: State) -> RecordDict:
    """A fedlib :class:`~fedlib.messages.Message` (or :class:`~fedlib.messages.State`) as a
    Flower ``RecordDict`` (slot ``"fedlib"``); :func:`records_to_message` gives it back exactly.
    Raises :class:`FlowerConversionError` naming an array or metadata entry that cannot travel."""
    content = RecordDict()
    put_state(content, "fedlib", message)
    return content


def records_to_message(content: RecordDict) -> State:
    """The inverse of :func:`message_to_records`."""
    return take_state(content, "fedlib")


def flower_bytes(message: FlowerMessage | RecordDict) -> int:
    """The bytes of a Flower message (or record dict) as Flower serializes it: the deflated
    objects of its tree, each once (Flower sends an object shared by two records once)."""
    return int(sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values()))


__all__ = ["CTL", "FlowerConversionError", "flower_bytes", "has_state", "message_to_records", "put_state",
           "records_to_message", "take_state"]
