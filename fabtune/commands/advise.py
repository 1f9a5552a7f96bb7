"""``fabtune advise``: what a training job gets at N nodes on this fabric, and RoCE or InfiniBand."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from fabtune.advise import fabric
from fabtune.advise.advise import Advice
from fabtune.advise.advise import advise as build_advice
from fabtune.advise.job import load_job
from fabtune.advise.measured import from_run
from fabtune.commands._common import ResultOutput, absolute_path, require_file, result_output, run_id_of
from fabtune.journal import Journal


def parse_nodes(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, ...]:
    """Click callback: ``--nodes 4,32,128`` as node counts (each a whole number >= 1)."""
    out = []
    for part in value.split(","):
        text = part.strip()
        if not text.isdigit() or int(text) < 1 or int(text) > 1 << 20:
            raise click.BadParameter(f"{text!r} is not a node count (a whole number 1..{1 << 20})")
        out.append(int(text))
    return tuple(out)


def table(advice: Advice) -> Table:
    """One row per N and fabric option."""
    out = Table(
        "N", "GPUs", "fabric", "per-GPU GB/s", "step s", "compute s", "bubble s", "exposed comm s",
        "fabric share", "MFU", "tokens/s", f"scaling vs N={advice.reference_nodes}",
        title=f"{advice.job.name}: predicted step at N nodes",
    )
    for r in advice.rows:
        s = r.step
        exposed = s.dp_exposed_s + s.tp_s + s.pp_s + s.ep_s
        out.add_row(*(Text(c) for c in (
            str(s.nodes), str(s.gpus), r.option, f"{r.per_gpu:.1f}", f"{s.step_s:.3f}", f"{s.compute_s:.3f}",
            f"{s.bubble_s:.3f}", f"{exposed:.3f}", f"{s.fabric_share:.1%}", f"{s.mfu:.1%}",
            f"{s.tokens_per_s:,.0f}", f"{r.scaling:.1%}",
        )))
    return out


def show(advice: Advice, output: ResultOutput) -> None:
    """The table, the verdict and the assumptions (or the JSON)."""
    console = output.console()
    console.print(table(advice))
    bound = ", ".join(f"{k} {'N=' + str(v) if v else 'never'}" for k, v in advice.fabric_bound.items())
    console.print(Text(f"fabric costs >= 10% of a step from: {bound}"))
    console.print(Text(f"verdict: {advice.verdict}"))
    console.print(Text("assumptions:"))
    for line in advice.assumptions:
        console.print(Text(f"  - {line}"))
    output.write(advice.to_json())


@click.command("advise")
@click.option("--from", "run_id", required=True, callback=run_id_of,
              help="A saved tune or bootstrap run whose measured busbw the prediction starts from.")
@click.option("--model", "spec", required=True, type=click.Path(path_type=Path), callback=absolute_path,
              help="The job spec (YAML: docs/advisor.md).")
@click.option("--nodes", required=True, callback=parse_nodes, help="Cluster sizes to predict, e.g. 4,32,128.")
@click.option("--leaf-nodes", type=click.IntRange(1, 4096), default=32, show_default=True,
              help="Nodes one leaf switch serves per rail (64-port leaf at 1:1: 32).")
@click.option("--oversubscription", type=click.FloatRange(1.0, 16.0), default=1.0, show_default=True,
              help="Leaf down:up bandwidth ratio (1: non-blocking).")
@result_output()
def advise(run_id: str, spec: Path, nodes: tuple[int, ...], leaf_nodes: int, oversubscription: float,
           output: ResultOutput) -> None:
    """Predict a training job's step time, MFU and scaling at each N, on RoCE and InfiniBand.

    Starts from the per-GPU bus bandwidth a tune or bootstrap run measured on this rack, and the
    job spec; every equation and assumption is in docs/advisor.md and printed beside the answer.
    """
    job = load_job(require_file(spec, "--model"))
    journal = Journal()
    try:
        measured = from_run(journal, run_id)
    finally:
        journal.close()
    show(build_advice(job, measured, nodes, fabric.Topology(leaf_nodes, oversubscription)), output)
