"""Emulated ``systemd-run`` (transient timers only) and ``systemctl`` (timer units) for testbed hosts.

Testbed hosts have no systemd, yet commit-confirmed changes arm a revert with
``systemd-run --unit=NAME --on-active=Ns CMD...`` and cancel it with ``systemctl stop NAME.timer``
(module ``fabtune.fabric.fabric_revert``). These tools give the same commands the same observable
behaviour:

* ``systemd-run --unit=NAME --on-active=SPAN [--timer-property=P=V]... [-q] CMD [ARGS...]`` starts a
  detached sleeper (double fork, ``setsid``, stdio on ``/dev/null``) that runs CMD after SPAN unless
  stopped, records the timer in ``/run/systemd/transient/NAME.timer`` (a unit-file-like text with an
  ``[X-Emulated]`` section: pid, deadline, state, command) and prints, like the real tool,
  ``Running timer as unit: NAME.timer`` / ``Will run service as unit: NAME.service`` on stderr.
  CMD runs with systemd's service environment (``PATH`` of the service manager, nothing else
  inherited), its output appended to ``NAME.service.log`` beside the record (the emulation's journal).
  As with ``RemainAfterElapse=yes`` (systemd's default), the timer stays loaded after it elapsed
  until ``systemctl stop``; a unit name in use is refused with systemd's message, exit 1.
* ``systemctl stop UNIT...``, ``is-active UNIT...``, ``list-timers [--all] [--no-pager]``,
  ``reset-failed [UNIT...]``; every other verb says it is not supported here, exit 1.
* ``boot_main`` (run by the host's init, ``fabtune.testbed.hostinit``, at every start of the host):
  the units enabled for ``multi-user.target`` (the ``/etc/systemd/system/multi-user.target.wants/``
  links ``systemctl enable`` makes: systemctl(1), systemd.unit(5) "wants directories"), started in
  their ``After=``/``Before=`` order as systemd orders one transaction's jobs (systemd.unit(5):
  ordering applies between units started together; an ordering on a unit not in the transaction
  is no dependency). ``Type=oneshot`` units run their ``ExecStartPre=``, ``ExecStart=`` and
  ``ExecStartPost=`` lines in turn to completion, stopping at the first that fails (``-`` prefix:
  failure ignored), under ``TimeoutStartSec=`` (default 90 s, systemd-system.conf(5)
  ``DefaultTimeoutStartSec``), after their ``ConditionPathExists=`` hold (``!`` negates); a unit
  fails when a command fails, and later units still start (a failed unit only fails the units
  that ``Requires=`` it, which the emulation does not model). ``Type=simple``/``exec`` units are
  started detached. Each unit's state (``active``, ``inactive``, ``failed``) and output go to
  ``/run/systemd/emulated-boot/NAME.{state,log}``; ``systemctl is-active NAME.service`` reads it.
  The units run before the host's sshd starts (real systemd starts sshd in parallel).

Privileges: the system manager lets only root (or whom polkit allows) change units. A non-root
caller, with no polkit rule granting ``org.freedesktop.systemd1.manage-units`` (Debian installs no
polkit by default), is refused: ``systemd-run`` prints ``Failed to start transient timer unit:
Access denied`` (exit 1); ``systemctl stop``/``reset-failed`` print ``Failed to stop UNIT: Access
denied`` and exit 4 (EXIT_NOPERMISSION, systemctl's ``translate_bus_error_to_exit_status``).
``is-active`` and ``list-timers`` are reads: anyone may.

A test's clock (``advance``, used by ``fabtune.testbed.clock``): the deadline of every timer
waiting now moves earlier, as if that much time had passed for it; each sleeper reads its record's
deadline as it waits, so it fires within half a second once its deadline is past.

The tools never create ``/run/systemd/system`` (Ansible would then take the host for a systemd
one). Paths are parameters of the entry points, so tests run them in a temporary directory.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from fabtune.sim.tools._common import err, out

RUN_DIR = Path("/run/systemd/transient")
UNIT_DIR = Path("/etc/systemd/system")
BOOT_DIR = Path("/run/systemd/emulated-boot")
BOOT_TARGET = "multi-user.target"
DEFAULT_TIMEOUT_START_S = 90.0
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SPAN_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0, "second": 1.0,
    "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0,
    "hr": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
_SPAN_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)")
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")
_TIMER_PROPERTIES = ("AccuracySec", "RandomizedDelaySec", "Persistent", "WakeSystem",
                     "RemainAfterElapse", "OnActiveSec", "OnBootSec", "OnStartupSec",
                     "OnUnitActiveSec", "OnUnitInactiveSec", "OnCalendar")


def parse_timespan(text: str) -> float | None:
    """Seconds in a systemd time span (``15``, ``15s``, ``1min 30s``, ``500ms``), or None."""
    text = text.strip()
    if not text:
        return None
    total, pos = 0.0, 0
    while pos < len(text):
        match = _SPAN_RE.match(text, pos)
        if not match or match.end() == pos:
            return None
        unit = match.group(2) or "s"
        if unit not in _SPAN_UNITS:
            return None
        total += float(match.group(1)) * _SPAN_UNITS[unit]
        pos = match.end()
    return total


@dataclass
class Timer:
    """One transient timer as recorded in ``RUN_DIR/NAME.timer``."""

    name: str
    pid: int
    deadline: float
    state: str  # waiting | running | elapsed
    command: list[str]
    on_active: float
    properties: dict[str, str]

    def text(self) -> str:
        lines = [
            "# This is a transient unit file, created programmatically via the systemd API. Do not edit.",
            "[Unit]",
            f"Description={' '.join(self.command)}",
            "",
            "[Timer]",
            f"OnActiveSec={self.on_active:g}s",
            *(f"{k}={v}" for k, v in sorted(self.properties.items())),
            "",
            "[X-Emulated]",
            f"Pid={self.pid}",
            f"Deadline={self.deadline:.3f}",
            f"State={self.state}",
            f"Command={json.dumps(self.command)}",
            "",
        ]
        return "\n".join(lines)


def _record(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.timer"


def load(run_dir: Path, name: str) -> Timer | None:
    """The recorded timer ``name`` (without suffix), or None when none is loaded."""
    path = _record(run_dir, name)
    try:
        text = path.read_text()
    except OSError:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    emu = parser["X-Emulated"]
    timer_section = parser["Timer"]
    props = {k: v for k, v in timer_section.items() if k != "OnActiveSec"}
    return Timer(name=name, pid=int(emu["Pid"]), deadline=float(emu["Deadline"]), state=emu["State"],
                 command=list(json.loads(emu["Command"])),
                 on_active=parse_timespan(timer_section.get("OnActiveSec", "0")) or 0.0,
                 properties=props)


def _save(run_dir: Path, timer: Timer) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{timer.name}.timer.{os.getpid()}"
    tmp.write_text(timer.text())
    tmp.replace(_record(run_dir, timer.name))


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / ".fabtune-emulated.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    """A live, non-zombie process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _loaded(run_dir: Path, name: str) -> Timer | None:
    """The timer when it is loaded: a waiting one whose sleeper died is gone (removed)."""
    timer = load(run_dir, name)
    if timer is not None and timer.state == "waiting" and not _alive(timer.pid):
        _record(run_dir, name).unlink(missing_ok=True)
        return None
    return timer


