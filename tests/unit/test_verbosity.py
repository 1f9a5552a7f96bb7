"""``fabtune -v`` / ``-vv`` / ``-q`` (issue 14): Ansible's task stream live, read from runner
events; the command lines at -vv; only the result at -q. The Ansible runs here are real
(ansible-runner, ansible-playbook, a local connection), only the host is this machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from fabtune import ansible
from fabtune.cli import cli, main
from fabtune.commands import _console

PLAYBOOK = """\
- name: Two tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.command:
        argv: [echo, "hello from {{ inventory_hostname }}"]
    - name: Look only
      ansible.builtin.assert:
        that: [true]
        quiet: true
"""


@pytest.fixture
def play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    playbook = tmp_path / "two.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=python3\n")
    return playbook, inventory


class Recorder:
    def __init__(self) -> None:
        self.tasks: list[tuple[str, str, str, bool]] = []
        self.ended: list[tuple[str, Path]] = []

    def task(self, kind: str, result: ansible.TaskResult) -> None:
        self.tasks.append((kind, result.host, result.task, result.changed))

    def finished(self, kind: str, outcome: ansible.RunOutcome) -> None:
        self.ended.append((kind, outcome.artifact_dir))


def test_an_observer_sees_each_task_result_and_the_artifacts(play: tuple[Path, Path]) -> None:
    playbook, inventory = play
    recorder = Recorder()
    with ansible.observing(recorder):
        outcome = ansible.run_playbook(playbook, inventory, timeout_s=300)
    assert outcome.ok, outcome
    assert recorder.tasks == [
        ("two", "localhost", "Say hello", True), ("two", "localhost", "Look only", False)
    ]
    assert recorder.ended == [("two", outcome.artifact_dir)] and outcome.artifact_dir.is_dir()
    ansible.run_playbook(playbook, inventory, timeout_s=300)  # after the block: not watched
    assert len(recorder.ended) == 1


@pytest.fixture
def verb(play: tuple[Path, Path]) -> Iterator[str]:
    """A verb that runs the playbook, prints progress on stderr and its result on stdout."""
    playbook, inventory = play

    @click.command("twotasks")
    def twotasks() -> None:
        _console.err().print("running two tasks")
        outcome = ansible.run_playbook(playbook, inventory, timeout_s=300)
        click.echo(f"result: {outcome.status}")

    cli.add_command(twotasks)
    yield "twotasks"
    cli.commands.pop("twotasks")


def test_v_streams_task_results_and_vv_the_command_lines(
    verb: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["-v", verb]) == 0
    out, err = capfd.readouterr()
    assert out == "result: successful\n"  # the stream never goes to stdout
    lines = err.splitlines()
    assert "two: localhost: Say hello: changed" in lines, err
    assert "two: localhost: Look only: ok" in lines, err
    assert any(ln.startswith("two: successful (rc 0), artifacts /") for ln in lines), err
    assert "$ echo" not in err
    assert main(["-vv", verb]) == 0
    err = capfd.readouterr().err
    assert "two: localhost:   $ echo 'hello from localhost'" in err.splitlines(), err


def test_without_v_nothing_of_ansible_is_shown_and_q_keeps_only_the_result(
    verb: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main([verb]) == 0
    out, err = capfd.readouterr()
    assert out == "result: successful\n" and err == "running two tasks\n"
    assert main(["-q", verb]) == 0
    out, err = capfd.readouterr()
    assert out == "result: successful\n" and err == ""
    assert main(["-q", "show", "19990101"]) != 0  # an error still reaches stderr
    assert "error" in capfd.readouterr().err
    assert main(["-q", "-v", verb]) == 2
