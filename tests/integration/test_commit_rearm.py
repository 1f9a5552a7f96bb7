"""Commit-confirmed on an emulated rack: a confirmed change stays; re-arming replaces the timer."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from fabtune.testbed.spec import TestbedSpec
from tests.integration.ccrack import (
    DEADLINE,
    HOSTS,
    PROFILE,
    apply_armed,
    armed_deadline,
    build,
    confirm,
    facts,
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
    yield from build("itcc2", "10.215")


def test_confirmed_change_stays_after_the_deadline(rack: TestbedSpec, snapshot: Any) -> None:
    armed_deadline(apply_armed(rack, PROFILE, "cc-keep", snapshot).raise_for_failure("apply"))
    shorten(rack, "cc-keep", 45, playbook=True)  # extend.yml; the confirm below takes seconds
    confirm(rack, "cc-keep").raise_for_failure("confirm")
    for host in HOSTS:
        assert not timer_active(rack, host, "cc-keep")
    # The deadline goes by (the testbed's clock): no timer of the run is left to fire (a sleeper
    # whose record is gone fires nothing: it runs the service only for its own record)
    assert let_pass(rack, 60) == {h: [] for h in HOSTS}
    for host in HOSTS:
        got = tool_state(rack, host)
        assert got["trust"] == "dscp" and got["pfc"] == [3] and got["tos"] == "106"
        # The armed move's snapshot is gone; the run's pre-run record stays (rollback --from-hosts).
        left = on_host(rack, host, "ls /var/lib/fabtune/revert/cc-keep* 2>/dev/null || true").split()
        assert left == ["/var/lib/fabtune/revert/cc-keep.prerun.json"]
    again = confirm(rack, "cc-keep")
    again.raise_for_failure("confirm again")
    assert [again.changed_count(h) for h in HOSTS] == [0, 0]


def test_rearming_replaces_the_timer(rack: TestbedSpec, snapshot: Any) -> None:
    changed = copy.deepcopy(PROFILE)
    changed["nics"]["all"]["pfc"] = [3, 4]
    kept = facts(rack)  # the confirmed profile of the previous test
    apply_armed(rack, changed, "cc-rearm", kept, deadline=300).raise_for_failure("arm long")
    first = on_host(rack, "h01", "cat /run/systemd/transient/fabtune-revert-cc-rearm.timer")
    rearmed = apply_armed(rack, changed, "cc-rearm", kept, apply_s=30).raise_for_failure("re-arm")
    armed_deadline(rearmed)
    second = on_host(rack, "h01", "cat /run/systemd/transient/fabtune-revert-cc-rearm.timer")
    assert "OnActiveSec=300s" in first and f"OnActiveSec={DEADLINE}s" in second
    # armed for the apply's allowance on top of the deadline; the apply's end set the deadline itself
    # (the last play includes the role again, where the arm task is skipped: take the arm that ran)
    arms = {t.host: t.result for t in rearmed.tasks
            if t.task == "Arm the revert to the snapshot" and t.event == "runner_on_ok"}
    timers = {h: [a for a in r["commands"][0] if a.startswith("--on-active=")] for h, r in arms.items()}
    assert timers == {h: [f"--on-active={DEADLINE + 30:d}s"] for h in HOSTS}
    assert tool_state(rack, "h01")["pfc"] == [3, 4]
    shorten(rack, "cc-rearm", 20)
    assert let_pass(rack, 20) == {h: [timer_of("cc-rearm")] for h in HOSTS}
    wait_reverted(rack, "cc-rearm", 15)
    assert facts(rack) == kept
    for host in HOSTS:
        assert tool_state(rack, host)["pfc"] == [3]


