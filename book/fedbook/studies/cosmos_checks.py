r"""The numerical checks of COSMOS's derivations on seeded random instances and on recorded runs
(the chapter *COSMOS: derivations*, ``notebooks/cosmos_derivations.py``).

From COSMOS (Ge, Yeoh, Zhang and Vorobeychik, "COSMOS: Model-Agnostic Personalized Federated
Learning with Clustered Server Models and Pseudo-Label-Only Communication", arXiv:2605.11165).
Each procedure draws its instances from the stream ``rng`` it is given, compares what fedlib
computes with an independent computation of the paper's statement, and returns the counts of
counterexamples and the worst errors; the chapter records each in its check table:

* Algorithm 1 (Section 4.1): :func:`algorithm1_checks` (a partition, the greedy rule replayed by
  :func:`greedy_rule_violations`, the radius :math:`B_0` and the diameter :math:`2B_0`),
  :func:`b0_search_checks` (the smallest :math:`B_0` for a target number of clusters, against a
  fixed-step scan) and :func:`monotonicity_search` (a larger :math:`B_0` forming more clusters),
  on the instances of :func:`random_pseudo_labels`;
* Lemma 5.2 (Section 5.1, Appendix B.1): :func:`lemma52_random_checks` on random clusters, and on
  a real run's recorded pseudo-labels (:func:`cosmos_iterations`) :func:`lemma_rows` per client
  and iteration and :func:`assumption51_over_time`, Assumption 5.1 re-measured on the clusters
  of the first round;
* the consistency regularizer's gradient (Section 4.1, Eq. 1) with and without the detach of the
  authors' code: :func:`consistency_gradient_checks`.

The contraction theorems' synthetic federation is :mod:`fedbook.studies.cosmos_synthetic`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from fedlib.algorithms.cosmos import COSMOS, cosmos_history
from fedlib.algorithms.fedmd import cached_labels, grouping
from fedlib.clustering import b0_for_clusters, candidate_thresholds, cluster_diameters, greedy_b0
from fedlib.distill import (augment, consistency_loss, distillation_objective, l1_distances, lemma52, lemma52_chain,
                            margin_profile_bound)
from fedlib.federation import Federation
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.models import build_model
from fedlib.rng import derive_seed, torch_generator
from fedlib.run import run_federated
from fedlib.validation import check_int

TOL = 1e-12
"""The round-off allowance of the float64 comparisons."""

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


def _flat(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.flatten() for g in grads])


def consistency_gradient_checks(rng: np.random.Generator, seed: int, trials: int) -> dict:
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
        loss = consistency_loss(z_aug, z).sum()
        dz_aug, dz = torch.autograd.grad(loss, [z_aug, z], retain_graph=True)
        err_logits = max(err_logits, float((dz - g_clean).abs().max()), float((dz_aug - g_aug_formula).abs().max()))
        loss_d = consistency_loss(z_aug, z, detach_target=True).sum()
        dz_aug_d, dz_d = torch.autograd.grad(loss_d, [z_aug, z], retain_graph=True, allow_unused=True)
        clean_grad_is_none &= dz_d is None
        err_none = max(err_none, float((dz_aug_d - g_aug_formula).abs().max()))
        G_nd = torch.autograd.grad(loss, params, retain_graph=True)
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
            obj = distillation_objective(model, x, targets, torch.Generator().manual_seed(draw_seed), lam=lam,
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


__all__ = ["GRADIENT_BATCH", "GRADIENT_DRAW", "GRADIENT_MODEL", "TOL", "algorithm1_checks", "assumption51_over_time",
           "b0_search_checks", "cluster_count", "consistency_gradient_checks", "cosmos_iterations", "greedy_rule_violations",
           "lemma52_random_checks", "lemma_rows", "monotonicity_search", "off_diagonal", "random_pseudo_labels",
           "reference_cluster_count"]
