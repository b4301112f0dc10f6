"""The one federated round loop.

Every method in fedlib runs through :func:`run_rounds`; a method changes hooks of
:class:`fedlib.protocol.Algorithm`, never this loop. The loop talks to the clients through a
:class:`~fedlib.transport.Transport` it is given and imports no engine:
:func:`fedlib.run.run_federated` builds the in-process or vectorized transport that
:class:`RunOptions` names and calls this loop; Flower's ``ServerApp`` calls it over its own.
One round ``r`` (rounds are numbered from 1):

1. events of round ``r`` (a client leaves for good, or joins) are applied; the server is told
   (``on_event``);
2. a fraction of the active clients is sampled with a stream derived from (seed, r);
3. the server's training messages (``configure_train``) go to the sampled clients through the
   **transport**; each client runs ``local_update`` with its own generator derived from
   (seed, r, client) and replies;
4. replies holding a NaN or infinity are refused (error, or dropped and recorded), and so is a
   client that gave no reply (its hook raised; on Flower, its node failed or timed out);
5. the server aggregates the replies through the method's fold (``aggregate``): each reply is
   added as it arrives and then freed, so a round's memory does not grow with the number of
   clients, unless the method declares that it needs every reply at once
   (:func:`fedlib.protocol.needs_all_replies`);
6. on the evaluation schedule, every active client (or a seeded sample of them,
   ``LoopConfig(eval_clients=...)``) receives its evaluation message (``configure_evaluate``),
   deploys its predictor and evaluates it, unchanged, under the protocol of :mod:`fedlib.metrics`;
7. the whole run state is checkpointed atomically (``RunOptions(checkpoint=...)``), so a stopped
   run resumes bit for bit.

The sampling, events, guard, aggregation, evaluation schedule, ledger and checkpoint are written
here once; a transport only carries messages. Structure, not convention, keeps the data on the
clients: the :class:`Server` is built from an algorithm and a :class:`~fedlib.messages.State`
and only ever receives messages; only the transport's clients hold a
:class:`~fedlib.federation.ClientData`. Every message passes through the
:class:`~fedlib.messages.Ledger`.

Two small configs: :class:`LoopConfig` says what the run computes (rounds, participation,
seed, events, failure policies, the evaluation schedule; a checkpoint's fingerprint covers it),
:class:`RunOptions` how it is run and kept (engine, checkpoint, progress bar, where client
states live, what else to keep), none of which changes a result beyond the float32 rounding of
clients trained stacked (which a checkpoint's fingerprint covers too).

Files: results folders and checkpoints hold tensors, numbers and strings only and are read with
``torch.load(weights_only=True)`` (:func:`fedlib.io.load_tensors_json`), so opening a results
folder someone shared cannot run code.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import inspect
import io
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .io import atomic_write_bytes, json_default, load_tensors_json, load_tensors_json_bytes, save_tensors_json
from .messages import DOWN, UP, Ledger, Message, State, same_arrays
from .metrics import RARE_RATIO, protocol_summary
from .protocol import Algorithm, Event, map_messages
from .rng import EVAL_SAMPLE, SAMPLING, STREAMS_VERSION, numpy_rng
from .store import STATE_STORES, make_states
from .transport import ClientFailure, Transport
from .validation import check_int, check_real, is_int

NONFINITE_POLICIES = ("raise", "drop")
FAILURE_POLICIES = ("raise", "drop")
"""What the loop does with a client that gave no reply (``LoopConfig.on_failure``)."""
EXECUTIONS = ("sequential", "vectorized")
"""How a round's sampled clients train (``RunOptions.execution``): one after another, or stacked
(:func:`fedlib.run.run_federated` builds the transport)."""


class NonFiniteUpdateError(RuntimeError):
    """A client's reply held a NaN or an infinity; it was not aggregated."""


class ClientFailedError(RuntimeError):
    """A client gave no reply (on Flower: its node failed, or did not reply in time); nothing of
    it was aggregated."""


