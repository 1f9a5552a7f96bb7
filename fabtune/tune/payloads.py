"""The tuning run's journal step payloads, typed: what ``tune/loop.py`` and ``tune/run.py`` write and
``report/build.py`` reads.

Each payload is a frozen dataclass with ``to_json()``, the JSON the journal stores (exactly what
earlier versions stored, so their journals still read and their reports do not change), and
``from_json()``, which reads any version's payload: a missing or malformed key gets the default the
report has always shown for it, and numbers that are not finite read as None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fabtune.tune.stats import Decision

Json = dict[str, Any]


def finite(value: Any) -> float | None:
    """A JSON-safe number: None for missing, NaN or infinite values."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _mapping(raw: Any) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _list(raw: Any) -> list[Any]:
    """A journaled list (a missing or empty one: [])."""
    return list(raw or [])


def _optional_int(raw: Any) -> int | None:
    """A journaled count; None where it is missing or not a number."""
    try:
        return None if raw is None else int(raw)
    except (TypeError, ValueError):
        return None


def _count(raw: Any) -> int:
    """A journaled count the report does not show: 0 where it is missing or not a number."""
    return _optional_int(raw or 0) or 0


# --------------------------------------------------------------------------- moves


@dataclass(frozen=True)
class MetricDecision:
    """One metric's decision (all_reduce or alltoall) as a move's outcome keeps it."""

    verdict: str = ""
    reason: str = ""
    runs: int = 0
    p_gain: float | None = None
    p_loss: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    outliers: int = 0
    p: float | None = None  # the p-value the reason cites

    @classmethod
    def of(cls, decided: Decision) -> MetricDecision:
        """The statistics' decision, its numbers as computed."""
        return cls(**asdict(decided))

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> MetricDecision | None:
        """None for a metric not journaled; ``p`` cited from the reason where an older journal lacks it."""
        if not isinstance(raw, Mapping):
            return None
        return cls(
            verdict=str(raw.get("verdict", "")),
            reason=str(raw.get("reason", "")),
            runs=int(raw.get("runs") or 0),
            p_gain=finite(raw.get("p_gain")),
            p_loss=finite(raw.get("p_loss")),
            ratio=finite(raw.get("ratio")),
            ci_low=finite(raw.get("ci_low")),
            ci_high=finite(raw.get("ci_high")),
            outliers=_count(raw.get("outliers")),
            p=finite(raw.get("p")) if "p" in raw else _cited_p(raw),
        )


def _cited_p(raw: Mapping[str, Any]) -> float | None:
    """The p-value a decision's reason cites, for journals written before decisions recorded it."""
    reason = str(raw.get("reason", ""))
    if reason.startswith("worse"):
        return finite(raw.get("p_loss"))
    if reason.startswith("no gain"):
        return None  # the futility test's p was not journaled
    return finite(raw.get("p_gain"))


@dataclass(frozen=True)
class MoveDecision:
    """What a move was decided on: both metrics' decisions, the pause rates and the pair decision;
    a repair's one line instead; nothing when the move's runs were discarded."""

    all_reduce: MetricDecision | None = None
    alltoall: MetricDecision | None = None
    pause_rate: float | None = None
    reference_pause_rate: float | None = None
    pairs: Mapping[str, Any] | None = None  # PairDecision.as_dict()
    repair: str | None = None

    def to_json(self) -> Json:
        if self.repair is not None:
            return {"repair": self.repair}
        if self.all_reduce is None or self.alltoall is None:
            return {}
        return {
            "all_reduce": self.all_reduce.to_json(),
            "alltoall": self.alltoall.to_json(),
            "pause_rate": self.pause_rate,
            "reference_pause_rate": self.reference_pause_rate,
            "pairs": None if self.pairs is None else dict(self.pairs),
        }

    @classmethod
    def from_json(cls, raw: Any) -> MoveDecision:
        found = _mapping(raw)
        repair = found.get("repair")
        return cls(
            all_reduce=MetricDecision.from_json(found.get("all_reduce")),
            alltoall=MetricDecision.from_json(found.get("alltoall")),
            pause_rate=finite(found.get("pause_rate")),
            reference_pause_rate=finite(found.get("reference_pause_rate")),
            pairs=found["pairs"] if isinstance(found.get("pairs"), Mapping) else None,
            repair=None if repair is None else str(repair),
        )


