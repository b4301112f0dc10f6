"""fedlib: a thin, tested PyTorch library for personalized and heterogeneous federated learning.

The companion library of the book in ``book/``. Modules (one per concept), from the bottom
layer up (a module imports only from the layers below it; the book's page *Inside fedlib*):

- :mod:`fedlib.validation`, :mod:`fedlib.rng`, :mod:`fedlib.io`, :mod:`fedlib.messages`,
  :mod:`fedlib.aggregate`: the number checks at the public edge, seeds by purpose, atomic and safe
  files, messages / state / ledger, aggregation as free functions;
- :mod:`fedlib.data`: one registry of data sets by name, seeded-subsampled
  (:func:`fedlib.data.datasets.load_dataset`: UCI digits, MNIST-5k, Gaussian mixtures, CIFAR from a
  local root, multi-domain digits) and seeded partitioners (the departure scenario among them);
- :mod:`fedlib.models`: a small CNN, an MLP, ResNet-18 and MobileNetV2 behind one interface that
  returns logits and pooled per-layer features;
- :mod:`fedlib.training`: local training and prediction, and local work as data (programs);
- :mod:`fedlib.stats`: additive class moments; :mod:`fedlib.metrics`: the evaluation protocol
  (local, pooled, global, unseen, rare accuracy; floors);
- ``fedlib.heads``: the statistical heads (one estimator base, a module per family);
- :mod:`fedlib.tracking`, :mod:`fedlib.geometry`, :mod:`fedlib.cgrl`, :mod:`fedlib.clustering`,
  :mod:`fedlib.distill`, :mod:`fedlib.encoders`: the papers' mathematics as free functions, and
  frozen encoders;
- :mod:`fedlib.federation`: clients that own their data and the shared global test set;
- :mod:`fedlib.protocol`: the method contract (the seven hooks a method overrides, and the one
  declaration of what it can do);
- ``fedlib.algorithms``: one small module per method (FedAvg, FedAvg-FT, ...);
- :mod:`fedlib.transport`: the transport contract; :mod:`fedlib.engines`: the transports that
  carry a round's messages (in this process, stacked, on Flower's nodes);
- :mod:`fedlib.results`: what a run returns and its results folder;
- :mod:`fedlib.loop`: the one round loop over a given transport, with events, checkpoints and the
  evaluation schedule (it imports no engine and no method);
- :mod:`fedlib.run`: ``run_federated`` and ``RunOptions``, which build the engine a run asks for and
  run the loop; :mod:`fedlib.posthoc`: the terminal statistics round and statistical heads
  deployed on a trained backbone.

The book's machinery (its claims, studies and pages) is the separate package ``fedbook``, under
``book/``; nothing in fedlib imports it.
"""

__version__ = "0.1.0"
