"""Saves, stores and files under faults (issue 42, items 1, 2 and 5): two processes racing on one
results folder or one disk state store, a full disk (simulated, and a real 2 MB tmpfs where the
machine lets a test mount one), the files' permissions under a umask and the temporary files an
interrupted write leaves behind."""

from __future__ import annotations

import errno
import functools
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedlib.algorithms import Ditto, FedAvg
from fedlib.data import make_gaussian_mixture
from fedlib.federation import make_federation
from fedlib.io import (FolderInUse, FolderLock, FolderLockWarning, atomic_write_json, load_tensors_json, remove_stale_temporaries,
                       save_tensors_json, temporary_name, temporary_sibling)
from fedlib.loop import LoopConfig
from fedlib.messages import Ledger, State
from fedlib.models import build_model
from fedlib.results import MANIFEST, RunResult, run_differences, tidy_frame
from fedlib.run import RunOptions, run_federated
from fedlib.store import DiskStates
from fedlib.training import TrainConfig

if sys.platform != "linux":  # fork, /proc and flock: the faults are provoked the Linux way
    pytest.skip("the fault tests provoke their faults through Linux (fork, /proc, tmpfs)", allow_module_level=True)

TRAIN = TrainConfig(epochs=1, batch_size=16, lr=0.05)
FORK = multiprocessing.get_context("fork")
RESULT_FILES = {MANIFEST, "frame.csv", "ledger.csv", "state.pt"}


@pytest.fixture(scope="module")
def federation():
    ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    return make_federation(ds, n_clients=3, partition="dirichlet", alpha=0.5, min_size=8, global_test_per_class=5, seed=0)


MODEL_FN = functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4, hidden=(8,))


def _tagged_run(tag: int, n: int = 50_000) -> RunResult:
    """A run whose every file says ``tag``: the frame's value, the server's array, the algorithm's name."""
    return RunResult(frame=tidy_frame([(1, 0, "local", float(tag))]), ledger=Ledger(),
                     server=State(arrays={"w": torch.full((n,), float(tag))}), client_states={}, rounds_done=1,
                     algorithm=f"run{tag}")


def _tag_of(folder: Path) -> int:
    """The tag of the run loaded from ``folder``; an AssertionError if its files are of two runs."""
    back = RunResult.load(folder)
    tags = {back.frame["value"].iloc[0], back.server.arrays["w"][0].item(), back.server.arrays["w"][-1].item(),
            float(back.algorithm[3:])}
    assert len(tags) == 1, f"a mix of two runs in {folder}: {tags}"
    return int(tags.pop())


def _save_many(run: RunResult, folder: str, times: int) -> None:
    for _ in range(times):  # (the run is made before the fork: the child computes nothing with torch)
        run.save(folder, wait=60.0)


# --- item 1: two writers -----------------------------------------------------------------------


def test_two_processes_racing_saves_into_one_folder_leave_one_whole_run_never_a_mix(tmp_path):
    folder = tmp_path / "shared"
    writers = [FORK.Process(target=_save_many, args=(_tagged_run(tag), str(folder), 12)) for tag in (1, 2)]
    for w in writers:
        w.start()
    loaded, refused = [], 0
    while any(w.is_alive() for w in writers):  # read while they write: a whole run or a refusal
        try:
            loaded.append(_tag_of(folder))
        except ValueError:  # no manifest yet / a save moving its files in
            refused += 1
    for w in writers:
        w.join()
    assert [w.exitcode for w in writers] == [0, 0]
    assert _tag_of(folder) in (1, 2)
    assert set(loaded) <= {1, 2}
    assert {p.name for p in folder.iterdir()} == RESULT_FILES | {FolderLock.NAME}  # no temporary left


def _hold(folder: str, ready, done, what: str) -> None:
    if what == "store":
        states = DiskStates(folder)
        states[0] = State(arrays={"w": torch.ones(2)})
    else:
        lock = FolderLock(folder, "results folder", role="results save").acquire()  # noqa: F841 (held until the process ends)
    ready.set()
    done.wait(60)


def _holder(folder: Path, what: str):
    ready, done = FORK.Event(), FORK.Event()
    proc = FORK.Process(target=_hold, args=(str(folder), ready, done, what))
    proc.start()
    assert ready.wait(60)
    return proc, done


