"""``fabtune tune``: measure, change one knob group, measure again, keep or roll back.

validate -> lock -> journal -> facts -> preflight -> baseline (when it failed through hosts whose
GID index a knob fixes: the repair move first, ``tune/repair.py``) -> for each candidate move (planned
per host group, ``tune/hosts.py``): snapshot (journaled first) -> apply on the move's hosts with a
host-side revert armed -> measure the whole rack until the decision is clear -> keep (confirm: cancel
the revert) or roll back (apply the snapshot on the move's hosts, read every host back, verify
equal) -> tuned desired state -> report.

A benchmark launch that fails (missed deadline, error, unreadable or impossible output) is never a
sample: it is journaled as a failed benchmark step with its evidence, and its repetitions are run
once more. When the retry fails too, the baseline fails (BenchmarkFailed, exit 6); a move is
rolled back (verified) with the evidence as its reason, then one repetition of the restored rack
must measure, else the run stops (BenchmarkFailed) with the rack restored.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from fabtune import ansible, events
from fabtune.errors import BenchmarkError, ExitStatus, FabtuneError, PlaybookFailed
from fabtune.journal import Journal
from fabtune.knobs import LADDERS, Candidate, Change, LosslessClass, roles_of
from fabtune.perf.checks import CheckResult
from fabtune.perf.diagnose import Diagnosis
from fabtune.perf.pairs import PairResult, late_clients
from fabtune.state import HostState, trees_of
from fabtune.tune import stats
from fabtune.tune.hosts import changed_nics, host_groups, plan_rack
from fabtune.tune.lossless import LosslessChoice
from fabtune.tune.lossless import choose as choose_lossless
from fabtune.tune.measure import Batch, FailedRun, Sample, merge_counters
from fabtune.tune.pairs import OPTIONS as PAIR_OPTIONS
from fabtune.tune.pairs import PairDecision, PairRound, best_of, compare, confirm, slow_pairs, slow_ports
from fabtune.tune.payloads import (
    BaselineFailedPayload,
    BaselinePayload,
    FactsPayload,
    FailedRunPayload,
    FinalPayload,
    MetricDecision,
    MoveDecision,
    MoveIntent,
    MoveOutcome,
    PairsPayload,
    PairsUnavailablePayload,
)
from fabtune.tune.repair import GROUP, KNOB, Repair, failed_reason, kept_reason, repair_for
from fabtune.tune.state import snapshot_of
from fabtune.tune.stats import Decision, DecisionPolicy, decide, noise_floor

REFERENCE_ROUNDS = 2  # ib_write_bw rounds in a pair reference (the baseline's, a kept state's)


class PreflightFailed(FabtuneError):
    """Measuring would be pointless: a check failed on the hosts named, with the evidence."""

    code = ExitStatus.CHECK_FAILED

    def __init__(self, results: Sequence[CheckResult], changed: str = "nothing was changed") -> None:
        self.results = list(results)
        lines = "; ".join(f"{r.host}: {r.check}: {r.summary} [{r.evidence}]" for r in results)
        super().__init__(f"preflight failed, {changed}: {lines}")


class Repairable(PreflightFailed):
    """The baseline failed through hosts' own faults, and a knob fixes every one (``repair``)."""

    def __init__(self, results: Sequence[CheckResult], repair: Repair, changed: str) -> None:
        super().__init__(results, changed)
        self.repair = repair


class RollbackFailed(FabtuneError):
    """A rollback did not restore the snapshot (read back differs)."""


class RevertFired(FabtuneError):
    """A host undid the move by itself (its revert deadline passed) before the move was decided.

    The runs measured on it are discarded; every later move would meet the same deadline, so the
    run stops here, with the hosts restored to the state before the move.
    """

    code = ExitStatus.CONFIG


def reverted_hosts(outcome: ansible.RunOutcome) -> list[str]:
    """Hosts whose confirm found the run already reverted by the host-side timer."""
    return sorted({t.host for t in outcome.failures() if t.result.get("reverted")})


# What the loop leaves between the next batch's expected end and the revert deadline before it extends
# it: the extension's own time (a direct SSH command per host, or extend.yml) and any stall of the controller.
HOLD_MARGIN_S = 30.0


def hold_needed_s(expected_s: float) -> float:
    """How long an armed move must stay held for a measurement expected to take ``expected_s``:
    1.5x that plus ``HOLD_MARGIN_S``."""
    return 1.5 * expected_s + HOLD_MARGIN_S


REBOOT_WHY = "the host rebooted"  # what fabtune-boot writes in the record of a run it reverted


def rebooted_hosts(outcome: ansible.RunOutcome) -> list[str]:
    """Of the hosts that reverted the run, those that did so at boot (fabtune-boot.service)."""
    return sorted({t.host for t in outcome.failures()
                   if t.result.get("reverted") and REBOOT_WHY in str(t.result.get("msg", ""))})


class _MoveGone(Exception):
    """Hosts had already reverted the move being measured (found when extending its deadline)."""

    def __init__(self, outcome: ansible.RunOutcome) -> None:
        super().__init__("reverted")
        self.hosts = reverted_hosts(outcome)
        self.rebooted = rebooted_hosts(outcome)


class BenchmarkFailed(BenchmarkError):
    """Benchmark launches failed, and so did their retry: there is nothing to measure with.

    ``log`` is the failed launches' output (NCCL lines by host), what the failure is diagnosed from.
    """

    def __init__(self, failures: Sequence[FailedRun], context: str = "", *, log: str = "") -> None:
        self.failures = list(failures)
        self.log = log
        why = "; ".join(dict.fromkeys(f.summary for f in self.failures))
        first = self.failures[0]
        super().__init__(
            f"{context}benchmark failed, and again when retried: {why} "
            f"(deadline {first.deadline_s} s; command: {first.command})"
        )


class Backend(Protocol):
    """Host I/O of a run (AnsibleBackend in production and on the testbed)."""

    def facts(
        self, *, hosts: Sequence[str] | None = None, measure_after: int = 0, pairs_after: int = 0
    ) -> dict[str, dict[str, Any]]: ...

    def learn(self, facts: Mapping[str, Mapping[str, Any]]) -> None: ...

    def apply(
        self,
        desired: Mapping[str, HostState],
        *,
        run_id: str | None = None,
        snapshots: Mapping[str, HostState] | None = None,
        exact: bool = False,
        roles: Sequence[str] | None = None,
        measure_after: int = 0,
        facts_after: bool = False,
        pairs_after: int = 0,
    ) -> ansible.RunOutcome: ...

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> ansible.RunOutcome: ...

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        """Whether ``confirm`` on ``hosts`` may run on another thread while this backend runs a
        playbook (it runs none itself then)."""
        ...

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> ansible.RunOutcome: ...

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch: ...

    def pairs(self) -> PairRound | None: ...

    def diagnose(self, log: str, why: str) -> Diagnosis: ...

    def pair_matrix(self, full: bool) -> list[PairResult]: ...


