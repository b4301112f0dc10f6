"""The one federated round loop.

Every method in fedlib runs through :func:`run_rounds`; a method changes hooks of
:class:`fedlib.protocol.Algorithm`, never this loop, which calls them by their names. The loop
talks to the clients through a :class:`~fedlib.transport.Transport` it is given and imports no
engine: :func:`fedlib.run.run_federated` builds the in-process or vectorized transport that
:class:`fedlib.run.RunOptions` names and calls this loop; Flower's ``ServerApp`` calls it over
its own. One round ``r`` (rounds are numbered from 1):

1. events of round ``r`` (a client leaves for good, or joins) are applied; the server is told
   (``on_event``);
2. a fraction of the active clients is sampled with a stream derived from (seed, r);
3. the server's training messages (``configure_train``) go to the sampled clients through the
   **transport**; each client runs ``local_update`` with its own generator derived from
   (seed, r, client) and replies;
4. replies holding a NaN or infinity are refused (error, or dropped and recorded), and so is a
   client that gave no reply (its hook raised; on Flower, its node failed or timed out);
5. ``aggregate`` receives the accepted replies as an iterator, in which each client trains when
   its reply is read: a rule that folds each reply in and frees it (FedAvg's) holds one reply at
   a time, so a round's memory does not grow with its clients, and one that needs every reply at
   once reads ``list(replies)``. A rule must read every reply: one that returns early gets an
   error once the rest are received;
6. on the evaluation schedule, every active client (or a seeded sample of them,
   ``LoopConfig(eval_clients=...)``) receives its evaluation message (``configure_evaluate``),
   deploys its predictor and evaluates it, unchanged, under the protocol of :mod:`fedlib.metrics`;
7. the whole run state is checkpointed atomically (``RunOptions(checkpoint=...)``), so a stopped
   run resumes bit for bit.

The sampling, events, guard, aggregation, evaluation schedule, ledger and checkpoint are written
here once; a transport only carries messages. Structure, not convention, keeps the data on the
clients: the server hooks receive a :class:`~fedlib.messages.State` and messages only; only the
transport's clients hold a :class:`~fedlib.federation.ClientData`. Every message passes through
the :class:`~fedlib.messages.Ledger`. :class:`LoopConfig` says what the run computes (rounds,
participation, seed, events, failure policies, the evaluation schedule; a checkpoint's
fingerprint covers it); the run returns a :class:`fedlib.results.RunResult`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path, PurePath

import numpy as np
import pandas as pd
import torch

from .io import json_default, load_tensors_json, save_tensors_json
from .messages import DOWN, UP, Ledger, Message, State
from .metrics import RARE_RATIO
from .protocol import MODEL, Algorithm, Event, map_messages
from .results import RunResult, pack_states, tidy_frame, unpack_states
from .rng import EVAL_SAMPLE, SAMPLING, STREAMS_VERSION, numpy_rng
from .store import make_states
from .transport import ClientFailure, Transport
from .validation import check_int, check_real, is_int

NONFINITE_POLICIES = ("raise", "drop")
FAILURE_POLICIES = ("raise", "drop")
"""What the loop does with a client that gave no reply (``LoopConfig.on_failure``)."""


class NonFiniteUpdateError(RuntimeError):
    """A client's reply held a NaN or an infinity; it was not aggregated."""


class ClientFailedError(RuntimeError):
    """A client gave no reply (on Flower: its node failed, or did not reply in time); nothing of
    it was aggregated."""


class InvalidReplyError(ValueError):
    """A client's reply does not fit the server's model (an array of another shape or dtype, or
    one the method does not declare); the round was not aggregated."""


class DroppedClientsWarning(UserWarning):
    """A run ended with client replies dropped (``LoopConfig(on_failure="drop")``,
    ``on_nonfinite="drop"``): the warning names the rounds, clients and causes (the first ten),
    so that a quiet run says so too; ``RunResult.dropped`` holds every one. Silence it with
    ``warnings.simplefilter("ignore", DroppedClientsWarning)`` where drops are expected."""


