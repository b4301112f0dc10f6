r"""FedGRC's representation learning (CGRL) as a plug-in of the one round loop.

*Is High Local Accuracy Enough? Geometric Consensus with Support-Adaptive Statistical
Personalization for Federated Learning* (FedGRC), Section IV-A and Appendix A-I; the losses and
the reference updates are :mod:`fedlib.cgrl`. One round ``r``:

1. ``configure_train``: the model and the shared references: class directions :math:`p_c` (C, d) with
   their flags, log-norm references :math:`a_{\ell,c}` (L, C) with the flags :math:`v_c`;
2. ``local_update``: local SGD on :math:`\mathcal L_{CE} + w_t(\lambda_{dir}\mathcal L_{dir} +
   \lambda_{rad}\mathcal L_{mag})` over a weak and a strong view of every mini-batch (the
   prototype term once some direction exists, the magnitude term per class once its reference
   exists); the client sums the detached log norms :math:`\rho_\ell` of every training occurrence
   (both views, before the step that uses them), then makes one pass over its training split with
   the updated backbone in evaluation mode and without augmentation to get its class directions
   :math:`d_c^{(k)} = \operatorname{unit}(\sum_i u_i)` (observed classes; with
   ``CGRLConfig(direction_pass="train")`` the sums come from the weak views during training
   instead, which saves that pass); it replies with the model and these statistics (so the
   ledger counts them);
3. ``aggregate``: FedAvg for the model (weighted by training-set sizes);
   :func:`fedlib.cgrl.update_directions` and :func:`fedlib.cgrl.update_magnitudes` for the
   references.

The deployed predictor of CGRL itself is the trained network with its training-only linear
classifier. FedGRC deploys the statistical head instead: after training, the terminal statistics
round and the MMS + SASP heads of :mod:`fedlib.posthoc` on the frozen backbone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ..cgrl import (
    CGRLConfig,
    augment,
    directional_loss,
    log_norm,
    magnitude_loss,
    unit,
    update_directions,
    update_magnitudes,
    warmup_weight,
)
from ..messages import Message, State
from ..models import PENULTIMATE
from ..training import TrainConfig, local_train
from ..aggregate import model_average
from ..protocol import Algorithm, Capabilities, ClientContext, load_model, model_arrays, model_message, update_message

REF = "cgrl/"
_KEYS = ("prototypes", "proto_flags", "references", "ref_flags")


@dataclass
class CGRL(Algorithm):
    """Consensus geometric representation learning (FedGRC's training stage).

    Parameters
    ----------
    train : the local optimizer and number of steps (each step processes 2B views)
    cgrl : the loss weights, temperatures, reference averaging and augmentation (:class:`fedlib.cgrl.CGRLConfig`)
    """

    train: TrainConfig = field(default_factory=TrainConfig)
    cgrl: CGRLConfig = field(default_factory=CGRLConfig)
    name = "cgrl"
    capabilities = Capabilities(streams=False, reply_arrays=("cgrl/",))  # the reference update (update_directions) takes every client's directions at once

    def _layers(self, model) -> tuple[str, ...]:
        layers = self.cgrl.layers if self.cgrl.layers is not None else tuple(model.feature_layers)
        model._check_layers(layers)  # a clear error for a layer the model does not have
        return layers

    def init_server(self, model: torch.nn.Module) -> State:
        state = super().init_server(model)
        layers = self._layers(model)
        C, d = model.n_classes, model.feature_dims[PENULTIMATE]
        state.arrays.update({
            REF + "prototypes": torch.zeros(C, d),
            REF + "proto_flags": torch.zeros(C, dtype=torch.bool),
            REF + "references": torch.zeros(len(layers), C),
            REF + "ref_flags": torch.zeros(C, dtype=torch.bool),
        })
        state.meta["cgrl_layers"] = list(layers)
        return state

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The model, the class prototypes and magnitude references, one message shared by every client."""
        msg = model_message(server, **{REF + k: server.arrays[REF + k] for k in _KEYS})
        msg.meta = {"cgrl_layers": server.meta["cgrl_layers"]}
        return dict.fromkeys(clients, msg)

    def local_update(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        cfg = self.cgrl
        model = load_model(ctx.model, message)
        layers = tuple(message.meta["cgrl_layers"])
        names = tuple(dict.fromkeys((*layers, PENULTIMATE)))
        C = ctx.n_classes
        protos, proto_flags = message.arrays[REF + "prototypes"], message.arrays[REF + "proto_flags"]
        refs, ref_flags = message.arrays[REF + "references"], message.arrays[REF + "ref_flags"]
        use_protos = bool(proto_flags.any())
        w = warmup_weight(ctx.round, cfg.warmup)
        rho_sums = torch.zeros(len(layers), C, dtype=torch.float64)
        occurrences = torch.zeros(C, dtype=torch.float64)
        direction_sums = torch.zeros(C, protos.shape[1], dtype=torch.float64)  # direction_pass="train"

        def loss_fn(m, x, y):
            views = torch.cat([augment(x, "weak", generator, cfg.augment), augment(x, "strong", generator, cfg.augment)])
            yy = torch.cat([y, y])
            logits, feats = m.forward_features(views, names)
            loss = F.cross_entropy(logits, yy)  # Eq. (9): both views
            hs = [feats[name] for name in layers]
            with torch.no_grad():  # every occurrence feeds the magnitude references, before its step
                for ell, h in enumerate(hs):
                    rho_sums[ell].index_add_(0, yy, log_norm(h, cfg.eps).to(torch.float64))
                occurrences.index_add_(0, yy, torch.ones(len(yy), dtype=torch.float64))
                if cfg.direction_pass == "train":  # the weak views' directions, before the step
                    direction_sums.index_add_(0, y, unit(feats[PENULTIMATE][: len(y)]).to(torch.float64))
            reg = 0.0
            if cfg.lambda_dir > 0:
                u = unit(feats[PENULTIMATE])
                reg = reg + cfg.lambda_dir * directional_loss(u, yy, protos, cfg.tau, cfg.beta, use_protos)
            if cfg.lambda_rad > 0 and bool(ref_flags.any()):
                reg = reg + cfg.lambda_rad * magnitude_loss(hs, yy, refs, ref_flags, cfg.r_min, cfg.eps)
            return loss + w * reg  # Eq. (17)

        loss = local_train(model, data.train.x, data.train.y, self.train, generator, loss_fn=loss_fn)
        if cfg.direction_pass == "eval":  # Appendix A-I: evaluation mode, no augmentation, updated backbone
            directions, counts = class_directions(model, data.train.x, data.train.y, C)
        else:
            directions = unit(direction_sums).to(torch.float32)
            counts = torch.bincount(data.train.y, minlength=C).to(torch.float64)
        arrays = {**model_arrays(model), REF + "directions": directions, REF + "dir_counts": counts,
                  REF + "rho_sums": rho_sums, REF + "occurrences": occurrences}
        return state, update_message(arrays, len(data.train), loss)

    def aggregate(self, server: State, replies, round_: int) -> State:
        """FedAvg's mean of the models, then the direction and magnitude references."""
        updates = list(replies)
        new = model_average(server, updates)
        if not updates:
            return new
        a = new.arrays
        counts = torch.stack([m.arrays[REF + "dir_counts"] for _, m in updates])
        dirs = torch.stack([m.arrays[REF + "directions"] for _, m in updates])
        a[REF + "prototypes"], a[REF + "proto_flags"] = update_directions(
            server.arrays[REF + "prototypes"], server.arrays[REF + "proto_flags"], counts, dirs, self.cgrl.xi)
        sums = torch.stack([m.arrays[REF + "rho_sums"] for _, m in updates]).sum(0)
        occ = torch.stack([m.arrays[REF + "occurrences"] for _, m in updates]).sum(0)
        a[REF + "references"], a[REF + "ref_flags"] = update_magnitudes(
            server.arrays[REF + "references"], server.arrays[REF + "ref_flags"], sums, occ, self.cgrl.zeta)
        return new

    def deploy(self, ctx: ClientContext, state: State, message: Message, data, generator: torch.Generator):
        """The trained network with its training-only classifier (FedGRC replaces it by the statistical head)."""
        return load_model(ctx.model, message).eval()


@torch.no_grad()
def class_directions(model, x: torch.Tensor, y: torch.Tensor, n_classes: int, batch_size: int = 256
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Post-update class directions :math:`\operatorname{unit}(\sum_{i: y_i = c} u_i)` (C, d) and counts (C,).

    Evaluation mode, no augmentation (:meth:`fedlib.models.FeatureModel.extract`, in batches of
    ``batch_size``); zero rows for classes without a sample.
    """
    u = unit(model.extract(x, batch_size=batch_size)).to(torch.float64)  # (n, d), rows in order
    total = torch.zeros(n_classes, model.feature_dims[PENULTIMATE], dtype=torch.float64)
    total.index_add_(0, y, u)  # row by row in sample order, as the batch-by-batch sums did
    counts = torch.bincount(y, minlength=n_classes).to(torch.float64)
    return unit(total).to(torch.float32), counts


__all__ = ["CGRL", "class_directions"]
