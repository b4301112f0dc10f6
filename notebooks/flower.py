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
# (chapter-flower)=
# # Running on Flower
#
# Every chapter of this book runs its federations in one Python process. A reader who outgrows
# one machine (a lab cluster, real devices, a class whose students run the clients on their own
# laptops) does not have to leave fedlib or rewrite a method: the same
# {class}`~fedlib.protocol.Algorithm` objects, unchanged, run on [Flower](https://flower.ai), the
# engine the field uses for that, in its **simulation engine** (Ray, one machine) and as a real
# **deployment** (a SuperLink and one SuperNode per client, each a separate process). This page
# shows how, runs both engines when the book is built and checks that they give the same numbers
# as the in-process loop, bit for bit.
#
# ## How a method becomes a Flower App
#
# fedlib was written for this: a client's work is a function of (state, message, data, generator),
# messages are named arrays with scalar metadata, and the round loop ({func}`fedlib.run.run_federated`)
# hands its messages to a *transport* that only carries them. {mod}`fedlib.engines.flower` adds one
# transport and the two Flower apps around it; nothing else changes.
#
# | fedlib | on Flower |
# |---|---|
# | the round loop (sampling, events, the non-finite guard, aggregation, evaluation schedule, ledger, checkpoints) | runs unchanged inside the `ServerApp` |
# | the transport: "send these messages to these clients, get replies" | {class}`~fedlib.engines.flower.remote.FlowerTransport`: one Flower `Message` per fedlib message, through the `Grid` |
# | a client's hooks (`local_update`, `deploy`, the protocol's evaluation) | the `ClientApp`'s `@app.train()` and `@app.evaluate()` handlers |
# | a {class}`~fedlib.messages.Message` | a `RecordDict`: an `ArrayRecord` of the arrays, a `ConfigRecord` of the metadata ({func}`~fedlib.engines.flower.records.message_to_records`, lossless) |
# | a client's persistent {class}`~fedlib.messages.State` | the node's `context.state` |
# | client `k` and its data | the node started with `partition-id=k`; it builds the federation and keeps its own partition |
# | the client's random stream, derived from (seed, round, client) | derived on the node, the same way |
#
# Both sides build what they need from one {class}`~fedlib.engines.flower.job.FlowerJob`: the
# method by its registry name and arguments, the federation and the model as calls of importable
# functions, the loop's settings. It is plain JSON, so it travels in Flower's run config. Before
# round 1 a handshake asks every node which client it holds. It refuses a node without a partition,
# two nodes with one partition, and a node that built another federation or was given another job,
# each with an error that names the node. The job of this page's first run:

# %% tags=["parameters", "hide-input"]
profile = "book"  # "smoke" (loopback only, seconds), "book" (both Flower engines, a few minutes), "paper" (more clients and rounds)
seed = 0  # the run seed
methods = None  # the methods checked on the loopback engine, e.g. ["fedavg", "ditto", "mpt"]
runtime_methods = None  # those of them also run on Flower's runtimes (simulation, deployment), e.g. ["ditto"]
engines = None  # a subset of ["loopback", "simulation", "deployment"]
n_clients = None  # clients (one Flower node each)
rounds = None  # communication rounds
results_dir = None  # where the equivalence and bytes tables are saved as CSV (None: not saved)

# %% tags=["hide-input"]
import json
import time
from functools import partial
from pathlib import Path

import torch

from fedbook.page import format_bytes, glue_all, save_frames, setup, show_table
from fedbook.studies.flower import (bench_tables, bytes_table, check_settings, equivalence_cell, equivalence_table,
                                    job_of, mirrored_bytes, node_failure, numbers, trust_refusal)
from fedbook.study import Study, run_study

