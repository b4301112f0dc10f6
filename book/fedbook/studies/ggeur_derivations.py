r"""The numerical checks of GGEUR's geometry on seeded random instances (the chapter *GGEUR: the
geometry, checked*, ``notebooks/ggeur_derivations.py``).

GGEUR: Dai, Huang, Chen et al., "Geometric Knowledge-Guided Localized Global Distribution
Alignment for Federated Learning", CVPR 2025, Sections 3.1-3.2. Each check compares what
:mod:`fedlib.geometry` (and :class:`fedlib.stats.ClassMoments`) computes with an independent
computation of the paper's statement and returns the worst error, the count of counterexamples or
a table; the chapter records each in its check table, one section each:

1. :func:`eq4_on_random_federations`: Eq. 4 (the server's global class covariance from the
   clients' local means and covariances, the law of total covariance) against ``numpy.cov`` of
   the pooled samples and against the merged :class:`~fedlib.stats.ClassMoments`, and the cross
   terms of the expansion (zero exactly, the paper says "in expectation"), on the random
   federations of :func:`random_federation` with the local statistics of :func:`local_stats`;
2. :func:`generation_covariances`: the covariance of the generated noise :math:`\beta` under the
   paper's formula (Algorithm 1, :math:`\Sigma^2`) and under the authors' code (:math:`\Sigma`),
   :func:`fedlib.geometry.generated_covariance` against the empirical covariance of many draws,
   and its trace relative to :math:`\mathrm{tr}\,\Sigma` when the features are rescaled;
3. :func:`similarity_properties` (and :func:`similarity_table`): the geometry similarity
   :math:`S` of Eq. 3 (:func:`fedlib.geometry.geometry_similarity`) on random orthonormal bases:
   its range :math:`[0, k]`, its invariance to eigenvector signs, :math:`S = k` for bases equal up
   to sign, and its dependence on the order of the eigenvectors;
4. :func:`augmentation_distances` (and :func:`distance_summary`, :func:`augmentation_shares`):
   whether augmentation moves a client's local class distribution toward the global one (the
   paper's Figure 1), as squared Fréchet distances to the global Gaussian fit (a measurement);
5. :func:`degenerate_inputs`: what :mod:`fedlib.geometry` does with degenerate inputs, and
   :func:`batched_against_loop`: the batched generation against the per-sample loop of
   Algorithm 1 on the same draws.

The chapter runs each section in one call (:func:`eq4_section`, :func:`generation_section`,
:func:`similarity_section`, :func:`augmentation_section`, :func:`degenerate_section`,
:func:`batched_section`): the check's rows go into the chapter's
:class:`fedbook.checks.CheckTable`, and a :class:`Section` holds the numbers its prose reads (the
chapter glues them in one mapping), the tables it shows and what its figure reads
(:func:`plot_formulas`, :func:`plot_frechet`).

Every random draw comes from a stream derived from the chapter's ``seed`` (:mod:`fedlib.rng`)
under the keys below, in the order the chapter drew them before the checks moved here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.colors import LogNorm
from matplotlib.lines import Line2D

from fedbook.checks import CheckTable
from fedbook.page import show_table
from fedbook.tables import format_small
from fedlib.data import make_gaussian_mixture
from fedlib.federation import make_federation
from fedlib.geometry import (FORMULAS, augment, augment_around_prototypes, augment_loop, class_shapes,
                             combine_local_covariances, eigen_shape, fill_to_total, frechet_distance,
                             generated_covariance, geometry_similarity, GeometricShapes, noise_scales)
from fedlib.rng import numpy_rng, torch_generator
from fedlib.stats import ClassMoments
from fedlib.validation import check_int, check_real

F64 = torch.float64

EQ4_FEDERATIONS = 1
"""Stream key of :func:`eq4_on_random_federations`: every federation's sizes and samples (``numpy_rng(seed, 1)``)."""
GENERATION_SHAPE, GENERATION_DRAWS = 2, 3
"""Stream keys of :func:`generation_covariances`: the covariance :math:`\\Sigma`, and the generated noise."""
FIGURE_DRAWS = 4
"""Stream key the chapter's figure of the two formulas draws from (``torch_generator(seed, 4)``)."""
SIMILARITY_BASES = 5
"""Stream key of :func:`similarity_properties`: the sizes, bases, signs and perturbations."""
FILL_DRAWS = 6
"""Stream key of :func:`augmentation_distances`: client ``k``'s generated samples (``torch_generator(seed, 6, k)``)."""
DEGENERATE_SAMPLES = 7
"""Stream key of :func:`degenerate_inputs`' samples; its three generations draw from the keys 8, 9 and 10."""
BATCHED_SAMPLES = 11
"""Stream key of :func:`batched_against_loop`: the covariance, the centres and the draws."""
HELD_OUT_SAMPLES = 12
"""Stream key of :func:`augmentation_distances`' held-out samples of every class, drawn from the mixture's
true class Gaussians (``numpy_rng(seed, 12)``): no client holds them and no moment of the augmentation uses them."""

SMALL = 10
"""A (client, class) pair with fewer real samples than this is "scarce" (:func:`augmentation_distances`)."""


# ------------------------------------------------------------------------------------------------
# 1. Eq. 4 is the pooled covariance
# ------------------------------------------------------------------------------------------------


def random_federation(rng: np.random.Generator, K: int, C: int, d: int) -> list[tuple[np.ndarray, np.ndarray]]:
    r"""A random federation of ``K`` clients holding samples of ``C`` classes in ``d`` dimensions:
    client :math:`k` holds between 1 and 24 samples (drawn from ``rng``), normal with a random
    scale in [0.5, 2) around :math:`3k`, with uniform labels; the last class :math:`C - 1` is held
    by client 0 only (at least one sample), so that it may be a single-client, single-sample class.

    Parameters
    ----------
    rng : numpy.random.Generator
        Consumed in this order, per client: the size, the labels, the samples, the scale.
    K, C, d : int
        The number of clients, of classes and the dimension, each >= 1.

    Returns
    -------
    list of (numpy.ndarray, numpy.ndarray)
        Per client, its samples (n_k, d) and labels (n_k,); a client other than 0 may be empty.

    Raises
    ------
    ValueError
        ``K``, ``C`` or ``d`` that is not an integer >= 1.

    Examples
    --------
    >>> parts = random_federation(np.random.default_rng(0), 3, 2, 4)
    >>> len(parts), parts[0][0].shape[1], bool((parts[1][1] != 1).all())
    (3, 4, True)
    """
    check_int("K", K, low=1)
    check_int("C", C, low=1)
    check_int("d", d, low=1)
    parts = []
    for k in range(K):
        m = int(rng.integers(1, 25))
        y = rng.integers(0, C, size=m)
        if k == 0:
            y[0] = C - 1  # class C-1 may end up on a single client with a single sample
        parts.append((rng.normal(size=(m, d)) * rng.uniform(0.5, 2) + 3 * k, y))
    for k in range(1, K):
        parts[k] = (parts[k][0][parts[k][1] != C - 1], parts[k][1][parts[k][1] != C - 1])
    return parts


