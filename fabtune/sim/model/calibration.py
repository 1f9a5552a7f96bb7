"""The model against the published figures it claims to reproduce (calibration.md).

Each row runs the model on the published conditions. ``kind`` says whether the figure was
used to set a parameter ("fit": agreement is by construction) or is predicted from parameters
set elsewhere ("predicted"). ``docs/model.md``'s table is :func:`calibration_markdown`'s output,
and a unit test asserts every row within 5%.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from fabtune.sim.model.collective import expected_busbw, plan
from fabtune.sim.model.config import (
    CollectiveOp,
    Distance,
    FabricConfig,
    FabricKind,
    Flow,
    HostConfig,
    NicConfig,
    SmConfig,
    SwitchConfig,
)
from fabtune.sim.model.p2p import p2p
from fabtune.sim.model.routing import ecmp_prior

GIB = 2**30
MIB = 2**20
PFC3 = tuple(i == 3 for i in range(8))
TUNED_ROCE = NicConfig(pfc=PFC3, ecn_np=PFC3, ecn_rp=PFC3, roce_tos=106)
TUNED_SWITCH = SwitchConfig(pfc=PFC3, ecn=PFC3)
TUNED_ENV = (("NCCL_IB_TC", "106"),)


@dataclasses.dataclass(frozen=True)
class CalRow:
    """One comparison: the figure, its calibration.md place, published and model values."""

    figure: str
    where: str
    published: float
    model: float
    kind: Literal["fit", "predicted"]

    @property
    def error(self) -> float:
        """Return (model - published) / published."""
        return (self.model - self.published) / self.published


def nic(link: str = "roce", rate: float = 400.0, mtu: int | None = None, dist: Distance = "PIX") -> NicConfig:
    """Return a correctly configured port of the given kind, rate and MTU."""
    if link == "ib":
        return NicConfig(
            link_layer="InfiniBand", netdev="ib0", rate_gbps=rate, mtu=mtu or 4096, gpu_distance=dist
        )
    return dataclasses.replace(TUNED_ROCE, rate_gbps=rate, mtu=mtu or 4200, gpu_distance=dist)


def rack(
    hosts: int,
    port: NicConfig,
    *,
    nics: int = 8,
    gpus: int = 8,
    env: tuple[tuple[str, str], ...] = TUNED_ENV,
    leaf: int = 32,
) -> FabricConfig:
    """Return a rail-optimised rack of identical hosts (IB with AR when the port is IB)."""
    pre, base = ("ib", 0) if port.link_layer == "InfiniBand" else ("eth", 2)
    ports = tuple(dataclasses.replace(port, name=f"mlx5_{i}", netdev=f"{pre}{base + i}") for i in range(nics))
    hs = tuple(HostConfig(f"node{i:02d}", ports, gpus=gpus, nccl_env=env) for i in range(hosts))
    kind: FabricKind = "ib" if port.link_layer == "InfiniBand" else "roce"
    sw = dataclasses.replace(TUNED_SWITCH, nodes_per_leaf=leaf, leaves=max(1, -(-hosts // leaf)))
    return FabricConfig(kind, hs, sw, SmConfig("ar_updn", adaptive_routing=True), seed=0)


def write_bw(port: NicConfig, size: int, qps: int, cuda: bool = False) -> float:
    """Return the noise-free ib_write_bw goodput between two hosts with ``port``."""
    fab = rack(2, port, nics=1)
    flow = Flow(0, 1, msg_size=size, qps=qps, tclass=106, use_cuda=cuda)
    return p2p(fab, [flow], noisy=False).results[0].goodput_gbps


def lossy_incast_ratio() -> float:
    """Return combined 2:1 lossy-incast goodput over a single flow's (25G, no PFC)."""
    port = dataclasses.replace(nic(rate=25.0), pfc=(False,) * 8, ecn_np=(False,) * 8, ecn_rp=(False,) * 8)
    fab = rack(3, port, nics=1)
    single = p2p(fab, [Flow(1, 0, msg_size=MIB, qps=4)], noisy=False).results[0].goodput_gbps
    both = p2p(fab, [Flow(1, 0, msg_size=MIB, qps=4), Flow(2, 0, msg_size=MIB, qps=4)], noisy=False)
    return sum(r.goodput_gbps for r in both.results) / single


def busbw(fab: FabricConfig, size: int = 8 * GIB, op: CollectiveOp = "all_reduce") -> float:
    """Return the noise-free busbw of ``op`` at ``size``."""
    return expected_busbw(fab, op, size)


