"""The fabric roles over SSH on an emulated rack: apply, idempotence, check mode, drift, refusal, restore.

State is read back with the emulated node tools over SSH (``mlnx_qos -i IF`` parsed by
``fabtune.perf.parsers.mlnx_qos``, ``cat`` of sysfs/configfs files), never from the roles' own output.
"""

from __future__ import annotations

import base64
import copy
import io
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.executor.module_common import _CachedModule

from fabtune import ansible
from fabtune.ansible import PROFILES, module_cache_key
from fabtune.paths import fabtune_home
from fabtune.perf.parsers import mlnx_qos
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((PROFILES / "roce.yml").read_text())["fabric_desired"]
HOSTS = ("h01", "h02")
NIC = "enp25s0np0"


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    """A 2-host RoCE rack at factory NIC defaults."""
    yield from make_testbed({"name": "itrole", "fabric": "roce", "hosts": 2, "subnet_base": "10.203",
                             "nics_per_host": 2, "gpus_per_host": 2, "seed": 5})


def inventory(spec: TestbedSpec) -> Path:
    return layout.testbed_dir(spec.name) / "inventory.yml"


def on_host(spec: TestbedSpec, host: str, command: str) -> str:
    out = subprocess.run(ssh_argv(spec.name, host, command), capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def apply(spec: TestbedSpec, desired: Any, *, check: bool = False,
          couplings: bool = True) -> ansible.RunOutcome:
    return ansible.run_playbook("drift.yml" if check else "apply.yml", inventory(spec), diff=True,
                                extravars={"fabric_desired": desired, "fabric_enforce_couplings": couplings})


def facts(spec: TestbedSpec) -> dict[str, dict[str, Any]]:
    outcome = ansible.run_playbook("facts.yml", inventory(spec)).raise_for_failure("facts")
    gathered = outcome.results("Gather the fabric state")
    return {host: dict(res["ansible_facts"]["fabric_facts"]) for host, res in gathered.items()}


def knobs(fact: dict[str, Any]) -> dict[str, Any]:
    """The applicable part of a host's facts (a snapshot): everything but ``hardware``."""
    return {k: v for k, v in fact.items() if k != "hardware"}


def changed_knobs(outcome: ansible.RunOutcome) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for task in outcome.tasks:
        if task.event != "runner_on_ok":
            continue
        for res in task.result.get("results", [task.result]):
            if res.get("changed"):
                for change in res.get("changes") or [{"knob": task.task}]:
                    out.setdefault(task.host, set()).add(str(change["knob"]))
    return out


def state(spec: TestbedSpec, host: str) -> dict[str, Any]:
    qos = mlnx_qos.parse(on_host(spec, host, f"mlnx_qos -i {NIC}"))
    base = f"/sys/class/net/{NIC}/ecn"
    return {
        "trust": qos.trust,
        "pfc": [p for p, on in enumerate(qos.pfc_enabled) if on],
        "ecn_np": on_host(spec, host, f"cat {base}/roce_np/enable/3").strip(),
        "cnp_prio": on_host(spec, host, f"cat {base}/roce_np/cnp_802p_prio").strip(),
        "tos": on_host(spec, host, "cat /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos").strip(),
        "mtu": on_host(spec, host, f"cat /sys/class/net/{NIC}/mtu").strip(),
        "nccl": on_host(spec, host, "cat /etc/nccl.conf 2>/dev/null || true"),
    }


@pytest.fixture(scope="module")
def before(rack: TestbedSpec) -> dict[str, dict[str, Any]]:
    """The factory state's facts, taken before any test applies anything."""
    return facts(rack)


def test_inconsistent_profile_is_refused_with_zero_hosts_changed(rack: TestbedSpec, before: Any) -> None:
    bad = copy.deepcopy(PROFILE)
    bad["nics"]["all"]["pfc"] = [4]
    outcome = apply(rack, bad)
    assert not outcome.ok
    assert all(outcome.changed_count(h) == 0 for h in HOSTS)
    messages = " ".join(str(t.result.get("msg")) for t in outcome.failures())
    assert "maps to priority 3, but PFC is on only for priorities [4]" in messages
    assert {knobs(f)["nics"][NIC]["trust"] for f in facts(rack).values()} == {"pcp"}


def test_interface_missing_on_a_host_is_refused_everywhere(rack: TestbedSpec, before: Any) -> None:
    bad = copy.deepcopy(PROFILE)
    bad["nics"]["enp99s0np0"] = {"mtu": 9000}
    outcome = apply(rack, bad)
    assert sorted(outcome.failed_hosts) == list(HOSTS)
    assert all(outcome.changed_count(h) == 0 for h in HOSTS)
    assert "'enp99s0np0' does not exist on this host" in str(outcome.failures()[0].result.get("msg"))


def test_apply_sets_the_state_read_back_by_the_tools(rack: TestbedSpec, before: Any) -> None:
    outcome = apply(rack, PROFILE)
    outcome.raise_for_failure("apply")
    assert "h01" in changed_knobs(outcome)
    for host in HOSTS:
        got = state(rack, host)
        assert got["trust"] == "dscp" and got["pfc"] == [3]
        assert (got["ecn_np"], got["cnp_prio"], got["tos"], got["mtu"]) == ("1", "6", "106", "4200")
        assert "NCCL_IB_TC=106\n" in got["nccl"] and got["nccl"].startswith("#")


def test_second_apply_changes_nothing(rack: TestbedSpec) -> None:
    cache = fabtune_home() / "ansible" / "modules" / module_cache_key()
    payloads = sorted(cache.glob("ansible_collections.*"))
    built = {p.name: p.stat().st_mtime_ns for p in payloads if not p.name.endswith(".lock")}
    outcome = apply(rack, PROFILE)
    outcome.raise_for_failure("apply again")
    assert [outcome.changed_count(h) for h in HOSTS] == [0, 0]
    # the first apply's module payloads outlived its run (callback module_cache): this one took them
    assert any(".fabric_qos-" in name for name in built)
    again = {p.name: p.stat().st_mtime_ns for p in payloads if p.name in built}
    assert again == built
    # and each carries its files' bytecode, which the hosts' Python (Debian 12's 3.11) imports
    qos = next(p for p in payloads if ".fabric_qos-" in p.name and not p.name.endswith(".lock"))
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(_CachedModule.load(str(qos)).zip_data))) as zf:
        names = set(zf.namelist())
    assert "ansible/module_utils/basic.pyc" in names
    assert {n for n in names if n.endswith(".pyc")} == {f"{n}c" for n in names if n.endswith(".py")}


