"""``fabtune apply`` is a journaled run under the fabric lock (pre-apply snapshot, the apply, its
outcome), ``--check`` journals a check and changes nothing, and ``fabtune rollback`` restores an
apply run. The hosts are a stand-in for the Ansible adapter that keeps each host's state."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fabtune import ansible
from fabtune.ansible import Part, RunOutcome, TaskResult
from fabtune.apply import host_problems
from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.lock import fabric_lock

INVENTORY = """\
all:
  hosts:
    h01: {ansible_host: 10.231.0.11}
    h02: {ansible_host: 10.231.0.12}
  vars:
    fabtune_fabric: roce
    fabtune_fabric_name: rack1
"""
PROFILE = "fabric_desired:\n  nics:\n    all: {mtu: 4200}\n"
FACTORY = {"nics": {"eth2": {"mtu": 1500}, "eth3": {"mtu": 1500}}, "nccl": None}
UNTOUCHED = dict.fromkeys(("h01", "h02"), FACTORY)
QOS_TASK = ("Configure RoCE QoS", "fabtune.fabric.fabric_qos", "runner_on_ok")


class Hosts:
    """Two hosts answering the playbooks fabtune runs: facts, apply (per host or one state), confirm."""

    def __init__(self) -> None:
        self.state = {h: copy.deepcopy(FACTORY) for h in ("h01", "h02")}
        self.books: list[tuple[str, str | None, bool]] = []
        self.unreachable: set[str] = set()

    def __call__(self, playbook: str, _inventory: Path, **kw: Any) -> RunOutcome:
        limit = kw.get("limit")
        self.books.append((playbook, limit, bool(kw.get("check"))))
        hosts = sorted(self.state) if limit is None else limit.split(",")
        dark = {h: 1 for h in hosts if h in self.unreachable}
        tasks = []
        for host in (h for h in hosts if h not in dark):
            if playbook == "facts.yml":
                facts = {**copy.deepcopy(self.state[host]), "hardware": {"gpus": 1}}
                result = {"ansible_facts": {"fabric_facts": facts}}
                tasks.append(TaskResult(host, "Gather the fabric state", "fabtune.fabric.fabric_facts",
                                        "runner_on_ok", False, result))
            elif playbook in ("apply.yml", "drift.yml"):
                tasks.append(self._apply(host, kw.get("extravars") or {}, check=bool(kw.get("check"))))
        stats = {"ok": {h: 1 for h in hosts if h not in dark}, "failures": {}, "dark": dark, "changed": {}}
        status, rc = ("failed", 4) if dark else ("successful", 0)
        return RunOutcome(status, rc, stats, tuple(tasks), Path("/x"))

    def parts(self, parts: Sequence[Part], inventory: Path, **kw: Any) -> list[RunOutcome]:
        """Several playbooks in one run, each part as a run of its own with its variables."""
        extravars = kw.pop("extravars", None) or {}
        return [self(p.playbook, inventory, extravars={**extravars, **p.variables}, **kw) for p in parts]

    def _apply(self, host: str, extravars: dict[str, Any], *, check: bool) -> TaskResult:
        by_host = extravars.get("fabric_desired_by_host")
        desired = by_host[host] if by_host else extravars["fabric_desired"]
        nics = self.state[host]["nics"]
        changes = []
        for name, knobs in (desired.get("nics") or {}).items():
            for dev in sorted(nics) if name == "all" else [name]:
                for knob, value in knobs.items():
                    before = nics[dev].get(knob)
                    if before != value:
                        changes.append({"knob": f"{dev}.{knob}", "before": before, "after": value})
                        if not check:
                            nics[dev][knob] = value
        return TaskResult(host, *QOS_TASK, bool(changes), {"changed": bool(changes), "changes": changes})


@pytest.fixture
def rack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Hosts, Path, Path]:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    hosts = Hosts()
    monkeypatch.setattr(ansible, "run_playbook", hosts)
    monkeypatch.setattr(ansible, "run_playbooks", hosts.parts)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY)
    profile = tmp_path / "mtu.yml"
    profile.write_text(PROFILE)
    return hosts, inventory, profile


def _only_run() -> Any:
    (run,) = Journal().runs()
    return run


def test_apply_is_journaled_with_the_pre_apply_state_and_rollback_restores_it(
    rack: tuple[Hosts, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hosts, inventory, profile = rack
    assert main(["apply", "-i", str(inventory), "--profile", str(profile)]) == ExitStatus.OK
    assert "eth2.mtu: 1500 -> 4200" in capsys.readouterr().out
    assert all(nic["mtu"] == 4200 for h in hosts.state.values() for nic in h["nics"].values())
    run = _only_run()
    assert (run.kind, run.state, run.fabric, run.profile) == ("apply", "done", "rack1", str(profile))
    assert run.summary["hosts_changed"] == ["h01", "h02"] and run.summary["knobs"] == 4
    journal = Journal()
    steps = journal.steps(run.id)
    assert [(s.kind, s.state) for s in steps] == [("snapshot", "done"), ("apply", "done")]
    assert steps[1].payload["changes"]["h02"][0] == {"host": "h02", "knob": "eth2.mtu", "before": 1500,
                                                     "after": 4200}
    assert journal.first_snapshot(run.id) == UNTOUCHED
    # the snapshot was read before anything changed
    assert [b[0] for b in hosts.books] == ["facts.yml", "apply.yml"]

    assert main(["rollback", run.id]) == ExitStatus.OK
    assert hosts.state == UNTOUCHED
    assert Journal().run(run.id).state == "rolled_back"
    assert [s.kind for s in Journal().steps(run.id)][-1] == "rollback"


def test_apply_with_a_limit_snapshots_and_rolls_back_only_those_hosts(rack: tuple[Hosts, Path, Path]) -> None:
    hosts, inventory, profile = rack
    assert main(["apply", "-i", str(inventory), "--profile", str(profile), "--limit", "h02"]) == ExitStatus.OK
    run = _only_run()
    assert Journal().first_snapshot(run.id) == {"h02": FACTORY}
    assert hosts.state["h01"] == FACTORY and hosts.state["h02"] != FACTORY
    hosts.books.clear()
    assert main(["rollback", run.id]) == ExitStatus.OK
    assert hosts.state["h02"] == FACTORY
    assert {limit for _book, limit, _check in hosts.books} == {"h02"}  # h01 was not touched


def test_apply_check_journals_a_check_and_changes_nothing(
    rack: tuple[Hosts, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hosts, inventory, profile = rack
    assert main(["apply", "-i", str(inventory), "--profile", str(profile), "--check"]) == ExitStatus.OK
    assert "h01: 2 knob(s) would change" in capsys.readouterr().out
    assert hosts.state == UNTOUCHED
    assert hosts.books == [("drift.yml", None, True)]
    run = _only_run()
    assert (run.kind, run.state, run.summary["check"]) == ("apply", "checked", True)
    assert Journal().first_snapshot(run.id) == {}
    assert main(["rollback", run.id]) == ExitStatus.CONFIG  # nothing to roll back
    assert "recorded no pre-run state" in capsys.readouterr().err


def test_apply_on_a_locked_fabric_is_refused_before_any_host_is_touched(
    rack: tuple[Hosts, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hosts, inventory, profile = rack
    for check in ([], ["--check"]):
        with fabric_lock("rack1", "tune"):
            code = main(["apply", "-i", str(inventory), "--profile", str(profile), *check])
        assert code == ExitStatus.LOCKED
        assert "fabric 'rack1' is locked" in capsys.readouterr().err
    assert hosts.books == [] and Journal().runs() == []


def test_an_unreachable_host_stops_the_apply_before_anything_changes(rack: tuple[Hosts, Path, Path]) -> None:
    hosts, inventory, profile = rack
    hosts.unreachable = {"h02"}
    assert main(["apply", "-i", str(inventory), "--profile", str(profile)]) == ExitStatus.PLAYBOOK
    assert [b[0] for b in hosts.books] == ["facts.yml"]
    assert hosts.state["h01"] == FACTORY
    run = _only_run()
    assert run.state == "failed" and "reading the hosts' state before the apply" in run.summary["error"]


def test_an_apply_that_fails_on_a_host_closes_the_run_failed_and_can_be_rolled_back(
    rack: tuple[Hosts, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts, inventory, profile = rack
    real = hosts.__call__

    def lose_h02_at_apply(playbook: str, inv: Path, **kw: Any) -> RunOutcome:
        hosts.unreachable = {"h02"} if playbook == "apply.yml" else set()
        return real(playbook, inv, **kw)

    monkeypatch.setattr(ansible, "run_playbook", lose_h02_at_apply)
    assert main(["apply", "-i", str(inventory), "--profile", str(profile)]) == ExitStatus.PLAYBOOK
    run = _only_run()
    assert run.state == "failed" and "h02" in run.summary["error"]
    assert hosts.state["h01"] != FACTORY
    hosts.unreachable = set()
    monkeypatch.setattr(ansible, "run_playbook", hosts)
    monkeypatch.setattr(ansible, "run_playbooks", hosts.parts)
    assert main(["rollback", run.id]) == ExitStatus.OK
    assert hosts.state == UNTOUCHED


def test_validation_problems_are_found_by_module_not_task_name() -> None:
    """A role's validate task is picked by the module that ran (fabric_validate), so renaming the
    task keeps its problems; another module's failure is not a validation problem."""
    tasks = (
        TaskResult("h01", "Check nccl_env's settings", "fabtune.fabric.fabric_validate", "runner_on_failed",
                   False, {"problems": ["nccl.NCCL_IB_TC: 300 must be in 0..255"]}),
        TaskResult("h02", "Validate the desired fabric state", "ansible.builtin.command", "runner_on_failed",
                   False, {"msg": "not a validation"}),
    )
    outcome = RunOutcome("failed", 2, {"failures": {"h01": 1, "h02": 1}}, tasks, Path("artifacts"))
    assert host_problems(outcome) == ["h01: nccl.NCCL_IB_TC: 300 must be in 0..255"]