def local_stats(parts: Sequence[tuple[np.ndarray, np.ndarray]], C: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Every client's per-class counts :math:`n_k^i`, means :math:`\mu_k^i` and biased covariances
    :math:`\Sigma_k^i`, written out with numpy (zeros for a class the client does not hold).

    Parameters
    ----------
    parts : sequence of (numpy.ndarray, numpy.ndarray)
        Per client, samples (n_k, d) and integer labels in ``[0, C)``, e.g. :func:`random_federation`.
    C, d : int
        The number of classes and the dimension, each >= 1.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, numpy.ndarray)
        The counts (K, C), means (K, C, d) and covariances (K, C, d, d), in float64.

    Raises
    ------
    ValueError
        ``C`` or ``d`` that is not an integer >= 1.

    Examples
    --------
    >>> n, mu, cov = local_stats([(np.array([[0.0], [2.0], [5.0]]), np.array([0, 0, 1]))], 2, 1)
    >>> n.tolist(), mu[0, :, 0].tolist(), cov[0, :, 0, 0].tolist()
    ([[2.0, 1.0]], [1.0, 5.0], [1.0, 0.0])
    """
    check_int("C", C, low=1)
    check_int("d", d, low=1)
    K = len(parts)
    n, mu, cov = np.zeros((K, C)), np.zeros((K, C, d)), np.zeros((K, C, d, d))
    for k, (x, y) in enumerate(parts):
        for c in range(C):
            xc = x[y == c]
            n[k, c] = len(xc)
            if len(xc):
                mu[k, c] = xc.mean(0)
                cov[k, c] = (xc - mu[k, c]).T @ (xc - mu[k, c]) / len(xc)
    return n, mu, cov


class Eq4Errors(NamedTuple):
    """What :func:`eq4_on_random_federations` returns."""

    eq4: float
    """Worst relative max deviation of Eq. 4 (:func:`fedlib.geometry.combine_local_covariances`) from ``numpy.cov(bias=True)`` of the pooled samples."""
    moments: float
    """The same for the merged :class:`fedlib.stats.ClassMoments` (how fedlib computes it)."""
    cross: float
    r"""Worst relative max entry of a cross term :math:`\sum_j (x_j - \mu_k)(\mu_k - \mu)^\top` of the expansion."""
    single_client_cases: int
    """How many (federation, class) pairs had the class on a single client."""


def eq4_on_random_federations(seed: int, trials: int) -> Eq4Errors:
    r"""Eq. 4 on ``trials`` random federations (:func:`random_federation`, 2 to 5 clients, 2 to 4
    classes, dimension 1 to 6, all from the stream ``numpy_rng(seed, 1)``): the global class
    covariance from the local statistics (:func:`local_stats`) against ``numpy.cov(bias=True)`` of
    the pooled samples (zero for a one-sample class) and against the merged
    :class:`~fedlib.stats.ClassMoments`, and the cross terms of the expansion, each relative to
    ``max(1, max|reference|)``.

    Returns
    -------
    Eq4Errors
        The three worst errors (0 up to rounding: Eq. 4 is an identity) and the count of classes
        held by a single client.

    Raises
    ------
    ValueError
        ``trials`` that is not an integer >= 1.

    Examples
    --------
    >>> e = eq4_on_random_federations(0, 2)
    >>> e.eq4 < 1e-10, e.moments < 1e-10, e.cross < 1e-10, e.single_client_cases >= 2
    (True, True, True, True)
    """
    check_int("trials", trials, low=1)
    rng = numpy_rng(seed, EQ4_FEDERATIONS)
    eq4_err, moments_err, cross_max, single_client_cases = 0.0, 0.0, 0.0, 0
    for _ in range(trials):
        K, C, d = int(rng.integers(2, 6)), int(rng.integers(2, 5)), int(rng.integers(1, 7))
        parts = random_federation(rng, K, C, d)
        n, mu, cov = local_stats(parts, C, d)
        N, _, S = combine_local_covariances(torch.tensor(n), torch.tensor(mu), torch.tensor(cov))
        merged = ClassMoments.sum(ClassMoments.from_features(torch.tensor(x), torch.tensor(y), C) for x, y in parts)
        x_all = np.concatenate([p[0] for p in parts]); y_all = np.concatenate([p[1] for p in parts])
        for c in range(C):
            xc = x_all[y_all == c]
            if not len(xc):
                continue
            single_client_cases += int((n[:, c] > 0).sum() == 1)
            ref = np.cov(xc.T, bias=True).reshape(d, d) if len(xc) > 1 else np.zeros((d, d))
            scale = max(1.0, np.abs(ref).max())
            eq4_err = max(eq4_err, np.abs(S[c].numpy() - ref).max() / scale)
            moments_err = max(moments_err, np.abs(merged.class_covariances()[c].numpy() - ref).max() / scale)
            mu_c = xc.mean(0)
            for x, y in parts:  # the cross term sum_j (x_j - mu_k)(mu_k - mu)^T
                xk = x[y == c]
                if len(xk):
                    cross = (xk - xk.mean(0)).sum(0)[:, None] * (xk.mean(0) - mu_c)[None, :]
                    cross_max = max(cross_max, np.abs(cross).max() / scale)
    return Eq4Errors(float(eq4_err), float(moments_err), float(cross_max), single_client_cases)


# ------------------------------------------------------------------------------------------------
# 2. The covariance of the generated samples
# ------------------------------------------------------------------------------------------------


def generation_covariances(seed: int, n_draws: int, dim: int = 6,
                           scales: Sequence[float] = (0.1, 1.0, 10.0)) -> tuple[pd.DataFrame, pd.DataFrame]:
    r"""The covariance of the generated noise :math:`\beta` under both formulas (:data:`fedlib.geometry.FORMULAS`):
    ``n_draws`` draws around the origin (:func:`fedlib.geometry.augment`, the same stream
    ``torch_generator(seed, 3)`` for both) against :func:`fedlib.geometry.generated_covariance`,
    for :math:`\Sigma = AA^\top/d + 0.2 I` with :math:`A` (dim, dim) standard normal from
    ``numpy_rng(seed, 2)``; and the analytic :math:`\mathrm{tr}\,\mathrm{Cov}(\beta) /
    \mathrm{tr}\,\Sigma` when the features are scaled by each of ``scales`` (:math:`\Sigma` by its
    square).

    Parameters
    ----------
    seed : int
        The run seed.
    n_draws : int
        The Monte-Carlo draws per formula, >= 2.
    dim : int
        The dimension, >= 1.
    scales : sequence of float
        The feature scales :math:`c > 0`.

    Returns
    -------
    (pandas.DataFrame, pandas.DataFrame)
        Indexed by ``formula``: ``analytic Cov(β)`` ("Σ" or "Σ²"), ``relative error empirical vs
        analytic`` (Frobenius) and ``relative distance of Cov(β) from Σ``; and indexed by
        ``feature scale c``: ``tr Cov(β) / tr Σ, code`` (1) and ``tr Cov(β) / tr Σ, paper``.

    Raises
    ------
    ValueError
        ``n_draws`` that is not an integer >= 2, ``dim`` not >= 1, or a scale that is not > 0.

    Examples
    --------
    >>> formulas, by_scale = generation_covariances(0, 2000, dim=3, scales=(10.0,))
    >>> bool(formulas.loc["code", "relative distance of Cov(β) from Σ"] < 1e-12), bool(by_scale.iloc[0, 1] > 10)
    (True, True)
    """
    check_int("n_draws", n_draws, low=2)
    check_int("dim", dim, low=1)
    for c in scales:
        check_real("scale", c, low=0, low_open=True)
    d = dim
    rng = numpy_rng(seed, GENERATION_SHAPE)
    a = rng.normal(size=(d, d))
    sigma = torch.tensor(a @ a.T / d + 0.2 * np.eye(d))
    vals, vecs = eigen_shape(sigma)
    rows = []
    for formula in FORMULAS:
        out = augment(torch.zeros(1, d, dtype=F64), vals, vecs, n_draws, formula=formula,
                      generator=torch_generator(seed, GENERATION_DRAWS))
        emp = torch.tensor(np.cov(out.numpy().T))
        ana = generated_covariance(vals, vecs, formula)
        rows.append({"formula": formula, "analytic Cov(β)": "Σ" if formula == "code" else "Σ²",
                     "relative error empirical vs analytic": float((emp - ana).norm() / ana.norm()),
                     "relative distance of Cov(β) from Σ": float((ana - sigma).norm() / sigma.norm())})
    formula_table = pd.DataFrame(rows).set_index("formula")
    scale_rows = []
    for c in scales:
        v, V = eigen_shape(sigma * c**2)
        scale_rows.append({"feature scale c": c,
                           "tr Cov(β) / tr Σ, code": float(generated_covariance(v, V, "code").trace() / (sigma * c**2).trace()),
                           "tr Cov(β) / tr Σ, paper": float(generated_covariance(v, V, "paper").trace() / (sigma * c**2).trace())})
    return formula_table, pd.DataFrame(scale_rows).set_index("feature scale c")


# ------------------------------------------------------------------------------------------------
# 3. The geometry similarity S
# ------------------------------------------------------------------------------------------------


def similarity_properties(seed: int, trials: int) -> dict[str, float]:
    r"""The geometry similarity :math:`S` (Eq. 3, :func:`fedlib.geometry.geometry_similarity`) on
    ``trials`` pairs of random orthonormal bases (dimension 2 to 11, :math:`k` from 1 to the
    dimension, all from the stream ``numpy_rng(seed, 5)``), and on two bases of the same
    5-dimensional space that differ by swapping the first two eigenvectors.

    Returns
    -------
    dict of str to float
        ``out_of_range`` (the bases whose :math:`S` lies outside :math:`[0, k]`: 0), ``sign_dev``
        (the largest change of :math:`S` when both bases' eigenvector signs flip at random: 0 up to
        rounding), ``max_at_equal`` (the largest :math:`|S - k|` for a basis against itself with
        random signs: 0 up to rounding), ``near_mean`` and ``near_max`` (the mean and largest
        :math:`S/k` against a 5 % perturbation of the basis: below 1), ``s_swap`` and
        ``s_swap_sub`` (:math:`S` and the subspace similarity for the swapped pair, :math:`k = 5`).

    Raises
    ------
    ValueError
        ``trials`` that is not an integer >= 1.

    Examples
    --------
    >>> p = similarity_properties(0, 3)
    >>> p["out_of_range"], p["sign_dev"] < 1e-12, p["near_max"] < 1, p["s_swap"], p["s_swap_sub"]
    (0, True, True, 3.0, 5.0)
    """
    check_int("trials", trials, low=1)
    rng = numpy_rng(seed, SIMILARITY_BASES)
    out_of_range, sign_dev, max_at_equal, near = 0, 0.0, 0.0, []
    for _ in range(trials):
        dd = int(rng.integers(2, 12)); k = int(rng.integers(1, dd + 1))
        A = torch.tensor(np.linalg.qr(rng.normal(size=(dd, dd)))[0]); B = torch.tensor(np.linalg.qr(rng.normal(size=(dd, dd)))[0])
        s = float(geometry_similarity(A, B, k))
        out_of_range += int(not (0.0 <= s <= k + 1e-12))
        signs = torch.tensor(rng.choice([-1.0, 1.0], size=dd))
        sign_dev = max(sign_dev, abs(float(geometry_similarity(A * signs, B * signs.flip(0), k)) - s))
        max_at_equal = max(max_at_equal, abs(float(geometry_similarity(A, A * signs, k)) - k))
        Bp = torch.tensor(np.linalg.qr(A.numpy() + 0.05 * rng.normal(size=(dd, dd)))[0])  # a small perturbation
        near.append(float(geometry_similarity(A, Bp, k)) / k)
    swap = torch.eye(5, dtype=F64)[:, [1, 0, 2, 3, 4]]
    s_swap = float(geometry_similarity(torch.eye(5, dtype=F64), swap, 5))
    s_swap_sub = float(geometry_similarity(torch.eye(5, dtype=F64), swap, 5, method="subspace"))
    return {"out_of_range": out_of_range, "sign_dev": sign_dev, "max_at_equal": max_at_equal,
            "near_mean": float(np.mean(near)), "near_max": max(near), "s_swap": s_swap, "s_swap_sub": s_swap_sub}


def similarity_table(props: dict[str, float], trials: int) -> pd.DataFrame:
    """The chapter's table of :func:`similarity_properties` ``props`` over ``trials`` bases: one
    formatted ``result`` per property.

    Examples
    --------
    >>> similarity_table(similarity_properties(0, 2), 2).iloc[-1, 0]
    'S = 3 (subspace similarity 5)'
    """
    p = props
    return pd.DataFrame({
        "result": [f"{p['out_of_range']} of {trials}", format_small(p['sign_dev']), format_small(p['max_at_equal']),
                   f"{p['near_mean']:.3f}", f"S = {p['s_swap']:.0f} (subspace similarity {p['s_swap_sub']:.0f})"],
    }, index=pd.Index(["S outside [0, k] for random bases", "largest change of S under sign flips",
                       "|S - k| for identical bases up to sign", "mean S/k for a 5 % perturbation",
                       "k = 5, same subspace, first two eigenvectors swapped"], name="property"))


# ------------------------------------------------------------------------------------------------
# 4. Does augmentation move a client's local distribution toward the global one?
# ------------------------------------------------------------------------------------------------


def isotropic_like(shapes: GeometricShapes, formula: str = "code") -> GeometricShapes:
    r"""The shapes with their geometry removed: every class's noise isotropic, of the same total variance.

    Under ``formula`` a class with eigenvalues :math:`\lambda` generates noise of total variance
    :math:`\sum_m s_m^2` (:func:`fedlib.geometry.noise_scales`: :math:`s_m^2 = \lambda_m` for the code,
    :math:`\lambda_m^2` for the paper); the isotropic shape has identity eigenvectors and every
    eigenvalue :math:`\bar\lambda` with :math:`d\,\bar s^2` equal to it, so the two generate as much
    spread, and only the direction of the spread differs. Means and counts are kept.

    Examples
    --------
    >>> import torch
    >>> sh = GeometricShapes(torch.tensor([[4.0, 0.0]]), torch.eye(2)[None], torch.zeros(1, 2), torch.tensor([5.0]),
    ...                      torch.tensor([False]))
    >>> isotropic_like(sh).eigenvalues.tolist(), isotropic_like(sh, "paper").eigenvalues.tolist()
    ([[2.0, 2.0]], [[2.8284270763397217, 2.8284270763397217]])
    """
    if formula not in FORMULAS:
        raise ValueError(f"unknown formula {formula!r}; valid: {', '.join(FORMULAS)}")
    d = shapes.dim
    total_var = (noise_scales(shapes.eigenvalues, formula) ** 2).sum(dim=1)  # (C,)
    per = total_var / d
    lam = per if formula == "code" else per.sqrt()
    vals = lam[:, None].expand(-1, d).clone()
    vecs = torch.eye(d, dtype=shapes.eigenvectors.dtype).expand(shapes.n_classes, d, d).clone()
    return GeometricShapes(vals.to(shapes.eigenvalues.dtype), vecs, shapes.means, shapes.counts, shapes.fallback)


def augmentation_distances(seed: int, *, n_per_class: int, n_classes: int, dim: int, n_clients: int, alpha: float,
                           total: int, small: int = SMALL) -> pd.DataFrame:
    r"""The squared Fréchet distance (:func:`fedlib.geometry.frechet_distance`) of every
    (client, class) pair's Gaussian fit to the global class fit, before and after augmentation.

    The data: a Gaussian mixture (:func:`fedlib.data.datasets.make_gaussian_mixture`, separation 3) split
    over ``n_clients`` by a Dirichlet label skew ``alpha`` (:func:`fedlib.federation.make_federation`,
    at least 5 samples per client, 10 global test samples per class), both seeded with ``seed``.
    The global shapes come from the merged :class:`~fedlib.stats.ClassMoments`; every client fills
    each class up to ``total`` (:func:`fedlib.geometry.fill_to_total`) under both
    :data:`fedlib.geometry.FORMULAS`, from the stream ``torch_generator(seed, 6, k)``, and once more
    with the geometry removed (:func:`isotropic_like`: as much noise, in no particular direction) from
    the same draws. Pairs with fewer than 2 or at least ``total`` real samples are left out (nothing is
    generated for the latter).

    The shape-against-isotropic comparison reads a target the augmentation never saw: a Gaussian fitted
    on ``n_per_class`` **held-out** samples of each class, drawn from the mixture's true class
    Gaussians (stream :data:`HELD_OUT_SAMPLES`). Measured against the merged fit itself, filling along
    the merged :math:`\Sigma` would beat :math:`\bar\lambda I` for any anisotropic :math:`\Sigma` by
    construction; against held-out samples it holds only if the global shape estimates the class's
    real shape.

    Returns
    -------
    pandas.DataFrame
        One row per pair and formula: ``client``, ``class``, ``n`` (real samples), ``formula``,
        ``before`` and ``after`` (the distances to the merged fit), ``after (isotropic)`` (the distance
        after the isotropic fill), ``held out, GGEUR`` and ``held out, isotropic`` (the distances of the
        two fills to the held-out fit), ``mean part`` (:math:`\lVert\mu_{local} -
        \mu\rVert^2`), ``tr ratio`` (the augmented covariance's trace over the global one's),
        ``shrinks`` (after < before), ``beats isotropic`` (held out, GGEUR < held out, isotropic) and ``small`` ("fewer than {small}" or "{small} or more").

    Raises
    ------
    ValueError
        A size that is not an integer >= 1, ``total`` or ``small`` not >= 2, or ``alpha`` not > 0.

    Examples
    --------
    >>> dist = augmentation_distances(0, n_per_class=40, n_classes=2, dim=2, n_clients=2, alpha=1.0, total=60)
    >>> sorted(set(dist.formula)), bool((dist["n"] >= 2).all())
    (['code', 'paper'], True)
    """
    for name, value in (("n_per_class", n_per_class), ("n_classes", n_classes), ("dim", dim), ("n_clients", n_clients)):
        check_int(name, value, low=1)
    check_int("total", total, low=2)
    check_int("small", small, low=2)
    check_real("alpha", alpha, low=0, low_open=True)
    mix = make_gaussian_mixture(n_per_class=n_per_class, n_classes=n_classes, dim=dim, separation=3.0, seed=seed)
    fed = make_federation(mix.dataset, n_clients=n_clients, alpha=alpha, min_size=5, global_test_per_class=10, seed=seed)
    merged = ClassMoments.sum(ClassMoments.from_features(c.train.x, c.train.y, n_classes) for c in fed.clients)
    shapes = class_shapes(merged)
    g_mu, g_cov = merged.means(), merged.class_covariances()
    rng = numpy_rng(seed, HELD_OUT_SAMPLES)
    held = [rng.multivariate_normal(mix.means[c], mix.covariances[c], size=n_per_class) for c in range(n_classes)]
    held = ClassMoments.from_features(torch.as_tensor(np.concatenate(held)), torch.arange(n_classes).repeat_interleave(n_per_class),
                                      n_classes)
    h_mu, h_cov = held.means(), held.class_covariances()
    rows = []
    for k, cl in enumerate(fed.clients):
        for formula in FORMULAS:
            xa, ya = fill_to_total(cl.train.x.double(), cl.train.y, shapes, total, formula=formula,
                                   generator=torch_generator(seed, FILL_DRAWS, k))
            aug = ClassMoments.from_features(xa, ya, n_classes)
            xi, yi = fill_to_total(cl.train.x.double(), cl.train.y, isotropic_like(shapes, formula), total, formula=formula,
                                   generator=torch_generator(seed, FILL_DRAWS, k))
            iso = ClassMoments.from_features(xi, yi, n_classes)
            loc = ClassMoments.from_features(cl.train.x, cl.train.y, n_classes)
            for c in range(n_classes):
                n = int(loc.counts[c])
                if n < 2 or n >= total:  # nothing is generated for a class already at the total
                    continue
                before = frechet_distance(loc.means()[c], loc.class_covariances()[c], g_mu[c], g_cov[c])
                after = frechet_distance(aug.means()[c], aug.class_covariances()[c], g_mu[c], g_cov[c])
                after_iso = frechet_distance(iso.means()[c], iso.class_covariances()[c], g_mu[c], g_cov[c])
                held_ggeur = frechet_distance(aug.means()[c], aug.class_covariances()[c], h_mu[c], h_cov[c])
                held_iso = frechet_distance(iso.means()[c], iso.class_covariances()[c], h_mu[c], h_cov[c])
                mean_part = float(((loc.means()[c] - g_mu[c]) ** 2).sum())
                rows.append({"client": k, "class": c, "n": n, "formula": formula, "before": before, "after": after,
                             "after (isotropic)": after_iso, "held out, GGEUR": held_ggeur, "held out, isotropic": held_iso,
                             "mean part": mean_part, "tr ratio": float(aug.class_covariances()[c].trace() / g_cov[c].trace())})
    dist = pd.DataFrame(rows)
    dist["shrinks"] = dist["after"] < dist["before"]
    dist["beats isotropic"] = dist["held out, GGEUR"] < dist["held out, isotropic"]
    dist["small"] = np.where(dist["n"] < small, f"fewer than {small}", f"{small} or more")
    return dist


def distance_summary(dist: pd.DataFrame, small: int = SMALL) -> pd.DataFrame:
    """Per formula and group of local samples (scarce first) of :func:`augmentation_distances`
    ``dist``: the pairs, the share (in %) whose distance shrinks, the median distances before and
    after, and (where ``dist`` has them) the share that ends closer to the held-out fit than the
    isotropic fill and the median distances of both fills to the held-out fit.

    Examples
    --------
    >>> dist = pd.DataFrame({"formula": ["code", "code"], "n": [3, 30], "before": [2.0, 1.0], "after": [1.0, 2.0],
    ...                      "shrinks": [True, False], "small": ["fewer than 10", "10 or more"]})
    >>> distance_summary(dist)["distance shrinks (% of pairs)"].tolist()
    [100.0, 0.0]
    """
    check_int("small", small, low=2)
    iso = "beats isotropic" in dist
    aggs = dict(pairs=("shrinks", "size"), share_shrinking=("shrinks", "mean"), median_before=("before", "median"),
                median_after=("after", "median"))
    if iso:
        aggs.update(share_iso=("beats isotropic", "mean"), median_held=("held out, GGEUR", "median"),
                    median_iso=("held out, isotropic", "median"))
    summary = dist.groupby(["formula", "small"]).agg(**aggs)
    summary = summary.loc[[(f, g) for f in FORMULAS for g in (f"fewer than {small}", f"{small} or more")
                           if (f, g) in summary.index]]  # the scarce pairs first
    summary["share_shrinking"] *= 100
    summary.index.names = ["formula", "local samples"]
    columns = ["(client, class) pairs", "distance shrinks (% of pairs)", "median d² before", "median d² after"]
    if iso:
        summary["share_iso"] *= 100
        columns += ["closer to held-out fit than isotropic (% of pairs)", "median d² to held-out fit, GGEUR",
                    "median d² to held-out fit, isotropic"]
    summary.columns = columns
    return summary


def augmentation_shares(dist: pd.DataFrame, small: int = SMALL) -> dict[str, float]:
    """The numbers the chapter reads off :func:`augmentation_distances` ``dist``.

    Returns
    -------
    dict
        ``share_code``, ``share_paper`` (the fractions of pairs whose distance shrinks, per
        formula), ``share_iso_code``, ``share_iso_paper`` (the fractions of pairs that end closer to the
        held-out fit than after the isotropic fill, per formula; NaN without the column ``beats isotropic``), ``med_ratio_code`` (the median after/before, code's formula), ``share_small`` and
        ``share_large`` (the fraction for pairs with fewer / at least ``small`` real samples, code's
        formula; NaN without such pairs), ``tr_ratio_large`` (their median ``tr ratio``; NaN
        without), ``n_pairs`` (the (client, class) pairs), ``scarce_better`` (the scarce pairs
        shrink more often) and ``too_wide`` (``tr_ratio_large`` > 1).

    Examples
    --------
    >>> dist = pd.DataFrame({"formula": ["code", "code", "paper", "paper"], "n": [3, 30, 3, 30],
    ...                      "before": [2.0, 1.0, 2.0, 1.0], "after": [1.0, 2.0, 3.0, 2.0], "tr ratio": [1.0, 1.8, 1.0, 1.0]})
    >>> dist["shrinks"] = dist["after"] < dist["before"]
    >>> s = augmentation_shares(dist)
    >>> s["share_code"], s["share_paper"], s["share_small"], s["n_pairs"], s["scarce_better"], s["too_wide"]
    (0.5, 0.0, 1.0, 2, True, True)
    """
    check_int("small", small, low=2)
    code = dist[dist.formula == "code"]
    small_code = dist[(dist.formula == "code") & (dist.n < small)]
    large_code = dist[(dist.formula == "code") & (dist.n >= small)]
    return {
        "share_code": float(code["shrinks"].mean()),
        "share_iso_code": float(code["beats isotropic"].mean()) if "beats isotropic" in dist else float("nan"),
        "share_iso_paper": (float(dist[dist.formula == "paper"]["beats isotropic"].mean()) if "beats isotropic" in dist
                            else float("nan")),
        "share_paper": float(dist[dist.formula == "paper"]["shrinks"].mean()),
        "med_ratio_code": float((code["after"] / code["before"]).median()),
        "share_small": float(small_code["shrinks"].mean()) if len(small_code) else float("nan"),
        "share_large": float(large_code["shrinks"].mean()) if len(large_code) else float("nan"),
        "tr_ratio_large": float(large_code["tr ratio"].median()) if len(large_code) else float("nan"),
        "n_pairs": int(len(dist) // 2),
        "scarce_better": bool(len(small_code) > 0 and len(large_code) > 0
                              and small_code["shrinks"].mean() > large_code["shrinks"].mean()),
        "too_wide": bool(len(large_code) > 0 and float(large_code["tr ratio"].median()) > 1),
    }


# ------------------------------------------------------------------------------------------------
# 5. Degenerate inputs and batched generation
# ------------------------------------------------------------------------------------------------


def degenerate_inputs(seed: int) -> pd.DataFrame:
    """What :mod:`fedlib.geometry` does with six degenerate inputs, computed now: a class with one
    sample, a class absent from the federation, more dimensions than samples, negative eigenvalues
    from round-off, an indefinite matrix, and a domain with no samples of a class (samples from
    the stream ``numpy_rng(seed, 7)``, generations from ``torch_generator(seed, 8)``, ``(seed, 9)``
    and ``(seed, 10)``).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``input``: the ``behaviour`` specified, whether any ``NaN generated``, and
        whether the library behaved ``as specified``.

    Examples
    --------
    >>> t = degenerate_inputs(0)
    >>> len(t), bool(t["as specified"].all()), bool(t["NaN generated"].any())
    (6, True, False)
    """
    rng = numpy_rng(seed, DEGENERATE_SAMPLES)
    bad_rows = []
    x1 = np.concatenate([rng.normal(size=(30, 4)), [[4.0, 4.0, 4.0, 4.0]]]); y1 = np.array([0] * 30 + [1])
    m1 = ClassMoments.from_features(torch.tensor(x1), torch.tensor(y1), 3)
    s1 = class_shapes(m1)
    xa, _ = fill_to_total(torch.tensor(x1), torch.tensor(y1), s1, 50, generator=torch_generator(seed, 8))
    bad_rows.append(("class with one sample (rank-0 covariance)", "falls back to the pooled within-class covariance",
                     bool(torch.isnan(xa).any()), bool(s1.fallback[1])))
    bad_rows.append(("class absent from the federation", "no shape (observed = False); nothing generated", False,
                     not bool(s1.observed[2])))
    x2 = rng.normal(size=(5, 50)); y2 = np.zeros(5, dtype=int)
    s2 = class_shapes(ClassMoments.from_features(torch.tensor(x2), torch.tensor(y2), 1))
    xa2, _ = fill_to_total(torch.tensor(x2), torch.tensor(y2), s2, 40, generator=torch_generator(seed, 9))
    bad_rows.append(("d = 50 larger than n = 5", f"rank {int((s2.eigenvalues[0] > 1e-10).sum())}; zero directions get no noise",
                     bool(torch.isnan(xa2).any()), bool((s2.eigenvalues >= 0).all())))
    near_psd = torch.tensor(x2.T @ x2 / 5) - 1e-13 * torch.eye(50, dtype=F64)
    v_np, _ = eigen_shape(near_psd)
    raw_min = float(torch.linalg.eigvalsh(near_psd).min())
    bad_rows.append((f"negative eigenvalues from round-off (min {format_small(raw_min)})", "clipped to 0", False, float(v_np.min()) == 0.0))
    try:
        eigen_shape(torch.diag(torch.tensor([1.0, -0.5], dtype=F64)))
        raised = False
    except ValueError:
        raised = True
    bad_rows.append(("an indefinite matrix (eigenvalue -0.5)", "ValueError naming the ratio", False, raised))
    protos = torch.tensor(rng.normal(size=(2, 3, 4))); protos[1, 0] = float("nan")
    present = torch.tensor([[True, True, False], [False, True, True]])
    xs, _ = augment_around_prototypes(protos, present, class_shapes(ClassMoments.from_features(
        torch.tensor(rng.normal(size=(30, 4))), torch.tensor(np.repeat([0, 1, 2], 10)), 3)), 5,
        generator=torch_generator(seed, 10))
    bad_rows.append(("a domain with no samples of a class", "its prototype is not used (present = False)",
                     bool(torch.isnan(xs).any()), len(xs) == 5 * int(present.sum())))
    return pd.DataFrame(bad_rows, columns=["input", "behaviour", "NaN generated", "as specified"]).set_index("input")


def degenerate_failures(table: pd.DataFrame) -> int:
    """The rows of a :func:`degenerate_inputs` ``table`` that failed: not as specified, or
    generated a NaN (a row that did both counts once).

    Examples
    --------
    >>> degenerate_failures(pd.DataFrame({"NaN generated": [False, True, True], "as specified": [True, True, False]}))
    2
    """
    return int((~table["as specified"].astype(bool) | table["NaN generated"].astype(bool)).sum())


def batched_against_loop(seed: int, dim: int = 32, n_new: int = 300) -> tuple[float, float, float]:
    r"""The batched generation :func:`fedlib.geometry.augment` against the per-sample loop of
    Algorithm 1 (:func:`fedlib.geometry.augment_loop`) on the same draws: a shape from the sample
    covariance of (dim, 100) standard normal draws, 7 centres and (n_new, dim) draws, all from the
    stream ``numpy_rng(seed, 11)``.

    Returns
    -------
    (float, float, float)
        The largest absolute difference between the two (0 up to rounding), and the seconds the
        batched and the looped generation took (measured: they vary from run to run).

    Raises
    ------
    ValueError
        ``dim`` or ``n_new`` that is not an integer >= 1.

    Examples
    --------
    >>> err, t_fast, t_slow = batched_against_loop(0, dim=4, n_new=10)
    >>> err < 1e-12, t_fast > 0
    (True, True)
    """
    check_int("dim", dim, low=1)
    check_int("n_new", n_new, low=1)
    rng = numpy_rng(seed, BATCHED_SAMPLES)
    v, V = eigen_shape(torch.tensor(np.cov(rng.normal(size=(dim, 100)))))
    centers = torch.tensor(rng.normal(size=(7, dim))); eps = torch.tensor(rng.normal(size=(n_new, dim)))
    t0 = time.perf_counter(); fast = augment(centers, v, V, n_new, eps=eps); t_fast = time.perf_counter() - t0
    t0 = time.perf_counter(); slow = augment_loop(centers, v, V, n_new, eps=eps); t_slow = time.perf_counter() - t0
    return float((fast - slow).abs().max()), t_fast, t_slow


# ------------------------------------------------------------------------------------------------
# The chapter's sections: each check recorded, its numbers and its tables
# ------------------------------------------------------------------------------------------------


class Section(NamedTuple):
    """One section of the chapter, computed (:func:`eq4_section` and the others)."""

    numbers: dict[str, Any]
    """The values its prose reads, by glued key."""
    tables: tuple = ()
    """What it shows, ready for the page (:func:`fedbook.page.show_table`), in order."""
    data: Any = None
    """What its figure reads (the distances of :func:`augmentation_section`), else ``None``."""


def eq4_section(checks: CheckTable, seed: int, trials: int) -> Section:
    """Section 1: :func:`eq4_on_random_federations` over ``trials`` federations, its two rows of
    ``checks`` (Eq. 4 against the pooled covariance; the cross terms), the table of the three
    worst errors and the numbers ``eq4_err``, ``eq4_trials`` and ``single_client_cases``.

    Examples
    --------
    >>> checks = CheckTable()
    >>> s = eq4_section(checks, 0, 2)
    >>> sorted(s.numbers), len(checks), checks.n_fail
    (['eq4_err', 'eq4_trials', 'single_client_cases'], 2, 0)
    """
    e = eq4_on_random_federations(seed, trials)
    table = pd.DataFrame({
        "max relative error": [e.eq4, e.moments, e.cross],
    }, index=pd.Index(["Eq. 4 vs numpy.cov of pooled samples", "ClassMoments (merged) vs numpy.cov",
                       "cross term of the expansion"], name="quantity compared"))
    checks.add("Eq. 4 equals the covariance of the pooled samples (unequal sizes, single-client and one-sample classes)",
               f"{trials} random federations vs numpy.cov(bias=True)", format_small(e.eq4), ok=e.eq4 < 1e-10)
    checks.add("the cross terms of the expansion vanish exactly (the paper: 'in expectation')",
               "sum of (x − μ_k)(μ_k − μ)ᵀ per client and class", format_small(e.cross), ok=e.cross < 1e-10)
    numbers = {"eq4_err": float(e.eq4), "eq4_trials": int(trials), "single_client_cases": int(e.single_client_cases)}
    return Section(numbers, (show_table(table, formats={"max relative error": ".1e"}),))


def generation_section(checks: CheckTable, seed: int, n_draws: int) -> Section:
    """Section 2: :func:`generation_covariances` with ``n_draws`` draws, its three rows of
    ``checks`` (each formula's covariance; the paper's differs from Σ), the formula and scale
    tables and the numbers ``emp_err``, ``paper_gap``, ``n_draws``, ``scale_paper_small`` and
    ``scale_paper_large``.

    Examples
    --------
    >>> checks = CheckTable()
    >>> s = generation_section(checks, 0, 20_000)
    >>> len(s.tables), len(checks), s.numbers["n_draws"], s.numbers["paper_gap"] > 0.05
    (2, 3, 20000, True)
    """
    formula_table, scale_table = generation_covariances(seed, n_draws)
    emp = formula_table["relative error empirical vs analytic"]  # per formula
    paper_gap = formula_table.loc["paper", "relative distance of Cov(β) from Σ"]
    checks.add("code's formula: Cov(β) = Σ", f"{n_draws:,} draws, Frobenius relative error",
               f"{emp['code']:.3f}", ok=emp["code"] < 0.05)
    checks.add("paper's formula: Cov(β) = Σ λ² ξ ξᵀ = Σ²", f"{n_draws:,} draws, Frobenius relative error",
               f"{emp['paper']:.3f}", ok=emp["paper"] < 0.05)
    checks.add("the paper's formula does not reproduce the global covariance Σ (unless all eigenvalues are 0 or 1)",
               "‖Σ² − Σ‖ / ‖Σ‖", f"{paper_gap:.2f}", ok=paper_gap > 0.05)
    numbers = {"emp_err": float(emp.max()), "paper_gap": float(paper_gap), "n_draws": int(n_draws),
               "scale_paper_small": float(scale_table.iloc[0, 1]), "scale_paper_large": float(scale_table.iloc[-1, 1])}
    tables = (show_table(formula_table, digits={"relative error empirical vs analytic": 3,
                                                "relative distance of Cov(β) from Σ": 2}),
              show_table(scale_table, formats={"feature scale c": "g", "tr Cov(β) / tr Σ, code": ".3g",
                                               "tr Cov(β) / tr Σ, paper": ".3g"}))  # 0.0192, 1, 192
    return Section(numbers, tables)


def plot_formulas(seed: int, eigenvalues: Sequence[float] = (4.0, 0.25), angle: float = 0.5, n: int = 1500):
    """The chapter's figure of the two formulas: ``n`` new samples around one sample at the origin
    for the class shape with these ``eigenvalues``, its eigenvectors rotated by ``angle`` radians,
    under the code's and the paper's formula (:func:`fedlib.geometry.augment`, both from the stream
    ``torch_generator(seed, 4)``). Returns the figure."""
    lam2 = torch.tensor(list(eigenvalues), dtype=F64)
    rot = torch.tensor([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]], dtype=F64)
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    for formula, color in (("code", "C0"), ("paper", "C1")):
        pts = augment(torch.zeros(1, 2, dtype=F64), lam2, rot, n, formula=formula, generator=torch_generator(seed, FIGURE_DRAWS))
        ax.scatter(pts[:, 0], pts[:, 1], s=3, alpha=0.4, color=color,
                   label=f"{formula}'s formula: Cov = " + ("Σ" if formula == "code" else "Σ²"))
    ax.scatter([0], [0], color="k", marker="x", s=60, label="the real sample")
    ax.set_aspect("equal"); ax.set_xlabel("first coordinate"); ax.set_ylabel("second coordinate")
    legend = ax.legend(loc="lower right", fontsize=8)  # the cloud lies along the other diagonal
    for handle in legend.legend_handles[:2]:
        handle.set_sizes([20]); handle.set_alpha(1)
    ax.set_title(f"new samples around one sample, λ = ({eigenvalues[0]:g}, {eigenvalues[1]:g})")
    fig.tight_layout()
    return fig


def similarity_section(checks: CheckTable, seed: int, trials: int) -> Section:
    """Section 3: :func:`similarity_properties` over ``trials`` bases, its four rows of ``checks``
    (range, signs, maximum, order), the table of :func:`similarity_table` and the number ``s_swap``.

    Examples
    --------
    >>> checks = CheckTable()
    >>> s = similarity_section(checks, 0, 3)
    >>> s.numbers, len(checks), checks.n_fail
    ({'s_swap': 3.0}, 4, 0)
    """
    sim = similarity_properties(seed, trials)
    checks.add("S lies in [0, k]", f"{trials} random orthonormal bases", f"{sim['out_of_range']} counterexamples",
               ok=sim["out_of_range"] == 0)
    checks.add("S is invariant to eigenvector signs", "random sign flips of both bases", format_small(sim['sign_dev']),
               ok=sim["sign_dev"] < 1e-12)
    checks.add("S = k iff the top-k eigenvectors coincide pairwise up to sign",
               "identical bases with random signs; perturbed bases score < k", format_small(sim['max_at_equal']),
               ok=sim["max_at_equal"] < 1e-12 and sim["near_max"] < 1)
    checks.add("S is not a similarity of subspaces: it depends on the order of the eigenvectors",
               "same subspace, two eigenvectors swapped (e.g. near-equal eigenvalues)", f"S = {sim['s_swap']:.0f} of 5",
               ok=sim["s_swap"] < 5)
    return Section({"s_swap": sim["s_swap"]}, (show_table(similarity_table(sim, trials), wrap=True),))


def augmentation_reading(shares: dict[str, Any]) -> dict[str, str]:
    """The two sentences of Section 4 that depend on :func:`augmentation_shares` ``shares``:
    ``aug_reading`` (whether the scarce classes gain more often, and whether filling a
    well-represented class makes it too wide) and ``aug_closing`` (the chapter's last sentence).

    Examples
    --------
    >>> augmentation_reading({"scarce_better": True, "too_wide": False})["aug_closing"]
    'mostly for under-represented classes'
    """
    return {
        "aug_reading": ("GGEUR's augmentation is a remedy for scarce classes" if shares["scarce_better"] else
                        "the scarce classes do not gain more often than the well-represented ones here")
        + ("; filling a well-represented class up to the total makes it too wide" if shares["too_wide"] else
           "; filling a well-represented class up to the total does not make it wider than the global class here"),
        "aug_closing": "mostly for under-represented classes" if shares["scarce_better"] else
        "no more often for under-represented classes than for the others",
    }


def shape_reading(share_iso: float) -> str:
    """The sentence of Section 4 that follows from ``share_iso`` (the fraction of pairs whose
    GGEUR fill ends closer to the held-out fit than the isotropic fill, code's formula): the
    global geometry, not the mere added spread, helps only if it wins for every pair.

    >>> shape_reading(1.0)
    'so where augmentation helps, it is the global geometry, not the mere added spread, that helps'
    >>> shape_reading(0.8)
    'so the global geometry helps more than the mere added spread for most pairs, not for all: the check holds only partly'
    >>> shape_reading(0.5)
    'so the global geometry does not help more than the mere added spread here: the check fails'
    """
    if not 0 <= share_iso <= 1:
        raise ValueError(f"share_iso must be a fraction in [0, 1], got {share_iso!r}")
    if share_iso == 1:
        return "so where augmentation helps, it is the global geometry, not the mere added spread, that helps"
    if share_iso > 0.5:
        return ("so the global geometry helps more than the mere added spread for most pairs, not for all: the check holds "
                "only partly")
    return "so the global geometry does not help more than the mere added spread here: the check fails"


def augmentation_section(checks: CheckTable, seed: int, *, n_per_class: int, n_classes: int, dim: int, n_clients: int,
                         alpha: float, total: int) -> Section:
    """Section 4: :func:`augmentation_distances` (its ``data``), its row of ``checks`` (the
    distance shrinks for every pair: holds, some: partly), the table of :func:`distance_summary`
    and the numbers of :func:`augmentation_shares` (shares in %) and :func:`augmentation_reading`.

    Examples
    --------
    >>> checks = CheckTable()
    >>> s = augmentation_section(checks, 0, n_per_class=40, n_classes=2, dim=2, n_clients=2, alpha=1.0, total=60)
    >>> s.numbers["n_small_cut"], len(s.data) == 2 * s.numbers["n_pairs"], len(checks)
    (10, True, 1)
    """
    dist = augmentation_distances(seed, n_per_class=n_per_class, n_classes=n_classes, dim=dim, n_clients=n_clients,
                                  alpha=alpha, total=total)
    shares = augmentation_shares(dist)
    share_code = shares["share_code"]
    numbers = {"share_code": 100 * share_code, "share_paper": 100 * shares["share_paper"],
               "med_ratio_code": shares["med_ratio_code"], "share_small": 100 * shares["share_small"],
               "share_large": 100 * shares["share_large"], "n_small_cut": SMALL, "tr_ratio_large": shares["tr_ratio_large"],
               "n_pairs": shares["n_pairs"], **augmentation_reading(shares)}
    share_iso = shares["share_iso_code"]
    numbers.update(share_iso_code=100 * share_iso, share_iso_paper=100 * shares["share_iso_paper"])
    # The operative statement of Figure 1: the *global geometric shape* is what brings a client's class toward the global
    # one. "The distance shrinks" alone cannot fail for a scarce class (any spread added to a near-point cloud helps); the
    # check compares the shape with as much noise in no particular direction, so a wrong shape (its eigenvectors, the
    # mutation of the tests) fails it.
    checks.add("the global shape, not the added spread, moves a client's class toward the global one",
               f"Fréchet distance to a fit on held-out samples of the class after GGEUR's fill, below that after an isotropic "
               f"fill of the same total variance (the same draws), {len(dist) // 2} (client, class) pairs, code's formula",
               f"closer for {100 * share_iso:.0f} %", ok=share_iso == 1, partly=share_iso > 0.5)
    numbers["shape_reading"] = shape_reading(share_iso)
    table = show_table(distance_summary(dist), digits={"distance shrinks (% of pairs)": 0, "median d² before": 3,
                                                       "median d² after": 3, "closer to held-out fit than isotropic (% of pairs)": 0,
                                                       "median d² to held-out fit, GGEUR": 3,
                                                       "median d² to held-out fit, isotropic": 3})
    return Section(numbers, (table,), dist)


def plot_frechet(dist: pd.DataFrame):
    """The chapter's figure of :func:`augmentation_distances` ``dist``: the distance after against
    before augmentation, one point per (client, class) pair and formula (circles: the code's,
    triangles: the paper's), coloured by the pair's real samples, on log scales with the diagonal
    of no change. Returns the figure."""
    fig, ax = plt.subplots(figsize=(6.5, 5))
    norm = LogNorm(vmin=dist["n"].min(), vmax=dist["n"].max())
    for formula, marker in (("code", "o"), ("paper", "^")):
        d_ = dist[dist.formula == formula]
        sc = ax.scatter(d_["before"], d_["after"], c=d_["n"], norm=norm, marker=marker, cmap="viridis", s=28,
                        edgecolors="0.3", linewidths=0.3, label=f"{formula}'s formula")
    lim = [dist[["before", "after"]].min().min() * 0.8, dist[["before", "after"]].max().max() * 1.2]
    ax.plot(lim, lim, "k--", lw=0.8); ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlabel("d² (local real, global)"); ax.set_ylabel("d² (local real + generated, global)")
    bar = fig.colorbar(sc, label="local real samples n (log scale)")
    bar.set_ticks([t for t in (2, 5, 10, 20, 50, 100, 200, 500, 1000) if norm.vmin <= t <= norm.vmax])
    bar.set_ticklabels([f"{t:g}" for t in bar.get_ticks()]); bar.ax.minorticks_off()
    # the legend's markers in grey: a point's colour is its sample count, not its formula
    ax.legend(handles=[Line2D([], [], marker=m, ls="", color="0.6", markeredgecolor="0.3", label=f"{f}'s formula")
                       for f, m in (("code", "o"), ("paper", "^"))] + [Line2D([], [], color="k", ls="--", lw=0.8, label="no change")],
              loc="upper left", fontsize=9)
    fig.tight_layout()
    return fig


def degenerate_section(checks: CheckTable, seed: int) -> Section:
    """Section 5, first part: :func:`degenerate_inputs`, its row of ``checks`` (no failure) and its
    table; no number.

    Examples
    --------
    >>> checks = CheckTable()
    >>> s = degenerate_section(checks, 0)
    >>> s.numbers, checks.n_fail
    ({}, 0)
    """
    table = degenerate_inputs(seed)
    n_failed = degenerate_failures(table)
    checks.add("degenerate inputs have defined behaviour and never give a NaN sample", f"{len(table)} cases below",
               f"{n_failed} failures", ok=n_failed == 0)
    return Section({}, (show_table(table, wrap=True),))


def batched_section(checks: CheckTable, seed: int, dim: int = 32, n_new: int = 300) -> Section:
    """Section 5, second part: :func:`batched_against_loop` with ``n_new`` samples in ``dim``
    dimensions, its row of ``checks`` and the numbers ``loop_err`` and ``loop_time_ratio`` (how
    many times slower the loop is: measured).

    Examples
    --------
    >>> checks = CheckTable()
    >>> s = batched_section(checks, 0, dim=4, n_new=10)
    >>> s.numbers["loop_err"] < 1e-12, checks.n_fail
    (True, 0)
    """
    loop_err, t_fast, t_slow = batched_against_loop(seed, dim, n_new)
    checks.add("batched generation equals the per-sample loop", f"{n_new} samples, d = {dim}, same draws", format_small(loop_err),
               ok=loop_err < 1e-10)
    return Section({"loop_err": loop_err, "loop_time_ratio": t_slow / t_fast})


__all__ = ["BATCHED_SAMPLES", "DEGENERATE_SAMPLES", "EQ4_FEDERATIONS", "FIGURE_DRAWS", "FILL_DRAWS",
           "GENERATION_DRAWS", "GENERATION_SHAPE", "HELD_OUT_SAMPLES", "SIMILARITY_BASES", "SMALL", "Eq4Errors", "Section", "augmentation_distances", "isotropic_like",
           "augmentation_reading", "augmentation_section", "augmentation_shares", "batched_against_loop", "batched_section",
           "degenerate_failures", "degenerate_inputs", "degenerate_section", "distance_summary", "eq4_on_random_federations",
           "eq4_section", "generation_covariances", "generation_section", "local_stats", "plot_formulas", "plot_frechet",
           "random_federation", "shape_reading", "similarity_properties", "similarity_section", "similarity_table"]
