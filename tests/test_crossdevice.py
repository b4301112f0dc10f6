"""Cross-device scale: aggregation over an iterable of replies, each folded and freed (the same bits
as the list), the client states on disk (the same results as in memory), evaluation on a seeded sample
of clients, power-law client sizes and clients with a single sample, and a 1,000-client round."""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import weakref

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedlib.aggregate import WeightedMean, weighted_average
from fedlib.algorithms import ALGORITHMS, Ditto, FedAvg, FedRep, make_algorithm
from fedlib.data import load_mnist5k, make_gaussian_mixture, powerlaw_partition, powerlaw_sizes
from fedlib.engines import InProcessTransport
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.run import run_federated
from fedlib.messages import State
from fedlib.models import build_model
from fedbook.benchmarks import RoundCost, keeping_replies, round_scaling
from fedlib.aggregate import model_average
from fedlib.store import DiskStates, make_states
from fedlib.training import TrainConfig

from test_algorithms import KWARGS

TRAIN = TrainConfig(epochs=1, batch_size=16, lr=0.05)


# --- the fold ------------------------------------------------------------------------------


def test_the_fold_by_hand_and_equal_to_the_list_bit_for_bit():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([4.0, 8.0]), "n": torch.tensor(5)}
    mean = WeightedMean()
    mean.add(a, 2)
    mean.add(b, 1)
    out = mean.finish()
    assert torch.equal(out["w"], torch.tensor([2.0, 4.0])) and out["w"].dtype == torch.float32
    assert int(out["n"]) == 5 and out["n"].dtype == torch.int64  # integer arrays: the maximum
    listed = weighted_average([a, b], [2, 1])
    assert all(torch.equal(listed[k], out[k]) for k in out)


@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=12).filter(lambda w: sum(w) > 0),
       st.integers(0, 2**16))
def test_the_fold_equals_the_list_and_numpy(weights, seed):
    rng = np.random.default_rng(seed)
    values = [rng.normal(size=(3, 2)).astype(np.float32) for _ in weights]
    mean = WeightedMean()
    for v, w in zip(values, weights):
        mean.add({"w": torch.tensor(v)}, w)
    folded = mean.finish()["w"]
    assert torch.equal(folded, weighted_average([{"w": torch.tensor(v)} for v in values], weights)["w"])
    expected = np.average(np.stack(values).astype(np.float64), axis=0, weights=weights)
    np.testing.assert_allclose(folded.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_the_fold_refuses_bad_weights_and_mismatched_replies():
    mean = WeightedMean()
    with pytest.raises(ValueError, match="need a non-empty list of weights, got \\[\\]"):
        mean.finish()
    with pytest.raises(ValueError, match="weights must be finite, >= 0"):
        mean.add({"w": torch.zeros(1)}, float("nan"))
    mean.add({"w": torch.zeros(1)}, 0.0)
    with pytest.raises(ValueError, match="weights must be finite, >= 0 and sum to > 0, got 1 weight\\(s\\) summing to 0.0"):
        mean.finish()
    with pytest.raises(ValueError, match=r"update 1 has arrays \['v'\] but update 0 has \['w'\]"):
        mean.add({"v": torch.zeros(1)}, 1.0)
    with pytest.raises(ValueError, match=r"update 1 has 'w' of shape \(3,\) and dtype torch.float32, but update 0 "
                                         r"has shape \(1,\)"):
        mean.add({"w": torch.zeros(3)}, 1.0)  # broadcasting would have hidden it
    with pytest.raises(ValueError, match=r"update 1 has 'w' of shape \(1,\) and dtype torch.int64"):
        mean.add({"w": torch.zeros(1, dtype=torch.int64)}, 1.0)


def _registered(name):
    return make_algorithm(name, **KWARGS[name])


def test_a_method_that_overrides_aggregate_runs_its_own_rule(tiny_federation, tiny_model_fn):
    class Halfway(FedAvg):  # its rule reads every reply at once
        def aggregate(self, server, replies, round_):
            avg = model_average(server, list(replies))
            return State({k: (v + server.arrays[k]) / 2 if v.is_floating_point() else v
                          for k, v in avg.arrays.items()}, dict(avg.meta))

    method = Halfway(train=TRAIN)
    cfg = LoopConfig(rounds=1, seed=0, evaluate_last=False)
    ours = run_federated(method, tiny_federation, tiny_model_fn, cfg)
    plain = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    start = method.init_server(InProcessTransport(tiny_federation, tiny_model_fn, 0).initial_model)
    for k, v in plain.server.arrays.items():  # halfway between the initial model and FedAvg's average
        if v.is_floating_point():
            torch.testing.assert_close(ours.server.arrays[k], (v + start.arrays[k]) / 2)


def test_the_loops_average_equals_an_independent_float64_average(tiny_federation, tiny_model_fn):
    replies = {}

    class Keep(InProcessTransport):
        def local_updates(self, algorithm, round_, messages, states):
            for k, state, up in super().local_updates(algorithm, round_, messages, states):
                replies[k] = ({n: t.clone() for n, t in up.arrays.items()}, up.meta["n_samples"])
                yield k, state, up

    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1, seed=0, evaluate_last=False),
                        transport=Keep(tiny_federation, tiny_model_fn, 0))
    weights = np.array([n for _, n in replies.values()], dtype=np.float64)
    for name, got in run.server.arrays.items():
        stacked = np.stack([a[name].numpy().astype(np.float64) for a, _ in replies.values()])
        expected = np.tensordot(weights / weights.sum(), stacked, axes=1)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(n for n, c in ALGORITHMS.items() if c.capabilities.streams))
