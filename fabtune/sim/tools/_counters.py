"""Turn the model's counter deltas into the NIC counter names ``NodeState.add_counters`` knows."""

from __future__ import annotations

import os

from fabtune.sim import nicd
from fabtune.sim.model.results import Counters
from fabtune.sim.node import NodeState

HW_FIELDS = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence",
             "packet_seq_err")


def scale(c: Counters, share: float) -> Counters:
    """A share of a NIC's deltas (a flow's part when several flows used the NIC)."""
    def part(v: int) -> int:
        return round(v * share)

    return Counters(
        tuple(part(v) for v in c.rx_pause), tuple(part(v) for v in c.tx_pause),
        part(c.np_cnp_sent), part(c.rp_cnp_handled), part(c.np_ecn_marked_roce_packets),
        part(c.out_of_sequence), part(c.packet_seq_err),
    )


def model_deltas(c: Counters) -> dict[str, int]:
    """ethtool per-priority pause counters and RDMA ``hw_counters`` of one delta."""
    out: dict[str, int] = {}
    for prio, (rx, tx) in enumerate(zip(c.rx_pause, c.tx_pause, strict=True)):
        if rx:
            out[f"rx_prio{prio}_pause"] = rx
        if tx:
            out[f"tx_prio{prio}_pause"] = tx
    if sum(c.rx_pause):
        out["rx_pause_ctrl_phy"] = sum(c.rx_pause)
    if sum(c.tx_pause):
        out["tx_pause_ctrl_phy"] = sum(c.tx_pause)
    for name in HW_FIELDS:
        value = int(getattr(c, name))
        if value:
            out[name] = value
    return out


def traffic_deltas(direction: str, prio: int, nbytes: int, mtu: int) -> dict[str, int]:
    """Byte and packet counters of ``nbytes`` of RoCE/IB payload sent (``tx``) or received."""
    packets = -(-nbytes // max(mtu, 1)) if nbytes > 0 else 0
    if nbytes <= 0:
        return {}
    if direction == "tx":
        return {f"tx_prio{prio}_bytes": nbytes, f"tx_prio{prio}_packets": packets,
                "tx_bytes_phy": nbytes, "tx_packets_phy": packets,
                "tx_vport_rdma_unicast_bytes": nbytes, "tx_vport_rdma_unicast_packets": packets,
                "port_xmit_data": nbytes // 4, "port_xmit_packets": packets,
                "unicast_xmit_packets": packets}
    return {f"rx_prio{prio}_bytes": nbytes, f"rx_prio{prio}_packets": packets,
            "rx_bytes_phy": nbytes, "rx_packets_phy": packets,
            "rx_vport_rdma_unicast_bytes": nbytes, "rx_vport_rdma_unicast_packets": packets,
            "port_rcv_data": nbytes // 4, "port_rcv_packets": packets,
            "unicast_rcv_packets": packets}


def apply(state: NodeState, netdev: str, deltas: dict[str, int]) -> None:
    """Add deltas to one NIC's counters (names this NIC lacks are skipped, e.g. on IB).

    Root adds them itself; any other user posts them to the host's counter engine
    (``fabtune.sim.nicd``), which applies them before it answers.
    """
    known = set(state.read_counters(netdev))
    wanted = {k: v for k, v in deltas.items() if k in known and v}
    if not wanted:
        return
    if os.geteuid() == 0:
        state.add_counters(netdev, wanted)
    else:  # an ordinary user may not write NIC state: the host's counter engine counts for the "NIC"
        nicd.post(netdev, wanted)


def merge(*parts: dict[str, int]) -> dict[str, int]:
    """Sum several delta dicts."""
    out: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return out
