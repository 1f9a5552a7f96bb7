"""perftest -R listens through rdma_cm (no TCP socket); the emulated ``rdma resource show cm_id``.

Sources: perftest 4.5-0.17 ``src/perftest_parameters.c`` (``-R`` sets ``use_rdma_cm``) and
``src/perftest_communication.c`` (``rdma_server_connect``: rdma_bind_addr, rdma_listen); iproute2
v6.1.0 ``rdma/res-cmid.c`` (``res_cm_id_line``: the keys and their order) and ``rdma/res.c``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.perf.parsers import perftest as parser
from fabtune.sim.node import NodeState
from fabtune.sim.tools import TOOLS, rdma
from fabtune.sim.tools import _rdma_cm as cm
from tests.unit.sim_bench.conftest import make_rack
from tests.unit.sim_bench.test_perftest_tool import tool

# Every key res_cm_id_line can print (print_link, res_print_u32, print_qp_type, print_cm_id_state,
# print_ps, print_comm, print_ipaddr), in its order; "src-port"/"dst-port" are filter names only.
SOURCE_KEYS = ("ifindex", "ifname", "port", "cm-idn", "lqpn", "qp-type", "state", "ps", "pid", "comm",
               "src-addr", "dst-addr")
SERVER_IP = "10.78.1.12"  # h02's first port (make_rack)


@pytest.fixture
def short_rack() -> Iterator[Path]:
    """The two-host rack under a short path (a Unix socket path holds at most 107 bytes)."""
    base = Path(tempfile.mkdtemp(prefix="ftq", dir="/tmp"))
    make_rack(base)
    yield base
    shutil.rmtree(base)


def show(rack: Path, host: str, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = rdma.main(list(argv), NodeState.under(rack / host), rack / "fabric")
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tcp_listening(port: int) -> bool:
    """Whether any TCP socket of this network namespace listens on ``port`` (/proc/net/tcp)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def wait_listener(rack: Path, host: str, port: int) -> list[cm.Listener]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = [e for e in cm.listeners(rack / "fabric", host) if e.port == port]
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("no rdma_cm listener")


def test_rdma_is_a_registered_tool() -> None:
    assert TOOLS["rdma"] is rdma.main


def test_cm_id_json_has_the_source_keys_in_order(
    short_rack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    devices = NodeState.under(short_rack / "h02").rdma_devices()
    with cm.listen(short_rack / "fabric", "h02", 19431, [SERVER_IP], devices) as sock:
        assert sock is not None
        code, out, _ = show(short_rack, "h02", "-j", "resource", "show", "cm_id", capsys=capsys)
        assert code == 0 and out.endswith("\n") and " " not in out.strip()
        rows = json.loads(out)
        assert [r["ifname"] for r in rows] == devices
        assert [r["ifindex"] for r in rows] == list(range(len(devices)))
        comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
        for row in rows:
            assert tuple(row) == tuple(k for k in SOURCE_KEYS if k in row)
            # a wildcard listener: per-device child cm_ids, no port, no QP, no destination
            assert not {"port", "lqpn", "qp-type", "dst-addr"} & set(row)
            assert row["state"] == "LISTEN" and row["ps"] == "TCP" and row["src-addr"] == "0.0.0.0:19431"
            assert row["pid"] == os.getpid() and row["comm"] == comm
        code, text, _ = show(short_rack, "h02", "res", "show", "cm_id", capsys=capsys)
        assert text.splitlines()[0] == (f"link {devices[0]}/- cm-idn {rows[0]['cm-idn']} state LISTEN ps TCP "
                                        f"pid {os.getpid()} comm {comm} src-addr 0.0.0.0:19431 ")
        # the other host has no cm_id
        assert show(short_rack, "h01", "-j", "resource", "show", "cm_id", capsys=capsys)[1] == "[]\n"
    assert show(short_rack, "h02", "-j", "resource", "show", "cm_id", capsys=capsys)[1] == "[]\n"


@pytest.mark.parametrize("argv", [["dev"], ["link", "show"], ["-j", "resource", "show", "qp"], ["resource"],
                                  ["resource", "show", "cm_id", "link", "mlx5_0/1"], ["-b", "cmds"]])
def test_other_rdma_commands_are_refused(short_rack: Path, argv: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = show(short_rack, "h01", *argv, capsys=capsys)
    assert code == 1 and out == "" and "not supported by this emulated host" in err


def test_an_rdma_cm_server_opens_no_tcp_listener_and_serves_its_client(short_rack: Path) -> None:
    argv = ("-p", "19432", "-q", "2", "-R", "--report_gbits")
    server = tool(short_rack, "h02", "ib_write_bw", *argv)
    try:
        [listener] = wait_listener(short_rack, "h02", 19432)
        assert listener.pid == server.pid and SERVER_IP in listener.addresses
        assert not tcp_listening(19432)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", 19432), timeout=5).close()
        client = tool(short_rack, "h01", "ib_write_bw", *argv, SERVER_IP)
        c_out, c_err = client.communicate(timeout=30)
        s_out, _ = server.communicate(timeout=30)
    finally:
        server.kill()
    assert client.returncode == 0 and server.returncode == 0, c_err
    assert parser.parse(c_out).bw_rows == parser.parse(s_out).bw_rows
    assert cm.listeners(short_rack / "fabric") == []


def test_a_tcp_server_still_listens_on_tcp(short_rack: Path) -> None:
    server = tool(short_rack, "h02", "ib_write_bw", "-p", "19433")
    try:
        deadline = time.monotonic() + 20
        while not tcp_listening(19433) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tcp_listening(19433) and cm.listeners(short_rack / "fabric") == []
    finally:
        server.kill()
        server.communicate(timeout=30)


def test_an_rdma_cm_client_without_a_listener_is_rejected(short_rack: Path) -> None:
    client = tool(short_rack, "h01", "ib_write_bw", "-p", "19434", "-R", SERVER_IP)
    _, err = client.communicate(timeout=30)
    assert client.returncode == 1
    assert err == ("Unexpected CM event bl blka 8\n Unable to perform rdma_client function\n"
                   " Unable to init the socket connection\n")


def test_a_port_held_by_a_live_cm_id_cannot_be_bound_again(short_rack: Path) -> None:
    devices = NodeState.under(short_rack / "h02").rdma_devices()
    with cm.listen(short_rack / "fabric", "h02", 19435, [SERVER_IP], devices) as sock:
        assert sock is not None
        server = tool(short_rack, "h02", "ib_write_bw", "-p", "19435", "-R")
        try:
            _, err = server.communicate(timeout=30)
        finally:
            server.kill()
    assert server.returncode == 1 and err.startswith(" rdma_bind_addr failed\n")
