"""Fault matrix: a benchmark that hangs, one that prints garbage, one that prints nothing.

Hang: every alltoall_perf rank of the rack stops itself (SIGSTOP) before it starts: no peer gives
up, so only the deadline can end the launch. The tuning run must fail at its baseline with exit 6,
the evidence (host, command, deadline) journaled, no sample journaled, no rank left on a host.
Garbage and nothing: all_reduce_perf exits 0 with no table; each launch is a failed run with the
evidence, retried once, never a sample, and the run stops before any change.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fabtune import cli
from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.perf.deadline import task_timeout_s
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec
from tests.integration.ccrack import inventory
from tests.integration.conftest import make_testbed

pytestmark = pytest.mark.testbed

HOSTS = ("h01", "h02")
DEADLINE_S = 10
HUNG = "alltoall_perf"
# Replaces the emulated binary: the rank stops itself before anything, as a hung rank would.
STOPPING = f'#!/bin/sh\nkill -STOP $$\nexec /usr/local/bin/{HUNG}.real "$@"\n'
RANK_WORDS = (HUNG, "all_reduce_perf", "mpirun", "prted", "orted")


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed(
        {
            "name": "fbench",
            "fabric": "roce",
            "hosts": 2,
            "subnet_base": "10.246",
            "nics_per_host": 2,
            "gpus_per_host": 2,
            "seed": 5,
        }
    )


def on_host(rack: TestbedSpec, host: str, command: str, stdin: str = "") -> str:
    out = subprocess.run(
        ssh_argv(rack.name, host, command),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


@pytest.fixture
def hung_ranks(rack: TestbedSpec) -> Iterator[None]:
    binary = f"/usr/local/bin/{HUNG}"
    for host in HOSTS:
        on_host(
            rack, host, f"mv {binary} {binary}.real && cat > {binary} && chmod +x {binary}", stdin=STOPPING
        )
    yield
    for host in HOSTS:
        on_host(rack, host, f"mv {binary}.real {binary}")


def short_deadline(rack: TestbedSpec, tmp_path: Path) -> Path:
    """The rack's inventory with ``fabtune_bench_timeout_s`` set (absolute paths only: copyable)."""
    doc = yaml.safe_load(inventory(rack).read_text())
    doc["all"]["vars"]["fabtune_bench_timeout_s"] = DEADLINE_S
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def rank_processes(rack: TestbedSpec, host: str) -> list[str]:
    lines = on_host(rack, host, "ps -eo pid=,stat=,args=").splitlines()
    return [line for line in lines if any(word in line for word in RANK_WORDS)]


def test_a_hung_rank_is_a_failed_run_at_its_deadline(
    rack: TestbedSpec, tmp_path: Path, hung_ranks: None
) -> None:
    inv = short_deadline(rack, tmp_path)
    profile = tmp_path / "profile.yml"
    profile.write_text(yaml.safe_dump({"fabtune_tune": {"baseline_runs": 1, "min_runs": 1}}))
    start = time.monotonic()
    code = cli.main(["tune", "-i", str(inv), "--profile", str(profile)])
    elapsed = time.monotonic() - start
    assert code == ExitStatus.BENCHMARK
    # Two batches (the baseline's repetition and its retry), each with a hung launch bounded by its
    # task's timeout (plus a minute for facts and all_reduce): the deadline ended them, no peer did.
    assert elapsed < 2 * task_timeout_s(DEADLINE_S) + 60
    journal = Journal()
    run = journal.runs()[0]
    assert run.state == "failed" and "missed its deadline of 10 s" in run.summary["error"]
    steps = journal.steps(run.id)
    failed = [s.payload for s in steps if s.kind == "benchmark"]
    assert [(f["test"], f["host"], f["deadline_s"]) for f in failed] == [(HUNG, "h01", DEADLINE_S)] * 2
    assert all("missed its deadline" in f["reason"] and f"{HUNG} -b" in f["command"] for f in failed)
    assert [f["then"] for f in failed] == ["retrying once", "no retry left"]
    baseline = next(s for s in steps if s.kind == "phase" and s.name == "baseline")
    assert baseline.state == "failed" and "alltoall" not in baseline.payload  # no sample journaled
    assert not any(s.kind == "move" for s in steps)  # nothing was changed
    assert {h: rank_processes(rack, h) for h in HOSTS} == {"h01": [], "h02": []}


@pytest.mark.parametrize(
    ("fault", "script"),
    [("garbage", "#!/bin/sh\nhead -c 3000 /dev/urandom | base64\n"), ("nothing", "#!/bin/sh\nexit 0\n")],
)
def test_a_benchmark_printing_garbage_or_nothing_is_a_failed_run(
    rack: TestbedSpec, tmp_path: Path, fault: str, script: str
) -> None:
    binary = "/usr/local/bin/all_reduce_perf"
    before = {h: on_host(rack, h, "cat /etc/nccl.conf 2>/dev/null; mlnx_qos -i enp25s0np0") for h in HOSTS}
    for host in HOSTS:
        on_host(rack, host, f"mv {binary} {binary}.real && cat > {binary} && chmod +x {binary}", stdin=script)
    try:
        profile = tmp_path / "profile.yml"
        profile.write_text(yaml.safe_dump({"fabtune_tune": {"baseline_runs": 1, "min_runs": 1}}))
        code = cli.main(["tune", "-i", str(inventory(rack)), "--profile", str(profile)])
    finally:
        for host in HOSTS:
            on_host(rack, host, f"mv {binary}.real {binary}")
    assert code == ExitStatus.BENCHMARK
    journal = Journal()
    run = journal.runs()[0]
    assert run.state == "failed" and "all_reduce_perf" in run.summary["error"]
    steps = journal.steps(run.id)
    failed = [s.payload for s in steps if s.kind == "benchmark"]
    assert [f["test"] for f in failed] == ["all_reduce_perf"] * 2  # the launch and its one retry
    assert all("no readable result" in f["reason"] for f in failed), failed
    baseline = next(s for s in steps if s.kind == "phase" and s.name == "baseline")
    assert baseline.state == "failed" and "all_reduce" not in baseline.payload  # no sample journaled
    assert not any(s.kind == "move" for s in steps)
    assert {
        h: on_host(rack, h, "cat /etc/nccl.conf 2>/dev/null; mlnx_qos -i enp25s0np0") for h in HOSTS
    } == before
