"""Measuring what a round costs: peak memory and time, each measurement in a fresh process.

Used by ``tests/bench_crossdevice.py`` (``make bench``) and by the book's page *Performance*, so
both report the same measurement. :func:`round_cost` runs one FedAvg round without evaluation
in a new Python process (``python -m fedbook.benchmarks``), so that the peak resident memory it
reports belongs to that round's run alone and not to whatever ran before in the caller
(:func:`fedlib.memory.rss_mib` before the round, :func:`fedlib.memory.peak_rss_mib` after it).

The data: MNIST-5k split IID over the clients while it gives every client at least
``min_per_client`` samples, beyond that a synthetic data set of 28 x 28 images (Gaussian noise,
labels drawn uniformly) of ``min_per_client`` samples per client: cross-device federations have
many clients with a few samples each.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch.nn import functional as F

from fedlib.aggregate import weighted_average
from fedlib.algorithms import FedAvg
from fedlib.algorithms.ggeur import LinearClassifier
from fedlib.data import ArrayDataset, load_mnist5k, load_uci_digits
from fedlib.engines import InProcessTransport
from fedlib.engines.vectorized import VectorizedTransport
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.memory import peak_rss_mib, rss_mib
from fedlib.messages import State
from fedlib.models import build_model
from fedlib.protocol import Algorithm
from fedlib.run import run_federated
from fedlib.rng import INIT, LOCAL_TRAIN, derive_seed, isolated_torch_rng
from fedlib.training import TrainConfig

MODELS = ("mlp", "cnn")
"""The models :func:`round_cost` can measure (``fedlib.models.build_model`` names)."""


@dataclass(frozen=True)
class RoundCost:
    """One measured round.

    Attributes
    ----------
    n_clients : clients in the federation, all sampled (full participation)
    model, aggregation : the model and FedAvg's aggregation (``"fold"`` or ``"list"``)
    data : ``"mnist5k"`` or ``"synthetic"``
    n_parameters : the model's parameter count
    baseline_mib : resident memory before the round (interpreter, torch, data, clients)
    peak_mib : peak resident memory of the whole process (the round included; at least the baseline)
    seconds : wall-clock seconds of the round
    """

    n_clients: int
    model: str
    aggregation: str
    data: str
    n_parameters: int
    baseline_mib: float
    peak_mib: float
    seconds: float

    @property
    def round_mib(self) -> float:
        """What the round added to the process's resident memory at its peak."""
        return self.peak_mib - self.baseline_mib

    @property
    def ms_per_client(self) -> float:
        return 1000 * self.seconds / self.n_clients


AGGREGATIONS = ("fold", "list")
"""How :func:`round_cost` aggregates: the method's streaming fold, or every reply kept (:func:`keeping_replies`)."""


def keeping_replies(algorithm: Algorithm) -> Algorithm:
    """A copy of ``algorithm`` whose aggregation first reads every reply of the round into a list
    (``list(replies)``) and then applies the method's own rule to it: the same bits, at the memory
    cost of a rule that needs every reply at once (``Capabilities(streams=False)``). For measuring
    what the streaming fold saves."""
    cls = type(algorithm)

    def aggregate(self, server, replies, round_):
        return cls.aggregate(self, server, list(replies), round_)

    keeping = type(f"{cls.__name__}KeepingReplies", (cls,), {
        "aggregate": aggregate, "__module__": cls.__module__,
        "capabilities": dataclasses.replace(cls.capabilities, streams=False)})
    out = copy.copy(algorithm)
    out.__class__ = keeping
    return out


def _measure(n_clients: int, model: str, aggregation: str, min_per_client: int, seed: int, threads: int) -> dict:
    """The child's side: build the federation, run one round, report (JSON on stdout)."""
    torch.set_num_threads(threads)
    data = load_mnist5k()
    name = "mnist5k"
    if n_clients * min_per_client > len(data):
        g = torch.Generator().manual_seed(seed)
        n = n_clients * min_per_client
        data = ArrayDataset(torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g), 10,
                            "synthetic")
        name = "synthetic"
    fed = make_federation(data, n_clients=n_clients, partition="iid", global_test_per_class=10, seed=seed)
    model_fn = functools.partial(build_model, model, in_channels=1, n_classes=10, input_size=28)
    method = FedAvg(train=TrainConfig(epochs=1, batch_size=32, lr=0.05))
    if aggregation == "list":
        method = keeping_replies(method)
    n_parameters = sum(p.numel() for p in model_fn().parameters())
    baseline = rss_mib()
    t0 = time.perf_counter()
    run_federated(method, fed, model_fn, LoopConfig(rounds=1, seed=seed, evaluate_last=False))
    seconds = time.perf_counter() - t0
    # ru_maxrss lags the resident size /proc reads by a few pages (the kernel batches each thread's
    # counts): the peak is at least every reading of this process, the baseline included
    peak = max(peak_rss_mib(), rss_mib(), baseline)
    return asdict(RoundCost(n_clients, model, aggregation, name, n_parameters, baseline, peak, seconds))


