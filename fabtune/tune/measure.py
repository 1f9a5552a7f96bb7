"""Measurements for the tuning loop: repeated nccl-tests runs through the cluster's launcher.

Each repetition runs all_reduce (the primary metric: bus bandwidth at the largest size) and
alltoall (many-to-many traffic that loads the lossless class like an incast: the guard metric),
and the RDMA ports' pause counters are read around each batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.bench import checks, nccl
from fabtune.bench.argv import NcclOptions
from fabtune.bench.checks import CheckResult
from fabtune.bench.parsers import ethtool, nccl_debug, nccl_tests
from fabtune.errors import ParseError

PAUSE_KEYS = ("rx_prio{}_pause", "tx_prio{}_pause")


@dataclass(frozen=True)
class Sample:
    """One repetition: bus bandwidths in GB/s (0 when the run failed)."""

    all_reduce: float
    alltoall: float
    error: str | None = None


@dataclass(frozen=True)
class Batch:
    """A batch of repetitions, the pause frames counted during it, and the first run's NCCL log."""

    samples: tuple[Sample, ...]
    pause_frames: int
    transport: tuple[CheckResult, ...] = field(default=())


@dataclass(frozen=True)
class MeasureSpec:
    """How to measure: hosts, GPUs per host, launcher, sizes."""

    inventory: Path
    hosts: tuple[str, ...]
    gpus: int
    netdevs: Mapping[str, Sequence[str]]
    launcher: str = "mpirun"
    oob_interface: str | None = None
    min_bytes: str = "1G"
    max_bytes: str = "8G"


def _argv(spec: MeasureSpec, test: str) -> list[str]:
    opts = NcclOptions(
        test=test,
        min_bytes=spec.min_bytes,
        max_bytes=spec.max_bytes,
        gpus_per_process=spec.gpus,
        iters=20,
        warmup_iters=5,
    )
    launcher: nccl.Launcher = "srun" if spec.launcher == "srun" else "mpirun"
    return nccl.launcher_argv(launcher, list(spec.hosts), opts, {"NCCL_DEBUG": "INFO"}, spec.oob_interface)


def _busbw(res: Mapping[str, Any]) -> tuple[float, str | None, str]:
    output = f"{res.get('stdout', '')}\n{res.get('stderr', '')}"
    if int(res.get("rc", 1)) != 0:
        return (
            0.0,
            f"exit {res.get('rc')}: {output.strip().splitlines()[-1] if output.strip() else ''}",
            output,
        )
    try:
        parsed = nccl_tests.parse(output)
    except ParseError as err:
        return 0.0, str(err), output
    last = parsed.rows[-1]
    return last.out_of_place.busbw_gbps, None, output


def _pauses(results: Sequence[Mapping[str, Any]]) -> int:
    total = 0
    for item in results:
        try:
            stats = ethtool.parse(str(item.get("stdout", "")))
        except ParseError:
            continue
        total += sum(sum(stats.per_priority(k).values()) for k in PAUSE_KEYS)
    return total


def _pause_delta(outcome: ansible.RunOutcome) -> int:
    before = outcome.results("Read RDMA port counters before")
    after = outcome.results("Read RDMA port counters after")
    return sum(
        _pauses(after[h].get("results", [])) - _pauses(before.get(h, {}).get("results", [])) for h in after
    )


def _transport(spec: MeasureSpec, output: str) -> tuple[CheckResult, ...]:
    logs = nccl.split_by_host(output)
    return tuple(checks.transport(h, nccl_debug.parse(logs.get(h, "")), logs.get(h, "")) for h in spec.hosts)


def measure(spec: MeasureSpec, repetitions: int) -> Batch:
    """Run ``repetitions`` of (all_reduce, alltoall) in one Ansible run.

    Raises:
        PlaybookFailed: when a host is unreachable.
    """
    argvs = [_argv(spec, t) for _ in range(repetitions) for t in ("all_reduce_perf", "alltoall_perf")]
    extravars = {
        "fabtune_launch_host": spec.hosts[0],
        "fabtune_measure_argvs": argvs,
        "fabtune_counter_netdevs": {h: list(v) for h, v in spec.netdevs.items()},
    }
    outcome = ansible.run_playbook("bench_measure.yml", spec.inventory, extravars=extravars)
    outcome.raise_for_failure("measurement")
    runs = outcome.results("Run nccl-tests").get(spec.hosts[0], {}).get("results", [])
    parsed = [_busbw(r) for r in runs]
    samples = tuple(
        Sample(parsed[i][0], parsed[i + 1][0], parsed[i][1] or parsed[i + 1][1])
        for i in range(0, len(parsed), 2)
    )
    transport = _transport(spec, parsed[0][2]) if parsed else ()
    return Batch(samples, _pause_delta(outcome), transport)
