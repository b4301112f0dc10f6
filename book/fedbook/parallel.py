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
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

import torch

from fedlib.validation import is_int

T = TypeVar("T")
R = TypeVar("R")


def fork_available() -> bool:
    """Whether worker processes can be forked here (Linux and the other POSIX systems but macOS)."""
    return "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin"


_TASK: tuple[Callable, list] | None = None
"""The function and items of the running :func:`map_parallel`: forked workers inherit them, so
only an item's index is sent to a worker and only its result comes back (``fn`` need not pickle)."""


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
    workers = _check_count("workers", workers)
    threads = _check_count("threads", threads)
    items = list(items)
    if workers == 1:
        return [fn(item) for item in items]
    if len(items) <= 1 or not fork_available():  # asked for workers, run here: with the workers' threads all the same
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return [fn(item) for item in items]
        finally:
            torch.set_num_threads(before)
    global _TASK
    if _TASK is not None:
        raise RuntimeError("map_parallel cannot be nested: call it from the top level of a notebook or script")
    _TASK = (fn, items)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=context, initializer=_init_worker,
                                 initargs=(threads,)) as pool:
            futures = [pool.submit(_run, i) for i in range(len(items))]
            results = []
            for item, future in zip(items, futures):
                try:
                    results.append(future.result())
                except Exception as err:
                    err.add_note(f"(raised in a worker process for item {item!r})")
                    for f in futures:
                        f.cancel()
                    raise
            return results
    finally:
        _TASK = None


__all__ = ["fork_available", "map_parallel"]
