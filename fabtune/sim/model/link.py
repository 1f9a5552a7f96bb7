"""Single-link physics: active MTU, header overhead, the goodput ceiling and the message ramp."""

from __future__ import annotations

import math

from fabtune.sim.model import params
from fabtune.sim.model.config import NicConfig


def is_ib(nic: NicConfig) -> bool:
    """Return True for an InfiniBand port."""
    return nic.link_layer == "InfiniBand"


def active_mtu(nic: NicConfig) -> int:
    """Return the active RDMA MTU: the largest IB MTU that fits the port.

    On Ethernet it must fit the netdev MTU minus the RoCE headroom (1500 -> 1024, 4200 -> 4096).

    Args:
        nic: the port.

    Returns:
        The RDMA payload per packet in bytes (0 if even 256 does not fit).
    """
    room = nic.mtu if is_ib(nic) else nic.mtu - params.ROCE_MTU_HEADROOM
    fitting = [m for m in params.IB_MTUS if m <= room]
    return max(fitting, default=0)


def header_bytes(nic: NicConfig) -> int:
    """Return the wire bytes added to every MTU-sized payload on this port."""
    if is_ib(nic):
        return params.HDR_IB
    base = params.HDR_ROCE_V2 if nic.roce_mode == 2 else params.HDR_ROCE_V1
    return base + (params.HDR_VLAN if nic.vlan_pcp is not None else 0)


def ceiling_gbps(nic: NicConfig) -> float:
    """Return the physical goodput ceiling ``MTU/(MTU+overhead) x data rate`` (x IB link eff).

    Args:
        nic: the port.

    Returns:
        The ceiling in decimal Gb/s (0 when no RDMA MTU fits).
    """
    mtu = active_mtu(nic)
    if mtu == 0:
        return 0.0
    eff = params.IB_LINK_EFF if is_ib(nic) else 1.0
    return mtu / (mtu + header_bytes(nic)) * nic.rate_gbps * eff


def qp_cap_gbps(msg_size: int) -> float:
    """Return what one QP can move with ``msg_size`` messages (cal §1a row 7).

    Up to 128 KiB a QP is not the limit; by 1 MiB it is down to 284.4 Gb/s, log-linear between.
    """
    if msg_size <= params.QP_CAP_FREE_BYTES:
        return math.inf
    span = math.log(params.QP_CAP_FULL_BYTES / params.QP_CAP_FREE_BYTES)
    x = min(1.0, math.log(msg_size / params.QP_CAP_FREE_BYTES) / span)
    ratio = params.QP_LARGE_CAP_GBPS / params.QP_FREE_GBPS
    return float(params.QP_FREE_GBPS * ratio**x)


def demand_gbps(nic: NicConfig, msg_size: int, qps: int) -> float:
    """Return a flow's standalone rate: ceiling, message-rate and per-QP limits together.

    Args:
        nic: the sending port (the slower of the two ends is applied by the caller).
        msg_size: bytes per RDMA WRITE.
        qps: queue pairs (``-q``).

    Returns:
        Goodput in Gb/s with an idle fabric.
    """
    rate_limit = qps * params.QP_MSG_RATE * msg_size * 8 / 1e9
    return min(ceiling_gbps(nic), rate_limit, qps * qp_cap_gbps(msg_size))


def latency_us(msg_size: int, rate_gbps: float, hops: int) -> float:
    """Return one-way latency of one message: base + switch hops + serialisation."""
    serial = msg_size * 8 / (rate_gbps * 1e3) if rate_gbps > 0 else math.inf
    return params.BASE_LATENCY_US + hops * params.HOP_LATENCY_US + serial
