"""Emulated perftest on VLAN-tagged RoCE: ``-S`` is the PCP (SL & 7) the frames carry, and under
PCP trust the NIC counts them in that priority (mlx5 ``rx_prioN_bytes``/``tx_prioN_bytes``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.sim.node import NodeState
from tests.unit.sim_bench.conftest import make_rack
from tests.unit.sim_bench.test_perftest_tool import tool, wait_banner

PCP3 = {"mtu": 4200, "trust": "pcp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0]}


@pytest.mark.parametrize(("vlan", "sl", "prio"), [(100, "3", 3), (100, "0", 0), (None, "3", 0)])
def test_sl_sets_the_priority_of_tagged_traffic(tmp_path: Path, vlan: int | None, sl: str, prio: int) -> None:
    make_rack(tmp_path, initial=PCP3, switch_trust="pcp", vlan=vlan)
    port = "19431"
    server = tool(tmp_path, "h02", "ib_write_bw", "-p", port, "-S", sl, "-D", "1", "--report_gbits")
    wait_banner(server)
    client = tool(tmp_path, "h01", "ib_write_bw", "-p", port, "-S", sl, "-D", "1", "--report_gbits",
                  "127.0.0.1")
    _, c_err = client.communicate(timeout=30)
    server.communicate(timeout=30)
    assert client.returncode == 0 and server.returncode == 0, c_err
    tx = NodeState.under(tmp_path / "h01").read_counters("mlx5_0")
    rx = NodeState.under(tmp_path / "h02").read_counters("mlx5_0")
    assert tx[f"tx_prio{prio}_bytes"] > 0 and rx[f"rx_prio{prio}_bytes"] > 0
    assert all(tx[f"tx_prio{p}_bytes"] == 0 for p in range(8) if p != prio)
