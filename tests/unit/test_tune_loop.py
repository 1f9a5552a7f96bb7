"""The tuning loop's logic over a scripted backend: keeps what helps, rolls back (verified) the rest."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fabtune.ansible import RunOutcome, TaskResult
from fabtune.errors import PlaybookFailed
from fabtune.journal import Journal
from fabtune.knobs import Candidate, Change, View, lossless_change, plan
from fabtune.perf.diagnose import Diagnosis
from fabtune.perf.pairs import PairResult
from fabtune.state import HostState, trees_of
from fabtune.tune.loop import RevertFired, RollbackFailed, TuneOptions, Tuner
from fabtune.tune.measure import Batch, Sample
from fabtune.tune.pairs import PairRound
from fabtune.tune.state import differences, snapshot_of, with_change

FACTORY = {
    "trust": "pcp",
    "pfc": [],
    "mtu": 1500,
    "ecn": {"np": list(range(8)), "rp": list(range(8))},
    "cnp_dscp": 48,
    "cnp_prio": 6,
    "roce_tos": 0,
    "roce_mode": 2,
}
HARDWARE = {"ports": [{"dev": "mlx5_0", "netdev": "eth2", "roce_v2_gid_index": 3}], "topology": None}


def outcome(ok: bool = True) -> RunOutcome:
    stats = {"failures": {} if ok else {"h01": 1}, "dark": {}, "changed": {}}
    return RunOutcome("successful" if ok else "failed", 0 if ok else 2, stats, (), Path("/nonexistent"))


class FakeRack:
    """Hosts whose bandwidth follows the switch's lossless priority 3 and MTU 4200, with noise."""

    def __init__(
        self,
        lossless_prio: int = 3,
        break_rollback: bool = False,
        *,
        hosts: tuple[str, ...] = ("h01", "h02"),
        factory: Mapping[str, Any] = FACTORY,
        hardware: Mapping[str, Any] = HARDWARE,
        seed: int = 0,
    ) -> None:
        self.hardware = hardware
        self.state: dict[str, dict[str, Any]] = {
            h: {"nics": {p["netdev"]: copy.deepcopy(dict(factory)) for p in hardware["ports"]}, "nccl": None}
            for h in hosts
        }
        self.prio = lossless_prio
        self.rng = np.random.default_rng(seed)
        self.applied: list[dict[str, Any]] = []
        self.confirms = 0
        self.extends = 0
        self.break_rollback = break_rollback
        self.diagnosed: list[str] = []
        self.pair_rounds = 0

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        return {h: {**copy.deepcopy(s), "hardware": self.hardware} for h, s in self.state.items()
                if hosts is None or h in hosts}

    def learn(self, facts: Mapping[str, Mapping[str, Any]]) -> None:
        pass

    def apply(
        self,
        desired: Mapping[str, HostState],
        *,
        run_id: str | None = None,
        snapshots: Mapping[str, HostState] | None = None,
        exact: bool = False,
        roles: Sequence[str] | None = None,
        measure_after: int = 0,
        facts_after: bool = False,
        pairs_after: int = 0,
    ) -> RunOutcome:
        armed = run_id is not None
        self.applied.append({"exact": exact, "armed": armed, "roles": roles, "read": facts_after})
        for host, tree in desired.items():
            new = tree.tree()
            if exact and self.break_rollback:
                new["nics"]["eth2"]["mtu"] = 9000
            self.state[host] = new
        return outcome()

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.confirms += 1
        return outcome()

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        return False  # its state is not shared across threads: confirm before the read back

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.extends += 1
        return outcome()

    def _busbw(self) -> tuple[float, float]:
        nic = self.state["h01"]["nics"]["eth2"]
        lossless = (
            nic.get("trust") == "dscp"
            and self.prio in nic.get("pfc", [])
            and nic.get("roce_tos") == ((self.prio * 8 + 2) << 2 | 2)
        )
        mtu = 1.06 if nic.get("mtu") == 4200 else 1.0
        qps = {"4": 1.1, "8": 1.2, "16": 1.2}.get(str((self.state["h01"].get("nccl") or {}).get(
            "NCCL_IB_QPS_PER_CONNECTION")), 1.0)
        return 100 * mtu * qps * (1.05 if lossless else 1.0), 100 * (1.0 if lossless else 0.3)

    def diagnose(self, log: str, why: str) -> Diagnosis:
        """A failure no host is at fault for (a test rack overrides this)."""
        self.diagnosed.append(why)
        return Diagnosis([], [])

    def pair_matrix(self, full: bool) -> list[PairResult]:
        """The pair matrix the loop runs after the baseline and at the end (the report's heatmap)."""
        self.pair_rounds += 1
        return []

    def pairs(self) -> PairRound | None:
        """No ib_write_bw metric (a rack in tests/unit/test_tune_pairs.py measures one)."""
        return None

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        ar, aa = self._busbw()
        noise = self.rng.normal(0, 0.01, (repetitions, 2))
        return Batch(tuple(Sample(ar * float(np.exp(a)), aa * float(np.exp(b))) for a, b in noise), 0)


