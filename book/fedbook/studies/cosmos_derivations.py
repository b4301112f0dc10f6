r"""The numerical checks of COSMOS's derivations on seeded random instances and on recorded runs
(the chapter *COSMOS: derivations*, ``notebooks/cosmos_derivations.py``).

From COSMOS (Ge, Yeoh, Zhang and Vorobeychik, "COSMOS: Model-Agnostic Personalized Federated
Learning with Clustered Server Models and Pseudo-Label-Only Communication", arXiv:2605.11165).
Each procedure draws its instances from the stream ``rng`` it is given, compares what fedlib
computes with an independent computation of the paper's statement, and returns the counts of
counterexamples and the worst errors; the chapter records each in its check table:

* Algorithm 1 (Section 4.1): :func:`algorithm1_checks` (a partition, the greedy rule replayed by
  :func:`greedy_rule_violations`, the radius :math:`B_0` and the diameter :math:`2B_0` shown),
  :func:`recovery_checks` (planted groups of noisy hard label vectors, :func:`planted_hard_labels`,
  returned whenever the threshold lies between the within-group and the between-group distances),
  :func:`b0_search_checks` (the smallest :math:`B_0` for a target number of clusters, against a
  fixed-step scan) and :func:`monotonicity_search` (a larger :math:`B_0` forming more clusters),
  on the instances of :func:`random_pseudo_labels`;
* Lemma 5.2 (Section 5.1, Appendix B.1): :func:`lemma52_random_checks` on random clusters, and on
  a real run's recorded pseudo-labels (:func:`cosmos_iterations`) :func:`lemma_rows` per client
  and iteration and :func:`assumption51_over_time`, Assumption 5.1 re-measured on the clusters
  of the first round;
* the consistency regularizer's gradient (Section 4.1, Eq. 1): sympy's derivative against
  fedlib's loss, :func:`symbolic_gradient_checks`, and with and without the detach of the
  authors' code, :func:`consistency_gradient_checks`.

The chapter calls one function per section, which records that section's rows in its check table
(:class:`fedbook.checks.CheckTable`) and returns the numbers its prose reads (and the tables it
shows): :func:`algorithm1_section`, :func:`recovery_section`, :func:`b0_search_section`, :func:`monotonicity_section`,
:func:`lemma52_section`, :func:`real_run_section` (on :func:`real_runs`, a :class:`RealRuns`) and
:func:`symbolic_gradient_section` and :func:`consistency_gradient_section`; :func:`exercise_numbers` computes the exercises' worked
solutions.

The contraction theorems' synthetic federation is :mod:`fedbook.studies.cosmos_synthetic`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from fedbook.checks import CheckTable
from fedbook.page import show_table
from fedbook.tables import format_small
from fedlib.algorithms.cosmos import COSMOS, cosmos_history
from fedlib.algorithms.fedmd import cached_labels, grouping
from fedlib.clustering import b0_for_clusters, candidate_thresholds, cluster_diameters, greedy_b0
from fedlib.distill import (augment, consistency_loss, distillation_objective, l1_distances, lemma52, lemma52_chain,
                            margin_profile_bound)
from fedlib.data import load_dataset
from fedlib.distill import make_public_set
from fedlib.federation import Federation, make_federation
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.models import ClientArchitectures, build_model
from fedlib.rng import derive_seed, torch_generator
from fedlib.run import run_federated
from fedlib.training import TrainConfig
from fedlib.validation import check_int

TOL = 1e-12
"""The round-off allowance of the float64 comparisons."""
REAL_SPLIT = {"public_share": 0.2, "groups": 5, "alpha": 5.0, "pool_fraction": 0.1, "clusters": 5}
"""The real runs' split (:func:`real_runs`): the share of every class kept as the public set, the
disjoint label groups, the Dirichlet concentration inside a group, the share of every client's
samples pooled and redistributed, and the most clusters the threshold may form."""

GRADIENT_MODEL, GRADIENT_BATCH, GRADIENT_DRAW = 342, 343, 344
"""The streams of :func:`consistency_gradient_checks` under the chapter's seed, keyed by (key, trial):
each trial's model, its batch and augmentations, and the objective's augmentation draw."""


def random_pseudo_labels(rng: np.random.Generator, m: int, n: int, C: int) -> torch.Tensor:
    """``m`` clients' soft labels on ``n`` public points and ``C`` classes: a few planted groups
    (between 1 and ``min(m, 4)``) of random logits of a random scale, plus client noise of a
    random scale, through a softmax.

    Parameters
    ----------
    rng : numpy.random.Generator
        Every draw comes from it.
    m, n, C : int
        Clients, public points and classes.

    Returns
    -------
    torch.Tensor of shape (m, n, C), float64
        Rows on the probability simplex.

    Examples
    --------
    >>> labels = random_pseudo_labels(np.random.default_rng(0), 3, 5, 4)
    >>> tuple(labels.shape), bool(torch.allclose(labels.sum(dim=2), torch.ones(3, 5, dtype=torch.float64)))
    ((3, 5, 4), True)
    """
    k = int(rng.integers(1, min(m, 4) + 1))
    group = rng.integers(0, k, size=m)
    base = rng.normal(size=(k, n, C)) * rng.uniform(0.5, 4.0)
    logits = base[group] + rng.normal(size=(m, n, C)) * rng.uniform(0.05, 2.0)
    return torch.softmax(torch.tensor(logits), dim=2)


def off_diagonal(d: np.ndarray) -> np.ndarray:
    """The off-diagonal entries of a square matrix, row by row, shape ``(n (n - 1),)``."""
    return d[~np.eye(len(d), dtype=bool)]


def greedy_rule_violations(d: np.ndarray, b0: float, labels: np.ndarray, seeds: Sequence[int]) -> int:
    """Replay Algorithm 1 on a clustering: the number of steps at which it differs.

    Step ``k`` is right when its seed has the most :math:`B_0`-close neighbours (:math:`d \\le
    B_0`) among the clients still unassigned and cluster ``k`` is the seed plus exactly those
    neighbours; a seed already assigned is a wrong step, and clients left unassigned at the end
    count as one more.

    Parameters
    ----------
    d : np.ndarray of shape (n, n)
        The distances.
    b0 : float
        The threshold.
    labels : np.ndarray of shape (n,)
        Each client's cluster, numbered in the order the clusters were formed.
    seeds : sequence of int
        Each cluster's seed client.

    Returns
    -------
    int

    Examples
    --------
    >>> d = np.array([[0, 1, 5, 6], [1, 0, 5, 6], [5, 5, 0, 1], [6, 6, 1, 0]], float)
    >>> greedy_rule_violations(d, 1.5, np.array([0, 0, 1, 1]), [0, 2])
    0
    >>> greedy_rule_violations(d, 1.5, np.array([0, 1, 1, 1]), [0, 2])  # client 1 belongs with its seed 0
    2
    """
    remaining, bad = np.arange(len(d)), 0
    for k, s in enumerate(seeds):
        sub = d[np.ix_(remaining, remaining)]
        close = (sub <= b0) & ~np.eye(len(remaining), dtype=bool)
        if s not in remaining:  # the seed was already taken by an earlier cluster
            bad += 1
            continue
        pos = int(np.flatnonzero(remaining == s)[0])
        expected = set(remaining[close[pos]].tolist()) | {s}
        bad += int(close[pos].sum() != close.sum(axis=1).max() or set(np.flatnonzero(labels == k).tolist()) != expected)
        remaining = np.array([j for j in remaining if j not in expected], dtype=np.int64)
    return bad + int(len(remaining) > 0)


def cluster_count(d: np.ndarray, b0: float) -> int:
    """How many clusters :func:`fedlib.clustering.greedy_b0` forms on ``d`` at threshold ``b0``.

    Examples
    --------
    >>> cluster_count(np.array([[0, 1, 5], [1, 0, 5], [5, 5, 0]], float), 1.0)
    2
    """
    return len(greedy_b0(d, float(b0))[1])


def algorithm1_checks(rng: np.random.Generator, trials: int, *, tol: float = TOL) -> dict:
    """Algorithm 1 on ``trials`` random instances (:func:`random_pseudo_labels`: ``2 <= m <= 16``
    clients, ``3 <= n <= 40`` points, ``2 <= C <= 6`` classes; :math:`B_0` a random quantile of
    the instance's pairwise distances).

    Returns
    -------
    dict
        ``partition_bad`` (instances whose output is not a partition with every seed in its own
        cluster and ``1 <= K <= m``), ``rule_bad`` (steps that differ from Algorithm 1 replayed,
        :func:`greedy_rule_violations`), ``radius_excess`` (the largest distance of a member
        from its seed minus :math:`B_0`), ``diam_excess`` (the largest diameter minus
        :math:`2B_0`), ``worst_ratio`` (the largest diameter over :math:`2B_0`), ``n_clusters``
        (clusters formed in all), ``over_b0`` (clusters whose diameter exceeds :math:`B_0` by more
        than ``tol``) and ``inst_over_b0`` (instances with such a cluster).

    Examples
    --------
    >>> r = algorithm1_checks(np.random.default_rng(0), 5)
    >>> r["partition_bad"], r["rule_bad"], r["radius_excess"] <= 0, r["diam_excess"] <= 0
    (0, 0, True, True)
    """
    check_int("trials", trials, low=1)
    radius_excess, diam_excess, worst_ratio = -math.inf, -math.inf, 0.0
    partition_bad = rule_bad = n_clusters = over_b0 = inst_over_b0 = 0
    for _ in range(trials):
        m, n, C = int(rng.integers(2, 17)), int(rng.integers(3, 41)), int(rng.integers(2, 7))
        d = l1_distances(random_pseudo_labels(rng, m, n, C))
        b0 = float(np.quantile(off_diagonal(d), rng.uniform(0.0, 1.0)))
        labels, seeds = greedy_b0(d, b0)
        k = len(seeds)
        partition_bad += int(labels.min() < 0 or labels.max() != k - 1 or len(set(seeds)) != k
                             or any(labels[s] != g for g, s in enumerate(seeds)) or not 1 <= k <= m)
        rule_bad += greedy_rule_violations(d, b0, labels, seeds)
        radius_excess = max(radius_excess, float(max(d[seeds[labels[j]], j] for j in range(m)) - b0))
        diam = cluster_diameters(d, labels)
        diam_excess = max(diam_excess, float((diam - 2 * b0).max()))
        if b0 > 0:
            worst_ratio = max(worst_ratio, float(diam.max() / (2 * b0)))
        n_clusters += k
        over_b0 += int((diam > b0 + tol).sum())
        inst_over_b0 += int((diam > b0 + tol).any())
    return dict(partition_bad=partition_bad, rule_bad=rule_bad, radius_excess=radius_excess, diam_excess=diam_excess,
                worst_ratio=worst_ratio, n_clusters=n_clusters, over_b0=over_b0, inst_over_b0=inst_over_b0)


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labelings split the clients alike, whatever the numbers of their clusters.

    Examples
    --------
    >>> same_partition(np.array([0, 0, 1]), np.array([5, 5, 2])), same_partition(np.array([0, 0, 1]), np.array([0, 1, 1]))
    (True, False)
    """
    a, b = np.asarray(a), np.asarray(b)
    return bool(((a[:, None] == a[None, :]) == (b[:, None] == b[None, :])).all())


def planted_hard_labels(rng: np.random.Generator) -> tuple[torch.Tensor, np.ndarray]:
    """A random instance of Algorithm 1's input as the paper states it, hard label vectors: ``2 <= k
    <= 5`` planted groups of 1 to 6 clients, each group a random label vector on ``20 <= n <= 80``
    public points and ``2 <= C <= 6`` classes, each client its group's vector with every label
    replaced by another class with a probability drawn once per instance in [0, 0.3].

    Returns
    -------
    labels : torch.Tensor of shape (m, n, C), float64
        One-hot rows (so :func:`fedlib.distill.l1_distances` is twice the number of disagreements).
    groups : np.ndarray of shape (m,)
        Each client's planted group.

    Examples
    --------
    >>> labels, groups = planted_hard_labels(np.random.default_rng(0))
    >>> labels.shape[0] == len(groups), bool((labels.sum(dim=2) == 1).all())
    (True, True)
    """
    k, n, C = int(rng.integers(2, 6)), int(rng.integers(20, 81)), int(rng.integers(2, 7))
    groups = np.repeat(np.arange(k), rng.integers(1, 7, size=k))
    proto = rng.integers(0, C, size=(k, n))
    flip = rng.uniform(0.0, 0.3)
    hard = proto[groups]
    hard = np.where(rng.random(hard.shape) < flip, (hard + rng.integers(1, C, size=hard.shape)) % C, hard)
    return torch.nn.functional.one_hot(torch.as_tensor(hard), C).double(), groups


def recovery_checks(rng: np.random.Generator, trials: int, *,
                    cluster: Callable[[np.ndarray, float], tuple[np.ndarray, list[int]]] = greedy_b0) -> dict:
    """What Algorithm 1's threshold is for, tested on ``trials`` instances of
    :func:`planted_hard_labels`: with :math:`W` the largest distance within a planted group and
    :math:`D` the smallest between two groups, a threshold :math:`W \\le B_0 < D` makes every
    client's :math:`B_0`-close neighbours exactly its group, so Algorithm 1 must return the planted
    groups; outside that window nothing guarantees it. On every separated instance (:math:`W < D`)
    ``cluster`` runs at three thresholds inside the window (:math:`W`, :math:`D - 1`, the largest
    below :math:`D` since distances of hard labels are even integers, and one uniform in between)
    and at two outside it (:math:`D`, and :math:`W - 1` where :math:`W > 0`).

    Parameters
    ----------
    rng : numpy.random.Generator
    trials : int
    cluster : callable, default :func:`fedlib.clustering.greedy_b0`
        ``(distances, b0) -> (labels, seeds)``; the tests pass a mutated one.

    Returns
    -------
    dict
        ``separated`` (instances with :math:`W < D`), ``inside`` and ``inside_bad`` (runs inside
        the window, and those that do not return the planted groups), ``outside`` and
        ``outside_bad`` (the same outside it).

    Examples
    --------
    >>> r = recovery_checks(np.random.default_rng(0), 20)
    >>> r["inside_bad"], r["inside"] == 3 * r["separated"], r["outside_bad"] > 0
    (0, True, True)
    """
    check_int("trials", trials, low=1)
    separated = inside = inside_bad = outside = outside_bad = 0
    for _ in range(trials):
        labels, groups = planted_hard_labels(rng)
        d = l1_distances(labels)
        same = groups[:, None] == groups[None, :]
        W, D = float(d[same].max()), float(d[~same].min())
        if not W < D:
            continue
        separated += 1
        for b0 in (W, D - 1, float(rng.uniform(W, D))):
            inside += 1
            inside_bad += int(not same_partition(cluster(d, b0)[0], groups))
        for b0 in (D, W - 1) if W > 0 else (D,):
            outside += 1
            outside_bad += int(not same_partition(cluster(d, b0)[0], groups))
    return dict(separated=separated, inside=inside, inside_bad=inside_bad, outside=outside, outside_bad=outside_bad)


def reference_cluster_count(d: np.ndarray, b0: float) -> int:
    """How many clusters Algorithm 1 forms on ``d`` at threshold ``b0``, written out again with
    Python sets and loops, independently of :func:`fedlib.clustering.greedy_b0` (its numpy masks):
    while clients remain, the one with the most remaining neighbours within ``b0`` (ties: the
    smallest total distance to them, rounded to 1e-9, then the lowest index) takes them into a
    cluster.

    Examples
    --------
    >>> reference_cluster_count(np.array([[0, 1, 5], [1, 0, 5], [5, 5, 0]], float), 1.0)
    2
    """
    n = len(d)
    left, count = set(range(n)), 0
    while left:
        def rank(i):
            near = [j for j in left if j != i and d[i][j] <= b0]
            return (-len(near), round(sum(float(d[i][j]) for j in near), 9), i)
        seed_ = min(left, key=rank)
        left -= {seed_} | {j for j in left if d[seed_][j] <= b0}
        count += 1
    return count


def b0_search_checks(rng: np.random.Generator, trials: int, grid: int, *, tol: float = TOL) -> dict:
    """:func:`fedlib.clustering.b0_for_clusters` on ``trials`` random instances (``3 <= m <= 12``
    clients, a random target in ``1..m``), against every smaller pairwise distance and a
    fixed-step scan of ``grid`` equal steps from 0 to the largest distance (the authors' search).
    Every cluster count here is :func:`reference_cluster_count`, and the smaller candidates are
    the distinct pairwise distances listed again here: nothing re-runs the library's search.

    Returns
    -------
    dict
        ``reach_bad`` (instances where the returned :math:`B_0` forms more clusters than the
        target), ``smaller_bad`` (smaller candidates that reach the target), ``grid_bad``
        (instances where the scan finds a smaller threshold) and ``overshoot`` (float64 of shape
        ``(trials,)``: how many steps the scan lands above the returned :math:`B_0`).

    Examples
    --------
    >>> r = b0_search_checks(np.random.default_rng(0), 3, 50)
    >>> r["reach_bad"], r["smaller_bad"], r["grid_bad"], r["overshoot"].shape
    (0, 0, 0, (3,))
    """
    check_int("trials", trials, low=1)
    check_int("grid", grid, low=1)
    reach_bad = smaller_bad = grid_bad = 0
    overshoot = []
    for _ in range(trials):
        m, n, C = int(rng.integers(3, 13)), int(rng.integers(3, 31)), int(rng.integers(2, 6))
        d = l1_distances(random_pseudo_labels(rng, m, n, C))
        target = int(rng.integers(1, m + 1))
        b_star = b0_for_clusters(d, target)
        reach_bad += int(reference_cluster_count(d, b_star) > target)
        distances = sorted({0.0} | {float(d[i][j]) for i in range(m) for j in range(i + 1, m)})
        smaller_bad += sum(reference_cluster_count(d, c) <= target for c in distances if c < b_star)
        steps = np.linspace(0.0, float(d.max()), grid + 1)
        g_star = next(float(g) for g in steps if reference_cluster_count(d, g) <= target)
        grid_bad += int(g_star < b_star - tol)
        overshoot.append((g_star - b_star) / (steps[1] - steps[0]))
    return dict(reach_bad=reach_bad, smaller_bad=smaller_bad, grid_bad=grid_bad, overshoot=np.array(overshoot))


def monotonicity_search(rng: np.random.Generator, trials: int, m: int | None = None) -> tuple[int, dict | None]:
    """Search ``trials`` random instances (3 classes, ``2 <= n <= 5`` points; ``m`` clients, or a
    random ``4 <= m <= 9`` drawn per instance when ``m`` is ``None``) for a threshold at which
    Algorithm 1 forms more clusters than at the candidate threshold before it.

    Returns
    -------
    found : int
        The instances with such an increase.
    example : dict or None
        The first one: ``m``, the thresholds ``low`` < ``high`` and their cluster counts
        ``k_low`` < ``k_high``.

    Examples
    --------
    >>> found, example = monotonicity_search(np.random.default_rng(0), 2, m=3)
    >>> found, example  # three clients never give one (the chapter's exercise 3)
    (0, None)
    """
    check_int("trials", trials, low=1)
    found, example = 0, None
    for _ in range(trials):
        m_ = int(rng.integers(4, 10)) if m is None else m
        n = int(rng.integers(2, 6))
        d = l1_distances(random_pseudo_labels(rng, m_, n, 3))
        candidates = candidate_thresholds(d)
        counts = np.array([cluster_count(d, c) for c in candidates])
        up = np.flatnonzero(np.diff(counts) > 0)
        if len(up):
            found += 1
            if example is None:
                j = int(up[0])
                example = dict(m=m_, low=float(candidates[j]), high=float(candidates[j + 1]), k_low=int(counts[j]),
                               k_high=int(counts[j + 1]))
    return found, example


def lemma52_random_checks(rng: np.random.Generator, trials: int, *, tol: float = TOL) -> dict:
    """Lemma 5.2 (:func:`fedlib.distill.lemma52` with its default :math:`B`) on ``trials`` random
    clusters: ``1 <= m <= 8`` members around the client's own labels at random spreads,
    ``5 <= n <= 60`` public points, ``2 <= C <= 6`` classes, true labels the client's argmax
    with random flips, a random nonempty :math:`U_i`. Instances with :math:`\\gamma = 0` (a tie in
    the client's top two classes) are skipped.

    Returns
    -------
    dict
        The counterexamples among the kept instances: ``lemma_bad`` (the lemma),
        ``chain_bad`` (a step of the proof chain, :func:`fedlib.distill.lemma52_chain`),
        ``diam_bad`` (the lemma with :math:`B` the cluster's diameter on :math:`U_i` and no factor
        2), ``profile_bad`` (:func:`fedlib.distill.margin_profile_bound`) and
        ``mean_reading_bad`` (:math:`B` read as a per-sample mean, :math:`B/|U_i|`); and per kept
        instance, ``bound_terms`` (:math:`2B/(\\gamma |U_i|)`) and ``slack`` (the bound minus the
        mean's error), lists of float.

    Examples
    --------
    >>> r = lemma52_random_checks(np.random.default_rng(0), 10)
    >>> r["lemma_bad"], r["chain_bad"], r["diam_bad"], r["profile_bad"], len(r["slack"]) == len(r["bound_terms"])
    (0, 0, 0, 0, True)
    """
    check_int("trials", trials, low=1)
    lemma_bad = chain_bad = diam_bad = profile_bad = mean_reading_bad = 0
    slack, bound_terms = [], []
    for _ in range(trials):
        m, n, C = int(rng.integers(1, 9)), int(rng.integers(5, 61)), int(rng.integers(2, 7))
        own_logits = rng.normal(size=(n, C)) * rng.uniform(0.5, 8.0)
        logits = own_logits[None] + rng.normal(size=(m, n, C)) * rng.uniform(0.0, 3.0)
        i = int(rng.integers(0, m))
        logits[i] = own_logits
        members = torch.softmax(torch.tensor(logits), dim=2)
        truth = own_logits.argmax(axis=1)
        flip = rng.random(n) < rng.uniform(0.0, 0.5)
        truth[flip] = rng.integers(0, C, size=int(flip.sum()))
        support = rng.random(n) < rng.uniform(0.2, 1.0)
        support[rng.integers(0, n)] = True
        r = lemma52(members, i, truth, support)
        if r.gamma <= 0:  # a tie in f_i's top two classes: the lemma says nothing (γ = 0)
            continue
        S, d_mean, d_max, d_diam = lemma52_chain(members, i, support)
        lemma_bad += int(not r.holds)
        chain_bad += int(not (r.gamma * r.bad <= S + tol and S <= d_mean + tol and d_mean <= d_max + tol
                              and abs(d_max - 2 * r.B) <= tol))
        diam_bad += int(r.err_mean > r.err_client + d_diam / (r.gamma * r.size) + tol)
        profile_bad += int(r.err_mean > r.err_client + margin_profile_bound(members[i][torch.as_tensor(support)], 2 * r.B) + tol)
        mean_reading_bad += int(r.err_mean > r.err_client + 2 * (r.B / r.size) / (r.gamma * r.size) + tol)
        bound_terms.append(2 * r.B / (r.gamma * r.size))
        slack.append(r.bound - r.err_mean)
    return dict(lemma_bad=lemma_bad, chain_bad=chain_bad, diam_bad=diam_bad, profile_bad=profile_bad,
                mean_reading_bad=mean_reading_bad, bound_terms=bound_terms, slack=slack)


def cosmos_iterations(method: COSMOS, federation: Federation, model_fn: Callable[[], nn.Module], rounds: int,
                      seed: int) -> list[dict]:
    """Run COSMOS and record, after every round ``t``, what Lemma 5.2 and Assumption 5.1 are read on.

    Parameters
    ----------
    method : COSMOS
    federation : Federation
    model_fn : callable or ClientArchitectures
        The clients' models.
    rounds, seed : int
        The run's :class:`fedlib.loop.LoopConfig` (no evaluation at the end).

    Returns
    -------
    list of dict
        Per round: ``t``, ``labels`` (every client's cached pseudo-labels, float64 of shape
        ``(|U|, C)``, by client), ``groups`` (``{client: cluster}``) and ``history`` (the round's
        clustering record, :func:`fedlib.algorithms.cosmos.cosmos_history`).
    """
    iterations = []
    run_federated(method, federation, model_fn, LoopConfig(rounds=rounds, seed=seed, evaluate_last=False), RunOptions(
        observe=lambda t, server, _: iterations.append(dict(t=t, labels={k: v.double() for k, v in cached_labels(server).items()},
                                                            groups=grouping(server), history=cosmos_history(server)[-1]))))
    return iterations


def lemma_rows(iterations: Sequence[dict], held: Sequence[np.ndarray], truth: np.ndarray, *, tol: float = TOL) -> pd.DataFrame:
    """Lemma 5.2 per client and iteration of a recorded run (:func:`cosmos_iterations`).

    Parameters
    ----------
    iterations : sequence of dict
        :func:`cosmos_iterations`.
    held : sequence of np.ndarray
        Per client, the classes of its support; :math:`U_i` is the public points whose true
        class is one of them (a client with an empty :math:`U_i` is left out).
    truth : np.ndarray of shape (n,)
        The true label of each of the public set's ``n`` points (analysis only).
    tol : float
        The round-off allowance of the comparisons.

    Returns
    -------
    DataFrame
        One row per client and iteration: ``t, client, cluster size, |U_i|, γ, 2B, Err(f_i),
        Err(f̄), bad, 2B/(γ|U_i|)`` (∞ when :math:`\\gamma = 0`), ``holds``, ``holds, B =
        diameter on U`` (Assumption 5.1's :math:`B`, the cluster's diameter over all of
        :math:`U`), ``gap`` (``Err(f̄) − Err(f_i)``), ``margin-profile term``, ``S/(γ|U_i|)``
        (the proof stopped at step iii) and ``mean reading holds`` (:math:`B` read as a
        per-sample mean).
    """
    rows = []
    for it in iterations:
        labels, groups = it["labels"], it["groups"]
        for i in sorted(groups):
            members = [k for k in sorted(groups) if groups[k] == groups[i]]
            M = torch.stack([labels[k] for k in members])
            support = np.isin(truth, held[i])
            if not support.any():
                continue
            r = lemma52(M, members.index(i), truth, support)
            S, d_mean, d_max, d_diam = lemma52_chain(M, members.index(i), support)
            flat = M.reshape(len(M), -1)
            diam_U = float(torch.cdist(flat, flat, p=1).max())  # Assumption 5.1's B at iteration t (a sum over all of U)
            term = 2 * r.B / (r.gamma * r.size) if r.gamma > 0 else math.inf
            rows.append({"t": it["t"], "client": i, "cluster size": len(members), "|U_i|": r.size, "γ": r.gamma,
                         "2B": 2 * r.B, "Err(f_i)": r.err_client, "Err(f̄)": r.err_mean, "bad": r.bad,
                         "2B/(γ|U_i|)": term, "holds": r.holds,
                         "holds, B = diameter on U": r.err_mean <= r.err_client + 2 * diam_U / (r.gamma * r.size) + tol
                         if r.gamma > 0 else True,
                         "gap": r.err_mean - r.err_client,
                         "margin-profile term": margin_profile_bound(M[members.index(i)][torch.as_tensor(support)], 2 * r.B),
                         "S/(γ|U_i|)": S / (r.gamma * r.size) if r.gamma > 0 else math.inf,
                         "mean reading holds": r.err_mean <= r.err_client + 2 * (r.B / r.size) / (r.gamma * r.size) + tol
                         if r.gamma > 0 else True})
    return pd.DataFrame(rows)


def assumption51_over_time(iterations: Sequence[dict]) -> pd.DataFrame:
    """Assumption 5.1 re-measured at every round of a recorded run (:func:`cosmos_iterations`) on
    its clusters, in units of the first round's threshold :math:`B_0`.

    Returns
    -------
    DataFrame indexed by ``t``
        ``clusters``, ``max seed radius / B₀`` (the largest distance of a member from its
        cluster's seed) and ``max diameter / B₀``; both 0 when :math:`B_0 = 0`.
    """
    b0 = iterations[0]["history"]["b0"]
    rows = []
    for it in iterations:
        clients = sorted(it["groups"])
        d_t = l1_distances(torch.stack([it["labels"][k] for k in clients]))
        lab = np.array([it["groups"][k] for k in clients])
        seeds = [clients.index(s) for s in it["history"]["seeds"]]
        rows.append({"t": it["t"], "clusters": int(lab.max()) + 1,
                     "max seed radius / B₀": float(max(d_t[seeds[g], j] for j, g in enumerate(lab)) / b0) if b0 > 0 else 0.0,
                     "max diameter / B₀": float(cluster_diameters(d_t, lab).max() / b0) if b0 > 0 else 0.0})
    return pd.DataFrame(rows).set_index("t")


def symbolic_gradient_checks(rng: np.random.Generator, trials: int, *,
                             loss: Callable[..., torch.Tensor] = consistency_loss) -> dict:
    """The paper's consistency term differentiated by sympy, against the gradient of the loss fedlib
    trains with: for :math:`C = 2` and 3, sympy differentiates :math:`\\ell(g(x'), g(x)) =
    \\mathrm{KL}(\\mathrm{softmax}(z) \\,\\Vert\\, \\mathrm{softmax}(z'))` (Eq. 1, written out from the
    logits) with respect to every clean and augmented logit, and checks the hand formulas
    :math:`p \\odot (a - \\langle p, a\\rangle)` and :math:`q - p`; then its derivatives, evaluated
    numerically, are compared with autograd's gradient of ``loss`` (``(logits_aug, logits_clean)
    -> (n,)``, :func:`fedlib.distill.consistency_loss` by default) on ``trials`` random batches of
    logits (float64, 2 to 16 rows, scale up to 5) per :math:`C`. A loss with the KL's arguments
    swapped, or the wrong softmax, fails it (``tests/test_cosmos_chapters.py``).

    Returns
    -------
    dict
        ``formula_ok`` (sympy's derivative minus each hand formula simplifies to 0) and ``err``
        (the largest absolute difference between sympy's derivatives and ``loss``'s gradients).

    Examples
    --------
    >>> r = symbolic_gradient_checks(np.random.default_rng(0), 3)
    >>> r["formula_ok"], r["err"] < 1e-12
    (True, True)
    """
    import sympy as sp
    check_int("trials", trials, low=1)
    formula_ok, err = True, 0.0
    for n_cls in (2, 3):
        z, w = sp.symbols(f"z0:{n_cls}", real=True), sp.symbols(f"w0:{n_cls}", real=True)
        Sz, Sw = sum(sp.exp(v) for v in z), sum(sp.exp(v) for v in w)
        log_p = [v - sp.log(Sz) for v in z]
        log_q = [v - sp.log(Sw) for v in w]
        p_ = [sp.exp(v) / Sz for v in z]
        q_ = [sp.exp(v) / Sw for v in w]
        kl = sum(pk * (lp - lq) for pk, lp, lq in zip(p_, log_p, log_q))
        d_clean, d_aug = [sp.diff(kl, v) for v in z], [sp.diff(kl, v) for v in w]
        a = [lp - lq + 1 for lp, lq in zip(log_p, log_q)]
        mean_a = sum(pk * ak for pk, ak in zip(p_, a))
        formula_ok &= all(sp.simplify(d_clean[j] - p_[j] * (a[j] - mean_a)) == 0 and sp.simplify(d_aug[j] - (q_[j] - p_[j])) == 0
                          for j in range(n_cls))
        grad = sp.lambdify([z, w], [d_clean, d_aug], "numpy")
        for _ in range(trials):
            n = int(rng.integers(2, 17))
            zc, za = (rng.normal(size=(n, n_cls)) * rng.uniform(0.1, 5.0) for _ in range(2))
            zc_t, za_t = torch.tensor(zc, requires_grad=True), torch.tensor(za, requires_grad=True)
            g_aug, g_clean = torch.autograd.grad(loss(za_t, zc_t).sum(), [za_t, zc_t])
            dc, da = (np.stack([np.broadcast_to(np.asarray(v, dtype=float), (n,)) for v in part], axis=1)
                      for part in grad(list(zc.T), list(za.T)))
            err = max(err, float(np.abs(dc - g_clean.numpy()).max()), float(np.abs(da - g_aug.numpy()).max()))
    return dict(formula_ok=bool(formula_ok), err=err)


def _flat(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.flatten() for g in grads])


