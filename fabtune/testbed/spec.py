"""The testbed spec: what rack to emulate. Validated once, at load, with every error named."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabtune.errors import ConfigError
from fabtune.paths import check_name

# A testbed name also names interfaces (15 characters at most): stricter than fabtune.paths' rule.
NAME_RE = re.compile(r"[a-z][a-z0-9]{0,5}")
NAME_RULE = "must be 1-6 lowercase letters or digits, starting with a letter"
FABRICS = ("roce", "ib")
RATES_GBPS = (25, 50, 100, 200, 400, 800)
MAX_HOSTS = 32
PRIORITIES = 8
# The SSH login of the testbed's inventory: root, or a normal user the testbed creates on every host
# with passwordless sudo. A safe POSIX user name (Debian's adduser NAME_REGEX, at most 32
# characters as useradd allows), never one that already names an account of this machine: the
# hosts' /etc/passwd is an overlay of the machine's (checked when the testbed is built).
LOGIN_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
LOGIN_USER_RULE = "must be a user name: 1-32 of a-z 0-9 _ -, starting with a letter or _"
DEFAULT_LOGIN_USER = "root"

# A fresh mlx5 port: trust pcp, no PFC, every priority in TC0... (see docs/testbed.md)
DEFAULT_INITIAL: dict[str, Any] = {
    "trust": "pcp",
    "pfc": [0] * PRIORITIES,
    "ecn_np": [1] * PRIORITIES,
    "ecn_rp": [1] * PRIORITIES,
    "cnp_dscp": 48,
    "cnp_prio": 6,
    "roce_tos": 0,
    "roce_mode": 2,
    "mtu": 1500,
}


# The userspace tools of a host, by package: Debian 12's iproute2 and NVIDIA's mlnx-tools unless
# the spec says otherwise. The emulated tools behave as these releases (fabtune.sim.tools.dcb,
# fabtune.sim.tools.mlnx_qos); "none" leaves the package's tools off the host. lldpad (openlldp:
# the daemon and lldptool, fabtune.sim.tools.lldptool) is off unless the spec installs it: most GPU
# nodes do not run it (it would overwrite what mlnx_qos sets).
DEFAULT_TOOLS: dict[str, str] = {"iproute2": "6.1.0", "mlnx-tools": "25.07", "lldpad": "none"}
TOOL_KEYS = tuple(DEFAULT_TOOLS)
IPROUTE2_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")
IPROUTE2_OLDEST = (5, 11, 0)
"""The first iproute2 release with ``dcb`` (``dcb/`` appears at v5.11.0)."""
MLNX_TOOLS_RELEASES = ("25.07", "none")
LLDPAD_RELEASES = ("1.1.0", "none")  # openlldp 1.1.0, Debian 12's lldpad


@dataclass(frozen=True)
class SwitchSpec:
    """The emulated leaf/spine switches (not a host: the fabric model reads it)."""

    pfc_priorities: tuple[int, ...] = (3,)
    ecn_priorities: tuple[int, ...] = (3,)
    trust: str = "dscp"
    nodes_per_leaf: int = 32
    oversubscription: float = 1.0
    dscp2prio: tuple[tuple[int, int], ...] = ()  # entries over the default map (dscp >> 3)
    spines: int = 16
    adaptive_routing: bool = False  # per-packet adaptive routing on the RoCE switches


@dataclass(frozen=True)
class SmSpec:
    """The InfiniBand subnet manager (ib fabrics only)."""

    host: str
    routing_engine: str = "minhop"
    adaptive_routing: bool = False
    flavor: str = "upstream"
    qos: bool = False
    qos_sl2vl: tuple[int, ...] = ()  # opensm.conf qos_sl2vl: the VL of SL 0-15 (15 drops the SL)


@dataclass(frozen=True)
class HostSpec:
    """One emulated GPU node."""

    name: str
    index: int
    gpus: int
    sockets: int
    nic_numa: tuple[int, ...]
    gpu_numa: tuple[int, ...]
    initial: dict[str, Any] = field(hash=False, compare=False)
    gid_layout: str = "standard"
    nccl_conf: tuple[tuple[str, str], ...] = ()  # the host's /etc/nccl.conf at build (KEY=value lines)
    tools: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_TOOLS), hash=False,
                                  compare=False)
    vlan: int | None = None  # RoCE on an 802.1Q VLAN device NETDEV.ID holding the rail address
    egress_qos_map: tuple[int, ...] = (0,) * PRIORITIES  # that device's skb priority -> PCP
    link_speed: tuple[tuple[int, int], ...] = ()  # (NIC index, Gb/s) of ports trained below the rack

    def speed_of(self, rail: int, rack_gbps: int) -> int:
        """The speed NIC ``rail`` trained at: its own ``link_speed``, else the rack's."""
        return dict(self.link_speed).get(rail, rack_gbps)