def test_the_fold_and_the_list_give_the_same_run(name, tiny_federation, tiny_model_fn):
    folded = _registered(name)
    listed = keeping_replies(folded)  # the same rule, applied to the list of the round's replies
    assert folded.capabilities.streams and not listed.capabilities.streams
    cfg = LoopConfig(rounds=2, seed=3, participation=0.75)
    a = run_federated(folded, tiny_federation, tiny_model_fn, cfg)
    b = run_federated(listed, tiny_federation, tiny_model_fn, cfg)
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert a.server.arrays.keys() == b.server.arrays.keys()
    assert all(torch.equal(a.server.arrays[k], b.server.arrays[k]) for k in a.server.arrays)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_what_a_method_declares_of_its_replies_is_what_it_does(name, tiny_federation, tiny_model_fn):
    """A method that says it streams holds no earlier reply when the next one arrives; one that
    says it does not holds every one (so the registry's and the book's lists are true)."""
    alive: list[int] = []

    class Probe(InProcessTransport):
        def local_updates(self, algorithm, round_, messages, states):
            refs = []
            for k, state, up in super().local_updates(algorithm, round_, messages, states):
                gc.collect()
                alive.append(sum(r() is not None for r in refs))  # earlier replies (the Message objects) still alive
                refs.append(weakref.ref(up))
                yield k, state, up
                del up

    method = _registered(name)
    run_federated(method, tiny_federation, tiny_model_fn, LoopConfig(rounds=1, seed=0, evaluate_last=False),
                  transport=Probe(tiny_federation, tiny_model_fn, 0))
    n = tiny_federation.n_clients
    assert alive == ([0] * n if method.capabilities.streams else list(range(n))), alive


def test_a_folded_reply_is_freed_before_the_next_client_trains(tiny_federation, tiny_model_fn):
    seen: list[int] = []

    class Probe(InProcessTransport):
        def local_updates(self, algorithm, round_, messages, states):
            refs = []
            for k, state, up in super().local_updates(algorithm, round_, messages, states):
                gc.collect()
                seen.append(sum(r() is not None for r in refs))  # earlier replies still alive
                refs.append(weakref.ref(next(iter(up.arrays.values()))))
                yield k, state, up
                del up

    streamed, listed = FedAvg(train=TRAIN), keeping_replies(FedAvg(train=TRAIN))
    n = tiny_federation.n_clients
    for method, expected in ((streamed, [0] * n), (listed, list(range(n)))):
        seen.clear()
        run_federated(method, tiny_federation, tiny_model_fn, LoopConfig(rounds=1, seed=0, evaluate_last=False),
                      transport=Probe(tiny_federation, tiny_model_fn, 0))
        # streamed: no earlier reply is alive when the next one arrives; the list keeps every one
        assert seen == expected, method.capabilities.streams


