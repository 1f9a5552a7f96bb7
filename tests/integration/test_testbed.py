"""The emulated rack end to end: namespaces, sshd, Ansible over SSH with host-key checking."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from fabtune import ansible
from fabtune.testbed import build, layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.files import BASE_FILES, ROOT_SHELL_FILES
from fabtune.testbed.spec import TestbedSpec

pytestmark = pytest.mark.testbed


def on_host(spec: TestbedSpec, host: str, *command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (an argv, or one shell string) on ``host`` over SSH."""
    remote: str | tuple[str, ...] = command[0] if len(command) == 1 else command
    return subprocess.run(
        ssh_argv(spec.name, host, remote), capture_output=True, text=True, timeout=60, check=False
    )


def test_each_host_has_its_own_hostname_and_pid_namespace(roce3: TestbedSpec) -> None:
    for host in roce3.hosts:
        out = on_host(roce3, host.name, "hostname; cat /proc/1/comm")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [host.name, "sshd"]


def test_root_is_copy_on_write_per_host(roce3: TestbedSpec) -> None:
    assert on_host(roce3, "h01", "sh", "-c", "echo mine > /etc/fabtune-cow-probe").returncode == 0
    assert on_host(roce3, "h01", "cat", "/etc/fabtune-cow-probe").stdout == "mine\n"
    assert on_host(roce3, "h02", "test", "-e", "/etc/fabtune-cow-probe").returncode == 1
    assert not Path("/etc/fabtune-cow-probe").exists()


def test_nic_netdevs_are_real_and_mtu_shows_in_sysfs(roce3: TestbedSpec) -> None:
    dev = layout.nic_netdev(roce3, 0)
    assert on_host(roce3, "h02", "ip", "link", "set", dev, "mtu", "4200").returncode == 0
    assert on_host(roce3, "h02", "cat", f"/sys/class/net/{dev}/mtu").stdout == "4200\n"
    assert on_host(roce3, "h01", "cat", f"/sys/class/net/{dev}/mtu").stdout == "1500\n"


def test_hosts_reach_each_other_by_name_over_ssh(roce3: TestbedSpec) -> None:
    out = on_host(roce3, "h01", "ssh", "-o", "BatchMode=yes", "h03", "hostname")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "h03\n"


def test_ansible_runner_reaches_every_host(roce3: TestbedSpec) -> None:
    inventory = layout.testbed_dir(roce3.name) / "inventory.yml"
    outcome = ansible.run_module("ansible.builtin.command", "hostname", inventory)
    assert outcome.ok, outcome.failures()
    stdout = {t.host: t.result["stdout"] for t in outcome.tasks}
    assert stdout == {h.name: h.name for h in roce3.hosts}


def test_host_key_checking_is_on(roce3: TestbedSpec, tmp_path: Path) -> None:
    tb_dir = layout.testbed_dir(roce3.name)
    lines = (tb_dir / "ssh/known_hosts").read_text().splitlines()
    h02_key = lines[1].split(" ", 1)[1]
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{lines[0].split(' ', 1)[0]} {h02_key}\n")  # h01's names with h02's key
    inv = yaml.safe_load((tb_dir / "inventory.yml").read_text())
    inv["all"]["vars"]["ansible_ssh_common_args"] = (
        f"-o UserKnownHostsFile={forged} -o StrictHostKeyChecking=yes"
    )
    inv["all"]["vars"]["ansible_ssh_args"] = "-o ControlMaster=no -o ControlPath=none"  # no reused session
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
    outcome = ansible.run_module("ansible.builtin.ping", "", tmp_path / "inventory.yml", "h01")
    assert outcome.unreachable_hosts == ["h01"]


def test_inventory_groups(roce3: TestbedSpec) -> None:
    inv = yaml.safe_load((layout.testbed_dir(roce3.name) / "inventory.yml").read_text())
    children = inv["all"]["children"]
    assert set(children[f"rack_{roce3.name}"]["hosts"]) == {"h01", "h02", "h03"}
    assert "roce" in children


def test_status_reports_every_host_up(roce3: TestbedSpec) -> None:
    assert [(s.name, s.netns, s.running, s.ssh) for s in build.status(roce3.name)] == [
        (h.name, True, True, True) for h in roce3.hosts
    ]


def test_root_starts_with_a_fresh_debian_hosts_shell_files_not_this_machines(roce3: TestbedSpec) -> None:
    # base-files' postinst installs /usr/share/base-files/dot.{profile,bashrc} as root's; the
    # machine's own (the overlay's lower layer: a developer's pyenv set-up) must not reach a host
    expected = [
        (BASE_FILES / name).read_text() if (BASE_FILES / name).is_file() else None
        for name in ROOT_SHELL_FILES.values()
    ]
    for host in roce3.hosts:
        for dest, want in zip(ROOT_SHELL_FILES, expected, strict=True):
            out = on_host(roce3, host.name, "cat", "/" + dest)
            assert out.returncode == 0, out.stderr
            if want is not None:
                assert out.stdout == want
            else:
                assert out.stdout.startswith("#") and out.stdout.count("\n") == 1
