"""Exercise: write your own method. FedAvg with server momentum (FedAvgM).

Hsu, Qi and Brown, "Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification" (arXiv:1909.06335), Section 3: the server treats the change the clients' average
makes to the global model as a gradient and takes a momentum step with it.

With the global model :math:`w_t`, the clients' sample-weighted average :math:`\\bar w` (FedAvg's
aggregation), the velocity :math:`v_t` (zero before the first round), momentum :math:`\\beta` and
server learning rate :math:`\\eta`:

    delta   = w_t - w_avg                 (the pseudo-gradient)
    v_{t+1} = beta * v_t + delta
    w_{t+1} = w_t - eta * v_{t+1}

With beta = 0 and eta = 1 this is FedAvg exactly. Clients train as in FedAvg: only the server
changes, so only the ``aggregate`` hook changes. A method's aggregation receives the server state,
the round's replies as an iterable of ``(client, reply)`` pairs (the loop fills it as the clients
reply) and the round, and returns the new server state. FedAvg's rule over the replies is
``fedlib.aggregate.model_average``: call it first, so that the replies are still averaged one at
a time and freed, and then take the momentum step from its result. Keep the velocity in the
server's ``State`` under names that start with ``"momentum/"`` (it is then saved in checkpoints;
FedAvg's training message sends only ``"model/"`` arrays). Integer arrays (none in the book's
models, but possible) are averaged and not stepped.

Run the provided test from the repository root:  ``.venv/bin/python -m pytest book/exercises``
"""

from __future__ import annotations

from dataclasses import dataclass

from fedlib.aggregate import model_average
from fedlib.algorithms import FedAvg
from fedlib.messages import State


@dataclass
class FedAvgM(FedAvg):
    """FedAvg whose server takes a momentum step along the clients' average change."""

    beta: float = 0.9
    server_lr: float = 1.0
    name = "fedavgm"

    def aggregate(self, server: State, replies, round_: int) -> State:
        """FedAvg's streaming average of the replies, then one momentum step."""
        avg = model_average(server, replies)  # FedAvg's sample-weighted average (the server itself when no reply came)
        # TODO: 1. no reply this round (``avg is server``): return the server unchanged
        #       2. for every floating "model/" array of server: delta, the new velocity, the new weights
        #       3. return a State with the new "model/" arrays and the new "momentum/" arrays
        raise NotImplementedError("FedAvgM.aggregate: write the server momentum step (see the module docstring)")