def consistency_gradient_checks(rng: np.random.Generator, seed: int, trials: int, *,
                                loss: Callable[..., torch.Tensor] = consistency_loss,
                                objective: Callable[..., torch.Tensor] = distillation_objective) -> dict:
    """The consistency regularizer's gradient with and without the detach, on ``trials`` random
    MLPs in float64 (2 to 6 classes, inputs of 2×2 to 4×4, batches of 4 to 32, augmentation noise
    of radius 0.05 to 1).

    With :math:`p = \\mathrm{softmax}(z)` of the clean logits, :math:`q` of the augmented ones and
    :math:`a = \\log p - \\log q + 1`: autograd's logit gradients against :math:`p \\odot (a -
    \\langle p, a\\rangle)` (clean) and :math:`q - p` (augmented); the parameter gradient without
    the detach against the sum of the two branches' vector-Jacobian products, with it against the
    augmented one alone; and :func:`fedlib.distill.distillation_objective` with and without
    ``detach_target`` (same augmentation draw, a random :math:`\\lambda` in [0.5, 5]), whose
    difference must be :math:`\\lambda / n` times the clean branch.

    Parameters
    ----------
    rng : numpy.random.Generator
        The trials' sizes and constants.
    seed : int
        The chapter's seed: each trial's model, batch and augmentation draw come from the streams
        :data:`GRADIENT_MODEL`, :data:`GRADIENT_BATCH` and :data:`GRADIENT_DRAW` under it.
    trials : int
    loss, objective : callable, default :func:`fedlib.distill.consistency_loss` and :func:`fedlib.distill.distillation_objective`
        What is checked (the tests pass mutated ones, which fail the checks).

    Returns
    -------
    dict
        The worst absolute errors ``err_logits``, ``err_none`` (the augmented branch's gradient
        with the detach), ``err_params_nd`` and ``err_params_d`` (the parameter gradients without
        and with it), ``err_objective``; ``clean_grad_is_none`` (the clean logits got no gradient
        with the detach on every trial); and per trial, the relative difference of the two
        parameter gradients ``rel_diff``, their cosine ``cosines`` and the norm of the clean
        branch's over the augmented one's ``clean_share`` (lists of float).

    Examples
    --------
    >>> r = consistency_gradient_checks(np.random.default_rng(0), 0, 2)
    >>> r["clean_grad_is_none"], r["err_logits"] < 1e-12, r["err_objective"] < 1e-12, len(r["rel_diff"])
    (True, True, True, 2)
    """
    check_int("trials", trials, low=1)
    f64 = torch.float64
    err_logits = err_none = err_params_nd = err_params_d = err_objective = 0.0
    rel_diff, cosines, clean_share = [], [], []
    clean_grad_is_none = True
    for trial in range(trials):
        n_cls, side, n = int(rng.integers(2, 7)), int(rng.integers(2, 5)), int(rng.integers(4, 33))
        model = build_model("mlp", in_channels=1, n_classes=n_cls, input_size=side, hidden=(8,),
                            seed=derive_seed(seed, GRADIENT_MODEL, trial)).double()
        params = list(model.parameters())
        g = torch_generator(seed, GRADIENT_BATCH, trial)
        x = torch.randn(n, side * side, generator=g, dtype=f64)
        x_aug = augment(x, g, noise=float(rng.uniform(0.05, 1.0)))
        z, z_aug = model(x), model(x_aug)
        p, q = torch.softmax(z, 1), torch.softmax(z_aug, 1)
        a = torch.log(p) - torch.log(q) + 1
        g_clean = (p * (a - (p * a).sum(1, keepdim=True))).detach()
        g_aug_formula = (q - p).detach()
        loss_ = loss(z_aug, z).sum()
        dz_aug, dz = torch.autograd.grad(loss_, [z_aug, z], retain_graph=True)
        err_logits = max(err_logits, float((dz - g_clean).abs().max()), float((dz_aug - g_aug_formula).abs().max()))
        loss_d = loss(z_aug, z, detach_target=True).sum()
        dz_aug_d, dz_d = torch.autograd.grad(loss_d, [z_aug, z], retain_graph=True, allow_unused=True)
        clean_grad_is_none &= dz_d is None
        err_none = max(err_none, float((dz_aug_d - g_aug_formula).abs().max()))
        G_nd = torch.autograd.grad(loss_, params, retain_graph=True)
        G_d = torch.autograd.grad(loss_d, params, retain_graph=True)
        G_a = torch.autograd.grad(z_aug, params, grad_outputs=g_aug_formula, retain_graph=True)
        G_c = torch.autograd.grad(z, params, grad_outputs=g_clean, retain_graph=True)
        err_params_nd = max(err_params_nd, float((_flat(G_nd) - _flat(G_a) - _flat(G_c)).abs().max()))
        err_params_d = max(err_params_d, float((_flat(G_d) - _flat(G_a)).abs().max()))
        rel_diff.append(float((_flat(G_nd) - _flat(G_d)).norm() / _flat(G_nd).norm()))
        cosines.append(float(torch.nn.functional.cosine_similarity(_flat(G_nd), _flat(G_d), dim=0)))
        clean_share.append(float(_flat(G_c).norm() / _flat(G_a).norm()))
        # the library's objective: same augmentation draw for both flags (the generator's first draw)
        lam = float(rng.uniform(0.5, 5.0))
        targets = torch.softmax(torch.randn(n, n_cls, generator=g, dtype=f64), 1)
        draw_seed = derive_seed(seed, GRADIENT_DRAW, trial)
        grads = {}
        for detach in (False, True):
            obj = objective(model, x, targets, torch.Generator().manual_seed(draw_seed), lam=lam,
                            detach_target=detach, noise=0.1)
            grads[detach] = _flat(torch.autograd.grad(obj, params))
        x_draw = augment(x, torch.Generator().manual_seed(draw_seed), noise=0.1)
        z_draw, zc = model(x_draw), model(x)
        pc, qd = torch.softmax(zc, 1), torch.softmax(z_draw, 1)
        ad = torch.log(pc) - torch.log(qd) + 1
        clean_branch = _flat(torch.autograd.grad(zc, params, grad_outputs=(pc * (ad - (pc * ad).sum(1, keepdim=True))).detach()))
        err_objective = max(err_objective, float((grads[False] - grads[True] - lam / n * clean_branch).abs().max()))
    return dict(err_logits=err_logits, err_none=err_none, err_params_nd=err_params_nd, err_params_d=err_params_d,
                err_objective=err_objective, clean_grad_is_none=clean_grad_is_none, rel_diff=rel_diff, cosines=cosines,
                clean_share=clean_share)


