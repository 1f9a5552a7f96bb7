"""bench/projection.py: the real loop over the fabric model's rack, its output a script can read."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from fabtune.knobs import lossless_change
from fabtune.tune.state import snapshot_of, with_change
from tests.unit.benchscript import load

LINE = re.compile(r"^projection (\d+) nodes (factory-defaults|already-tuned): (\d+\.\d) min$")


@pytest.fixture(scope="module")
def projection() -> ModuleType:
    return load("projection")


def test_apply_changes_the_models_configuration_and_a_rollback_restores_it(projection: ModuleType) -> None:
    rack = projection.ModelRack(4, None, seed=1, launch_s=0.0)
    before = rack.facts()
    assert not any(rack.fabric.hosts[0].nics[0].pfc)
    lossy = rack.measure(2).samples
    desired = {h: with_change(state, lossless_change(3)) for h, state in before.items()}
    rack.apply(desired, run_id="r")
    port = rack.fabric.hosts[3].nics[7]
    assert (port.trust, port.pfc[3], port.roce_tos, port.dscp2prio[26]) == ("dscp", True, 106, 3)
    assert rack.fabric.hosts[3].env("NCCL_IB_TC") == "106"
    lossless = rack.measure(2).samples
    assert min(s.alltoall for s in lossless) > max(s.alltoall for s in lossy)  # 4 nodes: incast collapses
    rack.apply({h: snapshot_of(f) for h, f in before.items()}, exact=True)
    assert not any(rack.fabric.hosts[3].nics[7].pfc)
    assert rack.costs.calls["armed apply"] == rack.costs.calls["rollback apply"] == 1
    assert sum(rack.costs.launches.values()) == 8


def test_a_projection_at_8_nodes_prints_a_line_per_rack_state(
    projection: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    projection.main(["--nodes", "8", "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    found = [LINE.match(line) for line in out.splitlines() if line.startswith("projection ")]
    assert [(m[1], m[2]) for m in found if m] == [("8", "factory-defaults"), ("8", "already-tuned")]
    assert all(m and float(m[3]) > 0 for m in found)
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| 8 |")]
    assert len(rows) == 2
    assert all(int(cells[2].split()[0]) >= 8 for cells in rows)  # at least the baseline's 8 runs
