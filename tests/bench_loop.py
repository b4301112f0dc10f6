"""Benchmark of the foundation: prints ratios measured side by side in one run.

    .venv/bin/python tests/bench_loop.py            # the loop's overhead, and the smoke build
    .venv/bin/python tests/bench_loop.py --book     # also the book-profile build (minutes)

1. fedlib's FedAvg rounds against a minimal hand-written PyTorch loop doing the same work on the
   same batches (same initial weights, same per-client generators, same averaging): the ratio of
   their times (target <= 1.10) and whether their final weights agree bit for bit. The two are
   timed alternately, several times, and the medians compared, so that machine noise hits both.
2. The time and peak memory (max RSS of the executing processes) of executing every chapter at
   the smoke profile and, with ``--book``, at the book profile, into a temporary folder.
"""

from __future__ import annotations

import argparse
import functools
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fedlib.aggregate import weighted_average
from fedlib.algorithms import FedAvg
from fedlib.data import load_mnist5k
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig, run_federated
from fedlib.models import build_model
from fedlib.rng import INIT, LOCAL_TRAIN, derive_seed, isolated_torch_rng
from fedlib.training import TrainConfig

ROOT = Path(__file__).resolve().parent.parent


def hand_written_fedavg(fed, model_fn, cfg: TrainConfig, rounds: int, seed: int) -> dict[str, torch.Tensor]:
    """FedAvg in plain PyTorch: the same batches and arithmetic as fedlib, none of its machinery."""
    with isolated_torch_rng(derive_seed(seed, INIT)):
        model = model_fn()
    global_sd = {k: v.clone() for k, v in model.state_dict().items()}
    for r in range(1, rounds + 1):
        states, sizes = [], []
        for k, client in enumerate(fed.clients):
            model.load_state_dict(global_sd)
            model.train()
            g = torch.Generator().manual_seed(derive_seed(seed, r, k, LOCAL_TRAIN))
            opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
            x, y = client.train.x, client.train.y
            for _ in range(cfg.epochs):
                perm = torch.randperm(len(y), generator=g)
                for s in range(0, len(y), cfg.batch_size):
                    idx = perm[s : s + cfg.batch_size]
                    loss = F.cross_entropy(model(x[idx]), y[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            states.append({k2: v.detach().clone() for k2, v in model.state_dict().items()})
            sizes.append(len(y))
        global_sd = weighted_average(states, sizes)
    return global_sd


def loop_overhead(rounds: int, repeats: int) -> None:
    fed = make_federation(load_mnist5k(), n_clients=20, partition="dirichlet", alpha=0.3, min_size=10, seed=0)
    model_fn = functools.partial(build_model, "cnn", in_channels=1, n_classes=10, input_size=28)
    cfg = TrainConfig(epochs=1, batch_size=32, lr=0.05, momentum=0.9)
    loop_cfg = LoopConfig(rounds=rounds, seed=0, evaluate_last=False)
    hand_written_fedavg(fed, model_fn, cfg, 1, 0)  # warm-up (first calls of the conv kernels are slow)
    t_lib, t_hand = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run = run_federated(FedAvg(train=cfg), fed, model_fn, loop_cfg)
        t_lib.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hand = hand_written_fedavg(fed, model_fn, cfg, rounds, 0)
        t_hand.append(time.perf_counter() - t0)
    same = all(torch.equal(run.server.arrays["model/" + k], v) for k, v in hand.items())
    lib, ref = statistics.median(t_lib), statistics.median(t_hand)
    print(f"FedAvg, 20 clients, {rounds} rounds, MNIST-5k CNN ({repeats} alternating repeats, medians)")
    print(f"  fedlib loop      {lib:8.2f} s   per round {lib / rounds:6.2f} s")
    print(f"  hand-written     {ref:8.2f} s   per round {ref / rounds:6.2f} s")
    print(f"  ratio fedlib / hand-written = {lib / ref:.3f}   (target <= 1.10)")
    print(f"  final weights identical bit for bit: {same}")


def build_cost(profile: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "book" / "build.py"), "--profile", profile, "--out", out, "--force"],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return seconds, peak / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description="fedlib benchmarks (ratios measured side by side)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--book", action="store_true", help="also time the book-profile build (minutes)")
    args = parser.parse_args()
    loop_overhead(args.rounds, args.repeats)
    print("\nExecuting every chapter (papermill), into a temporary folder:")
    smoke = build_cost("smoke")
    print(f"  smoke profile: {smoke[0]:8.1f} s, peak memory {smoke[1]:7.0f} MiB")
    if args.book:
        book = build_cost("book")
        print(f"  book profile:  {book[0]:8.1f} s, peak memory {book[1]:7.0f} MiB")
        print(f"  ratio book / smoke time = {book[0] / smoke[0]:.1f}")


if __name__ == "__main__":
    main()
