"""FedBABU: train and average the body only, with the head frozen at its random initialization;
personalize by fine-tuning before deployment.

Oh, Kim and Yun, "FedBABU: Toward Enhanced Representation for Federated Image Classification",
ICLR 2022 (arXiv:2106.06042), Algorithm 1: during federated training the head is never updated
(the same random head on every client), so only the body is sent and averaged; at evaluation each
client fine-tunes the whole model on its own data (the paper's default fine-tunes every layer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..messages import Message, State
from ..training import LocalProgram, Phase, TrainConfig, local_train
from ..protocol import MODEL, ClientContext, ProgramMethod, Predictor, body_arrays, load_model, update_message


@dataclass
class FedBABU(ProgramMethod):
    """Body-only local training and averaging; ``finetune`` (epochs = 0: none) before deployment."""

    train: TrainConfig = field(default_factory=TrainConfig)
    finetune: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=5, lr=0.01))
    name = "fedbabu"

    def program(self, ctx: ClientContext, state: State, message: Message, data) -> LocalProgram:
        """The body trained from the broadcast model, the head frozen; the reply is the body."""
        n = len(data.train)
        return LocalProgram(message.with_prefix(MODEL), data.train.x, data.train.y, (Phase(self.train, params="body"),),
                            lambda model, loss: (state, update_message(body_arrays(model), n, loss)))

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        model = load_model(ctx.model, message)
        local_train(model, data.train.x, data.train.y, self.finetune, generator)
        return model.eval()
