"""Every published figure the model claims to reproduce, within 5%, and the docs table in sync."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.sim.model import calibration_markdown, calibration_rows
from fabtune.sim.model.calibration import CalRow

DOC = Path(__file__).resolve().parents[2] / "docs" / "model.md"


@pytest.mark.parametrize("row", calibration_rows(), ids=lambda r: r.figure)
def test_model_within_5pct_of_published(row: CalRow) -> None:
    assert abs(row.error) <= 0.05, f"{row.figure}: model {row.model:.4g} vs {row.published:.4g}"


def test_docs_table_is_generated_from_the_model() -> None:
    assert calibration_markdown() in DOC.read_text(encoding="utf-8")
