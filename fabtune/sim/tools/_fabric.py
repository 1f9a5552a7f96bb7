"""The shared fabric directory as the emulated benchmarks use it: flows, run counter, jobs.

``/var/lib/fabtune-fabric`` is one directory per testbed, bound into every host:

* ``flows/<host>-<pid>-<port>.json``: one file per running ``ib_write_bw`` client (atomic write),
  with its start time and ``until`` (when its traffic stops), both ends' host and NIC state, QPs,
  size, ToS/traffic class, GID index and rdma_cm. A finished flow's file stays ``STALE_S`` past its
  ``until`` (a later flow whose sampled window it overlapped reads it), then the next reader prunes
  it.
* ``run-counter``: the run index for the model's noise, incremented under ``flock``.
* ``jobs/<jobid>/``: one directory per ``mpirun`` job of the nccl-tests tools.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fabtune.sim.node import FABRIC_DIR, atomic_write

STALE_S = 30.0
"""A flow file older than its ``until`` by this much is removed by the next reader."""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def next_run_index(fabric_dir: Path = FABRIC_DIR) -> int:
    """Draw the next run index from the fabric's counter (atomic across hosts)."""
    counter = fabric_dir / "run-counter"
    with locked(fabric_dir / ".run-counter.lock"):
        if not counter.exists():
            atomic_write(counter, "0\n")
        # in place (the lock serializes writers): any user may draw, whoever created the file
        with counter.open("r+") as handle:
            current = int(handle.read().strip() or 0)
            handle.seek(0)
            handle.write(f"{current + 1}\n")
            handle.truncate()
    return current


def register_flow(record: dict[str, Any], key: str, fabric_dir: Path = FABRIC_DIR) -> Path:
    """Publish a flow record as ``flows/<key>.json`` (atomic) and return its path."""
    path = fabric_dir / "flows" / f"{key}.json"
    atomic_write(path, json.dumps(record, sort_keys=True) + "\n")
    return path


def flows_during(begin: float, end: float, fabric_dir: Path = FABRIC_DIR) -> list[dict[str, Any]]:
    """Every flow that runs at some time between ``begin`` and ``end`` (it starts before ``end``
    and lasts past ``begin``), oldest first; prunes stale ones."""
    moment = time.time()
    out: list[dict[str, Any]] = []
    for path in sorted((fabric_dir / "flows").glob("*.json")):
        try:
            record: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if float(record.get("until", 0)) + STALE_S < moment:
            with contextlib.suppress(OSError):  # another user's stale flow (sticky directory)
                path.unlink()
            continue
        if float(record["start"]) <= end and float(record["until"]) >= begin:
            out.append(record)
    return sorted(out, key=lambda r: (float(r["start"]), str(r["key"])))


def job_dir(job: str, fabric_dir: Path = FABRIC_DIR) -> Path:
    """The directory of one nccl-tests job (created)."""
    path = fabric_dir / "jobs" / job
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write a JSON document atomically."""
    atomic_write(path, json.dumps(data, sort_keys=True) + "\n")


def wait_json(path: Path, timeout_s: float, poll_s: float = 0.05) -> dict[str, Any] | None:
    """Wait for a JSON file to appear and return it (None on timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if path.is_file():
            with contextlib.suppress(ValueError, OSError):
                data: dict[str, Any] = json.loads(path.read_text())
                return data
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
