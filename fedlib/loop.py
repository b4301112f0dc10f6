"""The one federated round loop.

Every method in fedlib runs through :func:`run_federated`; a method changes hooks of
:class:`~fedlib.protocol.Algorithm`, never this loop (DESIGN.md, item 2). One round ``r``
(rounds are numbered from 1):

1. events of round ``r`` (a client leaves for good, or joins) are applied; the server is told;
2. a fraction of the active clients is sampled with a stream derived from (seed, r);
3. each sampled client receives the server's broadcast, runs ``local_update`` with its own
   generator derived from (seed, r, client) and replies;
4. replies holding a NaN or infinity are refused (error, or dropped and recorded);
5. the server aggregates the replies;
6. on the evaluation schedule, every active client deploys its predictor and evaluates it,
   unchanged, under the protocol of :mod:`fedlib.metrics`;
7. the whole run state is checkpointed atomically, so a stopped run resumes bit for bit.

Structure, not convention, keeps the data on the clients: the :class:`Server` is built from an
algorithm and a :class:`~fedlib.messages.State` and only ever receives messages; each
:class:`Client` holds its own :class:`~fedlib.federation.ClientData`. Every message passes through
the :class:`~fedlib.messages.Ledger`.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .protocol import Algorithm, ClientContext, Event, Predictor
from .federation import ClientData, Federation
from .io import atomic_torch_save, atomic_write_bytes
from .messages import DOWN, UP, Ledger, Message, State
from .metrics import RARE_RATIO, Confusion, client_abilities, protocol_summary
from .rng import DEPLOY, INIT, LOCAL_TRAIN, SAMPLING, derive_seed, isolated_torch_rng, numpy_rng, torch_generator
from .training import predict

NONFINITE_POLICIES = ("raise", "drop")


class NonFiniteUpdateError(RuntimeError):
    """A client's reply held a NaN or an infinity; it was not aggregated."""


@dataclass(frozen=True)
class LoopConfig:
    """The round loop's settings.

    Attributes
    ----------
    rounds : number of communication rounds (numbered 1..rounds)
    participation : fraction of the active clients sampled each round, in (0, 1]
    eval_every : evaluate every that many rounds (0: after the last round only); the last round
        is always evaluated
    seed : the run seed from which every random stream is derived
    on_nonfinite : ``"raise"`` (stop with an error naming client and round) or ``"drop"``
        (skip the update and record a ``dropped_nonfinite`` row)
    events : client departures / arrivals (:class:`~fedlib.protocol.Event`)
    rare_ratio : the protocol's definition of a locally rare class (:mod:`fedlib.metrics`)
    f1_class : a designated class whose F1 every evaluation reports (optional)
    checkpoint : a file path; when given the run state is saved after every round and a run
        started with an existing checkpoint resumes from it
    progress : show a progress bar over rounds with the current metrics
    evaluate_last : evaluate after the last round (default); ``False`` skips every evaluation
        when ``eval_every`` is 0 as well (timing the training alone, as the benchmark does)
    """

    rounds: int = 20
    participation: float = 1.0
    eval_every: int = 0
    seed: int = 0
    on_nonfinite: str = "raise"
    events: tuple[Event, ...] = ()
    rare_ratio: float = RARE_RATIO
    f1_class: int | None = None
    checkpoint: str | None = None
    progress: bool = False
    evaluate_last: bool = True

    def __post_init__(self) -> None:
        if self.rounds < 0:
            raise ValueError(f"rounds must be >= 0, got {self.rounds}")
        if not (0.0 < self.participation <= 1.0):
            raise ValueError(f"participation must be in (0, 1], got {self.participation}")
        if self.eval_every < 0:
            raise ValueError(f"eval_every must be >= 0, got {self.eval_every}")
        if self.on_nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"unknown on_nonfinite {self.on_nonfinite!r}; valid: {', '.join(NONFINITE_POLICIES)}")
        object.__setattr__(self, "events", tuple(self.events))

    def fingerprint(self) -> dict:
        """What must match for a checkpoint to be resumed (everything but paths and display)."""
        d = asdict(self)
        d.pop("checkpoint")
        d.pop("progress")
        d["events"] = [asdict(e) for e in self.events]
        return d


