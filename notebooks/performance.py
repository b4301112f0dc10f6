# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# (chapter-performance)=
# # Performance: a round at cross-device scale, and clients trained together
#
# This page measures, when the book is built and on the machine that builds it, what fedlib's
# machinery costs: the round loop against a hand-written training loop; a round's memory and time
# against the number of clients it samples; how much faster a round's clients train when
# they are stacked into one computation ({ref}`chapter-performance-vectorized`).
#
# Cross-device federated learning has thousands of clients with a few samples each, a small
# share of them sampled in each round (LEAF's FEMNIST has 3,500 writers). A laptop can simulate
# that only if a round's memory does not grow with the number of clients it samples. The second
# section measures the peak memory and the time of one FedAvg round against the number of
# clients, with fedlib's two ways of aggregating the replies:
#
# - **the fold** (the default of every method that averages): each client's reply is added to a
#   running sum as it arrives and freed ({class}`fedlib.aggregate.WeightedMean`), so the server
#   holds one float64 sum per array whatever the number of clients;
# - **the list**: every reply is kept until all have arrived and then averaged, the way a method
#   runs whose aggregation needs every reply at once (it says so: {class}`fedlib.protocol.Capabilities`' `streams`).
#
# Both give the same model bit for bit (the list is the fold over the list; the tests check it for
# every registered method that averages). Each measurement runs in a fresh Python process
# ({func}`fedbook.benchmarks.round_cost`), so its peak belongs to that round alone; this build
# {glue:text}`perf_isolation`.

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke" (seconds), "book" (the default, about a minute), "paper" (to 5,000 clients, and the CNN)
seed = 0  # the run seed of every measured round
clients = None  # numbers of clients to measure, e.g. [20, 200, 1000]
models = None  # models to measure, e.g. ["mlp"] or ["mlp", "cnn"]
workloads = None  # local-training workloads timed sequential against vectorized, e.g. ["linear", "cnn"]
results_dir = None  # where the measurements are saved as CSV (None: not saved)

# %% tags=["hide-input"]
from functools import partial

import matplotlib.pyplot as plt

from fedbook.benchmarks import AGGREGATIONS, WORKLOADS, loop_overhead
from fedbook.page import glue_all, save_frames, setup, show_table
from fedbook.studies.performance import (cost_table, costs_of, numbers, overhead_table, plot_costs, plot_stack,
                                         round_cell, speed_cell, speed_table)
from fedbook.study import Study, run_study

PROFILES = {  # fresh_process: each round measured in a new process (the smoke profile saves the start-ups)
    "smoke": dict(clients=[10, 40], models=["mlp"], fresh_process=False, workloads=["linear", "mlp_digits"], repeats=2,
                  stack_clients=[5, 20], overhead=dict(model="mlp", n_clients=5, rounds=1, repeats=1)),
    "book": dict(clients=[20, 200, 1000], models=["mlp"], fresh_process=True, workloads=list(WORKLOADS), repeats=5,
                 stack_clients=[5, 10, 20, 40, 80], overhead=dict(model="cnn", n_clients=20, rounds=2, repeats=3)),
    "paper": dict(clients=[20, 200, 1000, 5000], models=["mlp", "cnn"], fresh_process=True, workloads=list(WORKLOADS),
                  repeats=9, stack_clients=[5, 10, 20, 40, 80, 160], overhead=dict(model="cnn", n_clients=20, rounds=5,
                                                                                   repeats=5)),
}
P = setup(PROFILES, profile, clients=clients, models=models, workloads=workloads)
bad = [w for w in P.workloads if w not in WORKLOADS]
if bad:
    raise ValueError(f"unknown workloads {bad}; valid: {', '.join(WORKLOADS)}")

