"""A rack in memory whose measurements are the fabric model's (``fabtune.sim.model``): the loop's
backend for unit tests that need real physics without a testbed or Ansible.

Each host holds the state tree the loop reads and writes (``nics.<netdev>`` knobs, ``nccl``) and
hardware facts (its port, RoCEv2 GID index, GPU-NIC distance). ``apply`` merges a desired tree as
the collection's ``fabric_apply`` does (maps merged per key, other knobs replaced; an exact apply
replaces the tree); every measurement rebuilds the model's ``FabricConfig`` from the trees:

* ``measure``: one ``all_reduce_perf`` and one ``alltoall_perf`` per repetition at the loop's size
  (8 GiB), the model's ``collective`` with its noise, and the pause frames it counts. A collective
  the model fails (a GID that cannot reach its peers) is a failed run whose NCCL_DEBUG=INFO log is
  the nccl#1814 fixture per host with that host's GID index (as tests/unit/test_diagnose.py builds
  it), diagnosed by the real ``diagnose_job`` against husky's show_gids table;
* ``pairs``: ``ib_write_bw -R`` (rdma_cm) through the model's ``p2p``, on the pairs of the product's
  ``covering_rounds`` and its 2:1 ``incast_stage`` into the first host.

``share_of_best`` is the oracle's figure (``fabtune.testbed.oracle``): the rack's noise-free
all_reduce busbw over the best the model reaches with fabtune's knobs from the starting rack.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabtune.ansible import RunOutcome
from fabtune.perf.diagnose import Diagnosis, GidTable, diagnose_job
from fabtune.perf.parsers import show_gids
from fabtune.perf.schedule import covering_rounds, incast_stage
from fabtune.sim.model import best_config, collective, expected_busbw, p2p
from fabtune.sim.model.config import (
    DEFAULT_GIDS,
    CollectiveOp,
    Distance,
    FabricConfig,
    Flow,
    GidEntry,
    HostConfig,
    NicConfig,
    SwitchConfig,
)
from fabtune.sim.observe import applied_tree, nic_from_knobs
from fabtune.state import HostState
from fabtune.tune.measure import Batch, FailedRun, Sample
from fabtune.tune.pairs import PairRound
from tests.conftest import fixture_text
from tests.unit.test_diagnose import GIDS, host_log

SIZE = 8 << 30  # the loop's and the oracle's size (MeasureSpec.sizes, testbed.oracle.ORACLE_SIZE)
PRIO3 = tuple(p == 3 for p in range(8))
SWITCH = SwitchConfig(pfc=PRIO3, ecn=PRIO3, trust="dscp", leaves=1)  # lossless priority 3, DSCP trust
RATE_GBPS = 400.0
OPS: tuple[CollectiveOp, ...] = ("all_reduce", "alltoall")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What a host's NIC is, beyond its knobs: its GID table and its distance to the GPUs."""

    gids: tuple[GidEntry, ...] = DEFAULT_GIDS
    gpu_distance: Distance = "PIX"

    @property
    def rocev2_gid_index(self) -> int | None:
        return next((i for i, g in enumerate(self.gids) if (g.version, g.scope) == ("v2", "ipv4")), None)