Event = events.Event


@dataclass(frozen=True)
class TuneOptions:
    """Parameters of a tuning run (each can be set in the profile's ``fabtune_tune`` section)."""

    policy: DecisionPolicy = field(default_factory=DecisionPolicy)
    baseline_runs: int = 8
    pause_guard: float = 10.0
    guard_loss: float = 0.05
    skip_groups: tuple[str, ...] = ()
    lossless: LosslessClass | None = None  # the inventory's fabtune_lossless (not a profile key)
    # ib_write_bw between host pairs after the baseline and at the end, for the report: "round" (one
    # round that puts every host in a pair), "full" (every pair: n - 1 rounds) or "off"
    pair_matrix: str = "round"
    pair_guard: float = 0.10  # a pair or incast stage of ib_write_bw (rdma_cm) losing more: rollback
    pair_gain: float = 0.10  # the median pair or an incast stage gaining more: a keep on that evidence
    sm_flavor: str | None = None  # the inventory's fabtune_sm_flavor (not a profile key)


@dataclass
class MoveRecord:
    """What happened to one candidate."""

    group: str
    name: str
    knobs: list[str]
    outcome: str
    reason: str
    all_reduce: list[float] = field(default_factory=list)
    alltoall: list[float] = field(default_factory=list)
    reference: float = 0.0
    decision: MoveDecision = field(default_factory=MoveDecision)
    pause_frames: int = 0
    hosts: list[str] = field(default_factory=list)  # the hosts the move changed (the rest kept as they were)


@dataclass
class TuneResult:
    """The run's outcome, for the report."""

    run_id: str
    baseline: list[float]
    final: list[float]
    noise_floor: float
    moves: list[MoveRecord]
    desired: dict[str, HostState]
    preflight: list[CheckResult]
    runs: int = 0  # benchmark repetitions measured, the baseline's included
    planned: list[list[str]] = field(default_factory=list)  # every candidate of the plan, per group
    slow_pairs: list[str] = field(default_factory=list)  # in the state the run leaves, each named
    slow_ports: list[dict[str, Any]] = field(default_factory=list)  # the ports that explain them


@dataclass(frozen=True)
class Judgement:
    """A move's verdict, why, the decisions per metric, and the measurements they rest on."""

    verdict: str
    reason: str
    all_reduce: Decision
    alltoall: Decision
    samples: list[Sample]
    pause_frames: int
    pairs: PairDecision | None = None  # ib_write_bw over rdma_cm against the kept state's round
    pair_rounds: tuple[PairRound, ...] = ()  # the move's rounds (1, or 2 when the pairs decided)


def _ar(samples: Sequence[Sample]) -> list[float]:
    return [s.all_reduce for s in samples]


def _aa(samples: Sequence[Sample]) -> list[float]:
    return [s.alltoall for s in samples]


def _undecided(metric: str, decision: Decision) -> str:
    """A metric beside the one that decided: its estimate and bounds, or, where it has none yet
    (too few runs, runs too far apart), that it was not judged, never numbers nobody measured."""
    if not math.isfinite(decision.ci_high):
        return f"{metric} not judged ({decision.reason})"
    bounds = f"bounds {decision.ci_low - 1:+.1%}..{decision.ci_high - 1:+.1%}"
    return f"{metric} {decision.ratio - 1:+.1%} ({bounds}) not decisive alone"


