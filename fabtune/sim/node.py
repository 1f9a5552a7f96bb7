"""The emulated node: its static hardware description and its NIC state, read and written on disk.

One tree per host (``provision`` creates it); three places, each with a fixed in-host path:

=====================  ==========================  ==============================================
under ``root``         inside the host             what
=====================  ==========================  ==============================================
``sys/class``          ``/sys/class``              ``infiniband/DEV/...`` and ``net/IF/{ecn,qos}``
``configfs``           ``/sys/kernel/config``      ``rdma_cm/DEV/ports/1/default_roce_{tos,mode}``
``emu``                ``/var/lib/fabtune-emu``    ``node.json``, ``dcb/IF.json``, ``ethtool/IF.json``
=====================  ==========================  ==============================================

Each setting has exactly one home, the place a real mlx5 host keeps it:

* sysfs (MLNX_OFED driver files): priority trust (``qos/trust``), the DSCP-to-priority map
  (``qos/dscp2prio``), receive buffers (``qos/buffer_size``, ``qos/prio2buffer``), ECN per priority
  (``ecn/roce_{np,rp}/enable/N``), CNP DSCP and 802.1p priority, and the RDMA counters.
* configfs: the rdma_cm default RoCE ToS and mode.
* ``emu/dcb/IF.json`` (what the kernel keeps behind DCB netlink): DCBX mode, PFC enable and delay,
  ETS, the non-DSCP APP entries, per-TC max rate.
* ``emu/ethtool/IF.json``: the ethtool (``-S``) statistics that live in no sysfs file.

The DSCP APP entries (``emu/dcb/IF.json`` ``dscp_app``) follow the mlx5 driver
(drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c, ``mlx5e_dcbnl_ieee_setapp``/``_delapp``):
adding the first DSCP entry switches trust to ``dscp``, each entry sets the firmware DSCP map,
deleting one maps its DSCP back to priority 0 (refused with ENOENT unless its priority is the
map's) and deleting the last switches trust back to ``pcp``. Trust set directly (sysfs, mlnx_qos)
fills the entries from the whole map or empties them, as the driver's ``mlx5e_dcbnl_dscp_app``
INIT/DELETE does. mlx5 implements no ``dcbnl_getapptrust``/``dcbnl_setapptrust``, so there is
no APP trust order to read or set (``dcb apptrust`` fails on it, whatever the iproute2 version).

Text formats of the driver files written here:

* ``qos/trust``: ``pcp`` or ``dscp``.
* ``qos/dscp2prio``: ``dscp2prio:`` then one ``DSCP PRIO`` line per DSCP 0..63.
* ``qos/prio2buffer``: ``priority buffer`` then one ``PRIO BUF`` line per priority.
* ``qos/buffer_size``: ``Port buffer size = TOTAL``, ``Spare buffer size = N``,
  ``buffer size xoff_threshold xon_threshold``, then ``BUF SIZE XOFF XON`` per buffer.
  (Readers also accept what ``mlnx_qos`` writes: ``a,b,c,...,`` and ``DSCP PRIO``.)

Every write goes to a temporary file renamed over the target (atomic), and read-modify-write of
a JSON file holds an ``flock`` on ``emu/.lock``, so concurrent tool runs never corrupt state.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The rack's shared fabric directory, the same in every host (the flows, the switch, the SM and the
# rdma_cm registry the emulated tools share): here, not in observe, so a tool that only needs the
# path does not load the fabric model (numpy) for it.
FABRIC_DIR = Path("/var/lib/fabtune-fabric")
PRIORITIES = 8
DSCP_COUNT = 64
GID_TABLE_LEN = 16
"""GID entries per port (real mlx5 has 256; the unused ones are all-zero and skipped by tools)."""

DEFAULT_TOOLS: Mapping[str, str] = {"iproute2": "6.1.0", "mlnx-tools": "25.07"}
"""A host's packages unless its description says otherwise: Debian 12's iproute2 (6.1.0) and
NVIDIA's mlnx-tools (the release the emulated ``mlnx_qos`` follows)."""

KERNEL_NET_ATTRS: tuple[str, ...] = (
    "addr_assign_type", "addr_len", "address", "broadcast", "carrier", "carrier_changes",
    "dev_id", "dev_port", "dormant", "duplex", "flags", "ifalias", "ifindex", "iflink",
    "link_mode", "mtu", "name_assign_type", "operstate", "speed", "statistics",
    "tx_queue_len", "type",
)
"""``/sys/class/net/IF`` entries the testbed links to the kernel's real files (not created here)."""

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
GID_TYPE_V1 = "IB/RoCE v1"
GID_TYPE_V2 = "RoCE v2"
ROCE_MODES = {1: GID_TYPE_V1, 2: GID_TYPE_V2}
TSA_NAMES = ("strict", "cbs", "ets", "vendor")
APP_SELECTORS = ("ethtype", "default", "stream-port", "dgram-port", "port", "pcp")

DCB_CAP_DCBX_HOST = 0x1
DCB_CAP_DCBX_LLD_MANAGED = 0x2
DCB_CAP_DCBX_VER_CEE = 0x4
DCB_CAP_DCBX_VER_IEEE = 0x8
DCB_CAP_DCBX_STATIC = 0x10

DEFAULT_TOTAL_BUFFER = 262016
DEFAULT_PRIO_TC = (1, 0, 2, 3, 4, 5, 6, 7)
"""mlx5's default UP-to-TC map (priority 0 on TC1, priority 1 on TC0)."""
DEFAULT_TC_BW = (12, 12, 12, 12, 13, 13, 13, 13)

HW_COUNTERS = (
    "duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err",
    "np_cnp_sent", "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence",
    "packet_seq_err", "req_cqe_error", "req_remote_access_errors", "req_remote_invalid_request",
    "resp_cqe_error", "resp_local_length_error", "resp_remote_access_errors",
    "rnr_nak_retry_err", "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart",
    "roce_slow_restart_cnps", "roce_slow_restart_trans", "rp_cnp_handled", "rp_cnp_ignored",
    "rx_atomic_requests", "rx_icrc_encapsulated", "rx_read_requests", "rx_write_requests",
)
PORT_COUNTERS = (
    "VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
    "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_packets",
    "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets",
)
_ETHTOOL_GLOBAL = (
    "rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "rx_csum_unnecessary", "rx_out_of_buffer",
    "tx_queue_dropped", "rx_vport_rdma_unicast_packets", "rx_vport_rdma_unicast_bytes",
    "tx_vport_rdma_unicast_packets", "tx_vport_rdma_unicast_bytes", "rx_packets_phy",
    "rx_bytes_phy", "tx_packets_phy", "tx_bytes_phy", "rx_discards_phy", "tx_discards_phy",
    "rx_crc_errors_phy", "rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_out_of_buffer_phy",
)
_ETHTOOL_PER_PRIO = (
    "rx_prio{p}_bytes", "rx_prio{p}_packets", "rx_prio{p}_discards", "tx_prio{p}_bytes",
    "tx_prio{p}_packets", "rx_prio{p}_pause", "rx_prio{p}_pause_duration", "tx_prio{p}_pause",
    "tx_prio{p}_pause_duration", "rx_prio{p}_pause_transition",
)
ETHTOOL_COUNTERS: tuple[str, ...] = _ETHTOOL_GLOBAL + tuple(
    name.format(p=p) for p in range(PRIORITIES) for name in _ETHTOOL_PER_PRIO
)
"""mlx5_core ``ethtool -S`` counter names, in the driver's order."""

