r"""The one estimator contract of every statistical head (scikit-learn's; book page *Inside fedlib*).

* ``__init__`` stores hyper-parameters only (validated again by ``fit``; :meth:`~fedlib.heads.Head.check_params`
  validates them without fitting, e.g. when a deployment rule is built);
* ``fit(moments, ...)`` fits from additive class moments (:class:`fedlib.stats.ClassMoments`, or
  a list of them, one per client, merged by addition), sets ``attr_`` attributes and returns
  ``self``; :meth:`~fedlib.heads.Head.fit_features` fits from features and labels directly;
* ``decision_function(z)`` returns float64 scores of shape (n, C) and ``predict(z)`` their argmax,
  both after checking that the head was fitted; ``classes_`` marks the classes a fitted head can
  predict;
* ``needs`` declares what the head needs from the clients: ``"total_gram"`` (counts, sums and the
  total Gram matrix :math:`\sum_c G_c` suffice: the compact statistics) or ``"class_grams"`` (the
  per-class Gram matrices :math:`G_c`).
"""

from __future__ import annotations

import inspect
from typing import ClassVar

import torch

from ..stats import ClassMoments
from ._linalg import _as_features

NEEDS = ("total_gram", "class_grams")
"""What a head may need from the clients besides counts and sums (:attr:`Head.needs`)."""


class Head:
    """Base of the statistical heads (see the module docstring for the contract)."""

    needs: ClassVar[str] = "total_gram"
    """``"total_gram"`` or ``"class_grams"``: the Gram form the head's ``fit`` needs."""
    _fitted_attr: ClassVar[str] = "coef_"

    # ------------------------------------------------------------------ hyper-parameters
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind == p.POSITIONAL_OR_KEYWORD]

    def get_params(self) -> dict:
        """The hyper-parameters ``__init__`` stored, by name (scikit-learn's ``get_params``)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def clone(self) -> "Head":
        """A new, unfitted head with the same hyper-parameters."""
        return type(self)(**self.get_params())

    def check_params(self) -> "Head":
        """Validate the hyper-parameters (``ValueError`` naming the bad one) without fitting; returns ``self``."""
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # ------------------------------------------------------------------ fitting
    def fit(self, moments, *args, **kwargs) -> "Head":
        raise NotImplementedError(f"{type(self).__name__} must implement fit")

    def fit_features(self, z, y, n_classes: int, *args, **kwargs) -> "Head":
        """Fit from features ``z`` (n, d) and integer labels ``y`` (n,) in [0, ``n_classes``):
        ``fit(ClassMoments.from_features(z, y, n_classes), ...)`` (per-class Gram matrices).

        >>> from fedlib.heads import FedNCMHead
        >>> FedNCMHead().fit_features(torch.tensor([[2.0, 0.0], [0.0, 3.0]]), torch.tensor([0, 1]), 2).coef_.tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        return self.fit(ClassMoments.from_features(torch.as_tensor(z), torch.as_tensor(y), n_classes), *args, **kwargs)

    # ------------------------------------------------------------------ prediction
    def _check_fitted(self) -> None:
        if not hasattr(self, self._fitted_attr):
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit(...) first")

    def _n_features(self) -> int:
        raise NotImplementedError

    def _predictable(self) -> torch.Tensor:
        raise NotImplementedError

    def _scores(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def classes_(self) -> torch.Tensor:
        """Boolean (C,): the classes the fitted head can predict."""
        self._check_fitted()
        return self._predictable()

    def decision_function(self, z) -> torch.Tensor:
        """Scores of shape (n, C), float64, for features ``z`` of shape (n, d); :math:`-\\infty`
        for the classes the head never predicts."""
        self._check_fitted()
        return self._scores(_as_features(z, self._n_features()))

    def predict(self, z) -> torch.Tensor:
        """Predicted classes of shape (n,) (ties: the smallest class index)."""
        return self.decision_function(z).argmax(dim=1)


class LinearHead(Head):
    r"""A linear head :math:`s_c(z) = w_c^\top z + b_c`: ``fit`` sets ``coef_`` (C, d) and
    ``intercept_`` (C,); a class with a non-finite intercept is never predicted."""

    def _n_features(self) -> int:
        return self.coef_.shape[1]

    def _predictable(self) -> torch.Tensor:
        return torch.isfinite(self.intercept_)

    def _scores(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.coef_.T + self.intercept_[None, :]


__all__ = ["NEEDS", "Head", "LinearHead"]
