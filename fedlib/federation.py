"""A federation: clients that own their data, and the shared class-balanced global test set.

Data flows one way (the book's page *Inside fedlib*): dataset -> global test split -> partition
of the rest -> per-client train / local-test split -> :class:`Federation`. Only the transport's
clients (:class:`fedlib.engines.inprocess.Client`) hold a :class:`ClientData`; the server side of
the loop never receives one.
"""

from __future__ import annotations
import hashlib

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from .data.datasets import _rotate
from .data import ArrayDataset, global_test_split, make_partition, partition_summary, split_train_test
from .metrics import pooled_effective_size, pooled_largest_step, rare_classes
from .rng import GLOBAL_TEST, LOCAL_SPLIT, PARTITION, VALIDATION, derive_seed, numpy_rng
from .validation import check_real, is_int


@dataclass(frozen=True)
class ClientData:
    """One client's training split, local test split and, optionally, its own held-out pool.

    Attributes
    ----------
    train, test : ArrayDataset
        The client's training split and local test split.
    pool : ArrayDataset or None
        A held-out set drawn from the client's own input distribution (class-balanced where it
        can be), on which its predictor's ``pooled`` accuracy is scored
        (:func:`fedlib.metrics.pooled_accuracy`), when it differs in inputs from the global test
        set: the global test set rotated by the client's rotation
        (:func:`make_rotation_federation`), its domain's test share (:func:`one_client_per_domain`).
        ``None`` (the default): the pool is the federation's global test set, as under label skew
        (:func:`make_federation`). A pool that is the global test set object itself, or the
        client's local test split itself, is recognised by the engines, which then reuse those
        predictions.
    """

    train: ArrayDataset
    test: ArrayDataset
    pool: ArrayDataset | None = None

    def train_counts(self, n_classes: int) -> np.ndarray:
        """Per-class training counts, shape (n_classes,)."""
        return np.bincount(self.train.labels_np, minlength=n_classes).astype(np.int64)