def test_a_results_folder_another_process_is_saving_into_is_refused_naming_that_process(tmp_path):
    folder = tmp_path / "res"
    proc, done = _holder(folder, "results")
    try:
        with pytest.raises(FolderInUse, match=rf"results folder {folder} is in use by process {proc.pid} on \S+ for its results save \(command: "):
            _tagged_run(1).save(folder, wait=0.2)
        assert not (folder / MANIFEST).exists()
    finally:
        done.set()
        proc.join()
    _tagged_run(1).save(folder, wait=0.0)  # the holder is gone: so is its lock
    assert _tag_of(folder) == 1


def test_a_disk_state_store_in_use_by_another_run_is_refused_and_freed_when_that_process_dies(federation, tmp_path):
    folder = tmp_path / "states"
    proc, done = _holder(folder, "store")
    try:
        with pytest.raises(FolderInUse, match=rf"state folder {folder} is in use by process {proc.pid} on \S+ for its state store \("):
            run_federated(Ditto(train=TRAIN, personal_train=TRAIN), federation, MODEL_FN, LoopConfig(rounds=1),
                          RunOptions(states="disk", states_dir=str(folder)))
        assert len(list(folder.glob("client-*.pt"))) == 1  # the other run's state untouched
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # killed, not closed: the lock goes with the process
        proc.join()
    states = DiskStates(folder, overwrite=True)
    states[1] = State(arrays={"w": torch.zeros(1)})
    assert sorted(p.name for p in folder.glob("client-*.pt")) == ["client-1.pt"]


def test_a_second_store_of_a_folder_in_one_process_takes_it_over_and_the_first_may_not_write(tmp_path):
    first = DiskStates(tmp_path / "s")
    first[0] = State(arrays={"w": torch.ones(1)})
    second = DiskStates(tmp_path / "s", overwrite=True)  # a resumed run in the same process
    with pytest.raises(RuntimeError, match="no longer owns .*a newer store of the same folder in this process"):
        first[0] = State(arrays={"w": torch.zeros(1)})
    second[0] = State(arrays={"w": torch.full((1,), 3.0)})
    assert second[0].arrays["w"].item() == 3.0
    second.close()
    with pytest.raises(RuntimeError, match="the store was closed"):
        second[1] = State(arrays={"w": torch.ones(1)})


def test_the_manifest_digests_are_of_the_bytes_written_not_read_back(tmp_path, monkeypatch):
    import hashlib

    folder = _tagged_run(4).save(tmp_path / "r")
    import json

    manifest = json.loads((folder / MANIFEST).read_text())
    for name in ("frame.csv", "ledger.csv", "state.pt"):
        assert manifest["sha256"][name] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
    # the save reads nothing back from the folder: a frame.csv swapped in by another writer cannot be vouched for
    opened = []
    real_open = open

    def spy(file, mode="r", *a, **k):
        if "r" in str(mode) and Path(str(file)).parent == folder:
            opened.append(Path(str(file)).name)
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr("builtins.open", spy)
    _tagged_run(5).save(folder)
    monkeypatch.undo()
    assert opened == [] and _tag_of(folder) == 5


# --- item 2: a failed save, a full disk --------------------------------------------------------


def _no_space(fail_on: str = ""):
    """An ``os.fsync`` that fails with ENOSPC (for a file whose name holds ``fail_on``)."""
    real = os.fsync

    def fsync(fd):
        name = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if fail_on in Path(name).name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    return fsync


def test_a_save_that_fails_on_a_full_disk_keeps_the_previous_results_loadable_and_names_the_file(tmp_path, monkeypatch):
    folder = _tagged_run(1).save(tmp_path / "r")
    monkeypatch.setattr(os, "fsync", _no_space("state.pt"))
    with pytest.raises(OSError, match=rf"No space left on device writing {folder}/state.pt; the previous results in "
                                      rf"{folder} are unchanged") as err:
        _tagged_run(2).save(folder)
    assert err.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert _tag_of(folder) == 1
    assert {p.name for p in folder.iterdir()} == RESULT_FILES | {FolderLock.NAME}
    fresh = tmp_path / "fresh"
    monkeypatch.setattr(os, "fsync", _no_space("frame.csv"))
    with pytest.raises(OSError, match=rf"writing {fresh}/frame.csv; nothing was saved in {fresh}"):
        _tagged_run(2).save(fresh)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="has no manifest.json"):
        RunResult.load(fresh)


