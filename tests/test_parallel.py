"""fedbook.parallel: independent runs in forked workers give the results of the plain loop."""

from __future__ import annotations


import pytest
import torch

from fedlib.algorithms import FedAvg
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedbook.parallel import fork_available, map_parallel
from fedlib.training import TrainConfig


def test_results_in_the_order_of_the_items_and_closures_need_not_pickle():
    offset = 10
    assert map_parallel(lambda s: s + offset, [3, 1, 2], workers=2) == [13, 11, 12]
    assert map_parallel(lambda s: s, [], workers=2) == []


def test_runs_in_workers_equal_runs_here_bit_for_bit(tiny_federation, tiny_model_fn):
    def one(seed):
        res = run_federated(FedAvg(train=TrainConfig(epochs=1, batch_size=8)), tiny_federation, tiny_model_fn,
                            LoopConfig(rounds=2, seed=seed))
        return res.server.arrays, res.frame

    here = [one(s) for s in (0, 1, 2)]
    there = map_parallel(one, (0, 1, 2), workers=2)
    for (a, fa), (b, fb) in zip(here, there):
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert fa.equals(fb)


@pytest.mark.skipif(not fork_available(), reason="no fork here: map_parallel runs in this process")
def test_workers_run_in_other_processes_with_their_threads():
    import os

    out = map_parallel(lambda _: (os.getpid(), torch.get_num_threads()), range(4), workers=2, threads=1)
    assert os.getpid() not in {pid for pid, _ in out} and {t for _, t in out} == {1}


def test_an_error_in_a_worker_names_its_item():
    def fail(s):
        if s == 2:
            raise KeyError("missing")
        return s

    with pytest.raises(KeyError) as info:
        map_parallel(fail, [1, 2, 3], workers=2)
    assert any("for item 2" in note for note in info.value.__notes__)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="workers must be an integer >= 1, got 0"):
        map_parallel(abs, [1], workers=0)
    with pytest.raises(ValueError, match="threads must be an integer >= 1, got 1.5"):
        map_parallel(abs, [1], workers=2, threads=1.5)
    with pytest.raises(RuntimeError, match="cannot be nested"):
        map_parallel(lambda _: map_parallel(abs, [1, 2], workers=2), [1, 2], workers=2)


def test_items_run_here_though_workers_were_asked_for_use_the_workers_threads():
    """One item (or no fork) runs in this process: with the threads asked for the workers, as a
    worker would (a study's cache key names them), and the caller's threads back afterwards."""
    import torch

    before = torch.get_num_threads()
    assert map_parallel(lambda _: torch.get_num_threads(), [0], workers=2, threads=3) == [3]
    assert torch.get_num_threads() == before
    assert map_parallel(lambda _: torch.get_num_threads(), [0], workers=1, threads=3) == [before]  # workers=1: the caller's
