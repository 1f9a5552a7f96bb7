"""Fidelity: the emulated opensm's reading of opensm.conf against Debian's real ``/usr/sbin/opensm``.

``opensm -F FILE -c OUT`` reads FILE with opensm's own parser (``osm_subn_parse_conf_file``, then
``osm_subn_verify_config``), prints what it thinks of each line, writes the configuration it ended
with to OUT and exits: no InfiniBand hardware is needed. The emulated SM (upstream flavor, Debian's
opensm 3.3.23) must print the same reports (an unknown key, a value that does not parse, a value out
of range) and end with the same values for every key it reads. Routing engines are checked only
when the SM starts on a port (``setup_routing_engines``), so both keep the string here.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from fabtune.ansible import MODULE_UTILS, PROFILES
from fabtune.formats import parse_opensm_conf
from fabtune.sim import opensm

REAL = shutil.which("opensm")
pytestmark = pytest.mark.skipif(REAL is None, reason="Debian's opensm is not installed (scripts/install.sh)")
REPORTS = (" Unrecognized token:", "-E- Parsing error", " Invalid Cached Option", " Warning: Cached Option")
UPSTREAM = opensm.FLAVORS["upstream"]

CASES = {
    "unsourced adaptive-routing keys": "ar_enable TRUE\nadaptive_routing_enable TRUE\n",
    "an NVIDIA SM key": "adaptive_timeout_sl_mask 0xffff\n",
    "a misspelt key beside good ones": "sm_prority 3\nsm_priority 7\nlmc 1\n",
    "lmc over 7": "lmc 9\n",
    "lmc over a byte": "lmc 256\n",
    "negative lmc": "lmc -1\n",
    "not a number": "sm_priority abc\n",
    "not octal": "lmc 08\n",
    "octal": "sm_priority 010\n",
    "hex": "sm_priority 0xf\nguid 0x0002c90300a1b2c3\n",
    "sm_priority over 15": "sm_priority 16\n",
    "no value": "lmc\n",
    "lower-case true": "qos true\nreassign_lids TRUE\n",
    "not a boolean": "qos maybe\n",
    "qos limits": "qos TRUE\nqos_max_vls 16\nqos_high_limit 300\n",
    "qos limits without qos": "qos_max_vls 16\nqos_high_limit 300\n",
    "per-type qos limits": "qos TRUE\nqos_ca_max_vls 20\nqos_swe_high_limit 256\n",
    "sl2vl": "qos TRUE\nqos_sl2vl 0,1,2,15,4,5,6,7,0,1,2,3,4,5,6,7\n",
    "short and bad sl2vl": "qos TRUE\nqos_sl2vl 0,1,x,17\nqos_ca_sl2vl 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1\n",
    "sl2vl without qos": "qos_sl2vl 0,1\n",
    "comments, tabs and quotes": "sm_sl\t3   # the SM's SL\nrouting_engine 'ftree,minhop'\n# lmc 5\n",
    "max_op_vls as a count": "max_op_vls 8\nsm_sl 15\nsweep_interval 0\n",
    "the last line wins": "sm_priority 3\nsm_priority 12\n",
}
TYPED = opensm.UINT8_KEYS + opensm.UINT32_KEYS + opensm.INT32_KEYS + opensm.BOOL_KEYS + ("guid",)


def real(tmp_path: Path, text: str) -> tuple[list[str], dict[str, str]]:
    """What Debian's opensm reports while reading ``text``, and the values it ends with."""
    assert REAL is not None
    conf, out = tmp_path / "in.conf", tmp_path / "out.conf"
    conf.write_text(text)
    done = subprocess.run([REAL, "-F", str(conf), "-c", str(out)], capture_output=True, text=True,
                          timeout=30, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    reports = [line for line in done.stdout.splitlines() if line.startswith(REPORTS)]
    return reports, parse_opensm_conf(out.read_text())


def _fabric_desired() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fd", MODULE_UTILS / "fabric_desired.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shown(key: str, value: object) -> str:
    """A value as opensm's --create-config writes it."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if key == "guid":
        return f"0x{value:016x}"
    return "(null)" if value is None else str(value)


@pytest.mark.parametrize("text", list(CASES.values()), ids=list(CASES))
def test_the_twin_reads_opensm_conf_as_debians_opensm(tmp_path: Path, text: str) -> None:
    reports, written = real(tmp_path, text)
    values, twin_reports = opensm.read_values(text, UPSTREAM)
    assert twin_reports == reports
    for key in (*TYPED, "routing_engine"):
        if key in values:
            assert shown(key, values[key]) == written[key], key


def test_the_role_writes_what_debians_opensm_takes_silently(tmp_path: Path) -> None:
    """The ib profile's sm keys, as the ib_sm role writes them, draw no report from either."""
    desired = _fabric_desired()
    profile = yaml.safe_load((PROFILES / "ib.yml").read_text())["fabric_desired"]
    problems, checked = desired.validate({"sm": profile["sm"]})
    assert not problems
    lines = "".join(f"{k} {shown(k, v)}\n" for k, v in checked["sm"].items() if k != "sm_flavor")
    reports, written = real(tmp_path, lines)
    assert reports == [] and opensm.read_values(lines, UPSTREAM)[1] == []
    for key, value in checked["sm"].items():
        if key != "sm_flavor":
            assert written[key] == shown(key, value)
