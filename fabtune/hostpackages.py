"""The tools fabtune runs on the hosts and the package that brings each, per distribution family.

One table (:data:`TOOLS`): ``fabtune check`` finds each needed tool on each host's search path
(``playbooks/host_tools.yml``), reads the host's distribution family from Ansible's facts
(``ansible_os_family``, from ``/etc/os-release``) and names the package a missing tool comes in.
The same table is the package list of docs/real-cluster.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fabtune import ansible
from fabtune.inventory import InventoryInfo
from fabtune.perf.checks import CheckResult

Family = Literal["debian", "rhel", "unknown"]
# Ansible's ansible_os_family for the two families fabtune names packages for.
OS_FAMILIES: Mapping[str, Family] = {"Debian": "debian", "RedHat": "rhel"}
FAMILY_NAMES: Mapping[Family, str] = {"debian": "Debian/Ubuntu", "rhel": "RHEL-like", "unknown": "unknown"}
NCCL_TESTS = "nccl-tests (build from github.com/NVIDIA/nccl-tests)"
MLNX_TOOLS = "mlnx-tools (or MLNX_OFED / DOCA-OFED)"


@dataclass(frozen=True)
class HostTool:
    """A tool fabtune runs on hosts, what needs it, and its package per distribution family."""

    tool: str
    debian: str
    rhel: str
    needed_by: str

    def package(self, family: Family) -> str:
        if family == "debian":
            return self.debian
        if family == "rhel":
            return self.rhel
        if self.debian == self.rhel:
            return self.debian
        return f"{self.debian} (Debian/Ubuntu), {self.rhel} (RHEL-like)"


TOOLS: Mapping[str, HostTool] = {
    t.tool: t
    for t in (
        HostTool("ib_write_bw", "perftest", "perftest", "bench pairs, bootstrap"),
        HostTool("all_reduce_perf", NCCL_TESTS, NCCL_TESTS, "tune, bench nccl, check (transport), bootstrap"),
        HostTool("alltoall_perf", NCCL_TESTS, NCCL_TESTS, "tune (the guard metric)"),
        HostTool("mpirun", "openmpi-bin", "openmpi (its bin directory on the PATH)", "launcher mpirun"),
        HostTool("srun", "slurm-client", "slurm (EPEL)", "launcher srun"),
        HostTool("mlnx_qos", MLNX_TOOLS, MLNX_TOOLS, "RoCE QoS (roce_qos, facts), or dcb"),
        HostTool("dcb", "iproute2", "iproute", "RoCE QoS (roce_qos, facts), or mlnx_qos"),
        HostTool("ip", "iproute2", "iproute", "check, bench (addresses, MTU)"),
        HostTool("ss", "iproute2", "iproute", "bench pairs (server listening)"),
        HostTool("rdma", "iproute2", "iproute", "tune (ib_write_bw -R servers listening)"),
        HostTool("ibstat", "infiniband-diags", "infiniband-diags", "check (links), bootstrap"),
        HostTool("sminfo", "infiniband-diags", "infiniband-diags", "check (subnet manager), InfiniBand"),
        HostTool("ibv_devinfo", "ibverbs-utils", "libibverbs-utils", "bootstrap"),
        HostTool("ibdev2netdev", MLNX_TOOLS, MLNX_TOOLS, "check (RDMA device to netdev)"),
        HostTool("show_gids", MLNX_TOOLS, MLNX_TOOLS, "check (RoCE GID index)"),
        HostTool("nvidia-smi", "nvidia-smi (Debian) / nvidia-utils-<driver> (Ubuntu)",
                 "nvidia-driver-cuda (NVIDIA's CUDA repository)", "check (GPU-NIC affinity), tune"),
        HostTool("ethtool", "ethtool", "ethtool", "tune, bench (pause and CNP counters)"),
        HostTool("systemd-run", "systemd", "systemd", "tune (commit-confirmed revert timer)"),
        HostTool("timeout", "coreutils", "coreutils", "bench, tune (benchmark deadlines)"),
        HostTool("opensm", "opensm", "opensm", "subnet manager hosts (ib_sm)"),
        # optional: never in needs(); without it the inventory's fabtune_lossless or a guess decides
        HostTool("lldptool", "lldpad", "lldpad",
                 "tune: the lossless class the switch advertises over LLDP (optional)"),
    )
}
# host_tools.yml's tasks: the distribution facts, and the tools found with their paths
DISTRIBUTION_TASK, FIND_TASK = "Read the distribution", "Find the tools on the search path"
# A need met by any one of its tools.
QOS_TOOLS = ("mlnx_qos", "dcb")


def family_of(os_family: str | None) -> Family:
    """The distribution family of Ansible's ``ansible_os_family`` (Debian, RedHat, ...)."""
    return OS_FAMILIES.get(os_family or "", "unknown")


