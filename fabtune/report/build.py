"""Report documents built from the journal alone: the run, its steps and its snapshots.

Every figure in a report comes from what the run journaled (``fabtune.journal``), so a report can
be regenerated at any time (``fabtune report RUN``) and equals the one written when the run ended.
Nothing here reads a host, a clock or a random source (confidence intervals use a fixed seed).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fabtune import linkrate
from fabtune.journal import Journal, Run, Step
from fabtune.tune.payloads import (
    BaselineFailedPayload,
    BaselinePayload,
    FactsPayload,
    FinalPayload,
    MetricDecision,
    MoveIntent,
    MoveOutcome,
    PairsPayload,
    ResultPayload,
    finite,
)

_RATE_RE = re.compile(r"^\s*(?P<gbps>\d+(?:\.\d+)?)\s*Gb/sec")
SLOW_PORT_CHECK = "ib_write_bw port (rdma_cm)"
SLOW_ENDS_RE = re.compile(r"^(?P<client>\S+) \S+ -> (?P<server>\S+) \S+: ")
# A healthy rack's all_reduce busbw per GPU at 8 GiB is about 0.9 of R x C_min / 8 (NCCL's protocol
# efficiency and the size ramp: docs/operations.md, bus bandwidth reference); bootstrap flags < 0.8.
RULE_OF_THUMB = 0.9
# The noise band around a reference: +- this many noise floors (robust CV of the baseline runs),
# where about 95 % of single runs of an unchanged rack fall.
NOISE_BAND = 2.0
SCHEMA_ID = "fabtune.report"
SCHEMA_VERSION = 1
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95


# --------------------------------------------------------------------------- small pure helpers



def move_label(decision: Mapping[str, Any], every: Sequence[str]) -> str:
    """A move's name, with the hosts it changed when they are not the whole rack."""
    hosts = list(decision.get("hosts") or [])
    if not hosts or sorted(hosts) == sorted(every):
        return str(decision["name"])
    return f"{decision['name']} on {', '.join(hosts)}"


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def median_ci(samples: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """The median and its percentile-bootstrap confidence interval (fixed seed: reproducible)."""
    values = np.asarray([s for s in samples if finite(s) is not None], float)
    if values.size == 0:
        return None, None, None
    med = float(np.median(values))
    if values.size == 1:
        return med, med, med
    rng = np.random.default_rng(0)
    picks = rng.integers(0, values.size, (BOOTSTRAP_SAMPLES, values.size))
    meds = np.median(values[picks], axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(meds, [tail, 100 - tail])
    return round(med, 4), round(float(low), 4), round(float(high), 4)


def series_point(seq: int, label: str, kind: str, outcome: str, samples: Iterable[Any]) -> dict[str, Any]:
    """One step of a bandwidth chart: its samples, median and confidence interval."""
    clean = [round(v, 4) for v in (finite(s) for s in samples) if v is not None]
    med, low, high = median_ci(clean)
    return {
        "seq": seq,
        "label": label,
        "kind": kind,
        "outcome": outcome,
        "samples": clean,
        "n": len(clean),
        "median": med,
        "ci_low": low,
        "ci_high": high,
    }


# Knobs whose value is a map (key -> value), compared and shown as one map, never as one row per
# entry. Where a map lists no entry for a key, the driver's default stands: mlx5 maps DSCP d to
# priority d >> 3 until told otherwise (mlnx_qos prints that table on a fresh port, and shows no
# table at all under PCP trust, the snapshot's "no dscp2prio").
MAP_KNOBS: dict[str, Callable[[int], Any]] = {"dscp2prio": lambda dscp: dscp >> 3}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A managed-state tree as ``path: value`` leaves (lists and map knobs are leaves: a knob's value)."""
    if isinstance(tree, Mapping) and prefix.rpartition(".")[2] not in MAP_KNOBS:
        out: dict[str, Any] = {}
        for key in sorted(tree, key=str):
            out.update(flatten(tree[key], f"{prefix}.{key}" if prefix else str(key)))
        if not tree and prefix:
            out[prefix] = {}
        return out
    return {prefix: tree} if prefix else {}


def _same(a: Any, b: Any) -> bool:
    return a == b or (a is not None and b is not None and str(a) == str(b))


def _int_key(key: Any) -> int | str:
    try:
        return int(key)
    except (TypeError, ValueError):
        return str(key)


def map_change(knob: str, before: Any, after: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The entries of a map knob whose value changed, as ``(before, after)`` maps; None if none did.

    An entry the new map does not name is not changed (a desired state names only the entries it
    manages, and an apply merges per entry); an entry the old map does not name held the driver's
    default.
    """
    default = MAP_KNOBS[knob.rpartition(".")[2]]
    old = {_int_key(k): v for k, v in (before or {}).items()} if isinstance(before, Mapping) else {}
    new = {_int_key(k): v for k, v in (after or {}).items()} if isinstance(after, Mapping) else {}

    def was(key: int | str) -> Any:
        return old[key] if key in old else default(key) if isinstance(key, int) else None

    changed = sorted((k for k in new if not _same(was(k), new[k])), key=lambda k: (str(type(k)), k))
    if not changed:
        return None
    return {str(k): was(k) for k in changed}, {str(k): new[k] for k in changed}


def diff_states(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every knob path whose value differs: ``(knob, before, after)``; a map knob's values are the
    entries that changed."""
    a, b = flatten(before), flatten(after)
    out: list[tuple[str, Any, Any]] = []
    for k in sorted(set(a) | set(b)):
        old, new = a.get(k), b.get(k)
        if k.rpartition(".")[2] in MAP_KNOBS:
            change = map_change(k, old, new)
            if change is not None:
                out.append((k, *change))
        elif not _same(old, new) and {_kind(old), _kind(new)} != {"empty", "none"}:
            out.append((k, old, new))
    return out


def setting_values(knob: str, before: Any, after: Any) -> tuple[str, Any, Any]:
    """A change as a settings row shows it: a map knob's changed entries only."""
    if knob.rpartition(".")[2] in MAP_KNOBS:
        change = map_change(knob, before, after)
        if change is not None:
            return knob, *change
    return knob, before, after


def _kind(value: Any) -> str:
    """``empty`` for an empty mapping (a branch without leaves), ``none`` for None, else ``value``."""
    if value is None:
        return "none"
    return "empty" if isinstance(value, Mapping) and not value else "value"


def _decision(found: MetricDecision | None) -> dict[str, Any] | None:
    """One metric's decision as the decisions table shows it."""
    if found is None:
        return None
    return {
        "verdict": found.verdict,
        "reason": found.reason,
        "runs": found.runs,
        "ratio": found.ratio,
        "ci_low": found.ci_low,
        "ci_high": found.ci_high,
        "p_gain": found.p_gain,
        "p_loss": found.p_loss,
        "p": found.p,
    }


def deciding_metric(reason: str) -> str:
    """The metric a move's reason is about: ``alltoall`` (the guard) or ``all_reduce``."""
    return "alltoall" if reason.startswith(("alltoall", "guard: alltoall")) else "all_reduce"


def _check(raw: Mapping[str, Any], phase: str) -> dict[str, Any]:
    return {
        "phase": phase,
        "check": str(raw.get("check", "")),
        "host": str(raw.get("host", "*")),
        "verdict": str(raw.get("verdict", "warn")),
        "summary": str(raw.get("summary", "")),
        "evidence": str(raw.get("evidence") or ""),
    }


def _slow_pair(line: str, phase: str) -> dict[str, Any]:
    """A slow ib_write_bw pair the tuning loop named (``client NIC -> server NIC: ...``, or by its
    label ``client->server device: ...``), as a warning on ``client->server``."""
    ends = SLOW_ENDS_RE.match(line)
    return {
        "phase": phase,
        "check": "ib_write_bw pair (rdma_cm)",
        "host": f"{ends['client']}->{ends['server']}" if ends else line.split(" ", 1)[0],
        "verdict": "warn",
        "summary": f"slow pair: {line}",
        "evidence": line,
    }


def _slow_port(port: Mapping[str, Any], phase: str) -> dict[str, Any]:
    """A port the tuning loop found slow on several pairs (``SlowPort.to_json``), as a warning on its
    host, its slow pairs as the evidence (one a line)."""
    return {
        "phase": phase,
        "check": SLOW_PORT_CHECK,
        "host": str(port.get("host", "*")),
        "verdict": "warn",
        "summary": str(port.get("summary", "")),
        "evidence": "\n".join(str(line) for line in port.get("pairs", [])),
    }


def _slow_checks(
    lines: Sequence[str], ports: Sequence[Mapping[str, Any]], phase: str
) -> list[dict[str, Any]]:
    """Each slow port, then each slow pair that no port explains."""
    explained = {str(line) for port in ports for line in port.get("pairs", [])}
    return [_slow_port(p, phase) for p in ports] + [
        _slow_pair(line, phase) for line in lines if line not in explained]


LOSSLESS_CHECK = "lossless class (LLDP)"


def _lossless_check(host: str, line: str) -> dict[str, Any]:
    return {"phase": "plan", "check": LOSSLESS_CHECK, "host": host, "verdict": "warn", "summary": line,
            "evidence": line}


def _lossless(steps: Sequence[Step]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Where the plan's lossless class came from, and the LLDP findings and warnings as checks."""
    p = next((s.payload for s in steps if s.kind == "phase" and s.name == "lossless class"
              and s.state == "done"), None)
    if p is None:
        return None, []
    checks = [_lossless_check("*", str(line)) for line in p.get("findings") or []]
    checks += [_lossless_check(str(line).split(" ", 1)[0], str(line)) for line in p.get("warnings") or []]
    return {"source": str(p.get("source") or ""), "says": str(p.get("says") or ""),
            "class": _jsonable(p.get("class"))}, checks


def _pair(
    raw: Mapping[str, Any], source: str, threshold: float | None, retest: bool = False
) -> dict[str, Any]:
    gbps, ceiling = finite(raw.get("gbps")), finite(raw.get("ceiling_gbps"))
    share = finite(raw.get("share"))
    if share is None and gbps is not None and ceiling:
        share = gbps / ceiling
    verdict = raw.get("verdict")
    if verdict is None and threshold is not None:
        verdict = "pass" if share is not None and share >= threshold else "fail"
    counters = raw.get("counters") or {}
    return {
        "source": source,
        "server": str(raw.get("server")),
        "client": str(raw.get("client")),
        "rail": int(raw.get("rail") or 0),
        "device": str(raw.get("device") or ""),
        "gbps": gbps,
        "ceiling_gbps": ceiling,
        "share": None if share is None else round(share, 4),
        "verdict": verdict,
        "error": raw.get("error"),
        "note": str(raw.get("note") or ""),
        "retest": retest,
        "counters": {str(k): {str(c): int(v) for c, v in dict(vals).items()} for k, vals in counters.items()},
    }


def gpus_of(pairs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per rail (GPU i's NIC, mlx5_i): mean and lowest pair bandwidth against the rail's ceiling."""
    out = []
    for rail in sorted({int(p["rail"]) for p in pairs}):
        on = [p for p in pairs if p["rail"] == rail]
        values = [p["gbps"] if p["gbps"] is not None else 0.0 for p in on]
        ceiling = min((p["ceiling_gbps"] for p in on if p["ceiling_gbps"]), default=None)
        mean = sum(values) / len(values)
        out.append(
            {
                "rail": rail,
                "gpu": f"GPU{rail}",
                "device": on[0]["device"],
                "pairs": len(on),
                "mean_gbps": round(mean, 3),
                "min_gbps": round(min(values), 3),
                "ceiling_gbps": ceiling,
                "share_mean": round(mean / ceiling, 4) if ceiling else None,
                "share_min": round(min(values) / ceiling, 4) if ceiling else None,
            }
        )
    return out


def pair_counters(pairs: Sequence[Mapping[str, Any]], source: str) -> list[dict[str, Any]]:
    """Counter deltas of the pair runs, summed per host port and counter."""
    total: dict[tuple[str, str, str], int] = {}
    for p in pairs:
        for where, values in p["counters"].items():
            host, _, port = where.partition(":")
            for name, delta in values.items():
                total[(host, port, name)] = total.get((host, port, name), 0) + int(delta)
    return [
        {"source": source, "host": h, "port": port, "counter": c, "delta": d}
        for (h, port, c), d in sorted(total.items())
        if d
    ]


def step_counters(
    ports: Mapping[str, Mapping[str, Any]] | None, pause_frames: int | None, source: str
) -> list[dict[str, Any]]:
    """A tuning step's counter deltas: per host port where the run recorded them, else the rack's
    pause frames (journals written before per-port counters were kept)."""
    if ports is not None:  # read per port; a port that is not listed moved no counter
        return [
            {"source": source, "host": host, "port": port, "counter": str(name), "delta": int(delta)}
            for where, values in sorted(ports.items())
            for host, _, port in [str(where).partition(":")]
            for name, delta in sorted(dict(values).items())
            if int(delta)
        ]
    if pause_frames is None:
        return []
    return [
        {
            "source": source,
            "host": "*",
            "port": "*",
            "counter": "pause frames (rx+tx, every priority)",
            "delta": pause_frames,
        }
    ]


def _step_row(s: Step) -> dict[str, Any]:
    return {"seq": s.seq, "kind": s.kind, "name": s.name, "state": s.state, "at": _iso(s.at)}


def _run_doc(run: Run, fabric_type: str | None) -> dict[str, Any]:
    duration = round(run.ended - run.started, 1) if run.ended is not None else None
    return {
        "id": run.id,
        "kind": run.kind,
        "fabric": run.fabric,
        "fabric_type": fabric_type,
        "inventory": run.inventory,
        "profile": run.profile,
        "state": run.state,
        "started": _iso(run.started),
        "ended": _iso(run.ended),
        "duration_s": duration,
        "summary": _jsonable(run.summary),
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return finite(value)
    return value


def _empty(kind: str, run: Run, steps: Sequence[Step], fabric_type: str | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "run": _run_doc(run, fabric_type),
        "status": "running",
        "headline": "",
        "hosts": [],
        "steps": [_step_row(s) for s in steps],
        "bandwidth": [],
        "pairs": {"threshold": None, "source": None, "results": []},
        "gpus": [],
        "counters": [],
        "checks": [],
        "settings": [],
        "oracle": None,
        "job": None,
    }


# --------------------------------------------------------------------------- tune


def _rate_gbps(text: Any) -> float | None:
    match = _RATE_RE.match(str(text or ""))
    return float(match["gbps"]) if match else None


def noise_band(value: float | None, noise: float | None) -> list[float] | None:
    """``value`` +- ``NOISE_BAND`` noise floors, or None without both."""
    if value is None or noise is None:
        return None
    spread = NOISE_BAND * noise
    return [round(value * (1 - spread), 3), round(value * (1 + spread), 3)]


def busbw_reference(
    ports: Mapping[str, Sequence[Mapping[str, Any]]], state: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The per-GPU bus bandwidth a tuned rack should reach, from its ports (None when unknown).

    ``R`` is the fewest RDMA ports with a known rate on a host; the line rate is ``R x rate / 8``
    (slowest port), the reference ``R x C_min / 8`` with ``C_min`` the lowest goodput ceiling at
    the port's MTU in ``state`` (``fabtune.linkrate``; InfiniBand at 4096), as bootstrap defines it;
    the rule of thumb is ``RULE_OF_THUMB`` x the reference.
    """
    per_host: list[list[tuple[float, float]]] = []
    for host, host_ports in sorted(ports.items()):
        nics = ((state.get(host) or {}).get("nics") or {}) if isinstance(state.get(host), Mapping) else {}
        found = []
        for port in host_ports:
            rate = _rate_gbps(port.get("rate"))
            if rate is None or not port.get("netdev"):
                continue
            layer = str(port.get("link_layer") or "Ethernet")
            mtu = 4096 if linkrate.is_ib(layer) else int((nics.get(port["netdev"]) or {}).get("mtu") or 1500)
            found.append((rate, linkrate.ceiling_gbps(layer, rate, mtu)))
        per_host.append(found)
    if not per_host or not all(per_host):
        return None
    rails = min(len(found) for found in per_host)
    rate = min(r for found in per_host for r, _ in found)
    ceiling = min(c for found in per_host for _, c in found)
    reference = rails * ceiling / 8
    return {
        "rails": rails,
        "rate_gbps": rate,
        "ceiling_gbps": round(ceiling, 2),
        "line_rate_gbytes": round(rails * rate / 8, 3),
        "reference_gbytes": round(reference, 3),
        "rule_of_thumb": RULE_OF_THUMB,
        "rule_of_thumb_gbytes": round(RULE_OF_THUMB * reference, 3),
    }


def _pct(ratio: float | None) -> str:
    return "?" if ratio is None else f"{ratio - 1:+.1%}"


def _tune_pairs(doc: dict[str, Any], steps: Sequence[Step]) -> None:
    """The pair matrices a tuning run measured (``pairs baseline``, ``pairs final``): the heatmaps,
    the per-GPU rails (of the last matrix) and the pair runs' counters."""
    matrices: dict[str, list[dict[str, Any]]] = {}
    for s in steps:
        runs = PairsPayload.from_json(s.payload).pairs if s.kind == "pairs" and s.state == "done" else ()
        if runs:
            name = s.name.removeprefix("pairs ")
            matrices[name] = [_pair(r, name, None) for r in runs]
    if not matrices:
        return
    primary = "final" if "final" in matrices else next(iter(matrices))
    results = [p for m in matrices.values() for p in m]
    doc["pairs"] = {"threshold": None, "source": primary, "results": results}
    doc["gpus"] = gpus_of(matrices[primary])
    for name, found in matrices.items():
        doc["counters"] += pair_counters(found, f"pairs {name}")
    seqs = {s.name: s.seq for s in reversed(steps)}  # a source is a step's name: its first seq
    doc["counters"].sort(key=lambda c: seqs.get(str(c["source"]).removesuffix(" (resumed)"), 1 << 30))


@dataclass
class _TuneSteps:
    """What a tuning run's steps hold, gathered in one pass (series in journal order)."""

    ar: list[dict[str, Any]] = field(default_factory=list)
    aa: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    noise: float | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    final_state: Mapping[str, Any] | None = None
    final_ar: list[float] = field(default_factory=list)


def _tune_baseline(doc: dict[str, Any], acc: _TuneSteps, s: Step) -> None:
    """A measured baseline (a resumed run measures it again: the first one is the reference)."""
    p = BaselinePayload.from_json(s.payload)
    label = "baseline" if not acc.baseline else "baseline (resumed)"
    acc.baseline = acc.baseline or _measured(p.all_reduce)
    acc.noise = acc.noise if acc.noise is not None else p.noise_floor
    acc.policy = acc.policy or dict(p.policy)
    acc.ar.append(series_point(s.seq, label, "baseline", "baseline", p.all_reduce))
    acc.aa.append(series_point(s.seq, label, "baseline", "baseline", p.alltoall))
    doc["checks"] += [_check(c, "baseline") for c in p.checks]
    doc["counters"] += step_counters(p.counters, p.pause_frames, label)
    doc["checks"] += _slow_checks(p.slow_pairs, p.slow_ports, "baseline")


def _measured(samples: Iterable[float | None]) -> list[float]:
    """A step's samples that are numbers."""
    return [v for v in samples if v is not None]


def _baseline_failed(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"phase": "baseline", "check": "benchmark", "host": "*", "verdict": "fail",
         "summary": "the baseline measurement failed", "evidence": e}
        for e in BaselineFailedPayload.from_json(payload).errors[:5]
    ]


def _move_decision(s: Step, p: MoveOutcome, outcome: str, hosts: Sequence[str]) -> dict[str, Any]:
    """One move's row of the decisions table."""
    intent = p.intent or MoveIntent()
    return {
        "seq": s.seq,
        "name": s.name,
        "group": intent.group,
        "knobs": list(intent.knobs),
        "why": intent.why,
        "hosts": sorted(str(h) for h in intent.hosts or hosts),
        "outcome": outcome,
        "reason": p.reason or ("not finished" if outcome == "interrupted" else ""),
        "runs": len(p.all_reduce),
        "pause_frames": p.pause_frames,
        "all_reduce": _decision(p.decision.all_reduce),
        "alltoall": _decision(p.decision.alltoall),
    }


def _changes(
    before: Mapping[str, Any], after: Mapping[str, Any], hosts: Iterable[str], change: str, outcome: str
) -> list[dict[str, Any]]:
    """A settings row per knob that differs between two states, host by host."""
    return [
        {"host": host, "knob": knob, "before": old, "after": new, "change": change, "outcome": outcome}
        for host in hosts
        for knob, old, new in diff_states(before.get(host) or {}, after.get(host) or {})
    ]


def _tune_move(doc: dict[str, Any], acc: _TuneSteps, s: Step, snapshot: Mapping[str, Any]) -> None:
    """A move: its series points, its decision, its counters and the settings it changed."""
    p = MoveOutcome.from_json(s.payload)
    outcome = s.state if s.state in ("kept", "rolled_back") else "interrupted"
    acc.ar.append(series_point(s.seq, s.name, "move", outcome, p.all_reduce))
    acc.aa.append(series_point(s.seq, s.name, "move", outcome, p.alltoall))
    acc.decisions.append(_move_decision(s, p, outcome, doc["hosts"]))
    doc["counters"] += step_counters(p.counters, p.pause_frames, s.name)
    desired = (p.intent or MoveIntent()).desired
    doc["settings"] += _changes(snapshot, desired, sorted(desired), s.name, outcome)


def _tune_steps(doc: dict[str, Any], run: Run, steps: Sequence[Step], journal: Journal) -> _TuneSteps:
    acc = _TuneSteps()
    for s in steps:
        p = s.payload
        if s.kind == "phase" and s.name == "baseline" and s.state == "done":
            _tune_baseline(doc, acc, s)
        elif s.kind == "phase" and s.name == "baseline" and s.state == "failed":
            doc["checks"] += _baseline_failed(p)
        elif s.kind == "phase" and s.name == "final" and s.state == "done":
            final = FinalPayload.from_json(p)
            acc.final_state = final.state
            acc.final_ar = _measured(final.all_reduce)
            doc["checks"] += _slow_checks(final.slow_pairs, final.slow_ports, "tuned state")
        elif s.kind == "move":
            _tune_move(doc, acc, s, journal.snapshot_at(run.id, s.seq))
    return acc


def _tune_oracle(run: Run, steps: Sequence[Step]) -> Mapping[str, Any] | None:
    """The model's best (testbed runs only): the run's summary, or the last result step's."""
    oracle = run.summary.get("oracle") if isinstance(run.summary.get("oracle"), Mapping) else None
    for s in steps:
        found = ResultPayload.from_json(s.payload).oracle if s.kind == "result" else None
        oracle = found if found is not None else oracle
    return oracle


def _tune_bandwidth(acc: _TuneSteps, oracle: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """all_reduce (primary; the model's best as reference when known) and alltoall (guard) series."""
    ar_metric: dict[str, Any] = _metric("all_reduce busbw", "GB/s", "primary", acc.ar)
    best = finite(oracle.get("best_busbw")) if oracle else None
    if best:
        ar_metric["reference"] = best
        ar_metric["reference_label"] = "model's best reachable"
        ar_metric["reference_band"] = noise_band(best, acc.noise)
    return [ar_metric, _metric("alltoall busbw", "GB/s", "guard", acc.aa)]


def _tune_headline(run: Run, t: Mapping[str, Any]) -> tuple[str | None, str]:
    """The status (None: leave the default) and the headline of a tuning run."""
    if run.state in ("done", "rolled_back"):
        base_med, final_med = t["baseline_median"], t["final_median"]
        change = final_med / base_med if final_med and base_med else None
        moved = (
            f"all_reduce busbw {base_med:.1f} -> {final_med:.1f} GB/s ({_pct(change)})"
            if base_med and final_med
            else "no measurement"
        )
        line = f"{moved}: {t['kept']} move(s) kept, {t['rolled_back']} rolled back"
        if run.state == "rolled_back":
            line += "; the run was rolled back to its pre-run state"
        return "pass", line
    if run.state == "failed":
        return "fail", f"tuning failed: {run.summary.get('error') or 'see the steps'}"
    return None, f"tuning {run.state}: {len(t['decisions'])} move(s) so far"


def build_tune(run: Run, steps: Sequence[Step], journal: Journal) -> dict[str, Any]:
    """A tuning run's report: the series and decisions, net settings, pairs, counters, checks."""
    step = next((s for s in steps if s.kind == "phase" and s.name == "facts"), None)
    facts = FactsPayload.from_json(step.payload if step else {})
    doc = _empty("tune", run, steps, facts.fabric_type)
    doc["hosts"] = list(facts.hosts)
    acc = _tune_steps(doc, run, steps, journal)
    lossless, lossless_checks = _lossless(steps)
    doc["checks"] += lossless_checks
    _tune_pairs(doc, steps)
    first = journal.first_snapshot(run.id)
    final = acc.final_state
    if final is not None:
        net = _changes(first, final, sorted(set(first) | set(final)), "whole run", "in effect")
        doc["settings"] = net + doc["settings"]
    base_med = median_ci(acc.baseline)[0]
    final_med = median_ci(acc.final_ar)[0] if acc.final_ar else None
    oracle = _tune_oracle(run, steps)
    doc["bandwidth"] = _tune_bandwidth(acc, oracle)
    doc["oracle"] = _jsonable(oracle) if oracle else None
    results = [ResultPayload.from_json(s.payload) for s in steps if s.kind == "result"]
    tuned = results[0].tuned_desired if results else None
    change = final_med / base_med if final_med and base_med else None
    ports = facts.ports
    summary = run.summary
    doc["tune"] = {
        "busbw_reference": busbw_reference(ports, final or first) if ports else None,
        "noise_floor": acc.noise,
        "baseline_median": base_med,
        "final_median": final_med,
        "change": None if change is None else round(change - 1, 4),
        "policy": _jsonable(acc.policy),
        "decisions": acc.decisions,
        "kept": sum(d["outcome"] == "kept" for d in acc.decisions),
        "rolled_back": sum(d["outcome"] == "rolled_back" for d in acc.decisions),
        "tuned_desired": tuned or summary.get("tuned_desired"),
        "resumed": bool(summary.get("resumed")),
        "error": summary.get("error"),
        "lossless": lossless,
    }
    status, doc["headline"] = _tune_headline(run, doc["tune"])
    if status is not None:
        doc["status"] = status
    return with_job(doc, steps)


# --------------------------------------------------------------------------- bootstrap


def _phase_checks(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """Every phase's checks (an older journal kept only the failures)."""
    out: list[dict[str, Any]] = []
    for s in steps:
        if s.kind == "phase":
            checks = s.payload.get("checks")
            kept = s.payload.get("failures") or [] if checks is None else checks
            out += [_check(c, s.name) for c in kept]
    return out


def _acceptance_pairs(doc: dict[str, Any], pay: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The acceptance's pair matrix and re-tests, its GPUs and counters; returns the matrix."""
    threshold = finite(pay.get("pair_threshold"))
    matrix = [_pair(p, "matrix", threshold) for p in pay.get("pairs") or []]
    retests = [_pair(p, "re-test", threshold, retest=True) for p in pay.get("retests") or []]
    doc["pairs"] = {"threshold": threshold, "source": "matrix", "results": matrix + retests}
    doc["gpus"] = gpus_of(matrix)
    doc["counters"] = pair_counters(matrix, "pair matrix")
    return matrix


def _baseline_settings(apply: Step | None) -> list[dict[str, Any]]:
    """What the baseline profile changed, per host and knob, and whether its apply finished."""
    outcome = "applied" if apply is None or apply.state == "done" else apply.state
    applied = (apply.payload.get("applied") if apply else None) or {}
    rows = []
    for host, changes in sorted(applied.items()):
        for c in changes:
            knob, old, new = setting_values(str(c.get("knob")), c.get("before"), c.get("after"))
            rows.append({"host": host, "knob": knob, "before": old, "after": new,
                         "change": "baseline profile", "outcome": outcome})
    return rows


def _bootstrap_headline(doc: dict[str, Any], run: Run, matrix: Sequence[Mapping[str, Any]]) -> None:
    b = doc["bootstrap"]
    if b["passed"]:
        doc["status"] = "pass"
        busbw, ref = b["busbw_gbytes"], b["busbw_reference_gbytes"]
        low = min((p["share"] for p in matrix if p["share"] is not None), default=None)
        share = f", busbw {busbw / ref:.0%} of reference" if busbw is not None and ref else ""
        lowest = f"; lowest pair {low:.0%} of ceiling" if low is not None else ""
        doc["headline"] = f"rack accepted: {len(doc['hosts'])} hosts{lowest}{share}"
    elif run.state == "running":
        doc["headline"] = f"bootstrap running ({b['phase']})"
    else:
        doc["status"] = "fail"
        failed = sum(c["verdict"] == "fail" for c in doc["checks"])
        at_fault = ", ".join(b["failed_hosts"]) or "none named (rack-wide)"
        phase = "acceptance" if b["phase"] == "done" else b["phase"]
        doc["headline"] = f"bootstrap failed at {phase}: {failed} failed check(s); hosts at fault: {at_fault}"


def build_bootstrap(run: Run, steps: Sequence[Step], journal: Journal) -> dict[str, Any]:
    """A bootstrap's report: its checks by phase, the pair matrix, busbw, the profile's changes."""
    del journal
    doc = _empty("bootstrap", run, steps)
    phases = {s.name: s for s in steps if s.kind == "phase"}
    hosts = (phases["preflight"].payload.get("hosts") if "preflight" in phases else None) or []
    doc["hosts"] = sorted(str(h) for h in hosts)
    doc["checks"] += _phase_checks(steps)
    acc, apply = phases.get("acceptance"), phases.get("apply")
    pay = acc.payload if acc else {}
    matrix = _acceptance_pairs(doc, pay)
    busbw, ref = finite(pay.get("busbw_gbytes")), finite(pay.get("busbw_reference_gbytes"))
    if acc is not None and busbw is not None:
        point = series_point(acc.seq, "acceptance", "measure", "measured", [busbw])
        metric = _metric("all_reduce busbw per GPU", "GB/s", "primary", [point])
        doc["bandwidth"] = [{**metric, "reference": ref, "reference_label": "R x C_min / 8" if ref else None}]
    doc["settings"] += _baseline_settings(apply)
    summary = run.summary
    failing = sorted({c["host"] for c in doc["checks"] if c["verdict"] == "fail" and c["host"] != "*"})
    doc["bootstrap"] = {
        "phase": str(summary.get("phase") or (steps[-1].name if steps else "preflight")),
        "passed": run.state == "passed",
        "pair_threshold": doc["pairs"]["threshold"],
        "busbw_threshold": finite(pay.get("busbw_threshold")),
        "busbw_gbytes": busbw,
        "busbw_reference_gbytes": ref,
        "changes": {
            str(h): int(n) for h, n in ((apply.payload.get("changes") if apply else None) or {}).items()
        },
        "failed_hosts": [str(h) for h in summary.get("failed_hosts") or failing],
    }
    _bootstrap_headline(doc, run, matrix)
    return with_job(with_line_rate(doc, pay), steps)


def with_line_rate(doc: dict[str, Any], acceptance: Mapping[str, Any]) -> dict[str, Any]:
    """The bootstrap's per-GPU busbw yardsticks beside its reference: the line rate R x rate / 8
    (journaled by the acceptance) and the rule of thumb (``RULE_OF_THUMB`` x the reference)."""
    ref = doc["bootstrap"]["busbw_reference_gbytes"]
    doc["bootstrap"]["busbw_line_rate_gbytes"] = finite(acceptance.get("busbw_line_rate_gbytes"))
    doc["bootstrap"]["rule_of_thumb_gbytes"] = None if ref is None else round(RULE_OF_THUMB * ref, 3)
    return doc


# --------------------------------------------------------------------------- the job (--model)

# The steps that journal a job's prediction: a bootstrap's gate, a tune run's prediction.
JOB_STEPS = {("phase", "job gate"), ("job", "job prediction")}
PREDICTED = ("acceptance", "baseline", "final")  # the measured states a prediction is made from


def _prediction(state: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """One journaled prediction (``GateResult.record``) as the report shows it."""
    step: Mapping[str, Any] = raw["step"] if isinstance(raw.get("step"), Mapping) else {}
    shares: Mapping[str, Any] = raw["shares"] if isinstance(raw.get("shares"), Mapping) else {}
    return {
        "state": state,
        "nodes": int(raw.get("nodes") or 0),
        "option": str(raw.get("option") or ""),
        "per_gpu_gbytes": finite(raw.get("per_gpu_gbytes")),
        "mfu": finite(raw.get("mfu")),
        "passed": bool(raw.get("passed")),
        "step_s": finite(step.get("step_s")),
        "tokens_per_s": finite(step.get("tokens_per_s")),
        "shares": {k: finite(shares.get(k)) for k in ("compute", "bubble", "fabric", "nvlink")},
        "line": str(raw.get("line") or ""),
    }


def _job_summary(name: str, nodes: int, found: Sequence[Mapping[str, Any]]) -> str:
    """One line: the acceptance's prediction (its own line), or a tune run's baseline -> final MFU."""
    by = {p["state"]: p for p in found}
    if "acceptance" in by:
        return f"job {name}: {by['acceptance']['line']}"
    mfu = {k: "?" if by.get(k, {}).get("mfu") is None else f"{by[k]['mfu']:.1%}" for k in PREDICTED[1:]}
    option = next((p["option"] for p in found), "?")
    return (
        f"job {name}: predicted MFU at N={nodes} on {option}: "
        f"baseline {mfu['baseline']} -> final {mfu['final']}"
    )


def job_section(steps: Sequence[Step]) -> dict[str, Any] | None:
    """The job a run predicted for (``--model``): the spec as validated, the target size, the
    threshold and one prediction per measured state; None when the run was given no job."""
    step = next((s for s in reversed(steps) if (s.kind, s.name) in JOB_STEPS), None)
    if step is None or not isinstance(step.payload.get("job"), Mapping):
        return None
    p, raw = step.payload, step.payload.get("predictions") or {}
    found = [_prediction(k, raw[k]) for k in PREDICTED if isinstance(raw.get(k), Mapping)]
    spec, nodes, min_mfu = _jsonable(p["job"]), int(p.get("nodes") or 0), finite(p.get("min_mfu"))
    gated = min_mfu is not None and step.state in ("done", "failed")
    return {
        "name": str(spec.get("name") or "job"),
        "spec": spec,
        "nodes": nodes,
        "min_mfu": min_mfu,
        "state": step.state,
        "predictions": found,
        "passed": (step.state == "done" and all(f["passed"] for f in found)) if gated else None,
        "summary": _job_summary(str(spec.get("name") or "job"), nodes, found) if found else "",
    }


def with_job(doc: dict[str, Any], steps: Sequence[Step]) -> dict[str, Any]:
    """``doc`` with its job section; a bootstrap stopped by the gate says so in its headline."""
    job = doc["job"] = job_section(steps)
    if job is not None and job["passed"] is False and doc["kind"] == "bootstrap":
        why = job["summary"] or str(doc["run"]["summary"].get("error") or "no prediction")
        doc["headline"] = f"rack accepted, but the job gate failed: {why}"
    return doc


# --------------------------------------------------------------------------- drift


def _items(raw: Any) -> list[dict[str, Any]]:
    return [
        {"host": str(i[0]), "knob": str(i[1]), "expected": _jsonable(i[2]), "found": _jsonable(i[3])}
        for i in raw or []
        if isinstance(i, (list, tuple)) and len(i) == 4
    ]


def _bw(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "pair_mean_gbps": finite(payload.get("pair_mean_gbps")),
        "pair_min_gbps": finite(payload.get("pair_min_gbps")),
        "busbw_gbytes": finite(payload.get("busbw_gbytes")),
        "error": payload.get("error"),
    }


def _drift_bandwidth(doc: dict[str, Any], measures: Mapping[str, Step]) -> None:
    """The before/after remediation measurements: bandwidth series, pair matrix, GPUs, counters."""
    pair_metric: list[dict[str, Any]] = []
    busbw_metric: list[dict[str, Any]] = []
    all_pairs: list[dict[str, Any]] = []
    for name in ("before", "after"):
        m = measures.get(name)
        if m is None:
            continue
        results = [{**_pair(p, name, None), "verdict": None} for p in m.payload.get("pairs") or []]
        all_pairs += results
        label = f"{name} remediation"
        pair_metric.append(series_point(m.seq, label, "measure", name, [p["gbps"] or 0.0 for p in results]))
        busbw = finite(m.payload.get("busbw_gbytes"))
        busbw_metric.append(series_point(m.seq, label, "measure", name, [busbw] if busbw is not None else []))
        doc["counters"] += pair_counters(results, f"pairs {name} remediation")
    if pair_metric:
        doc["bandwidth"] = [
            _metric("all_reduce busbw", "GB/s", "primary", busbw_metric),
            _metric("ib_write_bw per pair", "Gb/s", "guard", pair_metric),
        ]
    primary = "after" if "after" in measures else "before"
    doc["pairs"] = {"threshold": None, "source": primary if all_pairs else None, "results": all_pairs}
    doc["gpus"] = gpus_of([p for p in all_pairs if p["source"] == primary])


def _metric(name: str, unit: str, role: str, series: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "unit": unit, "role": role, "series": series, "reference": None,
            "reference_label": None}


def _drift_settings(items: Sequence[Mapping[str, Any]], outcome: str) -> list[dict[str, Any]]:
    """One settings row per drifted knob: found -> expected, and what became of it."""
    rows = []
    for i in items:
        knob, old, new = setting_values(i["knob"], i["found"], i["expected"])
        change = "drift" if outcome == "found" else "remediation"
        rows.append({"host": i["host"], "knob": knob, "before": old, "after": new, "change": change,
                     "outcome": outcome})
    return rows


def _drift_check(host: str, verdict: str, summary: str, evidence: str) -> dict[str, Any]:
    return {"phase": "drift check", "check": "drift", "host": host, "verdict": verdict, "summary": summary,
            "evidence": evidence}


def _drift_checks(
    hosts: Sequence[str], items: Sequence[Mapping[str, Any]], failed: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Each host's drift verdict: not checked (fail), drifted (warn, the knobs as evidence), or clean."""
    rows = []
    for host in hosts:
        mine = [i for i in items if i["host"] == host]
        if host in failed:
            rows.append(_drift_check(host, "fail", "could not be checked", failed[host]))
        elif mine:
            evidence = "; ".join(
                f"{i['knob']}: expected {_short(i['expected'])}, found {_short(i['found'])}" for i in mine[:8]
            ) + ("; ..." if len(mine) > 8 else "")
            summary = f"{len(mine)} knob(s) differ from the desired state"
            rows.append(_drift_check(host, "warn", summary, evidence))
        else:
            rows.append(_drift_check(host, "pass", "matches the desired state", ""))
    return rows


def _drift_remediation(steps: Sequence[Step], measures: Mapping[str, Step]) -> dict[str, Any] | None:
    """The remediation (applied, rolled back and why, bandwidth before/after, drift left), if any."""
    apply = next((s for s in steps if s.kind == "apply"), None)
    rollback = next((s for s in steps if s.kind == "rollback"), None)
    if apply is None and not measures:
        return None
    left = next((s for s in steps if s.kind == "check" and s.name == "remaining drift"), None)
    return {
        "applied": apply is not None and apply.state == "done",
        "rolled_back": rollback is not None,
        "reasons": [str(r) for r in (rollback.payload.get("reasons") if rollback else None) or []],
        "before": _bw(measures["before"].payload) if "before" in measures else None,
        "after": _bw(measures["after"].payload) if "after" in measures else None,
        "remaining": _items(left.payload.get("items")) if left else None,
    }


def _remediation_checks(remediation: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    reasons = remediation["reasons"] if remediation else []
    return [{"phase": "remediation", "check": "bandwidth", "host": "*", "verdict": "fail",
             "summary": "bandwidth got worse: rolled back", "evidence": r} for r in reasons]


def _drift_outcome(steps: Sequence[Step]) -> str:
    """found (nothing applied), remediated (applied, kept) or rolled_back."""
    if any(s.kind == "rollback" for s in steps):
        return "rolled_back"
    if any(s.kind == "apply" and s.state == "done" for s in steps):
        return "remediated"
    return "found"


def _drift_headline(
    doc: dict[str, Any], run: Run, drift: Mapping[str, Any], outcome: str
) -> tuple[str | None, str]:
    """The report's status (None: leave the default) and headline."""
    items, failed, remedy = drift["items"], drift["failed"], drift["remediation"]
    n, drifted = len(items), len({i["host"] for i in items})
    on = f"{n} knob(s) drifted on {drifted}"
    if run.state == "failed" or drift["error"]:
        return "fail", f"drift run failed: {drift['error'] or 'see the steps'}"
    if run.state == "running":
        return None, "drift run in progress"
    if outcome == "rolled_back":
        return "fail", f"{on} host(s); remediation made bandwidth worse: rolled back"
    if outcome == "remediated":
        left = len((remedy or {}).get("remaining") or [])
        tail = f"; {left} still drifted" if left else ""
        return ("warn" if left else "pass"), f"{on} host(s): remediated, bandwidth verified{tail}"
    if n or failed:
        tail = f"; {len(failed)} host(s) not checked" if failed else ""
        return "warn", f"{on} of {len(doc['hosts'])} host(s){tail}"
    return "pass", f"no drift on {len(doc['hosts'])} host(s)"


def build_drift(run: Run, steps: Sequence[Step], journal: Journal) -> dict[str, Any]:
    """A drift run's report: what drifted where, and the remediation's bandwidth check."""
    del journal
    doc = _empty("drift", run, steps)
    check = next((s for s in steps if s.kind == "check" and s.name == "drift check"), None)
    pay = check.payload if check else {}
    items = _items(pay.get("items"))
    failed = {str(h): str(w) for h, w in (pay.get("failed") or {}).items()}
    hosts = [str(h) for h in pay.get("hosts") or []] or sorted({i["host"] for i in items} | set(failed))
    doc["hosts"] = sorted(hosts)
    measures = {s.name: s for s in steps if s.kind == "measure" and s.state == "done"}
    _drift_bandwidth(doc, measures)
    remediation = _drift_remediation(steps, measures)
    outcome = _drift_outcome(steps)
    doc["settings"] += _drift_settings(items, outcome)
    doc["checks"] += _drift_checks(doc["hosts"], items, failed) + _remediation_checks(remediation)
    exit_code = run.summary.get("exit")
    doc["drift"] = {
        "source": str(pay.get("source") or ""),
        "items": items,
        "failed": failed,
        "remediation": remediation,
        "exit": int(exit_code) if isinstance(exit_code, int) else None,
        "error": run.summary.get("error"),
    }
    status, doc["headline"] = _drift_headline(doc, run, doc["drift"], outcome)
    if status is not None:
        doc["status"] = status
    return doc


def _short(value: Any) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


BUILDERS = {"tune": build_tune, "bootstrap": build_bootstrap, "drift": build_drift}


def build(journal: Journal, run_id: str) -> dict[str, Any]:
    """The report document of run ``run_id``, from the journal alone.

    Raises:
        JournalError: no such run.
        ValueError: a run kind without a report builder.
    """
    run = journal.run(run_id)
    builder = BUILDERS.get(run.kind)
    if builder is None:
        raise ValueError(f"run {run_id} is a {run.kind!r} run; reports exist for {', '.join(BUILDERS)}")
    return _jsonable(builder(run, journal.steps(run_id), journal))  # type: ignore[no-any-return]
