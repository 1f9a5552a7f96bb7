"""The lossless class from the fabric: the inventory's ``fabtune_lossless`` first, else the class
the switch advertises over LLDP to every host, else a guess; where it came from is journaled,
printed and reported, and LLDP that disagrees or contradicts the inventory is named by host."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fabtune.journal import Journal
from fabtune.knobs import LosslessClass
from fabtune.report.build import build
from fabtune.report.markdown import render_markdown
from fabtune.tune.hosts import host_groups, plan_rack
from fabtune.tune.loop import TuneOptions, Tuner
from fabtune.tune.lossless import ADVERTISED, choose, peer_class
from tests.unit.test_tune_loop import HARDWARE, FakeRack


def _peer(prio: int | None, dscps: tuple[int, ...] = ()) -> dict[str, Any]:
    return {"willing": False, "pfc": [] if prio is None else [prio],
            "dscp2prio": {str(d): prio for d in dscps}}  # as JSON facts carry it


def _facts(peers: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Each host's facts with its eth2's LLDP peer (None: no LLDP on the host)."""
    return {h: {"nics": {}, "nccl": None,
                "hardware": {**HARDWARE, "lldp": None if p is None else {"eth2": p}}}
            for h, p in peers.items()}


def _lossless_moves(facts: dict[str, dict[str, Any]], declared: LosslessClass | None = None) -> list[Any]:
    choice = choose(facts, declared)
    groups = plan_rack(host_groups(facts, "roce", choice.lossless, None, choice.says))
    return next(g for g in groups if g[0].group == "lossless")


def test_the_peer_class_is_its_pfc_priority_and_a_dscp_its_app_tlv_maps_there() -> None:
    assert peer_class(_peer(4, (32, 33, 34, 46))) == LosslessClass(4, 34, 6, 48)  # AF42 when listed
    assert peer_class(_peer(4, (46,))) == LosslessClass(4, 46, 6, 48)
    assert peer_class(_peer(5)) == LosslessClass(5, 42, 6, 48)  # no APP DSCP: the default map's
    assert peer_class(_peer(None)) is None


def test_lldp_on_every_host_is_the_plan_when_the_inventory_declares_nothing() -> None:
    facts = _facts({"h01": _peer(4, (34,)), "h02": _peer(4, (34,))})
    choice = choose(facts, None)
    assert (choice.source, choice.lossless, choice.findings) == ("lldp", LosslessClass(4, 34, 6, 48), ())
    moves = _lossless_moves(facts)
    assert [m.name for m in moves] == ["lossless priority 4, DSCP 34"]
    assert moves[0].why.startswith(f"{ADVERTISED}: PFC, DSCP trust and ToS agree on priority 4, DSCP 34")


def test_the_inventory_comes_first_and_lldp_that_contradicts_it_is_a_warning_naming_the_host() -> None:
    facts = _facts({"h01": _peer(3, (26,)), "h02": _peer(4, (34,))})
    choice = choose(facts, LosslessClass(3, 26))
    assert (choice.source, choice.lossless) == ("inventory", LosslessClass(3, 26))
    assert choice.warnings == (
        "h02 eth2: the inventory's fabtune_lossless is priority 3, DSCP 26, but the switch advertises "
        "priority 4, DSCP 34 over LLDP",)
    assert [m.name for m in _lossless_moves(facts, LosslessClass(3, 26))] == ["lossless priority 3, DSCP 26"]
    assert "declared in the inventory" in _lossless_moves(facts, LosslessClass(3, 26))[0].why


def test_hosts_whose_switches_disagree_are_a_finding_and_the_plan_guesses() -> None:
    facts = _facts({"h01": _peer(4, (34,)), "h02": _peer(3, (26,)), "h03": _peer(4, (34,))})
    choice = choose(facts, None)
    assert choice.source == "guess" and choice.lossless is None
    assert choice.findings == (
        "the switches advertise different lossless classes over LLDP: priority 3, DSCP 26 on h02; "
        "priority 4, DSCP 34 on h01, h03",)
    moves = _lossless_moves(facts)
    assert len(moves) == 8
    assert all(m.why.startswith("guessed: ") and "h02" in m.why for m in moves)


def test_without_lldp_on_every_host_the_plan_guesses_and_says_where_it_is_missing() -> None:
    choice = choose(_facts({"h01": _peer(4, (34,)), "h02": None}), None)
    assert choice.source == "guess"
    assert "no LLDP from the switch on h02 " in choice.says and choice.says.startswith("guessed: ")
    assert "on any host" in choose(_facts({"h01": None, "h02": None}), None).says
    assert "PFC on no priority" in choose(_facts({"h01": _peer(None), "h02": _peer(None)}), None).says


class LldpRack(FakeRack):
    """A FakeRack whose hosts' lldpad each see a switch advertising a class."""

    def __init__(self, peers: dict[str, dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(hosts=tuple(peers), **kwargs)
        self.peers = peers

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        facts = super().facts(hosts=hosts)
        for host, peer in self.peers.items():
            facts[host]["hardware"] = {**facts[host]["hardware"], "lldp": {"eth2": peer}}
        return facts


def test_the_loop_tunes_the_class_the_switch_advertises_and_says_where_it_came_from(tmp_path: Path) -> None:
    rack = LldpRack({"h01": _peer(4, (34,)), "h02": _peer(4, (34,))}, lossless_prio=4)
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    events: list[tuple[str, str]] = []
    result = Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("qps", "gdr")),
                   on_event=lambda kind, message, data: events.append((kind, message))).run()
    assert [(m.name, m.outcome) for m in result.moves] == [
        ("lossless priority 4, DSCP 34", "kept"), ("MTU 4200", "kept")]
    assert ("plan", f"lossless class: {ADVERTISED}") in events
    step = next(s for s in journal.steps(run_id) if s.name == "lossless class")
    assert step.payload["source"] == "lldp" and step.payload["class"]["priority"] == 4
    journal.close_run(run_id, "done", {})
    doc = build(journal, run_id)
    assert doc["tune"]["lossless"]["says"] == ADVERTISED
    assert f"- lossless class: {ADVERTISED}" in render_markdown(doc)


def test_the_loop_names_the_hosts_whose_switches_disagree(tmp_path: Path) -> None:
    rack = LldpRack({"h01": _peer(4, (34,)), "h02": _peer(3, (26,))})
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    events: list[tuple[str, str]] = []
    Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("mtu", "qps", "gdr")),
          on_event=lambda kind, message, data: events.append((kind, message))).run()
    finding = ("the switches advertise different lossless classes over LLDP: priority 3, DSCP 26 on h02; "
               "priority 4, DSCP 34 on h01")
    assert ("finding", finding) in events
    journal.close_run(run_id, "done", {})
    doc = build(journal, run_id)
    assert doc["tune"]["lossless"]["source"] == "guess"
    assert any(c["summary"] == finding and c["verdict"] == "warn" for c in doc["checks"])
