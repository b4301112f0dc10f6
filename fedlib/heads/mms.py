r"""FedGRC's multilayer statistics (MMS) and support-adaptive statistical personalization (SASP).

From *Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive Statistical
Personalization for Federated Learning* (FedGRC), Section IV-B (MMS), IV-C (SASP) and Appendix A-D
to A-G. Everything is computed from the clients' additive moments of the **unscaled concatenated**
multilayer features :math:`h = [h_{\ell_1}; \dots; h_{\ell_m}]` (``fedlib.stats.ClassMoments``,
merged by addition); the server never sees a feature vector (Appendix A-E).

MMS (:class:`~fedlib.heads.MMS`):

* Eq. (22), layer scales from the globally centred features of layer :math:`\ell`,

  .. math:: s_\ell^2 = \frac{1}{N d_\ell}\sum_{k,i}\lVert h_\ell(x_i^{(k)}) - \bar h_\ell\rVert_2^2
            = \operatorname{tr}(S_{\ell\ell})/d_\ell ,

  so each scaled block :math:`h_\ell/s_\ell` has unit average coordinate variance; the features
  :math:`z = D_s h`, :math:`D_s = \operatorname{blockdiag}(s_\ell^{-1} I_{d_\ell})`, are scaled
  without centring (Eq. (23)).
* Eq. (24)-(25), shared class means :math:`\mu_c = D_s t_c / N_c` and the pooled within-class
  covariance about them (1/N), which holds the between-client mean shifts (Prop. IV.1) and the
  cross-layer blocks (Eq. (27)):

  .. math:: \widehat\Sigma_w = \frac1N \sum_{k,i} (z_i^{(k)} - \mu_{y_i})(z_i^{(k)} - \mu_{y_i})^\top
            = \frac1N D_s\Big(\sum_c G_c - t_c t_c^\top / N_c\Big) D_s .

* Eq. (29)-(30), the ridge and the metric,

  .. math:: \lambda_A = \gamma\,\operatorname{tr}(\widehat\Sigma_w)/d, \qquad
            A = (\widehat\Sigma_w + \lambda_A I_d)^{-1},

  with :math:`\lVert A\rVert_2 \le 1/\lambda_A` and :math:`\kappa(A) \le 1 + d/\gamma` (Eq. (31)).

SASP (:class:`~fedlib.heads.SASP`), for client :math:`k` with class counts :math:`n_c` and sums :math:`t_c`:

* Eq. (32)-(34): :math:`\alpha(n) = n/(n+m_0)`, the local mean :math:`\mu_c^{(k)} = D_s t_c/n_c`,
  :math:`\Delta_c = \mu_c^{(k)} - \mu_c` (0 when :math:`n_c = 0`) and

  .. math:: \tilde\mu_c^{(k)} = \mu_c + \alpha(n_c)\,\Delta_c ,

  the unique minimizer of :math:`\sum_i \lVert z_i - m\rVert_A^2 + m_0\lVert m - \mu_c\rVert_A^2`
  (Prop. IV.2): a locally absent class keeps the shared mean.
* Eq. (36), equal priors and the client's linear head over all classes,

  .. math:: w_c^{(k)} = A\tilde\mu_c^{(k)}, \qquad b_c^{(k)} = -\tfrac12 (\tilde\mu_c^{(k)})^\top A \tilde\mu_c^{(k)},

  i.e. the nearest personalized mean under :math:`A` (Appendix A-G).

Both classes are linear heads (:class:`fedlib.heads.LinearHead`): ``decision_function`` and
``predict`` take the **unscaled** concatenated features :math:`h` (what
:func:`fedlib.stats.feature_moments` concatenates); ``coef_`` therefore folds the layer scaling in
(``coef_ = scaled_coef_ * feature_scale_``), while ``scaled_coef_`` is the paper's :math:`W^{(k)}`
acting on :math:`z`. With ``m0 = inf`` SASP is the shared head (``MMS`` itself); with ``m0 = 0`` it
uses the local means of the observed classes.

Conventions for bad input (never a NaN in a head):

* ``gamma <= 0`` (or not finite), ``m0 < 0`` (or NaN), layer dimensions that do not add up to
  ``d``, non-finite moments, no sample at all: ``ValueError`` naming the value;
* a class absent from every client is not federation-known: zero weights and an intercept of
  :math:`-\infty` (never predicted); a client reporting samples of such a class is a ``ValueError``;
* a client with no samples gets the shared head (every :math:`\alpha = 0`);
* a layer whose features do not vary at all (all-zero or constant features) keeps :math:`s_\ell = 1`:
  a coordinate variance :math:`\mathbb E[x^2] - \bar x^2` at most ``ZERO_VARIANCE_RTOL`` times
  :math:`\mathbb E[x^2]` is rounding residue of the subtraction and is taken as 0;
  if :math:`\operatorname{tr}\widehat\Sigma_w = 0` (e.g. one sample per class; numerically: at most
  ``ZERO_VARIANCE_RTOL`` times the total variance, the rounding noise of :math:`G - tt^\top/N`)
  the covariance is taken as 0 and the ridge falls back to :math:`\lambda_A = \gamma` (each
  varying scaled block has unit average variance; :func:`fedlib.heads.regularized_covariance`), so
  :math:`A` is always positive definite.

Both need the clients' counts, sums and total Gram matrix :math:`\sum_c G_c` only (the compact
statistics); SASP's client side needs only the client's own counts and sums, computed locally.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from ..stats import ClassMoments
from ..validation import is_real
from ._linalg import _as_features, _check_moments, _check_positive, regularized_covariance, spd_inverse
from .base import LinearHead
from .gaussian import gaussian_linear_head

DEFAULT_GAMMA = 0.1
"""Default relative ridge :math:`\\gamma` (the paper's Table X is missing; 0.1 adds 10% of the average variance)."""

DEFAULT_M0 = 10.0
"""Default reference strength :math:`m_0` (the paper's Table X is missing; the shared mean weighs as 10 samples)."""

ZERO_VARIANCE_RTOL = 1e-10
r"""A variance at most this fraction of its scale (a coordinate's :math:`\mathbb E[x^2]`, the total
within-class variance) is rounding noise of a difference of moments: treated as 0."""


def _check_gamma(gamma) -> float:
    return _check_positive(gamma, "gamma")


def _check_m0(m0) -> float:
    if not (is_real(m0) and m0 >= 0):  # NaN fails m0 >= 0; inf allowed
        raise ValueError(f"m0 must be a number >= 0 (inf gives the shared head), got {m0!r}")
    return float(m0)


def _check_layer_dims(layer_dims, d: int) -> tuple[int, ...]:
    if layer_dims is None:
        return (d,)
    dims = tuple(layer_dims)
    if not dims or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in dims) or sum(dims) != d:
        raise ValueError(f"layer_dims must be positive integers adding up to the feature dimension {d}, got {dims!r}")
    return dims


