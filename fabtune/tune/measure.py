"""Measurements for the tuning loop: repeated nccl-tests runs through the cluster's launcher.

Each repetition runs all_reduce (the primary metric: bus bandwidth at the largest size) and
alltoall (many-to-many traffic that loads the lossless class like an incast: the guard metric),
and the RDMA ports' pause counters are read around each batch.

Every launch has a deadline (``fabtune.perf.deadline``). A launch that misses it, exits non-zero,
prints no readable table, or reports a bus bandwidth that cannot be (zero, negative, not a number,
above what the NICs' line rate allows) gives no sample: it is a :class:`FailedRun` with the
evidence, and its repetition's other metric is dropped with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.errors import ParseError
from fabtune.perf import diagnose, nccl, pairs, rdmacounters
from fabtune.perf.argv import NcclOptions
from fabtune.perf.checks import CheckResult
from fabtune.perf.deadline import nccl_deadline_s, run_timeout_s, timed_out
from fabtune.perf.parsers import nccl_debug, nccl_tests
from fabtune.tune.stats import impossible

PAUSE_KEYS = ("rx_prio{}_pause", "tx_prio{}_pause")
RUN_TASK = "Run nccl-tests"
RSH_SITE_VAR = "fabtune_mpirun_rsh_site"  # bench_measure.yml's: fabric_run's mpirun_rsh_site
TESTS = ("all_reduce_perf", "alltoall_perf")
_RATE_RE = re.compile(r"^\s*(?P<gbps>\d+(?:\.\d+)?)\s*Gb/sec")


@dataclass(frozen=True)
class Sample:
    """One repetition: bus bandwidths in GB/s, both measured."""

    all_reduce: float
    alltoall: float


@dataclass(frozen=True)
class FailedRun:
    """A launch that gave no measurement, and the evidence: where, what, its deadline, why."""

    test: str
    host: str
    command: str
    deadline_s: int
    reason: str
    output_tail: str = ""

    def __str__(self) -> str:
        return f"{self.summary} (deadline {self.deadline_s} s; command {self.command})"

    @property
    def summary(self) -> str:
        return f"{self.test} on {self.host}: {self.reason}"

    def evidence(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Batch:
    """A batch's good repetitions, its failed launches, the pause frames, the transport checks from
    the first run's NCCL log, and that log (what a failed batch is diagnosed from)."""

    samples: tuple[Sample, ...]
    pause_frames: int
    transport: tuple[CheckResult, ...] = field(default=())
    failures: tuple[FailedRun, ...] = field(default=())
    log: str = field(default="", repr=False)
    # per "host:netdev", the counter deltas over the batch (nonzero only): the report's small multiples
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # the counters as read after the batch (the next benchmark's before, where nothing changes between)
    after: rdmacounters.Reads = field(default_factory=dict, repr=False)
    rounds_s: float = 0.0  # the seconds of pair rounds measured in the same Ansible run, after it
    # the launch host's Open MPI plm_rsh values its launches shared connections on (fabric_run's
    # ssh_reuse.site), for the next batch's launches from that host; None: not read
    rsh_site: Mapping[str, str] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class MeasureSpec:
    """How to measure: hosts, GPUs per host, launcher, sizes."""

    inventory: Path
    hosts: tuple[str, ...]
    gpus: int
    netdevs: Mapping[str, Sequence[str]]
    launcher: str = "mpirun"
    oob_interface: str | None = None
    # The decision reads one row per test, its busbw at one size: only that size is run (a 1G..8G
    # sweep spent three quarters of each launch on rows nobody read). all_reduce at 8 GiB, where its
    # busbw is bandwidth-bound; alltoall at 1 GiB, where it is too (each rank's message to each
    # peer is 1 GiB / ranks: 4 MiB at 256 ranks) and a launch takes an eighth of the time (at
    # 8 GiB an alltoall launch took 1.5-3x an all_reduce one: docs/benchmarks.md, projection).
    sizes: Mapping[str, str] = field(default_factory=lambda: {"all_reduce_perf": "8G", "alltoall_perf": "1G"})
    deadline_s: int | None = None  # each launch's deadline; None: derived from the sweep and host count
    ceilings: Mapping[str, float] = field(default_factory=dict)  # per test, the busbw ceiling (GB/s)
    # per host, the reads of its ports' RDMA hw_counters ({netdev, argv}: fabtune.perf.rdmacounters)
    hw_reads: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    # the launch host's plm_rsh values as an earlier batch read them (Batch.rsh_site): its launches
    # share their ssh connections without reading them again (ompi_info, about 0.3 s a batch)
    rsh_site: Mapping[str, str] | None = None

    def options(self, test: str) -> NcclOptions:
        size = self.sizes[test]
        return NcclOptions(
            test=test,
            min_bytes=size,
            max_bytes=size,
            gpus_per_process=self.gpus,
            iters=20,
            warmup_iters=5,
        )

    @property
    def deadline(self) -> int:
        """Each launch's deadline: the longer of the two tests' (one deadline for the batch)."""
        return max(nccl_deadline_s(self.options(t), len(self.hosts), self.deadline_s) for t in TESTS)