def tuner(rack: FakeRack, tmp_path: Path) -> Tuner:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    if isinstance(rack, ClockRack):  # the loop knows the deadline and reads the rack's clock
        return Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("qps", "gdr")),
                     revert_deadline_s=rack.deadline_s, clock=lambda: rack.now)
    return Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("qps", "gdr")))


def test_keeps_what_helps_and_rolls_back_the_rest(tmp_path: Path) -> None:
    rack = FakeRack(lossless_prio=4)
    result = tuner(rack, tmp_path).run()
    outcomes = [(m.name, m.outcome) for m in result.moves]
    assert outcomes == [
        ("lossless priority 3", "rolled_back"),
        ("lossless priority 4", "kept"),
        ("MTU 4200", "kept"),
    ]
    nic = rack.state["h01"]["nics"]["eth2"]
    assert (nic["pfc"], nic["mtu"], nic["roce_tos"]) == ([4], 4200, 138)
    assert [a["exact"] for a in rack.applied] == [False, True, False, False]
    # the rollback's restore names the read that verifies it (the backend may run it with it)
    assert [a["read"] for a in rack.applied] == [False, True, False, False]
    # Each move applies, and its rollback restores, only the roles of the knobs it changes.
    lossless = ("nccl_env", "roce_cc", "roce_qos", "roce_tos")
    assert [a["roles"] for a in rack.applied] == [lossless, lossless, lossless, ("roce_qos",)]
    assert all(a["armed"] for a in rack.applied if not a["exact"])


def test_a_ladder_climbs_while_each_rung_improves(tmp_path: Path) -> None:
    rack = FakeRack()
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    result = Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("gdr",))).run()
    qps = [(m.name, m.outcome) for m in result.moves if m.group == "qps"]
    assert qps == [("4 QPs per connection", "kept"), ("8 QPs per connection", "kept"),
                   ("16 QPs per connection", "rolled_back")]


def test_every_step_is_journaled_with_its_snapshot_first(tmp_path: Path) -> None:
    rack = FakeRack()
    t = tuner(rack, tmp_path)
    t.run()
    steps = t.journal.steps(t.run_id)
    moves = [s for s in steps if s.kind == "move"]
    assert [s.state for s in moves] == ["kept", "kept"]
    assert t.journal.first_snapshot(t.run_id)["h01"]["nics"]["eth2"]["mtu"] == 1500
    assert t.journal.snapshot_at(t.run_id, moves[1].seq)["h01"]["nics"]["eth2"]["pfc"] == [3]


def test_a_rollback_that_does_not_restore_is_an_error(tmp_path: Path) -> None:
    rack = FakeRack(lossless_prio=5, break_rollback=True)
    with pytest.raises(RollbackFailed, match=r"nics\.eth2\.mtu: 1500 -> 9000"):
        tuner(rack, tmp_path).run()


