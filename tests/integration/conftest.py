"""A testbed shared by the integration tests of one module, built and removed by the fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fabtune.testbed import build
from fabtune.testbed.spec import TestbedSpec, build_spec
from tests.conftest import testbed_unavailable


@pytest.fixture(scope="session", autouse=True)
def _fabtune_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("fabtune-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("FABTUNE_HOME", str(home))
    yield home
    mp.undo()


def make_testbed(doc: dict[str, object]) -> Iterator[TestbedSpec]:
    """Build a testbed for a test module and remove it afterwards, asserting nothing is left."""
    reason = testbed_unavailable()
    if reason:
        pytest.skip(reason)
    spec = build_spec(doc)
    build.up(spec)
    try:
        yield spec
    finally:
        build.down(spec.name)
    assert build.leftovers(spec.name) == []


SPECS = Path(__file__).resolve().parents[2] / "fabtune" / "testbed" / "specs"
SMALL = {"hosts": 2, "nics_per_host": 2, "gpus_per_host": 2}


def example_testbed(example: str, name: str, subnet_base: str) -> Iterator[TestbedSpec]:
    """A small (2 hosts x 2 NICs x 2 GPUs) rack from one of the shipped example specs
    (``fabtune/testbed/specs/EXAMPLE.yml``), under the test module's own name and subnet."""
    doc = yaml.safe_load((SPECS / f"{example}.yml").read_text())
    doc.update({"name": name, "subnet_base": subnet_base, **SMALL})
    yield from make_testbed(doc)


# Each test module that uses roce3 gets its own rack (name and subnet): test modules run on
# parallel workers, and two racks of one name would be one set of namespaces.
ROCE3_RACKS = {"test_testbed": ("itroce", "10.201"), "test_node_tools": ("itnode", "10.216")}


@pytest.fixture(scope="module")
def roce3(request: pytest.FixtureRequest) -> Iterator[TestbedSpec]:
    """A 3-host RoCE rack, h03 with NIC mlx5_1 moved across the CPU socket from its GPU."""
    name, subnet = ROCE3_RACKS[request.module.__name__.rsplit(".", 1)[-1]]
    yield from make_testbed(
        {
            "name": name,
            "fabric": "roce",
            "hosts": 3,
            "subnet_base": subnet,
            "seed": 3,
            "overrides": {"h03": {"nic_numa": {"mlx5_0": 1}}},
        }
    )


@pytest.fixture(scope="module")
def snapshot(rack: TestbedSpec) -> dict[str, dict[str, object]]:
    """The fabric state of each host of the module's ``rack``, before any test changes anything."""
    from tests.integration.ccrack import facts  # here: ccrack imports this conftest

    return facts(rack)
