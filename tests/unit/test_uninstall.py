"""``fabtune uninstall``: bad input changes nothing; the role's one list covers what every role installs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from fabtune import ansible
from fabtune.ansible import ROLES, RunOutcome, TaskResult
from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.uninstall import RunArmed, _refuse_armed, armed_runs, removed_paths

INVENTORY = """\
all:
  vars:
    fabtune_fabric: roce
    fabtune_fabric_name: {name}
  hosts:
    h01: {{ansible_host: 192.0.2.1}}
    h02: {{ansible_host: 192.0.2.2}}
"""


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))

    def no_host(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a host was contacted")

    monkeypatch.setattr(ansible, "run_playbook", no_host)
    monkeypatch.setattr(ansible, "run_module", no_host)
    return tmp_path


def inventory(where: Path, name: str = "rack1") -> Path:
    path = where / f"{name}.yml"
    path.write_text(INVENTORY.format(name=name))
    return path


def journaled(fabric: str, snapshot: dict[str, Any] | None) -> str:
    journal = Journal()
    run_id = journal.open_run("tune", fabric, "/nowhere.yml", None)
    if snapshot is not None:
        journal.snapshot(run_id, journal.step(run_id, "phase", "facts", {}), snapshot)
    journal.close_run(run_id, "done", {})
    journal.close()
    return run_id


def test_a_bad_run_id_is_refused_naming_it(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory(home)
    assert main(["uninstall", "-i", str(inv), "--restore", "../../etc"]) == ExitStatus.CONFIG
    assert "'../../etc'" in capsys.readouterr().err
    assert main(["uninstall", "-i", str(inv), "--restore", "20990101-000000-abcdef"]) == ExitStatus.CONFIG
    assert "20990101-000000-abcdef" in capsys.readouterr().err


def test_a_run_of_another_fabric_or_without_snapshot_is_refused(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(home)
    other = journaled("rack2", {"h01": {"nics": {}}})
    assert main(["uninstall", "-i", str(inv), "--restore", other]) == ExitStatus.CONFIG
    assert "'rack2'" in capsys.readouterr().err
    empty = journaled("rack1", None)
    assert main(["uninstall", "-i", str(inv), "--restore", empty]) == ExitStatus.CONFIG
    assert "no pre-run state" in capsys.readouterr().err
    elsewhere = journaled("rack1", {"h09": {"nics": {}}})
    assert main(["uninstall", "-i", str(inv), "--restore", elsewhere]) == ExitStatus.CONFIG
    assert "h09" in capsys.readouterr().err
    assert not [r for r in Journal().runs() if r.kind == "uninstall"]  # refused before any run


def test_a_missing_inventory_is_refused(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["uninstall", "-i", str(home / "nope.yml")]) == ExitStatus.CONFIG
    assert "nope.yml" in capsys.readouterr().err


def _task(host: str, name: str, result: dict[str, Any]) -> TaskResult:
    return TaskResult(host, name, "x", "runner_on_ok", False, result)


def _outcome(*tasks: TaskResult) -> RunOutcome:
    return RunOutcome("successful", 0, {}, tasks, Path("/tmp"))


def test_armed_runs_block_unless_it_is_the_run_restored() -> None:
    state = "/var/lib/fabtune/revert/"
    names = ("r1.json", "r0.prerun.json", "r2.reverted.json", "r3.revert-failed.json")
    files = [{"path": state + n} for n in names]
    outcome = _outcome(_task("h01", "Find the commit-confirmed runs armed on this host", {"files": files}),
                       _task("h02", "Find the commit-confirmed runs armed on this host", {"files": []}))
    armed = armed_runs(outcome)
    assert armed == {"h01": ["r1"]}
    _refuse_armed(armed, "r1")
    with pytest.raises(RunArmed, match="h01: r1") as err:
        _refuse_armed(armed, None)
    assert err.value.code == ExitStatus.LOCKED


def test_removed_paths_per_host() -> None:
    """The units stopped, then the paths removed, from the one fabric_remove call per host; a host
    where it failed midway lists what went before the failure."""
    failed = TaskResult("h02", "Remove what fabtune installed", "fabtune.fabric.fabric_remove",
                        "runner_on_failed", True, {"stopped": [], "removed": ["/etc/fabtune/persisted.json"],
                                                   "msg": "cannot remove /etc/fabtune"})
    outcome = _outcome(
        _task("h01", "Find the commit-confirmed runs armed on this host", {"files": [], "removed": ["/x"]}),
        _task("h01", "Remove what fabtune installed", {
            "stopped": ["x.service"], "removed": ["/usr/local/sbin/fabtune-revert", "/etc/fabtune"],
            "kept": [{"path": "/etc/nccl.conf", "why": "a knob file fabtune did not write"}]}),
        _task("h03", "Remove what fabtune installed", {"stopped": [], "removed": []}),
        failed,
    )
    assert removed_paths(outcome) == {"h01": ["x.service", "/usr/local/sbin/fabtune-revert", "/etc/fabtune"],
                                      "h02": ["/etc/fabtune/persisted.json"]}


# --- the one list of what fabtune installs ------------------------------------------------------

UNINSTALL = ROLES / "fabric_uninstall" / "vars" / "main.yml"
# Targets a role writes that are not fabtune's to remove, and why.
NOT_INSTALLED = {
    "/etc/opensm": "opensm's own directory (ib_sm creates it only when opensm has none)",
    "/etc/opensm/opensm.conf": "opensm's own file; its keys are knobs that --restore puts back",
    "/etc/systemd/system/multi-user.target.wants": "systemd's own directory (fabric_boot creates it "
    "only where it is missing)",
}
WRITING = ("ansible.builtin.template", "ansible.builtin.copy")


def _role_vars(role: Path) -> dict[str, Any]:
    found: dict[str, Any] = {"role_path": str(role)}
    for part in ("defaults", "vars"):
        path = role / part / "main.yml"
        if path.is_file():
            found.update(yaml.safe_load(path.read_text()) or {})
    return found


def _render(text: str, context: dict[str, Any]) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["dirname"] = lambda p: str(Path(p).parent)
    for _ in range(3):  # defaults refer to other defaults
        text = env.from_string(text).render(context)
    return text


def _targets(role: Path) -> set[str]:
    """Every path a role's tasks create: template/copy dest, file state=directory."""
    context = _role_vars(role)
    out = set()
    for tasks in sorted((role / "tasks").glob("*.yml")):
        for task in yaml.safe_load(tasks.read_text()) or []:
            for action in (*WRITING, "ansible.builtin.file"):
                args = task.get(action)
                if not isinstance(args, dict):
                    continue
                if action == "ansible.builtin.file" and args.get("state") != "directory":
                    continue
                where = args.get("dest") or args.get("path")
                items = task.get("loop")
                names = _render(items, context).strip("[]").replace("'", "").split(", ") if items else [""]
                out.update(_render(where, {**context, "item": item}) for item in names)
    return out


