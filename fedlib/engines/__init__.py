"""Transports: how the one round loop's messages reach the clients and their replies come back.

:mod:`fedlib.loop` writes a round once (sampling, events, the non-finite guard, aggregation, the
evaluation schedule, the ledger, checkpoints); a transport only carries messages:
"send these messages to these clients and collect the replies" (:class:`~fedlib.engines.base.Transport`).

* :class:`~fedlib.engines.inprocess.InProcessTransport` (the default): the clients run in this process, one after another.
* :class:`~fedlib.engines.vectorized.VectorizedTransport` (``LoopConfig(execution="vectorized")``):
  the clients run in this process, a round's sampled clients stacked into one batched computation.

Further engines (Flower's simulation and deployment engines) are further
implementations of :class:`~fedlib.engines.base.Transport`; the loop does not change.
"""

from .base import Transport
from .inprocess import InProcessTransport

__all__ = ["InProcessTransport", "Transport"]