class LostRack(FakeRack):
    """h02's link goes down once the first move is armed: the move changes h01 alone, and every later
    apply that names h02 stops at its first play (validation on every host) with nothing changed."""

    lost = False
    tried_lost = 0  # applies that named h02 after it was lost

    def apply(
        self,
        desired: Mapping[str, HostState],
        *,
        run_id: str | None = None,
        snapshots: Mapping[str, HostState] | None = None,
        exact: bool = False,
        roles: Sequence[str] | None = None,
        measure_after: int = 0,
        facts_after: bool = False,
        pairs_after: int = 0,
    ) -> RunOutcome:
        if run_id is not None:
            self.lost = True
            super().apply({h: s for h, s in desired.items() if h != "h02"}, exact=exact, roles=roles)
            return self._dark()
        if self.lost and "h02" in desired:
            self.tried_lost += 1
            return self._dark()
        return super().apply(desired, exact=exact, roles=roles)

    def _dark(self) -> RunOutcome:
        stats = {"failures": {"h01": 1}, "dark": {"h02": 1}, "changed": {}}
        lost = TaskResult("h02", "Validate the desired fabric state", "fabtune.fabric.fabric_validate",
                          "runner_on_unreachable", False, {"msg": "ssh: connect to host: No route to host"})
        return RunOutcome("failed", 4, stats, (lost,), Path("/nonexistent"))


def test_a_host_lost_mid_move_fails_the_run_and_the_reachable_hosts_are_restored(tmp_path: Path) -> None:
    """The rollback of a move stops on a host that cannot be reached; the hosts that can are put back
    at once rather than left holding the move until their revert deadline (tests/faults/test_host_lost
    on the testbed: the move's apply outlasted the deadline, h01 reverted mid-apply, and the apply's
    later roles then left it half moved and no longer armed)."""
    rack = LostRack(lossless_prio=3)
    before = copy.deepcopy(rack.state)
    lost = (r"rollback failed: h02 could not be reached by the move's apply and is not tried again: "
            r".*; h01 restored")
    with pytest.raises(PlaybookFailed, match=lost):
        tuner(rack, tmp_path).run()
    assert rack.state["h01"] == before["h01"]
    assert [a["exact"] for a in rack.applied][-1] is True
    # the move's apply already waited out h02's SSH (Ansible retried it): the restore does not again
    assert rack.tried_lost == 0


def test_plan_skips_a_group_the_rack_already_runs() -> None:
    nic = {**FACTORY, **lossless_change(3).nic, "dscp2prio": {str(d): d >> 3 for d in range(64)} | {"48": 6}}
    view = View("roce", nic, {"NCCL_IB_TC": "106"}, {}, 3, 2, "PIX")
    assert [g[0].group for g in plan(view)] == ["mtu", "qps"]


def test_with_change_and_differences() -> None:
    current = {"nics": {"a": dict(FACTORY), "b": dict(FACTORY)}, "nccl": None}
    desired = with_change(current, lossless_change(3))
    assert desired.tree()["nics"]["b"]["pfc"] == [3] and desired.nccl == {"NCCL_IB_TC": "106"}
    assert current["nics"]["a"]["pfc"] == []
    assert differences(current, snapshot_of(current)) == []
    assert differences(current, desired)[0].startswith("nccl: None -> ")


def test_a_resumed_run_skips_the_moves_already_decided(tmp_path: Path) -> None:
    rack = FakeRack(lossless_prio=4)
    result = tuner(rack, tmp_path).run(done=["lossless priority 3"])
    outcomes = [(m.name, m.outcome) for m in result.moves]
    assert outcomes == [("lossless priority 4", "kept"), ("MTU 4200", "kept")]


