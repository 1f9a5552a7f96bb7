"""What the benchmarks and checks need to know about each host, read through Ansible.

One run of ``playbooks/fabric_checks.yml`` gives, per host, the raw output of ``nvidia-smi topo -m``,
``show_gids``, ``ibstat``, ``ibdev2netdev``, ``ip -j addr`` and (InfiniBand) ``sminfo``; this module
parses them into :class:`HostView` records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.errors import BenchmarkError, ParseError
from fabtune.perf.checks import rocev2_index
from fabtune.perf.parsers import ibdev2netdev, ibstat, show_gids, topo

# fabric_checks.yml's read tasks, by what each reads
CHECK_TASKS = {
    "topo": "Read GPU-NIC topology",
    "gids": "Read GID tables",
    "ibstat": "Read port state",
    "ibdev2netdev": "Read RDMA device to netdev map",
    "addr": "Read links and addresses",
    "sminfo": "Ask for the subnet manager",
}
RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Rail:
    """One RDMA NIC port of a host."""

    device: str
    netdev: str
    ipv4: str | None
    mtu: int
    rate_gbps: float
    link_layer: str
    gid_index: int | None


@dataclass(frozen=True)
class HostView:
    """A host as the benchmarks and checks see it, with the raw text kept as evidence."""

    name: str
    rails: tuple[Rail, ...]
    raw: Mapping[str, str] = field(repr=False)
    sminfo_rc: int | None = None
    topo: topo.TopoMatrix | None = None
    gids: show_gids.ShowGids | None = None
    ports: ibstat.IbStat | None = None


def _stdout(results: Mapping[str, Mapping[str, Any]], host: str) -> str:
    return str(results.get(host, {}).get("stdout", ""))


def _addresses(text: str) -> dict[str, tuple[str | None, int]]:
    out: dict[str, tuple[str | None, int]] = {}
    for link in json.loads(text or "[]"):
        ipv4 = next((a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet"), None)
        out[link["ifname"]] = (ipv4, int(link.get("mtu", 0)))
    return out


def _rate(stat: ibstat.IbStat, device: str) -> tuple[float, str]:
    for ca in stat.cas:
        if ca.name == device and ca.ports:
            match = RATE_RE.match(ca.ports[0].rate or "")
            return (float(match.group(1)) if match else 0.0), ca.ports[0].link_layer or "Ethernet"
    return 0.0, "Ethernet"


def _rails(raw: Mapping[str, str], gids: show_gids.ShowGids | None, stat: ibstat.IbStat) -> tuple[Rail, ...]:
    mapping = ibdev2netdev.parse(raw["ibdev2netdev"]).entries
    addrs = _addresses(raw["addr"])
    rails = []
    for entry in sorted(mapping, key=lambda e: int(e.device.rsplit("_", 1)[-1]) if "_" in e.device else 0):
        ipv4, mtu = addrs.get(entry.netdev, (None, 0))
        rate, layer = _rate(stat, entry.device)
        gid = rocev2_index(gids, entry.device) if gids is not None and layer == "Ethernet" else None
        rails.append(Rail(entry.device, entry.netdev, ipv4, mtu, rate, layer, gid))
    return tuple(rails)


def _optional(parse: Any, text: str) -> Any:
    try:
        return parse(text) if text.strip() else None
    except ParseError:
        return None


def _view(host: str, raw: dict[str, str], sminfo_rc: int | None) -> HostView:
    try:
        stat = ibstat.parse(raw["ibstat"])
    except ParseError as err:
        raise BenchmarkError(f"{host}: cannot read ibstat output ({err})") from err
    gids = _optional(show_gids.parse, raw["gids"])
    matrix = _optional(topo.parse, raw["topo"])
    return HostView(host, _rails(raw, gids, stat), raw, sminfo_rc, matrix, gids, stat)


def read_hosts(inventory: Path) -> dict[str, HostView]:
    """Run the read-only checks playbook and return every reachable host's view.

    Raises:
        PlaybookFailed: when a host is unreachable or a read fails.
    """
    outcome = ansible.run_playbook("fabric_checks.yml", inventory).raise_for_failure("reading the fabric")
    per_task = {key: outcome.results(name) for key, name in CHECK_TASKS.items()}
    hosts = sorted(per_task["addr"])
    views = {}
    for host in hosts:
        raw = {key: _stdout(per_task[key], host) for key in CHECK_TASKS}
        sm = per_task["sminfo"].get(host, {})
        rc = sm.get("rc") if "rc" in sm else None
        views[host] = _view(host, raw, int(rc) if rc is not None else None)
    return views
