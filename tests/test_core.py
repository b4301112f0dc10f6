"""Aggregation, messages and the ledger, local training, seeds: hand-computed fixtures."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlib.aggregate import normalized_weights, weighted_average
from fedlib.io import atomic_write_text
from fedlib.messages import DOWN, UP, Ledger, Message, State
from fedlib.rng import derive_seed
from fedlib.training import TrainConfig, minibatches


def test_weighted_average_hand_computed():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([4.0, 8.0]), "n": torch.tensor(5)}
    out = weighted_average([a, b], [2, 1])  # (2*[1,2] + [4,8]) / 3 = [2, 4]
    assert torch.equal(out["w"], torch.tensor([2.0, 4.0]))
    assert int(out["n"]) == 5  # integer arrays (BatchNorm's num_batches_tracked) take the max


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.1, 100), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_weighted_average_matches_numpy(weights, seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(len(weights), 5))
    out = weighted_average([{"w": torch.tensor(v)} for v in values], weights)["w"].numpy()
    np.testing.assert_allclose(out, np.average(values, axis=0, weights=weights), rtol=1e-12, atol=1e-12)


def test_weighted_average_of_identical_arrays_is_exact():
    x = torch.randn(7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(weighted_average([{"w": x}] * 3, [1, 5, 9])["w"], x)


@pytest.mark.parametrize("weights", [[], [0, 0], [-1, 2], [1, float("nan")]])
def test_bad_weights_are_refused(weights):
    with pytest.raises(ValueError):
        normalized_weights(weights)


def test_mismatched_updates_are_refused():
    with pytest.raises(ValueError, match="update 1"):
        weighted_average([{"a": torch.zeros(1)}, {"b": torch.zeros(1)}], [1, 1])


def test_message_bytes_hand_computed():
    m = Message(arrays={"w": torch.zeros(3, 4), "i": torch.zeros(2, dtype=torch.int64)}, meta={"n": 5}, kind="x")
    # 12 float32 = 48 bytes, 2 int64 = 16 bytes, json '{"n": 5}' = 8 bytes
    assert m.nbytes() == 48 + 16 + 8
    assert State().nbytes() == 0


def test_ledger_totals():
    ledger = Ledger()
    ledger.record(1, 0, DOWN, Message(arrays={"w": torch.zeros(10)}, kind="model"))
    ledger.record(1, 0, UP, Message(arrays={"w": torch.zeros(5)}, kind="update"))
    ledger.record(2, 1, UP, Message(arrays={"w": torch.zeros(5)}, kind="update"))
    assert ledger.total() == 80 and ledger.total(UP) == 40 and ledger.total(DOWN) == 40
    assert ledger.totals("kind").to_dict() == {"model": 40, "update": 40}
    with pytest.raises(ValueError, match="sideways"):
        ledger.record(1, 0, "sideways", Message())


def test_nonfinite_detection():
    assert Message(arrays={"w": torch.tensor([1.0, float("inf")])}).nonfinite_array() == "w"
    assert Message(meta={"loss": float("nan")}).nonfinite_array() == "loss"
    assert Message(arrays={"w": torch.ones(2)}).nonfinite_array() is None


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
       values=st.lists(st.sampled_from([0.0, 1.5, -2.0, float("nan"), float("inf"), -float("inf")]), min_size=1, max_size=6),
       view=st.sampled_from(["plain", "neg", "transposed", "grad"]))
def test_nonfinite_detection_is_torch_isfinite(dtype, values, view):
    # numpy checks the CPU float16/32/64 arrays, torch the others (bfloat16): both name the array
    # torch.isfinite names, through a lazy negation, a non-contiguous view or a tensor with gradients
    t = torch.tensor(values, dtype=dtype).repeat(2, 1)
    t = {"plain": t, "neg": t.neg(), "transposed": t.T, "grad": t.clone().requires_grad_()}[view]
    expected = None if bool(torch.isfinite(t).all()) else "b"
    assert State({"a": torch.ones(3, dtype=dtype), "b": t, "i": torch.tensor([1, 2])}).nonfinite_array() == expected


def test_state_round_trips_through_dict():
    s = Message(arrays={"a": torch.ones(2)}, meta={"k": 1}, kind="z")
    back = Message.from_dict(s.to_dict())
    assert back.kind == "z" and back.meta == {"k": 1} and torch.equal(back.arrays["a"], s.arrays["a"])


@pytest.mark.parametrize(("cfg", "n", "expected"), [
    (TrainConfig(epochs=2, batch_size=4), 10, [4, 4, 2, 4, 4, 2]),
    (TrainConfig(steps=5, batch_size=4), 10, [4, 4, 2, 4, 4]),
    (TrainConfig(epochs=0), 10, []),
    (TrainConfig(epochs=3), 0, []),
])
def test_minibatch_schedule(cfg, n, expected):
    batches = list(minibatches(n, cfg, torch.Generator().manual_seed(0)))
    assert [len(b) for b in batches] == expected
    if cfg.steps is None and n and cfg.epochs:
        assert sorted(torch.cat(batches[: math.ceil(n / cfg.batch_size)]).tolist()) == list(range(n))


def test_derived_seeds_are_distinct_and_stable():
    seeds = {derive_seed(0, r, k, p) for r in range(5) for k in range(5) for p in range(3)}
    assert len(seeds) == 75
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3)


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    p = atomic_write_text(tmp_path / "a" / "b.txt", "hello")
    assert p.read_text() == "hello" and sorted(x.name for x in p.parent.iterdir()) == ["b.txt"]


def test_ledger_bytes_per_client_and_round_by_hand():
    from fedlib.messages import DOWN, UP, Ledger, Message

    ledger = Ledger()
    for r in (1, 2):
        for k in (0, 1, 2):
            ledger.record(r, k, DOWN, Message(arrays={"w": torch.zeros(4)}, kind="model"))  # 16 bytes
            if k < 2:  # client 2 never replies
                ledger.record(r, k, UP, Message(arrays={"w": torch.zeros(2)}, kind="update"))  # 8 bytes
    ledger.record(2, 0, DOWN, Message(arrays={"w": torch.zeros(8)}, kind="eval:model"))  # 32 bytes of evaluation
    assert ledger.per_client_and_round(UP) == 8.0  # 32 bytes over the 2 clients that replied, 2 rounds
    assert ledger.per_client_and_round(UP, n_clients=4) == 4.0  # over the federation's 4 clients
    assert ledger.per_client_and_round(DOWN) == 16.0  # training traffic only: the evaluation message is left out
    assert ledger.per_client_and_round(DOWN, phase="eval") == 32.0 and ledger.per_client_and_round(phase="all", rounds=2) == (48 + 16 + 32) / 3
    assert len(ledger.select(rounds=[1])) == 5 and len(ledger.select(UP, rounds=2)) == 2
    assert math.isnan(Ledger().per_client_and_round(UP))  # no message: no mean
    with pytest.raises(ValueError, match="unknown phase 'evaluation'; valid: all, train, eval"):
        ledger.select(phase="evaluation")
    with pytest.raises(ValueError, match="direction must be None, 'up' or 'down', got 'sideways'"):
        ledger.select("sideways")


def test_a_typed_state_flattens_to_a_state_and_back():
    """One function pair for every typed state: tensors, named arrays, nested and optional records,
    dicts by int key (of records, of scalars), lists of records; absent fields take their defaults,
    and the flattened state survives the file format of checkpoints and results unchanged."""
    from dataclasses import dataclass, field

    from fedlib.messages import from_state, to_state
    from fedlib.results import pack_states, unpack_states

    @dataclass
    class Inner:
        w: torch.Tensor
        note: str | None = None

    @dataclass
    class Row:
        round: int
        value: float | None

    @dataclass
    class Server:
        model: dict[str, torch.Tensor]
        by_client: dict[int, Inner] = field(default_factory=dict)
        counts: dict[int, float] = field(default_factory=dict)
        inner: Inner | None = None
        rows: list[Row] = field(default_factory=list)
        methods: list[str] = field(default_factory=list)

    globals().update(Inner=Inner, Row=Row)  # the type hints of a record defined here resolve in this module
    s = Server({"fc.weight": torch.ones(2)}, {3: Inner(torch.zeros(1), "x")}, {3: 2.0}, None, [Row(1, None)], ["a", "b"])
    state = to_state(s)
    assert list(state.arrays) == ["model/fc.weight", "by_client/3/w"]
    assert state.meta == {"by_client/3/note": "x", "counts/3": 2.0, "rows": [{"round": 1, "value": None}], "methods": ["a", "b"]}
    assert all(not isinstance(v, str) or v == "x" for v in state.meta.values())  # no structure encoded as a string
    back = from_state(Server, state)
    assert back.by_client[3].note == "x" and back.counts == {3: 2.0} and back.inner is None and back.rows == [Row(1, None)]
    assert torch.equal(back.model["fc.weight"], s.model["fc.weight"]) and torch.equal(back.by_client[3].w, torch.zeros(1))
    tensors, metas = pack_states({"server": state})
    import json

    again = unpack_states(tensors, json.loads(json.dumps(metas)))["server"]  # what a checkpoint stores and reads back
    assert again.meta == state.meta and from_state(Server, again).counts == {3: 2.0}
    assert from_state(Server, State(arrays={"model/w": torch.ones(1)})) == Server({"w": torch.ones(1)})
