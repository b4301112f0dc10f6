"""fedlib on Flower (fedlib.engines.flower): lossless records, the loopback grid, the simulation
and deployment engines against the in-process loop, failures and bad input.

The engine tests (simulation: Ray; deployment: a SuperLink and SuperNodes as processes) run a
small job each; together they take under three minutes and leave no process running.
"""

from __future__ import annotations

import json
import math
import re
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from flwr.app import Context, Message as FlowerMessage, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.serde import message_from_proto, message_to_proto

import fedlib.engines.flower as flower
from fedlib.algorithms import ALGORITHMS
from fedlib.transport import Transport
from fedlib.engines.flower import (
    Call, FlowerConversionError, FlowerJob, FlowerSetupError, LocalDeployment, LoopbackGrid, free_port_block,
    flower_bytes, make_client_app, make_server_app, message_to_records, records_to_message, run_flower,
)
from fedlib.engines.flower.apps import SERVERAPP_ERROR
from fedlib.engines.flower.deployment import _APP_TOML, _task_identity, failure_report, port_free
from fedlib.engines.flower.watchdog import MARKER_VARIABLE, marked_pids
from fedlib.engines.flower.job import ALLOW_ENV, allowed_targets
from fedlib.engines.inprocess import InProcessTransport
from fedlib.loop import ClientFailedError, LoopConfig, TooFewRepliesError
from fedlib.results import run_differences
from fedlib.messages import same_arrays
from fedlib.run import run_federated
from fedlib.messages import Message, State
from fedlib.protocol import Event
from test_algorithms import KWARGS

# ---- a tiny job, in JSON: the test suite's 3-class, 16-feature mixture over 4 clients
FED = {"call": "fedlib.federation:make_federation", "kwargs": {
    "dataset": {"call": "fedlib.data:load_dataset", "kwargs": {
        "name": "gaussian_mixture", "n_per_class": 60, "n_classes": 3, "dim": 16, "separation": 4.0, "seed": 0}},
    "n_clients": 4, "partition": "dirichlet", "alpha": 0.5, "min_size": 8, "global_test_per_class": 10, "seed": 0}}
MODEL = {"call": "fedlib.models:build_model",
         "kwargs": {"name": "mlp", "in_channels": 1, "n_classes": 3, "input_size": 4, "hidden": [16, 8]}}
TRAIN = {"call": "fedlib.training:TrainConfig", "kwargs": {"epochs": 1, "batch_size": 16, "lr": 0.05}}
ADAM = {"call": "fedlib.training:TrainConfig", "kwargs": {"epochs": 1, "batch_size": 16, "optimizer": "adam", "lr": 1e-2}}
PUBLIC = {"call": "test_flower:public_set", "kwargs": {}}
SERVER = {"partial": "fedlib.models:build_model",
          "kwargs": {"name": "mlp", "in_channels": 1, "n_classes": 3, "input_size": 4, "hidden": [8]}}

# every registered method's arguments as JSON (test_algorithms.KWARGS, written as data)
JSON_KWARGS = {
    "fedavg": {"train": TRAIN},
    "fedavg_ft": {"train": TRAIN, "finetune": TRAIN},
    "ditto": {"train": TRAIN, "personal_train": TRAIN},
    "fedbabu": {"train": TRAIN, "finetune": TRAIN},
    "fedetf": {"train": TRAIN},
    "fedrep": {"train": TRAIN, "head_train": TRAIN},
    "fedprox": {"train": TRAIN},
    "fedproto": {"train": TRAIN},
    "ggeur": {"total_per_class": 10},
    "fedfa_style": {},
    "fedmix_style": {},
    "rebalanced": {"total_per_class": 10},
    "mpt": {"train": TRAIN, "rare_class": 1, "ldc_epochs": 1, "ccvr_steps": 2, "ccvr_virtual": 4},
    "cgrl": {"train": TRAIN, "cgrl": {"call": "fedlib.cgrl:CGRLConfig", "kwargs": {"augment": "none", "warmup": 1}}},
    "fedavg_se": {"train": TRAIN},
    "hdcfl": {"train": TRAIN, "config": {"call": "fedlib.algorithms.hdcfl:HDCConfig", "kwargs": {
        "rank": 2, "k_max": 3, "refresh_every": 1, "max_activation_round": 2}}},
    "ifca": {"train": TRAIN, "k": 2},
    "cosmos": {"public": PUBLIC, "server_model": SERVER, "target_clusters": 2, "train": ADAM, "pretrain": ADAM,
               "distill": ADAM, "server_train": ADAM},
    "fedmd": {"public": PUBLIC, "train": ADAM, "pretrain": ADAM, "distill": ADAM},
    "fedct": {"public": PUBLIC, "train": ADAM, "pretrain": ADAM, "distill": ADAM},
    "comet": {"public": PUBLIC, "k": 2, "train": ADAM, "pretrain": ADAM, "distill": ADAM},
}


