"""A rack whose only fault is one port trained at half speed (h02's second NIC, a bad cable):
``fabtune bench pairs`` names that pair alone and ``fabtune check`` names h02's port."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.errors import ExitStatus
from fabtune.testbed import layout
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed({
        "name": "spslow",
        "hosts": 2,
        "subnet_base": "10.221",
        "nics_per_host": 2,
        "gpus_per_host": 2,
        "overrides": {"h02": {"link_speed": {1: 200}}},
    })


def fabtune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabtune", *args], env=os.environ.copy(),
                          capture_output=True, text=True, timeout=300, check=False)


def test_pairs_and_check_name_the_slow_port(rack: TestbedSpec, tmp_path: Path) -> None:
    inventory = str(layout.testbed_dir(rack.name) / "inventory.yml")
    done = fabtune("bench", "pairs", "-i", inventory, "--duration", "2", "-o", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [slow] = json.loads((tmp_path / "p.json").read_text())["slow_pairs"]
    ends = r"(h01 mlx5_1 -> h02 mlx5_1|h02 mlx5_1 -> h01 mlx5_1)"
    found = re.fullmatch(rf"{ends}: 1\d\d\.\d Gb/s, x0\.[45]\d of the median of the other pairs "
                         r"\(3\d\d\.\d Gb/s\); its link's ceiling is (\d+\.\d) Gb/s against (\d+\.\d): "
                         r"a port below the rack's speed", slow)
    assert found is not None, slow
    assert float(found[2]) / float(found[3]) == pytest.approx(0.5, abs=0.01)  # 200 G against 400 G
    assert f"slow pair: {slow}" in done.stdout
    done = fabtune("check", "-i", inventory, "--no-nccl", "-o", str(tmp_path / "c.json"))
    assert done.returncode == ExitStatus.CHECK_FAILED, done.stdout[-3000:] + done.stderr[-3000:]
    failed = [r for r in json.loads((tmp_path / "c.json").read_text())["results"] if r["verdict"] == "fail"]
    assert [(r["check"], r["host"], r["evidence"]) for r in failed] == [
        ("link", "h02", "CA 'mlx5_1' Port 1: Rate: 200")], failed
    assert failed[0]["summary"].startswith("mlx5_1 port 1 trained at 200 Gb/s, below the rack's 400 Gb/s")