@dataclass(frozen=True)
class LoopConfig:
    """What a run computes: the round loop's settings (a checkpoint resumes only the same ones).

    Attributes
    ----------
    rounds : number of communication rounds (numbered 1..rounds)
    participation : fraction of the active clients sampled each round, in (0, 1]
    eval_every : evaluate every that many rounds (0: after the last round only); the last round
        is always evaluated
    seed : the run seed from which every random stream is derived
    on_nonfinite : ``"raise"`` (stop with an error naming client and round) or ``"drop"``
        (skip the update, keep the client's state from before the round, and record a
        ``dropped_nonfinite`` row); a reply or a new client state with a NaN or an infinity counts
    on_failure : what to do with a client that gives no reply (its hook raised; on Flower, its
        node failed or did not reply in time): ``"raise"`` (default: stop; the hook's own exception,
        or :class:`ClientFailedError` naming client, node and round) or ``"drop"`` (go on without
        it and record a ``dropped_failed`` row, ``dropped_failed_eval`` in an evaluation; clients
        trained stacked by ``RunOptions(execution="vectorized")`` still raise)
    events : client departures / arrivals (:class:`~fedlib.protocol.Event`)
    rare_ratio : the protocol's definition of a locally rare class (:mod:`fedlib.metrics`)
    f1_class : a designated class whose F1 every evaluation reports (optional)
    evaluate_last : evaluate after the last round (default); ``False`` skips every evaluation
        when ``eval_every`` is 0 as well (timing the training alone, as the benchmark does)
    eval_clients : evaluate a seeded sample of that many active clients in each evaluated round
        (stream ``EVAL_SAMPLE``; ``None``, the default: every active client). The protocol's means,
        floors and tails are then those of the sample: each such round has a row
        ``(round, -1, "eval_sample", m)`` saying so (:meth:`RunResult.evaluated`)
    """

    rounds: int = 20
    participation: float = 1.0
    eval_every: int = 0
    seed: int = 0
    on_nonfinite: str = "raise"
    on_failure: str = "raise"
    events: tuple[Event, ...] = ()
    rare_ratio: float = RARE_RATIO
    f1_class: int | None = None
    evaluate_last: bool = True
    eval_clients: int | None = None

    def __post_init__(self) -> None:
        check_int("rounds", self.rounds, low=0)
        check_real("participation", self.participation, low=0.0, high=1.0, low_open=True)
        check_int("eval_every", self.eval_every, low=0)
        check_int("seed", self.seed, low=0, high=2**32 - 1)
        check_real("rare_ratio", self.rare_ratio, low=0.0, high=1.0)
        if self.f1_class is not None:
            check_int("f1_class", self.f1_class, low=0)
        if not isinstance(self.evaluate_last, bool):
            raise ValueError(f"evaluate_last must be True or False, got {self.evaluate_last!r}")
        if isinstance(self.events, (str, bytes, Mapping)) or not isinstance(self.events, Iterable):
            raise ValueError(f"events must be a sequence of fedlib.protocol.Event, got {self.events!r}")
        object.__setattr__(self, "events", tuple(self.events))  # once: a generator is read here and kept
        bad = [e for e in self.events if not isinstance(e, Event)]
        if bad:
            raise ValueError(f"events must be fedlib.protocol.Event objects (Event(round, client, kind)), got {bad[0]!r}; "
                             "valid kinds: 'leave', 'join'")
        if self.on_nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"unknown on_nonfinite {self.on_nonfinite!r}; valid: {', '.join(NONFINITE_POLICIES)}")
        if self.on_failure not in FAILURE_POLICIES:
            raise ValueError(f"unknown on_failure {self.on_failure!r}; valid: {', '.join(FAILURE_POLICIES)}")
        if self.eval_clients is not None and not (is_int(self.eval_clients) and self.eval_clients >= 1):
            raise ValueError(f"eval_clients must be None (every client) or an integer >= 1, got {self.eval_clients!r}")

    def fingerprint(self) -> dict:
        """What must match for a checkpoint to be resumed: every setting (a default added since
        checkpoints were first written is left out, so those resume as they were)."""
        d = asdict(self)
        if d["on_failure"] == "raise":
            d.pop("on_failure")
        if d["eval_clients"] is None:
            d.pop("eval_clients")
        d["events"] = [asdict(e) for e in self.events]
        return d


