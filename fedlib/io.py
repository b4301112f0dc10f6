"""Files: atomic writes (a file is either the old version or the complete new one, never half
written) and a state format that is safe to open (tensors plus JSON metadata, read with
``torch.load(weights_only=True)``)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import pickle
import re
import secrets
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks (FolderLock then only records its owner)
    fcntl = None


def current_umask() -> int:
    """The process's file-mode creation mask (read from ``/proc/self/status`` where Linux has it,
    so that no other thread sees a changed umask; else set and restored at once)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_mode(*, directory: bool = False) -> int:
    """The mode ``open`` (``0o666``) or ``mkdir`` (``0o777``) would give a new file or folder
    under the process's umask.

    >>> old = os.umask(0o002)
    >>> oct(umask_mode()), oct(umask_mode(directory=True))
    ('0o664', '0o775')
    >>> _ = os.umask(old)
    """
    return (0o777 if directory else 0o666) & ~current_umask()


def apply_umask(path: str | os.PathLike) -> Path:
    """Give ``path`` the permissions a plain ``open`` (a file) or ``mkdir`` (a folder) would have
    given it under the process's umask, and return it: a temporary file made by
    ``tempfile.mkstemp`` is private (``0600``), which would leave a group-shared results folder
    unreadable to the group.

    >>> import tempfile
    >>> old = os.umask(0o002)
    >>> fd, name = tempfile.mkstemp(); os.close(fd)
    >>> oct(apply_umask(name).stat().st_mode & 0o777)
    '0o664'
    >>> _ = os.umask(old); os.unlink(name)
    """
    path = Path(path)
    path.chmod(umask_mode(directory=path.is_dir()))
    return path


_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]+)\.[A-Za-z0-9_]+(?P<suffix>\.[A-Za-z0-9]+)$")
STALE_FOREIGN_SECONDS = 24 * 3600.0  # a temporary file of another machine is left alone for a day