# ---- the chapter's sections: each check recorded in the chapter's table, and the numbers its prose reads ----

def _show_value(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):,}"


def algorithm1_section(checks: CheckTable, rng: np.random.Generator, trials: int, *, tol: float = TOL) -> tuple[dict, object]:
    """Section 1's first checks: :func:`algorithm1_checks` on ``trials`` instances, its three rows
    recorded in ``checks`` (a partition, the greedy rule, and diameters above :math:`B_0`). The
    radius :math:`B_0` and the diameter :math:`2B_0` are shown in the table, not checked: they hold
    by the algorithm's construction and the triangle inequality, so no run could fail them; what
    the threshold is for is checked by :func:`recovery_section`.

    Returns
    -------
    (dict, Table)
        The numbers the prose reads (``s1_trials``, ``s1_radius``, ``s1_ratio``, ``s1_clusters``,
        ``s1_over``, ``s1_inst_over``, ``s1_inst_over_pct``, and the sentences ``s1_diam_sentence``
        (whether a diameter reaches :math:`2B_0`) and ``s1_rule`` (whether the greedy rule
        matches)), and the table of the counts (:func:`fedbook.page.show_table`).
    """
    A1 = algorithm1_checks(rng, trials, tol=tol)
    radius_excess, diam_excess, worst_ratio, rule_bad = A1["radius_excess"], A1["diam_excess"], A1["worst_ratio"], A1["rule_bad"]
    table = pd.DataFrame({"value": [trials, *(A1[k] for k in ("partition_bad", "rule_bad", "radius_excess", "diam_excess",
                                                              "worst_ratio", "n_clusters", "over_b0", "inst_over_b0"))]},
                         index=pd.Index(["random instances", "instances whose output is not a partition with seeds in their own cluster",
                                         "greedy steps that differ from Algorithm 1 replayed", "max over members of d(seed, j) − B₀",
                                         "max over clusters of diameter − 2B₀", "worst diameter / (2B₀)", "clusters formed",
                                         "clusters whose diameter exceeds B₀", "instances with a cluster of diameter > B₀"],
                                        name="quantity"))
    numbers = {
        "s1_trials": int(trials), "s1_radius": float(radius_excess),
        "s1_diam_sentence": f"is {format_small(diam_excess, 2)} (negative: no diameter reaches 2B₀)" if diam_excess < 0 else
        f"is {format_small(diam_excess)}: a diameter attains 2B₀ up to round-off" if diam_excess <= tol else
        f"is {format_small(diam_excess, 2)}: a diameter exceeds 2B₀",
        "s1_ratio": float(worst_ratio), "s1_clusters": int(A1["n_clusters"]), "s1_over": int(A1["over_b0"]),
        "s1_inst_over": int(A1["inst_over_b0"]), "s1_inst_over_pct": 100 * A1["inst_over_b0"] / trials,
        "s1_rule": "matches Algorithm 1 replayed step by step on every instance" if rule_bad == 0 else
        f"differs from Algorithm 1 replayed in {rule_bad} steps"}
    how = f"{trials} random pseudo-label instances, m ≤ 16 clients, n ≤ 40 points, C ≤ 6, B₀ a random distance quantile"
    checks.add("Algorithm 1 returns a partition: every client in exactly one cluster, each seed in its own, 1 ≤ K ≤ m",
               how, A1["partition_bad"], 0, kind="count")
    checks.add("greedy_b0 is Algorithm 1: each seed has the most B₀-close unassigned neighbours and its cluster is exactly them",
               how, rule_bad, 0, kind="count")
    checks.add("B = B₀ is not enough for Assumption 5.1: some cluster diameters exceed B₀",
               how, f"{A1['over_b0']} of {A1['n_clusters']} clusters", ok=A1["over_b0"] > 0)
    return numbers, show_table(table, formats={"value": _show_value})