class RevertingRack(FakeRack):
    """h02's host-side revert fires after the first measurement of a move (its deadline too short)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: dict[str, Any] | None = None
        self.fired = False

    def apply(self, desired: Mapping[str, HostState], *, run_id: str | None = None,
              snapshots: Mapping[str, HostState] | None = None, exact: bool = False,
              roles: Sequence[str] | None = None, measure_after: int = 0,
              facts_after: bool = False, pairs_after: int = 0) -> RunOutcome:
        self.armed = snapshots["h02"].tree() if run_id is not None and snapshots else None
        return super().apply(desired, run_id=run_id, snapshots=snapshots, exact=exact, roles=roles)

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        batch = super().measure(repetitions)
        if self.armed is not None:  # the timer fires during the first batch of the move
            self.state["h02"], self.armed, self.fired = self.armed, None, True
        return batch

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.confirms += 1
        return self._gone("Confirm the run")

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.extends += 1
        return self._gone("Extend the revert deadline")

    def _gone(self, task: str) -> RunOutcome:
        """What fabric_revert answers on a host whose timer fired (confirm and extend alike)."""
        if not self.fired:
            return outcome()
        self.fired = False
        gone = TaskResult("h02", task, "fabtune.fabric.fabric_revert", "runner_on_failed", False,
                          {"failed": True, "reverted": True, "msg": "run was already reverted on this host"})
        return RunOutcome("failed", 2, {"failures": {"h02": 1}, "dark": {}, "changed": {}}, (gone,),
                          Path("/nonexistent"))


def test_a_move_reverted_by_a_host_before_its_decision_is_discarded_undone_and_stops_the_run(
    tmp_path: Path,
) -> None:
    _assert_discarded_and_undone(RevertingRack(), tmp_path)


def _assert_discarded_and_undone(rack: RevertingRack, tmp_path: Path) -> None:
    """The run stops on h02's fired revert, the move's runs discarded and every host restored."""
    run = tuner(rack, tmp_path)
    before = copy.deepcopy(rack.state)
    with pytest.raises(RevertFired, match="h02"):
        run.run()
    assert rack.state == before  # h01, which still held the move, was restored too
    (move,) = [s for s in run.journal.steps(run.run_id) if s.kind == "move"]
    assert move.state == "rolled_back" and move.payload["reverted_by_host"] == ["h02"]
    assert "discarded" in move.payload["reason"] and move.payload["verified"]


class ClockRack(FakeRack):
    """A rack on a clock: each run takes ``run_s``; a move's revert fires ``deadline_s`` after it was
    armed or last extended (as fabric_revert's timer does), putting every host back to its snapshot."""

    def __init__(self, deadline_s: float, run_s: float) -> None:
        super().__init__(lossless_prio=4)
        self.deadline_s, self.run_s, self.now = deadline_s, run_s, 0.0
        self.armed: dict[str, Any] | None = None
        self.fires_at = 0.0
        self.fired = False
        self.longest = 0.0  # the longest time one move was held and measured
        self.since = 0.0

    def apply(self, desired: Mapping[str, HostState], *, run_id: str | None = None,
              snapshots: Mapping[str, HostState] | None = None, exact: bool = False,
              roles: Sequence[str] | None = None, measure_after: int = 0,
              facts_after: bool = False, pairs_after: int = 0) -> RunOutcome:
        if run_id is not None and snapshots:
            self.armed = trees_of(snapshots)
            self.fires_at, self.since = self.now + self.deadline_s, self.now
        return super().apply(desired, run_id=run_id, snapshots=snapshots, exact=exact, roles=roles)

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        ar, aa = self._busbw()  # measured before the clock moves: the move still held
        noise = self.rng.normal(0, 0.04, (repetitions, 2))  # noisy enough that moves take several batches
        batch = Batch(tuple(Sample(ar * float(np.exp(a)), aa * float(np.exp(b))) for a, b in noise), 0)
        self.now += self.run_s * repetitions
        if self.armed is not None and self.now > self.fires_at:
            self.state.update(copy.deepcopy(self.armed))
            self.armed, self.fired = None, True
        if self.armed is not None:
            self.longest = max(self.longest, self.now - self.since)
        return batch

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.extends += 1
        if self.armed is not None:
            self.fires_at = self.now + self.deadline_s
        return self._gone()

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.confirms += 1
        self.armed = None
        return self._gone()

    def _gone(self) -> RunOutcome:
        if not self.fired:
            return outcome()
        self.fired = False
        result = {"failed": True, "reverted": True, "msg": "run was already reverted on this host"}
        gone = TaskResult("h01", "Extend the revert deadline", "fabtune.fabric.fabric_revert",
                          "runner_on_failed", False, result)
        return RunOutcome("failed", 2, {"failures": {"h01": 1}, "dark": {}, "changed": {}}, (gone,),
                          Path("/nonexistent"))


def test_a_deadline_shorter_than_a_moves_measurement_holds_as_each_batch_extends_it(
    tmp_path: Path,
) -> None:
    rack = ClockRack(deadline_s=40, run_s=5)  # a batch (2 runs, 10 s) fits; a move's 4+ runs do not
    result = tuner(rack, tmp_path).run()
    assert rack.longest > rack.deadline_s  # a move was held and measured for longer than the deadline
    assert ("lossless priority 4", "kept") in [(m.name, m.outcome) for m in result.moves]
    assert not any("revert fired" in m.reason for m in result.moves)
    # Before a batch after the first (the apply extended it) that might outlast the deadline: with a
    # 40 s deadline and 10 s batches (15 s with the loop's 1.5x, +30 s margin), before every one.
    batches = [(len(m.all_reduce) - 2) // 2 for m in result.moves]  # min_runs 2, batch 2
    assert rack.extends == sum(batches) > 0


def test_a_deadline_far_beyond_the_moves_is_never_extended(tmp_path: Path) -> None:
    rack = ClockRack(deadline_s=600, run_s=5)  # the longest move (12 runs, 60 s) fits ten times
    result = tuner(rack, tmp_path).run()
    assert ("lossless priority 4", "kept") in [(m.name, m.outcome) for m in result.moves]
    assert rack.extends == 0 and rack.longest > 20  # moves of several batches, none extended


def test_a_deadline_shorter_than_one_batch_is_found_by_the_verdicts_confirm(tmp_path: Path) -> None:
    rack = ClockRack(deadline_s=30, run_s=20)  # the first batch alone (2 runs, 40 s) outlasts it
    run = tuner(rack, tmp_path)
    before = copy.deepcopy(rack.state)
    with pytest.raises(RevertFired, match="one batch of measurements"):
        run.run()
    assert rack.state == before
    (move,) = [s for s in run.journal.steps(run.run_id) if s.kind == "move"]
    assert move.state == "rolled_back" and move.payload["reverted_by_host"] == ["h01"]
    assert move.payload["all_reduce"] == []  # its runs were discarded


class PausingRack(FakeRack):
    """The lossless class sends thousands of pause frames per run; ``mtu_floods``: MTU 4200 adds more."""

    def __init__(self, *, mtu_floods: bool = False) -> None:
        super().__init__()
        self.mtu_floods = mtu_floods

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        batch = super().measure(repetitions)
        nic = self.state["h01"]["nics"]["eth2"]
        per_run = 5000 if nic.get("pfc") else 0
        if self.mtu_floods and nic.get("mtu") == 4200:
            per_run *= 40
        return Batch(batch.samples, per_run * repetitions)


def _events(rack: FakeRack, tmp_path: Path) -> tuple[Tuner, list[str]]:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    said: list[str] = []
    run = Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("qps", "gdr")),
                on_event=lambda kind, message, data: said.append(message) if kind == "decision" else None)
    return run, said


