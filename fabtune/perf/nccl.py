"""nccl-tests across an inventory, launched by the cluster's own launcher (mpirun or srun)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fabtune import ansible
from fabtune.errors import BenchmarkError, ParseError
from fabtune.perf.argv import NcclOptions, mpirun_argv, nccl_test_argv, srun_argv
from fabtune.perf.deadline import nccl_deadline_s, run_timeout_s, timed_out
from fabtune.perf.parsers import nccl_debug, nccl_tests

Launcher = Literal["mpirun", "srun"]
LAUNCH_TASK = "Run the launcher"  # bench_nccl.yml: the launcher (mpirun/srun) on the first host
# NCCL's line prefix: "<hostname>:<pid>:<tid> [<dev>] NCCL INFO ..." (formats.md §3).
HOST_PREFIX_RE = re.compile(r"^(?:\[[^\]]*\] )?(?P<host>[A-Za-z0-9_.-]+):\d+:\d+ \[\d+\] ")


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests sweep: the parsed table, the per-host NCCL log, and the raw output."""

    rc: int
    result: nccl_tests.NcclTestsResult | None
    per_host_log: Mapping[str, str] = field(repr=False)
    output: str = field(repr=False)
    error: str | None = None
    deadline_s: int | None = None

    def debug(self, host: str) -> nccl_debug.NcclDebugSummary:
        """The NCCL_DEBUG=INFO summary of ``host``'s ranks."""
        return nccl_debug.parse(self.per_host_log.get(host, ""))


def split_by_host(output: str) -> dict[str, str]:
    """NCCL INFO/WARN lines grouped by the hostname that prefixes them."""
    per_host: dict[str, list[str]] = {}
    for line in output.splitlines():
        match = HOST_PREFIX_RE.match(line)
        if match and " NCCL " in line:
            per_host.setdefault(match.group("host"), []).append(line)
    return {host: "\n".join(lines) + "\n" for host, lines in per_host.items()}


def launcher_argv(
    launcher: Launcher,
    hosts: Sequence[str],
    opts: NcclOptions,
    env: Mapping[str, str],
    oob_interface: str | None,
) -> list[str]:
    """The full command line the launch host runs."""
    test = nccl_test_argv(opts)
    if launcher == "srun":
        return srun_argv(hosts, test, env)
    return mpirun_argv(hosts, test, env, oob_interface)


def run(
    inventory: Path,
    hosts: Sequence[str],
    opts: NcclOptions,
    env: Mapping[str, str],
    *,
    launcher: Launcher = "mpirun",
    oob_interface: str | None = None,
    deadline_s: int | None = None,
) -> NcclRun:
    """Run one sweep from the first host and read its table and NCCL log.

    The launch has a deadline (``deadline_s``, else derived from ``opts`` and the host count); a
    launch that misses it has no result and an error naming the host, the command and the deadline.

    Raises:
        PlaybookFailed: when the launch host cannot be reached.
    """
    if not hosts:
        raise BenchmarkError("nccl-tests needs at least one host")
    argv = launcher_argv(launcher, hosts, opts, {"NCCL_DEBUG": "INFO", **env}, oob_interface)
    deadline = nccl_deadline_s(opts, len(hosts), deadline_s)
    extravars = {
        "fabtune_launch_host": hosts[0],
        "fabtune_nccl_argv": argv,
        "fabtune_bench_deadline_s": deadline,
    }
    outcome = ansible.run_playbook(
        "bench_nccl.yml", inventory, extravars=extravars, timeout_s=run_timeout_s(deadline, 1)
    )
    outcome.raise_for_failure("nccl-tests launch")
    res = outcome.results(LAUNCH_TASK).get(hosts[0], {})
    output = f"{res.get('stdout', '')}\n{res.get('stderr', '')}"
    rc = int(res.get("rc", -1))
    result: nccl_tests.NcclTestsResult | None = None
    if timed_out(rc):
        error: str | None = missed_deadline(hosts[0], argv, deadline)
    else:
        try:
            result, error = nccl_tests.parse(output), None
        except ParseError as err:
            error = str(err)
    return NcclRun(rc, result, split_by_host(output), output, error, deadline)


def missed_deadline(host: str, argv: Sequence[str], deadline_s: int) -> str:
    """The evidence of a launch stopped at its deadline: host, command, deadline."""
    return f"timeout: {host}: {' '.join(argv)!r} missed its deadline of {deadline_s} s and was killed"
