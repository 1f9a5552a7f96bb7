"""The model's outputs: per-flow results, per-size collective results and counter deltas."""

from __future__ import annotations

import dataclasses
from typing import Literal

Failure = Literal["timeout", "invalid_gid", "no_device"]
Transport = Literal["IB", "RoCE", "Socket"]
NicRef = tuple[int, int]
"""(host index, NIC index) in ``FabricConfig.hosts``."""


@dataclasses.dataclass(frozen=True)
class Counters:
    """Counter deltas of one NIC port over one run (ethtool and ``hw_counters`` names)."""

    rx_pause: tuple[int, ...] = (0,) * 8
    tx_pause: tuple[int, ...] = (0,) * 8
    np_cnp_sent: int = 0
    rp_cnp_handled: int = 0
    np_ecn_marked_roce_packets: int = 0
    out_of_sequence: int = 0
    packet_seq_err: int = 0

    def __add__(self, other: Counters) -> Counters:
        """Sum two deltas field by field."""
        return Counters(
            tuple(a + b for a, b in zip(self.rx_pause, other.rx_pause, strict=True)),
            tuple(a + b for a, b in zip(self.tx_pause, other.tx_pause, strict=True)),
            self.np_cnp_sent + other.np_cnp_sent,
            self.rp_cnp_handled + other.rp_cnp_handled,
            self.np_ecn_marked_roce_packets + other.np_ecn_marked_roce_packets,
            self.out_of_sequence + other.out_of_sequence,
            self.packet_seq_err + other.packet_seq_err,
        )


@dataclasses.dataclass(frozen=True)
class P2PResult:
    """One flow of an ``ib_write_bw`` round: goodput, latency, or why it failed."""

    goodput_gbps: float
    latency_us: float
    failure: Failure | None = None


@dataclasses.dataclass(frozen=True)
class P2PRun:
    """All flows of one round that ran concurrently, with the counters they moved."""

    results: tuple[P2PResult, ...]
    counters: dict[NicRef, Counters]


@dataclasses.dataclass(frozen=True)
class SizeResult:
    """One row of an nccl-tests table."""

    size: int
    time_us: float
    algbw: float
    busbw: float


@dataclasses.dataclass(frozen=True)
class CollectiveResult:
    """One nccl-tests run: a row per size, the transport NCCL chose, and counter deltas."""

    op: str
    rows: tuple[SizeResult, ...]
    transport: Transport
    gdr: bool
    channels: int
    counters: dict[NicRef, Counters]
    failure: Failure | None = None
