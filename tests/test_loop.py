"""The one round loop: determinism, resume, sampling, events, non-finite updates, equivalences."""

from __future__ import annotations

import dataclasses
import re
import warnings

import pandas as pd
import pytest
import torch

from fedlib.algorithms import Ditto, FedAvg, FedAvgFT, make_algorithm
from fedlib.aggregate import model_average
from fedlib.protocol import Algorithm, Event, model_message
from fedlib.loop import DroppedClientsWarning, InvalidReplyError, LoopConfig, NonFiniteUpdateError, TooFewRepliesError
from fedlib.messages import largest_difference
from fedlib.results import RunResult, run_differences
from fedlib.run import RunOptions, evaluate_deployment, run_federated
from fedlib.messages import Message, State
from fedlib.rng import LOCAL_TRAIN, derive_seed, isolated_torch_rng, INIT
from fedlib.training import TrainConfig, local_train

TRAIN = TrainConfig(epochs=1, batch_size=8, lr=0.1)


def _same_state(a: State, b: State) -> bool:
    return a.arrays.keys() == b.arrays.keys() and all(torch.equal(a.arrays[k], b.arrays[k]) for k in a.arrays)


def test_same_seed_same_results_bit_for_bit(tiny_federation, tiny_model_fn):
    cfg = LoopConfig(rounds=3, seed=5, eval_every=1, participation=0.5)
    r1 = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    # the caller's global RNG state must not matter
    torch.manual_seed(1234)
    r2 = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    pd.testing.assert_frame_equal(r1.frame, r2.frame)
    assert _same_state(r1.server, r2.server)
    assert r1.ledger.records == r2.ledger.records


def test_different_seed_different_results(tiny_federation, tiny_model_fn):
    r1 = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0))
    r2 = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=1))
    assert not _same_state(r1.server, r2.server)


def test_resume_equals_uninterrupted(tiny_federation, tiny_model_fn, tmp_path):
    cfg = LoopConfig(rounds=5, seed=3, eval_every=2, participation=0.75, events=(Event(3, 1, "leave"),))
    ckpt = RunOptions(checkpoint=str(tmp_path / "run.pt"))
    full = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    part = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg, ckpt, stop_after=2)
    assert part.rounds_done == 2 and (tmp_path / "run.pt").exists()
    resumed = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg, ckpt)
    assert resumed.rounds_done == 5
    pd.testing.assert_frame_equal(full.frame, resumed.frame)
    assert _same_state(full.server, resumed.server)
    assert full.ledger.records == resumed.ledger.records


def test_checkpoint_of_another_run_is_refused(tiny_federation, tiny_model_fn, tmp_path):
    path = str(tmp_path / "run.pt")
    run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0), RunOptions(checkpoint=path),
                  stop_after=1)
    with pytest.raises(ValueError, match="different run"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=1), RunOptions(checkpoint=path))


def test_resume_with_other_hyper_parameters_is_refused_naming_them(tiny_federation, tiny_model_fn, tmp_path):
    from fedlib.algorithms.ditto import Ditto

    path = str(tmp_path / "run.pt")
    run_federated(Ditto(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0), RunOptions(checkpoint=path),
                  stop_after=1)
    other = TrainConfig(epochs=3, batch_size=TRAIN.batch_size, lr=0.5)
    with pytest.raises(ValueError, match=r"different run: configuration\.train\.epochs: saved 1, now 3; "
                                         r"configuration\.train\.lr: saved 0\.1, now 0\.5"):
        run_federated(Ditto(train=other), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0), RunOptions(checkpoint=path))


def test_resume_on_other_data_with_the_same_description_is_refused(tiny_federation, tiny_model_fn, tmp_path):
    import dataclasses

    path = str(tmp_path / "run.pt")
    run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0), RunOptions(checkpoint=path),
                  stop_after=1)
    c0 = tiny_federation.clients[0]
    flipped = dataclasses.replace(c0.train, y=c0.train.y.flip(0))  # the same sizes and description, other labels
    other = dataclasses.replace(tiny_federation, clients=[dataclasses.replace(c0, train=flipped), *tiny_federation.clients[1:]])
    assert other.description == tiny_federation.description and other.digest() != tiny_federation.digest()
    with pytest.raises(ValueError, match="different run: loop.data: saved"):
        run_federated(FedAvg(train=TRAIN), other, tiny_model_fn, LoopConfig(rounds=2, seed=0), RunOptions(checkpoint=path))


def test_a_bit_flipped_in_a_checkpoint_or_a_cut_or_keyless_one_is_refused(tiny_federation, tiny_model_fn, tmp_path):
    from fedlib.io import load_tensors_json, save_tensors_json

    path = tmp_path / "run.pt"
    args = (FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0))
    run_federated(*args, RunOptions(checkpoint=str(path)), stop_after=1)
    tensors, meta = load_tensors_json(path)
    name, t = next((k, v) for k, v in tensors.items() if v.numel() > 4)
    raw = bytearray(path.read_bytes())
    at = bytes(raw).find(t.contiguous().numpy().tobytes())
    assert at > 0
    raw[at + 1] ^= 0x04  # one bit of the tensor's data
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="fails its checksum"):
        run_federated(*args, RunOptions(checkpoint=str(path)))
    path.write_bytes(bytes(raw[: len(raw) // 2]))  # cut in half
    with pytest.raises(ValueError, match="not a readable fedlib state file"):
        run_federated(*args, RunOptions(checkpoint=str(path)))
    save_tensors_json(path, tensors, {k: v for k, v in meta.items() if k != "rows"})  # a well-formed file, a key gone
    with pytest.raises(ValueError, match=r"is not a run checkpoint \(it lacks \['rows'\]\)"):
        run_federated(*args, RunOptions(checkpoint=str(path)))


def test_checkpoint_saved_under_other_streams_is_refused(tiny_federation, tiny_model_fn, tmp_path, monkeypatch):
    import fedlib.loop

    path = str(tmp_path / "run.pt")
    monkeypatch.setattr(fedlib.loop, "STREAMS_VERSION", 1)  # a run saved before the streams were length-separated
    run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0), RunOptions(checkpoint=path),
                  stop_after=1)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="different run: streams: saved 1, now 2"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=0), RunOptions(checkpoint=path))


