"""Emulated opensm: the subnet manager daemon of an InfiniBand testbed's SM host.

Started by ``fabtune.testbed.hostinit`` on the host(s) the spec names as subnet manager (the
builder lists it in the host's ``daemons.json``), it does what the fabric model needs of a real
opensm:

* it reads ``/etc/opensm/opensm.conf`` (the format ``opensm --create-config`` writes: ``#``
  comments, ``key value`` lines, ``(null)`` for unset, booleans ``TRUE``/``FALSE``) as opensm's own
  parser does (``osm_subn_parse_conf_file``, ``opensm/osm_subnet.c``): a key the flavor does not
  know is reported (`` Unrecognized token: "KEY"``) and skipped, a value that does not parse is
  reported and leaves the default, an out-of-range ``lmc``/``sm_priority`` is reported and reset
  (``osm_subn_verify_config``); an unknown routing engine is reported and skipped, minhop being
  the fallback (``setup_routing_engines``, ``opensm/osm_opensm.c``). The file is never refused as a
  whole. The flavor (``--flavor``, from the testbed spec) is ``upstream`` (Debian's opensm 3.3.23:
  the keys its ``--create-config`` writes, the engines of ``osm_opensm.c``) or ``mlnx`` (NVIDIA's
  SM: also its ``ar_*`` engines, with adaptive routing, ``ar_updn`` by default, and
  ``adaptive_timeout_sl_mask``; formats.md 7.2). No NVIDIA document says how its SM treats an
  unknown key; its opensm.conf is the same format, so the same parser is assumed;
* it "sweeps": publishes the routing the switches now follow as ``sm.json`` in the shared fabric
  directory (``routing_engine``, ``adaptive_routing``, ``ar_sl_mask``, ``qos``, ``lmc``,
  ``sm_priority``: what ``fabtune.sim.observe.sm_config`` reads) and the master-SM record
  ``sminfo.json`` beside it (``lid``, ``guid``, ``activity``, ``priority``, ``state`` 3 =
  SMINFO_MASTER, ``host``, ``heartbeat``), which ``sminfo`` on every host of the subnet reads;
  the activity count grows by one per sweep (one per ``SWEEP_S`` seconds, and one per re-read);
* it re-reads the file when it changes (mtime/size/inode polled every ``POLL_S`` seconds) and on
  ``SIGHUP``. A real opensm reads the file at start and re-reads part of it on ``SIGHUP``; the
  ib_sm role's handlers restart or reload it through systemd where systemd runs. The testbed has
  no service manager, so the emulation applies the file when it changes.

No master: no local port with the configured ``guid`` (the SM cannot bind), or a stopped
daemon (``SIGTERM``/``SIGINT``: it removes ``sminfo.json``; killed outright: the record's
``heartbeat`` goes stale after ``STALE_S`` seconds) make ``sminfo`` fail as it does on a subnet
without a master SM. ``sm.json`` stays: the switches keep the routing they were last given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from fabtune.collection import module_util
from fabtune.formats import opensm_conf_lines as conf_lines
from fabtune.sim.node import FABRIC_DIR, NicDescription, NodeState, atomic_write

CONF = Path("/etc/opensm/opensm.conf")
SM_FILE = "sm.json"
MASTER_FILE = "sminfo.json"
POLL_S = 0.5
SWEEP_S = 1.0
STALE_S = 5.0
SMINFO_MASTER = 3
UNSET = "(null)"
DEFAULT_ENGINE = "minhop"


class ConfError(ValueError):
    """The SM cannot run with this configuration (no local port to bind); ``problems`` says why."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _schema() -> ModuleType:
    """The collection's ``fabric_desired.py`` (its ``OPENSM_KEYS``: every key Debian's opensm
    3.3.23 writes with ``--create-config``, compared with the real binary by a unit test), loaded
    without Ansible (``fabtune.collection`` imports no ansible-runner)."""
    return module_util("fabric_desired")


# upstream opensm's routing engines (static_routing_modules, opensm/osm_opensm.c; the comment
# ``opensm --create-config`` writes lists the same) and NVIDIA's SM's adaptive-routing engines.
UPSTREAM_ENGINES = ("none", "minhop", "updn", "dnup", "file", "ftree", "lash", "dor", "torus-2QoS",
                    "nue", "dfsssp", "sssp")