def _listed() -> list[str]:
    entries = yaml.safe_load(UNINSTALL.read_text())["_fabric_uninstall_installed"]
    return [re.sub(r"\{\{ \w+ \| default\('([^']+)'\) \}\}", r"\1", e["path"]) for e in entries]


def test_every_path_a_role_installs_is_in_the_uninstall_list() -> None:
    listed = _listed()
    for role in sorted(p for p in ROLES.iterdir() if p.name != "fabric_uninstall"):
        for target in _targets(role):
            if target in NOT_INSTALLED:
                continue
            assert any(target == p or target.startswith(p + "/") for p in listed), (role.name, target)


def test_each_entry_of_the_list_names_the_role_that_installs_it() -> None:
    lines = UNINSTALL.read_text().splitlines()
    roles = {p.name for p in ROLES.iterdir()}
    for number, line in enumerate(lines):
        if line.strip().startswith("- path:"):
            comment = lines[number - 1].strip()
            assert comment.startswith("# ") and comment[2:].split(" ")[0].rstrip(":") in roles, line


def test_the_module_defaults_of_the_revert_are_listed() -> None:
    from fabtune.tune.backend import REVERT_STATE_DIR

    listed = _listed()
    for path in (REVERT_STATE_DIR, "/usr/local/sbin/fabtune-revert", "/usr/local/lib/fabtune",
                 "/var/log/fabtune-revert.log", "/etc/fabtune/rdma_cm.conf", "/etc/nccl.conf"):
        assert path in listed
