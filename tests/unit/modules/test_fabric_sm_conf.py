"""fabric_sm_conf: opensm.conf keys set in place as opensm reads them; idempotent; check mode and diff
tell the truth; an armed apply changes nothing once its revert fired.

A missing file is created by the real ``opensm --create-config`` (Debian's opensm, packages/debian.txt).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module, load_util

fabric_sm_conf = load_module("fabric_sm_conf")
fabric_apply = load_util("fabric_apply")
fabric_formats = load_util("fabric_formats")

CONF = """# routing engine
routing_engine (null)
qos FALSE
 lmc 0   # spaced, with a comment
sm_priority 0
sm_priority 5
"""
needs_opensm = pytest.mark.skipif(shutil.which("opensm", path="/usr/sbin:/usr/bin") is None,
                                  reason="opensm is not installed (scripts/install.sh installs it)")


def run(module_args: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    module_args(params, check_mode=check_mode, diff=True)
    with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as done:
        fabric_sm_conf.main()
    return dict(done.value.args[0])


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    path = tmp_path / "opensm.conf"
    path.write_text(CONF)
    return path


def test_sets_the_line_opensm_takes_appends_the_rest_then_changes_nothing(module_args: Any,
                                                                          conf: Path) -> None:
    keys = {"routing_engine": "updn", "qos": True, "sm_priority": 14, "qos_max_vls": 8}
    first = run(module_args, {"path": str(conf), "keys": keys})
    assert first["changed"] is True and first["created"] is False
    assert first["changed_keys"] == {"routing_engine": ["(null)", "updn"], "qos": ["FALSE", "TRUE"],
                                     "sm_priority": ["5", "14"], "qos_max_vls": [None, "8"]}
    assert conf.read_text() == ("# routing engine\nrouting_engine updn\nqos TRUE\n"
                                " lmc 0   # spaced, with a comment\n"
                                "sm_priority 0\nsm_priority 14\nqos_max_vls 8\n")
    assert fabric_formats.parse_opensm_conf(conf.read_text())["sm_priority"] == "14"  # what opensm takes
    assert first["changes"][0] == {"knob": f"{conf}:routing_engine", "before": "(null)", "after": "updn"}
    assert len(first["changes"]) == 4
    again = run(module_args, {"path": str(conf), "keys": keys})
    assert again["changed"] is False and again["changed_keys"] == {} and "diff" not in again


def test_a_value_opensm_already_takes_is_left_as_it_is_spelled(module_args: Any, conf: Path) -> None:
    result = run(module_args, {"path": str(conf), "keys": {"lmc": 0, "sm_priority": "5"}})
    assert result["changed"] is False and conf.read_text() == CONF


def test_check_mode_changes_nothing_and_its_diff_is_the_file_it_would_write(module_args: Any,
                                                                           conf: Path) -> None:
    checked = run(module_args, {"path": str(conf), "keys": {"routing_engine": "ftree"}}, check_mode=True)
    assert checked["changed"] is True and conf.read_text() == CONF
    assert checked["diff"]["before"] == CONF
    applied = run(module_args, {"path": str(conf), "keys": {"routing_engine": "ftree"}})
    assert conf.read_text() == checked["diff"]["after"] == applied["diff"]["after"]


@needs_opensm
def test_a_missing_file_is_opensms_own_defaults_with_the_keys_set(module_args: Any, tmp_path: Path) -> None:
    path = tmp_path / "etc/opensm/opensm.conf"
    checked = run(module_args, {"path": str(path), "keys": {"routing_engine": "updn"}}, check_mode=True)
    assert checked["changed"] is True and checked["created"] is True
    assert not path.parent.exists()  # check mode wrote nowhere on the host
    created = run(module_args, {"path": str(path), "keys": {"routing_engine": "updn"}})
    text = path.read_text()
    assert created["created"] is True and text == checked["diff"]["after"]
    assert created["changes"][0] == {"knob": str(path), "before": None, "after": "created"}
    parsed = fabric_formats.parse_opensm_conf(text)
    assert parsed["routing_engine"] == "updn" and "guid" in parsed and "sm_priority" in parsed
    assert run(module_args, {"path": str(path), "keys": {"routing_engine": "updn"}})["changed"] is False


def test_a_missing_file_without_create_is_one_error(module_args: Any, tmp_path: Path) -> None:
    path = tmp_path / "opensm.conf"
    failed = run(module_args, {"path": str(path), "keys": {"qos": True}, "create": False})
    assert failed["failed"] and failed["msg"] == f"{path} does not exist (create: false)"
    assert not path.exists()


@pytest.mark.parametrize(("keys", "says"), [
    ({"routing engine": "updn"}, "keys: 'routing engine' is not an opensm.conf key"),
    ({"routing_engine": "updn # x"}, "keys.routing_engine: 'updn # x' cannot be an opensm.conf value"),
    ({"qos_policy_file": "/a\nlmc 7"}, "keys.qos_policy_file: '/a\\nlmc 7' cannot be an opensm.conf value"),
    ({"routing_engine": ""}, "keys.routing_engine: '' cannot be an opensm.conf value"),
])
def test_a_key_or_value_opensm_would_read_otherwise_is_refused(module_args: Any, conf: Path,
                                                               keys: dict[str, str], says: str) -> None:
    failed = run(module_args, {"path": str(conf), "keys": keys})
    assert failed["failed"] and says in failed["msg"]
    assert conf.read_text() == CONF


def test_a_relative_path_is_refused(module_args: Any) -> None:
    failed = run(module_args, {"path": "etc/opensm.conf", "keys": {"qos": True}})
    assert failed["failed"]
    assert "path: must be an absolute, normalised path, not 'etc/opensm.conf'" in failed["msg"]


def test_nothing_changes_once_the_armed_runs_revert_fired(module_args: Any, conf: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir = tmp_path / "revert"
    monkeypatch.setattr(fabric_apply, "STATE_DIR", str(state_dir))
    fabric_apply.write_record(str(state_dir), "r1", {"run_id": "r1", "snapshot": {}, "files": {}})
    armed = run(module_args, {"path": str(conf), "keys": {"qos": True}, "armed_run": "r1"})
    assert armed["changed"] is True
    assert fabric_apply.revert("r1", state_dir=str(state_dir), root=str(tmp_path),
                               run=lambda argv: (0, "", ""), which=lambda name: None) == 0
    refused = run(module_args, {"path": str(conf), "keys": {"routing_engine": "updn"}, "armed_run": "r1"})
    assert refused["failed"] and refused["reverted"] is True and refused["changed"] is False
    assert "run r1 was already reverted on this host" in refused["msg"]
    assert fabric_formats.parse_opensm_conf(conf.read_text())["routing_engine"] == "(null)"
