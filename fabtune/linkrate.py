"""Link physics of one RDMA port: the active RDMA MTU, the bytes each packet adds on the wire and the
goodput ceiling those leave of the link rate.

The product's acceptance thresholds (``fabtune.perf.pairs.rail_ceiling``) and the emulator's fabric
model (``fabtune.sim.model.link``) use these same functions, so a pair judged at its ceiling is
judged against what the model can deliver. Sources are the rows of ``../shared/calibration.md``
(cal §x), tagged as there: [S] sourced, [D] derived from sourced numbers, [E] estimate.
"""

from __future__ import annotations

INFINIBAND = "InfiniBand"  # the link layer as ibstat and sysfs name it; anything else is Ethernet

HDR_ROCE_V2 = 82  # [D] cal §1b: IFG+preamble 20, Eth 14, FCS 4, IPv4 20, UDP 8, BTH 12, ICRC 4
HDR_VLAN = 4  # [S] cal §1b: 802.1Q tag
HDR_ROCE_V1 = 82 - 8 - 20 + 40  # [D] cal §1b: RoCEv1 carries a GRH (40) instead of IPv4+UDP
HDR_IB = 26  # [D] cal §1b: LRH 8, BTH 12, ICRC 4, VCRC 2 (perftest#225: 4138 B packets)
IB_LINK_EFF = 0.995  # [E] cal §1c: IB flow-control packets and idles cost <= 0.5%
ROCE_MTU_HEADROOM = 96  # [E] Linux iboe_get_mtu(): GRH 40 + UDP 8 + BTH 12 + ext 28 + ICRC 4
IB_MTUS = (256, 512, 1024, 2048, 4096)  # [S] formats §1.2 (-m 256..4096)


def is_ib(link_layer: str) -> bool:
    """Return True for an InfiniBand port."""
    return link_layer == INFINIBAND


def active_mtu(link_layer: str, mtu: int) -> int:
    """Return the active RDMA MTU: the largest IB MTU that fits the port.

    On Ethernet it must fit the netdev MTU minus the RoCE headroom (1500 -> 1024, 4200 -> 4096).

    Args:
        link_layer: ``InfiniBand`` or ``Ethernet``.
        mtu: the netdev MTU on Ethernet, the IB MTU on InfiniBand.

    Returns:
        The RDMA payload per packet in bytes (0 if even 256 does not fit).
    """
    room = mtu if is_ib(link_layer) else mtu - ROCE_MTU_HEADROOM
    fitting = [m for m in IB_MTUS if m <= room]
    return max(fitting, default=0)


def header_bytes(link_layer: str, roce_mode: int = 2, vlan: bool = False) -> int:
    """Return the wire bytes added to every MTU-sized payload (RoCE: by version and 802.1Q tag)."""
    if is_ib(link_layer):
        return HDR_IB
    base = HDR_ROCE_V2 if roce_mode == 2 else HDR_ROCE_V1
    return base + (HDR_VLAN if vlan else 0)


def ceiling_gbps(
    link_layer: str, rate_gbps: float, mtu: int, *, roce_mode: int = 2, vlan: bool = False
) -> float:
    """Return the physical goodput ceiling ``MTU/(MTU+overhead) x data rate`` (x IB link eff).

    Args:
        link_layer: ``InfiniBand`` or ``Ethernet``.
        rate_gbps: the link's data rate in decimal Gb/s.
        mtu: the netdev MTU on Ethernet, the IB MTU on InfiniBand.
        roce_mode: RoCE version (1 or 2; Ethernet only).
        vlan: whether frames carry an 802.1Q tag (Ethernet only).

    Returns:
        The ceiling in decimal Gb/s (0 when no RDMA MTU fits).
    """
    payload = active_mtu(link_layer, mtu)
    if payload == 0:
        return 0.0
    eff = IB_LINK_EFF if is_ib(link_layer) else 1.0
    return payload / (payload + header_bytes(link_layer, roce_mode, vlan)) * rate_gbps * eff
