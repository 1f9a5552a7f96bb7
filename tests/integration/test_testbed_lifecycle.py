"""up/down leave nothing behind; up over a half-built or stale testbed recovers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fabtune.testbed import build, layout, system
from fabtune.testbed.layout import Names
from fabtune.testbed.spec import build_spec
from tests.conftest import testbed_unavailable

pytestmark = pytest.mark.testbed


@pytest.fixture
def spec():  # type: ignore[no-untyped-def]
    reason = testbed_unavailable()
    if reason:
        pytest.skip(reason)
    spec = build_spec({"name": "itlife", "hosts": 2, "subnet_base": "10.202"})
    yield spec
    if build.load_state(spec.name) is not None:
        build.down(spec.name)


def test_down_leaves_nothing(spec) -> None:  # type: ignore[no-untyped-def]
    build.up(spec)
    assert build.leftovers(spec.name) != []
    build.down(spec.name)
    assert build.leftovers(spec.name) == []
    names = Names(spec.name)
    assert not [n for n in system.netns_list() if n.startswith(names.netns_prefix)]
    assert not [n for n in system.link_names() if n.startswith(names.prefix)]
    assert not layout.testbed_dir(spec.name).exists()


def test_up_recovers_a_stale_testbed(spec) -> None:  # type: ignore[no-untyped-def]
    build.up(spec)
    pid = build.load_state(spec.name)["pids"]["h01"]  # type: ignore[index]
    os.kill(pid, signal.SIGKILL)
    assert not build.healthy(spec)
    build.up(spec)
    assert build.healthy(spec)


def test_up_recovers_a_half_built_testbed(spec) -> None:  # type: ignore[no-untyped-def]
    names = Names(spec.name)
    system.ip("netns", "add", names.netns("h01"))
    system.ip("link", "add", names.mgmt_bridge, "type", "bridge")
    build.up(spec)
    assert build.healthy(spec)


def test_up_twice_keeps_a_healthy_testbed(spec) -> None:  # type: ignore[no-untyped-def]
    build.up(spec)
    before = build.load_state(spec.name)
    build.up(spec)
    assert build.load_state(spec.name) == before


def test_down_takes_its_hosts_processes_and_spares_a_bystander() -> None:
    reason = testbed_unavailable()
    if reason:
        pytest.skip(reason)
    spec = build_spec({"name": "ta1", "hosts": 2, "subnet_base": "10.231"})
    build.up(spec)
    inventory = str(layout.testbed_dir("ta1") / "inventory.yml")
    # A process naming the testbed's inventory (an ansible-playbook, an editor) is not the testbed's.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", inventory])
    try:
        hosts = list(build.load_state("ta1")["pids"].values())  # type: ignore[index]
        build.down("ta1")
        assert bystander.poll() is None
        assert not [pid for pid in hosts if build._alive(pid)]
        assert build.leftovers("ta1") == []
    finally:
        bystander.kill()
        bystander.wait()
        if build.load_state("ta1") is not None:
            build.down("ta1")