def test_one_client_full_participation_equals_centralized_training(tiny_federation, tiny_model_fn):
    """FedAvg with one client and one round is exactly local training on that client's data."""
    from fedlib.federation import Federation

    one = Federation([tiny_federation.clients[0]], tiny_federation.global_test, 3, {"one": 1})
    cfg = LoopConfig(rounds=1, seed=7)
    train = TrainConfig(epochs=3, batch_size=8, lr=0.1)
    run = run_federated(FedAvg(train=train), one, tiny_model_fn, cfg)
    with isolated_torch_rng(derive_seed(7, INIT)):
        model = tiny_model_fn()
    stream = derive_seed(7, 1, 0, LOCAL_TRAIN)
    with isolated_torch_rng(stream):
        data = one.clients[0].train
        local_train(model, data.x, data.y, train, torch.Generator().manual_seed(stream))
    for name, value in model.state_dict().items():
        assert torch.equal(run.server.arrays["model/" + name], value), name


def test_participation_samples_that_fraction(tiny_federation, tiny_model_fn):
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=4, participation=0.5))
    ups = run.ledger.to_frame().query("direction == 'up'")
    assert ups.groupby("round")["client"].nunique().tolist() == [2, 2, 2, 2]
    assert ups["client"].nunique() > 2  # different clients in different rounds


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_participation_outside_unit_interval_is_refused(bad):
    with pytest.raises(ValueError, match=str(bad)):
        LoopConfig(participation=bad)


def test_bad_config_values_name_the_value():
    with pytest.raises(ValueError, match="'ignore'.*raise, drop"):
        LoopConfig(on_nonfinite="ignore")
    with pytest.raises(ValueError, match="'joined'"):
        Event(2, 0, "joined")
    with pytest.raises(ValueError, match="unknown algorithm 'fedsgd'; valid: .*fedavg, fedavg_ft"):
        make_algorithm("fedsgd")


def test_event_naming_a_missing_client_is_refused(tiny_federation, tiny_model_fn):
    with pytest.raises(ValueError, match="client 9"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1, events=(Event(1, 9),)))


class _Recorder(FedAvg):
    """FedAvg that records which events the server was told about."""

    def on_event(self, server: State, event: Event) -> State:
        seen = str(server.meta.get("events", ""))
        return State(server.arrays, {**server.meta, "events": seen + f"{event.kind}{event.client}@{event.round};"})


def test_leave_and_join_events(tiny_federation, tiny_model_fn):
    events = (Event(2, 1, "leave"), Event(3, 2, "join"))
    run = run_federated(_Recorder(train=TRAIN), tiny_federation, tiny_model_fn,
                        LoopConfig(rounds=4, eval_every=1, events=events))
    ups = run.ledger.to_frame().query("direction == 'up'")
    per_round = ups.groupby("round")["client"].apply(set).to_dict()
    assert per_round[1] == {0, 1, 3} and per_round[2] == {0, 3} and per_round[3] == {0, 2, 3}
    evaluated = run.frame[run.frame["metric"] == "local"].groupby("round")["client"].apply(set).to_dict()
    assert evaluated[1] == {0, 1, 3} and evaluated[4] == {0, 2, 3}
    assert run.server.meta["events"] == "leave1@2;join2@3;"
    assert {"leave:1", "join:2"} <= set(run.frame["metric"])


class _Poisoned(Algorithm):
    """FedAvg whose client 1 sends NaN weights."""

    def __init__(self, train=TRAIN):
        self.fedavg = FedAvg(train=train)

    def local_update(self, ctx, state, message, data, generator):
        state, reply = self.fedavg.local_update(ctx, state, message, data, generator)
        if ctx.client == 1:
            reply.arrays = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in reply.arrays.items()}
        return state, reply


def test_nonfinite_update_stops_the_run_naming_client_and_round(tiny_federation, tiny_model_fn):
    with pytest.raises(NonFiniteUpdateError, match=r"client 1 .* round 1"):
        run_federated(_Poisoned(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2))


@pytest.mark.filterwarnings("ignore::fedlib.loop.DroppedClientsWarning")  # drops expected
def test_nonfinite_update_dropped_and_recorded_when_configured(tiny_federation, tiny_model_fn):
    run = run_federated(_Poisoned(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, on_nonfinite="drop"))
    drops = run.frame[run.frame["metric"] == "dropped_nonfinite"]
    assert drops["round"].tolist() == [1, 2] and drops["value"].tolist() == [1.0, 1.0]
    assert all(bool(torch.isfinite(v).all()) for v in run.server.arrays.values() if v.is_floating_point())