class Server:
    """The server: an algorithm's server hooks over a :class:`State`. It receives messages only."""

    def __init__(self, algorithm: Algorithm, state: State) -> None:
        self._algorithm = algorithm
        self.state = state

    def broadcast(self, round_: int) -> Message:
        return self._algorithm.broadcast(self.state, round_)

    def aggregate(self, round_: int, updates: list[tuple[int, Message]]) -> None:
        for _, m in updates:
            if not isinstance(m, Message):
                raise TypeError(f"the server receives Message objects only, got {type(m).__name__}")
        self.state = self._algorithm.aggregate(self.state, updates, round_)

    def notify(self, event: Event) -> None:
        self.state = self._algorithm.on_event(self.state, event)


class Client:
    """A client: its id and its own data. It runs the algorithm's client hooks on them."""

    def __init__(self, cid: int, data: ClientData, n_classes: int) -> None:
        self.cid = cid
        self._data = data
        self._n_classes = n_classes

    def update(
        self, algorithm: Algorithm, state: State, message: Message, round_: int, seed: int, workspace
    ) -> tuple[State, Message]:
        ctx = ClientContext(self.cid, round_, workspace, self._n_classes)
        stream = derive_seed(seed, round_, self.cid, LOCAL_TRAIN)
        with isolated_torch_rng(stream):
            return algorithm.local_update(ctx, state, message, self._data, torch.Generator().manual_seed(stream))

    def deploy(
        self, algorithm: Algorithm, state: State, message: Message, round_: int, seed: int, workspace
    ) -> Predictor:
        ctx = ClientContext(self.cid, round_, workspace, self._n_classes)
        stream = derive_seed(seed, round_, self.cid, DEPLOY)
        with isolated_torch_rng(stream):
            return algorithm.deploy(ctx, state, message, self._data, torch.Generator().manual_seed(stream))

    def evaluate(
        self, predictor: Predictor, global_test, global_pred: np.ndarray, *, rare_ratio: float, f1_class: int | None
    ) -> dict[str, float]:
        """The protocol's abilities of ``predictor`` on this client's local test split and on the
        global test set, whose predictions ``global_pred`` (shape (n_global,)) the loop computes."""
        data = self._data
        local = Confusion.from_predictions(data.test.labels_np, predict(predictor, data.test.x).numpy(), self._n_classes)
        glob = Confusion.from_predictions(global_test.labels_np, global_pred, self._n_classes)
        return client_abilities(local, glob, data.train_counts(self._n_classes), rare_ratio=rare_ratio, f1_class=f1_class)


@dataclass
class RunResult:
    """What a run produced.

    Attributes
    ----------
    frame : tidy DataFrame with columns ``round, client, metric, value`` (``client`` is -1 for
        federation-level rows such as events and dropped updates)
    ledger : the communication ledger
    server : the final server state
    client_states : each client's final persistent state
    rounds_done : the last completed round
    seconds : wall-clock seconds per round (not part of ``frame``, which is bit-for-bit reproducible)
    """

    frame: pd.DataFrame
    ledger: Ledger
    server: State
    client_states: dict[int, State]
    rounds_done: int
    algorithm: str = ""
    seconds: list[float] = field(default_factory=list)

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
        """Write ``frame.csv``, ``ledger.csv`` and ``state.pt`` into ``folder`` (atomically)."""
        folder = Path(folder)
        atomic_write_bytes(folder / "frame.csv", self.frame.to_csv(index=False).encode())
        atomic_write_bytes(folder / "ledger.csv", self.ledger.to_frame().to_csv(index=False).encode())
        atomic_torch_save(
            folder / "state.pt",
            {
                "server": self.server.to_dict(),
                "client_states": {k: v.to_dict() for k, v in self.client_states.items()},
                "rounds_done": self.rounds_done,
                "algorithm": self.algorithm,
                "seconds": self.seconds,
            },
        )
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "RunResult":
        """Read back what :meth:`save` wrote."""
        folder = Path(folder)
        frame = pd.read_csv(folder / "frame.csv", dtype={"round": "int64", "client": "int64", "metric": str, "value": "float64"})
        ledger = Ledger(pd.read_csv(folder / "ledger.csv").itertuples(index=False, name=None))
        st = torch.load(folder / "state.pt", weights_only=False)
        return cls(
            frame=frame,
            ledger=ledger,
            server=State.from_dict(st["server"]),
            client_states={int(k): State.from_dict(v) for k, v in st["client_states"].items()},
            rounds_done=int(st["rounds_done"]),
            algorithm=st["algorithm"],
            seconds=list(st["seconds"]),
        )


