"""Periodic drift detection and remediation against the fabric's desired state.

``detect`` runs ``playbooks/drift.yml`` (the apply roles in check mode with diff) and builds a
per-host, per-knob report from the modules' structured results (``changes``: knob, before,
after; a config file's ``diff``), never from Ansible's stdout. ``remediate`` applies the desired
state for real between two short bandwidth measurements and rolls the change back (the facts
read before it, applied as desired state with ``fabric_enforce_couplings=false``) when bandwidth
got worse. ``prometheus_text``/``write_textfile`` export the result to node_exporter's textfile
collector; ``render_units`` gives the systemd service and timer that run it periodically.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.changes import knob_changes
from fabtune.desired import TunedState, load_tuned, tuned_path
from fabtune.errors import ConfigError, ExitStatus, FabtuneError, PlaybookFailed
from fabtune.events import Event, quiet
from fabtune.inventory import InventoryInfo
from fabtune.journal import Journal
from fabtune.lifecycle import RunContext, journaled_run
from fabtune.perf import nccl, pairs
from fabtune.perf.argv import NcclOptions, PerftestOptions
from fabtune.perf.fabric import HostView, read_hosts
from fabtune.perf.schedule import Pair, covering_rounds, rail_pairs
from fabtune.profile import check_against_rack, load_profile
from fabtune.state import HostState, trees_of

VALIDATE_MODULE = "fabric_validate"
FACTS_MODULE = "fabric_facts"
DEFAULT_TOLERANCE = 0.05
"""Remediation is rolled back when a bandwidth figure drops by more than this share (noise: the
perftest CV is about 0.5 %, nccl-tests busbw about 2 %)."""


class DriftFound(FabtuneError):
    """Drift was found (and not remediated, or the remediation was rolled back): exit 8."""

    code = ExitStatus.DRIFT_FOUND


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class DriftItem:
    """One knob of one host whose state differs from the desired state."""

    host: str
    knob: str
    expected: Any
    found: Any


@dataclass(frozen=True)
class DriftReport:
    """What a check-mode run found: drifted knobs per host, and the hosts it could not check."""

    hosts: tuple[str, ...]
    items: tuple[DriftItem, ...]
    failed: Mapping[str, str] = field(default_factory=dict)

    @property
    def drifted(self) -> bool:
        return bool(self.items)

    @property
    def drifted_hosts(self) -> list[str]:
        return sorted({i.host for i in self.items})

    def count(self, host: str) -> int:
        return sum(1 for i in self.items if i.host == host)

    def as_tuples(self) -> set[tuple[str, str, Any, Any]]:
        """``(host, knob, expected, found)`` with values as text (for comparisons and tests)."""
        return {(i.host, i.knob, show(i.expected), show(i.found)) for i in self.items}


def show(value: Any) -> str:
    """A knob value as one short line (``-`` for absent)."""
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        return (
            "{"
            + ", ".join(f"{k}: {show(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
            + "}"
        )
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def build_report(outcome: ansible.RunOutcome, hosts: Sequence[str] = ()) -> DriftReport:
    """The drift report of a check-mode run of ``drift.yml``, from its task results.

    Every changed task result becomes one item per knob: ``before`` is what the host has
    (found), ``after`` what the desired state asks for (expected).

    Args:
        outcome: the run's outcome (stats and per-task results).
        hosts: every host that was checked (hosts without drift are reported with zero knobs).

    Returns:
        The report; failed or unreachable hosts are listed with the reason, not as drift.
    """
    failed: dict[str, str] = {}
    for task in outcome.failures():
        if task.host not in failed:
            problems = task.result.get("problems")
            why = "; ".join(map(str, problems)) if isinstance(problems, list) and problems else _message(task)
            failed[task.host] = f"{task.task}: {why}"
    for host in outcome.unreachable_hosts:
        failed.setdefault(host, "unreachable")
    items = [
        DriftItem(c.host, c.knob, c.after, c.before)
        for host_changes in knob_changes(outcome.tasks).values()
        for c in host_changes
        if c.host not in failed
    ]
    seen = set(hosts) | {t.host for t in outcome.tasks} | set(failed)
    for key in ("ok", "changed", "skipped"):
        seen |= set(outcome.stats.get(key, {}))
    return DriftReport(tuple(sorted(h for h in seen if h)), tuple(items), failed)


def _message(task: ansible.TaskResult) -> str:
    msg = task.result.get("msg") or task.result.get("stderr") or "failed"
    return str(msg).strip().splitlines()[0][:300] if str(msg).strip() else "failed"


# --------------------------------------------------------------------------- desired state


@dataclass(frozen=True)
class DesiredSource:
    """The desired state drift checks against, and where it came from.

    ``hosts``: the hosts whose tuned state differs from ``desired``, each with its own (a tuned
    desired state's ``fabric_desired_hosts``); every other host is checked against ``desired``.
    """

    desired: HostState
    source: str
    hosts: Mapping[str, HostState] = field(default_factory=dict)
    # what the playbooks take besides the desired state (a tuned state's fabric_persist_roles_by_host)
    extravars: Mapping[str, Any] = field(default_factory=dict)

    def groups(self, hosts: Sequence[str]) -> list[tuple[HostState, list[str]]]:
        """``hosts`` by the state each is checked against (one group when no host has its own)."""
        return TunedState(self.desired, self.hosts).groups(hosts)


def desired_for(info: InventoryInfo, profile: Path | None) -> DesiredSource:
    """The profile when given, else the tuned desired state of the fabric's last tuning run.

    A profile is checked against the rack (fabric type, subnet-manager hosts); the tuned state is
    not, since it was read from this rack's own hosts (it keeps what they held).

    Raises:
        ConfigError: neither exists, or the desired state does not validate (or the profile does
            not fit the rack).
    """
    if profile is not None:
        loaded = load_profile(profile, need="fabric_desired")
        check_against_rack(loaded, info)
        return DesiredSource(loaded.desired, f"profile {profile}", loaded.hosts, loaded.playbook_vars())
    tuned = load_tuned(info.name)
    if tuned is None:
        raise ConfigError(
            "drift",
            [
                f"fabric {info.name!r} has no tuned desired state ({tuned_path(info.name)} does not exist: "
                "no tuning run has finished on it); give one with --profile PROFILE"
            ],
        )
    return DesiredSource(tuned.desired, f"tuned desired state {tuned_path(info.name)}", tuned.hosts,
                         tuned.playbook_vars())


def detect(
    inventory: Path, desired: HostState, hosts: Sequence[str] = (),
    own: Mapping[str, HostState] | None = None, extravars: Mapping[str, Any] | None = None,
) -> DriftReport:
    """Run ``drift.yml`` in check mode with diff and build the report.

    ``own``: hosts with a desired state of their own (checked in their own run, ``--limit``ed to
    them); every other host of ``hosts`` is checked against ``desired``. ``extravars``: what the
    desired state's source gives the playbook besides (``DesiredSource.extravars``).

    Raises:
        ConfigError: the desired state does not fit a host (the validation task failed there).
    """
    extra = extravars or {}
    if own:
        groups = DesiredSource(desired, "", own).groups(hosts)
        return merge_reports([_detect(inventory, state, group, ",".join(group), extra)
                              for state, group in groups])
    return _detect(inventory, desired, hosts, None, extra)


def merge_reports(reports: Sequence[DriftReport]) -> DriftReport:
    """One report of several check runs over disjoint hosts."""
    failed: dict[str, str] = {}
    for report in reports:
        failed.update(report.failed)
    return DriftReport(
        tuple(sorted({h for r in reports for h in r.hosts})),
        tuple(i for r in reports for i in r.items),
        failed,
    )


def _detect(
    inventory: Path, desired: HostState, hosts: Sequence[str], limit: str | None,
    extravars: Mapping[str, Any],
) -> DriftReport:
    outcome = ansible.run_playbook(
        "drift.yml", inventory, extravars={**extravars, "fabric_desired": desired.tree()}, check=True,
        diff=True, limit=limit,
    )
    invalid = [
        f"{t.host}: {p}"
        for t in outcome.failures()
        if t.module == VALIDATE_MODULE
        for p in (t.result.get("problems") or [t.result.get("msg", "invalid")])
    ]
    if invalid:
        raise ConfigError("desired state", invalid)
    return build_report(outcome, hosts)


# --------------------------------------------------------------------------- bandwidth


@dataclass(frozen=True)
class Bandwidth:
    """A short measurement: one round of ib_write_bw pairs and one all_reduce size."""

    pairs: tuple[pairs.PairResult, ...]
    busbw_gbytes: float | None
    error: str | None = None

    @property
    def pair_gbps(self) -> float:
        """The mean ib_write_bw of the round, Gb/s (a failed pair counts 0)."""
        if not self.pairs:
            return 0.0
        return sum(p.gbps or 0.0 for p in self.pairs) / len(self.pairs)

    @property
    def pair_min_gbps(self) -> float:
        return min((p.gbps or 0.0 for p in self.pairs), default=0.0)


def one_round(hosts: Sequence[str], rails: int) -> list[list[Pair]]:
    """The fewest runs of the pair schedule that put every host in a pair: its first round, and for
    an odd count the schedule's next pair of the host that round leaves idle."""
    ordered = sorted(hosts)
    return rail_pairs(covering_rounds(ordered), rails) if len(ordered) >= 2 else []


def measure(
    inventory: Path, views: Mapping[str, HostView], info: InventoryInfo, *, size: str = "1G"
) -> Bandwidth:
    """One pair round (every rail) and one all_reduce size, with the state the hosts have now."""
    hosts = sorted(views)
    rails = min(len(v.rails) for v in views.values())
    done: list[pairs.PairResult] = []
    for rnd in one_round(hosts, rails):
        done += pairs.run_round(
            inventory, rnd, views, PerftestOptions(duration_s=2), deadline_s=info.bench_timeout_s
        )
    first = views[hosts[0]]
    gpus = len([c for c in first.topo.columns if c.startswith("GPU")]) if first.topo else 1
    opts = NcclOptions(min_bytes=size, max_bytes=size, gpus_per_process=gpus, iters=5, warmup_iters=1)
    launcher: nccl.Launcher = "srun" if info.launcher == "srun" else "mpirun"
    run = nccl.run(
        inventory,
        hosts,
        opts,
        {},
        launcher=launcher,
        oob_interface=info.oob_interface,
        deadline_s=info.bench_timeout_s,
    )
    busbw = run.result.avg_busbw_gbps if run.result is not None and run.result.rows else None
    error = None if busbw is not None else (run.error or f"all_reduce_perf rc {run.rc}")
    return Bandwidth(tuple(done), busbw if busbw else None, error)


def got_worse(before: Bandwidth, after: Bandwidth, tolerance: float = DEFAULT_TOLERANCE) -> list[str]:
    """Why ``after`` is worse than ``before`` (empty when it is not): pair mean, pair minimum, busbw."""
    reasons = []
    floor = 1.0 - tolerance
    if after.pair_gbps < before.pair_gbps * floor:
        reasons.append(f"ib_write_bw mean {after.pair_gbps:.1f} < {before.pair_gbps:.1f} Gb/s before")
    if after.pair_min_gbps < before.pair_min_gbps * floor:
        reasons.append(
            f"ib_write_bw minimum {after.pair_min_gbps:.1f} < {before.pair_min_gbps:.1f} Gb/s before"
        )
    b0, b1 = before.busbw_gbytes or 0.0, after.busbw_gbytes or 0.0
    if b1 < b0 * floor or (b0 > 0 and after.busbw_gbytes is None):
        reasons.append(f"all_reduce busbw {b1:.2f} < {b0:.2f} GB/s before")
    return reasons


# --------------------------------------------------------------------------- remediation


@dataclass(frozen=True)
class Remediation:
    """What ``--remediate`` did."""

    applied: bool
    before: Bandwidth | None
    after: Bandwidth | None
    rolled_back: bool
    reasons: tuple[str, ...] = ()
    remaining: DriftReport | None = None

    @property
    def verified(self) -> bool:
        return self.applied and not self.rolled_back


@dataclass(frozen=True)
class DriftResult:
    """A whole drift run, what the command prints, exports and turns into an exit code."""

    fabric: str
    source: str
    report: DriftReport
    remediation: Remediation | None = None
    error: str | None = None
    finished: float = field(default_factory=time.time)

    @property
    def exit_status(self) -> ExitStatus:
        return exit_status(self)


def exit_status(result: DriftResult) -> ExitStatus:
    """The monitoring exit code.

    0 clean (or drift remediated and verified); 8 drift found (without --remediate, or the
    remediation was rolled back, or a host could not be checked); 1 an error.
    """
    if result.error is not None:
        return ExitStatus.ERROR
    rem = result.remediation
    if rem is not None and rem.verified and not (rem.remaining and rem.remaining.drifted):
        return ExitStatus.OK
    if result.report.drifted or result.report.failed or (rem is not None and rem.rolled_back):
        return ExitStatus.DRIFT_FOUND
    return ExitStatus.OK


def snapshot_facts(inventory: Path, hosts: Sequence[str]) -> dict[str, HostState]:
    """Each host's managed fabric state (``fabric_facts``, read-only hardware dropped)."""
    outcome = ansible.run_playbook("facts.yml", inventory, limit=",".join(hosts))
    outcome.raise_for_failure("reading the fabric state")
    out = {}
    for host, res in outcome.module_results(FACTS_MODULE).items():
        facts = dict((res.get("ansible_facts") or {}).get("fabric_facts") or {})
        facts.pop("hardware", None)
        out[host] = HostState.from_tree(facts)
    missing = sorted(set(hosts) - set(out))
    if missing:
        raise PlaybookFailed(f"reading the fabric state gave no facts for {', '.join(missing)}")
    return out


def restore(inventory: Path, snapshots: Mapping[str, HostState]) -> None:
    """Apply each host's snapshot as its desired state (couplings not enforced: it is what was)."""
    for host, state in sorted(snapshots.items()):
        ansible.run_playbook(
            "apply.yml",
            inventory,
            limit=host,
            extravars={"fabric_desired": state.tree(), "fabric_enforce_couplings": False},
        ).raise_for_failure(f"rolling back {host}")


def remediate(
    inventory: Path,
    info: InventoryInfo,
    desired: HostState,
    report: DriftReport,
    *,
    journal: Journal,
    run_id: str,
    tolerance: float = DEFAULT_TOLERANCE,
    on_event: Event | None = None,
    own: Mapping[str, HostState] | None = None,
    extravars: Mapping[str, Any] | None = None,
) -> Remediation:
    """Apply the desired state to the drifted hosts (``own``: hosts with a state of their own),
    verify bandwidth did not drop, roll back if it did.

    Every step is journaled before it is made; the pre-remediation facts are the snapshot.
    """
    emit = on_event or quiet
    hosts = report.drifted_hosts
    emit("phase", "reading the drifted hosts' state", {})
    seq = journal.step(run_id, "snapshot", "pre-remediation facts", {"hosts": hosts})
    snaps = snapshot_facts(inventory, hosts)
    journal.snapshot(run_id, seq, trees_of(snaps))
    journal.finish_step(run_id, seq, "done")

    emit("phase", "measuring bandwidth before remediation", {})
    views = read_hosts(inventory)
    seq = journal.step(run_id, "measure", "before", {})
    before = measure(inventory, views, info)
    journal.finish_step(run_id, seq, "done", _bw_payload(before))

    emit("phase", "applying the desired state", {})
    seq = journal.step(run_id, "apply", "remediate", {"hosts": hosts, "knobs": len(report.items)})
    outcomes = _apply_groups(inventory, DesiredSource(desired, "", own or {}).groups(hosts), extravars or {})
    applied = {h: [dataclasses.asdict(k) for o in outcomes for k in knob_changes(o.tasks).get(h, [])]
               for h in hosts}
    done = {"hosts": hosts, "knobs": len(report.items), "applied": {h: c for h, c in applied.items() if c}}
    failed = next((o for o in outcomes if not o.ok), None)
    if failed is not None:
        journal.finish_step(run_id, seq, "failed", done)
        emit("phase", "apply failed: rolling back", {})
        restore(inventory, snaps)
        failed.raise_for_failure("remediation")
    journal.finish_step(run_id, seq, "done", done)

    emit("phase", "measuring bandwidth after remediation", {})
    views = read_hosts(inventory)  # MTUs and ceilings may have changed
    seq = journal.step(run_id, "measure", "after", {})
    after = measure(inventory, views, info)
    journal.finish_step(run_id, seq, "done", _bw_payload(after))

    reasons = got_worse(before, after, tolerance)
    if reasons:
        emit("phase", "bandwidth got worse: rolling back", {})
        seq = journal.step(run_id, "rollback", "restore pre-remediation facts", {"reasons": reasons})
        restore(inventory, snaps)
        journal.finish_step(run_id, seq, "rolled_back")
        return Remediation(True, before, after, True, tuple(reasons))
    emit("phase", "checking nothing drifted is left", {})
    seq = journal.step(run_id, "check", "remaining drift", {})
    remaining = detect(inventory, desired, report.hosts, own, extravars)
    journal.finish_step(run_id, seq, "done", drift_payload(remaining))
    return Remediation(True, before, after, False, (), remaining)


Groups = Sequence[tuple[HostState, list[str]]]


def _apply_groups(inventory: Path, groups: Groups, extra: Mapping[str, Any]) -> list[ansible.RunOutcome]:
    """Apply each group's desired state to its hosts alone; stops at the first group that fails."""
    outcomes = []
    for state, group in groups:
        extravars = {**extra, "fabric_desired": state.tree()}
        outcome = ansible.run_playbook(
            "apply.yml", inventory, extravars=extravars, diff=True, limit=",".join(group)
        )
        outcomes.append(outcome)
        if not outcome.ok:
            break
    return outcomes


def _bw_payload(bw: Bandwidth) -> dict[str, Any]:
    return {
        "pair_mean_gbps": round(bw.pair_gbps, 3),
        "pair_min_gbps": round(bw.pair_min_gbps, 3),
        "busbw_gbytes": bw.busbw_gbytes,
        "error": bw.error,
        "pairs": [
            {
                "server": p.server,
                "client": p.client,
                "rail": p.rail,
                "gbps": p.gbps,
                "error": p.error,
                "device": p.device,
                "ceiling_gbps": p.ceiling_gbps,
                "counters": {k: dict(v) for k, v in p.counters.items()},
            }
            for p in bw.pairs
        ],
    }


def drift_payload(report: DriftReport, source: str | None = None) -> dict[str, Any]:
    """A drift check's journal payload: every drifted knob, the hosts checked, those that could not be."""
    payload: dict[str, Any] = {
        "items": [[i.host, i.knob, i.expected, i.found] for i in report.items],
        "failed": dict(report.failed),
        "hosts": list(report.hosts),
    }
    if source is not None:
        payload["source"] = source
    return payload


# --------------------------------------------------------------------------- Prometheus textfile


def run_state(result: DriftResult) -> str:
    """The state a drift run closes with: clean, drift, remediated, rolled_back or failed."""
    if result.error:
        return "failed"
    if result.remediation is not None:
        return "rolled_back" if result.remediation.rolled_back else "remediated"
    return {ExitStatus.OK: "clean", ExitStatus.DRIFT_FOUND: "drift"}.get(result.exit_status, "failed")


@dataclass
class DriftRun:
    """``fabtune drift``: the check, and the remediation when asked, as one journaled run under the
    fabric's lock (:mod:`fabtune.lifecycle`); the Prometheus textfile written on every path.

    ``result`` and ``run`` hold what the verb prints and writes, also after an error.
    """

    inventory: Path
    info: InventoryInfo
    source: DesiredSource
    profile: Path | None = None
    remediate: bool = False
    tolerance: float = DEFAULT_TOLERANCE
    textfile: Path | None = None
    result: DriftResult = field(init=False)
    run: RunContext | None = None

    def __post_init__(self) -> None:
        self.result = DriftResult(self.info.name, self.source.source, DriftReport(self.info.hosts, ()))

    def execute(self, on_event: Event | None = None) -> DriftResult:
        """Check (and remediate); the run is closed with :func:`run_state` or as failed/interrupted.

        Raises:
            LockedError: another run holds the fabric's lock (no run is journaled).
            FabtuneError: a check or remediation that failed (journaled in the run).
        """
        purpose = "drift" + (" remediation" if self.remediate else "")
        profile = str(self.profile) if self.profile else None
        try:
            with journaled_run("drift", self.info.name, self.inventory, profile=profile,
                               purpose=purpose) as run:
                self.run = run
                self._journaled(run, on_event or quiet)
        except BaseException as err:  # an interrupt or SIGTERM (a timeout) too
            if self.result.error is None:
                self.result = dataclasses.replace(self.result, error=describe_error(err))
            raise
        finally:
            if self.textfile is not None:
                write_textfile(self.textfile, prometheus_text(self.result))
        return self.result

    def _journaled(self, run: RunContext, emit: Event) -> None:
        try:
            self._check(run, emit)
        except BaseException as err:
            self.result = dataclasses.replace(self.result, error=describe_error(err))
            raise
        finally:
            result, report = self.result, self.result.report
            summary = {"knobs": len(report.items), "hosts": report.drifted_hosts, "error": result.error}
            run.end(run_state(result), {**summary, "exit": int(result.exit_status)})

    def _check(self, run: RunContext, emit: Event) -> None:
        seq = run.step("check", "drift check", {"source": self.source.source})
        report = detect(self.inventory, self.source.desired, self.info.hosts, self.source.hosts,
                        self.source.extravars)
        run.finish_step(seq, "done", drift_payload(report, self.source.source))
        self.result = DriftResult(self.info.name, self.source.source, report)
        if self.remediate and report.drifted:
            rem = remediate(
                self.inventory, self.info, self.source.desired, report,
                journal=run.journal, run_id=run.run_id, tolerance=self.tolerance, on_event=emit,
                own=self.source.hosts, extravars=self.source.extravars,
            )
            self.result = DriftResult(self.info.name, self.source.source, report, rem)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


def _num(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{int(value)}"


def prometheus_text(result: DriftResult) -> str:
    """The run as Prometheus text exposition format (version 0.0.4), one HELP/TYPE per family."""
    fab = result.fabric
    lines: list[str] = []

    def family(name: str, help_text: str, samples: Sequence[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{labels} {_num(v)}" for labels, v in samples)

    rem = result.remediation
    remaining = rem.remaining if rem is not None and rem.verified and rem.remaining is not None else None
    shown = remaining or result.report
    family(
        "fabtune_drift_knobs",
        "Knobs that differ from the desired state, per host (after remediation).",
        [(_labels(fabric=fab, host=h), float(shown.count(h))) for h in result.report.hosts],
    )
    family(
        "fabtune_drift_found_knobs",
        "Knobs found drifted by the check, per host (before remediation).",
        [(_labels(fabric=fab, host=h), float(result.report.count(h))) for h in result.report.hosts],
    )
    family(
        "fabtune_drift_host_check_failed",
        "1 when the host could not be checked.",
        [
            (_labels(fabric=fab, host=h), 1.0 if h in result.report.failed else 0.0)
            for h in result.report.hosts
        ],
    )
    family(
        "fabtune_drift_last_run_timestamp_seconds",
        "When the last drift run finished (Unix time).",
        [(_labels(fabric=fab), round(result.finished, 3))],
    )
    family(
        "fabtune_drift_last_run_success",
        "1 when the last drift run completed (clean, drift reported or remediated), 0 when it failed.",
        [(_labels(fabric=fab), 0.0 if result.error else 1.0)],
    )
    family(
        "fabtune_drift_exit_code",
        "Exit code of the last drift run (0 clean, 8 drift, else failure).",
        [(_labels(fabric=fab), float(int(result.exit_status)))],
    )
    if rem is not None:
        family(
            "fabtune_drift_remediation_rolled_back",
            "1 when the last remediation made bandwidth worse and was rolled back.",
            [(_labels(fabric=fab), 1.0 if rem.rolled_back else 0.0)],
        )
        samples = []
        for phase, bw in (("before", rem.before), ("after", rem.after)):
            if bw is None:
                continue
            samples.append(
                (_labels(fabric=fab, benchmark="ib_write_bw", stat="mean", phase=phase), bw.pair_gbps)
            )
            samples.append(
                (_labels(fabric=fab, benchmark="ib_write_bw", stat="min", phase=phase), bw.pair_min_gbps)
            )
            if bw.busbw_gbytes is not None:
                samples.append(
                    (
                        _labels(fabric=fab, benchmark="all_reduce_busbw", stat="mean", phase=phase),
                        bw.busbw_gbytes * 8,
                    )
                )
        if samples:
            family(
                "fabtune_bandwidth_gbps",
                "Bandwidth measured around the remediation, Gb/s (all_reduce busbw per GPU x 8).",
                [(lbl, round(v, 3)) for lbl, v in samples],
            )
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, text: str) -> None:
    """Write atomically (temporary file in the same directory, fsync, rename): node_exporter never
    reads a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- scheduling


UNIT_DIR = Path("/etc/systemd/system")
DEFAULT_TEXTFILE = Path("/var/lib/node_exporter/textfile_collector/fabtune.prom")
DEFAULT_INVENTORY = Path("/etc/fabtune/inventory.yml")
SERVICE = "fabtune-drift.service"
TIMER = "fabtune-drift.timer"
SYSTEMCTL_TIMEOUT_S = 120  # systemctl daemon-reload / enable --now


def drift_argv(
    inventory: Path,
    *,
    profile: Path | None = None,
    remediate: bool = False,
    textfile: Path | None = DEFAULT_TEXTFILE,
    executable: str = "/usr/local/bin/fabtune",
) -> list[str]:
    """The command line a scheduled run executes."""
    argv = [executable, "drift", "-i", str(inventory)]
    if profile is not None:
        argv += ["--profile", str(profile)]
    if remediate:
        argv.append("--remediate")
    if textfile is not None:
        argv += ["--textfile", str(textfile)]
    return argv


def render_units(
    inventory: Path = DEFAULT_INVENTORY,
    *,
    profile: Path | None = None,
    remediate: bool = False,
    textfile: Path | None = DEFAULT_TEXTFILE,
    executable: str = "/usr/local/bin/fabtune",
    on_calendar: str = "hourly",
    home: Path = Path("/var/lib/fabtune"),
) -> dict[str, str]:
    """The systemd service and timer of periodic drift runs, by file name.

    The service runs ``executable`` (``fabtune drift --install-timer`` passes the fabtune that runs
    it) with ``home`` as FABTUNE_HOME (the caller's), and remediates only when asked to.
    """
    argv = drift_argv(
        inventory, profile=profile, remediate=remediate, textfile=textfile, executable=executable
    )
    what = "check and remediation" if remediate else "check"
    service = f"""\
# Periodic fabric drift {what} (fabtune drift). Exit codes: 0 clean or remediated,
# 8 drift found or remediation rolled back (reported through the textfile, not a unit failure),
# 9 another fabtune run holds the fabric's lock, anything else a failure.
[Unit]
Description=fabtune fabric drift {what}
Documentation=https://github.com/fabtune/fabtune/blob/main/docs/operations.md
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
ExecStart={shlex.join(argv)}
SuccessExitStatus=8 9
Environment={shlex.quote(f"FABTUNE_HOME={home}").replace("%", "%%")}
Nice=10
TimeoutStartSec=1h
"""
    timer = f"""\
# Runs {SERVICE} periodically ({on_calendar}, spread over 5 minutes; missed runs catch up at boot).
[Unit]
Description=Periodic fabtune fabric drift check

[Timer]
OnCalendar={on_calendar}
RandomizedDelaySec=5min
Persistent=true
Unit={SERVICE}

[Install]
WantedBy=timers.target
"""
    return {SERVICE: service, TIMER: timer}


def cron_line(
    inventory: Path = DEFAULT_INVENTORY,
    *,
    executable: str = "/usr/local/bin/fabtune",
    remediate: bool = False,
) -> str:
    """The ``/etc/cron.d`` line equivalent to the timer (hourly at minute 17)."""
    argv = drift_argv(inventory, executable=executable, remediate=remediate)
    return f"17 * * * * root {shlex.join(argv)} >/dev/null 2>&1\n"


def install_units(units: Mapping[str, str], directory: Path = UNIT_DIR) -> list[Path]:
    """Write the units (atomically) into ``directory``; the caller enables the timer."""
    written = []
    for name, text in units.items():
        path = directory / name
        write_textfile(path, text)
        written.append(path)
    return written


def enable_timer(systemd_dir: Path = Path("/run/systemd/system")) -> list[list[str]]:
    """``systemctl daemon-reload`` then ``enable --now`` the timer; returns the commands run.

    Raises:
        ConfigError: systemd does not run this machine, or systemctl failed (its output named).
    """
    if not systemd_dir.is_dir():
        raise ConfigError("--enable", [f"systemd does not run this machine ({systemd_dir} is missing)"])
    commands = [["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", TIMER]]
    for argv in commands:
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, check=False, timeout=SYSTEMCTL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as err:
            problem = f"{' '.join(argv)}: no answer within {SYSTEMCTL_TIMEOUT_S} s"
            raise ConfigError("--enable", [problem]) from err
        if done.returncode:
            output = (done.stdout + done.stderr).strip()[-300:]
            raise ConfigError("--enable", [f"{' '.join(argv)}: exit {done.returncode}: {output}"])
    return commands


def fabtune_executable() -> str:
    """This installation's ``fabtune`` script (beside the running Python), else the PATH name."""
    candidate = Path(sys.executable).parent / "fabtune"
    return str(candidate) if candidate.exists() else "fabtune"


def describe_error(err: BaseException) -> str:
    return str(err) if isinstance(err, FabtuneError) else f"{type(err).__name__}: {err}"
