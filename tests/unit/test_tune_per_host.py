"""Per-host planning: hosts that share a state are one group, a move names only the hosts that need
it, the other hosts stay exactly as they were, and the journal says which hosts each move changed."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fabtune import ansible, report
from fabtune.ansible import RunOutcome
from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo
from fabtune.journal import Journal
from fabtune.knobs import lossless_change
from fabtune.state import HostState
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.hosts import host_groups, plan_rack
from fabtune.tune.loop import TuneOptions, Tuner, TuneResult
from tests.unit.test_tune_loop import FACTORY, HARDWARE, FakeRack

# What the switches expect (lossless priority 3, DSCP 26, ToS 106) with MTU 4200: a tuned host.
TUNED = {**FACTORY, **lossless_change(3).nic, "mtu": 4200}
TUNED_NCCL = {"NCCL_IB_TC": "106"}
# h02 as found: the same, but PFC off and MTU 1500.
ODD = {**TUNED, "pfc": [], "mtu": 1500}
TWO_NICS = {"ports": [{"dev": "mlx5_0", "netdev": "eth2", "roce_v2_gid_index": 3},
                      {"dev": "mlx5_1", "netdev": "eth3", "roce_v2_gid_index": 3}], "topology": None}


class UnevenRack(FakeRack):
    """Hosts each in its own state; the rack's bandwidth is its slowest host's (a collective waits
    for it). Records the hosts every apply, confirm and extend touched."""

    def __init__(self, nics: Mapping[str, Mapping[str, Any]], *, mtu_gain: float = 1.06,
                 hardware: Mapping[str, Any] = HARDWARE) -> None:
        super().__init__(3, hosts=tuple(nics), hardware=hardware)
        for host, nic in nics.items():
            self.state[host] = {"nics": {p["netdev"]: copy.deepcopy(dict(nic)) for p in hardware["ports"]},
                                "nccl": dict(TUNED_NCCL)}
        self.mtu_gain = mtu_gain
        self.touched: list[tuple[str, list[str]]] = []

    def apply(self, desired: Mapping[str, HostState], *, run_id: str | None = None,
              snapshots: Mapping[str, HostState] | None = None, exact: bool = False,
              roles: Sequence[str] | None = None, measure_after: int = 0,
              facts_after: bool = False, pairs_after: int = 0) -> RunOutcome:
        self.touched.append(("rollback" if exact else "apply", sorted(desired)))
        if snapshots is not None:
            assert sorted(snapshots) == sorted(desired)  # a revert is armed only where the move goes
        return super().apply(desired, run_id=run_id, snapshots=snapshots, exact=exact, roles=roles)

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.touched.append(("confirm", sorted(hosts or self.state)))
        return super().confirm(run_id, hosts=hosts)

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.touched.append(("extend", sorted(hosts or self.state)))
        return super().extend(run_id, hosts=hosts)

    def _host(self, host: str) -> tuple[float, float]:
        nics = self.state[host]["nics"].values()
        lossless = all(n.get("trust") == "dscp" and 3 in n.get("pfc", []) and n.get("roce_tos") == 106
                       for n in nics)
        mtu = self.mtu_gain if all(n.get("mtu") == 4200 for n in nics) else 1.0
        return 100 * mtu * (1.05 if lossless else 1.0), 100 * (1.0 if lossless else 0.3)

    def _busbw(self) -> tuple[float, float]:
        per_host = [self._host(h) for h in self.state]
        return min(ar for ar, _ in per_host), min(aa for _, aa in per_host)


def tune(rack: UnevenRack, tmp_path: Path) -> tuple[Tuner, TuneResult]:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    tuner = Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("qps", "gdr")))
    return tuner, tuner.run()


def test_hosts_that_share_a_state_are_one_group() -> None:
    rack = UnevenRack({"h01": TUNED, "h02": ODD, "h03": TUNED})
    groups = host_groups(rack.facts(), "roce")
    assert [g.hosts for g in groups] == [("h01", "h03"), ("h02",)]


def test_the_plan_moves_only_the_host_that_differs() -> None:
    rack = UnevenRack({"h01": TUNED, "h02": ODD})
    plan = plan_rack(host_groups(rack.facts(), "roce"), ("qps", "gdr"))
    assert [[(c.name, c.hosts) for c in group] for group in plan] == [
        [("lossless priority 3", ("h02",))], [("MTU 4200", ("h02",))]]
    # The class the other hosts run is the only lossless candidate: no guessing over priorities.
    assert plan[0][0].why.endswith("(1 of 2 hosts run it already)")


def test_a_host_that_runs_another_alternative_is_brought_to_the_one_most_hosts_run() -> None:
    other = {**TUNED, **lossless_change(4).nic}
    rack = UnevenRack({"h01": TUNED, "h02": TUNED, "h03": other})
    rack.state["h03"]["nccl"] = dict(lossless_change(4).nccl)
    (lossless,) = plan_rack(host_groups(rack.facts(), "roce"), ("mtu", "qps", "gdr"))
    assert [(c.name, c.hosts) for c in lossless] == [("lossless priority 3", ("h03",))]


def test_a_uniform_rack_moves_every_host() -> None:
    rack = UnevenRack({"h01": ODD, "h02": ODD})
    plan = plan_rack(host_groups(rack.facts(), "roce"), ("qps", "gdr"))
    assert {c.hosts for group in plan for c in group} == {("h01", "h02")}


def test_a_move_names_only_the_host_and_leaves_the_other_untouched(tmp_path: Path) -> None:
    rack = UnevenRack({"h01": TUNED, "h02": ODD})
    h01 = copy.deepcopy(rack.state["h01"])
    tuner, result = tune(rack, tmp_path)
    assert [(m.name, m.outcome, m.hosts) for m in result.moves] == [
        ("lossless priority 3", "kept", ["h02"]), ("MTU 4200", "kept", ["h02"])]
    assert rack.state["h01"] == h01  # never applied, armed, extended or confirmed
    assert {tuple(hosts) for _, hosts in rack.touched} == {("h02",)}
    assert rack.state["h02"] == h01  # the same end state as the hosts that were right
    moves = [s for s in tuner.journal.steps(tuner.run_id) if s.kind == "move"]
    assert [s.payload["hosts"] for s in moves] == [["h02"], ["h02"]]
    assert [s.payload["nics"] for s in moves] == [{"h02": ["eth2"]}, {"h02": ["eth2"]}]
    assert [sorted(s.payload["desired"]) for s in moves] == [["h02"], ["h02"]]


def test_one_odd_host_ends_where_a_uniform_rack_ends(tmp_path: Path) -> None:
    odd = UnevenRack({"h01": TUNED, "h02": ODD})
    uniform = UnevenRack({"h01": ODD, "h02": ODD})
    tune(odd, tmp_path / "odd")
    tune(uniform, tmp_path / "uniform")
    assert odd.state == uniform.state
    assert uniform.state["h01"] == uniform.state["h02"]


def test_a_rollback_restores_only_the_host_the_move_changed(tmp_path: Path) -> None:
    rack = UnevenRack({"h01": TUNED, "h02": {**TUNED, "mtu": 1500}}, mtu_gain=1.0)
    before = copy.deepcopy(rack.state)
    _, result = tune(rack, tmp_path)
    assert [(m.name, m.outcome, m.hosts) for m in result.moves] == [("MTU 4200", "rolled_back", ["h02"])]
    assert ("rollback", ["h02"]) in rack.touched
    assert all(hosts == ["h02"] for _, hosts in rack.touched)
    assert rack.state == before


def test_only_the_nic_that_differs_is_named(tmp_path: Path) -> None:
    rack = UnevenRack({"h01": TUNED, "h02": TUNED}, hardware=TWO_NICS)
    rack.state["h02"]["nics"]["eth3"]["mtu"] = 1500
    tuner, result = tune(rack, tmp_path)
    assert [(m.name, m.hosts) for m in result.moves] == [("MTU 4200", ["h02"])]
    (move,) = [s for s in tuner.journal.steps(tuner.run_id) if s.kind == "move"]
    assert move.payload["nics"] == {"h02": ["eth3"]}


def test_the_backend_limits_each_playbook_to_the_moves_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits: list[tuple[str, str | None]] = []

    def run_playbook(playbook: str, inventory: Path, **kwargs: Any) -> RunOutcome:
        limits.append((playbook, kwargs.get("limit")))
        return RunOutcome("successful", 0, {}, (), Path("/nonexistent"))

    monkeypatch.setattr(ansible, "run_playbook", run_playbook)
    info = InventoryInfo(tmp_path / "inv.yml", "rack", "roce", ("h01", "h02", "h03"), (), "mpirun", None)
    backend = AnsibleBackend(info)
    # an inventory the direct SSH channel cannot follow: extensions go through extend.yml
    backend._hostvars = {h: {"ansible_connection": "local"} for h in info.hosts}
    backend.apply({"h02": HostState()}, run_id="r", snapshots={"h02": HostState()})
    backend.extend("r", hosts=["h02", "h03"])
    backend.confirm("r", hosts=["h01", "h02", "h03"])
    backend.confirm("r")
    assert limits == [("apply.yml", "h02"), ("extend.yml", "h02,h03"), ("confirm.yml", None),
                      ("confirm.yml", None)]
    with pytest.raises(ConfigError, match="h09 not in the inventory"):
        backend.extend("r", hosts=["h09"])


def test_a_nic_on_the_far_socket_gets_a_gdr_move_on_its_host_alone() -> None:
    rack = UnevenRack({"h01": TUNED, "h02": TUNED, "h03": TUNED})
    far = {**HARDWARE, "topology": {"matrix": {"GPU0": {"NIC0": "SYS"}}, "nic_legend": {"NIC0": "mlx5_0"}}}
    facts = rack.facts()
    facts["h02"]["hardware"] = far
    (gdr,) = plan_rack(host_groups(facts, "roce"), ("lossless", "mtu", "qps"))
    assert [(c.name, c.hosts) for c in gdr] == [
        ("GPUDirect RDMA up to PHB", ("h02",)), ("GPUDirect RDMA up to SYS", ("h02",))]


def test_the_report_names_the_hosts_of_a_move_that_did_not_cover_the_rack(tmp_path: Path) -> None:
    tuner, _ = tune(UnevenRack({"h01": TUNED, "h02": ODD}), tmp_path)
    doc = report.build(tuner.journal, tuner.run_id)
    report.validate(doc)
    assert [d["hosts"] for d in doc["tune"]["decisions"]] == [["h02"], ["h02"]]
    markdown = report.render_markdown(doc)
    assert "| lossless priority 3 on h02 | kept |" in markdown and "| MTU 4200 on h02 | kept |" in markdown
    assert "MTU 4200 on h02" in report.render_html(doc)