def recovery_section(checks: CheckTable, rng: np.random.Generator, trials: int) -> dict:
    """Section 1's recovery check: :func:`recovery_checks` on ``trials`` instances of noisy hard
    label vectors around planted groups, its two rows recorded in ``checks`` (inside the window
    :math:`W \\le B_0 < D` Algorithm 1 returns the planted groups; outside it, not always). A
    mutated Algorithm 1 (a neighbourhood of radius :math:`2B_0` or :math:`B_0/2`) fails the first
    (``tests/test_cosmos_chapters.py``).

    Returns
    -------
    dict
        The numbers the prose reads: ``rc_trials``, ``rc_separated``, ``rc_inside``,
        ``rc_inside_bad``, ``rc_outside``, ``rc_outside_bad`` and ``rc_outside_bad_pct``.
    """
    RC = recovery_checks(rng, trials)
    how = (f"{RC['separated']} of {trials} random instances separated (W < D): 2 to 5 planted groups of 1 to 6 clients, "
           "20 to 80 points, 2 to 6 classes, each label flipped with a probability up to 0.3")
    checks.add("Algorithm 1 on hard label vectors returns the planted groups whenever the largest within-group distance "
               "W ≤ B₀ < D, the smallest between-group distance", how + f"; B₀ = W, D − 1 and uniform between: {RC['inside']} runs",
               RC["inside_bad"], 0, kind="count")
    checks.add("outside that window Algorithm 1 does not always return them (the window is what the threshold must hit)",
               how + f"; B₀ = D and W − 1: {RC['outside']} runs",
               f"{RC['outside_bad']} of {RC['outside']} runs miss the planted groups", ok=RC["outside_bad"] > 0)
    return {"rc_trials": int(trials), **{f"rc_{k}": int(v) for k, v in RC.items()},
            "rc_outside_bad_pct": 100 * RC["outside_bad"] / max(RC["outside"], 1)}


