"""One small module per method: only what its paper changes. :func:`make_algorithm` is the registry.

The registry lists training methods only. Deploying a statistical head on a trained backbone
(:class:`fedlib.posthoc.StatHead`) is a deployment rule, not a training method: it sits above
the round loop in :mod:`fedlib.posthoc` and takes a head object, so it is not registered here.

Imports are lazy (PEP 562): ``from fedlib.algorithms import FedAvg`` imports
``fedlib.algorithms.fedavg`` and what it needs, not every paper's method. So a chapter depends
only on the methods it uses, and the book's build (whose cache key follows a chapter's imports
through :data:`_LAZY`) does not re-run the FedGRC chapters when MPT's module changes.
:data:`ALGORITHMS` and :func:`make_algorithm` import every method.
"""

from __future__ import annotations

import importlib

from ..protocol import Algorithm, ClientContext, Event, load_model, model_arrays

_LAZY: dict[str, str] = {
    "Ditto": "ditto",
    "FedAvg": "fedavg",
    "FedAvgFT": "fedavg",
    "FedBABU": "fedbabu",
    "FedETF": "fedetf",
    "CGRL": "fedgrc",
    "FedProto": "fedproto",
    "FedProx": "fedprox",
    "FedRep": "fedrep",
    "FedAvgSE": "fedrep",
    "HDCFL": "hdcfl",
    "IFCA": "ifca",
    "GGEUR": "ggeur",
    "FedFAStyle": "ggeur",
    "FedMixStyle": "ggeur",
    "Rebalanced": "ggeur",
    "MPT": "mpt",
    "PublicDistillation": "fedmd",
    "FedMD": "fedmd",
    "FedCT": "fedct",
    "COMET": "comet",
    "COSMOS": "cosmos",
}
"""Each method class and the submodule that defines it (a literal: the build reads it)."""

_REGISTRY: dict[str, str] = {
    "fedavg": "FedAvg",
    "fedavg_ft": "FedAvgFT",
    # personalized-FL baselines (FedGRC and the other chapters)
    "ditto": "Ditto",
    "fedbabu": "FedBABU",
    "fedetf": "FedETF",
    "fedrep": "FedRep",
    # GGEUR chapter
    "fedprox": "FedProx",
    "fedproto": "FedProto",
    "ggeur": "GGEUR",
    "fedfa_style": "FedFAStyle",
    "fedmix_style": "FedMixStyle",
    "rebalanced": "Rebalanced",
    # HDC-FL chapter
    "fedavg_se": "FedAvgSE",
    "hdcfl": "HDCFL",
    "ifca": "IFCA",
    # MPT chapter
    "mpt": "MPT",
    # COSMOS chapter (model-agnostic: clients of different architectures, pseudo-labels only)
    "cosmos": "COSMOS",
    "fedmd": "FedMD",
    "fedct": "FedCT",
    "comet": "COMET",
    # FedGRC chapter
    "cgrl": "CGRL",
}

ALGORITHMS: dict[str, type[Algorithm]]
"""Every registered method class by its name (importing it imports every method)."""


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name == "ALGORITHMS":
        value = {key: __getattr__(cls) for key, cls in _REGISTRY.items()}
    elif name in set(_LAZY.values()):  # a submodule as an attribute: fedlib.algorithms.ggeur
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def make_algorithm(name: str, **kwargs) -> Algorithm:
    """The algorithm registered as ``name``, built with ``kwargs``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(sorted(_REGISTRY))}")
    return __getattr__(_REGISTRY[name])(**kwargs)  # imports that method's module only


def registered(*, streams: bool | None = None, stacks: bool | None = None, bare: bool = False) -> list[str]:
    """The registered names (sorted) of the methods chosen by what their classes declare
    (:class:`fedlib.protocol.Capabilities`); none is built (the call imports every method).

    Parameters
    ----------
    streams : bool, optional
        Only the methods whose aggregation reads each reply as it arrives and keeps none
        (``True``), or only those that hold every reply of a round (``False``).
    stacks : bool, optional
        Only the methods whose clients can train stacked (``True``) or only those that train one
        after another (``False``).
    bare : bool, default False
        Only the methods that can be built without arguments (COSMOS and the other public-set
        methods need their public set: ``needs_public``).

    Examples
    --------
    >>> registered(stacks=False, bare=True)
    ['cgrl', 'fedetf', 'fedmix_style', 'fedproto', 'mpt']
    >>> set(registered(bare=True)) < set(registered())
    True
    """
    chosen = []
    for key, cls in sorted(__getattr__("ALGORITHMS").items()):
        can = cls.capabilities
        if (streams is not None and can.streams != streams) or (stacks is not None and can.stacks != stacks):
            continue
        if bare and can.needs_public:
            continue
        chosen.append(key)
    return chosen


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"ALGORITHMS"})


__all__ = [
    "ALGORITHMS", "Algorithm", "CGRL", "COMET", "COSMOS", "ClientContext", "Ditto", "Event", "FedAvg", "FedAvgFT", "FedAvgSE", "FedBABU", "FedCT", "FedETF",
    "FedFAStyle", "FedMD", "FedMixStyle", "FedProto", "FedProx", "FedRep", "GGEUR", "HDCFL", "IFCA", "MPT", "PublicDistillation", "Rebalanced", "load_model", "make_algorithm", "model_arrays",
    "registered",
]