PROFILES = {
    "smoke": dict(methods=["fedavg"], runtime_methods=["fedavg"], engines=["loopback"], n_clients=2, rounds=1),
    # equivalence, not scale, is this page's point: the runtimes (whose cost is Flower's start-up and polling, about a
    # minute a run) run one method, the one that keeps a client state between rounds; the loopback engine runs all three
    "book": dict(methods=["fedavg", "ditto", "mpt"], runtime_methods=["ditto"], engines=["loopback", "simulation", "deployment"],
                 n_clients=2, rounds=2),
    "paper": dict(methods=["fedavg", "ditto", "mpt"], runtime_methods=["fedavg", "ditto", "mpt"],
                  engines=["loopback", "simulation", "deployment"], n_clients=4, rounds=3),
}
P = setup(PROFILES, profile, methods=methods, runtime_methods=runtime_methods, engines=engines, n_clients=n_clients,
          rounds=rounds)
check_settings(P)
print(json.dumps(json.loads(job_of(P.methods[0], P.n_clients, P.rounds, seed).to_json()), indent=1))

# %% [markdown]
# A job names functions, not objects, so a node on another machine can build the same things from
# it: `make_federation` over `load_dataset("uci")` gives every node the same split, and a
# node keeps the partition its `partition-id` names. The job's `threads` is torch's number of
# threads on every node. With the same number of threads on both sides the arithmetic is the same.
# With another number, torch's CPU kernels split their reductions differently and the results
# differ in the last bits.
#
# ## Commands
#
# From the repository, after `make test` or `make book` has set up `.venv`:
#
# ```bash
# # Flower's simulation engine (Ray), 4 clients, 3 rounds of FedAvg on the UCI digits:
# .venv/bin/python -m fedlib.engines.flower --engine simulation --clients 4 --rounds 3
# # Flower's messages without its runtime (seconds; for debugging a method):
# .venv/bin/python -m fedlib.engines.flower --engine loopback --algorithm ditto
# # a real deployment on this machine: a SuperLink and 4 SuperNodes as processes on 127.0.0.1
# make flower
# ```
#
# or, from Python,
#
# ```python
# from fedlib.engines.flower import example_job, run_flower
# run = run_flower(example_job("ditto", n_clients=4, rounds=3), "simulation")
# run.result.summary()      # the protocol's summary, as for an in-process run
# run.wire                  # every message: fedlib's bytes and Flower's
# ```
#
# `make flower` starts a SuperLink (`flower-superlink --insecure`) and one SuperNode per client
# (`flower-supernode --insecure --node-config 'partition-id=k num-partitions=n'`), submits the job
# with `flwr run`, prints the results and stops every process it started
# ({class}`~fedlib.engines.flower.deployment.LocalDeployment`), also when the run fails. Its logs stay in the
# Flower home folder it prints while it runs. **Insecure mode** means plain HTTP, no TLS and no
# node authentication: it is for 127.0.0.1 only (see the last section).
#
# ## The same numbers on every engine
#
# Each method below runs with the same job on each engine and in-process. The table
# compares the final server state, every client's state, the metrics of every evaluated round and
# the ledger. The loopback engine ({class}`~fedlib.engines.flower.loopback.LoopbackGrid`) runs Flower's
# messages, serialized to its wire format and back, through the `ClientApp` in this process, with
# no runtime. The simulation runs them on Ray. The deployment runs them through a real SuperLink and
# SuperNodes; the deployment's jobs run side by side on one deployment.

# %% tags=["hide-input"]
torch.set_num_threads(1)  # the jobs' threads: the in-process reference does the same arithmetic as the nodes
# every run against the same job in this process; Flower's runtimes run runtime_methods only (no cache: the runs are
# the page's point, executed when it is built)
RUNS = Study("flower", partial(equivalence_cell, n_clients=P.n_clients, rounds=P.rounds,
                               runtime_methods=P.runtime_methods), grid={"engine": P.engines, "method": P.methods},
             seeds=[seed])
t0 = time.perf_counter()
frames = run_study(RUNS)
flower_seconds = time.perf_counter() - t0
save_frames(frames, results_dir)
show_table(equivalence_table(frames["equivalence"]), formats={"largest difference": ".1e"}, index=False,
           digits={"largest difference": 1, "mean local accuracy": 4, "in-process": 4, "seconds": 1})

