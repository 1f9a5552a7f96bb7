"""``fabtune advise``: what a training job gets at N nodes on this fabric, and RoCE or InfiniBand."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from fabtune.advise import fabric
from fabtune.advise.advise import FABRIC_BOUND_SHARE, Advice, predict
from fabtune.advise.advise import advise as build_advice
from fabtune.advise.html import render_advice
from fabtune.advise.job import JobSpec, fit, fit_problem, load_job
from fabtune.advise.joblog import JobLog, load_job_log
from fabtune.advise.measured import Measured, from_run
from fabtune.advise.probe import measure_rack
from fabtune.commands import _console
from fabtune.commands._common import ResultOutput, absolute_path, require_file, result_output, run_id_of
from fabtune.errors import ConfigError
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


def show(advice: Advice, output: ResultOutput, found: dict[str, object] | None = None) -> None:
    """The table, the verdict and the assumptions (or the JSON)."""
    console = output.console()
    console.print(table(advice))
    bound = ", ".join(f"{k} {'N=' + str(v) if v else 'never'}" for k, v in advice.fabric_bound.items())
    console.print(Text(f"fabric costs >= {FABRIC_BOUND_SHARE:.0%} of a step from: {bound}"))
    console.print(Text(f"verdict: {advice.verdict}"))
    console.print(Text("assumptions:"))
    for line in advice.assumptions:
        console.print(Text(f"  - {line}"))
    if found is not None:
        show_log(found, output)
    output.write({**advice.to_json(), "job_log": found})


def log_line(
    log: JobLog, job: JobSpec, nodes: int, measured: Measured | None, topo: fabric.Topology
) -> dict[str, object]:
    """The job log's measured MFU at ``nodes`` and, with a measured rack, the prediction beside it."""
    layout = fit(job, nodes)
    found: dict[str, object] = {
        "format": log.format, "steps": log.steps, "nodes": nodes, "mfu": log.mfu(job, layout.gpus),
        "step_s": log.step_s, "tokens_per_s_per_gpu": log.tokens_per_s_per_gpu,
        "samples_per_s": log.samples_per_s,
    }
    if measured is not None:
        name = "ib-ndr" if measured.kind == "ib" else "roce"
        option = next(o for o in fabric.options(measured.qps) if o.name == name)
        found["predicted_mfu"] = predict(job, measured, option, topo, nodes)[1].mfu
        found["predicted_option"] = option.name
    return found


def show_log(found: dict[str, object], output: ResultOutput) -> None:
    """The job log's line: measured MFU, and the prediction beside it when there is one."""
    mfu = float(str(found["mfu"]))
    line = f"job log ({found['format']}, {found['steps']} steps) at N={found['nodes']}: "
    line += f"measured MFU {mfu:.1%}"
    if "predicted_mfu" in found:
        predicted = float(str(found["predicted_mfu"]))
        line += f"; predicted {predicted:.1%} ({found['predicted_option']})"
        line += f", measured/predicted {mfu / predicted:.2f}"
    output.console().print(Text(line))


@click.command("advise")
@click.option("--from", "run_id", default=None, callback=run_id_of,
              help="A saved tune or bootstrap run whose measured busbw the prediction starts from.")
@click.option("-i", "--inventory", type=click.Path(path_type=Path), default=None, callback=absolute_path,
              help="Measure this rack now (the tune baseline's all_reduce and alltoall; read-only).")
@click.option("--job-log", type=click.Path(path_type=Path), default=None, callback=absolute_path,
              help="A training log (Megatron-LM, torchtitan, DeepSpeed, 'step N ... time T'): "
              "its measured MFU beside the prediction.")
@click.option("--log-nodes", type=click.IntRange(1, 1 << 20), default=None,
              help="Nodes the --job-log job ran on (default: the only --nodes value).")
@click.option("--model", "spec", required=True, type=click.Path(path_type=Path), callback=absolute_path,
              help="The job spec (YAML: docs/advisor.md).")
@click.option("--nodes", required=True, callback=parse_nodes, help="Cluster sizes to predict, e.g. 4,32,128.")
@click.option("--leaf-nodes", type=click.IntRange(1, 4096), default=32, show_default=True,
              help="Nodes one leaf switch serves per rail (64-port leaf at 1:1: 32; not rail-optimised: "
              "its down ports / NICs per node).")
@click.option("--oversubscription", type=click.FloatRange(1.0, 16.0), default=1.0, show_default=True,
              help="Leaf down:up bandwidth ratio (1: non-blocking).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the advice as an HTML page with plots (MFU and step split against N).")
@result_output()
def advise(
    run_id: str | None, inventory: Path | None, job_log: Path | None, log_nodes: int | None, spec: Path,
    nodes: tuple[int, ...], leaf_nodes: int, oversubscription: float, html_path: Path | None,
    output: ResultOutput,
) -> None:
    """Predict a training job's step time, MFU and scaling at each N, on RoCE and InfiniBand.

    Starts from the per-GPU bus bandwidth a tune or bootstrap run measured on this rack (--from),
    or measures it now (-i), and the job spec; --job-log adds a real job's measured MFU. Every
    equation and assumption is in docs/advisor.md and printed beside the answer.
    """
    if run_id is not None and inventory is not None:
        raise click.UsageError("--from and -i exclude each other: a saved run's measurement, or one now")
    if run_id is None and inventory is None and job_log is None:
        raise click.UsageError("give --from RUN or -i INV (a measured rack), --job-log FILE, or both")
    if html_path is not None and run_id is None and inventory is None:
        raise click.UsageError("--html needs a measured rack: --from RUN or -i INV")
    if job_log is not None and log_nodes is None and len(nodes) != 1:
        raise click.UsageError("--job-log with several --nodes: give the log's node count as --log-nodes")
    job = load_job(require_file(spec, "--model"))
    log = load_job_log(require_file(job_log, "--job-log")) if job_log is not None else None
    topo = fabric.Topology(leaf_nodes, oversubscription)
    misfits = [p for p in (fit_problem(job, n) for n in (*nodes, log_nodes or nodes[0])) if p]
    if misfits:  # before any measurement
        raise ConfigError(f"job {job.name} on the cluster", list(dict.fromkeys(misfits)))
    measured = measure_rack(require_file(inventory, "-i")) if inventory is not None else None
    if run_id is not None:
        journal = Journal()
        try:
            measured = from_run(journal, run_id)
        finally:
            journal.close()
    found = log_line(log, job, log_nodes or nodes[0], measured, topo) if log is not None else None
    if measured is None:
        if found is not None:
            show_log(found, output)
            output.write({"job_log": found})
        return
    advice = build_advice(job, measured, nodes, topo)
    show(advice, output, found)
    if html_path is not None:
        html_path.write_text(render_advice(advice.to_json()))
        _console.err().print(f"wrote {html_path}", markup=False, highlight=False)
