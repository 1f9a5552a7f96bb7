"""``fabtune demo``: a small misconfigured rack, tuned, with the report to show for it."""

from __future__ import annotations

from pathlib import Path

import click

from fabtune.commands import _console
from fabtune.commands._common import ResultOutput, result_output
from fabtune.commands._progress import Progress
from fabtune.testbed import build
from fabtune.testbed.oracle import testbed_oracle
from fabtune.testbed.spec import load_spec

DEMO_SPEC = Path(__file__).resolve().parent / "specs" / "demo.yml"


@click.command("demo")
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(path_type=Path),
    default=DEMO_SPEC,
    show_default=True,
    help="The rack to build.",
)
@click.option(
    "--keep/--down", default=True, show_default=True, help="Keep the rack afterwards (to look around)."
)
@click.option(
    "--profile",
    type=click.Path(path_type=Path),
    help="Tuning options for the demo's run (a profile with a fabtune_tune section), as for tune.",
)
@result_output()
def demo(spec_file: Path, keep: bool, profile: Path | None, output: ResultOutput) -> None:
    """Build a small misconfigured RoCE rack, tune it, and say where the report is (the run's
    result as JSON with --json / -o FILE, as fabtune tune prints it)."""
    console = _console.err()
    # the tuning loop loads when the demo runs, not when the verb list does (fabtune --help)
    from fabtune.commands.tune import print_result
    from fabtune.profile import load_profile
    from fabtune.tune import run as tune_run

    loaded = None if profile is None else load_profile(profile, need="fabtune_tune")
    spec = load_spec(spec_file, {})
    with console.status(f"building testbed {spec.name!r} ({len(spec.hosts)} hosts)"):
        tb_dir = build.up(spec)
    inventory = tb_dir / "inventory.yml"
    console.print(f"testbed {spec.name!r} is up: {len(spec.hosts)} hosts; inventory {inventory}",
                  soft_wrap=True, highlight=False)
    try:
        result, report = tune_run.tune(
            inventory, loaded.tune if loaded else None, Progress(), oracle=testbed_oracle, profile=loaded
        )
        print_result(result, report, output)
    finally:
        if not keep:
            build.down(spec.name)
    if keep:
        console.print(
            f"the rack stays up: 'fabtune testbed ssh --name {spec.name} h01', "
            f"'fabtune testbed down --name {spec.name}'"
        )
