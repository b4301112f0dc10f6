r"""The checks of HDC-FL's derivations on seeded random instances (the chapter *HDC-FL:
head-derived clustering, checked*, ``notebooks/hdcfl_derivations.py``).

From HDC-FL (Dehghanpour, Noori, Tanghatari, Omidvar and Rabiee, "From Classifier Heads to Encoder
Prototypes: Personalized Federated Learning with Head-Derived Clustering", arXiv:2610.30075),
Sections 3.2-3.5 and Appendix E.1. Each procedure compares what fedlib computes
(:mod:`fedlib.clustering`, :mod:`fedlib.algorithms.hdcfl`) with an independent computation of
the statement, and returns the worst error or the count of counterexamples; the chapter records
each in its check table, one section each:

1. :func:`descriptor_invariance`: the descriptor is unit-norm, is the formula
   :func:`descriptors_in_basis` in the basis :func:`fedlib.clustering.lowrank_basis`, and its
   Gram matrix does not depend on the basis (signs, rotations: :func:`random_orthogonal`);
2. :func:`membership_limits`: the soft membership on the simplex, its bounds as :math:`T \to 0`
   and :math:`T \to \infty`, and the two-group closed form;
3. :func:`one_group_identity`: one group and :math:`\lambda = 1` give FedAvg-SE's shared
   encoder bit for bit; :math:`\lambda = 0` gives the shared encoder for any grouping;
4. :class:`PlantedHeads`, :func:`planted_grouping`, :func:`planted_summary`: how well the
   rank-:math:`r` projection keeps a planted grouping (a measurement);
5. :func:`local_drift`: how far short local updates move the clients' encoders and features (a
   measurement);
6. :func:`refresh_invariants`: what a refresh may and may not change on the server.

The arrays are compared by :func:`fedlib.messages.same_arrays` (bit for bit) and
:func:`fedlib.messages.largest_difference`; :func:`snapshot` and :func:`arrays_kept` compare a
state with itself before a call. Every random draw comes
from a stream derived from the chapter's ``seed`` (:mod:`fedlib.rng`) under the keys below.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import sympy as sp
import torch
from scipy.special import expit
from scipy.stats import spearmanr
from sklearn.metrics import adjusted_rand_score, silhouette_score

from fedlib.algorithms.fedrep import PERSONAL, FedAvgSE
from fedlib.algorithms.hdcfl import (HDCConfig, HDCFL, cached_clients, personalized_encoder, refresh, refresh_history,
                                     shared_encoder, with_variant)
from fedlib.clustering import (SilhouetteKMeans, descriptor_drift, hard_membership, head_descriptors, lowrank_basis,
                               membership_entropy, soft_membership)
from fedbook.checks import CheckTable
from fedbook.intervals import Interval, mean_interval, paired_interval
from fedbook.page import sign_word
from fedbook.tables import format_small
from fedlib.data import load_uci_digits
from fedlib.federation import Federation, make_federation
from fedlib.loop import LoopConfig
from fedlib.results import RunResult
from fedlib.messages import State, largest_difference, same_arrays
from fedlib.models import HEAD_PREFIX, build_model
from fedlib.protocol import MODEL
from fedlib.rng import derive_seed, numpy_rng, torch_generator
from fedlib.run import run_federated
from fedlib.training import TrainConfig, local_train
from fedlib.validation import check_int, check_real

F64 = torch.float64

DESCRIPTOR_SIZES, DESCRIPTOR_HEADS = 101, 102
"""Stream keys of :func:`descriptor_invariance`: the sizes of every instance, and trial ``t``'s heads (``(seed, 102, t)``)."""
MEMBERSHIP_POINTS = 103
"""Stream key of :func:`membership_limits`: the random descriptors and centroids."""
PLANTED_DRAW, PLANTED_KMEANS = 104, 105
"""Stream keys of :func:`planted_grouping`: an instance's heads, and its k-means initializations."""
LOCAL_STEPS = 106
"""Stream key of :func:`local_drift`: client ``k``'s batches at ``s`` local steps (``(seed, 106, s, k)``)."""
REFRESH_SETTINGS = 107
"""Stream key of :func:`refresh_invariants`: the random refresh settings and mixing weights."""
MAX_RANK = 10
"""The largest descriptor rank :func:`refresh_invariants` draws."""

PLANTED_FAMILIES = ("few class directions", "all class directions")
"""How the planted group heads differ (:meth:`PlantedHeads.draw`): in a few shared class directions, or in all of them."""


# ------------------------------------------------------------------------------------------------
# Array comparisons
# ------------------------------------------------------------------------------------------------


def snapshot(state: State) -> dict[str, torch.Tensor]:
    """Copies of a state's arrays, to compare with the state after a call (:func:`arrays_kept`)."""
    return {name: t.clone() for name, t in state.arrays.items()}


def arrays_kept(before: Mapping[str, torch.Tensor], state: State, prefix: str = "") -> bool:
    """Whether ``state`` holds exactly the arrays of a :func:`snapshot` ``before`` whose names
    start with ``prefix``: the same names under the prefix, bit for bit the same arrays
    (:func:`fedlib.messages.same_arrays`).

    Examples
    --------
    >>> s = State({"cache/w": torch.ones(2), "model/w": torch.zeros(1)})
    >>> before = snapshot(s)
    >>> after = State({**s.arrays, "model/w": torch.ones(1)})
    >>> arrays_kept(before, after, "cache/"), arrays_kept(before, after)
    (True, False)
    """
    names = sorted(n for n in before if n.startswith(prefix))
    now = sorted(n for n in state.arrays if n.startswith(prefix))
    return names == now and same_arrays({n: before[n] for n in names}, {n: state.arrays[n] for n in names})


# ------------------------------------------------------------------------------------------------
# 1. The descriptor and its basis
# ------------------------------------------------------------------------------------------------