def b0_search_section(checks: CheckTable, rng: np.random.Generator, trials: int, grid: int, *, tol: float = TOL) -> dict:
    """Section 1's search for the smallest :math:`B_0`: :func:`b0_search_checks`, its three rows
    recorded in ``checks``; the numbers the prose reads (``s1_grid_trials``, ``s1_grid``,
    ``s1_over_max``: the largest overshoot of the grid in steps, ``s1_over_far``: the instances
    where it exceeds one step)."""
    B0S = b0_search_checks(rng, trials, grid, tol=tol)
    overshoot = B0S["overshoot"]
    how = f"{trials} random instances, m ≤ 12, random target in 1..m"
    checks.add("b0_for_clusters reaches the target: Algorithm 1, written out again, forms at most the target number of "
               "clusters at the returned B₀", how, B0S["reach_bad"], 0, kind="count")
    checks.add("no smaller pairwise distance reaches the target (the returned B₀ is the smallest), counted by the "
               "independent Algorithm 1", how, B0S["smaller_bad"], 0, kind="count")
    checks.add("a brute-force fixed-step scan never finds a smaller B₀ reaching the target",
               how + f", grid of {grid} steps up to the largest distance", B0S["grid_bad"], 0, kind="count")
    return {"s1_grid_trials": int(trials), "s1_grid": int(grid), "s1_over_max": float(overshoot.max()),
            "s1_over_far": int((overshoot > 1).sum())}


