"""Deadlines of the benchmarks fabtune launches, derived from what they run. Pure.

A benchmark launch runs on its host under coreutils ``timeout --kill-after=KILL_AFTER_S
DEADLINE`` (the playbooks ``bench_*.yml`` wrap the argv): at the deadline the launcher's whole
process group gets SIGTERM, and SIGKILL ``KILL_AFTER_S`` later. The Ansible task around it has a
timeout of the deadline plus ``TASK_SLACK_S`` more (a backstop when the host does not answer), and
the whole ansible-runner run one of every task's timeout added up, plus ``RUN_SLACK_S``.

The inventory variable ``fabtune_bench_timeout_s`` replaces the derived deadline of every launch.
"""

from __future__ import annotations

import math
import re

from fabtune.perf.argv import NcclOptions, PerftestOptions

KILL_AFTER_S = 10  # SIGTERM at the deadline, SIGKILL this much later (the playbooks use the same)
TASK_SLACK_S = 30  # the Ansible task's timeout: deadline + KILL_AFTER_S + TASK_SLACK_S
RUN_SLACK_S = 120  # the whole playbook run: every task's timeout + this (counters, connections)
LAUNCH_S = 60  # launcher start, SSH fan-out, NCCL init and teardown
PER_HOST_S = 2  # each further host's start-up (launched one SSH connection at a time, worst case)
FLOOR_GBPS = 1.0  # GB/s: the slowest a working fabric moves data (NCCL's TCP fallback over 10 GbE)
PERFTEST_START_S = 30  # connection set-up (the client retries), warm-up, report exchange
_SIZE_RE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>[KMG]?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_bytes(text: str) -> int:
    """nccl-tests' size syntax: a number with an optional K/M/G suffix (powers of 1024).

    Raises:
        ValueError: when ``text`` is not such a size.
    """
    match = _SIZE_RE.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size (a number with an optional K, M or G)")
    return int(float(match["num"]) * _UNITS[match["unit"].upper()])


def sweep(opts: NcclOptions) -> list[int]:
    """The message sizes one nccl-tests run measures (min to max, times the step factor)."""
    low, high = size_bytes(opts.min_bytes), size_bytes(opts.max_bytes)
    factor = max(opts.step_factor, 2)
    sizes, size = [], max(low, 1)
    while size <= high:
        sizes.append(size)
        size *= factor
    return sizes or [high]


def nccl_deadline_s(opts: NcclOptions, hosts: int, override_s: int | None = None) -> int:
    """One nccl-tests launch: start-up per host, plus every iteration's data at ``FLOOR_GBPS``.

    The data allowance is every size of the sweep, times warm-up plus timed iterations, times two
    (an all_reduce moves each byte out and back), at the floor rate: a run on a fabric that works
    at all, however slowly, finishes; a run that hangs is stopped.
    """
    if override_s is not None:
        return override_s
    iterations = opts.iters + opts.warmup_iters
    data_s = 2 * sum(sweep(opts)) * iterations / (FLOOR_GBPS * 1e9)
    return LAUNCH_S + PER_HOST_S * max(hosts - 1, 0) + math.ceil(data_s)


def perftest_deadline_s(opts: PerftestOptions, override_s: int | None = None) -> int:
    """One perftest client (or server) of a pair round or incast: its ``-D`` duration twice, plus start-up."""
    if override_s is not None:
        return override_s
    return PERFTEST_START_S + 2 * opts.duration_s


def task_timeout_s(deadline_s: int) -> int:
    """The Ansible task's own timeout around a launch with ``deadline_s`` on its host."""
    return deadline_s + KILL_AFTER_S + TASK_SLACK_S


def run_timeout_s(deadline_s: int, launches: int) -> int:
    """The whole playbook run of ``launches`` launches, one after another."""
    return task_timeout_s(deadline_s) * max(launches, 1) + RUN_SLACK_S


def timed_out(rc: int | None) -> bool:
    """``timeout``'s exit status when the deadline passed: 124 (SIGTERM did it) or 137 (SIGKILL)."""
    return rc in (124, 137)