def busbw_ceilings(facts: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Per test, the highest bus bandwidth (GB/s) the hosts' NICs allow; empty when unknown.

    A node's NIC bandwidth is the sum of its RDMA ports' line rates (sysfs ``rate``), in GB/s; the
    fastest node's is the bound (conservative). It bounds alltoall's busbw (each rank's data to
    other nodes crosses its node's NICs once). all_reduce's busbw counts every byte twice
    (``2(n-1)/n``) while a tree, NVLS or in-network (SHARP) reduction sends it across the node's
    NICs about once: its bound is twice the NIC bandwidth. With one host the traffic never leaves
    it: no bound.
    """
    if len(facts) < 2:
        return {}
    per_node = []
    for fact in facts.values():
        ports = (fact.get("hardware") or {}).get("ports") or []
        rates = [_RATE_RE.match(str(p.get("rate") or "")) for p in ports if p.get("netdev")]
        per_node.append(sum(float(m["gbps"]) for m in rates if m) / 8)
    node = max(per_node)
    if node <= 0:
        return {}
    return {"all_reduce_perf": 2 * node, "alltoall_perf": node}


def _argv(spec: MeasureSpec, test: str) -> list[str]:
    launcher: nccl.Launcher = "srun" if spec.launcher == "srun" else "mpirun"
    return nccl.launcher_argv(
        launcher, list(spec.hosts), spec.options(test), {"NCCL_DEBUG": "INFO"}, spec.oob_interface
    )


def _tail(output: str, lines: int = 5) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])[-1000:]


def _busbw(spec: MeasureSpec, test: str, res: Mapping[str, Any]) -> tuple[float | None, str | None, str]:
    """The largest size's out-of-place busbw, or None and why not; and the output."""
    output = f"{res.get('stdout', '')}\n{res.get('stderr', '')}"
    rc = res.get("rc")
    if timed_out(rc) or res.get("timed_out") or res.get("timedout"):
        return None, f"missed its deadline of {spec.deadline} s and was killed", output
    if rc is None:
        return None, f"did not run: {str(res.get('msg') or 'no exit status')[:300]}", output
    if int(rc) != 0:
        return None, diagnose.failure_line(int(rc), output), output
    try:
        parsed = nccl_tests.parse(output)
    except ParseError as err:
        return None, f"no readable result: {err}", output
    value = parsed.rows[-1].out_of_place.busbw_gbps
    problem = impossible(value, spec.ceilings.get(test))
    if problem:
        return None, f"impossible sample: {problem}", output
    return value, None, output


READ_BEFORE, READ_AFTER = rdmacounters.READ_BEFORE, rdmacounters.READ_AFTER  # bench_measure.yml's tasks


def counter_deltas(
    outcome: ansible.RunOutcome, before: rdmacounters.Reads | None = None
) -> dict[str, dict[str, int]]:
    """Per ``host:netdev``, the counters that moved between the reads before and after the batch
    (``before``: the counters read before it, where the batch itself read none)."""
    first = before if before is not None else rdmacounters.reads_of(outcome.results(READ_BEFORE))
    after = rdmacounters.reads_of(outcome.results(READ_AFTER))
    moved = pairs.read_deltas(first, after)
    return {f"{h}:{n}": dict(v) for (h, n), v in sorted(moved.items()) if v}


def merge_counters(*parts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per-port counter deltas summed."""
    total: dict[str, dict[str, int]] = {}
    for part in parts:
        for port, values in part.items():
            mine = total.setdefault(port, {})
            for name, delta in values.items():
                mine[name] = mine.get(name, 0) + int(delta)
    return total


_PAUSES = frozenset(key.format(prio) for key in PAUSE_KEYS for prio in range(8))


def pause_frames(deltas: Mapping[str, Mapping[str, int]]) -> int:
    """The pause frames (every priority, received and sent) among per-port counter deltas."""
    return sum(v for counters in deltas.values() for k, v in counters.items() if k in _PAUSES)


def _transport(spec: MeasureSpec, output: str, *, failed_only: bool = False) -> tuple[CheckResult, ...]:
    """Each host's transport check from the NCCL log in ``output``.

    When every launch failed (``failed_only``), a host whose log the output does not hold is not
    judged: the failed runs carry the evidence, and a preflight must not hide them.
    """
    logs = nccl.split_by_host(output)
    found = []
    for host in spec.hosts:
        try:
            nccl_debug.parse(logs.get(host, ""))
        except ParseError:
            if failed_only:
                continue
            raise
        found.append(diagnose.host_result(host, logs.get(host, ""), failed=failed_only)[0])
    return tuple(found)


def _raise_unless_runs_only(outcome: ansible.RunOutcome) -> None:
    """A failure of anything but the launches (an unreachable host, a counter read) fails the batch."""
    others = [t for t in outcome.failures() if t.task != RUN_TASK]
    if others or outcome.status == "timeout" or outcome.unreachable_hosts:
        outcome.raise_for_failure("measurement")


def launch_runs(result: Mapping[str, Any], argvs: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """The launches of ``argvs`` as bench_measure.yml's one fabric_run call reported them (``runs``,
    ids "0", "1", ... in order), each with its command line; the leading ones only, in order."""
    runs: list[dict[str, Any]] = []
    for index, run in enumerate(result.get("runs") or []):
        if not isinstance(run, Mapping) or str(run.get("id")) != str(index) or index >= len(argvs):
            break
        runs.append({**run, "cmd": list(argvs[index])})
    return runs


def judge_runs(
    spec: MeasureSpec, runs: Sequence[Mapping[str, Any]]
) -> tuple[list[Sample], list[FailedRun], str]:
    """Launch results (all_reduce, alltoall, all_reduce, ...) as samples and failed runs.

    Returns:
        The repetitions with both metrics good, the failed launches, and the first good all_reduce
        output, else the first all_reduce output (the transport preflight reads its NCCL log).
    """
    samples: list[Sample] = []
    failures: list[FailedRun] = []
    first_output = fallback = ""
    for i in range(0, len(runs) - 1, 2):
        values: list[float] = []
        for test, res in zip(TESTS, runs[i : i + 2], strict=True):
            value, why, output = _busbw(spec, test, res)
            fallback = fallback or (output if test == TESTS[0] else "")
            if value is None:
                command = " ".join(str(a) for a in res.get("cmd") or res.get("item") or _argv(spec, test))
                tail = _tail(output)
                failures.append(FailedRun(test, spec.hosts[0], command, spec.deadline, str(why), tail))
                continue
            values.append(value)
            if test == TESTS[0] and not first_output:
                first_output = output
        if len(values) == len(TESTS):
            samples.append(Sample(values[0], values[1]))
    return samples, failures, first_output or fallback


def measure(spec: MeasureSpec, repetitions: int, before: rdmacounters.Reads | None = None) -> Batch:
    """Run ``repetitions`` of (all_reduce, alltoall) in one Ansible run.

    A launch that fails (deadline, exit status, unreadable or impossible output) is returned as a
    failed run, never as a sample. ``before``: the counters as read since the last change and the
    last traffic (the previous benchmark's read after); where they hold every port the batch reads,
    the batch reads none before.

    Raises:
        PlaybookFailed: when a host is unreachable or the run itself missed its deadline.
    """
    planned = plan_batch(spec, repetitions, before)
    outcome = ansible.run_playbook(PLAYBOOK, spec.inventory, extravars=planned.variables,
                                   timeout_s=planned.timeout_s)
    return batch_of(spec, planned, outcome)


PLAYBOOK = "bench_measure.yml"


@dataclass(frozen=True)
class PlannedBatch:
    """A batch as bench_measure.yml runs it: the launches, each host's counter reads, the read
    before that stands for the batch's own (None: the batch reads them), the playbook's variables."""

    argvs: tuple[tuple[str, ...], ...]
    reads: Mapping[str, Sequence[Mapping[str, Any]]]
    before: rdmacounters.Reads | None
    variables: Mapping[str, Any]
    timeout_s: int


def plan_batch(spec: MeasureSpec, repetitions: int, before: rdmacounters.Reads | None = None) -> PlannedBatch:
    """``repetitions`` of (all_reduce, alltoall) ready to run (``before``: as for ``measure``)."""
    argvs = [_argv(spec, t) for _ in range(repetitions) for t in TESTS]
    reads = {
        h: rdmacounters.read_commands(spec.netdevs.get(h, ()), spec.hw_reads.get(h, ()))
        for h in sorted(set(spec.netdevs) | set(spec.hw_reads))
    }
    variables: dict[str, Any] = {
        "fabtune_launch_host": spec.hosts[0],
        "fabtune_measure_argvs": argvs,
        "fabtune_counter_reads": reads,
        "fabtune_bench_deadline_s": spec.deadline,
        "fabtune_measure_host_count": len(spec.hosts),
    }
    held = before if rdmacounters.covers(before, reads) else None
    if held is not None:
        variables[pairs.READS_BEFORE_VAR] = {}
    if spec.rsh_site:
        variables[RSH_SITE_VAR] = dict(spec.rsh_site)
    return PlannedBatch(tuple(tuple(a) for a in argvs), reads, held, variables,
                        run_timeout_s(spec.deadline, len(argvs)))


def batch_of(spec: MeasureSpec, planned: PlannedBatch, outcome: ansible.RunOutcome) -> Batch:
    """The batch from its run's outcome (a run of bench_measure.yml, or that part of a longer run).

    Raises:
        PlaybookFailed: when a host is unreachable or the run itself missed its deadline.
    """
    _raise_unless_runs_only(outcome)
    argvs = [list(a) for a in planned.argvs]
    launched = outcome.results(RUN_TASK).get(spec.hosts[0], {})
    runs = launch_runs(launched, argvs)
    samples, failures, first = judge_runs(spec, runs)
    why_not = f"not run: {str(launched['msg'])[:300]}" if launched.get("msg") else "not run"
    failures += [
        FailedRun(TESTS[i % 2], spec.hosts[0], " ".join(argvs[i]), spec.deadline, why_not)
        for i in range(len(runs), len(argvs))
    ]
    transport = _transport(spec, first, failed_only=not samples) if first else ()
    deltas = counter_deltas(outcome, planned.before)
    after = rdmacounters.reads_of(outcome.results(READ_AFTER))
    site = (launched.get("ssh_reuse") or {}).get("site")
    return Batch(tuple(samples), pause_frames(deltas), transport, tuple(failures), first, deltas, after,
                 rsh_site={str(k): str(v) for k, v in site.items()} if isinstance(site, Mapping) else None)
