"""A launch that hangs, fails or prints garbage is a failed run with evidence, never a sample."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from fabtune.journal import Journal
from fabtune.knobs import Candidate
from fabtune.perf.checks import CheckResult
from fabtune.perf.diagnose import Diagnosis
from fabtune.tune.hosts import host_groups, plan_rack
from fabtune.tune.loop import BenchmarkFailed, PreflightFailed, TuneOptions, Tuner
from fabtune.tune.measure import (
    Batch,
    FailedRun,
    MeasureSpec,
    Sample,
    busbw_ceilings,
    judge_runs,
    launch_runs,
)
from fabtune.tune.stats import ImpossibleSample, decide, impossible
from tests.unit.test_tune_loop import HARDWARE, FakeRack

TABLE = """# nThread 1 nGpus 2 minBytes 8589934592 maxBytes 8589934592 step: 2(factor) iters: 20
#
#    size      count  type redop root   time algbw busbw #wrong   time algbw busbw #wrong
#     (B) (elements)                    (us) (GB/s) (GB/s)        (us) (GB/s) (GB/s)
 8589934592 2147483648 float sum -1 1000.0 60.00 {busbw} 0 1000.0 60.00 {busbw} 0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : {busbw}
"""
SPEC = MeasureSpec(
    Path("inv.yml"), ("h01", "h02"), 2, {}, deadline_s=30,
    ceilings={"all_reduce_perf": 200.0, "alltoall_perf": 100.0},
)


def ok(busbw: str) -> dict[str, Any]:
    return {"rc": 0, "stdout": TABLE.format(busbw=busbw), "stderr": "", "cmd": ["timeout", "alltoall_perf"]}


@pytest.mark.parametrize(
    ("alltoall", "reason"),
    [
        ({"rc": 124, "stdout": "", "stderr": "", "cmd": ["timeout", "30s", "mpirun"]},
         "missed its deadline of 30 s and was killed"),
        ({"rc": 137, "stdout": "", "stderr": ""}, "missed its deadline of 30 s and was killed"),
        ({"rc": -15, "stdout": "", "stderr": "", "timed_out": True},  # fabric_run stopped it
         "missed its deadline of 30 s and was killed"),
        ({"failed": True, "timedout": {"period": 70}, "msg": "task timed out"},
         "missed its deadline of 30 s and was killed"),
        ({"rc": 127, "stdout": "", "stderr": "[Errno 2] No such file or directory: 'timeout'"},
         "exit 127: [Errno 2] No such file"),
        ({"rc": 0, "stdout": "", "stderr": ""}, "no readable result"),
        ({"failed": True, "msg": "[Errno 2] No such file: b'timeout'"}, "did not run: [Errno 2]"),
        ({"rc": 0, "stdout": "\x00\x17garbage ### 12 GB/s", "stderr": ""}, "no readable result"),
        ({"rc": 3, "stdout": "", "stderr": "h02: Test NCCL failure common.cu:1 'remote process exited'"},
         "exit 3: h02: Test NCCL failure"),
        (ok("0.00"), "impossible sample: 0.0 GB/s is not positive"),
        (ok("-3"), "impossible sample: -3.0 GB/s is not positive"),
        (ok("nan"), "impossible sample: nan GB/s is not a finite number"),
        (ok("120.5"), "impossible sample: 120.50 GB/s is above the NICs' ceiling of 100.00 GB/s"),
    ],
)
def test_a_bad_launch_is_a_failed_run_with_evidence_not_a_sample(
    alltoall: dict[str, Any], reason: str
) -> None:
    runs = [ok("150.0"), alltoall, ok("150.0"), ok("60.0")]
    samples, failures, first = judge_runs(SPEC, runs)
    assert samples == [Sample(150.0, 60.0)]  # the failed repetition's all_reduce goes with it
    assert len(failures) == 1
    failed = failures[0]
    assert (failed.test, failed.host, failed.deadline_s) == ("alltoall_perf", "h01", 30)
    assert reason in failed.reason
    assert failed.command  # what ran, as the evidence
    assert "150.0" in first  # the transport preflight reads a good all_reduce's log


def test_ceilings_come_from_the_nics_line_rates() -> None:
    ports = [{"netdev": f"eth{i}", "rate": "400 Gb/sec (4X NDR)"} for i in (2, 3)]
    facts = {h: {"hardware": {"ports": ports}} for h in ("h01", "h02")}
    assert busbw_ceilings(facts) == {"all_reduce_perf": 200.0, "alltoall_perf": 100.0}
    assert busbw_ceilings({"h01": facts["h01"]}) == {}  # one host: NVLink only, no NIC bound
    assert busbw_ceilings({h: {"hardware": {"ports": []}} for h in ("h01", "h02")}) == {}


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_the_statistics_refuse_an_impossible_sample(bad: float) -> None:
    base = [100.0, 101.0, 99.5, 100.2]
    with pytest.raises(ImpossibleSample, match=r"candidate sample 2 of 3 refused: .*GB/s is not"):
        decide(base, [100.0, bad, 100.5])
    with pytest.raises(ImpossibleSample, match=r"reference sample 4 of 4 refused"):
        decide([*base[:3], bad], [100.0, 100.5])


def test_a_sample_above_the_ceiling_is_impossible() -> None:
    assert impossible(104.9, 100.0) is None
    assert impossible(105.1, 100.0) == (
        "105.10 GB/s is above the NICs' ceiling of 100.00 GB/s (refused beyond x1.05)"
    )
    assert impossible(1e6) is None  # no ceiling known: only the sign and finiteness are checked


def failed(test: str = "alltoall_perf") -> FailedRun:
    why = "missed its deadline of 30 s and was killed"
    return FailedRun(test, "h01", f"mpirun -np 2 {test} -b 1G", 30, why)


class FailingRack(FakeRack):
    """A FakeRack whose measurements fail: the next ``fail`` launches, or always in some states."""

    def __init__(self, fail: int = 0, *, hang_at_mtu: int | None = None, stuck: bool = False) -> None:
        super().__init__(lossless_prio=3)
        self.fail, self.hang_at_mtu, self.stuck = fail, hang_at_mtu, stuck
        self.measured: list[int] = []

    def _hangs(self) -> bool:
        if self.fail > 0:
            self.fail -= 1
            return True
        mtu = self.state["h01"]["nics"]["eth2"].get("mtu")
        return self.stuck or mtu == self.hang_at_mtu

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        self.measured.append(repetitions)
        good = super().measure(repetitions)
        if self._hangs():
            return Batch(good.samples[1:], good.pause_frames, failures=(failed(),))
        return good


def run_on(rack: FakeRack, tmp_path: Path) -> Tuner:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    return Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=("qps", "gdr")))


def benchmark_steps(tuner: Tuner) -> list[dict[str, Any]]:
    return [s.payload for s in tuner.journal.steps(tuner.run_id) if s.kind == "benchmark"]


def test_a_failed_run_is_journaled_and_retried_once(tmp_path: Path) -> None:
    rack = FailingRack(fail=1)
    tuner = run_on(rack, tmp_path)
    tuner.read_facts()
    tuner.baseline()
    assert rack.measured[:2] == [8, 1]  # the failed repetition, measured once more
    assert len(tuner.reference) == 8 and all(s.all_reduce > 0 and s.alltoall > 0 for s in tuner.reference)
    [step] = benchmark_steps(tuner)
    assert step["then"] == "retrying once"
    assert (step["test"], step["host"], step["deadline_s"]) == ("alltoall_perf", "h01", 30)
    assert "alltoall_perf -b 1G" in step["command"]


def test_a_baseline_that_fails_twice_stops_the_run_with_the_evidence(tmp_path: Path) -> None:
    rack = FailingRack(stuck=True)
    tuner = run_on(rack, tmp_path)
    with pytest.raises(BenchmarkFailed) as err:
        tuner.run()
    assert err.value.code == 6
    assert "baseline: nothing was changed" in str(err.value)
    assert "alltoall_perf on h01: missed its deadline of 30 s" in str(err.value)
    assert "mpirun -np 2 alltoall_perf" in str(err.value)
    assert [s["then"] for s in benchmark_steps(tuner)] == ["retrying once", "no retry left"]
    steps = tuner.journal.steps(tuner.run_id)
    baseline = next(s for s in steps if s.name == "baseline")
    assert baseline.state == "failed" and "all_reduce" not in baseline.payload
    assert rack.applied == []  # nothing was changed


def test_a_move_the_benchmark_hangs_under_is_rolled_back_and_the_run_goes_on(tmp_path: Path) -> None:
    rack = FailingRack(hang_at_mtu=4200)
    tuner = run_on(rack, tmp_path)
    result = tuner.run()
    mtu = next(m for m in result.moves if m.name == "MTU 4200")
    assert mtu.outcome == "rolled_back"
    assert mtu.reason.startswith("benchmark failed, and again when retried: alltoall_perf on h01: missed")
    assert mtu.all_reduce == [] and mtu.alltoall == []  # no sample from the failed runs
    assert rack.state["h01"]["nics"]["eth2"]["mtu"] == 1500  # rolled back, verified
    assert [m.outcome for m in result.moves if m.name != "MTU 4200"] == ["kept"]
    assert all(s.alltoall > 0 for s in tuner.reference)


def test_a_rack_that_does_not_measure_after_the_rollback_stops_the_run(tmp_path: Path) -> None:
    rack = FailingRack()
    tuner = run_on(rack, tmp_path)
    tuner.read_facts()
    tuner.baseline()
    rack.stuck = True
    with pytest.raises(BenchmarkFailed, match=r"after rolling back lossless priority 3 \(verified\)"):
        tuner.try_move(first_move(tuner))
    assert rack.state["h01"]["nics"]["eth2"]["pfc"] == []  # the move was undone first
    moves = [s for s in tuner.journal.steps(tuner.run_id) if s.kind == "move"]
    assert [s.state for s in moves] == ["rolled_back"]


def first_move(tuner: Tuner) -> Candidate:
    return plan_rack(host_groups(tuner.backend.facts(), "roce"), ("qps", "gdr"))[0][0]


def test_hardware_fixture_has_no_rate_so_no_ceiling() -> None:
    assert busbw_ceilings({h: {"hardware": HARDWARE} for h in ("h01", "h02")}) == {}


def test_launches_that_all_printed_garbage_are_failed_runs_not_a_transport_crash() -> None:
    from fabtune.errors import ParseError
    from fabtune.tune.measure import _transport

    garbage = {"rc": 0, "stdout": "x9f3 garbage\n" * 20, "stderr": ""}
    samples, failures, first = judge_runs(SPEC, [garbage, garbage])
    assert samples == [] and {f.test for f in failures} == {"all_reduce_perf", "alltoall_perf"}
    assert _transport(SPEC, first, failed_only=True) == ()  # the failed runs carry the evidence
    with pytest.raises(ParseError):  # a good run whose hosts printed no NCCL log is still an error
        _transport(SPEC, first)


class BadHostRack(FailingRack):
    """Every launch fails; the diagnosis finds h02 at fault (its GID index names a RoCEv1 GID)."""

    def diagnose(self, log: str, why: str) -> Diagnosis:
        self.diagnosed.append(why)
        row = "mlx5_0 1 2 0000:0000:0000:0000:0000:ffff:0afe:0102 10.254.1.2 v1 eth2"
        return Diagnosis([
            CheckResult("transport", "h01", "warn", "failed through h02: NCCL error: ...", ""),
            CheckResult("transport", "h02", "fail", "NCCL_IB_GID_INDEX=2 names mlx5_0's RoCEv1 GID", row),
        ], ["h02"])


def test_a_baseline_failed_by_one_hosts_fault_names_it_and_exits_7(tmp_path: Path) -> None:
    rack = BadHostRack(stuck=True)
    tuner = run_on(rack, tmp_path)
    with pytest.raises(PreflightFailed) as err:
        tuner.run()
    assert err.value.code == 7
    assert str(err.value) == (
        "preflight failed, nothing was changed: h02: transport: NCCL_IB_GID_INDEX=2 names mlx5_0's RoCEv1 "
        "GID [mlx5_0 1 2 0000:0000:0000:0000:0000:ffff:0afe:0102 10.254.1.2 v1 eth2]"
    )
    assert rack.diagnosed == ["alltoall_perf on h01: missed its deadline of 30 s and was killed"]
    baseline = next(s for s in tuner.journal.steps(tuner.run_id) if s.name == "baseline")
    assert baseline.state == "failed" and [c["host"] for c in baseline.payload["checks"]] == ["h01", "h02"]
    assert rack.applied == []  # nothing was changed


def test_the_launches_are_read_from_the_one_fabric_run_call_in_order() -> None:
    """bench_measure.yml runs a batch's launches in one fabric_run call (``runs``, ids "0", "1", ...);
    each is judged with its own command line; runs past a gap or an unknown id are not taken."""
    argvs = [["mpirun", "all_reduce_perf"], ["mpirun", "alltoall_perf"], ["mpirun", "all_reduce_perf"]]
    killed = {"id": "1", "rc": 124, "stdout": "", "stderr": "", "timed_out": False}
    runs = [{"id": "0", **ok("150.0")}, killed]
    taken = launch_runs({"changed": False, "runs": runs}, argvs)
    assert [r["cmd"] for r in taken] == argvs[:2]
    samples, failures, _ = judge_runs(SPEC, taken)
    assert samples == [] and failures[0].command == "mpirun alltoall_perf"
    assert launch_runs({"runs": [{"id": "1", **ok("1")}]}, argvs) == []
    assert launch_runs({"failed": True, "msg": "timed out"}, argvs) == []


def test_the_launch_hosts_open_mpi_settings_go_from_one_batch_to_the_next() -> None:
    """A batch's launches read the site's plm_rsh values once (fabric_run's ssh_reuse.site); the
    next batch from the same launch host is given them (fabtune_mpirun_rsh_site), no ompi_info."""
    from fabtune import ansible
    from fabtune.tune.measure import RSH_SITE_VAR, RUN_TASK, batch_of, plan_batch

    planned = plan_batch(SPEC, 1)
    assert RSH_SITE_VAR not in planned.variables
    site = {"plm_rsh_agent": "ssh : rsh", "plm_rsh_args": "-p 2222"}
    shared = {"used": True, "why": "2 launches share their ssh connections", "site": site}
    result = {"runs": [], "ssh_reuse": shared}
    task = ansible.TaskResult("h01", RUN_TASK, "fabtune.fabric.fabric_run", "runner_on_ok", False, result)
    batch = batch_of(SPEC, planned, ansible.RunOutcome("successful", 0, {}, (task,), Path("/nonexistent")))
    assert batch.rsh_site == site
    later = plan_batch(dataclasses.replace(SPEC, rsh_site=batch.rsh_site), 1)
    assert later.variables[RSH_SITE_VAR] == site
    unshared = {**result, "ssh_reuse": {"used": False, "why": "not asked"}}
    task = dataclasses.replace(task, result=unshared)
    again = batch_of(SPEC, planned, ansible.RunOutcome("successful", 0, {}, (task,), Path("/nonexistent")))
    assert again.rsh_site is None
