"""Benchmark of MPT's server-side cost (issue 4, "Performance"): a script, not a pytest file.

    .venv/bin/python tests/bench_mpt.py                 # d = 512 (small CNN, feature_dim 512), 10 clients
    .venv/bin/python tests/bench_mpt.py --model mlp     # the pessimistic case (cheap local training)
    .venv/bin/python tests/bench_mpt.py --clients 20 --epochs 5

Prints, measured side by side in one run and alternated ``--repeats`` times (medians):

* a round's client training time (every client: ``--epochs`` local epochs of SGD);
* the clients' re-embedding and statistics time (counts, sums, remaining-class and rare Gram
  matrices) -- a client cost, reported for completeness;
* the server's per-round statistics (merging every client's message, the pooled within-class
  covariance) plus the reconstruction (MPT with the transport map and the projector, MPT-lite,
  the Mahalanobis readout's precision),

and the ratio server / training (target < 5 %). MNIST-5k in the departure scenario; the model is the
small CNN with a 512-d penultimate layer (default) or an MLP 512-512, the pessimistic case: its
local training is far cheaper than a CNN's or ResNet-18's at the same feature dimension. The
server's square roots of the departure covariance are computed once at the departure (kept in the
snapshot), as in the plug-in.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from fedlib.data import load_mnist5k
from fedlib.federation import make_departure_scenario
from fedlib.heads import MahalanobisNCM
from fedlib.models import build_model
from fedlib.stats import ClassMoments
from fedlib.tracking import TrackingConfig, growth_factor, reconstruct_lite, reconstruct_mpt, take_snapshot
from fedlib.training import TrainConfig, local_train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rare = 0
    sc = make_departure_scenario(load_mnist5k(), n_clients=args.clients, rare_class=rare, departing_share=0.98, seed=0)
    fed = sc.federation
    kw = {"feature_dim": args.dim} if args.model == "cnn" else {"hidden": (args.dim, args.dim)}
    model_fn = functools.partial(build_model, args.model, in_channels=1, n_classes=10, input_size=28, seed=0, **kw)
    model = model_fn()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(epochs=args.epochs, lr=0.05)
    cfg_track = TrackingConfig()

    def client_training() -> float:
        t0 = time.perf_counter()
        for k, c in enumerate(fed.clients):
            model.load_state_dict(init)
            local_train(model, c.train.x, c.train.y, cfg, torch.Generator().manual_seed(k))
        return time.perf_counter() - t0

    @torch.no_grad()
    def client_stats() -> tuple[float, list[dict]]:
        t0 = time.perf_counter()
        msgs = []
        model.load_state_dict(init)
        model.eval()
        for c in fed.clients:
            z = model.embed(c.train.x).double()
            m = ClassMoments.from_features(z, c.train.y, 10)
            msgs.append({"counts": m.counts, "sums": m.sums, "scatter": m.grams.sum(0) - m.grams[rare],
                         "rare_gram": m.grams[rare], "sqnorm": torch.diagonal(m.grams, dim1=1, dim2=2).sum(-1)})
        return time.perf_counter() - t0, msgs

    def server(msgs: list[dict], snap) -> float:
        t0 = time.perf_counter()
        counts = sum(m["counts"] for m in msgs)
        sums = sum(m["sums"] for m in msgs)
        rem = torch.arange(10) != rare
        outer = (sums[rem][:, :, None] * sums[rem][:, None, :] / counts[rem][:, None, None]).sum(0)
        cov = (sum(m["scatter"] for m in msgs) - outer) / counts[rem].sum()
        means = sums / counts[:, None]
        n = float(counts[rare])
        mean_r = sums[rare] / n
        cov_r = (sum(m["rare_gram"] for m in msgs) - n * torch.outer(mean_r, mean_r)) / max(n - 1, 1)
        rec = reconstruct_mpt(snap, means[rem], cov, n, mean_r, cov_r, cfg_track)
        sq = sum(m["sqnorm"] for m in msgs)
        tr = float((sq[rem] - (sums[rem] ** 2).sum(1) / counts[rem]).sum() / counts[rem].sum())
        reconstruct_lite(snap, means[rem], growth_factor(snap.trace_d, tr))
        P = means.clone()
        P[rare] = rec.prototype
        MahalanobisNCM(cfg_track.reg).fit(means=P, covariance=cov)
        return time.perf_counter() - t0

    _, msgs = client_stats()
    counts = sum(m["counts"] for m in msgs)
    sums = sum(m["sums"] for m in msgs)
    means = sums / counts[:, None]
    rem = torch.arange(10) != rare
    outer = (sums[rem][:, :, None] * sums[rem][:, None, :] / counts[rem][:, None, None]).sum(0)
    cov = (sum(m["scatter"] for m in msgs) - outer) / counts[rem].sum()
    snap = take_snapshot(means[rare], means[rem], cov, cfg_track)
    train_t, stats_t, server_t = [], [], []
    for _ in range(args.repeats):
        train_t.append(client_training())
        s, msgs = client_stats()
        stats_t.append(s)
        server_t.append(server(msgs, snap))
    tr, st, sv = (statistics.median(v) for v in (train_t, stats_t, server_t))
    print(f"d = {args.dim}, {args.clients} clients, {args.epochs} local epoch(s), {args.threads} thread(s), "
          f"median of {args.repeats}")
    print(f"client training per round      : {tr:8.3f} s")
    print(f"client re-embedding + stats    : {st:8.3f} s  ({100 * st / tr:.1f} % of training)")
    print(f"server statistics + reconstruct: {sv:8.3f} s  ({100 * sv / tr:.2f} % of training; target < 5 %)")


if __name__ == "__main__":
    main()
