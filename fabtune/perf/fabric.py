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

# fabric_checks.yml's tasks: one fabric_run call per host runs the reads (its run ids are the keys
# of a HostView's raw text), then sminfo where the fabric is InfiniBand
READ_TASK = "Read GPU-NIC topology, GID tables, port state, device map, links and addresses"
SMINFO_TASK = "Ask for the subnet manager"
READS = ("topo", "gids", "ibstat", "ibdev2netdev", "addr")
MUST_READ = ("addr",)  # without the links there is nothing to check; the others may be missing
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


def _raw(host: str, result: Mapping[str, Any]) -> dict[str, str]:
    """One host's read outputs by id; a read that must succeed and did not is a BenchmarkError."""
    runs = {str(r.get("id")): r for r in result.get("runs") or [] if isinstance(r, Mapping)}
    for key in READS:
        run = runs.get(key, {})
        if run.get("timed_out") or (key in MUST_READ and run.get("rc") != 0):
            why = "it outlasted its deadline" if run.get("timed_out") else f"rc {run.get('rc')}"
            said = str(run.get("stderr", "")).strip()[-300:]
            raise BenchmarkError(f"{host}: reading {key} failed ({why}){': ' + said if said else ''}")
    return {key: str(runs.get(key, {}).get("stdout", "")) for key in READS}


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
        PlaybookFailed: when a host is unreachable or the reads' task fails.
        BenchmarkError: a read outlasted its deadline, the links could not be read, or ibstat's
            output cannot be parsed.
    """
    return views_of(ansible.run_playbook(CHECKS_PLAYBOOK, inventory))


CHECKS_PLAYBOOK = "fabric_checks.yml"


def views_of(outcome: ansible.RunOutcome) -> dict[str, HostView]:
    """Every host's view from a run of the checks playbook (``read_hosts``; a part of a longer run).

    Raises:
        PlaybookFailed: when a host is unreachable or the reads' task fails.
        BenchmarkError: a read outlasted its deadline, the links could not be read, or ibstat's
            output cannot be parsed.
    """
    outcome.raise_for_failure("reading the fabric")
    reads, sminfo = outcome.results(READ_TASK), outcome.results(SMINFO_TASK)
    views = {}
    for host in sorted(reads):
        raw = _raw(host, reads[host])
        sm = sminfo.get(host, {})
        raw["sminfo"] = str(sm.get("stdout", ""))
        rc = sm.get("rc") if "rc" in sm else None
        views[host] = _view(host, raw, int(rc) if rc is not None else None)
    return views
