"""fabtune-boot's logic (fabric_apply.boot) on an emulated node tree, and the fabric_persist module.

At boot every run still armed whose timer is gone is reverted first (its snapshot, and the
persisted file as it was when armed), then the persisted state is applied: an unconfirmed move is
never re-applied, whatever it wrote to the persisted file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module, load_util
from tests.unit.modules.test_fabric_revert import tools_on
from tests.unit.sim_tools.conftest import roce_node

fabric_apply = load_util("fabric_apply")
fabric_persist = load_module("fabric_persist")
fabric_record = load_util("fabric_record")
NIC = "ens1np0"
PERSISTED = fabric_apply.PERSISTED


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A RoCE node just powered on (factory QoS: trust pcp, no PFC), configfs where a host has it."""
    from fabtune.sim.node import provision

    root = tmp_path / "root"
    provision(root, roce_node(), {"mtu": 1500})
    (root / "sys/kernel").mkdir(parents=True)
    (root / "sys/kernel/config").symlink_to(root / "configfs")
    return root


def host_run(root: Path, loaded: set[str]) -> Any:
    """The emulated tools on the node; ``systemctl is-active`` answers for the timers in ``loaded``."""
    tools = tools_on(root)

    def run(argv: list[str]) -> str:
        if argv[0] == "systemctl":
            if argv[-1] in loaded:
                return ""
            raise fabric_apply.ApplyError(f"{argv}: inactive")
        return tools(argv)
    return run


def write_persisted(root: Path, nics: dict[str, Any]) -> str:
    path = root / PERSISTED.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = fabric_apply.persisted_text(nics)
    path.write_text(text)
    return text


def qos(root: Path) -> tuple[str, list[int]]:
    text = tools_on(root)(["mlnx_qos", "-i", NIC])
    trust = next(line.split(":")[1].strip() for line in text.splitlines() if "trust state" in line)
    enabled = next(line for line in text.splitlines() if line.strip().startswith("enabled"))
    return trust, [i for i, flag in enumerate(enabled.split()[1:]) if flag == "1"]


def boot(root: Path, state_dir: Path, loaded: set[str] = frozenset()) -> tuple[int, list[str]]:  # type: ignore[assignment]
    lines: list[str] = []
    code = fabric_apply.boot(state_dir=str(state_dir), root=str(root), run=host_run(root, set(loaded)),
                             which=lambda name: name == "mlnx_qos", log=lines.append)
    return code, lines


# --- the persisted state ----------------------------------------------------------------------

def test_merge_keeps_what_a_later_apply_leaves_out_and_merges_maps_per_key() -> None:
    first = {NIC: {"trust": "dscp", "dscp2prio": {26: 3}, "ecn": {"np": [3], "rp": [3]}, "pfc": [3]}}
    later = {NIC: {"dscp2prio": {48: 6}, "ecn": {"np": [4]}, "pfc": [3, 4], "mtu": 4200}}
    merged = fabric_apply.merge_persisted(fabric_apply.merge_persisted({}, first), later)
    assert merged == {NIC: {"trust": "dscp", "dscp2prio": {"26": 3, "48": 6}, "ecn": {"np": [4], "rp": [3]},
                            "pfc": [3, 4], "mtu": 4200}}
    assert fabric_apply.persisted_text(merged) == fabric_apply.persisted_text(json.loads(json.dumps(merged)))


def test_a_port_back_at_pcp_trust_keeps_no_dscp_map() -> None:
    """A rollback to a pcp snapshot (fabric_facts holds no map then) leaves a file that still applies."""
    moved = fabric_apply.merge_persisted({}, {NIC: {"trust": "dscp", "dscp2prio": {26: 3}, "mtu": 4200}})
    back = fabric_apply.merge_persisted(moved, {NIC: {"trust": "pcp", "pfc": []}})
    assert back == {NIC: {"trust": "pcp", "pfc": [], "mtu": 4200}}


def test_armed_runs_are_the_armed_records_newest_first(tmp_path: Path) -> None:
    for name, at in (("old", 1.0), ("new", 2.0)):
        fabric_apply.write_record(str(tmp_path), name, {"armed_at": at})
    for done in ("x.reverted.json", "x.revert-failed.json", "x.prerun.json", "bad name.json", ".lock"):
        (tmp_path / done).write_text("{}")
    assert fabric_apply.armed_runs(str(tmp_path)) == [(2.0, "new"), (1.0, "old")]


# --- boot -------------------------------------------------------------------------------------