class TooFewRepliesError(RuntimeError):
    """A round kept fewer replies than ``LoopConfig(min_replies=..., min_reply_share=...)``
    asks; the round was not aggregated and the run stopped."""


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
        trained stacked by ``RunOptions(execution="vectorized")`` still raise). A run that ended
        with dropped replies (either policy) says so in a :class:`DroppedClientsWarning` and in
        ``RunResult.dropped``
    events : client departures / arrivals (:class:`~fedlib.protocol.Event`)
    rare_ratio : the protocol's definition of a locally rare class (:mod:`fedlib.metrics`)
    f1_class : a designated class whose F1 every evaluation reports (optional)
    evaluate_last : evaluate after the last round (default); ``False`` skips every evaluation
        when ``eval_every`` is 0 as well (timing the training alone, as the benchmark does)
    eval_clients : evaluate a seeded sample of that many active clients in each evaluated round
        (stream ``EVAL_SAMPLE``; ``None``, the default: every active client). The protocol's means,
        floors and tails are then those of the sample: each such round has a row
        ``(round, -1, "eval_sample", m)`` saying so (:meth:`fedlib.results.RunResult.evaluated`)
    min_replies : the fewest replies a round must keep (after dropped ones) to be aggregated,
        capped at the round's sampled clients (default 1: a round whose every client was dropped
        fails); below it the run stops with :class:`TooFewRepliesError` listing the dropped
        clients and their causes, and the round is neither aggregated nor checkpointed
    min_reply_share : the same as a share of the round's sampled clients, in [0, 1] (rounded up;
        default 0: ``min_replies`` alone), e.g. 0.5 with ``on_failure="drop"``: a round that lost
        more than half its clients fails
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
    min_replies: int = 1
    min_reply_share: float = 0.0

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
        check_int("min_replies", self.min_replies, low=0)
        check_real("min_reply_share", self.min_reply_share, low=0.0, high=1.0)

    def required_replies(self, sampled: int) -> int:
        """The fewest replies a round of ``sampled`` clients keeps to be aggregated.

        >>> LoopConfig().required_replies(4), LoopConfig(min_reply_share=0.5).required_replies(5)
        (1, 3)
        >>> LoopConfig(min_replies=8).required_replies(4), LoopConfig().required_replies(0)
        (4, 0)
        """
        return min(int(sampled), max(int(self.min_replies), math.ceil(self.min_reply_share * sampled - 1e-9)))

    def fingerprint(self) -> dict:
        """What must match for a checkpoint to be resumed: every setting (a default added since
        checkpoints were first written is left out, so those resume as they were)."""
        d = asdict(self)
        if d["on_failure"] == "raise":
            d.pop("on_failure")
        if d["eval_clients"] is None:
            d.pop("eval_clients")
        if d["min_replies"] == 1 and d["min_reply_share"] == 0.0:  # the defaults: earlier checkpoints resume
            d.pop("min_replies")
            d.pop("min_reply_share")
        d["events"] = [asdict(e) for e in self.events]
        return d


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


def _evaluation_messages(algorithm: Algorithm, server: State, round_: int, clients: Sequence[int]) -> dict[int, Message]:
    """``configure_evaluate``'s messages, checked, each recorded with kind ``eval:<kind>`` (a
    message shared by several clients stays one object)."""
    out = _one_per_client(algorithm.configure_evaluate(server, round_, list(clients)), clients, "configure_evaluate", round_)
    return map_messages(out, lambda m: Message(arrays=m.arrays, meta=m.meta, kind=f"eval:{m.kind}"))


def _new_state(state, algorithm: Algorithm, hook: str, round_: int) -> State:
    """A server hook's result, checked to be a :class:`~fedlib.messages.State`."""
    if not isinstance(state, State):
        raise TypeError(f"{type(algorithm).__name__}.{hook} returned {type(state).__name__} in round {round_}; valid: the "
                        "new server state, a fedlib.messages.State")
    return state


class _Replies:
    """A round's replies as ``aggregate`` reads them: one pass. Iterating them again once every reply
    was read is an error (a second pass would silently see none), not an empty round."""

    def __init__(self, replies: Iterator[tuple[int, Message]]) -> None:
        self._replies, self._done = replies, False

    def __iter__(self) -> "_Replies":
        if self._done:
            raise RuntimeError("the round's replies were already read to the end: aggregate reads them once, as they "
                               "arrive (a rule that needs them twice keeps them: replies = list(replies))")
        return self

    def __next__(self) -> tuple[int, Message]:
        try:
            return next(self._replies)
        except StopIteration:
            self._done = True
            raise

    def drain(self) -> int:
        """Receive the replies left unread (each one recorded) and return how many there were."""
        return sum(1 for _ in self._replies)


