"""Engines: implementations of the transport contract (:class:`fedlib.transport.Transport`) that
carry the one round loop's messages to the clients and their replies back.

* :class:`~fedlib.engines.inprocess.InProcessTransport` (``RunOptions(execution="sequential")``,
  the default): the clients run in this process, one after another.
* :class:`~fedlib.engines.vectorized.VectorizedTransport` (``RunOptions(execution="vectorized")``):
  the clients run in this process, a round's sampled clients stacked into one batched computation.
* :class:`~fedlib.engines.flower.remote.FlowerTransport`
  (:func:`fedlib.engines.flower.deployment.run_flower`): the clients run on Flower's nodes, in its
  simulation engine or a real deployment. The transport and the record conversion sit below the
  loop; the job, the apps (the ``ServerApp`` runs :func:`fedlib.loop.run_rounds`) and the engines'
  drivers above it (:mod:`fedlib.engines.flower` lists its modules). It is imported on demand
  (``import fedlib.engines.flower``): nothing else of fedlib imports Flower.

An engine sits below the loop: it imports the transport contract and the method contract, never
:mod:`fedlib.loop`; :func:`fedlib.run.run_federated` chooses one and hands it to the loop.
"""

from .inprocess import InProcessTransport

__all__ = ["InProcessTransport"]
