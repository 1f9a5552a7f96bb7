"""``fabtune apply`` on a 2-host rack is a journaled run under the fabric's lock, and
``fabtune rollback RUN`` puts the hosts back to the state the run journaled before it.

While the apply's playbook runs (seen from its first task result, so no timing is guessed), a
second fabtune run on the fabric is refused with the lock's exit code and leaves no run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from fabtune import ansible
from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.testbed.spec import TestbedSpec
from tests.integration.ccrack import build, facts, inventory

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from build("oapply", "10.193")


class SecondRun:
    """An Ansible observer that, at the apply playbook's first task, runs ``fabtune drift`` on the
    same fabric in another process and keeps how it ended."""

    def __init__(self, spec: TestbedSpec) -> None:
        self.spec = spec
        self.done: subprocess.CompletedProcess[str] | None = None

    def task(self, kind: str, _result: ansible.TaskResult) -> None:
        if kind != "apply" or self.done is not None:
            return
        inv = str(inventory(self.spec))
        argv = [sys.executable, "-m", "fabtune", "drift", "-i", inv, "--profile", "roce"]
        self.done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                                   env=dict(os.environ))

    def finished(self, kind: str, outcome: ansible.RunOutcome) -> None:
        """Nothing to do when a run ends."""


def test_apply_is_locked_and_journaled_and_rollback_restores_it(rack: TestbedSpec, snapshot: Any) -> None:
    second = SecondRun(rack)
    with ansible.observing(second):
        assert main(["apply", "-i", str(inventory(rack)), "--profile", "roce"]) == ExitStatus.OK
    assert second.done is not None, "the apply playbook reported no task"
    assert second.done.returncode == ExitStatus.LOCKED, second.done.stderr
    assert f"fabric '{rack.name}' is locked" in second.done.stderr and "(apply, since" in second.done.stderr

    # The refused drift left no run (the worker's journal holds earlier files' runs on other racks).
    (run,) = [r for r in Journal().runs() if r.fabric == rack.name]
    assert (run.kind, run.state, run.fabric) == ("apply", "done", rack.name)
    journal = Journal()
    assert [(s.kind, s.state) for s in journal.steps(run.id)] == [("snapshot", "done"), ("apply", "done")]
    assert journal.first_snapshot(run.id) == snapshot
    applied = facts(rack)
    assert applied != snapshot and sorted(run.summary["hosts_changed"]) == ["h01", "h02"]

    assert main(["rollback", run.id]) == ExitStatus.OK
    assert facts(rack) == snapshot
    assert Journal().run(run.id).state == "rolled_back"