def layer_scales(moments: ClassMoments, layer_dims: Sequence[int]) -> torch.Tensor:
    r"""Eq. (22): :math:`s_\ell = \sqrt{\operatorname{tr}(S_{\ell\ell})/d_\ell}` from merged moments, shape (m,).

    :math:`S` is the total covariance (about the global mean, 1/N); its diagonal is
    :math:`\mathbb E[x_j^2] - \bar x_j^2` per coordinate, taken as 0 when at most
    ``ZERO_VARIANCE_RTOL`` times :math:`\mathbb E[x_j^2]` (the subtraction's rounding residue
    when the coordinate is constant); a layer with zero variance keeps :math:`s_\ell = 1`.

    >>> from fedlib.stats import ClassMoments
    >>> z = torch.tensor([[0.0, 0.0, 10.0], [2.0, 2.0, 30.0]])
    >>> layer_scales(ClassMoments.from_features(z, torch.tensor([0, 1]), 2), (2, 1)).tolist()
    [1.0, 10.0]
    >>> const = torch.tensor([[0.1, 1.0], [0.1, 3.0], [0.1, 5.0]])  # layer 1 constant, not zero
    >>> layer_scales(ClassMoments.from_features(const, torch.tensor([0, 1, 1]), 2), (1, 1)).tolist()[0]
    1.0
    """
    n = moments.counts.sum()
    mean = moments.sums.sum(0) / n
    squares = torch.diagonal(moments.grams, dim1=-2, dim2=-1)  # (C, d) per class, (d,) compact
    ex2 = (squares.sum(0) if moments.form == "class" else squares) / n  # (d,) E[x_j^2]
    var = (ex2 - mean**2).clamp(min=0.0)  # (d,) coordinate variances
    var = torch.where(var <= ZERO_VARIANCE_RTOL * ex2, torch.zeros_like(var), var)  # constant: rounding residue
    blocks = torch.split(var, list(layer_dims))
    s = torch.stack([torch.sqrt(b.mean()) for b in blocks])
    return torch.where(s > 0, s, torch.ones_like(s))


