"""Memory, measured in one place: the peak resident memory of this process, and the peak memory
of a command together with every process it starts.

Two measurements, for two kinds of workload:

* **One process.** :func:`peak_rss_mib` (the kernel's high-water mark of this process's resident
  set, ``ru_maxrss``) and :func:`rss_mib` (its resident set now). A workload that runs in a fresh
  process of its own reads them there: :func:`fedbook.benchmarks.round_cost` takes the resident
  memory before a round and the peak after it.
* **A tree of processes.** :func:`measure_command` runs a command and samples, every
  ``interval`` seconds, the summed PSS (proportional set size: a page shared by ``k`` processes
  counts ``1/k`` in each, so the sum is the memory they take together, without counting a shared
  library once per process) of the command's process, its descendants and every process whose
  environment holds a marker it sets (detached processes, e.g. a Flower deployment's, keep it).
  Peak RSS would count torch's shared pages once per process.
  :func:`fedlib.engines.flower.cli.engine_costs` measures Flower's engines this way.

Linux reads ``/proc``; elsewhere :func:`rss_mib` falls back to the peak and the PSS of a process
reads 0. Only the standard library: every layer may import it.

Examples
--------
>>> rss_mib() > 0 and peak_rss_mib() > 0
True
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def rss_mib() -> float:
    """This process's resident memory now, in MiB (``/proc`` on Linux; the peak so far elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return peak_rss_mib()
    return pages * resource.getpagesize() / 2**20


def pss_kib(pid: int) -> int:
    """The PSS of process ``pid`` in KiB (``/proc/<pid>/smaps_rollup``); 0 when it cannot be read
    (the process is gone, belongs to another user, or this is not Linux)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def process_tree(root: int, marker: str) -> set[int]:
    """``root``, its descendants, and every process whose environment holds ``marker`` (with
    their descendants), as process ids."""
    parents: dict[int, int] = {}
    found = {root}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text()
            parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
            if marker.encode() in (entry / "environ").read_bytes():
                found.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def measure_command(command: list[str], *, interval: float = 0.2, env: Mapping[str, str] | None = None) -> dict:
    """Run ``command`` as a process and measure it with everything it starts (descendants, and
    detached processes by a marker in their environment): wall seconds and the peak of their
    summed PSS, sampled every ``interval`` seconds (:func:`process_tree`, :func:`pss_kib`).

    Returns a dict: ``returncode``, ``seconds``, ``peak_pss_mib``, ``processes`` (the most
    processes seen at once) and ``output`` (stdout and stderr together, as text).

    Examples
    --------
    >>> m = measure_command([sys.executable, "-c", "print('hi')"])
    >>> m["returncode"], m["output"].strip()
    (0, 'hi')
    """
    marker = f"FEDLIB_MEASURE={uuid.uuid4().hex}"
    full_env = {**os.environ, **(env or {})}
    key, value = marker.split("=")
    full_env[key] = value
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak, processes = 0, 0
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True)
    reader.start()
    while proc.poll() is None:
        pids = process_tree(proc.pid, marker)
        peak = max(peak, sum(pss_kib(p) for p in pids))
        processes = max(processes, len(pids))
        time.sleep(interval)
    reader.join()
    return {"returncode": proc.returncode, "seconds": time.perf_counter() - t0, "peak_pss_mib": peak / 1024,
            "processes": processes, "output": b"".join(output).decode(errors="replace")}


__all__ = ["measure_command", "peak_rss_mib", "pss_kib", "process_tree", "rss_mib"]