@dataclass(frozen=True)
class MoveIntent:
    """What a move will do, journaled before it starts (the move step's payload until it is decided):
    its group and knobs, why, the hosts it changes, per host the NICs whose knobs change and the
    desired state; a repair move also the evidence that calls for it."""

    group: str = ""
    knobs: tuple[str, ...] = ()
    why: str = ""
    hosts: tuple[str, ...] = ()
    nics: Mapping[str, Any] = field(default_factory=dict)
    desired: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    evidence: tuple[Mapping[str, Any], ...] | None = None

    def to_json(self) -> Json:
        out: Json = {
            "group": self.group,
            "knobs": list(self.knobs),
            "why": self.why,
            "hosts": list(self.hosts),
            "nics": dict(self.nics),
            "desired": dict(self.desired),
        }
        if self.evidence is not None:
            out["evidence"] = [dict(e) for e in self.evidence]
        return out

    @classmethod
    def from_json(cls, raw: Any) -> MoveIntent:
        found = _mapping(raw)
        evidence = found.get("evidence")
        return cls(
            group=str(found.get("group") or ""),
            knobs=tuple(str(k) for k in _list(found.get("knobs"))),
            why=str(found.get("why") or ""),
            hosts=tuple(str(h) for h in _list(found.get("hosts"))),
            nics=_mapping(found.get("nics")),
            desired=_mapping(found.get("desired")),
            evidence=None if evidence is None else tuple(_list(evidence)),
        )


@dataclass(frozen=True)
class MoveOutcome:
    """A decided move's payload (kept or rolled back): its intent, why, every sample, the decision's
    numbers, the pause frames and the per-port counter deltas it measured; a rollback is verified,
    and names the hosts whose own revert fired (and rebooted) where that is what undid it.

    It reads every state of a move step: an intent alone (``intent``/``applied``, an interrupted
    move) has no samples and no decision, and an older journal may lack any key."""

    intent: MoveIntent | None = None  # None: a move whose intent was not kept (none today)
    reason: str = ""
    all_reduce: tuple[float | None, ...] = ()
    alltoall: tuple[float | None, ...] = ()
    decision: MoveDecision = field(default_factory=MoveDecision)
    pause_frames: int | None = None
    counters: Mapping[str, Mapping[str, int]] | None = None
    verified: bool | None = None
    reverted_by_host: tuple[str, ...] | None = None
    rebooted: tuple[str, ...] | None = None

    def to_json(self) -> Json:
        out: Json = {
            **(self.intent.to_json() if self.intent is not None else {}),
            "reason": self.reason,
            "all_reduce": list(self.all_reduce),
            "alltoall": list(self.alltoall),
            "decision": self.decision.to_json(),
            "pause_frames": self.pause_frames,
            "counters": None if self.counters is None else {k: dict(v) for k, v in self.counters.items()},
        }
        if self.verified is not None:
            out["verified"] = self.verified
        if self.reverted_by_host is not None:
            out["reverted_by_host"] = list(self.reverted_by_host)
        if self.rebooted is not None:
            out["rebooted"] = list(self.rebooted)
        return out

    @classmethod
    def from_json(cls, raw: Any) -> MoveOutcome:
        found = _mapping(raw)
        counters = found.get("counters")
        return cls(
            intent=MoveIntent.from_json(found),
            reason=str(found.get("reason") or ""),
            all_reduce=tuple(finite(v) for v in _list(found.get("all_reduce"))),
            alltoall=tuple(finite(v) for v in _list(found.get("alltoall"))),
            decision=MoveDecision.from_json(found.get("decision")),
            pause_frames=_optional_int(found.get("pause_frames")),
            counters=counters if isinstance(counters, Mapping) else None,
            verified=None if found.get("verified") is None else bool(found["verified"]),
            reverted_by_host=_strings_or_none(found.get("reverted_by_host")),
            rebooted=_strings_or_none(found.get("rebooted")),
        )


def _strings_or_none(raw: Any) -> tuple[str, ...] | None:
    return None if raw is None else tuple(str(v) for v in _list(raw))


# --------------------------------------------------------------------------- measurements