class ModelRack:
    """The loop's backend (``fabtune.tune.loop.Backend``) over the fabric model; see the module."""

    def __init__(self, state: Mapping[str, Mapping[str, Any]],
                 hardware: Mapping[str, Hardware] | None = None, *, gpus: int = 2, seed: int = 11) -> None:
        self.state = {h: copy.deepcopy(dict(tree)) for h, tree in state.items()}
        self.hardware = {h: (hardware or {}).get(h, Hardware()) for h in self.state}
        self.gpus, self.seed = gpus, seed
        self.runs = 0
        self.touched: list[tuple[str, list[str]]] = []  # (apply | rollback | confirm | extend, hosts)
        gids = fixture_text(GIDS)  # husky's show_gids: 2 RoCEv1 IPv4, 3 RoCEv2 IPv4, as DEFAULT_GIDS
        self.tables = {h: GidTable(show_gids.parse(gids), gids) for h in self.state}
        self.best = best_config(self.fabric(), "all_reduce", SIZE)[1]

    # -- the model -------------------------------------------------------------------------------

    def fabric(self) -> FabricConfig:
        hosts = []
        for name, tree in self.state.items():
            hw = self.hardware[name]
            port = NicConfig(rate_gbps=RATE_GBPS, gids=hw.gids, gpu_distance=hw.gpu_distance)
            nic = nic_from_knobs(port, (tree.get("nics") or {}).get(port.netdev, {}))
            env = tuple(sorted((k, str(v)) for k, v in (tree.get("nccl") or {}).items()))
            hosts.append(HostConfig(name, (nic,), gpus=self.gpus, nccl_env=env))
        return FabricConfig("roce", tuple(hosts), SWITCH, seed=self.seed)

    def share_of_best(self) -> float:
        return expected_busbw(self.fabric(), "all_reduce", SIZE) / self.best

    # -- the Backend protocol --------------------------------------------------------------------

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        return {h: {**copy.deepcopy(s), "hardware": self._facts(h)} for h, s in self.state.items()
                if hosts is None or h in hosts}

    def _facts(self, host: str) -> dict[str, Any]:
        hw = self.hardware[host]
        matrix = {f"GPU{g}": {"NIC0": hw.gpu_distance} for g in range(self.gpus)}
        return {"ports": [{"dev": "mlx5_0", "netdev": "eth2", "roce_v2_gid_index": hw.rocev2_gid_index}],
                "topology": {"matrix": matrix, "nic_legend": {"NIC0": "mlx5_0"}}}

    def learn(self, facts: Mapping[str, Mapping[str, Any]]) -> None:
        pass

    def _ok(self) -> RunOutcome:
        stats: dict[str, Any] = {"failures": {}, "dark": {}, "changed": {}}
        return RunOutcome("successful", 0, stats, (), Path("/nonexistent"))

    def apply(self, desired: Mapping[str, HostState], *, run_id: str | None = None,
              snapshots: Mapping[str, HostState] | None = None, exact: bool = False,
              roles: Sequence[str] | None = None, measure_after: int = 0,
              facts_after: bool = False, pairs_after: int = 0) -> RunOutcome:
        self.touched.append(("rollback" if exact else "apply", sorted(desired)))
        for host, tree in desired.items():
            self.state[host] = applied_tree(self.state[host], tree.tree(), exact)
        return self._ok()

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.touched.append(("confirm", sorted(hosts or self.state)))
        return self._ok()

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        return False  # its state is not shared across threads: confirm before the read back

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.touched.append(("extend", sorted(hosts or self.state)))
        return self._ok()

    def diagnose(self, log: str, why: str) -> Diagnosis:
        return diagnose_job(tuple(self.state), log, failed=True, why=why, gids=self.tables)

    def pair_matrix(self, full: bool) -> list[Any]:
        return []

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        fabric, samples, failures, pauses = self.fabric(), [], [], 0
        for _ in range(repetitions):
            found = []
            for op in OPS:
                res = collective(fabric, op, (SIZE,), self.runs)
                self.runs += 1
                if res.failure is not None or not res.rows:
                    failures.append(FailedRun(f"{op}_perf", "h01", f"mpirun {op}_perf", 30,
                                              f"exit 3: {res.failure}"))
                    break
                found.append(res.rows[-1].busbw)
                pauses += sum(sum(c.rx_pause) + sum(c.tx_pause) for c in res.counters.values())
            if len(found) == 2:
                samples.append(Sample(found[0], found[1]))
        if failures:
            log = "".join(host_log(h, gid_index=self._gid_index(h), warn=True) for h in self.state)
            return Batch((), pauses, failures=tuple(failures), log=log)
        return Batch(tuple(samples), pauses)

    def _gid_index(self, host: str) -> int:
        raw = (self.state[host].get("nccl") or {}).get("NCCL_IB_GID_INDEX")
        return int(raw) if raw is not None else self.hardware[host].rocev2_gid_index or 0

    def pairs(self) -> PairRound:
        """ib_write_bw -R on the covering pairs, then the incast stage into the first host."""
        fabric, names = self.fabric(), list(self.state)
        pairs: dict[str, float | None] = {}
        for server, client in (p for rnd in covering_rounds(names) for p in rnd):
            pairs[f"{client}->{server} mlx5_0"] = self._flows(fabric, [(client, server)])[0]
        stage = incast_stage(names, min(4, len(names) - 1)) if len(names) > 2 else []
        incast: dict[str, float | None] = {}
        if stage:
            rates = self._flows(fabric, [(p.client, p.server) for p in stage])
            ok = [r for r in rates if r is not None]
            label = f"{len(stage)}:1 into {stage[0].server} mlx5_0"
            incast[label] = sum(ok) if len(ok) == len(rates) else None
        return PairRound(pairs, incast)

    def _flows(self, fabric: FabricConfig, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        names = list(self.state)
        flows = [Flow(names.index(c), names.index(s), msg_size=65536, rdma_cm=True) for c, s in pairs]
        run = p2p(fabric, flows, self.runs, duration_s=2.0)
        self.runs += 1
        return [None if r.failure is not None else r.goodput_gbps for r in run.results]