def test_guards_compare_with_the_kept_state_not_the_baseline(tmp_path: Path) -> None:
    """PFC kept (pause frames 0 -> thousands), then MTU's all_reduce gain is kept, not blamed on PFC."""
    run, said = _events(PausingRack(), tmp_path)
    result = run.run()
    assert [(m.name, m.outcome) for m in result.moves] == [
        ("lossless priority 3", "kept"), ("MTU 4200", "kept")]
    assert result.moves[0].pause_frames > 0 and run.pause_rate == 5000
    mtu = result.moves[1]
    assert mtu.decision.reference_pause_rate == 5000 and mtu.reason.startswith("all_reduce +")
    assert said[-1] == f"kept MTU 4200: {mtu.reason}"
    (step,) = [s for s in run.journal.steps(run.run_id) if s.name == "MTU 4200"]
    assert step.payload["reason"] == mtu.reason


def test_a_move_that_itself_floods_pause_frames_without_incast_gain_is_rolled_back(tmp_path: Path) -> None:
    run, said = _events(PausingRack(mtu_floods=True), tmp_path)
    result = run.run()
    assert [(m.name, m.outcome) for m in result.moves] == [
        ("lossless priority 3", "kept"), ("MTU 4200", "rolled_back")]
    reason = result.moves[1].reason
    assert reason.startswith("guard: pause frames 200000 per run against 5000 in the kept state")
    assert reason.endswith("with no incast gain")
    assert said[-1] == f"rolled back MTU 4200: {reason} (verified)"
    (step,) = [s for s in run.journal.steps(run.run_id) if s.name == "MTU 4200"]
    assert step.payload["reason"] == reason


