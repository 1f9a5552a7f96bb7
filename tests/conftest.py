"""Shared test helpers: where ../shared is, and whether this machine can build a testbed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"


def fixture_text(name: str) -> str:
    """A sample from ../shared/fixtures without its ``# source:`` line (skips when absent)."""
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"../shared/fixtures/{name} not present beside the checkout")
    lines = path.read_text().splitlines(keepends=True)
    return "".join(lines[1:]) if lines and lines[0].startswith("# source:") else "".join(lines)


def testbed_unavailable() -> str | None:
    """Why a testbed cannot be built here, or None when it can."""
    if os.geteuid() != 0:
        return "the testbed needs root"
    for cmd in ("ip", "unshare", "/usr/sbin/sshd", "ssh"):
        if shutil.which(cmd) is None:
            return f"{cmd} is not installed (run scripts/install.sh)"
    return None
