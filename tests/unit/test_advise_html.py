"""The advice as HTML: self-contained (no scripts, no external resources), two inline SVG charts
against N with one line per fabric option, the table and the assumptions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabtune.advise.html import line_chart, render_advice
from fabtune.cli import main
from tests.unit.test_advise_cli import SPEC, tune_run


def test_line_chart_draws_one_polyline_per_series_on_a_log_axis() -> None:
    svg = line_chart({"roce": [(4, 40.0), (64, 30.0)], "ib-ndr": [(4, 40.0), (64, 38.0)]}, "MFU (%)", "t")
    assert svg.count("<polyline") == 2 and ">roce<" in svg and ">ib-ndr<" in svg
    xs = [float(x) for x in re.findall(r'<circle cx="([0-9.]+)"', svg)]
    assert xs[0] == 70.0 and xs[1] == pytest.approx(70 + (720 - 70 - 130))  # 4 left edge, 64 right edge
    assert line_chart({}, "x", "t") == ""


def test_cli_writes_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    run_id = tune_run(tmp_path / "home")
    spec = tmp_path / "job.yml"
    spec.write_text(SPEC)
    page = tmp_path / "advice.html"
    argv = ["advise", "--from", run_id, "--model", str(spec), "--nodes", "4,64,128", "--html", str(page)]
    assert main(argv) == 0
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    assert not re.search(r'(src|href)="https?://', html)
    assert html.count("<svg") == 2 and html.count("<polyline") == 4 + 7  # MFU: 4 options; split: 3 + 4
    assert "MFU against N" in html and "Step time split against N" in html
    assert "RoCE and InfiniBand give this job the same up to 32 nodes" in html
    assert "a leaf serves 32 nodes per rail" in html


def test_text_in_the_page_is_escaped() -> None:
    doc = {
        "rows": [], "reference_nodes": 4, "verdict": "<b>x</b>", "assumptions": ["a < b"],
        "job": {"name": "<job>"}, "measured": {"run_id": "r", "phase": "p", "nodes": 4, "kind": "roce",
                                              "all_reduce": 1.0},
    }
    html = render_advice(doc)
    assert "<job>" not in html and "&lt;job&gt;" in html and "&lt;b&gt;x&lt;/b&gt;" in html