# %% [markdown]
# {glue:text}`fl_n_runs` runs ({glue:text}`fl_methods` on the loopback engine{glue:text}`fl_runtime_runs`;
# {glue:text}`fl_clients` clients, {glue:text}`fl_rounds` rounds, evaluated every round):
# {glue:text}`fl_same_reading`. They took {glue:text}`fl_seconds:.0f` s together, and
# {glue:text}`fl_survivors`. The book profile's methods exercise what a transport must carry
# exactly: FedAvg's models and replies, Ditto's personal model (a persistent client state that
# stays on the node between rounds), and MPT's per-round statistics and prototypes, which are
# metadata as well as arrays. Equivalence, not scale, is this page's point, so the runs are as small
# as the smoke profile's: two clients, two rounds (the fewest that carry a client state from one
# round to the next). A run on Flower's runtimes costs their start-up and polling, about a minute
# whatever its size, so at the book profile only Ditto, the method with a client state, runs on
# them; `-p runtime_methods='["fedavg", "ditto", "mpt"]'` runs all three (the paper profile does). The test suite runs the same check for every registered method on
# the loopback engine (`tests/test_flower.py`). It also checks that every message kind of every
# method survives Flower's protobuf wire format with its dtypes, shapes, key orders and metadata
# types.
#
# ## Bytes: fedlib's count and Flower's
#
# The ledger counts what fedlib's messages hold: the arrays' raw bytes plus their metadata as
# JSON. The Flower transport also records, for every message, the bytes of the Flower message
# that carried it, as Flower serializes it: each array in NumPy's `.npy` form with its header,
# the records' and objects' headers, Flower's message metadata (ids), fedlib's control record
# (round, client, job), and the
# client's state where it travels (sent down on a client's first message of a Flower run; mirrored
# up with every reply unless `mirror_states=False`).

# %% tags=["hide-input"]
show_table(bytes_table(frames["wire"], P.engines[0]).rename(columns={"bytes": "fedlib bytes", "flower_bytes": "Flower bytes"}),
           formats={"fedlib bytes": format_bytes, "Flower bytes": format_bytes}, digits={"Flower / fedlib": 2}, index=False)

# %% [markdown]
# On the {glue:text}`fl_first_engine` engine Flower's messages are {glue:text}`fl_overhead:.0f` %
# larger than fedlib's count over all of its messages; the counts of the runs every engine made are
# {glue:text}`fl_bytes_same_engines`. What Flower sends beyond fedlib's count is the per-array
# headers and the control record on every message, which weigh most on small models like these,
# and, for a method that keeps a client state (Ditto's personal model), that state on its way up
# with every reply (the mirror) and down once.
#
# ## What an engine costs
#
# `make bench` runs `tests/bench_flower.py`: one workload (named below the table) in-process, in
# Flower's simulation and in its deployment engine. Each runs in a fresh process, one after
# another, and is measured side by side ({func}`fedlib.engines.flower.cli.engine_costs`). The times
# are wall time including start-up and the mean round (every round after the first). The memory is the peak of the summed PSS of every process of the
# run: a page shared by *k* processes counts 1/*k* in each, so the sum is what they take together.
# **This table is read from the benchmark's saved results** (`book/data/bench_flower.json`, written
# by the last `make bench`; the build does not re-run it, because it takes minutes). Its date and
# machine are below the table.

# %% tags=["hide-input"]
saved, bench, bench_view = bench_tables(Path("..") / "book" / "data" / "bench_flower.json")
show_table(bench_view, digits={"wall (s)": 1, "wall ratio": 1, "round (s)": 2, "round ratio": 1, "peak PSS (MiB)": 0,
                               "memory ratio": 1})

