"""``fabtune tune --plan``: the moves a run would try, from the hosts' facts alone, by the loop's own
planner; nothing applied, measured or journaled. (The testbed run that compares a preview with the
plan of the run that follows it: tests/integration/test_tune.py.)"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fabtune import cli
from fabtune.errors import ExitStatus
from fabtune.inventory import InventoryInfo
from fabtune.journal import Journal
from fabtune.knobs import Candidate, Change
from fabtune.tune import preview
from fabtune.tune.loop import TuneOptions, Tuner, plan_work
from tests.unit.test_tune_loop import FakeRack
from tests.unit.test_tune_per_host import ODD, TUNED, UnevenRack, tune

HOSTS = ("h01", "h02", "h03")


class ReadOnly:
    """The backend the preview builds: facts from a fake rack; anything else fails the test."""

    rack = UnevenRack({"h01": TUNED, "h02": ODD, "h03": TUNED})

    def __init__(self, info: InventoryInfo, deadline_s: int) -> None:
        self.info = info

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        return self.rack.facts(hosts=hosts)

    def __getattr__(self, name: str) -> Any:
        pytest.fail(f"the preview called {name} on the backend")


@pytest.fixture
def fake_rack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all: {}\n")
    info = InventoryInfo(inventory, "rack", "roce", HOSTS, (), "mpirun", None)
    monkeypatch.setattr(preview, "read_inventory", lambda _path: info)
    monkeypatch.setattr(preview, "AnsibleBackend", ReadOnly)
    return inventory


def test_the_plan_is_the_one_the_loop_makes_on_the_same_rack(fake_rack: Path, tmp_path: Path) -> None:
    plan = preview.preview(fake_rack, {"skip_groups": ["qps", "gdr"]})
    assert [[(m.name, m.hosts) for m in group] for group in plan.groups] == [
        [("lossless priority 3", ("h02",))], [("MTU 4200", ("h02",))]]
    _, result = tune(UnevenRack({"h01": TUNED, "h02": ODD, "h03": TUNED}), tmp_path / "run")
    assert [[m.name for m in group] for group in plan.groups] == result.planned
    lossless = plan.groups[0][0]
    assert lossless.roles == ("nccl_env", "roce_cc", "roce_qos", "roce_tos") and lossless.pairs
    assert plan.skipped_groups == ("qps", "gdr") and plan.hosts == HOSTS
    assert plan.bounds.moves_at_least == 2 and plan.bounds.moves_at_most == 2
    assert plan.bounds.baseline_pair_rounds == 2
    assert not Journal().runs(5)  # no run journaled, no lock taken


def test_every_alternative_of_a_group_counts_toward_the_most_moves(
    fake_rack: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ReadOnly, "rack", UnevenRack(dict.fromkeys(HOSTS, ODD)))
    plan = preview.preview(fake_rack, {"skip_groups": ["gdr"]})
    qps = [m for group in plan.groups for m in group if m.group == "qps"]
    assert len(qps) > 1 and not any(m.pairs for m in qps)  # perftest does not read nccl.conf
    assert plan.bounds.moves_at_least == len(plan.groups) < plan.bounds.moves_at_most
    assert all(m.hosts == HOSTS for group in plan.groups for m in group)


def test_fabtune_tune_plan_prints_the_moves_and_writes_the_json(
    fake_rack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    code = cli.main(["tune", "-i", str(fake_rack), "--plan", "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "MTU 4200" in printed and "lossless priority 3" in printed and "Nothing was changed" in printed
    doc = json.loads(out.read_text())
    assert doc["kind"] == "tune_plan" and doc["groups"][1][0]["knobs"] == ["mtu"]
    assert doc["groups"][1][0]["hosts"] == ["h02"]


@pytest.mark.parametrize("extra", [["--jsonl"], ["--model", "job.yml"], ["--nodes", "8"]])
def test_plan_takes_no_progress_stream_or_job(
    fake_rack: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["tune", "-i", str(fake_rack), "--plan", *extra])
    assert code == ExitStatus.USAGE
    assert "--plan shows the plan only" in capsys.readouterr().err


def _cand(group: str, name: str, change: Change) -> Candidate:
    return Candidate(group, name, change, "why")


def test_the_plans_benchmark_time_counts_repetitions_rounds_and_top_ups() -> None:
    """At 10 s a repetition and 5 s a pair round, with the default policy (2 to 12 repetitions, a
    reference of 8): a NIC move takes 20 s at least (rolled back after 2 runs) and at most 120 s of
    runs, 2 pair rounds and a keep's top-up of 6 runs and a round (195 s); an NCCL move no rounds."""
    groups = [
        [_cand("lossless", "a", Change(nic={"pfc": [3]})), _cand("lossless", "b", Change(nic={"pfc": [4]}))],
        [_cand("mtu", "MTU 4200", Change(nic={"mtu": 4200}))],
        [],  # a group the rack already runs
        [_cand("qps", f"{n} QPs", Change(nccl={"NCCL_IB_QPS_PER_CONNECTION": str(n)})) for n in (4, 8)],
    ]
    work = plan_work(groups, TuneOptions(), run_s=10.0, pair_s=5.0)
    assert work.groups == ("lossless", "mtu", "qps")
    assert (work.moves_at_least, work.moves_at_most) == (3, 5)
    assert work.low_s == 3 * 20.0
    assert work.high_s == 3 * 195.0 + 2 * 180.0


def test_the_run_says_its_plan_and_time_after_the_baseline(tmp_path: Path) -> None:
    events: list[tuple[str, str, dict[str, Any]]] = []
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    loop = Tuner(FakeRack(lossless_prio=4), journal, run_id, "roce",
                 options=TuneOptions(skip_groups=("qps", "gdr")),
                 on_event=lambda kind, message, data: events.append((kind, message, data)))
    result = loop.run()
    (said,) = [(m, d) for kind, m, d in events if kind == "plan" and "moves" in m]
    message, data = said
    assert data["groups"] == ("lossless", "mtu") and data["moves_at_least"] == 2
    assert data["moves_at_most"] == sum(len(g) for g in result.planned)
    assert 0 < data["low_s"] < data["high_s"] and "applies not counted" in message
    kinds = [kind for kind, *_ in events]
    assert kinds.index("baseline") < kinds.index("plan", kinds.index("baseline")) < kinds.index("move")


def test_an_infiniband_plan_has_no_lossless_class(
    fake_rack: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    info = InventoryInfo(fake_rack, "rack", "ib", HOSTS, (), "mpirun", None)
    monkeypatch.setattr(preview, "read_inventory", lambda _path: info)
    assert preview.preview(fake_rack).lossless is None
    assert cli.main(["tune", "-i", str(fake_rack), "--plan"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ib rack, 3 hosts; credit-based flow control (no lossless class to choose)")
