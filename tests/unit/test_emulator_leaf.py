"""The product stands without its emulator: with fabtune.sim and fabtune.testbed unimportable, every
other module imports and the verbs run (issue 18). The static side is the import contract in
pyproject.toml (lint-imports); this is the run-time side, in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Run in a child interpreter: a meta-path finder refuses the emulator's packages as if the wheel
# had been built without them, then the script imports every product module and runs the verbs.
SCRIPT = r"""
import contextlib, importlib, io, json, pkgutil, sys

sys.path.insert(0, sys.argv[2])
from tests.noemulator import BLOCKED, block, is_emulator

block()

import fabtune
from fabtune.cli import main

modules = []
for info in pkgutil.walk_packages(fabtune.__path__, "fabtune."):
    if not is_emulator(info.name) and not info.name.endswith(".__main__"):  # __main__ runs the CLI
        importlib.import_module(info.name)
        modules.append(info.name)

codes = {}
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        codes[" ".join(argv)] = [main(argv), out.getvalue()]

from fabtune import plugins
from fabtune.inventory import InventoryInfo

info = InventoryInfo(None, "ta1", "roce", ("h01",), (), "mpirun", None)
loaded = sorted(m for m in sys.modules if m.startswith(BLOCKED))
print(json.dumps({"modules": modules, "codes": codes, "oracle": plugins.oracle(info),
                  "plugins": len(plugins.installed()), "loaded": loaded}))
"""

VERBS = ("apply", "tune", "drift", "bootstrap")


@pytest.fixture(scope="module")
def without_emulator(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    argvs = [["--help"], *([verb, "--help"] for verb in VERBS), ["testbed", "--help"]]
    home = tmp_path_factory.mktemp("home")
    env = {**os.environ, "FABTUNE_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(argvs), str(REPO)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_every_product_module_imports_without_the_emulator(without_emulator: dict[str, object]) -> None:
    modules = without_emulator["modules"]
    assert isinstance(modules, list)
    for name in ("fabtune.cli", "fabtune.commands.tune", "fabtune.tune.run", "fabtune.perf.pairs",
                 "fabtune.linkrate", "fabtune.plugins"):
        assert name in modules
    assert without_emulator["loaded"] == []


@pytest.mark.parametrize("argv", [["--help"], *([verb, "--help"] for verb in VERBS)], ids=" ".join)
def test_the_verbs_run_without_the_emulator(without_emulator: dict[str, object], argv: list[str]) -> None:
    codes = without_emulator["codes"]
    assert isinstance(codes, dict)
    code, out = codes[" ".join(argv)]
    assert code == 0
    assert out.startswith(f"Usage: fabtune {' '.join(argv[:-1])}".rstrip())


def test_without_the_emulator_there_is_no_testbed_verb_and_no_oracle(
    without_emulator: dict[str, object],
) -> None:
    codes = without_emulator["codes"]
    assert isinstance(codes, dict)
    code, _out = codes["testbed --help"]
    assert code == 2  # click: no such command (ExitStatus.USAGE)
    main_help = codes["--help"][1]
    assert "  tune " in main_help and "  testbed " not in main_help and "  demo " not in main_help
    assert without_emulator["plugins"] == 0
    assert without_emulator["oracle"] is None