def needs(info: InventoryInfo, host: str, *, with_nccl: bool = True) -> list[tuple[str, ...]]:
    """What ``host`` of the rack needs: each entry is met by any one of its tools."""
    wanted = ["ip", "ss", "rdma", "ibstat", "ibdev2netdev", "nvidia-smi", "ethtool", "systemd-run", "timeout",
              "ib_write_bw", "ibv_devinfo"]
    if with_nccl:
        wanted += ["all_reduce_perf", "alltoall_perf", info.launcher]
    if info.fabric == "ib":
        wanted.append("sminfo")
    else:
        wanted.append("show_gids")
    if host in info.sm_hosts:
        wanted.append("opensm")
    out: list[tuple[str, ...]] = [(t,) for t in wanted]
    if info.fabric != "ib":
        out.append(QOS_TOOLS)
    return out


def missing(need: Sequence[tuple[str, ...]], found: set[str]) -> list[tuple[str, ...]]:
    """The needs none of whose tools was found."""
    return [alternatives for alternatives in need if not found.intersection(alternatives)]


def tool_results(
    host: str, need: Sequence[tuple[str, ...]], found: set[str], os_family: str | None
) -> list[CheckResult]:
    """One failed check per missing need, naming the host, the tool and the package; else one pass."""
    family = family_of(os_family)
    results = []
    for alternatives in missing(need, found):
        tools = [TOOLS[t] for t in alternatives]
        summary = " or ".join(f"{t.tool} (package {t.package(family)})" for t in tools)
        results.append(CheckResult(
            "tools", host, "fail", f"{' or '.join(alternatives)} not found: install {summary}",
            f"{FAMILY_NAMES[family]} ({os_family or 'distribution unknown'}); needed by {tools[0].needed_by}",
        ))
    if not results:
        results.append(CheckResult("tools", host, "pass", f"{len(need)} tools found",
                                   FAMILY_NAMES[family]))
    return results


def parse_found(stdout: str) -> set[str]:
    """The tools the host found: ``NAME PATH`` per line (``host_tools.yml``)."""
    return {line.split(" ", 1)[0] for line in stdout.splitlines() if line.strip()}


def check_tools(inventory: Path, info: InventoryInfo, *, with_nccl: bool = True) -> list[CheckResult]:
    """Find every needed tool on every host; one result per missing one (host, tool, package).

    Raises:
        PlaybookFailed: a host unreachable.
    """
    per_host = {h: needs(info, h, with_nccl=with_nccl) for h in info.hosts}
    every = sorted({t for need in per_host.values() for alternatives in need for t in alternatives})
    outcome = ansible.run_playbook("host_tools.yml", inventory, extravars={"fabtune_tools": every})
    outcome.raise_for_failure("finding the tools on the hosts")
    families = outcome.results(DISTRIBUTION_TASK)
    found = outcome.results(FIND_TASK)
    results: list[CheckResult] = []
    for host in info.hosts:
        os_family = (families.get(host, {}).get("ansible_facts") or {}).get("ansible_os_family")
        results += tool_results(host, per_host[host], parse_found(str(found.get(host, {}).get("stdout", ""))),
                                os_family)
    return results
