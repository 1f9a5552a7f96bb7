"""Privilege of every task of the collection: become exactly where a task needs root.

Every task of every role (tasks and handlers) and playbook is classified by what it does. A task
that changes the host (files under /etc or /usr/local, sysfs/configfs knobs, DCB netlink, units)
must escalate (``become: true`` on the task or an enclosing block); a task that only reads or runs
a benchmark must not. A module or command missing from the tables fails the test, so each new task
is classified here. Plays never escalate as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune.ansible import COLLECTION

# Modules whose every use by the roles changes the host.
PRIVILEGED_MODULES = {
    "ansible.builtin.file": "creates/removes files under /etc, /usr/local",
    "ansible.builtin.copy": "installs files under /usr/local",
    "ansible.builtin.template": "writes /etc and /usr/local files, units",
    "ansible.builtin.systemd_service": "systemctl enable/restart/daemon-reload",
    "fabtune.fabric.fabric_qos": "mlnx_qos/dcb set: DCB netlink (CAP_NET_ADMIN) and mlx5 sysfs",
    "fabtune.fabric.fabric_sysfs": "sysfs/configfs knobs (root-owned 0644), ip link set mtu",
    "fabtune.fabric.fabric_revert": "systemd-run/systemctl stop and /var/lib state",
    "fabtune.fabric.fabric_persist": "writes /etc/fabtune/persisted.json",
    "fabtune.fabric.fabric_files": "installs files, units and links under /etc and /usr/local",
    "fabtune.fabric.fabric_sm_conf": "creates and edits /etc/opensm/opensm.conf (root-owned 0644)",
    "fabtune.fabric.fabric_remove": "removes fabtune's files under /etc, /usr/local, /var; systemctl stop",
}
# Modules that only read or steer the play.
UNPRIVILEGED_MODULES = {
    "fabtune.fabric.fabric_validate": "reads sysfs",
    "fabtune.fabric.fabric_run": "runs the login user's benchmark clients (perftest needs no root)",
    "ansible.builtin.set_fact": "controller side",
    "ansible.builtin.assert": "controller side",
    "ansible.builtin.stat": "stat of a world-readable path",
    "ansible.builtin.find": "lists fabtune's world-readable state directories",
    "ansible.builtin.slurp": "reads world-readable files (/etc/nccl.conf)",
    "ansible.builtin.setup": "the distribution facts",
    "ansible.builtin.meta": "flow control",
    "ansible.builtin.async_status": "reads the login user's own async job",
    "ansible.builtin.include_role": "the included tasks carry their own become",
    "ansible.builtin.import_tasks": "the imported tasks carry their own become",
    "ansible.builtin.debug": "controller side",
}
# Facts: every read works for any user except sminfo (umad), so only InfiniBand escalates.
CONDITIONAL_MODULES = {"fabtune.fabric.fabric_facts": "{{ fabric_facts_become | bool }}"}
# ansible.builtin.command by its program.
PRIVILEGED_COMMANDS = {
    "sminfo": "opens a umad port (/dev/infiniband/umadN, root only)",
}
UNPRIVILEGED_COMMANDS = {
    "ethtool": "ETHTOOL_GSTATS needs no capability",
    "ss": "socket listing",
    "rdma": "RDMA_NLDEV_CMD_RES_CM_ID_GET has no RDMA_NL_ADMIN_PERM flag (drivers/infiniband/core/nldev.c)",
    "pkill": "stops the login user's own perftest servers",
    "nvidia-smi": "topology read",
    "show_gids": "sysfs read",
    "ibstat": "sysfs read",
    "ibdev2netdev": "sysfs read",
    "ip": "RTM_GET* read",
}
# A templated argv is a benchmark launch (timeout + perftest, mpirun/srun + nccl-tests): the login user.

TASK_KEYWORDS = frozenset({
    "name", "when", "tags", "loop", "loop_control", "register", "vars", "notify", "become",
    "become_user", "become_method", "changed_when", "failed_when", "check_mode", "timeout",
    "until", "retries", "delay", "async", "poll", "environment", "listen", "no_log", "delegate_to",
    "run_once", "ignore_errors", "diff", "any_errors_fatal",
})
BLOCK_KEYS = ("block", "rescue", "always")
PLAY_TASK_KEYS = ("pre_tasks", "tasks", "post_tasks", "handlers")


@dataclass(frozen=True)
class Task:
    where: str
    name: str
    module: str
    args: Any
    become: object


def _collection_files() -> list[Path]:
    roles = sorted((COLLECTION / "roles").glob("*/tasks/*.yml")) + sorted(
        (COLLECTION / "roles").glob("*/handlers/*.yml")
    )
    return roles + sorted((COLLECTION / "playbooks").glob("*.yml"))


def _walk(items: list[dict[str, Any]], where: str, inherited: object) -> Iterator[Task]:
    for item in items or []:
        become = item.get("become", inherited)
        if any(k in item for k in BLOCK_KEYS):
            for key in BLOCK_KEYS:
                yield from _walk(item.get(key, []), where, become)
            continue
        modules = [k for k in item if k not in TASK_KEYWORDS]
        assert len(modules) == 1, f"{where}: task {item.get('name')!r} has keys {modules}"
        yield Task(where, str(item.get("name")), modules[0], item[modules[0]], become)


def all_tasks() -> list[Task]:
    """Every task of the collection's roles and playbooks, with the become that applies to it."""
    tasks: list[Task] = []
    for path in _collection_files():
        doc = yaml.safe_load(path.read_text()) or []
        where = str(path.relative_to(COLLECTION))
        if "playbooks" in path.parts:
            for play in doc:
                assert "become" not in play, f"{where}: play {play.get('name')!r} escalates as a whole"
                for key in PLAY_TASK_KEYS:
                    tasks += _walk(play.get(key, []), where, None)
        else:
            tasks += _walk(doc, where, None)
    return tasks


