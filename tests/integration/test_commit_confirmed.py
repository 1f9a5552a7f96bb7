"""Commit-confirmed changes on an emulated rack: a host that is not confirmed in time reverts itself.

The apply playbook arms, on each host, a transient timer (the emulated ``systemd-run``) that runs
``fabtune-revert`` (role ``fabric_revert``) unless ``playbooks/confirm.yml`` cancels it. State is read
back with the emulated tools over SSH and with ``fabric_facts``.
"""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible
from fabtune.bench.parsers import mlnx_qos
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((REPO / "inventory/profiles/roce.yml").read_text())["fabric_desired"]
HOSTS = ("h01", "h02")
NIC = "enp25s0np0"
# The deadline must outlast the rest of the apply (about 25 s on a 2-host testbed) and the checks
# after it: a revert that
# fires while the roles still run would be overwritten by them.
DEADLINE = 45


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed({"name": "itcc", "fabric": "roce", "hosts": 2, "subnet_base": "10.205",
                             "nics_per_host": 2, "gpus_per_host": 2, "seed": 7})


def inventory(spec: TestbedSpec) -> Path:
    return layout.testbed_dir(spec.name) / "inventory.yml"


def on_host(spec: TestbedSpec, host: str, command: str, ok: bool = True) -> str:
    out = subprocess.run(ssh_argv(spec.name, host, command), capture_output=True, text=True,
                         timeout=60, check=False)
    if ok:
        assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def facts(spec: TestbedSpec) -> dict[str, dict[str, Any]]:
    outcome = ansible.run_playbook("facts.yml", inventory(spec)).raise_for_failure("facts")
    gathered = outcome.results("Gather the fabric state")
    return {h: {k: v for k, v in res["ansible_facts"]["fabric_facts"].items() if k != "hardware"}
            for h, res in gathered.items()}


def tool_state(spec: TestbedSpec, host: str) -> dict[str, Any]:
    qos = mlnx_qos.parse(on_host(spec, host, f"mlnx_qos -i {NIC}"))
    return {
        "trust": qos.trust,
        "pfc": [p for p, on in enumerate(qos.pfc_enabled) if on],
        "tos": on_host(spec, host, "cat /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos").strip(),
        "mtu": on_host(spec, host, f"cat /sys/class/net/{NIC}/mtu").strip(),
        "nccl": on_host(spec, host, "cat /etc/nccl.conf 2>/dev/null || true"),
    }


def apply_armed(spec: TestbedSpec, desired: Any, run_id: str, snapshots: dict[str, Any], *,
                check: bool = False, deadline: int = DEADLINE) -> ansible.RunOutcome:
    return ansible.run_playbook("apply.yml", inventory(spec), check=check, extravars={
        "fabric_desired": desired, "fabric_revert_run_id": run_id, "fabric_revert_snapshots": snapshots,
        "fabric_revert_deadline_s": deadline})


def armed_deadline(outcome: ansible.RunOutcome) -> float:
    """The latest revert deadline the apply armed (epoch seconds), checked to be still ahead."""
    deadlines = [float(r["deadline"]) for r in outcome.results("Arm the revert to the snapshot").values()]
    assert len(deadlines) == len(HOSTS), outcome.results("Arm the revert to the snapshot")
    assert time.time() < min(deadlines), "the apply outlasted the revert deadline: raise DEADLINE"
    return max(deadlines)


def confirm(spec: TestbedSpec, run_id: str) -> ansible.RunOutcome:
    return ansible.run_playbook("confirm.yml", inventory(spec), extravars={"fabric_run_id": run_id})


def timer_active(spec: TestbedSpec, host: str, run_id: str) -> bool:
    out = on_host(spec, host, f"systemctl is-active fabtune-revert-{run_id}.timer", ok=False)
    return out.strip() == "active"


def wait_reverted(spec: TestbedSpec, run_id: str, seconds: float) -> None:
    end = time.time() + seconds
    marks = [f"/var/lib/fabtune/revert/{run_id}.reverted.json"]
    while time.time() < end:
        if all(on_host(spec, h, f"test -e {marks[0]} && echo yes || true").strip() == "yes" for h in HOSTS):
            return
        time.sleep(0.5)
    logs = {h: on_host(spec, h, "cat /var/log/fabtune-revert.log /run/systemd/transient/*.log 2>&1 || true",
                       ok=False) for h in HOSTS}
    pytest.fail(f"run {run_id} not reverted within {seconds} s: {logs}")


