"""Fidelity: the emulated ``dcb`` (iproute2 6.1, Debian 12's) against Debian's real ``/usr/sbin/dcb``.

The real tool runs in a network namespace this test creates (and removes), on a veth named like the
emulated host's RoCE port. A veth has no DCB operations, so the real tool ends every command its
parser accepts at the kernel (``Attribute read/write: Operation not supported``); the emulated one,
on its mlx5 port, answers it. What the parser itself prints (version, help, usage, an unknown
object) must be identical, byte for byte, with the same exit status. The emulated host names no
iproute2 release, so it is Debian 12's, as the real one here.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import dcb
from tests.unit.sim_tools.conftest import roce_node

REAL = shutil.which("dcb")
IF = "ens1np0"  # the first RoCE port of roce_node()
pytestmark = [
    pytest.mark.skipif(REAL is None, reason="iproute2's dcb is not installed (scripts/install.sh)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create its network namespace"),
]
REACHED_KERNEL = ("Attribute read: Operation not supported", "Attribute write: Operation not supported")

PRINTED_BY_THE_PARSER = [
    "-V",
    "help",
    "pfc",
    "pfc show",
    "ets",
    "app",
    "buffer",
    "maxrate help",
    "dcbx",
    "pfc set",
    "ets show",
    "app show",
    "app set",
    "pfc foo",
    f"rewr show dev {IF}",
    f"apptrust show dev {IF}",
    f"-j apptrust show dev {IF}",
    f"app add dev {IF} pcp-prio 1:1",
]
ACCEPTED = [
    f"pfc show dev {IF}",
    f"-j pfc show dev {IF}",
    f"-s pfc show dev {IF} prio-pfc",
    f"pfc set dev {IF} prio-pfc 3:on",
    f"ets show dev {IF} tc-tsa",
    f"app show dev {IF} dscp-prio",
    f"app add dev {IF} dscp-prio 26:3",
    f"buffer show dev {IF}",
    f"maxrate show dev {IF}",
    f"dcbx show dev {IF}",
]


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    name = f"ftfid{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", IF, "type", "veth", "peer", "name", "peer0"],
                       check=True, timeout=30)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> NodeState:
    root: Path = tmp_path_factory.mktemp("dcbhost")
    provision(root, roce_node(), {})
    return NodeState.under(root)


def real(netns: str, line: str) -> tuple[int, str, str]:
    assert REAL is not None
    done = subprocess.run(["ip", "netns", "exec", netns, REAL, *line.split()], capture_output=True,
                          text=True, timeout=20, check=False)
    return done.returncode, done.stdout, done.stderr


def twin(host: NodeState, line: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dcb.main(line.split(), state=host)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("line", PRINTED_BY_THE_PARSER)
def test_what_the_parser_prints_is_debians_byte_for_byte(netns: str, host: NodeState, line: str) -> None:
    assert twin(host, line) == real(netns, line)


@pytest.mark.parametrize("line", ACCEPTED)
def test_what_debians_dcb_accepts_the_twin_runs(netns: str, host: NodeState, line: str) -> None:
    code, _out, err = real(netns, line)
    assert code == 1 and err.strip() in REACHED_KERNEL, (code, err)  # parsed, then refused by the veth
    code, out, err = twin(host, line)
    assert code == 0 and err == "", (out, err)