def per_client_table(frame: pd.DataFrame, round_: int | None = None) -> pd.DataFrame:
    """Client × metric table of a tidy results ``frame`` at ``round_`` (default: its last round
    with client rows); ``train_loss`` is left out, so the table feeds
    :func:`fedlib.metrics.protocol_summary` directly."""
    f = frame[(frame["client"] >= 0) & (frame["metric"] != "train_loss")]
    if f.empty:
        raise ValueError("this frame has no client evaluations")
    r = int(f["round"].max()) if round_ is None else int(round_)
    if r not in set(f["round"]):
        raise ValueError(f"no client evaluations in round {r}; evaluated rounds: {sorted(set(f['round']))}")
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


def run_federated(
    algorithm: Algorithm,
    federation: Federation,
    model_fn: Callable[[], torch.nn.Module],
    config: LoopConfig = LoopConfig(),
    *,
    stop_after: int | None = None,
) -> RunResult:
    """Run ``algorithm`` on ``federation`` for ``config.rounds`` rounds.

    Parameters
    ----------
    model_fn : builds the architecture (e.g. ``functools.partial(build_model, "cnn", ...)``); the
        initial weights are drawn under a stream derived from ``config.seed``, so the same seed
        gives the same model whatever the caller's RNG state
    stop_after : stop after this round (as if interrupted); with ``config.checkpoint`` the run can
        be resumed by calling again without it

    Returns
    -------
    RunResult
    """
    n = federation.n_clients
    _validate_events(config.events, n)
    seed = config.seed
    with isolated_torch_rng(derive_seed(seed, INIT)):
        workspace = model_fn()
    clients = [Client(k, data, federation.n_classes) for k, data in enumerate(federation.clients)]

    ckpt = Path(config.checkpoint) if config.checkpoint else None
    fingerprint = {"algorithm": algorithm.name, "loop": config.fingerprint(), "federation": federation.description}
    if ckpt is not None and ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        if saved["fingerprint"] != fingerprint:
            raise ValueError(
                f"checkpoint {ckpt} was written by a different run ({saved['fingerprint']}); "
                f"delete it or choose another checkpoint path for {fingerprint}"
            )
        server = Server(algorithm, State.from_dict(saved["server"]))
        states = {int(k): State.from_dict(v) for k, v in saved["client_states"].items()}
        ledger = Ledger(saved["ledger"])
        rows = list(saved["rows"])
        active = list(saved["active"])
        start, seconds = int(saved["rounds_done"]) + 1, list(saved["seconds"])
    else:
        server = Server(algorithm, algorithm.init_server(workspace))
        states = {k: algorithm.init_client(k, federation.n_classes) for k in range(n)}
        ledger = Ledger()
        rows: list[tuple] = []
        joiners = {e.client for e in config.events if e.kind == "join"}
        active = [k for k in range(n) if k not in joiners]
        start, seconds = 1, []

    last = config.rounds if stop_after is None else min(config.rounds, stop_after)
    bar = None
    if config.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.rounds, initial=start - 1, desc=algorithm.name, unit="round")
    rounds_done = start - 1
    for r in range(start, last + 1):
        t0 = time.perf_counter()
        for e in (e for e in config.events if e.round == r):
            if e.kind == "leave" and e.client in active:
                active.remove(e.client)
            elif e.kind == "join" and e.client not in active:
                active = sorted(active + [e.client])
            server.notify(e)
            rows.append((r, -1, f"{e.kind}:{e.client}", 1.0))

        updates: list[tuple[int, Message]] = []
        for k in _sample(active, config.participation, seed, r):
            down = server.broadcast(r)
            ledger.record(r, k, DOWN, down)
            states[k], up = clients[k].update(algorithm, states[k], down, r, seed, workspace)
            ledger.record(r, k, UP, up)
            bad = up.nonfinite_array()
            if bad is not None:
                if config.on_nonfinite == "raise":
                    raise NonFiniteUpdateError(
                        f"client {k} sent a non-finite value in '{bad}' in round {r}; it was not aggregated "
                        "(set LoopConfig(on_nonfinite='drop') to skip such updates and record them)"
                    )
                rows.append((r, -1, "dropped_nonfinite", float(k)))
                continue
            if "train_loss" in up.meta:
                rows.append((r, k, "train_loss", float(up.meta["train_loss"])))
            updates.append((k, up))
        server.aggregate(r, updates)

        if (r == config.rounds and config.evaluate_last) or (config.eval_every and r % config.eval_every == 0):
            rows.extend(_evaluate(algorithm, server, clients, states, active, federation, config, r, workspace, ledger))
        seconds.append(time.perf_counter() - t0)
        rounds_done = r
        if ckpt is not None:
            atomic_torch_save(
                ckpt,
                {
                    "fingerprint": fingerprint,
                    "server": server.state.to_dict(),
                    "client_states": {k: v.to_dict() for k, v in states.items()},
                    "ledger": ledger.records,
                    "rows": rows,
                    "active": active,
                    "rounds_done": r,
                    "seconds": seconds,
                },
            )
        if bar is not None:
            bar.update(1)
            _postfix(bar, rows, r)
    if bar is not None:
        bar.close()
    return RunResult(_frame(rows), ledger, server.state, states, rounds_done, algorithm.name, seconds)


