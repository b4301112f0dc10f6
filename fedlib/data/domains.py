"""Federations over a multi-domain data set: one client per domain (the GGEUR chapter's Digits setting).

>>> import numpy as np, torch
>>> from fedlib.data import ArrayDataset
>>> ds = ArrayDataset(torch.randn(40, 3), torch.arange(40) % 4, 4, "toy",
...                   domain=torch.arange(40) // 20, domain_names=("a", "b"))
>>> fed, sizes = one_client_per_domain(ds, {"a": 20, "b": 20}, test_share=0.25, client_share=0.5, seed=0)
>>> fed.n_clients, len(fed.global_test), sizes["a"]["client train"], sizes["b"]["domain test"]
(2, 10, 10, 5)
"""

from __future__ import annotations

import numpy as np
import torch

from ..federation import ClientData, Federation
from ..rng import PARTITION, numpy_rng
from .datasets import ArrayDataset

__all__ = ["one_client_per_domain"]


def one_client_per_domain(data: ArrayDataset, domain_sizes: dict[str, int], test_share: float, client_share: float,
                          seed: int) -> tuple[Federation, dict[str, dict[str, int]]]:
    """One client per domain of ``data`` (with ``domain`` and ``domain_names``), as in the paper's
    multi-domain setting.

    Parameters
    ----------
    data : ArrayDataset
        The samples the clients and tests draw from (e.g. the embedded non-public part of the domains).
    domain_sizes : dict
        Each domain's full size (before any public split): the shares below are of it.
    test_share, client_share : float
        The share of a domain that is its test set, and the share its client trains on.
    seed : int
        The run seed; the draw uses the stream ``numpy_rng(seed, PARTITION)``.

    Returns
    -------
    (Federation, sizes)
        Client ``d`` holds domain ``d``'s training share and tests on its test share; the global
        test set is the union of the domain tests. ``sizes`` lists, per domain, its size, the
        client's training size, the test size and how many classes the client holds.
    """
    if data.domain is None:
        raise ValueError("one_client_per_domain needs a data set with domains")
    rng = numpy_rng(seed, PARTITION)
    clients, tests, sizes = [], [], {}
    for d, dname in enumerate(data.domain_names):
        idx = rng.permutation(np.flatnonzero(data.domain.numpy() == d))
        n_dom = int(domain_sizes[dname])
        n_test, n_client = int(round(test_share * n_dom)), int(round(client_share * n_dom))
        if n_test + n_client > len(idx):
            raise ValueError(f"domain {dname!r}: {n_test} test + {n_client} client samples exceed the {len(idx)} available")
        test_d, train_d = data.subset(idx[:n_test]), data.subset(idx[n_test:n_test + n_client])
        clients.append(ClientData(train_d, test_d))
        tests.append(idx[:n_test])
        sizes[dname] = {"domain size": n_dom, "client train": len(train_d), "domain test": len(test_d),
                        "classes held": int((torch.bincount(train_d.y, minlength=data.n_classes) > 0).sum())}
    fed = Federation(clients, data.subset(np.concatenate(tests)), data.n_classes,
                     {"dataset": f"{data.name}", "clients": "one per domain", "seed": seed})
    return fed, sizes
