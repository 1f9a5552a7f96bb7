"""The emulated opensm: opensm.conf parsing and validation, publishing, sminfo's shared record."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from fabtune.errors import ConfigError
from fabtune.formats import parse_opensm_conf
from fabtune.sim import observe, opensm
from fabtune.sim.node import NodeState
from fabtune.sim.tools import sminfo
from fabtune.testbed import files
from fabtune.testbed.spec import build_spec, spec_to_doc

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


UPSTREAM, MLNX = opensm.FLAVORS["upstream"], opensm.FLAVORS["mlnx"]


def test_parse_conf_skips_comments_and_keeps_values() -> None:
    conf = parse_opensm_conf(CONF + "qos_sl2vl 0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7\n\nlmc 1\n"
                             "sm_sl 3 # after a value\nlog_prefix 'x y'\n\tmax_op_vls\t4\n")
    assert conf["qos_sl2vl"] == "0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7"
    assert conf["lmc"] == "1"  # the last line wins
    assert (conf["sm_sl"], conf["log_prefix"], conf["max_op_vls"]) == ("3", "x y", "4")
    assert "#" not in conf and "comment" not in conf


def test_defaults_when_unset() -> None:
    assert opensm.settings(CONF) == (opensm.SmSettings(), [])
    assert opensm.settings(CONF, MLNX)[0] == opensm.SmSettings("ar_updn", adaptive_routing=True,
                                                               flavor="mlnx")


def test_adaptive_routing_is_the_ar_engine_not_a_flag() -> None:
    """Issue 13.1: AR comes with the NVIDIA SM's ar_* engines (formats.md 7.2); no source names an
    ar_enable key, so the SM does not read one (it reports the token, as opensm's parser does)."""
    text = CONF + "routing_engine ar_ftree,minhop\nsm_priority 14\nqos TRUE\nlmc 2\n"
    got, report = opensm.settings(text, MLNX)
    assert got == opensm.SmSettings(routing_engine="ar_ftree,minhop", adaptive_routing=True,
                                    qos=True, lmc=2, sm_priority=14, flavor="mlnx")
    assert report == []
    assert observe.sm_config(got.to_json()).adaptive_routing
    plain, _ = opensm.settings(CONF + "routing_engine ftree,minhop\n", MLNX)
    assert not plain.adaptive_routing
    got, report = opensm.settings(CONF + "routing_engine ftree\nar_enable TRUE\n", MLNX)
    assert (got.routing_engine, got.adaptive_routing) == ("ftree", False)
    assert report == [' Unrecognized token: "ar_enable"']


def test_unknown_key_is_reported_and_the_rest_applies() -> None:
    """Issue 13.8: upstream opensm logs an unknown key and goes on (osm_subn_parse_conf_file)."""
    got, report = opensm.settings(CONF + "no_such_key 1\nsm_priority 9\n")
    assert report == [' Unrecognized token: "no_such_key"']
    assert got.sm_priority == 9


def test_flavors_know_their_own_keys_and_engines() -> None:
    text = CONF + "adaptive_timeout_sl_mask 0x00ff\nrouting_engine ar_updn,updn\n"
    got, report = opensm.settings(text, UPSTREAM)
    assert report == [' Unrecognized token: "adaptive_timeout_sl_mask"',
                      "ERR: cannot find or setup routing engine 'ar_updn'"]
    assert (got.routing_engine, got.adaptive_routing) == ("updn", False)
    got, report = opensm.settings(text, MLNX)
    assert report == []
    assert (got.routing_engine, got.adaptive_routing) == ("ar_updn,updn", True)
    only_ar, _ = opensm.settings(CONF + "routing_engine ar_updn\n", UPSTREAM)
    assert only_ar.routing_engine == "minhop"  # the fallback


@pytest.mark.parametrize(("line", "report", "field", "value"), [
    ("sm_priority 16", " Invalid Cached Option Value:sm_priority = 16:Using Default:0", "sm_priority", 0),
    ("lmc 9", " Invalid Cached Option Value:lmc = 9:Using Default:0", "lmc", 0),
    ("lmc 256", "-E- Parsing error in field lmc, value out of range", "lmc", 0),
    ("lmc -1", "-E- Parsing error in field lmc, value out of range", "lmc", 0),
    ("lmc x", "-E- Parsing error in field lmc, expected numeric input received: x", "lmc", 0),
    ("lmc 08", "-E- Parsing error in field lmc, expected numeric input received: 08", "lmc", 0),
    ("lmc 010", " Invalid Cached Option Value:lmc = 8:Using Default:0", "lmc", 0),  # octal
    ("lmc 07", None, "lmc", 7),
    ("sm_priority 0xf", None, "sm_priority", 15),
    ("qos maybe", None, "qos", False),
    ("qos true", None, "qos", False),  # only TRUE is true (opts_parse_boolean's strcmp)
])
def test_values_as_opensm_reads_them(line: str, report: str | None, field: str, value: object) -> None:
    got, lines = opensm.settings(CONF + line + "\n")
    assert lines == ([report] if report else [])
    assert getattr(got, field) == value


def test_qos_limits_are_checked_only_with_qos() -> None:
    text = CONF + "qos_max_vls 16\nqos_high_limit 300\n"
    assert opensm.read_values(text, UPSTREAM)[1] == []
    values, report = opensm.read_values(text + "qos TRUE\n", UPSTREAM)
    assert report == [" Invalid Cached Option: qos_max_vls=16: Using Default = 15",
                      " Invalid Cached Option: qos_high_limit=300: Using Default: 0"]
    assert (values["qos_max_vls"], values["qos_high_limit"]) == (0, -1)


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    assert opensm.read_settings(tmp_path / "none.conf") == (opensm.SmSettings(), [])


def test_spec_flavor() -> None:
    assert ib_spec().sm.flavor == "mlnx"  # type: ignore[attr-defined]
    assert ib_spec("ftree", False).sm.flavor == "upstream"  # type: ignore[attr-defined]
    spec = build_spec({"fabric": "ib", "hosts": 2, "sm": {"routing_engine": "ftree", "flavor": "mlnx"}})
    assert build_spec(spec_to_doc(spec)).sm == spec.sm
    with pytest.raises(ConfigError, match=r"sm\.routing_engine: 'ar_updn' is an NVIDIA SM engine"):
        build_spec({"fabric": "ib", "sm": {"routing_engine": "ar_updn", "flavor": "upstream"}})
    with pytest.raises(ConfigError, match=r"sm\.flavor: 'ufm' must be one of upstream, mlnx"):
        build_spec({"fabric": "ib", "sm": {"flavor": "ufm"}})


@needs_opensm
def test_real_create_config_is_valid_and_spec_keys_apply() -> None:
    text = files.opensm_conf(ib_spec())  # type: ignore[arg-type]
    assert text.startswith("#") and "\nrouting_engine ar_updn\n" in text
    assert "ar_enable" not in text and "adaptive_routing_enable" not in text
    got, report = opensm.settings(text, MLNX)
    assert (got.routing_engine, got.adaptive_routing, report) == ("ar_updn", True, [])
    plain, report = opensm.settings(files.opensm_conf(ib_spec("ftree", False)))  # type: ignore[arg-type]
    assert (plain.routing_engine, plain.adaptive_routing, report) == ("ftree", False, [])


def test_set_conf_key() -> None:
    assert files.set_conf_key("a 1\nb (null)\n", "b", "x") == "a 1\nb x\n"
    assert files.set_conf_key("a 1\nbb 2\n", "b", "x") == "a 1\nbb 2\nb x\n"
    assert files.set_conf_key("a 1", "b", "x") == "a 1\nb x\n"


def _daemon(ib: NodeState, tmp_path: Path, text: str) -> tuple[opensm.OpenSM, Path, Path]:
    conf, fabric = tmp_path / "opensm.conf", tmp_path / "fabric"
    fabric.mkdir()
    conf.write_text(text)
    return opensm.OpenSM(conf, fabric, ib, MLNX), conf, fabric


def test_sweeps_publish_routing_and_master(ib: NodeState, tmp_path: Path) -> None:
    sm, _, fabric = _daemon(ib, tmp_path, CONF + "routing_engine ar_updn\nsm_priority 15\n")
    sm.reread()
    sm.sweep()
    assert json.loads((fabric / "sm.json").read_text()) == {
        "routing_engine": "ar_updn", "adaptive_routing": True, "ar_sl_mask": 0xFFFF, "qos": False,
        "lmc": 0, "sm_priority": 15, "flavor": "mlnx", "sl2vl": []}
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


def test_no_local_port_withdraws_master_but_keeps_routing(ib: NodeState, tmp_path: Path) -> None:
    sm, conf, fabric = _daemon(ib, tmp_path, CONF + "routing_engine ftree\n")
    sm.reread()
    assert opensm.master(fabric) is not None
    conf.write_text(CONF + "routing_engine bogus\nno_such_key 1\n")  # reported, still master
    sm.reread()
    assert opensm.master(fabric) is not None
    assert json.loads((fabric / "sm.json").read_text())["routing_engine"] == "minhop"
    conf.write_text(CONF.replace("guid 0x0000000000000000", "guid 0x1"))
    assert sm.changed()
    sm.reread()
    assert opensm.master(fabric) is None
    assert json.loads((fabric / "sm.json").read_text())["routing_engine"] == "minhop"
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


def test_sl2vl_as_opensm_builds_the_cas_table() -> None:
    """qos_ca_sl2vl, else qos_sl2vl (qos_build_config); VL15 drops the SL (QoS doc section 7)."""
    drop3 = ",".join(["0", "1", "2", "15"] + ["0"] * 12)
    got, _ = opensm.settings(CONF.replace("qos FALSE", "qos TRUE") + f"qos_sl2vl {drop3}\n")
    assert got.sl2vl == (0, 1, 2, 15) + (0,) * 12 and got.to_json()["sl2vl"][3] == 15
    assert opensm.settings(CONF + f"qos_sl2vl {drop3}\n")[0].sl2vl == ()  # QoS off: not programmed
    ca_first, _ = opensm.settings(CONF.replace("qos FALSE", "qos TRUE")
                                  + f"qos_sl2vl {drop3}\nqos_ca_sl2vl 1,1,1,1\n")
    assert ca_first.sl2vl[:5] == (1, 1, 1, 15, 0)  # the switches' ports still take qos_sl2vl
    ca_only, _ = opensm.settings(CONF.replace("qos FALSE", "qos TRUE") + "qos_ca_sl2vl 1,1,1,1\n")
    assert ca_only.sl2vl[:5] == (1, 1, 1, 1, 0)
    swe_drop, _ = opensm.settings(CONF.replace("qos FALSE", "qos TRUE") + "qos_swe_sl2vl 0,15\n")
    assert swe_drop.sl2vl[:2] == (0, 15)
    assert opensm.sl2vl({"qos_sl2vl": "17,x,3y"})[:4] == (1, 0, 3, 0)  # 4 bits; no number is 0


@needs_opensm
def test_spec_qos_and_sl2vl_reach_opensm_conf() -> None:
    spec = build_spec({"name": "u", "fabric": "ib", "hosts": 2,
                       "sm": {"qos": True, "qos_sl2vl": [0] * 3 + [15] + [0] * 12}})
    assert build_spec(spec_to_doc(spec)).sm == spec.sm
    got, report = opensm.settings(files.opensm_conf(spec))
    assert report == [] and got.qos and got.sl2vl[3] == 15
    with pytest.raises(ConfigError, match=r"sm\.qos_sl2vl: \[1, 2\] must be a list of 16 integers"):
        build_spec({"fabric": "ib", "hosts": 2, "sm": {"qos_sl2vl": [1, 2]}})
