"""The controller reads a playbook's results by task name (``RunOutcome.results``): every name it
reads is a task of the playbook it runs. Renaming a task without the code would otherwise read as
"no result" on every host, not as an error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible, hostpackages, uninstall
from fabtune.perf import fabric, nccl, pairs
from fabtune.tune import backend, measure

COLLECTION = Path(ansible.COLLECTIONS) / "ansible_collections" / "fabtune" / "fabric"
PLAYBOOKS = COLLECTION / "playbooks"
ROLE_TASKS = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role")

READ = {
    "bench_measure.yml": [measure.READ_BEFORE, measure.READ_AFTER, measure.RUN_TASK],
    "bench_ib_write_bw.yml": [pairs.BEFORE_TASK, pairs.AFTER_TASK, pairs.CLIENTS_TASK],
    "bench_nccl.yml": [nccl.LAUNCH_TASK],
    "host_tools.yml": [hostpackages.DISTRIBUTION_TASK, hostpackages.FIND_TASK],
    "fabric_checks.yml": [fabric.READ_TASK, fabric.SMINFO_TASK],
    uninstall.PLAYBOOK: [uninstall.ARMED_TASK, uninstall.REMOVE_TASK],
}


def role_tasks(name: str) -> Any:
    """A collection role's tasks (``fabtune.fabric.NAME`` or ``NAME``)."""
    return yaml.safe_load((COLLECTION / "roles" / name.rsplit(".", 1)[-1] / "tasks" / "main.yml").read_text())


def _roles_of(node: dict[str, Any]) -> list[str]:
    """The roles a play lists or a task includes."""
    listed = [r if isinstance(r, str) else r.get("role", r.get("name")) for r in node.get("roles") or []]
    included = [node[k]["name"] for k in ROLE_TASKS if isinstance(node.get(k), dict)]
    return [str(r) for r in listed + included]


def task_names(node: Any) -> Iterator[str]:
    """Every task name in a play list, blocks, rescue/always sections and the roles it runs included."""
    if isinstance(node, list):
        for item in node:
            yield from task_names(item)
    elif isinstance(node, dict):
        if "name" in node and not {"hosts", "import_playbook"} & set(node):
            yield str(node["name"])
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from task_names(node.get(key))
        for role in _roles_of(node):
            yield from task_names(role_tasks(role))


@pytest.mark.parametrize("playbook", sorted(READ))
def test_every_task_name_the_controller_reads_is_in_its_playbook(playbook: str) -> None:
    names = set(task_names(yaml.safe_load((PLAYBOOKS / playbook).read_text())))
    missing = [n for n in READ[playbook] if n not in names]
    assert not missing, f"{playbook} has no task named {missing}"


@pytest.mark.parametrize(("tasks_file", "name"), [
    ("fabric_revert/tasks/install.yml", "REVERT_INSTALL_TASK"),
    ("fabric_boot/tasks/main.yml", "BOOT_INSTALL_TASK"),
])
def test_the_install_tasks_the_backend_reads_are_in_their_roles(tasks_file: str, name: str) -> None:
    """AnsibleBackend skips installing the host-side code where an earlier apply of the run did, read
    from these tasks' results: a renamed task would install it on every apply again, silently."""
    names = set(task_names(yaml.safe_load((COLLECTION / "roles" / tasks_file).read_text())))
    assert getattr(backend, name) in names
