"""Ansible's forks scale with the inventory (issue 17): one per host, capped, FABTUNE_FORKS wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fabtune import ansible
from fabtune.errors import ConfigError
from fabtune.inventory import read_inventory

PLAYBOOK = """\
- name: Nothing
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def _inventory(tmp_path: Path, hosts: int) -> Path:
    path = tmp_path / f"rack{hosts}.yml"
    names = {f"n{i:04d}": {"ansible_connection": "local", "ansible_python_interpreter": "python3"}
             for i in range(hosts)}
    path.write_text(yaml.safe_dump({"all": {"vars": {"fabtune_fabric": "roce"}, "hosts": names}}))
    return path


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(ansible.FORKS_ENV, raising=False)


def test_forks_follow_the_host_count_up_to_the_cap(tmp_path: Path) -> None:
    small, large = _inventory(tmp_path, 3), _inventory(tmp_path, ansible.MAX_FORKS + 72)
    assert ansible.forks_for(small) == ansible.UNKNOWN_INVENTORY_FORKS  # not read yet
    read_inventory(small)
    read_inventory(large)
    assert ansible.forks_for(small) == 3
    assert ansible.forks_for(large) == ansible.MAX_FORKS


def test_the_operator_sets_forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = _inventory(tmp_path, 3)
    read_inventory(inventory)
    monkeypatch.setenv(ansible.FORKS_ENV, "200")
    assert ansible.forks_for(inventory) == 200
    for bad in ("0", "many", "-4", "5000"):
        monkeypatch.setenv(ansible.FORKS_ENV, bad)
        with pytest.raises(ConfigError) as err:
            ansible.forks_for(inventory)
        assert ansible.FORKS_ENV in str(err.value) and repr(bad) in str(err.value)


def test_a_run_passes_the_scaled_forks_to_ansible(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, 3)
    read_inventory(inventory)
    playbook = tmp_path / "ping.yml"
    playbook.write_text(PLAYBOOK)
    outcome = ansible.run_playbook(playbook, inventory, timeout_s=300)
    assert outcome.ok, outcome
    argv = json.loads((outcome.artifact_dir / "command").read_text())["command"]
    assert argv[argv.index("--forks") + 1] == "3", argv
