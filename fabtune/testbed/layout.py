"""Names, addresses and paths of a testbed: derived from the spec, never stored twice."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.paths import fabtune_home, under_home
from fabtune.testbed.spec import HostSpec, TestbedSpec, check_testbed_name, pci_bus, rail_netdev

__all__ = ["fabtune_home", "pci_bus", "testbed_dir"]

GPU_MODEL = "NVIDIA H100 80GB HBM3"
CPUS_PER_SOCKET = 48
HOST_OFFSET = 10  # host N gets .N+10 on every subnet; .1 is the controller


def testbed_dir(name: str) -> Path:
    """The directory of testbed ``name`` (the name checked, the path kept under the home).

    Raises:
        ConfigError: when ``name`` is not a testbed name or its directory leads outside the home.
    """
    return under_home("testbeds", check_testbed_name(name))


@dataclass(frozen=True)
class Names:
    """Kernel object names of one testbed (interface names stay within 15 characters)."""

    tb: str

    @property
    def prefix(self) -> str:
        return f"ft{self.tb}"

    def netns(self, host: str) -> str:
        return f"ft-{self.tb}-{host}"

    @property
    def netns_prefix(self) -> str:
        return f"ft-{self.tb}-"

    def owns(self, link: str) -> bool:
        """Whether ``link`` is one of this testbed's bridges or veths (and not one of a testbed
        whose name merely starts like this one's: ``itcc`` must not claim ``itcc2``'s links)."""
        return re.fullmatch(rf"{re.escape(self.prefix)}([0-9]{{2}})?(m|r[0-9]+)", link) is not None

    @property
    def mgmt_bridge(self) -> str:
        return f"{self.prefix}m"

    def rail_bridge(self, rail: int) -> str:
        return f"{self.prefix}r{rail}"

    def mgmt_veth(self, host: HostSpec) -> str:
        return f"{self.prefix}{host.index:02d}m"

    def rail_veth(self, host: HostSpec, rail: int) -> str:
        return f"{self.prefix}{host.index:02d}r{rail}"


def nic_netdev(spec: TestbedSpec, rail: int) -> str:
    """The netdev name of NIC ``rail``, as udev names it on a real node."""
    return rail_netdev(spec.fabric, rail)


def mgmt_ip(spec: TestbedSpec, host: HostSpec) -> str:
    return str(spec.mgmt_network.network_address + HOST_OFFSET + host.index)


def rail_ip(spec: TestbedSpec, host: HostSpec, rail: int) -> str:
    return str(spec.rail_network(rail).network_address + HOST_OFFSET + host.index)


def controller_ip(spec: TestbedSpec) -> str:
    return str(spec.mgmt_network.network_address + 1)


def mac(host: HostSpec, rail: int) -> str:
    return f"02:fa:b7:{host.index:02x}:{rail:02x}:01"


def _nic(spec: TestbedSpec, host: HostSpec, rail: int) -> dict[str, Any]:
    bus = pci_bus("nic", rail)
    guid = f"0x{0xB83FD20300000000 + host.index * 0x100 + rail:016x}"
    numa = host.nic_numa[rail]
    extra: dict[str, Any] = {"gid_layout": host.gid_layout} if host.gid_layout != "standard" else {}
    if host.vlan is not None:
        extra.update(vlan=host.vlan, egress_qos_map=list(host.egress_qos_map))
    return {
        "dev": f"mlx5_{rail}",
        "netdev": nic_netdev(spec, rail),
        "link_layer": "InfiniBand" if spec.fabric == "ib" else "Ethernet",
        # the speed the port trained at: the rack's, or lower where the spec says (link_speed)
        "rate_gbps": host.speed_of(rail, spec.rate_gbps),
        "fw": spec.firmware,
        "bus_id": f"0000:{bus:02x}:00.0",
        "numa": numa,
        "pcie_switch": rail if numa == _home_numa(host, rail) else 100 + rail,
        "mac": mac(host, rail),
        "ipv4": rail_ip(spec, host, rail),
        "prefix": spec.rail_network(rail).prefixlen,
        "node_guid": guid,
        "lid": host.index * 16 + rail + 1 if spec.fabric == "ib" else 0,
        "sm_lid": 1 if spec.fabric == "ib" else 0,
        **extra,
    }


def _home_numa(host: HostSpec, rail: int) -> int:
    """The socket NIC ``rail`` sits on when it is placed as designed (beside GPU ``rail``)."""
    return host.gpu_numa[rail % host.gpus]


def node_description(spec: TestbedSpec, host: HostSpec) -> dict[str, Any]:
    """The emulated node's hardware (``node.json``), as :mod:`fabtune.sim.node` reads it."""
    gpus = [
        {
            "index": g,
            "model": GPU_MODEL,
            "bus_id": f"0000:{pci_bus('gpu', g):02x}:00.0",
            "numa": host.gpu_numa[g],
            "pcie_switch": g,
        }
        for g in range(host.gpus)
    ]
    return {
        "hostname": host.name,
        "fabric": spec.fabric,
        "sockets": host.sockets,
        "cpus_per_socket": CPUS_PER_SOCKET,
        "gpus": gpus,
        "nvlink": "NV18" if host.gpus > 1 else None,
        "nics": [_nic(spec, host, r) for r in range(spec.nics_per_host)],
        "tools": {k: v for k, v in host.tools.items() if v != "none"},
    }