def public_set():
    """The model-agnostic methods' public set of test_algorithms (random inputs, 16 features)."""
    from fedlib.distill import PublicSet

    return PublicSet(torch.randn(12, 16, generator=torch.Generator().manual_seed(0)))


@pytest.fixture(autouse=True)
def allow_the_public_set(monkeypatch):
    """This machine's operator allows the test suite's public set (the model-agnostic methods'
    jobs call it), as a lab would allow its own loader: ``FEDLIB_FLOWER_ALLOW``. Processes started
    meanwhile (a deployment's SuperNodes) inherit it."""
    monkeypatch.setenv(ALLOW_ENV, PUBLIC["call"])


def job(name: str, rounds: int = 2, n_clients: int = 4, **config) -> FlowerJob:
    fed = {"call": FED["call"], "kwargs": {**FED["kwargs"], "n_clients": n_clients}}
    return FlowerJob(name, Call.from_dict(fed), Call.from_dict(MODEL), {"rounds": rounds, "seed": 1, **config},
                     JSON_KWARGS[name], threads=1)


@pytest.fixture
def one_thread():
    """torch on one thread, as the Flower nodes of these jobs (``FlowerJob(threads=1)``): the
    in-process reference then sums in the same order."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def reference(j: FlowerJob):
    return j.run_in_process()


def assert_same_run(ref, run) -> None:
    """Bit-identical: server state, every client's state, the tidy frame (every ability the
    nodes' records carry, pooled among them), the ledger."""
    assert not run_differences(ref, run), run_differences(ref, run)
    evaluated = set(run.frame.loc[run.frame["client"] >= 0, "metric"])
    assert not evaluated or {"local", "pooled", "global"} <= evaluated


# ------------------------------------------------------------------ the package's layers

# what importing each module may not load: the records and the transport sit below the round loop
# (no loop, no method, no job, no apps, no Flower simulation engine); no module but the entry point
# builds an app
ABOVE_THE_LOOP = ("fedlib.loop", "fedlib.algorithms", "flwr.simulation", "fedlib.engines.flower.job",
                  "fedlib.engines.flower.apps", "fedlib.engines.flower.entrypoint", "fedlib.engines.flower.deployment",
                  "fedlib.engines.flower.cli")
LAYERS = {
    "fedlib.engines.flower": ABOVE_THE_LOOP,
    "fedlib.engines.flower.records": ABOVE_THE_LOOP + ("fedlib.engines.flower.remote",),
    "fedlib.engines.flower.remote": ABOVE_THE_LOOP,
    "fedlib.engines.flower.loopback": ABOVE_THE_LOOP,
    "fedlib.engines.flower.deployment": ("flwr.simulation", "fedlib.engines.flower.entrypoint", "fedlib.engines.flower.cli"),
    "fedlib.engines.flower.cli": ("flwr.simulation", "fedlib.engines.flower.entrypoint"),
}


