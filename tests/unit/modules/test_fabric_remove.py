"""fabric_remove: what fabtune installed goes in one call (trees, units, shared directories left empty,
the knob files fabtune wrote); check mode and diff tell the truth; a second run changes nothing.

``systemctl`` is a script on ``PATH`` that keeps each unit's state in a directory and logs its argv,
so the module runs it as it runs the real one (an argv list, under its deadline).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module

fabric_remove = load_module("fabric_remove")
HEADER = "#\n# Ansible managed\n#\n"
SYSTEMCTL = """#!/bin/sh
state="$FAKE_SYSTEMD"
echo "$*" >> "$state/calls"
case "$1" in
  is-active) if [ -f "$state/$2.active" ]; then echo active; else echo inactive; exit 3; fi ;;
  is-enabled) if [ -f "$state/$2.enabled" ]; then echo enabled; else echo disabled; exit 1; fi ;;
  stop) if [ -f "$state/slow" ]; then exec sleep 30; fi; rm -f "$state/$2.active" ;;
  disable) rm -f "$state/$2.enabled" ;;
  daemon-reload) ;;
  *) echo "unknown verb $1" >&2; exit 1 ;;
esac
"""


class Host:
    """A host's root under tmp_path, its systemd (a units state directory) and the fake systemctl."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.state = root / "systemd-state"
        self.state.mkdir(parents=True)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        (bin_dir / "systemctl").write_text(SYSTEMCTL)
        (bin_dir / "systemctl").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_SYSTEMD", str(self.state))
        self.runtime = root / "run/systemd/system"
        monkeypatch.setattr(fabric_remove, "SYSTEMD_RUNTIME", str(self.runtime))

    def p(self, rel: str) -> str:
        return str(self.root / rel)

    def write(self, rel: str, text: str = "x\n") -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def unit(self, name: str, *, active: bool, enabled: bool) -> None:
        self.runtime.mkdir(parents=True, exist_ok=True)
        for flag, on in (("active", active), ("enabled", enabled)):
            if on:
                (self.state / f"{name}.{flag}").touch()

    def calls(self) -> list[str]:
        log = self.state / "calls"
        return log.read_text().splitlines() if log.exists() else []

    def files(self) -> dict[str, str]:
        """Every path under the host's etc, usr and var: a file's text, a link's target, a directory."""
        found = {}
        for top in ("etc", "usr", "var"):
            for path in sorted((self.root / top).rglob("*")):
                rel = str(path.relative_to(self.root))
                found[rel] = ("-> " + os.readlink(path) if path.is_symlink()
                              else "dir" if path.is_dir() else path.read_text())
        return found

    def entries(self) -> list[dict[str, Any]]:
        """The shape of the role's list: a unit, its enablement, a tree, shared directories, a knob file."""
        return [
            {"path": self.p("etc/systemd/system/fabtune-boot.service"), "unit": "fabtune-boot.service"},
            {"path": self.p("etc/systemd/system/multi-user.target.wants/fabtune-boot.service")},
            {"path": self.p("usr/local/lib/fabtune")},
            {"path": self.p("etc/fabtune/persisted.json")},
            {"path": self.p("etc/fabtune/rdma_cm.conf")},
            {"path": self.p("etc/fabtune"), "when_empty": True},
            {"path": self.p("var/lib/fabtune/revert")},
            {"path": self.p("var/lib/fabtune"), "when_empty": True},
            {"path": self.p("etc/nccl.conf"), "knob": True},
        ]

    def install(self) -> None:
        unit = self.write("etc/systemd/system/fabtune-boot.service", "[Unit]\n")
        wants = self.root / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True)
        (wants / "fabtune-boot.service").symlink_to(unit)
        self.write("usr/local/lib/fabtune/fabric_apply.py", "code\n")
        self.write("usr/local/lib/fabtune/sub/deep.py", "more\n")
        self.write("etc/fabtune/persisted.json", "{}\n")
        self.write("etc/fabtune/rdma_cm.conf", "mlx5_0 1 106 2\n")
        self.write("var/lib/fabtune/revert/r1.prerun.json", "{}\n")
        self.write("etc/nccl.conf", HEADER + "NCCL_IB_TC=106\n")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    return Host(tmp_path, monkeypatch)


