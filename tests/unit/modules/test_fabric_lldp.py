"""fabric_lldp: the switch's DCBX as ``lldptool -t -n -V PFC|APP`` prints it (openlldp
lldp_8021qaz_clif.c), and fabric_facts' ``hardware.lldp``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.modules.conftest import load_module, load_util

lldp = load_util("fabric_lldp")
fabric_facts = load_module("fabric_facts")

# ieee8021qaz_print_tlv: the name, "\n\t", then the TLV's printer; ieee8021qaz_print_pfc_tlv prints
# each enabled priority as "%i "; ieee8021qaz_print_app_tlv prints other selectors as "App#" rows
# first, then the DSCP rows (" %02i," each, closed by "\b \n"), every row after the first tabbed.
PFC = ("IEEE 8021QAZ PFC TLV\n\t Willing: no\n\t MACsec Bypass Capable: no\n"
       "\t PFC capable traffic classes: 8\n\t PFC enabled: 3 \n")
APP = ("IEEE 8021QAZ APP TLV\n\tApp#   0 \t Prio 4 \t Sel 1 \t P-ID\t Ethertype: 0x8906\n"
       "\tPrio:3 \t dscp:  24, 26,\b \n\tPrio:6 \t dscp:  48,\b \n")


def test_the_peer_pfc_and_app_tlvs_are_parsed() -> None:
    assert lldp.parse_peer(PFC + APP) == {"willing": False, "pfc": [3], "dscp2prio": {24: 3, 26: 3, 48: 6}}
    willing = PFC.replace("Willing: no", "Willing: yes").replace("enabled: 3 ", "enabled: 3 4 ")
    assert lldp.parse_peer(willing) == {"willing": True, "pfc": [3, 4], "dscp2prio": {}}
    assert lldp.parse_peer(PFC.replace("enabled: 3 ", "enabled: none")) == {
        "willing": False, "pfc": [], "dscp2prio": {}}


def test_a_port_whose_peer_sends_no_pfc_tlv_has_no_peer() -> None:
    assert lldp.parse_peer("") is None
    assert lldp.parse_peer(APP) is None


@pytest.mark.parametrize("bad", [
    PFC.replace("enabled: 3 ", "enabled: 9 "),
    PFC.replace("\t Willing: no\n", ""),
    PFC + APP.replace(" 24,", " 99,"),
])
def test_lines_that_are_not_lldptools_are_refused(bad: str) -> None:
    with pytest.raises(lldp.LldpError):
        lldp.parse_peer(bad)


class _Module:
    """Just what Gatherer.lldp uses of AnsibleModule."""

    def __init__(self, outputs: dict[str, tuple[int, str]], installed: bool = True) -> None:
        self.outputs, self.installed, self.calls, self.warnings = outputs, installed, [], []

    def get_bin_path(self, name: str) -> str | None:
        return f"/usr/sbin/{name}" if self.installed else None

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        rc, out = self.outputs[f"{argv[4]} {argv[6]}"]
        return rc, out, ""

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def _gather(module: _Module, netdevs: list[str]) -> Any:
    return fabric_facts.Gatherer(module).lldp(netdevs)


def test_facts_read_every_roce_ports_peer() -> None:
    module = _Module({"eth2 PFC": (0, PFC), "eth2 APP": (0, APP), "eth3 PFC": (0, ""), "eth3 APP": (0, "")})
    assert _gather(module, ["eth2", "eth3"]) == {
        "eth2": {"willing": False, "pfc": [3], "dscp2prio": {24: 3, 26: 3, 48: 6}}}
    assert module.calls[0] == ["/usr/sbin/lldptool", "-t", "-n", "-i", "eth2", "-V", "PFC"]


def test_no_lldp_without_lldptool_or_lldpad() -> None:
    assert _gather(_Module({}, installed=False), ["eth2"]) is None
    refused = _Module({"eth2 PFC": (255, ""), "eth2 APP": (255, "")})  # lldpad not running
    assert _gather(refused, ["eth2"]) is None
    garbled = _Module({"eth2 PFC": (0, PFC.replace("3 ", "x ")), "eth2 APP": (0, "")})
    assert _gather(garbled, ["eth2"]) == {}
    assert "cannot parse lldptool's TLVs of eth2" in garbled.warnings[0]