@pytest.fixture(scope="module")
def snapshot(rack: TestbedSpec) -> dict[str, dict[str, Any]]:
    """The factory state of each host (before any test changes anything)."""
    return facts(rack)


def test_unconfirmed_change_reverts_itself_by_the_deadline(rack: TestbedSpec, snapshot: Any) -> None:
    before = {h: tool_state(rack, h) for h in HOSTS}
    deadline = armed_deadline(apply_armed(rack, PROFILE, "cc-revert", snapshot).raise_for_failure("apply"))
    for host in HOSTS:
        got = tool_state(rack, host)
        assert got["trust"] == "dscp" and got["pfc"] == [3] and got["tos"] == "106"
        assert timer_active(rack, host, "cc-revert")
        assert on_host(rack, host, "stat -c %a /var/lib/fabtune/revert/cc-revert.json").strip() == "600"
    wait_reverted(rack, "cc-revert", deadline + 5 - time.time())
    for host in HOSTS:
        assert tool_state(rack, host) == before[host]
        assert "cc-revert: reverted" in on_host(rack, host, "cat /var/log/fabtune-revert.log")
    assert facts(rack) == snapshot
    drift = ansible.run_playbook("drift.yml", inventory(rack), extravars={
        "fabric_desired": snapshot["h01"], "fabric_enforce_couplings": False}, limit="h01")
    drift.raise_for_failure("drift")
    # The managed files are back byte for byte; the one drift left is the ToS boot file, which the
    # factory host never had (the revert restored its absence) and the snapshot's roce_tos asks for.
    drifted = {t.task for t in drift.tasks if t.changed}
    assert drifted <= {"Write the per-port ToS and mode the boot script applies"}, drifted
    assert on_host(rack, "h01", "test -e /etc/fabtune/rdma_cm.conf && echo yes || echo no").strip() == "no"
    late = confirm(rack, "cc-revert")
    assert not late.ok and "already reverted" in str(late.failures()[0].result.get("msg"))


def test_confirmed_change_stays_after_the_deadline(rack: TestbedSpec, snapshot: Any) -> None:
    deadline = armed_deadline(apply_armed(rack, PROFILE, "cc-keep", snapshot).raise_for_failure("apply"))
    confirm(rack, "cc-keep").raise_for_failure("confirm")
    for host in HOSTS:
        assert not timer_active(rack, host, "cc-keep")
    time.sleep(max(0.0, deadline + 4 - time.time()))
    for host in HOSTS:
        got = tool_state(rack, host)
        assert got["trust"] == "dscp" and got["pfc"] == [3] and got["tos"] == "106"
        assert on_host(rack, host, "ls /var/lib/fabtune/revert/cc-keep* 2>/dev/null || true").strip() == ""
    again = confirm(rack, "cc-keep")
    again.raise_for_failure("confirm again")
    assert [again.changed_count(h) for h in HOSTS] == [0, 0]


def test_rearming_replaces_the_timer(rack: TestbedSpec, snapshot: Any) -> None:
    changed = copy.deepcopy(PROFILE)
    changed["nics"]["all"]["pfc"] = [3, 4]
    kept = facts(rack)  # the confirmed profile of the previous test
    apply_armed(rack, changed, "cc-rearm", kept, deadline=300).raise_for_failure("arm long")
    first = on_host(rack, "h01", "cat /run/systemd/transient/fabtune-revert-cc-rearm.timer")
    deadline = armed_deadline(apply_armed(rack, changed, "cc-rearm", kept).raise_for_failure("re-arm"))
    second = on_host(rack, "h01", "cat /run/systemd/transient/fabtune-revert-cc-rearm.timer")
    assert "OnActiveSec=300s" in first and f"OnActiveSec={DEADLINE}s" in second
    assert tool_state(rack, "h01")["pfc"] == [3, 4]
    wait_reverted(rack, "cc-rearm", deadline + 5 - time.time())
    assert facts(rack) == kept
    for host in HOSTS:
        assert tool_state(rack, host)["pfc"] == [3]


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