class _PoisonedPersonal(Algorithm):
    """Ditto whose client 1's personal model (its kept state) turns NaN; its reply stays finite."""

    def __init__(self):
        self.ditto = Ditto(train=TRAIN, personal_train=TRAIN)

    def __getattr__(self, name):
        return getattr(self.ditto, name)

    def local_update(self, ctx, state, message, data, generator):
        state, reply = self.ditto.local_update(ctx, state, message, data, generator)
        if ctx.client == 1 and ctx.round == 2:
            state.arrays = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in state.arrays.items()}
        return state, reply


@pytest.mark.filterwarnings("ignore::fedlib.loop.DroppedClientsWarning")  # drops expected
def test_a_dropped_client_keeps_its_state_and_is_never_scored_on_nan_weights(tiny_federation, tiny_model_fn):
    with pytest.raises(NonFiniteUpdateError, match=r"client 1 kept a non-finite value in .* round 2"):
        run_federated(_PoisonedPersonal(), tiny_federation, tiny_model_fn, LoopConfig(rounds=2))
    run = run_federated(_PoisonedPersonal(), tiny_federation, tiny_model_fn,
                        LoopConfig(rounds=2, eval_every=1, on_nonfinite="drop"))
    assert run.frame.loc[run.frame["metric"] == "dropped_nonfinite", ["round", "value"]].values.tolist() == [[2, 1.0]]
    st = run.client_states[1]
    assert st.arrays and all(bool(torch.isfinite(v).all()) for v in st.arrays.values() if v.is_floating_point())
    local = run.frame[(run.frame["metric"] == "local") & (run.frame["client"] == 1)].set_index("round")["value"]
    assert local[2] > 0.2  # evaluated on the finite state it kept from round 1, not on NaN weights (scored 0 %)


def test_server_receives_messages_only(tiny_federation, tiny_model_fn):
    from fedlib.engines import InProcessTransport

    class Leaky(InProcessTransport):  # hands the server a client's data in place of its reply
        def local_updates(self, algorithm, round_, messages, states):
            for k, state, _ in super().local_updates(algorithm, round_, messages, states):
                yield k, state, tiny_federation.clients[k]

    with pytest.raises(TypeError, match="the server receives Message objects only, got ClientData from client 0 in round 1"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1),
                      transport=Leaky(tiny_federation, tiny_model_fn, 0))


def test_ledger_counts_model_bytes(tiny_federation, tiny_model_fn):
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    model_bytes = sum(v.numel() * v.element_size() for v in tiny_model_fn().state_dict().values())
    ledger = run.ledger.to_frame()
    down = ledger.query("direction == 'down' and kind == 'model'")
    assert (down["bytes"] == model_bytes).all() and len(down) == 4
    up = ledger.query("direction == 'up'")
    assert (up["bytes"] > model_bytes).all()  # the model plus n_samples and train_loss metadata


def test_results_frame_is_tidy_and_round_trips(tiny_federation, tiny_model_fn, tmp_path):
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, eval_every=1))
    assert list(run.frame.columns) == ["round", "client", "metric", "value"]
    assert {"local", "pooled", "global", "unseen", "rare", "train_loss"} <= set(run.frame["metric"])
    back = RunResult.load(run.save(tmp_path / "res"))
    pd.testing.assert_frame_equal(run.frame, back.frame)
    assert back.ledger.records == run.ledger.records and _same_state(back.server, run.server)
    assert back.summary() == pytest.approx(run.summary(), nan_ok=True)


def test_finetuned_deployment_changes_predictions_not_training(tiny_federation, tiny_model_fn):
    cfg = LoopConfig(rounds=2)
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    ft = FedAvgFT(train=TRAIN, finetune=TrainConfig(epochs=5, batch_size=8, lr=0.1))
    ft_run = run_federated(ft, tiny_federation, tiny_model_fn, cfg)
    assert _same_state(run.server, ft_run.server)  # same training, only deploy differs
    frame = evaluate_deployment(ft, run, tiny_federation, tiny_model_fn, cfg)
    pd.testing.assert_frame_equal(frame, ft_run.frame[ft_run.frame["metric"] != "train_loss"].reset_index(drop=True))
    ft_local = frame[frame["metric"] == "local"].set_index("client")["value"]
    assert not ft_local.equals(run.per_client()["local"].rename("value"))
    assert "train_loss" not in run.per_client().columns
    with pytest.raises(ValueError, match="no client evaluations in round 1"):
        run.per_client(1)


def test_shared_global_predictions_change_no_number(tiny_federation, tiny_model_fn, monkeypatch):
    import fedlib.engines.inprocess as inprocess

    cfg = LoopConfig(rounds=2, eval_every=1)
    cached = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    monkeypatch.setattr(inprocess, "weights_key", lambda predictor: None)
    uncached = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    pd.testing.assert_frame_equal(cached.frame, uncached.frame)