def temporary_sibling(path: str | os.PathLike, suffix: str = ".tmp") -> tuple[int, Path]:
    """A new temporary file beside ``path`` (``(fd, its path)``, made by ``tempfile.mkstemp``
    with the umask's mode, see :func:`apply_umask`), named ``.<name>.<host>-<pid>.<random><suffix>``
    so that :func:`remove_stale_temporaries` can tell one left by a dead writer."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_HOST}-{os.getpid()}.", suffix=suffix)
    try:
        os.fchmod(fd, umask_mode())
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return fd, Path(tmp)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """The temporary files and folders an interrupted write (:func:`temporary_sibling`, a
    results folder's save) left in ``folder``: those of this machine whose writing process is
    gone, and those of another machine (a shared folder) older than a day. Entries of any other
    name, and those of a live writer, are not listed."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return found
    now = time.time()
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match is None or entry.is_symlink():
            continue
        pid = int(match["pid"])
        if match["host"] == _HOST:
            if pid == os.getpid() or _alive(pid):
                continue
        else:
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime < STALE_FOREIGN_SECONDS:
                    continue
        found.append(Path(entry.path))
    return sorted(found)


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove what :func:`stale_temporaries` lists in ``folder`` (files, and folders with their
    content); returns what was removed.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> (folder / f".x.csv.{_HOST}-999999999.abc123.tmp").write_text("half")
    4
    >>> mine = temporary_sibling(folder / "y.csv")
    >>> [p.name for p in remove_stale_temporaries(folder)] == [f".x.csv.{_HOST}-999999999.abc123.tmp"]
    True
    >>> os.close(mine[0]); mine[1].exists()
    True
    """
    removed = []
    for path in stale_temporaries(folder):
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


def temporary_name(name: str, suffix: str = ".tmp") -> str:
    """A fresh name ``.<name>.<host>-<pid>.<random><suffix>`` for a temporary file or folder of
    this process, which :func:`stale_temporaries` lists once the process is gone."""
    return f".{name}.{_HOST}-{os.getpid()}.{secrets.token_hex(4)}{suffix}"


def fsync_folder(folder: str | os.PathLike) -> None:
    """Flush a folder's entries (renames, new files) to disk, where the file system allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_error(err: OSError, path: str | os.PathLike, kept: str) -> OSError:
    """``err`` (an ``OSError`` of a write) again, of the same errno and class, with a message that
    names the file and says what is kept (``kept``), e.g. "No space left on device writing
    results/state.pt; the previous results in results/ are unchanged".

    >>> import errno
    >>> e = write_error(OSError(errno.ENOSPC, "No space left on device"), "r/state.pt", "r/state.pt is unchanged")
    >>> type(e).__name__, e.errno, str(e)
    ('OSError', 28, '[Errno 28] No space left on device writing r/state.pt; r/state.pt is unchanged')
    """
    reason = err.strerror or str(err)
    new = OSError(err.errno, f"{reason} writing {path}; {kept}") if err.errno is not None else OSError(f"{reason} writing {path}; {kept}")
    return new


_SWEPT: set[str] = set()  # the folders this process has cleared of stale temporary files


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    The file gets the umask's mode (:func:`apply_umask`), as ``open`` would give it. Temporary files
    that an interrupted earlier write left in the folder are removed at the process's first write
    into it (:func:`remove_stale_temporaries`). A failed write (a full disk, a read-only folder) leaves
    ``path`` as it was and raises an ``OSError`` of the same errno that names ``path`` and says so.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.path.abspath(path.parent)
        if folder not in _SWEPT:  # once per folder and process: a store of thousands of files is not scanned per write
            remove_stale_temporaries(folder)
            _SWEPT.add(folder)
        fd, tmp = temporary_sibling(path)
    except OSError as err:
        raise write_error(err, path, f"nothing was written in {path.parent}") from err
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            kept = f"the previous {path} is unchanged" if path.exists() else f"{path} was not written"
            raise write_error(err, path, kept) from err
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _digest(tensors: Mapping[str, torch.Tensor], text: str) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes (in name order) and the JSON text."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    h.update(text.encode())
    return h.hexdigest()


def save_tensors_json(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], meta: Any) -> Path:
    """Write :func:`tensors_json_bytes` of ``tensors`` and ``meta`` to ``path``, atomically
    (:func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, tensors_json_bytes(tensors, meta))


def tensors_json_bytes(tensors: Mapping[str, torch.Tensor], meta: Any) -> bytes:
    """Named tensors plus JSON metadata as the bytes of one file (:func:`save_tensors_json`), in a format that
    :func:`load_tensors_json` reads with ``torch.load(weights_only=True)``: a dict of tensors,
    one JSON string (numbers, strings, lists, dicts; NaN and infinities allowed) and a SHA-256
    checksum of both, which the reader verifies (a bit flipped inside a saved tensor is refused).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.pt"
    >>> _ = save_tensors_json(path, {"w": torch.ones(2)}, {"round": 3})
    >>> tensors, meta = load_tensors_json(path)
    >>> tensors["w"].tolist(), meta
    ([1.0, 1.0], {'round': 3})
    """
    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"save_tensors_json stores tensors only; not tensors: {bad}")
    text = json.dumps(meta, sort_keys=True, default=json_default)
    cpu = {k: v.detach().cpu() for k, v in tensors.items()}
    buffer = io.BytesIO()
    torch.save({"format": _FORMAT, "tensors": cpu, "json": text, "sha256": _digest(cpu, text)}, buffer)
    return buffer.getvalue()


def load_tensors_json(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], Any]:
    """Read what :func:`save_tensors_json` wrote. The file is opened with
    ``torch.load(weights_only=True)``, which unpickles tensors, numbers, strings and containers
    only: a file that holds anything else (a crafted pickle that would run code, an object of
    another program) is refused with a ``ValueError`` and nothing in it is executed; so is a file
    whose checksum does not match its content (corrupted or changed after it was written: the
    checksum has no key, so it finds accidents and careless edits, not a forger who rewrites it)."""
    path = Path(path)
    return load_tensors_json_bytes(path.read_bytes(), path)


def load_tensors_json_bytes(data: bytes, path: str | os.PathLike = "<bytes>") -> tuple[dict[str, torch.Tensor], Any]:
    """:func:`load_tensors_json` of a file's bytes already read (``path`` names it in errors): a
    caller that checked the bytes' digest parses the very bytes it checked."""
    path = Path(path)
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise ValueError(f"{path} is not a readable fedlib state file (truncated or corrupt?): {str(err).splitlines()[0]}") from None
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"refusing to load {path}: it holds objects other than tensors, numbers and strings "
            f"(fedlib's state files hold nothing else; a file that needs more may run code when opened). "
            f"Detail: {str(err).splitlines()[0]}"
        ) from None
    if not (isinstance(obj, dict) and obj.get("format") == _FORMAT and isinstance(obj.get("tensors"), dict)
            and isinstance(obj.get("json"), str) and isinstance(obj.get("sha256"), str)):
        raise ValueError(f"{path} is not a fedlib state file (format {_FORMAT!r}); was it written by an older fedlib?")
    bad = [k for k, v in obj["tensors"].items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f"{path} is not a fedlib state file: entries {bad} are not tensors")
    if _digest(obj["tensors"], obj["json"]) != obj["sha256"]:
        raise ValueError(f"{path} fails its checksum (SHA-256 of its tensors and metadata): the file was changed or "
                         "corrupted after it was written; refusing to load it")
    return obj["tensors"], json.loads(obj["json"])


