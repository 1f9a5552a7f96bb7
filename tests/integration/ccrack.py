"""The commit-confirmed tests' rack and helpers: apply armed, confirm, read state back over SSH."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible
from fabtune.ansible import PROFILES
from fabtune.inventory import read_inventory
from fabtune.perf.parsers import mlnx_qos
from fabtune.testbed import clock, layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune.backend import AnsibleBackend
from tests.integration.conftest import make_testbed

REPO = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((PROFILES / "roce.yml").read_text())["fabric_desired"]
HOSTS = ("h01", "h02")
NIC = "enp25s0np0"
# The deadline is armed before the roles run and extended when the apply ends (its last play): it
# must outlast the apply itself (about 10 s on a 2-host testbed; over 45 s seen when the whole
# suite, fault matrix included, loads the machine) and then the checks and the confirm after it.
DEADLINE = 90


def build(name: str, subnet_base: str) -> Iterator[TestbedSpec]:
    yield from make_testbed({"name": name, "fabric": "roce", "hosts": 2, "subnet_base": subnet_base,
                             "nics_per_host": 2, "gpus_per_host": 2, "seed": 7})


def inventory(spec: TestbedSpec) -> Path:
    return layout.testbed_dir(spec.name) / "inventory.yml"


def on_host(spec: TestbedSpec, host: str, command: str, ok: bool = True) -> str:
    out = subprocess.run(ssh_argv(spec.name, host, command), capture_output=True, text=True,
                         timeout=60, check=False)
    if ok:
        assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def facts(spec: TestbedSpec) -> dict[str, dict[str, Any]]:
    outcome = ansible.run_playbook("facts.yml", inventory(spec)).raise_for_failure("facts")
    gathered = outcome.results("Gather the fabric state")
    return {h: {k: v for k, v in res["ansible_facts"]["fabric_facts"].items() if k != "hardware"}
            for h, res in gathered.items()}


def tool_state(spec: TestbedSpec, host: str) -> dict[str, Any]:
    qos = mlnx_qos.parse(on_host(spec, host, f"mlnx_qos -i {NIC}"))
    return {
        "trust": qos.trust,
        "pfc": [p for p, on in enumerate(qos.pfc_enabled) if on],
        "tos": on_host(spec, host, "cat /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos").strip(),
        "mtu": on_host(spec, host, f"cat /sys/class/net/{NIC}/mtu").strip(),
        "nccl": on_host(spec, host, "cat /etc/nccl.conf 2>/dev/null || true"),
    }


def apply_armed(spec: TestbedSpec, desired: Any, run_id: str, snapshots: dict[str, Any], *,
                check: bool = False, deadline: int = DEADLINE, apply_s: int = 0) -> ansible.RunOutcome:
    return ansible.run_playbook("apply.yml", inventory(spec), check=check, extravars={
        "fabric_desired": desired, "fabric_revert_run_id": run_id, "fabric_revert_snapshots": snapshots,
        "fabric_revert_deadline_s": deadline, "fabric_revert_apply_s": apply_s})


def armed_deadline(outcome: ansible.RunOutcome) -> float:
    """The latest revert deadline the apply left armed (epoch seconds; its last play extends the one
    armed at its start), checked to be still ahead."""
    armed = outcome.results("Arm the revert to the snapshot")
    extended = outcome.results("Extend the revert deadline (the controller is alive)")
    deadlines = [float(r["deadline"]) for r in (extended or armed).values() if r.get("deadline")]
    assert len(deadlines) == len(HOSTS), (armed, extended)
    assert time.time() < min(deadlines), "the apply outlasted the revert deadline: raise DEADLINE"
    return max(deadlines)


def shorten(spec: TestbedSpec, run_id: str, seconds: int, *, playbook: bool = False) -> float:
    """Move the armed revert of ``run_id`` to ``seconds`` from now on every host, once the apply is
    done: a test then waits that long, not the DEADLINE an apply under load needs. As the loop
    extends it (the backend's direct SSH channel, ``fabtune-revert --extend``), or with ``playbook``
    through extend.yml (what operators run). Returns the latest new deadline (epoch seconds)."""
    if playbook:
        outcome = ansible.run_playbook("extend.yml", inventory(spec), extravars={
            "fabric_run_id": run_id, "fabric_revert_deadline_s": seconds})
    else:
        backend = AnsibleBackend(read_inventory(inventory(spec)), deadline_s=seconds)
        outcome = backend.extend(run_id)
        assert (outcome.artifact_dir / "results.json").is_file()  # the direct channel, not the playbook
    outcome.raise_for_failure("extend")
    extended = outcome.results("Extend the revert deadline (the controller is alive)")
    deadlines = [float(r["deadline"]) for r in extended.values() if r.get("deadline")]
    assert len(deadlines) == len(HOSTS), extended
    return max(deadlines)


def let_pass(spec: TestbedSpec, seconds: float) -> dict[str, list[str]]:
    """Let ``seconds`` pass for every revert timer waiting now (the testbed's clock,
    ``fabtune.testbed.clock``): a test sees a deadline go by without waiting it out. Returns, per
    host, the timers that were waiting."""
    return clock.advance(spec.name, seconds)


def timer_of(run_id: str) -> str:
    return f"fabtune-revert-{run_id}"


def confirm(spec: TestbedSpec, run_id: str) -> ansible.RunOutcome:
    return ansible.run_playbook("confirm.yml", inventory(spec), extravars={"fabric_run_id": run_id})


def timer_active(spec: TestbedSpec, host: str, run_id: str) -> bool:
    out = on_host(spec, host, f"systemctl is-active fabtune-revert-{run_id}.timer", ok=False)
    return out.strip() == "active"


def wait_reverted(spec: TestbedSpec, run_id: str, seconds: float) -> None:
    end = time.time() + seconds
    marks = [f"/var/lib/fabtune/revert/{run_id}.reverted.json"]
    while time.time() < end:
        if all(on_host(spec, h, f"test -e {marks[0]} && echo yes || true").strip() == "yes" for h in HOSTS):
            return
        time.sleep(0.5)
    logs = {h: on_host(spec, h, "cat /var/log/fabtune-revert.log /run/systemd/transient/*.log 2>&1 || true",
                       ok=False) for h in HOSTS}
    pytest.fail(f"run {run_id} not reverted within {seconds} s: {logs}")