# %% [markdown]
# Measured on {glue:text}`fl_bench_date` ({glue:text}`fl_bench_machine`; {glue:text}`fl_bench_workload`).
# A round takes {glue:text}`fl_bench_simulation_round:.1f` times the in-process round's time in the
# simulation and {glue:text}`fl_bench_deployment_round:.1f` times in the deployment. The whole run
# takes {glue:text}`fl_bench_simulation_wall:.1f` and {glue:text}`fl_bench_deployment_wall:.1f`
# times the in-process run's wall time, and {glue:text}`fl_bench_simulation_mem:.1f` and
# {glue:text}`fl_bench_deployment_mem:.1f` times its memory; the results are
# {glue:text}`fl_bench_identical`. The costs come from the runtime, not from the method. The simulation
# starts Ray (a scheduler, an object store, worker processes that each import torch) and passes
# every message through Ray's object store. The deployment polls, and it starts processes. An
# idle SuperNode asks the SuperLink for work at a fixed interval, and fedlib's transport asks for
# replies at its own (`poll`). Flower starts a fresh `ClientApp` process for every message, and
# that process imports torch and fedlib and rebuilds the node's data; a first optimizer step alone
# imports torch's compiler. Flower gives a starting process a fixed time to report, so on one
# machine the transport keeps only a few messages in flight (`max_in_flight`, by default a small
# multiple of the cores), and the clients' processes take turns. The deployment buys what one process cannot
# give: clients that are real processes and can be real machines.
#
# ## On real machines
#
# The local deployment above is the real thing on one machine, with three shortcuts that a
# multi-machine deployment must not take.
#
# - **TLS.** Start the SuperLink with `--ssl-ca-certfile`, `--ssl-certfile` and `--ssl-keyfile`
#   instead of `--insecure`, and the SuperNodes with `--root-certificates` (the CA that signed the
#   SuperLink's certificate). Without TLS every model and every reply crosses the network in the clear.
# - **Node authentication.** Start the SuperLink with `--enable-supernode-auth` and register each
#   node's public key, and each SuperNode with `--auth-supernode-private-key`. Otherwise any process
#   that reaches the SuperLink's port can join the federation as a client.
# - **Partitions loaded on the node.** Here every node builds the whole federation from the job
#   and keeps its partition, which is only possible because the data ship inside the packages.
#   On real machines each node has only its own data. Give the job a federation call that loads
#   the node's own files, e.g. from a path in the SuperNode's `--node-config`, have each operator
#   allow it (`FEDLIB_FLOWER_ALLOW`, below), and keep the global test set wherever the protocol's
#   evaluation runs.
#
# ### What a job can make a node do
#
# A job is data that whoever submits a run writes, and it travels to every node. A SuperNode's
# operator who installed fedlib's `ClientApp` has agreed to run fedlib, not whatever a run config
# names, so a node builds from a job only what its operator allows:
#
# - **Methods by name.** The job's method must be a registered one
#   (`fedlib.algorithms.ALGORITHMS`); its hyper-parameters are data.
# - **Calls from a fixed list.** A `{"call": "module:name", ...}` in the job (the federation, the
#   model, a method's `TrainConfig`) must name one of fedlib's own factories
#   (`BUILTIN_TARGETS` in {mod}`fedlib.engines.flower.job`: the data set loader, the federation and
#   model builders, `TrainConfig` and the methods' configurations) or a
#   target that the operator of *that machine* lists in the environment variable
#   `FEDLIB_FLOWER_ALLOW` (comma-separated, empty by default), e.g. a lab's loader of its own
#   files. Every target is checked when the job is read, before anything is imported, on the
#   server and again on each node, each against its own list.
# - **No paths on a node.** fedlib's data set loader takes no folder and no download from a job:
#   a node with files of its own (CIFAR, say) is given a loader of its own path by its operator.
# - **Files inside the run's folder.** The server's checkpoint is a relative path without `..`,
#   resolved inside the run's output folder, never named like a result file. The state files a
#   run writes and reads hold tensors and JSON only (no pickled objects) and carry a checksum,
#   which finds a corrupted or carelessly edited file (it has no key: it does not stop someone who
#   can write the folder and rewrite the checksum too).
#
# So the server, or whoever can submit a run, can make a node train a registered method with any
# settings on the data its federation call builds, send it messages and read its replies (and
# its state, with `mirror_states=True`), and spend its CPU. It cannot make a node import or run
# anything else. A crafted job whose federation seed is `{"call": "os:system", ...}` (a call
# that returns 0, a valid seed) is refused before anything runs:
# {glue:text}`fl_trust_refusal`. What the replies reveal is another matter: model updates carry
# information about a client's data, and fedlib adds no differential privacy or secure
# aggregation. TLS (who the SuperLink is) and node authentication (who the nodes are), above,
# decide who may talk at all.
#
# Two more choices matter off loopback. By default every reply also carries the client's new state
# up (`mirror_states=True`), so the server can checkpoint and resume the run and return every
# client's state as an in-process run does. A personalized method's state is personal: with
# `mirror_states=False` it never leaves the node, and the run cannot be checkpointed. And a
# client that fails, or does not reply within `run_flower(timeout=...)` seconds, is never averaged
# in silence. `LoopConfig(on_failure="raise")`, the default, stops the run with an error that
# names the client, its node, the round and Flower's reason. `"drop"` goes on without the client
# and records a `dropped_failed` row, as the in-process loop does for a client whose hook raises.
#
# ## Exercises

