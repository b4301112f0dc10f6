"""What a run produced: :class:`RunResult` (tidy frame, ledger, final states), its results folder
(saved and read back with its manifest checked), and the frame's helpers. Results folders and
checkpoints hold tensors, numbers and strings only, read with ``torch.load(weights_only=True)``,
so opening one that someone shared cannot run code; the states go to files through one pair of
functions (:func:`pack_states`, :func:`unpack_states`), the loop's checkpoints' too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import contextlib
import os
import shutil

from .io import (STORE_ROLE, FolderLock, apply_umask, fsync_folder, load_tensors_json_bytes, remove_stale_temporaries, stale_temporaries,
                 temporary_name, tensors_json_bytes, umask_mode, write_error)
from .messages import Ledger, State, same_arrays
from .metrics import protocol_summary


@dataclass
class RunResult:
    """What a run produced.

    Attributes
    ----------
    frame : tidy DataFrame with columns ``round, client, metric, value`` (``client`` is -1 for
        federation-level rows such as events and dropped updates)
    ledger : the communication ledger
    server : the final server state
    client_states : each client's final persistent state (a dict, or the disk store of
        ``RunOptions(states="disk")``: the same mapping ``client -> State``)
    rounds_done : the last completed round
    algorithm : the algorithm's name
    departed : the clients that left the federation (``leave`` events applied) and did not join
        again, in the order they left
    seconds : wall-clock seconds per round (not part of ``frame``, which is bit-for-bit reproducible)
    server_seconds : wall-clock seconds of the server's aggregation per round (never in the
        server state, which stays bit-for-bit reproducible)
    predictions : with ``RunOptions(keep_predictions=True)``, each client evaluated in the last
        evaluated round: ``{client: (local test predictions, global test predictions)}``, label
        arrays of shape (n_local,) and (n_global,), with a third, the predictions on the client's
        own pool, for a client that has one (:attr:`fedlib.federation.ClientData.pool`; kept in
        memory, not saved; empty when no round was evaluated); ``None`` otherwise
    """

    frame: pd.DataFrame
    ledger: Ledger
    server: State
    client_states: MutableMapping[int, State]
    rounds_done: int
    algorithm: str = ""
    departed: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    server_seconds: list[float] = field(default_factory=list)
    predictions: dict[int, tuple[np.ndarray, np.ndarray]] | None = field(default=None, repr=False)

    @property
    def registered(self) -> list[int]:
        """The clients still in the federation: every client with a state, less :attr:`departed`."""
        gone = set(self.departed)
        return [k for k in sorted(self.client_states) if k not in gone]

    @property
    def dropped(self) -> pd.DataFrame:
        """The clients the run went on without (``LoopConfig(on_failure="drop")``,
        ``on_nonfinite="drop"``), one row per round and client: ``round, client, cause`` (``"no
        reply"`` to training, ``"no evaluation"``, ``"non-finite"`` reply or state); empty when none.

        >>> rows = [(1, -1, "dropped_failed", 2.0), (1, 0, "local", 0.5), (2, -1, "dropped_nonfinite", 0.0)]
        >>> RunResult(tidy_frame(rows), Ledger(), State(), {}, 2).dropped.values.tolist()
        [[1, 2, 'no reply'], [2, 0, 'non-finite']]
        """
        rows = self.frame[self.frame["metric"].isin(list(_DROPPED))]
        return pd.DataFrame({"round": rows["round"].astype(int).to_numpy(), "client": rows["value"].astype(int).to_numpy(),
                             "cause": rows["metric"].map(_DROPPED).to_numpy()})

    def evaluated(self, round_: int | None = None) -> int | None:
        """How many clients round ``round_`` (default: the last evaluated) evaluated when it
        evaluated a sample of them (``LoopConfig(eval_clients=...)``); ``None`` when it evaluated
        every active client. Its means, floors and tails are then the sample's."""
        r = _evaluated_round(self.frame, round_)
        rows = self.frame[(self.frame["round"] == r) & (self.frame["metric"] == "eval_sample")]
        return int(rows["value"].iloc[0]) if len(rows) else None

    def per_client(self, round_: int | None = None) -> pd.DataFrame:
        """Client × metric table at ``round_`` (default: the last evaluated round)."""
        return per_client_table(self.frame, round_)

    def summary(self, round_: int | None = None) -> dict[str, float]:
        """The protocol summary (means, floors, tails) at ``round_``: :func:`fedlib.metrics.protocol_summary`."""
        return protocol_summary(self.per_client(round_))

    def curve(self, metric: str) -> pd.Series:
        """Mean over clients of ``metric`` per evaluated round."""
        f = self.frame[(self.frame["metric"] == metric) & (self.frame["client"] >= 0)]
        return f.groupby("round")["value"].mean()

    def save(self, folder: str | Path, *, wait: float = 60.0) -> Path:
        """Write ``frame.csv``, ``ledger.csv``, ``state.pt`` and ``manifest.json`` (the run's id,
        fedlib's version, the row counts and a SHA-256 digest of each file, which :meth:`load`
        checks) into ``folder``, whole or not at all.

        The files are written first into a temporary folder inside ``folder`` (the digests are
        those of the bytes written) and only then moved into place, the manifest last; a save
        that fails (a full disk, a read-only folder) raises an ``OSError`` that names the file and
        leaves the previous results in ``folder`` as they were, loadable. The folder is locked
        while it is saved into (:class:`fedlib.io.FolderLock`): a second save waits up to ``wait``
        seconds and then replaces the first run whole, or is refused with
        :class:`fedlib.io.FolderInUse` naming the process that holds the folder and what for; never
        a mix of two runs. A save refused by a lock of this very process (another save under way in
        another thread) is refused at once. The folder may be the run's own disk state store
        (``RunOptions(states_dir=...)``, still open): the store's lock then keeps other processes
        out, and its files (``client-<k>.pt``) are left alone. Other files in the folder (a checkpoint, an engine's records) are left alone; the
        lock's file (``.lock``, empty once the save is done) stays.

        ``state.pt`` holds the server's and every client's arrays (tensors) and, as one JSON
        string, the metadata (states' scalars, rounds, departed clients, timings): it is read
        back with ``torch.load(weights_only=True)``, which can run no code."""
        folder = Path(folder)
        ledger_frame = self.ledger.to_frame()
        tensors, metas = pack_states({"server": self.server, **{f"client/{k}": v for k, v in self.client_states.items()}})
        meta = {"states": metas, "rounds_done": self.rounds_done, "algorithm": self.algorithm,
                "departed": list(self.departed), "seconds": self.seconds, "server_seconds": self.server_seconds}
        contents = {"frame.csv": self.frame.to_csv(index=False).encode(),
                    "ledger.csv": ledger_frame.to_csv(index=False).encode(),
                    "state.pt": tensors_json_bytes(tensors, meta)}
        digests = {name: hashlib.sha256(contents[name]).hexdigest() for name in _RESULT_FILES}  # of the bytes written
        manifest = {"format": _MANIFEST_FORMAT, "run_id": hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:16],
                    "fedlib": _fedlib_version(), "algorithm": self.algorithm, "rows": {"frame.csv": len(self.frame),
                                                                                 "ledger.csv": len(ledger_frame)},
                    "sha256": digests}
        contents[MANIFEST] = json.dumps(manifest, indent=1, sort_keys=True).encode()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise write_error(err, folder, "nothing was saved") from err
        own = FolderLock.held_here(folder)
        if own is not None and own.role == STORE_ROLE:
            # the folder is this process's disk state store (states_dir): the store's lock keeps every other process
            # out, and its files (client-<k>.pt) are not the results' files, which are replaced here whole as always
            _replace_whole(folder, contents)
            return folder
        lock = FolderLock(folder, "results folder", role="results save", wait=wait)
        try:
            lock.acquire()
        except OSError as err:
            kept = f"the previous results in {folder} are unchanged" if (folder / MANIFEST).exists() else "nothing was saved"
            raise write_error(err, folder / FolderLock.NAME, kept) from err
        with lock:
            _replace_whole(folder, contents)
        return folder

    @staticmethod
    def check_folder(folder: str | Path) -> dict:
        """The manifest of a results folder once every file it names is found whole: present, with
        its digest; a ``ValueError`` names the folder and the first file that is missing, cut,
        changed or from another run (or says the manifest is missing: the save did not finish)."""
        return RunResult._checked_bytes(Path(folder))[0]

    @staticmethod
    def _checked_bytes(folder: Path) -> tuple[dict, dict[str, bytes]]:
        """The manifest and each result file's bytes, read once and checked against it."""
        path = folder / MANIFEST
        if not path.exists():
            kept = sorted(folder.glob(f".{_PREVIOUS}.*.tmp")) if folder.is_dir() else []
            hint = (f"; an interrupted save left the previous results in {kept[0]} (move its files back into {folder} "
                    "to read them)" if kept else "")
            raise ValueError(f"{folder} has no {MANIFEST}: the save did not finish (or is in progress), or it is not a "
                             f"folder RunResult.save wrote; refusing to read a results folder that may be partial{hint}")
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:  # a save moved it aside between the check and the read
            raise ValueError(f"{folder}: {MANIFEST} went away while being read (a save is in progress); "
                             "refusing to read a results folder that may be partial") from None
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"{path} is not readable JSON ({err}); the folder's results are refused") from None
        if not isinstance(manifest, dict) or manifest.get("format") != _MANIFEST_FORMAT or not isinstance(manifest.get("sha256"), dict):
            raise ValueError(f"{path} is not a fedlib results manifest (format {_MANIFEST_FORMAT!r})")
        contents = {}
        for name in _RESULT_FILES:
            try:  # read, not checked then read: a save may move the file between the two
                contents[name] = (folder / name).read_bytes()
            except FileNotFoundError:
                raise ValueError(f"{folder}: {name} is missing (the manifest of run {manifest.get('run_id')} lists it; "
                                 "a save may be in progress)") from None
            if hashlib.sha256(contents[name]).hexdigest() != manifest["sha256"].get(name):
                raise ValueError(f"{folder}: {name} does not match the manifest of run {manifest.get('run_id')} (cut, "
                                 "changed, or written by another run); refusing to read the folder")
        return manifest, contents

    @classmethod
    def load(cls, folder: str | Path) -> "RunResult":
        """Read back what :meth:`save` wrote: the folder is checked against its manifest first
        (:meth:`check_folder`), and a ``state.pt`` that holds anything but tensors, numbers and
        strings is refused (:func:`fedlib.io.load_tensors_json`)."""
        folder = Path(folder)
        manifest, contents = cls._checked_bytes(folder)  # the bytes checked are the bytes parsed
        frame = pd.read_csv(io.BytesIO(contents["frame.csv"]),
                            dtype={"round": "int64", "client": "int64", "metric": str, "value": "float64"})
        ledger = Ledger(pd.read_csv(io.BytesIO(contents["ledger.csv"])).itertuples(index=False, name=None))
        rows = {"frame.csv": len(frame), "ledger.csv": len(ledger.records)}
        if rows != manifest.get("rows"):
            raise ValueError(f"{folder}: the files hold {rows} rows, the manifest says {manifest.get('rows')}")
        tensors, meta = load_tensors_json_bytes(contents["state.pt"], folder / "state.pt")
        states = unpack_states(tensors, meta["states"])
        return cls(
            frame=frame,
            ledger=ledger,
            server=states.pop("server"),
            client_states={int(name.split("/", 1)[1]): st for name, st in states.items()},
            rounds_done=int(meta["rounds_done"]),
            algorithm=str(meta["algorithm"]),
            departed=[int(k) for k in meta["departed"]],
            seconds=[float(v) for v in meta["seconds"]],
            server_seconds=[float(v) for v in meta["server_seconds"]],
        )