# %% [markdown]
# ## What the loop itself costs
#
# fedlib's round loop does more than a training loop: it builds messages, records every one in the
# ledger, keeps client states, checks replies for NaN and infinity, and folds them. The check below
# times FedAvg through {func}`fedlib.run.run_federated` against FedAvg written in plain PyTorch
# ({func}`fedbook.benchmarks.hand_written_fedavg`: the same initial weights, batches, SGD and
# averaging, none of the machinery), alternately, on the same federation
# ({glue:text}`perf_ovh_clients` clients, the {glue:text}`perf_ovh_model`, {glue:text}`perf_ovh_rounds`
# round(s), medians of {glue:text}`perf_ovh_repeats` runs each).

# %% tags=["hide-input"]
ovh = loop_overhead(**P.overhead, seed=seed)
show_table(overhead_table(ovh), digits={"seconds": 2}, index=False)

# %% [markdown]
# fedlib takes {glue:text}`perf_ovh_ratio_measured:.2f` times the hand-written loop's time, and the two final
# models {glue:text}`perf_ovh_identical`: the loop's bookkeeping costs little next to the training
# it wraps.
#
# ## Peak memory and time against the number of clients
#
# One round of FedAvg, every client sampled, no evaluation, {glue:text}`perf_round_threads` torch
# thread(s), MNIST-5k split IID while it gives every client {glue:text}`perf_per_client` samples
# (a synthetic set of 28 × 28 images beyond that). The *baseline* is the process's resident memory before the round (the interpreter, torch, the data
# and the clients' splits); the *peak* includes the round.

# %% tags=["hide-input"]
# measurements of this machine: one after another in this process (one worker), never cached
ROUNDS = Study("round_cost", partial(round_cell, fresh_process=P.fresh_process),
               grid={"model": P.models, "n_clients": P.clients, "aggregation": AGGREGATIONS}, seeds=[seed])
frames = run_study(ROUNDS)
table = cost_table(costs_of(frames["round_cost"]))
show_table(table, digits={"baseline (MiB)": 0, "peak (MiB)": 0, "added by the round (MiB)": 0, "ms per client": 1},
           index=False)

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Peak resident memory (left) and time per client (right) of one FedAvg round against the number of clients, for the fold (each reply added to a running sum and freed) and the list (every reply kept until the round ends). Logarithmic client axis.", "name": "fig-performance-scale"}, "image": {"alt": "Two line plots against the number of clients on a logarithmic axis. Left: peak memory in MiB; the fold's line stays flat while the list's rises with the clients. Right: milliseconds per client, roughly flat for both."}}
plot_costs(table, P.clients)
plt.show()

# %% [markdown]
# From {glue:text}`perf_small` to {glue:text}`perf_large` clients the peak memory of a round of
# the {glue:text}`perf_model` ({glue:text}`perf_params` parameters) changes by
# {glue:text}`perf_fold_growth_measured:+.1f` % with the fold and by {glue:text}`perf_list_growth_measured:+.1f` %
# with the list: at {glue:text}`perf_large` clients the list holds
# {glue:text}`perf_kept_measured:.0f` MiB of replies that the fold has already folded away. The time per
# client at {glue:text}`perf_large` clients is {glue:text}`perf_time_ratio:.2f` times the time per
# client at {glue:text}`perf_small`: {glue:text}`perf_time_reading`. (A single measurement per
# point on a shared machine: small differences in time are noise.)
#
# ## What else keeps a large federation small
#
# - **Which methods stream.** {glue:text}`perf_n_fold` registered methods aggregate with the fold;
#   the ones whose aggregation needs every reply at once keep the list and say so:
#   {glue:text}`perf_list_methods` (their replies carry statistics or prototypes that they stack).
# - **One message per round.** By default a method's training message depends on the server's
#   state and the round only, so the server builds it once and every sampled client receives the
#   same object (a method that personalizes on the server, as COSMOS, sends each client its own);
#   the ledger still records every copy that would cross the network.
# - **Client states on disk.** A stateful method (Ditto's personal models, FedRep's heads) with
#   thousands of clients can keep each client's state in a file of its own:
#   `RunOptions(states="disk", states_dir=...)` ({class}`fedlib.store.DiskStates`, atomic writes),
#   with the same results as in memory. An empty state (every stateless method's) costs no file.
# - **Evaluation on a sample.** `LoopConfig(eval_clients=m)` evaluates a seeded sample of `m`
#   clients in each evaluated round; the protocol's means, floors and tails are then the sample's,
#   and the round says so ({meth}`fedlib.results.RunResult.evaluated`).
# - **Cross-device partitions.** The `"powerlaw"` partition ({func}`fedlib.data.partition.powerlaw_sizes`)
#   gives a few large clients and a long tail of small ones; a client with a single sample trains,
#   and its local accuracy, with no local test sample, is undefined (NaN), as the protocol says.
#
# `make bench` runs `tests/bench_crossdevice.py`: the same measurement on larger federations, for
# the MLP and the small CNN, with the ratios printed side by side.

