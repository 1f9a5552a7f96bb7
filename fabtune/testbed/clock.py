"""A test's clock for the emulated hosts' transient timers: let time pass without waiting for it.

The revert that ``fabtune-revert`` arms is a transient timer of the emulated systemd
(``fabtune.sim.tools.systemd``). A test that needs a deadline to pass (a host that reverts a move
by itself after the controller died, or a confirmed run whose cancelled timer must not fire) would
otherwise sleep for it. :func:`advance` moves the deadline of every timer a host has waiting *now*
``seconds`` earlier, as if that much time had passed for them; timers armed later are untouched, so
a test that goes on using the rack sees the deadlines the product asks for. The timers' records are
reached from outside the host, through ``/proc/PID/root`` of the host's init (its mount namespace,
where ``/run`` is the host's own tmpfs): a host cut off its management network is reached as well.
A record's sleeper pid is the host's (its own PID namespace), so nothing here judges it.

Nothing in the product knows of this; it is the testbed's, as ``testbed reboot`` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fabtune.errors import ConfigError, TestbedError
from fabtune.sim.tools import systemd
from fabtune.testbed import build


def _run_dir(name: str, host: str, state: dict[str, object]) -> Path:
    """The host's ``/run/systemd/transient`` as its init sees it."""
    pids, started = state.get("pids", {}), state.get("started", {})
    pid = pids.get(host) if isinstance(pids, dict) else None
    when = started.get(host) if isinstance(started, dict) else None
    if not isinstance(pid, int) or not isinstance(when, int) or build._start_time(pid) != when:
        raise TestbedError(f"testbed {name!r}: host {host}'s init is not running (is the testbed up?)")
    return Path(f"/proc/{pid}/root") / systemd.RUN_DIR.relative_to("/")


def advance(name: str, seconds: float, hosts: Sequence[str] = ()) -> dict[str, list[str]]:
    """Let ``seconds`` pass for the transient timers waiting now on ``hosts`` of testbed ``name``
    (every host when empty); a timer whose deadline is then past fires within half a second.

    Returns:
        Per host, the timers moved.

    Raises:
        ConfigError: a negative ``seconds``, or a host the testbed does not have.
        TestbedError: no such testbed, or a host's init is not running.
    """
    if seconds < 0:
        raise ConfigError("seconds", [f"seconds: {seconds!r} is negative (time only passes forward)"])
    chosen = build.chosen_hosts(build.load_spec_of(name), hosts, "hosts", "hosts")
    state = build.load_state(name)
    if state is None:
        raise TestbedError(f"testbed {name!r} is not up")
    moved: dict[str, list[str]] = {}
    for host in chosen:
        run_dir = _run_dir(name, host, state)
        moved[host] = systemd.advance(run_dir, seconds) if run_dir.is_dir() else []
    return moved
