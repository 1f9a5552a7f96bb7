#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_run
short_description: Run several commands at once on a host, each to its end or its deadline
description:
  - Starts every command of O(commands) at the same moment (argv lists, no shell), waits for all of
    them and returns each one's exit status and output.
  - A command still running at O(deadline_s) gets SIGTERM, and SIGKILL 10 s later; it is reported
    with C(timed_out=true).
  - "For benchmark clients that must start together (perftest pairs of one round): one module call
    instead of one async job per command, and no polling."
  - Runs nothing in check mode (like M(ansible.builtin.command)).
version_added: "1.0.0"
options:
  commands:
    description: The commands, each C({id, argv}); C(argv) is a list whose first item is the program.
    type: list
    elements: dict
    required: true
  argv_prefix:
    description: Put before every command's argv (e.g. C([timeout, --kill-after=10s, 60s])).
    type: list
    elements: str
    default: []
  deadline_s:
    description: Seconds each command may run.
    type: int
    required: true
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Run the round's ib_write_bw clients on this host
  fabtune.fabric.fabric_run:
    commands:
      - {id: "h02->h01/mlx5_0:18515", argv: [ib_write_bw, -d, mlx5_0, -p, "18515", 10.0.0.1]}
      - {id: "h02->h01/mlx5_1:18516", argv: [ib_write_bw, -d, mlx5_1, -p, "18516", 10.0.1.1]}
    deadline_s: 60
"""

RETURN = r"""
runs:
  description: One entry per command, in the order given.
  returned: always
  type: list
  elements: dict
  sample: [{"id": "h02->h01/mlx5_0:18515", "rc": 0, "stdout": "...", "stderr": "", "timed_out": false}]
"""

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Mapping, Sequence, Tuple

from ansible.module_utils.basic import AnsibleModule

KILL_AFTER_S = 10

# A started command: (command, process or None, stdout file, stderr file, why it did not start or None).
Started = Tuple[Mapping[str, Any], "subprocess.Popen[bytes] | None", IO[bytes], IO[bytes], "str | None"]


def _start(argv: Sequence[object], out: IO[bytes], err: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
    )


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # the command's own session: whatever it started goes too


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after KILL_AFTER_S: the command missed its deadline."""
    _signal(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.wait()


def _read(handle: IO[bytes]) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", errors="replace")


def _start_all(commands: Sequence[Mapping[str, Any]], files: Sequence[tuple[IO[bytes], IO[bytes]]],
               prefix: Sequence[str]) -> list[Started]:
    """Start every command, its stdout and stderr into its ``files``."""
    started: list[Started] = []
    for command, (out, err) in zip(commands, files):
        try:
            proc = _start(list(prefix) + list(command["argv"]), out, err)
        except OSError as exc:
            started.append((command, None, out, err, str(exc)))
            continue
        started.append((command, proc, out, err, None))
    return started


def run_all(commands: Sequence[Mapping[str, Any]], deadline_s: float,
            prefix: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Start every command, wait for each until the shared deadline, return what each did."""
    with contextlib.ExitStack() as stack:
        files = [
            (stack.enter_context(tempfile.TemporaryFile()), stack.enter_context(tempfile.TemporaryFile()))
            for _command in commands
        ]
        started = _start_all(commands, files, prefix)
        end = time.monotonic() + deadline_s
        runs = []
        for command, proc, out, err, problem in started:
            timed_out = False
            if proc is not None:
                try:
                    proc.wait(timeout=max(0.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _stop(proc)
            stderr = problem if problem is not None else _read(err)
            runs.append({
                "id": command["id"],
                "rc": proc.returncode if proc is not None else 127,
                "stdout": _read(out),
                "stderr": stderr,
                "timed_out": timed_out,
            })
        return runs


def _valid(module: AnsibleModule, commands: Sequence[Mapping[str, Any]]) -> None:
    for index, command in enumerate(commands):
        argv: Any = command.get("argv")
        if "id" not in command or not isinstance(argv, list) or not argv:
            module.fail_json(msg=f"commands[{index}]: needs an id and a non-empty argv list, got {command!r}")
        if os.sep in str(argv[0]) and not Path(str(argv[0])).is_absolute():
            module.fail_json(
                msg=f"commands[{index}].argv[0]: {argv[0]!r} must be a program name or an absolute path")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "commands": {"type": "list", "elements": "dict", "required": True},
            "argv_prefix": {"type": "list", "elements": "str", "default": []},
            "deadline_s": {"type": "int", "required": True},
        },
        supports_check_mode=False,
    )
    commands = module.params["commands"]
    deadline_s = module.params["deadline_s"]
    if deadline_s <= 0:
        module.fail_json(msg=f"deadline_s: {deadline_s} must be a positive number of seconds")
    _valid(module, commands)
    module.exit_json(changed=False, runs=run_all(commands, deadline_s, module.params["argv_prefix"]))


if __name__ == "__main__":
    main()
