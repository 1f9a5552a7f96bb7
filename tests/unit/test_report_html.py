"""The HTML report's templates: journal strings come out escaped, and the wheel carries the templates.

The page is rendered from jinja2 templates (fabtune/report/templates) with autoescaping on; a
journal whose host name and move reasons hold markup (as a hand-edited or hostile journal could)
must render as text, never as markup, in the tables and in the SVG figures alike.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import jinja2
import pytest

from fabtune import report
from fabtune.journal import Journal
from fabtune.report import html
from tests.conftest import REPO
from tests.unit.test_report import tune_run_journal

EVIL = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _reasons(value: Any) -> Any:
    """``value`` with every ``reason`` prefixed by EVIL."""
    if isinstance(value, dict):
        return {k: EVIL + v if k == "reason" else _reasons(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_reasons(v) for v in value]
    return value


def _poison(path: Path, run_id: str) -> None:
    """Rename host h03 to EVIL and prefix every reason with it, in the run's journal rows."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT seq, payload FROM steps WHERE run_id = ?", (run_id,)).fetchall()
        for seq, payload in rows:
            new = json.dumps(_reasons(json.loads(payload.replace("h03", EVIL))))
            db.execute("UPDATE steps SET payload = ? WHERE run_id = ? AND seq = ?", (new, run_id, seq))
        db.execute("UPDATE snapshots SET host = replace(host, 'h03', ?), state = replace(state, 'h03', ?) "
                   "WHERE run_id = ?", (EVIL, EVIL, run_id))


def _section(page: str, anchor: str) -> str:
    return page.split(f'<h2 id="{anchor}">', 1)[1].split("<h2", 1)[0]


def test_markup_in_a_host_name_or_a_move_reason_is_escaped(home: Path) -> None:
    journal = Journal(home / "journal.sqlite")
    run_id, _ = tune_run_journal(journal, home)
    _poison(home / "journal.sqlite", run_id)
    doc = report.build(journal, run_id)
    assert EVIL in doc["hosts"] and all(d["reason"].startswith(EVIL) for d in doc["tune"]["decisions"])
    page = report.render_html(doc)
    assert "<script" not in page
    assert ESCAPED in page.split('<table class="meta">', 1)[1].split("</table>", 1)[0]  # the hosts row
    decisions = _section(page, "decisions")
    reasons = re.findall(r"<td>([^<]*)</td></tr>", decisions)  # the reason is each row's last cell
    assert reasons and all(r.startswith(ESCAPED) for r in reasons), reasons
    pairs = _section(page, "pairs")
    assert "<svg" in pairs and f">{ESCAPED}</text>" in pairs  # the heatmap's axis label


def test_the_environment_escapes_and_refuses_undefined_names() -> None:
    assert html.ENV.from_string("{{ x }}").render(x=EVIL) == ESCAPED
    with pytest.raises(jinja2.UndefinedError):
        html.ENV.get_template("report.html.j2").render()


def test_the_wheel_carries_the_report_templates() -> None:
    """pyproject.toml's package data covers every template the loader can name."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = REPO / "fabtune"
    carried = {p.relative_to(package).as_posix() for g in globs["fabtune"] for p in package.glob(g)}
    templates = html.ENV.list_templates()
    assert {"report.html.j2", "sections.html.j2", "macros.html.j2", "report.css"} <= set(templates)
    assert {f"report/templates/{t}" for t in templates} <= carried
