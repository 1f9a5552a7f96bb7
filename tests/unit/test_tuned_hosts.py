"""A tuned desired state per host: the state most hosts share, and each other host's own.

A tuning run can leave one host different from the rest (the repair of its NCCL_IB_GID_INDEX, a
GDR level moved on a host whose NIC is on the far socket). Before, the tuned file held the first
host's state for every host, so drift flagged the repaired host's index and ``--remediate``
removed it. These tests fail on that code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import apply as apply_lib
from fabtune import desired, drift
from fabtune.ansible import RunOutcome
from fabtune.collection import PROFILES
from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo
from fabtune.profile import Profile, check_against_rack, load_profile
from fabtune.state import HostState, states_of, trees_of
from fabtune.tune.loop import MoveRecord, TuneResult
from fabtune.tune.run import tuned_state

SHARED = {"nics": {"all": {"mtu": 4200}}, "nccl": {"NCCL_IB_TC": "106"}}
OWN = {"nics": {"all": {"mtu": 4200}}, "nccl": {"NCCL_IB_TC": "106", "NCCL_IB_GID_INDEX": "3"}}


def _info(tmp_path: Path, hosts: tuple[str, ...] = ("h01", "h02", "h03")) -> InventoryInfo:
    return InventoryInfo(tmp_path / "inv.yml", "rackx", "roce", hosts, (), "mpirun", None)


def test_the_state_most_hosts_share_is_the_rack_s_and_the_odd_host_keeps_its_own() -> None:
    state = desired.split_by_host(states_of({"h01": SHARED, "h02": OWN, "h03": SHARED}))
    assert state.desired.tree() == SHARED and trees_of(state.hosts) == {"h02": OWN}
    assert state.for_host("h02").tree() == OWN and state.for_host("h03").tree() == SHARED
    groups = [(s.tree(), hosts) for s, hosts in state.groups(["h01", "h02", "h03"])]
    assert groups == [(SHARED, ["h01", "h03"]), (OWN, ["h02"])]
    tie = desired.split_by_host(states_of({"h01": OWN, "h02": SHARED}))  # a tie: the first host's state
    assert tie.desired.tree() == OWN and trees_of(tie.hosts) == {"h02": SHARED}
    assert desired.split_by_host(states_of({"h01": SHARED, "h02": SHARED})).hosts == {}


def test_a_tune_result_writes_the_repaired_host_s_index_under_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    nic = {"enp1s0": {"mtu": 4200}}
    per_host = {h: {"nics": nic, "nccl": dict(SHARED["nccl"])} for h in ("h01", "h02", "h03")}
    per_host["h02"]["nccl"]["NCCL_IB_GID_INDEX"] = "3"
    result = TuneResult("r1", [1.0], [1.0], 0.01, [], states_of(per_host), [])
    path = desired.save_tuned("rackx", tuned_state(result), "r1")
    doc = yaml.safe_load(path.read_text())
    assert doc["fabric_desired"] == SHARED
    assert doc["fabric_desired_hosts"] == {"h02": OWN}
    loaded = desired.load_tuned("rackx")
    assert loaded is not None and trees_of(loaded.hosts) == {"h02": OWN}
    uniform = desired.save_tuned("racky", HostState.from_tree(SHARED), "r2")
    assert "fabric_desired_hosts" not in yaml.safe_load(uniform.read_text())


def test_a_hand_broken_host_section_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    path = desired.save_tuned("rackx", HostState.from_tree(SHARED), "r1")
    path.write_text(yaml.safe_dump({"fabric_desired": SHARED, "fabric_desired_hosts": {"h02": [1]}}))
    with pytest.raises(ConfigError) as err:
        desired.load_tuned("rackx")
    assert err.value.problems == ["fabric_desired_hosts.h02: must be a mapping (that host's desired state)"]
    path.write_text(yaml.safe_dump({"fabric_desired": SHARED, "fabric_desired_hosts": {"h02": {"nccl": 5}}}))
    with pytest.raises(ConfigError) as err:
        drift.desired_for(_info(tmp_path), None)
    assert all(p.startswith("fabric_desired_hosts.h02.nccl") for p in err.value.problems), err.value.problems


def test_a_profile_with_host_states_loads_and_names_each_bad_field(tmp_path: Path) -> None:
    good = tmp_path / "good.yml"
    good.write_text(yaml.safe_dump({"fabric_desired": SHARED, "fabric_desired_hosts": {"h02": OWN}}))
    profile = load_profile(good)
    assert trees_of(profile.hosts) == {"h02": OWN}
    check_against_rack(profile, _info(tmp_path))
    with pytest.raises(ConfigError) as err:
        check_against_rack(profile, _info(tmp_path, ("h01", "h03")))
    inv = tmp_path / "inv.yml"
    assert err.value.problems == [f"fabric_desired_hosts.h02: is not a host of the inventory {inv}"]
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({
        "fabric_desired": SHARED, "fabric_desired_hosts": {"h02": {"nics": {"all": {"mtu": 12}}}, "../x": {}},
    }))
    with pytest.raises(ConfigError) as err:
        load_profile(bad)
    problems = err.value.problems
    mtu = "fabric_desired_hosts.h02.nics.all.mtu"
    assert any(p.startswith(mtu) and "12" in p for p in problems), problems
    assert "fabric_desired_hosts: '../x' is not a host name" in problems
    alone = tmp_path / "alone.yml"
    alone.write_text(yaml.safe_dump({"fabtune_tune": {}, "fabric_desired_hosts": {"h02": OWN}}))
    with pytest.raises(ConfigError) as err:
        load_profile(alone, need="fabtune_tune")
    assert err.value.problems == [
        "fabric_desired_hosts: needs fabric_desired beside it (every other host's state)"]


class Playbooks:
    """Records each playbook run (its desired state and --limit); every run succeeds, changing nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, str | None]] = []

    def __call__(self, playbook: str, _inventory: Path, **kwargs: Any) -> RunOutcome:
        self.calls.append((playbook, kwargs["extravars"]["fabric_desired"], kwargs.get("limit")))
        hosts = (kwargs.get("limit") or "h01,h02,h03").split(",")
        return RunOutcome("successful", 0, {"ok": dict.fromkeys(hosts, 1)}, (), Path("/nonexistent"))


