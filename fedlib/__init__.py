"""fedlib: a thin, tested PyTorch library for personalized and heterogeneous federated learning.

The companion library of the book in ``book/``. Modules (one per concept), from the bottom
layer up (a module imports only from the layers below it; the book's page *Inside fedlib*):

- :mod:`fedlib.validation`, :mod:`fedlib.rng`, :mod:`fedlib.io`, :mod:`fedlib.messages`,
  :mod:`fedlib.aggregate`: the number checks at the public edge, seeds by purpose, atomic and safe
  files, messages / state / ledger, aggregation as free functions;
- :mod:`fedlib.data`: loaders (UCI digits, MNIST-5k, Gaussian mixtures, CIFAR from a local root,
  multi-domain digits), seeded partitioners (the departure scenario among them) and a chapter's
  data choice by name (:func:`fedlib.data.load_dataset`);
- :mod:`fedlib.models`: a small CNN, an MLP, ResNet-18 and MobileNetV2 behind one interface that
  returns logits and pooled per-layer features;
- :mod:`fedlib.training`: local training and prediction;
- :mod:`fedlib.stats`: additive class moments; :mod:`fedlib.metrics`: the evaluation protocol
  (local, pooled, global, unseen, rare accuracy; floors);
- ``fedlib.heads``: the statistical heads (one estimator base, a module per family);
- :mod:`fedlib.tracking`, :mod:`fedlib.geometry`, :mod:`fedlib.cgrl`, :mod:`fedlib.encoders`:
  the papers' mathematics (MPT, GGEUR, FedGRC) as free functions, and frozen encoders;
- :mod:`fedlib.federation`: clients that own their data and the shared global test set;
- :mod:`fedlib.protocol`: the method contract (the seven hooks a method overrides);
- ``fedlib.algorithms``: one small module per method (FedAvg, FedAvg-FT, ...);
- :mod:`fedlib.transport`: the transport contract; :mod:`fedlib.engines`: the transports that
  carry a round's messages (in this process, stacked, on Flower's nodes);
- :mod:`fedlib.loop`: the one round loop over a given transport, with events, checkpoints and the
  evaluation schedule (it imports no engine and no method);
- :mod:`fedlib.run`: ``run_federated``, which builds the engine a run asks for and runs the loop;
  :mod:`fedlib.posthoc`: the terminal statistics round and statistical-head deployment;
- :mod:`fedbook.claims`, :mod:`fedbook.checks`: claims decided from paired intervals over seeds by
  rules declared in advance, and the check table of a derivations chapter;
- :mod:`fedbook.page`: the book's tooling, the top layer (nothing in fedlib imports it): a chapter's
  setup in one call (the ``smoke`` / ``book`` / ``paper`` profiles, papermill's parameters checked),
  tables for reading, the exercises' index and the claims report.
"""

__version__ = "0.1.0"
