"""FedCT: federated co-training on hard labels.

Abourayya, Kleesiek, Rao, Ayday, Rao, Webb and Kamp, "Little Is Enough: Boosting Privacy by
Sharing Only Hard Labels in Federated Semi-Supervised Learning", AAAI 2025 (arXiv:2310.05696),
Algorithm 1. A :class:`~fedlib.algorithms.fedmd.PublicDistillation` method whose clients send
**hard** labels on the public set (one small integer per sample: ``uint8`` up to 256 classes), the
server's consensus is the majority vote (ties to the lowest class), and each client trains on
its own data and the public set labelled by the consensus **together** (Algorithm 1's local
update on the union, cross-entropy, the ``train`` configuration), not on the public set first and
its data afterwards as the family's digest-then-revisit does; its first training (no consensus
yet) is the family's ``pretrain`` on its data, and a client that first takes part once a
consensus exists digests it (``distill``) before that pre-training.
One group, no server model, no consistency term: the family's ``temperature``, ``lam``,
``n_augment``, ``detach_target``, ``shift`` and ``noise`` fields are not used (a hard label has no
temperature).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..distill import majority_vote, pseudo_labels
from ..messages import Message, State
from ..protocol import MODEL, ClientContext, model_arrays, update_message
from ..training import local_train
from .fedmd import PublicDistillation, PublicServer, client_model


def hard_dtype(n_classes: int) -> torch.dtype:
    """The smallest unsigned integer type that holds ``n_classes`` labels."""
    return torch.uint8 if n_classes <= 256 else torch.int32


@dataclass
class FedCT(PublicDistillation):
    """Hard labels up, their majority vote down, cross-entropy on the public set."""

    name = "fedct"

    def labels_of(self, model: nn.Module) -> torch.Tensor:
        """The argmax class of every public sample, the smallest integer type that holds them."""
        soft = pseudo_labels(model, self.public.x, 1.0)
        return soft.argmax(dim=1).to(hard_dtype(soft.shape[1]))

    def check_reply(self, server: PublicServer, client: int, labels: torch.Tensor) -> torch.Tensor:
        n, c = len(self.public), int(server.n_classes)
        if not isinstance(labels, torch.Tensor) or tuple(labels.shape) != (n,) or labels.is_floating_point():
            shape = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
            raise ValueError(f"client {client}'s hard labels have shape {shape}; valid: ({n},) integers, one per public sample")
        if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= c):
            raise ValueError(f"client {client}'s hard labels hold class {int(labels.max())}; valid: 0..{c - 1}")
        return labels

    def consensus(self, labels: torch.Tensor) -> torch.Tensor:
        return majority_vote(labels, int(labels.max()) + 1 if labels.numel() else 1).to(labels.dtype)

    def digest(self, model: nn.Module, teacher: torch.Tensor, n_classes: int, generator: torch.Generator) -> None:
        if tuple(teacher.shape) != (len(self.public),) or teacher.is_floating_point():
            raise ValueError(f"the server's hard labels have shape {tuple(teacher.shape)}; valid: ({len(self.public)},) integers")
        local_train(model, self.public.x, teacher.long(), self.distill, generator)

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        """Once the client has trained and a consensus has come: one training (``train``) on the
        union of its data and the public set with the consensus as labels; otherwise the family's
        update (:meth:`~fedlib.algorithms.fedmd.PublicDistillation.local_update`)."""
        if "teacher" not in message.arrays or not state.with_prefix(MODEL):
            return super().local_update(ctx, state, message, data, generator)
        teacher = message.arrays["teacher"]
        if tuple(teacher.shape) != (len(self.public),) or teacher.is_floating_point():
            raise ValueError(f"the server's hard labels have shape {tuple(teacher.shape)}; valid: ({len(self.public)},) integers")
        model = client_model(ctx, state, self.seed)
        x = torch.cat([data.train.x, self.public.x.to(data.train.x.dtype)])
        y = torch.cat([data.train.y.long(), teacher.long()])
        loss = local_train(model, x, y, self.train, generator)
        reply = update_message({"labels": self.labels_of(model)}, len(data.train), None if math.isnan(loss) else loss,
                               kind="pseudo_labels")
        return State(arrays=model_arrays(model), meta=dict(state.meta)), reply


__all__ = ["FedCT", "hard_dtype"]