def test_predictors_that_differ_only_in_a_scalar_attribute_are_not_shared():
    from fedlib.engines.inprocess import weights_key as _weights_key

    class Scaled(torch.nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.scale = scale

        def forward(self, x):
            return self.scale * self.lin(x)

    with isolated_torch_rng(0):
        a = Scaled(1.0)
    with isolated_torch_rng(0):
        b = Scaled(-1.0)
    with isolated_torch_rng(0):
        c = Scaled(1.0)
    assert _weights_key(a) != _weights_key(b) and _weights_key(a) == _weights_key(c)
    assert _weights_key(lambda x: x) is None


# ------------------------------------------------------------------------------------------------
# departed clients as data, safe files, the evaluation broadcast, a replaceable transport
# ------------------------------------------------------------------------------------------------
def test_departed_clients_are_data_and_survive_save_load_and_resume(tiny_federation, tiny_model_fn, tmp_path):
    cfg = LoopConfig(rounds=4, seed=2, eval_every=2, events=(Event(2, 3, "leave"), Event(3, 1, "leave")))
    ckpt = RunOptions(checkpoint=str(tmp_path / "ck.pt"))
    part = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg, ckpt, stop_after=2)
    assert part.departed == [3]
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg, ckpt)
    assert run.departed == [3, 1] and run.registered == [0, 2]
    back = RunResult.load(run.save(tmp_path / "res"))
    assert back.departed == [3, 1] and back.registered == [0, 2]
    assert _same_state(back.server, run.server) and back.server.meta == run.server.meta
    assert all(_same_state(back.client_states[k], run.client_states[k]) for k in run.client_states)
    pd.testing.assert_frame_equal(back.frame, run.frame)
    assert back.ledger.records == run.ledger.records and back.seconds == run.seconds
    # evaluate_deployment deploys on the registered clients only
    rows = evaluate_deployment(FedAvg(train=TRAIN), run, tiny_federation, tiny_model_fn)
    assert sorted(set(rows["client"])) == [0, 2]


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned > /dev/null",))


def _write_evil(path):
    import pickle

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        torch.save({"format": "fedlib-state-2", "tensors": {}, "json": "{}", "sha256": "", "x": _Evil()}, f)
    # torch.save pickled _Evil via __reduce__ (os.system): loading it unsafely would run the command
    assert b"system" in path.read_bytes()
    return pickle


def test_a_malicious_results_folder_is_refused(tiny_federation, tiny_model_fn, tmp_path, monkeypatch):
    import os

    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    folder = run.save(tmp_path / "shared")
    _write_evil(folder / "state.pt")
    _write_evil(tmp_path / "alone" / "state.pt")
    called = []
    monkeypatch.setattr(os, "system", lambda *a: called.append(a))
    with pytest.raises(ValueError, match="state.pt does not match the manifest"):
        RunResult.load(folder)  # the manifest refuses it first
    (folder / "manifest.json").unlink()
    with pytest.raises(ValueError, match="has no manifest.json"):
        RunResult.load(folder)
    # the state file read on its own: refused, nothing run
    with pytest.raises(ValueError, match="refusing to load .*state.pt"):
        _load_state_only(tmp_path / "alone")
    assert not called


def _load_state_only(folder):
    from fedlib.io import load_tensors_json

    return load_tensors_json(folder / "state.pt")


def test_a_results_folder_is_whole_or_refused_naming_the_file(tiny_federation, tiny_model_fn, tmp_path):
    import json

    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, eval_every=1))
    other = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, eval_every=1, seed=5))
    folder = run.save(tmp_path / "a")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["sha256"]) == {"frame.csv", "ledger.csv", "state.pt"} and manifest["rows"]["frame.csv"] == len(run.frame)
    pd.testing.assert_frame_equal(RunResult.load(folder).frame, run.frame)
    for name, cut in (("frame.csv", 7), ("ledger.csv", 4)):  # a file a few bytes short
        saved = (folder / name).read_bytes()
        (folder / name).write_bytes(saved[:-cut])
        with pytest.raises(ValueError, match=rf"{name} does not match the manifest of run {manifest['run_id']}"):
            RunResult.load(folder)
        (folder / name).write_bytes(saved)
    other.save(tmp_path / "b")  # another run's frame.csv beside this run's state.pt
    (folder / "frame.csv").write_bytes((tmp_path / "b" / "frame.csv").read_bytes())
    with pytest.raises(ValueError, match="frame.csv does not match the manifest .*another run"):
        RunResult.load(folder)
    run.save(folder)
    (folder / "ledger.csv").unlink()
    with pytest.raises(ValueError, match="ledger.csv is missing"):
        RunResult.check_folder(folder)
    run.save(folder)  # saved again: whole
    assert RunResult.load(folder).rounds_done == 2


def test_a_malicious_checkpoint_is_refused(tiny_federation, tiny_model_fn, tmp_path):
    path = tmp_path / "ck.pt"
    _write_evil(path)
    with pytest.raises(ValueError, match="refusing to load"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1), RunOptions(checkpoint=str(path)))


def test_a_state_file_of_another_format_is_refused(tmp_path):
    from fedlib.io import load_tensors_json

    torch.save({"w": torch.zeros(2)}, tmp_path / "plain.pt")
    with pytest.raises(ValueError, match="not a fedlib state file"):
        load_tensors_json(tmp_path / "plain.pt")


class _TaggedEval(FedAvg):
    """FedAvg whose evaluation messages carry a marker the deployment checks."""

    name = "tagged"

    def configure_evaluate(self, server, round_, clients):
        down = model_message(server)
        return dict.fromkeys(clients, Message(arrays=down.arrays, meta={"phase": "evaluation"}, kind="deploy"))

    def program(self, ctx, state, message, data):
        assert "phase" not in message.meta, "training received the evaluation message"
        return super().program(ctx, state, message, data)

    def deploy(self, ctx, state, message, data, generator):
        assert message.meta == {"phase": "evaluation"}, "deployment did not receive the evaluation broadcast"
        return super().deploy(ctx, state, message, data, generator)


