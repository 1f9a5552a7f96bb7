"""Fixtures: two provisioned RoCE hosts and a fabric directory, in a tmp dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune.sim.node import provision
from tests.unit.sim_tools.conftest import roce_node

GOOD = {"mtu": 4200, "trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0]}


def make_rack(base: Path, hosts: int = 2, initial: dict[str, object] | None = None,
              switch_trust: str = "dscp", vlan: int | None = None) -> Path:
    """Provision ``hosts`` RoCE nodes under ``base/hNN`` and ``base/fabric``; return the fabric dir
    (``vlan``: every port's address on that VLAN's device, as the testbed spec's ``vlan``)."""
    names = [f"h{i + 1:02d}" for i in range(hosts)]
    for i, name in enumerate(names):
        node = roce_node()
        node["hostname"] = name
        for n, nic in enumerate(node["nics"]):
            nic["ipv4"] = f"10.78.{n + 1}.{11 + i}"
            nic["mac"] = f"02:00:0a:4e:{i:02x}:{n:02x}"
            if vlan is not None:
                nic["vlan"] = vlan
        provision(base / name, node, initial or GOOD)
    fabric = base / "fabric"
    (fabric / "flows").mkdir(parents=True, exist_ok=True)
    (fabric / "jobs").mkdir(exist_ok=True)
    doc = {"testbed": "unit", "fabric": "roce", "seed": 1, "hosts": hosts,
           "switch": {"pfc_priorities": [3], "ecn_priorities": [3], "trust": switch_trust,
                      "nodes_per_leaf": 32, "oversubscription": 1.0},
           "sm": None, "host_addresses": dict.fromkeys(names, "127.0.0.1")}
    (fabric / "fabric.json").write_text(json.dumps(doc))
    return fabric


@pytest.fixture
def rack(tmp_path: Path) -> Path:
    """Two correctly configured 400G RoCE hosts; returns the base dir (``h01``, ``h02``, ``fabric``)."""
    make_rack(tmp_path)
    return tmp_path
