"""The emulated node tools inside testbed hosts, read with the parsers used for real output."""

from __future__ import annotations

import subprocess

import pytest

from fabtune.perf.parsers import dcb, ethtool, ibdev2netdev, ibstat, mlnx_qos, show_gids, topo
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec

pytestmark = pytest.mark.testbed


def sh(spec: TestbedSpec, host: str, *argv: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ssh_argv(spec.name, host, argv), capture_output=True, text=True, timeout=60, check=False
    )
    if ok:
        assert proc.returncode == 0, f"{argv}: {proc.stderr}{proc.stdout}"
    return proc


def test_mlnx_qos_pfc_persists_and_shows_in_dcb(roce3: TestbedSpec) -> None:
    dev = layout.nic_netdev(roce3, 1)
    before = mlnx_qos.parse(sh(roce3, "h01", "mlnx_qos", "-i", dev).stdout)
    assert before.trust == "pcp"
    assert before.pfc_enabled == (False,) * 8
    sh(roce3, "h01", "mlnx_qos", "-i", dev, "--pfc", "0,0,0,1,0,0,0,0")
    after = mlnx_qos.parse(sh(roce3, "h01", "mlnx_qos", "-i", dev).stdout)
    assert after.pfc_enabled == (False, False, False, True, False, False, False, False)
    shown = dcb.parse(sh(roce3, "h01", "dcb", "pfc", "show", "dev", dev).stdout)
    assert [p for p, on in shown.pfc_enabled.items() if on] == [3]
    other = mlnx_qos.parse(sh(roce3, "h02", "mlnx_qos", "-i", dev).stdout)
    assert other.pfc_enabled == (False,) * 8


def test_mlnx_qos_rejects_a_short_pfc_list_like_the_real_tool(roce3: TestbedSpec) -> None:
    dev = layout.nic_netdev(roce3, 2)
    # mlnx-tools checks each value before the length: "1,2" fails on the 2, "1,0" on the length.
    bad = sh(roce3, "h01", "mlnx_qos", "-i", dev, "--pfc", "1,2", ok=False)
    assert bad.returncode == 1
    assert "Bad value for PFC: 2" in bad.stdout + bad.stderr
    short = sh(roce3, "h01", "mlnx_qos", "-i", dev, "--pfc", "1,0", ok=False)
    assert short.returncode == 1
    assert "pfc list must have 8 items" in short.stdout + short.stderr
    assert mlnx_qos.parse(sh(roce3, "h01", "mlnx_qos", "-i", dev).stdout).pfc_enabled == (False,) * 8


def test_mtu_change_shows_in_sysfs_and_the_verbs_view(roce3: TestbedSpec) -> None:
    dev = layout.nic_netdev(roce3, 3)
    assert "active_mtu:\t\t1024 (3)" in sh(roce3, "h02", "ibv_devinfo", "-d", "mlx5_3").stdout
    sh(roce3, "h02", "ip", "link", "set", dev, "mtu", "4200")
    assert sh(roce3, "h02", "cat", f"/sys/class/net/{dev}/mtu").stdout == "4200\n"
    assert "active_mtu:\t\t4096 (5)" in sh(roce3, "h02", "ibv_devinfo", "-d", "mlx5_3").stdout


def test_show_gids_lists_the_rocev2_ipv4_gid(roce3: TestbedSpec) -> None:
    table = show_gids.parse(sh(roce3, "h02", "show_gids").stdout)
    v2 = [e for e in table.entries if e.device == "mlx5_0" and e.version == "v2" and e.ipv4]
    assert [(e.index, e.ipv4, e.netdev) for e in v2] == [
        (3, layout.rail_ip(roce3, roce3.host("h02"), 0), layout.nic_netdev(roce3, 0))
    ]


def test_ibstat_and_ibdev2netdev_describe_every_nic(roce3: TestbedSpec) -> None:
    cas = ibstat.parse(sh(roce3, "h01", "ibstat").stdout).cas
    assert [ca.name for ca in cas] == [f"mlx5_{i}" for i in range(roce3.nics_per_host)]
    port = cas[0].ports[0]
    assert (port.state, port.link_layer, port.rate, cas[0].firmware_version) == (
        "Active",
        "Ethernet",
        "400",
        roce3.firmware,
    )
    mapping = ibdev2netdev.parse(sh(roce3, "h01", "ibdev2netdev").stdout).entries
    assert [(e.device, e.netdev, e.up) for e in mapping] == [
        (f"mlx5_{i}", layout.nic_netdev(roce3, i), True) for i in range(roce3.nics_per_host)
    ]


def test_topo_flags_the_nic_across_the_socket(roce3: TestbedSpec) -> None:
    good = topo.parse(sh(roce3, "h01", "nvidia-smi", "topo", "-m").stdout)
    moved = topo.parse(sh(roce3, "h03", "nvidia-smi", "topo", "-m").stdout)
    assert good.distance(0, "mlx5_0") == "PIX"
    assert moved.distance(0, "mlx5_0") == "SYS"


def test_ethtool_reports_per_priority_pause_counters(roce3: TestbedSpec) -> None:
    stats = ethtool.parse(sh(roce3, "h01", "ethtool", "-S", layout.nic_netdev(roce3, 0)).stdout)
    assert set(stats.per_priority("rx_prio{}_pause")) == set(range(8))
