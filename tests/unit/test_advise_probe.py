"""``fabtune advise -i INV``: the rack measured now through the tune baseline's benchmark path
(the backend's facts and measure are replaced here; the testbed runs the real ones)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fabtune.advise import probe
from fabtune.cli import main
from fabtune.errors import BenchmarkError, ExitStatus
from fabtune.inventory import InventoryInfo
from fabtune.tune.measure import Batch, FailedRun, Sample
from tests.unit.test_advise_cli import PORTS, SPEC

FACTS: dict[str, Any] = {
    f"h{i}": {"hardware": {"ports": PORTS}, "nccl": {"NCCL_IB_QPS_PER_CONNECTION": "2"}} for i in range(4)
}
BATCH = Batch(samples=(Sample(350.0, 40.0), Sample(360.0, 42.0), Sample(370.0, 44.0)), pause_frames=0)


def test_from_batch_takes_the_medians_the_line_rate_and_the_qps() -> None:
    m = probe.from_batch("roce", FACTS, BATCH)
    assert (m.nodes, m.kind, m.phase, m.all_reduce, m.alltoall, m.qps) == (4, "roce", "probe", 360.0, 42.0, 2)
    assert m.nic_gbytes == 400.0 and m.per_gpu(8) == 45.0
    # the rack's own GPU count, when known, divides the busbw (a 2-GPU rack for an 8-GPU job)
    assert probe.from_batch("roce", FACTS, BATCH, gpus=2).per_gpu(8) == 180.0


def test_a_batch_with_no_sample_is_a_benchmark_error_with_the_reason() -> None:
    failed = FailedRun("all_reduce_perf", "h0", "mpirun ...", 60, "deadline passed")
    with pytest.raises(BenchmarkError) as err:
        probe.from_batch("ib", FACTS, Batch(samples=(), pause_frames=0, failures=(failed,)))
    assert "all_reduce_perf on h0: deadline passed" in str(err.value)


class FakeBackend:
    """Stands in for AnsibleBackend: the facts and one batch, no hosts."""

    calls: list[str] = []

    def __init__(self, info: InventoryInfo) -> None:
        self.info = info
        self.gpus = 8

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, Any]:
        FakeBackend.calls.append("facts")
        return FACTS

    def learn(self, facts: Any) -> None:
        FakeBackend.calls.append("learn")

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        FakeBackend.calls.append(f"measure {repetitions}")
        return BATCH


def test_cli_measures_under_the_lock_and_advises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    inv = tmp_path / "inv.yml"
    inv.write_text("all: {}\n")
    info = InventoryInfo(inv, "rack9", "roce", tuple(FACTS), (), "mpirun", None)
    monkeypatch.setattr(probe, "read_inventory", lambda path: info)
    monkeypatch.setattr(probe, "AnsibleBackend", FakeBackend)
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    FakeBackend.calls.clear()
    assert main(["advise", "-i", str(inv), "--model", str(spec), "--nodes", "4,64", "--json"]) == 0
    assert FakeBackend.calls == ["facts", "learn", f"measure {probe.REPETITIONS}"]
    doc = json.loads(capsys.readouterr().out)
    assert doc["measured"]["run_id"] == "(measured now)" and doc["measured"]["qps"] == 2
    assert doc["measured"]["gpus"] == 8
    assert (tmp_path / "home" / "locks" / "rack9.lock").exists()


def test_cli_refuses_a_misfit_before_measuring_and_from_with_i(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(probe, "AnsibleBackend", FakeBackend)
    inv = tmp_path / "inv.yml"
    inv.write_text("all: {}\n")
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    FakeBackend.calls.clear()
    assert main(["advise", "-i", str(inv), "--model", str(spec), "--nodes", "3"]) == ExitStatus.CONFIG
    assert FakeBackend.calls == []
    run = "20260101-000000-abcdef"
    both = ["advise", "-i", str(inv), "--from", run, "--model", str(spec), "--nodes", "4"]
    assert main(both) == ExitStatus.USAGE
