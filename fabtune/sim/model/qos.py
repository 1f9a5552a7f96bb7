"""Which priority RoCE traffic travels in, whether that class is lossless, and whether DCQCN acts.

Classification follows the hop-by-hop PFC contract (Guo'16, cal §3): a hop is lossless for a
packet only when the sender queues it in priority p, the receiver of the hop classifies it to the
same p, and both have PFC enabled on p (a pause for p must stop the queue the packet sits in).
"""

from __future__ import annotations

import dataclasses

from fabtune.sim.model.config import NicConfig, SwitchConfig
from fabtune.sim.model.link import is_ib

# The kernel's ToS -> skb priority table (net/ipv4/route.c ``ip_tos2prio``, indexed by
# ``IPTOS_TOS(tos) >> 1``: the four ToS bits 0x1E), as ``rt_tos2priority`` reads it:
# 0 best effort, 2 bulk, 4 interactive bulk, 6 interactive.
IP_TOS2PRIO = (0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6, 4, 4, 4, 4)


def rt_tos2priority(tos: int) -> int:
    """Return the skb priority the kernel gives ToS ``tos`` (``rt_tos2priority``, include/net/route.h)."""
    return IP_TOS2PRIO[(tos & 0x1E) >> 1]


def tag_pcp(nic: NicConfig, *, sl: int, tos: int, rdma_cm: bool) -> int:
    """Return the 802.1Q PCP of a RoCE connection's frames sent from ``nic`` on a VLAN GID.

    Verbs (NCCL's ``NCCL_IB_SL``, perftest ``-S``): the address handle's SL is the Ethernet priority,
    ``SL & 7`` (mlx5 ``mlx5_set_path``: ``eth_prio = sl & 0x7`` for RoCE address handles), which the
    NIC writes into the VLAN tag. rdma_cm (perftest ``-R``): the CM sets the SL from the ToS,
    ``iboe_tos_to_sl`` in drivers/infiniband/core/cma.c: ``rt_tos2priority(tos)`` gives an skb
    priority and the VLAN device's ``egress-qos-map`` the PCP (the map of a VLAN device whose
    parent has no mqprio traffic classes, ``num_tc`` 0; the model has none).
    """
    if rdma_cm:
        return nic.egress_qos_map[rt_tos2priority(tos)] & 7
    return sl & 7


def nic_prio(nic: NicConfig, tos: int) -> int:
    """Return the priority a NIC assigns to a RoCE packet it sends with ToS ``tos``.

    trust=dscp maps ``tos >> 2`` through dscp2prio (a VLAN tag changes nothing); trust=pcp uses the
    VLAN PCP of the port's frames (``vlan_pcp``), and untagged traffic lands in priority 0.
    """
    return frame_prio(nic, tos, nic.vlan_pcp)


def frame_prio(nic: NicConfig, tos: int, pcp: int | None) -> int:
    """Return the priority ``nic`` gives a frame with ToS ``tos`` and VLAN PCP ``pcp`` (None: untagged)."""
    if nic.trust == "dscp":
        return nic.dscp2prio[(tos >> 2) & 63]
    return pcp if pcp is not None else 0


def switch_prio(sw: SwitchConfig, tos: int, pcp: int | None) -> int:
    """Return the switch priority of a packet (same rules as :func:`nic_prio`)."""
    if sw.trust == "dscp":
        return sw.dscp2prio[(tos >> 2) & 63]
    return pcp if pcp is not None else 0


@dataclasses.dataclass(frozen=True)
class ClassPath:
    """The class a RoCE flow's data and CNPs get from sender, switch and receiver."""

    tx_prio: int
    sw_prio: int
    rx_prio: int
    lossless: bool
    dcqcn: bool
    cnp_separate: bool
    marked: bool = False
    np_on: bool = False


def _cnp_class(sw: SwitchConfig, rx: NicConfig) -> int:
    """Return the switch priority of the receiver's CNPs (DSCP cnp_dscp, PCP cnp_prio)."""
    pcp = rx.cnp_prio if rx.vlan_pcp is not None else None
    return switch_prio(sw, rx.cnp_dscp << 2, pcp)


def class_path(tx: NicConfig, rx: NicConfig, sw: SwitchConfig, tos: int) -> ClassPath:
    """Resolve the lossless class and DCQCN state of one RoCE flow from ``tx`` to ``rx``.

    Args:
        tx: the sending port.
        rx: the receiving port.
        sw: the switches between them.
        tos: the IP ToS byte the sender puts on data packets.

    Returns:
        The priorities at each stage, losslessness, whether DCQCN closes its loop (the switch
        marks ECN on the class, the packet is ECT, receiver NP and sender RP are enabled), and
        whether CNPs travel in a class of their own. A packet is ECT when its ToS says so
        (ECT(0)/ECT(1)) or when the sender's RP is enabled on its priority.
    """
    if is_ib(tx):
        return ClassPath(0, 0, 0, lossless=True, dcqcn=False, cnp_separate=True)
    # The receiver classifies the frame the sender tagged (the switches keep the PCP).
    p_tx, p_rx = nic_prio(tx, tos), frame_prio(rx, tos, tx.vlan_pcp)
    p_sw = switch_prio(sw, tos, tx.vlan_pcp)
    lossless = p_tx == p_sw == p_rx and tx.pfc[p_tx] and sw.pfc[p_sw] and rx.pfc[p_rx]
    ect = (tos & 3) in (1, 2) or tx.ecn_rp[p_tx]
    marked = sw.ecn[p_sw] and ect
    dcqcn = marked and rx.ecn_np[p_rx] and tx.ecn_rp[p_tx]
    cnp_sep = _cnp_class(sw, rx) != p_sw
    return ClassPath(p_tx, p_sw, p_rx, lossless, dcqcn, cnp_sep, marked, rx.ecn_np[p_rx])
