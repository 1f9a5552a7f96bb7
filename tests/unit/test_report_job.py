"""The job section of the reports (``--model``, issue 15's gate before scaling): a bootstrap's job
gate and a tune run's prediction for its baseline and final state, built from the journal alone and
rendered in JSON, Markdown and HTML.

The first journals are made by hand (the steps as ``bootstrap.job_gate`` and ``tune.run.predict_job``
journal them); the last is a tuning run through the real loop over test_report's scripted rack.
"""

from __future__ import annotations

import html as htmllib
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from fabtune import bootstrap as b
from fabtune import linkrate, report
from fabtune.advise.gate import Goal, gate
from fabtune.advise.job import parse_job
from fabtune.advise.measured import Measured
from fabtune.commands._common import ResultOutput
from fabtune.commands.tune import _print_job
from fabtune.inventory import InventoryInfo
from fabtune.journal import Journal
from fabtune.lifecycle import journaled_run
from fabtune.perf.fabric import HostView, Rail
from fabtune.tune import run as tune_run
from fabtune.tune.loop import TuneOptions, Tuner
from tests.unit.test_report import HOSTS
from tests.unit.test_report_figures import FigureRack

# A data-parallel job whose gradient reduction waits on the fabric: its MFU moves with the busbw.
JOB = {"name": "dp<8b>", "params": 8e9, "layers": 32, "hidden": 4096, "seq_len": 4096,
       "global_batch": 256, "micro_batch": 2, "peak_tflops": 989}


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Journal:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    return Journal(tmp_path / "home" / "journal.sqlite")


def _record(busbw: float, min_mfu: float | None) -> dict[str, Any]:
    job = parse_job(JOB, "job")
    return gate(job, Measured("r", "roce", 4, "acceptance", busbw, None, None, 1), 16, min_mfu).record()


def _gated_bootstrap(journal: Journal, min_mfu: float) -> str:
    """A bootstrap journal as ``fabtune bootstrap --model --nodes 16 --min-mfu`` leaves it."""
    run_id = journal.open_run("bootstrap", "rack1", "/inv.yml", "roce.yml")
    for name, payload in (("preflight", {"hosts": list(HOSTS)}), ("apply", {"changes": {}}),
                          ("acceptance", {"busbw_gbytes": 80.0, "busbw_reference_gbytes": 98.2})):
        journal.finish_step(run_id, journal.step(run_id, "phase", name, payload), "done")
    found = _record(80.0, min_mfu)
    inputs = {"job": JOB, "nodes": 16, "min_mfu": min_mfu}
    seq = journal.step(run_id, "phase", "job gate", inputs)
    check = {"check": "job_mfu", "host": "*", "verdict": "pass" if found["passed"] else "fail",
             "summary": found["line"]}
    journal.finish_step(run_id, seq, "done" if found["passed"] else "failed",
                        {**inputs, "predictions": {"acceptance": found}, "checks": [check]})
    state, phase = ("passed", "done") if found["passed"] else ("failed", "job gate")
    journal.close_run(run_id, state, {"phase": phase, "failed_hosts": []})
    return run_id


def test_a_failed_job_gate_fails_the_bootstrap_report_with_the_reason(journal: Journal) -> None:
    doc = report.build(journal, _gated_bootstrap(journal, 0.95))
    report.validate(doc)
    job = doc["job"]
    assert doc["status"] == "fail" and doc["bootstrap"]["phase"] == "job gate" and job["passed"] is False
    (found,) = job["predictions"]
    assert found["state"] == "acceptance" and found["nodes"] == 16 and found["per_gpu_gbytes"] == 10.0
    assert job["summary"] == f"job dp<8b>: {found['line']}" and "below --min-mfu 95%" in found["line"]
    assert doc["headline"] == f"rack accepted, but the job gate failed: {job['summary']}"
    assert job["spec"]["global_batch"] == 256 and job["min_mfu"] == 0.95
    assert f"- {job['summary']}" in report.render_markdown(doc)
    page = report.render_html(doc)
    assert '<h2 id="job">Training job at 16 nodes</h2>' in page and "dp<8b>" not in page  # escaped
    part = htmllib.unescape(page.split('<h2 id="job">', 1)[1].split("<h2", 1)[0])
    assert job["summary"] in part and f"{found['mfu']:.1%}" in part and "Threshold (--min-mfu): 95%" in part


def test_a_passed_job_gate_keeps_the_rack_accepted(journal: Journal) -> None:
    doc = report.build(journal, _gated_bootstrap(journal, 0.05))
    report.validate(doc)
    assert doc["status"] == "pass" and doc["job"]["passed"] is True
    assert doc["headline"].startswith("rack accepted: 4 hosts")


def test_a_run_without_a_job_has_no_job_section(journal: Journal) -> None:
    run_id = journal.open_run("bootstrap", "rack1", "/inv.yml", "roce.yml")
    journal.close_run(run_id, "failed", {"phase": "preflight"})
    doc = report.build(journal, run_id)
    report.validate(doc)
    assert doc["job"] is None and 'id="job"' not in report.render_html(doc)


