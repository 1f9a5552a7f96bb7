"""Inventory input: paths made absolute before Ansible sees them, bad inventories refused by name."""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fabtune import ansible
from fabtune.ansible import PROFILES
from fabtune.cli import main
from fabtune.errors import ConfigError, ExitStatus
from fabtune.inventory import read_inventory
from fabtune.paths import private_umask

REPO = Path(__file__).resolve().parents[2]
GOOD = """\
all:
  hosts:
    h01: {ansible_host: 10.231.0.11}
    h02: {ansible_host: 10.231.0.12}
  vars:
    fabtune_fabric: roce
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _problems(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        read_inventory(path)
    return "\n".join(caught.value.problems)


# Finding 2: the fabric name becomes a file name, so it is checked.


@pytest.mark.parametrize("field", ["fabtune_fabric_name", "fabtune_testbed"])
def test_fabric_name_that_is_a_path_is_refused(tmp_path: Path, field: str) -> None:
    inv = _write(tmp_path / "inv.yml", GOOD + f"    {field}: ../../../../../tmp/x\n")
    assert f"{field}: '../../../../../tmp/x' is not a valid name" in _problems(inv)


def test_fabric_name_from_the_file_name_is_checked_too(tmp_path: Path) -> None:
    inv = _write(tmp_path / "my rack.yml", GOOD)
    assert "'my rack' is not a valid name" in _problems(inv)


# Finding 3: a relative -i was taken by ansible-runner as inline inventory text.


def test_relative_inventory_reaches_ansible_as_the_absolute_real_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    inv = _write(tmp_path / "in" / "inv.yml", GOOD)
    seen: dict[str, Any] = {}

    def fake_run(**kwargs: Any) -> SimpleNamespace:
        seen.update(kwargs)
        return SimpleNamespace(status="successful", rc=0, stats={"ok": {"h01": 1, "h02": 1}},
                               config=SimpleNamespace(artifact_dir=str(tmp_path)))

    monkeypatch.setattr(ansible.ansible_runner, "run", fake_run)
    profile = PROFILES / "roce.yml"
    assert main(["apply", "-i", "in/inv.yml", "--profile", str(profile)]) == ExitStatus.OK
    assert seen["inventory"] == str(inv)


def test_read_inventory_resolves_a_relative_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    inv = _write(tmp_path / "in" / "inv.yml", GOOD)
    info = read_inventory(Path("in/inv.yml"))
    assert info.path == inv
    assert info.hosts == ("h01", "h02")


@pytest.mark.parametrize("call", ["playbook", "module"])
def test_the_ansible_adapter_refuses_a_relative_inventory(
    monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    def never(**_: Any) -> None:
        raise AssertionError("ansible-runner must not run")

    monkeypatch.setattr(ansible.ansible_runner, "run", never)
    with pytest.raises(ConfigError, match="must be an absolute path"):
        if call == "playbook":
            ansible.run_playbook("facts.yml", Path("in/inv.yml"))
        else:
            ansible.run_module("ansible.builtin.ping", "", Path("in/inv.yml"))


# Finding 9: malformed inventories, duplicate hosts, unknown launchers.


def test_malformed_inventory_reports_what_ansible_said(tmp_path: Path) -> None:
    inv = _write(tmp_path / "inv.yml", "all:\n  hosts: [\n")
    problems = _problems(inv)
    assert "has no hosts" not in problems
    assert "ansible-inventory cannot read it" in problems
    assert "YAML parsing failed" in problems


def test_a_host_listed_twice_is_refused(tmp_path: Path) -> None:
    inv = _write(tmp_path / "inv.yml", GOOD.replace("h02: {", "h01: {"))
    assert "duplicate mapping key 'h01'" in _problems(inv)


def test_two_names_for_one_host_are_refused_naming_both(tmp_path: Path) -> None:
    inv = _write(tmp_path / "inv.yml", GOOD.replace("10.231.0.12", "10.231.0.11"))
    assert "hosts: 'h01' and 'h02' are the same host (10.231.0.11 port 22)" in _problems(inv)


def test_same_address_on_another_port_is_another_host(tmp_path: Path) -> None:
    text = GOOD.replace("10.231.0.12}", "10.231.0.11, ansible_port: 2222}")
    assert read_inventory(_write(tmp_path / "inv.yml", text)).hosts == ("h01", "h02")


@pytest.mark.parametrize("launcher", ["mpirun;touch x", "ssh", ""])
def test_unknown_launcher_is_refused_naming_field_and_value(tmp_path: Path, launcher: str) -> None:
    inv = _write(tmp_path / "inv.yml", GOOD + f"    fabtune_launcher: {launcher!r}\n")
    assert f"fabtune_launcher: {launcher!r} must be one of mpirun, srun" in _problems(inv)


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_known_launchers_are_kept(tmp_path: Path, launcher: str) -> None:
    inv = _write(tmp_path / "inv.yml", GOOD + f"    fabtune_launcher: {launcher}\n")
    assert read_inventory(inv).launcher == launcher


# Privacy: ansible-runner's artifacts under the umask the CLI sets.


def test_ansible_artifacts_are_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    host = f"localhost: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}"
    inv = _write(tmp_path / "local.yml", f"all:\n  hosts:\n    {host}\n")
    old = private_umask()  # what fabtune.cli.main does first
    try:
        outcome = ansible.run_module("ansible.builtin.ping", "", inv)
    finally:
        os.umask(old)
    assert outcome.ok
    base = tmp_path / "home" / "ansible"
    loose = [
        f"{p} {stat.S_IMODE(p.stat().st_mode):o}"
        for p in [base, *base.rglob("*")]
        if not p.is_symlink() and stat.S_IMODE(p.stat().st_mode) & 0o077
    ]
    assert loose == []
    assert any(base.rglob("stdout"))


def test_a_command_reads_its_inventory_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host variables the direct SSH channel connects with are those read_inventory found (one
    ansible-inventory run per command, not one more for the channel), the group's merged in."""
    from fabtune import inventory
    from fabtune.tune.backend import AnsibleBackend

    info = read_inventory(_write(tmp_path / "inv.yml", GOOD + "    ansible_user: ops\n"))
    assert info.hostvars is not None and inventory.host_vars(info.path) == info.hostvars
    monkeypatch.setattr(inventory, "_ansible_inventory", lambda _path: pytest.fail("read again"))
    targets = AnsibleBackend(info)._targets(["h01", "h02"])
    assert {h: (t.address, t.user) for h, t in targets.items()} == {
        "h01": ("10.231.0.11", "ops"), "h02": ("10.231.0.12", "ops")}
    assert info == dataclasses.replace(info, hostvars=None)  # not part of what the info compares