@dataclass(frozen=True)
class Federation:
    """Clients' data plus the shared global test set.

    Attributes
    ----------
    clients : list of ClientData, one per client
    global_test : ArrayDataset, class-balanced, disjoint from every client's data
    n_classes : int
    description : dict, how it was built (for tables and reproducibility)
    """

    clients: list[ClientData]
    global_test: ArrayDataset
    n_classes: int
    description: dict

    @property
    def n_clients(self) -> int:
        return len(self.clients)

    def train_counts(self) -> np.ndarray:
        """Client × class training counts, shape (n_clients, n_classes)."""
        return np.stack([c.train_counts(self.n_classes) for c in self.clients])

    def client_pool(self, k: int) -> ArrayDataset:
        """The held-out pool client ``k``'s ``pooled`` accuracy is scored on: its own
        (:attr:`ClientData.pool`), or the global test set."""
        if not is_int(k) or not 0 <= k < self.n_clients:
            raise ValueError(f"client must be an index in [0, {self.n_clients}) (valid: 0..{self.n_clients - 1}), "
                             f"got {k!r}")
        pool = self.clients[k].pool
        return self.global_test if pool is None else pool

    def pool_sizes(self) -> np.ndarray:
        """Each client's effective pool size, shape (n_clients,): the number of independent
        images its ``pooled`` accuracy rests on (:func:`fedlib.metrics.pooled_effective_size` of
        its pool's class counts and its training counts; NaN for a client without training
        sample). A client's local test split holds a few dozen images; this, hundreds.

        Examples
        --------
        >>> from fedlib.data import make_gaussian_mixture
        >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
        >>> fed = make_federation(ds, n_clients=2, alpha=0.5, global_test_per_class=10, seed=0)
        >>> fed.train_counts().tolist()
        [[19, 4, 19], [4, 18, 3]]
        >>> fed.pool_sizes().round(1).tolist()  # 10 global test images per class; 1 / sum(pi_c^2 / 10)
        [23.9, 17.9]
        """
        return self._over_pools(pooled_effective_size)

    def pool_steps(self) -> np.ndarray:
        """The most one pool image can move each client's ``pooled`` accuracy, shape (n_clients,), a
        fraction (:func:`fedlib.metrics.pooled_largest_step`; NaN for a client without training
        sample): the resolution of a client's pooled score.

        Examples
        --------
        >>> from fedlib.data import make_gaussian_mixture
        >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
        >>> fed = make_federation(ds, n_clients=2, alpha=0.5, global_test_per_class=10, seed=0)
        >>> fed.pool_steps().round(4).tolist()  # 19 / 42 / 10 and 18 / 25 / 10
        [0.0452, 0.072]
        """
        return self._over_pools(pooled_largest_step)

    def digest(self) -> str:
        """A SHA-256 hex digest of the data and the partition: every client's training split,
        local test split and pool, and the global test set (inputs, labels and domains, in client
        order), so two federations with the same description but other data or another
        partition have different digests. A checkpoint's fingerprint carries it
        (:func:`fedlib.run.run_federated`): a run resumes only on the data it was started on.

        Examples
        --------
        >>> from fedlib.data import make_gaussian_mixture
        >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
        >>> a = make_federation(ds, n_clients=2, alpha=0.5, global_test_per_class=10, seed=0)
        >>> b = make_federation(ds, n_clients=2, alpha=0.5, global_test_per_class=10, seed=1)
        >>> a.digest() == make_federation(ds, n_clients=2, alpha=0.5, global_test_per_class=10, seed=0).digest()
        True
        >>> a.digest() == b.digest()
        False
        """
        h = hashlib.sha256()

        def add(ds: ArrayDataset | None, tag: str) -> None:
            h.update(tag.encode())
            if ds is None:
                return
            for t in (ds.x, ds.y, ds.domain):
                if t is None:
                    h.update(b"-")
                    continue
                t = t.detach().cpu().contiguous()
                h.update(f"{t.dtype}{tuple(t.shape)}".encode())
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")

        for k, c in enumerate(self.clients):
            add(c.train, f"train{k}")
            add(c.test, f"test{k}")
            add(c.pool, f"pool{k}")
        add(self.global_test, "global")
        return h.hexdigest()

    def _over_pools(self, measure) -> np.ndarray:
        """``measure(pool class counts, training counts)`` of every client, shape (n_clients,)."""
        counts = self.train_counts()
        return np.array([measure(np.bincount(self.client_pool(k).labels_np, minlength=self.n_classes), counts[k])
                         for k in range(self.n_clients)], dtype=float)

    def summary(self, rare_ratio: float | None = None) -> pd.DataFrame:
        """One row per client: training and local-test sizes, classes seen, largest class share;
        with ``rare_ratio`` also ``rare_classes``, the client's locally rare classes
        (:func:`fedlib.metrics.rare_classes` at that threshold).

        Examples
        --------
        >>> from fedlib.data import make_gaussian_mixture
        >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
        >>> fed = make_federation(ds, n_clients=2, alpha=0.5, global_test_per_class=10, seed=0)
        >>> fed.train_counts().tolist()
        [[19, 4, 19], [4, 18, 3]]
        >>> fed.summary(rare_ratio=0.5)["rare_classes"].tolist()  # 4 * 3 < 0.5 * 42; 4 * 3, 3 * 3 < 0.5 * 25
        [1, 2]
        >>> fed.summary(rare_ratio=0.25)["rare_classes"].tolist()  # 4 * 3 > 0.25 * 42, 3 * 3 > 0.25 * 25
        [0, 0]
        """
        counts = self.train_counts()
        n = counts.sum(axis=1)
        columns = {
            "n_train": n,
            "n_local_test": [len(c.test) for c in self.clients],
            "classes_seen": (counts > 0).sum(axis=1),
            "largest_class_share": np.where(n > 0, counts.max(axis=1) / np.maximum(n, 1), 0.0),
        }
        if rare_ratio is not None:
            columns["rare_classes"] = [int(rare_classes(row, rare_ratio).sum()) for row in counts]
        return pd.DataFrame(columns, index=pd.RangeIndex(self.n_clients, name="client"))


