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
changes, so only the ``aggregate`` hook changes. A method's aggregation is a *fold*: the loop adds
each client's reply as it arrives (``add``) and asks for the new server state at the end
(``finish``). FedAvg's fold is ``fedlib.protocol.ModelAverage``; ``MomentumStep`` below extends it,
so the replies are still averaged one at a time and freed, and only ``finish`` is yours to write.
Keep the velocity in the server's ``State`` under names that start with ``"momentum/"`` (it is
then saved in checkpoints; FedAvg's training message sends only ``"model/"`` arrays). Integer
arrays (none in the book's models, but possible) are averaged and not stepped.

Run the provided test from the repository root:  ``.venv/bin/python -m pytest book/exercises``
"""

from __future__ import annotations

from dataclasses import dataclass

from fedlib.algorithms import FedAvg
from fedlib.messages import State
from fedlib.protocol import ModelAverage


@dataclass
class FedAvgM(FedAvg):
    """FedAvg whose server takes a momentum step along the clients' average change."""

    beta: float = 0.9
    server_lr: float = 1.0
    name = "fedavgm"

    def aggregate(self, server: State, round_: int) -> "MomentumStep":
        """FedAvg's streaming average of the replies, then one momentum step."""
        return MomentumStep(server, self.beta, self.server_lr)


class MomentumStep(ModelAverage):
    """FedAvg's fold (the running sample-weighted average), whose ``finish`` takes the momentum step."""

    def __init__(self, server: State, beta: float, server_lr: float) -> None:
        super().__init__(server)
        self.server, self.beta, self.server_lr = server, beta, server_lr

    def finish(self) -> State:
        # TODO: 1. the clients' average: ``avg = super().finish()`` (the server itself when no reply came)
        #       2. for every floating "model/" array of self.server: delta, the new velocity, the new weights
        #       3. return a State with the new "model/" arrays and the new "momentum/" arrays
        raise NotImplementedError("MomentumStep.finish: write the server momentum step (see the module docstring)")
