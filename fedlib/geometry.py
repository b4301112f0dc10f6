r"""Covariance geometry of embedding classes and geometry-guided augmentation (GGEUR).

Dai, Huang, Chen et al., "Geometric Knowledge-Guided Localized Global Distribution Alignment for
Federated Learning", CVPR 2025 (arXiv:2503.06457):

- Eq. (1)-(2): the *geometric shape* of a class is the eigen-decomposition
  :math:`\Sigma = \sum_m \lambda_m \xi_m \xi_m^\top` of its covariance;
- Eq. (3): the geometry similarity :math:`S = \sum_{i=1}^{k} |\langle \xi_i, \xi'_i \rangle|` over the
  top :math:`k` eigenvectors (:math:`k = 5` in the paper);
- Eq. (4): the global class covariance from the clients' local means and (biased) covariances,
  :math:`\Sigma = \frac{1}{N}\big(\sum_k n_k \Sigma_k + \sum_k n_k (\mu_k - \mu)(\mu_k - \mu)^\top\big)`,
  the law of total covariance; it equals the covariance of the pooled samples exactly;
- Eq. (5) / Algorithm 1: new samples :math:`x + \beta` around every local sample;
- Algorithm 2, step 2: new samples around other domains' class prototypes.

Two augmentation formulas are selectable (``formula``):

- ``"paper"``: :math:`\beta = \sum_m \epsilon_m \lambda_m \xi_m`, the text of Section 3.2.1, whose
  covariance is :math:`\sum_m \lambda_m^2 \xi_m\xi_m^\top = \Sigma^2`;
- ``"code"``: :math:`\beta = \sum_m \epsilon_m \sqrt{\lambda_m} \xi_m`, i.e. :math:`x + \beta \sim
  \mathcal N(x, \Sigma)`, what the authors' public code draws; covariance :math:`\Sigma`.

The class moments themselves come from ``fedlib.stats.ClassMoments`` (the one
implementation in fedlib); this module only turns them into shapes and samples. All generation is
batched (one matrix product per class, no per-sample Python loop); :func:`augment_loop` is the
per-sample reference used by the tests and the benchmark.

Degenerate inputs have defined behaviour and never produce a NaN sample:

- negative eigenvalues within round-off (``>= -tol * max(1, lambda_max)``) are clipped to 0;
  larger ones raise ``ValueError`` (the matrix is not a covariance);
- a class with fewer than ``min_samples`` samples in the federation (e.g. a single sample: a
  rank-0 covariance) falls back to the pooled within-class covariance (``fallback="pooled"``),
  to no spread (``"zero"``) or raises (``"error"``);
- a class absent from the whole federation has no shape (``observed`` is False): nothing is
  generated for it;
- ``ridge`` adds :math:`\gamma\,\mathrm{tr}(\Sigma)/d\, I` (jitter), useful when d exceeds the
  number of samples;
- a class a client or domain does not hold contributes no prototype and no sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .stats import ClassMoments
from .validation import check_real

__all__ = [
    "FORMULAS",
    "FALLBACKS",
    "SIMILARITY_METHODS",
    "GeometricShapes",
    "combine_local_covariances",
    "eigen_shape",
    "class_shapes",
    "geometry_similarity",
    "similarity_matrix",
    "noise_scales",
    "numerical_ranks",
    "trace_ratio",
    "augment",
    "augment_loop",
    "fill_to_total",
    "augment_around_prototypes",
    "generated_covariance",
    "frechet_distance",
    "gaussian_kl",
]

FORMULAS = ("code", "paper")
"""``"code"``: scale eigen-directions by sqrt(eigenvalue) (N(x, Sigma)); ``"paper"``: by the eigenvalue."""

FALLBACKS = ("pooled", "zero", "error")
"""What a class with too few samples for its own covariance gets."""

SIMILARITY_METHODS = ("paper", "subspace")
"""The similarities :func:`geometry_similarity` computes: ``"paper"`` (Eq. 3, order-sensitive) and ``"subspace"`` (rotation-invariant)."""


def _check_choice(kind: str, value, valid) -> None:
    if value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(map(repr, valid))}")


def _check_finite(name: str, t: torch.Tensor) -> None:
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} holds a NaN or an infinity; valid: finite values only")


# ------------------------------------------------------------------------------------------
# Eq. (4): global covariance from local means and covariances
# ------------------------------------------------------------------------------------------


def combine_local_covariances(
    counts: torch.Tensor, means: torch.Tensor, covariances: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Eq. (4), literally: the global class counts, means and covariances from local ones.

    .. math:: \Sigma_i = \frac{1}{N_i}\Big(\sum_k n_k^i \Sigma_k^i + \sum_k n_k^i (\mu_k^i - \mu_i)(\mu_k^i - \mu_i)^\top\Big),
              \quad \mu_i = \frac{1}{N_i}\sum_k n_k^i \mu_k^i

    Parameters
    ----------
    counts : torch.Tensor of shape (K, C)
        Samples of class ``c`` on client ``k`` (0 where absent).
    means : torch.Tensor of shape (K, C, d)
        Local class means (any finite value, e.g. 0, where ``counts`` is 0).
    covariances : torch.Tensor of shape (K, C, d, d)
        Local biased (1/n) class covariances (any finite value where ``counts`` is 0).

    Returns
    -------
    N : torch.Tensor
        Global class counts, shape (C,), float64.
    mu : torch.Tensor
        Global class means, shape (C, d); zero for a class with ``N = 0``.
    Sigma : torch.Tensor
        Global class covariances, shape (C, d, d); zero for a class with ``N = 0``. A class seen by
        one client gets that client's covariance.

    Examples
    --------
    >>> n = torch.tensor([[1.0], [1.0]]); mu = torch.tensor([[[0.0]], [[2.0]]])
    >>> combine_local_covariances(n, mu, torch.zeros(2, 1, 1, 1))[2]
    tensor([[[1.]]], dtype=torch.float64)
    """
    counts = torch.as_tensor(counts, dtype=torch.float64)
    means = torch.as_tensor(means, dtype=torch.float64)
    covariances = torch.as_tensor(covariances, dtype=torch.float64)
    if counts.ndim != 2 or means.shape[:2] != counts.shape or covariances.shape != (*means.shape, means.shape[-1]):
        raise ValueError(
            f"need counts (K, C), means (K, C, d), covariances (K, C, d, d); got {tuple(counts.shape)}, "
            f"{tuple(means.shape)}, {tuple(covariances.shape)}"
        )
    if bool((counts < 0).any()):
        raise ValueError(f"counts must be >= 0, got minimum {float(counts.min())}")
    w = counts[:, :, None]  # (K, C, 1)
    means = torch.where(w > 0, means, torch.zeros_like(means))
    covariances = torch.where(w[..., None] > 0, covariances, torch.zeros_like(covariances))
    _check_finite("means", means)
    _check_finite("covariances", covariances)
    n = counts.sum(0)  # (C,)
    safe = torch.where(n > 0, n, torch.ones_like(n))
    mu = (w * means).sum(0) / safe[:, None]  # (C, d)
    dev = means - mu[None]  # (K, C, d)
    between = torch.einsum("kc,kcd,kce->cde", counts, dev, dev)  # sum_k n_k (mu_k - mu)(mu_k - mu)^T
    within = torch.einsum("kc,kcde->cde", counts, covariances)  # sum_k n_k Sigma_k
    sigma = (within + between) / safe[:, None, None]
    return n, mu, sigma