def scale_moments(moments: ClassMoments, feature_scale: torch.Tensor) -> ClassMoments:
    r"""The moments of :math:`z = D h` for a diagonal :math:`D` = ``diag(feature_scale)`` (d,): exact, by linearity
    (either Gram form)."""
    f = feature_scale.to(torch.float64)
    return ClassMoments(moments.counts, moments.sums * f[None, :], moments.grams * f[..., :, None] * f[..., None, :])


class MMS(LinearHead):
    r"""Multilayer statistics: layer scales, shared class means, pooled covariance, metric A.

    Fitted, it is also the *shared* equal-prior head :math:`w_c = A\mu_c`,
    :math:`b_c = -\frac12\mu_c^\top A\mu_c` (SASP with every :math:`\alpha = 0`).

    Parameters
    ----------
    gamma : float, default 0.1
        Relative ridge :math:`\gamma > 0` of Eq. (29).

    Attributes
    ----------
    layer_dims_ : tuple of int, the block sizes :math:`d_\ell` (in concatenation order)
    scales_ : (m,) the layer scales :math:`s_\ell`
    feature_scale_ : (d,) :math:`1/s_\ell` per coordinate (the diagonal of :math:`D_s`)
    counts_ : (C,) :math:`N_c`
    means_ : (C, d) shared class means in the scaled space (zero rows for absent classes)
    covariance_ : (d, d) :math:`\widehat\Sigma_w` (scaled space, 1/N, about the shared means)
    ridge_ : float, :math:`\lambda_A`
    metric_ : (d, d) :math:`A`
    scaled_coef_, coef_, intercept_ : the shared head on :math:`z` and on :math:`h`

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> h = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [2.0, 4.0]])
    >>> mms = MMS(gamma=1.0).fit(ClassMoments.from_features(h, torch.tensor([0, 0, 1, 1]), 2), [1, 1])
    >>> mms.scales_.tolist(), round(mms.ridge_, 12)
    ([1.0, 2.0], 0.5)
    >>> mms.predict(torch.tensor([[1.0, 0.5], [1.0, 3.9]])).tolist()
    [0, 1]
    """

    def __init__(self, gamma: float = DEFAULT_GAMMA) -> None:
        self.gamma = gamma

    def check_params(self) -> "MMS":
        _check_gamma(self.gamma)
        return self

    def fit(self, moments, layer_dims: Sequence[int] | None = None) -> "MMS":
        """Fit from the merged moments of the unscaled concatenated features (or a list, one per client).

        ``layer_dims`` are the sizes of the concatenated layer blocks (default: one block).
        """
        gamma = _check_gamma(self.gamma)
        m = _check_moments(moments)
        self.layer_dims_ = _check_layer_dims(layer_dims, m.dim)
        self.scales_ = layer_scales(m, self.layer_dims_)  # Eq. (22)
        self.feature_scale_ = torch.repeat_interleave(1.0 / self.scales_, torch.tensor(self.layer_dims_))  # diag(D_s)
        f = self.feature_scale_
        self.counts_ = m.counts
        obs = m.observed
        self.means_ = torch.where(obs[:, None], m.means() * f[None, :], torch.zeros_like(m.sums))  # Eq. (24)
        self.covariance_ = _within_covariance(m, f)  # Eq. (25): about the shared class means, 1/N
        reg_cov = regularized_covariance(self.covariance_, gamma)  # Eq. (29)
        self.ridge_ = float(torch.trace(reg_cov - self.covariance_)) / m.dim
        self.metric_ = spd_inverse(reg_cov)  # Eq. (30): A, positive definite
        self._set_head(self.means_)
        return self

    def _set_head(self, means: torch.Tensor) -> None:
        obs = self.counts_ > 0
        log_priors = torch.where(obs, torch.zeros_like(self.counts_), torch.full_like(self.counts_, -math.inf))  # equal priors
        self.scaled_coef_, self.intercept_ = gaussian_linear_head(means, self.metric_, log_priors)  # Eq. (36)
        self.coef_ = self.scaled_coef_ * self.feature_scale_[None, :]

    def transform(self, h) -> torch.Tensor:
        r"""Scale unscaled concatenated features :math:`h` (n, d) to :math:`z = D_s h` (Eq. (23))."""
        self._check_fitted()
        return _as_features(h, self.feature_scale_.shape[0]) * self.feature_scale_[None, :]

    def squared_distances(self, h) -> torch.Tensor:
        r""":math:`\lVert z - \mu_c\rVert_A^2` of shape (n, C) (inf for absent classes) for features ``h``."""
        return _metric_distances(self.transform(h), self.means_, self.metric_, self.classes_)

    def to_arrays(self) -> dict[str, torch.Tensor]:
        """What a client needs of the fitted MMS to run :class:`SASP` (what a server broadcasts):
        ``scales`` (m,), ``feature_scale`` (d,), ``means`` (C, d), ``metric`` (d, d), ``counts`` (C,),
        the shared head ``coef`` (C, d) and ``intercept`` (C,), and ``ridge`` (1,); not the
        covariance (not needed). :meth:`from_arrays` rebuilds it."""
        self._check_fitted()
        return {"scales": self.scales_, "feature_scale": self.feature_scale_, "means": self.means_, "metric": self.metric_,
                "counts": self.counts_, "coef": self.coef_, "intercept": self.intercept_,
                "ridge": torch.tensor([self.ridge_], dtype=torch.float64)}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, torch.Tensor], layer_dims: Sequence[int] | None = None,
                    gamma: float = DEFAULT_GAMMA) -> "MMS":
        """A fitted MMS rebuilt from :meth:`to_arrays` (``covariance_`` is not sent and stays
        unset); ``SASP(m0).fit`` accepts it.

        >>> from fedlib.stats import ClassMoments
        >>> h = torch.tensor([[0.0, 1.0], [2.0, 0.0], [5.0, 4.0], [7.0, 4.0]])
        >>> mms = MMS().fit(ClassMoments.from_features(h, torch.tensor([0, 0, 1, 1]), 2))
        >>> bool(torch.equal(MMS.from_arrays(mms.to_arrays()).decision_function(h), mms.decision_function(h)))
        True
        """
        mms = cls(gamma)
        mms.scales_, mms.feature_scale_ = arrays["scales"], arrays["feature_scale"]
        mms.means_, mms.metric_, mms.counts_ = arrays["means"], arrays["metric"], arrays["counts"]
        mms.coef_, mms.intercept_ = arrays["coef"], arrays["intercept"]
        mms.ridge_ = float(arrays["ridge"][0])
        d = int(mms.feature_scale_.shape[0])
        mms.layer_dims_ = tuple(int(v) for v in layer_dims) if layer_dims is not None else (d,)
        mms.scaled_coef_ = mms.coef_ / mms.feature_scale_[None, :]
        return mms


