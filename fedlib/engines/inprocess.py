"""The in-process transport: every client runs in this process, one after another."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterator

import numpy as np
import torch

from ..federation import ClientData, Federation
from ..messages import Message, State
from ..metrics import client_predictions_abilities
from ..models import ClientArchitectures
from ..protocol import Algorithm, ClientContext, LocalWork, Predictor, ProgramMethod
from ..rng import DEPLOY, INIT, LOCAL_TRAIN, derive_seed, isolated_torch_rng
from ..training import SequentialWork, predict
from ..transport import ClientFailure, Transport


class Client:
    """A client: its id and its own data. It runs the algorithm's client hooks on them."""

    def __init__(self, cid: int, data: ClientData, n_classes: int) -> None:
        self.cid = cid
        self._data = data
        self._n_classes = n_classes

    def update(
        self, algorithm: Algorithm, state: State, message: Message, round_: int, seed: int, workspace
    ) -> tuple[State, Message]:
        ctx = ClientContext(self.cid, round_, workspace, self._n_classes)
        stream = derive_seed(seed, round_, self.cid, LOCAL_TRAIN)
        with isolated_torch_rng(stream):
            return algorithm.local_update(ctx, state, message, self._data, torch.Generator().manual_seed(stream))

    def program(self, algorithm: ProgramMethod, state: State, message: Message, round_: int, workspace) -> LocalWork:
        """The method's work for this client and round (:meth:`fedlib.protocol.ProgramMethod.program`)."""
        return algorithm.program(ClientContext(self.cid, round_, workspace, self._n_classes), state, message, self._data)

    def run(self, work: SequentialWork, round_: int, seed: int, workspace) -> tuple[State, Message]:
        """Run ``work`` in ``workspace`` with this client's generator and torch stream of round
        ``round_``, as ``update`` runs ``local_update``."""
        stream = derive_seed(seed, round_, self.cid, LOCAL_TRAIN)
        with isolated_torch_rng(stream):
            return work.run(workspace, torch.Generator().manual_seed(stream))

    def train_generator(self, round_: int, seed: int) -> torch.Generator:
        """The generator of this client's local training in round ``round_``: the one
        ``update`` hands to ``local_update``."""
        return torch.Generator().manual_seed(derive_seed(seed, round_, self.cid, LOCAL_TRAIN))

    def deploy(
        self, algorithm: Algorithm, state: State, message: Message, round_: int, seed: int, workspace
    ) -> Predictor:
        ctx = ClientContext(self.cid, round_, workspace, self._n_classes)
        stream = derive_seed(seed, round_, self.cid, DEPLOY)
        with isolated_torch_rng(stream):
            return algorithm.deploy(ctx, state, message, self._data, torch.Generator().manual_seed(stream))

    def local_predictions(self, predictor: Predictor) -> np.ndarray:
        """``predictor``'s labels on this client's local test split, shape (n_local,)."""
        return predict(predictor, self._data.test.x).numpy()

    @property
    def local_test(self):
        """This client's local test split."""
        return self._data.test

    @property
    def pool(self):
        """This client's own held-out pool (:attr:`fedlib.federation.ClientData.pool`), or
        ``None`` when its pool is the global test set."""
        return self._data.pool

    def abilities(
        self, local_pred: np.ndarray, global_test, global_pred: np.ndarray, *, rare_ratio: float, f1_class: int | None,
        pool_pred: np.ndarray | None = None,
    ) -> dict[str, float]:
        """The protocol's abilities from the predictions on this client's local test split
        (``local_pred``, shape (n_local,)), on the global test set (``global_pred``, shape
        (n_global,)) and, when the client has a pool of its own (:attr:`pool`), on it
        (``pool_pred``, shape (n_pool,)); without one, ``pooled`` is scored on the global test
        predictions."""
        data = self._data
        if (data.pool is None) != (pool_pred is None):
            raise ValueError(f"client {self.cid} {'has' if data.pool is not None else 'has no'} pool of its own, "
                             f"but pool_pred is {'None' if pool_pred is None else 'given'}; valid: predictions on "
                             "its pool exactly when it has one")
        pool = {} if pool_pred is None else {"pool_true": data.pool.labels_np, "pool_pred": pool_pred}
        return client_predictions_abilities(
            data.test.labels_np, local_pred, global_test.labels_np, global_pred,
            data.train_counts(self._n_classes), rare_ratio=rare_ratio, f1_class=f1_class, **pool,
        )


