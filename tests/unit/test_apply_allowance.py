"""An armed apply arms each host's revert for the deadline plus the time the apply may take, so no
host reverts in the middle of it (found on the testbed: a host lost mid-apply held SSH for 30 s a
task, the apply outlasted the 60 s deadline, and the reachable host reverted while its later roles
still ran, which then left it half moved and no longer armed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabtune import ansible
from fabtune.ansible import RunOutcome
from fabtune.inventory import InventoryInfo
from fabtune.state import HostState
from fabtune.tune import backend as backend_module
from fabtune.tune.backend import APPLY_ALLOWANCE_S, AnsibleBackend


def test_the_allowance_is_twice_the_longest_apply_and_at_least_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    took = iter([45.0, 10.0, 5.0])
    sent: list[dict[str, Any]] = []

    def run_playbook(playbook: str, inventory: Path, **kwargs: Any) -> RunOutcome:
        sent.append(dict(kwargs.get("extravars") or {}))
        clock[0] += next(took)
        return RunOutcome("successful", 0, {}, (), Path("/nonexistent"))

    monkeypatch.setattr(ansible, "run_playbook", run_playbook)
    monkeypatch.setattr(backend_module.time, "monotonic", lambda: clock[0])
    info = InventoryInfo(tmp_path / "inv.yml", "rack", "roce", ("h01", "h02"), (), "mpirun", None)
    backend = AnsibleBackend(info, deadline_s=60)
    one = {"h01": HostState()}
    backend.apply(one, run_id="r", snapshots=one)  # the first: the floor
    backend.apply(one, exact=True)  # a rollback (not armed) counts as an apply all the same
    backend.apply(one, run_id="r", snapshots=one)
    assert [s.get("fabric_revert_apply_s") for s in sent] == [APPLY_ALLOWANCE_S, None, 90]
    assert sent[2]["fabric_revert_deadline_s"] == 60


def test_the_host_side_code_is_installed_once_per_run_and_host(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The revert code and fabtune-boot are the same for every move: once an apply of the run has
    installed them on a host (their tasks ran there and succeeded), later applies name that host in
    fabric_revert_installed_hosts / fabric_boot_installed_hosts and the roles skip the install."""
    def task(host: str, name: str, event: str = "runner_on_ok", **result: Any) -> ansible.TaskResult:
        return ansible.TaskResult(host, name, "fabtune.fabric.fabric_files", event, False, result)

    outcomes = iter([
        # h01 installed both; h02's revert install failed and its boot install was skipped
        (task("h01", backend_module.REVERT_INSTALL_TASK), task("h01", backend_module.BOOT_INSTALL_TASK),
         task("h02", backend_module.REVERT_INSTALL_TASK, "runner_on_failed"),
         task("h02", backend_module.BOOT_INSTALL_TASK, "runner_on_skipped", skipped=True)),
        (task("h02", backend_module.REVERT_INSTALL_TASK),),
        (),
    ])
    sent: list[dict[str, Any]] = []

    def run_playbook(playbook: str, inventory: Path, **kwargs: Any) -> RunOutcome:
        sent.append(dict(kwargs.get("extravars") or {}))
        return RunOutcome("successful", 0, {}, next(outcomes), Path("/nonexistent"))

    monkeypatch.setattr(ansible, "run_playbook", run_playbook)
    info = InventoryInfo(tmp_path / "inv.yml", "rack", "roce", ("h01", "h02"), (), "mpirun", None)
    backend = AnsibleBackend(info, deadline_s=60)
    both = {"h01": HostState(), "h02": HostState()}
    for _ in range(3):
        backend.apply(both, run_id="r", snapshots=both)
    assert [s.get("fabric_revert_installed_hosts") for s in sent] == [None, ["h01"], ["h01", "h02"]]
    assert [s.get("fabric_boot_installed_hosts") for s in sent] == [None, ["h01"], ["h01"]]
    assert AnsibleBackend(info).revert_installed == set()  # a new run (a new backend) installs again