AR_ENGINES = ("ar_updn", "ar_ftree", "ar_torus", "ar_dor")
MLNX_KEYS = frozenset(("adaptive_timeout_sl_mask",))
"""Keys of NVIDIA's SM that upstream opensm does not know (MLNXSM 5.10 release notes, formats.md 7.2)."""


@dataclasses.dataclass(frozen=True)
class Flavor:
    """What one subnet manager knows: its keys, its routing engines and its default engine."""

    name: str
    extra_keys: frozenset[str]
    engines: tuple[str, ...]
    default_engine: str

    @property
    def keys(self) -> frozenset[str]:
        """Every opensm.conf key this SM reads."""
        return frozenset(_schema().OPENSM_KEYS) | self.extra_keys


FLAVORS = {
    "upstream": Flavor("upstream", frozenset(), UPSTREAM_ENGINES, DEFAULT_ENGINE),
    # NVIDIA's SM: ar_updn is its default engine since MLNXSM 5.10 (formats.md 7.2).
    "mlnx": Flavor("mlnx", MLNX_KEYS, UPSTREAM_ENGINES + AR_ENGINES, "ar_updn"),
}

# The types of the keys this emulation reads, as opt_tbl in opensm/osm_subnet.c declares them.
UINT8_KEYS = ("lmc", "sm_priority", "max_op_vls", "sm_sl")
QOS_SETS = ("qos", "qos_ca", "qos_sw0", "qos_swe", "qos_rtr")
"""The QoS parameter sets, in the order osm_subn_verify_config checks them."""
UINT32_KEYS = ("sweep_interval", *(f"{q}_max_vls" for q in QOS_SETS))
INT32_KEYS = tuple(f"{q}_high_limit" for q in QOS_SETS)
BOOL_KEYS = ("qos", "reassign_lids", "force_heavy_sweep", "sweep_on_trap", "congestion_control",
             "use_ucast_cache")
LIMITS = {"lmc": (7, 0), "sm_priority": (15, 0)}
"""osm_subn_verify_config: the largest valid value and the default it falls back to."""
REPORT_CHARS = 127
"""log_report formats into a 128-byte buffer: a longer report is cut."""
_STRTOUL = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


@dataclasses.dataclass(frozen=True)
class SmSettings:
    """What the SM applies from opensm.conf."""

    routing_engine: str = DEFAULT_ENGINE
    adaptive_routing: bool = False
    ar_sl_mask: int = 0xFFFF
    qos: bool = False
    lmc: int = 0
    sm_priority: int = 0
    guid: int = 0
    flavor: str = "upstream"
    sl2vl: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The fabric directory's ``sm.json`` (the shape ``observe.sm_config`` reads)."""
        return {"routing_engine": self.routing_engine, "adaptive_routing": self.adaptive_routing,
                "ar_sl_mask": self.ar_sl_mask, "qos": self.qos, "lmc": self.lmc,
                "sm_priority": self.sm_priority, "flavor": self.flavor, "sl2vl": list(self.sl2vl)}


def _strtoul(value: str) -> int | None:
    """strtoul(value, &end, 0) when all of ``value`` is the number, else None."""
    match = _STRTOUL.fullmatch(value)
    if match is None:
        return None
    number = int(match.group(2), 16) if match.group(2)[:2].lower() == "0x" \
        else int(match.group(2), 8 if match.group(2).startswith("0") else 10)
    return -number if match.group(1) == "-" else number


def _strtol(value: str) -> int:
    """strtol(value, NULL, 0) as opts_parse_int32 uses it: the leading number, 0 when none."""
    match = _STRTOUL.match(value)
    if match is None:
        return 0
    return _strtoul(match.group(0)) or 0


