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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files whose tests carry the longest deadlines (``pytest.mark.timeout``: whole tunes on the
    testbed) first, then the other testbed files, then the rest, each in their order: ``--dist
    loadfile`` with ``--no-loadscope-reorder`` (scripts/test.sh) hands files to workers in this
    order, so the longest start first and the many short ones fill the gaps at the end (no worker
    still running a 10-minute file after the others ran out of work). Without that flag,
    pytest-xdist (3.5 on) hands out the files with the most tests first, which puts the whole tunes,
    one test per file, last."""
    longest: dict[Path, tuple[float, bool]] = {}
    for item in items:
        marker = item.get_closest_marker("timeout")
        deadline = float(marker.args[0]) if marker is not None and marker.args else 0.0
        testbed = item.get_closest_marker("testbed") is not None
        before = longest.get(item.path, (0.0, False))
        longest[item.path] = (max(before[0], deadline), before[1] or testbed)
    # stable: the order within a file is kept
    items.sort(key=lambda item: (-longest[item.path][0], not longest[item.path][1]))
