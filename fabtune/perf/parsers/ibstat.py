"""Parse ``ibstat`` and ``ibstatus`` (rdma-core infiniband-diags; formats.md §7.3).

ibstat: ``CA '<name>'`` then tab-indented ``Key: value`` lines (``CA type``, ``Number of ports``,
``Firmware version``, ``Hardware version``, ``Node GUID``, ``System image GUID``), and per port a
``Port N:`` line followed by doubly indented ``State``, ``Physical state``, ``Rate``,
``Base lid``, ``LMC``, ``SM lid``, ``Capability mask``, ``Port GUID``, ``Link layer``. Failures
are printed as ``ibpanic: [pid] main: ...`` and are kept in ``errors``. Values redacted to
``...`` in pasted copies are kept as None.

ibstatus: ``Infiniband device '<dev>' port <n> status:`` then tab-indented ``default gid:``,
``base lid:``, ``sm lid:``, ``state: 4: ACTIVE``, ``phys state: 5: LinkUp``,
``rate: 400 Gb/sec (4X NDR)``, ``link_layer: InfiniBand``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabtune.perf.parsers._common import content_lines, fail, to_float, to_int

TOOL = "ibstat"

_CA_RE = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
# ``ibstat CA PORT`` prints the node type and name, then that one port's block unindented
# (ca_stat() and port_dump(..., alone=1) in rdma-core's infiniband-diags/ibstat.c).
_ONE_PORT_CA_RE = re.compile(r"^(?:CA|Switch|Router): '(?P<name>[^']+)'\s*$")
_PORT_RE = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_KV_RE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z _]*?):\s*(?P<value>.*?)\s*$")
# "ibpanic: [1323906] main: stat of IB device 'mlx5_8' failed: No such file or directory"
_PANIC_RE = re.compile(r"^ibpanic: (?:\[\d+\] )?(?P<message>.*)$")
# "Rate: 56", "Rate: 2.5", "Rate: 40 (FDR10)"
_RATE_RE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?)")
_REDACTED = "..."

_CA_KEYS = {
    "CA type": "ca_type",
    "Number of ports": "num_ports",
    "Firmware version": "firmware_version",
    "Hardware version": "hardware_version",
    "Node GUID": "node_guid",
    "System image GUID": "system_image_guid",
}
_PORT_KEYS = {
    "State": "state",
    "Physical state": "physical_state",
    "Rate": "rate",
    "Effective speed": "effective_speed",
    "Base lid": "base_lid",
    "LMC": "lmc",
    "SM lid": "sm_lid",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}
_PORT_INTS = frozenset({"base_lid", "lmc", "sm_lid"})


@dataclass(frozen=True)
class IbPort:
    """One ``Port N:`` block; fields not printed (partial output) are None."""

    port: int
    state: str | None = None
    physical_state: str | None = None
    rate: str | None = None
    # The same field as ibstatus's (``IbStatusPort.rate_gbps``): a number in --json, not a string.
    rate_gbps: float | None = None
    effective_speed: str | None = None
    base_lid: int | None = None
    lmc: int | None = None
    sm_lid: int | None = None
    capability_mask: str | None = None
    port_guid: str | None = None
    link_layer: str | None = None

    @property
    def active(self) -> bool:
        """True when the port is Active and LinkUp."""
        return self.state == "Active" and self.physical_state == "LinkUp"


@dataclass(frozen=True)
class IbCa:
    """One ``CA '<name>'`` block."""

    name: str
    ca_type: str | None = None
    num_ports: int | None = None
    firmware_version: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    system_image_guid: str | None = None
    ports: tuple[IbPort, ...] = ()


@dataclass(frozen=True)
class IbStat:
    """All CAs of ibstat output, plus ``ibpanic`` messages."""

    cas: tuple[IbCa, ...]
    errors: tuple[str, ...] = ()

    def ca(self, name: str) -> IbCa:
        """Return the CA called ``name`` (``KeyError`` if absent)."""
        for ca in self.cas:
            if ca.name == name:
                return ca
        raise KeyError(f"CA {name!r} not in ibstat output")


@dataclass
class _CaBuilder:
    name: str
    values: dict[str, str | None] = field(default_factory=dict)
    ports: list[tuple[int, dict[str, str | None]]] = field(default_factory=list)


def parse(text: str) -> IbStat:
    """Parse ibstat output.

    Args:
        text: The tool's stdout/stderr.

    Returns:
        The CAs (possibly none, when the output only holds ``ibpanic`` errors).

    Raises:
        ParseError: when neither a ``CA '<name>'`` block nor an ``ibpanic`` line is found,
            when a key line comes before any CA, or on a non-numeric LID/LMC.
    """
    cas: list[_CaBuilder] = []
    errors: list[str] = []
    for number, line in enumerate(content_lines(text), start=1):
        _scan_line(cas, errors, number, line)
    if not cas and not errors:
        fail(TOOL, "no CA found (expected a line like \"CA 'mlx5_0'\")")
    return IbStat(cas=tuple(_ca(b) for b in cas), errors=tuple(errors))


def _scan_line(cas: list[_CaBuilder], errors: list[str], number: int, line: str) -> None:
    if match := _CA_RE.match(line) or _ONE_PORT_CA_RE.match(line):
        cas.append(_CaBuilder(match["name"]))
    elif match := _PANIC_RE.match(line):
        errors.append(match["message"])
    elif match := _PORT_RE.match(line):
        _current(cas, number).ports.append((int(match["port"]), {}))
    elif (match := _KV_RE.match(line)) and (line[:1].isspace() or match["key"] in _PORT_KEYS):
        _store(_current(cas, number), match["key"], match["value"])


def _current(cas: list[_CaBuilder], number: int) -> _CaBuilder:
    if not cas:
        fail(TOOL, f"line {number}: attribute line before any \"CA '<name>'\" line")
    return cas[-1]


def _store(ca: _CaBuilder, key: str, value: str) -> None:
    stored = None if value == _REDACTED else value
    if ca.ports and key in _PORT_KEYS:
        ca.ports[-1][1][_PORT_KEYS[key]] = stored
    elif key in _CA_KEYS:
        ca.values[_CA_KEYS[key]] = stored


def _ca(builder: _CaBuilder) -> IbCa:
    values = builder.values
    ports_value = values.get("num_ports")
    return IbCa(
        name=builder.name,
        ca_type=values.get("ca_type"),
        num_ports=None if ports_value is None else to_int(TOOL, ports_value, "Number of ports"),
        firmware_version=values.get("firmware_version"),
        hardware_version=values.get("hardware_version"),
        node_guid=values.get("node_guid"),
        system_image_guid=values.get("system_image_guid"),
        ports=tuple(_port(number, fields) for number, fields in builder.ports),
    )


def _rate_gbps(rate: str | None) -> float | None:
    """The ``Rate:`` figure as a number (Gb/s), without a ``(FDR10)`` suffix."""
    match = _RATE_RE.match(rate or "")
    return None if match is None else to_float(TOOL, match["gbps"], "rate")


def _port(number: int, fields: dict[str, str | None]) -> IbPort:
    ints = {k: (None if v is None else to_int(TOOL, v, k)) for k, v in fields.items()
            if k in _PORT_INTS}
    return IbPort(
        port=number,
        state=fields.get("state"),
        physical_state=fields.get("physical_state"),
        rate=fields.get("rate"),
        rate_gbps=_rate_gbps(fields.get("rate")),
        effective_speed=fields.get("effective_speed"),
        base_lid=ints.get("base_lid"),
        lmc=ints.get("lmc"),
        sm_lid=ints.get("sm_lid"),
        capability_mask=fields.get("capability_mask"),
        port_guid=fields.get("port_guid"),
        link_layer=fields.get("link_layer"),
    )


# --- ibstatus ---------------------------------------------------------------------------------

# "Infiniband device 'mlx5_0' port 1 status:"
_STATUS_HEAD_RE = re.compile(r"^Infiniband device '(?P<dev>[^']+)' port (?P<port>\d+) status:\s*$")
# "\tstate:\t\t 4: ACTIVE" / "\trate:\t\t 400 Gb/sec (4X NDR)"
_STATUS_KV_RE = re.compile(r"^\s+(?P<key>[a-z_ ]+?):\s*(?P<value>.*?)\s*$")
_CODED_RE = re.compile(r"^(?P<code>\d+):\s*(?P<name>\S+)$")
_STATUS_RATE_RE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?) Gb/sec")


@dataclass(frozen=True)
class IbStatusPort:
    """One ``Infiniband device 'X' port N status:`` block."""

    device: str
    port: int
    default_gid: str | None = None
    base_lid: str | None = None
    sm_lid: str | None = None
    state: str | None = None
    state_code: int | None = None
    phys_state: str | None = None
    phys_state_code: int | None = None
    rate: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None


def parse_ibstatus(text: str) -> tuple[IbStatusPort, ...]:
    """Parse ibstatus output.

    Args:
        text: The script's stdout.

    Returns:
        One record per device port.

    Raises:
        ParseError: if no ``Infiniband device '...' port N status:`` block is found, or the
            output reports ``Fatal error``.
    """
    blocks: list[tuple[str, int, dict[str, str]]] = []
    for number, line in enumerate(content_lines(text), start=1):
        if line.startswith("Fatal error"):
            fail("ibstatus", line.strip())
        if match := _STATUS_HEAD_RE.match(line):
            blocks.append((match["dev"], int(match["port"]), {}))
        elif (match := _STATUS_KV_RE.match(line)) and blocks:
            blocks[-1][2][match["key"].strip()] = match["value"]
        elif line.strip() and not blocks:
            fail("ibstatus", f"line {number}: text before the first device block: {line!r}")
    if not blocks:
        fail("ibstatus", "no block found (expected \"Infiniband device 'mlx5_0' port 1 status:\")")
    return tuple(_status_port(dev, port, fields) for dev, port, fields in blocks)


def _status_port(device: str, port: int, fields: dict[str, str]) -> IbStatusPort:
    state_code, state = _coded(fields.get("state"))
    phys_code, phys = _coded(fields.get("phys state"))
    rate = fields.get("rate")
    rate_match = _STATUS_RATE_RE.match(rate) if rate else None
    return IbStatusPort(
        device=device,
        port=port,
        default_gid=fields.get("default gid"),
        base_lid=fields.get("base lid"),
        sm_lid=fields.get("sm lid"),
        state=state,
        state_code=state_code,
        phys_state=phys,
        phys_state_code=phys_code,
        rate=rate,
        rate_gbps=to_float("ibstatus", rate_match["gbps"], "rate") if rate_match else None,
        link_layer=fields.get("link_layer"),
    )


def _coded(value: str | None) -> tuple[int | None, str | None]:
    if value is None:
        return None, None
    match = _CODED_RE.match(value)
    if match is None:
        return None, value
    return int(match["code"]), match["name"]
