"""Where fabtune keeps its files, and the one rule for every name that becomes a path.

A name from the user, an inventory or the journal (a testbed, a fabric, a run id) becomes a file
or directory name under ``$FABTUNE_HOME`` only through :func:`check_name`, and every such path is
built by :func:`under_home`, which refuses one that would leave the home (``..``, a symlink out).
Everything fabtune writes there is private to its owner (directories 0700, files 0600).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from fabtune.errors import ConfigError

DEFAULT_HOME = "/var/lib/fabtune"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
NAME_RULE = "1-63 letters, digits, '_', '.' or '-', starting with a letter or digit"
PRIVATE_UMASK = 0o077


def fabtune_home() -> Path:
    """Where fabtune keeps testbeds, runs and locks (``$FABTUNE_HOME``, default /var/lib/fabtune)."""
    return Path(os.environ.get("FABTUNE_HOME") or DEFAULT_HOME).absolute()


def check_name(field: str, value: str) -> str:
    """Return ``value`` when it is safe as one file name, else refuse it naming ``field``.

    Raises:
        ConfigError: naming the field and the value.
    """
    if not isinstance(value, str) or NAME_RE.fullmatch(value) is None or value in (".", ".."):
        raise ConfigError(field, [f"{field}: {value!r} is not a valid name ({NAME_RULE})"])
    return value


def under_home(*parts: str) -> Path:
    """``$FABTUNE_HOME/<parts...>``, refused when it resolves outside the home.

    Raises:
        ConfigError: naming the path when it escapes the home (``..``, a symlink elsewhere).
    """
    home = fabtune_home()
    path = home.joinpath(*parts)
    if not path.resolve().is_relative_to(home.resolve()):
        raise ConfigError("path", [f"{'/'.join(parts)!r}: leads outside {home} ({path.resolve()})"])
    return path


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) as 0700 directories; an existing one in the home that
    others can read (left by an older fabtune) is tightened to its owner.

    Returns:
        ``path``.
    """
    home = fabtune_home()
    for folder in reversed((path, *path.parents)):
        if not folder.exists():
            folder.mkdir(mode=0o700, exist_ok=True)
            folder.chmod(0o700)
        elif folder == home or home in folder.parents:
            _tighten(folder)
    return path


def _tighten(folder: Path) -> None:
    try:
        info = folder.stat()
        if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
            folder.chmod(stat.S_IMODE(info.st_mode) & 0o700)
    except OSError:
        return


def private_umask() -> int:
    """Make every file this process creates private to its owner; returns the previous umask."""
    return os.umask(PRIVATE_UMASK)


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, renamed), mode 0600."""
    tmp = path.with_name(f"{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
