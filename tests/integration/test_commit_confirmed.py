"""Commit-confirmed changes on an emulated rack: a host that is not confirmed in time reverts itself.

The apply playbook arms, on each host, a transient timer (the emulated ``systemd-run``) that runs
``fabtune-revert`` (role ``fabric_revert``) unless ``playbooks/confirm.yml`` cancels it. State is read
back with the emulated tools over SSH and with ``fabric_facts``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fabtune import ansible
from fabtune.testbed.spec import TestbedSpec
from tests.integration.ccrack import (
    HOSTS,
    PROFILE,
    apply_armed,
    armed_deadline,
    build,
    confirm,
    facts,
    inventory,
    let_pass,
    on_host,
    shorten,
    timer_active,
    timer_of,
    tool_state,
    wait_reverted,
)

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from build("itcc", "10.205")


def test_unconfirmed_change_reverts_itself_by_the_deadline(rack: TestbedSpec, snapshot: Any) -> None:
    before = {h: tool_state(rack, h) for h in HOSTS}
    armed_deadline(apply_armed(rack, PROFILE, "cc-revert", snapshot).raise_for_failure("apply"))
    for host in HOSTS:
        got = tool_state(rack, host)
        assert got["trust"] == "dscp" and got["pfc"] == [3] and got["tos"] == "106"
        assert timer_active(rack, host, "cc-revert")
        assert on_host(rack, host, "stat -c %a /var/lib/fabtune/revert/cc-revert.json").strip() == "600"
    shorten(rack, "cc-revert", 20)
    # 20 s pass (the testbed's clock): only a deadline the extend really shortened is now past
    assert let_pass(rack, 20) == {h: [timer_of("cc-revert")] for h in HOSTS}
    wait_reverted(rack, "cc-revert", 15)
    for host in HOSTS:
        assert tool_state(rack, host) == before[host]
        assert "cc-revert: reverted" in on_host(rack, host, "cat /var/log/fabtune-revert.log")
    assert facts(rack) == snapshot
    drift = ansible.run_playbook("drift.yml", inventory(rack), extravars={
        "fabric_desired": snapshot["h01"], "fabric_enforce_couplings": False}, limit="h01")
    drift.raise_for_failure("drift")
    # The managed files are back byte for byte; the drift left is the boot files, which the factory
    # host never had (the revert restored their absence) and the snapshot's knobs ask for: the ToS
    # boot file and the knobs fabtune-boot would re-apply (/etc/fabtune/persisted.json).
    # The knob tasks record their knobs for fabtune-boot in the same module run (persist): where they
    # show drift, it is only in the record (persisted:IF.KNOB), never in a live knob.
    drifted = {t.task: t.result for t in drift.tasks if t.changed}
    files = "Install the per-port ToS file, the script that applies it and its unit and udev rule"
    assert drifted, "the boot files the snapshot asks for are missing: drift must show them"
    for task, result in drifted.items():
        if task != files:
            knobs = [c["knob"] for c in result.get("changes", [])]
            assert knobs and all(k.startswith("persisted:") for k in knobs), (task, knobs)
    assert on_host(rack, "h01", "test -e /etc/fabtune/rdma_cm.conf && echo yes || echo no").strip() == "no"
    late = confirm(rack, "cc-revert")
    assert not late.ok and "already reverted" in str(late.failures()[0].result.get("msg"))


def test_once_the_armed_run_reverted_the_roles_change_nothing(rack: TestbedSpec, snapshot: Any) -> None:
    """An apply that outlasts its deadline has its hosts revert in its middle: the roles that run
    after that refuse to change them (``fabric_apply.while_armed``), so each host stays at its
    snapshot instead of holding the rest of the move with no revert left to undo it."""
    before = {h: tool_state(rack, h) for h in HOSTS}
    apply_armed(rack, PROFILE, "cc-late", snapshot).raise_for_failure("apply")
    shorten(rack, "cc-late", 20)
    assert let_pass(rack, 20) == {h: [timer_of("cc-late")] for h in HOSTS}
    wait_reverted(rack, "cc-late", 15)
    assert {h: tool_state(rack, h) for h in HOSTS} == before
    # the same apply's roles after the revert fired: apply.yml's roles with its armed run, not armed again
    late = ansible.run_playbook("apply.yml", inventory(rack), extravars={
        "fabric_desired": PROFILE, "fabric_armed_run": "cc-late"})
    refused = late.failures()
    assert not late.ok and {t.host for t in refused} == set(HOSTS)
    for task in refused:
        assert task.result.get("reverted") is True, task.result
        assert "run cc-late was already reverted on this host" in str(task.result.get("msg"))
    assert {h: tool_state(rack, h) for h in HOSTS} == before
    assert facts(rack) == snapshot


def test_check_mode_arms_nothing(rack: TestbedSpec, snapshot: Any) -> None:
    outcome = apply_armed(rack, PROFILE, "cc-check", snapshot, check=True)
    outcome.raise_for_failure("check")
    for host in HOSTS:
        assert not timer_active(rack, host, "cc-check")
        assert on_host(rack, host, "ls /var/lib/fabtune/revert/cc-check* 2>/dev/null || true").strip() == ""
        assert on_host(rack, host, "test -d /run/systemd/system && echo yes || echo no").strip() == "no"


def test_apply_without_revert_vars_arms_nothing(rack: TestbedSpec) -> None:
    timers = on_host(rack, "h01", "systemctl list-timers --all --no-pager")
    outcome = ansible.run_playbook("apply.yml", inventory(rack), extravars={"fabric_desired": PROFILE})
    outcome.raise_for_failure("plain apply")
    assert "Install and arm the revert" not in {t.task for t in outcome.tasks if t.event == "runner_on_ok"}
    after = on_host(rack, "h01", "systemctl list-timers --all --no-pager")
    assert after.splitlines()[-1] == timers.splitlines()[-1]  # "N timers listed." unchanged
