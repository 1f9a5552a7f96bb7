"""The modules' argument handling, check mode and diff, with exit/fail raising (no hosts)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import dcb, mlnx_qos
from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module, load_util
from tests.unit.sim_tools.conftest import roce_node

TOOLS = {"mlnx_qos": mlnx_qos.main, "dcb": dcb.main}

fabric_sysfs = load_module("fabric_sysfs")
fabric_apply = load_util("fabric_apply")  # the apply code fabric_sysfs and fabric_qos run
fabric_qos_backend = load_util("fabric_qos_backend")
fabric_qos = load_module("fabric_qos")
fabric_facts = load_module("fabric_facts")
fabric_validate = load_module("fabric_validate")
fabric_record = load_util("fabric_record")


def test_sysfs_plan_compares_stripped_text(tmp_path: Path) -> None:
    knob = tmp_path / "enable3"
    knob.write_text("1\n")
    before, changes = fabric_sysfs.plan({str(knob): 1, str(tmp_path / "missing"): "0"})
    assert before[str(knob)] == "1"
    assert changes == {str(tmp_path / "missing"): (None, "0")}


def test_sysfs_refuses_paths_outside_sys(module_args: Any) -> None:
    module_args({"knobs": {"/etc/passwd": "x"}})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_sysfs.main()
    assert "must name paths under /sys/" in failed.value.args[0]["msg"]


def test_sysfs_needs_knobs_or_interface(module_args: Any) -> None:
    module_args({})
    with pytest.raises(AnsibleFailJson):
        fabric_sysfs.main()


def test_sysfs_check_mode_reports_without_writing(module_args: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"/sys/class/net/x/ecn/roce_np/cnp_dscp": "46"}
    monkeypatch.setattr(fabric_apply, "read_value", files.get)
    monkeypatch.setattr(fabric_apply, "write_value", lambda p, v: pytest.fail("wrote in check mode"))
    module_args({"knobs": {"/sys/class/net/x/ecn/roce_np/cnp_dscp": "48"}}, check_mode=True, diff=True)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_sysfs.main()
    result = done.value.args[0]
    assert result["changed"] is True
    assert result["changes"][0]["before"] == "46" and result["changes"][0]["after"] == "48"
    assert "46" in result["diff"]["before"] and "48" in result["diff"]["after"]


def test_sysfs_writes_and_reads_back(module_args: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"/sys/a": "0"}
    monkeypatch.setattr(fabric_apply, "read_value", files.get)
    monkeypatch.setattr(fabric_apply, "write_value", files.__setitem__)
    module_args({"knobs": {"/sys/a": "1"}})
    with pytest.raises(AnsibleExitJson) as done:
        fabric_sysfs.main()
    assert done.value.args[0]["changed"] is True and files["/sys/a"] == "1"
    module_args({"knobs": {"/sys/a": "1"}})
    with pytest.raises(AnsibleExitJson) as again:
        fabric_sysfs.main()
    assert again.value.args[0]["changed"] is False



def test_sysfs_nics_sets_only_the_named_knobs_of_every_port(module_args: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """O(nics) with O(only): every port's MTU in one run, their ECN left alone, a port without an MTU
    skipped; the changes are per desired-state knob as with O(interface); check mode writes nothing."""
    files = {"/sys/class/net/a/mtu": "1500", "/sys/class/net/b/mtu": "4200"}
    monkeypatch.setattr(fabric_apply, "read_value", files.get)
    monkeypatch.setattr(fabric_sysfs, "read_nic_sysfs",
                        lambda root, name: {"mtu": int(files[f"/sys/class/net/{name}/mtu"])})
    monkeypatch.setattr(fabric_apply, "write_value", lambda p, v: pytest.fail("wrote in check mode"))
    nics = {"b": {"mtu": 4200, "ecn": {"np": [3]}}, "a": {"mtu": 4200, "cnp_dscp": 48}, "c": {"cnp_dscp": 48}}
    module_args({"nics": nics, "only": ["mtu"]}, check_mode=True, diff=True)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_sysfs.main()
    result = done.value.args[0]
    assert result["changed"] is True and result["paths_changed"] == ["/sys/class/net/a/mtu"]
    assert result["changes"] == [{"knob": "a.mtu", "before": 1500, "after": 4200}]
    assert sorted(result["before"]) == ["/sys/class/net/a/mtu", "/sys/class/net/b/mtu"]
    monkeypatch.setattr(fabric_apply, "write_value", files.__setitem__)
    module_args({"nics": nics, "only": ["mtu"]})
    with pytest.raises(AnsibleExitJson) as done:
        fabric_sysfs.main()
    assert done.value.args[0]["changed"] is True and files["/sys/class/net/a/mtu"] == "4200"
    module_args({"nics": nics, "only": ["mtu"]})
    with pytest.raises(AnsibleExitJson) as again:
        fabric_sysfs.main()
    assert again.value.args[0]["changed"] is False


def test_sysfs_persist_records_the_knobs_it_sets_in_the_same_run(
        module_args: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """O(persist): the knobs set and their record for fabtune-boot in one module run; check mode
    writes neither; a second run changes nothing; the record's changes are in ``changes``."""
    files = {"/sys/class/net/a/mtu": "1500", "/sys/class/net/b/mtu": "1500"}
    record = tmp_path / "persisted.json"
    monkeypatch.setattr(fabric_apply, "read_value", files.get)
    monkeypatch.setattr(fabric_sysfs, "read_nic_sysfs",
                        lambda root, name: {"mtu": int(files[f"/sys/class/net/{name}/mtu"])})
    monkeypatch.setattr(fabric_record, "netdev_split", lambda root: (["a", "b"], ["eth0"]))
    monkeypatch.setattr(fabric_apply, "write_value", lambda p, v: pytest.fail("wrote in check mode"))
    nics = {"a": {"mtu": 4200, "pfc": [3]}, "b": {"mtu": 4200, "pfc": [3]}}
    args = {"nics": nics, "only": ["mtu"], "persist": ["mtu", "pfc"], "persist_path": str(record)}
    module_args(args, check_mode=True, diff=True)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_sysfs.main()
    checked = done.value.args[0]
    assert checked["changed"] and not record.exists() and files["/sys/class/net/a/mtu"] == "1500"
    assert [c["knob"] for c in checked["changes"]] == [
        "a.mtu", "b.mtu", "persisted:a.mtu", "persisted:a.pfc", "persisted:b.mtu", "persisted:b.pfc"]
    assert [d.get("before_header") for d in checked["diff"]] == [None, str(record)]
    monkeypatch.setattr(fabric_apply, "write_value", files.__setitem__)
    module_args(args)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_sysfs.main()
    assert done.value.args[0]["changed"] and files["/sys/class/net/b/mtu"] == "4200"
    assert json.loads(record.read_text())["nics"] == {"a": {"mtu": 4200, "pfc": [3]},
                                                      "b": {"mtu": 4200, "pfc": [3]}}
    assert done.value.args[0]["persisted"] == json.loads(record.read_text())["nics"]
    module_args(args)
    with pytest.raises(AnsibleExitJson) as again:
        fabric_sysfs.main()
    assert again.value.args[0]["changed"] is False and again.value.args[0]["changes"] == []
    # the record alone is missing (removed by hand): only the record changes, no knob is written
    record.unlink()
    monkeypatch.setattr(fabric_apply, "write_value", lambda p, v: pytest.fail("no knob differs"))
    module_args(args)
    with pytest.raises(AnsibleExitJson) as rewritten:
        fabric_sysfs.main()
    assert rewritten.value.args[0]["changed"] and rewritten.value.args[0]["paths_changed"] == []
    assert record.exists()


