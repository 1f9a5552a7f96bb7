"""One bad host (not the first): h02's NCCL_IB_GID_INDEX names its RoCEv1 GID.

Every NCCL job that includes h02 fails (its queue pairs never pair with the RoCEv2 peers).
``fabtune check`` names h02 with the evidence and exits 7; ``fabtune tune`` repairs it (a move on
h02 alone sets the index of its RoCEv2 IPv4 GID) and tunes on. Where h02's NIC has no RoCEv2 GID
at all (``gid_layout: v1-only``), no knob fixes it: tune names h02 with the evidence, exits 7 and
changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fabtune.desired import tuned_path
from fabtune.errors import ExitStatus
from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune.state import differences
from tests.integration.conftest import make_testbed
from tests.integration.tunerack import FACTORY_NICS, current_state, inventory

pytestmark = pytest.mark.testbed

# Standard GID layout: 0/1 link-local v1/v2, 2 the RoCEv1 IPv4 GID, 3 the RoCEv2 IPv4 GID.
V1_INDEX = 2
V2_INDEX = 3
REPAIR = "NCCL_IB_GID_INDEX to the RoCEv2 GID"


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
        timeout=1400,  # a whole tune (the repair, then the loop) took 590 s in a loaded suite run
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


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_tune_repairs_the_bad_hosts_gid_index_on_it_alone_and_tunes_on(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    """After the check test (file order): this one changes the rack."""
    before = current_state(rack)
    profile = tmp_path / "profile.yml"
    # after the repair, one group is enough to show the loop tunes on (test_tune tunes every group)
    options = {"baseline_runs": 2, "max_runs": 4, "skip_groups": ["lossless", "routing", "qps", "gdr"]}
    profile.write_text(json.dumps({"fabtune_tune": options}))
    done = fabtune("tune", "-i", str(inventory(rack)), "--profile", str(profile))
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, said[-3000:]
    assert f"kept {REPAIR}: repair: the benchmark failed before it and runs on all 3 hosts after it" in said
    run = Journal().runs(1)[0]
    steps = Journal().steps(run.id)
    assert Journal().run(run.id).state == "done"
    moves = [s for s in steps if s.kind == "move"]
    repair = moves[0]
    assert (repair.name, repair.state, repair.payload["hosts"]) == (REPAIR, "kept", ["h02"])
    assert list(repair.payload["desired"]) == ["h02"]
    (evidence,) = repair.payload["evidence"]
    assert evidence["host"] == "h02" and evidence["evidence"].split()[:3] == ["mlx5_0", "1", str(V1_INDEX)]
    assert [s.state for s in steps if s.name == "baseline"] == ["failed", "done"]  # then measured, repaired
    assert len(moves) > 1  # the loop tuned on from the repaired rack
    first = Journal().first_snapshot(run.id)
    repaired = Journal().snapshot_at(run.id, moves[1].seq)  # the rack as the repair left it
    assert repaired["h02"]["nccl"]["NCCL_IB_GID_INDEX"] == str(V2_INDEX)
    assert {h: differences(first[h], repaired[h]) for h in ("h01", "h03")} == {"h01": [], "h03": []}
    after = current_state(rack)
    assert after["h02"]["nccl"]["NCCL_IB_GID_INDEX"] == str(V2_INDEX)  # h02's nccl.conf, read back
    for host in ("h01", "h03"):
        assert (after[host]["nccl"] or {}).get("NCCL_IB_GID_INDEX") == (before[host]["nccl"] or {}).get(
            "NCCL_IB_GID_INDEX")
    # The tuned desired state keeps h02's own index (the rack's shared state has none), so drift
    # checks h02 against it and finds nothing to undo.
    tuned = yaml.safe_load(tuned_path(read_inventory(inventory(rack)).name).read_text())
    assert list(tuned["fabric_desired_hosts"]) == ["h02"], tuned
    assert tuned["fabric_desired_hosts"]["h02"]["nccl"]["NCCL_IB_GID_INDEX"] == str(V2_INDEX)
    assert "NCCL_IB_GID_INDEX" not in (tuned["fabric_desired"].get("nccl") or {})
    checked = fabtune("drift", "-i", str(inventory(rack)))
    assert checked.returncode == 0, " ".join((checked.stdout + checked.stderr).split())[-2000:]


@pytest.fixture
def v1_rack() -> Iterator[TestbedSpec]:
    """The rack pins NCCL_IB_GID_INDEX=3 (its RoCEv2 IPv4 GID); h02's NIC has no RoCE v2 at all."""
    yield from make_testbed(
        {
            "name": "gdv1",
            "hosts": 3,
            "subnet_base": "10.198",
            "nics_per_host": 1,
            "gpus_per_host": 1,
            "seed": 19,
            "initial": FACTORY_NICS,
            "switch": {"pfc_priorities": [3], "ecn_priorities": [3]},
            "nccl_conf": {"NCCL_IB_GID_INDEX": V2_INDEX},
            "overrides": {"h02": {"gid_layout": "v1-only"}},
        }
    )


@pytest.mark.timeout(1500)
def test_tune_names_a_host_without_a_rocev2_gid_exits_7_and_changes_nothing(
    v1_rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(v1_rack)
    profile = tmp_path / "profile.yml"
    profile.write_text(json.dumps({"fabtune_tune": {"baseline_runs": 2, "max_runs": 4}}))
    done = fabtune("tune", "-i", str(inventory(v1_rack)), "--profile", str(profile))
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == ExitStatus.CHECK_FAILED, said[-3000:]
    stop = f"preflight failed, nothing was changed: h02: transport: NCCL_IB_GID_INDEX={V2_INDEX}: mlx5_0 has"
    assert f"{stop} no GID at index {V2_INDEX} [" in said
    assert f"NCCL_IB_GID_INDEX set by environment to {V2_INDEX}." in said  # NCCL's own echo, the evidence
    assert "RoCEv2 IPv4 GID is at index" not in said and REPAIR not in said
    assert "h01: transport" not in said.split("preflight failed")[-1]
    run = Journal().runs(1)[0]
    steps = Journal().steps(run.id)
    baseline = next(s for s in steps if s.name == "baseline")
    assert baseline.state == "failed"
    assert [c["verdict"] for c in baseline.payload["checks"] if c["host"] == "h02"] == ["fail"]
    assert not [s for s in steps if s.kind == "move"]
    assert current_state(v1_rack) == before
