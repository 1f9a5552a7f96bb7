"""The exception tree. Library code raises these; only ``fabtune.cli`` turns them into exit codes."""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """Every exit code the ``fabtune`` command can return."""

    OK = 0
    ERROR = 1
    USAGE = 2
    CONFIG = 3
    TESTBED = 4
    PLAYBOOK = 5
    BENCHMARK = 6
    CHECK_FAILED = 7
    DRIFT_FOUND = 8
    LOCKED = 9
    INTERRUPTED = 130


class FabtuneError(Exception):
    """Base of every error fabtune reports to the user."""

    code: ExitStatus = ExitStatus.ERROR


class ConfigError(FabtuneError):
    """Bad input: a spec, profile or inventory that does not validate.

    Carries every problem found, so the user fixes them all at once.
    """

    code = ExitStatus.CONFIG

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source} is invalid:\n{lines}")


class TestbedError(FabtuneError):
    """The emulated rack could not be built, reached or removed."""

    __test__ = False  # not a pytest class
    code = ExitStatus.TESTBED


class PlaybookFailed(FabtuneError):
    """An Ansible run ended in failure (read from runner status and stats)."""

    code = ExitStatus.PLAYBOOK


class BenchmarkError(FabtuneError):
    """A benchmark could not run or its output could not be read."""

    code = ExitStatus.BENCHMARK


class ChecksFailed(FabtuneError):
    """A check the user asked for (``fabtune check``) failed; the checks were shown."""

    code = ExitStatus.CHECK_FAILED


class ExitPassedOn(FabtuneError):
    """The exit status of a program fabtune ran in the foreground for the user (``testbed ssh``),
    passed on as fabtune's own with nothing more to report (``cli.main`` prints nothing)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"exit status {status}")
        self.status = status


class Terminated(KeyboardInterrupt):
    """SIGTERM (a timeout, systemd stopping a unit): raised so every failure path runs, as for Ctrl-C."""


class ParseError(BenchmarkError):
    """Tool output that does not have the expected shape."""
