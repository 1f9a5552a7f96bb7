"""The tuning loop's perftest metric: ib_write_bw over rdma_cm, one pair round and one incast stage.

nccl-tests set their own traffic class (``NCCL_IB_TC``) and GID (``NCCL_IB_GID_INDEX``); storage,
MPI and perftest traffic connect through rdma_cm and take the port's rdma_cm defaults (the RoCE
ToS and mode). A fault there is invisible to the collectives, and a single slow pair is averaged
away in them. Each decision therefore also measures, with ``ib_write_bw -R``:

- one round of the pair schedule that puts every host in a pair (``covering_rounds``), NIC i to
  NIC i on every rail at once: one number per pair;
- one incast stage per rail (up to ``INCAST_FAN_IN`` clients into the first host at once), which
  loads the class the rdma_cm ToS selects: a lossy class collapses under it, a lossless one pauses.
  It needs 3 hosts; a 2-host rack has no incast stage.

A round is compared pair by pair with the kept state's round (the same pairs, the same ports):
the median pair, the worst pair and each incast stage, as ratios. One round per decision suffices
because the thresholds (``pair_guard``, ``pair_gain``: 10 %) are many times ib_write_bw's
run-to-run noise (about 1 %); a verdict the pairs decide is measured once more and must hold on
both rounds (an ECMP collision in one round is not a broken pair).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.ansible import Part, RunOutcome
from fabtune.perf import pairs, rdmacounters
from fabtune.perf.argv import PerftestOptions
from fabtune.perf.fabric import HostView
from fabtune.perf.pairs import PairResult
from fabtune.perf.rdmacounters import Reads
from fabtune.perf.schedule import Pair, covering_rounds, incast_stage, rail_pairs

INCAST_FAN_IN = 4  # clients per incast stage (fewer on a smaller rack): enough to overload a port
OPTIONS = PerftestOptions(duration_s=2, rdma_cm=True)


@dataclass(frozen=True)
class PairRound:
    """One measurement: each pair's and each incast stage's Gb/s (None: failed, with its error), and
    the pair runs as measured (with their ceilings and counters: the report's pair matrix)."""

    pairs: Mapping[str, float | None]
    incast: Mapping[str, float | None] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    results: tuple[PairResult, ...] = ()
    seconds: float = field(default=0.0, compare=False)  # its runs' time, start-up not counted
    # each client host's seconds after its run's common start, the incast stage's included
    late: Mapping[str, float] = field(default_factory=dict, compare=False)
    # each client host's wait for its run's common start (the least of its runs): the lead it had spare
    waited: Mapping[str, float] = field(default_factory=dict, compare=False)

    def median(self) -> float:
        """The median pair's Gb/s (a failed pair counts 0)."""
        values = [v or 0.0 for v in self.pairs.values()]
        return statistics.median(values) if values else 0.0


@dataclass(frozen=True)
class PairDecision:
    """A round against the reference: ``worse`` (a pair or an incast stage broke), ``better`` (the
    median pair or an incast stage gained, nothing broke) or ``same``; and why, with the numbers."""

    verdict: str
    reason: str
    median_ratio: float = 1.0
    worst: str = ""
    worst_ratio: float = 1.0
    incast_ratio: float = 1.0
    metric: str = ""  # what decided: "pair <label>", "incast <label>", "median pair"
    broken: tuple[str, ...] = ()  # every pair and stage over the guard ("pair <label>", "incast <label>")

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def best_of(rounds: Sequence[PairRound]) -> PairRound:
    """Each pair's and stage's best of ``rounds`` (a failure only where every round failed); the
    pair runs as measured are the last round's."""

    def best(values: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
        labels = dict.fromkeys(k for v in values for k in v)
        return {k: max([x for v in values if (x := v.get(k)) is not None], default=None) for k in labels}

    found = best([r.pairs for r in rounds])
    errors = {k: e for r in rounds for k, e in r.errors.items() if found.get(k) is None}
    return PairRound(found, best([r.incast for r in rounds]), errors, rounds[-1].results if rounds else ())


def _label(pair: Pair, views: Mapping[str, HostView]) -> str:
    return f"{pair.client}->{pair.server} {views[pair.server].rails[pair.rail].device}"


def _schedule(views: Mapping[str, HostView]) -> tuple[list[list[Pair]], list[Pair]]:
    """The covering pair rounds on every rail, and the incast stages on every rail (one run)."""
    hosts = sorted(views)
    if len(hosts) < 2:
        return [], []
    rails = min(len(v.rails) for v in views.values())
    rounds = rail_pairs(covering_rounds(hosts), rails)
    fan_in = min(INCAST_FAN_IN, len(hosts) - 1)
    stages: list[Pair] = []
    if fan_in >= 2:
        for rail in range(rails):
            stages += incast_stage(hosts, fan_in, rail, base_port=18515 + rail * fan_in)
    return rounds, stages


def plan(
    views: Mapping[str, HostView], deadline_s: int | None, lead_extra_s: float = 0.0
) -> list[pairs.PlannedRound]:
    """A pair round's playbook runs: the covering pair rounds, then the incast stages (one run);
    ``lead_extra_s``: more time for Ansible to reach the clients' hosts (``pairs.more_lead``)."""
    rounds, stages = _schedule(views)
    planned = [pairs.plan_round(rnd, views, OPTIONS, deadline_s, lead_extra_s=lead_extra_s) for rnd in rounds]
    if stages:
        planned.append(pairs.plan_round(stages, views, OPTIONS, deadline_s, lead_extra_s=lead_extra_s))
    return planned


def parts(planned: Sequence[pairs.PlannedRound], before: Reads | None) -> list[Part]:
    """The runs of ``planned`` as parts of one Ansible run: each reads no counters before where the
    read before it (``before``, then the run before's read after) holds its ports. A run's read after
    on a host follows all of that run's traffic on the host's ports (its own clients' and servers'),
    and the next run starts once the run before ended on every host."""
    found = []
    held = before
    for run in planned:
        found.append(Part(pairs.ROUND_PLAYBOOK, run.variables(not rdmacounters.covers(held, run.reads))))
        held = rdmacounters.will_read(run.reads)
    return found


def assemble(
    views: Mapping[str, HostView],
    planned: Sequence[pairs.PlannedRound],
    ran: Sequence[tuple[Part, RunOutcome]],
    before: Reads | None,
) -> tuple[PairRound, Reads]:
    """The pair round from its runs (``parts`` with their outcomes, in order), and the counters
    read after it; ``before``: what the first part was planned with.

    Raises:
        PlaybookFailed: when a run could not run (unreachable host, failed task).
    """
    rounds, stages = _schedule(views)
    done: list[list[PairResult]] = []
    last = before
    for run, (part, outcome) in zip(planned, ran, strict=True):
        held = None if pairs.reads_before(part.variables) else last  # as the part was planned
        results, last = pairs.round_results(outcome, run, views, held)
        done.append(results)
    found: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    measured: list[PairResult] = []
    for rnd, results in zip(rounds, done, strict=False):
        for pair, res in zip(rnd, results, strict=True):
            measured.append(res)
            found[_label(pair, views)] = res.gbps
            if res.error:
                errors[_label(pair, views)] = res.error
    incast: dict[str, float | None] = {}
    if stages:
        for rail in sorted({p.rail for p in stages}):
            mine = [(p, r) for p, r in zip(stages, done[-1], strict=True) if p.rail == rail]
            server = mine[0][0]
            label = f"{len(mine)}:1 into {server.server} {views[server.server].rails[rail].device}"
            incast[label] = sum(r.gbps or 0.0 for _, r in mine)
            for p, r in mine:
                if r.error:
                    errors[f"{label}: {p.client}"] = r.error
    seconds = sum(outcome.seconds for _, outcome in ran)
    ran_all = [r for results in done for r in results]  # the incast stage's clients too
    return (PairRound(found, incast, errors, tuple(measured), seconds, pairs.late_hosts(ran_all),
                      pairs.waited_hosts(ran_all)), last or {})


def measure(
    inventory: Path, views: Mapping[str, HostView], deadline_s: int | None, before: Reads | None = None,
    *, lead_extra_s: float = 0.0,
) -> tuple[PairRound, Reads]:
    """One covering pair round and one incast stage (every rail), with ib_write_bw over rdma_cm, in
    one Ansible run; and the counters read after it. ``before``: the counters as read since the
    last change and the last traffic (the previous benchmark's read after): the first run reads
    none before where they hold its ports; each later run takes the one before's read after.

    Raises:
        PlaybookFailed: when a round could not run (unreachable host, failed task).
    """
    planned = plan(views, deadline_s, lead_extra_s)
    if not planned:
        return PairRound({}), before or {}
    runs = parts(planned, before)
    outcomes = ansible.run_playbooks(runs, inventory, timeout_s=sum(run.timeout_s for run in planned))
    return assemble(views, planned, list(zip(runs, outcomes, strict=True)), before)


def _ratio(new: float | None, old: float | None) -> float | None:
    if not old:
        return None  # nothing to compare with (the reference pair failed)
    return (new or 0.0) / old


def _ratios(reference: Mapping[str, float | None], new: Mapping[str, float | None]) -> dict[str, float]:
    return {k: r for k, v in new.items() if (r := _ratio(v, reference.get(k))) is not None}


def _broke(metric: str, reference: PairRound, new: PairRound, guard: float) -> str:
    """Why ``metric`` ("pair <label>" or "incast <label>") counts as broken, with both Gb/s."""
    kind, _, label = metric.partition(" ")
    old, now = (reference.pairs, new.pairs) if kind == "pair" else (reference.incast, new.incast)
    why = new.errors.get(label)
    detail = f": {why}" if why else ""
    ratio = _ratio(now.get(label), old.get(label)) or 0.0
    both = f"{_gbps(old.get(label))} -> {_gbps(now.get(label))} Gb/s{detail}"
    return f"ib_write_bw (rdma_cm) {metric} x{ratio:.2f} ({both}), over the {guard:.0%} guard"


def compare(reference: PairRound, new: PairRound, guard: float, gain: float) -> PairDecision:
    """``new`` against ``reference``, pair by pair (the pairs both measured) and stage by stage.

    ``worse``: a pair or an incast stage lost more than ``guard`` (the worst named); ``better``: an
    incast stage or the median pair gained more than ``gain``, and nothing lost more than ``guard``.
    """
    ratios, stages = _ratios(reference.pairs, new.pairs), _ratios(reference.incast, new.incast)
    if not ratios and not stages:
        return PairDecision("same", "ib_write_bw: no pair measured in both states")
    median = statistics.median(ratios.values()) if ratios else 1.0
    worst = min(ratios, key=lambda k: ratios[k]) if ratios else ""
    incast = min(stages.values(), default=1.0)
    numbers = PairDecision("same", "", median, worst, ratios[worst] if worst else 1.0, incast)
    under = {f"pair {k}": r for k, r in ratios.items()} | {f"incast {k}": r for k, r in stages.items()}
    broken = tuple(sorted((m for m, r in under.items() if r < 1 - guard), key=lambda m: under[m]))
    if broken:
        reason = f"{_broke(broken[0], reference, new, guard)}; median pair x{median:.3f}"
        return dataclasses.replace(numbers, verdict="worse", reason=reason, metric=broken[0], broken=broken)
    revived = _revived(reference, new)
    if revived:
        return dataclasses.replace(numbers, verdict="better", metric=revived[0], reason=(
            f"ib_write_bw (rdma_cm) {revived[0]} failed before and runs now "
            f"({_gbps(_value(new, revived[0]))} Gb/s); {len(revived)} revived"))
    high_stage = max(stages, key=lambda k: stages[k]) if stages else ""
    tail = f"median pair x{median:.3f}, worst pair {worst or '-'} x{numbers.worst_ratio:.3f}"
    if high_stage and stages[high_stage] > 1 + gain:
        return dataclasses.replace(numbers, verdict="better", metric=f"incast {high_stage}", reason=(
            f"ib_write_bw (rdma_cm) incast {high_stage} x{stages[high_stage]:.2f} "
            f"({_gbps(reference.incast[high_stage])} -> {_gbps(new.incast.get(high_stage))} Gb/s); {tail}"))
    if ratios and median > 1 + gain:
        return dataclasses.replace(numbers, verdict="better", metric="median pair", reason=(
            f"ib_write_bw (rdma_cm) median pair x{median:.2f} ({_gbps(reference.median())} -> "
            f"{_gbps(new.median())} Gb/s); {tail}"))
    same = f"ib_write_bw (rdma_cm) {tail}, incast x{incast:.3f}"
    return dataclasses.replace(numbers, verdict="same", reason=same)


def confirm(
    first: PairDecision, reference: PairRound, again: PairRound, guard: float, gain: float
) -> PairDecision:
    """What a second round ``again`` leaves of ``first``: a pair or stage broken on both rounds (the
    worst of them on the second named), a gain seen on both; else ``same``, with both reasons.

    A gain the second round shows again stands even where that round broke a pair the first did
    not: broken on one round only is no broken pair (an ECMP collision, a slow run), as for ``worse``.
    """
    second = compare(reference, again, guard, gain)
    if first.verdict == "worse":
        both = [m for m in second.broken if m in first.broken]
        if both:
            median = f"median pair x{second.median_ratio:.3f}"
            reason = f"{_broke(both[0], reference, again, guard)} on two rounds; {median}"
            return dataclasses.replace(second, reason=reason, metric=both[0], broken=tuple(both))
    elif first.verdict == second.verdict == "better":
        return second
    elif first.verdict == "better" and _gain_held(first.metric, reference, again, gain):
        once = f"{second.reason}, on that round only" if second.verdict == "worse" else second.reason
        return dataclasses.replace(first, reason=f"{first.reason}; held on a second round ({once})")
    return PairDecision("same", f"{first.reason}, not seen again on a second round ({second.reason})")


def _value(found: PairRound, metric: str) -> float | None:
    """The Gb/s of ``metric`` ("pair <label>" or "incast <label>") in ``found``."""
    kind, _, label = metric.partition(" ")
    return (found.pairs if kind == "pair" else found.incast).get(label)


def _revived(reference: PairRound, new: PairRound) -> list[str]:
    """Pairs and incast stages that failed (or moved nothing) in ``reference`` and run in ``new``."""
    both = (("pair", reference.pairs, new.pairs), ("incast", reference.incast, new.incast))
    return [f"{kind} {label}" for kind, old, now in both
            for label in sorted(now) if label in old and not old[label] and now[label]]


def _gain_held(metric: str, reference: PairRound, again: PairRound, gain: float) -> bool:
    """Whether ``again`` shows the gain that ``metric`` named (a revived pair or stage, an incast
    stage or the median pair over ``gain``)."""
    if metric == "median pair":
        ratios = _ratios(reference.pairs, again.pairs)
        return bool(ratios) and statistics.median(ratios.values()) > 1 + gain
    old, now = _value(reference, metric), _value(again, metric)
    if not old:
        return bool(now)
    return (now or 0.0) / old > 1 + gain


def _slow(found: PairRound, share: float) -> list[pairs.SlowPair]:
    """Pairs under ``share`` of the median of the other pairs: each named by both ends (host and NIC,
    from the round's pair runs; else by its label), with its Gb/s, the ratio and why."""
    runs = {f"{r.client}->{r.server} {r.device}": r for r in found.results}
    ceilings = [r.ceiling_gbps for r in found.results]
    slow = []
    for label, median in pairs.slow_among(found.pairs, share):
        run = runs.get(label)
        others = [c for r, c in zip(found.results, ceilings, strict=True) if r is not run]
        slow.append(pairs.SlowPair(
            run.ends if run is not None else label, found.pairs[label], median, found.errors.get(label),
            run.ceiling_gbps if run is not None else 0.0, statistics.median(others) if others else 0.0,
        ))
    return slow


def slow_pairs(found: PairRound, share: float = pairs.SLOW_SHARE) -> list[str]:
    """The slow pairs of ``found``, each described (``SlowPair.describe``)."""
    return [p.describe() for p in _slow(found, share)]


def slow_ports(found: PairRound, share: float = pairs.SLOW_SHARE) -> list[dict[str, Any]]:
    """The ports that explain slow pairs of ``found`` (``pairs.slow_ports``), as JSON: the port, its
    host and NIC, its summary and its slow pairs' lines."""
    return [p.to_json() for p in pairs.slow_ports(found.results, _slow(found, share), share)]


def _gbps(value: float | None) -> str:
    return "failed" if value is None else f"{value:.1f}"