def test_a_save_that_fails_while_moving_its_files_in_puts_the_previous_results_back(tmp_path, monkeypatch):
    folder = _tagged_run(1).save(tmp_path / "r")
    real = os.replace

    def replace(src, dst):
        if Path(dst) == folder / "ledger.csv" and ".save." in str(src):
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match=rf"Input/output error writing {folder}; the previous results in {folder} are unchanged"):
        _tagged_run(2).save(folder)
    monkeypatch.undo()
    assert _tag_of(folder) == 1
    assert {p.name for p in folder.iterdir()} == RESULT_FILES | {FolderLock.NAME}


def test_a_checkpoint_and_a_state_file_on_a_full_disk_keep_their_previous_version_and_name_the_file(tmp_path, monkeypatch):
    ckpt = tmp_path / "ck.pt"
    save_tensors_json(ckpt, {"w": torch.ones(2)}, {"round": 1})
    states = DiskStates(tmp_path / "states")
    states[3] = State(arrays={"w": torch.ones(2)})
    monkeypatch.setattr(os, "fsync", _no_space())
    with pytest.raises(OSError, match=rf"No space left on device writing {ckpt}; the previous {ckpt} is unchanged"):
        save_tensors_json(ckpt, {"w": torch.zeros(2)}, {"round": 2})
    state_file = tmp_path / "states" / "client-3.pt"
    with pytest.raises(OSError, match=rf"writing {state_file}; the previous {state_file} is unchanged"):
        states[3] = State(arrays={"w": torch.zeros(2)})
    monkeypatch.undo()
    assert load_tensors_json(ckpt)[1] == {"round": 1}
    assert states[3].arrays["w"].tolist() == [1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt", "states"]


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_a_real_full_disk_of_2_mb_keeps_the_previous_results_checkpoint_and_states(tmp_path):
    disk = tmp_path / "tmpfs"
    if not _mount_tmpfs(disk, "2m"):
        pytest.skip("this machine does not let the test mount a 2 MB tmpfs (needs root); the simulated ENOSPC "
                    "tests above cover the same code")
    try:
        folder = _tagged_run(1, n=100_000).save(disk / "r")  # 400 KB
        with pytest.raises(OSError, match=rf"No space left on device writing {folder}/state.pt; the previous results"):
            _tagged_run(2, n=500_000).save(folder)  # 2 MB more: does not fit
        assert _tag_of(folder) == 1
        ckpt = disk / "ck.pt"
        save_tensors_json(ckpt, {"w": torch.ones(100_000)}, {"round": 1})
        with pytest.raises(OSError, match=rf"No space left on device writing {ckpt}; the previous {ckpt} is unchanged"):
            save_tensors_json(ckpt, {"w": torch.zeros(500_000)}, {"round": 2})
        assert load_tensors_json(ckpt)[1] == {"round": 1}
        states = DiskStates(disk / "states")
        states[0] = State(arrays={"w": torch.ones(10)})
        with pytest.raises(OSError, match=r"No space left on device writing .*client-0.pt; the previous"):
            states[0] = State(arrays={"w": torch.zeros(500_000)})
        assert states[0].arrays["w"].tolist() == [1.0] * 10
        states.close()
        leftovers = [p.name for p in disk.rglob(".*") if p.name != FolderLock.NAME]
        assert leftovers == []
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, timeout=30)


# --- item 5: file modes, temporary files ------------------------------------------------------


def _modes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): oct(p.stat().st_mode & 0o777) for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("mask, file_mode, folder_mode", [(0o002, "0o664", "0o775"), (0o077, "0o600", "0o700")])
def test_every_file_written_has_the_umasks_mode(federation, tmp_path, mask, file_mode, folder_mode):
    from fedbook.page import save_frames

    old = os.umask(mask)
    try:
        options = RunOptions(states="disk", states_dir=str(tmp_path / "states"), checkpoint=str(tmp_path / "ck" / "run.pt"))
        run = run_federated(Ditto(train=TRAIN, personal_train=TRAIN), federation, MODEL_FN, LoopConfig(rounds=1), options)
        run.save(tmp_path / "results")
        run.client_states.close()
        save_frames({"runs": run.frame}, tmp_path / "chapter")  # a chapter's tidy results
        atomic_write_json(tmp_path / "chapter" / "record.json", {"seconds": 1.0})  # a chapter's record (book/build.py)
    finally:
        os.umask(old)
    modes = _modes(tmp_path)
    assert {"states/client-0.pt", "ck/run.pt", "results/state.pt", "results/manifest.json", "results/.lock",
            "chapter/runs.csv", "chapter/record.json"} <= set(modes)
    assert {name: m for name, m in modes.items() if (tmp_path / name).is_file() and m != file_mode} == {}
    assert {name: m for name, m in modes.items() if (tmp_path / name).is_dir() and m != folder_mode} == {}


