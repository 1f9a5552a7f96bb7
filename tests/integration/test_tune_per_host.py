"""One host (h02, not the first) misconfigured: ``fabtune tune`` brings it to the oracle's best with
moves that touch h02 alone, and leaves h01 exactly as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.rollback import rollback_from_hosts
from fabtune.testbed import oracle as testbed_model
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import run as tune_run
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.state import differences
from tests.integration.conftest import make_testbed
from tests.integration.tunerack import TUNED_NCCL, TUNED_NICS, current_state, inventory

pytestmark = pytest.mark.testbed

TUNED, NCCL = TUNED_NICS, TUNED_NCCL  # every host tuned but the odd ones (the overrides below)


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed({
        "name": "lodd",
        "fabric": "roce",
        "hosts": 2,
        "subnet_base": "10.191",
        "nics_per_host": 1,
        "gpus_per_host": 2,
        "seed": 11,
        "initial": TUNED,
        "switch": {"pfc_priorities": [3], "ecn_priorities": [3], "trust": "dscp"},
        "overrides": {"h01": {"nccl_conf": NCCL},
                      "h02": {"nccl_conf": NCCL, "initial": {"pfc": [0] * 8, "mtu": 1500}}},
    })


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_one_odd_host_is_tuned_to_the_oracle_by_moves_on_it_alone(rack: TestbedSpec) -> None:
    before = current_state(rack)
    options = {"max_runs": 6, "baseline_runs": 4, "skip_groups": ["qps", "gdr"]}
    result, report = tune_run.tune(inventory(rack), options, oracle=testbed_model.testbed_oracle)
    moves = [(m.name, m.outcome, m.hosts) for m in result.moves]
    assert [(name, hosts) for name, _, hosts in moves] == [
        ("lossless priority 3", ["h02"]), ("MTU 4200", ["h02"])], moves
    assert json.loads(report.read_text())["oracle"]["share_of_best"] >= 0.99, moves
    after = current_state(rack)
    assert differences(before["h01"], after["h01"]) == []  # h01 was never changed
    assert differences(after["h01"], after["h02"]) == []  # h02 ends where h01 was
    steps = [s for s in Journal().steps(result.run_id) if s.kind == "move"]
    assert [s.payload["hosts"] for s in steps] == [["h02"], ["h02"]]
    # Only h02 ever armed a revert of the run (its first arming keeps the pre-run record), so a
    # rollback from the hosts' own records restores h02 alone, to where it started.
    assert sorted(AnsibleBackend(read_inventory(inventory(rack))).prerun(result.run_id)) == ["h02"]
    assert rollback_from_hosts(result.run_id, inventory(rack)) == ["h02"]
    assert {h: differences(before[h], s) for h, s in current_state(rack).items()} == {"h01": [], "h02": []}
