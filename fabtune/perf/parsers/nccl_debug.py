"""Summarise ``NCCL_DEBUG=INFO`` logs: which network and transports NCCL actually used.

Line format (nccl ``src/debug.cc``; formats.md §3): ``<host>:<pid>:<tid> [<dev>] NCCL INFO <msg>``
and ``<host>:<pid>:<tid> [<dev>] <file>:<line> [(<func>)] NCCL WARN <msg>``, optionally prefixed
by ``[YYYY-MM-DD HH:MM:SS] ``; the host part may be empty or missing in pasted logs. Older releases
print the version banner ``NCCL version 2.4.8+cuda10.1`` without a prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabtune.perf.parsers._common import content_lines, fail, to_int

TOOL = "nccl-debug"

# "<prefix> NCCL INFO|WARN|TRACE <message>"
_LINE_RE = re.compile(r"^(?P<prefix>.*?)\bNCCL (?P<level>INFO|WARN|TRACE)\s?(?P<msg>.*)$")
# "NCCL version 2.5.6+cuda10.0" (bare, older) or as an INFO message (newer).
_VERSION_RE = re.compile(r"^\s*NCCL version (?P<version>\S+)")
# "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>"; merged NICs
# "[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}"; "[RO]" = relaxed ordering.
_NET_IB_USING_RE = re.compile(r"^NET/IB\s*:\s*Using\b(?P<rest>.*)$")
_IB_DEV_RE = re.compile(
    r"\[\d+\]\s*(?P<name>[\w.\-]+):(?P<port>\d+)(?::\d+)*/(?P<ll>IB|RoCE|UNSPECIFIED)"
)
_OOB_RE = re.compile(r"OOB (?P<oob>\S+)")
_NET_IB_NONE_RE = re.compile(r"^NET/IB\s*:\s*No device found")
# "NET/Socket : Using [0]ibs85f0:192.168.1.14<0> [1]ib0:192.168.1.15<0>"
_NET_SOCKET_USING_RE = re.compile(r"^NET/Socket\s*:\s*Using\b(?P<rest>.*)$")
_SOCKET_IF_RE = re.compile(r"\[\d+\](?P<iface>[^:\s\[]+):(?P<addr>\S+?)<\d+>")
# "Using network IB" | "Using network Socket" | "Using network IBext_v8"
_USING_NETWORK_RE = re.compile(r"^Using network (?P<net>\S+)")
# "Bootstrap : Using enp220s0np0:11.1.128.136<0>" (newer: "Bootstrap: Using ...")
_BOOTSTRAP_RE = re.compile(r"^Bootstrap\s*:\s*Using (?:\[\d+\])?(?P<iface>\S+)")
# "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"; older "Channel 00 : 2[c7000] -> ..."
_CHANNEL_RE = re.compile(
    r"^Channel (?P<channel>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<srcdev>[0-9a-fA-F]+)\]"
    r" -> (?P<dst>\d+)\[(?P<dstdev>[0-9a-fA-F]+)\](?: \[(?P<dir>send|receive)\])?"
    r" via (?P<via>.+?)\s*$"
)
# "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'"
_GDR_HCA_RE = re.compile(
    r"GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<index>\d+) '(?P<name>[^']*)'"
)
# "NCCL_IB_GID_INDEX set by environment to 3." / "NCCL_NET_GDR_LEVEL set by environment to PHB"
_ENV_RE = re.compile(r"^(?P<var>NCCL_\w+) set by environment to (?P<value>.*?)\.?\s*$")
# "Connected all rings, use ring PXN 0 GDR 0" (older summary line)
_RING_GDR_RE = re.compile(r"Connected all rings.*\bGDR (?P<gdr>\d)")


@dataclass(frozen=True)
class NcclIbDevice:
    """One device of a ``NET/IB : Using`` line."""

    name: str
    port: int
    link_layer: str


@dataclass(frozen=True)
class NcclChannel:
    """One ``Channel NN/c : a[x] -> b[y] [send] via T`` line."""

    channel: int
    src_rank: int
    dst_rank: int
    via: str
    transport: str
    direction: str | None = None
    gdrdma: bool = False


@dataclass(frozen=True)
class NcclDebugSummary:
    """What a NCCL_DEBUG=INFO log says about the network and transports used."""

    version: str | None = None
    networks: tuple[str, ...] = ()
    ib_devices: tuple[NcclIbDevice, ...] = ()
    ib_relaxed_ordering: bool | None = None
    ib_no_device: bool = False
    oob_interface: str | None = None
    bootstrap_interface: str | None = None
    socket_interfaces: tuple[str, ...] = ()
    channels: tuple[NcclChannel, ...] = ()
    gdr_enabled_hcas: tuple[str, ...] = ()
    gdr_disabled_hcas: tuple[str, ...] = ()
    ring_gdr: bool | None = None
    env: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def transports(self) -> tuple[str, ...]:
        """Distinct channel transports (``NET/IB``, ``NET/Socket``, ``P2P/CUMEM``, ...)."""
        return tuple(sorted({c.transport for c in self.channels}))

    @property
    def gdrdma(self) -> bool:
        """True if any network channel used GPUDirect RDMA (``/GDRDMA``)."""
        return any(c.gdrdma for c in self.channels)

    @property
    def socket_fallback(self) -> bool:
        """True if NCCL used (or, with no IB device found, fell back to) its socket transport."""
        if "Socket" in self.networks or any(c.transport == "NET/Socket" for c in self.channels):
            return True
        return self.ib_no_device and bool(self.socket_interfaces)

    @property
    def hcas(self) -> tuple[str, ...]:
        """Names of the IB/RoCE devices NCCL picked."""
        return tuple(d.name for d in self.ib_devices)

    @property
    def gid_index(self) -> int | None:
        """``NCCL_IB_GID_INDEX`` as echoed from the environment, if it was set."""
        return self._env_int("NCCL_IB_GID_INDEX")

    @property
    def traffic_class(self) -> int | None:
        """``NCCL_IB_TC`` as echoed from the environment, if it was set."""
        return self._env_int("NCCL_IB_TC")

    def _env_int(self, name: str) -> int | None:
        value = self.env.get(name)
        return None if value is None else to_int(TOOL, value, name)


@dataclass
class _Builder:
    version: str | None = None
    networks: list[str] = field(default_factory=list)
    ib_devices: list[NcclIbDevice] = field(default_factory=list)
    ib_relaxed_ordering: bool | None = None
    ib_no_device: bool = False
    oob: str | None = None
    bootstrap: str | None = None
    socket_ifs: list[str] = field(default_factory=list)
    channels: list[NcclChannel] = field(default_factory=list)
    gdr_on: list[str] = field(default_factory=list)
    gdr_off: list[str] = field(default_factory=list)
    ring_gdr: bool | None = None
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    recognised: int = 0


def parse(text: str) -> NcclDebugSummary:
    """Summarise an NCCL_DEBUG=INFO log.

    Args:
        text: The log (other program output may interleave).

    Returns:
        The summary.

    Raises:
        ParseError: if no NCCL INFO/WARN line or version banner is found.
    """
    builder = _Builder()
    for line in content_lines(text):
        _scan_line(builder, line)
    if builder.recognised == 0:
        fail(
            TOOL,
            "no NCCL log lines found (expected lines like "
            "'<host>:<pid>:<tid> [<dev>] NCCL INFO ...' or 'NCCL version X')",
        )
    return _build(builder)


def _scan_line(builder: _Builder, line: str) -> None:
    match = _LINE_RE.match(line)
    if match is None:
        if version := _VERSION_RE.match(line):
            builder.version = version["version"]
            builder.recognised += 1
        return
    builder.recognised += 1
    message = match["msg"].strip()
    if match["level"] == "WARN":
        builder.warnings.append(message)
        return
    _scan_info(builder, message)


def _scan_info(builder: _Builder, message: str) -> None:
    if match := _CHANNEL_RE.match(message):
        builder.channels.append(_channel(match))
    elif match := _ENV_RE.match(message):
        builder.env[match["var"]] = match["value"]
    elif match := _NET_IB_USING_RE.match(message):
        _ib_using(builder, match["rest"])
    elif match := _NET_SOCKET_USING_RE.match(message):
        _add_unique(builder.socket_ifs, [f"{m['iface']}:{m['addr']}" for m in
                                         _SOCKET_IF_RE.finditer(match["rest"])])
    else:
        _scan_info_rest(builder, message)


def _scan_info_rest(builder: _Builder, message: str) -> None:
    if match := _USING_NETWORK_RE.match(message):
        _add_unique(builder.networks, [match["net"]])
    elif match := _GDR_HCA_RE.search(message):
        target = builder.gdr_on if match["state"] == "Enabled" else builder.gdr_off
        _add_unique(target, [match["name"]])
    elif _NET_IB_NONE_RE.match(message):
        builder.ib_no_device = True
    elif match := _BOOTSTRAP_RE.match(message):
        builder.bootstrap = builder.bootstrap or match["iface"]
    elif match := _VERSION_RE.match(message):
        builder.version = match["version"]
    elif match := _RING_GDR_RE.search(message):
        builder.ring_gdr = match["gdr"] == "1"


def _ib_using(builder: _Builder, rest: str) -> None:
    for match in _IB_DEV_RE.finditer(rest):
        device = NcclIbDevice(match["name"], int(match["port"]), match["ll"])
        if device not in builder.ib_devices:
            builder.ib_devices.append(device)
    builder.ib_relaxed_ordering = "[RO]" in rest
    oob = _OOB_RE.search(rest)
    if oob:
        builder.oob = oob["oob"]


def _channel(match: re.Match[str]) -> NcclChannel:
    via = match["via"]
    parts = via.split()[0].split("/")
    transport = "/".join(parts[:2])
    return NcclChannel(
        channel=int(match["channel"]),
        src_rank=int(match["src"]),
        dst_rank=int(match["dst"]),
        via=via,
        transport=transport,
        direction=match["dir"],
        gdrdma=parts[0] == "NET" and "GDRDMA" in parts,
    )


def _add_unique(target: list[str], values: list[str]) -> None:
    for value in values:
        if value not in target:
            target.append(value)


def _build(builder: _Builder) -> NcclDebugSummary:
    return NcclDebugSummary(
        version=builder.version,
        networks=tuple(builder.networks),
        ib_devices=tuple(builder.ib_devices),
        ib_relaxed_ordering=builder.ib_relaxed_ordering,
        ib_no_device=builder.ib_no_device,
        oob_interface=builder.oob,
        bootstrap_interface=builder.bootstrap,
        socket_interfaces=tuple(builder.socket_ifs),
        channels=tuple(builder.channels),
        gdr_enabled_hcas=tuple(builder.gdr_on),
        gdr_disabled_hcas=tuple(builder.gdr_off),
        ring_gdr=builder.ring_gdr,
        env=dict(builder.env),
        warnings=tuple(builder.warnings),
    )
