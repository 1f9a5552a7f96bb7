"""A benchmark's counters read after it stand for the next one's read before, until anything else
may have moved them (an apply, a pair matrix, a failed benchmark): one fabric_run read fewer per
batch and per round, the same deltas."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from fabtune import ansible
from fabtune.ansible import Part, RunOutcome, TaskResult
from fabtune.errors import PlaybookFailed
from fabtune.inventory import InventoryInfo
from fabtune.perf import pairs, rdmacounters
from fabtune.perf.fabric import HostView, Rail
from fabtune.state import HostState
from fabtune.tune import backend as backend_mod
from fabtune.tune import measure
from fabtune.tune import pairs as rdma_cm
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.measure import Batch, FailedRun, MeasureSpec

HOSTS = ("h01", "h02")
ETHTOOL = "NIC statistics:\n     rx_prio3_pause: {}\n     tx_prio3_pause: 0\n"
HW = "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent:{}\n"


def _read(pause: int, cnp: int) -> list[dict[str, Any]]:
    return [{"id": "ethtool eth2", "rc": 0, "stdout": ETHTOOL.format(pause)},
            {"id": "hw eth2", "rc": 2, "stdout": HW.format(cnp)}]  # grep -s: 2 where a counter is missing


def _reads_task(host: str, task: str, pause: int, cnp: int) -> TaskResult:
    result = {"runs": _read(pause, cnp)}
    return TaskResult(host, task, "fabtune.fabric.fabric_run", "runner_on_ok", False, result)


def test_a_counter_that_went_back_was_reset_and_moved_by_its_value() -> None:
    assert rdmacounters.moved({"a": 10, "b": 5}, {"a": 15, "b": 2, "c": 9}) == {"a": 5, "b": 2}
    assert rdmacounters.moved({"a": 10}, {"a": 10}) == {}


def test_reads_cover_a_benchmark_only_with_every_port_it_reads() -> None:
    wanted = {"h01": rdmacounters.read_commands(["eth2"], [rdmacounters.read_item("eth2", "mlx5_0", 1)])}
    held = {"h01": {"ethtool eth2": "x", "hw eth2": "y"}, "h02": {"ethtool eth2": "z"}}
    assert rdmacounters.covers(held, wanted)
    assert not rdmacounters.covers({"h01": {"ethtool eth2": "x"}}, wanted)
    assert not rdmacounters.covers({"h02": held["h02"]}, wanted)
    assert not rdmacounters.covers(None, wanted)
    assert rdmacounters.reads_of({"h01": {"runs": _read(1, 2)}, "h02": {"msg": "skipped"}}) == {
        "h01": {"ethtool eth2": ETHTOOL.format(1), "hw eth2": HW.format(2)}
    }


def _spec() -> MeasureSpec:
    return MeasureSpec(Path("/inv.yml"), HOSTS, 2, {h: ["eth2"] for h in HOSTS},
                       hw_reads={h: [rdmacounters.read_item("eth2", "mlx5_0", 1)] for h in HOSTS})


class _Playbooks:
    """ansible.run_playbook as a rack whose counters rise by 10 pause frames and 3 CNPs a run."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.level = 100

    def __call__(self, playbook: str, inventory: Path, **kwargs: Any) -> RunOutcome:
        extravars = dict(kwargs.get("extravars") or {})
        self.calls.append((playbook, extravars))
        nccl = playbook == "bench_measure.yml"
        before_task = measure.READ_BEFORE if nccl else pairs.BEFORE_TASK
        after_task = measure.READ_AFTER if nccl else pairs.AFTER_TASK
        tasks = []
        before = extravars.get("fabtune_counter_reads_before", extravars.get("fabtune_counter_reads", {}))
        for host in sorted(before):
            tasks.append(_reads_task(host, before_task, self.level, self.level // 10))
        self.level += 10
        for host in sorted(extravars.get("fabtune_counter_reads", {})):
            tasks.append(_reads_task(host, after_task, self.level, self.level // 10))
        return RunOutcome("successful", 0, {}, tuple(tasks), Path("/nonexistent"))


def test_a_batch_given_a_read_reads_none_before_and_counts_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    played = _Playbooks()
    monkeypatch.setattr(ansible, "run_playbook", played)
    first = measure.measure(_spec(), 1)
    assert "fabtune_counter_reads_before" not in played.calls[0][1]
    assert first.pause_frames == 2 * 10
    assert set(first.after) == set(HOSTS)
    played.level += 50  # traffic the controller did not run: it falls to the next batch
    second = measure.measure(_spec(), 1, first.after)
    assert played.calls[1][1]["fabtune_counter_reads_before"] == {}
    assert second.pause_frames == 2 * 60
    assert second.counters["h01:eth2"] == {"rx_prio3_pause": 60, "np_cnp_sent": 6}
    # a read that lacks a port the batch reads stands for nothing: the batch reads before itself
    measure.measure(_spec(), 1, {"h01": first.after["h01"]})
    assert "fabtune_counter_reads_before" not in played.calls[2][1]


def _views() -> dict[str, HostView]:
    rail = Rail("mlx5_0", "eth2", "10.0.0.1", 4200, 400.0, "Ethernet", 3)
    return {h: HostView(h, (rail,), {}) for h in HOSTS}


def test_a_pair_round_given_a_read_reads_none_before(monkeypatch: pytest.MonkeyPatch) -> None:
    played = _Playbooks()
    monkeypatch.setattr(ansible, "run_playbooks", lambda parts, inventory, **k: [
        played(part.playbook, inventory, extravars=part.variables) for part in parts])
    _, after = rdma_cm.measure(Path("/inv.yml"), _views(), None)
    assert "fabtune_counter_reads_before" not in played.calls[0][1]
    found, _ = rdma_cm.measure(Path("/inv.yml"), _views(), None, before=after)
    assert played.calls[1][1]["fabtune_counter_reads_before"] == {}
    # the round's counters count from the read it was given
    assert found.results[0].counters["h01:eth2"] == {"rx_prio3_pause": 10, "np_cnp_sent": 1}


class _FakeMeasure:
    def __init__(self) -> None:
        self.before: list[rdmacounters.Reads | None] = []
        self.fail = False

    def __call__(self, spec: MeasureSpec, repetitions: int, before: rdmacounters.Reads | None = None,
                 ) -> Batch:
        self.before.append(before)
        if self.fail:
            raise PlaybookFailed("h02 unreachable")
        return Batch((), 0, after={"h01": {"ethtool eth2": f"read {len(self.before)}"}})


def test_the_backend_chains_reads_until_an_apply_or_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeMeasure()
    monkeypatch.setattr(backend_mod, "measure", fake)
    monkeypatch.setattr(ansible, "run_playbook",
                        lambda *a, **k: RunOutcome("successful", 0, {}, (), Path("/nonexistent")))
    info = InventoryInfo(Path("/inv.yml"), "rack", "roce", HOSTS, (), "mpirun", None)
    backend = AnsibleBackend(info)
    backend.measure(1)
    backend.measure(1)
    assert fake.before == [None, {"h01": {"ethtool eth2": "read 1"}}]
    backend.apply({"h01": HostState.from_tree({})})
    backend.measure(1)
    assert fake.before[-1] is None  # the move changed the ports
    fake.fail = True
    with pytest.raises(PlaybookFailed):
        backend.measure(1)
    fake.fail = False
    backend.measure(1)
    assert fake.before[-1] is None  # a failed batch leaves no read to stand for the next


def _facts_tasks(part: Part, run: int) -> tuple[TaskResult, ...]:
    """facts.yml's results on the hosts its play names (``fabric_hosts``, default every host)."""
    hosts = str(part.variables.get(backend_mod.HOSTS_VAR, ",".join(HOSTS))).split(",")
    result = {"ansible_facts": {"fabric_facts": {"nics": {}, "run": run}}}
    task, action = "Gather the fabric state", "fabtune.fabric.fabric_facts"
    return tuple(TaskResult(h, task, action, "runner_on_ok", False, result) for h in hosts)


class _Parts:
    """ansible.run_playbooks as a rack: each part's counters read after; the nccl part's results are
    read by a stand-in ``batch_of`` (the parse is measure's, tested on its own)."""

    def __init__(self) -> None:
        self.calls: list[list[Part]] = []

    def __call__(self, parts: list[Part], inventory: Path, **kwargs: Any) -> list[RunOutcome]:
        self.calls.append(list(parts))
        found = []
        for index, part in enumerate(parts):
            if part.playbook == backend_mod.FACTS_PLAYBOOK:
                found.append(RunOutcome("successful", 0, {}, _facts_tasks(part, len(self.calls)),
                                        Path("/nonexistent"), seconds=1.0))
                continue
            after = measure.READ_AFTER if part.playbook == measure.PLAYBOOK else pairs.AFTER_TASK
            tasks = tuple(_reads_task(h, after, 10 * index, index) for h in HOSTS)
            found.append(RunOutcome("successful", 0, {}, tasks, Path("/nonexistent"), seconds=2.5))
        return found


def _paired_backend(
    monkeypatch: pytest.MonkeyPatch, failures: tuple[FailedRun, ...] = ()
) -> tuple[AnsibleBackend, _Parts]:
    played = _Parts()
    monkeypatch.setattr(ansible, "run_playbooks", played)
    monkeypatch.setattr(ansible, "run_playbook",
                        lambda *a, **k: RunOutcome("successful", 0, {}, (), Path("/nonexistent")))

    def batch_of(spec: MeasureSpec, planned: measure.PlannedBatch, outcome: RunOutcome) -> Batch:
        after = rdmacounters.reads_of(outcome.results(measure.READ_AFTER))
        return Batch((), 0, failures=failures, after=after)

    monkeypatch.setattr(backend_mod, "batch_of", batch_of)
    info = InventoryInfo(Path("/inv.yml"), "rack", "roce", HOSTS, (), "mpirun", None)
    backend = AnsibleBackend(info, views=_views(), netdevs={h: ["eth2"] for h in HOSTS},
                             hw_reads={h: [rdmacounters.read_item("eth2", "mlx5_0", 1)] for h in HOSTS})
    return backend, played


def test_the_rounds_asked_for_after_a_batch_run_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, played = _paired_backend(monkeypatch)
    batch = backend.measure(2, pairs_after=2)
    assert batch.rounds_s == 5.0
    (parts,) = played.calls
    assert [p.playbook for p in parts] == [measure.PLAYBOOK, pairs.ROUND_PLAYBOOK, pairs.ROUND_PLAYBOOK]
    # each round's read before is the read after of the part before it, in the same run
    assert all(p.variables["fabtune_counter_reads_before"] == {} for p in parts[1:])
    first, second = backend.pairs(), backend.pairs()
    assert first is not None and second is not None and first.seconds == 2.5
    assert len(played.calls) == 1, "a prefetched round ran again"
    assert backend.pairs() is not None  # none left: a round of its own, its read before held
    assert len(played.calls) == 2 and played.calls[1][0].variables["fabtune_counter_reads_before"] == {}
    backend.measure(2, pairs_after=1)
    backend.apply({"h01": HostState.from_tree({})})  # the move changes what the round measured
    assert backend.prefetched == [] and backend.counters is None
    backend.pairs()
    assert "fabtune_counter_reads_before" not in played.calls[-1][0].variables


def test_a_batch_with_a_failed_launch_keeps_no_round(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = FailedRun("all_reduce_perf", "h01", "mpirun ...", 60, "exit 1")
    backend, played = _paired_backend(monkeypatch, (failed,))
    backend.measure(2, pairs_after=2)
    assert backend.prefetched == [] and backend.counters is None
    backend.pairs()
    assert len(played.calls) == 2  # the round runs again, when asked


def test_a_moves_first_batch_runs_with_its_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, played = _paired_backend(monkeypatch)
    single: list[str] = []
    monkeypatch.setattr(ansible, "run_playbook",
                        lambda playbook, *a, **k: single.append(playbook)
                        or RunOutcome("successful", 0, {}, (), Path("/nonexistent")))
    everywhere = {h: HostState.from_tree({}) for h in HOSTS}
    backend.apply(everywhere, roles=["roce_qos"], measure_after=2)
    (parts,) = played.calls
    assert [p.playbook for p in parts] == ["apply.yml", measure.PLAYBOOK]
    assert parts[1].tags == ("always",)  # the run's --tags roce_qos would leave the batch out
    assert "fabtune_counter_reads_before" not in parts[1].variables  # the apply moved the counters
    first = backend.measure(2)
    assert len(played.calls) == 1 and single == [], "the batch ran again"
    assert first.after and backend.counters == first.after
    backend.measure(2)
    assert single == [measure.PLAYBOOK]  # the next batch is a run of its own
    # a move on some hosts only, of NIC roles: the apply's plays held to its hosts by fabric_hosts
    # (not --limit: the batch runs on every host), the batch after it in the same run
    backend.apply({"h01": HostState.from_tree({})}, roles=["roce_qos"], measure_after=2)
    assert len(played.calls) == 2 and single == [measure.PLAYBOOK]
    held, batch = played.calls[1]
    assert held.variables == {backend_mod.HOSTS_VAR: "h01"}
    assert "fabric_hosts" not in batch.variables
    backend.measure(2)
    assert single == [measure.PLAYBOOK], "the batch ran again"
    # without the move's roles (the subnet manager's play would run on its whole group), or on a
    # backend held to some hosts (a rollback's): two runs, the apply under --limit
    backend.apply({"h01": HostState.from_tree({})}, measure_after=2)
    backend.apply({"h01": HostState.from_tree({})}, roles=["ib_sm"], measure_after=2)
    assert single[-2:] == ["apply.yml", "apply.yml"] and len(played.calls) == 2
    backend.hosts = ["h01"]
    backend.apply({"h01": HostState.from_tree({})}, roles=["roce_qos"], measure_after=2)
    assert single[-1] == "apply.yml" and len(played.calls) == 2
    backend.measure(2)
    assert single[-1] == measure.PLAYBOOK


def test_a_moves_round_runs_with_its_apply_and_waits_through_later_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The move's round after its first batch, in the apply's run: the next measure call takes the
    batch, a later batch alone runs on its own and leaves the round, which the pairs call takes."""
    backend, played = _paired_backend(monkeypatch)
    single: list[str] = []
    monkeypatch.setattr(ansible, "run_playbook",
                        lambda playbook, *a, **k: single.append(playbook)
                        or RunOutcome("successful", 0, {}, (), Path("/nonexistent")))
    monkeypatch.setattr(backend_mod, "measure", _FakeMeasure())
    backend.apply({h: HostState.from_tree({}) for h in HOSTS}, roles=["roce_tos"], measure_after=2,
                  pairs_after=1)
    (parts,) = played.calls
    assert [p.playbook for p in parts] == ["apply.yml", measure.PLAYBOOK, pairs.ROUND_PLAYBOOK]
    assert all(p.tags == ("always",) for p in parts[1:])  # --tags roce_tos would leave them out
    assert "fabtune_counter_reads_before" not in parts[1].variables  # the apply moved the counters
    assert parts[2].variables["fabtune_counter_reads_before"] == {}  # the batch's read after holds
    first = backend.measure(2)
    assert first.rounds_s == 2.5 and len(played.calls) == 1
    backend.measure(2)  # a batch alone: it changes nothing the round measured
    assert len(backend.prefetched) == 1
    found = backend.pairs()
    assert found is not None and found.seconds == 2.5
    assert len(played.calls) == 1 and single == [], "the round ran again"


def test_a_batch_after_a_failed_apply_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, played = _paired_backend(monkeypatch)

    def failed_apply(parts: list[Part], inventory: Path, **kwargs: Any) -> list[RunOutcome]:
        played.calls.append(parts)
        lost = RunOutcome("failed", 2, {"dark": {"h02": 1}}, (), Path("/nonexistent"))
        return [lost, RunOutcome("failed", 2, {"failures": {"h01": 1}}, (), Path("/nonexistent"))]

    monkeypatch.setattr(ansible, "run_playbooks", failed_apply)
    single: list[str] = []
    monkeypatch.setattr(ansible, "run_playbook",
                        lambda playbook, *a, **k: single.append(playbook)
                        or RunOutcome("successful", 0, {}, (), Path("/nonexistent")))
    assert not backend.apply({h: HostState.from_tree({}) for h in HOSTS}, measure_after=2).ok
    assert backend.prefetched_batch is None
    backend.measure(2)
    assert single == [measure.PLAYBOOK]


def test_a_keeps_read_back_runs_with_the_top_up_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, played = _paired_backend(monkeypatch)
    facts = backend.facts(hosts=["h01"], measure_after=3, pairs_after=1)
    assert facts == {"h01": {"nics": {}, "run": 1}}
    (parts,) = played.calls
    assert [p.playbook for p in parts] == [backend_mod.FACTS_PLAYBOOK, measure.PLAYBOOK, pairs.ROUND_PLAYBOOK]
    assert parts[0].variables == {backend_mod.HOSTS_VAR: "h01"}  # the read where the move changed
    batch = backend.measure(3, pairs_after=1)
    assert len(played.calls) == 1, "the batch ran again"
    assert batch.rounds_s == 2.5 and backend.pairs() is not None and len(played.calls) == 1
    # asked for other repetitions, the backend measures them: what it measured ahead is not theirs
    backend.facts(measure_after=3, pairs_after=1)
    backend.measure(2, pairs_after=1)
    assert len(played.calls) == 3 and played.calls[2][0].playbook == measure.PLAYBOOK


def test_a_read_that_failed_keeps_no_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, played = _paired_backend(monkeypatch)

    def lost_h02(parts: list[Part], inventory: Path, **kwargs: Any) -> list[RunOutcome]:
        played.calls.append(parts)
        return [RunOutcome("failed", 4, {"dark": {"h02": 1}}, (), Path("/nonexistent"))] * len(parts)

    monkeypatch.setattr(ansible, "run_playbooks", lost_h02)
    with pytest.raises(PlaybookFailed):
        backend.facts(measure_after=3)
    assert backend.prefetched_batch is None and backend.counters is None


def test_a_restore_reads_every_host_back_in_its_run(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, played = _paired_backend(monkeypatch)
    single: list[str] = []

    def run_playbook(playbook: str, *_a: Any, **_k: Any) -> RunOutcome:
        single.append(playbook)
        return RunOutcome("successful", 0, {}, _facts_tasks(Part(playbook), 0), Path("/nonexistent"))

    monkeypatch.setattr(ansible, "run_playbook", run_playbook)
    everywhere = {h: HostState.from_tree({}) for h in HOSTS}
    backend.apply(everywhere, exact=True, roles=["roce_qos"], facts_after=True)
    (parts,) = played.calls
    assert [p.playbook for p in parts] == ["apply.yml", backend_mod.FACTS_PLAYBOOK]
    assert parts[1].tags == ("always",)  # the run's --tags roce_qos would leave the read out
    assert backend.facts() == {h: {"nics": {}, "run": 1} for h in HOSTS}
    assert single == [], "the read ran again"
    assert backend.facts()[HOSTS[0]]["run"] == 0 and single == [backend_mod.FACTS_PLAYBOOK]  # read once
    # a restore of some hosts only runs alone: the read is of every host
    backend.apply({"h01": HostState.from_tree({})}, exact=True, facts_after=True)
    assert single[-1] == "apply.yml" and len(played.calls) == 1


def test_a_read_after_a_failed_restore_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, played = _paired_backend(monkeypatch)

    def failed_apply(parts: list[Part], inventory: Path, **kwargs: Any) -> list[RunOutcome]:
        played.calls.append(parts)
        failed = RunOutcome("failed", 2, {"failures": {"h02": 1}}, (), Path("/nonexistent"))
        read = RunOutcome("successful", 0, {}, _facts_tasks(Part("facts.yml", {"fabric_hosts": "h01"}), 1),
                          Path("/nonexistent"))
        return [failed, read]

    monkeypatch.setattr(ansible, "run_playbooks", failed_apply)
    assert not backend.apply({h: HostState.from_tree({}) for h in HOSTS}, exact=True, facts_after=True).ok
    assert backend.prefetched_facts is None


def test_a_round_whose_clients_started_late_gives_the_later_rounds_more_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ansible reached a client host after the round's common start: later rounds of the run set
    it that much later, plus half a second (pairs.more_lead), whether run alone or after a batch."""
    backend, played = _paired_backend(monkeypatch)
    leads: list[float] = []

    def measured(*args: Any, lead_extra_s: float = 0.0, **kwargs: Any) -> tuple[rdma_cm.PairRound, Any]:
        leads.append(lead_extra_s)
        return rdma_cm.PairRound({}, late={"h01": 0.0, "h02": 0.9 if len(leads) == 1 else 0.05}), {}

    monkeypatch.setattr(rdma_cm, "measure", measured)
    backend.pairs()
    backend.pairs()  # on time (0.05 s is within the tolerance): the lead stays
    backend.pairs()
    assert leads == [0.0, pytest.approx(1.4), pytest.approx(1.4)]
    backend.measure(2, pairs_after=1)
    (parts,) = played.calls
    assert parts[1].variables[pairs.LEAD_EXTRA_VAR] == pytest.approx(1.4)


def test_a_round_whose_hosts_all_waited_gives_the_later_rounds_less_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every client host waited for the round's common start: later rounds keep the spare of the
    host that waited least, and a late round raises the lead again (pairs.more_lead)."""
    backend, _played = _paired_backend(monkeypatch)
    leads: list[float] = []
    rounds = [({"h01": 0.0, "h02": 0.0}, {"h01": 0.9, "h02": 0.8}),
              ({"h01": 0.0, "h02": 0.0}, {"h01": 0.35, "h02": 0.3}),
              ({"h01": 0.0, "h02": 0.4}, {"h01": 0.2, "h02": 0.0})]

    def measured(*args: Any, lead_extra_s: float = 0.0, **kwargs: Any) -> tuple[rdma_cm.PairRound, Any]:
        late, waited = rounds[len(leads)]
        leads.append(lead_extra_s)
        return rdma_cm.PairRound({}, late=late, waited=waited), {}

    monkeypatch.setattr(rdma_cm, "measure", measured)
    for _ in rounds:
        backend.pairs()
    assert leads == [0.0, pytest.approx(pairs.LEAD_SPARE_S - 0.8), pytest.approx(pairs.LEAD_SPARE_S - 0.8)]
    assert backend.lead_extra_s == pytest.approx(pairs.LEAD_SPARE_S - 0.8 + 0.4 + 0.5)


def test_rounds_run_after_a_batch_move_the_lead_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline's two rounds ran with the lead they were planned with: the later lead steps
    once from it, on the least wait of both (not twice, as for two rounds run one after another)."""
    backend, played = _paired_backend(monkeypatch)
    waits = iter([0.9, 0.7])

    def with_waits(parts: list[Part], inventory: Path, **kwargs: Any) -> list[RunOutcome]:
        found = _Parts()(parts, inventory, **kwargs)
        for index, part in enumerate(parts):
            if part.playbook == pairs.ROUND_PLAYBOOK:
                wait = next(waits)
                tasks = tuple(dataclasses.replace(t, result={**t.result, "first_wait_s": wait})
                              for t in found[index].tasks)
                found[index] = dataclasses.replace(found[index], tasks=tasks)
        played.calls.append(list(parts))
        return found

    monkeypatch.setattr(ansible, "run_playbooks", with_waits)
    backend.measure(2, pairs_after=2)
    first, second = backend.pairs(), backend.pairs()
    assert first is not None and second is not None and min(second.waited.values()) == 0.7
    assert backend.lead_extra_s == pytest.approx(pairs.LEAD_SPARE_S - 0.7)


def test_a_batchs_open_mpi_settings_go_to_the_next_batch_from_the_same_launch_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend, _played = _paired_backend(monkeypatch)
    site = {"plm_rsh_args": "", "plm_rsh_agent": "ssh : rsh"}
    assert backend._spec().rsh_site is None
    backend._took(backend._spec(), Batch((), 0, rsh_site=site))
    assert backend._spec().rsh_site == site
    backend._took(backend._spec(), Batch((), 0))  # a batch that did not share keeps what was read
    assert backend._spec().rsh_site == site
    backend.rsh_site = ("h09", site)  # read on another launch host: not this one's
    assert backend._spec().rsh_site is None
