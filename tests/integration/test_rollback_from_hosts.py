"""A run rolled back from the hosts' own records after the controller's journal was lost.

Two moves of a journaled run are applied with a revert armed and confirmed (as the tuning loop
keeps them), the journal is deleted, and ``fabtune rollback RUN -i INV`` rebuilds the pre-run
state from the record each host kept of the run's first change, restores it and verifies it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal, default_path
from fabtune.testbed.spec import TestbedSpec
from tests.integration.ccrack import HOSTS, PROFILE, apply_armed, build, confirm, facts, inventory, on_host

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from build("tc1", "10.235")


def test_a_run_is_rolled_back_from_the_hosts_when_the_journal_is_gone(
    rack: TestbedSpec, snapshot: Any
) -> None:
    journal = Journal()
    run_id = journal.open_run("tune", rack.name, str(inventory(rack)), None)
    journal.close()
    apply_armed(rack, PROFILE, run_id, snapshot).raise_for_failure("first move")
    confirm(rack, run_id).raise_for_failure("keeping the first move")
    moved = facts(rack)
    assert moved != snapshot
    second = copy.deepcopy(PROFILE)
    second["nics"]["all"]["mtu"] = 9000
    apply_armed(rack, second, run_id, moved).raise_for_failure("second move")
    confirm(rack, run_id).raise_for_failure("keeping the second move")
    for host in HOSTS:
        mode = on_host(rack, host, f"stat -c %a /var/lib/fabtune/revert/{run_id}.prerun.json")
        assert mode.strip() == "600"
    for path in default_path().parent.glob("journal.sqlite*"):
        path.unlink()

    assert main(["rollback", run_id]) == ExitStatus.CONFIG  # no journal, no inventory: nothing to read
    assert main(["rollback", run_id, "-i", str(inventory(rack))]) == ExitStatus.OK
    assert facts(rack) == snapshot
    assert main(["rollback", "20990101-000000-abcdef", "-i", str(inventory(rack)), "--from-hosts"]) == (
        ExitStatus.CONFIG
    )