_RATE_NAMES = {
    10: "10 Gb/sec (1X QDR)", 25: "25 Gb/sec (1X EDR)", 40: "40 Gb/sec (4X QDR)",
    50: "50 Gb/sec (1X HDR)", 56: "56 Gb/sec (4X FDR)", 100: "100 Gb/sec (4X EDR)",
    200: "200 Gb/sec (4X HDR)", 400: "400 Gb/sec (4X NDR)", 800: "800 Gb/sec (4X XDR)",
}


class NoSuchDeviceError(LookupError):
    """An RDMA device, port or network interface the emulated node does not have."""


# --------------------------------------------------------------------------- descriptions


@dataclass(frozen=True)
class GpuDescription:
    """One GPU of the node."""

    index: int
    model: str
    bus_id: str
    numa: int
    pcie_switch: int

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> GpuDescription:
        """Build from a ``node.json`` GPU entry."""
        return cls(int(raw["index"]), str(raw["model"]), str(raw["bus_id"]), int(raw["numa"]),
                   int(raw["pcie_switch"]))

    def to_dict(self) -> dict[str, Any]:
        """Return the ``node.json`` GPU entry."""
        return {"index": self.index, "model": self.model, "bus_id": self.bus_id,
                "numa": self.numa, "pcie_switch": self.pcie_switch}


