"""One small module per method: only what its paper changes. :func:`make_algorithm` is the registry.

The registry lists training methods only. Deploying a statistical head on a trained backbone
(:class:`fedlib.deployment.StatHead`) is a deployment rule, not a training method: it sits above
the round loop in :mod:`fedlib.deployment` and takes a head object, so it is not registered here.
"""

from __future__ import annotations

from ..protocol import Algorithm, ClientContext, Event, load_model, model_arrays
from .ditto import Ditto
from .fedavg import FedAvg, FedAvgFT
from .fedbabu import FedBABU
from .fedetf import FedETF
from .fedgrc import CGRL
from .fedproto import FedProto
from .fedprox import FedProx
from .fedrep import FedRep
from .ggeur import GGEUR, FedFAStyle, FedMixStyle, Rebalanced
from .mpt import MPT

ALGORITHMS: dict[str, type[Algorithm]] = {
    "fedavg": FedAvg,
    "fedavg_ft": FedAvgFT,
    # personalized-FL baselines (FedGRC and the other chapters)
    "ditto": Ditto,
    "fedbabu": FedBABU,
    "fedetf": FedETF,
    "fedrep": FedRep,
    # GGEUR chapter
    "fedprox": FedProx,
    "fedproto": FedProto,
    "ggeur": GGEUR,
    "fedfa_style": FedFAStyle,
    "fedmix_style": FedMixStyle,
    "rebalanced": Rebalanced,
    # MPT chapter
    "mpt": MPT,
    # FedGRC chapter
    "cgrl": CGRL,
}


def make_algorithm(name: str, **kwargs) -> Algorithm:
    """The algorithm registered as ``name``, built with ``kwargs``."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[name](**kwargs)


__all__ = [
    "ALGORITHMS", "Algorithm", "CGRL", "ClientContext", "Ditto", "Event", "FedAvg", "FedAvgFT", "FedBABU", "FedETF",
    "FedFAStyle", "FedMixStyle", "FedProto", "FedProx", "FedRep", "GGEUR", "MPT", "Rebalanced", "load_model", "make_algorithm", "model_arrays",
]