@pytest.mark.parametrize(
    ("args", "found"),
    [
        (["tune", "-i", "a.yml", "--plan"], "a.yml"),
        (["-q", "apply", "--inventory", "b.yml"], "b.yml"),
        (["drift", "--inventory=c.yml"], "c.yml"),
        (["tune", "-id.yml"], "d.yml"),
        (["tune", "--plan"], None),
        (["tune", "-i"], None),
        (["show", "--", "-i", "e.yml"], None),
    ],
)
def test_the_inventory_read_ahead_takes_the_commands_inventory_argument(
    args: list[str], found: str | None
) -> None:
    from fabtune.inventory import _inventory_arg

    assert _inventory_arg(args) == found


def test_the_read_ahead_answers_the_verbs_read_once_and_only_for_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ansible-inventory run serves the command: started from its arguments, taken by its read;
    a file changed after the read started is read again, and a read no verb took is dropped."""
    from fabtune import inventory

    calls = _counting(monkeypatch)
    path = _write(tmp_path / "inv.yml", GOOD)
    inventory.read_ahead(["tune", "-i", str(path)])
    info = read_inventory(path)
    assert info.hosts == ("h01", "h02") and calls == [path]
    read_inventory(path)  # the same file: the answer this process has (no other run)
    assert calls == [path]

    inventory.read_ahead(["tune", "-i", str(path)])
    inventory._AHEAD[path].answer.result(timeout=60)
    _write(path, GOOD.replace("h02", "h03"))
    os.utime(path, ns=(1, 1))  # the same size: the change is seen by the time stamp
    assert read_inventory(path).hosts == ("h01", "h03") and len(calls) == 3

    inventory.read_ahead(["tune", "-i", str(path)])
    inventory.forget_ahead()
    assert inventory._AHEAD == {}


def test_the_cli_drops_an_inventory_read_no_verb_took(tmp_path: Path) -> None:
    from fabtune import inventory

    path = _write(tmp_path / "inv.yml", GOOD)
    assert main(["tune", "-i", str(path), "--no-such-option"]) == ExitStatus.USAGE
    assert inventory._AHEAD == {}


def test_a_read_no_verb_took_is_ended_not_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command refused before its read (bad input) ends the ansible-inventory it started ahead;
    here a stand-in that would run for a minute, started by the same code."""
    from fabtune import inventory

    bindir = tmp_path / "bin"
    bindir.mkdir()
    slow = bindir / "ansible-inventory"
    slow.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 60\n")
    slow.chmod(0o755)
    monkeypatch.setattr(inventory.sys, "executable", str(bindir / "python"))
    path = _write(tmp_path / "inv.yml", GOOD)
    inventory.read_ahead(["tune", "-i", str(path)])
    ahead = inventory._AHEAD[path]
    deadline = time.monotonic() + 30
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    pid = int((tmp_path / "pid").read_text())
    assert Path(f"/proc/{pid}").exists()
    inventory.forget_ahead()
    assert isinstance(ahead.answer.exception(timeout=30), Exception) or ahead.answer.result().returncode < 0
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped: the read's thread waited for it