def per_nic_peak(rate: float) -> float:
    """Return NCCL's per-NIC busbw on IB at ``rate`` (1 GPU + 1 NIC per node, ring, 4 nodes)."""
    env = (("NCCL_ALGO", "Ring"),)
    return plan(rack(4, nic("ib", rate), nics=1, gpus=1, env=env), "all_reduce").peak


def ratio(a: FabricConfig, b: FabricConfig, op: CollectiveOp = "all_reduce") -> float:
    """Return busbw(a) / busbw(b) at 8 GiB."""
    return busbw(a, op=op) / busbw(b, op=op)


def _gdr_ratio(op: CollectiveOp) -> float:
    """Return busbw without / with GDR (NCCL_NET_GDR_LEVEL=LOC vs SYS, 4x200G, GH200-like)."""
    port = nic("ib", 200.0)
    on = rack(2, port, nics=4, gpus=1, env=(("NCCL_NET_GDR_LEVEL", "SYS"),))
    off = rack(2, port, nics=4, gpus=1, env=(("NCCL_NET_GDR_LEVEL", "LOC"),))
    return ratio(off, on, op)


def _route_ratio(port: NicConfig, sm: SmConfig) -> float:
    """Return busbw at 33 nodes (two leaves) over 32 nodes (one leaf) with ``sm``."""
    big, small = rack(33, port), rack(32, port)
    return ratio(dataclasses.replace(big, sm=sm), dataclasses.replace(small, sm=sm))


def _roce_v1_40g() -> float:
    """Return ib_write_bw on 40GbE RoCEv1 at RoCE MTU 1024 (netdev 1500), 64 KiB."""
    return write_bw(dataclasses.replace(nic(rate=40.0, mtu=1500), roce_mode=1), 64 * 1024, 1)


def _sys_ratio() -> float:
    """Return ib_write_bw with GPU buffers at SYS distance over host buffers."""
    return write_bw(nic(dist="SYS"), MIB, 8, cuda=True) / write_bw(nic(), MIB, 8)


def _mtu_ratio() -> float:
    """Return all_reduce busbw at netdev MTU 1500 over 4200 (200G RoCE, 2 nodes, 1 NIC)."""
    lo = rack(2, nic(rate=200.0, mtu=1500), nics=1, gpus=1)
    return ratio(lo, rack(2, nic(rate=200.0), nics=1, gpus=1))


def _ipoib() -> float:
    """Return NCCL socket-transport busbw over IPoIB on 100G IB (IB disabled)."""
    env = (("NCCL_IB_DISABLE", "1"), ("NCCL_ALGO", "Ring"))
    return plan(rack(4, nic("ib", 100.0), nics=1, gpus=1, env=env), "all_reduce").peak


Spec = tuple[str, str, float, Callable[[], float], Literal["fit", "predicted"]]

