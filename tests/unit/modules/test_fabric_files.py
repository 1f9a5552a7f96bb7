"""fabric_files: files, directories and links in one call; idempotent; check mode and diff tell the truth."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module

fabric_files = load_module("fabric_files")
OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def run(module_args: Any, params: dict[str, Any], check_mode: bool = False,
        diff: bool = True) -> dict[str, Any]:
    module_args(dict(params, owner=OWNER, group=GROUP), check_mode=check_mode, diff=diff)
    with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as done:
        fabric_files.main()
    return dict(done.value.args[0])


def layout(root: Path) -> dict[str, Any]:
    return {
        "directories": [{"path": str(root / "etc/fabtune"), "mode": "0755"}],
        "files": [
            {"path": str(root / "etc/fabtune/rdma_cm.conf"), "content": "mlx5_0 1 106 2\n", "mode": "0644"},
            {"path": str(root / "usr/sbin/fabtune-x"), "content": "#!/bin/sh\necho x\n", "mode": "0755"},
            {"path": str(root / "udev/rules.d/90-x.rules"), "content": "ACTION==\"add\"\n",
             "if_dir_exists": True},
        ],
        "links": [{"path": str(root / "etc/wants-x"), "src": str(root / "usr/sbin/fabtune-x")}],
    }


def test_writes_everything_in_one_call_then_changes_nothing(module_args: Any, tmp_path: Path) -> None:
    first = run(module_args, layout(tmp_path))
    assert first["changed"] and first["skipped_paths"] == [str(tmp_path / "udev/rules.d/90-x.rules")]
    assert (tmp_path / "etc/fabtune/rdma_cm.conf").read_text() == "mlx5_0 1 106 2\n"
    assert stat.S_IMODE((tmp_path / "usr/sbin/fabtune-x").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "etc/fabtune/rdma_cm.conf").stat().st_mode) == 0o644
    assert os.readlink(tmp_path / "etc/wants-x") == str(tmp_path / "usr/sbin/fabtune-x")
    again = run(module_args, layout(tmp_path))
    assert again["changed"] is False and again["changed_paths"] == [] and again["diff"] == []
    assert not list(tmp_path.rglob(".fabtune-*"))  # no temporary file left behind


def test_a_file_whose_directory_exists_is_written_where_if_dir_exists(module_args: Any,
                                                                       tmp_path: Path) -> None:
    (tmp_path / "udev/rules.d").mkdir(parents=True)
    run(module_args, layout(tmp_path))
    assert (tmp_path / "udev/rules.d/90-x.rules").read_text() == "ACTION==\"add\"\n"


def test_check_mode_writes_nothing_and_diffs_the_text(module_args: Any, tmp_path: Path) -> None:
    run(module_args, layout(tmp_path))
    conf = tmp_path / "etc/fabtune/rdma_cm.conf"
    conf.write_text("mlx5_0 1 0 2\n")
    (tmp_path / "usr/sbin/fabtune-x").chmod(0o700)
    params = layout(tmp_path)
    result = run(module_args, params, check_mode=True)
    script = str(tmp_path / "usr/sbin/fabtune-x")
    assert result["changed"] and sorted(result["changed_paths"]) == sorted([str(conf), script])
    assert result["diff"] == [{"before_header": str(conf), "after_header": str(conf),
                               "before": "mlx5_0 1 0 2\n", "after": "mlx5_0 1 106 2\n"}]
    assert conf.read_text() == "mlx5_0 1 0 2\n"  # nothing written
    assert stat.S_IMODE((tmp_path / "usr/sbin/fabtune-x").stat().st_mode) == 0o700
    fixed = run(module_args, params)
    assert fixed["changed"] and conf.read_text() == "mlx5_0 1 106 2\n"
    assert stat.S_IMODE((tmp_path / "usr/sbin/fabtune-x").stat().st_mode) == 0o755


def test_a_link_pointing_elsewhere_is_replaced_a_file_in_its_place_is_refused(module_args: Any,
                                                                                  tmp_path: Path) -> None:
    run(module_args, layout(tmp_path))
    link = tmp_path / "etc/wants-x"
    link.unlink()
    link.symlink_to("/nowhere")
    assert run(module_args, layout(tmp_path))["changed_paths"] == [str(link)]
    assert os.readlink(link) == str(tmp_path / "usr/sbin/fabtune-x")
    link.unlink()
    link.write_text("not a link")
    result = run(module_args, layout(tmp_path))
    assert result["failed"] and "is not a link" in result["msg"]


@pytest.mark.parametrize("path", ["etc/x", "/etc/../x", "/etc//x"])
def test_relative_or_unnormalised_paths_are_refused(module_args: Any, tmp_path: Path, path: str) -> None:
    result = run(module_args, {"files": [{"path": path, "content": "x"}]})
    assert result["failed"] and "absolute, normalised path" in result["msg"] and path in result["msg"]


def test_absent_removes_a_file_once_and_refuses_a_directory(module_args: Any, tmp_path: Path) -> None:
    conf = tmp_path / "etc/nccl.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("NCCL_IB_QPS_PER_CONNECTION=4\n")
    checked = run(module_args, {"absent": [str(conf)]}, check_mode=True)
    assert checked["changed"] and conf.exists()  # check mode removes nothing, and says it would
    assert checked["diff"] == [{"before_header": str(conf), "after_header": str(conf),
                                "before": "NCCL_IB_QPS_PER_CONNECTION=4\n", "after": ""}]
    assert run(module_args, {"absent": [str(conf)]})["changed_paths"] == [str(conf)] and not conf.exists()
    assert run(module_args, {"absent": [str(conf)]})["changed"] is False
    refused = run(module_args, {"absent": [str(tmp_path / "etc")]})
    assert refused["failed"] and "is a directory" in refused["msg"] and (tmp_path / "etc").is_dir()
    assert "argument 'absent' path" in run(module_args, {"absent": ["etc/nccl.conf"]})["msg"]


def _systemctl(bin_dir: Path, log: Path, rc: int = 0) -> None:
    """A ``systemctl`` on PATH that logs its arguments (the module runs it with a deadline)."""
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "systemctl"
    tool.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexit {rc}\n")
    tool.chmod(0o755)


def test_systemd_reload_runs_once_where_systemd_runs_and_something_changed(
        module_args: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, running = tmp_path / "systemctl.log", tmp_path / "run-systemd-system"
    _systemctl(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(fabric_files, "SYSTEMD_RUNNING", str(running))
    params = dict(layout(tmp_path / "root"), systemd_reload=True)
    # no systemd running the host: nothing to reload (as the handler's stat found)
    first = run(module_args, params)
    assert first["changed"] and first["systemd_reloaded"] is False and not log.exists()
    running.mkdir()
    (tmp_path / "root/etc/fabtune/rdma_cm.conf").write_text("changed by hand\n")
    assert run(module_args, params, check_mode=True)["systemd_reloaded"] is False and not log.exists()
    fixed = run(module_args, params)
    assert fixed["changed"] and fixed["systemd_reloaded"] is True
    assert log.read_text() == "daemon-reload\n"
    again = run(module_args, params)  # nothing changed: no reload
    assert again["changed"] is False and again["systemd_reloaded"] is False
    assert log.read_text() == "daemon-reload\n"
    unasked = run(module_args, dict(layout(tmp_path / "other")))
    assert unasked["changed"] and unasked["systemd_reloaded"] is False
    assert log.read_text() == "daemon-reload\n"


def test_a_failed_reload_fails_the_task_and_says_the_files_were_written(
        module_args: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _systemctl(tmp_path / "bin", tmp_path / "systemctl.log", rc=1)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    (tmp_path / "run-systemd-system").mkdir()
    monkeypatch.setattr(fabric_files, "SYSTEMD_RUNNING", str(tmp_path / "run-systemd-system"))
    failed = run(module_args, dict(layout(tmp_path / "root"), systemd_reload=True))
    assert failed["failed"] and failed["changed"] is True
    assert "systemctl daemon-reload failed (rc 1)" in failed["msg"] and "files were written" in failed["msg"]
    assert (tmp_path / "root/etc/fabtune/rdma_cm.conf").exists()
