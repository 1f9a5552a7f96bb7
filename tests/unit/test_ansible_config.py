"""fabtune's own ansible.cfg: taken for a run only where Ansible would find no configuration of the
caller's, by Ansible's own lookup (ansible.config.manager.find_ini_config_file: ANSIBLE_CONFIG, then
./ansible.cfg unless the working directory is world-writable, ~/.ansible.cfg, /etc/ansible/ansible.cfg),
and read by Ansible as the setting it names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabtune import ansible

SYSTEM_CONFIG = Path("/etc/ansible/ansible.cfg")


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A working directory and a home with no ansible.cfg, no ANSIBLE_CONFIG; returns the directory."""
    if SYSTEM_CONFIG.exists():
        pytest.skip(f"{SYSTEM_CONFIG} exists on this machine: Ansible would always find a configuration")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(mode=0o755)
    home.mkdir()
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    return work


def test_with_no_configuration_of_the_callers_fabtunes_own_is_taken(bare: Path) -> None:
    assert ansible.config_env() == {"ANSIBLE_CONFIG": str(ansible.DEFAULT_CONFIG)}
    assert ansible._envvars()["ANSIBLE_CONFIG"] == str(ansible.DEFAULT_CONFIG)
    assert ansible.DEFAULT_CONFIG.is_file()


@pytest.mark.parametrize("where", ["work", "home", "env"])
def test_a_configuration_of_the_callers_is_left_to_ansible(
    bare: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    home = Path(os.environ["HOME"])
    if where == "work":
        (bare / "ansible.cfg").write_text("[defaults]\n")
    elif where == "home":
        (home / ".ansible.cfg").write_text("[defaults]\n")
    else:
        own = home / "mine.cfg"
        own.write_text("[defaults]\n")
        monkeypatch.setenv("ANSIBLE_CONFIG", str(own))
    assert ansible.config_env() == {}
    assert "ANSIBLE_CONFIG" not in ansible._envvars()


def test_a_world_writable_working_directory_is_not_read_as_ansible_skips_it(bare: Path) -> None:
    (bare / "ansible.cfg").write_text("[defaults]\n")
    bare.chmod(0o777)
    assert ansible.config_env() == {"ANSIBLE_CONFIG": str(ansible.DEFAULT_CONFIG)}


def test_ansible_reads_fabtunes_configuration_as_the_poll_interval(bare: Path) -> None:
    """ansible-config, given the file, reports the setting changed from Ansible's default (0.001)."""
    exe = Path(sys.executable).parent / "ansible-config"
    env = {**os.environ, **ansible.config_env(), "ANSIBLE_NOCOLOR": "True"}
    done = subprocess.run([str(exe), "dump", "--only-changed"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("DEFAULT_INTERNAL_POLL_INTERVAL")]
    assert len(lines) == 1, done.stdout[-2000:]
    assert lines[0].split("=")[-1].strip() == "0.01"
    assert str(ansible.DEFAULT_CONFIG) in lines[0]
