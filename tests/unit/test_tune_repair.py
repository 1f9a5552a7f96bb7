"""The repair move: one host's NCCL_IB_GID_INDEX names its RoCEv1 GID, every job fails through it;
the loop sets the index of its RoCEv2 IPv4 GID on that host alone, keeps it when the job then runs
(rolled back when it does not), and tunes on from the repaired rack. A NIC without a RoCEv2 GID has
no knob: the run stops at preflight with the host named, nothing changed.

The failed job is diagnosed by the real code path (``diagnose_job``) from real NCCL_DEBUG=INFO and
show_gids output (../shared/fixtures, as tests/unit/test_diagnose.py reads them).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from fabtune import report
from fabtune.ansible import RunOutcome
from fabtune.errors import PlaybookFailed
from fabtune.journal import Journal
from fabtune.perf.diagnose import Diagnosis, GidTable, diagnose_job
from fabtune.perf.parsers import show_gids
from fabtune.state import HostState
from fabtune.tune import run as tune_run
from fabtune.tune.loop import PreflightFailed, TuneOptions, Tuner
from fabtune.tune.measure import Batch, FailedRun
from tests.conftest import fixture_text
from tests.unit.test_diagnose import GIDS, V1_ROW, host_log
from tests.unit.test_tune_loop import FakeRack

HOSTS = ("h01", "h02", "h03")
REPAIR = "NCCL_IB_GID_INDEX to the RoCEv2 GID"


def gid_table(*, v1_only: bool = False) -> GidTable:
    """mlx5_0's GIDs (husky's show_gids: 2 RoCEv1 IPv4, 3 RoCEv2 IPv4); ``v1_only``: a NIC without
    RoCE v2, its v2 rows gone."""
    text = fixture_text(GIDS)
    if v1_only:
        text = "".join(line for line in text.splitlines(keepends=True) if "\tv2\t" not in line)
        text = text.replace("n_gids_found=4", "n_gids_found=2")
    return GidTable(show_gids.parse(text), text)


class GidRack(FakeRack):
    """Three hosts; h02's nccl.conf sets NCCL_IB_GID_INDEX=2 (its RoCEv1 GID). A job fails while a
    host's index names a RoCEv1 GID or none. ``v1_only``: h02's NIC has no RoCEv2 GID;
    ``still_fails``: the job fails on h02 for a cause beyond the GID (no host-side knob fixes it)."""

    def __init__(self, *, v1_only: bool = False, still_fails: bool = False) -> None:
        super().__init__(hosts=HOSTS)
        self.state["h02"]["nccl"] = {"NCCL_IB_GID_INDEX": "2"}
        self.tables = {h: gid_table(v1_only=v1_only and h == "h02") for h in HOSTS}
        self.still_fails = still_fails
        self.found: list[Diagnosis] = []
        self.desired_hosts: list[list[str]] = []  # the hosts of each apply

    def apply(self, desired: Mapping[str, HostState], *, run_id: str | None = None,
              snapshots: Mapping[str, HostState] | None = None, exact: bool = False,
              roles: Sequence[str] | None = None, measure_after: int = 0,
              facts_after: bool = False, pairs_after: int = 0) -> RunOutcome:
        self.desired_hosts.append(sorted(desired))
        return super().apply(desired, run_id=run_id, snapshots=snapshots, exact=exact, roles=roles)

    def _index(self, host: str) -> int:
        return int((self.state[host].get("nccl") or {}).get("NCCL_IB_GID_INDEX", 3))

    def _bad_gid(self, host: str) -> bool:
        entry = next((e for e in self.tables[host].table.entries if e.index == self._index(host)), None)
        return entry is None or entry.version != "v2"

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        good = super().measure(repetitions)
        if not self.still_fails and not any(self._bad_gid(h) for h in HOSTS):
            return good
        failed = FailedRun("all_reduce_perf", "h01", "mpirun -np 3 all_reduce_perf", 30,
                           "exit 3: h01: Test NCCL failure common.cu:1 'remote process exited'")
        log = "".join(host_log(h, gid_index=self._index(h), warn=True) for h in HOSTS)
        return Batch((), 0, failures=(failed,) * repetitions, log=log)

    def diagnose(self, log: str, why: str) -> Diagnosis:
        self.diagnosed.append(why)
        found = diagnose_job(HOSTS, log, failed=True, why=why, gids=self.tables)
        self.found.append(found)
        return found


def tuner(rack: GidRack, tmp_path: Path, said: list[str] | None = None) -> Tuner:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    on_event = None if said is None else (lambda kind, message, data: said.append(f"{kind}: {message}"))
    return Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("qps", "gdr")),
                 on_event=on_event)


def test_the_repair_goes_to_the_bad_host_alone_and_is_kept_when_the_job_then_runs(tmp_path: Path) -> None:
    rack, said = GidRack(), []
    run = tuner(rack, tmp_path, said)
    result = run.run()
    repair = result.moves[0]
    assert (repair.name, repair.group, repair.outcome, repair.hosts) == (REPAIR, "repair", "kept", ["h02"])
    # armed like every move, one role; no read of the whole rack asked for with its apply
    assert rack.desired_hosts[0] == ["h02"] and rack.applied[0] == {
        "exact": False, "armed": True, "roles": ("nccl_env",), "read": False}
    assert rack.state["h02"]["nccl"]["NCCL_IB_GID_INDEX"] == "3"
    assert all("NCCL_IB_GID_INDEX" not in (rack.state[h]["nccl"] or {}) for h in ("h01", "h03"))
    assert repair.reason.startswith("repair: the benchmark failed before it and runs on all 3 hosts after it")
    assert f"decision: kept {REPAIR}: {repair.reason}" in said
    steps = run.journal.steps(run.run_id)
    (move,) = [s for s in steps if s.name == REPAIR]
    assert move.state == "kept" and move.payload["reason"] == repair.reason
    assert move.payload["hosts"] == ["h02"]
    assert [(e["host"], e["evidence"]) for e in move.payload["evidence"]] == [("h02", V1_ROW)]
    assert move.payload["desired"]["h02"]["nccl"] == {"NCCL_IB_GID_INDEX": "3"}
    assert run.journal.snapshot_at(run.run_id, move.seq)["h02"]["nccl"] == {"NCCL_IB_GID_INDEX": "2"}
    # The failed baseline, the repair, then the baseline of the repaired rack that the moves are judged on.
    order = [(s.name, s.state) for s in steps if s.name in ("baseline", REPAIR)]
    assert order == [("baseline", "failed"), (REPAIR, "kept"), ("baseline", "done")]
    assert len(result.baseline) == 8 and len(repair.all_reduce) == 1  # its one run is no baseline sample
    tuned = [(m.name, m.outcome) for m in result.moves[1:]]
    assert tuned == [("lossless priority 3", "kept"), ("MTU 4200", "kept")]
    assert rack.state["h02"]["nccl"] == {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}  # kept by the moves


def test_a_repair_the_job_still_fails_under_is_rolled_back_and_the_run_stops_with_exit_7(
    tmp_path: Path,
) -> None:
    rack = GidRack(still_fails=True)
    before = copy.deepcopy(rack.state)
    run = tuner(rack, tmp_path)
    with pytest.raises(PreflightFailed) as err:
        run.run()
    assert err.value.code == 7
    message = str(err.value)
    assert message.startswith(f"preflight failed, nothing was changed ({REPAIR} on h02 was tried and rolled")
    assert "h02: transport: NCCL_IB_GID_INDEX=2 names mlx5_0's RoCEv1 GID" in message and V1_ROW in message
    assert rack.state == before  # restored, verified
    assert rack.desired_hosts == [["h02"], ["h02"]]  # the repair and its rollback, on h02 alone
    (move,) = [s for s in run.journal.steps(run.run_id) if s.kind == "move"]
    assert move.state == "rolled_back" and move.payload["verified"]
    assert move.payload["reason"].startswith("repair: the benchmark still fails after it: all_reduce_perf")


def test_a_nic_without_a_rocev2_gid_gets_no_repair_the_run_stops_with_exit_7_and_nothing_changed(
    tmp_path: Path,
) -> None:
    rack = GidRack(v1_only=True)
    run = tuner(rack, tmp_path)
    with pytest.raises(PreflightFailed) as err:
        run.run()
    assert err.value.code == 7
    assert rack.found[-1].at_fault == ["h02"] and rack.found[-1].gid_fixes == {}  # no knob fixes it
    assert str(err.value) == (
        "preflight failed, nothing was changed: h02: transport: NCCL_IB_GID_INDEX=2 names mlx5_0's RoCEv1 "
        f"GID: its queue pairs cannot reach RoCEv2 peers [{V1_ROW}]"
    )
    assert rack.applied == [] and not [s for s in run.journal.steps(run.run_id) if s.kind == "move"]


def test_the_report_shows_the_repair_as_a_move_on_its_host(tmp_path: Path) -> None:
    run = tuner(GidRack(), tmp_path)
    run.run()
    doc = report.build(run.journal, run.run_id)
    report.validate(doc)
    (repair,) = [d for d in doc["tune"]["decisions"] if d["group"] == "repair"]
    assert (repair["hosts"], repair["outcome"], repair["runs"]) == (["h02"], "kept", 1)
    assert f"{REPAIR} on h02" in report.render_markdown(doc)
    assert f"{REPAIR} on h02" in report.render_html(doc)


class InterruptedRack(GidRack):
    """The controller loses the rack while the repair is measured (a playbook fails)."""

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        if self.state["h02"]["nccl"] == {"NCCL_IB_GID_INDEX": "3"}:
            raise PlaybookFailed("bench_measure.yml: h01 unreachable")
        return super().measure(repetitions)


def test_a_failure_while_the_repair_is_held_puts_the_host_back(tmp_path: Path) -> None:
    rack = InterruptedRack()
    before = copy.deepcopy(rack.state)
    with pytest.raises(PlaybookFailed, match="unreachable"):
        tune_run._tuned(tuner(rack, tmp_path))
    assert rack.state == before  # no baseline measured, yet the held repair was undone
