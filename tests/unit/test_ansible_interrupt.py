"""Ctrl-C and SIGTERM in the middle of a playbook stop it and reach fabtune as they would elsewhere.

ansible-runner, given no cancel callback, puts its own SIGINT/SIGTERM handlers in place and never
restores them: Ctrl-C during a tune only cancelled the playbook then running and was ignored
between playbooks, and the CLI's SIGTERM -> Terminated never fired again (a benchmark run in this
repository could not be stopped but with SIGKILL). These tests fail on that code. They run a real
ansible-playbook on localhost (connection local) that sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fabtune import ansible
from fabtune.errors import PlaybookFailed


class Stopped(Exception):
    """What the CLI's SIGTERM handler raises (fabtune.errors.Terminated), here a local stand-in."""


@pytest.fixture(autouse=True)
def _module_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local module's AnsiballZ payload directory goes under the test's own directory: these
    runs are killed mid-module, before the module removes it."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))


def _book(tmp_path: Path, seconds: str) -> tuple[Path, Path]:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    book = tmp_path / "sleep.yml"
    book.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - name: Sleep\n      ansible.builtin.command:\n        argv: [sleep, '{seconds}']\n"
    )
    return book, inventory


def _sleeping(seconds: str) -> bool:
    found = subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True, text=True, check=False)
    return bool(found.stdout.strip())


@pytest.mark.parametrize(("sig", "seconds"), [(signal.SIGINT, "41.25"), (signal.SIGTERM, "42.25")])
def test_a_signal_mid_playbook_cancels_it_then_acts_as_before(
    sig: signal.Signals, seconds: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    book, inventory = _book(tmp_path, seconds)

    def stop(_signum: int, _frame: object) -> None:
        raise Stopped

    # A pytest-xdist worker ignores SIGINT: give both signals the handlers a CLI process has.
    before = signal.signal(signal.SIGTERM, stop)
    before_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(4.0, os.kill, (os.getpid(), sig))
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Stopped):
            ansible.run_playbook(book, inventory, timeout_s=120)
        assert time.monotonic() - start < 30  # the sleep (41 s) was cut short
        time.sleep(1)
        assert not _sleeping(seconds)  # the playbook's command is gone: no orphan keeps running
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is stop  # the caller's handler is back
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, before_int)


def test_after_a_run_the_handlers_are_the_callers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    book, inventory = _book(tmp_path, "0.1")
    before_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        outcome = ansible.run_playbook(book, inventory, timeout_s=120)
        assert outcome.ok
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before_int)


def test_a_run_past_its_deadline_is_a_timeout_and_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    book, inventory = _book(tmp_path, "43.25")
    start = time.monotonic()
    outcome = ansible.run_playbook(book, inventory, timeout_s=3)
    assert outcome.status == "timeout" and not outcome.ok
    assert time.monotonic() - start < 30
    time.sleep(1)
    assert not _sleeping("43.25")  # ansible-runner's own timeout left the worker's task running
    with pytest.raises(PlaybookFailed, match="did not finish within its deadline"):
        outcome.raise_for_failure("sleeping")
