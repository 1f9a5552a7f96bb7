"""What congestion does to a RoCE class: PFC, DCQCN, lossy go-back-N collapse, and counters.

``rho`` is the offered overload of the bottleneck (sum of demands / capacity); ``rho <= 1``
means no congestion.
"""

from __future__ import annotations

import dataclasses

from fabtune.sim.model import params
from fabtune.sim.model.qos import ClassPath
from fabtune.sim.model.results import Counters


def congested(rho: float) -> bool:
    """Return True when a bottleneck is offered more than it carries (beyond rounding)."""
    return rho > 1.0 + 1e-6


def effective_overload(cp: ClassPath, rho: float) -> float:
    """Return the overload left after DCQCN: senders cut to their share, a residue remains."""
    if not congested(rho) or not cp.dcqcn:
        return rho
    return 1.0 + params.DCQCN_LOSSY_RESIDUAL * (rho - 1.0)


def lossy_goodput(rho: float) -> float:
    """Return goodput / fair share in a lossy class at overload ``rho``: ``rho**-gamma``.

    gamma = 2.18 makes a 2:1 incast deliver 0.22 of one flow's rate, as perftest#219 (cal §3).
    """
    return 1.0 if not congested(rho) else float(rho ** (-params.LOSSY_GAMMA))


def f_cc(cp: ClassPath, rho: float, collective: bool) -> float:
    """Return the congestion-control factor on a flow's max-min fair share.

    Args:
        cp: the flow's class path.
        rho: offered overload of its bottleneck.
        collective: True for NCCL traffic (bursty: a lossy class loses 5% even uncongested).

    Returns:
        The factor in (0, 1].
    """
    if not congested(rho):
        return params.LOSSY_NO_CONGESTION if collective and not cp.lossless else 1.0
    if not cp.lossless:
        return lossy_goodput(effective_overload(cp, rho))
    if not cp.dcqcn:
        return params.PFC_ONLY_CONGESTED
    return 1.0 if cp.cnp_separate else params.DCQCN_MISTUNED


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one flow moved in a run, as the counters see it."""

    gbps: float
    seconds: float
    mtu: int
    qps: int
    link_gbps: float


def _pauses(cp: ClassPath, rho: float, t: Traffic) -> int:
    """Return pause frames a switch sends a sender while PFC holds the overload."""
    if not cp.lossless or not congested(rho):
        return 0
    paused = 1.0 - 1.0 / effective_overload(cp, rho)
    quanta_s = params.PAUSE_QUANTA_BITS / (t.link_gbps * 1e9)
    return int(paused * 2.0 / quanta_s * t.seconds)


def flow_counters(cp: ClassPath, rho: float, t: Traffic) -> tuple[Counters, Counters]:
    """Return (sender, receiver) counter deltas of one RoCE flow.

    Pauses climb when PFC carries the overload; ECN marks and CNPs when the switch marks the
    class under congestion; out-of-sequence NAKs when a lossy class drops.
    """
    packets = t.gbps * 1e9 / 8 * t.seconds / max(t.mtu, 1)
    hot = congested(rho)
    marked = int(packets * params.ECN_MARK_FRACTION) if hot and cp.marked else 0
    cnp_cap = int(t.seconds * 1e6 / params.CNP_INTERVAL_US) * t.qps
    cnps = min(marked, cnp_cap) if cp.np_on else 0
    drops = 0 if cp.lossless or not hot else int(packets * (1 - 1 / effective_overload(cp, rho)))
    pause = [0] * 8
    pause[cp.tx_prio] = _pauses(cp, rho, t)
    handled = cnps if cp.dcqcn else 0
    tx = Counters(rx_pause=tuple(pause), rp_cnp_handled=handled, packet_seq_err=drops)
    rx = Counters(np_cnp_sent=cnps, np_ecn_marked_roce_packets=marked, out_of_sequence=drops)
    return tx, rx