def test_drift_checks_each_host_against_its_own_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = Playbooks()
    monkeypatch.setattr(drift.ansible, "run_playbook", runs)
    shared, own = HostState.from_tree(SHARED), {"h02": HostState.from_tree(OWN)}
    report = drift.detect(tmp_path / "inv.yml", shared, ("h01", "h02", "h03"), own)
    assert runs.calls == [("drift.yml", SHARED, "h01,h03"), ("drift.yml", OWN, "h02")]
    assert report.hosts == ("h01", "h02", "h03") and not report.drifted
    runs.calls.clear()
    drift.detect(tmp_path / "inv.yml", shared, ("h01", "h02", "h03"))
    assert runs.calls == [("drift.yml", SHARED, None)]  # one run, as before, when no host has its own


def test_apply_of_a_tuned_file_runs_each_state_on_its_hosts_alone(tmp_path: Path) -> None:
    profile = Profile(tmp_path / "p.yml", HostState.from_tree(SHARED), SHARED, hosts=states_of({"h02": OWN}))
    def groups(of: Profile, limit: str | None, targets: list[str] | None) -> list[tuple[Any, str | None]]:
        return [(state.tree(), hosts) for state, hosts in apply_lib._groups(of, limit, targets)]

    assert groups(profile, None, ["h01", "h02", "h03"]) == [(SHARED, "h01,h03"), (OWN, "h02")]
    assert groups(profile, "h02", ["h02"]) == [(OWN, "h02")]  # --limit h02: its own state only
    plain = Profile(tmp_path / "p.yml", HostState.from_tree(SHARED), SHARED)
    assert groups(plain, "h0[1:2]", None) == [(SHARED, "h0[1:2]")]


def test_the_tuned_file_is_the_yaml_of_the_plain_trees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    roce = yaml.safe_load((PROFILES / "roce.yml").read_text())["fabric_desired"]
    state = desired.split_by_host(states_of({"h01": roce, "h02": OWN, "h03": roce}))
    text = desired.save_tuned("rackx", state, "r1").read_text()
    body = yaml.safe_dump({"fabric_desired": roce, "fabric_desired_hosts": {"h02": OWN}}, sort_keys=True)
    assert text.split("\n", 1)[1] == body  # after the header line: byte for byte