@dataclass(frozen=True)
class FactsPayload:
    """The facts phase: the hosts read, the fabric type and each host's RDMA ports (line rate, layer)."""

    hosts: tuple[str, ...] = ()
    fabric_type: str | None = None
    ports: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            "hosts": list(self.hosts),
            "fabric_type": self.fabric_type,
            "ports": {h: [dict(p) for p in ports] for h, ports in self.ports.items()},
        }

    @classmethod
    def from_json(cls, raw: Any) -> FactsPayload:
        found = _mapping(raw)
        kind = found.get("fabric_type")
        return cls(
            hosts=tuple(sorted(str(h) for h in _list(found.get("hosts")))),
            fabric_type=str(kind) if kind else None,
            ports=_mapping(found.get("ports")),
        )


@dataclass(frozen=True)
class BaselinePayload:
    """A measured baseline: the samples of both metrics, their noise floor, the pause frames and
    counter deltas, the kept ib_write_bw round and its slow pairs, the transport checks and the
    decision policy the moves are judged with."""

    all_reduce: tuple[float | None, ...] = ()
    alltoall: tuple[float | None, ...] = ()
    noise_floor: float | None = None
    pause_frames: int | None = None
    counters: Mapping[str, Mapping[str, int]] | None = None
    pairs: Mapping[str, Any] | None = None  # the pair round: pairs, incast, errors
    slow_pairs: tuple[str, ...] = ()
    slow_ports: tuple[Mapping[str, Any], ...] = ()  # the ports that explain slow pairs (SlowPort.to_json)
    checks: tuple[Mapping[str, Any], ...] = ()
    policy: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            "all_reduce": list(self.all_reduce),
            "alltoall": list(self.alltoall),
            "noise_floor": self.noise_floor,
            "pause_frames": self.pause_frames,
            "counters": None if self.counters is None else {k: dict(v) for k, v in self.counters.items()},
            "pairs": None if self.pairs is None else dict(self.pairs),
            "slow_pairs": list(self.slow_pairs),
            "slow_ports": [dict(p) for p in self.slow_ports],
            "checks": [dict(c) for c in self.checks],
            "policy": dict(self.policy),
        }

    @classmethod
    def from_json(cls, raw: Any) -> BaselinePayload:
        found = _mapping(raw)
        counters, pairs = found.get("counters"), found.get("pairs")
        return cls(
            all_reduce=tuple(finite(v) for v in _list(found.get("all_reduce"))),
            alltoall=tuple(finite(v) for v in _list(found.get("alltoall"))),
            noise_floor=finite(found.get("noise_floor")),
            pause_frames=_optional_int(found.get("pause_frames")),
            counters=counters if isinstance(counters, Mapping) else None,
            pairs=pairs if isinstance(pairs, Mapping) else None,
            slow_pairs=tuple(str(line) for line in _list(found.get("slow_pairs"))),
            slow_ports=tuple(p for p in _list(found.get("slow_ports")) if isinstance(p, Mapping)),
            checks=tuple(_list(found.get("checks"))),
            policy=_mapping(found.get("policy")),
        )


@dataclass(frozen=True)
class BaselineFailedPayload:
    """A baseline that failed: the benchmark's errors, and the by-host diagnosis where one ran."""

    errors: tuple[str, ...] = ()
    checks: tuple[Mapping[str, Any], ...] | None = None

    def to_json(self) -> Json:
        out: Json = {"errors": list(self.errors)}
        if self.checks is not None:
            out["checks"] = [dict(c) for c in self.checks]
        return out

    @classmethod
    def from_json(cls, raw: Any) -> BaselineFailedPayload:
        found = _mapping(raw)
        checks = found.get("checks")
        return cls(
            errors=tuple(str(e) for e in _list(found.get("errors"))),
            checks=None if checks is None else tuple(_list(checks)),
        )


