"""FedAvg and FedAvg with local fine-tuning before deployment (FedAvg-FT).

FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data", AISTATS 2017 (arXiv:1602.05629), Algorithm 1. FedAvg-FT deploys, on each client, the
global model fine-tuned on that client's training split (the "FedAvg-FT" baseline of FedGRC,
Section V, and of most personalized-FL benchmarks).

These two are the template for every other method: a method changes a hook, never the loop.
FedAvg's aggregation, the sample-weighted mean of the replies' models folded in one reply at a
time, is :func:`fedlib.aggregate.model_average` (also every method's default).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from ..aggregate import model_average
from ..messages import Message, State
from ..training import LocalProgram, Phase, TrainConfig, local_train
from ..protocol import MODEL, ClientContext, Predictor, ProgramMethod, load_model, model_arrays, update_message


@dataclass
class FedAvg(ProgramMethod):
    """Local SGD from the global model; the server averages weighted by sample counts."""

    train: TrainConfig = field(default_factory=TrainConfig)
    name = "fedavg"

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram:
        """Local SGD from the broadcast model on the client's training split; the reply is the model."""
        n = len(data.train)
        return LocalProgram(message.with_prefix(MODEL), data.train.x, data.train.y, (Phase(self.train),),
                            lambda model, loss: (state, update_message(model_arrays(model), n, loss)))

    def aggregate(self, server: State, replies: Iterable[tuple[int, Message]], round_: int) -> State:
        """The replies' models averaged weighted by their sample counts, each reply folded into a
        running sum and freed as it arrives (:func:`fedlib.aggregate.model_average`)."""
        return model_average(server, replies)


@dataclass
class FedAvgFT(FedAvg):
    """FedAvg training; each client deploys the global model fine-tuned on its own training split."""

    finetune: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=5, lr=0.01))
    name = "fedavg_ft"

    def deploy(
        self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator
    ) -> Predictor:
        model = load_model(ctx.model, message)
        local_train(model, data.train.x, data.train.y, self.finetune, generator)
        return model.eval()
