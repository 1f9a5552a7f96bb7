"""A round's results from bench_ib_write_bw.yml's tasks: each client's run from the task that ran it
(the task that then waits for the servers and reads the counters after, or, where the hosts ran in
waves, a task of its own), the counters from the reads before and after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from fabtune.ansible import RunOutcome, TaskResult
from fabtune.collection import COLLECTION
from fabtune.perf import pairs
from fabtune.perf.argv import PerftestOptions
from fabtune.perf.fabric import HostView, Rail
from fabtune.perf.schedule import Pair

OUTPUT = (
    "                    RDMA_Write BW Test\n"
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    " 65536      5000             97.50              97.41                 0.185802\n"
)
ETHTOOL = "NIC statistics:\n     rx_prio3_pause: {}\n     tx_prio3_pause: 0\n"


def _views() -> dict[str, HostView]:
    rail = Rail("mlx5_0", "eth2", "10.0.0.1", 4200, 400.0, "Ethernet", 3)
    return {h: HostView(h, (rail,), {}) for h in ("h01", "h02")}


def _task(host: str, name: str, result: dict[str, Any]) -> TaskResult:
    return TaskResult(host, name, "fabtune.fabric.fabric_run", "runner_on_ok", False, result)


def _reads(pause: int) -> list[dict[str, Any]]:
    return [{"id": "ethtool eth2", "rc": 0, "stdout": ETHTOOL.format(pause)}]


def _outcome(planned: pairs.PlannedRound, in_waves: bool) -> RunOutcome:
    """h02's client into h01's server: the clients in the task after the start, or in the last one."""
    (run,) = planned.runs
    client = {"id": run["id"], "rc": 0, "stdout": OUTPUT, "stderr": "", "timed_out": False}
    tasks = [_task(h, pairs.BEFORE_TASK, {"runs": _reads(100), "started": []}) for h in ("h01", "h02")]
    if in_waves:
        tasks.append(_task("h02", pairs.CLIENTS_TASK, {"runs": [client]}))
    for host in ("h01", "h02"):
        first = [client] if host == "h02" and not in_waves else []
        after = {"first_runs": first, "runs": _reads(107), "collected": []}
        tasks.append(_task(host, pairs.AFTER_TASK, after))
    return RunOutcome("successful", 0, {}, tuple(tasks), Path("/nonexistent"))


@pytest.mark.parametrize("in_waves", [False, True])
def test_a_client_is_read_from_the_task_that_ran_it(in_waves: bool) -> None:
    planned = pairs.plan_round([Pair("h01", "h02", 0, 18515)], _views(), PerftestOptions(duration_s=2))
    (result,), after = pairs.round_results(_outcome(planned, in_waves), planned, _views(), None)
    assert result.gbps == pytest.approx(97.41) and result.error is None
    assert result.counters == {"h01:eth2": {"rx_prio3_pause": 7}, "h02:eth2": {"rx_prio3_pause": 7}}
    assert after == {h: {"ethtool eth2": ETHTOOL.format(107)} for h in ("h01", "h02")}


def test_a_client_no_task_reported_is_not_run() -> None:
    planned = pairs.plan_round([Pair("h01", "h02", 0, 18515)], _views(), PerftestOptions(duration_s=2))
    outcome = _outcome(planned, in_waves=True)
    lost = RunOutcome("successful", 0, {}, tuple(t for t in outcome.tasks if t.task != pairs.CLIENTS_TASK),
                      Path("/nonexistent"))
    (result,), _ = pairs.round_results(lost, planned, _views(), None)
    assert result.gbps is None and result.error == "not run"


def test_a_client_that_started_late_is_said() -> None:
    """A host that got the clients' task after the round's common start reports how late
    (fabric_run's first_late_s); a quarter of the run or more is worth a warning."""
    planned = pairs.plan_round([Pair("h01", "h02", 0, 18515)], _views(), PerftestOptions(duration_s=2))
    outcome = _outcome(planned, in_waves=False)
    late = tuple(
        _task(t.host, t.task, {**t.result, "first_late_s": 0.8})
        if t.task == pairs.AFTER_TASK and t.host == "h02" else t
        for t in outcome.tasks
    )
    (result,), _ = pairs.round_results(RunOutcome("successful", 0, {}, late, Path("/nonexistent")), planned,
                                       _views(), None)
    assert result.late_s == pytest.approx(0.8)
    note = pairs.late_clients(pairs.late_hosts([result]), 2)
    assert note is not None and "h02 0.8 s" in note and "fabtune_bench_start_lead_s" in note
    assert pairs.late_clients(pairs.late_hosts([result]), 5) is None
    (on_time,), _ = pairs.round_results(outcome, planned, _views(), None)
    assert on_time.late_s == 0.0 and pairs.late_clients(pairs.late_hosts([on_time]), 2) is None


def test_a_late_round_gives_the_next_more_lead_up_to_a_cap() -> None:
    """pairs.more_lead: the latest host's lateness and half a second more, past a tolerance; it
    only grows within a run, and never past LEAD_EXTRA_MAX_S (a clock problem waiting won't fix)."""
    assert pairs.more_lead(0.0, {}) == 0.0
    assert pairs.more_lead(0.0, {"h01": 0.0, "h02": pairs.LATE_TOLERANCE_S}) == 0.0
    assert pairs.more_lead(0.0, {"h01": 0.2, "h02": 0.8}) == pytest.approx(1.3)
    assert pairs.more_lead(1.3, {"h02": 0.4}) == pytest.approx(2.2)
    assert pairs.more_lead(1.3, {"h02": 0.0}) == pytest.approx(1.3)
    assert pairs.more_lead(29.0, {"h02": 5.0}) == pairs.LEAD_EXTRA_MAX_S


def test_a_round_whose_hosts_all_waited_gives_the_next_a_shorter_lead() -> None:
    """pairs.more_lead with the hosts' waits: the next lead is what the host that waited least
    needed plus LEAD_SPARE_S; a wait within the spare and the tolerance changes nothing, a late host
    raises the lead whatever the others waited, and the cut stops at LEAD_CUT_MAX_S."""
    spare = pairs.LEAD_SPARE_S
    waited = {"h01": 0.9, "h02": 0.7}
    assert pairs.more_lead(0.0, {"h01": 0.0, "h02": 0.0}, waited) == pytest.approx(spare - 0.7)
    assert pairs.more_lead(-0.4, {}, {"h01": 0.5}) == pytest.approx(-0.4 - 0.5 + spare)
    assert pairs.more_lead(0.0, {}, {"h01": spare + pairs.LATE_TOLERANCE_S}) == 0.0
    assert pairs.more_lead(0.0, {"h01": 0.0}, {"h01": 0.0, "h02": 2.0}) == 0.0  # h01 needed it all
    assert pairs.more_lead(-0.4, {"h01": 0.5}, {"h02": 2.0}) == pytest.approx(-0.4 + 0.5 + 0.5)
    assert pairs.more_lead(-4.9, {}, {"h01": 4.0}) == -pairs.LEAD_CUT_MAX_S


def test_the_hosts_waits_are_the_least_of_each_hosts_runs() -> None:
    found = [pairs.PairResult("h01", "h02", 0, "mlx5_0", 100.0, 400.0, wait_s=0.6),
             pairs.PairResult("h01", "h02", 1, "mlx5_1", 100.0, 400.0, wait_s=0.4),
             pairs.PairResult("h02", "h03", 0, "mlx5_0", 100.0, 400.0, wait_s=0.9)]
    assert pairs.waited_hosts(found) == {"h02": 0.4, "h03": 0.9}


def test_the_extra_lead_goes_to_the_playbook_only_when_there_is_one() -> None:
    stage = [Pair("h01", "h02", 0, 18515)]
    plain = pairs.plan_round(stage, _views(), PerftestOptions(duration_s=2))
    assert pairs.LEAD_EXTRA_VAR not in plain.variables(read_before=True)
    later = pairs.plan_round(stage, _views(), PerftestOptions(duration_s=2), lead_extra_s=1.25)
    assert later.variables(read_before=True)[pairs.LEAD_EXTRA_VAR] == 1.25
    shorter = pairs.plan_round(stage, _views(), PerftestOptions(duration_s=2), lead_extra_s=-0.5)
    assert shorter.variables(read_before=True)[pairs.LEAD_EXTRA_VAR] == -0.5


@pytest.mark.parametrize(("inventory_vars", "lead"), [
    ({}, 1.1),  # 1 s plus 50 ms a host: 2 hosts
    ({"fabtune_bench_start_lead_s": 4}, 4.0),
    ({pairs.LEAD_EXTRA_VAR: 1.5}, 2.6),
    ({"fabtune_bench_start_lead_s": 4, pairs.LEAD_EXTRA_VAR: 1.5}, 5.5),
    ({pairs.LEAD_EXTRA_VAR: -0.5}, 0.6),  # the controller shortened the default
    ({pairs.LEAD_EXTRA_VAR: -2.0}, pairs.LEAD_MIN_S),  # never below the playbook's least lead
    ({"fabtune_bench_start_lead_s": 4, pairs.LEAD_EXTRA_VAR: -1.5}, 4.0),  # the inventory's, never shortened
])
def test_the_playbook_adds_the_extra_lead_to_its_own(inventory_vars: dict[str, float], lead: float) -> None:
    """bench_ib_write_bw.yml's lead: the inventory's (or its default), plus the controller's extra
    (where it is negative, only the default's, and not below the least lead)."""
    playbook = yaml.safe_load((COLLECTION / "playbooks" / pairs.ROUND_PLAYBOOK).read_text())
    play_vars = playbook[0]["vars"]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    assert play_vars["__fabtune_lead_min_s"] == pairs.LEAD_MIN_S
    extra = env.from_string(play_vars["__fabtune_lead_extra_s"]).render(**inventory_vars)
    rendered = env.from_string(play_vars["__fabtune_start_lead_s"]).render(
        __fabtune_round_hosts=["h01", "h02"], __fabtune_lead_extra_s=extra,
        __fabtune_lead_min_s=play_vars["__fabtune_lead_min_s"], **inventory_vars)
    assert float(rendered) == pytest.approx(lead)
