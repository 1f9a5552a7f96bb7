"""One bad host (not the first): h02's NCCL_IB_GID_INDEX names its RoCEv1 GID.

Every NCCL job that includes h02 fails (its queue pairs never pair with the RoCEv2 peers).
``fabtune check`` and ``fabtune tune`` both name h02 with the evidence, exit 7, and change nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed
from tests.integration.tunerack import FACTORY_NICS, current_state, inventory

pytestmark = pytest.mark.testbed

# Standard GID layout: 0/1 link-local v1/v2, 2 the RoCEv1 IPv4 GID, 3 the RoCEv2 IPv4 GID.
V1_INDEX = 2


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed(
        {
            "name": "wr1",
            "hosts": 3,
            "subnet_base": "10.254",
            "nics_per_host": 1,
            "gpus_per_host": 1,
            "seed": 19,
            "initial": FACTORY_NICS,
            "switch": {"pfc_priorities": [3], "ecn_priorities": [3]},
            "overrides": {"h02": {"nccl_conf": {"NCCL_IB_GID_INDEX": V1_INDEX}}},
        }
    )


def fabtune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fabtune", *args],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_check_fails_the_transport_on_the_bad_host_with_its_gid_row(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    out = tmp_path / "check.json"
    done = fabtune("check", "-i", str(inventory(rack)), "--oob-interface", "eth0", "-o", str(out))
    assert done.returncode == ExitStatus.CHECK_FAILED, done.stdout[-3000:] + done.stderr[-3000:]
    transport = {r["host"]: r for r in json.loads(out.read_text())["results"] if r["check"] == "transport"}
    assert transport["h02"]["verdict"] == "fail", transport
    assert transport["h02"]["summary"].startswith(f"NCCL_IB_GID_INDEX={V1_INDEX} names mlx5_0's RoCEv1 GID")
    evidence = transport["h02"]["evidence"].split()
    assert evidence[:3] == ["mlx5_0", "1", str(V1_INDEX)] and evidence[-2] == "v1"
    assert {transport[h]["verdict"] for h in ("h01", "h03")} == {"warn"}  # failed only through h02
    assert all(transport[h]["summary"].startswith("failed through h02") for h in ("h01", "h03"))
    assert current_state(rack) == before


def test_tune_names_the_bad_host_exits_7_and_changes_nothing(rack: TestbedSpec, tmp_path: Path) -> None:
    before = current_state(rack)
    profile = tmp_path / "profile.yml"
    profile.write_text(json.dumps({"fabtune_tune": {"baseline_runs": 2, "max_runs": 4}}))
    done = fabtune("tune", "-i", str(inventory(rack)), "--profile", str(profile))
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == ExitStatus.CHECK_FAILED, said[-3000:]
    assert "preflight failed, nothing was changed: h02: transport: " in said
    assert f"NCCL_IB_GID_INDEX={V1_INDEX} names mlx5_0's RoCEv1 GID" in said
    assert f"mlx5_0 1 {V1_INDEX} 0000:0000:0000:0000:0000:ffff:" in said and " v1 " in said
    assert "h01: transport" not in said.split("preflight failed")[-1]
    run = Journal().runs(1)[0]
    baseline = next(s for s in Journal().steps(run.id) if s.name == "baseline")
    assert baseline.state == "failed"
    assert [c["verdict"] for c in baseline.payload["checks"] if c["host"] == "h02"] == ["fail"]
    assert not [s for s in Journal().steps(run.id) if s.kind == "move"]
    assert current_state(rack) == before
