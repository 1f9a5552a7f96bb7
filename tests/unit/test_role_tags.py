"""A tuning move applies only its knobs' roles: ``fabric_roles`` names them, and the controller also
passes them as ``--tags`` so that Ansible leaves the other roles' tasks out when it loads the play
(``AnsibleBackend.apply``). That holds only while every task of a selectable role carries its role's
name as a tag, itself or through its block or ``import_tasks`` (Ansible's tag inheritance): an
untagged task would silently not run in a move. Tasks of roles included dynamically
(``include_role``: fabric_boot, fabric_revert) inherit the tags of the blocks and imports around the
include, not the include's own tags (unless it ``apply``s them): an include of a selectable role
must sit in such a block or import, or a move under ``--tags`` runs the include and none of its
tasks (a move that kept only the MTU once left fabtune-boot uninstalled, and drift found it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible
from fabtune.knobs import KNOB_BY_NAME
from fabtune.tune import backend

ROLES = Path(ansible.COLLECTIONS) / "ansible_collections" / "fabtune" / "fabric" / "roles"
SECTIONS = ("block", "rescue", "always")


Tagged = Iterator[tuple[str, frozenset[str]]]


def tagged_tasks(path: Path, inherited: frozenset[str] = frozenset()) -> Tagged:
    """Each task of a task file (blocks and ``import_tasks`` followed) with its effective tags."""
    for task in yaml.safe_load(path.read_text()) or []:
        yield from _task(path, task, inherited)


def _task(path: Path, task: dict[str, Any], inherited: frozenset[str]) -> Tagged:
    tags = inherited | frozenset(str(t) for t in task.get("tags") or [])
    imported = task.get("ansible.builtin.import_tasks") or task.get("import_tasks")
    if imported:
        yield from tagged_tasks(path.parent / str(imported), tags)
        return
    if any(k in task for k in SECTIONS):
        for key in SECTIONS:
            for inner in task.get(key) or []:
                yield from _task(path, inner, tags)
        return
    yield str(task.get("name")), tags


def selectable_roles() -> list[str]:
    """The roles a move can select: those that own a knob."""
    return sorted({k.role for k in KNOB_BY_NAME.values()})


def test_the_selectable_roles_are_the_knobs_roles() -> None:
    assert selectable_roles() == ["ib_sm", "nccl_env", "roce_cc", "roce_qos", "roce_tos"]


@pytest.mark.parametrize("role", selectable_roles())
def test_every_task_of_a_selectable_role_carries_its_name_as_a_tag(role: str) -> None:
    found = list(tagged_tasks(ROLES / role / "tasks" / "main.yml"))
    assert found, role
    untagged = [name for name, tags in found if not {role, "always"} & tags]
    assert untagged == [], f"{role}: tasks a move's --tags {role} would leave out: {untagged}"


def test_an_apply_of_some_roles_passes_them_as_tags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fabtune.inventory import InventoryInfo
    from fabtune.state import HostState

    seen: list[dict[str, Any]] = []

    def run_playbook(playbook: str, inventory: Path, **kwargs: Any) -> ansible.RunOutcome:
        seen.append({"playbook": playbook, **kwargs})
        return ansible.RunOutcome("successful", 0, {}, (), tmp_path)

    monkeypatch.setattr(ansible, "run_playbook", run_playbook)
    info = InventoryInfo(tmp_path / "inv.yml", "rack", "roce", ("h01",), (), "mpirun", None)
    be = backend.AnsibleBackend(info)
    desired = {"h01": HostState.from_tree({"nics": {"all": {"mtu": 4200}}})}
    be.apply(desired, roles=("roce_qos",))
    be.apply(desired)
    assert seen[0]["tags"] == ["roce_qos"] and seen[0]["extravars"]["fabric_roles"] == ["roce_qos"]
    assert seen[1]["tags"] == [] and "fabric_roles" not in seen[1]["extravars"]


Included = Iterator[tuple[str, frozenset[str], Any]]


def _includes(path: Path, inherited: frozenset[str] = frozenset()) -> Included:
    """Each ``include_role`` task of a task file with the tags it inherits (blocks and imports
    around it; not its own) and the tags its ``apply`` gives the included tasks."""
    for task in yaml.safe_load(path.read_text()) or []:
        yield from _include(path, task, inherited)


def _include(path: Path, task: dict[str, Any], inherited: frozenset[str]) -> Included:
    own = frozenset(str(t) for t in task.get("tags") or [])
    imported = task.get("ansible.builtin.import_tasks") or task.get("import_tasks")
    if imported:
        yield from _includes(path.parent / str(imported), inherited | own)
        return
    if any(k in task for k in SECTIONS):
        for key in SECTIONS:
            for inner in task.get(key) or []:
                yield from _include(path, inner, inherited | own)
        return
    include = task.get("ansible.builtin.include_role") or task.get("include_role")
    if include:
        applied = frozenset(str(t) for t in ((include.get("apply") or {}).get("tags") or []))
        yield str(task.get("name")), inherited | applied, include


@pytest.mark.parametrize("role", selectable_roles())
def test_the_tasks_a_role_includes_run_under_its_tag(role: str) -> None:
    found = list(_includes(ROLES / role / "tasks" / "main.yml"))
    lost = [name for name, tags, _include in found if not {role, "always"} & tags]
    assert lost == [], f"{role}: includes whose tasks a move's --tags {role} would leave out: {lost}"


def test_the_include_check_sees_an_include_outside_a_block(tmp_path: Path) -> None:
    tasks = tmp_path / "main.yml"
    tasks.write_text(yaml.safe_dump([
        {"name": "alone", "ansible.builtin.include_role": {"name": "x"}, "tags": ["r"]},
        {"name": "in a block", "tags": ["r"],
         "block": [{"name": "inner", "ansible.builtin.include_role": {"name": "x"}}]},
        {"name": "applied", "ansible.builtin.include_role": {"name": "x", "apply": {"tags": ["r"]}}},
    ]))
    found = {name: "r" in tags for name, tags, _ in _includes(tasks)}
    assert found == {"alone": False, "inner": True, "applied": True}
