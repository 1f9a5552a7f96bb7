"""Extra vars travel to Ansible in a private file, never on the command line (issue 17).

A thousand hosts with eight NICs each make a desired state of megabytes: on the command line that
is past the kernel's argument limit and readable by every user in ``ps``. The run here is real
(ansible-runner, ansible-playbook, a local connection), only the host is this machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fabtune import ansible

PLAYBOOK = """\
- name: Count what arrived
  hosts: all
  gather_facts: false
  tasks:
    - name: Count the hosts and NICs of the desired state
      ansible.builtin.set_fact:
        counted: "{{ fabric_desired_by_host | length }}:{{ fabric_desired_by_host.n0999.nics | length }}"
"""


def _big_state() -> dict[str, object]:
    nic = {"trust": "dscp", "pfc": [3], "dscp2prio": {str(d): d // 8 for d in range(24, 32)}, "mtu": 4200}
    hosts = {f"n{i:04d}": {"nics": {f"enp{n}s0np0": dict(nic) for n in range(8)}} for i in range(1000)}
    return {"fabric_desired_by_host": hosts}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_thousand_host_desired_state_goes_through_a_private_file(home: Path, tmp_path: Path) -> None:
    extravars = _big_state()
    size = len(json.dumps(extravars))
    # Linux refuses any one argument over MAX_ARG_STRLEN (32 pages: 128 KiB) with E2BIG.
    assert size > 32 * os.sysconf("SC_PAGESIZE"), size
    playbook = tmp_path / "count.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=python3\n")
    outcome = ansible.run_playbook(playbook, inventory, extravars=extravars, timeout_s=300)
    assert outcome.ok, outcome
    (counted,) = [t.result["ansible_facts"]["counted"] for t in outcome.tasks if t.task.startswith("Count")]
    assert counted == "1000:8"
    argv = json.loads((outcome.artifact_dir / "command").read_text())["command"]
    assert sum(len(a) for a in argv) < 10_000, "the desired state went onto the command line"
    assert not any("dscp2prio" in a for a in argv)
    assert not list((home / "ansible" / "extravars").iterdir()), "the vars file outlived its run"