def _split_unit(unit: str) -> tuple[str, str]:
    """``(name, suffix)`` of a unit argument; no suffix means ``.service``, as in systemctl."""
    for suffix in (".timer", ".service"):
        if unit.endswith(suffix):
            return unit[: -len(suffix)], suffix
    return unit, ".service"


# --- systemd-run -------------------------------------------------------------------------------

_RUN_USAGE = "systemd-run [OPTIONS...] COMMAND [ARGUMENTS...]"


_TAKES_VALUE = ("--unit", "-u", "--on-active", "--timer-property", "--description", "--property", "-p",
                "--on-calendar", "--on-boot")
_IGNORED = ("--description", "--no-block", "--collect", "-G", "--property", "-p")
_REFUSED = ("--on-calendar", "--on-boot", "--scope", "--user", "--pty", "-t", "--wait")


def _run_option(opts: dict[str, object], arg: str, key: str, value: str) -> str | None:
    """Record one option in ``opts``; the error message, or None."""
    if key in ("--unit", "-u"):
        opts["unit"] = value
    elif key == "--on-active":
        seconds = parse_timespan(value)
        if seconds is None:
            return f"Failed to parse timer value: {value}"
        opts["on_active"] = seconds
    elif key == "--timer-property":
        prop, _, pval = value.partition("=")
        if prop not in _TIMER_PROPERTIES:
            return f"Unknown assignment: {value}"
        props = opts["properties"]
        assert isinstance(props, dict)
        props[prop] = pval
    elif key in ("--quiet", "-q"):
        opts["quiet"] = True
    elif key in _REFUSED:
        return f"systemd-run: {key} is not supported on this emulated host (transient timers only)"
    elif key not in _IGNORED:
        return f"systemd-run: unrecognized option '{arg}'"
    return None