SPECS: tuple[Spec, ...] = (
    ("RoCEv2 400G ceiling, MTU 4096", "§1c", 392.1, lambda: write_bw(nic(), 8 * MIB, 8), "predicted"),
    (
        "IB NDR ceiling, MTU 4096 (less <=0.5% link flow control)",
        "§1c",
        397.5,
        lambda: write_bw(nic("ib"), 8 * MIB, 8),
        "predicted",
    ),
    (
        "RoCE 100G ceiling, MTU 1024",
        "§1c",
        92.6,
        lambda: write_bw(nic(rate=100.0, mtu=1500), 8 * MIB, 8),
        "predicted",
    ),
    ("ib_write_bw 400G RoCE, 1 QP, 16 KiB", "§1a row 7", 380.0, lambda: write_bw(nic(), 16384, 1), "fit"),
    (
        "ib_write_bw 400G RoCE, 1 QP, 128 KiB",
        "§1a row 7",
        392.1,
        lambda: write_bw(nic(), 128 * 1024, 1),
        "predicted",
    ),
    ("ib_write_bw 400G RoCE, 1 QP, 1 MiB", "§1a row 7", 284.4, lambda: write_bw(nic(), MIB, 1), "fit"),
    ("ib_write_bw 400G RoCE, 8 QPs, 1 MiB", "§1a row 7", 391.5, lambda: write_bw(nic(), MIB, 8), "predicted"),
    (
        "ib_send_bw GDR, NDR 400G IB",
        "§1a row 6",
        396.0,
        lambda: write_bw(nic("ib"), MIB, 8, cuda=True),
        "predicted",
    ),
    (
        "ib_write_bw EDR 100G IB, 1 QP, MTU 4096",
        "§1a row 1",
        96.6,
        lambda: write_bw(nic("ib", 100.0), 64 * 1024, 1),
        "predicted",
    ),
    (
        "ib_write_bw GDR HDR 200G IB (fixed pinning)",
        "§1a row 3",
        194.0,
        lambda: write_bw(nic("ib", 200.0), MIB, 8, cuda=True),
        "predicted",
    ),
    (
        "ib_write_bw 100G IB, 64 KiB, 1 QP (11728.47 MB/s, perftest MB = 2^20 B)",
        "§1a row 2",
        11728.47 * 2**20 * 8 / 1e9,
        lambda: write_bw(nic("ib", 100.0), 64 * 1024, 1),
        "predicted",
    ),
    (
        "ib_send_bw 100GbE RoCE, 64 KiB",
        "§1a row 10",
        97.0,
        lambda: write_bw(nic(rate=100.0), 64 * 1024, 1),
        "predicted",
    ),
    ("ib_send_bw 40GbE RoCEv1, MTU 1024, 64 KiB", "§1a row 11", 36.07, _roce_v1_40g, "predicted"),
    ("lossy 2:1 incast, combined / single flow", "§3, §1a row 12 (perftest#219)", 0.22,
     lossy_incast_ratio, "fit"),
    ("GPU buffers at SYS / host buffers (--use_cuda)", "§6, §1a row 13 (perftest#241)", 0.48,
     _sys_ratio, "predicted"),
    ("NCCL per-NIC busbw, NDR 400G", "§2a (nccl-tests#290)", 47.0, lambda: per_nic_peak(400.0), "fit"),
    ("NCCL per-NIC busbw, 200G", "§2a (nccl-tests#119)", 24.0, lambda: per_nic_peak(200.0), "predicted"),
    ("NCCL per-NIC busbw, 100G", "§2a (nccl-tests#29)", 12.2, lambda: per_nic_peak(100.0), "predicted"),
    (
        "all_reduce busbw 2 nodes 8xH100 8x400G IB",
        "§2b (nccl-tests#309)",
        470.0,
        lambda: busbw(rack(2, nic("ib"))),
        "predicted",
    ),
    (
        "all_reduce busbw 4 nodes 8xH100 8x400G IB",
        "§2b (nccl-tests#309)",
        365.84,
        lambda: busbw(rack(4, nic("ib"))),
        "predicted",
    ),
    (
        "all_reduce busbw 4 nodes, 8 GiB (p5)",
        "§2b (AWS p5 csv)",
        356.99,
        lambda: busbw(rack(4, nic("ib"))),
        "fit",
    ),
    (
        "all_reduce busbw 8 nodes, 8 GiB (p5)",
        "§2b (AWS p5 csv)",
        355.36,
        lambda: busbw(rack(8, nic("ib"))),
        "predicted",
    ),
    (
        "all_reduce busbw 16 nodes, 8 GiB (p5)",
        "§2b (AWS p5 csv)",
        356.27,
        lambda: busbw(rack(16, nic("ib"))),
        "predicted",
    ),
    (
        "all_reduce busbw 4 nodes, 32 MiB (p5)",
        "§2b (AWS p5 csv)",
        95.38,
        lambda: busbw(rack(4, nic("ib")), 32 * MIB),
        "fit",
    ),
    ("busbw_ref(N=4..16), healthy 8x400G", "§8", 360.0, lambda: busbw(rack(8, nic())), "predicted"),
    ("all_reduce GDR off / on (nccl#1579)", "§6", 79.72 / 96.07, lambda: _gdr_ratio("all_reduce"), "fit"),
    ("all_gather GDR off / on (nccl#1579)", "§6", 82.23 / 94.48, lambda: _gdr_ratio("all_gather"), "fit"),
    ("alltoall GDR off / on (nccl#1579)", "§6", 27.24 / 30.86, lambda: _gdr_ratio("alltoall"), "fit"),
    (
        "all_reduce MTU 1500 / 4200, 200G RoCE, 2 nodes ring (~5%)",
        "§6 (dgx-spark PR#103)",
        0.95,
        _mtu_ratio,
        "predicted",
    ),
    ("IPoIB socket busbw on 100G IB", "§2c (nccl#465)", 4.0, _ipoib, "fit"),
    (
        "f_route RoCE ECMP beyond one leaf, QPs=1",
        "§8",
        0.55,
        lambda: _route_ratio(nic(), SmConfig()),
        "predicted",
    ),
    (
        "f_route IB static (minhop) beyond one leaf",
        "§4 (Hoefler'08 55-60%)",
        0.58,
        lambda: _route_ratio(nic("ib"), SmConfig("minhop")),
        "fit",
    ),
    (
        "f_route IB AR beyond one leaf",
        "§8",
        0.95,
        lambda: _route_ratio(nic("ib"), SmConfig("ar_updn", True)),
        "fit",
    ),
    ("ECMP prior k=8, q=1, 2 stages", "§4 Monte-Carlo [E]", 0.36, lambda: ecmp_prior(8, 1, 2), "predicted"),
    ("ECMP prior k=16, q=4, 2 stages", "§4 Monte-Carlo [E]", 0.48, lambda: ecmp_prior(16, 4, 2), "predicted"),
    ("ECMP prior k=64, q=8, 1 stage", "§4 Monte-Carlo [E]", 0.53, lambda: ecmp_prior(64, 8, 1), "predicted"),
)


