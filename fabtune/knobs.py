"""The knob registry: each knob and coupled knob group declared once.

Validation (``fabric_desired.py``, module_utils of the collection fabtune.fabric, checks values and
couplings), planning (the move groups below, in order of expected impact), snapshots and drift (the
knobs' paths in the desired tree), and reports all read this registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Scope = Literal["nic", "nccl", "sm"]
Fabric = Literal["roce", "ib"]
LOSSLESS_ORDER = (3, 4, 5, 2, 1, 6, 0, 7)
# Groups whose candidates are rungs of one ladder (more of the same): after a kept rung the next is
# tried against the new reference, until one does not improve. Other groups hold alternatives.
LADDERS = frozenset({"qps"})  # 3 is the industry's usual RoCE priority; try it first
ECT0 = 2  # the ECN-capable-transport bit DCQCN needs in the ToS byte


@dataclass(frozen=True)
class Knob:
    """One setting fabtune manages."""

    name: str
    scope: Scope
    key: str
    role: str
    fabrics: tuple[Fabric, ...]
    domain: str
    read_by: str = "fabric_facts"
    couples: tuple[str, ...] = ()


KNOBS: tuple[Knob, ...] = (
    Knob("trust", "nic", "trust", "roce_qos", ("roce",), "pcp | dscp", couples=("dscp2prio",)),
    Knob(
        "dscp2prio",
        "nic",
        "dscp2prio",
        "roce_qos",
        ("roce",),
        "{dscp 0-63: prio 0-7}",
        couples=("trust", "roce_tos", "cnp_dscp"),
    ),
    Knob(
        "pfc",
        "nic",
        "pfc",
        "roce_qos",
        ("roce",),
        "list of priorities 0-7 with PFC",
        couples=("roce_tos", "dscp2prio"),
    ),
    Knob("mtu", "nic", "mtu", "roce_qos", ("roce",), "1500 | 2200 | 4200 | 9000"),
    Knob("ecn", "nic", "ecn", "roce_cc", ("roce",), "{np: [prio], rp: [prio]}", couples=("pfc",)),
    Knob("cnp_dscp", "nic", "cnp_dscp", "roce_cc", ("roce",), "0-63", couples=("cnp_prio", "dscp2prio")),
    Knob("cnp_prio", "nic", "cnp_prio", "roce_cc", ("roce",), "0-7, not the RoCE priority", couples=("pfc",)),
    Knob(
        "roce_tos",
        "nic",
        "roce_tos",
        "roce_tos",
        ("roce",),
        "0-255 (DSCP << 2 | ECN)",
        couples=("dscp2prio", "pfc", "NCCL_IB_TC"),
    ),
    Knob("roce_mode", "nic", "roce_mode", "roce_tos", ("roce",), "1 | 2"),
    Knob("NCCL_IB_TC", "nccl", "NCCL_IB_TC", "nccl_env", ("roce",), "= roce_tos", couples=("roce_tos",)),
    Knob(
        "NCCL_IB_GID_INDEX", "nccl", "NCCL_IB_GID_INDEX", "nccl_env", ("roce",), "the RoCEv2 IPv4 GID index"
    ),
    Knob(
        "NCCL_IB_QPS_PER_CONNECTION",
        "nccl",
        "NCCL_IB_QPS_PER_CONNECTION",
        "nccl_env",
        ("roce", "ib"),
        "1-128",
    ),
    Knob(
        "NCCL_NET_GDR_LEVEL", "nccl", "NCCL_NET_GDR_LEVEL", "nccl_env", ("roce", "ib"), "LOC|PIX|PXB|PHB|SYS"
    ),
    Knob("NCCL_IB_DISABLE", "nccl", "NCCL_IB_DISABLE", "nccl_env", ("roce", "ib"), "0 | 1"),
    Knob("NCCL_IB_ADAPTIVE_ROUTING", "nccl", "NCCL_IB_ADAPTIVE_ROUTING", "nccl_env", ("ib",), "0 | 1"),
    Knob("NCCL_IB_AR_THRESHOLD", "nccl", "NCCL_IB_AR_THRESHOLD", "nccl_env", ("ib",), "bytes"),
    # NCCL puts NCCL_IB_SL in its QPs' address handle (ah_attr.sl). On InfiniBand the SM maps the SL
    # to a VL; on RoCE mlx5 uses SL & 7 as the frames' Ethernet priority (mlx5_set_path), the PCP of
    # the 802.1Q tag on a VLAN GID: what a switch that trusts PCP classifies by. Untagged RoCE frames
    # carry no PCP. The plan sets it with the lossless class where the facts show NCCL's GID on a
    # VLAN device (lossless_change(tagged=True)), and never on untagged RoCE.
    Knob("NCCL_IB_SL", "nccl", "NCCL_IB_SL", "nccl_env", ("roce", "ib"),
         "0-15: IB, an SL the SM maps to a data VL; RoCE, SL & 7 is the PCP on a VLAN GID"),
    Knob("NCCL_IB_FIFO_TC", "nccl", "NCCL_IB_FIFO_TC", "nccl_env", ("roce",), "0-255, like NCCL_IB_TC"),
    Knob("NCCL_IB_ROCE_VERSION_NUM", "nccl", "NCCL_IB_ROCE_VERSION_NUM", "nccl_env", ("roce",), "1 | 2"),
    Knob("routing_engine", "sm", "routing_engine", "ib_sm", ("ib",),
         "opensm routing engines; the NVIDIA SM's ar_* engines route adaptively"),
)
KNOB_BY_NAME = {k.name: k for k in KNOBS}
ROLES: tuple[str, ...] = tuple(sorted({k.role for k in KNOBS}))
"""The roles that set knobs (a tuned state's ``fabric_persist_roles_by_host`` names some of them)."""
SECTION_FABRICS: Mapping[str, tuple[Fabric, ...]] = {"nics": ("roce",), "sm": ("ib",)}
"""Sections of the desired tree that belong to one fabric type as a whole: ``nics`` holds RoCE
ports only (an InfiniBand host has none), ``sm`` is the InfiniBand subnet manager."""


def roles_of(knobs: Iterable[str]) -> tuple[str, ...] | None:
    """The roles that set ``knobs`` (sorted), or None when one is no registered knob: then every
    role runs (an apply of only the roles a move touches leaves every other knob as it is)."""
    found = [KNOB_BY_NAME.get(name) for name in knobs]
    if not found or any(k is None for k in found):
        return None
    return tuple(sorted({k.role for k in found if k is not None}))


def fabrics_of(section: str, key: str) -> tuple[Fabric, ...]:
    """The fabric types a desired-state key applies to (section-wide, else the knob's, else both)."""
    if section in SECTION_FABRICS:
        return SECTION_FABRICS[section]
    knob = KNOB_BY_NAME.get(key)
    return knob.fabrics if knob is not None and knob.scope == section else ("roce", "ib")


@dataclass(frozen=True)
class Change:
    """A partial desired state: NIC knobs applied to every RDMA port, NCCL and SM keys."""

    nic: Mapping[str, Any] = field(default_factory=dict)
    nccl: Mapping[str, Any] = field(default_factory=dict)
    sm: Mapping[str, Any] = field(default_factory=dict)

    def knobs(self) -> list[str]:
        return sorted([*self.nic, *self.nccl, *self.sm])


@dataclass(frozen=True)
class Candidate:
    """One move: a change to try, with why it is worth trying, and the hosts it is for (empty: every
    host; the rack planner, ``fabtune.tune.hosts``, names the hosts that need it)."""

    group: str
    name: str
    change: Change
    why: str
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class LosslessClass:
    """The lossless class the fabric runs, as the inventory declares it (``fabtune_lossless``): the
    priority its switches give PFC and ECN, the DSCP they map to it, and the CNPs' own class."""

    priority: int
    dscp: int
    cnp_priority: int = 6
    cnp_dscp: int = 48


@dataclass(frozen=True)
class View:
    """What the planner knows of the rack: current state (one host's, all hosts alike), hardware,
    and the lossless class the fabric declares (None: not declared)."""

    fabric: Fabric
    nic: Mapping[str, Any]
    nccl: Mapping[str, Any]
    sm: Mapping[str, Any]
    rocev2_gid_index: int | None
    hosts: int
    gpu_nic_distance: str
    lossless: LosslessClass | None = None
    sm_flavor: str = "upstream"  # the SM: upstream opensm, or NVIDIA's (mlnx: ar_* engines)
    vlan_tagged: bool = False  # the RoCEv2 IPv4 GID is on a VLAN device: RoCE frames carry a PCP
    lossless_source: str | None = None  # where ``lossless`` came from, or why the plan guesses


def lossless_change(prio: int, cnp_prio: int = 6, *, dscp: int | None = None, cnp_dscp: int = 48,
                    tagged: bool = False) -> Change:
    """The coupled lossless-class settings for RoCE priority ``prio``: DSCP trust, the DSCP that maps
    to it, PFC and ECN on it, the RoCE ToS and NCCL_IB_TC carrying that DSCP with ECT(0), and CNPs
    on their own priority and DSCP. ``dscp`` defaults to AFx2 in the class selector of ``prio``.

    ``tagged`` (NCCL's GID is on a VLAN device): NCCL_IB_SL ``prio`` too, so the PCP of NCCL's
    frames names the same priority (mlx5 sends SL & 7 as the PCP) for switches that classify by
    PCP. On untagged RoCE the SL reaches no frame and is left alone.

    RoCE v2 for rdma_cm (``roce_mode`` 2) is part of the class: RoCE v1 frames carry no IP header, so
    no DSCP, and a switch that trusts DSCP cannot classify them (the collection's ``fabric_desired``
    refuses trust dscp with roce_mode 1); a host left on v1 cannot reach its v2 peers over rdma_cm."""
    if dscp is None:
        dscp = prio * 8 + 2  # in the class selector of prio: 26 (AF31) for priority 3, the common choice
    tos = dscp << 2 | ECT0
    cnp = cnp_prio if cnp_prio != prio else 7
    return Change(
        nic={
            "trust": "dscp",
            "dscp2prio": {dscp: prio, cnp_dscp: cnp},
            "pfc": [prio],
            "ecn": {"np": [prio], "rp": [prio]},
            "roce_tos": tos,
            "roce_mode": 2,
            "cnp_dscp": cnp_dscp,
            "cnp_prio": cnp,
        },
        nccl={"NCCL_IB_TC": str(tos), **({"NCCL_IB_SL": str(prio)} if tagged else {})},
    )


def _differs(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a wanted value differs; a wanted mapping (dscp2prio, ecn) only manages its own keys."""
    have_all, want_all = _norm(current), _norm(wanted)
    for key, value in want_all.items():
        have = have_all.get(key)
        if isinstance(value, dict) and isinstance(have, dict):
            if _differs(have, value):
                return True
        elif have != value:
            return True
    return False


def _norm(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return str(value) if value is not None else None


def nic_changed(nic: Mapping[str, Any], change: Change) -> bool:
    """Whether applying ``change`` to one NIC's knobs would change one."""
    return _differs(nic, change.nic)


def changes_anything(view: View, change: Change) -> bool:
    """Whether applying ``change`` to the current state would change a knob."""
    return _differs(view.nic, change.nic) or _differs(view.nccl, change.nccl) or _differs(view.sm, change.sm)


DECLARED = "declared in the inventory (fabtune_lossless)"
GUESSED = "guessed: no class declared in the inventory (fabtune_lossless)"


def _lossless(view: View) -> list[Candidate]:
    """The class the fabric runs (declared in the inventory or advertised by the switch over LLDP:
    ``fabtune.tune.lossless``), else a guess in the usual order; the why says which."""
    if view.fabric != "roce":
        return []
    known = view.lossless
    if known is not None:
        p, d = known.priority, known.dscp
        change = lossless_change(p, known.cnp_priority, dscp=d, cnp_dscp=known.cnp_dscp,
                                 tagged=view.vlan_tagged)
        why = (
            f"{view.lossless_source or DECLARED}: PFC, DSCP trust and ToS agree on priority {p}, "
            f"DSCP {d}, with ECN/DCQCN on it and CNPs on priority {known.cnp_priority}, "
            f"DSCP {known.cnp_dscp}"
        )
        return [Candidate("lossless", f"lossless priority {p}, DSCP {d}", change, why)]
    return [
        Candidate(
            "lossless",
            f"lossless priority {p}",
            lossless_change(p, tagged=view.vlan_tagged),
            f"{view.lossless_source or GUESSED}: trying priority {p} (the inventory's fabtune_lossless "
            f"names the switches' class): PFC, DSCP trust and ToS agree on it, with ECN/DCQCN on it",
        )
        for p in LOSSLESS_ORDER
    ]


def _mtu(view: View) -> list[Candidate]:
    if view.fabric != "roce":
        return []
    return [Candidate("mtu", "MTU 4200", Change(nic={"mtu": 4200}), "RoCE MTU 4096: fewer headers per byte")]


def _qps(view: View) -> list[Candidate]:
    return [
        Candidate(
            "qps",
            f"{q} QPs per connection",
            Change(nccl={"NCCL_IB_QPS_PER_CONNECTION": str(q)}),
            "more QPs spread over ECMP paths and lift the per-QP limit",
        )
        for q in (4, 8, 16)
    ]


GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")  # NCCL_NET_GDR_LEVEL, nearest first


def _gdr(view: View) -> list[Candidate]:
    if view.gpu_nic_distance not in ("NODE", "SYS", "PHB"):
        return _gdr_default(view)  # NCCL's default already uses GPUDirect RDMA up to PXB
    levels = ("PHB", "SYS")
    return [
        Candidate(
            "gdr",
            f"GPUDirect RDMA up to {lvl}",
            Change(nccl={"NCCL_NET_GDR_LEVEL": lvl}),
            f"GPU-NIC distance is {view.gpu_nic_distance}",
        )
        for lvl in levels
    ]


def _gdr_default(view: View) -> list[Candidate]:
    """A GPU and NIC under one PCIe switch (PIX, PXB) with an ``NCCL_NET_GDR_LEVEL`` below that
    distance: NCCL stages the traffic through host memory. The move sets NCCL's own default (PXB)."""
    level = str(view.nccl.get("NCCL_NET_GDR_LEVEL") or "")
    distance = view.gpu_nic_distance if view.gpu_nic_distance in GDR_LEVELS else "PIX"
    if level not in GDR_LEVELS or GDR_LEVELS.index(level) >= GDR_LEVELS.index(distance):
        return []
    return [Candidate("gdr", "GPUDirect RDMA up to PXB", Change(nccl={"NCCL_NET_GDR_LEVEL": "PXB"}),
                      f"NCCL_NET_GDR_LEVEL={level} turns GPUDirect RDMA off at GPU-NIC distance {distance}")]


def _routing(view: View) -> list[Candidate]:
    """Adaptive routing only on NVIDIA's SM (its ar_* engines; upstream opensm has none and would
    fall back to minhop), declared by the inventory's fabtune_sm_flavor or seen in opensm.conf."""
    if view.fabric != "ib":
        return []
    ftree = Candidate(
        "routing", "ftree", Change(sm={"routing_engine": "ftree"}), "fat-tree routing balances paths"
    )
    if view.sm_flavor != "mlnx":
        return [ftree]
    return [
        Candidate(
            "routing",
            "ar_updn + adaptive routing",
            Change(
                sm={"sm_flavor": "mlnx", "routing_engine": "ar_updn"},
                nccl={"NCCL_IB_ADAPTIVE_ROUTING": "1"},
            ),
            "adaptive routing spreads flows over all spines",
        ),
        ftree,
    ]


# The transport (TCP fallback, GID index) is a preflight check, not a move group: a run whose baseline
# cannot use RDMA stops with the evidence before anything changes, except a host GID index that a
# knob fixes (the repair move, fabtune/tune/repair.py).
GROUPS: tuple[tuple[str, Callable[[View], list[Candidate]]], ...] = (
    ("lossless", _lossless),
    ("routing", _routing),
    ("mtu", _mtu),
    ("qps", _qps),
    ("gdr", _gdr),
)


GROUP_NAMES = tuple(name for name, _ in GROUPS)
"""The move groups by name (what a profile's ``fabtune_tune.skip_groups`` may list)."""


def plan(view: View, skip: Sequence[str] = ()) -> list[list[Candidate]]:
    """Candidate moves per group, in order of expected impact.

    Within a group the candidates are alternatives: the loop keeps at most one per group, and a
    group whose alternative the rack already runs is left out.
    """
    groups = []
    for name, make in GROUPS:
        if name in skip:
            continue
        candidates = make(view)
        if any(not changes_anything(view, c.change) for c in candidates):
            continue  # the rack already runs one of the group's alternatives
        if candidates:
            groups.append(candidates)
    return groups
