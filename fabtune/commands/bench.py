"""``fabtune bench``: run one benchmark family on its own."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from fabtune.commands import _console
from fabtune.commands._common import INVENTORY_OPTION, OOB_OPTION, ResultOutput, require_file, result_output
from fabtune.errors import BenchmarkError, ConfigError
from fabtune.inventory import read_inventory
from fabtune.perf import nccl, pairs
from fabtune.perf.argv import NCCL_TESTS, PERFTEST_VERBS, NcclOptions, PerftestOptions
from fabtune.perf.fabric import read_hosts
from fabtune.perf.schedule import incast_stage, pair_rounds


@click.group("bench")
def bench() -> None:
    """Benchmarks: perftest pair matrices and incast, nccl-tests through mpirun or srun."""


def _perftest_options(f: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        [
            click.option(
                "--verb", type=click.Choice(PERFTEST_VERBS), default="ib_write_bw", show_default=True
            ),
            click.option(
                "--size", type=int, default=1 << 20, show_default=True, help="Message size (bytes)."
            ),
            click.option("--qps", type=int, default=8, show_default=True, help="QPs per connection (-q)."),
            click.option("--duration", type=int, default=5, show_default=True, help="Seconds per run (-D)."),
            click.option("--tclass", type=int, default=None, help="GRH traffic class (--tclass)."),
            click.option("--rails", type=int, default=None, help="NICs per host to test (default: all)."),
            click.option(
                "--rdma-cm", is_flag=True, default=False,
                help="Connect through rdma_cm (-R): the GID from the address, the ToS from the port's "
                "rdma_cm default, as storage and MPI traffic (what fabtune tune measures).",
            ),
        ]
    ):
        f = option(f)
    return f


def _checked(opts: PerftestOptions) -> PerftestOptions:
    """``opts`` when valid, before any host is read.

    Raises:
        ConfigError: naming every invalid option and its value.
    """
    problems = opts.problems()
    if problems:
        raise ConfigError("perftest options", problems)
    return opts


def _print_pairs(results: list[pairs.PairResult], console: Console) -> None:
    table = Table("client -> server", "NIC", "Gb/s", "ceiling", "share", "pause frames", "error")
    for r in results:
        pauses = sum(v for per in r.counters.values() for k, v in per.items() if "pause" in k)
        share = r.share_of_ceiling
        table.add_row(
            f"{r.client} -> {r.server}",
            r.device,
            "-" if r.gbps is None else f"{r.gbps:.1f}",
            f"{r.ceiling_gbps:.1f}",
            "-" if share is None else f"{share:.0%}",
            str(pauses),
            r.error or "",
        )
    console.print(table)


def _note_late(results: list[pairs.PairResult], opts: PerftestOptions, output: ResultOutput) -> None:
    note = pairs.late_clients(pairs.late_hosts(results), opts.duration_s)
    if note is not None:
        output.echo(f"warning: {note}")


@bench.command("pairs")
@INVENTORY_OPTION
@result_output(legacy=True)
@_perftest_options
def pairs_cmd(
    inventory: Path,
    output: ResultOutput,
    verb: str,
    size: int,
    qps: int,
    duration: int,
    tclass: int | None,
    rails: int | None,
    rdma_cm: bool,
) -> None:
    """All host pairs in concurrent rounds (an odd count: one host idle per round), NIC i to NIC i."""
    require_file(inventory, "inventory")
    opts = _checked(PerftestOptions(verb, size, qps, duration, None, tclass, rdma_cm=rdma_cm))
    console = _console.err()
    views = read_hosts(inventory)
    hosts = sorted(views)
    count = min(len(v.rails) for v in views.values()) if rails is None else rails
    rounds = pair_rounds(hosts, count)
    with console.status("pair matrix") as shown:
        done = pairs.run_rounds(
            inventory,
            rounds,
            views,
            opts,
            lambda _kind, message, _data: shown.update(message),
            deadline_s=read_inventory(inventory).bench_timeout_s,
        )
    flat = [r for rnd in done for r in rnd]
    _print_pairs(flat, output.console())
    for rnd in done:
        _note_late(rnd, opts, output)
    slow = pairs.slow_pairs(flat)
    ports = pairs.slow_ports(flat, slow)
    for port in ports:  # a port that explains its slow pairs, each listed under it
        output.echo(port.describe())
        for found in port.pairs:
            output.echo(f"  slow pair: {found.describe()}")
    for found in pairs.unexplained(slow, ports):
        output.echo(f"slow pair: {found.describe()}")
    output.write({"kind": "pairs", "rounds": done, "slow_pairs": [f.describe() for f in slow],
                  "slow_ports": [p.to_json() for p in ports]})


@bench.command("incast")
@INVENTORY_OPTION
@result_output(legacy=True)
@click.option("--fan-in", type=int, default=None, help="Senders per receiver (default: all other hosts).")
@_perftest_options
def incast_cmd(
    inventory: Path,
    output: ResultOutput,
    fan_in: int | None,
    verb: str,
    size: int,
    qps: int,
    duration: int,
    tclass: int | None,
    rails: int | None,
    rdma_cm: bool,
) -> None:
    """k senders to one receiver at once on NIC 0: loads the lossless class (PFC, ECN)."""
    require_file(inventory, "inventory")
    opts = _checked(PerftestOptions(verb, size, qps, duration, None, tclass, rdma_cm=rdma_cm))
    views = read_hosts(inventory)
    hosts = sorted(views)
    stage = incast_stage(hosts, fan_in or len(hosts) - 1)
    deadline = read_inventory(inventory).bench_timeout_s
    results = pairs.run_round(inventory, stage, views, opts, deadline_s=deadline)
    _print_pairs(results, output.console())
    _note_late(results, opts, output)
    output.write({"kind": "incast", "fan_in": len(stage), "results": results})


@bench.command("nccl")
@INVENTORY_OPTION
@result_output(legacy=True)
@OOB_OPTION
@click.option("--test", type=click.Choice(NCCL_TESTS), default="all_reduce_perf", show_default=True)
@click.option("--min-bytes", default="8M", show_default=True)
@click.option("--max-bytes", default="1G", show_default=True)
@click.option("--gpus", type=int, default=None, help="GPUs per host (default: from nvidia-smi topo -m).")
@click.option("--launcher", type=click.Choice(["mpirun", "srun"]), default="mpirun", show_default=True)
def nccl_cmd(
    inventory: Path,
    output: ResultOutput,
    oob_interface: str | None,
    test: str,
    min_bytes: str,
    max_bytes: str,
    gpus: int | None,
    launcher: str,
) -> None:
    """nccl-tests across every host of the inventory, launched from the first."""
    require_file(inventory, "inventory")
    views = read_hosts(inventory)
    hosts = sorted(views)
    first = views[hosts[0]]
    per_host = gpus or (len([c for c in first.topo.columns if c.startswith("GPU")]) if first.topo else 1)
    opts = NcclOptions(test=test, min_bytes=min_bytes, max_bytes=max_bytes, gpus_per_process=per_host)
    run = nccl.run(
        inventory,
        hosts,
        opts,
        {},
        launcher="srun" if launcher == "srun" else "mpirun",
        oob_interface=oob_interface,
        deadline_s=read_inventory(inventory).bench_timeout_s,
    )
    if run.result is None or not run.result.rows:
        tail = "\n".join(run.output.strip().splitlines()[-5:])
        raise BenchmarkError(f"{test} produced no result table (rc {run.rc}): {run.error}\n{tail}")
    table = Table("size (B)", "busbw out-of-place (GB/s)", "busbw in-place (GB/s)", "#wrong")
    for row in run.result.rows:
        table.add_row(
            str(row.size_bytes),
            f"{row.out_of_place.busbw_gbps:.2f}",
            f"{row.in_place.busbw_gbps:.2f}",
            str(row.out_of_place.wrong),
        )
    output.console().print(table)
    output.console().print(
        f"Avg bus bandwidth per GPU: {run.result.avg_busbw_gbps} GB/s over {len(hosts)} hosts x "
        f"{per_host} GPUs"
    )
    output.write({"kind": "nccl", "rc": run.rc, "result": run.result})