class _Report:
    """The lines opensm prints while it reads its configuration (log_report)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, text: str) -> None:
        self.lines.append(text[:REPORT_CHARS])


def _unsigned(report: _Report, key: str, value: str, bits: int) -> int | None:
    """opts_strtoul: a number in range, else the report and None (the value stays)."""
    number = _strtoul(value)
    if value == "" or number is None:
        report.add(f"-E- Parsing error in field {key}, expected numeric input received: {value}")
        return None
    if number < 0 or number >= 2 ** bits:  # strtoul wraps a negative number to a huge one
        report.add(f"-E- Parsing error in field {key}, value out of range")
        return None
    return number


def read_values(text: str, flavor: Flavor) -> tuple[dict[str, Any], list[str]]:
    """The values of the keys this emulation types, after every line of ``text``, and the report.

    A key the flavor does not know is reported and skipped; the others keep their last value.
    """
    report = _Report()
    values: dict[str, Any] = {}
    for key, value in conf_lines(text):
        if key not in flavor.keys:
            report.add(f' Unrecognized token: "{key}"')
        elif key in BOOL_KEYS:
            values[key] = value == "TRUE"  # opts_parse_boolean: anything else is FALSE
        elif key in UINT8_KEYS or key in UINT32_KEYS:
            number = _unsigned(report, key, value, 8 if key in UINT8_KEYS else 32)
            if number is not None:
                values[key] = number
        elif key in INT32_KEYS:
            values[key] = _strtol(value)
        elif key == "guid":
            number = _unsigned(report, key, value, 64)
            if number is not None:
                values[key] = number
        else:
            values[key] = None if value == UNSET else value
    _verify(report, values)
    return values, report.lines


def _verify(report: _Report, values: dict[str, Any]) -> None:
    """osm_subn_verify_config for the keys typed here: out of range, reported, back to default."""
    for key, (high, default) in LIMITS.items():
        if values.get(key, default) > high:
            report.add(f" Invalid Cached Option Value:{key} = {values[key]}:Using Default:{default}")
            values[key] = default
    if not values.get("qos"):
        return
    # subn_verify_max_vls/subn_verify_high_limit: the report names the QoS default
    # (OSM_DEFAULT_QOS_MAX_VLS 15, OSM_DEFAULT_QOS_HIGH_LIMIT 0, include/opensm/osm_base.h); the
    # value becomes "unset" (0, -1), which the QoS setup replaces with that default.
    for q in QOS_SETS:
        max_vls = values.get(f"{q}_max_vls", 0)
        if max_vls > 15:
            report.add(f" Invalid Cached Option: {q}_max_vls={max_vls}: Using Default = 15")
            values[f"{q}_max_vls"] = 0
        high_limit = values.get(f"{q}_high_limit", -1)
        if high_limit > 255:
            report.add(f" Invalid Cached Option: {q}_high_limit={high_limit}: Using Default: 0")
            values[f"{q}_high_limit"] = -1
        _verify_sl2vl(report, q, values.get(f"{q}_sl2vl"))


def _verify_sl2vl(report: _Report, q: str, text: str | None) -> None:
    """subn_verify_sl2vl: warn about entries that are no VL 0-15 and about a list not of 16."""
    if text is None:
        return
    tokens = [t for t in re.split(r"[,\n]+", text) if t]
    for tok in tokens:
        match = _STRTOUL.match(tok)
        rest = tok[match.end():] if match else tok
        if rest:
            report.add(f" Warning: Cached Option {q}_sl2vl:vl={tok} improperly formatted")
        elif not 0 <= (_strtoul(tok) or 0) <= 15:
            report.add(f" Warning: Cached Option {q}_sl2vl:vl={_strtoul(tok)} out of range")
    if len(tokens) < 16:
        report.add(f" Warning: Cached Option {q}_sl2vl: < 16 VLs listed")
    elif len(tokens) > 16:
        report.add(f" Warning: Cached Option {q}_sl2vl: > 16 listed: excess VLs will be dropped")


def routing_engines(value: str | None, flavor: Flavor) -> tuple[str, list[str]]:
    """The engine chain opensm sets up, and its error lines (setup_routing_engines): each unknown
    name is reported and skipped; with none named, the flavor's default."""
    if not value:
        return flavor.default_engine, []
    chain, errors = [], []
    for name in re.split(r"[, \t\n]+", value):
        if not name or name == "no_fallback":
            continue
        if name in flavor.engines:
            chain.append(name)
        else:
            errors.append(f"ERR: cannot find or setup routing engine '{name}'")
    return ",".join(chain) or DEFAULT_ENGINE, errors


