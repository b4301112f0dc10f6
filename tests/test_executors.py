"""The study runner on its executors (fedbook.study.run_study, fedbook.parallel.map_cells): the same
bits in this process, on the forked pool and on a local Ray instance; a failed cell retried once;
progress told per cell; an interrupted study resumes from its cache.

Ray starts once for the module (5-10 s: the ``ray_up`` fixture, :func:`fedbook.parallel.local_ray`,
the function run_study calls to start one itself); the tests join it."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedbook import parallel as parallel_module, study as study_module
from fedbook.parallel import check_executor, local_ray, map_cells
from fedbook.study import Study, read_progress, run_study
from fedlib.rng import torch_generator

pytestmark = pytest.mark.usefixtures("one_thread")

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def cacheable():
    """This module's functions count as the project's (only fedlib's and fedbook's are cached)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(study_module, "PACKAGES", {**study_module.PACKAGES, __name__.split(".")[0]: ()})
        yield


def train_cell(seed: int, width: int, steps: int = 6) -> dict[str, pd.DataFrame]:
    """A tiny MLP trained for a few SGD steps, every stream from the cell's seed: its losses and weights."""
    g = torch_generator(seed, width)
    x = torch.randn(32, 4, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Tanh(), torch.nn.Linear(width, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    losses = []
    for _ in range(steps):
        batch = torch.randint(0, 32, (8,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {"losses": pd.DataFrame({"step": range(steps), "loss": losses}),
            "weights": pd.DataFrame({"i": range(len(weights)), "w": weights.double().numpy()})}


TRAIN = Study("train", functools.partial(train_cell, steps=6), grid={"width": [3, 5]}, seeds=[0, 1, 7])


def cache_records(folder: Path) -> dict[str, dict]:
    """Each cached cell's record by its key, less the seconds it took (a measurement, not a result)."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        record.pop("seconds")
        out[path.stem] = record
    return out


@pytest.fixture(scope="module")
def ray_up():
    """One local Ray instance of 2 CPUs for the module (run_study joins it)."""
    assert not ray.is_initialized()
    with local_ray(2):
        yield
    assert not ray.is_initialized()


def test_the_same_bits_in_this_process_on_the_pool_and_on_a_local_ray_instance(tmp_path, ray_up, monkeypatch):
    here = run_study(TRAIN, cache=tmp_path / "here")
    pool = run_study(TRAIN, workers=2, cache=tmp_path / "pool")
    events, started = [], []

    @contextlib.contextmanager
    def recorded(cpus):  # the module's instance stands for the one the call would start (one Ray start a module)
        started.append(cpus)
        yield
        started.append("stopped")

    monkeypatch.setattr(parallel_module, "local_ray", recorded)
    monkeypatch.setattr(parallel_module, "_ray_joined", lambda: False)
    on_ray = run_study(TRAIN, workers=2, cache=tmp_path / "ray", executor="ray", progress=events.append)
    assert started == [2, "stopped"]  # Ray not joined yet: the call starts an instance of 2 CPUs, and stops it
    for frames in (pool, on_ray):
        assert list(frames) == ["losses", "weights"] and (frames.cells, frames.cached, frames.retried) == (6, 0, [])
        for name in here:
            pd.testing.assert_frame_equal(here[name], frames[name], check_exact=True)
    assert len(here["losses"]) == 6 * 6 and here["losses"]["loss"].nunique() == 36  # six cells, all different
    records = cache_records(tmp_path / "here" / "train")
    assert len(records) == 6 and records == cache_records(tmp_path / "pool" / "train") == \
        cache_records(tmp_path / "ray" / "train")  # the same keys (the executor is not in them) and the same frames
    assert [e["event"] for e in events] == ["start"] + ["cell"] * 6 and [e["done"] for e in events] == list(range(7))
    assert sorted(json.dumps(e["cell"], sort_keys=True) for e in events[1:]) == \
        sorted(json.dumps(c, sort_keys=True) for c in TRAIN.cells())
    assert events[-1]["eta"] == 0.0 and all(e["seconds"] > 0 and e["total"] == 6 for e in events[1:])


def test_a_cluster_is_joined_at_its_address_and_left_running(ray_up, monkeypatch):
    """``executor="HOST:PORT"``: this process connects to that cluster and disconnects after (the
    module's instance stands for the cluster: connecting a second time in this process is Ray's
    refusal, so ``ray.init`` and ``ray.shutdown`` are recorded, and the tasks run on the module's)."""
    calls = []
    monkeypatch.setattr(parallel_module, "_ray_joined", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(("init", kw)))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown", {})))
    frames = run_study(Study("joined", fail_always, seeds=[0, 1]), executor="head.example:6379")
    assert frames["joined"]["y"].tolist() == [0.0, 1.0]
    assert calls == [("init", {"address": "head.example:6379", "log_to_driver": False, "logging_level": 30}),
                     ("shutdown", {})]


def fail_once(seed: int, marker: Path) -> pd.DataFrame:
    """Fails on its first attempt of seed 1 (leaving ``marker`` behind), succeeds after."""
    if seed == 1 and not marker.exists():
        marker.write_text("tried")
        raise RuntimeError("a flaky machine")
    return pd.DataFrame({"y": [seed * 0.5]})


def fail_always(seed: int) -> pd.DataFrame:
    if seed == 2:
        raise ArithmeticError(f"seed {seed} always fails")
    return pd.DataFrame({"y": [float(seed)]})


@pytest.mark.parametrize("executor", [None, "ray"])
def test_a_cell_that_fails_once_is_retried_and_reported(tmp_path, executor, request):
    if executor:
        request.getfixturevalue("ray_up")
    events = []
    study = Study("flaky", functools.partial(fail_once, marker=tmp_path / "marker"), seeds=[0, 1, 2])
    frames = run_study(study, cache=tmp_path / "cache", executor=executor, progress=events.append)
    assert frames["flaky"]["y"].tolist() == [0.0, 0.5, 1.0]
    assert frames.retried == [{"cell": {"seed": 1}, "error": "RuntimeError: a flaky machine"}]
    assert [(e["event"], e["cell"], e["error"]) for e in events if e["event"] == "retry"] == \
        [("retry", {"seed": 1}, "RuntimeError: a flaky machine")]
    assert len(list((tmp_path / "cache" / "flaky").glob("*.json"))) == 3
    if executor:
        assert ray.is_initialized()  # joined the module's Ray, left it running


@pytest.mark.parametrize("executor", [None, "ray"])
def test_a_cell_that_fails_twice_stops_the_study_and_the_finished_cells_stay_cached(tmp_path, executor, request):
    if executor:
        request.getfixturevalue("ray_up")
    events = []
    with pytest.raises(ArithmeticError, match="seed 2 always fails") as info:
        run_study(Study("broken", fail_always, seeds=[0, 1, 2]), cache=tmp_path, executor=executor,
                  progress=events.append)
    notes = "\n".join(info.value.__notes__)
    assert "for item {'seed': 2} on attempt 2 of 2; attempt 1 raised ArithmeticError: seed 2 always fails" in notes
    # in this process seeds 0 and 1 finish before seed 2 runs; on Ray the cells still running when
    # seed 2 fails for good are cancelled (fedbook.parallel.map_cells), so how many finished first
    # depends on the machine's load: whatever finished is said and kept
    kept = len(list((tmp_path / "broken").glob("*.json")))
    assert kept == 2 if executor is None else kept <= 2
    assert f"study 'broken': {kept} of 3 cells done" in notes
    assert ("kept in the cache: a rerun resumes from them" in notes) == (kept > 0)
    assert [e["event"] for e in events].count("retry") == 1 and events[-1]["event"] == "failed"
    again = run_study(Study("broken", fail_always, seeds=[0, 1]), cache=tmp_path)
    assert again.cached == kept and again["broken"]["y"].tolist() == [0.0, 1.0]


def dies(seed: int, folder: Path, deaths: int) -> pd.DataFrame:
    """Seed 0 kills its worker process on its first ``deaths`` attempts, once seed 1 runs (so the
    pool breaks with seed 1 in flight; alone, at once); the other seeds sleep 0.3 s."""
    if seed == 0 and len(list(folder.glob("died*"))) < deaths:
        deadline = time.monotonic() + 20
        while not (folder / "started1").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        (folder / f"died{len(list(folder.glob('died*')))}").write_text("")
        os._exit(3)
    if seed != 0:
        (folder / f"started{seed}").write_text("")
        time.sleep(0.3)
    return pd.DataFrame({"y": [float(seed)]})


def test_a_worker_that_dies_breaks_the_pool_and_its_cells_run_again_alone_without_using_up_their_retry(tmp_path):
    """Seed 0 kills its worker once, seed 1 in flight: both run again, each alone, and succeed (a
    break that is not shown to be one cell's is no cell's attempt); seed 2 runs in a fresh pool."""
    events = []
    study = Study("dies", functools.partial(dies, folder=tmp_path, deaths=1), seeds=[0, 1, 2])
    frames = run_study(study, workers=2, progress=events.append)
    assert frames["dies"]["y"].tolist() == [0.0, 1.0, 2.0] and frames.retried == []
    assert len(list(tmp_path.glob("died*"))) == 1 and "retry" not in [e["event"] for e in events]


def test_a_cell_that_always_kills_its_worker_is_named_and_the_innocent_cell_in_flight_is_kept(tmp_path):
    """Seed 0 kills every worker it runs in, seed 1 in flight the first time: alone, seed 0 breaks
    its pool again (its first attempt), seed 1 succeeds and is cached; seed 0's retry breaks a
    fresh pool, and the study stops with seed 0's error."""
    events, cache = [], tmp_path / "cache"
    study = Study("guilty", functools.partial(dies, folder=tmp_path, deaths=99), seeds=[0, 1])
    with pytest.raises(BrokenProcessPool) as info:
        run_study(study, workers=2, cache=cache, progress=events.append)
    notes = "\n".join(info.value.__notes__)
    assert "for item {'seed': 0} on attempt 2 of 2; attempt 1 raised BrokenProcessPool" in notes
    assert "study 'guilty': 1 of 2 cells done, kept in the cache" in notes
    assert len(list(tmp_path.glob("died*"))) == 3  # with seed 1 in flight, alone, and its retry
    assert [(e["event"], e["cell"]) for e in events if e["event"] in ("retry", "cell")] == \
        [("retry", {"seed": 0}), ("cell", {"seed": 1})]
    kept = run_study(Study("guilty", functools.partial(dies, folder=tmp_path, deaths=99), seeds=[1]), cache=cache)
    assert kept.cached == 1 and kept["guilty"]["y"].tolist() == [1.0]


def fails_fast_or_sleeps(item: int) -> int:
    if item == 0:
        raise ArithmeticError("item 0 always fails")
    time.sleep(0.5)
    return item * 10


def test_a_final_failure_in_the_pool_still_hands_over_the_cells_in_flight():
    """Item 0 fails twice while item 1 runs: item 1's result reaches the caller (who caches it)
    before item 0's error, not waited for and thrown away."""
    got = []
    with pytest.raises(ArithmeticError, match="item 0 always fails"):
        for one in map_cells(fails_fast_or_sleeps, [0, 1], workers=2):
            got.append((one.index, one.value, one.errors))
    assert got == [(1, 10, ())]


def test_a_cell_function_that_cannot_travel_to_ray_is_refused_by_name(ray_up):
    lock = threading.Lock()
    study = Study("locked", lambda seed: pd.DataFrame({"x": [seed]}) if lock else None)
    with pytest.raises(ValueError, match=r"cannot travel to Ray's workers .*must pickle with cloudpickle"):
        run_study(study, executor="ray")


def test_an_unknown_executor_is_refused_by_name():
    with pytest.raises(ValueError, match=r"executor must be one of None, 'process', 'ray', 'auto', "
                                         r"'ray://HOST:PORT', 'HOST:PORT'; got 'dask'"):
        run_study(TRAIN, executor="dask")
    with pytest.raises(ValueError, match="progress must be None, a file's path or a function"):
        run_study(TRAIN, progress=3)
    events = []
    with pytest.raises(ValueError, match="workers must be an integer >= 1, got 0"):
        run_study(TRAIN, workers=0, progress=events.append)
    assert events == []  # refused before the study starts
    assert check_executor("ray://head:10001") == "ray://head:10001" and check_executor("auto") == "auto"
    assert [f.value for f in map_cells(abs, [], executor="ray")] == []  # nothing to run: Ray is not even started


def test_a_worker_of_another_cpu_kind_or_library_version_is_refused_by_name(monkeypatch):
    # what a Ray worker on another machine checks before it runs a cell (no Ray needed: the check is the cell's)
    caller = study_module._environment()
    assert caller[study_module.CPU_CAPABILITY] == torch.backends.cpu.get_cpu_capability()
    out, _ = study_module._run_cell(TRAIN, {"seed": 0, "width": 3}, libraries=caller)  # the same machine: it runs
    assert all(isinstance(f, pd.DataFrame) for f in out.values())
    other = "DEFAULT" if caller[study_module.CPU_CAPABILITY] != "DEFAULT" else "AVX2"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: other)  # a worker whose torch picks other kernels
    with pytest.raises(ValueError, match=rf"this worker runs torch CPU capability {other} \(the caller's: "
                                         rf"{caller[study_module.CPU_CAPABILITY]}\); every machine must run the same "
                                         rf"versions on the same CPU kind"):
        study_module._run_cell(TRAIN, {"seed": 0, "width": 3}, libraries=caller)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"this worker runs numpy \S+ \(the caller's: 0.0\)"):
        study_module._run_cell(TRAIN, {"seed": 0, "width": 3}, libraries={**caller, "numpy": "0.0"})


SLOW = '''
import time

import pandas as pd
import torch

from fedlib.rng import torch_generator


def slow_cell(seed):
    time.sleep(0.25)
    return pd.DataFrame({"x": torch.rand(3, generator=torch_generator(seed), dtype=torch.float64).numpy()})
'''

RUN = '''
import sys

from fedbook import study
from fedbook.study import Study, run_study

study.PACKAGES = {**study.PACKAGES, "slowcells": ()}
import slowcells

run_study(Study("slow", slowcells.slow_cell, seeds=range(6)), cache=sys.argv[1], progress=sys.argv[2])
'''


def test_a_killed_study_resumes_from_the_cells_it_finished(tmp_path, monkeypatch):
    (tmp_path / "slowcells.py").write_text(textwrap.dedent(SLOW))
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(cache), str(tmp_path / "progress.jsonl")], env=env)
    try:
        deadline = time.monotonic() + 60
        while not list(cache.glob("slow/*.json")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    kept = len(list(cache.glob("slow/*.json")))
    assert 1 <= kept < 6, kept
    progress = read_progress(tmp_path / "progress.jsonl")
    assert progress["event"].iloc[0] == "start" and progress["done"].max() in (kept, kept - 1)

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(study_module, "PACKAGES", {**study_module.PACKAGES, "slowcells": ()})
    import slowcells

    study = Study("slow", slowcells.slow_cell, seeds=range(6))
    resumed = run_study(study, cache=cache)
    whole = run_study(study, cache=tmp_path / "uninterrupted")
    assert resumed.cached == kept and whole.cached == 0
    pd.testing.assert_frame_equal(resumed["slow"], whole["slow"], check_exact=True)
