"""Run fabtune as a wheel built without its emulator would: ``fabtune.sim`` and ``fabtune.testbed``
unimportable (issue 18). :func:`block` installs the refusal in this interpreter; :func:`run_cli` runs
``python -m fabtune ARGV`` in a child interpreter with it installed."""

from __future__ import annotations

import importlib.abc
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

BLOCKED = ("fabtune.sim", "fabtune.testbed")
REPO = Path(__file__).resolve().parents[1]


def is_emulator(name: str) -> bool:
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)


class NoEmulator(importlib.abc.MetaPathFinder):
    """Refuses the emulator's packages as if they were not installed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if is_emulator(fullname):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def block() -> None:
    """Make the emulator unimportable in this interpreter (before anything imports it)."""
    sys.meta_path.insert(0, NoEmulator())


CHILD = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.noemulator import block; block(); "
         "from fabtune.cli import main; sys.exit(main(sys.argv[2:]))")


def run_cli(argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """``fabtune ARGV`` in a child interpreter without the emulator; its exit code, stdout, stderr."""
    return subprocess.run([sys.executable, "-c", CHILD, str(REPO), *argv], capture_output=True, text=True,
                          timeout=timeout, check=False, env=dict(env or os.environ), cwd="/")
