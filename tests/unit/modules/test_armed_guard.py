"""An armed apply's changes are made only while the host holds the run armed (``fabric_apply.while_armed``).

An apply that outlasts its revert deadline has its hosts revert in its middle; the roles after that
must not change those hosts again (they would hold the rest of the move with no revert left). The
guard takes the revert's lock, so a revert whose deadline passes during a change waits for it and then
undoes it with the rest. The state directory is a temporary one (``fabric_apply.STATE_DIR`` patched).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module, load_util

fabric_apply = load_util("fabric_apply")
fabric_files = load_module("fabric_files")
fabric_persist = load_module("fabric_persist")
fabric_record = load_util("fabric_record")


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    found = tmp_path / "revert"
    monkeypatch.setattr(fabric_apply, "STATE_DIR", str(found))
    return found


def arm(state_dir: Path, run_id: str = "r1") -> None:
    fabric_apply.write_record(str(state_dir), run_id, {"run_id": run_id, "snapshot": {}, "files": {}})


def fire(state_dir: Path, run_id: str = "r1") -> int:
    """The revert as the timer runs it (an empty snapshot: it changes nothing, then marks the run)."""
    return int(fabric_apply.revert(run_id, state_dir=str(state_dir), root=str(state_dir.parent),
                                   run=lambda argv: (0, "", ""), which=lambda name: None))


def test_a_change_is_made_while_the_run_is_armed(state_dir: Path) -> None:
    arm(state_dir)
    with fabric_apply.while_armed("r1"):
        made = True
    assert made


def test_no_change_where_the_revert_already_fired(state_dir: Path) -> None:
    arm(state_dir)
    assert fire(state_dir) == 0
    refusal = pytest.raises(fabric_apply.RevertError, match="run r1 was already reverted on this host")
    with refusal as refused, fabric_apply.while_armed("r1"):
        pytest.fail("changed a host whose revert fired")
    assert refused.value.reverted is True


def test_no_change_where_the_run_was_never_armed(state_dir: Path) -> None:
    refusal = pytest.raises(fabric_apply.RevertError, match="run r9 is not armed on this host")
    with refusal as refused, fabric_apply.while_armed("r9"):
        pytest.fail("changed a host with no revert armed")
    assert refused.value.reverted is False


def test_an_apply_that_armed_nothing_is_not_guarded(state_dir: Path) -> None:
    with fabric_apply.while_armed(""):
        pass
    assert not state_dir.exists()  # not even looked at


def test_a_run_id_that_is_not_one_is_refused(state_dir: Path) -> None:
    refusal = pytest.raises(fabric_apply.RevertError, match=r"armed_run: '\.\./x y' is not a run id")
    with refusal, fabric_apply.while_armed("../x y"):
        pytest.fail("guarded nothing")


def test_a_revert_whose_deadline_passes_during_a_change_waits_for_it(state_dir: Path) -> None:
    arm(state_dir)
    done: list[int] = []
    reverter = threading.Thread(target=lambda: done.append(fire(state_dir)))
    with fabric_apply.while_armed("r1"):
        reverter.start()
        time.sleep(0.5)
        assert not done and (state_dir / "r1.json").exists()  # the revert waits on the lock
    reverter.join(10)
    assert done == [0] and (state_dir / "r1.reverted.json").exists()


def _run(module: Any, module_args: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    module_args(params, check_mode=check_mode)
    with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as done:
        module.main()
    return dict(done.value.args[0])


def _files(tmp_path: Path, run_id: str) -> dict[str, Any]:
    return {"files": [{"path": str(tmp_path / "etc/nccl.conf"), "content": "NCCL_IB_QPS_PER_CONNECTION=4\n"}],
            "owner": pwd.getpwuid(os.getuid()).pw_name, "group": grp.getgrgid(os.getgid()).gr_name,
            "armed_run": run_id}


def test_fabric_files_writes_under_an_armed_run_and_not_after_its_revert(
        state_dir: Path, tmp_path: Path, module_args: Any) -> None:
    arm(state_dir)
    assert _run(fabric_files, module_args, _files(tmp_path, "r1"))["changed"]
    (tmp_path / "etc/nccl.conf").unlink()
    fire(state_dir)
    refused = _run(fabric_files, module_args, _files(tmp_path, "r1"))
    assert refused["failed"] and refused["reverted"] is True and not refused["changed"]
    assert "already reverted" in refused["msg"] and not (tmp_path / "etc/nccl.conf").exists()
    # check mode arms nothing, so it checks nothing either: it reports what it would write
    assert _run(fabric_files, module_args, _files(tmp_path, "r1"), check_mode=True)["changed"]


def test_fabric_persist_records_nothing_after_the_revert_fired(
        state_dir: Path, tmp_path: Path, module_args: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fabric_record, "netdev_split", lambda root: (["eth2"], []))
    path = tmp_path / "persisted.json"
    params = {"nics": {"eth2": {"mtu": 4200}}, "path": str(path), "armed_run": "r1"}
    arm(state_dir)
    assert _run(fabric_persist, module_args, params)["changed"]
    assert json.loads(path.read_text())["nics"]["eth2"]["mtu"] == 4200
    fire(state_dir)
    refused = _run(fabric_persist, module_args, dict(params, nics={"eth2": {"mtu": 9000}}))
    assert refused["failed"] and refused["reverted"] is True
    assert json.loads(path.read_text())["nics"]["eth2"]["mtu"] == 4200  # not changed after the revert
