"""The emulated subnet manager of an InfiniBand testbed, driven by the ib_sm role over SSH.

h01 is the SM host: ``testbed up`` writes its ``/etc/opensm/opensm.conf`` (Debian's
``opensm --create-config`` plus the spec) and hostinit starts the emulated opensm, which publishes
the master record every host's ``sminfo`` reads and the routing the fabric model sees.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible
from fabtune.ansible import PROFILES
from fabtune.sim.model.config import SmConfig
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.oracle import controller_fabric
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("h01", "h02")
# h01 (host index 1) is the SM: its mlx5_0 has LID 17 and node GUID 0xb83fd20300000100.
MASTER = re.compile(r"^sminfo: sm lid 17 sm guid 0xb83fd20300000100, activity count (\d+) "
                    r"priority (\d+) state 3 SMINFO_MASTER$")


def ib_profile() -> dict[str, Any]:
    """The shipped ib profile with the MLNX adaptive-routing engine instead of ftree."""
    desired = copy.deepcopy(yaml.safe_load((PROFILES / "ib.yml").read_text())
                            ["fabric_desired"])
    desired["sm"].update({"sm_flavor": "mlnx", "routing_engine": "ar_updn"})
    return dict(desired)


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    """A 2-host IB rack; h01 runs NVIDIA's SM (minhop, no adaptive routing until ar_updn)."""
    yield from make_testbed({"name": "itib", "fabric": "ib", "hosts": 2, "subnet_base": "10.206",
                             "nics_per_host": 2, "gpus_per_host": 2, "seed": 7,
                             "sm": {"host": "h01", "routing_engine": "minhop", "flavor": "mlnx",
                                    "adaptive_routing": False}})


def on_host(spec: TestbedSpec, host: str, command: str, rc: int = 0) -> str:
    out = subprocess.run(ssh_argv(spec.name, host, command), capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == rc, out.stderr + out.stdout
    return out.stdout + out.stderr


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout:.0f} s")


def sminfo_ok(spec: TestbedSpec, host: str) -> bool:
    out = subprocess.run(ssh_argv(spec.name, host, "sminfo"), capture_output=True, text=True,
                         timeout=60, check=False)
    return out.returncode == 0 and bool(MASTER.match(out.stdout.strip()))


def fabric_sm(spec: TestbedSpec) -> SmConfig:
    return controller_fabric(spec.name).sm


def test_sm_host_has_opensm_conf_and_master(rack: TestbedSpec) -> None:
    conf = on_host(rack, "h01", "cat /etc/opensm/opensm.conf")
    assert "\nrouting_engine minhop\n" in conf and "# Supported engines:" in conf
    on_host(rack, "h02", "test ! -e /etc/opensm/opensm.conf")
    wait_for(lambda: all(sminfo_ok(rack, h) for h in HOSTS))
    first = MASTER.match(on_host(rack, "h02", "sminfo").strip())
    assert first is not None
    wait_for(lambda: int(MASTER.match(on_host(rack, "h02", "sminfo").strip())[1])  # type: ignore[index]
             > int(first[1]))
    sm = fabric_sm(rack)
    assert (sm.routing_engine, sm.adaptive_routing) == ("minhop", False)


@pytest.mark.parametrize("host", HOSTS)
def test_ibstat_shows_infiniband_and_sm_lid(rack: TestbedSpec, host: str) -> None:
    out = on_host(rack, host, "ibstat mlx5_0")
    assert "Link layer: InfiniBand" in out
    assert re.search(r"SM lid: 17\n", out)  # the master SM's LID, as sminfo says


def test_ib_profile_changes_the_sm_and_is_idempotent(rack: TestbedSpec) -> None:
    inventory = layout.testbed_dir(rack.name) / "inventory.yml"
    desired = ib_profile()
    first = ansible.run_playbook("apply.yml", inventory, extravars={"fabric_desired": desired})
    first.raise_for_failure("apply ib profile")
    assert first.changed_count("h01") > 0
    verified = first.results("Check that a master subnet manager answers")
    assert "h01" in verified and not verified["h01"].get("skipped")
    conf = on_host(rack, "h01", "cat /etc/opensm/opensm.conf")
    assert "\nrouting_engine ar_updn\n" in conf and "ar_enable" not in conf
    wait_for(lambda: fabric_sm(rack).routing_engine == "ar_updn")
    sm = fabric_sm(rack)
    assert (sm.adaptive_routing, sm.qos, sm.lmc) == (True, True, 0)
    shared = json.loads((layout.testbed_dir(rack.name) / "fabric/sm.json").read_text())
    assert shared["sm_priority"] == 14
    wait_for(lambda: "priority 14 " in on_host(rack, "h02", "sminfo"))

    second = ansible.run_playbook("apply.yml", inventory, extravars={"fabric_desired": desired})
    second.raise_for_failure("re-apply ib profile")
    assert {h: second.changed_count(h) for h in HOSTS} == {"h01": 0, "h02": 0}
    assert "h01" in second.results("Check that a master subnet manager answers")