def _interrupted(path: str, suffix: str = ".tmp") -> None:
    fd, _ = temporary_sibling(Path(path), suffix=suffix)
    os.write(fd, b"half a checkpoint")
    os.kill(os.getpid(), signal.SIGKILL)  # killed in the middle of the write


def test_the_temporary_file_of_an_interrupted_write_is_removed_by_the_next_write(tmp_path):
    ckpt = tmp_path / "run.pt"
    proc = FORK.Process(target=_interrupted, args=(str(ckpt),))
    proc.start()
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    [left] = [p.name for p in tmp_path.iterdir()]
    assert left.startswith(".run.pt.") and left.endswith(".tmp")
    mine = temporary_sibling(tmp_path / "other.pt")  # this process's write in flight: kept
    foreign = tmp_path / ".x.csv.abcdef-1.zz.tmp"  # another machine's, fresh: kept
    foreign.write_text("?")
    unrelated = tmp_path / ".hidden.tmp"
    unrelated.write_text("not ours")
    save_tensors_json(ckpt, {"w": torch.ones(1)}, {"round": 1})
    os.close(mine[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.pt", mine[1].name, foreign.name, unrelated.name])
    os.utime(foreign, (time.time() - 2 * 24 * 3600,) * 2)  # two days old: stale
    assert remove_stale_temporaries(tmp_path) == [foreign]  # (a process sweeps a folder at its first write into it)


def test_a_save_killed_while_it_moved_its_files_is_refused_naming_where_the_previous_results_are(tmp_path):
    folder = _tagged_run(1).save(tmp_path / "r")

    def killed_mid_swap():
        previous = folder / temporary_name("previous")
        previous.mkdir()
        for name in (MANIFEST, "frame.csv"):
            os.replace(folder / name, previous / name)
        os.kill(os.getpid(), signal.SIGKILL)

    proc = FORK.Process(target=killed_mid_swap)
    proc.start()
    proc.join()
    with pytest.raises(ValueError, match=r"has no manifest.json: .*an interrupted save left the previous results in "
                                         r".*\.previous\..*\.tmp"):
        RunResult.load(folder)
    _tagged_run(2).save(folder)  # the next save puts them back, then replaces them whole
    assert _tag_of(folder) == 2
    assert {p.name for p in folder.iterdir()} == RESULT_FILES | {FolderLock.NAME}


def test_a_run_saved_twice_and_loaded_is_the_same_run(federation, tmp_path):
    run = run_federated(FedAvg(train=TRAIN), federation, MODEL_FN, LoopConfig(rounds=2, eval_every=1))
    run.save(tmp_path / "r")
    run.save(tmp_path / "r")
    assert run_differences(run, RunResult.load(tmp_path / "r")) == []


def test_the_notebook_an_interrupted_chapter_build_left_is_removed_at_the_next_build(tmp_path):
    chapter = tmp_path / "chapters" / "setting.ipynb"  # book/build.py's execute_chapter writes through temporary_sibling
    chapter.parent.mkdir()
    proc = FORK.Process(target=_interrupted, args=(str(chapter), ".ipynb"))
    proc.start()
    proc.join()
    [left] = list(chapter.parent.iterdir())
    assert left.name.startswith(".setting.ipynb.") and left.suffix == ".ipynb"
    (chapter.parent / "setting.json").write_text("{}")
    assert remove_stale_temporaries(chapter.parent) == [left]
    assert [p.name for p in chapter.parent.iterdir()] == ["setting.json"]


def test_a_refused_second_store_leaves_the_folder_to_the_first_and_a_copy_holds_no_lock(tmp_path):
    import copy
    import pickle

    first = DiskStates(tmp_path / "s")
    first[0] = State(arrays={"w": torch.ones(1)})
    with pytest.raises(ValueError, match="already holds 1 client state file"):
        DiskStates(tmp_path / "s")  # refused: the first store goes on writing
    first[1] = State(arrays={"w": torch.ones(1)})
    lock = FolderLock(tmp_path / "other").acquire()
    for twin in (copy.deepcopy(lock), pickle.loads(pickle.dumps(lock))):
        assert not twin.held
        twin.release()  # closes nothing of the original's
    assert lock.held and os.fstat(lock._fd)
    lock.release()


@pytest.mark.notebook
def test_a_smoke_builds_files_have_the_umasks_mode_no_temporaries_and_whole_results_folders(smoke_out):
    """The setting chapter (tidy tables) and GGEUR's experiments (run folders) of the session's smoke build."""
    import importlib.util

    from fedlib.io import current_umask

    spec = importlib.util.spec_from_file_location("book_build", Path(__file__).resolve().parent.parent / "book" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.build("smoke", ["setting", "ggeur_experiments"], {}, render=False, force=False, out=smoke_out) == 0
    files = [p for d in ("chapters", "results") for p in sorted((smoke_out / d).rglob("*")) if p.is_file()]
    mode = 0o666 & ~current_umask()
    assert len(files) > 20
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in files if p.stat().st_mode & 0o777 != mode} == {}
    assert [p for p in files if p.name.startswith(".") and p.name != FolderLock.NAME] == []  # no temporary left
    runs = sorted((smoke_out / "results" / "ggeur_experiments").rglob(MANIFEST))
    assert runs
    for manifest in runs:
        assert {p.name for p in manifest.parent.iterdir()} == RESULT_FILES | {FolderLock.NAME}
        RunResult.check_folder(manifest.parent)


def test_a_flower_jobs_checkpoint_may_not_take_the_name_of_the_results_folders_lock():
    from fedlib.engines.flower.job import _check_checkpoint

    with pytest.raises(ValueError, match=r"checkpoint may not be named '\.lock'"):
        _check_checkpoint(FolderLock.NAME)
    assert _check_checkpoint("checkpoint.pt") == "checkpoint.pt"


def test_a_run_saved_into_its_own_disk_state_folder_is_saved_at_once_beside_the_states(federation, tmp_path):
    folder = tmp_path / "run"  # states_dir and results folder at once, as before the folders were locked
    run = run_federated(Ditto(train=TRAIN, personal_train=TRAIN), federation, MODEL_FN, LoopConfig(rounds=1),
                        RunOptions(states="disk", states_dir=str(folder)))
    clients = sorted(p.name for p in folder.glob("client-*.pt"))
    assert len(clients) == 3
    start = time.monotonic()
    run.save(folder)  # the store of this very process holds the folder: no wait for itself
    assert time.monotonic() - start < 10
    assert run_differences(run, RunResult.load(folder)) == []
    assert sorted(p.name for p in folder.glob("client-*.pt")) == clients  # the store's files left alone
    run.client_states[0] = run.client_states[0]  # and the store still owns its folder
    with pytest.raises(FolderInUse, match=rf"state folder {folder} is in use by process {os.getpid()} on \S+ "
                                          r"\(this process\) for its state store"):
        FolderLock(folder, "state folder", wait=30).acquire()
    run.client_states.close()


def test_a_second_lock_in_the_same_process_is_refused_at_once_naming_the_role_of_the_first(tmp_path):
    with FolderLock(tmp_path, "results folder", role="results save"):
        start = time.monotonic()
        with pytest.raises(FolderInUse, match=r"\(this process\) for its results save"):
            FolderLock(tmp_path, "results folder", wait=30).acquire()
        with pytest.raises(FolderInUse, match=r"\(this process\) for its results save"):
            _tagged_run(1).save(tmp_path, wait=30)  # a save under way in another thread: refused, never waited for
        assert time.monotonic() - start < 5
    assert FolderLock.held_here(tmp_path) is None
    _tagged_run(1).save(tmp_path, wait=0)
    assert _tag_of(tmp_path) == 1


def _no_flock(monkeypatch):
    import fedlib.io

    def flock(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fedlib.io.fcntl, "flock", flock)


def test_without_file_locks_a_live_owner_of_this_machine_is_refused_and_the_missing_protection_is_said(tmp_path, monkeypatch):
    import json
    import socket

    _no_flock(monkeypatch)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / FolderLock.NAME).write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname(),
                                                            "command": "sleeper", "since": "now", "role": "results save"}) + "\n")
        with pytest.warns(FolderLockWarning, match="no locks"):
            with pytest.raises(FolderInUse, match=rf"in use by process {sleeper.pid} on \S+ for its results save \(command: sleeper"):
                FolderLock(tmp_path, "results folder").acquire()
        assert "sleeper" in (tmp_path / FolderLock.NAME).read_text()  # the live owner's record is kept
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.warns(FolderLockWarning, match="guarded by its owner record only"):
        lock = FolderLock(tmp_path, "results folder").acquire()  # the owner is dead: its record is taken over
    assert json.loads((tmp_path / FolderLock.NAME).read_text())["pid"] == os.getpid()
    lock.release()


