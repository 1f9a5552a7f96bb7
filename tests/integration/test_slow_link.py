"""A rack whose only fault is one port trained at half speed (h02's second NIC, a bad cable):
``fabtune bench pairs`` names that pair alone and ``fabtune check`` names h02's port; on a 3-host
rack, where that port is an end of two pairs, ``bench pairs`` names the port with its pairs under it."""

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


def slow_port_rack(name: str, hosts: int, subnet_base: str) -> Iterator[TestbedSpec]:
    """A rack of 2 NICs and 2 GPUs per host whose h02 trained its second port at 200 Gb/s."""
    yield from make_testbed({
        "name": name,
        "hosts": hosts,
        "subnet_base": subnet_base,
        "nics_per_host": 2,
        "gpus_per_host": 2,
        "overrides": {"h02": {"link_speed": {1: 200}}},
    })


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from slow_port_rack("spslow", 2, "10.221")


def fabtune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabtune", *args], env=os.environ.copy(),
                          capture_output=True, text=True, timeout=300, check=False)


def test_pairs_and_check_name_the_slow_port(rack: TestbedSpec, tmp_path: Path) -> None:
    inventory = str(layout.testbed_dir(rack.name) / "inventory.yml")
    done = fabtune("bench", "pairs", "-i", inventory, "--duration", "2", "-o", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = json.loads((tmp_path / "p.json").read_text())
    [slow] = written["slow_pairs"]
    assert written["slow_ports"] == []  # one pair: nothing says which of its two ends is slow
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


@pytest.fixture(scope="module")
def odd_rack() -> Iterator[TestbedSpec]:
    """The same port on a 3-host rack: h02's second NIC is an end of two pairs of the matrix."""
    yield from slow_port_rack("slwpt", 3, "10.232")


def test_pairs_name_the_port_that_is_the_common_end_of_its_slow_pairs(
    odd_rack: TestbedSpec, tmp_path: Path
) -> None:
    inventory = str(layout.testbed_dir(odd_rack.name) / "inventory.yml")
    done = fabtune("bench", "pairs", "-i", inventory, "--duration", "2", "-o", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = json.loads((tmp_path / "p.json").read_text())
    [port] = written["slow_ports"]
    assert (port["port"], port["host"]) == ("h02 mlx5_1", "h02"), port
    found = re.fullmatch(r"port h02 mlx5_1 is slow: 2 of its 2 pairs under x0\.80 of the median of the "
                         r"other pairs; its pairs' median 1\d\d\.\d Gb/s against 3\d\d\.\d for the pairs not "
                         r"through it \(x0\.[45]\d\); its link's ceiling is (\d+\.\d) Gb/s against "
                         r"(\d+\.\d): a port below the rack's speed", port["summary"])
    assert found is not None, port["summary"]
    assert float(found[1]) / float(found[2]) == pytest.approx(0.5, abs=0.01)
    assert sorted(port["pairs"]) == sorted(written["slow_pairs"]) and len(port["pairs"]) == 2
    lines = done.stdout.splitlines()
    at = lines.index(port["summary"])
    assert sorted(lines[at + 1:at + 3]) == sorted(f"  slow pair: {line}" for line in port["pairs"])
