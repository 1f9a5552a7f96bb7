"""Headless Chromium renders each run type's HTML report without console errors; the screenshots are
kept in tests/artifacts/ (report-<kind>.png) for a person to look at.

The reports come from journals written by the real code paths over a scripted 4-host RoCE rack
(see test_report.py): a tuning run with a rolled-back and a kept move, a bootstrap that blames a
bad cable on h03's second rail, a drift remediation.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fabtune import report
from fabtune.journal import Journal
from tests.unit.test_report import make

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
ERRORS = re.compile(
    r"Uncaught|CONSOLE\(\d+\)|console\.error|ERR_(?:NAME|CONNECTION|INTERNET)|Failed to load", re.IGNORECASE
)


def render(html: Path, name: str, tmp_path: Path) -> Path:
    """Render ``html`` in headless Chromium, assert no console or load errors, keep the screenshot."""
    assert CHROMIUM is not None
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    shot.unlink(missing_ok=True)
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium'}", f"--screenshot={shot}", "--window-size=1280,3600",
        "--enable-logging=stderr", "--v=0", html.as_uri(),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-2000:]
    assert shot.is_file() and shot.stat().st_size > 20_000, log[-2000:]
    errors = [line for line in log.splitlines() if ERRORS.search(line)]
    assert not errors, errors
    return shot


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
    html = report.write_all(journal, run_id)["html"]
    shot = render(html, f"report-{kind}.png", tmp_path)
    print(f"screenshot of the {kind} report: {shot}")
