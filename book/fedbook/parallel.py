"""Independent runs in parallel worker processes: a study's cells on a laptop's cores.

A study's cells (:mod:`fedbook.study`: one setting and one seed each) are independent: each
derives every random stream from its own seed (:mod:`fedlib.rng`), so the cell of seed 0 gives the
same bits whether it executes in this process or in another one, before or after seed 1's. :func:`map_parallel` maps a function over
such items in ``workers`` processes and returns the results in the items' order, as the plain
``[fn(item) for item in items]`` would.

The workers are forked from the calling process (``multiprocessing``'s ``"fork"`` start method)
when the call starts, so ``fn`` may be any function, a lambda or one defined in a notebook, and
may use whatever the notebook built before the call (the data, the encoders): the children see a
copy of it, and only the results travel back (pickled). Each worker runs ``threads`` torch threads (default 1), so that ``workers ×
threads`` matches the cores. Where ``fork`` does not exist (Windows) or is unsafe (macOS, whose
system libraries may not survive it), ``map_parallel`` runs the items one after another in this
process, with the workers' threads, and the same results.

:func:`map_cells` is the study runner's engine (:func:`fedbook.study.run_study`): the same
mapping on an **executor** of the caller's choice (:data:`EXECUTORS`: this process, the forked
pool, a local Ray instance or a Ray cluster), yielding each item's result as soon as it is done
(so each can be kept and reported at once), and running a failed item once again, a fresh attempt
(:class:`Finished` says which were retried, and why).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from fedlib.validation import is_int

T = TypeVar("T")
R = TypeVar("R")


def fork_available() -> bool:
    """Whether worker processes can be forked here (Linux and the other POSIX systems but macOS)."""
    return "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin"


_TASK: tuple[Callable, list] | None = None
"""The function and items of the running pool of :func:`map_cells` (and so :func:`map_parallel`):
forked workers inherit them, so only an item's index is sent to a worker and only its result comes
back (``fn`` need not pickle)."""


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def _run(index: int):
    fn, items = _TASK
    return fn(items[index])


def _check_count(name: str, value: object) -> int:
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def map_parallel(fn: Callable[[T], R], items: Iterable[T], workers: int = 1, *, threads: int = 1) -> list[R]:
    """``[fn(item) for item in items]``, computed in ``workers`` forked processes.

    Parameters
    ----------
    fn : a function of one item; its results must pickle (tensors, DataFrames, dataclasses, ...)
    items : the independent items (e.g. seeds)
    workers : processes (1, the default: in this process, one item after another)
    threads : torch threads per worker process, and of this process while it runs the items itself
        though ``workers`` > 1 (one item, or no ``fork`` here); with ``workers=1`` the caller's.
        Results are bit for bit those of the plain loop when the caller runs with the same number
        of threads (a chapter that sets one thread, as the book's build does, and ``threads=1``)

    Returns
    -------
    list of ``fn``'s results, in the order of ``items``

    Raises
    ------
    ValueError
        ``workers`` or ``threads`` not an integer >= 1. An exception raised by ``fn`` in a worker
        is raised here, with the item it was raised for noted.

    Examples
    --------
    >>> map_parallel(lambda s: s * s, [1, 2, 3])
    [1, 4, 9]
    """
    results: list = [None] * len(items := list(items))
    with contextlib.closing(map_cells(fn, items, workers, threads=threads, retries=0)) as finished:
        for one in finished:
            results[one.index] = one.value
    return results


EXECUTORS = ("process", "ray", "auto", "ray://HOST:PORT", "HOST:PORT")
"""Where :func:`map_cells` runs the items: ``"process"`` (or ``None``), this process (1 worker) or
the forked pool of :func:`map_parallel`; ``"ray"``, a local Ray instance of ``workers`` CPUs that
the call starts and stops (or the Ray this process already joined); ``"auto"``, ``"ray://HOST:PORT"``
(Ray Client) or ``"HOST:PORT"`` (a head node's address), an existing Ray cluster (its CPUs,
whatever ``workers`` says), which the call joins and leaves."""

_ADDRESS = re.compile(r"^(ray://)?[A-Za-z0-9_.-]+:[0-9]{1,5}$")


def check_executor(executor: str | None) -> str | None:
    """The Ray address ``executor`` names (``"ray"``: ``"local"``, a local instance), ``None`` for
    the process pool; a ValueError naming the value and the valid ones for anything else.

    Examples
    --------
    >>> check_executor(None), check_executor("process"), check_executor("ray"), check_executor("10.0.0.1:6379")
    (None, None, 'local', '10.0.0.1:6379')
    >>> check_executor("threads")
    Traceback (most recent call last):
    ...
    ValueError: executor must be one of None, 'process', 'ray', 'auto', 'ray://HOST:PORT', 'HOST:PORT'; got 'threads'
    """
    if executor is None or executor == "process":
        return None
    if executor == "ray":
        return "local"
    if isinstance(executor, str) and (executor == "auto" or _ADDRESS.match(executor)):
        return executor
    raise ValueError(f"executor must be one of None, {', '.join(map(repr, EXECUTORS))}; got {executor!r}")


def runs_here(executor: str | None, workers: int) -> bool:
    """Whether :func:`map_cells` runs the items in this process with the caller's torch threads
    (the process executor with one worker); elsewhere each item runs with the ``threads`` asked for."""
    return check_executor(executor) is None and workers == 1


@dataclass(frozen=True)
class Finished:
    """One item done by :func:`map_cells`: its position in the items, ``fn``'s result, and the
    errors of its failed attempts before the one that succeeded (empty: it succeeded at once),
    each as ``"<exception class>: <message>"``."""

    index: int
    value: Any
    errors: tuple[str, ...] = ()


def describe_error(err: BaseException) -> str:
    """``"<exception class>: <message>"`` (a Ray task's error: that of the exception it raised).

    Examples
    --------
    >>> describe_error(KeyError("x"))
    "KeyError: 'x'"
    """
    return f"{type(err).__name__}: {err}"


def map_cells(fn: Callable[[T], R], items: Iterable[T], workers: int = 1, *, threads: int = 1,
              executor: str | None = None, retries: int = 1,
              on_retry: Callable[[int, str], None] | None = None) -> Iterator[Finished]:
    """``fn(item)`` for each of ``items`` on ``executor``, each result yielded as soon as it is done
    (in the order they finish: each :class:`Finished` says whose it is).

    Parameters
    ----------
    fn : a function of one item; its results must pickle. On Ray ``fn`` itself travels to the
        workers (cloudpickle: a function of a module, a ``functools.partial`` of one, or a lambda
        bound to nothing that cannot pickle); elsewhere it need not pickle (:func:`map_parallel`)
    items : the independent items (each derives its random streams from its own seed)
    workers : processes of the pool, or CPUs of a local Ray instance (1, with the process
        executor: in this process, one item after another, with the caller's torch threads)
    threads : torch threads each item runs with (but in this process with one worker: the
        caller's); on Ray each task asks for that many CPUs
    executor : None or one of :data:`EXECUTORS`
    retries : how many fresh attempts a failed item gets (on Ray a new task; in the pool, a new
        pool when a worker died). A worker's death fails every item in flight in its pool: they run
        again one at a time, each alone, and only the one whose lone run breaks its pool has failed
        (an attempt that counts); the others' attempts do not count
    on_retry : called with the item's index and its error (:func:`describe_error`) when a failed
        item is tried again

    Yields
    ------
    Finished
        Each item once, when it is done.

    Raises
    ------
    ValueError
        ``workers`` or ``threads`` not an integer >= 1, an unknown ``executor``, or ``fn`` that
        cannot travel to Ray's workers. An item that fails ``retries + 1`` times: the last
        exception is raised, with the item and the earlier attempts' errors noted, once the items
        already in flight in the pool have finished (those that succeed are yielded first, so the
        caller keeps them); on Ray the tasks done by then are yielded and the others cancelled.

    Examples
    --------
    >>> sorted((f.index, f.value) for f in map_cells(lambda s: s * s, [1, 2, 3]))
    [(0, 1), (1, 4), (2, 9)]
    """
    workers = _check_count("workers", workers)
    threads = _check_count("threads", threads)
    if not is_int(retries) or retries < 0:
        raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
    address = check_executor(executor)
    return _finished(fn, list(items), workers, threads, address, retries, on_retry)


def _finished(fn: Callable, items: list, workers: int, threads: int, address: str | None, retries: int,
              on_retry: Callable[[int, str], None] | None) -> Iterator[Finished]:
    """:func:`map_cells`' generator (its arguments checked when it is called, not when iterated)."""
    if not items:
        return
    if address is not None:
        runner = _Ray(fn, items, workers, threads, address)
    elif workers == 1:
        runner = _Here(fn, items, None)
    elif len(items) == 1 or not fork_available():  # asked for workers, run here: with the workers' threads
        runner = _Here(fn, items, threads)
    else:
        runner = _Pool(fn, items, workers, threads)
    errors: dict[int, list[str]] = collections.defaultdict(list)
    with contextlib.closing(runner):
        for i in range(len(items)):
            runner.submit(i)
        left = len(items)
        while left:
            index, value, err = runner.next_done()
            if err is None:
                left -= 1
                yield Finished(index, value, tuple(errors.pop(index, ())))
            elif len(errors[index]) < retries:
                errors[index].append(describe_error(err))
                if on_retry is not None:
                    on_retry(index, errors[index][-1])
                runner.submit(index)
            else:
                earlier = "; ".join(f"attempt {k + 1} raised {e}" for k, e in enumerate(errors[index]))
                err.add_note(f"(raised for item {items[index]!r} on attempt {len(errors[index]) + 1} of {retries + 1}"
                             f"{'; ' + earlier if earlier else ''})")
                for index, value in runner.settle():  # the items in flight that succeed still reach the caller
                    yield Finished(index, value, tuple(errors.pop(index, ())))
                raise err


class _Here:
    """Runs the items in this process, in the order submitted, with ``threads`` torch threads
    (``None``: the caller's)."""

    def __init__(self, fn: Callable, items: list, threads: int | None) -> None:
        self.fn, self.items, self.threads = fn, items, threads
        self.queue: collections.deque[int] = collections.deque()

    def submit(self, index: int) -> None:
        self.queue.append(index)

    def next_done(self) -> tuple[int, Any, Exception | None]:
        index = self.queue.popleft()
        before = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        try:
            return index, self.fn(self.items[index]), None
        except Exception as err:
            return index, None, err
        finally:
            torch.set_num_threads(before)

    def settle(self) -> list[tuple[int, Any]]:
        return []  # nothing runs but the item asked for

    def close(self) -> None:
        self.queue.clear()


class _Pool:
    """Runs the items in processes forked from this one (only an item's index goes to a worker), at
    most ``workers`` at a time. A worker that dies breaks its pool, and every item in flight there
    fails with it: an item alone in its pool broke it (that attempt counts); several in flight, they
    run again one at a time, each alone in a pool of one worker, before anything else, so the one
    that breaks its pool again is found and the others' attempts do not count; then a fresh pool
    runs the rest."""

    def __init__(self, fn: Callable, items: list, workers: int, threads: int) -> None:
        global _TASK
        if _TASK is not None:
            raise RuntimeError("map_cells cannot be nested in map_parallel or map_cells: call it from the top level")
        _TASK = (fn, items)
        self.workers, self.threads = min(workers, len(items)), threads
        self.pool: ProcessPoolExecutor | None = None
        self.size = 0  # the pool's workers
        self.waiting: collections.deque[int] = collections.deque()  # submitted, not started
        self.suspects: collections.deque[int] = collections.deque()  # in flight when a pool broke: to run alone
        self.futures: dict = {}  # future -> index, the items in flight

    def submit(self, index: int) -> None:
        self.waiting.append(index)

    def _start(self) -> None:
        """Fill the pool: the suspects one at a time, each alone in a pool of one worker, then the
        waiting items, up to ``workers`` in flight."""
        if self.futures and (self.suspects or self.size == 1):  # (workers > 1: a pool of one runs a suspect)
            return
        if self.suspects:
            self._send(self.suspects.popleft(), 1)
            return
        while self.waiting and len(self.futures) < self.workers:
            self._send(self.waiting.popleft(), self.workers)

    def _send(self, index: int, size: int) -> None:
        if self.pool is not None and self.size != size:
            self.pool.shutdown(wait=True)
            self.pool = None
        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=size, mp_context=multiprocessing.get_context("fork"),
                                            initializer=_init_worker, initargs=(self.threads,))
            self.size = size
        self.futures[self.pool.submit(_run, index)] = index

    def next_done(self) -> tuple[int, Any, BaseException | None]:
        while True:
            self._start()
            done, _ = wait(list(self.futures), return_when=FIRST_COMPLETED)
            future = min(done, key=lambda f: (f.exception() is not None, self.futures[f]))  # successes first
            err = future.exception()
            if not isinstance(err, BrokenProcessPool):
                return self.futures.pop(future), None if err is not None else future.result(), err
            self.pool.shutdown(wait=True)  # broken: every future of it is done now
            self.pool = None
            broken = sorted(i for f, i in self.futures.items() if f.exception() is not None)
            self.futures = {f: i for f, i in self.futures.items() if f.exception() is None}  # done before the break
            if len(broken) == 1:
                return broken[0], None, err
            self.suspects.extend(broken)

    def settle(self) -> list[tuple[int, Any]]:
        """The items in flight (at most ``workers``, started before a failure) that succeed, waited for."""
        wait(list(self.futures))
        out = [(i, f.result()) for f, i in sorted(self.futures.items(), key=lambda fi: fi[1]) if f.exception() is None]
        self.futures.clear()
        return out

    def close(self) -> None:
        global _TASK
        try:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
        finally:
            _TASK = None


_LOADED: tuple[str, Callable] | None = None
"""In a Ray worker: the function of the last :func:`map_cells` it ran items of, by its token (so a
function bound to data, a chapter's data set, is unpickled once per worker, not once per item)."""


def _ray_call(token: str, pickled: bytes, item: Any, threads: int) -> Any:
    """One item in a Ray worker, with ``threads`` torch threads (``pickled``: the function, by
    cloudpickle; ``token``: names it, the same for every item of one call)."""
    import ray

    global _LOADED
    if _LOADED is None or _LOADED[0] != token:
        _LOADED = (token, ray.cloudpickle.loads(pickled))
    torch.set_num_threads(threads)
    return _LOADED[1](item)


class _Ray:
    """Runs each item as a Ray task (``fn`` put in Ray's object store once). Joins the Ray this
    process is connected to, or else starts a local instance (``address`` ``"local"``:
    :func:`local_ray`) or connects to a cluster, and stops or leaves it when closed."""

    def __init__(self, fn: Callable, items: list, workers: int, threads: int, address: str) -> None:
        ray = _import_ray()

        self.ray, self.items, self.threads, self.refs = ray, items, threads, {}
        self.stack = contextlib.ExitStack()
        try:
            pickled = ray.cloudpickle.dumps(fn)  # before anything starts
        except Exception as err:
            raise ValueError(f"the function of the items cannot travel to Ray's workers ({describe_error(err)}): it "
                             "must pickle with cloudpickle (a function of a module, a functools.partial of one, "
                             "bound to data, not to open files, locks or generators); or run it with executor=None") from err
        if not _ray_joined():
            if address == "local":
                self.stack.enter_context(local_ray(workers * threads))
            else:
                with _environ(RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0"):
                    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
                self.stack.callback(ray.shutdown)  # this process leaves the cluster, which goes on
        try:
            self.task = ray.remote(num_cpus=threads, max_retries=0, retry_exceptions=False)(_ray_call)
            self.fn = ray.put(pickled)  # once, for every task
            self.token = uuid.uuid4().hex
        except BaseException:
            self.stack.close()
            raise

    def submit(self, index: int) -> None:
        self.refs[self.task.remote(self.token, self.fn, self.items[index], self.threads)] = index

    def next_done(self) -> tuple[int, Any, BaseException | None]:
        ready, _ = self.ray.wait(list(self.refs), num_returns=1)
        index = self.refs.pop(ready[0])
        try:
            return index, self.ray.get(ready[0]), None
        except Exception as err:
            cause = getattr(err, "cause", None)
            if isinstance(err, self.ray.exceptions.RayTaskError) and isinstance(cause, Exception):
                cause.__cause__ = err  # the exception the item raised, after the worker's traceback
                return index, None, cause
            return index, None, err

    def settle(self) -> list[tuple[int, Any]]:
        """The tasks done by now that succeeded (the others are cancelled when closed)."""
        ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0) if self.refs else ([], [])
        out = []
        for ref in ready:
            index = self.refs.pop(ref)
            with contextlib.suppress(Exception):
                out.append((index, self.ray.get(ref)))
        return out

    def close(self) -> None:
        with self.stack:
            for ref in list(self.refs):  # a failed study's cells still running
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref, force=True)
            self.refs.clear()


def _import_ray():
    """Ray, imported when asked for (it takes a second), without the notes its import prints in a
    notebook (a missing ``ipywidgets``, tqdm's missing ``IProgress``): an executed chapter keeps its
    outputs."""
    logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import ray
    return ray


def _ray_joined() -> bool:
    """Whether this process is connected to a Ray (which :func:`map_cells` then joins)."""
    return _import_ray().is_initialized()


@contextlib.contextmanager
def local_ray(cpus: int) -> Iterator[None]:
    """A local Ray instance of ``cpus`` CPUs while inside, its files in a temporary folder removed
    after; its workers import what this process can (its ``sys.path``). It advertises 127.0.0.1
    and contacts nothing outside (no dashboard, no usage statistics sent), but its servers listen
    on every interface of the machine and accept whoever reaches their ports: run it on a private
    network. :func:`map_cells` (and so :func:`fedbook.study.run_study`)
    with ``executor="ray"`` starts one per call (5-10 s); a script that runs several studies can
    hold one for all of them, each call joining it::

        with local_ray(2):
            table = run_study(TABLE, executor="ray")
            figure = run_study(FIGURE, executor="ray")
    """
    ray = _import_ray()
    cpus = _check_count("cpus", cpus)
    if ray.is_initialized():
        raise RuntimeError("local_ray: this process is connected to a Ray already (ray.shutdown() first)")
    temp = tempfile.mkdtemp(prefix="ray-", dir=tempfile.gettempdir())
    try:
        with _environ(PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                      RAY_USAGE_STATS_ENABLED="0", RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0"):
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                     _temp_dir=temp, _node_ip_address="127.0.0.1")
        try:
            yield
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """These environment variables set while inside (for the processes started then), restored after."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


__all__ = ["EXECUTORS", "Finished", "check_executor", "describe_error", "fork_available", "local_ray", "map_cells",
           "map_parallel", "runs_here"]