def arm(state_dir: Path, run_id: str, snapshot: dict[str, Any], persisted: str | None, at: float) -> None:
    fabric_apply.write_record(str(state_dir), run_id, {"armed_at": at, "snapshot": snapshot,
                                                         "files": {PERSISTED: persisted}})


def test_boot_reverts_an_unconfirmed_move_before_it_applies_the_persisted_state(node: Path,
                                                                                  tmp_path: Path) -> None:
    state_dir = tmp_path / "revert"
    kept = {NIC: {"trust": "dscp", "pfc": [3], "dscp2prio": {26: 3}}}
    pre_move = write_persisted(node, kept)  # what the last confirmed apply persisted
    arm(state_dir, "r1", {"nics": kept}, pre_move, 1.0)
    write_persisted(node, {NIC: {"trust": "dscp", "pfc": [3, 4], "dscp2prio": {26: 3}}})  # the move
    assert qos(node) == ("pcp", [])  # power-on values: the reboot reset the NIC

    code, lines = boot(node, state_dir)

    assert code == 0, lines
    assert qos(node) == ("dscp", [3])  # the pre-move state, not the move's PFC on 3 and 4
    assert (node / PERSISTED.lstrip("/")).read_text() == pre_move
    assert not (state_dir / "r1.json").exists() and (state_dir / "r1.reverted.json").exists()
    assert any("armed but never confirmed" in line for line in lines), lines


def test_boot_leaves_a_run_whose_timer_is_still_loaded_to_its_timer(node: Path, tmp_path: Path) -> None:
    """Started by hand (not at boot), the entry point must not revert a move its controller is measuring."""
    state_dir = tmp_path / "revert"
    moved = {NIC: {"trust": "dscp", "pfc": [3, 4]}}
    arm(state_dir, "r1", {"nics": {NIC: {"trust": "pcp", "pfc": []}}}, None, 1.0)
    write_persisted(node, moved)
    code, _lines = boot(node, state_dir, loaded={"fabtune-revert-r1.timer"})
    assert code == 0
    assert (state_dir / "r1.json").exists()
    assert qos(node) == ("dscp", [3, 4])


def test_boot_reverts_several_stranded_runs_newest_first(node: Path, tmp_path: Path) -> None:
    """Two unconfirmed runs: the older one's snapshot (the state before both) is what stays."""
    state_dir = tmp_path / "revert"
    first = {NIC: {"trust": "dscp", "pfc": [3]}}
    text = write_persisted(node, first)
    arm(state_dir, "older", {"nics": {NIC: {"trust": "dscp", "pfc": [3]}}}, text, 1.0)
    second = write_persisted(node, {NIC: {"trust": "dscp", "pfc": [4]}})
    arm(state_dir, "newer", {"nics": {NIC: {"trust": "dscp", "pfc": [4]}}}, second, 2.0)
    write_persisted(node, {NIC: {"trust": "dscp", "pfc": [5]}})
    code, lines = boot(node, state_dir)
    assert code == 0, lines
    assert qos(node) == ("dscp", [3])
    assert (node / PERSISTED.lstrip("/")).read_text() == text


def test_boot_with_nothing_persisted_changes_nothing(node: Path, tmp_path: Path) -> None:
    code, lines = boot(node, tmp_path / "revert")
    assert code == 0 and "nothing persisted" in lines[-1]
    assert qos(node) == ("pcp", [])


def test_a_port_the_host_no_longer_has_is_skipped_and_said(node: Path, tmp_path: Path) -> None:
    write_persisted(node, {NIC: {"trust": "dscp", "pfc": [3]}, "gone0": {"pfc": [3]}})
    code, lines = boot(node, tmp_path / "revert")
    assert code == 1
    assert qos(node) == ("dscp", [3])
    assert any("gone0: no such RoCE port" in line for line in lines), lines


def test_an_unreadable_persisted_file_fails_the_boot_and_names_it(node: Path, tmp_path: Path) -> None:
    (node / "etc/fabtune").mkdir(parents=True)
    (node / PERSISTED.lstrip("/")).write_text("{not json")
    code, lines = boot(node, tmp_path / "revert")
    assert code == 1 and PERSISTED in lines[-1]
    assert qos(node) == ("pcp", [])


def test_boot_main_takes_no_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fabric_apply.boot_main(["x"], log_file=str(tmp_path / "log")) == 2
    assert "usage: fabtune-boot" in capsys.readouterr().err


def test_the_revert_puts_the_persisted_file_back_as_it_was_armed() -> None:
    assert PERSISTED in fabric_apply.KEPT_FILES


# --- fabric_persist ---------------------------------------------------------------------------

