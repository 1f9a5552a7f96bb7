"""``fabtune bootstrap --model SPEC --nodes N --min-mfu F``: the accepted rack's predicted MFU for
the job at the target size; below the threshold the bootstrap fails with the reason (exit 7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabtune import bootstrap as lib
from fabtune.advise.gate import gate
from fabtune.advise.job import parse_job
from fabtune.advise.measured import Measured
from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.lifecycle import RunContext
from tests.unit.test_advise_cli import SPEC

RACK = Measured("r", "roce", 4, "acceptance", 360.0, None, 400.0, 1)


def test_gate_predicts_on_the_racks_own_fabric_and_compares() -> None:
    job = parse_job({"name": "j", "params": 8e9, "layers": 32, "hidden": 4096, "seq_len": 8192,
                     "global_batch": 1024, "micro_batch": 2, "peak_tflops": 989}, "x")
    found = gate(job, RACK, 64, 0.45)
    assert found.option == "roce" and found.passed and found.step.mfu == pytest.approx(0.5, rel=0.02)
    assert "predicted MFU at N=64 on roce: 50.0% (meets --min-mfu 45%)" in found.line()
    strict = gate(job, RACK, 64, 0.6)
    assert not strict.passed and "below --min-mfu 60%" in strict.line()
    ib = gate(job, Measured("r", "ib", 4, "acceptance", 360.0, None, None, 1), 64, None)
    assert ib.option == "ib-ndr" and ib.passed


@pytest.fixture
def accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """lib.bootstrap replaced by a journaled run that passed with an acceptance busbw."""
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    calls: list[str] = []

    def fake(inventory: Path, profile: Any, **_: Any) -> tuple[lib.BootstrapReport, RunContext]:
        journal = Journal()
        run_id = journal.open_run("bootstrap", "rack1", str(inventory), "roce.yml")
        seq = journal.step(run_id, "phase", "preflight", {"hosts": ["a", "b", "c", "d"]})
        journal.finish_step(run_id, seq, "done", {"hosts": ["a", "b", "c", "d"]})
        seq = journal.step(run_id, "phase", "acceptance", {})
        journal.finish_step(run_id, seq, "done", {"busbw_gbytes": 360.0})
        journal.close_run(run_id, "passed", {})
        calls.append(run_id)
        report = lib.BootstrapReport("rack1", "roce.yml", 0.9, 0.8, phase="done")
        return report, RunContext(journal, run_id, "bootstrap", "rack1")

    monkeypatch.setattr(lib, "bootstrap", fake)  # the verb calls lib.bootstrap at run time
    return calls


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    inv = tmp_path / "inv.yml"
    inv.write_text("all: {}\n")
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    return ["bootstrap", "-i", str(inv), "--profile", "roce", "--model", str(spec), *extra]


def test_bootstrap_reports_the_prediction_and_passes_above_the_threshold(
    tmp_path: Path, accepted: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*_argv(tmp_path, "--nodes", "64", "--min-mfu", "0.2"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"]["passed"] and doc["job"]["nodes"] == 64 and doc["job"]["option"] == "roce"


def test_bootstrap_fails_below_the_threshold_with_the_reason(
    tmp_path: Path, accepted: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(tmp_path, "--nodes", "64", "--min-mfu", "0.9")) == ExitStatus.CHECK_FAILED
    err = capsys.readouterr().err
    assert "the rack was accepted, but predicted MFU at N=64 on roce" in err and "below --min-mfu 90%" in err


def test_bad_gate_input_is_refused_before_the_bootstrap_runs(tmp_path: Path, accepted: list[str]) -> None:
    assert main(_argv(tmp_path, "--nodes", "3")) == ExitStatus.CONFIG  # 24 GPUs, 32 per replica
    inv = tmp_path / "inv.yml"
    assert main(["bootstrap", "-i", str(inv), "--profile", "roce", "--min-mfu", "0.4"]) == ExitStatus.USAGE
    assert accepted == []