class Tuner:
    """One tuning run over a backend, journaled step by step."""

    def __init__(
        self,
        backend: Backend,
        journal: Journal,
        run_id: str,
        fabric: str,
        *,
        options: TuneOptions | None = None,
        on_event: Event | None = None,
        revert_deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``revert_deadline_s``: the deadline the backend arms moves with; knowing it, the loop
        extends it only when the next batch might outlast it (None: before every batch)."""
        self.backend, self.journal, self.run_id, self.fabric = backend, journal, run_id, fabric
        self.revert_deadline_s, self.clock = revert_deadline_s, clock
        self.held_until = 0.0  # no host reverts the move before this (clock time); 0: unknown
        self.run_s = 0.0  # the longest one repetition has taken (wall time, clock seconds)
        self.pair_s = 0.0  # the longest one ib_write_bw round (pairs and incast) has taken
        self.options = options or TuneOptions()
        self.emit: Event = on_event or (lambda kind, message, data: None)
        self.current: dict[str, HostState] = {}
        self.facts: dict[str, dict[str, Any]] = {}  # as last read (hardware included): what is planned
        # The kept state's measurements, refreshed after each keep: every guard compares with them.
        self.reference: list[Sample] = []
        self.pause_rate = 0.0  # pause frames per repetition in the kept state
        self.pair_reference: PairRound | None = None  # the kept state's ib_write_bw round (rdma_cm)
        self.pair_rounds = 0
        self._intents: dict[int, MoveIntent] = {}  # a move's intent payload, kept in its outcome
        self._counters: dict[str, dict[str, int]] = {}  # per-port counter deltas since the last take
        self.runs = 0
        self.repairs: list[MoveRecord] = []  # the repair move, when the baseline needed one
        self.moving = False  # a move is applied and not yet decided (kept or rolled back)

    def _measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        """``repetitions`` good repetitions; the failed ones are journaled and run once more.
        ``pairs_after``: pair rounds asked for right after (the backend may run them with the batch).

        Raises:
            BenchmarkFailed: when the retry fails too.
        """
        start = self.clock()
        batch = self._measure_once(repetitions, pairs_after)
        self.run_s = max(self.run_s, (self.clock() - start - batch.rounds_s) / max(repetitions, 1))
        return batch

    def _measure_once(self, repetitions: int, pairs_after: int = 0) -> Batch:
        self.runs += repetitions
        batch = self.backend.measure(repetitions, pairs_after)
        self._counters = merge_counters(self._counters, batch.counters)
        if not batch.failures:
            return batch
        self._journal_failures(batch.failures, "retrying once")
        missing = repetitions - len(batch.samples)
        self.runs += missing
        retry = self.backend.measure(missing)
        self._counters = merge_counters(self._counters, retry.counters)
        if retry.failures:
            self._journal_failures(retry.failures, "no retry left")
            raise BenchmarkFailed([*batch.failures, *retry.failures], log=retry.log or batch.log)
        return Batch(
            batch.samples + retry.samples,
            batch.pause_frames + retry.pause_frames,
            batch.transport or retry.transport,
            counters=merge_counters(batch.counters, retry.counters),
        )

    def _take_counters(self) -> dict[str, dict[str, int]]:
        """The per-port counter deltas measured since the last call (a phase's or a move's)."""
        taken, self._counters = self._counters, {}
        return taken

    def _journal_failures(self, failures: Sequence[FailedRun], then: str) -> None:
        for failed in failures:
            payload = FailedRunPayload(failed.evidence(), then).to_json()
            self.journal.step(self.run_id, "benchmark", f"{failed.test} failed", payload, state="failed")
            self.emit("benchmark", f"failed run, {then}: {failed.summary}", failed.evidence())

    # -- phases ---------------------------------------------------------------------------

    def read_facts(self) -> dict[str, dict[str, Any]]:
        seq = self.journal.step(self.run_id, "phase", "facts", {})
        facts = self.backend.facts()
        self.backend.learn(facts)
        self.facts = facts
        self.current = {h: snapshot_of(f) for h, f in facts.items()}
        self.journal.snapshot(self.run_id, seq, trees_of(self.current))
        read = FactsPayload(tuple(sorted(facts)), self.fabric, _ports(facts))
        self.journal.finish_step(self.run_id, seq, "done", read.to_json())
        self.emit("phase", f"facts read from {len(facts)} hosts", {"hosts": sorted(facts)})
        return facts

    def _say_plan(self, groups: Sequence[Sequence[Candidate]]) -> None:
        """The plan's size and its benchmarks' time at the rates the baseline measured (a run on a
        large rack is long: the operator learns how long before the first move)."""
        work = plan_work(groups, self.options, self.run_s, self.pair_s)
        if not work.moves_at_most:
            self.emit("plan", "nothing to try: every group is as planned already", work.as_dict())
            return
        self.emit(
            "plan",
            f"{len(work.groups)} groups ({', '.join(work.groups)}), {work.moves_at_least} to "
            f"{work.moves_at_most} moves: their benchmarks take about {_minutes(work.low_s)} to "
            f"{_minutes(work.high_s)} at the baseline's {self.run_s:.1f} s per repetition and "
            f"{self.pair_s:.1f} s per ib_write_bw round, applies not counted",
            work.as_dict(),
        )

    def lossless_class(self, facts: Mapping[str, Mapping[str, Any]]) -> LosslessChoice:
        """Where the plan's lossless class comes from (``fabtune.tune.lossless``), journaled and
        printed with the switches that disagree and the inventory's class that LLDP contradicts."""
        choice = choose_lossless(facts, self.options.lossless, self.fabric)
        if self.fabric != "roce":
            return choice  # InfiniBand has no lossless class to choose (credit-based flow control)
        seq = self.journal.step(self.run_id, "phase", "lossless class", {})
        self.journal.finish_step(self.run_id, seq, "done", choice.to_json())
        self.emit("plan", f"lossless class: {choice.says}", {"source": choice.source})
        for line in choice.findings:
            self.emit("finding", line, {"source": "lldp"})
        for line in choice.warnings:
            self.emit("warning", line, {"source": "lldp"})
        return choice

    def baseline(self) -> list[CheckResult]:
        seq = self.journal.step(self.run_id, "phase", "baseline", {})
        self._take_counters()
        stats.load_in_background()  # the first decision's imports, while the benchmarks run
        try:  # the pair reference's rounds follow, in the same Ansible run where the backend can
            batch = self._measure(self.options.baseline_runs, pairs_after=REFERENCE_ROUNDS)
        except BenchmarkFailed as err:
            errors = [str(f) for f in err.failures]
            found = self._diagnose(err)
            checks = tuple(dataclasses.asdict(c) for c in found.results) if found else ()
            failure = BaselineFailedPayload(tuple(errors), checks)
            self.journal.finish_step(self.run_id, seq, "failed", failure.to_json())
            if found and found.at_fault:
                self._stop_at_fault(found, err)
            raise BenchmarkFailed(err.failures, f"baseline: {self._changed()}; ", log=err.log) from err
        failed = [r for r in batch.transport if r.verdict == "fail"]
        if failed:
            failure = BaselineFailedPayload(tuple(r.summary for r in failed))
            self.journal.finish_step(self.run_id, seq, "failed", failure.to_json())
            raise PreflightFailed(failed, self._changed())
        self.reference = list(batch.samples)
        self.pause_rate = batch.pause_frames / max(len(batch.samples), 1)
        self.pair_reference = self._reference_or_none([], "the baseline")
        slow, ports = self._slow("")
        floor = noise_floor(_ar(self.reference))
        measured = BaselinePayload(
            all_reduce=tuple(_ar(self.reference)),
            alltoall=tuple(_aa(self.reference)),
            noise_floor=floor,
            pause_frames=batch.pause_frames,
            counters=self._take_counters(),
            pairs=_round_payload(self.pair_reference),
            slow_pairs=tuple(slow),
            slow_ports=tuple(ports),
            checks=tuple(dataclasses.asdict(c) for c in batch.transport),
            policy=dataclasses.asdict(self.options.policy),
        )
        self.journal.finish_step(self.run_id, seq, "done", measured.to_json())
        self.emit(
            "baseline",
            f"all_reduce busbw {statistics.median(_ar(self.reference)):.1f} GB/s, noise {floor:.1%}",
            {"samples": _ar(self.reference)},
        )
        return list(batch.transport)

    def _stop_at_fault(self, found: Diagnosis, err: BenchmarkFailed) -> NoReturn:
        """A baseline failed through hosts' own faults: Repairable when a knob fixes every one of
        them, else PreflightFailed (exit 7), each naming the hosts with the evidence."""
        failed = [r for r in found.results if r.verdict == "fail"]
        fix = repair_for(found)
        if fix is not None:
            raise Repairable(failed, fix, self._changed()) from err
        raise PreflightFailed(failed, self._changed()) from err

    def _changed(self) -> str:
        """What the run changed before its baseline measured: nothing, or a kept repair."""
        kept = [f"{m.name} on {', '.join(m.hosts)}" for m in self.repairs if m.outcome == "kept"]
        return f"only the repair was kept ({'; '.join(kept)})" if kept else "nothing was changed"

    def baseline_or_repair(self) -> list[CheckResult]:
        """The baseline; when hosts' own faults failed it and a knob fixes them, the repair move
        first (once), then the baseline of the repaired rack, the one the tuning moves are judged on.

        Raises:
            PreflightFailed: a host no knob fixes, or a repair the benchmark still fails under
                (rolled back, verified), each host named with its evidence.
        """
        try:
            return self.baseline()
        except Repairable as need:
            record = self.repair(need.repair)
            self.repairs.append(record)
            if record.outcome != "kept":
                tried = f"{record.name} on {', '.join(record.hosts)} was tried and rolled back (verified)"
                changed = f"nothing was changed ({tried}: {record.reason})"
                raise PreflightFailed(need.results, changed) from need
        return self.baseline()

    def _slow(self, where: str) -> tuple[list[str], list[dict[str, Any]]]:
        """The slow pairs of the kept round and the ports that explain them, each announced."""
        ref = self.pair_reference
        slow, ports = (slow_pairs(ref), slow_ports(ref)) if ref else ([], [])
        for port in ports:
            line = str(port["summary"]).replace(" is slow:", f" is slow{where}:", 1)
            self.emit("pairs", line, {"port": port["port"]})
        for line in slow:
            self.emit("pairs", f"slow pair{where}: {line}", {"pair": line})
        return slow, ports

    def measure_pair_matrix(self, when: str) -> None:
        """ib_write_bw between host pairs (the report's heatmap), journaled as step ``pairs <when>``.

        It decides nothing: a round that cannot run is journaled as failed and the run goes on. In
        ``round`` mode the covering round the decisions last measured in this very state (over
        rdma_cm, with its ceilings and counters) is the matrix: the same pairs, not run twice.
        """
        if self.options.pair_matrix == "off":
            return
        seq = self.journal.step(self.run_id, "pairs", f"pairs {when}", {})
        ref = self.pair_reference
        if self.options.pair_matrix == "round" and ref is not None and ref.results:
            found = list(ref.results)
            matrix = PairsPayload(tuple(dataclasses.asdict(p) for p in found), "the decision round (rdma_cm)")
            self.journal.finish_step(self.run_id, seq, "done", matrix.to_json())
            self._say_matrix(when, found)
            return
        self.emit("phase", f"ib_write_bw pair matrix ({when})", {})
        try:
            found = self.backend.pair_matrix(self.options.pair_matrix == "full")
        except FabtuneError as err:
            self.journal.finish_step(self.run_id, seq, "failed", PairsPayload(error=str(err)).to_json())
            self.emit("preflight", f"the pair matrix ({when}) could not run, the run goes on: {err}", {})
            return
        matrix = PairsPayload(tuple(dataclasses.asdict(p) for p in found))
        self.journal.finish_step(self.run_id, seq, "done", matrix.to_json())
        self._say_matrix(when, found)

    def _say_matrix(self, when: str, found: Sequence[PairResult]) -> None:
        shares = [p.share_of_ceiling for p in found if p.share_of_ceiling is not None]
        lowest = f"; lowest pair {min(shares):.0%} of its ceiling" if shares else ""
        self.emit("phase", f"pair matrix ({when}): {len(found)} runs{lowest}", {})

    def _diagnose(self, err: BenchmarkFailed) -> Diagnosis | None:
        """The failed baseline judged by host (the transport check's code path); None if unreadable."""
        why = "; ".join(dict.fromkeys(f.summary for f in err.failures))[:300]
        try:
            found = self.backend.diagnose(err.log, why)
        except FabtuneError as problem:
            self.emit("preflight", f"the failure could not be diagnosed by host: {problem}", {})
            return None
        for result in found.results:
            if result.verdict != "pass":
                self.emit("preflight", f"{result.host}: {result.check}: {result.summary}", {
                    "evidence": result.evidence})
        return found

    # -- one move -------------------------------------------------------------------------

    def _intent(
        self, cand: Candidate, hosts: Sequence[str], desired: Mapping[str, HostState]
    ) -> MoveIntent:
        """What a move will do, journaled before it starts: per host it changes, the desired state
        and the NICs whose knobs change; the other hosts are left as they are."""
        return MoveIntent(
            group=cand.group,
            knobs=tuple(cand.change.knobs()),
            why=cand.why,
            hosts=tuple(hosts),
            nics={h: changed_nics(self.current[h], cand.change) for h in hosts},
            desired=trees_of(desired),
        )

    def _open_move(self, record: MoveRecord, intent: MoveIntent, why: str) -> int:
        """Journal a move's intent with the snapshot it starts from, and say it; its step's seq."""
        seq = self.journal.step(self.run_id, "move", record.name, intent.to_json())
        self._intents[seq] = intent
        self._take_counters()  # what the kept state's reference runs counted is not this move's
        self.journal.snapshot(self.run_id, seq, trees_of(self.current))
        hosts = record.hosts
        scope = "" if len(hosts) == len(self.current) else f" on {', '.join(hosts)}"
        self.emit("move", f"{record.name}{scope}: {why}", {"knobs": record.knobs, "hosts": hosts})
        return seq

    def _apply_armed(
        self, record: MoveRecord, desired: Mapping[str, HostState], measure_after: int = 0,
        pairs_after: int = 0,
    ) -> ansible.RunOutcome:
        """Apply a move on its hosts, each arming a revert to its snapshot first (commit-confirmed).
        ``measure_after``: the repetitions of the batch that follows, ``pairs_after``: the pair
        rounds the move will be judged on (the backend may run both with the apply)."""
        snapshots = {h: self.current[h] for h in record.hosts}
        roles = roles_of(record.knobs)
        self.held_until = self._deadline_from(self.clock())  # armed at the apply's start at the latest
        self.moving = True
        return self.backend.apply(desired, run_id=self.run_id, snapshots=snapshots, roles=roles,
                                  measure_after=measure_after, pairs_after=pairs_after)

    def _round_with_apply(self, pairs: bool) -> int:
        """1 where the move's ib_write_bw round can run right after its first batch, in the apply's
        Ansible run (one Ansible start fewer a move), else 0.

        The round measures the move's state, which no later batch changes, so it stands for the
        round the judgement asks for after its last batch; it is measured for nothing only where the
        collectives alone roll the move back (a loss, or the alltoall collapsing). Only where the
        revert deadline, which the apply's last play restarts, outlasts the batch and the round with
        the margin of ``_hold_for``: nothing extends it between them."""
        if not pairs or self.pair_reference is None or self.pair_s <= 0:
            return 0
        expected = self.run_s * self.options.policy.min_runs + self.pair_s
        fits = self.revert_deadline_s is None or hold_needed_s(expected) <= self.revert_deadline_s
        return 1 if fits else 0

    def try_move(self, cand: Candidate) -> MoveRecord:
        hosts = sorted(cand.hosts or self.current)
        desired = {h: self.current[h].with_change(cand.change) for h in hosts}
        intent = self._intent(cand, hosts, desired)
        record = MoveRecord(
            cand.group,
            cand.name,
            cand.change.knobs(),
            "",
            "",
            reference=statistics.median(_ar(self.reference)),
            hosts=hosts,
        )
        seq = self._open_move(record, intent, cand.why)
        pairs = touches_rdma_cm(cand.change, intent.nics)
        applied = self._apply_armed(record, desired, measure_after=self.options.policy.min_runs,
                                    pairs_after=self._round_with_apply(pairs))
        if not applied.ok:
            return self._undo(seq, record, apply_failure(applied), desired, lost=applied.unreachable_hosts)
        self.journal.finish_step(self.run_id, seq, "applied")
        try:
            judged = self.judge(held=hosts, pairs=pairs)
        except BenchmarkFailed as err:
            return self._failed_move(seq, record, err, desired)
        except _MoveGone as gone:
            self._revert_fired(seq, record, gone.hosts, gone.rebooted)
        record.all_reduce, record.alltoall = _ar(judged.samples), _aa(judged.samples)
        record.decision = MoveDecision(
            all_reduce=MetricDecision.of(judged.all_reduce),
            alltoall=MetricDecision.of(judged.alltoall),
            pause_rate=judged.pause_frames / max(len(judged.samples), 1),
            reference_pause_rate=self.pause_rate,
            pairs=judged.pairs.as_dict() if judged.pairs else None,
        )
        record.pause_frames = judged.pause_frames
        if judged.verdict == "keep":
            return self._keep(seq, record, judged, desired)
        return self._undo(seq, record, judged.reason, desired)

    def repair(self, fix: Repair) -> MoveRecord:
        """The repair move: armed and journaled like every move (with the evidence that calls for
        it), kept when the benchmark then runs on the whole rack, rolled back (verified) otherwise.
        It decides on one repetition and keeps no sample: the statistics start at the baseline after."""
        desired = {h: self.current[h].with_change(fix.change(h)) for h in fix.hosts}
        intent = MoveIntent(
            group=GROUP, knobs=(KNOB,), why=fix.why, hosts=tuple(fix.hosts),
            nics={h: [] for h in fix.hosts}, desired=trees_of(desired),
            evidence=tuple(dataclasses.asdict(r) for r in fix.evidence),
        )
        record = MoveRecord(GROUP, fix.name, [KNOB], "", "", hosts=fix.hosts)
        seq = self._open_move(record, intent, fix.why)
        applied = self._apply_armed(record, desired)
        if not applied.ok:
            return self._undo(seq, record, apply_failure(applied), desired, lost=applied.unreachable_hosts)
        self.journal.finish_step(self.run_id, seq, "applied")
        failed = self._runs_after_repair(record)
        if failed:
            return self._undo(seq, record, failed_reason(failed), desired)
        reason = kept_reason(len(self.current), statistics.median(record.all_reduce))
        self._confirm_kept(seq, record, reason)
        return record

    def _runs_after_repair(self, record: MoveRecord) -> str:
        """One repetition on the whole rack (retried once) with the transport preflight; why it still
        fails ('' when it ran: its samples are the record's)."""
        try:
            batch = self._measure(1)
        except BenchmarkFailed as err:
            return "; ".join(dict.fromkeys(f.summary for f in err.failures))[:500]
        failed = [f"{r.host}: {r.summary}" for r in batch.transport if r.verdict == "fail"]
        if failed:
            return "; ".join(failed)[:500]
        record.all_reduce, record.alltoall = _ar(batch.samples), _aa(batch.samples)
        record.decision = MoveDecision(repair="the benchmark failed before the move and runs after it")
        return ""

    def _deadline_from(self, armed_at: float) -> float:
        return 0.0 if self.revert_deadline_s is None else armed_at + self.revert_deadline_s

    def _hold_for(self, expected_s: float, hosts: Sequence[str]) -> None:
        """Extend the revert deadline on ``hosts`` unless it surely outlasts the next measurement,
        expected to take ``expected_s`` (held for 1.5x that, plus HOLD_MARGIN_S): on a rack whose
        batches are short against the deadline, most batches need no Ansible run for it."""
        need = hold_needed_s(expected_s)
        if self.clock() + need <= self.held_until:
            return
        start = self.clock()
        self._hold(hosts)
        self.held_until = self._deadline_from(start)

    def _hold(self, hosts: Sequence[str]) -> None:
        """Extend the revert deadline of the hosts holding the move: the controller is alive.

        Raises:
            _MoveGone: hosts had already reverted the move (their runs would measure the old state).
        """
        outcome = self.backend.extend(self.run_id, hosts=hosts)
        if reverted_hosts(outcome):
            raise _MoveGone(outcome)
        outcome.raise_for_failure("extending the revert deadline")

    def judge(self, *, held: Sequence[str] = (), pairs: bool = True) -> Judgement:
        """Measure the whole rack as it is now against the reference until the decision is clear.

        ``held``: the hosts holding a move whose revert is armed. Its deadline is extended before a
        batch after the first (the apply extended it at its end) that might outlast it: the deadline
        only has to outlast one batch, whatever the rack's size. No host reverted the move while it
        was measured is proven after the verdict: keep and roll back both confirm the run first
        thing, and a host that reverted it answers so (the move's runs are then discarded).
        ``pairs``: whether an ib_write_bw round (rdma_cm) can see the move at all.
        """
        policy = self.options.policy
        per_metric = dataclasses.replace(policy, alpha=policy.alpha / 2)  # either metric can earn a keep
        samples: list[Sample] = []
        pauses = 0
        while True:
            if held and samples:  # the apply's last play extended it just before the first batch
                self._hold_for(self.run_s * policy.batch, held)
            batch = self._measure(policy.batch if samples else policy.min_runs)
            samples += batch.samples
            pauses += batch.pause_frames
            ar = decide(_ar(self.reference), _ar(samples), per_metric)
            aa = decide(_aa(self.reference), _aa(samples), per_metric)
            self.emit(
                "measure",
                f"{len(samples)} runs: all_reduce x{ar.ratio:.3f}, alltoall x{aa.ratio:.3f}",
                {"all_reduce": _ar(samples), "alltoall": _aa(samples)},
            )
            if self._settled(ar, aa) or len(samples) >= policy.max_runs:
                decided, found = self._judge_pairs(ar, aa, held=held) if pairs else (None, ())
                verdict, reason = self._verdict((ar, aa), pauses / max(len(samples), 1), decided)
                return Judgement(verdict, reason, ar, aa, samples, pauses, decided, found)

    def _pair_reference(self, rounds: Sequence[PairRound]) -> PairRound | None:
        """The best of two rounds of the state as it is, pair by pair (``rounds``: those measured
        already): one slow run in a reference would make every later move look better against it."""
        found = list(rounds)
        while len(found) < REFERENCE_ROUNDS:
            more = self._pairs()
            if more is None:
                return None
            found.append(more)
        return best_of(found)

    def _reference_or_none(self, rounds: Sequence[PairRound], state: str) -> PairRound | None:
        """The pair reference of ``state``; where ib_write_bw cannot run there at all (the playbook
        failed: no move is held, so the rack's rdma_cm path or the tool is at fault), that is
        journaled and said, and the rest of the run decides on nccl-tests alone."""
        try:
            return self._pair_reference(rounds)
        except (PlaybookFailed, BenchmarkError) as err:
            why = str(err).splitlines()[0][:300] if str(err) else type(err).__name__
            unavailable = PairsUnavailablePayload(str(err)[:2000], state, "decisions on nccl-tests alone")
            name = "ib_write_bw (rdma_cm) failed"
            self.journal.step(self.run_id, "benchmark", name, unavailable.to_json(), state="failed")
            self.emit("pairs", f"ib_write_bw over rdma_cm could not run in {state} ({why}): later "
                      "moves are decided on nccl-tests alone", {"error": why})
            return None

    def _move_round(self) -> PairRound | None:
        """A round under the move; one that cannot run at all (the reference's could) counts as every
        pair broken: the move is what changed."""
        try:
            return self._pairs()
        except (PlaybookFailed, BenchmarkError) as err:
            why = str(err).splitlines()[0][:300] if str(err) else type(err).__name__
            ref = self.pair_reference or PairRound({}, {}, {})
            return PairRound(dict.fromkeys(ref.pairs, 0.0), dict.fromkeys(ref.incast, 0.0),
                             dict.fromkeys(ref.pairs, f"the round failed: {why}"))

    def _pairs(self) -> PairRound | None:
        """One ib_write_bw round over rdma_cm (pairs and incast); None where the rack has none."""
        start = self.clock()
        found = self.backend.pairs()
        if found is not None:  # a round measured with the batch before it took no time here
            self.pair_rounds += 1
            self.pair_s = max(self.pair_s, self.clock() - start, found.seconds)
            self._warn_late(found)
        return found

    def _judge_pairs(
        self, ar: Decision, aa: Decision, *, held: Sequence[str]
    ) -> tuple[PairDecision | None, tuple[PairRound, ...]]:
        """The move's ib_write_bw round against the kept state's; a verdict the pairs would decide
        (a broken pair, a clear gain) is measured once more and must hold on both rounds.

        Not measured when the collectives already roll the move back, or with no reference round.
        """
        if self.pair_reference is None or ar.worse or self._collapsed(aa):
            return None, ()
        if held:
            self._hold_for(self.pair_s, held)
        found = self._move_round()
        if found is None:
            return None, ()
        rounds: tuple[PairRound, ...] = (found,)
        decided = compare(self.pair_reference, found, self.options.pair_guard, self.options.pair_gain)
        if decided.verdict != "same":
            if held:
                self._hold_for(self.pair_s, held)
            again = self._move_round()
            if again is not None:
                options = self.options
                decided = confirm(decided, self.pair_reference, again, options.pair_guard, options.pair_gain)
                rounds = (found, again)
        self.emit("measure", decided.reason, {"pairs": decided.as_dict()})
        return decided, rounds

    def _warn_late(self, measured: PairRound) -> None:
        """Say where a round's clients started after its common start (the round may read better
        than the fabric: their flows overlapped the others for part of the run only)."""
        note = late_clients(measured.late, PAIR_OPTIONS.duration_s)
        if note is not None:
            self.emit("warning", f"ib_write_bw round: {note}", {"source": "pairs"})

    def _collapsed(self, aa: Decision) -> bool:
        """The guard metric lost more than ``guard_loss``, with confidence (not a mere dip)."""
        return aa.worse and aa.ci_high < 1 - self.options.guard_loss

    def _settled(self, ar: Decision, aa: Decision) -> bool:
        """A loss on the primary metric, a collapse of the guard, a clear gain, or no gain on both."""
        if ar.worse or self._collapsed(aa) or "keep" in (ar.verdict, aa.verdict):
            return True
        return ar.verdict != "continue" and aa.verdict != "continue"

    def _verdict(
        self, decision: tuple[Decision, Decision], pause_rate: float, pairs: PairDecision | None = None
    ) -> tuple[str, str]:
        """keep or rollback, and the reason naming the metric that decided."""
        ar, aa = decision
        vetoed = self._guard(ar, aa, pause_rate, pairs)
        if vetoed:
            return "rollback", vetoed
        alone = _undecided("all_reduce", ar)
        if ar.verdict == "keep":
            return "keep", f"all_reduce {ar.reason}"
        if aa.verdict == "keep":
            return "keep", f"alltoall {aa.reason}; {alone}"
        if pairs is not None and pairs.verdict == "better":
            return "keep", f"{pairs.reason}; {alone}"
        return "rollback", f"all_reduce {ar.reason}"

    def _guard(self, ar: Decision, aa: Decision, pause_rate: float, pairs: PairDecision | None) -> str:
        """Why the move must be rolled back whatever it gains ('' when nothing vetoes it)."""
        if ar.worse:
            return f"all_reduce {ar.reason}"
        if self._collapsed(aa):
            return f"guard: alltoall (incast) {aa.reason}"
        if pairs is not None and pairs.verdict == "worse":
            return f"guard: {pairs.reason}"
        # The kept state's pause rate: a flood an earlier keep caused (PFC on) is the reference now.
        flood = pause_rate > max(self.options.pause_guard * self.pause_rate, 1000.0)
        incast_gain = aa.verdict == "keep" or (pairs is not None and pairs.verdict == "better")
        if flood and not incast_gain:
            return (
                f"guard: pause frames {pause_rate:.0f} per run against {self.pause_rate:.0f} in the kept "
                f"state (over x{self.options.pause_guard:g}) with no incast gain"
            )
        return ""

    def _keep(
        self, seq: int, record: MoveRecord, judged: Judgement, desired: Mapping[str, HostState]
    ) -> MoveRecord:
        missing, top_up = self._top_up(judged)
        self._confirm_kept(seq, record, judged.reason, measure_after=missing, pairs_after=top_up)
        self._refresh_reference(judged, missing, top_up)
        return record

    def _confirm_kept(
        self, seq: int, record: MoveRecord, reason: str, *, measure_after: int = 0, pairs_after: int = 0
    ) -> None:
        """Keep a move: cancel its hosts' reverts, read the state back, journal and say why.
        ``measure_after``, ``pairs_after``: the measurement that follows (the backend may run it
        with the read)."""
        if self.backend.confirms_aside(record.hosts):
            read = self._read_back_beside_confirm(seq, record, measure_after, pairs_after)
        else:
            self._confirmed(seq, record, self.backend.confirm(self.run_id, hosts=record.hosts))
            read = self.backend.facts(hosts=record.hosts, measure_after=measure_after,
                                      pairs_after=pairs_after)
        self.facts = {**self.facts, **read}
        self.current = {**self.current, **{h: snapshot_of(f) for h, f in read.items()}}
        record.outcome, record.reason = "kept", reason
        self.journal.finish_step(self.run_id, seq, "kept", self._outcome(seq, record).to_json())
        self.emit("decision", f"kept {record.name}: {reason}", {"outcome": "kept"})

    def _read_back_beside_confirm(
        self, seq: int, record: MoveRecord, measure_after: int, pairs_after: int
    ) -> dict[str, dict[str, Any]]:
        """The kept move's read back (and the measurement the backend runs with it) while its confirm
        runs on another thread: both only read or cancel, neither changes the fabric. The confirm's
        outcome is judged first, whatever the read's: a host that had reverted the move discards
        its runs even where the read failed."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fabtune-confirm") as aside:
            confirming = aside.submit(self.backend.confirm, self.run_id, hosts=record.hosts)
            try:
                read = self.backend.facts(hosts=record.hosts, measure_after=measure_after,
                                          pairs_after=pairs_after)
            except BaseException:
                self._confirmed(seq, record, confirming.result())
                raise
            self._confirmed(seq, record, confirming.result())
        return read

    def _confirmed(self, seq: int, record: MoveRecord, confirmed: ansible.RunOutcome) -> None:
        """A kept move's confirm outcome: a host that had reverted it discards its runs (raises
        RevertFired), a failure raises; else the move is no longer held."""
        fired = reverted_hosts(confirmed)
        if fired:
            self._revert_fired(seq, record, fired, rebooted_hosts(confirmed))
        confirmed.raise_for_failure("confirming the move")
        self.moving = False

    def _revert_fired(
        self, seq: int, record: MoveRecord, hosts: list[str], rebooted: Sequence[str] = ()
    ) -> NoReturn:
        """The move was measured, at least in part, on hosts that had reverted it: discard, undo, stop."""
        record.all_reduce, record.alltoall, record.decision = [], [], MoveDecision()  # its runs are discarded
        # the move's other hosts may still hold it
        restore_and_verify(self.backend, self.current, hosts=record.hosts)
        if rebooted and set(rebooted) == set(hosts):
            reason = (
                f"{', '.join(hosts)} rebooted before the move was decided and reverted it at boot: its "
                "runs are discarded"
            )
        else:
            reason = (
                f"the host-side revert fired on {', '.join(hosts)} before the move was decided: its runs "
                f"are discarded; raise fabtune_tune.revert_deadline_s above one batch of measurements"
            )
        record.outcome, record.reason = "rolled_back", reason
        outcome = dataclasses.replace(
            self._outcome(seq, record), verified=True, reverted_by_host=tuple(hosts), rebooted=tuple(rebooted)
        )
        self.journal.finish_step(self.run_id, seq, "rolled_back", outcome.to_json())
        self.emit("decision", f"rolled back {record.name}: {reason} (verified)", {"outcome": "rolled_back"})
        raise RevertFired(f"{record.name}: {reason}")

    def _failed_move(
        self, seq: int, record: MoveRecord, err: BenchmarkFailed, desired: Mapping[str, HostState]
    ) -> MoveRecord:
        """Roll back a move the benchmark failed under, then require the restored rack to measure."""
        why = "; ".join(dict.fromkeys(f.summary for f in err.failures))[:500]
        undone = self._undo(seq, record, f"benchmark failed, and again when retried: {why}", desired)
        try:
            self._measure(1)
        except BenchmarkFailed as again:
            raise BenchmarkFailed(again.failures, f"after rolling back {record.name} (verified): ") from again
        return undone

    def _top_up(self, judged: Judgement) -> tuple[int, int]:
        """The repetitions the kept state's reference lacks (up to ``baseline_runs``), and the pair
        rounds measured right after them (the pair reference's, up to two rounds); (0, 0): none."""
        missing = max(0, self.options.baseline_runs - len(judged.samples))
        if not missing:
            return 0, 0
        return missing, max(0, REFERENCE_ROUNDS - len(judged.pair_rounds)) if judged.pair_rounds else 0

    def _refresh_reference(self, judged: Judgement, missing: int, top_up: int) -> None:
        """The kept state becomes every guard's reference: its samples (``missing`` more measured,
        then ``top_up`` pair rounds) and its pause rate, so a later move is judged on what it
        changes itself."""
        samples, pauses = list(judged.samples), judged.pause_frames
        if missing > 0:  # the pair reference's top-up follows, in the same run where it can
            more = self._measure(missing, pairs_after=top_up)
            samples += more.samples
            pauses += more.pause_frames
        self.reference = samples
        self.pause_rate = pauses / max(len(samples), 1)
        if judged.pair_rounds:  # topped up to two rounds, like the samples
            self.pair_reference = self._reference_or_none(judged.pair_rounds, "the kept state")

    def _undo(
        self, seq: int, record: MoveRecord, reason: str, desired: Mapping[str, HostState],
        *, lost: Sequence[str] = (),
    ) -> MoveRecord:
        """Restore the move's hosts (verified), confirm the run there, journal and say why.
        ``lost``: hosts the move's apply could not reach (they are not tried again)."""
        restore_and_verify(self.backend, self.current, roles_of(record.knobs), hosts=record.hosts, lost=lost)
        confirmed = self.backend.confirm(self.run_id, hosts=record.hosts)
        fired = reverted_hosts(confirmed)
        if fired:
            self._revert_fired(seq, record, fired, rebooted_hosts(confirmed))
        self.moving = False
        record.outcome, record.reason = "rolled_back", reason
        outcome = dataclasses.replace(self._outcome(seq, record), verified=True)
        self.journal.finish_step(self.run_id, seq, "rolled_back", outcome.to_json())
        self.emit("decision", f"rolled back {record.name}: {reason} (verified)", {"outcome": "rolled_back"})
        return record

    def _outcome(self, seq: int, record: MoveRecord) -> MoveOutcome:
        """A move's outcome payload: its intent, why, every sample, the decision's numbers, the pause
        frames and counters (the record's outcome and reason are set)."""
        return MoveOutcome(
            intent=self._intents.pop(seq, None),
            reason=record.reason,
            all_reduce=tuple(record.all_reduce),
            alltoall=tuple(record.alltoall),
            decision=record.decision,
            pause_frames=record.pause_frames,
            counters=self._take_counters(),
        )

    # -- the whole run --------------------------------------------------------------------

    def run(self, done: Sequence[str] = ()) -> TuneResult:
        self.read_facts()
        transport = self.baseline_or_repair()
        facts = self.facts  # as a kept repair left them: the repaired rack is the one planned
        baseline = _ar(self.reference)
        self.measure_pair_matrix("baseline")
        moves: list[MoveRecord] = list(self.repairs)
        choice = self.lossless_class(facts)
        groups = planned_moves(facts, self.fabric, choice, self.options)
        self._say_plan(groups)
        for group in groups:
            for cand in group:
                if cand.name in done:
                    continue
                record = self.try_move(cand)
                moves.append(record)
                if (record.outcome == "kept") != (cand.group in LADDERS):
                    break  # an alternative was kept, or a ladder's rung did not improve
        planned = [[c.name for c in group] for group in groups]
        self.measure_pair_matrix("final")
        slow, ports = self._slow(" in the tuned state")
        seq = self.journal.step(self.run_id, "phase", "final", {})
        final = FinalPayload(
            state=trees_of(self.current),
            all_reduce=tuple(_ar(self.reference)),
            alltoall=tuple(_aa(self.reference)),
            runs=self.runs,
            pair_rounds=self.pair_rounds,
            planned=tuple(tuple(names) for names in planned),
            slow_pairs=tuple(slow),
            slow_ports=tuple(ports),
            planned_hosts={c.name: list(c.hosts) for group in groups for c in group},
        )
        self.journal.finish_step(self.run_id, seq, "done", final.to_json())
        return TuneResult(
            self.run_id,
            baseline,
            _ar(self.reference),
            noise_floor(baseline),
            moves,
            self.current,
            transport,
            self.runs,
            planned,
            slow,
            ports,
        )


@dataclass(frozen=True)
class PlanWork:
    """How much benchmarking a plan needs: its groups, the fewest and most moves, and seconds."""

    groups: tuple[str, ...]
    moves_at_least: int
    moves_at_most: int
    low_s: float  # one move per group (its cheapest), at the fewest repetitions, no pair round or top-up
    high_s: float  # every candidate to the most repetitions, both pair rounds, each kept and topped up

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _move_seconds(cand: Candidate, options: TuneOptions, run_s: float, pair_s: float) -> tuple[float, float]:
    """One move's benchmark seconds, fewest and most: its repetitions, its ib_write_bw rounds where
    they can see it, and at most the kept state's top-up (repetitions and a second pair round)."""
    policy = options.policy
    rounds = pair_s if touches_rdma_cm(cand.change) else 0.0
    low = policy.min_runs * run_s  # rolled back on nccl-tests alone
    top_up = max(0, options.baseline_runs - policy.min_runs) * run_s + rounds
    high = policy.max_runs * run_s + REFERENCE_ROUNDS * rounds + top_up
    return low, high


def plan_work(groups: Sequence[Sequence[Candidate]], options: TuneOptions, run_s: float,
              pair_s: float) -> PlanWork:
    """The benchmark work of ``groups`` at ``run_s`` per repetition and ``pair_s`` per pair round."""
    tried = [g for g in groups if g]
    costs = [[_move_seconds(c, options, run_s, pair_s) for c in group] for group in tried]
    return PlanWork(
        groups=tuple(group[0].group for group in tried),
        moves_at_least=len(tried),
        moves_at_most=sum(len(g) for g in tried),
        low_s=sum(min(low for low, _ in group) for group in costs),
        high_s=sum(high for group in costs for _, high in group),
    )


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def planned_moves(
    facts: Mapping[str, Mapping[str, Any]], fabric: str, choice: LosslessChoice, options: TuneOptions
) -> list[list[Candidate]]:
    """The candidate moves per group that a run plans from ``facts`` (the rack as its baseline
    measured it): the one planner of a tuning run and of ``fabtune tune --plan``."""
    groups = host_groups(facts, fabric, choice.lossless, options.sm_flavor, choice.says)
    return plan_rack(groups, options.skip_groups)


def _ports(facts: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each host's RDMA ports as the report needs them (line rate, link layer)."""
    keep = ("dev", "port", "netdev", "link_layer", "rate")
    return {
        host: [
            {k: p.get(k) for k in keep if k in p}
            for p in ((fact.get("hardware") or {}).get("ports") or [])
            if isinstance(p, Mapping)
        ]
        for host, fact in sorted(facts.items())
    }


def apply_failure(applied: ansible.RunOutcome) -> str:
    """Why a move's apply failed, by host (the rollback's reason)."""
    reason = "; ".join(f"{t.host}: {t.result.get('msg', 'failed')}" for t in applied.failures())
    return f"apply failed: {reason[:500]}"


def touches_rdma_cm(change: Change, changed_nics: Mapping[str, Sequence[str]] | None = None) -> bool:
    """Whether ib_write_bw over rdma_cm can see ``change``: NIC knobs (QoS, ToS, MTU, ECN) and the
    subnet manager's routing shape its traffic; NCCL's environment (nccl.conf) is read by NCCL alone,
    not by perftest, so a move of NCCL keys only gets no pair round. With ``changed_nics`` (per host,
    the NICs the move changes), NIC knobs count only where a NIC changes: a lossless move on NICs that
    already run the class changes NCCL's side alone, and a pair round then would judge the move on
    differences it did not cause (an ECMP collision that moved between rounds)."""
    if change.sm:
        return True
    return bool(change.nic) and (changed_nics is None or any(changed_nics.values()))


def _round_payload(found: PairRound | None) -> dict[str, Any] | None:
    """A pair round as the journal keeps it."""
    if found is None:
        return None
    return {"pairs": dict(found.pairs), "incast": dict(found.incast), "errors": dict(found.errors)}


def _restore_reachable(
    backend: Backend,
    restore: Mapping[str, HostState],
    failed: ansible.RunOutcome,
    roles: Sequence[str] | None,
) -> None:
    """After a restore that stopped because hosts could not be reached, restore the others now.

    The apply validates on every host before it changes any (its first play stops them all), so one
    lost host would leave the reachable ones holding the move until their own revert deadline, and
    one whose revert fired in the middle of the move's apply holds what the apply did after it
    (it is no longer armed). The lost hosts revert themselves; the caller still fails on them.
    """
    lost = set(failed.unreachable_hosts)
    reachable = {h: s for h, s in restore.items() if h not in lost}
    if lost and reachable:
        backend.apply(reachable, exact=True, roles=roles)


def restore_and_verify(
    backend: Backend,
    snapshots: Mapping[str, HostState],
    roles: Sequence[str] | None = None,
    *,
    hosts: Sequence[str] | None = None,
    lost: Sequence[str] = (),
) -> None:
    """Apply each host's snapshot exactly (couplings off), read the state back, require equality.

    ``roles``: only the roles of the knobs that moved run; ``hosts``: only the hosts a move changed
    are restored (None: every host of ``snapshots``). Every host's whole state is verified all the same.
    ``lost``: hosts the move's own apply could not reach (Ansible had already retried the
    connection): they are not tried again, a second wait on their SSH for nothing; the others are
    restored, and the rollback fails naming them (each reverts by itself at its armed deadline).

    Raises:
        RollbackFailed: naming every knob that did not come back.
        PlaybookFailed: a host could not be restored (unreachable, or a failed task), or was lost.
    """
    restore = snapshots if hosts is None else {h: snapshots[h] for h in hosts}
    reachable = {h: s for h, s in restore.items() if h not in lost}
    if reachable:
        outcome = backend.apply(reachable, exact=True, roles=roles, facts_after=True)
        if not outcome.ok:
            _restore_reachable(backend, reachable, outcome, roles)
        outcome.raise_for_failure("rollback")
    gone = sorted(set(lost) & set(restore))
    if gone:
        raise PlaybookFailed(
            f"rollback failed: {', '.join(gone)} could not be reached by the move's apply and "
            "is not tried again: its armed revert puts it back by itself at the deadline"
            + (f"; {', '.join(sorted(reachable))} restored" if reachable else "")
        )
    found = {h: snapshot_of(f) for h, f in backend.facts().items()}
    problems = [f"{h}: {d}" for h, snap in snapshots.items()
                for d in snap.differences(found.get(h, HostState()))]
    if problems:
        raise RollbackFailed(f"rollback did not restore: {'; '.join(problems[:10])}")