def monotonicity_section(checks: CheckTable, rng: np.random.Generator, trials: int) -> dict:
    """Section 1's search for a cluster count that grows with :math:`B_0`: :func:`monotonicity_search`,
    its row recorded in ``checks``; the numbers the prose reads (``s1_mono_trials``,
    ``s1_mono_found``, and ``s1_mono_sentence``, the first counterexample or that none was found)."""
    non_monotone, example = monotonicity_search(rng, trials)
    if example is not None:
        sentence = (f"One is found in {non_monotone} of {trials} instances. In the first, with "
                    f"m = {example['m']} clients, B₀ = {example['low']:.3f} forms {example['k_low']} clusters and the larger "
                    f"B₀ = {example['high']:.3f} forms {example['k_high']}: the count is not monotone, so b0_for_clusters must "
                    "return the first threshold that reaches the target rather than bisect, and a threshold above it may form "
                    "more clusters again.")
    else:
        sentence = f"No increase is found in {trials} instances; that is no proof of monotonicity."
    checks.add("the cluster count of Algorithm 1 need not fall monotonically as B₀ grows (search)",
               f"{trials} random instances, 4 ≤ m ≤ 9, every candidate B₀",
               f"{non_monotone} non-monotone instances" if non_monotone else "none found",
               ok=non_monotone > 0, partly=True)
    return {"s1_mono_trials": int(trials), "s1_mono_found": int(non_monotone), "s1_mono_sentence": sentence}


def lemma52_section(checks: CheckTable, rng: np.random.Generator, trials: int, *, tol: float = TOL) -> dict:
    """Section 2 on random instances: :func:`lemma52_random_checks`, its five rows recorded in
    ``checks``; the numbers the prose reads (``lm_trials``, ``lm_mean_bad``, ``lm_mean_bad_pct``,
    ``lm_median_term``, ``lm_vacuous_pct``, and ``lm_reading``: whether the lemma and its proof
    chain hold on every instance)."""
    LM = lemma52_random_checks(rng, trials, tol=tol)
    lemma_bad, chain_bad, mean_reading_bad, bound_terms = LM["lemma_bad"], LM["chain_bad"], LM["mean_reading_bad"], LM["bound_terms"]
    n_lemma = len(LM["slack"])
    how = f"{n_lemma} random instances (m ≤ 8, n ≤ 60, C ≤ 6, random U_i), fedlib.distill.lemma52"
    checks.add(r"Lemma 5.2: $\mathrm{Err}_{U_i}(\bar f_k) \le \mathrm{Err}_{U_i}(f_i) + 2B/(\gamma|U_i|)$, with "
               r"$2B = \max_j d_{U_i}(i, j)$ (sums over $U_i$)",
               how, lemma_bad, 0, kind="count")
    checks.add(r"the proof chain: $\gamma|\mathrm{Bad}| \le \sum_{U_i}\lVert\bar f - f_i\rVert_1 \le \operatorname{mean}_j "
               r"d_{U_i}(i, j) \le \max_j d_{U_i}(i, j) = 2B$", how,
               chain_bad, 0, kind="count")
    checks.add(r"with $B$ the cluster's diameter (Assumption 5.1) the lemma holds with $B/(\gamma|U_i|)$: the factor 2 is spare",
               how, LM["diam_bad"], 0, kind="count")
    checks.add(r"the margin-profile version $\min_\tau [P(\Delta < \tau) + 2B/(\tau|U_i|)]$ is also a valid bound", how, LM["profile_bad"], 0,
               kind="count")
    checks.add(r"$B$ must be a sum over $U_i$: read as a per-sample mean ($B/|U_i|$) the bound is false",
               how, f"{mean_reading_bad} counterexamples", ok=mean_reading_bad > 0)
    return {"lm_trials": int(n_lemma), "lm_mean_bad": int(mean_reading_bad),
            "lm_mean_bad_pct": 100 * mean_reading_bad / max(n_lemma, 1), "lm_median_term": float(np.median(bound_terms)),
            "lm_vacuous_pct": 100 * float(np.mean(np.array(bound_terms) >= 1)),
            "lm_reading": "the lemma holds on every one, and so does every step of the proof chain" if lemma_bad + chain_bad == 0
            else f"the lemma fails on {lemma_bad} and the proof chain on {chain_bad} of them"}


@dataclass
class RealRuns:
    """A recorded COSMOS run on the UCI digits (:func:`real_runs`).

    Attributes
    ----------
    iterations : list of dict
        :func:`cosmos_iterations`.
    counts : np.ndarray of shape (n_clients, C)
        Each client's training samples per class.
    hidden : np.ndarray
        The public points' true classes (analysis only).
    n_public, n_clients, rounds : int
    """

    iterations: list
    counts: np.ndarray
    hidden: np.ndarray
    n_public: int
    n_clients: int
    rounds: int

    def lemma_rows(self, support_share: float, *, tol: float = TOL) -> pd.DataFrame:
        """:func:`lemma_rows` with each client's support the classes holding at least
        ``support_share`` of its training samples."""
        held = [np.flatnonzero(c / c.sum() >= support_share) for c in self.counts]
        return lemma_rows(self.iterations, held, self.hidden, tol=tol)