def make_federation(
    dataset: ArrayDataset,
    *,
    n_clients: int,
    partition: str = "dirichlet",
    global_test_per_class: int = 100,
    test_fraction: float = 0.25,
    seed: int = 0,
    **partition_kwargs,
) -> Federation:
    """Split ``dataset`` into a class-balanced global test set and ``n_clients`` clients.

    Parameters
    ----------
    dataset : the pooled data (e.g. :func:`fedlib.data.datasets.load_mnist5k`)
    n_clients : number of clients
    partition : a name from ``fedlib.data.PARTITIONS`` (``"dirichlet"`` takes ``alpha`` and
        ``min_size``; ``"label_subset"`` takes ``class_fraction``; ...)
    global_test_per_class : samples of every class held out as the shared global test set
    test_fraction : share of each client's data in its local test split (75/25 by default)
    seed : run seed; the three random steps use independent derived streams

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    >>> fed = make_federation(ds, n_clients=4, alpha=0.5, global_test_per_class=10, seed=0)
    >>> fed.n_clients, len(fed.global_test)
    (4, 30)
    """
    labels = dataset.labels_np
    test_idx, rest = global_test_split(labels, global_test_per_class, seed=derive_seed(seed, GLOBAL_TEST))
    parts = make_partition(partition, labels[rest], n_clients, seed=derive_seed(seed, PARTITION), **partition_kwargs)
    parts = [rest[p] for p in parts]
    train_parts, test_parts = split_train_test(labels, parts, test_fraction=test_fraction, seed=derive_seed(seed, LOCAL_SPLIT))
    empty = [k for k, tr in enumerate(train_parts) if len(tr) == 0]
    if empty:
        raise ValueError(
            f"clients {empty[:10]}{' ...' if len(empty) > 10 else ''} have no training sample (partition {partition!r} "
            f"with {partition_kwargs}); every client needs one: raise min_size (valid: >= 1, e.g. min_size=10), or use "
            "fewer clients or a larger alpha"
        )
    clients = [ClientData(dataset.subset(tr), dataset.subset(te)) for tr, te in zip(train_parts, test_parts)]
    description = {
        "dataset": dataset.name,
        "n_clients": n_clients,
        "partition": partition,
        **{k: v for k, v in partition_kwargs.items() if np.isscalar(v)},
        "global_test_per_class": global_test_per_class,
        "test_fraction": test_fraction,
        "seed": seed,
    }
    return Federation(clients, dataset.subset(test_idx), dataset.n_classes, description)


def hold_out_validation(federation: Federation, fraction: float, seed: int) -> tuple[Federation, ArrayDataset]:
    """Hold out a class-balanced share of the global test set as a validation set.

    What a chapter selects (a baseline head, a setting) it selects on the validation images and
    reports on the rest, so the selection does not profit from the luck of the test draw. From
    each class of the global test set, ``round(fraction * n_c)`` of its ``n_c`` images are drawn
    with the stream :data:`fedlib.rng.VALIDATION` of ``seed``.

    Parameters
    ----------
    federation : Federation
    fraction : float in [0, 1)
        The share of each class held out.
    seed : int
        The run seed.

    Returns
    -------
    (Federation, ArrayDataset)
        The federation whose global test set is the rest (in its order), and the validation set
        (in the order of the global test set). The clients keep their data; a client's own pool
        that is a copy of the global test set in its own inputs (the same labels in the same
        order, as :func:`make_rotation_federation` builds it) loses the same images, so that its
        ``pooled`` score rests on the rest too; any other pool (a domain's test share) is kept
        as it is, as the local test splits are.

    Raises
    ------
    ValueError
        On a ``fraction`` outside [0, 1).

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    >>> fed, val = hold_out_validation(make_federation(ds, n_clients=2, alpha=0.5, global_test_per_class=10, seed=0), 0.3, 0)
    >>> len(fed.global_test), len(val), np.bincount(val.labels_np).tolist()
    (21, 9, [3, 3, 3])
    """
    check_real("fraction", fraction, low=0.0, high=1.0, high_open=True)
    rng = numpy_rng(seed, VALIDATION)
    y = federation.global_test.labels_np
    val = np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == c))[: int(round(fraction * (y == c).sum()))]
                                  for c in range(federation.n_classes)]))
    test = np.setdiff1d(np.arange(len(y)), val)
    kept = federation.global_test.subset(test)
    subsets: dict[int, ArrayDataset] = {id(federation.global_test): kept}  # one subset per shared pool object

    def rest(pool: ArrayDataset | None) -> ArrayDataset | None:
        if pool is None or len(pool) != len(y) or not np.array_equal(pool.labels_np, y):
            return pool
        if id(pool) not in subsets:
            subsets[id(pool)] = pool.subset(test)
        return subsets[id(pool)]

    clients = [c if rest(c.pool) is c.pool else replace(c, pool=rest(c.pool)) for c in federation.clients]
    if all(a is b for a, b in zip(clients, federation.clients)):
        clients = federation.clients  # no pool changed: the very same clients
    return replace(federation, clients=clients, global_test=kept), federation.global_test.subset(val)