def test_a_kept_move_reads_back_only_the_hosts_it_changed(tmp_path: Path) -> None:
    """A move for some hosts (the rack planner's per-host moves) reads back their facts only, not
    the whole rack's: the others' state and hardware are as the loop last read them."""
    rack = FakeRack(hosts=("h01", "h02", "h03"))
    reads: list[list[str] | None] = []
    calls: list[tuple[str, int, int]] = []  # facts and measure, with the measurement each asks for
    whole, measured = rack.facts, rack.measure

    def facts(
        *, hosts: Sequence[str] | None = None, measure_after: int = 0, pairs_after: int = 0
    ) -> dict[str, dict[str, Any]]:
        reads.append(None if hosts is None else sorted(hosts))
        calls.append(("facts", measure_after, pairs_after))
        return whole(hosts=hosts)

    def measure(repetitions: int, pairs_after: int = 0) -> Batch:
        calls.append(("measure", repetitions, pairs_after))
        return measured(repetitions, pairs_after)

    rack.facts = facts  # type: ignore[method-assign]
    rack.measure = measure  # type: ignore[method-assign]
    t = tuner(rack, tmp_path)
    t.read_facts()
    t.baseline()
    before = dict(t.current)
    move = Candidate("mtu", "MTU 4200", Change(nic={"mtu": 4200}), "fewer headers", hosts=("h01",))
    record = t.try_move(move)
    assert record.outcome == "kept", record.reason
    assert reads == [None, ["h01"]]
    # the read-back names the kept state's top-up, which the backend may run with it: the next call
    _, asked, rounds = calls[-2]
    assert calls[-2][0] == "facts" and asked > 0 and calls[-1] == ("measure", asked, rounds)
    assert t.current["h02"] == before["h02"] and t.current["h03"] == before["h03"]
    assert t.current["h01"] != before["h01"] and t.current["h01"].nics["eth2"]["mtu"] == 4200
    assert sorted(t.facts) == ["h01", "h02", "h03"]


class AsideRack(FakeRack):
    """A backend whose confirm may run on another thread beside the read back: the confirm answers
    only once the read back has started (a loop that confirmed first would wait out the timeout)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reading = threading.Event()
        self.confirm_threads: list[str] = []
        self.read_first: list[bool] = []

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        return True

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        self.reading.set()
        return super().facts(hosts=hosts, measure_after=measure_after, pairs_after=pairs_after)

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.confirm_threads.append(threading.current_thread().name)
        beside = threading.current_thread() is not threading.main_thread()
        self.read_first.append(self.reading.wait(timeout=10) if beside else self.reading.is_set())
        self.reading.clear()
        return super().confirm(run_id, hosts=hosts)


def test_a_kept_moves_confirm_runs_beside_its_read_back_and_decides_the_same(tmp_path: Path) -> None:
    alone, aside = FakeRack(lossless_prio=4, seed=3), AsideRack(lossless_prio=4, seed=3)
    expected = [(m.name, m.outcome, m.all_reduce) for m in tuner(alone, tmp_path / "a").run().moves]
    found = [(m.name, m.outcome, m.all_reduce) for m in tuner(aside, tmp_path / "b").run().moves]
    assert found == expected and [m[1] for m in found].count("kept") == 2
    assert aside.state == alone.state and aside.confirms == alone.confirms
    # the two keeps' confirms ran on the loop's confirm thread, each once its read back had begun;
    # the rollback's confirm, after its restore, on the loop's own
    beside = [first for name, first in zip(aside.confirm_threads, aside.read_first, strict=True)
              if name.startswith("fabtune-confirm")]
    assert beside == [True, True] and aside.confirm_threads.count("MainThread") == 1


class RevertingAsideRack(RevertingRack):
    """RevertingRack whose confirm runs beside the read back, which fails on h02 (its timer fired)."""

    read_failed = False
    timer_fired = False

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        batch = super().measure(repetitions, pairs_after)
        self.timer_fired = self.timer_fired or self.fired
        return batch

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        return True

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.extends += 1
        return outcome()  # the fired timer is found by the confirm, not by an extension

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        if self.timer_fired and not self.read_failed:  # not self.fired: the confirm resets it
            self.read_failed = True
            raise PlaybookFailed("reading the fabric state", ["h02: the read back failed"])
        return super().facts(hosts=hosts, measure_after=measure_after, pairs_after=pairs_after)


def test_a_revert_the_confirm_beside_the_read_back_finds_is_judged_before_the_reads_failure(
    tmp_path: Path,
) -> None:
    rack = RevertingAsideRack()
    _assert_discarded_and_undone(rack, tmp_path)
    assert rack.read_failed  # the move was kept, and its read back failed beside the confirm