# --- states on disk --------------------------------------------------------------------------


def test_disk_states_round_trip_and_refuse_a_used_folder(tmp_path):
    states = DiskStates(tmp_path / "s")
    states[2] = State(arrays={"head/w": torch.arange(3.0)}, meta={"n": 4, "name": "x"})
    states[5] = State()
    assert sorted(states) == [2, 5] and len(states) == 2 and states.files() == 1
    back = states[2]
    assert torch.equal(back.arrays["head/w"], torch.arange(3.0)) and back.meta == {"n": 4, "name": "x"}
    assert states[5] == State()
    states[2] = State()  # an emptied state leaves no file
    assert states.files() == 0
    states[2] = State(arrays={"w": torch.ones(1)})
    with pytest.raises(ValueError, match="already holds 1 client state file"):
        DiskStates(tmp_path / "s")
    assert len(DiskStates(tmp_path / "s", overwrite=True)) == 0
    with pytest.raises(KeyError):
        states[9]
    with pytest.raises(TypeError, match="a client state must be a State"):
        states[1] = {"w": 1}
    with pytest.raises(ValueError, match="unknown state store 'cloud'; valid: memory, disk"):
        make_states("cloud")
    with pytest.raises(ValueError, match="needs a folder"):
        make_states("disk")


def test_a_state_file_deleted_during_a_run_is_an_error_naming_the_client_never_an_empty_state(
        tiny_federation, tiny_model_fn, tmp_path):
    states = DiskStates(tmp_path / "s")
    states[2] = State(arrays={"w": torch.ones(2)})
    states[5] = State()  # never had a file: an empty state, as before
    (tmp_path / "s" / "client-2.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"client 2's state file client-2\.pt is missing from .*s"):
        states[2]
    assert states[5] == State()
    # the whole folder deleted in the middle of a Ditto run: the next round refuses instead of resetting the models
    import shutil

    folder = tmp_path / "run-states"

    def delete_after_round_1(r, server, client_states):
        if r == 1:
            shutil.rmtree(folder)

    options = RunOptions(states="disk", states_dir=str(folder), observe=delete_after_round_1)
    with pytest.raises(FileNotFoundError, match="state file client-.*is missing"):
        run_federated(Ditto(train=TRAIN, personal_train=TRAIN), tiny_federation, tiny_model_fn,
                      LoopConfig(rounds=3, seed=0), options)


@pytest.mark.parametrize("method", [Ditto(train=TRAIN, personal_train=TRAIN), FedRep(train=TRAIN, head_train=TRAIN)],
                         ids=["ditto", "fedrep"])
def test_the_disk_store_gives_the_results_of_memory(method, tiny_federation, tiny_model_fn, tmp_path):
    cfg = LoopConfig(rounds=3, seed=2, participation=0.5, eval_every=1)
    memory = run_federated(method, tiny_federation, tiny_model_fn, cfg)
    disk_options = RunOptions(states="disk", states_dir=str(tmp_path / "states"))
    disk = run_federated(method, tiny_federation, tiny_model_fn, cfg, disk_options)
    pd.testing.assert_frame_equal(memory.frame, disk.frame)
    assert all(torch.equal(memory.server.arrays[k], disk.server.arrays[k]) for k in memory.server.arrays)
    assert isinstance(disk.client_states, DiskStates) and disk.client_states.files() > 0
    for k, st_ in memory.client_states.items():
        assert st_.arrays.keys() == disk.client_states[k].arrays.keys()
        assert all(torch.equal(v, disk.client_states[k].arrays[n]) for n, v in st_.arrays.items())
    # stopped after round 1 and resumed with the disk store: the same run
    ckpt = tmp_path / "run.pt"
    resumed_options = dataclasses.replace(disk_options, states_dir=str(tmp_path / "states2"), checkpoint=str(ckpt))
    run_federated(method, tiny_federation, tiny_model_fn, cfg, resumed_options, stop_after=1)
    resumed = run_federated(method, tiny_federation, tiny_model_fn, cfg, resumed_options)
    pd.testing.assert_frame_equal(memory.frame, resumed.frame)


def test_the_configs_refuse_bad_store_and_sample_settings():
    with pytest.raises(ValueError, match="unknown states 'ram'; valid: memory, disk"):
        RunOptions(states="ram")
    with pytest.raises(ValueError, match="states='disk' needs states_dir"):
        RunOptions(states="disk")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="eval_clients must be None"):
            LoopConfig(eval_clients=bad)


