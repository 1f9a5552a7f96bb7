"""Command lines of the benchmarks fabtune drives: perftest, nccl-tests via mpirun or srun.

Pure: argv lists only (never shell strings). Every perftest line built here is accepted by the
real perftest's argument parser (tested wherever Debian's perftest is installed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fabtune.errors import ConfigError

PERFTEST_VERBS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
NCCL_TESTS = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf")


@dataclass(frozen=True)
class PerftestOptions:
    """What one ib_*_bw run measures; the same options go to the server and the client."""

    verb: str = "ib_write_bw"
    size: int = 1 << 20
    qps: int = 8
    duration_s: int = 5
    gid_index: int | None = None
    tclass: int | None = None
    report_gbits: bool = True
    # ``-R``: connect the QPs through rdma_cm, as storage and MPI traffic do: the GID comes from the
    # address and the ToS from the port's rdma_cm default (``default_roce_tos``), not from -x/--tclass.
    rdma_cm: bool = False

    def problems(self) -> list[str]:
        """Every invalid field, named with its value."""
        found = []
        if self.verb not in PERFTEST_VERBS:
            found.append(f"verb: {self.verb!r} must be one of {', '.join(PERFTEST_VERBS)}")
        if not 2 <= self.size <= 1 << 23:
            found.append(f"size: {self.size} must be from 2 to 8388608 bytes")
        if not 1 <= self.qps <= 64:
            found.append(f"qps: {self.qps} must be from 1 to 64")
        if not 1 <= self.duration_s <= 600:
            found.append(f"duration_s: {self.duration_s} must be from 1 to 600")
        if self.tclass is not None and not 0 <= self.tclass <= 255:
            found.append(f"tclass: {self.tclass} must be from 0 to 255")
        if self.tclass is not None and self.rdma_cm:
            found.append(f"tclass: {self.tclass} cannot be set with rdma_cm (its ToS is the port's default)")
        return found


def perftest_argv(
    opts: PerftestOptions, device: str, port: int, server_address: str | None = None
) -> list[str]:
    """The ib_*_bw command line: a server when ``server_address`` is None, else its client.

    Raises:
        ConfigError: when the options are invalid.
    """
    problems = opts.problems()
    if problems:
        raise ConfigError("perftest options", problems)
    argv = [
        opts.verb,
        "-d",
        device,
        "-i",
        "1",
        "-F",
        "-q",
        str(opts.qps),
        "-s",
        str(opts.size),
        "-D",
        str(opts.duration_s),
        "-p",
        str(port),
    ]
    if opts.rdma_cm:
        argv.append("-R")
    elif opts.gid_index is not None:
        argv += ["-x", str(opts.gid_index)]
    if opts.tclass is not None:
        argv += ["--tclass", str(opts.tclass)]
    if opts.report_gbits:
        argv.append("--report_gbits")
    if server_address is not None:
        argv.append(server_address)
    return argv


@dataclass(frozen=True)
class NcclOptions:
    """One nccl-tests sweep."""

    test: str = "all_reduce_perf"
    min_bytes: str = "8M"
    max_bytes: str = "1G"
    step_factor: int = 2
    gpus_per_process: int = 8
    iters: int = 20
    warmup_iters: int = 5


def nccl_test_argv(opts: NcclOptions) -> list[str]:
    """The nccl-tests binary and its sweep arguments (one process per host, -g GPUs each)."""
    if opts.test not in NCCL_TESTS:
        raise ConfigError(
            "nccl-tests options", [f"test: {opts.test!r} must be one of {', '.join(NCCL_TESTS)}"]
        )
    return [
        opts.test,
        "-b",
        opts.min_bytes,
        "-e",
        opts.max_bytes,
        "-f",
        str(opts.step_factor),
        "-g",
        str(opts.gpus_per_process),
        "-n",
        str(opts.iters),
        "-w",
        str(opts.warmup_iters),
    ]


def mpirun_argv(
    hosts: Sequence[str], test: Sequence[str], env: Mapping[str, str], oob_interface: str | None = None
) -> list[str]:
    """Open MPI's mpirun across ``hosts``, one rank per host, NCCL environment exported with -x."""
    argv = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(len(hosts)),
        "-H",
        ",".join(f"{h}:1" for h in hosts),
        "--bind-to",
        "none",
        "--map-by",
        "ppr:1:node",
    ]
    if oob_interface:
        argv += ["--mca", "oob_tcp_if_include", oob_interface, "--mca", "btl_tcp_if_include", oob_interface]
    for key, value in sorted(env.items()):
        argv += ["-x", f"{key}={value}"]
    return argv + list(test)


def srun_argv(hosts: Sequence[str], test: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Slurm's srun across ``hosts`` (one task per node, PMIx), NCCL environment via --export."""
    exports = ",".join(["ALL", *(f"{k}={v}" for k, v in sorted(env.items()))])
    return [
        "srun",
        f"--nodes={len(hosts)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(hosts)}",
        "--mpi=pmix",
        f"--export={exports}",
        *test,
    ]
