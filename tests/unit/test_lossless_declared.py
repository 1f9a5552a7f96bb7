"""The lossless class from the fabric: the inventory's ``fabtune_lossless`` is the plan's lossless
move; without it the planner guesses in its usual order and says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune.cli import main
from fabtune.errors import ConfigError, ExitStatus
from fabtune.inventory import lossless_class, read_inventory
from fabtune.journal import Journal
from fabtune.knobs import LOSSLESS_ORDER, LosslessClass, View, lossless_change, plan
from fabtune.tune import run as tune_run
from fabtune.tune.loop import TuneOptions, Tuner
from tests.unit.test_tune_loop import FACTORY, FakeRack


def _view(
    lossless: LosslessClass | None, nic: dict[str, Any] | None = None, nccl: dict[str, Any] | None = None
) -> View:
    return View("roce", nic or dict(FACTORY), nccl or {}, {}, 3, 2, "PIX", lossless=lossless)


def test_a_declared_class_is_the_only_lossless_candidate() -> None:
    group = plan(_view(LosslessClass(priority=4, dscp=30)))[0]
    assert len(group) == 1
    move = group[0]
    assert move.group == "lossless"
    assert "declared in the inventory" in move.why and "guess" not in move.why
    nic = move.change.nic
    assert nic["pfc"] == [4] and nic["ecn"] == {"np": [4], "rp": [4]}
    assert nic["dscp2prio"] == {30: 4, 48: 6}
    assert nic["roce_tos"] == 30 << 2 | 2 == int(move.change.nccl["NCCL_IB_TC"])
    assert (nic["cnp_dscp"], nic["cnp_prio"]) == (48, 6)


def test_a_declared_cnp_class_is_used() -> None:
    move = plan(_view(LosslessClass(priority=3, dscp=26, cnp_priority=7, cnp_dscp=46)))[0][0]
    assert move.change.nic["dscp2prio"] == {26: 3, 46: 7}
    assert (move.change.nic["cnp_dscp"], move.change.nic["cnp_prio"]) == (46, 7)


def test_without_a_declaration_the_planner_guesses_and_says_so() -> None:
    group = plan(_view(None))[0]
    assert [m.change.nic["pfc"] for m in group] == [[p] for p in LOSSLESS_ORDER]
    for prio, move in zip(LOSSLESS_ORDER, group, strict=True):
        assert "guess" in move.why
        assert move.why.startswith(
            f"guessed: no class declared in the inventory (fabtune_lossless): trying priority {prio}")


def test_a_rack_that_runs_the_declared_class_has_no_lossless_move() -> None:
    declared = LosslessClass(priority=5, dscp=42)
    change = lossless_change(5, dscp=42)
    runs, nccl = {**FACTORY, **change.nic}, dict(change.nccl)
    assert [g[0].group for g in plan(_view(declared, runs, nccl))] == ["mtu", "qps"]
    assert plan(_view(LosslessClass(priority=3, dscp=26), runs, nccl))[0][0].group == "lossless"


def test_the_loop_tries_the_declared_class_alone(tmp_path: Path) -> None:
    rack = FakeRack(lossless_prio=4)  # the switches run priority 4 (DSCP 34)
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    options = TuneOptions(skip_groups=("qps", "gdr"), lossless=LosslessClass(priority=4, dscp=34))
    result = Tuner(rack, journal, run_id, "roce", options=options).run()
    assert [(m.name, m.outcome) for m in result.moves] == [
        ("lossless priority 4, DSCP 34", "kept"),
        ("MTU 4200", "kept"),
    ]
    move = next(s for s in journal.steps(run_id) if s.kind == "move")
    assert "declared in the inventory" in move.payload["why"]


def _inventory(tmp_path: Path, all_vars: dict[str, Any], host_vars: dict[str, Any] | None = None) -> Path:
    hosts = {"h01": {"ansible_host": "10.0.0.1"}, "h02": {"ansible_host": "10.0.0.2", **(host_vars or {})}}
    path = tmp_path / "rack.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": {"fabtune_fabric": "roce", **all_vars}, "hosts": hosts}}))
    return path


def test_the_inventory_declares_the_class_in_all_vars_or_group_vars(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, {"fabtune_lossless": {"priority": 3, "dscp": 26}})
    info = read_inventory(inv)
    assert info.lossless == LosslessClass(3, 26, 6, 48)
    options, _ = tune_run.options_from(None, info)
    assert options.lossless == info.lossless  # what `fabtune tune` hands the loop
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("fabtune_lossless: {priority: 6, dscp: 50}\n")
    assert read_inventory(_inventory(tmp_path, {})).lossless == LosslessClass(6, 50, 7, 48)
    (tmp_path / "group_vars" / "all.yml").unlink()
    assert read_inventory(_inventory(tmp_path, {})).lossless is None


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ({"priority": 8, "dscp": 26}, ["fabtune_lossless.priority: 8 must be a whole number from 0 to 7"]),
        ({"priority": 3, "dscp": 64}, ["fabtune_lossless.dscp: 64 must be a whole number from 0 to 63"]),
        ({"priority": -1, "dscp": 26}, ["fabtune_lossless.priority: -1 must be a whole number from 0 to 7"]),
        (
            {"priority": True, "dscp": 26},
            ["fabtune_lossless.priority: True must be a whole number from 0 to 7"],
        ),
        ({"priority": 3}, ["fabtune_lossless.dscp: missing"]),
        (
            {"priority": 3, "dscp": 26, "prio": 3},
            ["fabtune_lossless: unknown field 'prio' (fields: priority, dscp, cnp_priority, cnp_dscp)"],
        ),
        ("3", ["fabtune_lossless: '3' must be a mapping {priority: 0-7, dscp: 0-63}"]),
        (
            {"priority": 3, "dscp": 48},
            [
                "fabtune_lossless.cnp_dscp: 48 is the lossless class's dscp too: CNPs would queue behind "
                "the traffic they throttle (declare cnp_dscp apart from dscp)"
            ],
        ),
        (
            {"priority": 3, "dscp": 26, "cnp_priority": 3},
            [
                "fabtune_lossless.cnp_priority: 3 is the lossless class's priority too: CNPs would queue "
                "behind the traffic they throttle (declare cnp_priority apart from priority)"
            ],
        ),
    ],
)
def test_a_bad_declaration_is_one_error_naming_the_field_and_value(value: Any, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        lossless_class(Path("inv.yml"), "roce", {"h01": value, "h02": value})
    assert err.value.problems == problems
    assert err.value.code == ExitStatus.CONFIG


def test_hosts_that_declare_different_classes_or_an_ib_fabric_are_refused() -> None:
    one, other = {"priority": 3, "dscp": 26}, {"priority": 4, "dscp": 34}
    with pytest.raises(ConfigError, match=r"h01 declares .*'priority': 3.*, but h02: .*'priority': 4"):
        lossless_class(Path("inv.yml"), "roce", {"h01": one, "h02": other})
    with pytest.raises(ConfigError, match="but h02: none"):
        lossless_class(Path("inv.yml"), "roce", {"h01": one, "h02": None})
    with pytest.raises(ConfigError, match="is for RoCE fabrics; this inventory is ib"):
        lossless_class(Path("inv.yml"), "ib", {"h01": one, "h02": one})


def test_tune_refuses_a_bad_declaration_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _inventory(tmp_path, {"fabtune_lossless": {"priority": 9, "dscp": 26}})
    assert main(["tune", "-i", str(inv)]) == ExitStatus.CONFIG
    assert "fabtune_lossless.priority: 9 must be a whole number from 0 to 7" in capsys.readouterr().err
