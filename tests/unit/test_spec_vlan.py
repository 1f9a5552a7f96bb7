"""The testbed spec's ``vlan``: RoCE on an 802.1Q VLAN device, per rack or per host."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.errors import ConfigError
from fabtune.perf.parsers import show_gids
from fabtune.sim.node import Layout, NicDescription, NodeState, provision
from fabtune.sim.observe import host_config
from fabtune.sim.tools import show_gids as show_gids_tool
from fabtune.testbed import layout
from fabtune.testbed.spec import build_spec, load_spec, spec_to_doc

SPECS = Path(__file__).resolve().parents[2] / "fabtune" / "testbed" / "specs"
RACK_VLAN = {"id": 100, "egress_qos_map": {2: 3}}


def test_vlan_per_rack_and_per_host_round_trips() -> None:
    spec = build_spec({"hosts": 3, "vlan": RACK_VLAN,
                       "overrides": {"h02": {"vlan": {"id": 200}}, "h03": {"vlan": False}}})
    assert [h.vlan for h in spec.hosts] == [100, 200, None]
    assert spec.host("h01").egress_qos_map == (0, 0, 3, 0, 0, 0, 0, 0)
    assert spec.host("h02").egress_qos_map == (0,) * 8  # a host's own vlan replaces the rack's
    doc = spec_to_doc(spec)
    assert doc["overrides"]["h01"]["vlan"] == {"id": 100, "egress_qos_map": {2: 3}}
    assert "vlan" not in doc["overrides"]["h03"]
    again = build_spec(doc)
    assert again == spec
    assert [h.egress_qos_map for h in again.hosts] == [h.egress_qos_map for h in spec.hosts]
    assert all(h.vlan is None for h in build_spec({"hosts": 2}).hosts)


@pytest.mark.parametrize(("doc", "problem"), [
    ({"vlan": {"id": 0}}, "vlan.id: 0 must be an integer from 1 to 4094"),
    ({"vlan": {"id": 4095}}, "vlan.id: 4095 must be an integer from 1 to 4094"),
    ({"vlan": {"id": "100"}}, "vlan.id: '100' must be an integer from 1 to 4094"),
    ({"vlan": {}}, "vlan.id: None must be a VLAN id from 1 to 4094"),
    ({"vlan": 100}, "vlan: 100 must be a mapping"),
    ({"vlan": {"id": 100, "pcp": 3}}, "vlan.pcp: 3 is not a known key (known: id, egress_qos_map)"),
    ({"vlan": {"id": 100, "egress_qos_map": {8: 3}}},
     "vlan.egress_qos_map key: 8 must be an integer from 0 to 7"),
    ({"vlan": {"id": 100, "egress_qos_map": {0: 9}}},
     "vlan.egress_qos_map.0: 9 must be an integer from 0 to 7"),
    ({"vlan": {"id": 100, "egress_qos_map": [3]}},
     "vlan.egress_qos_map: [3] must be a mapping of skb priority (0-7) to PCP (0-7)"),
    ({"overrides": {"h02": {"vlan": {"id": -1}}}},
     "overrides.h02.vlan.id: -1 must be an integer from 1 to 4094"),
    ({"fabric": "ib", "vlan": {"id": 100}},
     "vlan: {'id': 100} is RoCE's (an 802.1Q tag on Ethernet frames): only valid with fabric: roce"),
])
def test_a_bad_vlan_is_refused_naming_the_field(doc: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_spec({"hosts": 2, **doc})
    assert problem in err.value.problems


def _host(tmp_path: Path, vlan: object) -> NodeState:
    spec = build_spec({"hosts": 2, "nics_per_host": 1, "vlan": vlan})
    desc = layout.node_description(spec, spec.host("h01"))
    nic = NicDescription.from_dict(desc["nics"][0])
    assert NicDescription.from_dict(nic.to_dict()) == nic
    provision(tmp_path, desc)
    return NodeState(Layout.under(tmp_path))


def test_a_vlan_host_has_its_roce_gids_on_the_vlan_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _host(tmp_path, RACK_VLAN)
    netdev = state.node.nics[0].netdev
    assert show_gids_tool.main([], state) == 0
    table = show_gids.parse(capsys.readouterr().out)
    assert [(e.index, e.version, e.ipv4 is not None, e.netdev) for e in table.entries] == [
        (0, "v1", False, netdev),
        (1, "v2", False, netdev),
        (2, "v1", False, f"{netdev}.100"),
        (3, "v2", False, f"{netdev}.100"),
        (4, "v1", True, f"{netdev}.100"),
        (5, "v2", True, f"{netdev}.100"),
    ]
    port = host_config(state).nics[0]
    assert [g.vlan for g in port.gids] == [None, None, 100, 100, 100, 100]
    assert port.egress_qos_map == (0, 0, 3, 0, 0, 0, 0, 0)


def test_an_untagged_host_keeps_the_standard_table(tmp_path: Path) -> None:
    port = host_config(_host(tmp_path, None)).nics[0]
    assert [(g.version, g.scope, g.vlan) for g in port.gids] == [
        ("v1", "link-local", None), ("v2", "link-local", None), ("v1", "ipv4", None), ("v2", "ipv4", None)]


def test_the_example_vlan_spec_builds() -> None:
    spec = load_spec(SPECS / "roce-vlan-pcp.yml", {})
    assert {h.vlan for h in spec.hosts} == {100}
    assert spec.switch.trust == "pcp"
    assert all(h.initial["trust"] == "pcp" for h in spec.hosts)
