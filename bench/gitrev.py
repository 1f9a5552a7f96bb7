"""An earlier revision's files, taken from this repository's git history, for the bench scripts that
run an earlier fabtune beside today's (startup, tune_walltime, apply_cost). Imported by its plain
name: a script run as ``python bench/NAME.py`` has bench/ first on its path."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def extract(rev: str, path: str, where: Path, timeout_s: float = 120) -> Path:
    """``path`` (a file or folder of the repository) as it was at git revision ``rev``, written under
    ``where`` (made if missing) at the same relative path; returns ``where``.

    ``git archive`` makes the tar stream and GNU tar unpacks it, which keeps every member inside
    ``where`` (no absolute names, no ".."), on any Python: tarfile's "data" filter is 3.11.4 on, and
    Debian 12's Python is 3.11.2.
    """
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, path], check=True,
                          capture_output=True, timeout=timeout_s).stdout
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=data, check=True, capture_output=True,
                   timeout=timeout_s)
    return where
