"""Single-link physics: active MTU, header overhead and the goodput ceiling (the product's
``fabtune.linkrate`` on a ``NicConfig``), and the message ramp."""

from __future__ import annotations

import math

from fabtune import linkrate
from fabtune.sim.model import params
from fabtune.sim.model.config import NicConfig


def is_ib(nic: NicConfig) -> bool:
    """Return True for an InfiniBand port."""
    return linkrate.is_ib(nic.link_layer)


def active_mtu(nic: NicConfig) -> int:
    """Return the active RDMA MTU of the port (:func:`fabtune.linkrate.active_mtu`)."""
    return linkrate.active_mtu(nic.link_layer, nic.mtu)


def header_bytes(nic: NicConfig) -> int:
    """Return the wire bytes added to every MTU-sized payload on this port."""
    return linkrate.header_bytes(nic.link_layer, nic.roce_mode, nic.vlan_pcp is not None)


def ceiling_gbps(nic: NicConfig) -> float:
    """Return the physical goodput ceiling of the port in Gb/s (:func:`fabtune.linkrate.ceiling_gbps`)."""
    return linkrate.ceiling_gbps(
        nic.link_layer, nic.rate_gbps, nic.mtu, roce_mode=nic.roce_mode, vlan=nic.vlan_pcp is not None
    )


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