# ------------------------------------------------------------------------------------------
# Eq. (2): geometric shapes
# ------------------------------------------------------------------------------------------


def eigen_shape(covariance: torch.Tensor, *, tol: float = 1e-8, ridge: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Eigenvalues (descending, clipped at 0) and eigenvectors (columns) of symmetric PSD matrices.

    Parameters
    ----------
    covariance : torch.Tensor of shape (..., d, d)
    tol : negative eigenvalues down to ``-tol * max(1, lambda_max)`` are round-off and clipped to 0;
        below that the input is not a covariance and ``ValueError`` is raised
    ridge : jitter :math:`\gamma`: :math:`\Sigma + \gamma\,\mathrm{tr}(\Sigma)/d\,I` before the decomposition

    Returns
    -------
    eigenvalues : torch.Tensor
        Shape (..., d), float64, descending, clipped at 0.
    eigenvectors : torch.Tensor
        Shape (..., d, d), float64; column ``m`` is :math:`\xi_m`.
    """
    cov = torch.as_tensor(covariance, dtype=torch.float64)
    if cov.ndim < 2 or cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"covariance must have shape (..., d, d), got {tuple(cov.shape)}")
    _check_finite("covariance", cov)
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0, got {ridge}")
    cov = 0.5 * (cov + cov.transpose(-1, -2))
    d = cov.shape[-1]
    if ridge > 0:
        tr = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1)
        cov = cov + (ridge * tr / d)[..., None, None] * torch.eye(d, dtype=cov.dtype)
    vals, vecs = torch.linalg.eigh(cov)  # ascending
    vals, vecs = vals.flip(-1), vecs.flip(-1)
    top = vals[..., :1].clamp(min=1.0)
    worst = (vals / top).min()
    if float(worst) < -tol:
        raise ValueError(
            f"matrix is not positive semi-definite: eigenvalue ratio {float(worst):.3g} below -tol={-tol:g}; "
            "valid: a covariance matrix (negative eigenvalues only from round-off)"
        )
    return vals.clamp(min=0.0), vecs


@dataclass(frozen=True)
class GeometricShapes:
    r"""Per-class geometric shapes :math:`GD_c = \{\xi_c^m, \lambda_c^m\}` (Eq. 2) and moments.

    Attributes
    ----------
    eigenvalues : torch.Tensor of shape (C, d), descending, >= 0
    eigenvectors : torch.Tensor of shape (C, d, d), column ``m`` of class ``c`` is :math:`\xi_c^m`
    means : torch.Tensor of shape (C, d), the global class prototypes (0 for unobserved classes)
    counts : torch.Tensor of shape (C,), samples per class in the federation
    fallback : torch.Tensor of shape (C,), bool: the class got the fallback covariance
    """

    eigenvalues: torch.Tensor
    eigenvectors: torch.Tensor
    means: torch.Tensor
    counts: torch.Tensor
    fallback: torch.Tensor

    @property
    def observed(self) -> torch.Tensor:
        """Bool (C,): classes with at least one sample in the federation."""
        return self.counts > 0

    @property
    def n_classes(self) -> int:
        return int(self.counts.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def covariances(self) -> torch.Tensor:
        r""":math:`V \mathrm{diag}(\lambda) V^\top` per class, shape (C, d, d)."""
        v, lam = self.eigenvectors, self.eigenvalues
        return (v * lam[:, None, :]) @ v.transpose(-1, -2)

    def to_arrays(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """The arrays a server broadcasts (for a :class:`fedlib.messages.Message`)."""
        return {
            prefix + "eigenvalues": self.eigenvalues, prefix + "eigenvectors": self.eigenvectors,
            prefix + "means": self.means, prefix + "counts": self.counts, prefix + "fallback": self.fallback,
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, torch.Tensor], prefix: str = "") -> "GeometricShapes":
        a = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
        return cls(a["eigenvalues"], a["eigenvectors"], a["means"], a["counts"], a["fallback"].bool())


def class_shapes(
    moments: ClassMoments, *, min_samples: int = 2, fallback: str = "pooled", ridge: float = 0.0, tol: float = 1e-8
) -> GeometricShapes:
    """The global geometric shape of every class from merged class moments.

    ``moments`` is the sum over clients of their ``ClassMoments`` (``fedlib.stats``), so the
    covariances are the biased pooled class covariances, i.e. Eq. (4) (see
    :func:`combine_local_covariances`, which computes the same from local means and covariances).

    Parameters
    ----------
    moments : merged class moments (C classes, d dimensions)
    min_samples : a class with fewer samples in the federation gets the ``fallback`` covariance
    fallback : ``"pooled"`` (the pooled within-class covariance of all classes), ``"zero"`` (no
        spread: generated samples equal their centre) or ``"error"``
    ridge, tol : see :func:`eigen_shape`
    """
    _check_choice("fallback", fallback, FALLBACKS)
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise ValueError(f"min_samples must be an int >= 1, got {min_samples!r}")
    counts = moments.counts
    obs = counts > 0
    if not bool(obs.any()):
        raise ValueError("no class has any sample; valid: moments with at least one sample")
    safe = torch.where(obs, counts, torch.ones_like(counts))
    means = moments.sums / safe[:, None]
    covs = moments.grams / safe[:, None, None] - means[:, :, None] * means[:, None, :]
    few = (counts < min_samples) & obs
    if bool(few.any()):
        if fallback == "error":
            bad = [int(c) for c in torch.nonzero(few).flatten()]
            raise ValueError(f"classes {bad} have fewer than min_samples={min_samples} samples; valid fallbacks: {FALLBACKS}")
        if fallback == "pooled":
            pooled = moments.pooled_covariance()
            covs = torch.where(few[:, None, None], pooled.expand_as(covs), covs)
        else:
            covs = torch.where(few[:, None, None], torch.zeros_like(covs), covs)
    covs = torch.where(obs[:, None, None], covs, torch.zeros_like(covs))
    vals, vecs = eigen_shape(covs, tol=tol, ridge=ridge)
    return GeometricShapes(vals, vecs, torch.where(obs[:, None], means, torch.zeros_like(means)), counts.clone(), few)


# ------------------------------------------------------------------------------------------
# Eq. (3): geometry similarity
# ------------------------------------------------------------------------------------------


def geometry_similarity(vectors_a: torch.Tensor, vectors_b: torch.Tensor, k: int = 5, method: str = "paper") -> torch.Tensor:
    r"""Similarity of two geometric shapes from their eigenvectors (columns, descending order).

    ``method="paper"`` (Eq. 3): :math:`S = \sum_{i=1}^{k} |\langle \xi_i, \xi'_i\rangle|`, in
    :math:`[0, k]`, invariant to eigenvector signs, equal to :math:`k` iff the top-k eigenvectors
    coincide pairwise up to sign. It depends on the *order*: two equal subspaces whose eigenvectors
    are listed in another order score less. ``method="subspace"``:
    :math:`\|V_k^\top V_k'\|_F^2` (sum of squared cosines of the principal angles), also in
    :math:`[0, k]`, invariant to any rotation within each subspace.

    Parameters
    ----------
    vectors_a, vectors_b : torch.Tensor of shape (..., d, d) (or (..., d, >=k)); batch dims broadcast
    k : number of leading eigenvectors, 1 <= k <= d

    Returns
    -------
    torch.Tensor of shape (...)
    """
    _check_choice("similarity method", method, SIMILARITY_METHODS)
    d = vectors_a.shape[-2]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= min(vectors_a.shape[-1], vectors_b.shape[-1]):
        raise ValueError(f"k must be an int in [1, {min(vectors_a.shape[-1], vectors_b.shape[-1])}] (d={d}), got {k!r}")
    a = vectors_a[..., :k].to(torch.float64)
    b = vectors_b[..., :k].to(torch.float64)
    if method == "paper":
        return (a * b).sum(-2).abs().sum(-1)
    return ((a.transpose(-1, -2) @ b) ** 2).sum((-1, -2))


def similarity_matrix(shapes_a: GeometricShapes, shapes_b: GeometricShapes, k: int = 5, method: str = "paper") -> torch.Tensor:
    """:func:`geometry_similarity` between every class of ``a`` (rows) and of ``b`` (columns), (C_a, C_b).

    Pairs involving an unobserved class are NaN (no shape to compare)."""
    s = geometry_similarity(shapes_a.eigenvectors[:, None], shapes_b.eigenvectors[None, :], k=k, method=method)
    mask = shapes_a.observed[:, None] & shapes_b.observed[None, :]
    return torch.where(mask, s, torch.full_like(s, float("nan")))


# ------------------------------------------------------------------------------------------
# Eq. (5), Algorithms 1 and 2: generation
# ------------------------------------------------------------------------------------------


def trace_ratio(eigenvalues: torch.Tensor) -> torch.Tensor:
    r""":math:`\mathrm{tr}(\Sigma^2)/\mathrm{tr}(\Sigma)` per class, from the eigenvalues ``(C, d)``
    of :class:`GeometricShapes`: the total variance of the paper's noise (covariance
    :math:`\Sigma^2`) over the code's (:math:`\Sigma`). Above 1 when the eigenvalues are mostly
    above 1; NaN for a class without spread.

    >>> trace_ratio(torch.tensor([[4.0, 1.0], [0.5, 0.5]]))
    tensor([3.4000, 0.5000])
    """
    return (eigenvalues**2).sum(-1) / eigenvalues.sum(-1)


def numerical_ranks(eigenvalues: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """Per class, how many of the descending eigenvalues ``(..., d)`` exceed ``tol`` (>= 0) times
    the largest: the rank of each class covariance up to round-off.

    >>> numerical_ranks(torch.tensor([[2.0, 1.0, 1e-12], [1.0, 0.0, 0.0]]))
    tensor([2, 1])
    """
    check_real("tol", tol, low=0.0)
    return (eigenvalues > tol * eigenvalues[..., :1]).sum(-1)


def noise_scales(eigenvalues: torch.Tensor, formula: str = "code") -> torch.Tensor:
    r"""Per-direction scale of the noise: :math:`\sqrt{\lambda}` (``"code"``) or :math:`\lambda` (``"paper"``)."""
    _check_choice("formula", formula, FORMULAS)
    lam = eigenvalues.clamp(min=0.0)
    return lam.sqrt() if formula == "code" else lam


def generated_covariance(eigenvalues: torch.Tensor, eigenvectors: torch.Tensor, formula: str = "code") -> torch.Tensor:
    r"""Analytic :math:`\mathrm{Cov}(\beta) = \sum_m s_m^2 \xi_m\xi_m^\top`: :math:`\Sigma` (code) or :math:`\Sigma^2` (paper)."""
    s2 = noise_scales(eigenvalues, formula) ** 2
    return (eigenvectors * s2[..., None, :]) @ eigenvectors.transpose(-1, -2)


def _draw(m: int, d: int, generator: torch.Generator | None) -> torch.Tensor:
    return torch.randn(m, d, generator=generator, dtype=torch.float64)


def augment(
    centers: torch.Tensor,
    eigenvalues: torch.Tensor,
    eigenvectors: torch.Tensor,
    n_new: int,
    *,
    formula: str = "code",
    generator: torch.Generator | None = None,
    eps: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""``n_new`` samples :math:`x_{j \bmod n} + \beta_j` around ``centers`` (Eq. 5), batched.

    New sample ``j`` is centred on ``centers[j % n]`` (round-robin, so every centre gets
    ``floor`` or ``ceil(n_new / n)`` samples) and
    :math:`\beta_j = V (s \odot \epsilon_j)`, :math:`\epsilon_j \sim \mathcal N(0, I_d)`, with the
    scales ``s`` of :func:`noise_scales`. One matrix product:
    ``centers[idx] + (eps * s) @ V.T``.

    Parameters
    ----------
    centers : (n, d) local samples (step 1) or prototypes (step 2)
    eigenvalues : (d,), eigenvectors : (d, d) one class's shape
    n_new : number of samples to generate (0 gives an empty (0, d) tensor)
    eps : optional standard normal draws of shape (n_new, d) (for tests); else drawn from ``generator``

    Returns
    -------
    torch.Tensor of shape (n_new, d), the dtype of ``centers``
    """
    if centers.ndim != 2:
        raise ValueError(f"centers must have shape (n, d), got {tuple(centers.shape)}")
    n, d = centers.shape
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"n_new must be an int >= 0, got {n_new!r}")
    if eigenvalues.shape != (d,) or eigenvectors.shape != (d, d):
        raise ValueError(f"shape must be eigenvalues ({d},) and eigenvectors ({d}, {d}); got {tuple(eigenvalues.shape)}, {tuple(eigenvectors.shape)}")
    _check_finite("centers", centers)
    if n_new == 0:
        return centers.new_zeros(0, d)
    if n == 0:
        raise ValueError("cannot generate around zero centers; valid: at least one center")
    s = noise_scales(eigenvalues.to(torch.float64), formula)
    e = _draw(n_new, d, generator) if eps is None else eps.to(torch.float64)
    idx = torch.arange(n_new) % n
    beta = (e * s) @ eigenvectors.to(torch.float64).T  # (n_new, d)
    return (centers.to(torch.float64)[idx] + beta).to(centers.dtype)