def persist(module_args: Any, monkeypatch: pytest.MonkeyPatch, path: Path, nics: dict[str, Any], *,
            knobs: list[str] | None = None, check_mode: bool = False) -> dict[str, Any]:
    monkeypatch.setattr(fabric_record, "netdev_split", lambda root: ([NIC], ["eth0"]))
    module_args({"nics": nics, "knobs": knobs, "path": str(path)}, check_mode=check_mode, diff=True)
    with pytest.raises(AnsibleExitJson) as done:
        fabric_persist.main()
    result: dict[str, Any] = done.value.args[0]
    return result


def test_persist_check_mode_tells_the_truth_and_writes_nothing(
    module_args: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "persisted.json"
    result = persist(module_args, monkeypatch, path, {"all": {"pfc": [3], "mtu": 4200}}, check_mode=True)
    assert result["changed"] and not path.exists()
    assert {c["knob"] for c in result["changes"]} == {f"persisted:{NIC}.pfc", f"persisted:{NIC}.mtu"}
    assert result["diff"]["before"] == "" and '"mtu": 4200' in result["diff"]["after"]


def test_persist_takes_only_its_knobs_and_is_idempotent(module_args: Any, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "persisted.json"
    nics = {NIC: {"pfc": [3], "ecn": {"np": [3]}, "cnp_dscp": 48}}
    first = persist(module_args, monkeypatch, path, nics, knobs=["ecn", "cnp_dscp"])
    assert first["changed"] and first["nics"] == {NIC: {"ecn": {"np": [3]}, "cnp_dscp": 48}}
    again = persist(module_args, monkeypatch, path, nics, knobs=["ecn", "cnp_dscp"])
    assert not again["changed"] and again["changes"] == []
    more = persist(module_args, monkeypatch, path, nics, knobs=["pfc"])
    assert json.loads(path.read_text())["nics"] == {NIC: {"ecn": {"np": [3]}, "cnp_dscp": 48, "pfc": [3]}}
    assert [c["knob"] for c in more["changes"]] == [f"persisted:{NIC}.pfc"]


def test_persist_refuses_an_invalid_knob_and_a_corrupt_file(module_args: Any, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "persisted.json"
    monkeypatch.setattr(fabric_record, "netdev_split", lambda root: ([NIC], ["eth0"]))
    module_args({"nics": {NIC: {"pfc": [9]}}, "path": str(path)})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_persist.main()
    assert "pfc" in failed.value.args[0]["msg"] and not path.exists()
    path.write_text("[]")
    module_args({"nics": {NIC: {"pfc": [3]}}, "path": str(path)})
    with pytest.raises(AnsibleFailJson) as failed:
        fabric_persist.main()
    assert str(path) in failed.value.args[0]["msg"] and path.read_text() == "[]"


# --- the host side: fabtune-boot imports fabric_apply by its plain name, without Ansible -----------

def test_fabtune_boot_runs_on_a_bare_python_from_the_installed_lib(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    import jinja2
    import yaml

    from tests.unit.modules.test_revert_host_side import MODULE_UTILS, ROLE, _role_files

    lib = tmp_path / "lib"
    lib.mkdir()
    for name in _role_files():
        shutil.copy(MODULE_UTILS / name, lib / name)
    role = ROLE.parent / "fabric_boot"
    values = dict(yaml.safe_load((role / "defaults/main.yml").read_text()),
                  **yaml.safe_load((role / "vars/main.yml").read_text()))
    values.update(fabric_boot_lib_dir=str(lib), fabric_boot_log=str(tmp_path / "boot.log"))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: f"# {text}"
    script = env.from_string((role / "templates/fabtune-boot.j2").read_text()).render(
        ansible_managed="Ansible managed", **values)
    path = tmp_path / "fabtune-boot"
    path.write_text(script)
    proc = subprocess.run([sys.executable, "-I", "-S", str(path), "unexpected"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "usage: fabtune-boot" in proc.stderr, proc.stderr
    unit = env.from_string((role / "templates/fabtune-boot.service.j2").read_text()).render(
        ansible_managed="Ansible managed", **values)
    assert f"ExecStart={values['fabric_boot_script']}" in unit and "WantedBy=multi-user.target" in unit


def test_boot_creates_no_revert_directory_on_a_host_that_never_armed(node: Path, tmp_path: Path) -> None:
    write_persisted(node, {NIC: {"pfc": [3]}})
    code, _lines = boot(node, tmp_path / "revert")
    assert code == 0 and not (tmp_path / "revert").exists()