def test_the_evaluation_message_is_a_hook(tiny_federation, tiny_model_fn):
    run = run_federated(_TaggedEval(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, eval_every=1))
    led = run.ledger.to_frame()
    assert set(led.loc[led["kind"].str.startswith("eval"), "kind"]) == {"eval:deploy"}
    plain = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, eval_every=1))
    pd.testing.assert_frame_equal(run.frame, plain.frame)  # same predictor, same numbers


def test_a_replacement_transport_carries_the_same_round(tiny_federation, tiny_model_fn):
    from fedlib.engines import InProcessTransport
    from fedlib.transport import Transport

    class Recording(Transport):
        """Delegates to the in-process transport and records what it carried."""

        def __init__(self, inner):
            self.inner, self.initial_model, self.carried = inner, inner.initial_model, []
            self.seed, self.n_clients, self.description = inner.seed, inner.n_clients, inner.description

        def local_updates(self, algorithm, round_, messages, states):
            self.carried.append((round_, "train", list(messages)))
            return self.inner.local_updates(algorithm, round_, messages, states)

        def evaluate(self, algorithm, round_, messages, states, **kw):
            self.carried.append((round_, "evaluate", list(messages)))
            return self.inner.evaluate(algorithm, round_, messages, states, **kw)

    cfg = LoopConfig(rounds=3, seed=4, eval_every=2, participation=0.5)
    transport = Recording(InProcessTransport(tiny_federation, tiny_model_fn, cfg.seed))
    via = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg, transport=transport)
    ref = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    pd.testing.assert_frame_equal(via.frame, ref.frame)
    assert _same_state(via.server, ref.server) and via.ledger.records == ref.ledger.records
    assert [c[:2] for c in transport.carried] == [(1, "train"), (2, "train"), (2, "evaluate"), (3, "train"), (3, "evaluate")]
    assert all(len(c[2]) == 2 for c in transport.carried if c[1] == "train")  # half of 4 clients


def test_server_time_is_measured_outside_the_server_state(tiny_federation, tiny_model_fn):
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=2))
    assert len(run.server_seconds) == 2 and all(s >= 0 for s in run.server_seconds)
    assert not any("second" in k or "time" in k for k in run.server.meta)


def test_every_random_stream_purpose_is_distinct():
    from fedlib import rng

    values = list(rng.PURPOSES.values())
    assert len(values) == len(set(values)), rng.PURPOSES
    assert {"SAMPLING", "LOCAL_TRAIN", "DEPLOY", "INIT", "GLOBAL_TEST", "PARTITION", "LOCAL_SPLIT", "CCVR_VIRTUAL"} <= set(rng.PURPOSES)


def test_one_transport_carries_several_runs_and_refuses_another_seed(tiny_federation, tiny_model_fn):
    from fedlib.engines import InProcessTransport

    cfg = LoopConfig(rounds=2, seed=3)
    transport = InProcessTransport(tiny_federation, tiny_model_fn, seed=3)
    first = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg, transport=transport)
    second = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg, transport=transport)
    assert _same_state(first.server, second.server)  # the clients trained in a copy: the initial model is intact
    with pytest.raises(ValueError, match="seed 3, but the run's seed is 4"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1, seed=4), transport=transport)
    from fedlib.federation import Federation

    two = Federation(tiny_federation.clients[:2], tiny_federation.global_test, 3, {"two": 2})
    with pytest.raises(ValueError, match="carries 4 clients, but the federation has 2"):
        run_federated(FedAvg(train=TRAIN), two, tiny_model_fn, cfg, transport=transport)


def test_a_client_that_leaves_and_joins_again_is_registered(tiny_federation, tiny_model_fn):
    cfg = LoopConfig(rounds=3, events=(Event(1, 2, "leave"), Event(3, 2, "join")))
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    assert run.departed == [] and run.registered == [0, 1, 2, 3]
    assert 2 in set(run.per_client().index)


def test_a_truncated_state_file_gets_a_clear_error(tiny_federation, tiny_model_fn, tmp_path):
    run = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    folder = run.save(tmp_path / "res")
    data = (folder / "state.pt").read_bytes()
    (folder / "state.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="state.pt does not match the manifest"):
        RunResult.load(folder)  # the manifest's digest sees it first
    with pytest.raises(ValueError, match="not a readable fedlib state file"):
        _load_state_only(folder)  # and the file read on its own says what it is


@pytest.mark.filterwarnings("ignore::fedlib.loop.DroppedClientsWarning")  # drops expected
def test_in_process_a_raising_client_is_dropped_when_asked(tiny_federation, tiny_model_fn):
    class Faulty(FedAvg):
        def program(self, ctx, state, message, data):
            if ctx.client == 3:
                raise OSError("sensor offline")
            return super().program(ctx, state, message, data)

    with pytest.raises(OSError, match="sensor offline"):
        run_federated(Faulty(), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    run = run_federated(Faulty(), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, on_failure="drop"))
    assert run.frame.loc[run.frame["metric"] == "dropped_failed", "value"].tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match="unknown on_failure 'retry'; valid: raise, drop"):
        LoopConfig(on_failure="retry")