@dataclass(frozen=True)
class TestbedSpec:
    """A whole emulated rack."""

    __test__ = False
    name: str
    fabric: str
    subnet_base: str
    seed: int
    rate_gbps: int
    firmware: str
    nics_per_host: int
    hosts: tuple[HostSpec, ...]
    switch: SwitchSpec
    sm: SmSpec | None
    login_user: str = DEFAULT_LOGIN_USER
    job_nodes: int = 0  # the model runs each collective as this many nodes (0: the hosts)

    @property
    def nonroot_login(self) -> bool:
        """Whether the inventory logs in as a user the testbed creates (with sudo) instead of root."""
        return self.login_user != DEFAULT_LOGIN_USER

    def host(self, name: str) -> HostSpec:
        """Return the host called ``name`` (raises KeyError)."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def mgmt_network(self) -> ipaddress.IPv4Network:
        """The management subnet (SSH, mpirun's out-of-band TCP)."""
        return ipaddress.IPv4Network(f"{self.subnet_base}.0.0/24")

    def rail_network(self, rail: int) -> ipaddress.IPv4Network:
        """The subnet of rail ``rail`` (NIC i of every host)."""
        return ipaddress.IPv4Network(f"{self.subnet_base}.{rail + 1}.0/24")


def is_testbed_name(value: str) -> bool:
    """Whether ``value`` could name a testbed (a fabric named otherwise is no testbed)."""
    return NAME_RE.fullmatch(value) is not None


def check_testbed_name(value: str, field: str = "testbed name") -> str:
    """Return ``value`` when it is a valid testbed name (a safe file name, and short enough for the
    interface names derived from it).

    Raises:
        ConfigError: naming the field and the value.
    """
    check_name(field, value)
    if not is_testbed_name(value):
        raise ConfigError(field, [f"{field}: {value!r} {NAME_RULE}"])
    return value


class _Checker:
    """Collects every problem of one document instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, value: object, why: str) -> None:
        self.problems.append(f"{path}: {value!r} {why}")

    def int_in(self, path: str, value: object, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.add(path, value, f"must be an integer from {low} to {high}")
            return low
        return value

    def choice(self, path: str, value: object, choices: tuple[Any, ...]) -> Any:
        if value not in choices:
            self.add(path, value, f"must be one of {', '.join(map(str, choices))}")
            return choices[0]
        return value

    def mapping(self, path: str, value: object, known: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.add(path, value, "must be a mapping")
            return {}
        for key in value:
            if key not in known:
                self.add(f"{path}.{key}", value[key], f"is not a known key (known: {', '.join(known)})")
        return value

    def int_list(self, path: str, value: object, length: int, low: int, high: int) -> list[int]:
        if not isinstance(value, list) or len(value) != length:
            self.add(path, value, f"must be a list of {length} integers")
            return [low] * length
        return [self.int_in(f"{path}[{i}]", v, low, high) for i, v in enumerate(value)]


TOP_KEYS = (
    "name",
    "fabric",
    "hosts",
    "seed",
    "subnet_base",
    "gpus_per_host",
    "nics_per_host",
    "sockets",
    "rate_gbps",
    "firmware",
    "initial",
    "overrides",
    "switch",
    "sm",
    "login_user",
    "tools",
    "nccl_conf",
    "job_nodes",
    "vlan",
)
# A job larger than the rack: the model runs each collective as job_nodes nodes (the real hosts and
# copies of them), so tuning at 64 or 256 nodes can be tried while only a few hosts are built.
MAX_JOB_NODES = 4096
# dscp2prio: DSCP -> priority entries over the kernel's default map (dscp >> 3), as `mlnx_qos
# --dscp2prio set,D,P` or `dcb app add ... dscp-prio D:P` leave them (formats.md 4.1, 5.1).
INITIAL_KEYS = (*DEFAULT_INITIAL, "dscp2prio")
OVERRIDE_KEYS = ("nic_numa", "initial", "gid_layout", "nccl_conf", "tools", "vlan", "link_speed")
# A port that trained below the rack's speed (a bad cable or transceiver, a lane down): a host's
# `link_speed: {NIC: Gb/s}`, the NIC as its index (1), its RDMA device (mlx5_1) or its netdev. The
# speed must be one the port supports: a rate of RATES_GBPS up to the rack's rate_gbps (an mlx5 port
# of 400 Gb/s also links at 200, 100, 50 and 25 Gb/s). Every tool that shows the port's speed shows
# it (ethtool, ibstat, sysfs ports/1/rate) and the fabric model carries every flow through it at it.
# VLAN-tagged RoCE (fabtune.sim.model.qos.tag_pcp): each RoCE port's address lives on the VLAN
# device NETDEV.ID (`ip link add link NETDEV name NETDEV.ID type vlan id ID egress-qos-map
# FROM:TO`, ip-link(8)), so RoCE's GIDs are on it and its frames carry an 802.1Q tag. The tag's PCP
# is the connection's SL on verbs (NCCL_IB_SL, perftest -S) and, on rdma_cm (perftest -R), the
# egress-qos-map entry of the ToS's skb priority (kernel cma.c iboe_tos_to_sl). A host's own
# `vlan` replaces the rack's; `vlan: false` leaves that host untagged.
VLAN_KEYS = ("id", "egress_qos_map")
VLAN_IDS = (1, 4094)  # 802.1Q: 0 and 4095 are reserved
# A host's own /etc/nccl.conf (e.g. one host whose NCCL_IB_GID_INDEX names its RoCEv1 GID): NCCL
# reads the file's KEY=value lines as if set in the environment (docs: env.rst, "NCCL_CONF_FILE").
NCCL_KEY_RE = re.compile(r"NCCL_[A-Z0-9_]{1,60}")
NCCL_VALUE_RE = re.compile(r"[A-Za-z0-9_.,:^=/+-]{0,200}")
# How a host's RoCE GID tables are filled (fabtune.sim.node.roce_gids): "standard" puts the
# RoCEv2 IPv4 GID at index 3; "ipv6-first" models a host whose RoCE netdevs also carry a global
# IPv6 address, so that address's GIDs come first and the RoCEv2 IPv4 GID lands at index 5.
# "v1-only": a NIC without RoCE v2, whose table holds only RoCEv1 entries (link-local 0, IPv4 1).
GID_LAYOUTS = ("standard", "ipv6-first", "v1-only")
SWITCH_KEYS = ("pfc_priorities", "ecn_priorities", "trust", "nodes_per_leaf", "oversubscription",
               "dscp2prio", "spines", "adaptive_routing")
SM_KEYS = ("host", "routing_engine", "adaptive_routing", "flavor", "qos", "qos_sl2vl")
ROUTING_ENGINES = ("minhop", "updn", "dnup", "ftree", "lash", "dor", "dfsssp", "sssp", "ar_updn", "ar_ftree")
# The subnet manager: upstream opensm (Debian's package) or NVIDIA's SM (its ar_* engines).
SM_FLAVORS = ("upstream", "mlnx")


def _check_initial(c: _Checker, path: str, raw: object, base: dict[str, Any]) -> dict[str, Any]:
    data = c.mapping(path, raw, INITIAL_KEYS)
    out = dict(base)
    for key, value in data.items():
        if key == "trust":
            out[key] = c.choice(f"{path}.trust", value, ("pcp", "dscp"))
        elif key in ("pfc", "ecn_np", "ecn_rp"):
            out[key] = c.int_list(f"{path}.{key}", value, PRIORITIES, 0, 1)
        elif key == "cnp_dscp":
            out[key] = c.int_in(f"{path}.cnp_dscp", value, 0, 63)
        elif key == "cnp_prio":
            out[key] = c.int_in(f"{path}.cnp_prio", value, 0, 7)
        elif key == "roce_tos":
            out[key] = c.int_in(f"{path}.roce_tos", value, 0, 255)
        elif key == "roce_mode":
            out[key] = c.choice(f"{path}.roce_mode", value, (1, 2))
        elif key == "mtu":
            out[key] = c.int_in(f"{path}.mtu", value, 1280, 9216)
        elif key == "dscp2prio":
            out[key] = {**base.get(key, {}), **_check_dscp_map(c, f"{path}.dscp2prio", value)}
    return out


def _check_dscp_map(c: _Checker, path: str, raw: object) -> dict[int, int]:
    """DSCP (0-63; a digit string too, as state.json's JSON keeps it) to priority (0-7)."""
    if not isinstance(raw, dict):
        c.add(path, raw, "must be a mapping of DSCP (0-63) to priority (0-7)")
        return {}
    out = {}
    for key, prio in raw.items():
        dscp = int(key) if isinstance(key, str) and key.isdigit() else key
        out[c.int_in(f"{path} key", dscp, 0, 63)] = c.int_in(f"{path}.{key}", prio, 0, 7)
    return out


def _check_nccl_conf(c: _Checker, path: str, raw: object) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        c.add(path, raw, "must be a mapping of NCCL_* variables to values")
        return ()
    out = []
    for key, value in raw.items():
        if not isinstance(key, str) or not NCCL_KEY_RE.fullmatch(key):
            c.add(f"{path}.{key}", value, "is not an NCCL variable name (NCCL_ then capitals, digits, _)")
        elif isinstance(value, bool) or not isinstance(value, (int, str)):
            c.add(f"{path}.{key}", value, "must be an integer or a string")
        elif not NCCL_VALUE_RE.fullmatch(str(value)):
            c.add(f"{path}.{key}", value, "must be letters, digits and _.,:^=/+- only (one line)")
        else:
            out.append((key, str(value)))
    return tuple(sorted(out))


Vlan = tuple[int | None, tuple[int, ...]]
NO_VLAN: Vlan = (None, (0,) * PRIORITIES)


def _check_vlan(c: _Checker, path: str, raw: object, base: Vlan) -> Vlan:
    """The VLAN id and egress-qos-map of a rack's or host's ``vlan`` (absent: ``base``)."""
    if raw is None:
        return base
    if raw is False:
        return NO_VLAN
    data = c.mapping(path, raw, VLAN_KEYS)
    if not data:
        if isinstance(raw, dict):
            c.add(f"{path}.id", None, f"must be a VLAN id from {VLAN_IDS[0]} to {VLAN_IDS[1]}")
        return NO_VLAN
    vid = c.int_in(f"{path}.id", data.get("id"), *VLAN_IDS)
    qos = [0] * PRIORITIES
    raw_map = data.get("egress_qos_map", {})
    if not isinstance(raw_map, dict):
        c.add(f"{path}.egress_qos_map", raw_map, "must be a mapping of skb priority (0-7) to PCP (0-7)")
        raw_map = {}
    for prio, pcp in raw_map.items():
        key = int(prio) if isinstance(prio, str) and prio.isdigit() else prio
        qos[c.int_in(f"{path}.egress_qos_map key", key, 0, PRIORITIES - 1)] = c.int_in(
            f"{path}.egress_qos_map.{prio}", pcp, 0, 7)
    return vid, tuple(qos)


def _check_tools(c: _Checker, path: str, raw: object, base: dict[str, str]) -> dict[str, str]:
    data = c.mapping(path, raw, TOOL_KEYS)
    out = dict(base)
    for key, value in data.items():
        if key == "iproute2":
            match = IPROUTE2_RE.fullmatch(str(value)) if isinstance(value, str) else None
            if match is None or tuple(int(g) for g in match.groups()) < IPROUTE2_OLDEST:
                c.add(f"{path}.iproute2", value, "must be an iproute2 release with dcb, "
                      "5.11.0 or later, as a quoted string (e.g. '6.1.0', Debian 12's)")
                continue
            out[key] = value
        elif key == "mlnx-tools":
            out[key] = c.choice(f"{path}.mlnx-tools", value, MLNX_TOOLS_RELEASES)
        elif key == "lldpad":
            out[key] = c.choice(f"{path}.lldpad", value, LLDPAD_RELEASES)
    return out


def _check_hosts(c: _Checker, doc: dict[str, Any]) -> list[str]:
    count = c.int_in("hosts", doc.get("hosts"), 2, MAX_HOSTS)
    return [f"h{i:02d}" for i in range(1, count + 1)]


def pci_bus(kind: str, index: int) -> int:
    """A PCIe bus number per device: GPUs and NICs in pairs under one switch, as on HGX boards."""
    return 0x18 + 0x10 * index + (0 if kind == "gpu" else 1)


def rail_netdev(fabric: str, rail: int) -> str:
    """The netdev name of NIC ``rail``, as udev names it on a real node (``enp41s0np0``, ``ibp25s0``)."""
    bus = pci_bus("nic", rail)
    return f"ibp{bus}s0" if fabric == "ib" else f"enp{bus}s0np0"


def _nic_index(key: object, fabric: str, nics: int) -> int | None:
    """The index of the NIC a ``link_speed`` key names (index, ``mlx5_N`` or netdev), or None."""
    if isinstance(key, str) and key.isdigit():
        key = int(key)  # state.json's JSON keeps the index as a string
    names = {f"mlx5_{i}": i for i in range(nics)} | {rail_netdev(fabric, i): i for i in range(nics)}
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return key if 0 <= key < nics else None
    return names.get(key) if isinstance(key, str) else None


def _check_link_speed(
    c: _Checker, path: str, raw: object, doc: dict[str, Any], nics: int
) -> tuple[tuple[int, int], ...]:
    """A host's ``link_speed``: each NIC it names (index, device or netdev) to a speed it supports."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        c.add(path, raw, "must be a mapping of NIC (index, mlx5_N or netdev) to Gb/s")
        return ()
    fabric = doc.get("fabric", "roce")
    rack = doc.get("rate_gbps", 400)
    top = rack if rack in RATES_GBPS else max(RATES_GBPS)
    supported = tuple(r for r in RATES_GBPS if r <= top)
    out: dict[int, int] = {}
    for key, speed in raw.items():
        index = _nic_index(key, str(fabric), nics)
        if index is None:
            c.add(f"{path} key", key, f"must name one of the host's {nics} NICs: an index from 0 to "
                  f"{nics - 1}, mlx5_N or its netdev ({rail_netdev(str(fabric), 0)}, ...)")
        elif isinstance(speed, bool) or speed not in supported:
            c.add(f"{path}.{key}", speed, f"must be a speed the port supports, in Gb/s: one of "
                  f"{', '.join(map(str, supported))} (at most the rack's rate_gbps {top})")
        else:
            out[index] = int(speed)
    return tuple(sorted(out.items()))


def _numa_of(index: int, count: int, sockets: int) -> int:
    return index * sockets // max(count, 1)


def _build_host(c: _Checker, doc: dict[str, Any], name: str, index: int) -> HostSpec:
    gpus = c.int_in("gpus_per_host", doc.get("gpus_per_host", 4), 1, 8)
    nics = c.int_in("nics_per_host", doc.get("nics_per_host", 4), 1, 8)
    sockets = c.int_in("sockets", doc.get("sockets", 2), 1, 2)
    base = _check_initial(c, "initial", doc.get("initial"), DEFAULT_INITIAL)
    overrides = c.mapping("overrides", doc.get("overrides"), tuple(_check_hosts(_Checker(), doc)))
    own = c.mapping(f"overrides.{name}", overrides.get(name), OVERRIDE_KEYS)
    initial = _check_initial(c, f"overrides.{name}.initial", own.get("initial"), base)
    nic_numa = [_numa_of(i, nics, sockets) for i in range(nics)]
    moved = c.mapping(
        f"overrides.{name}.nic_numa", own.get("nic_numa"), tuple(f"mlx5_{i}" for i in range(nics))
    )
    for dev, numa in moved.items():
        nic_numa[int(dev.split("_")[1])] = c.int_in(f"overrides.{name}.nic_numa.{dev}", numa, 0, sockets - 1)
    gpu_numa = tuple(_numa_of(i, gpus, sockets) for i in range(gpus))
    gid_layout = c.choice(f"overrides.{name}.gid_layout", own.get("gid_layout", "standard"), GID_LAYOUTS)
    # The rack's /etc/nccl.conf (top-level nccl_conf), each host's own keys over it.
    nccl_conf = tuple(sorted({
        **dict(_check_nccl_conf(c, "nccl_conf", doc.get("nccl_conf"))),
        **dict(_check_nccl_conf(c, f"overrides.{name}.nccl_conf", own.get("nccl_conf"))),
    }.items()))
    tools = _check_tools(c, f"overrides.{name}.tools", own.get("tools"),
                         _check_tools(c, "tools", doc.get("tools"), DEFAULT_TOOLS))
    vlan, egress = _check_vlan(c, f"overrides.{name}.vlan", own.get("vlan"),
                               _check_vlan(c, "vlan", doc.get("vlan"), NO_VLAN))
    speeds = _check_link_speed(c, f"overrides.{name}.link_speed", own.get("link_speed"), doc, nics)
    return HostSpec(name, index, gpus, sockets, tuple(nic_numa), gpu_numa, initial, gid_layout,
                    nccl_conf, tools, vlan, egress, speeds)


def _build_switch(c: _Checker, raw: object) -> SwitchSpec:
    data = c.mapping("switch", raw, SWITCH_KEYS)
    default = SwitchSpec()
    prios = [
        tuple(
            c.int_in(f"switch.{key}[{i}]", p, 0, 7)
            for i, p in enumerate(data.get(key, getattr(default, key)))
        )
        for key in ("pfc_priorities", "ecn_priorities")
    ]
    return SwitchSpec(
        pfc_priorities=prios[0],
        ecn_priorities=prios[1],
        trust=c.choice("switch.trust", data.get("trust", default.trust), ("dscp", "pcp")),
        nodes_per_leaf=c.int_in("switch.nodes_per_leaf", data.get("nodes_per_leaf", 32), 1, 256),
        oversubscription=float(data.get("oversubscription", 1.0)),
        dscp2prio=tuple(sorted(_check_dscp_map(c, "switch.dscp2prio", data.get("dscp2prio", {})).items())),
        spines=c.int_in("switch.spines", data.get("spines", default.spines), 1, 256),
        adaptive_routing=_check_bool(c, "switch.adaptive_routing", data.get("adaptive_routing", False)),
    )


def _check_bool(c: _Checker, path: str, value: object) -> bool:
    if not isinstance(value, bool):
        c.add(path, value, "must be true or false")
        return False
    return value


def _build_sm(c: _Checker, fabric: str, raw: object, hosts: list[str]) -> SmSpec | None:
    data = c.mapping("sm", raw, SM_KEYS)
    if fabric != "ib":
        if data:
            c.add("sm", raw, "is only valid with fabric: ib")
        return None
    host = c.choice("sm.host", data.get("host", hosts[0] if hosts else "h01"), tuple(hosts) or ("h01",))
    engine = c.choice("sm.routing_engine", data.get("routing_engine", "minhop"), ROUTING_ENGINES)
    # Adaptive routing is the NVIDIA SM's ar_* engines (on by default there, formats.md 7.2): the
    # optional flag only states it and must agree with the engine.
    ar = engine.startswith("ar_")
    given = data.get("adaptive_routing", ar)
    if given is not ar:
        c.add("sm.adaptive_routing", given,
              f"adaptive routing comes with the NVIDIA SM's ar_* engines; routing_engine {engine} "
              f"{'is' if ar else 'is not'} one")
    flavor = c.choice("sm.flavor", data.get("flavor", "mlnx" if ar else "upstream"), SM_FLAVORS)
    if ar and flavor != "mlnx":
        c.add("sm.routing_engine", engine,
              f"is an NVIDIA SM engine: upstream opensm (sm.flavor {flavor}) has none; "
              "set sm.flavor: mlnx")
    qos = _check_bool(c, "sm.qos", data.get("qos", False))
    sl2vl = tuple(c.int_list("sm.qos_sl2vl", data["qos_sl2vl"], 16, 0, 15)) if "qos_sl2vl" in data else ()
    return SmSpec(host=host, routing_engine=engine, adaptive_routing=ar, flavor=flavor, qos=qos,
                  qos_sl2vl=sl2vl)


def _check_subnet_base(c: _Checker, value: object) -> str:
    text = str(value)
    try:
        net = ipaddress.IPv4Network(f"{text}.0.0/16")
    except ValueError:
        c.add("subnet_base", value, "must be the first two octets of a /16, e.g. '10.123'")
        return "10.123"
    if not net.is_private:
        c.add("subnet_base", value, "must be a private range (the testbed never routes outside)")
    return text


def _check_login_user(c: _Checker, value: object) -> str:
    if not isinstance(value, str) or not LOGIN_USER_RE.fullmatch(value):
        c.add("login_user", value, LOGIN_USER_RULE)
        return DEFAULT_LOGIN_USER
    return value


def build_spec(doc: object, source: str = "testbed spec") -> TestbedSpec:
    """Validate a spec document and build the typed spec.

    Args:
        doc: the parsed YAML document.
        source: how to name the document in errors.

    Returns:
        The validated spec.

    Raises:
        ConfigError: listing every problem found.
    """
    c = _Checker()
    data = c.mapping("(top level)", doc, TOP_KEYS) if doc is not None else {}
    name = str(data.get("name", "fab"))
    if not NAME_RE.fullmatch(name):
        c.add("name", name, NAME_RULE)
    fabric = c.choice("fabric", data.get("fabric", "roce"), FABRICS)
    host_names = _check_hosts(c, data)
    hosts = tuple(_build_host(c, data, h, i) for i, h in enumerate(host_names, start=1))
    spec = TestbedSpec(
        name=name,
        fabric=fabric,
        subnet_base=_check_subnet_base(c, data.get("subnet_base", "10.123")),
        seed=c.int_in("seed", data.get("seed", 1), 0, 2**31 - 1),
        rate_gbps=c.choice("rate_gbps", data.get("rate_gbps", 400), RATES_GBPS),
        firmware=str(data.get("firmware", "28.39.1002")),
        nics_per_host=c.int_in("nics_per_host", data.get("nics_per_host", 4), 1, 8),
        hosts=hosts,
        switch=_build_switch(c, data.get("switch")),
        sm=_build_sm(c, fabric, data.get("sm"), host_names),
        login_user=_check_login_user(c, data.get("login_user", DEFAULT_LOGIN_USER)),
        job_nodes=c.int_in("job_nodes", data["job_nodes"], len(hosts), MAX_JOB_NODES)
        if "job_nodes" in data else 0,
    )
    if fabric == "ib" and any(h.vlan is not None for h in hosts):
        c.add("vlan", data.get("vlan") or "overrides", "is RoCE's (an 802.1Q tag on Ethernet frames): "
              "only valid with fabric: roce")
    if fabric == "ib" and spec.switch.adaptive_routing:
        c.add("switch.adaptive_routing", True, "is the RoCE switches' own: on InfiniBand adaptive "
              "routing is the subnet manager's (sm.routing_engine ar_*, sm.flavor mlnx)")
    if c.problems:
        raise ConfigError(source, sorted(set(c.problems)))
    return spec


def load_spec(path: Path | None, overrides: dict[str, Any]) -> TestbedSpec:
    """Read a spec file (or start from defaults) and apply command-line overrides."""
    doc: dict[str, Any] = {}
    source = "testbed spec (defaults)"
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(str(path), [f"cannot be read: {err}"]) from err
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(str(path), [f"(top level): {type(loaded).__name__} must be a mapping"])
        doc = loaded or {}
        source = str(path)
    doc.update({k: v for k, v in overrides.items() if v is not None})
    return build_spec(doc, source)


def spec_to_doc(spec: TestbedSpec) -> dict[str, Any]:
    """The spec as a plain document (what ``state.json`` keeps; round-trips through build_spec)."""
    doc: dict[str, Any] = {
        "name": spec.name,
        "fabric": spec.fabric,
        "hosts": len(spec.hosts),
        "seed": spec.seed,
        "subnet_base": spec.subnet_base,
        "gpus_per_host": spec.hosts[0].gpus,
        "nics_per_host": spec.nics_per_host,
        "sockets": spec.hosts[0].sockets,
        "rate_gbps": spec.rate_gbps,
        "firmware": spec.firmware,
        "switch": {
            "pfc_priorities": list(spec.switch.pfc_priorities),
            "ecn_priorities": list(spec.switch.ecn_priorities),
            "trust": spec.switch.trust,
            "nodes_per_leaf": spec.switch.nodes_per_leaf,
            "oversubscription": spec.switch.oversubscription,
            "dscp2prio": dict(spec.switch.dscp2prio),
            "spines": spec.switch.spines,
            "adaptive_routing": spec.switch.adaptive_routing,
        },
        "overrides": {
            h.name: {
                "initial": h.initial,
                "nic_numa": {f"mlx5_{i}": n for i, n in enumerate(h.nic_numa)},
                **({"gid_layout": h.gid_layout} if h.gid_layout != "standard" else {}),
                **({"nccl_conf": dict(h.nccl_conf)} if h.nccl_conf else {}),
                **({"tools": dict(h.tools)} if h.tools != DEFAULT_TOOLS else {}),
                **({"vlan": _vlan_doc(h)} if h.vlan is not None else {}),
                **({"link_speed": dict(h.link_speed)} if h.link_speed else {}),
            }
            for h in spec.hosts
        },
    }
    if spec.nonroot_login:
        doc["login_user"] = spec.login_user
    if spec.job_nodes:
        doc["job_nodes"] = spec.job_nodes
    if spec.sm is not None:
        doc["sm"] = {
            "host": spec.sm.host,
            "routing_engine": spec.sm.routing_engine,
            "adaptive_routing": spec.sm.adaptive_routing,
            "flavor": spec.sm.flavor,
            "qos": spec.sm.qos,
            **({"qos_sl2vl": list(spec.sm.qos_sl2vl)} if spec.sm.qos_sl2vl else {}),
        }
    return doc


def _vlan_doc(host: HostSpec) -> dict[str, Any]:
    """A host's ``vlan`` as the spec writes it (the map's non-zero entries)."""
    return {"id": host.vlan,
            "egress_qos_map": {p: pcp for p, pcp in enumerate(host.egress_qos_map) if pcp}}