_FORMAT = "fedlib-state-2"  # 2: with a SHA-256 checksum of the tensors and the metadata


def json_default(v: Any) -> Any:
    """``json.dumps(..., default=json_default)``: numpy scalars as Python numbers; anything else
    that JSON cannot hold is a ``TypeError`` naming it."""
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"cannot store {v!r} ({type(v).__name__}) as JSON metadata; use numbers, strings, lists or dicts")


class FolderInUse(RuntimeError):
    """A folder (a results folder, a disk state store) is held by another process's
    :class:`FolderLock`, or by another user in this process; the message names that process and
    what holds the folder (its role: a state store, a results save)."""


class FolderLockWarning(UserWarning):
    """A :class:`FolderLock` on a file system without locks (some network mounts): the folder is
    guarded by its owner record only, which cannot stop two processes that take it at the same
    moment, nor tell whether a process of another machine is still alive."""


class FolderLock:
    """An advisory, exclusive lock on a folder in use (``fcntl.flock`` on ``<folder>/.lock``),
    holding a record of its owner (process id, host, command, since when, and ``role``: what holds
    it, such as ``"state store"`` or ``"results save"``) that the refusal of a second user names.
    The lock goes with the process: a process that dies, however it dies, holds nothing (no stale
    lock to delete by hand). A second lock of the same folder is refused in the same process too,
    at once (it would wait for itself), naming the role of the lock this process holds
    (:meth:`FolderLock.held_here` finds it). ``wait`` seconds: how long :meth:`FolderLock.acquire`
    waits for another process before it refuses.

    On a file system without ``flock`` (some network mounts: ``ENOLCK``, ``EOPNOTSUPP``) the owner
    record is all there is: a record of a live process of this machine is refused, a record of
    another machine's process is taken over with a :class:`FolderLockWarning` (whether it is alive
    cannot be known from here), and two processes that take the folder at the same moment are not
    kept apart; a :class:`FolderLockWarning` says so.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with FolderLock(folder, "results folder", role="results save"):
    ...     try:
    ...         FolderLock(folder, "results folder").acquire()
    ...     except FolderInUse as err:
    ...         print(f"is in use by process {os.getpid()}" in str(err), "(this process) for its results save" in str(err))
    True True
    """

    NAME = ".lock"

    def __init__(self, folder: str | os.PathLike, what: str = "folder", *, role: str | None = None,
                 wait: float = 0.0) -> None:
        self.folder, self.what, self.wait = Path(folder), what, float(wait)
        self.role = what if role is None else role
        self._fd: int | None = None
        self._pid = os.getpid()
        self._key: str | None = None
        self._since = "?"

    @property
    def held(self) -> bool:
        """Whether this lock is held (acquired and not released)."""
        return self._fd is not None

    @classmethod
    def held_here(cls, folder: str | os.PathLike) -> "FolderLock | None":
        """The lock this process holds on ``folder`` (its ``role`` says what for), or ``None``."""
        lock = _HELD.get(os.path.realpath(folder))
        return lock if lock is not None and lock.held and lock._pid == os.getpid() else None

    def acquire(self) -> "FolderLock":
        """Take the lock (creating the folder if need be), or raise :class:`FolderInUse` naming
        the process that holds it and its role (at once when that process is this one)."""
        if self._fd is not None:
            return self
        mine = FolderLock.held_here(self.folder)
        if mine is not None:  # flock would make this process wait for itself
            raise FolderInUse(self._message(os.getpid(), socket.gethostname(), _command(), mine._since, mine.role))
        while True:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / self.NAME
            fd = os.open(path, os.O_RDWR | os.O_CREAT, umask_mode())
            try:
                locked = self._lock(fd)
                try:  # the file locked must still be the folder's lock file: a holder may delete it (DiskStates.remove)
                    same = os.path.samestat(os.fstat(fd), os.stat(path))
                except FileNotFoundError:
                    same = False
                if not same:
                    os.close(fd)
                    continue
                if not locked:
                    self._check_record(fd)
                self._since = time.strftime("%Y-%m-%d %H:%M:%S %Z")
                record = {"pid": os.getpid(), "host": socket.gethostname(), "command": _command(),
                          "since": self._since, "role": self.role}
                data = (json.dumps(record) + "\n").encode()
                os.pwrite(fd, data, 0)  # the record first, then cut to its length: never an empty record to read
                os.ftruncate(fd, len(data))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise
            break
        self._fd, self._pid = fd, os.getpid()
        self._key = os.path.realpath(self.folder)
        _HELD[self._key] = self
        return self

    def _lock(self, fd: int) -> bool:
        """``flock`` the file (waiting up to ``wait``): ``True``, or ``False`` on a file
        system without locks (with a :class:`FolderLockWarning`)."""
        if fcntl is None:
            why = "this system has no fcntl.flock"
        else:
            deadline = time.monotonic() + self.wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise FolderInUse(self._refusal(fd)) from None
                    time.sleep(0.05)
                except OSError as err:  # a file system without locks (some network mounts): the record only
                    if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                        raise
                    why = f"its file system has no locks ({os.strerror(err.errno)})"
                    break
        warnings.warn(f"{self.folder}: {why}; the {self.what} is guarded by its owner record only, which cannot keep "
                      "apart two processes that take it at the same moment", FolderLockWarning, stacklevel=3)
        return False

    def _check_record(self, fd: int) -> None:
        """Without ``flock``: refuse a record of a live process of this machine (or of this process)."""
        owner = _read_record(fd)
        pid, host = owner.get("pid"), owner.get("host")
        if not isinstance(pid, int) or not host:
            return
        if host != socket.gethostname():
            warnings.warn(f"{self.folder}: the {self.what} is recorded as held by process {pid} on {host}, which cannot "
                          "be checked from this machine (no file locks); taking it over", FolderLockWarning, stacklevel=3)
            return
        if pid == os.getpid() or _alive(pid):
            raise FolderInUse(self._refusal(fd))

    def _message(self, pid: Any, host: Any, command: Any, since: Any, role: Any) -> str:
        who = f"process {pid} on {host}"
        if pid == os.getpid() and host == socket.gethostname():
            who += " (this process)"
        if role:
            who += f" for its {role}"
        return (f"the {self.what} {self.folder} is in use by {who} (command: {command}; since {since}): two users of "
                f"one {self.what} at once would mix their files; wait for it to finish, or give another folder")

    def _refusal(self, fd: int) -> str:
        owner = _read_record(fd)
        return self._message(owner.get("pid", "?"), owner.get("host", "?"), owner.get("command", "?"),
                             owner.get("since", "?"), owner.get("role"))

    def release(self) -> None:
        """Let the lock go (nothing when it is not held)."""
        fd, self._fd = self._fd, None
        if self._key is not None and _HELD.get(self._key) is self:
            del _HELD[self._key]
        self._key = None
        if fd is not None:
            if self._pid == os.getpid():  # not a forked child's copy: the parent may still hold the lock
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor of the file releases the flock

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fd": None, "_key": None}  # a copy (pickled, deep-copied) does not hold the lock

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


STORE_ROLE = "state store"
"""The ``role`` of a disk state store's lock (:class:`fedlib.store.DiskStates`): a results
save into that folder in the same process goes on under it (:meth:`fedlib.results.RunResult.save`)."""

_HELD: dict[str, FolderLock] = {}  # the folders this process holds a FolderLock on (real path -> lock)


def _read_record(fd: int) -> dict:
    """A lock file's owner record (its first line), or ``{}``."""
    try:
        owner = json.loads(os.pread(fd, 65536, 0).decode().split("\n", 1)[0] or "{}")
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _command() -> str:
    import sys

    text = " ".join(sys.argv) or sys.executable
    return text if len(text) <= 200 else text[:197] + "..."
