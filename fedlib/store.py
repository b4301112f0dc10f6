"""Where the clients' persistent states live between rounds: in memory, or on disk.

A stateful method (Ditto's personal models, FedRep's heads, MPT's per-client statistics) keeps
one :class:`~fedlib.messages.State` per client. With thousands of clients those states need not
all sit in memory: :class:`DiskStates` keeps each in a file of its own (atomic writes, read back
with ``torch.load(weights_only=True)``: :func:`fedlib.io.save_tensors_json`), behind the same
mapping ``client -> State`` the round loop uses, so the results are the same bit for bit.
:func:`make_states` chooses by name (``RunOptions(states="disk", states_dir=...)``).

An empty state (no arrays, no metadata: every stateless method's) is never written: a
federation of thousands of FedAvg clients costs no file and no memory per client.
"""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from .io import STORE_ROLE, FolderLock, load_tensors_json, remove_stale_temporaries, save_tensors_json
from .messages import State

STATE_STORES = ("memory", "disk")
"""The places a run's client states can live (:func:`make_states`)."""


def _empty(state: State) -> bool:
    return not state.arrays and not state.meta


class DiskStates(MutableMapping):
    """``client -> State`` kept in ``folder``, one file per client (``client-<k>.pt``).

    Reading a client loads its file (an empty state when it has none); writing replaces the
    file atomically, so a run stopped mid-write leaves every state whole. The store remembers
    which clients hold a file: a file that goes missing (the folder deleted during a run) is an
    error naming the client and the folder, never an empty state that would silently reset the
    client. Only the set of
    clients is held in memory between rounds; a checkpoint (``RunOptions(checkpoint=...)``) and
    :meth:`fedlib.results.RunResult.save` still read every state to write their one file. A folder
    that already holds state files is refused, unless ``overwrite`` (a resumed run, which refills
    the store from its checkpoint).

    The store locks its folder while it lives (:class:`fedlib.io.FolderLock`, until :meth:`DiskStates.close`,
    :meth:`DiskStates.remove` or the end of the process): a store of another process on the same folder is
    refused with :class:`fedlib.io.FolderInUse`, which names that process (two runs sharing one
    folder would read each other's states). A second store of the folder in the same process (a
    resumed run) takes it over, and the earlier store's writes are then refused.

    Examples
    --------
    >>> import tempfile, torch
    >>> folder = tempfile.TemporaryDirectory()
    >>> states = DiskStates(folder.name)
    >>> states[3] = State(arrays={"head/w": torch.ones(2)}, meta={"rounds": 1})
    >>> states[7] = State()                      # empty: no file
    >>> sorted(states), states[3].meta, len(list(states.folder.glob("*.pt")))
    ([3, 7], {'rounds': 1}, 1)
    >>> folder.cleanup()
    """

    def __init__(self, folder: str | Path, *, overwrite: bool = False) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.folder)
        earlier = _OPEN.get(key)
        earlier = earlier() if earlier is not None else None
        if earlier is not None and earlier._lock is not None:
            lock, earlier._lock = earlier._lock, None  # the same process opens the folder again: the newer store owns it
            earlier._superseded = True
        elif (orphan := FolderLock.held_here(self.folder)) is not None and orphan.role == STORE_ROLE:
            lock = orphan  # a store of this process that is gone (collected) left its lock: the newer store owns it
        else:
            lock = FolderLock(self.folder, "state folder", role=STORE_ROLE).acquire()  # another process's store: FolderInUse, naming it
        try:
            stale = sorted(self.folder.glob("client-*.pt"))
            if stale and not overwrite:
                raise ValueError(f"{self.folder} already holds {len(stale)} client state file(s) "
                                 f"(e.g. {stale[0].name}); give an empty folder, or delete them")
            for path in stale:  # a resumed run refills the store from its checkpoint
                path.unlink()
        except BaseException:
            if earlier is not None and earlier._superseded and earlier._lock is None:
                earlier._lock, earlier._superseded = lock, False  # refused: the earlier store keeps the folder
            else:
                lock.release()
            raise
        remove_stale_temporaries(self.folder)
        self._lock: FolderLock | None = lock
        self._superseded = False
        _OPEN[key] = weakref.ref(self)
        self._clients: set[int] = set()
        self._with_file: set[int] = set()

    def _check_owner(self) -> None:
        """Refuse to write unless this store holds the folder's lock (checked on every write)."""
        if self._lock is None or not self._lock.held:
            why = ("a newer store of the same folder in this process took it over (a resumed run?)" if self._superseded
                   else "the store was closed")
            raise RuntimeError(f"this state store no longer owns {self.folder}: {why}; refusing to write a client state "
                               "into a folder another run may be using")

    def close(self) -> None:
        """Let the folder go (its lock): the state files stay; this store writes nothing more."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _path(self, client: int) -> Path:
        return self.folder / f"client-{int(client)}.pt"

    def __getitem__(self, client: int) -> State:
        if client not in self._clients:
            raise KeyError(client)
        path = self._path(client)
        if int(client) not in self._with_file:
            return State()
        if not path.exists():
            raise FileNotFoundError(
                f"client {int(client)}'s state file {path.name} is missing from {self.folder} (it was written and "
                "then deleted or moved during the run): its state is lost; refusing to hand the client an empty one"
            )
        tensors, meta = load_tensors_json(path)
        return State(arrays={name: tensors[name] for name in meta["arrays"]}, meta=dict(meta["meta"]))

    def __setitem__(self, client: int, state: State) -> None:
        if not isinstance(state, State):
            raise TypeError(f"a client state must be a State, got {type(state).__name__}")
        self._check_owner()
        path = self._path(client)
        if _empty(state):
            path.unlink(missing_ok=True)
            self._with_file.discard(int(client))
        else:
            save_tensors_json(path, dict(state.arrays), {"arrays": list(state.arrays), "meta": state.meta})
            self._with_file.add(int(client))
        self._clients.add(int(client))

    def __delitem__(self, client: int) -> None:
        if client not in self._clients:
            raise KeyError(client)
        self._check_owner()
        self._path(client).unlink(missing_ok=True)
        self._clients.discard(int(client))
        self._with_file.discard(int(client))

    def __contains__(self, client: object) -> bool:
        return client in self._clients  # without reading the file

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._clients))

    def __len__(self) -> int:
        return len(self._clients)

    def files(self) -> int:
        """How many clients have a state file (a non-empty state)."""
        return sum(1 for _ in self.folder.glob("client-*.pt"))

    def remove(self) -> None:
        """Delete the folder's state files (and the folder if nothing else is in it)."""
        self._check_owner()
        for path in self.folder.glob("client-*.pt"):
            path.unlink()
        self._clients.clear()
        self._with_file.clear()
        if self.folder.exists() and [p.name for p in self.folder.iterdir()] == [FolderLock.NAME]:
            # deleted while still held, on purpose: released first, another process could take the lock between the
            # release and the deletion and lose its lock file. A process that opened the file before the deletion
            # and locks it after finds it is no longer the folder's lock file and starts again (FolderLock.acquire)
            (self.folder / FolderLock.NAME).unlink()
            shutil.rmtree(self.folder)
        self.close()


_OPEN: dict[str, weakref.ref] = {}  # this process's stores by folder (a second store of a folder takes it over)


def make_states(kind: str = "memory", folder: str | Path | None = None, *, overwrite: bool = False) -> MutableMapping:
    """An empty ``client -> State`` store: ``"memory"`` (a dict) or ``"disk"`` (:class:`DiskStates`
    in ``folder``, which must be given; ``overwrite`` as there)."""
    if kind not in STATE_STORES:
        raise ValueError(f"unknown state store {kind!r}; valid: {', '.join(STATE_STORES)}")
    if kind == "memory":
        return {}
    if folder is None:
        raise ValueError("the 'disk' state store needs a folder (RunOptions(states_dir=...))")
    return DiskStates(folder, overwrite=overwrite)


__all__ = ["STATE_STORES", "DiskStates", "make_states"]