def test_sysfs_persist_that_would_not_apply_at_boot_changes_nothing(module_args: Any,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    files = {"/sys/class/net/a/mtu": "1500"}
    record = tmp_path / "persisted.json"
    monkeypatch.setattr(fabric_apply, "read_value", files.get)
    monkeypatch.setattr(fabric_apply, "write_value", lambda p, v: pytest.fail("wrote a knob"))
    monkeypatch.setattr(fabric_sysfs, "read_nic_sysfs", lambda root, name: {"mtu": 1500})
    monkeypatch.setattr(fabric_record, "netdev_split", lambda root: (["a"], ["eth0"]))
    record.write_text("[]")  # not a record: fabtune-boot would refuse it
    args = {"nics": {"a": {"mtu": 4200}}, "only": ["mtu"], "persist": ["mtu"], "persist_path": str(record)}
    module_args(args)
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_sysfs.main()
    assert str(record) in failed.value.args[0]["msg"] and record.read_text() == "[]"
    record.unlink()
    module_args(dict(args, nics={"a": {"mtu": 4200, "pfc": [9]}}, persist=["mtu", "pfc"]))
    with pytest.raises(AnsibleFailJson) as refused:
        fabric_sysfs.main()
    assert refused.value.args[0]["msg"].startswith("argument 'nics' cannot be persisted")
    assert "pfc" in refused.value.args[0]["msg"] and not record.exists()
    module_args({"knobs": {"/sys/a": "1"}, "persist": ["mtu"]})
    with pytest.raises(AnsibleFailJson) as wrong_form:
        fabric_sysfs.main()
    assert "argument 'persist' needs 'nics'" in wrong_form.value.args[0]["msg"]


def test_sysfs_nics_refuses_mixed_forms_and_bad_ports(module_args: Any) -> None:
    module_args({"nics": {"a": {"mtu": 4200}}, "knobs": {"/sys/a": "1"}})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_sysfs.main()
    assert "mutually exclusive" in failed.value.args[0]["msg"]
    module_args({"nics": {"a": 4200}})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_sysfs.main()
    assert failed.value.args[0]["msg"] == "nics.a: must be a mapping of knobs, not 4200"
    for name in ("../../etc", "eth0/../..", "a" * 16, "eth 0", ".."):
        module_args({"nics": {name: {"mtu": 4200}}})
        with pytest.raises(AnsibleFailJson) as failed:
            fabric_sysfs.main()
        assert failed.value.args[0]["msg"].startswith(f"nics: {name!r} is not a netdev name"), name
    module_args({"interface": "x/y", "nic": {"mtu": 4200}})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_sysfs.main()
    assert failed.value.args[0]["msg"].startswith("interface: 'x/y' is not a netdev name")

def test_sysfs_nic_paths() -> None:
    nic = {"mtu": 4200, "ecn": {"np": [3]}, "cnp_prio": 6}
    knobs, problem = fabric_sysfs.nic_knobs("/nonexistent", "eth9", nic)
    assert problem is None
    assert knobs["/sys/class/net/eth9/mtu"] == "4200"
    assert knobs["/sys/class/net/eth9/ecn/roce_np/enable/3"] == "1"
    assert knobs["/sys/class/net/eth9/ecn/roce_np/enable/0"] == "0"
    assert knobs["/sys/class/net/eth9/ecn/roce_np/cnp_802p_prio"] == "6"
    _, problem = fabric_sysfs.nic_knobs("/nonexistent", "eth9", {"roce_tos": 106})
    assert problem is not None and "no RDMA port" in problem


def test_sysfs_cm_group() -> None:
    assert fabric_apply.cm_group("/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos") == \
        "/sys/kernel/config/rdma_cm/mlx5_0"
    assert fabric_apply.cm_group("/sys/class/net/x/mtu") is None


def test_qos_params_normalise_json_keys() -> None:
    desired = fabric_qos.desired_from_params({"dscp2prio": {"26": 3}, "pfc": [3, 3], "trust": "dscp"})
    assert desired == {"dscp2prio": {26: 3}, "pfc": [3], "trust": "dscp"}
    with pytest.raises(ValueError, match="dscp2prio"):
        fabric_qos.desired_from_params({"dscp2prio": {"64": 3}})
    with pytest.raises(ValueError, match="8 values"):
        fabric_qos.desired_from_params({"tsa": ["ets"]})


def test_qos_params_are_checked_by_the_nic_schema() -> None:
    """fabric_qos checks its arguments with fabric_desired's NIC schema, not a copy of its ranges:
    TSA names and ETS shares too (the old copy let both through to the tool)."""
    with pytest.raises(ValueError, match=r"argument\.tsa\[0\]"):
        fabric_qos.desired_from_params({"tsa": ["fair"] + ["ets"] * 7})
    with pytest.raises(ValueError, match="sum to 100"):
        fabric_qos.desired_from_params({"tsa": ["ets"] * 8, "tcbw": [10] * 8})


def test_qos_predict_merges_map_and_drops_it_under_pcp() -> None:
    before = {"trust": "dscp", "dscp2prio": {26: 2, 1: 0}, "pfc": []}
    assert fabric_qos.predict(before, {"dscp2prio": ({26: 2}, {26: 3})})["dscp2prio"] == {26: 3, 1: 0}
    assert "dscp2prio" not in fabric_qos.predict(before, {"trust": ("dscp", "pcp")})


def test_qos_check_mode_runs_only_reads(module_args: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def run_command(self: Any, argv: list[str], **_: Any) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, "Priority trust state: pcp\nPFC configuration:\n\tpriority 0 1 2 3 4 5 6 7\n" \
                  "\tenabled 0 0 0 0 0 0 0 0\n", ""

    monkeypatch.setattr(fabric_qos.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(fabric_qos.AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **k: f"/usr/bin/{name}")
    module_args({"interface": "eth9", "pfc": [3], "backend": "mlnx_qos"}, check_mode=True, diff=True)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_qos.main()
    result = done.value.args[0]
    assert result["changed"] is True
    assert result["changes"] == [{"knob": "eth9.pfc", "before": [], "after": [3]}]
    assert calls == [["/usr/bin/mlnx_qos", "-i", "eth9", "-a"]]
    assert result["commands"] == [["mlnx_qos", "-i", "eth9", "--pfc", "0,0,0,1,0,0,0,0"]]


def _usr_bin(self: Any, name: str, *_: Any, **__: Any) -> str:
    return f"/usr/bin/{name}"


def _qos_host(root: Path, calls: list[list[str]], fail: str | None = None) -> Any:
    """``run_command`` through the emulated mlnx_qos/dcb on a node tree (``fail``: that flag gets rc 1)."""
    provision(root, roce_node(), {"mtu": 4200})
    state = NodeState.under(root)

    def run_command(self: Any, argv: list[str], **_: Any) -> tuple[int, str, str]:
        calls.append(list(argv))
        name = os.path.basename(argv[0])
        if fail is not None and fail in argv:
            return 1, "", f"{name}: cannot {fail}"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = TOOLS[name](argv[1:], state=state)  # type: ignore[call-arg]
        return code, out.getvalue(), err.getvalue()
    return run_command


@pytest.mark.parametrize("backend", ["mlnx_qos", "dcb"])
def test_qos_applies_with_the_shared_apply_code(module_args: Any, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path, backend: str) -> None:
    assert fabric_qos.qos_apply is fabric_apply.qos_apply  # the code fabtune-revert runs
    calls: list[list[str]] = []
    monkeypatch.setattr(fabric_qos.AnsibleModule, "run_command", _qos_host(tmp_path / "root", calls))
    monkeypatch.setattr(fabric_qos.AnsibleModule, "get_bin_path", _usr_bin)
    args = {"interface": "ens1np0", "backend": backend, "trust": "dscp", "dscp2prio": {"26": 3}, "pfc": [3]}
    module_args(args, diff=True)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_qos.main()
    result = done.value.args[0]
    reads = [["/usr/bin/" + a[0], *a[1:]] for a in fabric_qos_backend.read_argvs(backend, "ens1np0")]
    writes = [["/usr/bin/" + a[0], *a[1:]] for a in result["commands"]]
    assert result["changed"] is True and result["backend"] == backend
    assert calls == reads + writes and writes
    assert [c["knob"] for c in result["changes"]] == ["ens1np0.dscp2prio", "ens1np0.pfc", "ens1np0.trust"]
    assert result["after"]["trust"] == "dscp" and result["after"]["pfc"] == [3]
    assert result["after"]["dscp2prio"][26] == 3
    assert result["diff"]["before_header"] == "ens1np0 qos" and "pfc: [3]" in result["diff"]["after"]
    # the prediction is what the port now reads (all of the DSCP map, under dscp trust), and a
    # second run reads only and changes nothing
    calls.clear()
    module_args(args)
    with pytest.raises(AnsibleExitJson) as again:
        fabric_qos.main()
    now = dict(again.value.args[0]["before"])
    assert again.value.args[0]["changed"] is False and again.value.args[0]["commands"] == []
    assert now.pop("dscp2prio")[26] == 3 and calls == reads
    assert now == {k: v for k, v in result["after"].items() if k != "dscp2prio"}


def test_qos_persist_records_the_port_knobs_after_setting_them(
        module_args: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """O(persist) with O(nics): every port set, then the record written, in one module run; the MTU
    the role sets with fabric_sysfs is recorded as O(nics) gives it."""
    calls: list[list[str]] = []
    record = tmp_path / "persisted.json"
    monkeypatch.setattr(fabric_qos.AnsibleModule, "run_command", _qos_host(tmp_path / "root", calls))
    monkeypatch.setattr(fabric_qos.AnsibleModule, "get_bin_path", _usr_bin)
    monkeypatch.setattr(fabric_record, "netdev_split", lambda root: (["ens1np0"], ["eth0"]))
    nics = {"ens1np0": {"trust": "dscp", "dscp2prio": {"26": 3}, "pfc": [3], "mtu": 4200}}
    args = {"nics": nics, "backend": "mlnx_qos", "persist": ["trust", "dscp2prio", "pfc", "mtu"],
            "persist_path": str(record)}
    module_args(args, check_mode=True, diff=True)
    with pytest.raises(AnsibleExitJson) as checked:
        fabric_qos.main()
    assert checked.value.args[0]["changed"] and not record.exists()
    assert "persisted:ens1np0.mtu" in [c["knob"] for c in checked.value.args[0]["changes"]]
    assert checked.value.args[0]["diff"][-1]["before_header"] == str(record)
    module_args(args)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_qos.main()
    result = done.value.args[0]
    assert result["changed"] and result["commands"]
    assert json.loads(record.read_text())["nics"] == {
        "ens1np0": {"trust": "dscp", "dscp2prio": {"26": 3}, "pfc": [3], "mtu": 4200}}
    module_args(args)
    with pytest.raises(AnsibleExitJson) as again:
        fabric_qos.main()
    assert again.value.args[0]["changed"] is False and again.value.args[0]["changes"] == []
    # a record that would not apply at boot fails before any port is touched
    calls.clear()
    bad = {"ens1np0": {"trust": "pcp", "dscp2prio": {"26": 3}}}
    module_args(dict(args, nics=bad, persist=["trust", "dscp2prio"]))
    with pytest.raises(AnsibleFailJson) as refused:
        fabric_qos.main()
    assert "argument 'nics'" in refused.value.args[0]["msg"] and calls == []


def test_qos_fails_on_an_unreadable_state_or_a_failed_write(module_args: Any, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.setattr(fabric_qos.AnsibleModule, "get_bin_path", _usr_bin)
    monkeypatch.setattr(fabric_qos.AnsibleModule, "run_command", lambda self, argv, **_: (0, "garbage\n", ""))
    module_args({"interface": "eth9", "backend": "mlnx_qos", "pfc": [3]})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_qos.main()
    assert failed.value.args[0]["msg"].startswith("cannot read the QoS state of eth9: ")
    calls: list[list[str]] = []
    run_command = _qos_host(tmp_path / "root", calls, fail="--pfc")
    monkeypatch.setattr(fabric_qos.AnsibleModule, "run_command", run_command)
    module_args({"interface": "ens1np0", "backend": "mlnx_qos", "pfc": [3]})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_qos.main()
    assert failed.value.args[0]["rc"] == 1
    assert "--pfc 0,0,0,1,0,0,0,0 failed (rc 1)" in failed.value.args[0]["msg"]
    assert len(calls) == 2



@pytest.mark.parametrize("backend", ["mlnx_qos", "dcb"])
def test_qos_sets_every_port_of_nics_in_one_run(module_args: Any, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path, backend: str) -> None:
    """O(nics): each port read and written as O(interface) would, in name order, one result for all;
    a port with no QoS knob (only an MTU) is left alone; a second run reads only."""
    calls: list[list[str]] = []
    monkeypatch.setattr(fabric_qos.AnsibleModule, "run_command", _qos_host(tmp_path / "root", calls))
    monkeypatch.setattr(fabric_qos.AnsibleModule, "get_bin_path", _usr_bin)
    nics = {"ens2np0": {"pfc": [3], "mtu": 4200}, "ens1np0": {"trust": "dscp", "dscp2prio": {"26": 3}},
            "ens3np0": {"mtu": 4200}}
    module_args({"nics": nics, "backend": backend}, diff=True)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_qos.main()
    result = done.value.args[0]
    reads = {n: [["/usr/bin/" + a[0], *a[1:]] for a in fabric_qos_backend.read_argvs(backend, n)]
             for n in ("ens1np0", "ens2np0")}
    assert result["changed"] is True and sorted(result["before"]) == ["ens1np0", "ens2np0"]
    assert [c["knob"] for c in result["changes"]] == ["ens1np0.dscp2prio", "ens1np0.trust", "ens2np0.pfc"]
    assert calls[:len(reads["ens1np0"])] == reads["ens1np0"] and not any("ens3np0" in c for c in calls)
    assert result["after"]["ens2np0"]["pfc"] == [3] and result["after"]["ens1np0"]["trust"] == "dscp"
    assert [d["before_header"] for d in result["diff"]] == ["ens1np0 qos", "ens2np0 qos"]
    calls.clear()
    module_args({"nics": nics, "backend": backend})
    with pytest.raises(AnsibleExitJson) as again:
        fabric_qos.main()
    assert again.value.args[0]["changed"] is False and calls == reads["ens1np0"] + reads["ens2np0"]


def test_qos_nics_failure_reports_the_ports_already_changed(module_args: Any, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    calls: list[list[str]] = []
    run_command = _qos_host(tmp_path / "root", calls, fail="--pfc")
    monkeypatch.setattr(fabric_qos.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(fabric_qos.AnsibleModule, "get_bin_path", _usr_bin)
    module_args({"nics": {"ens1np0": {"trust": "dscp"}, "ens2np0": {"pfc": [3]}}, "backend": "mlnx_qos"})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_qos.main()
    outcome = failed.value.args[0]
    assert "--pfc 0,0,0,1,0,0,0,0 failed (rc 1)" in outcome["msg"] and outcome["changed"] is True
    assert outcome["changes"] == [{"knob": "ens1np0.trust", "before": "pcp", "after": "dscp"}]


def test_qos_nics_arguments_are_checked_per_port(module_args: Any) -> None:
    module_args({"nics": {"ens1np0": {"pfc": [9]}, "ens2np0": "dscp"}})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_qos.main()
    assert "nics.ens1np0.pfc" in failed.value.args[0]["msg"] and "nics.ens2np0: must be a mapping" in \
        failed.value.args[0]["msg"]
    module_args({"nics": {"ens1np0": {"pfc": [3]}}, "pfc": [3]})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_qos.main()
    assert "mutually exclusive" in failed.value.args[0]["msg"]
    module_args({"backend": "mlnx_qos"})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_qos.main()
    assert "interface, nics" in failed.value.args[0]["msg"]

def test_qos_rejects_unknown_backend(module_args: Any) -> None:
    module_args({"interface": "eth9", "backend": "lldptool"})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_qos.main()
    assert "backend" in failed.value.args[0]["msg"]


def test_validate_module_fails_with_every_problem(module_args: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fabric_validate, "netdev_split", lambda root: (["eth9"], ["eth0"]))
    monkeypatch.setattr(fabric_validate, "rdma_ports", lambda root: [])
    module_args({"desired": {"nics": {"all": {"mtu": 5000, "cnp_prio": 8}}}})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_validate.main()
    assert len(failed.value.args[0]["problems"]) == 2


def test_topo_parse() -> None:
    text = ("\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tPIX\t0-47\t0\t\tN/A\nNIC0\tPIX\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\n"
            "NIC Legend:\n\n  NIC0: mlx5_0\n")
    topo = fabric_facts.parse_topo(text)
    assert topo is not None
    assert topo["matrix"]["GPU0"]["NIC0"] == "PIX"
    assert topo["nic_legend"] == {"NIC0": "mlx5_0"}


def test_topo_parse_keeps_the_gpu_numa_id_after_the_empty_cell() -> None:
    """nvidia-smi prints an empty cell (two TABs) between NUMA Affinity and GPU NUMA ID (fixture
    nvidia-smi__topo_m_hgx_h100_10nic_tabs_partial__nccl-issue1264): the old tab-split parser of
    fabric_facts read GPU NUMA ID as '' and lost the N/A; fabric_formats, shared with the
    controller, reads the row as ``fabtune parse topo`` does."""
    text = ("\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tPIX\t0-55,112-167\t0\t\tN/A\nNIC0\tPIX\t X \t\t\t\t\n\n")
    topo = fabric_facts.parse_topo(text)
    assert topo is not None
    assert topo["matrix"]["GPU0"]["CPU Affinity"] == "0-55,112-167"
    assert topo["matrix"]["GPU0"]["GPU NUMA ID"] == "N/A"
    assert topo["matrix"]["NIC0"] == {"GPU0": "PIX", "NIC0": "X"}


def test_topo_parse_of_other_text_is_none() -> None:
    assert fabric_facts.parse_topo("NVIDIA-SMI has failed because it couldn't communicate\n") is None


def test_sm_subset_reads_opensm_conf_as_opensm_does() -> None:
    """opensm's osm_subn_parse_conf_file ends a line at any '#' and clean_val drops one pair of
    quotes (tests/fidelity/test_opensm.py runs the real binary): the old fabric_host parser kept
    'sm_priority 14 # high' as '14 # high', which the schema refused, so the fact lost the key."""
    text = "sm_priority 14 # high\nrouting_engine 'updn'\nlmc 0\n"
    assert fabric_facts.sm_subset(text) == {"lmc": 0, "routing_engine": "updn", "sm_priority": 14}


def test_sm_subset_keeps_managed_keys_in_normal_form() -> None:
    text = ("# comment\nrouting_engine (null)\nlmc 0\nqos FALSE\nsm_priority 14\n"
            "log_file /var/log/opensm.log\n")
    assert fabric_facts.sm_subset(text) == {"lmc": 0, "qos": False, "sm_priority": 14}


HOST_PORTS = [{"dev": "mlx5_0", "port": 1, "netdev": "eth9"}, {"dev": "mlx5_1", "port": 1, "netdev": "eth8"}]


@pytest.mark.parametrize(
    ("hca", "refused", "warned"),
    [
        ("=mlx5_0,mlx5_1", False, []),
        ("mlx5", False, []),
        ("=mlx5_0:1,mlx5_3", False, ["mlx5_3"]),
        ("=mlx5_9", True, ["mlx5_9"]),
        ("=mlx5-0,mlx5-1", True, ["mlx5-0", "mlx5-1"]),
        ("mlx5_0:2", True, ["mlx5_0:2"]),
        ("^mlx5", True, []),
        ("^=mlx5_0", False, []),
    ],
)
def test_validate_module_checks_nccl_ib_hca_against_the_host(
    module_args: Any, monkeypatch: pytest.MonkeyPatch, hca: str, refused: bool, warned: list[str]
) -> None:
    monkeypatch.setattr(fabric_validate, "netdev_split", lambda root: (["eth8", "eth9"], ["eth0"]))
    monkeypatch.setattr(fabric_validate, "rdma_ports", lambda root: HOST_PORTS)
    warnings: list[str] = []
    monkeypatch.setattr(fabric_validate.AnsibleModule, "warn", lambda self, text: warnings.append(text))
    module_args({"desired": {"nccl": {"NCCL_IB_HCA": hca}}})
    with pytest.raises(AnsibleFailJson if refused else AnsibleExitJson) as done:
        fabric_validate.main()
    if refused:
        assert done.value.args[0]["problems"] == [
            f"nccl.NCCL_IB_HCA: {hca!r} selects none of this host's RDMA ports (mlx5_0:1, mlx5_1:1): "
            "NCCL would fall back to TCP sockets"
        ]
    assert warnings == [f"nccl.NCCL_IB_HCA: {w} matches no RDMA port of this host" for w in warned]


def test_validate_module_restores_a_snapshot_with_any_nccl_ib_hca(
    module_args: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fabric_validate, "netdev_split", lambda root: (["eth9"], ["eth0"]))
    monkeypatch.setattr(fabric_validate, "rdma_ports", lambda root: HOST_PORTS)
    module_args({"desired": {"nccl": {"NCCL_IB_HCA": "=mlx5_9"}}, "enforce_couplings": False})
    with pytest.raises(AnsibleExitJson):
        fabric_validate.main()


@pytest.mark.parametrize(("tools", "problem"), [
    ({"dcb": "5.11.0"}, "dcb (iproute2 5.11.0) cannot set the RoCE QoS: the dcb backend needs iproute2 "
                        "5.12 or later (the 'dcb app' object), or install mlnx_qos (mlnx-tools)"),
    ({}, "QoS (trust, DSCP map, PFC, ETS): neither mlnx_qos nor dcb is installed (install mlnx-tools or "
         "iproute2 5.12 or later)"),
    ({"dcb": "6.1.0"}, None),
    ({"dcb": "5.11.0", "mlnx_qos": ""}, None),  # auto takes mlnx_qos
])
def test_validate_module_refuses_a_host_whose_qos_tool_cannot(
    module_args: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tools: dict[str, str],
    problem: str | None,
) -> None:
    monkeypatch.setattr(fabric_validate, "netdev_split", lambda root: (["eth9"], ["eth0"]))
    monkeypatch.setattr(fabric_validate, "rdma_ports", lambda root: HOST_PORTS)
    paths = {}
    for name, version in tools.items():
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\necho 'dcb utility, iproute2-{version}'\n")
        path.chmod(0o755)
        paths[name] = str(path)
    monkeypatch.setattr(fabric_validate.AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **k: paths.get(name))
    module_args({"desired": {"nics": {"all": {"pfc": [3]}}}})
    with pytest.raises(AnsibleExitJson if problem is None else AnsibleFailJson) as done:
        fabric_validate.main()
    if problem is not None:
        assert done.value.args[0]["problems"] == [problem]
    # a desired state without QoS knobs needs no QoS tool
    module_args({"desired": {"nics": {"all": {"mtu": 4200}}}})
    with pytest.raises(AnsibleExitJson):
        fabric_validate.main()