def _kept(name: str, knobs: list[str], hosts: list[str], outcome: str = "kept") -> MoveRecord:
    return MoveRecord("g", name, knobs, outcome, "", hosts=hosts)


def test_the_tuned_state_keeps_across_reboots_only_what_its_kept_moves_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's kept moves recorded their roles' knobs for fabtune-boot; the rest of a host's knobs are
    as the run found them, which the host keeps itself: the tuned state names, per host, only the
    roles its kept moves ran, so drift does not call the others unpersisted (found on a rack where
    only an MTU move was kept: 15 such false drifts on 3 hosts)."""
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    hosts = ("h01", "h02", "h03")
    moves = [
        _kept("MTU 4200", ["mtu"], list(hosts)),
        _kept("lossless priority 3", ["pfc", "ecn", "roce_tos", "NCCL_IB_TC"], list(hosts), "rolled_back"),
        _kept("4 QPs", ["NCCL_IB_QPS_PER_CONNECTION"], ["h03"]),
    ]
    states = states_of(dict.fromkeys(hosts, SHARED))
    result = TuneResult("r1", [1.0], [1.0], 0.01, moves, states, [])
    state = tuned_state(result)
    assert state.persist_roles == {
        "h01": ("roce_qos",), "h02": ("roce_qos",), "h03": ("nccl_env", "roce_qos")}
    path = desired.save_tuned("rackx", state, "r1")
    written = {"h01": ["roce_qos"], "h02": ["roce_qos"], "h03": ["nccl_env", "roce_qos"]}
    assert yaml.safe_load(path.read_text())["fabric_persist_roles_by_host"] == written
    loaded = desired.load_tuned("rackx")
    assert loaded is not None and loaded.persist_roles == state.persist_roles
    # the playbooks get it, from the tuned state and from the same file given as a profile
    assert loaded.playbook_vars() == {"fabric_persist_roles_by_host": written}
    assert load_profile(path).playbook_vars() == {"fabric_persist_roles_by_host": written}
    # a run that kept nothing leaves nothing of fabtune's to keep across reboots
    rolled_back = TuneResult("r2", [1.0], [1.0], 0.01, moves[1:2], states, [])
    none = tuned_state(rolled_back)
    assert none.persist_roles == dict.fromkeys(hosts, ())


def test_a_profile_without_the_section_keeps_every_role_and_a_bad_one_is_named(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yml"
    plain.write_text(yaml.safe_dump({"fabric_desired": SHARED}))
    assert load_profile(plain).playbook_vars() == {}  # every role records its knobs, as before
    bad = tmp_path / "bad.yml"
    section = {"h01": ["roce_qoss"], "h02": "roce_qos"}
    bad.write_text(yaml.safe_dump({"fabric_desired": SHARED, "fabric_persist_roles_by_host": section}))
    with pytest.raises(ConfigError) as refused:
        load_profile(bad)
    said = str(refused.value)
    assert "fabric_persist_roles_by_host.h01: ['roce_qoss'] must be a list of roles" in said
    assert "fabric_persist_roles_by_host.h02:" in said


def test_drift_and_its_remediation_pass_the_roles_on_to_the_playbooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def run(playbook: str, _inventory: Path, **kwargs: Any) -> RunOutcome:
        seen.append((playbook, dict(kwargs["extravars"])))
        hosts = (kwargs.get("limit") or "h01,h02").split(",")
        return RunOutcome("successful", 0, {"ok": dict.fromkeys(hosts, 1)}, (), Path("/nonexistent"))

    monkeypatch.setattr(drift.ansible, "run_playbook", run)
    roles = {"fabric_persist_roles_by_host": {"h01": ["roce_qos"], "h02": []}}
    drift.detect(tmp_path / "inv.yml", HostState.from_tree(SHARED), ("h01", "h02"), None, roles)
    drift._apply_groups(tmp_path / "inv.yml", [(HostState.from_tree(SHARED), ["h01", "h02"])], roles)
    given = roles["fabric_persist_roles_by_host"]
    assert [(pb, ev["fabric_persist_roles_by_host"]) for pb, ev in seen] == [
        ("drift.yml", given), ("apply.yml", given)]
    assert all(ev["fabric_desired"] == SHARED for _pb, ev in seen)
