"""The shipped roce profile through iproute2 dcb on hosts without mlnx_qos (Debian 12's 6.1, and 6.2).

Rack "dc1": h01 has iproute2 6.1.0 (no ``dcb apptrust``), h02 6.2.0 (``apptrust`` known, but the
mlx5 driver implements no APP trust ops), h03 5.11.0 (``dcb`` without ``app``); none has
mlnx-tools, so the roce_qos role's ``auto`` backend is dcb; h03 is refused at preflight. Trust
follows the DSCP APP entries, as the mlx5 driver does. State is read back with the emulated tools
over SSH, never from the roles' own output.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune import ansible, drift
from fabtune.ansible import PROFILES
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed

pytestmark = pytest.mark.testbed

PROFILE = yaml.safe_load((PROFILES / "roce.yml").read_text())["fabric_desired"]
HOSTS = ("h01", "h02")
LIMIT = "h01,h02"


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed({
        "name": "dc1", "fabric": "roce", "hosts": 3, "subnet_base": "10.250", "seed": 13,
        "nics_per_host": 1, "gpus_per_host": 1, "tools": {"mlnx-tools": "none"},
        "overrides": {"h02": {"tools": {"iproute2": "6.2.0"}}, "h03": {"tools": {"iproute2": "5.11.0"}}},
    })


def inventory(spec: TestbedSpec) -> Path:
    return layout.testbed_dir(spec.name) / "inventory.yml"


def on_host(spec: TestbedSpec, host: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ssh_argv(spec.name, host, command), capture_output=True, text=True,
                          timeout=60, check=False)


def dcb_state(spec: TestbedSpec, host: str) -> dict[str, Any]:
    netdev = layout.nic_netdev(spec, 0)
    app = on_host(spec, host, f"dcb -j app show dev {netdev} dscp-prio")
    pfc = on_host(spec, host, f"dcb -j pfc show dev {netdev}")
    ets = on_host(spec, host, f"dcb -j ets show dev {netdev}")
    trust = on_host(spec, host, f"cat /sys/class/net/{netdev}/qos/trust")
    return {
        "dscp_prio": json.loads(app.stdout).get("dscp_prio", []),
        "pfc": [p for p, on in enumerate(json.loads(pfc.stdout)["prio_pfc"]) if on],
        "tsa": json.loads(ets.stdout)["tc_tsa"],
        "trust": trust.stdout.strip(),
    }


def test_hosts_have_dcb_of_their_release_and_no_mlnx_qos(rack: TestbedSpec) -> None:
    versions = {h: on_host(rack, h, "dcb -V").stdout for h in HOSTS}
    assert versions == {"h01": "dcb utility, iproute2-6.1.0\n", "h02": "dcb utility, iproute2-6.2.0\n"}
    probe = on_host(rack, "h01", f"dcb -j apptrust show dev {layout.nic_netdev(rack, 0)}")
    assert (probe.returncode, probe.stderr) == (1, 'Object "apptrust" is unknown\n')
    assert on_host(rack, "h01", "command -v mlnx_qos").returncode != 0


def test_roce_profile_applies_through_dcb_then_changes_nothing(rack: TestbedSpec) -> None:
    before = {h: dcb_state(rack, h) for h in HOSTS}
    assert all(s["trust"] == "pcp" and s["dscp_prio"] == [] for s in before.values())
    outcome = ansible.run_playbook("apply.yml", inventory(rack), diff=True, limit=LIMIT,
                                   extravars={"fabric_desired": PROFILE})
    outcome.raise_for_failure("apply")
    for host in HOSTS:
        assert dcb_state(rack, host) == {
            "dscp_prio": [[26, 3], [48, 6]], "pfc": [3], "trust": "dscp",
            "tsa": PROFILE["nics"]["all"]["tsa"],
        }
    again = ansible.run_playbook("apply.yml", inventory(rack), diff=True, limit=LIMIT,
                                 extravars={"fabric_desired": PROFILE})
    again.raise_for_failure("apply again")
    assert [again.changed_count(h) for h in HOSTS] == [0, 0]
    check = ansible.run_playbook("drift.yml", inventory(rack), check=True, diff=True, limit=LIMIT,
                                 extravars={"fabric_desired": PROFILE})
    check.raise_for_failure("drift")
    assert not drift.build_report(check, HOSTS).drifted


def h03_state(spec: TestbedSpec) -> tuple[str, str, str]:
    netdev = layout.nic_netdev(spec, 0)
    app = on_host(spec, "h03", f"dcb app show dev {netdev}")
    assert (app.returncode, app.stderr) == (1, 'Object "app" is unknown\n')  # 5.11.0
    return (on_host(spec, "h03", f"dcb -j pfc show dev {netdev}").stdout,
            on_host(spec, "h03", f"cat /sys/class/net/{netdev}/qos/trust").stdout,
            on_host(spec, "h03", f"cat /sys/class/net/{netdev}/mtu").stdout)


def test_a_dcb_without_app_is_refused_at_preflight(rack: TestbedSpec) -> None:
    before = h03_state(rack)
    outcome = ansible.run_playbook("apply.yml", inventory(rack), diff=True,
                                   extravars={"fabric_desired": PROFILE})
    assert outcome.failed_hosts == ["h03"]
    failure = next(t for t in outcome.failures() if t.host == "h03")
    assert failure.task == "Validate the desired fabric state"
    message = str(failure.result["msg"])
    assert "dcb (iproute2 5.11.0)" in message and "iproute2 5.12 or later" in message
    assert "mlnx_qos" in message
    assert h03_state(rack) == before  # any_errors_fatal: nothing changed anywhere
    assert sum(outcome.changed_count(h) for h in ("h01", "h02", "h03")) == 0
