"""The desired-state schema and couplings (module_utils fabric_desired of fabtune.fabric), without hosts."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_desired import (
    OPENSM_KEYS,
    roce_priority,
    validate,
)

GOOD: dict[str, Any] = {
    "nics": {
        "all": {
            "trust": "dscp", "dscp2prio": {26: 3, 48: 6}, "pfc": [3],
            "prio_tc": [0, 1, 2, 3, 4, 5, 6, 7],
            "tsa": ["ets", "ets", "ets", "ets", "ets", "ets", "strict", "ets"],
            "tcbw": [10, 10, 10, 40, 10, 10, 0, 10], "mtu": 4200,
            "ecn": {"np": [3], "rp": [3]}, "cnp_dscp": 48, "cnp_prio": 6,
            "roce_tos": 106, "roce_mode": 2,
        },
    },
    "nccl": {"NCCL_IB_TC": 106, "NCCL_IB_GID_INDEX": 3, "NCCL_IB_HCA": "=mlx5_0"},
    "sm": {"routing_engine": "ftree,minhop", "qos": True, "lmc": 0, "sm_priority": 14, "max_op_vls": 4},
}


def changed(path: str, value: Any) -> dict[str, Any]:
    """GOOD with one field (dotted path) replaced, or deleted when value is ...."""
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return doc


def test_good_state_validates_and_normalises() -> None:
    problems, normal = validate(GOOD)
    assert problems == []
    assert normal["nics"]["all"]["dscp2prio"] == {26: 3, 48: 6}
    assert normal["sm"]["routing_engine"] == "ftree,minhop"


def test_all_expands_per_roce_netdev_with_overrides() -> None:
    doc = changed("nics.enp2", {"mtu": 9000})
    problems, normal = validate(doc, ["enp1", "enp2"], ["eth0"])
    assert problems == []
    assert normal["nics"]["enp1"]["mtu"] == 4200
    assert normal["nics"]["enp2"]["mtu"] == 9000
    assert normal["nics"]["enp2"]["roce_tos"] == 106


def test_json_string_keys_are_accepted() -> None:
    """Extra vars arrive as JSON: DSCP keys and ints as strings."""
    doc = changed("nics.all.dscp2prio", {"26": 3, "48": "6"})
    problems, normal = validate(doc)
    assert problems == []
    assert normal["nics"]["all"]["dscp2prio"] == {26: 3, 48: 6}


BAD = [
    ("nics.all.dscp2prio", {64: 3}, "nics.all.dscp2prio key: 64 is not a DSCP"),
    ("nics.all.pfc", [8], "nics.all.pfc[0]: 8 is not a priority"),
    ("nics.all.cnp_prio", 8, "nics.all.cnp_prio: 8 is not a priority"),
    ("nics.all.cnp_dscp", 64, "nics.all.cnp_dscp: 64 is not a DSCP"),
    ("nics.all.roce_tos", 256, "nics.all.roce_tos: 256 is not a ToS byte"),
    ("nics.all.roce_tos", 107, "sets ECN bits 11"),
    ("nics.all.roce_tos", 98, "roce_tos 98 (DSCP 24) has no entry|DSCP 24, which dscp2prio does not map"),
    ("nics.all.pfc", [4], "maps to priority 3, but PFC is on only for priorities [4]"),
    ("nics.all.cnp_prio", 3, "cnp_prio 3 is the RoCE data priority"),
    ("nics.all.dscp2prio", {26: 3, 48: 5}, "cnp_dscp 48 maps to priority 5 in dscp2prio, not to cnp_prio 6"),
    ("nics.all.cnp_dscp", 26, "cnp_dscp 26 is the RoCE data DSCP"),
    ("nccl.NCCL_IB_TC", 104, "roce_tos 106 differs from nccl.NCCL_IB_TC 104"),
    ("nics.all.roce_mode", 1, "roce_mode 1 (RoCE v1) carries no IP header"),
    ("nics.all.roce_mode", 3, "nics.all.roce_mode: 3 must be 1 (RoCE v1) or 2 (RoCE v2)"),
    ("nics.all.mtu", 5000, "nics.all.mtu: 5000 must be one of 1500, 2200, 4200, 9000"),
    ("nics.all.trust", "vlan", "nics.all.trust: 'vlan' must be one of pcp, dscp"),
    ("nics.all.tsa", ["ets"] * 7, "nics.all.tsa: "),
    ("nics.all.tsa", ["ets"] * 7 + ["fair"], "nics.all.tsa[7]: 'fair' must be one of strict, ets, vendor"),
    ("nics.all.tcbw", [10, 10, 10, 40, 10, 10, 0, 20], "must sum to 100 over the ets traffic classes"),
    ("nics.all.tcbw", [10, 10, 10, 40, 10, 0, 10, 10], "nics.all.tcbw[6]: 10 must be 0: traffic class 6"),
    ("nics.all.prio_tc", [0, 1, 2, 3, 4, 5, 6, 9], "nics.all.prio_tc[7]: 9 is not a traffic class"),
    ("nics.all.ecn", {"np": [3], "xp": [3]}, "nics.all.ecn.xp"),
    ("nics.all.speed", 400, "nics.all.speed: 400 is not a known NIC knob"),
    ("nics.all.trust", "pcp", "dscp2prio is given but trust is pcp"),
    ("nccl.NCCL_IB_GID_INDEX", 256, "nccl.NCCL_IB_GID_INDEX: 256 must be an integer in -1..255"),
    ("nccl.NCCL_IB_SL", 16, "nccl.NCCL_IB_SL: 16"),
    ("nccl.NCCL_NET_GDR_LEVEL", "FAR", "nccl.NCCL_NET_GDR_LEVEL: 'FAR' must be one of LOC"),
    ("nccl.IB_HCA", "mlx5_0", "nccl.IB_HCA: 'IB_HCA' is not an NCCL_* variable name"),
    ("sm.routing_engine", "fattree", "unknown routing engine 'fattree'"),
    ("sm.routing_engine", "ar_updn", "an NVIDIA MLNX OpenSM engine: set sm_flavor: mlnx"),
    ("sm.lmc", 8, "sm.lmc: 8 must be an integer in 0..7"),
    ("sm.sm_priority", 16, "sm.sm_priority: 16"),
    ("sm.qos_sl2vl", "0,1,2", "must be 16 comma-separated VLs"),
    ("sm.adaptive_routing", True, "sm.adaptive_routing: True is not a key opensm knows"),
    ("sm.qos_max_vls", 15, "sm.qos_max_vls: 15 exceeds the 8 VLs of max_op_vls 4 (VL0-7)"),
    # Issue 13.2: an encoding (opensm/osm_port.c caps the encoded op_vls), 8 limits nothing.
    ("sm.max_op_vls", 8, "sm.max_op_vls: 8 must be an integer in 1..5"),
    ("switches", {}, "switches: {} is not a known section"),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD, ids=[f"{p}={v}" for p, v, _ in BAD])
def test_bad_state_is_refused_naming_field_and_value(path: str, value: Any, expected: str) -> None:
    problems, _ = validate(changed(path, value))
    assert problems, f"{path}={value!r} was accepted"
    assert any(any(e in p for e in expected.split("|")) for p in problems), problems


def test_interface_that_does_not_exist_is_refused() -> None:
    problems, _ = validate(changed("nics.enp99s0np0", {"mtu": 4200}), ["enp1"], ["eth0", "ib0"])
    assert problems == ["nics.enp99s0np0: 'enp99s0np0' does not exist on this host (RoCE ports: enp1)"]


def test_interface_that_is_not_roce_is_refused() -> None:
    problems, _ = validate(changed("nics.ib0", {"mtu": 4200}), ["enp1"], ["eth0", "ib0"])
    assert problems == ["nics.ib0: 'ib0' is not a RoCE port of this host (RoCE ports: enp1)"]


def test_lossy_factory_snapshot_is_consistent() -> None:
    """A fresh NIC (trust pcp, no PFC) is not a contradiction: rollbacks to it must pass."""
    snapshot = {"nics": {"enp1": {"trust": "pcp", "pfc": [], "roce_tos": 0, "cnp_prio": 6, "cnp_dscp": 48,
                                  "ecn": {"np": list(range(8)), "rp": list(range(8))}, "mtu": 1500,
                                  "roce_mode": 2}},
                "nccl": None, "hardware": {"ports": []}}
    assert validate(snapshot, ["enp1"], [])[0] == []


def test_couplings_can_be_waived_for_exact_restore() -> None:
    doc = changed("nics.all.pfc", [4])
    assert validate(doc)[0]
    assert validate(doc, enforce_couplings=False)[0] == []


def test_roce_priority_follows_the_dscp_map() -> None:
    assert roce_priority({"trust": "dscp", "roce_tos": 106, "dscp2prio": {26: 3}}) == 3
    assert roce_priority({"trust": "pcp", "roce_tos": 106, "dscp2prio": {26: 3}}) is None


def test_every_problem_is_reported_at_once() -> None:
    doc = changed("nics.all.mtu", 5000)
    doc["nics"]["all"]["cnp_prio"] = 9
    problems, _ = validate(doc)
    assert len(problems) >= 2


@pytest.mark.skipif(shutil.which("opensm") is None and not Path("/usr/sbin/opensm").exists(),
                    reason="Debian's opensm is not installed")
def test_opensm_keys_are_those_real_opensm_knows(tmp_path: Path) -> None:
    conf = tmp_path / "opensm.conf"
    subprocess.run(["/usr/sbin/opensm", "--create-config", str(conf)],
                   capture_output=True, timeout=60, check=False)
    lines = conf.read_text().splitlines()
    keys = {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}
    assert keys == set(OPENSM_KEYS)


def test_max_op_vls_4_allows_eight_qos_vls() -> None:
    """Issue 13.2: ``max_op_vls: 4`` (VL0-7) with ``qos_max_vls: 8`` is the correct pair, not an error."""
    state = changed("sm.max_op_vls", 4)
    state["sm"]["qos_max_vls"] = 8
    problems, _ = validate(state)
    assert problems == []