def _msg_rate_mpps() -> float:
    """Return one QP's small-message rate (64 B ib_write_bw, HDR 200G IB) in million messages/s."""
    return write_bw(nic("ib", 200.0), 64, 1) * 1e9 / (64 * 8) / 1e6


@dataclasses.dataclass(frozen=True)
class Miss:
    """A published figure the model does not reproduce within 5%, and why it is not claimed."""

    figure: str
    where: str
    published: float
    model: float
    why: str

    @property
    def error(self) -> float:
        """Return (model - published) / published."""
        return (self.model - self.published) / self.published


MissSpec = tuple[str, str, float, Callable[[], float], str]

MISSES: tuple[MissSpec, ...] = (
    ("ib_send_bw 100GbE RoCE at 65535 or 65537 B (20-25 Gb/s)", "§1a row 10", 22.5,
     lambda: write_bw(nic(rate=100.0), 65535, 1),
     "the model has no penalty for message sizes that are not a power of two: one forum report "
     "on CX-4, with no mechanism given and no second source; perftest and NCCL use power-of-two "
     "sizes by default"),
    ("one QP's small-message rate, Mpps (CX-6 HDR, ib_read_bw -a)", "§1a row 15", 2.55,
     _msg_rate_mpps,
     "R_qp is fitted on CX-7 ib_write_bw (row 7); row 15 is an RDMA read on CX-6, whose "
     "outstanding-read limit caps the rate lower; the model has one R_qp for every NIC and test"),
    ("ib_read_bw CX-6 HDR IB (\"23GB/s\", ~184 Gb/s)", "§1a row 9", 184.0,
     lambda: write_bw(nic("ib", 200.0), 64 * 1024, 1),
     "the model's ib_write_bw at the IB header ceiling; reads (and this user's unstated size, QPs "
     "and PCIe) are not modelled apart"),
    ("ib_write_bw single pair, BlueField-2 25GbE RoCEv2 (~23 Gb/s)", "§1a row 12", 23.0,
     lambda: write_bw(nic(rate=25.0), 64 * 1024, 1),
     "the model reaches the 25G header ceiling; the report gives '~23' with no MTU or size "
     "(its 2:1 incast ratio is claimed above)"),
    ("Azure health-check pass threshold, HDR 200G GDR", "§1a row 4", 185.0,
     lambda: write_bw(nic("ib", 200.0), MIB, 8, cuda=True),
     "a pass threshold, a floor below the expected figure, not a measurement: the model clears it"),
    ("Azure health-check pass threshold, NDR 400G GDR", "§1a row 5", 375.0,
     lambda: write_bw(nic("ib"), MIB, 8, cuda=True),
     "a pass threshold, not a measurement: the model clears it"),
)


def miss_rows() -> list[Miss]:
    """Return every figure not claimed, with the model's value computed now."""
    return [Miss(fig, where, pub, fn(), why) for fig, where, pub, fn, why in MISSES]


def misses_markdown() -> str:
    """Return the bullet lines ``docs/model.md`` lists under the figures not reproduced."""
    return "".join(f"- cal {m.where} ({m.figure}): model {m.model:.4g} vs {m.published:.4g} "
                   f"({m.error:+.1%}); {m.why}.\n" for m in miss_rows())


def calibration_rows() -> list[CalRow]:
    """Return every comparison, computed now from the model."""
    return [CalRow(fig, where, pub, fn(), kind) for fig, where, pub, fn, kind in SPECS]


def calibration_markdown() -> str:
    """Return the comparison as the markdown table that ``docs/model.md`` carries."""
    lines = [
        "| Figure | calibration.md | Published | Model | Error | Kind |",
        "|---|---|---|---|---|---|",
    ]
    for r in calibration_rows():
        row = f"| {r.figure} | {r.where} | {r.published:.4g} | {r.model:.4g} | {r.error:+.1%} | {r.kind} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - regenerates the table and list for docs/model.md
    print(calibration_markdown(), end="")
    print(misses_markdown(), end="")
