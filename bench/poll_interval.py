"""The controller's CPU while ansible-playbook waits on its hosts, by Ansible's internal poll interval.

While a task runs on the hosts, ansible-playbook's main process waits for its workers' results in
a loop that sleeps ``internal_poll_interval`` between looks (ansible.cfg ``[defaults]``; no
environment variable; 0.001 s by default: a thousand wake-ups a second). Ansible's own description
of the setting: higher values suit automation, where UI responsiveness is not required but CPU
usage might be a concern. fabtune's runs are such automation; on a small controller running
several of them (the test suite's three workers on two CPUs) that loop is a share of the CPU.

This runs one playbook on localhost (connection local, no SSH): ``--tasks`` tasks, each
``sleep --seconds`` on the "host", so the controller only waits; under each interval, alternating,
``--repeat`` times. For each it prints the median CPU seconds (user + system of ansible-playbook
and everything under it, from rusage) and wall seconds, and the CPU per second of waiting above
the longest interval's. The sleeps themselves cost no CPU.

Usage: .venv/bin/python bench/poll_interval.py [--interval S]... [--tasks N] [--seconds S] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEADLINE_S = 600


def playbook(tasks: int, seconds: float) -> str:
    steps = "".join(
        f"""    - name: Wait {i}
      ansible.builtin.command:
        argv: [sleep, "{seconds}"]
      changed_when: false
"""
        for i in range(tasks)
    )
    return f"""- name: The controller waits
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
{steps}"""


def one_run(workdir: Path, interval: float) -> tuple[float, float]:
    """CPU and wall seconds of one ansible-playbook run with ``interval``; it must succeed."""
    cfg = workdir / f"ansible-{interval}.cfg"
    cfg.write_text(f"[defaults]\ninternal_poll_interval = {interval}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(cfg), "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
           "ANSIBLE_LOCALHOST_WARNING": "False"}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
            str(workdir / "play.yml")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=DEADLINE_S,
                          check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        said = proc.stdout[-2000:] + proc.stderr[-2000:]
        raise SystemExit(f"ansible-playbook failed ({proc.returncode}): {said}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, action="append", help="seconds (repeatable)")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    intervals = args.interval or [0.001, 0.005, 0.01]
    runs: dict[float, list[tuple[float, float]]] = {i: [] for i in intervals}
    with tempfile.TemporaryDirectory(prefix="fabtune-poll-") as tmp:
        workdir = Path(tmp)
        (workdir / "play.yml").write_text(playbook(args.tasks, args.seconds))
        for _ in range(args.repeat):
            for interval in intervals:
                runs[interval].append(one_run(workdir, interval))
    floor = statistics.median(c for c, _ in runs[max(intervals)])
    waited = args.tasks * args.seconds
    print(f"{args.tasks} tasks of sleep {args.seconds:g} s on localhost, median of {args.repeat}")
    print()
    print("| internal_poll_interval (s) | CPU (s) | wall (s) | CPU per second waited, above the longest's |")
    print("|---|---|---|---|")
    for interval in intervals:
        cpu = statistics.median(c for c, _ in runs[interval])
        wall = statistics.median(w for _, w in runs[interval])
        print(f"| {interval:g} | {cpu:.2f} | {wall:.2f} | {(cpu - floor) / waited:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
