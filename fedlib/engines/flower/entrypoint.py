"""The Flower App's entry point: the ``ServerApp`` and ``ClientApp`` a deployment loads by name.

The app's ``pyproject.toml`` (:class:`~fedlib.engines.flower.deployment.LocalDeployment` writes
it) names ``fedlib.engines.flower.entrypoint:server_app`` and ``fedlib.engines.flower.entrypoint:client_app``;
the job comes in the run config (``fedlib-job``). Importing this module builds both apps; no other
module of :mod:`fedlib.engines.flower` builds one when imported.
"""

from __future__ import annotations

from .apps import make_client_app, make_server_app

server_app = make_server_app()
"""The ServerApp of a deployment: runs the run config's ``fedlib-job`` and writes it into ``fedlib-out``
(:func:`~fedlib.engines.flower.apps.make_server_app`)."""

client_app = make_client_app()
"""The ClientApp of every SuperNode: the client of its ``partition-id``, for the run config's
``fedlib-job`` (:func:`~fedlib.engines.flower.apps.make_client_app`)."""

__all__ = ["client_app", "server_app"]
