"""The fault matrix's rig: a factory rack, the CLI in a child process, faults to inject, state to compare.

Every row ends the same way: every host's managed knobs are compared with the state the journal
holds for it (the pre-run snapshot after a rollback), and the journal is read for what it says.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fabtune.journal import Journal, Run, Step
from fabtune.testbed import layout
from fabtune.testbed.layout import Names
from fabtune.testbed.spec import TestbedSpec
from tests.integration.tunerack import State, build, current_state, drift_from, inventory

# One move (the lossless class, the switches' priority first), a short baseline, a revert deadline
# long enough that hosts never revert by themselves while the controller still acts.
ONE_MOVE = {
    "skip_groups": ["routing", "mtu", "qps", "gdr"],
    "baseline_runs": 2,
    "min_runs": 2,
    "max_runs": 4,
    "revert_deadline_s": 600,
}
NO_MOVE = {**ONE_MOVE, "skip_groups": ["lossless", "routing", "mtu", "qps", "gdr"]}
CLEAN = {"h01": [], "h02": []}

__all__ = [
    "CLEAN",
    "NO_MOVE",
    "ONE_MOVE",
    "Child",
    "State",
    "cli",
    "current_state",
    "drift_from",
    "factory_rack",
    "inventory",
    "profile",
    "tune_child",
    "wait_step",
]


def factory_rack(name: str, subnet_base: str) -> Iterator[TestbedSpec]:
    """Two factory-default hosts behind switches lossless on priority 3 (the loop's first guess)."""
    yield from build(name, subnet_base, seed=31, lossless=3)


def profile(tmp: Path, options: dict[str, object], name: str = "profile.yml") -> Path:
    path = tmp / name
    path.write_text(json.dumps({"fabtune_tune": options}))
    return path


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """``fabtune ARGS`` in a child process, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "fabtune", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env or os.environ.copy(),
    )


@dataclass
class Child:
    """``fabtune ARGS`` running in the background, in its own session (kill -9 takes its Ansible too)."""

    proc: subprocess.Popen[str]
    out: Path
    started: float  # wall clock, as the journal's run.started

    @classmethod
    def start(cls, tmp: Path, *args: str) -> Child:
        out = tmp / f"child-{time.monotonic_ns()}.out"
        started = time.time()
        proc = subprocess.Popen(
            [sys.executable, "-m", "fabtune", *args],
            stdout=out.open("w"),
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        return cls(proc, out, started)

    def kill9(self) -> None:
        """SIGKILL the controller and every process under it at once, as when its machine or
        container dies (ansible-runner starts ansible-playbook in a session of its own, so the
        process group alone would leave the playbook running)."""
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: none can start another meanwhile
            for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        self.proc.wait(timeout=30)

    def pause(self, paused: bool = True) -> None:
        """SIGSTOP (or SIGCONT) the controller and every process under it: it does nothing meanwhile."""
        sig = signal.SIGSTOP if paused else signal.SIGCONT
        for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def wait(self, timeout: float = 900) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.out.read_text()


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid``, from /proc (children before their own children)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def wait_step(
    child: Child | None,
    pred: Callable[[Run, Step], bool],
    timeout: float = 600,
    *,
    new_run: bool = True,
) -> tuple[Run, Step]:
    """The newest run's first step that satisfies ``pred``, polled from the journal.

    With ``new_run`` (and a child) only runs the child started count: the journal is shared by
    every test file a worker runs, and an earlier row's killed run keeps its steps' last states.
    """
    deadline = time.monotonic() + timeout
    since = child.started - 1.0 if child is not None and new_run else 0.0
    while time.monotonic() < deadline:
        journal = Journal()
        for run in [r for r in journal.runs(3) if r.started >= since]:
            for step in journal.steps(run.id):
                if pred(run, step):
                    return run, step
        if child is not None and child.proc.poll() is not None:
            raise AssertionError(
                f"the child ended (rc {child.proc.returncode}) first:\n{child.output()[-3000:]}"
            )
        time.sleep(0.3)
    raise AssertionError(f"no such step in time:\n{child.output()[-3000:] if child else ''}")


def mgmt_link(spec: TestbedSpec, host: str, up: bool) -> None:
    """Cut (or restore) ``host``'s management network: its controller-side veth goes down."""
    veth = Names(spec.name).mgmt_veth(spec.host(host))
    subprocess.run(["ip", "link", "set", "dev", veth, "up" if up else "down"], check=True, timeout=30)


def testbed_dir(spec: TestbedSpec) -> Path:
    return layout.testbed_dir(spec.name)


def tune_child(rack: TestbedSpec, tmp: Path, options: dict[str, object]) -> Child:
    """``fabtune tune`` on ``rack`` with these tuning options, in the background."""
    return Child.start(tmp, "tune", "-i", str(inventory(rack)), "--profile", str(profile(tmp, options)))


# What a host keeps that no fabtune verb may change without saying so: its whole copy-on-write root
# (but logs, Ansible's and Python's scratch), the emulated NIC and DCB state, configfs, link MTUs.
VOLATILE = ("var/log/", "root/.ansible/", "tmp/", "var/tmp/", "run/", "work/")


def host_fingerprint(spec: TestbedSpec) -> dict[str, dict[str, str]]:
    """Per host, a digest of every file the host's state lives in, and its links' MTUs."""
    prints: dict[str, dict[str, str]] = {}
    for host in spec.hosts:
        root = testbed_dir(spec) / "hosts" / host.name
        files: dict[str, str] = {}
        for part in ("upper", "emu", "configfs"):
            for path in sorted((root / part).rglob("*")):
                rel = path.relative_to(root / part).as_posix()
                if not path.is_file() or rel.startswith(VOLATILE) or "__pycache__" in rel:
                    continue
                files[f"{part}/{rel}"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        links = subprocess.run(
            ["ip", "-n", Names(spec.name).netns(host.name), "-o", "link"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        mtus = re.findall(r"^\d+: ([^:@]+)[^ ]*:.* mtu (\d+)", links, re.M)
        files["ip-link-mtu"] = ",".join(f"{name}={mtu}" for name, mtu in mtus)
        prints[host.name] = files
    return prints
