"""``fabtune advise --from RUN``: a saved run's measured busbw, the table, the JSON, the errors and
their exit codes (only through cli.main)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabtune.advise.measured import from_run
from fabtune.cli import main
from fabtune.errors import ConfigError, ExitStatus
from fabtune.journal import Journal

SPEC = """\
name: l70
layers: 80
hidden: 8192
vocab: 128256
seq_len: 8192
global_batch: 1024
tp: 8
pp: 4
peak_tflops: 989
"""
PORTS = [{"dev": f"mlx5_{i}", "netdev": f"eth{i}", "rate": "400 Gb/sec (4X NDR)"} for i in range(8)]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "job.yml"
    path.write_text(SPEC)
    return path


def tune_run(home: Path, hosts: int = 4, final: bool = True, qps: str | None = None) -> str:
    journal = Journal(home / "journal.sqlite")
    run_id = journal.open_run("tune", "rack1", "/inv.yml", None)
    names = [f"h{i}" for i in range(hosts)]
    seq = journal.step(run_id, "phase", "facts", {})
    journal.finish_step(
        run_id, seq, "done", {"hosts": names, "fabric_type": "roce", "ports": dict.fromkeys(names, PORTS)}
    )
    seq = journal.step(run_id, "phase", "baseline", {})
    journal.finish_step(run_id, seq, "done", {"all_reduce": [200.0, 210.0, 190.0], "alltoall": [30.0]})
    if final:
        nccl = {"nccl": {"NCCL_IB_QPS_PER_CONNECTION": qps}} if qps else {}
        state: dict[str, Any] = dict.fromkeys(names, nccl)
        seq = journal.step(run_id, "phase", "final", {})
        journal.finish_step(
            run_id,
            seq,
            "done",
            {"all_reduce": [360.0, 350.0, 370.0], "alltoall": [40.0, 44.0], "state": state},
        )
    journal.close_run(run_id, "done", {})
    journal.close()
    return run_id


def test_measured_reads_the_final_batch_the_line_rate_and_the_qps(home: Path) -> None:
    run_id = tune_run(home, qps="4")
    m = from_run(Journal(home / "journal.sqlite"), run_id)
    assert (m.kind, m.nodes, m.phase, m.all_reduce, m.alltoall, m.qps) == ("roce", 4, "final", 360.0, 42.0, 4)
    assert m.nic_gbytes == 400.0 and m.per_gpu(8) == 45.0


def test_measured_falls_back_to_the_baseline(home: Path) -> None:
    m = from_run(Journal(home / "journal.sqlite"), tune_run(home, final=False))
    assert (m.phase, m.all_reduce, m.alltoall, m.qps) == ("baseline", 200.0, 30.0, 1)


def test_a_one_host_run_or_another_kind_is_refused(home: Path) -> None:
    journal = Journal(home / "journal.sqlite")
    with pytest.raises(ConfigError) as err:
        from_run(journal, tune_run(home, hosts=1))
    assert "needs a measurement across 2+ nodes" in err.value.problems[0]
    other = journal.open_run("drift", "rack1", "/inv.yml", None)
    with pytest.raises(ConfigError) as err:
        from_run(journal, other)
    assert err.value.problems == ["--from: a drift run measures no bandwidth (give a tune or bootstrap run)"]


def test_advise_prints_the_table_verdict_and_assumptions(
    home: Path, spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = tune_run(home)
    assert main(["advise", "--from", run_id, "--model", str(spec), "--nodes", "4,32,128"]) == 0
    out = capsys.readouterr().out
    assert "l70: predicted step at N nodes" in out
    for option in ("roce", "roce+qp", "roce+ar", "ib-ndr"):
        assert option in out
    assert "verdict: RoCE and InfiniBand give this job the same up to 32 nodes" in out
    assert "assumptions:" in out and "a leaf serves 32 nodes per rail" in out


def test_advise_json_holds_every_row_and_the_answer(
    home: Path, spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = tune_run(home)
    argv = ["advise", "--from", run_id[:12], "--model", str(spec), "--nodes", "4,64", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 8 and doc["reference_nodes"] == 4
    rows = {(r["nodes"], r["option"]): r for r in doc["rows"]}
    assert rows[(4, "roce")]["per_gpu_gbytes"] == 45.0 and rows[(4, "roce")]["scaling"] == 1.0
    assert rows[(64, "roce")]["per_gpu_gbytes"] < rows[(64, "ib-ndr")]["per_gpu_gbytes"]
    assert rows[(64, "roce")]["mfu"] <= rows[(64, "ib-ndr")]["mfu"]
    assert doc["measured"]["run_id"] == run_id and doc["assumptions"]


def test_a_job_that_does_not_fit_exits_config_with_the_arithmetic(
    home: Path, spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = tune_run(home)
    assert main(["advise", "--from", run_id, "--model", str(spec), "--nodes", "4,6"]) == ExitStatus.CONFIG
    err = capsys.readouterr().err
    assert "N=6: 6 nodes x 8 GPUs = 48 GPUs is not a multiple of tp 8 x pp 4 = 32 GPUs" in err


def test_a_bad_spec_exits_config_naming_the_field(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = tune_run(home)
    bad = tmp_path / "bad.yml"
    bad.write_text(SPEC.replace("tp: 8", "tp: eight"))
    assert main(["advise", "--from", run_id, "--model", str(bad), "--nodes", "4"]) == ExitStatus.CONFIG
    assert "tp: 'eight' is not a whole number >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("nodes", ["0", "4,x", "", "4,,8"])
def test_bad_node_counts_are_a_usage_error(home: Path, spec: Path, nodes: str) -> None:
    run_id = tune_run(home)
    assert main(["advise", "--from", run_id, "--model", str(spec), "--nodes", nodes]) == ExitStatus.USAGE


def test_an_unknown_run_is_refused(home: Path, spec: Path) -> None:
    tune_run(home)
    assert main(["advise", "--from", "19990101-000000-abcdef", "--model", str(spec), "--nodes", "4"]) != 0


def test_failed_checks_of_the_run_are_printed_beside_the_answer(
    home: Path, spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = Journal(home / "journal.sqlite")
    run_id = journal.open_run("tune", "rack1", "/inv.yml", None)
    seq = journal.step(run_id, "phase", "facts", {})
    journal.finish_step(run_id, seq, "done", {"hosts": ["a", "b"], "fabric_type": "roce"})
    seq = journal.step(run_id, "phase", "baseline", {})
    check = {"check": "transport", "host": "a", "verdict": "fail", "summary": "NCCL fell back to NET/Socket"}
    ok = {"check": "affinity", "host": "a", "verdict": "pass", "summary": "PIX"}
    journal.finish_step(run_id, seq, "done", {"all_reduce": [20.0], "checks": [check, ok]})
    journal.close()
    m = from_run(Journal(home / "journal.sqlite"), run_id)
    assert m.warnings == ("fail: transport on a: NCCL fell back to NET/Socket",)
    assert main(["advise", "--from", run_id, "--model", str(spec), "--nodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "the measurement's checks did not all pass (fail: transport on a: NCCL fell back" in out