def loaded_by(module: str) -> tuple[list[str], list[str]]:
    """(the modules a fresh interpreter has loaded after ``import module``, the Flower apps that exist then)."""
    code = (f"import gc, sys, {module}\n"
            "from flwr.clientapp import ClientApp\nfrom flwr.serverapp import ServerApp\n"
            "print(sorted(sys.modules))\n"
            "print(sorted(type(o).__name__ for o in gc.get_objects() if type(o) in (ServerApp, ClientApp)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    return eval(out[-2]), eval(out[-1])


@pytest.mark.parametrize("module", LAYERS)
def test_a_flower_module_loads_no_layer_above_it_and_builds_no_app(module):
    modules, apps = loaded_by(module)
    bad = [m for m in modules if any(m == f or m.startswith(f + ".") for f in LAYERS[module])]
    assert not bad, f"importing {module} loads {bad}"
    assert apps == [], f"importing {module} builds {apps}"


def test_the_entry_point_builds_the_two_apps_a_deployment_names():
    assert loaded_by("fedlib.engines.flower.entrypoint")[1] == ["ClientApp", "ServerApp"]
    assert 'serverapp = "fedlib.engines.flower.entrypoint:server_app"' in _APP_TOML
    assert 'clientapp = "fedlib.engines.flower.entrypoint:client_app"' in _APP_TOML


def test_the_package_gives_every_public_name_from_its_module():
    for name, module in flower._LAZY.items():
        assert getattr(flower, name) is getattr(__import__(f"fedlib.engines.flower.{module}", fromlist=[name]), name)
    assert set(flower.__all__) == set(flower._LAZY) <= set(dir(flower))
    with pytest.raises(AttributeError, match="has no attribute 'server_app'"):
        flower.server_app  # noqa: B018 (the apps live in fedlib.engines.flower.entrypoint only)


# ------------------------------------------------------------------ records: lossless, clear errors

class Recording(Transport):
    """The in-process transport, keeping every message, reply and state it carried."""

    def __init__(self, inner: InProcessTransport) -> None:
        self.inner, self.seen = inner, []
        self.initial_model, self.seed, self.n_clients = inner.initial_model, inner.seed, inner.n_clients
        self.description = inner.description

    def local_updates(self, algorithm, round_, messages, states):
        for k, state, up in self.inner.local_updates(algorithm, round_, messages, states):
            self.seen += [messages[k], states[k], state, up]
            yield k, state, up

    def evaluate(self, algorithm, round_, messages, states, **kw):
        self.seen += list(messages.values())
        yield from self.inner.evaluate(algorithm, round_, messages, states, **kw)


def through_the_wire(state: State) -> State:
    """fedlib -> Flower records -> protobuf bytes -> Flower records -> fedlib."""
    with _task_identity(run_id=1, node_id=1):
        msg = FlowerMessage(message_to_records(state), dst_node_id=2, message_type="train")
    return records_to_message(message_from_proto(message_to_proto(msg)).content)


def jsonish(v):
    """A metadata value as JSON gives it back (fedlib's metadata is JSON: a tuple is a list)."""
    return [jsonish(x) for x in v] if isinstance(v, (list, tuple)) else v


def assert_identical(a: State, b: State) -> None:
    assert type(a) is type(b)
    assert same_arrays(a.arrays, b.arrays)
    assert list(a.meta) == list(b.meta)
    for k in a.meta:
        assert type(jsonish(a.meta[k])) is type(b.meta[k]), k
        assert jsonish(a.meta[k]) == b.meta[k] or (isinstance(a.meta[k], float) and math.isnan(a.meta[k]) and math.isnan(b.meta[k]))
    if isinstance(a, Message):
        assert a.kind == b.kind


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_message_kind_of_every_method_crosses_flower_losslessly(name, tiny_federation, tiny_model_fn):
    rec = Recording(InProcessTransport(tiny_federation, tiny_model_fn, seed=1))
    run_federated(ALGORITHMS[name](**KWARGS[name]), tiny_federation, tiny_model_fn, LoopConfig(rounds=2, seed=1), transport=rec)
    assert rec.seen
    for state in rec.seen:
        assert_identical(state, through_the_wire(state))


def test_records_keep_dtypes_shapes_orders_and_scalar_types():
    m = Message(arrays={"z": torch.arange(6, dtype=torch.int64).reshape(2, 3), "a": torch.tensor([1.5, float("nan")], dtype=torch.float64),
                        "b": torch.tensor([True, False]), "h": torch.ones(2, 2, dtype=torch.float16).t(), "e": torch.zeros(0, 4),
                        "s": torch.tensor(3.25)},
                meta={"n": 7, "x": 0.1, "flag": True, "name": "é", "inf": float("inf"), "np": np.float64(2.5),
                      "layers": ["fc1", "head"], "mixed": [1, "a", None], "d": {"k": [1.5]}}, kind="update")
    back = through_the_wire(m)
    assert back.meta["np"] == 2.5 and type(back.meta["np"]) is float  # a NumPy scalar travels as the Python number
    m.meta["np"] = 2.5
    assert_identical(m, back)
    assert flower_bytes(message_to_records(m)) > m.nbytes() - len('"np": 2.5')


@pytest.mark.parametrize("bad, match", [
    (Message(arrays={"w": torch.zeros(2, dtype=torch.bfloat16)}), "array 'w' has dtype torch.bfloat16"),
    (Message(meta={"layers": {1, 2}}), "metadata .layers. is a set .* valid metadata values: bool, int, float, str, and lists or dicts"),
    (Message(meta={"big": 2**70}), "metadata 'big' = .* does not fit Flower's 64-bit integers"),
    (Message(arrays={"w": [1.0, 2.0]}), "array 'w' is a list"),
])
def test_a_message_flower_cannot_carry_is_refused_by_name(bad, match):
    with pytest.raises(FlowerConversionError, match=match):
        message_to_records(bad)


def test_a_job_is_checked_and_travels_as_json():
    j = job("fedavg")
    assert FlowerJob.from_json(j.to_json()) == j and FlowerJob.from_json(j.to_json()).digest == j.digest
    with pytest.raises(ValueError, match=r"unknown loop setting\(s\) \['round'\] .*valid: rounds"):
        FlowerJob("fedavg", Call.from_dict(FED), Call.from_dict(MODEL), {"round": 3})
    with pytest.raises(ValueError, match="must be JSON-able"):
        FlowerJob("fedavg", Call.from_dict(FED), Call.from_dict(MODEL), algorithm_kwargs={"train": object()})
    with pytest.raises(ValueError, match="call target 'fedlib.nowhere:f' is not allowed on this machine"):
        Call("fedlib.nowhere:f")()
    with pytest.raises(ValueError, match="unknown Flower engine 'ray'; valid: simulation, deployment, loopback"):
        run_flower(j, "ray")


def test_a_crafted_job_runs_nothing_the_operator_did_not_allow(tmp_path, monkeypatch):
    marker = tmp_path / "MARKER"
    evil = {"call": "os:system", "kwargs": {"command": f"touch {marker}"}}  # returns 0, a valid seed
    d = json.loads(job("fedavg").to_json())
    d["federation"]["kwargs"]["seed"] = evil
    with pytest.raises(ValueError, match=r"call target 'os:system' is not allowed on this machine; nothing was imported"):
        FlowerJob.from_json(json.dumps(d))
    with pytest.raises(ValueError, match=r"call target 'subprocess:run' is not allowed"):
        FlowerJob("fedavg", Call.from_dict(FED), Call.from_dict(MODEL),
                  algorithm_kwargs={"train": {"call": "subprocess:run", "kwargs": {"args": ["touch", str(marker)]}}})
    with pytest.raises(ValueError, match=r"call target 'builtins:eval' is not allowed"):
        Call("builtins:eval", {"source": "1"})()
    # a node whose operator allows nothing beyond fedlib refuses the public set a job names
    monkeypatch.setenv(ALLOW_ENV, "")
    with pytest.raises(ValueError, match=r"'test_flower:public_set' is not allowed .*now: none"):
        job("cosmos")
    monkeypatch.setenv(ALLOW_ENV, " test_flower:public_set , other:thing")
    assert {"test_flower:public_set", "other:thing"} <= allowed_targets() and job("cosmos").algorithm == "cosmos"
    # settings hold no calls; the method is a registered one; the checkpoint stays in the run's folder
    with pytest.raises(ValueError, match="config holds settings only"):
        FlowerJob("fedavg", Call.from_dict(FED), Call.from_dict(MODEL), {"rounds": 1, "events": [evil]})
    with pytest.raises(ValueError, match=r"unknown method 'os' in a Flower job; valid: cgrl, comet"):
        FlowerJob("os", Call.from_dict(FED), Call.from_dict(MODEL))
    for bad in ("/etc/passwd", "../x.pt", "a/../../x.pt", "C:\\x.pt"):
        with pytest.raises(ValueError, match="relative path inside the run's output folder"):
            job("fedavg", checkpoint=bad)
    assert job("fedavg", checkpoint="c/ckpt.pt").run_options("out").checkpoint == os.path.join("out", "c/ckpt.pt")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['extra'\]"):
        FlowerJob.from_json(json.dumps({**json.loads(job("fedavg").to_json()), "extra": 1}))
    assert not marker.exists()


def test_a_job_may_not_name_files_on_a_node_nor_reserved_names_nor_bad_numbers(tmp_path):
    d = json.loads(job("fedavg").to_json())
    d["federation"]["kwargs"]["dataset"] = {"call": "fedlib.data:load_dataset",
                                            "kwargs": {"name": "cifar10", "root": "/etc", "download": True}}
    with pytest.raises(ValueError, match=r"fedlib.data:load_dataset .* may not be given \['download', 'root'\]"):
        FlowerJob.from_json(json.dumps(d))
    for name in ("state.pt", "manifest.json", "frame.csv", "flower.json"):
        with pytest.raises(ValueError, match=rf"checkpoint may not be named '{re.escape(name)}'"):
            job("fedavg", checkpoint=name)
    with pytest.raises(ValueError, match=r"seed must be an int >= 0 .*got 1\.7"):
        job("fedavg", seed=1.7)
    with pytest.raises(ValueError, match=r"n_clients must be an int >= 1, got 2\.5"):
        job("fedavg", n_clients=2.5)
    with pytest.raises(ValueError, match=r"algorithm is a registered method's name \(a string\), got \['fedavg'\]"):
        FlowerJob.from_json(json.dumps({**json.loads(job("fedavg").to_json()), "algorithm": ["fedavg"]}))
    with pytest.raises(ValueError, match="an event is"):
        job("fedavg", events=[{"round": 2, "node": 1}])
    # a checkpoint of a run stopped early must live somewhere: not in a temporary folder removed after the call
    with pytest.raises(ValueError, match=r"needs an output folder to keep it in: give run_flower\(out=...\)"):
        run_flower(job("ditto", checkpoint="ckpt.pt"), "loopback", stop_after=1)
    with pytest.raises(ValueError, match="on_nonfinite='drop' .* run with mirror_states=True"):
        run_flower(job("ditto", on_nonfinite="drop"), "loopback", mirror_states=False)


def test_a_dropped_client_gets_the_servers_copy_of_its_state_back_on_flower():
    """The loop keeps a dropped client's state from before the round; the node, which kept the dropped one, is sent
    the server's copy with its next message (``fedlib.restore``), as after a failure."""
    from fedlib.engines.flower.remote import FlowerTransport

    t = FlowerTransport.__new__(FlowerTransport)  # its bookkeeping only: no grid needed
    t.mirror_states, t.nodes, t.job_digest, t._holds = True, {1: 7, 2: 8}, "d", {1, 2}
    kept = State(arrays={"w": torch.ones(2)})
    def restores(msg) -> bool:
        return any(str(key).startswith("fedlib.restore") for key in msg.content.keys())

    with _task_identity(run_id=1, node_id=1):
        assert not restores(t._message("train", 1, 3, Message(kind="model"), kept, {}))
        t.discard_state(1)
        assert t._holds == {2} and restores(t._message("train", 1, 3, Message(kind="model"), kept, {}))
    t.mirror_states = False
    with pytest.raises(RuntimeError, match="stays on node 8 .*valid: mirror_states=True"):
        t.discard_state(2)


# ------------------------------------------------------------------ every method, on Flower's messages

@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_registered_method_on_flower_messages_equals_in_process(name, one_thread):
    j = job(name, rounds=2, eval_every=1)
    run = run_flower(j, "loopback")
    assert_same_run(reference(j), run.result)
    wire = run.wire
    assert (wire["flower_bytes"] > 0).all() and len(wire) == len(run.result.ledger.to_frame())


def test_every_method_is_covered_here():
    assert set(JSON_KWARGS) == set(ALGORITHMS)


def test_states_stay_on_the_nodes_without_the_mirror(one_thread):
    j = job("ditto")
    run = run_flower(j, "loopback", mirror_states=False)
    ref = reference(j)
    assert same_arrays(ref.server.arrays, run.result.server.arrays)
    pd.testing.assert_frame_equal(ref.frame, run.result.frame)
    assert all(not st.arrays and str(st.meta["fedlib.state"]).startswith("on node") for st in run.result.client_states.values())
    with pytest.raises(ValueError, match="a checkpoint needs the clients' states on the server"):
        run_flower(job("ditto", checkpoint="x.pt"), "loopback", mirror_states=False)


def test_an_interrupted_flower_run_resumes_bit_for_bit_on_fresh_nodes(tmp_path, one_thread):
    j = job("ditto", rounds=3, eval_every=1, checkpoint="ckpt.pt")  # inside the run's output folder
    first = run_flower(j, "loopback", stop_after=1, out=tmp_path / "run")
    assert first.result.rounds_done == 1 and (tmp_path / "run" / "ckpt.pt").exists()
    from fedlib.io import load_tensors_json

    saved = json.loads(load_tensors_json(tmp_path / "run" / "ckpt.pt")[1]["fingerprint"])
    assert saved["loop"]["data"] == j.build_federation().digest()  # the nodes' data, reported in the handshake
    resumed = run_flower(j, "loopback", out=tmp_path / "run")  # new nodes: the server sends each its state from the checkpoint
    assert (resumed.wire["round"] >= 2).all()
    unbroken = job("ditto", rounds=3, eval_every=1)
    assert_same_run(reference(unbroken), resumed.result)


def test_events_reach_the_server_on_flower(one_thread):
    j = job("fedavg", rounds=3, events=[{"round": 2, "client": 1, "kind": "leave"}])
    run = run_flower(j, "loopback")
    assert_same_run(reference(j), run.result)
    assert run.result.departed == [1] and not ((run.wire["client"] == 1) & (run.wire["round"] >= 2)).any()
    assert j.loop_config().events == (Event(2, 1, "leave"),)


# ------------------------------------------------------------------ failures: dropped and recorded, or an error naming the node

def test_a_node_that_never_replies_is_an_error_naming_it(one_thread):
    with pytest.raises(ClientFailedError, match=r"client 2 gave no reply in round 1: node 1002 did not reply within 0.01 s"):
        run_flower(job("fedavg"), "loopback", unresponsive={2}, timeout=0.01)


@pytest.mark.filterwarnings("ignore::fedlib.loop.DroppedClientsWarning")  # drops expected
def test_a_node_that_never_replies_is_dropped_and_recorded_when_asked(one_thread):
    run = run_flower(job("fedavg", on_failure="drop"), "loopback", unresponsive={2}, timeout=0.01)
    f = run.result.frame
    assert list(f.loc[f["metric"] == "dropped_failed", "value"]) == [2.0, 2.0]
    assert list(f.loc[f["metric"] == "dropped_failed_eval", "value"]) == [2.0]
    assert 2 not in set(run.result.per_client().index)
    assert all(torch.isfinite(t).all() for t in run.result.server.arrays.values())
    # nothing of client 2 was averaged: the run equals one whose client 2 left before round 1
    gone = job("fedavg", events=[{"round": 1, "client": 2, "kind": "leave"}])
    assert same_arrays(reference(gone).server.arrays, run.result.server.arrays)


def failing_client_app(j: FlowerJob, bad: int) -> ClientApp:
    inner = make_client_app(j)
    app = ClientApp()

    @app.query()
    def query(msg, context):
        return inner(msg, context)

    @app.train()
    def train(msg, context):
        if context.node_config["partition-id"] == bad and int(msg.content["fedlib.ctl"]["round"]) == 2:
            raise RuntimeError("disk full")
        return inner(msg, context)

    @app.evaluate()
    def evaluate(msg, context):
        return inner(msg, context)

    return app


def run_on_grid(j: FlowerJob, grid, out, **server_kwargs):
    with _task_identity(run_id=1, node_id=1):
        make_server_app(j, out, setup_timeout=1.0, **server_kwargs)(
            grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={}))