def make_federations(dataset: ArrayDataset, alphas: Iterable[float | None], *, min_size: int = 10,
                     **kwargs) -> dict[float | None, Federation]:
    """One federation of ``dataset`` per Dirichlet concentration of ``alphas`` (``None``: the IID
    partition), all with the same clients, global test set size and seed (``kwargs``, as
    :func:`make_federation` takes them); each Dirichlet partition gives every client at least
    ``min_size`` samples.

    Returns
    -------
    dict
        The federations by their ``alphas`` entry, in its order.

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    >>> feds = make_federations(ds, [None, 0.1], n_clients=4, global_test_per_class=10, seed=0)
    >>> {a: f.description["partition"] for a, f in feds.items()}
    {None: 'iid', 0.1: 'dirichlet'}
    """
    return {a: make_federation(dataset, partition="iid", **kwargs) if a is None else
            make_federation(dataset, partition="dirichlet", alpha=a, min_size=min_size, **kwargs) for a in alphas}


@dataclass(frozen=True)
class DepartureScenario:
    """MPT's client-departure scenario: a federation with a designated rare class and the client
    that holds most of it (Jang et al., arXiv:2609.12771, Section V-A, "Scenario").

    Attributes
    ----------
    federation : the :class:`Federation` (built by :func:`make_federation` with the
        ``"departure"`` partition, :func:`fedlib.data.partition.departure_partition`)
    departing_client : the client id that will leave (a loop ``Event(round, client, "leave")``)
    rare_class : the designated rare class
    n_rare_departing : rare training+local-test samples on the departing client
    n_rare_remaining : rare samples on all other clients together
    """

    federation: Federation
    departing_client: int
    rare_class: int
    n_rare_departing: int
    n_rare_remaining: int

    def remaining_train_sizes(self) -> np.ndarray:
        """The training samples of every client but the departing one, in client order, shape
        (n_clients - 1,).

        Examples
        --------
        >>> from fedlib.data import make_gaussian_mixture
        >>> ds = make_gaussian_mixture(n_per_class=120, n_classes=3, dim=2, seed=0).dataset
        >>> sc = make_departure_scenario(ds, n_clients=4, rare_class=1, departing_share=0.9, global_test_per_class=20)
        >>> sizes = sc.remaining_train_sizes()
        >>> len(sizes), int(sizes.sum()) == sum(len(c.train.y) for c in sc.federation.clients[1:])
        (3, True)
        """
        return np.array([len(c.train.y) for k, c in enumerate(self.federation.clients) if k != self.departing_client])