def real_runs(seed: int, *, n_clients: int, rounds: int, pretrain_epochs: int, server_epochs: int) -> RealRuns:
    """COSMOS on the UCI digits at 8 × 8, recorded after every round (:func:`cosmos_iterations`):
    a share of every class as :math:`U` (its labels kept aside), ``n_clients`` clients of the paper's
    split (label groups, Dirichlet inside a group, a share pooled: :data:`REAL_SPLIT`),
    alternately a small CNN and an MLP, a wider MLP server, Adam at 1e-3 (``pretrain_epochs``
    pre-training, 3 local and 1 distillation epoch per round, ``server_epochs`` on the server),
    the smallest threshold forming at most ``REAL_SPLIT['clusters']`` clusters; every draw from ``seed``."""
    adam = functools.partial(TrainConfig, batch_size=32, optimizer="adam")
    uci = load_dataset("uci8")
    split = REAL_SPLIT
    public, rest, hidden = make_public_set(uci, split["public_share"], seed=seed)
    fed = make_federation(rest, n_clients=n_clients, partition="grouped_dirichlet", n_groups=split["groups"],
                          alpha=split["alpha"], pool_fraction=split["pool_fraction"], global_test_per_class=10, seed=seed)
    archs = ClientArchitectures.mixture({"cnn": {"model": "cnn", "width": 8, "feature_dim": 32},
                                         "mlp": {"model": "mlp", "hidden": (64,)}}, n_clients, in_channels=1,
                                        n_classes=uci.n_classes, input_size=8)
    server_fn = functools.partial(build_model, "mlp", in_channels=1, n_classes=uci.n_classes, input_size=8, hidden=(256,))
    method = COSMOS(public=public, server_model=server_fn, server_train=adam(epochs=server_epochs, lr=1e-3),
                    pretrain=adam(epochs=pretrain_epochs, lr=1e-3), train=adam(epochs=3, lr=1e-3),
                    distill=adam(epochs=1, lr=1e-3), target_clusters=split["clusters"], seed=seed)
    counts = fed.train_counts()
    iterations = cosmos_iterations(method, fed, archs, rounds, seed)
    return RealRuns(iterations=iterations, counts=counts, hidden=hidden, n_public=len(public), n_clients=n_clients, rounds=rounds)


def real_run_section(checks: CheckTable, runs: RealRuns, real: pd.DataFrame, *, support_share: float, tol: float = TOL
                     ) -> tuple[dict, dict]:
    """Section 2 on the real run: Lemma 5.2 per client-iteration (``real``, :meth:`RealRuns.lemma_rows`)
    and Assumption 5.1 re-measured (:func:`assumption51_over_time`), their rows recorded in ``checks``.

    Returns
    -------
    (dict, dict)
        The numbers the prose reads (``rr_...``, with the sentences ``rr_mean_reading_sentence``
        and ``rr_later_sentence``, which depend on them), and the tables shown
        (:func:`fedbook.page.show_table`): ``summary`` (per iteration), ``per client`` and ``over time``.
    """
    summary = real.groupby("t").agg(**{
        "client-iterations": ("client", "size"), "lemma holds": ("holds", "mean"), "median |U_i|": ("|U_i|", "median"),
        "median γ": ("γ", "median"), "median 2B": ("2B", "median"), "median 2B/(γ|U_i|)": ("2B/(γ|U_i|)", "median"),
        "vacuous (term ≥ 1)": ("2B/(γ|U_i|)", lambda v: float((v >= 1).mean())),
        "median gap Err(f̄) − Err(f_i)": ("gap", "median"), "median margin-profile term": ("margin-profile term", "median")})
    b0 = runs.iterations[0]["history"]["b0"]
    over_time = assumption51_over_time(runs.iterations)
    n_real = len(real)
    mean_reading_fail = int((~real["mean reading holds"]).sum())
    later = over_time.iloc[1:]
    numbers = {
        "rr_clients": int(runs.n_clients), "rr_share": float(support_share),
        "rr_public_pct": 100 * REAL_SPLIT["public_share"], "rr_groups": REAL_SPLIT["groups"], "rr_alpha": REAL_SPLIT["alpha"],
        "rr_pool_pct": 100 * REAL_SPLIT["pool_fraction"], "rr_max_clusters": REAL_SPLIT["clusters"],
        "rr_rounds": int(runs.rounds), "rr_n": int(n_real),
        "rr_b0": float(b0), "rr_k": int(over_time["clusters"].iloc[0]), "rr_public": int(runs.n_public),
        "rr_holds_pct": 100 * float(real["holds"].mean()), "rr_median_gamma": float(real["γ"].median()),
        "rr_min_gamma": float(real["γ"].min()), "rr_median_term": float(real["2B/(γ|U_i|)"].median()),
        "rr_vacuous_pct": 100 * float((real["2B/(γ|U_i|)"] >= 1).mean()), "rr_median_gap": float(real["gap"].median()),
        "rr_max_gap": float(real["gap"].max()), "rr_median_profile": float(real["margin-profile term"].median()),
        "rr_profile_useful_pct": 100 * float((real["margin-profile term"] < 1).mean()),
        "rr_mean_reading_sentence": f"The per-sample-mean reading of B fails on {mean_reading_fail} of the real "
        "client-iterations." if mean_reading_fail else "On these runs even the per-sample-mean reading of B never fails, "
        "because the mean is rarely worse than the client on its support; the random instances above are what expose it.",
        "rr_better_pct": 100 * float((real["gap"] < 0).mean()), "rr_worse_pct": 100 * float((real["gap"] > 0).mean()),
        "rr_diam_max": float(over_time["max diameter / B₀"].max()), "rr_radius_max": float(over_time["max seed radius / B₀"].max()),
        "rr_later_sentence": "With a single iteration there is no later round to look at." if later.empty else (
            f"In the later rounds the clusters are kept fixed (π is set after the first round) while the labels move: the "
            f"largest distance of a member from its seed reaches {later['max seed radius / B₀'].max():.2f} B₀ and the largest "
            f"diameter {later['max diameter / B₀'].max():.2f} B₀, so " + (
                "the diameter stays within 2B₀ on this run, as the paper expects, though nothing enforces it."
                if later["max diameter / B₀"].max() <= 2 + tol else
                "the diameter leaves 2B₀: Assumption 5.1 with B = 2B₀ is not maintained after the first round on this run."))}
    how = f"{n_real} client-iterations: {runs.n_clients} clients × {runs.rounds} COSMOS iterations on UCI digits"
    checks.add(r"Lemma 5.2 on real COSMOS runs ($U_i$ from the support rule, $B$ summed over $U_i$)", how,
               int((~real["holds"]).sum()), 0, kind="count")
    checks.add("Lemma 5.2 on real runs with Assumption 5.1's B (the cluster's diameter over U at iteration t)", how,
               int((~real["holds, B = diameter on U"]).sum()), 0, kind="count")
    checks.add(r"on real runs the lemma's term $2B/(\gamma|U_i|)$ is informative (below 1)", how,
               f"below 1 for {100 - 100 * float((real['2B/(γ|U_i|)'] >= 1).mean()):.0f} % of them",
               ok=bool((real["2B/(γ|U_i|)"] < 1).all()), partly=bool((real["2B/(γ|U_i|)"] < 1).any()))
    if not later.empty:
        checks.add("Assumption 5.1 persists after round 1 (the paper: 'expected to continue to hold'): diameters ≤ 2B₀",
                   f"the clusters of round 1 re-measured in rounds 2..{runs.rounds}",
                   f"max diameter {later['max diameter / B₀'].max():.2f} B₀",
                   ok=bool(later["max diameter / B₀"].max() <= 2 + tol))
    tables = {
        "summary": show_table(summary, digits={"lemma holds": 2, "median |U_i|": 0, "median γ": 4, "median 2B": 1,
                                               "median 2B/(γ|U_i|)": 2, "vacuous (term ≥ 1)": 2,
                                               "median gap Err(f̄) − Err(f_i)": 3, "median margin-profile term": 2}),
        "per client": show_table(real.drop(columns=["holds, B = diameter on U", "mean reading holds", "S/(γ|U_i|)"]).set_index(["t", "client"]),
                                 digits={"γ": 4, "2B": 1, "Err(f_i)": 3, "Err(f̄)": 3, "2B/(γ|U_i|)": 2, "gap": 3,
                                         "margin-profile term": 2}),
        "over time": show_table(over_time, digits={"max seed radius / B₀": 2, "max diameter / B₀": 2})}
    return numbers, tables


def symbolic_gradient_section(checks: CheckTable, rng: np.random.Generator, trials: int) -> dict:
    """Section 4's symbolic check: :func:`symbolic_gradient_checks`, its row recorded in ``checks``
    (sympy's derivative of Eq. 1's term equals the hand formulas and the gradient of
    :func:`fedlib.distill.consistency_loss`); the numbers the prose reads (``sg_trials``, ``sg_err``)."""
    SG = symbolic_gradient_checks(rng, trials)
    checks.add("the gradient of fedlib's consistency_loss is sympy's derivative of KL(softmax(z) ‖ softmax(z')), which "
               "equals p ⊙ (a − ⟨p, a⟩), a = log p − log q + 1, in z and q − p in z'",
               f"sympy, C = 2 and 3: formulas simplified, derivatives evaluated on {trials} random logit batches per C "
               "against autograd", SG["err"] if SG["formula_ok"] else "a formula differs from sympy's derivative",
               **({"tol": 1e-12} if SG["formula_ok"] else {"ok": False}))
    return {"sg_trials": int(trials), "sg_err": float(SG["err"])}