def settings(text: str, flavor: Flavor = FLAVORS["upstream"]) -> tuple[SmSettings, list[str]]:
    """What the SM applies from an opensm.conf text, and what it reports while reading it.

    Adaptive routing is on when the first routing engine is one of the NVIDIA SM's ``ar_*``
    engines, where AR is on by default (NVIDIA's AR bring-up procedure, formats.md 7.2): there is
    no separate on/off key.
    """
    values, report = read_values(text, flavor)
    engine, errors = routing_engines(values.get("routing_engine"), flavor)
    result = SmSettings(
        routing_engine=engine, adaptive_routing=engine.split(",")[0] in AR_ENGINES,
        qos=bool(values.get("qos", False)), lmc=int(values.get("lmc", 0)),
        sm_priority=int(values.get("sm_priority", 0)), guid=int(values.get("guid", 0)),
        flavor=flavor.name, sl2vl=sl2vl(values) if values.get("qos") else (),
    )
    return result, report + errors


def _vls(text: str | None) -> list[int]:
    """The VLs of an SL2VL list as parse_sl2vl_entry (opensm/osm_qos.c) reads them: each entry's
    leading number (strtoul; none is 0) in 4 bits, the first 16 entries, missing ones 0."""
    return [_strtol(tok) & 0xF for tok in text.split(",")[:16]] if text else []


def sl2vl(values: dict[str, Any]) -> tuple[int, ...]:
    """The VL of each SL on the CAs (qos_ca_sl2vl, else qos_sl2vl: qos_build_config,
    opensm/osm_qos.c), 15 wherever the CAs' or the switches' external ports' table maps it to VL15,
    which drops the SL (doc/QoS_management_in_OpenSM.txt section 7); () when neither is set."""
    generic = values.get("qos_sl2vl")
    ca = _vls(values.get("qos_ca_sl2vl") or generic)
    swe = _vls(values.get("qos_swe_sl2vl") or generic)
    if not ca and not swe:
        return ()
    ca += [0] * (16 - len(ca))
    swe += [0] * (16 - len(swe))
    return tuple(15 if 15 in (c, s) else c for c, s in zip(ca, swe, strict=True))


def read_settings(path: Path, flavor: Flavor = FLAVORS["upstream"]) -> tuple[SmSettings, list[str]]:
    """The settings of the file at ``path`` and the report (opensm's defaults when there is none)."""
    if not path.is_file():
        return SmSettings(routing_engine=flavor.default_engine,
                          adaptive_routing=flavor.default_engine in AR_ENGINES,
                          flavor=flavor.name), []
    return settings(path.read_text(), flavor)


def sm_port(state: NodeState, guid: int = 0) -> NicDescription:
    """The port the SM binds: the one with port GUID ``guid``, or the first IB port (``guid 0``).

    Raises:
        ConfError: when the node has no such InfiniBand port.
    """
    ports = [n for n in state.node.nics if n.is_ib]
    chosen = [n for n in ports if n.port_guid == guid] if guid else ports[:1]
    if not chosen:
        raise ConfError([f"guid: no local InfiniBand port 0x{guid:016x}" if guid
                         else "no InfiniBand port to bind"])
    return chosen[0]


def master_record(port: NicDescription, conf: SmSettings, activity: int, host: str,
                  now: float) -> dict[str, Any]:
    """The master-SM record ``sminfo`` answers with."""
    return {"lid": port.lid, "guid": f"0x{port.port_guid:016x}", "activity": activity,
            "priority": conf.sm_priority, "state": SMINFO_MASTER, "host": host, "heartbeat": now}


def publish(fabric_dir: Path, conf: SmSettings, record: dict[str, Any]) -> None:
    """Write ``sm.json`` (when it changed) and ``sminfo.json`` into the fabric directory."""
    sm_path = fabric_dir / SM_FILE
    text = json.dumps(conf.to_json(), indent=2) + "\n"
    if not sm_path.is_file() or sm_path.read_text() != text:
        atomic_write(sm_path, text)
    atomic_write(fabric_dir / MASTER_FILE, json.dumps(record) + "\n")


def withdraw(fabric_dir: Path, host: str) -> None:
    """Remove the master record, when it is this host's."""
    path = fabric_dir / MASTER_FILE
    try:
        if json.loads(path.read_text()).get("host") == host:
            path.unlink()
    except (OSError, ValueError):
        pass


