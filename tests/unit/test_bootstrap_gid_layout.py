"""The testbed's ``gid_layout`` option: a host whose RoCEv2 IPv4 GID is not at index 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.errors import ConfigError
from fabtune.perf.checks import gid_index
from fabtune.perf.parsers import show_gids
from fabtune.sim.node import Layout, NodeDescription, NodeState, provision
from fabtune.sim.tools import show_gids as show_gids_tool
from fabtune.testbed import layout
from fabtune.testbed.spec import build_spec, spec_to_doc


def test_spec_accepts_and_round_trips_gid_layout() -> None:
    spec = build_spec({"hosts": 2, "overrides": {"h02": {"gid_layout": "ipv6-first"}}})
    assert [h.gid_layout for h in spec.hosts] == ["standard", "ipv6-first"]
    assert build_spec(spec_to_doc(spec)) == spec
    assert "gid_layout" not in spec_to_doc(build_spec({"hosts": 2}))["overrides"]["h01"]
    with pytest.raises(ConfigError) as err:
        build_spec({"hosts": 2, "overrides": {"h01": {"gid_layout": "v3"}}})
    assert "overrides.h01.gid_layout: 'v3' must be one of standard, ipv6-first, v1-only" in err.value.problems


def _state(tmp_path: Path, layout_name: str) -> NodeState:
    overrides = {"h01": {"gid_layout": layout_name}} if layout_name != "standard" else {}
    spec = build_spec({"hosts": 2, "nics_per_host": 1, "overrides": overrides})
    desc = layout.node_description(spec, spec.host("h01"))
    nic = NodeDescription.from_dict(desc).nics[0]
    assert nic.gid_layout == layout_name
    assert ("gid_layout" in nic.to_dict()) == (layout_name != "standard")
    provision(tmp_path, desc)
    return NodeState(Layout.under(tmp_path))


def _table(state: NodeState, capsys: pytest.CaptureFixture[str]) -> show_gids.ShowGids:
    assert show_gids_tool.main([], state) == 0
    return show_gids.parse(capsys.readouterr().out)


def test_ipv6_first_moves_the_rocev2_ipv4_gid_to_index_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    standard = _table(_state(tmp_path / "a", "standard"), capsys)
    moved = _table(_state(tmp_path / "b", "ipv6-first"), capsys)
    assert [(e.index, e.version, e.ipv4 is not None) for e in standard.entries] == [
        (0, "v1", False),
        (1, "v2", False),
        (2, "v1", True),
        (3, "v2", True),
    ]
    assert [(e.index, e.version, e.ipv4 is not None) for e in moved.entries] == [
        (0, "v1", False),
        (1, "v2", False),
        (2, "v1", False),
        (3, "v2", False),
        (4, "v1", True),
        (5, "v2", True),
    ]
    assert moved.entries[2].gid.startswith("fd00:")
    results = gid_index({"h01": standard, "h02": standard, "h03": moved}, ["mlx5_0"])
    assert [(r.host, r.verdict) for r in results] == [("h03", "fail")]
    assert "index 5, the rack uses 3" in results[0].summary