@dataclass(frozen=True)
class NicDescription:
    """One RDMA NIC (single port) of the node.

    ``bridges`` > 1 marks a NIC behind more PCIe bridges than its GPU (``PXB`` instead of
    ``PIX`` when on the same switch). ``node_guid`` is ``0x`` + 16 hex digits; for RoCE it is
    derived from the MAC when absent.
    """

    dev: str
    netdev: str
    link_layer: str
    rate_gbps: int
    fw: str
    bus_id: str
    numa: int
    pcie_switch: int
    mac: str
    ipv4: str | None = None
    prefix: int = 24
    node_guid: str | None = None
    lid: int = 0
    sm_lid: int = 0
    hca_type: str = "MT4129"
    board_id: str = "MT_0000000838"
    bridges: int = 1
    gid_layout: str = "standard"
    vlan: int | None = None  # RoCE over an 802.1Q VLAN device ``NETDEV.VLAN`` holding ``ipv4``
    egress_qos_map: tuple[int, ...] = (0,) * 8  # that VLAN device's skb priority 0-7 -> PCP

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> NicDescription:
        """Build from a ``node.json`` NIC entry."""
        ipv4 = raw.get("ipv4")
        guid = raw.get("node_guid")
        return cls(
            dev=str(raw["dev"]), netdev=str(raw["netdev"]), link_layer=str(raw["link_layer"]),
            rate_gbps=int(raw["rate_gbps"]), fw=str(raw["fw"]), bus_id=str(raw["bus_id"]),
            numa=int(raw["numa"]), pcie_switch=int(raw["pcie_switch"]), mac=str(raw["mac"]),
            ipv4=None if ipv4 is None else str(ipv4), prefix=int(raw.get("prefix", 24)),
            node_guid=None if guid is None else str(guid), lid=int(raw.get("lid", 0)),
            sm_lid=int(raw.get("sm_lid", 0)), hca_type=str(raw.get("hca_type", "MT4129")),
            board_id=str(raw.get("board_id", "MT_0000000838")),
            bridges=int(raw.get("bridges", 1)), gid_layout=str(raw.get("gid_layout", "standard")),
            vlan=None if raw.get("vlan") is None else int(raw["vlan"]),
            egress_qos_map=tuple(int(p) for p in raw.get("egress_qos_map") or (0,) * 8),
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the ``node.json`` NIC entry."""
        return {
            "dev": self.dev, "netdev": self.netdev, "link_layer": self.link_layer,
            "rate_gbps": self.rate_gbps, "fw": self.fw, "bus_id": self.bus_id, "numa": self.numa,
            "pcie_switch": self.pcie_switch, "mac": self.mac, "ipv4": self.ipv4,
            "prefix": self.prefix, "node_guid": self.node_guid, "lid": self.lid,
            "sm_lid": self.sm_lid, "hca_type": self.hca_type, "board_id": self.board_id,
            "bridges": self.bridges,
            **({"gid_layout": self.gid_layout} if self.gid_layout != "standard" else {}),
            **({"vlan": self.vlan, "egress_qos_map": list(self.egress_qos_map)}
               if self.vlan is not None else {}),
        }

    @property
    def roce_netdev(self) -> str:
        """The netdev RoCE traffic uses: the VLAN device (``eth2.100``, the 8021q module's name
        for VLAN 100 on eth2) when the port is VLAN-tagged, else the port's own."""
        return self.netdev if self.vlan is None else f"{self.netdev}.{self.vlan}"

    @property
    def is_ib(self) -> bool:
        """True for an InfiniBand port, False for RoCE (Ethernet)."""
        return self.link_layer == "InfiniBand"

    @property
    def guid(self) -> int:
        """The node GUID as an integer (RoCE: MAC-derived when not given)."""
        if self.node_guid:
            return int(self.node_guid, 16)
        octets = _mac_octets(self.mac)
        return int.from_bytes(bytes([*octets[:3], 0x03, 0x00, *octets[3:]]), "big")

    @property
    def port_guid(self) -> int:
        """The port GUID: the node GUID on IB, the MAC's EUI-64 on RoCE."""
        if self.is_ib:
            return self.guid
        return int.from_bytes(bytes(_eui64(self.mac)), "big")


@dataclass(frozen=True)
class NodeDescription:
    """The static hardware of one node (``emu/node.json``)."""

    hostname: str
    fabric: str
    sockets: int
    cpus_per_socket: int
    gpus: tuple[GpuDescription, ...]
    nics: tuple[NicDescription, ...]
    nvlink: str | None = None
    threads_per_core: int = 2
    tools: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_TOOLS))
    """Installed userspace packages and their versions (``iproute2``, ``mlnx-tools``)."""

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> NodeDescription:
        """Build from the ``node.json`` dict."""
        nvlink = raw.get("nvlink")
        return cls(
            hostname=str(raw["hostname"]), fabric=str(raw["fabric"]),
            sockets=int(raw["sockets"]), cpus_per_socket=int(raw["cpus_per_socket"]),
            gpus=tuple(GpuDescription.from_dict(g) for g in raw.get("gpus", [])),
            nics=tuple(NicDescription.from_dict(n) for n in raw.get("nics", [])),
            nvlink=None if nvlink is None else str(nvlink),
            threads_per_core=int(raw.get("threads_per_core", 2)),
            tools={str(k): str(v) for k, v in raw.get("tools", DEFAULT_TOOLS).items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the ``node.json`` dict."""
        return {
            "hostname": self.hostname, "fabric": self.fabric, "sockets": self.sockets,
            "cpus_per_socket": self.cpus_per_socket, "threads_per_core": self.threads_per_core,
            "gpus": [g.to_dict() for g in self.gpus], "nvlink": self.nvlink,
            "nics": [n.to_dict() for n in self.nics], "tools": dict(self.tools),
        }

    def cpu_affinity(self, numa: int) -> str:
        """CPU list of a NUMA node as nvidia-smi prints it (``0-47,96-143``)."""
        per, total = self.cpus_per_socket, self.cpus_per_socket * self.sockets
        ranges = [f"{t * total + numa * per}-{t * total + (numa + 1) * per - 1}"
                  for t in range(self.threads_per_core)]
        return ",".join(ranges)


def pcie_distance(a_numa: int, a_switch: int, b_numa: int, b_switch: int,
                  bridges: int = 1) -> str:
    """nvidia-smi's PCIe distance between two devices.

    Args:
        a_numa: NUMA node of the first device.
        a_switch: PCIe switch id of the first device.
        b_numa: NUMA node of the second device.
        b_switch: PCIe switch id of the second device.
        bridges: PCIe bridges between them when on one switch (``> 1`` gives ``PXB``).

    Returns:
        ``PIX``, ``PXB``, ``NODE`` or ``SYS``.
    """
    if a_numa != b_numa:
        return "SYS"
    if a_switch != b_switch:
        return "NODE"
    return "PXB" if bridges > 1 else "PIX"


@dataclass(frozen=True)
class InitialSettings:
    """The NIC settings a host starts with (applied to every NIC).

    Defaults are a fresh mlx5 NIC: trust pcp, PFC off, DSCP map ``dscp >> 3``, mlx5's default
    UP-to-TC map with all TCs ETS at 12/13%, ECN (DCQCN) enabled on every priority for both the
    reaction and notification points, CNP DSCP 48 / 802.1p 6, rdma_cm ToS 0 and RoCE v2, cable
    length 7 m, DCBX OS-controlled, buffers auto-configured by the driver (``buffers=None``).
    """

    trust: str = "pcp"
    pfc: tuple[int, ...] = (0,) * PRIORITIES
    dscp2prio: Mapping[int, int] = field(default_factory=dict)
    prio_tc: tuple[int, ...] = DEFAULT_PRIO_TC
    tc_tsa: tuple[str, ...] = ("ets",) * PRIORITIES
    tc_bw: tuple[int, ...] = DEFAULT_TC_BW
    ecn_np: tuple[int, ...] = (1,) * PRIORITIES
    ecn_rp: tuple[int, ...] = (1,) * PRIORITIES
    cnp_dscp: int = 48
    cnp_prio: int = 6
    roce_tos: int = 0
    roce_mode: int = 2
    cable_len: int = 7
    dcbx: str = "os"
    mtu: int = 1500
    buffers: Buffers | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> InitialSettings:
        """Build from a dict with any subset of the field names (the rest default)."""
        kwargs: dict[str, Any] = {}
        for key, value in raw.items():
            if key == "dscp2prio":
                kwargs[key] = {int(k): int(v) for k, v in dict(value).items()}
            elif key == "buffers":
                kwargs[key] = None if value is None else Buffers.from_dict(value)
            elif key in ("pfc", "prio_tc", "tc_bw", "ecn_np", "ecn_rp"):
                kwargs[key] = tuple(int(v) for v in value)
            elif key == "tc_tsa":
                kwargs[key] = tuple(str(v) for v in value)
            elif key in ("trust", "dcbx"):
                kwargs[key] = str(value)
            elif key in cls.__dataclass_fields__:
                kwargs[key] = int(value)
            else:
                raise ValueError(f"unknown initial setting {key!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Return the settings as a JSON-able dict."""
        return {
            "trust": self.trust, "pfc": list(self.pfc),
            "dscp2prio": {str(k): v for k, v in sorted(self.dscp2prio.items())},
            "prio_tc": list(self.prio_tc), "tc_tsa": list(self.tc_tsa), "tc_bw": list(self.tc_bw),
            "ecn_np": list(self.ecn_np), "ecn_rp": list(self.ecn_rp), "cnp_dscp": self.cnp_dscp,
            "cnp_prio": self.cnp_prio, "roce_tos": self.roce_tos, "roce_mode": self.roce_mode,
            "cable_len": self.cable_len, "dcbx": self.dcbx, "mtu": self.mtu,
            "buffers": None if self.buffers is None else self.buffers.to_dict(),
        }

    def dscp_map(self) -> list[int]:
        """The full 64-entry DSCP-to-priority map (kernel default ``dscp >> 3`` + overrides)."""
        return [self.dscp2prio.get(d, d >> 3) for d in range(DSCP_COUNT)]


# --------------------------------------------------------------------------- state records


@dataclass(frozen=True)
class Buffers:
    """Receive buffer configuration of a port (bytes)."""

    prio2buffer: tuple[int, ...]
    sizes: tuple[int, ...]
    total: int = DEFAULT_TOTAL_BUFFER

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Buffers:
        """Build from ``{"prio2buffer": [...], "sizes": [...], "total": N}``."""
        return cls(tuple(int(v) for v in raw["prio2buffer"]),
                   tuple(int(v) for v in raw["sizes"]),
                   int(raw.get("total", DEFAULT_TOTAL_BUFFER)))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able dict."""
        return {"prio2buffer": list(self.prio2buffer), "sizes": list(self.sizes),
                "total": self.total}


@dataclass(frozen=True)
class Pfc:
    """IEEE PFC state: enabled per priority, delay (mlnx_qos "cable len"), MACsec bypass."""

    enabled: tuple[int, ...]
    delay: int
    cap: int = PRIORITIES
    mbc: bool = False


@dataclass(frozen=True)
class Ets:
    """IEEE ETS state (TSA names from ``TSA_NAMES``)."""

    prio_tc: tuple[int, ...]
    tc_tsa: tuple[str, ...]
    tc_bw: tuple[int, ...]
    willing: bool = False
    ets_cap: int = PRIORITIES
    cbs: bool = False
    pg_bw: tuple[int, ...] = (0,) * PRIORITIES
    reco_tc_bw: tuple[int, ...] = (0,) * PRIORITIES
    reco_tc_tsa: tuple[str, ...] = ("strict",) * PRIORITIES
    reco_prio_tc: tuple[int, ...] = (0,) * PRIORITIES

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able dict (the DCB state file's ``ets`` entry)."""
        return {
            "willing": self.willing, "ets_cap": self.ets_cap, "cbs": self.cbs,
            "prio_tc": list(self.prio_tc), "tc_tsa": list(self.tc_tsa),
            "tc_bw": list(self.tc_bw), "pg_bw": list(self.pg_bw),
            "reco_tc_bw": list(self.reco_tc_bw), "reco_tc_tsa": list(self.reco_tc_tsa),
            "reco_prio_tc": list(self.reco_prio_tc),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Ets:
        """Build from the DCB state file's ``ets`` entry."""
        def ints(key: str) -> tuple[int, ...]:
            return tuple(int(v) for v in raw[key])

        def names(key: str) -> tuple[str, ...]:
            return tuple(str(v) for v in raw[key])

        return cls(ints("prio_tc"), names("tc_tsa"), ints("tc_bw"), bool(raw["willing"]),
                   int(raw["ets_cap"]), bool(raw["cbs"]), ints("pg_bw"), ints("reco_tc_bw"),
                   names("reco_tc_tsa"), ints("reco_prio_tc"))


@dataclass(frozen=True, order=True)
class AppEntry:
    """One DCB APP table entry. ``selector`` is ``dscp`` or one of ``APP_SELECTORS``."""

    selector: str
    protocol: int
    prio: int


@dataclass(frozen=True)
class Gid:
    """One GID table entry of a port."""

    index: int
    gid: str
    type: str
    ndev: str | None


# --------------------------------------------------------------------------- helpers


def _mac_octets(mac: str) -> list[int]:
    return [int(part, 16) for part in mac.split(":")]


def _eui64(mac: str) -> list[int]:
    o = _mac_octets(mac)
    return [o[0] ^ 0x02, o[1], o[2], 0xFF, 0xFE, o[3], o[4], o[5]]


def _groups(raw: bytes) -> str:
    """16 bytes as eight colon-separated 4-hex-digit groups (sysfs GID form)."""
    hexed = raw.hex()
    return ":".join(hexed[i:i + 4] for i in range(0, 32, 4))


def guid_colon(value: int) -> str:
    """A GUID as sysfs ``node_guid`` prints it (``a088:c203:007e:1dba``)."""
    hexed = f"{value:016x}"
    return ":".join(hexed[i:i + 4] for i in range(0, 16, 4))


def rate_string(gbps: int) -> str:
    """sysfs ``ports/1/rate`` text for a link rate (``400 Gb/sec (4X NDR)``): the kernel's
    ``rate_show`` (drivers/infiniband/core/sysfs.c) prints the active speed times the active width
    as "%d%s Gb/sec (%dX%s)"; ibstat's ``Rate:`` and ibstatus's ``rate:`` read this file (libibumad
    umad_get_port), so a port trained at 200 Gb/s shows ``200 Gb/sec (4X HDR)`` in all three."""
    return _RATE_NAMES.get(gbps, f"{gbps} Gb/sec (4X)")


def roce_gids(nic: NicDescription) -> list[tuple[str, str, str]]:
    """The RoCE GID entries (gid, type, netdev) of a NIC's port, a v1 and a v2 entry per address.

    ``standard``: link-local at 0-1, IPv4-mapped at 2-3. ``ipv6-first``: the netdev also has a
    global IPv6 address (ULA ``fd00::/64`` + EUI-64), whose entries take 2-3, pushing IPv4 to 4-5.
    ``v1-only``: a device without RoCE v2 (UDP encapsulation) gets only the v1 entry of each
    address (link-local at 0, IPv4-mapped at 1): the kernel adds a GID per type the port supports
    (``roce_gid_type_mask_support``, drivers/infiniband/core/roce_gid_mgmt.c).

    A VLAN-tagged port (``nic.vlan``) keeps its netdev's default (link-local) GIDs at 0-1; its
    addresses live on the VLAN device, whose GIDs roce_gid_mgmt.c adds with the VLAN device as
    their netdev (an upper device of the port's netdev): its own link-local address (the same MAC,
    so the same GID on another netdev) at 2-3, then the addresses above. So the RoCEv2 IPv4 GID of a
    VLAN port is at index 5 (the model's choice of order: the link-local address comes with the
    link, before a configured IPv4 address).
    """
    link_local = _groups(bytes([0xFE, 0x80] + [0] * 6 + _eui64(nic.mac)))
    dev = nic.roce_netdev
    entries = [(link_local, GID_TYPE_V1, nic.netdev), (link_local, GID_TYPE_V2, nic.netdev)]
    if nic.vlan is not None:
        entries += [(link_local, GID_TYPE_V1, dev), (link_local, GID_TYPE_V2, dev)]
    if nic.gid_layout == "ipv6-first":
        ula = _groups(bytes([0xFD, 0x00] + [0] * 6 + _eui64(nic.mac)))
        entries += [(ula, GID_TYPE_V1, dev), (ula, GID_TYPE_V2, dev)]
    if nic.ipv4:
        mapped = _groups(ipaddress.IPv6Address(f"::ffff:{nic.ipv4}").packed)
        entries += [(mapped, GID_TYPE_V1, dev), (mapped, GID_TYPE_V2, dev)]
    if nic.gid_layout == "v1-only":
        return [e for e in entries if e[1] == GID_TYPE_V1]
    return entries


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _ints(text: str) -> list[int]:
    return [int(tok) for tok in text.replace(",", " ").split() if tok.lstrip("-").isdigit()]


def _pairs(text: str) -> list[tuple[int, int]]:
    """``A B`` lines of a driver file (header and non-numeric lines skipped)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            out.append((int(parts[0]), int(parts[1])))
    return out


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """Where the three parts of an emulated node's state live."""

    sys_class: Path
    configfs: Path
    emu: Path

    @classmethod
    def under(cls, root: Path) -> Layout:
        """The layout of a provisioned tree (controller side: ``hosts/H/``, or a test dir)."""
        return cls(root / "sys" / "class", root / "configfs", root / "emu")

    @classmethod
    def inside_host(cls) -> Layout:
        """The layout as seen from inside an emulated host."""
        return cls(Path("/sys/class"), Path("/sys/kernel/config"), Path("/var/lib/fabtune-emu"))


# --------------------------------------------------------------------------- provisioning


def provision(root: Path, node: NodeDescription | Mapping[str, Any],
              initial: InitialSettings | Mapping[str, Any] | None = None) -> None:
    """Create the emulated node tree under ``root`` (sysfs, configfs and emu state).

    Args:
        root: The host directory (``sys/class``, ``configfs`` and ``emu`` are made under it).
        node: The hardware, as a description or its ``node.json`` dict.
        initial: The starting NIC settings (dict keys as ``InitialSettings`` fields).
    """
    desc = node if isinstance(node, NodeDescription) else NodeDescription.from_dict(node)
    if initial is None:
        settings = InitialSettings()
    elif isinstance(initial, InitialSettings):
        settings = initial
    else:
        settings = InitialSettings.from_dict(initial)
    layout = Layout.under(root)
    atomic_write(layout.emu / "node.json", json.dumps(desc.to_dict(), indent=2) + "\n")
    atomic_write(layout.emu / "initial.json", json.dumps(settings.to_dict(), indent=2) + "\n")
    for nic in desc.nics:
        _provision_ib_device(layout, nic)
        _provision_netdev(layout, nic, settings)
        _provision_configfs(layout, nic, settings)
        _write_json(layout.emu / "dcb" / f"{nic.netdev}.json", _initial_dcb(settings))
        _write_json(layout.emu / "ethtool" / f"{nic.netdev}.json",
                    dict.fromkeys(ETHTOOL_COUNTERS, 0))


def _write_files(base: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        atomic_write(base / name, text + "\n")


def _provision_ib_device(layout: Layout, nic: NicDescription) -> None:
    dev = layout.sys_class / "infiniband" / nic.dev
    _write_files(dev, {
        "fw_ver": nic.fw, "node_guid": guid_colon(nic.guid),
        "sys_image_guid": guid_colon(nic.guid), "hca_type": nic.hca_type,
        "board_id": nic.board_id, "node_type": "1: CA", "hw_rev": "0",
        "node_desc": f"{nic.dev}",
    })
    (dev / "device" / "net" / nic.netdev).mkdir(parents=True, exist_ok=True)
    port = dev / "ports" / "1"
    _write_files(port, {
        "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": rate_string(nic.rate_gbps),
        "link_layer": nic.link_layer, "lid": f"0x{nic.lid:x}", "sm_lid": f"0x{nic.sm_lid:x}",
        "lid_mask_count": "0", "sm_sl": "0",
        "cap_mask": "0xa751e848" if nic.is_ib else "0x00010000",
    })
    _provision_gids(port, nic)
    _write_files(port / "hw_counters", dict.fromkeys(HW_COUNTERS, "0"))
    _write_files(port / "counters", dict.fromkeys(PORT_COUNTERS, "0"))


def _provision_gids(port: Path, nic: NicDescription) -> None:
    if nic.is_ib:
        prefix = bytes([0xFE, 0x80] + [0] * 6)
        entries = [(_groups(prefix + nic.port_guid.to_bytes(8, "big")), GID_TYPE_V1, "")]
    else:
        entries = roce_gids(nic)
    for index in range(GID_TABLE_LEN):
        gid, gtype, ndev = entries[index] if index < len(entries) else (ZERO_GID, "", "")
        atomic_write(port / "gids" / str(index), gid + "\n")
        if gtype:
            atomic_write(port / "gid_attrs" / "types" / str(index), gtype + "\n")
            if ndev:
                atomic_write(port / "gid_attrs" / "ndevs" / str(index), ndev + "\n")


def _provision_netdev(layout: Layout, nic: NicDescription, settings: InitialSettings) -> None:
    net = layout.sys_class / "net" / nic.netdev
    net.mkdir(parents=True, exist_ok=True)
    for point, values in (("roce_np", settings.ecn_np), ("roce_rp", settings.ecn_rp)):
        _write_files(net / "ecn" / point / "enable", {str(p): str(v) for p, v in enumerate(values)})
    _write_files(net / "ecn" / "roce_np", {
        "cnp_dscp": str(settings.cnp_dscp), "cnp_802p_prio": str(settings.cnp_prio),
    })
    qos = net / "qos"
    atomic_write(qos / "trust", settings.trust + "\n")
    atomic_write(qos / "dscp2prio", _dscp2prio_text(settings.dscp_map()))
    buffers = settings.buffers or _auto_buffers(settings.pfc)
    _write_buffers(qos, buffers)


def _provision_configfs(layout: Layout, nic: NicDescription, settings: InitialSettings) -> None:
    port = layout.configfs / "rdma_cm" / nic.dev / "ports" / "1"
    _write_files(port, {
        "default_roce_tos": str(settings.roce_tos),
        "default_roce_mode": ROCE_MODES[settings.roce_mode],
    })


def _initial_dcb(settings: InitialSettings) -> dict[str, Any]:
    dcbx = DCB_CAP_DCBX_VER_IEEE | (DCB_CAP_DCBX_HOST if settings.dcbx == "os" else 0)
    ets = Ets(tuple(settings.prio_tc), tuple(settings.tc_tsa), tuple(settings.tc_bw))
    return {
        "dcbx": dcbx,
        "pfc": {"enabled": list(settings.pfc), "delay": settings.cable_len, "mbc": False},
        "ets": ets.to_dict(),
        "app": [],
        "dscp_app": ([[d, p] for d, p in enumerate(settings.dscp_map())]
                     if settings.trust == "dscp" else []),
        "maxrate_kbps": [0] * PRIORITIES,
        "buffers_auto": settings.buffers is None,
    }


def _auto_buffers(pfc: Sequence[int]) -> Buffers:
    """What mlx5 configures by itself: lossless priorities on buffer 1, the rest on buffer 0."""
    prio2buffer = tuple(1 if on else 0 for on in pfc)
    if any(prio2buffer):
        half = DEFAULT_TOTAL_BUFFER // 2
        sizes = (half, half) + (0,) * (PRIORITIES - 2)
    else:
        sizes = (DEFAULT_TOTAL_BUFFER,) + (0,) * (PRIORITIES - 1)
    return Buffers(prio2buffer, sizes, DEFAULT_TOTAL_BUFFER)


def _dscp2prio_text(mapping: Sequence[int]) -> str:
    return "dscp2prio:\n" + "".join(f"{d} {p}\n" for d, p in enumerate(mapping))


def _write_buffers(qos: Path, buffers: Buffers) -> None:
    atomic_write(qos / "prio2buffer", "priority buffer\n" + "".join(
        f"{p} {b}\n" for p, b in enumerate(buffers.prio2buffer)))
    spare = buffers.total - sum(buffers.sizes)
    lines = [f"Port buffer size = {buffers.total}", f"Spare buffer size = {max(spare, 0)}",
             "buffer size xoff_threshold xon_threshold"]
    lines += [f"{b} {size} 0 0" for b, size in enumerate(buffers.sizes)]
    atomic_write(qos / "buffer_size", "\n".join(lines) + "\n")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- NodeState


class NodeState:
    """Read and change the emulated node's state, the way its tools and the fabric model do.

    Args:
        layout: Where the state lives (see ``Layout``).
        netns: The host's network namespace, for kernel attributes (MTU, operstate) read from
            outside the host with ``ip -n NETNS``. ``None`` inside a host or in unit tests.
    """

    def __init__(self, layout: Layout, netns: str | None = None) -> None:
        self.layout = layout
        self.netns = netns
        self._node: NodeDescription | None = None

    @classmethod
    def inside_host(cls) -> NodeState:
        """The state as an emulated tool running inside a host sees it."""
        return cls(Layout.inside_host())

    @classmethod
    def on_controller(cls, host_dir: Path, netns: str | None = None) -> NodeState:
        """The state of one host read from the controller (``<testbed>/hosts/H``)."""
        return cls(Layout.under(host_dir), netns)

    @classmethod
    def under(cls, root: Path) -> NodeState:
        """The state of a tree provisioned under ``root`` (unit tests)."""
        return cls(Layout.under(root))

    # ---------------------------------------------------------------- description

    @property
    def node(self) -> NodeDescription:
        """The static hardware description (``node.json``)."""
        if self._node is None:
            raw = json.loads((self.layout.emu / "node.json").read_text())
            self._node = NodeDescription.from_dict(raw)
        return self._node

    def nic(self, name: str) -> NicDescription:
        """The NIC with RDMA device or network interface ``name``.

        Raises:
            NoSuchDeviceError: The node has no such NIC.
        """
        for nic in self.node.nics:
            if name in (nic.dev, nic.netdev):
                return nic
        raise NoSuchDeviceError(name)

    def rdma_devices(self) -> list[str]:
        """RDMA device names, sorted as ``ls /sys/class/infiniband`` lists them."""
        return sorted(nic.dev for nic in self.node.nics)

    def netdevs(self) -> list[str]:
        """Network interfaces of the emulated NICs, in ``node.json`` order."""
        return [nic.netdev for nic in self.node.nics]

    # ---------------------------------------------------------------- paths

    def _net(self, netdev: str) -> Path:
        return self.layout.sys_class / "net" / self.nic(netdev).netdev

    def _port(self, dev: str, port: int = 1) -> Path:
        path = self.layout.sys_class / "infiniband" / self.nic(dev).dev / "ports" / str(port)
        if not path.is_dir():
            raise NoSuchDeviceError(f"{dev} port {port}")
        return path

    def _dcb_path(self, netdev: str) -> Path:
        return self.layout.emu / "dcb" / f"{self.nic(netdev).netdev}.json"

    def _read(self, path: Path) -> str:
        return path.read_text().strip()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.layout.emu / ".lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _dcb(self, netdev: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self._dcb_path(netdev).read_text())
        return data

    @contextlib.contextmanager
    def _edit_dcb(self, netdev: str) -> Iterator[dict[str, Any]]:
        with self._locked():
            data = self._dcb(netdev)
            yield data
            _write_json(self._dcb_path(netdev), data)

    def port_attr(self, dev: str, name: str, port: int = 1) -> str:
        """A raw sysfs port attribute (``state``, ``rate``, ``lid``, ...)."""
        return self._read(self._port(dev, port) / name)

    def device_attr(self, dev: str, name: str) -> str:
        """A raw sysfs device attribute (``fw_ver``, ``node_guid``, ``hca_type``, ...)."""
        return self._read(self.layout.sys_class / "infiniband" / self.nic(dev).dev / name)

    # ---------------------------------------------------------------- kernel link attributes

    def _kernel_attr(self, netdev: str, name: str) -> str | None:
        path = self._net(netdev) / name
        if self.netns is None and path.exists():
            return self._read(path)
        if self.netns is not None:
            out = subprocess.run(["ip", "-n", self.netns, "-j", "link", "show", netdev],
                                 capture_output=True, text=True, check=True, timeout=10).stdout
            link = json.loads(out)[0]
            value = link.get(name)
            return None if value is None else str(value)
        return None

    def mtu(self, netdev: str) -> int:
        """The interface MTU (kernel file, ``ip -n`` from outside, or the provisioned value)."""
        value = self._kernel_attr(netdev, "mtu")
        if value is None:
            initial = json.loads((self.layout.emu / "initial.json").read_text())
            return int(initial.get("mtu", 1500))
        return int(value)

    def operstate(self, netdev: str) -> str:
        """The interface operstate in lower case (``up``, ``down``); ``up`` when unknown."""
        value = self._kernel_attr(netdev, "operstate")
        return "up" if value is None or value.lower() == "unknown" else value.lower()

    # ---------------------------------------------------------------- trust and DSCP map

    def get_trust(self, netdev: str) -> str:
        """Priority trust state: ``pcp`` or ``dscp``."""
        return self._read(self._net(netdev) / "qos" / "trust")

    def set_trust(self, netdev: str, trust: str) -> None:
        """Set the priority trust state (``pcp`` or ``dscp``) as the sysfs file does.

        The DSCP APP entries follow, as the driver's ``mlx5e_dcbnl_dscp_app`` INIT/DELETE: the
        whole DSCP map under ``dscp``, none under ``pcp``.
        """
        if trust not in ("pcp", "dscp"):
            raise ValueError(f"bad trust state {trust!r}")
        mapping = self.get_dscp2prio(netdev)
        atomic_write(self._net(netdev) / "qos" / "trust", trust + "\n")
        with self._edit_dcb(netdev) as data:
            data["dscp_app"] = [[d, p] for d, p in enumerate(mapping)] if trust == "dscp" else []

    def get_dscp2prio(self, netdev: str) -> list[int]:
        """The 64-entry DSCP-to-priority map."""
        mapping = [d >> 3 for d in range(DSCP_COUNT)]
        for dscp, prio in _pairs(self._read(self._net(netdev) / "qos" / "dscp2prio")):
            if 0 <= dscp < DSCP_COUNT:
                mapping[dscp] = prio
        return mapping

    def set_dscp2prio(self, netdev: str, updates: Mapping[int, int]) -> None:
        """Change entries of the DSCP-to-priority map (``{dscp: prio}``)."""
        with self._locked():
            mapping = self.get_dscp2prio(netdev)
            for dscp, prio in updates.items():
                if not (0 <= dscp < DSCP_COUNT and 0 <= prio < PRIORITIES):
                    raise ValueError(f"bad dscp2prio entry {dscp}:{prio}")
                mapping[dscp] = prio
            atomic_write(self._net(netdev) / "qos" / "dscp2prio", _dscp2prio_text(mapping))
        with self._edit_dcb(netdev) as data:  # an entry the driver lists shows the new priority
            present = self._dscp_app(data, netdev)
            present.update({d: p for d, p in updates.items() if d in present})
            data["dscp_app"] = [[d, p] for d, p in sorted(present.items())]

    def reset_dscp2prio(self, netdev: str) -> None:
        """Restore the default DSCP map (``dscp >> 3``)."""
        atomic_write(self._net(netdev) / "qos" / "dscp2prio",
                     _dscp2prio_text([d >> 3 for d in range(DSCP_COUNT)]))

    # ---------------------------------------------------------------- PFC and ETS

    def get_pfc(self, netdev: str) -> Pfc:
        """PFC enable per priority and delay."""
        raw = self._dcb(netdev)["pfc"]
        return Pfc(tuple(int(v) for v in raw["enabled"]), int(raw["delay"]),
                   mbc=bool(raw.get("mbc", False)))

    def set_pfc(self, netdev: str, enabled: Sequence[int] | None = None,
                delay: int | None = None, mbc: bool | None = None) -> None:
        """Change PFC; buffers follow the lossless priorities while driver-managed."""
        with self._edit_dcb(netdev) as data:
            if enabled is not None:
                if len(enabled) != PRIORITIES:
                    raise ValueError("pfc needs 8 values")
                data["pfc"]["enabled"] = [1 if v else 0 for v in enabled]
            if delay is not None:
                data["pfc"]["delay"] = int(delay)
            if mbc is not None:
                data["pfc"]["mbc"] = bool(mbc)
            if data.get("buffers_auto", True):
                _write_buffers(self._net(netdev) / "qos", _auto_buffers(data["pfc"]["enabled"]))

    def get_ets(self, netdev: str) -> Ets:
        """ETS configuration."""
        return Ets.from_dict(self._dcb(netdev)["ets"])

    def set_ets(self, netdev: str, ets: Ets) -> None:
        """Replace the ETS configuration."""
        for tsa in ets.tc_tsa + ets.reco_tc_tsa:
            if tsa not in TSA_NAMES:
                raise ValueError(f"bad TSA {tsa!r}")
        with self._edit_dcb(netdev) as data:
            data["ets"] = ets.to_dict()

    # ---------------------------------------------------------------- DCBX, maxrate

    def get_dcbx(self, netdev: str) -> int:
        """DCBX capability flags (``DCB_CAP_DCBX_*``)."""
        return int(self._dcb(netdev)["dcbx"])

    def set_dcbx(self, netdev: str, flags: int) -> None:
        """Set the DCBX capability flags."""
        with self._edit_dcb(netdev) as data:
            data["dcbx"] = int(flags)

    def get_maxrate(self, netdev: str) -> list[int]:
        """Per-TC max rate in kbit/s (0 = unlimited)."""
        return [int(v) for v in self._dcb(netdev)["maxrate_kbps"]]

    def set_maxrate(self, netdev: str, kbps: Sequence[int]) -> None:
        """Set per-TC max rates in kbit/s."""
        with self._edit_dcb(netdev) as data:
            data["maxrate_kbps"] = [int(v) for v in kbps]

    # ---------------------------------------------------------------- APP table and apptrust

    def _dscp_app(self, data: Mapping[str, Any], netdev: str) -> dict[int, int]:
        if "dscp_app" in data:
            return {int(d): int(p) for d, p in data["dscp_app"]}
        # a tree provisioned before the entries were kept: the driver's view at load
        if self.get_trust(netdev) == "dscp":
            return dict(enumerate(self.get_dscp2prio(netdev)))
        return {}

    def get_app_table(self, netdev: str) -> list[AppEntry]:
        """The DCB APP table (the kernel's list: other selectors, then the DSCP entries), sorted."""
        data = self._dcb(netdev)
        entries = [AppEntry(str(e["selector"]), int(e["protocol"]), int(e["prio"]))
                   for e in data["app"]]
        entries += [AppEntry("dscp", d, p) for d, p in self._dscp_app(data, netdev).items()]
        return sorted(entries, key=lambda e: (e.selector, e.protocol, e.prio))

    def add_app(self, netdev: str, entries: Sequence[AppEntry]) -> None:
        """Add APP entries as ``mlx5e_dcbnl_ieee_setapp`` does (DSCP entries only on mlx5).

        The first DSCP entry switches trust to ``dscp``; each sets the firmware DSCP map and
        replaces the entry its DSCP had.
        """
        dscp = {e.protocol: e.prio for e in entries if e.selector == "dscp"}
        with self._edit_dcb(netdev) as data:
            present = self._dscp_app(data, netdev)
            if dscp and not present:
                atomic_write(self._net(netdev) / "qos" / "trust", "dscp\n")
            present.update(dscp)
            data["dscp_app"] = [[d, p] for d, p in sorted(present.items())]
            for entry in entries:
                record = {"selector": entry.selector, "protocol": entry.protocol,
                          "prio": entry.prio}
                if entry.selector != "dscp" and record not in data["app"]:
                    data["app"].append(record)
        if dscp:
            self.set_dscp2prio(netdev, dscp)

    def del_app(self, netdev: str, entries: Sequence[AppEntry]) -> None:
        """Delete APP entries as ``mlx5e_dcbnl_ieee_delapp`` does, in order.

        A DSCP entry is deleted only while DSCP entries exist and its priority is the firmware
        map's; its DSCP maps back to priority 0; deleting the last one switches trust to ``pcp``.

        Raises:
            OSError: ENOENT at the first DSCP entry the driver refuses (the ones before it stay
                deleted, as the kernel's loop over the request stops there).
        """
        for entry in entries:
            if entry.selector == "dscp":
                self._del_dscp(netdev, entry)
                continue
            record = {"selector": entry.selector, "protocol": entry.protocol, "prio": entry.prio}
            with self._edit_dcb(netdev) as data:
                data["app"] = [rec for rec in data["app"] if rec != record]

    def _del_dscp(self, netdev: str, entry: AppEntry) -> None:
        mapping = self.get_dscp2prio(netdev)
        with self._edit_dcb(netdev) as data:
            present = self._dscp_app(data, netdev)
            if not present or mapping[entry.protocol] != entry.prio:
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
            present.pop(entry.protocol, None)
            data["dscp_app"] = [[d, p] for d, p in sorted(present.items())]
        self.set_dscp2prio(netdev, {entry.protocol: 0})
        if not present:
            atomic_write(self._net(netdev) / "qos" / "trust", "pcp\n")

    def dscp_app_entries(self, netdev: str) -> dict[int, int]:
        """The DSCP APP entries (``{dscp: prio}``)."""
        return self._dscp_app(self._dcb(netdev), netdev)

    # ---------------------------------------------------------------- buffers

    def get_buffers(self, netdev: str) -> Buffers:
        """Receive buffers: priority-to-buffer map, sizes and total."""
        qos = self._net(netdev) / "qos"
        p2b = [0] * PRIORITIES
        text = self._read(qos / "prio2buffer")
        if "," in text:
            p2b = (_ints(text) + p2b)[:PRIORITIES]
        else:
            for prio, buf in _pairs(text):
                p2b[prio] = buf
        return Buffers(tuple(p2b), *self._buffer_sizes(qos))

    def _buffer_sizes(self, qos: Path) -> tuple[tuple[int, ...], int]:
        text = self._read(qos / "buffer_size")
        sizes = [0] * PRIORITIES
        total = DEFAULT_TOTAL_BUFFER
        if "," in text and "=" not in text:
            return tuple((_ints(text) + sizes)[:PRIORITIES]), total
        for line in text.splitlines():
            if line.startswith("Port buffer size"):
                total = int(line.split("=")[1])
        for buf, size in _pairs(text):
            sizes[buf] = size
        return tuple(sizes), total

    def set_buffers(self, netdev: str, prio2buffer: Sequence[int] | None = None,
                    sizes: Sequence[int] | None = None) -> None:
        """Configure receive buffers by hand (the driver stops managing them).

        Raises:
            ValueError: Sizes above the port's total buffer.
        """
        with self._locked():
            cur = self.get_buffers(netdev)
            new = Buffers(tuple(prio2buffer or cur.prio2buffer), tuple(sizes or cur.sizes),
                          cur.total)
            if sum(new.sizes) > new.total:
                raise ValueError("buffer sizes exceed the port buffer")
            _write_buffers(self._net(netdev) / "qos", new)
            data = self._dcb(netdev)
            data["buffers_auto"] = False
            _write_json(self._dcb_path(netdev), data)

    # ---------------------------------------------------------------- ECN / CNP

    def get_ecn(self, netdev: str, point: str) -> list[int]:
        """ECN enable per priority for ``np`` (notification) or ``rp`` (reaction) point."""
        base = self._net(netdev) / "ecn" / f"roce_{point}" / "enable"
        return [int(self._read(base / str(p))) for p in range(PRIORITIES)]

    def set_ecn(self, netdev: str, point: str, prio: int, enabled: bool) -> None:
        """Enable or disable ECN for one priority at ``np`` or ``rp``."""
        path = self._net(netdev) / "ecn" / f"roce_{point}" / "enable" / str(prio)
        atomic_write(path, ("1" if enabled else "0") + "\n")

    def get_cnp_dscp(self, netdev: str) -> int:
        """DSCP of CNPs sent by the notification point."""
        return int(self._read(self._net(netdev) / "ecn" / "roce_np" / "cnp_dscp"))

    def set_cnp_dscp(self, netdev: str, dscp: int) -> None:
        """Set the CNP DSCP."""
        atomic_write(self._net(netdev) / "ecn" / "roce_np" / "cnp_dscp", f"{dscp}\n")

    def get_cnp_prio(self, netdev: str) -> int:
        """802.1p priority of CNPs."""
        return int(self._read(self._net(netdev) / "ecn" / "roce_np" / "cnp_802p_prio"))

    def set_cnp_prio(self, netdev: str, prio: int) -> None:
        """Set the CNP 802.1p priority."""
        atomic_write(self._net(netdev) / "ecn" / "roce_np" / "cnp_802p_prio", f"{prio}\n")

    # ---------------------------------------------------------------- rdma_cm configfs

    def _cm_port(self, dev: str, port: int) -> Path:
        path = self.layout.configfs / "rdma_cm" / self.nic(dev).dev / "ports" / str(port)
        if not path.is_dir():
            raise NoSuchDeviceError(f"{dev} port {port}")
        return path

    def get_roce_tos(self, dev: str, port: int = 1) -> int:
        """rdma_cm default ToS of a device port."""
        return int(self._read(self._cm_port(dev, port) / "default_roce_tos"))

    def set_roce_tos(self, dev: str, tos: int, port: int = 1) -> None:
        """Set the rdma_cm default ToS (0..255)."""
        if not 0 <= tos <= 255:
            raise ValueError(f"bad ToS {tos}")
        atomic_write(self._cm_port(dev, port) / "default_roce_tos", f"{tos}\n")

    def get_roce_mode(self, dev: str, port: int = 1) -> str:
        """rdma_cm default RoCE mode text (``RoCE v2`` or ``IB/RoCE v1``)."""
        return self._read(self._cm_port(dev, port) / "default_roce_mode")

    def set_roce_mode(self, dev: str, mode: int, port: int = 1) -> None:
        """Set the rdma_cm default RoCE mode (1 or 2)."""
        atomic_write(self._cm_port(dev, port) / "default_roce_mode", ROCE_MODES[mode] + "\n")

    # ---------------------------------------------------------------- GIDs

    def gid_table(self, dev: str, port: int = 1) -> list[Gid]:
        """Every GID entry of a port (all-zero ones included), by index."""
        base = self._port(dev, port)
        out = []
        for index in range(GID_TABLE_LEN):
            gid = self._read(base / "gids" / str(index))
            type_file = base / "gid_attrs" / "types" / str(index)
            ndev_file = base / "gid_attrs" / "ndevs" / str(index)
            out.append(Gid(index, gid, self._read(type_file) if type_file.exists() else "",
                           self._read(ndev_file) if ndev_file.exists() else None))
        return out

    # ---------------------------------------------------------------- counters

    def read_counters(self, netdev: str) -> dict[str, int]:
        """Every counter of a NIC: RDMA hw_counters, port counters and ethtool statistics."""
        nic = self.nic(netdev)
        port = self._port(nic.dev)
        out: dict[str, int] = {}
        for sub, names in (("hw_counters", HW_COUNTERS), ("counters", PORT_COUNTERS)):
            for name in names:
                out[name] = int(self._read(port / sub / name))
        stats = json.loads((self.layout.emu / "ethtool" / f"{nic.netdev}.json").read_text())
        out.update({str(k): int(v) for k, v in stats.items()})
        return out

    def ethtool_stats(self, netdev: str) -> dict[str, int]:
        """The ``ethtool -S`` statistics in driver order."""
        nic = self.nic(netdev)
        stats = json.loads((self.layout.emu / "ethtool" / f"{nic.netdev}.json").read_text())
        return {name: int(stats.get(name, 0)) for name in ETHTOOL_COUNTERS}

    def add_counters(self, netdev: str, deltas: Mapping[str, int]) -> None:
        """Add to counters by name (any of hw_counters, port counters, ethtool statistics).

        Raises:
            KeyError: A counter name the NIC does not have.
        """
        nic = self.nic(netdev)
        port = self._port(nic.dev)
        with self._locked():
            stats_path = self.layout.emu / "ethtool" / f"{nic.netdev}.json"
            stats = json.loads(stats_path.read_text())
            for name, delta in deltas.items():
                if name in HW_COUNTERS or name in PORT_COUNTERS:
                    sub = "hw_counters" if name in HW_COUNTERS else "counters"
                    path = port / sub / name
                    atomic_write(path, f"{int(self._read(path)) + int(delta)}\n")
                elif name in stats:
                    stats[name] = int(stats[name]) + int(delta)
                else:
                    raise KeyError(name)
            _write_json(stats_path, stats)

    # ---------------------------------------------------------------- subnet manager

    def sm_info(self) -> dict[str, Any] | None:
        """The subnet manager record (``emu/sm.json``) or ``None`` when no SM runs."""
        path = self.layout.emu / "sm.json"
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text())
        return data
