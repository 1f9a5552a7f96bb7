"""``fabtune bootstrap --model SPEC --nodes N --min-mfu F``: the accepted rack's predicted MFU for
the job at the target size, inside the run (journaled as the phase ``job gate``, in the reports);
below the threshold the bootstrap, its journaled run and its report fail with the reason (exit 7).
``fabtune tune --model SPEC --nodes N`` is checked the same way before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabtune import bootstrap as lib
from fabtune import report
from fabtune.advise.gate import gate
from fabtune.advise.job import parse_job
from fabtune.advise.measured import Measured
from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.inventory import InventoryInfo
from fabtune.journal import Journal
from tests.unit.test_advise_cli import SPEC
from tests.unit.test_report import HOSTS, fake_bootstrap_phases

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
def rack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The real ``fabtune bootstrap`` (library entry point, journal, reports) over a 4-host rack whose
    phases' host I/O is replaced (it is accepted at 91.6 GB/s busbw); returns $FABTUNE_HOME."""
    home = tmp_path / "home"
    monkeypatch.setenv("FABTUNE_HOME", str(home))
    fake_bootstrap_phases(monkeypatch, cable_fault=False)
    info = InventoryInfo(tmp_path / "inv.yml", "rack1", "roce", HOSTS, (), "mpirun", None)
    monkeypatch.setattr(lib, "read_inventory", lambda _path: info)
    monkeypatch.setattr(lib, "check_against_rack", lambda *_a: None)
    return home


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    inv = tmp_path / "inv.yml"
    inv.write_text("all: {}\n")
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    return ["bootstrap", "-i", str(inv), "--profile", "roce", "--model", str(spec), *extra]


def _only_run(home: Path) -> tuple[Any, list[Any]]:
    journal = Journal(home / "journal.sqlite")
    try:
        (run,) = journal.runs(10)
        return run, journal.steps(run.id)
    finally:
        journal.close()


def test_bootstrap_reports_the_prediction_and_passes_above_the_threshold(
    tmp_path: Path, rack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*_argv(tmp_path, "--nodes", "64", "--min-mfu", "0.2"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"]["passed"] and doc["job"]["nodes"] == 64 and doc["job"]["option"] == "roce"
    run, steps = _only_run(rack)
    assert run.state == "passed" and run.summary["phase"] == "done"
    written = json.loads(Path(run.summary["report"]).read_text())
    job = written["job"]
    assert job["passed"] is True and job["nodes"] == 64 and job["min_mfu"] == 0.2
    assert [p["state"] for p in job["predictions"]] == ["acceptance"]
    assert job["predictions"][0]["mfu"] == pytest.approx(doc["job"]["step"]["mfu"])
    assert written["status"] == "pass" and [s.name for s in steps][-1] == "job gate"


def test_bootstrap_fails_below_the_threshold_with_the_reason(
    tmp_path: Path, rack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(tmp_path, "--nodes", "64", "--min-mfu", "0.9")) == ExitStatus.CHECK_FAILED
    out, err = capsys.readouterr()
    assert "the rack was accepted, but predicted MFU at N=64 on roce" in err and "below --min-mfu 90%" in err
    assert "bootstrap failed (the rack was accepted, but the job's predicted MFU is below --min-mfu)\n" in out
    run, steps = _only_run(rack)
    assert run.state == "failed" and run.summary["phase"] == "job gate"  # the journal agrees with exit 7
    gate_step = steps[-1]
    assert (gate_step.kind, gate_step.name, gate_step.state) == ("phase", "job gate", "failed")
    assert gate_step.payload["job"]["name"] == "l70" and gate_step.payload["job"]["tp"] == 8
    assert gate_step.payload["nodes"] == 64 and gate_step.payload["min_mfu"] == 0.9
    found = gate_step.payload["predictions"]["acceptance"]
    assert found["passed"] is False and found["mfu"] < 0.9 and found["option"] == "roce"
    doc = json.loads(Path(run.summary["report"]).read_text())
    assert doc["status"] == "fail" and doc["bootstrap"]["phase"] == "job gate"
    why = "rack accepted, but the job gate failed: job l70: predicted MFU at N=64 "
    assert doc["headline"].startswith(why)
    assert doc["job"]["passed"] is False
    assert any(c["check"] == "job_mfu" and c["verdict"] == "fail" for c in doc["checks"])
    journal = Journal(rack / "journal.sqlite")
    try:
        assert report.build(journal, run.id) == doc  # regenerated from the journal alone
    finally:
        journal.close()


def test_bad_gate_input_is_refused_before_the_bootstrap_runs(tmp_path: Path, rack: Path) -> None:
    assert main(_argv(tmp_path, "--nodes", "3")) == ExitStatus.CONFIG  # 24 GPUs, 32 per replica
    inv = tmp_path / "inv.yml"
    assert main(["bootstrap", "-i", str(inv), "--profile", "roce", "--min-mfu", "0.4"]) == ExitStatus.USAGE
    journal = Journal(rack / "journal.sqlite")
    try:
        assert journal.runs(10) == []  # nothing ran
    finally:
        journal.close()


def _cli_rack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A 4-host RoCE inventory and the job spec, for the verbs' option checks (FABTUNE_HOME set)."""
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    inv = tmp_path / "rack.yml"
    inv.write_text("roce:\n  hosts:\n" + "".join(f"    {h}: {{ansible_host: 10.197.0.{i}}}\n"
                                                   for i, h in enumerate(HOSTS, 1)))
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    return inv, spec


def test_tune_job_is_checked_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    inv, spec = _cli_rack(tmp_path, monkeypatch)
    assert main(["tune", "-i", str(inv), "--model", str(spec), "--nodes", "3"]) == ExitStatus.CONFIG
    assert "tp 8 x pp 4 = 32 GPUs" in capsys.readouterr().err  # the arithmetic
    assert main(["tune", "-i", str(inv), "--nodes", "64"]) == ExitStatus.USAGE
    assert "--nodes needs --model" in capsys.readouterr().err
    solo = tmp_path / "solo.yml"
    solo.write_text("roce:\n  hosts:\n    h01: {ansible_host: 10.197.0.1}\n")
    assert main(["tune", "-i", str(solo), "--model", str(spec)]) == ExitStatus.CONFIG
    assert "a rack of 1 node measures no fabric bandwidth" in capsys.readouterr().err
    journal = Journal(tmp_path / "home" / "journal.sqlite")
    try:
        assert journal.runs(10) == []
    finally:
        journal.close()


def test_resume_job_is_checked_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``fabtune resume RUN --model --nodes`` checks the job against the run's rack before it claims
    the run: a job that cannot fill N is refused with the arithmetic, and the run is left as it was."""
    inv, spec = _cli_rack(tmp_path, monkeypatch)
    journal = Journal(tmp_path / "home" / "journal.sqlite")
    try:
        run_id = journal.open_run("tune", "roce", str(inv), None)
        journal.close_run(run_id, "interrupted", {"error": "interrupted"})
        before = (journal.run(run_id), journal.steps(run_id))
        assert main(["resume", run_id, "--model", str(spec), "--nodes", "3"]) == ExitStatus.CONFIG
        assert "tp 8 x pp 4 = 32 GPUs" in capsys.readouterr().err  # the arithmetic
        assert main(["resume", run_id, "--nodes", "64"]) == ExitStatus.USAGE
        assert "--nodes needs --model" in capsys.readouterr().err
        assert (journal.run(run_id), journal.steps(run_id)) == before
    finally:
        journal.close()