def test_the_owner_record_is_never_empty_or_cut_while_a_lock_is_taken(tmp_path, monkeypatch):
    import json

    import fedlib.io

    (tmp_path / FolderLock.NAME).write_text(json.dumps({"pid": 1, "host": "a-previous-owner-with-a-long-name" * 4}) + "\n")
    seen = []
    lock = FolderLock(tmp_path, "results folder", role="results save")
    real = {name: getattr(os, name) for name in ("ftruncate", "pwrite")}

    def watched(name):
        def call(fd, *args):
            out = real[name](fd, *args)
            seen.append(lock._refusal(fd))  # what a refused process reading the record now would print
            return out
        return call

    for name in real:
        monkeypatch.setattr(fedlib.io.os, name, watched(name))
    lock.acquire()
    monkeypatch.undo()
    assert len(seen) == 2 and all(f"process {os.getpid()} on" in text and "for its results save" in text for text in seen), seen
    lock.release()


def test_a_lock_file_deleted_by_its_holder_before_it_was_locked_is_not_the_lock_taken(tmp_path, monkeypatch):
    import fedlib.io

    real = fedlib.io.fcntl.flock
    deleted = []

    def flock(fd, op):
        if not deleted:  # the holder's DiskStates.remove() deletes the file this process opened, then lets it go
            (tmp_path / "s" / FolderLock.NAME).unlink()
            deleted.append(True)
        return real(fd, op)

    monkeypatch.setattr(fedlib.io.fcntl, "flock", flock)
    lock = FolderLock(tmp_path / "s", "state folder").acquire()
    assert os.path.samestat(os.fstat(lock._fd), os.stat(tmp_path / "s" / FolderLock.NAME))  # the folder's lock file
    lock.release()


