"""fabric_revert (arm/confirm, check mode) with mocked commands, and fabric_apply's revert on a node tree."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import TOOLS
from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module, load_util
from tests.unit.sim_tools.conftest import roce_node

fabric_apply = load_util("fabric_apply")  # the module_utils the modules import (loaded once, by conftest)
fabric_revert = load_module("fabric_revert")
fabric_sysfs = load_module("fabric_sysfs")

SNAPSHOT = {"nics": {"eth9": {"trust": "pcp", "pfc": [], "mtu": 1500}}, "nccl": None,
            "hardware": {"ports": []}}


class Host:
    """The host seen by the module: systemctl/systemd-run answers and the argv run, in order."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.active = False
        self.run_rc = 0

    def run_command(self, argv: list[str], **_: Any) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        name = os.path.basename(argv[0])
        if name == "systemctl" and argv[1] == "is-active":
            return (0, "active\n", "") if self.active else (3, "inactive\n", "")
        if name == "systemctl" and argv[1] == "stop":
            was, self.active = self.active, False
            return (0, "", "") if was else (5, "", f"Failed to stop {argv[2]}: Unit {argv[2]} not loaded.")
        if name == "systemctl":
            return 0, "", ""
        if name == "systemd-run":
            if self.run_rc:
                return self.run_rc, "", "Failed to start transient timer unit: boom"
            self.active = True
            return 0, "", "Running timer as unit: x.timer\n"
        raise AssertionError(f"unexpected command {argv}")

    def verbs(self) -> list[str]:
        return [" ".join([os.path.basename(c[0]), c[1]]) for c in self.calls]


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Host:
    fake = Host()
    monkeypatch.setattr(fabric_revert.AnsibleModule, "run_command",
                        lambda _self, argv, **kw: fake.run_command(argv, **kw))
    monkeypatch.setattr(fabric_revert.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    monkeypatch.setattr(fabric_revert, "netdev_split", lambda root: (["eth9"], ["lo"]))
    monkeypatch.setattr(fabric_revert, "kept_files", lambda root: {"/etc/nccl.conf": None})
    script = tmp_path / "fabtune-revert"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return fake


def args(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return dict({"run_id": "run1.move-2", "snapshot": SNAPSHOT, "deadline_s": 15,
                 "state_dir": str(tmp_path / "revert"), "script": str(tmp_path / "fabtune-revert")}, **extra)


def run_module(module_args: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    module_args(params, check_mode=check_mode)
    with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as done:
        fabric_revert.main()
    return dict(done.value.args[0])


@pytest.mark.parametrize("run_id", ["a/b", "../x", "x y", "", "a;b"])
def test_run_id_is_validated(module_args: Any, host: Host, tmp_path: Path, run_id: str) -> None:
    result = run_module(module_args, args(tmp_path, run_id=run_id))
    assert result["failed"] and "run_id" in result["msg"]
    assert host.calls == []


def test_deadline_must_be_at_least_10_s(module_args: Any, host: Host, tmp_path: Path) -> None:
    result = run_module(module_args, args(tmp_path, deadline_s=9))
    assert result["failed"] and "at least 10" in result["msg"]
    assert host.calls == []


def test_armed_needs_a_snapshot(module_args: Any, host: Host, tmp_path: Path) -> None:
    params = args(tmp_path)
    del params["snapshot"]
    assert run_module(module_args, params)["failed"]


def test_an_unappliable_snapshot_is_refused(module_args: Any, host: Host, tmp_path: Path) -> None:
    result = run_module(module_args, args(tmp_path, snapshot={"nics": {"eth7": {"mtu": 1234}}}))
    assert result["failed"] and "eth7" in result["msg"] and "1234" in result["msg"]
    assert host.calls == [] and not (tmp_path / "revert/run1.move-2.json").exists()


def test_arm_saves_the_snapshot_0600_then_starts_the_timer(module_args: Any, host: Host,
                                                          tmp_path: Path) -> None:
    result = run_module(module_args, args(tmp_path))
    assert result["changed"] and result["armed"] and result["unit"] == "fabtune-revert-run1.move-2.timer"
    saved = tmp_path / "revert/run1.move-2.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    record = json.loads(saved.read_text())
    assert record["snapshot"] == SNAPSHOT and record["deadline"] == result["deadline"]
    assert record["files"] == {"/etc/nccl.conf": None}
    assert host.calls[-1] == ["/usr/bin/systemd-run", "--unit=fabtune-revert-run1.move-2", "--on-active=15s",
                              "--timer-property=AccuracySec=1s", str(tmp_path / "fabtune-revert"),
                              "run1.move-2"]
    verbs = host.verbs()
    assert verbs.index("systemctl stop") < verbs.index("systemd-run --unit=fabtune-revert-run1.move-2")


def test_rearming_stops_the_previous_timer_first(module_args: Any, host: Host, tmp_path: Path) -> None:
    run_module(module_args, args(tmp_path))
    (tmp_path / "revert/run1.move-2.reverted.json").write_text("{}")
    host.calls.clear()
    result = run_module(module_args, args(tmp_path, deadline_s=30))
    assert result["armed"]
    assert host.verbs()[0] == "systemctl stop" and host.calls[0][2] == "fabtune-revert-run1.move-2.timer"
    assert "--on-active=30s" in host.calls[-1]
    assert not (tmp_path / "revert/run1.move-2.reverted.json").exists()


def test_check_mode_arms_nothing(module_args: Any, host: Host, tmp_path: Path) -> None:
    result = run_module(module_args, args(tmp_path), check_mode=True)
    assert result["changed"] is True and result["armed"] is False and result["deadline"] is None
    assert host.calls == [] and not (tmp_path / "revert").exists()


def test_a_failed_systemd_run_leaves_no_snapshot(module_args: Any, host: Host, tmp_path: Path) -> None:
    host.run_rc = 1
    result = run_module(module_args, args(tmp_path))
    assert result["failed"] and "boom" in result["msg"]
    assert not (tmp_path / "revert/run1.move-2.json").exists()


def test_the_script_must_be_installed(module_args: Any, host: Host, tmp_path: Path) -> None:
    result = run_module(module_args, args(tmp_path, script=str(tmp_path / "missing")))
    assert result["failed"] and "fabric_revert installs it" in result["msg"]


def test_confirm_stops_and_removes_and_is_idempotent(module_args: Any, host: Host, tmp_path: Path) -> None:
    run_module(module_args, args(tmp_path))
    confirm = {"run_id": "run1.move-2", "state": "confirmed", "state_dir": str(tmp_path / "revert")}
    check = run_module(module_args, confirm, check_mode=True)
    assert check["changed"] and host.active and (tmp_path / "revert/run1.move-2.json").exists()
    result = run_module(module_args, confirm)
    assert result["changed"] and not result["armed"] and not host.active
    assert not (tmp_path / "revert/run1.move-2.json").exists()
    again = run_module(module_args, dict(confirm, state="absent"))
    assert again["changed"] is False and "failed" not in again


def test_the_first_arming_of_a_run_is_kept_as_its_pre_run_record(module_args: Any, host: Host,
                                                                  tmp_path: Path) -> None:
    first = run_module(module_args, args(tmp_path))
    later = dict(SNAPSHOT, nics={"eth9": {"trust": "dscp", "pfc": [3], "mtu": 4200}})
    second = run_module(module_args, args(tmp_path, snapshot=later))
    assert first["prerun"] is True and second["prerun"] is False
    prerun = tmp_path / "revert/run1.move-2.prerun.json"
    assert stat.S_IMODE(prerun.stat().st_mode) == 0o600
    assert json.loads(prerun.read_text())["snapshot"] == SNAPSHOT  # the pre-run state, not the later move's
    confirm = {"run_id": "run1.move-2", "state": "confirmed", "state_dir": str(tmp_path / "revert")}
    run_module(module_args, confirm)
    assert prerun.exists() and not (tmp_path / "revert/run1.move-2.json").exists()


def test_only_the_last_runs_pre_run_records_are_kept(module_args: Any, host: Host, tmp_path: Path) -> None:
    for n in range(fabric_apply.PRERUN_KEPT + 2):
        run_module(module_args, args(tmp_path, run_id=f"run{n:02d}"))
        os.utime(tmp_path / f"revert/run{n:02d}.prerun.json", (1_700_000_000 + n, 1_700_000_000 + n))
    kept = sorted(p.name for p in (tmp_path / "revert").glob("*.prerun.json"))
    assert kept == [f"run{n:02d}.prerun.json" for n in range(2, fabric_apply.PRERUN_KEPT + 2)]


def test_confirm_after_the_host_reverted_fails(module_args: Any, host: Host, tmp_path: Path) -> None:
    done = tmp_path / "revert/run1.move-2.reverted.json"
    done.parent.mkdir()
    done.write_text(json.dumps({"reverted_at": 1700000000}))
    result = run_module(module_args, {"run_id": "run1.move-2", "state": "confirmed",
                                      "state_dir": str(tmp_path / "revert")})
    assert result["failed"] and result["reverted"] is True and "already reverted" in result["msg"]


def test_extend_moves_the_deadline_and_keeps_the_snapshot(module_args: Any, host: Host,
                                                          tmp_path: Path) -> None:
    armed = run_module(module_args, args(tmp_path))
    saved = tmp_path / "revert/run1.move-2.json"
    host.calls.clear()
    extend = {"run_id": "run1.move-2", "state": "extended", "deadline_s": 40,
              "state_dir": str(tmp_path / "revert")}
    check = run_module(module_args, extend, check_mode=True)
    assert check["changed"] and check["deadline"] == armed["deadline"] and host.calls == []
    result = run_module(module_args, extend)
    assert result["armed"] and result["reverted"] is False and result["deadline"] > armed["deadline"]
    assert host.verbs()[0] == "systemctl stop"
    assert host.calls[-1][:3] == ["/usr/bin/systemd-run", "--unit=fabtune-revert-run1.move-2",
                                  "--on-active=40s"]
    assert host.calls[-1][-2:] == [str(tmp_path / "fabtune-revert"), "run1.move-2"]  # the script armed first
    record = json.loads(saved.read_text())
    assert record["snapshot"] == SNAPSHOT and record["deadline"] == result["deadline"]
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads((tmp_path / "revert/run1.move-2.prerun.json").read_text())["snapshot"] == SNAPSHOT


def test_extend_after_the_host_reverted_fails_and_rearms_nothing(module_args: Any, host: Host,
                                                                 tmp_path: Path) -> None:
    run_module(module_args, args(tmp_path))
    saved = tmp_path / "revert/run1.move-2.json"
    saved.rename(tmp_path / "revert/run1.move-2.reverted.json")  # what fabtune-revert does when it fires
    host.calls.clear()
    result = run_module(module_args, {"run_id": "run1.move-2", "state": "extended",
                                      "state_dir": str(tmp_path / "revert")})
    assert result["failed"] and result["reverted"] is True and "already reverted" in result["msg"]
    assert host.calls == [] and not saved.exists()


def test_extend_in_check_mode_after_a_check_mode_arming_changes_nothing(module_args: Any, host: Host,
                                                                          tmp_path: Path) -> None:
    run_module(module_args, args(tmp_path), check_mode=True)  # what apply.yml --check does first
    result = run_module(module_args, {"run_id": "run1.move-2", "state": "extended",
                                      "state_dir": str(tmp_path / "revert")}, check_mode=True)
    assert "failed" not in result and result["armed"] is False and "would extend" in result["msg"]
    assert host.calls == [] and not (tmp_path / "revert").exists()


def test_extend_of_a_run_never_armed_fails(module_args: Any, host: Host, tmp_path: Path) -> None:
    result = run_module(module_args, {"run_id": "run9", "state": "extended",
                                      "state_dir": str(tmp_path / "revert")})
    assert result["failed"] and result["reverted"] is False and "not armed on this host" in result["msg"]
    assert host.calls == []


# --- fabric_apply: the same code as the modules; the revert on an emulated node tree -----------

def test_the_module_and_the_revert_share_one_apply_code() -> None:
    assert fabric_sysfs.nic_knobs is fabric_apply.nic_knobs
    assert fabric_sysfs.plan is fabric_apply.plan
    assert fabric_sysfs.write_changes is fabric_apply.write_changes


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A provisioned RoCE node under tmp_path/root, with configfs where a host has it."""
    root = tmp_path / "root"
    provision(root, roce_node(), {"mtu": 4200})
    (root / "sys/kernel").mkdir(parents=True)
    (root / "sys/kernel/config").symlink_to(root / "configfs")
    return root


def tools_on(root: Path) -> Any:
    """``run(argv) -> stdout`` through the emulated tools acting on the node tree."""
    state = NodeState.under(root)

    def run(argv: list[str]) -> str:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            code = TOOLS[argv[0]](argv[1:], state=state)  # type: ignore[call-arg]
        if code:
            raise fabric_apply.ApplyError(f"{argv} rc {code}")
        return buf.getvalue()
    return run


def test_revert_applies_the_snapshot_and_marks_it_done(node: Path, tmp_path: Path) -> None:
    run = tools_on(node)
    nic = "ens1np0"
    before_qos = run(["mlnx_qos", "-i", nic, "-a"])
    tos = node / "configfs/rdma_cm/mlx5_0/ports/1/default_roce_tos"
    ecn = node / f"sys/class/net/{nic}/ecn/roce_np/enable/3"
    ecn_on = [p for p in range(8) if (ecn.parent / str(p)).read_text().strip() == "1"]
    snapshot = {"nics": {nic: {"trust": "pcp", "pfc": [], "roce_tos": int(tos.read_text()),
                               "ecn": {"np": ecn_on}}},
                "nccl": {"NCCL_IB_TC": "0"}}
    conf = node / "etc/nccl.conf"
    conf.parent.mkdir(parents=True)
    kept = "#\n# Ansible managed\n#\nNCCL_IB_TC=0\n"
    conf.write_text(kept)
    state_dir = tmp_path / "revert"
    fabric_apply.write_record(str(state_dir), "r1", {"snapshot": snapshot, "files": {"/etc/nccl.conf": kept}})
    # the move: PFC on 3 under DSCP trust, ToS 106, ECN off on 3, another nccl.conf
    run(["mlnx_qos", "-i", nic, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0"])
    tos.write_text("106\n")
    ecn.write_text("0\n")
    conf.write_text("NCCL_IB_TC=106\n")
    lines: list[str] = []
    code = fabric_apply.revert("r1", state_dir=str(state_dir), root=str(node), run=run,
                               which=lambda name: name in ("mlnx_qos",), log=lines.append)
    assert code == 0, lines
    assert run(["mlnx_qos", "-i", nic, "-a"]) == before_qos
    assert tos.read_text().strip() == str(snapshot["nics"][nic]["roce_tos"])
    assert conf.read_text() == kept
    assert not (state_dir / "r1.json").exists()
    done = json.loads((state_dir / "r1.reverted.json").read_text())
    assert done["problems"] == [] and any("pfc" in c for c in done["changes"])
    assert any("reverted" in line for line in lines)
    assert fabric_apply.revert("r1", state_dir=str(state_dir), root=str(node), run=run,
                               which=lambda name: True, log=lines.append) == 0  # nothing armed now
    assert "nothing armed" in lines[-1]


def test_revert_that_cannot_apply_is_marked_failed(node: Path, tmp_path: Path) -> None:
    state_dir = tmp_path / "revert"
    fabric_apply.write_record(str(state_dir), "r2", {"snapshot": {"nics": {"ens1np0": {"pfc": [3]}}}})
    lines: list[str] = []
    code = fabric_apply.revert("r2", state_dir=str(state_dir), root=str(node), run=tools_on(node),
                               which=lambda name: None, log=lines.append)
    assert code == 1 and (state_dir / "r2.revert-failed.json").exists()
    assert "neither mlnx_qos nor dcb" in " ".join(lines)


def test_revert_goes_on_past_an_unreadable_qos_state(node: Path, tmp_path: Path) -> None:
    """A QoS read the parser cannot use fails that port's QoS, not the whole revert."""
    tools = tools_on(node)
    nic = "ens1np0"
    tos = node / "configfs/rdma_cm/mlx5_0/ports/1/default_roce_tos"
    want = int(tos.read_text())
    tos.write_text("106\n")

    def run(argv: list[str]) -> str:
        return "garbage\n" if argv[-1] == "-a" else tools(argv)

    state_dir = tmp_path / "revert"
    snapshot = {"nics": {nic: {"pfc": [], "roce_tos": want}}}
    fabric_apply.write_record(str(state_dir), "r3", {"snapshot": snapshot})
    lines: list[str] = []
    code = fabric_apply.revert("r3", state_dir=str(state_dir), root=str(node), run=run,
                               which=lambda name: name == "mlnx_qos", log=lines.append)
    assert code == 1, lines
    failed = json.loads((state_dir / "r3.revert-failed.json").read_text())
    assert [p.split(":")[0] for p in failed["problems"]] == [f"{nic} qos"]
    assert tos.read_text().strip() == str(want)  # the rest of the snapshot is still put back
    assert not (state_dir / "r3.json").exists()


def test_revert_main_validates_its_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fabric_apply.revert_main(["../etc"], state_dir=str(tmp_path), log_file=str(tmp_path / "log")) == 2
    assert fabric_apply.revert_main(["nothing"], state_dir=str(tmp_path), log_file=str(tmp_path / "log")) == 0
    assert "nothing armed" in (tmp_path / "log").read_text()


def test_nccl_conf_rendered_like_the_role() -> None:
    assert fabric_apply.render_nccl_conf({"NCCL_IB_TC": 106, "NCCL_IB_GID_INDEX": 3}) == \
        "#\n# Ansible managed\n#\nNCCL_IB_GID_INDEX=3\nNCCL_IB_TC=106\n"


@pytest.mark.parametrize("systemd", [False, True])
def test_revert_puts_the_subnet_manager_config_back(node: Path, tmp_path: Path, systemd: bool) -> None:
    tools = tools_on(node)
    calls: list[list[str]] = []

    def run(argv: list[str]) -> str:
        calls.append(list(argv))
        return "" if argv[0] == "systemctl" else tools(argv)

    if systemd:
        (node / "run/systemd/system").mkdir(parents=True)
    conf = node / "etc/opensm/opensm.conf"
    conf.parent.mkdir(parents=True)
    kept = "# opensm\nrouting_engine minhop\nar_mode 0\n"
    conf.write_text("# opensm\nrouting_engine ar_updn\nar_mode 1\n")  # the move
    state_dir = tmp_path / "revert"
    record = {"snapshot": {"sm": {"routing_engine": "minhop"}}, "files": {fabric_apply.OPENSM_CONF: kept}}
    fabric_apply.write_record(str(state_dir), "r4", record)
    lines: list[str] = []
    code = fabric_apply.revert("r4", state_dir=str(state_dir), root=str(node), run=run,
                               which=lambda name: name == "mlnx_qos", log=lines.append)
    assert code == 0, lines
    assert conf.read_text() == kept
    assert (["systemctl", "restart", "opensm"] in calls) == systemd
    assert fabric_apply.OPENSM_CONF in fabric_apply.KEPT_FILES