def test_a_client_that_fails_mid_run_is_an_error_naming_node_and_reason(tmp_path, one_thread):
    j = job("fedavg", rounds=3)
    with pytest.raises(ClientFailedError, match=r"client 1 gave no reply in round 2: node 1001 failed: .*disk full"):
        run_on_grid(j, LoopbackGrid(failing_client_app(j, 1), 4), tmp_path)


@pytest.mark.filterwarnings("ignore::fedlib.loop.DroppedClientsWarning")  # drops expected
def test_a_client_that_fails_mid_run_is_dropped_when_asked(tmp_path, one_thread):
    j = job("fedavg", rounds=3, on_failure="drop")
    run_on_grid(j, LoopbackGrid(failing_client_app(j, 1), 4), tmp_path)
    frame = pd.read_csv(tmp_path / "frame.csv")
    assert frame.loc[frame["metric"] == "dropped_failed", ["round", "value"]].values.tolist() == [[2, 1.0]]


# ------------------------------------------------------------------ bad set-ups: clear errors

@pytest.mark.parametrize("configs, match", [
    ([{"partition-id": 0, "num-partitions": 4}, {}, {"partition-id": 2, "num-partitions": 4}, {"partition-id": 3, "num-partitions": 4}],
     r"node 1001 has no partition: .*--node-config 'partition-id=K num-partitions=N'"),
    ([{"partition-id": k % 3, "num-partitions": 4} for k in range(4)], r"nodes 1000 and 1003 both hold partition-id=0"),
    ([{"partition-id": k, "num-partitions": 5} for k in range(4)], r"partition-id=0, num-partitions=5, but the job's federation has 4"),
    ([{"partition-id": k, "num-partitions": 4} for k in range(3)], r"3 node\(s\) connected within 1 s, but the federation has 4 clients"),
])
def test_nodes_that_do_not_form_the_federation_are_refused(configs, match, tmp_path):
    j = job("fedavg")
    with pytest.raises(FlowerSetupError, match=match):
        run_on_grid(j, LoopbackGrid(make_client_app(j), 4, node_configs=configs), tmp_path)