def master(fabric_dir: Path, now: float | None = None) -> dict[str, Any] | None:
    """The master-SM record of the subnet, or None (none published, or its daemon is gone)."""
    try:
        record: dict[str, Any] = json.loads((fabric_dir / MASTER_FILE).read_text())
    except (OSError, ValueError):
        return None
    beat = record.get("heartbeat")
    if beat is not None and (time.time() if now is None else now) - float(beat) > STALE_S:
        return None
    return record


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def log(text: str) -> None:
    """One line of the SM log (stdout: ``/var/log/opensm.log`` on the testbed)."""
    stamp = time.strftime("%b %d %H:%M:%S")
    sys.stdout.write(f"{stamp} [{os.getpid()}] {text}\n")
    sys.stdout.flush()


class OpenSM:
    """The daemon's state: what it applied, its activity count, where it publishes."""

    def __init__(self, conf_path: Path, fabric_dir: Path, state: NodeState,
                 flavor: Flavor = FLAVORS["upstream"]) -> None:
        self.conf_path, self.fabric_dir, self.state = conf_path, fabric_dir, state
        self.flavor = flavor
        self.host = state.node.hostname
        self.activity = 0
        self.applied: SmSettings | None = None
        self.port: NicDescription | None = None
        self.stamp: tuple[int, int, int] | None = None

    def reread(self) -> None:
        """Read opensm.conf again (logging what opensm reports about it); become master with it,
        or withdraw when it names no local port."""
        self.stamp = _stamp(self.conf_path)
        try:
            conf, report = read_settings(self.conf_path, self.flavor)
            for line in report:
                log(line)
            port = sm_port(self.state, conf.guid)
        except (ConfError, OSError) as e:
            problems = e.problems if isinstance(e, ConfError) else [str(e)]
            log(f"ERR: {self.conf_path}: {'; '.join(problems)}: not master")
            self.applied = self.port = None
            withdraw(self.fabric_dir, self.host)
            return
        if conf != self.applied:
            log(f"{self.conf_path}: routing_engine {conf.routing_engine}, adaptive routing "
                f"{'on' if conf.adaptive_routing else 'off'}, sm_priority {conf.sm_priority}")
        self.applied, self.port = conf, port
        self.sweep()

    def sweep(self) -> None:
        """One sweep: publish the routing and the master record (no-op while not master)."""
        if self.applied is None or self.port is None:
            return
        self.activity += 1
        record = master_record(self.port, self.applied, self.activity, self.host, time.time())
        publish(self.fabric_dir, self.applied, record)

    def changed(self) -> bool:
        """Whether opensm.conf differs from what was last read."""
        return _stamp(self.conf_path) != self.stamp

    def run(self, stop: threading.Event, hup: threading.Event) -> None:
        """Sweep until ``stop`` is set; re-read on change or ``hup``; withdraw at the end."""
        log(f"OpenSM (fabtune emulation, {self.flavor.name} flavor) starting on {self.host}")
        self.reread()
        next_sweep = time.monotonic() + SWEEP_S
        try:
            while not stop.wait(POLL_S):
                if hup.is_set() or self.changed():
                    hup.clear()
                    self.reread()
                    next_sweep = time.monotonic() + SWEEP_S
                elif time.monotonic() >= next_sweep:
                    self.sweep()
                    next_sweep = time.monotonic() + SWEEP_S
        finally:
            withdraw(self.fabric_dir, self.host)
            log("Exiting SM")


def main(argv: list[str] | None = None) -> int:
    """``python -m fabtune.sim.opensm [--config FILE] [--fabric-dir DIR]`` (inside a host)."""
    parser = argparse.ArgumentParser(prog="opensm", description=__doc__.splitlines()[0])
    parser.add_argument("--config", "-F", type=Path, default=CONF)
    parser.add_argument("--fabric-dir", type=Path, default=FABRIC_DIR)
    parser.add_argument("--flavor", choices=tuple(FLAVORS), default="upstream")
    args = parser.parse_args(argv)
    stop, hup = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    OpenSM(args.config, args.fabric_dir, NodeState.inside_host(),
           FLAVORS[args.flavor]).run(stop, hup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