@dataclass(frozen=True)
class FinalPayload:
    """The final phase: the state the run leaves, its reference samples, how much was measured,
    the plan (per group, and each candidate's hosts) and the slow pairs of the tuned state."""

    state: Mapping[str, Any] | None = None
    all_reduce: tuple[float | None, ...] = ()
    alltoall: tuple[float | None, ...] = ()
    runs: int = 0
    pair_rounds: int = 0
    planned: tuple[tuple[str, ...], ...] = ()
    slow_pairs: tuple[str, ...] = ()
    slow_ports: tuple[Mapping[str, Any], ...] = ()  # the ports that explain slow pairs (SlowPort.to_json)
    planned_hosts: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            "state": None if self.state is None else dict(self.state),
            "all_reduce": list(self.all_reduce),
            "alltoall": list(self.alltoall),
            "runs": self.runs,
            "pair_rounds": self.pair_rounds,
            "planned": [list(group) for group in self.planned],
            "slow_pairs": list(self.slow_pairs),
            "slow_ports": [dict(p) for p in self.slow_ports],
            "planned_hosts": {name: list(hosts) for name, hosts in self.planned_hosts.items()},
        }

    @classmethod
    def from_json(cls, raw: Any) -> FinalPayload:
        found = _mapping(raw)
        state = found.get("state")
        return cls(
            state=state if isinstance(state, Mapping) else None,
            all_reduce=tuple(finite(v) for v in _list(found.get("all_reduce"))),
            alltoall=tuple(finite(v) for v in _list(found.get("alltoall"))),
            runs=_count(found.get("runs")),
            pair_rounds=_count(found.get("pair_rounds")),
            planned=tuple(tuple(str(n) for n in _list(g)) for g in _list(found.get("planned"))),
            slow_pairs=tuple(str(line) for line in _list(found.get("slow_pairs"))),
            slow_ports=tuple(p for p in _list(found.get("slow_ports")) if isinstance(p, Mapping)),
            planned_hosts=_mapping(found.get("planned_hosts")),
        )


@dataclass(frozen=True)
class PairsPayload:
    """A pair matrix step (``pairs baseline``, ``pairs final``): each pair run (``PairResult``) and,
    where the decision round served as the matrix, that it did; or why it could not run."""

    pairs: tuple[Mapping[str, Any], ...] = ()
    measured: str | None = None
    error: str | None = None

    def to_json(self) -> Json:
        if self.error is not None:
            return {"error": self.error}
        out: Json = {"pairs": [dict(p) for p in self.pairs]}
        if self.measured is not None:
            out["measured"] = self.measured
        return out

    @classmethod
    def from_json(cls, raw: Any) -> PairsPayload:
        found = _mapping(raw)
        measured, error = found.get("measured"), found.get("error")
        return cls(
            pairs=tuple(_list(found.get("pairs"))),
            measured=None if measured is None else str(measured),
            error=None if error is None else str(error),
        )


@dataclass(frozen=True)
class ResultPayload:
    """The result step: the tuned desired state's path and the model's best (testbed runs only)."""

    tuned_desired: str | None = None
    oracle: Mapping[str, Any] | None = None

    def to_json(self) -> Json:
        oracle = None if self.oracle is None else dict(self.oracle)
        return {"tuned_desired": self.tuned_desired, "oracle": oracle}

    @classmethod
    def from_json(cls, raw: Any) -> ResultPayload:
        found = _mapping(raw)
        oracle, tuned = found.get("oracle"), found.get("tuned_desired")
        return cls(
            tuned_desired=None if tuned is None else str(tuned),
            oracle=oracle if isinstance(oracle, Mapping) else None,
        )


# --------------------------------------------------------------------------- failures and resume


@dataclass(frozen=True)
class FailedRunPayload:
    """A benchmark repetition that failed (a ``benchmark`` step, state ``failed``): its evidence
    (``FailedRun.evidence()``) and what the run did next (retried once, or no retry left)."""

    evidence: Mapping[str, Any] = field(default_factory=dict)
    then: str = ""

    def to_json(self) -> Json:
        return {**self.evidence, "then": self.then}

    @classmethod
    def from_json(cls, raw: Any) -> FailedRunPayload:
        found = dict(_mapping(raw))
        return cls(evidence=found, then=str(found.pop("then", "") or ""))


@dataclass(frozen=True)
class PairsUnavailablePayload:
    """ib_write_bw over rdma_cm that could not run in a state (a ``benchmark`` step, ``failed``):
    why, the state, and what the run does instead."""

    error: str = ""
    state: str = ""
    then: str = ""

    def to_json(self) -> Json:
        return {"error": self.error, "state": self.state, "then": self.then}

    @classmethod
    def from_json(cls, raw: Any) -> PairsUnavailablePayload:
        found = _mapping(raw)
        return cls(*(str(found.get(k) or "") for k in ("error", "state", "then")))


UNDONE_ON_RESUME = "interrupted; undone on resume"


def undone_on_resume(intent: Mapping[str, Any]) -> Json:
    """An interrupted move's payload once a resume rolled it back (verified): its intent exactly as
    the interrupted run journaled it (any version), with the reason (read by ``MoveOutcome``)."""
    return {**intent, "verified": True, "reason": UNDONE_ON_RESUME}
