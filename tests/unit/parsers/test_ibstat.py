"""ibstat/ibstatus parsers: every ibstat fixture, values read off the samples by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import ibstat

Loader = Callable[[str], str]


def test_mlx4_ddr_two_ports(sample: Loader) -> None:
    stat = ibstat.parse(sample("ibstat__mlx4_ddr_two_ports_active_polling__archwiki.txt"))
    ca = stat.ca("mlx4_0")
    assert ca.ca_type == "MT25418"
    assert ca.num_ports == 2
    assert ca.firmware_version == "2.9.1000"
    assert ca.hardware_version == "a0"
    assert ca.node_guid == "0x0002c90300002f78"
    port1, port2 = ca.ports
    assert (port1.state, port1.physical_state, port1.rate_gbps) == ("Active", "LinkUp", 20.0)
    assert (port1.base_lid, port1.lmc, port1.sm_lid) == (3, 0, 3)
    assert port1.capability_mask == "0x0251086a"
    assert port1.active is True
    assert (port2.state, port2.physical_state, port2.rate) == ("Down", "Polling", "10")
    assert port2.port_guid == "0x0002c90300002f7a"
    assert port2.active is False
    assert stat.errors == ()


def test_mlx4_fdr_tabs_partial(sample: Loader) -> None:
    stat = ibstat.parse(sample("ibstat__mlx4_fdr_two_ports_tabs_partial__rdma-core-pr847.txt"))
    (ca,) = stat.cas
    assert ca.ca_type == "MT4099"
    assert ca.system_image_guid == "0xf4521403007be0e3"
    port1, port2 = ca.ports
    assert (port1.state, port1.physical_state, port1.base_lid, port1.sm_lid) == (
        "Down",
        "Disabled",
        38,
        13,
    )
    assert port2.rate_gbps == 56.0
    assert port2.state == "Active"
    assert port2.link_layer is None  # the copy stops after "Rate: 56"


def test_roce_cx7_ethernet_partial(sample: Loader) -> None:
    stat = ibstat.parse(
        sample("ibstat__roce_cx7_200g_ethernet_link_layer_partial__mooncake-issue1999.txt")
    )
    assert [ca.name for ca in stat.cas] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    mlx5_1 = stat.ca("mlx5_1")
    assert mlx5_1.node_guid == "0x58a2e10300dae627"
    assert mlx5_1.ports[0].link_layer == "Ethernet"
    assert mlx5_1.ports[0].base_lid == 0
    assert mlx5_1.ports[0].rate_gbps == 200.0
    mlx5_10 = stat.ca("mlx5_10")
    assert mlx5_10.ca_type == "MT4125"
    assert mlx5_10.firmware_version == "22.31.1014"
    assert mlx5_10.ports[0].physical_state == "Disabled"
    assert mlx5_10.ports[0].rate is None


def test_single_ca_ndr(sample: Loader) -> None:
    stat = ibstat.parse(sample("ibstat__single_ca_mlx5_5_ndr_ib_partial__nccl-issue1591.txt"))
    port = stat.ca("mlx5_5").ports[0]
    assert port.rate_gbps == 400.0
    assert (port.base_lid, port.sm_lid) == (987, 359)
    assert port.capability_mask == "0xa751e848"
    assert port.link_layer == "InfiniBand"
    assert stat.ca("mlx5_5").firmware_version == "28.41.1000"


def test_redacted_then_ibpanic(sample: Loader) -> None:
    stat = ibstat.parse(
        sample("ibstat__ib_hdr_tabs_redacted_then_ibpanic_error__gpud-pr752.txt")
    )
    ca = stat.ca("mlx5_7")
    assert ca.ca_type is None  # redacted as "..."
    assert ca.num_ports == 1
    assert ca.ports[0].rate_gbps == 200.0
    assert ca.ports[0].base_lid == 13305
    assert ca.ports[0].sm_lid == 1
    assert ca.ports[0].port_guid is None
    assert stat.errors == (
        "main: stat of IB device 'mlx5_8' failed: No such file or directory",
    )
    with pytest.raises(KeyError):
        stat.ca("mlx5_8")


def test_rate_with_suffix() -> None:
    stat = ibstat.parse("CA 'mlx4_0'\n\tPort 1:\n\t\tRate: 40 (FDR10)\n")
    assert stat.cas[0].ports[0].rate_gbps == 40.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no CA found"),
        ("\tCA type: MT4129\n", "before any"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tBase lid: many\n", "base_lid is not an integer"),
        ("CA 'mlx5_0'\n\tNumber of ports: two\n", "Number of ports is not an integer"),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        ibstat.parse(text)


IBSTATUS = """Infiniband device 'mlx5_0' port 1 status:
\tdefault gid:\t fe80:0000:0000:0000:9c63:c003:0055:48ae
\tbase lid:\t 0x3db
\tsm lid:\t\t 0x167
\tstate:\t\t 4: ACTIVE
\tphys state:\t 5: LinkUp
\trate:\t\t 400 Gb/sec (4X NDR)
\tlink_layer:\t InfiniBand

Infiniband device 'mlx5_1' port 1 status:
\tstate:\t\t 1: DOWN
\tphys state:\t 3: Disabled
"""


def test_ibstatus_format() -> None:
    first, second = ibstat.parse_ibstatus(IBSTATUS)
    assert (first.device, first.port) == ("mlx5_0", 1)
    assert (first.state_code, first.state) == (4, "ACTIVE")
    assert (first.phys_state_code, first.phys_state) == (5, "LinkUp")
    assert first.rate_gbps == 400.0
    assert first.base_lid == "0x3db"
    assert first.link_layer == "InfiniBand"
    assert second.state == "DOWN"
    assert second.rate is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no block found"),
        ("Fatal error:  device 'mlx5_9': sys files not found\n", "Fatal error"),
        ("garbage\n", "text before the first device block"),
    ],
)
def test_ibstatus_garbled(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        ibstat.parse_ibstatus(text)


def test_one_port_form_with_warnings_between() -> None:
    """``ibstat mlx5_0 1`` (ca_stat() + port_dump(alone) in infiniband-diags/ibstat.c); stray
    ``ibwarn:`` lines from stderr are not port attributes."""
    text = (
        "ibwarn: [77] ca_stat: CA: 'mlx5_9' has no port number 2 - max (1)\n"
        "CA: 'mlx5_0'\nPort 1:\nState: Active\nPhysical state: LinkUp\nRate: 400\nBase lid: 5\n"
        "LMC: 0\nSM lid: 1\nCapability mask: 0xa659e848\nPort GUID: 0x9c63c00300554000\n"
        "Link layer: InfiniBand\n"
    )
    (ca,) = ibstat.parse(text).cas
    (port,) = ca.ports
    assert (ca.name, port.port, port.state) == ("mlx5_0", 1, "Active")
    assert (port.rate_gbps, port.base_lid) == (400.0, 5)
    assert port.link_layer == "InfiniBand"
