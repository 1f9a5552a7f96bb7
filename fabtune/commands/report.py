"""``fabtune report RUN``: a run's report (JSON, HTML or Markdown), rebuilt from the journal alone."""

from __future__ import annotations

from pathlib import Path

import click

from fabtune import report as lib
from fabtune.commands import _console
from fabtune.commands._common import RUN_ID_ARGUMENT
from fabtune.errors import ConfigError
from fabtune.journal import Journal


@click.command("report")
@RUN_ID_ARGUMENT
@click.option(
    "--format",
    "fmt",
    type=click.Choice(lib.FORMATS),
    default="json",
    show_default=True,
    help="json: the versioned document (schema fabtune.report/1); html: self-contained page "
    "with plots; md: a short summary for tickets.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=None,
    help="Write here instead of standard output ('-': standard output).",
)
@click.option("--json", "as_json", is_flag=True, help="The JSON document (as --format json, the default).")
def report(run_id: str, fmt: str, output: Path | None, as_json: bool) -> None:
    """The report of RUN_ID (tune, bootstrap or drift), rebuilt from the run journal.

    Runs also write report.json, report.html and report.md into $FABTUNE_HOME/runs/RUN_ID/ when
    they end; this rebuilds the same documents at any later time. 'fabtune runs' lists the runs.
    """
    if as_json and fmt != "json":
        raise click.UsageError(f"--json and --format {fmt} exclude each other")
    journal = Journal()
    try:
        try:
            doc = lib.build(journal, run_id)
        except ValueError as err:
            raise ConfigError(f"run {run_id}", [str(err)]) from err
        lib.validate(doc)
        to_file = output is not None and str(output) != "-"
        html_path = str(output) if fmt == "html" and to_file else str(lib.report_dir(run_id) / "report.html")
        text = lib.render(doc, fmt, html_path)
    finally:
        journal.close()
    if output is None or str(output) == "-":
        click.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    _console.err().print(f"wrote {output}", markup=False, highlight=False)