def test_drift_reports_exactly_the_hand_changed_host_and_knob(rack: TestbedSpec) -> None:
    on_host(rack, "h02", f"mlnx_qos -i {NIC} --pfc 0,0,0,0,0,0,0,0 >/dev/null")
    outcome = apply(rack, PROFILE, check=True)
    outcome.raise_for_failure("drift")
    assert changed_knobs(outcome) == {"h02": {f"{NIC}.pfc"}}
    assert outcome.changed_count("h01") == 0
    assert state(rack, "h02")["pfc"] == []  # check mode changed nothing
    apply(rack, PROFILE).raise_for_failure("repair")
    assert state(rack, "h02")["pfc"] == [3]


def test_boot_script_reapplies_the_tos(rack: TestbedSpec) -> None:
    cm = "/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"
    on_host(rack, "h01", f"echo 0 > {cm}")
    on_host(rack, "h01", "/usr/local/sbin/fabtune-rdma-cm /etc/fabtune/rdma_cm.conf")
    assert on_host(rack, "h01", f"cat {cm}").strip() == "106"
    assert "ExecStart=/usr/local/sbin/fabtune-rdma-cm" in on_host(
        rack, "h01", "cat /etc/systemd/system/fabtune-rdma-cm.service")


def test_snapshot_restores_the_exact_prior_state(rack: TestbedSpec, before: dict[str, Any]) -> None:
    for host in HOSTS:
        snapshot = knobs(before[host])
        outcome = ansible.run_playbook("apply.yml", inventory(rack), limit=host, extravars={
            "fabric_desired": snapshot, "fabric_enforce_couplings": False})
        outcome.raise_for_failure("restore")
    after = facts(rack)
    for host in HOSTS:
        assert knobs(after[host]) == knobs(before[host])


def _host_files(spec: TestbedSpec, host: str) -> str:
    """What the roles wrote on a host, byte for byte (checksums of fabtune's files and links)."""
    paths = ("/etc/nccl.conf /etc/fabtune /usr/local/sbin/fabtune-* /usr/local/lib/fabtune "
             "/etc/systemd/system/fabtune-* /etc/systemd/system/multi-user.target.wants")
    return on_host(spec, host, f"find {paths} -type f -o -type l 2>/dev/null | sort | xargs sha256sum")


def test_an_apply_sliced_in_two_gives_the_state_of_one_run(rack: TestbedSpec, before: dict[str, Any]) -> None:
    """AWX job slicing runs a playbook once per slice of the inventory (each slice its own job):
    the apply playbook must leave every host as one run over the whole inventory does."""
    def state() -> tuple[dict[str, Any], dict[str, str]]:
        return ({h: knobs(f) for h, f in facts(rack).items()}, {h: _host_files(rack, h) for h in HOSTS})

    def restore() -> None:
        for host in HOSTS:
            ansible.run_playbook("apply.yml", inventory(rack), limit=host, extravars={
                "fabric_desired": knobs(before[host]), "fabric_enforce_couplings": False,
            }).raise_for_failure("restore")

    for host in HOSTS:  # two slices, one host each
        ansible.run_playbook("apply.yml", inventory(rack), limit=host,
                             extravars={"fabric_desired": PROFILE}).raise_for_failure(f"slice {host}")
    sliced = state()
    restore()
    apply(rack, PROFILE).raise_for_failure("one run")
    whole = state()
    restore()
    assert sliced == whole
    assert sliced[0] != {h: knobs(before[h]) for h in HOSTS}  # the profile changed something
