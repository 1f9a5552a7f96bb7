"""The emulated benchmarks on a 4-host RoCE testbed, read with the parsers used for real output."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from fabtune import ansible
from fabtune.perf.parsers import ethtool, nccl_debug, nccl_tests, perftest
from fabtune.sim.model import NicConfig, ceiling_gbps
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.oracle import controller_fabric
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed

pytestmark = pytest.mark.testbed

PFC3 = [0, 0, 0, 1, 0, 0, 0, 0]
PFC4 = [0, 0, 0, 0, 1, 0, 0, 0]
CEILING = ceiling_gbps(NicConfig(rate_gbps=400.0, mtu=4200))
MPIRUN = ["mpirun", "--allow-run-as-root", "-np", "4", "-H", "h01,h02,h03,h04",
          "--mca", "oob_tcp_if_include", "eth0", "--mca", "btl_tcp_if_include", "eth0",
          "-x", "NCCL_DEBUG=INFO", "all_reduce_perf", "-b", "8M", "-e", "128M", "-f", "2", "-g", "4"]


@pytest.fixture(scope="module")
def bench() -> Iterator[TestbedSpec]:
    """Four correctly configured 400G RoCE hosts; the switch does PFC on 3 and no ECN marking."""
    yield from make_testbed({
        "name": "itbnch", "fabric": "roce", "hosts": 4, "subnet_base": "10.204", "seed": 11,
        "initial": {"trust": "dscp", "pfc": PFC3, "roce_tos": 106, "mtu": 4200,
                    "ecn_np": PFC3, "ecn_rp": PFC3},
        "switch": {"pfc_priorities": [3], "ecn_priorities": []},
    })


def sh(spec: TestbedSpec, host: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ssh_argv(spec.name, host, argv), capture_output=True, text=True,
                          timeout=timeout, check=False)


def start_server(spec: TestbedSpec, host: str, *argv: str) -> subprocess.Popen[str]:
    """Start an ib_write_bw server and wait for its banner."""
    proc = subprocess.Popen(ssh_argv(spec.name, host, ["ib_write_bw", *argv]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "Waiting for client to connect" in line:
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"server on {host} did not start: {proc.stderr.read() if proc.stderr else ''}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


@contextlib.contextmanager
def servers(spec: TestbedSpec, host: str, ports: list[int],
            *argv: str) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [start_server(spec, host, "-p", str(p), *argv) for p in ports]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# Starts argv[2:] at the epoch time argv[1] (the testbed's hosts share the machine's clock), in a
# process forked then, so the emulated tool's start (its fork) is that instant.
AT = ("import subprocess, sys, time; time.sleep(max(0.0, float(sys.argv[1]) - time.time())); "
      "sys.exit(subprocess.call(sys.argv[2:]))")
START_LEAD_S = 3.0  # ssh to every host within it, even on a loaded machine


def incast(spec: TestbedSpec, ports: list[int], *argv: str) -> list[perftest.PerftestResult]:
    """Three clients (h01..h03) started at one instant against servers on h04: reached over ssh one
    after another, each waits for that instant (as ``fabtune bench incast``'s clients do), since a
    client started late runs alone for part of its window, as a real one would."""
    at = f"{time.time() + START_LEAD_S:.3f}"
    argvs = [ssh_argv(spec.name, f"h0{i + 1}",
                      ["python3", "-c", AT, at, "ib_write_bw", "-p", str(p), *argv, "h04"])
             for i, p in enumerate(ports)]
    clients = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs]
    results = []
    for proc in clients:
        code, out, err = finish(proc)
        assert code == 0, err + out
        results.append(perftest.parse(out))
    return results


def set_pfc(spec: TestbedSpec, pfc: list[int]) -> None:
    dev = layout.nic_netdev(spec, 0)
    for host in spec.hosts:
        proc = sh(spec, host.name, "mlnx_qos", "-i", dev, "--pfc", ",".join(map(str, pfc)))
        assert proc.returncode == 0, proc.stderr


def pause_count(spec: TestbedSpec, host: str, prio: int) -> int:
    stats = ethtool.parse(sh(spec, host, "ethtool", "-S", layout.nic_netdev(spec, 0)).stdout)
    return int(stats.counters[f"rx_prio{prio}_pause"])


def test_write_bw_reaches_the_ceiling(bench: TestbedSpec) -> None:
    with servers(bench, "h02", [18515], "-q", "8", "--report_gbits") as (server,):
        client = sh(bench, "h01", "ib_write_bw", "-q", "8", "--report_gbits", "h02")
        assert client.returncode == 0, client.stderr
        code, server_out, _ = finish(server)
    assert code == 0
    result = perftest.parse(client.stdout)
    gbps = result.bw_average_gbps(result.bw_rows[0])
    assert abs(gbps - CEILING) / CEILING < 0.01, (gbps, CEILING)
    assert result.header.gid_index == 3 and result.header.link_type == "Ethernet"
    assert perftest.parse(server_out).bw_rows == result.bw_rows


def test_lossy_incast_collapses(bench: TestbedSpec) -> None:
    set_pfc(bench, PFC4)
    try:
        ports = [18601, 18602, 18603]
        with servers(bench, "h04", ports, "--report_gbits", "--tclass=106"):
            results = incast(bench, ports, "--report_gbits", "--tclass=106")
    finally:
        set_pfc(bench, PFC3)
    fair = CEILING / 3
    for result in results:
        assert result.bw_average_gbps(result.bw_rows[0]) < 0.25 * fair


def test_pfc_only_incast_moves_pause_counters(bench: TestbedSpec) -> None:
    before = pause_count(bench, "h01", 3)
    ports = [18611, 18612, 18613]
    with servers(bench, "h04", ports, "--report_gbits", "--tclass=106"):
        results = incast(bench, ports, "--report_gbits", "--tclass=106")
    fair = CEILING / 3
    assert all(r.bw_average_gbps(r.bw_rows[0]) > 0.5 * fair for r in results)
    assert pause_count(bench, "h01", 3) > before
    hw = sh(bench, "h04", "cat", "/sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data")
    assert int(hw.stdout) > 0


def test_missing_server_fails_like_perftest(bench: TestbedSpec) -> None:
    proc = sh(bench, "h01", "ib_write_bw", "-p", "18999", "h03")
    assert proc.returncode == 1
    assert "Couldn't connect to h03:18999" in proc.stderr
    assert perftest.parse(proc.stdout + proc.stderr).error is not None


def test_mpirun_all_reduce_over_net_ib(bench: TestbedSpec) -> None:
    proc = sh(bench, "h01", *MPIRUN)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    table = nccl_tests.parse(proc.stdout)
    assert [r.size_bytes for r in table.rows] == [8 * 2**20 * 2**k for k in range(5)]
    assert len(table.devices) == 16
    assert table.avg_busbw_gbps is not None and table.avg_busbw_gbps > 0
    debug = nccl_debug.parse(proc.stdout)
    assert "NET/IB" in debug.transports and not debug.socket_fallback


def test_ib_disabled_host_falls_back_to_sockets(bench: TestbedSpec) -> None:
    conf = sh(bench, "h03", "sh", "-c", "echo NCCL_IB_DISABLE=1 > /etc/nccl.conf")
    assert conf.returncode == 0
    try:
        proc = sh(bench, "h01", *MPIRUN)
    finally:
        sh(bench, "h03", "rm", "-f", "/etc/nccl.conf")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "NCCL_IB_DISABLE set by environment to 1." in proc.stdout
    assert "NET/Socket : Using [0]eth0:" in proc.stdout
    debug = nccl_debug.parse(proc.stdout)
    assert debug.socket_fallback and "NET/Socket" in debug.transports
    assert nccl_tests.parse(proc.stdout).rows


def test_controller_reads_the_rack_for_the_oracle(bench: TestbedSpec) -> None:
    fabric = controller_fabric(bench.name)
    assert [h.name for h in fabric.hosts] == ["h01", "h02", "h03", "h04"]
    nic = fabric.hosts[0].nics[0]
    assert (nic.mtu, nic.trust, nic.pfc[3], nic.roce_tos) == (4200, "dscp", True, 106)
    assert fabric.switch.pfc[3] and not any(fabric.switch.ecn)


def test_mpirun_launches_share_their_ssh_connections_and_leave_nothing_behind(bench: TestbedSpec) -> None:
    """fabric_run's mpirun_ssh_reuse with the real Open MPI and OpenSSH: ompi_info is read, both
    launches run over the shared connections, and once the call ends no master runs and no socket
    directory is left on the launch host."""
    launch = [*MPIRUN[: MPIRUN.index("all_reduce_perf")], "all_reduce_perf", "-b", "8M", "-e", "8M",
              "-g", "4"]
    args = {"argvs": [launch, launch], "sequential": True, "mpirun_ssh_reuse": True, "deadline_s": 120}
    outcome = ansible.run_module("fabtune.fabric.fabric_run", json.dumps(args),
                                 layout.testbed_dir(bench.name) / "inventory.yml", "h01", timeout_s=300)
    assert outcome.ok, outcome.tasks
    (task,) = [t for t in outcome.tasks if t.host == "h01"]
    reuse = task.result["ssh_reuse"]
    assert (reuse["used"], reuse["why"]) == (True, "2 launches share their ssh connections")
    # Open MPI 4.1's own values as ompi_info printed them (its default agent, no site arguments)
    site = reuse["site"]
    assert site["plm_rsh_agent"] == "ssh : rsh" and site["plm_rsh_args"] == "", site
    for run in task.result["runs"]:
        assert run["rc"] == 0, run["stderr"][-2000:]
        assert len(nccl_tests.parse(run["stdout"]).devices) == 16
    look = "pgrep -af '/tmp/fabtune-ss[h]-'; ls -d /tmp/fabtune-ss[h]-*"  # a master's title: ssh: PATH [mux]
    left = sh(bench, "h01", "sh", "-c", look, timeout=30)
    assert left.stdout.strip() == "", left.stdout
    # a later call given those values (the unit tests show it runs no ompi_info then) shares on them
    args = {**args, "mpirun_rsh_site": site}
    outcome = ansible.run_module("fabtune.fabric.fabric_run", json.dumps(args),
                                 layout.testbed_dir(bench.name) / "inventory.yml", "h01", timeout_s=300)
    (task,) = [t for t in outcome.tasks if t.host == "h01"]
    assert task.result["ssh_reuse"]["used"] and task.result["ssh_reuse"]["site"] == site
    assert all(run["rc"] == 0 for run in task.result["runs"])
