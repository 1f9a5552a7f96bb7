"""One run per fabric at a time: an flock that the kernel releases when its holder dies.

The lock file keeps the holder's pid and start time for the error message; a file whose lock is
free is stale (its holder crashed) and is taken over, and the takeover is reported.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fabtune.errors import ExitStatus, FabtuneError
from fabtune.paths import check_name, private_dir, under_home


class LockedError(FabtuneError):
    """Another run holds the fabric's lock."""

    code = ExitStatus.LOCKED


@contextmanager
def fabric_lock(fabric: str, purpose: str, directory: Path | None = None) -> Iterator[str | None]:
    """Hold the lock of ``fabric``; yields a note when a stale lock was taken over, else None.

    Raises:
        ConfigError: when ``fabric`` is not a valid name (it names the lock file).
        LockedError: naming the holder when a live process holds it.
    """
    file_name = f"{check_name('fabric name', fabric)}.lock"
    folder = private_dir(directory or under_home("locks"))
    path = folder / file_name
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(
                f"fabric {fabric!r} is locked by {_holder(path)}; wait for it or stop it"
            ) from None
        previous = _holder(path)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "purpose": purpose, "since": time.time()}).encode())
        try:
            yield f"took over a stale lock ({previous})" if previous != "nobody" else None
        finally:
            os.ftruncate(fd, 0)  # a clean release leaves an empty file: nothing stale
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "nobody"
    if not data:
        return "nobody"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.get("since", 0)))
    return f"pid {data.get('pid')} ({data.get('purpose')}, since {since})"