def test_a_node_given_another_job_is_refused(tmp_path):
    j = job("fedavg")
    with pytest.raises(FlowerSetupError, match="the server runs job .*, this node job .*: they were given different jobs"):
        run_on_grid(j, LoopbackGrid(make_client_app(job("fedavg", rounds=5)), 4), tmp_path)


def test_a_port_in_use_is_refused_before_anything_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        dep = LocalDeployment(2, port=port)
        with pytest.raises(FlowerSetupError, match=rf"port\(s\) \[{port}\] on 127.0.0.1 are in use .*LocalDeployment\(port=...\)"):
            dep.__enter__()
        assert dep.pids() == []


# ------------------------------------------------------------------ Flower's engines: the same bits

# plain FedAvg, persistent client state used in training (Ditto, two rounds), per-round statistics (MPT)
ENGINE_JOBS = {"fedavg": 1, "ditto": 2, "mpt": 1}


def leftovers(marker: str, wait: float = 20.0) -> list[str]:
    """The command lines of live processes other than this one whose environment holds
    ``marker`` (Ray's and Flower's processes inherit it from this process), once they had
    ``wait`` seconds to exit (Ray's workers finish exiting after ``ray.shutdown`` returns)."""
    t0 = time.monotonic()
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if marker.encode() in (entry / "environ").read_bytes().split(b"\0") and \
                            (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                        found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
                except OSError:
                    continue
        if not found or time.monotonic() - t0 > wait:
            return found
        time.sleep(0.5)


@pytest.mark.parametrize("name", ENGINE_JOBS)
def test_flower_simulation_equals_the_in_process_loop(name, one_thread, monkeypatch):
    monkeypatch.setenv("FEDLIB_TEST_SIMULATION", name)
    j = job(name, rounds=ENGINE_JOBS[name], n_clients=3)
    run = run_flower(j, "simulation")
    assert_same_run(reference(j), run.result)
    assert run.engine == "simulation" and len(run.info["nodes"]) == 3
    assert leftovers(f"FEDLIB_TEST_SIMULATION={name}") == [], "Ray left processes running"


def test_flower_deployment_equals_the_in_process_loop(one_thread):
    """The three jobs side by side on one local deployment of two SuperNodes, one round each
    (Ditto's state kept on the node between its training and its evaluation, two processes). A
    message costs a deployment seconds: Flower polls, and starts a process per message, which
    imports torch; the simulation and loopback tests cover the longer runs."""
    jobs = {name: job(name, rounds=1, n_clients=2) for name in ENGINE_JOBS}
    with LocalDeployment(2, port=free_port_block(3)) as dep, ThreadPoolExecutor(len(jobs)) as pool:
        runs = dict(zip(jobs, pool.map(lambda j: run_flower(j, "deployment", deployment=dep), jobs.values())))
    assert dep.pids() == [], "the deployment left processes running"
    for name, j in jobs.items():
        assert_same_run(reference(j), runs[name].result)
        assert runs[name].engine == "deployment" and sorted(runs[name].info["nodes"]) == ["0", "1"]


def test_a_failed_deployment_run_leaves_no_process():
    with pytest.raises(RuntimeError, match="the job has 4 clients, but this deployment runs 1 SuperNode"):
        with LocalDeployment(1, port=free_port_block(2)) as dep:
            assert len(dep.pids()) >= 3  # the SuperLink, the SuperNode, their SuperExecs
            run_flower(job("fedavg"), "deployment", deployment=dep)
    assert dep.pids() == []


def _deployment_of(port: int, timeout: float = 120.0) -> tuple[str, str]:
    """(the marker, the Flower home) of the deployment whose SuperLink serves ``port``, once its
    ``flwr run`` has started (its ServerApp's run under way)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        for entry in Path("/proc").iterdir():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
                env = dict(v.split(b"=", 1) for v in (entry / "environ").read_bytes().split(b"\0") if b"=" in v)
                ours = (MARKER_VARIABLE.encode() in env and any(c.endswith(b"flwr") for c in cmd[:2]) and b"run" in cmd
                        and f":{port}\"" in (Path(env[b"FLWR_HOME"].decode()) / "config.toml").read_text())
            except (OSError, ValueError, KeyError):
                continue
            if ours:
                return env[MARKER_VARIABLE.encode()].decode(), env[b"FLWR_HOME"].decode()
        time.sleep(0.2)
    raise AssertionError(f"no deployment on port {port} started its run within {timeout} s")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP])
def test_a_killed_deployment_command_leaves_no_process(sig, tmp_path):
    """A closed terminal (HUP) or a KILL of ``python -m fedlib.engines.flower --engine deployment``
    mid-run: within seconds no process of its deployment is left (SuperLink, SuperNodes,
    SuperExecs, apps, flwr run), its ports are free and its temporary Flower home is gone."""
    port = free_port_block(3)
    (tmp_path / "job.json").write_text(job("fedavg", rounds=500, n_clients=2).to_json())
    cmd = [sys.executable, "-m", "fedlib.engines.flower", "--engine", "deployment", "--job", str(tmp_path / "job.json"),
           "--out", str(tmp_path / "out"), "--port", str(port), "--quiet"]
    command = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        marker, home = _deployment_of(port)
        assert len(marked_pids(marker)) >= 5  # the SuperLink, two SuperNodes, their SuperExecs, flwr run
        os.kill(command.pid, sig)
        command.wait(timeout=30)
        t0 = time.monotonic()
        while (marked_pids(marker) or Path(home).exists()) and time.monotonic() - t0 < 20:
            time.sleep(0.2)
        assert marked_pids(marker) == [], f"processes of the deployment outlived its command: {marked_pids(marker)}"
        assert all(port_free(p) for p in range(port, port + 3)) and not Path(home).exists()
    finally:
        if command.poll() is None:
            command.kill()
        command.wait()


def test_a_failed_run_says_why_and_where_a_rerun_resumes(tmp_path):
    j = job("fedavg", rounds=3, checkpoint="ckpt.pt")
    run_flower(j, "loopback", out=tmp_path, stop_after=1)
    assert failure_report(j, tmp_path).endswith(f"checkpoint {tmp_path / 'ckpt.pt'} holds rounds 1..1: the same command "
                                                "resumes from round 2")
    (tmp_path / SERVERAPP_ERROR).write_text("Traceback ...\nOSError: disk full")
    assert failure_report(j, tmp_path).startswith("the ServerApp failed with Traceback ...\nOSError: disk full")


def test_a_round_whose_every_node_was_dropped_fails_and_the_serverapp_says_why(tmp_path, one_thread):
    """Every node silent after the handshake, on_failure="drop": round 1 kept no reply, so the run
    fails (never a normal return with nothing evaluated), and the ServerApp leaves its error for
    the command that submitted it (a deployment's app is a process of its own)."""
    j = job("fedavg", rounds=2, on_failure="drop", checkpoint="ckpt.pt")
    with pytest.raises(TooFewRepliesError, match=r"round 1 kept 0 of the 4 replies .* dropped: client 0: no reply \(node "
                       r"1000 did not reply within 0.01 s of the message\); client 1: .*client 3: .*round 1 was not "
                       r"aggregated, and the server state stays the initial one \(no round checkpointed\)"):
        run_flower(j, "loopback", out=tmp_path, unresponsive={0, 1, 2, 3}, timeout=0.01)
    report = failure_report(j, tmp_path)
    assert "TooFewRepliesError: round 1 kept 0 of the 4 replies" in report and report.endswith(
        f"no round was checkpointed yet ({tmp_path / 'ckpt.pt'}): a rerun starts from round 1")


class RefusingGrid(LoopbackGrid):
    """A grid that cannot send training messages to node 1001 (Flower's push returns no id)."""

    def push_messages(self, messages):
        msgs = list(messages)
        if any(m.metadata.dst_node_id == 1001 and m.metadata.message_type == "train" for m in msgs):
            return []
        return super().push_messages(msgs)


@pytest.mark.filterwarnings("ignore::fedlib.loop.DroppedClientsWarning")  # drops expected
def test_a_message_flower_cannot_send_is_a_failure_naming_the_node(tmp_path, one_thread):
    j = job("fedavg", on_failure="drop")
    run_on_grid(j, RefusingGrid(make_client_app(j), 4), tmp_path)
    frame = pd.read_csv(tmp_path / "frame.csv")
    assert frame.loc[frame["metric"] == "dropped_failed", "value"].tolist() == [1.0, 1.0]
    with pytest.raises(ClientFailedError, match="client 1 gave no reply in round 1: Flower could not send the message to node 1001"):
        run_on_grid(job("fedavg"), RefusingGrid(make_client_app(job("fedavg")), 4), tmp_path / "b")


def test_the_server_computes_with_the_jobs_threads_and_gives_the_callers_back():
    """MPT's server-side statistics depend on torch's threads; the ServerApp sets the job's (a
    deployment's ServerApp is a process of its own) and restores the caller's."""
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        j = job("mpt", rounds=2, eval_every=1)
        run = run_flower(j, "loopback")
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        assert_same_run(reference(j), run.result)
    finally:
        torch.set_num_threads(saved)
