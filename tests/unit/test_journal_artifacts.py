"""Every run's journal links its Ansible artifact directories and ``fabtune show RUN`` lists them
(issue 14). The Ansible runs are real (ansible-runner, a local connection)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabtune import ansible
from fabtune.cli import cli
from fabtune.journal import Journal

PLAYBOOK = """\
- name: One task
  hosts: all
  gather_facts: false
  tasks:
    - name: Look only
      ansible.builtin.assert:
        that: [true]
        quiet: true
"""


def test_the_journal_links_the_artifacts_of_the_runs_made_while_its_run_is_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    playbook = tmp_path / "facts.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=python3\n")
    before = ansible.run_playbook(playbook, inventory, timeout_s=300)  # no run open: not linked
    journal = Journal()
    run_id = journal.open_run("drift", "rack1", str(inventory), None)
    first = ansible.run_playbook(playbook, inventory, timeout_s=300)
    seq = journal.step(run_id, "check", "drift check", {})
    outcomes: list[ansible.RunOutcome] = []
    worker = threading.Thread(target=lambda: outcomes.append(ansible.run_playbook(playbook, inventory)))
    worker.start()  # the adapter may run Ansible from another thread than the journal's
    worker.join()
    journal.finish_step(run_id, seq, "done")
    journal.close_run(run_id, "clean", {})
    after = ansible.run_playbook(playbook, inventory, timeout_s=300)  # the run is closed: not linked
    journal.close()
    linked = [str(first.artifact_dir), str(outcomes[0].artifact_dir)]
    assert str(before.artifact_dir) not in linked and str(after.artifact_dir) not in linked

    shown = CliRunner().invoke(cli, ["show", run_id])
    assert shown.exit_code == 0, shown.output
    rows = [line for line in shown.stdout.splitlines() if "successful" in line]
    assert [next(p for p in linked if p in row) for row in rows] == linked, shown.stdout
    assert all(row.lstrip("│ ").startswith("facts") for row in rows), shown.stdout
    doc = json.loads(CliRunner().invoke(cli, ["show", run_id, "--json"]).stdout)
    assert [(a["kind"], a["status"], a["path"]) for a in doc["artifacts"]] == [
        ("facts", "successful", p) for p in linked
    ]
