"""Each published figure of the calibration table reproduced within the stated error."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.advise import fabric
from fabtune.advise.calibration import (
    ALL_SOURCES,
    FABRIC_FIGURES,
    MFU_FIGURES,
    TOLERANCE,
    FabricFigure,
    MfuFigure,
)
from fabtune.advise.job import fit, parse_job
from fabtune.advise.model import Bandwidth, step_time

DOC = Path(__file__).resolve().parents[2] / "docs" / "advisor.md"


@pytest.mark.parametrize("figure", MFU_FIGURES, ids=lambda f: f.name[:40])
def test_published_mfu_is_reproduced(figure: MfuFigure) -> None:
    job = parse_job({"name": "calibration", **figure.job}, figure.name)
    bw = Bandwidth(figure.per_gpu_gbytes, figure.per_gpu_gbytes, figure.nvlink_gbytes)
    predicted = step_time(job, fit(job, figure.nodes), bw).mfu
    assert predicted == pytest.approx(figure.mfu, rel=TOLERANCE), (predicted, figure.mfu)


@pytest.mark.parametrize("figure", FABRIC_FIGURES, ids=lambda f: f.name[:40])
def test_published_fabric_figure_is_reproduced(figure: FabricFigure) -> None:
    topo = fabric.Topology(leaf_nodes=32)
    opts = {o.name: o for o in fabric.options(1)}
    value = fabric.route_factor(opts[figure.option], topo, 64)
    if figure.against is not None:
        value /= fabric.route_factor(opts[figure.against], topo, 64)
    assert value == pytest.approx(figure.value, rel=TOLERANCE), (value, figure.value)


def test_the_docs_cite_every_source_and_state_the_error() -> None:
    text = DOC.read_text()
    missing = [s for s in ALL_SOURCES if s not in text]
    assert not missing, missing
    assert f"{TOLERANCE:.0%}" in text
