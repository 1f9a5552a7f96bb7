"""One host, not the first, misconfigured in each way the fabric model knows: the real planner and loop
over the model's rack (tests/unit/modelrack.py) reach the oracle's best with moves on that host alone.

Each fault is one line of ``FAULTS``: the knobs of h02's NIC, its NCCL keys, or its hardware, over a
rack of three hosts tuned as the switches expect (lossless priority 3, DSCP 26, ToS 106, MTU 4200,
NCCL_IB_TC 106). ``fixed``: h02 ends in the state h01 runs (the same knobs; for a GDR level, a
level that runs GPUDirect RDMA as h01's default does); False where the model shows no bandwidth
for the fault on this rack, so the loop keeps nothing (it keeps only what measures better).

A fault no knob fixes is found by the checks with its host named: a NIC on the far socket is the
affinity check's failure for that host (tests/integration/test_bench_checks.py, h03's ``nic_numa``);
a GID index on a NIC without a RoCEv2 GID stops the run at preflight naming the host
(tests/unit/test_tune_repair.py). Here the far-socket NIC is tuned too: the GDR levels are tried on
it alone and rolled back (the oracle's best is the rack as it is).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fabtune.journal import Journal
from fabtune.knobs import lossless_change
from fabtune.perf.checks import affinity
from fabtune.perf.parsers.topo import TopoMatrix
from fabtune.tune.hosts import host_groups, plan_rack
from fabtune.tune.loop import TuneOptions, Tuner, TuneResult
from tests.unit.modelrack import Hardware, ModelRack
from tests.unit.test_tune_loop import FACTORY

HOSTS = ("h01", "h02", "h03")
TUNED = {**FACTORY, **lossless_change(3).nic, "mtu": 4200}
NCCL = {"NCCL_IB_TC": "106"}
UNSET = None


@dataclass(frozen=True)
class Fault:
    nic: dict[str, Any] = field(default_factory=dict)
    nccl: dict[str, Any] = field(default_factory=dict)  # UNSET removes a key
    hardware: Hardware | None = None
    fixed: bool = True
    rack_nccl: dict[str, str] = field(default_factory=dict)  # every host's, before h02's
    # The QP ladder is the rack's to climb where no host runs a rung (a move for every host): left
    # out but where the fault is a host off the rung the rack runs.
    skip: tuple[str, ...] = ("qps",)


FAULTS = {
    "trust pcp": Fault(nic={"trust": "pcp"}),
    "PFC off": Fault(nic={"pfc": []}),
    "ECN off (notification point)": Fault(nic={"ecn": {"np": [], "rp": [3]}}),
    "ECN off (reaction point)": Fault(nic={"ecn": {"np": [3], "rp": []}}),
    "CNPs on the data DSCP": Fault(nic={"cnp_dscp": 26}),
    "CNPs on the data priority": Fault(nic={"cnp_prio": 3}, fixed=False),  # untagged: no PCP, no effect
    "rdma_cm ToS 0": Fault(nic={"roce_tos": 0}),
    "rdma_cm RoCE v1": Fault(nic={"roce_mode": 1}),
    "MTU 1500": Fault(nic={"mtu": 1500}),
    "DSCP 26 to priority 0": Fault(nic={"dscp2prio": {26: 0, 48: 6}}),
    "NCCL_IB_TC 0": Fault(nccl={"NCCL_IB_TC": "0"}),
    "NCCL_IB_TC unset": Fault(nccl={"NCCL_IB_TC": UNSET}),
    "GPUDirect RDMA off": Fault(nccl={"NCCL_NET_GDR_LEVEL": "LOC"}),
    "fewer QPs than the rack": Fault(nccl={"NCCL_IB_QPS_PER_CONNECTION": UNSET},
                                     rack_nccl={"NCCL_IB_QPS_PER_CONNECTION": "4"}, skip=(),
                                     fixed=False),  # one leaf: no ECMP paths for more QPs to spread over
    "NCCL_IB_GID_INDEX on RoCE v1": Fault(nccl={"NCCL_IB_GID_INDEX": "2"}),
    "NIC on the far socket": Fault(hardware=Hardware(gpu_distance="SYS"), fixed=False),
}


def rack_with(fault: Fault) -> ModelRack:
    nic = {**copy.deepcopy(TUNED), **copy.deepcopy(fault.nic)}
    nccl = {**NCCL, **fault.rack_nccl, **fault.nccl}
    state: dict[str, dict[str, Any]] = {
        h: {"nics": {"eth2": copy.deepcopy(TUNED)}, "nccl": {**NCCL, **fault.rack_nccl}} for h in HOSTS}
    state["h02"] = {"nics": {"eth2": nic}, "nccl": {k: v for k, v in nccl.items() if v is not UNSET}}
    return ModelRack(state, {"h02": fault.hardware} if fault.hardware else None)


def tune(rack: ModelRack, tmp_path: Path, skip: tuple[str, ...]) -> TuneResult:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    return Tuner(rack, journal, run_id, "roce", options=TuneOptions(skip_groups=skip)).run()


def runs_gpudirect(nccl: dict[str, Any]) -> bool:
    return nccl.get("NCCL_NET_GDR_LEVEL") in (None, "PXB", "PHB", "SYS")


@pytest.mark.parametrize("name", FAULTS)
def test_one_bad_host_is_tuned_to_the_oracles_best_by_moves_on_it_alone(name: str, tmp_path: Path) -> None:
    fault = FAULTS[name]
    rack = rack_with(fault)
    before = copy.deepcopy(rack.state)
    result = tune(rack, tmp_path, fault.skip)
    moves = [(m.name, m.outcome, m.hosts, m.reason) for m in result.moves]
    assert rack.share_of_best() >= 0.99, moves
    assert moves and all(hosts == ["h02"] for _, _, hosts, _ in moves), moves
    assert {tuple(hosts) for _, hosts in rack.touched} == {("h02",)}  # nothing armed or applied elsewhere
    assert rack.state["h01"] == before["h01"] and rack.state["h03"] == before["h03"]
    h01, h02 = rack.state["h01"], rack.state["h02"]
    if not fault.fixed:
        assert [outcome for _, outcome, _, _ in moves] == ["rolled_back"] * len(moves), moves
        assert h02 == before["h02"]
        return
    assert h02["nics"] == h01["nics"], moves
    nccl = {k: v for k, v in h02["nccl"].items() if k != "NCCL_NET_GDR_LEVEL"}
    assert nccl == {k: v for k, v in h01["nccl"].items() if k != "NCCL_IB_GID_INDEX"} | (
        {"NCCL_IB_GID_INDEX": "3"} if "NCCL_IB_GID_INDEX" in fault.nccl else {}), moves
    assert runs_gpudirect(h02["nccl"])


def test_a_gdr_level_below_the_distance_gets_a_move_to_nccls_default_on_its_host_alone() -> None:
    rack = rack_with(FAULTS["GPUDirect RDMA off"])
    (gdr,) = plan_rack(host_groups(rack.facts(), "roce"), ("lossless", "mtu", "qps"))
    assert [(c.name, c.change.nccl, c.hosts) for c in gdr] == [
        ("GPUDirect RDMA up to PXB", {"NCCL_NET_GDR_LEVEL": "PXB"}, ("h02",))]
    assert "NCCL_NET_GDR_LEVEL=LOC" in gdr[0].why


def test_a_nic_on_the_far_socket_is_the_affinity_checks_failure_on_its_host() -> None:
    """No knob moves a NIC: the check names the host (on the testbed too: test_bench_checks, h03)."""
    facts = rack_with(FAULTS["NIC on the far socket"]).facts()
    found = []
    for host in HOSTS:
        topo = facts[host]["hardware"]["topology"]
        matrix = TopoMatrix(("GPU0", "GPU1", "NIC0"), topo["matrix"], nic_names=topo["nic_legend"])
        found += affinity(host, matrix, [(0, "mlx5_0"), (1, "mlx5_0")])
    assert {(r.host, r.verdict) for r in found} == {("h01", "pass"), ("h02", "fail"), ("h03", "pass")}
    failed = [r.summary for r in found if r.verdict == "fail"]
    assert failed == ["GPU0 <-> mlx5_0: SYS", "GPU1 <-> mlx5_0: SYS"]