def _parse_run(argv: list[str]) -> tuple[dict[str, object], list[str]] | str:
    """``(options, command)``, or the error message."""
    opts: dict[str, object] = {"properties": {}, "quiet": False}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "--":
            return opts, argv[i + 1:] if arg == "--" else argv[i:]
        key, eq, value = arg.partition("=")
        if key in _TAKES_VALUE and not eq:
            if i + 1 >= len(argv):
                return f"systemd-run: option '{key}' requires an argument"
            value, i = argv[i + 1], i + 1
        problem = _run_option(opts, arg, key, value)
        if problem:
            return problem
        i += 1
    return opts, []


def _resolve(command: list[str]) -> str | None:
    exe = command[0]
    if "/" in exe:
        return exe if os.access(exe, os.X_OK) else None
    return shutil.which(exe, path=SERVICE_PATH)


def _check_run(opts: dict[str, object], command: list[str]) -> tuple[str, list[str]] | str:
    """``(unit name, command with its executable resolved)``, or the error message."""
    if not command:
        return "Command line to execute required."
    if "on_active" not in opts:
        return "systemd-run: only transient timers (--on-active=) are supported on this emulated host"
    exe = _resolve(command)
    if exe is None:
        return f"Failed to find executable {command[0]}: No such file or directory"
    name, _suffix = _split_unit(str(opts.get("unit") or f"run-r{os.urandom(16).hex()}"))
    if not _UNIT_RE.match(name):
        return f"Failed to mangle unit name: Invalid argument ({name})"
    return name, [exe, *command[1:]]


def run_main(argv: list[str], run_dir: Path | None = None) -> int:
    """Run ``systemd-run`` with ``argv``.

    Args:
        argv: Command-line arguments (without the program name).
        run_dir: Where transient units are recorded (default ``/run/systemd/transient``).

    Returns:
        The exit status.
    """
    run_dir = run_dir or RUN_DIR
    parsed = _parse_run(argv)
    checked = _check_run(*parsed) if not isinstance(parsed, str) else parsed
    if isinstance(checked, str):
        err(checked)
        return 1
    assert not isinstance(parsed, str)
    opts, (name, command) = parsed[0], checked
    if not _privileged():
        err("Failed to start transient timer unit: Access denied")
        return 1
    on_active = float(opts["on_active"])  # type: ignore[arg-type]
    props = dict(opts["properties"])  # type: ignore[call-overload]
    with _locked(run_dir):
        if _loaded(run_dir, name) is not None:
            err(f"Failed to start transient timer unit: Unit {name}.timer was already loaded "
                "or has a fragment file.")
            return 1
        deadline = time.time() + on_active
        pid = _spawn(run_dir, name, deadline, command)
        _save(run_dir, Timer(name, pid, deadline, "waiting", command, on_active, props))
    if not opts["quiet"]:
        err(f"Running timer as unit: {name}.timer")
        err(f"Will run service as unit: {name}.service")
    return 0


def _spawn(run_dir: Path, name: str, deadline: float, command: list[str]) -> int:
    """Start the detached sleeper; return its pid (it leads its own process group, in a new session)."""
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # first child: new session, fork the sleeper, exit
        try:
            os.close(read_fd)
            os.setsid()
            sleeper = os.fork()
            if sleeper == 0:
                os.setpgid(0, 0)
                os.write(write_fd, b"%d\n" % os.getpid())
                os.close(write_fd)
                _sleeper(run_dir, name, deadline, command)
                os._exit(0)
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(write_fd)
    os.waitpid(child, 0)
    with os.fdopen(read_fd, "rb") as pipe:
        text = pipe.read().decode().strip()
    return int(text)


def _detach_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)
    os.closerange(3, 1024)


def _deadline_of(run_dir: Path, name: str, me: int, armed: float) -> float:
    """The deadline the timer's record holds now (``advance`` may have moved it), else ``armed``."""
    try:
        timer = load(run_dir, name)
    except (KeyError, ValueError, configparser.Error):
        return armed  # a record being replaced or not this emulation's: keep the last known deadline
    return timer.deadline if timer is not None and timer.pid == me else armed


