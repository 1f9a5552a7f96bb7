"""Several playbooks in one ansible-playbook run (``ansible.run_playbooks``): one start-up for all,
each part with its own variables and its own outcome. The runs here are real (ansible-runner,
ansible-playbook, a local connection), only the host is this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune import ansible
from fabtune.ansible import Part

SAY = """\
- name: Say the value
  hosts: all
  gather_facts: false
  tasks:
    - name: Say it
      ansible.builtin.debug:
        msg: "{{ value }}"
- name: Say it again, from a second play
  hosts: all
  gather_facts: false
  tasks:
    - name: Say it again
      ansible.builtin.debug:
        msg: "again {{ value }}"
"""

FAIL = """\
- name: Fail where told
  hosts: all
  gather_facts: false
  tasks:
    - name: Fail
      ansible.builtin.fail:
        msg: "told to fail"
      when: fail | bool
"""


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    (tmp_path / "say.yml").write_text(SAY)
    (tmp_path / "fail.yml").write_text(FAIL)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=python3\n")
    return inventory


def _said(outcome: ansible.RunOutcome) -> list[str]:
    return [str(t.result.get("msg")) for t in outcome.tasks if t.task.startswith("Say")]


def test_each_part_gets_its_own_variables_and_its_own_tasks(local: Path) -> None:
    say = str(local.parent / "say.yml")
    parts = [Part(say, {"value": "value-one"}), Part(say, {"value": "value-two"})]
    first, second = ansible.run_playbooks(parts, local, timeout_s=300)
    assert (first.status, second.status) == ("successful", "successful")
    assert _said(first) == ["value-one", "again value-one"]
    assert _said(second) == ["value-two", "again value-two"]
    assert first.seconds > 0 and second.seconds > 0
    assert first.artifact_dir == second.artifact_dir  # one run
    command = json.loads((first.artifact_dir / "command").read_text())["command"]
    assert not any("value-one" in a for a in command), "a part's variables went onto the command line"
    left = list((local.parent / "home" / "ansible" / "extravars").iterdir())
    assert not left, "the wrapper outlived its run"


def test_a_part_that_failed_fails_its_host_in_every_later_part(local: Path) -> None:
    say, fail = str(local.parent / "say.yml"), str(local.parent / "fail.yml")
    passed, failed, after = ansible.run_playbooks(
        [Part(fail, {"fail": False}), Part(fail, {"fail": True}), Part(say, {"value": "late"})], local,
        timeout_s=300,
    )
    assert passed.ok
    assert failed.status == "failed" and failed.failed_hosts == ["localhost"]
    assert "told to fail" in str(failed.failures()[0].result.get("msg"))
    # Ansible ran no later play on the host: the part's outcome says so, not success with no tasks
    assert not after.ok and after.failed_hosts == ["localhost"] and _said(after) == []
    with pytest.raises(ansible.PlaybookFailed, match="told to fail"):
        failed.raise_for_failure("the second part")


def test_a_batch_after_a_change_runs_on_no_host_unless_every_host_came_through(tmp_path: Path,
                                                                            local: Path) -> None:
    """bench_measure.yml after a part that failed on one host: its guard stops the run before any
    counter read or launch (the batch would measure a rack half changed)."""
    inventory = tmp_path / "two.ini"
    inventory.write_text("h1 ansible_connection=local ansible_python_interpreter=python3\n"
                         "h2 ansible_connection=local ansible_python_interpreter=python3\n")
    fail = str(local.parent / "fail.yml")
    batch = {"fabtune_launch_host": "h1", "fabtune_measure_argvs": [["true"]], "fabtune_counter_reads": {}}
    on_h2 = Part(fail, {"fail": "{{ inventory_hostname == 'h2' }}"})
    parts = [on_h2, Part("bench_measure.yml", batch)]
    changed, measured = ansible.run_playbooks(parts, inventory, timeout_s=300)
    assert changed.failed_hosts == ["h2"]
    assert [t.task for t in measured.tasks] == ["Require every host of the batch"]
    assert "h2 failed before the batch" in str(measured.tasks[0].result.get("msg"))
    assert not measured.ok
    # with every host through, the same batch runs (its one launch: `true` on h1)
    passed, ran = ansible.run_playbooks([Part(fail, {"fail": False}), Part("bench_measure.yml", batch)],
                                        inventory, timeout_s=300)
    assert passed.ok and ran.ok
    assert ran.results("Run nccl-tests")["h1"]["runs"][0]["rc"] == 0
