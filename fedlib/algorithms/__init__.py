"""One small module per method: only what its paper changes. :func:`make_algorithm` is the registry."""

from __future__ import annotations

from .base import Algorithm, ClientContext, Event, load_model, model_arrays
from .fedavg import FedAvg, FedAvgFT
from .mpt import MPT

ALGORITHMS: dict[str, type[Algorithm]] = {"fedavg": FedAvg, "fedavg_ft": FedAvgFT, "mpt": MPT}

from .fedprox import FedProx  # noqa: E402  (GGEUR chapter)
from .fedproto import FedProto  # noqa: E402
from .ggeur import GGEUR, FedFAStyle, FedMixStyle  # noqa: E402

ALGORITHMS.update({"fedprox": FedProx, "fedproto": FedProto, "ggeur": GGEUR, "fedfa_style": FedFAStyle, "fedmix_style": FedMixStyle})


def make_algorithm(name: str, **kwargs) -> Algorithm:
    """The algorithm registered as ``name``, built with ``kwargs``."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[name](**kwargs)


__all__ = ["ALGORITHMS", "Algorithm", "ClientContext", "Event", "FedAvg", "FedAvgFT", "MPT", "load_model", "make_algorithm", "model_arrays"]
