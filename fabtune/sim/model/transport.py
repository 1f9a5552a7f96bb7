"""What NCCL and perftest pick: GIDs, HCAs, IB vs socket transport, GPUDirect RDMA."""

from __future__ import annotations

import dataclasses

from fabtune.sim.model import params
from fabtune.sim.model.config import FabricConfig, GidEntry, HostConfig, NicConfig
from fabtune.sim.model.link import is_ib
from fabtune.sim.model.qos import tag_pcp
from fabtune.sim.model.results import Failure
from fabtune.sim.model.routing import leaf_of


def best_gid(nic: NicConfig) -> int:
    """Return the GID index perftest/NCCL pick by themselves: RoCE v2 IPv4 first, then IPv4."""
    ranked = sorted(range(len(nic.gids)), key=lambda i: _gid_rank(nic.gids[i]))
    return ranked[0] if ranked else -1


def _gid_rank(g: GidEntry) -> tuple[int, int]:
    """Return the sort key of a GID (lower is preferred)."""
    return (g.scope != "ipv4", g.version != "v2")


def resolve_gid(nic: NicConfig, index: int | None) -> GidEntry | None:
    """Return the GID a connection uses (``None`` index = automatic), or None if out of table."""
    idx = best_gid(nic) if index is None or index < 0 else index
    return nic.gids[idx] if 0 <= idx < len(nic.gids) else None


def gid_failure(
    fabric: FabricConfig, hosts: tuple[int, int], gids: tuple[GidEntry | None, ...]
) -> Failure | None:
    """Return why a RoCE connection between two hosts cannot come up, or None.

    A GID index outside the table fails at once; RoCEv1 or a link-local GID cannot cross a
    routed (L3) boundary between leaves, and mismatched versions never pair: both time out
    (cal §3: nccl#426, #769, "completion with error 12").
    """
    if any(g is None for g in gids):
        return "invalid_gid"
    sw = fabric.switch
    routed = sw.l3 and leaf_of(sw, hosts[0]) != leaf_of(sw, hosts[1])
    versions = {g.version for g in gids if g is not None}
    bad = any(g is not None and (g.version == "v1" or g.scope == "link-local") for g in gids)
    return "timeout" if len(versions) > 1 or (routed and bad) else None


def with_gid(nic: NicConfig, gid: GidEntry | None, *, sl: int = 0, tos: int = 0,
             rdma_cm: bool = False) -> NicConfig:
    """Return the port as used with ``gid``: a v1 GID means RoCEv1 headers, a GID on a VLAN device
    tagged frames whose PCP :func:`~fabtune.sim.model.qos.tag_pcp` picks from the connection's SL
    (verbs) or ToS (``rdma_cm``); a GID of the port's own netdev sends untagged frames."""
    if is_ib(nic) or gid is None:
        return nic
    pcp = None if gid.vlan is None else tag_pcp(nic, sl=sl, tos=tos, rdma_cm=rdma_cm)
    return dataclasses.replace(nic, roce_mode=1 if gid.version == "v1" else 2, vlan_pcp=pcp)


def _match(filt: str | None, name: str) -> bool:
    """Apply NCCL's list grammar (``^`` exclude, ``=`` exact, else prefix) to one name."""
    if filt is None or filt == "":
        return True
    exclude = filt.startswith("^")
    body = filt[1:] if exclude else filt
    exact = body.startswith("=")
    items = [i.split(":")[0] for i in (body[1:] if exact else body).split(",") if i]
    hit = any(name == i if exact else name.startswith(i) for i in items)
    return hit != exclude


def usable_hcas(host: HostConfig) -> tuple[int, ...]:
    """Return the NIC indexes NCCL may use on ``host`` (empty when IB is disabled)."""
    if host.env("NCCL_IB_DISABLE") == "1":
        return ()
    hca = host.env("NCCL_IB_HCA")
    return tuple(i for i, n in enumerate(host.nics) if _match(hca, n.name))


def socket_gbytes(host: HostConfig) -> float:
    """Return NCCL's socket-transport bandwidth on ``host`` in GB/s (cal §2c).

    NCCL uses "the minimum speed of the sockets multiplied by the number of sockets"; TCP gets
    about half the wire (0.32 for IPoIB).
    """
    cands = [(host.frontend_ifname, host.frontend_gbps, params.SOCKET_EFF_ETH)]
    cands += [(n.netdev, n.rate_gbps, _ip_eff(n)) for n in host.nics]
    filt = host.env("NCCL_SOCKET_IFNAME")
    chosen = [c for c in cands if _match(filt, c[0])] if filt else _default_ifaces(cands)
    if not chosen:
        return 0.0
    return min(c[1] * c[2] for c in chosen) * len(chosen) / 8.0


def _ip_eff(nic: NicConfig) -> float:
    """Return TCP efficiency over a NIC's netdev (IPoIB on IB)."""
    return params.SOCKET_EFF_IPOIB if is_ib(nic) else params.SOCKET_EFF_ETH


def _default_ifaces(cands: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Return NCCL's default socket interfaces: ``ib*`` first, else the first one."""
    ib = [c for c in cands if c[0].startswith("ib")]
    return ib or cands[:1]


def gdr_level(host: HostConfig) -> int:
    """Return ``NCCL_NET_GDR_LEVEL`` as a rank (LOC 0 .. SYS 4); NCCL's default is PXB."""
    raw = host.env("NCCL_NET_GDR_LEVEL")
    if raw is None:
        return params.NCCL_DEFAULT_GDR_LEVEL
    if raw.isdigit():
        return min(int(raw), 4)
    return params.GDR_LEVELS.get(raw.upper(), params.NCCL_DEFAULT_GDR_LEVEL)


def gdr_used(host: HostConfig, nic: NicConfig) -> bool:
    """Return True when NCCL moves this GPU's data with GPUDirect RDMA through ``nic``."""
    return nic.gdr and params.DIST_RANK[nic.gpu_distance] <= gdr_level(host)


def path_factor(host: HostConfig, nic: NicConfig, op: str) -> float:
    """Return the GPU-NIC path efficiency: GDR over the PCIe distance, or host staging (cal §6)."""
    if gdr_used(host, nic):
        return params.F_GDR_FAR[nic.gpu_distance]
    far = params.F_STAGED_SYS if nic.gpu_distance == "SYS" else 1.0
    return params.F_NOGDR[op] * far