def _within_covariance(moments: ClassMoments, feature_scale: torch.Tensor) -> torch.Tensor:
    """Pooled within-class covariance of the scaled moments, symmetrized; exactly 0 at rounding level.

    ``G - t t^T / N`` cancels catastrophically when the within-class variation is zero (e.g. one
    sample per class): the result is rounding noise, possibly with negative eigenvalues, whose tiny
    trace would give a tiny ridge and a metric of size ~1e15. Such a covariance is set to 0, so the
    ridge falls back to gamma (``regularized_covariance``).
    """
    within, total = moments.pooled_covariance(), moments.total_covariance()  # unscaled h; Appendix A-E: Sigma_w(z) = D_s Sigma_w(h) D_s
    f = feature_scale.to(torch.float64)
    cov = within * f[:, None] * f[None, :]
    total = float((torch.diagonal(total) * f**2).sum())
    if float(torch.trace(cov)) <= ZERO_VARIANCE_RTOL * max(total, 0.0):
        return torch.zeros_like(cov)
    return cov


def _metric_distances(z: torch.Tensor, means: torch.Tensor, metric: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    diff = z[:, None, :] - means[None, :, :]  # (n, C, d)
    d2 = torch.einsum("ncd,de,nce->nc", diff, metric, diff)
    return torch.where(ok[None, :], d2, torch.full_like(d2, math.inf))


def adaptation_weights(counts: torch.Tensor, m0: float) -> torch.Tensor:
    r""":math:`\alpha(n) = n/(n+m_0)`, shape of ``counts``; :math:`\alpha(0) = 0` (also for :math:`m_0=0`), :math:`\alpha = 0` for :math:`m_0=\infty`.

    SASP's adaptation weight, the weight of the personalized mean of Eq. (33) (Section IV-C defines it in the
    sentence after that equation).

    >>> adaptation_weights(torch.tensor([0.0, 1.0, 3.0]), 1.0).tolist()
    [0.0, 0.5, 0.75]
    """
    n = counts.to(torch.float64)
    if math.isinf(m0):
        return torch.zeros_like(n)
    return torch.where(n > 0, n / (n + m0).clamp(min=1e-300), torch.zeros_like(n))


class SASP(LinearHead):
    r"""Support-adaptive statistical personalization of one client's head (Eq. (32)-(36)).

    Parameters
    ----------
    m0 : float, default 10.0
        Reference strength :math:`m_0 \ge 0`; ``float("inf")`` gives the shared head, 0 the local
        means of every observed class.
    gamma : float, default 0.1
        The relative ridge of the shared :class:`MMS` that :meth:`shared` fits (the server's side
        of a SASP deployment, :class:`fedlib.posthoc.StatHead`). :meth:`fit` personalizes the
        fitted MMS it is given, whatever its ``gamma``.

    Attributes
    ----------
    mms_ : the fitted :class:`MMS` (shared scales, means and metric)
    counts_ : (C,) the client's :math:`n_c`
    global_counts_ : (C,) the federation's :math:`N_c` (classes with :math:`N_c = 0` are never predicted)
    alpha_ : (C,) :math:`\alpha(n_c)`
    local_means_ : (C, d) :math:`\mu_c^{(k)}` in the scaled space (the shared mean where :math:`n_c = 0`)
    displacement_ : (C, d) :math:`\Delta_c^{(k)}` (0 where :math:`n_c = 0`)
    means_ : (C, d) personalized means :math:`\tilde\mu_c^{(k)}`
    scaled_coef_, coef_, intercept_ : the head on :math:`z` (:math:`W^{(k)}, b^{(k)}`) and on :math:`h`

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> h = torch.tensor([[0.0], [2.0], [10.0], [12.0]])
    >>> mms = SASP().shared(ClassMoments.from_features(h, torch.tensor([0, 0, 1, 1]), 2))
    >>> sasp = SASP(m0=2.0).fit(mms, torch.tensor([2.0, 0.0]), torch.tensor([[4.0], [0.0]]))
    >>> sasp.alpha_.tolist(), (sasp.means_ / mms.feature_scale_).tolist()  # back to h units
    ([0.5, 0.0], [[1.5], [11.0]])
    """

    def __init__(self, m0: float = DEFAULT_M0, gamma: float = DEFAULT_GAMMA) -> None:
        self.m0 = m0
        self.gamma = gamma

    def check_params(self) -> "SASP":
        _check_m0(self.m0)
        _check_gamma(self.gamma)
        return self

    def shared(self, moments, layer_dims: Sequence[int] | None = None) -> MMS:
        """The server's side: ``MMS(self.gamma).fit(moments, layer_dims)`` on the merged moments."""
        return MMS(self.gamma).fit(moments, layer_dims)

    def fit_features(self, mms: MMS, z, y) -> "SASP":
        """Fit one client's head from its own unscaled features ``z`` (n, d) and labels ``y`` (n,)."""
        if not isinstance(mms, MMS) or not hasattr(mms, "metric_"):
            raise ValueError("mms must be a fitted MMS (call MMS(gamma).fit(moments, layer_dims) first)")
        return self.fit(mms, ClassMoments.from_features(torch.as_tensor(z), torch.as_tensor(y), mms.means_.shape[0]))

    def fit(self, mms: MMS, counts, sums=None) -> "SASP":
        """Fit one client's head from its class ``counts`` (C,) and ``sums`` (C, d) of unscaled features.

        ``counts`` may also be the client's ``ClassMoments`` (then leave ``sums`` out).
        """
        m0 = _check_m0(self.m0)
        if not isinstance(mms, MMS) or not hasattr(mms, "metric_"):
            raise ValueError("mms must be a fitted MMS (call MMS(gamma).fit(moments, layer_dims) first)")
        if isinstance(counts, ClassMoments):
            if sums is not None:
                raise ValueError("pass either a ClassMoments or counts and sums, not both")
            counts, sums = counts.counts, counts.sums
        elif sums is None:
            raise ValueError("pass the client's class sums (C, d) with its counts (C,)")
        n, t = _check_client(mms, counts, sums)
        self.mms_ = mms
        self.counts_ = n
        self.feature_scale_ = mms.feature_scale_
        self.metric_ = mms.metric_
        self.alpha_ = adaptation_weights(n, m0)  # the weight of Eq. (33), defined after it in Section IV-C
        seen = n > 0
        local = (t * mms.feature_scale_[None, :]) / torch.where(seen, n, torch.ones_like(n))[:, None]
        self.local_means_ = torch.where(seen[:, None], local, mms.means_)
        self.displacement_ = self.local_means_ - mms.means_  # Eq. (32): 0 for absent classes
        self.means_ = mms.means_ + self.alpha_[:, None] * self.displacement_  # Eq. (33)
        self.global_counts_ = mms.counts_
        self._set_head()
        return self

    def _set_head(self) -> None:
        obs = self.global_counts_ > 0
        log_priors = torch.where(obs, torch.zeros_like(self.global_counts_), torch.full_like(self.global_counts_, -math.inf))
        self.scaled_coef_, self.intercept_ = gaussian_linear_head(self.means_, self.metric_, log_priors)  # Eq. (36)
        self.coef_ = self.scaled_coef_ * self.feature_scale_[None, :]

    def transform(self, h) -> torch.Tensor:
        """Scaled features :math:`z = D_s h` (the shared scaling of :class:`MMS`)."""
        self._check_fitted()
        return self.mms_.transform(h)

    def squared_distances(self, h) -> torch.Tensor:
        r""":math:`\lVert z - \tilde\mu_c^{(k)}\rVert_A^2` of shape (n, C) (inf for absent classes)."""
        return _metric_distances(self.transform(h), self.means_, self.metric_, self.classes_)


def _check_client(mms: MMS, counts, sums) -> tuple[torch.Tensor, torch.Tensor]:
    n = torch.as_tensor(counts).detach().to(torch.float64)
    t = torch.as_tensor(sums).detach().to(torch.float64)
    c, d = mms.means_.shape
    if n.shape != (c,) or t.shape != (c, d):
        raise ValueError(f"client counts and sums must have shapes ({c},) and ({c}, {d}), got {tuple(n.shape)} and {tuple(t.shape)}")
    if not bool(torch.isfinite(n).all()) or not bool(torch.isfinite(t).all()):
        raise ValueError("client counts or sums hold a NaN or an infinity")
    if bool((n < 0).any()):
        raise ValueError(f"client counts must be >= 0, got {n.tolist()}")
    unknown = (n > 0) & (mms.counts_ <= 0)
    if bool(unknown.any()):
        raise ValueError(f"the client has samples of classes {unknown.nonzero().flatten().tolist()} that no client "
                         "contributed to the MMS moments (not federation-known)")
    return n, t


__all__ = ["DEFAULT_GAMMA", "DEFAULT_M0", "MMS", "SASP", "ZERO_VARIANCE_RTOL", "adaptation_weights", "layer_scales",
           "scale_moments"]
