"""Emulated opensm: the subnet manager daemon of an InfiniBand testbed's SM host.

Started by ``fabtune.testbed.hostinit`` on the host(s) the spec names as subnet manager (the
builder lists it in the host's ``daemons.json``), it does what the fabric model needs of a real
opensm:

* it reads ``/etc/opensm/opensm.conf`` (the format ``opensm --create-config`` writes: ``#``
  comments, ``key value`` lines, ``(null)`` for unset, booleans ``TRUE``/``FALSE``) and validates
  it: every key must be one opensm 3.3 knows or one of NVIDIA MLNX OpenSM's adaptive-routing keys
  (``fabric_desired.py``, module_utils of the collection fabtune.fabric), routing engines must
  exist, integers must be in range;
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

No master: an invalid file (the emulation refuses it as a whole and logs why) or a stopped
daemon (``SIGTERM``/``SIGINT``: it removes ``sminfo.json``; killed outright: the record's
``heartbeat`` goes stale after ``STALE_S`` seconds) make ``sminfo`` fail as it does on a subnet
without a master SM. ``sm.json`` stays: the switches keep the routing they were last given.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from fabtune.sim.node import NicDescription, NodeState, atomic_write

CONF = Path("/etc/opensm/opensm.conf")
FABRIC_DIR = Path("/var/lib/fabtune-fabric")
SM_FILE = "sm.json"
MASTER_FILE = "sminfo.json"
POLL_S = 0.5
SWEEP_S = 1.0
STALE_S = 5.0
SMINFO_MASTER = 3
UNSET = "(null)"
DEFAULT_ENGINE = "minhop"


class ConfError(ValueError):
    """An opensm.conf the emulated SM refuses; ``problems`` names each key and why."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@cache
def _schema() -> ModuleType:
    """The collection's ``fabric_desired.py`` (opensm's keys and engines), loaded without Ansible.

    The path is ``fabtune.ansible.MODULE_UTILS``'s, spelled out: this daemon does not import
    ansible-runner.
    """
    path = (Path(__file__).resolve().parents[1] / "content" / "ansible_collections" / "fabtune"
            / "fabric" / "plugins" / "module_utils" / "fabric_desired.py")
    spec = importlib.util.spec_from_file_location("fabtune_fabric_desired_sm", path)
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with fabtune
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

    def to_json(self) -> dict[str, Any]:
        """The fabric directory's ``sm.json`` (the shape ``observe.sm_config`` reads)."""
        return {"routing_engine": self.routing_engine, "adaptive_routing": self.adaptive_routing,
                "ar_sl_mask": self.ar_sl_mask, "qos": self.qos, "lmc": self.lmc,
                "sm_priority": self.sm_priority}


def parse_conf(text: str) -> dict[str, str]:
    """``key value`` lines of an opensm.conf (comments and blank lines skipped; the last wins)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


def _bool(problems: list[str], key: str, value: str, default: bool) -> bool:
    if value in ("", UNSET):
        return default
    if value.upper() not in ("TRUE", "FALSE"):
        problems.append(f"{key}: {value!r} is not TRUE or FALSE")
        return default
    return value.upper() == "TRUE"


def _int(problems: list[str], key: str, value: str, bounds: tuple[int, int], default: int) -> int:
    if value in ("", UNSET, "-1"):  # opensm writes -1 for "not set" (qos_high_limit ...)
        return default
    try:
        number = int(value, 0)
    except ValueError:
        problems.append(f"{key}: {value!r} is not a number")
        return default
    low, high = bounds
    if not low <= number <= high:
        problems.append(f"{key}: {number} is out of range {low}..{high}")
        return default
    return number


def _engines(problems: list[str], value: str) -> str:
    if value in ("", UNSET):
        return DEFAULT_ENGINE
    engines = [e.strip() for e in value.split(",")]
    unknown = [e for e in engines if e not in _schema().ROUTING_ENGINES]
    if unknown:
        problems.append(f"routing_engine: unknown routing engine {unknown[0]!r}")
        return DEFAULT_ENGINE
    return ",".join(engines)


def settings(conf: Mapping[str, str]) -> SmSettings:
    """Validate parsed opensm.conf keys and return what the SM applies.

    Adaptive routing is on when the first routing engine is one of the NVIDIA SM's ``ar_*``
    engines, where AR is on by default (NVIDIA's AR bring-up procedure, formats.md 7.2): there is
    no separate on/off key.

    Raises:
        ConfError: on an unknown key or a value opensm would not take.
    """
    schema = _schema()
    known = schema.OPENSM_KEYS | schema.MLNX_AR_KEYS
    problems = [f"{key}: not an opensm option" for key in conf if key not in known]
    ranges = schema.SM_INT_RANGES
    for key in schema.SM_BOOL_KEYS:
        if key in conf:
            _bool(problems, key, conf[key], False)
    for key, bounds in ranges.items():
        if key in conf:
            _int(problems, key, conf[key], bounds, 0)
    engine = _engines(problems, conf.get("routing_engine", UNSET))
    result = SmSettings(
        routing_engine=engine,
        adaptive_routing=engine.split(",")[0] in schema.AR_ENGINES,
        qos=_bool(problems, "qos", conf.get("qos", UNSET), False),
        lmc=_int(problems, "lmc", conf.get("lmc", UNSET), ranges["lmc"], 0),
        sm_priority=_int(problems, "sm_priority", conf.get("sm_priority", UNSET),
                         ranges["sm_priority"], 0),
        guid=_int(problems, "guid", conf.get("guid", UNSET), (0, 2**64 - 1), 0),
    )
    if problems:
        raise ConfError(sorted(set(problems)))
    return result


def read_settings(path: Path) -> SmSettings:
    """The settings of the file at ``path`` (opensm's defaults when there is none)."""
    if not path.is_file():
        return SmSettings()
    return settings(parse_conf(path.read_text()))


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

    def __init__(self, conf_path: Path, fabric_dir: Path, state: NodeState) -> None:
        self.conf_path, self.fabric_dir, self.state = conf_path, fabric_dir, state
        self.host = state.node.hostname
        self.activity = 0
        self.applied: SmSettings | None = None
        self.port: NicDescription | None = None
        self.stamp: tuple[int, int, int] | None = None

    def reread(self) -> None:
        """Read opensm.conf again; become master with it, or withdraw when it is invalid."""
        self.stamp = _stamp(self.conf_path)
        try:
            conf = read_settings(self.conf_path)
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
        log(f"OpenSM (fabtune emulation) starting on {self.host}")
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
    args = parser.parse_args(argv)
    stop, hup = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    OpenSM(args.config, args.fabric_dir, NodeState.inside_host()).run(stop, hup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
