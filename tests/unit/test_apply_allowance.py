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
