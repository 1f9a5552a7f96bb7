"""The product's link physics (fabtune.linkrate) is the fabric model's: a pair judged against its
ceiling is judged against what the emulated link can deliver."""

from __future__ import annotations

import itertools

import pytest

from fabtune import linkrate
from fabtune.perf.fabric import Rail
from fabtune.perf.pairs import rail_ceiling
from fabtune.sim.model import NicConfig, active_mtu, ceiling_gbps


def test_the_model_uses_the_products_link_physics() -> None:
    for mtu, rate, mode, pcp in itertools.product((1000, 1500, 2200, 4200, 9000), (100.0, 400.0), (1, 2),
                                                   (None, 3)):
        nic = NicConfig(mtu=mtu, rate_gbps=rate, roce_mode=mode, vlan_pcp=pcp)
        assert ceiling_gbps(nic) == linkrate.ceiling_gbps("Ethernet", rate, mtu, roce_mode=mode,
                                                          vlan=pcp is not None)
        assert active_mtu(nic) == linkrate.active_mtu("Ethernet", mtu)
    ib = NicConfig(link_layer="InfiniBand", mtu=4096, rate_gbps=200.0)
    assert ceiling_gbps(ib) == linkrate.ceiling_gbps("InfiniBand", 200.0, 4096)


@pytest.mark.parametrize(("link_layer", "mtu", "expected"), [
    ("Ethernet", 4200, 4096 / (4096 + 82) * 400),  # RoCEv2, no VLAN tag
    ("Ethernet", 1500, 1024 / (1024 + 82) * 400),
    ("Ethernet", 300, 0.0),  # no RDMA MTU fits
    ("InfiniBand", 2044, 4096 / (4096 + 26) * 400 * 0.995),  # IB: the rail's netdev MTU is not the IB MTU
])
def test_a_rails_acceptance_ceiling(link_layer: str, mtu: int, expected: float) -> None:
    rail = Rail("mlx5_0", "eth2", "10.0.0.1", mtu, 400.0, link_layer, 3)
    assert rail_ceiling(rail) == pytest.approx(expected)
