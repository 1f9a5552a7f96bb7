"""Testbed spec validation: every error named with its field and value, all at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune.errors import ConfigError
from fabtune.testbed import layout
from fabtune.testbed.spec import build_spec, load_spec, spec_to_doc

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "fabtune" / "testbed" / "specs").glob("*.yml"))


def test_defaults_build_a_small_roce_rack() -> None:
    spec = build_spec({"hosts": 2})
    assert (spec.fabric, len(spec.hosts), spec.nics_per_host, spec.rate_gbps) == ("roce", 2, 4, 400)
    assert spec.sm is None


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        build_spec(
            {"hosts": 1, "fabric": "ethernet", "rate_gbps": 300, "initial": {"pfc": [1, 2]}, "typo": 1}
        )
    problems = "\n".join(err.value.problems)
    for expected in ("hosts: 1", "fabric: 'ethernet'", "rate_gbps: 300", "initial.pfc: [1, 2]", "typo"):
        assert expected in problems
    assert len(err.value.problems) == 5


def test_nic_can_be_moved_across_the_socket() -> None:
    spec = build_spec({"hosts": 2, "overrides": {"h02": {"nic_numa": {"mlx5_0": 1}}}})
    h02 = spec.host("h02")
    assert h02.gpu_numa[0] == 0
    assert h02.nic_numa[0] == 1
    nic = layout.node_description(spec, h02)["nics"][0]
    assert nic["numa"] == 1
    assert nic["pcie_switch"] != layout.node_description(spec, h02)["gpus"][0]["pcie_switch"]


def test_override_of_an_unknown_host_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"overrides\.h09"):
        build_spec({"hosts": 2, "overrides": {"h09": {}}})


def test_sm_only_on_ib() -> None:
    assert build_spec({"hosts": 2, "fabric": "ib"}).sm is not None
    with pytest.raises(ConfigError, match="only valid with fabric: ib"):
        build_spec({"hosts": 2, "sm": {"routing_engine": "ftree"}})


def test_public_subnet_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"subnet_base: '8\.8'"):
        build_spec({"hosts": 2, "subnet_base": "8.8"})


def test_spec_round_trips_through_its_document() -> None:
    spec = build_spec({"hosts": 3, "fabric": "ib", "initial": {"mtu": 4200, "trust": "dscp"}})
    assert build_spec(spec_to_doc(spec)) == spec


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("hosts: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_spec(bad, {})


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_specs_validate(path: Path) -> None:
    load_spec(path, {})


def test_interface_names_fit_the_kernel_limit() -> None:
    spec = build_spec({"name": "abcdef", "hosts": 32, "nics_per_host": 8})
    names = layout.Names(spec.name)
    longest = max(
        [names.mgmt_veth(h) for h in spec.hosts]
        + [names.rail_veth(h, r) for h in spec.hosts for r in range(8)]
        + [names.rail_bridge(7), names.mgmt_bridge]
        + [layout.nic_netdev(spec, 7)],
        key=len,
    )
    assert len(longest) <= 15


def test_a_testbed_owns_only_its_own_links() -> None:
    from fabtune.testbed.layout import Names

    itcc = Names("itcc")
    assert all(itcc.owns(n) for n in ("ftitccm", "ftitccr0", "ftitcc01m", "ftitcc02r1", "ftitcc12r10"))
    # another testbed whose name starts like this one's: its bridges and veths are not ours
    assert not any(itcc.owns(n) for n in ("ftitcc2m", "ftitcc2r0", "ftitcc201m", "ftitcc202r1", "ftitccx"))
    assert Names("itcc2").owns("ftitcc201m")


def test_a_host_can_carry_its_own_nccl_conf_and_it_round_trips() -> None:
    spec = build_spec({"hosts": 3, "overrides": {"h02": {"nccl_conf": {"NCCL_IB_GID_INDEX": 2}}}})
    assert spec.host("h02").nccl_conf == (("NCCL_IB_GID_INDEX", "2"),)
    assert spec.host("h01").nccl_conf == ()
    assert build_spec(spec_to_doc(spec)).host("h02").nccl_conf == (("NCCL_IB_GID_INDEX", "2"),)


def test_a_bad_nccl_conf_names_each_field_and_value() -> None:
    doc = {"hosts": 2, "overrides": {"h02": {"nccl_conf": {
        "IB_GID_INDEX": 2, "NCCL_IB_HCA": "mlx5_0\nNCCL_IB_DISABLE=1", "NCCL_IB_TC": [106]}}}}
    with pytest.raises(ConfigError) as err:
        build_spec(doc)
    problems = "\n".join(err.value.problems)
    assert "overrides.h02.nccl_conf.IB_GID_INDEX: 2 is not an NCCL variable name" in problems
    assert "overrides.h02.nccl_conf.NCCL_IB_HCA: 'mlx5_0\\nNCCL_IB_DISABLE=1' must be" in problems
    assert "overrides.h02.nccl_conf.NCCL_IB_TC: [106] must be an integer or a string" in problems
    with pytest.raises(ConfigError, match=r"overrides\.h01\.nccl_conf: 'x' must be a mapping"):
        build_spec({"hosts": 2, "overrides": {"h01": {"nccl_conf": "x"}}})


def test_tools_per_host_default_to_debian_12_and_are_validated() -> None:
    spec = build_spec({"hosts": 2, "tools": {"mlnx-tools": "none"},
                       "overrides": {"h02": {"tools": {"iproute2": "6.2.0"}}}})
    assert spec.host("h01").tools == {"iproute2": "6.1.0", "mlnx-tools": "none", "lldpad": "none"}
    assert spec.host("h02").tools == {"iproute2": "6.2.0", "mlnx-tools": "none", "lldpad": "none"}
    assert layout.node_description(spec, spec.host("h02"))["tools"] == {"iproute2": "6.2.0"}
    assert build_spec({"hosts": 2}).host("h01").tools == {
        "iproute2": "6.1.0", "mlnx-tools": "25.07", "lldpad": "none"}  # most hosts run no lldpad
    lldpad = build_spec({"hosts": 2, "overrides": {"h02": {"tools": {"lldpad": "1.1.0"}}}})
    assert [h.tools["lldpad"] for h in lldpad.hosts] == ["none", "1.1.0"]
    again = build_spec(spec_to_doc(spec))
    assert [h.tools for h in again.hosts] == [h.tools for h in spec.hosts]
    with pytest.raises(ConfigError) as err:
        build_spec({"hosts": 2,
                    "tools": {"iproute2": "5.10.0", "mlnx-tools": "5.9", "perl": "5", "lldpad": "on"},
                    "overrides": {"h01": {"tools": {"iproute2": 6.1}}}})
    problems = "\n".join(err.value.problems)
    for expected in ("tools.iproute2: '5.10.0'", "tools.mlnx-tools: '5.9'", "tools.perl: '5'",
                     "tools.lldpad: 'on'",
                     "overrides.h01.tools.iproute2: 6.1"):
        assert expected in problems


def test_the_rack_can_start_with_nccl_settings_per_host_over_the_racks() -> None:
    """Issue 13: any NCCL setting in the starting state, globally or per host."""
    spec = build_spec({"hosts": 2, "nccl_conf": {"NCCL_IB_TC": 106, "NCCL_IB_QPS_PER_CONNECTION": 4},
                       "overrides": {"h02": {"nccl_conf": {"NCCL_IB_TC": 41}}}})
    assert spec.host("h01").nccl_conf == (("NCCL_IB_QPS_PER_CONNECTION", "4"), ("NCCL_IB_TC", "106"))
    assert spec.host("h02").nccl_conf == (("NCCL_IB_QPS_PER_CONNECTION", "4"), ("NCCL_IB_TC", "41"))
    assert [h.nccl_conf for h in build_spec(spec_to_doc(spec)).hosts] == [h.nccl_conf for h in spec.hosts]
    with pytest.raises(ConfigError, match=r"nccl_conf\.IB_TC: 1 is not an NCCL variable name"):
        build_spec({"hosts": 2, "nccl_conf": {"IB_TC": 1}})


def test_a_host_dscp_map_other_than_the_default(tmp_path: Path) -> None:
    """Issue 13: the host DSCP map is part of the starting state; the model reads it."""
    from fabtune.sim import observe
    from fabtune.sim.node import NodeState, provision

    spec = build_spec({"hosts": 2, "initial": {"dscp2prio": {26: 5, "46": 3}},
                       "overrides": {"h02": {"initial": {"dscp2prio": {26: 4}}}}})
    assert spec.host("h01").initial["dscp2prio"] == {26: 5, 46: 3}
    assert spec.host("h02").initial["dscp2prio"] == {26: 4, 46: 3}
    again = build_spec(json.loads(json.dumps(spec_to_doc(spec))))  # as state.json keeps it
    assert again.host("h02").initial["dscp2prio"] == {26: 4, 46: 3}
    host = spec.host("h02")
    provision(tmp_path, layout.node_description(spec, host), host.initial)
    state = NodeState.under(tmp_path)
    nic = state.node.nics[0]
    mapping = observe.nic_config(state, nic, 0).dscp2prio
    assert (mapping[26], mapping[46], mapping[10]) == (4, 3, 1)  # the rest: dscp >> 3
    with pytest.raises(ConfigError) as err:
        build_spec({"hosts": 2, "initial": {"dscp2prio": {64: 1, 3: 8}}})
    problems = "\n".join(err.value.problems)
    assert "initial.dscp2prio key: 64 must be an integer from 0 to 63" in problems
    assert "initial.dscp2prio.3: 8 must be an integer from 0 to 7" in problems


def test_switch_dscp_map_spines_and_adaptive_routing_reach_the_model(tmp_path: Path) -> None:
    """Issue 13: the switches' DSCP map, spine count and (RoCE) adaptive routing are expressible."""
    from fabtune.sim import observe
    from fabtune.sim.model.routing import roce_route_eff
    from fabtune.testbed.files import write_fabric

    spec = build_spec({"hosts": 2, "switch": {"dscp2prio": {26: 5}, "spines": 4}})
    assert (spec.switch.dscp2prio, spec.switch.spines, spec.switch.adaptive_routing) == (((26, 5),), 4, False)
    assert build_spec(json.loads(json.dumps(spec_to_doc(spec)))).switch == spec.switch
    write_fabric(spec, tmp_path)
    view = observe.fabric_view(tmp_path / "fabric")
    assert (view.switch.dscp2prio[26], view.switch.dscp2prio[46], view.switch.spines) == (5, 5, 4)
    fab = observe.fabric_config(view, ())
    ar = build_spec({"hosts": 2, "name": "ar", "switch": {"adaptive_routing": True}})
    write_fabric(ar, tmp_path / "ar")
    fab_ar = observe.fabric_config(observe.fabric_view(tmp_path / "ar" / "fabric"), ())
    assert roce_route_eff(fab_ar, 1) > roce_route_eff(fab, 1)
    with pytest.raises(ConfigError, match=r"switch\.adaptive_routing: True is the RoCE switches' own"):
        build_spec({"hosts": 2, "fabric": "ib", "switch": {"adaptive_routing": True}})
    with pytest.raises(ConfigError, match=r"switch\.spines: 0 must be an integer from 1 to 256"):
        build_spec({"hosts": 2, "switch": {"spines": 0}})