def advance(run_dir: Path, seconds: float) -> list[str]:
    """Let ``seconds`` pass for the timers waiting now: each one's deadline moves that much earlier
    (a test's clock; real timers only wait). Timers armed later are not touched. Returns the names
    of the timers moved; their sleepers see the new deadline within half a second."""
    if seconds < 0:
        raise ValueError(f"seconds: {seconds!r} is negative (time only passes forward)")
    moved: list[str] = []
    with _locked(run_dir):
        for path in sorted(run_dir.glob("*.timer")):
            # load, not _loaded: a caller outside the host's PID namespace cannot tell whether a
            # sleeper lives (its pid is the host's); moving a dead sleeper's deadline changes nothing
            timer = load(run_dir, path.name[: -len(".timer")])
            if timer is not None and timer.state == "waiting":
                timer.deadline -= seconds
                _save(run_dir, timer)
                moved.append(timer.name)
    return moved


def _sleeper(run_dir: Path, name: str, deadline: float, command: list[str]) -> None:
    """Wait for the deadline, then run the service unless the timer was stopped meanwhile."""
    _detach_stdio()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    me = os.getpid()
    while (left := _deadline_of(run_dir, name, me, deadline) - time.time()) > 0:
        time.sleep(min(left, 0.5))
    with _locked(run_dir):
        timer = load(run_dir, name)
        if timer is None or timer.pid != me:
            return
        timer.state = "running"
        _save(run_dir, timer)
    env = {"PATH": SERVICE_PATH, "LANG": "C.UTF-8", "INVOCATION_ID": os.urandom(16).hex()}
    with (run_dir / f"{name}.service.log").open("ab") as log:
        log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} Started {name}.service: {' '.join(command)}\n"
                  .encode())
        log.flush()
        try:
            code = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                  cwd="/", check=False).returncode
        except OSError as exc:
            log.write(f"{name}.service: failed to execute: {exc}\n".encode())
            code = 203
        log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {name}.service: exited, status={code}\n".encode())
    with _locked(run_dir):
        timer = load(run_dir, name)
        if timer is not None and timer.pid == me:
            timer.state = "elapsed"
            _save(run_dir, timer)


# --- systemctl ---------------------------------------------------------------------------------

EXIT_NOPERMISSION = 4


def _privileged() -> bool:
    """Whether the system manager lets this caller change units (root; no polkit rules here)."""
    return os.geteuid() == 0


def _denied(verb: str, units: list[str]) -> int:
    unit = units[0] if units else ""
    name, suffix = _split_unit(unit)
    unit = f"{name}{suffix}"
    what = f"reset failed state of unit {unit}" if verb == "reset-failed" else f"{verb} {unit}"
    err(f"Failed to {what}: Access denied")
    return EXIT_NOPERMISSION

def _stop(run_dir: Path, unit: str) -> int:
    name, suffix = _split_unit(unit)
    with _locked(run_dir):
        timer = _loaded(run_dir, name)
        if timer is None or (suffix == ".service" and timer.state != "running"):
            err(f"Failed to stop {name}{suffix}: Unit {name}{suffix} not loaded.")
            return 5
        if suffix == ".timer":
            if timer.state == "waiting":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(timer.pid, signal.SIGTERM)
            _record(run_dir, name).unlink(missing_ok=True)
            return 0
        with contextlib.suppress(ProcessLookupError):  # the running service: its process group
            os.killpg(timer.pid, signal.SIGTERM)
        _record(run_dir, name).unlink(missing_ok=True)
    return 0


def _boot_state(name: str, boot_dir: Path | None = None) -> str | None:
    """The state a boot unit ``name`` (a ``.service``) ended in, or None when it did not run."""
    try:
        return (boot_dir or BOOT_DIR).joinpath(f"{name}.state").read_text().strip() or None
    except OSError:
        return None


def _is_active(run_dir: Path, units: list[str], quiet: bool) -> int:
    code = 3
    for unit in units:
        name, suffix = _split_unit(unit)
        timer = _loaded(run_dir, name)
        active = timer is not None and (suffix == ".timer" or timer.state == "running")
        state = "active" if active else "inactive"
        if timer is None and suffix == ".service":
            state = _boot_state(name + suffix) or state
            active = state == "active"
        if not quiet:
            out(state)
        if active:
            code = 0
    return code