# --- evaluation on a sample ----------------------------------------------------------------------


def test_evaluation_on_a_seeded_sample_of_clients(tiny_federation, tiny_model_fn):
    method = FedAvg(train=TRAIN)
    full = run_federated(method, tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0, eval_every=1))
    cfg = LoopConfig(rounds=2, seed=0, eval_every=1, eval_clients=2)
    sample = run_federated(method, tiny_federation, tiny_model_fn, cfg)
    again = run_federated(method, tiny_federation, tiny_model_fn, cfg)
    pd.testing.assert_frame_equal(sample.frame, again.frame)  # the same seed, the same sample
    for r in (1, 2):
        table = sample.per_client(r)
        assert len(table) == 2 and sample.evaluated(r) == 2
        # the sampled clients' numbers are the full evaluation's (training is unchanged)
        pd.testing.assert_frame_equal(table, full.per_client(r).loc[table.index])
    assert full.evaluated() is None
    # the sample's summary is the protocol computed on the sample
    assert sample.summary()["global"] == pytest.approx(full.per_client().loc[sample.per_client().index, "global"].mean())
    odd = run_federated(method, tiny_federation, tiny_model_fn,  # the last round trains but is not evaluated
                        LoopConfig(rounds=3, seed=0, eval_every=2, evaluate_last=False, eval_clients=2))
    assert odd.evaluated() == 2 and len(odd.per_client()) == 2 and odd.evaluated(2) == 2
    with pytest.raises(ValueError, match=r"no client evaluations in round 3; evaluated rounds: \[2\]"):
        odd.evaluated(3)
    everyone = run_federated(method, tiny_federation, tiny_model_fn, dataclasses.replace(cfg, eval_clients=99))
    pd.testing.assert_frame_equal(everyone.frame, full.frame)  # a sample as large as the federation is everyone


# --- cross-device partitions ------------------------------------------------------------------


def test_powerlaw_sizes_by_hand_and_their_checks():
    # weights 1, 1/2, 1/3, 1/4 (sum 25/12) of the 96 samples above min_size 1: 46.08, 23.04, 15.36, 11.52
    assert sorted(powerlaw_sizes(100, 4, exponent=1.0, min_size=1, seed=0).tolist()) == [13, 16, 24, 47]
    assert sorted(powerlaw_sizes(10, 5, exponent=0.0, min_size=1, seed=0).tolist()) == [2, 2, 2, 2, 2]
    sizes = powerlaw_sizes(5000, 1000, exponent=1.5, min_size=2, seed=1)
    assert sizes.sum() == 5000 and sizes.min() == 2 and sizes.max() > 100
    with pytest.raises(ValueError, match="more clients than samples: n_clients=1000 x min_size=6 = 6000 > n_samples=5000"):
        powerlaw_sizes(5000, 1000, min_size=6)
    for bad in (-1, float("inf"), "x", True):
        with pytest.raises(ValueError, match=f"exponent must be a finite number >= 0, got {bad!r}"):
            powerlaw_sizes(100, 4, exponent=bad)
    parts = powerlaw_partition(np.zeros(300, dtype=int), 40, exponent=1.2, seed=0)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(300))


