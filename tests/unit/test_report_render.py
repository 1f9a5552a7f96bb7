"""Headless Chromium renders each run type's HTML report without console errors, at a desktop and
a phone's width, with nothing sticking out of the page; the screenshots are kept in
tests/artifacts/ (report-<kind>.png, report-<kind>-narrow.png) for a person to look at.

The reports come from journals written by the real code paths over a scripted 4-host RoCE rack
(see test_report.py): a tuning run with a rolled-back and a kept move, a bootstrap that blames a
bad cable on h03's second rail, a drift remediation.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fabtune import report
from fabtune.journal import Journal
from tests.unit.test_report import make
from tests.unit.test_report_job import _gated_bootstrap

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
ERRORS = re.compile(
    r"Uncaught|CONSOLE\(\d+\)|console\.error|ERR_(?:NAME|CONNECTION|INTERNET)|Failed to load", re.IGNORECASE
)
WIDTHS = {"": 1280, "-narrow": 390}
# Added to the test's copy of a page only (the report itself has no script): after layout, how far
# the page is wider than the window, and which elements stick out past its right edge.
MEASURE = """<script>
addEventListener("load", () => {
  const w = document.documentElement.clientWidth, out = [];
  for (const el of document.body.querySelectorAll("*")) {
    let p = el.parentElement, clipped = false;
    for (; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible") { clipped = true; break; }
    }
    if (!clipped && el.getBoundingClientRect().right > w + 1) out.push(el.tagName + "." + el.className);
  }
  const pre = document.createElement("pre");
  pre.id = "measured";
  const over = document.documentElement.scrollWidth - w;
  pre.textContent = "overflow=" + over + " " + out.slice(0, 8).join(",");
  document.body.appendChild(pre);
});
</script>"""


def _chromium(*args: str, profile: Path) -> str:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-2000:]
    errors = [line for line in log.splitlines() if ERRORS.search(line)]
    assert not errors, errors
    return done.stdout


def render(html: Path, name: str, tmp_path: Path, width: int = 1280) -> str:
    """Render ``html`` in headless Chromium at ``width``: no console or load errors, nothing wider
    than the window outside a scrolling box; keep the screenshot. Returns the rendered DOM."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    shot.unlink(missing_ok=True)
    _chromium(f"--screenshot={shot}", f"--window-size={width},3600", html.as_uri(), profile=tmp_path / "c1")
    assert shot.is_file() and shot.stat().st_size > 20_000
    probe = tmp_path / f"probe-{width}.html"
    probe.write_text(html.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _chromium(
        "--dump-dom",
        "--virtual-time-budget=3000",
        f"--window-size={width},3600",
        probe.as_uri(),
        profile=tmp_path / "c2",
    )
    measured = re.search(r'<pre id="measured">overflow=(-?\d+) ?([^<]*)</pre>', dom)
    assert measured, dom[-500:]
    assert int(measured[1]) <= 0 and not measured[2], f"at {width} px: {measured[0]}"
    return dom


def figures(doc: dict[str, Any]) -> list[str]:
    """What the rendered page must show of the run's figures: charts by name, numbers as printed."""
    shown = ['aria-label="all_reduce busbw per step"' if doc["kind"] == "tune" else "<svg", "multiples"]
    if doc["kind"] == "tune":
        t = doc["tune"]
        shown += [
            f"{t['baseline_median']:.1f} \u2192 {t['final_median']:.1f}",
            'aria-label="busbw per GPU"',
            'aria-label="pair heatmap (baseline)"',
            'aria-label="pair heatmap (final)"',
            f"model's best reachable {doc['oracle']['best_busbw']:.1f}",
        ]
    elif doc["kind"] == "bootstrap":
        low = min(p["share"] for p in doc["pairs"]["results"] if not p["retest"])
        shown += ['aria-label="pair heatmap (matrix)"', f">{low * 100:.0f}%<"]
        shown.append('aria-label="per-GPU bandwidth"')
    else:
        shown += ["pairs before remediation", "pairs after remediation", 'aria-label="pair heatmap (after)"']
    return shown


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH: apt-get install chromium (packages/debian.txt)"
)
@pytest.mark.parametrize("kind", ["tune", "bootstrap", "drift"])
def test_headless_chromium_renders_the_report(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("FABTUNE_HOME", str(home))
    journal = Journal(home / "journal.sqlite")
    run_id = make(kind, journal, home, monkeypatch)
    written = report.write_all(journal, run_id)
    doc = json.loads(written["json"].read_text())
    for suffix, width in WIDTHS.items():
        dom = render(written["html"], f"report-{kind}{suffix}.png", tmp_path, width)
        missing = [f for f in figures(doc) if f not in dom]
        assert not missing, missing
        print(f"screenshot of the {kind} report at {width} px: {ARTIFACTS}/report-{kind}{suffix}.png")


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH: apt-get install chromium (packages/debian.txt)"
)
def test_headless_chromium_renders_a_bootstrap_stopped_by_the_job_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job section (``--model``, a failed ``--min-mfu`` gate) as a person sees it: its heading,
    the prediction's MFU and the threshold, at both widths, nothing sticking out."""
    home = tmp_path / "home"
    monkeypatch.setenv("FABTUNE_HOME", str(home))
    journal = Journal(home / "journal.sqlite")
    written = report.write_all(journal, _gated_bootstrap(journal, 0.95))
    (found,) = json.loads(written["json"].read_text())["job"]["predictions"]
    for suffix, width in WIDTHS.items():
        dom = render(written["html"], f"report-job-gate{suffix}.png", tmp_path, width)
        shown = ['<h2 id="job">Training job at 16 nodes</h2>', f"{found['mfu']:.1%}", "95%"]
        assert not [s for s in shown if s not in dom], dom.split('<h2 id="job">', 1)[-1][:800]
