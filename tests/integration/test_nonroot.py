"""A rack whose SSH login is a normal user with sudo: apply, tune, rollback and drift pass.

The testbed spec's ``login_user: ops`` creates ``ops`` inside every host (passwordless sudo) and the
inventory logs in as ``ops``. The roles escalate only where they need root; the benchmarks run as
``ops``. Evidence of the latter comes from the hosts: an ordinary user may not write NIC state, so
an emulated benchmark run as ``ops`` posts its counter deltas (perftest always has traffic to
count) to the host's counter engine, which logs the poster's uid (``fabtune.sim.nicd``); one that
escalated would count by itself, unlogged.
"""

from __future__ import annotations

import pwd
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fabtune.cli import main
from fabtune.journal import Journal
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import run as tune_run
from tests.integration.ccrack import (
    HOSTS,
    NIC,
    apply_armed,
    armed_deadline,
    facts,
    let_pass,
    on_host,
    shorten,
    timer_of,
    wait_reverted,
)
from tests.integration.conftest import make_testbed
from tests.integration.tunerack import FACTORY_NICS, current_state, inventory

pytestmark = pytest.mark.testbed

USER = "ops"
# The shortest tune that still changes the rack: one move (4 QPs per connection), two runs a side.
SHORT = {"max_runs": 2, "min_runs": 2, "baseline_runs": 2, "batch": 2,
         "skip_groups": ["lossless", "routing", "mtu", "gdr"]}


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed(
        {
            "name": "nr1",
            "hosts": 2,
            "subnet_base": "10.251",
            "nics_per_host": 2,
            "gpus_per_host": 2,
            "seed": 5,
            "login_user": USER,
            "initial": FACTORY_NICS,
            "switch": {"pfc_priorities": [3], "ecn_priorities": [3]},
        }
    )


def _upper(spec: TestbedSpec, host: str) -> Path:
    return layout.testbed_dir(spec.name) / "hosts" / host / "upper"


def _uid(spec: TestbedSpec, host: str) -> int:
    """The login user's uid in the host's own /etc/passwd (the overlay's copy)."""
    for line in (_upper(spec, host) / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == USER:
            return int(fields[2])
    raise AssertionError(f"{host}: no {USER} in its /etc/passwd")


def _posters(spec: TestbedSpec, host: str) -> set[tuple[int, str]]:
    """(uid, command) of every counter post the host's engine applied."""
    log = (_upper(spec, host) / "var/log/fabtune-nicd.log").read_text()
    return {(int(m[1]), m[2]) for m in re.finditer(r" for uid=(\d+) pid=\d+ \((\S+)\)", log)}


def test_the_login_user_exists_only_on_the_hosts_with_sudo(rack: TestbedSpec) -> None:
    inv = yaml.safe_load(inventory(rack).read_text())["all"]["vars"]
    assert (inv["ansible_user"], inv["ansible_become_method"]) == (USER, "sudo")
    assert "ansible_become" not in inv  # escalation is per task, never for the whole login
    with pytest.raises(KeyError):
        pwd.getpwnam(USER)  # this machine's /etc/passwd is untouched
    for host in ("h01", "h02"):
        assert _uid(rack, host) >= 1000
        drop_in = _upper(rack, host) / f"etc/sudoers.d/fabtune-{USER}"
        assert stat.S_IMODE(drop_in.stat().st_mode) == 0o440
        assert f"{USER} ALL=(ALL:ALL) NOPASSWD: ALL" in drop_in.read_text()
    as_user = [a.replace("root@", f"{USER}@") for a in ssh_argv(rack.name, "h01", "id -un; sudo -n id -un")]
    out = subprocess.run(as_user, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out == [USER, "root"]


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_apply_tune_rollback_drift_as_the_login_user(rack: TestbedSpec) -> None:
    inv = str(inventory(rack))
    assert main(["apply", "-i", inv, "--profile", "roce"]) == 0
    applied = current_state(rack)  # read as ops, unescalated (RoCE facts need no root)
    for host, state in applied.items():
        nics = state["nics"]
        assert isinstance(nics, dict) and nics, host
        for netdev, nic in nics.items():
            assert (nic["trust"], nic["pfc"], nic["mtu"], nic["roce_tos"]) == ("dscp", [3], 4200, 106), (
                host, netdev)
        conf = _upper(rack, host) / "etc/nccl.conf"
        assert conf.stat().st_uid == 0 and "NCCL_IB_TC=106" in conf.read_text()  # written via sudo
    assert main(["drift", "-i", inv, "--profile", "roce"]) == 0

    result, _report = tune_run.tune(inventory(rack), SHORT)
    moves = [s for s in Journal().steps(result.run_id) if s.kind == "move"]
    assert moves, "the short tune changed nothing"
    for host in ("h01", "h02"):  # the revert was installed and armed through sudo
        assert (_upper(rack, host) / "usr/local/sbin/fabtune-revert").stat().st_uid == 0
    assert main(["rollback", result.run_id]) == 0
    assert current_state(rack) == applied
    assert main(["drift", "-i", inv, "--profile", "roce"]) == 0



def test_benchmarks_run_as_the_login_user(rack: TestbedSpec) -> None:
    """perftest pairs through bench_ib_write_bw.yml: servers and clients ran as ops, not escalated."""
    assert main(["bench", "pairs", "-i", str(inventory(rack)), "--rails", "1", "--duration", "1"]) == 0
    for host in ("h01", "h02"):
        posters = _posters(rack, host)
        assert (_uid(rack, host), "ib_write_bw") in posters, (host, posters)
        assert {uid for uid, _cmd in posters} == {_uid(rack, host)}, (host, posters)


def test_a_revert_armed_through_sudo_fires_as_root(rack: TestbedSpec) -> None:
    """Commit-confirmed as ops: the revert is installed and armed via sudo and, unconfirmed, fires."""
    snapshot = facts(rack)
    outcome = apply_armed(rack, {"nics": {"all": {"mtu": 9000}}}, "nr-revert", snapshot)
    armed_deadline(outcome.raise_for_failure("apply"))
    assert {h: s["nics"][NIC]["mtu"] for h, s in facts(rack).items()} == {"h01": 9000, "h02": 9000}
    shorten(rack, "nr-revert", 20)  # extended through sudo as well
    assert let_pass(rack, 20) == {h: [timer_of("nr-revert")] for h in HOSTS}  # the testbed's clock
    wait_reverted(rack, "nr-revert", 15)
    assert facts(rack) == snapshot
    for host in HOSTS:
        assert "nr-revert: reverted" in on_host(rack, host, "cat /var/log/fabtune-revert.log")