def test_a_removed_store_lets_its_folder_go_to_the_next(tmp_path):
    states = DiskStates(tmp_path / "s")
    states[0] = State(arrays={"w": torch.ones(1)})
    states.remove()
    assert not (tmp_path / "s").exists() and FolderLock.held_here(tmp_path / "s") is None
    again = DiskStates(tmp_path / "s")
    again[0] = State(arrays={"w": torch.ones(1)})
    assert FolderLock.held_here(tmp_path / "s") is again._lock
    again.close()


def test_the_pdf_exports_files_have_the_umasks_mode_and_the_process_umask_is_never_changed(tmp_path, monkeypatch):
    import importlib.util

    from pypdf import PdfWriter

    spec = importlib.util.spec_from_file_location("book_pdf_modes", Path(__file__).resolve().parent.parent / "book" / "pdf.py")
    pdf = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, pdf)  # (its dataclasses look their module up)
    spec.loader.exec_module(pdf)
    site = tmp_path / "html"
    (site / "pdf").mkdir(parents=True)
    root = site / "intro.html"
    root.write_text("<html><body><article><h1>Title</h1><p>text</p></article></body></html>")
    book, page = site / "pdf" / "book.pdf", site / "pdf" / "intro.pdf"
    writer = PdfWriter()
    writer.add_blank_page(72, 72)
    old = os.umask(0o002)
    try:
        def umask(mask):  # process-global: while flipped to 0, any other thread's new file would be world-writable
            raise AssertionError("os.umask called by the PDF export")

        monkeypatch.setattr(os, "umask", umask)
        pdf._write(writer, book)
        pdf._write(writer, page)
        pdf.link_landing(site, root, book, {"intro": page}, 1, reference={})
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert 'href="pdf/book.pdf"' in root.read_text()
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in (book, page, root)} == \
        {"book.pdf": "0o664", "intro.pdf": "0o664", "intro.html": "0o664"}
