r"""Prediction stability of SASP under mean adaptation: the exact score change, the budget, the
certified margin and the risk bounds.

From FedGRC (*Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive
Statistical Personalization for Federated Learning*), Section IV-C, Eq. (37)-(40) and Appendix
A-H. With the shared head :class:`fedlib.heads.MMS` (scores :math:`s_c^0`, every
:math:`\alpha = 0`) and a client's head :class:`fedlib.heads.SASP` (scores :math:`s_c`, adapted
displacement :math:`\delta_c = \tilde\mu_c - \mu_c = \alpha_c\Delta_c`):

* Eq. (37), the exact score change
  :math:`s_c(z) - s_c^0(z) = \delta_c^\top A(z - \mu_c) - \tfrac12\delta_c^\top A\delta_c`;
* Eq. (38), the per-class budget :math:`b_c(z) = \lVert\delta_c\rVert_A\lVert z - \mu_c\rVert_A + \tfrac12\lVert\delta_c\rVert_A^2`
  (Cauchy–Schwarz);
* Eq. (39)-(40), with :math:`c^\star = f^0(x)`, the margin :math:`M^0 = s^0_{c^\star} - \max_{c\ne c^\star}s^0_c`
  and the budget :math:`B = b_{c^\star} + \max_{c\ne c^\star}b_c` (the paper does not show Eq. (39); this
  is the smallest budget its proof supports): :math:`M^0 > B \Rightarrow f^{(k)}(x) = f^0(x)`;
* the pointwise, risk and class-wise bounds that follow,
  :math:`\mathcal E_R(f^{(k)}) \le \mathcal E_R(f^0) + \Pr_R(M^0 \le B)`.

:func:`stability_terms` computes these quantities on queries, :func:`stability_summary` counts
the counterexamples to each statement on labelled queries, and :class:`StabilityTally` adds them
up over instances (the chapter *FedGRC's statistics* checks every one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .mms import MMS, SASP


def stability_terms(mms: MMS, sasp: SASP, h: torch.Tensor) -> dict:
    """Scores, Eq. (37)'s error, budgets and margins of a client's SASP head against the shared head.

    Only the federation-known classes (``mms.classes_``) take part.

    Parameters
    ----------
    mms : MMS
        The fitted shared head.
    sasp : SASP
        A client's head fitted on ``mms``.
    h : Tensor of shape (n, d)
        Unscaled concatenated query features (float64).

    Returns
    -------
    dict
        ``f0``, ``fk`` : ndarray (n,), the shared and adapted predictions (class labels);
        ``eq37`` : float, Eq. (37)'s worst absolute error (in both its :math:`\\delta` and its
        :math:`\\alpha, \\Delta` form) relative to the score scale :math:`\\max|s^0| + 1`;
        ``budget_viol`` : int, the (query, class) pairs where :math:`|s_c - s_c^0| > b_c` (Eq. (38));
        ``absent_change`` : float, the largest score change of a locally absent class (0 if none);
        ``margin`` : ndarray (n,), :math:`M^0` (infinite with one class);
        ``B``, ``B_local`` : ndarray (n,), the budget of SASP and of local-mean adaptation
        (:math:`\\alpha = 1` for every observed class).

    Examples
    --------
    >>> from fedlib.stats import ClassMoments
    >>> h = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [2.0, 4.0]], dtype=torch.float64)
    >>> mms = MMS(gamma=1.0).fit(ClassMoments.from_features(h, torch.tensor([0, 0, 1, 1]), 2), [1, 1])
    >>> sasp = SASP(m0=1.0).fit(mms, torch.tensor([1.0, 0.0]), torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    >>> terms = stability_terms(mms, sasp, torch.zeros(1, 2, dtype=torch.float64))
    >>> terms["budget_viol"], terms["absent_change"], round(float(terms["B"][0]), 12)  # b_0 = 1/3 + 1/12
    (0, 0.0, 0.416666666667)
    """
    z = mms.transform(h)
    A = mms.metric_
    ok = mms.classes_
    s0, s = mms.decision_function(h)[:, ok], sasp.decision_function(h)[:, ok]
    mu, delta, Delta, alpha = mms.means_[ok], (sasp.means_ - mms.means_)[ok], sasp.displacement_[ok], sasp.alpha_[ok]
    diff = z[:, None, :] - mu[None, :, :]  # (n, C, d)
    exact = torch.einsum("cd,de,nce->nc", delta, A, diff) - 0.5 * torch.einsum("cd,de,ce->c", delta, A, delta)[None, :]
    exact_alpha = alpha[None, :] * torch.einsum("cd,de,nce->nc", Delta, A, diff) \
        - 0.5 * alpha[None, :] ** 2 * torch.einsum("cd,de,ce->c", Delta, A, Delta)[None, :]
    scale = s0.abs().max() + 1.0
    eq37 = float(torch.maximum((s - s0 - exact).abs().max(), (s - s0 - exact_alpha).abs().max()) / scale)
    dist = torch.sqrt(torch.einsum("ncd,de,nce->nc", diff, A, diff).clamp_min(0))  # |z - mu_c|_A
    dn = torch.sqrt(torch.einsum("cd,de,ce->c", delta, A, delta).clamp_min(0))  # |delta_c|_A
    Dn = torch.sqrt(torch.einsum("cd,de,ce->c", Delta, A, Delta).clamp_min(0))  # |Delta_c|_A
    b = dn[None, :] * dist + 0.5 * dn[None, :] ** 2  # Eq. (38)
    b_local = Dn[None, :] * dist + 0.5 * Dn[None, :] ** 2  # alpha = 1 for observed classes
    budget_viol = int(((s - s0).abs() > b + 1e-9 * scale).sum())
    absent = (sasp.counts_[ok] == 0)
    absent_change = float((s - s0)[:, absent].abs().max()) if bool(absent.any()) else 0.0
    f0, fk = s0.argmax(1), s.argmax(1)
    top2 = s0.topk(min(2, s0.shape[1]), dim=1).values
    margin = top2[:, 0] - top2[:, 1] if s0.shape[1] > 1 else torch.full_like(top2[:, 0], np.inf)
    idx = torch.arange(len(z))

    def budget(bb):
        other = bb.clone()
        other[idx, f0] = -np.inf
        return bb[idx, f0] + other.max(1).values

    classes = torch.nonzero(ok).flatten()  # back to class labels
    return dict(f0=classes[f0].numpy(), fk=classes[fk].numpy(), eq37=eq37, budget_viol=budget_viol,
                absent_change=absent_change, margin=margin.numpy(), B=budget(b).numpy(), B_local=budget(b_local).numpy())


def stability_summary(terms: dict, y: np.ndarray) -> dict:
    """Counterexamples to Eq. (40) and to the risk bounds on labelled queries.

    Parameters
    ----------
    terms : dict
        :func:`stability_terms` of the queries.
    y : ndarray of shape (n,)
        The queries' labels.

    Returns
    -------
    dict
        ``n`` (queries), ``certified`` (:math:`M^0 > B`), ``flipped`` (changed predictions),
        ``certified_flipped`` (both: Eq. (40) allows none), ``pointwise`` (queries where
        :math:`\\mathbf 1\\{f^k \\ne y\\} > \\mathbf 1\\{f^0 \\ne y\\} + \\mathbf 1\\{M^0 \\le B\\}`),
        ``risk_slack`` (the risk bound minus the adapted risk, :math:`\\ge 0`), ``classwise``
        (classes violating the class-wise bound), ``budget_larger`` (queries where SASP's budget
        exceeds local-mean adaptation's), ``err0`` and ``errk`` (the two error rates) and
        ``pr_uncertified`` (:math:`\\Pr(M^0 \\le B)`).

    Raises
    ------
    ValueError
        On labels of another length than the queries.

    Examples
    --------
    >>> terms = dict(f0=np.array([0, 1]), fk=np.array([0, 0]), margin=np.array([2.0, 0.1]), B=np.array([1.0, 0.5]),
    ...              B_local=np.array([1.0, 0.5]))
    >>> s = stability_summary(terms, np.array([0, 1]))
    >>> s["certified"], s["flipped"], s["certified_flipped"], s["pointwise"], s["risk_slack"]
    (1, 1, 0, 0, 0.0)
    """
    y = np.asarray(y)
    if y.shape != np.shape(terms["f0"]):
        raise ValueError(f"y must hold one label per query, shape {np.shape(terms['f0'])}, got {y.shape}")
    certified = terms["margin"] > terms["B"]
    flipped = terms["fk"] != terms["f0"]
    err0, errk = terms["f0"] != y, terms["fk"] != y
    pointwise = int((errk.astype(int) > err0.astype(int) + (~certified).astype(int)).sum())
    risk_slack = err0.mean() + (~certified).mean() - errk.mean()
    classwise = 0
    for c in np.unique(y):
        sel = y == c
        classwise += int(errk[sel].mean() > err0[sel].mean() + (~certified[sel]).mean() + 1e-12)
    return dict(n=len(y), certified=int(certified.sum()), flipped=int(flipped.sum()),
                certified_flipped=int((certified & flipped).sum()), pointwise=pointwise, risk_slack=float(risk_slack),
                classwise=classwise, budget_larger=int((terms["B"] > terms["B_local"] * (1 + 1e-12) + 1e-12).sum()),
                err0=float(err0.mean()), errk=float(errk.mean()), pr_uncertified=float((~certified).mean()))


@dataclass
class StabilityTally:
    """The worst errors and the counts of :func:`stability_terms` and :func:`stability_summary`
    over many (head, queries) instances, taken in one at a time by :meth:`StabilityTally.add`.

    Attributes
    ----------
    eq37, absent_change : float
        The largest Eq. (37) error and absent-class score change.
    min_slack : float
        The smallest slack of the risk bound (``inf`` before any instance).
    budget_viol, certified_flipped, pointwise, classwise, budget_larger, n, flipped, certified : int
        Sums of the counts of the same names.

    Examples
    --------
    >>> tally = StabilityTally()
    >>> tally.add(dict(eq37=1e-15, absent_change=0.0, budget_viol=0),
    ...           dict(risk_slack=0.25, certified_flipped=0, pointwise=0, classwise=0, budget_larger=0, n=4,
    ...                flipped=1, certified=3))
    >>> tally.n, tally.flipped, tally.min_slack
    (4, 1, 0.25)
    """

    eq37: float = 0.0
    absent_change: float = 0.0
    budget_viol: int = 0
    certified_flipped: int = 0
    pointwise: int = 0
    min_slack: float = math.inf
    classwise: int = 0
    budget_larger: int = 0
    n: int = 0
    flipped: int = 0
    certified: int = 0

    def add(self, terms: dict, summary: dict) -> None:
        """Take in one instance: its :func:`stability_terms` and its :func:`stability_summary`."""
        self.eq37 = max(self.eq37, terms["eq37"])
        self.absent_change = max(self.absent_change, terms["absent_change"])
        self.budget_viol += terms["budget_viol"]
        self.min_slack = min(self.min_slack, summary["risk_slack"])
        for key in ("certified_flipped", "pointwise", "classwise", "budget_larger", "n", "flipped", "certified"):
            setattr(self, key, getattr(self, key) + summary[key])


__all__ = ["StabilityTally", "stability_summary", "stability_terms"]
