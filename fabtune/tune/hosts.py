"""The rack as the planner sees it: every host's and every NIC's state, hosts that share a state in
one group, and moves planned per group, so that a move names only the hosts that need it.

A host group holds the hosts whose state is the same: each NIC's knobs with its RoCEv2 GID index
(NIC names aside), the NCCL keys and the worst GPU-NIC distance. For each move group of the knob
registry (``knobs.GROUPS``), its alternatives are offered to each host group, and:

* when no host runs one of them, each alternative is a move for the hosts it would change;
* when some hosts run one, it is the rack's choice (the one most hosts run; a tie goes to the
  plan's order), and the only move is that alternative on the hosts that do not run it: a host that
  differs is brought to what the others run, the end state a uniform rack reaches;
* when every host runs the same one, the group is left out.

The subnet manager (``sm``) is one per fabric: every view carries the rack's, so a move that
changes it is a move for every host. Every move is still judged on the whole rack's measurements.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabtune.knobs import GROUPS, Candidate, Change, LosslessClass, View, changes_anything, nic_changed
from fabtune.state import HostState

DISTANCE_ORDER = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class HostGroup:
    """Hosts that share one state, with one view per NIC (a host without RoCE ports: one view)."""

    hosts: tuple[str, ...]
    views: tuple[View, ...]

    def changed_by(self, change: Change) -> bool:
        """Whether ``change`` would change a knob on any NIC of these hosts."""
        return any(changes_anything(view, change) for view in self.views)

    def running(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """The alternative these hosts already run (none of its knobs would change), if any."""
        return next((c for c in candidates if not self.changed_by(c.change)), None)


def gpu_nic_distance(facts: Mapping[str, Any]) -> str:
    """The worst ``nvidia-smi topo -m`` cell between a GPU and the NIC it is paired with."""
    topo = (facts.get("hardware") or {}).get("topology") or {}
    matrix, legend = topo.get("matrix") or {}, topo.get("nic_legend") or {}
    worst = "PIX"
    for row, cells in matrix.items():
        if not row.startswith("GPU"):
            continue
        gpu = int(row[3:])
        nic = next((n for n, dev in legend.items() if dev == f"mlx5_{gpu % max(len(legend), 1)}"), None)
        cell = cells.get(nic, "PIX") if nic else "PIX"
        if cell in DISTANCE_ORDER and DISTANCE_ORDER.index(cell) > DISTANCE_ORDER.index(worst):
            worst = cell
    return worst


def rack_sm(facts: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    """The subnet manager's settings, from the first host that reports them (its SM host)."""
    return next((dict(f["sm"]) for _, f in sorted(facts.items()) if f.get("sm")), {})


def vlan_tagged(port: Mapping[str, Any]) -> bool:
    """Whether a port's RoCEv2 IPv4 GID belongs to a VLAN device of its netdev (the GID's netdev is
    ``NETDEV.ID``, the 8021q module's name): RoCE on that GID sends 802.1Q-tagged frames."""
    index, netdev = port.get("roce_v2_gid_index"), str(port.get("netdev") or "")
    gid = next((g for g in port.get("gids") or () if g.get("index") == index), None)
    ndev = str((gid or {}).get("netdev") or "")
    return bool(netdev) and ndev.startswith(netdev + ".") and ndev[len(netdev) + 1:].isdigit()


def host_views(facts: Mapping[str, Any], base: View) -> tuple[View, ...]:
    """One view per RDMA netdev of a host (its knobs, RoCEv2 GID index and whether that GID is on a
    VLAN device) on top of ``base``."""
    ports = (facts.get("hardware") or {}).get("ports") or []
    by_netdev: dict[Any, Any] = {p.get("netdev"): p for p in ports}
    nics = facts.get("nics") or {}
    if not nics:
        first = ports[0].get("roce_v2_gid_index") if ports else None
        return (dataclasses.replace(base, rocev2_gid_index=first),)
    views = []
    for dev in sorted(nics):
        port = by_netdev.get(dev) or {}
        views.append(dataclasses.replace(base, nic=nics[dev], rocev2_gid_index=port.get("roce_v2_gid_index"),
                                         vlan_tagged=vlan_tagged(port)))
    return tuple(views)


