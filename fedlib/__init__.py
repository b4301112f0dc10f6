"""fedlib: a thin, tested PyTorch library for personalized and heterogeneous federated learning.

The companion library of the book in ``book/``. Modules (one per concept):

- :mod:`fedlib.data`: loaders (UCI digits, MNIST-5k, Gaussian mixtures, CIFAR from a local root,
  multi-domain digits) and seeded partitioners;
- :mod:`fedlib.models`: a small CNN, an MLP, ResNet-18 and MobileNetV2 behind one interface that
  returns logits and pooled per-layer features;
- :mod:`fedlib.federation`: clients that own their data and the shared global test set;
- :mod:`fedlib.loop`: the one round loop, with events, checkpoints and the evaluation schedule;
- :mod:`fedlib.messages`: messages, explicit client state and the communication ledger;
- :mod:`fedlib.aggregate`: aggregation as free functions;
- :mod:`fedlib.training`: local training and prediction;
- :mod:`fedlib.metrics`: the evaluation protocol (local, global, unseen, rare accuracy; floors);
- :mod:`fedlib.algorithms`: one small module per method (FedAvg, FedAvg-FT, ...);
- :mod:`fedlib.chapter`: the chapter helper of the notebooks: the ``smoke`` / ``book`` / ``paper``
  profiles, the seeded data choice, the check table and the claims verdict.
"""

__version__ = "0.1.0"
