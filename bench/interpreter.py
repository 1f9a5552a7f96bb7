"""CPU time of the controller's work under two Python interpreters: which one the venv is built on.

`scripts/install.sh` builds the venv on Debian's own Python 3.11 where it can. This measures what
that choice is worth: the same commands, each run by the venv of each interpreter, alternating,
the CPU time (user + system of the child and everything under it, from rusage) of:

* `ansible-playbook` on a local playbook of 20 tasks (templating, `set_fact`, one
  `ansible.builtin.command` module run; the module itself under /usr/bin/python3 for both, as on a
  managed host): Ansible's controller, the suite's largest share of CPU;
* `python -m fabtune --help`, and importing the emulated nccl-tests (every rank of every
  testbed benchmark is such a process);
* `python -m pytest` on two of the unit suite's pure-Python files (the decision statistics and the
  tuning loop's plan).

Each venv must have fabtune installed (scripts/install.sh, or `pip install -e '.[dev]'`).

Usage: .venv/bin/python bench/interpreter.py --venv A/.venv --venv B/.venv [--repeat N]
Prints a Markdown table (CPU seconds, median of N) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 300
PLAYBOOK = """\
- name: Controller work
  hosts: localhost
  gather_facts: false
  vars:
    items_in: "{{ range(0, 200) | list }}"
  tasks:
""" + "".join(
    f"""    - name: Step {i}
      ansible.builtin.set_fact:
        step_{i}: "{{{{ items_in | map('string') | join(',') | length + {i} }}}}"
"""
    for i in range(19)
) + """    - name: One module run
      ansible.builtin.command:
        argv: [/bin/true]
      changed_when: false
"""


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of ``argv`` and its children; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=DEADLINE_S,
                          check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands(venv: Path, playbook: Path) -> dict[str, list[str]]:
    python = str(venv / "bin/python")
    return {
        "ansible-playbook, 20 tasks": [
            str(venv / "bin/ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=/usr/bin/python3", str(playbook),
        ],
        "fabtune --help": [python, "-m", "fabtune", "--help"],
        "import the emulated nccl-tests": [python, "-c", "import fabtune.sim.tools.nccl_tests"],
        "pytest, 2 unit files": [
            python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            "tests/unit/test_tune_stats.py", "tests/unit/test_tune_plan.py",
        ],
    }


def interpreter(venv: Path) -> str:
    return os.path.realpath(venv / "bin/python")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, action="append", required=True, help="a venv (twice)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if len(args.venv) != 2:
        parser.error("--venv: give exactly two")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="fabtune-interp-") as tmp:
        playbook = Path(tmp) / "controller.yml"
        playbook.write_text(PLAYBOOK)
        plans = [commands(v.resolve(), playbook) for v in args.venv]
        times: list[dict[str, list[float]]] = [{k: [] for k in p} for p in plans]
        for _ in range(args.repeat):
            for name in plans[0]:
                for plan, found in zip(plans, times, strict=True):
                    found[name].append(cpu_of(plan[name], env))
    a, b = (interpreter(v) for v in args.venv)
    print(f"| command (CPU s, median of {args.repeat}) | {a} | {b} | ratio |")
    print("|---|---|---|---|")
    for name in plans[0]:
        x, y = (statistics.median(t[name]) for t in times)
        print(f"| {name} | {x:.2f} | {y:.2f} | {y / x:.2f}x |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