@dataclass(frozen=True)
class RunOptions:
    """How a run is executed and kept: none of these changes a result, so a checkpoint's
    fingerprint leaves them out (except that clients trained stacked agree with sequential
    training to float32 rounding only).

    Attributes
    ----------
    execution : how the sampled clients train when :func:`fedlib.run.run_federated` builds the
        transport: ``"sequential"`` (default, one after another) or ``"vectorized"`` (stacked into
        one batched computation, :class:`fedlib.engines.vectorized.VectorizedTransport`; equal to
        sequential to float32 rounding, and methods without a
        :class:`~fedlib.training.LocalProgram` still train sequentially)
    memory_budget : bytes a chunk of stacked clients may take (``"vectorized"`` only; ``None``: the
        engine's default, :data:`fedlib.engines.vectorized.DEFAULT_MEMORY_BUDGET`)
    checkpoint : a file path; when given the run state is saved after every round and a run
        started with an existing checkpoint resumes from it
    progress : show a progress bar over rounds with the current metrics
    states : where the clients' persistent states live, ``"memory"`` (default) or ``"disk"``
        (one file per client in ``states_dir``: :mod:`fedlib.store`); the results are the same
    states_dir : the folder of the ``"disk"`` store (it must hold no state files yet)
    keep_predictions : keep every evaluated client's predicted labels of the last evaluated
        round in :attr:`RunResult.predictions` (to score them again, e.g. under another rare
        threshold: :func:`fedlib.metrics.rescore`)
    observe : called after every round this call runs with ``(round, server state, client states)``
        (the latter the mapping ``client -> State``), e.g. to record the run's trajectory; it must
        not change them. A run resumed from a checkpoint calls it for the rounds it runs, not for
        those the checkpoint holds
    """

    execution: str = "sequential"
    memory_budget: int | None = None
    checkpoint: str | None = None
    progress: bool = False
    states: str = "memory"
    states_dir: str | None = None
    keep_predictions: bool = False
    observe: Callable[[int, State, MutableMapping[int, State]], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.states not in STATE_STORES:
            raise ValueError(f"unknown states {self.states!r}; valid: {', '.join(STATE_STORES)}")
        if self.execution not in EXECUTIONS:
            raise ValueError(f"unknown execution {self.execution!r}; valid: {', '.join(EXECUTIONS)}")
        if self.memory_budget is not None and not (is_int(self.memory_budget) and self.memory_budget >= 1):
            raise ValueError(f"memory_budget must be None (the engine's default) or a positive number of bytes, "
                             f"got {self.memory_budget!r}")
        if self.states == "disk" and not self.states_dir:
            raise ValueError("states='disk' needs states_dir, the folder of the client state files")
        if self.observe is not None and not callable(self.observe):
            raise ValueError(f"observe must be None or a callable (round, server state, client states), got {self.observe!r}")


class Server:
    """The server: an algorithm's server hooks over a :class:`State`. It receives messages only."""

    def __init__(self, algorithm: Algorithm, state: State) -> None:
        self._algorithm = algorithm
        self.state = state

    def train_messages(self, round_: int, clients: Sequence[int]) -> dict[int, Message]:
        """Each client's training message (:meth:`fedlib.protocol.Algorithm.configure_train`),
        in the order of ``clients``."""
        out = self._algorithm.configure_train(self.state, round_, list(clients))
        return _one_per_client(out, clients, "configure_train", round_)

    def eval_messages(self, round_: int, clients: Sequence[int]) -> dict[int, Message]:
        """Each client's evaluation message (:meth:`fedlib.protocol.Algorithm.configure_evaluate`),
        in the order of ``clients``, recorded with kind ``eval:<kind>`` (a message shared by
        several clients stays one object)."""
        out = _one_per_client(self._algorithm.configure_evaluate(self.state, round_, list(clients)), clients,
                              "configure_evaluate", round_)
        return map_messages(out, lambda m: Message(arrays=m.arrays, meta=m.meta, kind=f"eval:{m.kind}"))

    def fold(self, round_: int):
        """The algorithm's fold for this round's replies (:meth:`fedlib.protocol.Algorithm.aggregate`)."""
        fold = self._algorithm.aggregate(self.state, round_)
        if not (callable(getattr(fold, "add", None)) and callable(getattr(fold, "finish", None))):
            raise TypeError(f"{type(self._algorithm).__name__}.aggregate returned {type(fold).__name__} in round {round_}; "
                            "valid: a fold with add(client, reply) and finish() -> State (e.g. fedlib.protocol.ModelAverage)")
        return fold

    @staticmethod
    def add(fold, client: int, message: Message) -> None:
        """Fold in client ``client``'s reply; the server receives :class:`~fedlib.messages.Message` objects only."""
        _check_message(message)
        fold.add(client, message)

    def finish(self, fold) -> None:
        """The new state from a fold that every reply of the round was added to."""
        self.state = fold.finish()

    def notify(self, event: Event) -> None:
        self.state = self._algorithm.on_event(self.state, event)


def _one_per_client(messages, clients: Sequence[int], hook: str, round_: int) -> dict[int, Message]:
    """``messages`` checked to hold one :class:`~fedlib.messages.Message` per client, in the order of ``clients``."""
    if not isinstance(messages, Mapping):
        raise TypeError(f"{hook} returned {type(messages).__name__} in round {round_}; valid: a mapping client -> "
                        "Message, one per client (one message for all: dict.fromkeys(clients, message))")
    missing = [k for k in clients if k not in messages]
    if missing:
        raise ValueError(f"{hook} gave no message for client(s) {missing} in round {round_}; it must return one per "
                         f"client of {list(clients)}")
    out = {k: messages[k] for k in clients}
    for k, m in out.items():
        if not isinstance(m, Message):
            raise TypeError(f"{hook} gave client {k} a {type(m).__name__} in round {round_}; valid: a fedlib.messages.Message")
    return out


def _check_message(m) -> None:
    if not isinstance(m, Message):
        raise TypeError(f"the server receives Message objects only, got {type(m).__name__}")


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
        tensors, metas = _flatten_states({"server": self.server, **{f"client/{k}": v for k, v in self.client_states.items()}})
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
        states = _unflatten_states(tensors, meta["states"])
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


def _flatten_states(states: dict[str, State]) -> tuple[dict[str, torch.Tensor], dict[str, dict]]:
    """``{owner: State}`` -> tensors ``{"owner|array name": tensor}`` and JSON-able metadata."""
    tensors, metas = {}, {}
    for owner, st in states.items():
        for name, t in st.arrays.items():
            tensors[f"{owner}|{name}"] = t
        metas[owner] = {"meta": st.meta, "arrays": list(st.arrays)}
    return tensors, metas


def _unflatten_states(tensors: dict[str, torch.Tensor], metas: dict[str, dict]) -> dict[str, State]:
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

    >>> same = RunResult(_frame([(1, 0, "local", 0.5)]), Ledger(), State(), {}, 1)
    >>> run_differences(same, same), run_differences(same, RunResult(_frame([]), Ledger(), State(), {}, 1))
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


def largest_difference(a: RunResult, b: RunResult) -> float:
    """The largest absolute difference between two runs' server arrays of the same names: 0 when
    they agree bit for bit (a NaN equal to a NaN), ``inf`` where the NaNs differ, 1 where an
    integer array differs."""
    worst = 0.0
    for name, x in a.server.arrays.items():
        y = b.server.arrays[name]
        if x.is_floating_point():
            same_nan = torch.equal(x.isnan(), y.isnan())
            gap = float((x - y).nan_to_num(0.0).abs().max()) if x.numel() else 0.0
            worst = max(worst, gap, 0.0 if same_nan else math.inf)
        else:
            worst = max(worst, float((x != y).any()))
    return worst


def per_client_table(frame: pd.DataFrame, round_: int | None = None) -> pd.DataFrame:
    """Client × metric table of a tidy results ``frame`` at ``round_`` (default: its last round
    with client rows); ``train_loss`` is left out, so the table feeds
    :func:`fedlib.metrics.protocol_summary` directly."""
    f = _evaluations(frame)
    r = _evaluated_round(frame, round_)
    wide = f[f["round"] == r].pivot(index="client", columns="metric", values="value")
    wide.columns.name = None
    return wide


def _frame(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["round", "client", "metric", "value"])
    return frame.astype({"round": "int64", "client": "int64", "metric": str, "value": "float64"})


def _validate_events(events: Sequence[Event], n_clients: int) -> None:
    for e in events:
        if not 0 <= e.client < n_clients:
            raise ValueError(f"event {e} names client {e.client}; valid clients: 0..{n_clients - 1}")


def _sample(active: list[int], participation: float, seed: int, round_: int) -> list[int]:
    if not active:
        return []
    m = max(1, int(round(participation * len(active))))
    rng = numpy_rng(seed, round_, SAMPLING)
    return sorted(int(c) for c in rng.choice(np.asarray(active), size=m, replace=False))


def run_rounds(
    algorithm: Algorithm,
    transport: Transport,
    config: LoopConfig = LoopConfig(),
    options: RunOptions = RunOptions(),
    *,
    stop_after: int | None = None,
) -> RunResult:
    """Run ``algorithm`` for ``config.rounds`` rounds over the clients ``transport`` carries.

    Most callers use :func:`fedlib.run.run_federated`, which builds the transport from a
    federation, a model and ``options.execution``; Flower's ``ServerApp`` passes its own.

    Parameters
    ----------
    transport : how messages reach the clients (:mod:`fedlib.engines`); built with the run's seed
        (``config.seed``), its ``initial_model`` (drawn under that seed) initializes the server
    stop_after : stop after this round (as if interrupted); with ``options.checkpoint`` the run
        can be resumed by calling again without it

    Returns
    -------
    RunResult
    """
    _check_transport(transport, config.seed)
    n = transport.n_clients
    _validate_events(config.events, n)
    seed = config.seed
    _check_agnostic(algorithm, transport)

    if options.keep_predictions and not transport.keeps_predictions:
        raise ValueError(f"the {transport.name} transport cannot return the clients' predictions (they stay on the "
                         "clients); valid: RunOptions(keep_predictions=False)")
    ckpt = Path(options.checkpoint) if options.checkpoint else None
    fingerprint = None if ckpt is None else _canonical_json({
        "algorithm": algorithm.name, "configuration": algorithm_configuration(algorithm),
        "loop": {**config.fingerprint(), **transport.fingerprint()}, "federation": transport.description,
        "streams": STREAMS_VERSION})
    if ckpt is not None and ckpt.exists():
        tensors, saved = load_tensors_json(ckpt)
        missing = [k for k in _CHECKPOINT_KEYS if k not in saved] if isinstance(saved, dict) else list(_CHECKPOINT_KEYS)
        if missing:
            raise ValueError(f"checkpoint {ckpt} is not a run checkpoint (it lacks {missing}); delete it or choose "
                             "another checkpoint path")
        if saved["fingerprint"] != fingerprint:
            raise ValueError(
                f"checkpoint {ckpt} was written by a different run: {fingerprint_differences(saved['fingerprint'], fingerprint)}; "
                "delete it or choose another checkpoint path"
            )
        loaded = _unflatten_states(tensors, saved["states"])
        server = Server(algorithm, loaded.pop("server"))
        states = make_states(options.states, options.states_dir, overwrite=True)
        for name, st in loaded.items():
            states[int(name.split("/", 1)[1])] = st
        del loaded, tensors
        ledger = Ledger(tuple(r) for r in saved["ledger"])
        rows = [tuple(r) for r in saved["rows"]]
        active, departed = list(saved["active"]), list(saved["departed"])
        start, seconds, server_seconds = int(saved["rounds_done"]) + 1, list(saved["seconds"]), list(saved["server_seconds"])
    else:
        server = Server(algorithm, algorithm.init_server(transport.initial_model))
        states = make_states(options.states, options.states_dir)
        for k in range(n):
            states[k] = State()  # a client's persistent state starts empty (protocol)
        ledger = Ledger()
        rows: list[tuple] = []
        joiners = {e.client for e in config.events if e.kind == "join"}
        active = [k for k in range(n) if k not in joiners]
        departed: list[int] = []
        start, seconds, server_seconds = 1, [], []

    last = config.rounds if stop_after is None else min(config.rounds, stop_after)
    bar = None
    if options.progress:
        from tqdm.auto import tqdm  # optional display dependency, imported only when asked for

        bar = tqdm(total=config.rounds, initial=start - 1, desc=algorithm.name, unit="round")
    predictions: dict[int, tuple[np.ndarray, np.ndarray]] | None = {} if options.keep_predictions else None
    rounds_done = start - 1
    for r in range(start, last + 1):
        t0 = time.perf_counter()
        for e in (e for e in config.events if e.round == r):
            if e.kind == "leave" and e.client in active:
                active.remove(e.client)
                departed.append(e.client)
            elif e.kind == "join" and e.client not in active:
                active = sorted(active + [e.client])
                if e.client in departed:  # back in the federation: registered again
                    departed.remove(e.client)
            server.notify(e)
            rows.append((r, -1, f"{e.kind}:{e.client}", 1.0))

        messages = server.train_messages(r, _sample(active, config.participation, seed, r))
        # streaming aggregation: each reply is folded in and freed (one running sum per array), unless
        # the method's fold keeps the list (needs_all_replies)
        fold = server.fold(r)
        t_server = 0.0
        for k, new_state, up in transport.local_updates(algorithm, r, messages, states):
            ledger.record(r, k, DOWN, messages[k])
            if isinstance(up, ClientFailure):
                rows.extend(_failed(up, config, r, "dropped_failed"))
                continue
            ledger.record(r, k, UP, up)
            bad = up.nonfinite_array()
            where = "sent" if bad is not None else "kept"
            if bad is None:
                bad = new_state.nonfinite_array()  # a personal model gone non-finite is as lost as a reply
            if bad is not None:
                if config.on_nonfinite == "raise":
                    raise NonFiniteUpdateError(
                        f"client {k} {where} a non-finite value in '{bad}' in round {r}; it was not aggregated "
                        "(set LoopConfig(on_nonfinite='drop') to skip such updates and record them)"
                    )
                # dropped: the reply is not aggregated and the client keeps the state it had before the round, so
                # it is evaluated on that state (never on NaN weights scored as 0 % without a flag)
                rows.append((r, -1, "dropped_nonfinite", float(k)))
                transport.discard_state(k)  # a Flower node holding the dropped state gets the kept one back
                continue
            states[k] = new_state
            if "train_loss" in up.meta:
                rows.append((r, k, "train_loss", float(up.meta["train_loss"])))
            t_add = time.perf_counter()
            server.add(fold, k, up)
            t_server += time.perf_counter() - t_add
            del up, new_state
        del messages
        t_finish = time.perf_counter()
        server.finish(fold)
        server_seconds.append(t_server + time.perf_counter() - t_finish)
        del fold

        if (r == config.rounds and config.evaluate_last) or (config.eval_every and r % config.eval_every == 0):
            if predictions is not None:
                predictions = {}
            rows.extend(_evaluate(algorithm, server, transport, states, active, config, r, ledger, predictions))
        seconds.append(time.perf_counter() - t0)
        rounds_done = r
        if ckpt is not None:
            tensors, metas = _flatten_states({"server": server.state, **{f"client/{k}": v for k, v in states.items()}})
            save_tensors_json(ckpt, tensors, {
                "fingerprint": fingerprint, "states": metas, "ledger": ledger.records, "rows": rows, "active": active,
                "departed": departed, "rounds_done": r, "seconds": seconds, "server_seconds": server_seconds,
            })
        if options.observe is not None:
            options.observe(r, server.state, states)
        if bar is not None:
            bar.update(1)
            _postfix(bar, rows, r)
    if bar is not None:
        bar.close()
    return RunResult(_frame(rows), ledger, server.state, states, rounds_done, algorithm.name, departed, seconds, server_seconds,
                     predictions)


def _check_transport(transport: Transport, seed: int) -> None:
    missing = [a for a in ("initial_model", "seed", "n_clients", "description") if not hasattr(transport, a)]
    if missing:
        raise TypeError(f"{type(transport).__name__} lacks {', '.join(missing)}: a transport says what it carries "
                        "(fedlib.transport.Transport)")
    if transport.seed != seed:
        raise ValueError(f"the transport's clients derive their streams from seed {transport.seed}, but the run's seed "
                         f"is {seed}: build the transport with the run's seed")


def _check_agnostic(algorithm: Algorithm, transport: Transport) -> None:
    if getattr(transport, "heterogeneous", False) and not algorithm.model_agnostic:
        raise ValueError(f"{algorithm.name} shares parameters, but the clients' architectures differ "
                         f"({transport.architectures}); valid: a model-agnostic method (Algorithm.model_agnostic, "
                         "e.g. cosmos, fedmd, fedct, comet) or one architecture for every client")


_CHECKPOINT_KEYS = ("fingerprint", "states", "ledger", "rows", "active", "departed", "rounds_done", "seconds",
                    "server_seconds")


def algorithm_configuration(obj, _depth: int = 0):
    """A method's full configuration as plain JSON data, for a checkpoint's fingerprint: its
    public attributes (not those that start with ``_``, a method's caches), recursively;
    dataclasses (``TrainConfig``, ``HDCConfig``, ...) by their fields, tensors and arrays by a
    SHA-256 digest of their bytes, a ``functools.partial`` by its function and arguments, a
    function by its qualified name, its defaults and the values it closes over, NaN and
    infinities as text. A structure nested deeper than 16 levels is refused.

    Examples
    --------
    >>> from fedlib.algorithms import make_algorithm
    >>> a, b = make_algorithm("ditto"), make_algorithm("ditto", lam=0.5)
    >>> algorithm_configuration(a) == algorithm_configuration(make_algorithm("ditto"))
    True
    >>> algorithm_configuration(a) == algorithm_configuration(b)
    False
    """
    if _depth > 16:
        raise ValueError(f"a method's configuration nests deeper than 16 levels (at a {type(obj).__qualname__}): a checkpoint's "
                         "fingerprint cannot cover it; keep a method's settings in plain values and dataclasses")
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, np.generic):
        return algorithm_configuration(obj.item(), _depth + 1)
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        a = obj.detach().cpu().numpy() if isinstance(obj, torch.Tensor) else obj
        a = np.ascontiguousarray(a)
        return {"array": str(a.dtype), "shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
    if isinstance(obj, Enum):
        return f"{type(obj).__qualname__}.{obj.name}"
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"type": type(obj).__qualname__,
                **{f.name: algorithm_configuration(getattr(obj, f.name), _depth + 1) for f in dataclasses.fields(obj)}}
    if isinstance(obj, Mapping):
        return {str(k): algorithm_configuration(v, _depth + 1) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        return [algorithm_configuration(v, _depth + 1) for v in items]
    if isinstance(obj, torch.nn.Module):
        return {"module": type(obj).__qualname__, **{k: algorithm_configuration(v, _depth + 1)
                                                      for k, v in obj.state_dict().items()}}
    if isinstance(obj, functools.partial):  # a factory with bound arguments: the function and the arguments
        return {"partial": algorithm_configuration(obj.func, _depth + 1),
                "args": algorithm_configuration(list(obj.args), _depth + 1),
                "keywords": algorithm_configuration(dict(obj.keywords), _depth + 1)}
    if inspect.isfunction(obj):  # by name, with what it closes over and its defaults (a lambda's values count)
        out = {"function": f"{obj.__module__}.{obj.__qualname__}"}
        if obj.__defaults__:
            out["defaults"] = algorithm_configuration(list(obj.__defaults__), _depth + 1)
        if obj.__closure__:
            out["closure"] = [algorithm_configuration(c.cell_contents, _depth + 1) for c in obj.__closure__]
        return out
    if callable(obj) and not hasattr(obj, "__dict__") or isinstance(obj, type) or inspect.isroutine(obj):
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
    public = {k: v for k, v in vars(obj).items() if not k.startswith("_")} if hasattr(obj, "__dict__") else {}
    return {"type": type(obj).__qualname__, **{k: algorithm_configuration(v, _depth + 1) for k, v in sorted(public.items())}}


def fingerprint_differences(saved: str, current: str, limit: int = 6) -> str:
    """What differs between two checkpoint fingerprints (canonical JSON texts), as
    ``"configuration.train.lr: saved 0.05, now 0.5; ..."`` (at most ``limit`` paths).

    Examples
    --------
    >>> fingerprint_differences('{"a": {"lr": 0.05}, "b": 1}', '{"a": {"lr": 0.5}, "b": 1}')
    'a.lr: saved 0.05, now 0.5'
    """
    out: list[str] = []

    def walk(a, b, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else str(k))
        elif a != b:
            out.append(f"{path or '(whole)'}: saved {json.dumps(a)[:80]}, now {json.dumps(b)[:80]}")

    try:
        walk(json.loads(saved), json.loads(current), "")
    except (TypeError, ValueError):
        return "the saved fingerprint is not readable"
    more = f"; and {len(out) - limit} more" if len(out) > limit else ""
    return "; ".join(out[:limit]) + more if out else "nothing (the texts differ in form only)"


def _canonical_json(obj) -> str:
    """A canonical JSON text of a fingerprint (numpy scalars as Python numbers)."""
    return json.dumps(obj, sort_keys=True, default=json_default)


def _evaluated_clients(active: list[int], eval_clients: int | None, seed: int, round_: int) -> list[int]:
    """The clients evaluated in round ``round_``: every active one, or a seeded sample of ``eval_clients``."""
    if eval_clients is None or eval_clients >= len(active):
        return list(active)
    rng = numpy_rng(seed, round_, EVAL_SAMPLE)
    return sorted(int(c) for c in rng.choice(np.asarray(active), size=eval_clients, replace=False))


def _evaluate(algorithm, server, transport, states, active, config, r, ledger, predictions=None) -> list[tuple]:
    """Every active client (or the round's evaluation sample) receives its evaluation message,
    deploys and is evaluated; ``predictions`` (a dict) collects their predicted labels."""
    clients = _evaluated_clients(active, config.eval_clients, config.seed, r)
    messages = server.eval_messages(r, clients)
    for k in clients:
        ledger.record(r, k, DOWN, messages[k])
    rows = [(r, -1, "eval_sample", float(len(clients)))] if len(clients) < len(active) else []
    extra = {} if predictions is None else {"predictions": predictions}
    for k, abilities in transport.evaluate(algorithm, r, messages, states, rare_ratio=config.rare_ratio,
                                           f1_class=config.f1_class, **extra):
        if isinstance(abilities, ClientFailure):
            rows.extend(_failed(abilities, config, r, "dropped_failed_eval"))
            continue
        rows.extend((r, k, name, float(v)) for name, v in abilities.items())
    return rows


def _failed(failure: ClientFailure, config: LoopConfig, r: int, metric: str) -> list[tuple]:
    """A client that gave no reply: raise (its own exception where there is one), or the row that
    records it dropped."""
    if config.on_failure == "raise":
        if failure.error is not None:
            raise failure.error
        raise ClientFailedError(f"client {failure.client} gave no reply in round {r}: {failure.reason}; nothing of it "
                                "was aggregated (set LoopConfig(on_failure='drop') to go on without it and record it)")
    return [(r, -1, metric, float(failure.client))]


def _postfix(bar, rows, r) -> None:
    vals: dict[str, list[float]] = {}
    for rr, k, m, v in rows:
        if rr == r and k >= 0 and m in ("local", "pooled", "global") and not math.isnan(v):
            vals.setdefault(m, []).append(v)
    if vals:
        bar.set_postfix({m: f"{100 * np.mean(v):.1f}" for m, v in vals.items()})


def evaluate_result(
    algorithm: Algorithm,
    result: RunResult,
    transport: Transport,
    config: LoopConfig = LoopConfig(),
    *,
    predictions: dict | None = None,
) -> pd.DataFrame:
    """Evaluate another deployment rule on a finished run's final server state, over ``transport``
    (:func:`fedlib.run.evaluate_deployment` builds it). Every registered client
    (:attr:`RunResult.registered`) is evaluated; the messages are not recorded in the run's
    ledger; ``predictions`` (a dict), when given, receives each client's predicted labels as
    :attr:`RunResult.predictions` holds them. Returns the tidy rows for the last round, like
    ``result.frame``."""
    _check_transport(transport, config.seed)
    bad = [k for k in result.registered if not 0 <= k < transport.n_clients]
    if bad:
        raise ValueError(f"the run has client(s) {bad} that this federation of {transport.n_clients} clients lacks")
    server = Server(algorithm, result.server)
    rows = _evaluate(algorithm, server, transport, result.client_states, result.registered, config, result.rounds_done,
                     Ledger(), predictions)
    return _frame(rows)


__all__ = ["ClientFailedError", "EXECUTIONS", "FAILURE_POLICIES", "LoopConfig", "NonFiniteUpdateError",
           "RunOptions", "RunResult", "Server", "evaluate_result", "largest_difference", "per_client_table", "run_differences",
           "run_rounds"]
