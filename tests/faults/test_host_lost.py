"""Fault matrix: a host lost mid-apply and mid-rollback, and a host whose sshd does not answer.

A host that cannot be reached keeps its armed host-side revert: it goes back to the journaled
snapshot by itself at the revert deadline, and once it is back ``fabtune rollback`` restores the
pre-run state on every host.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.testbed import clock
from fabtune.testbed.spec import TestbedSpec
from tests.faults.rig import (
    CLEAN,
    NO_MOVE,
    ONE_MOVE,
    Child,
    cli,
    current_state,
    drift_from,
    factory_rack,
    inventory,
    mgmt_link,
    profile,
    tune_child,
    wait_step,
)

pytestmark = pytest.mark.testbed
DEADLINE_S = 60  # the lost host reverts itself after this; the controller's own failure path takes longer
# Past the armed deadline and the apply's allowance on top of it (fabric_revert_apply_s)
PAST_ANY_DEADLINE_S = 3600


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from factory_rack("flost", "10.244")


def _wait_clean(rack: TestbedSpec, expected: dict[str, dict[str, object]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while drift_from(expected, rack) != CLEAN and time.monotonic() < deadline:
        time.sleep(5)
    assert drift_from(expected, rack) == CLEAN


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_host_lost_mid_apply_fails_the_run_and_hosts_end_at_the_snapshot(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    options = {**ONE_MOVE, "revert_deadline_s": DEADLINE_S}
    child = tune_child(rack, tmp_path, options)
    try:
        run, _ = wait_step(child, lambda r, s: s.kind == "move" and s.state == "intent")
        time.sleep(4)  # the apply has started on both hosts
        mgmt_link(rack, "h02", up=False)
        rc = child.wait(timeout=900)
    finally:
        mgmt_link(rack, "h02", up=True)
        child.kill9()
    assert rc != 0, child.output()[-2000:]
    assert "h02" in child.output()
    failed = Journal().run(run.id)
    assert failed.state == "failed" and "h02" in str(failed.summary.get("error"))
    # h02 reverts itself at its deadline (the testbed's clock lets that time pass: no test waits a
    # real deadline out); the controller restored h01 (reachable)
    clock.advance(rack.name, PAST_ANY_DEADLINE_S, hosts=["h02"])
    _wait_clean(rack, before, 30)
    done = cli("rollback", run.id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert drift_from(before, rack) == CLEAN


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_host_lost_mid_rollback_then_rollback_again_restores(rack: TestbedSpec, tmp_path: Path) -> None:
    before = current_state(rack)
    child = tune_child(rack, tmp_path, ONE_MOVE)
    try:
        run, _ = wait_step(child, lambda r, s: s.kind == "move" and s.state == "applied")
    finally:
        child.kill9()
    undo = Child.start(tmp_path, "rollback", run.id)
    try:
        wait_step(
            undo,
            lambda r, s: r.id == run.id and s.kind == "rollback" and s.state == "intent",
            new_run=False,
        )
        mgmt_link(rack, "h02", up=False)
        rc = undo.wait(timeout=900)
    finally:
        mgmt_link(rack, "h02", up=True)
        undo.kill9()
    assert rc != 0 and "h02" in undo.output(), undo.output()[-2000:]
    assert Journal().run(run.id).state != "rolled_back"
    done = cli("rollback", run.id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert drift_from(before, rack) == CLEAN
    assert Journal().run(run.id).state == "rolled_back"


def test_sshd_not_answering_on_one_host_stops_the_run_before_any_change(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    sshd = _stop_sshd(rack, "h02")
    try:
        out = cli(
            "tune", "-i", str(inventory(rack)), "--profile", str(profile(tmp_path, NO_MOVE)), timeout=600
        )
    finally:
        subprocess.run(["kill", "-CONT", str(sshd)], check=True, timeout=10)
    assert out.returncode == ExitStatus.PLAYBOOK, out.stdout + out.stderr
    assert "h02" in out.stdout + out.stderr
    assert drift_from(before, rack) == CLEAN
    run = Journal().runs(1)[0]
    assert run.state == "failed" and "h02" in str(run.summary.get("error"))
    assert [s.state for s in Journal().steps(run.id) if s.kind == "move"] == []


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=10, check=False)
    return [int(p) for p in out.stdout.split()]


def _stop_sshd(rack: TestbedSpec, host: str) -> int:
    """Stop the host's listening sshd (its PID 1) and drop its open sessions: a new SSH connection
    is accepted by the kernel and then hears nothing, as with a hung sshd."""
    from fabtune.testbed.build import load_state

    unshare = int((load_state(rack.name) or {})["pids"][host])
    (sshd,) = _children(unshare)
    subprocess.run(["kill", "-STOP", str(sshd)], check=True, timeout=10)
    for session in _children(sshd):
        subprocess.run(["kill", "-KILL", str(session)], check=False, timeout=10)
    return sshd