def test_clients_with_a_single_sample_train_and_their_undefined_numbers_are_nan(tiny_model_fn):
    ds = make_gaussian_mixture(n_per_class=60, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    fed = make_federation(ds, n_clients=60, partition="powerlaw", exponent=1.5, global_test_per_class=10, seed=0)
    sizes = [len(c.train) + len(c.test) for c in fed.clients]
    assert min(sizes) == 1 and any(len(c.test) == 0 for c in fed.clients)
    run = run_federated(FedAvg(train=TRAIN), fed, tiny_model_fn, LoopConfig(rounds=1, seed=0))
    table = run.per_client()
    empty = [k for k, c in enumerate(fed.clients) if len(c.test) == 0]
    assert table.loc[empty, "local"].isna().all()  # no local test sample: local accuracy is undefined
    assert table["global"].notna().all() and math.isfinite(run.summary()["local"])


# --- a thousand clients -----------------------------------------------------------------------


def test_a_round_of_a_thousand_clients_with_the_mlp():
    data = load_mnist5k()
    fed = make_federation(data, n_clients=1000, partition="iid", global_test_per_class=10, seed=0)
    model_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=10, input_size=28)
    run = run_federated(FedAvg(train=TrainConfig(epochs=1, batch_size=32, lr=0.05)), fed, model_fn,
                        LoopConfig(rounds=1, seed=0, evaluate_last=False))
    ledger = run.ledger.to_frame()
    assert run.rounds_done == 1 and len(ledger) == 2000  # one model down, one update up per client
    assert all(bool(torch.isfinite(v).all()) for v in run.server.arrays.values() if v.is_floating_point())


def test_round_cost_measures_a_round_in_a_fresh_process_and_refuses_bad_input():
    from fedbook.benchmarks import round_cost

    fresh = round_cost(8, "mlp", "fold")
    here = round_cost(8, "mlp", "list", fresh_process=False)
    for c in (fresh, here):
        assert c.n_clients == 8 and c.data == "mnist5k" and c.seconds > 0 and c.peak_mib >= c.baseline_mib > 0
        assert c.n_parameters == sum(p.numel() for p in build_model("mlp", in_channels=1, n_classes=10,
                                                                       input_size=28).parameters())
    assert round_cost(3, "mlp", min_per_client=2000, fresh_process=False).data == "synthetic"
    with pytest.raises(ValueError, match="unknown model 'vit'; valid: mlp, cnn"):
        round_cost(5, "vit")
    with pytest.raises(ValueError, match="unknown aggregation 'median'; valid: fold, list"):
        round_cost(5, aggregation="median")
    with pytest.raises(ValueError, match="n_clients must be >= 1, got 0"):
        round_cost(0)


def test_round_scaling_reads_the_growth_of_one_model_from_the_fewest_to_the_most_clients():
    def cost(n, model, aggregation, peak, seconds):
        return RoundCost(n, model, aggregation, "mnist5k", 7 if model == "mlp" else 9, 50.0, peak, seconds)

    costs = [cost(20, "mlp", "fold", 100.0, 2.0), cost(20, "mlp", "list", 110.0, 2.0),
             cost(80, "mlp", "fold", 125.0, 4.0), cost(80, "mlp", "list", 200.0, 4.0),
             cost(5, "cnn", "fold", 1.0, 1.0), cost(500, "cnn", "fold", 1.0, 1.0)]  # another model: not read
    s = round_scaling(costs, "mlp")
    assert (s.model, s.small, s.large, s.n_parameters) == ("mlp", 20, 80, 7)
    assert s.fold_growth == pytest.approx(25.0) and s.list_growth == pytest.approx(100 * (200 / 110 - 1))
    assert s.time_ratio == pytest.approx((1000 * 4 / 80) / (1000 * 2 / 20))  # 50 ms against 100 ms per client
    assert s.kept_mib == pytest.approx((200 - 50) - (125 - 50))
    with pytest.raises(ValueError, match="no measurement of 'cnn' at 500 clients with the list"):
        round_scaling(costs, "cnn")
    with pytest.raises(ValueError, match="no measurement of 'vit'"):
        round_scaling(costs, "vit")
