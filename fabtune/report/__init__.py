"""Run reports: a versioned JSON document (``schemas/report-v1.schema.json``), built from the journal
alone, rendered as a self-contained HTML page and a short Markdown summary.

``write_all(journal, run_id)`` writes ``report.json``, ``report.html`` and ``report.md`` into
``$FABTUNE_HOME/runs/<run>/``; the tune, bootstrap and drift runs call it when they end and
``fabtune report RUN`` renders the same from the journal at any later time.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from fabtune.journal import Journal
from fabtune.paths import check_name, private_dir, under_home, write_private
from fabtune.report.build import SCHEMA_ID, SCHEMA_VERSION, build
from fabtune.report.html import render_html
from fabtune.report.markdown import render_markdown

SCHEMA_FILE = Path(__file__).parent / "schemas" / "report-v1.schema.json"
FORMATS = ("json", "html", "md")

__all__ = [
    "FORMATS",
    "SCHEMA_FILE",
    "SCHEMA_ID",
    "SCHEMA_VERSION",
    "build",
    "dumps",
    "render",
    "render_html",
    "render_markdown",
    "report_dir",
    "schema",
    "validate",
    "write_all",
    "write_quietly",
]


@cache
def schema() -> dict[str, Any]:
    """The report JSON Schema (draft 2020-12)."""
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return loaded


def validate(doc: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``doc`` is a valid report."""
    jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker()).validate(dict(doc))


def report_dir(run_id: str) -> Path:
    """``$FABTUNE_HOME/runs/<run>/`` (the run id checked as a file name)."""
    return under_home("runs", check_name("run id", run_id))


def dumps(doc: Mapping[str, Any]) -> str:
    """The report's canonical JSON text (sorted keys, so a regenerated report is byte-identical)."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


def render(doc: Mapping[str, Any], fmt: str, html_path: str | None = None) -> str:
    """The document in ``fmt`` (json, html or md)."""
    if fmt == "json":
        return dumps(doc)
    if fmt == "html":
        return render_html(doc)
    if fmt == "md":
        return render_markdown(doc, html_path)
    raise ValueError(f"unknown report format {fmt!r} (known: {', '.join(FORMATS)})")


def write_all(journal: Journal, run_id: str, folder: Path | None = None) -> dict[str, Path]:
    """Build the report of ``run_id`` from the journal, validate it, write JSON, HTML and Markdown.

    Returns:
        Format to the path written.
    """
    doc = build(journal, run_id)
    validate(doc)
    folder = private_dir(folder or report_dir(run_id))
    paths = {fmt: folder / f"report.{fmt}" for fmt in FORMATS}
    for fmt, path in paths.items():
        write_private(path, render(doc, fmt, str(paths["html"])))
    return paths


def write_quietly(journal: Journal, run_id: str, folder: Path | None = None) -> dict[str, Path] | None:
    """``write_all``, but a report that cannot be written is a warning on stderr, never a failed run."""
    try:
        return write_all(journal, run_id, folder)
    except Exception as err:
        sys.stderr.write(
            f"fabtune: could not write the report of run {run_id}: {type(err).__name__}: {err}\n"
        )
        return None
