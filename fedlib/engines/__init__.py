"""Transports: how the one round loop's messages reach the clients and their replies come back.

:mod:`fedlib.loop` writes a round once (sampling, events, the non-finite guard, aggregation, the
evaluation schedule, the ledger, checkpoints); a transport only carries messages:
"send these messages to these clients and collect the replies" (:class:`~fedlib.engines.base.Transport`).

* :class:`~fedlib.engines.inprocess.InProcessTransport` (the default): the clients run in this process, one after another.
* :class:`~fedlib.engines.vectorized.VectorizedTransport` (``LoopConfig(execution="vectorized")``):
  the clients run in this process, a round's sampled clients stacked into one batched computation.

* :class:`~fedlib.engines.flower.transport.FlowerTransport`
  (:func:`fedlib.engines.flower.deployment.run_flower`): the clients run on Flower's nodes, in its
  simulation engine or a real deployment. The transport and the record conversion sit below the
  loop; the job, the apps (the ``ServerApp`` runs :func:`fedlib.loop.run_federated`) and the
  engines' drivers above it (:mod:`fedlib.engines.flower` lists its modules). It is imported on
  demand (``import fedlib.engines.flower``): the loop and this package do not import Flower.

A client that gives no reply (its hook raised; on Flower, its node failed or timed out) is yielded as
a :class:`~fedlib.engines.base.ClientFailure`, which the loop handles by ``LoopConfig(on_failure=...)``.
"""

from .base import ClientFailure, Transport
from .inprocess import InProcessTransport

__all__ = ["ClientFailure", "InProcessTransport", "Transport"]