def expected_become(task: Task) -> object:
    """True, None (no become) or the exact templated value the task must carry."""
    if task.module in PRIVILEGED_MODULES:
        return True
    if task.module in UNPRIVILEGED_MODULES:
        return None
    if task.module in CONDITIONAL_MODULES:
        return CONDITIONAL_MODULES[task.module]
    where = f"{task.where}: {task.name!r}"
    assert task.module == "ansible.builtin.command", f"{where}: unclassified {task.module}"
    argv = task.args.get("argv") if isinstance(task.args, dict) else None
    if isinstance(argv, str) and argv.startswith("{{"):
        return None  # a benchmark launch
    assert isinstance(argv, list) and argv, f"{where}: command without an argv list"
    program = str(argv[0])
    if program in PRIVILEGED_COMMANDS:
        return True
    assert program in UNPRIVILEGED_COMMANDS, f"{where}: unclassified command {program}"
    return None


TASKS = all_tasks()


def test_the_walk_finds_the_collection() -> None:
    modules = {t.module for t in TASKS}
    assert {"fabtune.fabric.fabric_qos", "fabtune.fabric.fabric_files", "ansible.builtin.command"} <= modules
    assert len(TASKS) > 40


@pytest.mark.parametrize("task", TASKS, ids=[f"{t.where}:{t.name}" for t in TASKS])
def test_task_escalates_exactly_when_it_needs_root(task: Task) -> None:
    want = expected_become(task)
    got = task.become
    if want is None:
        assert got in (None, False), f"{task.where}: {task.name!r} ({task.module}) needs no root: no become"
    else:
        assert got == want, f"{task.where}: {task.name!r} ({task.module}) needs root: become {want!r}"


def test_benchmarks_and_reads_run_as_the_login_user() -> None:
    """The launches (perftest, nccl-tests) and counter reads of the bench playbooks never escalate."""
    bench = [t for t in TASKS if t.where.startswith("playbooks/bench_")]
    assert bench and all(t.become in (None, False) for t in bench)


def test_no_role_sets_become_user_or_method() -> None:
    """The login's own sudo (ansible_become_method in the inventory) decides how to escalate."""
    for path in _collection_files():
        text = path.read_text()
        assert "become_user" not in text and "become_method" not in text, path