def test_an_error_in_a_client_hook_names_the_client_and_round(tiny_federation, tiny_model_fn):
    class Broken(FedAvg):
        def program(self, ctx, state, message, data):
            if ctx.client == 2:
                raise ValueError("features must be finite")
            return super().program(ctx, state, message, data)

    with pytest.raises(ValueError, match="finite") as info:
        run_federated(Broken(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    assert "raised by client 2's local_update in round 1" in "\n".join(getattr(info.value, "__notes__", []))


def test_the_loop_equals_a_hand_written_fedavg_bit_for_bit(tiny_federation, tiny_model_fn):
    """The benchmark's reference (fedbook.benchmarks.hand_written_fedavg) does fedlib's arithmetic."""
    from fedlib.algorithms import FedAvg
    from fedbook.benchmarks import hand_written_fedavg
    from fedlib.training import TrainConfig

    cfg = TrainConfig(epochs=2, batch_size=8, lr=0.05, momentum=0.9)
    run = run_federated(FedAvg(train=cfg), tiny_federation, tiny_model_fn, LoopConfig(rounds=3, seed=2, evaluate_last=False))
    hand = hand_written_fedavg(tiny_federation, tiny_model_fn, cfg, 3, 2)
    assert set(run.server.with_prefix("model/")) == set(hand)
    assert all(torch.equal(run.server.arrays["model/" + k], v) for k, v in hand.items())


def test_two_runs_are_compared_bit_for_bit_and_every_difference_is_named(tiny_federation, tiny_model_fn):
    cfg = LoopConfig(rounds=2, seed=1, eval_every=1)
    a = run_federated(Ditto(train=TRAIN, personal_train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    b = run_federated(Ditto(train=TRAIN, personal_train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    assert run_differences(a, b) == [] and largest_difference(a.server.arrays, b.server.arrays) == 0.0
    name = next(k for k, v in b.server.arrays.items() if v.is_floating_point())
    b.server.arrays[name] = b.server.arrays[name] + 0.25  # a planted difference in one server array
    b.client_states[2] = State()  # a client state lost
    b.ledger.record(3, 0, "up", Message(kind="extra"))
    assert run_differences(a, b) == ["server", "client 2", "ledger"]
    assert largest_difference(a.server.arrays, b.server.arrays) == pytest.approx(0.25)
    b.server.arrays[name][0] = float("nan")  # a NaN where the other run has a number
    assert largest_difference(a.server.arrays, b.server.arrays) == float("inf")
    b.frame.loc[0, "value"] = -1.0
    assert "frame" in run_differences(a, b)


# ------------------------------------------------------------------------------------------------
# the contract's guards, kept predictions, the observer
# ------------------------------------------------------------------------------------------------
def test_a_method_named_like_a_hook_or_of_another_form_is_refused_when_defined():
    with pytest.raises(TypeError, match="Typo defines aggregation, which is not a hook of the method contract; did you "
                                        "mean aggregate\\?"):
        class Typo(Algorithm):
            def aggregation(self, server, replies, round_): ...
    with pytest.raises(TypeError, match="Plural defines local_updates, .*did you mean local_update\\?"):
        class Plural(Algorithm):
            def local_updates(self, ctx, state, message, data, generator): ...
    with pytest.raises(TypeError, match=r"Fold\.aggregate\(self, server, round_\) does not have the hook's form "
                                        r"aggregate\(self, server: 'State', replies"):
        class Fold(Algorithm):
            def aggregate(self, server, round_): ...
    with pytest.raises(TypeError, match="Stacked declares Capabilities\\(stacks=True\\), but only a ProgramMethod"):
        class Stacked(Algorithm):
            capabilities = dataclasses.replace(Algorithm.capabilities, stacks=True)

    class Grouping(Algorithm):  # a method of its own, named far from every hook, is the method's business
        def group(self, server, labels): ...


def test_hooks_that_return_the_wrong_kind_of_thing_are_named(tiny_federation, tiny_model_fn):
    class OneMessage(FedAvg):
        def configure_train(self, server, round_, clients):
            return model_message(server)  # one message, not one per client

    with pytest.raises(TypeError, match="configure_train returned Message in round 1; valid: a mapping client -> Message"):
        run_federated(OneMessage(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))

    class NoState(FedAvg):
        def aggregate(self, server, replies, round_):
            model_average(server, replies)  # computed, and not returned

    with pytest.raises(TypeError, match="NoState.aggregate returned NoneType in round 1; valid: the new server state"):
        run_federated(NoState(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))


def test_a_rule_that_stops_reading_the_replies_is_refused_once_every_reply_is_in(tiny_federation, tiny_model_fn):
    from fedlib.engines import InProcessTransport

    class FirstOnly(FedAvg):
        def aggregate(self, server, replies, round_):
            return model_average(server, [next(iter(replies))])

    transport = InProcessTransport(tiny_federation, tiny_model_fn, 0)
    with pytest.raises(RuntimeError, match="FirstOnly.aggregate returned in round 1 with 3 of the round's 4 replies unread "
                                           "\\(received and recorded, never aggregated\\)"):
        run_federated(FirstOnly(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1), transport=transport)


def test_a_second_pass_over_the_replies_is_refused_not_read_as_an_empty_round(tiny_federation, tiny_model_fn):
    class TwoPasses(FedAvg):
        def aggregate(self, server, replies, round_):
            weights = sum(float(m.meta["n_samples"]) for _, m in replies)  # the first pass reads every reply
            return model_average(server, replies) if weights else server  # the second would see none

    with pytest.raises(RuntimeError, match="the round's replies were already read to the end: aggregate reads them once"):
        run_federated(TwoPasses(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))


def test_the_server_time_is_the_servers_own_not_the_clients(tiny_federation, tiny_model_fn):
    import time

    from fedlib.engines import InProcessTransport

    class Slow(InProcessTransport):  # each client takes 0.1 s more, inside the iterator aggregate reads
        def local_updates(self, algorithm, round_, messages, states):
            for item in super().local_updates(algorithm, round_, messages, states):
                time.sleep(0.1)
                yield item

    for method in (FedAvg(train=TRAIN), make_algorithm("fedproto", train=TRAIN)):  # a fold, and a rule that reads the list
        run = run_federated(method, tiny_federation, tiny_model_fn, LoopConfig(rounds=1, evaluate_last=False),
                            transport=Slow(tiny_federation, tiny_model_fn, 0))
        assert run.seconds[0] > 0.4 and 0 <= run.server_seconds[0] < 0.1, (method.name, run.seconds, run.server_seconds)


def test_a_shared_message_is_changed_once_for_all_its_clients():
    from fedlib.protocol import map_messages

    calls = []
    shared, own = Message(kind="model"), Message(kind="own")
    out = map_messages({0: shared, 1: shared, 2: own, 3: shared}, lambda m: calls.append(m.kind) or Message(kind=m.kind + "!"))
    assert calls == ["model", "own"] and out[0] is out[1] is out[3] and out[2].kind == "own!"


def test_kept_predictions_score_to_the_runs_own_numbers(tiny_federation, tiny_model_fn):
    from fedlib.metrics import rescore

    cfg = LoopConfig(rounds=2, seed=2)
    run = run_federated(FedAvgFT(train=TRAIN), tiny_federation, tiny_model_fn, cfg, RunOptions(keep_predictions=True))
    assert sorted(run.predictions) == list(range(tiny_federation.n_clients))
    local, global_ = run.predictions[1]
    assert local.shape == (len(tiny_federation.clients[1].test),) and global_.shape == (len(tiny_federation.global_test),)
    pd.testing.assert_frame_equal(rescore(tiny_federation, run.predictions).sort_index(axis=1),
                                  run.per_client().sort_index(axis=1), check_names=False)
    plain = run_federated(FedAvgFT(train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    assert plain.predictions is None and plain.frame.equals(run.frame)  # keeping them changes no number
    kept = {}
    rows = evaluate_deployment(FedAvg(train=TRAIN), run, tiny_federation, tiny_model_fn, cfg, predictions=kept)
    assert sorted(kept) == sorted(run.registered) and len(rows)


def test_a_transport_that_cannot_keep_predictions_is_refused_before_any_round(tiny_federation, tiny_model_fn):
    from fedlib.engines import InProcessTransport

    class Remote(InProcessTransport):
        keeps_predictions = False

    with pytest.raises(ValueError, match="cannot return the clients' predictions"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1), RunOptions(keep_predictions=True),
                      transport=Remote(tiny_federation, tiny_model_fn, 0))


def test_the_engine_is_chosen_once(tiny_federation, tiny_model_fn):
    from fedlib.engines import InProcessTransport

    with pytest.raises(ValueError, match="choose the engine, but a transport \\(in-process\\) was given"):
        run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1), RunOptions(execution="vectorized"),
                      transport=InProcessTransport(tiny_federation, tiny_model_fn, 0))


def test_the_observer_sees_every_round_and_changes_nothing(tiny_federation, tiny_model_fn):
    seen = []
    cfg = LoopConfig(rounds=3, seed=1, participation=0.5)
    observed = run_federated(Ditto(train=TRAIN, personal_train=TRAIN), tiny_federation, tiny_model_fn, cfg,
                             RunOptions(observe=lambda r, server, states: seen.append((r, dict(server.arrays), len(states)))))
    plain = run_federated(Ditto(train=TRAIN, personal_train=TRAIN), tiny_federation, tiny_model_fn, cfg)
    assert [r for r, _, _ in seen] == [1, 2, 3] and all(n == tiny_federation.n_clients for _, _, n in seen)
    assert all(torch.equal(seen[-1][1][k], v) for k, v in observed.server.arrays.items())  # the last round's state
    assert run_differences(observed, plain) == []
    with pytest.raises(ValueError, match="observe must be None or a callable"):
        RunOptions(observe=3)


def test_a_transport_that_does_not_say_what_it_carries_is_refused(tiny_federation, tiny_model_fn):
    from fedlib.loop import run_rounds
    from fedlib.transport import Transport

    with pytest.raises(TypeError, match="lacks initial_model, seed, n_clients, description"):
        run_rounds(FedAvg(train=TRAIN), Transport(), LoopConfig(rounds=1))


class _Misshapen(Algorithm):
    """FedAvg whose clients of ``_bad`` (in rounds from ``_from``) change their reply by ``_how``:
    ``"rows"`` (the head's weight one row short), ``"float64"``, ``"extra"`` (an undeclared 1000-float
    array). The settings are private, so a healthy instance resumes a broken one's checkpoint."""

    def __init__(self, bad=(), how="rows", from_round=1):
        self.fedavg = FedAvg(train=TRAIN)
        self._bad, self._how, self._from = set(bad), how, from_round

    def local_update(self, ctx, state, message, data, generator):
        state, reply = self.fedavg.local_update(ctx, state, message, data, generator)
        if ctx.client in self._bad and ctx.round >= self._from:
            w = reply.arrays["model/head.weight"]
            if self._how == "rows":
                reply.arrays["model/head.weight"] = w[:-1].clone()
            elif self._how == "float64":
                reply.arrays["model/head.weight"] = w.double()
            else:
                reply.arrays["junk"] = torch.zeros(1000)
        return state, reply


def test_a_lone_misshapen_reply_never_becomes_the_server_state(tiny_federation, tiny_model_fn, tmp_path):
    """Participation 0.25 of 4 clients: one reply a round, nothing to compare it with but the server's
    model. Round 2's wrongly shaped reply stops the run naming its client and round; the checkpoint
    keeps round 1, from which a healthy run resumes bit for bit."""
    cfg = LoopConfig(rounds=3, seed=2, participation=0.25)
    ckpt = RunOptions(checkpoint=str(tmp_path / "run.pt"))
    with pytest.raises(InvalidReplyError, match=r"client \d's reply in round 2 has 'model/head.weight' of shape \(2, 8\) and "
                       r"dtype torch.float32, but the server's model has shape \(3, 8\) and dtype torch.float32; round 2 was "
                       r"not aggregated \(the server state and any checkpoint stay those of round 1\)"):
        run_federated(_Misshapen(bad=range(4), from_round=2), tiny_federation, tiny_model_fn, cfg, ckpt)
    resumed = run_federated(_Misshapen(), tiny_federation, tiny_model_fn, cfg, ckpt)
    full = run_federated(_Misshapen(), tiny_federation, tiny_model_fn, cfg)
    assert _same_state(full.server, resumed.server) and full.server.arrays["model/head.weight"].shape == (3, 8)
    pd.testing.assert_frame_equal(full.frame, resumed.frame)


@pytest.mark.parametrize("how, match", [
    ("rows", r"client 0's reply in round 1 has 'model/head.weight' of shape \(2, 8\)"),  # the first reply: client 0 blamed
    ("float64", r"client 0's reply in round 1 has 'model/head.weight' of shape \(3, 8\) and dtype torch.float64, but the "
                r"server's model has shape \(3, 8\) and dtype torch.float32"),
    ("extra", r"client 0's reply in round 1 holds array\(s\) \['junk'\] \(4000 bytes\) that the server's model does not "
              r"have and _Misshapen does not declare \(its Capabilities\(reply_arrays=...\): none\)"),
])
def test_a_reply_that_does_not_fit_the_model_names_its_client_and_round(tiny_federation, tiny_model_fn, how, match):
    with pytest.raises(InvalidReplyError, match=match):
        run_federated(_Misshapen(bad={0}, how=how), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))


class _Offline(FedAvg):
    """FedAvg whose clients of ``offline`` raise in rounds from ``from_round`` on."""

    def __init__(self, offline=(), from_round=1):
        super().__init__(train=TRAIN)
        self._offline, self._from = set(offline), from_round

    def program(self, ctx, state, message, data):
        if ctx.client in self._offline and ctx.round >= self._from:
            raise OSError(f"node {ctx.client} offline")
        return super().program(ctx, state, message, data)


@pytest.mark.filterwarnings("ignore::fedlib.loop.DroppedClientsWarning")  # drops expected
def test_a_round_that_dropped_every_client_fails_listing_them(tiny_federation, tiny_model_fn):
    cfg = LoopConfig(rounds=3, on_failure="drop")
    with pytest.raises(TooFewRepliesError, match=r"round 2 kept 0 of the 4 replies of the clients it trained, fewer than "
                       r"the 1 required \(LoopConfig\(min_replies=1, min_reply_share=0.0\)\); dropped: client 0: no reply "
                       r"\(local_update raised OSError: node 0 offline\); client 1: .*client 3: .*not aggregated"):
        run_federated(_Offline(range(4), from_round=2), tiny_federation, tiny_model_fn, cfg)
    # a share: 2 of 4 clients lost is within half, 3 is not
    half = dataclasses.replace(cfg, min_reply_share=0.5)
    run = run_federated(_Offline({1, 2}, from_round=2), tiny_federation, tiny_model_fn, half)
    assert run.dropped.values.tolist() == [[2, 1, "no reply"], [2, 2, "no reply"], [3, 1, "no reply"], [3, 2, "no reply"]]
    with pytest.raises(TooFewRepliesError, match="round 2 kept 1 of the 4 replies .* fewer than the 2 required"):
        run_federated(_Offline({0, 1, 2}, from_round=2), tiny_federation, tiny_model_fn, half)
    with pytest.raises(ValueError, match="min_reply_share"):
        LoopConfig(min_reply_share=1.5)


def test_dropped_clients_are_reported_when_the_run_ends(tiny_federation, tiny_model_fn, capsys):
    said = ("2 client replies dropped: round 1 client 3: no reply (local_update raised OSError: node 3 offline); round 2 "
            "client 3")
    with pytest.warns(DroppedClientsWarning, match=re.escape(said)):
        run = run_federated(_Offline({3}), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, on_failure="drop"),
                            RunOptions(progress=True))
    assert said in capsys.readouterr().out
    assert run.dropped["client"].tolist() == [3, 3]
    with pytest.warns(DroppedClientsWarning, match=re.escape(said)):  # a quiet run (no progress bar) says so too
        quiet = run_federated(_Offline({3}), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, on_failure="drop"))
    assert quiet.dropped.values.tolist() == run.dropped.values.tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DroppedClientsWarning)  # and a run that dropped no one says nothing
        healthy = run_federated(FedAvg(train=TRAIN), tiny_federation, tiny_model_fn, LoopConfig(rounds=1))
    assert healthy.dropped.empty