def test_unknown_engine_is_logged_and_minhop_routes(rack: TestbedSpec) -> None:
    """As opensm's setup_routing_engines: an unknown engine is reported and skipped, minhop
    routes, the SM stays master; an unknown key is reported too (osm_subn_parse_conf_file)."""
    on_host(rack, "h01", "cp /etc/opensm/opensm.conf /root/opensm.conf.good && "
                         "sed -i 's/^routing_engine .*/routing_engine no_such_engine/' "
                         "/etc/opensm/opensm.conf && echo 'ar_enable TRUE' >> /etc/opensm/opensm.conf")
    try:
        wait_for(lambda: fabric_sm(rack).routing_engine == "minhop")
        assert sminfo_ok(rack, "h02")
        log = on_host(rack, "h01", "cat /var/log/opensm.log")
        assert "cannot find or setup routing engine 'no_such_engine'" in log
        assert 'Unrecognized token: "ar_enable"' in log
    finally:
        on_host(rack, "h01", "cp /root/opensm.conf.good /etc/opensm/opensm.conf")
    wait_for(lambda: fabric_sm(rack).routing_engine == "ar_updn")


def test_no_local_port_means_no_master(rack: TestbedSpec) -> None:
    on_host(rack, "h01", "cp /etc/opensm/opensm.conf /root/opensm.conf.good && "
                         "sed -i 's/^guid .*/guid 0x1/' /etc/opensm/opensm.conf")
    try:
        wait_for(lambda: not sminfo_ok(rack, "h02"))
        assert on_host(rack, "h02", "sminfo", rc=255) == "sminfo: iberror: failed: query\n"
        assert fabric_sm(rack).routing_engine == "ar_updn"  # the switches keep their routes
    finally:
        on_host(rack, "h01", "cp /root/opensm.conf.good /etc/opensm/opensm.conf")
    wait_for(lambda: all(sminfo_ok(rack, h) for h in HOSTS))


def test_once_the_armed_run_reverted_opensm_conf_is_not_changed(rack: TestbedSpec) -> None:
    """The ib_sm role's changes go through the armed-run guard as the NIC roles' do: after a host's
    revert fired, the same apply's roles refuse (``reverted``) and opensm.conf stays as the revert
    left it, instead of holding part of the move with no revert left to undo it."""
    from tests.integration.ccrack import apply_armed, facts, let_pass, shorten, wait_reverted

    apply_armed(rack, ib_profile(), "sm-late", facts(rack)).raise_for_failure("armed apply")
    armed = on_host(rack, "h01", "cat /etc/opensm/opensm.conf")
    shorten(rack, "sm-late", 20)
    let_pass(rack, 20)
    wait_reverted(rack, "sm-late", 15)
    reverted = on_host(rack, "h01", "cat /etc/opensm/opensm.conf")
    assert reverted == armed
    moved = ib_profile()
    moved["sm"]["sm_priority"] = 3
    late = ansible.run_playbook("apply.yml", layout.testbed_dir(rack.name) / "inventory.yml",
                                extravars={"fabric_desired": moved, "fabric_armed_run": "sm-late",
                                           "fabric_roles": ["ib_sm"]})  # a move of the SM's knobs
    refused = {t.task: t for t in late.failures() if t.host == "h01"}
    assert not late.ok and "Set the keys opensm reads only at start" in refused, refused
    for task in refused.values():
        assert task.result.get("reverted") is True, task.result
        assert "run sm-late was already reverted on this host" in str(task.result.get("msg"))
    assert on_host(rack, "h01", "cat /etc/opensm/opensm.conf") == reverted
    assert "\nsm_priority 3\n" not in reverted


def test_dead_daemon_means_no_master(rack: TestbedSpec) -> None:
    """Last in the module: the SM stays down afterwards."""
    pid = on_host(rack, "h01", "pgrep -f '^/.*python.* -m fabtune.sim.opensm'").split()
    assert len(pid) == 1
    on_host(rack, "h01", f"kill {pid[0]}")
    wait_for(lambda: not sminfo_ok(rack, "h02"))
    on_host(rack, "h02", "sminfo", rc=255)
    outcome = ansible.run_playbook("apply.yml", layout.testbed_dir(rack.name) / "inventory.yml",
                                   extravars={"fabric_desired": ib_profile()})
    assert outcome.failed_hosts == ["h01"]