def _list_timers(run_dir: Path, show_all: bool) -> int:
    rows = []
    for path in sorted(run_dir.glob("*.timer")) if run_dir.is_dir() else []:
        timer = _loaded(run_dir, path.name[: -len(".timer")])
        if timer is None:
            continue
        waiting = timer.state == "waiting"
        if not waiting and not show_all:
            continue
        nxt = time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(timer.deadline)) if waiting else "-"
        left = f"{max(0, int(timer.deadline - time.time()))}s" if waiting else "-"
        last = "-" if waiting else time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(timer.deadline))
        passed = "-" if waiting else f"{int(time.time() - timer.deadline)}s ago"
        rows.append((nxt, left, last, passed, f"{timer.name}.timer", f"{timer.name}.service"))
    header = ("NEXT", "LEFT", "LAST", "PASSED", "UNIT", "ACTIVATES")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        out(" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    out()
    out(f"{len(rows)} timers listed.")
    if not show_all:
        out("Pass --all to see loaded but inactive timers, too.")
    return 0


def _reset_failed(run_dir: Path, units: list[str]) -> int:
    """Nothing fails here that stays loaded: a no-op, except that an unknown named unit is an error."""
    for unit in units:
        name, suffix = _split_unit(unit)
        if _loaded(run_dir, name) is None:
            err(f"Failed to reset failed state of unit {name}{suffix}: Unit {name}{suffix} not loaded.")
            return 1
    return 0


def _stop_all(run_dir: Path, units: list[str], _flags: list[str]) -> int:
    code = 0
    for unit in units:
        code = _stop(run_dir, unit) or code
    return code


_VERBS = {
    "stop": (True, _stop_all),
    "is-active": (True, lambda d, u, f: _is_active(d, u, "--quiet" in f or "-q" in f)),
    "list-timers": (False, lambda d, _u, f: _list_timers(d, "--all" in f or "-a" in f)),
    "reset-failed": (False, lambda d, u, _f: _reset_failed(d, u)),
}
_KNOWN_FLAGS = frozenset({"--all", "-a", "--no-pager", "--quiet", "-q", "--no-legend", "--no-block"})


def systemctl_main(argv: list[str], run_dir: Path | None = None) -> int:
    """Run ``systemctl`` with ``argv`` (timer units of this emulated host only).

    Args:
        argv: Command-line arguments (without the program name).
        run_dir: Where transient units are recorded (default ``/run/systemd/transient``).

    Returns:
        The exit status.
    """
    run_dir = run_dir or RUN_DIR
    flags = [a for a in argv if a.startswith("-")]
    words = [a for a in argv if not a.startswith("-")]
    unknown = [f for f in flags if f not in _KNOWN_FLAGS]
    if unknown:
        err(f"systemctl: option {unknown[0]} is not supported on this emulated host")
        return 1
    verb = words[0] if words else "list-units"
    if verb not in _VERBS:
        err(f"systemctl {verb}: not supported on this emulated host (no systemd here; only transient "
            "timers: stop, is-active, list-timers, reset-failed)")
        return 1
    needs_units, handler = _VERBS[verb]
    if needs_units and not words[1:]:
        err("Too few arguments.")
        return 1
    if verb in ("stop", "reset-failed") and not _privileged():
        return _denied(verb, words[1:])
    return int(handler(run_dir, words[1:], flags))


# --- boot: the enabled units of multi-user.target ----------------------------------------------

Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    """A unit file as ``{section: {key: [values]}}`` (systemd.syntax(7): ``#``/``;`` comments,
    a trailing backslash continues a line, a key may repeat, an empty assignment resets it)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    lines = text.replace("\\\n", " ").splitlines()
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        key, eq, value = line.partition("=")
        if section is None or not eq:
            continue
        values = section.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return unit


def _names(unit: Unit, section: str, key: str) -> set[str]:
    return {n for value in unit.get(section, {}).get(key, []) for n in value.split()}


def boot_order(units: dict[str, Unit]) -> list[str]:
    """The units in start order: each after the units it is ``After=`` and those ``Before=`` it.

    Orderings on units outside ``units`` are ignored (not in the transaction). A cycle is broken as
    systemd breaks one, by dropping an ordering (here: starting the first remaining unit by name).
    """
    after = {name: _names(unit, "Unit", "After") & set(units) for name, unit in units.items()}
    for name, unit in units.items():
        for later in _names(unit, "Unit", "Before") & set(units):
            after[later].add(name)
    order: list[str] = []
    left = dict(after)
    while left:
        ready = sorted(n for n, deps in left.items() if not deps - set(order))
        pick = ready[0] if ready else sorted(left)[0]
        order.append(pick)
        del left[pick]
    return order


def enabled_units(unit_dir: Path, target: str = BOOT_TARGET) -> dict[str, Unit]:
    """The services ``target`` wants (its ``.wants/`` entries), parsed from their unit files."""
    wants = unit_dir / f"{target}.wants"
    units: dict[str, Unit] = {}
    for link in sorted(wants.iterdir()) if wants.is_dir() else []:
        if not link.name.endswith(".service"):
            continue
        path = link if link.exists() else unit_dir / link.name
        try:
            units[link.name] = parse_unit(path.read_text())
        except OSError:
            continue  # a dangling link: systemd skips it too (the unit is "not-found")
    return units


def _conditions_hold(unit: Unit) -> bool:
    for value in unit.get("Unit", {}).get("ConditionPathExists", []):
        negate = value.startswith("!")
        if Path(value.lstrip("!")).exists() == negate:
            return False
    return True


def _run_oneshot(service: dict[str, list[str]], log: BinaryIO) -> bool:
    """Run the ExecStartPre=, ExecStart=, ExecStartPost= lines in turn; whether the unit succeeded."""
    spans = service.get("TimeoutStartSec") or [f"{DEFAULT_TIMEOUT_START_S:g}s"]
    timeout = parse_timespan(spans[-1].replace("infinity", ""))
    env = {"PATH": SERVICE_PATH, "LANG": "C.UTF-8", "INVOCATION_ID": os.urandom(16).hex()}
    lines = [line for key in ("ExecStartPre", "ExecStart", "ExecStartPost") for line in service.get(key, [])]
    for line in lines:
        ignore = line.startswith("-")
        argv = shlex.split(line.lstrip("-@+!:"))
        try:
            code = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                  env=env, cwd="/", check=False, timeout=timeout or None).returncode
        except subprocess.TimeoutExpired:
            code = -1
        except OSError:
            code = 203
        if code != 0 and not ignore:
            return False
    return True


def _start_unit(name: str, unit: Unit, boot_dir: Path) -> str:
    """Start one unit; the state it ends in."""
    if not _conditions_hold(unit):
        return "inactive"
    service = unit.get("Service", {})
    kind = (service.get("Type") or ["simple"])[-1]
    with (boot_dir / f"{name}.log").open("ab") as log:
        log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} Starting {name}\n".encode())
        log.flush()
        if kind == "oneshot":
            ok = _run_oneshot(service, log)
            remain = (service.get("RemainAfterExit") or ["no"])[-1] in ("yes", "true", "1", "on")
            state = ("active" if remain else "inactive") if ok else "failed"
        elif kind in ("simple", "exec") and service.get("ExecStart"):
            env = {"PATH": SERVICE_PATH, "LANG": "C.UTF-8"}
            subprocess.Popen(shlex.split(service["ExecStart"][-1].lstrip("-@+!:")),
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/",
                             start_new_session=True)
            state = "active"
        else:
            log.write(f"{name}: Type={kind} is not emulated\n".encode())
            state = "failed"
        log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {name}: {state}\n".encode())
    return state


def boot_main(argv: list[str], unit_dir: Path | None = None, boot_dir: Path | None = None) -> int:
    """Start the units enabled for ``multi-user.target`` in order; 1 when any failed.

    Args:
        argv: Unused (no options).
        unit_dir: Where unit files and ``.wants/`` links live (default ``/etc/systemd/system``).
        boot_dir: Where each unit's state and log go (default ``/run/systemd/emulated-boot``).
    """
    del argv
    unit_dir, boot_dir = unit_dir or UNIT_DIR, boot_dir or BOOT_DIR
    boot_dir.mkdir(parents=True, exist_ok=True)
    units = enabled_units(unit_dir)
    failed = []
    for name in boot_order(units):
        state = _start_unit(name, units[name], boot_dir)
        (boot_dir / f"{name}.state").write_text(state + "\n")
        if state == "failed":
            failed.append(name)
    for name in failed:
        err(f"{name}: failed (see {boot_dir / name}.log)")
    return 1 if failed else 0
