"""A port that trained below the rack's speed (``overrides.HOST.link_speed``): the spec, what the
emulated tools show, the model's rates through the port, and the product naming it (check, pairs)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fabtune.cli import cli
from fabtune.errors import ConfigError
from fabtune.perf import checks, pairs
from fabtune.perf.pairs import PairResult, slow_pairs, slow_ports, unexplained
from fabtune.perf.parsers.ibstat import parse as parse_ibstat
from fabtune.perf.schedule import Pair, covering_rounds, pair_rounds, rail_pairs
from fabtune.sim import observe
from fabtune.sim.model import expected_busbw, p2p
from fabtune.sim.model.config import FabricConfig, Flow, SwitchConfig
from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import ethtool, ibstat
from fabtune.testbed import layout
from fabtune.testbed.spec import TestbedSpec, build_spec, spec_to_doc
from fabtune.tune import pairs as tune_pairs
from fabtune.tune.pairs import PairRound
from tests.unit.test_pair_schedule_users import _info, _views, bench

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


# --------------------------------------------------------------------------- slow ports


def matrix(rounds: Sequence[Sequence[Pair]], slow: Sequence[tuple[str, int]] = (),
           bad: Sequence[tuple[str, str]] = ()) -> list[PairResult]:
    """The pair runs of ``rounds`` as ``run_rounds`` returns them: 380 Gb/s (a little spread) under a
    392.1 ceiling, 190 under 196.0 through a port of ``slow`` (host, rail: trained at half the
    rack's speed), and 150 on a pair of hosts in ``bad`` (a fault on that path alone)."""
    out = []
    for index, p in enumerate(r for rnd in rounds for r in rnd):
        device = f"mlx5_{p.rail}"
        half = (p.server, p.rail) in slow or (p.client, p.rail) in slow
        path = (p.client, p.server) in bad or (p.server, p.client) in bad
        gbps = 190.0 if half else 150.0 if path and p.rail == 0 else 380.0 + index % 3
        out.append(PairResult(p.server, p.client, p.rail, device, gbps, 196.0 if half else 392.1,
                              client_device=device))
    return out


FOUR = ["h01", "h02", "h03", "h04"]


def test_one_slow_port_in_a_4_host_matrix_is_named_with_its_pairs_under_it() -> None:
    results = matrix(pair_rounds(FOUR, 2), slow=[("h02", 1)])
    slow = slow_pairs(results)
    [port] = slow_ports(results, slow)
    assert (port.name, port.count, len(port.pairs)) == ("h02 mlx5_1", 3, 3)
    assert port.describe() == (
        "port h02 mlx5_1 is slow: 3 of its 3 pairs under x0.80 of the median of the other pairs; "
        "its pairs' median 190.0 Gb/s against 381.0 for the pairs not through it (x0.50); "
        "its link's ceiling is 196.0 Gb/s against 392.1: a port below the rack's speed")
    assert [p.name for p in port.pairs] == [
        "h02 mlx5_1 -> h01 mlx5_1", "h02 mlx5_1 -> h04 mlx5_1", "h03 mlx5_1 -> h02 mlx5_1"]
    assert port.pairs == tuple(slow) and unexplained(slow, [port]) == []
    assert port.to_json()["pairs"] == [p.describe() for p in slow]


def test_two_slow_pairs_with_no_common_end_name_no_port() -> None:
    results = matrix(pair_rounds(FOUR, 1), bad=[("h01", "h02"), ("h03", "h04")])
    slow = slow_pairs(results)
    assert len(slow) == 2 and slow_ports(results, slow) == []
    assert unexplained(slow, []) == slow


def test_two_slow_ports_are_named_and_not_the_ends_they_share() -> None:
    """h02 and h03 both slow on rail 0: h01 and h04 have 2 slow pairs of 3, all explained."""
    results = matrix(pair_rounds(FOUR, 2), slow=[("h02", 0), ("h03", 0)])
    slow = slow_pairs(results)
    assert [(p.name, p.count, len(p.pairs)) for p in slow_ports(results, slow)] == [
        ("h02 mlx5_0", 3, 3), ("h03 mlx5_0", 3, 3)]


def test_a_port_that_is_only_one_pair_is_not_named() -> None:
    """2 hosts (the spslow rack): the slow pair has two ends and nothing says which one is slow."""
    results = matrix(pair_rounds(["h01", "h02"], 2), slow=[("h02", 1)])
    slow = slow_pairs(results)
    assert len(slow) == 1 and slow_ports(results, slow) == []


def test_a_slow_port_on_an_odd_rack_round_is_named_in_the_loop() -> None:
    """5 hosts: the covering round pairs h05 twice (h02 in the first round, idle h01 in the next)."""
    runs = matrix(rail_pairs(covering_rounds([f"h{i:02d}" for i in range(1, 6)]), 2), slow=[("h05", 1)])
    found = PairRound({f"{r.client}->{r.server} {r.device}": r.gbps for r in runs}, results=tuple(runs))
    [port] = tune_pairs.slow_ports(found)
    assert port["port"] == "h05 mlx5_1" and port["host"] == "h05"
    assert port["summary"].startswith("port h05 mlx5_1 is slow: 2 of its 2 pairs under x0.80 of the median")
    assert port["summary"].endswith("its link's ceiling is 196.0 Gb/s against 392.1: a port below the rack's "
                                    "speed")
    assert port["pairs"] == tune_pairs.slow_pairs(found)
    assert [line.split(":")[0] for line in port["pairs"]] == [
        "h05 mlx5_1 -> h01 mlx5_1", "h05 mlx5_1 -> h02 mlx5_1"]


def test_bench_pairs_prints_the_port_then_its_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = _views(4)
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all: {}\n")

    def measured(_inv: Path, rounds: Sequence[Sequence[Pair]], *_a: Any, **_k: Any) -> list[list[Any]]:
        return [matrix([rnd], slow=[("h02", 1)]) for rnd in rounds]

    monkeypatch.setattr(bench, "read_hosts", lambda _inv: views)
    monkeypatch.setattr(bench, "read_inventory", lambda _inv: _info(tmp_path, sorted(views)))
    monkeypatch.setattr(pairs, "run_rounds", measured)
    done = CliRunner().invoke(cli, ["bench", "pairs", "-i", str(inventory), "-o", str(tmp_path / "p.json")])
    assert done.exit_code == 0, done.output
    lines = [line for line in done.output.splitlines() if "slow" in line]
    assert lines[0].startswith("port h02 mlx5_1 is slow: 3 of its 3 pairs under x0.80")
    assert [line.split(":")[0] for line in lines[1:]] == ["  slow pair"] * 3
    written = json.loads((tmp_path / "p.json").read_text())
    assert [p["port"] for p in written["slow_ports"]] == ["h02 mlx5_1"]
    assert written["slow_ports"][0]["pairs"] == written["slow_pairs"]