def make_departure_scenario(
    dataset: ArrayDataset,
    *,
    n_clients: int = 10,
    rare_class: int = 0,
    departing_share: float = 0.98,
    departing_client: int = 0,
    global_test_per_class: int = 100,
    test_fraction: float = 0.0,
    seed: int = 0,
) -> DepartureScenario:
    """Build the departure scenario: :func:`make_federation` with the ``"departure"`` partition.

    Parameters
    ----------
    dataset : the pooled data
    n_clients : number of clients (>= 2)
    rare_class : the class concentrated on the departing client, in ``[0, n_classes)``
    departing_share : share of the rare class (after the global test split) held by the departing
        client, in ``[0, 1]``; the remaining fraction ``1 - departing_share`` (the paper's 1, 2, 5,
        10 %) is dealt over the other clients as evenly as possible, in random order
    departing_client : its id, in ``[0, n_clients)``
    global_test_per_class : samples of every class held out first as the shared global test set
    test_fraction : each client's local test split (default 0: the few remaining rare samples
        all stay on the clients' training side, where MPT measures them)
    seed : run seed (global test split, dealing, local splits use derived streams)

    Examples
    --------
    >>> from fedlib.data import make_gaussian_mixture
    >>> ds = make_gaussian_mixture(n_per_class=120, n_classes=3, dim=2, seed=0).dataset
    >>> sc = make_departure_scenario(ds, n_clients=4, rare_class=1, departing_share=0.9, global_test_per_class=20)
    >>> sc.n_rare_departing, sc.n_rare_remaining
    (90, 10)
    """
    C = dataset.n_classes
    if not isinstance(rare_class, (int, np.integer)) or isinstance(rare_class, bool) or not 0 <= rare_class < C:
        raise ValueError(f"rare_class must be a class index in [0, {C}) (valid: 0..{C - 1}), got {rare_class!r}")
    if not np.any(dataset.labels_np == rare_class):
        raise ValueError(f"rare_class {rare_class} has no sample in {dataset.name!r}; classes present: "
                         f"{sorted(set(dataset.labels_np.tolist()))}")
    labels = dataset.labels_np
    _, rest = global_test_split(labels, global_test_per_class, seed=derive_seed(seed, GLOBAL_TEST))
    if not np.any(labels[rest] == rare_class):
        raise ValueError(f"rare_class {rare_class} has no sample left after the global test split "
                         f"({global_test_per_class} per class); lower global_test_per_class")
    fed = make_federation(
        dataset, n_clients=n_clients, partition="departure", global_test_per_class=global_test_per_class,
        test_fraction=test_fraction, seed=seed, rare_class=int(rare_class), departing_share=departing_share,
        departing_client=departing_client, n_classes=C,
    )
    def rare(k: int) -> int:
        c = fed.clients[k]
        return int(np.sum(c.train.labels_np == rare_class) + np.sum(c.test.labels_np == rare_class))

    n_dep = rare(int(departing_client))
    n_rem = sum(rare(k) for k in range(fed.n_clients) if k != departing_client)
    return DepartureScenario(fed, int(departing_client), int(rare_class), n_dep, n_rem)



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
        Client ``d`` holds domain ``d``'s training share and tests on its test share, which is
        also its pool (:attr:`ClientData.pool`: its ``pooled`` accuracy reweights that share's
        recalls by its class mix); the global test set is the union of the domain tests.
        ``sizes`` lists, per domain, its size, the client's training size, the test size and how
        many classes the client holds.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from fedlib.data import ArrayDataset
    >>> ds = ArrayDataset(torch.randn(40, 3), torch.arange(40) % 4, 4, "toy",
    ...                   domain=torch.arange(40) // 20, domain_names=("a", "b"))
    >>> fed, sizes = one_client_per_domain(ds, {"a": 20, "b": 20}, test_share=0.25, client_share=0.5, seed=0)
    >>> fed.n_clients, len(fed.global_test), sizes["a"]["client train"], sizes["b"]["domain test"]
    (2, 10, 10, 5)
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
        clients.append(ClientData(train_d, test_d, pool=test_d))
        tests.append(idx[:n_test])
        sizes[dname] = {"domain size": n_dom, "client train": len(train_d), "domain test": len(test_d),
                        "classes held": int((torch.bincount(train_d.y, minlength=data.n_classes) > 0).sum())}
    fed = Federation(clients, data.subset(np.concatenate(tests)), data.n_classes,
                     {"dataset": f"{data.name}", "clients": "one per domain", "seed": seed})
    return fed, sizes


def make_rotation_federation(
    dataset: ArrayDataset,
    *,
    n_clients: int,
    n_rotations: int = 4,
    global_test_per_class: int = 100,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> tuple[Federation, np.ndarray]:
    """Covariate shift with equal label frequencies: an IID partition whose clients see their
    images rotated, ``n_rotations`` rotation groups of contiguous clients (HDC-FL's rotation
    setting, arXiv:2610.30075, Appendix A: 4 rotations x 5 clients).

    Client ``k`` of group ``g`` (``np.array_split(range(n_clients), n_rotations)[g]``) has its
    training and local test images rotated by ``g * 360 / n_rotations`` degrees
    counter-clockwise (``torch.rot90`` for multiples of 90 degrees: exact, no interpolation;
    bilinear otherwise). The global test set stays unrotated; each client's pool
    (:attr:`ClientData.pool`) is the global test set rotated by its group's rotation, one copy
    per group shared by its clients (group 0's is the global test set object itself), so its
    ``pooled`` accuracy is scored on images of its own distribution.

    Returns
    -------
    (Federation, client_rotation)
        ``client_rotation`` of shape (n_clients,): each client's group ``g``.

    Examples
    --------
    >>> from fedlib.data import ArrayDataset
    >>> ds = ArrayDataset(torch.rand(80, 1, 4, 4), torch.arange(80) % 4, 4, "toy")
    >>> fed, rot = make_rotation_federation(ds, n_clients=4, n_rotations=2, global_test_per_class=2)
    >>> rot.tolist(), fed.description["partition"]
    ([0, 0, 1, 1], 'rotation')
    >>> torch.equal(fed.clients[2].pool.x, torch.rot90(fed.global_test.x, 2, dims=(2, 3)))
    True
    >>> fed.clients[2].pool is fed.clients[3].pool
    True
    """
    if isinstance(n_rotations, bool) or not isinstance(n_rotations, (int, np.integer)) or not 1 <= n_rotations <= n_clients:
        raise ValueError(f"n_rotations must be an integer in [1, n_clients={n_clients}], got {n_rotations!r}")
    if dataset.x.dim() != 4:
        raise ValueError(f"rotation needs images of shape (n, c, h, w), got inputs of shape {tuple(dataset.x.shape)}")
    fed = make_federation(dataset, n_clients=n_clients, partition="iid", global_test_per_class=global_test_per_class,
                          test_fraction=test_fraction, seed=seed)
    group = np.empty(n_clients, dtype=np.int64)
    for g, block in enumerate(np.array_split(np.arange(n_clients), n_rotations)):
        group[block] = g

    def rotated(ds: ArrayDataset, g: int) -> ArrayDataset:
        degrees = g * 360 / n_rotations
        x = torch.rot90(ds.x, int(degrees // 90), dims=(2, 3)) if degrees % 90 == 0 else _rotate(ds.x, degrees)
        return ArrayDataset(x.contiguous(), ds.y, ds.n_classes, ds.name, ds.domain, ds.domain_names)

    # one copy per group, shared by its clients; group 0 (no rotation) scores on the global test set itself
    pools = [fed.global_test] + [rotated(fed.global_test, g) for g in range(1, n_rotations)]
    clients = [ClientData(rotated(c.train, int(g)), rotated(c.test, int(g)), pool=pools[g])
               for c, g in zip(fed.clients, group)]
    description = {**fed.description, "partition": "rotation", "n_rotations": int(n_rotations)}
    return Federation(clients, fed.global_test, fed.n_classes, description), group


__all__ = ["ClientData", "DepartureScenario", "Federation", "hold_out_validation", "make_departure_scenario",
           "make_federation", "make_federations", "make_rotation_federation", "one_client_per_domain",
           "partition_summary"]
