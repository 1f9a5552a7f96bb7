"""The emulated opensm: opensm.conf parsing and validation, publishing, sminfo's shared record."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from fabtune.sim import observe, opensm
from fabtune.sim.node import NodeState
from fabtune.sim.tools import sminfo
from fabtune.testbed import files
from fabtune.testbed.spec import build_spec

Capture = pytest.CaptureFixture[str]
HAVE_OPENSM = shutil.which(files.OPENSM) is not None
needs_opensm = pytest.mark.skipif(not HAVE_OPENSM, reason="Debian's opensm is not installed")

CONF = """\
# comment
guid 0x0000000000000000
lmc 0
routing_engine (null)
sm_priority 0
qos FALSE
qos_high_limit -1
"""


def ib_spec(engine: str = "ar_updn", ar: bool = True) -> object:
    return build_spec({"name": "u", "fabric": "ib", "hosts": 2, "subnet_base": "10.206",
                       "sm": {"host": "h01", "routing_engine": engine, "adaptive_routing": ar}})


def test_parse_conf_skips_comments_and_keeps_values() -> None:
    conf = opensm.parse_conf(CONF + "qos_sl2vl 0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7\n\nlmc 1\n")
    assert conf["qos_sl2vl"] == "0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7"
    assert conf["lmc"] == "1"  # the last line wins
    assert "#" not in conf and "comment" not in conf


def test_defaults_when_unset() -> None:
    assert opensm.settings(opensm.parse_conf(CONF)) == opensm.SmSettings()


def test_adaptive_routing_is_the_ar_engine_not_a_flag() -> None:
    """Issue 13.1: AR comes with the NVIDIA SM's ar_* engines (formats.md 7.2); no source names an
    ar_enable key, so the SM no longer reads one."""
    text = CONF + "routing_engine ar_ftree,minhop\nsm_priority 14\nqos TRUE\nlmc 2\n"
    got = opensm.settings(opensm.parse_conf(text))
    assert got == opensm.SmSettings(routing_engine="ar_ftree,minhop", adaptive_routing=True,
                                    qos=True, lmc=2, sm_priority=14)
    assert observe.sm_config(got.to_json()).adaptive_routing
    plain = opensm.settings(opensm.parse_conf(CONF + "routing_engine ftree,minhop\n"))
    assert not plain.adaptive_routing
    with pytest.raises(opensm.ConfError, match="ar_enable: not an opensm option"):
        opensm.settings(opensm.parse_conf(CONF + "routing_engine ftree\nar_enable TRUE\n"))


@pytest.mark.parametrize(("line", "why"), [
    ("routing_engine fattree", "unknown routing engine 'fattree'"),
    ("sm_priority 16", "sm_priority: 16 is out of range 0..15"),
    ("qos maybe", "qos: 'maybe' is not TRUE or FALSE"),
    ("lmc x", "lmc: 'x' is not a number"),
    ("no_such_key 1", "no_such_key: not an opensm option"),
])
def test_invalid_conf(line: str, why: str) -> None:
    with pytest.raises(opensm.ConfError) as exc:
        opensm.settings(opensm.parse_conf(CONF + line + "\n"))
    assert any(why in p for p in exc.value.problems)


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    assert opensm.read_settings(tmp_path / "none.conf") == opensm.SmSettings()


@needs_opensm
def test_real_create_config_is_valid_and_spec_keys_apply() -> None:
    text = files.opensm_conf(ib_spec())  # type: ignore[arg-type]
    assert text.startswith("#") and "\nrouting_engine ar_updn\n" in text
    assert "ar_enable" not in text and "adaptive_routing_enable" not in text
    got = opensm.settings(opensm.parse_conf(text))
    assert (got.routing_engine, got.adaptive_routing) == ("ar_updn", True)
    plain = opensm.settings(opensm.parse_conf(files.opensm_conf(ib_spec("ftree", False))))  # type: ignore[arg-type]
    assert (plain.routing_engine, plain.adaptive_routing) == ("ftree", False)


def test_set_conf_key() -> None:
    assert files.set_conf_key("a 1\nb (null)\n", "b", "x") == "a 1\nb x\n"
    assert files.set_conf_key("a 1\nbb 2\n", "b", "x") == "a 1\nbb 2\nb x\n"
    assert files.set_conf_key("a 1", "b", "x") == "a 1\nb x\n"


def _daemon(ib: NodeState, tmp_path: Path, text: str) -> tuple[opensm.OpenSM, Path, Path]:
    conf, fabric = tmp_path / "opensm.conf", tmp_path / "fabric"
    fabric.mkdir()
    conf.write_text(text)
    return opensm.OpenSM(conf, fabric, ib), conf, fabric


def test_sweeps_publish_routing_and_master(ib: NodeState, tmp_path: Path) -> None:
    sm, _, fabric = _daemon(ib, tmp_path, CONF + "routing_engine ar_updn\nsm_priority 15\n")
    sm.reread()
    sm.sweep()
    assert json.loads((fabric / "sm.json").read_text()) == {
        "routing_engine": "ar_updn", "adaptive_routing": True, "ar_sl_mask": 0xFFFF, "qos": False,
        "lmc": 0, "sm_priority": 15}
    record = opensm.master(fabric)
    assert record is not None
    port = ib.node.nics[0]
    assert (record["lid"], record["guid"], record["priority"], record["state"], record["activity"]) \
        == (port.lid, f"0x{port.port_guid:016x}", 15, 3, 2)


def test_guid_selects_the_port(ib: NodeState, tmp_path: Path) -> None:
    second = ib.node.nics[1]
    sm, _, fabric = _daemon(ib, tmp_path, CONF.replace("guid 0x0000000000000000",
                                                        f"guid 0x{second.port_guid:016x}"))
    sm.reread()
    assert opensm.master(fabric)["lid"] == second.lid  # type: ignore[index]


def test_invalid_conf_withdraws_master_but_keeps_routing(ib: NodeState, tmp_path: Path) -> None:
    sm, conf, fabric = _daemon(ib, tmp_path, CONF + "routing_engine ftree\n")
    sm.reread()
    assert opensm.master(fabric) is not None
    conf.write_text(CONF + "routing_engine bogus\n")
    assert sm.changed()
    sm.reread()
    assert opensm.master(fabric) is None
    assert json.loads((fabric / "sm.json").read_text())["routing_engine"] == "ftree"
    sm.sweep()  # not master: no record comes back
    assert not (fabric / "sminfo.json").exists()


def test_stale_heartbeat_means_no_master(tmp_path: Path) -> None:
    (tmp_path / "sminfo.json").write_text(json.dumps({"lid": 1, "guid": "0x1", "state": 3,
                                                      "heartbeat": 1000.0}))
    assert opensm.master(tmp_path, now=1000.0 + opensm.STALE_S - 1) is not None
    assert opensm.master(tmp_path, now=1000.0 + opensm.STALE_S + 1) is None


def test_withdraw_leaves_another_hosts_record(tmp_path: Path) -> None:
    (tmp_path / "sminfo.json").write_text(json.dumps({"host": "h02"}))
    opensm.withdraw(tmp_path, "h01")
    assert (tmp_path / "sminfo.json").exists()
    opensm.withdraw(tmp_path, "h02")
    assert not (tmp_path / "sminfo.json").exists()


def test_run_applies_changes_and_withdraws_on_stop(ib: NodeState, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opensm, "POLL_S", 0.05)
    monkeypatch.setattr(opensm, "SWEEP_S", 0.1)
    sm, conf, fabric = _daemon(ib, tmp_path, CONF + "routing_engine minhop\n")
    stop, hup = threading.Event(), threading.Event()
    thread = threading.Thread(target=sm.run, args=(stop, hup))
    thread.start()
    try:
        _wait(lambda: opensm.master(fabric) is not None)
        first = opensm.master(fabric)["activity"]  # type: ignore[index]
        _wait(lambda: opensm.master(fabric)["activity"] > first)  # type: ignore[index]
        conf.write_text(CONF + "routing_engine ar_updn\n")
        _wait(lambda: json.loads((fabric / "sm.json").read_text())["routing_engine"] == "ar_updn")
        assert observe.sm_config(json.loads((fabric / "sm.json").read_text())).adaptive_routing
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert opensm.master(fabric) is None


def _wait(cond: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_sminfo_reads_the_subnets_master(ib: NodeState, tmp_path: Path, capsys: Capture) -> None:
    fabric = tmp_path / "fabric"
    fabric.mkdir()
    assert sminfo.main([], ib, fabric) == 255
    assert capsys.readouterr().err == "sminfo: iberror: failed: query\n"
    record = {"lid": 1, "guid": "0xb83fd20300000000", "activity": 7, "priority": 14, "state": 3,
              "host": "h01", "heartbeat": time.time()}
    (fabric / "sminfo.json").write_text(json.dumps(record))
    assert sminfo.main([], ib, fabric) == 0
    assert capsys.readouterr().out == ("sminfo: sm lid 1 sm guid 0xb83fd20300000000, activity count 7 "
                                       "priority 14 state 3 SMINFO_MASTER\n")
    record["heartbeat"] = time.time() - 2 * opensm.STALE_S
    (fabric / "sminfo.json").write_text(json.dumps(record))
    assert sminfo.main([], ib, fabric) == 255