def descriptors_in_basis(heads: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    r"""The descriptors :math:`z_k = \operatorname{vec}(U^\top H_k) / \lVert U^\top H_k \rVert_F`
    in a given basis, written out independently of :func:`fedlib.clustering.head_descriptors`.

    Parameters
    ----------
    heads : Tensor of shape (n, C, d)
    basis : Tensor of shape (C, r)
        ``U``, e.g. :func:`fedlib.clustering.lowrank_basis`, or it rotated within its span.

    Returns
    -------
    Tensor of shape (n, r d)

    Examples
    --------
    >>> h = torch.tensor([[[3.0], [4.0]]])  # one head, C = 2, d = 1
    >>> descriptors_in_basis(h, torch.eye(2)).tolist(), descriptors_in_basis(h, torch.eye(2)[:, :1]).tolist()
    ([[0.6000000238418579, 0.800000011920929]], [[1.0]])
    """
    if heads.ndim != 3 or basis.ndim != 2 or basis.shape[0] != heads.shape[1]:
        raise ValueError(f"heads of shape (n, C, d) need a basis of shape (C, r); got heads {tuple(heads.shape)} "
                         f"and basis {tuple(basis.shape)}")
    z = torch.einsum("cr,ncd->nrd", basis, heads).reshape(len(heads), -1)
    return z / z.norm(dim=1, keepdim=True)


def random_orthogonal(r: int, generator: torch.Generator) -> torch.Tensor:
    """A random orthogonal matrix of shape (r, r), float64: the Q of a QR decomposition of a
    standard normal matrix drawn from ``generator``.

    Examples
    --------
    >>> q = random_orthogonal(3, torch.Generator().manual_seed(0))
    >>> bool(torch.allclose(q @ q.T, torch.eye(3, dtype=torch.float64)))
    True
    """
    r = check_int("r", r, low=1)
    q, _ = torch.linalg.qr(torch.randn(r, r, generator=generator, dtype=F64))
    return q


DESCRIPTOR_ERRORS = ("unit", "formula", "sign", "rotation", "drift", "full")
"""The worst errors :func:`descriptor_invariance` returns, by name."""


def descriptor_invariance(trials: int, seed: int) -> tuple[dict[str, float], list[float]]:
    r"""Section 1's checks on ``trials`` random head sets: ``n`` in 2..8 clients, ``C`` in 2..12
    classes (at most the rank ``n (d + 1)`` of the heads side by side), ``d`` in 1..5 features
    (plus the bias column), rank ``r`` in ``1..C``; each head scaled by a random factor in
    [0.2, 1.2).

    Returns
    -------
    errors : dict of str to float
        The worst absolute error over the trials (:data:`DESCRIPTOR_ERRORS`): ``unit``,
        :math:`\lVert z_k\rVert - 1`; ``formula``, the Gram matrix of
        :func:`fedlib.clustering.head_descriptors` against that of :func:`descriptors_in_basis` in
        a basis found independently of the library: the top-``r`` eigenvectors of
        :math:`\sum_k H_k H_k^\top` (``numpy.linalg.eigh``), which span the top-``r`` left singular
        subspace of :math:`[H_1, \dots, H_n]` (Gram matrices, since that basis is fixed only up to
        signs and a rotation within the span);
        ``sign`` and ``rotation``, the Gram matrix after flipping the signs of the basis vectors
        and after rotating the basis within its span (:func:`random_orthogonal`); ``drift``,
        :func:`fedlib.clustering.descriptor_drift` between the two bases' Gram matrices;
        ``full``, the Gram matrix at :math:`r = C` against the raw heads'.
    moved : list of float
        Per trial with :math:`r > 1`, how far the rotation moves the descriptors themselves,
        :math:`\lVert Z_Q - Z\rVert_F / \lVert Z\rVert_F`.

    Raises
    ------
    ValueError
        ``trials`` that is not an integer >= 1.

    Examples
    --------
    >>> errors, moved = descriptor_invariance(3, seed=0)
    >>> max(errors.values()) < 1e-12, all(m > 0 for m in moved)
    (True, True)
    """
    check_int("trials", trials, low=1)
    rng = numpy_rng(seed, DESCRIPTOR_SIZES)
    err = dict.fromkeys(DESCRIPTOR_ERRORS, 0.0)
    moved = []
    for t in range(trials):
        n, d = int(rng.integers(2, 9)), int(rng.integers(1, 6))
        C = int(rng.integers(2, min(13, n * (d + 1) + 1)))  # r = C must be a rank n heads side by side can have
        r = int(rng.integers(1, C + 1))
        g = torch_generator(seed, DESCRIPTOR_HEADS, t)
        heads = torch.randn(n, C, d + 1, generator=g, dtype=F64) * torch.rand(n, 1, 1, generator=g, dtype=F64).add(0.2)
        z = head_descriptors(heads, rank=r)
        u = lowrank_basis(heads, r)
        gram = z @ z.T
        err["unit"] = max(err["unit"], float((z.norm(dim=1) - 1).abs().max()))
        h = heads.numpy()
        _, eigvec = np.linalg.eigh(np.einsum("kcd,ked->ce", h, h))  # (C, C), ascending eigenvalues
        z_eig = descriptors_in_basis(heads, torch.from_numpy(np.ascontiguousarray(eigvec[:, ::-1][:, :r])))
        err["formula"] = max(err["formula"], float((z_eig @ z_eig.T - gram).abs().max()))
        signs = torch.where(torch.rand(u.shape[1], generator=g) < 0.5, -1.0, 1.0).to(F64)
        z_sign = descriptors_in_basis(heads, u * signs)
        err["sign"] = max(err["sign"], float((z_sign @ z_sign.T - gram).abs().max()))
        z_rot = descriptors_in_basis(heads, u @ random_orthogonal(u.shape[1], g))
        err["rotation"] = max(err["rotation"], float((z_rot @ z_rot.T - gram).abs().max()))
        err["drift"] = max(err["drift"], descriptor_drift(gram.numpy(), (z_rot @ z_rot.T).numpy()))
        if u.shape[1] > 1:
            moved.append(float((z_rot - z).norm() / z.norm()))
        z_full, z_raw = head_descriptors(heads, rank=C), head_descriptors(heads, rank=C, kind="raw")
        err["full"] = max(err["full"], float((z_full @ z_full.T - z_raw @ z_raw.T).abs().max()))
    return err, moved


# ------------------------------------------------------------------------------------------------
# 2. Soft membership and its limits
# ------------------------------------------------------------------------------------------------


def membership_limits(trials: int, temperatures: Sequence[float], seed: int) -> tuple[pd.DataFrame, dict]:
    r"""Section 2's checks of :func:`fedlib.clustering.soft_membership` on ``trials`` random
    instances (``n`` in 3..29 descriptors of dimension ``p`` in 2..11, ``k`` in 2..6 centroids,
    standard normal), each at every temperature.

    With :math:`g_k` the gap between row ``k``'s two largest cosine similarities, the bounds
    checked are :math:`\max_j \lvert m_{kj} - \text{hard}_{kj}\rvert \le (k - 1) e^{-g_k/T}`
    (the :math:`T \to 0` limit, :func:`fedlib.clustering.hard_membership`) and
    :math:`\max_j \lvert m_{kj} - 1/k\rvert \le (e^{2/T} - 1)/k` (the :math:`T \to \infty`
    limit), each up to 1e-12.

    Returns
    -------
    table : DataFrame
        Indexed by ``T``: the largest deviation from the hard and from the uniform membership,
        and the mean over instances of the membership entropy over :math:`\log k`.
    summary : dict
        ``n_instances``; ``n_rows`` (membership rows checked: rows of every instance × the
        temperatures); ``simplex_err`` (the largest :math:`\lvert\sum_j m_{kj} - 1\rvert`);
        ``min_entry``; ``cold_viol`` and ``hot_viol`` (rows breaking the :math:`T \to 0` and
        :math:`T \to \infty` bounds); ``closed_err`` (the largest error of the two-group closed
        form :math:`m_1 = 1/(1 + e^{(s_2 - s_1)/T})` on the instances with ``k = 2``).

    Raises
    ------
    ValueError
        ``trials`` that is not an integer >= 1, or a temperature that is not a finite number > 0.

    Examples
    --------
    >>> table, summary = membership_limits(4, [1e-3, 1e3], seed=0)
    >>> summary["cold_viol"] + summary["hot_viol"], summary["simplex_err"] < 1e-12, list(table.index)
    (0, True, [0.001, 1000.0])
    """
    check_int("trials", trials, low=1)
    for temp in temperatures:
        check_real("temperature", temp, low=0, low_open=True)
    rng = numpy_rng(seed, MEMBERSHIP_POINTS)
    rows, simplex_err, min_entry, cold_viol, hot_viol, closed_err = [], 0.0, 1.0, 0, 0, 0.0
    instances = []
    for t in range(trials):
        n, p, k = int(rng.integers(3, 30)), int(rng.integers(2, 12)), int(rng.integers(2, 7))
        instances.append((rng.normal(size=(n, p)), rng.normal(size=(k, p))))
    for temp in temperatures:
        dev_hard, dev_uniform, entropy_ratio = 0.0, 0.0, []
        for x, c in instances:
            k = len(c)
            m = soft_membership(x, c, temp)
            hard = hard_membership(x, c)
            cos = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T
            top2 = np.sort(cos, axis=1)[:, -2:]
            g_rows = top2[:, 1] - top2[:, 0]
            simplex_err = max(simplex_err, float(np.abs(m.sum(axis=1) - 1).max()))
            min_entry = min(min_entry, float(m.min()))
            d_hard = np.abs(m - hard).max(axis=1)
            cold_viol += int((d_hard > (k - 1) * np.exp(-g_rows / temp) + 1e-12).sum())
            d_unif = np.abs(m - 1 / k).max(axis=1)
            hot_viol += int((d_unif > math.expm1(min(2 / temp, 700)) / k + 1e-12).sum())
            dev_hard, dev_uniform = max(dev_hard, float(d_hard.max())), max(dev_uniform, float(d_unif.max()))
            entropy_ratio.append(membership_entropy(m) / math.log(k))
            if k == 2:  # the two-group closed form, numerically
                closed = expit((cos[:, 0] - cos[:, 1]) / temp)  # 1 / (1 + exp((s_2 - s_1) / T)), without overflow
                closed_err = max(closed_err, float(np.abs(m[:, 0] - closed).max()))
        rows.append({"T": temp, "max |m − hard|": dev_hard, "max |m − 1/k|": dev_uniform,
                     "mean entropy / log k": float(np.mean(entropy_ratio))})
    summary = {"n_instances": len(instances), "n_rows": sum(len(x) for x, _ in instances) * len(temperatures),
               "simplex_err": simplex_err, "min_entry": min_entry, "cold_viol": cold_viol, "hot_viol": hot_viol,
               "closed_err": closed_err}
    return pd.DataFrame(rows).set_index("T"), summary


# ------------------------------------------------------------------------------------------------
# 3. One group and λ = 1 is FedAvg-SE's shared encoder
# ------------------------------------------------------------------------------------------------


@dataclass
class OneGroupIdentity:
    """What :func:`one_group_identity` measured.

    Attributes
    ----------
    run, fedavg_se : RunResult
        HDC-FL with one group, :math:`\\lambda = 1` and a refresh every round; FedAvg-SE.
    table : DataFrame
        Indexed by ``comparison``: the largest absolute difference and how many clients are
        bit-equal, per comparison of encoders.
    n_clients : int
        The clients cached at the end of ``run``.
    shared_diff : float
        HDC-FL's shared encoder against FedAvg-SE's.
    identity_diff, identity_bits : float, int
        The personalized encoders (one group, :math:`\\lambda = 1`) against FedAvg-SE's shared
        encoder: the largest difference, and how many are bit-equal.
    k_grouped : int
        The groups of the k-means regrouping of the same cache.
    zero_diff : float
        The personalized encoders with :math:`\\lambda = 0` on those groups against the shared
        encoder.
    rel_moves : list of float
        Per client, its personalized encoder with :math:`\\lambda = 1` on those groups minus the
        shared encoder, in norm, over the shared encoder's norm.
    participation : float
        The share of clients sampled per round in the contrast run.
    partial_diff : float
        That run's personalized encoders (one group, :math:`\\lambda = 1`) against its shared encoder.
    same_eval : bool
        Whether the loop's per-client evaluation of ``run`` equals FedAvg-SE's.
    """

    run: RunResult
    fedavg_se: RunResult
    table: pd.DataFrame
    n_clients: int
    shared_diff: float
    identity_diff: float
    identity_bits: int
    k_grouped: int
    zero_diff: float
    rel_moves: list
    participation: float
    partial_diff: float
    same_eval: bool


def one_group_identity(fed: Federation, model_fn: Callable[..., torch.nn.Module], train: TrainConfig, rounds: int,
                       seed: int, *, participation: float = 0.5, k_max: int = 8, rank: int = 8) -> OneGroupIdentity:
    r"""Section 3: with one group (:math:`k_{\min} = k_{\max} = 1`), :math:`\lambda = 1`, full
    participation and a refresh every round, every client's personalized encoder is FedAvg-SE's
    shared encoder; with :math:`\lambda = 0` it is the shared encoder for any grouping.

    Runs HDC-FL (one group) and FedAvg-SE on ``fed`` for ``rounds`` rounds with the same
    ``seed``; regroups the HDC-FL cache by k-means with ``k`` in ``2..k_max``
    (:func:`fedlib.algorithms.hdcfl.with_variant`) for :math:`\lambda = 0` and, for contrast,
    :math:`\lambda = 1`; and runs HDC-FL (one group) again with a share ``participation`` of the
    clients per round, whose cache keeps stale encoders (another contrast). Every refresh
    describes the heads at rank ``rank`` (:class:`fedlib.algorithms.hdcfl.HDCConfig`'s default:
    8; at most the model's classes).

    Returns
    -------
    OneGroupIdentity

    Raises
    ------
    ValueError
        ``rounds`` that is not an integer >= 1, ``participation`` outside (0, 1], ``k_max`` < 2.
    """
    rounds = check_int("rounds", rounds, low=1)
    check_real("participation", participation, low=0, high=1, low_open=True)
    check_int("k_max", k_max, low=2)
    one_group = HDCConfig(rank=rank, k_min=1, k_max=1, refresh_every=1, lam=1.0, max_activation_round=1)
    loop = LoopConfig(rounds=rounds, seed=seed)
    run = run_federated(HDCFL(train=train, config=one_group), fed, model_fn, loop)
    se = run_federated(FedAvgSE(train=train), fed, model_fn, loop)
    shared, shared_se = shared_encoder(run.server), shared_encoder(se.server)
    clients = cached_clients(run.server)
    pers = {c: personalized_encoder(run.server, c, 1.0) for c in clients}
    # λ = 0 on a grouping with k >= 2 (the same cache, refreshed again by k-means on the descriptors)
    grouped = with_variant(run.server, rounds, HDCConfig(rank=rank, k_min=2, k_max=k_max), seed)
    k_grouped = int(refresh_history(grouped)["k"].iloc[-1])
    pers0 = {c: personalized_encoder(grouped, c, 0.0) for c in clients}
    pers1 = {c: personalized_encoder(grouped, c, 1.0) for c in clients}
    shared_norm = math.sqrt(sum(float(v.double().pow(2).sum()) for v in shared.values()))
    rel_k = [math.sqrt(sum(float((pers1[c][n].double() - shared[n].double()).pow(2).sum()) for n in shared)) / shared_norm
             for c in clients]
    # partial participation: stale cache entries enter the one-group prototype
    partial = run_federated(HDCFL(train=train, config=one_group), fed, model_fn,
                            LoopConfig(rounds=rounds, seed=seed, participation=participation, evaluate_last=False))
    shared_partial = shared_encoder(partial.server)
    diff_partial = max(largest_difference(personalized_encoder(partial.server, c, 1.0), shared_partial)
                       for c in cached_clients(partial.server))

    def versus(encoders, reference):
        return (max(largest_difference(encoders[c], reference) for c in clients),
                f"{sum(same_arrays(encoders[c], reference) for c in clients)} of {len(clients)}")

    rows = [
        ("HDC-FL's shared encoder vs FedAvg-SE's (the trajectory is intact)", largest_difference(shared, shared_se),
         f"{int(same_arrays(shared, shared_se))} of 1"),
        ("personalized (k = 1, λ = 1) vs HDC-FL's shared encoder", *versus(pers, shared)),
        ("personalized (k = 1, λ = 1) vs FedAvg-SE's shared encoder", *versus(pers, shared_se)),
        (f"personalized (k = {k_grouped}, λ = 0) vs the shared encoder", *versus(pers0, shared)),
        (f"personalized (k = {k_grouped}, λ = 1) vs the shared encoder, for contrast", *versus(pers1, shared)),
        (f"personalized (k = 1, λ = 1) vs shared, participation {participation}, for contrast", diff_partial, "—"),
    ]
    table = pd.DataFrame(rows, columns=["comparison", "max abs difference", "bit-equal clients"]).set_index("comparison")
    return OneGroupIdentity(
        run=run, fedavg_se=se, table=table, n_clients=len(clients), shared_diff=largest_difference(shared, shared_se),
        identity_diff=max(largest_difference(pers[c], shared_se) for c in clients),
        identity_bits=sum(same_arrays(pers[c], shared_se) for c in clients), k_grouped=k_grouped,
        zero_diff=max(largest_difference(pers0[c], shared) for c in clients), rel_moves=rel_k,
        participation=participation, partial_diff=diff_partial, same_eval=run.per_client().equals(se.per_client()))


# ------------------------------------------------------------------------------------------------
# 4. Planted groupings
# ------------------------------------------------------------------------------------------------


def _rms(a: np.ndarray, level: float) -> np.ndarray:
    """``a`` rescaled to the root-mean-square entry ``level``."""
    return a * level / np.sqrt(np.mean(a**2))


@dataclass(frozen=True)
class PlantedHeads:
    r"""Synthetic heads with a planted grouping: ``G`` groups of ``m`` clients, client ``k`` of
    group ``g(k)`` with the head

    .. math:: H_k = M + A_{g(k)} + \sigma E_k \in \mathbb R^{C \times d_1},

    a common component :math:`M` of class rank ``common_rank`` and root-mean-square entry
    ``common`` (what every client learns), a group head :math:`A_g` of root-mean-square entry
    ``signal`` (the unit of :math:`\sigma`) and noise :math:`E_k` with independent standard
    normal entries.

    Raises
    ------
    ValueError
        A size that is not an integer >= 1, a rank above ``C``, or a level that is not a finite
        number > 0.
    """

    G: int = 4
    m: int = 5
    C: int = 20
    d1: int = 17
    common: float = 3.0
    signal: float = 1.0
    common_rank: int = 4
    sig_rank: int = 3

    def __post_init__(self) -> None:
        for name in ("G", "m", "C", "d1", "common_rank", "sig_rank"):
            check_int(name, getattr(self, name), low=1)
        check_int("common_rank", self.common_rank, high=self.C)
        check_int("sig_rank", self.sig_rank, high=self.C)
        for name in ("common", "signal"):
            check_real(name, getattr(self, name), low=0, low_open=True)

    def draw(self, rng: np.random.Generator, noise: float, family: str) -> tuple[np.ndarray, np.ndarray]:
        """One instance: the heads of shape ``(G m, C, d1)`` and the planted labels of shape ``(G m,)``.

        ``family`` (:data:`PLANTED_FAMILIES`): the group heads differ in a ``sig_rank``-dimensional
        subspace of class directions shared by the groups (``"few class directions"``), or in all
        ``C`` of them.

        Examples
        --------
        >>> heads, labels = PlantedHeads(G=2, m=3, C=6, d1=4).draw(np.random.default_rng(0), 0.1, "few class directions")
        >>> heads.shape, labels.tolist()
        ((6, 6, 4), [0, 0, 0, 1, 1, 1])
        """
        if family not in PLANTED_FAMILIES:
            raise ValueError(f"unknown family {family!r}; valid: {', '.join(PLANTED_FAMILIES)}")
        check_real("noise", noise, low=0)
        labels = np.repeat(np.arange(self.G), self.m)
        M = _rms(rng.normal(size=(self.C, self.common_rank)) @ rng.normal(size=(self.common_rank, self.d1)), self.common)
        basis = np.linalg.qr(rng.normal(size=(self.C, self.sig_rank)))[0]
        A = [_rms(basis @ rng.normal(size=(self.sig_rank, self.d1)) if family == PLANTED_FAMILIES[0]
                  else rng.normal(size=(self.C, self.d1)), self.signal) for _ in range(self.G)]
        heads = np.stack([M + A[labels[k]] + noise * rng.normal(size=(self.C, self.d1)) for k in range(self.G * self.m)])
        return heads, labels


def planted_grouping(spec: PlantedHeads, noises: Sequence[float], trials: int, seed: int, *, rank: int, k_min: int,
                     k_max: int) -> pd.DataFrame:
    """Section 4's measurement: per family (:data:`PLANTED_FAMILIES`), noise level and trial, one
    instance of ``spec``, described raw and at rank ``rank``
    (:func:`fedlib.clustering.head_descriptors`); in each descriptor space the silhouette
    (scikit-learn's) of the planted grouping, and the ``k`` that
    :class:`fedlib.clustering.SilhouetteKMeans` chooses in ``k_min..k_max`` with its adjusted
    Rand index against the planted labels.

    Returns
    -------
    DataFrame
        One row per instance: ``signal`` (the family), ``σ``, ``instance``, and per descriptor
        ``kind`` in ``raw``, ``lowrank``: ``silhouette <kind>``, ``k <kind>``, ``ARI <kind>``.

    Raises
    ------
    ValueError
        ``trials`` that is not an integer >= 1 (and as the descriptors and the k-means do).

    Examples
    --------
    >>> t = planted_grouping(PlantedHeads(G=2, m=3, C=6, d1=4), [0.1], 1, seed=0, rank=3, k_min=2, k_max=4)
    >>> len(t), t["ARI lowrank"].tolist()
    (2, [1.0, 1.0])
    """
    check_int("trials", trials, low=1)
    rows = []
    for (f, family), noise, t in itertools.product(enumerate(PLANTED_FAMILIES), noises, range(trials)):
        rng = numpy_rng(seed, PLANTED_DRAW, f, int(round(1000 * noise)), t)
        heads, labels = spec.draw(rng, noise, family)
        row = {"signal": family, "σ": noise, "instance": t}
        for kind in ("raw", "lowrank"):
            z = head_descriptors(torch.tensor(heads), rank=rank, kind=kind).numpy()
            km = SilhouetteKMeans(k_min, k_max, seed=derive_seed(seed, PLANTED_KMEANS, t) % 2**32).fit(z)
            row[f"silhouette {kind}"] = float(silhouette_score(z, labels))
            row[f"k {kind}"] = int(km.k_)
            row[f"ARI {kind}"] = float(adjusted_rand_score(labels, km.labels_))
        rows.append(row)
    return pd.DataFrame(rows)


PLANTED_COLUMNS = {"silhouette raw": ("silhouette raw", "mean"), "silhouette low-rank": ("silhouette lowrank", "mean"),
                   "k raw": ("k raw", "mean"), "k low-rank": ("k lowrank", "mean"),
                   "ARI raw": ("ARI raw", "mean"), "ARI low-rank": ("ARI lowrank", "mean"),
                   "min ARI low-rank": ("ARI lowrank", "min")}
"""The columns of :func:`planted_summary`: (column of :func:`planted_grouping`, aggregation)."""


def planted_summary(planted: pd.DataFrame) -> pd.DataFrame:
    """:func:`planted_grouping`'s instances per family and noise level (in their order): the
    means of the silhouettes, the chosen ``k`` and the ARIs, and the smallest low-rank ARI
    (:data:`PLANTED_COLUMNS`).

    Examples
    --------
    >>> t = planted_grouping(PlantedHeads(G=2, m=3, C=6, d1=4), [0.1], 2, seed=0, rank=3, k_min=2, k_max=4)
    >>> planted_summary(t).index.tolist()
    [('few class directions', 0.1), ('all class directions', 0.1)]
    """
    return planted.groupby(["signal", "σ"], sort=False).agg(**PLANTED_COLUMNS)


# ------------------------------------------------------------------------------------------------
# 5. Local steps and the drift of the clients' coordinates
# ------------------------------------------------------------------------------------------------


def _encoder_vector(model: torch.nn.Module) -> torch.Tensor:
    """The model's encoder (every ``state_dict`` entry but the head) as one flat vector."""
    return torch.cat([v.flatten() for k, v in model.state_dict().items() if not k.startswith(HEAD_PREFIX)])


def head_compatibility_rho(heads: torch.Tensor, logits: torch.Tensor) -> float:
    r"""How far head similarity tracks encoder compatibility, over the pairs of clients: the
    Spearman correlation between the pairwise cosine of the flattened heads ``heads`` (shape
    ``(n, C, d + 1)``, ``[W, b]``) and the pairwise *compatibility* of the encoders,

    .. math:: c_{kl} = -\tfrac12\Big(\frac{\lVert h_k(f_l) - h_k(f_k)\rVert}{\lVert h_k(f_k)\rVert}
              + \frac{\lVert h_l(f_k) - h_l(f_l)\rVert}{\lVert h_l(f_l)\rVert}\Big),

    the (negated) relative change of a client's logits on a probe when its encoder is swapped for
    the other's, with ``logits[k, l]`` = :math:`h_k(f_l(x))` (shape ``(n, n, m, C)``: client ``k``'s
    head on client ``l``'s features of the ``m`` probe inputs). NaN where either is constant.

    Examples
    --------
    Three clients: the pair with the closest heads changes its logits least (ρ = 1); the same
    logit changes with the heads reordered so that the most changed pair is the closest (ρ = −1):

    >>> own = torch.ones(3, 1, 1)
    >>> change = torch.tensor([[0.0, 0.1, 0.9], [0.1, 0.0, 0.5], [0.9, 0.5, 0.0]])
    >>> logits = own[:, None] + change[:, :, None, None]  # logits[k, l] = h_k(f_l)
    >>> heads = torch.tensor([[[1.0, 0.0]], [[1.0, 0.2]], [[0.0, 1.0]]])  # cosines: (0, 1) 0.98, (1, 2) 0.20, (0, 2) 0
    >>> head_compatibility_rho(heads, logits)
    1.0
    >>> head_compatibility_rho(torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 0.2]]]), logits)  # the far pair the closest
    -1.0
    """
    n = heads.shape[0]
    flat = heads.reshape(n, -1).double()
    unit = flat / flat.norm(dim=1, keepdim=True)
    cos = unit @ unit.T
    iu = torch.triu_indices(n, n, 1)
    sim = cos[iu[0], iu[1]].numpy()
    compat = _compatibilities(logits)
    if np.ptp(sim) == 0 or np.ptp(compat) == 0:
        return math.nan
    return float(spearmanr(sim, compat).statistic)


def _compatibilities(logits: torch.Tensor) -> np.ndarray:
    """The pairwise compatibilities :math:`c_{kl}` of :func:`head_compatibility_rho`, over the
    pairs ``k < l`` in ``triu_indices`` order."""
    n = logits.shape[0]
    own = torch.stack([logits[k, k] for k in range(n)]).double()  # (n, m, C)
    rel = torch.stack([torch.stack([(logits[k, l].double() - own[k]).norm() / own[k].norm() for l in range(n)])
                       for k in range(n)])  # (n, n): client k's head on client l's encoder
    iu = torch.triu_indices(n, n, 1)
    return (-(rel + rel.T) / 2)[iu[0], iu[1]].numpy()


PROBE_FOLDS = 10
"""The disjoint parts of the probe whose spread measures the probe's standard error of a
compatibility (:func:`compatibility_reliability`)."""

MIN_RELIABILITY = 0.5
r"""The regime of section 5's first tracking check, declared with its measurement: the
compatibilities being ranked must differ by more than the probe's noise, the share of their
spread over the pairs that is not the probe's (:func:`compatibility_reliability`, mean over the
seeds at the longest short update) at least this. A correlation with a quantity of reliability
:math:`r` is attenuated by :math:`\sqrt r` (Spearman's correction); at 0.5 a perfect tracking
could read no higher than 0.71, and below it half the ranking or more is the probe's noise. Below
it the check is untestable in this setting."""


def compatibility_reliability(logits: torch.Tensor, folds: int = PROBE_FOLDS) -> float:
    r"""How far the pairwise compatibilities of :func:`head_compatibility_rho` differ by more
    than the probe's noise: :math:`1 - \overline{\mathrm{se}^2} / \mathrm{var}(c)`, with
    :math:`\mathrm{var}(c)` the variance of the compatibilities over the pairs and
    :math:`\mathrm{se}_{kl}` the probe's standard error of :math:`c_{kl}`: the standard deviation
    of :math:`c_{kl}` computed on ``folds`` disjoint parts of the probe (``logits``' third axis,
    in order), over :math:`\sqrt{\text{folds}}`. 1: the ranking is the encoders'; 0 or below:
    the probe's noise alone spreads the compatibilities as much as they spread. NaN where the
    compatibilities are all equal.

    Examples
    --------
    Three clients whose logit changes differ by pair and are the same on every probe input are
    reliable; the same changes drowned by a per-input noise are not:

    >>> g = torch.Generator().manual_seed(0)
    >>> change = torch.tensor([[0.0, 0.1, 0.9], [0.1, 0.0, 0.5], [0.9, 0.5, 0.0]])
    >>> logits = 1 + change[:, :, None, None] * torch.ones(3, 3, 40, 2)
    >>> compatibility_reliability(logits, folds=4)
    1.0
    >>> noisy = 1 + change[:, :, None, None] * torch.randn(3, 3, 40, 2, generator=g).abs() * 3
    >>> bool(compatibility_reliability(noisy, folds=4) < compatibility_reliability(logits, folds=4))
    True
    """
    check_int("probe folds", folds, low=2)
    m = logits.shape[2]
    if m < folds:
        raise ValueError(f"the probe has {m} inputs, fewer than the {folds} folds asked for")
    compat = _compatibilities(logits)
    var = float(np.var(compat, ddof=1)) if len(compat) > 1 else 0.0
    if var == 0:
        return math.nan
    parts = np.stack([_compatibilities(logits[:, :, idx]) for idx in torch.arange(m).tensor_split(folds)])
    se2 = np.var(parts, axis=0, ddof=1) / folds
    return float(1 - se2.mean() / var)


def local_drift(warm: RunResult, fed: Federation, model_fn: Callable[..., torch.nn.Module], train: TrainConfig,
                steps: Sequence[int], seed: int) -> pd.DataFrame:
    r"""Section 5's measurement: from the common point of a FedAvg-SE run ``warm`` (its shared
    encoder), each client trains its encoder and its own head (its state in ``warm``) locally
    for ``s`` steps of ``train``'s batch size, learning rate and momentum, for each ``s`` of
    ``steps``; the probe is the global test set.

    Returns
    -------
    DataFrame
        Indexed by ``local steps s``: (a) the mean pairwise cosine of the clients' encoder changes
        :math:`\Delta\theta_k`; (b) their mean size :math:`\lVert\Delta\theta_k\rVert / \lVert\theta_0\rVert`;
        (c) the mean relative movement of the probe's penultimate features,
        :math:`\lVert f_k(x) - f_0(x)\rVert / \lVert f_0(x)\rVert`; (d) the mean share of the
        probe on which a client's trained head predicts the same class on the common features
        :math:`f_0(x)` as on its own :math:`f_k(x)`; (e) how far head similarity tracks encoder
        compatibility (:func:`head_compatibility_rho` of the trained heads, on the probe); (f) how
        far the compatibilities being ranked differ by more than the probe's noise
        (:func:`compatibility_reliability`).

    Raises
    ------
    ValueError
        A step count that is not an integer >= 1.
    """
    for s in steps:
        check_int("local steps", s, low=1)
    common = warm.server.with_prefix(MODEL)  # the shared body (and the initial head, replaced below)
    probe = fed.global_test.x
    base = model_fn(seed=seed)
    base.load_state_dict(common)
    base.eval()
    with torch.no_grad():
        f0 = base.embed(probe)
    theta0 = _encoder_vector(base)
    rows = []
    for s in steps:
        deltas, moves, agree, heads, feats, models = [], [], [], [], [], []
        for k, client in enumerate(fed.clients):
            model = model_fn(seed=seed)
            model.load_state_dict({**common, **warm.client_states[k].with_prefix(PERSONAL)})  # the client's own head
            cfg = TrainConfig(steps=s, batch_size=train.batch_size, lr=train.lr, momentum=train.momentum)
            local_train(model, client.train.x, client.train.y, cfg, torch_generator(seed, LOCAL_STEPS, s, k))
            with torch.no_grad():
                fk = model.embed(probe)
                agree.append(float((model.head(fk).argmax(1) == model.head(f0).argmax(1)).double().mean()))
            deltas.append(_encoder_vector(model) - theta0)
            moves.append(float((fk - f0).norm() / f0.norm()))
            heads.append(torch.cat([model.head.weight.detach(), model.head.bias.detach()[:, None]], dim=1))
            feats.append(fk)
            models.append(model)
        with torch.no_grad():
            logits = torch.stack([torch.stack([m.head(f) for f in feats]) for m in models])  # [k, l]: head k on features l
        D = torch.stack(deltas)
        unit = D / D.norm(dim=1, keepdim=True)
        iu = torch.triu_indices(len(D), len(D), 1)
        rows.append({"local steps s": s, "(a) mean pairwise cosine of Δθ": float((unit @ unit.T)[iu[0], iu[1]].mean()),
                     "(b) ‖Δθ‖ / ‖θ₀‖": float((D.norm(dim=1) / theta0.norm()).mean()),
                     "(c) feature movement": float(np.mean(moves)), "(d) same prediction on f₀": float(np.mean(agree)),
                     "(e) ρ(head cosine, compatibility)": head_compatibility_rho(torch.stack(heads), logits),
                     "(f) reliability of compatibility": compatibility_reliability(logits)})
    return pd.DataFrame(rows).set_index("local steps s")


# ------------------------------------------------------------------------------------------------
# 6. What a refresh changes
# ------------------------------------------------------------------------------------------------


def refresh_invariants(server: State, trials: int, first_round: int, seed: int) -> dict:
    r"""Section 6's checks: ``trials`` refreshes (:func:`fedlib.algorithms.hdcfl.refresh`) of
    ``server``'s cache, trial ``t`` at round ``first_round + t`` under random settings (rank
    from 1 to :data:`MAX_RANK`, raw or low-rank descriptor, :math:`k_{\min}` in 2..3, :math:`k_{\max}` in
    :math:`k_{\min}..12`, k-means or random groups, soft or hard membership, :math:`T` log-uniform
    in [0.01, 10]); after each, every cached client's personalized encoder for a random
    :math:`\lambda`, and the next round's training message.

    Returns
    -------
    dict
        ``n_cached`` (the cached clients); ``ks`` (the chosen ``k`` per trial); ``k_viol`` (how
        often ``k`` fell outside :math:`[k_{\min}, \min(k_{\max}, n - 1)]`); ``row_err`` (the
        largest :math:`\lvert\sum_j m_{kj} - 1\rvert`, ``inf`` on a negative entry);
        ``cache_kept`` (the cache, and the state given, unchanged by every refresh);
        ``model_kept`` (the shared encoder unchanged); ``nothing_written_back`` (computing the
        personalized encoders left the refreshed state unchanged); ``broadcast_kept`` (the
        training message is the shared encoder given).

    Raises
    ------
    ValueError
        ``trials`` that is not an integer >= 1, or a server whose cached heads have fewer than
        :data:`MAX_RANK` classes (the ranks drawn).
    """
    check_int("trials", trials, low=1)
    clients = cached_clients(server)
    n_classes = len(server.arrays[f"cache/{clients[0]}/head/bias"]) if clients else 0
    if n_classes < MAX_RANK:
        raise ValueError(f"refresh_invariants draws ranks up to {MAX_RANK}: the cached heads need at least {MAX_RANK} "
                         f"classes, got {n_classes} (cached clients: {clients})")
    rng = numpy_rng(seed, REFRESH_SETTINGS)
    n_cached = len(clients)
    k_viol = row_err = 0
    cache_kept = model_kept = nothing_written_back = broadcast_kept = True
    ks = []
    for t in range(trials):
        k_min = int(rng.integers(2, 4))
        config = HDCConfig(rank=int(rng.integers(1, MAX_RANK + 1)), descriptor=str(rng.choice(["lowrank", "raw"])),
                           k_min=k_min, k_max=int(rng.integers(k_min, 13)), grouping=str(rng.choice(["kmeans", "random"])),
                           membership=str(rng.choice(["soft", "hard"])), temperature=float(10 ** rng.uniform(-2, 1)),
                           max_activation_round=1)
        before = snapshot(server)
        state = refresh(server, first_round + t, config, seed)
        k = int(refresh_history(state)["k"].iloc[-1])
        ks.append(k)
        k_viol += int(not config.k_min <= k <= min(config.k_max, n_cached - 1))
        m = state.arrays["hdcfl/membership"].numpy()
        row_err = max(row_err, float(np.abs(m.sum(axis=1) - 1).max()) if m.min() >= 0 else math.inf)
        cache_kept &= arrays_kept(before, state, "cache/") and arrays_kept(before, server)
        model_kept &= arrays_kept(before, state, MODEL)
        after_refresh = snapshot(state)
        for c in cached_clients(state):
            personalized_encoder(state, c, float(rng.uniform()))
        nothing_written_back &= arrays_kept(after_refresh, state)
        sent = HDCFL(config=config).configure_train(state, first_round + 1 + t, [0])[0]
        broadcast_kept &= same_arrays(dict(sent.arrays), {name: before[name] for name in sent.arrays})
    return {"n_cached": n_cached, "ks": ks, "k_viol": k_viol, "row_err": row_err, "cache_kept": cache_kept,
            "model_kept": model_kept, "nothing_written_back": nothing_written_back, "broadcast_kept": broadcast_kept}


# ------------------------------------------------------------------------------------------------
# The chapter's sections: each check recorded in the chapter's table, and the numbers its prose quotes
# ------------------------------------------------------------------------------------------------

DESCRIPTOR_QUANTITIES = ("‖z_k‖ − 1", "library's Gram vs the formula's in an independent eigenbasis",
                         "Gram after flipping basis signs", "Gram after rotating the basis within its span",
                         "descriptor_drift between the two bases", "Gram at r = C vs Gram of the raw heads")
"""The rows of :func:`descriptor_section`'s table, one per error of :data:`DESCRIPTOR_ERRORS`."""
SHARE = 0.95
"""The weight on the closer of two centroids the membership section quotes (:func:`membership_section`)."""
ARI_STEP = 0.05
"""A difference in mean ARI smaller than this (about one client of twenty moved) is not read as a gain or a loss
(:func:`planted_section`)."""
COS_STEP = 0.05
"""A change of the mean pairwise cosine of the encoder changes smaller than this is read as no change (:func:`drift_section`)."""


def small_federation(n_clients: int, alpha: float, seed: int) -> tuple[Federation, Callable[..., torch.nn.Module]]:
    """The small federation of sections 3, 5 and 6: the UCI digits at 8 x 8 pixels under a
    Dirichlet label skew of ``alpha`` over ``n_clients`` clients (20 test images per class), and
    the builder of its small CNN."""
    digits = load_uci_digits(size=8)
    fed = make_federation(digits, n_clients=n_clients, partition="dirichlet", alpha=alpha, min_size=10,
                          global_test_per_class=20, seed=seed)
    return fed, functools.partial(build_model, "cnn", in_channels=1, n_classes=10, input_size=8, width=8, feature_dim=32)


def descriptor_section(checks: CheckTable, trials: int, seed: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Section 1: :func:`descriptor_invariance` on ``trials`` random head sets, its five checks
    added to ``checks``.

    Returns
    -------
    (DataFrame, dict)
        The worst error of each quantity (:data:`DESCRIPTOR_QUANTITIES`), and the numbers the
        prose quotes: ``desc_trials``, ``desc_reading`` (whether every deviation is round-off),
        ``desc_moved`` (the median relative movement of the rotated descriptors),
        ``desc_rot_err`` and ``desc_full_err``.

    Examples
    --------
    >>> checks = CheckTable()
    >>> table, numbers = descriptor_section(checks, 3, seed=0)
    >>> len(table), len(checks), numbers["desc_reading"], checks.n_fail
    (6, 5, 'every deviation is round-off', 0)
    """
    err, moved = descriptor_invariance(trials, seed)  # the worst errors over the random head sets
    table = pd.DataFrame({"max abs error": list(err.values())}, index=pd.Index(DESCRIPTOR_QUANTITIES, name="quantity"))
    numbers = {"desc_trials": int(trials),
               "desc_reading": "every deviation is round-off" if max(err.values()) <= 1e-12 else
               f"the largest deviation is {format_small(max(err.values()))}, more than round-off",
               "desc_moved": float(np.median(moved)) if moved else float("nan"), "desc_rot_err": float(err["rotation"]),
               "desc_full_err": float(err["full"])}
    how = f"{trials} random head sets, n ≤ 8, C ≤ 12, d ≤ 5, r ≤ C"
    checks.add("descriptors are unit-norm", how, err["unit"], 1e-12)
    checks.add("the library's descriptors have the Gram matrix of vec(U_rᵀH_k)/‖U_rᵀH_k‖, U_r the top-r eigenvectors of "
               "Σ H_k H_kᵀ found independently (numpy.linalg.eigh)", how, err["formula"], 1e-12)
    checks.add("the descriptors' Gram matrix is invariant to the sign of each basis vector", how, err["sign"], 1e-12)
    checks.add("the Gram matrix is invariant to a rotation within the span (descriptor_drift is basis-free)", how,
               max(err["rotation"], err["drift"]), 1e-12)
    checks.add("with r = C the low-rank Gram equals the raw Gram", how, err["full"], 1e-12)
    return table, numbers


def two_group_membership(checks: CheckTable) -> dict[str, Any]:
    r"""Section 2, by sympy: the softmax of two groups' similarities :math:`s_1, s_2` at
    temperature :math:`T`, :math:`m_1 = e^{s_1/T} / (e^{s_1/T} + e^{s_2/T})`, against the closed
    form :math:`1 / (1 + e^{(s_2 - s_1)/T})`, and the closed form's limits as :math:`T \to 0^+`
    (with a gap :math:`\Delta > 0` either way) and :math:`T \to \infty`; both checks added to
    ``checks``.

    Returns
    -------
    dict
        ``difference`` (the simplified softmax minus the closed form: 0) and ``limits`` (by case,
        the limit of :math:`m_1`: 1, 0 and 1/2).

    Examples
    --------
    >>> out = two_group_membership(CheckTable())
    >>> out["difference"], list(out["limits"].values())
    (0, [1, 0, 1/2])
    """
    s1, s2 = sp.symbols("s_1 s_2", real=True)
    T = sp.Symbol("T", positive=True)
    gap = sp.Symbol("Delta", positive=True)  # the similarity gap |s_1 - s_2| > 0
    m1 = sp.exp(s1 / T) / (sp.exp(s1 / T) + sp.exp(s2 / T))
    closed_form = 1 / (1 + sp.exp((s2 - s1) / T))
    difference = sp.simplify(m1 - closed_form)
    limits = {
        "T → 0+, s_1 > s_2": sp.limit(closed_form.subs(s1, s2 + gap), T, 0, "+"),
        "T → 0+, s_1 < s_2": sp.limit(closed_form.subs(s1, s2 - gap), T, 0, "+"),
        "T → ∞": sp.limit(closed_form, T, sp.oo),
    }
    sym_ok = difference == 0
    limits_ok = (limits["T → 0+, s_1 > s_2"] == 1 and limits["T → 0+, s_1 < s_2"] == 0
                 and limits["T → ∞"] == sp.Rational(1, 2))
    checks.add("two groups: m_1 = 1 / (1 + exp((s_2 − s_1)/T))", "sympy: simplify(softmax − closed form)",
               "0 (symbolic)" if sym_ok else str(difference), ok=sym_ok)
    checks.add("two groups: m_1 → 1 (s_1 > s_2) or 0 (s_1 < s_2) as T → 0+, and → 1/2 as T → ∞",
               "sympy: limit", ", ".join(f"{v}" for v in limits.values()), ok=limits_ok)
    return {"difference": difference, "limits": limits}


def membership_section(checks: CheckTable, trials: int, temperatures: Sequence[float], seed: int
                       ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Section 2, numerically: :func:`membership_limits` on ``trials`` random instances at each
    of ``temperatures`` (increasing), its four checks added to ``checks``.

    Returns
    -------
    (DataFrame, dict)
        :func:`membership_limits`' table, and the numbers the prose quotes: ``memb_rows``,
        ``memb_bounds`` (whether both bounds hold on every row), ``memb_cold`` and ``memb_hot``
        (the largest deviations at the coldest and hottest temperature), ``memb_t_min``,
        ``memb_t_max``, the library's default temperature ``memb_default_t``, and the cosine gap
        ``memb_gap`` that puts :data:`SHARE` (``memb_share``, %) of a client's weight on the closer
        of two centroids at that temperature.
    """
    table, M = membership_limits(trials, temperatures, seed)  # the table, and the checks' worst values
    default_t = HDCConfig().temperature
    numbers = {"memb_rows": int(M["n_rows"]),
               "memb_bounds": f"Both bounds hold on all {M['n_rows']} rows." if M["cold_viol"] + M["hot_viol"] == 0 else
               f"The bounds fail on {M['cold_viol']} (T → 0) and {M['hot_viol']} (T → ∞) of {M['n_rows']} rows.",
               "memb_cold": float(table["max |m − hard|"].iloc[0]), "memb_hot": float(table["max |m − 1/k|"].iloc[-1]),
               "memb_t_min": float(temperatures[0]), "memb_t_max": float(temperatures[-1]),
               "memb_default_t": float(default_t), "memb_share": 100 * SHARE,
               "memb_gap": float(default_t * math.log(SHARE / (1 - SHARE)))}
    how = f"{M['n_rows']} membership rows: {M['n_instances']} random instances × {len(temperatures)} temperatures"
    checks.add("soft membership rows lie on the simplex (nonnegative, sum to 1)", how,
               f"min entry {format_small(M['min_entry'])}, max |Σ − 1| {format_small(M['simplex_err'])}",
               ok=M["min_entry"] >= 0 and M["simplex_err"] < 1e-12)
    checks.add("T → 0: soft membership → hard_membership, with |m − hard| ≤ (k−1)·exp(−gap/T)", how,
               M["cold_viol"], 0, kind="count")
    checks.add("T → ∞: soft membership → uniform 1/k, with |m − 1/k| ≤ (exp(2/T) − 1)/k", how, M["hot_viol"], 0,
               kind="count")
    checks.add("two groups: soft_membership equals the closed form", "the k = 2 instances at every temperature",
               M["closed_err"], 1e-12)
    return table, numbers


def identity_section(checks: CheckTable, fed: Federation, model_fn: Callable[..., torch.nn.Module], train: TrainConfig,
                     rounds: int, seed: int) -> tuple[OneGroupIdentity, dict[str, Any]]:
    """Section 3: :func:`one_group_identity` on ``fed`` (half the clients per round in the
    contrast run), its four checks added to ``checks``.

    Returns
    -------
    (OneGroupIdentity, dict)
        The measurement (its ``run`` is section 6's cache; its ``table`` the section's table), and
        the numbers the prose quotes: ``id_rounds``, ``id_diff`` and ``id_bits`` (the personalized
        encoders against FedAvg-SE's shared encoder: the largest difference, and how many clients
        are bit-equal), ``id_zero``, ``id_k``, ``id_rel_k`` (the median relative move at
        λ = 1 on ``id_k`` groups), ``id_partial``, ``id_participation``, ``id_partial_sentence``
        and ``id_eval``.
    """
    ident = one_group_identity(fed, model_fn, train, rounds, seed, participation=0.5)
    bits = f"{ident.identity_bits} of {ident.n_clients}"
    numbers = {"id_rounds": int(rounds), "id_diff": ident.identity_diff, "id_bits": bits, "id_zero": ident.zero_diff,
               "id_k": ident.k_grouped, "id_rel_k": float(np.median(ident.rel_moves)), "id_partial": ident.partial_diff,
               "id_participation": ident.participation,
               "id_partial_sentence": f"the one-group prototype differs from the round's average by up to {format_small(ident.partial_diff)}."
               if ident.partial_diff > 0 else "yet here the one-group prototype equals the round's average (the same clients "
               "were sampled in every round).",
               "id_eval": "identical" if ident.same_eval else "not identical"}
    checks.add("HDC-FL leaves the shared-encoder trajectory intact (its shared encoder is FedAvg-SE's)",
               f"{fed.n_clients} clients, {rounds} rounds, same seed", ident.shared_diff, 0.0)
    checks.add("k = 1, λ = 1, full participation, refresh every round: personalized encoder = FedAvg-SE's shared encoder",
               f"every client after {rounds} rounds; bit-equal: {bits}", ident.identity_diff, 0.0)
    checks.add("λ = 0 gives exactly the shared encoder for every client", f"k = {ident.k_grouped} groups by k-means",
               ident.zero_diff, 0.0)
    checks.add("k = 1, λ = 1: the loop's per-client evaluation equals FedAvg-SE's", "RunResult.per_client() of both runs",
               "identical" if ident.same_eval else "differs", ok=ident.same_eval)
    return ident, numbers


def planted_section(checks: CheckTable, spec: PlantedHeads, noises: Sequence[float], trials: int, seed: int, *,
                    sep_noise: float, rank: int, k_min: int, k_max: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Section 4: :func:`planted_grouping` of ``spec`` at each noise level, ``trials`` instances
    per family and level, summarized by :func:`planted_summary`; its two checks (exact recovery
    on the instances of noise at most ``sep_noise``, the silhouette of the planted grouping at
    least the raw head's) added to ``checks``.

    Returns
    -------
    (DataFrame, dict)
        The summary per family and noise level, and the numbers the prose quotes: the sizes
        (``pl_<field>`` of ``spec``, ``pl_rank``, ``pl_kmin``, ``pl_kmax``), ``pl_instances``,
        ``pl_sep_noise``, ``pl_n_sep``, ``pl_min_ari_sep`` and ``pl_sep_reading``,
        ``pl_sil_better`` and ``pl_ari_better`` (% of the instances where the low-rank descriptor
        is at least as good), ``pl_gain_few`` and ``pl_gain_all`` (the median silhouette gain per
        family), the largest gain and loss of the mean ARI in words (``pl_gain_sentence``,
        ``pl_loss_sentence``, read only beyond :data:`ARI_STEP`), and the mean ARIs at the largest
        noise (``pl_noisy_sigma``, ``pl_noisy_raw``, ``pl_noisy_lowrank``).
    """
    numbers: dict[str, Any] = {f"pl_{key}": value for key, value in
                               dict(vars(spec), rank=rank, kmin=k_min, kmax=k_max).items()}
    planted = planted_grouping(spec, noises, trials, seed, rank=rank, k_min=k_min, k_max=k_max)
    table = planted_summary(planted)  # per family and σ
    separated = planted[planted["σ"] <= sep_noise]
    min_ari_sep = float(separated["ARI lowrank"].min()) if len(separated) else float("nan")
    sil_better = float((planted["silhouette lowrank"] >= planted["silhouette raw"]).mean())
    ari_better = float((planted["ARI lowrank"] >= planted["ARI raw"] - 1e-12).mean())
    few = planted[planted["signal"] == "few class directions"]
    allc = planted[planted["signal"] == "all class directions"]
    ari_diff = table["ARI low-rank"] - table["ARI raw"]
    (fam_best, s_best), (fam_worst, s_worst) = ari_diff.idxmax(), ari_diff.idxmin()
    best_row, worst_row = table.loc[(fam_best, s_best)], table.loc[(fam_worst, s_worst)]
    noisiest = planted[planted["σ"] == max(noises)]
    numbers.update({
        "pl_instances": int(len(planted)), "pl_sep_noise": float(sep_noise), "pl_n_sep": int(len(separated)),
        "pl_min_ari_sep": min_ari_sep,
        "pl_sep_reading": "finds the planted groups exactly" if min_ari_sep >= 1 - 1e-12 else
        "does not always find the planted groups exactly",
        "pl_sil_better": 100 * sil_better, "pl_ari_better": 100 * ari_better,
        "pl_gain_few": float((few["silhouette lowrank"] - few["silhouette raw"]).median()),
        "pl_gain_all": float((allc["silhouette lowrank"] - allc["silhouette raw"]).median()),
        "pl_gain_sentence": f"The largest gain in mean ARI from the projection is at σ = {s_best:g} with the groups "
        f"differing in {fam_best}: {best_row['ARI low-rank']:.2f} against {best_row['ARI raw']:.2f}."
        if ari_diff.max() > ARI_STEP else f"The projection raises the mean ARI by more than {ARI_STEP} in none of these settings.",
        "pl_loss_sentence": f"The largest loss is at σ = {s_worst:g} with the groups differing in {fam_worst}: "
        f"{worst_row['ARI low-rank']:.2f} against {worst_row['ARI raw']:.2f}." if ari_diff.min() < -ARI_STEP
        else f"The projection lowers the mean ARI by more than {ARI_STEP} in none of these settings.",
        "pl_noisy_sigma": float(max(noises)), "pl_noisy_raw": float(noisiest["ARI raw"].mean()),
        "pl_noisy_lowrank": float(noisiest["ARI lowrank"].mean())})
    checks.add(f"the low-rank descriptor recovers a planted grouping exactly on well-separated instances (σ ≤ {sep_noise})",
               f"{len(separated)} planted instances, SilhouetteKMeans k in {k_min}..{k_max}, ARI vs planted labels",
               f"min ARI {min_ari_sep:.3f}", ok=len(separated) > 0 and min_ari_sep >= 1 - 1e-12)
    checks.add("the low-rank descriptor separates the planted groups at least as well as the raw head (silhouette)",
               f"{len(planted)} planted instances, both families, every σ", f"true for {100 * sil_better:.0f} %",
               ok=sil_better == 1, partly=sil_better > 0)
    return table, numbers


def drift_section(checks: CheckTable, federations: Sequence[tuple[Federation, Callable[..., torch.nn.Module]]],
                  train: TrainConfig, steps: Sequence[int], warm_rounds: int, seeds: Sequence[int],
                  min_reliability: float = MIN_RELIABILITY) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Section 5 over several seeds: per seed of ``seeds``, a FedAvg-SE run of ``warm_rounds``
    rounds on that seed's federation of ``federations`` (one ``(fed, model_fn)`` per seed), then
    :func:`local_drift` from its common point at each local step count of ``steps``
    (increasing). The short updates are those of at most ``train.steps`` steps (a round's).

    The check "a client's head reads the common features less faithfully as s grows" is added to
    ``checks`` on the means over the seeds. The two tracking checks (head similarity ranks
    encoder compatibility at the short updates; the ranking weakens at the longest) are decided
    on the seeds' intervals (:func:`fedbook.intervals.mean_interval` of ρ at the longest short
    s, :func:`fedbook.intervals.paired_interval` of ρ at the longest s minus it): a check holds
    when its interval lies on its side of 0, fails when it lies on the other (the opposite
    direction), and holds in part otherwise. Both rows are always in ``checks``; the first is
    untestable in this setting (its verdict, with the measured reliability in its value) where
    the compatibilities it ranks at the short updates differ by little more than the probe's
    noise: their reliability (:func:`compatibility_reliability`, mean over the seeds) below
    ``min_reliability`` (:data:`MIN_RELIABILITY`).

    Returns
    -------
    (DataFrame, dict)
        :func:`local_drift`'s table averaged over the seeds, and the numbers the prose quotes:
        ``ls_warm``, ``ls_steps``, ``ls_s_min``, ``ls_s_max``, ``ls_n_seeds``, the feature movement,
        the agreement (%), the size and the mean pairwise cosine of the encoder changes at the
        first and the last step count (``ls_move_*``, ``ls_agree_*``, ``ls_size_*``, ``ls_cos_*``)
        with their readings in words (``ls_move_reading``, ``ls_agree_reading``,
        ``ls_cos_sentence``: a change of the cosine below :data:`COS_STEP` is no change), the
        encoder change at the longest short update (``ls_size_short``, %), the compatibilities'
        reliability there and at the longest (``ls_rel_short``, ``ls_rel_long``) against
        ``min_reliability`` (``ls_min_rel``), and the rank correlation of head similarity with
        encoder compatibility over the seeds at the longest short update and at the longest
        (``ls_rho_short``, ``ls_s_short``, ``ls_rho_long``: interval texts; ``ls_track_reading``).
    """
    if len(federations) != len(seeds) or not len(seeds):
        raise ValueError(f"give one federation per seed, got {len(federations)} federation(s) for {len(seeds)} seed(s)")
    tables = []
    for (fed, model_fn), seed in zip(federations, seeds):
        warm = run_federated(FedAvgSE(train=train), fed, model_fn, LoopConfig(rounds=warm_rounds, seed=seed, evaluate_last=False))
        tables.append(local_drift(warm, fed, model_fn, train, steps, seed))  # (a)-(e) per s
    table = sum(tables) / len(tables)
    movement, agreement = table["(c) feature movement"].to_numpy(), table["(d) same prediction on f₀"].to_numpy()
    cosines, sizes = table["(a) mean pairwise cosine of Δθ"].to_numpy(), table["(b) ‖Δθ‖ / ‖θ₀‖"].to_numpy()
    move_monotone, agree_monotone = bool(np.all(np.diff(movement) > 0)), bool(np.all(np.diff(agreement) < 0))
    rho = "(e) ρ(head cosine, compatibility)"
    short_steps = [s_ for s_ in steps if s_ <= train.steps]
    s_short = short_steps[-1] if short_steps else steps[0]
    rho_short = np.array([t.loc[s_short, rho] for t in tables])
    rho_long = np.array([t.loc[steps[-1], rho] for t in tables])
    short_iv, weaken_iv = mean_interval(rho_short), paired_interval(rho_long, rho_short)
    size_short = float(table.loc[s_short, "(b) ‖Δθ‖ / ‖θ₀‖"])
    rel_short = float(table.loc[s_short, "(f) reliability of compatibility"])
    rel_long = float(table.loc[steps[-1], "(f) reliability of compatibility"])
    testable = bool(short_steps) and rel_short >= min_reliability  # NaN (no spread at all) is untestable
    numbers = {
        "ls_warm": int(warm_rounds), "ls_steps": ", ".join(str(s_) for s_ in steps), "ls_s_min": int(steps[0]),
        "ls_s_max": int(steps[-1]), "ls_n_seeds": len(seeds), "ls_move_min": float(movement[0]), "ls_move_max": float(movement[-1]),
        "ls_agree_min": 100 * float(agreement[0]), "ls_agree_max": 100 * float(agreement[-1]),
        "ls_move_reading": "grows with every step of the grid" if move_monotone else
        "grows overall but not at every step of the grid",
        "ls_agree_reading": "falls with every step of the grid" if agree_monotone else "does not fall at every step of the grid",
        "ls_size_min": float(sizes[0]), "ls_size_max": float(sizes[-1]), "ls_cos_first": float(cosines[0]),
        "ls_cos_last": float(cosines[-1]),
        "ls_cos_sentence": sign_word(
            float(cosines[-1] - cosines[0]),
            "longer local training makes the clients' encoder changes larger and, on these runs, more alike in "
            "direction, not less.",
            "longer local training makes the clients' encoder changes larger and, on these runs, less aligned.",
            "longer local training makes the clients' encoder changes larger, about as aligned as before.", tol=COS_STEP),
        "ls_size_short": 100 * size_short, "ls_rel_short": rel_short, "ls_rel_long": rel_long,
        "ls_min_rel": float(min_reliability), "ls_folds": PROBE_FOLDS,
        "ls_rho_short": short_iv.format(2), "ls_s_short": int(s_short), "ls_rho_long": mean_interval(rho_long).format(2),
        "ls_track_reading": track_reading(testable, short_iv, weaken_iv, rel_short, min_reliability, s_short)}
    how = f"{fed.n_clients} clients, s in {{{', '.join(map(str, steps))}}}, probe: the global test set, {len(seeds)} seeds"
    rel = f"reliability of the compatibilities {rel_short:.2f}"
    checks.add(f"short local updates (s ≤ {train.steps}, a round's): head similarity ranks encoder compatibility "
               "(Spearman ρ of pairwise head cosine and compatibility > 0, 95 % interval over the seeds)",
               how + f"; testable where the compatibilities' reliability at s = {s_short} (probe in {PROBE_FOLDS} parts) "
               f"is ≥ {min_reliability:g}",
               f"s = {s_short}: ρ = {short_iv.format(3)}; {rel}" + ("" if testable else f" < {min_reliability:g}"),
               ok=bool(short_iv.low > 0), partly=bool(short_iv.high > 0), untestable=not testable)
    checks.add(f"the tracking weakens as updates lengthen: ρ at s = {steps[-1]} below ρ at s = {s_short} (95 % interval "
               "over the seeds)", how, f"ρ(s = {steps[-1]}) − ρ(s = {s_short}) = {weaken_iv.format(3)}"
               + ("; the opposite: stronger at the longest" if weaken_iv.low > 0 else "")
               + f"; reliability {rel_short:.2f} at s = {s_short}, {rel_long:.2f} at s = {steps[-1]}",
               ok=bool(weaken_iv.high < 0), partly=bool(weaken_iv.low < 0))
    checks.add("a client's head reads the common features less faithfully as s grows (same prediction on f₀ and f_k)",
               how, "monotone" if agree_monotone else "not monotone: " + ", ".join(f"{v:.3f}" for v in agreement),
               ok=agree_monotone, partly=bool(agreement[-1] < agreement[0]))
    return table, numbers


def track_reading(testable: bool, short: Interval, weaken: Interval, rel_short: float, min_reliability: float,
                  s_short: int) -> str:
    """Section 5's tracking checks in words: the first untestable in this setting (the
    compatibilities at the short updates have reliability ``rel_short`` < ``min_reliability``,
    with what would make it testable) or what the interval ``short`` (ρ at the short updates)
    says; then what ``weaken`` (ρ at the longest minus ρ at the short updates) says, the opposite
    direction named.

    Examples
    --------
    >>> from fedbook.intervals import mean_interval
    >>> track_reading(False, mean_interval([0.1, -0.1]), mean_interval([0.3, 0.5]), 0.2, 0.5, 4)[:57]
    'the first is untestable in this setting: at s = 4 the com'
    >>> track_reading(True, mean_interval([0.3, 0.4, 0.5]), mean_interval([-0.3, -0.25, -0.2]), 0.9, 0.5, 4)
    "ρ is positive at the short updates, and weaker at the longest, beyond the seeds' spread: the tracking weakens as the statement says"
    """
    if not testable:
        first = (f"the first is untestable in this setting: at s = {s_short} the compatibilities being ranked have a "
                 f"reliability of {rel_short:.2f} against the probe's noise, below the {min_reliability:g} declared, so "
                 "their ranking is mostly the probe's noise; a larger probe, or rounds that move the encoders further "
                 "apart (more local steps per round, a larger learning rate), would make it testable")
    else:
        first = "ρ is " + ("positive at the short updates" if short.low > 0 else "negative at the short updates"
                           if short.high < 0 else "of either sign at the short updates within the seeds' spread")
    second = ("weaker at the longest, beyond the seeds' spread: the tracking weakens as the statement says"
              if weaken.high < 0 else "stronger at the longest, beyond the seeds' spread: the opposite of the statement "
              "that the tracking weakens" if weaken.low > 0 else
              "neither clearly weaker nor stronger at the longest within the seeds' spread")
    return f"{first}, and {second}" if testable else f"{first}. The correlation is {second}"


def refresh_section(checks: CheckTable, server: State, trials: int, first_round: int, seed: int) -> dict[str, Any]:
    """Section 6: :func:`refresh_invariants` of ``server``'s cache (``trials`` refreshes from
    round ``first_round`` on), its five checks added to ``checks``.

    Returns
    -------
    dict
        The numbers the prose quotes: ``rf_trials``, ``rf_n`` (the cached clients), ``rf_ks``
        (the chosen ``k``, distinct, in order) and ``rf_reading`` (whether every ``k`` was in its
        range, and whether personalization is read-only on the server).
    """
    RF = refresh_invariants(server, trials, first_round, seed)
    written = RF["nothing_written_back"] and RF["broadcast_kept"]
    read_only = RF["cache_kept"] and RF["model_kept"] and written
    numbers = {"rf_trials": int(trials), "rf_n": int(RF["n_cached"]), "rf_ks": ", ".join(str(k) for k in sorted(set(RF["ks"]))),
               "rf_reading": ("each within its range" if RF["k_viol"] == 0 else f"{RF['k_viol']} outside their range") + ". " + (
                   "Personalization is read-only on the server: nothing a client receives for evaluation enters the cache or "
                   "the trajectory." if read_only else "Some server arrays changed (see the check table).")}
    how = f"{trials} random refresh settings on the cache of {RF['n_cached']} clients"
    checks.add("the chosen k lies in [k_min, min(k_max, n − 1)]", how, RF["k_viol"], 0, kind="count")
    checks.add("membership rows are nonnegative and sum to 1", how, RF["row_err"], 1e-12)
    checks.add("a refresh leaves the cache (and the state it was given) unchanged", how,
               "bit-identical" if RF["cache_kept"] else "changed", ok=RF["cache_kept"])
    checks.add("a refresh leaves the shared encoder unchanged", how, "bit-identical" if RF["model_kept"] else "changed",
               ok=RF["model_kept"])
    checks.add("computing personalized encoders writes nothing back; the broadcast stays the shared encoder",
               how + ", every client, random λ", "bit-identical" if written else "changed", ok=written)
    return numbers


__all__ = ["ARI_STEP", "COS_STEP", "DESCRIPTOR_ERRORS", "DESCRIPTOR_QUANTITIES", "MAX_RANK", "OneGroupIdentity", "PLANTED_COLUMNS",
           "PLANTED_FAMILIES", "PlantedHeads", "SHARE", "arrays_kept", "descriptor_invariance", "descriptor_section",
           "descriptors_in_basis", "drift_section", "MIN_RELIABILITY", "PROBE_FOLDS", "compatibility_reliability", "track_reading", "head_compatibility_rho", "identity_section", "local_drift",
           "membership_limits", "membership_section", "one_group_identity", "planted_grouping", "planted_section",
           "planted_summary", "random_orthogonal", "refresh_invariants", "refresh_section", "small_federation", "snapshot",
           "two_group_membership"]