def _weights_key(predictor: Predictor) -> str | None:
    """A digest of what a module predictor computes with: its modules' types, their scalar
    attributes (e.g. a temperature) and its ``state_dict`` (parameters and buffers). ``None``
    for other callables, which are never shared."""
    if not isinstance(predictor, torch.nn.Module):
        return None
    h = hashlib.sha1()
    for module in predictor.modules():
        h.update(type(module).__qualname__.encode())
        scalars = {k: v for k, v in vars(module).items() if not k.startswith("_") and isinstance(v, (bool, int, float, str))}
        h.update(repr(sorted(scalars.items())).encode())
    for name, t in predictor.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _evaluate(algorithm, server, clients, states, active, federation, config, r, workspace, ledger) -> list[tuple]:
    """Deploy and evaluate every active client. Clients whose deployed modules hold identical
    weights (all of FedAvg's do) share one pass over the global test set: identical weights give
    identical predictions, so this changes no number, only the time."""
    rows, global_cache = [], {}
    for k in active:
        down = server.broadcast(r)
        down = Message(arrays=down.arrays, meta=down.meta, kind=f"eval:{down.kind}")
        ledger.record(r, k, DOWN, down)
        predictor = clients[k].deploy(algorithm, states[k], down, r, config.seed, workspace)
        key = _weights_key(predictor)
        if key is None or key not in global_cache:
            pred = predict(predictor, federation.global_test.x).numpy()
            if key is not None:
                global_cache[key] = pred
        else:
            pred = global_cache[key]
        abilities = clients[k].evaluate(
            predictor, federation.global_test, pred, rare_ratio=config.rare_ratio, f1_class=config.f1_class
        )
        rows.extend((r, k, name, float(v)) for name, v in abilities.items())
    return rows


def _postfix(bar, rows, r) -> None:
    vals: dict[str, list[float]] = {}
    for rr, k, m, v in rows:
        if rr == r and k >= 0 and m in ("local", "global") and not math.isnan(v):
            vals.setdefault(m, []).append(v)
    if vals:
        bar.set_postfix({m: f"{100 * np.mean(v):.1f}" for m, v in vals.items()})


def evaluate_deployment(
    algorithm: Algorithm,
    result: RunResult,
    federation: Federation,
    model_fn: Callable[[], torch.nn.Module],
    config: LoopConfig = LoopConfig(),
) -> pd.DataFrame:
    """Evaluate another deployment rule on a finished run's final server state.

    For example, FedAvg-FT's deployment on a FedAvg run: the training is the same, only the
    ``deploy`` hook differs, so there is no need to train twice. Returns the tidy rows for the
    last round, like ``result.frame``.
    """
    with isolated_torch_rng(derive_seed(config.seed, INIT)):
        workspace = model_fn()
    clients = [Client(k, data, federation.n_classes) for k, data in enumerate(federation.clients)]
    server = Server(algorithm, result.server)
    active = sorted(result.client_states)
    left = {int(m.split(":")[1]) for m in result.frame["metric"] if str(m).startswith("leave:")}
    active = [k for k in active if k not in left]
    rows = _evaluate(algorithm, server, clients, result.client_states, active, federation, config, result.rounds_done, workspace, Ledger())
    return _frame(rows)
