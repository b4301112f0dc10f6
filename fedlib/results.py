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

from .io import atomic_write_bytes, load_tensors_json_bytes, save_tensors_json
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

    def save(self, folder: str | Path) -> Path:
        """Write ``frame.csv``, ``ledger.csv`` and ``state.pt`` into ``folder`` (atomically),
        then, last, ``manifest.json``: the run's id, fedlib's version, the row counts and a
        SHA-256 digest of each file, which :meth:`load` checks.

        ``state.pt`` holds the server's and every client's arrays (tensors) and, as one JSON
        string, the metadata (states' scalars, rounds, departed clients, timings): it is read
        back with ``torch.load(weights_only=True)``, which can run no code."""
        folder = Path(folder)
        (folder / MANIFEST).unlink(missing_ok=True)  # a folder saved into again: never a stale manifest beside new files
        frame_csv = self.frame.to_csv(index=False).encode()
        ledger_frame = self.ledger.to_frame()
        atomic_write_bytes(folder / "frame.csv", frame_csv)
        atomic_write_bytes(folder / "ledger.csv", ledger_frame.to_csv(index=False).encode())
        tensors, metas = pack_states({"server": self.server, **{f"client/{k}": v for k, v in self.client_states.items()}})
        meta = {"states": metas, "rounds_done": self.rounds_done, "algorithm": self.algorithm,
                "departed": list(self.departed), "seconds": self.seconds, "server_seconds": self.server_seconds}
        save_tensors_json(folder / "state.pt", tensors, meta)
        digests = {name: _file_digest(folder / name) for name in _RESULT_FILES}
        manifest = {"format": _MANIFEST_FORMAT, "run_id": hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:16],
                    "fedlib": _fedlib_version(), "algorithm": self.algorithm, "rows": {"frame.csv": len(self.frame),
                                                                                 "ledger.csv": len(ledger_frame)},
                    "sha256": digests}
        atomic_write_bytes(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
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
            raise ValueError(f"{folder} has no {MANIFEST}: the save did not finish, or it is not a folder RunResult.save "
                             "wrote; refusing to read a results folder that may be partial")
        try:
            manifest = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"{path} is not readable JSON ({err}); the folder's results are refused") from None
        if not isinstance(manifest, dict) or manifest.get("format") != _MANIFEST_FORMAT or not isinstance(manifest.get("sha256"), dict):
            raise ValueError(f"{path} is not a fedlib results manifest (format {_MANIFEST_FORMAT!r})")
        contents = {}
        for name in _RESULT_FILES:
            f = folder / name
            if not f.exists():
                raise ValueError(f"{folder}: {name} is missing (the manifest of run {manifest.get('run_id')} lists it)")
            contents[name] = f.read_bytes()
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


def _fedlib_version() -> str:
    try:
        return importlib.metadata.version("fedlib")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
