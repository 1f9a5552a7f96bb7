"""Fixtures: a provisioned 8-GPU/8-NIC RoCE node and a 2-NIC InfiniBand node in tmp dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabtune.sim.node import NodeState, provision
from tests.conftest import fixture_text


def fixture_lines(name: str) -> list[str]:
    """A fixture's lines without its ``# source:`` line (skips when ../shared is absent)."""
    return fixture_text(name).splitlines()


def roce_node() -> dict[str, Any]:
    """A DGX-H100-like RoCE node (the sglang fixture's topology)."""
    gpus = [{"index": g, "model": "NVIDIA H100 80GB HBM3", "bus_id": f"0000:{0x18 + g:02x}:00.0",
             "numa": g // 4, "pcie_switch": g} for g in range(8)]
    nics = [{"dev": f"mlx5_{n}", "netdev": f"ens{n + 1}np0", "link_layer": "Ethernet",
             "rate_gbps": 400, "fw": "28.39.1002", "bus_id": f"0000:{0x17 + n:02x}:00.0",
             "numa": n // 4, "pcie_switch": n, "mac": f"02:00:0a:4e:01:{n:02x}",
             "ipv4": f"10.78.{n + 1}.11", "prefix": 24} for n in range(8)]
    return {"hostname": "h01", "fabric": "roce", "sockets": 2, "cpus_per_socket": 48,
            "gpus": gpus, "nvlink": "NV18", "nics": nics}


def ib_node() -> dict[str, Any]:
    """A small InfiniBand node."""
    node = roce_node()
    node["fabric"] = "ib"
    node["gpus"] = node["gpus"][:2]
    node["nics"] = [{"dev": f"mlx5_{n}", "netdev": f"ib{n}", "link_layer": "InfiniBand",
                     "rate_gbps": 400, "fw": "28.41.1000", "bus_id": f"0000:{0x17 + n:02x}:00.0",
                     "numa": 0, "pcie_switch": n, "mac": f"02:00:0a:4f:01:{n:02x}",
                     "node_guid": f"0x9c63c00300554{n:03x}", "lid": 5 + n, "sm_lid": 1}
                    for n in range(2)]
    return node


@pytest.fixture
def roce(tmp_path: Path) -> NodeState:
    provision(tmp_path, roce_node(), {"mtu": 4200})
    return NodeState.under(tmp_path)


@pytest.fixture
def ib(tmp_path: Path) -> NodeState:
    provision(tmp_path, ib_node(), {})
    return NodeState.under(tmp_path)