#
# (chapter-performance-vectorized)=
# ## Clients trained together: vectorized local training
#
# A round's sampled clients all run the same local program on models of the same shape: SGD or Adam
# steps on the cross-entropy of their own data, from the same broadcast weights (or their own
# head). Run one after another, each small step pays Python's and torch's fixed cost per
# operation. `RunOptions(execution="vectorized")` stacks them instead
# ({class}`fedlib.engines.vectorized.VectorizedTransport`): one tensor of shape (clients, ...) per
# parameter and per optimizer buffer, and one forward pass per step for every client at once,
# `vmap(functional_call(model, ...))` from `torch.func`, then one backward pass. It is a transport
# of the one round loop, not a second loop: sampling, aggregation, evaluation, the ledger and
# checkpoints are unchanged.
#
# - **Each client's own update.** Every client draws its mini-batches from its own generator, as in
#   the sequential path; a client with less data takes fewer steps, and a short last batch is
#   padded with samples whose loss is multiplied by zero. The optimizers are torch's update rules
#   written out on the stacked tensors.
# - **Equal to rounding, not bit for bit.** A batched matrix product adds in another order than
#   separate ones, so the two paths differ by float32 rounding; the tests require 1e-6 on FedAvg,
#   FedProx, FedRep, FedBABU, FedAvg-FT and GGEUR over ragged clients and partial participation,
#   and the same seed gives the same bits within either path. The sequential path stays the
#   loop's default; over many steps the rounding grows into small differences in accuracy, so the
#   GGEUR chapter, the one chapter that runs vectorized, does not give sequential training's digits.
# - **What it stacks.** A method stacks when its local work is a
#   {class}`fedlib.training.LocalProgram` ({class}`fedlib.protocol.Capabilities`' `stacks`):
#   {glue:text}`perf_vec_methods`. The others ({glue:text}`perf_seq_methods`) have their own losses
#   or control flow and train sequentially, which the transport says once per method.
# - **Refused.** BatchNorm (running statistics per client) and dropout; fedlib's models default to
#   GroupNorm and no dropout. Clients are stacked in chunks sized from a memory budget
#   (`RunOptions(memory_budget=...)`, {func}`fedlib.engines.vectorized.chunk_size`).
#
# The table times one round's local training of {glue:text}`perf_vec_clients` clients (FedAvg,
# {glue:text}`perf_vec_epochs` epoch(s), batch {glue:text}`perf_vec_batch`, SGD with momentum,
# {glue:text}`perf_vec_threads` torch thread(s)), both paths
# alternating in this process, medians of {glue:text}`perf_vec_repeats` runs each; *max difference*
# is the largest difference between the two paths' replies.

# %% tags=["hide-input"]
# the kernel's torch threads: book/build.py gives each parallel worker its share of the cores
SPEED = Study("speed", partial(speed_cell, repeats=P.repeats), grid={"workload": P.workloads}, seeds=[seed])
STACK = Study("stack", partial(speed_cell, workload="linear", repeats=P.repeats), grid={"n_clients": P.stack_clients},
              seeds=[seed])