def consistency_gradient_section(checks: CheckTable, rng: np.random.Generator, seed: int, trials: int) -> dict:
    """Section 4's numerical checks: :func:`consistency_gradient_checks`, its four rows recorded in
    ``checks`` (the parameter gradients' split into the two branches' vector-Jacobian products is
    the chain rule, so it is reported in the prose, not checked); the numbers the prose reads
    (``cg_...``, with the sentences ``cg_close_sentence``, whether the two gradients are far apart
    on every trial, and ``cg_none``, whether the clean branch gets no gradient). A mutated loss or
    objective fails the rows that remain (``tests/test_cosmos_chapters.py``)."""
    CG = consistency_gradient_checks(rng, seed, trials)
    err_logits, err_none, err_params_nd, err_params_d = CG["err_logits"], CG["err_none"], CG["err_params_nd"], CG["err_params_d"]
    err_objective, clean_grad_is_none, rel_diff, cosines = CG["err_objective"], CG["clean_grad_is_none"], CG["rel_diff"], CG["cosines"]
    clean_share = CG["clean_share"]
    how = f"{trials} random MLPs (float64) and batches, noise radius 0.05 to 1"
    checks.add("autograd's logit gradients of the consistency term equal the hand-derived formulas", how, err_logits, 1e-12)
    checks.add("with the detach the clean branch gets no gradient, and the augmented branch's is q − p", how,
               f"None on every trial, max error {format_small(err_none)}" if clean_grad_is_none else "a clean-branch gradient exists",
               ok=clean_grad_is_none and err_none <= 1e-12)
    checks.add("distillation_objective: the two detach_target settings differ by exactly λ/n times the clean branch",
               how + ", random λ in [0.5, 5]", err_objective, 1e-12)
    checks.add("the detach changes the gradient (relative difference > 1 % on every trial)", how,
               f"min relative difference {np.min(rel_diff):.3f}", ok=float(np.min(rel_diff)) > 0.01)
    return {"cg_trials": int(trials), "cg_err_logits": float(err_logits), "cg_err_nd": float(err_params_nd),
            "cg_err_d": float(err_params_d), "cg_err_obj": float(err_objective), "cg_rel_min": float(np.min(rel_diff)),
            "cg_rel_median": float(np.median(rel_diff)), "cg_cos_min": float(np.min(cosines)),
            "cg_cos_median": float(np.median(cosines)), "cg_share_median": float(np.median(clean_share)),
            "cg_close_sentence": "The two gradients are not close:" if float(np.min(rel_diff)) > 0.01 else
            "On some trials the two gradients nearly coincide:",
            "cg_none": "no gradient at all (autograd returns None: the clean logits are not in the graph)" if clean_grad_is_none
            else "a gradient"}


def exercise_numbers(runs: RealRuns, real: pd.DataFrame, rng: np.random.Generator, *, support_share: float,
                     mono_trials: int, tol: float = TOL) -> dict:
    """The exercises' worked solutions, from what the chapter has: (1) :meth:`RealRuns.lemma_rows`
    at the support shares 0.02, ``support_share`` and 0.3 (``ex1_...``, the table ``ex1_table``);
    (2) the lemma's term against the proof stopped at step iii, the margin-profile term and the
    actual share of bad points on ``real`` (``ex2_...``, the table ``ex2_table``); (3)
    :func:`monotonicity_search` for m = 3..7 clients, ``max(20, mono_trials // 2)`` instances each
    from ``rng`` (``ex3_...``, the table ``ex3_table``). The sentences ``ex1_reading``,
    ``ex2_reading`` and ``ex3_sentence`` depend on the numbers."""
    out = {}
    shares = sorted({0.02, support_share, 0.3})
    ex1 = []
    for share in shares:
        rows = runs.lemma_rows(share, tol=tol)
        ex1.append({"support share": share, "median |U_i|": float(rows["|U_i|"].median()),
                    "median γ": float(rows["γ"].median()), "median 2B/(γ|U_i|)": float(rows["2B/(γ|U_i|)"].median()),
                    "median Err(f_i)": float(rows["Err(f_i)"].median()), "median gap": float(rows["gap"].median()),
                    "lemma holds": float(rows["holds"].mean())})
    ex1 = pd.DataFrame(ex1).set_index("support share")
    term = ex1["median 2B/(γ|U_i|)"].to_numpy()
    out.update({
        "ex1_shares": ", ".join(f"{s:g}" for s in shares), "ex1_gamma_low": float(ex1["median γ"].iloc[0]),
        "ex1_gamma_high": float(ex1["median γ"].iloc[-1]), "ex1_term_low": float(ex1["median 2B/(γ|U_i|)"].iloc[0]),
        "ex1_term_high": float(ex1["median 2B/(γ|U_i|)"].iloc[-1]),
        "ex1_reading": "The term shrinks as the support rule admits fewer classes:" if term[-1] < term[0] else
        "Here the term does not shrink as the support rule admits fewer classes:",
        "ex1_table": show_table(ex1, digits={"median |U_i|": 0, "median γ": 4, "median 2B/(γ|U_i|)": 2,
                                             "median Err(f_i)": 3, "median gap": 3, "lemma holds": 2})})
    tight = pd.DataFrame({"2B/(γ|U_i|) (the lemma)": real["2B/(γ|U_i|)"],
                          "S/(γ|U_i|) (stop at step iii)": real["S/(γ|U_i|)"],
                          "margin-profile term": real["margin-profile term"], "actual |Bad|/|U_i|": real["bad"] / real["|U_i|"]})
    ex2 = tight.agg(["median", lambda v: float((v < 1).mean())]).T
    ex2.columns = ["median", "share below 1"]
    med = ex2["median"]
    lemma, stop, profile = med["2B/(γ|U_i|) (the lemma)"], med["S/(γ|U_i|) (stop at step iii)"], med["margin-profile term"]
    if profile > 0 and stop > 0 and math.isfinite(lemma):
        loss_margin, loss_distance = float(lemma / profile), float(lemma / stop)
        reading = (("The division by the minimum margin costs the most" if loss_margin > loss_distance else
                    "The distance steps cost more than the division by the minimum margin")
                   + f": in the median, a threshold that lets a few uncertain points count as bad divides the term by "
                   f"{loss_margin:.1f}, while stopping at S (dropping the triangle inequality and the max over members) "
                   f"divides it by {loss_distance:.1f}.")
    else:
        reading = ("At this profile the median client shares its cluster with nobody or has γ = 0, so the "
                   "medians cannot be compared; the book profile's clusters can.")
    out.update({
        "ex2_lemma": float(lemma), "ex2_S": float(stop), "ex2_profile": float(profile),
        "ex2_actual": float(ex2.loc["actual |Bad|/|U_i|", "median"]),
        "ex2_S_useful": 100 * float(ex2.loc["S/(γ|U_i|) (stop at step iii)", "share below 1"]), "ex2_reading": reading,
        "ex2_table": show_table(ex2, digits={"median": 3, "share below 1": 2})})
    ms, trials = list(range(3, 8)), max(20, mono_trials // 2)
    ex3 = pd.DataFrame([{"clients m": m, "instances": trials, "non-monotone": monotonicity_search(rng, trials, m=m)[0]}
                        for m in ms]).set_index("clients m")
    smallest = ex3.index[ex3["non-monotone"] > 0]
    out.update({
        "ex3_trials": int(trials),
        "ex3_sentence": f"The smallest m with a counterexample in this search is {int(smallest[0])}." if len(smallest)
        else f"No counterexample is found for m up to {ms[-1]} in this search.",
        "ex3_table": show_table(ex3)})
    return out


__all__ = ["GRADIENT_BATCH", "GRADIENT_DRAW", "GRADIENT_MODEL", "REAL_SPLIT", "TOL", "RealRuns", "algorithm1_checks", "algorithm1_section",
           "assumption51_over_time", "b0_search_checks", "b0_search_section", "cluster_count", "consistency_gradient_checks",
           "consistency_gradient_section", "cosmos_iterations", "exercise_numbers", "greedy_rule_violations",
           "lemma52_random_checks", "lemma52_section", "lemma_rows", "monotonicity_search", "monotonicity_section",
           "off_diagonal", "planted_hard_labels", "random_pseudo_labels", "real_run_section", "real_runs", "recovery_checks",
           "recovery_section", "reference_cluster_count", "same_partition", "symbolic_gradient_checks",
           "symbolic_gradient_section"]