def test_a_failed_read_ahead_is_the_verbs_own_error(tmp_path: Path) -> None:
    from fabtune import inventory

    path = _write(tmp_path / "inv.yml", "all: [unclosed\n")
    inventory.read_ahead(["tune", "-i", str(path)])
    assert path in inventory._AHEAD
    with pytest.raises(ConfigError, match="ansible-inventory cannot read it"):
        read_inventory(path)
    assert inventory._AHEAD == {}


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The ansible-inventory runs of this test, by path (each still runs the real one)."""
    from fabtune import inventory

    real = inventory._listed
    calls: list[Path] = []

    def counted(path: Path, ahead: Any = None) -> Any:
        calls.append(path)
        return real(path, ahead)

    monkeypatch.setattr(inventory, "_listed", counted)
    return calls


def test_a_static_inventory_is_read_once_until_a_file_or_setting_it_depends_on_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ansible-inventory runs again for a changed inventory file, group_vars or host_vars file, or
    ANSIBLE_* variable; never for an unchanged one; and a failed read is not kept."""
    calls = _counting(monkeypatch)
    path = _write(tmp_path / "inv.yml", GOOD)
    first = read_inventory(path)
    assert read_inventory(path) == first and len(calls) == 1
    assert first.hostvars is not None
    first.hostvars["h01"]["changed_by_the_caller"] = 1  # type: ignore[index]
    assert "changed_by_the_caller" not in (read_inventory(path).hostvars or {})["h01"]  # not shared

    _write(tmp_path / "group_vars" / "all.yml", "fabtune_launcher: srun\n")
    assert read_inventory(path).launcher == "srun" and len(calls) == 2
    _write(tmp_path / "host_vars" / "h02.yml", "ansible_user: ops\n")
    assert (read_inventory(path).hostvars or {})["h02"]["ansible_user"] == "ops" and len(calls) == 3
    _write(tmp_path / "host_vars" / "h02.yml", "ansible_user: opz\n")  # same size, same second
    assert (read_inventory(path).hostvars or {})["h02"]["ansible_user"] == "opz" and len(calls) == 4
    monkeypatch.setenv("ANSIBLE_INVENTORY_ENABLED", "yaml")
    read_inventory(path)
    assert read_inventory(path).launcher == "srun" and len(calls) == 5

    _write(path, "all:\n  hosts: [\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="ansible-inventory cannot read it"):
            read_inventory(path)
    assert len(calls) == 7
    _write(path, GOOD)  # back to the bytes last read: that answer holds
    assert read_inventory(path).launcher == "srun" and len(calls) == 7
    _write(path, GOOD.replace("h02", "h03"))
    assert read_inventory(path).hosts == ("h01", "h03") and len(calls) == 8


def test_an_inventory_script_or_plugin_configuration_is_read_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Their hosts come from elsewhere (a program's output, a plugin's source): never reused."""
    calls = _counting(monkeypatch)
    script = _write(tmp_path / "hosts.sh", "#!/bin/sh\necho '{\"all\": {\"hosts\": [\"h01\"], "
                    "\"vars\": {\"fabtune_fabric\": \"roce\"}}, \"_meta\": {\"hostvars\": {}}}'\n")
    script.chmod(0o755)
    generated = _write(tmp_path / "generated.yml", "plugin: ansible.builtin.generator\nhosts:\n"
                       "  name: \"h{{ n }}\"\nlayers:\n  n: [\"01\", \"02\"]\n")
    for path, hosts in ((script, ("h01",)), (generated, ("h01", "h02"))):
        for _ in range(2):
            assert read_inventory(path).hosts == hosts
    assert calls == [script, script, generated, generated]