def _model_reference(algorithm: Algorithm, transport: Transport) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The shape and dtype of each array of the run's model as a reply names it (``model/...``),
    for the reply check; none when the clients' architectures differ."""
    if getattr(transport, "heterogeneous", False):
        return {}
    return {f"{MODEL}{k}": (tuple(v.shape), v.dtype) for k, v in transport.initial_model.state_dict().items()}


def _declared_replies(algorithm: Algorithm) -> tuple[str, ...]:
    """The reply arrays ``algorithm`` declares (``Capabilities(reply_arrays=...)``), with those of
    the method it wraps (its attribute ``base``, as GGEUR's around FedProto) in turn."""
    base = getattr(algorithm, "base", None)
    inner = _declared_replies(base) if isinstance(base, Algorithm) and base is not algorithm else ()
    return tuple(algorithm.capabilities.reply_arrays) + inner


def _check_reply(up: Message, server: State, model: Mapping, algorithm: Algorithm, k: int, r: int) -> None:
    """Refuse a reply whose arrays do not fit the server's model: an array named as one of the
    server state's (or of the run's model, ``model/...``) must have its shape and dtype; any other
    must be declared by the method (``Capabilities(reply_arrays=...)``)."""
    declared = _declared_replies(algorithm)
    undeclared = []
    for name, a in up.arrays.items():
        want = server.arrays.get(name)
        want = (tuple(want.shape), want.dtype) if want is not None else model.get(name)
        if not isinstance(a, torch.Tensor):
            raise InvalidReplyError(f"client {k}'s reply in round {r} has '{name}' of type {type(a).__name__}; valid: a "
                                    f"torch.Tensor; round {r} was not aggregated")
        if want is None:
            if not any(name == d or (d.endswith("/") and name.startswith(d)) for d in declared):
                undeclared.append(name)
        elif (tuple(a.shape), a.dtype) != want:
            raise InvalidReplyError(
                f"client {k}'s reply in round {r} has '{name}' of shape {tuple(a.shape)} and dtype {a.dtype}, but the "
                f"server's model has shape {want[0]} and dtype {want[1]}; round {r} was not aggregated ({_kept(r)})")
    if undeclared:
        size = sum(up.arrays[n].numel() * up.arrays[n].element_size() for n in undeclared)
        raise InvalidReplyError(
            f"client {k}'s reply in round {r} holds array(s) {undeclared[:5]}{' ...' if len(undeclared) > 5 else ''} "
            f"({size} bytes) that the server's model does not have and {type(algorithm).__name__} does not declare "
            f"(its Capabilities(reply_arrays=...): {list(declared) or 'none'}); round {r} was not aggregated")


def _accepted(algorithm, transport, r, messages, states, ledger, rows, config, clock: dict, server: State,
              model: Mapping, dropped: list) -> Iterator[tuple[int, Message]]:
    """Round ``r``'s replies as the transport brings them (a client trains when its reply is asked
    for), each one recorded in the ledger and checked; a reply that does not fit the server's
    model raises; a failed client (``on_failure``) and a reply or a new client state with a NaN
    or an infinity (``on_nonfinite``) raise or are dropped and recorded (``dropped`` receives
    ``(round, client, cause)``); an accepted reply's client state is kept and its reply yielded,
    then freed. Fewer kept replies than ``config.required_replies`` raise
    :class:`TooFewRepliesError` once every reply was received. ``clock`` counts the pairs
    yielded (``read``) and the seconds spent here (``clients``: the clients' and the loop's, not
    the server's own)."""
    start = time.perf_counter()
    for k, new_state, up in transport.local_updates(algorithm, r, messages, states):
        ledger.record(r, k, DOWN, messages[k])
        if isinstance(up, ClientFailure):
            rows.extend(_failed(up, config, r, "dropped_failed"))
            dropped.append((r, k, f"no reply ({up.reason})"))
            continue
        if not isinstance(up, Message):
            raise TypeError(f"the server receives Message objects only, got {type(up).__name__} from client {k} in round {r}")
        _check_reply(up, server, model, algorithm, k, r)
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
            dropped.append((r, k, f"a non-finite value in '{bad}' ({where})"))
            transport.discard_state(k)  # a Flower node holding the dropped state gets the kept one back
            continue
        states[k] = new_state
        if "train_loss" in up.meta:
            rows.append((r, k, "train_loss", float(up.meta["train_loss"])))
        clock["clients"] += time.perf_counter() - start
        clock["read"] += 1
        yield k, up
        del up, new_state
        start = time.perf_counter()
    clock["clients"] += time.perf_counter() - start
    _check_enough(config, r, len(messages), clock["read"], dropped, "trained")