def run(module_args: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    module_args(dict({"header": HEADER}, **params), check_mode=check_mode, diff=True)
    with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as done:
        fabric_remove.main()
    return dict(done.value.args[0])


def test_everything_goes_in_one_call_units_first_then_nothing_changes(module_args: Any, host: Host) -> None:
    host.install()
    host.unit("fabtune-boot.service", active=True, enabled=True)
    first = run(module_args, {"entries": host.entries()})
    assert first["changed"] and first["systemd"] and first["reloaded"]
    assert first["stopped"] == ["fabtune-boot.service"]
    assert first["removed"] == [host.p(e) for e in (
        "etc/systemd/system/fabtune-boot.service",
        "etc/systemd/system/multi-user.target.wants/fabtune-boot.service",
        "usr/local/lib/fabtune", "etc/fabtune/persisted.json", "etc/fabtune/rdma_cm.conf",
        "var/lib/fabtune/revert", "etc/nccl.conf", "var/lib/fabtune", "etc/fabtune")]
    assert first["kept"] == []
    assert host.files() == {"etc/systemd": "dir", "etc/systemd/system": "dir",
                            "etc/systemd/system/multi-user.target.wants": "dir", "usr/local": "dir",
                            "usr/local/lib": "dir", "var/lib": "dir"}
    assert host.calls() == ["is-active fabtune-boot.service", "is-enabled fabtune-boot.service",
                            "stop fabtune-boot.service", "disable fabtune-boot.service", "daemon-reload"]
    again = run(module_args, {"entries": host.entries()})
    assert again["changed"] is False and again["removed"] == again["stopped"] == again["present"] == []
    assert again["diff"] == [] and not again["reloaded"]
    assert len(host.calls()) == 5  # nothing left to ask systemd about


def test_a_unit_already_stopped_and_disabled_is_not_touched(module_args: Any, host: Host) -> None:
    host.install()
    host.unit("fabtune-boot.service", active=False, enabled=False)
    result = run(module_args, {"entries": host.entries()})
    assert result["stopped"] == [] and result["reloaded"]  # files went: systemd reloads its units
    assert host.calls() == ["is-active fabtune-boot.service", "is-enabled fabtune-boot.service",
                            "daemon-reload"]


def test_without_systemd_units_are_left_alone_and_their_files_go(module_args: Any, host: Host) -> None:
    host.install()
    result = run(module_args, {"entries": host.entries()})
    assert not result["systemd"] and not result["reloaded"] and result["stopped"] == []
    assert host.p("etc/systemd/system/fabtune-boot.service") in result["removed"]
    assert host.calls() == []


def test_a_shared_directory_holding_a_foreign_file_is_kept(module_args: Any, host: Host) -> None:
    host.install()
    host.write("etc/fabtune/site.conf", "ours\n")
    host.write("var/lib/fabtune/.other", "hidden\n")
    result = run(module_args, {"entries": host.entries()})
    assert result["kept"] == [{"path": host.p("var/lib/fabtune"), "why": "holds .other"},
                              {"path": host.p("etc/fabtune"), "why": "holds site.conf"}]
    assert not {host.p("etc/fabtune"), host.p("var/lib/fabtune")} & set(result["removed"])
    left = host.files()
    assert left["etc/fabtune/site.conf"] == "ours\n" and left["var/lib/fabtune/.other"] == "hidden\n"
    assert "etc/fabtune/persisted.json" not in left and "var/lib/fabtune/revert" not in left


def test_a_shared_directory_holding_a_knob_file_kept_is_kept(module_args: Any, host: Host) -> None:
    host.write("etc/fabtune/nccl.conf", "NCCL_DEBUG=WARN\n")
    entries = [{"path": host.p("etc/fabtune/nccl.conf"), "knob": True},
               {"path": host.p("etc/fabtune"), "when_empty": True}]
    result = run(module_args, {"entries": entries})
    assert result["changed"] is False and [k["path"] for k in result["kept"]] == [e["path"] for e in entries]
    assert "holds nccl.conf" in result["kept"][1]["why"]


@pytest.mark.parametrize(("text", "goes"), [
    (HEADER + "NCCL_IB_TC=106\n", True),
    ("# our own NCCL settings\nNCCL_DEBUG=WARN\n", False),
    ("NCCL_IB_TC=106\n" + HEADER, False),  # the header somewhere else is not the role's file
    ("", False),
])
def test_a_knob_file_goes_only_when_it_begins_with_the_header(module_args: Any, host: Host, text: str,
                                                              goes: bool) -> None:
    conf = host.write("etc/nccl.conf", text)
    result = run(module_args, {"entries": [{"path": str(conf), "knob": True}]})
    assert result["changed"] is goes and conf.exists() is not goes
    assert result["removed"] == ([str(conf)] if goes else [])
    if not goes:
        assert result["kept"] == [{"path": str(conf), "why": "a knob file fabtune did not write "
                                   "(no ansible_managed header first)"}]
        assert conf.read_text() == text


def test_after_a_restore_knob_files_are_kept_and_the_rest_goes(module_args: Any, host: Host) -> None:
    host.install()
    result = run(module_args, {"entries": host.entries(), "keep_knob_files": True})
    assert host.files()["etc/nccl.conf"] == HEADER + "NCCL_IB_TC=106\n"
    assert result["kept"] == [{"path": host.p("etc/nccl.conf"),
                               "why": "a knob file, as the restore put it back"}]
    assert host.p("usr/local/lib/fabtune") in result["removed"] and host.p("etc/fabtune") in result["removed"]


def test_check_mode_changes_nothing_and_says_what_would_go(module_args: Any, host: Host,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    host.install()
    host.write("etc/fabtune/site.conf", "ours\n")
    host.unit("fabtune-boot.service", active=True, enabled=True)
    before = host.files()
    with monkeypatch.context() as no_write:
        for name in ("rmtree", "rmdir", "unlink"):
            target = shutil if name == "rmtree" else os
            no_write.setattr(target, name, lambda *a, **k: pytest.fail("check mode removed something"))
        no_write.setattr(Path, "unlink", lambda *a, **k: pytest.fail("check mode removed something"))
        checked = run(module_args, {"entries": host.entries()}, check_mode=True)
    assert host.files() == before
    assert host.calls() == ["is-active fabtune-boot.service", "is-enabled fabtune-boot.service"]  # reads only
    assert checked["changed"] and checked["stopped"] == ["fabtune-boot.service"] and checked["reloaded"]
    diffs = {d["before_header"]: d for d in checked["diff"]}
    assert diffs["unit fabtune-boot.service"]["before"] == "active, enabled\n"
    tree = diffs[host.p("usr/local/lib/fabtune")]["before"]
    assert tree == "directory:\nfabric_apply.py\nsub/\nsub/deep.py\n"
    assert diffs[host.p("etc/nccl.conf")]["before"] == HEADER + "NCCL_IB_TC=106\n"
    link = host.p("etc/systemd/system/multi-user.target.wants/fabtune-boot.service")
    assert diffs[link]["before"] == "symlink -> " + host.p("etc/systemd/system/fabtune-boot.service") + "\n"
    assert all(d["after"] == "" for p, d in diffs.items() if not p.startswith("unit "))
    done = run(module_args, {"entries": host.entries()})
    assert (done["stopped"], done["removed"], done["kept"]) == (checked["stopped"], checked["removed"],
                                                                checked["kept"])


def test_a_link_to_a_directory_goes_and_what_it_points_to_stays(module_args: Any, host: Host) -> None:
    target = host.write("opt/real/keep.txt").parent
    link = host.root / "usr/local/lib/fabtune"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    result = run(module_args, {"entries": [{"path": str(link)}]})
    assert result["removed"] == [str(link)] and not link.is_symlink() and (target / "keep.txt").exists()


def test_a_unit_that_does_not_stop_in_time_fails_before_anything_is_removed(module_args: Any,
                                                                           host: Host) -> None:
    host.install()
    host.unit("fabtune-boot.service", active=True, enabled=True)
    (host.state / "slow").touch()
    before = host.files()
    result = run(module_args, {"entries": host.entries(), "timeout": 1})
    assert result["failed"]
    assert result["msg"] == "systemctl stop fabtune-boot.service did not finish within 1 s"
    assert result["removed"] == [] and host.files() == before


@pytest.mark.parametrize(("entry", "field", "value"), [
    ({"path": "etc/nccl.conf"}, "path", "etc/nccl.conf"),
    ({"path": "/etc/../nccl.conf"}, "path", "/etc/../nccl.conf"),
    ({"path": "/etc//fabtune"}, "path", "/etc//fabtune"),
    ({"path": "/etc"}, "path", "/etc"),
    ({"path": "/"}, "path", "/"),
    ({"path": "/etc/x.service", "unit": "--root=/ x.service"}, "unit", "--root=/ x.service"),
    ({"path": "/etc/x.service", "unit": "-x.service"}, "unit", "-x.service"),
])
def test_a_bad_entry_is_refused_naming_the_field_and_value_before_anything_goes(
        module_args: Any, host: Host, entry: dict[str, Any], field: str, value: str) -> None:
    host.install()
    before = host.files()
    result = run(module_args, {"entries": [*host.entries(), entry]})
    assert result["failed"] and f"argument 'entries' {field} " in result["msg"]
    assert repr(value) in result["msg"]
    assert host.files() == before


def test_knob_entries_need_a_header_and_a_positive_timeout(module_args: Any, host: Host) -> None:
    host.install()
    result = run(module_args, {"entries": host.entries(), "header": "", "timeout": 0})
    assert result["failed"] and "argument 'header' must not be empty" in result["msg"]
    assert "argument 'timeout' must be a positive number of seconds, not 0" in result["msg"]
    assert (host.root / "etc/nccl.conf").exists()
