"""Each verb's module is imported only when that verb runs (``fabtune.commands.VERBS``), and
``fabtune --help`` lists the verbs from ``fabtune.commands.SUMMARIES`` without importing any: the
summaries must say what the commands themselves say."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fabtune import commands

PROBE = """
import contextlib, io, json, sys
from fabtune.cli import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    cli.main(sys.argv[1:], standalone_mode=False)
print(json.dumps({"out": out.getvalue(), "modules": sorted(sys.modules)}))
"""
VERB_MODULES = sorted({where.partition(":")[0] for where in commands.VERBS.values()})


def probe(*argv: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120,
                          check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_every_verb_has_the_summary_its_command_says() -> None:
    assert sorted(commands.SUMMARIES) == sorted(commands.VERBS)
    for name in commands.VERBS:
        command = commands.load(name)
        assert command is not None
        assert commands.SUMMARIES[name] == command.get_short_help_str(limit=10_000), name


def test_the_help_lists_every_verb_without_importing_one() -> None:
    found = probe("--help")
    rows = str(found["out"]).split("Commands:")[1].splitlines()
    listed = {line.split()[0] for line in rows if line.strip()}
    assert set(commands.VERBS) <= listed
    assert [m for m in VERB_MODULES if m in found["modules"]] == []  # type: ignore[operator]


@pytest.mark.parametrize("verb", ["runs", "tune"])
def test_a_verb_imports_its_own_module_only(verb: str) -> None:
    found = probe(verb, "--help")
    mine = commands.VERBS[verb].partition(":")[0]
    assert [m for m in VERB_MODULES if m in found["modules"]] == [mine]  # type: ignore[operator]