# %% tags=["remove-cell", "solution"]
# the trust model, live (a job whose federation seed is a call of os:system), and the exercises' runs
glue_all({**numbers(frames["equivalence"], frames["wire"], P, seconds=flower_seconds, saved=saved, bench=bench),
          "fl_trust_refusal": trust_refusal(job_of(P.methods[0], P.n_clients, P.rounds, seed)),
          **node_failure(seed), **mirrored_bytes(P.n_clients, P.rounds, seed)})

# %% [markdown]
# ### Exercise 1: A node that stops answering
#
# *(code)* Run FedAvg on the loopback engine with client 1's node silent after the handshake
# (`run_flower(job, "loopback", unresponsive={1}, timeout=0.01)`). What happens with the loop's
# default failure policy, and with `on_failure="drop"` in the job's config?
#
# :::{dropdown} Hint
# The policy is {class}`fedlib.loop.LoopConfig`'s `on_failure`; a dropped client leaves a row
# `dropped_failed` in `run.result.frame`.
# :::
#
# :::{dropdown} Worked solution
# With the default the run stops: "{glue:text}`ex1_error`". With `"drop"` it goes on; client 1 is
# recorded as dropped in rounds {glue:text}`ex1_dropped_rounds`, nothing of it is averaged, and the
# final evaluation covers the {glue:text}`ex1_evaluated` clients that answered.
# :::
#
# ### Exercise 2: Keep the state on the node
#
# *(code)* Run Ditto with `mirror_states=False`. What changes in the bytes that travel up, and
# what in the results?
#
# :::{dropdown} Hint
# Compare the `flower_bytes` of the `up` rows of `run.wire` with and without the mirror.
# :::
#
# :::{dropdown} Worked solution
# The replies carry {glue:text}`ex2_up_nomirror` instead of {glue:text}`ex2_up_mirror` up, and the
# run ends with {glue:text}`ex2_same`: the state was only ever a copy. What is lost is the server's
# copy: `run.result.client_states` holds placeholders naming the node, and the job cannot
# be checkpointed.
# :::
#
# ### Exercise 3: Your method on Flower
#
# *(parameters only)* Re-run this page with another registered method, e.g.
# `python book/build.py --only flower -p "methods=['fedrep']" -p "engines=['loopback', 'simulation']" --out runs/mine`.
# Does it match the in-process loop?
#
# :::{dropdown} Hint
# {func}`fedlib.engines.flower.job.example_job` gives FedAvg, Ditto, FedRep and FedProx their training
# settings; another method takes its defaults, or pass `algorithm_kwargs` (JSON, with
# `{"call": "module:function", "kwargs": {...}}` for objects).
# :::
#
# :::{dropdown} Worked solution
# It does, bit for bit: the transport carries messages only, and the test suite checks every
# registered method this way (`tests/test_flower.py`, on the loopback engine). A method could
# differ only if its client hooks kept something outside their state, e.g. weights left in the
# scratch model between two clients. The deployment would show it, because a node starts a fresh
# process for every message; the loopback grid and the simulation, whose nodes share a process,
# would not. Such a method has a bug, and the deployment check is how to find it.
# :::
