r"""Statistical heads: classifiers fitted on a frozen backbone's features from class moments.

Every head follows one estimator contract (:class:`Head`, :mod:`fedlib.heads.base`):
``__init__`` stores hyper-parameters, ``fit(moments, ...)`` fits from the additive class moments
that clients send (:class:`fedlib.stats.ClassMoments`, or a list of them merged by addition; no
feature vector reaches the server), ``fit_features(z, y, n_classes)`` from features directly,
``decision_function(z)`` gives float64 scores (n, C) and ``predict(z)`` their argmax;
``classes_`` marks the classes a fitted head can predict (a class no client has seen never is).

One module per family. What each head needs from the clients:

=========================  ======================================================  =========================================
head                       paper                                                   what the clients send
=========================  ======================================================  =========================================
:class:`NearestClassMean`  Mensink et al., TPAMI 2013 (iCaRL's NCM rule)           counts, sums
:class:`MahalanobisNCM`    MPT, Jang et al., arXiv:2609.12771, Eq. (3)             counts, sums, total Gram (per-class Grams
                                                                                   to pool a subset of classes only)
:class:`LDAHead`           GH-LDA (scikit-learn's ``LinearDiscriminantAnalysis``)  counts, sums, total Gram
:class:`FedCGSHead`        FedCGS, Guan et al., arXiv:2503.06962                   counts, sums, total Gram
:class:`FedNCMHead`        FedNCM, Legate et al., NeurIPS 2023                     counts, sums
:class:`Fed3RHead`         Fed3R, Fanì et al., ICML 2024                           counts, sums, total Gram
:class:`CCVRHead`          CCVR, Luo et al., NeurIPS 2021                          counts, sums, **per-class Grams**
:class:`MMS`               FedGRC, Section IV-B, Eq. (22)-(31)                     counts, sums, total Gram
:class:`SASP`              FedGRC, Section IV-C, Eq. (32)-(36)                     the server's MMS; the client's own counts
                                                                                   and sums stay on the client
=========================  ======================================================  =========================================

"Total Gram" is :math:`\sum_c G_c = \sum_i z_i z_i^\top` (d, d), "per-class Grams" the
:math:`G_c` (C, d, d): about C times more bytes. Each head declares the form it needs in
:attr:`Head.needs`; :func:`gram_form` gives the form a set of heads needs, and
``ClassMoments.from_features(..., grams="total")`` / :func:`fedlib.stats.feature_moments` (and the
terminal statistics round :func:`fedlib.posthoc.collect_statistics`) compute the compact one.

Modules: :mod:`fedlib.heads.prototype` (:class:`NearestClassMean`, :class:`MahalanobisNCM`),
:mod:`fedlib.heads.gaussian` (:class:`LDAHead`, :class:`FedCGSHead`, :func:`gaussian_linear_head`),
:mod:`fedlib.heads.fedncm`, :mod:`fedlib.heads.fed3r`, :mod:`fedlib.heads.ccvr` (:class:`CCVRHead`,
:func:`ccvr_calibrate`, the virtual-feature re-training), :mod:`fedlib.heads.mms` (:class:`MMS`,
:class:`SASP`, :func:`layer_scales`); the shared linear algebra and input checks live in one private
module (``fedlib.heads._linalg``), of which :func:`spd_inverse` and :func:`regularized_covariance`
are public.

Conventions (bad input never yields a NaN in a head): a class with no sample in the federation
has a zero weight row and an intercept (or score) of :math:`-\infty`; fitting with no sample at
all, non-finite moments, or bad hyper-parameters is a ``ValueError`` naming the value; a singular
covariance without ridge is pseudo-inverted (scikit-learn's ``lsqr`` minimum-norm solution).
"""

from __future__ import annotations

from collections.abc import Iterable

from ._linalg import regularized_covariance, spd_inverse
from .base import NEEDS, Head, LinearHead
from .ccvr import CCVRHead, ccvr_calibrate
from .fed3r import Fed3RHead
from .fedncm import FedNCMHead
from .gaussian import PRIORS, FedCGSHead, LDAHead, gaussian_linear_head
from .mms import DEFAULT_GAMMA, DEFAULT_M0, MMS, SASP, ZERO_VARIANCE_RTOL, adaptation_weights, layer_scales, scale_moments
from .prototype import MahalanobisNCM, NearestClassMean, mahalanobis


def gram_form(heads: Iterable[Head]) -> str:
    """The Gram form the clients must send for all of ``heads``: ``"class"`` if any needs the
    per-class Gram matrices, else ``"total"`` (the compact statistics).

    >>> gram_form([LDAHead(), SASP()]), gram_form([MMS(), CCVRHead()])
    ('total', 'class')
    """
    heads = list(heads)
    bad = [h for h in heads if not isinstance(h, Head)]
    if bad:
        raise ValueError(f"not a head: {bad[0]!r}; valid: instances of fedlib.heads.Head")
    return "class" if any(h.needs == "class_grams" for h in heads) else "total"


__all__ = [
    "CCVRHead", "DEFAULT_GAMMA", "DEFAULT_M0", "FedCGSHead", "Fed3RHead", "FedNCMHead", "Head", "LDAHead", "LinearHead", "MMS",
    "MahalanobisNCM", "NEEDS", "NearestClassMean", "PRIORS", "SASP", "ZERO_VARIANCE_RTOL", "adaptation_weights",
    "ccvr_calibrate", "gaussian_linear_head", "gram_form", "layer_scales", "mahalanobis", "regularized_covariance",
    "scale_moments", "spd_inverse",
]
