"""Benchmark of FedGRC's server side: a script, not a pytest file.

    .venv/bin/python tests/bench_fedgrc.py            # d in (64, 128, 256, 512, 1000), C = 100, 20 clients
    .venv/bin/python tests/bench_fedgrc.py --quick    # d in (32, 64, 128), C = 20, 5 clients (seconds)
    .venv/bin/python tests/bench_fedgrc.py --ccvr     # also time CCVR's head (sampling + re-training)

Section 1, :func:`bench_heads` -- head construction from moments as the feature dimension d grows.
Each client's class moments (counts (C,), sums (C, d), Gram matrices (C, d, d)) are built from
random label-skewed features with ``ClassMoments.from_features`` in chunks of ``--chunk`` samples,
merged by addition (what ``fedlib.stats.feature_moments`` does on a client). Then, timed (medians
of ``--repeats`` after one untimed warm-up; the merge once):

* ``merge``: the server adding the clients' moments as they arrive, accumulated in place into one
  buffer (what ``ClassMoments.sum`` does); ``merge_alloc``: the same sum with ``ClassMoments.__add__``,
  which allocates a new (C, d, d) tensor per addition (page faults dominate; not in the total);
  ``merge_compact``: the in-place merge of the compact statistics (counts, sums and the total Gram
  matrix (d, d) only, ``ClassMoments.compact()``; every head but CCVR fits from them; not in the total);
* ``mms``: :class:`fedlib.heads.MMS` (layer scales over 4 layer blocks, pooled covariance, metric A);
* ``sasp_all``: one :class:`fedlib.heads.SASP` head per client, from its counts and sums;
* ``fedcgs``, ``lda``, ``fed3r``, ``fedncm``: the baselines of :mod:`fedlib.heads`
  (``ccvr`` with ``--ccvr``).

It prints the table, the ratio time(d = 1000) / time(d = 512) per column next to the d^2 and d^3
ratios, the server's peak resident memory for the largest case (a thread sampling
``/proc/self/statm``) while merging a message and while fitting every head, next to the size of the
merged moments, and asserts that no tensor of shape
(n, d, d) with n a number of samples is ever formed: a ``TorchDispatchMode`` records the shape of
every tensor that any torch operation outputs while the largest case's clients build their moments
and the server merges and fits; the largest may be (C, d, d), the merged Gram matrices.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time

import numpy as np
import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fedlib.heads import MMS, SASP, CCVRHead, FedCGSHead, Fed3RHead, FedNCMHead, LDAHead
from fedlib.stats import ClassMoments

FULL = dict(dims=(64, 128, 256, 512, 1000), classes=100, clients=20, n_client=512)
QUICK = dict(dims=(32, 64, 128), classes=20, clients=5, n_client=200)


# ---------------------------------------------------------------------------------------------
# instruments
# ---------------------------------------------------------------------------------------------
class ShapeRecorder(TorchDispatchMode):
    """Records the shape of every tensor any torch operation outputs while active."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: set[tuple[int, ...]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.shapes.add(tuple(t.shape))
        return out


