"""FedETF: a fixed simplex equiangular-tight-frame classifier on normalized features, trained
with a balanced-softmax loss; optionally fine-tuned locally before deployment (FedETF-FT).

Li, Shang, He, Lin and Wu, "No Fear of Classifier Biases: Neural Collapse Inspired
Federated Learning with Synthetic and Fixed Classifier", ICCV 2023 (arXiv:2303.10058): the
classifier is the simplex ETF

.. math:: W = \\sqrt{\\tfrac{C}{C-1}}\\; P \\left(I_C - \\tfrac{1}{C}\\mathbf{1}\\mathbf{1}^\\top\\right),
          \\qquad P \\in \\mathbb{R}^{d \\times C},\\ P^\\top P = I_C ,

never trained; logits are :math:`\\tau\\, W^\\top z / \\lVert z \\rVert` and the local loss is the
balanced softmax (cross-entropy on logits plus :math:`\\log` of the client's class prior).
Simplifications, stated in the book: the temperature :math:`\\tau` is a fixed parameter (the paper
learns it), and the ETF acts directly on the backbone's penultimate features (the paper adds a
projection layer); the backbone's own ``head`` is unused. FedETF-FT fine-tunes the backbone on
the client's data with the ETF fixed (plain cross-entropy), the FedGRC paper's "FedETF + FT".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ..messages import Message, State
from ..models import PENULTIMATE
from ..training import TrainConfig, local_train
from ..protocol import Algorithm, ClientContext, Predictor, load_model, model_arrays, model_message, update_message


def simplex_etf(dim: int, n_classes: int, generator: torch.Generator) -> torch.Tensor:
    """A (dim, n_classes) simplex ETF: unit columns with pairwise inner products ``-1/(C-1)``."""
    if n_classes < 2 or dim < n_classes:
        raise ValueError(f"a simplex ETF needs 2 <= n_classes <= dim, got n_classes={n_classes}, dim={dim}")
    p, _ = torch.linalg.qr(torch.randn(dim, n_classes, generator=generator, dtype=torch.float64))
    center = torch.eye(n_classes, dtype=torch.float64) - 1.0 / n_classes
    return (math.sqrt(n_classes / (n_classes - 1)) * p @ center).to(torch.float32)


def etf_logits(model: torch.nn.Module, x: torch.Tensor, etf: torch.Tensor, temperature: float) -> torch.Tensor:
    """``temperature * normalize(embed(x)) @ etf`` of shape (n, C)."""
    return temperature * F.normalize(model.embed(x), dim=1) @ etf


def balanced_softmax_loss(logits: torch.Tensor, y: torch.Tensor, class_counts: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on ``logits + log(prior)`` (Ren et al., NeurIPS 2020); absent classes get prior 0 (log -> -inf is clamped)."""
    prior = class_counts.to(logits.dtype) / class_counts.sum()
    return F.cross_entropy(logits + torch.log(prior.clamp_min(1e-12)), y)


class _ETFPredictor(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, etf: torch.Tensor, temperature: float) -> None:
        super().__init__()
        self.model, self.temperature = model, temperature
        self.register_buffer("etf", etf)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return etf_logits(self.model, x, self.etf, self.temperature)


@dataclass
class FedETF(Algorithm):
    """Backbone trained with a fixed ETF classifier and balanced softmax; FedAvg aggregation.

    ``finetune.epochs > 0`` gives FedETF-FT (local fine-tuning before deployment).
    """

    train: TrainConfig = field(default_factory=TrainConfig)
    finetune: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=0))
    temperature: float = 10.0
    etf_seed: int = 0
    name = "fedetf"

    def _etf(self, model: torch.nn.Module) -> torch.Tensor:
        return simplex_etf(model.feature_dims[PENULTIMATE], model.n_classes, torch.Generator().manual_seed(self.etf_seed))

    def init_server(self, model: torch.nn.Module) -> State:
        state = super().init_server(model)
        state.arrays["etf"] = self._etf(model)  # fixed; broadcast with the model
        return state

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The model and the fixed ETF classifier, one message shared by every client."""
        return dict.fromkeys(clients, model_message(server, etf=server.arrays["etf"]))

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        model = load_model(ctx.model, message)
        etf, tau = message.arrays["etf"], self.temperature
        counts = torch.bincount(data.train.y, minlength=ctx.n_classes)
        loss = local_train(model, data.train.x, data.train.y, self.train, generator,
                           loss_fn=lambda m, x, y: balanced_softmax_loss(etf_logits(m, x, etf, tau), y, counts))
        return state, update_message(model_arrays(model), len(data.train), loss)

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator) -> Predictor:
        model = load_model(ctx.model, message)
        etf, tau = message.arrays["etf"], self.temperature
        if self.finetune.epochs or self.finetune.steps:
            local_train(model, data.train.x, data.train.y, self.finetune, generator,
                        loss_fn=lambda m, x, y: F.cross_entropy(etf_logits(m, x, etf, tau), y))
        return _ETFPredictor(model, etf, tau).eval()
