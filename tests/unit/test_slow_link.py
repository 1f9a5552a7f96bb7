"""A port that trained below the rack's speed (``overrides.HOST.link_speed``): the spec, what the
emulated tools show, the model's rates through the port, and the product naming it (check, pairs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabtune.errors import ConfigError
from fabtune.perf import checks
from fabtune.perf.pairs import PairResult, slow_pairs
from fabtune.perf.parsers.ibstat import parse as parse_ibstat
from fabtune.sim import observe
from fabtune.sim.model import expected_busbw, p2p
from fabtune.sim.model.config import FabricConfig, Flow, SwitchConfig
from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import ethtool, ibstat
from fabtune.testbed import layout
from fabtune.testbed.spec import TestbedSpec, build_spec, spec_to_doc

SLOW = {"h02": {"link_speed": {1: 200}}}
RACK = {"name": "sp", "hosts": 2, "nics_per_host": 2, "gpus_per_host": 2, "overrides": SLOW}


def nodes(spec: TestbedSpec, base: Path) -> dict[str, NodeState]:
    """Each host of ``spec`` provisioned under ``base/NAME`` as the testbed builds it."""
    out = {}
    for host in spec.hosts:
        provision(base / host.name, layout.node_description(spec, host), host.initial)
        out[host.name] = NodeState.under(base / host.name)
    return out


def tool(main: object, argv: list[str], state: NodeState, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv, state=state) == 0  # type: ignore[operator]
    return capsys.readouterr().out


# ----------------------------------------------------------------------------------- spec


@pytest.mark.parametrize("key", [1, "1", "mlx5_1", "enp41s0np0"])
def test_link_speed_names_a_nic_by_index_device_or_netdev(key: object) -> None:
    spec = build_spec({**RACK, "overrides": {"h02": {"link_speed": {key: 200}}}})
    assert spec.host("h02").link_speed == ((1, 200),) and spec.host("h01").link_speed == ()
    assert [spec.host("h02").speed_of(r, spec.rate_gbps) for r in (0, 1)] == [400, 200]
    assert build_spec(spec_to_doc(spec)) == spec  # state.json round trip


@pytest.mark.parametrize(
    ("speeds", "problem"),
    [
        ({1: 300}, r"overrides\.h02\.link_speed\.1: 300 must be a speed the port supports, in Gb/s: "
                   r"one of 25, 50, 100, 200, 400 \(at most the rack's rate_gbps 400\)"),
        ({1: 800}, r"overrides\.h02\.link_speed\.1: 800 must be a speed the port supports"),
        ({1: "200"}, r"overrides\.h02\.link_speed\.1: '200' must be a speed"),
        ({2: 200}, r"overrides\.h02\.link_speed key: 2 must name one of the host's 2 NICs"),
        ({"eth9": 200}, r"overrides\.h02\.link_speed key: 'eth9' must name one of the host's 2 NICs"),
        ([200], r"overrides\.h02\.link_speed: \[200\] must be a mapping of NIC"),
    ],
)
def test_bad_link_speed_is_one_error_naming_field_and_value(speeds: object, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        build_spec({**RACK, "overrides": {"h02": {"link_speed": speeds}}})
    assert len(caught.value.problems) == 1


def test_a_slower_rack_supports_only_its_own_speeds_and_below() -> None:
    with pytest.raises(ConfigError, match=r"one of 25, 50, 100 \(at most the rack's rate_gbps 100\)"):
        build_spec({**RACK, "rate_gbps": 100, "overrides": {"h02": {"link_speed": {0: 200}}}})


# ------------------------------------------------------------------------- emulated tools


def test_every_tool_shows_the_port_at_its_trained_speed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = build_spec(RACK)
    h02 = nodes(spec, tmp_path)["h02"]
    slow, fast = layout.nic_netdev(spec, 1), layout.nic_netdev(spec, 0)
    assert "\tSpeed: 200000Mb/s" in tool(ethtool.main, [slow], h02, capsys).splitlines()
    assert "\tSpeed: 400000Mb/s" in tool(ethtool.main, [fast], h02, capsys).splitlines()
    text = tool(ibstat.main, [], h02, capsys)
    assert [p.rate for ca in parse_ibstat(text).cas for p in ca.ports] == ["400", "200"]
    assert "\t\tRate: 200" in text.splitlines()
    rate = tmp_path / "h02" / "sys" / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "rate"
    assert rate.read_text() == "200 Gb/sec (4X HDR)\n"
    assert "\trate:\t\t 200 Gb/sec (4X HDR)" in tool(ibstat.ibstatus_main, ["mlx5_1"], h02, capsys)


# ----------------------------------------------------------------------------------- model


def fabric(spec: TestbedSpec, base: Path) -> FabricConfig:
    hosts = tuple(observe.host_config(state) for state in nodes(spec, base).values())
    return FabricConfig(fabric="roce", hosts=hosts, switch=SwitchConfig())


def test_the_model_carries_every_flow_through_the_port_at_its_speed(tmp_path: Path) -> None:
    slow = fabric(build_spec(RACK), tmp_path / "slow")
    even = fabric(build_spec({**RACK, "overrides": {}}), tmp_path / "even")
    assert [n.rate_gbps for n in slow.hosts[1].nics] == [400.0, 200.0]
    flows = [Flow(0, 1, rail, rail, msg_size=1 << 20, qps=8) for rail in (0, 1)]
    rail0, rail1 = (r.goodput_gbps for r in p2p(slow, flows, noisy=False).results)
    assert rail1 < 0.55 * rail0 and rail1 > 0.45 * rail0  # the pair through the 200 G port
    back = p2p(slow, [Flow(1, 0, 1, 1, msg_size=1 << 20, qps=8)], noisy=False).results[0].goodput_gbps
    assert back == pytest.approx(rail1)  # the slow port bounds the pair whichever end it is
    ratio = expected_busbw(slow, "all_reduce", 1 << 33) / expected_busbw(even, "all_reduce", 1 << 33)
    assert ratio < 0.6  # the ring through that NIC runs at its rate


# ----------------------------------------------------------------------------- the check


def test_check_names_the_port_below_the_rack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = build_spec(RACK)
    stats = {name: parse_ibstat(tool(ibstat.main, [], state, capsys))
             for name, state in nodes(spec, tmp_path).items()}
    results = checks.links(stats, {})
    assert [(r.check, r.host, r.verdict) for r in results] == [("link", "h02", "fail")]
    assert results[0].summary == (
        "mlx5_1 port 1 trained at 200 Gb/s, below the rack's 400 Gb/s (cable, transceiver or lanes)")
    assert results[0].evidence == "CA 'mlx5_1' Port 1: Rate: 200"


def test_a_tie_goes_to_the_higher_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two hosts of one NIC each, one port slow: the slow one is named, not the good one."""
    spec = build_spec({**RACK, "nics_per_host": 1, "overrides": {"h01": {"link_speed": {0: 100}}}})
    stats = {name: parse_ibstat(tool(ibstat.main, [], state, capsys))
             for name, state in nodes(spec, tmp_path).items()}
    assert [(r.host, r.summary.split(" trained")[0]) for r in checks.links(stats, {})] == [
        ("h01", "mlx5_0 port 1")]