frames |= run_study(SPEED) | run_study(STACK)
save_frames(frames, results_dir)
show_table(speed_table(frames["speed"]), digits={"sequential (s)": 3, "vectorized (s)": 3, "speed-up": 2},
           formats={"max difference": ".1e"}, best={"speed-up": "max"}, index=False)

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Speed-up of vectorized over sequential local training against the number of clients in the round, for the linear head on frozen embeddings (one epoch each, medians of the alternating runs).", "name": "fig-performance-vectorized"}, "image": {"alt": "A line plot of the speed-up (times faster) against the number of stacked clients, on a logarithmic client axis, with a dashed line at 1 (no gain)."}}
plot_stack(frames["stack"])
plt.show()

# %% tags=["remove-cell"]
glue_all(numbers(ovh, costs_of(frames["round_cost"]), frames["speed"], frames["stack"], P))

# %% [markdown]
# The largest gain is {glue:text}`perf_vec_best_ratio_measured:.1f` times, for the
# {glue:text}`perf_vec_best_measured`; the smallest is {glue:text}`perf_vec_worst_ratio_measured:.2f`
# times, for the {glue:text}`perf_vec_worst_measured` ({glue:text}`perf_vec_worst_reading_measured`).
# Stacking removes fixed cost per operation, not arithmetic: a small model's step is almost all
# fixed cost, while the larger models' steps are matrix products and convolutions the CPU already
# runs near its speed one client at a time. A convolution whose weights differ per client becomes a
# grouped convolution, which the CPU kernels run slower than ungrouped ones, most of all the first
# layer's (one input channel per group){glue:text}`perf_vec_cnn_reading_measured`. The largest
# difference between the two paths' replies is {glue:text}`perf_vec_maxdiff:.1e`. With the linear
# head the speed-up {glue:text}`perf_vec_stack_reading_measured` with the round:
# {glue:text}`perf_vec_stack_lo_ratio_measured:.1f` times for {glue:text}`perf_vec_stack_lo` clients,
# {glue:text}`perf_vec_stack_hi_ratio_measured:.1f` times for {glue:text}`perf_vec_stack_hi`. So the
# GGEUR experiments chapter, whose clients train linear and small MLP classifiers on embeddings,
# runs vectorized by default (its parameter `execution`), and the chapters that train the CNN keep
# the sequential path.
#
# **What a GPU would change (not measured here: this build ran on {glue:text}`perf_cores` CPU
# cores and no GPU).** On a GPU the fixed cost per operation is a kernel launch, and a small
# client's step does not fill the device, so stacking clients is where a GPU's width would come
# from, and the grouped convolutions that are slow on a CPU are a case cuDNN implements natively.
# The vectorized transport keeps every tensor on the CPU today: moving a chunk to a device is not
# implemented. We have not measured a GPU and make no claim about the size of its gain.
#
# `make bench` runs `tests/bench_vectorized.py`: the same table, with the speed-ups against their
# targets, and `tests/bench_chapter.py`: the GGEUR experiments chapter executed one client after
# another in one process, and with vectorized clients and its seeds in two worker processes
# ({func}`fedbook.parallel.map_parallel`, the chapter's parameter `workers`), side by side.
#
# ## The book's own build
#
# `book/build.py` executes independent chapters in parallel worker processes (one per core, each
# with its share of torch threads) and caches each chapter under a key of what it executes: its
# notebook, the fedlib modules it imports (followed transitively, and through the lazy registry
# `fedlib.algorithms`, so that a change to MPT's module re-runs MPT's chapters and not FedGRC's),
# its parameters and the requirements. Each chapter's minutes at the smoke and book profiles, read
# from the build's own records, are on {ref}`the teaching page <chapter-teaching>`, and what
# deciding every claim the build left open would cost is on {ref}`a page of its own <chapter-deciding-cost>`.
