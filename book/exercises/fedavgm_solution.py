"""A worked solution of the exercise in ``fedavgm.py`` (next to this file) (FedAvg with server momentum)."""

from __future__ import annotations

from dataclasses import dataclass

from fedlib.algorithms import FedAvg
from fedlib.messages import State
from fedlib.protocol import MODEL, ModelAverage

MOMENTUM = "momentum/"


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
        if not len(self):  # no reply this round: nothing moves
            return self.server
        avg = super().finish()  # FedAvg's sample-weighted average
        arrays = dict(avg.arrays)
        for name, w in self.server.arrays.items():
            if not name.startswith(MODEL) or not w.is_floating_point():
                continue
            delta = w - avg.arrays[name]  # the pseudo-gradient
            key = MOMENTUM + name[len(MODEL):]
            velocity = self.beta * self.server.arrays[key] + delta if key in self.server.arrays else delta
            arrays[key] = velocity
            arrays[name] = w - self.server_lr * velocity
        return State(arrays=arrays, meta=dict(avg.meta))