class PeakRSS:
    """Peak resident set size (bytes) above the value at entry, sampled every ``interval`` s."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(self.interval)

    def __enter__(self) -> "PeakRSS":
        self.start = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def extra(self) -> int:
        return self.peak - self.start


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---------------------------------------------------------------------------------------------
# section 1: head construction from moments
# ---------------------------------------------------------------------------------------------
def layer_blocks(d: int) -> tuple[int, ...]:
    """Four layer blocks of sizes about d/8, d/8, d/4, d/2 (a multilayer feature, deepest widest)."""
    a, b = d // 8, d // 4
    return (a, a, b, d - 2 * a - b)


def client_moments(d: int, classes: int, n_client: int, client: int, chunk: int, centers: np.ndarray,
                   seed: int = 0) -> tuple[ClassMoments, int]:
    """One client's moments of random label-skewed features, built chunk by chunk; returns the
    moments and the largest chunk size (the client never holds more than (chunk, d) features)."""
    rng = np.random.default_rng([seed, client])
    y = rng.choice(classes, size=n_client, p=rng.dirichlet(np.full(classes, 0.3)))
    shift = rng.normal(scale=0.3, size=(classes, d))  # client-specific class shifts
    total = None
    for i in range(0, n_client, chunk):
        yc = y[i : i + chunk]
        z = centers[yc] + shift[yc] + rng.normal(size=(len(yc), d))  # (chunk, d)
        part = ClassMoments.from_features(torch.from_numpy(z), torch.from_numpy(yc), classes)
        total = part if total is None else total + part
    return total, min(chunk, n_client)


def bench_heads(args) -> pd.DataFrame:
    """Section 1: time to merge the clients' moments and fit every head, per d; returns the table."""
    cfg = QUICK if args.quick else FULL
    dims, classes, clients, n_client = cfg["dims"], cfg["classes"], cfg["clients"], cfg["n_client"]
    repeats = args.repeats
    print(f"== Section 1: statistical heads from moments: C = {classes} classes, {clients} clients, "
          f"{n_client} samples per client (chunks of {args.chunk}), {torch.get_num_threads()} thread(s), "
          f"median of {repeats}")
    with ShapeRecorder():  # its first use loads ~150 MB of dispatch machinery: not the server's memory
        torch.zeros(1) + 1
    rows, memory = [], {}
    for d in dims:
        largest = d == dims[-1]
        centers = np.random.default_rng(d).normal(scale=2.0, size=(classes, d))
        recorder = ShapeRecorder() if largest else None
        own, merged, acc, acc_c, t_merge, t_inplace, t_compact, merge_peak = [], None, None, None, 0.0, 0.0, 0.0, 0
        for k in range(clients):
            with recorder if recorder is not None else contextlib.nullcontext():  # the client side, chunk by chunk
                m, _ = client_moments(d, classes, n_client, k, args.chunk, centers)
            assert tuple(m.grams.shape) == (classes, d, d)  # what a client sends: (C, d, d), never (n, d, d)
            own.append((m.counts, m.sums))  # what each client keeps for its own SASP head
            with PeakRSS() as rss, recorder if recorder is not None else contextlib.nullcontext():
                t0 = time.perf_counter()
                merged = m if merged is None else merged + m  # the server: addition only (ClassMoments.__add__)
                t_merge += time.perf_counter() - t0
            merge_peak = max(merge_peak, rss.extra)
            t0 = time.perf_counter()  # the same sum accumulated in place into one preallocated buffer
            if acc is None:
                acc = ClassMoments(m.counts.clone(), m.sums.clone(), m.grams.clone())
            else:
                acc.counts.add_(m.counts), acc.sums.add_(m.sums), acc.grams.add_(m.grams)
            t_inplace += time.perf_counter() - t0
            mc = m.compact()  # what the client would send in the compact form
            t0 = time.perf_counter()
            if acc_c is None:
                acc_c = ClassMoments(mc.counts.clone(), mc.sums.clone(), mc.grams.clone())
            else:
                acc_c.counts.add_(mc.counts), acc_c.sums.add_(mc.sums), acc_c.grams.add_(mc.grams)
            t_compact += time.perf_counter() - t0
            del m, mc
        assert torch.equal(acc.grams, merged.grams)
        del acc, acc_c
        blocks = layer_blocks(d)
        fits = {
            "mms": lambda: MMS(0.1).fit(merged, blocks),
            "fedcgs": lambda: FedCGSHead().fit(merged),
            "lda": lambda: LDAHead().fit(merged),
            "fed3r": lambda: Fed3RHead().fit(merged),
            "fedncm": lambda: FedNCMHead().fit(merged),
        }
        if args.ccvr:
            fits["ccvr"] = lambda: CCVRHead().fit(merged, generator=torch.Generator().manual_seed(0))
        mms = MMS(0.1).fit(merged, blocks)
        fits["sasp_all"] = lambda: [SASP(10.0).fit(mms, n, t) for n, t in own]
        with PeakRSS() as rss, recorder if recorder is not None else contextlib.nullcontext():
            for fit in fits.values():  # the server side, once, untimed (also a warm-up)
                fit()
        fit_peak = rss.extra
        row = {"d": d, "merge": t_inplace, "merge_alloc": t_merge, "merge_compact": t_compact}
        row.update({name: _median_time(fit, repeats) for name, fit in fits.items()})
        rows.append(row)
        if largest:
            n_total = clients * n_client
            sample_counts = {n_client, n_total, args.chunk, min(args.chunk, n_client)} - {classes}  # (C, d, d) is allowed
            bad = [s for s in recorder.shapes if len(s) >= 3 and s[-2:] == (d, d) and s[0] in sample_counts]
            biggest = max(recorder.shapes, key=lambda s: int(np.prod(s)) if s else 1)
            assert not bad, f"a tensor of shape (n, d, d) was formed: {bad}"
            assert int(np.prod(biggest)) <= classes * d * d, f"a tensor larger than (C, d, d) was formed: {biggest}"
            memory = {"d": d, "merge_peak": merge_peak, "fit_peak": fit_peak, "moments": classes * (1 + d + d * d) * 8,
                      "compact": (classes * (1 + d) + d * d) * 8,
                      "biggest": biggest, "n_total": n_total, "nd2": n_total * d * d * 8}
        del merged, own, mms, fits

    table = pd.DataFrame(rows).set_index("d")
    order = ["merge", "mms", "sasp_all", "fedcgs", "lda", "fed3r", "fedncm"] + (["ccvr"] if args.ccvr else [])
    table = table[order + ["merge_alloc", "merge_compact"]]
    table.insert(len(order), "total", table[order].sum(axis=1))
    print("\nseconds (merges: once; fits: median); merge: accumulated in place as ClassMoments.sum does; "
          "merge_alloc: the same sum with a new tensor per addition (ClassMoments.__add__; not in total); "
          "merge_compact: in place, the compact statistics (total Gram only; not in total)")
    print(table.to_string(float_format=lambda v: f"{v:9.4f}"))
    a, b = dims[-1], dims[-2]
    ratio = table.loc[a] / table.loc[b]
    print(f"\nratio time(d={a}) / time(d={b}) per column (d^2 ratio {(a / b) ** 2:.2f}, d^3 ratio {(a / b) ** 3:.2f}):")
    print(ratio.to_frame("ratio").T.to_string(float_format=lambda v: f"{v:9.2f}"))
    gib = 2**30
    print(f"\nlargest case d = {memory['d']}: the server holds the merged moments, C(1 + d + d^2) float64 = "
          f"{memory['moments'] / gib:.3f} GiB, plus one client message while merging it; peak resident memory "
          f"above that: merging a message with ClassMoments.__add__ {memory['merge_peak'] / gib:.3f} GiB (the new sum), fitting every head "
          f"{memory['fit_peak'] / gib:.3f} GiB")
    print(f"one client's message: {memory['moments'] / 2**20:.1f} MiB with the per-class Gram matrices, "
          f"{memory['compact'] / 2**20:.1f} MiB in the compact form (the total Gram matrix only; every head but CCVR)")
    print(f"largest tensor any client or server operation formed: {memory['biggest']} (the (C, d, d) Gram matrices); "
          f"no (n, d, d) tensor (n = {memory['n_total']} samples would need {memory['nd2'] / gib:.1f} GiB): checked")
    return table


