"""A rack whose only fault is the rdma_cm RoCE ToS: nccl-tests cannot see it (NCCL_IB_TC is right),
ib_write_bw over rdma_cm under incast can (its traffic lands in a lossy class), and the loop fixes it.

Three hosts: the incast stage (2:1 into h01) needs them; a 2-host rack has no congestion in its
pair round, and a lossy class loses nothing without congestion (fabtune.sim.model.congestion).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from fabtune import ansible
from fabtune.ansible import Part, RunOutcome
from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.perf import pairs
from fabtune.rollback import rollback
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import run as tune_run
from fabtune.tune.backend import AnsibleBackend
from tests.integration.conftest import make_testbed
from tests.integration.tunerack import current_state, inventory

pytestmark = pytest.mark.testbed

HOSTS = ("h01", "h02", "h03")
ON_3 = [0, 0, 0, 1, 0, 0, 0, 0]
# Everything as the lossless class on priority 3 wants it, but the rdma_cm default ToS (0).
ONLY_TOS_WRONG = {"trust": "dscp", "pfc": ON_3, "ecn_np": ON_3, "ecn_rp": ON_3, "mtu": 4200, "roce_tos": 0}
OPTIONS = {"max_runs": 4, "baseline_runs": 4, "skip_groups": ["qps", "gdr"]}


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed(
        {
            "name": "ptos1",
            "hosts": len(HOSTS),
            "subnet_base": "10.194",
            "nics_per_host": 1,
            "gpus_per_host": 1,
            "seed": 19,
            "initial": ONLY_TOS_WRONG,
            "overrides": {h: {"nccl_conf": {"NCCL_IB_TC": "106"}} for h in HOSTS},
        }
    )


# A whole tune on 3 hosts with a pair round per decision: minutes alone, more under the full suite.
@pytest.mark.timeout(1800)
def test_the_loop_fixes_a_rack_with_only_the_rdma_cm_tos_wrong(rack: TestbedSpec) -> None:
    result, _ = tune_run.tune(inventory(rack), OPTIONS)
    [move] = result.moves  # the lossless move changes only the ToS here; MTU is right already
    assert move.outcome == "kept", move.reason
    assert move.reason.startswith("ib_write_bw (rdma_cm) incast 2:1 into h01 mlx5_0 x"), move.reason
    assert move.decision.pairs["verdict"] == "better"
    assert "keep" not in (move.decision.all_reduce.verdict, move.decision.alltoall.verdict)
    tos = {h: [nic["roce_tos"] for nic in s["nics"].values()] for h, s in current_state(rack).items()}
    assert tos == {h: [106] for h in HOSTS}
    steps = Journal().steps(result.run_id)
    kept = next(s for s in steps if s.kind == "move")
    assert kept.state == "kept" and kept.payload["reason"] == move.reason
    rollback(result.run_id)


def test_one_pair_measurement_covers_every_host_and_the_incast(rack: TestbedSpec) -> None:
    """What one decision's ib_write_bw costs on the testbed (printed for docs/benchmarks.md)."""
    backend = AnsibleBackend(read_inventory(inventory(rack)))
    started = time.monotonic()
    found = backend.pairs()
    took = time.monotonic() - started
    print(f"one ib_write_bw measurement (pair round, incast stage), 3 hosts: {took:.1f} s")
    assert found is not None and not found.errors, found
    assert {h for label in found.pairs for h in label.split(" ")[0].split("->")} == set(HOSTS)
    assert list(found.incast) == ["2:1 into h01 mlx5_0"]
    assert all(v and v > 0 for v in [*found.pairs.values(), *found.incast.values()])


@pytest.mark.parametrize(("forks", "clients_task", "key"), [
    (None, pairs.AFTER_TASK, "first_runs"),  # every host at once: clients, servers, reads in one task
    ("1", pairs.CLIENTS_TASK, "runs"),  # one host at a time: the clients in a task of their own first
])
def test_a_round_runs_its_clients_in_one_wave_or_in_waves(
    rack: TestbedSpec, monkeypatch: pytest.MonkeyPatch, forks: str | None, clients_task: str, key: str
) -> None:
    """bench_ib_write_bw.yml runs a host's clients in the task that then waits for its servers only
    where the round's hosts all run at once: with one fork, a server-only host waiting for its
    servers would keep the hosts of their clients from starting until the servers were stopped."""
    if forks is not None:
        monkeypatch.setenv("FABTUNE_FORKS", forks)
    ran: list[tuple[Part, RunOutcome]] = []
    real = ansible.run_playbooks

    def recorded(parts: list[Part], *args: Any, **kwargs: Any) -> list[RunOutcome]:
        outcomes = real(parts, *args, **kwargs)
        ran.extend(zip(parts, outcomes, strict=True))
        return outcomes

    monkeypatch.setattr(ansible, "run_playbooks", recorded)
    found = AnsibleBackend(read_inventory(inventory(rack))).pairs()
    assert found is not None and not found.errors, found
    assert all(v and v > 0 for v in [*found.pairs.values(), *found.incast.values()])
    assert len(ran) >= 2  # the pair round(s) and the incast stage
    for part, outcome in ran:
        clients = {run["client"] for run in part.variables["fabtune_bench_runs"]}
        assert {h for h, res in outcome.results(clients_task).items() if res.get(key)} == clients