def _key(views: Sequence[View]) -> str:
    """What hosts must share to be one group (NIC names aside: eth2 on one host may be eth3 on another)."""
    nics = sorted(json.dumps([v.nic, v.rocev2_gid_index, v.vlan_tagged], sort_keys=True, default=str)
                  for v in views)
    first = views[0]
    return json.dumps([nics, first.nccl, first.gpu_nic_distance], sort_keys=True, default=str)


def host_groups(
    facts: Mapping[str, Mapping[str, Any]], fabric: str, lossless: LosslessClass | None = None,
    sm_flavor: str | None = None, lossless_source: str | None = None,
) -> list[HostGroup]:
    """Every host's and NIC's state, hosts that share one grouped (in host order).

    ``lossless``: the class the fabric runs (the inventory's ``fabtune_lossless``, or what the switch
    advertises over LLDP: ``fabtune.tune.lossless.choose``), ``lossless_source`` where it came from
    (or why the plan guesses);
    ``sm_flavor``: the SM's, as the inventory declares it (``fabtune_sm_flavor``), else as the SM
    host's opensm.conf shows it (an ``ar_*`` engine: NVIDIA's), else upstream opensm.
    """
    sm = rack_sm(facts)
    flavor = sm_flavor or str(sm.get("sm_flavor") or "upstream")
    members: dict[str, list[str]] = {}
    views: dict[str, tuple[View, ...]] = {}
    for host in sorted(facts):
        own = facts[host]
        base = View("ib" if fabric == "ib" else "roce", {}, own.get("nccl") or {}, sm, None, len(facts),
                    gpu_nic_distance(own), lossless, sm_flavor=flavor, lossless_source=lossless_source)
        found = host_views(own, base)
        key = _key(found)
        members.setdefault(key, []).append(host)
        views.setdefault(key, found)
    return [HostGroup(tuple(hosts), views[key]) for key, hosts in members.items()]


Offer = tuple[HostGroup, list[Candidate]]


def plan_rack(groups: Sequence[HostGroup], skip: Sequence[str] = ()) -> list[list[Candidate]]:
    """Candidate moves per move group, in order of expected impact, each naming the hosts it is for.

    Within a group the candidates are alternatives (or rungs of a ladder): the loop keeps at most
    one per group. See the module's docstring for how host groups that differ are planned.
    """
    planned = []
    for name, make in GROUPS:
        if name in skip:
            continue
        offered = [(group, cands) for group in groups if (cands := make(group.views[0]))]
        moves = _moves(offered) if offered else []
        if moves:
            planned.append(moves)
    return planned


def _moves(offered: Sequence[Offer]) -> list[Candidate]:
    """One move group's moves: each alternative for the hosts it changes, or the rack's choice for
    the hosts that do not run it yet."""
    counts: dict[str, int] = {}
    for group, cands in offered:
        run = group.running(cands)
        if run is not None:
            counts[run.name] = counts.get(run.name, 0) + len(group.hosts)
    every = _alternatives(offered)
    if not counts:
        return [dataclasses.replace(c, hosts=_targets(offered, c)) for c in every if _targets(offered, c)]
    order = [c.name for c in every]
    chosen = next(c for c in every if c.name == max(counts, key=lambda n: (counts[n], -order.index(n))))
    targets = _targets(offered, chosen)
    if not targets:
        return []  # every host runs it
    total = sum(len(group.hosts) for group, _ in offered)
    why = f"{chosen.why} ({counts[chosen.name]} of {total} hosts run it already)"
    return [dataclasses.replace(chosen, hosts=targets, why=why)]


def _alternatives(offered: Sequence[Offer]) -> list[Candidate]:
    """Every candidate offered to some host group, once, in the plan's order."""
    seen: dict[str, Candidate] = {}
    for _, cands in offered:
        for cand in cands:
            seen.setdefault(cand.name, cand)
    return list(seen.values())


def _targets(offered: Sequence[Offer], cand: Candidate) -> tuple[str, ...]:
    """The hosts ``cand`` is offered to and would change."""
    return tuple(sorted(
        host
        for group, cands in offered
        if any(c.name == cand.name for c in cands) and group.changed_by(cand.change)
        for host in group.hosts
    ))


def changed_nics(current: HostState, change: Change) -> list[str]:
    """The netdevs of one host (its managed state) whose knobs ``change`` would change."""
    nics = current.nics or {}
    return [dev for dev in sorted(nics) if nic_changed(nics[dev], change)]