def augment_loop(
    centers: torch.Tensor, eigenvalues: torch.Tensor, eigenvectors: torch.Tensor, n_new: int, *,
    formula: str = "code", generator: torch.Generator | None = None, eps: torch.Tensor | None = None,
) -> torch.Tensor:
    """The per-sample loop of Algorithm 1 (reference for tests and the benchmark); same output as
    :func:`augment` for the same draws."""
    n, d = centers.shape
    s = noise_scales(eigenvalues.to(torch.float64), formula)
    V = eigenvectors.to(torch.float64)
    out = []
    for j in range(n_new):
        e = _draw(1, d, generator)[0] if eps is None else eps[j].to(torch.float64)
        beta = torch.zeros(d, dtype=torch.float64)
        for m in range(d):  # beta = sum_m eps_m s_m xi_m
            beta = beta + e[m] * s[m] * V[:, m]
        out.append(centers[j % n].to(torch.float64) + beta)
    return torch.stack(out).to(centers.dtype) if out else centers.new_zeros(0, d)


def fill_to_total(
    x: torch.Tensor, y: torch.Tensor, shapes: GeometricShapes, total_per_class: int, *,
    formula: str = "code", generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 1 (Algorithm 1): every class a client holds is filled up to ``total_per_class``.

    The real samples are kept; ``max(0, total - n_c)`` new ones are generated around them with the
    class's global shape. A class the client does not hold gets nothing.

    Returns
    -------
    x_aug : torch.Tensor
        Shape (n_aug, d); the real samples first.
    y_aug : torch.Tensor
        Shape (n_aug,), int64.
    """
    if isinstance(total_per_class, bool) or not isinstance(total_per_class, int) or total_per_class < 0:
        raise ValueError(f"total_per_class must be an int >= 0, got {total_per_class!r}")
    if x.ndim != 2 or x.shape[1] != shapes.dim:
        raise ValueError(f"x must have shape (n, {shapes.dim}), got {tuple(x.shape)}")
    _check_finite("x", x)
    xs, ys = [x], [y.long()]
    for c in torch.unique(y).tolist():
        xc = x[y == c]
        need = total_per_class - len(xc)
        if need <= 0:
            continue
        if not bool(shapes.observed[c]):
            raise ValueError(f"class {c} is held by the client but absent from the shapes (counts 0)")
        xs.append(augment(xc, shapes.eigenvalues[c], shapes.eigenvectors[c], need, formula=formula, generator=generator))
        ys.append(torch.full((need,), c, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


def augment_around_prototypes(
    prototypes: torch.Tensor, present: torch.Tensor, shapes: GeometricShapes, per_prototype: int, *,
    formula: str = "code", generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 2 (Algorithm 2): ``per_prototype`` samples around each other domain's class prototype.

    Parameters
    ----------
    prototypes : (P, C, d) class means of P other domains
    present : (P, C) bool: the domain holds the class (a missing prototype is skipped, never used)

    Returns
    -------
    x_new : torch.Tensor
        Shape (m, d) with ``m = per_prototype * present.sum()`` (classes without a shape are
        skipped too).
    y_new : torch.Tensor
        Shape (m,), int64.
    """
    if prototypes.ndim != 3 or present.shape != prototypes.shape[:2]:
        raise ValueError(f"need prototypes (P, C, d) and present (P, C), got {tuple(prototypes.shape)}, {tuple(present.shape)}")
    if isinstance(per_prototype, bool) or not isinstance(per_prototype, int) or per_prototype < 0:
        raise ValueError(f"per_prototype must be an int >= 0, got {per_prototype!r}")
    d = prototypes.shape[2]
    xs, ys = [prototypes.new_zeros(0, d)], [torch.zeros(0, dtype=torch.long)]
    for c in range(prototypes.shape[1]):
        rows = present[:, c].bool()
        if not bool(rows.any()) or not bool(shapes.observed[c]) or per_prototype == 0:
            continue
        centers = prototypes[rows, c]  # (p, d)
        # per_prototype samples around each centre: round-robin over p centres, p * per_prototype draws
        xs.append(augment(centers, shapes.eigenvalues[c], shapes.eigenvectors[c], per_prototype * len(centers),
                          formula=formula, generator=generator))
        ys.append(torch.full((per_prototype * len(centers),), c, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


# ------------------------------------------------------------------------------------------
# Distances between Gaussian fits (to measure "local moves toward global")
# ------------------------------------------------------------------------------------------


def _sqrtm_psd(a: torch.Tensor) -> torch.Tensor:
    vals, vecs = torch.linalg.eigh(0.5 * (a + a.transpose(-1, -2)))
    return (vecs * vals.clamp(min=0).sqrt()[..., None, :]) @ vecs.transpose(-1, -2)


def frechet_distance(mu0: torch.Tensor, cov0: torch.Tensor, mu1: torch.Tensor, cov1: torch.Tensor) -> float:
    r"""Squared Fréchet (2-Wasserstein) distance between :math:`\mathcal N(\mu_0,\Sigma_0)` and :math:`\mathcal N(\mu_1,\Sigma_1)`.

    .. math:: \|\mu_0-\mu_1\|^2 + \mathrm{tr}\big(\Sigma_0 + \Sigma_1 - 2(\Sigma_0^{1/2}\Sigma_1\Sigma_0^{1/2})^{1/2}\big)

    Defined for singular covariances (no inverse).
    """
    mu0, mu1 = mu0.to(torch.float64), mu1.to(torch.float64)
    c0, c1 = cov0.to(torch.float64), cov1.to(torch.float64)
    r0 = _sqrtm_psd(c0)
    cross = _sqrtm_psd(r0 @ c1 @ r0)
    val = float(((mu0 - mu1) ** 2).sum() + torch.trace(c0) + torch.trace(c1) - 2 * torch.trace(cross))
    return max(val, 0.0)


def gaussian_kl(mu0: torch.Tensor, cov0: torch.Tensor, mu1: torch.Tensor, cov1: torch.Tensor, ridge: float = 1e-6) -> float:
    r""":math:`\mathrm{KL}(\mathcal N_0 \,\|\, \mathcal N_1)`; both covariances get :math:`\gamma\,\mathrm{tr}/d\,I` added
    (``ridge``) so that singular fits stay finite.

    .. math:: \tfrac12\big(\mathrm{tr}(\Sigma_1^{-1}\Sigma_0) + (\mu_1-\mu_0)^\top\Sigma_1^{-1}(\mu_1-\mu_0) - d + \ln\det\Sigma_1 - \ln\det\Sigma_0\big)
    """
    d = mu0.shape[0]
    eye = torch.eye(d, dtype=torch.float64)
    c0 = cov0.to(torch.float64)
    c1 = cov1.to(torch.float64)
    c0 = c0 + ridge * max(float(torch.trace(c0)) / d, 1e-12) * eye
    c1 = c1 + ridge * max(float(torch.trace(c1)) / d, 1e-12) * eye
    diff = (mu1 - mu0).to(torch.float64)
    l1 = torch.linalg.cholesky(c1)
    sol = torch.cholesky_solve(torch.cat([c0, diff[:, None]], 1), l1)
    logdet1 = 2 * torch.log(torch.diagonal(l1)).sum()
    logdet0 = torch.linalg.slogdet(c0)[1]
    val = 0.5 * (torch.trace(sol[:, :d]) + diff @ sol[:, d] - d + logdet1 - logdet0)
    return float(val) if math.isfinite(float(val)) else float("inf")
