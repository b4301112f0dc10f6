"""A worked solution of the exercise in ``fedavgm.py`` (next to this file) (FedAvg with server momentum)."""

from __future__ import annotations

from dataclasses import dataclass

from fedlib.aggregate import model_average
from fedlib.algorithms import FedAvg
from fedlib.messages import State
from fedlib.protocol import MODEL

MOMENTUM = "momentum/"


@dataclass
class FedAvgM(FedAvg):
    """FedAvg whose server takes a momentum step along the clients' average change."""

    beta: float = 0.9
    server_lr: float = 1.0
    name = "fedavgm"

    def aggregate(self, server: State, replies, round_: int) -> State:
        """FedAvg's streaming average of the replies, then one momentum step."""
        avg = model_average(server, replies)  # FedAvg's sample-weighted average, each reply folded and freed
        if avg is server:  # no reply this round: nothing moves
            return server
        arrays = dict(avg.arrays)
        for name, w in server.arrays.items():
            if not name.startswith(MODEL) or not w.is_floating_point():
                continue
            delta = w - avg.arrays[name]  # the pseudo-gradient
            key = MOMENTUM + name[len(MODEL):]
            velocity = self.beta * server.arrays[key] + delta if key in server.arrays else delta
            arrays[key] = velocity
            arrays[name] = w - self.server_lr * velocity
        return State(arrays=arrays, meta=dict(avg.meta))
