"""The ssh options of fabtune's runs: the caller's own ssh_args kept, fabtune's keepalives added."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabtune import ansible

KEEPALIVES = "-o ServerAliveInterval=10 -o ServerAliveCountMax=3"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory and home with no Ansible configuration and no ANSIBLE_SSH_ARGS."""
    for name in ("ANSIBLE_SSH_ARGS", "ANSIBLE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    os.chmod(tmp_path, 0o755)  # Ansible ignores ./ansible.cfg in a world-writable directory
    if Path("/etc/ansible/ansible.cfg").exists():
        pytest.skip("/etc/ansible/ansible.cfg is this machine's: Ansible would read it")
    return tmp_path


def test_without_the_callers_ssh_args_a_run_has_ansibles_own_and_the_keepalives(bare: Path) -> None:
    assert ansible.ssh_args() == f"-C -o ControlMaster=auto -o ControlPersist=60s {KEEPALIVES}"
    assert ansible._envvars()["ANSIBLE_SSH_ARGS"] == ansible.SSH_ARGS == ansible.ssh_args()


@pytest.mark.parametrize(
    ("line", "own"),
    [
        ("ssh_args = -o ProxyJump=ops@bastion -C", "-o ProxyJump=ops@bastion -C"),
        ('ssh_args = "-o ProxyJump=bastion"', "-o ProxyJump=bastion"),  # unquoted, as Ansible reads it
        ("ssh_args =", ""),  # the caller wants none of Ansible's: only the keepalives are added
    ],
)
def test_the_ssh_args_of_the_callers_ansible_cfg_are_kept(bare: Path, line: str, own: str) -> None:
    (bare / "ansible.cfg").write_text(f"[defaults]\nforks = 5\n\n[ssh_connection]\n{line}\n")
    assert ansible._envvars()["ANSIBLE_SSH_ARGS"] == f"{own} {KEEPALIVES}".strip()


def test_the_callers_ansible_ssh_args_come_before_any_file(
    bare: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (bare / "ansible.cfg").write_text("[ssh_connection]\nssh_args = -o ProxyJump=from-file\n")
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o ProxyJump=from-env -o ServerAliveInterval=5")
    # the caller's interval holds (ssh takes an option's first value): only fabtune's count is added
    assert ansible.ssh_args() == "-o ProxyJump=from-env -o ServerAliveInterval=5 -o ServerAliveCountMax=3"


def test_the_checkouts_ansible_cfg_gets_no_keepalive_twice(bare: Path) -> None:
    """The checkout's own ansible.cfg (for plain ansible-playbook from it) sets the same keepalives."""
    (bare / "ansible.cfg").write_text((REPO / "ansible.cfg").read_text())
    assert ansible.ssh_args() == ansible.SSH_ARGS


def test_a_file_only_in_the_home_is_the_one_ansible_reads(bare: Path) -> None:
    home = Path(os.environ["HOME"])
    home.mkdir()
    (home / ".ansible.cfg").write_text("[ssh_connection]\nssh_args = -F /etc/fabric/ssh_config\n")
    assert ansible.ssh_args() == f"-F /etc/fabric/ssh_config {KEEPALIVES}"