def test_a_host_whose_gid_table_has_only_rocev1_entries(tmp_path: Path) -> None:
    """Issue 13: a RoCEv1-only GID table; the model picks its v1 IPv4 GID and pays RoCEv1 headers."""
    from fabtune.sim import observe
    from fabtune.sim.model.transport import best_gid, resolve_gid, with_gid
    from fabtune.sim.node import NodeState, provision

    spec = build_spec({"hosts": 2, "overrides": {"h02": {"gid_layout": "v1-only"}}})
    assert build_spec(spec_to_doc(spec)).host("h02").gid_layout == "v1-only"
    configs = []
    for host in spec.hosts:
        root = tmp_path / host.name
        provision(root, layout.node_description(spec, host), host.initial)
        state = NodeState.under(root)
        configs.append(observe.nic_config(state, state.node.nics[0], 0))
    standard, v1_only = configs
    assert {g.version for g in standard.gids} == {"v1", "v2"}
    assert [(g.version, g.scope) for g in v1_only.gids] == [("v1", "link-local"), ("v1", "ipv4")]
    assert best_gid(v1_only) == 1 and best_gid(standard) == 3
    assert with_gid(v1_only, resolve_gid(v1_only, None)).roce_mode == 1


def test_a_job_larger_than_the_rack_runs_as_job_nodes_in_the_model(tmp_path: Path) -> None:
    """Issue 13: two real hosts, the collective as 64 nodes (two leaves: routing matters)."""
    import dataclasses

    from fabtune.sim import observe
    from fabtune.sim.model.calibration import nic, rack
    from fabtune.sim.model.collective import expected_busbw
    from fabtune.sim.tools import nccl_tests
    from fabtune.testbed.files import write_fabric

    spec = build_spec({"hosts": 2, "job_nodes": 64})
    assert build_spec(spec_to_doc(spec)).job_nodes == 64 and build_spec({"hosts": 2}).job_nodes == 0
    write_fabric(spec, tmp_path)
    view = observe.fabric_view(tmp_path / "fabric")
    assert (view.job_nodes, view.switch.leaves) == (64, 2)
    host = dataclasses.replace(rack(2, nic(), nics=2, gpus=2).hosts[0], name="h01")
    records = [{"host": name, "config": observe.to_json(dataclasses.replace(host, name=name))}
               for name in ("h01", "h02")]
    fabric, names = nccl_tests._fabric_of(records, 2, tmp_path / "fabric")
    assert len(fabric.hosts) == len(names) == 64 and names[:3] == ["h01", "h02", "h01+2"]
    two = observe.fabric_config(dataclasses.replace(view, job_nodes=0), fabric.hosts[:2])
    assert expected_busbw(fabric, "all_reduce", 2**30) < expected_busbw(two, "all_reduce", 2**30)
    with pytest.raises(ConfigError, match=r"job_nodes: 1 must be an integer from 2 to 4096"):
        build_spec({"hosts": 2, "job_nodes": 1})
