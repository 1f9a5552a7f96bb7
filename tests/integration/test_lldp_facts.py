"""LLDP on a testbed (issue 19): where a host runs lldpad, fabric_facts reads the switch's DCBX
(PFC and APP TLVs through lldptool) and mlnx_qos warns; a host without lldpad has no LLDP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fabtune import ansible
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune.lossless import choose
from tests.integration.ccrack import NIC, inventory, on_host
from tests.integration.conftest import make_testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed({
        "name": "ldfct", "fabric": "roce", "hosts": 2, "subnet_base": "10.229", "nics_per_host": 2,
        "gpus_per_host": 2, "seed": 19,
        "switch": {"pfc_priorities": [4], "ecn_priorities": [4], "dscp2prio": {34: 4}},
        "overrides": {"h01": {"tools": {"lldpad": "1.1.0"}}},
    })


def _hardware(rack: TestbedSpec) -> dict[str, dict[str, Any]]:
    outcome = ansible.run_playbook("facts.yml", inventory(rack)).raise_for_failure("facts")
    gathered = outcome.results("Gather the fabric state")
    return {h: res["ansible_facts"]["fabric_facts"] for h, res in gathered.items()}


def test_facts_read_the_switchs_class_where_lldpad_runs(rack: TestbedSpec) -> None:
    assert on_host(rack, "h01", "systemctl is-active lldpad.service").strip() == "active"
    warning = "****** WARNING: lldpad service is running and may overwrite your settings ******"
    assert on_host(rack, "h01", f"mlnx_qos -i {NIC}").splitlines()[0] == warning
    assert warning not in on_host(rack, "h02", f"mlnx_qos -i {NIC}")
    facts = _hardware(rack)
    peers = facts["h01"]["hardware"]["lldp"]
    assert set(peers) == set(facts["h01"]["nics"]) and NIC in peers
    assert peers[NIC]["pfc"] == [4] and peers[NIC]["willing"] is False
    dscp2prio = {int(d): p for d, p in peers[NIC]["dscp2prio"].items()}
    assert dscp2prio[34] == 4 and {d for d, p in dscp2prio.items() if p == 4} == {34, *range(32, 40)}
    assert facts["h02"]["hardware"]["lldp"] is None  # no lldptool there
    choice = choose(facts, None)
    assert choice.source == "guess" and "no LLDP from the switch on h02 " in choice.says
    alone = choose({"h01": facts["h01"]}, None).lossless  # a rack of h01 alone: LLDP on every host
    assert alone is not None and (alone.priority, alone.dscp) == (4, 34)