MANIFEST = "manifest.json"
"""The file :meth:`RunResult.save` writes last into a results folder: run id, fedlib version, row counts, digests."""
_MANIFEST_FORMAT = "fedlib-run-1"
_RESULT_FILES = ("frame.csv", "ledger.csv", "state.pt")


_DROPPED = {"dropped_failed": "no reply", "dropped_failed_eval": "no evaluation", "dropped_nonfinite": "non-finite"}
"""The frame's rows of a dropped client (the loop's ``LoopConfig(on_failure=..., on_nonfinite=...)``) and their causes."""


def _fedlib_version() -> str:
    try:
        return importlib.metadata.version("fedlib")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_SAVE, _PREVIOUS = "save", "previous"  # the names of a save's temporary folders (fedlib.io.temporary_name)


def _replace_whole(folder: Path, contents: dict[str, bytes]) -> None:
    """Put ``contents`` (file name -> bytes, the manifest among them) into ``folder`` whole or not
    at all: written and flushed into a temporary folder first, then the old files moved aside
    into another, the new moved in (the manifest last) and the old removed; any failure puts the
    old files back. The caller holds the folder's lock."""
    for stale in stale_temporaries(folder):  # a save killed while it swapped: its previous files come back first
        if stale.is_dir() and stale.name.startswith(f".{_PREVIOUS}.") and not (folder / MANIFEST).exists():
            for f in stale.iterdir():
                if f.name in contents:
                    os.replace(f, folder / f.name)
    remove_stale_temporaries(folder)
    had_results = (folder / MANIFEST).exists()
    kept = f"the previous results in {folder} are unchanged" if had_results else f"nothing was saved in {folder}"
    staging = folder / temporary_name(_SAVE)
    name = staging.name
    try:
        staging.mkdir(mode=umask_mode(directory=True))
        apply_umask(staging)
        for name in contents:
            with open(os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, umask_mode()), "wb") as f:
                f.write(contents[name])
                f.flush()
                os.fsync(f.fileno())
        fsync_folder(staging)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise write_error(err, folder / name, kept) from err
    previous = folder / temporary_name(_PREVIOUS)
    old = [n for n in (MANIFEST, *_RESULT_FILES) if (folder / n).exists()]  # the manifest first: the old run stops being whole
    moved_aside: list[str] = []
    moved_in: list[str] = []
    try:
        if old:
            previous.mkdir(mode=umask_mode(directory=True))
            for n in old:
                os.replace(folder / n, previous / n)
                moved_aside.append(n)
        for n in (*_RESULT_FILES, MANIFEST):  # the manifest last: the new run is whole only once every file is in
            os.replace(staging / n, folder / n)
            moved_in.append(n)
        fsync_folder(folder)
    except BaseException as err:
        for n in moved_in:
            with contextlib.suppress(OSError):
                (folder / n).unlink()
        for n in moved_aside:
            with contextlib.suppress(OSError):
                os.replace(previous / n, folder / n)
        restored = all((folder / n).exists() for n in old)
        shutil.rmtree(staging, ignore_errors=True)
        if restored:
            shutil.rmtree(previous, ignore_errors=True)
        if isinstance(err, OSError):
            raise write_error(err, folder, kept if restored else f"the previous results could not all be put back; "
                                                                 f"they are in {previous}") from err
        raise
    shutil.rmtree(previous, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


def pack_states(states: dict[str, State]) -> tuple[dict[str, torch.Tensor], dict[str, dict]]:
    """``{owner: State}`` -> tensors ``{"owner|array name": tensor}`` and JSON-able metadata
    (:func:`unpack_states` reads them back)."""
    tensors, metas = {}, {}
    for owner, st in states.items():
        for name, t in st.arrays.items():
            tensors[f"{owner}|{name}"] = t
        metas[owner] = {"meta": st.meta, "arrays": list(st.arrays)}
    return tensors, metas


def unpack_states(tensors: dict[str, torch.Tensor], metas: dict[str, dict]) -> dict[str, State]:
    """What :func:`pack_states` wrote, as ``{owner: State}``."""
    return {owner: State(arrays={name: tensors[f"{owner}|{name}"] for name in m["arrays"]}, meta=dict(m["meta"]))
            for owner, m in metas.items()}


def _evaluations(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of client evaluations (not training losses, not federation-level rows)."""
    return frame[(frame["client"] >= 0) & (frame["metric"] != "train_loss")]


def _evaluated_round(frame: pd.DataFrame, round_: int | None) -> int:
    """``round_`` checked to hold client evaluations, or (``None``) the last round that does."""
    f = _evaluations(frame)
    if f.empty:
        raise ValueError("this frame has no client evaluations")
    r = int(f["round"].max()) if round_ is None else int(round_)
    if r not in set(f["round"]):
        raise ValueError(f"no client evaluations in round {r}; evaluated rounds: {sorted(set(f['round']))}")
    return r


def run_differences(a: RunResult, b: RunResult) -> list[str]:
    """What differs between two runs, bit for bit: ``"server"`` (its arrays or metadata),
    ``"client <k>"`` (a client's state, or a client only one run has), ``"frame"`` (the tidy
    results), ``"ledger"``; empty when the runs are identical (e.g. one engine against another).

    >>> same = RunResult(tidy_frame([(1, 0, "local", 0.5)]), Ledger(), State(), {}, 1)
    >>> run_differences(same, same), run_differences(same, RunResult(tidy_frame([]), Ledger(), State(), {}, 1))
    ([], ['frame'])
    """
    out = []
    if not (same_arrays(a.server.arrays, b.server.arrays) and a.server.meta == b.server.meta):
        out.append("server")
    for k in sorted(set(a.client_states) | set(b.client_states)):
        sa, sb = a.client_states.get(k), b.client_states.get(k)
        if sa is None or sb is None or not (same_arrays(sa.arrays, sb.arrays) and sa.meta == sb.meta):
            out.append(f"client {k}")
    if not a.frame.equals(b.frame):
        out.append("frame")
    if a.ledger.records != b.ledger.records:
        out.append("ledger")
    return out


def per_client_table(frame: pd.DataFrame, round_: int | None = None) -> pd.DataFrame:
    """Client × metric table of a tidy results ``frame`` at ``round_`` (default: its last round
    with client rows); ``train_loss`` is left out, so the table feeds
    :func:`fedlib.metrics.protocol_summary` directly."""
    f = _evaluations(frame)
    r = _evaluated_round(frame, round_)
    wide = f[f["round"] == r].pivot(index="client", columns="metric", values="value")
    wide.columns.name = None
    return wide


def tidy_frame(rows: list[tuple]) -> pd.DataFrame:
    """The tidy frame ``round, client, metric, value`` of ``(round, client, metric, value)`` rows."""
    frame = pd.DataFrame(rows, columns=["round", "client", "metric", "value"])
    return frame.astype({"round": "int64", "client": "int64", "metric": str, "value": "float64"})


__all__ = ["MANIFEST", "RunResult", "pack_states", "per_client_table", "run_differences", "tidy_frame",
           "unpack_states"]
