"""Shared helpers: locate ``../shared/fixtures`` beside the checkout and load samples."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

SKIP_REASON = "../shared/fixtures not present beside the checkout"


def _fixtures_dir() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent.parent / "shared" / "fixtures"
    return None


@pytest.fixture
def sample() -> Callable[[str], str]:
    """Return a loader: file name -> tool output (the ``# source:`` line removed)."""
    directory = _fixtures_dir()
    if directory is None or not directory.is_dir():
        pytest.skip(SKIP_REASON)

    def load(name: str) -> str:
        first, _, rest = (directory / name).read_text(encoding="utf-8").partition("\n")
        assert first.startswith("# source: "), f"{name} lacks its '# source:' line"
        return rest

    return load
