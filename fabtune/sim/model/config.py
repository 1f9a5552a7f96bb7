"""The model's input: frozen descriptions of NICs, hosts, switches, the SM and the traffic.

Nothing here does I/O; the testbed builds these from ``NodeState`` and the model only reads them.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

LinkLayer = Literal["Ethernet", "InfiniBand"]
Trust = Literal["pcp", "dscp"]
Distance = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]
GidVersion = Literal["v1", "v2"]
GidScope = Literal["link-local", "ipv4"]
FabricKind = Literal["roce", "ib"]
CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall"]

NO_PRIO: tuple[bool, ...] = (False,) * 8
DEFAULT_DSCP2PRIO: tuple[int, ...] = tuple(d >> 3 for d in range(64))


@dataclasses.dataclass(frozen=True)
class GidEntry:
    """One row of a port's GID table (``show_gids``).

    ``vlan`` is the 802.1Q VLAN id of the GID's netdev (``show_gids``' last column a VLAN device
    such as ``eth2.100``), None for the port's own netdev: a connection on a VLAN GID sends tagged
    frames (the kernel reads the VLAN id from the GID's netdev, ``rdma_read_gid_l2_fields``).
    """

    version: GidVersion
    scope: GidScope
    vlan: int | None = None


DEFAULT_GIDS: tuple[GidEntry, ...] = (
    GidEntry("v1", "link-local"),
    GidEntry("v2", "link-local"),
    GidEntry("v1", "ipv4"),
    GidEntry("v2", "ipv4"),
)


@dataclasses.dataclass(frozen=True)
class NicConfig:
    """One RDMA NIC port and the settings that shape its traffic.

    ``mtu`` is the netdev MTU on Ethernet and the IB MTU (256..4096) on InfiniBand.
    ``gpu_distance`` is the PCIe distance to the GPU that uses this NIC (``nvidia-smi topo -m``).
    ``vlan_pcp`` is set per connection by ``transport.with_gid`` from the GID the connection uses
    (None: untagged); ``egress_qos_map`` is the VLAN device's ``egress-qos-map`` (ip-link(8)), which
    rdma_cm connections use to turn the ToS into a PCP (``qos.tag_pcp``).
    """

    name: str = "mlx5_0"
    netdev: str = "eth2"
    link_layer: LinkLayer = "Ethernet"
    rate_gbps: float = 400.0
    mtu: int = 4200
    trust: Trust = "dscp"
    dscp2prio: tuple[int, ...] = DEFAULT_DSCP2PRIO
    pfc: tuple[bool, ...] = NO_PRIO
    prio_tc: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 7)
    ets: tuple[int, ...] = (12, 13, 12, 13, 12, 13, 12, 13)
    ecn_np: tuple[bool, ...] = NO_PRIO
    ecn_rp: tuple[bool, ...] = NO_PRIO
    cnp_dscp: int = 48
    cnp_prio: int = 6
    roce_tos: int = 0
    roce_mode: int = 2
    vlan_pcp: int | None = None  # the PCP of this port's frames on a connection (None: untagged)
    egress_qos_map: tuple[int, ...] = (0,) * 8  # the VLAN device's skb priority 0-7 -> PCP
    gids: tuple[GidEntry, ...] = DEFAULT_GIDS
    gid_index: int = 3
    gpu_distance: Distance = "PIX"
    gdr: bool = True


@dataclasses.dataclass(frozen=True)
class HostConfig:
    """One GPU node: its RDMA NICs, GPUs, NCCL environment and front-end interface."""

    name: str
    nics: tuple[NicConfig, ...]
    gpus: int = 8
    nccl_env: tuple[tuple[str, str], ...] = ()
    frontend_ifname: str = "eth0"
    frontend_gbps: float = 50.0

    def env(self, key: str) -> str | None:
        """Return the NCCL variable ``key`` or None when unset."""
        return dict(self.nccl_env).get(key)


@dataclasses.dataclass(frozen=True)
class SwitchConfig:
    """The (homogeneous) leaf/spine switches of every rail plane."""

    pfc: tuple[bool, ...] = NO_PRIO
    trust: Trust = "dscp"
    dscp2prio: tuple[int, ...] = DEFAULT_DSCP2PRIO
    ecn: tuple[bool, ...] = NO_PRIO
    nodes_per_leaf: int = 32
    leaves: int = 2
    spines: int = 16
    oversubscription: float = 1.0
    l3: bool = True
    adaptive_routing: bool = False


@dataclasses.dataclass(frozen=True)
class SmConfig:
    """The InfiniBand subnet manager (opensm / NVIDIA SM)."""

    routing_engine: str = "minhop"
    adaptive_routing: bool = False
    ar_sl_mask: int = 0xFFFF
    qos: bool = False
    lmc: int = 0
    flavor: str = "upstream"  # upstream opensm, or NVIDIA's SM ("mlnx": the ar_* engines)
    sl2vl: tuple[int, ...] = ()  # with qos: the VL of each SL 0-15 (15 drops the SL); () = not set


@dataclasses.dataclass(frozen=True)
class FabricConfig:
    """The whole rack: hosts, switches, subnet manager and the seed of its noise."""

    fabric: FabricKind
    hosts: tuple[HostConfig, ...]
    switch: SwitchConfig = SwitchConfig()
    sm: SmConfig = SmConfig()
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Flow:
    """One ``ib_write_bw`` client/server pair (host and NIC indexes into ``FabricConfig``).

    ``tclass`` is ``--tclass`` without rdma_cm and ``-T`` (ToS) with ``-R``; ``None`` means unset.
    ``gid_index`` is ``-x`` (None = perftest's automatic choice).
    """

    src_host: int
    dst_host: int
    src_nic: int = 0
    dst_nic: int = 0
    msg_size: int = 65536
    qps: int = 1
    tclass: int | None = None
    rdma_cm: bool = False
    gid_index: int | None = None
    use_cuda: bool = False
    sl: int = 0  # perftest -S (IB)