def _check_enough(config: LoopConfig, r: int, asked: int, kept: int, dropped: list, what: str) -> None:
    """Raise :class:`TooFewRepliesError` when round ``r`` kept fewer of its ``asked`` clients'
    replies than the configuration requires, listing the round's dropped clients."""
    need = config.required_replies(asked)
    if kept < need:
        causes = "; ".join(f"client {k}: {cause}" for rr, k, cause in dropped if rr == r) or "none recorded"
        raise TooFewRepliesError(
            f"round {r} kept {kept} of the {asked} replies of the clients it {what}, fewer than the {need} required "
            f"(LoopConfig(min_replies={config.min_replies}, min_reply_share={config.min_reply_share})); dropped: {causes}; "
            f"round {r} was not aggregated, and {_kept(r)}")


def _kept(r: int) -> str:
    """What a failed round ``r`` leaves: the state and checkpoint of the round before."""
    return ("the server state stays the initial one (no round checkpointed)" if r == 1 else
            f"the server state and any checkpoint stay those of round {r - 1}")


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
    *,
    checkpoint: str | None = None,
    states: str = "memory",
    states_dir: str | None = None,
    progress: bool = False,
    keep_predictions: bool = False,
    observe: Callable[[int, State, MutableMapping[int, State]], None] | None = None,
    stop_after: int | None = None,
) -> RunResult:
    """Run ``algorithm`` for ``config.rounds`` rounds over the clients ``transport`` carries.

    Most callers use :func:`fedlib.run.run_federated`, which builds the transport from a
    federation, a model and :class:`fedlib.run.RunOptions` and hands this loop what it needs of
    them; Flower's ``ServerApp`` passes its own transport.

    Parameters
    ----------
    transport : how messages reach the clients (:mod:`fedlib.engines`); built with the run's seed
        (``config.seed``), its ``initial_model`` (drawn under that seed) initializes the server
    checkpoint, states, states_dir, progress, keep_predictions, observe : as
        :class:`fedlib.run.RunOptions` describes them (checked there)
    stop_after : stop after this round (as if interrupted); with a ``checkpoint`` the run can be
        resumed by calling again without it

    Returns
    -------
    fedlib.results.RunResult
    """
    _check_transport(transport, config.seed)
    n = transport.n_clients
    _validate_events(config.events, n)
    seed = config.seed
    _check_agnostic(algorithm, transport)

    if keep_predictions and not transport.keeps_predictions:
        raise ValueError(f"the {transport.name} transport cannot return the clients' predictions (they stay on the "
                         "clients); valid: RunOptions(keep_predictions=False)")
    ckpt = Path(checkpoint) if checkpoint else None
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
        loaded = unpack_states(tensors, saved["states"])
        server = loaded.pop("server")
        clients = make_states(states, states_dir, overwrite=True)
        for name, st in loaded.items():
            clients[int(name.split("/", 1)[1])] = st
        del loaded, tensors
        ledger = Ledger(tuple(r) for r in saved["ledger"])
        rows = [tuple(r) for r in saved["rows"]]
        active, departed = list(saved["active"]), list(saved["departed"])
        start, seconds, server_seconds = int(saved["rounds_done"]) + 1, list(saved["seconds"]), list(saved["server_seconds"])
    else:
        server = algorithm.init_server(transport.initial_model)
        clients = make_states(states, states_dir)
        for k in range(n):
            clients[k] = State()  # a client's persistent state starts empty (protocol)
        ledger = Ledger()
        rows: list[tuple] = []
        joiners = {e.client for e in config.events if e.kind == "join"}
        active = [k for k in range(n) if k not in joiners]
        departed: list[int] = []
        start, seconds, server_seconds = 1, [], []

    last = config.rounds if stop_after is None else min(config.rounds, stop_after)
    bar = None
    if progress:
        from tqdm.auto import tqdm  # optional display dependency, imported only when asked for

        bar = tqdm(total=config.rounds, initial=start - 1, desc=algorithm.name, unit="round")
    predictions: dict[int, tuple[np.ndarray, np.ndarray]] | None = {} if keep_predictions else None
    rounds_done = start - 1
    model = _model_reference(algorithm, transport)
    dropped: list[tuple[int, int, str]] = []  # this call's (round, client, cause), reported at the end
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
            server = _new_state(algorithm.on_event(server, e), algorithm, "on_event", r)
            rows.append((r, -1, f"{e.kind}:{e.client}", 1.0))

        sampled = _sample(active, config.participation, seed, r)
        messages = _one_per_client(algorithm.configure_train(server, r, list(sampled)), sampled, "configure_train", r)
        # the clients train as aggregate reads their replies: a rule that folds each reply in and frees it (FedAvg's)
        # holds one at a time, one that needs them all reads list(replies)
        clock = {"clients": 0.0, "read": 0}
        replies = _Replies(_accepted(algorithm, transport, r, messages, clients, ledger, rows, config, clock, server,
                                     model, dropped))
        t_server = time.perf_counter()
        server = _new_state(algorithm.aggregate(server, replies, r), algorithm, "aggregate", r)
        t_server = time.perf_counter() - t_server - clock["clients"]  # the server's own time, not the clients'
        unread = replies.drain()  # a rule that stopped early: the round's replies are received all the same
        if unread:
            raise RuntimeError(f"{type(algorithm).__name__}.aggregate returned in round {r} with {unread} of the round's "
                               f"{clock['read']} replies unread (received and recorded, never aggregated); a rule reads "
                               "every reply it is given, once (one that needs them at once: list(replies))")
        server_seconds.append(t_server)
        del messages, replies

        if (r == config.rounds and config.evaluate_last) or (config.eval_every and r % config.eval_every == 0):
            if predictions is not None:
                predictions = {}
            rows.extend(_evaluate(algorithm, server, transport, clients, active, config, r, ledger, predictions, dropped))
        seconds.append(time.perf_counter() - t0)
        rounds_done = r
        if ckpt is not None:
            tensors, metas = pack_states({"server": server, **{f"client/{k}": v for k, v in clients.items()}})
            save_tensors_json(ckpt, tensors, {
                "fingerprint": fingerprint, "states": metas, "ledger": ledger.records, "rows": rows, "active": active,
                "departed": departed, "rounds_done": r, "seconds": seconds, "server_seconds": server_seconds,
            })
        if observe is not None:
            observe(r, server, clients)
        if bar is not None:
            bar.update(1)
            _postfix(bar, rows, r)
    if dropped:
        said = (f"{algorithm.name}: {len(dropped)} client repl{'y' if len(dropped) == 1 else 'ies'} dropped: "
                + "; ".join(f"round {rr} client {k}: {cause}" for rr, k, cause in dropped[:10])
                + (f"; and {len(dropped) - 10} more" if len(dropped) > 10 else "") + " (RunResult.dropped)")
        if bar is not None:
            bar.write(said)
        warnings.warn(said, DroppedClientsWarning, stacklevel=2)  # a quiet run (no progress bar) says so too
    if bar is not None:
        bar.close()
    return RunResult(tidy_frame(rows), ledger, server, clients, rounds_done, algorithm.name, departed, seconds, server_seconds,
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
    if getattr(transport, "heterogeneous", False) and not algorithm.capabilities.model_agnostic:
        raise ValueError(f"{algorithm.name} shares parameters, but the clients' architectures differ "
                         f"({transport.architectures}); valid: a model-agnostic method (Capabilities(model_agnostic=True), "
                         "e.g. cosmos, fedmd, fedct, comet) or one architecture for every client")


_CHECKPOINT_KEYS = ("fingerprint", "states", "ledger", "rows", "active", "departed", "rounds_done", "seconds",
                    "server_seconds")


def algorithm_configuration(obj, _depth: int = 0):
    """A method's full configuration as plain JSON data, for a checkpoint's fingerprint: its
    public attributes (not those that start with ``_``, a method's caches), recursively;
    dataclasses (``TrainConfig``, ``HDCConfig``, ...) by their fields, tensors and arrays by a
    SHA-256 digest of their bytes (bytes too; pandas frames, series and indexes by a digest of
    their values with their dtypes and columns; torch dtypes, devices and paths by name), a ``functools.partial`` by its function and arguments, a
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
    if isinstance(obj, complex):
        return {"complex": repr(obj)}
    if isinstance(obj, (bytes, bytearray)):
        return {"bytes": hashlib.sha256(bytes(obj)).hexdigest()}
    if isinstance(obj, (torch.dtype, torch.device, PurePath)):
        return str(obj)
    if isinstance(obj, (pd.DataFrame, pd.Series, pd.Index)):  # by value: its labels, dtypes and every cell
        frame = obj.to_frame() if isinstance(obj, (pd.Series, pd.Index)) else obj
        return {"pandas": type(obj).__name__, "dtypes": [str(d) for d in frame.dtypes],
                "columns": [str(c) for c in frame.columns],
                "sha256": hashlib.sha256(pd.util.hash_pandas_object(obj, index=not isinstance(obj, pd.Index))
                                         .to_numpy().tobytes()).hexdigest()}
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


def _evaluate(algorithm, server, transport, states, active, config, r, ledger, predictions=None,
              dropped: list | None = None) -> list[tuple]:
    """Every active client (or the round's evaluation sample) receives its evaluation message,
    deploys and is evaluated; ``predictions`` (a dict) collects their predicted labels. With
    ``dropped`` (the run's list), fewer evaluations than ``config.required_replies`` raise
    :class:`TooFewRepliesError`."""
    clients = _evaluated_clients(active, config.eval_clients, config.seed, r)
    messages = _evaluation_messages(algorithm, server, r, clients)
    for k in clients:
        ledger.record(r, k, DOWN, messages[k])
    rows = [(r, -1, "eval_sample", float(len(clients)))] if len(clients) < len(active) else []
    extra = {} if predictions is None else {"predictions": predictions}
    evaluated = 0
    for k, abilities in transport.evaluate(algorithm, r, messages, states, rare_ratio=config.rare_ratio,
                                           f1_class=config.f1_class, **extra):
        if isinstance(abilities, ClientFailure):
            rows.extend(_failed(abilities, config, r, "dropped_failed_eval"))
            if dropped is not None:
                dropped.append((r, k, f"no evaluation ({abilities.reason})"))
            continue
        rows.extend((r, k, name, float(v)) for name, v in abilities.items())
        evaluated += 1
    if dropped is not None:
        _check_enough(config, r, len(clients), evaluated, dropped, "evaluated")
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
    (:attr:`fedlib.results.RunResult.registered`) is evaluated; the messages are not recorded in the run's
    ledger; ``predictions`` (a dict), when given, receives each client's predicted labels as
    :attr:`fedlib.results.RunResult.predictions` holds them. Returns the tidy rows for the last round, like
    ``result.frame``."""
    _check_transport(transport, config.seed)
    bad = [k for k in result.registered if not 0 <= k < transport.n_clients]
    if bad:
        raise ValueError(f"the run has client(s) {bad} that this federation of {transport.n_clients} clients lacks")
    rows = _evaluate(algorithm, result.server, transport, result.client_states, result.registered, config, result.rounds_done,
                     Ledger(), predictions)
    return tidy_frame(rows)


__all__ = ["ClientFailedError", "DroppedClientsWarning", "FAILURE_POLICIES", "InvalidReplyError", "LoopConfig", "NONFINITE_POLICIES",
           "NonFiniteUpdateError", "TooFewRepliesError",
           "algorithm_configuration", "evaluate_result", "fingerprint_differences", "run_rounds"]
