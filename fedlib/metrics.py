r"""Per-client recognition abilities and their lower-tail summaries.

Implements the evaluation protocol of *Is High Local Accuracy Enough? Geometric Consensus with
Support-Adaptive Statistical Personalization for Federated Learning* (FedGRC): the local and global
all-class risks of Section III-C, the local / global / unseen / rare accuracies and client floors
``L@25``, ``U@25``, ``R@25``, ``F@25`` of Section V-A2, and the "client-wise minima before aggregation" discussion
of Appendix B. The client-level tails (mean, worst client, bottom-20 %, fairness gap) are those of
the HDC-FL paper (worst-client and bottom-20 % = 4 lowest of 20 clients). The rare-class F1 of the
MPT paper is :meth:`Confusion.f1`.

Statistics
----------
Every metric is a function of a confusion matrix :math:`M` of shape ``(C, C)`` (rows = true class,
columns = predicted class). Confusion matrices are sufficient statistics that merge by addition,

.. math:: M(\mathcal{D}_1 \cup \mathcal{D}_2) = M(\mathcal{D}_1) + M(\mathcal{D}_2),

so evaluating shards separately (per client, per batch) and merging gives exactly the pooled
evaluation. From :math:`M` (with :math:`N_c = \sum_j M_{cj}` test samples of class :math:`c`):

.. math:: \mathrm{acc} = \frac{\sum_c M_{cc}}{\sum_{c,j} M_{cj}}, \qquad
          r_c = \frac{M_{cc}}{N_c}\ (\text{NaN if } N_c = 0), \qquad
          F1_c = \frac{2 M_{cc}}{2 M_{cc} + \mathrm{FP}_c + \mathrm{FN}_c}\ (0 \text{ if } 0/0).

Per-client abilities
--------------------
Client :math:`k` deploys one predictor :math:`f^{(k)}` over all :math:`C` federation-known classes
and it is evaluated, unchanged, on its local test split (confusion :math:`M^{\mathrm{loc}}`) and on
the shared class-balanced global test set (confusion :math:`M^{\mathrm{glob}}`, recalls
:math:`r_c`). With per-class training counts :math:`n_c^{(k)}` and :math:`n^{(k)} = \sum_c n_c^{(k)}`:

* local accuracy (:math:`1 - \mathcal{E}^{(k)}_{\mathrm{local}}`), the sample accuracy of
  :math:`M^{\mathrm{loc}}`;
* pooled accuracy, the same quantity measured on many images: the local test split holds a few
  dozen images at most, so local accuracy cannot tell two clients apart; the predictor is also
  scored on a held-out *pool* drawn from the client's own input distribution (confusion
  :math:`M^{\mathrm{pool}}`, recalls :math:`r_c^{\mathrm{pool}}`, :math:`N_c^{\mathrm{pool}}`
  images of class :math:`c`), class-balanced, whose recalls are weighted by the client's class mix
  :math:`\pi_c^{(k)} = n_c^{(k)} / n^{(k)}` (its local test split is drawn from the same label
  distribution):

  .. math:: A_{\mathrm{pooled}}^{(k)} = \sum_{c} \pi_c^{(k)}\, r_c^{\mathrm{pool}} .

  The pool is the global test set itself when the clients differ only in their label mix
  (class-balanced and disjoint from every client's data: no extra inference), and a copy of it
  in the client's own input distribution under covariate shift (the rotated global test set of
  :func:`fedlib.federation.make_rotation_federation`; a domain's test share in
  :func:`fedlib.federation.one_client_per_domain`). A class the client trains on but the pool
  lacks is dropped and :math:`\pi` renormalised over the classes the pool holds (never on a
  class-balanced pool); NaN for a client without training sample. Its binomial standard error
  is :func:`pooled_standard_error`, the number of images it rests on
  :func:`pooled_effective_size`;
* global accuracy (:math:`1 - \mathcal{E}^{(k)}_{\mathrm{global}}`, equal weight per class, as the
  paper's all-class risk under :math:`Q`):

  .. math:: A_{\mathrm{glob}}^{(k)} = \frac{1}{C} \sum_{c=1}^{C} r_c ;

* unseen classes :math:`\mathcal{U}^{(k)} = \{c : n_c^{(k)} = 0\}` and

  .. math:: A_{\mathrm{unseen}}^{(k)} = \frac{1}{|\mathcal{U}^{(k)}|} \sum_{c \in \mathcal{U}^{(k)}} r_c ,

  undefined (NaN, reported "n/a") when :math:`\mathcal{U}^{(k)} = \emptyset`;
* rare classes (observed, but with less than ``rare_ratio`` times the uniform share; the paper does
  not give its definition, so the threshold is a parameter, default :data:`RARE_RATIO` = 0.5)

  .. math:: \mathcal{R}^{(k)} = \{c : n_c^{(k)} > 0,\ n_c^{(k)} / n^{(k)} < \rho / C\}, \qquad
            A_{\mathrm{rare}}^{(k)} = \frac{1}{|\mathcal{R}^{(k)}|} \sum_{c \in \mathcal{R}^{(k)}} r_c ,

  NaN when :math:`\mathcal{R}^{(k)} = \emptyset`;
* optionally the F1 of one designated class on the global test set (sklearn's ``zero_division=0``).

A class with no global test samples is skipped in these means (it cannot be scored); on the
paper's class-balanced global test set this never happens. All accuracies are fractions in [0, 1].

Summaries over clients
----------------------
For one ability with values :math:`a^{(k)}` defined on :math:`m` clients (NaN = not defined for that
client, e.g. no unseen classes), write :math:`\operatorname{tail}_q(a)` for the mean of the lowest
:math:`\lceil q m \rceil` values (:func:`tail_mean`). Then mean, worst :math:`= \min_k a^{(k)}`,
bottom-20 % :math:`= \operatorname{tail}_{0.2}(a)` (4 of 20 clients), fairness gap
:math:`= \max_k a^{(k)} - \min_k a^{(k)}` and the floor "@25" :math:`= \operatorname{tail}_{0.25}(a)`
(5 of 20 clients, 2 of 7). ``L@25``, ``U@25`` and ``R@25`` are the @25 floors of local, unseen and rare
accuracy. The client floor takes the minimum over each client's assessed abilities *before*
aggregating over clients:

.. math:: F^{(k)} = \min \{A^{(k)}_{\mathrm{local}}, A^{(k)}_{\mathrm{unseen}},
          A^{(k)}_{\mathrm{rare}}\} \setminus \{\mathrm{NaN}\}, \qquad
          \mathrm{F@25} = \operatorname{tail}_{0.25}(F).

Clients without unseen (rare) classes contribute to ``F@25`` through their other abilities. Because the
weakest ability can differ across clients, ``F@25`` is in general not
:math:`\min(\mathrm{L@25}, \mathrm{U@25}, \mathrm{R@25})` (Appendix B). An ability with no
participating client is NaN ("n/a" via :func:`format_metric`), never 0.

Example
-------
>>> import numpy as np
>>> glob = Confusion(np.array([[4, 0, 0], [1, 2, 1], [2, 1, 1]]))
>>> loc = Confusion(np.array([[5, 0, 0], [1, 1, 0], [0, 0, 0]]))
>>> ab = client_abilities(loc, glob, train_counts=[10, 1, 0], f1_class=1)
>>> {k: round(v, 4) for k, v in ab.items()}  # pooled = (10 * 1 + 1 * 0.5) / 11 on the global test
{'local': 0.8571, 'pooled': 0.9545, 'global': 0.5833, 'unseen': 0.25, 'rare': 0.5, 'f1': 0.5714}
>>> client_floor(ab)
0.25
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from .validation import is_real

__all__ = [
    "rescore",
    "FLOOR_FRACTION",
    "tail_count",
    "lowest_tail",
    "RARE_RATIO",
    "ABILITIES",
    "FLOOR_ABILITIES",
    "Confusion",
    "confusion_matrix",
    "unseen_classes",
    "rare_classes",
    "client_abilities",
    "client_predictions_abilities",
    "pooled_accuracy",
    "pooled_standard_error",
    "pooled_effective_size",
    "pooled_largest_step",
    "client_floor",
    "tail_mean",
    "summarize",
    "protocol_summary",
    "floor_at25",
    "format_metric",
]

RARE_RATIO = 0.5
"""Default rare threshold: a class is rare below ``RARE_RATIO`` times the uniform share ``1/C``."""

ABILITIES = ("local", "pooled", "global", "unseen", "rare", "f1")
"""Ability columns understood by :func:`summarize`, in output order."""

FLOOR_ABILITIES = ("local", "unseen", "rare")
"""Abilities whose per-client minimum is the client floor :math:`F^{(k)}`."""

_BOTTOM_FRACTION = 0.2  # HDC-FL: bottom-20 % (4 of 20 clients)
FLOOR_FRACTION = 0.25
"""The share of clients an @25 floor averages (FedGRC's ``F@25``): :func:`tail_count` of them."""
_FLOOR_FRACTION = FLOOR_FRACTION  # the private name, kept for its callers


# --------------------------------------------------------------------------- validation helpers


def _show(x) -> str:
    """repr of a value for an error message, without numpy 2's ``np.float64(...)`` wrapper."""
    return repr(x.item() if isinstance(x, np.generic) else x)


def _check_n_classes(n_classes) -> int:
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 1:
        raise ValueError(f"n_classes must be a positive integer, got {_show(n_classes)}")
    return int(n_classes)


def _as_labels(y, name: str, n_classes: int) -> np.ndarray:
    """1-D int64 labels in ``[0, n_classes)``; integral floats are accepted."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            bad = arr[~np.isfinite(arr) | (arr != np.round(arr))][0].item()
            raise ValueError(
                f"{name} must hold integer class labels in [0, {n_classes}), got {bad!r}"
            )
    elif arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer class labels, got dtype {arr.dtype}")
    out_of_range = (arr < 0) | (arr >= n_classes)
    if np.any(out_of_range):
        bad = arr[out_of_range][0].item()
        raise ValueError(
            f"{name} holds label {bad!r} outside the valid range [0, {n_classes}) "
            f"(valid labels are 0..{n_classes - 1})"
        )
    return arr.astype(np.int64)


def _as_counts(train_counts, name: str = "train_counts") -> np.ndarray:
    try:
        counts = np.asarray(train_counts, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric counts of shape (n_classes,), got {train_counts!r}") from err
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(
            f"{name} must be a non-empty 1-D array of shape (n_classes,), "
            f"got shape {counts.shape}"
        )
    bad = ~np.isfinite(counts) | (counts < 0)
    if np.any(bad):
        raise ValueError(
            f"{name} must be finite and >= 0, got {counts[bad][0].item()!r} "
            f"at class {int(np.flatnonzero(bad)[0])}"
        )
    return counts



def _check_rare_ratio(rare_ratio) -> float:
    if not is_real(rare_ratio) or not math.isfinite(rare_ratio) or not rare_ratio > 0:
        raise ValueError(f"rare_ratio must be a finite number > 0, got {_show(rare_ratio)}")
    return float(rare_ratio)


def _check_fraction(fraction) -> float:
    if not is_real(fraction) or not (0 < fraction <= 1):
        raise ValueError(f"fraction must be in (0, 1], got {_show(fraction)}")
    return float(fraction)


def _check_class(c, n_classes: int, name: str) -> int:
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < n_classes:
        raise ValueError(
            f"{name} must be a class index in [0, {n_classes}) (valid: 0..{n_classes - 1}), "
            f"got {_show(c)}"
        )
    return int(c)


# --------------------------------------------------------------------------- confusion statistics


def confusion_matrix(y_true, y_pred, n_classes: int) -> np.ndarray:
    r"""Confusion counts of labels against predictions.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,)
        Integer class labels in ``[0, n_classes)``.
    n_classes : int
        Number of classes :math:`C` (all federation-known classes, seen locally or not).

    Returns
    -------
    ndarray of shape (n_classes, n_classes), int64
        Rows are true classes, columns predicted classes:

        .. math:: M_{cj} = \#\{i : y_i = c,\ \hat y_i = j\}

    Example
    -------
    >>> confusion_matrix([0, 0, 1], [0, 1, 1], n_classes=2).tolist()
    [[1, 1], [0, 1]]
    """
    n_classes = _check_n_classes(n_classes)
    y_true = _as_labels(y_true, "y_true", n_classes)
    y_pred = _as_labels(y_pred, "y_pred", n_classes)
    if y_true.shape != y_pred.shape:
        raise ValueError(
            f"y_true and y_pred must have the same shape, got {y_true.shape} and {y_pred.shape}"
        )
    return _confusion(y_true, y_pred, n_classes)


def _confusion(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    # flat index c * C + j, counted once: (C * C,) -> (C, C)
    flat = np.bincount(y_true * n_classes + y_pred, minlength=n_classes * n_classes)
    return flat.reshape(n_classes, n_classes).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Confusion:
    r"""A confusion matrix as a mergeable sufficient statistic.

    Parameters
    ----------
    matrix : array-like of shape (n_classes, n_classes)
        Non-negative integer counts, rows = true class, columns = predicted class.

    Merging is addition, so per-shard evaluation merged equals pooled evaluation:

    .. math:: M(\mathcal{D}_1 \cup \mathcal{D}_2) = M(\mathcal{D}_1) + M(\mathcal{D}_2)

    Example
    -------
    >>> a = Confusion.from_predictions([0, 1], [0, 0], n_classes=2)
    >>> b = Confusion.from_predictions([1], [1], n_classes=2)
    >>> (a + b).matrix.tolist(), (a + b).accuracy()
    ([[1, 0], [1, 1]], 0.6666666666666666)
    """

    matrix: np.ndarray

    def __post_init__(self) -> None:
        m = np.asarray(self.matrix)
        if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 1:
            raise ValueError(
                f"matrix must be square of shape (n_classes, n_classes), got {m.shape}"
            )
        if m.dtype.kind == "f":
            if not np.all(np.isfinite(m)) or not np.all(m == np.round(m)):
                raise ValueError("matrix must hold integer counts")
        elif m.dtype.kind not in "iu":
            raise ValueError(f"matrix must hold integer counts, got dtype {m.dtype}")
        if np.any(m < 0):
            raise ValueError(f"matrix counts must be >= 0, got {m[m < 0][0].item()!r}")
        m = m.astype(np.int64, copy=True)
        m.setflags(write=False)
        object.__setattr__(self, "matrix", m)

    # -- construction and merge -------------------------------------------------------------

    @classmethod
    def from_predictions(cls, y_true, y_pred, n_classes: int) -> Confusion:
        """Confusion of ``y_true``, ``y_pred`` (n_samples,); see :func:`confusion_matrix`."""
        return cls(confusion_matrix(y_true, y_pred, n_classes))

    @classmethod
    def zeros(cls, n_classes: int) -> Confusion:
        """The empty statistic (identity of :meth:`merge`) of shape (n_classes, n_classes)."""
        n_classes = _check_n_classes(n_classes)
        return cls(np.zeros((n_classes, n_classes), dtype=np.int64))

    def merge(self, other: Confusion) -> Confusion:
        r"""Pooled statistic of two disjoint evaluations: :math:`M = M_1 + M_2`."""
        if not isinstance(other, Confusion):
            raise TypeError(f"can only merge with a Confusion, got {type(other).__name__}")
        if other.matrix.shape != self.matrix.shape:
            raise ValueError(
                f"cannot merge confusions of shapes {self.matrix.shape} and {other.matrix.shape}"
            )
        return Confusion(self.matrix + other.matrix)

    def __add__(self, other: Confusion) -> Confusion:
        return self.merge(other)

    def __radd__(self, other) -> Confusion:
        # lets sum(confusions) start from the integer 0
        if isinstance(other, int) and other == 0:
            return self
        return self.merge(other)

    # -- properties ----------------------------------------------------------------------------

    @property
    def n_classes(self) -> int:
        return self.matrix.shape[0]

    @property
    def n_samples(self) -> int:
        return int(self.matrix.sum())

    def support(self) -> np.ndarray:
        r"""Test samples per true class, of shape (n_classes,): :math:`N_c = \sum_j M_{cj}`."""
        return self.matrix.sum(axis=1)

    # -- metrics -------------------------------------------------------------------------------

    def accuracy(self) -> float:
        r"""Sample accuracy, NaN for an empty statistic.

        .. math:: \mathrm{acc} = \sum_c M_{cc} / \sum_{c,j} M_{cj}
        """
        total = self.matrix.sum()
        return float(np.trace(self.matrix) / total) if total > 0 else math.nan

    def per_class_recall(self) -> np.ndarray:
        r"""Recall of each class, of shape (n_classes,); NaN for a class with no samples.

        .. math:: r_c = M_{cc} / \sum_j M_{cj}
        """
        support = self.support()
        recall = np.full(self.n_classes, np.nan)
        has = support > 0
        recall[has] = np.diag(self.matrix)[has] / support[has]
        return recall

    def balanced_accuracy(self, classes=None) -> float:
        r"""Mean recall over ``classes`` that have samples; NaN if none has.

        .. math:: \mathrm{bacc}_S = \frac{1}{|S'|} \sum_{c \in S'} r_c, \quad
                  S' = \{c \in S : N_c > 0\}

        Parameters
        ----------
        classes : None, bool array of shape (n_classes,), or int array of class indices
            The classes :math:`S` to average over (default: all classes).
        """
        recall = self.per_class_recall()
        selected = recall[self._class_mask(classes)]
        selected = selected[~np.isnan(selected)]
        return float(selected.mean()) if selected.size else math.nan

    def f1(self, c: int) -> float:
        r"""F1 score of class ``c`` (0 when it is neither present nor predicted, as sklearn's
        ``zero_division=0``).

        .. math:: F1_c = \frac{2\,\mathrm{TP}_c}{2\,\mathrm{TP}_c + \mathrm{FP}_c + \mathrm{FN}_c}
        """
        c = _check_class(c, self.n_classes, "c")
        tp = self.matrix[c, c]
        fp = self.matrix[:, c].sum() - tp
        fn = self.matrix[c, :].sum() - tp
        denom = 2 * tp + fp + fn
        return float(2 * tp / denom) if denom > 0 else 0.0

    def _class_mask(self, classes) -> np.ndarray:
        n = self.n_classes
        if classes is None:
            return np.ones(n, dtype=bool)
        arr = np.asarray(classes)
        if arr.dtype == bool:
            if arr.shape != (n,):
                raise ValueError(f"a boolean class mask must have shape ({n},), got {arr.shape}")
            return arr
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError(
                f"classes must be a boolean mask of shape ({n},) or 1-D class indices, "
                f"got shape {arr.shape} and dtype {arr.dtype}"
            )
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            bad = arr[(arr < 0) | (arr >= n)][0].item()
            raise ValueError(f"class index {bad!r} outside the valid range [0, {n})")
        mask = np.zeros(n, dtype=bool)
        mask[arr.astype(np.int64)] = True
        return mask


# --------------------------------------------------------------------------- class groups


def unseen_classes(train_counts) -> np.ndarray:
    r"""Locally unseen classes of one client.

    Parameters
    ----------
    train_counts : array-like of shape (n_classes,)
        Per-class training counts :math:`n_c^{(k)} \ge 0`.

    Returns
    -------
    bool ndarray of shape (n_classes,)
        .. math:: \mathcal{U}^{(k)} = \{c : n_c^{(k)} = 0\}

    Example
    -------
    >>> unseen_classes([10, 1, 0]).tolist()
    [False, False, True]
    """
    return _as_counts(train_counts) == 0


def rare_classes(train_counts, rare_ratio: float = RARE_RATIO) -> np.ndarray:
    r"""Locally rare classes: observed, with less than ``rare_ratio`` times the uniform share.

    Parameters
    ----------
    train_counts : array-like of shape (n_classes,)
        Per-class training counts :math:`n_c^{(k)} \ge 0`.
    rare_ratio : float > 0
        :math:`\rho`; the paper does not define "rare", so this is a parameter (default 0.5).

    Returns
    -------
    bool ndarray of shape (n_classes,)
        .. math:: \mathcal{R}^{(k)} = \{c : n_c^{(k)} > 0,\ n_c^{(k)} / n^{(k)} < \rho / C\}

    Example
    -------
    >>> rare_classes([10, 1, 0]).tolist()  # 1/11 < 0.5/3
    [False, True, False]
    """
    counts = _as_counts(train_counts)
    rare_ratio = _check_rare_ratio(rare_ratio)
    return _rare(counts, rare_ratio)


def _rare(counts: np.ndarray, rare_ratio: float) -> np.ndarray:
    # n_c / n < rho / C  <=>  n_c * C < rho * n  (no division; n = 0 gives no rare class)
    n_classes = counts.shape[0]
    return (counts > 0) & (counts * n_classes < rare_ratio * counts.sum())


# --------------------------------------------------------------------------- pooled accuracy


def _pool_weights(support: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
    """The client's class mix renormalised over the classes the pool holds, of shape (C,);
    ``None`` when no class of the mix has a pool sample (or the client has no training sample)."""
    held = np.where(support > 0, counts, 0.0)  # (C,)
    total = held.sum()
    return held / total if total > 0 else None


def _check_pool(pool, n_classes: int, name: str = "pool") -> Confusion:
    if not isinstance(pool, Confusion):
        raise TypeError(f"{name} must be a Confusion, got {type(pool).__name__}")
    if pool.n_classes != n_classes:
        raise ValueError(
            f"{name} has {pool.n_classes} classes but train_counts has {n_classes}; "
            "every client predicts over all C classes"
        )
    return pool


def _pool_mix(pool_class_counts, train_counts) -> tuple[np.ndarray, np.ndarray] | None:
    """The client's renormalised class mix and the pool's counts over the classes the pool holds,
    each of shape (k,); ``None`` where the pooled score is NaN."""
    counts = _as_counts(train_counts)
    pool = _as_counts(pool_class_counts, "pool_class_counts")
    if pool.shape != counts.shape:
        raise ValueError(
            f"pool_class_counts has {pool.shape[0]} classes but train_counts has {counts.shape[0]}; "
            "give both over all C classes"
        )
    weights = _pool_weights(pool, counts)
    if weights is None:
        return None
    has = pool > 0
    return weights[has], pool[has]


def _pooled(pool: Confusion, counts: np.ndarray) -> float:
    weights = _pool_weights(pool.support(), counts)
    if weights is None:
        return math.nan
    recall = np.nan_to_num(pool.per_class_recall())  # NaN only where the weight is 0
    return float(np.sum(weights * recall))


def pooled_accuracy(pool: Confusion, train_counts) -> float:
    r"""A client's accuracy on a held-out pool, each class's recall weighted by its class mix.

    Parameters
    ----------
    pool : Confusion of shape (C, C)
        The client's predictor on its pool (class-balanced, drawn from the client's own input
        distribution; the global test set under label skew).
    train_counts : array-like of shape (C,)
        The client's per-class training counts :math:`n_c`.

    Returns
    -------
    float
        With :math:`\pi_c = n_c / n` and :math:`r_c` the pool's recalls,

        .. math:: A_{\mathrm{pooled}} = \sum_c \pi_c\, r_c ,

        the expected accuracy on test images drawn from the client's own label distribution.
        A class with :math:`\pi_c > 0` but no pool sample is dropped and :math:`\pi` renormalised
        over the classes the pool holds (on a class-balanced pool this never happens); NaN when
        the client has no training sample or the pool none of its classes.

    Example
    -------
    >>> pool = Confusion(np.array([[8, 2], [5, 5]]))  # recalls 0.8 and 0.5
    >>> round(pooled_accuracy(pool, [3, 1]), 6)       # 0.75 * 0.8 + 0.25 * 0.5
    0.725
    """
    counts = _as_counts(train_counts)
    return _pooled(_check_pool(pool, counts.shape[0]), counts)


def pooled_standard_error(pool: Confusion, train_counts) -> float:
    r"""Binomial standard error of :func:`pooled_accuracy`: the noise of the finite pool.

    Each class's :math:`N_c` pool images are independent Bernoulli(:math:`r_c`) draws, so

    .. math:: \mathrm{SE} = \sqrt{\sum_c \pi_c^2\, \frac{r_c (1 - r_c)}{N_c}}

    with the pool's recalls plugged in for :math:`r_c` and :math:`\pi` renormalised as in
    :func:`pooled_accuracy` (classes without pool sample dropped). NaN where the pooled score is.
    It is the test-sample noise only: the predictor is held fixed.

    Parameters
    ----------
    pool : Confusion of shape (C, C)
    train_counts : array-like of shape (C,)

    Example
    -------
    >>> pool = Confusion(np.array([[8, 2], [5, 5]]))
    >>> round(pooled_standard_error(pool, [3, 1]), 6)  # sqrt(.75^2 * .8 * .2 / 10 + .25^2 * .5 * .5 / 10)
    0.102774
    """
    counts = _as_counts(train_counts)
    pool = _check_pool(pool, counts.shape[0])
    support = pool.support()
    weights = _pool_weights(support, counts)
    if weights is None:
        return math.nan
    has = support > 0
    r = pool.per_class_recall()[has]
    return float(np.sqrt(np.sum(weights[has] ** 2 * r * (1.0 - r) / support[has])))


def pooled_effective_size(pool_class_counts, train_counts) -> float:
    r"""The number of independent images the pooled score rests on.

    Parameters
    ----------
    pool_class_counts : array-like of shape (C,)
        The pool's images per class :math:`N_c`.
    train_counts : array-like of shape (C,)
        The client's per-class training counts (its class mix :math:`\pi`, renormalised as in
        :func:`pooled_accuracy`).

    Returns
    -------
    float
        .. math:: n_{\mathrm{eff}} = \Big(\sum_{c : N_c > 0} \frac{\pi_c^2}{N_c}\Big)^{-1}

        the size of a plain sample whose mean has the pooled score's variance: when every class
        has the same recall :math:`r`, :math:`\operatorname{Var} = \sum_c \pi_c^2 r (1-r) / N_c
        = r(1-r) / n_{\mathrm{eff}}`. By Cauchy-Schwarz :math:`n_{\mathrm{eff}} \le \sum_{c:
        \pi_c > 0} N_c`, with equality when :math:`\pi_c \propto N_c`: a uniform mix over a pool of
        :math:`N/C` images per class gives :math:`N`; a client of one class, that class's
        :math:`N_c`. NaN where the pooled score is.

    Example
    -------
    >>> pooled_effective_size([100, 100, 100, 100], [5, 5, 5, 5])  # uniform mix: all 400 images
    400.0
    >>> round(pooled_effective_size([100, 100, 100, 100], [9, 1, 0, 0]), 2)  # 1 / (.81 / 100 + .01 / 100)
    121.95
    """
    mix = _pool_mix(pool_class_counts, train_counts)
    if mix is None:
        return math.nan
    weights, n_c = mix
    return float(1.0 / np.sum(weights ** 2 / n_c))


def pooled_largest_step(pool_class_counts, train_counts) -> float:
    r"""The most one pool image can move :func:`pooled_accuracy`: :math:`\max_c \pi_c / N_c`
    over the classes the pool holds (:math:`\pi` renormalised as there), a fraction; NaN where
    the pooled score is. It is the pooled score's resolution: a difference smaller than one
    image's step cannot be measured on that pool.

    Example
    -------
    >>> round(pooled_largest_step([100, 100, 40, 40], [9, 1, 0, 0]), 12)  # 0.9 / 100 > 0.1 / 100
    0.009
    """
    mix = _pool_mix(pool_class_counts, train_counts)
    return math.nan if mix is None else float(np.max(mix[0] / mix[1]))


# --------------------------------------------------------------------------- per-client abilities


def client_abilities(
    local: Confusion,
    global_: Confusion,
    train_counts,
    *,
    rare_ratio: float = RARE_RATIO,
    f1_class: int | None = None,
    pool: Confusion | None = None,
) -> dict[str, float]:
    r"""The assessed abilities of one client's deployed predictor.

    Parameters
    ----------
    local : Confusion of shape (C, C)
        The predictor on the client's local test split.
    global_ : Confusion of shape (C, C)
        The same predictor on the shared class-balanced global test set.
    train_counts : array-like of shape (C,)
        The client's per-class training counts :math:`n_c^{(k)}`.
    rare_ratio : float > 0
        Rare threshold :math:`\rho` of :func:`rare_classes`.
    f1_class : int, optional
        A designated class whose global-test F1 is reported as ``"f1"``.
    pool : Confusion of shape (C, C), optional
        The predictor on the client's own held-out pool (:attr:`fedlib.federation.ClientData.pool`);
        ``None``: the pool is the global test set (``global_``), as under label skew, where the
        clients' inputs come from one distribution.

    Returns
    -------
    dict
        ``local`` (sample accuracy), ``pooled`` (:func:`pooled_accuracy` on the pool), ``global``
        (mean recall over all classes), ``unseen`` and ``rare`` (mean recall over
        :math:`\mathcal{U}^{(k)}`, :math:`\mathcal{R}^{(k)}`; NaN when empty) and ``f1`` when
        ``f1_class`` is given:

        .. math:: A_S^{(k)} = \frac{1}{|S|} \sum_{c \in S} r_c^{\mathrm{glob}}, \quad
                  S \in \{[C], \mathcal{U}^{(k)}, \mathcal{R}^{(k)}\}, \qquad
                  A_{\mathrm{pooled}}^{(k)} = \sum_c \pi_c^{(k)} r_c^{\mathrm{pool}}
    """
    named = [("local", local), ("global_", global_)] + ([] if pool is None else [("pool", pool)])
    for name, conf in named:
        if not isinstance(conf, Confusion):
            raise TypeError(f"{name} must be a Confusion, got {type(conf).__name__}")
    counts = _as_counts(train_counts)
    n_classes = counts.shape[0]
    for name, conf in named:
        if conf.n_classes != n_classes:
            raise ValueError(
                f"{name} has {conf.n_classes} classes but train_counts has {n_classes}; "
                "every client predicts over all C classes"
            )
    rare_ratio = _check_rare_ratio(rare_ratio)
    out = {
        "local": local.accuracy(),
        "pooled": _pooled(global_ if pool is None else pool, counts),
        "global": global_.balanced_accuracy(),
        "unseen": global_.balanced_accuracy(counts == 0),
        "rare": global_.balanced_accuracy(_rare(counts, rare_ratio)),
    }
    if f1_class is not None:
        out["f1"] = global_.f1(_check_class(f1_class, n_classes, "f1_class"))
    return out


def client_predictions_abilities(
    local_true,
    local_pred,
    global_true,
    global_pred,
    train_counts,
    *,
    rare_ratio: float = RARE_RATIO,
    f1_class: int | None = None,
    pool_true=None,
    pool_pred=None,
) -> dict[str, float]:
    """:func:`client_abilities` from label arrays: the one routine that both the round loop and
    frozen-feature evaluation (:class:`fedlib.posthoc.FrozenFeatures`) use.

    ``local_true`` / ``local_pred`` are the client's local test labels and predictions (shape
    (n_local,)), ``global_true`` / ``global_pred`` those on the global test set (n_global,),
    ``train_counts`` its per-class training counts (C,), ``pool_true`` / ``pool_pred`` those on
    the client's own pool (n_pool,), both or neither (then the pool is the global test set).

    >>> client_predictions_abilities([0, 1], [0, 0], [0, 1], [0, 1], [3, 0])["unseen"]
    1.0
    >>> ab = client_predictions_abilities([0], [0], [0, 1], [0, 1], [3, 1], pool_true=[0, 0, 1, 1], pool_pred=[0, 1, 1, 1])
    >>> ab["pooled"]  # 0.75 * 1/2 + 0.25 * 1 on the pool (on the global test it would be 1.0)
    0.625
    """
    if (pool_true is None) != (pool_pred is None):
        given, missing = ("pool_true", "pool_pred") if pool_pred is None else ("pool_pred", "pool_true")
        raise ValueError(f"{given} is given but {missing} is None; give both (the client's own pool) or neither "
                         "(the pool is the global test set)")
    counts = _as_counts(train_counts)
    n_classes = counts.shape[0]
    local = Confusion.from_predictions(local_true, local_pred, n_classes)
    glob = Confusion.from_predictions(global_true, global_pred, n_classes)
    pool = None
    if pool_true is not None:
        pool_true = _as_labels(pool_true, "pool_true", n_classes)
        pool_pred = _as_labels(pool_pred, "pool_pred", n_classes)
        if pool_true.shape != pool_pred.shape:
            raise ValueError(f"pool_true and pool_pred must have the same shape, got {pool_true.shape} and "
                             f"{pool_pred.shape}")
        pool = Confusion(_confusion(pool_true, pool_pred, n_classes))
    return client_abilities(local, glob, counts, rare_ratio=rare_ratio, f1_class=f1_class, pool=pool)


def client_floor(abilities: Mapping) -> float:
    r"""Client floor :math:`F^{(k)}`: the weakest assessed ability among local, unseen, rare.

    NaN (not assessed) and missing abilities are ignored; NaN if none is assessed.

    .. math:: F^{(k)} = \min\{A_a^{(k)} : a \in \{\mathrm{local}, \mathrm{unseen},
              \mathrm{rare}\},\ A_a^{(k)} \text{ defined}\}

    Example
    -------
    >>> client_floor({"local": 0.9, "global": 0.1, "unseen": float("nan"), "rare": 0.6})
    0.6
    """
    if not any(a in abilities for a in FLOOR_ABILITIES):
        raise ValueError(
            f"abilities must contain at least one of {FLOOR_ABILITIES}, "
            f"got keys {list(abilities.keys())}"
        )
    values = np.array([abilities.get(a, np.nan) for a in FLOOR_ABILITIES], dtype=float)
    return float(_row_floor(values[None, :])[0])


def _row_floor(values: np.ndarray) -> np.ndarray:
    """Row-wise min ignoring NaN, of shape (m,) from (m, n_abilities); NaN for an all-NaN row."""
    filled = np.where(np.isnan(values), np.inf, values).min(axis=1)
    return np.where(np.isinf(filled), np.nan, filled)


# --------------------------------------------------------------------------- client summaries


def tail_mean(values, fraction: float) -> float:
    r"""Mean of the lowest :math:`\lceil q\,m \rceil` defined values.

    Parameters
    ----------
    values : array-like of shape (n_clients,)
        Per-client values; NaN marks a client where the ability is not defined.
    fraction : float in (0, 1]
        :math:`q`; 0.2 gives the bottom-20 % mean, 0.25 the "@25" floor.

    Returns
    -------
    float
        .. math:: \operatorname{tail}_q(a) = \frac{1}{k} \sum_{i=1}^{k} a_{(i)}, \quad
                  k = \lceil q\,m \rceil

        with :math:`a_{(1)} \le a_{(2)} \le \dots` the :math:`m` defined values; NaN if
        :math:`m = 0`.

    Example
    -------
    >>> tail_mean([0.9, 0.1, float("nan"), 0.5, 0.7, 0.3, 0.8, 0.6], 0.25)  # 7 defined -> 2 lowest
    0.2
    """
    fraction = _check_fraction(fraction)
    arr = _as_values(values, "values")
    return _tail(arr, fraction)


def _as_values(values, name: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric, got {values!r}") from err
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_clients,), got shape {arr.shape}")
    if np.any(np.isinf(arr)):
        bad = arr[np.isinf(arr)][0].item()
        raise ValueError(f"{name} must be finite or NaN (not defined), got {bad!r}")
    return arr


def tail_count(fraction: float, m: int) -> int:
    r"""How many of ``m`` values a tail of share ``fraction`` holds: :math:`\max(1, \lceil q\,m \rceil)`
    (what :func:`tail_mean` and the @25 floors average).

    >>> tail_count(0.25, 5), tail_count(0.07, 100), tail_count(0.25, 1)
    (2, 7, 1)
    """
    # round first so that e.g. 0.07 * 100 = 7.000000000000001 gives 7, not 8
    return max(1, math.ceil(round(fraction * m, 9)))


_tail_count = tail_count  # the private name, kept for its callers


def lowest_tail(values, fraction: float = FLOOR_FRACTION) -> np.ndarray:
    """The :func:`tail_count` smallest defined (non-NaN) ``values``, sorted, shape (k,); empty without one.

    >>> lowest_tail(np.array([5.0, 1.0, np.nan, 4.0, 2.0, 3.0])).tolist()  # ceil(0.25 * 5) = 2 of 5 defined
    [1.0, 2.0]
    """
    arr = np.asarray(values, dtype=float).ravel()
    defined = np.sort(arr[~np.isnan(arr)])
    return defined[: tail_count(fraction, defined.size)] if defined.size else defined


def _tail(arr: np.ndarray, fraction: float) -> float:
    lowest = lowest_tail(arr, fraction)
    return float(lowest.mean()) if lowest.size else math.nan


def _summary_row(arr: np.ndarray) -> dict[str, float]:
    defined = arr[~np.isnan(arr)]
    if defined.size == 0:
        nan = math.nan
        return dict(mean=nan, worst=nan, bottom20=nan, gap=nan, at25=nan, n_clients=0)
    return dict(
        mean=float(defined.mean()),
        worst=float(defined.min()),
        bottom20=_tail(defined, _BOTTOM_FRACTION),
        gap=float(defined.max() - defined.min()),
        at25=_tail(defined, _FLOOR_FRACTION),
        n_clients=int(defined.size),
    )


def _check_per_client(per_client, required: tuple[str, ...] = ()) -> list[str]:
    """Validate a per-client ability table; return its ability columns in ABILITIES order."""
    if not isinstance(per_client, pd.DataFrame):
        raise TypeError(f"per_client must be a pandas DataFrame, got {type(per_client).__name__}")
    unknown = [c for c in per_client.columns if c not in ABILITIES]
    if unknown:
        raise ValueError(
            f"per_client has unknown column(s) {unknown}; valid ability columns are {ABILITIES} "
            "(put client identifiers in the index)"
        )
    missing = [c for c in required if c not in per_client.columns]
    if missing:
        raise ValueError(
            f"per_client lacks required column(s) {missing}; it has {list(per_client.columns)}"
        )
    columns = [a for a in ABILITIES if a in per_client.columns]
    if not columns:
        raise ValueError(f"per_client has no ability column; valid ones are {ABILITIES}")
    for col in columns:
        arr = _as_values(per_client[col].to_numpy(), f"column {col!r}")
        bad = ~np.isnan(arr) & ((arr < 0) | (arr > 1))
        if np.any(bad):
            raise ValueError(
                f"column {col!r} holds {arr[bad][0].item()!r}; "
                "abilities are fractions in [0, 1] or NaN"
            )
    return columns


def summarize(per_client: pd.DataFrame) -> pd.DataFrame:
    r"""Client-level summaries of each ability.

    Parameters
    ----------
    per_client : DataFrame of shape (n_clients, n_abilities)
        One row per client, columns among ``local, pooled, global, unseen, rare, f1`` (fractions in
        [0, 1]; NaN = not defined for that client). Client identifiers belong in the index.

    Returns
    -------
    DataFrame of shape (n_abilities, 6)
        Index ``ability``; columns ``mean, worst, bottom20, gap, at25, n_clients`` computed over the
        :math:`m` = ``n_clients`` clients where the ability is defined (all NaN when :math:`m=0`):

        .. math:: \mathrm{worst} = \min_k a^{(k)},\ \mathrm{bottom20} = \operatorname{tail}_{0.2}(a),\
                  \mathrm{gap} = \max_k a^{(k)} - \min_k a^{(k)},\ \mathrm{at25} = \operatorname{tail}_{0.25}(a)
    """
    columns = _check_per_client(per_client)
    rows = {c: _summary_row(per_client[c].to_numpy(dtype=float)) for c in columns}
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index.name = "ability"
    return out.astype({"n_clients": "int64"})


def rescore(federation, predictions, rare_ratio: float = RARE_RATIO, f1_class: int | None = None) -> pd.DataFrame:
    """Client × ability table of kept predictions, scored again (e.g. under another rare
    threshold) without deploying anything again.

    Parameters
    ----------
    federation : the :class:`fedlib.federation.Federation` the predictions were made on (its
        clients' local test labels and training counts, the global test labels)
    predictions : ``{client: (local test predictions, global test predictions)}``, label arrays
        as :attr:`fedlib.results.RunResult.predictions` holds them (``RunOptions(keep_predictions=True)``)
        or :func:`fedlib.run.evaluate_deployment` fills them (``predictions={}``); a third
        entry, the predictions on the client's own pool, may follow
    rare_ratio, f1_class : as :func:`client_predictions_abilities`

    Returns
    -------
    pandas.DataFrame
        One row per client (sorted), one column per ability: what :func:`protocol_summary` takes.
        ``pooled`` is scored on the global test predictions for a client whose pool is the global
        test set (``ClientData.pool is None``); for a client with a pool of its own on the third
        entry (which the round loop keeps for such a client), and is NaN without it.
    """
    rows = {}
    for k in sorted(predictions):
        entry = tuple(predictions[k])
        if len(entry) not in (2, 3):
            raise ValueError(f"predictions[{k}] must be (local, global) or (local, global, pool) label arrays, "
                             f"got {len(entry)} entries")
        local_pred, global_pred = entry[:2]
        client = federation.clients[k]
        own = getattr(client, "pool", None)
        pool = {} if own is None else {"pool_true": own.labels_np, "pool_pred": entry[2]} if len(entry) == 3 else None
        rows[k] = client_predictions_abilities(client.test.labels_np, local_pred, federation.global_test.labels_np,
                                               global_pred, client.train_counts(federation.n_classes),
                                               rare_ratio=rare_ratio, f1_class=f1_class, **(pool or {}))
        if pool is None:
            rows[k]["pooled"] = math.nan
    return pd.DataFrame.from_dict(rows, orient="index")


def protocol_summary(per_client: pd.DataFrame) -> dict[str, float]:
    r"""The flat row of numbers a results table reports for one run.

    Parameters
    ----------
    per_client : DataFrame of shape (n_clients, n_abilities)
        As for :func:`summarize`; must contain ``local, global, unseen, rare`` (``pooled`` and
        ``f1`` optional).

    Returns
    -------
    dict
        ``local, pooled, global, unseen, rare`` (means over clients), ``L@25, P@25, U@25, R@25``
        (@25 floors of local, pooled, unseen, rare), ``F@25``, ``worst_a, bottom20_a, gap_a`` for ``a`` in
        ``local, pooled, global``, and ``f1`` (mean) when present. NaN = "n/a"; the ``pooled`` keys
        are NaN for a table without that column (one made before the ability existed).

        .. math:: \mathrm{F@25} = \operatorname{tail}_{0.25}\big(F^{(1)}, \dots, F^{(K)}\big),
                  \quad F^{(k)} = \min_{a\ \mathrm{assessed}} A_a^{(k)}
    """
    _check_per_client(per_client, required=("local", "global", "unseen", "rare"))
    table = summarize(per_client)
    floors = _row_floor(per_client[list(FLOOR_ABILITIES)].to_numpy(dtype=float))  # (n_clients,)
    out = {a: float(table.loc[a, "mean"]) if a in table.index else math.nan
           for a in ("local", "pooled", "global", "unseen", "rare")}
    out["L@25"] = float(table.loc["local", "at25"])
    out["P@25"] = float(table.loc["pooled", "at25"]) if "pooled" in table.index else math.nan
    out["U@25"] = float(table.loc["unseen", "at25"])
    out["R@25"] = float(table.loc["rare", "at25"])
    out["F@25"] = _tail(floors, _FLOOR_FRACTION)
    for a in ("local", "pooled", "global"):
        for stat in ("worst", "bottom20", "gap"):
            out[f"{stat}_{a}"] = float(table.loc[a, stat]) if a in table.index else math.nan
    if "f1" in table.index:
        out["f1"] = float(table.loc["f1", "mean"])
    return out


def floor_at25(per_client: pd.DataFrame, abilities: tuple[str, ...] = FLOOR_ABILITIES,
               fraction: float = _FLOOR_FRACTION) -> float:
    r"""The @25 client floor over a chosen set of abilities: ``F@25`` with another ability in the
    place of ``local``.

    :func:`protocol_summary`'s ``F@25`` takes each client's weakest of ``local, unseen, rare``
    before the tail; a client's local test split may hold a handful of images, so a chapter can
    put the client-weighted recall ``pooled`` (:func:`pooled_accuracy`, read on the global test
    set) in the place of ``local``:

    .. math:: F^{(k)}_S = \min \{A^{(k)}_a : a \in S\} \setminus \{\mathrm{NaN}\}, \qquad
              \operatorname{tail}_{q}\big(F^{(1)}_S, \dots, F^{(K)}_S\big)

    Parameters
    ----------
    per_client : DataFrame of shape (n_clients, n_abilities)
        As for :func:`summarize`; must contain every column of ``abilities``.
    abilities : tuple of str, default :data:`FLOOR_ABILITIES`
        The abilities whose minimum is each client's floor (with the default, the result is
        :func:`protocol_summary`'s ``F@25``).
    fraction : float in (0, 1], default 0.25
        The tail :math:`q`.

    Returns
    -------
    float
        NaN when no client has a defined ability of ``abilities``.

    Example
    -------
    >>> t = pd.DataFrame({"local": [1.0, 0.2, 0.9, 0.8], "pooled": [0.9, 0.8, 0.7, 0.95],
    ...                   "global": [0.5] * 4, "unseen": [0.6, float("nan"), 0.8, 0.9], "rare": [float("nan")] * 4})
    >>> floor_at25(t), floor_at25(t, ("pooled", "unseen", "rare"))  # the lowest of 4 clients' floors
    (0.2, 0.6)
    """
    if not isinstance(abilities, tuple) or not abilities or any(a not in ABILITIES for a in abilities):
        raise ValueError(f"abilities must be a non-empty tuple of names among {ABILITIES}, got {abilities!r}")
    _check_per_client(per_client, required=abilities)
    fraction = _check_fraction(fraction)
    floors = _row_floor(per_client[list(abilities)].to_numpy(dtype=float))  # (n_clients,)
    return _tail(floors, fraction)


def format_metric(value, digits: int = 1, percent: bool = True) -> str:
    """Format a metric for a table or prose: ``"n/a"`` for NaN/None, else e.g. ``"87.5"``.

    Parameters
    ----------
    value : float or None
        A fraction in [0, 1] (or any number when ``percent=False``).
    digits : int >= 0
        Decimals shown.
    percent : bool
        Multiply by 100 (the paper reports percentages).

    Example
    -------
    >>> format_metric(0.875), format_metric(float("nan")), format_metric(0.5, 2, percent=False)
    ('87.5', 'n/a', '0.50')
    """
    if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)) or digits < 0:
        raise ValueError(f"digits must be an integer >= 0, got {_show(digits)}")
    if value is None:
        return "n/a"
    if value is pd.NA or value is pd.NaT:
        return "n/a"
    if not is_real(value):
        raise TypeError(f"value must be a real number, NaN or None, got {_show(value)}")
    if math.isnan(value):
        return "n/a"
    x = float(value) * (100.0 if percent else 1.0)
    return f"{x:.{int(digits)}f}"
