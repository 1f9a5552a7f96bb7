"""nccl-tests collectives over all hosts x GPUs: transport, per-rail goodput, routing, CC, size.

Large-message busbw (cal §8)::

    net   = R x min_rails(ceiling/8 x eta_nccl x f_path)   GB/s a node can put on the network
    ring  = min(B_intra, net x f_route x f_cc)              all_reduce / all_gather / reduce_scatter
    2-node default all_reduce = min(0.98 B_nvls, 2(n-1)/n x net x f_route x f_cc)   (NVLS tree)
    alltoall = min(B_intra, net x f x (n-1) / (G (n-G)))

then busbw(S) = peak / (1 + (S_half/S)^beta), plus a latency floor per size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from fabtune.sim.model import link, noise, params
from fabtune.sim.model.config import CollectiveOp, FabricConfig, HostConfig
from fabtune.sim.model.congestion import Traffic, f_cc, flow_counters
from fabtune.sim.model.qos import ClassPath, class_path
from fabtune.sim.model.results import (
    CollectiveResult,
    Counters,
    Failure,
    NicRef,
    SizeResult,
    Transport,
)
from fabtune.sim.model.routing import (
    ecmp_prior,
    ib_ar_active,
    ib_route_eff,
    oversub_cap,
    roce_route_eff,
    spans_leaves,
)
from fabtune.sim.model.transport import (
    gdr_used,
    gid_failure,
    path_factor,
    resolve_gid,
    socket_gbytes,
    usable_hcas,
    with_gid,
)

BUS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything about a collective that does not depend on the message size."""

    transport: Transport
    gdr: bool
    channels: int
    peak: float
    rails: int
    rho: float
    classes: tuple[tuple[NicRef, NicRef, ClassPath], ...] = ()
    failure: Failure | None = None


def ranks(fabric: FabricConfig) -> tuple[int, int]:
    """Return (GPUs per host, total ranks)."""
    g = min((h.gpus for h in fabric.hosts), default=0)
    return g, g * len(fabric.hosts)


def bus_factor(op: CollectiveOp, n: int) -> float:
    """Return nccl-tests' busbw/algbw factor: 2(n-1)/n for all_reduce, (n-1)/n otherwise."""
    return BUS_FACTOR[op] * (n - 1) / n if n > 0 else 0.0


def _rails(fabric: FabricConfig) -> int:
    """Return the NICs per host NCCL uses (the fewest of any host, at most one per GPU)."""
    g, _ = ranks(fabric)
    return min((min(len(usable_hcas(h)), g) for h in fabric.hosts), default=0)


def _host_net(host: HostConfig, rails: int, op: CollectiveOp) -> float:
    """Return GB/s one host's first ``rails`` usable NICs move: R x slowest rail."""
    nics = [host.nics[i] for i in usable_hcas(host)[:rails]]
    per = [link.ceiling_gbps(n) / 8 * params.NCCL_NET_EFF * path_factor(host, n, op) for n in nics]
    return rails * min(per, default=0.0)


def _ring_pairs(fabric: FabricConfig, rails: int) -> list[tuple[NicRef, NicRef]]:
    """Return the (sender, receiver) NIC pairs of the inter-node ring on every rail."""
    n = len(fabric.hosts)
    hcas = [usable_hcas(h) for h in fabric.hosts]
    return [((h, hcas[h][r]), ((h + 1) % n, hcas[(h + 1) % n][r])) for h in range(n) for r in range(rails)]


def _nic(fabric: FabricConfig, ref: NicRef) -> tuple[HostConfig, int]:
    """Return the host of a NIC reference and the NIC index."""
    return fabric.hosts[ref[0]], ref[1]


def _connect(fabric: FabricConfig, a: NicRef, b: NicRef) -> tuple[ClassPath | None, Failure | None]:
    """Return the class path NCCL's QPs get between two NICs, or why they cannot connect."""
    ha, hb = fabric.hosts[a[0]], fabric.hosts[b[0]]
    tx, rx = ha.nics[a[1]], hb.nics[b[1]]
    if link.is_ib(tx):
        return class_path(tx, rx, fabric.switch, 0), None
    gids = (_nccl_gid(ha, a[1]), _nccl_gid(hb, b[1]))
    failure = gid_failure(fabric, (a[0], b[0]), gids)
    if failure is not None:
        return None, failure
    tos = int(ha.env("NCCL_IB_TC") or 0)
    return class_path(with_gid(tx, gids[0]), with_gid(rx, gids[1]), fabric.switch, tos), None


def _nccl_gid(host: HostConfig, nic: int) -> object:
    """Return the GID NCCL uses on a NIC (``NCCL_IB_GID_INDEX``; unset = dynamic v2 IPv4)."""
    raw = host.env("NCCL_IB_GID_INDEX")
    return resolve_gid(host.nics[nic], int(raw) if raw not in (None, "") else None)