def bench_rounds(args) -> pd.DataFrame:
    """Section 2: a CGRL round against a FedAvg round, side by side in one run.

    The same federation (MNIST-5k, the small CNN, Dirichlet alpha = 0.3), the same local optimizer
    and number of steps; a round's wall time without evaluation (``LoopConfig(evaluate_last=False)``).
    The two are run alternately ``--repeats`` times and the medians of their per-round times compared
    (target: CGRL <= 2x FedAvg; it processes two augmented views of every sample and makes one
    evaluation-mode pass over the client's data for its class directions).
    """
    import functools

    from fedlib.algorithms import FedAvg
    from fedlib.algorithms.fedgrc import CGRL
    from fedlib.cgrl import CGRLConfig
    from fedlib.data import load_mnist5k
    from fedlib.federation import make_federation
    from fedlib.loop import LoopConfig
    from fedlib.run import run_federated
    from fedlib.models import build_model
    from fedlib.training import TrainConfig

    data = load_mnist5k()
    n_clients, rounds = (4, 2) if args.quick else (10, 3)
    if args.quick:
        data = data.subset(np.arange(800))
    fed = make_federation(data, n_clients=n_clients, partition="dirichlet", alpha=0.3, min_size=10,
                          global_test_per_class=10, seed=0)
    model_fn = functools.partial(build_model, "cnn", in_channels=1, n_classes=10, input_size=28)
    tc = TrainConfig(epochs=1, batch_size=32, lr=0.01)
    cfg = LoopConfig(rounds=rounds, seed=0, eval_every=0, evaluate_last=False)
    variants = {"FedAvg": lambda: FedAvg(train=tc), "CGRL": lambda: CGRL(train=tc, cgrl=CGRLConfig()),
                "CGRL, identity views": lambda: CGRL(train=tc, cgrl=CGRLConfig(augment="none")),
                "CGRL, directions from training": lambda: CGRL(train=tc, cgrl=CGRLConfig(direction_pass="train"))}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):
        for name, make in variants.items():
            times[name].extend(run_federated(make(), fed, model_fn, cfg).seconds)
    med = {k: float(np.median(v)) for k, v in times.items()}
    table = pd.DataFrame({"median seconds per round": med, "ratio to FedAvg": {k: v / med["FedAvg"] for k, v in med.items()}})
    print(f"\n== CGRL round vs FedAvg round ({n_clients} clients, {len(data)} samples, {rounds} rounds x {args.repeats} repeats, "
          f"{torch.get_num_threads()} thread(s)) ==")
    print(table.round(3).to_string())
    ratio = med["CGRL"] / med["FedAvg"]
    print(f"CGRL / FedAvg = {ratio:.2f} (target <= 2.00: {'met' if ratio <= 2.0 else 'NOT met'}); "
          f"without the evaluation-mode direction pass: {med['CGRL, directions from training'] / med['FedAvg']:.2f}")
    return table


SECTIONS = [bench_heads, bench_rounds]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: runs in seconds")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats of each fit (median), after one untimed warm-up")
    ap.add_argument("--chunk", type=int, default=256, help="samples per chunk when a client builds its moments")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier timings on a shared machine)")
    ap.add_argument("--ccvr", action="store_true", help="also time CCVR (virtual features and head re-training)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for section in SECTIONS:
        section(args)


if __name__ == "__main__":
    main()