# ------------------------------------------------------------------------- slow pairs


def test_bench_slow_pairs_name_both_ends_the_ratio_and_the_ceiling() -> None:
    results = [PairResult("h02", "h01", 0, "mlx5_0", 380.0, 392.1, client_device="mlx5_0"),
               PairResult("h02", "h01", 1, "mlx5_1", 190.0, 196.0, client_device="mlx5_1")]
    [slow] = slow_pairs(results)
    assert (slow.name, slow.ratio) == ("h01 mlx5_1 -> h02 mlx5_1", 0.5)
    assert slow.describe() == (
        "h01 mlx5_1 -> h02 mlx5_1: 190.0 Gb/s, x0.50 of the median of the other pairs (380.0 Gb/s); "
        "its link's ceiling is 196.0 Gb/s against 392.1: a port below the rack's speed")
    even = [PairResult("h02", "h01", r, f"mlx5_{r}", 380.0 + r, 392.1, client_device=f"mlx5_{r}")
            for r in (0, 1)]
    assert slow_pairs(even) == []
    path = [*even, PairResult("h04", "h03", 0, "mlx5_0", 100.0, 392.1, "timeout", client_device="mlx5_0")]
    assert re.fullmatch(r"h03 mlx5_0 -> h04 mlx5_0: 100\.0 Gb/s, x0\.26 of the median of the other "
                        r"pairs \(380\.5 Gb/s\) \(timeout\)", slow_pairs(path)[0].describe())
