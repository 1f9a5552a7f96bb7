"""fabric_run: a host's commands start together, each ends or is stopped at its deadline."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.unit.modules.conftest import AnsibleExitJson, AnsibleFailJson, load_module

run = load_module("fabric_run")


def _main(module_args: Any, args: dict[str, Any]) -> dict[str, Any]:
    module_args(args)
    with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as done:
        run.main()
    result: dict[str, Any] = done.value.args[0]
    return result


def test_every_command_runs_and_reports_its_status_and_output(module_args: Any) -> None:
    result = _main(module_args, {"commands": [
        {"id": "a", "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]},
        {"id": "b", "argv": ["echo", "second"]},
    ], "deadline_s": 30})
    assert not result["changed"]
    assert result["runs"] == [
        {"id": "a", "rc": 3, "stdout": "out\n", "stderr": "err\n", "timed_out": False},
        {"id": "b", "rc": 0, "stdout": "second\n", "stderr": "", "timed_out": False},
    ]


def test_the_commands_start_together_not_one_after_another(module_args: Any) -> None:
    """Three 3-second sleeps that each print when they started: one after another they would start
    3 s apart; together, within a fraction of that even on a loaded machine."""
    probe = ["sh", "-c", "date +%s.%N; sleep 3"]
    result = _main(module_args, {"commands": [{"id": str(i), "argv": probe} for i in range(3)],
                                 "deadline_s": 30})
    starts = [float(r["stdout"]) for r in result["runs"]]
    assert max(starts) - min(starts) < 2.5


def test_a_command_past_its_deadline_is_stopped_and_said(module_args: Any) -> None:
    begin = time.monotonic()
    result = _main(module_args, {"commands": [
        {"id": "slow", "argv": ["sleep", "60"]}, {"id": "quick", "argv": ["true"]}], "deadline_s": 1})
    assert time.monotonic() - begin < 30
    slow, quick = result["runs"]
    assert slow["timed_out"] and slow["rc"] != 0
    assert not quick["timed_out"] and quick["rc"] == 0


def test_the_prefix_goes_before_every_argv(module_args: Any) -> None:
    result = _main(module_args, {"commands": [{"id": "x", "argv": ["sh", "-c", "exit 5"]}],
                                 "argv_prefix": ["timeout", "--kill-after=10s", "20s"], "deadline_s": 30})
    assert result["runs"][0]["rc"] == 5


def test_a_program_that_is_not_there_is_a_failed_run_not_a_failed_task(module_args: Any) -> None:
    result = _main(module_args, {"commands": [{"id": "x", "argv": ["/nonexistent/ib_write_bw"]}],
                                 "deadline_s": 5})
    assert result["runs"][0]["rc"] == 127 and "No such file" in result["runs"][0]["stderr"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"commands": [{"id": "x", "argv": []}], "deadline_s": 5}, "commands[0]: needs an id and"),
        ({"commands": [{"argv": ["true"]}], "deadline_s": 5}, "commands[0]: needs an id"),
        ({"commands": [{"id": "x", "argv": ["bin/x"]}], "deadline_s": 5}, "commands[0].argv[0]: 'bin/x'"),
        ({"commands": [{"id": "x", "argv": ["true"]}], "deadline_s": 0}, "deadline_s: 0 must be a positive"),
    ],
)
def test_bad_input_is_one_clear_error(module_args: Any, args: dict[str, Any], message: str) -> None:
    result = _main(module_args, args)
    assert result["failed"] and message in result["msg"]