def weights_key(predictor: Predictor) -> str | None:
    """A digest of what a module predictor computes with: its modules' types, their scalar
    attributes (e.g. a temperature) and its ``state_dict`` (parameters and buffers). ``None``
    for other callables, which are never shared."""
    if not isinstance(predictor, torch.nn.Module):
        return None
    h = hashlib.sha1()
    for module in predictor.modules():
        h.update(type(module).__qualname__.encode())
        scalars = {k: v for k, v in vars(module).items() if not k.startswith("_") and isinstance(v, (bool, int, float, str))}
        h.update(repr(sorted(scalars.items())).encode())
    for name, t in predictor.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class InProcessTransport(Transport):
    """The clients of ``federation`` in this process, sharing one model workspace (built by
    ``model_fn`` under the run's ``INIT`` stream, so its initial weights are the run's), or, when
    ``model_fn`` is a :class:`~fedlib.models.ClientArchitectures`, one per architecture.

    Evaluation: clients whose deployed modules hold identical weights (all of FedAvg's do) share
    one pass over the global test set: identical weights give identical predictions, so this
    changes no number, only the time. A client with a pool of its own
    (:attr:`fedlib.federation.ClientData.pool`, e.g. the rotated global test set of its rotation
    group) is also predicted on it, once per pool and weights (the clients of a rotation group
    share their pool object; a pool that is the global test set or the local test split itself
    reuses their predictions);
    without one, its ``pooled`` score reuses the global test predictions (no extra inference).
    """

    name = "in-process"

    def __init__(self, federation: Federation, model_fn: Callable[[], torch.nn.Module], seed: int) -> None:
        with isolated_torch_rng(derive_seed(seed, INIT)):
            self.initial_model = model_fn()
        self._workspace = copy.deepcopy(self.initial_model)  # clients train here; initial_model stays as drawn
        self._archs = model_fn if isinstance(model_fn, ClientArchitectures) else None
        self._workspaces: dict[str, torch.nn.Module] = {}
        if self._archs is not None:
            if len(self._archs.assignment) != federation.n_clients:
                raise ValueError(f"ClientArchitectures assigns {len(self._archs.assignment)} clients, but the federation "
                                 f"has {federation.n_clients}: give one architecture per client")
            self.heterogeneous = self._archs.heterogeneous
            counts = {a: self._archs.assignment.count(a) for a in self._archs.specs}
            self.architectures = ", ".join(f"{a} x{c}" for a, c in counts.items() if c)
        self.seed = seed
        self.n_clients = federation.n_clients
        self.description = federation.description
        self._clients = [Client(k, data, federation.n_classes) for k, data in enumerate(federation.clients)]
        self._global_test = federation.global_test
        self._seed = seed
        self._federation = federation
        self._data_digest: str | None = None

    def fingerprint(self) -> dict:
        """The digest of the federation's data and partition (:meth:`fedlib.federation.Federation.digest`,
        computed once): a checkpoint resumes only on the data it was started on."""
        if self._data_digest is None:
            self._data_digest = self._federation.digest()
        return {"data": self._data_digest}

    def workspace(self, client: int) -> torch.nn.Module:
        """The model workspace client ``client`` trains and deploys in: the run's architecture, or
        with :class:`~fedlib.models.ClientArchitectures` one per architecture (built under the
        run's ``INIT`` stream; its weights are scratch, a hook loads what it needs)."""
        if self._archs is None:
            return self._workspace
        name = self._archs.key(client)
        if name not in self._workspaces:
            with isolated_torch_rng(derive_seed(self._seed, INIT)):
                self._workspaces[name] = self._archs.build(name)
        return self._workspaces[name]

    def local_updates(self, algorithm, round_, messages, states) -> Iterator[tuple[int, State, Message]]:
        for k, down in messages.items():
            try:
                state, up = self._clients[k].update(algorithm, states[k], down, round_, self._seed, self.workspace(k))
            except Exception as err:
                err.add_note(f"(raised by client {k}'s local_update in round {round_})")
                yield k, None, ClientFailure(k, f"local_update raised {type(err).__name__}: {err}", err)
                continue
            yield k, state, up

    def evaluate(self, algorithm, round_, messages, states, *, rare_ratio, f1_class,
                 predictions=None) -> Iterator[tuple[int, dict[str, float]]]:
        global_cache: dict[str, np.ndarray] = {}
        pool_cache: dict[tuple[str, int], np.ndarray] = {}  # (weights, id of the pool object) -> predictions
        for k, down in messages.items():
            try:
                predictor = self._clients[k].deploy(algorithm, states[k], down, round_, self._seed, self.workspace(k))
            except Exception as err:
                err.add_note(f"(raised by client {k}'s deploy in round {round_})")
                yield k, ClientFailure(k, f"deploy raised {type(err).__name__}: {err}", err)
                continue
            key = weights_key(predictor)
            if key is None or key not in global_cache:
                pred = predict(predictor, self._global_test.x).numpy()
                if key is not None:
                    global_cache[key] = pred
            else:
                pred = global_cache[key]
            local = self._clients[k].local_predictions(predictor)
            pool, pool_pred = self._clients[k].pool, None
            if pool is self._global_test:  # e.g. rotation group 0: the global test set itself
                pool_pred = pred
            elif pool is not None and pool is self._clients[k].local_test:  # one_client_per_domain: the local test
                pool_pred = local
            elif pool is not None:
                if key is None or (key, id(pool)) not in pool_cache:
                    pool_pred = predict(predictor, pool.x).numpy()
                    if key is not None:
                        pool_cache[key, id(pool)] = pool_pred
                else:
                    pool_pred = pool_cache[key, id(pool)]
            if predictions is not None:  # a client with a pool of its own keeps its predictions on it too
                predictions[k] = (local, pred) if pool is None else (local, pred, pool_pred)
            yield k, self._clients[k].abilities(local, self._global_test, pred, rare_ratio=rare_ratio, f1_class=f1_class,
                                                pool_pred=pool_pred)


__all__ = ["Client", "InProcessTransport", "weights_key"]