def test_a_tune_report_shows_the_predicted_mfu_baseline_to_final(journal: Journal) -> None:
    run_id = journal.open_run("tune", "rack1", "/inv.yml", None)
    predictions = {"baseline": _record(40.0, None), "final": _record(80.0, None)}
    journal.step(run_id, "job", "job prediction",
                 {"job": JOB, "nodes": 16, "min_mfu": None, "predictions": predictions}, state="done")
    journal.close_run(run_id, "done", {})
    doc = report.build(journal, run_id)
    report.validate(doc)
    base, final = (predictions[k]["step"]["mfu"] for k in ("baseline", "final"))
    assert base < final  # the DP reduction is exposed: more busbw, more MFU
    want = f"job dp<8b>: predicted MFU at N=16 on roce: baseline {base:.1%} -> final {final:.1%}"
    assert doc["job"]["summary"] == want and doc["job"]["passed"] is None
    assert [p["state"] for p in doc["job"]["predictions"]] == ["baseline", "final"]
    assert f"- {want}" in report.render_markdown(doc)
    assert want in htmllib.unescape(report.render_html(doc))


def test_a_tuning_run_journals_the_job_at_its_baseline_and_final_busbw(
    journal: Journal, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    info = InventoryInfo(home / "inventory.yml", "rack1", "roce", HOSTS, (), "mpirun", None)
    goal = Goal(parse_job(JOB, "job"), 16)
    with journaled_run("tune", "rack1", info.path, journal=journal) as run:
        options = TuneOptions(skip_groups=("gdr",))
        result = Tuner(FigureRack(), journal, run.run_id, "roce", options=options).run()
        tune_run.predict_job(run, info, goal)
        tune_run.finish(run, result, home / "desired" / "rack1.yml")
    written = report.report_dir(run.run_id) / "report.json"
    doc = report.build(Journal(journal.path), run.run_id)
    assert written.read_text() == report.dumps(doc)  # the written report is the journal's
    base, final = doc["job"]["predictions"]
    assert (base["state"], final["state"]) == ("baseline", "final")
    assert base["per_gpu_gbytes"] == pytest.approx(statistics.median(result.baseline) / 8)
    assert final["per_gpu_gbytes"] == pytest.approx(statistics.median(result.final) / 8)
    assert final["mfu"] > base["mfu"]  # the tuned rack's busbw is higher
    assert f"baseline {base['mfu']:.1%} -> final {final['mfu']:.1%}" in doc["job"]["summary"]


def test_the_acceptance_journals_the_line_rate_beside_the_reference() -> None:
    slow = Rail("mlx5_1", "eth3", "10.0.0.2", 4200, 200.0, "Ethernet", 3)
    fast = Rail("mlx5_0", "eth2", "10.0.0.1", 4200, 400.0, "Ethernet", 3)
    views = {"h01": HostView("h01", (fast, fast), {}), "h02": HostView("h02", (fast, slow), {})}
    rep = b.BootstrapReport("rack1", "roce.yml", 0.9, 0.8)
    ceiling, reference = b._yardsticks(rep, views, 2)
    assert ceiling == pytest.approx(linkrate.ceiling_gbps("Ethernet", 200.0, 4200))
    assert rep.busbw_reference_gbytes == reference == pytest.approx(2 * ceiling / 8)
    assert rep.busbw_line_rate_gbytes == 2 * 200.0 / 8  # R x the slowest rail's rate / 8


def test_the_bootstrap_report_sets_the_busbw_against_the_line_rate(journal: Journal) -> None:
    run_id = journal.open_run("bootstrap", "rack1", "/inv.yml", "roce.yml")
    acceptance = {"busbw_gbytes": 80.0, "busbw_reference_gbytes": 98.2, "busbw_line_rate_gbytes": 100.0,
                  "busbw_threshold": 0.8}
    journal.step(run_id, "phase", "acceptance", acceptance, state="done")
    journal.close_run(run_id, "passed", {"phase": "done"})
    doc = report.build(journal, run_id)
    report.validate(doc)
    boot = doc["bootstrap"]
    assert boot["busbw_line_rate_gbytes"] == 100.0
    assert boot["rule_of_thumb_gbytes"] == pytest.approx(0.9 * 98.2)
    page = report.render_html(doc)
    gpus = htmllib.unescape(page.split('<h2 id="gpus">', 1)[1].split("<h2", 1)[0])
    assert "line rate R x rate / 8" in gpus and "rule of thumb 90%" in gpus and "threshold 80%" in gpus
    assert "80.0 GB/s = 80% of the line rate 100.0 GB/s, 81% of the goodput reference" in gpus
    assert "; line rate 100.0" in report.render_markdown(doc)


def test_tune_prints_the_job_line_of_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = tmp_path / "report.json"
    line = "job l70: predicted MFU at N=64 on roce: baseline 30.0% -> final 33.0%"
    written.write_text(json.dumps({"job": {"summary": line}}))
    _print_job(written, ResultOutput())
    assert capsys.readouterr().out == line + "\n"
