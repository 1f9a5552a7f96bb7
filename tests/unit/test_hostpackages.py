"""The host tool table: every tool fabtune needs has a package per family; a missing one is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.hostpackages import TOOLS, family_of, needs, parse_found, tool_results
from fabtune.inventory import LAUNCHERS, InventoryInfo


def info(fabric: str = "roce", launcher: str = "mpirun", sm: tuple[str, ...] = ()) -> InventoryInfo:
    return InventoryInfo(Path("/x.yml"), "rack1", fabric, ("h01", "h02"), sm, launcher, None)


@pytest.mark.parametrize("fabric", ["roce", "ib"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_needed_tool_has_a_package_for_both_families(fabric: str, launcher: str) -> None:
    for alternatives in needs(info(fabric, launcher, ("h01",)), "h01"):
        for tool in alternatives:
            assert TOOLS[tool].package("debian") and TOOLS[tool].package("rhel")


def test_the_family_comes_from_ansible_os_family() -> None:
    assert family_of("Debian") == "debian"  # Debian and Ubuntu
    assert family_of("RedHat") == "rhel"  # RHEL, Rocky, Alma, CentOS, Fedora
    assert family_of("Suse") == "unknown"
    assert family_of(None) == "unknown"


def test_a_missing_tool_names_host_tool_and_package_of_the_family() -> None:
    need = needs(info(), "h02")
    everything = {t for alternatives in need for t in alternatives}
    [deb] = tool_results("h02", need, everything - {"ib_write_bw"}, "Debian")
    assert (deb.check, deb.host, deb.verdict) == ("tools", "h02", "fail")
    assert "ib_write_bw" in deb.summary and "perftest" in deb.summary
    [rhel] = tool_results("h02", need, everything - {"mpirun"}, "RedHat")
    assert "mpirun" in rhel.summary and "openmpi" in rhel.summary and "openmpi-bin" not in rhel.summary
    [deb_mpi] = tool_results("h02", need, everything - {"mpirun"}, "Debian")
    assert "openmpi-bin" in deb_mpi.summary
    [diags] = tool_results("h01", need, everything - {"ibstat"}, "RedHat")
    assert "infiniband-diags" in diags.summary
    ip, qos = tool_results("h01", need, everything - {"dcb", "mlnx_qos", "ip"}, None)
    assert ip.summary.startswith("ip not found")
    assert "iproute2 (Debian/Ubuntu), iproute (RHEL-like)" in ip.summary
    assert qos.summary.startswith("mlnx_qos or dcb not found")


def test_either_qos_tool_is_enough_on_roce_and_none_is_needed_on_ib() -> None:
    need = needs(info(), "h01")
    everything = {t for alternatives in need for t in alternatives}
    assert [r.verdict for r in tool_results("h01", need, everything - {"mlnx_qos"}, "Debian")] == ["pass"]
    [both] = tool_results("h01", need, everything - {"mlnx_qos", "dcb"}, "Debian")
    assert "mlnx-tools" in both.summary and "iproute2" in both.summary
    ib = needs(info("ib"), "h01")
    assert ("mlnx_qos", "dcb") not in ib and ("sminfo",) in ib and ("show_gids",) not in ib


def test_the_launcher_and_subnet_manager_decide_what_is_needed() -> None:
    assert ("srun",) in needs(info(launcher="srun"), "h01")
    assert ("mpirun",) not in needs(info(launcher="srun"), "h01")
    assert ("opensm",) in needs(info("ib", sm=("h01",)), "h01")
    assert ("opensm",) not in needs(info("ib", sm=("h01",)), "h02")
    assert ("all_reduce_perf",) not in needs(info(), "h01", with_nccl=False)


def test_lldptool_is_named_but_never_needed() -> None:
    """lldpad is optional (docs/real-cluster.md): its package is in the table, no host fails without it."""
    assert TOOLS["lldptool"].package("debian") == "lldpad"
    for rack in (info(), info("ib", sm=("h01",)), info(launcher="srun")):
        assert not any("lldptool" in need for need in needs(rack, "h01"))


def test_unknown_family_names_both_packages() -> None:
    assert TOOLS["dcb"].package("unknown") == "iproute2 (Debian/Ubuntu), iproute (RHEL-like)"
    assert TOOLS["ib_write_bw"].package("unknown") == "perftest"


def test_found_lines_are_tool_names() -> None:
    assert parse_found("ip /usr/sbin/ip\nib_write_bw /usr/bin/ib_write_bw\n\n") == {"ip", "ib_write_bw"}


def test_every_tool_is_in_the_operator_guide() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "real-cluster.md").read_text()
    for tool in TOOLS.values():
        assert f"`{tool.tool}`" in guide, tool.tool