def round_cost(n_clients: int, model: str = "mlp", aggregation: str = "fold", *, min_per_client: int = 5,
               seed: int = 0, threads: int = 1, fresh_process: bool = True, timeout: float = 900) -> RoundCost:
    """Peak memory and time of one FedAvg round of ``n_clients`` clients (all sampled, no
    evaluation), measured in a fresh Python process.

    Parameters
    ----------
    model : one of :data:`MODELS`
    aggregation : ``"fold"`` (the loop's streaming aggregation) or ``"list"`` (every reply kept
        and averaged at once, the way a method that needs every reply runs: :func:`keeping_replies`)
    min_per_client : samples per client below which the synthetic data set replaces MNIST-5k
    threads : torch threads of the measured process (1: the time per client is not blurred by
        threading)
    fresh_process : measure in a new Python process (default); ``False`` runs the round in this
        process, seconds faster (no interpreter and torch start), but its peak is this process's
        peak so far, not the round's alone (the smoke profile's way)

    Raises
    ------
    ValueError
        An unknown model or aggregation, or fewer than one client.
    RuntimeError
        When the measuring process fails (its error output is in the message).
    """
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; valid: {', '.join(AGGREGATIONS)}")
    if int(n_clients) < 1:
        raise ValueError(f"n_clients must be >= 1, got {n_clients}")
    args = dict(n_clients=int(n_clients), model=model, aggregation=aggregation, min_per_client=int(min_per_client),
                seed=int(seed), threads=int(threads))
    if not fresh_process:
        before = torch.get_num_threads()
        try:
            return RoundCost(**_measure(**args))
        finally:
            torch.set_num_threads(before)
    done = subprocess.run([sys.executable, "-m", "fedbook.benchmarks", json.dumps(args)], capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the measuring process for {args} failed:\n{done.stderr[-2000:]}")
    return RoundCost(**json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass(frozen=True)
class RoundScaling:
    """How a round's cost changes from the fewest to the most clients measured, for one model
    (:func:`round_scaling`).

    Attributes
    ----------
    model : the model
    small, large : the fewest and the most clients measured
    n_parameters : the model's parameter count
    fold_growth, list_growth : the change of the peak memory from ``small`` to ``large`` clients,
        in percent, with the fold and with the list
    time_ratio : the fold's time per client at ``large`` clients over its time at ``small``
    kept_mib : what the list's round added to the memory at ``large`` clients beyond the fold's
        (the replies the fold has already folded away)
    """

    model: str
    small: int
    large: int
    n_parameters: int
    fold_growth: float
    list_growth: float
    time_ratio: float
    kept_mib: float


def round_scaling(costs: Sequence[RoundCost], model: str) -> RoundScaling:
    """The fold's and the list's growth from the fewest to the most clients among ``costs``
    (:func:`round_cost`'s measurements; both aggregations at both sizes) for ``model``.

    Raises
    ------
    ValueError
        When ``costs`` lacks one of the four measurements.

    Examples
    --------
    >>> costs = [RoundCost(n, "mlp", a, "mnist5k", 1000, 100.0, peak, seconds)
    ...          for n, a, peak, seconds in [(10, "fold", 200.0, 1.0), (10, "list", 210.0, 1.0),
    ...                                      (40, "fold", 202.0, 2.0), (40, "list", 250.0, 2.0)]]
    >>> s = round_scaling(costs, "mlp")
    >>> s.small, s.large, round(s.fold_growth, 6), round(s.list_growth, 6), s.time_ratio, s.kept_mib
    (10, 40, 1.0, 19.047619, 0.5, 48.0)
    """
    sizes = [c.n_clients for c in costs if c.model == model]
    if not sizes:
        raise ValueError(f"no measurement of {model!r} among the costs")
    small, large = min(sizes), max(sizes)

    def pick(n: int, aggregation: str) -> RoundCost:
        found = [c for c in costs if c.model == model and c.n_clients == n and c.aggregation == aggregation]
        if not found:
            raise ValueError(f"no measurement of {model!r} at {n} clients with the {aggregation}")
        return found[0]

    return RoundScaling(model, small, large, pick(small, "fold").n_parameters,
                        fold_growth=100 * (pick(large, "fold").peak_mib / pick(small, "fold").peak_mib - 1),
                        list_growth=100 * (pick(large, "list").peak_mib / pick(small, "list").peak_mib - 1),
                        time_ratio=pick(large, "fold").ms_per_client / pick(small, "fold").ms_per_client,
                        kept_mib=pick(large, "list").round_mib - pick(large, "fold").round_mib)


WORKLOADS = ("linear", "mlp_digits", "mlp", "cnn")
"""The local-training workloads of :func:`local_training_speed`:

* ``"linear"``: a linear head (:class:`fedlib.algorithms.ggeur.LinearClassifier`) on 512-dimensional
  frozen embeddings of MNIST-5k (a fixed random projection of the pixels, seeded: the timing does
  not depend on what the embedding means);
* ``"mlp_digits"``: an MLP (one hidden layer of 64) on UCI digits at their own 8 x 8;
* ``"mlp"``: fedlib's default MLP (784-256-128-10) on MNIST-5k;
* ``"cnn"``: the small CNN (width 32) on MNIST-5k's 28 x 28 images.
"""


@dataclass(frozen=True)
class SpeedUp:
    """Sequential against vectorized local training of one round, measured side by side.

    Attributes
    ----------
    workload : one of :data:`WORKLOADS`
    n_clients, n_parameters : the round's clients (all sampled) and the model's parameter count
    sequential_s, vectorized_s : median seconds of the round's local training (``repeats`` runs
        of each, interleaved)
    max_abs_diff : the largest difference between the two paths' replies (every array, every client)
    """

    workload: str
    n_clients: int
    n_parameters: int
    sequential_s: float
    vectorized_s: float
    max_abs_diff: float

    @property
    def ratio(self) -> float:
        """How many times faster the vectorized path is."""
        return self.sequential_s / self.vectorized_s


def _workload(name: str, n_clients: int, seed: int):
    if name == "mlp_digits":
        data = load_uci_digits(size=8)
        fed = make_federation(data, n_clients=n_clients, partition="iid", global_test_per_class=20, seed=seed)
        return fed, functools.partial(build_model, "mlp", in_channels=1, n_classes=10, input_size=8, hidden=(64,))
    data = load_mnist5k()
    if name == "linear":
        g = torch.Generator().manual_seed(seed)
        projection = torch.randn(28 * 28, 512, generator=g) / 28.0
        data = ArrayDataset(data.x.flatten(1) @ projection, data.y, data.n_classes, "mnist5k-embeddings")
        fed = make_federation(data, n_clients=n_clients, partition="iid", seed=seed)
        return fed, lambda: LinearClassifier(512, 10)
    fed = make_federation(data, n_clients=n_clients, partition="iid", seed=seed)
    return fed, functools.partial(build_model, name, in_channels=1, n_classes=10, input_size=28)


def local_training_speed(workload: str, *, n_clients: int = 20, epochs: int = 1, batch_size: int = 32, repeats: int = 5,
                         seed: int = 0, threads: int | None = None) -> SpeedUp:
    """One round's local training (FedAvg, SGD with momentum, ``batch_size``, ``epochs`` epochs) of
    ``n_clients`` clients, sequential (:class:`fedlib.engines.inprocess.InProcessTransport`) and vectorized
    (:class:`fedlib.engines.vectorized.VectorizedTransport`), timed alternately ``repeats``
    times each in this process; the medians are compared.

    Raises
    ------
    ValueError
        An unknown workload, or fewer than one client or repeat.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; valid: {', '.join(WORKLOADS)}")
    if int(n_clients) < 1 or int(repeats) < 1:
        raise ValueError(f"n_clients and repeats must be >= 1, got {n_clients} and {repeats}")
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        fed, model_fn = _workload(workload, int(n_clients), seed)
        method = FedAvg(train=TrainConfig(epochs=epochs, batch_size=batch_size, lr=0.05))
        transports = {"sequential": InProcessTransport(fed, model_fn, seed), "vectorized": VectorizedTransport(fed, model_fn, seed)}
        messages = method.configure_train(method.init_server(transports["sequential"].initial_model), 1, range(fed.n_clients))
        states = {k: State() for k in range(fed.n_clients)}
        times: dict[str, list[float]] = {k: [] for k in transports}
        replies = {}
        for _ in range(int(repeats) + 1):  # the first pass of each warms up and is not timed
            for name, transport in transports.items():
                t0 = time.perf_counter()
                replies[name] = [up for _, _, up in transport.local_updates(method, 1, messages, states)]
                times[name].append(time.perf_counter() - t0)
        diff = max(float((a.arrays[n] - b.arrays[n]).abs().max())
                   for a, b in zip(replies["sequential"], replies["vectorized"]) for n in a.arrays)
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        n_parameters = sum(p.numel() for p in model_fn().parameters())
        return SpeedUp(workload, fed.n_clients, n_parameters, med["sequential"], med["vectorized"], diff)
    finally:
        torch.set_num_threads(before)


def hand_written_fedavg(fed, model_fn, cfg: TrainConfig, rounds: int, seed: int) -> dict[str, torch.Tensor]:
    """FedAvg in plain PyTorch, full participation: the same initial weights, per-client
    generators, batches, SGD and sample-weighted averaging as fedlib's FedAvg, none of fedlib's
    machinery (no messages, ledger, states or guard). Returns the final ``state_dict``.

    Raises
    ------
    ValueError
        ``cfg`` asks for what this loop does not do (Adam, weight decay, ``steps``)."""
    if cfg.optimizer != "sgd" or cfg.weight_decay or cfg.steps is not None:
        raise ValueError(f"hand_written_fedavg runs SGD for whole epochs without weight decay; got optimizer={cfg.optimizer!r}, "
                         f"weight_decay={cfg.weight_decay!r}, steps={cfg.steps!r}")
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


@dataclass(frozen=True)
class LoopOverhead:
    """fedlib's round loop against :func:`hand_written_fedavg` on the same work.

    Attributes
    ----------
    model, n_clients, rounds : the workload (FedAvg, MNIST-5k, Dirichlet 0.3, full participation)
    fedlib_s, hand_s : median seconds of the whole run (``repeats`` alternating runs of each)
    identical : whether the two final models are equal bit for bit
    """

    model: str
    n_clients: int
    rounds: int
    fedlib_s: float
    hand_s: float
    identical: bool

    @property
    def ratio(self) -> float:
        """fedlib's time over the hand-written loop's (1: no overhead)."""
        return self.fedlib_s / self.hand_s


def loop_overhead(model: str = "cnn", *, n_clients: int = 20, rounds: int = 3, repeats: int = 3,
                  seed: int = 0) -> LoopOverhead:
    """Time fedlib's FedAvg (:func:`fedlib.run.run_federated`, no evaluation) and
    :func:`hand_written_fedavg` alternately ``repeats`` times on the same federation; compare the
    medians and the final weights.

    Raises
    ------
    ValueError
        An unknown model, or fewer than one client, round or repeat.
    """
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")
    if min(int(n_clients), int(rounds), int(repeats)) < 1:
        raise ValueError(f"n_clients, rounds and repeats must be >= 1, got {n_clients}, {rounds} and {repeats}")
    fed = make_federation(load_mnist5k(), n_clients=n_clients, partition="dirichlet", alpha=0.3, min_size=10, seed=seed)
    model_fn = functools.partial(build_model, model, in_channels=1, n_classes=10, input_size=28)
    cfg = TrainConfig(epochs=1, batch_size=32, lr=0.05, momentum=0.9)
    loop_cfg = LoopConfig(rounds=rounds, seed=seed, evaluate_last=False)
    hand_written_fedavg(fed, model_fn, cfg, 1, seed)  # warm-up (the first calls of the kernels are slow)
    t_lib, t_hand = [], []
    for _ in range(int(repeats)):
        t0 = time.perf_counter()
        run = run_federated(FedAvg(train=cfg), fed, model_fn, loop_cfg)
        t_lib.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hand = hand_written_fedavg(fed, model_fn, cfg, rounds, seed)
        t_hand.append(time.perf_counter() - t0)
    same = set(run.server.with_prefix("model/")) == set(hand) and all(
        torch.equal(run.server.arrays["model/" + k], v) for k, v in hand.items())
    return LoopOverhead(model, n_clients, rounds, statistics.median(t_lib), statistics.median(t_hand), same)


__all__ = ["AGGREGATIONS", "MODELS", "WORKLOADS", "keeping_replies", "LoopOverhead", "RoundCost", "SpeedUp", "hand_written_fedavg", "local_training_speed",
           "loop_overhead", "round_cost", "RoundScaling", "round_scaling"]


if __name__ == "__main__":
    print(json.dumps(_measure(**json.loads(sys.argv[1]))))
