"""Throughput from training logs (public samples in tests/fixtures/joblogs, source on line 1) and
the measured MFU beside the prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune.advise.job import parse_job
from fabtune.advise.joblog import JobLog, load_job_log, parse_job_log
from fabtune.cli import main
from fabtune.errors import ConfigError, ExitStatus
from tests.unit.test_advise_cli import SPEC, tune_run

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "joblogs"
JOB = parse_job(
    {"name": "j", "params": 10e9, "layers": 10, "hidden": 1000, "seq_len": 2048, "global_batch": 128,
     "peak_tflops": 1000},
    "x",
)


def test_every_fixture_names_its_public_source() -> None:
    logs = sorted(LOGS.glob("*.log"))
    assert len(logs) == 4
    for log in logs:
        assert log.read_text().splitlines()[0].startswith("# source: https://"), log.name


def test_megatron_elapsed_time_per_iteration() -> None:
    log = load_job_log(LOGS / "megatron__mixtral_8x7b_16xh100.log")
    # 5444.9, 5533.8, 5718.6 ms: the first is warm-up, the median of the rest
    assert log.format == "megatron" and log.steps == 3
    assert log.step_s == pytest.approx((5.5338 + 5.7186) / 2)


def test_torchtitan_tokens_per_second_per_gpu() -> None:
    log = load_job_log(LOGS / "torchtitan__moe_gate_fp32.log")
    assert (log.format, log.steps, log.tokens_per_s_per_gpu) == ("torchtitan", 4, 10049.0)


def test_deepspeed_current_samples_per_second() -> None:
    log = load_job_log(LOGS / "deepspeed__timer_samples_per_sec.log")
    assert log.format == "deepspeed" and log.steps == 4
    assert log.samples_per_s == pytest.approx(155.10475468488542)  # median of the last three Curr


def test_plain_step_and_seconds_lines() -> None:
    log = load_job_log(LOGS / "plain__maxtext_completed_step_seconds.log")
    assert (log.format, log.steps, log.step_s) == ("plain", 3, pytest.approx(2.165))
    ms = parse_job_log("step 1 loss 3.2 time 900ms\nstep 2 loss 3.1 time 1000 ms\nstep 3 time: 1100ms\n")
    assert ms is not None and ms.step_s == pytest.approx(1.05)


def test_nothing_recognisable_is_one_error_naming_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "train.log"
    empty.write_text("loss went down\n")
    with pytest.raises(ConfigError) as err:
        load_job_log(empty)
    assert err.value.source == f"job log {empty}"
    assert "no step time or throughput found" in err.value.problems[0]


def test_measured_mfu_from_each_kind_of_rate() -> None:
    fpt = 6 * 10e9 + 12 * 10 * 1000 * 2048
    assert JobLog("t", 1, tokens_per_s_per_gpu=1000).mfu(JOB, 64) == pytest.approx(fpt * 1000 / 1e15)
    assert JobLog("d", 1, samples_per_s=10).mfu(JOB, 64) == pytest.approx(fpt * 10 * 2048 / (64 * 1e15))
    assert JobLog("m", 1, step_s=2.0).mfu(JOB, 64) == pytest.approx(fpt * 128 * 2048 / (64 * 1e15 * 2.0))


def test_cli_job_log_alone_and_beside_the_prediction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    log = LOGS / "plain__maxtext_completed_step_seconds.log"
    assert main(["advise", "--job-log", str(log), "--model", str(spec), "--nodes", "4"]) == 0
    assert "job log (plain, 3 steps) at N=4: measured MFU" in capsys.readouterr().out
    run_id = tune_run(tmp_path / "home")
    argv = ["advise", "--from", run_id, "--job-log", str(log), "--model", str(spec), "--nodes", "4,64",
            "--log-nodes", "4", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job_log"]["format"] == "plain" and doc["job_log"]["predicted_option"] == "roce"
    assert 0 < doc["job_log"]["predicted_mfu"] < 1
    several = ["advise", "--job-log", str(log), "--model", str(spec), "--nodes", "4,64"]
    assert main(several) == ExitStatus.USAGE
    assert main(["advise", "--model", str(spec), "--nodes", "4"]) == ExitStatus.USAGE
