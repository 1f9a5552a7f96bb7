"""Emulated openlldp: lldptool prints the switch's DCBX TLVs as lldp_8021qaz_clif.c does, fails as
lldptool.c does without lldpad, and mlnx_qos warns while lldpad runs."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabtune.sim.node import NodeState
from fabtune.sim.tools import lldptool, mlnx_qos

IF = "ens1np0"


@pytest.fixture
def socket_name(monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"\0/fabtune-test/lldpad-{uuid.uuid4().hex}"
    monkeypatch.setattr(lldptool, "SOCKET", name)
    return name


@pytest.fixture
def lldpad(socket_name: str) -> Iterator[None]:
    thread = threading.Thread(target=lldptool.lldpad_main, args=(["-t"],), daemon=True)
    thread.start()
    for _ in range(1000):  # wait until the daemon has bound its socket (no fixed sleep)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect(socket_name)
                break
            except OSError:
                thread.join(0.01)
    yield


def _fabric(tmp_path: Path, **switch: Any) -> Path:
    fabric = tmp_path / "fabric"
    fabric.mkdir(parents=True)
    doc = {"fabric": "roce", "switch": {"pfc_priorities": [3], "trust": "dscp", "dscp2prio": {}, **switch}}
    (fabric / "fabric.json").write_text(json.dumps(doc))
    return fabric


def _run(
    argv: list[str], roce: NodeState, fabric: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    code = lldptool.main(argv, state=roce, fabric_dir=fabric)
    got = capsys.readouterr()
    return code, got.out, got.err


def test_without_lldpad_every_command_fails_as_clif_open_does(
    socket_name: str, roce: NodeState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["-t", "-n", "-i", IF, "-V", "PFC"], roce, _fabric(tmp_path), capsys)
    assert code == 255 and out == ""
    assert err == "connect: Connection refused\nFailed to connect to lldpad - clif_open: Connection refused\n"


def test_the_peer_pfc_tlv_as_ieee8021qaz_print_pfc_tlv_prints_it(
    lldpad: None, roce: NodeState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric = _fabric(tmp_path, pfc_priorities=[3, 4])
    code, out, _ = _run(["-t", "-n", "-i", IF, "-V", "PFC"], roce, fabric, capsys)
    assert code == 0
    assert out == (
        "IEEE 8021QAZ PFC TLV\n\t Willing: no\n\t MACsec Bypass Capable: no\n"
        "\t PFC capable traffic classes: 8\n\t PFC enabled: 3 4 \n"
    )
    fabric = _fabric(tmp_path / "x", pfc_priorities=[])
    _, out, _ = _run(["-t", "-n", "-i", IF, "-V", "pfc"], roce, fabric, capsys)
    assert out.endswith("\t PFC enabled: none\n")


def test_the_peer_app_tlv_lists_dscps_per_priority(
    lldpad: None, roce: NodeState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric = _fabric(tmp_path, pfc_priorities=[3], dscp2prio={"26": 3, "48": 6})
    code, out, _ = _run(["-t", "-n", "-i", IF, "-V", "APP"], roce, fabric, capsys)
    assert code == 0
    row3 = "".join(f" {d:02d}," for d in range(24, 32))
    assert out == f"IEEE 8021QAZ APP TLV\n\tPrio:3 \t dscp: {row3}\b \n\tPrio:6 \t dscp:  48,\b \n"
    _, out, _ = _run(["-t", "-n", "-i", IF, "-V", "APP"], roce, _fabric(tmp_path / "p", trust="pcp"), capsys)
    assert out == "IEEE 8021QAZ APP TLV\n\t"  # a PCP-trusting switch maps no DSCP


def test_errors_and_ports_without_a_peer(
    lldpad: None, roce: NodeState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fabric = _fabric(tmp_path)
    assert _run(["-t", "-n", "-i", IF, "-V", "XYZ"], roce, fabric, capsys) == (
        1, "\nInvalid TLV identifier: XYZ\n", "")
    assert _run(["-t", "-n", "-i", "nosuch0", "-V", "PFC"], roce, fabric, capsys)[:2] == (
        1, "Device not found or inactive \n")
    assert _run(["-t", "-n", "-i", IF, "-V", "PFC", "-g", "ncb"], roce, fabric, capsys) == (0, "", "")
    code, out, _ = _run(["-p"], roce, fabric, capsys)
    assert code == 0 and out.strip().isdigit()


def test_mlnx_qos_warns_while_lldpad_runs(
    roce: NodeState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "comm").write_text("sshd\n")
    monkeypatch.setattr(mlnx_qos, "PROC", proc)
    mlnx_qos.main(["-i", IF], state=roce)
    assert "WARNING" not in capsys.readouterr().out
    (proc / "7").mkdir()
    (proc / "7" / "comm").write_text("lldpad\n")
    mlnx_qos.main(["-i", IF], state=roce)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "****** WARNING: lldpad service is running and may overwrite your settings ******", "",
        "DCBX mode: OS controlled"]


def test_the_products_parser_reads_what_the_emulator_prints(
    lldpad: None, roce: NodeState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.modules.conftest import load_util

    fabric = _fabric(tmp_path, pfc_priorities=[4], dscp2prio={"34": 4})
    texts = [_run(["-t", "-n", "-i", IF, "-V", key], roce, fabric, capsys)[1] for key in ("PFC", "APP")]
    peer = load_util("fabric_lldp").parse_peer("".join(texts))
    assert peer == {"willing": False, "pfc": [4], "dscp2prio": dict.fromkeys(range(32, 40), 4)}
