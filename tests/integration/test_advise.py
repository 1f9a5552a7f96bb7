"""``fabtune advise -i INV`` on a 2-host RoCE testbed: the rack measured now (facts, all_reduce and
alltoall through the tune baseline's path), predictions at several N for every fabric option, the
HTML page; nothing journaled. Then ``fabtune bootstrap --model --min-mfu`` on the same rack: the job
gate runs inside the run and, failed, fails the journaled run and its report (exit 7)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.testbed import layout
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed
from tests.integration.test_bootstrap import PROFILE

pytestmark = pytest.mark.testbed

SPEC = """\
name: l8
layers: 32
hidden: 4096
vocab: 128256
seq_len: 4096
global_batch: 256
tp: 2
peak_tflops: 989
gpus_per_node: 2
"""


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed(
        {"name": "advit", "fabric": "roce", "hosts": 2, "subnet_base": "10.189", "seed": 15,
         "nics_per_host": 2, "gpus_per_host": 2}
    )


def test_advise_measures_the_rack_now_and_predicts_both_fabrics(
    rack: TestbedSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = layout.testbed_dir(rack.name) / "inventory.yml"
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    page = tmp_path / "advice.html"
    argv = ["advise", "-i", str(inventory), "--model", str(spec), "--nodes", "2,32,64", "--html", str(page),
            "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    measured = doc["measured"]
    assert measured["phase"] == "probe" and measured["nodes"] == 2 and measured["kind"] == "roce"
    assert measured["all_reduce"] > 0 and measured["alltoall"] > 0 and measured["nic_gbytes"]
    rows = {(r["nodes"], r["option"]): r for r in doc["rows"]}
    assert len(rows) == 12
    assert rows[(32, "roce")]["per_gpu_gbytes"] == pytest.approx(rows[(2, "roce")]["per_gpu_gbytes"])
    assert rows[(64, "roce")]["per_gpu_gbytes"] < rows[(64, "ib-ndr")]["per_gpu_gbytes"]
    assert doc["assumptions"] and doc["verdict"].startswith("RoCE and InfiniBand give this job the same")
    assert page.read_text().count("<svg") == 2
    # a measurement, not a run (the journal is the worker's, shared with other files' racks)
    assert [r for r in Journal().runs(1000) if r.fabric == rack.name] == []


def test_bootstrap_job_gate_fails_the_run_and_its_report(
    rack: TestbedSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = layout.testbed_dir(rack.name) / "inventory.yml"
    spec, profile = tmp_path / "job.yml", tmp_path / "roce.yml"
    spec.write_text(SPEC)
    profile.write_text(PROFILE)
    argv = ["bootstrap", "-i", str(inventory), "--profile", str(profile), "--model", str(spec),
            "--nodes", "64", "--min-mfu", "0.99"]
    assert main(argv) == ExitStatus.CHECK_FAILED
    assert "the rack was accepted, but predicted MFU at N=64 on roce" in capsys.readouterr().err
    run = next(r for r in Journal().runs(1000) if r.fabric == rack.name and r.kind == "bootstrap")
    assert run.state == "failed" and run.summary["phase"] == "job gate"
    doc = json.loads(Path(run.summary["report"]).read_text())
    assert doc["status"] == "fail" and doc["headline"].startswith("rack accepted, but the job gate failed")
    (found,) = doc["job"]["predictions"]
    assert found["state"] == "acceptance" and 0 < found["mfu"] < 0.99 and found["per_gpu_gbytes"] > 0
    assert doc["bootstrap"]["busbw_line_rate_gbytes"] and doc["bootstrap"]["rule_of_thumb_gbytes"]
