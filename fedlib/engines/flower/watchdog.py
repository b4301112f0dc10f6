"""A local deployment's watchdog: stops its processes when the command that started them dies.

:class:`~fedlib.engines.flower.deployment.LocalDeployment` starts this file as a process of its
own session (``python watchdog.py MARKER [HOME]``, by path, so that it imports nothing but the
standard library) before any SuperLink or SuperNode, with its standard input a pipe whose only
writer is the deployment's process. However that process ends (its own exit, an error, TERM,
HUP, or a KILL that no handler sees: a closed terminal, a dropped ssh session), the kernel closes
the pipe; the watchdog then stops every process whose environment carries the deployment's
marker (the SuperLink, the SuperNodes, their SuperExecs and apps, ``flwr run``): TERM, then KILL
after 5 s, and removes the temporary Flower home ``HOME`` when it was given one. It ignores HUP
and INT, which a closing terminal sends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

MARKER_VARIABLE = "FEDLIB_FLOWER_DEPLOYMENT"
"""The environment variable that marks a deployment's processes (its value: the deployment's marker)."""


def marked_pids(marker: str) -> list[int]:
    """Every live process (not a zombie) whose environment holds ``MARKER_VARIABLE=marker``
    (children keep their parent's environment, detached ones too)."""
    needle = f"{MARKER_VARIABLE}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                found.append(int(entry.name))
    return sorted(found)


def stop_marked(marker: str, grace: float = 5.0) -> None:
    """TERM every process of :func:`marked_pids`, then KILL those left after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        pids = marked_pids(marker)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        t0 = time.monotonic()
        while time.monotonic() - t0 < wait and marked_pids(marker):
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    """Wait until standard input closes, then stop the marked processes and remove the home."""
    if len(argv) not in (2, 3):
        print("usage: watchdog.py MARKER [HOME]", file=sys.stderr)
        return 2
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    while sys.stdin.buffer.read(65536):  # nothing is written: this returns b"" once the writer is gone
        pass
    stop_marked(argv[1])
    if len(argv) == 3 and argv[2]:
        shutil.rmtree(argv[2], ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
